"""The covering index of substring pages holds ``display_kind`` too: ``messages (id,
timestamp, active, compacted, role, session_id, display_kind)``.

Why: iot 0.22.2 never shows a row ``display_kind = 'hidden'`` (model-facing scaffolding the
person never saw) as a search hit, on any route, and the search now leaves those rows out as
it does. A 1- or 2-character CJK query chooses its page from revision 0024's covering index,
which did not hold the column: the filter then read every candidate's row from ``messages``
(whole contents), which is what 0024 was built to avoid (about 2.8 -> 7 ms by its figures).
With the column in the index, the filter is answered from the index again.

The index keeps its name (the search names it with ``INDEXED BY``): a store at 0024..0041 is
searched correctly through the narrower index, only slower for those queries.

SQLite only, like 0024: PostgreSQL's CJK plan fetches its few candidates by primary key.
``display_kind`` exists from revision 0032 on (v24), so the column is there.

Derived data only: the downgrade builds 0024's index again and loses nothing. Hermes leaves
indexes it does not know alone; ``schema_version`` stays 31.

Revision ID: 0042
Revises: 0041
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0042"
down_revision: str | None = "0041"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Spelled out here, not imported: an old revision must not change when the package does.
INDEX_NAME = "ix_messages_substring_page"
COLUMNS_BEFORE = ["id", "timestamp", "active", "compacted", "role", "session_id"]
COLUMNS = [*COLUMNS_BEFORE, "display_kind"]


def _rebuild(columns: list[str]) -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    # IF EXISTS / IF NOT EXISTS: an interrupted upgrade or downgrade (one transaction, but a
    # store may have lost the index by hand) runs again to the same end.
    op.drop_index(INDEX_NAME, table_name="messages", if_exists=True)
    op.create_index(INDEX_NAME, "messages", columns, if_not_exists=True)


def upgrade() -> None:
    _rebuild(COLUMNS)


def downgrade() -> None:
    _rebuild(COLUMNS_BEFORE)
