"""``SessionDB.search_messages``' kept CJK searches (``search.service.KeptSearch``, issue 31):
a CJK search without filters keeps its checked arguments and (SQLite) its statements per
store, and answers every call as the general path does: the same dicts as
``search_message_dicts`` call after call, every write seen, another store's never used, the
catalog's changes followed, listeners shown the statements, a damaged index named.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from store_sql import run

from sessionstore.api.session_db import SessionDB
from sessionstore.errors import SearchIndexDamagedError
from sessionstore.search import sqlite as sqlite_search
from sessionstore.search.object_names import BIGRAM_TABLE
from sessionstore.search.service import KeptSearch, search_message_dicts
from sessionstore.search.sqlite import SQLiteSearchIndex

TEXTS = [
    "我们讨论了数据库迁移的方案。下一步是检查点",
    "好的，数据库的迁移脚本在这里：migrate.py",
    "Das 数据ABC Protokoll",
    "数据abc 小写",
    "データベースの移行計画を確認しました",
    "데이터베이스 마이그레이션 계획을 검토했습니다",
    "库存: 3; 迁移 ok",
    "nothing to see here",
]
QUERIES = ["数据库", "数据", "库", "数据abc", "数据ABC", "迁移 OR データ", "数据 -迁移", "데이터"]
ARGUMENTS: list[dict[str, Any]] = [
    {}, {"limit": 2, "offset": 1}, {"sort": "oldest"}, {"sort": "newest", "limit": 3},
    {"include_inactive": True}, {"limit": 0}, {"offset": -4},
]  # fmt: skip


def fill(database: SessionDB) -> None:
    for number, session in enumerate(("a", "b")):
        database.create_session(session, "cli" if number else "telegram")
        for text in TEXTS:
            database.append_message(session, "user", f"{session}: {text}")
            database.append_message(session, "assistant", f"re {text}")


@pytest.fixture
def db(store_url: str) -> Iterator[SessionDB]:
    database = SessionDB(url=store_url)
    fill(database)
    yield database
    database.close()


def general(database: SessionDB, query: str, **arguments: Any) -> list[dict[str, Any]]:
    """The general path's answer (no kept search between)."""
    return database._store.read(functools.partial(search_message_dicts, query=query, **{
        "limit": 20, "offset": 0, "include_inactive": False, "sort": None, **arguments}))


def test_each_call_is_the_general_answer(db: SessionDB) -> None:
    for query in QUERIES:
        for arguments in ARGUMENTS:
            expected = general(db, query, **arguments)
            for _ in range(3):  # made, then kept
                assert db.search_messages(query, **arguments) == expected, (query, arguments)
        if query != "数据 -迁移":
            assert db.search_messages(query), query  # each query finds something
    kept = db._kept_searches[("数据库", 20, 0, None, False)]
    assert isinstance(kept, KeptSearch)
    if db._store.dialect.name == "sqlite":
        assert kept.state is not None  # its statements kept


def test_each_write_is_seen(db: SessionDB) -> None:
    first = db.search_messages("检查点")
    assert len(first) == 4
    db.append_message("b", "user", "新的检查点")
    after = db.search_messages("检查点")
    assert after[0]["snippet"] == "新的>>>检查点<<<"
    assert after[1:] == first
    run(db, "UPDATE messages SET active = 0 WHERE content = :text", text="新的检查点")
    assert db.search_messages("检查点") == first
    assert len(db.search_messages("检查点", include_inactive=True)) == 5
    run(db, "DELETE FROM messages WHERE content LIKE :text", text="%检查点%")
    assert db.search_messages("检查点") == []


def test_another_store_is_never_answered(tmp_path: Path) -> None:
    one, other = SessionDB(tmp_path / "one.db"), SessionDB(tmp_path / "other.db")
    try:
        fill(one)
        other.create_session("x", "cli")
        other.append_message("x", "user", "只有这里有数据库")
        for _ in range(3):
            assert len(one.search_messages("数据库")) == 8
            assert [hit["session_id"] for hit in other.search_messages("数据库")] == ["x"]
    finally:
        one.close()
        other.close()


def test_arguments_of_other_types_take_the_general_path(db: SessionDB) -> None:
    """Only ``str`` queries, ``int`` pages, a ``bool`` state and a ``str`` sort are kept: a
    ``bool`` limit, say, answers as the general path does, however often."""
    for _ in range(2):
        with pytest.raises(TypeError):
            db.search_messages("数据库", limit=2.0)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="sort"):
            db.search_messages("数据库", sort="sideways")
        assert db.search_messages("数据库", include_inactive=1) == general(  # type: ignore[arg-type]
            db, "数据库", include_inactive=True)
    assert all(type(key[2]) is int for key in db._kept_searches)


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Iterator[SessionDB]:
    database = SessionDB(tmp_path / "state.db")
    fill(database)
    yield database
    database.close()


def test_the_catalog_is_followed_as_each_search_follows_it(
    sqlite_db: SessionDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kept statements are those of the catalog the last search read: the bigram index
    dropped under them (within the second a catalog is trusted) fails the statement, which is
    read again from the catalog; made again, it is used once the catalog is read again."""
    db = sqlite_db
    expected = general(db, "数据库")
    assert db.search_messages("数据库") == expected
    cjk_ddl = pytest.importorskip("sessionstore._migrations.revision_0021_ddl")
    db._store.write(cjk_ddl.sqlite_drop_bigram_index)
    statements: list[str] = []

    def record(*arguments: Any) -> None:
        statements.append(arguments[2])

    sa.event.listen(db._store.engine, "before_cursor_execute", record)
    try:
        assert db.search_messages("数据库") == expected
        assert f"{BIGRAM_TABLE} MATCH" in statements[0]  # failed: no such table
        assert "LIKE" in statements[-1] and f"{BIGRAM_TABLE} MATCH" not in statements[-1]
        db._store.write(lambda conn: SQLiteSearchIndex().create(conn))
        monkeypatch.setattr(sqlite_search, "_CATALOG_TRUSTED_S", 0.0)
        statements.clear()
        assert db.search_messages("数据库") == expected
        assert any(f"{BIGRAM_TABLE} MATCH" in s for s in statements)  # seen by the listener
    finally:
        sa.event.remove(db._store.engine, "before_cursor_execute", record)
    monkeypatch.undo()
    statements.clear()
    assert db.search_messages("数据库") == expected
    assert db.search_messages("数据库") == expected
    assert not statements  # listener removed: the kept statements on the driver's cursor


def test_a_damaged_index_is_named_on_a_kept_search(sqlite_db: SessionDB) -> None:
    db = sqlite_db
    assert db.search_messages("数据库")
    db._store.write(lambda conn: conn.exec_driver_sql(
        f"UPDATE {BIGRAM_TABLE}_data SET block = X'DEADBEEFDEADBEEF'"))
    for _ in range(2):
        with pytest.raises(SearchIndexDamagedError, match="the messages are intact"):
            db.search_messages("数据库")
