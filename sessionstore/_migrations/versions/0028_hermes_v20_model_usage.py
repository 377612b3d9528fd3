"""Hermes schema v20: per-model usage attribution (``session_model_usage``), seeded.

Why: from v20 (issue #51607) Hermes records every API call's tokens and cost in
``session_model_usage`` under the live model and billing route, in the same transaction as the
session's totals, and its Insights and cost reports read that table. Rows are keyed, at v20,
by ``(session_id, model, billing_provider, billing_base_url, billing_mode)``, ``ON DELETE
CASCADE`` from the session (``_migrations/model_usage_ddl.py``); v22 adds ``task`` to the key
(revision 0030).

Data step, Hermes's: each session with any tokens gets one row from its totals (``model``
'unknown' when NULL, the route's NULLs as '', ``first_seen`` its start, ``last_seen`` its end
or start), so reports read older sessions from the table too; a row already there for that
key wins (``INSERT OR IGNORE`` / ``ON CONFLICT DO NOTHING``). Like 0019, it runs only when this
run takes the file across v20 (a file Hermes numbered 20 or more was seeded by Hermes and has
recorded since; seeding again would double-count nothing, but could add rows Hermes chose not
to). The table is created only when absent (a Hermes 0.19.0 file has it in its v22 shape).

Downgrade drops the table: a v19 file has no place for per-model rows; the sessions' totals,
which the rows add up to, stay. Writes 19 back.

Revision ID: 0028
Revises: 0027
Create Date: 2027-01-10
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from sessionstore._migrations import helpers, model_usage_ddl
from sessionstore._migrations.chain_state import HERMES_SCHEMA_BEFORE_CHAIN

revision: str = "0028"
down_revision: str | None = "0027"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA_VERSION = 20
_TOKENS = (
    "COALESCE(input_tokens, 0) + COALESCE(output_tokens, 0) + COALESCE(cache_read_tokens, 0)"
    " + COALESCE(cache_write_tokens, 0) + COALESCE(reasoning_tokens, 0)"
)
SEED_COLUMNS = (
    "session_id, model, billing_provider, billing_base_url, billing_mode, api_call_count,"
    " input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens,"
    " estimated_cost_usd, actual_cost_usd, cost_status, cost_source, first_seen, last_seen"
)
SEED_SELECT = (
    "SELECT id, COALESCE(model, 'unknown'), COALESCE(billing_provider, ''),"
    " COALESCE(billing_base_url, ''), COALESCE(billing_mode, ''), COALESCE(api_call_count, 0),"
    " COALESCE(input_tokens, 0), COALESCE(output_tokens, 0), COALESCE(cache_read_tokens, 0),"
    " COALESCE(cache_write_tokens, 0), COALESCE(reasoning_tokens, 0),"
    " COALESCE(estimated_cost_usd, 0), COALESCE(actual_cost_usd, 0), cost_status, cost_source,"
    f" started_at, COALESCE(ended_at, started_at) FROM sessions WHERE {_TOKENS} > 0"
)


def seed_from_session_totals(bind: sa.engine.Connection) -> None:
    if bind.dialect.name == "sqlite":
        statement = f"INSERT OR IGNORE INTO {model_usage_ddl.TABLE} ({SEED_COLUMNS}) {SEED_SELECT}"
    else:
        statement = (
            f"INSERT INTO {model_usage_ddl.TABLE} ({SEED_COLUMNS}) {SEED_SELECT}"
            " ON CONFLICT DO NOTHING"
        )
    bind.execute(sa.text(statement))


def upgrade() -> None:
    bind = op.get_bind()
    if not helpers.table_exists(model_usage_ddl.TABLE):
        model_usage_ddl.create(with_task=False)
    else:
        for name, indexed in model_usage_ddl.INDEXES.items():
            helpers.create_index_if_missing(name, model_usage_ddl.TABLE, list(indexed))
    before = bind.info.get(HERMES_SCHEMA_BEFORE_CHAIN)
    if not (isinstance(before, int) and before >= SCHEMA_VERSION):
        seed_from_session_totals(bind)
    helpers.set_schema_version(SCHEMA_VERSION)


def downgrade() -> None:
    if helpers.table_exists(model_usage_ddl.TABLE):
        model_usage_ddl.drop()
    helpers.set_schema_version(SCHEMA_VERSION - 1)
