"""iot 0.22.2's gateway repairs on SQLite and PostgreSQL (issue 29): the dead gateway's
orphan sweep (``sweep_orphaned_sessions``: ended, resumable, nothing deleted), the routing
host's narrow reopen (``reopen_if_explicitly_closed``), unkeyed sessions and their keyed
predecessors (``find_orphaned_gateway_sessions``, ``adopt_orphaned_gateway_session``) and the
Telegram topic rows a multiplexer left under ``default``
(``find_profile_less_telegram_topic_rows``, ``relabel_telegram_topic_rows``); with hostile
inputs. The release is the oracle in ``tests/hermes/test_real_iot_gateway_repair.py``.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
import sqlalchemy as sa

from sessionstore.api.session_db import SessionDB
from sessionstore.sessions.lineage import ACCIDENTAL_END_REASONS

HOSTILE_IDS = ["", "nobody", "a\x00b", "\ud800", "' OR 1=1 --", "%"]
OLD = 1_000_000.0


def _sql(db: SessionDB, statement: str, **params: Any) -> None:
    db.store.write(lambda conn: conn.execute(sa.text(statement), params))


def _age(db: SessionDB, session_id: str, started_at: float = OLD) -> None:
    _sql(db, "UPDATE sessions SET started_at = :t WHERE id = :id", t=started_at, id=session_id)


def _counts(db: SessionDB) -> tuple[int, int]:
    def run(conn: sa.Connection) -> tuple[int, int]:
        messages = conn.execute(sa.text("SELECT COUNT(*) FROM messages")).scalar_one()
        generations = conn.execute(
            sa.text("SELECT COUNT(*) FROM conversation_generations")
        ).scalar_one()
        return int(messages), int(generations)

    return db.store.read(run)


# -- the orphan sweep ---------------------------------------------------------------------
def test_the_sweep_ends_old_open_sessions_of_its_sources_and_deletes_nothing(
    db: SessionDB,
) -> None:
    for session_id, source in (("t", "tui"), ("d", "desktop"), ("g", "telegram"),
                               ("fresh", "tui"), ("spared", "tui"), ("ended", "tui")):  # fmt: skip
        db.create_session(session_id, source)
        db.append_message(session_id, "user", "hello")
    db.create_session("k", "telegram", session_key="peer")
    db.end_session("k", "session_reset")
    for offset, session_id in enumerate(("t", "d", "g", "spared", "ended")):
        _age(db, session_id, OLD + offset)
        _sql(db, "UPDATE messages SET timestamp = :t WHERE session_id = :id", t=OLD, id=session_id)
    db.end_session("ended", "cli_close")
    before = _counts(db)
    assert db.sweep_orphaned_sessions(max_idle_seconds=60, exclude_ids=["spared", ""]) == ["d", "t"]
    assert db.get_session("t")["end_reason"] == "startup_orphan_reap"  # type: ignore[index]
    assert db.get_session("ended")["end_reason"] == "cli_close"  # type: ignore[index]
    assert db.get_session("g")["ended_at"] is None  # type: ignore[index]
    assert db.get_session("fresh")["ended_at"] is None  # type: ignore[index]
    assert _counts(db) == before
    assert db.sweep_orphaned_sessions(max_idle_seconds=60, sources=("telegram",)) == ["g"]
    assert db.sweep_orphaned_sessions(max_idle_seconds=60) == ["spared"]
    # Recoverable: an accidental end a gateway's peer recovery may still resume.
    assert "startup_orphan_reap" in ACCIDENTAL_END_REASONS


def test_recent_activity_keeps_an_old_session_open(db: SessionDB) -> None:
    db.create_session("s", "tui")
    _age(db, "s")
    db.append_message("s", "user", "just now")
    assert db.sweep_orphaned_sessions(max_idle_seconds=60) == []
    _sql(db, "UPDATE messages SET timestamp = :t", t=OLD)
    _sql(db, "UPDATE sessions SET last_activity_at = :t", t=time.time())
    assert db.sweep_orphaned_sessions(max_idle_seconds=60) == []


def test_a_live_backend_heartbeat_owns_the_sessions_it_started_before(db: SessionDB) -> None:
    db.create_session("s", "tui")
    _age(db, "s")
    now = time.time()
    _sql(db, "INSERT INTO gateway_heartbeats (backend_id, pid, started_at, last_heartbeat, "
             "profile, host) VALUES ('b', 1, :started, :beat, '', '')",
         started=OLD - 10, beat=now)  # fmt: skip
    assert db.sweep_orphaned_sessions(max_idle_seconds=60) == []
    # A backend started after the session owns it within the grace only.
    _sql(db, "UPDATE gateway_heartbeats SET started_at = :t", t=OLD + 500)
    assert db.sweep_orphaned_sessions(
        max_idle_seconds=60, heartbeat_ownership_grace_seconds=1000
    ) == []  # fmt: skip
    assert db.sweep_orphaned_sessions(
        max_idle_seconds=60, heartbeat_ownership_grace_seconds=100
    ) == ["s"]  # fmt: skip


def test_a_stale_heartbeat_owns_nothing(db: SessionDB) -> None:
    db.create_session("s", "tui")
    _age(db, "s")
    _sql(db, "INSERT INTO gateway_heartbeats (backend_id, pid, started_at, last_heartbeat, "
             "profile, host) VALUES ('b', 1, 0, :beat, '', '')", beat=time.time() - 1000)
    assert db.sweep_orphaned_sessions(
        max_idle_seconds=60, heartbeat_staleness_seconds=2000
    ) == []  # fmt: skip
    assert db.sweep_orphaned_sessions(max_idle_seconds=60) == ["s"]  # staleness: 120 s


def test_the_gate_can_be_turned_off(db: SessionDB) -> None:
    db.create_session("s", "tui")
    _age(db, "s")
    _sql(db, "INSERT INTO gateway_heartbeats (backend_id, pid, started_at, last_heartbeat, "
             "profile, host) VALUES ('b', 1, 0, :beat, '', '')", beat=time.time())  # fmt: skip
    assert db.sweep_orphaned_sessions(max_idle_seconds=60) == []
    assert db.sweep_orphaned_sessions(
        max_idle_seconds=60, respect_gateway_heartbeats=False
    ) == ["s"]  # fmt: skip


def test_pins_and_live_leases_spare_a_session(db: SessionDB) -> None:
    for session_id in ("pinned", "leased", "locked"):
        db.create_session(session_id, "tui")
        _age(db, session_id)
    db.set_session_pinned("pinned", True)
    assert db.try_acquire_session_turn_lease("leased", "me", ttl_seconds=600)
    assert db.try_acquire_compression_lock("locked", "me", ttl_seconds=600)
    assert db.sweep_orphaned_sessions(max_idle_seconds=60, exclude_pinned=True) == []
    assert db.sweep_orphaned_sessions(max_idle_seconds=60) == ["pinned"]


@pytest.mark.parametrize("idle", [0, -5, 0.0])
def test_no_idle_window_or_no_source_ends_nothing(db: SessionDB, idle: float) -> None:
    db.create_session("s", "tui")
    _age(db, "s")
    assert db.sweep_orphaned_sessions(max_idle_seconds=idle) == []
    assert db.sweep_orphaned_sessions(max_idle_seconds=60, sources=()) == []
    assert db.sweep_orphaned_sessions(max_idle_seconds=60, sources=("", "\x00")) == []
    assert db.get_session("s")["ended_at"] is None  # type: ignore[index]


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"max_idle_seconds": "60"}, TypeError),
        ({"max_idle_seconds": None}, TypeError),
        ({"max_idle_seconds": True}, TypeError),
        ({"max_idle_seconds": float("nan")}, ValueError),
        ({"max_idle_seconds": 60, "sources": "tui"}, TypeError),
        ({"max_idle_seconds": 60, "sources": ("tui", 5)}, TypeError),
        ({"max_idle_seconds": 60, "exclude_ids": "s"}, TypeError),
        ({"max_idle_seconds": 60, "exclude_pinned": 1}, TypeError),
        ({"max_idle_seconds": 60, "respect_gateway_heartbeats": None}, TypeError),
        ({"max_idle_seconds": 60, "heartbeat_staleness_seconds": "9"}, TypeError),
    ],
)
def test_a_malformed_sweep_is_refused_before_any_write(
    db: SessionDB, kwargs: dict[str, Any], error: type[Exception]
) -> None:
    db.create_session("s", "tui")
    _age(db, "s")
    with pytest.raises(error):
        db.sweep_orphaned_sessions(**kwargs)
    assert db.get_session("s")["ended_at"] is None  # type: ignore[index]


# -- the routing host's narrow reopen -----------------------------------------------------
def test_an_explicit_close_is_cleared_and_logged(
    db: SessionDB, caplog: pytest.LogCaptureFixture
) -> None:
    db.create_session("s", "tui")
    db.end_session("s", "tui_close")
    with caplog.at_level(logging.WARNING):
        assert db.reopen_if_explicitly_closed("s", provenance="routing a turn") == "tui_close"
    assert db.get_session("s")["ended_at"] is None  # type: ignore[index]
    assert "routing a turn" in caplog.text
    assert db.reopen_if_explicitly_closed("s", provenance="again") is None  # open now


@pytest.mark.parametrize(
    "reason",
    ["compression", "agent_close", "startup_orphan_reap", "tui_shutdown", "lru_evict",
     "session_reset", "idle", "daily", "new_session", "session_switch"],
)  # fmt: skip
def test_automatic_compression_and_boundary_stamps_are_left(db: SessionDB, reason: str) -> None:
    db.create_session("s", "tui")
    db.end_session("s", reason)
    assert db.reopen_if_explicitly_closed("s", provenance="p") is None
    assert db.get_session("s")["end_reason"] == reason  # type: ignore[index]


def test_a_continued_session_is_left_and_a_forked_one_is_reopened(db: SessionDB) -> None:
    db.create_session("p", "tui")
    db.end_session("p", "cli_close")
    db.create_session("c", "tui", parent_session_id="p")
    assert db.reopen_if_explicitly_closed("p", provenance="p") is None
    db.create_session("q", "tui")
    db.end_session("q", "cli_close")
    db.create_session("b", "tui", parent_session_id="q", model_config={"_branched_from": "q"})
    db.create_session("r", "tui", parent_session_id="q", model_config={"_reset_from": "q"})
    db.create_session("t", "tool", parent_session_id="q")
    assert db.reopen_if_explicitly_closed("q", provenance="p") == "cli_close"


def test_a_null_end_reason_is_no_explicit_close(db: SessionDB) -> None:
    db.create_session("s", "tui")
    _sql(db, "UPDATE sessions SET ended_at = 5.0, end_reason = NULL WHERE id = 's'")
    assert db.reopen_if_explicitly_closed("s", provenance="p") is None  # iot answers 'None'
    assert db.get_session("s")["ended_at"] == 5.0  # type: ignore[index]


def test_reopen_hostile_inputs(db: SessionDB) -> None:
    for hostile in HOSTILE_IDS:
        assert db.reopen_if_explicitly_closed(hostile, provenance="p") is None
    assert db.reopen_if_explicitly_closed(None, provenance="p") is None  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        db.reopen_if_explicitly_closed(5, provenance="p")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        db.reopen_if_explicitly_closed("s", provenance="p", patience_s="1")  # type: ignore[arg-type]
    assert db.reopen_if_explicitly_closed("s", provenance="p", patience_s=2.5) is None


# -- orphaned gateway sessions ------------------------------------------------------------
def _keyed(db: SessionDB, session_id: str, key: str, **extra: Any) -> None:
    db.create_session(session_id, "telegram", session_key=key, chat_id="c1", **extra)
    db.append_message(session_id, "user", "keyed")


def test_a_lineage_orphan_names_its_keyed_parent_and_is_adopted(db: SessionDB) -> None:
    _keyed(db, "d", "agent:main:telegram:dm:1")
    db.end_session("d", "compression")
    db.create_session("o", "telegram", parent_session_id="d")
    db.append_message("o", "user", "lost")
    db.append_message("o", "assistant", "reply")
    # A fork takes its parent's routing at creation (iot 0.22.2's fill): no orphan then.
    assert db.find_orphaned_gateway_sessions() == []
    # One written by a release before that fill (Hermes 0.19) is keyless: the orphan.
    _sql(db, "UPDATE sessions SET session_key = NULL, chat_id = NULL WHERE id = 'o'")
    [record] = db.find_orphaned_gateway_sessions()
    assert record["orphan_id"] == "o" and record["donor_id"] == "d"
    assert record["evidence"] == "lineage" and record["adoptable"] is True
    assert record["message_count"] == 2 and record["reason"] == ""
    assert record["session_key"] == "agent:main:telegram:dm:1"
    before = _counts(db)
    assert db.adopt_orphaned_gateway_session("o", "d") is True
    orphan, donor = db.get_session("o"), db.get_session("d")
    assert orphan["session_key"] == "agent:main:telegram:dm:1"  # type: ignore[index]
    assert orphan["chat_id"] == "c1"  # type: ignore[index]
    assert donor["end_reason"] == "superseded_by_repair"  # type: ignore[index]
    assert _counts(db) == before
    assert db.find_orphaned_gateway_sessions() == []
    assert db.adopt_orphaned_gateway_session("o", "d") is False  # keyed now


def test_contiguity_names_one_predecessor_and_refuses_to_guess(db: SessionDB) -> None:
    _keyed(db, "d1", "k1")
    db.create_session("o", "telegram")
    db.append_message("o", "user", "next")
    [record] = db.find_orphaned_gateway_sessions()
    assert (record["donor_id"], record["evidence"], record["adoptable"]) == (
        "d1", "contiguity", True)  # fmt: skip
    _keyed(db, "d2", "k2")  # quiet after o started, but before its last activity
    _sql(db, "UPDATE messages SET timestamp = timestamp + 5 WHERE session_id = 'o'")
    [record] = db.find_orphaned_gateway_sessions()
    assert record["adoptable"] is False and record["donor_id"] is None
    assert record["reason"] == "ambiguous: more than one keyed predecessor matches this window"
    [record] = db.find_orphaned_gateway_sessions(max_gap_s=0)
    assert record["reason"] == "no keyed predecessor fell quiet within 0s of this session's start"


def test_two_orphans_claiming_one_predecessor_are_both_refused(db: SessionDB) -> None:
    _keyed(db, "d", "k")
    for orphan in ("o1", "o2"):
        db.create_session(orphan, "telegram", parent_session_id="d")
        db.append_message(orphan, "user", "x")
    records = db.find_orphaned_gateway_sessions()
    assert [r["orphan_id"] for r in records] == ["o1", "o2"]
    assert all(not r["adoptable"] and r["donor_id"] == "d" for r in records)
    assert records[0]["reason"].startswith("ambiguous: more than one unkeyed session")


def test_forks_tools_empty_and_other_source_sessions_are_no_orphans(db: SessionDB) -> None:
    _keyed(db, "d", "k")
    db.create_session("b", "telegram", parent_session_id="d", model_config={"_branched_from": "d"})
    db.create_session("g", "telegram", parent_session_id="d", model_config={"_delegate_from": "d"})
    db.create_session("t", "tool", parent_session_id="d")
    for session_id in ("b", "g", "t"):
        db.append_message(session_id, "user", "x")
    db.create_session("empty", "telegram")
    db.create_session("cli", "cli", parent_session_id="d")
    db.append_message("cli", "user", "x")
    [record] = db.find_orphaned_gateway_sessions()
    assert record["orphan_id"] == "cli" and record["adoptable"] is False
    assert record["reason"] == "parent session carries no gateway identity of this source"
    assert db.adopt_orphaned_gateway_session("cli", "d") is False  # two sources


def test_two_profiles_never_exchange_a_routing_identity(db: SessionDB) -> None:
    _keyed(db, "d", "agent:work:telegram:dm:1", profile_name="work")
    db.create_session("o", "telegram", parent_session_id="d", profile_name="home")
    db.append_message("o", "user", "x")
    [record] = db.find_orphaned_gateway_sessions()
    assert record["adoptable"] is False
    assert db.adopt_orphaned_gateway_session("o", "d") is False
    assert db.get_session("o")["session_key"] is None  # type: ignore[index]


def test_adoption_keeps_the_orphans_own_columns_and_never_closes_a_cycle(db: SessionDB) -> None:
    _keyed(db, "d", "k", parent_session_id=None)
    db.create_session("o", "telegram", user_id="own-user")
    db.append_message("o", "user", "x")
    _sql(db, "UPDATE sessions SET parent_session_id = 'o' WHERE id = 'd'")
    assert db.adopt_orphaned_gateway_session("o", "d") is True
    orphan = db.get_session("o")
    assert orphan["user_id"] == "own-user" and orphan["parent_session_id"] is None  # type: ignore[index]


def test_orphan_hostile_inputs(db: SessionDB) -> None:
    _keyed(db, "d", "k")
    for hostile in HOSTILE_IDS:
        assert db.adopt_orphaned_gateway_session(hostile, "d") is False
        assert db.adopt_orphaned_gateway_session("d", hostile) is False
    assert db.adopt_orphaned_gateway_session("d", "d") is False
    assert db.adopt_orphaned_gateway_session(None, "d") is False  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        db.adopt_orphaned_gateway_session(5, "d")  # type: ignore[arg-type]
    for gap in ("9", True, [1]):
        with pytest.raises(TypeError):
            db.find_orphaned_gateway_sessions(max_gap_s=gap)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        db.find_orphaned_gateway_sessions(max_gap_s=float("nan"))
    assert db.get_session("d")["ended_at"] is None  # type: ignore[index]


# -- Telegram topic rows under the wrong profile ------------------------------------------
def _topics(db: SessionDB) -> None:
    for session_id in ("s1", "s2", "s3", "s4"):
        db.create_session(session_id, "telegram")
    db.enable_telegram_topic_mode(chat_id="c1", user_id="u")
    db.bind_telegram_topic(chat_id="c1", thread_id="t1", user_id="u",
                           session_key="agent:work:telegram:dm:c1:t1", session_id="s1")
    db.bind_telegram_topic(chat_id="c1", thread_id="t2", user_id="u",
                           session_key="agent:main:telegram:dm:c1:t2", session_id="s2")
    db.bind_telegram_topic(chat_id="c1", thread_id="t3", user_id="u",
                           session_key="agent:main~:telegram:dm:c1:t3", session_id="s3")
    db.bind_telegram_topic(chat_id="c1", thread_id="t4", user_id="u",
                           session_key="not-a-gateway-key", session_id="s4")  # fmt: skip


def test_profile_less_topic_rows_are_found_and_relabelled(db: SessionDB) -> None:
    assert db.find_profile_less_telegram_topic_rows() == []  # no tables
    _topics(db)
    found = db.find_profile_less_telegram_topic_rows()
    assert [(r["thread_id"], r["key_profile"]) for r in found] == [("t1", "work"), ("t3", "main")]
    assert set(found[0]) == {"chat_id", "thread_id", "session_key", "key_profile"}
    counts = db.relabel_telegram_topic_rows(found)
    assert counts == {"bindings_relabelled": 2, "bindings_duplicates_removed": 0,
                      "mode_rows_relabelled": 1}  # fmt: skip
    assert db.get_telegram_topic_binding(chat_id="c1", thread_id="t1", profile_name="work")
    assert db.get_telegram_topic_binding(chat_id="c1", thread_id="t3", profile_name="main")
    assert db.is_telegram_topic_mode_enabled(chat_id="c1", user_id="u", profile_name="work")
    assert db.find_profile_less_telegram_topic_rows() == []
    assert db.relabel_telegram_topic_rows(found) == {
        "bindings_relabelled": 0, "bindings_duplicates_removed": 0, "mode_rows_relabelled": 0}


def test_a_binding_the_named_profile_already_holds_removes_the_default_duplicate(
    db: SessionDB,
) -> None:
    _topics(db)
    db.create_session("w1", "telegram")
    db.bind_telegram_topic(chat_id="c1", thread_id="t1", user_id="u", profile_name="work",
                           session_key="agent:work:telegram:dm:c1:t1", session_id="w1")
    db.enable_telegram_topic_mode(chat_id="c1", user_id="u", profile_name="work")
    counts = db.relabel_telegram_topic_rows([{
        "chat_id": "c1", "thread_id": "t1", "session_key": "agent:work:telegram:dm:c1:t1"}])
    assert counts == {"bindings_relabelled": 0, "bindings_duplicates_removed": 1,
                      "mode_rows_relabelled": 0}  # fmt: skip
    assert db.get_telegram_topic_binding(chat_id="c1", thread_id="t1") is None
    assert db.get_session("s1") is not None  # the session is kept; only the binding went


def test_relabel_hostile_inputs(db: SessionDB) -> None:
    no_tables = db.relabel_telegram_topic_rows(
        [{"chat_id": "c", "thread_id": "t", "session_key": "agent:work:x"}]
    )
    assert no_tables["bindings_relabelled"] == 0  # no tables: nothing to do
    _topics(db)
    for rows, error in (("rows", TypeError), ({"a": 1}, TypeError), ([5], TypeError),
                        ([{"chat_id": "c1", "thread_id": "t1"}], KeyError)):  # fmt: skip
        with pytest.raises(error):
            db.relabel_telegram_topic_rows(rows)  # type: ignore[arg-type]
    odd = [{"chat_id": "c1", "thread_id": "t1", "session_key": key}
           for key in (None, 5, "agent::x", "agent:main:x", "agent:a\x00b:x")]  # fmt: skip
    assert db.relabel_telegram_topic_rows(odd)["bindings_relabelled"] == 0
    assert db.relabel_telegram_topic_rows([]) == {
        "bindings_relabelled": 0, "bindings_duplicates_removed": 0, "mode_rows_relabelled": 0}
    assert len(db.find_profile_less_telegram_topic_rows()) == 2
