"""SQLite: WAL, foreign keys, a short busy timeout, and BEGIN chosen per transaction.

The pysqlite driver's own transaction handling is switched off on connect (``isolation_level =
None``) so that SQLAlchemy's ``begin`` event emits every BEGIN itself; that is SQLAlchemy's
documented recipe and the only way to choose ``BEGIN IMMEDIATE`` for writes.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote, unquote, urlsplit

from sqlalchemy import Table, event, text
from sqlalchemy.dialects.sqlite import Insert, insert
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.exc import DBAPIError

from ..errors import (
    ReadOnlyStoreError,
    SessionStoreError,
    StoreFullError,
    StoreUnavailableError,
    UnsupportedValueError,
)
from . import IntegrityViolation

logger = logging.getLogger(__name__)

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


def _is_memory(url: URL) -> bool:
    return url.database in (None, "", ":memory:") or str(url.database).startswith("file::memory:")


def _is_uri_filename(url: URL) -> bool:
    # Only with uri=true does the driver read "file:..." as a URI; otherwise it is a plain name.
    uri_flag = str(url.query.get("uri", "")).lower() in {"true", "1", "yes", "on", "y", "t"}
    return uri_flag and str(url.database).startswith("file:")


def _filesystem_path(url: URL) -> Path:
    if _is_uri_filename(url):
        # The path sits between "file:" and any "?query" or "#fragment", percent-encoded.
        return Path(unquote(urlsplit(str(url.database)).path))
    return Path(str(url.database)).expanduser()


class SQLiteDialect:
    name = "sqlite"
    stores_nul_in_text = True
    batch_returning_inserts = False  # in-process: a row costs microseconds
    serialize_writes_in_process = True

    def prepare_url(self, url: URL, *, read_only: bool) -> URL:
        if not read_only or _is_memory(url):
            return url
        # mode=ro makes the driver refuse every write and never create the file.
        if _is_uri_filename(url):
            return url.update_query_dict({"mode": "ro"})
        # Quoted: a "?", "#" or "%" in the path would otherwise end the path early and lose
        # mode=ro, and the driver would then create a file at the truncated path.
        path = quote(_filesystem_path(url).resolve().as_posix())
        return url.set(database=f"file:{path}?mode=ro").update_query_dict({"uri": "true"})

    def engine_options(self, url: URL, *, read_only: bool, busy_timeout_s: float) -> dict[str, Any]:
        # check_same_thread=False: connections move between threads through the pool; SQLite
        # itself is built thread-safe. timeout is the busy handler's wait before "locked".
        return {"connect_args": {"check_same_thread": False, "timeout": busy_timeout_s}}

    def ensure_database_location(self, url: URL) -> None:
        if _is_memory(url):
            return
        _filesystem_path(url).parent.mkdir(parents=True, exist_ok=True)

    def install_listeners(
        self, engine: Engine, *, read_only: bool, busy_timeout_s: float, set_journal_mode: bool
    ) -> None:
        label = engine.url.database or ":memory:"
        path = None if _is_memory(engine.url) else _filesystem_path(engine.url)

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection: sqlite3.Connection, _record: Any) -> None:
            if path is not None:
                # Before any PRAGMA: switching to WAL would already write over a foreign file.
                _refuse_foreign_file(path)
            # Autocommit at the driver, so the begin listener below owns every BEGIN.
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            try:
                # Short wait inside SQLite; the jittered retry above it does the rest.
                cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
                # Child rows must point at real sessions; SQLite checks only when asked.
                cursor.execute("PRAGMA foreign_keys = ON")
                if read_only:
                    # Belt and braces with mode=ro: this connection can never write.
                    cursor.execute("PRAGMA query_only = ON")
                elif set_journal_mode:
                    _enable_wal(cursor, label)
            finally:
                cursor.close()

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

    def insert(self, table: Table) -> Insert:
        return insert(table)

    def json_list_sql(self, param: str) -> str:
        return f"(SELECT value FROM json_each(:{param}))"

    def read_options(self) -> dict[str, Any]:
        # A deferred BEGIN already reads one snapshot under WAL.
        return {}

    def write_options(self) -> dict[str, Any]:
        # Take the write lock up front: contention shows at BEGIN, never mid-transaction
        # (where a deferred transaction's upgrade to a writer can fail with SQLITE_BUSY).
        return {BEGIN_MODE_OPTION: WRITE_BEGIN_MODE}

    def is_retryable(self, exc: BaseException) -> bool:
        original = exc.orig if isinstance(exc, DBAPIError) else exc
        if not isinstance(original, sqlite3.OperationalError):
            return False
        message = str(original).lower()
        return "locked" in message or "busy" in message

    def translate_error(self, exc: BaseException) -> SessionStoreError | None:
        original = exc.orig if isinstance(exc, DBAPIError) else exc
        if not isinstance(original, sqlite3.Error):
            return None
        message = str(original).lower()
        if "disk is full" in message or "database or disk is full" in message:
            return StoreFullError(
                "the disk holding the session store is full; nothing was written "
                "and earlier data is intact: free some space and retry"
            )
        if "readonly database" in message or "read-only" in message:
            return ReadOnlyStoreError(f"the session store is read-only here: {original}")
        if "file is not a database" in message or "malformed" in message:
            return StoreUnavailableError(
                f"this file is not a usable SQLite database ({original}); it was not modified"
            )
        if "unable to open database" in message:
            return StoreUnavailableError(f"cannot open the SQLite database: {original}")
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

    def lock_for_migration(self, conn: Connection) -> None:
        # The migration runs inside BEGIN IMMEDIATE: holding the write lock is the lock.
        conn.execute(text("SELECT 1"))


SQLITE_HEADER = b"SQLite format 3\x00"


def _refuse_foreign_file(path: Path) -> None:
    """Refuse a non-empty file without the SQLite header before SQLite touches it.

    SQLite itself reports most foreign files as "not a database", but it reads a one-byte
    file as an empty database and would write a new store over it.
    """
    try:
        with path.open("rb") as handle:
            header = handle.read(len(SQLITE_HEADER))
    except OSError:
        return  # missing or unreadable: SQLite creates it or reports why it cannot
    if header and header != SQLITE_HEADER:
        raise StoreUnavailableError(
            f"this file is not a usable SQLite database (no SQLite header): {path}; "
            "it was not modified"
        )


def _enable_wal(cursor: sqlite3.Cursor, label: str) -> None:
    """WAL lets readers and one writer work at once; some filesystems cannot do it."""
    try:
        row = cursor.execute("PRAGMA journal_mode = WAL").fetchone()
        mode = str(row[0]).lower() if row else "unknown"
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc).lower():
            # Another connection is mid-write; it set WAL already or the next connect will.
            logger.debug("journal mode not changed for %s: %s", label, exc)
            return
        mode = f"unchanged ({exc})"
    if mode != "wal" and label != ":memory:":
        logger.warning(
            "WAL is not available for %s (journal_mode=%s); using the rollback journal: "
            "readers and the writer will block each other",
            label,
            mode,
        )
