"""Indexed substring search for CJK text on SQLite (FTS5 trigram); nothing on PostgreSQL.

Why: FTS5's unicode61 tokenizer keeps a run of Chinese or Japanese characters as one token, so
a word search for part of it finds nothing, and Hermes then falls back to ``LIKE '%...%'``: a
full scan of every message on every such search. This revision adds ``messages_trigram``, an
external-content FTS5 table with ``tokenize='trigram'`` over ``messages.content``, kept in step
by the triggers ``messages_trigram_insert`` / ``_delete`` / ``_update`` (built like Hermes's
``messages_fts`` ones), and indexes the existing rows with ``'rebuild'``. Substrings of three
or more characters are then answered from the index; shorter ones still need a scan.

The trigram tokenizer needs SQLite 3.34 or newer. The library is probed, not assumed: without
the tokenizer nothing is created and search keeps scanning (the search code checks for the
table). Note that a file carrying this table needs a SQLite with the tokenizer for every write
to ``messages``, since the triggers write to it.

The ``'rebuild'`` is skipped when the same upgrade goes on to revision 0013, which drops this
table for Hermes v10's: one transaction, so no store is left with the table unfilled (a killed
upgrade rolls back whole), and an upgrade that stops here fills it.

``schema_version`` is left at 6: the schema Hermes reads is unchanged, and numbers above 6
belong to newer Hermes releases.

PostgreSQL: upgrade and downgrade do nothing; revision 0001 already created the ``pg_trgm``
GIN index ``ix_messages_content_trgm`` that serves ``ILIKE '%...%'``.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from alembic import op

from sessionstore._migrations import helpers, search_ddl

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

logger = logging.getLogger(__name__)


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "sqlite":
        return
    if not search_ddl.sqlite_supports_trigram(bind):
        logger.warning(
            "this SQLite library has no FTS5 trigram tokenizer (needs 3.34+): CJK search "
            "will scan messages instead of using an index"
        )
        return
    # 0013 drops this table: when the same upgrade runs it, the fill would be thrown away.
    search_ddl.create_trigram_objects(bind, fill=not helpers.upgrade_also_runs("0013"))


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "sqlite":
        return
    search_ddl.drop_trigram_objects(bind)
