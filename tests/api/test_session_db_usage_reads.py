"""The newest forks' usage, activity and lineage reads on SQLite and PostgreSQL (issue 29, item
3): axisrow 0.20.1.2's ``get_session_activity``, ``latest_user_message_row_id``,
``get_first_assistant_text`` and ``get_dominant_session_model_route``; iot 0.22.2's
``usage_totals``, ``auxiliary_usage_by_task``, ``get_recent_session_model_route`` and
``get_messages(..., include_ancestors=True)``; and hostile inputs (ids no database holds,
wrong types). The releases are the oracles in ``tests/hermes/test_real_iot_usage_reads.py``
and ``tests/hermes/test_real_axisrow_reads.py``.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import sqlalchemy as sa

from sessionstore.api.session_db import SessionDB
from sessionstore.errors import ValueOutOfRangeError

ROUTE_KEYS = ["model", "billing_provider", "billing_base_url", "billing_mode", "api_call_count"]
AUX_KEYS = ["api_calls", "input_tokens", "output_tokens", "cache_read_tokens",
            "cache_write_tokens", "reasoning_tokens", "estimated_cost_usd"]  # fmt: skip


def _sql(db: SessionDB, statement: str, **params: Any) -> None:
    db.store.write(lambda conn: conn.execute(sa.text(statement), params))


def _calls(
    db: SessionDB, session_id: str, model: str, calls: int, tokens: int, **route: Any
) -> None:
    db.update_token_counts(session_id, input_tokens=tokens, model=model,
                           billing_provider=route.pop("billing_provider", "prov"),
                           api_call_count=calls, **route)  # fmt: skip


# -- model routes -------------------------------------------------------------------------------


def test_dominant_is_most_calls_then_tokens_and_recent_is_the_last_used(db: SessionDB) -> None:
    db.create_session("s", "cli")
    _calls(db, "s", "a", 3, 10)
    _calls(db, "s", "b", 1, 10_000, billing_mode="chat")
    db.record_auxiliary_usage("s", "vision", model="z", billing_provider="prov", api_call_count=50)
    dominant = db.get_dominant_session_model_route("s")
    assert dominant is not None and list(dominant) == ROUTE_KEYS
    assert dominant == {"model": "a", "billing_provider": "prov", "billing_base_url": "",
                        "billing_mode": "", "api_call_count": 3}  # fmt: skip
    assert db.get_recent_session_model_route("s") == {
        "model": "b", "billing_provider": "prov", "billing_base_url": "", "billing_mode": "chat",
        "api_call_count": 1,
    }  # fmt: skip
    _calls(db, "s", "c", 3, 20, billing_base_url="https://c")  # as many calls, more tokens
    assert db.get_dominant_session_model_route("s")["model"] == "c"  # type: ignore[index]


def test_a_recency_tie_goes_to_the_route_recorded_later(db: SessionDB) -> None:
    db.create_session("s", "cli")
    _calls(db, "s", "first", 1, 1)
    _calls(db, "s", "second", 1, 1)
    _sql(db, "UPDATE session_model_usage SET last_seen = 500.0")
    assert db.get_recent_session_model_route("s")["model"] == "second"  # type: ignore[index]
    _sql(db, "UPDATE session_model_usage SET last_seen = 900.0 WHERE model = 'first'")
    assert db.get_recent_session_model_route("s")["model"] == "first"  # type: ignore[index]


def test_no_route_without_a_named_main_loop_model_and_provider(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.update_token_counts("s", input_tokens=5, api_call_count=1)  # model 'unknown'
    db.record_auxiliary_usage("s", "vision", model="v", billing_provider="prov")
    assert db.get_model_usage("s")  # rows there, none of them a route
    for read in (db.get_dominant_session_model_route, db.get_recent_session_model_route):
        assert read("s") is None and read("nobody") is None and read("") is None


# -- auxiliary usage ----------------------------------------------------------------------------


def test_auxiliary_usage_sums_the_parent_chain_up_to_a_branch(db: SessionDB) -> None:
    db.create_session("p", "cli")
    db.end_session("p", "compression")
    db.create_session("c", "cli", parent_session_id="p")
    db.create_session("b", "cli", parent_session_id="c", model_config={"_branched_from": "c"})
    db.create_session("g", "cli", parent_session_id="b")
    db.create_session("d", "cli", parent_session_id="c", model_config={"_delegate_from": "c"})
    db.record_auxiliary_usage("p", "vision", input_tokens=3, estimated_cost_usd=0.25)
    db.record_auxiliary_usage("c", "vision", input_tokens=4, api_call_count=2)
    db.record_auxiliary_usage("c", "compression", output_tokens=7)
    db.record_auxiliary_usage("b", "title_generation", reasoning_tokens=9)
    db.record_auxiliary_usage("g", "vision", cache_read_tokens=1)
    _calls(db, "c", "main", 4, 100)  # the main loop is not auxiliary
    by_task = db.auxiliary_usage_by_task("c")
    assert sorted(by_task) == ["compression", "vision"]
    assert list(by_task["vision"]) == AUX_KEYS
    assert by_task["vision"] == {"api_calls": 3, "input_tokens": 7, "output_tokens": 0,
                                 "cache_read_tokens": 0, "cache_write_tokens": 0,
                                 "reasoning_tokens": 0, "estimated_cost_usd": 0.25}  # fmt: skip
    assert all(type(by_task["vision"][key]) is int for key in AUX_KEYS[:-1])
    assert type(by_task["vision"]["estimated_cost_usd"]) is float
    assert sorted(db.auxiliary_usage_by_task("b")) == ["title_generation"]  # owns its spend
    assert db.auxiliary_usage_by_task("g") == {  # cut at the branch it descends from
        "title_generation": {**dict.fromkeys(AUX_KEYS, 0), "api_calls": 1,
                             "reasoning_tokens": 9, "estimated_cost_usd": 0.0},
        "vision": {**dict.fromkeys(AUX_KEYS, 0), "api_calls": 1, "cache_read_tokens": 1,
                   "estimated_cost_usd": 0.0},
    }  # fmt: skip
    assert db.auxiliary_usage_by_task("d")["vision"]["api_calls"] == 3  # every kind of parent
    assert db.auxiliary_usage_by_task("p")["vision"]["input_tokens"] == 3
    assert db.auxiliary_usage_by_task("nobody") == {} and db.auxiliary_usage_by_task("") == {}


# -- store totals -------------------------------------------------------------------------------


def test_usage_totals_count_roots_with_messages_billed_cost_first(db: SessionDB) -> None:
    db.create_session("r", "cli")
    db.append_message("r", "user", "hello")
    db.update_token_counts("r", input_tokens=7, output_tokens=3, estimated_cost_usd=1.0,
                           actual_cost_usd=0.25)  # fmt: skip
    db.create_session("child", "cli", parent_session_id="r")
    db.append_message("child", "user", "more")
    db.update_token_counts("child", input_tokens=1000, estimated_cost_usd=9.0)
    db.create_session("empty", "cli")
    db.update_token_counts("empty", input_tokens=20, estimated_cost_usd=2.0)
    db.create_session("old", "cli")
    db.append_message("old", "user", "archived")
    db.update_token_counts("old", output_tokens=40, estimated_cost_usd=4.0)
    db.set_session_archived("old", True)
    assert db.usage_totals() == {"tokens": 10, "cost_usd": 0.25}
    assert db.usage_totals(min_message_count=0) == {"tokens": 30, "cost_usd": 2.25}
    assert db.usage_totals(min_message_count=-5, include_archived=True) == {
        "tokens": 70, "cost_usd": 6.25}  # fmt: skip
    assert db.usage_totals(min_message_count=2) == {"tokens": 0, "cost_usd": 0.0}
    assert db.usage_totals(min_message_count=2**70) == {"tokens": 0, "cost_usd": 0.0}
    totals = db.usage_totals()
    assert type(totals["tokens"]) is int and type(totals["cost_usd"]) is float


def test_usage_totals_sum_past_64_bits_on_postgresql_and_sqlite_alike(db: SessionDB) -> None:
    """One session's tokens are within 64 bits; their sum over sessions is exact."""
    big = 2**62
    for name in ("a", "b"):
        db.create_session(name, "cli")
        db.append_message(name, "user", "x")
        db.update_token_counts(name, input_tokens=big - 1, output_tokens=1)
    if db.store.dialect.name == "sqlite":  # SQLite's SUM fails past 64 bits, as iot's does
        with pytest.raises(ValueOutOfRangeError, match="integer overflow"):  # typed, not raw
            db.usage_totals()
    else:
        assert db.usage_totals()["tokens"] == 2 * big


@pytest.mark.parametrize(
    "kwargs",
    [{"min_message_count": "1"}, {"min_message_count": 1.5}, {"min_message_count": True},
     {"min_message_count": None}, {"include_archived": "no"}, {"include_archived": 1}],
)  # fmt: skip
def test_usage_totals_refuse_wrong_types(db: SessionDB, kwargs: dict[str, Any]) -> None:
    with pytest.raises(TypeError, match=next(iter(kwargs))):
        db.usage_totals(**kwargs)


def test_usage_totals_take_keywords_only(db: SessionDB) -> None:
    with pytest.raises(TypeError):
        db.usage_totals(1)  # type: ignore[misc]


# -- activity -----------------------------------------------------------------------------------


def test_the_activity_snapshot(db: SessionDB) -> None:
    db.create_session("s", "cli")
    fresh = db.get_session_activity("s")
    assert fresh == {
        "last_activity_at": None, "last_activity_description": "",
        "last_activity_provenance": "unknown", "seconds_since_activity": None,
        "last_activity_ts": None, "last_activity_desc": "", "description": "",
        "provenance": "unknown",
    }  # fmt: skip
    db.touch_session_activity("s", 1000.0, description="  compacting  ",
                              provenance="agent.compression")  # fmt: skip
    before = time.time()
    snapshot = db.get_session_activity("s")
    after = time.time()
    assert snapshot is not None
    elapsed = snapshot.pop("seconds_since_activity")
    assert round(before - 1000.0, 1) <= elapsed <= round(after - 1000.0, 1)
    assert snapshot == {
        "last_activity_at": 1000.0, "last_activity_description": "compacting",
        "last_activity_provenance": "agent.compression", "last_activity_ts": 1000.0,
        "last_activity_desc": "compacting", "description": "compacting",
        "provenance": "agent.compression",
    }  # fmt: skip


def test_the_snapshot_bounds_what_another_writer_stored(db: SessionDB) -> None:
    db.create_session("s", "cli")
    _sql(db, "UPDATE sessions SET last_activity_at = 5, last_activity_description = :text, "
             "last_activity_provenance = ' bogus ' WHERE id = 's'", text="  " + "y" * 300)
    snapshot = db.get_session_activity("s")
    assert snapshot is not None
    assert snapshot["description"] == "y" * 119 + "\u2026" and snapshot["provenance"] == "unknown"
    assert snapshot["last_activity_at"] == 5.0 and type(snapshot["last_activity_at"]) is float
    db.touch_session_activity("s", 10.0, provenance="agent.compression_turnhold")
    assert db.get_session_activity("s")["provenance"] == "agent.compression_turnhold"  # type: ignore[index]


# -- message reads ------------------------------------------------------------------------------


def test_latest_user_message_row_id(db: SessionDB) -> None:
    db.create_session("s", "cli")
    first = db.append_message("s", "user", "one")
    db.append_message("s", "assistant", "re one")
    db.append_message("s", "user", "   ")  # no text
    undone = db.append_message("s", "user", "undone")
    db.rewind_to_message("s", undone)
    assert db.latest_user_message_row_id("s") == first
    assert db.latest_user_message_row_id("nobody") is None


def test_first_assistant_text(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.append_message("s", "user", "ask", timestamp=1.0)
    db.append_message("s", "assistant", None, timestamp=2.0, tool_calls=[
        {"id": "t", "type": "function", "function": {"name": "x", "arguments": "{}"}}])
    db.append_message("s", "assistant", "later", timestamp=4.0)
    retried = db.append_message("s", "user", "retry", timestamp=4.5)
    db.append_message("s", "assistant", "earlier", timestamp=3.0)
    assert db.get_first_assistant_text("s") == "earlier"  # by timestamp, not id
    db.rewind_to_message("s", retried)  # a rewound row still counts, as in axisrow
    assert db.get_first_assistant_text("s") == "earlier"
    db.create_session("m", "cli")
    db.append_message("m", "assistant", [{"type": "text", "text": "parts"}], timestamp=1.0)
    db.append_message("m", "assistant", "plain", timestamp=2.0)
    assert db.get_first_assistant_text("m") == ""  # multi-part content is no plain text
    db.create_session("e", "cli")
    db.append_message("e", "user", "only asks")
    assert db.get_first_assistant_text("e") == "" and db.get_first_assistant_text("none") == ""


# -- get_messages over a compression lineage ----------------------------------------------------


def _lineage(db: SessionDB) -> None:
    """``p`` ended by compression and continued by ``c`` (which repeats p's last ask, holds a
    model-only row and a rewound one); ``b`` a branch of ``c``; ``r`` a reset child of it."""
    db.create_session("p", "cli")
    db.append_message("p", "user", "ask", timestamp=1.0)
    db.append_message("p", "assistant", "answer", timestamp=2.0)
    db.append_message("p", "user", "carried", timestamp=3.0)
    db.end_session("p", "compression")
    db.create_session("c", "cli", parent_session_id="p")
    db.append_message("c", "user", "carried", timestamp=3.0)
    db.append_message("c", "assistant", "reply", timestamp=4.0)
    db.append_message("c", "assistant", "hidden", timestamp=5.0,
                      display_metadata={"model_only": True})  # fmt: skip
    undone = db.append_message("c", "user", "undone", timestamp=6.0)
    db.rewind_to_message("c", undone)
    db.append_message("c", "user", "last", timestamp=7.0)
    db.create_session("b", "cli", parent_session_id="c", model_config={"_branched_from": "c"})
    db.append_message("b", "user", "branched")
    db.end_session("c", "compression")
    db.create_session("r", "cli", parent_session_id="c", model_config={"_reset_from": "c"})
    db.append_message("r", "user", "fresh")


def _shown(messages: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    return [(m["session_id"], m["content"]) for m in messages]


def test_include_ancestors_reads_the_lineage_once_per_message(db: SessionDB) -> None:
    _lineage(db)
    merged = [("p", "ask"), ("p", "answer"), ("c", "carried"), ("c", "reply"), ("c", "last")]
    assert _shown(db.get_messages("c", include_ancestors=True)) == merged
    assert _shown(db.get_messages("c", include_ancestors=True, limit=2)) == merged[:2]
    assert _shown(db.get_messages("c", include_ancestors=True, offset=1, limit=2)) == merged[1:3]
    assert _shown(db.get_messages("c", include_ancestors=True, offset=3)) == merged[3:]
    assert _shown(db.get_messages("c", include_ancestors=True, latest=True, limit=2)) == merged[3:]
    with_undone = db.get_messages("c", include_ancestors=True, include_inactive=True)
    assert ("c", "undone") in _shown(with_undone) and ("c", "hidden") not in _shown(with_undone)
    live = db.get_messages("c", include_ancestors=True)
    assert all(m["active"] == 1 for m in live) and live == sorted(live, key=lambda m: m["id"])


def test_include_ancestors_stops_at_forks_and_unknown_ids(db: SessionDB) -> None:
    _lineage(db)
    assert _shown(db.get_messages("b", include_ancestors=True)) == [("b", "branched")]
    assert _shown(db.get_messages("r", include_ancestors=True)) == [("r", "fresh")]
    # The root continues nothing: its own read, model-only rows and all.
    assert db.get_messages("p", include_ancestors=True) == db.get_messages("p")
    assert db.get_messages("nobody", include_ancestors=True) == []


def test_include_ancestors_refuses_keyset_paging_and_a_non_bool(db: SessionDB) -> None:
    _lineage(db)
    for session_id in ("c", "p", "nobody"):
        with pytest.raises(ValueError, match="include_ancestors"):
            db.get_messages(session_id, include_ancestors=True, after_id=1)
    with pytest.raises(TypeError, match="include_ancestors"):
        db.get_messages("c", include_ancestors="yes")  # type: ignore[arg-type]


def test_include_ancestors_pages_negative_values_as_sqlite_reads_them(db: SessionDB) -> None:
    """Our decision (docs/hermes.md): iot slices its merged list, so ``limit=-1`` would drop the
    last row; here a negative limit is no limit and a negative offset 0, as everywhere."""
    _lineage(db)
    every = db.get_messages("c", include_ancestors=True)
    assert db.get_messages("c", include_ancestors=True, limit=-1) == every
    assert db.get_messages("c", include_ancestors=True, offset=-3, limit=2) == every[:2]


# -- hostile ids --------------------------------------------------------------------------------

HOSTILE_IDS = [None, 123, 1.5, ["s"], {"s": 1}, b"s", "s\x00", "\ud800", ""]
NOTHING: dict[str, Any] = {
    "get_session_activity": None,
    "latest_user_message_row_id": None,
    "get_first_assistant_text": "",
    "get_dominant_session_model_route": None,
    "get_recent_session_model_route": None,
    "auxiliary_usage_by_task": {},
}


@pytest.mark.parametrize("session_id", HOSTILE_IDS, ids=repr)
def test_an_id_no_database_holds_matches_nothing(db: SessionDB, session_id: Any) -> None:
    db.create_session("s", "cli")
    db.append_message("s", "user", "hello")
    db.append_message("s", "assistant", "hi")
    _calls(db, "s", "m", 1, 1)
    db.record_auxiliary_usage("s", "vision")
    for method, nothing in NOTHING.items():
        assert getattr(db, method)(session_id) == nothing, method
    assert db.get_messages(session_id, include_ancestors=True) == []
