"""Every disk-full path is typed: ``StoreFullError`` on append, on adoption and its backup, on
import, export and copy; the store is intact and the next write works once room is back.

Two ways to run out of room, each scenario in a process of its own
(``tests/support/disk_full.py``, forked from one that imported the package once): the
process's file-size limit (``RLIMIT_FSIZE``: ``EFBIG``, which SQLite reports as a bare "disk
I/O error"), and a small tmpfs filled but for a few hundred KiB (``ENOSPC``), mounted here
when the machine lets this test mount one.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import prefork
import pytest
from disk_full import IMPORTS as DISK_FULL_IMPORTS
from disk_full import PROGRAM
from prefork import ForkServer
from tiny_tmpfs import tiny_tmpfs

SCENARIOS = ["append", "adoption_backup", "adoption_migration", "import", "export", "copy"]
REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def small_filesystem(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """An 8 MiB tmpfs, if this machine lets the test mount one (root, mount allowed)."""
    with tiny_tmpfs(tmp_path_factory.mktemp("disk-full") / "tmpfs", "8m") as mount:
        yield mount


@pytest.fixture(scope="module")
def scenarios() -> Iterator[ForkServer | None]:
    """The scenarios' processes, forked from one that imported the package and built a store
    once (``disk_full.IMPORTS``, ``prime``): each still a process of its own, with its own
    limits and SQLite, without importing the package and running the chain again."""
    if not prefork.available():
        yield None
        return
    with ForkServer(DISK_FULL_IMPORTS, cwd=REPO_ROOT, prime="disk_full:prime") as server:
        yield server


def run_scenario(
    scenario: str, squeeze: str, directory: Path, server: ForkServer | None
) -> dict[str, Any]:
    if server is not None:
        program = server.start("disk_full:main", [scenario, squeeze, str(directory)],
                               stdout=prefork.PIPE, stderr=prefork.PIPE)  # fmt: skip
        out, err = program.communicate(timeout=300)
        done = subprocess.CompletedProcess(program.args, program.returncode, out, err)
    else:
        done = subprocess.run(
            [sys.executable, PROGRAM, scenario, squeeze, str(directory)],
            capture_output=True, text=True, cwd=REPO_ROOT, timeout=300,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def check(scenario: str, report: dict[str, Any]) -> None:
    assert report["raised"] == "StoreFullError", report
    assert "full" in report["message"], report
    after = report["after"]
    if scenario == "append":
        # Every acknowledged append is there, and the one after the room came back.
        assert after["stored"] == after["acknowledged"] and after["sound"], after
    elif scenario.startswith("adoption"):
        # Refused before anything changed: the Hermes file byte for byte, nothing beside it;
        # with room back, the same open adopts it and the next write lands.
        assert after["unchanged"] and after["leftovers"] == [], after
        assert after["backup"] is (scenario == "adoption_backup"), after
        assert after["up_to_date"] and after["messages"] == 1 and after["sound"], after
    elif scenario == "import":
        assert after["empty_after_failure"], after
        assert after["imported"] == after["expected"] and after["sound"], after
    elif scenario == "export":
        assert after["missing_after_failure"] and after["leftovers"] == [], after
        assert after["written"] == 3, after
    elif scenario == "copy":
        # Run again, the copy completes what the full disk interrupted.
        assert after["sessions"] == 3 and after["messages"] == after["expected"], after
        assert after["sound"], after


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_file_size_limit_is_a_store_full_error(
    scenario: str, tmp_path: Path, scenarios: ForkServer | None
) -> None:
    check(scenario, run_scenario(scenario, "rlimit", tmp_path / scenario, scenarios))


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_full_filesystem_is_a_store_full_error(
    scenario: str, small_filesystem: Path, scenarios: ForkServer | None
) -> None:
    directory = small_filesystem / scenario
    try:
        check(scenario, run_scenario(scenario, "filler", directory, scenarios))
    finally:
        shutil.rmtree(directory, ignore_errors=True)
        for filler in small_filesystem.glob("filler-*"):
            filler.unlink()
