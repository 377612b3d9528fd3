"""Hermes schema v4: titles are unique (partial unique index).

Why: a title must name one session, so resuming by title is unambiguous. A v3 file may
already hold duplicates, on which CREATE UNIQUE INDEX would fail and leave the user stuck;
this step first renumbers the later duplicates along the title lineage ('name' -> 'name #2')
so that every session and every title survives. The downgrade drops the index but cannot know
which titles were renumbered, so they stay renumbered (still valid v3 data).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from sessionstore._migrations import helpers

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA_VERSION = 4

TITLE_INDEX = "idx_sessions_title_unique"


def upgrade() -> None:
    helpers.renumber_duplicate_titles()
    helpers.create_index_if_missing(
        TITLE_INDEX,
        "sessions",
        ["title"],
        unique=True,
        sqlite_where=sa.text("title IS NOT NULL"),
        postgresql_where=sa.text("title IS NOT NULL"),
    )
    helpers.set_schema_version(SCHEMA_VERSION)


def downgrade() -> None:
    helpers.drop_index_if_present(TITLE_INDEX, "sessions")
    helpers.set_schema_version(SCHEMA_VERSION - 1)
