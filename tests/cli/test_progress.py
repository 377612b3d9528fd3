"""Long operations show where they are (issue 27, item 7).

``db upgrade`` (10 s on a 200k-message file) and ``db doctor`` (6 s) showed nothing while they
ran. The library now tells each migration step reached and each doctor stage as it starts; the
CLI names them on a progress bar on a terminal's stderr, and stays quiet in a pipe. Timing is
not asserted: what is shown, in what order, is.
"""

from __future__ import annotations

import contextlib
import os
import pty
import select
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from legacy_v1_v6 import build_legacy_db
from typer.testing import CliRunner

from sessionstore import cli
from sessionstore.api.session_db import SessionDB
from sessionstore.cli import _output
from sessionstore.ops import doctor
from sessionstore.schema import migrate
from sessionstore.storage.store import Store


def chain() -> list[str]:
    return [revision for revision, _, _ in migrate.history()]


def test_upgrade_tells_each_step_reached(tmp_path: Path) -> None:
    reached: list[str] = []
    migrate.upgrade(f"sqlite:///{tmp_path / 'new.db'}", progress=reached.append)
    assert reached == chain()
    hermes_file = tmp_path / "hermes.db"
    build_legacy_db(hermes_file, 3)
    adopted: list[str] = []
    migrate.upgrade(f"sqlite:///{hermes_file}", progress=adopted.append)
    assert adopted == chain()[2:]  # stamped at 0003 (told first), then each step run
    down: list[str] = []
    migrate.downgrade(f"sqlite:///{tmp_path / 'new.db'}", chain()[-4], progress=down.append)
    assert down == list(reversed(chain()[-4:-1]))


def test_diagnose_and_repair_name_each_stage(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "hello")
    stages: list[tuple[str, int, int]] = []
    with contextlib.closing(Store.open(f"sqlite:///{path}")) as store:
        store.write(lambda conn: conn.exec_driver_sql("UPDATE sessions SET message_count = 9"))
        report = doctor.diagnose(store, progress=lambda *stage: stages.append(stage))
        names = [name for name, _, _ in stages]
        assert names[0] == "schema" and "integrity" in names and "counters" in names
        assert [number for _, number, _ in stages] == list(range(1, len(stages) + 1))
        assert {total for _, _, total in stages} == {len(stages)}
        repaired: list[tuple[str, int, int]] = []
        doctor.repair(store, report, progress=lambda *stage: repaired.append(stage))
    assert repaired == [("counters", 1, 1)]


@contextlib.contextmanager
def recorded_stages(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """What the CLI would show on a terminal: every stage named, in order."""
    shown: list[str] = []

    @contextlib.contextmanager
    def recording(description: str) -> Iterator[Any]:
        yield lambda name, number, total: shown.append(f"{description}: {name} {number}/{total}")

    monkeypatch.setattr(_output, "stages", recording)
    yield shown


def test_db_upgrade_names_the_step_that_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "state.db"
    build_legacy_db(path, 3)
    runner = CliRunner()
    with recorded_stages(monkeypatch) as shown:
        assert runner.invoke(cli.app, ["--url", str(path), "db", "upgrade"]).exit_code == 0
    revisions = chain()
    total = len(revisions)
    assert shown[0] == f"upgrading {path}: 0001 {migrate.history()[0][2][:60]} 1/{total}"
    # Adoption stamps the v3 file at 0003: the next shown is the step that runs, 0004.
    assert shown[1].startswith(f"upgrading {path}: 0004 ") and shown[1].endswith(f" 4/{total}")
    assert shown[-1].startswith(f"upgrading {path}: {revisions[-1]} ")
    assert [line.rsplit(" ", 1)[1] for line in shown[1:]] == [
        f"{number}/{total}" for number in range(4, total + 1)
    ]

    with recorded_stages(monkeypatch) as shown:
        result = runner.invoke(cli.app, ["--url", str(path), "db", "downgrade", "0020", "--yes"])
        assert result.exit_code == 0, result.output
    undone = list(reversed(revisions[revisions.index("0020") + 1 :]))
    assert [line.split(": ", 1)[1].split(" ")[0] for line in shown] == undone

    with recorded_stages(monkeypatch) as shown:
        assert runner.invoke(cli.app, ["--url", str(path), "db", "upgrade"]).exit_code == 0
        assert runner.invoke(cli.app, ["--url", str(path), "db", "doctor"]).exit_code == 0
    assert any(line.startswith(f"checking {path}: integrity ") for line in shown)


def test_in_a_pipe_nothing_but_the_result_is_printed(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    build_legacy_db(path, 3)
    result = CliRunner().invoke(cli.app, ["--url", str(path), "db", "upgrade"])
    assert result.stderr == ""
    assert [line.split(" ")[0] for line in result.stdout.splitlines()] == ["backup", "upgraded"]


def _console_script() -> str:
    found = shutil.which("sessionstore") or str(Path(sys.executable).with_name("sessionstore"))
    assert os.access(found, os.X_OK), found
    return found


def _on_a_terminal(arguments: list[str], env: dict[str, str]) -> str:
    """Run the console script with a pseudo-terminal for every stream; all it printed."""
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [_console_script(), *arguments],
        stdin=follower, stdout=follower, stderr=follower, env=env, close_fds=True,
    )  # fmt: skip
    os.close(follower)
    received = bytearray()
    while True:
        ready, _, _ = select.select([leader], [], [], 120)
        if not ready:
            process.kill()
            break
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed with the process
            break
        if not chunk:
            break
        received += chunk
    process.wait(timeout=120)
    os.close(leader)
    assert process.returncode == 0, received.decode(errors="replace")
    return received.decode(errors="replace")


def test_on_a_terminal_the_progress_bar_names_the_steps(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    build_legacy_db(path, 3)
    env = {**os.environ, "COLUMNS": "400", "LINES": "40", "TERM": "xterm"}
    shown = _on_a_terminal(["--url", str(path), "db", "upgrade"], env)
    assert f"upgrading {path}: 0001" in shown  # the first frame, drawn before any step ran
    assert "upgraded " in shown
    checked = _on_a_terminal(["--url", str(path), "db", "doctor"], env)
    # A quick check may finish between two frames: the bar itself, not each stage, is seen.
    assert f"checking {path}" in checked and "no problems found" in checked
