"""An index of messages by time, ``messages (timestamp)``: substring hits stop early.

Why: a CJK query's hits come newest first (``ORDER BY timestamp DESC, id DESC``, Hermes's
order), and choosing a page ordered every candidate by time: linear in the store (迁移 in
every 68th message: 0.55 ms at 100k messages, 15 ms at 1M, ``scripts/bench.py --scale``).
The bigram index walks its rows newest id first and stops after a page, but an id is not a
time: a row imported with an old id can carry a later time. This index proves, in a few
dozen entries, that no row older by id is newer by time than the page's last hit (walking
the rows newer than it), so the page taken in id order is exactly the page in time order;
where the proof fails the search orders every candidate, as before
(``sessionstore.search.sqlite``, docs/search.md).

SQLite only, like the other search objects (``search_names`` lists it, autogenerate skips it):
PostgreSQL's CJK plan fetches its candidates from a GIN index, which has no id order to stop
in. About 0.6 s to build at 1M messages; one more B-tree entry per append, at its right
edge (times grow).

Derived data only: the downgrade drops it and loses nothing. Hermes leaves indexes it does not
know alone; ``schema_version`` stays 31.

Revision ID: 0040
Revises: 0039
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0040"
down_revision: str | None = "0039"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Spelled out here, not imported: an old revision must not change when the package does.
INDEX_NAME = "ix_messages_time"
COLUMNS = ["timestamp"]


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    # IF NOT EXISTS: an interrupted upgrade (index built, revision not yet stamped) re-runs.
    op.create_index(INDEX_NAME, "messages", COLUMNS, if_not_exists=True)


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    op.drop_index(INDEX_NAME, table_name="messages", if_exists=True)
