"""A SQLite file can hold text in a REAL column (SQLite types values, not columns): a row
salvaged from a damaged file, or written by a tool, may say ``started_at = 'unknown'``. Such a
row must cost the listing its own clock only (``last_active`` None, listed last), never the
whole listing, as in iot 0.22.2. Found by upstream Hermes's ``test_corrupt_row_robustness.py``
(the third walk, 2026-12-05): one such row made every ``list_sessions_rich`` raise.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from store_sql import run

from sessionstore.api.session_db import SessionDB


@pytest.fixture
def damaged(migrated_sqlite_url: str) -> Iterator[SessionDB]:
    """``good``, and ``broken`` whose every clock is text (only SQLite can hold that)."""
    database = SessionDB(url=migrated_sqlite_url)
    for session_id in ("good", "broken"):
        database.create_session(session_id, "cli")
        database.append_message(session_id, "user", f"hello from {session_id}")
    run(database, "UPDATE sessions SET started_at = 'unknown', last_activity_at = 'unknown' "
                  "WHERE id = 'broken'")  # fmt: skip
    run(database, "UPDATE messages SET timestamp = 'unknown' WHERE session_id = 'broken'")
    yield database
    database.close()


def test_a_row_whose_clocks_are_text_costs_the_listing_that_clock_only(
    damaged: SessionDB,
) -> None:
    for rows in (
        damaged.list_sessions_rich(),
        damaged.list_sessions_rich(order_by_last_active=True),
        damaged.list_sessions_rich(order_by_last_active=True, compact_rows=True),
    ):
        active = {row["id"]: row["last_active"] for row in rows}
        assert set(active) == {"good", "broken"}
        assert active["broken"] is None
        assert isinstance(active["good"], float)
    # No clock is no recency: the healthy conversation is the most recent one.
    for rows in (damaged.list_sessions_rich(order_by_last_active=True), damaged.search_sessions()):
        assert [row["id"] for row in rows] == ["good", "broken"]
    typed = {listing.session.id: listing for listing in damaged.repository.list_sessions_rich()}
    assert typed["broken"].last_active is None


def test_a_text_clock_among_a_sessions_messages_does_not_hide_its_real_ones(
    damaged: SessionDB,
) -> None:
    damaged.append_message("broken", "assistant", "a real reply", timestamp=2_000_000_000.0)
    rows = {row["id"]: row for row in damaged.list_sessions_rich(order_by_last_active=True)}
    assert rows["broken"]["last_active"] == 2_000_000_000.0
    assert next(iter(rows)) == "broken"


def test_the_recent_browse_lists_a_row_whose_clocks_are_text(damaged: SessionDB) -> None:
    """``list_recent_sessions_bounded`` (the desktop's and the gateway's recent list) raised
    ``ValueError`` for every call while one such row was a candidate."""
    rows = damaged.list_recent_sessions_bounded(limit=20)
    assert [row["id"] for row in rows] == ["good", "broken"]
    broken = rows[1]
    assert (broken["started_at"], broken["last_active"]) == ("unknown", None)  # as iot's dict
    assert isinstance(rows[0]["last_active"], float)


@pytest.mark.parametrize(
    ("query", "sort"),
    [("hello", None), ("hello", "newest"), ("hello", "oldest"), ("hel*", None),
     ('"hello from"', None), ("你好世界", None), ("你好世界", "newest")],
)  # fmt: skip
def test_search_finds_a_message_whose_clocks_are_text(
    damaged: SessionDB, query: str, sort: str | None
) -> None:
    """Every search that found such a message raised ``ValueError`` (the word index, the
    substring one, ordered by time or not); its hit now says "no time" (None) where iot's dict
    carries the text."""
    for session_id in ("good", "broken"):  # CJK text: the substring search's rows
        damaged.append_message(session_id, "user", f"hello from {session_id}: 你好世界")
    run(damaged, "UPDATE messages SET timestamp = 'unknown' WHERE session_id = 'broken'")
    hits = {hit["session_id"]: hit for hit in damaged.search_messages(query, sort=sort)}
    assert set(hits) == {"good", "broken"}
    assert (hits["broken"]["timestamp"], hits["broken"]["session_started"]) == (None, None)
    assert isinstance(hits["good"]["timestamp"], float)
    assert isinstance(hits["good"]["session_started"], float)
    typed = {hit.session_id: hit for hit in damaged.repository.search_messages(query, sort=sort)}
    assert (typed["broken"].timestamp, typed["broken"].session_started) == (None, None)
    assert typed["good"].to_dict()["timestamp"] == hits["good"]["timestamp"]


def test_a_sessions_rewind_targets_and_activity_read_with_text_clocks(damaged: SessionDB) -> None:
    """``list_recent_user_messages`` (iot's /rewind and /undo picker) and
    ``get_session_activity`` raised ``ValueError`` for a session whose clock holds text."""
    targets = damaged.list_recent_user_messages("broken")
    assert [(target["preview"], target["timestamp"]) for target in targets] == [
        ("hello from broken", None)
    ]
    assert isinstance(damaged.list_recent_user_messages("good")[0]["timestamp"], float)
    activity = damaged.get_session_activity("broken")
    assert activity is not None
    assert (activity["last_activity_at"], activity["seconds_since_activity"]) == (None, None)
