"""Revision 0025: the CJK bigram triggers in compact SQL, with exactly 0021's tokens.

A contentless FTS5 table must be given, on delete, the very tokens a row was indexed with, so
the compact spelling (0025's frozen helper) must
compute the same token string as 0021's for every text. Then a store whose rows were indexed
by 0021's triggers is upgraded, its rows are updated and deleted by the new triggers, and the
index still matches a substring scan; the same after the downgrade.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from cjk_checks import assert_cjk_index_matches_scan, churn, trigger_sql, write_cjk_rows
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionstore._migrations import revision_0021_ddl as cjk_ddl
from sessionstore._migrations import revision_0025_ddl as cjk_compact_ddl
from sessionstore.schema import migrate
from sessionstore.storage.config import sqlite_url

SPELLINGS = {
    "0021": cjk_ddl.column_grams,
    "0025": cjk_compact_ddl.column_grams,
}
# CJK of 3 and 4 UTF-8 bytes, Hangul, full-width forms, other multi-byte text and ASCII, so
# that characters straddle the 96-byte chunk edges in every way.
PIECES = [
    "数", "据库", "迁移", "検索", "세션", "ｄａｔａ", "𠀀", "𪚥", "é", "😀", "ß", "a", "b ", "\n",
    ",", "x" * 37, "数据库" * 11, "é" * 47,
]


def _tokens(conn: sqlite3.Connection, value: str | None) -> dict[str, str | None]:
    return {
        name: conn.execute(f"SELECT {spell(':v')}", {"v": value}).fetchone()[0]
        for name, spell in SPELLINGS.items()
    }


@pytest.fixture(scope="module")
def memory() -> sqlite3.Connection:
    return sqlite3.connect(":memory:")


@pytest.mark.parametrize(
    "value",
    [
        None, "", "ascii only", "数", "数据库", "a数b据c", "数" * 200, "é" * 95 + "数据",
        "x" * 95 + "数据库", "x" * 96 + "数", "x" * 94 + "😀数", "数据\n迁移", "𠀀𠀁" * 40,
    ],
    ids=repr,
)
def test_every_spelling_gives_0021s_tokens(memory: sqlite3.Connection, value: str | None) -> None:
    tokens = _tokens(memory, value)
    assert tokens["0025"] == tokens["0021"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=40).map("".join))
def test_every_spelling_gives_0021s_tokens_on_mixed_text(value: str) -> None:
    conn = sqlite3.connect(":memory:")
    try:
        tokens = _tokens(conn, value)
    finally:
        conn.close()
    assert tokens["0025"] == tokens["0021"]
    if not any("\u4e00" <= c <= "\u9fff" or c in "𠀀𪚥" for c in value):
        return
    assert tokens["0021"]  # a text with CJK gives tokens: the comparison is not of two NULLs


def test_rows_indexed_by_0021_are_updated_and_deleted_by_0025_and_back(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    url = sqlite_url(path)
    migrate.upgrade(url, "0024")
    write_cjk_rows(path, "before", 120)  # indexed by 0021's triggers
    old_sql = trigger_sql(path)

    migrate.upgrade(url, "0025")
    new_sql = trigger_sql(path)
    assert set(new_sql) == set(cjk_ddl.BIGRAM_TRIGGERS)
    assert sum(map(len, new_sql.values())) < 0.5 * sum(map(len, old_sql.values()))
    churn(path)  # 0021-indexed rows changed by 0025's triggers
    write_cjk_rows(path, "after", 80)  # indexed by 0025's triggers
    assert_cjk_index_matches_scan(path)

    migrate.downgrade(url, "0024")
    assert trigger_sql(path) == old_sql
    churn(path)  # 0025-indexed rows changed by 0021's triggers again
    assert_cjk_index_matches_scan(path)
