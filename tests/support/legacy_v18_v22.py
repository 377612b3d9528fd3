"""Hermes schema v18...v22 (hermes-agent 0.18.1/0.18.2 write 19, 0.19.0 writes 22): the shapes.

Read from the released wheels' ``hermes_state.py`` (``SCHEMA_SQL`` and ``DEFERRED_INDEX_SQL``;
`/work/shared/HERMES-V18-PLUS.md` section 2 has the sources). What a store at our head must
have for Hermes 0.19.0's open to add and rebuild nothing; `tests/support/real_hermes.py` runs the
real wheels where the real thing is needed.
"""

from __future__ import annotations

import re
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

from legacy_v7_v17 import HEAD_INDEXES as V17_INDEXES
from legacy_v7_v17 import LATER_ROOT, build_later_db

V22_VERSION = 22

# Hermes 0.19.0's declared column order (a fresh file's physical order).
V22_SESSION_NAMES = (
    "id", "source", "user_id", "session_key", "chat_id", "chat_type", "thread_id",
    "display_name", "origin_json", "expiry_finalized", "model", "model_config", "system_prompt",
    "parent_session_id", "started_at", "ended_at", "end_reason", "message_count",
    "tool_call_count", "input_tokens", "output_tokens", "cache_read_tokens",
    "cache_write_tokens", "reasoning_tokens", "cwd", "git_branch", "git_repo_root",
    "billing_provider", "billing_base_url", "billing_mode", "estimated_cost_usd",
    "actual_cost_usd", "cost_status", "cost_source", "pricing_version", "title",
    "api_call_count", "handoff_state", "handoff_platform", "handoff_error",
    "compression_failure_cooldown_until", "compression_failure_error",
    "compression_fallback_streak", "profile_name", "rewind_count", "archived",
)  # fmt: skip
V22_MESSAGE_NAMES = (
    "id", "session_id", "role", "content", "tool_call_id", "tool_calls", "tool_name",
    "effect_disposition", "timestamp", "token_count", "finish_reason", "reasoning",
    "reasoning_content", "reasoning_details", "codex_reasoning_items", "codex_message_items",
    "platform_message_id", "observed", "active", "compacted", "api_content",
)  # fmt: skip
V22_USAGE_NAMES = (
    "session_id", "model", "billing_provider", "billing_base_url", "billing_mode", "task",
    "api_call_count", "input_tokens", "output_tokens", "cache_read_tokens",
    "cache_write_tokens", "reasoning_tokens", "estimated_cost_usd", "actual_cost_usd",
    "cost_status", "cost_source", "first_seen", "last_seen",
)  # fmt: skip
V22_USAGE_KEY = (
    "session_id", "model", "billing_provider", "billing_base_url", "billing_mode", "task",
)  # fmt: skip
V21_USAGE_KEY = V22_USAGE_KEY[:-1]
V22_ROUTING_NAMES = ("scope", "session_key", "entry_json", "updated_at")
V22_ROUTING_KEY = ("scope", "session_key")
V22_DELEGATION_NAMES = (
    "delegation_id", "origin_session", "origin_ui_session_id", "parent_session_id", "state",
    "dispatched_at", "completed_at", "updated_at", "event_json", "result_json",
    "delivery_state", "delivery_attempts", "delivered_at", "owner_pid", "owner_started_at",
    "task_json", "delivery_claim", "delivery_claimed_at",
)  # fmt: skip
V22_INDEXES = V17_INDEXES | {
    "idx_messages_active_null", "idx_session_model_usage_session",
    "idx_session_model_usage_model", "idx_async_delegations_delivery",
}  # fmt: skip

# The tables each version adds, and its new columns (revision 0026 ... 0030).
ADDED_TABLES = {
    18: set(), 19: {"gateway_routing"}, 20: {"session_model_usage"}, 21: {"async_delegations"},
    22: set(),
}  # fmt: skip
ADDED_COLUMNS = {
    18: {"sessions": {"display_name", "origin_json", "expiry_finalized"}},
    21: {
        "sessions": {"compression_fallback_streak", "profile_name"},
        "messages": {"effect_disposition", "api_content"},
    },
}
REVISION_OF = {17: "0025", 18: "0026", 19: "0027", 20: "0028", 21: "0029", 22: "0030"}
"""The revision at which a store is each Hermes schema (0025 is v17 with our search objects)."""


# -- synthetic files of v18...v22 and their field variants ------------------------------------
# Hermes 0.18.1 and 0.19.0 upgrade a v17 file by opening it: their reconciler appends the new
# columns (quoted, as below), ``SCHEMA_SQL`` creates the new tables, ``DEFERRED_INDEX_SQL`` the
# new index. These builders do the same to a v17 file of `legacy_v7_v17.build_later_db`, then
# write what a user's Hermes 0.19.0 writes there, and then the variant seen in the field.
RECONCILED_COLUMNS = (
    ("sessions", "display_name", "TEXT"),
    ("sessions", "origin_json", "TEXT"),
    ("sessions", "expiry_finalized", "INTEGER DEFAULT 0"),
    ("sessions", "compression_fallback_streak", "INTEGER NOT NULL DEFAULT 0"),
    ("sessions", "profile_name", "TEXT"),
    ("messages", "effect_disposition", "TEXT"),
    ("messages", "api_content", "TEXT"),
)
ROUTING_DDL = (
    "CREATE TABLE IF NOT EXISTS gateway_routing (scope TEXT NOT NULL DEFAULT '', session_key TEXT"
    " NOT NULL, entry_json TEXT NOT NULL, updated_at REAL NOT NULL, PRIMARY KEY (scope,"
    " session_key))"
)
SCOPELESS_ROUTING_DDL = (
    "CREATE TABLE gateway_routing (session_key TEXT PRIMARY KEY, entry_json TEXT NOT NULL,"
    " updated_at REAL NOT NULL)"
)
"""Early builds of the routing index (#59203): no scope."""
_USAGE_COLUMNS = (
    "session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE, model TEXT NOT NULL,"
    " billing_provider TEXT NOT NULL DEFAULT '', billing_base_url TEXT NOT NULL DEFAULT '',"
    " billing_mode TEXT NOT NULL DEFAULT '', {task}api_call_count INTEGER NOT NULL DEFAULT 0,"
    " input_tokens INTEGER NOT NULL DEFAULT 0, output_tokens INTEGER NOT NULL DEFAULT 0,"
    " cache_read_tokens INTEGER NOT NULL DEFAULT 0, cache_write_tokens INTEGER NOT NULL DEFAULT"
    " 0, reasoning_tokens INTEGER NOT NULL DEFAULT 0, estimated_cost_usd REAL NOT NULL DEFAULT 0,"
    " actual_cost_usd REAL NOT NULL DEFAULT 0, cost_status TEXT, cost_source TEXT, first_seen"
    " REAL, last_seen REAL"
)
USAGE_DDL = (
    f"CREATE TABLE IF NOT EXISTS session_model_usage ("
    f"{_USAGE_COLUMNS.format(task=chr(32) + 'task TEXT NOT NULL DEFAULT ' + repr('') + ',')},"
    " PRIMARY KEY (session_id, model, billing_provider, billing_base_url, billing_mode, task))"
)
ROUTE_KEYED_USAGE_DDL = (
    f"CREATE TABLE session_model_usage ({_USAGE_COLUMNS.format(task='')}, PRIMARY KEY"
    " (session_id, model, billing_provider, billing_base_url, billing_mode))"
)
"""The v20/v21 key; in a file numbered 22 or more, the #73823 shape (task added plain)."""
DELEGATIONS_DDL = (
    "CREATE TABLE IF NOT EXISTS async_delegations (delegation_id TEXT PRIMARY KEY, origin_session"
    " TEXT NOT NULL, origin_ui_session_id TEXT NOT NULL DEFAULT '', parent_session_id TEXT, state"
    " TEXT NOT NULL, dispatched_at REAL NOT NULL, completed_at REAL, updated_at REAL NOT NULL,"
    " event_json TEXT, result_json TEXT, delivery_state TEXT NOT NULL DEFAULT 'pending',"
    " delivery_attempts INTEGER NOT NULL DEFAULT 0, delivered_at REAL, owner_pid INTEGER,"
    " owner_started_at INTEGER, task_json TEXT, delivery_claim TEXT, delivery_claimed_at REAL)"
)
V22_INDEX_DDL = (
    "CREATE INDEX IF NOT EXISTS idx_session_model_usage_session ON session_model_usage(session_id)",
    "CREATE INDEX IF NOT EXISTS idx_session_model_usage_model ON session_model_usage(model)",
    "CREATE INDEX IF NOT EXISTS idx_async_delegations_delivery"
    " ON async_delegations(delivery_state, completed_at)",
    "CREATE INDEX IF NOT EXISTS idx_messages_active_null ON messages(active) WHERE active IS NULL",
)
V22_VARIANTS = ("route_keyed_usage", "scopeless_routing", "active_without_default", "unbumped")
"""``route_keyed_usage``: #73823 (5-column usage key at 22, ``task`` a plain column);
``scopeless_routing``: #59203's early table; ``active_without_default``: #51646 (the flag a plain
``INTEGER``, NULL in rows a writer left it out of); ``unbumped``: 0.19.0's objects in a file its
FTS5-less runtime left numbered 17."""
USAGE_ROWS = (
    # session, model, provider, task, calls, input, output, cost
    (LATER_ROOT, "kimi-k2", "moonshot", "", 3, 1500, 320, 0.0042),
    (LATER_ROOT, "gemini-flash", "google", "vision", 1, 800, 12, 0.0001),
)
ROUTING_ROWS = (
    ("", "agent:main:telegram:dm:42", '{"session_id": "later-root-0001"}', 1_700_000_500.0),
    ("profile:work", "agent:main:telegram:dm:42", '{"session_id": "x"}', 1_700_000_600.0),
)


def build_v22_db(path: str | Path, *, variant: str | None = None, version: int = 22) -> None:
    """A Hermes file of schema ``version`` (18...22) in Hermes 0.19.0's shape, with rows in
    every table it added, or one of ``V22_VARIANTS``."""
    if variant is not None and variant not in V22_VARIANTS:
        raise ValueError(f"unknown variant {variant!r}")
    build_later_db(path, 17)
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("BEGIN")
        for table, column, declared in RECONCILED_COLUMNS:
            conn.execute(f'ALTER TABLE "{table}" ADD COLUMN "{column}" {declared}')
        conn.execute(SCOPELESS_ROUTING_DDL if variant == "scopeless_routing" else ROUTING_DDL)
        if variant == "route_keyed_usage":
            conn.execute(ROUTE_KEYED_USAGE_DDL)
            conn.execute(
                "ALTER TABLE \"session_model_usage\" ADD COLUMN \"task\" TEXT NOT NULL DEFAULT ''"
            )
        else:
            conn.execute(USAGE_DDL)
        conn.execute(DELEGATIONS_DDL)
        for statement in V22_INDEX_DDL:
            conn.execute(statement)
        for session, model, provider, task, calls, tokens_in, tokens_out, cost in USAGE_ROWS:
            conn.execute(
                "INSERT INTO session_model_usage (session_id, model, billing_provider, task,"
                " api_call_count, input_tokens, output_tokens, estimated_cost_usd, first_seen,"
                " last_seen) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1700000000.5, 1700000900.25)",
                (session, model, provider, task, calls, tokens_in, tokens_out, cost),
            )
        for scope, key, entry, updated in ROUTING_ROWS:
            if variant == "scopeless_routing":
                if scope:
                    continue  # one scope only: the key has no room for two
                conn.execute(
                    "INSERT INTO gateway_routing (session_key, entry_json, updated_at)"
                    " VALUES (?, ?, ?)",
                    (key, entry, updated),
                )
            else:
                conn.execute(
                    "INSERT INTO gateway_routing VALUES (?, ?, ?, ?)", (scope, key, entry, updated)
                )
        conn.execute(
            "INSERT INTO async_delegations (delegation_id, origin_session, state, dispatched_at,"
            " updated_at, owner_pid, owner_started_at, task_json) VALUES ('deleg-1', ?, 'done',"
            " 1700000100.0, 1700000200.0, 4242, 17000001234567, '{\"goal\": \"部署\"}')",
            (LATER_ROOT,),
        )
        conn.execute(
            "UPDATE messages SET api_content = '[exact bytes]', effect_disposition = 'applied'"
            " WHERE id = (SELECT MIN(id) FROM messages)"
        )
        conn.execute(
            "UPDATE sessions SET display_name = 'Alice', origin_json = '{\"chat_id\": \"42\"}',"
            " profile_name = 'work' WHERE id = ?",
            (LATER_ROOT,),
        )
        if variant == "active_without_default":
            # Every row stores its flag first: a row written before an ADD COLUMN stores none
            # and reads the declared default, which the redefinition below takes away.
            conn.execute("UPDATE messages SET active = active")
            _redefine_column(conn, "messages", "active", "INTEGER")
            conn.execute(
                "UPDATE messages SET active = NULL WHERE id IN"
                " (SELECT id FROM messages WHERE active = 1 ORDER BY id LIMIT 2)"
            )
        number = 17 if variant == "unbumped" else version
        conn.execute("UPDATE schema_version SET version = ?", (number,))
        conn.execute("COMMIT")


def _redefine_column(conn: sqlite3.Connection, table: str, column: str, declared: str) -> None:
    """What an older reconciler left: the column's text in the stored CREATE TABLE replaced."""
    (create_sql,) = conn.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
    ).fetchone()
    pattern = re.compile(rf'([(,]\s*)("?{column}"?)\s+[^,()]*?(\s*(?:,|\)\s*$))')
    rewritten, count = pattern.subn(rf"\1\2 {declared}\3", create_sql)
    assert count == 1, create_sql
    (cookie,) = conn.execute("PRAGMA schema_version").fetchone()
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute(
        "UPDATE sqlite_master SET sql = ? WHERE type = 'table' AND name = ?", (rewritten, table)
    )
    conn.execute(f"PRAGMA schema_version = {cookie + 1}")
    conn.execute("PRAGMA writable_schema = OFF")


def all_rows(path: str | Path, table: str) -> list[dict[str, Any]]:
    with closing(sqlite3.connect(path)) as conn:
        conn.row_factory = sqlite3.Row
        return [dict(row) for row in conn.execute(f'SELECT * FROM "{table}" ORDER BY rowid')]


def primary_key(path: str | Path, table: str) -> list[str]:
    with closing(sqlite3.connect(path)) as conn:
        info = conn.execute(f'PRAGMA table_info("{table}")').fetchall()
    return [row[1] for row in sorted((row for row in info if row[5]), key=lambda row: row[5])]
