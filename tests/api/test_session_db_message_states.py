"""The later-Hermes state through the facade, on SQLite and PostgreSQL.

Message states (live, compaction-archived, rewound), rewind/restore, archiving across a
lineage, listing and deletion rules by child kind (tables of cases), api_call_count, cwd and
git, gateway peers, the handoff state machine, state_meta and the compression lease (with
property tests for rewind/restore and the lease).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessionstore.api.session_db import SessionDB
from sessionstore.ops import doctor
from sessionstore.schema import migrate
from sessionstore.sessions.repository import SessionRepository
from sessionstore.storage.store import Store


def execute(db: SessionDB, sql: str, **params: Any) -> None:
    db.store.write(lambda conn: conn.execute(sa.text(sql), params))


def session(db: SessionDB, session_id: str, *, started_at: float, parent: str | None = None,
            model_config: dict[str, Any] | None = None, source: str = "cli",
            ended_at: float | None = None, end_reason: str | None = None,
            title: str | None = None) -> None:  # fmt: skip
    db.create_session(session_id, source, model_config=model_config, parent_session_id=parent)
    execute(
        db,
        "UPDATE sessions SET started_at = :s, ended_at = :e, end_reason = :r, title = :t "
        "WHERE id = :id",
        s=started_at, e=ended_at, r=end_reason, t=title, id=session_id,
    )  # fmt: skip


def ids_of(rows: list[dict[str, Any]]) -> list[Any]:
    return [row["id"] for row in rows]


# -- message states ------------------------------------------------------------------------

# (active, compacted) -> replayed by default, searched by default, searched with include_inactive
MESSAGE_STATE_CASES = [
    pytest.param(1, 0, True, True, True, id="live"),
    pytest.param(0, 1, False, True, True, id="compaction-archived"),
    pytest.param(0, 0, False, False, True, id="rewound"),
]


@pytest.mark.parametrize(("active", "compacted", "replayed", "searched", "searched_all"),
                         MESSAGE_STATE_CASES)  # fmt: skip
def test_message_states_decide_replay_and_search(
    db: SessionDB, active: int, compacted: int, replayed: bool, searched: bool,
    searched_all: bool,
) -> None:  # fmt: skip
    db.create_session("s", "cli")
    message_id = db.append_message("s", "user", "zanzibar archipelago")
    execute(db, "UPDATE messages SET active = :a, compacted = :c WHERE id = :id",
            a=active, c=compacted, id=message_id)  # fmt: skip

    assert (message_id in ids_of(db.get_messages("s"))) is replayed
    assert ids_of(db.get_messages("s", include_inactive=True)) == [message_id]
    assert bool(db.get_messages_as_conversation("s")) is replayed
    assert len(db.get_messages_as_conversation("s", include_inactive=True)) == 1
    assert bool(db.search_messages("zanzibar")) is searched
    assert bool(db.search_messages("zanzibar", include_inactive=True)) is searched_all
    assert db.has_archived_messages("s") is (active == 0)
    exported = db.export_session("s")
    assert exported is not None and ids_of(exported["messages"]) == [message_id]


def test_rewind_then_restore(db: SessionDB) -> None:
    db.create_session("s", "cli")
    first = db.append_message("s", "user", "first question")
    answer = db.append_message("s", "assistant", "first answer")
    second = db.append_message("s", "user", "second question")
    db.append_message("s", "assistant", "second answer")

    with pytest.raises(ValueError):
        db.rewind_to_message("s", answer)  # not a user message
    db.create_session("other", "cli")
    with pytest.raises(ValueError):
        db.rewind_to_message("other", second)  # not this session's

    result = db.rewind_to_message("s", second)
    assert result["rewound_count"] == 2
    assert result["target_message"]["id"] == second
    assert result["target_message"]["content"] == "second question"
    assert result["new_head_id"] == answer
    assert ids_of(db.get_messages("s")) == [first, answer]
    session_row = db.get_session("s")
    assert session_row is not None and session_row["rewind_count"] == 1
    recent = db.list_recent_user_messages("s")
    assert [item["id"] for item in recent] == [first]
    assert [item["id"] for item in db.list_recent_user_messages("s", include_inactive=True)] == [
        second, first,
    ]  # fmt: skip

    assert db.restore_rewound("s", second) == 2
    assert len(db.get_messages("s")) == 4
    assert db.restore_rewound("s", second) == 0


def test_list_recent_user_messages_previews_80_characters(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.append_message("s", "user", "line one\nline two " + "x" * 200)
    (item,) = db.list_recent_user_messages("s", limit=5)
    assert len(item["preview"]) == 80 and "\n" not in item["preview"]
    assert db.list_recent_user_messages("s", limit=0) == []


def test_archive_and_compact_in_one_transaction(db: SessionDB) -> None:
    db.create_session("s", "cli")
    old = [db.append_message("s", "user", f"old turn {n} quetzal") for n in range(3)]
    written = db.archive_and_compact(
        "s",
        [{"role": "user", "content": "[CONTEXT SUMMARY] we talked"},
         {"role": "assistant", "content": "ok", "tool_calls": [{"id": "c", "type": "function"}]}],
    )  # fmt: skip
    assert written == 2
    live = db.get_messages("s")
    assert [m["content"] for m in live] == ["[CONTEXT SUMMARY] we talked", "ok"]
    assert all(m["id"] not in old for m in live)
    row = db.get_session("s")
    assert row is not None and row["message_count"] == 2 and row["tool_call_count"] == 1
    # Archived by compaction: still searchable, not replayed, and never "restored".
    assert len(db.search_messages("quetzal")) == 3
    assert db.restore_rewound("s", old[0]) == 0
    with pytest.raises(TypeError):
        db.archive_and_compact("s", ["not a dict"])  # type: ignore[list-item]
    assert len(db.get_messages("s")) == 2, "a refused compaction changed nothing"


def test_doctor_accepts_the_counters_of_a_compaction_and_counts_on_from_them(
    db: SessionDB,
) -> None:
    # Hermes 0.18's archive_and_compact sets the counters to the compacted set; appends count
    # on from there. That is no damage for doctor, and --fix writes that rule back.
    db.create_session("s", "cli")
    for n in range(4):
        db.append_message("s", "user", f"turn {n}")
    db.append_message("s", "assistant", None, tool_calls=[{"id": "c1", "type": "function"}])
    db.archive_and_compact("s", [{"role": "user", "content": "[summary]"}])
    db.append_message("s", "assistant", "after", tool_calls=[{"id": "c2", "type": "function"}])
    row = db.get_session("s")
    assert row is not None and (row["message_count"], row["tool_call_count"]) == (2, 1)

    report = doctor.diagnose(db.store)
    assert report.problems == []
    db.store.write(lambda conn: conn.execute(sa.text(
        "UPDATE sessions SET message_count = 9, tool_call_count = 7 WHERE id = 's'")))  # fmt: skip
    damaged = doctor.diagnose(db.store)
    assert {check.name for check in damaged.problems} == {"message_counts", "tool_call_counts"}
    doctor.repair(db.store, damaged)
    row = db.get_session("s")
    assert row is not None and (row["message_count"], row["tool_call_count"]) == (2, 1)


def test_replace_messages_active_only_keeps_inactive_rows(db: SessionDB) -> None:
    db.create_session("s", "cli")
    kept = db.append_message("s", "user", "rewound one")
    db.append_message("s", "user", "live one")
    execute(db, "UPDATE messages SET active = 0 WHERE id = :id", id=kept)
    assert db.replace_messages("s", [{"role": "user", "content": "new"}], active_only=True) == 1
    everything = db.get_messages("s", include_inactive=True)
    assert [m["content"] for m in everything] == ["rewound one", "new"]
    assert db.replace_messages("s", [{"role": "user", "content": "only"}]) == 1
    assert [m["content"] for m in db.get_messages("s", include_inactive=True)] == ["only"]


def test_conversation_carries_the_later_fields(db: SessionDB) -> None:
    db.create_session("s", "telegram")
    db.append_message("s", "user", "hi", platform_message_id="tg-7", observed=True)
    db.append_message("s", "assistant", "hello", reasoning_content="",
                      codex_message_items=[{"id": "m1", "phase": "final"}])  # fmt: skip
    user, assistant = db.get_messages_as_conversation("s")
    assert user["message_id"] == "tg-7" and user["observed"] is True
    assert assistant["reasoning_content"] == ""  # an empty string counts
    assert assistant["codex_message_items"] == [{"id": "m1", "phase": "final"}]
    assert db.has_platform_message_id("s", "tg-7")
    assert not db.has_platform_message_id("s", "tg-8")


def test_conversation_with_ancestors_walks_the_compression_chain(db: SessionDB) -> None:
    session(db, "a", started_at=1.0, ended_at=2.0, end_reason="compression")
    session(db, "b", started_at=3.0, parent="a")
    db.append_message("a", "user", "from a")
    db.append_message("b", "user", "from b")
    assert [m["content"] for m in db.get_messages_as_conversation("b")] == ["from b"]
    assert [m["content"] for m in db.get_messages_as_conversation("b", include_ancestors=True)] == [
        "from a", "from b",
    ]  # fmt: skip


# -- listing, archiving and deletion rules ------------------------------------------------


@pytest.fixture
def family(db: SessionDB) -> SessionDB:
    """Every kind of session a later Hermes file holds."""
    session(db, "root", started_at=100.0, ended_at=200.0, end_reason="branched")
    session(db, "branch-marked", started_at=150.0, parent="root",
            model_config={"_branched_from": "root"})  # fmt: skip
    session(db, "branch-after", started_at=250.0, parent="root")
    session(db, "before-branch", started_at=120.0, parent="root")
    session(db, "comp-root", started_at=300.0, ended_at=400.0, end_reason="compression",
            title="compressed")  # fmt: skip
    session(db, "comp-child", started_at=401.0, parent="comp-root")
    session(db, "delegate", started_at=500.0, parent="root", source="subagent",
            model_config={"_delegate_from": "root"})  # fmt: skip
    session(db, "orphan-run", started_at=600.0,
            model_config={"_delegate_from": "__orphaned__"})  # fmt: skip
    session(db, "archived", started_at=700.0)
    db.set_session_archived("archived")
    return db


LISTING_CASES = [
    pytest.param({}, {"root", "branch-marked", "branch-after", "comp-root"}, id="default"),
    pytest.param({"include_archived": True},
                 {"root", "branch-marked", "branch-after", "comp-root", "archived"},
                 id="include-archived"),
    pytest.param({"archived_only": True}, {"archived"}, id="archived-only"),
    pytest.param({"include_children": True},
                 {"root", "branch-marked", "branch-after", "before-branch", "comp-root",
                  "comp-child", "delegate", "orphan-run"}, id="include-children"),
]  # fmt: skip
# Ordered by activity (Hermes 0.18), a listing lists the very same sessions.
LISTING_CASES += [
    pytest.param({**param.values[0], "order_by_last_active": True}, param.values[1],
                 id=f"{param.id}-by-activity")
    for param in list(LISTING_CASES)
]  # fmt: skip


@pytest.mark.parametrize(("options", "listed"), LISTING_CASES)
def test_listing_rules(family: SessionDB, options: dict[str, Any], listed: set[str]) -> None:
    rows = family.list_sessions_rich(limit=100, project_compression_tips=False, **options)
    assert set(ids_of(rows)) == listed


COUNT_CASES = [
    pytest.param({}, 8, id="all-but-archived"),
    pytest.param({"include_archived": True}, 9, id="include-archived"),
    pytest.param({"archived_only": True}, 1, id="archived-only"),
    pytest.param({"exclude_children": True}, 4, id="picker"),
    pytest.param({"exclude_sources": ["subagent"]}, 7, id="exclude-source"),
    pytest.param({"min_message_count": 1}, 0, id="with-a-message"),
    pytest.param({"min_message_count": 0, "exclude_children": True}, 4, id="zero-is-no-filter"),
]


@pytest.mark.parametrize(("options", "count"), COUNT_CASES)
def test_count_rules(family: SessionDB, options: dict[str, Any], count: int) -> None:
    assert family.session_count(**options) == count


def test_compression_root_is_listed_as_its_tip(family: SessionDB) -> None:
    rows = {row["id"]: row for row in family.list_sessions_rich(limit=100)}
    assert "comp-child" in rows and rows["comp-child"]["_lineage_root_id"] == "comp-root"


def test_archiving_follows_the_compression_lineage(db: SessionDB) -> None:
    session(db, "a", started_at=1.0, ended_at=2.0, end_reason="compression")
    session(db, "b", started_at=3.0, ended_at=4.0, parent="a", end_reason="compression")
    session(db, "c", started_at=5.0, parent="b")
    session(db, "side", started_at=6.0, parent="c", model_config={"_branched_from": "c"})
    assert db.set_session_archived("b") is True
    archived = {row["id"]: row["archived"] for row in db.export_all()}
    assert archived == {"a": 1, "b": 1, "c": 1, "side": 0}
    assert db.set_session_archived("c", False) is True
    assert {row["id"]: row["archived"] for row in db.export_all()}["a"] == 0
    assert db.set_session_archived("ghost") is False


# child kind -> deleted with its parent (True) or orphaned (False)
DELETION_CASES = [
    pytest.param({"_delegate_from": "p"}, "p", True, id="delegate-of-parent"),
    pytest.param({"_delegate_from": "elsewhere"}, "p", True, id="delegate-under-parent"),
    pytest.param({"_branched_from": "p"}, "p", False, id="branch"),
    pytest.param(None, "p", False, id="untagged"),
    pytest.param({"_delegate_from": "p"}, None, True, id="delegate-already-orphaned"),
]


@pytest.mark.parametrize(("config", "parent", "deleted"), DELETION_CASES)
def test_deletion_rules_by_child_kind(
    db: SessionDB, config: dict[str, Any] | None, parent: str | None, deleted: bool
) -> None:
    session(db, "p", started_at=1.0, ended_at=2.0, end_reason="compression")
    session(db, "kid", started_at=3.0, parent=parent, model_config=config)
    session(db, "grandkid", started_at=4.0, parent="kid", model_config={"_delegate_from": "kid"})
    db.append_message("kid", "user", "kid message")
    assert db.delete_session("p") is True
    kid = db.get_session("kid")
    assert (kid is None) is deleted
    assert (db.get_session("grandkid") is None) is deleted, "delegates cascade recursively"
    if kid is not None:
        assert kid["parent_session_id"] is None
        assert len(db.get_messages("kid")) == 1
    else:
        assert db.message_count("kid") == 0


def test_prune_orphans_every_child(db: SessionDB) -> None:
    session(db, "old", started_at=1.0, ended_at=2.0, end_reason="done")
    session(db, "helper", started_at=3.0, parent="old", model_config={"_delegate_from": "old"})
    assert db.prune_sessions(older_than_days=1) >= 1
    helper = db.get_session("helper")
    assert helper is None or helper["parent_session_id"] is None


def test_delete_sessions_counts_the_given_ids(db: SessionDB) -> None:
    session(db, "a", started_at=1.0)
    session(db, "b", started_at=2.0)
    assert db.delete_sessions(["a", "b", "ghost"]) == 2
    assert db.session_count(include_archived=True) == 0


# -- counters, cwd, meta --------------------------------------------------------------------


def test_api_call_count_adds_or_sets(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.update_token_counts("s", input_tokens=5, api_call_count=2)
    db.update_token_counts("s", api_call_count=3)
    row = db.get_session("s")
    assert row is not None and row["api_call_count"] == 5
    db.update_token_counts("s", api_call_count=1, absolute=True)
    row = db.get_session("s")
    assert row is not None and row["api_call_count"] == 1
    with pytest.raises(TypeError):
        db.update_token_counts("s", api_call_count="7")  # type: ignore[arg-type]


def test_cwd_git_and_repo_root_backfill(db: SessionDB) -> None:
    db.create_session("s", "cli", cwd="/w/app", git_branch="main")
    db.create_session("t", "cli")
    db.update_session_cwd("t", "/w/lib", git_branch="", git_repo_root=None)
    row = db.get_session("s")
    assert row is not None and (row["cwd"], row["git_branch"]) == ("/w/app", "main")
    assert db.backfill_repo_roots({"/w/app": "/w", "/w/lib": "/w"}) == 2
    assert db.backfill_repo_roots({"/w/app": "/other"}) == 0, "only empty roots are filled"
    def cwds(**kwargs: Any) -> list[str]:
        return [row["cwd"] for row in db.distinct_session_cwds(**kwargs)]

    assert cwds() == ["/w/app", "/w/lib"]
    db.set_session_archived("t")
    assert cwds() == ["/w/app"]
    assert cwds(include_archived=True) == ["/w/app", "/w/lib"]
    assert {r["id"] for r in db.list_sessions_rich(cwd_prefix="/w/app")} == {"s"}
    assert db.list_sessions_rich(cwd_prefix="/w/a") == [], "a directory, not a string prefix"
    with pytest.raises(TypeError):
        db.create_session("u", "cli", no_such_column="x")


def test_meta_upserts(db: SessionDB) -> None:
    assert db.get_meta("last_auto_prune") is None
    db.set_meta("last_auto_prune", "1")
    db.set_meta("last_auto_prune", "2")
    assert db.get_meta("last_auto_prune") == "2"
    assert db.get_meta("bad\x00key") is None


# -- gateway peers and handoff ----------------------------------------------------------------


PEER_CASES = [
    pytest.param({"session_key": "k1"}, "new", id="exact-key"),
    # By the tuple, every session of the peer qualifies: the newest resumable one wins.
    pytest.param({"session_key": "nope", "chat_id": "42", "chat_type": "dm", "user_id": "u"},
                 "closed", id="peer-tuple"),
    pytest.param({"session_key": "nope"}, None, id="no-tuple-no-fallback"),
    pytest.param({"session_key": "nope", "chat_id": "42", "chat_type": "group", "user_id": "u"},
                 None, id="other-chat-type"),
    # As every Hermes: the tuple stands in for a key the row lacks, not for no key at all.
    pytest.param({"chat_id": "42", "chat_type": "dm", "user_id": "u"}, None, id="no-key"),
    pytest.param({"session_key": "k-ended"}, None, id="ended-is-not-resumable"),
    pytest.param({"session_key": "k-closed"}, "closed", id="agent-close-is-resumable"),
    pytest.param({"session_key": "k-empty"}, None, id="needs-messages"),
]  # fmt: skip


@pytest.mark.parametrize(("query", "expected"), PEER_CASES)
def test_gateway_peer_lookup(db: SessionDB, query: dict[str, Any], expected: str | None) -> None:
    for session_id, key, started, end_reason, with_message in (
        ("old", "k1", 1.0, None, True),
        ("new", "k1", 2.0, None, True),
        ("ended", "k-ended", 3.0, "user_exit", True),
        ("closed", "k-closed", 4.0, "agent_close", True),
        ("empty", "k-empty", 5.0, None, False),
    ):
        session(db, session_id, started_at=started, source="telegram",
                ended_at=started + 1 if end_reason else None, end_reason=end_reason)  # fmt: skip
        db.record_gateway_session_peer(session_id, source="telegram", user_id="u",
                                       session_key=key, chat_id="42", chat_type="dm")  # fmt: skip
        if with_message:
            db.append_message(session_id, "user", "hello")
    found = db.find_latest_gateway_session_for_peer(source="telegram", **query)
    assert (found["id"] if found else None) == expected
    assert db.find_latest_gateway_session_for_peer(source="discord", session_key="k1") is None


@pytest.mark.parametrize("by_key", [True, False], ids=["by-key", "by-peer"])
@pytest.mark.parametrize("reason", ["session_reset", "idle", "daily"])
def test_gateway_recovery_never_reaches_behind_a_newer_reset(
    db: SessionDB, by_key: bool, reason: str
) -> None:
    # /new (or an idle or daily reset) ended a later session of the peer: the chat's newest
    # event is a deliberate fresh start, so the older conversation still open behind it is not
    # the one to recover (iot 0.22.2, #68539). A recoverable row active after the reset is.
    peer = {"user_id": "u", "chat_id": "42", "chat_type": "dm"}
    key = "agent:main:telegram:dm:42"
    for session_id, started in (("before", 1.0), ("reset", 2.0)):
        session(db, session_id, started_at=started, source="telegram")
        db.record_gateway_session_peer(session_id, source="telegram", session_key=key, **peer)
        db.append_message(session_id, "user", "hello")
    db.end_session("reset", reason)
    query: dict[str, Any] = {"session_key": key} if by_key else {"session_key": "k?", **peer}
    assert db.find_latest_gateway_session_for_peer(source="telegram", **query) is None
    session(db, "after", started_at=time.time() + 60, source="telegram")
    db.record_gateway_session_peer("after", source="telegram", session_key=key, **peer)
    db.append_message("after", "user", "a fresh start")
    found = db.find_latest_gateway_session_for_peer(source="telegram", **query)
    assert found is not None and found["id"] == "after"


def test_a_peer_of_a_missing_session_creates_nothing(db: SessionDB) -> None:
    assert db.record_gateway_session_peer("nobody", source="telegram", session_key="k",
                                          chat_id="1", chat_type="dm") is False  # fmt: skip
    assert db.get_session("nobody") is None


def test_record_peer_needs_a_session_key(db: SessionDB) -> None:
    db.create_session("s", "telegram")
    assert db.record_gateway_session_peer("s", source="telegram", chat_id="1") is False
    row = db.get_session("s")
    assert row is not None and row["chat_id"] is None


# (starting state, action) -> accepted, resulting state
HANDOFF_CASES = [
    (None, "request", True, "pending"),
    ("completed", "request", True, "pending"),
    ("failed", "request", True, "pending"),
    ("pending", "request", False, "pending"),
    ("running", "request", False, "running"),
    ("pending", "claim", True, "running"),
    ("running", "claim", False, "running"),
    (None, "claim", False, None),
    ("running", "complete", True, "completed"),
    ("pending", "fail", True, "failed"),
    ("completed", "fail", False, "completed"),
    (None, "complete", False, None),
]


@pytest.mark.parametrize(("start", "action", "accepted", "after"), HANDOFF_CASES)
def test_handoff_state_machine(
    db: SessionDB, start: str | None, action: str, accepted: bool, after: str | None
) -> None:
    db.create_session("s", "cli")
    execute(db, "UPDATE sessions SET handoff_state = :s WHERE id = 's'", s=start)
    outcome = {
        "request": lambda: db.request_handoff("s", "telegram"),
        "claim": lambda: db.claim_handoff("s"),
        "complete": lambda: db.complete_handoff("s"),
        "fail": lambda: db.fail_handoff("s", "boom " * 200),
    }[action]()
    assert outcome is accepted
    state = db.get_handoff_state("s")
    assert state is not None and state["state"] == after
    if action == "fail" and accepted:
        assert len(state["error"]) == 500


def test_pending_handoffs_oldest_first(db: SessionDB) -> None:
    session(db, "late", started_at=20.0)
    session(db, "early", started_at=10.0)
    db.request_handoff("late", "telegram")
    db.request_handoff("early", "discord")
    assert ids_of(db.list_pending_handoffs()) == ["early", "late"]
    assert db.get_handoff_state("ghost") is None


# -- the compression lease -------------------------------------------------------------------


def test_lease_semantics(db: SessionDB) -> None:
    assert db.try_acquire_compression_lock("s", "a", ttl_seconds=60) is True
    assert db.try_acquire_compression_lock("s", "b", ttl_seconds=60) is False
    assert db.get_compression_lock_holder("s") == "a"
    assert db.refresh_compression_lock("s", "b") is False
    assert db.refresh_compression_lock("s", "a", ttl_seconds=120) is True
    assert db.release_compression_lock("s", "b") is False
    assert db.release_compression_lock("s", "a") is True
    assert db.release_compression_lock("s", "a") is False, "idempotent"
    assert db.get_compression_lock_holder("s") is None
    for bad in (0, -1, math.nan, math.inf):
        with pytest.raises(ValueError):
            db.try_acquire_compression_lock("s", "a", ttl_seconds=bad)


def test_cooldown_only_while_in_the_future(db: SessionDB) -> None:
    db.create_session("s", "cli")
    assert db.get_compression_failure_cooldown("s") is None
    db.record_compression_failure_cooldown("s", 4e9, "rate limited")
    cooldown = db.get_compression_failure_cooldown("s")
    assert cooldown is not None and cooldown["error"] == "rate limited"
    assert cooldown["remaining_seconds"] > 0
    db.record_compression_failure_cooldown("s", 1.0, "old")
    assert db.get_compression_failure_cooldown("s") is None
    assert db.clear_compression_failure_cooldown("s") is True


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


LEASE_OPS = st.lists(
    st.tuples(
        st.sampled_from(["acquire", "refresh", "release", "holder", "wait"]),
        st.sampled_from(["h1", "h2"]),
        st.sampled_from([1.0, 5.0, 30.0]),
    ),
    max_size=25,
)


@pytest.fixture(scope="module")
def lease_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    url = f"sqlite:///{tmp_path_factory.mktemp('leases') / 'state.db'}"
    migrate.upgrade(url)
    with Store.open(url) as store:
        yield store


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=LEASE_OPS)
def test_lease_matches_a_model(lease_store: Store, ops: list[tuple[str, str, float]]) -> None:
    """Against a two-line model: (holder, expires_at) of the one session's lease."""
    clock = FakeClock()
    leases = SessionRepository(lease_store, clock=clock)
    lease_store.write(lambda conn: conn.execute(sa.text("DELETE FROM compression_locks")))
    model: tuple[str, float] | None = None
    for op, holder, amount in ops:
        live = model is not None and model[1] >= clock.now
        if op == "acquire":
            if model is not None and not live:
                model = None
            if model is None:
                model = (holder, clock.now + amount)
            assert leases.try_acquire_compression_lock("s", holder, amount) is (model[0] == holder)
        elif op == "refresh":
            # iot 0.22.2: ours while the row is, expired or not (no one reclaimed it).
            expected = model is not None and model[0] == holder
            if expected and model is not None:
                model = (holder, clock.now + amount)
            assert leases.refresh_compression_lock("s", holder, amount) is expected
        elif op == "release":
            expected = model is not None and model[0] == holder
            if expected:
                model = None
            assert leases.release_compression_lock("s", holder) is expected
        elif op == "holder":
            assert leases.get_compression_lock_holder("s") == (model[0] if live and model else None)
        else:
            clock.now += amount
        # Never two holders: the table holds at most one row per session.
        rows = lease_store.read(
            lambda conn: conn.execute(sa.text("SELECT count(*) FROM compression_locks")).scalar()
        )
        assert rows <= 1


def test_a_stalled_owner_revives_its_unclaimed_lease_and_no_other(lease_store: Store) -> None:
    """iot 0.22.2: refresh goes by the holder alone. A live owner whose refresher stalled past
    the TTL gets its row back while no one reclaimed it; once another holder took the lease,
    the stalled owner's refresh finds nothing."""
    clock = FakeClock()
    leases = SessionRepository(lease_store, clock=clock)
    lease_store.write(lambda conn: conn.execute(sa.text("DELETE FROM compression_locks")))
    assert leases.try_acquire_compression_lock("s", "a", 10.0) is True
    clock.now += 5
    assert leases.refresh_compression_lock("s", "b", 10.0) is False
    clock.now += 20  # past the lease: expired, not yet reclaimed
    assert leases.get_compression_lock_holder("s") is None
    assert leases.refresh_compression_lock("s", "a", 10.0) is True
    assert leases.get_compression_lock_holder("s") == "a"
    clock.now += 11
    assert leases.try_acquire_compression_lock("s", "b", 10.0) is True, "reclaimable on expiry"
    assert leases.refresh_compression_lock("s", "a", 10.0) is False
    assert leases.get_compression_lock_holder("s") == "b"


def test_the_empty_session_id_holds_no_lease(db: SessionDB) -> None:
    """As Hermes: acquire and refresh answer False, release does nothing, no holder."""
    assert db.try_acquire_compression_lock("", "holder1") is False
    assert db.refresh_compression_lock("", "holder1") is False
    assert db.refresh_compression_lock("s", "") is False
    assert db.release_compression_lock("", "holder1") is False
    assert db.get_compression_lock_holder("") is None


REWIND_SCRIPT = st.lists(st.sampled_from(["user", "assistant", "tool"]), min_size=1, max_size=12)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(roles=REWIND_SCRIPT, pick=st.integers(0, 50), since=st.integers(0, 50),
       compact_first=st.booleans())  # fmt: skip
def test_rewind_restore_properties(
    tmp_path_factory: pytest.TempPathFactory,
    roles: list[str], pick: int, since: int, compact_first: bool,
) -> None:  # fmt: skip
    path = tmp_path_factory.mktemp("rewind") / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", "cli")
        if compact_first:
            db.append_message("s", "user", "before compaction")
            db.archive_and_compact("s", [{"role": "user", "content": "summary"}])
        ids = [db.append_message("s", role, f"{role} {n}") for n, role in enumerate(roles)]
        everything = ids_of(db.get_messages("s", include_inactive=True))
        compacted = {m["id"] for m in db.get_messages("s", include_inactive=True)
                     if m["compacted"]}  # fmt: skip
        live_before = ids_of(db.get_messages("s"))
        users = [i for i, role in zip(ids, roles, strict=True) if role == "user"]
        if users:
            target = users[pick % len(users)]
            result = db.rewind_to_message("s", target)
            live = ids_of(db.get_messages("s"))
            assert live == [i for i in live_before if i < target]
            assert result["rewound_count"] == len([i for i in live_before if i >= target])
            assert result["new_head_id"] == (max(live) if live else None)
            assert all(hit["id"] < target for hit in db.search_messages("user"))
        start = everything[since % len(everything)]
        db.restore_rewound("s", start)
        live = set(ids_of(db.get_messages("s")))
        assert not live & compacted, "compaction-archived rows are never revived"
        assert {i for i in everything if i >= start and i not in compacted} <= live
        assert ids_of(db.get_messages("s", include_inactive=True)) == everything, "no row lost"


def test_v16_backfill_tags_delegates_like_hermes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    migrate.upgrade(url, "0018")
    with Store.open(url) as store:
        def seed(conn: sa.Connection) -> None:
            rows = [
                ("p", None, None, "compression", 1.0, 2.0, "t"),
                ("comp", "p", None, None, 3.0, None, None),
                ("sub", "comp", None, None, 4.0, None, None),
                ("br", "comp", '{"_branched_from": "comp"}', None, 5.0, None, None),
                ("orphan", None, "not json", None, 6.0, None, None),
                ("toolrun", None, '{"k": 1}', None, 7.0, None, None),
            ]
            for sid, parent, config, reason, started, ended, title in rows:
                conn.execute(sa.text(
                    "INSERT INTO sessions (id, source, parent_session_id, model_config, "
                    "end_reason, started_at, ended_at, title) VALUES "
                    "(:i, 'cli', :p, :c, :r, :s, :e, :t)"),
                    dict(i=sid, p=parent, c=config, r=reason, s=started, e=ended, t=title))
            conn.execute(sa.text(
                "INSERT INTO messages (session_id, role, content, timestamp) "
                "VALUES ('toolrun', 'tool', 'out', 8.0), ('orphan', 'tool', 'out', 9.0)"))
        store.write(seed)  # fmt: skip
    migrate.upgrade(url)
    with Store.open(url) as store:
        configs = dict(store.read(lambda conn: conn.execute(
            sa.text("SELECT id, model_config FROM sessions")).all()))  # fmt: skip
    assert configs["comp"] is None, "a compression child is not a delegate"
    assert json.loads(configs["sub"]) == {"_delegate_from": "comp"}
    assert json.loads(configs["br"]) == {"_branched_from": "comp"}
    assert configs["orphan"] == "not json", "malformed JSON is kept as it is"
    assert json.loads(configs["toolrun"]) == {"k": 1, "_delegate_from": "__orphaned__"}
    assert configs["p"] is None, "a titled root with children is left alone"


@pytest.mark.parametrize(("sort", "expected"), [("newest", ["c", "b", "a"]),
                                                ("oldest", ["a", "b", "c"])])  # fmt: skip
def test_search_sort_by_time(db: SessionDB, sort: str, expected: list[str]) -> None:
    db.create_session("s", "cli")
    ids = {}
    for name, when, text in (("a", 10.0, "ocelot"), ("b", 20.0, "ocelot ocelot ocelot"),
                             ("c", 30.0, "ocelot once")):  # fmt: skip
        ids[db.append_message("s", "user", text, timestamp=when)] = name
    hits = db.search_messages("ocelot", sort=sort)
    assert [ids[hit["id"]] for hit in hits] == expected
    cjk = {db.append_message("s", "user", f"数据库{n}", timestamp=40.0 + n): n for n in range(3)}
    cjk_hits = [cjk[hit["id"]] for hit in db.search_messages("数据库", sort=sort)]
    assert cjk_hits == (sorted(cjk_hits, reverse=sort == "newest"))
    with pytest.raises(ValueError):
        db.search_messages("ocelot", sort="sideways")


def test_tool_name_and_tool_calls_are_searchable(db: SessionDB) -> None:
    """Hermes v11: the index holds content, tool name and tool calls (both dialects)."""
    db.create_session("s", "cli")
    call = [{"id": "c1", "type": "function",
             "function": {"name": "terminal", "arguments": '{"command": "kubectl 部署集群"}'}}]
    message_id = db.append_message("s", "assistant", None, tool_name="terminal", tool_calls=call)
    plain = db.append_message("s", "user", "nothing to see")
    assert ids_of(db.search_messages("kubectl")) == [message_id]
    assert message_id in ids_of(db.search_messages("terminal"))
    assert ids_of(db.search_messages("部署集群")) == [message_id]
    assert plain not in ids_of(db.search_messages("kubectl"))


# session -> deleted by delete_session_if_empty?
IF_EMPTY_CASES = [
    pytest.param({}, True, id="empty"),
    pytest.param({"title": "named"}, False, id="titled"),
    pytest.param({"message": True}, False, id="has-message"),
    pytest.param({"child": True}, False, id="has-child"),
]


@pytest.mark.parametrize(("shape", "deleted"), IF_EMPTY_CASES)
def test_delete_session_if_empty(db: SessionDB, shape: dict[str, Any], deleted: bool) -> None:
    session(db, "s", started_at=1.0, title=shape.get("title"))
    if shape.get("message"):
        db.append_message("s", "user", "hi")
    if shape.get("child"):
        session(db, "kid", started_at=2.0, parent="s")
    assert db.delete_session_if_empty("s") is deleted
    assert (db.get_session("s") is None) is deleted


def test_prune_empty_ghost_sessions(db: SessionDB) -> None:
    session(db, "ghost", started_at=1.0, source="tui", ended_at=2.0, end_reason="tui_shutdown")
    session(db, "live-ghost", started_at=1.0, source="tui")
    session(db, "titled", started_at=1.0, source="tui", ended_at=2.0, title="kept")
    session(db, "talked", started_at=1.0, source="tui", ended_at=2.0)
    db.append_message("talked", "user", "hi")
    session(db, "cli", started_at=1.0, ended_at=2.0)
    session(db, "recent", started_at=time.time(), source="tui", ended_at=time.time())
    assert db.prune_empty_ghost_sessions() == 1
    assert db.get_session("ghost") is None
    assert all(db.get_session(k) for k in ("live-ghost", "titled", "talked", "cli", "recent"))


def test_model_meta_and_billing_route_updates(db: SessionDB) -> None:
    db.create_session("s", "cli", model="a", system_prompt="old route prompt")
    assert db.update_session_model("s", "b")
    assert db.update_session_meta("s", json.dumps({"_branched_from": "x"}), model="c")
    assert db.update_session_billing_route("s", provider="openrouter", base_url="https://o")
    row = db.get_session("s")
    assert row is not None
    assert row["model"] == "c" and json.loads(row["model_config"]) == {"_branched_from": "x"}
    assert (row["billing_provider"], row["billing_base_url"]) == ("openrouter", "https://o")
    assert row["system_prompt"] is None  # Hermes 0.19's #48173 (iot 0.22.2: test_state_module)
    assert db.update_session_model("ghost", "b") is False


# cwd_prefix as Hermes 0.18 matches it (the directory itself, or a path below it after "/" or
# "\\"), except that % and _ are literal and a prefix of separators takes every path below it.
CWDS = ["/w/app", "/w/app/src", "/w/app/src/deep", "/w/app\\win", "/w/app2", "/w/my_project",
        "/w/myXproject", "/W/APP", None]
UNDER_APP = {"/w/app", "/w/app/src", "/w/app/src/deep", "/w/app\\win"}
CWD_CASES = [
    ("/w/app", UNDER_APP),
    ("/w/app/", UNDER_APP),
    ("/w/app\\", UNDER_APP),
    ("/w/app/src", {"/w/app/src", "/w/app/src/deep"}),
    ("/w/a", set()),
    ("/w/my_project", {"/w/my_project"}),
    ("/w/my%", set()),
    ("/W/APP", {"/W/APP"}),
    ("/", {cwd for cwd in CWDS if cwd is not None}),
    ("", set(CWDS)),  # as Hermes: an empty prefix is no filter
]


@pytest.mark.parametrize(
    ("prefix", "expected"), CWD_CASES, ids=[case[0] or "empty" for case in CWD_CASES]
)
def test_cwd_prefix_takes_a_directory_and_what_is_below_it(
    db: SessionDB, prefix: str, expected: set[str | None]
) -> None:
    for number, cwd in enumerate(CWDS):
        db.create_session(f"s{number}", "cli", cwd=cwd)
    listed = [row["cwd"] for row in db.list_sessions_rich(cwd_prefix=prefix, limit=100)]
    assert set(listed) == expected and len(listed) == len(expected)
    assert db.session_count(cwd_prefix=prefix) == len(expected)


def test_an_empty_source_is_no_filter_as_in_hermes(db: SessionDB) -> None:
    db.create_session("a", "cli")
    db.create_session("b", "telegram")
    assert {row["id"] for row in db.list_sessions_rich(source="")} == {"a", "b"}
    assert db.session_count(source="") == 2


def test_distinct_session_cwds_reports_usage_as_hermes_18(db: SessionDB) -> None:
    """Hermes 0.18's TUI gateway reads ``row.get("cwd")``, ``"sessions"``, ``"last_active"``."""
    session(db, "a", started_at=100.0, ended_at=150.0)
    session(db, "b", started_at=200.0)
    session(db, "c", started_at=300.0, ended_at=400.0, parent="a")
    session(db, "d", started_at=500.0)
    session(db, "e", started_at=600.0)
    for session_id, cwd in (("a", "/w/app"), ("b", "/w/app"), ("c", "/w/lib"), ("d", "   "),
                            ("e", "/w/gone")):
        db.update_session_cwd(session_id, cwd)
    db.set_session_archived("e")
    assert db.distinct_session_cwds() == [
        {"cwd": "/w/app", "sessions": 2, "last_active": 200.0},
        {"cwd": "/w/lib", "sessions": 1, "last_active": 400.0},
    ]
    assert [row["cwd"] for row in db.distinct_session_cwds(include_archived=True)] == [
        "/w/app", "/w/gone", "/w/lib"
    ]
