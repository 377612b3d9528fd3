"""Revision 0041: PostgreSQL's search GIN indexes keep a 256 kB pending list.

A store at 0040 whose indexes hold a pending list (rows written under the default 4 MB limit)
is upgraded: each index gets the limit and its list is merged, every row still found; the
downgrade resets the limit. An index dropped by hand is skipped, and rebuilt with the limit by
the repair after the chain (``tests/search/test_head_layout.py`` compares the whole layout a
repair gives with the chain's).
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from sessionstore.api.session_db import SessionDB
from sessionstore.schema import migrate
from sessionstore.search.postgresql_ddl import HEAD_INDEXES, PENDING_LIST_KB

pytestmark = pytest.mark.postgresql


def options_and_pending(url: str) -> dict[str, tuple[list[str], int]]:
    """Each search index's storage options and its pending list's pages (from its metapage:
    pgstattuple need not be installed)."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            found = {}
            for name in HEAD_INDEXES:
                options = conn.execute(
                    sa.text("SELECT reloptions FROM pg_class WHERE oid = to_regclass(:name)"),
                    {"name": name},
                ).scalar()
                # gin_clean_pending_list reports the pages it merged: run it in a transaction
                # rolled back, to read the count without changing the index.
                with conn.begin_nested() if conn.in_transaction() else conn.begin() as tx:
                    pages = conn.execute(
                        sa.text("SELECT gin_clean_pending_list(to_regclass(:name))"),
                        {"name": name},
                    ).scalar()
                    tx.rollback()
                found[name] = (list(options or []), -1 if pages is None else int(pages))
            return found
    finally:
        engine.dispose()


def test_the_upgrade_sets_the_limit_and_merges_the_lists(empty_pg_url: str) -> None:
    url = empty_pg_url
    migrate.upgrade(url, "0040")
    engine = sa.create_engine(url)
    with engine.begin() as conn:  # a store at 0040 (SessionDB would upgrade it)
        conn.exec_driver_sql("INSERT INTO sessions (id, source, started_at) VALUES ('s', 'cli', 1)")
        for number in range(60):
            conn.execute(
                sa.text("INSERT INTO messages (session_id, role, content, timestamp) "
                        "VALUES ('s', 'user', :content, :number)"),
                {"content": f"数据库迁移 {number} deploy the parser", "number": number},
            )
    engine.dispose()
    before = options_and_pending(url)
    assert all(options == [] and pages > 0 for options, pages in before.values()), before

    migrate.upgrade(url, "0041")

    after = options_and_pending(url)
    assert after == {
        name: ([f"gin_pending_list_limit={PENDING_LIST_KB}"], 0) for name in HEAD_INDEXES
    }
    with SessionDB(url=url) as db:
        assert len(db.search_messages("数据库", limit=100)) == 60
        assert len(db.search_messages("parser", limit=100)) == 60

    migrate.downgrade(url, "0040")

    assert all(options == [] for options, _ in options_and_pending(url).values())


def test_an_index_dropped_by_hand_is_skipped_then_rebuilt_with_the_limit(
    empty_pg_url: str,
) -> None:
    """0041 passes over a missing index; the repair after the chain builds it from the head
    layout, which has the limit."""
    url = empty_pg_url
    migrate.upgrade(url, "0040")
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP INDEX ix_messages_indexed_text_trgm")
    engine.dispose()

    migrate.upgrade(url, "head")

    assert options_and_pending(url) == {
        name: ([f"gin_pending_list_limit={PENDING_LIST_KB}"], 0) for name in HEAD_INDEXES
    }
