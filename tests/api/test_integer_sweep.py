"""Every public method, every parameter, integers of any size (issue 30, item 9): the answer is
a result, or a typed error (``TypeError``, ``ValueError``, ``LookupError`` or this package's
own); never ``OverflowError`` from a driver that cannot bind the value, never an
``AttributeError`` from a wrong container.

The methods are found by introspection, so a method added later is swept too. Before the fix,
on SQLite, ``list_recent_user_messages(limit=2**63)``, ``rewind_to_message(..., 2**63)``,
``restore_rewound(since_message_id=2**63)`` and the repository's
``session_ids_with_prefix``/``short_ids`` raised ``OverflowError``; on both dialects
``backfill_repo_roots("not a mapping")`` raised ``AttributeError``.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessionstore.api.session_db import SessionDB
from sessionstore.errors import SessionStoreError
from sessionstore.sessions.repository import NewMessage, SessionRepository

TYPED = (TypeError, ValueError, LookupError, SessionStoreError, TimeoutError)
"""``TimeoutError``: a deadline given as no time at all (``list_recent_sessions_bounded``'s
``timeout_seconds <= 0``, as documented)."""
NOT_SWEPT = {"close", "vacuum", "optimize_fts", "maybe_auto_prune_and_vacuum"}
"""Whole-store maintenance: no argument that reaches a statement, and slow to repeat."""
EDGES = [2**63, 2**63 - 1, -(2**63), -(2**63) - 1, 2**64, -(2**64), 2**1100, -(2**1100)]
ANY_INTEGER = st.one_of(st.sampled_from(EDGES), st.integers(), st.integers(min_value=2**62))
NOT_A_CONTAINER = st.sampled_from(["not a mapping", b"bytes", 2**63, None, 1.5, object()])
_attempts = itertools.count()
NO_WAITING: dict[str, dict[str, Any]] = {
    # Another holder (a value swept as ``holder`` before) may hold the lease: one attempt and
    # no wait, or the sweep sleeps out the default 1,800 s (and a swept wait_seconds, 2**63).
    "acquire_session_turn_lease": {
        "wait_seconds": 0.0, "should_abort": lambda: next(_attempts) % 2 == 1,
    },
}
"""Arguments a method that waits on another holder gets in the sweep (the swept one wins)."""
QUICK = settings(
    max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
THOROUGH = settings(QUICK, max_examples=30)


def _plain_value(parameter: inspect.Parameter) -> Any:
    """A valid argument for a required parameter, from its name and annotation."""
    annotation = str(parameter.annotation)
    if "NewMessage" in annotation:
        message = NewMessage(role="user", content="swept")
        return [message] if "Sequence" in annotation else message
    if "Sequence[Mapping" in annotation:
        return [{"role": "user", "content": "swept"}]
    if "Mapping" in annotation:
        return {}
    if "Sequence" in annotation:
        return ["s1"]
    if "float" in annotation:
        return 1.0
    if "int" in annotation:
        return 1
    return "s1"


def _sweep_targets(target: object) -> list[tuple[str, str, dict[str, Any]]]:
    """(method, parameter, the other required arguments) for every parameter of every public
    method of ``target``."""
    found = []
    for name, method in inspect.getmembers(type(target), inspect.isfunction):
        if name.startswith("_") or name in NOT_SWEPT:
            continue
        parameters = [
            p
            for p in inspect.signature(method).parameters.values()
            if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
        required = {p.name: _plain_value(p) for p in parameters if p.default is p.empty}
        required.update(NO_WAITING.get(name, {}))
        for parameter in parameters:
            found.append((name, parameter.name, required))
    return found


def _check_every_parameter(
    target: object,
    reset: Callable[[], None],
    values: st.SearchStrategy[Any],
    examples: settings = QUICK,
) -> None:
    escaped: dict[tuple[str, str], str] = {}

    def sweep(method: str, parameter: str, required: dict[str, Any]) -> None:
        reset()  # a delete or prune swept before may have taken the session

        @examples
        @given(value=values)
        def check(value: Any) -> None:
            try:
                getattr(target, method)(**{**required, parameter: value})
            except TYPED:
                pass
            except Exception as exc:  # the finding: anything untyped
                escaped[(method, parameter)] = f"{type(exc).__name__}: {exc} <- {value!r:.40}"

        check()

    for method, parameter, required in _sweep_targets(target):
        sweep(method, parameter, required)
    assert not escaped, "\n".join(f"{m}({p}): {e}" for (m, p), e in sorted(escaped.items()))


@pytest.mark.parametrize("surface", ["SessionDB", "SessionRepository"])
def test_integers_of_any_size_give_a_result_or_a_typed_error(db: SessionDB, surface: str) -> None:
    target: object = db if surface == "SessionDB" else db.repository
    assert isinstance(target, (SessionDB, SessionRepository))
    _check_every_parameter(target, lambda: db.ensure_session("s1", "cli"), ANY_INTEGER)


@pytest.mark.slow
@pytest.mark.parametrize("surface", ["SessionDB", "SessionRepository"])
def test_integers_of_any_size_thoroughly(db: SessionDB, surface: str) -> None:
    target: object = db if surface == "SessionDB" else db.repository
    _check_every_parameter(target, lambda: db.ensure_session("s1", "cli"), ANY_INTEGER, THOROUGH)


def test_a_wrong_container_is_a_type_error(db: SessionDB) -> None:
    for target in (db, db.repository):
        _check_every_parameter(target, lambda: db.ensure_session("s1", "cli"), NOT_A_CONTAINER)
    for call in (
        lambda: db.backfill_repo_roots("not a mapping"),  # type: ignore[arg-type]
        lambda: db.repository.backfill_repo_roots("not a mapping"),  # type: ignore[arg-type]
        lambda: db.repository.append_messages("s1", "not messages"),  # type: ignore[arg-type]
    ):
        with pytest.raises(TypeError):
            call()


def test_ids_beyond_64_bits_are_no_message_s(db: SessionDB) -> None:
    db.create_session("s1", "cli")
    first = db.append_message("s1", "user", "hello")
    assert db.list_recent_user_messages("s1", limit=2**63)[0]["id"] == first
    for target in (2**63, -(2**63) - 1, 2**200):
        with pytest.raises(ValueError, match="not a user message"):
            db.rewind_to_message("s1", target)
    assert db.restore_rewound("s1", since_message_id=2**63) == 0
    db.rewind_to_message("s1", first)
    assert db.restore_rewound("s1", since_message_id=-(2**70)) == 1
    assert db.repository.session_ids_with_prefix("s", 2**64) == ["s1"]
    assert db.repository.short_ids(["s1"], min_length=2**64) == {"s1": "s1"}
