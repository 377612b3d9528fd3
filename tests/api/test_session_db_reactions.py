"""iot 0.22.2's message reactions on our SessionDB, both dialects, in the inner loop (the side
by side with the real iot is ``tests/hermes/test_real_iot_row_edits.py``, slow): the tapback
rules, rows the session does not show, the once-only hand-over, and hostile arguments."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sessionstore.api.session_db import SessionDB


@pytest.fixture
def db(store_url: str) -> Iterator[SessionDB]:
    database = SessionDB(url=store_url)
    database.create_session("s", "telegram")
    yield database
    database.close()


def _emojis(reactions: list[dict[str, Any]] | None) -> list[tuple[str, str]]:
    assert reactions is not None
    return [(r["author"], r["emoji"]) for r in reactions]


def test_one_reaction_per_author_the_same_again_clears_it(db: SessionDB) -> None:
    row = db.append_message("s", "assistant", "done")
    assert _emojis(db.set_message_reaction("s", row, "👍")) == [("user", "👍")]
    assert _emojis(db.set_message_reaction("s", row, "🎉", author="agent")) == [
        ("user", "👍"), ("agent", "🎉"),
    ]
    # Another emoji replaces the author's; the same one again clears it.
    assert _emojis(db.set_message_reaction("s", row, "❤")) == [("agent", "🎉"), ("user", "❤")]
    assert _emojis(db.set_message_reaction("s", row, "❤")) == [("agent", "🎉")]
    assert _emojis(db.set_message_reaction("s", row, None, author="agent")) == []
    assert db.get_message_reactions("s", row) == []
    # A row left with no metadata keeps none (the reactions key is not left empty behind).
    assert db.get_messages("s")[0].get("display_metadata") in (None, {})


def test_reactions_survive_a_content_rewrite_and_read_back(db: SessionDB) -> None:
    row = db.append_message("s", "user", "first")
    db.set_message_reaction("s", row, "👀", author="agent")
    [reaction] = db.get_message_reactions("s", row)
    assert reaction["emoji"] == "👀" and reaction["author"] == "agent"
    assert isinstance(reaction["at"], (int, float))


def test_unseen_reactions_are_handed_over_once_in_row_order(db: SessionDB) -> None:
    first = db.append_message("s", "assistant", "one")
    second = db.append_message("s", "assistant", "two")
    db.set_message_reaction("s", second, "🔥")
    db.set_message_reaction("s", first, "👍")
    db.set_message_reaction("s", first, "🤖", author="agent")
    taken = db.take_unseen_reactions("s")
    assert [(t["row_id"], t["emoji"], t["text"], t["role"]) for t in taken] == [
        (first, "👍", "one", "assistant"), (second, "🔥", "two", "assistant"),
    ]
    assert db.take_unseen_reactions("s") == []
    # The agent's own reaction is its own to take, and stays on the row once seen.
    assert [t["emoji"] for t in db.take_unseen_reactions("s", author="agent")] == ["🤖"]
    assert [r["emoji"] for r in db.get_message_reactions("s", first)] == ["👍", "🤖"]


def test_rows_the_session_does_not_show_take_no_reaction(db: SessionDB) -> None:
    db.create_session("other", "cli")
    foreign = db.append_message("other", "user", "elsewhere")
    mine = db.append_message("s", "user", "ask")
    db.append_message("s", "assistant", "answer")
    assert db.set_message_reaction("s", foreign, "👍") is None
    assert db.get_message_reactions("s", foreign) == []
    # A rewound (undone) row is not shown: no reaction lands on it.
    db.rewind_to_message("s", mine)
    assert db.set_message_reaction("s", mine, "👍") is None
    assert db.take_unseen_reactions("s") == []
    assert db.get_message_reactions("other", foreign) == []


@pytest.mark.parametrize("session", [None, 5, "", "nul\x00", "\ud800", b"s", ["s"]])
def test_unreadable_session_ids_match_nothing(db: SessionDB, session: Any) -> None:
    row = db.append_message("s", "user", "x")
    assert db.set_message_reaction(session, row, "👍") is None
    assert db.get_message_reactions(session, row) == []
    assert db.take_unseen_reactions(session) == []
    assert db.get_message_reactions("s", row) == []


@pytest.mark.parametrize("row_id", [0, -1, 2**63, 2**200, True, 1.0, "1", None])
def test_impossible_row_ids_match_nothing(db: SessionDB, row_id: Any) -> None:
    db.append_message("s", "user", "x")
    assert db.set_message_reaction("s", row_id, "👍") is None
    assert db.get_message_reactions("s", row_id) == []


def test_wrong_emoji_or_author_types_are_type_errors_and_write_nothing(db: SessionDB) -> None:
    row = db.append_message("s", "user", "x")
    with pytest.raises(TypeError):
        db.set_message_reaction("s", row, 5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        db.set_message_reaction("s", row, "👍", author=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        db.set_message_reaction("s", row, "👍", author="a\x00b")
    assert db.get_message_reactions("s", row) == []
