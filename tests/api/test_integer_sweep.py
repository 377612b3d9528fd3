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
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from run_kept import kept_for_the_run, run_directory

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
NOT_A_CONTAINER = ["not a mapping", b"bytes", 2**63, None, 1.5, object()]
"""Every one is given to every parameter (3 of them, drawn by Hypothesis, before)."""
_attempts = itertools.count()
NO_WAITING: dict[str, dict[str, Any]] = {
    # Another holder (a value swept as ``holder`` before) may hold the lease: one attempt and
    # no wait, or the sweep sleeps out the default 1,800 s (and a swept wait_seconds, 2**63).
    "acquire_session_turn_lease": {
        "wait_seconds": 0.0, "should_abort": lambda: next(_attempts) % 2 == 1,
    },
}
"""Arguments a method that waits on another holder gets in the sweep (the swept one wins)."""
THOROUGH = 30
"""Values each parameter gets in the thorough sweep, besides all of ``EDGES``."""


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


_DRAWN: dict[tuple[int, int, tuple[Any, ...], int], list[list[Any]]] = {}
"""What ``_drawn_values`` drew in this process, by the number of parameters: a surface gets the
same values on both dialects (drawing them was a quarter of a thorough sweep's CPU, 1.3 s a
surface and dialect; each sweep still gives every parameter all of ``EDGES`` and its own 30)."""


@pytest.fixture(scope="session")
def run_draws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where ``_drawn_values`` keeps what it drew for the run: shared by the run's xdist
    workers (their base directories' parent is the run's own), never by two runs. A surface
    whose two dialects' sweeps ran in two workers had its values drawn twice (1.6 CPU s each
    at load): now once in the run, as when both ran in one worker (``_DRAWN``)."""
    return run_directory(tmp_path_factory, "integer-draws")


def _drawn_values(
    values: st.SearchStrategy[Any], count: int, always: list[Any], shared: Path | None = None
) -> Callable[[int], list[list[Any]]]:
    """For each of n parameters: ``always``, then ``count`` distinct values Hypothesis draws
    (once per process for n parameters: ``_DRAWN``; once per run with ``shared``, the run's
    directory, for values JSON keeps exactly: integers).

    One Hypothesis run draws every parameter's list (one example each). A run of its own per
    parameter (30 examples of one value) drew the same kind of values, but its engine cost
    15 ms CPU a parameter, more than the calls it checked (618 parameters a surface). Nothing
    here is shrunk or replayed either way: a call's exception is recorded, never raised into
    Hypothesis. What a run of its own gave, kept: distinct values (``unique``), and its first
    example, the strategy's simplest value (``2**63``): the sweep's ``always`` is all of
    ``EDGES``, which 30 examples of their own mostly but not always reached (7.8 of 8)."""

    def draw(parameters: int) -> list[list[Any]]:
        key = (id(values), count, tuple(always), parameters)
        if key not in _DRAWN:
            _DRAWN[key] = _draw(parameters) if shared is None else _kept_for_the_run(parameters)
        return _DRAWN[key]

    def _kept_for_the_run(parameters: int) -> list[list[Any]]:
        assert shared is not None
        key = json.dumps([repr(values), count, always, parameters])
        drawn: list[list[Any]] = kept_for_the_run(shared, key, lambda: _draw(parameters))
        return drawn

    def _draw(parameters: int) -> list[list[Any]]:
        drawn: list[list[Any]] = []

        @settings(
            max_examples=parameters, deadline=None, database=None, phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )  # fmt: skip
        @given(st.lists(values, min_size=count, max_size=count, unique=True))
        def collect(found: list[Any]) -> None:
            drawn.append(found)

        while len(drawn) < parameters:
            collect()
        return [list(dict.fromkeys([*always, *found])) for found in drawn[:parameters]]

    return draw


def _every_value(values: list[Any]) -> Callable[[int], list[list[Any]]]:
    """For each of n parameters: every one of ``values``."""
    return lambda parameters: [values] * parameters


def _session_kept(db: SessionDB) -> Callable[[], None]:
    """What each parameter's sweep starts from: session ``s1``, there again if a delete or
    prune swept before took it (``ensure_session("s1", "cli")``).

    The upsert is asked only when it would change something: when ``s1`` is gone, or has no
    ``created_source`` (the one column the upsert fills on an existing session given no
    model, prompt, parent or extras). Otherwise it changed nothing, yet was a write
    transaction each parameter (0.3 CPU ms on SQLite, a round trip and the server's work on
    PostgreSQL; 618-660 a surface), where the look is a read of one row (0.02 ms)."""

    def reset() -> None:
        kept = db.repository.get_session("s1")
        if kept is None or kept.created_source is None:
            db.ensure_session("s1", "cli")

    return reset


def _check_every_parameter(
    target: object, reset: Callable[[], object], values: Callable[[int], list[list[Any]]]
) -> None:
    escaped: dict[tuple[str, str], str] = {}
    targets = _sweep_targets(target)
    for (method, parameter, required), tried in zip(targets, values(len(targets)), strict=True):
        reset()  # a delete or prune swept before may have taken the session
        for value in tried:
            try:
                getattr(target, method)(**{**required, parameter: value})
            except TYPED:
                pass
            except Exception as exc:  # the finding: anything untyped
                escaped[(method, parameter)] = f"{type(exc).__name__}: {exc} <- {value!r:.40}"
    assert not escaped, "\n".join(f"{m}({p}): {e}" for (m, p), e in sorted(escaped.items()))


@pytest.mark.slow
@pytest.mark.parametrize("surface", ["SessionDB", "SessionRepository"])
def test_integers_of_any_size_thoroughly(db: SessionDB, surface: str, run_draws: Path) -> None:
    """Each parameter: every one of ``EDGES`` and 30 more values. (A quick sweep of 2**63 and
    3 drawn values beside it was measured into the slow list: it ran only where this one runs,
    and proved a part of what this one proves.)"""
    target: object = db if surface == "SessionDB" else db.repository
    assert isinstance(target, (SessionDB, SessionRepository))
    _check_every_parameter(
        target, _session_kept(db), _drawn_values(ANY_INTEGER, THOROUGH, EDGES, run_draws)
    )


def test_a_wrong_container_is_a_type_error(db: SessionDB) -> None:
    for target in (db, db.repository):
        _check_every_parameter(target, _session_kept(db), _every_value(NOT_A_CONTAINER))
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
