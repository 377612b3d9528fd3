"""A state.db this user cannot write, or one a crash left a rollback journal beside: the
reading verbs read it wherever SQLite can, and every refusal says why and what to change
(the field walk of the odd files on users' disks, docs/adopting.md#odd-files-on-disk).

Found by that walk, as a non-root user: a WAL file in a read-only directory or owned by
another user failed every reading verb with "the session store is read-only here: attempt to
write a readonly database" (SQLITE_READONLY_DIRECTORY; the immutable=1 hint only answered
"unable to open"); `db upgrade` of a file it could not write left a backup beside it at each
try, then failed with the same words; a rollback journal left by a crashed writer made every
reading verb fail "read-only" on a file the user could write. The suite runs as root, who
writes everything, so "cannot write" is stood in for where the dialect asks
(``why_not_writable``); the journal is a real one.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sessionstore import SessionDB, cli
from sessionstore.dialects import sqlite as sqlite_dialect
from sessionstore.dialects.sqlite import SQLiteDialect, why_not_writable
from sessionstore.errors import ReadOnlyStoreError
from sessionstore.storage.backups import backup_database
from sessionstore.storage.error_translation import with_media_hint
from sessionstore.storage.store import Store


def _hot_journal_file(tmp_path: Path) -> Path:
    """``crash/state.db`` with a hot rollback journal: the image a writer killed mid-write
    leaves (its pages already changed in the file, the originals in ``-journal``). Taken by
    copying a throw-away file and its journal while a connection holds the write, in a
    directory nothing else opens; the original connection is then rolled back."""
    origin = tmp_path / "origin" / "state.db"
    origin.parent.mkdir()
    setup = sqlite3.connect(origin)
    setup.executescript(
        "PRAGMA journal_mode = DELETE;"
        "CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT);"
        "INSERT INTO t (v) SELECT 'committed' FROM (SELECT 1 UNION SELECT 2 UNION SELECT 3);"
    )
    setup.close()
    writer = sqlite3.connect(origin, isolation_level=None)
    writer.execute("PRAGMA cache_size = 1")  # spill: the changed pages reach the file
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("UPDATE t SET v = 'never committed' || zeroblob(3000)")
    crash = tmp_path / "crash"
    crash.mkdir()
    shutil.copyfile(origin, crash / "state.db")
    shutil.copyfile(f"{origin}-journal", crash / "state.db-journal")
    writer.execute("ROLLBACK")
    writer.close()
    return crash / "state.db"


def test_a_read_only_open_rolls_a_crashed_writers_journal_back(tmp_path: Path) -> None:
    path = _hot_journal_file(tmp_path)
    with Store.open(f"sqlite:///{path}", read_only=True) as store:
        values = store.read(lambda conn: [r[0] for r in conn.exec_driver_sql("SELECT v FROM t")])
    assert values == ["committed"] * 3
    assert not os.path.exists(f"{path}-journal")


def test_a_journal_this_user_cannot_roll_back_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _hot_journal_file(tmp_path)
    before = path.read_bytes()
    # Not writable here: the read-only open cannot roll back, and says so.
    monkeypatch.setattr(sqlite_dialect.os, "access", lambda *_a, **_k: False)
    with (
        pytest.raises(ReadOnlyStoreError, match=r"rollback journal, state\.db-journal") as err,
        Store.open(f"sqlite:///{path}", read_only=True) as store,
    ):
        store.read(lambda conn: conn.exec_driver_sql("SELECT v FROM t").all())
    assert "cannot write the file" in str(err.value)
    monkeypatch.undo()
    assert path.read_bytes() == before and os.path.getsize(f"{path}-journal") > 0


def test_why_not_writable_names_the_file_the_directory_or_a_side_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "state.db"
    path.touch()
    os.chmod(path, 0o444)
    assert why_not_writable(path) is None  # root writes it: nothing to say
    denied: set[Path] = set()
    real_access = os.access
    monkeypatch.setattr(
        sqlite_dialect.os, "access",
        lambda target, how, **kw: Path(target) not in denied and real_access(target, how),
    )  # fmt: skip
    denied.add(path)
    said = why_not_writable(path)
    assert said is not None and "cannot write the file (mode 0444" in said
    assert f"chmod u+w {path}" in said  # the owner is this user: the command to run
    denied.clear()
    (tmp_path / "state.db-shm").touch()
    denied.add(tmp_path / "state.db-shm")
    assert "cannot write state.db-shm" in (why_not_writable(path) or "")
    denied.clear()
    denied.add(tmp_path)
    said = why_not_writable(path)
    assert said is not None and f"cannot write its directory {tmp_path}" in said


def test_a_read_only_directory_refusal_says_how_to_read_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLITE_READONLY_DIRECTORY is a ReadOnlyStoreError: it gets the immutable=1 way too."""
    path = tmp_path / "state.db"
    with SessionDB(path):
        pass
    dialect = SQLiteDialect()
    url = sqlite_dialect.URL.create("sqlite", database=str(path))
    monkeypatch.setattr(
        sqlite_dialect.os, "access",
        lambda target, how, **kw: Path(target) != tmp_path,
    )  # fmt: skip
    error = sqlite3.OperationalError("attempt to write a readonly database")
    translated = dialect.translate_error(error, url)
    assert isinstance(translated, ReadOnlyStoreError)
    hinted = with_media_hint(dialect, url, translated)
    assert isinstance(hinted, ReadOnlyStoreError)
    assert f"cannot write its directory {tmp_path}" in str(hinted)
    assert f"sqlite:///{path}?immutable=1" in str(hinted)


def test_an_upgrade_that_cannot_write_leaves_no_backup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "state.db"
    raw = sqlite3.connect(path)
    raw.executescript(
        "CREATE TABLE schema_version (version INTEGER NOT NULL);"
        "INSERT INTO schema_version VALUES (1);"
        "CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT NOT NULL, started_at REAL);"
    )
    raw.close()
    before = path.read_bytes()
    monkeypatch.setattr(sqlite_dialect, "why_not_writable", lambda _p: "stand-in reason")
    with pytest.raises(ReadOnlyStoreError, match="stand-in reason; nothing was written"):
        backup_database(f"sqlite:///{path}")
    result = CliRunner().invoke(cli.app, ["--url", str(path), "db", "upgrade"])
    assert result.exit_code == 1 and "stand-in reason" in result.stderr
    reading = CliRunner().invoke(cli.app, ["--url", str(path), "sessions", "list"])
    # The reading verbs' refusal never sends the user to an upgrade that would fail.
    assert "it cannot be upgraded here: stand-in reason; then run" in reading.stderr
    assert sorted(os.listdir(tmp_path)) == ["state.db"] and path.read_bytes() == before


def test_the_writers_queue_of_a_linked_store_is_the_real_files(tmp_path: Path) -> None:
    real = tmp_path / "real" / "state.db"
    real.parent.mkdir()
    (tmp_path / "home").symlink_to(real.parent)
    dialect = SQLiteDialect()
    by_link = dialect.writer_queue_file(
        sqlite_dialect.URL.create("sqlite", database=str(tmp_path / "home" / "state.db")),
        read_only=False,
    )
    assert by_link == real.with_name("state.db-writelock")


def test_side_files_left_beside_another_users_file_are_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Reading another user's WAL file that nobody had open leaves a -wal and -shm this user
    owns, which stop the owner's writes: said, with the command that removes them."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("chown to another user needs root (what the suite runs as)")
    path = tmp_path / "state.db"
    path.touch()
    (tmp_path / "state.db-wal").touch()
    (tmp_path / "state.db-shm").touch()
    sqlite_dialect._warn_of_foreign_side_files(path)
    assert caplog.records == []  # this user's own file: nothing to say
    os.chown(path, 1234, 1234)
    with caplog.at_level("WARNING", logger="sessionstore.dialects.sqlite"):
        sqlite_dialect._warn_of_foreign_side_files(path)
    [record] = caplog.records
    said = record.getMessage()
    assert "left state.db-wal and state.db-shm beside it" in said
    assert f"`rm {path}-wal {path}-shm`" in said and "immutable=1" in said
