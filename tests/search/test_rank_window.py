"""Best-match-first word search ranks the newest ``RANK_WINDOW`` matches, on SQLite and on
PostgreSQL alike (issue 31).

The window is shrunk to 4 here so a dozen messages show every rule: the page comes from the
newest matches, in score order (bm25 on SQLite, ``ts_rank`` on PostgreSQL); a filter that
leaves fewer hits than asked ranks every match; a time order, or a page reaching past half
the window, is answered over every match.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import sqlalchemy as sa

from sessionstore.api.session_db import SessionDB
from sessionstore.search import postgresql as postgresql_search
from sessionstore.search import request as search_request


@dataclass
class Corpus:
    db: SessionDB
    old_strong: list[int]
    """Older messages say "alpha" three times in three words: the best score of all."""
    new_weak: list[int]
    """Newer ones say it once among other words."""


@pytest.fixture
def corpus(store_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Corpus]:
    monkeypatch.setattr(search_request, "RANK_WINDOW", 4)
    database = SessionDB(url=store_url)
    database.create_session("s", "cli")
    old_strong = [
        database.append_message("s", "tool", "alpha alpha alpha", tool_name=f"t{number}")
        for number in range(6)
    ]
    new_weak = [
        database.append_message("s", "user", f"alpha beta gamma delta epsilon {number}")
        for number in range(6)
    ]
    yield Corpus(database, old_strong, new_weak)
    database.close()


def ids(hits: list[dict[str, object]]) -> list[object]:
    return [hit["id"] for hit in hits]


def test_best_match_first_ranks_the_newest_window(corpus: Corpus) -> None:
    hits = corpus.db.search_messages("alpha", limit=2)
    assert len(hits) == 2
    assert set(ids(hits)) <= set(corpus.new_weak[-4:])  # the newest four matches


def test_a_filter_that_empties_the_window_ranks_every_match(corpus: Corpus) -> None:
    hits = corpus.db.search_messages("alpha", role_filter=["tool"], limit=2)
    assert len(hits) == 2 and set(ids(hits)) <= set(corpus.old_strong)


def test_the_next_page_comes_from_the_same_window(corpus: Corpus) -> None:
    first = ids(corpus.db.search_messages("alpha", limit=1))
    second = ids(corpus.db.search_messages("alpha", limit=1, offset=1))
    assert first != second and set(first + second) <= set(corpus.new_weak[-4:])


def test_a_time_order_reads_every_match(corpus: Corpus) -> None:
    assert ids(corpus.db.search_messages("alpha", sort="oldest", limit=2)) == corpus.old_strong[:2]
    assert ids(corpus.db.search_messages("alpha", sort="newest", limit=2)) == [
        corpus.new_weak[-1], corpus.new_weak[-2],
    ]


def test_a_page_past_half_the_window_is_ranked_over_every_match(corpus: Corpus) -> None:
    hits = corpus.db.search_messages("alpha", limit=3)
    assert set(ids(hits)) <= set(corpus.old_strong)  # the strongest, wherever they are


def test_without_a_window_the_best_matches_come_first(
    corpus: Corpus, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(search_request, "RANK_WINDOW", 1000)
    assert set(ids(corpus.db.search_messages("alpha", limit=2))) <= set(corpus.old_strong)


def test_a_word_in_fewer_messages_than_the_page_is_found_whole(corpus: Corpus) -> None:
    corpus.db.append_message("s", "user", "omega once")
    assert len(corpus.db.search_messages("omega", limit=2)) == 1
    assert corpus.db.search_messages("nowhere", limit=2) == []


def _walk_rows(plan: dict[str, Any]) -> int:
    """Rows the ``walk`` CTE of a PostgreSQL word search produced, from its EXPLAIN ANALYZE."""
    if plan.get("Subplan Name") == "CTE walk":
        return int(plan["Actual Rows"])
    return sum(_walk_rows(child) for child in plan.get("Plans", []))


@pytest.mark.postgresql
@pytest.mark.parametrize("store_url", ["postgresql"], indirect=True)
def test_postgresql_walks_back_for_a_common_word_and_finds_the_same_window(
    corpus: Corpus, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The window found by walking the primary key back (a common word on a large store) is
    the one the GIN index gives: forced here on a dozen rows, the same hits for every rule."""
    calls = {
        "window": lambda: corpus.db.search_messages("alpha", limit=2),
        "next page": lambda: corpus.db.search_messages("alpha", limit=1, offset=1),
        "filtered": lambda: corpus.db.search_messages("alpha", role_filter=["tool"], limit=2),
        "rare": lambda: corpus.db.search_messages("epsilon 3", limit=2),
    }
    from_index = {name: ids(call()) for name, call in calls.items()}
    monkeypatch.setattr(postgresql_search, "_WALK_MIN_ROWS", 0)
    monkeypatch.setattr(postgresql_search, "_WALK_COST_RATIO", 0.0)
    engine = sa.create_engine(store_url)
    statements: list[tuple[str, Any]] = []
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("ANALYZE messages")  # the walk is chosen from the row count
            conn.commit()
        store_engine = corpus.db._store.engine
        sa.event.listen(store_engine, "before_cursor_execute",
                        lambda *args: statements.append((args[2], args[3])))
        walked = {name: ids(call()) for name, call in calls.items()}
        assert walked == from_index
        window_statement = next(s for s in statements if "CTE" in s[0] or "walk AS" in s[0])
        with engine.connect() as conn:
            plan = conn.exec_driver_sql(
                "EXPLAIN (ANALYZE, FORMAT JSON) " + window_statement[0], window_statement[1]
            ).scalar_one()
        assert _walk_rows(plan[0]["Plan"]) == 4  # the whole window, walked
    finally:
        engine.dispose()
