"""Every repair of the search objects builds the head layout, and the same one.

A store at head loses a search trigger or a search table (by hand, a half-copied schema); the
migrations' repair after the chain (``alembic upgrade head``) and ``sessionstore db doctor
--fix`` must each give back exactly what a fresh head store has: on SQLite the very same
``sqlite_master`` rows (the trigram triggers with their ASCII prefilter, the bigram triggers in
revision 0025's compact text), on PostgreSQL the same columns, indexes and CJK gram function;
and the rebuilt indexes hold every message, the one written while a trigger was missing too.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from sessionstore import cli
from sessionstore.api.session_db import SessionDB
from sessionstore.ops import doctor
from sessionstore.schema import migrate
from sessionstore.storage.engine import create_store_engine
from sessionstore.storage.store import Store

Layout = frozenset[tuple[Any, ...]]

# What each dialect loses: a trigger (SQLite; PostgreSQL has no search trigger, so an index)
# and a table (SQLite's FTS5 table; PostgreSQL's stored tsvector column, with its index).
DAMAGE = {
    ("sqlite", "trigger"): "DROP TRIGGER messages_fts_trigram_insert",
    ("sqlite", "table"): "DROP TABLE messages_cjk_bigram",
    ("postgresql", "trigger"): "DROP INDEX ix_messages_cjk_bigrams",
    ("postgresql", "table"): "ALTER TABLE messages DROP COLUMN content_tsv",
}
SEEDED = {"deploy": "deploy the parser", "数据库": "我们讨论了数据库迁移的方案"}
LATE = {"迁移计划": "写在触发器缺席时的迁移计划"}


def layout(url: str) -> Layout:
    """The store's schema as the catalog holds it, text included."""
    engine = create_store_engine(url, set_journal_mode=False)
    try:
        with engine.connect() as conn:
            if engine.dialect.name == "sqlite":
                rows = conn.exec_driver_sql("SELECT type, name, tbl_name, sql FROM sqlite_master")
                return frozenset(tuple(row) for row in rows)
            columns = conn.exec_driver_sql(
                "SELECT 'column', column_name, data_type, generation_expression "
                "FROM information_schema.columns WHERE table_name = 'messages'"
            )
            indexes = conn.exec_driver_sql(
                "SELECT 'index', indexname, indexdef FROM pg_indexes "
                "WHERE tablename IN ('messages', 'sessions')"
            )
            functions = conn.exec_driver_sql(
                "SELECT 'function', proname, prosrc FROM pg_proc "
                "WHERE proname = 'sessionstore_cjk_grams'"
            )
            return frozenset(tuple(row) for rows in (columns, indexes, functions) for row in rows)
    finally:
        engine.dispose()


def search_checks(url: str) -> dict[str, str]:
    with Store.open(url) as store:
        report = doctor.diagnose(store)
    return {check.name: check.status for check in report.checks if check.name.startswith("fts_")}


def upgrade_head(url: str) -> None:
    migrate.upgrade(url, "head")


def doctor_fix(url: str) -> None:
    result = CliRunner().invoke(cli.app, ["--url", url, "db", "doctor", "--fix", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["healthy"] is True


REPAIRS: dict[str, Callable[[str], None]] = {"upgrade": upgrade_head, "doctor": doctor_fix}


@pytest.mark.parametrize("repair", sorted(REPAIRS))
@pytest.mark.parametrize("lost", ["trigger", "table"])
def test_a_repair_gives_back_exactly_the_head_layout(
    fresh_store_url: str, lost: str, repair: str
) -> None:
    url = fresh_store_url  # at head: a copy of what the chain made (the repair is the subject)
    with SessionDB(url=url) as db:
        db.create_session("s", "cli")
        for content in SEEDED.values():
            db.append_message("s", "user", content)
    fresh = layout(url)
    dialect = sa.engine.make_url(url).get_backend_name()

    engine = create_store_engine(url, set_journal_mode=False)
    with engine.begin() as conn:
        conn.exec_driver_sql(DAMAGE[dialect, lost])
    engine.dispose()
    assert layout(url) != fresh
    assert search_checks(url)["fts_objects"] == "fail"
    expected = dict(SEEDED)
    if lost == "trigger":
        # Written while the trigger (index) was missing: only a rebuild from the rows finds it.
        with SessionDB(url=url) as db:
            db.append_message("s", "user", LATE["迁移计划"])
        expected.update(LATE)

    REPAIRS[repair](url)

    assert layout(url) == fresh
    checks = search_checks(url)
    assert checks["fts_objects"] == checks["fts_integrity"] == "ok", checks
    assert checks["fts_parity"] in ("ok", "skip"), checks  # skip: PostgreSQL, by construction
    with SessionDB(url=url) as db:
        ids = {message["content"]: message["id"] for message in db.get_messages("s")}
        for query, content in expected.items():
            assert [hit["id"] for hit in db.search_messages(query)] == [ids[content]], query
