"""SQLite: the CJK bigram triggers with a row's token SQL written once, not once per column.

Why: SQLite parses every trigger's text on each new connection, and a new store's DDL twice
(replayed, each ``CREATE`` is parsed when run and again when the schema is read). 0044's three
bigram triggers held the token SQL 12 times (three columns, new and old rows): 20.6 KB of a
store's ~39 KB of schema. One expression walking the three columns in turn makes them 9.3 KB;
``docs/performance.md`` has what an open saves. ``_migrations/revision_0045_ddl.py`` says how
the tokens stay 0044's exactly (each column still walked alone), and why not one joined text
or a view.

The tokens are 0044's for every value
(``tests/schema/test_revision_0045_cjk_grams_once_per_row.py``), so nothing is reindexed: rows
indexed by 0044's triggers are deleted correctly by these and the other way round. The
downgrade puts 0044's trigger text back, with no rebuild either. A store without the bigram
table (a SQLite without FTS5) is left alone.

Nothing on PostgreSQL: its index is a GIN expression index over ``sessionstore_cjk_grams``,
one function, no per-column text. ``schema_version`` stays 31.

Revision ID: 0045
Revises: 0044
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from sessionstore._migrations import revision_0045_ddl

revision: str = "0045"
down_revision: str | None = "0044"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        revision_0045_ddl.sqlite_one_grams_expression_per_row(bind)


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        revision_0045_ddl.sqlite_restore_bigram_triggers(bind)
