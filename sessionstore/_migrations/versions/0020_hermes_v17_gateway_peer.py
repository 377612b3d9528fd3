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
laid out again with their columns in newest Hermes's declared order (``helpers.
lay_out_empty_table``), so that the file is the one newest Hermes would create, down
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
# Newest Hermes's declared order: a fresh file's physical order, hence ``SELECT *``'s.
HEAD_SESSION_ORDER = (
    "id", "source", "user_id", *PEER_COLUMNS, "model", "model_config", "system_prompt",
    "parent_session_id", "started_at", "ended_at", "end_reason", *COUNTERS, "cwd",
    *GIT_COLUMNS, "billing_provider", "billing_base_url", "billing_mode", "estimated_cost_usd",
    "actual_cost_usd", "cost_status", "cost_source", "pricing_version", "title",
    "api_call_count", "handoff_state", "handoff_platform", "handoff_error", *COOLDOWN_COLUMNS,
    "rewind_count", "archived",
)  # fmt: skip
HEAD_MESSAGE_ORDER = (
    "id", "session_id", "role", "content", "tool_call_id", "tool_calls", "tool_name",
    "timestamp", "token_count", "finish_reason", "reasoning", "reasoning_content",
    "reasoning_details", "codex_reasoning_items", "codex_message_items", "platform_message_id",
    "observed", "active", "compacted",
)  # fmt: skip


def upgrade() -> None:
    helpers.add_columns_if_missing(
        "sessions",
        [
            *[sa.Column(name, sa.Text()) for name in (*PEER_COLUMNS, *GIT_COLUMNS)],
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
    helpers.lay_out_empty_table("messages", HEAD_MESSAGE_ORDER)
    helpers.lay_out_empty_table("sessions", HEAD_SESSION_ORDER)
    helpers.set_schema_version(SCHEMA_VERSION)


def downgrade() -> None:
    helpers.drop_indexes_then_columns(
        "sessions",
        list(SESSION_INDEXES),
        [*PEER_COLUMNS, *GIT_COLUMNS, *COOLDOWN_COLUMNS],
    )
    helpers.drop_columns("messages", ["compacted"])
    helpers.set_schema_version(SCHEMA_VERSION - 1)
