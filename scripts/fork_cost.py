"""What a forked child of a busy parent spends, call by call: its own CPU against the wall.

The parent runs ``tests/support/forklib.py``'s busy program as ``test_fork_busy.py`` does
(three writers and three readers, resting between forks, all six inside a call at every fork),
and a ``fork`` pool forks children two at a time: a third touch no store, a third open their
own, a third write through the one they inherited. Each child times, by its main thread's CPU
(``time.thread_time``) and by the wall, the package's at-fork reset, its first use of SQLite
(closing the connections it inherited, ``ForkChild.settle``), each call, the writes' waits in
the writers' queue, and the collector's passes. Printed: the median per kind of child, and
the CPU of the whole run (parent and children).

    .venv/bin/python scripts/fork_cost.py [URL] [--forks N] [--freeze]

``--freeze`` calls ``gc.freeze()`` after the warm-up, as ``forklib.pool_program`` does.
It imports ``tests/support/forklib.py`` from the checkout it lives in.
"""

from __future__ import annotations

import argparse
import collections
import gc
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
import forklib

from sessionstore import SessionDB
from sessionstore.storage import fork_safety, writers_queue

Timings = dict[str, list[float]]
"""Name -> [thread CPU ms, wall ms], summed over this process's calls."""
_timed: Timings = {}


def _timed_call(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        cpu, wall = time.thread_time(), time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent = _timed.setdefault(name, [0.0, 0.0])
            spent[0] += (time.thread_time() - cpu) * 1000
            spent[1] += (time.perf_counter() - wall) * 1000

    return call


def _gc_callback(phase: str, info: dict[str, int]) -> None:
    if phase == "start":
        _gc_callback.started = time.thread_time()  # type: ignore[attr-defined]
        return
    spent = _timed.setdefault(f"gc gen{info['generation']}", [0.0, 0.0])
    took = (time.thread_time() - _gc_callback.started) * 1000  # type: ignore[attr-defined]
    spent[0] += took
    spent[1] += took


def _instrument() -> None:
    """Wrap what a child does; before the first store exists, so the at-fork hook that the
    package registers then is the wrapped one."""
    fork_safety._reset_in_child = _timed_call("at-fork reset", fork_safety._reset_in_child)
    fork_safety.ForkChild.settle = _timed_call(  # type: ignore[method-assign]
        "settle (inherited closed)", fork_safety.ForkChild.settle
    )
    writers_queue.WriterQueue.acquire = _timed_call(  # type: ignore[method-assign]
        "writers' queue", writers_queue.WriterQueue.acquire
    )


def child(job: tuple[str, int]) -> tuple[str, Timings]:
    kind, number = job
    at_fork = _timed.get("at-fork reset", [0.0, 0.0])
    _timed.clear()  # the parent's sums, copied by the fork
    _timed["at-fork reset"] = at_fork
    _timed["until the task"] = [time.thread_time() * 1000, 0.0]
    gc.callbacks.append(_gc_callback)
    if kind != "idle":
        session = f"child-{kind}-{number}"
        if kind == "own":
            db = _timed_call("open", SessionDB)(url=forklib._URL)
        else:
            assert forklib._INHERITED is not None
            db = forklib._INHERITED
        _timed_call("create_session", db.create_session)(session, "cli")
        _timed_call("append_message", db.append_message)(session, "user", "a")
        _timed_call("append_messages", db.append_messages)(
            session, [{"role": "assistant", "content": "b"}]
        )
        _timed_call("update_token_counts", db.update_token_counts)(session, input_tokens=2)
        _timed_call("get_messages", db.get_messages)(session)
        _timed_call("search_messages", db.search_messages)(forklib.NEEDLE, limit=1)
        if kind == "own":
            _timed_call("close", db.close)()
    return kind, dict(_timed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("url", nargs="?", help="store URL (default: a fresh SQLite file)")
    parser.add_argument("--forks", type=int, default=45, help="children to fork")
    parser.add_argument("--freeze", action="store_true", help="gc.freeze() after the warm-up")
    options = parser.parse_args()
    url = options.url or f"sqlite:///{tempfile.mkdtemp()}/s.db"
    _instrument()
    forklib.install_hooks()  # before the first store, as the test's program does
    forklib.prepare(url)
    db = SessionDB(url=url)
    forklib.set_parent(db, url)
    busy = forklib.BusyThreads(db).warm_up()
    if options.freeze:
        gc.freeze()
    busy.start()
    pool = multiprocessing.get_context("fork").Pool(2, maxtasksperchild=1)
    before, started = os.times(), time.perf_counter()
    results = pool.map(child, forklib._jobs(options.forks), chunksize=1)
    pool.close()
    pool.join()
    wall, after = time.perf_counter() - started, os.times()
    busy.stop()
    db.close()
    per_kind: dict[str, dict[str, list[list[float]]]] = collections.defaultdict(
        lambda: collections.defaultdict(list)
    )
    for kind, timings in results:
        for name, spent in timings.items():
            per_kind[kind][name].append(spent)
    for kind, names in per_kind.items():
        children = sum(1 for k, _ in results if k == kind)
        print(f"{kind} ({children} children): thread CPU ms / wall ms, median of those that ran it")
        for name, runs in names.items():
            cpu = statistics.median(run[0] for run in runs)
            wall_ms = statistics.median(run[1] for run in runs)
            share = f" ({len(runs)} of {children})" if len(runs) < children else ""
            print(f"  {name:28s} {cpu:7.2f} / {wall_ms:7.2f}{share}")
    parent = after.user - before.user + after.system - before.system
    children_cpu = (
        after.children_user - before.children_user + after.children_system - before.children_system
    )
    forks = options.forks
    print(
        f"{forks} forks in {wall:.2f} s: parent {parent:.2f} CPU s ({1000 * parent / forks:.1f} ms "
        f"a fork, {busy.calls} busy calls), children {children_cpu:.2f} CPU s "
        f"({1000 * children_cpu / forks:.1f} ms a child)"
    )


if __name__ == "__main__":
    main()
