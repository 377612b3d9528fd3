"""The session listing's reads keep their indexes whatever ``sqlite_stat1`` says (upstream
Hermes's issue 119403, the ninth walk): files from the field carry the statistics of whatever
ran ``ANALYZE`` last, often when the store was small or before an index existed. Each test
writes such statistics into a small store, reopens it (SQLite reads them at the open) and
reads the plan of every statement a listing sends (docs/performance.md, "Plans that do not
follow the statistics"). The chain ranking itself is checked on both databases."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from sessionstore.api.session_db import SessionDB

# Statistics as they are found in files (tbl, idx, stat); None: ANALYZE's own rows only.
STALE_STATS: dict[str, list[tuple[str, str, str]] | None] = {
    # ANALYZE ran before idx_messages_session_id existed, so it has no row: SQLite then
    # guesses it selective (the upstream issue's file; 1 GB read per list there).
    "no row for the id index": None,
    # A file where the id index looks unique and the time index useless.
    "id index favoured": [
        ("messages", "idx_messages_session_id", "200000 1 1"),
        ("messages", "idx_messages_session", "200000 200000 200000"),
    ],
    # ANALYZE ran while the store was small: every session had no parent, so the parent
    # index looked useless, and each compression-ended session scanned every session.
    "analyzed when small": [
        ("sessions", None, "5"),  # type: ignore[list-item]
        ("sessions", "idx_sessions_parent", "5 5"),
        ("messages", "idx_messages_session_id", "40 40 1"),
        ("messages", "idx_messages_session", "40 40 1"),
    ],
}


def seed(db: SessionDB) -> None:
    for index in range(4):
        db.create_session(f"s{index}", "cli")
        db.append_messages_batch(f"s{index}", [
            {"role": "user" if j % 2 == 0 else "assistant", "content": f"s{index} {j}",
             "timestamp": 1_000.0 + 100 * index + j}
            for j in range(6)
        ])  # fmt: skip
    db.end_session("s0", "compression")
    db.create_session("s0-next", "cli", parent_session_id="s0")
    db.append_message("s0-next", "user", "later part", timestamp=5_000.0)


@pytest.fixture
def sqlite_db(migrated_sqlite_url: str) -> Iterator[SessionDB]:
    database = SessionDB(url=migrated_sqlite_url)
    seed(database)
    yield database
    database.close()


def with_stats(db: SessionDB, url: str, name: str) -> SessionDB:
    """``db`` closed, the file given the statistics named ``name``, and opened again."""

    def write(conn: sa.Connection) -> None:
        conn.exec_driver_sql("ANALYZE")
        conn.exec_driver_sql("DELETE FROM sqlite_stat1 WHERE idx = 'idx_messages_session_id'")
        for table, index, stat in STALE_STATS[name] or []:
            conn.execute(
                sa.text("DELETE FROM sqlite_stat1 WHERE tbl = :t AND idx IS :i"),
                {"t": table, "i": index},
            )
            conn.execute(
                sa.text("INSERT INTO sqlite_stat1 VALUES (:t, :i, :s)"),
                {"t": table, "i": index, "s": stat},
            )

    db.store.write(write)
    db.close()
    return SessionDB(url=url)


def listing_plans(db: SessionDB, **listing: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """The listing's rows, and the plan lines of every statement it ran (SQLite's own
    trace: the listing's statements go to the driver past SQLAlchemy's events)."""
    sent: list[str] = []

    def trace(dbapi_connection: Any, *_: object) -> None:
        dbapi_connection.set_trace_callback(sent.append)

    sa.event.listen(db.store.engine.pool, "checkout", trace)
    try:
        rows = db.list_sessions_rich(limit=2, **listing)
    finally:
        sa.event.remove(db.store.engine.pool, "checkout", trace)
    reads = [sql for sql in sent if sql.lstrip()[:6].upper() in ("SELECT", "WITH R")]

    def explain(conn: sa.Connection) -> list[str]:
        conn.connection.driver_connection.set_trace_callback(None)  # type: ignore[union-attr]
        return [
            row[3] for sql in reads for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql)
        ]

    return rows, db.store.read(explain)


@pytest.mark.slow  # a seeded store written, closed and opened again: 0.05-0.2 CPU s each
@pytest.mark.parametrize("stats", list(STALE_STATS))
@pytest.mark.parametrize("by_activity", [False, True])
def test_listing_reads_messages_by_session_and_time(
    sqlite_db: SessionDB, migrated_sqlite_url: str, stats: str, by_activity: bool
) -> None:
    db = with_stats(sqlite_db, migrated_sqlite_url, stats)
    try:
        rows, plans = listing_plans(db, order_by_last_active=by_activity)
    finally:
        db.close()
    assert rows and all(row["preview"] for row in rows)
    on_messages = [
        line for line in plans
        if line.split()[1:2] in (["first_user"], ["newest"], ["member_messages"])
    ]  # fmt: skip
    assert on_messages, plans
    # The preview walks a session's rows in time order and stops at the first; the activity
    # takes the index's last entry. Through the id index both read every row of the session.
    assert all("USING INDEX idx_messages_session " in line
               or "USING COVERING INDEX idx_messages_session " in line
               for line in on_messages), on_messages  # fmt: skip
    # A chain's step to its children is a look-up, never a scan of the sessions.
    assert not [line for line in plans if line.startswith("SCAN chain_child")], plans


@pytest.mark.slow  # a seeded store per dialect: 0.2 CPU s on PostgreSQL
def test_chain_ranks_by_its_newest_member_message(store_url: str) -> None:
    """The ranking by activity reads a member's newest message through its bounds: a chain
    whose later part spoke last comes first."""
    db = SessionDB(url=store_url)
    try:
        seed(db)
        ranked = [row["id"] for row in db.list_sessions_rich(order_by_last_active=True)]
    finally:
        db.close()
    # s0's chain is listed as its later part (s0-next) and ranks by its message at 5000.
    assert ranked[0] == "s0-next"
    assert ranked[1:] == ["s3", "s2", "s1"]
