"""run_with_retry and RetryPolicy, driven by a fake clock: no real sleeping, no database.

The database-backed behaviour (a real lock held by another connection) is in test_engine.py;
here every branch of the loop is pinned down exactly: what is retried, how long it sleeps, and
where it stops.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionstore.errors import SessionStoreError, StoreBusyError
from sessionstore.storage.retry import RetryPolicy, run_with_retry


class Busy(Exception):
    """Stands in for a driver's "database is locked"."""


class Broken(Exception):
    """Stands in for any error that is not about locking (a constraint, a typo in SQL)."""


def only_busy_is_retryable(exc: BaseException) -> bool:
    return isinstance(exc, Busy)


@dataclass
class FakeTime:
    """A monotonic clock that moves only when slept on or when an attempt takes time."""

    now: float = 1000.0
    sleeps: list[float] = field(default_factory=list)

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@dataclass
class ScriptedAttempt:
    """An attempt that raises the scripted errors in order, then returns ``result``.

    Each call also costs ``cost_s`` of fake time, as a real attempt spends its busy timeout.
    """

    time: FakeTime
    errors: Sequence[BaseException]
    cost_s: float = 0.0
    result: str = "committed"
    calls: int = 0

    def __call__(self) -> str:
        self.calls += 1
        self.time.now += self.cost_s
        if self.calls <= len(self.errors):
            raise self.errors[self.calls - 1]
        return self.result


def fixed_jitter(value: float) -> Callable[[float, float], float]:
    return lambda _low, _high: value


def test_first_success_returns_at_once_without_sleeping() -> None:
    time = FakeTime()
    attempt = ScriptedAttempt(time, errors=[])

    result = run_with_retry(attempt, only_busy_is_retryable, sleep=time.sleep, clock=time.clock)

    assert result == "committed"
    assert attempt.calls == 1
    assert time.sleeps == []


def test_busy_errors_are_retried_until_an_attempt_succeeds() -> None:
    time = FakeTime()
    attempt = ScriptedAttempt(time, errors=[Busy(), Busy()])

    result = run_with_retry(
        attempt,
        only_busy_is_retryable,
        sleep=time.sleep,
        clock=time.clock,
        jitter=fixed_jitter(0.05),
    )

    assert result == "committed"
    assert attempt.calls == 3
    assert time.sleeps == [0.05, 0.05]


@pytest.mark.parametrize(
    "errors_before",
    [
        pytest.param([], id="first-attempt"),
        pytest.param([Busy()], id="after-one-busy"),
        pytest.param([Busy(), Busy(), Busy()], id="after-three-busy"),
    ],
)
def test_a_non_retryable_error_propagates_immediately_without_another_sleep(
    errors_before: list[BaseException],
) -> None:
    time = FakeTime()
    broken = Broken("NOT NULL constraint failed")
    attempt = ScriptedAttempt(time, errors=[*errors_before, broken, Busy()])

    with pytest.raises(Broken) as raised:
        run_with_retry(attempt, only_busy_is_retryable, sleep=time.sleep, clock=time.clock)

    assert raised.value is broken
    assert attempt.calls == len(errors_before) + 1
    assert len(time.sleeps) == len(errors_before)


def test_base_exceptions_such_as_keyboard_interrupt_are_never_retried() -> None:
    time = FakeTime()
    attempt = ScriptedAttempt(time, errors=[KeyboardInterrupt()])

    with pytest.raises(KeyboardInterrupt):
        run_with_retry(attempt, lambda _exc: True, sleep=time.sleep, clock=time.clock)

    assert attempt.calls == 1
    assert time.sleeps == []


@pytest.mark.parametrize("max_attempts", [1, 2, 4, 15])
def test_stops_after_max_attempts_with_a_busy_error(max_attempts: int) -> None:
    time = FakeTime()
    attempt = ScriptedAttempt(time, errors=[Busy()] * 100)
    policy = RetryPolicy(max_attempts=max_attempts, budget_s=1e6)

    with pytest.raises(StoreBusyError) as raised:
        run_with_retry(
            attempt,
            only_busy_is_retryable,
            policy,
            sleep=time.sleep,
            clock=time.clock,
            jitter=fixed_jitter(0.1),
        )

    assert attempt.calls == max_attempts
    # No pointless sleep after the last attempt.
    assert len(time.sleeps) == max_attempts - 1
    assert raised.value.attempts == max_attempts


def test_stops_at_the_time_budget_before_max_attempts() -> None:
    time = FakeTime()
    # Each attempt spends 0.3 s in the busy handler; each pause is 0.1 s. After attempt 1 the
    # clock reads 0.3 (+0.1 fits in 1.0), after attempt 2 it reads 0.7 (+0.1 fits), after
    # attempt 3 it reads 1.1: over budget, so the loop stops there.
    attempt = ScriptedAttempt(time, errors=[Busy()] * 100, cost_s=0.3)
    policy = RetryPolicy(max_attempts=15, budget_s=1.0)

    with pytest.raises(StoreBusyError) as raised:
        run_with_retry(
            attempt,
            only_busy_is_retryable,
            policy,
            sleep=time.sleep,
            clock=time.clock,
            jitter=fixed_jitter(0.1),
        )

    assert attempt.calls == 3
    assert time.sleeps == [0.1, 0.1]
    assert raised.value.attempts == 3
    assert raised.value.waited_s == pytest.approx(1.1)


def test_does_not_sleep_past_the_budget() -> None:
    time = FakeTime()
    # 0.45 s in, a 0.1 s pause would end at 0.55 s > 0.5 s: give up now rather than sleep.
    attempt = ScriptedAttempt(time, errors=[Busy()] * 100, cost_s=0.45)

    with pytest.raises(StoreBusyError):
        run_with_retry(
            attempt,
            only_busy_is_retryable,
            RetryPolicy(budget_s=0.5),
            sleep=time.sleep,
            clock=time.clock,
            jitter=fixed_jitter(0.1),
        )

    assert attempt.calls == 1
    assert time.sleeps == []


def test_busy_error_says_busy_names_the_wait_and_chains_the_last_driver_error() -> None:
    time = FakeTime()
    last = Busy("database is locked (third time)")
    attempt = ScriptedAttempt(time, errors=[Busy("first"), Busy("second"), last], cost_s=0.5)

    with pytest.raises(StoreBusyError) as raised:
        run_with_retry(
            attempt,
            only_busy_is_retryable,
            RetryPolicy(max_attempts=3),
            sleep=time.sleep,
            clock=time.clock,
            jitter=fixed_jitter(0.125),
        )

    error = raised.value
    assert isinstance(error, SessionStoreError)
    message = str(error)
    assert "busy" in message
    # 3 attempts x 0.5 s + 2 pauses x 0.125 s = 1.75 s of waiting, said in the message.
    assert error.waited_s == pytest.approx(1.75)
    assert "1.75s" in message
    assert "3 attempts" in message
    assert "third time" in message
    assert error.last_error is last
    assert error.__cause__ is last


def test_busy_error_shows_the_drivers_words_never_the_statement_or_its_parameters() -> None:
    """SQLAlchemy's wrapper prints the statement and its parameters (a message's text) and a
    link; the message a terminal or a log shows keeps the driver's first line only, and the
    whole error stays on ``last_error``."""
    import sqlalchemy.exc

    class DriverError(Exception):
        pass

    wrapped = sqlalchemy.exc.OperationalError(
        "INSERT INTO messages (content) VALUES (?)", ("SECRET user text",),
        DriverError("database is locked"),
    )  # fmt: skip
    assert "SECRET" in str(wrapped)  # what the message must not carry
    message = str(StoreBusyError(2, 1.0, wrapped))
    assert message.endswith("(last error: database is locked)")
    assert "SECRET" not in message and "INSERT" not in message and "sqlalche.me" not in message
    assert StoreBusyError(2, 1.0, wrapped).last_error is wrapped
    assert str(StoreBusyError(1, 0.5, DriverError("a\nb"))).endswith("(last error: a)")
    assert str(StoreBusyError(1, 0.5, DriverError())).endswith("(last error: DriverError)")


def test_jitter_is_drawn_between_the_policy_bounds() -> None:
    time = FakeTime()
    requested: list[tuple[float, float]] = []

    def recording_jitter(low: float, high: float) -> float:
        requested.append((low, high))
        return low

    attempt = ScriptedAttempt(time, errors=[Busy()] * 3)
    run_with_retry(
        attempt,
        only_busy_is_retryable,
        RetryPolicy(min_sleep_s=0.03, max_sleep_s=0.07),
        sleep=time.sleep,
        clock=time.clock,
        jitter=recording_jitter,
    )

    assert requested == [(0.03, 0.07)] * 3
    assert time.sleeps == [0.03] * 3


def test_default_jitter_sleeps_between_20_and_150_ms() -> None:
    time = FakeTime()
    attempt = ScriptedAttempt(time, errors=[Busy()] * 14)

    # The real random.uniform, only the sleeping is faked.
    run_with_retry(attempt, only_busy_is_retryable, sleep=time.sleep, clock=time.clock)

    assert attempt.calls == 15
    assert len(time.sleeps) == 14
    assert all(0.020 <= pause <= 0.150 for pause in time.sleeps)
    # Jitter, not a fixed back-off: the pauses are not all alike.
    assert len(set(time.sleeps)) > 1


def test_each_retry_calls_the_attempt_again_from_the_start() -> None:
    """The attempt is a whole transaction: a retry re-runs all of it, never just the tail."""
    time = FakeTime()
    journal: list[str] = []
    failures_left = [2]

    def transaction() -> list[str]:
        journal.append("BEGIN")
        journal.append("INSERT")
        if failures_left[0]:
            failures_left[0] -= 1
            journal.append("ROLLBACK")
            raise Busy()
        journal.append("COMMIT")
        return journal

    run_with_retry(transaction, only_busy_is_retryable, sleep=time.sleep, clock=time.clock)

    assert journal == ["BEGIN", "INSERT", "ROLLBACK"] * 2 + ["BEGIN", "INSERT", "COMMIT"]


def test_each_retry_is_logged_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    time = FakeTime()
    attempt = ScriptedAttempt(time, errors=[Busy(), Busy()])

    with caplog.at_level(logging.DEBUG, logger="sessionstore.storage.retry"):
        run_with_retry(
            attempt,
            only_busy_is_retryable,
            sleep=time.sleep,
            clock=time.clock,
            jitter=fixed_jitter(0.05),
        )

    retries = [r.getMessage() for r in caplog.records if r.name == "sessionstore.storage.retry"]
    assert retries == [
        "store busy (attempt 1), retrying in 50 ms",
        "store busy (attempt 2), retrying in 50 ms",
    ]


def test_default_policy_is_hermes_schedule() -> None:
    policy = RetryPolicy()

    assert (policy.max_attempts, policy.min_sleep_s, policy.max_sleep_s) == (15, 0.020, 0.150)
    assert policy.budget_s > 0


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"max_attempts": 0}, id="no-attempts"),
        pytest.param({"max_attempts": -3}, id="negative-attempts"),
        pytest.param({"min_sleep_s": -0.01}, id="negative-sleep"),
        pytest.param({"min_sleep_s": 0.2, "max_sleep_s": 0.1}, id="min-above-max"),
        pytest.param({"budget_s": 0}, id="zero-budget"),
        pytest.param({"budget_s": -1.0}, id="negative-budget"),
    ],
)
def test_policy_rejects_impossible_settings(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(
    max_attempts=st.integers(min_value=1, max_value=30),
    min_sleep_s=st.floats(min_value=0.0, max_value=0.2),
    sleep_span_s=st.floats(min_value=0.0, max_value=0.3),
    budget_s=st.floats(min_value=0.001, max_value=5.0),
    attempt_cost_s=st.floats(min_value=0.0, max_value=1.5),
    failures=st.integers(min_value=0, max_value=40),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
)
def test_retry_loop_invariants_hold_for_any_policy(
    max_attempts: int,
    min_sleep_s: float,
    sleep_span_s: float,
    budget_s: float,
    attempt_cost_s: float,
    failures: int,
    seed: int,
) -> None:
    policy = RetryPolicy(
        max_attempts=max_attempts,
        min_sleep_s=min_sleep_s,
        max_sleep_s=min_sleep_s + sleep_span_s,
        budget_s=budget_s,
    )
    time = FakeTime()
    started = time.now
    attempt = ScriptedAttempt(time, errors=[Busy()] * failures, cost_s=attempt_cost_s)

    try:
        result: str | None = run_with_retry(
            attempt,
            only_busy_is_retryable,
            policy,
            sleep=time.sleep,
            clock=time.clock,
            jitter=random.Random(seed).uniform,
        )
    except StoreBusyError as error:
        result = None
        assert error.attempts == attempt.calls
        # It gave up only for a reason: out of attempts, or the next pause would overrun.
        assert attempt.calls == max_attempts or (
            time.now - started + policy.max_sleep_s > budget_s - 1e-9
        )

    if result is not None:
        assert attempt.calls == failures + 1
    assert attempt.calls <= max_attempts
    assert len(time.sleeps) == attempt.calls - 1
    assert all(policy.min_sleep_s <= pause <= policy.max_sleep_s for pause in time.sleeps)
    # Sleeping never carries the caller past the budget (only an attempt's own wait can).
    waited_before_last_attempt = time.now - started - attempt_cost_s
    assert waited_before_last_attempt <= budget_s + 1e-9
