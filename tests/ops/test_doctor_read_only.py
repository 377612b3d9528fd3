"""``db doctor`` without ``--fix`` writes nothing: users run it beside a live Hermes gateway.

Before, the full-text checks ran in a write transaction (``BEGIN IMMEDIATE``, FTS5's
``integrity-check`` being an INSERT) that committed: ``PRAGMA data_version`` seen from another
connection moved, the WAL grew by the pages written again and the checkpoint at close wrote
them back into the file (its modification time moved); a foreign write transaction kept the
checks from running (3 s, then "not checked"); a file this user cannot write failed the whole
command ("read-only here"). Now the check opens the store read-only and FTS5's checks run on
a private snapshot of the database (``SQLiteSearchIndex.check_read_only``). SQLite only: the
PostgreSQL checks always only read.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from sessionstore import cli
from sessionstore.api.session_db import SessionDB
from sessionstore.dialects.sqlite_library import connect

NOBODY = 65534


def populate(url: str) -> None:
    with SessionDB(url=url) as db:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "deploy 部署到集群 with kubectl")
        db.append_message("s1", "user", [{"type": "text", "text": "列表 structured content"}])
        db.append_message("s1", "assistant", "calling", tool_calls=[
            {"id": "c1", "type": "function",
             "function": {"name": "terminal", "arguments": '{"cmd": "ls 日志"}'}}])  # fmt: skip
        db.append_message("s1", "tool", {"output": "結果 result"}, tool_call_id="c1",
                          tool_name="terminal")  # fmt: skip


def file_state(path: Path) -> tuple[bytes, int, int]:
    """The database file's bytes and modification time, and the WAL's size (``stat`` and a
    read of the file while only this test's watcher has it open, never a write)."""
    wal = Path(f"{path}-wal")
    return path.read_bytes(), path.stat().st_mtime_ns, wal.stat().st_size if wal.exists() else -1


@pytest.fixture
def store_file(tmp_path: Path) -> Path:
    path = tmp_path / "state.db"
    populate(f"sqlite:///{path}")
    return path


@pytest.fixture
def watcher(store_file: Path) -> Iterator[Any]:
    """Another connection (the stores' library), open across the doctor's run: it keeps the
    WAL in place, as a live Hermes does, and reads ``PRAGMA data_version``."""
    conn = connect(store_file, isolation_level=None)
    conn.execute("SELECT count(*) FROM messages").fetchone()
    yield conn
    conn.close()


def data_version(conn: Any) -> int:
    return int(conn.execute("PRAGMA data_version").fetchone()[0])


def doctor(path: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(cli.app, ["--url", str(path), "db", "doctor", "--json", *extra])
    return result.exit_code, json.loads(result.stdout)


def test_a_check_changes_not_a_byte_of_the_store(store_file: Path, watcher: Any) -> None:
    before, version = file_state(store_file), data_version(watcher)
    code, report = doctor(store_file)
    assert code == 0 and report["healthy"] is True, report
    checks = {c["name"]: c["status"] for c in report["checks"]}
    assert checks["fts_integrity"] == "ok" and checks["fts_parity"] == "ok"
    assert data_version(watcher) == version  # no other connection committed
    assert file_state(store_file) == before  # bytes, mtime, WAL size


def test_a_check_beside_an_open_write_transaction_runs_every_check(
    store_file: Path, watcher: Any
) -> None:
    """A live writer mid-transaction (Hermes's gateway appending) holds the write lock for
    the whole run: under WAL the check only reads the last committed state, so nothing waits
    and nothing is left "not checked"; the writer's commit afterwards goes through."""
    conn = watcher
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("UPDATE sessions SET title = 'mid-write'")
    code, report = doctor(store_file)
    conn.execute("COMMIT")
    assert code == 0 and report["healthy"] is True, report
    checks = report["checks"]
    assert not any(c["busy"] or c["status"] == "skip" for c in checks), checks


def test_fix_still_repairs_after_a_read_only_check(store_file: Path) -> None:
    with connect(store_file, isolation_level=None) as conn:  # a damaged word index
        conn.execute("DELETE FROM messages_fts_data WHERE id > 10")
    conn.close()
    code, report = doctor(store_file)
    assert code == 1
    assert {c["name"]: c["status"] for c in report["checks"]}["fts_integrity"] == "fail"
    code, report = doctor(store_file, "--fix")
    assert code == 0 and report["actions"] == ["rebuilt the full-text index"], report


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory another user can reach (pytest's own is root's alone)."""
    made = Path(tempfile.mkdtemp(prefix="sessionstore-doctor-"))
    made.chmod(0o755)
    yield made
    for path in (made, *made.iterdir()):
        path.chmod(stat.S_IRWXU)
    shutil.rmtree(made)


def test_a_check_of_a_file_and_directory_this_user_cannot_write(shared_dir: Path) -> None:
    """As another user (the suite runs as root, who writes everything): the file mode 0444 in
    a directory mode 0555. Before: "the session store is read-only here"."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("running as another user needs root and setpriv")
    path = shared_dir / "state.db"
    # The rollback journal: a WAL file needs its -shm, which this user could not create
    # here (SQLite's rule; every reading verb then names immutable=1).
    populate(f"sqlite:///{path}?journal_mode=delete")
    path.chmod(0o444)
    shared_dir.chmod(0o555)
    as_nobody = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    probe = subprocess.run([*as_nobody, sys.executable, "-c", "import sessionstore"],
                           capture_output=True, check=False)  # fmt: skip
    if probe.returncode != 0:
        pytest.skip(f"another user cannot import this checkout: {probe.stderr[-200:]!r}")
    before = path.read_bytes(), path.stat().st_mtime_ns
    done = subprocess.run(
        [*as_nobody, sys.executable, "-m", "sessionstore", "--url", str(path), "db", "doctor",
         "--json"], capture_output=True, text=True, check=False, cwd=shared_dir,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["healthy"] is True
    assert {c["name"]: c["status"] for c in report["checks"]}["fts_integrity"] == "ok"
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before
    assert sorted(p.name for p in shared_dir.iterdir()) == ["state.db"]


def test_the_checks_copy_is_a_private_file_beside_the_store_gone_after(
    store_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The search checks' snapshot is written to disk, in a private place: in SQLite's
    anonymous temporary database (memory, in pysqlite3's build) a copy of a 2 GB store took
    2 GB of memory (``db doctor`` on a 75 MB store: 218 MB resident, 142 MB now)."""
    from sessionstore.search import sqlite as search_sqlite

    written: list[Path] = []
    fill = search_sqlite.snapshot_into

    def recorded(source: Any, destination: Path, vfs: str | None = None) -> None:
        written.append(destination)
        # Beside the store (in the rollback journal, beside the private copy the content
        # checks read: ``doctor.content_checked``).
        assert store_file.parent in destination.parents
        assert destination.parent.name.startswith(".state.db.")
        assert stat.S_IMODE(destination.parent.stat().st_mode) == 0o700
        fill(source, destination, vfs)

    def in_memory(source: Any) -> Any:
        raise AssertionError("copied into memory")

    monkeypatch.setattr(search_sqlite, "snapshot_into", recorded)
    monkeypatch.setattr(search_sqlite, "private_snapshot", in_memory)
    code, report = doctor(store_file)
    assert code == 0 and report["healthy"] is True, report
    assert len(written) == 1 and not written[0].parent.exists()
    assert sorted(p.name for p in store_file.parent.iterdir() if p.name.startswith(".")) == []


def test_with_no_place_for_a_file_the_checks_copy_into_memory(
    store_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sessionstore.storage import snapshots

    def refused(directory: Path, name: str, mode: int) -> Any:
        raise OSError(28, "No space left on device", str(directory))

    monkeypatch.setattr(snapshots, "private_copy", refused)
    code, report = doctor(store_file)
    assert code == 0 and report["healthy"] is True, report
    assert {c["name"]: c["status"] for c in report["checks"]}["fts_integrity"] == "ok"


def test_in_the_rollback_journal_the_checks_hold_no_writer_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The content checks read every page and row (a minute on a large store). In the rollback
    journal a reader holds every COMMIT off: a gateway appending meanwhile ran out of its
    retry budget. They read a private copy there: the writes beside a check that takes as
    long as it likes are acknowledged at once, and land in the store, not in the copy."""
    import threading

    from sessionstore.ops import doctor as doctor_module
    from sessionstore.storage.retry import RetryPolicy

    url = f"sqlite:///{tmp_path / 'state.db'}?journal_mode=delete"
    populate(url)
    inside, written = threading.Event(), threading.Event()
    check = doctor_module._check_orphan_messages

    def slow_check(conn: Any, findings: Any) -> Any:
        found = check(conn, findings)
        inside.set()  # in the check's read transaction, until the writes are done
        assert written.wait(30)
        return found

    monkeypatch.setattr(doctor_module, "_check_orphan_messages", slow_check)
    outcome: list[Any] = []
    thread = threading.Thread(target=lambda: outcome.append(doctor(tmp_path / "state.db")))
    thread.start()
    try:
        assert inside.wait(60)
        quick = RetryPolicy(max_attempts=4, budget_s=2.0)
        with SessionDB(url=url, retry=quick, busy_timeout_s=0.2) as gateway:
            for index in range(3):
                gateway.append_message("s1", "assistant", f"during the check {index}")
    finally:
        written.set()
        thread.join(60)
    code, report = outcome[0]
    assert code == 0 and report["healthy"] is True, report
    with SessionDB(url=url) as reopened:
        assert [m["content"] for m in reopened.get_messages("s1")][-3:] == [
            f"during the check {index}" for index in range(3)
        ]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
