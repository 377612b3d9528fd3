"""Multi-part message content in Hermes's stored form (`sessionstore/sql/message_content.py`).

Hermes 0.13+ stores a ``list``/``dict`` content as ``"\\x00json:" + json.dumps(content)`` and
decodes it on read. The same here, on both dialects (PostgreSQL keeps the NUL as U+FFFD), with
hostile contents: any JSON list of parts comes back equal, text comes back as text.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessionstore.api.conversation import message_of, replayed_text
from sessionstore.api.session_db import SessionDB
from sessionstore.sessions.compaction import loaded_view
from sessionstore.sessions.user_turns import live_content, mentions_memory_context, sanitize_context
from sessionstore.sql.message_content import (
    ENCODED_CONTENT_PREFIXES,
    JSON_CONTENT_PREFIX,
    STORED_ON_POSTGRESQL_PREFIX,
    decode_content,
    encode_content,
    hermes_form,
    text_of,
)
from sessionstore.sql.records import ConversationRow

TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=60)
PARTS = st.lists(
    st.one_of(
        st.fixed_dictionaries({"type": st.just("text"), "text": TEXT}),
        st.fixed_dictionaries({
            "type": st.just("image_url"),
            "image_url": st.fixed_dictionaries({"url": TEXT}),
        }),
    ),
    max_size=4,
)  # fmt: skip


@pytest.fixture
def db(store_url: str) -> Iterator[SessionDB]:
    store = SessionDB(url=store_url)
    yield store
    store.close()


def test_the_stored_form_is_hermes_s_byte_for_byte(tmp_path: Path) -> None:
    parts = [{"type": "text", "text": "見て"}, {"type": "image_url", "image_url": {"url": "x"}}]
    db = SessionDB(db_path=tmp_path / "state.db")
    try:
        db.create_session("s", "cli")
        db.append_message("s", "user", parts)
    finally:
        db.close()
    with closing(sqlite3.connect(tmp_path / "state.db")) as conn:
        (stored,) = conn.execute("SELECT content FROM messages").fetchone()
    # What hermes_state.SessionDB._encode_content writes (json.dumps defaults: \\uXXXX escapes).
    assert stored == "\x00json:" + json.dumps(parts)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(parts=PARTS, text=TEXT)
def test_parts_and_text_come_back_as_they_went_in(
    db: SessionDB, parts: list[dict[str, Any]], text: str
) -> None:
    db.create_session("s", "cli")
    try:
        db.append_message("s", "user", parts)
        db.append_message("s", "user", text)
        stored_parts, stored_text = (m["content"] for m in db.get_messages("s"))
        assert stored_parts == parts
        # The replay gives user text as Hermes replays it (leaked memory context out, stripped).
        assert [m["content"] for m in db.get_messages_as_conversation("s")] == [
            parts, replayed_text(stored_text),
        ]  # fmt: skip
        if text.startswith((JSON_CONTENT_PREFIX, STORED_ON_POSTGRESQL_PREFIX)):
            return  # the marker itself: ambiguous in Hermes too
        # Text stays text (PostgreSQL keeps NUL as U+FFFD, as for every free text).
        assert stored_text in (text, text.replace("\x00", "\ufffd"))
    finally:
        db.delete_session("s")


def test_search_context_and_pickers_show_the_text_parts(db: SessionDB) -> None:
    db.create_session("s", "cli")
    image = {"type": "image_url", "image_url": {"url": "data:,"}}
    db.append_message("s", "user", [{"type": "text", "text": "the gateway dashboard"}, image])
    db.append_message("s", "assistant", "The dashboard shows a spike")
    db.append_message("s", "user", [image])
    (hit,) = db.search_messages("spike")
    assert hit["context"] == [
        {"role": "user", "content": "the gateway dashboard"},
        {"role": "assistant", "content": "The dashboard shows a spike"},
        {"role": "user", "content": "[multimodal content]"},
    ]
    assert [m["preview"] for m in db.list_recent_user_messages("s")] == [
        "[multimodal content]", "the gateway dashboard",
    ]  # fmt: skip


def test_decoding_never_raises_on_what_a_file_holds() -> None:
    assert decode_content("\x00json:{not json") == "\x00json:{not json"
    assert decode_content("json:[1]") == "json:[1]"
    assert decode_content(None) is None
    assert encode_content({"a": 1}) == '\x00json:{"a": 1}'
    assert text_of('\x00json:{"a": 1}') == ""
    with pytest.raises(TypeError):
        encode_content([object()])


def test_the_postgresql_marker_goes_back_to_hermes_s_where_nul_is_kept() -> None:
    marked = encode_content([{"type": "text", "text": "x"}])
    on_postgresql = marked.replace("\x00", "\ufffd")
    assert hermes_form(on_postgresql) == marked
    assert hermes_form(marked) is marked
    assert hermes_form("plain text") == "plain text" and hermes_form(None) is None


_MEMORY_CONTEXT_WORDS = st.sampled_from(
    ["memory-context", "MEMORY CONTEXT", "Memory-Context", "memory_context", "memorycontext",
     "memory\u00a0context", "MEMORY-CONTEXT", "<memory-context>", "\u212a", "\u0130", "\u017f"]
)  # fmt: skip


@settings(max_examples=300)
@given(st.lists(st.one_of(_MEMORY_CONTEXT_WORDS, st.text(max_size=12)), max_size=6))
def test_the_memory_context_prefilter_finds_what_the_pattern_finds(parts: list[str]) -> None:
    """The cheap test before Hermes's three patterns run: it must say yes whenever a
    case-insensitive ``memory[- ]context`` is in the text, and only then."""
    import re

    text = "".join(parts)
    expected = re.search(r"memory[- ]context", text, re.IGNORECASE) is not None
    assert mentions_memory_context(text) is expected


def _sanitized_as_before(text: str) -> str:
    """The rule as its two homes wrote it before they became one: iot's three patterns,
    each run on every text (``sessions.user_turns``), in its order."""
    import re

    for pattern in (
        re.compile(r"<\s*memory-context\s*>[\s\S]*?</\s*memory-context\s*>", re.IGNORECASE),
        re.compile(
            r"\[System note:\s*The following is recalled memory context,\s*NOT new user input\.\s*"
            r"Treat as (?:informational background data|authoritative reference data[^\]]*)\.\]\s*",
            re.IGNORECASE,
        ),
        re.compile(r"</?\s*memory-context\s*>", re.IGNORECASE),
    ):
        text = pattern.sub("", text)
    return text


_MEMORY_CONTEXT_PIECES = st.one_of(
    _MEMORY_CONTEXT_WORDS,
    st.sampled_from([
        "<", ">", "</", "< memory-context >", "</ MEMORY-context>", "[System note: ",
        "[System note: The following is recalled memory context, NOT new user input. ",
        "Treat as informational background data.]", "Treat as authoritative reference data",
        " (x)", ".]", "]", "\n", " ", "\x00", "\ud800", "\u212a",
    ]),
    st.text(max_size=8),
)  # fmt: skip


@settings(max_examples=300)
@given(st.lists(_MEMORY_CONTEXT_PIECES, max_size=10))
def test_both_readers_of_recalled_memory_answer_as_before(parts: list[str]) -> None:
    """``sanitize_context`` has one home (``sessions.user_turns``): a replay
    (``replayed_text``), a rewind's turn text (``live_content``) and a compaction's loaded
    view read through it and give what each gave before, hostile text included."""
    text = "".join(parts)
    before = _sanitized_as_before(text)
    assert sanitize_context(text) == before
    assert replayed_text(text) == before.strip()
    row = ConversationRow(**{**dict.fromkeys(ConversationRow._fields), "id": 1, "role": "user",
                             "content": text, "timestamp": 1.0})  # fmt: skip
    if not text.startswith(ENCODED_CONTENT_PREFIXES):  # message_of's own inlined test
        assert message_of(row)["content"] == before.strip()
    assert live_content(text) == before.strip()
    assert loaded_view("user", text) == loaded_view("assistant", text) == before.strip()
