#!/usr/bin/env python3
"""The same store work on the two SQLite libraries: the standard library's and pysqlite3's.

Each round runs one fresh interpreter per library (``SESSIONSTORE_SQLITE_DRIVER``), in
alternating order so machine drift hits both alike; each child times, on its own copy of one
seeded store file:

- ``import``: ``import sessionstore`` (which loads the library);
- ``open``: ``SessionDB(path)`` on the up-to-date file, and the first read;
- ``append``: ``append_message`` of a short message, one transaction each (median);
- ``search``: ``search_messages`` for an English word and for a two-character CJK substring
  (median of each).

It prints the median over the rounds of each child's figure, per library, and their ratio.
The file is written once, by the first library, and copied with SQLite's backup API.

    python scripts/bench_sqlite_library.py [--rounds 7] [--messages 20000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LIBRARIES = ("sqlite3", "pysqlite3")

SEED = """
import random, sys
from sessionstore import SessionDB
words = "alpha beta gamma delta epsilon zeta theta kappa lambda sigma omega".split()
cjk = "中文搜索引擎数据库会话消息记录测试"
rng = random.Random(7)
with SessionDB(sys.argv[1]) as db:
    for s in range(int(sys.argv[2]) // 100):
        db.create_session(f"s{s}", "cli")
        db.append_messages(f"s{s}", [
            {"role": "user", "content": " ".join(rng.choice(words) for _ in range(20))
             + " " + "".join(rng.choice(cjk) for _ in range(6))}
            for _ in range(100)
        ])
"""

CHILD = """
import json, statistics, sys, time
t0 = time.perf_counter()
import sessionstore
from sessionstore.dialects.sqlite_library import library
t1 = time.perf_counter()
db = sessionstore.SessionDB(sys.argv[1])
db.get_messages("s0")
t2 = time.perf_counter()
appends = []
for i in range(200):
    start = time.perf_counter()
    db.append_message("s1", "user", f"appended {i}")
    appends.append(time.perf_counter() - start)
def median_of(run, n=30):
    times = []
    for _ in range(n):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)
word = median_of(lambda: db.search_messages("gamma", limit=20))
cjk = median_of(lambda: db.search_messages("数据", limit=20))
db.close()
print(json.dumps({"library": library().describe(), "import": t1 - t0, "open": t2 - t1,
                  "append": statistics.median(appends), "search word": word,
                  "search cjk": cjk}))
"""

COPY = """
import sqlite3, sys
source = sqlite3.connect(sys.argv[1]); target = sqlite3.connect(sys.argv[2])
source.backup(target); target.close(); source.close()
"""


def run(code: str, *args: str, library: str | None = None) -> str:
    env = dict(os.environ)
    if library:
        env["SESSIONSTORE_SQLITE_DRIVER"] = library
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, check=True,
        cwd=REPO, env=env,
    ).stdout  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--messages", type=int, default=20_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        seed = Path(scratch) / "seed.db"
        run(SEED, str(seed), str(args.messages))
        results: dict[str, list[dict[str, float]]] = {name: [] for name in LIBRARIES}
        described: dict[str, str] = {}
        for round_ in range(args.rounds):
            order = LIBRARIES if round_ % 2 == 0 else LIBRARIES[::-1]
            for name in order:
                copy = Path(scratch) / f"{name}-{round_}.db"
                run(COPY, str(seed), str(copy))
                report = json.loads(run(CHILD, str(copy), library=name))
                described[name] = report.pop("library")
                results[name].append(report)
    print(f"{args.rounds} rounds, {args.messages} messages; medians in ms")
    for name in LIBRARIES:
        print(f"  {name}: {described[name]}")
    keys = list(results[LIBRARIES[0]][0])
    print(f"{'workload':<14}{LIBRARIES[0]:>12}{LIBRARIES[1]:>12}{'ratio':>8}")
    for key in keys:
        a, b = (statistics.median(r[key] for r in results[name]) * 1000 for name in LIBRARIES)
        print(f"{key:<14}{a:>12.3f}{b:>12.3f}{b / a:>8.2f}")


if __name__ == "__main__":
    main()
