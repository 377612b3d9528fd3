"""Hermes schema v15: ``idx_sessions_source_id``, plus the v14-era rewind/archive columns.

Why: Hermes v15 (ed81cfe3d) bounds the cron run-history query to one job with an index on
``sessions(source, id)``. The v14-era columns (``cwd``, ``rewind_count``, ``messages.active``
and its index, ``archived``) belong to revision 0017, as the released v14 has them; they are
only made sure of here, and a downgrade to v14 keeps them. A file may also carry
``sessions.icon`` (added and removed on a side branch): it is left with its values. All added
only when absent. Downgrade drops the index.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from sessionstore._migrations import helpers

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA_VERSION = 15
SOURCE_ID_INDEX = "idx_sessions_source_id"
ACTIVE_INDEX = "idx_messages_session_active"
SESSION_COLUMNS = ("cwd", "rewind_count", "archived")


def upgrade() -> None:
    helpers.create_index_if_missing(SOURCE_ID_INDEX, "sessions", ["source", "id"])
    helpers.add_columns_if_missing(
        "sessions",
        [
            sa.Column("cwd", sa.Text()),
            sa.Column("rewind_count", helpers.COUNTER, nullable=False, server_default=sa.text("0")),
            sa.Column("archived", sa.Integer(), nullable=False, server_default=sa.text("0")),
        ],
    )
    helpers.add_column_if_missing(
        "messages",
        sa.Column("active", sa.Integer(), nullable=False, server_default=sa.text("1")),
    )
    helpers.create_index_if_missing(
        ACTIVE_INDEX, "messages", ["session_id", "active", "timestamp"]
    )
    helpers.set_schema_version(SCHEMA_VERSION)


def downgrade() -> None:
    helpers.drop_index_if_present(SOURCE_ID_INDEX, "sessions")
    helpers.set_schema_version(SCHEMA_VERSION - 1)
