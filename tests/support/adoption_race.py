"""Openers of one Hermes file that start at the same moment: a gateway's workers after an
upgrade, or several ``sessionstore db upgrade`` runs.

Run as ``python tests/support/adoption_race.py KIND PATH`` with KIND ``sessiondb`` (opens
``SessionDB(PATH)``) or ``cli`` (runs ``sessionstore --url PATH db upgrade --json`` in this
process), either with ``+primed``: a store of its own built first, so that a new store at PATH
is built from the chain's result kept in the process (``sessionstore.schema.new_store``).
Each imports everything it will need, prints ``ready``, waits for a ``go`` line on standard
input, then opens, and prints one JSON document: ``{"backup": ...}`` (the CLI's own JSON
report for ``cli``), or ``{"error": "<module>.<class>: <message>"}`` when it raised.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROGRAM = str(Path(__file__).resolve())
REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Outcome:
    kind: str
    exit_code: int
    report: dict[str, Any]
    stderr: str


def race(path: Path, kinds: list[str], timeout_s: float = 300.0) -> list[Outcome]:
    """Start one process per entry of ``kinds``, release them together, collect what each
    reported."""
    processes = [
        subprocess.Popen(
            [sys.executable, PROGRAM, kind, str(path)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            cwd=REPO_ROOT,
        )
        for kind in kinds
    ]  # fmt: skip
    try:
        for process in processes:
            assert process.stdout is not None
            line = process.stdout.readline()
            assert line.strip() == "ready", (line, process.stderr and process.stderr.read())
        for process in processes:
            assert process.stdin is not None
            process.stdin.write("go\n")
            process.stdin.flush()
        outcomes = []
        deadline = time.monotonic() + timeout_s
        for kind, process in zip(kinds, processes, strict=True):
            out, err = process.communicate(timeout=max(1.0, deadline - time.monotonic()))
            report = json.loads(out) if out.strip() else {}
            outcomes.append(Outcome(kind, process.returncode, report, err))
        return outcomes
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()


def _described(exc: BaseException) -> str:
    return f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}"


def _sessiondb(path: str) -> None:
    from sessionstore import SessionDB

    print("ready", flush=True)
    sys.stdin.readline()
    try:
        db = SessionDB(path)
    except BaseException as exc:  # reported, not raised: the parent compares every opener
        print(json.dumps({"error": _described(exc)}), flush=True)
        return
    backup = db.adoption_backup
    db.close()
    print(json.dumps({"backup": None if backup is None else str(backup)}), flush=True)


def _cli(path: str) -> None:
    import alembic.command  # noqa: F401 - imported before the start, as the store's code is

    from sessionstore.cli import main

    print("ready", flush=True)
    sys.stdin.readline()
    sys.argv = ["sessionstore", "--url", path, "db", "upgrade", "--json"]
    main()


def _prime() -> None:
    import tempfile

    from sessionstore import SessionDB

    with tempfile.TemporaryDirectory() as scratch:
        SessionDB(Path(scratch) / "primer.db").close()


if __name__ == "__main__":
    kind, _, primed = sys.argv[1].partition("+")
    if primed:
        _prime()
    {"sessiondb": _sessiondb, "cli": _cli}[kind](sys.argv[2])
