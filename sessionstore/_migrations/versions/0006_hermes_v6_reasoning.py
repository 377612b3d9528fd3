"""Hermes schema v6: reasoning columns on messages.

Why: without them a reloaded session loses the assistant's reasoning chain, which breaks
multi-turn reasoning continuity for OpenRouter/OpenAI/Nous providers. Added only when absent.
messages carries the full-text triggers: the SQLite downgrade must keep them (see
helpers.drop_columns). An empty ``messages`` table is laid out in Hermes v6's declared order
(today the same as the step order, so normally nothing happens; see 0005).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from sessionstore._migrations import helpers

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA_VERSION = 6

NEW_COLUMNS = ("reasoning", "reasoning_details", "codex_reasoning_items")
# Hermes's SCHEMA_SQL order for messages at v6.
MESSAGE_COLUMN_ORDER = (
    "id", "session_id", "role", "content", "tool_call_id", "tool_calls", "tool_name",
    "timestamp", "token_count", "finish_reason", *NEW_COLUMNS,
)  # fmt: skip


def upgrade() -> None:
    for name in NEW_COLUMNS:
        helpers.add_column_if_missing("messages", sa.Column(name, sa.Text()))
    helpers.lay_out_empty_table("messages", MESSAGE_COLUMN_ORDER)
    helpers.set_schema_version(SCHEMA_VERSION)


def downgrade() -> None:
    helpers.drop_columns("messages", list(NEW_COLUMNS))
    helpers.set_schema_version(SCHEMA_VERSION - 1)
