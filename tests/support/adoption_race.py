"""Openers of one Hermes file that start at the same moment: a gateway's workers after an
upgrade, or several ``sessionstore db upgrade`` runs.

:func:`race` runs ``python tests/support/adoption_race.py PATH KIND...``: one program that imports
everything the openers will need (``sessionstore``, its CLI, Alembic) once, then forks one
process per KIND. KIND is ``sessiondb`` (opens ``SessionDB(PATH)``) or ``cli`` (runs
``sessionstore --url PATH db upgrade --json`` in that process), either with ``+primed``: forked
after the program built a store of its own (in a scratch folder, closed again), so that it
inherits the chain's result kept in the process (``sessionstore.schema.new_store``) and builds
a new store at PATH from it; the others are forked before that. Each opener says it is ready,
and all are released together; each then opens, prints one JSON document, ``{"backup": ...}``
(the CLI's own JSON report for ``cli``), or ``{"error": "<module>.<class>: <message>"}`` when it
raised, and ends as a program does (``SystemExit``). The openers are separate processes (their
own file locks, their own SQLite); forking them from one that imported the package, but opened
nothing, spares each the ~0.8 CPU s of importing it (8 openers: 9 CPU s a race, now about 3);
priming once before the primed openers' forks spares each of them a chain (0.3-0.5 CPU s).
The program prints one JSON line: each opener's exit code, output and error output.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import prefork

PROGRAM = str(Path(__file__).resolve())
REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Outcome:
    kind: str
    exit_code: int
    report: dict[str, Any]
    stderr: str


IMPORTS = (
    "adoption_race", *prefork.CHAIN_IMPORTS, "sessionstore.cli", "sessionstore.api.session_db",
    "sessionstore.storage.backups", "rich.console", "pydantic.main?", "pydantic.type_adapter?",
    "typer._adapters?",
)  # fmt: skip
"""What the program and its openers import (``_race``; an opener's first open and the CLI's
report, their lazy imports included: the ORM models, the dialect, Alembic's config), so that
each of the eight forks finds them imported instead of importing them again (~0.1 CPU s an
opener). Imports only: the SQLite library is chosen at an opener's first connection, and no
chain is run here (the "+primed" openers are the ones that inherit one). A name ending in "?"
is imported where installed (``prefork.serve``)."""


@contextmanager
def race_server() -> Iterator[prefork.ForkServer | None]:
    """A fork server for the races of a test module (None where this platform has none): each
    race's program is then forked from it instead of importing the package again, a new
    process all the same, which forks its openers as before."""
    if not prefork.available():
        yield None
        return
    with prefork.ForkServer(IMPORTS, cwd=REPO_ROOT) as server:
        yield server


def race(
    path: Path, kinds: list[str], timeout_s: float = 300.0,
    server: prefork.ForkServer | None = None,
) -> list[Outcome]:  # fmt: skip
    """One process per entry of ``kinds``, released together; what each reported. The
    program that forks them is forked by ``server`` when one is given (``race_server``)."""
    if server is not None:
        program = server.start(
            "adoption_race:main", [str(path), *kinds], stdout=prefork.PIPE, stderr=prefork.PIPE
        )
        out, err = program.communicate(timeout=timeout_s + 60)
        result = subprocess.CompletedProcess(program.args, program.returncode, out, err)
    else:
        result = subprocess.run(
            [sys.executable, PROGRAM, str(path), *kinds],
            capture_output=True,
            text=True,
            cwd=REPO_ROOT,
            timeout=timeout_s + 60,
        )
    assert result.returncode == 0, result.stderr[-3000:]
    openers = json.loads(result.stdout.splitlines()[-1])
    return [
        Outcome(
            opener["kind"],
            opener["exit_code"],
            json.loads(opener["out"]) if opener["out"].strip() else {},
            opener["err"],
        )
        for opener in openers
    ]


def _described(exc: BaseException) -> str:
    return f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}"


def _sessiondb(path: str) -> None:
    from sessionstore import SessionDB

    try:
        db = SessionDB(path)
    except BaseException as exc:  # reported, not raised: the parent compares every opener
        print(json.dumps({"error": _described(exc)}), flush=True)
        return
    backup = db.adoption_backup
    db.close()
    print(json.dumps({"backup": None if backup is None else str(backup)}), flush=True)


def _cli(path: str) -> None:
    from sessionstore.cli import main

    sys.argv = ["sessionstore", "--url", path, "db", "upgrade", "--json"]
    main()


def _prime() -> None:
    import tempfile

    from sessionstore import SessionDB

    with tempfile.TemporaryDirectory() as scratch:
        SessionDB(Path(scratch) / "primer.db").close()


def _opener(kind: str, path: str, ready_w: int, go_r: int, out: int, err: int) -> None:
    """In a forked child: its own output files, ready, the start, the open."""
    os.dup2(out, 1)
    os.dup2(err, 2)
    opener = kind.partition("+")[0]
    code: object = 0
    try:
        os.write(ready_w, b"r")
        os.read(go_r, 1)  # returns when the parent closes its end: every opener at once
        {"sessiondb": _sessiondb, "cli": _cli}[opener](path)
    except SystemExit as exc:
        code = exc.code
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    raise SystemExit(code)  # the child ends as a program does


def _race(path: str, kinds: list[str], timeout_s: float = 300.0) -> list[dict[str, Any]]:
    import alembic.command  # noqa: F401 - imported before the start, as the store's code is

    import sessionstore.cli  # noqa: F401
    from sessionstore import SessionDB  # noqa: F401

    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    scratch = Path(tempfile.mkdtemp(prefix="adoption-race-"))
    children = []
    # The unprimed openers first, then the program primes itself once, then the primed ones.
    order = sorted(range(len(kinds)), key=lambda number: "+primed" in kinds[number])
    primed = False
    for number in order:
        kind = kinds[number]
        if "+primed" in kind and not primed:
            _prime()  # a store built and closed here: no store is open at the forks
            primed = True
        out = os.open(scratch / f"{number}.out", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        err = os.open(scratch / f"{number}.err", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the opener
            os.close(ready_r)
            os.close(go_w)
            _opener(kind, path, ready_w, go_r, out, err)
        os.close(out)
        os.close(err)
        children.append((kind, pid, number))
    os.close(ready_w)
    os.close(go_r)
    deadline = time.monotonic() + timeout_s
    ready = 0
    while ready < len(kinds):  # every opener primed and waiting (or one died: EOF)
        readable, _, _ = select.select([ready_r], [], [], max(deadline - time.monotonic(), 0))
        said = os.read(ready_r, len(kinds)) if readable else b""
        if not said:
            break
        ready += len(said)
    os.close(go_w)  # the start
    openers = []
    for kind, pid, number in sorted(children, key=lambda child: child[2]):
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                exit_code = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                exit_code = -signal.SIGKILL
                break
            time.sleep(0.01)
        openers.append({
            "kind": kind,
            "exit_code": exit_code,
            "out": (scratch / f"{number}.out").read_text(),
            "err": (scratch / f"{number}.err").read_text()
            + ("" if ready == len(kinds) else "\nnot every opener became ready"),
        })  # fmt: skip
    shutil.rmtree(scratch)
    return openers


def main(path: str, *kinds: str) -> None:
    print(json.dumps(_race(path, list(kinds))))


if __name__ == "__main__":
    main(*sys.argv[1:])
