"""Hermes schema v3: sessions.title.

Why: users name sessions and resume them by name. Added only when absent.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from sessionstore._migrations import helpers

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA_VERSION = 3


def upgrade() -> None:
    helpers.add_column_if_missing("sessions", sa.Column("title", sa.Text()))
    helpers.set_schema_version(SCHEMA_VERSION)


def downgrade() -> None:
    helpers.drop_columns("sessions", ["title"])
    helpers.set_schema_version(SCHEMA_VERSION - 1)
