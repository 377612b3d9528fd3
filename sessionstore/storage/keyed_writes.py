"""Writes made under a caller's idempotency key: each key's write runs at most once, and its
result can be looked up afterwards.

Why: a write whose caller was cancelled (or timed out) while its transaction ran may have
committed (:mod:`.async_store` waits for that transaction to end, so the outcome is final by
the time the cancellation propagates, but the cancelled caller gets no result). A caller that
names the write with a key learns the outcome from :meth:`KeyedWrites.committed`, and a retry
under the same key returns the first write's result instead of writing again.

What it is not: a record in the database. The results are remembered by this object in this
process, for the :data:`REMEMBERED_KEYS` most recent keys; another process, a restart, or a key
that has dropped out is not recognised (a schema change would be needed for that, and Hermes's
tables are not ours to change). That covers the case it exists for: a cancelled call, and its
retry by the same program moments later.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

REMEMBERED_KEYS = 10_000
"""Keys whose results are kept (the most recent ones): far more turns than a gateway has in
flight or retries within a few seconds, at about 200 bytes each."""
STRIPES = 64
"""Locks that keep two writes of one key from running at once: a key's write holds the lock of
its stripe (``hash(key) % STRIPES``) while it runs, in its worker thread, never in the loop."""


@dataclass(frozen=True)
class Committed:
    """A keyed write that committed, and what it returned."""

    result: Any


class KeyedWrites:
    """The results of the keyed writes of one store, and the locks that run each key once."""

    def __init__(self, capacity: int = REMEMBERED_KEYS) -> None:
        self._capacity = capacity
        self._results: OrderedDict[Hashable, Committed] = OrderedDict()
        self._renew_locks()

    def _renew_locks(self) -> None:
        self._lock = threading.Lock()  # held for dict operations only, never around I/O
        self._stripes = tuple(threading.Lock() for _ in range(STRIPES))

    def committed(self, key: Hashable) -> Committed | None:
        """The write made under ``key`` if it committed (and is still remembered), else None.

        Asked once the write's call has returned (also by cancellation), the answer is final:
        None means it did not commit and never will."""
        with self._lock:
            return self._results.get(key)

    def run_once(self, key: Hashable, work: Callable[[], T]) -> T:
        """``work()`` (one transaction attempt, in a worker thread), unless a write under
        ``key`` already committed: then that write's result. Two attempts under one key never
        run at once: the second waits here, then finds the first one's result, or runs if the
        first did not commit."""
        with self._stripes[hash(key) % STRIPES]:
            found = self.committed(key)
            if found is not None:
                result: T = found.result
                return result
            result = work()
            # Remembered before anything else can happen to this thread: the attempt has
            # committed, and whoever asks from now on must hear so.
            with self._lock:
                self._results[key] = Committed(result)
                self._results.move_to_end(key)
                while len(self._results) > self._capacity:
                    self._results.popitem(last=False)
            return result

    def after_fork_in_child(self) -> None:
        """A parent thread may have held a lock at the fork: the child gets its own. What
        committed stays true in the child (same database), so the results are kept."""
        self._renew_locks()
