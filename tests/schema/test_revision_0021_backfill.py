"""Revision 0021's backfill: the bigram tokens computed in Python are exactly the SQL's.

The bigram table is contentless: a row's tokens must be the very ones its triggers compute, or
a later delete or update (Hermes's, through the triggers) removes tokens the row does not have
and leaves the ones it has. The first backfill ran the trigger's token SQL per row with the
text bound (``sqlite_fill_bigrams_row_by_row``, kept as the fallback for rows that are not
plain text); the new one computes the tokens of plain text in Python. Both fill the same
stores here and the indexes are compared whole: every (token, rowid) FTS5 holds (its
``fts5vocab`` instance table), every row's token count and the table's totals. The texts mix
CJK of 3 and 4 UTF-8 bytes across the 96-byte chunk edges with ASCII, other scripts, NUL,
the code points around the surrogates and at the ends of the CJK ranges, numbers, BLOBs and
bytes that are not UTF-8 (encoded surrogates, overlong and cut sequences).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from real_hermes import RealHermes
from stored_values import Raw, Row, memory_store, rows

from sessionstore._migrations import revision_0021_ddl as cjk_ddl
from sessionstore.schema import migrate
from sessionstore.search.sqlite_bigram_fill import fill_bigrams
from sessionstore.storage.config import sqlite_url
from sessionstore.storage.engine import create_store_engine

TABLE = cjk_ddl.BIGRAM_TABLE
class Contents(NamedTuple):
    instances: list[tuple[bytes, int]]
    sizes: list[tuple[int, bytes]]
    totals: bytes | None


def _contents(conn: sa.Connection) -> Contents:
    conn.exec_driver_sql("DROP TABLE IF EXISTS temp.bigram_vocab")
    conn.exec_driver_sql(
        f"CREATE VIRTUAL TABLE temp.bigram_vocab USING fts5vocab(main, {TABLE}, instance)"
    )
    instances = conn.exec_driver_sql(
        "SELECT CAST(term AS BLOB), doc FROM temp.bigram_vocab ORDER BY 1, 2"
    ).all()
    sizes = conn.exec_driver_sql(f"SELECT id, sz FROM {TABLE}_docsize ORDER BY id").all()
    totals = conn.exec_driver_sql(f"SELECT block FROM {TABLE}_data WHERE id = 1").scalar()
    conn.exec_driver_sql(f"INSERT INTO {TABLE}({TABLE}) VALUES('integrity-check')")
    return Contents([tuple(r) for r in instances], [tuple(r) for r in sizes], totals)


Outcome = tuple[str, Contents | str]
Fill = Callable[[sa.Connection], None]


def _filled(conn: sa.Connection, fill: Fill) -> Outcome:
    """What ``fill`` leaves in an empty bigram table, or the error it raises (by class)."""
    conn.exec_driver_sql(f"DROP TABLE IF EXISTS {TABLE}")
    conn.exec_driver_sql(cjk_ddl.SQLITE_CREATE_BIGRAM)
    try:
        with conn.begin_nested():
            fill(conn)
    except sa.exc.SQLAlchemyError as exc:
        return ("error", type(exc.orig if isinstance(exc, sa.exc.DBAPIError) else exc).__name__)
    return ("filled", _contents(conn))


def _both_fills(stored: list[Row]) -> tuple[Outcome, Outcome]:
    with memory_store(stored) as conn:
        return (
            _filled(conn, cjk_ddl.sqlite_fill_bigrams_row_by_row),
            _filled(conn, cjk_ddl.sqlite_fill_bigrams),
        )


def _repair_fill(conn: sa.Connection) -> None:
    fill_bigrams(conn, TABLE)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows)
def test_python_tokens_fill_the_index_as_the_token_sql_does(
    stored: list[Row],
) -> None:
    first, new = _both_fills(stored)
    assert new == first
    # The runtime's fill (a rebuild, db doctor --fix, a repair mid-write) keeps its own copy,
    # with the head's token SQL (revision 0044's shape: the same tokens) for other rows.
    with memory_store(stored) as conn:
        assert _filled(conn, _repair_fill) == first


def test_the_comparison_sees_tokens_fallbacks_and_errors() -> None:
    """The equality above is not of two empty tables: CJK text is indexed, rows with a BLOB or
    a NUL take the fallback (the trigger's test stops at a NUL: row 3 is not indexed), and
    text that is not UTF-8 fails both fills alike."""
    blob = Raw("数".encode(), as_text=False)
    stored = [("数据库 迁移x", None, blob), ("数\x00据a", "é", 7), ("a\x00数据", "é", None)]
    first, new = _both_fills(stored)
    assert new == first and first[0] == "filled"
    contents = first[1]
    assert isinstance(contents, Contents)
    terms = {term.decode() for term, _ in contents.instances}
    assert terms >= {"数据", "据库", "库", "迁移", "移x"}
    assert [rowid for rowid, _ in contents.sizes] == [1, 2]
    broken = [("数据", Raw(b"\xed\xa0\x80", as_text=True), None)]
    assert _both_fills(broken) == (("error", "OperationalError"),) * 2


@pytest.mark.parametrize(
    "text",
    [
        "数据" * 100_000,
        "x" * 1_000_000 + "数",
        "é" * 95 + "数据" + "😀" * 50_000 + "库",
        "数\x00据" * 20_000,
    ],
    ids=["cjk-600kB", "ascii-1MB-then-cjk", "chunk-edge-and-emoji", "nul-between"],
)
def test_huge_values_fill_alike(text: str) -> None:
    stored: list[Row] = [(text, "tool", text[:5000]), (None, None, text)]
    first, new = _both_fills(stored)
    assert new == first and first[0] == "filled"
    with memory_store(stored) as conn:
        assert _filled(conn, _repair_fill) == first


def test_a_real_release_file_is_filled_alike(tmp_path: Path) -> None:
    """hermes-agent 0.18.0's own file (schema v17, CJK in content and tool calls) upgraded to
    0021 by the new backfill holds what the first backfill writes on the same rows."""
    path = tmp_path / "state.db"
    RealHermes(17, tmp_path / "home").build(path)
    migrate.upgrade(sqlite_url(path), "0021")
    engine = create_store_engine(sqlite_url(path), set_journal_mode=False)
    try:
        with engine.connect() as conn, conn.begin():
            upgraded = ("filled", _contents(conn))
            first = _filled(conn, cjk_ddl.sqlite_fill_bigrams_row_by_row)
            conn.rollback()
    finally:
        engine.dispose()
    assert upgraded == first
    assert isinstance(first[1], Contents) and len(first[1].sizes) >= 5
