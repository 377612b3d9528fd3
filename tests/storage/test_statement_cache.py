"""Compiled statements are shared by every engine whose dialect compiles alike
(``sessionstore.storage.statement_cache``): a program that opens many stores compiles each
statement once, and engines that compile differently never share a compiled form."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.sql.compiler import SQLCompiler

from sessionstore import SessionDB
from sessionstore.sql import statements
from sessionstore.storage import statement_cache
from sessionstore.storage.engine import create_store_engine


@pytest.fixture
def compilations(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The class of every SQL compiler made while the test runs (each is one compilation),
    the process's compiled forms set aside first (earlier tests of this process compiled the
    same statements: the first store would find them all).

    Left out: statements SQLAlchemy itself never caches (no cache key), which every engine
    compiles at every run, whatever cache it is given. Under SQLAlchemy 2.0 (all that Python
    3.10 gets) those are the dialects' own ``insert()`` constructs, the upserts of
    ``create_session`` and the leases (``inherit_cache = False`` there; 2.1 caches them)."""
    monkeypatch.setattr(statement_cache, "_CACHES", statement_cache._Caches())
    monkeypatch.setattr(statements, "_COMPILED_IN_PROCESS", {})
    made: list[str] = []
    real_init = SQLCompiler.__init__

    def counting_init(
        self: SQLCompiler, dialect: Any, statement: Any, *args: Any, **kwargs: Any
    ) -> None:
        key = getattr(statement, "_generate_cache_key", None)
        if key is None or key() is not None:
            made.append(type(self).__name__)
        real_init(self, dialect, statement, *args, **kwargs)

    monkeypatch.setattr(SQLCompiler, "__init__", counting_init)
    yield made


def _a_store_s_first_calls(db: SessionDB, session_id: str) -> None:
    db.create_session(session_id, "cli", model="m")
    db.append_message(session_id, "user", "hello world")
    db.append_message(session_id, "assistant", "hi", tool_calls=[{"id": "1", "function": {}}])
    assert [m["content"] for m in db.get_messages(session_id)] == ["hello world", "hi"]
    db.get_messages_as_conversation(session_id)
    assert db.search_messages("hello")[0]["session_id"] == session_id
    db.search_messages("数据")
    db.list_sessions_rich(limit=5)
    db.set_session_title(session_id, f"title {session_id}")
    db.update_token_counts(session_id, input_tokens=3)
    db.end_session(session_id, "done")
    assert db.resolve_session_id(session_id[:3]) is not None
    db.delete_session(session_id)


def test_a_second_store_compiles_nothing_the_first_compiled(
    store_url: str, tmp_path: Path, compilations: list[str]
) -> None:
    with SessionDB(url=store_url) as first:
        _a_store_s_first_calls(first, "first")
    assert compilations, "the first store's calls compiled nothing: the probe sees nothing"
    compilations.clear()
    # A new engine: another SQLite file; on PostgreSQL another engine on the same database.
    url = f"sqlite:///{tmp_path / 'second.db'}" if store_url.startswith("sqlite") else store_url
    with SessionDB(url=url) as second:
        if url != store_url:
            compilations.clear()  # a new SQLite file is built first (the migration's own)
        _a_store_s_first_calls(second, "second")
    assert compilations == []


def test_engines_that_compile_differently_share_nothing(tmp_path: Path) -> None:
    """SQLite's ``qmark`` and ``named`` parameter styles compile one statement to two texts:
    each engine runs its own (a form shared between them would bind wrongly or fail)."""
    url = f"sqlite:///{tmp_path / 'state.db'}"
    statement = sa.select(sa.literal_column("1").label("one")).where(
        sa.bindparam("a", type_=sa.Integer) == sa.bindparam("b", type_=sa.Integer)
    )
    texts: dict[str, str] = {}
    for paramstyle in ("qmark", "named", "qmark"):
        engine = create_store_engine(url, paramstyle=paramstyle)
        try:
            with engine.connect() as conn:
                result = conn.execute(statement, {"a": 7, "b": 7})
                assert result.scalar() == 1
                assert conn.execute(statement, {"a": 7, "b": 8}).scalar() is None
                texts[paramstyle] = str(result.context.compiled)
                assert texts[paramstyle].count("?" if paramstyle == "qmark" else ":") == 2
        finally:
            engine.dispose()
    assert texts["qmark"] != texts["named"]


def test_a_caller_s_cache_size_or_own_cache_is_kept(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    shared = create_store_engine(url)
    off = create_store_engine(url, query_cache_size=0)
    own: dict[Any, Any] = {}
    theirs = create_store_engine(url, execution_options={"compiled_cache": own})
    try:
        assert isinstance(
            shared.get_execution_options()["compiled_cache"], statement_cache.SharedStatementCache
        )
        assert "compiled_cache" not in off.get_execution_options()
        with theirs.connect() as conn:
            conn.execute(sa.select(sa.literal(1)))
        assert theirs.get_execution_options()["compiled_cache"] is own and len(own) == 1
    finally:
        for engine in (shared, off, theirs):
            engine.dispose()


def test_a_forked_child_starts_with_empty_caches(tmp_path: Path) -> None:
    """The child's reset (run by the at-fork hook, here called as it would be) gives every
    view a new, empty cache: nothing a parent thread may have been holding is used."""
    engine = create_store_engine(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        view = engine.get_execution_options()["compiled_cache"]
        statement = sa.select(sa.literal(1, sa.Integer) + sa.bindparam("x", type_=sa.Integer))
        with engine.connect() as conn:
            assert conn.execute(statement, {"x": 1}).scalar() == 2
        inherited = view._shared(engine.dialect)
        assert len(inherited) > 0
        statement_cache._CACHES.after_fork_in_child()
        fresh = view._shared(engine.dialect)
        assert fresh is not inherited and len(fresh) == 0
        with engine.connect() as conn:
            assert conn.execute(statement, {"x": 2}).scalar() == 3
        assert len(fresh) > 0
    finally:
        engine.dispose()


def test_engines_with_their_own_json_serializers_share_nothing(tmp_path: Path) -> None:
    """A caller's ``json_serializer`` is a function the compiled form's bind processors call:
    an engine given another one compiles its own form and writes with its own."""
    url = f"sqlite:///{tmp_path / 'state.db'}"
    statement = sa.select(sa.cast(sa.bindparam("value", type_=sa.JSON), sa.String))
    written = []
    for mark in ("first", "second"):
        engine = create_store_engine(url, json_serializer=lambda _v, mark=mark: f'"{mark}"')
        try:
            with engine.connect() as conn:
                written.append(conn.execute(statement, {"value": {"a": 1}}).scalar())
        finally:
            engine.dispose()
    assert written == ['"first"', '"second"']
