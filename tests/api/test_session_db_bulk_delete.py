"""A delete of more sessions than one statement can name: ``delete_sessions`` of 1,500
sessions (``hermes sessions delete`` of a filtered listing, a dashboard's select-all) takes
every one and its delegate runs, on SQLite and PostgreSQL. The delegate lookup once named
every parent in one ``OR`` of ``LIKE`` tests, which SQLite parses as a tree deeper than its
limit of 1,000: the whole delete failed ("Expression tree is too large"). Found by upstream
Hermes's ``test_corrupt_row_robustness.py`` (the third walk, 2026-12-05)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from store_sql import run

from sessionstore.api.session_db import SessionDB

COUNT = 1_500
pytestmark = pytest.mark.slow  # thousands of rows on each dialect


@pytest.fixture
def db(store_url: str) -> Iterator[SessionDB]:
    """``COUNT`` sessions, each with a delegate run (its marker names it) and a message each;
    ``keep`` and its own delegate run beside."""
    database = SessionDB(url=store_url)
    parents = [f"job-{index:04d}" for index in range(COUNT)]
    rows = [
        {"id": parent, "parent": None, "config": None} for parent in [*parents, "keep"]
    ] + [
        {"id": f"{parent}-run", "parent": parent,
         "config": json.dumps({"_delegate_from": parent})}
        for parent in [*parents, "keep"]
    ]  # fmt: skip

    def seed(conn: sa.Connection) -> None:
        conn.execute(
            sa.text("INSERT INTO sessions (id, source, started_at, parent_session_id, "
                    "model_config, message_count) VALUES (:id, 'cron', 1.0e9, :parent, "
                    ":config, 1)"),
            rows,
        )  # fmt: skip
        conn.execute(
            sa.text("INSERT INTO messages (session_id, role, content, timestamp) "
                    "VALUES (:id, 'user', 'x', 1.0e9)"),
            [{"id": row["id"]} for row in rows],
        )  # fmt: skip

    database.store.write(seed)
    yield database
    database.close()


def test_a_delete_of_thousands_takes_every_session_and_its_delegate_runs(db: SessionDB) -> None:
    parents = [f"job-{index:04d}" for index in range(COUNT)]
    assert db.delete_sessions([*parents, "never-there"]) == COUNT
    left = {row["id"] for row in run(db, "SELECT id FROM sessions")}
    assert left == {"keep", "keep-run"}
    assert {row["session_id"] for row in run(db, "SELECT session_id FROM messages")} == left


def test_a_prune_of_thousands_takes_them_too(db: SessionDB) -> None:
    run(db, "UPDATE sessions SET ended_at = 1.0e9")
    run(db, "UPDATE sessions SET started_at = 4.0e9, ended_at = NULL WHERE id LIKE 'keep%'")
    assert db.prune_sessions(older_than_days=1, source="cron") == 2 * COUNT
    assert {row["id"] for row in run(db, "SELECT id FROM sessions")} == {"keep", "keep-run"}
