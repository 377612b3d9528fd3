"""iot 0.22.2's session moves between two stores on SQLite and PostgreSQL (issue 29):
``export_session_for_move`` carries every row, ``import_moved_session`` writes it as the new
profile's with our import row code, and ``delete_moved_session`` deletes only what was proved
copied: an import into ANOTHER store, in this process, that found there every message and
usage row the source still holds. A row written after the export, a copy in the same store,
a copy missing a row: nothing deleted. Hostile payloads get typed errors and write nothing.
The release is the oracle in ``tests/hermes/test_real_iot_session_moves.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from sessionstore.api.session_db import SessionDB


@pytest.fixture
def src(store_url: str) -> Iterator[SessionDB]:
    database = SessionDB(url=store_url)
    yield database
    database.close()


@pytest.fixture
def dst(store_url: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SessionDB]:
    if store_url.startswith("sqlite"):
        url = f"sqlite:///{tmp_path}/target.db"
    else:
        url = request.getfixturevalue("second_pg_store_url")  # another store, at head
    database = SessionDB(url=url)
    yield database
    database.close()


def _session(db: SessionDB, session_id: str = "s") -> None:
    db.create_session(session_id, "telegram", system_prompt="SYS", session_key="k")
    db.set_session_title(session_id, f"Title {session_id}")
    first = db.append_message(session_id, "user", "ask\x00nul")
    db.append_message(session_id, "assistant", "answer")
    db.rewind_to_message(session_id, first)  # a rewound row moves too
    db.append_message(session_id, "user", "again")
    db.update_token_counts(session_id, input_tokens=5, output_tokens=2, model="m")
    db.end_session(session_id, "session_reset")  # a conversation generation


def _rows(db: SessionDB, session_id: str) -> int:
    statement = sa.text("SELECT COUNT(*) FROM messages WHERE session_id = :s")
    return int(db.store.read(lambda conn: conn.execute(statement, {"s": session_id}).scalar_one()))


def _generations(db: SessionDB) -> int:
    statement = sa.text("SELECT COUNT(*) FROM conversation_generations")
    return int(db.store.read(lambda conn: conn.execute(statement).scalar_one()))


def test_a_move_copies_every_row_then_deletes_the_source(src: SessionDB, dst: SessionDB) -> None:
    _session(src)
    src.create_session("child", "cli", parent_session_id="s")
    payload = src.export_session_for_move("s")
    assert payload is not None and len(payload["messages"]) == 3 and len(payload["usage"]) == 1
    assert payload["system_prompt"] == "SYS"
    assert dst.import_moved_session(payload, profile_name="ops") == "imported"
    moved = dst.get_session("s")
    assert moved is not None and moved["profile_name"] == "ops"
    assert moved["system_prompt"] == "SYS" and moved["title"] == "Title s"
    assert _rows(dst, "s") == 3 and dst.get_model_usage("s")[0]["input_tokens"] == 5
    generations = _generations(src)
    assert src.delete_moved_session("s") is True
    assert src.get_session("s") is None and _rows(src, "s") == 0
    child = src.get_session("child")
    assert child is not None and child["parent_session_id"] is None
    assert _generations(src) == generations == 1  # never deleted
    assert src.delete_moved_session("s") is False  # gone: nothing to delete


def test_a_row_written_after_the_export_keeps_the_source(src: SessionDB, dst: SessionDB) -> None:
    _session(src)
    payload = src.export_session_for_move("s")
    assert payload is not None
    assert dst.import_moved_session(payload, profile_name="ops") == "imported"
    src.append_message("s", "user", "late")  # not in the copy
    assert src.delete_moved_session("s") is False
    assert _rows(src, "s") == 4
    again = src.export_session_for_move("s")  # the next run: present, and now proved
    assert dst.import_moved_session(again, profile_name="ops") == "present"
    assert src.delete_moved_session("s") is False  # the target still lacks "late"


def test_a_copy_short_of_a_row_proves_nothing(src: SessionDB, dst: SessionDB) -> None:
    _session(src)
    payload = src.export_session_for_move("s")
    assert payload is not None
    short = {**payload, "messages": payload["messages"][:-1]}
    assert dst.import_moved_session(short, profile_name="ops") == "imported"
    assert src.delete_moved_session("s") is False and _rows(src, "s") == 3
    # A re-run finds it present; the target still lacks the row: still nothing deleted.
    assert dst.import_moved_session(payload, profile_name="ops") == "present"
    assert src.delete_moved_session("s") is False and _rows(src, "s") == 3


def test_a_copy_in_the_same_store_is_no_proof(src: SessionDB) -> None:
    _session(src)
    payload = src.export_session_for_move("s")
    assert src.import_moved_session(payload, profile_name="ops") == "present"
    assert src.delete_moved_session("s") is False and _rows(src, "s") == 3


def test_a_title_and_parent_follow_iots_rules(src: SessionDB, dst: SessionDB) -> None:
    _session(src, "p")
    src.create_session("s", "cli", parent_session_id="p")
    src.set_session_title("s", "x" * src.MAX_TITLE_LENGTH)
    dst.create_session("resident", "cli")
    dst.set_session_title("resident", "x" * src.MAX_TITLE_LENGTH)
    payload = src.export_session_for_move("s")
    assert dst.import_moved_session(payload, profile_name="ops") == "imported"
    moved = dst.get_session("s")
    assert moved is not None and moved["parent_session_id"] is None  # not here: dropped
    assert moved["title"] == "x" * (src.MAX_TITLE_LENGTH - 4) + " (s)"
    assert dst.get_session_title("resident") == "x" * src.MAX_TITLE_LENGTH


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        ([], TypeError), ({}, KeyError), ({"session": "s"}, TypeError),
        ({"session": {}}, TypeError), ({"session": {"id": "a\x00"}}, ValueError),
        ({"session": {"id": "m"}, "messages": "x"}, TypeError),
        ({"session": {"id": "m"}, "messages": [5]}, TypeError),
        ({"session": {"id": "m"}, "messages": [{"role": "user"}]}, ValueError),
        ({"session": {"id": "m"}, "messages": [{"id": True, "role": "user"}]}, ValueError),
    ],
)  # fmt: skip
def test_a_payload_of_another_shape_writes_nothing(
    dst: SessionDB, payload: Any, error: type[Exception]
) -> None:
    with pytest.raises(error):
        dst.import_moved_session(payload, profile_name="ops")
    with pytest.raises(TypeError):
        dst.import_moved_session({"session": {"id": "m", "source": "cli"}}, profile_name=5)  # type: ignore[arg-type]
    assert dst.get_session("m") is None


@pytest.mark.parametrize("hostile", ["", "nobody", "a\x00", "\ud800", 5, None, ["s"]])
def test_hostile_ids_export_and_delete_nothing(src: SessionDB, hostile: Any) -> None:
    _session(src)
    assert src.export_session_for_move(hostile) is None
    assert src.delete_moved_session(hostile) is False
    assert _rows(src, "s") == 3


def test_a_refused_delete_logs_the_id_s_start_on_one_line(
    src: SessionDB, caplog: pytest.LogCaptureFixture
) -> None:
    """The id is the caller's text: the warning quotes its start, escaped (no line of its own
    forged by a newline in it, no megabyte line for a megabyte id)."""
    hostile = "s\nERROR forged line " + "x" * 300_000
    with caplog.at_level("WARNING", logger="sessionstore"):
        assert src.delete_moved_session(hostile) is False
    [record] = [r for r in caplog.records if "not deleted" in r.getMessage()]
    message = record.getMessage()
    assert "\n" not in message and len(message) < 300, message[:400]
    assert "forged line" in message


def test_a_move_from_sqlite_into_postgresql_is_proved_too(
    migrated_sqlite_url: str, second_pg_store_url: str
) -> None:
    src, dst = SessionDB(url=migrated_sqlite_url), SessionDB(url=second_pg_store_url)
    try:
        _session(src)  # its NUL is U+FFFD in PostgreSQL: the same row, as each database holds it
        src.append_message("s", "user", [{"type": "text", "text": "multi"}])
        payload = src.export_session_for_move("s")
        assert dst.import_moved_session(payload, profile_name="ops") == "imported"
        assert src.delete_moved_session("s") is True and _rows(dst, "s") == 4
    finally:
        src.close()
        dst.close()


def test_the_copy_is_checked_again_at_the_delete(src: SessionDB, dst: SessionDB) -> None:
    _session(src)
    payload = src.export_session_for_move("s")
    assert dst.import_moved_session(payload, profile_name="ops") == "imported"
    dst.delete_session("s")  # the copy went before the source was deleted
    assert src.delete_moved_session("s") is False and _rows(src, "s") == 3
    assert dst.import_moved_session(payload, profile_name="ops") == "imported"
    dst.close()  # a closed target proves nothing
    assert src.delete_moved_session("s") is False and _rows(src, "s") == 3
