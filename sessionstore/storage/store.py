"""The unit of work: ``write(fn)`` and ``read(fn)`` around one connection and one transaction.

A write is ``retry(BEGIN IMMEDIATE; fn(conn); COMMIT)``: the whole transaction is the unit that
is retried, so ``fn`` must not have side effects outside the database (encode JSON before
calling ``write``). A read uses a deferred BEGIN and never takes the write lock.

On SQLite, writers queue before the retry loop: threads of one store on a lock, then every
writer of the file, across stores and processes, on the kernel lock of
:mod:`.writers_queue`. Both waits count against the retry budget. After ``fork()``
the child drops every handle it inherited (:mod:`.fork_safety`) and opens its own; on SQLite
every attempt runs inside ``fork_safety.inside()``, so a fork never catches one inside SQLite.

Closing is orderly (:meth:`Store.close`): the attempts running finish and report their own
outcome, every call that has not started an attempt yet fails with
:class:`~sessionstore.errors.StoreClosedError` having written nothing, and only then are the
connections and the writers' side file let go of.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Final, TypeVar

from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.exc import DBAPIError

from ..dialects import StoreDialect, dialect_for, dialect_for_url
from ..errors import (
    ReadOnlyStoreError,
    SchemaMissingError,
    SessionStoreError,
    StoreBusyError,
    StoreClosedError,
    WriteOutcomeUnknownError,
)
from ..sql.read_shape import FULL, ReadShape
from . import fork_safety as forksafety
from . import snapshots
from .command_hints import cli_command
from .config import resolve_location
from .engine import DEFAULT_BUSY_TIMEOUT_S, create_store_engine
from .error_translation import typed_errors, with_media_hint
from .retry import RetryPolicy, queued_jitter, run_with_retry
from .writers_queue import QueueClosed, QueueTimeout, WriterQueue

T = TypeVar("T")

logger = logging.getLogger(__name__)

CHECKPOINT_EVERY_N_WRITES = 50
IDLE_READERS = 4
"""Read connections a store keeps checked out between reads (below the pool's size of 5): a
pool checkout and its reset cost about as much as loading a short conversation. Where writes
keep no connection of their own (PostgreSQL), a write borrows one of them
(:meth:`Store._lend_reader`)."""
REPAIRS_PER_WRITE: Final = 2
"""How many times a write runs again, each after :attr:`Store.repair_damage` repaired what
failed it: a repair that makes progress cheaply may leave the whole repair to the next
failure (the search index: rows another SQLite read differently, then the index built
again). Bounded, so no repair can keep a write looping."""


class Store:
    """A session store's engine plus the rules for using it safely from many threads."""

    def __init__(
        self,
        engine: Engine,
        *,
        read_only: bool = False,
        retry: RetryPolicy | None = None,
        checkpoint_every: int = CHECKPOINT_EVERY_N_WRITES,
        owns_engine: bool = False,
    ) -> None:
        self.engine = engine
        self.dialect: StoreDialect = dialect_for(engine)
        self.read_only = read_only
        self.retry = retry or RetryPolicy()
        self.checkpoint_every = checkpoint_every
        self._owns_engine = owns_engine
        self._log_files_to_release: URL | None = None
        """The URL whose log files this store's close lets SQLite remove (:meth:`open`)."""
        self.read_shape: ReadShape = FULL
        """The columns and tables this store's reads select (``sql.read_shape``): all of them,
        unless the store was opened read-only as it is and lacks some (set once, at open, by
        ``schema.readable.check_readable``, before any statement is built from it)."""
        # Stateless (the dialect, the schema hint, the URL): made once, entered by every
        # read and write instead of made by each.
        self._typed_errors = typed_errors(
            self.dialect, refine=self._with_schema_hint, url=engine.url
        )
        self._write_options = self.dialect.write_options()
        self._read_options = self.dialect.read_options()
        # All the execution options a reader's connection has when the read door set them.
        self._reader_options = {**engine.get_execution_options(), **self._read_options}
        # SQLite has one writer per file: threads of one process queue here instead of
        # fighting over the file lock with sleeps, then processes on the writers' queue.
        self._serialize = self.dialect.serialize_writes_in_process
        queue_file = (
            None if read_only else self.dialect.writer_queue_file(engine.url, read_only=read_only)
        )
        self._queue = (
            None
            if queue_file is None
            # The side file is the store's, as private as its file (``private_files``).
            else WriterQueue(queue_file, self.dialect.database_file(engine.url))
        )
        self._write_lock = WriteLock(self._queue, self.retry.budget_s)
        # With writes serialised in-process, one connection can serve them all: no pool
        # checkout and reset per write (a measurable share of an append). Dropped on any error.
        self._keep_writer = self._serialize
        self._writer: Connection | None = None
        self._writer_pid = 0
        # Idle read connections, kept checked out: a read pops one (or connects), then puts it
        # back; so does a write where writes keep no connection (_lend_reader). list.pop/append
        # are atomic, so threads share it without a lock; at most IDLE_READERS wait here, and
        # a thread never holds one between two calls.
        self._idle_readers: list[Connection] = []
        self._counter_lock = threading.Lock()
        self._writes = 0
        # Orderly closing: attempts in flight are counted under ``_state``; close() waits for
        # them, and none starts once ``_closed`` is set.
        self._state_lock = threading.Lock()  # taken directly on the hot path
        self._state = threading.Condition(self._state_lock)
        self._in_flight = 0
        self._closed = False
        self._close_deferred = False
        self._finished = False
        # On SQLite every attempt is also inside the fork gate (SQLite runs in this process).
        self._attempt = _Attempt(self, gated=self.dialect.serialize_writes_in_process)
        self._recovery = _Attempt(self, gated=self.dialect.serialize_writes_in_process,
                                  after_close=True)
        self.repair_damage: Callable[[BaseException], bool] | None = None
        """Set by the layer that keeps data derived from the rows (the repository: the search
        index, which triggers update with every message). Given the error a write failed
        with, it repairs the derived data that error names (in a write of its own) and says
        whether to run the write again (at most :data:`REPAIRS_PER_WRITE` times); False for
        any other error. A damaged index
        otherwise fails every later write of a message: each one lost."""
        self._repairing = threading.local()
        self._patience = threading.local()
        forksafety.track(self)

    @classmethod
    def open(
        cls,
        url: str | URL | None = None,
        *,
        read_only: bool = False,
        retry: RetryPolicy | None = None,
        busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
        checkpoint_every: int = CHECKPOINT_EVERY_N_WRITES,
        prepare: Callable[[Engine], object] | None = None,
    ) -> Store:
        """Open the store at ``url`` (default: the URL rules of :mod:`sessionstore.storage.config`)
        on one engine, the only one this store ever uses.

        ``prepare`` runs first on that engine, with the file's journal mode still untouched:
        it may check the schema and migrate (``SessionDB`` does), and when it raises, the file
        is as it was and the store is closed. Only then does a writable store switch the
        journal mode (SQLite: WAL).
        """
        parsed = resolve_location(url)
        # ``?mode=ro`` in a SQLite URL makes a read-only store, for this object's checks too.
        dialect = dialect_for_url(parsed)
        # A read-only open creates a WAL file's ``-wal``/``-shm`` it cannot remove at its
        # close: when they were not there before, the close lets SQLite remove them
        # (``release_log_files``), so a read leaves the directory as a writable close does.
        release_log_files = read_only and not dialect.log_files_exist(parsed)
        read_only = read_only or dialect.requests_read_only(parsed)
        engine = create_store_engine(
            parsed,
            read_only=read_only,
            busy_timeout_s=busy_timeout_s,
            set_journal_mode=prepare is None,
        )
        store = cls(
            engine,
            read_only=read_only,
            retry=retry,
            checkpoint_every=checkpoint_every,
            owns_engine=True,
        )
        store._log_files_to_release = parsed if release_log_files else None
        try:
            with store._attempt:
                if prepare is not None:
                    prepare(engine)
                    if not read_only:
                        store.dialect.enable_journal_mode(engine)
                if not read_only and store.dialect.connect_at_open:
                    store._connect_now()
        except BaseException:
            # No checkpoint: a store refused by ``prepare`` (too new, foreign) stays as it was.
            store._close(checkpoint=prepare is None)
            raise
        return store

    def _connect_now(self) -> None:
        """Connect once, so the connect listener switches the file to WAL at open, not at the
        first write (until then, other processes' readers and writers block each other)."""
        try:
            with self.engine.connect():
                pass
        except DBAPIError as exc:
            if self.dialect.is_retryable(exc):
                return  # a foreign writer is mid-transaction: the next connection sets WAL
            translated = self.dialect.translate_error(exc, self.engine.url)
            if translated is not None:
                raise with_media_hint(self.dialect, self.url, translated) from exc
            raise

    @property
    def url(self) -> URL:
        return self.engine.url

    @property
    def idle_readers(self) -> int:
        """Read connections kept checked out between reads (at most ``IDLE_READERS``).

        They are the store's, not leaks: a check for leaked connections subtracts them from the
        pool's checked-out count.
        """
        return len(self._idle_readers)

    @property
    def write_lock(self) -> WriteLock:
        """The lock every write of this store in this process holds (re-entrant).

        Code that writes to the store outside :meth:`write` (the Hermes compatibility surface,
        ``sessionstore.hermes.state``) holds it too, so its writes queue with the store's own:
        threads on a re-entrant lock, and the outermost holder on the file's writers' queue.
        It is looked up on every use, never cached, so the lock replaced after ``fork()`` is
        the one taken. On PostgreSQL there is no writers' queue: the server orders writers.
        """
        return self._write_lock

    def write(
        self,
        work: Callable[[Connection], T],
        *,
        retry: RetryPolicy | None = None,
        recover: Callable[[Connection], T | None] | None = None,
        single_statement: bool = False,
    ) -> T:
        """Run ``work`` in a write transaction, retrying the whole of it while the store is busy
        or after the connection was lost before COMMIT (the server rolled it back).

        ``single_statement``: ``work`` changes the database in one statement (a CTE that
        bumps the counters and inserts), so where the dialect says it pays
        (``single_statement_appends``: a server) it runs in autocommit, and that statement is
        the whole transaction: one round trip, no BEGIN, no COMMIT. Its loss is a lost COMMIT.

        A connection lost *during* COMMIT leaves the outcome unknown: the server may have
        committed without the client hearing it. Then ``recover`` (given by idempotent writes)
        looks in a fresh read whether the write is there: its answer is returned, or with None
        the whole write runs again. Without ``recover`` that is a
        :class:`WriteOutcomeUnknownError`: repeating it blindly could apply it twice.
        """
        if self.read_only:
            raise ReadOnlyStoreError("this session store was opened read-only")

        autocommit = single_statement and self.dialect.single_statement_appends

        def attempt() -> T:
            conn, lent = self._writer_connection()
            # Which server process runs this write: a loss during COMMIT waits for its end.
            backend = self.dialect.backend_of(conn)
            # In autocommit the statement is the COMMIT: losing it leaves the outcome unknown.
            committing = autocommit
            try:
                if autocommit:
                    self.dialect.set_autocommit(conn.connection.dbapi_connection, True)
                with conn.begin():
                    result = work(conn)
                    committing = True
            except BaseException as exc:
                # A failed BEGIN or a rolled-back transaction leaves the connection clean;
                # anything stranger, or a lost connection (statements on the driver cursor
                # never tell SQLAlchemy), and it is thrown away.
                lost = self.dialect.is_disconnect(exc)
                broken = (
                    lost
                    or conn.invalidated
                    or conn.closed
                    or conn.in_transaction()
                    # A COMMIT that failed (busy) leaves the driver's transaction open: the
                    # next write would meet it ("cannot start a transaction within a
                    # transaction"), its locks holding every other writer off meanwhile.
                    or self.dialect.driver_in_transaction(conn)
                )
                if autocommit and not broken:
                    self._end_autocommit(conn)
                self._release_writer(conn, broken=broken, lent=lent)
                if lost:
                    self._drop_idle_readers()
                    self.dialect.connection_lost(self.engine)
                if committing and lost:
                    return self._after_lost_commit(exc, recover, backend)
                raise
            else:
                if autocommit:
                    self._end_autocommit(conn)
                self._release_writer(conn, broken=False, lent=lent)
                return result

        try:
            for repairs in itertools.count(1):
                try:
                    result = self.serialized(attempt, retry)
                    break
                except Exception as exc:
                    # The transaction was rolled back: nothing of it was written, so it may
                    # run again once what made it fail is repaired.
                    if repairs > REPAIRS_PER_WRITE or not self._repaired(exc):
                        raise
        finally:
            if self._close_deferred:
                self._finish_deferred_close()
        self._count_write()
        return result

    def _repaired(self, exc: BaseException) -> bool:
        """Whether :attr:`repair_damage` repaired what ``exc`` names (never while it runs:
        a repair that fails the same way is not repaired again)."""
        repair = self.repair_damage
        if repair is None or self.read_only or getattr(self._repairing, "active", False):
            return False
        self._repairing.active = True
        try:
            return repair(exc)
        except Exception as failure:
            logger.warning("could not repair what failed a write (%s): %s", exc, failure)
            return False
        finally:
            self._repairing.active = False

    def serialized(self, attempt: Callable[[], T], retry: RetryPolicy | None = None) -> T:
        """``attempt`` as :meth:`write` runs its transaction: at the head of the writers'
        queue where this store serializes writers (SQLite), retried while the database is
        busy, errors typed. For work that brings its own connection and must run outside any
        transaction (a ``VACUUM``)."""
        policy = retry or getattr(self._patience, "policy", None) or self.retry
        scope = self._attempt

        def counted() -> T:
            # Each attempt is counted in flight (close waits for it) and, on SQLite, inside
            # the fork gate; none starts once the store is closed.
            with scope:
                return attempt()

        with self._typed_errors:
            if self._serialize:
                return self._queued(counted, policy)
            return run_with_retry(counted, self._is_retryable, policy)

    @contextlib.contextmanager
    def patience(self, policy: RetryPolicy) -> Iterator[None]:
        """The writes this thread makes inside the block wait for the write lock as ``policy``
        says (a write given a policy of its own keeps that one): a caller gives the writes
        that matter most, a conversation's messages, longer than the rest."""
        outer = getattr(self._patience, "policy", None)
        self._patience.policy = policy
        try:
            yield
        finally:
            self._patience.policy = outer

    def _end_autocommit(self, conn: Connection) -> None:
        try:
            self.dialect.set_autocommit(conn.connection.dbapi_connection, False)
        except Exception:  # a connection that cannot switch back is not given to anyone
            with contextlib.suppress(Exception):
                conn.invalidate()

    def _queued(self, attempt: Callable[[], T], policy: RetryPolicy) -> T:
        """``attempt``'s retry loop at the head of the queue: threads, then processes."""
        started = time.monotonic()
        lock = self._write_lock
        try:
            lock.enter(started + policy.budget_s, strict=True)
        except QueueTimeout as exc:
            raise StoreBusyError(0, time.monotonic() - started, exc) from None
        try:
            return run_with_retry(
                attempt,
                self._is_retryable,
                policy,
                started=started,
                jitter=queued_jitter if lock.queued else random.uniform,
            )
        finally:
            lock.release()

    def _is_retryable(self, exc: BaseException) -> bool:
        # A lost connection is retried like a busy store: a fresh connection gets a fresh
        # transaction, and the lost one never committed (lost COMMITs are handled apart).
        return self.dialect.is_retryable(exc) or self.dialect.is_disconnect(exc)

    def _after_lost_commit(
        self,
        exc: BaseException,
        recover: Callable[[Connection], T | None] | None,
        backend: int | None,
    ) -> T:
        # Inside the write's attempt: a close() meanwhile waits for this look too.
        # Nothing is said about the write while the server may still be committing it (a lost
        # socket leaves its backend running): a look would find nothing and the retry would
        # store it twice, and a caller told "check before trying again" would check too soon
        # and see it land afterwards. So that backend is made to end first, in a transaction
        # of its own, so that the look's snapshot is taken after it has ended.
        unsettled: Exception | None = None
        try:
            if backend is not None and not self._read(
                functools.partial(self.dialect.settle_lost_backend, backend=backend),
                single_statement=False,
                attempt=self._recovery,
            ):
                unsettled = WriteOutcomeUnknownError(
                    f"the server process {backend} that ran it did not end when asked"
                )
        except Exception as settle_failed:
            unsettled = settle_failed
        if recover is None:
            raise WriteOutcomeUnknownError(
                "the connection to the database was lost while it committed this write; it "
                "may or may not have been stored, and repeating it could apply it twice: "
                f"check before trying again ({exc})"
                + ("" if unsettled is None else
                   f"; the server process that ran it could not be made to end ({unsettled}), "
                   "so it may still land after this")
            ) from exc
        try:
            if unsettled is not None:
                raise unsettled
            found = self._read(recover, single_statement=False, attempt=self._recovery)
        except Exception as look_failed:
            # The server went away for good (a restart, an outage: the look cannot connect),
            # or the look failed otherwise: the write may have committed all the same. Saying
            # "cannot connect" would invite a retry that stores it twice.
            raise WriteOutcomeUnknownError(
                "the connection to the database was lost while it committed this write, and "
                f"the look for it failed ({look_failed}): it may or may not have been stored; "
                "check before trying again"
            ) from exc
        if found is not None:
            logger.info("a write whose COMMIT acknowledgement was lost is in the store")
            return found
        # The look went through a connection that would sit idle, unpinged, during the retry's
        # sleep, when whatever killed the first one may kill it too.
        self._drop_idle_readers()
        self.dialect.connection_lost(self.engine)
        raise exc  # not committed: retryable, the whole write runs again

    def _writer_connection(self) -> tuple[Connection, bool]:
        """The write's connection, and whether it is a reader's, lent (:meth:`_lend_reader`)."""
        if self._writer is not None and self._writer_pid == os.getpid():
            return self._writer, False
        # A connection inherited through fork() belongs to the parent: never touch it.
        self._writer = None
        if not self._keep_writer:
            lent = self._lend_reader()
            if lent is not None:
                return lent, True
        conn = self.engine.connect()
        conn.execution_options(**self._write_options)
        if self._keep_writer:
            self._writer, self._writer_pid = conn, os.getpid()
        return conn, False

    def _release_writer(self, conn: Connection, *, broken: bool, lent: bool) -> None:
        if conn is self._writer and not broken:
            return
        if lent and not (broken or conn.invalidated or conn.closed or conn.in_transaction()):
            # Back to the readers, a reader again (see _lend_reader).
            try:
                self.dialect.lend_reader_to_writes(conn, writing=False)
            except Exception:
                broken = True
            else:
                self._release_reader(conn, clean=True)
                return
        if conn is self._writer:
            self._writer = None
        if not conn.closed:
            with contextlib.suppress(Exception):
                if broken:
                    conn.invalidate()
                conn.close()

    def _lend_reader(self) -> Connection | None:
        """An idle reader's connection for a write, switched to the writes' transactions; None
        when no reader is idle (the write checks one out of the pool, as it always did).

        Without this, a store that reads and then writes holds two connections (on
        PostgreSQL, two server backends: each one ~4-8 ms of server CPU to start, and a
        gateway's stores against a server of 100 connections take twice the slots they
        need): the reader stays checked out in :attr:`_idle_readers` between reads, so the
        write finds the pool empty and connects. Lent, it serves both doors, one at a time:

        - roles: the dialect switches it (``lend_reader_to_writes``: on PostgreSQL the
          isolation level psycopg sends with the next BEGIN, no round trip; the writes' level
          is the engine's default, as on a write's own checkout) and switches it back after
          the write (:meth:`_release_writer`), before it is idle again. Only a reader outside
          any transaction and with the read door's execution options alone is ever idle
          (:meth:`_release_reader`), and only a write that ended its transaction gives it
          back; one the write broke or left inside a transaction, or that cannot be switched,
          is thrown away as any other;
        - a lost connection: the write meets a dead one as it does a pooled one (no ping: it
          fails its first statement, is thrown away, and the write runs again, a lost COMMIT
          looked for first);
        - fork: the readers' list is this process's own (a child empties it before any use);
        - close: lent and given back inside the write's attempt, which close() waits for;
        - concurrency: only an idle reader is lent (a read under way keeps its connection),
          and list.pop hands it to one thread only.

        Not through the pool (the reader given back, the write checking it out): measured,
        the pool's reset and the read options set again on a checkout made a store's turn
        (a listing, three writes, a look at the session) 4-8 % dearer in client CPU than with
        two connections; lent, the same turn is 5-14 % cheaper (a write no longer checks a
        connection out at all), and readers going back to the pool after every read would
        put a checkout on each read. Not where writes keep a connection of their own
        (SQLite: one writer per file, kept apart from the readers for its locking): never
        called there.
        """
        try:
            conn = self._idle_readers.pop()
        except IndexError:
            return None
        try:
            self.dialect.lend_reader_to_writes(conn, writing=True)
        except Exception:
            self._release_reader(conn, clean=False)
            return None
        return conn

    def read(self, work: Callable[[Connection], T], *, single_statement: bool = False) -> T:
        """Run ``work`` in a read transaction: one consistent snapshot, no write lock.

        ``single_statement``: ``work`` reads with one statement on the driver cursor (or with
        statements that need not agree with each other), so where the dialect says a statement
        outside a transaction reads one snapshot of its own (SQLite in autocommit), no BEGIN
        and COMMIT are sent around it. Statements through SQLAlchemy then still begin a
        transaction, which is rolled back afterwards.

        Retried like a write when the store is locked: under WAL that never happens, but in
        rollback-journal mode (WAL unsupported, or a foreign program's EXCLUSIVE lock) a writer
        blocks readers, and the caller's budget must bound that wait too.
        """
        try:
            return self._read(work, single_statement=single_statement, attempt=self._attempt)
        finally:
            if self._close_deferred:
                self._finish_deferred_close()

    def _read(
        self, work: Callable[[Connection], T], *, single_statement: bool, attempt: _Attempt
    ) -> T:
        bare = single_statement and self.dialect.autocommit_snapshot_reads

        def one_attempt() -> T:
            with attempt:  # counted in flight; on SQLite, inside the fork gate
                conn = self._reader_connection()
                clean = False
                try:
                    if bare:
                        result = work(conn)
                        if conn.in_transaction():
                            conn.rollback()
                    else:
                        with conn.begin():
                            result = work(conn)
                    clean = True
                    return result
                except BaseException as exc:
                    # A statement on the driver cursor that lost its connection never told
                    # SQLAlchemy: without this the pool would hand the dead one out again.
                    if self.dialect.is_disconnect(exc):
                        if not conn.invalidated:
                            with contextlib.suppress(Exception):
                                conn.invalidate()
                        self._drop_idle_readers()
                        self.dialect.connection_lost(self.engine)
                    if bare and conn.in_transaction():
                        with contextlib.suppress(Exception):
                            conn.rollback()
                    clean = not (conn.invalidated or conn.closed or conn.in_transaction())
                    raise
                finally:
                    self._release_reader(conn, clean=clean)

        with self._typed_errors:
            return run_with_retry(one_attempt, self._is_retryable, self.retry)

    def _reader_connection(self) -> Connection:
        try:
            return self._idle_readers.pop()
        except IndexError:
            conn = self.engine.connect()
            conn.execution_options(**self._read_options)
            return conn

    def _release_reader(self, conn: Connection, *, clean: bool) -> None:
        # Where writes borrow idle readers (_lend_reader), one is kept only with the read
        # door's options: work that set its own on the connection (yield_per, i.e. a
        # server-side cursor: the next read's every SELECT, and a write's statements, would
        # be sent as DECLARE CURSOR) sends it back to the pool, whose next checkout is a new
        # Connection with the options of whoever takes it.
        if (
            clean
            and not self._closed
            and len(self._idle_readers) < IDLE_READERS
            and (self._keep_writer or conn.get_execution_options() == self._reader_options)
        ):
            self._idle_readers.append(conn)
            return
        with contextlib.suppress(Exception):
            if not clean and not conn.invalidated:
                conn.invalidate()
            conn.close()

    def _drop_idle_readers(self) -> None:
        while True:
            try:
                conn = self._idle_readers.pop()
            except IndexError:
                return
            with contextlib.suppress(Exception):
                conn.invalidate()
                conn.close()

    def _with_schema_hint(self, translated: SessionStoreError) -> SessionStoreError:
        if isinstance(translated, SchemaMissingError):
            # A Store never migrates (SessionDB does): say how to create the schema here.
            return SchemaMissingError(
                f"{translated}: create the schema first with "
                f"sessionstore.schema.migrate.upgrade(url) "
                f"or `{cli_command(self.url, 'db', 'upgrade')}`"
            )
        return translated

    @contextlib.contextmanager
    def reading(self) -> Iterator[Connection]:
        """A read transaction held open for streaming (e.g. a large export): one snapshot
        of the store, however long the consumer takes.

        It holds no writer off: where a long reader would (SQLite in the rollback journal),
        it reads a private copy taken when it began (:mod:`.snapshots`).
        On SQLite it is one attempt throughout: a fork waits for it to end (at most
        ``fork_safety.FORK_WAIT_S``), and so does :meth:`close`."""
        try:
            with self._attempt, self.engine.connect() as conn:
                conn.execution_options(**self._read_options)
                with snapshots.streaming_source(self.dialect, self.url, conn) as source, \
                        source.begin():
                    yield source
        finally:
            if self._close_deferred:
                self._finish_deferred_close()

    def checkpoint(self) -> None:
        """A best-effort checkpoint (SQLite's PASSIVE); nothing once the store is closed."""
        if self.read_only:
            return
        try:
            with self._attempt:
                self.dialect.checkpoint(self.engine)
        except StoreClosedError:
            return

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called (calls then raise ``StoreClosedError``)."""
        return self._closed

    def close(self, timeout_s: float | None = None) -> None:
        """Close the store, in order (idempotent; see the module docstring).

        From now on no attempt starts: a call waiting for its turn (this store's other
        threads, the writers' queue, its next attempt) raises
        :class:`~sessionstore.errors.StoreClosedError` at once, having written nothing. The
        attempts already running are waited for, at most ``timeout_s`` (default: the retry
        budget); each ends whole and reports its own outcome (a write that committed returns
        its result). Then the connections, the checkpoint and the writers' side file are let
        go of. Should an attempt still run when the time is up, close() returns and that
        attempt finishes the closing as it leaves: nothing is closed under a running call.
        """
        with self._state:
            if self._closed:
                return
            self._closed = True
        self._write_lock.close()  # waiters for the writers' queue give up now
        self._close_in_order(self.retry.budget_s if timeout_s is None else timeout_s)

    def _close_in_order(self, timeout_s: float, *, checkpoint: bool = True) -> None:
        deadline = time.monotonic() + timeout_s
        with self._state:
            settled = self._state.wait_for(
                lambda: self._in_flight <= 0, timeout=max(0.0, deadline - time.monotonic())
            )
        threads = self._write_lock.threads
        if settled and threads.acquire(timeout=max(0.0, deadline - time.monotonic())):
            try:
                self._finish_close(checkpoint=checkpoint)
            finally:
                threads.release()
            return
        logger.warning(
            "closing %s while calls were still running after %.0f s: they finish first, and "
            "the last one finishes closing the store",
            self.url.render_as_string(hide_password=True),
            timeout_s,
        )
        with self._state:
            self._close_deferred = True
        self._finish_deferred_close()

    def _finish_deferred_close(self) -> None:
        """A call leaving a store whose close() gave up waiting: the last one closes it."""
        threads = self._write_lock.threads
        if not threads.acquire(False):
            return  # another thread holds it: it comes here too when it leaves
        try:
            with self._state:
                if self._in_flight > 0:
                    return
            self._finish_close(checkpoint=True)
        finally:
            threads.release()

    def _finish_close(self, *, checkpoint: bool) -> None:
        """Let go of everything; with the writers' thread lock held and no attempt running."""
        with self._state:
            if self._finished:
                return
            self._finished = True
        with self._recovery:  # SQLite: inside the fork gate (closing calls into SQLite)
            writer, self._writer = self._writer, None
            if writer is not None and self._writer_pid == os.getpid():
                with contextlib.suppress(Exception):
                    writer.close()
            while self._idle_readers:
                with contextlib.suppress(Exception):
                    self._idle_readers.pop().close()
            if checkpoint and not self.read_only:
                with contextlib.suppress(Exception):
                    self.dialect.checkpoint(self.engine)
            # Removes the side file, or leaves that to the last release of a holder of the
            # lock in this thread (a close() inside Hermes's ``with db._lock:``).
            self._write_lock.close_queue()
            if self._owns_engine:
                self.engine.dispose()
                if self._log_files_to_release is not None:  # every connection of ours is closed
                    self.dialect.release_log_files(self._log_files_to_release)

    def _close(self, *, checkpoint: bool) -> None:
        """Close a store that failed to open (no call can be running in it)."""
        with self._state:
            if self._closed:
                return
            self._closed = True
        self._write_lock.close()
        self._close_in_order(0.0, checkpoint=checkpoint)

    def after_fork_in_child(self) -> None:
        """In a forked child: fresh thread locks; the connections the store kept are the
        parent's, abandoned (never used, closed or finalized here; the engine's reset deals
        with the driver connections in them). Called by :mod:`.fork_safety` before the
        engine's own reset. Calls no SQLite."""
        # A parent thread that held a lock at the fork never runs here to release it.
        self._write_lock = WriteLock(self._queue, self.retry.budget_s, closed=self._closed)
        self._counter_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._state = threading.Condition(self._state_lock)
        self._in_flight = 0
        # Idle readers were idle at the fork (one in use is not in the list): the parent's.
        inherited, self._idle_readers = self._idle_readers, []
        for reader in inherited:
            forksafety.abandon(reader)
        writer, self._writer = self._writer, None
        if writer is not None:
            # Never finalized: the pool would roll it back, i.e. use it.
            forksafety.abandon(writer)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _count_write(self) -> None:
        with self._counter_lock:
            self._writes += 1
            due = self.checkpoint_every > 0 and self._writes % self.checkpoint_every == 0
        if due:
            self.checkpoint()


def closed_error() -> StoreClosedError:
    return StoreClosedError(
        "this session store was closed before this call could write or read: nothing of it "
        "was written (open the store again to go on)"
    )


_FORK_GATE: Final = forksafety.inside()
"""The fork gate's context manager (one shared, stateless instance), looked up once."""


class _Attempt:
    """``with store._attempt:`` around everything one attempt does with the database.

    Counts the attempt in flight (:meth:`Store.close` waits for those) and refuses to start one
    once the store is closed, unless ``after_close`` (a look that belongs to an attempt already
    running, and closing itself). ``gated``: the store runs in this process (SQLite), so the
    attempt is also inside ``fork_safety.inside()``: no fork catches it inside SQLite.
    """

    __slots__ = ("_after_close", "_gated", "_store")

    def __init__(self, store: Store, *, gated: bool, after_close: bool = False) -> None:
        self._store = store
        self._gated = gated
        self._after_close = after_close

    def __enter__(self) -> None:
        if self._gated:
            _FORK_GATE.__enter__()
        store = self._store
        lock = store._state_lock
        lock.acquire()
        refused = store._closed and not self._after_close
        if not refused:
            store._in_flight += 1
        lock.release()
        if refused:
            if self._gated:
                _FORK_GATE.__exit__(None, None, None)
            raise closed_error()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        store = self._store
        lock = store._state_lock
        lock.acquire()
        store._in_flight -= 1
        if store._closed and store._in_flight <= 0:
            store._state.notify_all()
        lock.release()
        if self._gated:
            _FORK_GATE.__exit__(exc_type, exc, traceback)


class WriteLock:
    """The lock every writer of one store holds in this process.

    Threads queue on a re-entrant lock (re-entrant because code holding it as Hermes's
    ``_lock`` may call the store's own write methods); the outermost holder then queues with
    every other writer of the file on the writers' queue (:mod:`.writers_queue`),
    and lets go of it on its last release. Only the outermost holder ever touches the queue,
    so ``_depth`` and ``_held`` change under the thread lock alone.
    """

    def __init__(
        self, queue: WriterQueue | None, budget_s: float, *, closed: bool = False
    ) -> None:
        self._threads = threading.RLock()
        self._queue = queue
        self._budget_s = budget_s
        self._depth = 0
        self._held: int | None = None
        self._closed = closed
        self._close_queue_at_release = False

    def close(self) -> None:
        """The store is closing: from now on nobody joins the writers' queue through this
        lock, a wait for it in progress gives up at once, and :meth:`enter` raises
        ``StoreClosedError``. (The thread lock itself keeps working: closing takes it.)"""
        self._closed = True
        if self._queue is not None:
            self._queue.interrupt()

    def close_queue(self) -> None:
        """Let go of the side file (by a closing store holding :attr:`threads`): now, or at
        the last release of this thread's own hold when it holds the lock itself."""
        if self._queue is None:
            return
        if self._depth > 0:
            self._close_queue_at_release = True
        else:
            self._queue.close()

    @property
    def threads(self) -> threading.RLock:
        """The in-process part alone, for work that must exclude this store's own threads
        but has nothing to write (closing)."""
        return self._threads

    @property
    def held(self) -> bool:
        """True while some thread holds it (read in a forked child to see what was in use)."""
        return self._depth > 0

    @property
    def queued(self) -> bool:
        """True while the outermost holder also holds the file's writers' queue."""
        return self._held is not None

    def enter(self, deadline: float, *, strict: bool) -> None:
        """Take the lock by ``deadline`` (``time.monotonic``), for the store's own writes.

        ``strict``: a wait that runs out raises :class:`QueueTimeout` (the caller's budget is
        spent). Otherwise a writers' queue still busy at the deadline is gone without: SQLite's
        own locking keeps the write correct, only less fairly ordered.
        """
        threads = self._threads
        if not threads.acquire(False):
            remaining = max(0.0, deadline - time.monotonic())
            if not threads.acquire(timeout=remaining):
                raise QueueTimeout("other threads of this process kept the store busy")
        if self._closed:
            threads.release()
            raise closed_error()
        self._join_queue(deadline, strict=strict)

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """``threading.RLock.acquire``'s contract; the queue is waited for at most ``timeout``
        (else the retry budget) and never makes the call fail."""
        if not self._threads.acquire(blocking, timeout):
            return False
        budget = 0.0 if not blocking else (timeout if timeout >= 0 else self._budget_s)
        self._join_queue(time.monotonic() + budget, strict=False)
        return True

    def _join_queue(self, deadline: float, *, strict: bool) -> None:
        # Closed: no queue (joining it would create the side file again).
        if self._depth == 0 and self._queue is not None and not self._closed:
            try:
                self._held = self._queue.acquire(deadline)
            except QueueTimeout:
                if strict:
                    self._threads.release()
                    raise
                self._held = None
            except QueueClosed:
                self._held = None
                if strict:
                    self._threads.release()
                    raise closed_error() from None
        self._depth += 1

    def release(self) -> None:
        self._depth -= 1
        if self._depth == 0 and self._queue is not None:
            if self._held is not None:
                held, self._held = self._held, None
                self._queue.release(held)
            if self._close_queue_at_release:
                self._close_queue_at_release = False
                self._queue.close()
        self._threads.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self.release()
