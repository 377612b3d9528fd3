"""PostgreSQL: a stored tsvector column for ranked word search (nothing on SQLite).

Why: ranking with ``ts_rank`` needs each match's tsvector. With only 0001's expression index,
PostgreSQL recomputes ``to_tsvector`` for every matching row, and again to recheck phrases, so
a word search over 100k messages took 100-500 ms (scripts/bench.py). A generated column
computes the same expression once per write; its GIN index replaces the expression index,
which is dropped. The column is an implementation detail of search: the models do not declare
it and env.py hides it from autogenerate, like the other full-text objects.

``schema_version`` is left at 6 (numbers above 6 belong to newer Hermes releases).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from sessionstore._migrations import search_ddl

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    bind.exec_driver_sql(search_ddl.PG_ADD_TSV_COLUMN)
    bind.exec_driver_sql(search_ddl.PG_CREATE_TSV_COLUMN_INDEX)
    bind.exec_driver_sql(f"DROP INDEX IF EXISTS {search_ddl.PG_TSV_INDEX}")


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    bind.exec_driver_sql(search_ddl.PG_CREATE_TSV_INDEX)
    bind.exec_driver_sql(f"DROP INDEX IF EXISTS {search_ddl.PG_TSV_COLUMN_INDEX}")
    bind.exec_driver_sql(f"ALTER TABLE messages DROP COLUMN IF EXISTS {search_ddl.PG_TSV_COLUMN}")
