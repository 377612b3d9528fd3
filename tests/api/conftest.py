"""Fixtures the SessionDB face's tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sessionstore.api.session_db import SessionDB


@pytest.fixture
def db(store_url: str) -> Iterator[SessionDB]:
    """A store on each dialect (``store_url``), closed after the test; a test file with its own
    ``db`` (sessions made first, another URL) overrides it."""
    database = SessionDB(url=store_url)
    yield database
    database.close()


@pytest.fixture
def rewound_db(store_url: str) -> Iterator[SessionDB]:
    """Session ``s``: three user turns with their answers, rewound to the second turn (it and
    what follows are undone, kept as inactive rows)."""
    database = SessionDB(url=store_url)
    database.create_session("s", "cli")
    for text in ("one", "two", "three"):
        database.append_message("s", "user", text)
        database.append_message("s", "assistant", f"re {text}")
    second = [m["id"] for m in database.get_messages("s")][2]
    database.rewind_to_message("s", second)
    yield database
    database.close()
