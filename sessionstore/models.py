"""The v6 schema of the Hermes session store as typed SQLAlchemy models.

These models describe what the migrations build; Alembic autogenerate must find no difference
between the two (``tests/test_migrations.py``). The full-text objects (FTS5 table and triggers on
SQLite, expression indexes on PostgreSQL) are raw DDL owned by the migrations and are hidden from
autogenerate by name (``SEARCH_OBJECT_NAMES``).
"""

from __future__ import annotations

from typing import cast

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
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeEngine

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

SCHEMA_VERSION = 6
"""The Hermes schema number these models implement (``schema_version.version``)."""

# Index names are fixed by the Hermes files on disk, so they are spelled out, not generated.
IDX_SESSIONS_SOURCE = "idx_sessions_source"
IDX_SESSIONS_PARENT = "idx_sessions_parent"
IDX_SESSIONS_STARTED = "idx_sessions_started"
IDX_SESSIONS_TITLE_UNIQUE = "idx_sessions_title_unique"
IDX_MESSAGES_SESSION = "idx_messages_session"

# Full-text objects created by raw DDL in the migrations (see migrations/search_ddl.py).
SEARCH_OBJECT_NAMES = frozenset(
    {
        "messages_fts",
        "messages_fts_data",
        "messages_fts_idx",
        "messages_fts_content",
        "messages_fts_docsize",
        "messages_fts_config",
        "messages_trigram",
        "messages_trigram_data",
        "messages_trigram_idx",
        "messages_trigram_content",
        "messages_trigram_docsize",
        "messages_trigram_config",
        "ix_messages_content_tsv",
        "ix_messages_content_tsvector",
        "content_tsv",
        "ix_messages_content_trgm",
    }
)


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


class Session(Base):
    __tablename__ = "sessions"

    id: Mapped[str] = mapped_column(primary_key=True)
    source: Mapped[str]
    user_id: Mapped[str | None]
    model: Mapped[str | None]
    model_config: Mapped[str | None]
    system_prompt: Mapped[str | None]
    parent_session_id: Mapped[str | None] = mapped_column(ForeignKey("sessions.id"))
    started_at: Mapped[float]
    ended_at: Mapped[float | None]
    end_reason: Mapped[str | None]
    message_count: Mapped[int | None] = mapped_column(CounterColumn, server_default=text("0"))
    tool_call_count: Mapped[int | None] = mapped_column(CounterColumn, server_default=text("0"))
    input_tokens: Mapped[int | None] = mapped_column(CounterColumn, server_default=text("0"))
    output_tokens: Mapped[int | None] = mapped_column(CounterColumn, server_default=text("0"))
    cache_read_tokens: Mapped[int | None] = mapped_column(CounterColumn, server_default=text("0"))
    cache_write_tokens: Mapped[int | None] = mapped_column(CounterColumn, server_default=text("0"))
    reasoning_tokens: Mapped[int | None] = mapped_column(CounterColumn, server_default=text("0"))
    billing_provider: Mapped[str | None]
    billing_base_url: Mapped[str | None]
    billing_mode: Mapped[str | None]
    estimated_cost_usd: Mapped[float | None]
    actual_cost_usd: Mapped[float | None]
    cost_status: Mapped[str | None]
    cost_source: Mapped[str | None]
    pricing_version: Mapped[str | None]
    # Last, as in Hermes v6's SCHEMA_SQL: a fresh file has this physical order (revision 0005
    # lays an empty table out again in it), and ``SELECT *`` readers see it.
    title: Mapped[str | None]

    __table_args__ = (
        Index(IDX_SESSIONS_SOURCE, "source"),
        Index(IDX_SESSIONS_PARENT, "parent_session_id"),
        Index(
            IDX_SESSIONS_TITLE_UNIQUE,
            "title",
            unique=True,
            sqlite_where=text("title IS NOT NULL"),
            postgresql_where=text("title IS NOT NULL"),
        ),
    )


class Message(Base):
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
    reasoning_details: Mapped[str | None]
    codex_reasoning_items: Mapped[str | None]

    __table_args__ = (
        Index(IDX_MESSAGES_SESSION, "session_id", "timestamp"),
        {"sqlite_autoincrement": True},
    )


# Declared after the class so it can name the column; newest-first listing walks it in order.
Index(IDX_SESSIONS_STARTED, Session.started_at.desc())

sessions_table = cast(Table, Session.__table__)
messages_table = cast(Table, Message.__table__)
schema_version_table = cast(Table, SchemaVersion.__table__)
