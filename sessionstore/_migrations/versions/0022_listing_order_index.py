"""An index in the listing's own order: ``sessions (started_at DESC, id)``.

Why: ``list_sessions_rich`` pages newest first with ``id`` as the tie-breaker (pages must not
overlap or skip sessions that started in the same instant). Hermes's ``idx_sessions_started``
holds ``started_at`` alone, so every page also sorted its rows on ``id`` and the listing
could not simply walk an index and stop after the page: it chose the page from ``sessions``
first and then looked every row up again. With this index the listing is one index walk that
stops at the page's end, and the preview and last-activity subqueries run for the page's rows
only (on the 100,000-message bench file: 0.35 -> 0.27 ms for 50 rows).

Derived data only: the downgrade drops it and loses nothing. Hermes leaves indexes it does not
know alone; ``schema_version`` stays 17.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Spelled out here, not imported: an old revision must not change when the package does.
INDEX_NAME = "ix_sessions_started_id"


def upgrade() -> None:
    # IF NOT EXISTS: an interrupted upgrade (index built, revision not yet stamped) re-runs.
    op.create_index(
        INDEX_NAME, "sessions", [sa.text("started_at DESC"), "id"], if_not_exists=True
    )


def downgrade() -> None:
    op.drop_index(INDEX_NAME, table_name="sessions", if_exists=True)
