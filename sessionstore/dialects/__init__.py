"""Everything that differs between SQLite and PostgreSQL, behind one small interface.

The rest of the package asks ``dialect_for(engine)`` and calls methods; it never tests the
dialect's name itself. The interface is :mod:`.interface`; this module picks the dialect of a
URL and holds what callers ask of "the dialect of this store" in one call.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import URL, Connection, Engine, make_url

from .interface import (
    AfterForkReset,
    IntegrityViolation,
    StatementDeadline,
    StoreDialect,
    StoreImage,
    missing_core_table,
)

if TYPE_CHECKING:
    from ..errors import SessionStoreError

__all__ = [
    "FILE_BACKEND",
    "AfterForkReset",
    "IntegrityViolation",
    "StatementDeadline",
    "StoreDialect",
    "StoreImage",
    "database_file",
    "dialect_for",
    "dialect_for_url",
    "file_location",
    "file_url",
    "file_url_object",
    "json_list",
    "json_pairs",
    "missing_core_table",
    "translate_any_error",
]


def json_list(values: Iterable[str] | Iterable[int]) -> str:
    """The value to bind to a :meth:`StoreDialect.json_list_sql` (or ``json_id_list_sql``)
    parameter."""
    return json.dumps(list(values))


def json_pairs(value: Any) -> list[tuple[Any, Any]]:
    """The pairs a :meth:`StoreDialect.json_pairs_sql` aggregate gave, sorted: the JSON text
    SQLite returns or the list psycopg has already decoded (None, an aggregate of no row, is
    no pair). A second value SQLite held as a BLOB comes back as those bytes, as the driver
    would have read it."""
    if value is None:
        return []
    decoded = json.loads(value) if isinstance(value, (str, bytes)) else value
    pairs = [(pair[0], bytes.fromhex(pair[2]) if len(pair) > 2 else pair[1]) for pair in decoded]
    pairs.sort(key=itemgetter(0))  # by the first alone: the seconds may not compare
    return pairs


def dialect_for_url(url: str | URL) -> StoreDialect:
    backend = make_url(url).get_backend_name()
    if backend == "sqlite":
        from .sqlite import SQLiteDialect

        return SQLiteDialect()
    if backend == "postgresql":
        from .postgresql import PostgreSQLDialect

        return PostgreSQLDialect()
    raise ValueError(f"unsupported database {backend!r}: use a sqlite:// or postgresql:// URL")


def dialect_for(engine: Engine | Connection) -> StoreDialect:
    return dialect_for_url(engine.engine.url)


def database_file(url: str | URL) -> Path | None:
    """The file behind a store's URL; None for a server or an in-memory database."""
    parsed = make_url(url)
    return dialect_for_url(parsed).database_file(parsed)


def translate_any_error(exc: BaseException) -> SessionStoreError | None:
    """The typed error for a driver error when the store it came from is not known."""
    for backend in _BACKENDS:
        translated = dialect_for_url(f"{backend}://").translate_error(exc)
        if translated is not None:
            return translated
    return None


_BACKENDS = ("sqlite", "postgresql")
FILE_BACKEND = "sqlite"
"""The embedded database: a store given as a plain file path is one of these."""


def file_url(path: str | os.PathLike[str]) -> str:
    """The URL text of the store in the database file ``path`` (``~`` expanded)."""
    return f"{FILE_BACKEND}:///{Path(path).expanduser()}"


def file_location(path: str | os.PathLike[str]) -> URL:
    """The store in the database file ``path`` (``~`` expanded, a relative path kept so), as
    a URL object. Never as URL text: a file name may hold ``?``, ``#`` or ``%``, which text
    reads as a query, a fragment or an escape (SQLAlchemy 2.0 does not unquote a URL's
    database, 2.1 does), and a store would open another file than the one named."""
    return URL.create(FILE_BACKEND, database=str(Path(path).expanduser()))


def file_url_object(path: str | os.PathLike[str]) -> URL:
    """:func:`file_location` of the absolute path (the CLI takes paths as typed, and its
    hints name the file wherever they are run)."""
    return file_location(Path(path).expanduser().absolute())
