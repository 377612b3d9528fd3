"""Best-match-first word search on SQLite ranks the newest ``RANK_WINDOW`` matches (issue 31).

The window is shrunk to 4 here so a dozen messages show every rule: the page comes from the
newest matches, in bm25 order; a filter that leaves fewer hits than asked ranks every match; a
time order, or a page reaching past half the window, is answered over every match.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sessionstore.api.session_db import SessionDB
from sessionstore.search import sqlite as sqlite_search

# Older messages say "alpha" three times in three words: the best bm25 of all. Newer ones say
# it once among other words.
OLD_STRONG = range(1, 7)
NEW_WEAK = range(7, 13)


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SessionDB]:
    monkeypatch.setattr(sqlite_search, "RANK_WINDOW", 4)
    database = SessionDB(tmp_path / "state.db")
    database.create_session("s", "cli")
    for number in OLD_STRONG:
        database.append_message("s", "tool", "alpha alpha alpha", tool_name=f"t{number}")
    for number in NEW_WEAK:
        database.append_message("s", "user", f"alpha beta gamma delta epsilon {number}")
    yield database
    database.close()


def ids(hits: list[dict[str, object]]) -> list[object]:
    return [hit["id"] for hit in hits]


def test_best_match_first_ranks_the_newest_window(db: SessionDB) -> None:
    hits = db.search_messages("alpha", limit=2)
    assert len(hits) == 2
    assert {hit["id"] for hit in hits} <= {9, 10, 11, 12}  # the newest four matches


def test_a_filter_that_empties_the_window_ranks_every_match(db: SessionDB) -> None:
    hits = db.search_messages("alpha", role_filter=["tool"], limit=2)
    assert len(hits) == 2 and {hit["id"] for hit in hits} <= set(OLD_STRONG)


def test_a_time_order_reads_every_match(db: SessionDB) -> None:
    assert ids(db.search_messages("alpha", sort="oldest", limit=2)) == [1, 2]
    assert ids(db.search_messages("alpha", sort="newest", limit=2)) == [12, 11]


def test_a_page_past_half_the_window_is_ranked_over_every_match(db: SessionDB) -> None:
    hits = db.search_messages("alpha", limit=3)
    assert {hit["id"] for hit in hits} <= set(OLD_STRONG)  # the strongest, wherever they are


def test_without_a_window_the_best_matches_come_first(
    db: SessionDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_search, "RANK_WINDOW", 1000)
    assert {hit["id"] for hit in db.search_messages("alpha", limit=2)} <= set(OLD_STRONG)
