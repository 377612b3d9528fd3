"""iot 0.22.2's ``publish_compression_child`` (issue 29), on SQLite and PostgreSQL: the lease
checked, the parent closed, the child created with its handoff and the parent's concurrent
tail, in one transaction (``sessionstore/sessions/compression.py``). The last test runs the
same publication on the real iot wheel and compares what each file then holds."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from real_hermes import RealHermesFork
from real_hermes_driver import SELECT_STEP, SQL_STEP

from sessionstore.api.session_db import SessionDB
from sessionstore.errors import (
    CompressionPublishError,
    CompressionSessionBusyError,
    ConstraintViolationError,
)

SUMMARY = "[CONTEXT SUMMARY]: the user asked for a deploy; it was started."
Step = tuple[str, list[Any], dict[str, Any]]


def setup_steps() -> list[Step]:
    """Parent ``p`` (routed, pinned, an onboarding run) with three messages; ``h`` holds its
    compression lease."""
    return [
        ("create_session", ["p", "telegram"], {
            "model": "m1", "model_config": {"onboarding_run": "r1", "other": 1},
            "session_key": "agent:main:tg:1", "chat_id": "c1", "chat_type": "dm",
            "thread_id": "t1", "cwd": "/work"}),
        ("append_message", ["p", "user", "deploy it"], {"timestamp": 1_900_000_001.0}),
        ("append_message", ["p", "assistant", "starting"], {"timestamp": 1_900_000_002.0}),
        ("append_message", ["p", "user", "and the tail"], {"timestamp": 1_900_000_003.0}),
        ("set_session_pinned", ["p", True], {}),
        ("try_acquire_compression_lock", ["p", "h"], {"ttl_seconds": 300.0}),
    ]  # fmt: skip


def publish_step(watermark: int, **extra: Any) -> Step:
    return ("publish_compression_child", [], {
        "parent_session_id": "p", "child_session_id": "c", "source": "telegram",
        "messages": [{"role": "user", "content": SUMMARY},
                     {"role": "assistant", "content": "starting"}],
        "model": "m2", "model_config": {"k": "v"}, "system_prompt": "You are Hermes.",
        "compression_lock_holder": "h", "watermark": watermark, **extra})  # fmt: skip


CHILD = ("SELECT id, source, model, model_config, system_prompt, parent_session_id, "
         "session_key, chat_id, chat_type, thread_id, cwd, pinned, archived, message_count, "
         "tool_call_count, ended_at IS NULL AS open, end_reason FROM sessions ORDER BY id")
ROWS = ("SELECT session_id, role, content, timestamp, active FROM messages "
        "ORDER BY session_id, id")
UIDS = ("SELECT COUNT(DISTINCT message_uid) AS uids, COUNT(*) AS total FROM messages")
PROMPT = ("SELECT p.prompt FROM sessions s JOIN system_prompts p "
          "ON p.hash = s.system_prompt_hash WHERE s.id = 'c'")


def _run(conn: sa.Connection, name: str, args: list[Any]) -> Any:
    result = conn.execute(sa.text(args[0]))
    return [dict(row._mapping) for row in result] if name == SELECT_STEP else None


def play(db: SessionDB, steps: list[Step]) -> list[Any]:
    results: list[Any] = []
    for name, args, kwargs in steps:
        if name in (SQL_STEP, SELECT_STEP):
            results.append(db.store.write(lambda conn, n=name, a=args: _run(conn, n, a)))
        else:
            results.append(getattr(db, name)(*args, **kwargs))
    return results


def message_id(db: SessionDB, content: str) -> int:
    rows = play(db, [(SELECT_STEP, [f"SELECT id FROM messages WHERE content = '{content}'"], {})])
    return int(rows[0][0]["id"])


@pytest.fixture
def db(store_url: str) -> Iterator[SessionDB]:
    database = SessionDB(url=store_url)
    play(database, setup_steps())
    yield database
    database.close()


def state(db: SessionDB) -> list[Any]:
    return play(db, [(SELECT_STEP, [query], {}) for query in (CHILD, ROWS, UIDS, PROMPT)])


def test_a_publication_closes_the_parent_and_publishes_the_child(db: SessionDB) -> None:
    play(db, [publish_step(message_id(db, "starting"))])
    sessions, rows, uids, prompt = state(db)
    parent, child = {row["id"]: row for row in sessions}["p"], sessions[0]
    assert not parent["open"] and parent["end_reason"] == "compression"
    assert child["parent_session_id"] == "p" and child["open"]
    assert (child["session_key"], child["chat_id"], child["thread_id"], child["cwd"]) == (
        "agent:main:tg:1", "c1", "t1", "/work")
    assert child["pinned"] == 1 and child["system_prompt"] is None
    assert child["model_config"] == '{"onboarding_run": "r1", "k": "v"}'
    assert prompt == [{"prompt": "You are Hermes."}]
    assert child["message_count"] == 3
    child_rows = [(r["role"], r["content"], r["timestamp"]) for r in rows if r["session_id"] == "c"]
    assert child_rows[0][:2] == ("user", SUMMARY)
    # The carried assistant row kept its original timestamp; the tail was cloned after.
    assert child_rows[1:] == [("assistant", "starting", 1_900_000_002.0),
                              ("user", "and the tail", 1_900_000_003.0)]  # fmt: skip
    assert len([r for r in rows if r["session_id"] == "p"]) == 3  # originals kept
    assert uids == [{"uids": 5, "total": 6}]  # the clone shares its original's uid
    assert db.get_compression_tip("p") == "c"


def test_without_the_lease_nothing_is_written(db: SessionDB) -> None:
    before = state(db)
    with pytest.raises(CompressionSessionBusyError):
        play(db, [publish_step(0, compression_lock_holder="someone-else")])
    with pytest.raises(CompressionSessionBusyError):
        play(db, [publish_step(0, compression_lock_holder=None)])
    db.release_compression_lock("p", "h")
    with pytest.raises(RuntimeError):  # iot's callers catch RuntimeError
        play(db, [publish_step(0)])
    assert state(db) == before


def test_an_expired_lease_is_refreshed_when_asked(db: SessionDB) -> None:
    play(db, [(SQL_STEP, ["UPDATE compression_locks SET expires_at = 1.0"], {})])
    with pytest.raises(CompressionSessionBusyError):
        play(db, [publish_step(0)])
    play(db, [publish_step(0, require_lease_refresh=True)])
    assert db.get_compression_tip("p") == "c"


def test_an_automatic_end_is_cleared_and_a_deliberate_one_refused(db: SessionDB) -> None:
    db.end_session("p", "user_exit")
    with pytest.raises(CompressionPublishError, match="already ended"):
        play(db, [publish_step(0)])
    play(db, [(SQL_STEP, ["UPDATE sessions SET end_reason = 'tui_shutdown'"], {})])
    play(db, [publish_step(0)])
    assert db.get_session("p")["end_reason"] == "compression"  # type: ignore[index]


def test_bad_publications_are_refused_untouched(db: SessionDB) -> None:
    before = state(db)
    with pytest.raises(CompressionPublishError, match="empty"):
        play(db, [publish_step(0, messages=[])])
    with pytest.raises(CompressionPublishError, match="not found"):
        play(db, [publish_step(0, parent_session_id="nobody", require_compression_lease=False)])
    with pytest.raises(ConstraintViolationError):
        play(db, [publish_step(0, child_session_id="p")])
    with pytest.raises(TypeError):
        play(db, [publish_step(0, messages=["not a dict"])])
    with pytest.raises(TypeError):
        play(db, [publish_step(True)])  # type: ignore[arg-type]
    assert state(db) == before


def test_the_ceiling_bounds_the_cloned_tail(db: SessionDB) -> None:
    first = message_id(db, "deploy it")
    play(db, [publish_step(first, watermark_ceiling=message_id(db, "starting"))])
    rows = [r["content"] for r in state(db)[1] if r["session_id"] == "c"]
    assert rows == [SUMMARY, "starting", "starting"]


def test_a_swept_parent_is_live_again(db: SessionDB) -> None:
    play(db, [(SQL_STEP, ["UPDATE sessions SET archived = 1, auto_archived = 1"], {})])
    play(db, [publish_step(0)])
    assert {row["archived"] for row in state(db)[0]} == {0}


@pytest.mark.slow  # the real iot runs in a side interpreter
def test_the_publication_matches_iot(tmp_path: Any, db: SessionDB) -> None:
    hermes = RealHermesFork("iot-0.22.2", tmp_path / "home")
    reads = [(SELECT_STEP, [query], {}) for query in (CHILD, ROWS, UIDS, PROMPT)]
    theirs = hermes.calls(tmp_path / "publish.db", [*setup_steps(), publish_step(2), *reads])
    mine = play(db, [publish_step(message_id(db, "starting")), *reads])

    def comparable(answer: list[Any]) -> list[Any]:
        sessions, rows, uids, prompt = answer[-4:]
        child_rows = [(r["role"], r["content"]) for r in rows if r["session_id"] == "c"]
        carried = [r["timestamp"] for r in rows if r["session_id"] == "c"][1:]
        return [[{**row, "open": bool(row["open"])} for row in sessions],
                child_rows, carried, uids, prompt]  # fmt: skip

    assert comparable(mine) == comparable(theirs)
