"""A live replay joins consecutive user messages as iot 0.22.2 does (its keys, the stored rows
unchanged), on both dialects; the real iot side by side:
tests/hermes/test_real_iot_user_merge.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sessionstore.api.session_db import SessionDB


@pytest.fixture
def db(store_url: str) -> Iterator[SessionDB]:
    database = SessionDB(url=store_url)
    database.replay_wire_keys = frozenset()  # as under Hermes 0.19.0: no uids on the dicts
    yield database
    database.close()


def test_a_joined_message_is_no_stored_row_and_counts_its_rows(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.append_messages_batch("s", [
        {"role": "user", "content": "one", "api_content": "one <memory>m</memory>"},
        {"role": "user", "content": "two"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "[CONTEXT SUMMARY]: before", "_compressed_summary": True},
        {"role": "user", "content": "after the summary"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "three"},
        {"role": "user", "content": ""},
    ])  # fmt: skip
    live = db.get_messages_as_conversation("s", repair_alternation=True)
    assert [m["content"] for m in live] == [
        "one\n\ntwo", "ok", "[CONTEXT SUMMARY]: before", "after the summary", "ok", "three",
    ]  # a summary carrier is never joined
    joined, unchanged = live[0], live[-1]
    assert "_db_persisted" not in joined and "api_content" not in joined
    assert joined["_merged_durable_rows"] == 2 and joined["_merged_turn_prefix"] == "one"
    assert unchanged["_db_persisted"] is True and unchanged["_merged_durable_rows"] == 2
    addressed = db.get_messages_as_conversation(
        "s", repair_alternation=True, include_row_ids=True
    )
    assert addressed[0]["_absorbed_row_ids"] == [addressed[0]["_row_id"] + 1]
    assert [m["content"] for m in db.get_messages("s")][:2] == ["one", "two"]  # rows unchanged
