"""A covering index for choosing a page of substring hits: ``messages (id, timestamp, active,
compacted, role, session_id)``.

Why: a 1- or 2-character CJK query (数据, 库) is answered by the bigram index alone (revision
0021), but its candidates are thousands of rows (4,786 of 100,000 in ``scripts/bench_cjk.py``),
and ordering them newest first read every candidate's row from the ``messages`` table, whose
rows hold the whole content: about 1.2 µs each, 6 ms of a 7 ms query. This index holds
exactly what the page is chosen by (the order, the rewound-message filter, the role and source
filters' keys), a few dozen bytes per message, so the same lookups touch a small B-tree
(7.1 -> 2.8 ms). The search names it with ``INDEXED BY`` (SQLite would otherwise take the
rowid); a store below this revision is searched as before.

SQLite only, like the other search objects (``search_names`` lists it, autogenerate skips it):
PostgreSQL's CJK plan fetches its few candidates by primary key, and there the index would
only cost every insert.

Derived data only: the downgrade drops it and loses nothing. Hermes leaves indexes it does not
know alone; ``schema_version`` stays 17.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Spelled out here, not imported: an old revision must not change when the package does.
INDEX_NAME = "ix_messages_substring_page"
COLUMNS = ["id", "timestamp", "active", "compacted", "role", "session_id"]


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    # IF NOT EXISTS: an interrupted upgrade (index built, revision not yet stamped) re-runs.
    op.create_index(INDEX_NAME, "messages", COLUMNS, if_not_exists=True)


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    op.drop_index(INDEX_NAME, table_name="messages", if_exists=True)
