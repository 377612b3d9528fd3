#!/usr/bin/env python3
"""How long adopting an old Hermes file takes: ``migrate.upgrade`` on copies of one file.

The file: ``--hermes v1``, the killed-upgrade tests' Hermes v1 file (``tests/support/faultlib``
``build_large_legacy_store``: ``--messages`` chat rows, most with CJK words), or ``--hermes
0.18.0``, ``scripts/bench.py``'s corpus written by hermes-agent 0.18.0's own ``SessionDB``
(schema v17, 2 % of the messages with CJK; the wheel fetched once, as ``bench.py`` fetches it).
It is built once into ``--workdir`` (kept for the next run) and copied with SQLite's backup
API before each of ``--rounds`` upgrades to head. Per round: the wall time and this thread's
CPU, and each revision whose step took at least 0.1 CPU s (told by ``progress``).

Compare two trees on the same file by running this script from each, alternately: with
``PYTHONPATH=<other checkout>`` it imports that checkout's ``sessionstore``.

Usage: ``python scripts/bench_adoption.py [--hermes v1|0.18.0] [--messages 50000]
[--rounds 3] [--workdir DIR]``.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))
sys.path.insert(0, str(ROOT / "scripts"))

import sessionstore  # noqa: E402
from sessionstore.schema import migrate  # noqa: E402
from sessionstore.storage.config import sqlite_url  # noqa: E402

STEP_SHOWN_CPU_S = 0.1


def build_file(path: Path, hermes: str, messages: int) -> None:
    if hermes == "v1":
        from faultlib import build_large_legacy_store

        build_large_legacy_store(path, messages=messages, journal_mode="wal")
        return
    import bench

    root = bench.unpacked_hermes(bench.DEFAULT_HERMES_CACHE, hermes)
    os.environ["HERMES_HOME"] = tempfile.mkdtemp(prefix="bench-adoption-home-")
    module = bench.load_hermes_module(hermes, root)
    bench.write_hermes_file(
        path, bench.build_corpus(messages), bench.HermesSource(hermes, root, module)
    )


def fresh_copy(source: Path, target: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{target}{suffix}").unlink(missing_ok=True)
    with closing(sqlite3.connect(source)) as origin, closing(sqlite3.connect(target)) as copy:
        origin.backup(copy)


def upgrade_once(path: Path) -> tuple[float, float, list[tuple[str, float]]]:
    steps: list[tuple[str, float]] = []
    last = [time.thread_time()]

    def reached(revision: str) -> None:
        now = time.thread_time()
        steps.append((revision, now - last[0]))
        last[0] = now

    wall, cpu = time.perf_counter(), time.thread_time()
    migrate.upgrade(sqlite_url(path), progress=reached)
    return time.perf_counter() - wall, time.thread_time() - cpu, steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hermes", choices=("v1", "0.18.0"), default="v1")
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()))
    options = parser.parse_args()
    options.workdir.mkdir(parents=True, exist_ok=True)
    original = options.workdir / f"adoption-{options.hermes}-{options.messages}.db"
    if not original.exists():
        building = original.with_suffix(".building")
        building.unlink(missing_ok=True)
        build_file(building, options.hermes, options.messages)
        building.rename(original)
    print(f"sessionstore from {Path(sessionstore.__file__).parent}; file {original}")
    target = options.workdir / f"adoption-{options.hermes}-{options.messages}-upgraded.db"
    for number in range(1, options.rounds + 1):
        fresh_copy(original, target)
        wall, cpu, steps = upgrade_once(target)
        shown = ", ".join(f"{rev} {s:.2f}" for rev, s in steps if s >= STEP_SHOWN_CPU_S)
        print(f"round {number}: wall {wall:.2f} s, CPU {cpu:.2f} s (steps of 0.1 s+: {shown})")


if __name__ == "__main__":
    main()
