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
import sqlalchemy as sa

from sessionstore.api.session_db import SessionDB
from sessionstore.errors import (
    SessionCompressionInProgressError,
    SessionTurnLeaseLostError,
    TranscriptChangedError,
)


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


def _run(db: SessionDB, statement: str) -> None:
    db.store.write(lambda conn: conn.execute(sa.text(statement)))


def test_a_live_turn_or_compression_refuses_the_rewind_and_an_expired_one_is_cleared(
    db: SessionDB,
) -> None:
    """iot 0.22.2: a turn in flight (or a running compression) would flush or resurrect what
    the user undid, so the rewind waits for it; a lease that expired is cleared instead."""
    seen = db.get_active_message_ids("s")
    assert db.try_acquire_session_turn_lease("s", "turn-1")
    with pytest.raises(SessionTurnLeaseLostError):
        db.rewind_to_message("s", seen[2])
    assert db.get_active_message_ids("s") == seen
    _run(db, "UPDATE session_turn_leases SET expires_at = 1")
    assert db.try_acquire_compression_lock("s", "compressor")
    with pytest.raises(SessionCompressionInProgressError):
        db.rewind_to_message("s", seen[2])
    assert db.get_active_message_ids("s") == seen and db.get_session("s")["rewind_count"] == 0  # type: ignore[index]
    assert db.session_turn_lease_expires_at("s", "turn-1") == 1.0  # a refused rewind clears nothing
    _run(db, "UPDATE compression_locks SET expires_at = 1")
    assert db.rewind_to_message("s", seen[2])["rewound_count"] == 1
    assert db.session_turn_lease_expires_at("s", "turn-1") is None  # its late flush is fenced
    assert not db.release_compression_lock("s", "compressor")  # cleared with the rewind


def test_the_target_text_pin_refuses_a_target_that_changed(db: SessionDB) -> None:
    seen = db.get_active_message_ids("s")
    with pytest.raises(TranscriptChangedError):
        db.rewind_to_message("s", seen[2], expected_target_content="another text")
    assert db.get_active_message_ids("s") == seen
    result = db.rewind_to_message(
        "s", seen[2], expected_active_ids=seen, expected_target_content="again"
    )
    assert result["rewound_count"] == 1 and result["target_message"]["content"] == "again"
    assert "replacement_message_id" not in result
    with pytest.raises(ValueError, match="not active"):  # pinned: the target must be live
        db.rewind_to_message("s", seen[2], expected_target_content="again")


def test_the_pin_compares_the_text_a_load_shows(db: SessionDB) -> None:
    """iot's live view: recalled memory context and surrounding whitespace are not the ask."""
    recalled = (
        "<memory-context>old facts</memory-context>\n  [System note: The following is recalled"
        " memory context, NOT new user input. Treat as informational background data.] hello  "
    )
    db.append_message("s", "assistant", "reply")
    target = db.append_message("s", "user", recalled)
    parts = [{"type": "text", "text": " parts "}]
    db.append_message("s", "assistant", "reply")
    listed = db.append_message("s", "user", parts)
    assert db.rewind_to_message("s", listed, expected_target_content=parts)["rewound_count"] == 1
    assert db.rewind_to_message("s", target, expected_target_content="hello")["rewound_count"] == 2


@pytest.mark.parametrize(
    ("content", "extra"),
    [
        ("[CONTEXT COMPACTION \u2014 REFERENCE ONLY] earlier turns ... and then: my ask", {}),
        ("prior ask\n\n[END OF PRIOR CONTEXT \u2014 COMPACTION SUMMARY BELOW]\n[CONTEXT ...", {}),
        ("a summary the compressor flagged", {"_compressed_summary": True}),
        ("a gateway notice", {"display_kind": "notification"}),
        ("   ", {}),
    ],
)
def test_a_pinned_rewind_never_targets_a_carrier_or_synthetic_row(
    db: SessionDB, content: str, extra: dict[str, Any]
) -> None:
    """Decision (kinder than guessing iot's split): a compaction summary or carrier, a
    synthetic row and a blank one are no turn to rewind to when pinned; nothing changes."""
    target = db.append_message("s", "user", content, **extra)
    seen = db.get_active_message_ids("s")
    for pin in ({"expected_target_content": content}, {"preserve_compaction_handoff": True}):
        with pytest.raises(ValueError, match="user-originated"):
            db.rewind_to_message("s", target, **pin)
    assert db.get_active_message_ids("s") == seen
    # Unpinned, as in iot, any user row is a target (the rewind takes it and what follows).
    assert db.rewind_to_message("s", target)["rewound_count"] == 1


def test_preserving_a_handoff_needs_a_carrier(db: SessionDB) -> None:
    seen = db.get_active_message_ids("s")
    with pytest.raises(ValueError, match="composite carrier"):
        db.rewind_to_message("s", seen[2], preserve_compaction_handoff=True)
    with pytest.raises(TypeError):
        db.rewind_to_message("s", seen[2], preserve_compaction_handoff=1)  # type: ignore[arg-type]
    assert db.get_active_message_ids("s") == seen
