"""PostgreSQL: the search GIN indexes keep a pending list of 256 kB, not 4 MB (nothing on SQLite).

Why: a GIN index with ``fastupdate`` (the default) queues new rows' entries in a pending list,
unsorted, until it holds ``gin_pending_list_limit`` (4 MB by default) or a vacuum merges it,
and every search reads that whole list. A store loaded by ``db copy`` and appended to keeps up
to 4 MB in each of its three search indexes: on the bench's 100k-message store the CJK bigram
index had 457 pending pages (46,000 entries) and every CJK query read them all, 460 buffers for
a lookup of 850 rows that takes 7 once merged (issue 31; ``ANALYZE`` does not merge them, only
autovacuum's does). At 256 kB a search reads at most 32 pending pages; an append that fills the
list merges it, as before, in smaller steps: the bench's appends were no slower (5.07 against
4.91 ms a message on a busy machine, within its noise; at 64 kB 6.2 ms).

The upgrade sets the limit and merges what each list holds now. Derived settings only: the
downgrade resets the limit to the server's default and loses nothing. An index that is missing
(dropped by hand; ``db doctor --fix`` builds it with the limit) is skipped. ``schema_version``
stays 31.

Revision ID: 0041
Revises: 0040
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0041"
down_revision: str | None = "0040"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Spelled out here, not imported: an old revision must not change when the package does.
INDEXES = ("ix_messages_content_tsvector", "ix_messages_indexed_text_trgm",
           "ix_messages_cjk_bigrams")
PENDING_LIST_KB = 256


def _present(bind: sa.engine.Connection) -> list[str]:
    # to_regclass resolves in the store's schema (its search_path), as the names do below.
    return [
        name for name in INDEXES
        if bind.execute(sa.text("SELECT to_regclass(:name)"), {"name": name}).scalar()
    ]  # fmt: skip


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    for name in _present(bind):
        bind.exec_driver_sql(
            f"ALTER INDEX {name} SET (gin_pending_list_limit = {PENDING_LIST_KB})"
        )
        bind.execute(sa.text("SELECT gin_clean_pending_list(to_regclass(:name))"), {"name": name})


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    for name in _present(bind):
        bind.exec_driver_sql(f"ALTER INDEX {name} RESET (gin_pending_list_limit)")
