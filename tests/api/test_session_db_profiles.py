"""iot 0.22.2's profile identity on SQLite and PostgreSQL (issue 29): the crossed-profile
finder and its fixers, the chat's key profiles, the two backfills and the fork-child reads,
with hostile inputs (ids no database holds, wrong types: a ``TypeError`` where iot's
``.strip()`` is an ``AttributeError``). The release is the oracle in
``tests/hermes/test_real_iot_profiles.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from sessionstore.api.session_db import SessionDB
from sessionstore.sessions.profiles import (
    json_extract_text,
    session_key_namespace,
    session_key_profile,
)

HOSTILE_IDS: list[Any] = ["", "nobody", "a\x00", "\ud800", 5, None, 1.5, b"a", ("a",)]


def _set(db: SessionDB, session_id: str, **values: Any) -> None:
    columns = ", ".join(f"{name} = :{name}" for name in values)
    statement = sa.text(f"UPDATE sessions SET {columns} WHERE id = :id")
    db.store.write(lambda conn: conn.execute(statement, {**values, "id": session_id}))


def _column(db: SessionDB, name: str) -> dict[str, Any]:
    statement = sa.text(f"SELECT id, {name} FROM sessions ORDER BY id")
    return dict(db.store.read(lambda conn: conn.execute(statement).all()))


def _keyed(db: SessionDB) -> None:
    db.create_session("a", "telegram")
    _set(db, "a", session_key="agent:main:telegram:dm:1", chat_id="1", profile_name="work",
         started_at=1.0)  # fmt: skip
    # The parent set after the create: a child created under ``a`` would take its label
    # (create_session's inheritance), and ``b`` is the unlabelled crossed child.
    db.create_session("b", "telegram")
    _set(db, "b", session_key="agent:work:telegram:dm:1", chat_id="1", started_at=2.0,
         parent_session_id="a")  # fmt: skip
    db.create_session("c", "cli")
    _set(db, "c", started_at=3.0, profile_name=" ")


def test_the_session_key_grammar_is_iots() -> None:
    assert session_key_namespace(None) == session_key_namespace("default") == "agent:main"
    assert session_key_namespace("main") == "agent:main~"
    assert session_key_namespace("ops") == "agent:ops"
    for profile in ("default", "main", "ops"):
        assert session_key_profile(session_key_namespace(profile) + ":x:y") == profile
    for key in (None, 5, "", "agent:ops", "agent::x", "AGENT:ops:x", "other:ops:x"):
        assert session_key_profile(key) is None
    assert [json_extract_text(v) for v in ("x", 5, 1.5, True, False, None, {"a": [1]})] == [
        "x", "5", "1.5", "1", "0", None, '{"a":[1]}'
    ]  # fmt: skip


def test_the_finder_names_each_crossing_oldest_first(db: SessionDB) -> None:
    _keyed(db)
    found = db.find_crossed_profile_sessions("default")
    assert found["mislabelled"] == [{"id": "a", "session_key": "agent:main:telegram:dm:1",
                                     "profile_name": "work", "key_profile": "default"}]  # fmt: skip
    assert found["foreign"] == [{"id": "b", "session_key": "agent:work:telegram:dm:1",
                                 "key_profile": "work", "message_count": 0}]  # fmt: skip
    assert found["crossed_parents"] == [{"id": "b", "key_profile": "work",
                                         "parent_session_id": "a",
                                         "parent_profile": "default"}]  # fmt: skip
    assert [row["id"] for row in db.find_crossed_profile_sessions("work")["foreign"]] == ["a"]
    assert db.key_profiles_for_chat("telegram", "1") == {"default", "work"}
    assert db.key_profiles_for_chat("telegram", 1) == {"default", "work"}  # str(chat_id)


def test_the_fixers_settle_each_crossing_once(db: SessionDB) -> None:
    _keyed(db)
    assert db.relabel_sessions_to_key_profile(iter(["a", "b", "c", "a"])) == 2
    assert db.relabel_sessions_to_key_profile(["a", "b"]) == 0
    assert _column(db, "profile_name") == {"a": "default", "b": "work", "c": " "}
    assert db.sever_crossed_parents(["b", "a"]) == 1 and db.sever_crossed_parents(["b"]) == 0
    assert _column(db, "parent_session_id") == {"a": None, "b": None, "c": None}
    assert db.rekey_legacy_main_sessions(["a", "b", "c"], "main") == 1
    assert db.rekey_legacy_main_sessions(["a"], "ops") == 0  # no longer legacy
    assert _column(db, "session_key")["a"] == "agent:main~:telegram:dm:1"
    assert _column(db, "profile_name")["a"] == "main"
    assert db.find_crossed_profile_sessions("main")["foreign"][0]["id"] == "b"


def test_the_backfills_fill_only_what_is_empty(db: SessionDB) -> None:
    _keyed(db)
    for session_id, config, cwd in [("g", '{"cwd": "/w"}', None), ("h", '{"cwd": ""}', ""),
                                    ("i", "{broken", None), ("j", '{"cwd": "/x"}', "/kept"),
                                    ("k", '{"cwd": 5}', ""), ("m", '["cwd"]', None)]:  # fmt: skip
        db.create_session(session_id, "acp")
        _set(db, session_id, model_config=config, cwd=cwd)
    db.create_session("l", "cli")
    _set(db, "l", model_config='{"cwd": "/w"}')
    assert db.backfill_acp_session_cwd() == 2 and db.backfill_acp_session_cwd() == 0
    cwds = _column(db, "cwd")
    assert (cwds["g"], cwds["h"], cwds["i"], cwds["j"], cwds["k"], cwds["l"]) == (
        "/w", "", None, "/kept", "5", None
    )  # fmt: skip
    assert db.backfill_null_session_profiles("") == 0 == db.backfill_null_session_profiles(None)
    assert db.backfill_null_session_profiles("  ops\n") == 9  # all but a (labelled work)
    labels = _column(db, "profile_name")
    assert labels["a"] == "work" and labels["c"] == "ops" and labels["g"] == "ops"
    assert db.backfill_null_session_profiles("other") == 0


def test_the_fork_child_reads_follow_iots_markers(db: SessionDB) -> None:
    db.create_session("p", "cli")
    db.create_session("br", "cli", parent_session_id="p")
    _set(db, "br", model_config='{"_branched_from": "p"}')
    db.create_session("inherited", "cli", parent_session_id="p")
    _set(db, "inherited", model_config='{"_branched_from": "elsewhere"}')
    db.create_session("tl", " tool ", parent_session_id="p")
    db.create_session("tool", "tool")
    db.create_session("dl", " acp ")
    _set(db, "dl", model_config='{"_delegate_from": "gone"}')
    db.create_session("reset", "cli", parent_session_id="p")
    _set(db, "reset", model_config='{"_reset_from": "p"}')
    assert db.is_explicit_fork_child("br") and db.is_explicit_fork_child("tool")
    assert db.is_explicit_fork_child("dl")
    assert not db.is_explicit_fork_child("inherited") and not db.is_explicit_fork_child("reset")
    assert not db.is_explicit_fork_child("tl")  # ' tool ' is not the tool source
    assert db.declared_scope_identity("dl") == (True, "acp")
    assert db.declared_scope_identity("tl") == (False, "tool")
    assert db.declared_scope_identity("p") == (False, "cli")


@pytest.mark.parametrize("hostile", HOSTILE_IDS)
def test_hostile_ids_match_nothing_and_reach_no_driver(db: SessionDB, hostile: Any) -> None:
    _keyed(db)
    assert db.is_explicit_fork_child(hostile) is False
    assert db.declared_scope_identity(hostile) == (False, "")
    assert db.relabel_sessions_to_key_profile([hostile]) == 0
    assert db.sever_crossed_parents([hostile]) == 0
    assert db.rekey_legacy_main_sessions([hostile], "ops") == 0
    assert db.key_profiles_for_chat(hostile, "1") == set()
    assert db.key_profiles_for_chat("telegram", hostile) == set()
    assert db.find_crossed_profile_sessions(hostile)["foreign"] == [
        row for row in db.find_crossed_profile_sessions("nobody")["foreign"]
    ]  # fmt: skip
    assert _column(db, "profile_name") == {"a": "work", "b": None, "c": " "}


@pytest.mark.parametrize("wrong", [5, b"ops", ["ops"]])
def test_a_profile_that_is_no_text_is_a_type_error(db: SessionDB, wrong: Any) -> None:
    _keyed(db)
    with pytest.raises(TypeError):
        db.backfill_null_session_profiles(wrong)
    with pytest.raises(TypeError):
        db.rekey_legacy_main_sessions(["a"], wrong)
    with pytest.raises(TypeError):
        db.relabel_sessions_to_key_profile(5)  # type: ignore[arg-type]  # not iterable, as iot
    assert _column(db, "profile_name") == {"a": "work", "b": None, "c": " "}


def test_a_profile_with_nul_is_stored_as_each_database_can(db: SessionDB) -> None:
    _keyed(db)
    assert db.backfill_null_session_profiles("o\x00ps") == 2  # b and the blank c
    assert _column(db, "profile_name")["b"] in ("o\x00ps", "o\ufffdps")


# -- a profile renamed or purged -----------------------------------------------------------------
def _identity(db: SessionDB) -> None:
    db.create_session("s1", "telegram")
    _set(db, "s1", session_key="agent:work:telegram:dm:1", profile_name="work",
         origin_json='{"profile": "work"}')  # fmt: skip
    db.create_session("s2", "telegram")
    _set(db, "s2", session_key="agent:workshop:telegram:dm:1", profile_name="workshop",
         origin_json='["work"]')  # fmt: skip
    db.save_gateway_routing_entry("agent:work:telegram:dm:1", '{"session_key": "agent:work:a"}')
    db.save_gateway_routing_entry("agent:work:telegram:dm:1", "[]", scope="other")
    db.enable_telegram_topic_mode(chat_id="1", user_id="u", profile_name="work")
    statement = sa.text(
        "INSERT INTO gateway_heartbeats (backend_id, pid, started_at, last_heartbeat, profile, "
        "host) VALUES ('b', 1, 1.0, 1.0, 'work', 'h')"
    )
    db.store.write(lambda conn: conn.execute(statement))


def _routing(db: SessionDB) -> list[tuple[str, str, str]]:
    statement = sa.text("SELECT scope, session_key, entry_json FROM gateway_routing ORDER BY 1, 2")
    return [tuple(row) for row in db.store.read(lambda conn: conn.execute(statement).all())]


def _empty_ledger(db: SessionDB, *counts: str) -> dict[str, int]:
    """The ledger's counts (none touched) where the store has iot's delivery ledger without
    a gateway having made it: PostgreSQL, from revision 0043 on; none on SQLite."""
    return dict.fromkeys(counts, 0) if db.store.dialect.migrations_make_delivery_ledger else {}


def test_a_rename_moves_every_identity_and_a_purge_keeps_the_sessions(db: SessionDB) -> None:
    _identity(db)
    counts = db.rekey_profile_state("work", "ops")
    assert counts == {
        "sessions_profile_name": 1, "gateway_heartbeats_profile": 1, "sessions_session_key": 1,
        "sessions_origin_json": 1, "telegram_dm_topic_mode_profile_name": 1,
        "telegram_dm_topic_bindings_profile_name": 0, "telegram_dm_topic_bindings_session_key": 0,
        "gateway_routing": 2, **_empty_ledger(db, "delivery_obligations_adapter_profile",
                                              "delivery_obligations_session_key"),
    }  # fmt: skip
    assert _column(db, "session_key") == {"s1": "agent:ops:telegram:dm:1",
                                          "s2": "agent:workshop:telegram:dm:1"}  # fmt: skip
    assert _column(db, "origin_json") == {"s1": '{"profile": "ops"}', "s2": '["work"]'}
    assert _routing(db) == [("", "agent:ops:telegram:dm:1", '{"session_key": "agent:ops:a"}'),
                            ("other", "agent:ops:telegram:dm:1", "[]")]  # fmt: skip
    assert db.is_telegram_topic_mode_enabled(chat_id="1", user_id="u", profile_name="ops")
    purged = db.purge_profile_state(" ops ")
    assert purged == {"gateway_routing": 2, "gateway_heartbeats": 1,
                      "telegram_dm_topic_mode": 1, "telegram_dm_topic_bindings": 0,
                      **_empty_ledger(db, "delivery_obligations")}  # fmt: skip
    assert _routing(db) == [] and db.get_session("s1") is not None
    assert set(db.purge_profile_state("ops").values()) == {0}


def test_a_rename_onto_a_held_key_changes_nothing(db: SessionDB) -> None:
    _identity(db)
    db.save_gateway_routing_entry("agent:ops:telegram:dm:1", "{}", scope="other")
    before = (_routing(db), _column(db, "profile_name"), _column(db, "session_key"))
    with pytest.raises(ValueError, match="routing collision"):
        db.rekey_profile_state("work", "ops")
    assert (_routing(db), _column(db, "profile_name"), _column(db, "session_key")) == before
    db.enable_telegram_topic_mode(chat_id="1", user_id="u", profile_name="new")
    with pytest.raises(ValueError, match="telegram_dm_topic_mode"):
        db.rekey_profile_state("work", "new")
    assert _column(db, "profile_name") == before[1]


def test_a_store_without_the_optional_tables_reports_only_its_own(db: SessionDB) -> None:
    db.create_session("s", "cli")
    assert db.purge_profile_state("work") == {"gateway_routing": 0, "gateway_heartbeats": 0,
                                              **_empty_ledger(db, "delivery_obligations")}
    assert set(db.rekey_profile_state("work", "ops")) == {
        "sessions_profile_name", "gateway_heartbeats_profile", "sessions_session_key",
        "sessions_origin_json", "gateway_routing",
        *_empty_ledger(db, "delivery_obligations_adapter_profile",
                       "delivery_obligations_session_key"),
    }  # fmt: skip


@pytest.mark.parametrize(
    ("old", "new", "error"),
    [(5, "ops", TypeError), ("work", b"ops", TypeError), ("wo\x00rk", "ops", ValueError),
     ("work", "o\ud800", ValueError)],
)  # fmt: skip
def test_a_profile_name_no_database_holds_is_refused(
    db: SessionDB, old: Any, new: Any, error: type[Exception]
) -> None:
    _identity(db)
    with pytest.raises(error):
        db.rekey_profile_state(old, new)
    with pytest.raises(error):
        db.purge_profile_state(old if old != "work" else new)
    assert _column(db, "profile_name") == {"s1": "work", "s2": "workshop"}
    assert db.rekey_profile_state(None, "ops") == {} == db.purge_profile_state(None)
