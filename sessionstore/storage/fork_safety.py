"""After ``fork()``, the child lets go of every database handle it inherited, before any use.

A forked child holds copies of its parent's connections, and on SQLite also a copy of SQLite's
per-process lock bookkeeping, but none of the parent's file locks (POSIX locks belong to a
process). While an inherited connection stays open in the child, SQLite believes the child
already holds the locks, so the child's new connections never take real ones: another process
closing then checkpoints and deletes a WAL the child is still writing, and acknowledged writes
vanish. SQLite's rule is that the child must not use inherited connections.

So every engine and :class:`~.store.Store` the package creates is tracked here (a
``WeakSet``: tracking never keeps an object alive), and one ``os.register_at_fork`` hook, run
in the child right after the fork, asks each to drop what it inherited. What that means for an
engine's connections is its dialect's to say (the reset ``install_listeners`` hands back, which
:func:`~.engine.create_store_engine` registers here); the handles a reset must neither use nor
let be finalized are kept by :func:`abandon`. SQLite connections are
closed through SQLite (its bookkeeping forgets the copies, the child's later connections take
real locks; closing in the child never releases a lock of the parent's), PostgreSQL sockets are
abandoned without a word on the wire (the parent still talks over them), thread locks that some
parent thread held are replaced. Both processes then go on using the store.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any, Protocol

from sqlalchemy.engine import Engine

logger = logging.getLogger(__name__)


class ForkAware(Protocol):
    def after_fork_in_child(self) -> None:
        """Forget what the parent process owned; called in the child, before any other use."""


_objects: weakref.WeakSet[ForkAware] = weakref.WeakSet()
EngineReset = Callable[[Engine, Callable[[Any], None]], None]
"""An engine's after-fork reset: called with the engine and :func:`abandon`."""
_engines: weakref.WeakKeyDictionary[Engine, EngineReset] = weakref.WeakKeyDictionary()
# What a child must neither use nor let the garbage collector finalize (a collected pool
# connection would be rolled back, i.e. used): kept for the child's lifetime.
_abandoned: list[Any] = []
_guard = threading.Lock()
_hook_installed = False


def track(obj: ForkAware) -> None:
    """Reset ``obj`` (a store, a writers' queue) in every child forked while it is alive."""
    with _guard:
        _objects.add(obj)
        _install_hook()


def track_engine(engine: Engine, reset: EngineReset) -> None:
    """Call ``reset(engine, abandon)`` in every child forked while ``engine`` is alive."""
    with _guard:
        _engines[engine] = reset
        _install_hook()


def abandon(obj: Any) -> None:
    """Keep an inherited handle alive, unused, for the rest of this (child) process."""
    _abandoned.append(obj)


def _install_hook() -> None:
    global _hook_installed
    if not _hook_installed and hasattr(os, "register_at_fork"):
        # Installed on first use, not at import: importing the package changes nothing.
        os.register_at_fork(after_in_child=_reset_in_child)
        _hook_installed = True


def _reset_in_child() -> None:
    global _guard
    # The parent thread that held the guard at fork time does not exist here.
    _guard = threading.Lock()
    # Stores first: an idle writer connection a store kept is released by the store, so the
    # engine's reset then finds it closed rather than in use.
    for obj in list(_objects):
        try:
            obj.after_fork_in_child()
        except Exception:  # a hook must never kill the child it runs in
            logger.warning("could not reset %r after fork", obj, exc_info=True)
    for engine, reset in list(_engines.items()):
        try:
            reset(engine, abandon)
        except Exception:
            logger.warning("could not reset %r after fork", engine, exc_info=True)
