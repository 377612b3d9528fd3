"""Full-text search objects as raw DDL, per dialect.

SQLite (exactly Hermes's): an external-content FTS5 table over ``messages.content`` kept in step
by three triggers; the delete trigger uses FTS5's ``'delete'`` command row, because an
external-content table cannot look up the old text itself.

PostgreSQL: a GIN index over ``to_tsvector('simple', ...)`` for word search and a ``pg_trgm``
GIN index for substring and CJK search. The indexed expression is a constant here and the search
code uses the very same text, or the planner would not use the index.

These constants belong to the migrations: an old revision must keep building the same objects
whatever the package later does, so nothing here imports ``sessionstore``.
"""

from __future__ import annotations

import sqlalchemy as sa

FTS_TABLE = "messages_fts"
FTS_TRIGGER_INSERT = "messages_fts_insert"
FTS_TRIGGER_DELETE = "messages_fts_delete"
FTS_TRIGGER_UPDATE = "messages_fts_update"
FTS_TRIGGERS = (FTS_TRIGGER_INSERT, FTS_TRIGGER_DELETE, FTS_TRIGGER_UPDATE)

SQLITE_CREATE_FTS = (
    f"CREATE VIRTUAL TABLE IF NOT EXISTS {FTS_TABLE} USING fts5("
    "content, content=messages, content_rowid=id)"
)
SQLITE_CREATE_TRIGGERS = (
    f"""CREATE TRIGGER IF NOT EXISTS {FTS_TRIGGER_INSERT} AFTER INSERT ON messages BEGIN
    INSERT INTO {FTS_TABLE}(rowid, content) VALUES (new.id, new.content);
END""",
    f"""CREATE TRIGGER IF NOT EXISTS {FTS_TRIGGER_DELETE} AFTER DELETE ON messages BEGIN
    INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, content) VALUES('delete', old.id, old.content);
END""",
    f"""CREATE TRIGGER IF NOT EXISTS {FTS_TRIGGER_UPDATE} AFTER UPDATE ON messages BEGIN
    INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, content) VALUES('delete', old.id, old.content);
    INSERT INTO {FTS_TABLE}(rowid, content) VALUES (new.id, new.content);
END""",
)
SQLITE_REBUILD_FTS = f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES('rebuild')"

PG_TSV_INDEX = "ix_messages_content_tsv"
PG_TRGM_INDEX = "ix_messages_content_trgm"
# left(): a tsvector is capped at 1 MB, and one huge tool output must not make its INSERT fail.
PG_TSV_EXPRESSION = "to_tsvector('simple'::regconfig, left(coalesce(content, ''), 200000))"
PG_CREATE_TRGM_EXTENSION = "CREATE EXTENSION IF NOT EXISTS pg_trgm"
PG_CREATE_TSV_INDEX = (
    f"CREATE INDEX IF NOT EXISTS {PG_TSV_INDEX} ON messages USING gin (({PG_TSV_EXPRESSION}))"
)
PG_CREATE_TRGM_INDEX = (
    f"CREATE INDEX IF NOT EXISTS {PG_TRGM_INDEX} ON messages USING gin (content gin_trgm_ops)"
)


def _sqlite_objects(bind: sa.engine.Connection) -> set[str]:
    rows = bind.exec_driver_sql(
        "SELECT name FROM sqlite_master WHERE name = ? OR (type = 'trigger' AND tbl_name = ?)",
        (FTS_TABLE, "messages"),
    )
    return {row[0] for row in rows}


def _pg_objects(bind: sa.engine.Connection) -> set[str]:
    rows = bind.execute(
        sa.text("SELECT indexname FROM pg_indexes WHERE tablename = 'messages'")
    )
    return {row[0] for row in rows}


def search_objects_missing(bind: sa.engine.Connection) -> bool:
    """True when any full-text object is absent (a half-migrated or hand-edited file)."""
    if bind.dialect.name == "sqlite":
        return not {FTS_TABLE, *FTS_TRIGGERS} <= _sqlite_objects(bind)
    return not {PG_TSV_INDEX, PG_TRGM_INDEX} <= _pg_objects(bind)


def create_search_objects(bind: sa.engine.Connection) -> None:
    """Create whatever full-text objects are missing; index existing rows when the table is new."""
    if bind.dialect.name == "sqlite":
        existing = _sqlite_objects(bind)
        if FTS_TABLE not in existing:
            bind.exec_driver_sql(SQLITE_CREATE_FTS)
            # A new external-content index starts empty: fill it from the rows already there.
            bind.exec_driver_sql(SQLITE_REBUILD_FTS)
        for ddl in SQLITE_CREATE_TRIGGERS:
            bind.exec_driver_sql(ddl)
        return
    bind.exec_driver_sql(PG_CREATE_TRGM_EXTENSION)
    bind.exec_driver_sql(PG_CREATE_TSV_INDEX)
    bind.exec_driver_sql(PG_CREATE_TRGM_INDEX)


def restore_search_triggers(bind: sa.engine.Connection) -> None:
    """Re-create the sync triggers after a batch operation rebuilt ``messages`` without them."""
    if bind.dialect.name == "sqlite":
        for ddl in SQLITE_CREATE_TRIGGERS:
            bind.exec_driver_sql(ddl)


def drop_search_objects(bind: sa.engine.Connection) -> None:
    if bind.dialect.name == "sqlite":
        for trigger in FTS_TRIGGERS:
            bind.exec_driver_sql(f"DROP TRIGGER IF EXISTS {trigger}")
        bind.exec_driver_sql(f"DROP TABLE IF EXISTS {FTS_TABLE}")
        return
    bind.exec_driver_sql(f"DROP INDEX IF EXISTS {PG_TRGM_INDEX}")
    bind.exec_driver_sql(f"DROP INDEX IF EXISTS {PG_TSV_INDEX}")
