"""iot 0.22.2's in-place compaction through the facade, on SQLite and PostgreSQL: each
argument of ``archive_and_compact`` (the lease, the ``model_config`` patch, the watermark,
``tail_count``, ``carried_messages``, ``covered_ids`` and ``unresolved_held``), their
combinations, hostile values (typed errors) and a failed call, which leaves the store as it
was. Side by side with the real iot 0.22.2: ``tests/hermes/test_real_iot_in_place_compaction.py``.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionstore.api.session_db import SessionDB
from sessionstore.errors import SessionCompressionInProgressError, UnknownSessionError
from sessionstore.sessions import compaction
from sessionstore.sql import compaction_handoff as handoff
from sessionstore.sql.message_identity import display_identity

SUMMARY = {"role": "user", "content": "[CONTEXT COMPACTION] summary", "timestamp": 1000.0}
CALLS = [{"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]


def turns(db: SessionDB, *texts: str, session_id: str = "s") -> list[int]:
    """A session of alternating user and assistant rows; their ids."""
    if db.get_session(session_id) is None:
        db.create_session(session_id, "cli")
    return [
        db.append_message(session_id, "user" if index % 2 == 0 else "assistant", text)
        for index, text in enumerate(texts)
    ]


def rows(db: SessionDB) -> list[tuple[Any, ...]]:
    statement = sa.text(
        "SELECT id, role, content, active, compacted FROM messages ORDER BY id"
    )
    return [tuple(row) for row in db.store.read(lambda conn: conn.execute(statement).all())]


def state(db: SessionDB) -> tuple[Any, ...]:
    """Everything a compaction may change: the rows, the sessions and the locks."""
    def read(conn: sa.Connection) -> tuple[Any, ...]:
        return tuple(
            [tuple(row) for row in conn.execute(sa.text(query)).all()]
            for query in (
                "SELECT * FROM messages ORDER BY id",
                "SELECT id, message_count, tool_call_count, model_config FROM sessions",
                "SELECT * FROM compression_locks",
            )
        )

    return db.store.read(read)


def flags(db: SessionDB) -> list[tuple[str, int, int]]:
    return [(content, int(active), int(compacted)) for _, _, content, active, compacted in rows(db)]


def counters(db: SessionDB, session_id: str = "s") -> tuple[int, int]:
    session = db.get_session(session_id)
    assert session is not None
    return session["message_count"], session["tool_call_count"]


# -- the plain call and the returned count ------------------------------------------------------
def test_without_arguments_every_live_row_is_summarized(db: SessionDB) -> None:
    turns(db, "u1", "a1")
    assert db.archive_and_compact("s", [SUMMARY, {"role": "assistant", "content": "a1"}]) == 2
    assert flags(db) == [("u1", 0, 1), ("a1", 0, 1), (SUMMARY["content"], 1, 0), ("a1", 1, 0)]
    assert counters(db) == (2, 0)
    live = db.get_messages_as_conversation("s")
    assert [m["content"] for m in live] == [SUMMARY["content"], "a1"]


# -- lock_holder ---------------------------------------------------------------------------------
@pytest.mark.parametrize("holder", ["other", "", "h1\x00"])
def test_a_lease_that_is_not_the_callers_refuses_and_writes_nothing(
    db: SessionDB, holder: str
) -> None:
    turns(db, "u1", "a1")
    assert db.try_acquire_compression_lock("s", "h1", 300)
    before = state(db)
    with pytest.raises(SessionCompressionInProgressError):
        db.archive_and_compact("s", [SUMMARY], model_config_patch={"k": 1}, lock_holder=holder)
    assert state(db) == before


def test_an_expired_or_missing_lease_refuses(db: SessionDB) -> None:
    turns(db, "u1")
    with pytest.raises(SessionCompressionInProgressError):
        db.archive_and_compact("s", [SUMMARY], lock_holder="h1")
    assert db.try_acquire_compression_lock("s", "h1", 300)
    db.store.write(
        lambda conn: conn.execute(sa.text("UPDATE compression_locks SET expires_at = 1"))
    )
    before = state(db)
    with pytest.raises(SessionCompressionInProgressError):
        db.archive_and_compact("s", [SUMMARY], lock_holder="h1")
    assert state(db) == before


def test_the_holders_live_lease_publishes(db: SessionDB) -> None:
    turns(db, "u1")
    assert db.try_acquire_compression_lock("s", "h1", 300)
    assert db.archive_and_compact("s", [SUMMARY], lock_holder="h1") == 1
    assert db.get_compression_lock_holder("s") == "h1"  # the caller releases it


@pytest.mark.parametrize("holder", [1, b"h1", ["h1"]])
def test_a_lock_holder_of_another_type_is_a_type_error(db: SessionDB, holder: Any) -> None:
    turns(db, "u1")
    with pytest.raises(TypeError, match="lock_holder"):
        db.archive_and_compact("s", [SUMMARY], lock_holder=holder)
    assert flags(db) == [("u1", 1, 0)]


# -- model_config_patch --------------------------------------------------------------------------
def test_the_patch_merges_in_the_same_transaction(db: SessionDB) -> None:
    db.create_session("s", "cli", model_config={"gone": 1, "keep": 2, "_branched_from": "p"})
    db.append_message("s", "user", "u1")
    db.archive_and_compact("s", [SUMMARY], model_config_patch={"gone": None, "new": [1, "二"]})
    config = json.loads(db.get_session("s")["model_config"])  # type: ignore[index]
    assert config == {"keep": 2, "_branched_from": "p", "new": [1, "二"]}
    db.archive_and_compact("s", [SUMMARY], model_config_patch={
        "keep": None, "_branched_from": None, "new": None})  # fmt: skip
    assert db.get_session("s")["model_config"] is None  # type: ignore[index]


def test_an_empty_patch_keeps_the_config_and_no_patch_leaves_it(db: SessionDB) -> None:
    db.create_session("s", "cli", model_config={"keep": 2})
    db.archive_and_compact("s", [SUMMARY], model_config_patch={})
    db.archive_and_compact("s", [SUMMARY])
    assert json.loads(db.get_session("s")["model_config"]) == {"keep": 2}  # type: ignore[index]


def test_a_vanished_session_raises_and_nothing_lands(db: SessionDB) -> None:
    turns(db, "u1")
    before = state(db)
    for patch in ({"k": 1}, None):
        with pytest.raises(UnknownSessionError):
            db.archive_and_compact("gone", [SUMMARY], model_config_patch=patch)
    assert state(db) == before


@pytest.mark.parametrize("patch", [["k", 1], "k=1", {"k": object()}, {"k": {1, 2}}])
def test_a_patch_that_is_no_json_dict_is_a_type_error(db: SessionDB, patch: Any) -> None:
    turns(db, "u1")
    before = state(db)
    with pytest.raises((TypeError, ValueError)):
        db.archive_and_compact("s", [SUMMARY], model_config_patch=patch)
    assert state(db) == before


# -- watermark -----------------------------------------------------------------------------------
def test_rows_above_the_watermark_are_cloned_after_the_new_set(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.append_message("s", "user", "u1")
    db.append_message("s", "assistant", None, tool_calls=CALLS)
    mark = db.get_active_message_watermark("s")
    late = db.append_message(
        "s", "assistant", None, tool_calls=CALLS, platform_message_id="p-9",
        api_content="exact bytes", token_count=7, reasoning="why",
    )  # fmt: skip
    assert db.archive_and_compact("s", [SUMMARY], watermark=mark) == 2
    assert flags(db) == [("u1", 0, 1), (None, 0, 1), (None, 0, 0), (SUMMARY["content"], 1, 0),
                         (None, 1, 0)]  # fmt: skip
    assert counters(db) == (2, 1)
    original, clone = (
        next(m for m in db.get_messages("s", include_inactive=True) if m["id"] == row_id)
        for row_id in (late, rows(db)[-1][0])
    )
    assert clone["id"] > original["id"]
    for key in ("content", "tool_calls", "platform_message_id", "api_content", "token_count",
                "reasoning", "timestamp", "message_uid"):  # fmt: skip
        assert clone.get(key) == original.get(key), key


@pytest.mark.parametrize(("mark", "expected"), [
    (10**30, [("u1", 0, 1), ("a1", 0, 1), (SUMMARY["content"], 1, 0)]),
    (-(10**30), [("u1", 0, 0), ("a1", 0, 0), (SUMMARY["content"], 1, 0), ("u1", 1, 0),
                 ("a1", 1, 0)]),
])  # fmt: skip
def test_a_watermark_beyond_64_bits_bounds_as_the_nearest_one(
    db: SessionDB, mark: int, expected: list[Any]
) -> None:
    turns(db, "u1", "a1")
    db.archive_and_compact("s", [SUMMARY], watermark=mark)
    assert flags(db) == expected


@pytest.mark.parametrize("mark", ["3", 3.0, True, [3]])
def test_a_watermark_of_another_type_is_a_type_error(db: SessionDB, mark: Any) -> None:
    turns(db, "u1")
    with pytest.raises(TypeError, match="watermark"):
        db.archive_and_compact("s", [SUMMARY], watermark=mark)
    assert flags(db) == [("u1", 1, 0)]


# -- tail_count and carried_messages -------------------------------------------------------------
def test_the_carried_tail_rewinds_its_originals(db: SessionDB) -> None:
    turns(db, "u1", "a1", "u2", "a2")
    carried = [{"role": "user", "content": "u2"}, {"role": "assistant", "content": "a2"}]
    assert db.archive_and_compact("s", [SUMMARY, *carried], tail_count=2) == 3
    assert flags(db)[:4] == [("u1", 0, 1), ("a1", 0, 1), ("u2", 0, 0), ("a2", 0, 0)]
    hits = db.search_messages("u2")
    assert len(hits) == 1  # the carried copy, not its original too


def test_the_tail_stays_below_the_watermark(db: SessionDB) -> None:
    ids = turns(db, "u1", "a1", "u2")
    db.archive_and_compact("s", [SUMMARY, {"role": "assistant", "content": "a1"}],
                           watermark=ids[1], tail_count=1)  # fmt: skip
    assert flags(db) == [("u1", 0, 1), ("a1", 0, 0), ("u2", 0, 0), (SUMMARY["content"], 1, 0),
                         ("a1", 1, 0), ("u2", 1, 0)]  # fmt: skip


@pytest.mark.parametrize("count", [0, -5])
def test_no_tail_or_a_negative_one_carries_nothing(db: SessionDB, count: int) -> None:
    turns(db, "u1")
    db.archive_and_compact("s", [SUMMARY], tail_count=count)
    assert flags(db)[0] == ("u1", 0, 1)


def test_a_tail_longer_than_the_transcript_carries_every_row(db: SessionDB) -> None:
    turns(db, "u1", "a1")
    db.archive_and_compact("s", [SUMMARY], tail_count=10**30)
    assert flags(db)[:2] == [("u1", 0, 0), ("a1", 0, 0)]


@pytest.mark.parametrize("count", [None, "2", 2.0, False])
def test_a_tail_count_of_another_type_is_a_type_error(db: SessionDB, count: Any) -> None:
    turns(db, "u1")
    with pytest.raises(TypeError, match="tail_count"):
        db.archive_and_compact("s", [SUMMARY], tail_count=count)


def test_carried_originals_are_named_by_row_id_or_identity_and_timestamp(db: SessionDB) -> None:
    ids = turns(db, "u1", "a1", "u2", "a2")
    stored = {m["id"]: m for m in db.get_messages("s")}
    carried = [
        {"role": "user", "content": "  u1 ", "_row_id": ids[0]},  # a load strips the text
        {"role": "assistant", "content": "a1", "timestamp": stored[ids[1]]["timestamp"]},
        {"role": "user", "content": "u2", "_row_id": ids[3]},  # another row's id, no time
        {"role": "assistant", "content": "a2", "_row_id": True, "timestamp": "never"},
        "not a dict", None,
    ]  # fmt: skip
    db.archive_and_compact("s", [SUMMARY], carried_messages=carried)
    assert flags(db)[:4] == [("u1", 0, 0), ("a1", 0, 0), ("u2", 0, 1), ("a2", 0, 1)]


def test_an_ambiguous_carried_dict_names_no_row(db: SessionDB) -> None:
    db.create_session("s", "cli")
    for _ in range(2):
        db.append_message("s", "user", "same", timestamp=50.0)
    db.archive_and_compact("s", [SUMMARY], carried_messages=[
        {"role": "user", "content": "same", "timestamp": 50.0}])  # fmt: skip
    assert flags(db)[:2] == [("same", 0, 1), ("same", 0, 1)]


# -- covered_ids and unresolved_held -------------------------------------------------------------
def test_proved_coverage_archives_only_the_held_rows(db: SessionDB) -> None:
    ids = turns(db, "u1", "a1", "u2", "a2")
    other = db.append_message("s", "user", "from telegram")
    written = db.archive_and_compact(
        "s", [SUMMARY], covered_ids=[ids[0], ids[2], "x", -1, 0, 10**30, True],
        unresolved_held=[{"role": "assistant", "content": "a2", "_db_persisted": True},
                         {"role": "user", "content": "an unpersisted turn"}, 5, None],
    )  # fmt: skip
    assert written == 3  # the summary, and a1 and the other surface's row cloned after it
    assert flags(db) == [
        ("u1", 0, 1), ("a1", 0, 0), ("u2", 0, 1), ("a2", 0, 1), ("from telegram", 0, 0),
        (SUMMARY["content"], 1, 0), ("a1", 1, 0), ("from telegram", 1, 0),
    ]  # fmt: skip
    assert other < rows(db)[-1][0]


@pytest.mark.parametrize("held", [
    [{"role": "user", "content": "nowhere", "_db_persisted": True}],  # a durable row unnamed
    [{"role": "user", "content": "dup", "_db_persisted": True}],  # two rows match
    [{"role": "user", "content": "a1", "_merged_durable_rows": 2}],  # a run not found
    [{"role": "tool", "content": "x", "_retired_row": True}],  # a retired row not found
])  # fmt: skip
def test_an_unproved_coverage_falls_back_to_the_watermark(
    db: SessionDB, held: list[dict[str, Any]]
) -> None:
    ids = turns(db, "dup", "a1", "dup", "a2")
    db.archive_and_compact("s", [SUMMARY], covered_ids=[ids[1]], unresolved_held=held,
                           watermark=ids[2])  # fmt: skip
    assert flags(db) == [("dup", 0, 1), ("a1", 0, 1), ("dup", 0, 1), ("a2", 0, 0),
                         (SUMMARY["content"], 1, 0), ("a2", 1, 0)]  # fmt: skip


def test_a_merged_turn_is_named_by_its_run_and_the_tail_stands_for_both(db: SessionDB) -> None:
    db.create_session("s", "cli")
    for role, text in (("user", "u1"), ("user", "[Tue 2026-04-28 13:40:53 CEST] u2"),
                       ("assistant", "a1"), ("user", "later")):  # fmt: skip
        db.append_message("s", role, text)
    merged = {"role": "user", "content": "[Tue 2026-04-28 13:40:53 CEST] u1\n\n"
              "[Tue 2026-04-28 13:40:53 CEST] u2", "_merged_durable_rows": 2,
              "_db_persisted": True}  # fmt: skip
    carried = [merged, {"role": "assistant", "content": "a1"}]
    db.archive_and_compact("s", [SUMMARY, *carried], covered_ids=[3], tail_count=1,
                           unresolved_held=[merged])  # fmt: skip
    # Held: the run (1, 2) and a1 (3); the tail of one is a1; "later" was never held.
    assert [f[1:] for f in flags(db)][:4] == [(0, 1), (0, 1), (0, 0), (0, 0)]
    db.archive_and_compact("s", [SUMMARY], covered_ids=[], unresolved_held=[merged])
    # Its run is no longer live: the proof is abandoned, the watermark path (none) archives all.
    assert [f[1:] for f in flags(db)][-2:] == [(0, 1), (1, 0)]
    db.store.write(lambda conn: conn.execute(sa.text("DELETE FROM messages")))
    for role, text in (("user", "u1"), ("user", "[Tue 2026-04-28 13:40:53 CEST] u2"),
                       ("assistant", "a1")):  # fmt: skip
        db.append_message("s", role, text)
    first = rows(db)[0][0]
    db.archive_and_compact("s", [SUMMARY, *carried], covered_ids=[first + 2], tail_count=2,
                           unresolved_held=[merged])  # fmt: skip
    # A tail of two whose first dict merged two rows stands for all three.
    assert [f[1:] for f in flags(db)] == [(0, 0), (0, 0), (0, 0), (1, 0), (1, 0), (1, 0)]


def test_a_retired_row_is_named_by_its_identity(db: SessionDB) -> None:
    ids = turns(db, "u1", "a1")
    db.append_message("s", "tool", "orphan", tool_call_id="gone")
    db.archive_and_compact("s", [SUMMARY], covered_ids=ids, unresolved_held=[
        {"role": "tool", "content": "orphan", "tool_call_id": "gone", "_retired_row": True,
         "_own_row": True}])  # fmt: skip
    assert [f[1:] for f in flags(db)] == [(0, 1), (0, 1), (0, 1), (1, 0)]


@pytest.mark.parametrize(("name", "value"), [
    ("covered_ids", "1,2"), ("covered_ids", 3), ("covered_ids", {1: 1}),
    ("unresolved_held", {"role": "user"}), ("unresolved_held", "x"),
    ("carried_messages", {"role": "user"}), ("carried_messages", 7),
])  # fmt: skip
def test_a_list_argument_of_another_type_is_a_type_error(
    db: SessionDB, name: str, value: Any
) -> None:
    turns(db, "u1")
    before = state(db)
    with pytest.raises(TypeError, match=name):
        db.archive_and_compact("s", [SUMMARY], **{name: value})
    assert state(db) == before


@pytest.mark.parametrize("held", [
    [{"role": "tool", "_retired_row": True, "tool_call_ids": 5}],
    [{"role": "user", "content": "u1", "_merged_durable_rows": 2, "_retired_durable_rows": 3}],
    [{"role": "user", "content": "u1", "_absorbed_row_ids": 4}],
])  # fmt: skip
def test_a_hostile_held_dict_fails_and_nothing_lands(
    db: SessionDB, held: list[dict[str, Any]]
) -> None:
    turns(db, "u1", "u1")
    before = state(db)
    with pytest.raises(TypeError):
        db.archive_and_compact("s", [SUMMARY], covered_ids=[], unresolved_held=held)
    assert state(db) == before


@pytest.mark.parametrize("text", ["nul\x00", "lone \ud800"])
def test_unstorable_text_in_a_held_dict_names_nothing(db: SessionDB, text: str) -> None:
    ids = turns(db, "u1")
    db.archive_and_compact("s", [SUMMARY], covered_ids=ids, unresolved_held=[
        {"role": text, "content": text, "_db_persisted": True}])  # fmt: skip
    assert flags(db)[0] == ("u1", 0, 1)  # the watermark path (none): all archived


# -- failures leave nothing --------------------------------------------------------------------
def test_a_failure_after_the_writes_began_leaves_the_store_unchanged(
    db: SessionDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    db.create_session("s", "cli", model_config={"keep": 1})
    ids = turns(db, "u1", "a1", "u2")
    assert db.try_acquire_compression_lock("s", "h1", 300)
    before = state(db)

    def broken(*_: Any) -> None:
        raise RuntimeError("disk gone")

    monkeypatch.setattr(compaction, "clone_rows", broken)
    with pytest.raises(RuntimeError, match="disk gone"):
        db.archive_and_compact(
            "s", [SUMMARY], model_config_patch={"keep": None}, watermark=ids[0],
            lock_holder="h1", tail_count=1, carried_messages=[{"role": "user", "content": "u1",
                                                               "_row_id": ids[0]}],
        )  # fmt: skip
    assert state(db) == before


@pytest.mark.parametrize("batch", [["not a dict"], {"role": "user"}, "text", [{"role": 5}]])
def test_a_malformed_compacted_set_is_a_type_error(db: SessionDB, batch: Any) -> None:
    turns(db, "u1")
    before = state(db)
    with pytest.raises(TypeError):
        db.archive_and_compact("s", batch)
    assert state(db) == before


# -- the display index ---------------------------------------------------------------------------
def test_a_copy_with_its_originals_identity_joins_its_display_group(
    db: SessionDB, store_url: str
) -> None:
    db.create_session("s", "cli")
    first = db.append_message("s", "user", "u1", timestamp=10.0)
    db.archive_and_compact("s", [{"role": "user", "content": "u1", "timestamp": 10.0}])
    order = dict(db.store.read(lambda conn: conn.execute(
        sa.text("SELECT id, display_order FROM messages")).all()))  # fmt: skip
    if store_url.startswith("sqlite"):
        assert order == {first: first, first + 1: first}  # one logical message, painted once
    else:
        assert set(order.values()) == {None}  # no trigger keeps it there (message_identity)
    assert len(db.get_messages("s", include_inactive=True)) == 2


def test_every_argument_by_position(db: SessionDB) -> None:
    ids = turns(db, "u1", "a1")
    assert db.try_acquire_compression_lock("s", "h", 300)
    assert db.archive_and_compact(
        "s", [SUMMARY, {"role": "assistant", "content": "a1"}], {"k": 1}, ids[1], "h", 1,
        [], [ids[0]], [{"role": "assistant", "content": "a1", "_db_persisted": True}],
    ) == 2  # fmt: skip
    assert flags(db)[:2] == [("u1", 0, 1), ("a1", 0, 0)]
    assert json.loads(db.get_session("s")["model_config"]) == {"k": 1}  # type: ignore[index]


def test_the_compacted_dicts_are_stamped_with_their_rows_once_committed(db: SessionDB) -> None:
    turns(db, "u1", "a1")
    summary = dict(SUMMARY)
    call = {"role": "assistant", "content": None, "tool_calls": CALLS}
    result = {"role": "tool", "content": "r", "tool_call_id": "c1"}
    db.archive_and_compact("s", [summary, call, result])
    live = db.get_messages("s")
    assert [m["_row_id"] for m in (summary, call, result)] == [m["id"] for m in live]
    assert [m["message_uid"] for m in (summary, call, result)] == [
        m["message_uid"] for m in live]  # fmt: skip
    assert summary["timestamp"] == SUMMARY["timestamp"]
    assert set(call["_tool_call_uids"]) == {"c1"}
    assert result["_tool_call_uid"] == call["_tool_call_uids"]["c1"]
    # The next compaction names what it holds by those ids.
    late = db.append_message("s", "user", "late")
    held = [summary["_row_id"], call["_row_id"], result["_row_id"]]
    db.archive_and_compact("s", [SUMMARY], covered_ids=held)
    assert flags(db)[-2:] == [(SUMMARY["content"], 1, 0), ("late", 1, 0)]
    assert late < rows(db)[-1][0]


def test_a_failed_call_stamps_nothing(db: SessionDB) -> None:
    turns(db, "u1")
    summary = dict(SUMMARY)
    with pytest.raises(SessionCompressionInProgressError):
        db.archive_and_compact("s", [summary], lock_holder="nobody")
    assert summary == SUMMARY


CARRIER = (f"{handoff.LEGACY_SUMMARY_PREFIX} what happened\n{handoff.SUMMARY_END_MARKER}\n\n"
           "the live ask")  # fmt: skip


def test_every_row_a_compaction_writes_has_its_display_identity(db: SessionDB) -> None:
    """The summary and a carrier of a live ask get iot's identity, on both dialects (iot keys
    the carrier by its ask); the clone of a row that arrived during the summary too."""
    turns(db, "u1", "a1")
    db.archive_and_compact("s", [SUMMARY, {"role": "user", "content": CARRIER, "timestamp": 7.0}],
                           watermark=1)  # fmt: skip
    query = sa.text(
        "SELECT role, content, timestamp, tool_call_id, tool_calls, tool_name, display_kind, "
        "display_identity FROM messages WHERE active = 1 ORDER BY id"
    )
    stored = db.store.read(lambda conn: conn.execute(query).mappings().all())
    assert [row["content"] for row in stored] == [SUMMARY["content"], CARRIER, "a1"]
    assert [bytes(row["display_identity"]) for row in stored] == [
        display_identity(row) for row in stored]  # fmt: skip
    assert bytes(stored[1]["display_identity"]) == hashlib.sha256(
        repr(("user", "the live ask", 7.0, None, None, None)).encode()).digest()  # fmt: skip


CONTENT_PARTS = st.one_of(
    st.sampled_from([
        handoff.SUMMARY_END_MARKER, handoff.MERGED_SUMMARY_DELIMITER,
        handoff.MERGED_PRIOR_CONTEXT_HEADER, handoff.LEGACY_SUMMARY_PREFIX,
        handoff.SUMMARY_PREFIX, "\x00json:", "\ufffdjson:", "[", " ", "\n", "ask",
        *sorted(handoff.SYNTHETIC_USER_TEXTS)[:2], *handoff.SYNTHETIC_USER_PREFIXES,
    ]),
    st.text(max_size=4),
)  # fmt: skip
HOSTILE_CONTENT = st.one_of(
    st.lists(CONTENT_PARTS, max_size=6).map("".join),
    st.lists(st.one_of(
        st.lists(CONTENT_PARTS, max_size=4).map(lambda parts: {"type": "text",
                                                                "text": "".join(parts)}),
        st.dictionaries(st.sampled_from(["type", "text", "image_url"]),
                        st.one_of(st.none(), st.integers(), CONTENT_PARTS), max_size=3),
        CONTENT_PARTS,
    ), max_size=4).map(lambda parts: "\x00json:" + json.dumps(parts)),
    st.just("\x00json:[" * 3000),
)  # fmt: skip


@given(content=HOSTILE_CONTENT, kind=st.sampled_from([None, "", "hidden", "steer", "notice"]))
@settings(max_examples=200, deadline=None)
def test_any_stored_content_has_one_display_identity(content: str, kind: str | None) -> None:
    """Whatever a user row holds (marker soup, parts of any shape, undecodable or too deeply
    nested JSON), its identity is a SHA-256 digest, never an error, and the same each time."""
    row = {"role": "user", "content": content, "timestamp": 1.0, "tool_call_id": None,
           "tool_calls": None, "tool_name": None, "display_kind": kind}  # fmt: skip
    identity = display_identity(row)
    assert len(identity) == 32 and identity == display_identity(dict(row))
