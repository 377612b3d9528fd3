"""Processes that close one WAL store at the same moment: once every one of them has closed, the
store is one file again (no ``-wal``, no ``-shm``), and it holds every write they were told
was stored (``sessionstore/dialects/last_close.py``).

SQLite removes the log files at the close of the *last* connection, and a close decides that
it is last by trying for an exclusive lock without waiting: two processes closing together can
each find the other still there, and both leave the files. The window is microseconds wide, so
the closes here are made as simultaneous as a test can make them without reaching into SQLite,
many times over: two forked processes, each round opening a connection of the store's own
library (as Hermes's ``_conn``) and reading through it, so that the log files are there, and
in the first rounds also writing through a ``SessionDB`` (acknowledged: the call returned the
message's id) and closing it; then both spin on shared memory until both are there and close
that connection, their last, at once. Before closes took turns, about one round in ten left
``state.db-wal`` and ``state.db-shm`` behind (by hand, on two shared cores at a load of 8 to
10: 3 to 6 rounds of 40 in each of five runs, every run failed); with turns no interleaving
can. Which round loses the race is luck; that none may is not.
"""

from __future__ import annotations

import mmap
import multiprocessing
import os
import time
from pathlib import Path
from typing import NoReturn

import pytest

from sessionstore import SessionDB
from sessionstore.dialects.sqlite_library import connect

# Slow: it forks processes that race on one store for many rounds (the full run only).
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        "fork" not in multiprocessing.get_all_start_methods(), reason="needs fork()"
    ),
]

SESSION = "shared"
CLOSERS = 2
"""Two: with more spinning processes than this machine's two cores, they are no longer on a
core together and their closes drift apart (the race got rarer, not likelier)."""
ROUNDS = 40
WRITING_ROUNDS = 3
"""The first rounds also write through a ``SessionDB`` (about 10 ms of CPU each); the others
only race the closes (a connection, a read and a close: well under a millisecond)."""
PHASES = ("close", "closed", "checked")
STRAY_S = 120.0
"""How long a closer waits for the other at a meeting point before giving up (exit code 2):
only a closer that died makes the other wait that long, and the test then fails on its exit
code instead of hanging."""


class _Meeting:
    """Meeting points in shared memory: one byte per closer, per round and phase."""

    def __init__(self) -> None:
        self.memory = mmap.mmap(-1, ROUNDS * len(PHASES) * CLOSERS + ROUNDS)

    def _slot(self, round_: int, phase: str) -> int:
        return (round_ * len(PHASES) + PHASES.index(phase)) * CLOSERS

    def meet(self, round_: int, phase: str, closer: int) -> None:
        """Arrive, then wait until every closer has: spinning before the close (no sleep, no
        yield: the closes start within microseconds of each other), yielding elsewhere."""
        start = self._slot(round_, phase)
        self.memory[start + closer] = 1
        deadline = time.monotonic() + STRAY_S
        spins = 0
        while self.memory[start : start + CLOSERS].count(0):
            if phase != "close":
                os.sched_yield()
            spins += 1
            if spins % 10_000 == 0 and time.monotonic() > deadline:
                os._exit(2)

    def left_behind(self, round_: int, value: bool | None = None) -> bool:
        """Whether ``-wal``/``-shm`` were still there once every closer had closed."""
        where = ROUNDS * len(PHASES) * CLOSERS + round_
        if value is not None:
            self.memory[where] = int(value)
        return bool(self.memory[where])


def _closer(path: Path, closer: int, meeting: _Meeting, acknowledged: int) -> NoReturn:
    code = 1
    try:
        for round_ in range(ROUNDS):
            last = connect(str(path), isolation_level=None)
            last.execute("SELECT count(*) FROM messages").fetchone()  # SQLite's shared lock
            if round_ < WRITING_ROUNDS:
                db = SessionDB(path)
                message_id = db.append_message(SESSION, "user", f"round {round_} by {closer}")
                db.close()  # not this process's last connection: ``last`` is
                os.write(acknowledged, f"{message_id} {round_} {closer}\n".encode())
            meeting.meet(round_, "close", closer)
            last.close()
            meeting.meet(round_, "closed", closer)
            if closer == 0:
                # stat only (the file rule): nothing of the store's is opened from Python.
                meeting.left_behind(
                    round_, any(os.path.lexists(f"{path}{s}") for s in ("-wal", "-shm"))
                )
            meeting.meet(round_, "checked", closer)
        code = 0
    finally:
        os._exit(code)


def test_processes_closing_together_leave_one_file_holding_every_write(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    db = SessionDB(path)
    db.create_session(SESSION, "cli")
    db.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.db"]

    meeting = _Meeting()
    read_end, write_end = os.pipe()
    children = []
    for closer in range(CLOSERS):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - a closer
            os.close(read_end)
            _closer(path, closer, meeting, write_end)
        children.append(pid)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        reported = pipe.read().decode()  # until every closer has ended
    codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children]
    assert codes == [0] * CLOSERS

    assert [r for r in range(ROUNDS) if meeting.left_behind(r)] == []
    acknowledged = {
        int(message_id): f"round {round_} by {closer}"
        for message_id, round_, closer in (line.split() for line in reported.splitlines())
    }
    assert len(acknowledged) == CLOSERS * WRITING_ROUNDS
    db = SessionDB(path)
    stored = {message["id"]: message["content"] for message in db.get_messages(SESSION)}
    db.close()
    assert stored == acknowledged
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.db"]
