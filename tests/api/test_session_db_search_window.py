"""iot 0.22.2's ``search_messages(after_ts=..., before_ts=...)`` on SQLite and PostgreSQL
(issue 29, item 3): only hits of sessions started in ``[after_ts, before_ts)`` (whole
seconds, as iot binds them), on every route (word search best first, by time, deep pages;
substring search), inside the query, so a page is never filled by hits outside the window.
The release is the oracle in ``tests/hermes/test_real_iot_display_history.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from store_sql import run

from sessionstore.api.session_db import SessionDB

STARTS = {"old": 1000.0, "edge": 2000.0, "mid": 2500.5, "new": 3000.0}


@pytest.fixture
def db(store_url: str) -> Iterator[SessionDB]:
    database = SessionDB(url=store_url)
    for session_id, started in STARTS.items():
        database.create_session(session_id, "cli")
        run(database, "UPDATE sessions SET started_at = :at WHERE id = :id",
            at=started, id=session_id)  # fmt: skip
        for turn in range(3):
            database.append_message(session_id, "user", f"needle {turn} 搜索引擎 in {session_id}")
    yield database
    database.close()


def sessions_of(hits: list[dict[str, Any]]) -> set[str]:
    return {hit["session_id"] for hit in hits}


@pytest.mark.parametrize("query", ["needle", "搜索"])
@pytest.mark.parametrize("sort", [None, "newest", "oldest"])
def test_only_sessions_started_in_the_window_are_searched(
    db: SessionDB, query: str, sort: str | None
) -> None:
    def found(**window: Any) -> set[str]:
        return sessions_of(db.search_messages(query, sort=sort, limit=50, **window))

    assert found() == set(STARTS)
    assert found(after_ts=2000) == {"edge", "mid", "new"}  # inclusive
    assert found(before_ts=2000) == {"old"}  # exclusive
    assert found(after_ts=2000, before_ts=3000) == {"edge", "mid"}
    assert found(after_ts=2500.9, before_ts=2500.9) == set()  # 2500 <= started < 2500: none
    assert found(after_ts=2500.9) == {"mid", "new"}  # cut to 2500, as iot's int()
    assert found(after_ts=-(10**30), before_ts=10**30) == set(STARTS)
    assert found(after_ts=-(10**400), before_ts=10**400) == set(STARTS)  # past any float
    assert found(after_ts=4000) == set()


def test_the_window_is_applied_before_the_page(db: SessionDB) -> None:
    page = db.search_messages("needle", limit=3, after_ts=3000)
    assert len(page) == 3 and sessions_of(page) == {"new"}
    # Past the ranking window's half, the page's ids are chosen first (another route).
    deep = db.search_messages("needle", limit=2500, offset=1, after_ts=2000)
    assert len(deep) == 8 and sessions_of(deep) == {"edge", "mid", "new"}
    paged = [db.search_messages("needle", limit=1, offset=n, before_ts=2000) for n in range(4)]
    assert [sessions_of(one) for one in paged] == [{"old"}, {"old"}, {"old"}, set()]
    fields = db.search_messages("needle", fields=["session_id"], after_ts=3000)
    assert fields and all(hit == {"session_id": "new"} for hit in fields)


@pytest.mark.parametrize(
    ("bound", "error"),
    [("2000", TypeError), (True, TypeError), ([1], TypeError), (float("nan"), ValueError),
     (float("inf"), ValueError)],
)  # fmt: skip
def test_a_bound_that_is_no_number_is_refused(
    db: SessionDB, bound: Any, error: type[Exception]
) -> None:
    with pytest.raises(error):
        db.search_messages("needle", after_ts=bound)
    with pytest.raises(error):
        db.search_messages("needle", before_ts=bound)
