"""``helpers.drop_columns`` on a table whose stored text holds comments with commas in them.

SQLite 3.40 (the standard library's on Debian 12; the store's library wherever pysqlite3 has no
wheel) misreads such a comment when it cuts a column out of the ``CREATE TABLE`` text, and
refuses the drop ("after drop column: incomplete input"). iot 0.21+ writes exactly that shape
(``async_delegations``, whose last column revision 0038's downgrade drops). The drop must work
on every library, keep every row, and leave the other columns as they were.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_library import engine_like_the_store
from store_sql import as_a_revision_step

from sessionstore._migrations import helpers

# iot 0.22.2's shape (hermes_state_common.py), shortened: comment lines with commas, then the
# last column.
COMMENTED_TABLE = """CREATE TABLE async_delegations (
    delegation_id TEXT PRIMARY KEY,
    state TEXT NOT NULL,  -- pending, running, done
    note TEXT DEFAULT '-- not a comment, kept',
    delivery_claimed_at REAL,
    -- Mirrors the delegation tool's own CREATE TABLE (tools/async_delegation.py
    -- ALTER TABLE ADD COLUMN used to be the only source of this column,
    -- ever run, breaking rebuild/replay pipelines that reconstruct state.db
    origin_session_id TEXT NOT NULL DEFAULT ''
)"""
KEPT_COLUMNS = ["delegation_id", "state", "note", "delivery_claimed_at"]
ROWS = [(f"d{index}", "done", None, float(index), f"s{index}") for index in range(50)]


def _library_drops_at_first_try(module: object) -> bool:
    """Does this SQLite library drop the column of COMMENTED_TABLE by itself?"""
    connection = module.connect(":memory:")  # type: ignore[attr-defined]
    try:
        connection.execute(COMMENTED_TABLE)
        connection.execute("ALTER TABLE async_delegations DROP COLUMN origin_session_id")
    except module.OperationalError:  # type: ignore[attr-defined]
        return False
    finally:
        connection.close()
    return True


def _drop(engine: sa.Engine, table: str, columns: list[str]) -> None:
    as_a_revision_step(engine, lambda _: helpers.drop_columns(table, columns))


def _fill(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql(COMMENTED_TABLE)
        conn.exec_driver_sql("CREATE INDEX idx_state ON async_delegations(state)")
        conn.exec_driver_sql(
            "INSERT INTO async_delegations VALUES (?, ?, ?, ?, ?)", ROWS
        )


def _check_dropped(engine: sa.Engine) -> str:
    with engine.connect() as conn:
        columns = conn.exec_driver_sql("PRAGMA table_xinfo(async_delegations)").all()
        assert [row[1] for row in columns] == KEPT_COLUMNS
        assert columns[2][4] == "'-- not a comment, kept'"
        assert conn.exec_driver_sql(
            "SELECT * FROM async_delegations ORDER BY rowid"
        ).all() == [row[:4] for row in ROWS]
        assert conn.exec_driver_sql("PRAGMA integrity_check").scalar_one() == "ok"
        assert conn.exec_driver_sql(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND name = 'idx_state'"
        ).scalar_one() == "idx_state"
        return str(conn.exec_driver_sql(
            "SELECT sql FROM sqlite_master WHERE name = 'async_delegations'"
        ).scalar_one())  # fmt: skip


@pytest.fixture
def store_engine(tmp_path: Path) -> Iterator[sa.Engine]:
    engine = engine_like_the_store(
        f"sqlite:///{tmp_path / 'store.db'}", connect_args={"isolation_level": None}
    )
    yield engine
    engine.dispose()


def test_the_store_library_drops_a_column_after_commas_in_comments(
    store_engine: sa.Engine,
) -> None:
    _fill(store_engine)
    _drop(store_engine, "async_delegations", ["origin_session_id"])
    stored = _check_dropped(store_engine)
    module = store_engine.dialect.dbapi
    # A library that can drop at the first try keeps Hermes's text, comments and all.
    assert ("pending, running, done" in stored) == _library_drops_at_first_try(module)


def test_the_standard_library_sqlite_drops_it_too(tmp_path: Path) -> None:
    """The standard library's SQLite, on a file only it opens (never two libraries on one
    file in one process). On Debian 12's 3.40.1 this is the failing case itself."""
    engine = sa.create_engine(
        f"sqlite:///{tmp_path / 'stdlib.db'}",
        module=sqlite3,
        connect_args={"isolation_level": None},
        poolclass=sa.NullPool,
    )
    try:
        _fill(engine)
        _drop(engine, "async_delegations", ["origin_session_id"])
        stored = _check_dropped(engine)
        assert ("pending, running, done" in stored) == _library_drops_at_first_try(sqlite3)
    finally:
        engine.dispose()


def test_the_fallback_strips_comments_and_drops(
    store_engine: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the library drops at the first try, its refusal is played once, to run the
    fallback on the real file: comments out of the stored text, then the real drop."""
    _fill(store_engine)
    real_drop = helpers.op.drop_column
    refusals = []

    def refuse_once(table: str, name: str) -> None:
        if not refusals:
            refusals.append(name)
            raise sa.exc.OperationalError(
                "ALTER TABLE", {}, Exception(f"error in table {table} after drop column")
            )
        real_drop(table, name)

    monkeypatch.setattr(helpers.op, "drop_column", refuse_once, raising=False)
    _drop(store_engine, "async_delegations", ["origin_session_id"])
    assert refusals == ["origin_session_id"]
    stored = _check_dropped(store_engine)
    assert "pending, running, done" not in stored and "'-- not a comment, kept'" in stored


def test_another_refusal_is_not_swallowed(store_engine: sa.Engine) -> None:
    _fill(store_engine)
    with store_engine.begin() as conn:
        conn.exec_driver_sql("CREATE INDEX idx_origin ON async_delegations(origin_session_id)")
    with pytest.raises(sa.exc.OperationalError, match="idx_origin"):
        _drop(store_engine, "async_delegations", ["origin_session_id"])
    with store_engine.connect() as conn:
        stored = conn.exec_driver_sql(
            "SELECT sql FROM sqlite_master WHERE name = 'async_delegations'"
        ).scalar_one()
        assert stored == COMMENTED_TABLE  # nothing of the failed call landed


_COMMENT_TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r\x00"),
    max_size=30,
)
_COMMENT = st.one_of(
    _COMMENT_TEXT.map(lambda text: f"-- {text}\n"),
    _COMMENT_TEXT.filter(lambda text: "*/" not in text).map(lambda text: f"/*{text}*/"),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    comments=st.lists(st.one_of(st.just(""), _COMMENT), min_size=8, max_size=8),
    default=st.text(
        alphabet=st.sampled_from(list("ab,-*/()'\" \n")), max_size=12
    ),
)
def test_without_comments_keeps_every_column_as_sqlite_reads_it(
    comments: list[str], default: str
) -> None:
    quoted_default = "'" + default.replace("'", "''") + "'"
    c = comments
    sql = (
        f"CREATE TABLE t ({c[0]}\n  a {c[1]}TEXT{c[2]} DEFAULT {quoted_default},{c[3]}\n"
        f"  \"b,--c\" INTEGER {c[4]}NOT NULL {c[5]}DEFAULT{c[6]}(1+2),\n  c{c[7]}\n)"
    )
    stripped = helpers.without_comments(sql)
    original = sqlite3.connect(":memory:")
    rewritten = sqlite3.connect(":memory:")
    try:
        original.execute(sql)
        rewritten.execute(stripped)
        assert (
            rewritten.execute("PRAGMA table_xinfo(t)").fetchall()
            == original.execute("PRAGMA table_xinfo(t)").fetchall()
        )
        # Nothing of a comment is left outside the quoted text.
        assert all(kind != "comment" for kind, _, _ in helpers._sql_segments(stripped))
    finally:
        original.close()
        rewritten.close()
