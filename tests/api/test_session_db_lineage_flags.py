"""Pinned, hidden and read are set on iot 0.22.2's line (issue 29): the session, its
ancestors up through parents that ended ``'compression'``, and every child below one that did,
forks included (``_set_lineage_column``; ours: ``lineage.line_through``). On SQLite and
PostgreSQL; iot's own answers: ``tests/hermes/test_real_iot_lineage_flags.py``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from sessionstore.api.session_db import SessionDB


def run(db: SessionDB, sql: str) -> list[dict[str, Any]]:
    def work(conn: sa.Connection) -> list[dict[str, Any]]:
        result = conn.execute(sa.text(sql))
        return [dict(row) for row in result.mappings()] if result.returns_rows else []

    return db.store.write(work)


def flagged(db: SessionDB, column: str) -> list[str]:
    return [row["id"] for row in run(db, f"SELECT id FROM sessions WHERE {column} ORDER BY id")]


def lineage(db: SessionDB) -> None:
    """``root`` (ended compression) -> ``mid`` (ended compression) -> ``tip``; ``branch`` and
    ``kid`` (a delegate run) under ``root``, ``other`` apart."""
    for session_id, parent, config in (
        ("root", None, None), ("mid", "root", None), ("tip", "mid", None),
        ("branch", "root", {"_branched_from": "root"}), ("kid", "root", {"_delegate_from": "root"}),
        ("other", None, None),
    ):  # fmt: skip
        db.create_session(session_id, "cli", parent_session_id=parent, model_config=config)
    run(db, "UPDATE sessions SET end_reason = 'compression', ended_at = started_at "
            "WHERE id IN ('root', 'mid')")  # fmt: skip


@pytest.fixture
def db(store_url: str) -> Iterator[SessionDB]:
    database = SessionDB(url=store_url)
    lineage(database)
    yield database
    database.close()


def test_a_flag_covers_the_ancestors_and_what_lies_below(db: SessionDB) -> None:
    assert db.set_session_hidden("mid", True)  # up to root, down to tip: not root's forks
    assert flagged(db, "hidden = 1") == ["mid", "root", "tip"]
    assert db.set_session_pinned("root", True)  # root's every child, forks included
    assert flagged(db, "pinned = 1") == ["branch", "kid", "mid", "root", "tip"]
    assert flagged(db, "hidden = 1") == []
    assert db.set_session_read("branch", False)  # a fork: itself and up through root
    assert flagged(db, "last_read_at = 0") == ["branch", "root"]
    assert db.set_session_pinned("tip", False)
    assert flagged(db, "pinned = 1") == ["branch", "kid"]
    assert not db.set_session_pinned("nobody", True) and not db.set_session_read("\x00")


def test_pinning_the_canonical_bot_chat_keeps_its_line_hidden(db: SessionDB) -> None:
    run(db, "UPDATE sessions SET hidden = 1, title = 'Bot Chat' WHERE id = 'tip'")
    run(db, "UPDATE sessions SET hidden = 1 WHERE id IN ('root', 'mid')")
    assert db.set_session_pinned("tip", True)
    assert flagged(db, "pinned = 1") == ["mid", "root", "tip"]
    assert flagged(db, "hidden = 1") == ["mid", "root", "tip"]
    assert db.set_session_pinned("mid", True)  # not the Bot Chat itself: its line unhidden
    assert flagged(db, "hidden = 1") == []
