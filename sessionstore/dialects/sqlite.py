"""SQLite: WAL, foreign keys, a short busy timeout, and BEGIN chosen per transaction.

The pysqlite driver's own transaction handling is switched off on connect (``isolation_level =
None``) so that SQLAlchemy's ``begin`` event emits every BEGIN itself; that is SQLAlchemy's
documented recipe and the only way to choose ``BEGIN IMMEDIATE`` for writes.

The file rule
-------------
Nothing in this package opens, closes, copies, truncates or unlinks a store's file, its ``-wal``
or its ``-shm`` except SQLite itself. On POSIX, closing *any* descriptor of a file drops every
fcntl lock the process holds on it, including the ones SQLite took for other connections; another
process then believes it is the last user, checkpoints and deletes a WAL this process is still
writing into, and acknowledged writes vanish. So:

- a foreign or truncated file is refused by ``os.stat`` (no descriptor: a file of 1 to 511
  bytes is never a database, and SQLite would write a new store over it) and, for anything
  larger, by SQLite's own "file is not a database" on the first read, which is before any write;
- backups go through SQLite's online backup API (``SQLiteDialect.backup``);
- sizes and existence are checked with ``stat``/``access``, which open nothing;
- the writers' queue (:mod:`sessionstore.storage.writers_queue`) locks a *different* file,
  ``<db>-writelock`` (:meth:`SQLiteDialect.writer_queue_file`), which SQLite never uses;
- the closes that may remove ``-wal``/``-shm`` take turns on a lock of the store's
  *directory* (:mod:`.last_close`), which SQLite never locks either;
- after ``fork()`` the child abandons its inherited connections in the at-fork hook and
  closes them through SQLite before its first own connection, when the fork was quiet (the
  reset :meth:`SQLiteDialect.install_listeners` hands back, which
  :mod:`sessionstore.storage.fork_safety` runs).

Which SQLite library runs the store is :mod:`.sqlite_library`'s decision (written down there):
the standard library's when its SQLite has the WAL-reset fix, else pysqlite3 (SQLite 3.53.4)
where installed, else the standard library with WAL refused for files not already in it
(``_gate_wal_reset_bug``); every connection here comes from that one library.

What can still break the guarantee is code outside SQLite that opens the file: in a process that
also holds SQLite connections to it, closing that descriptor drops their locks (SQLite's own
documented limitation, "How To Corrupt An SQLite Database File", 2.2); from anywhere, ``cp`` of
the live file gives a torn copy, and deleting ``-wal``/``-shm`` loses what they hold.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import stat
import sys
import threading
import time
import weakref
from collections.abc import Callable, Collection, Hashable, Iterator
from pathlib import Path
from typing import Any, Literal, cast
from urllib.parse import parse_qs, parse_qsl, quote, unquote, urlencode, urlsplit

from sqlalchemy import ColumnElement, Table, and_, event, func, literal_column, or_, text, true
from sqlalchemy.dialects.sqlite import Insert, insert
from sqlalchemy.dialects.sqlite import dialect as sqlite_dialect
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import SingletonThreadPool
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler

from ..errors import (
    IndexMissingError,
    ReadOnlyStoreError,
    SchemaMissingError,
    SessionStoreError,
    StoreLocationError,
    StoreUnavailableError,
    UnsupportedValueError,
    ValueOutOfRangeError,
)
from .disk_space import full_disk_error, no_room_left
from .interface import (
    AfterForkReset,
    InheritedHandles,
    IntegrityViolation,
    StatementDeadline,
    StoreImage,
    missing_core_table,
)
from .shared_memory import cross_vm_filesystem
from .sqlite_library import connect, connection_class, is_connection, library

logger = logging.getLogger(__name__)

MMAP_BYTES = 256 * 1024 * 1024
"""How much of a store's file each connection maps (SQLite's ``mmap_size``; 0 is off)."""
WAL_SIZE_LIMIT_BYTES = 64 * 1024 * 1024
"""What a checkpointed WAL is truncated back to (newest Hermes's ``journal_size_limit``): with
SQLite's default (-1) the ``-wal`` file keeps the size of the largest transaction ever."""


def apply_write_durability(cursor: Any) -> None:
    """The per-connection PRAGMAs a writing connection carries, as newest Hermes's WAL
    companions: the WAL bounded (disk slack only); on macOS, whose ``fsync()`` is no write
    barrier, ``F_FULLFSYNC`` at checkpoints and ``synchronous=FULL`` (with NORMAL a checkpoint
    racing process termination leaves half-written pages). ``cursor``: anything with
    ``execute`` (a driver cursor or connection, of either SQLite library)."""
    cursor.execute(f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT_BYTES}")
    if sys.platform == "darwin":
        cursor.execute("PRAGMA checkpoint_fullfsync=1")
        cursor.execute("PRAGMA synchronous=FULL")


_BARE_DIALECT = sqlite_dialect(paramstyle="qmark")


def bare_statement(statement: ClauseElement) -> tuple[str, list[Any]]:
    """``statement`` as a bare driver connection runs it (``conn.execute(sql, parameters)``):
    ``?`` parameters in order, every ``IN`` list spelled out. For the Hermes drop-in's
    helpers, which Hermes calls with its own connection (``db._conn``, or one it made)."""
    compiled = cast(
        "SQLCompiler",
        statement.compile(dialect=_BARE_DIALECT, compile_kwargs={"render_postcompile": True}),
    )
    return compiled.string, [compiled.params[name] for name in compiled.positiontup or ()]


CACHED_STATEMENTS = 512
"""Prepared statements the driver keeps per connection (``cached_statements``; the driver's
default is 100). pysqlite3 0.6's cache never evicts its old entries for new ones: once a
connection has run that many distinct statements, a statement first run after that is
prepared again at every run when another newcomer runs between two of its runs. A single
append's INSERT (its triggers compiled in) takes ~350 us to prepare against ~40 us to run:
an append on such a connection cost 10x (scripts/bench_append_cpu.py, docs/performance.md).
A typical statement holds ~5 KB prepared, so a full cache stays within a few MB."""

_INTEGRITY_MESSAGES: tuple[
    tuple[str, Literal["foreign_key", "unique", "not_null", "check", "other"]], ...
] = (
    ("FOREIGN KEY constraint failed", "foreign_key"),
    ("UNIQUE constraint failed", "unique"),
    ("NOT NULL constraint failed", "not_null"),
    ("CHECK constraint failed", "check"),
)

BEGIN_MODE_OPTION = "sqlite_begin"
WRITE_BEGIN_MODE = "IMMEDIATE"
_BEGIN_MODES = frozenset({"DEFERRED", "IMMEDIATE", "EXCLUSIVE"})
_DEADLINE_INSTRUCTIONS = 1000
"""How many virtual-machine instructions SQLite runs between two looks at a deadline (as iot
0.22.2's browse looks)."""
COMPANION_SUFFIXES = ("-wal", "-shm", "-journal")
"""The files SQLite keeps beside a database, which belong to it (the log, its index, the
rollback journal)."""
WRITER_QUEUE_SUFFIX = "-writelock"
"""The side file this package's writers queue on (``state.db-writelock``); SQLite never uses it."""


def _is_memory(url: URL) -> bool:
    if url.database in (None, "", ":memory:") or str(url.database).startswith("file::memory:"):
        return True
    # file:name?mode=memory is a named in-memory database: there is no file beside it. The
    # driver builds the URI from the filename's own query and the URL's extra parameters.
    if not _is_uri_filename(url):
        return False
    in_url = url.query.get("mode", ())  # a str, or a tuple when given more than once
    in_filename = parse_qs(urlsplit(str(url.database)).query).get("mode", [])
    return "memory" in in_filename or "memory" in ((in_url,) if isinstance(in_url, str) else in_url)


def _is_uri_filename(url: URL) -> bool:
    # Only with uri=true does the driver read "file:..." as a URI; otherwise it is a plain name.
    return _uri_flag(url) and str(url.database).startswith("file:")


def _uri_flag(url: URL) -> bool:
    return str(url.query.get("uri", "")).lower() in _TRUE_WORDS


_TRUE_WORDS = frozenset({"true", "1", "yes", "on", "y", "t"})
URI_PARAMETERS: dict[str, frozenset[str] | None] = {
    "mode": frozenset({"ro", "rw", "rwc", "memory"}),
    "immutable": frozenset({"0", "1"}),
    "cache": frozenset({"private", "shared"}),
    "vfs": None,  # any name; SQLite refuses one it does not have
    "journal_mode": frozenset({"wal", "delete"}),  # ours: SQLite ignores it in a URI
}
"""The SQLite URI parameters a store URL may carry, and their values; the URL's query and a
``file:`` URI's own query are read alike. ``mode=ro`` opens the store read-only; ``rw`` never
creates the file; ``immutable=1`` opens it read-only without locks or a ``-shm`` file (read-only
media); ``cache=private`` is SQLite's default; ``vfs`` picks a VFS (``unix-dotfile`` where the
filesystem has no shared memory); ``journal_mode=delete`` keeps the file out of WAL (Hermes's
``database.journal_mode``, for NFS and SMB homes: :func:`_enable_wal`). Anything else is a
``StoreLocationError``: ``cache=shared`` on a file because shared-cache table locks
(SQLITE_LOCKED) bypass the busy timeout and the writers' queue (a named in-memory database
needs it, and has no other process to wait for), other names because a parameter the store
would drop must not look honoured."""


def uri_parameters(url: URL) -> dict[str, str]:
    """The SQLite URI parameters of a store URL, checked (see :data:`URI_PARAMETERS`)."""
    given: list[tuple[str, str]] = []
    for key, value in url.query.items():
        if key == "uri":
            continue
        given += [(key, item) for item in ((value,) if isinstance(value, str) else value)]
    if _is_uri_filename(url):
        given += parse_qsl(urlsplit(str(url.database)).query, keep_blank_values=True)
    found: dict[str, str] = {}
    for key, value in given:
        if key not in URI_PARAMETERS:
            raise StoreLocationError(
                f"SQLite URL parameter {key!r} is not supported: a store URL takes "
                f"{', '.join(sorted(URI_PARAMETERS))} and uri "
                "(busy timeout and read-only access are options of the store)"
            )
        allowed = URI_PARAMETERS[key]
        value = value if allowed is None else value.lower()
        if (allowed is not None and value not in allowed) or found.get(key, value) != value:
            choices = "a VFS name" if allowed is None else ", ".join(sorted(allowed))
            raise StoreLocationError(
                f"SQLite URL parameter {key}={value!r} is not one of {choices} (or it is given "
                "twice, differently)"
            )
        found[key] = value
    if found.get("cache") == "shared" and not _is_memory(url):
        raise StoreLocationError(
            "cache=shared is not supported for a store file: shared-cache table locks bypass "
            "the busy timeout and the writers' queue; leave it out (each connection then has "
            "its own cache)"
        )
    return found


def _refuse_unseen_log(path: Path) -> None:
    """``immutable=1`` reads the database file alone: changes still in a ``-wal`` beside it are
    not seen (SQLite does not read the log of an immutable database). Refused, not silently
    stale. ``stat`` only: the store's files are SQLite's to open."""
    log = path.with_name(path.name + "-wal")
    try:
        size = log.stat().st_size
    except OSError:
        return
    if size > 0:
        raise StoreUnavailableError(
            f"{path} has changes in {log.name} that immutable=1 would not see: open it "
            "where it can be written (or copy the database and its -wal there), so SQLite "
            "can read the log"
        )


def _filesystem_path(url: URL) -> Path:
    if _is_uri_filename(url):
        # The path sits between "file:" and any "?query" or "#fragment", percent-encoded.
        return Path(unquote(urlsplit(str(url.database)).path))
    return Path(str(url.database)).expanduser()


def _file_uri(url: URL, parameters: dict[str, str]) -> URL:
    """The store's URL as one ``file:`` URI carrying every SQLite parameter (the driver reads
    parameters only from there). Quoted: a "?", "#" or "%" in the path would otherwise end the
    path early, and the driver would then open (or create) a file at the truncated path."""
    path = quote(_filesystem_path(url).resolve().as_posix())
    query = "&".join(f"{key}={quote(value)}" for key, value in sorted(parameters.items()))
    database = f"file:{path}?{query}" if query else f"file:{path}"
    return url.set(database=database, query={"uri": "true"})


class SQLiteDialect:
    name = "sqlite"
    stores_nul_in_text = True
    keeps_nan = False
    keeps_any_type_in_a_column = True
    hermes_writes_here = True  # Hermes's own database
    migrations_make_delivery_ledger = False  # iot's gateway makes it, lazily, as it wants it
    batch_returning_inserts = False  # in-process: a row costs microseconds
    # Bound, they made SQLite 3.53 prepare a listing again at every run (sql.statements).
    writes_constants_into_statements = True
    serialize_writes_in_process = True
    multi_row_inserts = True  # FTS5: a segment per statement
    # sqliteDefaultBusyCallback sleeps 1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50, then 100 ms.
    foreign_writer_poll_s: float | None = 0.1
    single_statement_appends = False  # in-process: a statement costs microseconds, no trip
    autocommit_snapshot_reads = True  # the driver is in autocommit; BEGIN is ours to send
    connect_at_open = True  # WAL from the moment the store is open
    bytewise_collation = "BINARY"  # the default: memcmp of the UTF-8 text

    def requests_read_only(self, url: URL) -> bool:
        parameters = uri_parameters(url)
        return parameters.get("mode") == "ro" or parameters.get("immutable") == "1"

    def prepare_url(self, url: URL, *, read_only: bool) -> URL:
        parameters = uri_parameters(url)  # checked first: a bad one is refused, never dropped
        if _is_memory(url):
            return url
        if read_only:
            # mode=ro makes the driver refuse every write and never create the file.
            parameters["mode"] = "ro"
        elif not parameters:
            return url
        return _file_uri(url, parameters)

    def engine_options(self, url: URL, *, read_only: bool, busy_timeout_s: float) -> dict[str, Any]:
        # check_same_thread=False: connections move between threads through the pool; SQLite
        # itself is built thread-safe. timeout is the busy handler's wait before "locked".
        # module/factory: the SQLite library this process runs on (sqlite_library: one with
        # the WAL-reset fix where one can be had, and one library per file).
        if uri_parameters(url).get("immutable") == "1":
            _refuse_unseen_log(_filesystem_path(url))
        used = library()
        options: dict[str, Any] = {
            "module": used.module,
            "connect_args": {
                "check_same_thread": False,
                "timeout": busy_timeout_s,
                "factory": connection_class(),
                "cached_statements": CACHED_STATEMENTS,
            },
        }
        if _is_uri_filename(url) and _is_memory(url):
            # A named in-memory database lives only while a connection holds it: one connection
            # per thread, as SQLAlchemy 2.0 chose from "mode=memory" and 2.1 will stop choosing.
            options["poolclass"] = SingletonThreadPool
        elif not _is_memory(url):
            # A file's pool (QueuePool) hands out the connection returned last: a record whose
            # connection was closed (the Hermes ``_conn``, invalidated at its close) waits at
            # the back instead of making a new connection for the close's checkpoint (each new
            # connection costs its PRAGMAs and a first read of the file).
            options["pool_use_lifo"] = True
        return options

    def ensure_database_location(self, url: URL) -> None:
        if _is_memory(url):
            return
        _filesystem_path(url).parent.mkdir(parents=True, exist_ok=True)

    def install_listeners(
        self, engine: Engine, *, read_only: bool, busy_timeout_s: float, set_journal_mode: bool
    ) -> AfterForkReset:
        label = engine.url.database or ":memory:"
        path = None if _is_memory(engine.url) else _filesystem_path(engine.url)
        immutable = uri_parameters(engine.url).get("immutable") == "1"
        vfs = uri_parameters(engine.url).get("vfs")
        wanted = _wanted_journal_mode(engine.url)
        # Taken before anything opens the file: the switch to WAL comes after the schema.
        existing = path is not None and _has_pages(path)
        _EXISTING_FILE[engine] = existing
        connections = _ProcessConnections(engine)

        @event.listens_for(engine, "do_connect")
        def _on_do_connect(*_args: Any) -> None:
            # In a forked child: what it inherited is settled before SQLite opens anything.
            _before_connect()

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection: sqlite3.Connection, _record: Any) -> None:
            if path is not None:
                # Before any PRAGMA: switching to WAL would already write over a foreign file.
                _refuse_foreign_file(path)
                if read_only and not immutable:
                    _roll_back_hot_journal(path, vfs)
            connections.add(dbapi_connection)
            # Autocommit at the driver, so the begin listener below owns every BEGIN.
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            try:
                # Short wait inside SQLite; the jittered retry above it does the rest.
                cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
                # Child rows must point at real sessions; SQLite checks only when asked.
                cursor.execute("PRAGMA foreign_keys = ON")
                # Index lookups (the CJK bigram candidates: one row fetch each) read pages
                # through the memory map instead of a read() call per page: 18 ms -> 2.3 ms
                # for 4,800 candidates at 100k messages (scripts/bench_cjk.py). Address
                # space only; the pages are the OS cache's, shared by every connection.
                cursor.execute(f"PRAGMA mmap_size = {MMAP_BYTES}")
                if read_only:
                    # Belt and braces with mode=ro: this connection can never write.
                    cursor.execute("PRAGMA query_only = ON")
                else:
                    apply_write_durability(cursor)
                if not read_only and set_journal_mode:
                    _enable_wal(cursor, label, path, wanted, existing=existing)
            finally:
                cursor.close()

        @event.listens_for(engine, "close")
        def _on_close(dbapi_connection: sqlite3.Connection, _record: Any) -> None:
            connections.discard(dbapi_connection)

        @event.listens_for(engine, "close_detached")
        def _on_close_detached(dbapi_connection: sqlite3.Connection) -> None:
            connections.discard(dbapi_connection)

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            mode = str(conn.get_execution_options().get(BEGIN_MODE_OPTION, "DEFERRED")).upper()
            if mode not in _BEGIN_MODES:
                raise ValueError(f"unknown SQLite BEGIN mode {mode!r}")
            # Straight to the driver: this runs for every transaction, and SQLAlchemy's statement
            # machinery costs more than SQLite needs to begin one (scripts/bench.py).
            statement = f"BEGIN {mode}"
            try:
                conn.connection.driver_connection.execute(statement)  # type: ignore[union-attr]
            except sqlite3.Error as exc:
                # The same exception classes callers see from every other statement.
                raise DBAPIError.instance(
                    statement, None, exc, sqlite3.Error, dialect=conn.dialect
                ) from exc

        return connections.after_fork_in_child

    def enable_journal_mode(self, engine: Engine) -> None:
        label = engine.url.database or ":memory:"
        path = None if _is_memory(engine.url) else _filesystem_path(engine.url)
        wanted = _wanted_journal_mode(engine.url)
        existing = _EXISTING_FILE.get(engine, True)

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection: sqlite3.Connection, _record: Any) -> None:
            _enable_wal_on(dbapi_connection, label, path, wanted, existing=existing)

        # The pool may already hold connections made before (the schema check): switch the
        # file through one of them now (the mode is the file's, every connection sees it).
        with engine.connect() as conn:
            driver = conn.connection.driver_connection
            if is_connection(driver):
                _enable_wal_on(
                    cast(sqlite3.Connection, driver), label, path, wanted, existing=existing
                )

    def existing_tables(self, conn: Connection, names: Collection[str]) -> set[str]:
        return _existing_objects(conn, "table", names)

    def existing_indexes(self, conn: Connection, names: Collection[str]) -> set[str]:
        return _existing_objects(conn, "index", names)

    def column_names(self, conn: Connection, table: str) -> set[str]:
        # table_xinfo also names hidden and generated columns, as the inspector does; "main":
        # the store's own file, never an attached one.
        rows = conn.exec_driver_sql(
            "SELECT name FROM pragma_table_xinfo(?, 'main')", (table,)
        )
        return {str(row[0]) for row in rows}

    def referencing_columns(
        self, conn: Connection, table: str, column: str
    ) -> list[tuple[str, str]]:
        # A key naming no column refers to the primary key: ``id``, for the tables asked about.
        rows = conn.exec_driver_sql(
            'SELECT m.name, f."from" FROM main.sqlite_master AS m, '
            "pragma_foreign_key_list(m.name, 'main') AS f "
            "WHERE m.type = 'table' AND lower(f.\"table\") = lower(?) "
            'AND (f."to" IS NULL OR lower(f."to") = lower(?)) ORDER BY m.name, f."from"',
            (table, column),
        )
        return [(str(row[0]), str(row[1])) for row in rows]

    def holds_bytes(self, cell: ColumnElement[Any]) -> ColumnElement[bool]:
        return func.typeof(cell) == "blob"

    def holds_no_number(self, cell: ColumnElement[Any], *, whole: bool) -> ColumnElement[bool]:
        # 9e999 is SQLite's literal of an infinity (it stores no NaN: a NaN bound is NULL).
        infinities: list[ColumnElement[Any]] = [literal_column("9e999"), literal_column("-9e999")]
        found: list[ColumnElement[bool]] = [
            func.typeof(cell).in_(("text", "blob")), cell.in_(infinities)
        ]
        if whole:  # a REAL that is no whole number (INTEGER affinity keeps a whole one as such)
            found.append(and_(func.typeof(cell) == "real", cell != func.round(cell)))
        return or_(*found)

    def defer_foreign_keys(self, conn: Connection) -> None:
        # Ends with the transaction by itself (SQLite resets it at every COMMIT and ROLLBACK).
        conn.exec_driver_sql("PRAGMA defer_foreign_keys = ON")

    def database_file(self, url: URL) -> Path | None:
        if _is_memory(url):
            return None
        return _filesystem_path(url)

    def log_files_exist(self, url: URL) -> bool:
        path = self.database_file(url)
        if path is None:
            return False
        return any(
            os.path.lexists(f"{path}{suffix}") for suffix in ("-wal", "-shm", "-journal")
        )

    def release_log_files(self, url: URL) -> None:
        """A read-only connection (``mode=ro``) to a WAL database creates ``-wal`` and
        ``-shm`` when they are missing and, unable to write, cannot remove them at its close.
        A writable connection of the store's SQLite library, opened and closed, can: SQLite
        removes them when it closes the last connection to the file (any process's), after a
        checkpoint of what the log holds (committed data, nothing of ours: the store was
        read-only); while anyone else has the file open it leaves them. Never our unlink
        (another process may be using them, and only SQLite knows), never the standard
        library's ``sqlite3`` beside a bundled one on one file (:mod:`.sqlite_library`).
        Nothing for an in-memory, ``immutable`` or ``mode=ro`` database (the caller asked
        for no writable connection), or a file the user cannot write: then side files this
        user now owns beside another user's file are named in a warning, as they stop the
        owner's writes (``_warn_of_foreign_side_files``)."""
        path = self.database_file(url)
        parameters = uri_parameters(url)
        if path is None or parameters.get("immutable") == "1" or parameters.get("mode") == "ro":
            return
        if not os.access(path, os.W_OK):
            _warn_of_foreign_side_files(path)
            return
        try:
            conn = connect_file(path, parameters.get("vfs"))
        except Exception:
            logger.debug("could not reopen %s to let SQLite remove its log files", path,
                         exc_info=True)  # fmt: skip
            return
        try:
            # One read: SQLite opens the log only when a connection first reads the file,
            # and only a connection that opened it removes it at its close.
            conn.execute("PRAGMA schema_version").fetchone()
        except Exception:
            logger.debug("could not read %s to let SQLite remove its log files", path,
                         exc_info=True)  # fmt: skip
        finally:
            with contextlib.suppress(Exception):
                conn.close()

    def lasting_parameters(self, url: URL) -> dict[str, str]:
        # A suggested command keeps what the store cannot be opened without, the choice to
        # stay out of WAL (without it, the command would switch the file into WAL), and the
        # VFS: its writers' locks are the VFS's (a unix-dotfile writer locks with a .lock
        # directory), and a command under another one would write beside them unseen.
        given = uri_parameters(url)
        lasting = {key: given[key] for key in ("immutable", "journal_mode")
                   if given.get(key) in ("1", "delete")}  # fmt: skip
        if "vfs" in given:
            lasting["vfs"] = given["vfs"]
        return lasting

    def why_read_only(self, url: URL) -> str | None:
        path = self.database_file(url)
        if path is None or self.requests_read_only(url) or not path.exists():
            return None
        return why_not_writable(path)

    def read_only_media_url(self, url: URL) -> URL | None:
        path = self.database_file(url)
        if path is None or uri_parameters(url).get("immutable") == "1":
            return None
        directory = path.parent
        try:
            exists = path.is_file()
            read_only_media = bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
        except OSError:
            return None
        if not exists or not (read_only_media or not os.access(directory, os.W_OK)):
            return None
        return URL.create(url.drivername, database=str(path.resolve()), query={"immutable": "1"})

    def store_files(self, url: URL) -> tuple[Path, ...]:
        database = self.database_file(url)
        if database is None:
            return ()
        return (database, *(database.with_name(database.name + s) for s in COMPANION_SUFFIXES))

    def copy_database(self, url: URL, destination: Path) -> None:
        path = self.database_file(url)
        if path is None:
            raise StoreUnavailableError("an in-memory database has no file to copy")
        copy_pages(path, destination, vfs=uri_parameters(url).get("vfs"))

    def copy_as_read(self, conn: Connection, destination: Path) -> None:
        driver = cast(sqlite3.Connection, conn.connection.driver_connection)
        snapshot_into(driver, destination, uri_parameters(conn.engine.url).get("vfs"))

    def write_ahead_log(self, url: URL) -> Path | None:
        path = self.database_file(url)
        return None if path is None else path.with_name(path.name + "-wal")

    def truncate_write_ahead_log(self, engine: Engine) -> None:
        with engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")

    def engine_summary(self, conn: Connection) -> tuple[str, bool]:
        used = library()
        mode = conn.exec_driver_sql("PRAGMA journal_mode").scalar()
        return f"{used.describe()}; this file: journal_mode={mode}", not used.wal_reset_bug

    def integrity_problems(self, conn: Connection) -> list[str] | None:
        # The pages and b-trees; the full-text indexes are the search checks' (fts_integrity,
        # which a repair rebuilds), not reported twice (see page_problems).
        driver = cast(sqlite3.Connection, conn.connection.driver_connection)
        return page_problems(driver, "integrity_check")

    def reclaimable_fraction(self, conn: Connection) -> float | None:
        pages = int(conn.exec_driver_sql("PRAGMA page_count").scalar_one())
        free = int(conn.exec_driver_sql("PRAGMA freelist_count").scalar_one())
        return free / pages if pages > 0 else 0.0

    def vacuum_memory_bytes(self, conn: Connection) -> int:
        # SQLite's rule for where temporary storage goes: TEMP_STORE=0 always a file, 3 always
        # memory; 1 (the default build) a file unless PRAGMA temp_store says memory (2), 2
        # memory unless it says file (1). The copy is the live pages, written compacted.
        built = 1
        for (option,) in conn.exec_driver_sql("PRAGMA compile_options"):
            if str(option).startswith("TEMP_STORE="):
                built = int(str(option).partition("=")[2])
        asked = int(conn.exec_driver_sql("PRAGMA temp_store").scalar_one())
        in_memory = built == 3 or (built == 2 and asked != 1) or (built == 1 and asked == 2)
        if not in_memory:
            return 0
        pages = conn.exec_driver_sql("PRAGMA page_count").scalar_one()
        free = conn.exec_driver_sql("PRAGMA freelist_count").scalar_one()
        page_size = conn.exec_driver_sql("PRAGMA page_size").scalar_one()
        return max(0, int(pages) - int(free)) * int(page_size)

    def logical_size_bytes(self, conn: Connection) -> int:
        # The pages the main file holds once the WAL is checkpointed in: a stat() of the file
        # misses what still sits in -wal (and never opens the file behind SQLite's back).
        pages = conn.exec_driver_sql("PRAGMA page_count").scalar_one()
        page_size = conn.exec_driver_sql("PRAGMA page_size").scalar_one()
        return int(pages) * int(page_size)

    def writer_queue_file(self, url: URL, *, read_only: bool) -> Path | None:
        if read_only or _is_memory(url):
            return None
        # Through the links: a store opened by its real path and by a link to it (a linked
        # state.db, a linked HERMES_HOME) is one store with one queue.
        path = Path(os.path.realpath(_filesystem_path(url)))
        return path.with_name(path.name + WRITER_QUEUE_SUFFIX)

    def insert(self, table: Table) -> Insert:
        return insert(table)

    def json_list_sql(self, param: str) -> str:
        return f"(SELECT value FROM json_each(:{param}))"

    def json_id_list_sql(self, param: str) -> str:
        # json_each already yields a JSON number as an INTEGER.
        return self.json_list_sql(param)

    def json_pairs_sql(self, first: str, second: str) -> str:
        # JSON holds no BLOB (a salvaged file's id can be one: json_array would fail the
        # statement); such a value travels as its hex, third, and comes back as its bytes.
        return (
            f"json_group_array(CASE WHEN typeof({second}) = 'blob'"
            f" THEN json_array({first}, NULL, hex({second}))"
            f" ELSE json_array({first}, {second}) END)"
        )

    @contextlib.contextmanager
    def statement_deadline(self, conn: Connection, seconds: float) -> Iterator[StatementDeadline]:
        deadline = StatementDeadline(seconds)
        driver = cast(sqlite3.Connection, conn.connection.dbapi_connection)
        interrupted = False

        def past_deadline() -> int:
            nonlocal interrupted
            if deadline.expired():
                interrupted = True
                return 1  # SQLite interrupts the running statement
            return 0

        driver.set_progress_handler(past_deadline, _DEADLINE_INSTRUCTIONS)
        try:
            yield deadline
        except Exception as exc:
            original = exc.orig if isinstance(exc, DBAPIError) else exc
            if interrupted and "interrupt" in str(original).lower():
                raise deadline.timeout_error() from exc
            raise
        finally:
            driver.set_progress_handler(None, 0)

    def ascii_folded_contains_sql(self, haystack_sql: str, needle_param: str) -> str:
        # lower() folds ASCII letters only (no ICU here). instr(), not LIKE: no wildcards to
        # escape, and no 50,000-byte pattern limit for a needle to run into.
        return f"instr(lower({haystack_sql}), :{needle_param}) > 0"

    def read_options(self) -> dict[str, Any]:
        # A deferred BEGIN already reads one snapshot under WAL.
        return {}

    def write_options(self) -> dict[str, Any]:
        # Take the write lock up front: contention shows at BEGIN, never mid-transaction
        # (where a deferred transaction's upgrade to a writer can fail with SQLITE_BUSY).
        return {BEGIN_MODE_OPTION: WRITE_BEGIN_MODE}

    def is_retryable(self, exc: BaseException) -> bool:
        original = exc.orig if isinstance(exc, DBAPIError) else exc
        return isinstance(original, sqlite3.OperationalError) and _is_busy(original)

    def translate_error(
        self, exc: BaseException, url: URL | None = None
    ) -> SessionStoreError | None:
        original = exc.orig if isinstance(exc, DBAPIError) else exc
        if not isinstance(original, sqlite3.Error):
            return None
        message = str(original).lower()
        if "disk is full" in message or "database or disk is full" in message or (
            "disk i/o error" in message and url is not None and no_room_left(self.store_files(url))
        ):
            return full_disk_error("the session store")
        path = None if url is None else self.database_file(url)
        if "readonly database" in message or "read-only" in message:
            if path is not None and _has_hot_journal_candidate(path, original):
                return ReadOnlyStoreError(_hot_journal_message(path))
            why = None if path is None else why_not_writable(path)
            if why is None:
                return ReadOnlyStoreError(f"the session store is read-only here: {original}")
            return ReadOnlyStoreError(f"the session store {path} is read-only here: {why}")
        if "file is not a database" in message or "malformed" in message:
            named = "" if path is None else f": {path}"
            return StoreUnavailableError(
                f"this file is not a usable SQLite database ({original}){named}; "
                "it was not modified"
            )
        if "no such index" in message:  # a read naming an index (INDEXED BY) the file lost
            return IndexMissingError(f"the store has lost an index its reads need ({original})")
        if missing_core_table().search(message):
            return SchemaMissingError(f"this database has no session tables ({original})")
        if "no such vfs" in message:
            return StoreLocationError(f"the URL names a VFS this SQLite does not have ({original})")
        if "unable to open database" in message:
            return StoreUnavailableError(f"cannot open the SQLite database: {original}")
        if "integer overflow" in message:  # SUM past 2**63 (PostgreSQL sums as numeric)
            return ValueOutOfRangeError(
                f"a total of the store's figures passes a 64-bit integer, the most SQLite's "
                f"SUM holds ({original}); nothing was written"
            )
        if "pattern too complex" in message or "string or blob too big" in message:
            # SQLite's length limits (SQLITE_LIMIT_LIKE_PATTERN_LENGTH, SQLITE_MAX_LENGTH).
            return UnsupportedValueError(f"a value is too long for SQLite to handle: {original}")
        return None

    def reserve_message_ids(self, conn: Connection, highest: int) -> None:
        # One writer at a time, and each import or copy batch checks which ids are taken in
        # its own write transaction, so nothing can collide. Moving AUTOINCREMENT's counter
        # past the incoming ids only spares live appends between two copy batches from taking
        # an id a later batch needs (which would then be renumbered).
        has_sequence = conn.exec_driver_sql(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sqlite_sequence'"
        ).first()
        if has_sequence is None or highest <= 0:
            return
        moved = conn.exec_driver_sql(
            "UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = 'messages'", (highest,)
        )
        if moved.rowcount == 0:
            conn.exec_driver_sql(
                "INSERT INTO sqlite_sequence (name, seq) VALUES ('messages', ?)", (highest,)
            )

    def refresh_statistics(self, conn: Connection) -> None:
        # SQLite plans without sqlite_stat1 unless ANALYZE was once run; Hermes never runs
        # it, and writing the table here would change every later plan of a file Hermes
        # shares, so a load leaves it alone.
        return None

    def set_autocommit(self, dbapi_connection: Any, on: bool) -> None:
        # The driver is always in autocommit here (isolation_level = None on connect) and the
        # begin listener owns every BEGIN; single_statement_appends is False, so nothing
        # ever needs it switched.
        return None

    def lend_reader_to_writes(self, conn: Connection, *, writing: bool) -> None:
        # Never called: writes keep a connection of their own here (one writer per file, kept
        # apart from the readers for SQLite's locking; serialize_writes_in_process), so a
        # reader is never lent and there is nothing to switch.
        return None

    def connection_lost(self, engine: Engine) -> None:
        return None  # never called: an embedded database has no connection to lose

    def backend_of(self, conn: Connection) -> int | None:
        return None  # no server process: the transaction lives and ends in this one

    def settle_lost_backend(self, conn: Connection, backend: int) -> bool:
        return True  # never called: backend_of gives nothing to settle

    def long_reads_hold_writers_off(self, conn: Connection) -> bool:
        # In WAL a reader holds nobody off. In the rollback journal its SHARED lock holds
        # every COMMIT off, and once a writer waits (PENDING) every new reader too. An
        # in-memory database has no other connection; nobody writes an immutable file.
        if _is_memory(conn.engine.url) or uri_parameters(conn.engine.url).get("immutable") == "1":
            return False
        # On the driver, in autocommit: no transaction (and no lock) is left behind.
        driver = cast(sqlite3.Connection, conn.connection.driver_connection)
        journal = driver.execute("PRAGMA journal_mode").fetchone()[0]
        return str(journal).lower() != "wal"

    def driver_in_transaction(self, conn: Connection) -> bool:
        # A COMMIT refused busy (the rollback journal: a reader's SHARED lock outlasted the
        # busy timeout) leaves SQLite's transaction open, RESERVED lock and all.
        driver = conn.connection.driver_connection if not conn.invalidated else None
        return bool(driver is not None and is_connection(driver) and driver.in_transaction)

    def is_disconnect(self, exc: BaseException) -> bool:
        # An embedded database has no connection to lose.
        return False

    def integrity_violation(self, exc: BaseException) -> IntegrityViolation | None:
        original = exc.orig if isinstance(exc, DBAPIError) else exc
        if not isinstance(original, sqlite3.IntegrityError):
            return None
        message = str(original)
        for prefix, kind in _INTEGRITY_MESSAGES:
            if message.startswith(prefix):
                # "UNIQUE constraint failed: messages.id" names the columns, not a constraint.
                detail = message[len(prefix) :].lstrip(": ").strip() or None
                return IntegrityViolation(kind, detail)
        return IntegrityViolation("other", None)

    def checkpoint(self, engine: Engine) -> None:
        try:
            with engine.connect() as conn:
                # PASSIVE never waits for readers; frames in use are simply left for later.
                conn.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)")
        except Exception:
            logger.debug("WAL checkpoint skipped", exc_info=True)

    def prepare_database(self, engine: Engine) -> None:
        return None  # one file, one store: nothing is shared

    def lock_for_migration(self, conn: Connection) -> None:
        # The migration runs inside BEGIN IMMEDIATE: holding the write lock is the lock.
        conn.execute(text("SELECT 1"))

    def enter_store_schema(self, conn: Connection) -> None:
        return None  # the file is the store's namespace

    def migration_statement_rewrite(self, conn: Connection) -> Callable[[str], str] | None:
        return None

    def blank_store_key(self, conn: Connection) -> Hashable | None:
        from . import sqlite_image

        return sqlite_image.blank_key(conn)

    def capture_new_store(self, conn: Connection) -> StoreImage | None:
        from . import sqlite_image

        return sqlite_image.capture(conn)

    def replay_new_store(self, conn: Connection, image: StoreImage) -> None:
        from . import sqlite_image

        sqlite_image.replay(conn, image)

    def vacuum(self, conn: Connection, tables: Collection[str]) -> None:
        # Straight to the driver, which is in autocommit (isolation_level = None): through
        # SQLAlchemy the begin listener would open a transaction, where VACUUM cannot run.
        # SQLite rewrites the file itself (the file rule above): nothing is copied or
        # unlinked from Python, and the other connections, ours and other processes', keep
        # reading their snapshots meanwhile. In WAL mode the rewritten pages go through the
        # log, so the checkpoint after it is what shrinks the file.
        driver = cast(sqlite3.Connection, conn.connection.driver_connection)
        assert is_connection(driver)
        if driver.in_transaction:
            raise RuntimeError("VACUUM needs a connection outside any transaction")
        _checkpoint_truncate(driver)
        try:
            driver.execute("VACUUM")
        except sqlite3.Error as exc:
            raise DBAPIError.instance("VACUUM", None, exc, sqlite3.Error,
                                      dialect=conn.dialect) from exc  # fmt: skip
        _checkpoint_truncate(driver)

    def starts_with(self, column: ColumnElement[str], prefix: str) -> ColumnElement[bool]:
        # Text compares by its UTF-8 bytes here (BINARY), the order of code points, so the
        # ids that begin with the prefix are exactly one range of the id's index, as Hermes
        # queries it. A prefix whose last character has no successor is compared directly.
        if not prefix:
            return true()
        last = ord(prefix[-1])
        if last >= 0x10FFFF or 0xD7FF <= last <= 0xDFFF:
            return func.substr(column, 1, len(prefix)) == prefix
        return and_(column >= prefix, column < prefix[:-1] + chr(last + 1))


def _existing_objects(conn: Connection, kind: str, names: Collection[str]) -> set[str]:
    """Which of ``names`` the store's own file holds as objects of ``kind`` (sqlite_master's
    ``type``)."""
    wanted = sorted(names)
    if not wanted:
        return set()
    marks = ", ".join("?" for _ in wanted)
    rows = conn.exec_driver_sql(
        f"SELECT name FROM main.sqlite_master WHERE type = ? AND name IN ({marks})",
        (kind, *wanted),
    )
    return {str(row[0]) for row in rows}


def _checkpoint_truncate(driver: sqlite3.Connection) -> None:
    """Best effort: a reader still on an old snapshot leaves part of the log for later."""
    try:
        driver.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    except sqlite3.Error:
        logger.debug("WAL checkpoint around VACUUM skipped", exc_info=True)


def copy_pages(
    path: Path, destination: Path, *, check: bool = True, vfs: str | None = None
) -> None:
    """Copy the live SQLite file ``path`` into the new, empty file ``destination``.

    Through SQLite's online backup API, in one step: the copy is one consistent snapshot (WAL
    content included) holding every write committed before it started, even while other
    processes go on writing, and the store's own files are only ever opened and closed by
    SQLite (the file rule above), never by a plain file copy. With ``check`` the copy must
    pass ``quick_check`` (:func:`page_problems`). Where the copy lives, its name and mode are
    the caller's (:mod:`sessionstore.storage.private_files`). ``vfs`` is the store URL's: the
    file is read under the locks its writers take (``unix-dotfile`` locks are not ``fcntl``
    locks; a copy under the default layer would read beside a commit it cannot see).
    """
    # The store's own library: a second one would drop the store's locks when it closed.
    source = connect_file(path, vfs, read_only=True, timeout=30)
    try:
        copy = connect(destination)
        try:
            source.backup(copy)  # pages=-1: the whole file in one step, one snapshot
            problems = page_problems(copy) if check else []
        finally:
            copy.close()
    finally:
        source.close()
    if problems:
        raise StoreUnavailableError(
            f"the copy of {path} did not pass quick_check ({problems[:3]}); nothing was changed"
        )


@contextlib.contextmanager
def private_snapshot(source: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """A private copy of the database ``source`` reads, for work that must write to run (FTS5
    spells its integrity check as an INSERT) on a store that must not be written.

    The copy is SQLite's anonymous temporary database (the empty file name): created by
    SQLite exclusively, mode 0600, removed from the directory at once and gone when the
    connection closes; its pages live in the page cache and spill to the temporary
    directory. It is filled through the backup API from ``source``, one consistent
    snapshot: the one of ``source``'s read transaction, which it must be in. ``source`` only
    reads (a ``mode=ro`` connection will do): no lock but a reader's is taken on the store,
    and nothing of it changes. The copy is the store's library's (:mod:`.sqlite_library`),
    in autocommit: what runs on it begins its own transaction.
    """
    copy = _filled_copy(source)
    try:
        yield copy
    finally:
        copy.close()


def snapshot_into(
    source: sqlite3.Connection, destination: Path, vfs: str | None = None
) -> None:
    """:func:`private_snapshot` written into ``destination``, a new, empty file in a private
    place the caller chose (through the store URL's ``vfs``: :func:`connect_file`), and
    closed: a copy on disk, where the anonymous temporary database lives in memory in
    pysqlite3's build (``TEMP_STORE=3``): a store of 2 GB copied there takes 2 GB of memory.
    The copy may be written freely (no sync: it is scratch)."""
    _filled_copy(source, lambda: connect_file(destination, vfs, check_same_thread=False)).close()


def _filled_copy(
    source: sqlite3.Connection, open_copy: Callable[[], sqlite3.Connection] | None = None
) -> sqlite3.Connection:
    if not source.in_transaction:
        raise ValueError("a private snapshot is taken inside the source's read transaction")
    # The snapshot taken here, by a read: a store kept busy raises "database is locked"
    # after the busy timeout (retried by the caller), where the driver's backup would wait
    # for ever (it sleeps and tries again as long as the source is busy).
    source.execute("SELECT count(*) FROM sqlite_master").fetchall()
    if open_copy is None:  # SQLite's anonymous temporary database
        copy = connect("", isolation_level=None, check_same_thread=False)
    else:
        copy = open_copy()
    try:
        if open_copy is not None:
            copy.execute("PRAGMA synchronous = OFF")
        source.backup(copy)  # pages=-1: the whole database in one step, one snapshot
    except BaseException:
        copy.close()
        raise
    return copy


def page_problems(conn: sqlite3.Connection, check: str = "quick_check") -> list[str]:
    """What ``PRAGMA quick_check`` (or ``integrity_check``) finds wrong with the database's
    pages, leaving out what SQLite 3.44+ adds about FTS5 tables: whether each full-text index
    agrees with what *this* library's tokenizer makes of its rows. A page copy cannot change
    that, and a library other than the one that wrote an index may disagree with it without
    any damage (a Hermes trigram index written by SQLite 3.40 over text holding NUL characters
    is "malformed" to 3.53). The search indexes are checked, and rebuilt, on their own
    (``db doctor``'s fts checks, and the chain after adoption). FTS5's own words for a damaged
    index (``fts5: corrupt structure record for table "messages_fts"``) are left out too: the
    index is built again from the rows by ``db doctor --fix``, which takes this copy first
    and could otherwise never repair it."""
    rows = [str(row[0]) for row in conn.execute(f"PRAGMA {check}")]
    return [row for row in rows if row != "ok" and not _is_fts5_finding(row)]


def _is_fts5_finding(row: str) -> bool:
    return " for FTS5 table " in row or row.startswith("fts5: ")


SQLITE_HEADER = b"SQLite format 3\x00"
MIN_DATABASE_BYTES = 512
"""The smallest page size: a database file is empty or at least one whole page long."""


def _refuse_foreign_file(path: Path) -> None:
    """Refuse a file that cannot be a database before SQLite writes to it, opening nothing.

    SQLite itself answers "file is not a database" for a foreign file of a page or more on its
    first read, but it reads a file shorter than its header as an empty database and would
    write a new store over it. ``stat`` settles that case without a descriptor, so it is safe
    while this process holds SQLite locks on the file (see the module docstring).
    """
    try:
        size = os.stat(path).st_size
    except OSError:
        return  # missing or unreachable: SQLite creates it or reports why it cannot
    if 0 < size < MIN_DATABASE_BYTES and path.is_file():
        raise StoreUnavailableError(
            f"this file is not a usable SQLite database ({size} bytes, shorter than one "
            f"page): {path}; it was not modified"
        )


def _has_hot_journal_candidate(path: Path, error: BaseException) -> bool:
    """Whether a "readonly database" error met a rollback journal left beside ``path``:
    SQLITE_READONLY_ROLLBACK by name where the driver names the extended code (the standard
    library on Python 3.11+; pysqlite3 names only the primary SQLITE_READONLY), else by a
    non-empty ``-journal`` (``stat``)."""
    name = str(getattr(error, "sqlite_errorname", "") or "")
    if name not in ("", "SQLITE_READONLY"):
        return name == "SQLITE_READONLY_ROLLBACK"
    try:
        return os.stat(path.with_name(path.name + "-journal")).st_size > 0
    except OSError:
        return False


def _owner(stat_result: os.stat_result) -> str:
    try:
        import pwd

        return pwd.getpwuid(stat_result.st_uid).pw_name
    except (ImportError, KeyError):
        return f"uid {stat_result.st_uid}"


def _this_user() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.geteuid()).pw_name
    except (ImportError, KeyError, AttributeError):
        return "this user"


def why_not_writable(path: Path) -> str | None:
    """Why this process cannot write the SQLite file ``path`` (a sentence saying what to
    change), or None when it can. ``stat``/``access``/``statvfs`` only (the file rule): the
    file, the directory where SQLite creates its ``-wal``, ``-shm`` and ``-journal``, the side
    files another user left, a read-only file system."""
    directory = path.parent
    try:
        if os.statvfs(directory).f_flag & os.ST_RDONLY:
            return f"{directory} is on a read-only file system (read it with immutable=1)"
    except (OSError, AttributeError):
        pass
    user = _this_user()
    try:
        info = os.stat(path)
    except OSError:
        return None
    if not os.access(path, os.W_OK):
        return (
            f"{user} cannot write the file (mode {stat.S_IMODE(info.st_mode):04o}, owner "
            f"{_owner(info)}): {_how_to_write(info, path)}"
        )
    for suffix in COMPANION_SUFFIXES:
        side = path.with_name(path.name + suffix)
        try:
            side_info = os.stat(side)
        except OSError:
            continue
        if not os.access(side, os.W_OK):
            return (
                f"{user} cannot write {side.name}, which {_owner(side_info)} left beside it: "
                f"run as {_owner(side_info)}"
            )
    if not os.access(directory, os.W_OK | os.X_OK):
        try:
            how = _how_to_write(os.stat(directory), directory)
        except OSError:
            how = "give this user write access to it"
        return (
            f"{user} cannot write its directory {directory}, where SQLite keeps the -wal, "
            f"-shm and -journal files beside it: {how}"
        )
    return None


def _how_to_write(info: os.stat_result, path: Path) -> str:
    """What lets this user write ``path``: its owner's ``chmod``, or running as its owner."""
    import shlex  # here: only a refusal needs it, and opening a store imports no more

    chmod = f"`chmod u+w {shlex.quote(str(path))}`"
    if hasattr(os, "geteuid") and info.st_uid == os.geteuid():
        return f"make it writable ({chmod})"
    return f"run as {_owner(info)}, or have {_owner(info)} give this user write access"


def _warn_of_foreign_side_files(path: Path) -> None:
    """Reading another user's WAL file that nobody had open, in a directory this user may
    write, makes SQLite create its ``-wal`` and ``-shm`` owned by this user; this user cannot
    write the file, so it cannot remove them either, and the owner's next write fails
    ("attempt to write a readonly database") until they are gone. Not prevented (that needs
    the file's header, which only SQLite may open here): said, with what to do. ``stat``
    only."""
    if not hasattr(os, "geteuid"):
        return
    me = os.geteuid()
    try:
        owner = os.stat(path).st_uid
    except OSError:
        return
    if owner == me:
        return
    left = []
    for suffix in ("-wal", "-shm"):
        side = path.with_name(path.name + suffix)
        try:
            if os.stat(side).st_uid == me:
                left.append(side)
        except OSError:
            continue
    if not left:
        return
    import shlex  # here: only this warning needs it

    names = " and ".join(side.name for side in left)
    logger.warning(
        "reading %s left %s beside it, owned by %s: its owner (%s) cannot write it until they "
        "are removed (`rm %s`, once no program has it open); read another user's store with "
        "immutable=1 (sqlite:///%s?immutable=1) to leave nothing",
        path, names, _this_user(), _owner(os.stat(path)),
        " ".join(shlex.quote(str(side)) for side in left), path,
    )  # fmt: skip


def _hot_journal_message(path: Path) -> str:
    journal = path.with_name(path.name + "-journal")
    why = why_not_writable(path) or "a read-only open cannot roll it back"
    return (
        f"{path} has a rollback journal, {journal.name}, that a program left when it stopped "
        f"in the middle of a write; SQLite rolls it back (the last committed state, nothing "
        f"committed is lost) at the first open that can write the file, and {why}"
    )


def connect_file(
    path: Path | str, vfs: str | None = None, *, read_only: bool = False, **kwargs: Any
) -> sqlite3.Connection:
    """A connection of the stores' library to the file at ``path`` through the store URL's
    ``vfs`` (None: SQLite's default), ``mode=ro`` when ``read_only``, never waiting, in
    autocommit unless ``kwargs`` say otherwise. Whatever touches a store's file or a copy of
    it beside it goes through the URL's layer: a ``unix-dotfile`` writer's lock (a ``.lock``
    directory) is invisible to the default one, which took a live writer's journal for a
    dead one's and rolled it back under it (its COMMIT then failed "database disk image is
    malformed"), and on a file system without working ``fcntl`` locks the default layer
    cannot lock at all."""
    options: dict[str, Any] = {"timeout": 0.0, "isolation_level": None, **kwargs}
    query = [("mode", "ro")] if read_only else []
    if vfs is not None:
        query.append(("vfs", vfs))
    if not query:
        return connect(str(path), **options)
    uri = f"{Path(path).resolve().as_uri()}?{urlencode(query, quote_via=quote)}"
    return connect(uri, uri=True, **options)


def _roll_back_hot_journal(path: Path, vfs: str | None = None) -> None:
    """A read-only connection cannot read a file whose rollback journal is hot (a writer
    died mid-transaction: SQLITE_READONLY_ROLLBACK), and every reading verb would fail on it.
    A writable connection of the store's own SQLite library, opened for one read and closed,
    lets SQLite roll the journal back first, as any opener's first read does (Hermes's next
    open too): the file returns to its last committed state, committed data untouched. Only
    SQLite decides whether the journal is hot (a live writer's is not: its lock says so), and
    only when this user may write the file; else the read fails and says why. ``stat`` first
    (the file rule): nothing is opened outside SQLite, nothing at all without a journal."""
    journal = path.with_name(path.name + "-journal")
    try:
        if os.stat(journal).st_size == 0 or not os.access(path, os.W_OK):
            return
    except OSError:
        return
    try:
        conn = connect_file(path, vfs)
    except Exception:
        return
    try:
        conn.execute("PRAGMA schema_version").fetchone()
    except Exception:
        logger.debug("could not roll back the journal of %s", path, exc_info=True)
    finally:
        with contextlib.suppress(Exception):
            conn.close()


class _ProcessConnections:
    """The driver connections of one engine, with the process that opened each, and what a
    forked child does with the ones it inherited (``sessionstore.storage.fork_safety``).

    In the at-fork hook: nothing through SQLite. They are abandoned (kept alive, never
    finalized) with the engine's old pool, and the engine gets a new one. At the child's first
    new connection to any SQLite store (:func:`_before_connect`), after a quiet fork, they are
    closed through SQLite, so that SQLite's per-process lock bookkeeping forgets them and the
    child's own connections take real file locks. Closing in the child releases nothing of the
    parent's (fcntl locks belong to the process that took them); with the parent still holding
    its shared lock, SQLite's close-time checkpoint cannot start either. One left inside a
    transaction stays abandoned: closing it would roll back, and undoing a write transaction
    edits the WAL index the parent shares.
    """

    def __init__(self, engine: Engine) -> None:
        self._label = engine.url.database or ":memory:"
        self._lock = threading.Lock()
        self._live: dict[int, tuple[sqlite3.Connection, int]] = {}

    def add(self, conn: sqlite3.Connection) -> None:
        with self._lock:
            self._live[id(conn)] = (conn, os.getpid())

    def discard(self, conn: sqlite3.Connection) -> None:
        with self._lock:
            self._live.pop(id(conn), None)

    def after_fork_in_child(self, engine: Engine, child: InheritedHandles) -> None:
        """The engine's reset in a forked child (see the class docstring)."""
        global _fork_child
        _fork_child = child
        self._lock = threading.Lock()
        pid = os.getpid()
        inherited = [conn for conn, owner in self._live.values() if owner != pid]
        self._live = {key: entry for key, entry in self._live.items() if entry[1] == pid}
        # A new pool; the old one's records still point at the parent's copies.
        child.abandon(engine.pool)
        engine.dispose(close=False)
        for conn in inherited:
            child.abandon(conn)
        if inherited and child.quiet:
            label = self._label
            child.defer(lambda: _close_inherited(inherited, label))


_fork_child: InheritedHandles | None = None
"""The fork that made this process, once a SQLite engine was reset in it."""


def _before_connect() -> None:
    """Before any new SQLite connection of a forked child: settle what it inherited first, or
    refuse when the fork caught a thread inside SQLite (a call could block for ever)."""
    child = _fork_child
    if child is None:
        return
    if not child.quiet:
        raise StoreUnavailableError(
            "this process was forked while another thread of its parent was inside a "
            "SQLite store (for longer than the fork waits), so SQLite may hold a lock here "
            "that nobody will release: SQLite stores cannot be used in this process. Fork "
            "when the store is quiet, or use the 'spawn' or 'forkserver' start method"
        )
    child.settle()


def _close_inherited(connections: list[sqlite3.Connection], label: str) -> None:
    """Close, in a child forked quietly, the connections it inherited (class docstring of
    :class:`_ProcessConnections`)."""
    left_open = 0
    for conn in connections:
        try:
            in_transaction = conn.in_transaction
        except sqlite3.ProgrammingError:
            continue  # closed already
        if in_transaction:
            left_open += 1
        else:
            close_inherited(conn)
    if left_open:
        logger.warning(
            "forked while %d connection(s) to %s were inside a transaction: they cannot be "
            "closed safely in the child, so SQLite may not lock the file for this process; "
            "fork when no transaction is open (outside `store.reading()` and `_conn` "
            "transactions)",
            left_open,
            label,
        )


def close_inherited(conn: sqlite3.Connection) -> None:
    """Close, in a forked child, a connection the parent opened: through SQLite, so that its
    lock bookkeeping for the file forgets this copy, and without the close-time checkpoint
    where Python can switch it off (3.12+); without that switch the checkpoint cannot start
    anyway while the parent holds its shared lock."""
    no_checkpoint = getattr(library().module, "SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE", None)
    setconfig = getattr(conn, "setconfig", None)
    if no_checkpoint is not None and setconfig is not None:
        with contextlib.suppress(sqlite3.Error):
            setconfig(no_checkpoint, True)
    with contextlib.suppress(sqlite3.Error):
        conn.close()


def _wanted_journal_mode(url: URL) -> str:
    """The journal mode a store's URL asks for: ``wal`` unless ``journal_mode=delete``."""
    return uri_parameters(url).get("journal_mode", "wal")


def _enable_wal_on(
    dbapi_connection: sqlite3.Connection,
    label: str,
    path: Path | None,
    wanted: str,
    *,
    existing: bool,
) -> None:
    cursor = dbapi_connection.cursor()
    try:
        _enable_wal(cursor, label, path, wanted, existing=existing)
    finally:
        cursor.close()


def _has_pages(path: Path) -> bool:
    """Whether ``path`` is a file SQLite has written pages to (a new store's is missing or
    empty until its first write)."""
    try:
        return path.is_file() and path.stat().st_size > 0
    except OSError:
        return False


# Whether each engine's file held pages when the engine was made, before its first connection.
_EXISTING_FILE: weakref.WeakKeyDictionary[Engine, bool] = weakref.WeakKeyDictionary()
_warned_wal_reset_bug: set[str] = set()
_warned_off_wal: set[str] = set()
_warned_switched_to_wal: set[str] = set()


def _enable_wal(
    cursor: sqlite3.Cursor, label: str, path: Path | None, wanted: str, *, existing: bool
) -> None:
    """WAL lets readers and one writer work at once; some filesystems cannot do it (SQLite
    refuses it on some, and on those shared across a VM boundary it accepts it and corrupts:
    :mod:`.shared_memory`), a SQLite with the WAL-reset bug must not (module docstring of
    :mod:`.sqlite_library`), and a user may have chosen the rollback journal
    (``journal_mode=delete``: Hermes's ``database.journal_mode``, set for NFS and SMB homes,
    where SQLite accepts WAL and only one host sees its shared memory). In every case a file
    already in WAL keeps it: moving it back needs every other opener gone (Hermes's rule).
    An ``existing`` file (one with pages before this store opened it) switched from the
    rollback journal to WAL is said once: the mode is the file's, and someone may have chosen
    the rollback journal for it (iot 0.22.2 warns alike)."""
    shared_across_vms = None if path is None else cross_vm_filesystem(path)
    if shared_across_vms is not None:
        _keep_off_wal(
            cursor, label, f"is on a {shared_across_vms} file system, shared across a VM "
            "boundary, where WAL's shared memory is not coherent", warn_if_off=True,
        )  # fmt: skip
        return
    if wanted == "delete":
        _keep_off_wal(cursor, label, "is configured for journal_mode=delete", warn_if_off=False)
        return
    used = library()
    if used.wal_reset_bug:
        _gate_wal_reset_bug(cursor, label, used.describe())
        return
    before = _journal_mode_of(cursor) if existing and label not in _warned_switched_to_wal else None
    try:
        mode = _switch_to_wal(cursor)
        if mode == "wal" and before not in (None, "wal", "memory"):
            _warn_switched_to_wal(label, before)
    except sqlite3.OperationalError as exc:
        if _is_busy(exc):
            # A writer held the file past this connection's busy timeout: the next open
            # switches it (the file and every write in it are whole meanwhile).
            logger.info("%s not switched to WAL yet: %s", label, exc)
            return
        mode = f"unchanged ({exc})"
    # An in-memory database (":memory:" or a named one) answers "memory": nothing to warn about.
    if mode not in ("wal", "memory"):
        logger.warning(
            "WAL is not available for %s (journal_mode=%s); using the rollback journal: "
            "readers and the writer will block each other",
            label,
            mode,
        )


# Between tries of the switch to WAL while another connection writes (seconds): short, as
# a writer on a new or small store commits within milliseconds.
WAL_SWITCH_PAUSE_S = 0.005


def _switch_to_wal(
    cursor: sqlite3.Cursor,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """``PRAGMA journal_mode = WAL``, tried again while another connection writes, until this
    connection's busy timeout has passed; the mode SQLite answers. SQLite itself does not wait
    for a writer here: the switch writes the file's header under a read transaction it
    already holds, and a busy handler is not called there (it could deadlock), so "database
    is locked" comes at once whenever another connection holds the write lock. (Readers
    alone it does wait for, up to the busy timeout, inside one try: the whole wait stays
    under twice the busy timeout.) Given up at once, processes racing to create one store
    (one building it, the others checking it) could all find it busy, and the store stayed in
    the rollback journal until a later open."""
    deadline: float | None = None  # read at the first refusal: most switches never meet one
    while True:
        try:
            row = cursor.execute("PRAGMA journal_mode = WAL").fetchone()
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc):
                raise
            if deadline is None:
                deadline = clock() + _busy_timeout_s(cursor)
            if clock() >= deadline:
                raise
            sleep(WAL_SWITCH_PAUSE_S)
            continue
        return str(row[0]).lower() if row else "unknown"


def _busy_timeout_s(cursor: sqlite3.Cursor) -> float:
    row = cursor.execute("PRAGMA busy_timeout").fetchone()
    return (int(row[0]) if row else 0) / 1000


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    message = str(exc).lower()
    return "locked" in message or "busy" in message


def _journal_mode_of(cursor: sqlite3.Cursor) -> str | None:
    """The file's journal mode as SQLite reports it; None when it cannot be read."""
    try:
        row = cursor.execute("PRAGMA journal_mode").fetchone()
    except sqlite3.OperationalError:
        return None
    return str(row[0]).lower() if row else None


def _warn_switched_to_wal(label: str, before: str) -> None:
    if label in _warned_switched_to_wal:
        return
    _warned_switched_to_wal.add(label)
    logger.warning(
        "%s was in journal_mode=%s and is now in WAL; the mode is the file's and stays after "
        "this process. If the rollback journal was chosen for it (a home on NFS or SMB), keep "
        "it with journal_mode=delete in the store URL, or database.journal_mode: delete in "
        "Hermes's config.yaml: a PRAGMA run on the file is undone at the next open",
        label, before,
    )  # fmt: skip


def _keep_off_wal(cursor: sqlite3.Cursor, label: str, why: str, *, warn_if_off: bool) -> None:
    """A file that must stay out of WAL (``why``) is never switched into it: one in the
    rollback journal keeps its mode; one in WAL already keeps WAL (switching back needs every
    other opener gone), with one warning per file and process saying how to move it."""
    try:
        row = cursor.execute("PRAGMA journal_mode").fetchone()
    except sqlite3.OperationalError as exc:
        logger.debug("journal mode of %s not read: %s", label, exc)
        return
    mode = str(row[0]).lower() if row else "unknown"
    if mode == "memory" or (mode != "wal" and not warn_if_off) or label in _warned_off_wal:
        return
    _warned_off_wal.add(label)
    if mode == "wal":
        logger.warning(
            "%s %s, but it is in WAL mode: kept in WAL, as switching needs every other opener "
            "gone; to leave WAL, run PRAGMA journal_mode=DELETE on it while nothing has it "
            "open (or move the store to a native file system)",
            label, why,
        )  # fmt: skip
    else:
        logger.warning(
            "%s %s: kept in journal_mode=%s (readers wait while a writer commits)",
            label, why, mode,
        )  # fmt: skip


def _gate_wal_reset_bug(cursor: sqlite3.Cursor, label: str, library_line: str) -> None:
    """Hermes's gate: a file not in WAL stays out of it; one in WAL keeps it (moving it back
    needs every other opener gone), with one warning per file and process."""
    try:
        row = cursor.execute("PRAGMA journal_mode").fetchone()
    except sqlite3.OperationalError as exc:
        logger.debug("journal mode of %s not read: %s", label, exc)
        return
    mode = str(row[0]).lower() if row else "unknown"
    if mode == "memory" or label in _warned_wal_reset_bug:
        return
    _warned_wal_reset_bug.add(label)
    if mode == "wal":
        logger.warning(
            "%s is in WAL mode and %s: kept in WAL (no change while others may have it open); "
            "install pysqlite3>=0.6.1 or a Python whose SQLite is 3.51.3 or newer",
            label, library_line,
        )
    else:
        logger.warning(
            "%s: %s, so it is not switched to WAL (journal_mode=%s: readers wait while a "
            "writer commits); install pysqlite3>=0.6.1 or a Python whose SQLite is 3.51.3 "
            "or newer to run it in WAL",
            label, library_line, mode,
        )
