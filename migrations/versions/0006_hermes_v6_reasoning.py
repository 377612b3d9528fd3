"""Hermes schema v6: reasoning columns on messages.

Why: without them a reloaded session loses the assistant's reasoning chain, which breaks
multi-turn reasoning continuity for OpenRouter/OpenAI/Nous providers. Added only when absent.
messages carries the full-text triggers: the SQLite downgrade must keep them (see
helpers.drop_columns).

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


def upgrade() -> None:
    for name in NEW_COLUMNS:
        helpers.add_column_if_missing("messages", sa.Column(name, sa.Text()))
    helpers.set_schema_version(SCHEMA_VERSION)


def downgrade() -> None:
    helpers.drop_columns("messages", list(NEW_COLUMNS))
    helpers.set_schema_version(SCHEMA_VERSION - 1)
