"""``sessionstore.hermes.state`` driven the way Hermes's own client code drives its module.

Hermes's insights, dashboard and CLI read through ``db._conn``; its ACP sessions write with
``with db._lock: db._conn.execute(UPDATE ...); db._conn.commit()``; its CLI reopens a resumed
session with a raw UPDATE of ``ended_at``; its tests monkeypatch ``DEFAULT_DB_PATH``; a Hermes
checkout swaps the module with ``sys.modules["hermes_state"] = ...``. Every case here is one of
those, on a SQLite file, checked against what the store's other connections (and other
processes) see. Also here: a fresh file's physical column order is Hermes v6's.
"""

from __future__ import annotations

import importlib
import logging
import os
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic.migration import MigrationContext
from alembic.operations import Operations
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from legacy_v1_v6 import build_legacy_db
from legacy_v23_v31 import V31_MESSAGE_NAMES, V31_SESSION_NAMES
from real_hermes import backup_copy
from store_library import connect_like_the_store, engine_like_the_store, needs_wal
from writer_gate import gate_taken

import sessionstore
import sessionstore.hermes.state as hermes_state_module
from sessionstore._migrations import helpers
from sessionstore.dialects.sqlite_library import library
from sessionstore.hermes.state import SessionDB
from sessionstore.schema import migrate

HERMES_V6_SESSION_ORDER = [
    "id", "source", "user_id", "model", "model_config", "system_prompt", "parent_session_id",
    "started_at", "ended_at", "end_reason", "message_count", "tool_call_count", "input_tokens",
    "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens",
    "billing_provider", "billing_base_url", "billing_mode", "estimated_cost_usd",
    "actual_cost_usd", "cost_status", "cost_source", "pricing_version", "title",
]  # fmt: skip
HERMES_V6_MESSAGE_ORDER = [
    "id", "session_id", "role", "content", "tool_call_id", "tool_calls", "tool_name",
    "timestamp", "token_count", "finish_reason", "reasoning", "reasoning_details",
    "codex_reasoning_items",
]  # fmt: skip
# At head the store is newest Hermes's (v17): v6's columns keep their relative order.
HEAD_SESSION_ORDER = list(V31_SESSION_NAMES)
HEAD_MESSAGE_ORDER = list(V31_MESSAGE_NAMES)
READ_SESSION_ORDER = HEAD_SESSION_ORDER
# iot 0.22.2's message dicts leave the display index out and keep _compressed_summary only set.
NOT_IN_MESSAGE_DICTS = ("display_identity", "display_order", "_compressed_summary")
READ_MESSAGE_ORDER = [name for name in HEAD_MESSAGE_ORDER if name not in NOT_IN_MESSAGE_DICTS]


@pytest.fixture
def db_file(tmp_path: Path) -> Path:
    return tmp_path / "state.db"


@pytest.fixture
def db(db_file: Path, migrated_sqlite_template: Path) -> Iterator[SessionDB]:
    """The module's ``SessionDB`` on a store at head: a copy of the run's migrated file (the
    chain walked per test cost a third of a second); a fresh file's own open is tested below
    on ``db_file`` itself."""
    backup_copy(migrated_sqlite_template, db_file)
    database = SessionDB(db_file)
    yield database
    database.close()


@pytest.fixture
def hermes_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """What a Hermes checkout's one-line ``hermes_state.py`` does, undone afterwards."""
    monkeypatch.delitem(sys.modules, "hermes_state", raising=False)
    monkeypatch.setitem(sys.modules, "hermes_state", hermes_state_module)
    yield importlib.import_module("hermes_state")


def write_lock_is_free(path: Path) -> bool:
    """True when another connection can take SQLite's write lock right now (no waiting)."""
    other = connect_like_the_store(path, timeout=0, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError as exc:
        assert "locked" in str(exc) or "busy" in str(exc)
        return False
    finally:
        other.close()


def table_info(conn: sqlite3.Connection, table: str) -> list[tuple[Any, ...]]:
    """(name, type, notnull, default, pk) per column, in physical order.

    A primary key counts as NOT NULL: Hermes's ``id TEXT PRIMARY KEY`` lets SQLite store a NULL
    id (a legacy quirk), ours refuses it; nothing else may differ.
    """
    return [
        (name, type_, bool(notnull or pk), default, pk)
        for _, name, type_, notnull, default, pk in conn.execute(f"PRAGMA table_info({table})")
    ]


# -- the module --------------------------------------------------------------------------------
def test_the_module_replaces_hermes_state_wholesale(hermes_state: Any, db_file: Path) -> None:
    assert hermes_state is hermes_state_module
    from hermes_state import DEFAULT_DB_PATH, SCHEMA_VERSION
    from hermes_state import SessionDB as HermesSessionDB

    assert SCHEMA_VERSION == 31
    assert isinstance(DEFAULT_DB_PATH, Path) and DEFAULT_DB_PATH.name == "state.db"
    assert issubclass(HermesSessionDB, sessionstore.SessionDB)
    assert "CREATE TABLE IF NOT EXISTS sessions" in hermes_state.SCHEMA_SQL
    assert "messages_fts" in hermes_state.FTS_SQL
    db = HermesSessionDB(db_file)
    try:
        assert db.create_session("s1", "cli") == "s1"
        assert db._conn.execute("SELECT version FROM schema_version").fetchone()[0] == 31
    finally:
        db.close()


def test_a_hermes_checkout_with_the_one_line_module_runs_on_the_store(tmp_path: Path) -> None:
    checkout = tmp_path / "hermes-agent"
    checkout.mkdir()
    (checkout / "hermes_state.py").write_text(
        "import sys, sessionstore.hermes.state as m; sys.modules[__name__] = m\n"
    )
    # What Hermes's own modules do with it: import names, patch the default, use _conn/_lock.
    client = (
        "import sys, pathlib\n"
        "import hermes_state\n"
        "from hermes_state import SessionDB, SCHEMA_VERSION\n"
        "import sessionstore.hermes.state as ours\n"
        "assert hermes_state is ours and SCHEMA_VERSION == 31\n"
        "hermes_state.DEFAULT_DB_PATH = pathlib.Path(sys.argv[1])\n"
        "db = SessionDB()\n"
        "db.create_session('acp-1', 'acp', model='a')\n"
        "with db._lock:\n"
        "    db._conn.execute('UPDATE sessions SET model = ? WHERE id = ?', ('b', 'acp-1'))\n"
        "    db._conn.commit()\n"
        "row = db._conn.execute('SELECT model FROM sessions WHERE id = ?', ('acp-1',)).fetchone()\n"
        "print(row['model'], db.get_session('acp-1')['model'])\n"
        "db.close()\n"
    )
    target = tmp_path / "home" / "state.db"
    environment = {k: v for k, v in os.environ.items() if k != "SESSIONSTORE_URL"}
    result = subprocess.run(
        [sys.executable, "-c", client, str(target)],
        cwd=checkout,
        env={**environment, "PYTHONPATH": str(checkout)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["b", "b"]
    assert target.exists()


def test_default_db_path_is_read_when_sessiondb_is_called(
    hermes_state: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SESSIONSTORE_URL", raising=False)
    patched = tmp_path / "patched" / "state.db"
    monkeypatch.setattr(hermes_state, "DEFAULT_DB_PATH", patched)
    db = hermes_state.SessionDB()
    try:
        assert db.db_path == patched
        db.create_session("s1", "cli")
    finally:
        db.close()
    assert patched.exists()
    reopened = sessionstore.SessionDB(patched)
    try:
        assert reopened.get_session("s1") is not None
    finally:
        reopened.close()


def test_unpatched_default_follows_hermes_home_at_call_time(
    hermes_state: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SESSIONSTORE_URL", raising=False)
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "home"))
    db = hermes_state.SessionDB()
    try:
        assert db.db_path == tmp_path / "home" / "state.db"
    finally:
        db.close()


def test_private_helpers_under_their_hermes_names(db: SessionDB) -> None:
    for query in ['chat-send P2.2', '"unbalanced', "***", "hello AND", "数据库"]:
        assert db._sanitize_fts5_query(query) == db.sanitize_fts5_query(query)
    assert SessionDB._contains_cjk("数据库") and not SessionDB._contains_cjk("plain")


def test_the_class_names_iots_own_modules_read(db: SessionDB) -> None:
    """iot 0.22.2's alternation repair, run before every request its agent sends, reads the
    content marker and ``_decode_content`` off this class; its TUI the accident end reasons;
    its gateway ``_is_fts_write_corruption_error``. Missing, each turn failed before it asked."""
    parts = [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "x"}}]
    db.create_session("s", "cli")
    db.append_message("s", "user", parts)
    stored = db._conn.execute("SELECT content FROM messages WHERE session_id = 's'").fetchone()[0]
    assert stored.startswith(SessionDB._CONTENT_JSON_PREFIX)
    assert SessionDB._decode_content(stored) == parts
    broken = SessionDB._CONTENT_JSON_PREFIX + "[not json"
    for as_is in ("plain text", None, 7, broken):
        assert SessionDB._decode_content(as_is) is as_is
    assert SessionDB.RECOVERABLE_END_REASONS == (
        "agent_close", "ws_orphan_reap", "superseded_by_resume", "startup_orphan_reap")
    index_damage = sqlite3.DatabaseError("fts5: corruption found reading blob from messages_fts")
    assert SessionDB._is_fts_write_corruption_error(index_damage)
    assert not SessionDB._is_fts_write_corruption_error(
        sqlite3.DatabaseError("database disk image is malformed"))


def test_a_compression_child_as_iots_gateway_asks_on_each_dialect(store_url: str) -> None:
    """iot 0.22.2's gateway asks ``_is_compression_child_row`` before it rewrites a rotated
    compression child (a published child holds rows the rewrite would drop; its probe fails
    open into the rewrite) and when it walks a chat's input owners up the lineage. Only a
    plain child of a session ended for compression counts; a branch, delegate, tool or reset
    fork of it does not, nor a child of a session ended otherwise."""
    db = SessionDB(url=store_url)
    try:
        db.create_session("done", "cli")
        db.end_session("done", "compression")
        db.create_session("next", "cli", parent_session_id="done")
        forks = {
            "branch": {"model_config": {"_branched_from": "done"}},
            "delegate": {"model_config": {"_delegate_from": "done"}},
            "reset": {"model_config": {"_reset_from": "done"}},
        }
        for sid, extra in forks.items():
            db.create_session(sid, "cli", parent_session_id="done", **extra)
        db.create_session("tool-run", "tool", parent_session_id="done")
        db.create_session("closed", "cli")
        db.end_session("closed", "user_exit")
        db.create_session("after-exit", "cli", parent_session_id="closed")
        answers = {
            sid: db._is_compression_child_row(db.get_session(sid) or {})
            for sid in ("next", *forks, "tool-run", "after-exit", "done")
        }
        assert answers == {
            "next": True, "branch": False, "delegate": False, "reset": False,
            "tool-run": False, "after-exit": False, "done": False,
        }  # fmt: skip
        row = dict(db.get_session("branch") or {})
        row["model_config"] = {"_branched_from": "done"}
        assert not db._is_compression_child_row(row)
        assert db._is_compression_child_row({"parent_session_id": "done", "source": "cli"})
    finally:
        db.close()


def test_read_one_as_iots_dashboard_asks_who_owns_a_session(db: SessionDB) -> None:
    """iot 0.22.2's dashboard timeline route reads a session's owner with ``_read_one``."""
    db.create_session("mine", "cli")
    row = db._read_one("SELECT profile_name, source FROM sessions WHERE id = ?", ("mine",))
    assert row is not None and row["profile_name"] is None and row["source"] == "cli"
    assert db._read_one("SELECT id FROM sessions WHERE id = ?", ("nobody",)) is None


def test_a_title_given_at_create_as_iots_api_server_writes_it(db: SessionDB) -> None:
    """iot 0.22.2's API server creates a session with a title in one ``_execute_write``: it
    inserts the row, asks ``_resolve_title_conflict`` on the same connection, and undoes the
    insert on its ``ValueError``. The rule is ``set_session_title``'s."""

    def create(session_id: str, title: str, parent: str | None = None) -> str:
        def write(conn: sqlite3.Connection) -> str:
            conn.execute(
                "INSERT INTO sessions (id, source, started_at, parent_session_id)"
                " VALUES (?, 'api', ?, ?)",
                (session_id, time.time(), parent),
            )
            try:
                db._resolve_title_conflict(conn, session_id, title)
            except ValueError as exc:
                conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
                return str(exc)
            conn.execute("UPDATE sessions SET title = ? WHERE id = ?", (title, session_id))
            return "created"

        return db._execute_write(write)

    assert create("first", "alpha") == "created"
    assert create("second", "alpha") == "Title 'alpha' is already in use by session first"
    assert db.get_session("second") is None
    db.create_session("root", "cli")
    db.set_session_title("root", "deep dive")
    db.end_session("root", "compression")
    assert create("tip", "deep dive", parent="root") == "created"
    assert (db.get_session_title("root"), db.get_session_title("tip")) == (None, "deep dive")
    db.create_session("old-bot", "desktop")
    db.set_session_title("old-bot", SessionDB.CANONICAL_BOT_CHAT_TITLE)
    db.set_session_hidden("old-bot", True)
    db.set_session_archived("old-bot", True)
    assert create("new-bot", SessionDB.CANONICAL_BOT_CHAT_TITLE) == "created"
    assert db.get_session_title("old-bot") is None
    db.create_session("left", "cli")
    db.set_session_title("left", "kept")
    db.end_session("left", "user_exit")
    assert create("claimer", "kept") == "Title 'kept' is already in use by session left"


def test_hermes_module_level_names_its_tests_reach_for(db: SessionDB) -> None:
    """Hermes's own tests read these through ``hermes_state``: the query cap, the import
    limits (the values sessionstore.sessions.imports enforces) and the private rich row."""
    from sessionstore.sessions import imports

    assert hermes_state_module.MAX_FTS5_QUERY_CHARS == 2048
    assert len(db._sanitize_fts5_query("word " * 10_000)) <= 2048
    assert (SessionDB._IMPORT_MAX_SESSION_BYTES, SessionDB._IMPORT_MAX_MESSAGES_PER_SESSION) == (
        imports.MAX_SESSION_BYTES, imports.MAX_MESSAGES_PER_SESSION,
    )
    assert SessionDB._IMPORT_MAX_SESSIONS == 500
    db.create_session("s1", "cli", system_prompt="should be gone")
    compact = db._get_session_rich_row("s1", compact_rows=True)
    assert compact is not None and "system_prompt" not in compact and compact["id"] == "s1"
    full = db._get_session_rich_row("s1")
    assert full is not None and full["system_prompt"] == "should be gone"
    assert db._get_session_rich_row("ghost") is None
    assert db._get_session_rich_rows_batch(["s1", "ghost"], compact_rows=True) == {"s1": compact}
    # iot 0.22.2's tests and desktop name the canonical Bot Chat through the class; pinning it
    # keeps it hidden (an ordinary hidden session is unhidden by a pin).
    db.create_session("bot", "desktop")
    db.set_session_title("bot", SessionDB.CANONICAL_BOT_CHAT_TITLE)
    db.create_session("plain", "desktop")
    for session_id in ("bot", "plain"):
        db.set_session_hidden(session_id, True)
        db.set_session_pinned(session_id, True)
    assert [db.get_session(sid)["hidden"] for sid in ("bot", "plain")] == [1, 0]  # type: ignore[index]


def test_the_clock_of_leases_is_read_through_the_module(
    db: SessionDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hermes's tests pin ``hermes_state.time.time``: the lease sees the pinned clock."""
    db.create_session("s1", "cli")
    monkeypatch.setattr(hermes_state_module.time, "time", lambda: 1000.0)
    assert db.try_acquire_compression_lock("s1", "holder-a", ttl_seconds=10.0) is True
    monkeypatch.setattr(hermes_state_module.time, "time", lambda: 1016.0)
    assert db.try_acquire_compression_lock("s1", "holder-b", ttl_seconds=10.0) is True


@needs_wal()
# -- _conn -------------------------------------------------------------------------------------
def test_conn_is_a_sqlite3_connection_configured_like_hermes_and_the_store(
    db: SessionDB, db_file: Path
) -> None:
    conn = db._conn
    # The stores' library (pysqlite3 where the standard library's SQLite has the WAL-reset
    # bug), whose errors the standard library's except clauses catch.
    assert isinstance(conn, library().module.Connection)
    assert conn is db._conn  # one connection, as in Hermes
    assert conn.row_factory is library().module.Row
    assert conn.isolation_level is None  # Hermes v6: autocommit, it BEGINs itself
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 1000
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA database_list").fetchone()["file"] == str(db_file)


@needs_wal()
def test_conn_is_opened_at_its_first_use(db: SessionDB) -> None:
    """An open that never asks for ``_conn`` holds no connection for it (each one connects
    and parses the whole schema); asked for after other calls, it is the same connection
    as ever: the file's, in WAL, seeing what the store wrote, held until close."""
    pool = db.store.engine.pool
    db.create_session("a", "cli", model="m1")
    assert db.get_session("a") is not None
    held = pool.checkedout()  # type: ignore[attr-defined]
    # the store's own: its idle reader and the writer it keeps, nothing for ``_conn``
    assert held == db.store.idle_readers + 1
    conn = db._conn
    assert conn is db._conn
    assert pool.checkedout() == held + 1  # type: ignore[attr-defined]
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert [tuple(row) for row in conn.execute("SELECT id FROM sessions")] == [("a",)]
    db.close()
    assert pool.checkedout() == 0  # type: ignore[attr-defined]


def test_conn_reads_what_the_store_wrote_insights_style(db: SessionDB) -> None:
    db.create_session("a", "cli", model="m1")
    db.create_session("b", "telegram", model="m1")
    db.append_message("a", "user", "hi")
    db.update_token_counts("a", input_tokens=10, output_tokens=5, estimated_cost_usd=0.5)
    rows = db._conn.execute(
        "SELECT source, COUNT(*) AS sessions, SUM(input_tokens) AS tokens, "
        "SUM(estimated_cost_usd) AS cost FROM sessions GROUP BY source ORDER BY source"
    ).fetchall()
    assert [dict(row) for row in rows] == [
        {"source": "cli", "sessions": 1, "tokens": 10, "cost": 0.5},
        {"source": "telegram", "sessions": 1, "tokens": 0, "cost": None},
    ]
    # SELECT * gives Hermes's columns in Hermes's order, the same keys as get_session.
    star = db._conn.execute("SELECT * FROM sessions WHERE id = 'a'").fetchone()
    session = db.get_session("a")
    assert session is not None
    assert list(star.keys()) == HEAD_SESSION_ORDER
    assert list(session) == READ_SESSION_ORDER
    assert dict(star) == session
    message = db._conn.execute("SELECT * FROM messages").fetchone()
    assert list(message.keys()) == HEAD_MESSAGE_ORDER
    assert list(db.get_messages("a")[0]) == READ_MESSAGE_ORDER


def test_conn_sees_writes_of_another_process_and_the_other_way_round(
    db: SessionDB, db_file: Path
) -> None:
    db.create_session("mine", "cli")
    script = (
        "import sys, sessionstore\n"
        "db = sessionstore.SessionDB(sys.argv[1])\n"
        "assert db.get_session('mine')['model'] == 'from-conn', db.get_session('mine')\n"
        "db.create_session('theirs', 'gateway')\n"
        "db.append_message('theirs', 'user', 'written elsewhere')\n"
        "db.close()\n"
    )
    with db._lock:
        db._conn.execute("UPDATE sessions SET model = ? WHERE id = ?", ("from-conn", "mine"))
        db._conn.commit()
    subprocess.run([sys.executable, "-c", script, str(db_file)], check=True, timeout=60)
    row = db._conn.execute("SELECT message_count FROM sessions WHERE id = 'theirs'").fetchone()
    assert row["message_count"] == 1
    assert db.search_messages("elsewhere")[0]["session_id"] == "theirs"


# -- _lock -------------------------------------------------------------------------------------
def test_acp_style_update_under_lock_is_saved_and_holds_no_lock_afterwards(
    db: SessionDB, db_file: Path
) -> None:
    db.create_session("acp", "acp", model="old-model")
    with db._lock:
        db._conn.execute(
            "UPDATE sessions SET model = ?, billing_provider = ? WHERE id = ?",
            ("new-model", "openrouter", "acp"),
        )
        db._conn.commit()
    assert write_lock_is_free(db_file)
    session = db.get_session("acp")
    assert session is not None
    assert (session["model"], session["billing_provider"]) == ("new-model", "openrouter")
    other = sessionstore.SessionDB(db_file)
    try:
        assert other.get_session("acp") == session
    finally:
        other.close()


def test_cli_resume_reopens_a_session_through_conn(db: SessionDB) -> None:
    db.create_session("resumed", "cli")
    db.end_session("resumed", "user_exit")
    ended = db.get_session("resumed")
    assert ended is not None and ended["ended_at"] is not None
    with db._lock:
        db._conn.execute(
            "UPDATE sessions SET ended_at = NULL, end_reason = NULL WHERE id = ?", ("resumed",)
        )
        db._conn.commit()
    session = db.get_session("resumed")
    assert session is not None
    assert session["ended_at"] is None and session["end_reason"] is None
    # A reopened session can be ended again, with a new reason.
    db.end_session("resumed", "compression")
    again = db.get_session("resumed")
    assert again is not None and again["end_reason"] == "compression"


def test_lock_writes_queue_with_the_store_own_writes(db: SessionDB) -> None:
    db.create_session("s", "cli")
    holding = threading.Event()
    released_at: list[float] = []
    finished_at: list[float] = []

    def hermes_writer() -> None:
        with db._lock:
            holding.set()
            db._conn.execute("UPDATE sessions SET model = 'acp' WHERE id = 's'")
            time.sleep(0.3)
            released_at.append(time.monotonic())

    def store_writer() -> None:
        holding.wait(5)
        db.append_message("s", "user", "queued behind _lock")
        finished_at.append(time.monotonic())

    threads = [threading.Thread(target=hermes_writer), threading.Thread(target=store_writer)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert released_at and finished_at and finished_at[0] >= released_at[0]
    session = db.get_session("s")
    assert session is not None and session["model"] == "acp" and session["message_count"] == 1


_OTHER_PROCESS_APPEND = """
import sys, time
from sessionstore import SessionDB
db = SessionDB(sys.argv[1])
db.append_message("s", "user", "from the other process")
print(time.time())
db.close()
"""


def test_lock_queues_the_writers_of_other_processes_too(db: SessionDB, db_file: Path) -> None:
    """``_lock`` is the store's whole write lock: threads, then the file's writers' queue. A
    Hermes-style block holds no SQLite lock between its statements (autocommit), so without
    the queue another process's append would slip in before the block is done."""
    db.create_session("s", "cli")
    with db._lock:
        other = subprocess.Popen(
            [sys.executable, "-c", _OTHER_PROCESS_APPEND, str(db_file)],
            stdout=subprocess.PIPE,
            text=True,
        )
        # The other process tried to write and waits in the writers' queue: a waiter holds
        # the gate while it waits for the lock we hold (no timing here, only a bound on how
        # long a broken queue may keep the test waiting).
        gave_up_at = time.monotonic() + 60.0
        while not gate_taken(Path(f"{db_file}-writegate")) and other.poll() is None:
            assert time.monotonic() < gave_up_at, "the other process never queued"
            time.sleep(0.005)
        assert db.message_count("s") == 0  # it is queued, not done
        db._conn.execute("UPDATE sessions SET model = 'acp' WHERE id = 's'")
        released_at = time.time()
    out, _ = other.communicate(timeout=30)
    assert other.returncode == 0
    assert float(out.strip()) >= released_at
    session = db.get_session("s")
    assert session is not None and session["model"] == "acp" and session["message_count"] == 1


def test_store_methods_may_be_called_while_holding_the_lock(db: SessionDB) -> None:
    done = threading.Event()

    def nested() -> None:
        with db._lock:
            db.create_session("inside", "cli")
            db.append_message("inside", "user", "re-entrant")
            with db._lock:
                db._conn.execute("UPDATE sessions SET title = 'T' WHERE id = 'inside'")
        done.set()

    worker = threading.Thread(target=nested, daemon=True)
    worker.start()
    worker.join(20)
    assert done.is_set(), "deadlock: the store's write lock is not re-entrant"
    session = db.get_session("inside")
    assert session is not None and session["title"] == "T" and session["message_count"] == 1


def test_a_transaction_left_open_under_lock_is_committed_on_exit(
    db: SessionDB, db_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db.create_session("s", "cli")
    with caplog.at_level(logging.WARNING, logger="sessionstore.hermes.state"), db._lock:
        db._conn.execute("BEGIN IMMEDIATE")
        db._conn.execute("UPDATE sessions SET model = 'kept' WHERE id = 's'")
        # no commit: the caller forgot
    assert "committed" in caplog.text
    assert not db._conn.in_transaction and write_lock_is_free(db_file)
    session = db.get_session("s")
    assert session is not None and session["model"] == "kept"


def test_a_transaction_left_open_when_the_block_raises_is_rolled_back(
    db: SessionDB, db_file: Path
) -> None:
    db.create_session("s", "cli", model="before")
    with pytest.raises(RuntimeError), db._lock:
        db._conn.execute("BEGIN")
        db._conn.execute("UPDATE sessions SET model = 'lost' WHERE id = 's'")
        raise RuntimeError("the caller failed half-way")
    assert not db._conn.in_transaction and write_lock_is_free(db_file)
    session = db.get_session("s")
    assert session is not None and session["model"] == "before"


def test_lock_acquire_and_release_work_like_a_threading_lock(db: SessionDB) -> None:
    db.create_session("s", "cli")
    assert db._lock.acquire() is True
    try:
        db._conn.execute("UPDATE sessions SET model = 'manual' WHERE id = 's'")
    finally:
        db._lock.release()
    acquired_elsewhere: list[bool] = []

    def other_thread() -> None:
        got = db._lock.acquire(False)
        acquired_elsewhere.append(got)
        if got:
            db._lock.release()

    worker = threading.Thread(target=other_thread)
    worker.start()
    worker.join(5)
    assert acquired_elsewhere == [True]  # released: another thread gets it at once
    session = db.get_session("s")
    assert session is not None and session["model"] == "manual"


def test_execute_write_runs_hermes_style_and_waits_out_a_busy_store(
    db: SessionDB, db_file: Path
) -> None:
    db.create_session("s", "cli")
    blocker = connect_like_the_store(db_file, isolation_level=None, check_same_thread=False)
    blocker.execute("BEGIN IMMEDIATE")
    release = threading.Timer(0.5, lambda: blocker.execute("COMMIT"))
    release.start()
    try:
        changed = db._execute_write(
            lambda conn: conn.execute("UPDATE sessions SET model = 'w' WHERE id = 's'").rowcount
        )
    finally:
        release.join()  # its COMMIT has run: the blocker is done with its connection
        blocker.close()
    assert changed == 1
    session = db.get_session("s")
    assert session is not None and session["model"] == "w"
    with pytest.raises(sqlite3.IntegrityError):
        db._execute_write(lambda conn: conn.execute("INSERT INTO sessions (id) VALUES ('x')"))
    assert db.get_session("x") is None and write_lock_is_free(db_file)


def test_set_token_counts_sets_the_totals(db: SessionDB) -> None:
    db.create_session("s", "gateway")
    db.update_token_counts("s", input_tokens=5, output_tokens=5)
    db.set_token_counts("s", input_tokens=100, output_tokens=40, model="m", reasoning_tokens=3)
    db.set_token_counts("s", input_tokens=120, output_tokens=50)
    session = db.get_session("s")
    assert session is not None
    assert (session["input_tokens"], session["output_tokens"]) == (120, 50)
    assert (session["reasoning_tokens"], session["model"]) == (0, "m")


# -- titles, as `hermes sessions rename` and the gateway's /title see them -------------------------
def test_title_conflicts_read_exactly_as_in_hermes(db: SessionDB) -> None:
    db.create_session("first", "cli")
    db.create_session("second", "telegram")
    assert db.set_session_title("first", "Release plan") is True
    with pytest.raises(ValueError) as refused:
        db.set_session_title("second", "Release plan")
    assert str(refused.value) == "Title 'Release plan' is already in use by session first"
    assert db.get_session_title("second") is None
    assert db.get_next_title_in_lineage("Release plan") == "Release plan #2"
    with pytest.raises(ValueError, match=r"^Title too long \(101 chars, max 100\)$"):
        db.set_session_title("second", "x" * 101)


# One file for every example (each resets the titles it uses), hence the fixture is fine.
@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(title=st.text(min_size=1, max_size=120))
def test_any_title_conflict_names_the_title_and_its_holder(tmp_path: Path, title: str) -> None:
    try:
        clean = SessionDB.sanitize_title(title)
    except ValueError:
        return  # too long: its own error, tested above
    if clean is None:
        return
    db = SessionDB(tmp_path / "titles.db")
    try:
        db.create_session("holder", "cli")
        db.create_session("other", "cli")
        db.set_session_title("holder", None)
        db.set_session_title("other", None)
        assert db.set_session_title("holder", title) is True
        with pytest.raises(ValueError) as refused:
            db.set_session_title("other", title)
        assert str(refused.value) == f"Title '{clean}' is already in use by session holder"
        assert db.get_session_title("other") is None
    finally:
        db.close()


# -- lifecycle of the connection ----------------------------------------------------------------
def test_close_leaves_conn_none_and_is_idempotent(db_file: Path) -> None:
    db = SessionDB(db_file)
    db.create_session("s", "cli")
    db.close()
    assert db._conn is None
    db.close()
    reopened = SessionDB(db_file)
    try:
        assert reopened._conn.execute("SELECT COUNT(*) FROM sessions").fetchone()[0] == 1
    finally:
        reopened.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_opens_its_own_conn_and_the_parent_keeps_working(
    db: SessionDB, db_file: Path
) -> None:
    db.create_session("parent", "cli")
    parent_conn = db._conn
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit status
        status = 1
        try:
            os.close(reader)
            child_conn = db._conn
            ok = child_conn is not parent_conn
            with db._lock:
                db._conn.execute("UPDATE sessions SET model = 'from-child' WHERE id = 'parent'")
                db._conn.commit()
            db.create_session("child", "cli")
            os.write(writer, b"ok" if ok else b"shared")
            status = 0
        finally:
            os._exit(status)
    os.close(writer)
    _, status = os.waitpid(pid, 0)
    report = os.read(reader, 16)
    os.close(reader)
    assert os.waitstatus_to_exitcode(status) == 0 and report == b"ok"
    assert db._conn is parent_conn
    session = db._conn.execute("SELECT model FROM sessions WHERE id = 'parent'").fetchone()
    assert session["model"] == "from-child"
    assert db.get_session("child") is not None
    db.append_message("parent", "user", "the parent still writes")
    assert db.message_count("parent") == 1


def test_conn_exists_only_on_a_sqlite_file(fresh_migrated_pg_url: str) -> None:
    db = SessionDB(url=fresh_migrated_pg_url)
    try:
        with pytest.raises(AttributeError, match="only on a SQLite file"):
            db._conn  # noqa: B018 - the access is the test
        db.create_session("s", "cli")
        with db._lock:  # still a lock, so Hermes code that only queues keeps working
            db.set_session_title("s", "pg title")
        assert db.get_session_title("s") == "pg title"
    finally:
        db.close()


@needs_wal()
# -- a fresh file ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "facade",
    [
        pytest.param(SessionDB, id="hermes"),
        pytest.param(
            sessionstore.SessionDB,
            id="package",
        ),
    ],
)
def test_a_fresh_file_is_in_wal_mode_for_other_connections_right_after_open(
    tmp_path: Path, facade: type[sessionstore.SessionDB]
) -> None:
    path = tmp_path / "fresh.db"
    db = facade(path)
    try:
        other = connect_like_the_store(path)
        try:
            mode = other.execute("PRAGMA journal_mode").fetchone()[0]
        finally:
            other.close()
    finally:
        db.close()
    assert mode == "wal"


def test_a_fresh_file_has_hermes_v6_tables_column_for_column(db_file: Path) -> None:
    # At revision 0006 (Hermes v6) a fresh file is the one Hermes v6's SCHEMA_SQL creates; at
    # head it is newest Hermes's (tests/schema/test_hermes_v7_v17_files.py).
    migrate.upgrade(f"sqlite:///{db_file}", "0006")
    hermes = sqlite3.connect(":memory:")
    hermes.executescript(hermes_state_module.SCHEMA_SQL)
    hermes.executescript(hermes_state_module.FTS_SQL)
    ours = sqlite3.connect(db_file)
    try:
        for table in ("schema_version", "sessions", "messages"):
            assert table_info(ours, table) == table_info(hermes, table), table
        assert [row[0] for row in table_info(ours, "sessions")] == HERMES_V6_SESSION_ORDER
        assert [row[0] for row in table_info(ours, "messages")] == HERMES_V6_MESSAGE_ORDER
        for name in ("messages_fts_insert", "messages_fts_delete", "messages_fts_update"):
            assert ours.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'trigger' AND name = ?", (name,)
            ).fetchone(), name
        indexes = {row[1] for row in ours.execute("PRAGMA index_list(sessions)")}
        assert {"idx_sessions_source", "idx_sessions_parent", "idx_sessions_started",
                "idx_sessions_title_unique"} <= indexes  # fmt: skip
    finally:
        ours.close()
        hermes.close()


def test_an_empty_legacy_file_is_laid_out_in_hermes_order_and_still_indexes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "v3.db"
    build_legacy_db(path, 3)
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM messages")
        conn.execute("DELETE FROM sessions")
    conn.close()
    db = SessionDB(path)
    try:
        columns = [row["name"] for row in db._conn.execute("PRAGMA table_info(sessions)")]
        assert columns == HEAD_SESSION_ORDER
        db.create_session("s", "cli")
        db.append_message("s", "user", "after the layout")
        assert [hit["session_id"] for hit in db.search_messages("layout")] == ["s"]
        assert db.set_session_title("s", "unique")
        db.create_session("t", "cli")
        with pytest.raises(ValueError, match="already in use"):
            db.set_session_title("t", "unique")
    finally:
        db.close()


def test_a_legacy_file_with_rows_keeps_them_and_its_order(tmp_path: Path) -> None:
    path = tmp_path / "v3.db"
    build_legacy_db(path, 3)
    with sqlite3.connect(path) as conn:
        before = conn.execute("SELECT * FROM sessions ORDER BY id").fetchall()
    conn.close()
    db = SessionDB(path)
    try:
        columns = [row["name"] for row in db._conn.execute("PRAGMA table_info(sessions)")]
        # ALTER order: title right after output_tokens, the v5 columns after it.
        assert columns.index("title") == columns.index("output_tokens") + 1
        after = db._conn.execute(f"SELECT {', '.join(columns[:15])} FROM sessions ORDER BY id")
        assert [tuple(row) for row in after] == [tuple(row) for row in before]
        # The facade still answers in Hermes's key order.
        first = db.get_session(before[0][0])
        assert first is not None and list(first) == READ_SESSION_ORDER
    finally:
        db.close()


# -- the layout helper itself --------------------------------------------------------------------
def _run_helper(path: Path, table: str, order: list[str]) -> bool:
    engine = engine_like_the_store(f"sqlite:///{path}")
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql("PRAGMA foreign_keys = ON")
            with Operations.context(MigrationContext.configure(conn)):
                return helpers.lay_out_empty_table(table, order)
    finally:
        engine.dispose()


def test_layout_helper_keeps_triggers_indexes_and_the_autoincrement_mark(
    db: SessionDB, db_file: Path
) -> None:
    db.create_session("s", "cli")
    for number in range(5):
        db.append_message("s", "user", f"message {number}")
    db.clear_messages("s")
    db.close()
    dependents_sql = (
        "SELECT type, name, sql FROM sqlite_master WHERE tbl_name = 'messages'"
        " AND type IN ('index', 'trigger') ORDER BY name"
    )
    with sqlite3.connect(db_file) as conn:
        dependents = conn.execute(dependents_sql).fetchall()
    conn.close()
    assert len([row for row in dependents if row[0] == "trigger"]) >= 3
    shuffled = [*reversed(HEAD_MESSAGE_ORDER[1:]), "id"]
    assert _run_helper(db_file, "messages", shuffled) is True
    with sqlite3.connect(db_file) as conn:
        assert conn.execute(dependents_sql).fetchall() == dependents
    conn.close()
    again = SessionDB(db_file)
    try:
        columns = [row["name"] for row in again._conn.execute("PRAGMA table_info(messages)")]
        assert columns == shuffled
        new_id = again.append_message("s", "user", "numbered after the old ones")
        assert new_id == 6
        assert [hit["id"] for hit in again.search_messages("numbered")] == [new_id]
        indexes = {row["name"] for row in again._conn.execute("PRAGMA index_list(messages)")}
        assert "idx_messages_session" in indexes
        assert again.get_messages("s")[0]["content"] == "numbered after the old ones"
    finally:
        again.close()


def test_layout_helper_never_rebuilds_a_table_with_rows(db: SessionDB, db_file: Path) -> None:
    db.create_session("s", "cli")
    db.close()
    shuffled = list(reversed(HEAD_SESSION_ORDER))
    assert _run_helper(db_file, "sessions", shuffled) is False
    with sqlite3.connect(db_file) as conn:
        assert [row[1] for row in conn.execute("PRAGMA table_info(sessions)")] == (
            HEAD_SESSION_ORDER
        )
    conn.close()
    assert _run_helper(db_file, "sessions", HEAD_SESSION_ORDER) is False  # already so


_NAMES = st.lists(
    st.text(alphabet='abcXYZ_ "\'`[]()-,', min_size=1, max_size=8).filter(
        lambda name: name.strip() == name and name.lower() not in {
            "constraint", "primary", "foreign", "unique", "check"
        }
    ),
    min_size=2,
    max_size=6,
    unique_by=str.lower,
)


@settings(max_examples=60, deadline=None)
@given(names=_NAMES, data=st.data())
def test_reordering_create_table_text_keeps_every_definition(
    names: list[str], data: st.DataObject
) -> None:
    def quoted(name: str) -> str:
        return '"' + name.replace('"', '""') + '"'

    definitions = [
        f"{quoted(names[0])} TEXT NOT NULL DEFAULT 'a,b (c)'",
        *(f"{quoted(name)} INTEGER DEFAULT (1 + 2) /* x, y */" for name in names[1:]),
    ]
    separator = ", -- comment, with a comma\n  "
    columns = separator.join(definitions)
    create = (
        f"CREATE TABLE t (\n  {columns},\n  CONSTRAINT pk_t PRIMARY KEY ({quoted(names[0])}),"
        f"\n  CHECK ({quoted(names[-1])} > 0)\n)"
    )
    order = data.draw(st.permutations(names))
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute(create)
        expected = {row[1]: tuple(row[2:]) for row in conn.execute("PRAGMA table_info(t)")}
        conn.execute("DROP TABLE t")
        conn.execute(helpers.reorder_create_table_sql(create, list(order)))
        rows = list(conn.execute("PRAGMA table_info(t)"))
        assert [row[1] for row in rows] == list(order)
        assert {row[1]: tuple(row[2:]) for row in rows} == expected
        with pytest.raises(sqlite3.IntegrityError):
            conn.execute(f"INSERT INTO t ({quoted(names[-1])}) VALUES (0)")
    finally:
        conn.close()


def test_reordering_refuses_an_order_that_does_not_name_every_column() -> None:
    with pytest.raises(ValueError, match="cannot be put in the order"):
        helpers.reorder_create_table_sql("CREATE TABLE t (a TEXT, b TEXT)", ["b"])


# -- automatic repair of a malformed schema at open (Hermes 0.18.0 ... iot 0.22.2) ----------


def _duplicate_schema_row(path: Path) -> None:
    """The field's "malformed database schema (messages_fts) - table messages_fts already
    exists": a second ``sqlite_master`` row for one table (written with the store closed)."""
    conn = connect_like_the_store(path)
    conn.execute("PRAGMA writable_schema=ON")
    conn.execute("INSERT INTO sqlite_master (type, name, tbl_name, rootpage, sql) "
                 "SELECT type, name, tbl_name, rootpage, sql FROM sqlite_master "
                 "WHERE name = 'messages_fts'")  # fmt: skip
    conn.commit()
    conn.close()


def test_a_malformed_schema_is_repaired_at_open_once_per_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "state.db"
    db = SessionDB(path)
    db.create_session("kept", "cli")
    db.append_message("kept", "user", "hello pizza")
    db.close()
    _duplicate_schema_row(path)
    monkeypatch.setattr(hermes_state_module, "_repair_attempted_paths", set())

    healed = SessionDB(path)
    assert [m["content"] for m in healed.get_messages("kept")] == ["hello pizza"]
    assert [hit["session_id"] for hit in healed.search_messages("pizza")] == ["kept"]
    healed.close()
    assert len(list(tmp_path.glob("state.db.malformed-backup-*"))) == 1

    # Broken again in the same process: no second repair, the open fails (no loop).
    _duplicate_schema_row(path)
    calls: list[Path] = []
    monkeypatch.setattr(hermes_state_module, "repair_state_db_schema",
                        lambda p, **_: calls.append(p) or {"repaired": True})  # fmt: skip
    with pytest.raises(sessionstore.StoreUnavailableError, match="malformed database schema"):
        SessionDB(path)
    assert calls == []


def test_a_read_only_open_reports_a_malformed_schema_and_leaves_the_repair_to_a_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A reader (a dashboard, `sessions list`) may run beside the live writer: schema surgery
    # is not its to do. It fails, touching nothing; the next writable open still repairs.
    path = tmp_path / "state.db"
    db = SessionDB(path)
    db.create_session("kept", "cli")
    db.append_message("kept", "user", "hello pizza")
    db.close()
    _duplicate_schema_row(path)
    before = path.read_bytes()
    monkeypatch.setattr(hermes_state_module, "_repair_attempted_paths", set())
    with pytest.raises(sessionstore.StoreUnavailableError, match="malformed database schema"):
        SessionDB(path, read_only=True)
    assert path.read_bytes() == before
    assert list(tmp_path.glob("state.db.malformed-backup-*")) == []
    healed = SessionDB(path)
    try:
        assert [m["content"] for m in healed.get_messages("kept")] == ["hello pizza"]
    finally:
        healed.close()
    assert len(list(tmp_path.glob("state.db.malformed-backup-*"))) == 1


def test_only_a_malformed_schema_is_repaired_at_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "state.db"
    path.write_bytes(b"this is definitely not a sqlite database")
    calls: list[Path] = []
    monkeypatch.setattr(hermes_state_module, "_repair_attempted_paths", set())
    monkeypatch.setattr(hermes_state_module, "repair_state_db_schema",
                        lambda p, **_: calls.append(p) or {"repaired": True})  # fmt: skip
    with pytest.raises(sessionstore.StoreUnavailableError):
        SessionDB(path)
    assert calls == [] and path.read_bytes() == b"this is definitely not a sqlite database"


def test_fts_table_exists_follows_the_file_s_schema(tmp_path: Path) -> None:
    db = SessionDB(tmp_path / "state.db")
    assert db._fts_table_exists("messages_fts") and db._fts_table_exists("messages_fts_trigram")
    with db._lock:
        for trigger in ("messages_fts_trigram_insert", "messages_fts_trigram_delete",
                        "messages_fts_trigram_update"):  # fmt: skip
            db._conn.execute(f"DROP TRIGGER IF EXISTS {trigger}")
        db._conn.execute("DROP TABLE messages_fts_trigram")
    assert not db._fts_table_exists("messages_fts_trigram")
    assert not db._fts_table_exists("sessions_fts; DROP TABLE sessions")
    assert db.optimize_fts() == 1  # the word index alone, as Hermes counts
    db.close()


# -- a search index that lost an object is rebuilt at a writable open (iot 0.22.2) -------------
@pytest.mark.parametrize("dropped", ["messages_fts_insert", "messages_fts_trigram_insert"])
def test_a_writable_open_rebuilds_a_search_index_that_lost_a_trigger(
    db_file: Path, migrated_sqlite_template: Path, dropped: str
) -> None:
    # A Hermes that found the index damaged drops its triggers (or a user dropped one): every
    # message written after that was missing from search until iot's next open rebuilt it.
    backup_copy(migrated_sqlite_template, db_file)
    present = "SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND name = ?"
    with SessionDB(db_file) as db:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "zebra before")
        db._conn.execute(f"DROP TRIGGER {dropped}")
        db._conn.commit()
    with SessionDB(db_file, read_only=True) as reader:  # a reader only reports
        assert reader._conn.execute(present, (dropped,)).fetchone()[0] == 0
    with SessionDB(db_file) as db:
        assert db._conn.execute(present, (dropped,)).fetchone()[0] == 1
        db.append_message("s1", "user", "zebra after")
        db.append_message("s1", "assistant", "斑马线在这里")
        assert len(db.search_messages("zebra")) == 2
        assert len(db.search_messages("斑马线")) == 1


# -- owner-only files (iot 0.22.2's writable open) ------------------------------------------------
def modes(path: Path) -> dict[str, int]:
    """The permission bits of the file and of each companion it has now."""
    return {
        suffix: stat.S_IMODE(os.stat(f"{path}{suffix}").st_mode)
        for suffix in ("", "-wal", "-shm")
        if os.path.exists(f"{path}{suffix}")
    }


@needs_wal()
@pytest.mark.parametrize("folder", ["existing", "missing"])
def test_a_new_file_and_its_companions_are_owner_only_under_a_loose_umask(
    tmp_path: Path, folder: str
) -> None:
    path = tmp_path / "state.db" if folder == "existing" else tmp_path / "new" / "state.db"
    old_umask = os.umask(0o022)
    try:
        db = SessionDB(path)
    finally:
        os.umask(old_umask)
    try:
        db.create_session("s1", "cli")
        found = modes(path)
    finally:
        db.close()
    assert "-wal" in found  # the companions were there to check
    assert found == dict.fromkeys(found, 0o600)


def test_a_writable_open_tightens_a_loose_file_and_a_read_only_open_does_not(
    tmp_path: Path, migrated_sqlite_template: Path
) -> None:
    loose, untouched = tmp_path / "loose.db", tmp_path / "untouched.db"
    for path in (loose, untouched):
        backup_copy(migrated_sqlite_template, path)
        os.chmod(path, 0o644)
    SessionDB(loose).close()
    reader = SessionDB(untouched, read_only=True)
    try:
        assert reader.session_count() == 0
    finally:
        reader.close()
    assert modes(loose)[""] == 0o600
    assert modes(untouched)[""] == 0o644


def test_a_file_the_user_may_not_chmod_is_logged_and_still_opened(
    tmp_path: Path,
    migrated_sqlite_template: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    path = backup_copy(migrated_sqlite_template, tmp_path / "shared.db")
    real_chmod = os.chmod

    def refuse(target: Any, mode: int, *args: Any, **kwargs: Any) -> None:
        if Path(target) == path:
            raise PermissionError(1, "Operation not permitted", str(target))
        real_chmod(target, mode, *args, **kwargs)

    monkeypatch.setattr(os, "chmod", refuse)
    with caplog.at_level(logging.WARNING, logger="sessionstore.hermes.state"):
        db = SessionDB(path)
    try:
        db.create_session("s1", "cli")
        assert db.get_session("s1") is not None
    finally:
        db.close()
    assert any("owner-only" in record.getMessage() for record in caplog.records)


def _writable_by_its_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stand in for a user who is not root (the suite runs as root): the user owns the files
    and may write one only while its mode lets the owner write."""
    real_access = os.access

    def access(target: Any, how: int, **kwargs: Any) -> bool:
        if how & os.W_OK and os.path.exists(target) and not os.stat(target).st_mode & stat.S_IWUSR:
            return False
        return real_access(target, how, **kwargs)

    monkeypatch.setattr(os, "access", access)


def test_a_read_only_file_outside_the_hermes_home_is_refused_not_made_writable(
    tmp_path: Path, migrated_sqlite_template: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # iot 0.22.2 refuses it before its first connection; the 0600 of a writable open had made
    # it writable, and the open then wrote to a file its owner had set read-only.
    home, outside = tmp_path / "home", tmp_path / "archive"
    home.mkdir()
    outside.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(home))
    path = backup_copy(migrated_sqlite_template, outside / "state.db")
    os.chmod(path, 0o444)
    before = path.read_bytes()
    _writable_by_its_mode(monkeypatch)
    with pytest.raises(sqlite3.OperationalError, match="chmod u\\+rw") as refused:
        SessionDB(path)
    assert str(path) in str(refused.value)
    assert modes(path)[""] == 0o444 and path.read_bytes() == before
    with SessionDB(path, read_only=True) as reader:  # reading it is still fine
        assert reader.session_count() == 0


def test_a_read_only_file_in_the_hermes_home_is_made_writable_again(
    tmp_path: Path, migrated_sqlite_template: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A sudo run or a restored backup left it 0444: iot 0.22.2 repairs its own home's files.
    monkeypatch.setenv("HERMES_HOME", str(tmp_path))
    path = backup_copy(migrated_sqlite_template, tmp_path / "state.db")
    os.chmod(path, 0o444)
    _writable_by_its_mode(monkeypatch)
    with SessionDB(path) as db:
        db.create_session("s1", "cli")
    assert modes(path)[""] == 0o600


# -- the resume and export guards read their bound at each call (iot 0.22.2) -------------------
def test_the_guards_default_bound_is_read_through_the_module_at_each_call(
    db: SessionDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Hermes resolves the bound from config.yaml (sessions.max_resume_messages, 0 disables)
    # when it is not given; a user who disabled the guard must be able to resume a big session.
    db.create_session("big", "cli")
    for n in range(5):
        db.append_message("big", "user", f"turn {n}")
    monkeypatch.setattr(hermes_state_module, "resolved_max_resume_messages", lambda: 3)
    monkeypatch.setattr(hermes_state_module, "resolved_max_export_messages", lambda: 4)
    with pytest.raises(hermes_state_module.SessionResumeTooLargeError) as resume:
        db.assert_resume_safe("big")
    with pytest.raises(hermes_state_module.SessionExportTooLargeError) as export:
        db.assert_export_safe("big")
    with pytest.raises(hermes_state_module.SessionExportTooLargeError):
        db.assert_exports_safe(["big"])
    assert (resume.value.limit, export.value.limit) == (3, 4)
    monkeypatch.setattr(hermes_state_module, "resolved_max_resume_messages", lambda: 0)
    monkeypatch.setattr(hermes_state_module, "resolved_max_export_messages", lambda: 0)
    assert db.assert_resume_safe("big") == 0
    assert db.assert_export_safe("big") == 0
    db.assert_exports_safe(["big"])
    assert db.assert_resume_safe("big", max_messages=10) == 5  # a bound given is the bound


def test_a_delete_refused_mid_turn_is_the_checkouts_own_error_class_too(
    db: SessionDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    """iot 0.22.2's CLI, dashboard and TUI import SessionActiveWriteGuardError from its
    ``hermes_state_errors`` (which the drop-in does not replace) and answer it with a
    message; ours, another class, went past their ``except`` as a traceback."""
    checkout_errors = type(sys)("hermes_state_errors")

    class SessionActiveWriteGuardError(RuntimeError):  # iot's, as it declares it
        pass

    checkout_errors.SessionActiveWriteGuardError = SessionActiveWriteGuardError  # type: ignore[attr-defined]
    db.create_session("s", "cli")
    assert db.try_acquire_session_turn_lease("s", "turn-1", ttl_seconds=600)
    with pytest.raises(sessionstore.SessionActiveWriteGuardError) as alone:
        db.delete_session("s", exclude_active_write_guards=True)
    assert type(alone.value) is sessionstore.SessionActiveWriteGuardError  # no checkout
    monkeypatch.setitem(sys.modules, "hermes_state_errors", checkout_errors)
    for _ in range(2):  # one class each time, so every except clause matches alike
        with pytest.raises(SessionActiveWriteGuardError, match="active turn lease") as caught:
            db.delete_session("s", exclude_active_write_guards=True)
        assert isinstance(caught.value, sessionstore.SessionActiveWriteGuardError)
        assert type(caught.value).__name__ == "SessionActiveWriteGuardError"
    assert db.get_session("s") is not None
    assert db.delete_session("s") is True  # without the guard, as before


CLOSED_WORDS = (
    "Session 's' is closed by compression; adopt its live continuation before appending messages"
)


def test_a_write_into_a_compression_closed_session_is_refused_as_the_checkout_expects(
    db_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """iot 0.22.2 refuses an append, a batch or a replace into a session compression ended
    with its ``hermes_state_errors.CompressionSessionClosedError``, which its gateway and agent
    catch by class to write the message to the live continuation. The drop-in wrote it into
    the ended session (as Hermes 0.13-0.19, whose callers catch no such error) and raised
    nothing, so under iot the message missed the conversation that goes on. Now a checkout
    that declares the class gets the refusal, as that class; one that does not, the write."""
    checkout_errors = type(sys)("hermes_state_errors")

    class CompressionSessionClosedError(RuntimeError):  # iot's, as it declares it
        def __init__(self, session_id: str):
            self.session_id = session_id
            super().__init__(
                f"Session {session_id!r} is closed by compression; "
                "adopt its live continuation before appending messages"
            )

    class SessionTurnLeaseLostError(RuntimeError):
        pass

    checkout_errors.CompressionSessionClosedError = CompressionSessionClosedError  # type: ignore[attr-defined]
    checkout_errors.SessionTurnLeaseLostError = SessionTurnLeaseLostError  # type: ignore[attr-defined]
    with SessionDB(db_file) as older:  # no hermes_state_errors: Hermes 0.13-0.19's callers
        older.create_session("s", "telegram")
        older.end_session("s", "compression")
        older.append_message("s", "user", "written where 0.19 asked")
    monkeypatch.setitem(sys.modules, "hermes_state_errors", checkout_errors)
    with SessionDB(db_file) as db:
        written = db.get_messages("s")[0]["id"]
        for write in (
            lambda: db.append_message("s", "user", "refused"),
            lambda: db.append_messages_batch("s", [{"role": "user", "content": "refused"}]),
            lambda: db.replace_messages("s", [{"role": "user", "content": "refused"}]),
            lambda: db.append_delegation_delivery("s", "r", {"delegation_id": "d"}),
            # An /undo belongs to the live continuation too (iot 0.22.2's guard).
            lambda: db.rewind_to_message("s", written),
        ):
            with pytest.raises(CompressionSessionClosedError) as closed:
                write()
            assert isinstance(closed.value, sessionstore.CompressionSessionClosedError)
            assert closed.value.session_id == "s"  # type: ignore[attr-defined]
            # Its words once: the twin is a copy (each __init__ once formatted them again).
            assert closed.value.args == (CLOSED_WORDS,)
            assert str(closed.value) == CLOSED_WORDS
        assert [m["content"] for m in db.get_messages("s")] == ["written where 0.19 asked"]
        assert db.get_messages("s")[0]["active"] == 1  # not rewound
        db.create_session("live", "telegram")
        assert db.try_acquire_session_turn_lease("live", "turn-1", ttl_seconds=600)
        with pytest.raises(SessionTurnLeaseLostError) as lost:
            db.append_message("live", "assistant", "stale", turn_lease_holder="turn-0")
        assert isinstance(lost.value, sessionstore.SessionTurnLeaseLostError)
        db.append_message("live", "user", "the live tip takes it", turn_lease_holder="turn-1")
        assert db.message_count("live") == 1



ROUTE = {"provider": "openrouter", "base_url": "https://openrouter.ai/api/v1"}


def test_a_route_change_keeps_the_prompt_under_an_iot_0222_checkout(
    db_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Hermes 0.18-0.19 and iot up to 0.21 drop the stored prompt at a route change (their
    # own tests pin it, #48173); iot 0.22.2 keeps it (tests/hermes/test_real_iot_row_edits.py).
    monkeypatch.delitem(sys.modules, "hermes_state_errors", raising=False)
    with SessionDB(db_file) as db:
        db.create_session("s", "cli", system_prompt="You are Hermes.")
        db.update_session_billing_route("s", **ROUTE)
        assert db.get_session("s")["system_prompt"] is None
        db.update_system_prompt("s", "You are Hermes.")
    checkout_errors = type(sys)("hermes_state_errors")

    class SessionActiveWriteGuardError(RuntimeError):  # iot 0.22.2's, as it declares it
        pass

    checkout_errors.SessionActiveWriteGuardError = SessionActiveWriteGuardError  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "hermes_state_errors", checkout_errors)
    with SessionDB(db_file) as db:
        db.update_session_billing_route("s", **ROUTE, billing_mode="api")
        row = db.get_session("s")
        assert row is not None
        assert (row["system_prompt"], row["billing_provider"], row["billing_mode"]) == (
            "You are Hermes.", "openrouter", "api")


def test_an_append_into_a_compression_closed_session_is_refused_where_callers_catch_it(
    db_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # iot 0.20.x-0.21.2 and axisrow 0.20.1 declare CompressionSessionClosedError in
    # hermes_state itself (our module, in their checkout): their gateway imports it from there
    # and writes the message to the live continuation. Their /undo rewinds the closed parent
    # and catches no refusal (tests/hermes/test_real_axisrow_closed_compression.py).
    monkeypatch.delitem(sys.modules, "hermes_state_errors", raising=False)
    package = tmp_path / "checkout" / "gateway"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "session.py").write_text(
        "def append(db, sid, msg):\n"
        "    try:\n        db.append_message(sid, **msg)\n"
        "    except Exception as exc:\n"
        "        from hermes_state import CompressionSessionClosedError\n"
        "        if isinstance(exc, CompressionSessionClosedError):\n"
        "            db.append_message(db.get_compression_tip(sid), **msg)\n"
    )
    with SessionDB(db_file) as older:  # no such caller: Hermes 0.13-0.19
        older.create_session("s", "telegram")
        older.append_message("s", "user", "one")
        older.end_session("s", "compression")
        older.create_session("live", "telegram", parent_session_id="s")
        older.append_message("s", "user", "written where 0.19 asked")
    monkeypatch.syspath_prepend(str(tmp_path / "checkout"))
    with SessionDB(db_file) as db:
        for write in (
            lambda: db.append_message("s", "user", "refused"),
            lambda: db.append_messages_batch("s", [{"role": "user", "content": "refused"}]),
            lambda: db.replace_messages("s", [{"role": "user", "content": "refused"}]),
        ):
            with pytest.raises(hermes_state_module.CompressionSessionClosedError):
                write()
        first = db.get_messages("s")[0]["id"]
        assert db.rewind_to_message("s", first)["rewound_count"] == 2
        assert [m["content"] for m in db.get_messages("s")] == []
        assert db.get_messages("live") == []
