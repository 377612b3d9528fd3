"""Async use of a :class:`~.store.Store`: transaction attempts in worker threads, every wait
in the event loop.

Why threads and not SQLAlchemy's asyncio extension (aiosqlite, psycopg's async mode): the sync
stack's guarantees live in :class:`Store` and in the statements of the repository. aiosqlite
runs every statement in a thread anyway (one per connection), so it would buy nothing on
SQLite, and a second, async code path would need its own copy of the writers' queue
(:mod:`.writers_queue`), of the lost-COMMIT recovery, of the fork rules and of every
statement. Here the async layer runs the sync repository's own calls, so there is one copy of
all of it; what it adds is *where* each part runs:

- **One writer thread per SQLite store** (SQLite has one writer): write calls take their turn
  on an ``asyncio.Lock`` (FIFO, costs nothing to wait on, and a cancelled waiter simply leaves
  the line), then run in that thread. **Readers have a pool of their own**, so a read is never
  stuck behind a write or a lock wait. On PostgreSQL (the server orders writers) reads and
  writes share one pool.
- **Each thread job is one transaction attempt**: the sync call runs on a store whose retry
  policy is a single attempt (:func:`single_attempt`). The retry loop itself is here, in the
  event loop: the one retry rule (:class:`.retry.RetryLoop`, which :func:`.retry.run_with_retry`
  drives too), with the caller's :class:`RetryPolicy`, its back-off in ``asyncio.sleep``.
  Lost-COMMIT recovery stays inside the attempt (``Store.write``).
- **The writers' queue** (other processes) is waited for in the writer thread in short slices
  (:data:`QUEUE_SLICE_S`); between slices the loop checks the budget and cancellation, so such
  a wait is abandoned within one slice and never blocks the loop. Once in, the queue is held
  across the call's whole retry loop, as ``Store.write`` holds it.

Cancellation (and ``asyncio.timeout``), at any point:

- waiting for the turn, for the writers' queue, or in the back-off: nothing was written and
  nothing more will be;
- while an attempt runs in its thread: that attempt runs to its end, so the transaction either
  commits or rolls back *whole* (never half); the cancelled task does not wait for it, and no
  further attempt starts. The next call queues behind it in the same thread and can use the
  store at once.

One ``AsyncStore`` serves one event loop at a time (tests and scripts that run several loops one
after another are fine). After ``fork()`` the child gets fresh threads and locks.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy.engine import URL

from ..errors import SessionStoreError, StoreBusyError, StoreUnavailableError
from . import fork_safety as forksafety
from .engine import DEFAULT_BUSY_TIMEOUT_S
from .error_translation import exhausted
from .retry import RetryLoop, RetryPolicy, queued_jitter
from .store import CHECKPOINT_EVERY_N_WRITES, Store
from .writers_queue import QueueTimeout

T = TypeVar("T")

READER_THREADS = 2
"""Readers' threads of a SQLite store: two, so a slow search does not hold up every other read,
and no more, because each thread running Python competes with the event loop for the GIL (on
2 cores, 4 readers doubled the loop's p99 lag under a search-heavy load, at equal throughput:
``scripts/bench_async.py``)."""
SHARED_THREADS = 8
"""Threads of a PostgreSQL store, reads and writes alike (within the engine's pool of 5+10)."""
QUEUE_SLICE_S = 0.25
"""Longest single wait for the writers' queue in the writer thread: a cancelled or timed-out
wait is noticed within this, and the budget is checked between slices."""


class StoreClosedError(SessionStoreError, RuntimeError):
    """The async store (or ``AsyncSessionDB``) was closed; open a new one."""


def single_attempt(policy: RetryPolicy) -> RetryPolicy:
    """The policy of the sync store underneath: one attempt, no sleep. The retry loop is the
    event loop's (:meth:`AsyncStore.write`), with the caller's policy."""
    return RetryPolicy(max_attempts=1, min_sleep_s=0.0, max_sleep_s=0.0, budget_s=policy.budget_s)


class _LockWait(Exception):
    """A slice of waiting for the writers' queue ran out (the loop decides what next)."""

    def __init__(self, timeout: QueueTimeout) -> None:
        super().__init__(str(timeout))
        self.timeout = timeout


class _Skipped(Exception):
    """The caller was cancelled before this attempt started: it did nothing (nobody awaits
    this outcome any more)."""


class _Call:
    """One async call's state, shared with the worker thread that runs its attempts.

    ``cancelled`` is set by the event loop (the caller went away): a job that has not started
    yet does nothing. ``holds_lock`` is only ever changed in the writer thread.
    """

    __slots__ = ("cancelled", "holds_lock")

    def __init__(self) -> None:
        self.cancelled = False
        self.holds_lock = False


class AsyncStore:
    """A :class:`Store` used from asyncio: ``await write(call)``, ``await read(call)``.

    ``call`` is a sync callable that does its database work through ``store`` (a repository or
    ``SessionDB`` method with its arguments bound); ``store`` must have been opened with
    :func:`single_attempt` of ``retry`` (as :meth:`open` does), so one call is one attempt.
    ``closer`` closes what the store belongs to (default: the store itself).
    """

    def __init__(
        self,
        store: Store,
        *,
        retry: RetryPolicy | None = None,
        closer: Callable[[], None] | None = None,
    ) -> None:
        self.store = store
        self.retry = retry or RetryPolicy()
        self._closer = closer or store.close
        self._serialize = store.dialect.serialize_writes_in_process
        self._closed = False
        self._turns: asyncio.Lock | None = None
        self._turns_loop: asyncio.AbstractEventLoop | None = None
        self._jobs: set[concurrent.futures.Future[Any]] = set()
        self._start_threads()
        forksafety.track(self)

    @classmethod
    async def open(
        cls,
        url: str | URL | None = None,
        *,
        read_only: bool = False,
        retry: RetryPolicy | None = None,
        busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
        checkpoint_every: int = CHECKPOINT_EVERY_N_WRITES,
    ) -> AsyncStore:
        """``Store.open`` (never migrates) in a thread, for use from the event loop."""
        policy = retry or RetryPolicy()
        store = await asyncio.to_thread(
            Store.open,
            url,
            read_only=read_only,
            retry=single_attempt(policy),
            busy_timeout_s=busy_timeout_s,
            checkpoint_every=checkpoint_every,
        )
        return cls(store, retry=policy)

    def _start_threads(self) -> None:
        if self._serialize:
            self._writer = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix="sessionstore-writer"
            )
            self._readers = concurrent.futures.ThreadPoolExecutor(
                READER_THREADS, thread_name_prefix="sessionstore-reader"
            )
        else:
            self._writer = self._readers = concurrent.futures.ThreadPoolExecutor(
                SHARED_THREADS, thread_name_prefix="sessionstore-worker"
            )

    @property
    def closed(self) -> bool:
        return self._closed

    # -- the two doors ------------------------------------------------------------------------
    async def read(self, call: Callable[[], T]) -> T:
        """Run ``call`` (one read transaction per attempt) in a reader thread, retried here."""
        self._check_open()
        return await self._retrying(call, self._readers, time.monotonic(), serialized=False)

    async def write(self, call: Callable[[], T]) -> T:
        """Run ``call`` (one write transaction per attempt) in the writer thread, in turn."""
        self._check_open()
        started = time.monotonic()
        if not self._serialize:
            return await self._retrying(call, self._writer, started, serialized=False)
        turns = self._turn_lock()
        if not await _acquire_within(turns, self.retry.budget_s):
            raise StoreBusyError(0, time.monotonic() - started, None)
        try:
            self._check_open()
            return await self._retrying(call, self._writer, started, serialized=True)
        finally:
            turns.release()

    # -- the retry loop, in the event loop ----------------------------------------------------
    async def _retrying(
        self,
        work: Callable[[], T],
        executor: concurrent.futures.Executor,
        started: float,
        *,
        serialized: bool,
    ) -> T:
        """The one retry rule (:class:`.retry.RetryLoop`) driven with ``asyncio.sleep``: the
        whole transaction again, only on retryable errors, bounded by attempts and the budget."""
        loop = RetryLoop(self.retry, jitter=self._jitter, started=started)
        deadline = started + self.retry.budget_s
        call = _Call()
        try:
            while True:
                try:
                    if serialized:
                        return await self._submit(
                            executor, self._locked_attempt, call, work, deadline
                        )
                    return await self._submit(executor, _plain_attempt, call, work)
                except _LockWait as wait:
                    if time.monotonic() >= deadline:
                        raise StoreBusyError(
                            0, time.monotonic() - started, wait.timeout
                        ) from None
                    continue
                except Exception as exc:
                    if not self._is_retryable(exc):
                        raise
                    pause = loop.pause_after(exc)
                if pause is None:
                    raise self._exhausted(loop.exhausted())
                await asyncio.sleep(pause)
        except BaseException:
            # Cancelled, timed out, failed or exhausted: no attempt of this call starts any
            # more, and the writers' queue is let go of after the one that may be running.
            call.cancelled = True
            if serialized:
                with contextlib.suppress(RuntimeError):  # executor shut down: nothing held
                    self._track(executor.submit(self._release, call))
            raise

    def _submit(
        self, executor: concurrent.futures.Executor, fn: Callable[..., T], *args: Any
    ) -> asyncio.Future[T]:
        job = self._track(executor.submit(fn, *args))
        # Cancelling the awaiting task cancels a job that has not started; one that has
        # started runs to its end (see the module's docstring).
        return asyncio.wrap_future(job)

    def _track(self, job: concurrent.futures.Future[T]) -> concurrent.futures.Future[T]:
        self._jobs.add(job)
        job.add_done_callback(self._jobs.discard)
        return job

    async def idle(self) -> None:
        """Wait until every attempt started so far, cancelled callers' included, has ended.

        Never needed for correctness (the next call queues behind them); useful to observe a
        settled store, e.g. connections back in the pool after a cancellation storm."""
        while self._jobs:
            await asyncio.to_thread(concurrent.futures.wait, list(self._jobs))

    def _is_retryable(self, exc: BaseException) -> bool:
        """The single attempt's way of saying "retry me": busy, or the connection was lost
        before COMMIT (``Store`` raises those two only for errors it would itself retry)."""
        if isinstance(exc, StoreBusyError):
            return True
        cause = exc.__cause__
        return (
            isinstance(exc, StoreUnavailableError)
            and cause is not None
            and self.store.dialect.is_disconnect(cause)
        )

    def _jitter(self, low: float, high: float) -> float:
        """The sync store's jitter: shorter at the head of the writers' queue."""
        queued = self.store.write_lock.queued
        return queued_jitter(low, high) if queued else random.uniform(low, high)

    def _exhausted(self, spent: StoreBusyError) -> SessionStoreError:
        """The loop's error, its last attempt's own error unwrapped (each attempt raised a
        typed one from the single-attempt store), typed as ``Store`` types it."""
        last = spent.last_error
        underlying = last.last_error if isinstance(last, StoreBusyError) else last
        if isinstance(last, StoreUnavailableError):
            underlying = last.__cause__
        error = exhausted(
            self.store.dialect, StoreBusyError(spent.attempts, spent.waited_s, underlying)
        )
        error.__cause__ = underlying
        return error

    # -- what the writer thread runs ----------------------------------------------------------
    def _locked_attempt(self, call: _Call, work: Callable[[], T], deadline: float) -> T:
        """One attempt with the writers' queue held (taken first, within one slice)."""
        if call.cancelled:
            raise _Skipped
        lock = self.store.write_lock
        if not call.holds_lock:
            try:
                lock.enter(min(deadline, time.monotonic() + QUEUE_SLICE_S), strict=True)
            except QueueTimeout as exc:
                raise _LockWait(exc) from None
            call.holds_lock = True
            if call.cancelled:
                self._release(call)
                raise _Skipped
        try:
            result = work()
        except BaseException as exc:
            if not self._is_retryable(exc):
                self._release(call)
            raise  # a retryable one keeps the queue across the back-off, as Store.write does
        self._release(call)
        return result

    def _release(self, call: _Call) -> None:
        if call.holds_lock:
            call.holds_lock = False
            self.store.write_lock.release()

    # -- turns, closing, fork -----------------------------------------------------------------
    def _turn_lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._turns is None or (self._turns_loop is not loop and not self._turns.locked()):
            # An asyncio.Lock belongs to the loop it first waited in: a later loop gets its own.
            self._turns, self._turns_loop = asyncio.Lock(), loop
        return self._turns

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError("this async session store is closed")

    async def close(self) -> None:
        """Wait for the writes in progress, let the threads finish, then close the store."""
        if self._closed:
            return
        if self._serialize:
            turns = self._turn_lock()
            await turns.acquire()
            self._closed = True
            turns.release()
        self._closed = True
        await asyncio.to_thread(self._shutdown)

    def _shutdown(self) -> None:
        self._writer.shutdown(wait=True)
        self._readers.shutdown(wait=True)
        self._closer()

    def after_fork_in_child(self) -> None:
        """The parent's threads do not exist here, nor its loop: start afresh."""
        self._turns = self._turns_loop = None
        self._jobs = set()
        self._start_threads()

    async def __aenter__(self) -> AsyncStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


def _plain_attempt(call: _Call, work: Callable[[], T]) -> T:
    if call.cancelled:
        raise _Skipped
    return work()


async def _acquire_within(lock: asyncio.Lock, timeout_s: float) -> bool:
    """Take ``lock`` within ``timeout_s``; a cancelled or timed-out wait never keeps it.

    (``asyncio.wait_for(lock.acquire())`` can leave the lock taken when the timeout races the
    grant before Python 3.12; ``asyncio.timeout`` is 3.11+.)
    """
    if not lock.locked():
        await lock.acquire()
        return True
    acquiring = asyncio.ensure_future(lock.acquire())
    try:
        done, _ = await asyncio.wait({acquiring}, timeout=max(timeout_s, 0.0))
    except BaseException:
        _abandon(acquiring, lock)
        raise
    if done:
        return True
    _abandon(acquiring, lock)
    return False


def _abandon(acquiring: asyncio.Future[Any], lock: asyncio.Lock) -> None:
    def give_back(future: asyncio.Future[Any]) -> None:
        if not future.cancelled() and future.exception() is None:
            lock.release()  # granted after all, just as we left

    if acquiring.done():
        give_back(acquiring)
    else:
        acquiring.cancel()
        acquiring.add_done_callback(give_back)
