"""Hermes schema v18...v22 (hermes-agent 0.18.1/0.18.2 write 19, 0.19.0 writes 22): the shapes.

Read from the released wheels' ``hermes_state.py`` (``SCHEMA_SQL`` and ``DEFERRED_INDEX_SQL``;
`/work/shared/HERMES-V18-PLUS.md` section 2 has the sources). What a store at our head must
have for Hermes 0.19.0's open to add and rebuild nothing; `tests/support/real_hermes.py` runs the
real wheels where the real thing is needed.
"""

from __future__ import annotations

from legacy_v7_v17 import HEAD_INDEXES as V17_INDEXES

V22_VERSION = 22

# Hermes 0.19.0's declared column order (a fresh file's physical order).
V22_SESSION_NAMES = (
    "id", "source", "user_id", "session_key", "chat_id", "chat_type", "thread_id",
    "display_name", "origin_json", "expiry_finalized", "model", "model_config", "system_prompt",
    "parent_session_id", "started_at", "ended_at", "end_reason", "message_count",
    "tool_call_count", "input_tokens", "output_tokens", "cache_read_tokens",
    "cache_write_tokens", "reasoning_tokens", "cwd", "git_branch", "git_repo_root",
    "billing_provider", "billing_base_url", "billing_mode", "estimated_cost_usd",
    "actual_cost_usd", "cost_status", "cost_source", "pricing_version", "title",
    "api_call_count", "handoff_state", "handoff_platform", "handoff_error",
    "compression_failure_cooldown_until", "compression_failure_error",
    "compression_fallback_streak", "profile_name", "rewind_count", "archived",
)  # fmt: skip
V22_MESSAGE_NAMES = (
    "id", "session_id", "role", "content", "tool_call_id", "tool_calls", "tool_name",
    "effect_disposition", "timestamp", "token_count", "finish_reason", "reasoning",
    "reasoning_content", "reasoning_details", "codex_reasoning_items", "codex_message_items",
    "platform_message_id", "observed", "active", "compacted", "api_content",
)  # fmt: skip
V22_USAGE_NAMES = (
    "session_id", "model", "billing_provider", "billing_base_url", "billing_mode", "task",
    "api_call_count", "input_tokens", "output_tokens", "cache_read_tokens",
    "cache_write_tokens", "reasoning_tokens", "estimated_cost_usd", "actual_cost_usd",
    "cost_status", "cost_source", "first_seen", "last_seen",
)  # fmt: skip
V22_USAGE_KEY = (
    "session_id", "model", "billing_provider", "billing_base_url", "billing_mode", "task",
)  # fmt: skip
V21_USAGE_KEY = V22_USAGE_KEY[:-1]
V22_ROUTING_NAMES = ("scope", "session_key", "entry_json", "updated_at")
V22_ROUTING_KEY = ("scope", "session_key")
V22_DELEGATION_NAMES = (
    "delegation_id", "origin_session", "origin_ui_session_id", "parent_session_id", "state",
    "dispatched_at", "completed_at", "updated_at", "event_json", "result_json",
    "delivery_state", "delivery_attempts", "delivered_at", "owner_pid", "owner_started_at",
    "task_json", "delivery_claim", "delivery_claimed_at",
)  # fmt: skip
V22_INDEXES = V17_INDEXES | {
    "idx_messages_active_null", "idx_session_model_usage_session",
    "idx_session_model_usage_model", "idx_async_delegations_delivery",
}  # fmt: skip

# The tables each version adds, and its new columns (revision 0026 ... 0030).
ADDED_TABLES = {
    18: set(), 19: {"gateway_routing"}, 20: {"session_model_usage"}, 21: {"async_delegations"},
    22: set(),
}  # fmt: skip
ADDED_COLUMNS = {
    18: {"sessions": {"display_name", "origin_json", "expiry_finalized"}},
    21: {
        "sessions": {"compression_fallback_streak", "profile_name"},
        "messages": {"effect_disposition", "api_content"},
    },
}
REVISION_OF = {17: "0025", 18: "0026", 19: "0027", 20: "0028", 21: "0029", 22: "0030"}
"""The revision at which a store is each Hermes schema (0025 is v17 with our search objects)."""

COLUMNS_NOT_YET_READ = frozenset({
    "display_name", "origin_json", "expiry_finalized", "compression_fallback_streak",
    "profile_name", "effect_disposition", "api_content",
})  # fmt: skip
"""The v18...v22 columns of ``sessions`` and ``messages`` that our records
(``sessionstore/sql/records.py``) do not return yet: the schema landed first (issue 28,
milestone 1); the reads that return them are issue 28's item 3 (branch ``v22-methods``), which
empties this set, so that the comparisons with real Hermes that skip these keys hold in full."""
