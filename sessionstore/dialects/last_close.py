"""Closes of a WAL store's connections take turns, so that once every user has closed, the
store is one file again.

SQLite's rule
-------------
A connection to a WAL database removes ``-wal`` and ``-shm`` when it closes *last*: at its
close it tries, without waiting, for an exclusive lock on the database file; every connection
that has read the file holds a shared lock on it until it closes, so the exclusive lock comes
only to a connection that is alone, which then checkpoints the log into the file and deletes
both. A close that is not last leaves them to the one that is. Within one process SQLite
counts its own connections the same way (another of the process's connections that has read
the file makes a close not last).

The race
--------
Two connections that close at the same moment can each try while the other still holds its
shared lock (a close holds it for microseconds after its try): both find themselves not last,
both go, and ``-wal``/``-shm`` stay beside the file with nobody left to remove them (eight
``db upgrade`` runs ending together, ``tests/schema/test_concurrent_adoption.py``: now and then
under load; two processes closing within microseconds of each other: about one time in ten,
``tests/dialects/test_last_close.py``). Nothing is lost (the log holds committed data, and the
next opener uses it), but a closed store is no longer one file.

The turn
--------
So every close of a connection to a WAL file (``-wal`` or ``-shm`` beside it) is made while
holding an exclusive ``flock`` on the file's *directory*, asked for without blocking and polled
(0.5 ms, doubling to 16 ms) for at most :data:`TURN_WAIT_S`. A connection waiting for its turn
still holds its shared lock, so the close that has the turn is not last and ends at once (no
checkpoint); when the waiter's turn comes, every close before it has finished and let go. The
closes are in one order, so the close that lets go of the last shared lock comes after all
the others have let go of theirs: it is last, and removes the files. Concurrent closes
converge to one file whatever the timing. A retry after a pause (one more connection opened
and closed a little later) would only make the collision rarer, as two retries can collide
just the same, and would cost a pause and a connection whenever the store is simply still open
elsewhere.

Every close, not only a process's last: a connection that never read the file holds no shared
lock and does not try at its close, so when a process's last connection to close is one of
those, the close that decided was an earlier one, and Python cannot tell which connections
have read.

- **Cost.** Two ``stat`` calls, and a directory opened, locked and closed around the close:
  about 30 us (on two shared cores at a load of 6); no pause, no extra connection, also when
  the store stays open elsewhere (a gateway running while ``sessionstore`` commands come and
  go). A close waits only while another close in the same directory holds the turn:
  microseconds, since the waiter's own shared lock keeps that close from checkpointing (unless
  the waiter never read the file: then it may wait out a last close's checkpoint of the log, at
  most ``journal_size_limit``). Connections of a pool live long; their closes are rare.
- **Never stuck.** The holder waits for nobody: SQLite's close never waits for a lock. A close
  whose turn does not come within :data:`TURN_WAIT_S` (a holder stopped with Ctrl-Z in the
  middle of its close, a foreign program locking the directory) closes without it, as before;
  so does a close where the directory cannot be opened or locked (no ``flock``: Windows, some
  network filesystems).
- **Why the directory.** Nothing is created or removed: no side file to name, to make as
  private as the store, to clean up, or to leave behind when a process is killed mid-close;
  read-only directories and media work alike; and no store file is opened from Python
  (``dialects/sqlite.py``'s file rule). Stores that share a directory share the turn, which
  costs each the microseconds of the others' closes.

Which closes
------------
Every connection of the store's SQLite library (:func:`.sqlite_library.connect` and the
engines' pools) to a file, when ``-wal`` or ``-shm`` is there at its close: a rollback-journal
store (``journal_mode=delete``) never waits, nor does an in-memory database or an ``immutable=1``
one (no locks at all). A read-only connection (``mode=ro``) takes its turn too, which creates and
removes nothing: a writable close waiting behind it is then last. It cannot remove the files
itself, so a read-only connection that closes after the last writable one leaves them, as it
always has, unless its owner lets a writable close follow it
(:meth:`.sqlite.SQLiteDialect.release_log_files`: ``Store.open(read_only=True)`` for the files
it made, ``db upgrade`` and ``db downgrade`` after their read-only look, which is their last
use of the file when there is nothing to do). Not covered: a connection never closed (its
process killed, or its object dropped and collected, whose close is the driver's own and takes
no turn).

A connection a forked child inherited is closed there without a turn: the child holds none of
its file locks (POSIX locks belong to a process), and its close changes nothing of the file's
(:func:`.sqlite.close_inherited`). The parent lets go of a turn with ``LOCK_UN`` before closing
its descriptor, so a child forked in the middle of it, which shares the open description, never
holds it on; the child closes its copy at once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no flock, closes take no turn
    fcntl = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

TURN_WAIT_S = 1.0
"""Longest a close waits for other closes to finish (normally microseconds)."""
_FIRST_PAUSE_S = 0.0005
_LONGEST_PAUSE_S = 0.016
_LOG_SUFFIXES = ("-wal", "-shm")


class Ticket:
    """What a connection to a file carries to its close: the file, and the process that
    opened it."""

    __slots__ = ("path", "pid")

    def __init__(self, path: Path) -> None:
        self.path = path
        self.pid = os.getpid()


_descriptors: set[int] = set()
"""Directory descriptors open for a turn right now (a forked child closes its copies)."""


def ticket(path: Path | None) -> Ticket | None:
    """The ticket of a connection just opened on ``path`` (None: no file, or ``immutable``),
    for :func:`close`."""
    if fcntl is None or path is None:
        return None
    return Ticket(Path(os.path.abspath(path)))  # its close may come after a chdir


def close(ticket: Ticket | None, close_now: Callable[[], None]) -> None:
    """Close a connection with ``close_now`` (the driver's own close), in turn when its file is
    in WAL (module docstring)."""
    if ticket is None or ticket.pid != os.getpid() or not _log_files_exist(ticket.path):
        # Inherited through a fork: the child holds none of its locks.
        close_now()
        return
    with _turn(ticket.path.parent):
        close_now()


def _log_files_exist(path: Path) -> bool:
    return any(os.path.lexists(f"{path}{suffix}") for suffix in _LOG_SUFFIXES)


@contextlib.contextmanager
def _turn(directory: Path) -> Iterator[None]:
    """Hold the turn of the stores in ``directory`` (at most :data:`TURN_WAIT_S` of waiting;
    without it when it cannot be had)."""
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(directory, flags)
    except OSError:
        fd = -1
    if fd < 0:
        yield  # closed as before, without a turn
        return
    _descriptors.add(fd)
    held = False
    try:
        held = _wait_for_turn(fd, directory)
        yield
    finally:
        if held:
            # Explicitly: a child forked meanwhile shares this open description, and closing
            # our descriptor alone would leave the turn held for as long as the child lives.
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
        _descriptors.discard(fd)
        os.close(fd)


def _wait_for_turn(fd: int, directory: Path) -> bool:
    deadline = time.monotonic() + TURN_WAIT_S
    pause = _FIRST_PAUSE_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            pass
        except OSError:
            return False  # no flock on this filesystem: closed as before, without a turn
        left = deadline - time.monotonic()
        if left <= 0:
            logger.debug("closing a connection to a store in %s without its turn: other closes "
                         "held it for %.1f s", directory, TURN_WAIT_S)  # fmt: skip
            return False
        time.sleep(min(pause, left))
        pause = min(pause * 2, _LONGEST_PAUSE_S)


def _after_fork_in_child() -> None:
    # The turns the parent's threads hold are the parent's (released by it explicitly); the
    # child's copies of their descriptors are merely closed.
    for fd in list(_descriptors):
        with contextlib.suppress(OSError):
            os.close(fd)
    _descriptors.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
