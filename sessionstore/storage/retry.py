"""Retry a whole unit of work when the database says it is busy: the one retry rule.

SQLite's own busy handler backs off on a fixed schedule, so writers that collide keep colliding
(a convoy); a short busy timeout plus a random 20-150 ms sleep here spreads them out. The loop
stops at an attempt count *and* a wall-clock budget, whichever comes first, and then raises one
typed :class:`~sessionstore.errors.StoreBusyError`.

The rule (what counts as an attempt, the jitter, when attempts or budget are spent, the error
then) is :class:`RetryLoop`'s alone. Two drivers run it: :func:`run_with_retry` sleeps in
``time.sleep`` (the sync store, migrations, Hermes's ``_execute_write``), and
:class:`~.async_store.AsyncStore` awaits ``asyncio.sleep`` in the event loop.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from ..errors import StoreBusyError

T = TypeVar("T")

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RetryPolicy:
    """How long a write may keep trying to get the lock.

    The defaults are Hermes's (15 attempts, 20-150 ms jitter); the budget bounds the total wait,
    busy timeouts included, so a stuck lock never freezes a caller for longer than ``budget_s``.
    """

    max_attempts: int = 15
    min_sleep_s: float = 0.020
    max_sleep_s: float = 0.150
    budget_s: float = 20.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if not 0 <= self.min_sleep_s <= self.max_sleep_s:
            raise ValueError("need 0 <= min_sleep_s <= max_sleep_s")
        if self.budget_s <= 0:
            raise ValueError("budget_s must be positive")


QUEUED_MAX_SLEEP_S = 0.005
"""Sleep between attempts while at the head of the writers' queue. The jitter exists to spread
this package's writers apart; in the queue only a foreign program competes, and a short sleep
catches its release sooner."""


def queued_jitter(low: float, high: float) -> float:
    """The jitter of a writer at the head of the writers' queue: at most
    :data:`QUEUED_MAX_SLEEP_S`."""
    return random.uniform(min(low, QUEUED_MAX_SLEEP_S), min(high, QUEUED_MAX_SLEEP_S))


class RetryLoop:
    """One call's retry bookkeeping: attempts and budget counted, the pause drawn, the typed
    error when they are spent. Whoever drives it runs the attempts and sleeps the pauses.

    ``started`` (a ``clock`` reading) is when the budget began, if earlier than now: time spent
    queueing counts against it.
    """

    __slots__ = ("attempts", "clock", "jitter", "last_error", "policy", "started")

    def __init__(
        self,
        policy: RetryPolicy,
        *,
        clock: Callable[[], float] = time.monotonic,
        jitter: Callable[[float, float], float] = random.uniform,
        started: float | None = None,
    ) -> None:
        self.policy = policy
        self.clock = clock
        self.jitter = jitter
        self.started = clock() if started is None else started
        self.attempts = 0
        self.last_error: BaseException | None = None

    def pause_after(self, error: BaseException) -> float | None:
        """Count a failed attempt whose ``error`` is retryable: the pause before the next
        one, or None when the attempts or the budget (the pause included) are spent."""
        self.attempts += 1
        self.last_error = error
        elapsed = self.clock() - self.started
        pause = self.jitter(self.policy.min_sleep_s, self.policy.max_sleep_s)
        if self.attempts >= self.policy.max_attempts or elapsed + pause > self.policy.budget_s:
            return None
        logger.debug("store busy (attempt %d), retrying in %.0f ms", self.attempts, pause * 1e3)
        return pause

    def exhausted(self) -> StoreBusyError:
        """The error to raise once :meth:`pause_after` said the loop is spent."""
        return StoreBusyError(self.attempts, self.clock() - self.started, self.last_error)


def run_with_retry(
    attempt: Callable[[], T],
    is_retryable: Callable[[BaseException], bool],
    policy: RetryPolicy = RetryPolicy(),
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    jitter: Callable[[float, float], float] = random.uniform,
    started: float | None = None,
) -> T:
    """Call ``attempt`` until it succeeds, retrying only errors ``is_retryable`` accepts.

    ``attempt`` must be a whole transaction (its own BEGIN and COMMIT), so a retry never
    repeats half of one. Any other error propagates at once. ``started``: see
    :class:`RetryLoop`.
    """
    if started is None:
        started = clock()
    try:
        return attempt()  # the usual case: no loop to keep (a read costs one object less)
    except Exception as exc:
        if not is_retryable(exc):
            raise
        failed: Exception = exc
    loop = RetryLoop(policy, clock=clock, jitter=jitter, started=started)
    while True:
        pause = loop.pause_after(failed)
        if pause is None:
            raise loop.exhausted() from loop.last_error
        sleep(pause)
        try:
            return attempt()
        except Exception as exc:
            if not is_retryable(exc):
                raise
            failed = exc
