"""A long task writing in turns leaves the lock free now and then for writers outside the
queue (``storage.write_turns``).

Hermes's own writers wait in SQLite's busy handler, which tries the lock up to 100 ms apart. A
task that begins its next transaction microseconds after its commit (an import in batches, a
prune in turns) found the lock free every time, and such a writer almost never did: it waited
out its busy timeout (iot's: 1 s) and failed, or spent its retry budget, for as long as the
task ran.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import Connection, func, select
from sqlalchemy.engine import make_url

from sessionstore import SessionDB
from sessionstore.dialects.sqlite import SQLiteDialect
from sessionstore.sql.tables import state_meta_table as state_meta
from sessionstore.storage import write_turns
from sessionstore.storage.write_turns import HOLD_S, WriteTurns

# A Hermes-like writer in a process of its own (never a second SQLite library in this one): the
# standard library's sqlite3 with iot 0.22.2's 1 s busy timeout, a write every 10 ms until told
# to stop, each acknowledged (or its failure reported) on stdout.
_FOREIGN_WRITER = """
import json, pathlib, sqlite3, sys, time
path, stop = sys.argv[1], pathlib.Path(sys.argv[2])
conn = sqlite3.connect(path, timeout=1.0, isolation_level=None)
print(json.dumps({"ready": True}), flush=True)
n = 0
while not stop.exists():
    began = time.time()
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO state_meta (key, value) VALUES (?, 'x')", (f"foreign-{n}",))
        conn.execute("COMMIT")
        print(json.dumps({"ack": n, "at": time.time()}), flush=True)
        n += 1
    except sqlite3.OperationalError as exc:
        print(json.dumps({"error": str(exc), "waited": time.time() - began}), flush=True)
        conn.execute("ROLLBACK") if conn.in_transaction else None
    time.sleep(0.01)
"""

TURNS, TURN_HOLD_S = 40, 0.04
"""The task: 40 turns each holding the lock 40 ms, 1.6 s in all (four times HOLD_S)."""

Work = Callable[[Connection], Any]
Write = Callable[[Work], Any]


@pytest.fixture
def store_file(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "state.db"
    SessionDB(path).close()
    yield path


def _run_task(write: Write) -> None:
    for turn in range(TURNS):

        def work(conn: Connection, turn: int = turn) -> None:
            conn.execute(state_meta.insert().values(key=f"task-{turn}", value="y"))
            time.sleep(TURN_HOLD_S)  # a heavy batch: the lock is held

        write(work)


def _beside_a_foreign_writer(
    path: Path, tmp_path: Path, write_of: Callable[[SessionDB], Write]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], float, float]:
    stop = tmp_path / "stop"
    foreign = subprocess.Popen(
        [sys.executable, "-c", _FOREIGN_WRITER, str(path), str(stop)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert foreign.stdout is not None
        assert json.loads(foreign.stdout.readline()) == {"ready": True}
        with SessionDB(path) as db:
            began = time.time()
            _run_task(write_of(db))
            finished = time.time()
            assert (
                db.store.read(
                    lambda conn: conn.scalar(
                        select(func.count()).where(state_meta.c.key.like("task-%"))
                    )
                )
                == TURNS
            )
        stop.touch()
        out, _ = foreign.communicate(timeout=30)
    finally:
        if foreign.poll() is None:
            foreign.kill()
            foreign.wait()
    lines = [json.loads(line) for line in out.splitlines()]
    acks = [line for line in lines if "ack" in line]
    errors = [line for line in lines if "error" in line]
    return acks, errors, began, finished


@pytest.mark.slow  # a program of its own, beside 1.6 s of turns
def test_a_writer_in_sqlites_busy_handler_writes_while_the_task_runs(
    store_file: Path, tmp_path: Path
) -> None:
    def paced(db: SessionDB) -> Write:
        return WriteTurns(db.store).write

    acks, errors, began, finished = _beside_a_foreign_writer(store_file, tmp_path, paced)
    assert errors == [], errors  # it never waited out its 1 s busy timeout
    # It went on writing through the task, not only before and after it.
    middle = [ack for ack in acks if began + 0.3 < ack["at"] < finished - 0.3]
    assert len(middle) >= 2, (len(middle), finished - began)
    with SessionDB(store_file) as db:  # every acknowledged write is in the file
        keys = db.store.read(lambda conn: set(conn.scalars(select(state_meta.c.key))))
    assert {f"foreign-{ack['ack']}" for ack in acks} <= keys


@pytest.mark.slow  # a program of its own, beside 1.6 s of turns
def test_without_the_pauses_that_writer_waits_out_its_busy_timeout(
    store_file: Path, tmp_path: Path
) -> None:
    """The contrast: the same task through ``store.write`` directly, each transaction begun
    as soon as the last committed."""

    def direct(db: SessionDB) -> Write:
        return db.store.write

    _acks, errors, _began, _finished = _beside_a_foreign_writer(store_file, tmp_path, direct)
    assert errors, "the foreign writer found the lock free although nobody stood aside"
    assert all(error["error"] == "database is locked" for error in errors)


class _Clock:
    """A clock the task's work moves: each turn holds the lock for what it says."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_the_task_stands_aside_once_per_hold_and_not_after_its_last_turn(
    store_file: Path,
) -> None:
    clock = _Clock()
    with SessionDB(store_file) as db:
        turns = WriteTurns(db.store, clock=clock, sleep=clock.sleep)
        assert turns.pause_s == pytest.approx(0.1 + write_turns.MARGIN_S)

        def holding(seconds: float) -> Work:
            def work(conn: Connection) -> None:
                clock.now += seconds

            return work

        # HOLD_S in quarters (a hair over: the clock's sums are floating point): a pause
        # before the fifth turn, the ninth; none after the last.
        quarter = HOLD_S / 4 + 1e-9
        for _ in range(8):
            turns.write(holding(quarter))
        assert clock.slept == [turns.pause_s]
        # Time spent waiting for the lock (before the work begins) is not holding it.
        clock.now += 10 * HOLD_S
        turns.write(holding(quarter))
        assert clock.slept == [turns.pause_s, turns.pause_s]
        for _ in range(2):
            turns.write(holding(quarter))
        assert turns.pauses == 2
        # A failed turn's hold counts too; its error goes to the caller.

        def failing(conn: Connection) -> None:
            clock.now += HOLD_S
            raise ValueError("the batch was refused")

        with pytest.raises(ValueError, match="refused"):
            turns.write(failing)
        turns.write(holding(0.0))
        assert turns.pauses == 3


def test_nothing_stands_aside_in_a_database_no_other_process_can_open() -> None:
    with SessionDB(":memory:") as db:
        turns = WriteTurns(db.store)
        assert turns.pause_s is None
        for turn in range(3):

            def work(conn: Connection, turn: int = turn) -> None:
                conn.execute(state_meta.insert().values(key=f"memory-{turn}", value="y"))

            turns.write(work)
        assert turns.pauses == 0


@pytest.mark.usefixtures("require_postgresql")
def test_nothing_stands_aside_where_writers_queue_for_their_locks(pg_store_url: str) -> None:
    clock = _Clock()
    with SessionDB(url=pg_store_url) as db:
        turns = WriteTurns(db.store, clock=clock, sleep=clock.sleep)
        assert turns.pause_s is None
        for turn in range(5):

            def work(conn: Connection, turn: int = turn) -> None:
                clock.now += HOLD_S
                conn.execute(state_meta.insert().values(key=f"pg-task-{turn}", value="y"))

            turns.write(work)
        assert clock.slept == [] and turns.pauses == 0
        assert (
            db.store.read(
                lambda conn: conn.scalar(
                    select(func.count()).where(state_meta.c.key.like("pg-task-%"))
                )
            )
            == 5
        )


class _Store:
    """What ``WriteTurns`` uses of a store, without a database: its dialect, and a write that
    runs the work (the property below is about the clock, not the SQL)."""

    dialect = SQLiteDialect()
    engine = SimpleNamespace(url=make_url("sqlite:////nowhere/state.db"))  # a file: shared

    def write(self, work: Work) -> Any:
        return work(cast(Connection, None))


@given(st.lists(st.floats(min_value=0.0, max_value=1.5, allow_nan=False), max_size=60))
def test_the_lock_is_never_held_past_one_turn_beyond_the_hold_between_two_pauses(
    turn_lengths: list[float],
) -> None:
    """Any sequence of turns: a pause comes exactly when the turns since the last one have
    held the lock HOLD_S, so a waiter that polls at least every pause_s gets in within
    HOLD_S plus one turn plus the pause, whatever the turns' lengths."""
    clock = _Clock()
    turns = WriteTurns(cast(Any, _Store()), clock=clock, sleep=clock.sleep)
    held_since_pause = 0.0
    for length in turn_lengths:
        pauses_before = len(clock.slept)

        span: list[float] = []

        def work(conn: Connection, length: float = length, span: list[float] = span) -> None:
            span.append(clock.now)
            clock.now += length
            span.append(clock.now)

        turns.write(work)
        paused = len(clock.slept) > pauses_before
        assert paused == (held_since_pause >= HOLD_S)
        if paused:
            assert clock.slept[-1] == turns.pause_s
            held_since_pause = 0.0
        before_turn = held_since_pause
        held_since_pause += span[1] - span[0]  # as the clock tells it, rounding and all
        # Held without a pause: under HOLD_S before this turn, so under HOLD_S plus one turn.
        assert before_turn < HOLD_S
    assert turns.pauses == len(clock.slept)
