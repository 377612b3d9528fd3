"""``search_ddl.drop_fts5_table``: the revisions drop every index they replace, damaged ones too.

Hermes fails open on a damaged FTS5 index, so such files are in the field, and adoption drops
and rebuilds the indexes. SQLite 3.40's FTS5 (the standard library's on Debian 12: the store's
library wherever pysqlite3 has no wheel) reads the structure record as it opens a table to drop
it, and refused the drop ("vtable constructor failed"). Each case runs on the stores' library
and on the standard library's, each on a file only it opens.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from store_library import engine_like_the_store
from store_sql import as_a_revision_step

from sessionstore._migrations import search_ddl


@pytest.fixture(params=["store library", "standard library"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[sa.Engine]:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    if request.param == "store library":
        engine = engine_like_the_store(url, connect_args={"isolation_level": None})
    else:
        engine = sa.create_engine(
            url, module=sqlite3, connect_args={"isolation_level": None}, poolclass=sa.NullPool
        )
    yield engine
    engine.dispose()


def _in_one_transaction(engine: sa.Engine, statements: list[str]) -> None:
    with engine.connect() as conn:
        conn.exec_driver_sql("BEGIN IMMEDIATE")
        for statement in statements:
            conn.exec_driver_sql(statement)
        conn.exec_driver_sql("COMMIT")


def _names(engine: sa.Engine) -> set[str]:
    with engine.connect() as conn:
        return {str(name) for (name,) in conn.exec_driver_sql("SELECT name FROM sqlite_master")}


def _drop(engine: sa.Engine, table: str) -> None:
    as_a_revision_step(engine, lambda conn: search_ddl.drop_fts5_table(conn, table))


@pytest.mark.parametrize("tokenizer", ["", ", tokenize='trigram'"])
def test_a_damaged_index_is_dropped_with_its_shadow_tables(
    engine: sa.Engine, tokenizer: str
) -> None:
    _in_one_transaction(engine, [
        "CREATE TABLE kept (x TEXT)",
        "INSERT INTO kept VALUES ('a row of another table')",
        f"CREATE VIRTUAL TABLE idx USING fts5(content{tokenizer})",
        *[f"INSERT INTO idx (content) VALUES ('docker deploy {n}')" for n in range(40)],
    ])  # fmt: skip
    # The structure record, damaged afterwards (as a crash or a foreign tool leaves it).
    _in_one_transaction(engine, ["UPDATE idx_data SET block = x'00ff00ff00ff' WHERE id = 10"])
    _drop(engine, "idx")
    assert not {name for name in _names(engine) if name.startswith("idx")}
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA integrity_check").scalar_one() == "ok"
        assert conn.exec_driver_sql("SELECT x FROM kept").scalars().all() == [
            "a row of another table"
        ]


def test_a_sound_index_another_table_and_no_table_at_all(engine: sa.Engine) -> None:
    _in_one_transaction(engine, [
        "CREATE VIRTUAL TABLE idx USING fts5(content)",
        "INSERT INTO idx (content) VALUES ('sound')",
        "CREATE TABLE plain (id INTEGER PRIMARY KEY, idx_data TEXT)",
        "CREATE TABLE plain_data (x TEXT)",  # a name like a shadow table's, of no index
    ])  # fmt: skip
    _drop(engine, "idx")
    _drop(engine, "plain")
    _drop(engine, "never_there")
    assert _names(engine) == {"plain_data"}
