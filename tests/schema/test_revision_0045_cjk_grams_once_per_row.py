"""Revision 0045: the CJK bigram triggers with one token expression per row, 0044's tokens.

A contentless FTS5 table must be told, on delete, the very terms a row was indexed with, or
the index keeps terms of rows that are gone. So 0045's row SQL (its frozen helper, and the
runtime's copy a repair builds) must give 0044's grams for every row, whatever its three
columns hold: NULL, numbers, BLOBs, NUL, invalid UTF-8 stored as TEXT, texts across the 96-byte
chunk edges, 4-byte characters, CJK at the end of one column and the start of the next. Then
the index is followed through inserts, updates and deletes made by both versions' triggers in
turn, and must hold exactly the terms 0044's SQL computes for the rows left (``fts5vocab``)
and pass FTS5's integrity check; a store built at 0044 is upgraded and downgraded with its rows
changed by each version. PostgreSQL: the revision changes nothing.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from cjk_checks import assert_cjk_index_matches_scan, churn, trigger_sql, write_cjk_rows
from hypothesis import given, settings
from hypothesis import strategies as st
from store_library import connect_like_the_store

from sessionstore._migrations import revision_0021_ddl, revision_0044_ddl, revision_0045_ddl
from sessionstore.api.session_db import SessionDB
from sessionstore.schema import migrate
from sessionstore.search import sqlite_ddl
from sessionstore.storage.config import sqlite_url

BIGRAM = revision_0021_ddl.BIGRAM_TABLE
SPELLINGS: dict[str, Callable[[str], str]] = {
    "0044": revision_0044_ddl.row_grams,
    "0045": revision_0045_ddl.row_grams,
    "runtime": sqlite_ddl.row_grams,
}
PIECES = [
    "数", "据库", "迁移", "検索", "세션", "ᄀ", "ᅡ", "ｄａｔａ", "𠀀", "𪚥", "丽", "é", "e\u0301",
    "か\u3099", "\u3099", "😀", "\u3000", "a", "b ", "\n", "\x00", ",", "x" * 37, "数据库" * 11,
    "é" * 47, "𠀀" * 13, "\x7f",
]  # fmt: skip
RAW = [*(p.encode() for p in PIECES), b"\x80", b"\xe4", b"\xe4\xb8", b"\xf0\x9f", b"\xff", b"\xbf"]
TEXTS = st.lists(st.sampled_from(PIECES), max_size=40).map("".join)
BYTES = st.lists(st.sampled_from(RAW), max_size=40).map(b"".join)
# A column's value as (kind, value): "raw" is bytes stored as TEXT (a raw writer's invalid UTF-8).
VALUES = st.one_of(
    st.just(("null", None)),
    st.tuples(st.just("text"), TEXTS),
    st.tuples(st.just("text"), TEXTS),
    st.tuples(st.just("raw"), BYTES),
    st.tuples(st.just("blob"), BYTES),
    st.tuples(st.just("number"), st.one_of(st.integers(-(2**63), 2**63 - 1), st.floats())),
)
ROWS = st.tuples(VALUES, VALUES, VALUES)
Row = tuple[tuple[str, Any], tuple[str, Any], tuple[str, Any]]


def _libraries() -> dict[str, Callable[[], sqlite3.Connection]]:
    return {
        "stdlib": lambda: sqlite3.connect(":memory:", isolation_level=None),
        "store": lambda: connect_like_the_store(":memory:", isolation_level=None),
    }


@pytest.fixture(scope="module", params=list(_libraries()))
def library(request: pytest.FixtureRequest) -> Callable[[], sqlite3.Connection]:
    return _libraries()[request.param]


@pytest.fixture(scope="module")
def memory(library: Callable[[], sqlite3.Connection]) -> Iterator[sqlite3.Connection]:
    conn = library()
    yield conn
    conn.close()


def _bound(row: Row) -> tuple[list[str], dict[str, Any]]:
    """Each column's SQL (bytes of kind "raw" cast to TEXT) and the parameters."""
    names = ("c", "n", "k")
    sql = [f"CAST(:{name} AS TEXT)" if kind == "raw" else f":{name}"
           for name, (kind, _) in zip(names, row, strict=True)]  # fmt: skip
    return sql, {name: value for name, (_, value) in zip(names, row, strict=True)}


def _grams(conn: sqlite3.Connection, row: Row) -> dict[str, bytes]:
    """Each spelling's grams of a row, as bytes (invalid UTF-8 stays as it is)."""
    sql, params = _bound(row)
    p = f"(SELECT {sql[0]} AS content, {sql[1]} AS tool_name, {sql[2]} AS tool_calls) AS p"
    return {
        name: conn.execute(f"SELECT CAST({spell('p')} AS BLOB) FROM {p}", params).fetchone()[0]
        for name, spell in SPELLINGS.items()
    }


def _pieces(grams: bytes) -> list[bytes]:
    # The ascii tokenizer reads a space as a separator only: the grams a row is indexed with
    # are its pieces between spaces, in any order (0044 put extra spaces between the columns).
    return sorted(piece for piece in grams.split(b" ") if piece)


def _assert_0044s(conn: sqlite3.Connection, row: Row) -> list[bytes]:
    grams = _grams(conn, row)
    assert grams["0045"] == grams["runtime"]
    assert _pieces(grams["0045"]) == _pieces(grams["0044"])
    return _pieces(grams["0044"])


def _text(value: str | None) -> tuple[str, Any]:
    return ("null", None) if value is None else ("text", value)


@pytest.mark.parametrize(
    "columns",
    [
        (None, None, None), ("", "", ""), ("ascii", None, "ascii"), ("数", None, None),
        (None, "数", None), (None, None, "数"), ("数据", "库", "迁移"), ("末尾数", "首", None),
        ("数", "据", "库"), ("x" * 95 + "数据", "x" * 94 + "😀数", "x" * 96 + "数"),
        ("数" * 32, "据" * 33, "库" * 31), ("é" * 95 + "数据", None, "𠀀𠀁" * 40),
        ("数\x00据", "\x00数", "数" * 31 + "\x00" + "据" * 40),
        ("か\u3099き", "x" * 93 + "𠀀数", ""),
        ("数据\n迁移", "数 ", "ＤＡＴＡ数据"),
    ],
    ids=repr,
)
def test_a_rows_grams_are_0044s(
    memory: sqlite3.Connection, columns: tuple[str | None, str | None, str | None]
) -> None:
    row = (_text(columns[0]), _text(columns[1]), _text(columns[2]))
    pieces = _assert_0044s(memory, row)
    if any("数" in (c or "").split("\x00")[0] for c in columns):
        assert pieces


def test_blobs_numbers_and_raw_bytes_give_0044s_grams(memory: sqlite3.Connection) -> None:
    cjk = "数据库".encode()
    rows: list[Row] = [
        (("blob", cjk), ("text", "é"), ("number", 5)),  # a BLOB is skipped, as 0044 skips it
        (("number", 1.5), ("blob", b"\xe4\xb8"), ("raw", cjk + b"\xe4")),
        (("raw", b"\xe4" + cjk), ("raw", cjk[:4]), ("raw", b"x" * 95 + cjk)),
        (("raw", cjk * 40 + b"\xbf\xbf" + cjk), ("blob", cjk * 40), ("text", "据")),
    ]
    for row in rows:
        _assert_0044s(memory, row)
    assert not _assert_0044s(memory, rows[0])
    assert _assert_0044s(memory, rows[3])


@settings(max_examples=400, deadline=None)
@given(ROWS)
def test_a_rows_grams_are_0044s_on_hostile_values(memory: sqlite3.Connection, row: Row) -> None:
    _assert_0044s(memory, row)


def test_a_rows_grams_are_0044s_on_megabytes(memory: sqlite3.Connection) -> None:
    prose = "数据库迁移，一个长消息。" * 30_000
    row: Row = (("text", prose), ("text", "工具"), ("text", "𠀀" * 100_000))
    assert len(_assert_0044s(memory, row)) > 400_000


# -- the index, changed by both versions' triggers ------------------------------------------------
_TABLE = "CREATE TABLE messages (id INTEGER PRIMARY KEY, content, tool_name, tool_calls)"
_VOCAB = f"CREATE VIRTUAL TABLE temp.vocab USING fts5vocab(main, {BIGRAM}, instance)"
_REFERENCE = (
    "CREATE VIRTUAL TABLE temp.reference USING fts5("
    "grams, content='', tokenize='ascii', detail=none, prefix='1')"
)
_REFERENCE_VOCAB = (
    "CREATE VIRTUAL TABLE temp.reference_vocab USING fts5vocab(temp, reference, instance)"
)
_INTEGRITY = f"INSERT INTO {BIGRAM}({BIGRAM}, rank) VALUES ('integrity-check', 1)"
_TRIGGERS = {"0044": revision_0044_ddl.SQLITE_CREATE_TRIGGERS,
             "0045": revision_0045_ddl.SQLITE_CREATE_TRIGGERS}  # fmt: skip


def _use_triggers(conn: sqlite3.Connection, version: str) -> None:
    for name in revision_0021_ddl.BIGRAM_TRIGGERS:
        conn.execute(f"DROP TRIGGER IF EXISTS {name}")
    for ddl in _TRIGGERS[version]:
        conn.execute(ddl)


def assert_index_holds_0044s_terms(conn: sqlite3.Connection) -> None:
    """Every row with CJK holds exactly the terms 0044's SQL computes for it, and no other row
    holds any: compared term by term with an index filled afresh by 0044's SQL."""
    conn.execute("DELETE FROM temp.reference")
    conn.execute(
        f"INSERT INTO temp.reference(rowid, grams) SELECT m.id, {revision_0044_ddl.row_grams('m')} "
        f"FROM messages AS m WHERE {revision_0021_ddl.has_cjk('m')}"
    )
    terms = "SELECT CAST(term AS BLOB), doc FROM temp.{} ORDER BY 1, 2"
    held = conn.execute(terms.format("vocab")).fetchall()
    expected = conn.execute(terms.format("reference_vocab")).fetchall()
    assert held == expected
    rows = f"SELECT id FROM {BIGRAM}_docsize EXCEPT SELECT id FROM temp.reference_docsize"
    assert not conn.execute(rows).fetchall()
    assert conn.execute(f"SELECT count(*) FROM {BIGRAM}_docsize").fetchone()[0] == (
        conn.execute("SELECT count(*) FROM temp.reference_docsize").fetchone()[0]
    )
    conn.execute(_INTEGRITY)


OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("insert"), ROWS),
        st.tuples(st.just("update"), st.integers(0, 30), st.integers(0, 2), VALUES),
        st.tuples(st.just("move"), st.integers(0, 30)),  # a new id: UPDATE OF id
        st.tuples(st.just("delete"), st.integers(0, 30)),
        st.tuples(st.just("switch"), st.sampled_from(sorted(_TRIGGERS))),
    ),
    min_size=1,
    max_size=40,
)


def _apply(conn: sqlite3.Connection, operation: tuple[Any, ...]) -> None:
    kind, *args = operation
    ids = [row[0] for row in conn.execute("SELECT id FROM messages ORDER BY id")]
    if kind == "switch":
        _use_triggers(conn, args[0])
    elif kind == "insert":
        sql, params = _bound(args[0])
        conn.execute(
            f"INSERT INTO messages (content, tool_name, tool_calls) VALUES ({', '.join(sql)})",
            params,
        )
    elif ids and kind == "update":
        column = revision_0021_ddl.INDEXED_COLUMNS[args[1]]
        sql, params = _bound((args[2], ("null", None), ("null", None)))
        conn.execute(
            f"UPDATE messages SET {column} = {sql[0]} WHERE id = :id",
            {**params, "id": ids[args[0] % len(ids)]},
        )
    elif ids and kind == "move":
        conn.execute("UPDATE messages SET id = (SELECT max(id) + 1 FROM messages) WHERE id = ?",
                     (ids[args[0] % len(ids)],))  # fmt: skip
    elif ids and kind == "delete":
        conn.execute("DELETE FROM messages WHERE id = ?", (ids[args[0] % len(ids)],))


@settings(max_examples=100, deadline=None)
@given(st.lists(ROWS, max_size=12), OPERATIONS)
def test_the_index_stays_0044s_under_both_versions_triggers(
    library: Callable[[], sqlite3.Connection], first: list[Row], operations: list[tuple[Any, ...]]
) -> None:
    """Rows indexed by 0044's triggers, then changed by either version's in any order."""
    conn = library()
    try:
        conn.execute(_TABLE)
        conn.execute(revision_0021_ddl.SQLITE_CREATE_BIGRAM)
        for ddl in (_VOCAB, _REFERENCE, _REFERENCE_VOCAB):
            conn.execute(ddl)
        _use_triggers(conn, "0044")
        for row in first:
            _apply(conn, ("insert", row))
        _use_triggers(conn, "0045")
        for operation in operations:
            _apply(conn, operation)
        assert_index_holds_0044s_terms(conn)
    finally:
        conn.close()


# -- SQLite: the upgrade and the downgrade on a store --------------------------------------------
def _write_hostile_rows(path: Path, session: str) -> None:
    """Rows as a raw writer may store them: a BLOB, numbers, a NUL, invalid UTF-8 as TEXT."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("INSERT INTO sessions (id, source, started_at) VALUES (?, 'cli', 1.0)",
                     (session,))  # fmt: skip
        insert = (
            "INSERT INTO messages (session_id, role, content, tool_name, tool_calls, timestamp) "
            "VALUES (?, 'tool', {}, ?, ?, 1.0)"
        )
        cjk = "数据库".encode()
        for content, tool_name, tool_calls in [
            (cjk, "工具", None), (b"\xe4" + cjk + b"\xe4\xb8", 7, "调用"),
            ("数\x00据" * 40, None, 2.5), (b"x" * 95 + cjk * 3, "名" * 33, "𠀀" * 30),
        ]:  # fmt: skip
            raw = isinstance(content, bytes) and content != cjk
            conn.execute(insert.format("CAST(? AS TEXT)" if raw else "?"),
                         (session, content, tool_name, tool_calls))  # fmt: skip
        conn.commit()
    finally:
        conn.close()


def _delete_session_rows(path: Path, session: str) -> None:
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("DELETE FROM messages WHERE session_id = ?", (session,)).rowcount
        conn.commit()
    finally:
        conn.close()


def _assert_index_holds_0044s_terms(path: Path) -> None:
    conn = connect_like_the_store(path, isolation_level=None)
    try:
        conn.execute("BEGIN")
        for ddl in (_VOCAB, _REFERENCE, _REFERENCE_VOCAB):
            conn.execute(ddl)
        assert_index_holds_0044s_terms(conn)
        conn.execute("ROLLBACK")
    finally:
        conn.close()


def test_sqlite_rows_indexed_by_0044_are_changed_by_0045_and_back(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    url = sqlite_url(path)
    migrate.upgrade(url, "0044")
    write_cjk_rows(path, "before", 120)  # indexed by 0044's triggers
    _write_hostile_rows(path, "raw-0044")
    old_sql = trigger_sql(path)
    assert set(old_sql.values()) == set(revision_0044_ddl.SQLITE_CREATE_TRIGGERS)

    migrate.upgrade(url, "0045")
    new_sql = trigger_sql(path)
    assert set(new_sql.values()) == set(revision_0045_ddl.SQLITE_CREATE_TRIGGERS)
    assert sum(map(len, new_sql.values())) < sum(map(len, old_sql.values())) / 2
    _assert_index_holds_0044s_terms(path)
    churn(path)  # 0044-indexed rows changed by 0045's triggers
    write_cjk_rows(path, "after", 80)  # indexed by 0045's triggers
    _write_hostile_rows(path, "raw-0045")
    with SessionDB(path) as db:
        db.append_message("after", "user", "新的消息 数据库 𠀀检索")
        assert len(db.search_messages("新的", limit=10)) == 1
    _delete_session_rows(path, "raw-0044")
    _assert_index_holds_0044s_terms(path)

    migrate.downgrade(url, "0044")
    assert trigger_sql(path) == old_sql
    churn(path)  # 0045-indexed rows changed by 0044's triggers again
    _delete_session_rows(path, "raw-0045")
    _assert_index_holds_0044s_terms(path)
    assert_cjk_index_matches_scan(path)  # reads the rows as text: the raw bytes are gone


# -- PostgreSQL: nothing --------------------------------------------------------------------------
def _catalog(url: str) -> list[tuple[Any, ...]]:
    """The store schema's functions, triggers, indexes and schema number."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return [
                *conn.execute(sa.text(
                    "SELECT p.proname, pg_get_functiondef(p.oid) FROM pg_proc AS p "
                    "WHERE p.pronamespace = current_schema()::regnamespace ORDER BY 1, 2"
                )).all(),
                *conn.execute(sa.text(
                    "SELECT tgname, pg_get_triggerdef(t.oid) FROM pg_trigger AS t "
                    "JOIN pg_class AS c ON c.oid = t.tgrelid "
                    "WHERE c.relnamespace = current_schema()::regnamespace "
                    "AND NOT t.tgisinternal ORDER BY 1"
                )).all(),
                *conn.execute(sa.text(
                    "SELECT indexname, indexdef FROM pg_indexes "
                    "WHERE schemaname = current_schema() ORDER BY 1"
                )).all(),
                *conn.execute(sa.text("SELECT version FROM schema_version")).all(),
            ]  # fmt: skip
    finally:
        engine.dispose()


@pytest.mark.postgresql
def test_postgresql_upgrade_and_downgrade_change_nothing(empty_pg_url: str) -> None:
    url = empty_pg_url
    migrate.upgrade(url, "0044")
    before = _catalog(url)
    assert ("sessionstore_cjk_grams",) in {row[:1] for row in before}
    migrate.upgrade(url, "0045")
    assert _catalog(url) == before
    assert migrate.current(url) == "0045"
    migrate.downgrade(url, "0044")
    assert _catalog(url) == before
