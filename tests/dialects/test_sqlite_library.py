"""The SQLite library sessionstore runs on (issue 30, item 10: the WAL-reset bug).

- The stores run on a SQLite without the WAL-reset bug where one is installed (pysqlite3 here,
  whose 3.53.4 has the fix; the standard library's 3.40.1 has the bug), in WAL.
- Where only a vulnerable SQLite is available (``SESSIONSTORE_SQLITE_DRIVER=sqlite3`` here),
  a new file stays in the rollback journal and an existing WAL file keeps WAL, with a warning.
- Every connection the package opens or hands out (the engines', ``_conn``, backups, the
  repair) comes from that one library; its errors are the standard library's classes too.
- A file that this process already has open through another library is refused before the
  store opens it, and the file is left as it was.
- ``sessionstore --version`` and ``db doctor`` say which SQLite is in use.
"""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest
from typer.testing import CliRunner

import sessionstore
from sessionstore import SessionDB, SQLiteLibraryConflictError
from sessionstore import cli as cli_module
from sessionstore.dialects.sqlite_library import (
    DRIVER_ENV_VAR,
    has_wal_reset_bug,
    library,
)
from sessionstore.hermes import state as hermes_state

REPO = Path(__file__).resolve().parents[2]
STANDARD_LIBRARY_IS_VULNERABLE = has_wal_reset_bug(sqlite3.sqlite_version_info)
ON_ANOTHER_LIBRARY = pytest.mark.skipif(
    library().is_standard_library, reason="the stores run on the standard library here"
)


@pytest.mark.parametrize(
    ("version", "vulnerable"),
    [
        ((3, 6, 23), False), ((3, 7, 0), True), ((3, 40, 1), True), ((3, 44, 5), True),
        ((3, 44, 6), False), ((3, 45, 0), True), ((3, 50, 6), True), ((3, 50, 7), False),
        ((3, 51, 0), True), ((3, 51, 2), True), ((3, 51, 3), False), ((3, 53, 4), False),
    ],
)  # fmt: skip
def test_the_wal_reset_bug_versions(version: tuple[int, int, int], vulnerable: bool) -> None:
    assert has_wal_reset_bug(version) is vulnerable


@pytest.mark.skipif(
    os.environ.get(DRIVER_ENV_VAR) == "sqlite3" or importlib.util.find_spec("pysqlite3") is None,
    reason="the standard library's SQLite, chosen or the only one (no pysqlite3 wheel here)",
)
def test_stores_run_on_a_sqlite_without_the_wal_reset_bug_in_wal(tmp_path: Path) -> None:
    """This machine's standard library links 3.40.1; the package's pysqlite3 dependency has
    the fix, so the store runs on it, in WAL. (Not a ``needs_wal`` mark: that would skip it
    exactly when pysqlite3 stopped being chosen.)"""
    with SessionDB(tmp_path / "state.db") as db, db.store.engine.connect() as conn:
        version = str(conn.exec_driver_sql("SELECT sqlite_version()").scalar())
        mode = conn.exec_driver_sql("PRAGMA journal_mode").scalar()
    in_use = tuple(int(part) for part in version.split("."))
    assert not has_wal_reset_bug(in_use), version
    assert version == library().sqlite_version and mode == "wal"


GATED = """
import json, logging, sqlite3, sys
logging.basicConfig(level=logging.WARNING, format="%(message)s")
from sessionstore import SessionDB
from sessionstore.dialects.sqlite_library import library
new, old = sys.argv[1], sys.argv[2]
with SessionDB(new) as db:
    db.create_session("s", "cli")
    with db.store.engine.connect() as conn:
        new_mode = conn.exec_driver_sql("PRAGMA journal_mode").scalar()
with SessionDB(old) as db:
    db.create_session("s", "cli")
    with db.store.engine.connect() as conn:
        old_mode = conn.exec_driver_sql("PRAGMA journal_mode").scalar()
print(json.dumps([library().describe(), new_mode, old_mode]))
"""


@pytest.mark.skipif(
    not STANDARD_LIBRARY_IS_VULNERABLE, reason="the standard library's SQLite has the fix"
)
def test_on_a_vulnerable_sqlite_new_files_stay_out_of_wal(tmp_path: Path) -> None:
    old = tmp_path / "old.db"
    with closing(sqlite3.connect(old)) as conn:  # a Hermes file: in WAL already
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE keep (x)")
    result = subprocess.run(
        [sys.executable, "-c", GATED, str(tmp_path / "new.db"), str(old)],
        capture_output=True, text=True, check=True, cwd=REPO,
        env={**os.environ, DRIVER_ENV_VAR: "sqlite3"},
    )  # fmt: skip
    described, new_mode, old_mode = json.loads(result.stdout.splitlines()[-1])
    assert described.startswith(f"SQLite {sqlite3.sqlite_version} via the standard library")
    assert (new_mode, old_mode) == ("delete", "wal")
    warnings = [line for line in result.stderr.splitlines() if "WAL-reset bug" in line]
    assert len(warnings) == 2, result.stderr  # one per file
    assert "not switched to WAL" in warnings[0] and "kept in WAL" in warnings[1]


@ON_ANOTHER_LIBRARY
def test_its_errors_are_caught_as_the_standard_librarys(tmp_path: Path) -> None:
    db = hermes_state.SessionDB(tmp_path / "state.db")
    try:
        db.create_session("s", "cli")
        with pytest.raises(sqlite3.OperationalError, match="no such table"):
            db._conn.execute("SELECT * FROM nowhere")
        with pytest.raises(sqlite3.IntegrityError):
            db._conn.execute("INSERT INTO sessions (id, source, started_at) VALUES ('s', 'x', 0)")
        try:
            db._conn.execute("SELEC 1")
        except sqlite3.Error as exc:  # what Hermes's own handlers catch
            assert isinstance(exc, sqlite3.OperationalError)
        else:
            pytest.fail("a syntax error was not raised")
    finally:
        db.close()


def refuse_standard_library_connections(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """From now on, any ``sqlite3.connect`` of the standard library is recorded and fails."""
    opened: list[str] = []

    def refuse(database: object, *args: object, **kwargs: object) -> sqlite3.Connection:
        opened.append(str(database))
        raise AssertionError(f"the standard library's sqlite3 opened {database}")

    monkeypatch.setattr(sqlite3, "connect", refuse)
    return opened


@ON_ANOTHER_LIBRARY
def test_every_connection_the_package_opens_is_the_stores_library(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Hermes file adopted (with its backup), Hermes's ``_conn`` and ``_execute_write``, the
    repair helper with its backup, and db doctor --fix: none opens the file through the
    standard library."""
    from legacy_v1_v6 import build_legacy_db

    path = tmp_path / "state.db"
    build_legacy_db(path, 6)  # Hermes wrote it, with the standard library, and closed it
    opened = refuse_standard_library_connections(monkeypatch)
    db = hermes_state.SessionDB(path)
    try:
        assert db.adoption_backup is not None
        assert isinstance(db._conn, library().module.Connection)
        db._execute_write(lambda conn: conn.execute("UPDATE sessions SET model = 'm'"))
    finally:
        db.close()
    report = hermes_state.repair_state_db_schema(path)
    assert report["repaired"] and report["error"] is None, report
    result = CliRunner().invoke(cli_module.app, ["--url", str(path), "db", "doctor", "--fix"])
    assert result.exit_code == 0, result.output
    assert opened == []


@ON_ANOTHER_LIBRARY
def test_a_file_open_through_the_standard_library_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", "cli")
        db.append_message("s", "user", "before")
    other = sqlite3.connect(path)  # user code, or Hermes code, in this process
    try:
        assert other.execute("SELECT count(*) FROM messages").fetchone() == (1,)
        for opener in (SessionDB, hermes_state.SessionDB):
            with pytest.raises(SQLiteLibraryConflictError, match="SESSIONSTORE_SQLITE_DRIVER"):
                opener(path)
        with pytest.raises(SQLiteLibraryConflictError):
            sessionstore.Store.open(f"sqlite:///{path}")
        # The other connection never lost its locks: it still writes and reads its own.
        other.execute("INSERT INTO sessions (id, source, started_at) VALUES ('o', 'cli', 1)")
        other.commit()
        assert other.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        other.close()
    with SessionDB(path) as db:  # once it is closed, the store opens
        assert {s["id"] for s in db.list_sessions_rich()} == {"s", "o"}


@ON_ANOTHER_LIBRARY
def test_a_standard_library_connection_dropped_without_close_does_not_block(
    tmp_path: Path,
) -> None:
    """``with sqlite3.connect(...)`` commits but does not close, and the dropped connection
    waits for the garbage collector (a reference cycle through its statement cache), still
    holding the file: Hermes's own tests build old files that way. It is collected before
    the check counts, so the store opens; one still referenced is refused as before."""
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", "cli")

    def edit_and_drop() -> None:
        with sqlite3.connect(path) as conn:
            conn.execute("UPDATE sessions SET title = 'edited' WHERE id = 's'")

    gc_was_enabled = gc.isenabled()
    gc.disable()  # the connection must still be waiting when the store opens
    try:
        edit_and_drop()
        with SessionDB(path) as db:
            assert db.get_session_title("s") == "edited"
            db.append_message("s", "user", "after")
    finally:
        if gc_was_enabled:
            gc.enable()
    with closing(sqlite3.connect(path)) as kept:
        kept.execute("SELECT 1 FROM sessions").fetchall()
        with pytest.raises(SQLiteLibraryConflictError):
            SessionDB(path)
    with SessionDB(path) as db:
        assert db.message_count("s") == 1


@ON_ANOTHER_LIBRARY
def test_the_description_names_the_installed_pysqlite3() -> None:
    # Its package version is read when the library is described, not at the first open.
    from importlib.metadata import version

    assert library().package_version == version("pysqlite3")
    assert f"via pysqlite3 {version('pysqlite3')} (" in library().describe()


def test_version_and_doctor_name_the_sqlite_in_use(tmp_path: Path) -> None:
    runner = CliRunner()
    version = runner.invoke(cli_module.app, ["--version"])
    assert version.exit_code == 0
    assert version.stdout.splitlines() == [
        f"sessionstore {sessionstore.__version__}", library().describe()
    ]
    path = tmp_path / "state.db"
    SessionDB(path).close()
    doctor = runner.invoke(cli_module.app, ["--url", str(path), "db", "doctor", "--json"])
    assert doctor.exit_code == 0, doctor.output
    engine = next(c for c in json.loads(doctor.stdout)["checks"] if c["name"] == "engine")
    assert engine["detail"].startswith(library().describe())
    assert f"SQLite {library().sqlite_version}" in engine["detail"]
    assert engine["status"] == ("warn" if library().wal_reset_bug else "ok")
