"""Hermes schema v5: cache/reasoning token counters and billing columns on sessions.

Why: cost tracking per session (provider, mode, estimated vs actual USD, pricing version).
Each column is added only when absent: half-applied v5 steps exist in the field.

A fresh Hermes v5 file declares ``title`` after the billing columns, while ``ADD COLUMN`` can
only append them after it: an empty ``sessions`` table (a new store) is therefore laid out
again in Hermes's declared order, so ``SELECT *`` gives Hermes's columns in Hermes's order. A
table holding rows keeps its order (see ``helpers.lay_out_empty_table``).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from sessionstore._migrations import helpers

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA_VERSION = 5

TIMESTAMP_OR_MONEY: sa.types.TypeEngine[float] = sa.Double().with_variant(sa.REAL(), "sqlite")
NEW_COLUMNS = (
    ("cache_read_tokens", sa.Integer(), sa.text("0")),
    ("cache_write_tokens", sa.Integer(), sa.text("0")),
    ("reasoning_tokens", sa.Integer(), sa.text("0")),
    ("billing_provider", sa.Text(), None),
    ("billing_base_url", sa.Text(), None),
    ("billing_mode", sa.Text(), None),
    ("estimated_cost_usd", TIMESTAMP_OR_MONEY, None),
    ("actual_cost_usd", TIMESTAMP_OR_MONEY, None),
    ("cost_status", sa.Text(), None),
    ("cost_source", sa.Text(), None),
    ("pricing_version", sa.Text(), None),
)

# Hermes's SCHEMA_SQL order for sessions at v5 (unchanged at v6).
SESSION_COLUMN_ORDER = (
    "id", "source", "user_id", "model", "model_config", "system_prompt", "parent_session_id",
    "started_at", "ended_at", "end_reason", "message_count", "tool_call_count", "input_tokens",
    "output_tokens", *(name for name, _, _ in NEW_COLUMNS), "title",
)  # fmt: skip


def upgrade() -> None:
    for name, type_, default in NEW_COLUMNS:
        helpers.add_column_if_missing("sessions", sa.Column(name, type_, server_default=default))
    helpers.lay_out_empty_table("sessions", SESSION_COLUMN_ORDER)
    helpers.set_schema_version(SCHEMA_VERSION)


def downgrade() -> None:
    helpers.drop_columns("sessions", [name for name, _, _ in NEW_COLUMNS])
    helpers.set_schema_version(SCHEMA_VERSION - 1)
