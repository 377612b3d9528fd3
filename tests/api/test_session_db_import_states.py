"""``import_sessions`` writes each message back as it was exported, on SQLite and PostgreSQL:
our export holds every row (rewound and compaction-archived ones too), and an import that
wrote them all live brought undone turns back into the model's context. A payload that says
nothing of a row's state (Hermes's export, live rows only) is imported live, as in Hermes."""

from __future__ import annotations

from typing import Any

import pytest

from sessionstore.api.session_db import SessionDB


@pytest.fixture
def db(rewound_db: SessionDB) -> SessionDB:
    return rewound_db  # "two" and what follows are undone (tests/api/conftest.py)


def states(db: SessionDB) -> list[tuple[str, int, int]]:
    return [(m["content"], m["active"], m["compacted"])
            for m in db.get_messages("s", include_inactive=True)]  # fmt: skip


def reimported(db: SessionDB, exported: dict[str, Any]) -> dict[str, Any]:
    assert db.delete_session("s")
    return db.import_sessions([exported])


def test_an_exported_session_comes_back_with_its_rewound_rows_still_undone(db: SessionDB) -> None:
    before = states(db)
    assert [text for text, active, _ in before if not active] == [
        "two", "re two", "three", "re three"]
    exported = db.export_session("s")
    assert exported is not None

    assert reimported(db, exported)["imported"] == 1

    assert states(db) == before
    assert [m["content"] for m in db.get_messages("s")] == ["one", "re one"]
    session = db.get_session("s")
    assert session is not None and session["message_count"] == 2


def test_a_compaction_archived_row_stays_archived(db: SessionDB) -> None:
    exported = db.export_session("s")
    assert exported is not None
    exported["messages"][1].update(active=0, compacted=1)  # "re one", archived by a compaction

    reimported(db, exported)

    assert states(db)[1] == ("re one", 0, 1)
    assert [m["content"] for m in db.get_messages("s")] == ["one"]


def test_a_payload_that_says_nothing_of_states_is_imported_live(db: SessionDB) -> None:
    exported = db.export_session("s", include_inactive=False)  # Hermes's shape: live rows
    assert exported is not None
    for message in exported["messages"]:
        message.pop("active", None)
        message.pop("compacted", None)

    reimported(db, exported)

    assert states(db) == [("one", 1, 0), ("re one", 1, 0)]


@pytest.mark.parametrize("value", ["0", 2, -1, 0.5, [], "yes"])
def test_a_state_that_is_not_0_or_1_is_that_sessions_error(db: SessionDB, value: Any) -> None:
    exported = db.export_session("s")
    assert exported is not None
    exported["messages"][0]["active"] = value
    assert db.delete_session("s")

    result = db.import_sessions([exported])

    assert result["ok"] is False and result["imported"] == 0
    assert "messages[0].active must be 0 or 1" in result["errors"][0]["error"]
    assert db.get_session("s") is None
