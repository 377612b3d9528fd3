"""Hermes schema v19: the durable gateway routing table, and NULL ``active`` flags healed.

Why: Hermes 0.18.1 (which writes v19; it has no ``< 19`` block, so the number belongs to what
it adds) keeps the gateway's routing index in ``gateway_routing`` instead of a JSON file: one
``entry_json`` per ``(scope, session_key)``, ``scope`` ``''`` by default. Early upstream builds
(#59203) keyed it by ``session_key`` alone, without ``scope``; the table is created here only
when absent, and the adoption step (``sessionstore.schema.legacy``) heals that early shape.

The same release adds ``idx_messages_active_null`` (``messages(active) WHERE active IS NULL``)
and sets ``active = 1`` on every message whose flag is NULL at each open: older Hermes
reconcilers added ``messages.active`` without its ``NOT NULL DEFAULT 1`` (#51646), so rows
written by writers that omitted the column are NULL and every ``active = 1`` reader hid them.
The UPDATE runs here too (it only un-hides rows; no row that was live changes).

Downgrade drops the table (its entries have no place in a v18 file; the gateway rebuilds its
routing from the sessions, as v18 did) and the index, and writes 18 back.

Revision ID: 0027
Revises: 0026
Create Date: 2027-01-10
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from sessionstore._migrations import helpers

revision: str = "0027"
down_revision: str | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA_VERSION = 19
ROUTING = "gateway_routing"
ACTIVE_NULL_INDEX = "idx_messages_active_null"


def upgrade() -> None:
    if not helpers.table_exists(ROUTING):
        op.create_table(
            ROUTING,
            sa.Column("scope", sa.Text(), nullable=False, server_default=sa.text("''")),
            sa.Column("session_key", sa.Text(), nullable=False),
            sa.Column("entry_json", sa.Text(), nullable=False),
            sa.Column("updated_at", helpers.REAL, nullable=False),
            sa.PrimaryKeyConstraint("scope", "session_key", name=f"pk_{ROUTING}"),
        )
    helpers.create_partial_index_if_missing(
        ACTIVE_NULL_INDEX, "messages", ["active"], "active IS NULL"
    )
    op.get_bind().execute(sa.text("UPDATE messages SET active = 1 WHERE active IS NULL"))
    helpers.set_schema_version(SCHEMA_VERSION)


def downgrade() -> None:
    helpers.drop_index_if_present(ACTIVE_NULL_INDEX, "messages")
    if helpers.table_exists(ROUTING):
        op.drop_table(ROUTING)
    helpers.set_schema_version(SCHEMA_VERSION - 1)
