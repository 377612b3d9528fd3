"""iot 0.22.2's other listing keywords and counts, on SQLite and PostgreSQL: ``sources``
(``source`` wins when both are given; an empty list is no filter), ``session_key`` (one
gateway key's sessions), reset children listed by default (``_reset_from``, or the pre-marker
rule: the parent's key after a reset end), and ``session_count_by_source``. The release is
the oracle in ``tests/hermes/test_real_hermes_fork_files.py``; these pin the rules.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sessionstore.api.session_db import SessionDB


@pytest.fixture
def db(store_url: str) -> Iterator[SessionDB]:
    """Oldest first: ``cli-1`` (cli, key k1), its reset child ``reset`` (marker), ``tg``
    (telegram, key k2) ended by an idle reset, its pre-marker reset child ``legacy`` (same
    key), ``delegate`` (a subagent run of ``tg``), ``blank`` (empty source), ``archived``
    (cli, archived)."""
    now = [0.0]
    database = SessionDB(url=store_url)
    database._repo.clock = lambda: now[0]  # type: ignore[method-assign]

    def session(session_id: str, source: str, **kwargs: Any) -> None:
        now[0] += 1.0
        database.create_session(session_id, source, **kwargs)

    session("cli-1", "cli", session_key="k1")
    database.end_session("cli-1", "session_reset")
    session("reset", "cli", parent_session_id="cli-1", model_config={"_reset_from": "cli-1"})
    session("tg", "telegram", session_key="k2")
    database.end_session("tg", "idle")
    session("legacy", "telegram", parent_session_id="tg", session_key="k2")
    session("delegate", "telegram", parent_session_id="tg",
            model_config={"_delegate_from": "tg"})  # fmt: skip
    session("blank", "")
    session("archived", "cli")
    assert database.set_session_archived("archived", True)
    yield database
    database.close()


def ids(rows: list[dict[str, Any]]) -> list[str]:
    return [row["id"] for row in rows]


def test_reset_children_are_listed_by_default(db: SessionDB) -> None:
    assert ids(db.list_sessions_rich()) == ["blank", "legacy", "tg", "reset", "cli-1"]
    assert db.session_count(exclude_children=True) == 5
    assert db._repo.count_listed_sessions() == 5


def test_sources_and_source(db: SessionDB) -> None:
    assert ids(db.list_sessions_rich(sources=["telegram"])) == ["legacy", "tg"]
    assert ids(db.list_sessions_rich(sources=["telegram", "cli"])) == [
        "legacy", "tg", "reset", "cli-1"
    ]  # fmt: skip
    # source wins, as in iot; an empty list filters nothing.
    assert ids(db.list_sessions_rich(source="cli", sources=["telegram"])) == ["reset", "cli-1"]
    assert len(db.list_sessions_rich(sources=[])) == 5
    assert ids(db.list_sessions_rich(sources=["nowhere"])) == []


def test_session_key(db: SessionDB) -> None:
    assert ids(db.list_sessions_rich(session_key="k2")) == ["legacy", "tg"]
    # The delegate run has no key of its own: a key lists its own sessions only.
    assert ids(db.list_sessions_rich(sources=["telegram"], include_children=True)) == [
        "delegate", "legacy", "tg"
    ]  # fmt: skip
    assert ids(db.list_sessions_rich(session_key="k2", include_children=True)) == ["legacy", "tg"]
    assert ids(db.list_sessions_rich(session_key="k2", order_by_last_active=True)) == [
        "legacy", "tg"
    ]  # fmt: skip
    assert ids(db.list_sessions_rich(session_key="k1", sources=["telegram"])) == []
    assert len(db.list_sessions_rich(session_key="")) == 5  # as iot: an empty key, no filter
    assert db.list_sessions_rich(session_key="nope' OR 1=1 --") == []


def test_count_by_source(db: SessionDB) -> None:
    assert db.session_count_by_source() == {"telegram": 3, "cli": 3}
    assert list(db.session_count_by_source()) == ["cli", "telegram"]  # ties by source
    assert db.session_count_by_source(include_archived=True) == {"cli": 4, "telegram": 3}
    assert db.session_count_by_source(archived_only=True) == {"cli": 1}
    assert db.session_count_by_source(exclude_children=True) == {"cli": 3, "telegram": 2}


@pytest.mark.parametrize("value", [1, "yes", None, ["telegram"]])
def test_count_by_source_flags_are_bools(db: SessionDB, value: Any) -> None:
    with pytest.raises(TypeError):
        db.session_count_by_source(exclude_children=value)


@pytest.mark.parametrize(
    ("keywords", "error"),
    [
        ({"sources": "telegram"}, TypeError),
        ({"sources": [1]}, TypeError),
        ({"sources": ["a\x00b"]}, ValueError),
        ({"sources": 7}, TypeError),
        ({"source": "cli", "sources": [None]}, TypeError),
        ({"session_key": 5}, TypeError),
        ({"session_key": "a\x00b"}, ValueError),
        ({"session_key": "\ud800"}, ValueError),
    ],
)
def test_hostile_keywords_are_typed_errors(
    db: SessionDB, keywords: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        db.list_sessions_rich(**keywords)


def test_async_mirror_takes_them(store_url: str) -> None:
    import asyncio

    from sessionstore.api.async_session_db import AsyncSessionDB

    async def run() -> tuple[list[dict[str, Any]], dict[str, int]]:
        database = AsyncSessionDB(url=store_url)
        try:
            await database.create_session("a", "cli", session_key="k")
            rows = await database.list_sessions_rich(sources=["cli"], session_key="k")
            return rows, await database.session_count_by_source()
        finally:
            await database.close()

    rows, counts = asyncio.run(run())
    assert ids(rows) == ["a"] and counts == {"cli": 1}
