"""Retry a whole unit of work when the database says it is busy.

SQLite's own busy handler backs off on a fixed schedule, so writers that collide keep colliding
(a convoy); a short busy timeout plus a random 20-150 ms sleep here spreads them out. The loop
stops at an attempt count *and* a wall-clock budget, whichever comes first, and then raises one
typed :class:`~sessionstore.errors.StoreBusyError`.
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
    repeats half of one. Any other error propagates at once. ``started`` (a ``clock`` reading)
    is when the budget began, if earlier than now: time spent queueing counts against it.
    """
    if started is None:
        started = clock()
    last_error: BaseException | None = None
    for attempt_number in range(1, policy.max_attempts + 1):
        try:
            return attempt()
        except Exception as exc:
            if not is_retryable(exc):
                raise
            last_error = exc
        elapsed = clock() - started
        pause = jitter(policy.min_sleep_s, policy.max_sleep_s)
        if attempt_number == policy.max_attempts or elapsed + pause > policy.budget_s:
            break
        logger.debug("store busy (attempt %d), retrying in %.0f ms", attempt_number, pause * 1e3)
        sleep(pause)
    raise StoreBusyError(attempt_number, clock() - started, last_error) from last_error
