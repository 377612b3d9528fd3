"""Search per call, by thread CPU time: sessionstore against iot 0.22.2 and v6 in one process.

    .venv/bin/python scripts/bench_search_cpu.py [--rounds 40] [--iot DIR] [--workdir DIR]
        [--dump FILE]

``scripts/bench.py``'s quick corpus (5,000 messages) and search cases: each Hermes's file is
written by its own ``SessionDB`` (stdlib ``sqlite3``), ours is an adopted copy of Hermes
0.18.0's (pysqlite3): no file is opened by both drivers. Every call is timed by
``time.thread_time`` (what this thread ran, not what the other processes on a shared machine
took from it), the sides interleaved call by call, in a rotating order. Per category: the
median over rounds of each side's mean per call, and of the round's ratio ours / iot.

``--dump FILE`` writes every case's result dicts (ours) as JSON: run it before and after a
change and compare the files (results must be identical, order, snippets and context included).
``--workdir`` keeps the files for the next run (reused when present).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench

from sessionstore.api.session_db import SessionDB

QUICK_MESSAGES = 5_000
CATEGORIES = ("words", "phrases", "prefixes", "CJK words", "CJK 1 char", "CJK 2 chars",
              "CJK 3 chars")


def prepare_files(workdir: Path, iot_root: Path | None, v6_root: Path,
                  cache: Path) -> tuple[dict[str, Any], Path, list[bench.SearchCase]]:
    """Each Hermes's SessionDB on its own file, and the path of our adopted copy."""
    workdir.mkdir(parents=True, exist_ok=True)
    os.environ["HERMES_HOME"] = str(workdir / "hermes_home")
    roots = {
        "v6": v6_root,
        "0.18.0": bench.unpacked_hermes(cache),
        "iot-0.22.2": iot_root or bench.fork_root("iot-0.22.2"),
    }
    sources, ours, corpus = bench.quick_files(workdir, roots, QUICK_MESSAGES)
    hermes = {key: sources[key].module.SessionDB(db_path=workdir / f"hermes_{key}.db")
              for key in ("iot-0.22.2", "v6")}
    return hermes, ours, bench.search_cases(corpus.vocabulary)


# The arguments every case is dumped with: each filter, time order and page shape.
DUMP_VARIANTS: tuple[dict[str, Any], ...] = (
    {},
    {"limit": 5, "offset": 3},
    {"sort": "newest"},
    {"sort": "oldest", "limit": 50},
    {"role_filter": ["assistant"]},
    {"source_filter": ["telegram"], "exclude_sources": ["cli"]},
    {"include_inactive": True},
)


def dump_results(ours: SessionDB, cases: list[bench.SearchCase]) -> dict[str, Any]:
    """Every case's hits under every variant, as ``SessionDB`` and the repository give them
    (the repository's with each context line's ``is_hit``)."""
    repository = ours.repository
    dumped: dict[str, Any] = {}
    for case in cases:
        for variant in DUMP_VARIANTS:
            key = f"{case.query} {json.dumps(variant, sort_keys=True)}"
            dumped[key] = ours.search_messages(case.query, **variant)
            dumped[key + " repository"] = [
                {**hit.to_dict(), "is_hit": [line.is_hit for line in hit.context]}
                for hit in repository.search_messages(case.query, **variant)
            ]
    return dumped


def timed(call: Callable[[str], Any], query: str) -> float:
    started = time.thread_time()
    call(query)
    return time.thread_time() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/ss-search-cpu"))
    parser.add_argument("--iot", type=Path, default=None,
                        help="folder holding iot 0.22.2's hermes_state.py (default: the "
                        "field tests' side venv, made on first use)")
    parser.add_argument("--hermes-v6", type=Path, default=bench.DEFAULT_HERMES_V6)
    parser.add_argument("--hermes-cache", type=Path, default=bench.DEFAULT_HERMES_CACHE)
    parser.add_argument("--dump", type=Path, default=None)
    parser.add_argument("--only", action="append", default=[], metavar="CATEGORY",
                        help=f"time only these categories ({', '.join(CATEGORIES)})")
    args = parser.parse_args(argv)
    hermes, ours_path, cases = prepare_files(args.workdir, args.iot, args.hermes_v6,
                                             args.hermes_cache)
    categories = tuple(args.only) or CATEGORIES
    ours = SessionDB(ours_path)
    sides: dict[str, Callable[[str], Any]] = {
        "ours": ours.search_messages,
        **{key: db.search_messages for key, db in hermes.items()},
    }
    if args.dump:
        args.dump.write_text(json.dumps(dump_results(ours, cases), ensure_ascii=False,
                                        indent=1, sort_keys=True))
    cases = [case for case in cases if case.category in categories]
    for case in cases:  # warm every statement cache once
        for call in sides.values():
            call(case.query)
    names = list(sides)
    # per category, per side: each round's mean CPU per call
    per_round: dict[str, dict[str, list[float]]] = {
        category: {name: [] for name in names} for category in categories}
    load = [os.getloadavg()[0]]
    for round_number in range(args.rounds):
        order = names[round_number % len(names):] + names[:round_number % len(names)]
        totals = {category: dict.fromkeys(names, 0.0) for category in categories}
        counts = dict.fromkeys(categories, 0)
        for case in cases:
            counts[case.category] += 1
            for name in order:
                totals[case.category][name] += timed(sides[name], case.query)
        for category in categories:
            for name in names:
                per_round[category][name].append(totals[category][name] / counts[category])
    load.append(os.getloadavg()[0])
    ours.close()
    for db in hermes.values():
        db.close()
    print(f"thread CPU per call, median of {args.rounds} interleaved rounds; load average "
          f"{load[0]:.1f} -> {load[1]:.1f}")
    print(f"{'category':<12} {'ours us':>8} {'iot us':>8} {'v6 us':>8} {'/iot':>6} {'/v6':>6}")
    for category in categories:
        samples = per_round[category]
        median = {name: statistics.median(values) for name, values in samples.items()}
        to_iot = statistics.median(
            o / i for o, i in zip(samples["ours"], samples["iot-0.22.2"], strict=True))
        to_v6 = statistics.median(
            o / v for o, v in zip(samples["ours"], samples["v6"], strict=True))
        print(f"{category:<12} {median['ours'] * 1e6:8.0f} {median['iot-0.22.2'] * 1e6:8.0f} "
              f"{median['v6'] * 1e6:8.0f} {to_iot:6.2f} {to_v6:6.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
