"""Runs inside a subprocess: the real Hermes's ``hermes_state.SessionDB`` on one file.

Usage: ``python real_hermes_driver.py HERMES_ROOT DB_PATH ACTION`` with a JSON argument on
stdin; prints one JSON document on stdout. ``HERMES_ROOT`` is an unpacked hermes-agent
wheel; its ``hermes_state`` is imported from there (never ours: this process has no
sessionstore on its path first and imports Hermes's module under its own name). With
``HERMES_ROOT`` = ``sessionstore`` the same actions run on our ``sessionstore.hermes.state``
instead (a file written by us the way a Hermes user writes one).

Actions:

- ``build``: populate the file the way a user's Hermes of that release does it (sessions,
  compression chain, branch and delegate children, titles, tool calls, reasoning, CJK and
  English text, and every later feature the release has: platform ids, observed messages,
  cwd, archive, rewind, compaction, gateway peers, handoffs, leases, metadata, the opt-in
  Telegram tables). Which features exist is read from the release's own API.
- ``read``: everything that release's own reads return for the file (argument: the queries).
- ``calls``: a list of ``[method, args, kwargs]`` run in order; their results (``$sql`` steps
  and ``{"$path": ...}`` arguments: see ``SQL_STEP`` and ``PATH_KEY``).
- ``insights``: the report of the release's own ``agent.insights.InsightsEngine`` (``hermes
  insights``) over the last N days (argument), its ``overview`` and ``models``
  (:func:`insights_report`).

Only the standard library and the wheel's own modules are used here.
"""

from __future__ import annotations

import inspect
import json
import sys
import time
from pathlib import Path
from typing import Any

OURS = "sessionstore"
ROOT_ID = "field-root"
CONTINUATION_ID = "field-root-cont"
CHAIN_TIP_ID = "field-root-tip"
BRANCH_ID = "field-branch"
DELEGATE_ID = "field-delegate"
TELEGRAM_ID = "field-telegram"
ARCHIVED_ID = "field-archived"
REWOUND_ID = "field-rewound"
COMPACTED_ID = "field-compacted"
EMPTY_ID = "field-empty"
CLOCK_STEP_ID = "field-clock-step"
IMPORTED_ID = "field-imported"
ALL_SESSION_IDS = (
    ROOT_ID, CONTINUATION_ID, CHAIN_TIP_ID, BRANCH_ID, DELEGATE_ID, TELEGRAM_ID, ARCHIVED_ID,
    REWOUND_ID, COMPACTED_ID, EMPTY_ID, CLOCK_STEP_ID, IMPORTED_ID,
)  # fmt: skip
TELEGRAM_KEY = "agent:main:telegram:dm:4242"
ROUTING_SCOPE = "/home/alice/.hermes/sessions"
DELEGATION_ID = "deleg-field-1"

KUBECTL_CALL = [
    {"id": "call_k1", "type": "function",
     "function": {"name": "terminal", "arguments": '{"command": "kubectl apply -f deploy.yaml"}'}},
]  # fmt: skip
GREP_CALLS = [
    {"id": "call_g1", "type": "function",
     "function": {"name": "search_files", "arguments": '{"pattern": "zookeeper"}'}},
    {"id": "call_g2", "type": "function",
     "function": {"name": "read_file", "arguments": '{"path": "docs/部署指南.md"}'}},
]  # fmt: skip


def accepts(method: Any, name: str) -> bool:
    return name in inspect.signature(method).parameters


def build(db: Any) -> dict[str, Any]:
    """Populate ``db`` with what a Hermes user's file holds; returns what was made."""
    made: dict[str, Any] = {"features": []}
    features: list[str] = made["features"]

    def message(session_id: str, role: str, content: Any = None, **fields: Any) -> int:
        # Keep only what this release's append_message takes, but say what was dropped.
        for name in list(fields):
            if not accepts(db.append_message, name):
                fields.pop(name)
        message_id: int = db.append_message(session_id, role, content, **fields)
        return message_id

    db.create_session(ROOT_ID, "cli", model="claude-sonnet-4", user_id="alice",
                      model_config={"temperature": 0.3, "max_tokens": 8192},
                      system_prompt="You are Hermes, a helpful agent.")
    db.set_session_title(ROOT_ID, "Deploy the cluster")
    message(ROOT_ID, "user", "How do I deploy the cluster with kubectl? 请部署到集群 please")
    message(ROOT_ID, "assistant", None, tool_calls=KUBECTL_CALL, finish_reason="tool_calls",
            reasoning="The user wants a deployment; run kubectl apply first.",
            reasoning_content="kubectl apply then watch the rollout",
            reasoning_details=[{"type": "reasoning.text", "text": "apply", "signature": "sig1"}],
            codex_reasoning_items=[{"type": "reasoning", "id": "rs_1", "summary": []}],
            token_count=42)
    message(ROOT_ID, "tool", "deployment.apps/web configured", tool_name="terminal",
            tool_call_id="call_k1")
    message(ROOT_ID, "assistant", "The deployment is configured; the rollout is running.",
            finish_reason="stop", token_count=17,
            codex_message_items=[{"type": "message", "role": "assistant", "id": "msg_1"}])
    db.update_token_counts(ROOT_ID, input_tokens=1200, output_tokens=340, model="claude-sonnet-4",
                           cache_read_tokens=800, cache_write_tokens=100, reasoning_tokens=55,
                           estimated_cost_usd=0.0123, cost_status="estimated",
                           cost_source="pricing-table", pricing_version="2026-01",
                           billing_provider="anthropic", billing_mode="api",
                           billing_base_url="https://api.anthropic.com",
                           **({"api_call_count": 3}
                              if accepts(db.update_token_counts, "api_call_count") else {}))
    db.end_session(ROOT_ID, "compression")

    # A compression chain: root -> continuation -> tip, titles along the lineage.
    db.create_session(CONTINUATION_ID, "cli", model="claude-sonnet-4", parent_session_id=ROOT_ID)
    db.set_session_title(CONTINUATION_ID, db.get_next_title_in_lineage("Deploy the cluster"))
    message(CONTINUATION_ID, "user", "[summary] the cluster deployment was configured")
    message(CONTINUATION_ID, "user", "部署完成了吗？还有日志吗")
    message(CONTINUATION_ID, "assistant", "已经部署完成。日志在 /var/log/web 里。",
            finish_reason="stop")
    db.end_session(CONTINUATION_ID, "compression")
    db.create_session(CHAIN_TIP_ID, "cli", model="claude-sonnet-4",
                      parent_session_id=CONTINUATION_ID)
    db.set_session_title(CHAIN_TIP_ID, db.get_next_title_in_lineage("Deploy the cluster"))
    message(CHAIN_TIP_ID, "user", "Now scale the zookeeper ensemble to five nodes")
    message(CHAIN_TIP_ID, "assistant", None, tool_calls=GREP_CALLS, finish_reason="tool_calls")
    message(CHAIN_TIP_ID, "tool", "docs/部署指南.md:12: zookeeper replicas",
            tool_name="search_files", tool_call_id="call_g1")
    message(CHAIN_TIP_ID, "tool", "# 部署指南\n扩容 zookeeper 到五个节点", tool_name="read_file",
            tool_call_id="call_g2")
    # Multimodal content (a list of parts) is stored encoded and decoded on read.
    message(CHAIN_TIP_ID, "user", [{"type": "text", "text": "Here is the dashboard screenshot"},
                                   {"type": "image_url",
                                    "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}])

    # A /branch child and a delegate (subagent) child, marked as the CLI marks them.
    db.create_session(BRANCH_ID, "cli", model="gpt-5", parent_session_id=ROOT_ID,
                      model_config={"_branched_from": ROOT_ID})
    db.set_session_title(BRANCH_ID, "Try helm instead")
    message(BRANCH_ID, "user", "What about helm charts instead of raw manifests?")
    message(BRANCH_ID, "assistant", "Helm packages the manifests as a chart.",
            finish_reason="stop")
    db.create_session(DELEGATE_ID, "cli", model="gpt-5-mini", parent_session_id=CHAIN_TIP_ID,
                      model_config={"_delegate_from": CHAIN_TIP_ID, "role": "researcher"})
    message(DELEGATE_ID, "user", "Research zookeeper quorum sizing")
    message(DELEGATE_ID, "assistant", "An odd ensemble size (3, 5, 7) tolerates (n-1)/2 failures.",
            finish_reason="stop")
    db.end_session(DELEGATE_ID, "completed")

    # A gateway (Telegram) conversation.
    db.create_session(TELEGRAM_ID, "telegram", model="claude-haiku", user_id="tg-4242")
    db.set_session_title(TELEGRAM_ID, "東京の天気")
    message(TELEGRAM_ID, "user", "東京の天気はどうですか？", platform_message_id="tg-msg-1")
    message(TELEGRAM_ID, "user", "(bob joined the chat)", observed=True,
            platform_message_id="tg-msg-2")
    message(TELEGRAM_ID, "assistant", "東京は晴れです。The weather in Tokyo is sunny.",
            finish_reason="stop", platform_message_id="tg-msg-3")
    if hasattr(db, "record_gateway_session_peer"):
        db.record_gateway_session_peer(TELEGRAM_ID, source="telegram", user_id="tg-4242",
                                       session_key="agent:main:telegram:dm:4242",
                                       chat_id="4242", chat_type="dm", thread_id=None)
        features.append("gateway_peer")
    if hasattr(db, "enable_telegram_topic_mode"):
        db.enable_telegram_topic_mode(chat_id="4242", user_id="tg-4242", has_topics_enabled=True)
        db.bind_telegram_topic(chat_id="4242", thread_id="7", user_id="tg-4242",
                               session_key="agent:main:telegram:dm:4242:7",
                               session_id=TELEGRAM_ID)
        features.append("telegram_topics")
    if hasattr(db, "request_handoff"):
        db.request_handoff(TELEGRAM_ID, "discord")
        features.append("handoff")

    db.create_session(ARCHIVED_ID, "discord", model="claude-haiku")
    db.set_session_title(ARCHIVED_ID, "Old archived chat")
    message(ARCHIVED_ID, "user", "An archived conversation about postgres vacuum")
    message(ARCHIVED_ID, "assistant", "VACUUM reclaims dead tuples.", finish_reason="stop")
    db.end_session(ARCHIVED_ID, "user_exit")
    if hasattr(db, "set_session_archived"):
        db.set_session_archived(ARCHIVED_ID, True)
        features.append("archive")

    db.create_session(REWOUND_ID, "cli", model="claude-sonnet-4")
    message(REWOUND_ID, "user", "Write a haiku about autumn")
    message(REWOUND_ID, "assistant", "Leaves drift on the pond", finish_reason="stop")
    rewind_target = message(REWOUND_ID, "user", "Actually make it about winter snowfall")
    message(REWOUND_ID, "assistant", "Snowfall hushes the quiet town", finish_reason="stop")
    if hasattr(db, "rewind_to_message"):
        db.rewind_to_message(REWOUND_ID, rewind_target)
        features.append("rewind")
    message(REWOUND_ID, "user", "Make it about spring blossoms")
    if hasattr(db, "update_session_cwd"):
        db.update_session_cwd(REWOUND_ID, "/home/alice/poems")
        features.append("cwd")

    db.create_session(COMPACTED_ID, "cli", model="claude-sonnet-4")
    message(COMPACTED_ID, "user", "Summarise the incident report about the outage")
    message(COMPACTED_ID, "assistant", "The outage came from an expired certificate.",
            finish_reason="stop")
    if hasattr(db, "archive_and_compact"):
        db.archive_and_compact(COMPACTED_ID, [
            {"role": "user", "content": "[compacted] incident: expired certificate"},
        ])
        features.append("compaction")
    if hasattr(db, "try_acquire_compression_lock"):
        db.try_acquire_compression_lock(CHAIN_TIP_ID, "worker-1", ttl_seconds=3600.0)
        features.append("compression_lock")
    if hasattr(db, "record_compression_failure_cooldown"):
        db.record_compression_failure_cooldown(COMPACTED_ID, time.time() + 600.0,
                                               "summary model timed out")
        features.append("cooldown")

    # The wall clock stepped back mid-turn (NTP, a VM or laptop resuming): the tool result and
    # the answer carry earlier timestamps than the call. Hermes stamps rows with time.time().
    db.create_session(CLOCK_STEP_ID, "cli", model="claude-sonnet-4")
    message(CLOCK_STEP_ID, "user", "Roll back the failed migration")
    message(CLOCK_STEP_ID, "assistant", None, finish_reason="tool_calls", tool_calls=[
        {"id": "call_r1", "type": "function",
         "function": {"name": "terminal", "arguments": '{"command": "alembic downgrade -1"}'}},
    ])  # fmt: skip
    wall_clock = time.time
    time.time = lambda: wall_clock() - 120.0  # type: ignore[assignment]
    try:
        message(CLOCK_STEP_ID, "tool", "rollback done: now at revision 0019",
                tool_name="terminal", tool_call_id="call_r1")
        message(CLOCK_STEP_ID, "assistant", "The rollback finished.", finish_reason="stop")
    finally:
        time.time = wall_clock  # type: ignore[assignment]

    later_features(db, features, message)

    db.create_session(EMPTY_ID, "cli", model="claude-sonnet-4")
    db.set_meta("last_auto_prune", "1760000000.5")
    db.set_meta("field_note", "written by real Hermes")
    made["session_ids"] = list(ALL_SESSION_IDS)
    return made


def later_features(db: Any, features: list[str], message: Any) -> None:
    """What Hermes 0.18.1 (schema v19) and 0.19.0 (v22) added, where this release has it:
    gateway origins and the routing index, per-model usage with a model switch and an
    auxiliary call, the API-content sidecar and effect dispositions, the fallback streak, a
    title set only while empty, a reset boundary, an imported session, and a background
    delegation row (written by Hermes's delegation tool, not by SessionDB: raw SQL here)."""
    if hasattr(db, "record_gateway_session_peer") and accepts(
        db.record_gateway_session_peer, "display_name"
    ):
        db.record_gateway_session_peer(
            TELEGRAM_ID, source="telegram", user_id="tg-4242", session_key=TELEGRAM_KEY,
            chat_id="4242", chat_type="dm", display_name="Alice (DM)",
            origin_json='{"platform": "telegram", "chat_id": "4242", "user_name": "alice"}',
        )  # fmt: skip
        db.set_expiry_finalized(TELEGRAM_ID, True)
        features.append("gateway_origin")
    if hasattr(db, "save_gateway_routing_entry"):
        db.save_gateway_routing_entry(TELEGRAM_KEY, json.dumps({"session_id": TELEGRAM_ID}))
        db.save_gateway_routing_entry(TELEGRAM_KEY, '{"session_id": "scoped"}',
                                      scope=ROUTING_SCOPE)  # fmt: skip
        db.replace_gateway_routing_entries(
            {"agent:main:discord:dm:7": json.dumps({"session_id": ARCHIVED_ID}),
             TELEGRAM_KEY: json.dumps({"session_id": TELEGRAM_ID, "replaced": True})},
        )  # fmt: skip
        features.append("gateway_routing")
    if hasattr(db, "record_auxiliary_usage"):
        # A /model switch mid-conversation, then an auxiliary vision call.
        db.update_token_counts(CHAIN_TIP_ID, input_tokens=900, output_tokens=120,
                               model="gpt-5", billing_provider="openai",
                               billing_base_url="https://api.openai.com/v1",
                               billing_mode="api", api_call_count=2,
                               estimated_cost_usd=0.031, cost_status="estimated",
                               cost_source="pricing-table")  # fmt: skip
        db.update_token_counts(CHAIN_TIP_ID, input_tokens=300, output_tokens=40,
                               model="claude-sonnet-4", billing_provider="anthropic",
                               api_call_count=1, estimated_cost_usd=0.004)  # fmt: skip
        db.record_auxiliary_usage(CHAIN_TIP_ID, "vision", model="gemini-2.5-flash",
                                  billing_provider="google", input_tokens=1500,
                                  output_tokens=60, estimated_cost_usd=0.0007)  # fmt: skip
        features.append("model_usage")
    if accepts(db.append_message, "api_content"):
        user = message(COMPACTED_ID, "user", "What changed in the certificate rotation?",
                       api_content="What changed in the certificate rotation?\n"
                                   "<memory>prefers short answers</memory>")  # fmt: skip
        message(COMPACTED_ID, "tool", "rotation: renewed 2026-11-30", tool_name="terminal",
                effect_disposition="applied")
        message(COMPACTED_ID, "user", "Renew the staging certificate too")
        db.set_latest_user_api_content(COMPACTED_ID, "Renew the staging certificate too",
                                       "Renew the staging certificate too (sent)")
        features.append("api_content")
        del user
    if hasattr(db, "set_compression_fallback_streak"):
        db.set_compression_fallback_streak(COMPACTED_ID, 2)
        features.append("fallback_streak")
    if hasattr(db, "set_auto_title_if_empty"):
        db.set_auto_title_if_empty(REWOUND_ID, "Seasonal haiku")
        db.set_auto_title_if_empty(ROOT_ID, "Never replaces a title")
        features.append("auto_title")
    if hasattr(db, "promote_to_session_reset"):
        db.promote_to_session_reset(CLOCK_STEP_ID, "idle")
        features.append("session_reset")
    if hasattr(db, "import_sessions"):
        db.import_sessions([{
            "id": IMPORTED_ID, "source": "cli", "model": "claude-haiku",
            "title": "Imported from a backup", "started_at": 1760000000.0,
            "ended_at": 1760000300.0, "end_reason": "user_exit", "input_tokens": 42,
            "messages": [
                {"role": "user", "content": "An imported question about rollback",
                 "timestamp": 1760000001.0},
                {"role": "assistant", "content": "An imported answer", "reasoning": "r",
                 "timestamp": 1760000002.0},
            ],
        }])  # fmt: skip
        features.append("import")
    if hasattr(db, "_conn") and db._conn.execute(
        "SELECT 1 FROM sqlite_master WHERE name = 'async_delegations'"
    ).fetchone():
        db._conn.execute(
            "INSERT INTO async_delegations (delegation_id, origin_session, "
            "origin_ui_session_id, parent_session_id, state, dispatched_at, completed_at, "
            "updated_at, event_json, result_json, delivery_state, delivery_attempts, "
            "task_json) VALUES (?, ?, '', ?, 'completed', 1760000100.0, 1760000200.0, "
            "1760000200.0, '{}', '{\"summary\": \"quorum of 5\"}', 'delivered', 1, "
            "'{\"goal\": \"research\"}')",
            (DELEGATION_ID, CHAIN_TIP_ID, CHAIN_TIP_ID),
        )
        db._conn.commit()
        features.append("delegation")


def call_if_there(db: Any, name: str, *args: Any, **kwargs: Any) -> Any:
    method = getattr(db, name, None)
    if method is None:
        return {"absent": name}
    kwargs = {key: value for key, value in kwargs.items() if accepts(method, key)}
    return method(*args, **kwargs)


def call_with_all(db: Any, name: str, *args: Any, **kwargs: Any) -> Any:
    """``call_if_there``, but absent unless this release takes every one of the keywords."""
    method = getattr(db, name, None)
    if method is None or not all(accepts(method, key) for key in kwargs):
        return {"absent": name}
    return method(*args, **kwargs)


# Hermes 0.18's listing keywords, read from every file (absent in older releases).
LATER_LISTINGS: dict[str, dict[str, Any]] = {
    "by_activity": {"order_by_last_active": True},
    "by_activity_unprojected": {"order_by_last_active": True, "project_compression_tips": False},
    "by_activity_children": {"order_by_last_active": True, "include_children": True},
    "by_activity_page": {"order_by_last_active": True, "limit": 3, "offset": 2},
    "with_messages": {"min_message_count": 3},
    "by_activity_with_messages": {"order_by_last_active": True, "min_message_count": 3},
    "id_of_root": {"order_by_last_active": True, "id_query": "FIELD-ROOT"},
    "id_of_tip": {"order_by_last_active": True, "id_query": " root-tip"},
    "id_without_match": {"order_by_last_active": True, "id_query": "field_root"},
}


def read(db: Any, queries: list[str]) -> dict[str, Any]:
    """Everything this release's own reads return for the file."""
    sessions = {sid: db.get_session(sid) for sid in ALL_SESSION_IDS}
    messages = {sid: db.get_messages(sid) for sid in ALL_SESSION_IDS}
    with_inactive = {
        sid: call_if_there(db, "get_messages", sid, include_inactive=True)
        for sid in ALL_SESSION_IDS
    }
    conversations = {sid: db.get_messages_as_conversation(sid) for sid in ALL_SESSION_IDS}
    listings = {
        "default": db.list_sessions_rich(limit=100),
        "children": db.list_sessions_rich(limit=100, include_children=True),
        "telegram": db.list_sessions_rich(source="telegram", limit=100),
        "archived": call_if_there(db, "list_sessions_rich", limit=100, archived_only=True),
        **{
            name: call_with_all(db, "list_sessions_rich", **{"limit": 100, **kwargs})
            for name, kwargs in LATER_LISTINGS.items()
        },
    }
    searches = {query: db.search_messages(query, limit=50) for query in queries}
    searches_inactive = {
        query: call_if_there(db, "search_messages", query, limit=50, include_inactive=True)
        for query in queries
    }
    meta = {key: db.get_meta(key) for key in ("last_auto_prune", "field_note")}
    return {
        "sessions": sessions,
        "messages": messages,
        "messages_with_inactive": with_inactive,
        "conversations": conversations,
        "listings": listings,
        "searches": searches,
        "searches_inactive": searches_inactive,
        "session_count": db.session_count(),
        "session_count_with_messages": call_with_all(db, "session_count", min_message_count=3),
        "message_count": db.message_count(),
        "message_counts": {sid: db.message_count(sid) for sid in ALL_SESSION_IDS},
        "titles": {sid: db.get_session_title(sid) for sid in ALL_SESSION_IDS},
        "compression_tip": db.get_compression_tip(ROOT_ID),
        "meta": meta,
        "lock_holder": call_if_there(db, "get_compression_lock_holder", CHAIN_TIP_ID),
        "handoff": call_if_there(db, "get_handoff_state", TELEGRAM_ID),
        **later_reads(db),
    }


def later_reads(db: Any) -> dict[str, Any]:
    """What Hermes 0.18.1 and 0.19.0's own reads return for the file (``{"absent": ...}``
    where the release has no such read), and what Hermes's Insights reads of per-model usage
    (the wheel's own query, :func:`insights_model_usage`)."""
    return {
        "routing": call_if_there(db, "load_gateway_routing_entries"),
        "routing_scoped": call_if_there(db, "load_gateway_routing_entries", scope=ROUTING_SCOPE),
        "gateway_sessions": call_if_there(db, "list_gateway_sessions", active_only=False),
        "origin": call_if_there(db, "find_session_by_origin", platform="telegram",
                                chat_id="4242"),
        "lineages": {sid: db.get_compression_lineage(sid)
                     for sid in (ROOT_ID, CHAIN_TIP_ID, BRANCH_ID)}
        if hasattr(db, "get_compression_lineage") else {"absent": "get_compression_lineage"},
        "lineage_export": call_if_there(db, "export_session_lineage", CONTINUATION_ID),
        "resume": call_if_there(db, "get_resume_conversations", CHAIN_TIP_ID),
        "ancestor_prefix": call_if_there(db, "get_ancestor_display_prefix", CHAIN_TIP_ID),
        "conversation_root": call_if_there(db, "get_conversation_root", DELEGATE_ID),
        "fallback_streak": call_if_there(db, "get_compression_fallback_streak", COMPACTED_ID),
        "messages_page": call_with_all(db, "get_messages", CHAIN_TIP_ID, limit=2, offset=1),
        "search_listing": call_with_all(db, "list_sessions_rich", order_by_last_active=True,
                                        search_query="deploy", compact_rows=True),
        "prune_candidates": call_if_there(db, "list_prune_candidates", older_than_days=0),
        "model_usage": insights_model_usage(db),
    }  # fmt: skip


def insights_model_usage(db: Any) -> Any:
    """The per-model usage rows Hermes's Insights reads: the query of the wheel's own
    ``agent/insights.py`` (``InsightsEngine._GET_MODEL_USAGE_ALL``, taken from its source:
    importing that module needs the agent's network dependencies), run on the file; rows in
    key order. Absent where the release has no such table or query."""
    import ast

    source = Path(sys.modules[type(db).__module__].__file__ or "").with_name("agent")
    insights = source / "insights.py"
    if not insights.is_file() or not hasattr(db, "_conn"):
        return {"absent": "model_usage"}
    query = None
    for node in ast.walk(ast.parse(insights.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "_GET_MODEL_USAGE_ALL"
            for target in node.targets
        ):
            query = ast.literal_eval(node.value)
    if query is None:
        return {"absent": "model_usage"}
    cursor = db._conn.execute(query, (0.0,))
    names = [column[0] for column in cursor.description]
    rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    return sorted(rows, key=lambda row: json.dumps(row, sort_keys=True, default=repr))


def insights_report(db: Any, days: int) -> Any:
    """What ``hermes insights`` reports: the release's own ``InsightsEngine(db).generate``,
    its ``overview`` (totals) and ``models`` (the per-model breakdown). The engine's module
    imports ``requests`` for price look-ups on the network; a ``--no-deps`` wheel has none, so
    an offline stand-in is put in its place (every call raises ``ConnectionError``, which
    the engine meets as any offline machine does): the figures come from the file alone."""
    import types

    try:
        import requests  # noqa: F401
    except ImportError:

        class Offline(types.ModuleType):
            def __getattr__(self, name: str) -> Any:
                if name.startswith("__"):
                    raise AttributeError(name)

                def refuse(*args: Any, **kwargs: Any) -> Any:
                    raise ConnectionError(f"offline: requests.{name}")

                return refuse

        sys.modules["requests"] = Offline("requests")
    try:
        from agent.insights import InsightsEngine
    except ImportError as exc:
        return {"absent": f"insights: {exc}"}
    report = InsightsEngine(db).generate(days=days)
    return {"overview": report.get("overview"), "models": report.get("models")}


SQL_STEP = "$sql"
"""A ``calls`` step that runs one SQL statement (named ``:parameters``) on the store's own
connection instead of a method: it sets what no method sets (started_at, archived...)."""
SELECT_STEP = "$select"
"""A ``calls`` step that runs one SELECT (named ``:parameters``) on the store's own connection
and returns its rows as dicts: what no read method returns (Hermes's per-model usage rows)."""
RAISES_PREFIX = "$raises:"
"""A ``calls`` step named ``"$raises:" + method`` calls the method and answers the class name of
the exception it raised (None when it returned): what a refusal is, side by side."""
PATH_KEY = "$path"
"""An argument ``{"$path": "..."}`` is passed as a ``pathlib.Path`` (JSON has none)."""


def argument(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {PATH_KEY}:
        return Path(value[PATH_KEY])
    return value


def calls(db: Any, steps: list[list[Any]]) -> list[Any]:
    results = []
    for name, args, kwargs in steps:
        if name == SQL_STEP:
            db._conn.execute(args[0], args[1] if len(args) > 1 else {})
            db._conn.commit()
            results.append(None)
            continue
        if name == SELECT_STEP:
            cursor = db._conn.execute(args[0], args[1] if len(args) > 1 else {})
            names = [column[0] for column in cursor.description]
            results.append([dict(zip(names, row, strict=True)) for row in cursor.fetchall()])
            continue
        if name.startswith(RAISES_PREFIX):
            try:
                getattr(db, name[len(RAISES_PREFIX):])(*map(argument, args), **kwargs)
            except Exception as exc:  # the answer is which class it was
                results.append(type(exc).__name__)
            else:
                results.append(None)
            continue
        method = getattr(db, name)
        results.append(method(*map(argument, args),
                              **{key: argument(value) for key, value in kwargs.items()}))
    return results


def functions_from_source(path: Path, names: tuple[str, ...], namespace: dict[str, Any]) -> None:
    """Define the module-level functions ``names`` of the file at ``path`` in ``namespace``,
    without running the rest of that module (its imports)."""
    import ast

    if not path.is_file():
        return
    tree = ast.parse(path.read_text(encoding="utf-8"))
    wanted = [node for node in tree.body
              if isinstance(node, ast.FunctionDef) and node.name in names]  # fmt: skip
    exec(compile(ast.Module(body=wanted, type_ignores=[]), str(path), "exec"), namespace)


def provide_repair_helper(root: Path) -> None:
    """Hermes 0.19's ``repair_alternation`` imports ``repair_message_sequence`` from
    ``agent.agent_runtime_helpers``, whose module imports the agent's runtime (PyYAML, httpx,
    ...), which a ``--no-deps`` wheel does not bring. When that import fails, the module is
    stood in for by the wheel's own two functions (``repair_message_sequence`` and the
    ``drop_stale_api_content`` it calls), compiled from the wheel's source: the same code,
    without the imports it does not use."""
    try:
        import agent.agent_runtime_helpers  # noqa: F401
        return
    except ImportError:
        pass
    import types
    from collections.abc import Mapping
    from typing import Optional

    module = types.ModuleType("agent.agent_runtime_helpers")
    namespace = module.__dict__
    # The names its annotations use (evaluated when the functions are defined).
    namespace.update(Any=Any, Dict=dict, List=list, Mapping=Mapping, Optional=Optional)
    functions_from_source(root / "agent" / "turn_context.py", ("drop_stale_api_content",),
                          namespace)  # fmt: skip
    helpers = root / "agent" / "agent_runtime_helpers.py"
    functions_from_source(helpers, ("repair_message_sequence",), namespace)
    if "repair_message_sequence" in namespace:
        sys.modules["agent.agent_runtime_helpers"] = module


def prepare(root: str) -> Any:
    """The ``hermes_state`` module of ``root``, imported as a run does before its ``SessionDB``
    (``real_hermes_server.py`` does this once and forks a process per action from there)."""
    if root == OURS:
        from sessionstore.hermes import state as ours

        return ours
    # This script's own directory (our tests) must not shadow the wheel's modules.
    wheel = Path(root).resolve()
    sys.path[:] = [root, *(p for p in sys.path[1:] if Path(p).resolve() != wheel)]
    import hermes_state

    if (wheel / "agent" / "agent_runtime_helpers.py").is_file():
        provide_repair_helper(wheel)
    return hermes_state


def main() -> None:
    root, db_path, action = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    argument = json.loads(sys.stdin.read() or "null")
    hermes_state = prepare(root)
    db = hermes_state.SessionDB(db_path=db_path)
    try:
        if action == "build":
            result: Any = build(db)
        elif action == "read":
            result = read(db, argument)
        elif action == "calls":
            result = calls(db, argument)
        elif action == "insights":
            result = insights_report(db, int(argument or 36500))
        else:
            raise SystemExit(f"unknown action {action!r}")
    finally:
        db.close()
    json.dump({"schema_version": hermes_state.SCHEMA_VERSION, "result": result}, sys.stdout,
              default=repr)


if __name__ == "__main__":
    main()
