"""Hermes schema v22: the task dimension in the per-model usage key.

Why: Hermes v22 (hermes-agent 0.19.0, issue #23270) records auxiliary model calls (vision,
compression, title generation...) apart from the main agent loop's, under ``task``
(``''`` = the main loop), which joins ``session_model_usage``'s primary key. Its data step
rebuilds a table whose key lacks ``task`` (SQLite cannot alter a key), every existing row
being the main loop's; this revision does the same (``model_usage_ddl.rebuild``), on both
databases, and leaves a table whose key already has ``task`` alone (a Hermes 0.19.0 file
created the table in that shape). The unconditional heal of a file numbered 22 whose key still
lacks ``task`` (#73823) is the adoption step's (``sessionstore.schema.legacy``).

Downgrade gives the table its v21 key back, summing the rows of one route (their tokens, calls
and costs) so the route's totals stay right, and writes 21 back.

Revision ID: 0030
Revises: 0029
Create Date: 2027-01-10
"""

from __future__ import annotations

from collections.abc import Sequence

from sessionstore._migrations import helpers, model_usage_ddl

revision: str = "0030"
down_revision: str | None = "0029"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA_VERSION = 22


def upgrade() -> None:
    if not model_usage_ddl.key_has_task():
        model_usage_ddl.rebuild(with_task=True)
    helpers.set_schema_version(SCHEMA_VERSION)


def downgrade() -> None:
    if model_usage_ddl.key_has_task():
        model_usage_ddl.rebuild(with_task=False)
    helpers.set_schema_version(SCHEMA_VERSION - 1)
