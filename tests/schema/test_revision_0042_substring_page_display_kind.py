"""Revision 0042: the covering index of substring pages holds ``display_kind``.

A store at 0041 with hidden rows is upgraded: the index gains the column, a short CJK search
leaves the hidden rows out from the index alone (no candidate's table row read), and finds
what it found before minus those rows; the downgrade gives 0024's index back, every row kept,
and the search there is still right (through the rows).
"""

from __future__ import annotations

from contextlib import closing
from pathlib import Path

from sessionstore.api.session_db import SessionDB
from sessionstore.dialects import sqlite_library
from sessionstore.schema import migrate
from sessionstore.search.object_names import BIGRAM_TABLE

COLUMNS_0024 = ["id", "timestamp", "active", "compacted", "role", "session_id"]


def index_columns(path: Path) -> list[str]:
    # The store's own SQLite library: never two libraries on one file in one process.
    with closing(sqlite_library.connect(path)) as conn:
        return [str(row[2]) for row in conn.execute(
            "PRAGMA index_info('ix_messages_substring_page')")]


def short_cjk_plan(path: Path) -> str:
    """The plan of the page choice a 2-character CJK needle with the hidden filter runs."""
    with closing(sqlite_library.connect(path)) as conn:
        rows = conn.execute(
            f"EXPLAIN QUERY PLAN SELECT m.id FROM {BIGRAM_TABLE} "
            "JOIN messages AS m INDEXED BY ix_messages_substring_page "
            f"ON m.id = {BIGRAM_TABLE}.rowid "
            f"WHERE {BIGRAM_TABLE} MATCH '\"数据\"' "
            "AND COALESCE(m.display_kind, '') <> 'hidden' "
            "ORDER BY m.timestamp DESC, m.id DESC LIMIT 20"
        ).fetchall()
        return "\n".join(str(row[-1]) for row in rows)


def test_upgrade_adds_display_kind_and_downgrade_gives_0024s_index_back(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    url = f"sqlite:///{path}"
    migrate.upgrade(url, "0041")
    with closing(sqlite_library.connect(path)) as conn, conn:
        conn.execute("INSERT INTO sessions (id, source, started_at) VALUES ('s', 'cli', 1)")
        conn.executemany(
            "INSERT INTO messages (session_id, role, content, timestamp, display_kind)"
            " VALUES ('s', 'user', ?, ?, ?)",
            [(f"数据库 {number}", number, "hidden" if number % 5 == 0 else None)
             for number in range(30)],
        )
    assert index_columns(path) == COLUMNS_0024

    migrate.upgrade(url)

    assert index_columns(path) == [*COLUMNS_0024, "display_kind"]
    assert "USING COVERING INDEX ix_messages_substring_page" in short_cjk_plan(path)
    shown = {number + 1 for number in range(30) if number % 5}  # ids count from 1
    with SessionDB(url=url) as db:
        assert {hit["id"] for hit in db.search_messages("数据", limit=100)} == shown

    migrate.downgrade(url, "0041")

    assert index_columns(path) == COLUMNS_0024
    assert "USING COVERING INDEX" not in short_cjk_plan(path)  # the kind is read from the row
    with closing(sqlite_library.connect(path)) as conn:
        assert conn.execute("SELECT count(*) FROM messages").fetchone()[0] == 30
        assert conn.execute("SELECT version_num FROM alembic_version").fetchone()[0] == "0041"
    migrate.upgrade(url)  # and back up again, to the same index
    assert index_columns(path) == [*COLUMNS_0024, "display_kind"]
