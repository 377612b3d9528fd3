"""Substring (CJK) search costs time linear in the size of the matching message, and its
snippet is bounded (issue 10, item 8), on both dialects.

FTS5's ``snippet()`` over the trigram table was quadratic in the hits inside one message:
searching 哈哈哈 took 0.32 s on 8k characters of 哈 and 4.7 s on 32k. The check compares the
two sizes in one run, best of several, with a generous ratio plus an absolute slack, so it
is not at the mercy of a busy machine: linear search is ~4x (a few milliseconds), quadratic
is ~15x (seconds).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from sessionstore.api.session_db import SessionDB
from sessionstore.search.hits import (
    SNIPPET_ELLIPSIS,
    SNIPPET_END,
    SNIPPET_START,
    SUBSTRING_SNIPPET_SIDE_CHARS,
)

NEEDLE = "哈哈哈"
MAX_SNIPPET = (
    2 * SUBSTRING_SNIPPET_SIDE_CHARS + len(NEEDLE) + len(SNIPPET_START) + len(SNIPPET_END)
    + 2 * len(SNIPPET_ELLIPSIS)
)  # fmt: skip


@pytest.fixture
def db(store_url: str) -> Iterator[SessionDB]:
    database = SessionDB(url=store_url)
    database.create_session("s", "cli")
    yield database
    database.close()


def best_search_time(db: SessionDB, size: int) -> float:
    db.clear_messages("s")
    db.append_message("s", "user", "开始" + "哈" * size + "结束")
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        (hit,) = db.search_messages(NEEDLE)
        best = min(best, time.perf_counter() - started)
        assert hit["snippet"].startswith(f"开始>>>{NEEDLE}<<<")
        assert len(hit["snippet"]) <= MAX_SNIPPET
    return best


def test_cjk_search_time_is_linear_in_the_message_size(db: SessionDB) -> None:
    small = best_search_time(db, 8_000)
    large = best_search_time(db, 32_000)
    # Quadratic: large ~ 15x small (0.32 s -> 4.7 s). Linear: ~4x, a few milliseconds.
    assert large < 8 * small + 0.05, (small, large)


def test_a_megabyte_message_gives_a_bounded_snippet(db: SessionDB) -> None:
    db.append_message("s", "user", "前言" + "哈" * 1_000_000)
    (hit,) = db.search_messages(NEEDLE)
    assert hit["snippet"] == f"前言>>>{NEEDLE}<<<" + "哈" * SUBSTRING_SNIPPET_SIDE_CHARS + "..."


def best_word_search_time(db: SessionDB, size: int) -> float:
    db.clear_messages("s")
    db.append_message("s", "user", "begin " + "ha " * size + "end")
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        (hit,) = db.search_messages("ha")
        best = min(best, time.perf_counter() - started)
        assert ">>>ha<<<" in hit["snippet"] and hit["snippet"].endswith("...")
        assert len(hit["snippet"].split()) <= 45  # about 40 words, like snippet(..., 40)
    return best


def test_word_search_time_is_linear_in_the_hits_inside_one_message(db: SessionDB) -> None:
    """FTS5's snippet() is quadratic here too: 0.24 s for 8,000 hits, 15.8 s for 64,000."""
    small = best_word_search_time(db, 8_000)
    large = best_word_search_time(db, 32_000)
    assert large < 8 * small + 0.05, (small, large)


def test_long_message_word_snippet_is_a_window_around_the_first_hit(db: SessionDB) -> None:
    words = " ".join(f"w{index}" for index in range(5_000))
    db.append_message("s", "user", f"{words} please Deploy the gateway now {words}")
    (hit,) = db.search_messages("deploy gateway")
    snippet = hit["snippet"]
    assert snippet.startswith("...") and snippet.endswith("...")
    assert ">>>Deploy<<< the >>>gateway<<< now w0 w1" in snippet
    assert 30 <= len(snippet.split()) <= 45
