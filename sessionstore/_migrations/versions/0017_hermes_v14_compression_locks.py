"""Hermes schema v14: the ``compression_locks`` lease table.

Why: two processes compressing one session at once forked it into two continuations
(a30480bd2); a row per session holding ``holder`` and an expiry makes compression a lease
(``try_acquire`` / ``refresh`` / ``release``). No foreign key, as in Hermes: a lease outlives
the session it names. Created only when absent. Downgrade drops it; a lease is seconds of
state, and a v13 Hermes has no use for it.

Landed during v14 without a number, and written by the released v14 (hermes-agent 0.16.0):
``sessions.cwd`` (51c68d4ab), rewind (3e59be0c4: ``sessions.rewind_count`` and
``messages.active``, ``NOT NULL DEFAULT 1`` so every existing message stays live, with
``idx_messages_session_active``) and archiving (85b65e29f: ``sessions.archived``). They are
added here when absent (revision 0018 added them until the real 0.16.0 files showed a
downgrade to 0017 un-archiving sessions and reviving rewound messages in the user's v14
Hermes; `tests/test_real_hermes.py`). The downgrade to v13 drops them; rewound (``active=0``)
messages are kept as rows and become ordinary messages again, which v13 cannot mark.

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
ACTIVE_INDEX = "idx_messages_session_active"
SESSION_COLUMNS = ("cwd", "rewind_count", "archived")


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
    helpers.drop_indexes_then_columns("messages", [ACTIVE_INDEX], ["active"])
    helpers.drop_columns("sessions", list(SESSION_COLUMNS))
    if helpers.table_exists(LOCKS):
        op.drop_table(LOCKS)
    helpers.set_schema_version(SCHEMA_VERSION - 1)
