"""Hermes schema v14: the ``compression_locks`` lease table.

Why: two processes compressing one session at once forked it into two continuations
(a30480bd2); a row per session holding ``holder`` and an expiry makes compression a lease
(``try_acquire`` / ``refresh`` / ``release``). No foreign key, as in Hermes: a lease outlives
the session it names. Created only when absent. Downgrade drops it; a lease is seconds of
state, and a v13 Hermes has no use for it.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from sessionstore._migrations import helpers

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA_VERSION = 14
LOCKS = "compression_locks"
EXPIRES_INDEX = "idx_compression_locks_expires"


def upgrade() -> None:
    if not helpers.table_exists(LOCKS):
        op.create_table(
            LOCKS,
            sa.Column("session_id", sa.Text(), nullable=False),
            sa.Column("holder", sa.Text(), nullable=False),
            sa.Column("acquired_at", helpers.REAL, nullable=False),
            sa.Column("expires_at", helpers.REAL, nullable=False),
            sa.PrimaryKeyConstraint("session_id", name="pk_compression_locks"),
        )
    helpers.create_index_if_missing(EXPIRES_INDEX, LOCKS, ["expires_at"])
    helpers.set_schema_version(SCHEMA_VERSION)


def downgrade() -> None:
    if helpers.table_exists(LOCKS):
        op.drop_table(LOCKS)
    helpers.set_schema_version(SCHEMA_VERSION - 1)
