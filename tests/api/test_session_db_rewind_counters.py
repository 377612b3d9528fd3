"""After a rewind the session's counters are its live rows' (iot 0.21.3 and later; decided in
``sessionstore.sessions.rewind``), on SQLite and PostgreSQL: ``restore_rewound`` counts them
back, a session rewound whole is not "empty", and doctor takes both rules as healthy."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sessionstore.api.session_db import SessionDB
from sessionstore.ops import doctor


@pytest.fixture
def db(store_url: str) -> Iterator[SessionDB]:
    database = SessionDB(url=store_url)
    database.create_session("s", "cli")
    calls = [{"id": "c1", "type": "function"}, {"id": "c2", "type": "function"}]
    database.append_messages_batch("s", [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "content": "ok", "tool_call_id": "c1"},
        {"role": "tool", "content": "ok", "tool_call_id": "c2"},
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": "second"},
        {"role": "assistant", "content": None, "tool_calls": calls[:1]},
    ])  # fmt: skip
    yield database
    database.close()


def counters(db: SessionDB) -> tuple[int, int]:
    row = db.get_session("s")
    assert row is not None
    return row["message_count"], row["tool_call_count"]


def ids(db: SessionDB) -> list[int]:
    return [m["id"] for m in db.get_messages("s")]


def test_a_rewind_counts_the_live_rows_and_a_restore_counts_them_back(db: SessionDB) -> None:
    assert counters(db) == (7, 3)
    second = ids(db)[5]
    assert db.rewind_to_message("s", second)["rewound_count"] == 2
    assert counters(db) == (5, 2)
    assert doctor.diagnose(db.store).healthy
    assert db.restore_rewound("s", second) == 2
    assert counters(db) == (7, 3)
    db.rewind_to_message("s", ids(db)[0])
    assert counters(db) == (0, 0)
    assert doctor.diagnose(db.store).healthy


def test_a_session_rewound_whole_is_not_empty(db: SessionDB) -> None:
    db.rewind_to_message("s", ids(db)[0])
    db.end_session("s", "user_exit")
    assert counters(db) == (0, 0)
    assert db.count_empty_sessions() == 0 and db.delete_empty_sessions() == 0
    assert len(db.get_messages("s", include_inactive=True)) == 7
    db.create_session("e", "cli")
    db.end_session("e", "user_exit")
    assert db.count_empty_sessions() == 1 and db.delete_empty_sessions() == 1


def test_doctor_still_takes_the_older_rule(db: SessionDB) -> None:
    """Hermes 0.18/0.19 and iot 0.20 left the counters after a rewind: still healthy."""
    db.rewind_to_message("s", ids(db)[5])
    db.store.write(lambda conn: conn.exec_driver_sql(
        "UPDATE sessions SET message_count = 7, tool_call_count = 3"))  # fmt: skip
    assert doctor.diagnose(db.store).healthy
    db.store.write(lambda conn: conn.exec_driver_sql("UPDATE sessions SET message_count = 6"))
    assert not doctor.diagnose(db.store).healthy
