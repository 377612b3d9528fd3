"""What a prune keeps, and iot 0.22.2's counts of what it takes, on SQLite and PostgreSQL
(issue 29, item 3): every prune, dry run and bulk archive spares pinned conversations (the
sessions carrying a pin and the unpinned continuations a pinned segment covers) unless
``include_pinned=True``; the automatic prune also spares sessions under a live turn or
compression lease. ``count_prune_matches`` and ``count_open_prune_matches`` count with the very
condition the prune deletes by (``DeletionPart._selection``). The release is the oracle in
``tests/hermes/test_real_hermes_idle_archive.py``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_sql import run

from sessionstore.api.session_db import SessionDB

DAY = 86_400.0
PINNED = {"pinned", "pin-root", "pin-tip"}


def ids(db: SessionDB) -> set[str]:
    return {row["id"] for row in run(db, "SELECT id FROM sessions")}


def session(db: SessionDB, session_id: str, days_ago: float, *, end: str | None = "done",
            source: str = "cli", **kwargs: Any) -> None:  # fmt: skip
    db.create_session(session_id, source, **kwargs)
    if end is not None:
        db.end_session(session_id, end)
    run(db, "UPDATE sessions SET started_at = :t WHERE id = :id",
        t=time.time() - days_ago * DAY, id=session_id)  # fmt: skip


@pytest.fixture
def db(store_url: str) -> Iterator[SessionDB]:
    """Ended sessions 100 days old (``old``, ``old-tg`` from telegram, the pinned ones, a
    compression chain ``chain-root`` -> ``chain-tip``), ``open`` (100 days, never ended),
    ``open-pinned`` and ``recent`` (a day old)."""
    database = SessionDB(url=store_url)
    session(database, "old", 100)
    session(database, "old-tg", 100, source="telegram")
    session(database, "pinned", 100)
    session(database, "pin-root", 100, end="compression")
    session(database, "pin-tip", 100, parent_session_id="pin-root")
    assert database.set_session_pinned("pin-root", True)
    run(database, "UPDATE sessions SET pinned = 0 WHERE id = 'pin-tip'")  # written unpinned
    assert database.set_session_pinned("pinned", True)
    session(database, "chain-root", 100, end="compression")
    session(database, "chain-tip", 100, parent_session_id="chain-root")
    session(database, "open", 100, end=None)
    session(database, "open-pinned", 100, end=None)
    assert database.set_session_pinned("open-pinned", True)
    session(database, "recent", 1)
    yield database
    database.close()


OLD_ENDED = {"old", "old-tg", "chain-root", "chain-tip"}


def test_a_prune_keeps_pinned_conversations_unless_asked(db: SessionDB) -> None:
    assert db.count_prune_matches(30) == 4
    assert {row["id"] for row in db.list_prune_candidates(30)} == OLD_ENDED
    assert db.count_prune_matches(30, pinned_only=True) == 2  # the pins, not pin-tip
    assert db.count_prune_matches(30, include_pinned=True) == 7
    assert db.count_open_prune_matches(30) == 1  # open; open-pinned is a pin
    assert db.count_open_prune_matches(30, include_pinned=True) == 2
    assert db.prune_sessions(30) == 4
    assert ids(db) == PINNED | {"open", "open-pinned", "recent"}
    assert db.prune_sessions(30, include_pinned=True) == 3
    assert ids(db) == {"open", "open-pinned", "recent"}


def test_every_prune_path_and_the_bulk_archive_keep_pins(db: SessionDB) -> None:
    cutoff = time.time() - 30 * DAY
    assert {record.id for record in db.repository.prunable_sessions(30)} == OLD_ENDED
    assert {record.id for record in db.repository.prunable_sessions_before(cutoff)} == OLD_ENDED
    assert db.archive_sessions(30) == 3  # chain-root is matched through its tip
    archived = {row["id"] for row in run(db, "SELECT id FROM sessions WHERE archived = 1")}
    assert archived == OLD_ENDED
    assert db.prune_sessions_before(cutoff) == 4
    assert ids(db) == PINNED | {"open", "open-pinned", "recent"}
    assert db.set_session_pinned("pin-root", False)  # unpinned: the whole lineage goes
    assert db.repository.prune_sessions(30) == 2
    assert ids(db) == {"pinned", "open", "open-pinned", "recent"}


FILTERS: list[dict[str, Any]] = [
    {}, {"source": "telegram"}, {"source": ["cli", "telegram"]}, {"end_reason": "compression"},
    {"archived": False}, {"max_messages": 0}, {"title_like": "x"}, {"include_pinned": True},
    {"started_after": 0.0}, {"started_before": time.time() + DAY},
]  # fmt: skip


def test_the_counts_and_the_prune_share_one_condition(db: SessionDB) -> None:
    for filters in FILTERS:
        listed = db.list_prune_candidates(30, **filters)
        assert db.count_prune_matches(30, **filters) == len(listed), filters
    assert db.count_prune_matches(None) == 5  # no age: recent too
    expected = db.count_prune_matches(30, source="cli")
    assert expected == 3 and db.prune_sessions(30, source="cli") == expected


@pytest.mark.slow
@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # reads only
@given(days=st.floats(min_value=0, max_value=1e5), source=st.sampled_from([None, "cli", "tg"]),
       pinned=st.booleans(), archived=st.sampled_from([None, True, False]))  # fmt: skip
def test_a_count_is_the_length_of_the_dry_run(
    db: SessionDB, days: float, source: str | None, pinned: bool, archived: bool | None
) -> None:
    filters = {"include_pinned": pinned, "archived": archived}
    listed = db.list_prune_candidates(days, source, **filters)
    assert db.count_prune_matches(days, source, **filters) == len(listed)


BAD: list[tuple[dict[str, Any], type[Exception]]] = [
    ({"older_than_days": math.nan}, ValueError),
    ({"older_than_days": -1}, ValueError),
    ({"older_than_days": "30"}, TypeError),
    ({"older_than_days": True}, TypeError),
    ({"pinned_only": 1}, TypeError),
    ({"include_pinned": "yes"}, TypeError),
    ({"no_such_filter": 1}, TypeError),
    ({"source": 7}, TypeError),
]


def test_hostile_arguments_are_typed_errors_and_nothing_goes(db: SessionDB) -> None:
    before = ids(db)
    for kwargs, error in BAD:
        with pytest.raises(error):
            db.count_prune_matches(**kwargs)
        if "pinned_only" not in kwargs:
            with pytest.raises(error):
                db.count_open_prune_matches(**kwargs)
            with pytest.raises(error):
                db.prune_sessions(**kwargs)
    with pytest.raises(TypeError):
        db.prune_sessions(30, exclude_active_write_guards="yes")  # type: ignore[arg-type]
    assert ids(db) == before
    assert db.count_prune_matches(1e6) == 0  # an age before any session: none


def test_the_automatic_prune_keeps_sessions_mid_turn_or_mid_compression(db: SessionDB) -> None:
    assert db.try_acquire_session_turn_lease("chain-tip", "turn", ttl_seconds=600)
    assert db.try_acquire_compression_lock("old-tg", "compressor", ttl_seconds=600)
    # The lease is the conversation's: chain-root shares chain-tip's.
    result = db.maybe_auto_prune_and_vacuum(retention_days=30, vacuum=False)
    assert result["pruned"] == 1 and "error" not in result
    assert ids(db) == PINNED | {"old-tg", "chain-root", "chain-tip", "open", "open-pinned",
                                "recent"}  # fmt: skip
    # An expired lease keeps nothing; a deliberate prune does not ask (iot's rule).
    db.repository.clock = lambda: time.time() + 3600  # type: ignore[method-assign]
    assert db.prune_sessions(30, exclude_active_write_guards=True) == 3
    db.repository.clock = time.time  # type: ignore[method-assign]
    assert ids(db) == PINNED | {"open", "open-pinned", "recent"}


def test_text_filters_are_literal_so_a_wildcard_never_selects_everything(db: SessionDB) -> None:
    """``%`` and ``_`` in a ``*_like`` filter are characters (iot 0.22.2 escapes them): a bare
    ``%`` as a LIKE pattern selected every ended session for deletion."""
    for session_id, title, model in (("pct", "100% coverage run", "vendor/model_mini"),
                                     ("plain", "coverage run", "vendor/model-mini")):  # fmt: skip
        session(db, session_id, 100, model=model)
        db.set_session_title(session_id, title)
    assert {r["id"] for r in db.list_prune_candidates(title_like="%")} == {"pct"}
    assert {r["id"] for r in db.list_prune_candidates(title_like="_")} == set()
    assert {r["id"] for r in db.list_prune_candidates(model_like="model_mini")} == {"pct"}
    assert db.prune_sessions(title_like="%") == 1
    assert "plain" in ids(db) and "pct" not in ids(db) and ids(db) >= OLD_ENDED
