"""``list_recent_user_messages`` (Hermes's ``/rewind`` and ``/undo N`` picker) lists the turns a
rewind accepts, as iot 0.22.2 and axisrow pick them: never a compaction handoff stored as a
user row, a bookkeeping row (``display_kind`` other than ``steer``) or an empty turn. Hermes
counts ``/undo N`` on its in-memory turns, which leave those out; a picker that counted them
made the rewind on disk cut a different turn than the one cut in memory."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionstore import SessionDB
from sessionstore.sql.compaction_handoff import SUMMARY_PREFIX

HANDOFF = f"{SUMMARY_PREFIX}\nUser asked: 'old task'"


def test_handoffs_and_bookkeeping_are_not_turns(db: SessionDB) -> None:
    db.create_session("s", "cli")
    first = db.append_message("s", "user", "first question")
    db.append_message("s", "assistant", "first answer")
    db.append_message("s", "user", HANDOFF)
    db.append_message("s", "user", "background agent finished",
                      display_kind="async_delegation_complete")  # fmt: skip
    steer = db.append_message("s", "user", "steer it left", display_kind="steer")
    db.append_message("s", "user", "   ")
    second = db.append_message("s", "user", "second question")
    picked = db.list_recent_user_messages("s", limit=10)
    assert [row["id"] for row in picked] == [second, steer, first]
    assert [row["preview"] for row in picked] == ["second question", "steer it left",
                                                  "first question"]  # fmt: skip
    # every pick is a target the rewind accepts
    for row in picked:
        db.rewind_to_message("s", row["id"])  # raises on a target it refuses
        db.restore_rewound("s", since_message_id=row["id"])


def test_the_limit_counts_turns_past_any_number_of_left_out_rows(db: SessionDB) -> None:
    db.create_session("s", "cli")
    asked = []
    for n in range(3):
        for _ in range(40):  # more left-out rows than one page of the picker reads
            db.append_message("s", "user", HANDOFF)
        asked.append(db.append_message("s", "user", f"question {n}"))
    picked = db.list_recent_user_messages("s", limit=2)
    assert [row["preview"] for row in picked] == ["question 2", "question 1"]
    assert [row["id"] for row in db.list_recent_user_messages("s", limit=99)] == asked[::-1]


@pytest.mark.parametrize("include_inactive", [False, True])
def test_rewound_turns_are_listed_only_when_asked(db: SessionDB, include_inactive: bool) -> None:
    db.create_session("s", "cli")
    kept = db.append_message("s", "user", "kept")
    undone = db.append_message("s", "user", "undone")
    db.rewind_to_message("s", undone)
    picked = db.list_recent_user_messages("s", include_inactive=include_inactive)
    assert [(row["id"], row["active"]) for row in picked] == (
        [(undone, False), (kept, True)] if include_inactive else [(kept, True)]
    )


@settings(max_examples=30, deadline=None)
@given(kinds=st.lists(st.sampled_from(["turn", "handoff", "bookkeeping", "steer", "blank"]),
                      max_size=25), limit=st.integers(min_value=1, max_value=30))  # fmt: skip
def test_the_pick_is_the_newest_turns_of_any_mix(
    kinds: list[str], limit: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = tmp_path_factory.mktemp("mix") / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", "cli")
        turns = []
        for n, kind in enumerate(kinds):
            if kind == "turn":
                turns.append(db.append_message("s", "user", f"turn {n}"))
            elif kind == "steer":
                turns.append(db.append_message("s", "user", f"steer {n}", display_kind="steer"))
            elif kind == "handoff":
                db.append_message("s", "user", HANDOFF)
            elif kind == "bookkeeping":
                db.append_message("s", "user", f"note {n}", display_kind="hidden")
            else:
                db.append_message("s", "user", "")
        picked = [row["id"] for row in db.list_recent_user_messages("s", limit=limit)]
        assert picked == turns[::-1][:limit]


def test_a_preview_is_one_line_of_collapsed_whitespace(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.append_message("s", "user", "first\tline \r\n\n  second   line " + "x" * 100)
    (row,) = db.list_recent_user_messages("s")
    assert row["preview"].startswith("first line second line xxx")
    assert len(row["preview"]) == 80 and row["preview"].endswith("...")


def test_the_drop_in_names_a_skill_turn_as_hermes_describes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the checkout's ``agent.skill_commands`` (iot 0.22.2, axisrow), the picker shows a
    ``/skill`` turn as typed, not the skill's body; without it, the text's head."""
    from sessionstore.hermes import helpers
    from sessionstore.hermes import state as hermes_state

    scaffold = '[IMPORTANT: The user has invoked the "work" skill.]\n\nA long body.'
    module = types.ModuleType("agent.skill_commands")
    module.describe_skill_invocation = (  # type: ignore[attr-defined]
        lambda text: "/work — fix it" if text.startswith("[IMPORTANT") else None
    )
    helpers._skill_describer.cache_clear()
    monkeypatch.setitem(sys.modules, "agent", types.ModuleType("agent"))
    monkeypatch.setitem(sys.modules, "agent.skill_commands", module)
    try:
        db = hermes_state.SessionDB(db_path=tmp_path / "state.db")
        try:
            db.create_session("s", "cli")
            db.append_message("s", "user", scaffold)
            db.append_message("s", "user", "plain")
            assert [r["preview"] for r in db.list_recent_user_messages("s")] == [
                "plain", "/work — fix it"
            ]
        finally:
            db.close()
        with SessionDB(tmp_path / "state.db") as ours:  # the package's own: no checkout rules
            assert ours.list_recent_user_messages("s")[1]["preview"].startswith("[IMPORTANT")
    finally:
        helpers._skill_describer.cache_clear()
