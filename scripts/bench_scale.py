#!/usr/bin/env python3
"""How sessionstore's per-call cost grows with the store: ``scripts/bench.py --scale``.

Builds fresh stores (issue 31, item 3) of 10k, 100k and 1M messages, 200 per session, from a
22-word vocabulary with every 17th message in CJK, plus one store of 100k sessions (one message
each), and times, on each, the calls an agent makes all day:

* ``append_message`` to a live session;
* loading a 200-message conversation (``get_messages_as_conversation``);
* word search (``docker deploy``, limit 20; best first and newest first) and CJK search (2
  and 3 characters);
* ``list_sessions_rich(limit=50)``; prefix resolution (``resolve_session_id``); title lineage
  (``get_next_title_in_lineage``); ``message_count()`` of the whole store.

The stores are built through the store's own triggers: ``SessionDB`` creates the head schema,
then plain INSERTs, one transaction per batch of ``BATCH`` rows, on the SQLite library the store
runs on, so the FTS and CJK indexes are filled exactly as appends fill them. Each call's figure is
the median of its repetitions in thread CPU time (:func:`median_of`); the table gives each
size's figure and the growth from one size to the next, and the issue's bound (1M within 1.5x
of 100k) where both were measured.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import random
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sessionstore.api.session_db import SessionDB
from sessionstore.dialects.sqlite_library import connect

MESSAGES_PER_SESSION = 200
CJK_EVERY = 17
BATCH = 20_000
GROWTH_BOUND = 1.5  # issue 31: per-call cost at 1M within 1.5x of the 100k figure
VOCABULARY = (
    "docker", "deploy", "kubernetes", "database", "migration", "timeout", "retry", "cache",
    "index", "query", "session", "token", "agent", "memory", "search", "latency", "backup",
    "restore", "schema", "config", "release", "rollback",
)  # fmt: skip  (22 words)
CJK_SENTENCES = (
    "数据库迁移已经完成", "部署到集群需要检查点", "会话管理和全文搜索", "索引重建的性能",
)  # fmt: skip
WORD_QUERY = "docker deploy"
CJK_QUERIES = {"CJK 2 chars": "迁移", "CJK 3 chars": "检查点"}


@dataclass(frozen=True)
class StoreSpec:
    label: str
    messages: int
    per_session: int

    @property
    def sessions(self) -> int:
        return max(1, self.messages // self.per_session)


def session_id(index: int) -> str:
    return f"20260{1 + index % 9}{10 + index % 18:02d}_{index:08x}{index * 2654435761 % 16**4:04x}"


def session_title(index: int) -> str:
    # Every 1000th session continues a lineage ("standup", "standup #2", ...): a lineage of a
    # size users have (100 at 100k sessions); the rest are unique.
    if index == 0:
        return "standup"
    return f"standup #{index // 1000 + 1}" if index % 1000 == 0 else f"task {index}"


def message_rows(spec: StoreSpec, rng: random.Random) -> Iterator[tuple[Any, ...]]:
    started = 1_700_000_000.0
    for number in range(spec.messages):
        session = number // spec.per_session
        if number % CJK_EVERY == CJK_EVERY - 1:
            content = rng.choice(CJK_SENTENCES)
        else:
            content = " ".join(rng.choice(VOCABULARY) for _ in range(rng.randint(6, 14)))
        role = "user" if number % 2 == 0 else "assistant"
        yield (session_id(session), role, content, started + number)


def build_store(path: Path, spec: StoreSpec, seed: int) -> float:
    """A fresh head store at ``path`` filled through its triggers; seconds taken."""
    started = time.perf_counter()
    SessionDB(path).close()  # the head schema, its FTS tables and triggers
    conn = connect(str(path), isolation_level=None)
    try:
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO sessions (id, source, started_at, title, message_count) "
            "VALUES (?, 'cli', ?, ?, ?)",
            (
                (session_id(i), 1_700_000_000.0 + i * spec.per_session, session_title(i),
                 min(spec.per_session, spec.messages - i * spec.per_session))
                for i in range(spec.sessions)
            ),
        )
        conn.execute("COMMIT")
        rows = message_rows(spec, random.Random(seed))
        while True:
            batch = [row for _, row in zip(range(BATCH), rows, strict=False)]
            if not batch:
                break
            conn.execute("BEGIN")
            conn.executemany(
                "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, ?, ?, ?)",
                batch,
            )
            conn.execute("COMMIT")
        conn.execute("ANALYZE")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return time.perf_counter() - started


def median_of(call: Callable[[], Any], reps: int, warmup: int = 3) -> float:
    """The median per call of this thread's CPU time (``time.thread_time``): what the call
    ran, not what the other processes of a shared 2-core machine took from it (wall medians
    moved 2-15x with the load). Waiting is left out too: an append's fsync, a lock."""
    for _ in range(warmup):
        call()
    samples = []
    for _ in range(reps):
        begun = time.thread_time()
        call()
        samples.append(time.thread_time() - begun)
    return statistics.median(samples)


def measure(db: SessionDB, spec: StoreSpec, reps: int) -> dict[str, float]:
    """Median seconds per call, by workload."""
    figures: dict[str, float] = {}
    live = session_id(spec.sessions // 2)
    appended = iter(range(10**9))

    def append() -> None:
        db.append_message(live, "user", f"docker deploy check {next(appended)}")

    figures["append_message"] = median_of(append, reps * 2)
    figures[f"conversation load ({spec.per_session} msgs)"] = median_of(
        lambda: db.get_messages_as_conversation(session_id(spec.sessions // 3)), reps)
    figures[f"word search '{WORD_QUERY}', limit 20"] = median_of(
        lambda: db.search_messages(WORD_QUERY, limit=20), reps)
    figures["word search, newest first"] = median_of(
        lambda: db.search_messages(WORD_QUERY, limit=20, sort="newest"), reps)
    for label, query in CJK_QUERIES.items():
        figures[f"search {label}"] = median_of(functools.partial(db.search_messages, query), reps)
    figures["list_sessions_rich(limit=50)"] = median_of(
        lambda: db.list_sessions_rich(limit=50), reps)
    prefix = session_id(spec.sessions - 1)[:12]
    figures["prefix resolution"] = median_of(lambda: db.resolve_session_id(prefix), reps)
    figures["title lineage"] = median_of(lambda: db.get_next_title_in_lineage("standup"), reps)
    figures["message_count()"] = median_of(db.message_count, reps)
    return figures


RELEVANCE_QUERIES = (WORD_QUERY, "kubernetes", "rollback timeout")


def relevance(db: SessionDB) -> str:
    """How many of the exact top 20 (bm25 over every match) the windowed search returns, per
    query: what ranking only the newest ``RANK_WINDOW`` matches gives up on this corpus."""
    from sessionstore.search import request as search_request

    window = search_request.RANK_WINDOW
    parts = []
    for query in RELEVANCE_QUERIES:
        windowed = {hit["id"] for hit in db.search_messages(query, limit=20)}
        search_request.RANK_WINDOW = 2**62  # type: ignore[misc]  # every match ranked
        try:
            exact = {hit["id"] for hit in db.search_messages(query, limit=20)}
        finally:
            search_request.RANK_WINDOW = window  # type: ignore[misc]
        parts.append(f"{query!r} {len(windowed & exact)}/{len(exact)}")
    return ", ".join(parts)


def format_ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:.2f} ms"


def print_growth(specs: Sequence[StoreSpec], results: dict[str, dict[str, float]]) -> None:
    workloads = list(next(iter(results.values())))
    message_specs = [s for s in specs if s.per_session == MESSAGES_PER_SESSION]
    pairs = list(itertools.pairwise(message_specs))
    header = ["call", *(s.label for s in specs), *(f"{a.label}->{b.label}" for a, b in pairs)]
    lines = []
    for workload in workloads:
        # The two search rows and the load are named after the store; match by prefix.
        line = [workload]
        line += [format_ms(results[s.label].get(workload)) for s in specs]
        for a, b in pairs:
            before, after = results[a.label].get(workload), results[b.label].get(workload)
            growth = after / before if before and after else None
            verdict = ""
            if growth is not None and a.messages == 100_000 and b.messages == 1_000_000:
                verdict = " ok" if growth <= GROWTH_BOUND else " GROWS"
            line.append("-" if growth is None else f"{growth:.2f}x{verdict}")
        lines.append(line)
    widths = [max(len(row[i]) for row in [header, *lines]) for i in range(len(header))]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for line in lines:
        print("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)))


def label_of(count: int) -> str:
    if count % 1_000_000 == 0:
        return f"{count // 1_000_000}M"
    return f"{count // 1000}k" if count % 1000 == 0 else str(count)


def run_scale(args: argparse.Namespace, workdir: Path) -> int:
    """The ``--scale SIZES`` mode of scripts/bench.py (SIZES: comma-separated message counts)."""
    sizes = [int(part) for part in str(args.scale).split(",") if part.strip()]
    specs = [StoreSpec(label_of(n), n, MESSAGES_PER_SESSION) for n in sizes]
    sessions = int(args.scale_sessions)
    specs.append(StoreSpec(f"{label_of(sessions)} sessions", sessions, 1))
    reps = 15 if args.quick else 60
    results: dict[str, dict[str, float]] = {}
    for spec in specs:
        path = workdir / f"scale_{spec.messages}_{spec.per_session}.db"
        if not path.exists():
            built = build_store(path, spec, args.seed)
            print(f"# built {spec.label}: {spec.messages:,} messages, {spec.sessions:,} sessions "
                  f"in {built:.0f} s", flush=True)
        db = SessionDB(path)
        try:
            raw = measure(db, spec, reps)
            print(f"# {spec.label}: exact top-20 kept by the ranking window: {relevance(db)}",
                  flush=True)
        finally:
            db.close()
        # One name per call across stores (the load's size is the same 200 messages, or 1).
        results[spec.label] = {name.split(" (")[0] if name.startswith("conversation") else name:
                               value for name, value in raw.items()}
    print()
    print_growth(specs, results)
    return 0
