"""A message's structured reasoning survives being copied from one session to another, on
SQLite and PostgreSQL. ``get_messages`` gives ``reasoning_details``, ``codex_reasoning_items``
and ``codex_message_items`` as their columns' JSON text; handed back to a write (a fork copies
``get_messages`` into ``replace_messages``, as Hermes's dashboard does), that text was encoded
again, and the copy replayed a string where the list was, which every consumer drops."""

from __future__ import annotations

from typing import Any

from sessionstore.api.session_db import SessionDB

DETAILS = [{"type": "reasoning.text", "text": "check both", "format": "unknown"}]
ITEMS = [{"id": "rs_1", "type": "reasoning", "encrypted_content": "opaque"}]
MESSAGE_ITEMS = [{"id": "msg_1", "type": "message", "role": "assistant",
                  "content": [{"type": "output_text", "text": "done"}]}]  # fmt: skip
FIELDS = ("reasoning_details", "codex_reasoning_items", "codex_message_items")


def answer(db: SessionDB, session_id: str) -> dict[str, Any]:
    return next(m for m in db.get_messages_as_conversation(session_id) if m["role"] == "assistant")


def seeded(db: SessionDB) -> None:
    db.create_session("src", "cli")
    db.append_message("src", "user", "hi")
    db.append_message("src", "assistant", "done", reasoning_details=DETAILS,
                      codex_reasoning_items=ITEMS, codex_message_items=MESSAGE_ITEMS)  # fmt: skip


def test_a_fork_and_a_fork_of_it_replay_the_reasoning_as_it_was(db: SessionDB) -> None:
    seeded(db)
    for source, copy in (("src", "fork"), ("fork", "fork-of-fork")):
        db.create_session(copy, "cli")
        db.replace_messages(copy, db.get_messages(source))

        replayed = answer(db, copy)
        assert [replayed[name] for name in FIELDS] == [DETAILS, ITEMS, MESSAGE_ITEMS]


def test_a_stored_rows_text_appended_again_is_not_encoded_twice(db: SessionDB) -> None:
    seeded(db)
    row = next(m for m in db.get_messages("src") if m["role"] == "assistant")
    db.create_session("copy", "cli")
    db.append_message("copy", "assistant", "done", reasoning_details=row["reasoning_details"])
    assert answer(db, "copy")["reasoning_details"] == DETAILS


def test_text_that_is_no_json_is_kept_as_that_text(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.append_message("s", "assistant", "done", reasoning_details="plain words")
    assert answer(db, "s")["reasoning_details"] == "plain words"
