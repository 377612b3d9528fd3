"""Revisions 0007 and 0013 fill their trigram table only when the upgrade stops before the
revision that drops it again (0013 drops 0007's ``messages_trigram``, 0014 drops and refills
0013's ``messages_fts_trigram``), and 0014 fills it with the rows narrowed first.

An upgrade that goes on through 0014 fills the trigram index once, and leaves the very index
an upgrade stopped at 0007, 0012 or 0013 and then taken to head leaves; every stop in between
holds a filled index (FTS5's integrity-check compares an external-content index with its
view: an unfilled one over rows with CJK fails it). The killed upgrades of
``tests/storage/test_faults.py`` show a stop half-way is rolled back whole. 0014's fill skips
the rows a cheap test proves free of CJK before the GLOB; it indexes what FTS5's ``'rebuild'``
over the view indexes, compared whole on any rows a program may have stored.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import NamedTuple

import pytest
import sqlalchemy as sa
from faultlib import build_large_legacy_store
from hypothesis import given, settings
from legacy_v7_v17 import build_later_db
from sqlalchemy import event
from sqlalchemy.engine import Engine
from store_library import connect_like_the_store
from stored_values import Raw, Row, memory_store, rows

from sessionstore._migrations import search_ddl
from sessionstore.schema import migrate
from sessionstore.storage.config import sqlite_url

TRIGRAM_TABLES = ("messages_trigram", "messages_fts_trigram")
EMPTY_TOTALS = b"\x00\x00"
"""An FTS5 table's totals of one column when no row is indexed: 0 rows, 0 tokens."""
CJK_ROWS = 60


@contextmanager
def _trigram_fills() -> Iterator[list[str]]:
    """The trigram tables filled while the block runs (``'rebuild'``, or an ``INSERT ...
    SELECT`` from the rows), in order."""
    filled: list[str] = []

    def seen(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        for table in TRIGRAM_TABLES:
            rebuild = f"INSERT INTO {table}({table}) VALUES('rebuild')" in statement
            if rebuild or statement.startswith(f"INSERT INTO {table}(rowid, content) SELECT"):
                filled.append(table)

    event.listen(Engine, "before_cursor_execute", seen)
    try:
        yield filled
    finally:
        event.remove(Engine, "before_cursor_execute", seen)


def _trigram_index(path: Path, table: str) -> list[tuple[str, int, int]]:
    """Every (token, rowid, offset) ``table`` holds, after FTS5's integrity-check passed."""
    with closing(connect_like_the_store(path)) as conn:
        conn.execute(f"INSERT INTO {table}({table}, rank) VALUES('integrity-check', 1)")
        conn.execute(f"CREATE VIRTUAL TABLE temp.vocab USING fts5vocab(main, {table}, instance)")
        return conn.execute("SELECT term, doc, offset FROM temp.vocab ORDER BY 1, 2, 3").fetchall()


def _v1_file(path: Path) -> Path:
    build_large_legacy_store(path, messages=CJK_ROWS * 3, journal_mode="delete")
    return path


def _v10_file(path: Path) -> Path:
    build_later_db(path, 10)
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        session = conn.execute("SELECT id FROM sessions LIMIT 1").fetchone()[0]
        conn.executemany(
            "INSERT INTO messages (session_id, role, content, tool_name, tool_calls, timestamp) "
            "VALUES (?, 'tool', ?, 'grep', ?, 1.0)",
            [(session, f"输出 {n} 数据库", f'["迁移 {n}"]') for n in range(CJK_ROWS)],
        )
    return path


FILES = {"v1": _v1_file, "v10": _v10_file}
STOPS = {"v1": ("0007", "0012", "0013"), "v10": ("0013",)}


class OneGo(NamedTuple):
    fills: list[str]
    """The trigram tables filled during the upgrade, in order."""
    index: list[tuple[str, int, int]]
    """What ``messages_fts_trigram`` holds at head."""


@pytest.fixture(scope="module")
def upgraded_in_one_go(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], OneGo]:
    """Each Hermes file taken to head in one upgrade, once for the module."""
    made: dict[str, OneGo] = {}

    def one_go(hermes: str) -> OneGo:
        if hermes not in made:
            path = FILES[hermes](tmp_path_factory.mktemp(f"one-go-{hermes}") / "state.db")
            with _trigram_fills() as filled:
                migrate.upgrade(sqlite_url(path))
            made[hermes] = OneGo(filled, _trigram_index(path, "messages_fts_trigram"))
        return made[hermes]

    return one_go


@pytest.mark.parametrize("hermes", ["v1", "v10"])
def test_an_upgrade_past_0014_fills_the_trigram_index_once(
    upgraded_in_one_go: Callable[[str], OneGo], hermes: str
) -> None:
    upgraded = upgraded_in_one_go(hermes)
    assert upgraded.fills == ["messages_fts_trigram"]
    assert len({doc for _, doc, _ in upgraded.index}) >= CJK_ROWS


@pytest.mark.parametrize(
    ("hermes", "stop"), [(h, stop) for h in ("v1", "v10") for stop in STOPS[h]]
)
def test_an_upgrade_stopped_before_the_refill_leaves_a_filled_index(
    upgraded_in_one_go: Callable[[str], OneGo], tmp_path: Path, hermes: str, stop: str
) -> None:
    stepped = FILES[hermes](tmp_path / "stepped.db")
    migrate.upgrade(sqlite_url(stepped), stop)
    table = "messages_fts_trigram" if stop == "0013" else "messages_trigram"
    assert len({doc for _, doc, _ in _trigram_index(stepped, table)}) >= CJK_ROWS
    migrate.upgrade(sqlite_url(stepped))
    assert _trigram_index(stepped, "messages_fts_trigram") == upgraded_in_one_go(hermes).index

def _v11_trigram_index(conn: sa.Connection, fill: str) -> tuple[object, ...]:
    """The v11 trigram table filled by ``fill``: every (token, rowid, offset), every row's
    size and the totals, after FTS5's integrity-check against the view passed."""
    table = search_ddl.HERMES_TRIGRAM_TABLE
    conn.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")
    conn.exec_driver_sql(f"DROP VIEW IF EXISTS {search_ddl.HERMES_TRIGRAM_SOURCE_VIEW}")
    view, create = search_ddl._later_sqlite_ddl(over_tool_columns=True)[5:7]
    conn.exec_driver_sql(view)
    conn.exec_driver_sql(create)
    conn.exec_driver_sql(fill)
    conn.exec_driver_sql(f"INSERT INTO {table}({table}, rank) VALUES('integrity-check', 1)")
    conn.exec_driver_sql("DROP TABLE IF EXISTS temp.vocab")
    conn.exec_driver_sql(
        f"CREATE VIRTUAL TABLE temp.vocab USING fts5vocab(main, {table}, instance)"
    )
    totals = conn.exec_driver_sql(f"SELECT block FROM {table}_data WHERE id = 1").scalar()
    return (
        # A token is bytes: a BLOB's or a text's that is not UTF-8 need not decode.
        conn.exec_driver_sql(
            "SELECT CAST(term AS BLOB), doc, offset FROM temp.vocab ORDER BY 1, 2, 3"
        ).all(),
        conn.exec_driver_sql(f"SELECT id, sz FROM {table}_docsize ORDER BY id").all(),
        # With no row indexed, 'rebuild' writes the totals (0 rows, 0 tokens) and an INSERT of
        # nothing leaves the empty record FTS5 created the table with, which it reads as the
        # same zeros (and overwrites with the true totals at the first row written).
        totals or EMPTY_TOTALS,
    )


def _rebuilt_and_narrowed(stored: list[Row]) -> tuple[tuple[object, ...], tuple[object, ...]]:
    table = search_ddl.HERMES_TRIGRAM_TABLE
    with memory_store(stored) as conn:
        return (
            _v11_trigram_index(conn, f"INSERT INTO {table}({table}) VALUES('rebuild')"),
            _v11_trigram_index(conn, search_ddl.FILL_V11_TRIGRAM),
        )


@settings(max_examples=150, deadline=None)
@given(rows)
def test_the_narrowed_fill_indexes_what_rebuild_indexes(stored: list[Row]) -> None:
    rebuilt, narrowed = _rebuilt_and_narrowed(stored)
    assert narrowed == rebuilt


def test_the_narrowed_fill_keeps_cjk_in_blobs_and_before_a_nul() -> None:
    """The rows only a BLOB or a NUL-cut text make CJK are kept, so the comparison above is
    not of two empty indexes."""
    blob = Raw("数据库".encode(), as_text=False)
    stored: list[Row] = [("plain ascii", "grep", blob), ("数据库\x00", None, None), ("a", 1, None)]
    rebuilt, narrowed = _rebuilt_and_narrowed(stored)
    assert narrowed == rebuilt
    assert [row[0] for row in rebuilt[1]] == [1, 2]  # type: ignore[index]
