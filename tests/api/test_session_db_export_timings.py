"""An export's ``timings`` (iot 0.22.2) and the ``last_active`` of ``search_sessions`` and
``export_all`` rows, with the clocks a salvaged file holds. iot's own answers to the same calls
are compared in ``tests/hermes/test_real_iot_exports.py``."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st
from store_library import damaging_transaction

from sessionstore.api.export_timings import export_timings
from sessionstore.api.session_db import SessionDB

CALL = {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}


def test_an_export_times_its_messages_without_their_text(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.append_message("s", "user", "secret ask", timestamp=1_700_000_000.0)
    db.append_message("s", "assistant", "", tool_calls=[CALL], timestamp=1_700_000_002.5)
    db.append_message("s", "tool", "secret output", tool_call_id="c1", tool_name="ls",
                      timestamp=1_700_000_002.0)  # fmt: skip
    db.append_message("s", "assistant", "secret answer", timestamp=1_700_000_012.0)
    ids = [message["id"] for message in db.get_messages("s")]

    exported = db.export_session("s")

    assert exported is not None
    assert list(exported)[-2:] == ["messages", "timings"]
    assert exported["timings"] == {
        "source": "message_timestamps",
        "available": True,
        "complete": False,
        "unavailable_reason": None,
        "message_timestamps": {"available": 4, "missing": 0},
        "first_message_at": "2023-11-14T22:13:20+00:00",
        "last_message_at": "2023-11-14T22:13:32+00:00",
        "wall_clock_ms": 12_000,
        "largest_gap_ms": 10_000,
        "role_counts": {"user": 1, "assistant": 2, "tool": 1},
        "tool_result_count": 1,
        "tool_calls_emitted": 1,
        "intervals": [
            {"from_message_id": ids[0], "to_message_id": ids[1], "from_role": "user",
             "to_role": "assistant", "gap_ms": 2_500},
            # A clock that stepped back (the tool's result stamped before its call) is no gap.
            {"from_message_id": ids[1], "to_message_id": ids[2], "from_role": "assistant",
             "to_role": "tool", "gap_ms": 0},
            {"from_message_id": ids[2], "to_message_id": ids[3], "from_role": "tool",
             "to_role": "assistant", "gap_ms": 10_000},
        ],
    }  # fmt: skip
    assert "secret" not in repr(exported["timings"])


def test_an_empty_session_has_no_timings_available(db: SessionDB) -> None:
    db.create_session("s", "cli")

    timings = db.export_session("s")["timings"]  # type: ignore[index]

    assert timings["available"] is False
    assert timings["unavailable_reason"] == "no_timestamped_messages"
    assert timings["first_message_at"] is None and timings["wall_clock_ms"] is None
    assert timings["largest_gap_ms"] is None and timings["intervals"] == []


def test_a_lineage_export_times_every_segment_together(db: SessionDB) -> None:
    db.create_session("root", "cli")
    db.append_message("root", "user", "a", timestamp=1_700_000_000.0)
    db.end_session("root", "compression")
    db.create_session("tip", "cli", parent_session_id="root")
    db.append_message("tip", "user", "b", timestamp=1_700_000_030.0)

    lineage = db.export_session_lineage("tip")

    assert lineage is not None
    assert lineage["timings"]["wall_clock_ms"] == 30_000
    assert lineage["timings"]["message_timestamps"] == {"available": 2, "missing": 0}
    assert [segment["timings"]["wall_clock_ms"] for segment in lineage["segments"]] == [0, 0]


@pytest.fixture
def salvaged_url(migrated_sqlite_url: str) -> str:
    """Session ``s`` whose messages' clocks are what a salvaged SQLite file holds: text that
    is no number, bytes, an infinity, milliseconds, a moment before 1970, and one good one."""
    db = SessionDB(url=migrated_sqlite_url)
    db.create_session("s", "cli")
    for text in ("words", "bytes", "infinity", "milliseconds", "before 1970", "good"):
        db.append_message("s", "user", text, timestamp=1_700_000_000.0)
    db.close()
    with damaging_transaction(migrated_sqlite_url) as conn:
        for content, clock in (("words", "yesterday"), ("bytes", b"\xff"),
                               ("infinity", math.inf), ("milliseconds", 1.7e12),
                               ("before 1970", -1.0)):  # fmt: skip
            conn.execute(
                sa.text("UPDATE messages SET timestamp = :clock WHERE content = :content"),
                {"clock": clock, "content": content},
            )
    return migrated_sqlite_url


def test_clocks_that_cannot_be_trusted_count_as_missing(salvaged_url: str) -> None:
    db = SessionDB(url=salvaged_url)
    try:
        timings = db.export_session("s")["timings"]  # type: ignore[index]
        every = db.export_all()
    finally:
        db.close()

    assert timings["message_timestamps"] == {"available": 1, "missing": 5}
    assert timings["wall_clock_ms"] == 0 and timings["intervals"] == []
    assert every[0]["timings"] == timings


def test_search_sessions_and_export_all_rows_carry_the_listings_last_active(
    db: SessionDB,
) -> None:
    db.create_session("old", "cli")
    db.append_message("old", "user", "x", timestamp=1_700_000_500.0)
    db.create_session("new", "telegram")
    db.append_message("new", "user", "y", timestamp=1_700_000_900.0)
    db.create_session("none", "cli")
    listed = {row["id"]: row["last_active"] for row in db.list_sessions_rich(limit=10)}

    used = db.search_sessions()
    exported = db.export_all()

    assert [row["id"] for row in used][1:] == ["new", "old"]  # "none" started just now
    assert {row["id"]: row["last_active"] for row in used} == listed
    assert listed["old"] == 1_700_000_500.0 and listed["new"] == 1_700_000_900.0
    assert all(list(row)[-1] == "last_active" for row in used)
    assert [row["id"] for row in exported] == [row["id"] for row in used]
    assert [row["last_active"] for row in exported] == [row["last_active"] for row in used]
    assert list(exported[0])[-3:] == ["last_active", "messages", "timings"]
    assert [row["id"] for row in db.search_sessions("telegram")] == ["new"]
    assert db.search_sessions(["nowhere"]) == []


def test_an_export_with_timings_and_last_active_imports_back(
    db: SessionDB, tmp_path: Any
) -> None:
    db.create_session("s", "cli")
    db.append_message("s", "user", "hi", timestamp=1_700_000_000.0)
    db.append_message("s", "assistant", "yo", timestamp=1_700_000_001.0)
    exported = db.export_all()
    again = SessionDB(db_path=tmp_path / "again.db")
    try:
        assert again.import_sessions(exported)["imported"] == 1
        restored = again.export_all()
    finally:
        again.close()

    assert restored[0]["timings"] == exported[0]["timings"]
    assert [m["content"] for m in restored[0]["messages"]] == ["hi", "yo"]
    assert "timings" not in (db.get_session("s") or {})


CLOCKS = st.one_of(
    st.none(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.text(max_size=12),
    st.binary(max_size=6),
    st.booleans(),
    st.floats(min_value=0, max_value=4_200_000_000),
)
MESSAGES = st.lists(
    st.fixed_dictionaries({
        "id": st.integers(min_value=1, max_value=10**6),
        "role": st.one_of(st.sampled_from(["user", "assistant", "tool", ""]), st.none()),
        "timestamp": CLOCKS,
        "tool_calls": st.one_of(st.none(), st.lists(st.just(CALL), max_size=3), st.just("x")),
    }),
    max_size=12,
)  # fmt: skip


def _trusted(clock: Any) -> float | None:
    """The oracle's own reading of a clock (iot's ``coerce_epoch``, written out again)."""
    if clock is None or clock == "":
        return None
    try:
        value = float(clock)
    except (TypeError, ValueError, OverflowError):
        return None
    return value if 0.0 <= value <= 4_200_000_000.0 else None


@settings(max_examples=150, deadline=None)
@given(MESSAGES)
def test_timings_of_any_messages_add_up(messages: list[dict[str, Any]]) -> None:
    timings = export_timings(messages)

    trusted = [clock for m in messages if (clock := _trusted(m["timestamp"])) is not None]
    assert timings["message_timestamps"] == {
        "available": len(trusted), "missing": len(messages) - len(trusted)
    }  # fmt: skip
    assert len(timings["intervals"]) == max(len(trusted) - 1, 0)
    assert all(gap["gap_ms"] >= 0 for gap in timings["intervals"])
    assert sum(timings["role_counts"].values()) == len(messages)
    if trusted:
        first = datetime.fromisoformat(timings["first_message_at"])
        assert first == datetime.fromtimestamp(trusted[0], tz=timezone.utc)
        assert timings["wall_clock_ms"] == max(0, round((trusted[-1] - trusted[0]) * 1000))
    else:
        assert timings["available"] is False and timings["wall_clock_ms"] is None
