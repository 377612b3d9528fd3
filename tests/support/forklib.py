"""Forks of a busy process: threads in every store call while the process forks.

Imported by ``tests/storage/test_fork_busy.py`` (the parent's threads, the pool's task) and run
as a program, ``python tests/support/forklib.py URL FORKS``, for the children that end the way
a plain program ends: a normal interpreter shutdown (``SystemExit``), with every finalizer and
garbage collection that brings, instead of ``multiprocessing``'s ``os._exit``. That program
prints one JSON line: the children that failed, and how many forks were made.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
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


class BusyThreads:
    """One thread per store call, each calling it again and again until :meth:`stop`.

    What each acknowledged (the call returned) is kept, so the test can check, at the end,
    that every acknowledged write is in the store; any error is kept too.
    """

    def __init__(self, db: SessionDB) -> None:
        self.db = db
        self.appended: list[str] = []
        self.token_updates = 0
        self.errors: list[BaseException] = []
        self.calls = 0
        self._stop = threading.Event()
        work: dict[str, Callable[[int], None]] = {
            "append": self._append,
            "append-batch": self._append_batch,
            "tokens": self._tokens,
            "get-messages": lambda _n: db.get_messages(READ_SESSION) and None,
            "search": lambda _n: db.search_messages(NEEDLE, limit=5) and None,
            "listing": lambda _n: db.list_sessions_rich(limit=5) and None,
        }
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
        while not self._stop.is_set():
            try:
                fn(n)
            except BaseException as exc:
                self.errors.append(exc)
                return
            n += 1
            self.calls += 1

    def start(self) -> BusyThreads:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(120)
            assert not thread.is_alive(), f"{thread.name} never finished its call"


def check_store(url: str, busy: BusyThreads, child_texts: set[str]) -> None:
    """Every write acknowledged in the parent and in the children is in the store."""
    with SessionDB(url=url) as db:
        stored = {m["content"] for m in db.get_messages(SESSION)}
        missing = set(busy.appended) - stored
        assert not missing, f"{len(missing)} acknowledged appends of the parent are missing"
        session = db.get_session(SESSION)
        assert session is not None
        assert session["input_tokens"] == busy.token_updates
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


def child_task(job: tuple[str, int]) -> list[str]:
    """Run in a forked worker: ``idle`` touches no store; ``own`` opens its own store,
    writes and reads; ``inherited`` writes and reads through the store it inherited."""
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


# -- the program: children that exit through a normal interpreter shutdown ---------------------
def _program(url: str, forks: int) -> dict[str, Any]:
    prepare(url)
    db = SessionDB(url=url)
    set_parent(db, url)
    busy = BusyThreads(db).start()
    failed: list[str] = []
    texts: set[str] = set()
    for number in range(forks):
        kind = ("idle", "own", "inherited")[number % 3]
        out_r, out_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child ends as a program does: SystemExit, finalizers, GC
            os.close(out_r)
            try:
                written = child_task((kind, number))
            except BaseException as exc:
                os.write(out_w, json.dumps({"error": repr(exc)}).encode())
                raise SystemExit(1) from None
            os.write(out_w, json.dumps({"texts": written}).encode())
            raise SystemExit(0)
        os.close(out_w)
        deadline = time.monotonic() + 60
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                failed.append(f"{kind} child {number} hung")
                status = 0
                break
            time.sleep(0.002)
        with os.fdopen(out_r) as reader:
            report = reader.read()
        if report and "error" in json.loads(report):
            failed.append(f"{kind} child {number}: {json.loads(report)['error']}")
        elif report:
            texts.update(json.loads(report)["texts"])
        if done and os.waitstatus_to_exitcode(status) != 0:
            failed.append(f"{kind} child {number} exited with {os.waitstatus_to_exitcode(status)}")
    busy.stop()
    db.close()
    check_store(url, busy, texts)
    return {"failed": failed, "forks": forks, "errors": [repr(e) for e in busy.errors],
            "parent_calls": busy.calls}


if __name__ == "__main__":
    print(json.dumps(_program(sys.argv[1], int(sys.argv[2]))))
