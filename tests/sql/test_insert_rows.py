"""``sql.statements.insert_rows``, what an import and a copy insert messages with: on SQLite as
multi-row INSERTs (``StoreDialect.multi_row_inserts``; FTS5 wrote an index segment per
single-row statement), with every row, every trigger's work (display orders of peers, the
three search indexes) and every refusal what one statement a row gives; on PostgreSQL as one
executemany, as before.
"""

from __future__ import annotations

import hashlib
import itertools
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessionstore import SessionDB
from sessionstore.sql.records import FIELD_DEFAULTS, MESSAGE_FIELDS
from sessionstore.sql.statements import insert_rows
from sessionstore.sql.tables import messages_table as messages
from sessionstore.sql.tables import sessions_table as sessions

WORDS = ["docker", "deploy", "日本語", "検索エンジン", "kubectl", "서울", "x"]
_stores = itertools.count()


def _row(index: int, draw: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {name: FIELD_DEFAULTS.get(name) for name in MESSAGE_FIELDS}
    row.update(
        id=index + 1, session_id=draw["session"], role=draw["role"], content=draw["content"],
        timestamp=1.0 + index, active=draw["active"], compacted=draw["compacted"],
        display_identity=(
            None if draw["peer"] is None else hashlib.sha256(bytes([draw["peer"]])).digest()
        ),
        display_order=draw["order"], tool_name=draw["tool"],
    )  # fmt: skip
    return row


ROWS = st.lists(
    st.fixed_dictionaries({
        "session": st.sampled_from(["a", "b"]),
        "role": st.sampled_from(["user", "assistant", "tool"]),
        "content": st.none() | st.lists(st.sampled_from(WORDS), max_size=6).map(" ".join),
        "active": st.sampled_from([1, 0]),
        "compacted": st.sampled_from([0, 1]),
        "peer": st.none() | st.integers(0, 3),
        "order": st.none() | st.integers(1, 50),
        "tool": st.none() | st.sampled_from(WORDS),
    }),
    min_size=1, max_size=90,  # three statements' worth of 30 columns a row
)  # fmt: skip


def _store_after(tmp: Path, rows: list[dict[str, Any]], *, multi_row: bool) -> SessionDB:
    db = SessionDB(url=f"sqlite:///{tmp / f'store{next(_stores)}.db'}")

    def run(conn: sa.Connection) -> None:
        conn.execute(sessions.insert(), [{"id": "a", "source": "cli", "started_at": 1.0},
                                         {"id": "b", "source": "cli", "started_at": 1.0}])
        insert_rows(conn, messages, rows, multi_row=multi_row)

    db.store.write(run)
    return db


def _everything(db: SessionDB) -> dict[str, Any]:
    with db.store.engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT * FROM messages ORDER BY id")).mappings().all()
        # a message_uid is random (revision 0041's trigger): that each row has one is compared
        found: dict[str, Any] = {
            "rows": [{**row, "message_uid": row["message_uid"] is not None} for row in rows]
        }
        for table in ("messages_fts", "messages_fts_trigram", "messages_fts_cjk_bigram"):
            exists = conn.execute(
                sa.text("SELECT 1 FROM sqlite_master WHERE name = :name"), {"name": table}
            ).first()
            if exists is None:
                continue
            conn.execute(sa.text(f"INSERT INTO {table}({table}, rank) "
                                 "VALUES('integrity-check', 1)"))  # fmt: skip
            found[table] = conn.execute(
                sa.text(f"SELECT rowid FROM {table} ORDER BY rowid")
            ).all()
    found["searches"] = {
        word: [hit["id"] for hit in db.search_messages(word, limit=200)] for word in WORDS
    }
    return found


@pytest.mark.slow  # two new stores an example
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(draws=ROWS)
def test_multi_row_inserts_leave_what_a_statement_a_row_leaves(
    tmp_path: Path, draws: list[dict[str, Any]]
) -> None:
    rows = [_row(index, draw) for index, draw in enumerate(draws)]
    one_by_one = _store_after(tmp_path, rows, multi_row=False)
    together = _store_after(tmp_path, rows, multi_row=True)
    try:
        assert _everything(together) == _everything(one_by_one)
    finally:
        one_by_one.close()
        together.close()


def test_a_refused_row_is_the_same_typed_refusal_and_writes_nothing(tmp_path: Path) -> None:
    rows = [_row(index, {"session": "a", "role": "user", "content": "docker", "active": 1,
                         "compacted": 0, "peer": None, "order": None, "tool": None})
            for index in range(40)]  # fmt: skip
    rows[35]["id"] = rows[3]["id"]  # one id twice, in the second statement
    for multi_row in (False, True):
        db = SessionDB(url=f"sqlite:///{tmp_path / f'refused{multi_row}.db'}")
        try:
            with pytest.raises(sa.exc.IntegrityError):
                _store_after_into(db, rows, multi_row=multi_row)
            assert db.message_count() == 0 and db.session_count() == 0
        finally:
            db.close()


def _store_after_into(db: SessionDB, rows: list[dict[str, Any]], *, multi_row: bool) -> None:
    def run(conn: sa.Connection) -> None:
        conn.execute(sessions.insert(), [{"id": "a", "source": "cli", "started_at": 1.0}])
        insert_rows(conn, messages, rows, multi_row=multi_row)

    db.store.write(run)


def test_rows_of_mixed_columns_and_a_named_parameter_style_go_one_by_one(store_url: str) -> None:
    """Rows that name different columns (a renumbered message has no id), and PostgreSQL's
    named parameters: one executemany, whatever is asked."""
    full = _row(0, {"session": "a", "role": "user", "content": "docker", "active": 1,
                    "compacted": 0, "peer": None, "order": None, "tool": None})  # fmt: skip
    full["id"] = 1_000_000  # past the ids a sequence gives the others
    without_id = {name: value for name, value in full.items() if name != "id"}
    with SessionDB(url=store_url) as db:
        db.create_session("a", "cli")

        def run(conn: sa.Connection) -> None:
            insert_rows(conn, messages, [full, without_id], multi_row=True)
            insert_rows(conn, messages, [without_id, without_id], multi_row=True)

        db.store.write(run)
        assert db.message_count("a") == 4
        assert [hit["session_id"] for hit in db.search_messages("docker")] == ["a"] * 4
