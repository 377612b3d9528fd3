"""PostgreSQL: ``messages.id`` and its sequence become 64-bit (nothing on SQLite).

Why: the table was created with ``SERIAL`` (revision 0001 follows Hermes's DDL, whose
``INTEGER PRIMARY KEY`` is 64 bits on SQLite but 32 on PostgreSQL). A busy deployment passes
2**31 message ids (a gateway writing 100 messages a second does in eight months), after which
every append fails; and ``db copy`` of a SQLite store whose ids passed 2**31 (ids are never
reused, so a long-lived file gets there without holding that many rows) could not be copied.
SQLite's INTEGER PRIMARY KEY already holds 64 bits and its DDL stays Hermes's.

PostgreSQL rewrites the table and its indexes once (the search columns and GIN indexes
included): on a large table this takes a while, under an exclusive lock, once.

Downgrade narrows the column and the sequence back only when every id, and the sequence's
next value, fit in 32 bits; otherwise it refuses and changes nothing (as revision 0009's).

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INT32_MAX = 2**31 - 1


def _sequence(bind: sa.engine.Connection) -> str | None:
    return bind.execute(sa.text("SELECT pg_get_serial_sequence('messages', 'id')")).scalar()


def _widen(bind: sa.engine.Connection, type_name: str) -> None:
    bind.exec_driver_sql(f"ALTER TABLE messages ALTER COLUMN id TYPE {type_name}")
    sequence = _sequence(bind)
    if sequence is not None:
        # The sequence has its own type (and maximum) since PostgreSQL 10.
        bind.exec_driver_sql(f"ALTER SEQUENCE {sequence} AS {type_name}")


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    _widen(bind, "BIGINT")


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    highest = bind.execute(sa.text("SELECT max(id) FROM messages")).scalar()
    sequence = _sequence(bind)
    next_id = None
    if sequence is not None:
        next_value = "CASE WHEN is_called THEN last_value + 1 ELSE last_value END"
        next_id = bind.execute(sa.text(f"SELECT {next_value} FROM {sequence}")).scalar()
    for what, value in (("a message id", highest), ("the next message id", next_id)):
        if value is not None and value > INT32_MAX:
            raise RuntimeError(
                f"cannot downgrade below revision 0023: {what} is {value}, beyond the 32 bits "
                "of revision 0022's messages.id; nothing was changed"
            )
    _widen(bind, "INTEGER")
