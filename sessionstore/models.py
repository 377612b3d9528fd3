"""The v17 schema of the Hermes session store (newest Hermes HEAD) as typed SQLAlchemy models.

These models describe what the migrations build; Alembic autogenerate must find no difference
between the two (``tests/test_migrations.py``). The full-text objects (FTS5 table and triggers on
SQLite, expression indexes on PostgreSQL) are raw DDL owned by the migrations and are hidden from
autogenerate by name (``SEARCH_OBJECT_NAMES``).
"""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import (
    REAL,
    BigInteger,
    Double,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    Table,
    Text,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, MappedColumn, mapped_column
from sqlalchemy.types import TypeEngine

from .dialects import search_names

# REAL is what Hermes wrote on SQLite (8-byte float there); PostgreSQL's REAL is 4 bytes, which
# would round Unix timestamps to minutes, so it gets DOUBLE PRECISION.
FloatColumn: TypeEngine[float] = Double().with_variant(REAL(), "sqlite")
# Counters are 64-bit on both databases: SQLite's INTEGER already is (and its DDL stays
# Hermes's), PostgreSQL's integer is 32 bits, hence BIGINT there (revision 0009).
CounterColumn: TypeEngine[int] = BigInteger().with_variant(Integer(), "sqlite")

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

SCHEMA_VERSION = 17
"""The Hermes schema number these models implement (``schema_version.version``)."""

# Index names are fixed by the Hermes files on disk, so they are spelled out, not generated.
IDX_SESSIONS_SOURCE = "idx_sessions_source"
IDX_SESSIONS_SOURCE_ID = "idx_sessions_source_id"
IDX_SESSIONS_PARENT = "idx_sessions_parent"
IDX_SESSIONS_STARTED = "idx_sessions_started"
IDX_SESSIONS_TITLE_UNIQUE = "idx_sessions_title_unique"
IDX_SESSIONS_SESSION_KEY = "idx_sessions_session_key"
IDX_SESSIONS_GATEWAY_PEER = "idx_sessions_gateway_peer"
IDX_SESSIONS_HANDOFF_STATE = "idx_sessions_handoff_state"
IDX_MESSAGES_SESSION = "idx_messages_session"
IDX_MESSAGES_SESSION_ACTIVE = "idx_messages_session_active"
IDX_MESSAGES_PLATFORM_MSG_ID = "idx_messages_platform_msg_id"
IDX_COMPRESSION_LOCKS_EXPIRES = "idx_compression_locks_expires"

# Full-text objects created by raw DDL in the migrations: their names live with the search code.
SEARCH_OBJECT_NAMES = search_names.SEARCH_OBJECT_NAMES


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {  # noqa: RUF012 - SQLAlchemy reads this class attribute
        str: Text(),
        int: Integer(),
        float: FloatColumn,
    }


class SchemaVersion(Base):
    """The single-row table Hermes uses to know its schema number."""

    __tablename__ = "schema_version"
    # Hermes declared no primary key; the mapper needs one, the table keeps none.
    __mapper_args__ = {"primary_key": ["version"]}  # noqa: RUF012

    version: Mapped[int] = mapped_column(nullable=False)


def _zero() -> Mapped[int | None]:
    return mapped_column(server_default=text("0"))


def _counter() -> MappedColumn[Any]:
    """A count starting at 0: 64-bit on both databases (see ``CounterColumn``)."""
    return mapped_column(CounterColumn, server_default=text("0"))


class Session(Base):
    """Columns in newest Hermes's declared order (a fresh file's physical order)."""

    __tablename__ = "sessions"

    id: Mapped[str] = mapped_column(primary_key=True)
    source: Mapped[str]
    user_id: Mapped[str | None]
    session_key: Mapped[str | None]
    chat_id: Mapped[str | None]
    chat_type: Mapped[str | None]
    thread_id: Mapped[str | None]
    model: Mapped[str | None]
    model_config: Mapped[str | None]
    system_prompt: Mapped[str | None]
    parent_session_id: Mapped[str | None] = mapped_column(ForeignKey("sessions.id"))
    started_at: Mapped[float]
    ended_at: Mapped[float | None]
    end_reason: Mapped[str | None]
    message_count: Mapped[int | None] = _counter()
    tool_call_count: Mapped[int | None] = _counter()
    input_tokens: Mapped[int | None] = _counter()
    output_tokens: Mapped[int | None] = _counter()
    cache_read_tokens: Mapped[int | None] = _counter()
    cache_write_tokens: Mapped[int | None] = _counter()
    reasoning_tokens: Mapped[int | None] = _counter()
    cwd: Mapped[str | None]
    git_branch: Mapped[str | None]
    git_repo_root: Mapped[str | None]
    billing_provider: Mapped[str | None]
    billing_base_url: Mapped[str | None]
    billing_mode: Mapped[str | None]
    estimated_cost_usd: Mapped[float | None]
    actual_cost_usd: Mapped[float | None]
    cost_status: Mapped[str | None]
    cost_source: Mapped[str | None]
    pricing_version: Mapped[str | None]
    title: Mapped[str | None]
    api_call_count: Mapped[int | None] = _counter()
    handoff_state: Mapped[str | None]
    handoff_platform: Mapped[str | None]
    handoff_error: Mapped[str | None]
    compression_failure_cooldown_until: Mapped[float | None]
    compression_failure_error: Mapped[str | None]
    rewind_count: Mapped[int] = _counter()
    archived: Mapped[int] = mapped_column(server_default=text("0"))

    __table_args__ = (
        Index(IDX_SESSIONS_SOURCE, "source"),
        Index(IDX_SESSIONS_SOURCE_ID, "source", "id"),
        Index(IDX_SESSIONS_PARENT, "parent_session_id"),
        Index(
            IDX_SESSIONS_TITLE_UNIQUE,
            "title",
            unique=True,
            sqlite_where=text("title IS NOT NULL"),
            postgresql_where=text("title IS NOT NULL"),
        ),
        Index(IDX_SESSIONS_HANDOFF_STATE, "handoff_state", "started_at"),
    )


class Message(Base):
    """Columns in newest Hermes's declared order (a fresh file's physical order)."""

    __tablename__ = "messages"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.id"))
    role: Mapped[str]
    content: Mapped[str | None]
    tool_call_id: Mapped[str | None]
    tool_calls: Mapped[str | None]
    tool_name: Mapped[str | None]
    timestamp: Mapped[float]
    token_count: Mapped[int | None] = mapped_column(CounterColumn)
    finish_reason: Mapped[str | None]
    reasoning: Mapped[str | None]
    reasoning_content: Mapped[str | None]
    reasoning_details: Mapped[str | None]
    codex_reasoning_items: Mapped[str | None]
    codex_message_items: Mapped[str | None]
    platform_message_id: Mapped[str | None]
    observed: Mapped[int | None] = _zero()
    active: Mapped[int] = mapped_column(server_default=text("1"))
    compacted: Mapped[int] = mapped_column(server_default=text("0"))

    __table_args__ = (
        Index(IDX_MESSAGES_SESSION, "session_id", "timestamp"),
        Index(IDX_MESSAGES_SESSION_ACTIVE, "session_id", "active", "timestamp"),
        Index(
            IDX_MESSAGES_PLATFORM_MSG_ID,
            "session_id",
            "platform_message_id",
            sqlite_where=text("platform_message_id IS NOT NULL"),
            postgresql_where=text("platform_message_id IS NOT NULL"),
        ),
        {"sqlite_autoincrement": True},
    )


class StateMeta(Base):
    """Hermes's key/value housekeeping table (v8 era)."""

    __tablename__ = "state_meta"

    key: Mapped[str] = mapped_column(primary_key=True)
    value: Mapped[str | None]


class CompressionLock(Base):
    """One compression lease per session (Hermes v14); no FK: a lease outlives its session."""

    __tablename__ = "compression_locks"

    session_id: Mapped[str] = mapped_column(primary_key=True)
    holder: Mapped[str]
    acquired_at: Mapped[float]
    expires_at: Mapped[float]

    __table_args__ = (Index(IDX_COMPRESSION_LOCKS_EXPIRES, "expires_at"),)


# Declared after the classes so they can name the columns; newest-first walks them in order.
Index(IDX_SESSIONS_STARTED, Session.started_at.desc())
Index(IDX_SESSIONS_SESSION_KEY, Session.session_key, Session.started_at.desc())
Index(
    IDX_SESSIONS_GATEWAY_PEER,
    Session.source,
    Session.user_id,
    Session.chat_id,
    Session.chat_type,
    Session.thread_id,
    Session.started_at.desc(),
)

sessions_table = cast(Table, Session.__table__)
messages_table = cast(Table, Message.__table__)
schema_version_table = cast(Table, SchemaVersion.__table__)
state_meta_table = cast(Table, StateMeta.__table__)
compression_locks_table = cast(Table, CompressionLock.__table__)
