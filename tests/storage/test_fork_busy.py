"""Forks never hang (issue 30, item 1): a process whose threads are busy in every store call
forks again and again, and every child ends: one that never touches the store, one that opens
its own, one that goes on with the store it inherited, on SQLite and PostgreSQL. Nothing the
parent's threads were told was stored goes missing.

Before the fix the at-fork hook closed the inherited SQLite connections in the child; when a
parent thread held one of SQLite's mutexes at that moment (its allocator's, a connection's, the
file's lock table's), the close blocked for ever: about one fork in five hung here. Every wait
in these tests has a timeout, so a hang fails the test instead of stalling the run.

Also here: a fork waits for a streaming read to end, and a fork whose wait runs out makes a
child that exits cleanly and refuses, typed, to use SQLite stores.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import forklib
import prefork
import pytest
from store_library import needs_wal

from sessionstore import SessionDB
from sessionstore.errors import StoreUnavailableError
from sessionstore.storage import fork_safety

needs_fork = pytest.mark.skipif(
    "fork" not in multiprocessing.get_all_start_methods(), reason="needs the fork start method"
)
pytestmark = needs_fork


@pytest.fixture(scope="module")
def programs() -> Iterator[prefork.ForkServer | None]:
    """Where the busy programs are forked from: a process that imported their modules once
    (``forklib.IMPORTS``), or None where it cannot adopt them (a new interpreter each)."""
    if not prefork.available():
        yield None
        return
    with prefork.ForkServer(forklib.IMPORTS, cwd=Path(forklib.__file__).parents[2]) as server:
        yield server


def _run_forklib(
    programs: prefork.ForkServer | None, *args: object, timeout_s: float
) -> dict[str, Any]:
    """Run ``tests/support/forklib.py`` (the busy parent and its forks) as a program of its
    own, small and fresh: forking from this pytest worker, whose heap grows over a run, cost
    up to three times the CPU (page tables, copy-on-write) for the same forks."""
    if programs is None:
        result = subprocess.run(
            [sys.executable, forklib.__file__, *map(str, args)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        returncode, out, err = result.returncode, result.stdout, result.stderr
    else:
        program = programs.start(
            "forklib:main", [str(arg) for arg in args], stdout=prefork.PIPE, stderr=prefork.PIPE
        )
        try:
            out, err = program.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            program.kill()
            program.wait()
            raise
        returncode = program.returncode
    assert returncode == 0, err[-3000:]
    report: dict[str, Any] = json.loads(out.splitlines()[-1])
    return report


def _fork_pool_while_busy(
    programs: prefork.ForkServer | None, url: str, forks: int, workers: int = 2
) -> None:
    """``forks`` workers of a ``fork`` pool of ``workers`` (one task each:
    ``maxtasksperchild=1``, so every task is a new fork, made by the pool's own handler thread)
    while the parent's threads call the store (``forklib.pool_program``, in a program of its
    own); then everything acknowledged, there and in the children, is checked."""
    report = _run_forklib(
        programs, "pool", url, forks, workers, timeout_s=60 + forks * 2 + 120 + 120
    )
    assert not report["hung"], f"forked children hung ({forks} forks asked for)"
    assert not report["never_exited"], "a forked worker never exited"
    assert report["errors"] == [], report["errors"]
    assert report["parent_calls"] > 0
    # Every fork was made with the parent's threads inside store calls (as its child saw it).
    inside_at_forks = report["inside_at_forks"]
    assert len(inside_at_forks) == forks and min(inside_at_forks) > 0, inside_at_forks
    child_texts = set(report["child_texts"])
    assert len(child_texts) == 2 * report["writing_children"]
    assert report["writing_children"] == forks - len(range(0, forks, 3))  # idle: every third
    forklib.check_store(url, report["appended"], report["token_updates"], child_texts)


def test_forks_while_every_store_call_runs_never_hang(
    store_url: str, programs: prefork.ForkServer | None
) -> None:
    _fork_pool_while_busy(programs, store_url, 45)


THOUSAND_PARTS = 4
"""The thousand forks are made by this many busy parents (a test each, on a store of its own),
so that they spread over the run's workers instead of one worker forking for minutes at the
end of the run: the same thousand forks, each with every store call under way."""


@pytest.mark.slow
@pytest.mark.parametrize("part", range(THOUSAND_PARTS))
def test_a_thousand_forks_while_every_store_call_runs(
    store_url: str, part: int, programs: prefork.ForkServer | None
) -> None:
    """A thousand forks in all (``part`` only tells the parts apart), two children at a time
    as before the split: six at a time overlapped the children's waits for the write lock, but
    on a loaded machine a parent's writer then waited out its 20 s budget behind them."""
    _fork_pool_while_busy(programs, store_url, 1000 // THOUSAND_PARTS)


@pytest.mark.slow
@pytest.mark.parametrize("forks", [30])
def test_children_that_exit_as_programs_do(store_url: str, forks: int) -> None:
    """Plain ``os.fork()`` children ending through a normal interpreter shutdown (garbage
    collection, finalizers): none hangs, none breaks the parent's store (on PostgreSQL,
    closing an inherited connection would end the parent's session). Its program is a new
    interpreter, never forked from the fork server: what the server imported is frozen there
    (``gc.freeze``), and a child's final collections must walk all it inherited."""
    report = _run_forklib(None, "exit", store_url, forks, timeout_s=600)
    assert report["failed"] == [] and report["errors"] == [], report["failed"] + report["errors"]
    assert report["forks"] == forks and report["parent_calls"] > 0
    inside_at_forks = report["inside_at_forks"]
    assert len(inside_at_forks) == forks and min(inside_at_forks) > 0, inside_at_forks
    forklib.check_store(
        store_url, report["appended"], report["token_updates"], set(report["child_texts"])
    )


# -- the fork's wait ------------------------------------------------------------------------------
@pytest.fixture
def streaming(tmp_path: Path) -> Iterator[tuple[SessionDB, threading.Event, threading.Event]]:
    """A SQLite store and a thread inside ``store.reading()`` (a streaming read, as an
    export holds it) until ``release`` is set; ``entered`` is set once it is inside."""
    db = SessionDB(tmp_path / "state.db")
    db.create_session("s", "cli")
    db.append_message("s", "user", "before")
    entered, release = threading.Event(), threading.Event()
    marker = tmp_path / "reader-leaving"

    def reader() -> None:
        with db.store.reading() as conn:
            conn.exec_driver_sql("SELECT count(*) FROM messages").scalar()
            entered.set()
            release.wait(60)
            marker.write_text("1")  # still inside the read

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    assert entered.wait(30)
    try:
        yield db, entered, release
    finally:
        release.set()
        thread.join(60)
        db.close()


def _fork(body: object) -> int:
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 0
        try:
            body()  # type: ignore[operator]
        except BaseException as exc:
            print(f"child failed: {exc!r}", file=sys.stderr, flush=True)
            code = 1
        os._exit(code)
    return pid


def _exit_code(pid: int, timeout_s: float = 60.0) -> int:
    deadline = time.monotonic() + timeout_s
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung")
        time.sleep(0.005)


def test_a_fork_waits_for_a_streaming_read_then_the_child_writes(
    streaming: tuple[SessionDB, threading.Event, threading.Event], tmp_path: Path
) -> None:
    db, _entered, release = streaming
    marker = tmp_path / "reader-leaving"

    def child() -> None:
        # The fork happened only once the reader was leaving its read.
        assert marker.exists(), "forked while another thread was inside SQLite"
        db.append_message("s", "user", "from the child")

    threading.Timer(0.3, release.set).start()
    pid = _fork(child)  # waits here for the reader
    assert _exit_code(pid) == 0, "the child failed (see stderr)"
    db.append_message("s", "user", "after")
    assert {"before", "from the child", "after"} <= {m["content"] for m in db.get_messages("s")}


@needs_wal()  # the parent writes beside the open read
def test_a_fork_whose_wait_runs_out_makes_a_child_that_refuses_sqlite_typed(
    streaming: tuple[SessionDB, threading.Event, threading.Event],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The reader stays inside SQLite past the fork's wait: the fork goes ahead (the parent is
    told); its child exits normally when it leaves the store alone, and gets a typed error,
    never a hang, when it tries to use a SQLite store (the inherited one or a new one)."""
    db, _entered, _release = streaming
    monkeypatch.setattr(fork_safety, "FORK_WAIT_S", 0.2)
    caplog.set_level(logging.WARNING, logger="sessionstore.storage.fork_safety")
    assert _exit_code(_fork(lambda: None)) == 0
    report = tmp_path / "refusals.json"

    def child() -> None:
        refused = []
        for use in (
            lambda: db.append_message("s", "user", "from the child"),
            lambda: SessionDB(tmp_path / "other.db").close(),
        ):
            try:
                use()
            except StoreUnavailableError as exc:
                refused.append(str(exc))
        report.write_text(json.dumps(refused))

    assert _exit_code(_fork(child)) == 0, "the child failed (see stderr)"
    refused = json.loads(report.read_text())
    assert len(refused) == 2 and all("forked while" in text for text in refused), refused
    assert any("forking while" in r.getMessage() for r in caplog.records)
    db.append_message("s", "user", "the parent goes on")  # once the reader has left


@needs_wal()
def test_a_transaction_left_open_at_the_fork_is_abandoned_and_the_child_still_writes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A connection some thread left inside a transaction (outside the store's calls: the
    fork does not wait for that) cannot be closed safely in the child: it is left alone,
    with a warning, and the child writes through its own connections. In WAL only: in the
    rollback journal the parent's open read holds every COMMIT off, the child's too (a typed
    busy error, ``tests/storage/test_commit_refused_busy.py``)."""
    db = SessionDB(tmp_path / "state.db")
    db.create_session("s", "cli")
    raw = db.store.engine.connect()
    raw.begin()
    raw.exec_driver_sql("SELECT count(*) FROM messages").scalar()
    caplog.set_level(logging.WARNING, logger="sessionstore.dialects.sqlite")
    report = tmp_path / "warnings.json"

    def child() -> None:
        db.append_message("s", "user", "from the child")
        warnings = [r.getMessage() for r in caplog.records if "forked while" in r.getMessage()]
        report.write_text(json.dumps(warnings))

    try:
        assert _exit_code(_fork(child)) == 0, "the child failed (see stderr)"
    finally:
        raw.rollback()
        raw.close()
    warnings = json.loads(report.read_text())
    assert len(warnings) == 1 and "inside a transaction" in warnings[0], warnings
    assert "from the child" in {m["content"] for m in db.get_messages("s")}
    db.close()
