"""Hermes schema v17 as newest Hermes writes it: gateway peers, plus the v16/v17-era columns.

Why: Hermes v17 (86e64900b) finds the session of a chat peer again after a restart through
``sessions.session_key``, ``chat_id``, ``chat_type``, ``thread_id`` and two indexes
(``idx_sessions_session_key``, ``idx_sessions_gateway_peer``). Also in every current file,
without a number of their own: ``messages.compacted`` (854d75723; ``NOT NULL DEFAULT 0``, the
compaction-archive flag beside ``active``), ``sessions.git_branch`` / ``git_repo_root``
(ffa3d3c81), and after the v17 bump ``sessions.compression_failure_cooldown_until`` /
``compression_failure_error`` (f2ccb2859) and ``idx_sessions_handoff_state`` (a23aa4320). A
file stamped 17 by the bump commit itself lacks those last three; they are added when absent,
like everything here.

A store this chain has just created holds no rows; its ``sessions`` and ``messages`` are then
rebuilt with their columns in newest Hermes's declared order (``helpers.
recreate_empty_table_in_order``), so that the file is the one newest Hermes would create, down
to the order of ``SELECT *``. Tables with rows keep their order (Hermes's own reconciler
appends too). Downgrade drops what this revision added (indexes first) and writes 16 back.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from sessionstore._migrations import helpers

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA_VERSION = 17
PEER_COLUMNS = ("session_key", "chat_id", "chat_type", "thread_id")
GIT_COLUMNS = ("git_branch", "git_repo_root")
COOLDOWN_COLUMNS = ("compression_failure_cooldown_until", "compression_failure_error")
SESSION_KEY_INDEX = "idx_sessions_session_key"
PEER_INDEX = "idx_sessions_gateway_peer"
HANDOFF_INDEX = "idx_sessions_handoff_state"
SESSION_INDEXES = (SESSION_KEY_INDEX, PEER_INDEX, HANDOFF_INDEX)

_ZERO = sa.text("0")
COUNTERS = (
    "message_count", "tool_call_count", "input_tokens", "output_tokens",
    "cache_read_tokens", "cache_write_tokens", "reasoning_tokens",
)  # fmt: skip
_METADATA = sa.MetaData()
HEAD_SESSIONS = sa.Table(
    "sessions",
    _METADATA,
    sa.Column("id", sa.Text(), nullable=False),
    sa.Column("source", sa.Text(), nullable=False),
    sa.Column("user_id", sa.Text()),
    *(sa.Column(name, sa.Text()) for name in PEER_COLUMNS),
    sa.Column("model", sa.Text()),
    sa.Column("model_config", sa.Text()),
    sa.Column("system_prompt", sa.Text()),
    sa.Column("parent_session_id", sa.Text()),
    sa.Column("started_at", helpers.REAL, nullable=False),
    sa.Column("ended_at", helpers.REAL),
    sa.Column("end_reason", sa.Text()),
    *(sa.Column(name, sa.Integer(), server_default=_ZERO) for name in COUNTERS),
    sa.Column("cwd", sa.Text()),
    *(sa.Column(name, sa.Text()) for name in GIT_COLUMNS),
    sa.Column("billing_provider", sa.Text()),
    sa.Column("billing_base_url", sa.Text()),
    sa.Column("billing_mode", sa.Text()),
    sa.Column("estimated_cost_usd", helpers.REAL),
    sa.Column("actual_cost_usd", helpers.REAL),
    sa.Column("cost_status", sa.Text()),
    sa.Column("cost_source", sa.Text()),
    sa.Column("pricing_version", sa.Text()),
    sa.Column("title", sa.Text()),
    sa.Column("api_call_count", sa.Integer(), server_default=_ZERO),
    sa.Column("handoff_state", sa.Text()),
    sa.Column("handoff_platform", sa.Text()),
    sa.Column("handoff_error", sa.Text()),
    sa.Column("compression_failure_cooldown_until", helpers.REAL),
    sa.Column("compression_failure_error", sa.Text()),
    sa.Column("rewind_count", sa.Integer(), nullable=False, server_default=_ZERO),
    sa.Column("archived", sa.Integer(), nullable=False, server_default=_ZERO),
    sa.PrimaryKeyConstraint("id", name="pk_sessions"),
    sa.ForeignKeyConstraint(
        ["parent_session_id"], ["sessions.id"], name="fk_sessions_parent_session_id_sessions"
    ),
)
HEAD_MESSAGES = sa.Table(
    "messages",
    _METADATA,
    sa.Column("id", sa.Integer(), autoincrement=True),
    sa.Column("session_id", sa.Text(), nullable=False),
    sa.Column("role", sa.Text(), nullable=False),
    sa.Column("content", sa.Text()),
    sa.Column("tool_call_id", sa.Text()),
    sa.Column("tool_calls", sa.Text()),
    sa.Column("tool_name", sa.Text()),
    sa.Column("timestamp", helpers.REAL, nullable=False),
    sa.Column("token_count", sa.Integer()),
    sa.Column("finish_reason", sa.Text()),
    sa.Column("reasoning", sa.Text()),
    sa.Column("reasoning_content", sa.Text()),
    sa.Column("reasoning_details", sa.Text()),
    sa.Column("codex_reasoning_items", sa.Text()),
    sa.Column("codex_message_items", sa.Text()),
    sa.Column("platform_message_id", sa.Text()),
    sa.Column("observed", sa.Integer(), server_default=_ZERO),
    sa.Column("active", sa.Integer(), nullable=False, server_default=sa.text("1")),
    sa.Column("compacted", sa.Integer(), nullable=False, server_default=_ZERO),
    sa.PrimaryKeyConstraint("id", name="pk_messages"),
    sa.ForeignKeyConstraint(
        ["session_id"], ["sessions.id"], name="fk_messages_session_id_sessions"
    ),
    sqlite_autoincrement=True,
)


def upgrade() -> None:
    helpers.add_columns_if_missing(
        "sessions",
        [
            *(sa.Column(name, sa.Text()) for name in (*PEER_COLUMNS, *GIT_COLUMNS)),
            sa.Column("compression_failure_cooldown_until", helpers.REAL),
            sa.Column("compression_failure_error", sa.Text()),
        ],
    )
    helpers.add_column_if_missing(
        "messages", sa.Column("compacted", sa.Integer(), nullable=False, server_default=_ZERO)
    )
    helpers.create_index_if_missing(
        SESSION_KEY_INDEX, "sessions", ["session_key", sa.text("started_at DESC")]
    )
    helpers.create_index_if_missing(
        PEER_INDEX,
        "sessions",
        ["source", "user_id", "chat_id", "chat_type", "thread_id", sa.text("started_at DESC")],
    )
    helpers.create_index_if_missing(HANDOFF_INDEX, "sessions", ["handoff_state", "started_at"])
    helpers.recreate_empty_table_in_order(HEAD_MESSAGES)
    helpers.recreate_empty_table_in_order(HEAD_SESSIONS)
    helpers.set_schema_version(SCHEMA_VERSION)


def downgrade() -> None:
    helpers.drop_indexes_then_columns(
        "sessions",
        list(SESSION_INDEXES),
        [*PEER_COLUMNS, *GIT_COLUMNS, *COOLDOWN_COLUMNS],
    )
    helpers.drop_columns("messages", ["compacted"])
    helpers.set_schema_version(SCHEMA_VERSION - 1)
