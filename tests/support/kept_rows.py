"""Every row and value of a Hermes file, before and after a migration: the adoption checks'
snapshot (`tests/schema/test_adopting_v23_v31_shapes.py`, the fork field tests). Read with the
standard library's ``sqlite3``, only while no store holds the file."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from file_checks import open_db

FILLED_BY_BACKFILL = frozenset({
    "messages.message_uid", "messages.display_order", "messages.display_identity",
    "sessions.system_prompt_hash",
})  # fmt: skip
"""Columns whose NULLs the chain fills (uids, display order, and the hash of a prompt a paused
v25 step left inline, its inline copy kept): a value may appear, none changes."""
OURS_OR_LAYOUT = ("fts_", "message_uid_backfill", "db_file_generation", "store_", "sessionstore")
"""``state_meta`` keys that are search-layout marks or file identity, not rows to compare."""

Rows = dict[str, dict[tuple[Any, ...], dict[str, Any]]]


def plain_tables(conn: sqlite3.Connection) -> list[str]:
    """Every ordinary table but the full-text index's own (its shadow tables are the index, and
    ``fts_v22_trash_*`` an old index's, staged by Hermes's optimize-storage)."""
    names = [
        str(row[0])
        for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND sql NOT LIKE 'CREATE VIRTUAL%'"
        )
    ]
    return sorted(
        name for name in names
        if not name.startswith(("sqlite_", "messages_fts", "fts_v22_trash_"))
        and name != "alembic_version"
    )  # fmt: skip


def rows_of(path: Path) -> Rows:
    """Every row of every plain table, keyed by its primary key (or rowid)."""
    found: Rows = {}
    with open_db(path) as conn:
        for table in plain_tables(conn):
            info = list(conn.execute(f'PRAGMA table_info("{table}")'))
            key = [str(row[1]) for row in sorted(info, key=lambda row: row[5]) if row[5]]
            select = ", ".join(f'"{column}"' for column in key) if key else "rowid"
            rows = conn.execute(f'SELECT {select}, * FROM "{table}"').fetchall()
            width = len(key) or 1
            found[table] = {tuple(row)[:width]: dict(zip(row.keys()[width:], tuple(row)[width:],
                                                         strict=True))
                            for row in rows}  # fmt: skip
    return found


AFTER_V22_TABLES = frozenset({
    "system_prompts", "session_turn_leases", "gateway_hygiene_state", "gateway_heartbeats",
    "conversation_generations",
})  # fmt: skip
"""Tables revisions 0031…0039 add (v25…v27, and v26's un-bumped heartbeats): a downgrade to
0030 takes them, as it takes the columns those revisions add (prompts are moved inline first)."""


def assert_kept(before: Rows, after: Rows, *, where: str, down: bool = False) -> None:
    """Every row of ``before`` is in ``after`` with every value, where ``after`` has the column
    (and, down at 0030, the table)."""
    lost = []
    for table, rows in before.items():
        if table == "schema_version" or (down and table in AFTER_V22_TABLES and table not in after):
            continue
        assert table in after, f"{where}: table {table} is gone"
        for key, row in rows.items():
            if table == "state_meta" and str(key[0]).startswith(OURS_OR_LAYOUT):
                continue
            now = after[table].get(key)
            if now is None:
                lost.append(f"{table}{key}")
                continue
            for column, value in row.items():
                if column not in now:
                    continue  # the target revision does not have the column
                filled = FILLED_BY_BACKFILL | ({"sessions.system_prompt"} if down else set())
                if value is None and f"{table}.{column}" in filled:
                    continue  # a backfill, or a hashed prompt moved inline (checked apart)
                if now[column] != value:
                    lost.append(f"{table}{key}.{column}: {value!r} -> {now[column]!r}")
    assert lost == [], f"{where}: " + "; ".join(lost[:20])
