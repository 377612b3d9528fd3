"""The CJK bigram triggers of revision 0021, the same tokens in a third of the SQL.

Why: SQLite parses the text of every trigger when a connection first reads the schema, and
0021's three bigram triggers were 51 KB of SQL (each chunk's character-boundary arithmetic
written out four times per column): 4-6 ms on every new connection, in every process that
opens the store, Hermes's included. That was most of the time a short-lived program (a hook,
a CLI call) spent opening an up-to-date store. The compact spelling computes each chunk's
edges once in a derived table (``_migrations/revision_0025_ddl.py``); the triggers shrink to
about 21 KB.

The tokens are exactly 0021's, so the rows already indexed are deleted correctly by the new
triggers and the downgrade (0021's text again) needs no rebuild either. SQLite only; a file
without the bigram table (a SQLite without FTS5 never built it) is left alone.
``schema_version`` stays 17.

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from sessionstore._migrations import revision_0025_ddl

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        revision_0025_ddl.sqlite_compact_bigram_triggers(bind)


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        revision_0025_ddl.sqlite_restore_bigram_triggers(bind)
