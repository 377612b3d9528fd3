"""``search_sessions`` lists the most recently used session first, as iot 0.22.2 does: its
``hermes -c`` continues ``search_sessions(source=..., limit=1)``, so a session the user went
back to and kept using is the one continued, not a newer one left idle. The activity is the
listing's (``last_activity_at`` and the newest message, each inside 1970...2103, else
``started_at``); ties by the newer start, then the id. The last test asks the real iot wheel
the same. Found by upstream Hermes's ``test_corrupt_row_robustness.py`` (the third walk).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from real_hermes import RealHermesFork
from real_hermes_driver import SQL_STEP

from sessionstore.api.session_db import SessionDB

T = 2_000_000_000.0
Step = tuple[str, list[Any], dict[str, Any]]
SCENARIO: list[Step] = [
    *[("create_session", [sid, "cli"], {}) for sid in ("first", "second", "third", "tied")],
    ("create_session", ["bot", "telegram"], {}),
    # Started first, used last: the user went back to it.
    ("append_message", ["first", "user", "back to this one"], {"timestamp": T + 900}),
    ("append_message", ["second", "user", "a quick question"], {"timestamp": T + 200}),
    (SQL_STEP, ["UPDATE sessions SET started_at = 2000000000.0 WHERE id = 'first'"], {}),
    (SQL_STEP, ["UPDATE sessions SET started_at = 2000000100.0 WHERE id IN ('second', 'bot')"],
     {}),
    (SQL_STEP, ["UPDATE sessions SET started_at = 2000000300.0 WHERE id IN ('third', 'tied')"],
     {}),
    # A heartbeat counts as use (a gateway session spoken to without a new row yet).
    (SQL_STEP, ["UPDATE sessions SET last_activity_at = 2000000950.0 WHERE id = 'bot'"], {}),
]  # fmt: skip
QUERIES: list[Step] = [
    ("search_sessions", [], {}),
    ("search_sessions", [], {"source": "cli", "limit": 1}),
    ("search_sessions", [], {"source": "cli", "limit": 2, "offset": 1}),
]
EXPECTED = [
    ["bot", "first", "tied", "third", "second"],
    ["first"],
    ["tied", "third"],
]


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


def ours(db: SessionDB) -> list[list[str]]:
    return [[row["id"] for row in getattr(db, name)(*args, **kwargs)]
            for name, args, kwargs in QUERIES]  # fmt: skip


def test_the_most_recently_used_session_comes_first(db: SessionDB) -> None:
    assert ours(db) == EXPECTED


def test_a_session_used_again_moves_to_the_front(db: SessionDB) -> None:
    db.append_message("third", "user", "now this one", timestamp=T + 2000)
    assert [row["id"] for row in db.search_sessions(source="cli")][:2] == ["third", "first"]


@pytest.mark.slow  # the real iot runs in a side interpreter
def test_the_order_matches_iot(tmp_path: Any, db: SessionDB) -> None:
    hermes = RealHermesFork("iot-0.22.2", tmp_path / "home")
    theirs = hermes.calls(tmp_path / "order.db", [*SCENARIO, *QUERIES])
    assert [[row["id"] for row in answer] for answer in theirs[-len(QUERIES) :]] == EXPECTED
    assert ours(db) == EXPECTED
