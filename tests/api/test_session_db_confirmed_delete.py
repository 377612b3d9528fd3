"""iot 0.22.2's confirmed delete on SQLite and PostgreSQL (issue 29, item 3): what
``get_session_delete_targets`` lists is exactly what ``delete_session`` removes; with
``expected_delete_ids`` a delete whose targets changed since the user confirmed them deletes
nothing (False); ``exclude_active_write_guards`` refuses (``SessionActiveWriteGuardError``) or,
in bulk, skips and reports (``skipped_ids``) sessions under a live turn or compression lease.
Hostile inputs are a ``TypeError`` with nothing deleted. The release is the oracle in
``tests/hermes/test_real_iot_confirmed_delete.py``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from store_sql import run

from sessionstore.api.session_db import SessionDB
from sessionstore.errors import SessionActiveWriteGuardError

TARGETS = ["root", "root-d1", "root-d1-sub", "root-d2"]


def ids(db: SessionDB) -> set[str]:
    return {row["id"] for row in run(db, "SELECT id FROM sessions")}


@pytest.fixture
def db(store_url: str) -> Iterator[SessionDB]:
    """``root`` with two delegate runs (one with its own delegate run) and a branch;
    ``other`` and ``busy`` (a compression holds it) beside."""
    database = SessionDB(url=store_url)
    database.create_session("root", "cli")
    for child, parent in (("root-d2", "root"), ("root-d1", "root"), ("root-d1-sub", "root-d1")):
        database.create_session(child, "cli", parent_session_id=parent,
                                model_config={"_delegate_from": parent})  # fmt: skip
    database.create_session("root-branch", "cli", parent_session_id="root",
                            model_config={"_branched_from": "root"})  # fmt: skip
    for session_id in ("root", "root-d1-sub", "root-branch"):
        database.append_message(session_id, "user", f"hello from {session_id}")
    database.create_session("other", "cli")
    database.create_session("busy", "cli")
    assert database.try_acquire_compression_lock("busy", "compressor", ttl_seconds=600)
    yield database
    database.close()


EVERYONE = {*TARGETS, "root-branch", "other", "busy"}


def test_the_targets_are_what_the_delete_removes(db: SessionDB) -> None:
    targets = db.get_session_delete_targets("root")
    assert targets == TARGETS  # the session first, then its delegate runs sorted
    assert db.get_session_delete_targets("root-d1") == ["root-d1", "root-d1-sub"]
    assert db.get_session_delete_targets("root-branch") == ["root-branch"]
    assert db.delete_session("root", expected_delete_ids=targets) is True
    assert ids(db) == EVERYONE - set(TARGETS)
    assert db.get_session("root-branch")["parent_session_id"] is None  # type: ignore[index]
    assert run(db, "SELECT session_id FROM messages") == [{"session_id": "root-branch"}]
    assert db.get_session_delete_targets("root") == []


def test_a_delete_whose_targets_changed_since_confirmed_deletes_nothing(db: SessionDB) -> None:
    confirmed = db.get_session_delete_targets("root")
    db.create_session("root-d3", "cli", parent_session_id="root",
                      model_config={"_delegate_from": "root"})  # fmt: skip
    assert db.delete_session("root", expected_delete_ids=confirmed) is False
    assert ids(db) == EVERYONE | {"root-d3"}
    assert db.delete_session("root-d1-sub") is True  # one went instead: refused too
    assert db.delete_session("root", expected_delete_ids=confirmed) is False
    for wrong in ([], ["root"], [*TARGETS, "root-d3", "root-branch"], ["ROOT", "root-d1"]):
        assert db.delete_session("root", expected_delete_ids=wrong) is False
    assert ids(db) == (EVERYONE | {"root-d3"}) - {"root-d1-sub"}
    fresh = db.get_session_delete_targets("root")
    assert db.delete_session("root", expected_delete_ids=tuple(reversed(fresh))) is True
    assert ids(db) == {"root-branch", "other", "busy"}


@pytest.mark.parametrize("expected", ["root", b"root", ["root", 1], 5, [None]])
def test_hostile_confirmed_ids_are_refused_before_anything_is_deleted(
    db: SessionDB, expected: Any
) -> None:
    with pytest.raises(TypeError):
        db.delete_session("root", expected_delete_ids=expected)
    with pytest.raises(TypeError):
        db.delete_session("root", exclude_active_write_guards="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        db.delete_sessions(["root"], exclude_active_write_guards=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        db.delete_sessions(["root"], skipped_ids=())  # type: ignore[arg-type]
    with pytest.raises(TypeError):  # a display fence is a mapping of lists
        db.delete_session("root", expected_display_messages=["root"])  # type: ignore[arg-type]
    with pytest.raises(ValueError):  # the confirmed targets never list a chain
        db.delete_session("root", expected_delete_ids=TARGETS, include_compression_chain=True)
    with pytest.raises(TypeError):
        db.delete_session("root", include_compression_chain=1)  # type: ignore[arg-type]
    assert ids(db) == EVERYONE
    assert db.get_session_delete_targets(5) == []  # type: ignore[arg-type]
    assert db.get_session_delete_targets("\x00") == []
    assert db.delete_session("\x00", expected_delete_ids=["\x00"]) is False


def test_a_guarded_delete_refuses_a_session_mid_turn_or_mid_compression(db: SessionDB) -> None:
    assert db.try_acquire_session_turn_lease("root-d1-sub", "turn", ttl_seconds=600)
    for session_id in ("root", "busy"):
        with pytest.raises(SessionActiveWriteGuardError):
            db.delete_session(session_id, exclude_active_write_guards=True)
    with pytest.raises(SessionActiveWriteGuardError):
        db.delete_session("root", expected_delete_ids=TARGETS, exclude_active_write_guards=True)
    assert ids(db) == EVERYONE
    skipped: list[str] = ["earlier"]
    assert db.delete_sessions(["busy", "root", "other", "nope"], exclude_active_write_guards=True,
                              skipped_ids=skipped) == 1  # fmt: skip
    assert skipped == ["earlier", "busy", "root"] and ids(db) == EVERYONE - {"other"}
    # An expired lease guards nothing; a delete that does not ask ignores the guards (iot).
    db.repository.clock = lambda: time.time() + 3600  # type: ignore[method-assign]
    skipped.clear()
    assert db.delete_sessions(["busy"], exclude_active_write_guards=True,
                              skipped_ids=skipped) == 1  # fmt: skip
    db.repository.clock = time.time  # type: ignore[method-assign]
    assert skipped == [] and db.delete_session("root") is True
    assert ids(db) == {"root-branch"}
