"""Runs inside a subprocess: a real Hermes release imported once, a fresh process per action.

Usage: ``python real_hermes_server.py DRIVER ROOT``, started by ``real_hermes.RealHermes`` with
the environment and working directory a driver run gets (``$HERMES_HOME`` above all: a fork's
import reads it and makes files under it). It imports the driver, then runs
the driver's ``prepare`` (what its ``main`` does before it makes a ``SessionDB``: the wheel's
root first on ``sys.path``, ``hermes_state`` imported, 0.19's repair helper provided), and then
answers requests, one JSON line each on stdin::

    {"db_path": ..., "action": ..., "argument": ..., "stdout": FILE, "stderr": FILE,
     "environ": {NAME: VALUE or null}}

For each one it forks: the child is a process of its own (its own pid, SQLite locks and
connections, its own random seed) that starts where a driver run stands after its imports,
runs the driver's ``main`` with those arguments (the argument as its stdin, its stdout and
stderr into the two files, ``environ``'s variables set or unset: the running test's id,
``real_hermes.PER_TEST_ENV``) and ends as a driver run ends (``SystemExit``: ``atexit`` handlers,
buffers flushed). No ``SessionDB`` is ever made here, so every child opens the file fresh, on
module state as the import left it. The answer, one JSON line on stdout::

    {"returncode": ..., "cpu_s": ...}

``cpu_s`` is this process's CPU so far, its reaped children's included (the tests' CPU
accounting counts it before this process ends: ``real_hermes.unreaped_cpu_s``).

What it saves: that preparation (importing a release and its agent modules), once per process
instead of once per action: an action of iot 0.22.2 0.47 -> 0.07 CPU s, of hermes-agent 0.19.0
0.22 -> 0.03 (``calls`` of one step, load 14-18).
It declines (exit status 3 before the first request) when the import left a thread running:
a fork copies only the calling thread, so the caller runs each action as its own program.
"""

from __future__ import annotations

import gc
import importlib
import io
import json
import os
import random
import resource
import sys
import threading
from pathlib import Path
from typing import Any

DECLINED = 3
"""Exit status when this process cannot serve (a thread after the import)."""


def cpu_so_far() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def run_child(driver: Any, root: str, request: dict[str, Any]) -> None:
    """In the forked child: the driver's run on this request; never returns."""
    random.seed()  # a separate program draws its own numbers
    nothing = os.open(os.devnull, os.O_RDONLY)  # the requests' pipe is the server's
    os.dup2(nothing, 0)
    os.close(nothing)
    for descriptor, path in ((1, request["stdout"]), (2, request["stderr"])):
        opened = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(opened, descriptor)
        os.close(opened)
    for name, value in request.get("environ", {}).items():  # this test's, not the first one's
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    sys.stdin = io.StringIO(json.dumps(request["argument"]))
    sys.argv = [driver.__file__, root, request["db_path"], request["action"]]
    driver.main()
    raise SystemExit(0)


def serve(driver_path: str, root: str) -> int:
    driver = importlib.import_module(Path(driver_path).stem)
    driver.prepare(root)  # what its main does before its SessionDB; again a no-op there
    if threading.active_count() != 1:
        return DECLINED
    # What the import made lives for the whole run; frozen, a child's collections (its exit's
    # included) do not walk it and touch every page of it (a copy each): 0.11 -> 0.07 CPU s an
    # action of a fork, 0.05 -> 0.03 of 0.19.0's.
    gc.freeze()
    requests = sys.stdin
    answers = sys.stdout
    for line in requests:
        request = json.loads(line)
        answers.flush()
        sys.stderr.flush()
        child = os.fork()
        if child == 0:
            run_child(driver, root, request)  # ends the child (SystemExit)
        _, status = os.waitpid(child, 0)
        answers.write(json.dumps({
            "returncode": os.waitstatus_to_exitcode(status), "cpu_s": cpu_so_far(),
        }) + "\n")  # fmt: skip
        answers.flush()
    return 0


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1], sys.argv[2]))
