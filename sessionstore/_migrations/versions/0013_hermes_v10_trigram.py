"""Hermes schema v10: the trigram index ``messages_fts_trigram`` (SQLite).

Why: Hermes v10 (1fa76607c) added a trigram FTS5 table for CJK search under this name, with
the triggers ``messages_fts_trigram_insert`` / ``_delete`` / ``_update``; our revision 0007 had
built the same index as ``messages_trigram``. Keeping both would index every CJK message twice,
so this revision replaces ours with Hermes's names (one trigram index, no duplicate). As in
0007 the table holds only messages whose text contains CJK: Hermes asks it only for queries of
three or more CJK characters, which only such messages can match, and every other append pays
nothing for it. It is external-content over the view ``messages_fts_trigram_source`` (no second
copy of the text; FTS5's integrity-check compares it with the view). Any trigram table a file
already holds (Hermes's, in whatever shape) is replaced and refilled from the rows. The fill
is skipped when the same upgrade goes on to revision 0014, which drops the table and fills it
again over its own text (on a 100,000-message v17 file the fill was 1.8 of the upgrade's 6.3
CPU s): the chain is one transaction, so no store is ever left with the table unfilled (a
killed upgrade rolls back whole), and an upgrade that stops here fills it.

Without the trigram tokenizer (SQLite < 3.34) nothing is created, exactly as in 0007.
Downgrade restores 0007's ``messages_trigram``. PostgreSQL: nothing (its pg_trgm index serves).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from sessionstore._migrations import helpers, search_ddl

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA_VERSION = 10


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite" and search_ddl.sqlite_supports_trigram(bind):
        # 0014 drops and refills this table: in the same upgrade, fill it only there.
        search_ddl.create_v10_trigram(bind, fill=not helpers.upgrade_also_runs("0014"))
    helpers.set_schema_version(SCHEMA_VERSION)


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        search_ddl.drop_hermes_trigram_objects(bind)
        if search_ddl.sqlite_supports_trigram(bind):
            search_ddl.create_trigram_objects(bind)
    helpers.set_schema_version(SCHEMA_VERSION - 1)
