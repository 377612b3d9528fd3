"""PostgreSQL: the server does the locking; we retry what it asks us to retry."""

from __future__ import annotations

import os
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import ColumnElement, Table, event, func, text
from sqlalchemy.dialects.postgresql import Insert, insert
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.exc import DBAPIError, DisconnectionError

from ..errors import (
    DriverMissingError,
    ReadOnlyStoreError,
    SchemaMissingError,
    SessionStoreError,
    StoreFullError,
    StoreUnavailableError,
    UnsupportedValueError,
    ValueOutOfRangeError,
)
from .interface import AfterForkReset, IntegrityViolation, missing_core_table

# serialization_failure, deadlock_detected, lock_not_available (lock_timeout). Not
# query_canceled (57014): that is also a deliberate cancel or statement_timeout, never a lock.
_RETRYABLE_SQLSTATES = frozenset({"40001", "40P01", "55P03"})
_DISK_FULL_SQLSTATES = frozenset({"53100"})
_READ_ONLY_SQLSTATE = "25006"  # read_only_sql_transaction
# program_limit_exceeded: e.g. an id too long for its btree index (about 2.7 kB).
_TOO_LARGE_SQLSTATE = "54000"
# character_not_in_repertoire: e.g. a NUL byte that reached the server.
_BAD_TEXT_SQLSTATE = "22021"
_UNDEFINED_TABLE_SQLSTATE = "42P01"
# numeric_value_out_of_range: a total past BIGINT or DOUBLE PRECISION.
_OUT_OF_RANGE_SQLSTATE = "22003"
# admin_shutdown (pg_terminate_backend, a fast shutdown), crash_shutdown, cannot_connect_now.
_SERVER_GONE_SQLSTATES = frozenset({"57P01", "57P02", "57P03"})
_INTEGRITY_KINDS: dict[str, Literal["foreign_key", "unique", "not_null", "check", "other"]] = {
    "23503": "foreign_key",
    "23505": "unique",
    "23502": "not_null",
    "23514": "check",
    "23000": "other",
    "23001": "other",
    "23P01": "other",
}
_CONNECTION_LOST_MARKERS = (
    "connection failed",
    "connection is lost",
    "connection is closed",
    "server closed the connection",
    "consuming input failed",
    "terminating connection",
)
messages_table_name = "messages"
# An arbitrary but fixed key: every sessionstore process agrees on it.
MIGRATION_LOCK_KEY = 0x5E5510_5707E


_ASCII_UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_ASCII_LOWER = "abcdefghijklmnopqrstuvwxyz"


def _fresh_pool(engine: Engine, keep_alive: Callable[[Any], None]) -> None:
    # A new pool; the old one's connections are dropped without a word (nothing to keep).
    engine.dispose(close=False)


def _sqlstate(exc: BaseException) -> str | None:
    original = exc.orig if isinstance(exc, DBAPIError) else exc
    return getattr(original, "sqlstate", None)


def _require_driver(url: URL) -> None:
    if url.get_driver_name() != "psycopg":
        return  # another driver named explicitly: SQLAlchemy reports it if missing
    try:
        import psycopg  # noqa: F401
    except ImportError as exc:
        raise DriverMissingError(
            f"PostgreSQL URLs need the psycopg driver, which is not installed ({exc}): "
            "pip install 'sessionstore[postgresql]' (from a checkout: pip install -e "
            "'.[postgresql]')"
        ) from exc


_OWNER_PID_KEY = "sessionstore_owner_pid"


def _check_out_safely(engine: Engine) -> None:
    """Each pooled connection is checked before use, without a round trip:

    1. owner: a connection inherited through fork() shares its socket with the parent; using
       it, even for a ping, interleaves two processes' protocol on one socket (a child can read
       the reply meant for its sibling and the sibling waits forever), and closing it sends
       the parent's server a Terminate. The child drops it without touching it;
    2. liveness, as far as the client already knows it: a connection psycopg has seen break
       or close is replaced.

    Either way the pool connects anew (SQLAlchemy retries checkout on DisconnectionError).
    There is no ping (``pool_pre_ping``, a round trip on every checkout: as much as an append
    costs): a connection whose backend went away unnoticed (pg_terminate_backend, a server
    restart) fails its first statement instead, is invalidated, and the store retries the
    whole transaction on a fresh one (a write whose COMMIT was lost is looked for first).
    """

    @event.listens_for(engine, "connect")
    def _remember_owner(dbapi_connection: Any, record: Any) -> None:
        record.info[_OWNER_PID_KEY] = os.getpid()

    @event.listens_for(engine, "checkout")
    def _check_owner(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        if record.info.get(_OWNER_PID_KEY, os.getpid()) != os.getpid():
            record.dbapi_connection = proxy.dbapi_connection = None
            raise DisconnectionError("connection inherited from the parent process")
        if getattr(dbapi_connection, "broken", False) or getattr(
            dbapi_connection, "closed", False
        ):
            raise DisconnectionError("the connection is known to be broken")


class PostgreSQLDialect:
    name = "postgresql"
    stores_nul_in_text = False
    batch_returning_inserts = True  # a round trip per row costs more than one batched statement
    serialize_writes_in_process = False
    single_statement_appends = True  # one round trip: the CTE is its own transaction
    # psycopg begins a transaction at the first statement: reads keep their explicit one.
    autocommit_snapshot_reads = False
    connect_at_open = False  # a server that is down is reported by the first call
    bytewise_collation = "C"

    def prepare_url(self, url: URL, *, read_only: bool) -> URL:
        if url.drivername == "postgresql":
            # psycopg 3 is the driver we support; a bare postgresql:// URL means it.
            return url.set(drivername="postgresql+psycopg")
        return url

    def engine_options(self, url: URL, *, read_only: bool, busy_timeout_s: float) -> dict[str, Any]:
        _require_driver(url)
        timeout_ms = max(int(busy_timeout_s * 1000), 1)
        return {
            # No pool_pre_ping: a round trip per checkout; ``_check_out_safely`` checks the
            # owner and what the driver knows, and the store retries after a lost connection.
            # A row lock that is not granted within the busy timeout becomes a retryable
            # 55P03 instead of an unbounded wait.
            "connect_args": {"options": f"-c lock_timeout={timeout_ms}"},
        }

    def ensure_database_location(self, url: URL) -> None:
        return None

    def install_listeners(
        self, engine: Engine, *, read_only: bool, busy_timeout_s: float, set_journal_mode: bool
    ) -> AfterForkReset:
        _check_out_safely(engine)
        if read_only:

            @event.listens_for(engine, "begin")
            def _on_begin(conn: Connection) -> None:
                conn.exec_driver_sql("SET TRANSACTION READ ONLY")

        # A forked child gets a pool of its own. The parent's sockets are dropped without a
        # word: psycopg never closes a connection from a process that did not open it, and the
        # parent goes on using them.
        return _fresh_pool

    def enable_journal_mode(self, engine: Engine) -> None:
        return None  # the server keeps its own write-ahead log

    def existing_tables(self, conn: Connection, names: Collection[str]) -> set[str]:
        # The tables the Inspector would list: ordinary and partitioned ones, in the schema
        # unqualified names resolve to.
        rows = conn.execute(
            text(
                "SELECT c.relname FROM pg_catalog.pg_class c "
                "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') "
                "AND c.relname = ANY(:names)"
            ),
            {"names": sorted(names)},
        )
        return {str(row[0]) for row in rows}

    def database_file(self, url: URL) -> Path | None:
        return None

    def store_files(self, url: URL) -> tuple[Path, ...]:
        return ()

    def backup(self, url: URL, *, clock: Callable[[], float]) -> Path | None:
        return None  # pg_dump's job: sessionstore never copies a server's data directory

    def write_ahead_log(self, url: URL) -> Path | None:
        return None

    def truncate_write_ahead_log(self, engine: Engine) -> None:
        return None

    def integrity_problems(self, conn: Connection) -> list[str] | None:
        return None  # PostgreSQL checks its own pages

    def writer_queue_file(self, url: URL, *, read_only: bool) -> Path | None:
        # The server queues lock waiters itself.
        return None

    def release_inherited(self, dbapi_connection: Any) -> bool:
        # Never close it here: that would say goodbye to the server on the parent's socket.
        return False

    def insert(self, table: Table) -> Insert:
        return insert(table)

    def json_list_sql(self, param: str) -> str:
        return f"(SELECT json_array_elements_text(CAST(:{param} AS json)))"

    def json_id_list_sql(self, param: str) -> str:
        return f"(SELECT CAST(json_array_elements_text(CAST(:{param} AS json)) AS bigint))"

    def ascii_folded_contains_sql(self, haystack_sql: str, needle_param: str) -> str:
        # lower() here folds every letter the database's locale knows; SQLite's folds ASCII
        # only, and Hermes's id search is SQLite's, so the ASCII letters are mapped by hand.
        return (
            f"strpos(translate({haystack_sql}, '{_ASCII_UPPER}', '{_ASCII_LOWER}'), "
            f":{needle_param}) > 0"
        )

    def read_options(self) -> dict[str, Any]:
        # READ COMMITTED would give each statement of a read its own snapshot; a listing and
        # its compression tips, or a hit and its context, must come from the same moment.
        return {"isolation_level": "REPEATABLE READ"}

    def write_options(self) -> dict[str, Any]:
        return {}

    def is_retryable(self, exc: BaseException) -> bool:
        return _sqlstate(exc) in _RETRYABLE_SQLSTATES

    def requests_read_only(self, url: URL) -> bool:
        return False

    def translate_error(self, exc: BaseException) -> SessionStoreError | None:
        state = _sqlstate(exc)
        if state in _DISK_FULL_SQLSTATES:
            return StoreFullError("the PostgreSQL server's disk is full; nothing was written")
        if state == _READ_ONLY_SQLSTATE:
            return ReadOnlyStoreError("this session store is read-only; nothing was written")
        original = exc.orig if isinstance(exc, DBAPIError) else exc
        if state == _OUT_OF_RANGE_SQLSTATE:
            return ValueOutOfRangeError(
                "a number is out of the range its column holds; nothing was written "
                f"({str(original).splitlines()[0]})"
            )
        if state == _TOO_LARGE_SQLSTATE:
            return UnsupportedValueError(
                "a value is too large for PostgreSQL to index; nothing was written "
                f"({str(original).splitlines()[0]})"
            )
        # psycopg refuses NUL itself, before the server sees it, so there is no SQLSTATE.
        if state == _BAD_TEXT_SQLSTATE or "cannot contain NUL" in str(original):
            return UnsupportedValueError(
                "PostgreSQL text cannot hold NUL characters; nothing was read or written "
                f"({str(original).splitlines()[0]})"
            )
        if state == _UNDEFINED_TABLE_SQLSTATE and missing_core_table().search(str(original)):
            return SchemaMissingError(
                f"this database has no session tables ({str(original).splitlines()[0]})"
            )
        server_gone = state is not None and (
            state.startswith("08") or state in _SERVER_GONE_SQLSTATES
        )
        if server_gone or self.is_disconnect(exc):
            return StoreUnavailableError(f"cannot reach the PostgreSQL server: {exc}")
        return None

    def reserve_message_ids(self, conn: Connection, highest: int) -> None:
        # Every INSERT holds ROW EXCLUSIVE on messages until it commits, and takes its id from
        # the sequence meanwhile; EXCLUSIVE conflicts with it. Once granted, no append is in
        # flight (each id handed out so far is committed, hence visible, or dead), and new
        # appends wait the few milliseconds until this transaction commits, by which time the
        # sequence is past ``highest``. nextval() reads the sequence's position atomically.
        # Never setval() from MAX(id) outside such a lock: it can move the sequence back under
        # an in-flight append and hand its id out twice.
        conn.exec_driver_sql(f"LOCK TABLE {messages_table_name} IN EXCLUSIVE MODE")
        conn.execute(
            text(
                "SELECT setval(pg_get_serial_sequence('messages', 'id'), "
                "GREATEST(:highest, nextval(pg_get_serial_sequence('messages', 'id')), "
                "COALESCE((SELECT MAX(id) FROM messages), 0)), true)"
            ),
            {"highest": highest},
        )

    def refresh_statistics(self, conn: Connection) -> None:
        # Autovacuum would get there, but only after its naptime and a threshold of changed
        # rows; until then a freshly loaded table is planned from the statistics of the
        # empty one (a table of "a few rows" is read by whichever index looks cheapest).
        # ANALYZE samples at most 30,000 rows a table: about a second at any size.
        conn.exec_driver_sql("ANALYZE sessions, messages")

    def set_autocommit(self, dbapi_connection: Any, on: bool) -> None:
        # psycopg only flips a flag while the connection is idle: no round trip.
        dbapi_connection.autocommit = on

    def connection_lost(self, engine: Engine) -> None:
        # Closes the idle pooled connections only; checked-out ones finish (or fail) on their
        # own, and the pool connects anew on demand. This is what replaces a ping per checkout.
        engine.pool.dispose()

    def is_disconnect(self, exc: BaseException) -> bool:
        if not isinstance(exc, DBAPIError):
            return False  # only the driver's own errors say anything about the connection
        if exc.connection_invalidated:
            return True
        state = _sqlstate(exc)
        if state is None:
            # libpq's own errors carry no SQLSTATE; these words are its lost/refused link.
            message = str(exc.orig).lower()
            return any(marker in message for marker in _CONNECTION_LOST_MARKERS)
        return state.startswith("08") or state in _SERVER_GONE_SQLSTATES

    def integrity_violation(self, exc: BaseException) -> IntegrityViolation | None:
        original = exc.orig if isinstance(exc, DBAPIError) else exc
        state = _sqlstate(exc)
        kind = _INTEGRITY_KINDS.get(state or "")
        if kind is None:
            return None
        diag = getattr(original, "diag", None)
        return IntegrityViolation(kind, getattr(diag, "constraint_name", None))

    def checkpoint(self, engine: Engine) -> None:
        return None

    def lock_for_migration(self, conn: Connection) -> None:
        # Transaction-scoped: released by the COMMIT that publishes the new schema.
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})

    def vacuum(self, conn: Connection, tables: Collection[str]) -> None:
        # Plain VACUUM, not VACUUM FULL: FULL would rewrite each table under an ACCESS
        # EXCLUSIVE lock, stopping every reader and writer of the store until it is done,
        # where SQLite's VACUUM leaves WAL readers alone. Plain VACUUM takes a lock that
        # conflicts with neither, makes dead rows' space reusable and trims empty pages off
        # each table's end; ANALYZE refreshes the planner's view after a large delete.
        # It cannot run inside a transaction block: autocommit on this connection.
        autocommit = conn.execution_options(isolation_level="AUTOCOMMIT")
        present = sorted(self.existing_tables(autocommit, tables))
        if present:
            names = ", ".join(f'"{name}"' for name in present)
            autocommit.exec_driver_sql(f"VACUUM (ANALYZE) {names}")

    def starts_with(self, column: ColumnElement[str], prefix: str) -> ColumnElement[bool]:
        # starts_with() compares characters exactly, whatever the database's collation (a
        # locale's collation orders ids differently from SQLite, so a range would not do).
        return func.starts_with(column, prefix)
