"""The desktop's canonical Bot Chat keeps its title, on SQLite and PostgreSQL (iot 0.22.2).

Bot Mode finds a bot's one long-lived chat by the exact title ``Bot Chat`` on a hidden
session, each time it opens it. Renaming or clearing that title would leave the conversation
unreachable (and the next open would make an empty one), so a user's rename is refused with
``CanonicalTitleError`` (a ``ValueError``) and an automatic title does not land. A retired
(deliberately archived) Bot Chat hands the name to its replacement, and ``Bot Chat`` resolves
to the chat itself, never to a numbered sibling.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sessionstore.api.session_db import SessionDB
from sessionstore.errors import CanonicalTitleError, TitleInUseError

BOT_CHAT = "Bot Chat"


@pytest.fixture
def db(store_url: str) -> Iterator[SessionDB]:
    database = SessionDB(url=store_url)
    yield database
    database.close()


def _bot_chat(db: SessionDB, session_id: str) -> None:
    db.create_session(session_id, source="desktop")
    assert db.set_session_title(session_id, BOT_CHAT)
    assert db.set_session_hidden(session_id, True)


@pytest.mark.parametrize("new_title", ["Groceries", "", None])
def test_a_rename_or_clearing_of_the_bot_chat_is_refused(
    db: SessionDB, new_title: str | None
) -> None:
    _bot_chat(db, "bot")
    with pytest.raises(CanonicalTitleError, match="canonical Bot Chat") as refused:
        db.set_session_title("bot", new_title)
    assert isinstance(refused.value, ValueError)
    assert db.get_session("bot")["title"] == BOT_CHAT
    assert db.set_session_title("bot", BOT_CHAT)  # the same title again is fine


def test_an_automatic_title_leaves_the_bot_chat_alone(db: SessionDB) -> None:
    _bot_chat(db, "bot")
    assert db.set_session_title_source("bot", "derived")  # lowest authority: still kept
    assert not db.set_auto_title("bot", "A chat about groceries", source="llm")
    assert db.get_session("bot")["title"] == BOT_CHAT


def test_a_visible_session_called_bot_chat_is_an_ordinary_title(db: SessionDB) -> None:
    db.create_session("plain", source="cli")
    assert db.set_session_title("plain", BOT_CHAT)
    assert db.set_session_title("plain", "renamed")
    assert db.get_session("plain")["title"] == "renamed"


def test_a_retired_bot_chat_hands_its_name_to_the_replacement(db: SessionDB) -> None:
    _bot_chat(db, "retired")
    assert db.set_session_archived("retired", True)
    db.create_session("replacement", source="desktop")
    assert db.set_session_title("replacement", BOT_CHAT)
    retired = db.get_session("retired")
    assert retired["archived"] and retired["title"] is None
    assert db.get_session_by_title(BOT_CHAT)["id"] == "replacement"


def test_an_archived_visible_holder_keeps_the_name(db: SessionDB) -> None:
    db.create_session("old", source="cli")
    assert db.set_session_title("old", BOT_CHAT)
    assert db.set_session_archived("old", True)
    db.create_session("new", source="cli")
    with pytest.raises(TitleInUseError):
        db.set_session_title("new", BOT_CHAT)
    assert db.get_session("old")["title"] == BOT_CHAT


def test_bot_chat_resolves_to_itself_not_to_a_numbered_sibling(db: SessionDB) -> None:
    _bot_chat(db, "bot")
    db.create_session("branch", source="desktop", parent_session_id="bot")
    assert db.set_session_title("branch", f"{BOT_CHAT} #2")
    assert db.resolve_session_by_title(BOT_CHAT) == "bot"
    db.create_session("mine", source="cli")
    assert db.set_session_title("mine", "Notes")
    db.create_session("mine2", source="cli")
    assert db.set_session_title("mine2", "Notes #2")
    assert db.resolve_session_by_title("Notes") == "mine2"
