"""Malformed ``tool_calls`` are refused where they come in (issue 27, item 5).

``tool_calls`` is a list of tool-call dicts. ``NewMessage`` also takes it as JSON text (the
encoded form ``prepare_message`` produces). Anything else was stored before, counted as one
call, and read back as ``[]`` with a warning on every read; now it is a ``TypeError`` (a
wrong Python type) or a ``ValueError`` (text that is not the JSON of such a list), naming the
field, and nothing is written.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessionstore.api.session_db import SessionDB
from sessionstore.sessions.repository import NewMessage

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=8,
)


def is_tool_call_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(call, dict) for call in value)


def _json_list(text: str) -> bool:
    try:
        return is_tool_call_list(json.loads(text))
    except ValueError:
        return False


@pytest.mark.parametrize(
    "calls", [[{"id": "c1", "function": {"name": "t", "arguments": "{}"}}], []]
)
def test_the_json_text_of_a_tool_call_list_is_stored_as_the_list(
    db: SessionDB, calls: list[dict[str, Any]]
) -> None:
    # An export's messages carry tool_calls as JSON text: stored once encoded, counted.
    db.append_message("s", "assistant", "x", tool_calls=json.dumps(calls))
    assert db.append_messages_batch("s", [{"role": "assistant", "tool_calls": json.dumps(calls)}])
    assert [m["tool_calls"] for m in db.get_messages("s")] == [calls or None] * 2
    session = db.get_session("s")
    assert session is not None and session["tool_call_count"] == 2 * len(calls)


@pytest.fixture
def db(store_url: str) -> Iterator[SessionDB]:
    database = SessionDB(url=store_url)
    database.create_session("s", "cli")
    yield database
    database.close()


@pytest.mark.parametrize("malformed", [42, {"id": 1}, "not json", [1], ["call"], 3.5, True])
def test_the_facade_refuses_malformed_tool_calls_and_writes_nothing(
    db: SessionDB, malformed: Any
) -> None:
    with pytest.raises(TypeError, match="tool_calls"):
        db.append_message("s", "assistant", "x", tool_calls=malformed)
    with pytest.raises(TypeError, match="tool_calls"):
        db.append_messages("s", [{"role": "assistant", "tool_calls": malformed}])
    session = db.get_session("s")
    assert session is not None and (session["message_count"], session["tool_call_count"]) == (0, 0)
    assert db.get_messages("s") == []


@pytest.mark.parametrize(
    ("malformed", "error"),
    [(42, TypeError), ({"id": 1}, TypeError), ("not json", ValueError), ('"x"', ValueError),
     ("[1]", ValueError), ('{"id": 1}', ValueError)],
)  # fmt: skip
def test_new_message_refuses_malformed_tool_calls(malformed: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match=r"NewMessage\.tool_calls"):
        NewMessage(role="assistant", tool_calls=malformed)


@settings(max_examples=150, deadline=None)
@given(value=JSON_VALUES)
def test_new_message_takes_exactly_lists_of_tool_call_dicts(value: Any) -> None:
    for given_as in (value, json.dumps(value)):
        try:
            message = NewMessage(role="assistant", tool_calls=given_as)
        except (TypeError, ValueError) as exc:
            assert "NewMessage.tool_calls" in str(exc)
            assert not is_tool_call_list(value) or (not value and isinstance(given_as, str))
            continue
        assert is_tool_call_list(value) or value is None or given_as == ""
        stored = message.tool_calls
        assert stored is None or json.loads(stored) == value
        assert message.tool_call_total == (len(value) if is_tool_call_list(value) else 0)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(value=JSON_VALUES)
def test_the_facade_stores_a_tool_call_list_or_nothing(
    migrated_sqlite_url: str, value: Any
) -> None:
    with SessionDB(url=migrated_sqlite_url) as db:
        db.create_session("h", "cli")
        before = db.get_messages("h")
        # The JSON text of a tool-call list is taken as that list (an export's form).
        calls = json.loads(value) if isinstance(value, str) and _json_list(value) else value
        try:
            db.append_message("h", "assistant", "x", tool_calls=value)
        except TypeError as exc:
            assert "tool_calls" in str(exc) and not is_tool_call_list(calls)
            assert value is not None
            assert db.get_messages("h") == before
            return
        assert value is None or is_tool_call_list(calls)
        last = db.get_messages("h")[-1]
        assert last["tool_calls"] == (calls or None)
        assert len(db.get_messages("h")) == len(before) + 1
