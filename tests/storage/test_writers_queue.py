"""The writers' queue (``<db>-writelock``): exclusion, budgets, degradation, fork, clean-up.

How fair the waiting is gets measured by ``scripts/stress.py --storm``, not here: these tests
check the behaviour that must hold on any machine, however loaded.
"""

from __future__ import annotations

import fcntl
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from store_library import connect_like_the_store
from writer_gate import gate_taken

from sessionstore.api.session_db import SessionDB
from sessionstore.errors import StoreBusyError
from sessionstore.storage.config import sqlite_url
from sessionstore.storage.retry import RetryPolicy
from sessionstore.storage.store import Store
from sessionstore.storage.writers_queue import QueueTimeout, WriterQueue, gate_file


def _store(tmp_path: Path) -> tuple[Path, str]:
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", "cli")
    return path, sqlite_url(path)


def _side(path: Path) -> Path:
    return path.with_name(path.name + "-writelock")


def _left_behind(lock: Path) -> list[str]:
    """The writers' side files (the lock and its gate) that exist."""
    return [side.name for side in (lock, gate_file(lock)) if side.exists()]


def _count(path: Path) -> int:
    conn = connect_like_the_store(path)
    try:
        return int(conn.execute("SELECT count(*) FROM messages").fetchone()[0])
    finally:
        conn.close()


def test_a_writer_held_in_the_queue_gives_up_within_its_budget(tmp_path: Path) -> None:
    path, url = _store(tmp_path)
    with SessionDB(url=url, retry=RetryPolicy(budget_s=0.3)) as db:
        db.append_message("s", "user", "first")  # creates the side file
        holder = os.open(_side(path), os.O_RDONLY)
        try:
            fcntl.flock(holder, fcntl.LOCK_EX)
            started = time.monotonic()
            with pytest.raises(StoreBusyError, match="busy"):
                db.append_message("s", "user", "never written")
            assert time.monotonic() - started < 3.0
        finally:
            fcntl.flock(holder, fcntl.LOCK_UN)
            os.close(holder)
        # The abandoned wait passed its turn on: the next write goes straight through.
        db.append_message("s", "user", "second")
    assert _count(path) == 2


def test_a_queued_writer_proceeds_as_soon_as_the_holder_releases(tmp_path: Path) -> None:
    path, url = _store(tmp_path)
    with SessionDB(url=url) as db:
        db.append_message("s", "user", "first")
        holder = os.open(_side(path), os.O_RDONLY)
        fcntl.flock(holder, fcntl.LOCK_EX)
        done = threading.Event()
        writer = threading.Thread(
            target=lambda: (db.append_message("s", "user", "queued"), done.set())
        )
        writer.start()
        assert not done.wait(0.3)  # it waits for the holder, not for SQLite
        fcntl.flock(holder, fcntl.LOCK_UN)
        os.close(holder)
        assert done.wait(10)
        writer.join()
    assert _count(path) == 2


def _assert_excludes(first: WriterQueue, second: WriterQueue) -> None:
    """While ``first`` holds, ``second`` waits in vain; once it lets go, ``second`` gets it."""
    held = first.acquire(time.monotonic() + 1.0)
    assert held is not None
    with pytest.raises(QueueTimeout):
        second.acquire(time.monotonic() + 0.1)
    first.release(held)
    again = second.acquire(time.monotonic() + 1.0)
    assert again is not None
    second.release(again)


def test_two_stores_in_one_process_exclude_each_other(tmp_path: Path) -> None:
    path, _ = _store(tmp_path)
    first, second = WriterQueue(_side(path)), WriterQueue(_side(path))
    _assert_excludes(first, second)
    first.close()
    second.close()


def test_a_closed_store_leaves_no_side_file_and_others_go_on(tmp_path: Path) -> None:
    path, url = _store(tmp_path)
    a, b = SessionDB(url=url), SessionDB(url=url)
    a.append_message("s", "user", "a1")
    b.append_message("s", "user", "b1")
    a.close()  # removes the side file while nobody holds it
    assert not _left_behind(_side(path))
    b.append_message("s", "user", "b2")  # starts again on a new one
    c = WriterQueue(_side(path))
    b_queue = b.store._queue
    assert b_queue is not None
    held = b_queue.acquire(time.monotonic() + 1.0)
    assert held is not None
    try:
        with pytest.raises(QueueTimeout):  # the new file excludes as the old one did
            c.acquire(time.monotonic() + 0.1)
    finally:
        b_queue.release(held)
        c.close()
    b.close()
    assert not _left_behind(_side(path))
    assert _count(path) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.db"]


@pytest.mark.parametrize("refused", ["-writelock", "-writegate"])
def test_without_a_side_file_writers_fall_back_to_sqlite_locking(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    refused: str,
) -> None:
    """A read-only directory (or a filesystem without flock): writes still succeed, and
    neither side file is left behind when only one of them could be created."""
    path, url = _store(tmp_path)
    real_open = os.open

    def refusing_open(name: str | os.PathLike[str], flags: int, *args: int) -> int:
        if str(name).endswith(refused):
            raise PermissionError(13, "Permission denied", str(name))
        return real_open(name, flags, *args)

    monkeypatch.setattr(os, "open", refusing_open)
    caplog.set_level(logging.INFO, logger="sessionstore.storage.writers_queue")
    dbs = [SessionDB(url=url) for _ in range(2)]

    def write(db: SessionDB, n: int) -> None:
        for i in range(20):
            db.append_message("s", "user", f"{n}-{i}")

    threads = [threading.Thread(target=write, args=(db, n)) for n, db in enumerate(dbs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for db in dbs:
        db.close()
    assert _count(path) == 40
    assert not _left_behind(_side(path))
    fallbacks = [r for r in caplog.records if "cannot queue" in r.getMessage()]
    assert len(fallbacks) == 2  # once per store, not once per write


def test_a_foreign_holder_longer_than_the_budget_never_deadlocks(tmp_path: Path) -> None:
    path, url = _store(tmp_path)
    foreign = connect_like_the_store(path, isolation_level=None)
    foreign.execute("BEGIN IMMEDIATE")
    errors: list[BaseException] = []
    with Store.open(url, retry=RetryPolicy(budget_s=0.5), busy_timeout_s=0.1) as store:

        def write() -> None:
            try:
                store.write(lambda conn: conn.exec_driver_sql(
                    "INSERT INTO messages (session_id, role, content, timestamp) "
                    "VALUES ('s', 'user', 'x', 0)"))
            except BaseException as exc:
                errors.append(exc)

        started = time.monotonic()
        threads = [threading.Thread(target=write) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=10)
        assert not any(thread.is_alive() for thread in threads)
        assert time.monotonic() - started < 5.0
        assert len(errors) == 3 and all(isinstance(e, StoreBusyError) for e in errors)
        foreign.execute("COMMIT")
        foreign.close()
        write()  # the holder is gone: the queue is free again
        assert len(errors) == 3
    assert _count(path) == 1


def _in_a_child(action: Callable[[], object], expected: type[BaseException]) -> int:
    """Run ``action`` in a forked child: 0 when it raised ``expected``, 2 when it went
    through, 3 on any other error."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 3
        try:
            action()
            code = 2
        except expected:
            code = 0
        except BaseException:
            code = 3
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_queues_on_its_own_description(tmp_path: Path) -> None:
    """flock belongs to an open file description, shared across fork: the child must not
    believe it holds the parent's lock, nor release it."""
    path, url = _store(tmp_path)
    with SessionDB(url=url, retry=RetryPolicy(budget_s=0.3)) as db:
        db.append_message("s", "user", "parent")
        queue = db.store._queue
        assert queue is not None
        held = queue.acquire(time.monotonic() + 1.0)  # the parent holds the queue across the fork
        assert held is not None
        # The child must queue behind the parent and give up.
        assert _in_a_child(lambda: db.append_message("s", "user", "child"), StoreBusyError) == 0
        # The child's exit released nothing of the parent's: still held here.
        probe = WriterQueue(_side(path))
        with pytest.raises(QueueTimeout):
            probe.acquire(time.monotonic() + 0.1)
        probe.close()
        queue.release(held)
        db.append_message("s", "user", "parent again")
    assert _count(path) == 2


def test_a_named_memory_database_has_no_side_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    url = "sqlite:///file:scratch?mode=memory&cache=shared&uri=true"
    with Store.open(url) as keeper, Store.open(url) as store:
        keeper.write(lambda conn: conn.exec_driver_sql("CREATE TABLE t (x)"))
        store.write(lambda conn: conn.exec_driver_sql("INSERT INTO t VALUES (1)"))
        assert store.read(lambda conn: conn.exec_driver_sql("SELECT count(*) FROM t").scalar()) == 1
    assert list(tmp_path.iterdir()) == []


def _waiter_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name == "sessionstore-writer-queue")


def _acquire_into(queue: WriterQueue, got: list[int | None]) -> None:
    got.append(queue.acquire(time.monotonic() + 5))


def test_contended_waits_reuse_one_helper_thread(tmp_path: Path) -> None:
    """Starting a thread per contended wait cost more than a fast commit: one per queue."""
    lock = tmp_path / "q-writelock"
    holder, waiter = WriterQueue(lock), WriterQueue(lock)
    before = _waiter_threads()
    for _ in range(20):
        held = holder.acquire(time.monotonic() + 1.0)
        assert held is not None
        got: list[int | None] = []
        thread = threading.Thread(target=_acquire_into, args=(waiter, got))
        thread.start()
        time.sleep(0.002)
        holder.release(held)
        thread.join(timeout=5)
        assert got and got[0] is not None
        waiter.release(got[0])
    assert _waiter_threads() - before <= 1
    holder.close()
    waiter.close()
    assert not _left_behind(lock)


def _held_and_abandoned(lock: Path) -> tuple[WriterQueue, int, WriterQueue]:
    """A holder, its lock, and a second queue whose wait ran out (its helper still blocked)."""
    holder, quitter = WriterQueue(lock), WriterQueue(lock)
    held = holder.acquire(time.monotonic() + 1.0)
    assert held is not None
    with pytest.raises(QueueTimeout):
        quitter.acquire(time.monotonic() + 0.05)
    return holder, held, quitter


def test_an_abandoned_wait_passes_the_lock_on(tmp_path: Path) -> None:
    lock = tmp_path / "q-writelock"
    holder, held, quitter = _held_and_abandoned(lock)
    third = WriterQueue(lock)
    holder.release(held)
    # The quitter's helper obtains the lock on its way out and lets go of it at once.
    started = time.monotonic()
    taken = third.acquire(time.monotonic() + 2.0)
    assert taken is not None and time.monotonic() - started < 1.5
    third.release(taken)
    for queue in (holder, quitter, third):
        queue.close()
    assert not _left_behind(lock)


def _take_and_release(queue: WriterQueue) -> None:
    taken = queue.acquire(time.monotonic() + 2.0)
    assert taken is not None
    queue.release(taken)


def _close_leaving_no_side_file(lock: Path, *queues: WriterQueue) -> None:
    for queue in queues:
        queue.close()
    assert not _left_behind(lock)


class _Interrupted(BaseException):
    """Stands in for KeyboardInterrupt, without touching the runner's own SIGINT handling."""


def _raise_interrupted(_signum: int, _frame: object) -> None:
    raise _Interrupted


@pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(),
    reason="signals reach the main thread",
)
def test_an_interrupted_wait_passes_the_lock_on(tmp_path: Path) -> None:
    """Ctrl-C during a contended wait: the lock the helper obtains afterwards must not stay
    with a claim that nobody will ever release."""
    lock = tmp_path / "q-writelock"
    holder, waiter, third = WriterQueue(lock), WriterQueue(lock), WriterQueue(lock)
    held = holder.acquire(time.monotonic() + 1.0)
    assert held is not None
    previous = signal.signal(signal.SIGUSR1, _raise_interrupted)
    try:
        main = threading.main_thread().ident
        assert main is not None
        timer = threading.Timer(0.2, signal.pthread_kill, (main, signal.SIGUSR1))
        timer.start()
        with pytest.raises(_Interrupted):
            waiter.acquire(time.monotonic() + 10.0)
        timer.join()
    finally:
        signal.signal(signal.SIGUSR1, previous)
    holder.release(held)
    _take_and_release(third)
    _take_and_release(waiter)  # the interrupted queue itself can still wait and write
    _close_leaving_no_side_file(lock, holder, waiter, third)


def test_a_new_wait_takes_over_an_abandoned_one(tmp_path: Path) -> None:
    lock = tmp_path / "q-writelock"
    holder, held, waiter = _held_and_abandoned(lock)
    got: list[int | None] = []
    thread = threading.Thread(target=_acquire_into, args=(waiter, got))
    thread.start()
    time.sleep(0.05)
    assert not got  # still excluded while the holder holds
    holder.release(held)
    thread.join(timeout=5)
    assert got and got[0] is not None
    # Held through the waiter: the holder's description cannot take it meanwhile.
    with pytest.raises(QueueTimeout):
        holder.acquire(time.monotonic() + 0.05)
    waiter.release(got[0])
    again = holder.acquire(time.monotonic() + 2.0)
    assert again is not None
    holder.release(again)
    waiter.close()
    holder.close()
    assert not _left_behind(lock)


def test_closing_a_queue_whose_helper_still_waits_leaves_no_side_file(tmp_path: Path) -> None:
    lock = tmp_path / "q-writelock"
    holder, held, quitter = _held_and_abandoned(lock)
    before = _waiter_threads()
    quitter.close()  # its helper is blocked in flock; it ends once it gets the lock
    holder.release(held)
    holder.close()
    deadline = time.monotonic() + 5
    while _waiter_threads() >= before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _waiter_threads() < before
    assert not _left_behind(lock)
    # A closed queue that is used again works again, with a new helper.
    reopened = WriterQueue(lock)
    _assert_excludes(quitter, reopened)
    reopened.close()
    quitter.close()
    assert not _left_behind(lock)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_of_a_process_with_a_helper_waits_on_its_own(tmp_path: Path) -> None:
    """The parent's helper thread and its description do not exist for the child: the child
    waits on its own, and nothing it does releases the parent's lock."""
    lock = tmp_path / "q-writelock"
    holder, held, queue = _held_and_abandoned(lock)  # the parent now has a blocked helper
    assert _in_a_child(lambda: queue.acquire(time.monotonic() + 0.1), QueueTimeout) == 0
    probe = WriterQueue(lock)
    with pytest.raises(QueueTimeout):
        probe.acquire(time.monotonic() + 0.05)
    holder.release(held)
    _take_and_release(queue)
    _close_leaving_no_side_file(lock, probe, queue, holder)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_waiting_process_gets_the_lock_before_the_releaser_takes_it_again(
    tmp_path: Path,
) -> None:
    """No barging: the process that releases the lock and asks again at once (its next
    write) queues behind the process that was already waiting, which writes first."""
    lock = tmp_path / "q-writelock"
    holder = WriterQueue(lock)
    held = holder.acquire(time.monotonic() + 5.0)
    assert held is not None
    order_read, order_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 1
        try:
            os.close(order_read)
            waiter = WriterQueue(lock)  # its own descriptions, as another process has
            taken = waiter.acquire(time.monotonic() + 60.0)
            if taken is not None:
                os.write(order_write, b"child ")
                waiter.release(taken)
                code = 0
        finally:
            os._exit(code)
    os.close(order_write)
    try:
        # The child queues: it holds the gate while it waits for the lock (no timing here,
        # only a bound on how long a broken queue may keep the test waiting).
        gave_up_at = time.monotonic() + 60.0
        while not gate_taken(holder.gate_path):
            assert time.monotonic() < gave_up_at, "the child never queued"
            time.sleep(0.001)
        holder.release(held)
        again = holder.acquire(time.monotonic() + 60.0)  # at once, as a busy writer does
        assert again is not None
        os.set_blocking(order_read, False)  # with barging, the child would not have written
        try:
            child_wrote = os.read(order_read, 64)
        except BlockingIOError:
            child_wrote = b""
        holder.release(again)
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(order_read)
    assert child_wrote == b"child "  # it had the lock, and let go of it, before ours came
    assert os.waitstatus_to_exitcode(status) == 0
    _close_leaving_no_side_file(lock, holder)
