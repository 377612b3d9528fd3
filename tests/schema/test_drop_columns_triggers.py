"""``helpers.drop_columns`` on SQLite: the triggers that name none of the dropped columns sit
the drops out (SQLite re-checks every trigger on each ``DROP COLUMN``, ~10 ms a drop with the
search triggers) and come back as they were; a trigger that names one stays, so SQLite still
refuses a drop it depends on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from store_library import engine_like_the_store
from store_sql import as_a_revision_step

from sessionstore._migrations import helpers

SCHEMA = [
    "CREATE TABLE t (id INTEGER PRIMARY KEY, a TEXT, b TEXT, c TEXT)",
    "CREATE TABLE log (x TEXT)",
    "CREATE TRIGGER t_a AFTER INSERT ON t BEGIN INSERT INTO log VALUES (new.a); END",
    'CREATE TRIGGER "odd ""name""" AFTER DELETE ON log BEGIN SELECT 1; END',
    "CREATE TRIGGER t_c AFTER UPDATE OF c ON t BEGIN INSERT INTO log VALUES (new.c); END",
]


def _catalog(conn: sa.Connection) -> list[tuple[str, str, str]]:
    rows = conn.exec_driver_sql(
        "SELECT type, name, sql FROM sqlite_master WHERE type = 'trigger' ORDER BY name"
    )
    return [tuple(row) for row in rows]


def _drop(engine: sa.Engine, columns: list[str]) -> None:
    as_a_revision_step(engine, lambda _: helpers.drop_columns("t", columns))


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[sa.Engine]:
    engine = engine_like_the_store(
        f"sqlite:///{tmp_path / 't.db'}", connect_args={"isolation_level": None}
    )
    with engine.connect() as conn:
        for statement in SCHEMA:
            conn.exec_driver_sql(statement)
    yield engine
    engine.dispose()


def test_triggers_come_back_as_they_were(engine: sa.Engine) -> None:
    with engine.connect() as conn:
        before = _catalog(conn)
    _drop(engine, ["b"])
    with engine.connect() as conn:
        assert _catalog(conn) == before
        assert [row[1] for row in conn.exec_driver_sql("PRAGMA table_info(t)")] == [
            "id", "a", "c",
        ]  # fmt: skip
        conn.exec_driver_sql("INSERT INTO t (a, c) VALUES ('fired', 'c')")
        assert conn.exec_driver_sql("SELECT x FROM log").scalars().all() == ["fired"]


def test_a_drop_a_trigger_depends_on_is_still_refused(engine: sa.Engine) -> None:
    with engine.connect() as conn:
        before = _catalog(conn)
    with pytest.raises(sa.exc.OperationalError, match="t_c"):
        _drop(engine, ["b", "c"])
    with engine.connect() as conn:
        assert _catalog(conn) == before
        assert "b" in {row[1] for row in conn.exec_driver_sql("PRAGMA table_info(t)")}
