"""Hermes schema v1: sessions, messages, their indexes and the full-text index.

Why: this is the shape of every Hermes ``state.db`` at birth. Column types are Hermes's (TEXT,
INTEGER, REAL) so a file created here is indistinguishable to Hermes from one it created;
timestamps become DOUBLE PRECISION on PostgreSQL, whose REAL is too narrow for Unix seconds.
Tables are created only when absent, so a legacy file adopted without a version row can pass.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from sessionstore._migrations import helpers, search_ddl

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA_VERSION = 1
TIMESTAMP: sa.types.TypeEngine[float] = sa.Double().with_variant(sa.REAL(), "sqlite")


def upgrade() -> None:
    if not helpers.table_exists("schema_version"):
        op.create_table("schema_version", sa.Column("version", sa.Integer(), nullable=False))
    if not helpers.table_exists("sessions"):
        op.create_table(
            "sessions",
            sa.Column("id", sa.Text(), nullable=False),
            sa.Column("source", sa.Text(), nullable=False),
            sa.Column("user_id", sa.Text()),
            sa.Column("model", sa.Text()),
            sa.Column("model_config", sa.Text()),
            sa.Column("system_prompt", sa.Text()),
            sa.Column("parent_session_id", sa.Text()),
            sa.Column("started_at", TIMESTAMP, nullable=False),
            sa.Column("ended_at", TIMESTAMP),
            sa.Column("end_reason", sa.Text()),
            sa.Column("message_count", sa.Integer(), server_default=sa.text("0")),
            sa.Column("tool_call_count", sa.Integer(), server_default=sa.text("0")),
            sa.Column("input_tokens", sa.Integer(), server_default=sa.text("0")),
            sa.Column("output_tokens", sa.Integer(), server_default=sa.text("0")),
            sa.PrimaryKeyConstraint("id", name="pk_sessions"),
            sa.ForeignKeyConstraint(
                ["parent_session_id"],
                ["sessions.id"],
                name="fk_sessions_parent_session_id_sessions",
            ),
        )
    if not helpers.table_exists("messages"):
        op.create_table(
            "messages",
            sa.Column("id", sa.Integer(), autoincrement=True),
            sa.Column("session_id", sa.Text(), nullable=False),
            sa.Column("role", sa.Text(), nullable=False),
            sa.Column("content", sa.Text()),
            sa.Column("tool_call_id", sa.Text()),
            sa.Column("tool_calls", sa.Text()),
            sa.Column("tool_name", sa.Text()),
            sa.Column("timestamp", TIMESTAMP, nullable=False),
            sa.Column("token_count", sa.Integer()),
            sa.PrimaryKeyConstraint("id", name="pk_messages"),
            sa.ForeignKeyConstraint(
                ["session_id"], ["sessions.id"], name="fk_messages_session_id_sessions"
            ),
            sqlite_autoincrement=True,
        )
    helpers.create_index_if_missing("idx_sessions_source", "sessions", ["source"])
    helpers.create_index_if_missing("idx_sessions_parent", "sessions", ["parent_session_id"])
    helpers.create_index_if_missing(
        "idx_sessions_started", "sessions", [sa.text("started_at DESC")]
    )
    helpers.create_index_if_missing(
        "idx_messages_session", "messages", ["session_id", "timestamp"]
    )
    search_ddl.create_search_objects(op.get_bind())
    helpers.set_schema_version(SCHEMA_VERSION)


def downgrade() -> None:
    search_ddl.drop_search_objects(op.get_bind())
    op.drop_table("messages")
    op.drop_table("sessions")
    op.drop_table("schema_version")
