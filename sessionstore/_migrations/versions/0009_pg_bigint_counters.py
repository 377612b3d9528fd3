"""PostgreSQL: every counter becomes a 64-bit BIGINT (nothing on SQLite).

Why: PostgreSQL's ``integer`` is 32 bits. A session with prompt caching passes 2**31
cache-read tokens in a few weeks of use, after which every ``update_token_counts`` for it
fails; and ``db copy`` of a SQLite store (whose INTEGER is 64 bits) holding 3e9 tokens could
not be copied at all. SQLite's INTEGER already holds 64 bits, and its DDL stays exactly
Hermes's, so this revision does nothing there.

Downgrade narrows the columns back to ``integer`` only when every value fits: a value beyond
32 bits is refused with an error naming the column, and nothing is changed (a downgrade must
never silently clamp or lose a count).

``schema_version`` is left at 6.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COUNTER_COLUMNS: dict[str, tuple[str, ...]] = {
    "sessions": (
        "message_count",
        "tool_call_count",
        "input_tokens",
        "output_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
        "reasoning_tokens",
    ),
    "messages": ("token_count",),
}
INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1


def _alter(table: str, columns: Sequence[str], type_name: str) -> None:
    clauses = ", ".join(f"ALTER COLUMN {name} TYPE {type_name}" for name in columns)
    # One statement per table: PostgreSQL rewrites the table once, not once per column.
    op.get_bind().exec_driver_sql(f"ALTER TABLE {table} {clauses}")


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table, columns in COUNTER_COLUMNS.items():
        _alter(table, columns, "BIGINT")


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    for table, columns in COUNTER_COLUMNS.items():
        for column in columns:
            statement = sa.text(
                f"SELECT count(*) FROM {table} WHERE {column} < :low OR {column} > :high"
            )
            too_big = bind.execute(statement, {"low": INT32_MIN, "high": INT32_MAX}).scalar_one()
            if too_big:
                raise RuntimeError(
                    f"cannot downgrade below revision 0009: {too_big} row(s) of {table}.{column} "
                    "hold values beyond 32 bits, which revision 0008's integer columns cannot "
                    "store; nothing was changed"
                )
    for table, columns in COUNTER_COLUMNS.items():
        _alter(table, columns, "INTEGER")
