"""Many writers at once through ``SessionDB`` (SPEC §4): nothing lost, nothing counted twice.

Threads share one instance (the CLI plus its background tasks), threads each hold their own
instance (several gateways in one process), and separate processes share one SQLite file
(worktree agents). Every case checks exact counters against exact row counts: a lost update
or a retried-twice write shows up as an off-by-N.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from prefork import ForkServer
from process_writers import MESSAGES_PER_PROCESS, run_writers, writer_server
from store_library import engine_like_the_store, journal_mode_of

from sessionstore.api.session_db import SessionDB

# Slow: each test starts several writer processes (the full run only).
pytestmark = pytest.mark.slow

THREADS = 8
MESSAGES_PER_THREAD = 24
BATCH_SIZE = 4
PROCESSES = 4


@pytest.fixture
def db(store_url: str) -> Iterator[SessionDB]:
    database = SessionDB(url=store_url)
    yield database
    database.close()


def run_together(workers: list[Callable[[], None]]) -> None:
    """Start every worker at the same instant; re-raise the first failure of any of them."""
    barrier = threading.Barrier(len(workers))
    errors: list[BaseException] = []

    def wrapped(work: Callable[[], None]) -> None:
        try:
            barrier.wait()
            work()
        except BaseException as exc:  # handed to the main thread below
            errors.append(exc)

    threads = [threading.Thread(target=wrapped, args=(work,)) for work in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not any(thread.is_alive() for thread in threads), "a writer hung"
    if errors:
        raise errors[0]


def tool_call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "t", "arguments": "{}"}}


def write_turns(db: SessionDB, shared: str, own: str, worker: int) -> None:
    """A worker's share: single appends to the shared session, batched turns to its own."""
    for index in range(MESSAGES_PER_THREAD):
        calls = [tool_call(f"{worker}-{index}")] if index % 3 == 0 else None
        db.append_message(shared, "assistant", f"worker {worker} message {index}", tool_calls=calls)
    for start in range(0, MESSAGES_PER_THREAD, BATCH_SIZE):
        turn = [
            {"role": "user", "content": f"w{worker} batch {start} item {i}"}
            for i in range(BATCH_SIZE - 1)
        ]
        turn.append(
            {"role": "assistant", "content": None, "tool_calls": [tool_call("a"), tool_call("b")]}
        )
        db.append_messages(own, turn)


def assert_exact_counts(db: SessionDB, shared: str, own_sessions: list[str]) -> None:
    expected_shared = THREADS * MESSAGES_PER_THREAD
    shared_calls_per_worker = len(range(0, MESSAGES_PER_THREAD, 3))
    session = db.get_session(shared)
    assert session is not None
    assert session["message_count"] == expected_shared
    assert session["tool_call_count"] == THREADS * shared_calls_per_worker
    assert db.message_count(shared) == expected_shared
    assert len(db.get_messages(shared)) == expected_shared
    batches = MESSAGES_PER_THREAD // BATCH_SIZE
    for own in own_sessions:
        row = db.get_session(own)
        assert row is not None
        assert row["message_count"] == db.message_count(own) == MESSAGES_PER_THREAD
        assert row["tool_call_count"] == 2 * batches
        # One writer per own session: its turns come back whole and in order.
        expected_contents: list[str | None] = []
        for start in range(0, MESSAGES_PER_THREAD, BATCH_SIZE):
            expected_contents += [f"{own} batch {start} item {i}" for i in range(BATCH_SIZE - 1)]
            expected_contents.append(None)
        assert [m["content"] for m in db.get_messages(own)] == expected_contents
    assert db.message_count() == expected_shared + THREADS * MESSAGES_PER_THREAD
    ids = [m["id"] for m in db.get_messages(shared)]
    assert len(set(ids)) == len(ids)


def test_threads_share_one_sessiondb(db: SessionDB) -> None:
    db.create_session("shared", "cli")
    own = [f"w{n}" for n in range(THREADS)]
    for session_id in own:
        db.create_session(session_id, "cli")
    run_together([lambda n=n: write_turns(db, "shared", own[n], n) for n in range(THREADS)])
    assert_exact_counts(db, "shared", own)


def test_threads_with_one_sessiondb_each(db: SessionDB, store_url: str) -> None:
    db.create_session("shared", "cli")
    own = [f"w{n}" for n in range(THREADS)]
    for session_id in own:
        db.create_session(session_id, "cli")
    instances = [SessionDB(url=store_url) for _ in range(THREADS)]
    try:
        run_together(
            [lambda n=n: write_turns(instances[n], "shared", own[n], n) for n in range(THREADS)]
        )
    finally:
        for instance in instances:
            instance.close()
    assert_exact_counts(db, "shared", own)


def test_threads_with_one_sessiondb_each_on_a_db_path(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    instances = [SessionDB(db_path=path) for _ in range(THREADS)]
    try:
        instances[0].create_session("shared", "cli")
        own = [f"w{n}" for n in range(THREADS)]
        for session_id in own:
            instances[0].create_session(session_id, "cli")
        run_together(
            [lambda n=n: write_turns(instances[n], "shared", own[n], n) for n in range(THREADS)]
        )
        assert_exact_counts(instances[-1], "shared", own)
    finally:
        for instance in instances:
            instance.close()


def test_concurrent_token_updates_are_not_lost(db: SessionDB) -> None:
    db.create_session("s", "cli")
    updates = 20

    def bill() -> None:
        for _ in range(updates):
            db.update_token_counts(
                "s", input_tokens=3, output_tokens=1, reasoning_tokens=2, estimated_cost_usd=0.25
            )

    run_together([bill] * THREADS)
    row = db.get_session("s")
    assert row is not None
    assert row["input_tokens"] == 3 * THREADS * updates
    assert row["output_tokens"] == THREADS * updates
    assert row["reasoning_tokens"] == 2 * THREADS * updates
    assert row["estimated_cost_usd"] == pytest.approx(0.25 * THREADS * updates)


def test_concurrent_claims_of_one_title_have_exactly_one_winner(db: SessionDB) -> None:
    for n in range(THREADS):
        db.create_session(f"s{n}", "cli")
    outcomes: list[str] = []
    lock = threading.Lock()

    def claim(n: int) -> None:
        try:
            won = db.set_session_title(f"s{n}", "The one title")
            result = "won" if won else "missing"
        except ValueError as exc:
            assert "already in use" in str(exc)
            result = "refused"
        with lock:
            outcomes.append(result)

    run_together([lambda n=n: claim(n) for n in range(THREADS)])
    assert sorted(outcomes) == ["refused"] * (THREADS - 1) + ["won"]
    holder = db.get_session_by_title("The one title")
    assert holder is not None
    assert [db.get_session_title(f"s{n}") for n in range(THREADS)].count("The one title") == 1


def test_concurrent_create_of_one_session_is_idempotent(db: SessionDB) -> None:
    run_together([lambda: db.create_session("same", "cli", model="m")] * THREADS)
    assert db.session_count() == 1


def test_readers_see_consistent_counts_while_writers_write(db: SessionDB) -> None:
    db.create_session("s", "cli")
    stop = threading.Event()
    seen_by_reader: list[list[tuple[int, int]]] = [[], []]

    def write() -> None:
        try:
            for index in range(60):
                db.append_messages(
                    "s",
                    [
                        {"role": "user", "content": f"q{index}"},
                        {"role": "assistant", "content": f"a{index}"},
                    ],
                )
        finally:
            stop.set()

    def read(seen: list[tuple[int, int]]) -> None:
        while not stop.is_set():
            assert db.list_sessions_rich()
            row = db.get_session("s")
            assert row is not None
            seen.append((row["message_count"], len(db.get_messages("s"))))

    run_together([write, *(lambda seen=seen: read(seen) for seen in seen_by_reader)])
    for seen in seen_by_reader:
        assert seen, "the reader never ran while the writer wrote"
        # Every snapshot holds whole turns, and a later read never sees fewer messages.
        assert all(count % 2 == 0 and rows % 2 == 0 for count, rows in seen)
        counters = [count for count, _ in seen]
        assert counters == sorted(counters)
    assert db.message_count("s") == 120


# -- separate processes on one SQLite file -------------------------------------------------------
# Each an agent of its own (``process_writers.writer``), forked from a process that imported
# ``sessionstore`` once: its own SQLite, file locks and connections, as a new interpreter's.


@pytest.fixture(scope="module")
def writers() -> Iterator[ForkServer | None]:
    """One fork server for the module's three process tests: it opens no store and keeps
    nothing of one request for the next (each start-up imported Alembic, SQLAlchemy and
    sessionstore again, ~0.5 CPU s)."""
    with writer_server() as server:
        yield server


def _run_processes(
    path: Path | str, server: ForkServer | None, processes_count: int = PROCESSES
) -> None:
    url = path if isinstance(path, str) else f"sqlite:///{path}"
    assert run_writers(url, processes_count, server=server) == [0] * processes_count


def _assert_process_counts(path: Path | str, processes_count: int = PROCESSES) -> None:
    db = SessionDB(url=path) if isinstance(path, str) else SessionDB(db_path=path)
    try:
        total_shared = processes_count * MESSAGES_PER_PROCESS
        shared = db.get_session("shared")
        assert shared is not None
        assert shared["message_count"] == db.message_count("shared") == total_shared
        assert shared["tool_call_count"] == processes_count * len(range(0, MESSAGES_PER_PROCESS, 4))
        assert shared["input_tokens"] == total_shared
        assert shared["output_tokens"] == 2 * total_shared
        turns = len(range(0, MESSAGES_PER_PROCESS, 10))
        for worker in range(processes_count):
            own = db.get_session(f"proc-{worker}")
            assert own is not None
            assert own["message_count"] == db.message_count(f"proc-{worker}") == 2 * turns
        assert db.session_count() == processes_count + 1
        assert db.message_count() == total_shared + processes_count * 2 * turns
    finally:
        db.close()
    if isinstance(path, str):
        return
    # The file is sound after the storm.
    engine = engine_like_the_store(f"sqlite:///{path}")
    try:
        with engine.connect() as conn:
            assert conn.execute(sa.text("PRAGMA integrity_check")).scalar() == "ok"
    finally:
        engine.dispose()


def test_processes_share_one_sqlite_file(tmp_path: Path, writers: ForkServer | None) -> None:
    path = tmp_path / "state.db"
    SessionDB(db_path=path).close()  # migrated up front: this test is about the writes
    _run_processes(path, writers)
    _assert_process_counts(path)


def test_processes_share_one_sqlite_file_in_the_rollback_journal(
    tmp_path: Path, writers: ForkServer | None
) -> None:
    """``journal_mode=delete`` (a home on NFS or SMB; every file where the SQLite in use has the
    WAL-reset bug): readers and a committing writer hold each other off, and a COMMIT can be
    refused busy. Every acknowledged write is there once, the counters exact."""
    path = tmp_path / "state.db"
    url = f"sqlite:///{path}?journal_mode=delete"
    done = threading.Event()
    holds = 0
    with SessionDB(url=url) as reader:

        failed: list[BaseException] = []

        def run() -> None:
            try:
                _run_processes(url, writers)
            except BaseException as exc:  # every writer must exit 0: reported below
                failed.append(exc)
            finally:
                done.set()

        thread = threading.Thread(target=run)
        thread.start()
        # A reader inside the file for longer than the writers' busy timeout (1 s), again and
        # again: the COMMITs waiting on it are refused, and must be settled and retried.
        while not done.wait(0.2):
            with reader.store.engine.connect() as conn, conn.begin():
                conn.exec_driver_sql("SELECT count(*) FROM messages").scalar()
                holds += 1
                done.wait(1.3)
        thread.join()
    if failed:
        raise failed[0]
    assert holds > 0
    assert journal_mode_of(path) == "delete"  # the rollback journal all along
    _assert_process_counts(path)  # (opened without the choice: in WAL from here on)


def test_processes_open_a_new_sqlite_file_at_once(
    tmp_path: Path, writers: ForkServer | None
) -> None:
    # No one created the schema first: the processes race to migrate it, then to write.
    path = tmp_path / "state.db"
    _run_processes(path, writers)
    _assert_process_counts(path)


def test_eight_processes_append_to_one_postgresql_store(
    empty_pg_url: str, writers: ForkServer | None
) -> None:
    # No one created the schema first: eight processes race to migrate it, then to write.
    _run_processes(empty_pg_url, writers, processes_count=8)
    _assert_process_counts(empty_pg_url, processes_count=8)
