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
  obtains after the caller left.
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

from . import forksafety

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows has no flock; SQLite's locking remains
    fcntl = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

class QueueTimeout(Exception):
    """The writers ahead did not finish within the caller's budget."""


class WriterQueue:
    """An exclusive lock on ``path`` shared by every writer of one store."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._fd_lock = threading.Lock()
        self._unavailable = fcntl is None
        forksafety.track(self)

    @property
    def available(self) -> bool:
        return not self._unavailable

    def acquire(self, deadline: float) -> int | None:
        """Wait until ``deadline`` (a ``time.monotonic`` reading) for the lock; return its
        descriptor for :meth:`release`.

        None: queueing is unavailable here and the caller goes on without it.
        Raises :class:`QueueTimeout` when the deadline passes first.
        """
        fd = self._fd
        if fd is not None:
            # The uncontended path, kept to two system calls.
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                pass  # contended, or stranger: the general path below sorts it out
            else:
                if self._still_current(fd):
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
                if held is None or self._still_current(held):
                    return held
                self.release(held)
                continue
            except OSError as exc:
                self._give_up(exc)
                return None
            if self._still_current(fd):
                return fd
            # A closing store removed the file we hold: start again on the new one.
            fcntl.flock(fd, fcntl.LOCK_UN)
            self._drop_shared(fd)

    def release(self, fd: int) -> None:
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            if fd != self._fd:
                os.close(fd)

    def _still_current(self, fd: int) -> bool:
        # Only a closing store removes the file, and only while holding its lock: a file we
        # locked that has no name left is the removed one. One fstat, no path lookup.
        try:
            return os.fstat(fd).st_nlink > 0
        except OSError:
            return False

    def _drop_shared(self, fd: int) -> None:
        with self._fd_lock:
            if self._fd == fd:
                self._fd = None
        with contextlib.suppress(OSError):
            os.close(fd)

    def after_fork_in_child(self) -> None:
        self._fd_lock = threading.Lock()
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
        if fd is None:
            return
        try:
            if _lock_briefly(fd):
                if self._still_current(fd) and _same_file(fd, self.path):
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
            return self._open_description()
        except OSError as exc:
            self._give_up(exc)
            return None

    def _open_description(self) -> int:
        """A new open file description of the side file, created if a closing store removed it."""
        flags = os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT | flags, 0o666)
        except OSError:
            # Someone else's side file we may not write: flock needs only a read descriptor.
            return os.open(self.path, os.O_RDONLY | flags)

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
        # A description of its own: the lock it waits for is then not "already ours" through
        # the shared descriptor, and an abandoned wait can be cleaned up independently.
        try:
            fd = self._open_description()
        except OSError as exc:
            self._give_up(exc)
            return None
        waiter = _Waiter(fd)
        threading.Thread(target=waiter.run, name="sessionstore-writer-queue", daemon=True).start()
        waiter.done.wait(max(timeout_s, 0.0))
        with waiter.state:
            if waiter.acquired:
                return fd
            waiter.abandoned = True
            error = waiter.error
        if error is not None:
            os.close(fd)
            self._give_up(error)
            return None
        raise QueueTimeout(f"waited {timeout_s:.2f}s behind other writers of this store")


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


def _same_file(fd: int, path: Path) -> bool:
    held, named = os.fstat(fd), os.stat(path)
    return (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino)


class _Waiter:
    """Blocks in ``flock`` for a caller that may stop waiting."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.state = threading.Lock()
        self.done = threading.Event()
        self.acquired = False
        self.abandoned = False
        self.error: OSError | None = None

    def run(self) -> None:
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except OSError as exc:
            with self.state:
                self.error = exc
                abandoned = self.abandoned
            self.done.set()
            if abandoned:
                os.close(self.fd)
            return
        with self.state:
            if self.abandoned:
                # The caller gave up: pass the turn on at once.
                fcntl.flock(self.fd, fcntl.LOCK_UN)
                os.close(self.fd)
                return
            self.acquired = True
        self.done.set()
