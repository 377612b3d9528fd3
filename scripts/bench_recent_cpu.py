"""iot 0.22.2's bounded recent browse per call, by thread CPU time: sessionstore against iot.

    .venv/bin/python scripts/bench_recent_cpu.py [--rounds 15] [--workdir DIR] [--iot DIR]

A small store as an agent's ``session_search`` browses it: 60 conversations, every fourth a
compression chain of three sessions, six messages in each session, written by iot 0.22.2's
own ``SessionDB`` (stdlib ``sqlite3``, imported from the field tests' side venv as
``scripts/bench.py`` imports it); ours opens a copy of that file (pysqlite3), made after
iot's ``SessionDB`` closed it: no file is opened by both drivers. ``SessionDB.
list_recent_sessions_bounded(limit=20)`` of each side is timed by ``time.thread_time_ns``
(what this thread ran, not what other processes took from it), 20 calls a side per round,
the sides alternating which goes first; printed: the median per call of each side and of
the rounds' ratio ours / iot. The two results must be equal, key order included (else the
script stops). ``--workdir`` keeps the files for the next run (reused when present): run
the script from two trees (``PYTHONPATH=TREE``, from outside the checkout) on one workdir
to compare them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench

from sessionstore.api.session_db import SessionDB

CONVERSATIONS = 60
CHAIN_EVERY = 4
CHAIN_LENGTH = 3
MESSAGES_PER_SESSION = 6
CALLS_PER_ROUND = 20
BROWSE = {"limit": 20}


def write_iot_file(module: Any, path: Path) -> None:
    """The store, written through iot's own ``SessionDB`` (its DDL, triggers and clock)."""
    db = module.SessionDB(db_path=path)
    try:
        for index in range(CONVERSATIONS):
            root = f"conversation-{index:03d}"
            db.create_session(root, "telegram" if index % 3 == 0 else "cli", model="model")
            chain = [root]
            length = CHAIN_LENGTH if index % CHAIN_EVERY == 0 else 1
            while True:
                current = chain[-1]
                for number in range(MESSAGES_PER_SESSION):
                    role = "user" if number % 2 == 0 else "assistant"
                    db.append_message(current, role, f"message {number} of {current}: deploy")
                if len(chain) == length:
                    break
                db.end_session(current, "compression")
                chain.append(f"{root}-continued-{len(chain)}")
                db.create_session(chain[-1], "cli", model="model", parent_session_id=current)
    finally:
        db.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/ss-recent-cpu"))
    parser.add_argument("--iot", type=Path, default=None,
                        help="iot 0.22.2's site-packages (default: the field tests' side venv)")
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    os.environ["HERMES_HOME"] = str(args.workdir / "hermes_home")
    module = bench.load_hermes_module("iot-0.22.2", args.iot or bench.fork_root("iot-0.22.2"))
    theirs_path = args.workdir / "hermes_iot-0.22.2.db"
    ours_path = args.workdir / "sessionstore.db"
    if not theirs_path.exists():
        write_iot_file(module, theirs_path)
    if not ours_path.exists():
        bench.copy_sqlite_file(theirs_path, ours_path)
    theirs = module.SessionDB(db_path=theirs_path)
    ours = SessionDB(ours_path)
    calls = {
        "iot": lambda: theirs.list_recent_sessions_bounded(**BROWSE),
        "ours": lambda: ours.list_recent_sessions_bounded(**BROWSE),
    }
    results = {side: call() for side, call in calls.items()}
    if results["ours"] != results["iot"] or [list(row) for row in results["ours"]] != [
        list(row) for row in results["iot"]
    ]:
        raise SystemExit("bench_recent_cpu.py: ours and iot 0.22.2 browse differently")
    clock = time.thread_time_ns
    load = [os.getloadavg()[0]]
    samples: dict[str, list[float]] = {side: [] for side in calls}
    sides = list(calls.items())
    for round_number in range(args.rounds):
        for side, call in sides if round_number % 2 == 0 else sides[::-1]:
            started = clock()
            for _ in range(CALLS_PER_ROUND):
                call()
            samples[side].append((clock() - started) / CALLS_PER_ROUND / 1000)
    load.append(os.getloadavg()[0])
    ours.close()
    theirs.close()
    ratio = statistics.median(
        o / t for o, t in zip(samples["ours"], samples["iot"], strict=True))
    print(f"list_recent_sessions_bounded(limit=20), {len(results['ours'])} rows: thread CPU per "
          f"call, median of {args.rounds} interleaved rounds of {CALLS_PER_ROUND}; load average "
          f"{load[0]:.1f} -> {load[1]:.1f}")
    print(f"iot 0.22.2 {statistics.median(samples['iot']):7.0f} us   ours "
          f"{statistics.median(samples['ours']):7.0f} us   ours / iot {ratio:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
