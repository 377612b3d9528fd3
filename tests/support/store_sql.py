"""Raw SQL on a store, for tests that set up or inspect what the methods do not expose."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from alembic.migration import MigrationContext
from alembic.operations import Operations

from sessionstore.api.session_db import SessionDB


def run(db: SessionDB, sql: str, **params: Any) -> list[dict[str, Any]]:
    """``sql`` with ``params`` in one write transaction of ``db``'s store; its rows as dicts."""

    def work(conn: sa.Connection) -> list[dict[str, Any]]:
        result = conn.execute(sa.text(sql), params)
        return [dict(row) for row in result.mappings()] if result.returns_rows else []

    return db.store.write(work)


def as_a_revision_step(engine: sa.Engine, step: Callable[[sa.Connection], None]) -> None:
    """``step(conn)`` in one explicit ``BEGIN IMMEDIATE`` transaction with Alembic's ``op``
    bound to it, as the migration environment runs a revision: committed, or rolled back
    when it raises. ``engine``: a SQLite engine in driver autocommit (isolation_level None)."""
    with engine.connect() as conn:
        conn.exec_driver_sql("BEGIN IMMEDIATE")
        try:
            with Operations.context(MigrationContext.configure(conn)):
                step(conn)
        except BaseException:
            conn.exec_driver_sql("ROLLBACK")
            raise
        conn.exec_driver_sql("COMMIT")
