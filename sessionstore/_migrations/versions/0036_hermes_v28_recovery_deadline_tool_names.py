"""Hermes schema v28: the compression recovery deadline and the pinned tool names.

Why: the other additions of the v26 → v28 window (see revision 0035 for why they are split so):
``sessions.compression_recovery_deadline REAL`` and ``sessions.tool_names TEXT`` (the tool-name
pin of a session: inline JSON, or from iot 0.21.3 on the ``system_prompts.hash`` of that JSON,
read ``COALESCE(tp.prompt, s.tool_names)``). No data step.

Downgrade drops both (a v27 Hermes has neither; a hashed pin's text stays in
``system_prompts`` until revision 0033's downgrade, which a v24 file has no place for) and
writes 27 back.

Revision ID: 0036
Revises: 0035
Create Date: 2027-01-20
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from sessionstore._migrations import helpers

revision: str = "0036"
down_revision: str | None = "0035"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA_VERSION = 28
SESSION_COLUMNS = ("compression_recovery_deadline", "tool_names")


def upgrade() -> None:
    helpers.add_columns_if_missing(
        "sessions",
        [
            sa.Column("compression_recovery_deadline", helpers.REAL),
            sa.Column("tool_names", sa.Text()),
        ],
    )
    helpers.set_schema_version(SCHEMA_VERSION)


def downgrade() -> None:
    helpers.drop_columns("sessions", list(SESSION_COLUMNS))
    helpers.set_schema_version(SCHEMA_VERSION - 1)
