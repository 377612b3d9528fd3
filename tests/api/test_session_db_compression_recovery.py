"""iot 0.22.2's compression recovery and exact cooldown rows on SQLite and PostgreSQL (issue
29): ``find_live_compression_child``, ``reopen_orphaned_compression_session``,
``get_compression_failure_cooldown_row`` and ``restore_compression_failure_cooldown_row``:
what they find and change, what they never touch (messages, leases of others), and hostile
inputs (unknown ids, wrong types, snapshots iot would write and fail to verify). The release is
the oracle in ``tests/hermes/test_real_iot_compression_recovery.py``.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import pytest
import sqlalchemy as sa

from sessionstore.api.session_db import SessionDB
from sessionstore.errors import CompressionCooldownRestoreError

ABSENT = {"session_exists": False, "cooldown_until": None, "error": None}


def _sql(db: SessionDB, statement: str, **params: Any) -> list[Any]:
    def run(conn: sa.Connection) -> list[Any]:
        result = conn.execute(sa.text(statement), params)
        return list(result) if result.returns_rows else []

    return db.store.write(run)


def _compressed(db: SessionDB, parent: str = "p") -> None:
    db.create_session(parent, "cli")
    db.append_message(parent, "user", "ask")
    db.append_message(parent, "assistant", "answer")
    db.end_session(parent, "compression")


def _state(db: SessionDB) -> list[Any]:
    """Every session's end, every message and every lease: what a refused call must not change."""
    return [
        _sql(db, "SELECT id, ended_at, end_reason, compression_failure_cooldown_until, "
                 "compression_failure_error FROM sessions ORDER BY id"),
        _sql(db, "SELECT id, session_id, content, active FROM messages ORDER BY id"),
        _sql(db, "SELECT session_id, holder, expires_at FROM compression_locks ORDER BY 1"),
    ]  # fmt: skip


def test_the_live_continuation_is_the_sessions_own_row(db: SessionDB) -> None:
    _compressed(db)
    db.create_session("c", "cli", parent_session_id="p", model_config={"_branched_from": "x"})
    db.create_session("b", "cli", parent_session_id="p", model_config={"_branched_from": "p"})
    assert db.find_live_compression_child("p") == db.get_session("c")
    db.end_session("c", "user_exit")
    assert db.find_live_compression_child("p") is None


def test_two_live_continuations_fail_closed(db: SessionDB) -> None:
    _compressed(db)
    db.create_session("c1", "cli", parent_session_id="p")
    db.create_session("c2", "cli", parent_session_id="p")
    assert db.find_live_compression_child("p") is None
    assert db.reopen_orphaned_compression_session("p") is False


def test_a_reopen_keeps_every_message_and_reopens_only_the_parent(db: SessionDB) -> None:
    _compressed(db)
    _compressed(db, "other")
    before = _sql(db, "SELECT id, session_id, content, active FROM messages ORDER BY id")
    assert db.reopen_orphaned_compression_session("p") is True
    assert _sql(db, "SELECT id, session_id, content, active FROM messages ORDER BY id") == before
    assert (db.get_session("p") or {})["ended_at"] is None
    assert (db.get_session("other") or {})["end_reason"] == "compression"
    assert db.reopen_orphaned_compression_session("p") is False  # open now: nothing to do


def test_a_live_lease_blocks_the_reopen_and_an_expired_one_goes_with_it(db: SessionDB) -> None:
    _compressed(db)
    _compressed(db, "q")
    assert db.try_acquire_compression_lock("p", "h1", 300.0) is True
    assert db.try_acquire_compression_lock("q", "h2", 300.0) is True
    before = _state(db)
    assert db.reopen_orphaned_compression_session("p") is False
    assert _state(db) == before
    _sql(db, "UPDATE compression_locks SET expires_at = 1.0 WHERE session_id = 'p'")
    assert db.reopen_orphaned_compression_session("p") is True
    assert db.get_compression_lock_holder("p") is None
    assert db.refresh_compression_lock("p", "h1") is False  # the holder cannot revive it
    assert db.get_compression_lock_holder("q") == "h2"  # another session's lease is kept


def test_an_ended_continuation_still_owns_the_lineage(db: SessionDB) -> None:
    _compressed(db)
    db.create_session("c", "cli", parent_session_id="p")
    db.end_session("c", "compression")
    before = _state(db)
    assert db.reopen_orphaned_compression_session("p") is False
    assert _state(db) == before


@pytest.mark.parametrize("session_id", [None, "", 0, "nobody", "nul\x00id", "lone\ud800"])
def test_unknown_and_unstorable_ids_find_nothing_and_reopen_nothing(
    db: SessionDB, session_id: Any
) -> None:
    _compressed(db)
    before = _state(db)
    assert db.find_live_compression_child(session_id) is None
    assert db.reopen_orphaned_compression_session(session_id) is False
    assert db.get_compression_failure_cooldown_row(session_id) == ABSENT
    assert _state(db) == before


@pytest.mark.parametrize("session_id", [5, 1.5, ["p"], b"p", True])
def test_an_id_that_is_no_str_is_a_type_error(db: SessionDB, session_id: Any) -> None:
    _compressed(db)
    before = _state(db)
    for call in (
        lambda: db.find_live_compression_child(session_id),
        lambda: db.reopen_orphaned_compression_session(session_id),
        lambda: db.get_compression_failure_cooldown_row(session_id),
        lambda: db.restore_compression_failure_cooldown_row(session_id, {"session_exists": True}),
    ):
        with pytest.raises(TypeError):
            call()
    assert _state(db) == before


def test_the_cooldown_row_is_the_stored_one_expired_or_not(db: SessionDB) -> None:
    _compressed(db)
    assert db.get_compression_failure_cooldown_row("p") == {
        "session_exists": True, "cooldown_until": None, "error": None}  # fmt: skip
    _sql(db, "UPDATE sessions SET compression_failure_cooldown_until = 2.5, "
             "compression_failure_error = 'old' WHERE id = 'p'")  # fmt: skip
    assert db.get_compression_failure_cooldown("p") is None  # expired
    row = db.get_compression_failure_cooldown_row("p")
    assert row == {"session_exists": True, "cooldown_until": 2.5, "error": "old"}
    assert isinstance(row["cooldown_until"], float)


def test_a_snapshot_goes_back_exactly(db: SessionDB) -> None:
    _compressed(db)
    future = 4102444800.0
    db.record_compression_failure_cooldown("p", future, "boom")
    snapshot = db.get_compression_failure_cooldown_row("p")
    db.clear_compression_failure_cooldown("p")
    assert db.restore_compression_failure_cooldown_row("p", snapshot) is None
    assert db.get_compression_failure_cooldown_row("p") == snapshot
    assert (db.get_compression_failure_cooldown("p") or {})["error"] == "boom"
    half = {"session_exists": True, "cooldown_until": None, "error": "only the error"}
    db.restore_compression_failure_cooldown_row("p", half)
    assert db.get_compression_failure_cooldown_row("p") == half
    db.restore_compression_failure_cooldown_row("p", {"session_exists": True})
    assert db.get_compression_failure_cooldown_row("p")["error"] is None


def test_a_restore_that_cannot_hold_raises_and_a_vanished_session_is_tolerated(
    db: SessionDB, caplog: pytest.LogCaptureFixture
) -> None:
    _compressed(db)
    with pytest.raises(CompressionCooldownRestoreError) as exists:
        db.restore_compression_failure_cooldown_row("p", ABSENT)
    assert isinstance(exists.value, RuntimeError)
    assert db.restore_compression_failure_cooldown_row("nobody", ABSENT) is None
    with caplog.at_level(logging.WARNING, logger="sessionstore.sessions.leases"):
        gone = {"session_exists": True, "cooldown_until": 9.0, "error": "x"}
        assert db.restore_compression_failure_cooldown_row("nobody", gone) is None
    assert "session missing" in caplog.text
    assert db.get_compression_failure_cooldown_row("nobody") == ABSENT


def test_a_restore_whose_read_back_differs_raises(
    db: SessionDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    """iot verifies the restored row by reading it back; a row another writer changed in
    between (simulated: the read-back) is the compensation failing, and must raise; a row
    deleted in between is tolerated."""
    _compressed(db)
    repo = db._repo
    changed = {"session_exists": True, "cooldown_until": 1.0, "error": "someone else"}
    monkeypatch.setattr(repo, "get_compression_failure_cooldown_row", lambda _id: changed)
    snapshot = {"session_exists": True, "cooldown_until": 5.0, "error": "mine"}
    with pytest.raises(CompressionCooldownRestoreError, match="verification failed"):
        db.restore_compression_failure_cooldown_row("p", snapshot)
    monkeypatch.setattr(repo, "get_compression_failure_cooldown_row", lambda _id: ABSENT)
    assert db.restore_compression_failure_cooldown_row("p", snapshot) is None


@pytest.mark.parametrize(
    ("snapshot", "error"),
    [
        ("not a dict", TypeError),
        ([("session_exists", True)], TypeError),
        ({"session_exists": True, "cooldown_until": "soon"}, TypeError),
        ({"session_exists": True, "cooldown_until": True}, TypeError),
        ({"session_exists": True, "cooldown_until": math.nan}, ValueError),
        ({"session_exists": True, "cooldown_until": math.inf}, ValueError),
        ({"session_exists": True, "error": 5}, TypeError),
        ({"session_exists": True, "error": "lone \ud800"}, ValueError),
    ],
)
def test_a_snapshot_iot_could_not_verify_is_refused_before_writing(
    db: SessionDB, snapshot: Any, error: type[Exception]
) -> None:
    _compressed(db)
    db.record_compression_failure_cooldown("p", 4102444800.0, "kept")
    before = _state(db)
    with pytest.raises(error):
        db.restore_compression_failure_cooldown_row("p", snapshot)
    assert _state(db) == before


def test_an_error_with_nul_is_kept_where_the_database_keeps_it(db: SessionDB) -> None:
    _compressed(db)
    snapshot = {"session_exists": True, "cooldown_until": None, "error": "a\x00b"}
    if db.store.dialect.stores_nul_in_text:
        db.restore_compression_failure_cooldown_row("p", snapshot)
        assert db.get_compression_failure_cooldown_row("p") == snapshot
    else:
        with pytest.raises(ValueError, match="exactly"):
            db.restore_compression_failure_cooldown_row("p", snapshot)
