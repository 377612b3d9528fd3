"""Builders for legacy Hermes `state.db` files, schema v1 to v6, clean and messy.

A file is built the way Hermes built it in the field: the v1 DDL, then one ALTER per later
step, with `schema_version` holding the version number. The rows are deterministic (seeded)
and realistic: a compression chain, several platforms, tool calls, CJK and emoji text, NULL
content, token and billing values where the version has the columns.

Used by `tests/schema/test_hermes_v1_v6_files.py` and by `scripts/make_legacy_fixtures.py`, which
writes the whole set to a directory. This module only uses the standard library so the script runs
without the package installed.
"""

from __future__ import annotations

import json
import random
import sqlite3
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

OLDEST_VERSION = 1
NEWEST_KNOWN_VERSION = 6
TOO_NEW_VERSION = 32

# The messy shapes real databases come in (SPEC §3). Each name maps to the versions it makes
# sense for; `build_legacy_db` refuses the rest rather than building something misleading.
VARIANT_VERSIONS: dict[str, tuple[int, ...]] = {
    # v3 is the only version that can hold duplicate titles: v4 added the unique index.
    "duplicate_titles": (3,),
    # An older Hermes applied part of the next step before dying: a column or index from
    # step N+1 already exists while schema_version still says N.
    "half_applied": (1, 2, 3, 4, 5),
    # The FTS5 table and its triggers are missing (dropped by a repair tool, or never built).
    "no_fts": (1, 2, 3, 4, 5, 6),
    # A newer Hermes than the newest we know (31) wrote schema_version 32 and a new column.
    "too_new": (6,),
    # JSON columns hold text that is not JSON (truncated writes, hand edits).
    "malformed_json": (1, 2, 3, 4, 5, 6),
    # The schema_version table exists but holds no row.
    "empty_schema_version": (1,),
}

FTS_TRIGGER_NAMES = ("messages_fts_insert", "messages_fts_delete", "messages_fts_update")
V1_INDEX_NAMES = (
    "idx_sessions_source",
    "idx_sessions_parent",
    "idx_sessions_started",
    "idx_messages_session",
)
TITLE_INDEX_NAME = "idx_sessions_title_unique"

# Words the fixture content is written to contain as whole FTS5 tokens (unicode61 keeps a run
# of CJK characters together, so the CJK probes stand between spaces or punctuation).
FTS_PROBE_WORDS = ("alembic", "数据库", "表", "日本語", "한국어")

# --- DDL, verbatim from Hermes (hermes_state.py), comments removed ------------------------

_V1_DDL = """
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
    token_count INTEGER
);

CREATE INDEX IF NOT EXISTS idx_sessions_source ON sessions(source);
CREATE INDEX IF NOT EXISTS idx_sessions_parent ON sessions(parent_session_id);
CREATE INDEX IF NOT EXISTS idx_sessions_started ON sessions(started_at DESC);
CREATE INDEX IF NOT EXISTS idx_messages_session ON messages(session_id, timestamp);
"""

FTS_DDL = """
CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5(
    content,
    content=messages,
    content_rowid=id
);

CREATE TRIGGER IF NOT EXISTS messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END;

CREATE TRIGGER IF NOT EXISTS messages_fts_delete AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content)
        VALUES('delete', old.id, old.content);
END;

CREATE TRIGGER IF NOT EXISTS messages_fts_update AFTER UPDATE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content)
        VALUES('delete', old.id, old.content);
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END;
"""

_V5_SESSION_COLUMNS: tuple[tuple[str, str], ...] = (
    ("cache_read_tokens", "INTEGER DEFAULT 0"),
    ("cache_write_tokens", "INTEGER DEFAULT 0"),
    ("reasoning_tokens", "INTEGER DEFAULT 0"),
    ("billing_provider", "TEXT"),
    ("billing_base_url", "TEXT"),
    ("billing_mode", "TEXT"),
    ("estimated_cost_usd", "REAL"),
    ("actual_cost_usd", "REAL"),
    ("cost_status", "TEXT"),
    ("cost_source", "TEXT"),
    ("pricing_version", "TEXT"),
)
_V6_MESSAGE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("reasoning", "TEXT"),
    ("reasoning_details", "TEXT"),
    ("codex_reasoning_items", "TEXT"),
)


def _add_column(table: str, name: str, sql_type: str) -> str:
    # Hermes quoted the names of the columns it added in bulk (v5, v6); harmless elsewhere.
    return f'ALTER TABLE {table} ADD COLUMN "{name}" {sql_type}'


# The statements that take a v(N-1) file to vN, exactly as Hermes ran them.
STEP_DDL: dict[int, tuple[str, ...]] = {
    2: ("ALTER TABLE messages ADD COLUMN finish_reason TEXT",),
    3: ("ALTER TABLE sessions ADD COLUMN title TEXT",),
    4: (
        "CREATE UNIQUE INDEX IF NOT EXISTS idx_sessions_title_unique "
        "ON sessions(title) WHERE title IS NOT NULL",
    ),
    5: tuple(_add_column("sessions", name, sql_type) for name, sql_type in _V5_SESSION_COLUMNS),
    6: tuple(_add_column("messages", name, sql_type) for name, sql_type in _V6_MESSAGE_COLUMNS),
}

_V1_SESSION_COLUMNS = (
    "id", "source", "user_id", "model", "model_config", "system_prompt", "parent_session_id",
    "started_at", "ended_at", "end_reason", "message_count", "tool_call_count", "input_tokens",
    "output_tokens",
)  # fmt: skip
_V1_MESSAGE_COLUMNS = (
    "id", "session_id", "role", "content", "tool_call_id", "tool_calls", "tool_name",
    "timestamp", "token_count",
)  # fmt: skip


def session_columns(version: int) -> tuple[str, ...]:
    """The columns of `sessions` in a Hermes file of this schema version, in table order."""
    columns: tuple[str, ...] = _V1_SESSION_COLUMNS
    if version >= 3:
        columns += ("title",)
    if version >= 5:
        columns += tuple(name for name, _ in _V5_SESSION_COLUMNS)
    return columns


def message_columns(version: int) -> tuple[str, ...]:
    """The columns of `messages` in a Hermes file of this schema version, in table order."""
    columns: tuple[str, ...] = _V1_MESSAGE_COLUMNS
    if version >= 2:
        columns += ("finish_reason",)
    if version >= 6:
        columns += tuple(name for name, _ in _V6_MESSAGE_COLUMNS)
    return columns


# Columns that Hermes declared with DEFAULT 0; every other added column defaults to NULL.
ZERO_DEFAULT_COLUMNS = frozenset(
    {
        "message_count",
        "tool_call_count",
        "input_tokens",
        "output_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
        "reasoning_tokens",
    }
)


def column_default(column: str) -> int | None:
    """The value a pre-existing row takes when this Hermes column is added to its table."""
    return 0 if column in ZERO_DEFAULT_COLUMNS else None


# --- the rows ---------------------------------------------------------------------------

_BASE_TIME = 1_735_689_600.0  # 2025-01-01T00:00:00Z: a plausible Hermes era, fixed for tests
_DAY = 86_400.0


@dataclass
class _Message:
    role: str
    content: str | None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    finish_reason: str | None = None
    reasoning: str | None = None
    reasoning_details: list[dict[str, Any]] | None = None
    codex_reasoning_items: list[dict[str, Any]] | None = None


@dataclass
class _Session:
    key: str
    source: str
    started_offset: float
    title: str | None
    ended_offset: float | None = None
    end_reason: str | None = None
    parent_key: str | None = None
    user_id: str | None = None
    model: str | None = "anthropic/claude-sonnet-4"
    model_config: dict[str, Any] | None = field(
        default_factory=lambda: {"temperature": 0.7, "max_tokens": 8192}
    )
    system_prompt: str | None = (
        "You are Hermes, a helpful coding agent.\nWork in small, verified steps.\n"
        "Answer in the user's language."
    )
    billing: dict[str, Any] | None = None
    messages: list[_Message] = field(default_factory=list)


def _tool_call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)},
    }


def _conversation_sessions() -> list[_Session]:
    """Six sessions, listed in insertion order (deliberately not start-time order)."""
    root = _Session(
        key="root",
        source="cli",
        started_offset=0.0,
        ended_offset=1800.5,
        end_reason="compression",
        title="数据库迁移",
        model_config={"temperature": 0.2, "max_tokens": 16384, "reasoning_effort": "medium"},
        billing={
            "billing_provider": "openrouter",
            "billing_base_url": "https://openrouter.ai/api/v1",
            "billing_mode": "official_docs_snapshot",
            "estimated_cost_usd": 0.0842,
            "actual_cost_usd": 0.0839,
            "cost_status": "final",
            "cost_source": "provider_generation",
            "pricing_version": "2025-01-15",
        },
        messages=[
            _Message("user", "请帮我把 数据库 迁移到 Alembic，保留所有旧数据。"),
            _Message(
                "assistant",
                None,
                tool_calls=[_tool_call("call_r1", "read_file", {"path": "hermes_state.py"})],
                finish_reason="tool_calls",
                reasoning="I should read the current schema before proposing migrations.",
                reasoning_details=[
                    {
                        "type": "reasoning.text",
                        "text": "Read the schema first.",
                        "format": "anthropic-claude-v1",
                        "index": 0,
                    }
                ],
            ),
            _Message(
                "tool",
                'SCHEMA_VERSION = 6\n\nclass SessionDB:\n    """SQLite-backed session store."""\n',
                tool_call_id="call_r1",
                tool_name="read_file",
            ),
            _Message(
                "assistant",
                "Plan:\n1. Stamp the legacy file.\n2. Run `alembic upgrade head`.\n"
                "3. Verify the FTS index.\n\n表 sessions 和 messages 都会保留。",
                finish_reason="stop",
                reasoning="Stamping first avoids re-running steps Hermes already applied.",
            ),
            _Message("user", "Also check the triggers survive batch mode 🙏"),
            _Message(
                "assistant",
                None,
                tool_calls=[
                    _tool_call("call_r2", "terminal", {"command": "sqlite3 state.db .schema"}),
                    _tool_call("call_r3", "search_files", {"pattern": "messages_fts"}),
                ],
                finish_reason="tool_calls",
            ),
            _Message(
                "tool",
                "CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN ...",
                tool_call_id="call_r2",
                tool_name="terminal",
            ),
            _Message(
                "tool",
                json.dumps({"matches": 3, "files": ["hermes_state.py"]}),
                tool_call_id="call_r3",
                tool_name="search_files",
            ),
            _Message(
                "assistant",
                "All three triggers are present; context is getting long, compressing now.",
                finish_reason="stop",
            ),
        ],
    )
    child = _Session(
        key="child",
        source="cli",
        parent_key="root",
        started_offset=1801.25,
        ended_offset=3600.0,
        end_reason="compression",
        title="数据库迁移 #2",
        billing={
            "billing_provider": "openrouter",
            "billing_base_url": "https://openrouter.ai/api/v1",
            "billing_mode": "official_docs_snapshot",
            "estimated_cost_usd": 0.0311,
            "cost_status": "estimated",
            "cost_source": "pricing_table",
            "pricing_version": "2025-01-15",
        },
        messages=[
            _Message(
                "user",
                "[CONTEXT SUMMARY] We are moving the Hermes 数据库 to Alembic.\n"
                "Done: schema read, triggers checked.",
            ),
            _Message(
                "assistant",
                None,
                tool_calls=[
                    _tool_call(
                        "call_c1", "write_file", {"path": "migrations/0001.py", "content": "..."}
                    )
                ],
                finish_reason="tool_calls",
                codex_reasoning_items=[
                    {
                        "type": "reasoning",
                        "id": "rs_0a1b2c3d",
                        "encrypted_content": "gAAAAABn-opaque-blob==",
                        "summary": [{"type": "summary_text", "text": "Write revision 0001."}],
                    }
                ],
            ),
            _Message("tool", "", tool_call_id="call_c1", tool_name="write_file"),
            _Message("assistant", "Revision 0001 written. ✅", finish_reason="stop"),
            _Message("user", "日本語 のテストも追加してください。"),
            _Message(
                "assistant",
                "追加しました：日本語 と 한국어 のメッセージを検索するテストです。",
                finish_reason="stop",
                reasoning="ユーザーは日本語で書いている。",
            ),
        ],
    )
    grandchild = _Session(
        key="grandchild",
        source="cli",
        parent_key="child",
        started_offset=3600.75,
        title="数据库迁移 #3",
        messages=[
            _Message("user", "Continue: run the alembic upgrade on a copy of state.db"),
            _Message(
                "assistant",
                None,
                tool_calls=[_tool_call("call_g1", "terminal", {"command": "alembic upgrade head"})],
                finish_reason="tool_calls",
            ),
            _Message(
                "tool",
                "INFO  [alembic.runtime.migration] Running upgrade  -> 0001\n"
                "INFO  [alembic.runtime.migration] Running upgrade 0001 -> 0002",
                tool_call_id="call_g1",
                tool_name="terminal",
            ),
            _Message("assistant", None, finish_reason="length"),
            _Message("user", "继续。"),
            _Message(
                "assistant",
                "The upgrade reached head.\n\n"
                "| step | status |\n|------|--------|\n| 0001 | ok |\n| 0006 | ok |",
                finish_reason="stop",
                reasoning_details=[
                    {"type": "reasoning.summary", "summary": "Report the table.", "index": 0}
                ],
            ),
            _Message(
                "assistant",
                None,
                tool_calls=[
                    _tool_call(
                        "call_g2",
                        "terminal",
                        {"command": "sqlite3 state.db 'PRAGMA integrity_check'"},
                    ),
                    _tool_call("call_g3", "read_file", {"path": "~/.hermes/config.yaml"}),
                    _tool_call("call_g4", "web_search", {"query": "FTS5 trigram 中文 搜索"}),
                ],
                finish_reason="tool_calls",
            ),
            _Message("tool", "ok", tool_call_id="call_g2", tool_name="terminal"),
            _Message(
                "tool",
                "model:\n  default: anthropic/claude-sonnet-4\n",
                tool_call_id="call_g3",
                tool_name="read_file",
            ),
            _Message(
                "tool",
                json.dumps(
                    {
                        "results": [
                            {
                                "title": "SQLite FTS5 trigram 分词器",
                                "url": "https://sqlite.org/fts5.html",
                            }
                        ]
                    },
                    ensure_ascii=False,
                ),
                tool_call_id="call_g4",
                tool_name="web_search",
            ),
            _Message("user", "   "),
            _Message("assistant", "Integrity ok; 表 已经 检查 完毕 ✔️", finish_reason="stop"),
        ],
    )
    telegram = _Session(
        key="telegram",
        source="telegram",
        user_id="728491635",
        started_offset=-3 * _DAY,
        ended_offset=-3 * _DAY + 5400.0,
        end_reason="user_exit",
        title="Telegram 日本語 chat",
        model="openai/gpt-4o",
        model_config={"temperature": 1.0},
        system_prompt="You are Hermes on Telegram. Keep answers short.",
        billing={
            "billing_provider": "openai",
            "billing_base_url": "https://api.openai.com/v1",
            "billing_mode": "subscription_included",
            "estimated_cost_usd": 0.0,
            "cost_status": "included",
            "cost_source": "none",
        },
        messages=[
            _Message("user", "こんにちは！日本語 で話せますか？"),
            _Message(
                "assistant", "はい、話せます 😊 何をお手伝いしましょうか？", finish_reason="stop"
            ),
            _Message("user", "한국어 도 돼요?"),
            _Message("assistant", "네, 한국어 도 가능합니다. 🇰🇷", finish_reason="stop"),
            _Message("user", "Thanks!\nBye 👋"),
            _Message("assistant", "Bye!", finish_reason="stop"),
        ],
    )
    discord = _Session(
        key="discord",
        source="discord",
        user_id="1183726354912837632",
        started_offset=7200.0,
        title="🚀 deploy bot",
        model="nousresearch/hermes-4-405b",
        model_config=None,
        billing={
            "billing_provider": "nous",
            "billing_base_url": "https://inference-api.nousresearch.com/v1",
            "estimated_cost_usd": 0.0125,
            "cost_status": "estimated",
            "cost_source": "pricing_table",
            "pricing_version": "2025-02-01",
        },
        messages=[
            _Message("user", "deploy the staging bot please 🚀"),
            _Message(
                "assistant",
                "Deploying.",
                tool_calls=[
                    _tool_call("call_d1", "terminal", {"command": "make deploy ENV=staging"})
                ],
                finish_reason="tool_calls",
            ),
            _Message(
                "tool",
                "deploy: ok\nversion: 2025.02.01-rc1\n",
                tool_call_id="call_d1",
                tool_name="terminal",
            ),
            _Message(
                "assistant", "Staging is live ✅ — version 2025.02.01-rc1.", finish_reason="stop"
            ),
            _Message("user", "what changed in the 数据库 layer?"),
            _Message(
                "assistant",
                "Only the migration scripts: alembic now owns the schema.",
                finish_reason="stop",
            ),
        ],
    )
    idle_cli = _Session(
        key="idle",
        source="cli",
        started_offset=-10 * _DAY,
        ended_offset=-10 * _DAY + 3600.0,
        end_reason="timeout",
        title=None,
        model=None,
        model_config=None,
        system_prompt=None,
    )
    return [root, child, telegram, grandchild, discord, idle_cli]


def _duplicate_title_sessions(sessions: list[_Session]) -> list[_Session]:
    """Titles as a v3 database could hold them before v4's unique index existed.

    "refactor" x3 whose oldest holder (telegram) is neither first inserted nor first by id,
    an existing "refactor #2" the renumbering must step around, "数据库" x2 whose older
    holder is inserted last, and a "Refactor" that is not a duplicate (titles compare by case).
    """
    titles = {
        "root": "refactor",
        "child": "数据库",
        "telegram": "refactor",
        "grandchild": "数据库迁移 #3",
        "discord": "refactor #2",
        "idle": None,
    }
    retitled = [replace(s, title=titles[s.key]) for s in sessions]
    extra = [
        _Session(key="late_refactor", source="cli", started_offset=9000.0, title="refactor"),
        _Session(
            key="old_database",
            source="telegram",
            user_id="728491635",
            started_offset=-20 * _DAY,
            ended_offset=-20 * _DAY + 60.0,
            end_reason="user_exit",
            title="数据库",
            messages=[_Message("user", "数据库 是什么？"), _Message("assistant", "A database.")],
        ),
        _Session(key="capital_refactor", source="discord", started_offset=9500.0, title="Refactor"),
    ]
    return retitled + extra


def _session_ids(sessions: Sequence[_Session], rng: random.Random) -> dict[str, str]:
    # Ids sort in the reverse of start time, and rows are inserted in neither order, so code
    # that takes "oldest" to mean smallest id or rowid is caught.
    ids = sorted(
        (str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in sessions), reverse=True
    )
    by_start = sorted(sessions, key=lambda s: s.started_offset)
    return {session.key: session_id for session, session_id in zip(by_start, ids, strict=True)}


def _tool_call_weight(tool_calls: list[dict[str, Any]] | None) -> int:
    return len(tool_calls) if tool_calls else 0


def _session_rows(
    sessions: Sequence[_Session], ids: dict[str, str], rng: random.Random
) -> Iterator[dict[str, Any]]:
    for session in sessions:
        input_tokens = sum(rng.randint(200, 4000) for _ in session.messages)
        output_tokens = sum(rng.randint(20, 900) for _ in session.messages)
        row: dict[str, Any] = {
            "id": ids[session.key],
            "source": session.source,
            "user_id": session.user_id,
            "model": session.model,
            "model_config": (
                None if session.model_config is None else json.dumps(session.model_config)
            ),
            "system_prompt": session.system_prompt,
            "parent_session_id": ids[session.parent_key] if session.parent_key else None,
            "started_at": _BASE_TIME + session.started_offset,
            "ended_at": (
                None if session.ended_offset is None else _BASE_TIME + session.ended_offset
            ),
            "end_reason": session.end_reason,
            "message_count": len(session.messages),
            "tool_call_count": sum(_tool_call_weight(m.tool_calls) for m in session.messages),
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "title": session.title,
            # v5: cache/reasoning counters are set only where the session used the provider.
            "cache_read_tokens": input_tokens // 3 if session.billing else 0,
            "cache_write_tokens": input_tokens // 10 if session.billing else 0,
            "reasoning_tokens": output_tokens // 4 if session.billing else 0,
        }
        for name, _ in _V5_SESSION_COLUMNS:
            row.setdefault(name, (session.billing or {}).get(name))
        yield row


def _message_rows(
    sessions: Sequence[_Session], ids: dict[str, str], rng: random.Random
) -> Iterator[dict[str, Any]]:
    # Messages are written interleaved across sessions, as a busy gateway does, so message ids
    # are not grouped by session.
    queues = [(s, list(s.messages)) for s in sessions]
    while any(queue for _, queue in queues):
        for session, queue in queues:
            if not queue:
                continue
            message = queue.pop(0)
            position = len(session.messages) - len(queue)
            yield {
                "session_id": ids[session.key],
                "role": message.role,
                "content": message.content,
                "tool_call_id": message.tool_call_id,
                "tool_calls": (
                    None if message.tool_calls is None else json.dumps(message.tool_calls)
                ),
                "tool_name": message.tool_name,
                "timestamp": _BASE_TIME + session.started_offset + 7.5 * position + rng.random(),
                "token_count": rng.randint(5, 1200) if message.role != "tool" else None,
                "finish_reason": message.finish_reason,
                "reasoning": message.reasoning,
                "reasoning_details": _json_or_none(message.reasoning_details),
                "codex_reasoning_items": _json_or_none(message.codex_reasoning_items),
            }


def _json_or_none(value: list[dict[str, Any]] | None) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False)


def _insert(
    conn: sqlite3.Connection, table: str, row: dict[str, Any], columns: Sequence[str]
) -> None:
    present = [c for c in columns if c in row]
    placeholders = ", ".join("?" for _ in present)
    conn.execute(
        f"INSERT INTO {table} ({', '.join(present)}) VALUES ({placeholders})",
        [row[c] for c in present],
    )


def _table_columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]


# --- the public builder ---------------------------------------------------------------------


def build_legacy_db(
    path: str | Path,
    version: int,
    *,
    variant: str | None = None,
    journal_mode: str = "wal",
    seed: int = 6,
) -> None:
    """Write a Hermes database of schema `version` (1..6) at `path`, optionally messy.

    `variant` is one of VARIANT_VERSIONS; it must fit the version. Hermes switched every file
    to WAL, so that is the default; the file is closed cleanly (no -wal file left behind).
    """
    if not OLDEST_VERSION <= version <= NEWEST_KNOWN_VERSION:
        raise ValueError(f"Hermes schema versions are 1..6, not {version}")
    if variant is not None and version not in VARIANT_VERSIONS.get(variant, ()):
        raise ValueError(f"variant {variant!r} does not apply to a v{version} database")
    path = Path(path)
    if path.exists():
        raise FileExistsError(f"refusing to overwrite {path}")

    rng = random.Random(seed * 1000 + version)
    sessions = _conversation_sessions()
    if variant == "duplicate_titles":
        sessions = _duplicate_title_sessions(sessions)
    ids = _session_ids(sessions, rng)

    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(f"PRAGMA journal_mode={journal_mode}")
        conn.execute("BEGIN")
        for statement in _statements(_V1_DDL):
            conn.execute(statement)
        if variant != "no_fts":
            for statement in _statements(FTS_DDL):
                conn.execute(statement)
        for step in range(2, version + 1):
            for statement in STEP_DDL[step]:
                conn.execute(statement)
        if variant == "half_applied":
            _apply_first_part_of_step(conn, version + 1)
        if variant == "too_new":
            # What a future Hermes might add; our code must not touch it (or anything else).
            conn.execute("ALTER TABLE sessions ADD COLUMN future_hermes_field TEXT")

        session_table_columns = _table_columns(conn, "sessions")
        message_table_columns = _table_columns(conn, "messages")
        for row in _session_rows(sessions, ids, rng):
            if variant == "too_new":
                row["future_hermes_field"] = "v32 data"
            _insert(conn, "sessions", row, session_table_columns)
        message_rows = list(_message_rows(sessions, ids, rng))
        if variant == "malformed_json":
            _corrupt_json(message_rows, version)
        for row in message_rows:
            _insert(conn, "messages", row, message_table_columns)

        if variant == "too_new":
            conn.execute("INSERT INTO schema_version (version) VALUES (?)", (TOO_NEW_VERSION,))
        elif variant != "empty_schema_version":
            conn.execute("INSERT INTO schema_version (version) VALUES (?)", (version,))
        conn.execute("COMMIT")
    finally:
        conn.close()


def _statements(script: str) -> list[str]:
    """Split a DDL script on the statement boundaries sqlite3 itself reports."""
    statements: list[str] = []
    pending = ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            statements.append(pending.strip())
            pending = ""
    if pending.strip():
        raise ValueError(f"incomplete SQL statement: {pending!r}")
    return statements


def _apply_first_part_of_step(conn: sqlite3.Connection, step: int) -> None:
    """Leave the file as an interrupted older Hermes did: the next step partly applied."""
    statements = STEP_DDL[step]
    # One statement is the whole of steps 2-4; v5 and v6 added several columns, of which an
    # interrupted run got through only the first.
    # The rows inserted afterwards fill the half-added column too, as that newer code did.
    conn.execute(statements[0])


def _corrupt_json(message_rows: list[dict[str, Any]], version: int) -> None:
    """Replace some JSON values with text a JSON parser rejects, as damaged files hold."""
    with_tool_calls = [row for row in message_rows if row["tool_calls"] is not None]
    with_tool_calls[0]["tool_calls"] = '[{"id": "call_r1", "type": "function", "function": {'
    with_tool_calls[1]["tool_calls"] = "not json at all 🙃"
    if version >= 6:
        with_details = [row for row in message_rows if row["reasoning_details"] is not None]
        with_details[0]["reasoning_details"] = "{'single': 'quoted'}"
        with_items = [row for row in message_rows if row["codex_reasoning_items"] is not None]
        with_items[0]["codex_reasoning_items"] = '[{"type": "reasoning", "id": "rs_'


@dataclass(frozen=True)
class FixtureSpec:
    """One file of the fixture set: where it goes and how it is built."""

    filename: str
    version: int
    variant: str | None = None
    journal_mode: str = "wal"


def fixture_set() -> list[FixtureSpec]:
    """Every fixture file, named so a reader knows what each holds without opening it."""
    specs = [FixtureSpec(f"hermes_v{v}.db", v) for v in range(1, NEWEST_KNOWN_VERSION + 1)]
    specs += [
        FixtureSpec("hermes_v3_duplicate_titles.db", 3, "duplicate_titles"),
        *(
            FixtureSpec(f"hermes_v{v}_half_applied_v{v + 1}.db", v, "half_applied")
            for v in VARIANT_VERSIONS["half_applied"]
        ),
        FixtureSpec("hermes_v2_no_fts.db", 2, "no_fts"),
        FixtureSpec("hermes_v6_no_fts.db", 6, "no_fts"),
        FixtureSpec("hermes_v32_too_new.db", 6, "too_new"),
        FixtureSpec("hermes_v32_too_new_rollback_journal.db", 6, "too_new", journal_mode="delete"),
        FixtureSpec("hermes_v6_malformed_json.db", 6, "malformed_json"),
        FixtureSpec("hermes_v1_empty_schema_version.db", 1, "empty_schema_version"),
    ]
    return specs


def write_fixture_set(out_dir: str | Path) -> list[Path]:
    """Build every fixture of `fixture_set()` in `out_dir` (created if needed); return the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for spec in fixture_set():
        target = out / spec.filename
        target.unlink(missing_ok=True)
        build_legacy_db(target, spec.version, variant=spec.variant, journal_mode=spec.journal_mode)
        written.append(target)
    return written
