"""SQLite: every message row we insert carries the ``display_order`` Hermes's
``messages_display_order_insert`` trigger would give it, bound by the insert itself, so the
trigger never fires for our writes (issue 31: its UPDATE moved the row's entries in three
display indexes, two more pages per commit). PostgreSQL has no such trigger: there the column
stays NULL, as a plain insert leaves it.

The oracle is a twin file: the same rows inserted one by one with a raw INSERT that leaves
``id`` and ``display_order`` to SQLite and the trigger, with every other change (deletions,
rewinds, archiving, orders an older Hermes left unset) made alike on both. Ids and orders must
match exactly: the id is computed as ``AUTOINCREMENT`` would, the order as the trigger does.
"""

from __future__ import annotations

import shutil
import sqlite3
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from store_library import needs_wal

from sessionstore.api.session_db import SessionDB
from sessionstore.dialects.sqlite_library import connect
from sessionstore.sql.compaction_handoff import LEGACY_SUMMARY_PREFIX, SUMMARY_END_MARKER
from sessionstore.sql.statements import INSERTED_MESSAGE_FIELDS

COLUMNS = [name for name in INSERTED_MESSAGE_FIELDS if name != "display_order"]
ORDERS = "SELECT id, session_id, display_order FROM messages ORDER BY id"


def sqlite_path(url: str) -> Path:
    return Path(url.removeprefix("sqlite:///"))


class Twins:
    """Our store and its oracle: a copy of the same file where rows arrive by raw INSERT."""

    def __init__(self, url: str, tmp: Path) -> None:
        self.path = sqlite_path(url)
        self.db = SessionDB(url=url)
        self.db.create_session("s1", "cli")
        self.db.create_session("s2", "cli")
        self.db.close()
        self.twin_path = tmp / "twin.db"
        shutil.copy(self.path, self.twin_path)
        self.db = SessionDB(url=url)
        self.twin = connect(str(self.twin_path), isolation_level=None)

    def largest_id(self) -> int:
        return int(self.ours("SELECT COALESCE(max(id), 0) FROM messages")[0][0])

    def ours(self, sql: str, *parameters: Any) -> list[tuple[Any, ...]]:
        """Raw SQL on our file through the store's own engine: a second connection of this
        process to the file would drop the store's POSIX locks when it closes."""
        with self.db.store.engine.begin() as conn:
            result = conn.exec_driver_sql(sql, parameters)
            return [tuple(row) for row in result] if result.returns_rows else []

    def replay(self, since: int) -> None:
        """Insert our rows with ids above ``since`` into the twin, one by one in id order,
        with ``id`` and ``display_order`` left to SQLite and the trigger."""
        rows = self.ours(
            f"SELECT {', '.join(COLUMNS)} FROM messages WHERE id > ? ORDER BY id", since
        )
        insert = (
            f"INSERT INTO messages ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})"
        )
        self.twin.execute("BEGIN IMMEDIATE")
        for row in rows:
            self.twin.execute(insert, row)
        self.twin.execute("COMMIT")

    def append(self, session_id: str, batch: list[dict[str, Any]]) -> list[int]:
        since = self.largest_id()
        ids = self.db.append_messages(session_id, batch)
        self.replay(since)
        return ids

    def both(self, sql: str, *parameters: Any) -> None:
        """The same raw change on both files."""
        self.ours(sql, *parameters)
        self.twin.execute(sql, parameters)

    def assert_same(self) -> list[tuple[Any, ...]]:
        ours = self.ours(ORDERS)
        assert ours == self.twin.execute(ORDERS).fetchall()
        sequence = self.ours("SELECT seq FROM sqlite_sequence")
        assert sequence == self.twin.execute("SELECT seq FROM sqlite_sequence").fetchall()
        return ours

    def close(self) -> None:
        self.db.close()
        self.twin.close()


class _closing:
    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def __enter__(self) -> Any:
        return self.conn

    def __exit__(self, *_: object) -> None:
        self.conn.close()


@pytest.fixture
def twins(migrated_sqlite_url: str, tmp_path: Path) -> Iterator[Twins]:
    pair = Twins(migrated_sqlite_url, tmp_path)
    yield pair
    pair.close()


def msg(content: str, timestamp: float, role: str = "user") -> dict[str, Any]:
    return {"role": role, "content": content, "timestamp": timestamp}


def test_an_empty_table_then_single_appends(twins: Twins) -> None:
    assert twins.append("s1", [msg("a", 1.0)]) == [1]
    twins.append("s1", [msg("b", 2.0)])
    assert twins.assert_same() == [(1, "s1", 1), (2, "s1", 2)]


def test_a_replayed_duplicate_takes_its_earlier_twins_order(twins: Twins) -> None:
    twins.append("s1", [msg("a", 1.0), msg("b", 2.0)])
    twins.append("s1", [msg("b", 2.0)])  # the same display identity as row 2
    twins.append("s2", [msg("b", 2.0)])  # another session: no peer
    assert twins.assert_same() == [(1, "s1", 1), (2, "s1", 2), (3, "s1", 2), (4, "s2", 4)]


def test_a_batch_whose_rows_share_an_identity(twins: Twins) -> None:
    twins.append("s1", [msg("x", 5.0), msg("y", 6.0), msg("x", 5.0), msg("x", 5.0)])
    assert twins.assert_same() == [(1, "s1", 1), (2, "s1", 2), (3, "s1", 1), (4, "s1", 1)]
    twins.append("s1", [msg("y", 6.0), msg("z", 7.0), msg("z", 7.0)])  # a stored peer, a new one
    assert twins.assert_same()[4:] == [(5, "s1", 2), (6, "s1", 6), (7, "s1", 6)]


def test_ids_after_rows_with_higher_ids_were_deleted(twins: Twins) -> None:
    twins.append("s1", [msg("a", 1.0), msg("b", 2.0), msg("c", 3.0)])
    twins.both("DELETE FROM messages WHERE id >= 2")
    twins.append("s1", [msg("d", 4.0)])  # AUTOINCREMENT: 4, never 2
    twins.append("s1", [msg("e", 5.0), msg("e", 5.0)])
    assert twins.assert_same() == [(1, "s1", 1), (4, "s1", 4), (5, "s1", 5), (6, "s1", 5)]


def test_every_row_deleted_then_appended(twins: Twins) -> None:
    twins.append("s1", [msg("a", 1.0), msg("a", 1.0)])
    twins.both("DELETE FROM messages")
    twins.append("s1", [msg("a", 1.0)])
    assert twins.assert_same() == [(3, "s1", 3)]


def test_peers_that_are_archived_rewound_or_unordered(twins: Twins) -> None:
    twins.append("s1", [msg("a", 1.0), msg("b", 2.0), msg("c", 3.0), msg("c", 3.0)])
    twins.both("UPDATE messages SET active = 0, compacted = 1 WHERE id = 1")  # still a peer
    twins.both("UPDATE messages SET active = 0 WHERE id = 2")  # rewound: no longer one
    twins.both("UPDATE messages SET display_order = NULL WHERE id = 3")  # an older Hermes's row
    twins.append("s1", [msg("a", 1.0), msg("b", 2.0), msg("c", 3.0)])
    assert twins.assert_same()[4:] == [(5, "s1", 1), (6, "s1", 6), (7, "s1", 3)]


def test_archive_and_compact_and_replace_write_the_triggers_orders(twins: Twins) -> None:
    twins.append("s1", [msg("a", 1.0), msg("b", 2.0)])
    since = twins.largest_id()
    twins.db.archive_and_compact("s1", [msg("b", 2.0), msg("b", 2.0), msg("n", 9.0)])
    twins.twin.execute("UPDATE messages SET active = 0, compacted = 1 WHERE id <= ?", (since,))
    twins.replay(since)
    assert twins.assert_same()[2:] == [(3, "s1", 2), (4, "s1", 2), (5, "s1", 5)]


def test_an_import_with_rewound_and_duplicate_rows(twins: Twins) -> None:
    since = twins.largest_id()
    twins.db.import_sessions([{"id": "imp", "source": "cli", "messages": [
        {"role": "user", "content": "q", "timestamp": 1.0, "active": 0},
        {"role": "user", "content": "q", "timestamp": 1.0},
        {"role": "user", "content": "q", "timestamp": 1.0},
        {"role": "assistant", "content": "r", "timestamp": 2.0, "active": 0, "compacted": 1},
        {"role": "assistant", "content": "r", "timestamp": 2.0},
    ]}])  # fmt: skip
    session = twins.ours("SELECT * FROM sessions WHERE id = 'imp'")[0]
    twins.twin.execute(f"INSERT INTO sessions VALUES ({', '.join('?' * len(session))})", session)
    twins.replay(since)
    assert twins.assert_same() == [
        (1, "imp", 1), (2, "imp", 2), (3, "imp", 2), (4, "imp", 4), (5, "imp", 4)
    ]


def test_handoff_carriers_order_as_every_row_does(twins: Twins) -> None:
    """A summary carrying a live ask has its identity (keyed by the ask) like any row, so a
    repeat of it joins the first one's display group, as the trigger gives it."""
    carrier = f"{LEGACY_SUMMARY_PREFIX} x\n{SUMMARY_END_MARKER}\nthe ask"
    twins.append("s1", [msg(carrier, 1.0), msg(carrier, 1.0), msg("the ask", 1.0)])
    assert twins.assert_same() == [(1, "s1", 1), (2, "s1", 1), (3, "s1", 1)]


# -- any mix: identities drawn from a small pool, so they collide ---------------------------------
MESSAGE = st.builds(
    msg, st.sampled_from(["a", "b"]), st.sampled_from([1.0, 2.0]),
    st.sampled_from(["user", "assistant"]),
)  # fmt: skip
STEP = st.one_of(
    st.tuples(st.just("append"), st.sampled_from(["s1", "s2"]),
              st.lists(MESSAGE, min_size=1, max_size=5)),
    st.tuples(st.just("delete newest"), st.integers(1, 3)),
    st.tuples(st.just("rewind"), st.integers(0, 30)),
    st.tuples(st.just("archive"), st.integers(0, 30)),
    st.tuples(st.just("unorder"), st.integers(0, 30)),
)  # fmt: skip


@settings(max_examples=40, deadline=None)
@given(steps=st.lists(STEP, min_size=1, max_size=8))
def test_any_mix_of_appends_and_changes_matches_the_trigger(
    migrated_sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory,
    steps: list[tuple[Any, ...]],
) -> None:  # fmt: skip
    tmp = tmp_path_factory.mktemp("mix")
    shutil.copy(migrated_sqlite_template, tmp / "state.db")
    pair = Twins(f"sqlite:///{tmp / 'state.db'}", tmp)
    try:
        for step in steps:
            if step[0] == "append":
                pair.append(step[1], step[2])
            elif step[0] == "delete newest":
                pair.both(
                    "DELETE FROM messages WHERE id IN "
                    "(SELECT id FROM messages ORDER BY id DESC LIMIT ?)", step[1]
                )  # fmt: skip
            else:
                change = {
                    "rewind": "active = 0",
                    "archive": "active = 0, compacted = 1",
                    "unorder": "display_order = NULL",
                }[step[0]]
                pair.both(f"UPDATE messages SET {change} WHERE id = ?", step[1])
            pair.assert_same()
    finally:
        pair.close()


# -- the trigger's UPDATE no longer runs: seen in the pages a commit writes ------------------------
def written_pages(path: Path, copy: Path) -> list[str]:
    """Whose page each frame of ``path``'s WAL is (read on a copy: the stdlib's build has
    ``dbstat``, and a second connection to the live file would drop the store's locks)."""
    wal = Path(f"{path}-wal").read_bytes()
    page_size = struct.unpack(">I", wal[8:12])[0]
    pages = [
        struct.unpack(">I", wal[offset : offset + 4])[0]
        for offset in range(32, len(wal) - 23, 24 + page_size)
    ]
    copy.mkdir()
    shutil.copy(path, copy / path.name)
    shutil.copy(f"{path}-wal", copy / f"{path.name}-wal")
    with _closing(sqlite3.connect(copy / path.name)) as conn:
        names = dict(conn.execute("SELECT pageno, name FROM dbstat").fetchall())
    return [names.get(page, "?") for page in pages]


@needs_wal()  # the pages written are read from the log
def test_an_append_writes_no_backfill_index_page(migrated_sqlite_url: str, tmp_path: Path) -> None:
    """The trigger's UPDATE took the row into and out of ``idx_messages_display_backfill``
    (its order NULL at first), so that index's page was written by every append; the raw
    insert that leaves the order to the trigger shows it does, ours that it no longer does."""
    path = sqlite_path(migrated_sqlite_url)
    with SessionDB(url=migrated_sqlite_url) as db:
        db.create_session("s", "cli")
        db.append_messages("s", [msg(f"m{n}", float(n)) for n in range(40)])

        def written_by(write: Callable[[], None], copy: str) -> list[str]:
            with db.store.engine.connect() as conn:
                conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            write()
            return written_pages(path, tmp_path / copy)

        def raw_insert() -> None:
            with db.store.engine.begin() as conn:
                conn.exec_driver_sql(
                    "INSERT INTO messages (session_id, role, content, timestamp, active, "
                    "display_identity, message_uid) VALUES ('s', 'user', 'raw', 99.0, 1, "
                    "x'00', 'uid')"
                )

        ours = written_by(lambda: db.append_message("s", "user", "one more"), "ours")
        theirs = written_by(raw_insert, "theirs")
        with db.store.engine.connect() as conn:
            rows = conn.exec_driver_sql(
                "SELECT id, display_order FROM messages ORDER BY id DESC LIMIT 2"
            ).fetchall()
    assert "idx_messages_display_backfill" in theirs
    assert "idx_messages_display_backfill" not in ours
    assert "messages" in ours and "idx_messages_display_page" in ours
    assert [tuple(row) for row in rows] == [(42, 42), (41, 41)]


# -- PostgreSQL: no trigger, no order -------------------------------------------------------------
def test_postgresql_leaves_display_order_unset(pg_store_url: str) -> None:
    with SessionDB(url=pg_store_url) as db:
        db.create_session("s", "cli")
        db.append_message("s", "user", "a")
        db.append_messages("s", [msg("b", 2.0), msg("b", 2.0)])
        db.archive_and_compact("s", [msg("b", 2.0)])
        with db.store.engine.begin() as conn:
            conn.exec_driver_sql(
                "INSERT INTO messages (session_id, role, content, timestamp) "
                "VALUES ('s', 'user', 'raw', 1.0)"
            )
            orders = conn.exec_driver_sql("SELECT display_order FROM messages").fetchall()
    assert len(orders) == 5 and {row[0] for row in orders} == {None}
