"""iot 0.22.2's gateway bookkeeping on SQLite and PostgreSQL (issue 29): the routing-index
repair rows (``gateway_routing_entry_for_session``, ``list_gateway_routing_rows``,
``insert_gateway_routing_rows_if_absent``, ``delete_gateway_routing_rows``), the handoff
watcher's probe and reclaim, the accepted-input marker and the busy queue's undrained rows,
and ``session_gateway_runtime``; with hostile inputs (unknown ids, NUL and lone surrogates,
wrong types: iot's answer or a typed error, never a driver's). The release is the oracle in
``tests/hermes/test_real_iot_gateway_bookkeeping.py``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from sessionstore.api.async_session_db import AsyncSessionDB
from sessionstore.api.session_db import SessionDB

HOSTILE_IDS = ["", "nobody", "a\x00b", "\ud800", "' OR 1=1 --", "%", "_"]


def _entry(session_id: str) -> str:
    return json.dumps({"session_id": session_id, "origin": {"platform": "telegram"}})


# -- the routing index's repair rows ------------------------------------------------------
def test_the_routing_entry_of_a_session_is_found_in_any_scope(db: SessionDB) -> None:
    db.save_gateway_routing_entry("k1", _entry("s1"), scope="/a")
    db.save_gateway_routing_entry("k2", "not json", scope="")
    db.save_gateway_routing_entry("k3", "[1, 2]", scope="")
    db.save_gateway_routing_entry("k4", _entry("s2"), scope="")
    assert db.gateway_routing_entry_for_session("s1") == json.loads(_entry("s1"))
    assert db.gateway_routing_entry_for_session("s2")["session_id"] == "s2"
    for hostile in [*HOSTILE_IDS, None, 5, ["s1"]]:
        assert db.gateway_routing_entry_for_session(hostile) is None  # type: ignore[arg-type]


def test_two_entries_claiming_one_session_answer_the_first_by_scope_then_key(
    db: SessionDB,
) -> None:
    db.save_gateway_routing_entry("z", json.dumps({"session_id": "s", "n": 1}), scope="b")
    db.save_gateway_routing_entry("B", json.dumps({"session_id": "s", "n": 2}), scope="a")
    db.save_gateway_routing_entry("a", json.dumps({"session_id": "s", "n": 3}), scope="a")
    assert db.gateway_routing_entry_for_session("s") == {"session_id": "s", "n": 2}  # bytewise


def test_routing_rows_are_listed_bytewise_by_scope_then_key(db: SessionDB) -> None:
    assert db.list_gateway_routing_rows() == []
    db.save_gateway_routing_entry("b", "{}", scope="x")
    db.save_gateway_routing_entry("a", "{}", scope="x")
    db.save_gateway_routing_entry("Z", "{}", scope="")
    rows = db.list_gateway_routing_rows()
    assert [(r["scope"], r["session_key"]) for r in rows] == [("", "Z"), ("x", "a"), ("x", "b")]
    assert set(rows[0]) == {"scope", "session_key", "entry_json", "updated_at"}
    assert isinstance(rows[0]["updated_at"], float)


def test_adopted_rows_never_replace_a_present_key(db: SessionDB) -> None:
    db.save_gateway_routing_entry("k", "mine", scope="s")
    adopted = db.insert_gateway_routing_rows_if_absent(
        [("s", "k", "theirs", 1.0), ("s", "new", "first", 2), ("s", "new", "second", 3.5)]
    )
    assert adopted == 1
    assert db.load_gateway_routing_entries(scope="s") == {"k": "mine", "new": "first"}
    new = next(r for r in db.list_gateway_routing_rows() if r["session_key"] == "new")
    assert new["updated_at"] == 2.0
    assert db.insert_gateway_routing_rows_if_absent([]) == 0
    assert db.insert_gateway_routing_rows_if_absent(iter([("t", "k", "x", 0)])) == 1


@pytest.mark.parametrize(
    ("rows", "error"),
    [
        ("s,k,e,1", TypeError),
        ({"s": "k"}, TypeError),
        (5, TypeError),
        ([("s", "k", "e")], ValueError),
        ([("s", "k", "e", 1, 2)], ValueError),
        ([("s", None, "e", 1.0)], TypeError),
        ([("s", "k", None, 1.0)], TypeError),
        ([(1, "k", "e", 1.0)], TypeError),
        ([("s", "k", "e", "1.0")], TypeError),
        ([("s", "k", "e", True)], TypeError),
        ([("s", "k\x00", "e", 1.0)], ValueError),
        ([("s", "\ud800", "e", 1.0)], ValueError),
        ([("s", "ok", "e", 1.0), "bad"], TypeError),
    ],
)
def test_a_malformed_adopted_row_is_refused_before_anything_is_written(
    db: SessionDB, rows: Any, error: type[Exception]
) -> None:
    with pytest.raises(error):
        db.insert_gateway_routing_rows_if_absent(rows)
    assert db.list_gateway_routing_rows() == []


def test_routing_rows_are_deleted_by_scope_and_key(db: SessionDB) -> None:
    db.save_gateway_routing_entry("k", "{}", scope="a")
    db.save_gateway_routing_entry("k", "{}", scope="b")
    db.save_gateway_routing_entry("j", "{}", scope="a")
    gone = db.delete_gateway_routing_rows(
        [("a", "k"), ("a", "k"), ("c", "k"), ("a", "\x00"), ("\ud800", "j")]
    )
    assert gone == 1
    assert [(r["scope"], r["session_key"]) for r in db.list_gateway_routing_rows()] == [
        ("a", "j"), ("b", "k")]  # fmt: skip
    assert db.delete_gateway_routing_rows([]) == 0
    assert db.delete_gateway_routing_rows(iter([["b", "k"]])) == 1


@pytest.mark.parametrize(
    ("rows", "error"),
    [
        ([("a", "j", "x")], ValueError),  # Python's unpacking, as iot's loop
        ([("a",)], ValueError),
        ([5], TypeError),
        ([(None, "j")], TypeError),
        ([("a", 1)], TypeError),
        ("aj", TypeError),
        (None, TypeError),
    ],
)
def test_a_malformed_pair_deletes_nothing(db: SessionDB, rows: Any, error: type[Exception]) -> None:
    db.save_gateway_routing_entry("j", "{}", scope="a")
    with pytest.raises(error):
        db.delete_gateway_routing_rows([("a", "j"), *rows] if isinstance(rows, list) else rows)
    assert len(db.list_gateway_routing_rows()) == 1


# -- handoffs -----------------------------------------------------------------------------
def test_the_watcher_probe_sees_only_a_pending_handoff(db: SessionDB) -> None:
    db.create_session("s", "cli")
    assert db.has_pending_handoffs() is False
    assert db.request_handoff("s", "telegram")
    assert db.has_pending_handoffs() is True
    assert db.claim_handoff("s")
    assert db.has_pending_handoffs() is False


def test_stale_running_handoffs_are_failed_and_named_oldest_first(db: SessionDB) -> None:
    for session_id in ("b", "a", "c", "d"):
        db.create_session(session_id, "cli")
        db.request_handoff(session_id, "telegram")
    for session_id in ("b", "a", "c"):
        db.claim_handoff(session_id)
    db.complete_handoff("c")
    assert db.reclaim_stale_running_handoffs("x" * 600) == ["b", "a"]
    state = db.get_handoff_state("a")
    assert state == {"state": "failed", "platform": "telegram", "error": "x" * 500}
    assert db.get_handoff_state("c")["state"] == "completed"  # type: ignore[index]
    assert db.get_handoff_state("d")["state"] == "pending"  # type: ignore[index]
    assert db.reclaim_stale_running_handoffs("again") == []
    assert db.request_handoff("a", "slack")  # failed: a handoff may be asked for again


@pytest.mark.parametrize("error", [None, 5, ["e"], b"e"])
def test_a_reclaim_error_that_is_no_text_is_a_type_error(db: SessionDB, error: Any) -> None:
    db.create_session("s", "cli")
    db.request_handoff("s", "telegram")
    db.claim_handoff("s")
    with pytest.raises(TypeError):
        db.reclaim_stale_running_handoffs(error)
    assert db.get_handoff_state("s")["state"] == "running"  # type: ignore[index]


def test_a_reclaim_error_is_kept_as_free_text(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.request_handoff("s", "telegram")
    db.claim_handoff("s")
    assert db.reclaim_stale_running_handoffs("died \ud800 \x00") == ["s"]
    error = db.get_handoff_state("s")["error"]  # type: ignore[index]
    assert error in ("died \ufffd \x00", "died \ufffd \ufffd")  # NUL: kept where SQLite holds it


def test_a_failed_reclaim_write_is_logged_and_answers_nothing(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A store opened read-only is the failing write (the rule is the dialects' shared one)."""
    path = tmp_path / "state.db"
    writer = SessionDB(path)
    writer.create_session("s", "cli")
    writer.request_handoff("s", "telegram")
    writer.claim_handoff("s")
    writer.close()
    reader = SessionDB(path, read_only=True)
    try:
        assert reader.reclaim_stale_running_handoffs("dead") == []
    finally:
        reader.close()
    assert "reclaim_stale_running_handoffs failed" in caplog.text


# -- accepted input and the busy queue ----------------------------------------------------
def _owned(db: SessionDB) -> None:
    db.create_session("s", "telegram")
    db.append_message("s", "user", "live", display_metadata={"gateway_input_owner": "gw-1"})
    db.append_message(
        "s", "user", "observed", observed=True, display_metadata={"gateway_input_owner": "gw-2"}
    )
    db.append_message(
        "s", "assistant", "not a user", display_metadata={"gateway_input_owner": "gw-3"}
    )
    db.append_message("s", "user", "number", display_metadata={"gateway_input_owner": 4})


def test_the_input_owner_is_found_on_unobserved_user_rows_only(db: SessionDB) -> None:
    _owned(db)
    assert db.has_gateway_input_owner("s", "gw-1") is True
    assert db.has_gateway_input_owner("s", "gw-2") is False  # observed
    assert db.has_gateway_input_owner("s", "gw-3") is False  # an assistant row
    assert db.has_gateway_input_owner("s", "4") is False  # a JSON number is no text
    assert db.has_gateway_input_owner("s", "gw") is False
    for hostile in HOSTILE_IDS:
        assert db.has_gateway_input_owner(hostile, "gw-1") is False
        assert db.has_gateway_input_owner("s", hostile) is False
    assert db.has_gateway_input_owner(None, "gw-1") is False  # type: ignore[arg-type]
    assert db.has_gateway_input_owner("s", None) is False  # type: ignore[arg-type]
    for wrong in (5, b"s", ["s"]):
        with pytest.raises(TypeError):
            db.has_gateway_input_owner(wrong, "gw-1")  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            db.has_gateway_input_owner("s", wrong)  # type: ignore[arg-type]


def test_a_rewound_input_row_no_longer_owns_and_a_compacted_one_still_does(
    db: SessionDB,
) -> None:
    db.create_session("r", "telegram")
    first = db.append_message("r", "user", "a", display_metadata={"gateway_input_owner": "o"})
    db.rewind_to_message("r", first)
    assert db.has_gateway_input_owner("r", "o") is False
    db.create_session("c", "telegram")
    db.append_message("c", "user", "b", display_metadata={"gateway_input_owner": "o"})
    db.archive_and_compact("c", [{"role": "user", "content": "summary"}])
    assert db.has_gateway_input_owner("c", "o") is True


def test_undrained_queue_rows_are_deactivated_never_deleted(db: SessionDB) -> None:
    db.create_session("s", "telegram")
    db.append_message("s", "user", "ran")
    for value in (True, 1, 1.0):
        db.append_message("s", "user", f"queued {value!r}",
                          display_metadata={"_queued_prompt": value})  # fmt: skip
    for value in (False, 0, "1", None, 2):
        db.append_message("s", "user", f"kept {value!r}",
                          display_metadata={"_queued_prompt": value})  # fmt: skip
    db.append_message("s", "assistant", "a", display_metadata={"_queued_prompt": True})
    db.append_message("s", "user", "not json", display_metadata='{"_queued_prompt": tru')
    before = len(db.get_messages("s", include_inactive=True))
    assert db.retire_undrained_queue_rows("s") == 3
    assert db.retire_undrained_queue_rows("s") == 0
    rows = db.get_messages("s", include_inactive=True)
    assert len(rows) == before
    retired = [row["content"] for row in rows if not row["active"]]
    assert retired == ["queued True", "queued 1", "queued 1.0"]
    for hostile in HOSTILE_IDS:
        assert db.retire_undrained_queue_rows(hostile) == 0
    for wrong in (None, 5, ["s"]):
        with pytest.raises(TypeError):
            db.retire_undrained_queue_rows(wrong)  # type: ignore[arg-type]


# -- the persisted runtime route ----------------------------------------------------------
@pytest.mark.parametrize(
    ("meta", "route"),
    [
        (None, {}),
        ({}, {}),
        ("", {}),
        ({"model_config": "not json"}, {}),
        ({"model_config": "[1]"}, {}),
        ({"model_config": {"gateway_runtime": {"provider": "p", "base_url": None, "m": 1}}},
         {"provider": "p", "m": 1}),
        ({"model_config": json.dumps({"provider": "top", "api_mode": "chat", "base_url": ""})},
         {"provider": "top", "api_mode": "chat"}),
        ({"model_config": None, "billing_provider": " openrouter "}, {"provider": "openrouter"}),
        ({"model_config": {"base_url": "u"}, "billing_provider": "AUTO"}, {"base_url": "u"}),
        ({"model_config": {}, "billing_provider": "custom"}, {}),
        ({"model_config": {"gateway_runtime": {"base_url": "u", "x": None}}}, {"base_url": "u"}),
        ({"model_config": {"gateway_runtime": "not a dict"}}, {}),
    ],
)
def test_the_runtime_route_follows_iots_precedence(meta: Any, route: dict[str, Any]) -> None:
    assert SessionDB.session_gateway_runtime(meta) == route
    assert AsyncSessionDB.session_gateway_runtime(meta) == route


def test_a_runtime_row_that_is_no_mapping_is_a_type_error() -> None:
    for meta in ("row", [("model_config", "{}")], 5):
        with pytest.raises(TypeError):
            SessionDB.session_gateway_runtime(meta)  # type: ignore[arg-type]


def test_the_runtime_route_reads_a_stored_row(db: SessionDB) -> None:
    db.create_session("s", "telegram", model_config={"gateway_runtime": {"provider": "p"}})
    assert db.session_gateway_runtime(db.get_session("s")) == {"provider": "p"}


# -- a delegation's delivery --------------------------------------------------------------
def test_a_delivery_is_recorded_once_across_a_rotation(db: SessionDB) -> None:
    db.create_session("p", "telegram")
    metadata = {"delegation_id": "d1", "delivery_notice": "done", "extra": [1]}
    first = db.append_delegation_delivery("p", "result", metadata)
    assert db.append_delegation_delivery("p", "again", metadata) == first
    db.end_session("p", "compression")
    db.create_session("c", "telegram", parent_session_id="p")
    assert db.append_delegation_delivery("c", "replayed", metadata) == first
    other_notice = db.append_delegation_delivery("c", "r", {**metadata, "delivery_notice": "x"})
    assert other_notice != first
    [row] = db.get_messages("c")
    assert row["role"] == "user" and row["display_kind"] == "async_delegation_complete"
    assert row["display_metadata"]["delegation_id"] == "d1"
    assert row["message_uid"]
    assert db.get_session("c")["message_count"] == 1  # type: ignore[index]


def test_a_suppressed_delivery_is_hidden_and_a_none_notice_never_matches(db: SessionDB) -> None:
    db.create_session("s", "telegram")
    hidden = db.append_delegation_delivery(
        "s", "r", {"delegation_id": 7, "presentation_suppressed": True})
    assert db.append_delegation_delivery("s", "r", {"delegation_id": 7}) == hidden
    assert db.get_messages("s")[0]["display_kind"] == "hidden"
    none = {"delegation_id": 7, "delivery_notice": None}
    assert db.append_delegation_delivery("s", "r", none) != db.append_delegation_delivery(
        "s", "r", none)  # fmt: skip
    # A branch's parent is no rotation: the delivery is written again in the branch.
    db.create_session("b", "telegram", parent_session_id="s", model_config={"_branched_from": "s"})
    assert db.append_delegation_delivery("b", "r", {"delegation_id": 7}) != hidden


def test_a_delivery_is_refused_mid_turn_and_on_a_closed_parent(db: SessionDB) -> None:
    from sessionstore.errors import CompressionSessionClosedError, SessionTurnLeaseLostError

    db.create_session("s", "telegram")
    assert db.try_acquire_session_turn_lease("s", "turn", ttl_seconds=600)
    with pytest.raises(SessionTurnLeaseLostError):
        db.append_delegation_delivery("s", "r", {"delegation_id": "d"})
    db.release_session_turn_lease("s", "turn")
    db.end_session("s", "compression")
    with pytest.raises(CompressionSessionClosedError) as closed:
        db.append_delegation_delivery("s", "r", {"delegation_id": "d"})
    assert isinstance(closed.value, RuntimeError) and closed.value.session_id == "s"
    assert db.get_messages("s") == []


def test_delivery_hostile_inputs(db: SessionDB) -> None:
    from sessionstore.errors import UnknownSessionError

    db.create_session("s", "telegram")
    for metadata in ({}, {"delegation_id": ""}, {"delegation_id": None}, {"delegation_id": 0}):
        with pytest.raises(ValueError):
            db.append_delegation_delivery("s", "r", metadata)
    for metadata in (None, "d", [("delegation_id", "d")]):
        with pytest.raises(TypeError):
            db.append_delegation_delivery("s", "r", metadata)  # type: ignore[arg-type]
    with pytest.raises(UnknownSessionError):
        db.append_delegation_delivery("nobody", "r", {"delegation_id": "d"})
    for wrong in (None, 5):
        with pytest.raises(TypeError):
            db.append_delegation_delivery(wrong, "r", {"delegation_id": "d"})  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        db.append_delegation_delivery("a\x00b", "r", {"delegation_id": "d"})
    assert db.get_messages("s") == []


def test_reopening_a_session_retires_its_undrained_queue_rows(db: SessionDB) -> None:
    """iot 0.22.2's ``reopen_session`` first deactivates the accept rows a restart left
    undrained (the same rule as ``retire_undrained_queue_rows``), in the same transaction;
    nothing is deleted, another session's rows stay live, and an unknown id retires none."""
    for session_id in ("s", "other"):
        db.create_session(session_id, "telegram")
        db.append_message(session_id, "user", "ran")
        db.append_message(session_id, "user", "queued", display_metadata={"_queued_prompt": 1})
        db.append_message(session_id, "user", "kept", display_metadata={"_queued_prompt": "1"})
    db.end_session("s", "agent_close")
    db.reopen_session("s")
    rows = db.get_messages("s", include_inactive=True)
    assert [(row["content"], bool(row["active"])) for row in rows] == [
        ("ran", True), ("queued", False), ("kept", True)]  # fmt: skip
    session = db.get_session("s")
    assert session is not None and session["ended_at"] is None
    assert all(row["active"] for row in db.get_messages("other", include_inactive=True))
    db.reopen_session("s")  # idempotent: the row stays history
    assert len(db.get_messages("s", include_inactive=True)) == 3
    db.reopen_session("nobody")
    assert db.get_session("nobody") is None
