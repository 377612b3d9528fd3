"""PostgreSQL: the server does the locking; we retry what it asks us to retry.

A URL means what it says
------------------------
Whatever the user gives libpq as ``options`` (``?options=-csearch_path%3Dtenant_a`` in the URL,
else ``PGOPTIONS`` from the environment, as libpq itself would read it) is kept: our own
``-c lock_timeout=... -c jit=off`` goes *before* it, so a user's ``lock_timeout`` or ``jit``
wins and their ``search_path``, ``statement_timeout`` and the rest are untouched.

Schema per tenant
-----------------
A store lives in the schema its connections' ``search_path`` resolves unqualified names to
(``current_schema()``), so one database can hold one store per schema. Everything this package
reads from the catalog is narrowed to that schema (never "any schema's ``messages``"), the
migration lock is keyed by it (two tenants migrating at once neither wait for nor see each
other), a migration creates the schema the ``search_path`` names first when it is missing, and
Alembic's ``alembic_version`` lives in it. What a database shares is created once, in its own
short transaction before any migration: the ``pg_trgm`` extension (extensions are per
database), in ``public`` where that schema exists. A tenant's ``search_path`` need not name
that schema: the DDL that uses the extension names its operator class with the schema it lives
in (:func:`qualify_extension_objects`).
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import re
import weakref
from collections.abc import Callable, Collection, Hashable, Iterator
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import ColumnElement, Table, event, false, func, literal_column, text
from sqlalchemy.dialects.postgresql import Insert, insert
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.exc import DBAPIError, DisconnectionError

from ..errors import (
    AuthenticationError,
    DatabaseNotFoundError,
    DriverMissingError,
    PermissionDeniedError,
    ReadOnlyStoreError,
    SchemaMissingError,
    SessionStoreError,
    StatementCanceledError,
    StoreFullError,
    StoreUnavailableError,
    StoreUnreachableError,
    UnsupportedValueError,
    ValueOutOfRangeError,
)
from .interface import (
    AfterForkReset,
    InheritedHandles,
    IntegrityViolation,
    StatementDeadline,
    StoreImage,
    missing_core_table,
)

# serialization_failure, deadlock_detected, lock_not_available (lock_timeout). Not
# query_canceled (57014): that is also a deliberate cancel or statement_timeout, never a lock.
_RETRYABLE_SQLSTATES = frozenset({"40001", "40P01", "55P03"})
_DISK_FULL_SQLSTATES = frozenset({"53100"})
_QUERY_CANCELED_SQLSTATE = "57014"
_LONGEST_TIMEOUT_MS = 2**31 - 1
"""The largest ``statement_timeout`` the server takes (milliseconds, a 32-bit int)."""
_READ_ONLY_SQLSTATE = "25006"  # read_only_sql_transaction
_PERMISSION_DENIED_SQLSTATE = "42501"  # insufficient_privilege
_IDLE_IN_TRANSACTION_SQLSTATE = "25P03"  # idle_in_transaction_session_timeout
# program_limit_exceeded: e.g. an id too long for its btree index (about 2.7 kB).
_TOO_LARGE_SQLSTATE = "54000"
# character_not_in_repertoire: e.g. a NUL byte that reached the server.
_BAD_TEXT_SQLSTATE = "22021"
_UNDEFINED_TABLE_SQLSTATE = "42P01"
# numeric_value_out_of_range: a total past BIGINT or DOUBLE PRECISION.
_OUT_OF_RANGE_SQLSTATE = "22003"
# invalid_text_representation: a value of another type for a typed column (text for a number)
_WRONG_TYPE_SQLSTATE = "22P02"
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
    # psycopg's wait, when poll() says the socket hung up or failed with nothing to read (a
    # reset racing the poll). It raises outside libpq, which still waits for the statement's
    # result: the connection is stuck inside it, and the statement may have run.
    "connection socket closed",
    # libpq on such a connection, at its next command (the ROLLBACK that follows the error
    # above, which it hides): it can serve nothing more, and the earlier command's outcome
    # is unknown. Lost, like a broken socket: thrown away, and a COMMIT in it looked for.
    "another command is already in progress",
)
messages_table_name = "messages"
# Arbitrary but fixed: every sessionstore process agrees on them. Migrations lock the pair
# (MIGRATION_LOCK_CLASS, hashtext(schema)), one lock per store; the extension step locks
# (MIGRATION_LOCK_CLASS, DATABASE_LOCK_ID) for the few statements it needs.
MIGRATION_LOCK_CLASS = 0x5E55_1057
DATABASE_LOCK_ID = 0
TRIGRAM_EXTENSION = "pg_trgm"
SHARED_EXTENSION_SCHEMA = "public"
"""Where a migration creates ``pg_trgm`` when the database has none yet (if this schema
exists; else the store's own schema): a schema every tenant can use, that no tenant owns."""
_TRIGRAM_OPCLASS = re.compile(r"(?<![.\w\"])gin_trgm_ops\b")


_ASCII_UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_ASCII_LOWER = "abcdefghijklmnopqrstuvwxyz"


def _fresh_pool(engine: Engine, child: InheritedHandles) -> None:
    """A forked child's reset: a new pool. The old one is abandoned with its connections:
    never closed (that would send the parent's server a Terminate on the parent's socket) and
    never collected (the pool would roll a checked-out one back, speaking on it)."""
    child.abandon(engine.pool)
    engine.dispose(close=False)


# Connecting failed (psycopg's words; libpq puts no SQLSTATE on them). The server's own FATAL
# replies inside them are in its language; lc_messages other than English reads as
# "unreachable", still typed and still at once.
_CONNECT_FAILURE_PREFIXES = ("connection failed:", "failed to resolve host",
                             "connection timeout expired")  # fmt: skip
# A server restarting or full answers with these: worth the retry budget.
# A full server says "too many clients", or, with only the reserved slots left (every
# server's superuser_reserved_connections), "remaining connection slots are reserved ..."; a
# role's or a database's CONNECTION LIMIT says "too many connections for ...".
# A backend ended during its start-up (a DBA's or a pooler's pg_terminate_backend, a restart
# beginning) says "terminating connection": the next attempt gets a new backend.
_CONNECT_TRANSIENT_MARKERS = ("starting up", "shutting down", "too many clients",
                              "remaining connection slots are reserved",
                              "too many connections for", "recovery mode",
                              "not yet accepting", "terminating connection")  # fmt: skip
_AUTHENTICATION_MARKERS = ("authentication failed", "no pg_hba.conf entry", "role \"",
                           "password", "permission denied for database")  # fmt: skip
_DATABASE_MISSING = re.compile(r'database "(?P<name>(?:[^"]|"")*)" does not exist', re.I)


def connect_failure(exc: BaseException) -> SessionStoreError | None:
    """The typed error for a connection that could not be made and that no retry would
    make (None for any other error, and for a server that is starting up or full).

    A store that never connected has nothing to lose: refused, unresolvable, unknown database,
    bad credentials are said at once, by cause, instead of as a lost connection retried for
    the whole retry budget."""
    if not isinstance(exc, DBAPIError):
        return None
    message = str(exc.orig).strip()
    lowered = message.lower()
    if not lowered.startswith(_CONNECT_FAILURE_PREFIXES):
        return None
    if any(marker in lowered for marker in _CONNECT_TRANSIENT_MARKERS):
        return None
    said = " ".join(message.split())
    missing = _DATABASE_MISSING.search(message)
    if missing is not None:
        return DatabaseNotFoundError(
            f"the PostgreSQL server has no database \"{missing.group('name')}\": create it "
            f"first (CREATE DATABASE), or fix the URL ({said})"
        )
    if any(marker in lowered for marker in _AUTHENTICATION_MARKERS):
        return AuthenticationError(
            f"the PostgreSQL server refused the credentials: check the user name and password "
            f"in the URL ({said})"
        )
    return StoreUnreachableError(f"cannot connect to the PostgreSQL server ({said})")


class _ServerDeadline(StatementDeadline):
    """Hands the server the time left before each statement: ``statement_timeout`` for this
    transaction alone (``set_config(..., true)`` is ``SET LOCAL``), at least 1 ms (0 would
    switch it off); the value it had is kept to be put back."""

    def __init__(self, conn: Connection, seconds: float) -> None:
        super().__init__(seconds)
        self._conn = conn
        self.saved: str | None = None

    def _arm(self) -> None:
        left = self.remaining()
        if not math.isfinite(left):
            return
        milliseconds = min(max(math.ceil(left * 1000), 1), _LONGEST_TIMEOUT_MS)
        saved = self._conn.execute(
            text(
                "SELECT current_setting('statement_timeout'), "
                "set_config('statement_timeout', :ms, true)"
            ),
            {"ms": str(milliseconds)},
        ).scalar_one()
        if self.saved is None:
            self.saved = str(saved)


def _first_line(error: BaseException) -> str:
    """The driver's first line (psycopg's message), or the error's type when it has none."""
    shown = str(error).strip()
    return shown.splitlines()[0] if shown else type(error).__name__


def _sqlstate(exc: BaseException) -> str | None:
    original = exc.orig if isinstance(exc, DBAPIError) else exc
    return getattr(original, "sqlstate", None)


def user_options(url: URL) -> str | None:
    """The server options the user gave: the URL's ``options`` (all of them, in order, when
    given more than once), else ``PGOPTIONS``, which libpq reads only when the connection
    names no options itself (ours would hide it)."""
    given = url.query.get("options")
    if given:
        return " ".join((given,) if isinstance(given, str) else given)
    return os.environ.get("PGOPTIONS") or None


def search_path_entries(search_path: str) -> list[str]:
    """The schema names of a ``search_path`` setting, in order, as the server reads them:
    comma-separated, double-quoted names kept as written (``""`` is one quote), bare names
    folded to lower case. ``"$user"`` stays as it is."""
    entries: list[str] = []
    name: list[str] = []
    quoted = in_quotes = False
    index = 0
    while index <= len(search_path):
        char = search_path[index] if index < len(search_path) else ","
        if in_quotes:
            if char == '"' and search_path[index + 1 : index + 2] == '"':
                name.append('"')
                index += 1
            elif char == '"':
                in_quotes = False
            else:
                name.append(char)
        elif char == '"':
            in_quotes = quoted = True
        elif char == ",":
            text_ = "".join(name) if quoted else "".join(name).strip().lower()
            if text_:
                entries.append(text_)
            name, quoted = [], False
        elif not (char.isspace() and (quoted or not name)):
            name.append(char)
        index += 1
    return entries


def first_named_schema(search_path: str, user: str, current: str | None) -> str | None:
    """The schema a ``search_path`` names first, existing or not: ``$user`` counts only where
    it exists (then it is ``current``, the first existing entry), as the server skips it
    otherwise; system schemas never count. None when the path names none."""
    for entry in search_path_entries(search_path):
        if entry == "$user":
            if current == user:
                return user
            continue
        if entry == "pg_catalog" or entry.startswith("pg_temp"):
            continue
        return entry
    return None


_WHERE_NAMES_RESOLVE = "current_setting('search_path'), current_user, current_schema()"


def _existing_relations(
    conn: Connection, relkinds: tuple[str, ...], names: Collection[str]
) -> set[str]:
    """Which of ``names`` exist as relations of ``relkinds`` in the schema unqualified names
    resolve to, and only if that is the store's own. While the schema a tenant's search_path
    names first does not exist, names resolve in the next one on the path (public, often:
    another store's): then the store has none of them yet."""
    row = conn.execute(
        text(
            f"SELECT {_WHERE_NAMES_RESOLVE}, ARRAY(SELECT c.relname "
            "FROM pg_catalog.pg_class c "
            "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND c.relkind::text = ANY(:kinds) "
            "AND c.relname = ANY(:names))"
        ),
        {"kinds": list(relkinds), "names": sorted(names)},
    ).one()
    if row[2] is None or first_named_schema(str(row[0]), str(row[1]), row[2]) != row[2]:
        return set()
    return {str(name) for name in row[3]}


def target_schema(conn: Connection) -> str | None:
    """The schema a migration builds the store in (:func:`first_named_schema`)."""
    row = conn.execute(text(f"SELECT {_WHERE_NAMES_RESOLVE}")).one()
    return first_named_schema(str(row[0]), str(row[1]), row[2])


def extension_schema(conn: Connection, extension: str = TRIGRAM_EXTENSION) -> str | None:
    """The schema an installed extension's objects live in; None when it is not installed."""
    return conn.execute(
        text(
            "SELECT n.nspname FROM pg_catalog.pg_extension e "
            "JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = :name"
        ),
        {"name": extension},
    ).scalar()


def _schema_exists(conn: Connection, name: str) -> bool:
    row = conn.execute(
        text("SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = :name"), {"name": name}
    ).first()
    return row is not None


def quote_identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def qualify_extension_objects(statement: str, trigram_schema: str | None) -> str:
    """``statement`` with ``pg_trgm``'s operator class named by its schema, so an index over it
    can be built from a ``search_path`` that does not name that schema (a tenant's)."""
    if trigram_schema is None or "gin_trgm_ops" not in statement:
        return statement
    return _TRIGRAM_OPCLASS.sub(f"{quote_identifier(trigram_schema)}.gin_trgm_ops", statement)


def _require_driver(url: URL) -> None:
    if url.get_driver_name() != "psycopg":
        return  # another driver named explicitly: SQLAlchemy reports it if missing
    try:
        import psycopg  # noqa: F401
    except ImportError as exc:
        raise DriverMissingError(
            f"PostgreSQL URLs need the psycopg driver, which is not installed ({exc}): "
            "pip install 'psycopg[binary]' (what sessionstore's postgresql extra installs; "
            "from a checkout: pip install -e '.[postgresql]')"
        ) from exc


_OWNER_PID_KEY = "sessionstore_owner_pid"
_BACKEND_PID_KEY = "sessionstore_backend_pid"
SETTLE_WAIT_MS = 5000
"""How long the look for a lost COMMIT waits for the backend that ran it to end."""
_END_BACKEND = text(
    # Only a backend of this role on this database: the pid was read when our connection was
    # made, and it can name another process only once ours has ended (and its outcome with
    # it) and the server's pids have wrapped around meanwhile.
    "SELECT pg_terminate_backend(pid, :wait_ms) FROM pg_stat_activity"
    " WHERE pid = :pid AND usename = current_user AND datname = current_database()"
)


_SET_UP_QUERY = "SELECT current_schema(), current_setting('transaction_isolation')"
_ISOLATION_READ: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
"""The isolation level :data:`_SET_UP_QUERY` read on a first connection, until SQLAlchemy
asks for it a moment later in the same set-up."""


@functools.cache
def _psycopg_set_up_in_one_round_trip() -> type[Any]:
    """SQLAlchemy's psycopg dialect, its engine's first connection set up in one query.

    SQLAlchemy learns the server on each engine's first connection in four queries between a
    BEGIN and a ROLLBACK (``version()``, ``current_schema()``, the isolation level,
    ``standard_conforming_strings``), and every store has an engine of its own: a PostgreSQL
    store's open was 14 round trips, six of them this. libpq already holds the server's
    version and ``standard_conforming_strings`` from the connection's start-up (the server
    reports both), so one query asks for the rest; SQLAlchemy's ``initialize`` is its own,
    and the values it keeps are the ones its own queries give (tests compare them, with a
    user's ``search_path`` and isolation level). Where libpq has no answer, SQLAlchemy's
    query is asked. Built on first use: a SQLite-only process never imports it.
    """
    from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg

    class PsycopgOneRoundTripSetUp(PGDialect_psycopg):
        # Compiles as its parent does: SQLAlchemy caches compiled SQL only for a dialect
        # class that says so itself.
        supports_statement_cache = True

        def _get_server_version_info(self, connection: Any) -> Any:
            version = int(connection.connection.dbapi_connection.info.server_version)
            if not version:
                return super()._get_server_version_info(connection)  # type: ignore[no-untyped-call]
            # What libpq's PQserverVersion encodes: 150020 is 15.20, 90624 was 9.6.24.
            major, rest = divmod(version, 10000)
            return (major, rest) if major >= 10 else (major, rest // 100, rest % 100)

        def _get_default_schema_name(self, connection: Any) -> Any:
            schema, isolation = connection.exec_driver_sql(_SET_UP_QUERY).one()
            _ISOLATION_READ[connection.connection.dbapi_connection] = str(isolation)
            return schema

        def get_default_isolation_level(self, dbapi_conn: Any) -> Any:
            read = _ISOLATION_READ.pop(dbapi_conn, None)
            if read is None:
                return super().get_default_isolation_level(dbapi_conn)  # type: ignore[no-untyped-call]
            return read.upper()

        def _set_backslash_escapes(self, connection: Any) -> None:
            info = connection.connection.dbapi_connection.info
            reported = info.parameter_status("standard_conforming_strings")
            if reported is None:
                super()._set_backslash_escapes(connection)  # type: ignore[no-untyped-call]
            else:
                self._backslash_escapes = reported == "off"

    return PsycopgOneRoundTripSetUp


def _set_up_in_one_round_trip(engine: Engine) -> None:
    """Give ``engine`` the dialect :func:`_psycopg_set_up_in_one_round_trip` builds, before
    its first connection; an engine of another driver keeps its own."""
    from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg

    if type(engine.dialect) is PGDialect_psycopg:
        engine.dialect.__class__ = _psycopg_set_up_in_one_round_trip()


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
        # libpq keeps the backend's pid from the start-up: no round trip.
        record.info[_BACKEND_PID_KEY] = dbapi_connection.info.backend_pid

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
    keeps_nan = True
    keeps_any_type_in_a_column = False
    hermes_writes_here = False  # every Hermes release writes SQLite only
    migrations_make_delivery_ledger = True  # no Hermes gateway writes here to make it
    batch_returning_inserts = True  # a round trip per row costs more than one batched statement
    writes_constants_into_statements = False  # a server plans bound values alike
    serialize_writes_in_process = False
    multi_row_inserts = False  # psycopg pipelines an executemany
    foreign_writer_poll_s: float | None = None  # a server queues waiters and wakes them in turn
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
        # A row lock that is not granted within the busy timeout becomes a retryable 55P03
        # instead of an unbounded wait. No JIT: a store's statements read a page of rows, but
        # at a million messages the planner's cost of a word search passes jit_above_cost and
        # every search compiled 143 functions first (60-200 ms of a 300 ms search). Ours
        # first: the server applies the options in order, so a lock_timeout or jit of the
        # user's own, later in the text, wins.
        ours = f"-c lock_timeout={timeout_ms} -c jit=off"
        theirs = user_options(url)
        # No pool_pre_ping: a round trip per checkout; ``_check_out_safely`` checks the owner
        # and what the driver knows, and the store retries after a lost connection. No native
        # hstore: no column of the store is one, and SQLAlchemy would look the type up on each
        # engine's first connection (a savepoint, a catalog query and its release: four of the
        # nine round trips of that connection's set-up; every store has an engine of its own).
        return {
            "connect_args": {"options": f"{ours} {theirs}" if theirs else ours},
            "use_native_hstore": False,
        }

    def ensure_database_location(self, url: URL) -> None:
        return None

    def install_listeners(
        self, engine: Engine, *, read_only: bool, busy_timeout_s: float, set_journal_mode: bool
    ) -> AfterForkReset:
        _set_up_in_one_round_trip(engine)
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
        # The tables the Inspector would list: ordinary and partitioned ones.
        return _existing_relations(conn, ("r", "p"), names)

    def existing_indexes(self, conn: Connection, names: Collection[str]) -> set[str]:
        # Plain and partitioned indexes.
        return _existing_relations(conn, ("i", "I"), names)

    def referencing_columns(
        self, conn: Connection, table: str, column: str
    ) -> list[tuple[str, str]]:
        rows = conn.execute(
            text(
                "SELECT child.relname, child_column.attname "
                "FROM pg_catalog.pg_constraint k "
                "JOIN pg_catalog.pg_class parent ON parent.oid = k.confrelid "
                "JOIN pg_catalog.pg_namespace n ON n.oid = parent.relnamespace "
                "JOIN pg_catalog.pg_class child ON child.oid = k.conrelid "
                "JOIN pg_catalog.pg_attribute parent_column "
                "  ON parent_column.attrelid = k.confrelid AND parent_column.attnum = k.confkey[1] "
                "JOIN pg_catalog.pg_attribute child_column "
                "  ON child_column.attrelid = k.conrelid AND child_column.attnum = k.conkey[1] "
                "WHERE k.contype = 'f' AND n.nspname = current_schema() "
                "AND parent.relname = :table AND parent_column.attname = :column "
                "ORDER BY child.relname, child_column.attname"
            ),
            {"table": table, "column": column},
        )
        return [(str(row[0]), str(row[1])) for row in rows]

    def holds_bytes(self, cell: ColumnElement[Any]) -> ColumnElement[bool]:
        return false()

    def holds_no_number(self, cell: ColumnElement[Any], *, whole: bool) -> ColumnElement[bool]:
        if whole:  # a BIGINT or INTEGER column holds whole numbers only
            return false()
        # PostgreSQL's float8 holds both infinities and NaN, and NaN equals NaN here.
        return cell.in_([literal_column(f"'{name}'::float8")
                         for name in ("Infinity", "-Infinity", "NaN")])  # fmt: skip

    def defer_foreign_keys(self, conn: Connection) -> None:
        conn.exec_driver_sql("SET CONSTRAINTS ALL DEFERRED")

    def column_names(self, conn: Connection, table: str) -> set[str]:
        rows = conn.execute(
            text(
                "SELECT a.attname FROM pg_catalog.pg_attribute a "
                "JOIN pg_catalog.pg_class c ON c.oid = a.attrelid "
                "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = current_schema() AND c.relname = :table "
                "AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped"
            ),
            {"table": table},
        )
        return {str(row[0]) for row in rows}

    def database_file(self, url: URL) -> Path | None:
        return None

    def store_files(self, url: URL) -> tuple[Path, ...]:
        return ()

    def log_files_exist(self, url: URL) -> bool:
        return False

    def release_log_files(self, url: URL) -> None:
        return None

    def copy_database(self, url: URL, destination: Path) -> None:
        # pg_dump's job: sessionstore never copies a server's data directory.
        raise StoreUnavailableError("a PostgreSQL database is backed up with pg_dump")

    def write_ahead_log(self, url: URL) -> Path | None:
        return None

    def truncate_write_ahead_log(self, engine: Engine) -> None:
        return None

    def engine_summary(self, conn: Connection) -> tuple[str, bool]:
        row = conn.execute(
            text("SELECT current_setting('server_version'), current_schema()")
        ).one()
        return f"PostgreSQL {row[0]}, schema {row[1]}", True

    def integrity_problems(self, conn: Connection) -> list[str] | None:
        return None  # PostgreSQL checks its own pages

    def reclaimable_fraction(self, conn: Connection) -> float | None:
        return None  # dead tuples are no free-page count; plain VACUUM blocks nobody anyway

    def vacuum_memory_bytes(self, conn: Connection) -> int:
        return 0  # the server's plain VACUUM works page by page in its own memory budget

    def logical_size_bytes(self, conn: Connection) -> int:
        # The store's own schema, not pg_database_size(): the database may hold other
        # schemas (other stores, other programs' tables) that are not this store's size.
        found = conn.execute(
            text(
                "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'm')"
            )
        ).scalar_one()
        return int(found)

    def writer_queue_file(self, url: URL, *, read_only: bool) -> Path | None:
        # The server queues lock waiters itself.
        return None

    def insert(self, table: Table) -> Insert:
        return insert(table)

    def json_list_sql(self, param: str) -> str:
        return f"(SELECT json_array_elements_text(CAST(:{param} AS json)))"

    def json_id_list_sql(self, param: str) -> str:
        return f"(SELECT CAST(json_array_elements_text(CAST(:{param} AS json)) AS bigint))"

    def json_pairs_sql(self, first: str, second: str) -> str:
        return f"json_agg(json_build_array({first}, {second}))"

    @contextlib.contextmanager
    def statement_deadline(self, conn: Connection, seconds: float) -> Iterator[StatementDeadline]:
        deadline = _ServerDeadline(conn, seconds)
        try:
            yield deadline
        except Exception as exc:
            if deadline.saved is not None and _sqlstate(exc) == _QUERY_CANCELED_SQLSTATE:
                raise deadline.timeout_error() from exc
            raise
        if deadline.saved is not None:
            conn.execute(
                text("SELECT set_config('statement_timeout', :saved, true)"),
                {"saved": deadline.saved},
            )

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

    def lasting_parameters(self, url: URL) -> dict[str, str]:
        return {}  # a server's URL is named whole in hints

    def why_read_only(self, url: URL) -> str | None:
        return None  # the server says so at the write

    def read_only_media_url(self, url: URL) -> URL | None:
        return None

    def translate_error(
        self, exc: BaseException, url: URL | None = None
    ) -> SessionStoreError | None:
        failed_to_connect = connect_failure(exc)
        if failed_to_connect is not None:
            return failed_to_connect
        state = _sqlstate(exc)
        if state in _DISK_FULL_SQLSTATES:
            return StoreFullError("the PostgreSQL server's disk is full; nothing was written")
        original = exc.orig if isinstance(exc, DBAPIError) else exc
        said = _first_line(exc if original is None else original)
        if state == _READ_ONLY_SQLSTATE:
            # The store was not opened read-only (Store.write refuses that before the server
            # hears of it): the server or the role's settings made the transaction read-only.
            return ReadOnlyStoreError(
                f"the PostgreSQL server refused to write ({said}): the transaction is read-only "
                "(a standby server, or default_transaction_read_only set for the role or the "
                "database); nothing was written"
            )
        if state == _QUERY_CANCELED_SQLSTATE:
            return StatementCanceledError(
                f"the PostgreSQL server cancelled a statement of this call ({said}): the "
                "statement_timeout in force ran out (set for the role, the database or in the "
                "URL's options) or it was cancelled (pg_cancel_backend); nothing of the call "
                "was written"
            )
        if state == _PERMISSION_DENIED_SQLSTATE:
            return PermissionDeniedError(
                f"the PostgreSQL role may not do this ({said}); nothing was written: grant the "
                "role the privileges the store needs, or open the store read-only"
            )
        if state == _OUT_OF_RANGE_SQLSTATE:
            return ValueOutOfRangeError(
                f"a number is out of the range its column holds; nothing was written ({said})"
            )
        if state == _WRONG_TYPE_SQLSTATE:
            return UnsupportedValueError(
                f"a value is not of its column's type; nothing was written ({said})"
            )
        if state == _TOO_LARGE_SQLSTATE:
            return UnsupportedValueError(
                f"a value is too large for PostgreSQL to index; nothing was written ({said})"
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
        if state == _IDLE_IN_TRANSACTION_SQLSTATE:
            return StoreUnavailableError(
                f"the PostgreSQL server ended the connection ({said}): a transaction stayed "
                "idle past the idle_in_transaction_session_timeout set for the role or the "
                "database (a streamed export read more slowly than that?); nothing of this "
                "call was written"
            )
        if server_gone or self.is_disconnect(exc):
            # The driver's words alone: SQLAlchemy's wrapper adds the statement and its
            # parameters (a message's text), which have no place in a log line.
            return StoreUnavailableError(f"cannot reach the PostgreSQL server: {said}")
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

    def lend_reader_to_writes(self, conn: Connection, *, writing: bool) -> None:
        # What SQLAlchemy does with the level: the pool's reset on return (the engine's
        # default, the writes' level) and the read options on checkout. psycopg sends it with
        # its next BEGIN: attributes, no round trip.
        dialect, dbapi_connection = conn.dialect, conn.connection.dbapi_connection
        if dbapi_connection is None:  # invalidated meanwhile: the caller throws it away
            raise DisconnectionError("the connection is gone")
        if writing:
            dialect.reset_isolation_level(dbapi_connection)
        else:
            dialect.set_isolation_level(dbapi_connection, self.read_options()["isolation_level"])

    def connection_lost(self, engine: Engine) -> None:
        # Closes the idle pooled connections only; checked-out ones finish (or fail) on their
        # own, and the pool connects anew on demand. This is what replaces a ping per checkout.
        engine.pool.dispose()

    def backend_of(self, conn: Connection) -> int | None:
        pid = conn.info.get(_BACKEND_PID_KEY)
        return pid if isinstance(pid, int) else None

    def settle_lost_backend(self, conn: Connection, backend: int) -> bool:
        # A client that lost its socket (a network failure, a proxy's restart) leaves its
        # backend running: it may still be inside the COMMIT, and it learns that its client
        # is gone only when it next writes to it. pg_terminate_backend with a timeout
        # (PostgreSQL 14+) signals it and waits until it has exited; a COMMIT under way
        # finishes first (the server holds interrupts while it commits), so afterwards the
        # transaction is in or out for good. Gone already: no row.
        ended = conn.execute(_END_BACKEND, {"pid": backend, "wait_ms": SETTLE_WAIT_MS}).first()
        return ended is None or bool(ended[0])

    def copy_as_read(self, conn: Connection, destination: Path) -> None:
        raise StoreUnavailableError("a PostgreSQL database is never copied into a file")

    def long_reads_hold_writers_off(self, conn: Connection) -> bool:
        return False  # MVCC: readers and writers pass each other

    def driver_in_transaction(self, conn: Connection) -> bool:
        # A failed COMMIT ends the server's transaction; anything else not idle is left over.
        driver = conn.connection.driver_connection if not conn.invalidated else None
        if driver is None or driver.closed:
            return False
        # psycopg.pq.TransactionStatus.IDLE, by value: psycopg is imported only where used.
        return int(driver.info.transaction_status) != 0

    def is_disconnect(self, exc: BaseException) -> bool:
        if not isinstance(exc, DBAPIError):
            return False  # only the driver's own errors say anything about the connection
        if connect_failure(exc) is not None:
            return False  # never connected: nothing was lost, and a retry would fail alike
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

    def prepare_database(self, engine: Engine) -> None:
        # Extensions are per database. Created here, in a short transaction of its own under
        # a database-wide lock, never inside a store's migration: two tenants would race to
        # create it (one failing on the catalog's unique key), or the first would hold the
        # lock for its whole migration and the second would wait for it.
        with engine.connect() as conn:
            installed = extension_schema(conn) is not None
            conn.rollback()  # the look ended its autobegun transaction
            if installed:
                return
            with conn.begin():
                conn.execute(
                    text("SELECT pg_advisory_xact_lock(:cls, :id)"),
                    {"cls": MIGRATION_LOCK_CLASS, "id": DATABASE_LOCK_ID},
                )
                if extension_schema(conn) is not None:
                    return
                shared = _schema_exists(conn, SHARED_EXTENSION_SCHEMA)
                where = f" SCHEMA {quote_identifier(SHARED_EXTENSION_SCHEMA)}" if shared else ""
                conn.exec_driver_sql(f"CREATE EXTENSION IF NOT EXISTS {TRIGRAM_EXTENSION}{where}")

    def lock_for_migration(self, conn: Connection) -> None:
        # One lock per store (its schema), transaction-scoped: released by the COMMIT that
        # publishes the new schema. Tenants of one database migrate side by side.
        schema = target_schema(conn)
        conn.execute(
            text("SELECT pg_advisory_xact_lock(:cls, hashtext(:schema))"),
            {"cls": MIGRATION_LOCK_CLASS, "schema": schema or ""},
        )

    def enter_store_schema(self, conn: Connection) -> None:
        schema = target_schema(conn)
        if schema is None:
            return  # the server says "no schema has been selected to create in"
        # Looked up first: CREATE SCHEMA needs the CREATE privilege on the database even when
        # IF NOT EXISTS finds the schema there, and a tenant's role may not have it.
        if not _schema_exists(conn, schema):
            conn.exec_driver_sql(f"CREATE SCHEMA {quote_identifier(schema)}")
        # The revisions ask "does table X exist?" through the Inspector, which answers for any
        # schema on the path: with "tenant_b, public" and a store in public, a new tenant
        # would find public's tables and build none of its own. Until COMMIT, only its own.
        conn.exec_driver_sql(f"SET LOCAL search_path TO {quote_identifier(schema)}")

    def migration_statement_rewrite(self, conn: Connection) -> Callable[[str], str] | None:
        schema = extension_schema(conn)
        if schema is None:
            return None
        return lambda statement: qualify_extension_objects(statement, schema)

    # Every new schema is built by the chain: its objects live in a schema of their own, named
    # by the store's URL and written into the revisions' statements as they run
    # (``migration_statement_rewrite``), and its first build is a server round trip a
    # statement; a replay would have to learn all of that from the catalogs.
    def blank_store_key(self, conn: Connection) -> Hashable | None:
        return None

    def capture_new_store(self, conn: Connection) -> StoreImage | None:
        return None

    def replay_new_store(self, conn: Connection, image: StoreImage) -> None:
        # Unreachable: blank_store_key never gives a key here, so no image is ever kept.
        raise ValueError("a PostgreSQL store is built by the migration chain, never replayed")

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
