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
from typing import Any, TypeVar

from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.exc import DBAPIError

from .dialects import StoreDialect, dialect_for
from .engine import DEFAULT_BUSY_TIMEOUT_S, create_store_engine
from .errors import (
    ReadOnlyStoreError,
    SessionStoreError,
    StoreBusyError,
    StoreUnavailableError,
    WriteOutcomeUnknownError,
)
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
        # fighting over the file lock with sleeps.
        self._write_lock: contextlib.AbstractContextManager[Any] = (
            threading.Lock() if self.dialect.serialize_writes_in_process else _NO_LOCK
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
        engine = create_store_engine(url, read_only=read_only, busy_timeout_s=busy_timeout_s)
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

    def write(
        self,
        work: Callable[[Connection], T],
        *,
        retry: RetryPolicy | None = None,
        recover: Callable[[Connection], T | None] | None = None,
    ) -> T:
        """Run ``work`` in a write transaction, retrying the whole of it while the store is busy
        or after the connection was lost before COMMIT (the server rolled it back).

        A connection lost *during* COMMIT leaves the outcome unknown: the server may have
        committed without the client hearing it. Then ``recover`` (given by idempotent writes)
        looks in a fresh read whether the write is there: its answer is returned, or with None
        the whole write runs again. Without ``recover`` that is a
        :class:`WriteOutcomeUnknownError`: repeating it blindly could apply it twice.
        """
        if self.read_only:
            raise ReadOnlyStoreError("this session store was opened read-only")

        def attempt() -> T:
            with self._write_lock:
                conn = self._writer_connection()
                committing = False
                try:
                    with conn.begin():
                        result = work(conn)
                        committing = True
                except BaseException as exc:
                    # A failed BEGIN or a rolled-back transaction leaves the connection clean;
                    # anything stranger and it is thrown away.
                    broken = conn.invalidated or conn.closed or conn.in_transaction()
                    self._release_writer(conn, broken=broken)
                    if committing and self.dialect.is_disconnect(exc):
                        return self._after_lost_commit(exc, recover)
                    raise
                else:
                    self._release_writer(conn, broken=False)
                    return result

        try:
            result = run_with_retry(attempt, self._is_retryable, retry or self.retry)
        except StoreBusyError as exc:
            raise self._exhausted(exc) from exc.last_error
        except DBAPIError as exc:
            translated = self.dialect.translate_error(exc)
            if translated is not None:
                raise translated from exc
            raise
        self._count_write()
        return result

    def _is_retryable(self, exc: BaseException) -> bool:
        # A lost connection is retried like a busy store: a fresh connection gets a fresh
        # transaction, and the lost one never committed (lost COMMITs are handled apart).
        return self.dialect.is_retryable(exc) or self.dialect.is_disconnect(exc)

    def _exhausted(self, exc: StoreBusyError) -> SessionStoreError:
        """What to raise when the retries ran out: busy, or the database kept going away."""
        if exc.last_error is not None and self.dialect.is_disconnect(exc.last_error):
            return StoreUnavailableError(
                f"lost the connection to the database {exc.attempts} times in a row: "
                f"{exc.last_error}"
            )
        return exc

    def _after_lost_commit(
        self, exc: BaseException, recover: Callable[[Connection], T | None] | None
    ) -> T:
        if recover is None:
            raise WriteOutcomeUnknownError(
                "the connection to the database was lost while it committed this write; it "
                "may or may not have been stored, and repeating it could apply it twice: "
                f"check before trying again ({exc})"
            ) from exc
        found = self.read(recover)
        if found is not None:
            logger.info("a write whose COMMIT acknowledgement was lost is in the store")
            return found
        raise exc  # not committed: retryable, the whole write runs again

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
            return run_with_retry(attempt, self._is_retryable, self.retry)
        except StoreBusyError as exc:
            raise self._exhausted(exc) from exc.last_error
        except DBAPIError as exc:
            translated = self.dialect.translate_error(exc)
            if translated is not None:
                raise translated from exc
            raise

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


class _NoLock(contextlib.AbstractContextManager[None]):
    def __exit__(self, *exc_info: object) -> None:
        return None


_NO_LOCK = _NoLock()
