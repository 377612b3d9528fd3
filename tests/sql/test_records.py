"""The record field lists are the tables' columns: an export cannot silently drop a new column.

``SessionRecord``/``MessageRecord`` decide what ``get_session``, ``get_messages`` and the JSONL
export carry. A column added by a migration (and to ``tables.py``, which the model/DDL match
test of ``test_migrations.py`` enforces) but forgotten here would vanish from every export; so
the lists must equal the Core tables' columns, in order, and the columns of a migrated
database on each dialect, and an exported line must carry every one of them.
"""

from __future__ import annotations

import io
import json

from sqlalchemy import inspect

from sessionstore import SessionDB
from sessionstore.ops.transfer import export_jsonl
from sessionstore.schema.models import SEARCH_OBJECT_NAMES
from sessionstore.sql.records import MESSAGE_FIELDS, SESSION_FIELDS
from sessionstore.sql.tables import messages_table, sessions_table
from sessionstore.storage.engine import create_store_engine


def test_record_fields_are_the_table_columns_in_order() -> None:
    assert tuple(sessions_table.c.keys()) == SESSION_FIELDS
    assert tuple(messages_table.c.keys()) == MESSAGE_FIELDS


def test_record_fields_are_the_columns_of_a_migrated_store(store_url: str) -> None:
    engine = create_store_engine(store_url, set_journal_mode=False)
    try:
        with engine.connect() as conn:
            inspector = inspect(conn)
            columns = {
                table: [column["name"] for column in inspector.get_columns(table)]
                for table in ("sessions", "messages")
            }
    finally:
        engine.dispose()
    # Full-text columns (PostgreSQL's generated tsvector) are derived, never exported.
    assert set(columns["sessions"]) - SEARCH_OBJECT_NAMES == set(SESSION_FIELDS)
    assert set(columns["messages"]) - SEARCH_OBJECT_NAMES == set(MESSAGE_FIELDS)


def test_an_export_line_carries_every_column(store_url: str) -> None:
    with SessionDB(url=store_url) as db:
        db.create_session("s1", "cli", model="m")
        db.append_message("s1", "user", "hello", tool_calls=[{"id": "t1"}])
        out = io.StringIO()
        export_jsonl(db.store, out)
    lines = [json.loads(line) for line in out.getvalue().splitlines()[1:]]
    session = next(line["session"] for line in lines if "session" in line)
    message = next(line["message"] for line in lines if "message" in line)
    assert tuple(session) == tuple(sessions_table.c.keys())
    assert tuple(message) == tuple(messages_table.c.keys())
