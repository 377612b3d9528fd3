#!/usr/bin/env python3
"""Long fault runs: many writer processes, readers, a foreign lock holder and random SIGKILLs
against one store, then a row-by-row verdict from the database itself.

    python scripts/stress.py --minutes 5
    python scripts/stress.py --seconds 60 --processes 16 --kill-rate 30
    python scripts/stress.py --minutes 2 --url postgresql+psycopg://postgres@127.0.0.1/stress
    python scripts/stress.py --seconds 0 --migration-trials 20
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

The scenarios are the long versions of tests/test_faults.py and share its machinery
(tests/faultlib.py).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parents[1] / "tests"
sys.path.insert(0, str(TESTS_DIR))

import faultlib  # noqa: E402 - found through the path above


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Lock storms, SIGKILLs and interrupted upgrades against a session store.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    duration = parser.add_mutually_exclusive_group()
    duration.add_argument("--minutes", type=float, help="how long the storm runs")
    duration.add_argument("--seconds", type=float, help="how long the storm runs (default 60)")
    parser.add_argument("--processes", type=int, default=8, help="writer processes")
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
    parser.add_argument(
        "--kill-backends",
        type=float,
        default=0.0,
        help="PostgreSQL: pg_terminate_backend() of the store's backends, times per second",
    )
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: random)")
    parser.add_argument("--work-dir", type=Path, help="keep logs and the SQLite file here")
    args = parser.parse_args(argv)
    args.seconds = args.minutes * 60 if args.minutes is not None else (args.seconds or 60.0)
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
    # A kill lands inside the upgrade's transaction (the next upgrade redoes it all) or after
    # its COMMIT (the next upgrade has nothing left to do).
    counts = {"inside the transaction": 0, "after the commit": 0}
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
                "inside the transaction" if trial.killed_mid_transaction else "after the commit"
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


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sessionstore-stress-") as scratch:
        work_dir = args.work_dir or Path(scratch)
        work_dir.mkdir(parents=True, exist_ok=True)
        ok = True
        if args.seconds > 0:
            ok = run_storm(args, work_dir) and ok
        if args.migration_trials > 0:
            ok = run_migration_trials(args, work_dir) and ok
    print(f"{'PASS' if ok else 'FAIL'} in {time.monotonic() - started:.0f}s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
