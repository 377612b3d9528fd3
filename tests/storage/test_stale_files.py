"""Stale and foreign files where the store should be (SPEC §4, §7): each is refused with a clear,
specific error, and not one byte of it is changed.

What could be tested here, and how (the suite runs as root, and chmod does not stop root):
- a file that is not a database, and a database cut short: plain files;
- a read-only file or directory: `chattr +i` (immutable even for root), skipped where the
  filesystem or the container refuses it;
- a read-only filesystem: a read-only bind mount, skipped where mounting is not allowed;
- `SessionDB(read_only=True)` on a healthy file;
- a database locked by another program: a raw `sqlite3` connection holding BEGIN EXCLUSIVE,
  in WAL and in rollback-journal mode, for longer than the caller's retry budget.
Not covered: a legacy file that still needs its migration while another program holds the
lock. Opening it waits up to the migration's own 600 s budget (by design: a second process
waits behind a first one's long upgrade), not the caller's.
"""

from __future__ import annotations

import gc
import random
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import pytest
from faultlib import file_digest, sqlite_integrity_problems, sqlite_url
from store_library import connect_like_the_store, needs_wal

from sessionstore.api.session_db import SessionDB
from sessionstore.errors import ReadOnlyStoreError, StoreBusyError, StoreUnavailableError
from sessionstore.storage.engine import create_store_engine
from sessionstore.storage.retry import RetryPolicy
from sessionstore.storage.store import Store

BUDGET = RetryPolicy(max_attempts=1000, budget_s=0.6)
BUSY_TIMEOUT_S = 0.1


@pytest.fixture(scope="module", autouse=True)
def _collections_walk_this_module_only() -> Iterator[None]:
    """The tests collect the garbage after each refusal (`_unchanged`, `_read_only_view`: a
    refused connection may linger in a traceback until collected). A full collection walks
    every object of the test process, late in a full run hundreds of tests' worth; what exists
    before this module (after one collection) is frozen while it runs, so each collection walks
    what the module made, the refused connections with it. Nothing is unfrozen after it: the
    test process froze what it collected (conftest), and what this module froze stays frozen
    with it (unfreezing would give every later collection the whole process to walk again)."""
    gc.collect()
    gc.freeze()
    yield


def _used_the_budget(waited_s: float) -> bool:
    """Kept trying for the budget (the loop stops when the next pause would overrun it), and
    gave up soon after (the last attempt's busy wait may overrun it a little)."""
    earliest = BUDGET.budget_s - BUDGET.max_sleep_s - BUSY_TIMEOUT_S
    return earliest <= waited_s <= BUDGET.budget_s + BUSY_TIMEOUT_S + 1.0


def _build_store(path: Path, messages: int = 40) -> None:
    """A healthy store, closed cleanly: everything in the main file, no -wal/-shm left.

    It holds an ended session too, so that every write method in WRITES has work to do.
    """
    with SessionDB(path) as db:
        db.create_session("s1", "cli")
        db.set_session_title("s1", "kept")
        text = "数据库 " * 200
        db.append_messages(
            "s1", [{"role": "user", "content": f"message {n} {text}"} for n in range(messages)]
        )
        db.create_session("old", "cli")
        db.end_session("old", "user_exit")
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


@pytest.fixture(scope="module")
def _pristine_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """:func:`_build_store`'s file, built once per test process (a fresh store walks the whole
    migration chain: a third of a second a test) and closed: no connection holds it."""
    path = tmp_path_factory.mktemp("pristine") / "state.db"
    _build_store(path)
    return path


@pytest.fixture
def make_store(_pristine_store: Path) -> Callable[[Path], None]:
    """Puts :func:`_build_store`'s healthy store at a path: a byte copy of the closed pristine
    file (the same bytes a new build leaves, WAL mark in the header included)."""

    def make(path: Path) -> None:
        shutil.copyfile(_pristine_store, path)
        assert sorted(p.name for p in path.parent.iterdir()) == [path.name]

    return make


def _read_everything(db: SessionDB) -> Any:
    return (
        db.session_count(),
        db.message_count(),
        db.export_all(),
        db.list_sessions_rich(),
        db.get_session_by_title("kept"),
    )


@contextmanager
def _unchanged(directory: Path, *, sidecars_of: str | None = None) -> Iterator[None]:
    """Every file of `directory` keeps its bytes, and nothing is created or removed, except
    (with `sidecars_of`) the -wal/-shm index a read-only SQLite connection cannot clean up."""
    before = {p.name: file_digest(p) for p in directory.iterdir() if p.is_file()}
    yield
    gc.collect()  # a refused connection may linger in a traceback until collected
    after = {p.name: file_digest(p) for p in directory.iterdir() if p.is_file()}
    if sidecars_of is not None:
        for suffix in ("-wal", "-shm"):
            if f"{sidecars_of}{suffix}" not in before:
                after.pop(f"{sidecars_of}{suffix}", None)
    assert after == before


# --- files that are not (whole) databases ---------------------------------------------------

FOREIGN_CONTENTS = [
    pytest.param(b"just some notes, not a database\n" * 40, id="text"),
    pytest.param(random.Random(1).randbytes(64 * 1024), id="random-bytes"),
    pytest.param(b"\x89PNG\r\n\x1a\n" + b"\x00" * 4000, id="png"),
    pytest.param(b"SQLite format 3\x00" + random.Random(2).randbytes(8192), id="header-garbage"),
    pytest.param(b'{"sessions": []}', id="json"),
    pytest.param(b"x", id="one-byte"),
]


@pytest.mark.parametrize("read_only", [False, True], ids=["read-write", "read-only"])
@pytest.mark.parametrize("contents", FOREIGN_CONTENTS)
def test_a_file_that_is_not_a_database_is_refused_untouched(
    tmp_path: Path, contents: bytes, read_only: bool
) -> None:
    path = tmp_path / "state.db"
    path.write_bytes(contents)
    with (
        _unchanged(tmp_path, sidecars_of=path.name if read_only else None),
        pytest.raises(StoreUnavailableError, match="not a usable SQLite"),
    ):
        SessionDB(path, read_only=read_only)


def test_an_empty_file_is_an_empty_database_and_becomes_a_store(tmp_path: Path) -> None:
    """SQLite's own rule: zero bytes is a valid, empty database; there is nothing to overwrite."""
    path = tmp_path / "state.db"
    path.touch()
    with SessionDB(path) as db:
        db.create_session("s1", "cli")
        assert db.session_count() == 1


@pytest.fixture(scope="module")
def healthy_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, Any]:
    path = tmp_path_factory.mktemp("healthy") / "state.db"
    _build_store(path, messages=200)
    with SessionDB(path, read_only=True) as db:
        contents = _read_everything(db)
    return path.read_bytes(), contents


# (name, where to cut, what a reader gets): a cut that removes only the unused tail of the last
# page loses nothing and may be read; every other cut must be refused, never read as less data.
TRUNCATIONS: list[tuple[str, Callable[[int], int], str]] = [
    ("1-byte", lambda size: 1, "refused"),
    ("half-header", lambda size: 50, "refused"),
    ("header-only", lambda size: 100, "refused"),
    ("first-page", lambda size: 4096, "refused"),
    ("half", lambda size: size // 2, "refused"),
    ("all-but-last-page", lambda size: size - 4096, "refused"),
    ("unused-tail-of-last-page", lambda size: size - 1000, "intact"),
]


@pytest.mark.parametrize("read_only", [False, True], ids=["read-write", "read-only"])
@pytest.mark.parametrize(
    ("cut", "outcome"),
    [pytest.param(cut, outcome, id=name) for name, cut, outcome in TRUNCATIONS],
)
def test_a_truncated_database_is_refused_untouched(
    tmp_path: Path,
    healthy_store: tuple[bytes, Any],
    cut: Callable[[int], int],
    outcome: str,
    read_only: bool,
) -> None:
    healthy_bytes, healthy_contents = healthy_store
    path = tmp_path / "state.db"
    path.write_bytes(healthy_bytes[: cut(len(healthy_bytes))])
    with _unchanged(tmp_path, sidecars_of=path.name if read_only else None):
        try:
            with SessionDB(path, read_only=read_only) as db:
                contents = _read_everything(db)
        except StoreUnavailableError as exc:
            assert outcome == "refused", exc
            assert "not a usable SQLite database" in str(exc)
        else:
            assert outcome == "intact"
            assert contents == healthy_contents


# --- read-only files, directories and filesystems -------------------------------------------


@contextmanager
def _immutable(path: Path) -> Iterator[None]:
    made = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"chattr +i is not available here: {made.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


WRITES: list[tuple[str, Callable[[SessionDB], Any]]] = [
    ("create_session", lambda db: db.create_session("new", "cli")),
    ("append_message", lambda db: db.append_message("s1", "user", "more")),
    ("append_messages", lambda db: db.append_messages("s1", [{"role": "user", "content": "x"}])),
    ("set_session_title", lambda db: db.set_session_title("s1", "renamed")),
    ("end_session", lambda db: db.end_session("s1", "user_exit")),
    ("update_token_counts", lambda db: db.update_token_counts("s1", input_tokens=5)),
    ("clear_messages", lambda db: db.clear_messages("s1")),
    ("delete_session", lambda db: db.delete_session("s1")),
    ("prune_sessions", lambda db: db.prune_sessions(0)),
]


def test_an_immutable_database_file_reads_and_refuses_writes(
    make_store: Callable[[Path], None], tmp_path: Path
) -> None:
    path = tmp_path / "state.db"
    make_store(path)
    digest = file_digest(path)
    with _immutable(path), SessionDB(path) as db:
        expected = _read_everything(db)
        for name, write in WRITES:
            with pytest.raises(ReadOnlyStoreError, match="read-only"):
                write(db)
            assert _read_everything(db) == expected, name
    assert file_digest(path) == digest


@needs_wal()
def test_an_immutable_directory_is_refused_untouched(
    make_store: Callable[[Path], None], tmp_path: Path
) -> None:
    """A WAL database needs its -wal/-shm files next to it; in a locked directory it cannot
    be opened at all, and no new store can be created there."""
    directory = tmp_path / "locked"
    directory.mkdir()
    make_store(directory / "state.db")
    with _immutable(directory), _unchanged(directory):
        for read_only in (False, True):
            with pytest.raises(StoreUnavailableError, match="cannot open"):
                SessionDB(directory / "state.db", read_only=read_only)
        with pytest.raises(StoreUnavailableError, match="cannot open"):
            SessionDB(directory / "new.db")


@contextmanager
def _read_only_view(directory: Path, view: Path) -> Iterator[Path]:
    view.mkdir()
    bound = subprocess.run(["mount", "--bind", str(directory), str(view)], capture_output=True)
    if bound.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {bound.stderr.decode().strip()}")
    try:
        remount = ["mount", "-o", "remount,bind,ro", str(view)]
        if subprocess.run(remount, capture_output=True).returncode != 0:
            pytest.skip("cannot remount a bind mount read-only here")
        yield view
    finally:
        gc.collect()
        if subprocess.run(["umount", str(view)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(view)], check=False)


@needs_wal()
def test_a_read_only_filesystem_is_refused_untouched(
    make_store: Callable[[Path], None], tmp_path: Path
) -> None:
    directory = tmp_path / "data"
    directory.mkdir()
    make_store(directory / "state.db")
    with _read_only_view(directory, tmp_path / "view") as view, _unchanged(directory):
        for read_only in (False, True):
            with pytest.raises(StoreUnavailableError, match="cannot open"):
                SessionDB(view / "state.db", read_only=read_only)
        with pytest.raises(StoreUnavailableError, match="cannot open"):
            SessionDB(view / "new.db")


def test_read_only_mode_refuses_every_write_and_leaves_the_file_alone(
    make_store: Callable[[Path], None], tmp_path: Path
) -> None:
    path = tmp_path / "state.db"
    make_store(path)
    digest = file_digest(path)
    with SessionDB(path, read_only=True) as db:
        expected = _read_everything(db)
        for name, write in WRITES:
            with pytest.raises(ReadOnlyStoreError):
                write(db)
            assert _read_everything(db) == expected, name
    # The read-only connection may leave its -wal/-shm index behind; the database is untouched.
    assert file_digest(path) == digest


def test_read_only_mode_never_creates_a_missing_store(tmp_path: Path) -> None:
    with _unchanged(tmp_path), pytest.raises(StoreUnavailableError):
        SessionDB(tmp_path / "missing.db", read_only=True)


# --- a database locked by another program ---------------------------------------------------


@contextmanager
def _foreign_exclusive_lock(path: Path, journal_mode: str) -> Iterator[None]:
    """Another program (a plain connection) holds BEGIN EXCLUSIVE until released. It runs in
    this process, so it uses the stores' own SQLite library (tests/support/store_library.py)."""
    with closing(connect_like_the_store(path, isolation_level=None)) as conn:
        assert conn.execute(f"PRAGMA journal_mode = {journal_mode}").fetchone()[0] == journal_mode
        conn.execute("BEGIN EXCLUSIVE")
        try:
            yield
        finally:
            conn.execute("ROLLBACK")


@needs_wal()
@pytest.mark.parametrize(("name", "write"), WRITES, ids=[name for name, _ in WRITES])
def test_a_write_under_a_foreign_lock_fails_busy_within_the_budget(
    make_store: Callable[[Path], None], tmp_path: Path, name: str, write: Callable[[SessionDB], Any]
) -> None:
    path = tmp_path / "state.db"
    make_store(path)
    with SessionDB(path, retry=BUDGET, busy_timeout_s=BUSY_TIMEOUT_S) as db:
        expected = _read_everything(db)
        digest = file_digest(path)
        with _foreign_exclusive_lock(path, "wal"):
            began = time.monotonic()
            with pytest.raises(StoreBusyError, match="busy") as raised:
                write(db)
            waited = time.monotonic() - began
            # Under WAL, readers are not blocked by the writer.
            assert _read_everything(db) == expected
        assert raised.value.attempts > 1
        assert _used_the_budget(waited)
        assert file_digest(path) == digest
        # Never stuck: once the other program lets go, the same call goes through.
        write(db)
    assert sqlite_integrity_problems(path) == []


def test_a_store_locked_in_rollback_journal_mode_fails_busy_at_open(
    make_store: Callable[[Path], None], tmp_path: Path
) -> None:
    """In rollback-journal mode an EXCLUSIVE lock blocks readers too: opening says "busy"."""
    path = tmp_path / "state.db"
    make_store(path)
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("PRAGMA journal_mode = delete")
    digest = file_digest(path)
    with _foreign_exclusive_lock(path, "delete"):
        began = time.monotonic()
        with pytest.raises(StoreBusyError, match="busy"):
            SessionDB(path, retry=BUDGET, busy_timeout_s=BUSY_TIMEOUT_S)
        assert time.monotonic() - began < 5.0
        assert file_digest(path) == digest
    with SessionDB(path) as db:
        assert db.message_count("s1") == 40


def test_a_read_under_a_foreign_lock_in_rollback_journal_mode_fails_busy_within_the_budget(
    make_store: Callable[[Path], None],
    tmp_path: Path,
) -> None:
    """Where WAL is not in use (unsupported filesystem, or the file is kept in rollback mode), a
    foreign EXCLUSIVE lock blocks readers: a read is retried within the budget, then says busy."""
    path = tmp_path / "state.db"
    make_store(path)
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("PRAGMA journal_mode = delete")
    engine = create_store_engine(
        sqlite_url(path), busy_timeout_s=BUSY_TIMEOUT_S, set_journal_mode=False
    )
    with Store(engine, retry=BUDGET, owns_engine=True) as store:
        count = "SELECT COUNT(*) FROM messages"
        assert store.read(lambda conn: conn.exec_driver_sql(count).scalar()) == 40
        with _foreign_exclusive_lock(path, "delete"):
            began = time.monotonic()
            with pytest.raises(StoreBusyError, match="busy") as raised:
                store.read(lambda conn: conn.exec_driver_sql(count).scalar())
            waited = time.monotonic() - began
        assert raised.value.attempts > 1
        assert _used_the_budget(waited)
        assert store.read(lambda conn: conn.exec_driver_sql(count).scalar()) == 40
