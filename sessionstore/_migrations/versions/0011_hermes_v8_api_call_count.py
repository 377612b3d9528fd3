"""Hermes schema v8: ``sessions.api_call_count`` and the ``state_meta`` table.

Why: Hermes v8 (5fb143169) counts real API calls per session (``update_token_counts``'s
``api_call_count``); ``state_meta(key, value)`` came the same day without a number of its own
(b8663813b, auto-prune bookkeeping) and every mainline file stamped 8 has it. Both are added
only when absent. Downgrade drops both: ``state_meta`` holds only Hermes's housekeeping keys,
which a v7 Hermes does not read.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from sessionstore._migrations import helpers

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA_VERSION = 8
STATE_META = "state_meta"


def upgrade() -> None:
    helpers.add_column_if_missing(
        "sessions", sa.Column("api_call_count", helpers.COUNTER, server_default=sa.text("0"))
    )
    if not helpers.table_exists(STATE_META):
        op.create_table(
            STATE_META,
            sa.Column("key", sa.Text(), nullable=False),
            sa.Column("value", sa.Text()),
            sa.PrimaryKeyConstraint("key", name="pk_state_meta"),
        )
    helpers.set_schema_version(SCHEMA_VERSION)


def downgrade() -> None:
    if helpers.table_exists(STATE_META):
        op.drop_table(STATE_META)
    helpers.drop_columns("sessions", ["api_call_count"])
    helpers.set_schema_version(SCHEMA_VERSION - 1)
