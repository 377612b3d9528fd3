"""This package's writers of one SQLite file queue in the kernel, not on a timer, and in turn.

SQLite's busy handler polls on a fixed schedule (..., 50, 100 ms). When the holder of the write
lock releases it, the gap before the next BEGIN is 10-50 us; a poller almost never catches it,
and the writer that just committed takes the lock again at once. Waiters starve behind a convoy.

So every writer of this package takes an exclusive ``flock`` on a side file,
``<db>-writelock`` (the *lock*), around its whole retry loop, across threads and processes.
Waiters sleep in the kernel; only the one holder talks to SQLite, whose busy handler then only
ever waits for a *foreign* program (the ``sqlite3`` shell, Hermes) and catches its release
within one poll.

A lock alone still lets the releaser barge: ``flock`` hands nothing over, it wakes the waiter,
who must then be scheduled and ask again, while the process that just released asks again
microseconds later (its next thread, or the same thread's next write) without waiting, and
wins. A forked child writing beside a parent with three busy writer threads was passed, in one
wait in twelve, by 3 to 47 of the parent's transactions. So the lock has a turnstile in
front of it, a second side file ``<db>-writegate`` (the *gate*)::

    acquire: lock(gate); lock(lock); unlock(gate)      (each wait bounded by the caller's deadline)
    release: unlock(lock)

A waiter blocked on the lock holds the gate, so the releaser's next acquire stops at the gate
until that waiter has the lock: the turn is handed over, strictly, and the releaser queues
behind. The order is always gate, then lock, and nobody waits for the gate while holding the
lock (release lets go of the lock alone), so the two cannot deadlock. The gate orders waiters,
it does not exclude writers: only the lock does, and a writer that bypasses the gate (an older
sessionstore, or a test holding the lock directly) is merely not queued in turn. An OFD
byte-range lock on one file would serve as a gate too, but not on macOS, and on NFS ``flock``
is itself emulated by byte-range locks it would then conflict with: a second file is portable.

- Uncontended, the cost is three ``flock`` calls and two ``fstat`` calls, and one ``flock`` at
  release: six system calls, against three with the lock alone (an uncontended acquire and
  release measured 7.4 us against 3.8 us, about 1 % of an append).
- A contended wait blocks in a helper thread so that the caller can stop waiting when its retry
  budget runs out (``flock`` itself has no timeout). The helper goes through the caller's own
  gate description (a duplicate descriptor): a caller that got through the gate but found the
  lock held keeps its place at the gate across the hand-over, so nobody passes in between.
  It waits for the lock on a description of its own, and releases at once whatever it obtains
  after the caller left (a gate it gets for nobody is let go of without queueing for the
  lock); the caller lets go of the gate when it stops waiting. It is one long-lived thread per
  queue, started at the first contended wait: a thread per wait cost 140 us and more CPU than
  the rest of a wait.
- The side files are different files from the store, so opening and closing them never touches
  SQLite's locks. A closing store removes both while holding both, so a closed store leaves
  nothing behind; every holder checks, after locking, that both files it went through still have
  a name (two ``fstat``), and otherwise starts again on new ones.
- Where they cannot be created or locked (a read-only directory, a filesystem without
  ``flock``), writers fall back to SQLite's own locking and the jittered retry: nothing breaks,
  waits are just less fair.
- ``flock`` locks belong to an open file description, which a forked child shares with its
  parent: the child drops its copies (closing them releases nothing) and opens its own.
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

_Descriptions = tuple[int, int]
"""Open file descriptions of the gate and of the lock, in that order (the order they are
taken in)."""


def gate_file(lock_file: Path) -> Path:
    """The turnstile in front of ``lock_file``: ``state.db-writelock`` -> ``state.db-writegate``
    (any other name gets ``-gate`` added)."""
    name = lock_file.name
    if name.endswith("lock"):
        return lock_file.with_name(name.removesuffix("lock") + "gate")
    return lock_file.with_name(name + "-gate")


class QueueTimeout(Exception):
    """The writers ahead did not finish within the caller's budget."""


class QueueClosed(Exception):
    """The store this queue belongs to is closing: nobody waits for the lock through it any
    more (:meth:`WriterQueue.interrupt`)."""


class WriterQueue:
    """An exclusive lock on ``path``, entered through its gate, shared by every writer of one
    store."""

    def __init__(self, path: Path, mode_like: Path | None = None) -> None:
        self.path = path
        self.gate_path = gate_file(path)
        self.mode_like = mode_like
        """The file whose permissions the side files get when this queue creates them (the
        store's; 0600 without one: ``private_files.mode_of``)."""
        self._fds: _Descriptions | None = None
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
        fds = self._fds
        if fds is not None:
            # The uncontended path: through the gate and into the lock without waiting.
            try:
                passed = _pass_without_waiting(fds)
            except OSError:
                passed = False  # stranger: the general path below sorts it out
            if passed:
                if _still_current(fds):
                    return fds[1]
                fcntl.flock(fds[1], fcntl.LOCK_UN)
                self._drop_shared(fds)
        return self._acquire(deadline)

    def _acquire(self, deadline: float) -> int | None:
        while True:
            fds = self._shared_fds()
            if fds is None:
                return None
            gate, lock = fds
            try:
                if _try_lock(gate) and _try_lock(lock):
                    fcntl.flock(gate, fcntl.LOCK_UN)
                    if _still_current(fds):
                        return lock
                    # A closing store removed the files we went through: start on new ones.
                    fcntl.flock(lock, fcntl.LOCK_UN)
                    self._drop_shared(fds)
                    continue
            except OSError as exc:
                with contextlib.suppress(OSError):
                    fcntl.flock(gate, fcntl.LOCK_UN)
                self._give_up(exc)
                return None
            # Someone holds the lock, or stands at the gate: queue in turn. When the gate is
            # ours already it stays ours, through the hand-over to the helper, so nobody
            # passes us in the meantime.
            try:
                return self._wait(deadline - time.monotonic(), gate)
            except _Restart:
                pass
            finally:
                # The helper let go of it once it had the lock; otherwise it is ours to let go
                # of (giving up releases whatever we obtained).
                with contextlib.suppress(OSError):
                    fcntl.flock(gate, fcntl.LOCK_UN)
            self._drop_shared(fds)

    def release(self, fd: int) -> None:
        waiter = self._waiter
        if waiter is not None and waiter.owns(fd):
            waiter.release(fd)
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            fds = self._fds
            if fds is None or fd != fds[1]:
                os.close(fd)

    def _drop_shared(self, fds: _Descriptions) -> None:
        with self._fd_lock:
            if self._fds == fds:
                self._fds = None
        _close_all(fds)

    def interrupt(self) -> None:
        """The store is closing: a wait for the lock in progress ends at once with
        :class:`QueueClosed`, and so does every later :meth:`acquire`. A holder keeps the
        lock until its release; :meth:`close` then removes the side files."""
        self._interrupted = True
        waiter = self._waiter
        if waiter is not None:
            waiter.interrupt()

    def after_fork_in_child(self) -> None:
        self._fd_lock = threading.Lock()
        waiter, self._waiter = self._waiter, None
        if waiter is not None:
            # Its thread is the parent's, and its descriptions are shared with the parent.
            waiter.forget_in_child()
        fds, self._fds = self._fds, None
        if fds is not None:
            # The parent's descriptors keep the shared descriptions, and any lock on them, alive.
            _close_all(fds)

    def close(self) -> None:
        """Let go of the side files, removing them when no writer holds or awaits them right
        now.

        A store that is still open elsewhere simply creates them again at its next write.
        """
        with self._fd_lock:
            fds, self._fds = self._fds, None
            # Kept, stopped: a holder's release still finds its description's owner.
            waiter = self._waiter
        if waiter is not None:
            waiter.stop()
        if fds is None:
            return
        gate, lock = fds
        try:
            if _lock_briefly(fds):
                try:
                    if (
                        _still_current(fds)
                        and _same_file(gate, self.gate_path)
                        and _same_file(lock, self.path)
                    ):
                        self.gate_path.unlink()
                        self.path.unlink()
                finally:
                    fcntl.flock(lock, fcntl.LOCK_UN)
                    fcntl.flock(gate, fcntl.LOCK_UN)
        except OSError:
            pass  # already gone, or stranger: the next closer tidies up
        finally:
            _close_all(fds)

    def _shared_fds(self) -> _Descriptions | None:
        if self._unavailable:
            return None
        fds = self._fds
        if fds is not None:
            return fds
        with self._fd_lock:
            if self._fds is None:
                self._fds = self._open()
            return self._fds

    def _open(self) -> _Descriptions | None:
        try:
            return _open_descriptions(self.gate_path, self.path, self.mode_like)
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

    def _wait(self, timeout_s: float, gate: int) -> int | None:
        with self._fd_lock:
            if self._interrupted:
                raise QueueClosed
            if self._waiter is None or self._waiter.stopped:
                self._waiter = _Waiter(self.path, self.mode_like)
            waiter = self._waiter
            if self._interrupted:
                waiter.interrupt()
        try:
            return waiter.wait(timeout_s, gate)
        except OSError as exc:
            self._give_up(exc)
            return None


def _try_lock(fd: int) -> bool:
    """Lock ``fd`` if nobody else holds it (True); never wait."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _pass_without_waiting(fds: _Descriptions) -> bool:
    """Through the gate into the lock, waiting for neither: True when the lock is now held
    through ``fds``. The gate is let go of either way. Raises :class:`OSError` when ``flock``
    fails for another reason than somebody else's lock."""
    gate, lock = fds
    try:
        fcntl.flock(gate, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        fcntl.flock(gate, fcntl.LOCK_UN)
    return True


CLOSE_LOCK_TRIES = 5
CLOSE_LOCK_PAUSE_S = 0.002


def _lock_briefly(fds: _Descriptions) -> bool:
    """Try for a few ms to hold both the gate and the lock through ``fds`` without waiting in
    the kernel (True: both are held). A waiter that gave up still goes through and passes on
    the lock once on its way out; a closing store that tried only once could meet it there and
    leave the side files behind."""
    gate, lock = fds
    for attempt in range(CLOSE_LOCK_TRIES):
        if attempt:
            time.sleep(CLOSE_LOCK_PAUSE_S)
        try:
            fcntl.flock(gate, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fcntl.flock(gate, fcntl.LOCK_UN)
            continue
        except BaseException:
            fcntl.flock(gate, fcntl.LOCK_UN)
            raise
        return True
    return False


def _open_descriptions(gate: Path, lock: Path, mode_like: Path | None) -> _Descriptions:
    """New open file descriptions of the gate and the lock. When the second cannot be had, a
    first one created just now is removed again: a queue that gives up leaves nothing behind
    (a writer that opened it meanwhile finds it gone at its next hold, and starts again)."""
    gate_fd, gate_created = _open_description(gate, mode_like)
    try:
        lock_fd, _ = _open_description(lock, mode_like)
    except BaseException:
        with contextlib.suppress(OSError):
            if gate_created and _same_file(gate_fd, gate):
                gate.unlink()
        os.close(gate_fd)
        raise
    return gate_fd, lock_fd


def _open_description(path: Path, mode_like: Path | None) -> tuple[int, bool]:
    """A new open file description of a side file, and whether it was created: created if
    missing (a closing store removed it), exclusively, with ``mode_like``'s permissions
    (``private_files``)."""
    flags = os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
    while True:
        try:
            return os.open(path, os.O_RDWR | flags), False
        except FileNotFoundError:
            pass
        except OSError:
            # Someone else's side file we may not write: flock needs only a read descriptor.
            return os.open(path, os.O_RDONLY | flags), False
        try:
            return create_new_file(path, mode_of(mode_like)), True
        except FileExistsError:
            continue  # another opener created it in between: open theirs


def _close_all(fds: _Descriptions) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _still_current(fds: _Descriptions) -> bool:
    # Only a closing store removes the files, and only while holding both the gate and the
    # lock: while we hold the lock (the gate was let go of a moment ago, but nobody can remove
    # it without the lock we hold), a file that still has a name is the current one. Two
    # fstat, no path lookup.
    try:
        return all(os.fstat(fd).st_nlink > 0 for fd in fds)
    except OSError:
        return False


def _same_file(fd: int, path: Path) -> bool:
    held, named = os.fstat(fd), os.stat(path)
    return (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino)


class _Unwanted(Exception):
    """Nobody waits for the lock any more (the caller gave up, or the queue was closed)."""


class _Restart(Exception):
    """The helper went through side files a closing store has removed: the caller opens the
    new ones and queues again."""


class _Claim:
    """One caller's wait, answered by the waiter's thread.

    ``answered`` is a plain lock, taken at creation and released by the thread once ``fd``
    or ``error`` is set: the caller wakes on it directly, where an ``Event`` would make it
    take the event's own lock again, which the answering thread may still be holding.
    ``gate`` is the caller's descriptor of the gate, open for as long as the claim stands.
    """

    __slots__ = ("answered", "error", "fd", "gate")

    def __init__(self, gate: int) -> None:
        self.answered = threading.Lock()
        self.answered.acquire()
        self.gate = gate
        self.fd: int | None = None
        self.error: OSError | QueueClosed | _Restart | None = None

    def answer(self) -> None:
        self.answered.release()


class _Waiter:
    """One long-lived thread per queue that blocks in ``flock`` (gate, then lock) for callers
    that may stop waiting.

    Starting a thread per wait cost 140 us of wall time and 160 us of CPU, paid at almost
    every append while several processes write (six writers: 85 % of the waits contended), on
    a machine whose other core is busy with the holder's transaction. This thread is started
    at the first contended wait and from then on only woken.

    It goes through the caller's own gate: the same open file description (a duplicate of its
    descriptor, taken while the claim stands), so a gate the caller already holds lets it
    straight through, and the caller keeps its place at the gate across the hand-over (were
    the caller to let go of the gate for the thread to take it, the releaser could pass in the
    moment the thread takes to wake; ``scripts/fork_wait.py`` did not tell the two apart, its
    counts lag the parent's lock by the parent's wait for the interpreter). It
    waits for the lock on an open file description of its own, opened once: the lock it waits
    for is then not "already ours" through the queue's shared descriptor. A caller whose budget
    runs out withdraws its claim; when the thread then obtains the gate it lets go of it
    without queueing for the lock, and when it obtains the lock it passes it straight on,
    unless a newer caller has claimed the wait meanwhile, who then gets it. It never waits
    again while the lock it handed over is held (its description would lock at once).
    """

    def __init__(self, lock: Path, mode_like: Path | None) -> None:
        self._lock = lock
        self._mode_like = mode_like
        self._changed = threading.Condition(threading.Lock())
        self._claim: _Claim | None = None
        self._fd: int | None = None
        self._gate: int | None = None
        """The thread's duplicate of the gate descriptor it is going through now."""
        self._handed_over = False
        self._stopping = False
        self._interrupted = False
        self._thread: threading.Thread | None = None

    @property
    def stopped(self) -> bool:
        return self._stopping

    def owns(self, fd: int) -> bool:
        return fd == self._fd

    def wait(self, timeout_s: float, gate: int) -> int:
        """The lock, held through this waiter's description, within ``timeout_s``, entered
        through ``gate`` (the caller's descriptor of the gate, which the caller may hold).

        Raises :class:`QueueTimeout` when it does not come in time, :class:`OSError` when
        the side file cannot be opened or locked here, :class:`QueueClosed` when the store
        closes meanwhile (:meth:`interrupt`), :class:`_Restart` when the side files were
        replaced.
        """
        claim = _Claim(gate)
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
        for fd in (self._fd, self._gate):
            if fd is not None:
                # The child's copies: closing them releases nothing the parent holds or awaits
                # (kept open, a gate held by a parent that dies would stay held by the child).
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
                claim = self._claim
                if claim is None:
                    continue
                try:
                    # Its own descriptor of the caller's gate: the caller's may be closed once
                    # the claim is withdrawn, the description is the same.
                    gate = self._gate = os.dup(claim.gate)
                except OSError as exc:
                    self._fail(exc)
                    return
            try:
                fd = self._lock_current(gate)
            except _Unwanted:
                continue
            except _Restart as restart:
                with self._changed:
                    self._answer_error(restart)
                continue
            except OSError as exc:
                with self._changed:
                    self._fail(exc)
                return
            finally:
                with self._changed:
                    self._gate = None
                    os.close(gate)
            with self._changed:
                claim, self._claim = self._claim, None
                if claim is None or self._stopping:
                    # The caller gave up (or the store closed): pass the turn on at once.
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    continue
                self._handed_over = True
                claim.fd = fd
                claim.answer()

    def _answer_error(self, error: OSError | _Restart) -> None:
        # With ``_changed`` held.
        claim, self._claim = self._claim, None
        if claim is not None:
            claim.error = error
            claim.answer()

    def _fail(self, exc: OSError) -> None:
        # With ``_changed`` held: the side file cannot be had here; the thread ends.
        self._answer_error(exc)
        self._thread = None
        self._close_description()

    def _lock_current(self, gate: int) -> int:
        """Block until this thread's description of the *current* lock holds it, having come
        through ``gate``.

        Raises :class:`_Unwanted` rather than create the side file again that nobody waits for
        (a closing store may just have removed it, and it would be left behind), or queue for
        the lock for nobody; :class:`_Restart` when a closing store removed the files meanwhile.
        """
        fd = self._fd
        if fd is None:
            if self._unwanted():
                raise _Unwanted
            fd, _ = _open_description(self._lock, self._mode_like)
            with self._changed:
                self._fd = fd
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            if self._unwanted():
                # Given up while this thread waited at the gate: stand aside.
                raise _Unwanted
            fcntl.flock(fd, fcntl.LOCK_EX)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
        if _still_current((gate, fd)):
            return fd
        fcntl.flock(fd, fcntl.LOCK_UN)
        with self._changed:
            self._close_description()
        raise _Restart

    def _unwanted(self) -> bool:
        with self._changed:
            return self._stopping or self._claim is None

    def _close_description(self) -> None:
        # With ``_changed`` held, and only when no thread waits on it and no holder uses it.
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
