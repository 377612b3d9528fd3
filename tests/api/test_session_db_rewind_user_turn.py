"""iot 0.22.2's ``rewind_user_turn`` (its ``/undo`` and ``/retry``) on SQLite and PostgreSQL
(issue 29, item 3): user turns counted on the live replay, the chosen one rewound with the live
ids and its text as fences, a caller's in-memory history checked against the store, a
missing target a ``RewindTargetUnavailableError`` (iot's class too inside an iot process),
and nothing rewound whenever it refuses. Compaction carriers are never a turn here (our
decision, :mod:`sessionstore.api.rewind_turn`). The release is the oracle in
``tests/hermes/test_real_iot_rewind_user_turn.py``.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest

from sessionstore.api.session_db import SessionDB
from sessionstore.errors import RewindTargetUnavailableError, SessionTurnLeaseLostError

SUMMARY = "[CONTEXT COMPACTION \u2014 REFERENCE ONLY] earlier turns"
TURNS = (
    ("user", "  first ask "), ("assistant", "first answer"), ("user", "second ask"),
    ("assistant", "second answer"), ("user", "third ask"), ("assistant", "third answer"),
)  # fmt: skip


@pytest.fixture
def db(store_url: str) -> Iterator[SessionDB]:
    database = SessionDB(url=store_url)
    database.create_session("s", "cli")
    for role, text in TURNS:
        database.append_message("s", role, text)
    yield database
    database.close()


def live(db: SessionDB) -> list[str]:
    return [message["content"] for message in db.get_messages("s")]


def test_undo_rewinds_the_newest_turns_and_returns_what_to_install(db: SessionDB) -> None:
    outcome = db.rewind_user_turn("s", -1)
    assert (outcome.rewound_count, outcome.turns_undone, outcome.live_text) == (2, 1, "third ask")
    # The replay's messages (a load strips a user's text), each with its row's id.
    assert [m["content"] for m in outcome.prefix] == [
        "first ask", "first answer", "second ask", "second answer"
    ]
    assert [m["_row_id"] for m in outcome.prefix] == db.get_active_message_ids("s")
    assert outcome.live_view["content"] == "third ask" and "_db_persisted" not in outcome.live_view
    assert live(db) == [text for _, text in TURNS[:4]]
    assert db.get_session("s")["rewind_count"] == 1  # type: ignore[index]
    # -5 clamps to the oldest turn: all of it goes, the stored text is the pin.
    outcome = db.rewind_user_turn("s", -5)
    assert (outcome.rewound_count, outcome.turns_undone, outcome.prefix) == (4, 2, [])
    assert outcome.live_text == "first ask" and live(db) == []


def test_a_turn_by_its_ordinal_and_a_target_that_is_not_there(db: SessionDB) -> None:
    assert db.rewind_user_turn("s", 1).turns_undone == 2
    assert live(db) == [text for _, text in TURNS[:2]]
    for ordinal in (1, 7):
        with pytest.raises(RewindTargetUnavailableError):
            db.rewind_user_turn("s", ordinal)
    with pytest.raises(RewindTargetUnavailableError):
        db.rewind_user_turn("nobody", -1)
    with pytest.raises(RewindTargetUnavailableError):  # no carrier is ever a target here
        db.rewind_user_turn("s", -1, require_composite=True)
    assert live(db) == [text for _, text in TURNS[:2]]
    with pytest.raises(TypeError):
        db.rewind_user_turn("s", "0")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        db.rewind_user_turn("s", 0, warm_history="not a history")  # type: ignore[arg-type]


def test_an_unanswered_ask_and_the_next_are_one_turn_rewound_from_the_first(
    db: SessionDB,
) -> None:
    db.append_message("s", "user", "an ask that got no answer")
    db.append_message("s", "user", "the next ask")
    outcome = db.rewind_user_turn("s", -1)
    assert outcome.live_text == "an ask that got no answer\n\nthe next ask"
    assert outcome.rewound_count == 2 and live(db)[-1] == "third answer"


def test_the_warm_history_must_agree_with_the_store(db: SessionDB) -> None:
    warm: list[dict[str, Any]] = [
        {"role": role, "content": text, "reasoning": "kept"} for role, text in TURNS
    ]
    fewer = warm[:4]
    edited = [*warm[:4], {"role": "user", "content": "edited ask"}, warm[5]]
    for history in (fewer, edited):
        with pytest.raises(RuntimeError):
            db.rewind_user_turn("s", -1, warm_history=history)
        assert len(live(db)) == 6
    scaffolding = {"role": "user", "content": "retry", "_empty_recovery_synthetic": True}
    outcome = db.rewind_user_turn(
        "s", -1, warm_history=[*warm, scaffolding], adopt_row_ids=True
    )
    assert outcome.prefix == [
        {**message, "_row_id": row_id}
        for message, row_id in zip(warm[:4], db.get_active_message_ids("s"), strict=True)
    ]  # the caller's richer messages, with their rows' ids
    assert "_row_id" not in warm[0]  # copies are stamped, as in iot; the caller's stay


def test_a_retry_needs_text_it_can_send_again(db: SessionDB) -> None:
    db.append_message("s", "user", [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}])
    assert db.rewind_user_turn("s", -1, require_retryable=True).live_text == "ab"
    image = {"type": "image_url", "image_url": {"url": "data:x"}}
    db.append_message("s", "user", [{"type": "text", "text": "see"}, image])
    with pytest.raises(ValueError, match="media"):
        db.rewind_user_turn("s", -1, require_retryable=True)
    assert live(db)[-1][1]["type"] == "image_url"  # nothing rewound
    assert db.rewind_user_turn("s", -1).live_text == "see"


def test_a_turn_in_flight_refuses_the_rewind(db: SessionDB) -> None:
    assert db.try_acquire_session_turn_lease("s", "turn-1")
    with pytest.raises(SessionTurnLeaseLostError):
        db.rewind_user_turn("s", -1)
    assert len(live(db)) == 6


def test_a_compaction_carrier_is_no_turn(db: SessionDB) -> None:
    """Decision: the summary and the ask it carries stay; the turns after it are the ones
    /undo reaches."""
    db.append_message("s", "user", f"{SUMMARY}\n\nthe ask it carries")
    db.append_message("s", "assistant", "an answer")
    db.append_message("s", "user", "a later ask")
    outcome = db.rewind_user_turn("s", -1)
    assert outcome.live_text == "a later ask" and outcome.turns_undone == 1
    outcome = db.rewind_user_turn("s", -1)
    assert outcome.live_text == "third ask" and live(db)[-1] == "second answer"


def test_inside_iot_the_error_is_iots_class_too(
    db: SessionDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    """iot's gateway catches ``hermes_state_rewind.RewindTargetUnavailableError`` by class
    (and lets any other ``ValueError`` through to the user)."""
    iot = types.ModuleType("hermes_state_rewind")

    class RewindTargetUnavailableErrorOfIot(ValueError):
        pass

    iot.RewindTargetUnavailableError = RewindTargetUnavailableErrorOfIot  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "hermes_state_rewind", iot)
    with pytest.raises(RewindTargetUnavailableErrorOfIot) as raised:
        db.rewind_user_turn("s", 9)
    assert isinstance(raised.value, RewindTargetUnavailableError)
    monkeypatch.delitem(sys.modules, "hermes_state_rewind")
    with pytest.raises(RewindTargetUnavailableError) as plain:
        db.rewind_user_turn("s", 9)
    assert not isinstance(plain.value, RewindTargetUnavailableErrorOfIot)
