"""Revision 0044: the CJK bigram tokens computed cheaper, exactly 0021's tokens and arrays.

SQLite: a contentless FTS5 table must be told, on delete, the very tokens a row was indexed
with, so 0044's trigger SQL (its frozen helper; 0045's test compares the runtime's) must
give 0025's token string for every text, in both SQLite libraries a store's file is written
with. PostgreSQL: the GIN index's entries are never recomputed for the rows it holds, so
0044's ``sessionstore_cjk_grams`` must return 0021's array for every text. Both are compared on
hostile texts (CJK runs across the 96-byte chunk edges, 4-byte characters, NUL, combining
marks, invalid UTF-8 a raw writer can store, mixed ASCII) and on megabytes. Then a store is
upgraded and downgraded on each database, its rows indexed by one version and changed by the
other, and the index still agrees with a scan.
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from cjk_checks import assert_cjk_index_matches_scan, churn, trigger_sql, write_cjk_rows
from hypothesis import given, settings
from hypothesis import strategies as st
from store_library import connect_like_the_store

from sessionstore._migrations import revision_0021_ddl, revision_0025_ddl, revision_0044_ddl
from sessionstore.api.session_db import SessionDB
from sessionstore.schema import migrate
from sessionstore.search import postgresql_ddl
from sessionstore.storage.config import sqlite_url

SPELLINGS = {
    "0025": revision_0025_ddl.column_grams,
    "0044": revision_0044_ddl.column_grams,
}
# CJK of 3 and 4 UTF-8 bytes, Hangul syllables and conjoining jamo, full-width forms, CJK
# combining marks (U+3099 is in the class) and others, NUL, other multi-byte text and ASCII, and
# runs long enough that characters straddle the 96-byte chunk edges in every way.
PIECES = [
    "数", "据库", "迁移", "検索", "세션", "ᄀ", "ᅡ", "ｄａｔａ", "𠀀", "𪚥", "丽", "é", "e\u0301",
    "か\u3099", "\u3099", "\u20dd", "😀", "\ufe0f", "\u3000", "ß", "a", "b ", "\n", "\x00", ",",
    "x" * 37, "数据库" * 11, "é" * 47, "𠀀" * 13, "\x7f",
]  # fmt: skip
TEXTS = st.lists(st.sampled_from(PIECES), max_size=60).map("".join)


def _random_cjk(size: int, seed: int) -> str:
    """About ``size`` UTF-8 bytes of CJK text, a tenth of it other characters: runs of every
    length, most bigrams distinct."""
    pick = random.Random(seed)
    others = "，。 a1\n\xe9😀"
    chars = [
        chr(pick.randint(0x4E00, 0x9FFF)) if pick.random() < 0.9 else pick.choice(others)
        for _ in range(size // 3)
    ]
    return "".join(chars)


def _sqlite_libraries() -> dict[str, Callable[[], sqlite3.Connection]]:
    return {
        "stdlib": lambda: sqlite3.connect(":memory:"),
        "store": lambda: connect_like_the_store(":memory:"),
    }


@pytest.fixture(scope="module", params=list(_sqlite_libraries()))
def memory(request: pytest.FixtureRequest) -> Iterator[sqlite3.Connection]:
    conn = _sqlite_libraries()[request.param]()
    yield conn
    conn.close()


def _tokens(conn: sqlite3.Connection, value: object, *, raw: bool = False) -> dict[str, object]:
    """Each spelling's tokens; ``raw``: of bytes stored as TEXT, read back as bytes."""
    expression = "CAST(:v AS TEXT)" if raw else ":v"
    return {
        name: conn.execute(
            f"SELECT CAST({spell(expression)} AS BLOB)" if raw else f"SELECT {spell(expression)}",
            {"v": value},
        ).fetchone()[0]
        for name, spell in SPELLINGS.items()
    }


def _assert_same(tokens: dict[str, object]) -> None:
    assert tokens["0044"] == tokens["0025"]


@pytest.mark.parametrize(
    "value",
    [
        None, "", "ascii only", "数", "数据库", "a数b据c", "数" * 200, "é" * 95 + "数据",
        "x" * 95 + "数据库", "x" * 96 + "数", "x" * 94 + "😀数", "数据\n迁移", "𠀀𠀁" * 40,
        "数\x00据", "\x00数", "数" * 31 + "\x00" + "据" * 40, "か\u3099き", "x" * 93 + "𠀀数",
    ],
    ids=repr,
)
def test_the_triggers_give_0025s_tokens(memory: sqlite3.Connection, value: str | None) -> None:
    _assert_same(_tokens(memory, value))


@settings(max_examples=300, deadline=None)
@given(TEXTS)
def test_the_triggers_give_0025s_tokens_on_hostile_text(
    memory: sqlite3.Connection, value: str
) -> None:
    tokens = _tokens(memory, value)
    _assert_same(tokens)
    if any("\u4e00" <= c <= "\u9fff" or c in "𠀀𪚥" for c in value.split("\x00")[0]):
        assert tokens["0025"]  # CJK before any NUL gives tokens: not a comparison of NULLs


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([*(p.encode() for p in PIECES), b"\x80", b"\xe4", b"\xe4\xb8",
                                 b"\xf0\x9f", b"\xff", b"\xbf\xbf"]),
                max_size=60).map(b"".join))  # fmt: skip
def test_the_triggers_give_0025s_tokens_on_invalid_utf8(
    memory: sqlite3.Connection, value: bytes
) -> None:
    """Bytes a raw writer can store as TEXT (``CAST(x'..' AS TEXT)``): no valid UTF-8 needed."""
    _assert_same(_tokens(memory, value, raw=True))


def test_the_triggers_give_0025s_tokens_on_megabytes(memory: sqlite3.Connection) -> None:
    for value in (_random_cjk(1_000_000, 1), "数据库迁移，" * 60_000, "𠀀" * 100_000):
        tokens = _tokens(memory, value)
        assert isinstance(tokens["0025"], str) and len(tokens["0025"]) > 200_000
        _assert_same(tokens)


# -- SQLite: the upgrade and the downgrade on a store --------------------------------------------
def test_sqlite_rows_indexed_by_0025_are_changed_by_0044_and_back(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    url = sqlite_url(path)
    migrate.upgrade(url, "0043")
    write_cjk_rows(path, "before", 120)  # indexed by 0025's triggers
    old_sql = trigger_sql(path)
    assert set(old_sql.values()) == set(revision_0025_ddl.SQLITE_CREATE_COMPACT_TRIGGERS)

    migrate.upgrade(url, "0044")
    assert set(trigger_sql(path).values()) == set(revision_0044_ddl.SQLITE_CREATE_TRIGGERS)
    churn(path)  # 0025-indexed rows changed by 0044's triggers
    write_cjk_rows(path, "after", 80)  # indexed by 0044's triggers
    assert_cjk_index_matches_scan(path)

    migrate.downgrade(url, "0043")
    assert trigger_sql(path) == old_sql
    churn(path)  # 0044-indexed rows changed by 0025's triggers again
    assert_cjk_index_matches_scan(path)


# -- PostgreSQL: the function ---------------------------------------------------------------------
def _pg_function(name: str, ddl: str) -> str:
    """The function's text under another name, in the session's own temporary schema."""
    return ddl.replace(
        f"FUNCTION {revision_0021_ddl.PG_GRAMS_FUNCTION}(", f"FUNCTION pg_temp.{name}(", 1
    )


@pytest.fixture(scope="module")
def pg(migrated_pg_url: str) -> Iterator[sa.Connection]:
    """A connection holding 0021's and 0044's functions, as ``pg_temp.grams_0021``/``_0044``."""
    engine = sa.create_engine(migrated_pg_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.exec_driver_sql(_pg_function("grams_0021", revision_0021_ddl.PG_CREATE_GRAMS_FUNCTION))
        conn.exec_driver_sql(_pg_function("grams_0044", revision_0044_ddl.PG_CREATE_GRAMS_FUNCTION))
        yield conn
    engine.dispose()


def _pg_arrays(
    conn: sa.Connection, values: list[str], *, lowered: bool = True
) -> list[tuple[object, object]]:
    """Each value's arrays from both functions, of the value and (``lowered``) of its lower
    case, as the index and the search call it."""
    calls = ["v", "lower(v)"] if lowered else ["v"]
    rows = conn.execute(
        sa.text(
            "SELECT " + ", ".join(f"pg_temp.grams_0021({c}), pg_temp.grams_0044({c})"
                                  for c in calls)
            + " FROM unnest(CAST(:values AS text[])) WITH ORDINALITY AS u(v, i) ORDER BY i"
        ),
        {"values": values},
    ).all()
    return [(row[i], row[i + 1]) for row in rows for i in range(0, len(row), 2)]


@pytest.mark.postgresql
def test_the_runtime_creates_0044s_function() -> None:
    assert postgresql_ddl.CREATE_GRAMS_FUNCTION == revision_0044_ddl.PG_CREATE_GRAMS_FUNCTION


@pytest.mark.postgresql
@pytest.mark.parametrize(
    "value",
    [
        "", "ascii only", "数", "数据库", "a数b据c", "数据\n迁移", "𠀀𠀁" * 40, "か\u3099き",
        "数" * 200, "ＤＡＴＡ数据", "세션 데이터", "末尾数", "数 ", "é数é", "数😀据",
    ],
    ids=repr,
)
def test_the_function_gives_0021s_arrays(pg: sa.Connection, value: str) -> None:
    for old, new in _pg_arrays(pg, [value]):
        assert new == old


@pytest.mark.postgresql
@settings(max_examples=200, deadline=None)
@given(st.lists(TEXTS.map(lambda text: text.replace("\x00", "")), min_size=1, max_size=8))
def test_the_function_gives_0021s_arrays_on_hostile_text(
    pg: sa.Connection, values: list[str]
) -> None:
    """PostgreSQL's text holds no NUL: the same texts without it."""
    for old, new in _pg_arrays(pg, values):
        assert new == old


@pytest.mark.postgresql
def test_the_function_gives_0021s_arrays_on_long_text(pg: sa.Connection) -> None:
    values = [_random_cjk(600_000, 2), "数据库迁移，" * 60_000, "数a" * 50_000]
    for old, new in _pg_arrays(pg, values, lowered=False):
        assert isinstance(old, list) and old
        assert new == old


# -- PostgreSQL: the upgrade and the downgrade on a store ----------------------------------------
def _function(url: str) -> tuple[str, str]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            row = conn.execute(
                sa.text(
                    "SELECT l.lanname, p.prosrc FROM pg_proc AS p "
                    "JOIN pg_language AS l ON l.oid = p.prolang "
                    "WHERE p.proname = :name AND p.pronamespace = current_schema()::regnamespace"
                ),
                {"name": revision_0021_ddl.PG_GRAMS_FUNCTION},
            ).one()
            return str(row[0]), str(row[1])
    finally:
        engine.dispose()


@pytest.mark.postgresql
def test_postgresql_upgrade_and_downgrade_keep_every_row_found(empty_pg_url: str) -> None:
    url = empty_pg_url
    migrate.upgrade(url, "0043")
    old_function = _function(url)
    assert old_function[0] == "sql"
    engine = sa.create_engine(url)
    with engine.begin() as conn:  # rows indexed by 0021's function
        conn.exec_driver_sql("INSERT INTO sessions (id, source, started_at) VALUES ('s', 'cli', 1)")
        for number in range(30):
            conn.execute(
                sa.text("INSERT INTO messages (session_id, role, content, timestamp) "
                        "VALUES ('s', 'user', :content, :number)"),
                {"content": f"消息{number} 数据库迁移 𠀀检索 row {number}", "number": number},
            )  # fmt: skip
    engine.dispose()

    migrate.upgrade(url, "0044")
    assert _function(url) == ("plpgsql", revision_0044_ddl.PG_CREATE_GRAMS_FUNCTION.split("$$")[1])
    with SessionDB(url=url) as db:
        db.append_message("s", "user", "新的消息 数据库 𠀀检索")  # indexed by 0044's
        assert len(db.search_messages("数据库", limit=100)) == 31
        assert len(db.search_messages("𠀀检", limit=100)) == 31
        assert len(db.search_messages("新", limit=100)) == 1

    migrate.downgrade(url, "0043")
    assert _function(url) == old_function
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        conn.exec_driver_sql("SET enable_seqscan = off")  # the index, not a scan, answers
        found = conn.execute(
            sa.text(
                f"SELECT count(*) FROM messages WHERE "
                f"{postgresql_ddl.grams_of(postgresql_ddl.indexed_text())} @> ARRAY['数据', '𠀀检']"
            )
        ).scalar()
    engine.dispose()
    assert found == 31
