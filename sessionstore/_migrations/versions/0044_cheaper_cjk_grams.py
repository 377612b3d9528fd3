"""The CJK bigram tokens of revision 0021, computed with less work per character (SQLite's
triggers, PostgreSQL's ``sessionstore_cjk_grams``).

Why: appending one 10 MB CJK message took 14-15 s on SQLite (1 MB: 1.6 s) and 39 s on
PostgreSQL (1 MB: 4.9 s), and a SQLite writer holds the store's write lock all that time:
every other writer waits. On SQLite the bigram trigger walked each 96-byte chunk through 96
position rows although a CJK chunk has about 32 characters; on PostgreSQL the function tested
every character of the text with a regular expression and sorted two grams per CJK character
before removing duplicates, and a SQL function's body is planned again by every insert.
``_migrations/revision_0044_ddl.py`` says what each now does instead, with its numbers in
``docs/performance.md``.

The tokens and arrays are exactly 0021's (``tests/schema/test_revision_0044_cheaper_cjk_grams.py``
proves it on hostile texts and megabytes), so nothing is reindexed: rows indexed by the old
triggers are deleted correctly by the new ones and the other way round, and the GIN index's
entries stand. The downgrade puts 0025's trigger text and 0021's function back, with no
rebuild either. A store without the bigram table (a SQLite without FTS5) or without the
function is left alone. ``schema_version`` stays 31.

Revision ID: 0044
Revises: 0043
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from sessionstore._migrations import revision_0044_ddl

revision: str = "0044"
down_revision: str | None = "0043"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        revision_0044_ddl.sqlite_cheaper_bigram_triggers(bind)
    else:
        revision_0044_ddl.pg_cheaper_grams_function(bind)


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        revision_0044_ddl.sqlite_restore_bigram_triggers(bind)
    else:
        revision_0044_ddl.pg_restore_grams_function(bind)
