"""``list_sessions_rich``'s ``last_active`` is iot 0.22.2's freshest of ``last_activity_at``
and the newest message, else ``started_at`` (issue 29), on SQLite and PostgreSQL; the last
test asks the real iot wheel the same."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from real_hermes import RealHermesFork
from real_hermes_driver import SQL_STEP

from sessionstore.api.session_db import SessionDB

Step = tuple[str, list[Any], dict[str, Any]]
SCENARIO: list[Step] = [
    *[("create_session", [sid, "cli"], {}) for sid in ("stamped", "spoken", "quiet", "both")],
    ("append_message", ["spoken", "user", "hi"], {"timestamp": 2_000_000_500.0}),
    ("append_message", ["both", "user", "hi"], {"timestamp": 2_000_000_900.0}),
    (SQL_STEP, ["UPDATE sessions SET started_at = 2000000000.0"], {}),
    (SQL_STEP, ["UPDATE sessions SET last_activity_at = 2000000700.0 "
                "WHERE id IN ('stamped', 'both')"], {}),
    (SQL_STEP, ["UPDATE sessions SET last_activity_at = 2000000100.0 WHERE id = 'spoken'"], {}),
]
EXPECTED = {"stamped": 2_000_000_700.0, "spoken": 2_000_000_500.0, "quiet": 2_000_000_000.0,
            "both": 2_000_000_900.0}  # fmt: skip


def play(db: SessionDB) -> None:
    for name, args, kwargs in SCENARIO:
        if name == SQL_STEP:
            db.store.write(lambda conn, a=args: conn.exec_driver_sql(a[0]))
        else:
            getattr(db, name)(*args, **kwargs)


@pytest.fixture
def db(store_url: str) -> Iterator[SessionDB]:
    database = SessionDB(url=store_url)
    play(database)
    yield database
    database.close()


def active(rows: list[dict[str, Any]]) -> dict[str, float]:
    return {row["id"]: row["last_active"] for row in rows}


def test_last_active_is_the_freshest_of_the_stamp_and_the_messages(db: SessionDB) -> None:
    assert active(db.list_sessions_rich()) == EXPECTED
    assert active(db.list_sessions_rich(order_by_last_active=True)) == EXPECTED


@pytest.mark.slow  # the real iot runs in a side interpreter
def test_last_active_matches_iot(tmp_path: Any, db: SessionDB) -> None:
    hermes = RealHermesFork("iot-0.22.2", tmp_path / "home")
    theirs = hermes.calls(tmp_path / "listing.db", [*SCENARIO, ("list_sessions_rich", [], {})])
    assert active(theirs[-1]) == EXPECTED == active(db.list_sessions_rich())
