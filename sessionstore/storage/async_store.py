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

**Cancellation is settled**: when a cancelled (or timed-out) write call returns, its write has
committed or rolled back, and nothing of it lands later. At any point:

- waiting for the turn, for the writers' queue, in the back-off, or before its attempt started
  in its thread: nothing was written and nothing will be (an attempt not started never starts;
  a slice of waiting for the queue ends within :data:`QUEUE_SLICE_S` and writes nothing);
- while an attempt runs in its thread: the call waits for that attempt to end (in the event
  loop, which goes on running everything else), so the transaction commits or rolls back
  *whole* before ``CancelledError`` propagates; no further attempt starts. Further
  cancellations during that wait change nothing. The wait is one attempt at most: its
  statements, a busy timeout on SQLite, a lost-COMMIT look on PostgreSQL (a server-side
  cancel is not sent: psycopg's cancel request can land on the connection's *next*
  statement, someone else's transaction).

So a cancelled write **may have committed**, exactly when the cancellation came while its
attempt ran and that attempt went through COMMIT (on PostgreSQL a one-message append is one
autocommit statement: the statement is its COMMIT). To be told which, name the write with an
idempotency key (``write(call, idempotency_key=...)``, :mod:`.keyed_writes`): once the call has
returned, :meth:`AsyncStore.committed` answers for good, and a retry under the key returns the
first write's result without writing again. Reads are not waited for: a cancelled read changes
nothing, and its thread finishes on its own.

One ``AsyncStore`` serves one event loop at a time (tests and scripts that run several loops one
after another are fine). **A loop that dies with calls in flight** (stopped and closed by a
crash handler, its tasks never resumed) leaves the store usable: each of its attempts already
running ends in its thread (commits or rolls back whole), its jobs not yet started are dropped
once the loop is closed, and a call of it that was parked between attempts holding the writers'
queue is let go of at the next write (other processes would otherwise wait for the queue for
ever). Each loop takes turns on a lock of its own (an ``asyncio.Lock`` belongs to one loop, and
a dead loop's is never released), and results are handed to a loop only while it is open. A
write from the next loop therefore either commits and returns its result, or fails with a typed
error and has not committed. After ``fork()`` the child gets fresh threads and locks.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import random
import time
from collections.abc import Callable, Hashable
from typing import Any, TypeVar, cast

from sqlalchemy.engine import URL

from ..errors import (
    SessionStoreError,
    StoreBusyError,
    StoreClosedError,
    StoreUnavailableError,
)
from . import fork_safety as forksafety
from .engine import DEFAULT_BUSY_TIMEOUT_S
from .error_translation import exhausted
from .keyed_writes import Committed, KeyedWrites
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
    """The caller was cancelled, or its loop closed, before this attempt started: it did
    nothing (nobody awaits this outcome any more)."""


class _Call:
    """One async call's state, shared with the worker thread that runs its attempts.

    ``cancelled`` is set by the event loop (the caller went away): a job that has not started
    yet does nothing, as does one whose ``loop`` has closed. ``holds_lock`` is only ever
    changed in the writer thread.
    """

    __slots__ = ("cancelled", "holds_lock", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.cancelled = False
        self.holds_lock = False
        self.loop = loop

    @property
    def abandoned(self) -> bool:
        return self.cancelled or self.loop.is_closed()


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
        self._queue_holder: _Call | None = None  # read and written in the writer thread only
        self._jobs: set[concurrent.futures.Future[Any]] = set()
        self._keyed = KeyedWrites()
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
        return await self._retrying(
            call, self._readers, time.monotonic(), serialized=False, settled=False
        )

    async def write(
        self, call: Callable[[], T], *, idempotency_key: Hashable | None = None
    ) -> T:
        """Run ``call`` (one write transaction per attempt) in the writer thread, in turn.

        ``idempotency_key`` (any hashable, None for none) names the write: if a write under it
        already committed, its result is returned and nothing is written; otherwise the
        result is remembered for :meth:`committed` the moment the attempt commits.
        """
        self._check_open()
        if idempotency_key is not None:
            found = self._keyed.committed(idempotency_key)
            if found is not None:
                return cast(T, found.result)
            call = functools.partial(self._keyed.run_once, idempotency_key, call)
        started = time.monotonic()
        if not self._serialize:
            return await self._retrying(call, self._writer, started, serialized=False)
        loop = asyncio.get_running_loop()
        turns = self._turn_lock()
        if not await _acquire_within(turns, self.retry.budget_s):
            raise StoreBusyError(0, time.monotonic() - started, None)
        try:
            self._check_open()
            return await self._retrying(call, self._writer, started, serialized=True)
        finally:
            if not loop.is_closed():
                # (Closed: a dead loop's coroutine being closed by the garbage collector. Its
                # waiters are gone for good, and waking them would call into that loop.)
                turns.release()

    def committed(self, idempotency_key: Hashable) -> Committed | None:
        """The write made under ``idempotency_key`` if it committed, else None (see
        :mod:`.keyed_writes` for how long keys are remembered). Final once that write's call
        has returned, cancelled or not: nothing of a returned call lands later."""
        return self._keyed.committed(idempotency_key)

    # -- the retry loop, in the event loop ----------------------------------------------------
    async def _retrying(
        self,
        work: Callable[[], T],
        executor: concurrent.futures.Executor,
        started: float,
        *,
        serialized: bool,
        settled: bool = True,
    ) -> T:
        """The one retry rule (:class:`.retry.RetryLoop`) driven with ``asyncio.sleep``: the
        whole transaction again, only on retryable errors, bounded by attempts and the budget.
        ``settled``: a cancellation waits for the attempt running in its thread (writes)."""
        loop = RetryLoop(self.retry, jitter=self._jitter, started=started)
        deadline = started + self.retry.budget_s
        call = _Call(asyncio.get_running_loop())
        try:
            while True:
                try:
                    if serialized:
                        return await self._attempt(
                            executor, call, settled, self._locked_attempt, work, deadline
                        )
                    return await self._attempt(executor, call, settled, _plain_attempt, work)
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
        except GeneratorExit:
            # Closed by the garbage collector: its loop died with this call in flight. This
            # runs wherever the collector fired, possibly inside ``executor.submit`` on this
            # thread with the executor's (non-reentrant) lock held, so it takes no lock and
            # submits nothing. A writers' queue it held is let go of by the next attempt
            # (``_let_go_of_stranded_queue``), as when such a loop is never collected.
            call.cancelled = True
            raise
        except BaseException:
            # Cancelled, timed out, failed or exhausted: no attempt of this call starts any
            # more, and the writers' queue is let go of after the one that may be running.
            call.cancelled = True
            if serialized:
                with contextlib.suppress(RuntimeError):  # executor shut down: nothing held
                    self._track(executor.submit(self._release, call))
            raise

    async def _attempt(
        self,
        executor: concurrent.futures.Executor,
        call: _Call,
        settled: bool,
        fn: Callable[..., T],
        *args: Any,
    ) -> T:
        """``fn(call, *args)`` as one job in ``executor``, awaited in ``call.loop``.

        Cancelled: a job not started never starts; a started one is, when ``settled``,
        waited for to its end (it commits or rolls back whole) before the cancellation goes
        on, so that nothing of this call happens after it returned.
        """
        job = self._track(executor.submit(fn, call, *args))
        try:
            await job_end(call.loop, job)
        except asyncio.CancelledError:
            call.cancelled = True
            if not job.cancel() and settled:
                await _outlast_cancellations(call.loop, job)
            raise
        return job.result()

    def _track(self, job: concurrent.futures.Future[T]) -> concurrent.futures.Future[T]:
        self._jobs.add(job)
        job.add_done_callback(self._jobs.discard)
        return job

    async def idle(self) -> None:
        """Wait until every attempt started so far, cancelled readers' included, has ended.

        Never needed for correctness (a cancelled write has ended when its call returns, and
        the next call queues behind whatever runs); useful to observe a quiet store, e.g.
        connections back in the pool after a cancellation storm."""
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
        if call.abandoned:
            raise _Skipped
        self._let_go_of_stranded_queue(call)
        lock = self.store.write_lock
        if not call.holds_lock:
            try:
                lock.enter(min(deadline, time.monotonic() + QUEUE_SLICE_S), strict=True)
            except QueueTimeout as exc:
                raise _LockWait(exc) from None
            call.holds_lock = True
            self._queue_holder = call
            if call.abandoned:
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

    def _let_go_of_stranded_queue(self, call: _Call) -> None:
        """Within one loop the turn lets one call at a time into this thread, and a call
        that leaves lets go of the queue in a job queued before the next call's first. So
        another holder here belongs to an event loop that stopped while that call waited
        between attempts: it may never run again, and every other process would wait for the
        queue for ever. Its hold ends here; if its loop does run again, its next attempt
        queues afresh."""
        holder = self._queue_holder
        if holder is not None and holder is not call:
            self._release(holder)

    def _release(self, call: _Call) -> None:
        if call.holds_lock:
            call.holds_lock = False
            if self._queue_holder is call:
                self._queue_holder = None
            self.store.write_lock.release()

    # -- turns, closing, fork -----------------------------------------------------------------
    def _turn_lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._turns is None or self._turns_loop is not loop:
            # An asyncio.Lock belongs to the loop it first waited in, and one that a loop
            # stopped holding is never released: each loop takes turns on a lock of its own.
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
        self._queue_holder = None
        self._jobs = set()
        self._keyed.after_fork_in_child()
        self._start_threads()

    async def __aenter__(self) -> AsyncStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


def _plain_attempt(call: _Call, work: Callable[[], T]) -> T:
    if call.abandoned:
        raise _Skipped
    return work()


# -- handing a thread's outcome to a loop ------------------------------------------------------
def job_end(
    loop: asyncio.AbstractEventLoop, job: concurrent.futures.Future[Any]
) -> asyncio.Future[None]:
    """A future of ``loop`` done when ``job`` is (its outcome stays in ``job``).

    Unlike ``asyncio.wrap_future`` it never touches ``job`` (cancelling the waiter does not
    cancel the job: the caller decides) and never calls into a closed loop: a loop that died
    has nobody left to tell, and the thread that finished the job must not fail for it."""
    ended = loop.create_future()

    def wake(_: concurrent.futures.Future[Any]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed
            loop.call_soon_threadsafe(_resolve, ended)

    job.add_done_callback(wake)
    return ended


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def in_thread_settled(fn: Callable[[], T]) -> T:
    """``fn()`` in the loop's default executor, as ``asyncio.to_thread`` runs it (context
    variables included), except that a cancellation is settled: an ``fn`` not started never
    starts, and a started one is waited for to its end before the cancellation goes on."""
    loop = asyncio.get_running_loop()
    job: concurrent.futures.Future[T] = concurrent.futures.Future()

    def run() -> None:
        if job.set_running_or_notify_cancel():
            try:
                job.set_result(fn())
            except BaseException as exc:
                job.set_exception(exc)

    loop.run_in_executor(None, contextvars.copy_context().run, run)  # its outcome is `job`
    try:
        await job_end(loop, job)
    except asyncio.CancelledError:
        if not job.cancel():
            await _outlast_cancellations(loop, job)
        raise
    return job.result()


async def _outlast_cancellations(
    loop: asyncio.AbstractEventLoop, job: concurrent.futures.Future[Any]
) -> None:
    """Wait for ``job`` to end however often the task is cancelled meanwhile (the caller
    re-raises its first cancellation afterwards)."""
    ended = job_end(loop, job)
    while not ended.done():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(ended)


# -- the turn lock -------------------------------------------------------------------------------
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
        acquiring.result()  # a failed acquire is no turn
        return True
    _abandon(acquiring, lock)
    return False


def _abandon(acquiring: asyncio.Future[Any], lock: asyncio.Lock) -> None:
    def give_back(future: asyncio.Future[Any]) -> None:
        if not future.cancelled() and future.exception() is None:
            lock.release()  # granted after all, just as we left

    if acquiring.get_loop().is_closed():
        return  # a dead loop's coroutine being closed: no turn will ever be granted there
    if acquiring.done():
        give_back(acquiring)
    else:
        acquiring.cancel()
        acquiring.add_done_callback(give_back)
