"""Hermes schema v9: ``messages.codex_message_items``.

Why: Codex Responses replay needs the assistant message ids/phases (81e01f6ee); Hermes keeps
them as JSON text in a nullable column. Added only when absent; the downgrade drops it.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from sessionstore._migrations import helpers

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA_VERSION = 9


def upgrade() -> None:
    helpers.add_column_if_missing("messages", sa.Column("codex_message_items", sa.Text()))
    helpers.set_schema_version(SCHEMA_VERSION)


def downgrade() -> None:
    helpers.drop_columns("messages", ["codex_message_items"])
    helpers.set_schema_version(SCHEMA_VERSION - 1)
