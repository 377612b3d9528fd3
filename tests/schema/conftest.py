"""Fixtures of the schema wing's tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sessionstore.dialects.sqlite import SQLiteDialect
from sessionstore.schema import new_store


@pytest.fixture
def replays(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The SQLite files built from the chain's result kept in the process during this test
    (``sessionstore.schema.new_store``), by their path; none kept at its start, so the test's
    first new store is built by the chain."""
    built: list[str] = []
    replay = SQLiteDialect.replay_new_store

    def spied(self: SQLiteDialect, conn: Any, image: Any) -> None:
        built.append(str(conn.engine.url.database))
        replay(self, conn, image)

    monkeypatch.setattr(SQLiteDialect, "replay_new_store", spied)
    new_store.forget_built_stores()
    yield built
    new_store.forget_built_stores()
