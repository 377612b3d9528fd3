"""The reads per call, by thread CPU time: sessionstore against Hermes v6 in one process.

    .venv/bin/python scripts/bench_reads_cpu.py [--rounds 40] [--workdir DIR] [--dump FILE]

``scripts/bench.py``'s quick corpus (5,000 messages, the long session of 1,000) and its read
rows: ``list_sessions_rich(limit=50)``, ``get_messages`` and ``get_messages_as_conversation``
of the long session, and the conversation of the 115 messages; and the long session's live
replay (``repair_alternation=True``, as an agent replays) against v6's one replay. The
process imports no Hermes, so the replays carry no wire keys (a Hermes 0.19.0's replay).
v6's file is written by its own ``SessionDB`` (stdlib ``sqlite3``), ours is an adopted copy
of Hermes 0.18.0's (pysqlite3): no file is opened by both drivers. Each round times every
call of each side back to back by ``time.thread_time_ns`` (what this thread ran, not what the
other processes on a shared machine took from it), the sides alternating which goes first.
Per row: the median over rounds of each side's mean per call, and of the round's ratio ours /
v6.

``--evict MB`` times each call alone, right after copying a buffer of that many megabytes
(outside the timed part), so every call meets CPU caches another program emptied: what
``scripts/bench.py`` measures, where the sides run in turn and each evicts the others' data
(docs/performance.md, "Reads with cold caches").

To compare two trees, run this script from each in turn (``PYTHONPATH=TREE``) on the same
``--workdir``: its files are reused when present. ``--split`` times the listing's parts
instead (see :func:`listing_split`). ``--dump FILE`` writes every read's result
(ours, several argument variants) as JSON: run it before and after a change and compare the
files (results must be identical, key order included).
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
# Calls per side per round: enough that a round of each row takes a few milliseconds.
CALLS_PER_ROUND = {
    "list": 20, "get_messages": 2, "conversation": 3, "conversation 115": 20, "live replay": 3,
}  # fmt: skip


def prepare_files(workdir: Path, v6_root: Path, cache: Path) -> tuple[Any, Path, str, str]:
    """v6's SessionDB on its own file, the path of our adopted copy, and the ids of the long
    session and of the 115-message conversation."""
    workdir.mkdir(parents=True, exist_ok=True)
    os.environ["HERMES_HOME"] = str(workdir / "hermes_home")
    roots = {"v6": v6_root, "0.18.0": bench.unpacked_hermes(cache)}
    sources, ours, corpus = bench.quick_files(workdir, roots, QUICK_MESSAGES)
    v6 = sources["v6"].module.SessionDB(db_path=workdir / "hermes_v6.db")
    return v6, ours, corpus.long_session_id, corpus.conversation_session_id


def dump_results(ours: SessionDB, session_ids: list[str]) -> dict[str, Any]:
    """Every read this script times, with its argument variants, as ``SessionDB`` gives it."""
    dumped: dict[str, Any] = {
        "list": ours.list_sessions_rich(limit=50),
        "list children": ours.list_sessions_rich(limit=50, include_children=True),
        "list by activity": ours.list_sessions_rich(limit=50, order_by_last_active=True),
        "list compact": ours.list_sessions_rich(limit=50, compact_rows=True),
    }
    for session_id in session_ids:
        for inactive in (False, True):
            for limit, offset in ((None, 0), (7, 3)):
                dumped[f"messages {session_id} {inactive} {limit} {offset}"] = ours.get_messages(
                    session_id, inactive, limit, offset)
            for ancestors in (False, True):
                for repair in (False, True):
                    dumped[f"conversation {session_id} {inactive} {ancestors} {repair}"] = (
                        ours.get_messages_as_conversation(
                            session_id, ancestors, inactive, repair_alternation=repair))
    return dumped


def listing_split(v6: Any, ours: SessionDB, rounds: int) -> None:
    """Where ``list_sessions_rich(limit=50)`` goes, beside v6's whole call: ours whole; its
    page's statement alone on the driver cursor; the same page's stored columns alone (the
    statement without its preview, last-activity and prompt subqueries: what any statement
    returning iot's row must read); and the dicts built from the page's rows (Python alone).
    The stored columns and the dicts together are the floor of a listing that returns iot
    0.22.2's 61-key rows."""
    from sessionstore.sessions import listing
    from sessionstore.sql.records import SESSION_FIELDS

    ours.list_sessions_rich(limit=50)
    repo = ours._repo
    (hot,) = repo._hot_listings.values()
    values = {"limit": 50, "offset": 0}
    sql = hot._compiled.sql_for(values)
    parameters = hot._compiled.parameters(values)
    conn = repo.store.engine.connect()
    driver = conn.connection.driver_connection
    rows = driver.execute(sql, parameters).fetchall()
    page = sql[sql.rindex("\nFROM sessions \nWHERE"):]
    columns_sql = "SELECT " + ", ".join(f"sessions.{name}" for name in SESSION_FIELDS) + page
    if len(driver.execute(columns_sql).fetchall()) != len(rows):
        raise SystemExit("bench_reads_cpu.py: the columns' statement lists another page")
    parts: dict[str, Callable[[], Any]] = {
        "v6: call": lambda: v6.list_sessions_rich(limit=50),
        "ours: call": lambda: ours.list_sessions_rich(limit=50),
        "ours: statement": lambda: driver.execute(sql, parameters).fetchall(),
        "ours: stored columns": lambda: driver.execute(columns_sql).fetchall(),
        "ours: dicts": lambda: [listing._rich_dict(row, None, None) for row in rows],
    }
    clock = time.thread_time_ns
    load = [os.getloadavg()[0]]
    samples: dict[str, list[float]] = {name: [] for name in parts}
    order = list(parts.items())
    for round_number in range(rounds):
        for name, call in order if round_number % 2 == 0 else order[::-1]:
            started = clock()
            for _ in range(CALLS_PER_ROUND["list"]):
                call()
            samples[name].append((clock() - started) / CALLS_PER_ROUND["list"] / 1000)
    load.append(os.getloadavg()[0])
    conn.close()
    v6_us = statistics.median(samples["v6: call"])
    print(f"list_sessions_rich(limit=50), {len(rows)} rows of {len(rows[0])} columns: thread CPU "
          f"per call, median of {rounds} interleaved rounds; load average {load[0]:.1f} -> "
          f"{load[1]:.1f}")
    for name, taken in samples.items():
        us = statistics.median(taken)
        print(f"{name:<22} {us:8.0f} us {us / v6_us:6.2f}x of v6's call")


def cache_evictor(megabytes: int) -> Callable[[], None]:
    """A call that empties the CPU's caches of what ran before it (reading a buffer of
    ``megabytes`` into a new one), or does nothing for 0."""
    if megabytes <= 0:
        return lambda: None
    buffer = bytearray(megabytes * 1024 * 1024)
    view = memoryview(buffer)

    def evict() -> None:
        bytes(view)

    return evict


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/ss-reads-cpu"))
    parser.add_argument("--hermes-v6", type=Path, default=bench.DEFAULT_HERMES_V6)
    parser.add_argument("--hermes-cache", type=Path, default=bench.DEFAULT_HERMES_CACHE)
    parser.add_argument("--dump", type=Path, default=None)
    parser.add_argument("--evict", type=int, default=0, metavar="MB",
                        help="time each call alone after copying a buffer of MB megabytes")
    parser.add_argument("--split", action="store_true",
                        help="time the listing's parts (see listing_split) and nothing else")
    args = parser.parse_args(argv)
    v6, ours_path, long_id, conversation_id = prepare_files(
        args.workdir, args.hermes_v6, args.hermes_cache)
    ours = SessionDB(ours_path)
    if args.dump:
        every_session = [row["id"] for row in ours.list_sessions_rich(
            limit=1000, include_children=True)]
        args.dump.write_text(json.dumps(dump_results(ours, every_session), ensure_ascii=False,
                                        indent=1, sort_keys=False))
    if args.split:
        listing_split(v6, ours, args.rounds)
        ours.close()
        v6.close()
        return 0
    rows: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
        "list": (lambda: v6.list_sessions_rich(limit=50),
                 lambda: ours.list_sessions_rich(limit=50)),
        "get_messages": (lambda: v6.get_messages(long_id), lambda: ours.get_messages(long_id)),
        "conversation": (lambda: v6.get_messages_as_conversation(long_id),
                         lambda: ours.get_messages_as_conversation(long_id)),
        "conversation 115": (lambda: v6.get_messages_as_conversation(conversation_id),
                             lambda: ours.get_messages_as_conversation(conversation_id)),
        # An agent's replay on resume and every turn (Hermes 0.19, iot 0.22.2) repairs the
        # alternation; v6 has only the plain one.
        "live replay": (lambda: v6.get_messages_as_conversation(long_id),
                        lambda: ours.get_messages_as_conversation(long_id,
                                                                  repair_alternation=True)),
    }
    clock = time.thread_time_ns
    load = [os.getloadavg()[0]]
    figures: dict[str, tuple[float, float, float]] = {}
    evict = cache_evictor(args.evict)
    for name, (theirs, our_call) in rows.items():
        for _ in range(3):  # warm every statement cache
            theirs()
            our_call()
        calls = 1 if args.evict else CALLS_PER_ROUND[name]
        samples: dict[str, list[float]] = {"v6": [], "ours": []}
        sides = [("v6", theirs), ("ours", our_call)]
        for round_number in range(args.rounds):
            for side, call in sides if round_number % 2 == 0 else sides[::-1]:
                evict()
                started = clock()
                for _ in range(calls):
                    call()
                samples[side].append((clock() - started) / calls / 1000)
        ratio = statistics.median(
            o / v for o, v in zip(samples["ours"], samples["v6"], strict=True))
        figures[name] = (statistics.median(samples["v6"]),
                         statistics.median(samples["ours"]), ratio)
    load.append(os.getloadavg()[0])
    ours.close()
    v6.close()
    evicted = f"; each call after evicting {args.evict} MB" if args.evict else ""
    print(f"thread CPU per call, median of {args.rounds} interleaved rounds{evicted}; load "
          f"average {load[0]:.1f} -> {load[1]:.1f}")
    print(f"{'read':<18} {'v6 us':>8} {'ours us':>8} {'/v6':>6}")
    for name, (theirs_us, ours_us, ratio) in figures.items():
        print(f"{name:<18} {theirs_us:8.0f} {ours_us:8.0f} {ratio:6.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
