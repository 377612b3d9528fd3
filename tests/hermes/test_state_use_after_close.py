"""The drop-in's handle used after ``close()``: iot 0.22.2 opens its file again for the call.

A teardown (a cron job's ``finally``, an agent's ``close()``) can close the ``SessionDB`` a
worker thread is still flushing its last messages into. iot 0.22.2 lands that flush on a new
connection to the same file, with a warning, rather than losing it; ours does the same on a
writable file handle. A read-only handle stays closed, and ``sessionstore.SessionDB`` (our own
API, not the drop-in) keeps raising ``StoreClosedError``.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

import sessionstore
from sessionstore.errors import StoreClosedError
from sessionstore.hermes.state import SessionDB


def test_a_message_appended_after_close_is_stored_and_the_reopen_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = SessionDB(tmp_path / "state.db")
    db.create_session("late", "cron")
    db.append_message("late", "user", content="run the report")
    db.close()
    assert db._conn is None

    with caplog.at_level(logging.WARNING):
        db.append_message("late", "assistant", content="the report, after teardown")

    assert db._conn is not None
    assert [m["content"] for m in db.get_messages("late")] == [
        "run the report",
        "the report, after teardown",
    ]
    assert any("after close()" in r.getMessage() for r in caplog.records)
    db.close()
    db.close()  # still idempotent once healed
    with SessionDB(tmp_path / "state.db") as fresh:
        assert fresh.message_count("late") == 2


def test_the_raw_write_helper_heals_too(tmp_path: Path) -> None:
    db = SessionDB(tmp_path / "state.db")
    db.create_session("s", "cli")
    db.close()
    db._execute_write(lambda c: c.execute("UPDATE sessions SET title = 'kept' WHERE id = 's'"))
    assert db.get_session("s")["title"] == "kept"
    db.close()


def test_a_worker_racing_the_close_loses_none_of_its_messages(tmp_path: Path) -> None:
    db = SessionDB(tmp_path / "state.db")
    db.create_session("race", "cron")
    go = threading.Event()
    failures: list[BaseException] = []

    def flush() -> None:
        go.wait()
        for i in range(25):
            try:
                db.append_message("race", "tool", content=f"chunk {i}")
            except BaseException as exc:
                failures.append(exc)

    worker = threading.Thread(target=flush)
    worker.start()
    go.set()
    db.close()
    worker.join(timeout=60)
    assert not worker.is_alive()
    assert failures == []
    assert len(db.get_messages("race")) == 25
    db.close()


def test_a_read_only_handle_stays_closed(tmp_path: Path) -> None:
    with SessionDB(tmp_path / "state.db") as writer:
        writer.create_session("s", "cli")
    reader = SessionDB(tmp_path / "state.db", read_only=True)
    reader.close()
    with pytest.raises(StoreClosedError):
        reader.get_session("s")


def test_our_own_session_db_still_refuses_a_call_after_close(tmp_path: Path) -> None:
    db = sessionstore.SessionDB(tmp_path / "state.db")
    db.close()
    with pytest.raises(StoreClosedError):
        db.create_session("s", "cli")
