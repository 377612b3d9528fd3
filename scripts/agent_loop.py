"""A Hermes-style agent loop driven through the Hermes ``SessionDB`` API only.

    python scripts/agent_loop.py                  # the default store (SESSIONSTORE_URL / ~/.hermes)
    python scripts/agent_loop.py --db state.db    # a SQLite file (a Hermes state.db is upgraded)
    python scripts/agent_loop.py --url postgresql+psycopg://user@host/db

It plays one conversation the way the Hermes agent records it, with a scripted model instead
of an API: a session is created, turns with tool calls and reasoning are logged message by
message, the conversation gets a title, the context is compressed into a child session (the
parent ends with ``compression``, the child continues the title lineage), then the user
searches, lists sessions, resumes by title and the conversation is exported. ``main(db)``
returns what each step observed, and the CLI prints it as JSON.

Only methods Hermes's own ``SessionDB`` has are called (no ``append_messages``, no repository),
so the script doubles as proof that Hermes code runs unchanged on this store.
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from datetime import datetime
from typing import Any

from sessionstore.api.session_db import SessionDB

MODEL = "anthropic/claude-sonnet-4"
MODEL_CONFIG = {"temperature": 0.3, "max_tokens": 8192, "reasoning_effort": "medium"}
SYSTEM_PROMPT = "You are Hermes, an agent that works in the user's repository with tools."
DEFAULT_TOPIC = "Fix the flaky alembic migration test"
COMPRESSION = "compression"
BILLING_PROVIDER = "openrouter"
BILLING_BASE_URL = "https://openrouter.ai/api/v1"


def new_session_id() -> str:
    """Hermes's id shape: start time plus a short random suffix."""
    return f"{datetime.now():%Y%m%d_%H%M%S}_{uuid.uuid4().hex[:6]}"


def tool_call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


class ScriptedAgent:
    """Logs a turn exactly as Hermes's run loop does: each message as it happens, then usage."""

    def __init__(self, db: SessionDB, session_id: str) -> None:
        self.db = db
        self.session_id = session_id
        self.usage = {"input_tokens": 0, "output_tokens": 0, "reasoning_tokens": 0}
        self.cost_usd = 0.0

    def record_api_call(self, input_tokens: int, output_tokens: int, reasoning: int) -> None:
        cost = round(input_tokens * 3e-6 + output_tokens * 15e-6, 8)
        self.db.update_token_counts(
            self.session_id,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            reasoning_tokens=reasoning,
            model=MODEL,
            estimated_cost_usd=cost,
            cost_status="estimated",
            cost_source="pricing_table",
            pricing_version="2026-01",
            billing_provider=BILLING_PROVIDER,
            billing_base_url=BILLING_BASE_URL,
            billing_mode="api",
        )
        self.usage["input_tokens"] += input_tokens
        self.usage["output_tokens"] += output_tokens
        self.usage["reasoning_tokens"] += reasoning
        self.cost_usd += cost

    def tool_turn(
        self, user_text: str, call: dict[str, Any], tool_output: str, answer: str
    ) -> None:
        db, sid = self.db, self.session_id
        db.append_message(sid, "user", user_text)
        db.append_message(
            sid,
            "assistant",
            None,
            tool_calls=[call],
            finish_reason="tool_calls",
            reasoning=f"I should call {call['function']['name']} before answering.",
            reasoning_details=[
                {"type": "reasoning.text", "text": "Plan: inspect, then answer.", "format": None}
            ],
            token_count=64,
        )
        self.record_api_call(1200, 64, 40)
        db.append_message(
            sid, "tool", tool_output, tool_call_id=call["id"], tool_name=call["function"]["name"]
        )
        db.append_message(
            sid,
            "assistant",
            answer,
            finish_reason="stop",
            codex_reasoning_items=[{"type": "reasoning", "id": f"rs_{call['id']}", "summary": []}],
            token_count=len(answer.split()),
        )
        self.record_api_call(1400, len(answer.split()), 0)


def main(db: SessionDB, *, source: str = "cli", topic: str = DEFAULT_TOPIC) -> dict[str, Any]:
    # 1. A new conversation.
    root_id = new_session_id()
    db.create_session(
        root_id, source, model=MODEL, model_config=MODEL_CONFIG, system_prompt=SYSTEM_PROMPT
    )
    root = ScriptedAgent(db, root_id)
    root.tool_turn(
        "The alembic migration test fails about one run in ten. Can you look?",
        tool_call("call_1", "terminal", command="pytest tests/test_migrations.py -x"),
        "FAILED tests/test_migrations.py::test_upgrade - alembic upgrade: database is locked",
        "The alembic upgrade races the WAL checkpoint; the test opens two connections.",
    )
    # Hermes titles a conversation after its first exchange; get_next_title_in_lineage keeps a
    # rerun of the same topic from colliding with an earlier one.
    root_title = db.get_next_title_in_lineage(topic)
    db.set_session_title(root_id, root_title)
    root.tool_turn(
        "顺便说一下，数据库迁移测试在 CI 上也偶尔失败。",
        tool_call("call_2", "read_file", path="tests/conftest.py"),
        "def store_url(request): ...  # opens a second engine on the same file",
        "The fixture opens a second engine; reuse the first one and the lock goes away.",
    )

    # 2. Context compression: the parent ends, a child continues the lineage.
    db.end_session(root_id, COMPRESSION)
    child_id = new_session_id()
    db.create_session(
        child_id,
        source,
        model=MODEL,
        model_config=MODEL_CONFIG,
        system_prompt=SYSTEM_PROMPT,
        parent_session_id=root_id,
    )
    child_title = db.get_next_title_in_lineage(root_title)
    db.set_session_title(child_id, child_title)
    child = ScriptedAgent(db, child_id)
    db.append_message(
        child_id,
        "user",
        "[CONTEXT COMPACTION] Earlier: the alembic migration test was flaky because the "
        "fixture opened a second engine on the same SQLite file.",
    )
    child.tool_turn(
        "Apply the fix and run the alembic tests again.",
        tool_call("call_3", "patch", path="tests/conftest.py"),
        "patched 1 file; 12 passed",
        "Fixed: the fixture reuses its engine and the alembic tests pass 50 runs in a row.",
    )

    # 3. The user looks back: search, the session list, resume by title.
    alembic_hits = db.search_messages("alembic", source_filter=[source], limit=200)
    tool_hits = db.search_messages("alembic", role_filter=["tool"], limit=200)
    cjk_hits = db.search_messages("数据库", limit=200)
    listed = db.list_sessions_rich(source=source, limit=200)
    listed_lineage = [row for row in listed if row.get("_lineage_root_id") == root_id]
    # `hermes --resume "<topic>"`: the newest numbered variant of the lineage wins.
    resumed_id = db.resolve_session_by_title(topic)
    tip_id = db.get_compression_tip(root_id)
    prefix_id = db.resolve_session_id(child_id[:-2])
    conversation = db.get_messages_as_conversation(child_id)

    # 4. The resumed conversation goes on, then the user quits.
    resumed = ScriptedAgent(db, child_id)
    resumed.tool_turn(
        "Add a regression test for it.",
        tool_call("call_4", "write_file", path="tests/test_lock_regression.py"),
        "wrote 24 lines",
        "Added a regression test that opens two engines and checks the alembic upgrade.",
    )
    db.end_session(child_id, "user_exit")

    root_export = db.export_session(root_id)
    child_export = db.export_session(child_id)
    lineage = {root_id, child_id}
    return {
        "root_id": root_id,
        "child_id": child_id,
        "root_title": root_title,
        "child_title": child_title,
        "resolved_by_title": resumed_id,
        "compression_tip": tip_id,
        "resolved_by_prefix": prefix_id,
        "search_hits": sorted(hit["id"] for hit in alembic_hits if hit["session_id"] in lineage),
        "tool_search_hits": sorted(hit["id"] for hit in tool_hits if hit["session_id"] in lineage),
        "cjk_search_hits": sorted(hit["id"] for hit in cjk_hits if hit["session_id"] in lineage),
        "listed_lineage": listed_lineage,
        "resumed_conversation": conversation,
        "usage": {
            "root": root.usage,
            "child": {k: child.usage[k] + resumed.usage[k] for k in child.usage},
            "estimated_cost_usd": root.cost_usd + child.cost_usd + resumed.cost_usd,
        },
        "exports": {"root": root_export, "child": child_export},
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Play one Hermes-style conversation against a session store."
    )
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--url", help="SQLAlchemy URL of the store")
    target.add_argument("--db", help="path of a SQLite state.db (created or upgraded)")
    parser.add_argument("--source", default="cli", help="platform the sessions belong to")
    return parser.parse_args(argv)


def cli(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    db = SessionDB(db_path=args.db) if args.db else SessionDB(url=args.url)
    try:
        outcome = main(db, source=args.source)
    finally:
        db.close()
    json.dump(outcome, sys.stdout, indent=2, ensure_ascii=False, default=str)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(cli())
