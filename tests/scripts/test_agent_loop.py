"""The Hermes-style agent loop (``scripts/agent_loop.py``) against every kind of store it meets.

A brand-new SQLite file, a Hermes v1 ``state.db`` upgraded on open (whose rows must come
through untouched), PostgreSQL, a second run on the same store, and the CLI. The loop only
uses Hermes's ``SessionDB`` API, so these are end-to-end proofs that Hermes code works here.
"""

from __future__ import annotations

import importlib.util
import json
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from legacy_v1_v6 import build_legacy_db
from store_library import connect_like_the_store

from sessionstore.api.session_db import SessionDB

# Slow: runs the agent-loop script in subprocesses (the full run only).
pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "agent_loop.py"
ROOT_MESSAGES = 8  # two turns of user, assistant(tool call), tool, assistant
CHILD_MESSAGES = 9  # the compaction summary, then two turns

REPLAY_UID_KEYS = ("_tool_call_uids", "_tool_call_uid")


@pytest.fixture(scope="module")
def agent_loop() -> ModuleType:
    spec = importlib.util.spec_from_file_location("agent_loop", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def url_db(store_url: str) -> Iterator[SessionDB]:
    db = SessionDB(url=store_url)
    yield db
    db.close()


def _ids_containing(db: SessionDB, session_ids: list[str], word: str, before: int) -> list[int]:
    return sorted(
        m["id"]
        for sid in session_ids
        for m in db.get_messages(sid)
        if m["content"] and word in m["content"].lower() and m["id"] < before
    )


def assert_conversation_recorded(
    db: SessionDB,
    outcome: dict[str, Any],
    agent_loop: ModuleType,
    *,
    root_title: str,
    child_title: str,
    other_cjk_history: bool = False,
) -> None:
    """Everything a Hermes user relies on after one run of the loop."""
    root_id, child_id = outcome["root_id"], outcome["child_id"]
    json.dumps(outcome)  # the CLI prints it: it must be plain JSON data

    root = db.get_session(root_id)
    child = db.get_session(child_id)
    assert root is not None and child is not None
    assert (root["title"], child["title"]) == (root_title, child_title)
    assert (outcome["root_title"], outcome["child_title"]) == (root_title, child_title)
    assert root["end_reason"] == "compression" and root["ended_at"] is not None
    assert child["end_reason"] == "user_exit"
    assert child["parent_session_id"] == root_id and root["parent_session_id"] is None
    assert child["started_at"] >= root["ended_at"]
    assert root["model"] == agent_loop.MODEL
    assert json.loads(root["model_config"]) == agent_loop.MODEL_CONFIG
    assert root["system_prompt"] == agent_loop.SYSTEM_PROMPT

    assert root["message_count"] == db.message_count(root_id) == ROOT_MESSAGES
    assert child["message_count"] == db.message_count(child_id) == CHILD_MESSAGES
    assert root["tool_call_count"] == 2 and child["tool_call_count"] == 2

    usage = outcome["usage"]
    for name in ("input_tokens", "output_tokens", "reasoning_tokens"):
        assert root[name] == usage["root"][name]
        assert child[name] == usage["child"][name]
    assert root["estimated_cost_usd"] + child["estimated_cost_usd"] == pytest.approx(
        usage["estimated_cost_usd"]
    )
    assert root["billing_provider"] == child["billing_provider"] == "openrouter"
    assert root["cost_status"] == "estimated" and root["pricing_version"] == "2026-01"

    # Resuming: by title (the newest of the lineage), through the compression tip, by prefix.
    assert outcome["resolved_by_title"] == child_id
    assert outcome["compression_tip"] == child_id == db.get_compression_tip(root_id)
    assert outcome["resolved_by_prefix"] == child_id

    # Search ran before the resumed turn: it must have found every earlier "alembic" message.
    resumed_turn_start = next(
        m["id"]
        for m in db.get_messages(child_id)
        if m["content"] == "Add a regression test for it."
    )
    lineage = [root_id, child_id]
    expected_hits = _ids_containing(db, lineage, "alembic", resumed_turn_start)
    assert len(expected_hits) == 6
    assert outcome["search_hits"] == expected_hits
    tool_hits = [
        m["id"]
        for m in db.get_messages(root_id)
        if m["role"] == "tool" and "alembic" in m["content"]
    ]
    assert outcome["tool_search_hits"] == tool_hits and len(tool_hits) == 1
    cjk_messages = _ids_containing(db, lineage, "数据库", resumed_turn_start)
    assert len(cjk_messages) == 1
    if other_cjk_history:
        # SPEC §5.6 (as Hermes): the CJK substring search is only a fallback for when the word
        # index finds nothing. Older messages holding "数据库" as a space-separated word satisfy
        # the index, so our unspaced sentence may be missed; it must never be invented.
        assert set(outcome["cjk_search_hits"]) <= set(cjk_messages)
    else:
        assert outcome["cjk_search_hits"] == cjk_messages

    # The session list showed the compressed conversation once, as its live tip.
    (listed,) = outcome["listed_lineage"]
    assert listed["id"] == child_id and listed["_lineage_root_id"] == root_id
    assert listed["started_at"] == pytest.approx(root["started_at"])
    assert listed["title"] == child_title and listed["end_reason"] is None
    assert listed["message_count"] == 5
    assert listed["preview"].startswith("[CONTEXT COMPACTION] Earlier: the alembic")
    assert listed["preview"].endswith("...")

    # The resumed conversation is in OpenAI shape, reasoning only on assistant messages; each
    # message carries its timestamp, as Hermes 0.18's does.
    conversation = outcome["resumed_conversation"]
    assert [m["role"] for m in conversation] == ["user", "user", "assistant", "tool", "assistant"]
    assert all(isinstance(m.pop("timestamp"), float) for m in conversation)
    # iot 0.22.2's replay keys (docs/hermes.md): each message marked stored, with its uids.
    assert all(m.pop("_db_persisted") is True for m in conversation)
    uids = [{key: m.pop(key) for key in REPLAY_UID_KEYS if key in m} for m in conversation]
    assert uids[2]["_tool_call_uids"]["call_3"] == uids[3]["_tool_call_uid"]
    summary, question, call, result, answer = conversation
    assert set(summary) == set(question) == {"role", "content"}
    assert call["content"] is None and call["tool_calls"][0]["id"] == "call_3"
    assert call["reasoning"].startswith("I should call patch")
    assert call["reasoning_details"][0]["type"] == "reasoning.text"
    assert result == {
        "role": "tool",
        "content": "patched 1 file; 12 passed",
        "tool_call_id": "call_3",
        "tool_name": "patch",
    }
    assert answer["codex_reasoning_items"] == [
        {"type": "reasoning", "id": "rs_call_3", "summary": []}
    ]
    assert "tool_calls" not in answer and "reasoning" not in answer
    stored = db.get_messages_as_conversation(child_id)[:5]
    assert [
        {k: v for k, v in m.items() if k not in ("timestamp", "_db_persisted", *REPLAY_UID_KEYS)}
        for m in stored
    ] == conversation

    # Exports hold the whole sessions as they ended.
    exports = outcome["exports"]
    assert len(exports["root"]["messages"]) == ROOT_MESSAGES
    assert len(exports["child"]["messages"]) == CHILD_MESSAGES
    assert exports["child"]["end_reason"] == "user_exit"
    assert exports["root"] == db.export_session(root_id)


def test_agent_loop_on_a_new_file(tmp_path: Path, agent_loop: ModuleType) -> None:
    db = SessionDB(db_path=tmp_path / "state.db")
    try:
        outcome = agent_loop.main(db)
        topic = agent_loop.DEFAULT_TOPIC
        assert_conversation_recorded(
            db, outcome, agent_loop, root_title=topic, child_title=f"{topic} #2"
        )
        assert db.session_count() == 2
    finally:
        db.close()


def test_agent_loop_on_store_url(url_db: SessionDB, agent_loop: ModuleType) -> None:
    outcome = agent_loop.main(url_db, source="telegram")
    topic = agent_loop.DEFAULT_TOPIC
    assert_conversation_recorded(
        url_db, outcome, agent_loop, root_title=topic, child_title=f"{topic} #2"
    )
    assert url_db.session_count(source="telegram") == 2


def test_a_second_run_continues_the_title_lineage(
    url_db: SessionDB, agent_loop: ModuleType
) -> None:
    topic = agent_loop.DEFAULT_TOPIC
    first = agent_loop.main(url_db)
    second = agent_loop.main(url_db)
    assert_conversation_recorded(
        url_db, second, agent_loop, root_title=f"{topic} #3", child_title=f"{topic} #4"
    )
    # The first run is intact, and its root now lists separately from the second lineage.
    first_root = url_db.get_session(first["root_id"])
    assert first_root is not None and first_root["title"] == topic
    assert url_db.get_compression_tip(first["root_id"]) == first["child_id"]
    listed = {row["id"] for row in url_db.list_sessions_rich()}
    assert listed == {first["child_id"], second["child_id"]}
    assert url_db.session_count() == 4


def _legacy_rows(path: Path) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    conn = sqlite3.connect(path)
    try:
        sessions = conn.execute(
            "SELECT id, source, user_id, model, model_config, system_prompt, parent_session_id,"
            " started_at, ended_at, end_reason, message_count, tool_call_count, input_tokens,"
            " output_tokens FROM sessions ORDER BY id"
        ).fetchall()
        messages = conn.execute(
            "SELECT id, session_id, role, content, tool_call_id, tool_calls, tool_name,"
            " timestamp, token_count FROM messages ORDER BY id"
        ).fetchall()
    finally:
        conn.close()
    return sessions, messages


def test_agent_loop_on_an_upgraded_legacy_v1_file(tmp_path: Path, agent_loop: ModuleType) -> None:
    path = tmp_path / "state.db"
    build_legacy_db(path, 1)
    legacy_sessions, legacy_messages = _legacy_rows(path)
    assert legacy_sessions and legacy_messages

    db = SessionDB(db_path=path)  # upgrades v1 -> head on open
    try:
        outcome = agent_loop.main(db)
        topic = agent_loop.DEFAULT_TOPIC
        assert_conversation_recorded(
            db,
            outcome,
            agent_loop,
            root_title=topic,
            child_title=f"{topic} #2",
            other_cjk_history=True,
        )
        assert db.session_count() == len(legacy_sessions) + 2
        # Legacy history is searchable next to the new conversation.
        legacy_ids = {row[0] for row in legacy_sessions}
        legacy_hits = [
            h for h in db.search_messages("alembic", limit=200) if h["session_id"] in legacy_ids
        ]
        assert legacy_hits
    finally:
        db.close()

    sessions_after, messages_after = _legacy_rows(path)
    new_ids = {outcome["root_id"], outcome["child_id"]}
    # Hermes's v16 step may tag a root that looks like an orphaned subagent run
    # (model_config gains "_delegate_from"); every other value is unchanged.
    kept = [row for row in sessions_after if row[0] not in new_ids]
    assert [row[:4] + row[5:] for row in kept] == [row[:4] + row[5:] for row in legacy_sessions]
    for after, before in zip(kept, legacy_sessions, strict=True):
        if after[4] != before[4]:
            assert after[4] is not None and "_delegate_from" in json.loads(after[4])
    assert [row for row in messages_after if row[1] not in new_ids] == legacy_messages
    conn = connect_like_the_store(path)
    try:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(31,)]
    finally:
        conn.close()


def _run_cli(*args: str) -> dict[str, Any]:
    completed = subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    outcome: dict[str, Any] = json.loads(completed.stdout)
    return outcome


def test_cli_with_db_path(tmp_path: Path, agent_loop: ModuleType) -> None:
    path = tmp_path / "state.db"
    outcome = _run_cli("--db", str(path))
    db = SessionDB(db_path=path)
    try:
        topic = agent_loop.DEFAULT_TOPIC
        assert_conversation_recorded(
            db, outcome, agent_loop, root_title=topic, child_title=f"{topic} #2"
        )
    finally:
        db.close()


def test_cli_with_url(url_db: SessionDB, store_url: str, agent_loop: ModuleType) -> None:
    outcome = _run_cli("--url", store_url, "--source", "discord")
    topic = agent_loop.DEFAULT_TOPIC
    assert_conversation_recorded(
        url_db, outcome, agent_loop, root_title=topic, child_title=f"{topic} #2"
    )
    assert url_db.session_count(source="discord") == 2
