"""Which search index serves which database: one registry, keyed by the dialect's name.

In the spirit of Alembic's per-dialect ``DefaultImpl`` registry, each database's search index
lives here in the search wing (:mod:`.sqlite`, :mod:`.postgresql`), never in the dialect: the
dialects know nothing of search, and the search service, the doctor, maintenance and the
migrations' repair ask :func:`search_index_for` with the dialect they hold. A database this
package does not know has no index (a ``ValueError``, as :func:`~sessionstore.dialects.
dialect_for_url` refuses its URL).

Each index module is imported on first use: opening a store and reading it never searches.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from sqlalchemy.engine import Connection, Engine

from ..dialects import dialect_for
from ..storage.error_translation import typed_errors
from ..storage.retry import run_with_retry
from .object_names import HERMES_CJK_TABLE

if TYPE_CHECKING:
    from ..dialects import StoreDialect
    from .index import SearchIndex


def _sqlite_index() -> SearchIndex:
    from .sqlite import SQLiteSearchIndex

    return SQLiteSearchIndex()


def _postgresql_index() -> SearchIndex:
    from .postgresql import PostgreSQLSearchIndex

    return PostgreSQLSearchIndex()


DEFAULT_INDEXES: Final[dict[str, Callable[[], SearchIndex]]] = {
    "sqlite": _sqlite_index,
    "postgresql": _postgresql_index,
}
"""Dialect name -> what builds its search index (each index object holds no state)."""

_built: dict[str, SearchIndex] = {}


def search_index_for(dialect: StoreDialect) -> SearchIndex:
    """The search index of ``dialect``'s database: word and substring matching, and its
    search objects' detect, create, rebuild, check and optimize."""
    index = _built.get(dialect.name)
    if index is None:
        build = DEFAULT_INDEXES.get(dialect.name)
        if build is None:
            raise ValueError(f"no search index for the {dialect.name!r} database")
        index = _built[dialect.name] = build()
    return index


def search_index_of(conn: Connection) -> SearchIndex:
    """:func:`search_index_for` the dialect of ``conn``, found by its SQLAlchemy dialect's
    name (the same names): a search asks on every call, and making the store's dialect from
    its URL cost 7 us."""
    index = _built.get(conn.dialect.name)
    return index if index is not None else search_index_for(dialect_for(conn))


def detach_unloadable(engine: Engine) -> bool:
    """Before a store is written: detach another program's index this process cannot keep
    (:meth:`SearchIndex.detach_unloadable`). A Hermes that can load its CJK tokenizer adds
    that index to a store at head; Hermes itself, opening the file without the tokenizer,
    detaches it on every open, and so does every writable open here.

    One catalog read when there is nothing to do, and no index module imported: a store
    without Hermes's CJK table has none of its triggers (Hermes creates both together and
    drops only the triggers), and opening a store never imports search. None where no Hermes
    writes (PostgreSQL): it was a connection checkout and three round trips an open."""
    dialect = dialect_for(engine)
    if not dialect.hermes_writes_here:
        return False

    def attempt() -> bool:
        try:
            with engine.connect() as conn:
                if not dialect.existing_tables(conn, (HERMES_CJK_TABLE,)):
                    return False
                index = search_index_for(dialect)
                if not index.unloadable_triggers(conn):
                    return False
            with engine.begin() as conn:
                return index.detach_unloadable(conn)
        except Exception as exc:
            if dialect.is_disconnect(exc):
                dialect.connection_lost(engine)  # the pool's other idle ones died with it
            raise

    # As the schema check before it: a pooled connection whose backend was terminated while
    # idle (a server restart) is retried on a new one, and what fails is a typed error. It
    # was a raw driver error out of SessionDB(url=...) (the PostgreSQL field walk).
    with typed_errors(dialect):
        return run_with_retry(
            attempt, lambda exc: dialect.is_retryable(exc) or dialect.is_disconnect(exc)
        )
