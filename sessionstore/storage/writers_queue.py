"""This package's writers of one SQLite file queue in the kernel, not on a timer.

SQLite's busy handler polls on a fixed schedule (..., 50, 100 ms). When the holder of the write
lock releases it, the gap before the next BEGIN is 10-50 us; a poller almost never catches it,
and the writer that just committed takes the lock again at once. Waiters starve behind a convoy.

So every writer of this package takes an exclusive ``flock`` on a side file,
``<db>-writelock``, around its whole retry loop, across threads and processes. Waiters sleep in
the kernel and one of them is woken the moment the lock is released; only the one holder talks
to SQLite, whose busy handler then only ever waits for a *foreign* program (the ``sqlite3``
shell, Hermes) and catches its release within one poll.

- Uncontended, the cost is one non-blocking ``flock`` and one unlock (two system calls).
- A contended wait blocks in a helper thread so that the caller can stop waiting when its retry
  budget runs out (``flock`` itself has no timeout); the helper releases at once whatever it
  obtains after the caller left. It is one long-lived thread per queue, started at the first
  contended wait: a thread per wait cost 140 us and more CPU than the rest of a wait.
- The side file is a different file from the store, so opening and closing it never touches
  SQLite's locks. A closing store removes it while holding the lock, so a closed store leaves
  nothing behind; every holder checks, after locking, that the file it locked still has a
  name (one ``fstat``), and otherwise starts again on a new one.
- Where it cannot be created or locked (a read-only directory, a filesystem without ``flock``),
  writers fall back to SQLite's own locking and the jittered retry: nothing breaks, waits are
  just less fair.
- ``flock`` locks belong to an open file description, which a forked child shares with its
  parent: the child drops its copy (closing it releases nothing) and opens its own.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from pathlib import Path

from . import fork_safety as forksafety
from .private_files import create_new_file, mode_of

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows has no flock; SQLite's locking remains
    fcntl = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

class QueueTimeout(Exception):
    """The writers ahead did not finish within the caller's budget."""


class QueueClosed(Exception):
    """The store this queue belongs to is closing: nobody waits for the lock through it any
    more (:meth:`WriterQueue.interrupt`)."""


class WriterQueue:
    """An exclusive lock on ``path`` shared by every writer of one store."""

    def __init__(self, path: Path, mode_like: Path | None = None) -> None:
        self.path = path
        self.mode_like = mode_like
        """The file whose permissions the side file gets when this queue creates it (the
        store's; 0600 without one: ``private_files.mode_of``)."""
        self._fd: int | None = None
        self._fd_lock = threading.Lock()
        self._waiter: _Waiter | None = None
        self._unavailable = fcntl is None
        self._interrupted = False
        forksafety.track(self)

    @property
    def available(self) -> bool:
        return not self._unavailable

    def acquire(self, deadline: float) -> int | None:
        """Wait until ``deadline`` (a ``time.monotonic`` reading) for the lock; return its
        descriptor for :meth:`release`.

        None: queueing is unavailable here and the caller goes on without it.
        Raises :class:`QueueTimeout` when the deadline passes first, :class:`QueueClosed`
        when the store is closing (:meth:`interrupt`).
        """
        if self._interrupted:
            raise QueueClosed
        fd = self._fd
        if fd is not None:
            # The uncontended path, kept to two system calls.
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                pass  # contended, or stranger: the general path below sorts it out
            else:
                if _still_current(fd):
                    return fd
                fcntl.flock(fd, fcntl.LOCK_UN)
                self._drop_shared(fd)
        return self._acquire(deadline)

    def _acquire(self, deadline: float) -> int | None:
        while True:
            fd = self._shared_fd()
            if fd is None:
                return None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                held = self._wait(deadline - time.monotonic())
                if held is None or _still_current(held):
                    return held
                self.release(held)
                continue
            except OSError as exc:
                self._give_up(exc)
                return None
            if _still_current(fd):
                return fd
            # A closing store removed the file we hold: start again on the new one.
            fcntl.flock(fd, fcntl.LOCK_UN)
            self._drop_shared(fd)

    def release(self, fd: int) -> None:
        waiter = self._waiter
        if waiter is not None and waiter.owns(fd):
            waiter.release(fd)
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            if fd != self._fd:
                os.close(fd)

    def _drop_shared(self, fd: int) -> None:
        with self._fd_lock:
            if self._fd == fd:
                self._fd = None
        with contextlib.suppress(OSError):
            os.close(fd)

    def interrupt(self) -> None:
        """The store is closing: a wait for the lock in progress ends at once with
        :class:`QueueClosed`, and so does every later :meth:`acquire`. A holder keeps the
        lock until its release; :meth:`close` then removes the side file."""
        self._interrupted = True
        waiter = self._waiter
        if waiter is not None:
            waiter.interrupt()

    def after_fork_in_child(self) -> None:
        self._fd_lock = threading.Lock()
        waiter, self._waiter = self._waiter, None
        if waiter is not None:
            # Its thread is the parent's, and its description is shared with the parent.
            waiter.forget_in_child()
        fd, self._fd = self._fd, None
        if fd is not None:
            # The parent's descriptor keeps the shared description, and any lock on it, alive.
            with contextlib.suppress(OSError):
                os.close(fd)

    def close(self) -> None:
        """Let go of the side file, removing it when no writer holds or awaits it right now.

        A store that is still open elsewhere simply creates it again at its next write.
        """
        with self._fd_lock:
            fd, self._fd = self._fd, None
            # Kept, stopped: a holder's release still finds its description's owner.
            waiter = self._waiter
        if waiter is not None:
            waiter.stop()
        if fd is None:
            return
        try:
            if _lock_briefly(fd):
                if _still_current(fd) and _same_file(fd, self.path):
                    self.path.unlink()
                fcntl.flock(fd, fcntl.LOCK_UN)
        except OSError:
            pass  # already gone, or stranger: the next closer tidies up
        finally:
            with contextlib.suppress(OSError):
                os.close(fd)

    def _shared_fd(self) -> int | None:
        if self._unavailable:
            return None
        fd = self._fd
        if fd is not None:
            return fd
        with self._fd_lock:
            if self._fd is None:
                self._fd = self._open()
            return self._fd

    def _open(self) -> int | None:
        try:
            return _open_description(self.path, self.mode_like)
        except OSError as exc:
            self._give_up(exc)
            return None

    def _give_up(self, exc: OSError) -> None:
        # Once per queue: a read-only directory does not become writable between two appends.
        self._unavailable = True
        logger.info(
            "writers cannot queue on %s (%s); using SQLite's locking and the jittered retry "
            "alone: no data is at risk, waits are less fair",
            self.path,
            exc.strerror or exc,
        )

    def _wait(self, timeout_s: float) -> int | None:
        with self._fd_lock:
            if self._interrupted:
                raise QueueClosed
            if self._waiter is None or self._waiter.stopped:
                self._waiter = _Waiter(self.path, self.mode_like)
            waiter = self._waiter
            if self._interrupted:
                waiter.interrupt()
        try:
            return waiter.wait(timeout_s)
        except OSError as exc:
            self._give_up(exc)
            return None


CLOSE_LOCK_TRIES = 5
CLOSE_LOCK_PAUSE_S = 0.002


def _lock_briefly(fd: int) -> bool:
    """Try for a few ms to lock ``fd`` without waiting in the kernel. A waiter that gave up
    still takes and passes on the lock once on its way out; a closing store that tried only
    once could meet it there and leave the side file behind."""
    for attempt in range(CLOSE_LOCK_TRIES):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if attempt + 1 < CLOSE_LOCK_TRIES:
                time.sleep(CLOSE_LOCK_PAUSE_S)
            continue
        return True
    return False


def _open_description(path: Path, mode_like: Path | None) -> int:
    """A new open file description of the side file, created if a closing store removed it:
    exclusively, with ``mode_like``'s permissions (``private_files``)."""
    flags = os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
    while True:
        try:
            return os.open(path, os.O_RDWR | flags)
        except FileNotFoundError:
            pass
        except OSError:
            # Someone else's side file we may not write: flock needs only a read descriptor.
            return os.open(path, os.O_RDONLY | flags)
        try:
            return create_new_file(path, mode_of(mode_like))
        except FileExistsError:
            continue  # another opener created it in between: open theirs


def _still_current(fd: int) -> bool:
    # Only a closing store removes the file, and only while holding its lock: a file we
    # locked that has no name left is the removed one. One fstat, no path lookup.
    try:
        return os.fstat(fd).st_nlink > 0
    except OSError:
        return False


def _same_file(fd: int, path: Path) -> bool:
    held, named = os.fstat(fd), os.stat(path)
    return (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino)


class _Unwanted(Exception):
    """Nobody waits for the lock any more (the caller gave up, or the queue was closed)."""


class _Claim:
    """One caller's wait, answered by the waiter's thread.

    ``answered`` is a plain lock, taken at creation and released by the thread once ``fd``
    or ``error`` is set: the caller wakes on it directly, where an ``Event`` would make it
    take the event's own lock again, which the answering thread may still be holding.
    """

    __slots__ = ("answered", "error", "fd")

    def __init__(self) -> None:
        self.answered = threading.Lock()
        self.answered.acquire()
        self.fd: int | None = None
        self.error: OSError | QueueClosed | None = None

    def answer(self) -> None:
        self.answered.release()


class _Waiter:
    """One long-lived thread per queue that blocks in ``flock`` for callers that may stop
    waiting.

    Starting a thread per wait cost 140 us of wall time and 160 us of CPU, paid at almost
    every append while several processes write (six writers: 85 % of the waits contended), on
    a machine whose other core is busy with the holder's transaction. This thread is started
    at the first contended wait and from then on only woken.

    It waits on an open file description of its own, opened once: the lock it waits for is
    then not "already ours" through the queue's shared descriptor. A caller whose budget runs
    out withdraws its claim; when the thread then obtains the lock it passes it straight on,
    unless a newer caller has claimed the wait meanwhile, who then gets it. It never waits
    again while the lock it handed over is held (its description would lock at once).
    """

    def __init__(self, path: Path, mode_like: Path | None) -> None:
        self._path = path
        self._mode_like = mode_like
        self._changed = threading.Condition(threading.Lock())
        self._claim: _Claim | None = None
        self._fd: int | None = None
        self._handed_over = False
        self._stopping = False
        self._interrupted = False
        self._thread: threading.Thread | None = None

    @property
    def stopped(self) -> bool:
        return self._stopping

    def owns(self, fd: int) -> bool:
        return fd == self._fd

    def wait(self, timeout_s: float) -> int:
        """The lock, held through this waiter's description, within ``timeout_s``.

        Raises :class:`QueueTimeout` when it does not come in time, :class:`OSError` when
        the side file cannot be opened or locked here, :class:`QueueClosed` when the store
        closes meanwhile (:meth:`interrupt`).
        """
        claim = _Claim()
        with self._changed:
            if self._interrupted:
                raise QueueClosed
            self._claim = claim
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="sessionstore-writer-queue", daemon=True
                )
                self._thread.start()
            self._changed.notify()
        try:
            answered = claim.answered.acquire(timeout=max(timeout_s, 0.0))
        except BaseException:
            # Interrupted (Ctrl-C): nobody would release a lock handed to this claim.
            self._withdraw(claim)
            if claim.fd is not None:
                self.release(claim.fd)
            raise
        if not answered:
            self._withdraw(claim)
        # Set by the thread before its answer, or before the withdrawal: final either way.
        if claim.fd is not None:
            return claim.fd
        if claim.error is not None:
            raise claim.error
        raise QueueTimeout(f"waited {timeout_s:.2f}s behind other writers of this store")

    def _withdraw(self, claim: _Claim) -> None:
        """From now on the thread answers ``claim`` no more; what it answered stays in it."""
        with self._changed:
            if self._claim is claim:
                self._claim = None

    def release(self, fd: int) -> None:
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            with self._changed:
                self._handed_over = False
                if self._stopping and self._thread is None:
                    self._close_description()
                if self._claim is not None or self._stopping:
                    # Only then has the thread something to do; waking it for nothing would
                    # take the interpreter from this writer just as it goes on.
                    self._changed.notify()

    def interrupt(self) -> None:
        """The store is closing: the claim waiting now is answered with :class:`QueueClosed`
        (the thread passes on whatever it obtains for it), and no new one is taken."""
        with self._changed:
            self._interrupted = True
            claim, self._claim = self._claim, None
            if claim is not None:
                claim.error = QueueClosed()
                claim.answer()
            self._changed.notify()

    def stop(self) -> None:
        """Let the thread end once it is idle. The description is closed by whoever is last
        to use it: never under a thread blocked in ``flock`` on it, nor under a holder."""
        with self._changed:
            self._stopping = True
            if self._thread is None and not self._handed_over:
                self._close_description()
            self._changed.notify()

    def forget_in_child(self) -> None:
        fd = self._fd
        if fd is not None:
            # The child's copy: closing it releases nothing the parent holds or awaits.
            with contextlib.suppress(OSError):
                os.close(fd)

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._stopping and (self._claim is None or self._handed_over):
                    self._changed.wait()
                if self._stopping:
                    self._thread = None
                    if not self._handed_over:
                        self._close_description()
                    return
            try:
                fd = self._lock_current()
            except _Unwanted:
                continue
            except OSError as exc:
                with self._changed:
                    claim, self._claim = self._claim, None
                    if claim is not None:
                        claim.error = exc
                        claim.answer()
                    self._thread = None
                    self._close_description()
                return
            with self._changed:
                claim, self._claim = self._claim, None
                if claim is None or self._stopping:
                    # The caller gave up (or the store closed): pass the turn on at once.
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    continue
                self._handed_over = True
                claim.fd = fd
                claim.answer()

    def _lock_current(self) -> int:
        """Block until this thread's description of the *current* side file holds the lock.

        Raises :class:`_Unwanted` rather than create a side file again that nobody waits
        for: a closing store may just have removed it, and it would be left behind.
        """
        while True:
            fd = self._fd
            if fd is None:
                if self._stopping or self._claim is None:
                    raise _Unwanted
                fd = _open_description(self._path, self._mode_like)
                with self._changed:
                    self._fd = fd
            fcntl.flock(fd, fcntl.LOCK_EX)
            if _still_current(fd):
                return fd
            # A closing store removed that file while we waited: wait again on the new one.
            fcntl.flock(fd, fcntl.LOCK_UN)
            with self._changed:
                self._close_description()

    def _close_description(self) -> None:
        # With ``_changed`` held, and only when no thread waits on it and no holder uses it.
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
