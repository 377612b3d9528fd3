"""Many openers, one file: every acknowledged write is visible to every opener and survives.

The openers: one to three ``SessionDB`` objects per process, two to four processes, some of them
raw ``sqlite3`` programs writing with Hermes's statements and closing the file again and again
(the ``sqlite3`` shell, Hermes itself), threads, and every way of forking a process that has a
store open. After each round, each opener must see every write any opener had acknowledged,
the file must hold them after everyone closed, and SQLite's integrity check and the FTS
integrity checks must pass (``doctor.diagnose``).

The failure these guard against is silent: before the fix, a second connection in one process
dropped SQLite's file locks (Python opened and closed the file), and a forked child never took
real locks; another process closing then deleted a live WAL, and commits vanished.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import prefork
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openerlib import IMPORTS as OPENER_IMPORTS
from openerlib import PROGRAM
from prefork import ForkServer
from store_library import connect_like_the_store, needs_wal
from typer.testing import CliRunner

from sessionstore import cli
from sessionstore.api.session_db import SessionDB
from sessionstore.dialects import database_file
from sessionstore.dialects.sqlite import SQLITE_HEADER
from sessionstore.errors import StoreUnavailableError
from sessionstore.ops import doctor
from sessionstore.schema import migrate
from sessionstore.storage.backups import backup_database
from sessionstore.storage.config import sqlite_url
from sessionstore.storage.store import Store

# Slow: each test starts other processes (forks, shells, interpreters) on one store
# (the full run only).
pytestmark = pytest.mark.slow

SESSION = "shared"

needs_fork = pytest.mark.skipif(
    "fork" not in multiprocessing.get_all_start_methods(), reason="needs the fork start method"
)


_PROGRAMS: ForkServer | None = None


@pytest.fixture(autouse=True, scope="module")
def _programs() -> Iterator[None]:
    """The other processes (``openerlib``'s programs) are forked from one that imported
    ``sessionstore`` once (``prefork``), not each a new interpreter that imports it again: each
    is still a process of its own, with its own SQLite, file locks and connections."""
    global _PROGRAMS
    if not prefork.available():
        yield
        return
    with ForkServer(OPENER_IMPORTS) as server:
        _PROGRAMS = server
        try:
            yield
        finally:
            _PROGRAMS = None


def _program(*args: object) -> list[str]:
    return [sys.executable, PROGRAM, *map(str, args)]


def _start(*args: object) -> subprocess.Popen[str] | prefork.Forked:
    if _PROGRAMS is not None:
        return _PROGRAMS.start("openerlib:main", [str(arg) for arg in args],
                               stdout=prefork.PIPE, stderr=prefork.PIPE)  # fmt: skip
    return subprocess.Popen(
        _program(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _output(*args: object) -> str:
    """What a program printed; it must succeed."""
    process = _start(*args)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    return str(out)


def _acks(process: subprocess.Popen[str] | prefork.Forked) -> set[str]:
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    return set(out.split())


def _contents(db: SessionDB) -> set[str]:
    return {message["content"] for message in db.get_messages(SESSION)}


def _assert_everyone_sees(
    url: str, path: Path | None, acked: set[str], openers: list[Any], *, new_process: bool = True
) -> None:
    """Every acknowledged write, seen by each open opener, new openers elsewhere, the file."""
    for number, db in enumerate(openers):
        missing = acked - _contents(db)
        assert not missing, f"opener {number} misses {len(missing)} of {len(acked)} acked writes"
    if new_process or path is None:
        views = json.loads(_output("read", url, 2))
        for view in views:
            missing = acked - set(view)
            assert not missing, f"another process misses {len(missing)} of {len(acked)} writes"
    if path is not None:
        raw = set(json.loads(_output("raw", path)))
        assert not acked - raw, f"{len(acked - raw)} acked writes missing from the file"
    with Store.open(url) as store:
        report = doctor.diagnose(store)
    assert report.healthy, [f"{c.name}: {c.detail}" for c in report.problems]


def _new_store(path: Path) -> str:
    url = sqlite_url(path)
    with SessionDB(url=url) as db:
        db.create_session(SESSION, "cli")
    return url


# --- the matrix -------------------------------------------------------------------------------


@pytest.mark.parametrize("processes", [2, 3, 4])
@pytest.mark.parametrize("openers", [1, 2, 3])
def test_many_openers_in_many_processes_lose_nothing(
    tmp_path: Path, openers: int, processes: int
) -> None:
    path = tmp_path / "state.db"
    url = _new_store(path)
    dbs = [SessionDB(url=url) for _ in range(openers)]
    acked: set[str] = set()
    try:
        for round_number in range(2):
            tag = f"r{round_number}"
            others = []
            for number in range(1, processes):
                if number % 2:  # a foreign program that opens, writes and closes, 3 times
                    others.append(_start("foreign", path, SESSION, f"{tag}f{number}", 3, 5))
                else:  # another sessionstore process with as many openers as this one
                    others.append(
                        _start("sessionstore", url, SESSION, f"{tag}s{number}", openers, 10)
                    )
            lock = threading.Lock()
            errors: list[BaseException] = []

            def write(
                index: int,
                tag: str = tag,
                lock: threading.Lock = lock,
                acked: set[str] = acked,
                errors: list[BaseException] = errors,
            ) -> None:
                try:
                    for number in range(20):
                        text = f"{tag}m{index}-{number}"
                        dbs[index].append_message(SESSION, "user", text)
                        with lock:
                            acked.add(text)
                        if number % 5 == 0:
                            _contents(dbs[index])
                except BaseException as exc:  # reported below, with the rest
                    errors.append(exc)

            threads = [threading.Thread(target=write, args=(i,)) for i in range(openers)]
            for thread in threads:
                thread.start()
            for process in others:
                acked |= _acks(process)
            for thread in threads:
                thread.join()
            assert not errors, errors
            # The other processes' openers are checked at the end, in a new process.
            _assert_everyone_sees(url, path, acked, dbs, new_process=False)
    finally:
        for db in dbs:
            db.close()
    _assert_everyone_sees(url, path, acked, [])


def test_the_sqlite3_shell_inserting_and_quitting_again_and_again(tmp_path: Path) -> None:
    """The "done when" scenario: two SessionDB objects in one process, the shell in and out."""
    path = tmp_path / "state.db"
    url = _new_store(path)
    first, second = SessionDB(url=url), SessionDB(url=url)
    acked: set[str] = set()
    try:
        for visit in range(8):
            for number, db in enumerate((first, second)):
                for n in range(4):
                    text = f"v{visit}db{number}-{n}"
                    db.append_message(SESSION, "assistant", text)
                    acked.add(text)
            acked |= set(_output("foreign", path, SESSION, f"shell{visit}", 1, 3).split())
            assert not acked - _contents(first)
            assert not acked - _contents(second)
    finally:
        first.close()
        second.close()
    _assert_everyone_sees(url, path, acked, [])


# --- fork ---------------------------------------------------------------------------------


def _write_acks(db: SessionDB, tag: str, count: int, log: Path) -> None:
    with log.open("a") as out:
        for number in range(count):
            text = f"{tag}-{number}"
            db.append_message(SESSION, "user", text)
            out.write(text + "\n")
            out.flush()


def _read_acks(logs: Path) -> set[str]:
    return {line for log in logs.glob("*.acks") for line in log.read_text().split()}


@contextmanager
def _in_child(body: Callable[[], None]) -> Iterator[int]:
    """Fork; the child runs ``body`` and exits 0, or 1 with the error on stderr."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 0
        try:
            body()
        except BaseException as exc:
            print(f"child failed: {exc!r}", file=sys.stderr, flush=True)
            code = 1
        os._exit(code)
    yield pid


def _wait_ok(pid: int) -> None:
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "a forked child failed (see stderr)"


def _fork_store_url(store_url: str, tmp_path: Path) -> tuple[str, Path | None]:
    with SessionDB(url=store_url) as db:
        if db.get_session(SESSION) is None:
            db.create_session(SESSION, "cli")
    path = database_file(store_url)
    return store_url, path


def _signal(flag: Path, text: str = "1") -> None:
    # Written aside and renamed: a reader polling for the name never sees it half written.
    partial = flag.with_name(flag.name + ".partial")
    partial.write_text(text)
    os.replace(partial, flag)


def _await(flag: Path, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not flag.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{flag.name} never came")
        time.sleep(0.005)


# In every pattern the dangerous moment is forced: a process lets go of its last connection
# while another (forked) one goes on writing. Without the child taking real locks, the one
# letting go believes it is the last user, checkpoints and deletes the live WAL.


@needs_fork
def test_a_child_opening_its_own_store_after_fork(store_url: str, tmp_path: Path) -> None:
    url, path = _fork_store_url(store_url, tmp_path)
    parent = SessionDB(url=url)
    _write_acks(parent, "before", 10, tmp_path / "parent.acks")

    def child() -> None:
        with SessionDB(url=url) as own:
            _write_acks(own, "child", 10, tmp_path / "child.acks")
            _signal(tmp_path / "child-wrote")
            _await(tmp_path / "parent-closed")
            _write_acks(own, "child-after", 20, tmp_path / "child.acks")
            assert {f"parent-{n}" for n in range(20)} <= _contents(own)

    with _in_child(child) as pid:
        _write_acks(parent, "parent", 20, tmp_path / "parent.acks")
        _await(tmp_path / "child-wrote")
        parent.close()
        _signal(tmp_path / "parent-closed")
    _wait_ok(pid)
    acked = _read_acks(tmp_path)
    assert len(acked) == 60
    _assert_everyone_sees(url, path, acked, [])


@needs_fork
def test_pre_fork_workers_whose_parent_closes(store_url: str, tmp_path: Path) -> None:
    url, path = _fork_store_url(store_url, tmp_path)
    inherited = SessionDB(url=url)
    _write_acks(inherited, "parent", 10, tmp_path / "parent.acks")
    pids = []
    for worker in range(3):
        def body(worker: int = worker) -> None:
            log = tmp_path / f"worker{worker}.acks"
            _write_acks(inherited, f"worker{worker}", 10, log)
            _signal(tmp_path / f"worker{worker}-wrote")
            _await(tmp_path / "parent-closed")
            _write_acks(inherited, f"worker{worker}-after", 20, log)
            inherited.close()

        with _in_child(body) as pid:
            pids.append(pid)
    for worker in range(3):
        _await(tmp_path / f"worker{worker}-wrote")
    inherited.close()  # the parent lets go while its workers write
    _signal(tmp_path / "parent-closed")
    for pid in pids:
        _wait_ok(pid)
    acked = _read_acks(tmp_path)
    assert len(acked) == 100
    _assert_everyone_sees(url, path, acked, [])


@needs_fork
def test_a_daemon_that_keeps_using_the_inherited_store(store_url: str, tmp_path: Path) -> None:
    url, path = _fork_store_url(store_url, tmp_path)
    db = SessionDB(url=url)
    _write_acks(db, "parent", 10, tmp_path / "parent.acks")
    done = tmp_path / "daemon.done"

    def detach() -> None:
        # The classic double fork: the daemon is a grandchild, its parent exits at once.
        os.setsid()
        if os.fork() == 0:
            code = 0
            try:
                _write_acks(db, "daemon", 10, tmp_path / "daemon.acks")
                _signal(tmp_path / "daemon-wrote")
                _await(tmp_path / "parent-closed")
                _write_acks(db, "daemon-after", 30, tmp_path / "daemon.acks")
                seen = _contents(db)  # the parent's writes are visible to the daemon
                assert {f"parent-after-{n}" for n in range(20)} <= seen
            except BaseException as exc:
                print(f"daemon failed: {exc!r}", file=sys.stderr, flush=True)
                code = 1
            _signal(done, str(code))
            os._exit(code)

    with _in_child(detach) as pid:
        _write_acks(db, "parent-after", 20, tmp_path / "parent.acks")
    _wait_ok(pid)
    _await(tmp_path / "daemon-wrote")
    assert {f"daemon-{n}" for n in range(10)} <= _contents(db)
    db.close()
    _signal(tmp_path / "parent-closed")
    _await(done)
    assert done.read_text() == "0", "the daemon failed (see stderr)"
    acked = _read_acks(tmp_path)
    assert len(acked) == 70
    _assert_everyone_sees(url, path, acked, [])


_POOL_DB: SessionDB | None = None


def _pool_task(tag: str) -> list[str]:
    assert _POOL_DB is not None
    written = []
    for number in range(10):
        text = f"{tag}-{number}"
        _POOL_DB.append_message(SESSION, "tool", text)
        written.append(text)
    return written


@needs_fork
def test_a_multiprocessing_fork_pool_writing(store_url: str, tmp_path: Path) -> None:
    global _POOL_DB
    url, path = _fork_store_url(store_url, tmp_path)
    _POOL_DB = SessionDB(url=url)
    acked: set[str] = set()
    try:
        _write_acks(_POOL_DB, "parent", 10, tmp_path / "parent.acks")
        with multiprocessing.get_context("fork").Pool(3) as pool:
            during = pool.map_async(_pool_task, [f"task{n}" for n in range(6)])
            _write_acks(_POOL_DB, "parent-during", 20, tmp_path / "parent.acks")
            acked |= {text for batch in during.get(timeout=120) for text in batch}
            assert acked <= _contents(_POOL_DB)
            _POOL_DB.close()  # the parent lets go; its workers go on writing
            after = pool.map(_pool_task, [f"after{n}" for n in range(6)])
            acked |= {text for batch in after for text in batch}
    finally:
        _POOL_DB.close()
        _POOL_DB = None
    acked |= _read_acks(tmp_path)
    assert len(acked) == 150
    _assert_everyone_sees(url, path, acked, [])


# --- WAL at open ------------------------------------------------------------------------------


@needs_wal()
@pytest.mark.parametrize("opener", ["SessionDB", "Store.open"])
def test_a_fresh_store_is_in_wal_mode_right_after_open(tmp_path: Path, opener: str) -> None:
    path = tmp_path / "state.db"
    if opener == "SessionDB":
        handle: Any = SessionDB(path)
    else:
        handle = Store.open(sqlite_url(path))
    try:
        other = connect_like_the_store(path)
        try:
            assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        finally:
            other.close()
    finally:
        handle.close()


@needs_wal()
def test_an_existing_rollback_journal_store_is_switched_at_open(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    url = _new_store(path)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.close()
    with SessionDB(url=url):
        other = connect_like_the_store(path)
        try:
            assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        finally:
            other.close()


def test_read_only_open_leaves_the_journal_mode_alone(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    url = _new_store(path)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.close()
    with SessionDB(url=url, read_only=True):
        pass
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    finally:
        conn.close()


# --- backups while another process appends ----------------------------------------------------


class _Appender:
    """A foreign program appending until stopped; ``acked`` grows as its COMMITs return.

    It never checkpoints, so its commits stay in the WAL, and it writes at an agent's pace (a
    message every 20 ms): flat out, it grew the WAL by 150 MB a second and, on a loaded CI
    machine where the command under test took 40 s to win the write lock from it, to 19 GB.
    """

    def __init__(self, path: Path) -> None:
        self.process = _start(
            "foreign", path, SESSION, "bg", 1, 1_000_000, "keep-wal", "pace=0.02"
        )
        self.acked: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.acked.append(line.strip())

    def wait_for(self, count: int) -> None:
        deadline = time.monotonic() + 30
        while len(self.acked) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(self.acked) >= count

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)
        self._reader.join(timeout=10)


def _backup_contents(backup: Path) -> set[str]:
    conn = sqlite3.connect(f"{backup.resolve().as_uri()}?mode=ro", uri=True)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        conn.execute("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'bg'").fetchone()
        return {row[0] for row in conn.execute("SELECT content FROM messages")}
    finally:
        conn.close()


@pytest.mark.parametrize("verb", ["db upgrade", "doctor --fix"])
def test_a_backup_taken_while_another_process_appends(tmp_path: Path, verb: str) -> None:
    path = tmp_path / "state.db"
    url = _new_store(path)
    with SessionDB(url=url) as db:
        for number in range(200):
            db.append_message(SESSION, "user", f"seed-{number} " + "text " * 50)
    if verb == "db upgrade":
        migrate.downgrade(url, "0007")
        args = ["db", "upgrade", "--json"]
    else:
        with SessionDB(url=url) as db:  # a fixable finding, away from the appender's session
            db.create_session("other", "cli")
            db.append_message("other", "user", "a message")
        with Store.open(url) as store:
            store.write(lambda conn: conn.exec_driver_sql(
                "UPDATE sessions SET tool_call_count = 99 WHERE id = 'other'"))
        args = ["db", "doctor", "--fix", "--json"]
    appender = _Appender(path)
    try:
        appender.wait_for(50)
        before = set(appender.acked)
        result = CliRunner().invoke(cli.app, ["--url", url, *args])
        appender.wait_for(len(before) + 20)  # it kept appending while the backup was taken
    finally:
        appender.stop()
    # doctor's own verdict under a concurrent writer is not this test's business: its backup is.
    assert result.exit_code == 0 or verb != "db upgrade", result.output
    backup = Path(json.loads(result.output)["backup"])
    contents = _backup_contents(backup)
    assert {f"seed-{n} " + "text " * 50 for n in range(200)} <= contents
    assert before <= contents, f"{len(before - contents)} acked writes missing from the backup"
    _assert_everyone_sees(url, path, set(appender.acked), [])


# --- nothing but SQLite opens the store's files -------------------------------------------------


def test_no_python_code_opens_closes_or_unlinks_the_stores_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The audit of deliver item 1, as a test: every path that touches a store from Python
    (opening, writing, search, doctor and its repair, backups, upgrades, the CLI's checks,
    export) while other openers hold SQLite connections, with Python's file functions watched."""
    import builtins
    import io
    import shutil

    path = tmp_path / "state.db"
    url = _new_store(path)
    store_files = {str(path) + suffix for suffix in ("", "-wal", "-shm", "-journal")}
    touched: list[str] = []

    def watch(module: Any, name: str) -> None:
        real = getattr(module, name)

        def watched(target: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(target, str | os.PathLike) and os.path.abspath(target) in store_files:
                touched.append(f"{name}({target})")
            return real(target, *args, **kwargs)

        monkeypatch.setattr(module, name, watched)

    for module, name in [
        (builtins, "open"), (io, "open"), (os, "open"), (os, "truncate"), (os, "unlink"),
        (os, "remove"), (os, "replace"), (os, "rename"), (shutil, "copyfile"),
        (shutil, "copy"), (shutil, "copy2"),
    ]:
        watch(module, name)
    holder = SessionDB(url=url)  # holds SQLite connections (and locks) throughout
    holder.append_message(SESSION, "user", "held open")
    second = SessionDB(url=url)
    second.append_message(SESSION, "user", "migrate database")
    assert second.search_messages("migrate")
    with Store.open(url) as store:
        doctor.repair(store, doctor.diagnose(store))
    backup_database(url)
    runner = CliRunner()
    for args in (
        ["db", "doctor", "--fix"], ["db", "current"], ["sessions", "list"], ["stats"],
        ["search", "migrate"], ["export", "-o", str(tmp_path / "all.jsonl")],
        ["db", "downgrade", "0007", "--yes"], ["db", "upgrade"],
    ):
        result = runner.invoke(cli.app, ["--url", url, *args])
        assert result.exit_code == 0, (args, result.output)
    for args in (["export", "-o", str(path)], ["import", str(path) + "-wal"]):
        result = runner.invoke(cli.app, ["--url", url, *args])
        assert result.exit_code != 0 and "store's own file" in result.output, result.output
    second.append_message(SESSION, "user", "after everything")
    second.close()
    holder.close()
    assert not touched, touched
    monkeypatch.undo()
    _assert_everyone_sees(url, path, {"held open", "migrate database", "after everything"}, [])


FOREIGN_CONTENTS = st.one_of(
    st.binary(min_size=1, max_size=600),
    st.binary(min_size=0, max_size=600).map(lambda tail: SQLITE_HEADER + tail),
)


def test_any_non_empty_foreign_file_is_refused_untouched_even_with_a_store_open(
    tmp_path: Path,
) -> None:
    """A store already open in this process (holding SQLite locks on its own file) while
    foreign files are refused: no foreign file is written, and the open store keeps its locks."""
    own = tmp_path / "state.db"
    url = _new_store(own)
    with SessionDB(url=url) as db:
        db.append_message(SESSION, "user", "kept")

        @settings(max_examples=40, deadline=None)
        @given(contents=FOREIGN_CONTENTS)
        def refused(contents: bytes) -> None:
            foreign = tmp_path / f"foreign-{os.urandom(6).hex()}.db"
            foreign.write_bytes(contents)
            for read_only in (False, True):
                with pytest.raises(StoreUnavailableError, match="not a usable SQLite database"):
                    SessionDB(foreign, read_only=read_only)
                assert foreign.read_bytes() == contents
            assert not list(tmp_path.glob(f"{foreign.name}?*"))  # no -wal, -shm, -writelock
            foreign.unlink()

        refused()
        db.append_message(SESSION, "user", "still kept")
        assert {"kept", "still kept"} <= _contents(db)
    _assert_everyone_sees(url, own, {"kept", "still kept"}, [], new_process=False)
