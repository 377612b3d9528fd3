"""Hermes schema v2: messages.finish_reason.

Why: the model's stop reason ('stop', 'tool_calls', ...) is kept per message. Some files got the
column from older code without the version bump, so the column is added only when absent.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from sessionstore._migrations import helpers

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA_VERSION = 2


def upgrade() -> None:
    helpers.add_column_if_missing("messages", sa.Column("finish_reason", sa.Text()))
    helpers.set_schema_version(SCHEMA_VERSION)


def downgrade() -> None:
    helpers.drop_columns("messages", ["finish_reason"])
    helpers.set_schema_version(SCHEMA_VERSION - 1)
