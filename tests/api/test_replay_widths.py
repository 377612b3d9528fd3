"""A replay reads only the prefix of ``CONVERSATION_FIELDS`` its keys need
(``conversation.replay_width``): every combination of its arguments, under every set of iot
0.22.2's wire keys, gives from the narrow rows exactly what it gives from the whole rows, key
for key, in order. A live replay carries its rows' digests beside their ``message_uid`` only:
the one place a flush reads a digest (iot 0.22.2's and ours), so a replay without uids is
flushed the same with or without them. The uid pairing starts at the first uids it can use."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from store_sql import run

from sessionstore.api.conversation import (
    WIRE_STRIPPED_KEYS,
    _ToolCallUidPairing,
    conversation,
    message_of,
    row_snapshot,
)
from sessionstore.api.session_db import SessionDB
from sessionstore.sql.records import CONVERSATION_FIELDS, CONVERSATION_WIDTHS, ConversationRow

WIRE_KEY_SETS = (
    frozenset(),
    frozenset({"display_kind"}),
    frozenset(WIRE_STRIPPED_KEYS),
)


@pytest.fixture
def rich_db(db: SessionDB) -> SessionDB:
    """Session ``s`` with a row for each replay key: uids minted by a batch (a call and its
    results), a result appended after its call, a compaction summary, display fields,
    absorbed uids, ``api_content``, reasoning, a platform id, a rewound row."""
    db.create_session("s", "cli")
    call = {"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{}"}}
    late = {"id": "c2|r2", "type": "function", "function": {"name": "t", "arguments": "{}"}}
    db.append_message(
        "s", "user", "[CONTEXT COMPACTION] earlier turns", _compressed_summary=True,
        display_kind="compaction_summary", display_metadata={"task_count": 2},
    )  # fmt: skip
    db.append_messages_batch("s", [
        {"role": "user", "content": "run ls"},
        {"role": "assistant", "content": "", "tool_calls": [call, late],
         "finish_reason": "tool_calls", "reasoning": "r", "reasoning_content": ""},
        {"role": "tool", "content": "a b", "tool_call_id": "c1", "tool_name": "t"},
    ])  # fmt: skip
    db.append_message("s", "tool", "late", tool_call_id="r2", tool_name="t")
    db.append_message("s", "user", "shown", display_kind="note", display_metadata={"k": [1]})
    db.append_message("s", "user", "joined to the one before")
    absorbing = db.append_message("s", "assistant", "done", message_uid="b" * 32)
    rewound = db.append_message("s", "user", "rewound")
    run(
        db,
        "UPDATE messages SET absorbed_message_uids = :absorbed, api_content = :api, "
        "platform_message_id = 'p1', observed = 1, effect_disposition = 'applied', "
        "token_count = 7 WHERE id = :id",
        absorbed=json.dumps(["c" * 32, "d" * 32]), api="done, as sent", id=absorbing,
    )  # fmt: skip
    run(db, "UPDATE messages SET active = 0 WHERE id = :id", id=rewound)
    return db


def _shown(messages: list[dict[str, Any]]) -> list[list[tuple[str, str, Any]]]:
    return [[(key, type(value).__name__, value) for key, value in m.items()] for m in messages]


def test_the_narrow_rows_replay_as_the_whole_rows(rich_db: SessionDB) -> None:
    db = rich_db
    seen_keys: set[str] = set()
    for wire_keys in WIRE_KEY_SETS:
        db.replay_wire_keys = wire_keys
        for include_inactive in (False, True):
            whole = db._repo.get_conversation_rows("s", include_inactive)
            assert len(whole[0]) == len(CONVERSATION_FIELDS)
            for repair in (False, True):
                for row_ids in (False, True):
                    got = db.get_messages_as_conversation(
                        "s", False, include_inactive, repair, row_ids
                    )
                    expected = conversation(
                        whole, with_ancestors=False, repair_alternation=repair,
                        row_ids=row_ids, wire_keys=wire_keys,
                    )  # fmt: skip
                    assert _shown(got) == _shown(expected)
                    seen_keys.update(key for m in got for key in m)
    # the rows exercised every key a narrower read could lose
    assert {
        "_tool_call_uids", "_tool_call_uid", "_absorbed_message_uids", "_compressed_summary",
        "message_uid", "display_kind", "display_metadata", "_db_row_snapshot", "api_content",
        "message_id", "observed", "effect_disposition", "reasoning_content", "_row_id",
    } <= seen_keys  # fmt: skip


def test_each_width_reads_its_prefix(rich_db: SessionDB) -> None:
    for width in CONVERSATION_WIDTHS:
        rows = rich_db._repo.get_conversation_rows("s", True, width)
        whole = rich_db._repo.get_conversation_rows("s", True)
        assert [tuple(row) for row in rows] == [tuple(row[:width]) for row in whole]
    with pytest.raises(ValueError, match="width"):
        rich_db._repo.get_conversation_rows("s", False, 3)
    with pytest.raises(ValueError, match="whole replay row"):
        narrow = rich_db._repo.get_conversation_rows("s", False, CONVERSATION_WIDTHS.identity)
        row_snapshot(narrow[0])


def test_a_live_replay_has_digests_beside_message_uids(rich_db: SessionDB) -> None:
    db = rich_db
    whole = db._repo.get_conversation_rows("s")
    digest_of = {row[CONVERSATION_FIELDS.index("message_uid")]: row_snapshot(row) for row in whole}
    db.replay_wire_keys = frozenset(WIRE_STRIPPED_KEYS)
    live = db.get_messages_as_conversation("s", repair_alternation=True)
    assert all(m["_db_row_snapshot"] == digest_of[m["message_uid"]] for m in live)
    for wire_keys in (frozenset(), frozenset({"display_kind", "display_metadata"})):
        db.replay_wire_keys = wire_keys
        live = db.get_messages_as_conversation("s", repair_alternation=True)
        assert not any("_db_row_snapshot" in m or "message_uid" in m for m in live)


def test_a_replay_without_uids_is_flushed_the_same_with_digests(rich_db: SessionDB) -> None:
    """What a digest without a ``message_uid`` would have told our flush: nothing (every dict
    whose mark was dropped is written again either way, as in iot's flush without a uid)."""
    db = rich_db
    db.replay_wire_keys = frozenset()
    live = db.get_messages_as_conversation("s", repair_alternation=True)
    unmarked = [{k: v for k, v in m.items() if k != "_db_persisted"} for m in live]
    digested = [{**m, "_db_row_snapshot": "0" * 32} for m in unmarked]
    for session_id, batch in (("plain", unmarked), ("digested", digested)):
        db.create_session(session_id, "cli")
        assert db.append_messages_batch(session_id, batch) == len(live)
    assert [m["content"] for m in db.get_messages("plain")] == [
        m["content"] for m in db.get_messages("digested")
    ]


_CALL_IDS = ("c1", "c2", "c1|r1", "r1", " c2 ")
_UIDS = ("u1", "u2", "u3")


@st.composite
def _replay_rows(draw: st.DrawFn) -> list[ConversationRow]:
    """Turns of users, assistants with calls (some with uids) and tool results (some with a
    stored uid), ids in order: the rows the uid pairing reads."""
    rows = []
    for row_id in range(1, draw(st.integers(0, 14)) + 1):
        fields: dict[str, Any] = dict.fromkeys(ConversationRow._fields)
        role = draw(st.sampled_from(("user", "assistant", "tool")))
        fields.update(id=row_id, role=role, content="x", timestamp=float(row_id))
        if role == "assistant" and draw(st.booleans()):
            calls = draw(st.lists(st.sampled_from(_CALL_IDS), min_size=1, max_size=3))
            fields["tool_calls"] = json.dumps([{"id": one, "type": "function"} for one in calls])
            if draw(st.booleans()):
                uids = {one: draw(st.sampled_from(_UIDS)) for one in calls}
                fields["tool_call_uids"] = json.dumps(uids)
        elif role == "tool":
            fields["tool_call_id"] = draw(st.sampled_from(_CALL_IDS))
            fields["tool_call_uid"] = draw(st.sampled_from((None, "stored")))
        rows.append(ConversationRow(**fields))
    return rows


@given(rows=_replay_rows())
def test_the_uid_pairing_starts_at_the_first_uids_and_pairs_as_from_the_start(
    rows: list[ConversationRow],
) -> None:
    """The replay skips the pairing until a message carries ``_tool_call_uids``; pairing every
    row from the first, as iot does, gives the same dicts."""
    got = conversation(rows, with_ancestors=False, repair_alternation=False)
    pairing = _ToolCallUidPairing()
    expected = []
    for row in rows:
        message = message_of(row)
        if message["role"] != "tool" or "_tool_call_uid" not in message:
            pairing.see(message)
        expected.append(message)
    assert _shown(got) == _shown(expected)
