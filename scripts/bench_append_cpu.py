"""One ``append_message``, taken apart by thread CPU time: where sessionstore's time goes, against
Hermes v6 (and iot 0.22.2 when its side venv is there) in one process.

    .venv/bin/python scripts/bench_append_cpu.py [--rounds 15] [--reps 200] [--workdir DIR]
        [--no-triggers]

Three parts, every figure a median over rounds of the mean per call (``time.thread_time``:
what this thread ran, not what the machine's other processes took from it; fsync waits are
not CPU and are not in it, ``--wall`` adds wall-clock figures):

1. **Whole calls**, the sides interleaved call by call in a rotating order: sessionstore's
   ``SessionDB.append_message`` against v6's (and iot's), the same messages to the same
   sessions, each side on its own fresh file in WAL mode (ours pysqlite3, Hermes stdlib
   ``sqlite3``: no file is opened by both drivers).
2. **sessionstore's phases**: the same call with timers around its pieces (Python before the
   SQL, the writers' queue, BEGIN, the sessions UPDATE, the INSERT with its triggers, COMMIT,
   the release and after); "other" is what the timers do not cover (the glue between them).
3. **The statements on a raw pysqlite3 connection** (``--no-triggers`` skips it): BEGIN
   IMMEDIATE, our UPDATE and INSERT texts, COMMIT, on a copy of our file, then the INSERT again
   on copies without one trigger or index each, to price each.
4. **The hand-over** (``--handover N``): each side's whole ``append_message`` again, the calls
   going to N stores of one file in turn (each its own connections, as N writer processes
   have), against one store. A connection that finds the file changed by another since its
   last transaction drops its whole page cache (SQLite's pager, in WAL mode) and reads again
   every page the append walks: what a fair queue of writers pays at every turn, and a
   writer that takes the lock again and again (a convoy) does not.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench

from sessionstore.api.session_db import SessionDB
from sessionstore.dialects.sqlite_library import connect
from sessionstore.sessions import messages as messages_module
from sessionstore.sql import statements
from sessionstore.storage import store as store_module

SESSIONS = 20
SEEDED_PER_SESSION = 50
TEXT = ("Deploying the docker image to staging failed: the health check timed out after 30 s; "
        "retrying with a longer grace period.")  # fmt: skip


def message(index: int) -> dict[str, Any]:
    """A plain text message, alternating user and assistant, each one distinct."""
    return {"role": "user" if index % 2 else "assistant", "content": f"{TEXT} #{index}"}


def fresh_ours(path: Path) -> SessionDB:
    """Our store, created and filled, then opened again as the bench opens it (a store at
    head: nothing migrates, the connections are new)."""
    db = SessionDB(url=f"sqlite:///{path}")
    for number in range(SESSIONS):
        db.create_session(f"s{number}", "cli")
        db.append_messages(f"s{number}", [message(i) for i in range(SEEDED_PER_SESSION)])
    db.close()
    return SessionDB(url=f"sqlite:///{path}")


def fresh_hermes(source: bench.HermesSource, path: Path) -> Any:
    db = source.module.SessionDB(db_path=path)
    for number in range(SESSIONS):
        db.create_session(f"s{number}", "cli")
        for i in range(SEEDED_PER_SESSION):
            db.append_message(f"s{number}", **message(i))
    return db


def appender(*stores: Any) -> Callable[[], None]:
    """One message stream of distinct messages over the sessions, each call appending the next
    one through ``stores`` in turn (one store: that store every time)."""
    counter = itertools.count(SEEDED_PER_SESSION)
    sessions = itertools.cycle([f"s{number}" for number in range(SESSIONS)])
    appends = itertools.cycle([store.append_message for store in stores])

    def one() -> None:
        next(appends)(next(sessions), **message(next(counter)))

    return one


def per_call(call: Callable[[], None], reps: int, clock: Callable[[], float]) -> float:
    started = clock()
    for _ in range(reps):
        call()
    return (clock() - started) / reps * 1e6


def whole_calls(sides: dict[str, Callable[[], None]], rounds: int, reps: int,
                clock: Callable[[], float]) -> dict[str, float]:
    """Median over rounds of each side's mean per call (µs), the order rotating."""
    figures: dict[str, list[float]] = defaultdict(list)
    names = list(sides)
    for number in range(rounds):
        order = names[number % len(names):] + names[:number % len(names)]
        for name in order:
            figures[name].append(per_call(sides[name], reps, clock))
    return {name: statistics.median(values) for name, values in figures.items()}


class Phases:
    """Timers around the pieces of one sessionstore append (thread CPU, µs summed per call)."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = defaultdict(float)
        self._undo: list[Callable[[], None]] = []

    def wrap(self, owner: Any, attribute: str, label: str) -> None:
        original = getattr(owner, attribute)

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.thread_time()
            try:
                return original(*args, **kwargs)
            finally:
                self.spent[label] += time.thread_time() - started

        setattr(owner, attribute, timed)
        self._undo.append(lambda: setattr(owner, attribute, original))

    def undo(self) -> None:
        while self._undo:
            self._undo.pop()()


def phases(db: SessionDB, rounds: int, reps: int) -> dict[str, float]:
    timers = Phases()
    repo = db._repo
    dialect = repo.store.engine.dialect
    timers.wrap(type(repo), "prepare_message", "Python: prepare_message (validate, encode)")
    timers.wrap(messages_module, "message_rows", "Python: message_rows (uid, identity)")
    timers.wrap(store_module.WriteLock, "enter", "writers' queue: enter (thread lock, gate, lock)")
    timers.wrap(store_module.WriteLock, "release", "writers' queue: release")
    timers.wrap(store_module.Store, "_writer_connection", "writer connection (kept)")
    statements_label = "UPDATE sessions, INSERT messages (+ triggers)"
    for method in ("bump_counters", "insert_messages", "append_one"):
        if hasattr(statements.HotWrites, method):  # append_one: one cursor for both
            timers.wrap(statements.HotWrites, method, statements_label)
    timers.wrap(dialect, "do_commit", "COMMIT")
    timers.wrap(store_module.Store, "_count_write", "after: count (checkpoint every 50)")
    # BEGIN is the begin listener's: timed as Connection.begin (the listener and SQLAlchemy's
    # transaction object around it).
    from sqlalchemy.engine import Connection

    timers.wrap(Connection, "begin", "BEGIN IMMEDIATE (+ SQLAlchemy Transaction)")
    one = appender(db)
    totals: list[float] = []
    shares: dict[str, list[float]] = defaultdict(list)
    try:
        for _ in range(rounds):
            timers.spent.clear()
            started = time.thread_time()
            for _ in range(reps):
                one()
            total = (time.thread_time() - started) / reps * 1e6
            totals.append(total)
            covered = 0.0
            for label, spent in timers.spent.items():
                shares[label].append(spent / reps * 1e6)
                covered += spent / reps * 1e6
            shares["other (glue, the timers themselves)"].append(total - covered)
    finally:
        timers.undo()
    result = {label: statistics.median(values) for label, values in shares.items()}
    result["total (with timers)"] = statistics.median(totals)
    return result


def copy_file(source: Path, target: Path) -> None:
    """A copy through SQLite's backup API (the source's connections stay as they are)."""
    with connect(source) as src, connect(target) as dst:
        src.backup(dst)
    dst.close()
    src.close()


def raw_statements(ours_file: Path, workdir: Path, rounds: int, reps: int,
                   db: SessionDB) -> tuple[dict[str, float], dict[str, float]]:
    """Our statements on a raw pysqlite3 connection; then the INSERT without each trigger."""
    hot = db._repo._hot_writes
    insert_sql = hot._insert_one.sql
    update = hot._bump_counters
    rows_for = messages_module.message_rows

    def connected(path: Path) -> Any:
        conn = connect(path)
        conn.isolation_level = None
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA journal_mode = WAL")
        return conn

    counter = itertools.count(10_000)
    prepared = db._repo.prepare_message

    def statement_costs(conn: Any, *, with_update: bool = True) -> dict[str, list[float]]:
        costs: dict[str, list[float]] = defaultdict(list)
        for _ in range(rounds):
            spent: dict[str, float] = defaultdict(float)
            for _ in range(reps):
                index = next(counter)
                session = f"s{index % SESSIONS}"
                row = rows_for(session, [prepared(**message(index))], time.time())[0]
                values = {"session_id": session, "messages_added": 1, "tool_calls_added": 0,
                          "message_limit": 2**63 - 2, "tool_call_limit": 2**63 - 1}
                t0 = time.thread_time()
                conn.execute("BEGIN IMMEDIATE")
                t1 = time.thread_time()
                if with_update:
                    conn.execute(update.sql_for(values), update.parameters(values))
                t2 = time.thread_time()
                conn.execute(insert_sql, hot._insert_one.parameters(row))
                t3 = time.thread_time()
                conn.execute("COMMIT")
                t4 = time.thread_time()
                spent["BEGIN IMMEDIATE"] += t1 - t0
                spent["UPDATE sessions"] += t2 - t1
                spent["INSERT messages"] += t3 - t2
                spent["COMMIT"] += t4 - t3
            for label, value in spent.items():
                costs[label].append(value / reps * 1e6)
        return costs

    base = workdir / "raw.db"
    copy_file(ours_file, base)
    conn = connected(base)
    names = [row[0] for row in conn.execute(
        "SELECT name FROM sqlite_master WHERE tbl_name = 'messages' AND type IN "
        "('trigger', 'index') AND sql IS NOT NULL AND (type = 'index' OR sql LIKE "
        "'%AFTER INSERT%') ORDER BY type DESC, name")]
    whole = {label: statistics.median(values) for label, values in statement_costs(conn).items()}
    conn.close()
    # Each trigger/index alone removed, on its own copy; its price is the INSERT's drop.
    without: dict[str, list[float]] = defaultdict(list)
    copies = {}
    for name in [None, *names]:
        path = workdir / f"raw-{name or 'all'}.db"
        copy_file(ours_file, path)
        if name is not None:
            with connect(path) as edit:
                found = edit.execute("SELECT type FROM sqlite_master WHERE name = ?",
                                     (name,)).fetchone()[0]
                edit.execute(f"DROP {'TRIGGER' if found == 'trigger' else 'INDEX'} {name}")
            edit.close()
        copies[name] = connected(path)
    for _ in range(3):  # interleaved: each copy in turn, three times
        for name, copy in copies.items():
            costs = statement_costs(copy, with_update=False)
            for spent in zip(costs["INSERT messages"], costs["COMMIT"], strict=True):
                without[name or "(all present)"].append(sum(spent))
    for copy in copies.values():
        copy.close()
    insert_costs = {name: statistics.median(values) for name, values in without.items()}
    return whole, insert_costs


V6_INSERT = (
    "INSERT INTO messages (session_id, role, content, tool_call_id, tool_calls, tool_name, "
    "timestamp, token_count, finish_reason, reasoning, reasoning_details, "
    "codex_reasoning_items) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
V6_UPDATE = "UPDATE sessions SET message_count = message_count + 1 WHERE id = ?"


def v6_statements(v6_file: Path, workdir: Path, rounds: int, reps: int) -> dict[str, float]:
    """What v6's append runs (its two statements, as its source spells them), timed the same
    way on pysqlite3, on a copy of v6's file made with the standard library's backup API (the
    copy is opened by pysqlite3 alone)."""
    import sqlite3

    copy = workdir / "raw-v6.db"
    with sqlite3.connect(v6_file) as src, sqlite3.connect(copy) as dst:
        src.backup(dst)
    dst.close()
    src.close()
    conn = connect(copy)
    conn.isolation_level = None
    conn.execute("PRAGMA journal_mode = WAL")
    counter = itertools.count(10_000)
    costs: dict[str, list[float]] = defaultdict(list)
    for _ in range(rounds):
        spent: dict[str, float] = defaultdict(float)
        for _ in range(reps):
            index = next(counter)
            session = f"s{index % SESSIONS}"
            text = message(index)
            t0 = time.thread_time()
            conn.execute("BEGIN IMMEDIATE")
            t1 = time.thread_time()
            conn.execute(V6_INSERT, (session, text["role"], text["content"], None, None, None,
                                     time.time(), None, None, None, None, None))
            t2 = time.thread_time()
            conn.execute(V6_UPDATE, (session,))
            t3 = time.thread_time()
            conn.execute("COMMIT")
            t4 = time.thread_time()
            spent["BEGIN IMMEDIATE"] += t1 - t0
            spent["INSERT messages"] += t2 - t1
            spent["UPDATE sessions"] += t3 - t2
            spent["COMMIT"] += t4 - t3
        for label, value in spent.items():
            costs[label].append(value / reps * 1e6)
    conn.close()
    return {label: statistics.median(values) for label, values in costs.items()}


def wal_frames_per_append(checkpoint: Callable[[], int], append: Callable[[], None],
                          reps: int = 15) -> float:
    """Pages one append writes to the WAL (its frames): after a checkpoint that copied the whole
    log, the next write starts the log again, so the frames a PASSIVE checkpoint reports after
    one append are that append's. ``checkpoint`` runs ``PRAGMA wal_checkpoint(PASSIVE)`` on a
    connection the side already holds and returns its log frames: a second connection opened
    and closed here would drop every POSIX lock this process holds on the file."""
    frames = []
    for _ in range(reps):
        checkpoint()
        append()
        frames.append(checkpoint())
    return float(statistics.median(frames))


def hermes_checkpoint(hermes: Any) -> Callable[[], int]:
    """A PASSIVE checkpoint on the Hermes side's own connection (``_conn``)."""
    return lambda: int(hermes._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1])


def store_checkpoint(db: SessionDB) -> Callable[[], int]:
    """A PASSIVE checkpoint on a connection of the store's own pool (returned to it after)."""
    def run() -> int:
        with db.store.engine.connect() as conn:
            row = conn.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        assert row is not None
        return int(row[1])
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--no-triggers", action="store_true", help="skip part 3")
    parser.add_argument("--wall", action="store_true", help="part 1 by wall clock too")
    parser.add_argument("--handover", type=int, default=0, metavar="N",
                        help="part 4: appends going to N stores of one file in turn")
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench_append_"))
    workdir.mkdir(parents=True, exist_ok=True)
    os.environ["HERMES_HOME"] = str(workdir / "hermes_home")
    roots: dict[str, Path] = {"v6": bench.default_hermes_v6()}
    try:
        roots["iot-0.22.2"] = bench.fork_root("iot-0.22.2")
    except (SystemExit, Exception) as exc:  # its venv is made by the field tests
        print(f"(iot 0.22.2 not measured: {exc})")
    sides: dict[str, Callable[[], None]] = {}
    checkpoints: dict[str, Callable[[], int]] = {}
    keep: list[Any] = []
    sources: dict[str, bench.HermesSource] = {}
    opened: dict[str, Any] = {}
    for key, root in roots.items():
        source = sources[key] = bench.HermesSource(key, root, bench.load_hermes_module(key, root))
        hermes = opened[key] = fresh_hermes(source, workdir / f"hermes_{key}.db")
        keep.append(hermes)
        sides[f"Hermes {key}"] = appender(hermes)
        checkpoints[f"Hermes {key}"] = hermes_checkpoint(hermes)
    ours_file = workdir / "ours.db"
    ours = fresh_ours(ours_file)
    sides["sessionstore"] = appender(ours)
    checkpoints["sessionstore"] = store_checkpoint(ours)
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {args.rounds} rounds x "
          f"{args.reps} calls; files in {workdir}")
    for side in sides.values():  # warm up: statements compiled, pages cached
        for _ in range(50):
            side()
    print("\n1. whole append_message, thread CPU µs per call (median of round means)")
    cpu = whole_calls(sides, args.rounds, args.reps, time.thread_time)
    v6 = cpu["Hermes v6"]
    for name, value in cpu.items():
        print(f"   {name:<22} {value:8.1f}   {value / v6:5.2f}x of v6")
    print("   pages written to the WAL per append: " + ", ".join(
        f"{name} {wal_frames_per_append(checkpoints[name], sides[name]):.0f}"
        for name in ("Hermes v6", "sessionstore")))
    if args.wall:
        print("   wall clock µs per call")
        wall = whole_calls(sides, args.rounds, args.reps, time.perf_counter)
        for name, value in wall.items():
            print(f"   {name:<22} {value:8.1f}   {value / wall['Hermes v6']:5.2f}x of v6")
    print("\n2. sessionstore's append, by phase (thread CPU µs per call)")
    for label, value in phases(ours, args.rounds, args.reps).items():
        print(f"   {label:<52} {value:7.1f}")
    if not args.no_triggers:
        whole, inserts = raw_statements(ours_file, workdir, max(3, args.rounds // 3),
                                        args.reps, ours)
        print("\n3. the same statements on a raw pysqlite3 connection (thread CPU µs)")
        for label, value in whole.items():
            print(f"   {label:<22} {value:7.1f}")
        print("   the INSERT and its COMMIT, on a copy without one trigger or index:")
        full = inserts.pop("(all present)")
        print(f"   {'(all present)':<40} {full:7.1f}")
        for name, value in sorted(inserts.items(), key=lambda item: item[1]):
            print(f"   without {name:<32} {value:7.1f}   ({full - value:+6.1f} its cost)")
        print("\n   v6's two statements, the same way (its file copied, pysqlite3)")
        for label, value in v6_statements(workdir / "hermes_v6.db", workdir,
                                          max(3, args.rounds // 3), args.reps).items():
            print(f"   {label:<22} {value:7.1f}")
    if args.handover > 1:
        print(f"\n4. the hand-over: append_message going to {args.handover} stores of one file "
              "in turn, against one store (thread CPU µs per call)")
        turns = {"Hermes v6 (one store)": sides["Hermes v6"],
                 "sessionstore (one store)": sides["sessionstore"]}
        others: list[Any] = []
        v6_file = workdir / "hermes_v6.db"
        v6_stores = [opened["v6"]] + [sources["v6"].module.SessionDB(db_path=v6_file)
                                      for _ in range(args.handover - 1)]
        our_stores = [ours] + [SessionDB(url=f"sqlite:///{ours_file}")
                               for _ in range(args.handover - 1)]
        others += v6_stores[1:] + our_stores[1:]
        turns[f"Hermes v6 ({args.handover} in turn)"] = appender(*v6_stores)
        turns[f"sessionstore ({args.handover} in turn)"] = appender(*our_stores)
        for turn in turns.values():
            for _ in range(20):
                turn()
        cpu = whole_calls(turns, args.rounds, args.reps, time.thread_time)
        for name, value in cpu.items():
            print(f"   {name:<32} {value:8.1f}")
        for label in ("Hermes v6", "sessionstore"):
            extra = cpu[f"{label} ({args.handover} in turn)"] - cpu[f"{label} (one store)"]
            print(f"   {label}: a hand-over costs {extra:+.1f} µs an append")
        for other in others:
            other.close()
    ours.close()
    for hermes in keep:
        hermes.close()
    if args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
