"""The unit of work: ``write(fn)`` and ``read(fn)`` around one connection and one transaction.

A write is ``retry(BEGIN IMMEDIATE; fn(conn); COMMIT)``: the whole transaction is the unit that
is retried, so ``fn`` must not have side effects outside the database (encode JSON before
calling ``write``). A read uses a deferred BEGIN and never takes the write lock.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Protocol, TypeVar

from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import DBAPIError

from .commands import cli_command
from .config import resolve_url
from .dialects import StoreDialect, dialect_for, dialect_for_url
from .engine import DEFAULT_BUSY_TIMEOUT_S, create_store_engine
from .errors import ReadOnlyStoreError, SchemaMissingError, SessionStoreError, StoreBusyError
from .retry import RetryPolicy, run_with_retry

T = TypeVar("T")

logger = logging.getLogger(__name__)

CHECKPOINT_EVERY_N_WRITES = 50


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
        self._write_options = self.dialect.write_options()
        self._read_options = self.dialect.read_options()
        # SQLite has one writer per file: threads of one process queue here instead of
        # fighting over the file lock with sleeps. Re-entrant, because code holding it through
        # ``write_lock`` (the Hermes ``_lock``) may call the store's own write methods.
        self._write_lock: WriteLock = (
            threading.RLock() if self.dialect.serialize_writes_in_process else _NO_LOCK
        )
        # With writes serialised in-process, one connection can serve them all: no pool
        # checkout and reset per write (a measurable share of an append). Dropped on any error.
        self._keep_writer = self.dialect.serialize_writes_in_process
        self._writer: Connection | None = None
        self._writer_pid = 0
        self._counter_lock = threading.Lock()
        self._writes = 0
        self._closed = False

    @classmethod
    def open(
        cls,
        url: str | URL | None = None,
        *,
        read_only: bool = False,
        retry: RetryPolicy | None = None,
        busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
        checkpoint_every: int = CHECKPOINT_EVERY_N_WRITES,
    ) -> Store:
        parsed = url if isinstance(url, URL) else make_url(resolve_url(url))
        # ``?mode=ro`` in a SQLite URL makes a read-only store, for this object's checks too.
        read_only = read_only or dialect_for_url(parsed).requests_read_only(parsed)
        engine = create_store_engine(parsed, read_only=read_only, busy_timeout_s=busy_timeout_s)
        return cls(
            engine,
            read_only=read_only,
            retry=retry,
            checkpoint_every=checkpoint_every,
            owns_engine=True,
        )

    @property
    def url(self) -> URL:
        return self.engine.url

    @property
    def write_lock(self) -> WriteLock:
        """The lock every write of this store in this process holds (re-entrant).

        Code that writes to the store outside :meth:`write` (the Hermes compatibility surface,
        ``sessionstore.hermes_state``) holds it too, so its writes queue with the store's own.
        The rule for whoever extends the write path: whatever :meth:`write` must hold around a
        transaction (say, a cross-process lock) is taken by this object's ``acquire``/``__enter__``
        and let go by ``release``/``__exit__``; it is looked up on every use, never cached, so
        a lock replaced after ``fork()`` is the one taken. A no-op lock where the database
        serialises writers itself (PostgreSQL).
        """
        return self._write_lock

    def write(self, work: Callable[[Connection], T], *, retry: RetryPolicy | None = None) -> T:
        """Run ``work`` in a write transaction, retrying the whole of it while the store is busy."""
        if self.read_only:
            raise ReadOnlyStoreError("this session store was opened read-only")

        def attempt() -> T:
            with self._write_lock:
                conn = self._writer_connection()
                try:
                    with conn.begin():
                        return work(conn)
                except BaseException:
                    # A failed BEGIN or a rolled-back transaction leaves the connection clean;
                    # anything stranger and it is thrown away.
                    broken = conn.invalidated or conn.closed or conn.in_transaction()
                    self._release_writer(conn, broken=broken)
                    raise
                else:
                    self._release_writer(conn, broken=False)

        try:
            result = run_with_retry(attempt, self.dialect.is_retryable, retry or self.retry)
        except StoreBusyError:
            raise
        except DBAPIError as exc:
            translated = self._translate(exc)
            if translated is not None:
                raise translated from exc
            raise
        self._count_write()
        return result

    def _writer_connection(self) -> Connection:
        if self._writer is not None and self._writer_pid == os.getpid():
            return self._writer
        # A connection inherited through fork() belongs to the parent: never touch it.
        self._writer = None
        conn = self.engine.connect()
        conn.execution_options(**self._write_options)
        if self._keep_writer:
            self._writer, self._writer_pid = conn, os.getpid()
        return conn

    def _release_writer(self, conn: Connection, *, broken: bool) -> None:
        if conn is self._writer and not broken:
            return
        if conn is self._writer:
            self._writer = None
        if not conn.closed:
            with contextlib.suppress(Exception):
                if broken:
                    conn.invalidate()
                conn.close()

    def read(self, work: Callable[[Connection], T]) -> T:
        """Run ``work`` in a read transaction: one consistent snapshot, no write lock.

        Retried like a write when the store is locked: under WAL that never happens, but in
        rollback-journal mode (WAL unsupported, or a foreign program's EXCLUSIVE lock) a writer
        blocks readers, and the caller's budget must bound that wait too.
        """

        def attempt() -> T:
            with self.engine.connect() as conn:
                conn.execution_options(**self._read_options)
                with conn.begin():
                    return work(conn)

        try:
            return run_with_retry(attempt, self.dialect.is_retryable, self.retry)
        except StoreBusyError:
            raise
        except DBAPIError as exc:
            translated = self._translate(exc)
            if translated is not None:
                raise translated from exc
            raise

    def _translate(self, exc: DBAPIError) -> SessionStoreError | None:
        translated = self.dialect.translate_error(exc)
        if isinstance(translated, SchemaMissingError):
            # A Store never migrates (SessionDB does): say how to create the schema here.
            return SchemaMissingError(
                f"{translated}: create the schema first with sessionstore.migrate.upgrade(url) "
                f"or `{cli_command(self.url, 'db', 'upgrade')}`"
            )
        return translated

    @contextlib.contextmanager
    def reading(self) -> Iterator[Connection]:
        """A read transaction held open for streaming (e.g. a large export)."""
        with self.engine.connect() as conn:
            conn.execution_options(**self._read_options)
            with conn.begin():
                yield conn

    def checkpoint(self) -> None:
        if not self.read_only:
            self.dialect.checkpoint(self.engine)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._write_lock:
            writer, self._writer = self._writer, None
            if writer is not None and self._writer_pid == os.getpid():
                with contextlib.suppress(Exception):
                    writer.close()
        self.checkpoint()
        if self._owns_engine:
            self.engine.dispose()

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


class WriteLock(Protocol):
    """What :attr:`Store.write_lock` offers: a ``threading.RLock``'s interface."""

    def acquire(self, blocking: bool = ..., timeout: float = ...) -> bool: ...

    def release(self) -> None: ...

    def __enter__(self) -> bool: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
        /,
    ) -> None: ...


class _NoLock:
    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return True

    def release(self) -> None:
        return None

    def __enter__(self) -> bool:
        return True

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
        /,
    ) -> None:
        return None


_NO_LOCK = _NoLock()
