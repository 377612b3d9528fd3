"""iot 0.22.2's foreign history on SQLite and PostgreSQL (issue 29): ``import_foreign_history``
adopts another tool's conversation once per origin, in one transaction, with its provenance
and owner; ``find_foreign_import`` finds it again. Hostile inputs get iot's exception types or
a typed error, and nothing is written. The release is the oracle in
``tests/hermes/test_real_iot_foreign_history.py``.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import sqlalchemy as sa

from sessionstore.api.session_db import SessionDB

ORIGIN = {"tool": "claude", "path": "/h/a.jsonl", "foreign_session_id": "f-1"}
TURNS = [{"role": "user", "content": "hello", "timestamp": 1.0},
         {"role": "assistant", "content": "hi", "timestamp": 2.0}]  # fmt: skip


def _count(db: SessionDB) -> int:
    statement = sa.text("SELECT COUNT(*) FROM sessions")
    return int(db.store.read(lambda conn: conn.execute(statement).scalar_one()))


def test_an_origin_is_adopted_once(db: SessionDB) -> None:
    first = db.import_foreign_history(ORIGIN, TURNS, title="Chat", cwd="/w", profile="work")
    assert first["already_imported"] is False
    assert re.fullmatch(r"\d{8}_\d{6}_[0-9a-f]{12}", first["session_id"])
    again = db.import_foreign_history(ORIGIN, [], title="New", cwd=None, profile=None)
    assert again == {"session_id": first["session_id"], "already_imported": True}
    assert db.find_foreign_import(ORIGIN) == first["session_id"]
    assert db.find_foreign_import({**ORIGIN, "foreign_session_id": "f-2"}) is None
    session = db.get_session(first["session_id"])
    assert session is not None
    assert (session["source"], session["title"], session["cwd"], session["profile_name"]) == (
        "claude", "Chat", "/w", "work"
    )  # fmt: skip
    assert json.loads(session["origin_json"]) == {"imported_from": ORIGIN}
    assert [m["content"] for m in db.get_messages(first["session_id"])] == ["hello", "hi"]
    assert session["message_count"] == 2 and _count(db) == 1


def test_a_held_title_gets_the_new_ids_tail(db: SessionDB) -> None:
    db.create_session("mine", "cli")
    db.set_session_title("mine", "Chat")
    made = db.import_foreign_history(ORIGIN, TURNS, title="Chat", cwd=None, profile=None)
    assert db.get_session_title(made["session_id"]) == f"Chat ({made['session_id'][-12:]})"
    assert db.get_session_title("mine") == "Chat"


def test_without_a_foreign_id_the_path_finds_it(db: SessionDB) -> None:
    origin = {"tool": "codex", "path": "/h/c.jsonl"}
    made = db.import_foreign_history(origin, TURNS, title=None, cwd=None, profile="p")
    assert db.find_foreign_import({**origin, "foreign_session_id": None}) == made["session_id"]
    assert db.find_foreign_import({**origin, "path": "/h/d.jsonl"}) is None


@pytest.mark.parametrize(
    ("origin", "messages", "keywords", "error"),
    [
        ("claude", TURNS, {}, TypeError),  # an origin that is no dict
        ({"path": "/p"}, TURNS, {}, KeyError),  # no tool: iot's KeyError
        (ORIGIN, [{"content": "no role"}], {}, ValueError),
        (ORIGIN, "not a list", {}, ValueError),
        (ORIGIN, [5], {}, ValueError),
        (ORIGIN, TURNS, {"profile": 5}, TypeError),
        (ORIGIN, TURNS, {"title": 5}, ValueError),
        ({**ORIGIN, "tool": "cl\x00aude"}, TURNS, {}, ValueError),
        ({**ORIGIN, "tool": "\ud800"}, TURNS, {}, ValueError),
        ({**ORIGIN, "extra": object()}, TURNS, {}, TypeError),  # not JSON: iot's TypeError
    ],
)  # fmt: skip
def test_what_cannot_be_imported_writes_nothing(
    db: SessionDB, origin: Any, messages: Any, keywords: dict[str, Any], error: type[Exception]
) -> None:
    values = {"title": "Chat", "cwd": None, "profile": None, **keywords}
    with pytest.raises(error):
        db.import_foreign_history(origin, messages, **values)
    assert _count(db) == 0


@pytest.mark.parametrize("tool", ["", "cl\x00aude", "\ud800", 5, None])
def test_a_tool_no_session_holds_finds_nothing(db: SessionDB, tool: Any) -> None:
    db.import_foreign_history(ORIGIN, TURNS, title=None, cwd=None, profile=None)
    assert db.find_foreign_import({"tool": tool, "path": "/h/a.jsonl"}) is None


def test_nul_in_a_title_is_stored_as_each_database_can(db: SessionDB) -> None:
    made = db.import_foreign_history(ORIGIN, TURNS, title="a\x00b", cwd=None, profile=None)
    assert db.get_session_title(made["session_id"]) in ("a\x00b", "a\ufffdb")
