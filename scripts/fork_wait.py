"""How long a forked child waits to write beside a busy parent, and how often it is overtaken.

The parent runs ``tests/support/forklib.py``'s busy threads (three writers, three readers,
calling without rest) on a SQLite store; a pool forks children two at a time, half opening their
own ``SessionDB`` and half using the one they inherited, and each makes four writes. Printed, per
kind of child: the time of the four writes and the part of it spent in the writers' queue (ms,
mean per child); for the
parent: how long it held the queue's lock per write; and, over every wait of a child, how many
parent holds began during that wait (the lock taken by the parent while the child waited: with
a fair hand-over 0, or 1 when the parent was already between the gate and the lock).

    .venv/bin/python scripts/fork_wait.py [URL] [FORKS]

It imports ``tests/support/forklib.py`` from the checkout it lives in. A hold begins when
the parent's ``acquire`` returns, which may lag the lock by the parent's wait for the
interpreter: read the counts, not the microseconds.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
import forklib

from sessionstore import SessionDB
from sessionstore.storage import writers_queue

PARENT = os.getpid()
child_waits: list[tuple[float, float]] = []
parent_starts: list[float] = []
parent_holds: list[float] = []
_held_since: dict[int, float] = {}
_acquire = writers_queue.WriterQueue.acquire
_release = writers_queue.WriterQueue.release


def timed_acquire(self: writers_queue.WriterQueue, deadline: float) -> int | None:
    started = time.monotonic()
    fd = _acquire(self, deadline)
    now = time.monotonic()
    if os.getpid() != PARENT:
        child_waits.append((started, now))
    elif fd is not None:
        _held_since[id(self)] = now
        parent_starts.append(now)
    return fd


def timed_release(self: writers_queue.WriterQueue, fd: int) -> None:
    since = _held_since.pop(id(self), None) if os.getpid() == PARENT else None
    if since is not None:
        parent_holds.append(time.monotonic() - since)
    _release(self, fd)


writers_queue.WriterQueue.acquire = timed_acquire  # type: ignore[method-assign]
writers_queue.WriterQueue.release = timed_release  # type: ignore[method-assign]


def child(job: tuple[str, int, str]) -> tuple[str, float, float, list[tuple[float, float]]]:
    kind, number, url = job
    child_waits.clear()
    db = SessionDB(url=url) if kind == "own" else forklib._INHERITED
    session = f"child-{kind}-{number}"
    started = time.monotonic()
    db.create_session(session, "cli")
    db.append_message(session, "user", "x")
    db.append_messages(session, [{"role": "assistant", "content": "y"}])
    db.update_token_counts(session, input_tokens=2)
    writes = time.monotonic() - started
    if kind == "own":
        db.close()
    queued = sum(end - start for start, end in child_waits)
    return kind, writes, queued, list(child_waits)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("url", nargs="?", help="store URL (default: a fresh SQLite file)")
    parser.add_argument("forks", nargs="?", type=int, default=45, help="children to fork")
    options = parser.parse_args()
    url = options.url or f"sqlite:///{tempfile.mkdtemp()}/s.db"
    forks = options.forks
    forklib.prepare(url)
    db = SessionDB(url=url)
    forklib.set_parent(db, url)
    busy = forklib.BusyThreads(db, pause_s=0).start()  # the parent writes without rest
    pool = multiprocessing.get_context("fork").Pool(2, maxtasksperchild=1)
    jobs = [(("own", "inherited")[n % 2], n, url) for n in range(forks)]
    results = pool.map(child, jobs, chunksize=1)
    pool.close()
    pool.join()
    busy.stop()
    db.close()
    per_kind: dict[str, list[tuple[float, float]]] = collections.defaultdict(list)
    overtaken: collections.Counter[int] = collections.Counter()
    starts = sorted(parent_starts)
    for kind, writes, queued, waits in results:
        per_kind[kind].append((writes, queued))
        for start, end in waits:
            overtaken[bisect.bisect_left(starts, end) - bisect.bisect_right(starts, start)] += 1
    for kind, figures in per_kind.items():
        writes = sum(w for w, _ in figures) / len(figures) * 1000
        queued = sum(q for _, q in figures) / len(figures) * 1000
        print(f"{kind}: 4 writes {writes:.1f} ms, of which in the queue {queued:.1f} ms")
    holds = sorted(parent_holds)
    if holds:
        def at(q: float) -> float:
            return holds[min(len(holds) - 1, int(len(holds) * q))] * 1000

        print(f"parent: {len(holds)} holds, p50 {at(0.5):.1f} ms, p90 {at(0.9):.1f} ms, "
              f"p99 {at(0.99):.1f} ms")
    summary: dict[str, Any] = dict(sorted(overtaken.items()))
    print(f"parent holds begun during one child wait: count -> waits {summary}")


if __name__ == "__main__":
    main()
