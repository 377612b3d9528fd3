"""Hermes schema v21: async delegations, the API-content sidecar and the fallback streak.

Why: Hermes 0.19.0 (which writes v22; no release writes v21 and no ``< 21`` block exists, so
the bump belongs to its declarative additions) adds, each when absent:

- ``messages.effect_disposition`` (what a tool call's side effect came to) and
  ``messages.api_content`` (byte fidelity: the exact content sent to the API when it differs
  from ``content``; NULL means ``content`` verbatim);
- ``sessions.compression_fallback_streak`` (``NOT NULL DEFAULT 0``) and
  ``sessions.profile_name``;
- ``async_delegations`` (background subagent runs and the delivery of their results, owned by
  Hermes's gateway: sessionstore keeps and copies its rows and writes none) and
  ``idx_async_delegations_delivery``.

A store this chain has just created holds no rows; its ``sessions`` and ``messages`` are laid
out again in Hermes 0.19.0's declared order. Downgrade drops what this revision added (an
``api_content`` sidecar is lost with it; a v20 Hermes sends ``content``) and writes 20 back.

Revision ID: 0029
Revises: 0028
Create Date: 2027-01-10
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from sessionstore._migrations import helpers

revision: str = "0029"
down_revision: str | None = "0028"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA_VERSION = 21
DELEGATIONS = "async_delegations"
DELIVERY_INDEX = "idx_async_delegations_delivery"
SESSION_COLUMNS = ("compression_fallback_streak", "profile_name")
MESSAGE_COLUMNS = ("effect_disposition", "api_content")
_ZERO = sa.text("0")
V21_SESSION_ORDER = (
    "id", "source", "user_id", "session_key", "chat_id", "chat_type", "thread_id",
    "display_name", "origin_json", "expiry_finalized", "model", "model_config", "system_prompt",
    "parent_session_id", "started_at", "ended_at", "end_reason", "message_count",
    "tool_call_count", "input_tokens", "output_tokens", "cache_read_tokens",
    "cache_write_tokens", "reasoning_tokens", "cwd", "git_branch", "git_repo_root",
    "billing_provider", "billing_base_url", "billing_mode", "estimated_cost_usd",
    "actual_cost_usd", "cost_status", "cost_source", "pricing_version", "title",
    "api_call_count", "handoff_state", "handoff_platform", "handoff_error",
    "compression_failure_cooldown_until", "compression_failure_error", *SESSION_COLUMNS,
    "rewind_count", "archived",
)  # fmt: skip
V21_MESSAGE_ORDER = (
    "id", "session_id", "role", "content", "tool_call_id", "tool_calls", "tool_name",
    "effect_disposition", "timestamp", "token_count", "finish_reason", "reasoning",
    "reasoning_content", "reasoning_details", "codex_reasoning_items", "codex_message_items",
    "platform_message_id", "observed", "active", "compacted", "api_content",
)  # fmt: skip


def upgrade() -> None:
    helpers.add_columns_if_missing(
        "sessions",
        [
            sa.Column(
                "compression_fallback_streak", helpers.COUNTER, nullable=False,
                server_default=_ZERO,
            ),
            sa.Column("profile_name", sa.Text()),
        ],
    )  # fmt: skip
    helpers.add_columns_if_missing(
        "messages", [sa.Column(name, sa.Text()) for name in MESSAGE_COLUMNS]
    )
    if not helpers.table_exists(DELEGATIONS):
        op.create_table(
            DELEGATIONS,
            sa.Column("delegation_id", sa.Text(), nullable=False),
            sa.Column("origin_session", sa.Text(), nullable=False),
            sa.Column(
                "origin_ui_session_id", sa.Text(), nullable=False, server_default=sa.text("''")
            ),
            sa.Column("parent_session_id", sa.Text()),
            sa.Column("state", sa.Text(), nullable=False),
            sa.Column("dispatched_at", helpers.REAL, nullable=False),
            sa.Column("completed_at", helpers.REAL),
            sa.Column("updated_at", helpers.REAL, nullable=False),
            sa.Column("event_json", sa.Text()),
            sa.Column("result_json", sa.Text()),
            sa.Column(
                "delivery_state", sa.Text(), nullable=False, server_default=sa.text("'pending'")
            ),
            sa.Column("delivery_attempts", helpers.COUNTER, nullable=False, server_default=_ZERO),
            sa.Column("delivered_at", helpers.REAL),
            sa.Column("owner_pid", helpers.COUNTER),
            sa.Column("owner_started_at", helpers.COUNTER),
            sa.Column("task_json", sa.Text()),
            sa.Column("delivery_claim", sa.Text()),
            sa.Column("delivery_claimed_at", helpers.REAL),
            sa.PrimaryKeyConstraint("delegation_id", name=f"pk_{DELEGATIONS}"),
        )
    helpers.create_index_if_missing(DELIVERY_INDEX, DELEGATIONS, ["delivery_state", "completed_at"])
    helpers.lay_out_empty_table("messages", V21_MESSAGE_ORDER)
    helpers.lay_out_empty_table("sessions", V21_SESSION_ORDER)
    helpers.set_schema_version(SCHEMA_VERSION)


def downgrade() -> None:
    if helpers.table_exists(DELEGATIONS):
        helpers.drop_index_if_present(DELIVERY_INDEX, DELEGATIONS)
        op.drop_table(DELEGATIONS)
    helpers.drop_columns("messages", list(MESSAGE_COLUMNS))
    helpers.drop_columns("sessions", list(SESSION_COLUMNS))
    helpers.set_schema_version(SCHEMA_VERSION - 1)
