"""A store's switch to WAL waits out another connection's write, up to the busy timeout.

SQLite answers ``PRAGMA journal_mode = WAL`` with "database is locked" at once, without its
busy handler, whenever another connection holds the write lock of a file in the rollback
journal. Given up at once, processes racing to create one new store (one building it, the
others checking it) could all find the switch busy and leave the store in the rollback
journal (CI, ``test_processes_creating_one_new_store_end_with_one_store``).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest
from sqlalchemy.engine import URL
from store_library import connect_like_the_store, journal_mode_of, needs_wal

from sessionstore import SessionDB
from sessionstore.dialects import sqlite as sqlite_dialect


def _url(path: Path, **query: str) -> str:
    return URL.create("sqlite", database=str(path), query=query).render_as_string()


@contextmanager
def write_lock_held(path: Path, release_after_s: float | None) -> Iterator[list[int]]:
    """Another connection (the store's own library: never two in one process) holding the
    file's write lock with a row uncommitted; committed after ``release_after_s``, or at the
    end. Yields the rows the writer committed."""
    writer = connect_like_the_store(path, isolation_level=None, check_same_thread=False)
    committed: list[int] = []
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("INSERT INTO state_meta(key, value) VALUES ('held', 'by a writer')")

    def commit() -> None:
        writer.execute("COMMIT")
        committed.append(1)

    timer = threading.Timer(release_after_s, commit) if release_after_s is not None else None
    if timer is not None:
        timer.start()
    try:
        yield committed
    finally:
        if timer is not None:
            timer.join()
        else:
            commit()
        writer.close()


def _state_meta_value(path: Path, key: str) -> str | None:
    with closing(sqlite3.connect(path)) as conn:
        row = conn.execute("SELECT value FROM state_meta WHERE key = ?", (key,)).fetchone()
    return None if row is None else str(row[0])


@pytest.fixture
def store_in_the_rollback_journal(tmp_path: Path) -> Path:
    path = tmp_path / "state.db"
    with SessionDB(url=_url(path, journal_mode="delete")) as db:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "written before the switch")
    assert journal_mode_of(path) == "delete"
    return path


@needs_wal()
def test_an_open_switches_to_wal_once_a_writer_commits(store_in_the_rollback_journal: Path) -> None:
    path = store_in_the_rollback_journal
    with write_lock_held(path, release_after_s=0.3) as committed:
        started = time.monotonic()
        with SessionDB(path) as db:
            waited = time.monotonic() - started
            assert committed == [1]  # the switch came after the writer's commit, not before
            assert [m["content"] for m in db.get_messages("s1")] == ["written before the switch"]
            db.append_message("s1", "assistant", "written in WAL")
    assert journal_mode_of(path) == "wal"
    assert waited >= 0.25  # the writer's hold (0.3 s from just before), waited out
    assert _state_meta_value(path, "held") == "by a writer"


@needs_wal()
def test_a_writer_holding_past_the_busy_timeout_leaves_the_file_as_it_was(
    store_in_the_rollback_journal: Path,
) -> None:
    """The wait is bounded: the store opens and works in the rollback journal, the writer's
    row lands, and the next open switches the file."""
    path = store_in_the_rollback_journal
    with write_lock_held(path, release_after_s=None):
        started = time.monotonic()
        db = SessionDB(path, busy_timeout_s=0.2)
        waited = time.monotonic() - started
        try:
            assert [m["content"] for m in db.get_messages("s1")] == ["written before the switch"]
        finally:
            db.close()
        assert journal_mode_of(path) == "delete"
    assert waited >= 0.2  # the busy timeout, spent trying
    assert _state_meta_value(path, "held") == "by a writer"
    with SessionDB(path) as db:
        db.append_message("s1", "assistant", "written in WAL")
    assert journal_mode_of(path) == "wal"


class _FakeCursor:
    """A cursor whose switch is busy ``busy_times`` times, with a busy timeout of 50 ms."""

    def __init__(self, busy_times: int, error: str = "database is locked") -> None:
        self.busy_times = busy_times
        self.error = error
        self.switches = 0

    def execute(self, statement: str) -> _FakeCursor:
        self.statement = statement
        if statement == "PRAGMA journal_mode = WAL":
            self.switches += 1
            if self.switches <= self.busy_times:
                raise sqlite3.OperationalError(self.error)
        return self

    def fetchone(self) -> tuple[object]:
        return (50,) if self.statement == "PRAGMA busy_timeout" else ("wal",)


@pytest.mark.parametrize("busy_times", [0, 1, 9])
def test_the_switch_is_tried_until_the_busy_timeout_is_spent(busy_times: int) -> None:
    now = [0.0]
    cursor = _FakeCursor(busy_times)
    mode = sqlite_dialect._switch_to_wal(
        cursor,  # type: ignore[arg-type]
        clock=lambda: now[0],
        sleep=lambda seconds: now.__setitem__(0, now[0] + seconds),
    )
    assert (mode, cursor.switches) == ("wal", busy_times + 1)


def test_the_switch_gives_up_at_the_busy_timeout_and_on_any_other_error() -> None:
    now = [0.0]

    def advance(seconds: float) -> None:
        now[0] += seconds

    busy = _FakeCursor(busy_times=10**6)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        sqlite_dialect._switch_to_wal(busy, clock=lambda: now[0], sleep=advance)  # type: ignore[arg-type]
    assert 0.05 <= now[0] < 0.05 + 2 * sqlite_dialect.WAL_SWITCH_PAUSE_S
    other = _FakeCursor(busy_times=1, error="disk I/O error")
    with pytest.raises(sqlite3.OperationalError, match="I/O"):
        sqlite_dialect._switch_to_wal(other, clock=lambda: 0.0, sleep=advance)  # type: ignore[arg-type]
    assert other.switches == 1
