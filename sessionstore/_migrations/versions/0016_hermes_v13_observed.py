"""Hermes schema v13: ``messages.observed``.

Why: Hermes v13 (4a91e3649) marks group-chat messages the bot only observed (not addressed to
it) so replay can fold them into a separate context block; ``INTEGER DEFAULT 0``, so existing
rows read as not observed. Added only when absent; the downgrade drops it.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from sessionstore._migrations import helpers

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA_VERSION = 13


def upgrade() -> None:
    helpers.add_column_if_missing(
        "messages", sa.Column("observed", sa.Integer(), server_default=sa.text("0"))
    )
    helpers.set_schema_version(SCHEMA_VERSION)


def downgrade() -> None:
    helpers.drop_columns("messages", ["observed"])
    helpers.set_schema_version(SCHEMA_VERSION - 1)
