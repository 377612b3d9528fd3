"""iot 0.22.2's display history on SQLite and PostgreSQL (issue 29, item 3): with
``include_compacted`` the reads give what a user still sees of a compacted conversation (live
and compaction-archived rows, each logical message once, shown by its live copy at its first
place, model-only rows left out), paged after the dedupe; exports take the same keyword, and
``delete_session(expected_display_messages=...)`` deletes only while each named session still
shows exactly the history the caller exported. The release is the oracle in
``tests/hermes/test_real_iot_display_history.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from store_sql import run

from sessionstore.api.session_db import SessionDB
from sessionstore.sql.compaction_handoff import LEGACY_SUMMARY_PREFIX, SUMMARY_END_MARKER

SUMMARY = "[CONTEXT COMPACTION \u2014 REFERENCE ONLY] what came before"


@pytest.fixture
def db(store_url: str) -> Iterator[SessionDB]:
    """``s``: four turns compacted (archived, the last two carried forward as live copies
    after the summary), then a model-only note; ``other`` untouched."""
    database = SessionDB(url=store_url)
    database.create_session("s", "cli")
    for stamp, (role, text) in enumerate(
        (("user", "a"), ("assistant", "b"), ("user", "c"), ("assistant", "d")), start=1
    ):
        database.append_message("s", role, text, timestamp=float(stamp))
    run(database, "UPDATE messages SET active = 0, compacted = 1 WHERE session_id = 's'")
    database.append_message("s", "user", SUMMARY, timestamp=5.0, _compressed_summary=True)
    database.append_message("s", "user", "c", timestamp=3.0)
    database.append_message("s", "assistant", "d", timestamp=4.0)
    database.append_message("s", "user", "for the model", timestamp=6.0,
                            display_metadata={"model_only": True})  # fmt: skip
    database.create_session("other", "cli")
    database.append_message("other", "user", "x")
    yield database
    database.close()


def shown(messages: list[dict[str, Any]]) -> list[tuple[Any, Any]]:
    return [(message.get("id", message.get("_row_id")), message["content"]) for message in messages]


HISTORY = [(1, "a"), (2, "b"), (6, "c"), (7, "d"), (5, SUMMARY)]


def test_the_display_history_shows_each_message_once_by_its_live_copy(db: SessionDB) -> None:
    assert shown(db.get_messages("s", include_compacted=True)) == HISTORY
    assert shown(db.get_messages("s")) == [(5, SUMMARY), (6, "c"), (7, "d"), (8, "for the model")]
    assert shown(db.get_messages("s", include_compacted=True, offset=1, limit=2)) == HISTORY[1:3]
    assert shown(db.get_messages("s", include_compacted=True, limit=2, latest=True)) == HISTORY[3:]
    assert shown(db.get_messages("s", include_compacted=True, offset=4)) == HISTORY[4:]
    # Rewound rows join only with include_inactive, deduped the same way.
    rewound = db.append_message("s", "user", "undone", timestamp=7.0)
    db.rewind_to_message("s", rewound)
    assert shown(db.get_messages("s", include_compacted=True)) == HISTORY
    assert shown(db.get_messages("s", include_compacted=True, include_inactive=True)) == [
        *HISTORY, (rewound, "undone")
    ]
    replay = db.get_messages_as_conversation("s", include_compacted=True, include_row_ids=True)
    assert shown(replay) == HISTORY
    assert db.get_messages("nobody", include_compacted=True) == []


def test_the_display_history_takes_no_keyset_paging_and_no_non_bool(db: SessionDB) -> None:
    with pytest.raises(ValueError, match="include_compacted"):
        db.get_messages("s", after_id=1, include_compacted=True)
    with pytest.raises(TypeError):
        db.get_messages("s", include_compacted=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        db.export_session("s", include_compacted="yes")  # type: ignore[arg-type]


def test_a_lineage_replay_dedupes_its_sessions_as_one(db: SessionDB) -> None:
    db.end_session("s", "compression")
    db.create_session("s2", "cli", parent_session_id="s")
    db.append_message("s2", "user", "c", timestamp=3.0)  # the carried ask, copied on
    db.append_message("s2", "user", "e", timestamp=8.0)
    replay = db.get_messages_as_conversation(
        "s2", include_ancestors=True, include_compacted=True, include_row_ids=True
    )
    assert [message["content"] for message in replay] == ["a", "b", "c", "d", SUMMARY, "e"]


def test_exports_take_the_display_history_on_request(db: SessionDB) -> None:
    every_row = db.export_session("s")
    assert every_row is not None and len(every_row["messages"]) == 8  # ours: every row
    display = db.export_session("s", include_compacted=True)
    assert display is not None and shown(display["messages"]) == HISTORY
    lineage = db.export_session_lineage("s", include_compacted=True)
    assert lineage is not None and shown(lineage["messages"]) == HISTORY
    assert lineage["message_count"] == len(HISTORY)
    exported = {one["id"]: one for one in db.export_all(include_compacted=True)}
    assert shown(exported["s"]["messages"]) == HISTORY and len(exported["other"]["messages"]) == 1


def test_a_verified_delete_takes_only_the_history_that_was_exported(db: SessionDB) -> None:
    exported = db.get_messages("s", include_compacted=True)
    other = db.get_messages("other", include_compacted=True)
    assert db.delete_session("s", expected_display_messages={"s": exported[:-1]}) is False
    assert db.delete_session("s", expected_display_messages={"s": exported, "gone": []}) is False
    db.append_message("s", "assistant", "a reply that landed after the export")
    assert db.delete_session("s", expected_display_messages={"s": exported}) is False
    assert db.get_session("s") is not None
    exported = db.get_messages("s", include_compacted=True)
    assert db.delete_session(
        "s", expected_delete_ids=["s"], expected_display_messages={"s": exported, "other": other}
    )
    assert db.get_session("s") is None and db.get_session("other") is not None


@pytest.mark.parametrize(
    "fence", ["s", ["s"], {"s": "abc"}, {"s": {"id": 1}}, {1: []}, {"s": 5}]
)
def test_a_hostile_display_fence_is_a_type_error_and_nothing_is_deleted(
    db: SessionDB, fence: Any
) -> None:
    with pytest.raises(TypeError):
        db.delete_session("s", expected_display_messages=fence)
    assert db.get_session("s") is not None


def test_a_display_fence_cannot_fence_a_whole_chain(db: SessionDB) -> None:
    exported = db.get_messages("s", include_compacted=True)
    with pytest.raises(ValueError, match="chain"):
        db.delete_session(
            "s", expected_display_messages={"s": exported}, include_compression_chain=True
        )
    assert db.get_session("s") is not None


def test_a_resume_shows_the_display_history_and_feeds_the_model_the_live_rows(
    db: SessionDB,
) -> None:
    # iot 0.22.2's gateway paints a resumed chat from the display history: without the
    # archived rows the user's own turns read as deleted down to the summary.
    model, display = db.get_resume_conversations("s")
    assert shown(display) == HISTORY
    assert shown(model) == [(5, SUMMARY), (6, "c"), (7, "d"), (8, "for the model")]
    warm = db.get_messages_as_conversation(
        "s", include_ancestors=True, include_compacted=True, include_row_ids=True
    )
    assert shown(display) == shown(warm)


def test_a_resume_and_its_ancestor_prefix_show_an_ancestors_archived_rows(
    db: SessionDB,
) -> None:
    db.end_session("s", "compression")
    db.create_session("s2", "cli", parent_session_id="s")
    db.append_message("s2", "user", "e", timestamp=8.0)
    model, display = db.get_resume_conversations("s2")
    assert [message["content"] for message in display] == ["a", "b", "c", "d", SUMMARY, "e"]
    assert [message["content"] for message in model] == ["e"]
    prefix = db.get_ancestor_display_prefix("s2")
    assert [message["content"] for message in prefix] == ["a", "b", "c", "d", SUMMARY]
    assert all("_row_id" not in message for message in prefix)


@pytest.mark.parametrize(
    "ask",
    ["the real ask", [{"type": "text", "text": "inspect this"},
                      {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}]],
    ids=["text", "multimodal"],
)  # fmt: skip
def test_a_continuations_carrier_replaces_the_ask_it_repeats(db: SessionDB, ask: Any) -> None:
    # iot 0.22.2's rotation stores the pending ask in the parent and again inside the child's
    # compaction carrier: a lineage replay showed the user's ask twice, the prefix once more.
    summary = f"{LEGACY_SUMMARY_PREFIX} what happened\n{SUMMARY_END_MARKER}\n\n"
    carrier = (
        summary + ask if isinstance(ask, str) else [{"type": "text", "text": summary}, *ask]
    )
    db.create_session("p", "cli")
    db.append_message("p", "user", "first")
    db.append_message("p", "assistant", "answer")
    db.append_message("p", "user", ask)
    db.end_session("p", "compression")
    db.create_session("c", "cli", parent_session_id="p")
    carrier_id = db.append_message("c", "user", carrier)
    model, display = db.get_resume_conversations("c")
    assert [message.get("_row_id") for message in display][-1] == carrier_id
    assert [message["content"] for message in display][:-1] == ["first", "answer"]
    assert model[-1]["_row_id"] == carrier_id
    warm = db.get_messages_as_conversation("c", include_ancestors=True, include_row_ids=True)
    assert [message["_row_id"] for message in warm] == [m["_row_id"] for m in display]
    prefix = db.get_ancestor_display_prefix("c")
    assert [message["content"] for message in prefix] == ["first", "answer"]
    # an ordinary repeat still gives way to the ask it repeats
    db.create_session("c2", "cli", parent_session_id="p")
    db.append_message("c2", "user", ask)
    replay = db.get_messages_as_conversation("c2", include_ancestors=True)
    expected = ["first", "answer", ask] if isinstance(ask, str) else ["first", "answer", ask, ask]
    assert [message["content"] for message in replay] == expected
