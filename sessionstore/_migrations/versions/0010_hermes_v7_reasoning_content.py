"""Hermes schema v7: ``messages.reasoning_content``.

Why: Kimi/Moonshot replay needs the provider-native reasoning text back verbatim; Hermes v7
(a7d78d3bf) stores it in its own nullable column. Added only when absent: files stamped 7 by
Hermes's never-merged renumbering branch lack it, and files from later Hermes builds have it.
Downgrade drops it (the v6 shape cannot hold it) and writes 6 back.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from sessionstore._migrations import helpers

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA_VERSION = 7


def upgrade() -> None:
    helpers.add_column_if_missing("messages", sa.Column("reasoning_content", sa.Text()))
    helpers.set_schema_version(SCHEMA_VERSION)


def downgrade() -> None:
    helpers.drop_columns("messages", ["reasoning_content"])
    helpers.set_schema_version(SCHEMA_VERSION - 1)
