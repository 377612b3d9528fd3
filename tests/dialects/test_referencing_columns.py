"""A dialect's catalog of the columns whose foreign keys name a table's column
(``referencing_columns``), and whether a cell holds bytes (``holds_bytes``): what
``db doctor`` finds session ids stored as bytes with, and rewrites as their text."""

from __future__ import annotations

import sqlalchemy as sa

from sessionstore.dialects import dialect_for_url
from sessionstore.storage.engine import create_store_engine


def test_the_columns_that_name_a_session_by_foreign_key(store_url: str) -> None:
    dialect = dialect_for_url(store_url)
    engine = create_store_engine(store_url)
    try:
        with engine.connect() as conn:
            named = dialect.referencing_columns(conn, "sessions", "id")
            nothing = dialect.referencing_columns(conn, "messages", "id")
            text_cells = conn.execute(
                sa.select(sa.func.count()).where(
                    dialect.holds_bytes(sa.literal_column("'s1'"))
                )
            ).scalar_one()
    finally:
        engine.dispose()
    assert named == [
        ("messages", "session_id"), ("session_model_usage", "session_id"),
        ("sessions", "parent_session_id"),
    ]  # fmt: skip
    assert nothing == [] and text_cells == 0


def test_a_blob_is_bytes_where_sqlite_keeps_it(migrated_sqlite_url: str) -> None:
    dialect = dialect_for_url(migrated_sqlite_url)
    engine = create_store_engine(migrated_sqlite_url)
    try:
        with engine.connect() as conn:
            held = conn.execute(
                sa.select(dialect.holds_bytes(sa.literal(b"s1", sa.LargeBinary)))
            ).scalar_one()
    finally:
        engine.dispose()
    assert held == 1
