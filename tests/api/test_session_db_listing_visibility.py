"""Which sessions a listing shows, by iot 0.22.2's keywords (schema v26+), on SQLite and
PostgreSQL: hidden sessions are left out unless ``include_hidden`` (``archived_only`` shows
them: it recovers what every other listing leaves out), ``include_subagents`` adds the
delegate runs, ``include_pinned`` adds the pins a page lacks, archived ones included. The
counts: ``session_count`` counts hidden sessions as iot's does, ``count_listed_sessions``
counts what the listing pages through. The release itself is the oracle in
``tests/hermes/test_real_hermes_fork_files.py``; these pin the rules on both dialects.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sessionstore.api.session_db import SessionDB
from sessionstore.sessions.repository import SessionRepository

KEYWORDS = ("include_hidden", "include_pinned", "include_subagents")
NOT_BOOLS: list[Any] = [1, 0, "yes", "", None, 1.0, [True]]


@pytest.fixture
def db(store_url: str) -> Iterator[SessionDB]:
    """Sessions started a second apart, oldest first:

    ``hidden-archived`` (hidden and archived), ``pinned-archived`` (pinned and archived),
    ``old``, its delegate run ``delegate``, ``hidden``, the compressed ``compressed`` (pinned,
    so its continuation ``tip`` is too) and ``newest``."""
    now = [0.0]
    database = SessionDB(url=store_url)
    database._repo.clock = lambda: now[0]  # type: ignore[method-assign]

    def session(session_id: str, **kwargs: Any) -> None:
        now[0] += 1.0
        database.create_session(session_id, "cli", **kwargs)

    session("hidden-archived")
    session("pinned-archived")
    session("old")
    session("delegate", parent_session_id="old", model_config={"_delegate_from": "old"})
    session("hidden")
    session("compressed")
    database.end_session("compressed", "compression")
    session("tip", parent_session_id="compressed")
    session("newest")
    assert database.set_session_hidden("hidden-archived", True)
    assert database.set_session_archived("hidden-archived", True)
    assert database.set_session_pinned("pinned-archived", True)
    assert database.set_session_archived("pinned-archived", True)
    assert database.set_session_hidden("hidden", True)
    assert database.set_session_pinned("compressed", True)
    yield database
    database.close()


def ids(rows: list[dict[str, Any]]) -> list[str]:
    return [row["id"] for row in rows]


def test_hidden_sessions_are_left_out_unless_asked_for(db: SessionDB) -> None:
    assert ids(db.list_sessions_rich()) == ["newest", "tip", "old"]
    assert ids(db.list_sessions_rich(include_hidden=True)) == ["newest", "tip", "hidden", "old"]
    # The archived view recovers a hidden, archived session without being asked.
    assert ids(db.list_sessions_rich(archived_only=True)) == ["pinned-archived", "hidden-archived"]
    assert ids(db.list_sessions_rich(include_archived=True)) == ["newest", "tip", "old",
                                                                 "pinned-archived"]  # fmt: skip
    assert ids(db.list_sessions_rich(include_children=True, include_hidden=True,
                                     include_archived=True)) == [
        "newest", "tip", "compressed", "hidden", "delegate", "old", "pinned-archived",
        "hidden-archived"]  # fmt: skip
    # Hidden is a lineage flag: a hidden conversation goes whole, its root and its tip.
    assert db.set_session_hidden("tip", True)
    assert ids(db.list_sessions_rich()) == ["newest", "old"]
    assert ids(db.list_sessions_rich(order_by_last_active=True)) == ["newest", "old"]
    # search_sessions_by_id asks the listing, as iot's does: hidden sessions are not found.
    assert db.search_sessions_by_id("hidden") == []
    assert db.search_sessions_by_id("newest")[0]["id"] == "newest"


def test_subagent_runs_are_listed_only_when_asked_for(db: SessionDB) -> None:
    assert ids(db.list_sessions_rich(include_subagents=True)) == ["newest", "tip", "delegate",
                                                                  "old"]  # fmt: skip
    # With every child listed already, the keyword adds nothing.
    assert ids(db.list_sessions_rich(include_children=True, include_subagents=True)) == ids(
        db.list_sessions_rich(include_children=True))  # fmt: skip
    assert "delegate" in ids(db.list_sessions_rich(include_subagents=True,
                                                   order_by_last_active=True))  # fmt: skip


def test_pins_the_page_lacks_come_after_it(db: SessionDB) -> None:
    # The pinned compressed conversation is on the page: the archived pin is added after it.
    assert ids(db.list_sessions_rich(include_pinned=True)) == ["newest", "tip", "old",
                                                               "pinned-archived"]  # fmt: skip
    page = db.list_sessions_rich(limit=1, include_pinned=True)
    assert ids(page) == ["newest", "tip", "pinned-archived"]
    assert page[1]["_lineage_root_id"] == "compressed"  # projected as the page's rows are
    assert ids(db.list_sessions_rich(limit=0, include_pinned=True)) == ["tip", "pinned-archived"]
    # The pins obey the other filters: not another source's, not a hidden one.
    assert ids(db.list_sessions_rich(source="telegram", include_pinned=True)) == []
    assert db.set_session_hidden("pinned-archived", True)
    assert ids(db.list_sessions_rich(limit=1, include_pinned=True)) == ["newest", "tip"]
    assert ids(db.list_sessions_rich(limit=1, include_pinned=True, include_hidden=True)) == [
        "newest", "tip", "pinned-archived"]  # fmt: skip
    # Not narrowed by a search: iot's back-fill reads the filters alone.
    found = db.list_sessions_rich(order_by_last_active=True, search_query="newest",
                                  include_pinned=True)  # fmt: skip
    assert ids(found) == ["newest", "tip"]
    compact = db.list_sessions_rich(limit=0, include_pinned=True, compact_rows=True)
    assert compact and all("system_prompt" not in row for row in compact)


def test_the_counts(db: SessionDB) -> None:
    repository = SessionRepository(db.store)
    assert db.session_count() == 6  # iot's count has no hidden rule
    assert db.session_count(exclude_children=True) == 4
    assert db.session_count(exclude_children=True, include_subagents=True) == 5
    assert repository.count_listed_sessions() == len(db.list_sessions_rich()) == 3
    assert repository.count_listed_sessions(include_hidden=True) == 4
    assert repository.count_listed_sessions(include_subagents=True) == 4
    assert repository.count_listed_sessions(archived_only=True) == 2


def test_the_typed_listing_takes_the_same_keywords(db: SessionDB) -> None:
    repository = SessionRepository(db.store)
    listed = repository.list_sessions_rich(include_hidden=True, include_subagents=True,
                                           include_pinned=True, limit=2)  # fmt: skip
    assert [listing.session.id for listing in listed] == ["newest", "tip", "pinned-archived"]
    assert listed[1].lineage_root_id == "compressed"
    # v6's positional parameters are where they were.
    assert ids(db.list_sessions_rich("cli", None, 2, 1)) == ["tip", "old"]


@pytest.mark.parametrize("keyword", KEYWORDS)
@pytest.mark.parametrize("value", NOT_BOOLS, ids=repr)
def test_a_flag_that_is_not_a_bool_is_a_type_error(db: SessionDB, keyword: str, value: Any) -> None:
    repository = SessionRepository(db.store)
    with pytest.raises(TypeError, match=keyword):
        db.list_sessions_rich(**{keyword: value})
    with pytest.raises(TypeError, match=keyword):
        db.list_sessions_rich(order_by_last_active=True, id_query="x", **{keyword: value})
    with pytest.raises(TypeError, match=keyword):
        repository.list_sessions_rich(**{keyword: value})
    if keyword != "include_pinned":
        with pytest.raises(TypeError, match=keyword):
            repository.count_listed_sessions(**{keyword: value})
    if keyword == "include_subagents":
        with pytest.raises(TypeError, match=keyword):
            db.session_count(include_subagents=value)
