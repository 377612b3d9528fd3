"""Forks of a busy process: threads in every store call while the process forks.

Run as a program by ``tests/storage/test_fork_busy.py``, so that the forks are made by a small,
fresh interpreter rather than by a pytest worker whose heap has grown over hundreds of tests
(a fork copies the page tables and the children's writes copy pages: the same 250 forks took
11 CPU s from a fresh process and 23 to 36 s from a worker late in a full run)::

    python tests/support/forklib.py pool URL FORKS WORKERS
    python tests/support/forklib.py exit URL FORKS

The test starts ``pool`` forked from a ``prefork.ForkServer`` that imported :data:`IMPORTS`
once (``forklib:main``, the same arguments): still a program of its own, as small as a fresh
interpreter, without the 0.8-1.1 CPU s of importing the package (and psycopg) again for each
of the file's ten pool programs. Nothing changes for the forks: ``pool_program`` freezes
everything before its first fork anyway, and its children end with ``os._exit``. ``exit``
stays a new interpreter: there nothing is frozen, and its children's shutdowns walk all they
inherited.

``pool``: a ``fork`` pool's workers while the parent's threads are in every store call
(:func:`pool_program`). ``exit``: plain ``os.fork()`` children that end the way a plain
program ends, a normal interpreter shutdown (``SystemExit``) with every finalizer and garbage
collection that brings, instead of ``multiprocessing``'s ``os._exit`` (:func:`exit_program`).
Each prints one JSON line, its report; the test asserts on it and checks the store itself
(:func:`check_store`). ``scripts/fork_wait.py`` imports the busy threads.
"""

from __future__ import annotations

import gc
import json
import multiprocessing
import os
import select
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from sessionstore import SessionDB

SESSION = "busy"
"""The parent's threads append here and move its token counters."""
READ_SESSION = "read"
"""A small session the parent's readers load again and again."""
NEEDLE = "needle"


def prepare(url: str) -> None:
    with SessionDB(url=url) as db:
        for session in (SESSION, READ_SESSION):
            if db.get_session(session) is None:
                db.create_session(session, "cli")
        if not db.get_messages(READ_SESSION):
            db.append_messages(
                READ_SESSION,
                [{"role": "user", "content": f"{NEEDLE} {n}"} for n in range(20)],
            )


PAUSE_S = 0.25
"""How long a busy thread rests between two calls while no fork is being made. Calling
without rest, the three readers spun a core for the whole test: 26 of the 32 CPU s of 250
forks, while the forks need them only at the moment of each fork. Every fork wakes them all
anyway (all six inside a call at once), and the calls it holds at the gate end while its
child runs: the parent's writes still go on beside the children's. At 0.05 s the threads
made ~2 more calls a fork between forks (a pool forks every 30-70 ms), ~7 % of a pool
program's CPU for nothing the test checks (``suite_speed.md``, 2026-12-06, ``forks``); at
this pause they make about none. :func:`exit_program`'s children are made one at a time and
each lives 0.1-0.7 s by the load (its interpreter's shutdown walks all it inherited): there
each thread still calls about once or more in a child's life, at times while it shuts
down."""


class BusyThreads:
    """One thread per store call, each calling it again and again until :meth:`stop`, and
    every one of them inside a call whenever the process forks.

    Between forks a thread rests :data:`PAUSE_S` after each call. A fork (``os.fork``, and so
    a ``fork`` pool's) runs this module's hook after the package's own (:func:`install_hooks`,
    called before the process's first store): the package's has closed its gate (no new work
    enters SQLite) and waited for the threads inside SQLite to leave it; this one wakes the
    threads, waits until every one of them is inside a call, and lets the fork go on; the
    threads rest again once it is made. On SQLite each of them is then held at the gate
    inside its call (or in the writers' queue behind one that is), at whatever step of the
    call its next piece of work in SQLite is, or still in Python inside the call; on
    PostgreSQL there is no gate and the threads are wherever their calls are. ``in_call``
    counts the threads inside a call; a child reads the count its fork copied
    (:func:`inside_at_fork`), so a test sees, fork by fork, that the threads were there.

    The hook used to run before the package's and to wait, besides, for up to six more calls
    to end (to catch the threads at different points of their calls): the threads called
    without rest until the forking thread got the interpreter back to see that, 10-20 ms and
    60-90 calls a fork on a loaded machine, three quarters of the parent's CPU. Where the
    threads were at the forks was the same (the gate held them), counted over 150 forks each
    way (``suite_speed.md``, 2026-12-06, ``forkbusy``). If a store exists before
    :func:`install_hooks` (a script's own order), the hook runs before the package's: the
    threads then call without rest until they are all inside, as before.

    What each acknowledged (the call returned) is kept, so the test can check, at the end,
    that every acknowledged write is in the store; any error is kept too.
    """

    def __init__(self, db: SessionDB, *, pause_s: float = PAUSE_S) -> None:
        self.db = db
        self.pause_s = pause_s
        self.appended: list[str] = []
        self.token_updates = 0
        self.errors: list[BaseException] = []
        self.calls = 0
        self.in_call = 0
        self._running = 0
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._forking = threading.Event()
        work: dict[str, Callable[[int], None]] = {
            "append": self._append,
            "append-batch": self._append_batch,
            "tokens": self._tokens,
            "get-messages": lambda _n: db.get_messages(READ_SESSION) and None,
            "search": lambda _n: db.search_messages(NEEDLE, limit=5) and None,
            "listing": lambda _n: db.list_sessions_rich(limit=5) and None,
        }
        self._work = work
        self._threads = [
            threading.Thread(target=self._run, args=(fn,), name=f"busy-{name}", daemon=True)
            for name, fn in work.items()
        ]

    def _append(self, n: int) -> None:
        text = f"append-{n}"
        self.db.append_message(SESSION, "user", text)
        self.appended.append(text)

    def _append_batch(self, n: int) -> None:
        texts = [f"batch-{n}-a", f"batch-{n}-b"]
        self.db.append_messages(SESSION, [{"role": "assistant", "content": t} for t in texts])
        self.appended.extend(texts)

    def _tokens(self, _n: int) -> None:
        self.db.update_token_counts(SESSION, input_tokens=1)
        self.token_updates += 1

    def _run(self, fn: Callable[[int], None]) -> None:
        n = 0
        try:
            while not self._stop.is_set():
                with self._changed:
                    self.in_call += 1
                    self._changed.notify_all()
                try:
                    fn(n)
                except BaseException as exc:
                    self.errors.append(exc)
                    return
                finally:
                    with self._changed:
                        self.in_call -= 1
                        self.calls += 1
                        self._changed.notify_all()
                n += 1
                if self.pause_s and not self._forking.is_set():
                    self._forking.wait(self.pause_s)
        finally:
            with self._changed:
                self._running -= 1
                self._changed.notify_all()

    def warm_up(self) -> BusyThreads:
        """Make every call once, here, before the threads start (the calls count, and what
        they write is checked like the rest). A store call's first run in a process imports
        modules lazily (the search backend, say); a thread inside such an import at a fork
        holds that module's import lock in the child for ever, and a child then making the
        same call blocks on it. A pytest worker late in a run has imported them all; a fresh
        program must too, or its forks test that race of Python's instead of the store's."""
        for n, fn in enumerate(self._work.values()):
            fn(-1 - n)
            self.calls += 1
        return self

    def start(self) -> BusyThreads:
        global _ACTIVE
        install_hooks()
        self._running = len(self._threads)
        _ACTIVE = self
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        global _ACTIVE
        _ACTIVE = None
        self._stop.set()
        self._forking.set()  # no thread rests any more
        for thread in self._threads:
            thread.join(120)
            assert not thread.is_alive(), f"{thread.name} never finished its call"

    def _before_fork(self) -> None:
        """In the forking thread: wake the threads and wait for them all to be inside calls."""
        self._forking.set()
        with self._changed:
            self._changed.wait_for(lambda: self.in_call >= self._running, timeout=WINDOW_WAIT_S)

    def _after_fork_in_parent(self) -> None:
        if not self._stop.is_set():
            self._forking.clear()


WINDOW_WAIT_S = 30.0
"""Longest a fork waits for the threads to be inside calls (a thread that never comes back
from a call must not hang the fork: the child's count then shows it)."""

_ACTIVE: BusyThreads | None = None
"""The busy threads of this process, if any: what the at-fork hooks act on."""
_inside_at_fork = -1
_hooks_installed = False


def install_hooks() -> None:
    """Once per process. Called before the process's first store, the hook runs after the
    package's before a fork (``os.register_at_fork`` runs ``before`` hooks in reverse order
    of registration): the package's gate is closed when it waits for the threads."""
    global _hooks_installed
    if not _hooks_installed:
        os.register_at_fork(
            before=_hook_before_fork,
            after_in_parent=_hook_after_fork_in_parent,
            after_in_child=_hook_after_fork_in_child,
        )
        _hooks_installed = True


def _hook_before_fork() -> None:
    if _ACTIVE is not None:
        _ACTIVE._before_fork()


def _hook_after_fork_in_parent() -> None:
    if _ACTIVE is not None:
        _ACTIVE._after_fork_in_parent()


def _hook_after_fork_in_child() -> None:
    # Read without the lock (a parent thread may have held it): the count as the fork copied it.
    global _ACTIVE, _inside_at_fork
    _inside_at_fork = _ACTIVE.in_call if _ACTIVE is not None else -1
    _ACTIVE = None  # its threads do not exist here


def inside_at_fork() -> int:
    """In a forked child: how many of the parent's busy threads were inside a store call at
    the fork (-1: the parent had none running)."""
    return _inside_at_fork


def check_store(
    url: str, appended: Iterable[str], token_updates: int, child_texts: set[str]
) -> None:
    """Every write acknowledged in the parent (its busy threads' ``appended`` texts and
    ``token_updates``) and in the children is in the store."""
    with SessionDB(url=url) as db:
        stored = {m["content"] for m in db.get_messages(SESSION)}
        missing = set(appended) - stored
        assert not missing, f"{len(missing)} acknowledged appends of the parent are missing"
        session = db.get_session(SESSION)
        assert session is not None
        assert session["input_tokens"] == token_updates
        assert session["message_count"] == len(stored)
        children = {
            m["content"]
            for s in db.list_sessions_rich(limit=10**6)
            if s["id"].startswith("child-")
            for m in db.get_messages(s["id"])
        }
        assert child_texts <= children, f"{len(child_texts - children)} child writes missing"


# -- what a forked child does --------------------------------------------------------------------
_INHERITED: SessionDB | None = None
_URL = ""


def set_parent(db: SessionDB | None, url: str) -> None:
    """What the pool's workers inherit (module globals, copied by the fork)."""
    global _INHERITED, _URL
    _INHERITED, _URL = db, url


def child_task(job: tuple[str, int]) -> tuple[int, list[str]]:
    """Run in a forked worker: ``idle`` touches no store; ``own`` opens its own store,
    writes and reads; ``inherited`` writes and reads through the store it inherited.
    Returns how many busy threads of the parent were inside a call at this worker's fork,
    and the texts written."""
    return inside_at_fork(), _child_writes(job)


def _child_writes(job: tuple[str, int]) -> list[str]:
    kind, number = job
    if kind == "idle":
        return []
    session = f"child-{kind}-{number}"
    texts = [f"{session}-{n}" for n in range(2)]
    if kind == "own":
        with SessionDB(url=_URL) as own:
            _write_and_read(own, session, texts)
    else:
        assert _INHERITED is not None
        _write_and_read(_INHERITED, session, texts)
    return texts


def _write_and_read(db: SessionDB, session: str, texts: list[str]) -> None:
    db.create_session(session, "cli")
    db.append_message(session, "user", texts[0])
    db.append_messages(session, [{"role": "assistant", "content": texts[1]}])
    db.update_token_counts(session, input_tokens=2)
    seen = [m["content"] for m in db.get_messages(session)]
    assert seen == texts, seen
    assert db.search_messages(NEEDLE, limit=1), "search sees nothing in the child"


# -- the programs -------------------------------------------------------------------------------
def _jobs(forks: int) -> list[tuple[str, int]]:
    return [(("idle", "own", "inherited")[n % 3], n) for n in range(forks)]


def pool_program(url: str, forks: int, workers: int) -> dict[str, Any]:
    """``forks`` workers of a ``fork`` pool of ``workers`` (one task each:
    ``maxtasksperchild=1``, so every task is a new fork, made by the pool's own handler thread)
    while this process's threads call the store. Reports whether the children hung or never
    exited, what each child saw and wrote, and what the busy threads had acknowledged, for the
    test to check against the store."""
    install_hooks()  # before the first store: see BusyThreads
    prepare(url)
    db = SessionDB(url=url)
    set_parent(db, url)
    busy = BusyThreads(db).warm_up()
    # What a program that forks workers does (Python's advice for fork without exec, as the
    # command line does at start): what exists now, the modules and the store, is left out of
    # the collector's walks. Without it one child in five to ten ran a full collection over
    # the whole inherited heap, 40-70 ms of copy-on-write faults each (a sixth to a quarter of
    # the children's CPU, by perf). What the threads and the children create is still
    # collected (docs/performance.md, "A forked child beside a busy parent"). The
    # children of ``exit_program`` keep the full walk, every one of them at its interpreter's
    # shutdown: there an inherited handle the package failed to abandon is still finalized.
    gc.freeze()
    busy.start()
    child_texts: set[str] = set()
    inside_at_forks: list[int] = []
    hung = never_exited = False
    pool = multiprocessing.get_context("fork").Pool(workers, maxtasksperchild=1)
    jobs = _jobs(forks)
    try:
        results = pool.map_async(child_task, jobs, chunksize=1)
        try:
            batches = results.get(timeout=60 + forks * 2)
        except multiprocessing.TimeoutError:
            hung = True
        else:
            for inside, batch in batches:
                inside_at_forks.append(inside)
                child_texts.update(batch)
            pool.close()
            # Every worker must also *exit*; Pool.join has no timeout, so it runs in a thread.
            joiner = threading.Thread(target=pool.join, daemon=True)
            joiner.start()
            joiner.join(120)
            never_exited = joiner.is_alive()
    finally:
        pool.terminate()
        busy.stop()
        db.close()
        set_parent(None, "")
    return {
        "hung": hung,
        "never_exited": never_exited,
        "errors": [repr(e) for e in busy.errors],
        "parent_calls": busy.calls,
        "inside_at_forks": inside_at_forks,
        "child_texts": sorted(child_texts),
        "writing_children": sum(1 for kind, _ in jobs if kind != "idle"),
        "appended": busy.appended,
        "token_updates": busy.token_updates,
    }


def exit_program(url: str, forks: int) -> dict[str, Any]:
    """Plain ``os.fork()`` children that end through a normal interpreter shutdown."""
    install_hooks()  # before the first store: see BusyThreads
    prepare(url)
    db = SessionDB(url=url)
    set_parent(db, url)
    busy = BusyThreads(db).warm_up().start()
    failed: list[str] = []
    texts: set[str] = set()
    inside_at_forks: list[int] = []
    for number in range(forks):
        kind = ("idle", "own", "inherited")[number % 3]
        out_r, out_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child ends as a program does: SystemExit, finalizers, GC
            os.close(out_r)
            try:
                inside, written = child_task((kind, number))
            except BaseException as exc:
                os.write(out_w, json.dumps({"error": repr(exc)}).encode())
                raise SystemExit(1) from None
            os.write(out_w, json.dumps({"texts": written, "inside": inside}).encode())
            raise SystemExit(0)
        os.close(out_w)
        done, status = _wait_child(pid, 60)
        if not done:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            failed.append(f"{kind} child {number} hung")
        with os.fdopen(out_r) as reader:
            report = reader.read()
        if report and "error" in json.loads(report):
            failed.append(f"{kind} child {number}: {json.loads(report)['error']}")
        elif report:
            texts.update(json.loads(report)["texts"])
            inside_at_forks.append(json.loads(report)["inside"])
        if done and os.waitstatus_to_exitcode(status) != 0:
            failed.append(f"{kind} child {number} exited with {os.waitstatus_to_exitcode(status)}")
    busy.stop()
    db.close()
    return {"failed": failed, "forks": forks, "errors": [repr(e) for e in busy.errors],
            "parent_calls": busy.calls, "inside_at_forks": inside_at_forks,
            "child_texts": sorted(texts), "appended": busy.appended,
            "token_updates": busy.token_updates}  # fmt: skip


def _wait_child(pid: int, timeout_s: float) -> tuple[int, int]:
    """``os.waitpid(pid, WNOHANG)`` once the child has ended or ``timeout_s`` has passed:
    ``(0, 0)`` if it is still running. Blocks on a pidfd where there is one, so the program
    sleeps through its children's lives instead of waking 500 times a second."""
    deadline = time.monotonic() + timeout_s
    if hasattr(os, "pidfd_open"):
        pidfd = os.pidfd_open(pid)
        try:
            select.select([pidfd], [], [], timeout_s)
        finally:
            os.close(pidfd)
        return os.waitpid(pid, os.WNOHANG)
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done or time.monotonic() > deadline:
            return done, status
        time.sleep(0.002)


IMPORTS = (
    "forklib",
    "multiprocessing.pool",
    "sessionstore.dialects.sqlite",
    "sessionstore.dialects.postgresql",
    "sessionstore.search.service",
    "sessionstore.search.sqlite",
    "psycopg",
)
"""What the programs import (their store calls' lazy imports included), for a
``prefork.ForkServer``: a forked program finds them imported and frozen."""


def main(mode: str, url: str, forks: str, *workers: str) -> None:
    """The program: ``pool URL FORKS WORKERS`` or ``exit URL FORKS``; prints its report."""
    if mode == "pool":
        result = pool_program(url, int(forks), int(workers[0]))
    else:
        result = exit_program(url, int(forks))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
