"""A child session takes its parent's working context (iot 0.22.2's rule), on SQLite and
PostgreSQL, with hostile cases: a parent that does not exist, a parent holding NULLs, a child
given its own values, a profile outside the child's key namespace, a fill that fails (the insert
goes with it: one transaction). The release is the oracle in
``tests/hermes/test_real_iot_child_inherit.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from store_sql import run

from sessionstore.api.session_db import SessionDB
from sessionstore.errors import UnknownSessionError
from sessionstore.sessions import lifecycle
from sessionstore.sessions.lifecycle import key_namespace_prefix

COLUMNS = ("cwd", "git_repo_root", "git_branch", "profile_name")


def context(db: SessionDB, session_id: str) -> tuple[Any, ...] | None:
    rows = run(
        db, f"SELECT {', '.join(COLUMNS)} FROM sessions WHERE id = :id", id=session_id
    )  # fmt: skip
    return tuple(rows[0].values()) if rows else None


def parent(db: SessionDB, session_id: str = "p", **extra: Any) -> None:
    db.create_session(session_id, "telegram", cwd="/work/app", git_repo_root="/work/app",
                      git_branch="main", profile_name="work", **extra)  # fmt: skip


def test_a_compression_fork_keeps_its_working_directory_and_profile(db: SessionDB) -> None:
    parent(db, session_key="agent:work:telegram:dm:1")
    db.end_session("p", "compression")
    db.create_session("fork", "telegram", parent_session_id="p")
    assert context(db, "fork") == ("/work/app", "/work/app", "main", "work")
    # What puts it back in the project sidebar and the profile's views.
    assert db.get_session("fork")["cwd"] == "/work/app"  # type: ignore[index]
    assert db.backfill_null_session_profiles("other") == 0


def test_what_the_caller_gives_is_never_overwritten(db: SessionDB) -> None:
    parent(db)
    db.create_session("own", "cli", parent_session_id="p", cwd="/mine", git_branch="topic",
                      profile_name="mine")  # fmt: skip
    assert context(db, "own") == ("/mine", "/work/app", "topic", "mine")
    # A second call, with another parent, changes nothing the row holds (its parent kept).
    parent(db, "p2")
    run(db, "UPDATE sessions SET cwd = '/p2', git_repo_root = NULL WHERE id = 'p2'")
    db.create_session("own", "cli", parent_session_id="p2")
    assert run(db, "SELECT parent_session_id FROM sessions WHERE id = 'own'")[0] == {
        "parent_session_id": "p"
    }
    assert context(db, "own") == ("/mine", "/work/app", "topic", "mine")


def test_empty_values_are_filled(db: SessionDB) -> None:
    """A given '' is no value (create_session stores it as NULL), nor is a blank profile."""
    parent(db)
    db.create_session("c", "cli", parent_session_id="p", cwd="", git_repo_root="",
                      profile_name=" \t")  # fmt: skip
    assert context(db, "c") == ("/work/app", "/work/app", "main", "work")
    db.ensure_session("e", "cli", parent_session_id="p", profile_name="")
    assert context(db, "e") == ("/work/app", "/work/app", "main", "work")


def test_a_parent_that_does_not_exist_is_refused_and_nothing_is_written(db: SessionDB) -> None:
    with pytest.raises(UnknownSessionError):
        db.create_session("c", "cli", parent_session_id="ghost", cwd="/x")
    with pytest.raises(UnknownSessionError):
        db.ensure_session("c", "cli", parent_session_id="ghost")
    assert context(db, "c") is None


def test_a_parent_holding_nulls_fills_nothing(db: SessionDB) -> None:
    db.create_session("bare", "cli")
    db.create_session("c", "cli", parent_session_id="bare", cwd="/own")
    assert context(db, "c") == ("/own", None, None, None)
    db.create_session("d", "cli", parent_session_id="bare")
    assert context(db, "d") == (None, None, None, None)


def test_a_profile_crosses_only_within_its_key_namespace(db: SessionDB) -> None:
    parent(db, session_key="agent:work:telegram:dm:1")
    for session_id, key, profile in [
        ("other-ns", "agent:main:telegram:dm:1", None),
        ("longer-ns", "agent:workshop:telegram:dm:1", None),
        ("same-ns", "agent:work:cli:x", "work"),
        ("keyless", None, "work"),
    ]:
        db.create_session(session_id, "cli", parent_session_id="p", session_key=key)
        # The working directory is not fenced: only the profile is.
        assert context(db, session_id) == ("/work/app", "/work/app", "main", profile)
    # A keyless parent: any keyed child takes its profile.
    db.create_session("solo", "cli", profile_name="solo")
    db.create_session("keyed", "cli", parent_session_id="solo", session_key="agent:x:y")
    assert context(db, "keyed") == (None, None, None, "solo")


def test_the_fill_is_in_the_inserts_transaction(
    db: SessionDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent(db)

    def failing(conn: Any, session_id: str) -> None:
        raise RuntimeError("the fill failed")

    monkeypatch.setattr(lifecycle, "inherit_parent_context", failing)
    with pytest.raises(RuntimeError, match="the fill failed"):
        db.create_session("c", "cli", parent_session_id="p")
    assert context(db, "c") is None  # the insert went with it


def test_the_namespace_is_cut_as_iots_sql_cuts_it() -> None:
    # substr(key, 1, instr(substr(key, 7), ':') + 6)
    assert key_namespace_prefix("agent:work:telegram:dm:1") == "agent:work:"
    assert key_namespace_prefix("agent:main~:x") == "agent:main~:"
    assert key_namespace_prefix("agent::x") == "agent::"
    assert key_namespace_prefix("telegram:1:2") == "telegram:"
    assert key_namespace_prefix("agent:work") == key_namespace_prefix("agent:") == "agent:"
    assert key_namespace_prefix("tele") == "tele" and key_namespace_prefix("") == ""
    assert key_namespace_prefix("agent:部署:x") == "agent:部署:"


ROUTING = ("user_id", "session_key", "chat_id", "chat_type", "thread_id", "display_name",
           "origin_json", "transport_profile")  # fmt: skip


def routing(db: SessionDB, session_id: str) -> tuple[Any, ...]:
    rows = run(db, f"SELECT {', '.join(ROUTING)} FROM sessions WHERE id = :id", id=session_id)
    return tuple(rows[0].values())


def test_a_compression_fork_keeps_its_parents_routing_and_no_other_child_does(
    db: SessionDB,
) -> None:
    given = dict(zip(ROUTING, ("u1", "agent:work:telegram:dm:1", "1", "dm", "t1", "Ann",
                               '{"platform": "telegram"}', "tp"), strict=True))  # fmt: skip
    db.create_session("p", "telegram", **given)  # iot's keywords, all stored
    assert routing(db, "p") == tuple(given.values())
    db.create_session("open-child", "cli", parent_session_id="p")
    db.end_session("p", "compression")
    db.create_session("fork", "telegram", parent_session_id="p", chat_id="own")
    db.create_session("delegate", "cli", parent_session_id="p",
                      model_config={"_delegate_from": "p"})  # fmt: skip
    db.create_session("branch", "cli", parent_session_id="p",
                      model_config={"_branched_from": "p"})  # fmt: skip
    assert routing(db, "fork") == ("u1", "agent:work:telegram:dm:1", "own", "dm", "t1", "Ann",
                                   '{"platform": "telegram"}', "tp")  # fmt: skip
    # A delegate or branch is no continuation; a child made while the parent was open got
    # nothing then, and nothing later fills it.
    for child in ("delegate", "branch", "open-child"):
        assert routing(db, child) == (None,) * len(ROUTING)


def test_an_unknown_keyword_is_still_a_type_error(db: SessionDB) -> None:
    with pytest.raises(TypeError, match="unknown session column"):
        db.create_session("s", "cli", nonsense="x")  # type: ignore[call-arg]
    assert db.get_session("s") is None
