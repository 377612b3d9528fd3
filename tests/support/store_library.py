"""Opening a store's file from a test while a store in this process may hold it.

sessionstore runs on one SQLite library per process (``sessionstore.dialects.sqlite_library``:
pysqlite3 where the standard library's SQLite has the WAL-reset bug). A second library on the
same file in the same process drops the first one's file locks when it closes, which is the
corruption the package refuses to cause, so a test that inspects, blocks or writes a *live*
store's file opens it with :func:`connect_like_the_store`. A file no store of this process has
open (built before, or read after every store on it closed) may be opened with either.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa

from sessionstore.dialects.sqlite_library import connect, connection_class, library


def connect_like_the_store(database: Any, **kwargs: Any) -> sqlite3.Connection:
    """``sqlite3.connect`` with the library the stores of this process run on."""
    return connect(database, **kwargs)


def journal_mode_of(path: Any) -> str:
    """The journal mode of the SQLite file ``path``, read through the stores' library."""
    conn = connect_like_the_store(path)
    try:
        return str(conn.execute("PRAGMA journal_mode").fetchone()[0])
    finally:
        conn.close()


def store_row_factory() -> Any:
    """That library's ``Row`` (the standard library's cannot read another library's cursor)."""
    return library().module.Row


def engine_like_the_store(url: str, **kwargs: Any) -> sa.Engine:
    """A plain SQLAlchemy engine (no sessionstore listeners) on ``url``: for a SQLite URL,
    on the stores' library; any other URL as ``sqlalchemy.create_engine`` makes it."""
    if sa.make_url(url).get_backend_name() == "sqlite":
        kwargs.setdefault("module", library().module)
        kwargs.setdefault("connect_args", {}).setdefault("factory", connection_class())
    return sa.create_engine(url, **kwargs)


@contextmanager
def plain_transaction(url: str) -> Iterator[sa.Connection]:
    """One transaction on ``url`` through :func:`engine_like_the_store`, no store open (a file
    as Hermes left it); the engine is disposed after it."""
    engine = engine_like_the_store(url)
    try:
        with engine.begin() as conn:
            yield conn
    finally:
        engine.dispose()


@contextmanager
def damaging_transaction(url: str) -> Iterator[sa.Connection]:
    """:func:`plain_transaction` on a SQLite file with its foreign keys off (set before the
    transaction begins: SQLite ignores the pragma inside one): for writing what a salvaged or
    hand-edited file holds (orphans, ids as bytes, text in number columns)."""
    with plain_transaction(url) as conn:
        conn.execute(sa.text("PRAGMA foreign_keys = OFF"))
        yield conn


def needs_wal() -> Any:
    """A mark for a test of a store in WAL: skipped where the library the stores run on has the
    WAL-reset bug, since the package then keeps new files out of WAL (the standard library's
    SQLite 3.40.1 with no pysqlite3 installed: Linux on ARM, where pysqlite3 ships no wheel).
    What that gate does instead is tested in ``tests/dialects/test_sqlite_library.py``."""
    import pytest

    return pytest.mark.skipif(
        library().wal_reset_bug, reason="the stores' SQLite has the WAL-reset bug: no WAL here"
    )
