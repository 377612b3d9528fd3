"""iot 0.22.2's ``include_inactive`` on the exports, on SQLite and PostgreSQL: True every row,
False (asked for by name) the live rows only, as iot's default; not given, ours (every row, so
a backup loses none)."""

from __future__ import annotations

from typing import Any

import pytest

from sessionstore.api.session_db import SessionDB


@pytest.fixture
def db(rewound_db: SessionDB) -> SessionDB:
    return rewound_db  # "two" and what follows are undone (tests/api/conftest.py)


def texts(exported: dict[str, Any] | None) -> list[str]:
    assert exported is not None
    return [m["content"] for m in exported["messages"]]


EVERY = ["one", "re one", "two", "re two", "three", "re three"]
LIVE = ["one", "re one"]


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({}, EVERY), ({"include_inactive": True}, EVERY), ({"include_inactive": False}, LIVE),
    ({"include_compacted": True}, LIVE),
    ({"include_compacted": True, "include_inactive": True}, EVERY),
])  # fmt: skip
def test_the_exports_take_include_inactive(
    db: SessionDB, kwargs: dict[str, Any], expected: list[str]
) -> None:
    assert texts(db.export_session("s", **kwargs)) == expected
    assert texts(db.export_session_lineage("s", **kwargs)) == expected
    (exported,) = db.export_all(**kwargs)
    assert texts(exported) == expected


def test_include_inactive_must_be_a_flag(db: SessionDB) -> None:
    for call in (db.export_session, db.export_session_lineage):
        with pytest.raises(TypeError):
            call("s", include_inactive="yes")  # type: ignore[operator]
    with pytest.raises(TypeError):
        db.export_all(include_inactive=1)  # type: ignore[arg-type]
