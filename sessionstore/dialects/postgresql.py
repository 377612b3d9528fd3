"""PostgreSQL: the server does the locking; we retry what it asks us to retry."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Table, event, text
from sqlalchemy.dialects.postgresql import Insert, insert
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.exc import DBAPIError

from ..errors import (
    ReadOnlyStoreError,
    SessionStoreError,
    StoreFullError,
    StoreUnavailableError,
    UnsupportedValueError,
    ValueOutOfRangeError,
)

# serialization_failure, deadlock_detected, lock_not_available (lock_timeout). Not
# query_canceled (57014): that is also a deliberate cancel or statement_timeout, never a lock.
_RETRYABLE_SQLSTATES = frozenset({"40001", "40P01", "55P03"})
_DISK_FULL_SQLSTATES = frozenset({"53100"})
_READ_ONLY_SQLSTATE = "25006"  # read_only_sql_transaction
# program_limit_exceeded: e.g. an id too long for its btree index (about 2.7 kB).
_TOO_LARGE_SQLSTATE = "54000"
# character_not_in_repertoire: e.g. a NUL byte that reached the server.
_BAD_TEXT_SQLSTATE = "22021"
# numeric_value_out_of_range: a total past BIGINT or DOUBLE PRECISION.
_OUT_OF_RANGE_SQLSTATE = "22003"
# An arbitrary but fixed key: every sessionstore process agrees on it.
MIGRATION_LOCK_KEY = 0x5E5510_5707E


def _sqlstate(exc: BaseException) -> str | None:
    original = exc.orig if isinstance(exc, DBAPIError) else exc
    return getattr(original, "sqlstate", None)


class PostgreSQLDialect:
    name = "postgresql"
    stores_nul_in_text = False
    batch_returning_inserts = True  # a round trip per row costs more than one batched statement
    serialize_writes_in_process = False

    def prepare_url(self, url: URL, *, read_only: bool) -> URL:
        if url.drivername == "postgresql":
            # psycopg 3 is the driver we support; a bare postgresql:// URL means it.
            return url.set(drivername="postgresql+psycopg")
        return url

    def engine_options(self, url: URL, *, read_only: bool, busy_timeout_s: float) -> dict[str, Any]:
        timeout_ms = max(int(busy_timeout_s * 1000), 1)
        return {
            "pool_pre_ping": True,
            # A row lock that is not granted within the busy timeout becomes a retryable
            # 55P03 instead of an unbounded wait.
            "connect_args": {"options": f"-c lock_timeout={timeout_ms}"},
        }

    def ensure_database_location(self, url: URL) -> None:
        return None

    def install_listeners(
        self, engine: Engine, *, read_only: bool, busy_timeout_s: float, set_journal_mode: bool
    ) -> None:
        if not read_only:
            return

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            conn.exec_driver_sql("SET TRANSACTION READ ONLY")

    def insert(self, table: Table) -> Insert:
        return insert(table)

    def json_list_sql(self, param: str) -> str:
        return f"(SELECT json_array_elements_text(CAST(:{param} AS json)))"

    def read_options(self) -> dict[str, Any]:
        # READ COMMITTED would give each statement of a read its own snapshot; a listing and
        # its compression tips, or a hit and its context, must come from the same moment.
        return {"isolation_level": "REPEATABLE READ"}

    def write_options(self) -> dict[str, Any]:
        return {}

    def is_retryable(self, exc: BaseException) -> bool:
        return _sqlstate(exc) in _RETRYABLE_SQLSTATES

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
        if state is not None and state.startswith("08"):
            return StoreUnavailableError(f"cannot reach the PostgreSQL server: {exc}")
        return None

    def reset_sequences(self, conn: Connection) -> None:
        # Rows inserted with explicit ids do not move the serial sequence: move it past them.
        conn.execute(
            text(
                "SELECT setval(pg_get_serial_sequence('messages', 'id'), "
                "COALESCE((SELECT MAX(id) FROM messages), 0) + 1, false)"
            )
        )

    def checkpoint(self, engine: Engine) -> None:
        return None

    def lock_for_migration(self, conn: Connection) -> None:
        # Transaction-scoped: released by the COMMIT that publishes the new schema.
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
