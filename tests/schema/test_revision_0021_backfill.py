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

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from real_hermes import RealHermes

from sessionstore._migrations import revision_0021_ddl as cjk_ddl
from sessionstore.schema import migrate
from sessionstore.storage.config import sqlite_url
from sessionstore.storage.engine import create_store_engine

TABLE = cjk_ddl.BIGRAM_TABLE
MESSAGES_DDL = (
    "CREATE TABLE messages (id INTEGER PRIMARY KEY, content TEXT, tool_name TEXT, "
    "tool_calls TEXT)"
)
# CJK of 3 and 4 UTF-8 bytes, Hangul (U+1100, U+D7FF), the edges of the CJK ranges and what
# lies next to them (U+E000 after the surrogates, U+FFEF..U+FFFF, U+40000), full-width forms,
# other multi-byte text, ASCII a token may join ("数a" is one token, "数," is "数"), NUL and runs
# long enough that characters straddle the 96-byte chunk edges in every way.
PIECES = [
    "数", "据库", "迁移", "検索", "세션", "ｄａｔａ", "Ａ", "𠀀", "𪚥", "\U0003ffff", "\U00040000",
    "\u1100", "\u11ff", "\u10ff", "\ud7ff", "\ue000", "\uffef", "\ufffd", "\uffff", "é", "😀",
    "ß", "a", "B ", "\n", ",", "\x00", "x" * 37, "数据库" * 11, "é" * 47, "数x" * 20, "😀" * 23,
]  # fmt: skip
# Bytes stored as they are: CJK, an encoded surrogate (U+D800, U+DFFF), an overlong NUL, a cut
# CJK character, stray continuation and lead bytes.
RAW_PIECES = [
    "数据".encode(), b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xc0\x80", b"\xe6\x95", b"\x80",
    b"\xe4", b"\xff", b"\x00", b"a", "𠀀".encode(),
]  # fmt: skip


class Raw(NamedTuple):
    """A value stored as a BLOB, or as TEXT holding exactly these bytes (``CAST(? AS TEXT)``)."""

    data: bytes
    as_text: bool


Value = str | int | Raw | None
texts = st.one_of(
    st.lists(st.sampled_from(PIECES), max_size=30).map("".join),
    st.text(st.characters(codec="utf-8"), max_size=120),
)
raws = st.builds(Raw, st.lists(st.sampled_from(RAW_PIECES), max_size=12).map(b"".join),
                 st.booleans())  # fmt: skip
values: st.SearchStrategy[Value] = st.one_of(
    st.none(), texts, texts, texts, st.integers(-5, 10**12), raws
)
rows = st.lists(st.tuples(values, values, values), min_size=1, max_size=8)


class Contents(NamedTuple):
    instances: list[tuple[str, int]]
    sizes: list[tuple[int, bytes]]
    totals: bytes | None


def _contents(conn: sa.Connection) -> Contents:
    conn.exec_driver_sql("DROP TABLE IF EXISTS temp.bigram_vocab")
    conn.exec_driver_sql(
        f"CREATE VIRTUAL TABLE temp.bigram_vocab USING fts5vocab(main, {TABLE}, instance)"
    )
    instances = conn.exec_driver_sql(
        "SELECT term, doc FROM temp.bigram_vocab ORDER BY term, doc"
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


@contextmanager
def _memory_store(stored: list[tuple[Value, Value, Value]]) -> Iterator[sa.Connection]:
    engine = sa.create_engine("sqlite://")
    try:
        with engine.connect() as conn, conn.begin():
            conn.exec_driver_sql(MESSAGES_DDL)
            for number, row in enumerate(stored, start=1):
                slots, params = [], [number]
                for value in row:
                    if isinstance(value, Raw):
                        slots.append("CAST(? AS TEXT)" if value.as_text else "?")
                        params.append(value.data)
                    else:
                        slots.append("?")
                        params.append(value)
                conn.exec_driver_sql(
                    f"INSERT INTO messages VALUES (?, {', '.join(slots)})", tuple(params)
                )
            yield conn
    finally:
        engine.dispose()


def _both_fills(stored: list[tuple[Value, Value, Value]]) -> tuple[Outcome, Outcome]:
    with _memory_store(stored) as conn:
        return (
            _filled(conn, cjk_ddl.sqlite_fill_bigrams_row_by_row),
            _filled(conn, cjk_ddl.sqlite_fill_bigrams),
        )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows)
def test_python_tokens_fill_the_index_as_the_token_sql_does(
    stored: list[tuple[Value, Value, Value]],
) -> None:
    first, new = _both_fills(stored)
    assert new == first


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
    assert {term for term, _ in contents.instances} >= {"数据", "据库", "库", "迁移", "移x"}
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
    first, new = _both_fills([(text, "tool", text[:5000]), (None, None, text)])
    assert new == first and first[0] == "filled"


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
