"""Hot statements are compiled once per process (``sql.statements``), and never shared between
dialects that compile them differently, nor between stores of different read shapes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from legacy_v7_v17 import LATER_ROOT, build_later_db
from sqlalchemy.engine import Engine
from sqlalchemy.util import LRUCache

from sessionstore.api.session_db import SessionDB
from sessionstore.sql import statements
from sessionstore.sql.read_shape import FULL
from sessionstore.sql.statements import CompiledStatement, dialect_key
from sessionstore.sql.tables import sessions_table as sessions


def _counting_compiles(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    compiled: list[str] = []
    real = statements._compile

    def counted(statement: Any, dialect: Any) -> Any:
        result = real(statement, dialect)
        compiled.append(result.sql)
        return result

    monkeypatch.setattr(statements, "_compile", counted)
    # As in a fresh process: what other tests compiled is not counted.
    monkeypatch.setattr(statements, "_COMPILED_IN_PROCESS", LRUCache(100))
    return compiled


def _connected(url: str, **options: Any) -> Engine:
    engine = sa.create_engine(url, **options)
    with engine.connect():  # the dialect learns the server (version, RETURNING) here
        pass
    return engine


_UPDATE = (
    sa.update(sessions)
    .where(sessions.c.id == sa.bindparam("session_id"))
    .values(title=sa.func.coalesce(sa.bindparam("title"), sessions.c.title, "untitled"))
)


def test_alike_dialects_share_one_compile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compiled = _counting_compiles(monkeypatch)
    first, second = (_connected(f"sqlite:///{tmp_path / name}") for name in ("a.db", "b.db"))
    assert first.dialect is not second.dialect
    assert dialect_key(first.dialect) == dialect_key(second.dialect)
    one = CompiledStatement(_UPDATE, first.dialect)
    other = CompiledStatement.built_later(lambda: _UPDATE, second.dialect)
    assert one.sql == other.sql and len(compiled) == 1
    assert one.parameters({"session_id": "s", "title": None}) == other.parameters(
        {"session_id": "s", "title": None}
    )
    # Values the statement carries are written into it on SQLite (statements._compile).
    assert "'untitled'" in one.sql
    assert one.parameters({"session_id": "s", "title": None}) == (None, "s")


def test_dialects_that_compile_differently_never_share(
    tmp_path: Path, migrated_pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    compiled = _counting_compiles(monkeypatch)
    qmark = _connected(f"sqlite:///{tmp_path / 'q.db'}")
    named = _connected(f"sqlite:///{tmp_path / 'n.db'}", paramstyle="named")
    postgresql = _connected(migrated_pg_url)
    older = _connected(f"sqlite:///{tmp_path / 'o.db'}")
    # What a dialect learns from its server counts: an older SQLite compiles no RETURNING.
    older.dialect.server_version_info = (3, 24, 0)
    engines = (qmark, named, postgresql, older)
    assert len({dialect_key(engine.dialect) for engine in engines}) == len(engines)

    texts = [CompiledStatement(_UPDATE, engine.dialect).sql for engine in engines]
    assert len(compiled) == len(engines)
    assert "?" in texts[0] and ":session_id" in texts[1] and "%(session_id)s" in texts[2]
    for engine, sql in zip(engines, texts, strict=True):
        compiled_by_sqlalchemy = _UPDATE.compile(dialect=engine.dialect)
        if engine.dialect.name == "sqlite":  # its constants written in (statements._compile)
            assert "'untitled'" in sql and "untitled" not in compiled_by_sqlalchemy.string
            assert sql.count("'untitled'") == 1
        else:
            assert sql == str(compiled_by_sqlalchemy)
    for engine in engines:
        engine.dispose()


def test_stores_of_two_shapes_and_both_dialects_read_their_own_columns(
    tmp_path: Path, migrated_sqlite_url: str, pg_store_url: str
) -> None:
    """A v17 file read as it is, a store at head on each dialect: one process, statements
    used in turn, each store reads (and writes) through the statements of its own shape."""
    legacy = tmp_path / "v17.db"
    build_later_db(legacy, 17)
    with (
        SessionDB(legacy, read_only=True) as old,
        SessionDB(migrated_sqlite_url) as head,
        SessionDB(pg_store_url) as server,
    ):
        assert old.store.read_shape != FULL and head.store.read_shape == FULL
        for db in (head, server):
            db.create_session(LATER_ROOT, "cli", model="m")
            db.append_message(LATER_ROOT, "user", "hello", api_content="sent")
        for _ in range(2):  # the second round finds every statement compiled
            old_session = old.get_session(LATER_ROOT)
            assert old_session is not None and old_session["source"] == "telegram"
            assert old_session["display_name"] is None
            assert all(m["api_content"] is None for m in old.get_messages(LATER_ROOT))
            for db in (head, server):
                session = db.get_session(LATER_ROOT)
                assert session is not None and session["source"] == "cli"
                [message] = db.get_messages(LATER_ROOT)
                assert message["content"] == "hello" and message["api_content"] == "sent"


def _token_work(db: SessionDB) -> None:
    """Every statement of the token path: totals, the main and auxiliary per-model rows,
    and the bare session a usage reported first creates."""
    db.update_token_counts("a", input_tokens=1, model="m", source="cli")
    db.update_token_counts("a", input_tokens=2, model="m", task="voice_chat")
    db.update_token_counts("a", output_tokens=3, absolute=True)
    db.record_auxiliary_usage("b", "title", input_tokens=4)


def test_a_second_store_compiles_none_of_the_token_statements_again(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The per-model usage statements were cached on each store's own dialect object, so
    every store opened built and compiled them again (and the cache kept them all)."""
    compiled = _counting_compiles(monkeypatch)
    with SessionDB(store_url) as first:
        _token_work(first)
    assert compiled, "the first store compiles the token statements"
    compiled.clear()
    with SessionDB(store_url) as second:
        _token_work(second)
        usage = second.get_model_usage("a") + second.get_model_usage("b")
    assert compiled == []
    assert sorted((row["task"], row["input_tokens"]) for row in usage) == [
        ("", 2), ("title", 8), ("voice_chat", 4)
    ]


def test_what_sqlalchemy_keeps_on_a_dialect_after_first_use_never_splits_its_key(
    tmp_path: Path,
) -> None:
    """SQLAlchemy memoizes some properties on the dialect at their first read (the first
    statement it runs): they must not make a used dialect's key differ from a fresh one's."""
    engine = _connected(f"sqlite:///{tmp_path / 'a.db'}")
    fresh = dialect_key(engine.dialect)
    kept = set(vars(engine.dialect))
    with engine.connect() as conn:
        conn.execute(sa.select(sa.literal(1))).scalar()
    assert set(vars(engine.dialect)) - kept, "SQLAlchemy kept nothing more (the test is moot)"
    assert dialect_key(engine.dialect) == fresh
    engine.dispose()
