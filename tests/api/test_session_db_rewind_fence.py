"""iot 0.22.2's fenced rewind on SQLite and PostgreSQL (issue 29, item 3):
``rewind_to_message(expected_active_ids=...)`` refuses with ``TranscriptChangedError`` (a
``RuntimeError``, as iot's) unless the live transcript is still the one the caller saw
(``get_active_message_ids``), and a hostile fence is a ``TypeError``; either way nothing is
rewound. The release is the oracle in ``tests/hermes/test_real_iot_rewind_fence.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sessionstore.api.session_db import SessionDB
from sessionstore.errors import TranscriptChangedError


@pytest.fixture
def db(store_url: str) -> Iterator[SessionDB]:
    database = SessionDB(url=store_url)
    database.create_session("s", "cli")
    for role, text in (("user", "ask"), ("assistant", "answer"), ("user", "again")):
        database.append_message("s", role, text)
    yield database
    database.close()


def test_a_turn_that_landed_since_the_caller_looked_refuses_the_rewind(db: SessionDB) -> None:
    seen = db.get_active_message_ids("s")
    assert len(seen) == 3 and seen == sorted(seen)
    db.append_message("s", "assistant", "a reply that landed meanwhile")
    with pytest.raises(TranscriptChangedError) as refused:
        db.rewind_to_message("s", seen[2], expected_active_ids=seen)
    assert isinstance(refused.value, RuntimeError)
    assert len(db.get_active_message_ids("s")) == 4 and db.get_session("s")["rewind_count"] == 0  # type: ignore[index]
    now = db.get_active_message_ids("s")
    result = db.rewind_to_message("s", seen[2], expected_active_ids=tuple(now))
    assert result["rewound_count"] == 2 and db.get_active_message_ids("s") == seen[:2]


@pytest.mark.parametrize("fence", ["12", b"1", [1.0, 2.0, 3.0], [True, 2, 3], {1: 1}, 5, [None]])
def test_a_hostile_fence_is_a_type_error_and_nothing_is_rewound(
    db: SessionDB, fence: Any
) -> None:
    seen = db.get_active_message_ids("s")
    with pytest.raises(TypeError):
        db.rewind_to_message("s", seen[2], expected_active_ids=fence)
    assert db.get_active_message_ids("s") == seen
    assert db.get_active_message_ids(5) == [] and db.get_active_message_ids("\x00") == []  # type: ignore[arg-type]
