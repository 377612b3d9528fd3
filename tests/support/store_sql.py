"""Raw SQL on a store, for tests that set up or inspect what the methods do not expose."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from sessionstore.api.session_db import SessionDB


def run(db: SessionDB, sql: str, **params: Any) -> list[dict[str, Any]]:
    """``sql`` with ``params`` in one write transaction of ``db``'s store; its rows as dicts."""

    def work(conn: sa.Connection) -> list[dict[str, Any]]:
        result = conn.execute(sa.text(sql), params)
        return [dict(row) for row in result.mappings()] if result.returns_rows else []

    return db.store.write(work)
