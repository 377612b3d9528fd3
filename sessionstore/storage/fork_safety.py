"""``fork()`` with stores open: the child abandons what it inherited, and never hangs.

A forked child holds copies of its parent's connections, and on SQLite also a copy of SQLite's
per-process lock bookkeeping, but none of the parent's file locks (POSIX locks belong to a
process), and none of its threads. Two things follow.

**SQLite's mutexes.** SQLite runs inside this process and keeps global mutexes (its memory
allocator's, its file-lock table's, each connection's and each shared-memory node's). A parent
thread that was inside SQLite at the moment of the fork holds one in the child too, and no
thread of the child will ever release it: *any* SQLite call there (closing a connection
included) may then block for ever. So:

- **The child's at-fork work calls no SQLite and takes no lock another thread may hold.** It
  replaces the package's thread locks, gives every engine a new, empty pool and *abandons*
  what it inherited: the connections, the old pools, the stores' kept connections go to
  :func:`abandon`, a list kept for the child's lifetime (never finalized: a collected pool
  connection would be rolled back, i.e. used; a PostgreSQL socket the parent still talks over
  is never spoken on or closed). A child that never uses a store never touches SQLite.
- **A fork waits for the threads inside SQLite.** Work of this package inside an in-process
  database (each transaction attempt of a SQLite store, its checkpoints, opening and closing)
  runs inside :func:`inside`. A hook run in the parent just before the fork (``os.fork`` runs
  it, ``multiprocessing``'s fork start method included) lets no new such work start, waits
  until the work in progress has left (at most :data:`FORK_WAIT_S`), forks, and lets it go on.
  Waits *between* attempts (the writers' queue, the retry's back-off) are not inside SQLite
  and hold nobody up. A fork is then *quiet*: no thread of the package was inside SQLite.

**SQLite's lock bookkeeping.** While an inherited connection stays open in the child, SQLite
believes the child already holds that file's locks, so the child's own connections never take
real ones; another process closing then checkpoints and deletes a WAL the child is still
writing, and acknowledged writes vanish. So the child's first connection to any SQLite store
first *settles* what was inherited (:meth:`ForkChild.settle`): after a quiet fork the inherited
connections are closed through SQLite (which is safe then, and releases nothing of the
parent's), except one left inside a transaction (closing it could undo a parent's transaction
in the shared WAL index: it stays abandoned and a warning says so). After a fork that was not
quiet (a thread stayed inside SQLite for :data:`FORK_WAIT_S`: a long export, say), the child
refuses to use SQLite stores with a typed error instead of risking a hang.

Every engine, store and writers' queue the package creates is tracked here (weakly: tracking
never keeps an object alive). What an engine's reset does is its dialect's to say (the reset
``install_listeners`` hands back, registered by :func:`~.engine.create_store_engine`).

What is not covered: SQLite used in the parent outside this package's calls at the moment of a
fork (Hermes code running statements on ``_conn`` itself, another library's SQLite file): a
child that then opens a SQLite store may block in SQLite. Such code forks safely with the
``spawn`` or ``forkserver`` start methods.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Callable
from types import TracebackType
from typing import Any, Protocol

from sqlalchemy.engine import Engine

logger = logging.getLogger(__name__)

FORK_WAIT_S = 10.0
"""Longest a fork waits for the package's work inside SQLite to leave it (one transaction
attempt, normally milliseconds; a streaming read such as an export holds it throughout)."""


class ForkAware(Protocol):
    def after_fork_in_child(self) -> None:
        """Forget what the parent process owned; called in the child, before any other use.
        Must call no SQLite and take no lock a parent thread may have held."""


class ForkChild:
    """What a forked child's resets are given: where to abandon what they inherited, whether
    the fork was quiet, and what to do at the first use of a database in the child."""

    def __init__(self, *, quiet: bool) -> None:
        self.quiet = quiet
        """True when no thread of the parent was inside SQLite through this package at the
        fork: SQLite may then be called in the child."""
        self._deferred: list[Callable[[], None]] = []
        self._settling = threading.Lock()

    def abandon(self, obj: Any) -> None:
        """Keep ``obj`` alive, unused and never finalized, for the rest of this process."""
        abandon(obj)

    def defer(self, release: Callable[[], None]) -> None:
        """Run ``release`` at the child's first use of an in-process database (before it
        connects), not now: SQLite must not be called from the at-fork hook."""
        self._deferred.append(release)

    def inherit(self, parent: ForkChild) -> None:
        """Take over what the fork that made this process's parent left unsettled."""
        self._deferred[:0] = parent._deferred

    def settle(self) -> None:
        """Run what was deferred, once; called by a dialect before the child's first
        connection. A release that raises stays pending and raises again next time."""
        if not self._deferred:
            return
        with self._settling:
            while self._deferred:
                self._deferred[0]()
                self._deferred.pop(0)


_objects: weakref.WeakSet[ForkAware] = weakref.WeakSet()
EngineReset = Callable[[Engine, ForkChild], None]
"""An engine's after-fork reset: called in the child with the engine and the fork's
:class:`ForkChild`."""
_engines: weakref.WeakKeyDictionary[Engine, EngineReset] = weakref.WeakKeyDictionary()
# What a child must neither use nor let be finalized: kept for the process's lifetime. The
# list itself is given an extra reference before the first fork (``_keep_forever``), so not
# even the interpreter's shutdown frees it in a child that exits normally.
_abandoned: list[Any] = []
_immortal = False
_guard = threading.Lock()
_hook_installed = False
_child: ForkChild | None = None


def track(obj: ForkAware) -> None:
    """Reset ``obj`` (a store, a writers' queue) in every child forked while it is alive."""
    with _guard:
        _objects.add(obj)
        _install_hook()


def track_engine(engine: Engine, reset: EngineReset) -> None:
    """Call ``reset(engine, child)`` in every child forked while ``engine`` is alive."""
    with _guard:
        _engines[engine] = reset
        _install_hook()


def abandon(obj: Any) -> None:
    """Keep an inherited handle alive, unused, for the rest of this (child) process."""
    _abandoned.append(obj)


def forked_child() -> ForkChild | None:
    """The :class:`ForkChild` of the fork that made this process, None in an unforked one."""
    return _child


# -- the fork gate -------------------------------------------------------------------------------
class _Gate:
    """How many threads are inside an in-process database now, and how many forks wait.

    ``lock`` is a plain lock taken directly on the hot path (an attempt's entry and exit);
    ``changed`` is a condition over the same lock, used only while a fork is under way."""

    __slots__ = ("changed", "forking", "inside", "lock")

    def __init__(self, inside: int = 0) -> None:
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.inside = inside
        self.forking = 0


_gate = _Gate()
_depth = threading.local()  # this thread's nesting of ``inside()`` (kept across a fork)


class _Inside:
    """The context manager :func:`inside` returns (one shared instance: it keeps no state)."""

    __slots__ = ()

    def __enter__(self) -> None:
        depth = getattr(_depth, "n", 0)
        if depth == 0:
            gate = _gate
            gate.lock.acquire()
            try:
                while gate.forking:
                    gate.changed.wait()
                gate.inside += 1
            finally:
                gate.lock.release()
        _depth.n = depth + 1

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        depth = _depth.n - 1
        _depth.n = depth
        if depth == 0:
            gate = _gate
            gate.lock.acquire()
            try:
                gate.inside -= 1
                if gate.forking and not gate.inside:
                    gate.changed.notify_all()
            finally:
                gate.lock.release()


_INSIDE = _Inside()


def inside() -> _Inside:
    """``with inside():`` around work of this package inside an in-process database (SQLite):
    a fork waits for it to end, and none starts while a fork is under way. Re-entrant."""
    return _INSIDE


_fork_state = threading.local()  # the forking thread's view of its fork (quiet or not)


def _before_fork() -> None:
    """In the parent, just before ``fork()``: close the gate and wait for those inside."""
    _keep_forever()
    gate = _gate
    mine = 1 if getattr(_depth, "n", 0) else 0  # a fork from inside: never wait for oneself
    with gate.changed:
        gate.forking += 1
        quiet = gate.changed.wait_for(lambda: gate.inside <= mine, timeout=FORK_WAIT_S)
        busy = gate.inside - mine
    _fork_state.quiet = quiet
    if not quiet:
        logger.warning(
            "forking while %d thread(s) stayed inside a SQLite store for %.0f s: the child "
            "cannot use SQLite stores (it would risk blocking on a lock of SQLite's that "
            "one of them held); it can do anything else",
            busy,
            FORK_WAIT_S,
        )


def _after_fork_in_parent() -> None:
    gate = _gate
    with gate.changed:
        gate.forking -= 1
        gate.changed.notify_all()


def _keep_forever() -> None:
    """Give the list of abandoned handles a reference nobody releases (once, in the parent)."""
    global _immortal
    if _immortal:
        return
    _immortal = True
    try:
        import ctypes

        ctypes.pythonapi.Py_IncRef(ctypes.py_object(_abandoned))
    except Exception:  # pragma: no cover - not CPython: the list lives as long as the module
        logger.debug("could not pin the abandoned handles", exc_info=True)


def _install_hook() -> None:
    global _hook_installed
    if not _hook_installed and hasattr(os, "register_at_fork"):
        # Installed on first use, not at import: importing the package changes nothing.
        os.register_at_fork(
            before=_before_fork,
            after_in_parent=_after_fork_in_parent,
            after_in_child=_reset_in_child,
        )
        _hook_installed = True


def _reset_in_child() -> None:
    global _guard, _gate, _child
    # Parent threads that held these at fork time do not exist here.
    _guard = threading.Lock()
    _gate = _Gate(inside=1 if getattr(_depth, "n", 0) else 0)
    # A child of a child: what its parent inherited and never settled is this one's to settle
    # too, and a lock SQLite held at an earlier fork that was not quiet is held here as well.
    parent = _child
    quiet = getattr(_fork_state, "quiet", True) and (parent is None or parent.quiet)
    child = _child = ForkChild(quiet=quiet)
    if parent is not None:
        child.inherit(parent)
    # Stores first: an idle writer connection a store kept is abandoned by the store, and the
    # engine's reset then finds its driver connection among those it inherited.
    for obj in list(_objects):
        try:
            obj.after_fork_in_child()
        except Exception:  # a hook must never kill the child it runs in
            logger.warning("could not reset %r after fork", obj, exc_info=True)
    for engine, reset in list(_engines.items()):
        try:
            reset(engine, child)
        except Exception:
            logger.warning("could not reset %r after fork", engine, exc_info=True)
