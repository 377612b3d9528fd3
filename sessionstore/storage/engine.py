"""Engines, configured in one place.

``create_store_engine`` is the only function in the package that calls ``create_engine``: it
resolves the URL rules, asks the dialect for its options and attaches the dialect's listeners
(PRAGMAs, BEGIN mode) to the new engine instance, never to the Engine class, and registers the
after-fork reset the dialect hands back with :mod:`.fork_safety`. Its statement cache is the
process's, shared with every engine whose dialect compiles alike (:mod:`.statement_cache`).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import create_engine
from sqlalchemy.engine import URL, Engine

from ..dialects import dialect_for_url
from . import fork_safety
from .config import resolve_location
from .statement_cache import DEFAULT_SIZE, SharedStatementCache

DEFAULT_BUSY_TIMEOUT_S = 1.0


def create_store_engine(
    url: str | URL | None = None,
    *,
    read_only: bool = False,
    busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
    set_journal_mode: bool = True,
    **engine_kwargs: Any,
) -> Engine:
    """A SQLAlchemy engine for a session store at ``url`` (default: the URL rules of config).

    ``set_journal_mode=False`` leaves the file's journal mode alone: migrations inspect a file
    before deciding to touch it, and switching to WAL is already a change to the file.
    """
    parsed = resolve_location(url)
    dialect = dialect_for_url(parsed)
    read_only = read_only or dialect.requests_read_only(parsed)
    parsed = dialect.prepare_url(parsed, read_only=read_only)
    if not read_only:
        dialect.ensure_database_location(parsed)
    options = dialect.engine_options(parsed, read_only=read_only, busy_timeout_s=busy_timeout_s)
    options.update(engine_kwargs)
    engine = create_engine(parsed, **options)
    cache_size = options.get("query_cache_size", DEFAULT_SIZE)
    if cache_size and "compiled_cache" not in engine.get_execution_options():
        # Compiled statements shared with every engine whose dialect compiles alike
        # (:mod:`.statement_cache`), unless the caller turned SQLAlchemy's cache off (0) or
        # gave the engine a cache of its own.
        engine.update_execution_options(compiled_cache=SharedStatementCache(cache_size))
    after_fork = dialect.install_listeners(
        engine,
        read_only=read_only,
        busy_timeout_s=busy_timeout_s,
        set_journal_mode=set_journal_mode,
    )
    fork_safety.track_engine(engine, after_fork)
    return engine
