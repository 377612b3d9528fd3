"""Hermes schema v12: ``messages.platform_message_id`` (+ partial index) and the handoff columns.

Why: Hermes v12 (31a010010) keeps the chat platform's own message id (Telegram, Yuanbao) to
de-duplicate and reply, looked up through the partial index ``idx_messages_platform_msg_id``.
The handoff state machine (``sessions.handoff_state``, ``handoff_platform``, ``handoff_error``;
00ce5f04d) landed during v11 without a number; revision 0014 adds it (released v11 files hold
it), so here it is only made sure of, and the downgrade to v11 keeps it. A file may also carry
``handoff_pending`` (a commit replaced in the same push): it is left as it is, with its
values. All added only when absent; the downgrade drops the platform id and its index.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from sessionstore._migrations import helpers

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA_VERSION = 12
PLATFORM_INDEX = "idx_messages_platform_msg_id"
HANDOFF_COLUMNS = ("handoff_state", "handoff_platform", "handoff_error")


def upgrade() -> None:
    helpers.add_column_if_missing("messages", sa.Column("platform_message_id", sa.Text()))
    helpers.create_partial_index_if_missing(
        PLATFORM_INDEX,
        "messages",
        ["session_id", "platform_message_id"],
        "platform_message_id IS NOT NULL",
    )
    helpers.add_columns_if_missing(
        "sessions", [sa.Column(name, sa.Text()) for name in HANDOFF_COLUMNS]
    )
    helpers.set_schema_version(SCHEMA_VERSION)


def downgrade() -> None:
    helpers.drop_indexes_then_columns("messages", [PLATFORM_INDEX], ["platform_message_id"])
    helpers.set_schema_version(SCHEMA_VERSION - 1)
