
"""The engine, the dialect listeners and the Store unit of work, against real databases.

SPEC §4: WAL, foreign keys and a short busy timeout on every pooled connection; BEGIN IMMEDIATE
for writes and a deferred BEGIN for reads; a whole write transaction retried while the store is
busy, within a budget; a best-effort checkpoint every N writes and on close; thread safety; a
read-only mode that never writes. Rows are written with raw SQL through the Connection that
``Store.write`` hands out, so these tests depend on nothing above the Store.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Generic, TypeVar

import psycopg
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pg_faults import libpq_url
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError
from store_library import connect_like_the_store, needs_wal

from sessionstore.dialects import dialect_for_url
from sessionstore.dialects.postgresql import PostgreSQLDialect
from sessionstore.dialects.sqlite import SQLiteDialect, _enable_wal
from sessionstore.dialects.sqlite_library import library
from sessionstore.errors import (
    ReadOnlyStoreError,
    StoreBusyError,
    StoreFullError,
    StoreUnavailableError,
)
from sessionstore.schema import migrate
from sessionstore.storage.engine import create_store_engine
from sessionstore.storage.retry import RetryPolicy
from sessionstore.storage.store import Store

T = TypeVar("T")

INSERT_SESSION = sa.text(
    "INSERT INTO sessions (id, source, started_at) VALUES (:id, 'cli', :started_at)"
)
INSERT_MESSAGE = sa.text(
    "INSERT INTO messages (session_id, role, content, timestamp) "
    "VALUES (:session_id, 'user', :content, 1.0)"
)
# Well under any busy timeout: an operation that waited on a lock takes far longer than this.
UNBLOCKED_S = 0.5


# --- helpers -----------------------------------------------------------------------------------


def insert_session(session_id: str) -> Callable[[Connection], str]:
    def work(conn: Connection) -> str:
        conn.execute(INSERT_SESSION, {"id": session_id, "started_at": time.time()})
        return session_id

    return work


def session_ids(conn: Connection) -> list[str]:
    return list(conn.execute(sa.text("SELECT id FROM sessions ORDER BY id")).scalars())


def count_rows(store: Store, table: str) -> int:
    return int(
        store.read(lambda conn: conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one())
    )


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


def sqlite_path(url: str) -> Path:
    return Path(str(sa.make_url(url).database))


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Background(Generic[T]):
    """Runs ``target`` in a thread; ``result()`` joins and re-raises what the thread raised."""

    def __init__(self, target: Callable[[], T]) -> None:
        self._target = target
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._value = self._target()
        except BaseException as exc:  # handed back to the test thread by result()
            self._error = exc

    def result(self, timeout: float = 10.0) -> T | None:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "background work did not finish"
        if self._error is not None:
            raise self._error
        return self._value


class StatementLog:
    """Every SQL string the engine sends to the driver, BEGINs and PRAGMAs included."""

    def __init__(self, engine: Engine) -> None:
        self.statements: list[str] = []
        sa.event.listen(engine, "before_cursor_execute", self._record)

    def _record(self, _conn: Connection, _cursor: Any, statement: str, *_args: Any) -> None:
        self.statements.append(statement)

    def matching(self, fragment: str) -> list[str]:
        return [s for s in self.statements if fragment in s]


@pytest.fixture
def open_store() -> Iterator[Callable[..., Store]]:
    """``Store.open`` that closes every store it opened when the test ends."""
    opened: list[Store] = []

    def opener(url: str | URL, **kwargs: Any) -> Store:
        store = Store.open(url, **kwargs)
        opened.append(store)
        return store

    yield opener
    for store in opened:
        store.close()


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Path:
    """A migrated, empty SQLite store file."""
    path = tmp_path / "state.db"
    migrate.upgrade(f"sqlite:///{path}")
    return path


def url_of(path: Path) -> str:
    return f"sqlite:///{path}"


def raw_sqlite(path: Path, timeout: float = 0.0) -> sqlite3.Connection:
    """A connection outside the Store, with manual transactions (BEGIN is ours to send)."""
    return connect_like_the_store(
        path, timeout=timeout, isolation_level=None, check_same_thread=False
    )


_LOCK_HOLDER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
conn.execute("INSERT INTO sessions (id, source, started_at) VALUES ('holder', 'cli', 0)")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("COMMIT")
"""


@contextmanager
def write_lock_held_by_another_process(path: Path, hold_s: float) -> Iterator[None]:
    """Another process takes the write lock, holds it ``hold_s`` seconds, then commits."""
    holder = subprocess.Popen(
        [sys.executable, "-c", _LOCK_HOLDER, str(path), str(hold_s)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "locked"
        yield
    finally:
        assert holder.wait(timeout=30) == 0


# --- PRAGMAs and connection setup --------------------------------------------------------------


@pytest.mark.parametrize(
    ("busy_timeout_s", "expected_busy_ms"),
    [
        pytest.param(None, 1000, id="default-1s"),
        pytest.param(0.25, 250, id="250ms"),
        pytest.param(2.5, 2500, id="2.5s"),
    ],
)
@needs_wal()
def test_every_pooled_connection_has_wal_foreign_keys_and_the_busy_timeout(
    sqlite_db: Path, busy_timeout_s: float | None, expected_busy_ms: int
) -> None:
    kwargs: dict[str, Any] = {} if busy_timeout_s is None else {"busy_timeout_s": busy_timeout_s}
    engine = create_store_engine(url_of(sqlite_db), **kwargs)
    try:
        with ExitStack() as stack:
            # Several at once, so the pool has to open distinct driver connections.
            conns = [stack.enter_context(engine.connect()) for _ in range(4)]
            assert len({id(c.connection.driver_connection) for c in conns}) == 4
            for conn in conns:
                settings_seen = tuple(
                    conn.exec_driver_sql(f"PRAGMA {name}").scalar()
                    for name in ("journal_mode", "foreign_keys", "busy_timeout")
                )
                assert settings_seen == ("wal", 1, expected_busy_ms)
    finally:
        engine.dispose()


@needs_wal()
def test_a_new_file_is_switched_to_wal_on_disk(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "dirs" / "fresh.db"
    engine = create_store_engine(url_of(path))
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE t (x)")
    finally:
        engine.dispose()

    # The parent directories were created, and bytes 18-19 of the header are 2/2 in WAL mode.
    header = path.read_bytes()[:20]
    assert header[:16] == b"SQLite format 3\x00"
    assert (header[18], header[19]) == (2, 2)


@pytest.mark.parametrize("platform", ["linux", "darwin"])
def test_writing_connections_bound_the_wal_and_carry_the_macos_barriers(
    sqlite_db: Path, platform: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Newest Hermes's WAL companions: the ``-wal`` truncated back to 64 MiB after a checkpoint
    (SQLite's default keeps the largest transaction's size for ever); on macOS, where
    ``fsync()`` is no write barrier, ``F_FULLFSYNC`` at checkpoints and ``synchronous=FULL``."""
    monkeypatch.setattr(sys, "platform", platform)
    engine = create_store_engine(url_of(sqlite_db))
    try:
        with engine.connect() as conn:
            names = ("journal_size_limit", "checkpoint_fullfsync", "synchronous")
            seen = {name: conn.exec_driver_sql(f"PRAGMA {name}").scalar() for name in names}
    finally:
        engine.dispose()
    assert seen["journal_size_limit"] == 64 * 1024 * 1024
    assert seen["checkpoint_fullfsync"] == (1 if platform == "darwin" else 0)
    assert seen["synchronous"] == 2  # FULL: SQLite's default here, enforced on macOS


def test_read_only_connections_are_query_only_with_foreign_keys(
    sqlite_db: Path, open_store: Callable[..., Store]
) -> None:
    store = open_store(url_of(sqlite_db), read_only=True)
    with ExitStack() as stack:
        conns = [stack.enter_context(store.engine.connect()) for _ in range(3)]
        for conn in conns:
            assert conn.exec_driver_sql("PRAGMA query_only").scalar() == 1
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1


@pytest.mark.parametrize(
    ("busy_timeout_s", "expected_lock_timeout"),
    [pytest.param(None, "1s", id="default-1s"), pytest.param(0.25, "250ms", id="250ms")],
)
def test_every_pooled_postgresql_connection_has_the_lock_timeout(
    busy_timeout_s: float | None, expected_lock_timeout: str, migrated_pg_url: str
) -> None:
    kwargs: dict[str, Any] = {} if busy_timeout_s is None else {"busy_timeout_s": busy_timeout_s}
    engine = create_store_engine(migrated_pg_url, **kwargs)
    try:
        with ExitStack() as stack:
            conns = [stack.enter_context(engine.connect()) for _ in range(3)]
            for conn in conns:
                assert conn.exec_driver_sql("SHOW lock_timeout").scalar() == expected_lock_timeout
    finally:
        engine.dispose()


def test_a_message_for_an_unknown_session_violates_the_foreign_key(
    store_url: str, open_store: Callable[..., Store]
) -> None:
    store = open_store(store_url)

    def orphan_message(conn: Connection) -> None:
        conn.execute(INSERT_MESSAGE, {"session_id": "no-such-session", "content": "hello"})

    with pytest.raises(IntegrityError):
        store.write(orphan_message)
    assert count_rows(store, "messages") == 0


# --- WAL fallback ------------------------------------------------------------------------------


class FakeCursor:
    """Answers ``PRAGMA journal_mode = WAL`` with a scripted row or error (and a busy timeout
    of none: the switch is tried once)."""

    def __init__(self, row: tuple[str] | None = None, error: Exception | None = None) -> None:
        self.row = row
        self.error = error
        self.executed: list[str] = []
        self.last = ""

    def execute(self, sql: str) -> FakeCursor:
        self.last = sql
        if sql == "PRAGMA busy_timeout":
            return self
        self.executed.append(sql)
        if self.error is not None:
            raise self.error
        return self

    def fetchone(self) -> tuple[str] | tuple[int] | None:
        return (0,) if self.last == "PRAGMA busy_timeout" else self.row


@pytest.mark.parametrize(
    ("cursor", "label", "expected_warning"),
    [
        pytest.param(FakeCursor(("wal",)), "/data/state.db", None, id="wal-granted"),
        pytest.param(FakeCursor(("delete",)), "/nfs/state.db", "journal_mode=delete", id="refused"),
        pytest.param(FakeCursor(None), "/nfs/state.db", "journal_mode=unknown", id="no-row"),
        pytest.param(
            FakeCursor(error=sqlite3.OperationalError("disk I/O error")),
            "/nfs/state.db",
            "journal_mode=unchanged (disk I/O error)",
            id="error",
        ),
        pytest.param(
            FakeCursor(error=sqlite3.OperationalError("database is locked")),
            "/data/state.db",
            None,
            id="locked-by-a-writer",
        ),
        pytest.param(FakeCursor(("memory",)), ":memory:", None, id="in-memory"),
    ],
)
@needs_wal()
def test_enable_wal_warns_only_when_a_file_cannot_use_wal(
    cursor: FakeCursor,
    label: str,
    expected_warning: str | None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.DEBUG, logger="sessionstore.dialects.sqlite"):
        path = None if label == ":memory:" else Path(label)
        _enable_wal(cursor, label, path, "wal", existing=False)  # type: ignore[arg-type]

    assert cursor.executed == ["PRAGMA journal_mode = WAL"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    if expected_warning is None:
        assert warnings == []
    else:
        assert len(warnings) == 1
        assert "WAL is not available" in warnings[0]
        assert label in warnings[0]
        assert expected_warning in warnings[0]


@needs_wal()
def test_a_filesystem_without_shared_memory_falls_back_to_the_rollback_journal(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    open_store: Callable[..., Store],
) -> None:
    # The unix-dotfile VFS has no shared memory, like many network filesystems: WAL is refused.
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "netfs" / "state.db"
    url = f"sqlite:///file:{path}?vfs=unix-dotfile&uri=true"

    with caplog.at_level(logging.WARNING, logger="sessionstore.dialects.sqlite"):
        store = open_store(url)
        store.write(lambda conn: conn.exec_driver_sql("CREATE TABLE t (x)"))
        store.write(lambda conn: conn.exec_driver_sql("INSERT INTO t VALUES (1)"))
        seen = store.read(
            lambda conn: (
                conn.exec_driver_sql("SELECT count(*) FROM t").scalar(),
                conn.exec_driver_sql("PRAGMA journal_mode").scalar(),
            )
        )

    assert seen == (1, "delete")
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings, "the fallback must be logged"
    assert all("WAL is not available" in w and "journal_mode=delete" in w for w in warnings)
    assert path.exists()
    assert not Path(f"{path}-wal").exists()
    # The URI's path, not its literal text, locates the parent directory to create.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["netfs"]


@pytest.mark.parametrize(
    "url",
    [
        "sqlite://",
        "sqlite:///:memory:",
        "sqlite:///file:named_memory?mode=memory&cache=shared&uri=true",
        "sqlite:///file:private_memory?mode=memory&uri=true",
    ],
)
def test_an_in_memory_store_works_without_a_warning(
    url: str,
    caplog: pytest.LogCaptureFixture,
    open_store: Callable[..., Store],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # No WAL warning, no SQLAlchemy 2.1 warning about the pool class "mode=memory" selects,
    # and no side file or directory for a database that has no file.
    monkeypatch.chdir(tmp_path)
    with (
        caplog.at_level(logging.WARNING, logger="sessionstore.dialects.sqlite"),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("error")
        store = open_store(url)
        store.write(lambda conn: conn.exec_driver_sql("CREATE TABLE t (x)"))
        store.write(lambda conn: conn.exec_driver_sql("INSERT INTO t VALUES (42)"))
        value = store.read(lambda conn: conn.exec_driver_sql("SELECT x FROM t").scalar())

    assert value == 42
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert list(tmp_path.iterdir()) == []


# --- BEGIN modes -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "expected_begin"),
    [
        pytest.param(None, "BEGIN DEFERRED", id="default"),
        pytest.param("deferred", "BEGIN DEFERRED", id="deferred"),
        pytest.param("IMMEDIATE", "BEGIN IMMEDIATE", id="immediate"),
        pytest.param("Exclusive", "BEGIN EXCLUSIVE", id="exclusive"),
    ],
)
def test_the_sqlite_begin_option_chooses_the_begin_statement(
    sqlite_db: Path, option: str | None, expected_begin: str
) -> None:
    engine = create_store_engine(url_of(sqlite_db))
    executed: list[str] = []
    try:
        with engine.connect() as conn:
            # SQLite's own trace: what the library ran, however the statement reached it.
            conn.connection.driver_connection.set_trace_callback(executed.append)
            if option is not None:
                conn.execution_options(sqlite_begin=option)
            with conn.begin():
                conn.exec_driver_sql("SELECT 1")
            conn.connection.driver_connection.set_trace_callback(None)
    finally:
        engine.dispose()

    assert [s for s in executed if "BEGIN" in s] == [expected_begin]


def test_an_unknown_begin_mode_is_refused(sqlite_db: Path) -> None:
    engine = create_store_engine(url_of(sqlite_db))
    try:
        with engine.connect() as conn, pytest.raises(ValueError, match="BEGIN mode"):
            conn.execution_options(sqlite_begin="SHARED; DROP TABLE sessions").begin()
    finally:
        engine.dispose()


def test_store_write_holds_the_write_lock_from_begin(
    sqlite_db: Path, open_store: Callable[..., Store]
) -> None:
    store = open_store(url_of(sqlite_db))
    inside, release = threading.Event(), threading.Event()

    def idle_write(conn: Connection) -> None:
        # No statement at all: under a deferred BEGIN this transaction would hold no lock.
        inside.set()
        assert release.wait(10)

    writer = Background(lambda: store.write(idle_write))
    other = raw_sqlite(sqlite_db, timeout=0)
    try:
        assert inside.wait(10)
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            other.execute("BEGIN IMMEDIATE")
    finally:
        release.set()
        writer.result()
    other.execute("BEGIN IMMEDIATE")  # free again once the write has committed
    other.execute("ROLLBACK")
    other.close()


@needs_wal()
def test_store_read_takes_no_write_lock(sqlite_db: Path, open_store: Callable[..., Store]) -> None:
    store = open_store(url_of(sqlite_db))
    store.write(insert_session("existing"))
    inside, release = threading.Event(), threading.Event()

    def long_read(conn: Connection) -> list[str]:
        ids = session_ids(conn)  # the read transaction now really holds its snapshot
        inside.set()
        assert release.wait(10)
        return ids

    reader = Background(lambda: store.read(long_read))
    other = raw_sqlite(sqlite_db, timeout=0)
    try:
        assert inside.wait(10)
        other.execute("BEGIN IMMEDIATE")
        other.execute("INSERT INTO sessions (id, source, started_at) VALUES ('raw', 'cli', 0)")
        other.execute("COMMIT")
    finally:
        release.set()
        seen = reader.result()
        other.close()

    assert seen == ["existing"]
    assert store.read(session_ids) == ["existing", "raw"]


# --- readers and writers never block each other ------------------------------------------------


def skip_where_readers_hold_off_writers(store_url: str) -> None:
    """Skip on a SQLite store kept out of WAL (the stores' SQLite has the WAL-reset bug): in
    the rollback journal a reader holds off a writer's commit (docs/concurrency.md)."""
    if store_url.startswith("sqlite") and library().wal_reset_bug:
        pytest.skip("the stores' SQLite has the WAL-reset bug: no WAL, readers hold off writers")


def test_a_long_read_never_blocks_a_writer(
    store_url: str, open_store: Callable[..., Store]
) -> None:
    skip_where_readers_hold_off_writers(store_url)
    store = open_store(store_url)
    store.write(insert_session("before"))
    inside, written = threading.Event(), threading.Event()

    def long_read(conn: Connection) -> list[str]:
        session_ids(conn)
        inside.set()
        assert written.wait(10)
        return session_ids(conn)

    reader = Background(lambda: store.read(long_read))
    try:
        assert inside.wait(10)
        started = time.monotonic()
        store.write(insert_session("during"))
        elapsed = time.monotonic() - started
    finally:
        written.set()
        reader.result()

    assert elapsed < UNBLOCKED_S
    assert store.read(session_ids) == ["before", "during"]


def test_a_read_sees_one_snapshot_while_a_writer_commits(
    store_url: str, open_store: Callable[..., Store]
) -> None:
    skip_where_readers_hold_off_writers(store_url)
    store = open_store(store_url)
    store.write(insert_session("before"))
    inside, written = threading.Event(), threading.Event()

    def two_looks(conn: Connection) -> tuple[list[str], list[str]]:
        first = session_ids(conn)
        inside.set()
        assert written.wait(10)
        return first, session_ids(conn)

    reader = Background(lambda: store.read(two_looks))
    try:
        assert inside.wait(10)
        store.write(insert_session("during"))
    finally:
        written.set()
        looks = reader.result()

    assert looks == (["before"], ["before"])


def test_a_writer_never_blocks_a_reader(store_url: str, open_store: Callable[..., Store]) -> None:
    store = open_store(store_url)
    store.write(insert_session("committed"))
    inside, read_done = threading.Event(), threading.Event()

    def long_write(conn: Connection) -> None:
        insert_session("uncommitted")(conn)
        inside.set()
        assert read_done.wait(10)

    writer = Background(lambda: store.write(long_write))
    try:
        assert inside.wait(10)
        started = time.monotonic()
        seen = store.read(session_ids)
        elapsed = time.monotonic() - started
    finally:
        read_done.set()
        writer.result()

    assert elapsed < UNBLOCKED_S
    assert seen == ["committed"]
    assert store.read(session_ids) == ["committed", "uncommitted"]


# --- retry on a busy store ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "busy_timeout_s",
    [
        pytest.param(1.0, id="sqlite-busy-handler-waits"),
        pytest.param(0.05, id="jittered-retry-waits"),
    ],
)
def test_a_write_blocked_by_another_process_succeeds_once_the_lock_is_released(
    sqlite_db: Path,
    busy_timeout_s: float,
    open_store: Callable[..., Store],
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = open_store(url_of(sqlite_db), busy_timeout_s=busy_timeout_s)  # default RetryPolicy
    store.write(insert_session("s1"))
    calls = [0]

    def add_message(conn: Connection) -> str:
        calls[0] += 1
        conn.execute(INSERT_MESSAGE, {"session_id": "s1", "content": "exactly once"})
        return "done"

    with (
        caplog.at_level(logging.DEBUG, logger="sessionstore.storage.retry"),
        write_lock_held_by_another_process(sqlite_db, hold_s=0.5),
    ):
        started = time.monotonic()
        result = store.write(add_message)
        elapsed = time.monotonic() - started

    assert result == "done"
    assert elapsed > 0.2, "the write should have waited for the other process's lock"
    # BEGIN IMMEDIATE fails before the work starts, so the work itself ran once.
    assert calls[0] == 1
    assert count_rows(store, "messages") == 1
    assert store.read(session_ids) == ["holder", "s1"]
    retried = [r for r in caplog.records if r.name == "sessionstore.storage.retry"]
    if busy_timeout_s < 0.5:
        assert retried, "a 50 ms busy timeout cannot outlast a 0.5 s lock without a retry"


@pytest.mark.parametrize(
    ("open_kwargs", "write_kwargs", "max_elapsed_s"),
    [
        pytest.param(
            {"retry": RetryPolicy(budget_s=0.5), "busy_timeout_s": 0.1}, {}, 1.0, id="budget"
        ),
        pytest.param(
            {"busy_timeout_s": 0.1},
            {"retry": RetryPolicy(max_attempts=1)},
            0.6,
            id="attempts-per-call",
        ),
    ],
)
def test_a_write_fails_busy_when_the_lock_outlasts_the_budget(
    sqlite_db: Path,
    open_kwargs: dict[str, Any],
    write_kwargs: dict[str, Any],
    max_elapsed_s: float,
    open_store: Callable[..., Store],
) -> None:
    store = open_store(url_of(sqlite_db), **open_kwargs)
    calls = [0]

    def insert(conn: Connection) -> None:
        calls[0] += 1
        insert_session("never")(conn)

    holder = raw_sqlite(sqlite_db)
    holder.execute("BEGIN IMMEDIATE")
    try:
        started = time.monotonic()
        with pytest.raises(StoreBusyError) as raised:
            store.write(insert, **write_kwargs)
        elapsed = time.monotonic() - started
    finally:
        holder.execute("COMMIT")
        holder.close()

    error = raised.value
    assert "busy" in str(error)
    assert f"{error.waited_s:.2f}s" in str(error)
    assert error.waited_s <= elapsed
    assert elapsed < max_elapsed_s
    assert isinstance(error.last_error, OperationalError)
    assert "locked" in str(error.last_error)
    assert calls[0] == 0
    assert store.read(session_ids) == []


def _retryable_error_for(url: str) -> OperationalError:
    driver_error: Exception = (
        sqlite3.OperationalError("database is locked")
        if is_sqlite(url)
        else psycopg.errors.SerializationFailure("could not serialize access")
    )
    return OperationalError("INSERT ...", None, driver_error)


def test_a_retry_repeats_the_whole_transaction_and_keeps_none_of_the_failed_one(
    store_url: str, open_store: Callable[..., Store]
) -> None:
    store = open_store(store_url)
    calls = [0]

    def flaky(conn: Connection) -> int:
        calls[0] += 1
        # Same primary key every time: a leftover from attempt 1 would make attempt 2 fail.
        insert_session("only-once")(conn)
        conn.execute(INSERT_MESSAGE, {"session_id": "only-once", "content": f"try {calls[0]}"})
        if calls[0] == 1:
            raise _retryable_error_for(store_url)
        return calls[0]

    assert store.write(flaky) == 2
    assert store.read(session_ids) == ["only-once"]
    contents = store.read(
        lambda conn: list(conn.execute(sa.text("SELECT content FROM messages")).scalars())
    )
    assert contents == ["try 2"]


def test_a_non_retryable_error_in_a_write_propagates_at_once(
    store_url: str, open_store: Callable[..., Store]
) -> None:
    store = open_store(store_url)
    store.write(insert_session("dup"))
    calls = [0]

    def duplicate(conn: Connection) -> None:
        calls[0] += 1
        insert_session("dup")(conn)

    with pytest.raises(IntegrityError):
        store.write(duplicate)
    assert calls[0] == 1


# --- retryable classification and error translation -------------------------------------------


def _wrapped(driver_error: Exception) -> DBAPIError:
    return DBAPIError("SELECT 1", None, driver_error)


@pytest.mark.parametrize(
    ("exc", "retryable"),
    [
        pytest.param(_wrapped(sqlite3.OperationalError("database is locked")), True, id="locked"),
        pytest.param(sqlite3.OperationalError("database table is locked"), True, id="table"),
        pytest.param(sqlite3.OperationalError("database is busy"), True, id="busy-unwrapped"),
        pytest.param(_wrapped(sqlite3.OperationalError("no such table: x")), False, id="sql"),
        pytest.param(
            _wrapped(sqlite3.IntegrityError("UNIQUE constraint failed")), False, id="unique"
        ),
        pytest.param(ValueError("database is locked"), False, id="not-a-driver-error"),
        pytest.param(psycopg.errors.LockNotAvailable("locked"), False, id="other-dialect"),
    ],
)
def test_sqlite_retries_only_lock_errors(exc: BaseException, retryable: bool) -> None:
    assert SQLiteDialect().is_retryable(exc) is retryable


def test_a_real_sqlite_lock_error_is_retryable_and_not_translated(sqlite_db: Path) -> None:
    engine = create_store_engine(url_of(sqlite_db), busy_timeout_s=0.01)
    holder = raw_sqlite(sqlite_db)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with engine.connect() as conn, pytest.raises(OperationalError) as raised:
            conn.execution_options(sqlite_begin="IMMEDIATE").begin()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        engine.dispose()

    dialect = dialect_for_url(url_of(sqlite_db))
    assert dialect.is_retryable(raised.value)
    assert dialect.translate_error(raised.value) is None


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        pytest.param(
            sqlite3.OperationalError("database or disk is full"), StoreFullError, id="full"
        ),
        pytest.param(
            sqlite3.OperationalError("attempt to write a readonly database"),
            ReadOnlyStoreError,
            id="readonly",
        ),
        pytest.param(
            sqlite3.DatabaseError("file is not a database"), StoreUnavailableError, id="garbage"
        ),
        pytest.param(
            sqlite3.DatabaseError("database disk image is malformed"),
            StoreUnavailableError,
            id="malformed",
        ),
        pytest.param(
            sqlite3.OperationalError("unable to open database file"),
            StoreUnavailableError,
            id="cannot-open",
        ),
        pytest.param(sqlite3.OperationalError("database is locked"), None, id="locked"),
        pytest.param(sqlite3.IntegrityError("FOREIGN KEY constraint failed"), None, id="fk"),
        pytest.param(ValueError("disk is full"), None, id="not-a-driver-error"),
    ],
)
def test_sqlite_translates_known_failures(exc: Exception, expected: type[Exception] | None) -> None:
    dialect = SQLiteDialect()
    for candidate in (exc, _wrapped(exc)):
        translated = dialect.translate_error(candidate)
        if expected is None:
            assert translated is None
        else:
            assert isinstance(translated, expected)


def test_a_file_that_is_not_a_database_is_refused_untouched(
    tmp_path: Path, open_store: Callable[..., Store]
) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(b"these are my notes, not a database\n" * 200)
    before = file_digest(path)

    # Opening a writable store connects at once (to switch it to WAL): it is refused there.
    with pytest.raises(StoreUnavailableError, match="not a usable SQLite database"):
        open_store(url_of(path))
    store = open_store(url_of(path), read_only=True)
    with pytest.raises(StoreUnavailableError, match="not a usable SQLite database"):
        store.read(lambda conn: conn.exec_driver_sql("SELECT count(*) FROM sqlite_master").scalar())

    assert file_digest(path) == before


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        pytest.param(psycopg.errors.DiskFull("no space"), StoreFullError, id="53100"),
        pytest.param(
            psycopg.errors.ReadOnlySqlTransaction("read-only"), ReadOnlyStoreError, id="25006"
        ),
        pytest.param(psycopg.errors.ConnectionFailure("gone"), StoreUnavailableError, id="08006"),
        pytest.param(psycopg.errors.UniqueViolation("dup"), None, id="23505"),
        pytest.param(psycopg.errors.LockNotAvailable("locked"), None, id="55P03"),
        pytest.param(ValueError("disk full"), None, id="not-a-driver-error"),
    ],
)
def test_postgresql_translates_known_failures(
    exc: Exception, expected: type[Exception] | None
) -> None:
    dialect = PostgreSQLDialect()
    for candidate in (exc, _wrapped(exc)):
        translated = dialect.translate_error(candidate)
        if expected is None:
            assert translated is None
        else:
            assert isinstance(translated, expected)


# --- PostgreSQL: real lock, serialization and deadlock errors ----------------------------------


@pytest.fixture
def pg_seeded(pg_store_url: str) -> Iterator[str]:
    """The migrated PostgreSQL database emptied, with sessions 'a' and 'b'."""
    engine = sa.create_engine(pg_store_url)
    with engine.begin() as conn:
        for session_id in ("a", "b"):
            conn.execute(INSERT_SESSION, {"id": session_id, "started_at": 0.0})
    engine.dispose()
    yield pg_store_url


LOCK_ROW = sa.text("SELECT id FROM sessions WHERE id = :id FOR UPDATE")


def _provoke_lock_not_available(url: str) -> DBAPIError:
    # Our engine's lock_timeout (here 100 ms) turns the wait into 55P03.
    engine = create_store_engine(url, busy_timeout_s=0.1)
    try:
        with engine.connect() as holder, engine.connect() as waiter:
            holder.begin()
            holder.execute(LOCK_ROW, {"id": "a"})
            waiter.begin()
            # A backstop so a missing lock_timeout fails this test (57014) instead of hanging it.
            waiter.exec_driver_sql("SET LOCAL statement_timeout = '5s'")
            with pytest.raises(DBAPIError) as raised:
                waiter.execute(LOCK_ROW, {"id": "a"})
            return raised.value
    finally:
        engine.dispose()


def _provoke_serialization_failure(url: str) -> DBAPIError:
    engine = create_store_engine(url)
    try:
        with engine.connect() as first, engine.connect() as second:
            first.execution_options(isolation_level="REPEATABLE READ").begin()
            first.execute(sa.text("SELECT title FROM sessions WHERE id = 'a'")).all()
            with second.begin():
                second.execute(sa.text("UPDATE sessions SET title = 'x' WHERE id = 'a'"))
            with pytest.raises(DBAPIError) as raised:
                first.execute(sa.text("UPDATE sessions SET title = 'y' WHERE id = 'a'"))
            return raised.value
    finally:
        engine.dispose()


def _provoke_deadlock(url: str) -> DBAPIError:
    # No lock_timeout here, so the server's deadlock detector is what ends the wait.
    engine = sa.create_engine(url)
    try:
        with engine.connect() as left, engine.connect() as right:
            for conn, first_row in ((left, "a"), (right, "b")):
                conn.begin()
                conn.exec_driver_sql("SET LOCAL deadlock_timeout = '50ms'")
                conn.execute(LOCK_ROW, {"id": first_row})

            def cross_left() -> None:
                try:
                    left.execute(LOCK_ROW, {"id": "b"})
                except DBAPIError:
                    left.rollback()  # a victim keeps its locks until it rolls back
                    raise

            crossing = Background(cross_left)
            time.sleep(0.1)  # let the left transaction start waiting on row b
            errors: list[DBAPIError] = []
            try:
                right.execute(LOCK_ROW, {"id": "a"})
            except DBAPIError as exc:
                errors.append(exc)
                right.rollback()
            try:
                crossing.result()
            except DBAPIError as exc:
                errors.append(exc)
            assert len(errors) == 1, "exactly one side of a deadlock is chosen as the victim"
            return errors[0]
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    ("provoke", "sqlstate"),
    [
        pytest.param(_provoke_lock_not_available, "55P03", id="lock-timeout"),
        pytest.param(_provoke_serialization_failure, "40001", id="serialization"),
        pytest.param(_provoke_deadlock, "40P01", id="deadlock"),
    ],
)
def test_postgresql_retries_real_lock_serialization_and_deadlock_errors(
    pg_seeded: str, provoke: Callable[[str], DBAPIError], sqlstate: str
) -> None:
    error = provoke(pg_seeded)

    assert getattr(error.orig, "sqlstate", None) == sqlstate
    dialect = dialect_for_url(pg_seeded)
    assert dialect.is_retryable(error)
    assert dialect.is_retryable(error.orig)  # type: ignore[arg-type]
    assert dialect.translate_error(error) is None


def test_postgresql_does_not_retry_a_constraint_violation(pg_seeded: str) -> None:
    engine = create_store_engine(pg_seeded)
    try:
        with engine.connect() as conn, pytest.raises(IntegrityError) as raised:
            conn.execute(INSERT_SESSION, {"id": "a", "started_at": 0.0})
    finally:
        engine.dispose()

    assert not dialect_for_url(pg_seeded).is_retryable(raised.value)


def test_a_postgresql_write_is_retried_until_a_row_lock_is_released(
    pg_seeded: str, open_store: Callable[..., Store]
) -> None:
    # lock_timeout 50 ms: the blocked UPDATE fails with 55P03 and the whole write is retried.
    store = open_store(pg_seeded, busy_timeout_s=0.05)
    calls = [0]

    def bump(conn: Connection) -> int:
        calls[0] += 1
        conn.execute(
            sa.text("UPDATE sessions SET message_count = message_count + 1 WHERE id = 'a'")
        )
        return calls[0]

    holder_engine = sa.create_engine(pg_seeded)
    try:
        with holder_engine.connect() as holder:
            holder.begin()
            holder.execute(LOCK_ROW, {"id": "a"})
            releaser = threading.Timer(0.5, holder.commit)
            releaser.start()
            try:
                attempts = store.write(bump)
            finally:
                releaser.join()
    finally:
        holder_engine.dispose()

    assert attempts is not None and attempts >= 2
    # Every failed attempt rolled back: the increment landed exactly once.
    count = store.read(
        lambda conn: conn.execute(
            sa.text("SELECT message_count FROM sessions WHERE id = 'a'")
        ).scalar_one()
    )
    assert count == 1


# --- a PostgreSQL store's connections -----------------------------------------------------------

# Which backend runs the door's transaction, at which isolation level, and whether that
# transaction is new: a mark set for the rest of the transaction is not there yet (a
# transaction left open by the other door would still hold the mark that door set). A
# connection moved from one door to the other carries neither the other's level nor its
# transaction.
THE_DOORS_TRANSACTION = sa.text(
    "SELECT pg_backend_pid(), current_setting('transaction_isolation'), "
    "coalesce(current_setting('sessionstore_test.door', true), '') = '', "
    "set_config('sessionstore_test.door', 'taken', true) IS NOT NULL"
)


def _connections_made(engine: Engine) -> list[int]:
    made: list[int] = []
    sa.event.listen(engine, "connect", lambda dbapi, _record: made.append(dbapi.info.backend_pid))
    return made


def test_a_postgresql_store_that_reads_then_writes_then_reads_holds_one_backend(
    pg_store_url: str, open_store: Callable[..., Store]
) -> None:
    # The reader kept idle between reads is lent to the write, instead of the write
    # connecting a second backend (a fork of the server and its caches, and a slot of the
    # server's connections, for every store that reads and writes); a write that fails and
    # rolls back gives it back all the same.
    store = open_store(pg_store_url)
    made = _connections_made(store.engine)
    seen: list[tuple[str, int, str, bool]] = []

    def look(door: str) -> Callable[[Connection], None]:
        def work(conn: Connection) -> None:
            pid, level, fresh, _ = conn.execute(THE_DOORS_TRANSACTION).one()
            seen.append((door, pid, level, fresh))
            if door == "failing write":
                raise LookupError("rolled back")

        return work

    for _ in range(3):
        store.read(look("read"))
        store.write(look("write"))
    store.read(look("read"))
    with pytest.raises(LookupError):
        store.write(look("failing write"))
    store.read(look("read"))

    assert len(made) == 1, seen
    assert {pid for _, pid, _, _ in seen} == set(made)
    assert {(door, level) for door, _, level, _ in seen} == {
        ("read", "repeatable read"),
        ("write", "read committed"),
        ("failing write", "read committed"),
    }
    assert all(fresh for *_, fresh in seen), seen
    with psycopg.connect(libpq_url(pg_store_url), autocommit=True) as admin:
        state = admin.execute(
            "SELECT state FROM pg_stat_activity WHERE pid = %s", (made[0],)
        ).fetchone()
    assert state == ("idle",)  # between calls: no transaction left open


def test_options_a_postgresql_read_set_on_its_connection_reach_no_later_call(
    pg_store_url: str, open_store: Callable[..., Store]
) -> None:
    # yield_per on a read's connection (the doctor's walks, the listing) makes psycopg send
    # its statements through a server-side cursor. Kept idle, that connection sent every
    # later read's SELECT as DECLARE CURSOR, and a write that borrowed it failed on its DDL
    # ("syntax error at or near CREATE"). It goes back to the pool instead.
    store = open_store(pg_store_url)
    cursors: list[str] = []
    sa.event.listen(
        store.engine, "before_cursor_execute",
        lambda _conn, cursor, *_args: cursors.append(type(cursor).__name__),
    )
    streamed = store.read(
        lambda conn: list(conn.execution_options(yield_per=10).execute(sa.text("SELECT 1")))
    )
    store.write(lambda conn: conn.exec_driver_sql("CREATE TEMPORARY TABLE t (x int)"))
    store.read(lambda conn: conn.exec_driver_sql("SELECT 2").scalar_one())

    assert streamed == [(1,)]
    assert cursors == ["ServerCursor", "Cursor", "Cursor"]


def test_a_postgresql_write_never_takes_the_connection_of_a_read_under_way(
    pg_store_url: str, open_store: Callable[..., Store]
) -> None:
    # Only idle readers are handed to a write: a read running meanwhile keeps its connection
    # and its snapshot, and the two run side by side.
    store = open_store(pg_store_url)
    store.read(session_ids)  # one reader kept idle
    inside, written = threading.Event(), threading.Event()

    def long_read(conn: Connection) -> tuple[int, list[str]]:
        pid = int(conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one())
        inside.set()
        assert written.wait(10)
        return pid, session_ids(conn)

    reader = Background(lambda: store.read(long_read))
    try:
        assert inside.wait(10)
        writer_pid = store.write(
            lambda conn: (insert_session("during")(conn),
                          int(conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()))[1]
        )
    finally:
        written.set()
    looked = reader.result()

    assert looked is not None
    reader_pid, seen = looked
    assert writer_pid != reader_pid
    assert seen == []  # its snapshot predates the write
    assert store.read(session_ids) == ["during"]


# --- checkpoints -------------------------------------------------------------------------------


@needs_wal()
def test_a_passive_checkpoint_runs_every_n_writes(
    sqlite_db: Path, open_store: Callable[..., Store]
) -> None:
    store = open_store(url_of(sqlite_db), checkpoint_every=5)
    log = StatementLog(store.engine)
    store.read(session_ids)  # the first connection has switched the file to WAL
    main_file_before = file_digest(sqlite_db)

    for number in range(4):
        store.write(insert_session(f"s{number}"))
        store.read(session_ids)  # reads do not count towards the checkpoint
    assert log.matching("wal_checkpoint") == []
    # In WAL mode commits only append to the -wal file; only a checkpoint touches the main file.
    assert file_digest(sqlite_db) == main_file_before

    store.write(insert_session("s4"))
    assert log.matching("wal_checkpoint") == ["PRAGMA wal_checkpoint(PASSIVE)"]
    assert file_digest(sqlite_db) != main_file_before

    for number in range(5, 10):
        store.write(insert_session(f"s{number}"))
    assert len(log.matching("wal_checkpoint")) == 2


def test_a_failed_write_does_not_count_towards_the_checkpoint(
    sqlite_db: Path, open_store: Callable[..., Store]
) -> None:
    store = open_store(url_of(sqlite_db), checkpoint_every=2)
    log = StatementLog(store.engine)
    store.write(insert_session("a"))
    with pytest.raises(IntegrityError):
        store.write(insert_session("a"))
    assert log.matching("wal_checkpoint") == []

    store.write(insert_session("b"))
    assert len(log.matching("wal_checkpoint")) == 1


def test_a_failing_checkpoint_never_fails_a_write_or_close(
    sqlite_db: Path, open_store: Callable[..., Store]
) -> None:
    store = open_store(url_of(sqlite_db), checkpoint_every=1)
    attempted: list[str] = []

    def refuse_checkpoints(_conn: Connection, _cursor: Any, statement: str, *_: Any) -> None:
        if "wal_checkpoint" in statement:
            attempted.append(statement)
            raise RuntimeError("simulated I/O error during checkpoint")

    sa.event.listen(store.engine, "before_cursor_execute", refuse_checkpoints)

    assert store.write(insert_session("kept")) == "kept"
    assert attempted, "the checkpoint must actually have been tried"
    assert store.read(session_ids) == ["kept"]
    store.close()
    assert len(attempted) == 2


def test_checkpoint_on_an_unusable_file_is_swallowed(tmp_path: Path) -> None:
    path = tmp_path / "garbage.db"
    path.write_bytes(b"\xff" * 4096)
    engine = sa.create_engine(url_of(path))
    try:
        SQLiteDialect().checkpoint(engine)  # must not raise
    finally:
        engine.dispose()


def test_close_checkpoints_once_and_a_read_only_store_never_does(sqlite_db: Path) -> None:
    writer = Store.open(url_of(sqlite_db))
    writer_log = StatementLog(writer.engine)
    writer.write(insert_session("a"))
    writer.close()
    writer.close()
    assert writer_log.matching("wal_checkpoint") == ["PRAGMA wal_checkpoint(PASSIVE)"]

    reader = Store.open(url_of(sqlite_db), read_only=True)
    reader_log = StatementLog(reader.engine)
    assert reader.read(session_ids) == ["a"]
    reader.close()
    assert reader_log.matching("wal_checkpoint") == []


# --- read-only mode ----------------------------------------------------------------------------


def test_a_read_only_store_refuses_write(store_url: str, open_store: Callable[..., Store]) -> None:
    store = open_store(store_url, read_only=True)
    calls = [0]

    def insert(conn: Connection) -> None:
        calls[0] += 1
        insert_session("never")(conn)

    with pytest.raises(ReadOnlyStoreError):
        store.write(insert)
    assert calls[0] == 0
    assert store.read(session_ids) == []


def test_raw_sql_through_a_read_only_store_is_refused_by_the_database(
    store_url: str, open_store: Callable[..., Store]
) -> None:
    store = open_store(store_url, read_only=True)

    with pytest.raises(ReadOnlyStoreError) as raised:
        store.read(insert_session("sneaky"))

    cause = raised.value.__cause__
    assert isinstance(cause, DBAPIError)
    if is_sqlite(store_url):
        assert isinstance(cause.orig, sqlite3.OperationalError)
        assert "readonly" in str(cause.orig)
    else:
        assert getattr(cause.orig, "sqlstate", None) == "25006"
    assert store.read(session_ids) == []


@pytest.mark.parametrize(
    "relative",
    [pytest.param("missing.db", id="missing-file"), pytest.param("no/such/dir/x.db", id="dir")],
)
def test_read_only_open_of_a_missing_file_fails_clearly_and_creates_nothing(
    tmp_path: Path, relative: str
) -> None:
    path = tmp_path / relative

    with pytest.raises(StoreUnavailableError, match="cannot open"):
        store = Store.open(url_of(path), read_only=True)
        try:
            store.read(lambda conn: conn.exec_driver_sql("SELECT 1").scalar())
        finally:
            store.close()

    assert list(tmp_path.iterdir()) == []


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    directory=st.text(
        alphabet=st.characters(
            blacklist_categories=["Cs"], blacklist_characters="\x00/", max_codepoint=0x2FFF
        ),
        min_size=1,
        max_size=12,
    ).filter(lambda name: name not in (".", ".."))
    | st.sampled_from(["a#b", "what?mode=rw", "100%", "%41", "sp ace", "file:x", "x&vfs=unix"])
)
def test_read_only_mode_holds_for_any_directory_name(directory: str) -> None:
    """Characters that mean something in a SQLite URI ("?", "#", "%") must not escape mode=ro."""
    with tempfile.TemporaryDirectory() as root:
        folder = Path(root) / directory
        folder.mkdir()
        path = folder / "state.db"
        seed = sqlite3.connect(path)
        seed.execute("CREATE TABLE t (x)")
        seed.execute("INSERT INTO t VALUES (7)")
        seed.commit()
        seed.close()
        before = sorted(str(p) for p in Path(root).rglob("*"))

        store = Store.open(URL.create("sqlite", database=str(path)), read_only=True)
        try:
            assert store.read(lambda c: c.exec_driver_sql("SELECT x FROM t").scalar()) == 7
            with pytest.raises(ReadOnlyStoreError):
                store.read(lambda c: c.exec_driver_sql("INSERT INTO t VALUES (8)"))
        finally:
            store.close()

        assert sorted(str(p) for p in Path(root).rglob("*")) == before
        assert os.listdir(root) == [directory]


# --- threads -----------------------------------------------------------------------------------


def test_many_threads_writing_at_once_lose_no_row(
    store_url: str, open_store: Callable[..., Store]
) -> None:
    threads, writes_each = 8, 50
    store = open_store(store_url)
    start = threading.Barrier(threads)

    def worker(number: int) -> None:
        start.wait(10)
        for index in range(writes_each):
            store.write(insert_session(f"t{number}-{index:02d}"))

    workers = [Background(functools.partial(worker, n)) for n in range(threads)]
    for background in workers:
        background.result(timeout=60)

    ids = store.read(session_ids)
    assert len(ids) == threads * writes_each
    assert len(set(ids)) == threads * writes_each
