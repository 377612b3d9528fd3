"""iot 0.22.2's ``session_lifecycle_statuses`` (issue 29), on SQLite and PostgreSQL: each
session's status from its last message row; the last test asks the real iot wheel the same."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from real_hermes import RealHermesFork

from sessionstore.api.async_session_db import AsyncSessionDB
from sessionstore.api.session_db import SessionDB
from sessionstore.sessions.session_state import classify_session_status

CALL = {"id": "c1", "type": "function", "function": {"name": "terminal", "arguments": "{}"}}
Step = tuple[str, list[Any], dict[str, Any]]
SCENARIO: list[Step] = [
    *[("create_session", [sid, "cli"], {}) for sid in
      ("empty", "asked", "tooled", "pending", "done", "failed", "filtered", "recovered")],
    ("append_message", ["asked", "assistant", "hello"], {}),
    ("append_message", ["asked", "user", "and then?"], {}),
    ("append_message", ["tooled", "tool", "output"], {"tool_call_id": "c1"}),
    ("append_message", ["pending", "assistant", None], {"tool_calls": [CALL]}),
    ("append_message", ["done", "user", "hi"], {}),
    ("append_message", ["done", "assistant", "hello"], {"finish_reason": "stop"}),
    ("append_message", ["failed", "assistant", "oops"], {"finish_reason": " Agent_Error "}),
    ("append_message", ["filtered", "user", "x"], {"finish_reason": "content_filter"}),
    ("append_message", ["recovered", "assistant", "err"], {"finish_reason": "error"}),
    ("append_message", ["recovered", "assistant", "fine"], {}),
]  # fmt: skip
ASKED = ["done", "asked", "tooled", "pending", "failed", "filtered", "recovered", "empty",
         "unknown", "", "done"]  # fmt: skip
EXPECTED = {
    "done": "complete", "asked": "interrupted", "tooled": "interrupted",
    "pending": "interrupted", "failed": "error", "filtered": "error", "recovered": "complete",
    "empty": "empty", "unknown": "empty",
}  # fmt: skip


def play(db: SessionDB) -> None:
    for name, args, kwargs in SCENARIO:
        getattr(db, name)(*args, **kwargs)


@pytest.fixture
def db(store_url: str) -> Iterator[SessionDB]:
    database = SessionDB(url=store_url)
    play(database)
    yield database
    database.close()


def test_each_session_is_classified_by_its_last_row(db: SessionDB) -> None:
    statuses = db.session_lifecycle_statuses(ASKED)
    assert statuses == EXPECTED and list(statuses) == list(EXPECTED)  # order given, deduplicated
    assert db.session_lifecycle_statuses([]) == {} == db.session_lifecycle_statuses(None)
    assert db.session_lifecycle_statuses(["\x00"]) == {"\x00": "empty"}
    many = [f"none-{n}" for n in range(1200)] + ["done"]  # past one statement's chunk
    assert db.session_lifecycle_statuses(many)["done"] == "complete"


def test_bad_ids_are_refused(db: SessionDB) -> None:
    with pytest.raises(TypeError):
        db.session_lifecycle_statuses("done")
    with pytest.raises(TypeError):
        db.session_lifecycle_statuses(["done", 7])  # type: ignore[list-item]


def test_the_async_mirror_answers_the_same(store_url: str, db: SessionDB) -> None:
    async def ask() -> dict[str, str]:
        async with AsyncSessionDB(url=store_url) as adb:
            return await adb.session_lifecycle_statuses(ASKED)

    assert asyncio.run(ask()) == EXPECTED


def test_the_classification_rule() -> None:
    assert classify_session_status("assistant", False, None) == "complete"
    assert classify_session_status("ASSISTANT ", True, "stop") == "interrupted"
    assert classify_session_status(None, False, None) == "complete"
    assert classify_session_status("system", True, None) == "complete"
    assert classify_session_status("user", False, "ERROR") == "error"


@pytest.mark.slow  # the real iot runs in a side interpreter
def test_the_statuses_match_iot(tmp_path: Any, db: SessionDB) -> None:
    hermes = RealHermesFork("iot-0.22.2", tmp_path / "home")
    theirs = hermes.calls(tmp_path / "status.db", [
        *SCENARIO, ("session_lifecycle_statuses", [ASKED], {})])[-1]  # fmt: skip
    assert theirs == EXPECTED
    assert db.session_lifecycle_statuses(ASKED) == theirs
