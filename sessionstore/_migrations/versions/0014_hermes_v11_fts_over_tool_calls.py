"""Hermes schema v11: full-text search over content, tool name and tool calls (SQLite).

Why: Hermes v11 (8d76d69d4) made a search for a command inside ``tool_calls`` (``kubectl``)
or a tool's name (``terminal``) find the message: both FTS tables index
``content || ' ' || tool_name || ' ' || tool_calls``. Hermes rebuilt them *inline* (a second
copy of every message's text inside the index); newest Hermes checks only that its six
trigger names exist, so here both tables are external-content over views computing exactly
that text (``messages_fts_source``, ``messages_fts_trigram_source``): the same rows match, the
same snippets come back, and an append writes the index only. The update triggers fire only
when an indexed column changes. Whatever FTS objects the file holds (v6 external-content,
Hermes's inline tables, a half-built set) are dropped and both indexes refilled from the rows,
in this transaction: the word index by FTS5's ``'rebuild'``, the trigram index by inserting
the view's rows with the ASCII ones skipped before the GLOB (``search_ddl.FILL_V11_TRIGRAM``:
what ``'rebuild'`` indexes, at a quarter of the cost on a 100,000-message Hermes v17 file).

Measured with ``scripts/bench_fts_layouts.py`` (20 000 messages, 10 % with CJK text, one
run): per appended message Hermes's inline shape costs 3.1-3.6x v6's index work and makes the
file 3.85x as large; this shape costs 1.6-1.8x v6 (the extra words of tool calls) at 1.14x
the size. With half the messages in CJK the trigram work dominates and both come close
(2.8x against 3.1x), the file still 1.6x against 3.85x.

PostgreSQL gets the same text: the stored ``content_tsv`` (0008) is recomputed over it and the
``pg_trgm`` index moves from ``content`` to it (``ix_messages_indexed_text_trgm`` replaces
``ix_messages_content_trgm``: one trigram index, not two). This rewrites ``messages`` once.

The handoff columns (``sessions.handoff_state``, ``handoff_platform``, ``handoff_error``;
00ce5f04d) landed during v11 without a number, and the released v11 (hermes-agent 0.13.0 and
0.14.0) writes them: they are added here when absent, so a downgrade to v11 gives the file a
released v11 Hermes has, with its handoffs (revision 0015 added them until the real 0.13.0
files showed a downgrade to 0014 dropping a user's handoff state; `tests/test_real_hermes.py`).

Downgrade returns to the v10 layout: v6's ``messages_fts`` over ``content`` and v10's trigram
table over ``content``; on PostgreSQL 0008's objects over ``content``; the handoff columns go.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from sessionstore._migrations import helpers, search_ddl

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA_VERSION = 11
HANDOFF_COLUMNS = ("handoff_state", "handoff_platform", "handoff_error")


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        search_ddl.create_later_search_objects(
            bind, trigram=search_ddl.sqlite_supports_trigram(bind)
        )
    else:
        search_ddl.pg_create_later_search(bind)
    helpers.add_columns_if_missing(
        "sessions", [sa.Column(name, sa.Text()) for name in HANDOFF_COLUMNS]
    )
    helpers.set_schema_version(SCHEMA_VERSION)


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        search_ddl.restore_v6_search_objects(bind)
        if search_ddl.sqlite_supports_trigram(bind):
            search_ddl.create_v10_trigram(bind)
    else:
        search_ddl.pg_restore_content_search(bind)
    helpers.drop_columns("sessions", list(HANDOFF_COLUMNS))
    helpers.set_schema_version(SCHEMA_VERSION - 1)
