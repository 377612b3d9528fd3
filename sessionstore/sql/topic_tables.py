"""Hermes's Telegram DM topic tables, created on opt-in only (``/topic``), never at open.

Hermes creates ``telegram_dm_topic_mode`` and ``telegram_dm_topic_bindings`` in
``apply_telegram_topic_migration`` and versions them apart from ``schema_version``, in
``state_meta telegram_dm_topic_schema_version``: v1 (0.17.0/0.18.0), v2 (0.19.0: the binding's
``session_id`` gets ``ON DELETE CASCADE``), v3 (iot 0.21.3+: ``profile_name`` leads both keys,
so gateways of several profiles sharing one ``state.db`` keep their topics apart). These are
the v3 tables, newest Hermes's (``hermes_state_telegram.py``), column for column.

They live in a ``MetaData`` of their own, not the head's (:mod:`.tables`): the migrations never
create them (a store without them is current, as Hermes's is), and a file holding them at v1 or
v2 is adopted as it is; the sessions part that owns them (``sessions.telegram_topics``) creates
or brings them to v3 when a caller opts in. ``sessions`` is there only so that the binding's
foreign key resolves, as its key column alone; it is never created from here.

The constants are plain names; the tables (and their ``MetaData`` and indexes) are built on
first use, so the runtime path imports this module for the constants alone: the sessions parts
that own the tables import them in the methods that use them.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy import Index, MetaData, Table

TOPIC_SCHEMA_VERSION = 3
TOPIC_SCHEMA_META_KEY = "telegram_dm_topic_schema_version"
DEFAULT_PROFILE = "default"

if TYPE_CHECKING:
    # Built on first use (``__getattr__`` below), typed here.
    topic_metadata: MetaData
    topic_mode_table: Table
    """Whether topic mode is on for one private chat (per profile)."""
    topic_bindings_table: Table
    """Which Hermes session one DM topic thread is bound to; a session is bound to one topic."""
    TOPIC_INDEXES: tuple[Index, Index]
    """Hermes's two indexes (v3: the user index leads with the profile)."""
    TOPIC_TABLES: tuple[Table, Table]

_TABLE_NAMES = frozenset(
    {"topic_metadata", "topic_mode_table", "topic_bindings_table", "TOPIC_INDEXES", "TOPIC_TABLES"}
)
_build_lock = threading.Lock()


def __getattr__(name: str) -> Any:
    # The tables are built when first asked for, not when the module is imported: the sessions
    # parts that own them are on every store's runtime path (their methods are the
    # repository's), and building the two tables cost about 1 ms of every process's import
    # (``scripts/startup.py``) for a feature few stores opt in to. The constants above stay
    # plain names. Once built, the names are the module's own and this is not called again.
    if name not in _TABLE_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    with _build_lock:
        if name not in globals():
            globals().update(_build())
    return globals()[name]


def _build() -> dict[str, Any]:
    from sqlalchemy import (
        Column,
        ForeignKey,
        Index,
        Integer,
        MetaData,
        PrimaryKeyConstraint,
        Table,
        Text,
        text,
    )

    from ..dialects.types import FloatColumn
    from .tables import sessions_table

    def profile() -> Column[str]:
        return Column(
            "profile_name", Text(), nullable=False, server_default=text(f"'{DEFAULT_PROFILE}'")
        )

    metadata = MetaData()
    # What the binding's foreign key refers to: ``sessions.id`` alone, never created from here
    # (a copy of the whole head table, ``sessions_table.to_metadata``, was 63 columns nothing
    # here reads).
    Table(sessions_table.name, metadata, Column("id", sessions_table.c.id.type, primary_key=True))
    modes = Table(
        "telegram_dm_topic_mode",
        metadata,
        profile(),
        Column("chat_id", Text(), nullable=False),
        Column("user_id", Text(), nullable=False),
        Column("enabled", Integer(), nullable=False, server_default=text("1")),
        Column("activated_at", FloatColumn, nullable=False),
        Column("updated_at", FloatColumn, nullable=False),
        Column("has_topics_enabled", Integer()),
        Column("allows_users_to_create_topics", Integer()),
        Column("capability_checked_at", FloatColumn),
        Column("intro_message_id", Text()),
        Column("pinned_message_id", Text()),
        PrimaryKeyConstraint("profile_name", "chat_id"),
    )
    bindings = Table(
        "telegram_dm_topic_bindings",
        metadata,
        profile(),
        Column("chat_id", Text(), nullable=False),
        Column("thread_id", Text(), nullable=False),
        Column("user_id", Text(), nullable=False),
        Column("session_key", Text(), nullable=False),
        Column(
            "session_id", Text(), ForeignKey("sessions.id", ondelete="CASCADE"), nullable=False
        ),
        Column("managed_mode", Text(), nullable=False, server_default=text("'auto'")),
        Column("linked_at", FloatColumn, nullable=False),
        Column("updated_at", FloatColumn, nullable=False),
        PrimaryKeyConstraint("profile_name", "chat_id", "thread_id"),
    )
    indexes = (
        Index("idx_telegram_dm_topic_bindings_session", bindings.c.session_id, unique=True),
        Index("idx_telegram_dm_topic_bindings_user", bindings.c.profile_name,
              bindings.c.user_id, bindings.c.chat_id),
    )  # fmt: skip
    return {
        "topic_metadata": metadata,
        "topic_mode_table": modes,
        "topic_bindings_table": bindings,
        "TOPIC_INDEXES": indexes,
        "TOPIC_TABLES": (modes, bindings),
    }


__all__ = [
    "DEFAULT_PROFILE",
    "TOPIC_INDEXES",
    "TOPIC_SCHEMA_META_KEY",
    "TOPIC_SCHEMA_VERSION",
    "TOPIC_TABLES",
    "topic_bindings_table",
    "topic_metadata",
    "topic_mode_table",
]
