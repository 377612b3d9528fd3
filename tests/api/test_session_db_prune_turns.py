"""A large prune deletes in turns (``sessions.deletion.PRUNE_TURN_MESSAGES`` messages a write
transaction), on SQLite and PostgreSQL: the store's other writers go on between turns, every
turn selects again by the same rule (a session that stopped qualifying is spared, the message
that revived it kept), and the prune reports every session it deleted.

One transaction held every other writer off (SQLite) for the whole prune: ~2.7 s per 100,000
messages, so a writer's 20 s budget ran out, its message lost, beside the first prune of a
year of history. Each test watches the store from another writer between the prune's write
transactions (a wrapper around the store's ``write``, called after each returns).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from store_sql import run
from write_gaps import gaps_between_writes

from sessionstore import RetryPolicy, SessionDB
from sessionstore.sessions import deletion
from sessionstore.storage.write_turns import MARGIN_S

DAY = 86_400.0
SESSIONS = 12
MESSAGES = 20
QUICK = RetryPolicy(max_attempts=50, budget_s=1.0)


def old_sessions(db: SessionDB) -> list[str]:
    """``SESSIONS`` ended sessions of ``MESSAGES`` messages each, idle for 100 days."""
    made = []
    for index in range(SESSIONS):
        session_id = f"old-{index:02d}"
        db.create_session(session_id, "cli")
        db.append_messages(session_id, [{"role": "user", "content": f"m{n}"}
                                        for n in range(MESSAGES)])  # fmt: skip
        db.end_session(session_id, "done")
        made.append(session_id)
    long_ago = time.time() - 100 * DAY
    run(db, "UPDATE sessions SET started_at = :t, ended_at = :t, last_activity_at = :t",
        t=long_ago)  # fmt: skip
    run(db, "UPDATE messages SET timestamp = :t", t=long_ago)
    return made


def between_turns(
    monkeypatch: pytest.MonkeyPatch, db: SessionDB, act: Callable[[int], None]
) -> list[int]:
    """Calls ``act(n)`` after the prune's n-th write transaction returns; the turns seen."""
    turns: list[int] = []
    write = db.store.write

    def watched(work: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        result = write(work, *args, **kwargs)
        turns.append(len(turns) + 1)
        act(turns[-1])
        return result

    monkeypatch.setattr(db.store, "write", watched)
    return turns


@pytest.mark.parametrize("how", ["prune_sessions", "prune_sessions_before"])
def test_a_prune_in_turns_lets_another_writer_through_and_deletes_everything(
    store_url: str, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    monkeypatch.setattr(deletion, "PRUNE_TURN_MESSAGES", 2 * MESSAGES)  # two sessions a turn
    with SessionDB(url=store_url) as db, SessionDB(url=store_url, retry=QUICK) as other:
        doomed = old_sessions(db)
        other.create_session("live", "telegram")
        written: list[int] = []
        turns = between_turns(
            monkeypatch, db,
            lambda turn: written.append(other.append_message("live", "user", f"turn {turn}")),
        )  # fmt: skip
        if how == "prune_sessions":
            pruned = db.prune_sessions(older_than_days=90)
        else:
            pruned = db.prune_sessions_before(time.time() - 90 * DAY)
        assert pruned == SESSIONS
        assert len(turns) >= SESSIONS // 2  # before: one transaction, one turn
        assert len(written) == len(turns)  # every append between turns went through
        assert {row["id"] for row in run(db, "SELECT id FROM sessions")} == {"live"}
        assert db.message_count("live") == len(written)
        assert not set(doomed) & {row["session_id"] for row in run(
            db, "SELECT DISTINCT session_id FROM messages")}  # fmt: skip


def test_a_session_revived_between_turns_is_spared_with_its_new_message(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the first and second turn another writer speaks in the last doomed session (the
    prune deletes in id order): the next turn, selecting again, finds it active and keeps it.
    In one transaction that writer waited for the prune and then found its session gone."""
    monkeypatch.setattr(deletion, "PRUNE_TURN_MESSAGES", 2 * MESSAGES)
    with SessionDB(url=store_url) as db, SessionDB(url=store_url, retry=QUICK) as other:
        doomed = old_sessions(db)
        revived = doomed[-1]

        def revive(turn: int) -> None:
            if turn == 1:
                other.append_message(revived, "user", "back again")

        between_turns(monkeypatch, db, revive)
        pruned = db.prune_sessions(older_than_days=90)
        assert pruned == SESSIONS - 1
        assert {row["id"] for row in run(db, "SELECT id FROM sessions")} == {revived}
        assert [m["content"] for m in db.get_messages(revived)][-1] == "back again"
        assert db.message_count(revived) == MESSAGES + 1


def test_a_turn_takes_whole_sessions_and_at_least_one(store_url: str) -> None:
    """A session larger than a turn goes alone, whole; the turns' sizes follow the counters."""
    with SessionDB(url=store_url) as db:
        doomed = old_sessions(db)

        def sizes() -> list[list[str]]:
            turns, left = [], sorted(doomed)
            while left:
                taken = db.store.read(
                    lambda conn, left=left: deletion._one_turn(conn, left)  # type: ignore[misc]
                )
                turns.append(taken)
                left = left[len(taken):]
            return turns

        original = deletion.PRUNE_TURN_MESSAGES
        try:
            deletion.PRUNE_TURN_MESSAGES = 1
            assert sizes() == [[session] for session in sorted(doomed)]
            deletion.PRUNE_TURN_MESSAGES = 3 * MESSAGES
            assert [len(turn) for turn in sizes()] == [3, 3, 3, 3]
        finally:
            deletion.PRUNE_TURN_MESSAGES = original


def test_a_prune_in_turns_stands_aside_between_them_for_writers_outside_the_queue(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hermes waits for SQLite's lock in its busy handler, trying up to 100 ms apart: a turn
    begun as soon as the last one committed left it no way in (``storage.write_turns``)."""
    monkeypatch.setattr(deletion, "PRUNE_TURN_MESSAGES", 2 * MESSAGES)  # two sessions a turn
    with SessionDB(url=store_url) as db:
        doomed = old_sessions(db)
        gaps = gaps_between_writes(monkeypatch, db.store)
        assert db.prune_sessions(older_than_days=90) == len(doomed)
        assert len(gaps) == SESSIONS // 2 - 1
        poll = db.store.dialect.foreign_writer_poll_s
        if poll is not None:  # PostgreSQL's lock waiters queue: nothing pauses there
            assert min(gaps) >= poll + MARGIN_S


def test_a_prune_failing_part_way_leaves_no_file_of_a_session_it_deleted(
    store_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The transcript files of each turn's sessions go as soon as that turn commits. They went
    when the whole prune returned: one failing in a later turn left the files of the sessions
    its earlier turns deleted, and no later prune found those sessions to remove them."""
    monkeypatch.setattr(deletion, "PRUNE_TURN_MESSAGES", 2 * MESSAGES)  # two sessions a turn
    sessions_dir = tmp_path / "sessions"
    sessions_dir.mkdir()
    with SessionDB(url=store_url) as db:
        doomed = old_sessions(db)
        for session_id in doomed:
            (sessions_dir / f"{session_id}.jsonl").write_text("{}\n")
            (sessions_dir / f"request_dump_{session_id}_1.json").write_text("{}")
        write, calls = db.store.write, []

        def third_fails(work: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            calls.append(work)
            if len(calls) == 3:
                raise RuntimeError("the disk went away")
            return write(work, *args, **kwargs)

        monkeypatch.setattr(db.store, "write", third_fails)
        with pytest.raises(RuntimeError, match="went away"):
            db.prune_sessions(older_than_days=90, sessions_dir=sessions_dir)
        monkeypatch.undo()
        kept = {s for s in doomed if db.get_session(s) is not None}
        assert len(kept) == SESSIONS - 4  # two turns of two sessions committed
        files = {path.name for path in sessions_dir.iterdir()}
        assert files == {f"{s}.jsonl" for s in kept} | {f"request_dump_{s}_1.json" for s in kept}
        # The prune run again finishes, files included.
        assert db.prune_sessions(older_than_days=90, sessions_dir=sessions_dir) == len(kept)
        assert list(sessions_dir.iterdir()) == []
