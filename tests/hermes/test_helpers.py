"""The module helpers of Hermes's ``hermes_state`` that its gateway, CLI and tools import
beside ``SessionDB``: our drop-in module has each, with Hermes's names and results."""

from __future__ import annotations

import asyncio
import inspect
import json
import sqlite3
import threading
from contextlib import closing
from pathlib import Path
from typing import Any, ClassVar

import pytest
from sqlalchemy.exc import DBAPIError
from store_library import connect_like_the_store

from sessionstore import SessionStoreError
from sessionstore.dialects.sqlite_library import has_wal_reset_bug, library
from sessionstore.hermes import state as hermes_state


@pytest.fixture
def store_file(tmp_path: Path) -> Path:
    path = tmp_path / "state.db"
    db = hermes_state.SessionDB(db_path=path)
    db.create_session("s", "cli")
    db.append_messages("s", [{"role": "user", "content": f"hello world {n} 数据库"}
                             for n in range(300)])  # fmt: skip
    db.close()
    return path


def _holds_everything(path: Path) -> None:
    db = hermes_state.SessionDB(db_path=path)
    try:
        assert db.message_count("s") == 300
        assert len(db.search_messages("hello", limit=500)) == 300
        assert len(db.search_messages("数据库", limit=500)) == 300
        db.append_message("s", "user", "after the repair")
        assert db.search_messages("after the repair")
    finally:
        db.close()


# -- AsyncSessionDB --------------------------------------------------------------------------


def test_async_session_db_runs_each_call_in_a_thread(store_file: Path) -> None:
    db = hermes_state.SessionDB(db_path=store_file)
    db.calling_thread = lambda: threading.get_ident()  # type: ignore[attr-defined]

    # Hermes's name, and ours (sessionstore.AsyncSessionDB is the pooled class, not this one).
    assert hermes_state.AsyncSessionDB is hermes_state.ThreadedSessionDB

    async def main() -> None:
        wrapped = hermes_state.AsyncSessionDB(db)
        assert wrapped.db_path == db.db_path  # not a method: as it is
        await wrapped.create_session("t", "telegram")
        assert (await wrapped.get_session("t"))["source"] == "telegram"
        assert await wrapped.message_count("s") == 300
        assert await wrapped.calling_thread() != threading.get_ident()
        with pytest.raises(ValueError):
            await wrapped.set_session_title("t", "x" * 500)

    try:
        asyncio.run(main())
    finally:
        db.close()


def test_a_cancelled_call_has_ended_when_it_returns(store_file: Path) -> None:
    """A cancelled call returns once the call in its thread has ended (Hermes's returns at
    once, and its write lands later): the write is there, not on its way."""
    db = hermes_state.SessionDB(db_path=store_file)
    entered, gate = threading.Event(), threading.Event()

    def slow_append() -> int:
        entered.set()
        gate.wait(30)
        return db.append_message("s", "user", "slow")

    db.slow_append = slow_append  # type: ignore[attr-defined]

    async def main() -> None:
        task = asyncio.create_task(hermes_state.AsyncSessionDB(db).slow_append())
        await asyncio.to_thread(entered.wait, 30)
        task.cancel()
        asyncio.get_running_loop().call_later(0.05, gate.set)
        with pytest.raises(asyncio.CancelledError):
            await task
        assert db.message_count("s") == 301

    try:
        asyncio.run(main())
    finally:
        gate.set()
        db.close()


# -- the last failed open ----------------------------------------------------------------------


def test_a_failed_open_is_recorded_for_the_slash_commands(tmp_path: Path) -> None:
    hermes_state._set_last_init_error(None)
    assert hermes_state.get_last_init_error() is None
    assert hermes_state.format_session_db_unavailable() == "Session database not available."
    not_a_database = tmp_path / "state.db"
    not_a_database.write_bytes(b"these are not the pages of a database " * 100)
    with pytest.raises(SessionStoreError):
        hermes_state.SessionDB(db_path=not_a_database)
    cause = hermes_state.get_last_init_error()
    assert cause is not None and "Error" in cause.split(":")[0]
    message = hermes_state.format_session_db_unavailable("No history")
    assert message.startswith("No history: ") and message.endswith(".") and cause in message
    # iot 0.22.2's CLI banner asks for the cause by keyword (a TypeError failed its error path).
    assert hermes_state.format_session_db_unavailable("No history", details=True) == message
    assert hermes_state.format_session_db_unavailable(details=False).endswith(f"{cause}.")
    hermes_state.SessionDB(db_path=tmp_path / "fine.db").close()
    assert hermes_state.get_last_init_error() == cause, "a success does not clear it"
    hermes_state._set_last_init_error("OperationalError: locking protocol")
    assert "NFS/SMB/FUSE" in hermes_state.format_session_db_unavailable()
    hermes_state._set_last_init_error(None)


# -- is_malformed_db_error ---------------------------------------------------------------------


def _wrapped(inner: BaseException) -> BaseException:
    try:
        try:
            raise inner
        except BaseException as exc:
            raise SessionStoreError("the store failed") from exc
    except SessionStoreError as outer:
        return outer


@pytest.mark.parametrize(
    ("error", "malformed"),
    [
        (sqlite3.DatabaseError("database disk image is malformed"), True),
        (sqlite3.DatabaseError("malformed database schema (x) - index x already exists"), True),
        (sqlite3.OperationalError("database is locked"), False),
        (sqlite3.DatabaseError("file is not a database"), False),
        (ValueError("database disk image is malformed"), False),
        (DBAPIError("SELECT 1", None, sqlite3.DatabaseError("database disk image is malformed")),
         True),
        (_wrapped(sqlite3.DatabaseError("database disk image is malformed")), True),
        (_wrapped(sqlite3.OperationalError("database is locked")), False),
    ],
)
def test_is_malformed_db_error(error: BaseException, malformed: bool) -> None:
    assert hermes_state.is_malformed_db_error(error) is malformed


# -- apply_wal_with_fallback -------------------------------------------------------------------


def _no_wal_connection(base: type[sqlite3.Connection]) -> type[sqlite3.Connection]:
    """A connection class of ``base``'s library on a file system where asking for WAL fails
    as NFS makes it fail."""

    class NoWalConnection(base):  # type: ignore[valid-type,misc]
        error = "locking protocol"

        def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
            if sql.replace(" ", "").upper() == "PRAGMAJOURNAL_MODE=WAL":
                raise sqlite3.OperationalError(self.error)
            return super().execute(sql, *args)  # type: ignore[no-any-return]

    return NoWalConnection


@pytest.mark.skipif(library().wal_reset_bug, reason="the library in use gates WAL (below)")
def test_apply_wal_with_fallback(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # The stores' library, which has the WAL-reset fix (the next test covers one without).
    no_wal = _no_wal_connection(library().module.Connection)
    conn = connect_like_the_store(tmp_path / "kanban.db")
    assert hermes_state.apply_wal_with_fallback(conn) == "wal"
    assert hermes_state.apply_wal_with_fallback(conn) == "wal"  # already: left alone
    conn.close()
    for attempt in range(2):
        nfs = connect_like_the_store(tmp_path / f"nfs{attempt}.db", factory=no_wal)
        assert hermes_state.apply_wal_with_fallback(nfs, db_label="nfs.db") == "delete"
        assert nfs.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        nfs.close()
    assert sum("WAL is not supported" in r.getMessage() for r in caplog.records) == 1
    other = connect_like_the_store(tmp_path / "other.db", factory=no_wal)
    other.error = "disk is full"  # type: ignore[attr-defined]
    with pytest.raises(sqlite3.OperationalError, match="disk is full"):
        hermes_state.apply_wal_with_fallback(other)
    other.close()


def test_is_sqlite_wal_reset_vulnerable_names_the_affected_versions() -> None:
    check = hermes_state.is_sqlite_wal_reset_vulnerable
    assert [check(v) for v in ((3, 6, 23), (3, 7, 0), (3, 40, 1), (3, 44, 6), (3, 50, 4),
                               (3, 50, 7), (3, 51, 2), (3, 51, 3), (3, 53, 4))] == [
        False, True, True, False, True, False, True, False, False]  # fmt: skip
    assert check() == has_wal_reset_bug(sqlite3.sqlite_version_info)  # the standard library's


@pytest.mark.skipif(
    not has_wal_reset_bug(sqlite3.sqlite_version_info),
    reason="needs a standard library whose SQLite has the WAL-reset bug",
)
def test_apply_wal_with_fallback_never_turns_wal_on_with_the_wal_reset_bug(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Hermes's kanban board and other files, opened with the standard library's vulnerable
    SQLite (as Hermes opens them): a new file stays out of WAL, a WAL file keeps it; one
    warning per label. (No store of this process has these files open.)"""
    fresh = sqlite3.connect(tmp_path / "kanban.db")
    assert hermes_state.apply_wal_with_fallback(fresh, db_label="kanban.db") == "delete"
    assert fresh.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    fresh.close()
    already = sqlite3.connect(tmp_path / "wal.db")
    already.execute("PRAGMA journal_mode=WAL")
    for _ in range(2):
        assert hermes_state.apply_wal_with_fallback(already, db_label="wal.db") == "wal"
    assert already.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    already.close()
    warnings = [r.getMessage() for r in caplog.records if "WAL-reset bug" in r.getMessage()]
    assert len(warnings) == 2 and sqlite3.sqlite_version in warnings[0]


@pytest.mark.skipif(
    not has_wal_reset_bug(sqlite3.sqlite_version_info),
    reason="needs a standard library whose SQLite has the WAL-reset bug",
)
def test_the_wal_reset_gate_touches_a_file_whose_mode_it_cannot_read(tmp_path: Path) -> None:
    """A mode probe that fails (another opener holds the file) is not "not WAL": the file is
    left untouched and reported as WAL, as iot 0.22.2 does (switching it to DELETE under a
    live WAL writer loses that writer's uncheckpointed commits)."""

    class ProbeFails(sqlite3.Connection):
        executed: ClassVar[list[str]] = []

        def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
            self.executed.append(sql)
            if sql.strip() == "PRAGMA journal_mode":
                raise sqlite3.OperationalError("database is locked")
            return super().execute(sql, *args)

    conn = sqlite3.connect(tmp_path / "held.db", factory=ProbeFails)
    try:
        assert hermes_state.apply_wal_with_fallback(conn, db_label="held.db") == "wal"
        assert not [sql for sql in ProbeFails.executed if "journal_mode=" in sql.replace(" ", "")]
    finally:
        conn.close()


# -- repair_state_db_schema --------------------------------------------------------------------


def test_a_healthy_file_needs_nothing(store_file: Path) -> None:
    report = hermes_state.repair_state_db_schema(store_file)
    assert report == {"repaired": True, "strategy": "already_healthy", "backup_path": None,
                      "error": None}
    assert sorted(p.name for p in store_file.parent.iterdir()) == ["state.db"]


def test_a_missing_file_is_reported(tmp_path: Path) -> None:
    report = hermes_state.repair_state_db_schema(tmp_path / "nope.db")
    assert report["repaired"] is False and "does not exist" in report["error"]


def test_a_damaged_full_text_index_is_rebuilt_from_the_rows(store_file: Path) -> None:
    # Closed before the repair opens the file: two libraries never hold it at once.
    with closing(sqlite3.connect(store_file)) as conn, conn:
        conn.execute("UPDATE messages_fts_data SET block = zeroblob(length(block)) WHERE id > 10")
    report = hermes_state.repair_state_db_schema(store_file)
    assert (report["repaired"], report["strategy"]) == (True, "rebuild_fts")
    backup = Path(report["backup_path"])
    assert backup.name.startswith("state.db.malformed-backup-")
    with closing(sqlite3.connect(backup)) as conn:  # the damaged file, as it was
        assert conn.execute("SELECT count(*) FROM messages").fetchone() == (300,)
    _holds_everything(store_file)


def test_a_duplicated_schema_entry_is_removed(store_file: Path) -> None:
    with closing(sqlite3.connect(store_file)) as conn, conn:
        conn.execute("PRAGMA writable_schema=ON")
        row = conn.execute("SELECT * FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL "
                           "LIMIT 1").fetchone()
        conn.execute("INSERT INTO sqlite_master VALUES (?, ?, ?, ?, ?)", row)
    with closing(sqlite3.connect(store_file)) as conn, pytest.raises(
        sqlite3.DatabaseError, match="malformed"
    ):
        conn.execute("SELECT count(*) FROM sessions")
    report = hermes_state.repair_state_db_schema(store_file, backup=False)
    assert (report["repaired"], report["strategy"], report["backup_path"]) == (
        True, "dedup_schema", None
    )
    _holds_everything(store_file)


def test_an_unparseable_search_object_is_dropped_and_built_again(store_file: Path) -> None:
    with closing(sqlite3.connect(store_file)) as conn, conn:
        conn.execute("PRAGMA writable_schema=ON")
        conn.execute("UPDATE sqlite_master SET sql = 'CREATE TABLE messages_fts_config(' "
                     "WHERE name = 'messages_fts_config'")
    report = hermes_state.repair_state_db_schema(store_file)
    assert (report["repaired"], report["strategy"]) == (True, "drop_fts_rebuild"), report
    _holds_everything(store_file)


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ({"git_repo_root": "/w/app", "cwd": "/w/app/src"}, "/w/app"),
        ({"git_repo_root": "  ", "cwd": " /w/app/src "}, "/w/app/src"),
        ({"git_repo_root": None, "cwd": None}, None),
        ({}, None),
    ],
)
def test_workspace_key_is_the_repository_root_else_the_cwd(
    row: dict[str, Any], expected: str | None
) -> None:
    assert hermes_state.workspace_key(row) == expected


# -- Hermes 0.18/0.19's private helpers its own tests import -----------------------------------
def _bare_sessions(rows: list[tuple[str, str | None, str | None]]) -> sqlite3.Connection:
    """Hermes's test shape: a bare in-memory connection with the three columns the walk reads
    (no file, so no second library on a store's file)."""
    conn = sqlite3.connect(":memory:")
    conn.row_factory = sqlite3.Row
    conn.execute("CREATE TABLE sessions (id TEXT PRIMARY KEY, parent_session_id TEXT, "
                 "model_config TEXT)")  # fmt: skip
    conn.execute("CREATE TABLE messages (session_id TEXT)")
    conn.executemany("INSERT INTO sessions VALUES (?, ?, ?)", rows)
    return conn


def _delegate_of(parent: str) -> str:
    return json.dumps({"_delegate_from": parent})


def test_the_delegate_walk_never_collects_a_parent() -> None:
    conn = _bare_sessions([
        ("P", None, _delegate_of("C")),  # a cycle: P is also C's delegate
        ("C", "P", _delegate_of("P")),
        ("G", None, _delegate_of("C")),  # C's own delegate, by marker only
        ("U", "P", None),  # an untagged child stays (orphaned, never deleted)
        ("B", "P", '{"_branched_from": "P"}'),
        ("J", "P", "{not json"),  # unreadable config: no marker, no failure
        ("Q", None, _delegate_of("%")),  # a LIKE wildcard in a marker matches nothing else
    ])  # fmt: skip
    assert sorted(hermes_state._collect_delegate_child_ids(conn, ["P"])) == ["C", "G"]
    assert sorted(hermes_state._collect_delegate_child_ids(conn, ["P", "C"])) == ["G"]
    assert hermes_state._collect_delegate_child_ids(conn, ["", "nobody"]) == []
    assert hermes_state._collect_delegate_child_ids(conn, ["%"]) == ["Q"]


def test_the_delegate_cascade_deletes_children_and_keeps_the_parent(tmp_path: Path) -> None:
    db = hermes_state.SessionDB(db_path=tmp_path / "state.db")
    try:
        db.create_session("P", "cli")
        db.create_session("C", "cli", parent_session_id="P", model_config={"_delegate_from": "P"})
        db.create_session("G", "cli", parent_session_id="C", model_config={"_delegate_from": "C"})
        db.create_session("B", "cli", parent_session_id="P")
        for sid in ("P", "C", "G", "B"):
            db.append_message(sid, "user", f"message of {sid}")
        deleted = db._execute_write(
            lambda conn: hermes_state._delete_delegate_children(conn, ["P"])
        )
        assert sorted(deleted) == ["C", "G"]
        assert db.get_session("C") is None and db.get_session("G") is None
        assert db.get_session("P") is not None and db.get_session("B")["parent_session_id"] == "P"
        assert [m["content"] for m in db.get_messages("P")] == ["message of P"]
        assert db.get_messages("C") == [] and db.get_messages("G") == []
    finally:
        db.close()


def test_the_review_harness_filter_is_the_replays() -> None:
    prompt = {"role": "user", "content": "  Review the conversation above and update the skill "
                                         "library with anything useful."}  # fmt: skip
    reply = {"role": "assistant", "content": "acting as the curator"}
    ask = {"role": "user", "content": "book a flight"}
    assert hermes_state._is_background_review_harness_message(prompt)
    assert not hermes_state._is_background_review_harness_message({**prompt, "role": "assistant"})
    for odd in (None, "text", 42, ["list"], {"role": "user", "content": None}):
        assert not hermes_state._is_background_review_harness_message(odd)
    assert hermes_state._strip_background_review_harness([prompt, reply, ask]) == [ask]
    assert hermes_state._strip_background_review_harness([]) == []
    # entries that are not message dicts pass through, in order
    assert hermes_state._strip_background_review_harness(["x", prompt, reply, None]) == ["x", None]
    assert hermes_state._REVIEW_HARNESS_PREFIXES[0].startswith("Review the conversation above")


def test_the_stale_marker_filter_is_the_replays(tmp_path: Path) -> None:
    calls = [{"id": "c1", "type": "function", "function": {"name": "memory", "arguments": "{}"}}]
    stale = {"role": "assistant", "content": " [memory] ", "tool_calls": calls}
    assert hermes_state._is_stale_tool_call_marker_message(stale)
    for kept in ({**stale, "tool_calls": []}, {**stale, "role": "user"},
                 {**stale, "content": "[memory] saved"}, {**stale, "content": None}, None, 7):
        assert not hermes_state._is_stale_tool_call_marker_message(kept)
    history = [{"role": "user", "content": "hi"}, dict(stale)]
    assert hermes_state._strip_stale_tool_call_markers(history) is history
    assert history[1] == {**stale, "content": ""}
    # the replay applies the same rule to a stored turn
    db = hermes_state.SessionDB(db_path=tmp_path / "state.db")
    try:
        db.create_session("s", "cli")
        db.append_message("s", "assistant", "[memory]", tool_calls=calls)
        db.append_message("s", "tool", "saved", tool_call_id="c1")
        replay = db.get_messages_as_conversation("s")
        assert replay[0]["content"] == "" and replay[0]["tool_calls"][0]["id"] == "c1"
    finally:
        db.close()


IOT_CALLERS_PRIVATE_METHODS = (
    "_conn", "_lock", "_execute_write", "_decode_content", "_is_compression_child_row",
    "_resolve_title_conflict", "_read_one", "_db_needs_fts_storage_upgrade",
)  # fmt: skip
"""What iot 0.22.2's modules outside ``hermes_state*`` read off a ``SessionDB`` by private name
(its gateway, dashboard, API server and ``hermes update``), unguarded by ``hasattr``."""


def test_the_private_names_iots_callers_read_are_there() -> None:
    assert [name for name in IOT_CALLERS_PRIVATE_METHODS
            if not hasattr(hermes_state.SessionDB, name)] == []  # fmt: skip


def test_the_storage_upgrade_probe_is_the_layout_optimize_moves(tmp_path: Path) -> None:
    """iot's ``hermes update`` nags to run ``optimize-storage`` when this says so (its call
    sits in a ``try`` that swallows an ``AttributeError``: without it the nag never came)."""
    db = hermes_state.SessionDB(db_path=tmp_path / "state.db")
    try:
        db.create_session("s", "cli")
        db.append_message("s", "user", "hello")
        assert hermes_state.SessionDB._db_needs_fts_storage_upgrade(db._conn) is True
        db.optimize_fts_storage()
        assert db._db_needs_fts_storage_upgrade(db._conn.cursor()) is False
    finally:
        db.close()
    bare = sqlite3.connect(":memory:")
    assert hermes_state.SessionDB._db_needs_fts_storage_upgrade(bare) is False
    bare.close()


def test_the_constructor_takes_hermes_s_positional_read_only(tmp_path: Path) -> None:
    """Hermes's ``SessionDB(db_path=None, read_only=False)`` (0.19.0 ... iot 0.22.2): both
    may be given by position, as its callers may."""
    path = tmp_path / "state.db"
    with hermes_state.SessionDB(path) as db:
        db.create_session("s", "cli")
    reader = hermes_state.SessionDB(path, True)
    try:
        assert reader.get_session("s") is not None
        with pytest.raises(SessionStoreError):
            reader.create_session("t", "cli")
    finally:
        reader.close()
    assert [p.name for p in inspect.signature(hermes_state.SessionDB).parameters.values()
            if p.kind is p.POSITIONAL_OR_KEYWORD] == ["db_path", "read_only"]  # fmt: skip


FORKS_SESSION_DB_CONSTANTS = (
    "CANONICAL_BOT_CHAT_TITLE", "MAX_TITLE_LENGTH", "REACTIONS_METADATA_KEY",
    "RECOVERABLE_END_REASONS", "TITLE_SOURCE_DERIVED", "TITLE_SOURCE_LLM", "TITLE_SOURCE_USER",
)  # fmt: skip
"""The public non-callable class attributes of every fork's ``SessionDB`` (iot 0.20.0 ...
0.22.2, axisrow 0.20.1; read with ``inspect.getmembers`` in each side venv, 2026-12-06):
constants its callers may read off the class. The methods are
``test_real_hermes_api_coverage.py``'s."""


def test_the_public_class_constants_of_every_fork_s_session_db_are_there() -> None:
    assert [name for name in FORKS_SESSION_DB_CONSTANTS
            if not hasattr(hermes_state.SessionDB, name)] == []  # fmt: skip
    assert hermes_state.SessionDB.REACTIONS_METADATA_KEY == "reactions"
