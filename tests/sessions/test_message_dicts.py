"""``get_message_dicts`` (what ``SessionDB.get_messages`` returns) reads its own statement, the
shown columns in the dicts' key order, and builds each dict straight from it: every decoding
branch must give what the record's own dict gives (``windows.hermes_message_dict``), key for
key, in the same order, with the same types."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from sessionstore.sessions.repository import SessionRepository
from sessionstore.sessions.windows import hermes_message_dict
from sessionstore.storage.store import Store


@pytest.fixture
def repository(store_url: str) -> Iterator[SessionRepository]:
    with Store.open(store_url) as store:
        yield SessionRepository(store)


def _append(repository: SessionRepository, role: str, content: Any, **fields: Any) -> int:
    return repository.append_message("s", repository.prepare_message(role, content, **fields))


def _set(repository: SessionRepository, message_id: int, **values: Any) -> None:
    assignments = ", ".join(f"{name} = :{name}" for name in values)
    with repository.store.engine.begin() as conn:
        conn.execute(
            sa.text(f"UPDATE messages SET {assignments} WHERE id = :id"),
            {**values, "id": message_id},
        )


def _shown(messages: list[dict[str, Any]]) -> list[list[tuple[str, str, Any]]]:
    return [[(key, type(value).__name__, value) for key, value in m.items()] for m in messages]


def test_message_dicts_are_the_records_dicts(repository: SessionRepository) -> None:
    repository.create_session("s", "cli")
    call = {"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{}"}}
    _append(repository, "user", [{"type": "text", "text": "look"}])  # multi-part content
    _append(repository, "assistant", None, tool_calls=[call], finish_reason="tool_calls")
    broken = _append(repository, "assistant", "x", tool_calls=[call])
    padded = _append(repository, "assistant", "y", tool_calls=[call])
    shown = _append(repository, "user", "shown", platform_message_id="p1", observed=True)
    damaged = _append(repository, "user", "damaged")
    summary = _append(repository, "user", "the summary")
    rewound = _append(repository, "user", "rewound")
    _append(repository, "assistant", "plain", reasoning="r", reasoning_content="")
    _set(repository, broken, tool_calls="[broken")
    _set(repository, padded, tool_calls=' [{"id": "c9"}] ')  # json.loads's own path
    _set(repository, shown, display_metadata=json.dumps({"k": [1, 2.5, None]}),
         display_kind="note")  # fmt: skip
    _set(repository, damaged, display_metadata="{not json")
    _set(repository, summary, _compressed_summary=1)
    _set(repository, rewound, active=0)

    for include_inactive in (False, True):
        for limit, offset in ((None, 0), (3, 0), (None, 2), (4, 3), (-1, 1)):
            records = repository.get_messages("s", include_inactive, limit, offset)
            expected = [hermes_message_dict(record) for record in records]
            got = repository.get_message_dicts("s", include_inactive, limit, offset)
            assert _shown(got) == _shown(expected)
    everything = repository.get_message_dicts("s", include_inactive=True)
    assert everything[0]["content"] == [{"type": "text", "text": "look"}]
    assert [m["id"] for m in everything if "_compressed_summary" in m] == [summary]
    assert list(everything[6])[-1] == "_compressed_summary"
    assert repository.get_message_dicts("ghost") == []
