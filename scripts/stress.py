#!/usr/bin/env python3
"""Long fault runs: many writer processes, readers, a foreign lock holder and random SIGKILLs
against one store, then a row-by-row verdict from the database itself.

    python scripts/stress.py --minutes 5
    python scripts/stress.py --seconds 60 --processes 16 --kill-rate 30
    python scripts/stress.py --minutes 2 --url postgresql+psycopg://postgres@127.0.0.1/stress
    python scripts/stress.py --seconds 0 --migration-trials 20
    python scripts/stress.py --storm                  # 6 writers + a foreign 3 s BEGIN IMMEDIATE
    python scripts/stress.py --openers --seconds 20   # many SessionDB objects + the sqlite3 shell
    python scripts/stress.py --seconds 45 --url postgresql+psycopg://postgres@127.0.0.1/stress \
        --kill-backends 4 --kill-rate 0 --no-holds

Writers append single messages and batches (all-or-nothing turns) and log each call after it
returned; every --hold-every seconds another program holds the write lock for --hold-seconds;
writers are SIGKILLed at random (--kill-rate per minute) and restarted. The summary counts
appends that returned, and how many of them were lost, duplicated or stored corrupt (a
half-written batch, wrong text, wrong session); counters are compared with the rows and, on
SQLite, the file and its full-text index are integrity-checked. With --migration-trials, that
many upgrades of a large Hermes v1 file are SIGKILLed part-way and completed by the next
`alembic upgrade head`. Exit status 0 means nothing was lost, duplicated or corrupted and no
caller saw a lock error.

With --kill-backends (PostgreSQL), another connection also terminates the store's server
backends (pg_terminate_backend: what a server restart or an administrator does) that many
times per second while the writers append: every append must still be stored exactly once
(retried when the connection was lost before COMMIT, found rather than repeated when it was
lost during COMMIT) and no caller may see the error.

The scenarios are the long versions of tests/storage/test_faults.py and share its machinery
(tests/support/faultlib.py).

``--storm`` is the fair-waiting scenario: --processes writers (6 by default) append as fast as
they can while a foreign program holds ``BEGIN IMMEDIATE`` for --hold-seconds; it prints the
worst single append's wait (the goal: no more than the hold plus 0.3 s), the typical append
under contention, failures and the lost count. ``--openers`` is the many-openers scenario of
tests/storage/test_multi_opener.py at length: --openers-per-process ``SessionDB`` objects in each of
--processes processes, plus raw ``sqlite3`` programs inserting with Hermes's statements and
closing the file again and again; it prints the lost count and the worst wait. Both exit 1 on
any loss or failure (and --storm on a wait over the goal).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parents[1] / "tests" / "support"
sys.path.insert(0, str(TESTS_DIR))

import faultlib  # noqa: E402 - found through the path above
import openerlib  # noqa: E402 - found through the path above


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Lock storms, SIGKILLs and interrupted upgrades against a session store.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    duration = parser.add_mutually_exclusive_group()
    duration.add_argument("--minutes", type=float, help="how long the storm runs")
    duration.add_argument("--seconds", type=float, help="how long the storm runs (default 60)")
    parser.add_argument(
        "--processes", type=int, help="writer processes (default 8; --storm 6, --openers 3)"
    )
    parser.add_argument("--readers", type=int, default=2, help="processes that search and list")
    parser.add_argument(
        "--kill-rate", type=float, default=6.0, help="SIGKILLs per minute across the writers"
    )
    parser.add_argument("--url", help="store URL (default: a new SQLite file in a temp dir)")
    parser.add_argument(
        "--hold-every", type=float, default=30.0, help="seconds between foreign lock holds (0: one)"
    )
    parser.add_argument(
        "--hold-seconds", type=float, default=3.0, help="how long each foreign lock hold lasts"
    )
    parser.add_argument(
        "--no-holds", action="store_true", help="no foreign program takes the write lock"
    )
    parser.add_argument(
        "--budget", type=float, default=20.0, help="each writer's retry budget in seconds"
    )
    parser.add_argument(
        "--max-attempts", type=int, default=15, help="each writer's retry attempts (15: Hermes)"
    )
    parser.add_argument("--batch-max", type=int, default=6, help="largest batch (one turn)")
    parser.add_argument("--sessions", type=int, default=8, help="sessions the writers share")
    parser.add_argument(
        "--migration-trials", type=int, default=0, help="interrupted upgrades of a legacy v1 file"
    )
    parser.add_argument(
        "--legacy-messages", type=int, default=50_000, help="messages in that legacy file"
    )
    scenario = parser.add_mutually_exclusive_group()
    scenario.add_argument(
        "--storm", action="store_true", help="fair waiting: writers + one foreign lock hold"
    )
    scenario.add_argument(
        "--openers", action="store_true", help="many SessionDB objects + the sqlite3 shell"
    )
    parser.add_argument(
        "--openers-per-process",
        type=int,
        help="SessionDB objects per process, a thread each (default: --storm 1, --openers 3)",
    )
    parser.add_argument(
        "--kill-backends",
        type=float,
        default=0.0,
        help="PostgreSQL: pg_terminate_backend() of the store's backends, times per second",
    )
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: random)")
    parser.add_argument("--work-dir", type=Path, help="keep logs and the SQLite file here")
    args = parser.parse_args(argv)
    default_seconds = 10.0 if args.storm else 60.0
    args.seconds = (
        args.minutes * 60 if args.minutes is not None else (args.seconds or default_seconds)
    )
    if args.processes is None:
        args.processes = 6 if args.storm else 3 if args.openers else 8
    if args.openers_per_process is None:
        args.openers_per_process = 1 if args.storm else 3
    if args.kill_backends > 0:
        if not (args.url or "").startswith("postgresql"):
            parser.error("--kill-backends needs a PostgreSQL --url")
        # The foreign lock holder is a plain program without retries: its killed connection
        # would count as a crash of the harness, not of the store.
        args.no_holds = True
    if args.seed is None:
        args.seed = random.randrange(2**32)
    return args


def run_storm(args: argparse.Namespace, work_dir: Path) -> bool:
    url = args.url or faultlib.sqlite_url(work_dir / "state.db")
    config = faultlib.StormConfig(
        url=url,
        work_dir=work_dir,
        writers=args.processes,
        readers=args.readers,
        seconds=args.seconds,
        hold_at_s=None if args.no_holds else min(args.hold_every or 5.0, args.seconds / 3),
        hold_s=args.hold_seconds,
        hold_every_s=args.hold_every,
        kills_per_minute=args.kill_rate,
        sessions=args.sessions,
        batch_max=args.batch_max,
        budget_s=args.budget,
        max_attempts=args.max_attempts,
        # Unique per run, so a shared PostgreSQL database is checked only for this run's rows.
        run=f"stress{uuid.uuid4().hex[:8]}",
        seed=args.seed,
    )
    print(
        f"storm: {args.processes} writers, {args.readers} readers, {args.seconds:.0f}s, "
        f"{args.kill_rate:g} kills/min, seed {args.seed}, logs in {work_dir}",
        flush=True,
    )
    killer = BackendKiller(url, args.kill_backends, args.seconds) if args.kill_backends else None
    if killer is not None:
        killer.start()
    try:
        result = faultlib.run_storm(config)
    finally:
        if killer is not None:
            killer.finish()
    print(result.summary())
    if killer is not None:
        print(f"backends: {killer.terminated} PostgreSQL backends terminated "
              f"({killer.rounds} rounds at {args.kill_backends:g}/s) while the writers appended")
    verdict = result.verdict
    for problem in [*verdict.problems, *result.append_errors[:5], *result.read_errors[:5]]:
        print(f"  ! {problem}")
    for crash in result.crashed:
        print(f"  ! crashed: {crash}")
    return verdict.ok and not result.append_errors and not result.read_errors and not result.crashed


class BackendKiller(threading.Thread):
    """Terminates the store database's backends (all but its own) ``rate`` times a second,
    for ``seconds`` from its start: the storm starts after it (its processes must get ready
    first), so the kills stop before the storm ends and the verdict's own connection is safe.
    """

    def __init__(self, url: str, rate: float, seconds: float) -> None:
        super().__init__(daemon=True)
        import sqlalchemy as sa

        self.engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
        self.interval = 1.0 / rate
        self.seconds = seconds
        self.stop = threading.Event()
        self.terminated = 0
        self.rounds = 0

    def run(self) -> None:
        import sqlalchemy as sa

        statement = sa.text(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        stop_at = time.monotonic() + self.seconds
        with self.engine.connect() as conn:
            while not self.stop.wait(self.interval) and time.monotonic() < stop_at:
                self.terminated += int(conn.execute(statement).scalar_one())
                self.rounds += 1

    def finish(self) -> None:
        self.stop.set()
        self.join()
        self.engine.dispose()


def run_migration_trials(args: argparse.Namespace, work_dir: Path) -> bool:
    rng = random.Random(args.seed)
    ok = True
    # A kill lands inside the upgrade's transaction (the next upgrade redoes it all; with a
    # rollback journal, after rolling back the main file the upgrade had written) or not
    # provably so (after its COMMIT, or a hot journal with nothing the main file lost).
    counts = {"inside the transaction": 0, "otherwise": 0}
    for journal_mode, variant in (("delete", None), ("delete", "no_fts"), ("wal", "no_fts")):
        template = work_dir / f"legacy_v1_{journal_mode}_{variant or 'fts'}.db"
        faultlib.build_large_legacy_store(
            template, messages=args.legacy_messages, variant=variant, journal_mode=journal_mode
        )
        before = faultlib.content_fingerprint(template)
        for number in range(args.migration_trials):
            runner = rng.choice(("alembic", "python"))
            trial = faultlib.run_migration_trial(
                template, before, work_dir / "migration", runner, rng
            )
            counts[
                "inside the transaction" if trial.killed_mid_transaction else "otherwise"
            ] += 1
            if trial.problems:
                ok = False
                print(f"  ! {journal_mode}/{variant}/{runner} trial {number}: {trial.problems}")
    total = sum(counts.values())
    print(
        f"migrations: {total} upgrades of a v1 file with {args.legacy_messages} messages "
        f"SIGKILLed ({', '.join(f'{n} {kind}' for kind, n in counts.items())}); "
        f"{'all completed by the next upgrade with nothing lost' if ok else 'FAILURES above'}"
    )
    return ok


# --- --storm and --openers ---------------------------------------------------------------------

STORM_SESSION = "storm"


def _await_go(go: str) -> dict[str, float]:
    """Every process starts together once all are up (spawning is slow on a loaded machine)."""
    while True:
        try:
            plan: dict[str, float] = json.loads(Path(go).read_text())
            return plan
        except (OSError, ValueError):
            time.sleep(0.005)


def _timed_writer(url: str, tag: str, openers: int, go: str, out: str, budget: float) -> None:
    """Append from ``openers`` SessionDB objects (a thread each) while the plan says; log waits."""
    from sessionstore import SessionDB
    from sessionstore.storage.retry import RetryPolicy

    dbs = [SessionDB(url=url, retry=RetryPolicy(budget_s=budget)) for _ in range(openers)]
    results: list[dict[str, object]] = [{} for _ in range(openers)]
    Path(out + ".ready").touch()
    plan = _await_go(go)
    start_at, stop_at = plan["start_at"], plan["stop_at"]

    def run(index: int) -> None:
        acked: list[str] = []
        waits: list[tuple[float, float]] = []
        errors: list[str] = []
        while time.time() < start_at:
            time.sleep(0.001)
        number = 0
        while time.time() < stop_at:
            text = f"{tag}o{index}-{number}"
            number += 1
            began_wall, began = time.time(), time.perf_counter()
            try:
                dbs[index].append_message(STORM_SESSION, "user", text)
                acked.append(text)
            except Exception as exc:  # counted: a failed append is what we measure
                errors.append(repr(exc))
            waits.append((began_wall, time.perf_counter() - began))
        results[index] = {"acked": acked, "waits": waits, "errors": errors}

    threads = [threading.Thread(target=run, args=(i,)) for i in range(openers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for db in dbs:
        db.close()
    Path(out).write_text(json.dumps(results))


def _foreign_hold(path: str, go: str, hold_s: float, out: str) -> None:
    conn = sqlite3.connect(path, timeout=60, isolation_level=None)
    Path(out + ".ready").touch()
    hold_at = _await_go(go)["hold_at"]
    while time.time() < hold_at:
        time.sleep(0.001)
    conn.execute("BEGIN IMMEDIATE")
    held = time.time()
    time.sleep(hold_s)
    conn.execute("COMMIT")
    released = time.time()
    conn.close()
    Path(out).write_text(json.dumps({"held": held, "released": released}))


def _file_contents(path: Path) -> set[str]:
    conn = sqlite3.connect(path, timeout=60)
    try:
        return {row[0] for row in conn.execute("SELECT content FROM messages")}
    finally:
        conn.close()


def _new_storm_store(path: Path) -> str:
    from sessionstore import SessionDB

    url = faultlib.sqlite_url(path)
    with SessionDB(url=url) as db:
        db.create_session(STORM_SESSION, "cli")
    return url


def _go(work_dir: Path, outputs: list[Path], seconds: float) -> None:
    deadline = time.monotonic() + 120
    while not all(Path(f"{out}.ready").exists() for out in outputs):
        if time.monotonic() > deadline:
            raise SystemExit("the writer processes did not come up within 120 s")
        time.sleep(0.01)
    start_at = time.time() + 0.2
    plan = {"start_at": start_at, "stop_at": start_at + seconds,
            "hold_at": start_at + min(2.0, seconds / 3)}
    partial = work_dir / "go.partial"
    partial.write_text(json.dumps(plan))
    partial.replace(work_dir / "go")


def _collect(outputs: list[Path]) -> tuple[set[str], list[tuple[float, float]], list[str]]:
    acked: set[str] = set()
    waits: list[tuple[float, float]] = []
    errors: list[str] = []
    for out in outputs:
        if not out.exists():  # the writer crashed; reported by its exit code
            continue
        for opener in json.loads(out.read_text()):
            acked.update(opener["acked"])
            waits.extend(tuple(wait) for wait in opener["waits"])
            errors.extend(opener["errors"])
    return acked, waits, errors


def run_lock_storm(args: argparse.Namespace, work_dir: Path) -> bool:
    path = work_dir / "storm.db"
    url = _new_storm_store(path)
    spawn = multiprocessing.get_context("spawn")
    go = str(work_dir / "go")
    outputs = [work_dir / f"storm-writer{n}.json" for n in range(args.processes)]
    writers = [
        spawn.Process(
            target=_timed_writer,
            args=(url, f"w{n}", args.openers_per_process, go, str(out), args.budget),
        )
        for n, out in enumerate(outputs)
    ]
    hold_out = work_dir / "storm-hold.json"
    holder = spawn.Process(
        target=_foreign_hold, args=(str(path), go, args.hold_seconds, str(hold_out))
    )
    print(
        f"storm: {args.processes} writer processes x {args.openers_per_process} SessionDB "
        f"objects (a thread each) for {args.seconds:.0f}s; a foreign program "
        f"holds BEGIN IMMEDIATE for {args.hold_seconds:g}s",
        flush=True,
    )
    for process in [*writers, holder]:
        process.start()
    _go(work_dir, [*outputs, hold_out], args.seconds)
    for process in [*writers, holder]:
        process.join()
    acked, waits, errors = _collect(outputs)
    errors += [f"writer {n} exited with {p.exitcode}" for n, p in enumerate(writers) if p.exitcode]
    hold = json.loads(hold_out.read_text())
    held_s = hold["released"] - hold["held"]
    lost = acked - _file_contents(path)
    durations = sorted(wait for _, wait in waits)
    calm = sorted(
        wait for began, wait in waits if began + wait < hold["held"] or began > hold["released"]
    )
    worst = durations[-1] if durations else 0.0
    goal = held_s + 0.3
    through = [w for began, w in waits if began < hold["held"] and began + w > hold["released"]]
    print(
        f"  appends {len(waits)}, acknowledged {len(acked)}, failed {len(errors)}, "
        f"lost {len(lost)}"
    )
    print(
        f"  worst wait {worst:.3f}s (foreign hold {held_s:.3f}s; goal <= {goal:.3f}s: "
        f"{'met' if worst <= goal else 'MISSED'}); {len(through)} appends waited through "
        "the whole hold"
    )
    if calm:
        print(
            f"  outside the hold: median {statistics.median(calm) * 1e3:.2f} ms, "
            f"p99 {calm[int(len(calm) * 0.99)] * 1e3:.2f} ms, worst {calm[-1] * 1e3:.1f} ms"
        )
    for problem in errors[:5]:
        print(f"  ! {problem}")
    return not lost and not errors and worst <= goal and len(through) > 0


def run_openers(args: argparse.Namespace, work_dir: Path) -> bool:
    path = work_dir / "openers.db"
    url = _new_storm_store(path)
    spawn = multiprocessing.get_context("spawn")
    go = work_dir / "go"
    outputs = [work_dir / f"openers-{n}.json" for n in range(args.processes)]
    writers = [
        spawn.Process(
            target=_timed_writer,
            args=(url, f"p{n}", args.openers_per_process, str(go), str(out), args.budget),
        )
        for n, out in enumerate(outputs)
    ]
    print(
        f"openers: {args.processes} processes x {args.openers_per_process} SessionDB objects "
        f"(a thread each) for {args.seconds:.0f}s, plus the sqlite3 shell inserting and "
        "quitting in a loop",
        flush=True,
    )
    for process in writers:
        process.start()
    _go(work_dir, outputs, args.seconds)
    plan = json.loads(go.read_text())
    start_at, stop_at = plan["start_at"], plan["stop_at"]
    foreign_acked: set[str] = set()
    foreign_errors: list[str] = []
    visits = 0
    while time.time() < start_at:
        time.sleep(0.01)
    while time.time() < stop_at:
        shell = subprocess.run(
            [sys.executable, openerlib.PROGRAM, "foreign", str(path), STORM_SESSION,
             f"shell{visits}", "1", "5"],
            capture_output=True, text=True, check=False,
        )
        foreign_acked.update(shell.stdout.split())
        visits += 1
        if shell.returncode != 0:
            foreign_errors.append(shell.stderr.strip().splitlines()[-1])
    for process in writers:
        process.join()
    acked, waits, errors = _collect(outputs)
    errors = foreign_errors + errors
    crashed = [f"writer {n} exited with {p.exitcode}" for n, p in enumerate(writers) if p.exitcode]
    everything = acked | foreign_acked
    try:
        lost = everything - _file_contents(path)
        conn = sqlite3.connect(path)
        try:
            integrity = conn.execute("PRAGMA integrity_check").fetchone()[0]
            conn.execute("INSERT INTO messages_fts(messages_fts) VALUES('integrity-check')")
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        lost, integrity = everything, f"unreadable ({exc})"
    worst = max((wait for _, wait in waits), default=0.0)
    print(
        f"  acknowledged {len(acked)} by SessionDB and {len(foreign_acked)} by {visits} "
        f"sqlite3 visits; failed {len(errors)}, lost {len(lost)}; worst wait {worst:.3f}s; "
        f"integrity_check {integrity}"
    )
    for problem in [*crashed, *errors[:5]]:
        print(f"  ! {problem}")
    return not lost and not errors and not crashed and integrity == "ok"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sessionstore-stress-") as scratch:
        work_dir = args.work_dir or Path(scratch)
        work_dir.mkdir(parents=True, exist_ok=True)
        ok = True
        if args.storm:
            ok = run_lock_storm(args, work_dir)
        elif args.openers:
            ok = run_openers(args, work_dir)
        elif args.seconds > 0:
            ok = run_storm(args, work_dir) and ok
        if args.migration_trials > 0:
            ok = run_migration_trials(args, work_dir) and ok
    print(f"{'PASS' if ok else 'FAIL'} in {time.monotonic() - started:.0f}s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
