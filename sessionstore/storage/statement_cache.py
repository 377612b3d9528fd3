"""SQLAlchemy's statement cache, one per process for every engine whose dialect compiles alike.

Why: SQLAlchemy keeps the compiled form of each statement an engine runs in that engine's own
cache, keyed by the engine's dialect object. A program that opens many stores (an agent's test
suite opening one per test, Hermes's own suites run on this drop-in, a gateway serving one
store per profile, a forked child opening its own) compiled every statement it ran again for
each store: ~4 ms of the ~15 ms a small store's open and first calls cost
(``SessionDB(path)``, a session, a few appends, reads, searches, a listing, close; CPU,
in-memory files).

How: each engine made by :func:`~.engine.create_store_engine` is given, as its
``compiled_cache`` execution option, a :class:`SharedStatementCache`: a view onto one
``LRUCache`` per :func:`~sessionstore.sql.statements.dialect_key` (the dialect's class and
every plain value it holds, learnt on its first connection: what a compiled form can depend
on). The view finds its cache at the first lookup, which SQLAlchemy makes on a connection the
dialect already initialised (the dialect's own first statements run before any view is
asked), and drops the dialect from each key: every dialect in one cache compiles alike. The
hot statements of :mod:`sessionstore.sql.statements` are shared the same way, by the same key.

Bounded as SQLAlchemy bounds an engine's cache (``query_cache_size``, 500 by default: the
engine's own option sizes the cache its view uses; 0 turns caching off, as it does for an
engine). A forked child starts with empty caches (a parent thread may have held a cache's
lock at the fork; :mod:`.fork_safety` resets them without taking it), so nothing here is
shared between processes.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from sqlalchemy.util import LRUCache

from ..sql.statements import dialect_key
from . import fork_safety

DEFAULT_SIZE = 500
"""SQLAlchemy's default ``query_cache_size``: the entries one shared cache keeps."""


class _Caches:
    """The process's shared caches by (dialect key, size); new and empty in a forked child."""

    def __init__(self) -> None:
        self.by_key: dict[tuple[Hashable, int], LRUCache[Any, Any]] = {}
        self.generation = 0
        self._tracked = False

    def cache_for(self, key: Hashable, size: int) -> LRUCache[Any, Any]:
        if not self._tracked:  # at first use, not at import (importing changes nothing)
            fork_safety.track(self)
            self._tracked = True
        found = self.by_key.get((key, size))
        if found is None:  # two threads may race here: one of the two caches is kept
            found = self.by_key.setdefault((key, size), LRUCache(size))
        return found

    def after_fork_in_child(self) -> None:
        # A new dict, no lock taken: a view that still holds an inherited cache sees the
        # generation move and looks its cache up again.
        self.by_key = {}
        self.generation += 1


_CACHES = _Caches()


class SharedStatementCache:
    """An engine's ``compiled_cache``: the shared cache of its dialect's key (see the module).

    SQLAlchemy keys an entry ``(dialect, statement cache key, column keys, schema translation,
    executemany)`` and asks only ``get`` and item assignment of it."""

    __slots__ = ("_cache", "_generation", "_size")

    def __init__(self, size: int = DEFAULT_SIZE) -> None:
        self._size = size
        self._cache: LRUCache[Any, Any] | None = None
        self._generation = -1

    def _shared(self, dialect: Any) -> LRUCache[Any, Any]:
        cache = self._cache
        if cache is None or self._generation != _CACHES.generation:
            self._generation = _CACHES.generation
            cache = self._cache = _CACHES.cache_for(dialect_key(dialect), self._size)
        return cache

    def get(self, key: tuple[Any, ...], default: Any = None) -> Any:
        return self._shared(key[0]).get(_without_dialect(key), default)

    def __setitem__(self, key: tuple[Any, ...], value: Any) -> None:
        self._shared(key[0])[_without_dialect(key)] = value


def _without_dialect(key: tuple[Any, ...]) -> tuple[Any, ...]:
    """SQLAlchemy's key with its dialect left out: one cache holds dialects that compile alike."""
    return (None, *key[1:])
