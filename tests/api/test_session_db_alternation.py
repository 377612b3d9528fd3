"""The alternation repair of a live replay (``repair_alternation``, iot 0.22.2's four passes,
``sessionstore/api/alternation.py``): what a provider is sent, and the rows each survivor
stands for. iot's own answers to the same rows are compared in
``tests/hermes/test_real_iot_alternation.py``."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from sessionstore.api.alternation import (
    ABSORBED_ROW_IDS,
    VERIFICATION_FINISH_REASONS,
    repair_message_sequence,
)
from sessionstore.api.session_db import SessionDB


def call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "t", "arguments": "{}"}}


def test_a_live_replay_prunes_unanswered_calls_and_folds_assistant_turns(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.append_messages_batch("s", [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "tool_calls": [call("c1"), call("c2")]},
        {"role": "tool", "content": "r1", "tool_call_id": "c1"},
        {"role": "user", "content": "next"},
        {"role": "assistant", "content": "", "tool_calls": [call("c3")]},
        {"role": "user", "content": "again"},
        {"role": "tool", "content": "stray", "tool_call_id": "c9"},
        {"role": "assistant", "content": "one"},
        {"role": "assistant", "content": "two"},
    ])  # fmt: skip
    ids = [message["id"] for message in db.get_messages("s")]

    live = db.get_messages_as_conversation("s", repair_alternation=True, include_row_ids=True)

    assert [(m["role"], m["content"]) for m in live] == [
        ("user", "go"), ("assistant", ""), ("tool", "r1"), ("user", "next\n\nagain"),
        ("assistant", "one\ntwo"),
    ]  # fmt: skip
    assert live[1]["tool_calls"] == [call("c1")]  # a strict provider refuses c2 unanswered
    assert "_db_persisted" not in live[1] and "_db_persisted" not in live[4]
    assert live[3][ABSORBED_ROW_IDS] == [ids[4], ids[5], ids[6]]
    assert live[4][ABSORBED_ROW_IDS] == [ids[8]]
    # The stored rows never change.
    assert len(db.get_messages("s")) == 9
    assert db.get_messages("s")[1]["tool_calls"] == [call("c1"), call("c2")]


ROLES = st.sampled_from(["user", "assistant", "tool", "system"])
CALL_IDS = st.sampled_from(["a", "b", "c", "a|x", ""])


@st.composite
def replays(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Replayed dicts of any order of roles, each with a row id, as a live replay gives them."""
    messages = []
    for row_id in range(1, draw(st.integers(0, 14)) + 1):
        role = draw(ROLES)
        message: dict[str, Any] = {
            "role": role, "content": draw(st.sampled_from(["", "x", "y z", None])),
            "_db_persisted": True, "_row_id": row_id,
        }  # fmt: skip
        if role == "assistant":
            if calls := draw(st.lists(CALL_IDS.filter(bool), max_size=3)):
                message["tool_calls"] = [call(call_id) for call_id in calls]
            message["finish_reason"] = draw(
                st.sampled_from([None, "stop", "incomplete", *sorted(VERIFICATION_FINISH_REASONS)])
            )
        if role == "tool":
            message["tool_call_id"] = draw(st.one_of(st.none(), CALL_IDS))
        messages.append(message)
    return messages


def _answered(tool_call: dict[str, Any], results: list[dict[str, Any]]) -> bool:
    ids = {part for part in str(tool_call["id"]).split("|") if part} | {tool_call["id"]}
    return any(
        ids & ({part for part in str(r.get("tool_call_id") or "").split("|") if part})
        for r in results
    )


@settings(max_examples=300, deadline=None)
@given(replays())
def test_a_repaired_replay_alternates_and_accounts_for_every_row(
    messages: list[dict[str, Any]],
) -> None:
    """Every call is answered by the results right after it, no two plain-text user turns
    stand together, and every row is accounted for. Two assistant turns may: iot folds them
    before a stray result between them is dropped (its agent repairs again before each
    request), and the passes run in iot's order."""
    every_row = sorted(message["_row_id"] for message in messages)

    repair_message_sequence(messages)

    # Every stored row is accounted for exactly once: a survivor's own, or one it absorbed.
    accounted = sorted(
        row_id
        for message in messages
        for row_id in (message["_row_id"], *message.get(ABSORBED_ROW_IDS, ()))
    )
    # (A replay left with no turn at all has no one to stand for its rows, as in iot.)
    assert accounted == (every_row if messages else [])
    for index, message in enumerate(messages):
        following = messages[index + 1 :]
        if message["role"] == "assistant" and message.get("tool_calls"):
            run = []
            for follower in following:
                if follower["role"] != "tool":
                    break
                run.append(follower)
            if message.get("finish_reason") != "incomplete":
                assert all(_answered(c, run) for c in message["tool_calls"])
        if message["role"] == "user" and following and following[0]["role"] == "user":
            # Only text that is no plain text (None here) stays beside another user turn.
            assert not isinstance(message["content"], str) or not isinstance(
                following[0]["content"], str
            )
