"""What one test run works out once and every xdist worker of that run reads: a folder of the
run's own, and JSON answers kept in it by key, under a lock (one worker works an answer out,
another waits for it and reads it)."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # real_hermes imports this module where pytest is not installed
    import pytest


def run_directory(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """``name`` under the run's own temporary folder: shared by the run's xdist workers (their
    base directories' parent is the run's), never by two runs."""
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / name
    root.mkdir(exist_ok=True)
    return root


def kept_for_the_run(directory: Path, key: str, make: Callable[[], Any]) -> Any:
    """``make()``'s answer for ``key``, made once in the run: written whole under a temporary
    name and renamed into place, so a reader never sees part of one. The answer must be what
    JSON keeps exactly."""
    name = hashlib.sha256(key.encode()).hexdigest()
    kept = directory / f"{name}.json"
    with (directory / f"{name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if kept.exists():
            return json.loads(kept.read_text())
        answer = make()
        partial = directory / f"{name}.partial"
        partial.write_text(json.dumps(answer))
        partial.replace(kept)
        return answer
