"""iot 0.22.2's gateway backend heartbeats on SQLite and PostgreSQL (issue 29):
``register_backend_heartbeat`` (an upsert), ``clear_backend_heartbeat``,
``prune_stale_heartbeats`` (never a fresh row, never a session, a message or a conversation
generation) and ``list_backend_heartbeats``; hostile inputs are typed errors with nothing
written. The release is the oracle in ``tests/hermes/test_real_iot_backend_heartbeats.py``.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from legacy_v18_v22 import build_v22_db

from sessionstore.api.session_db import SessionDB
from sessionstore.errors import ValueOutOfRangeError


def _rows(db: SessionDB, statement: str) -> list[Any]:
    return db.store.read(lambda conn: list(conn.execute(sa.text(statement))))


def test_a_beat_is_upserted_and_listed_with_its_types(db: SessionDB) -> None:
    before = time.time()
    db.register_backend_heartbeat(backend_id="gw@box:1", pid=1, started_at=10)
    after = time.time()
    db.register_backend_heartbeat(
        backend_id="gw@box:2", pid=2, started_at=20.5, last_heartbeat=30.0, profile="p", host="h"
    )
    (newest, older) = db.list_backend_heartbeats()
    assert newest["backend_id"] == "gw@box:1" and before <= newest["last_heartbeat"] <= after
    assert older == {"backend_id": "gw@box:2", "pid": 2, "started_at": 20.5,
                     "last_heartbeat": 30.0, "profile": "p", "host": "h"}  # fmt: skip
    assert isinstance(newest["pid"], int) and isinstance(newest["started_at"], float)
    db.register_backend_heartbeat(backend_id="gw@box:2", pid=7, started_at=21, last_heartbeat=31)
    assert db.list_backend_heartbeats()[1] == {**older, "pid": 7, "started_at": 21.0,
                                               "last_heartbeat": 31.0, "profile": "", "host": ""}


def test_clear_removes_one_backend(db: SessionDB) -> None:
    for backend in ("a", "b"):
        db.register_backend_heartbeat(backend_id=backend, pid=1, started_at=1.0)
    assert db.clear_backend_heartbeat("a") is True
    assert db.clear_backend_heartbeat("a") is False
    assert [row["backend_id"] for row in db.list_backend_heartbeats()] == ["b"]


def test_a_prune_takes_only_stale_beats_and_nothing_else(db: SessionDB) -> None:
    db.create_session("s", "telegram", session_key="peer")
    db.append_message("s", "user", "hello")
    db.end_session("s", "session_reset")  # a reset writes a conversation generation
    db.register_backend_heartbeat(backend_id="dead", pid=1, started_at=1.0, last_heartbeat=5.0)
    db.register_backend_heartbeat(backend_id="dead2", pid=2, started_at=1.0, last_heartbeat=6.0)
    db.register_backend_heartbeat(backend_id="alive", pid=3, started_at=1.0)
    kept = [_rows(db, f"SELECT * FROM {table}")
            for table in ("sessions", "messages", "conversation_generations")]  # fmt: skip
    assert kept[2], "the reset wrote a generation row"
    assert db.prune_stale_heartbeats(max_age_seconds=0) == []
    assert db.prune_stale_heartbeats(max_age_seconds=-1) == []
    assert db.prune_stale_heartbeats(max_age_seconds=math.inf) == []
    assert sorted(db.prune_stale_heartbeats(max_age_seconds=60)) == ["dead", "dead2"]
    assert db.prune_stale_heartbeats(max_age_seconds=60) == []
    assert [row["backend_id"] for row in db.list_backend_heartbeats()] == ["alive"]
    assert [_rows(db, f"SELECT * FROM {table}")
            for table in ("sessions", "messages", "conversation_generations")] == kept  # fmt: skip


def test_a_falsy_backend_id_writes_and_clears_nothing(db: SessionDB) -> None:
    for falsy in ("", None, 0):
        assert db.register_backend_heartbeat(backend_id=falsy, pid=1, started_at=1.0) is None
        assert db.clear_backend_heartbeat(falsy) is False
    assert db.list_backend_heartbeats() == []


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"backend_id": 5}, TypeError),
        ({"backend_id": "nul\x00"}, ValueError),
        ({"backend_id": "lone\ud800"}, ValueError),
        ({"pid": "12"}, TypeError),
        ({"pid": 1.5}, TypeError),
        ({"pid": True}, TypeError),
        ({"pid": 2**63}, ValueOutOfRangeError),
        ({"started_at": None}, TypeError),
        ({"started_at": "1"}, TypeError),
        ({"started_at": math.nan}, ValueError),
        ({"last_heartbeat": math.inf}, ValueError),
        ({"last_heartbeat": "now"}, TypeError),
        ({"profile": None}, TypeError),
        ({"host": 3}, TypeError),
    ],
)
def test_a_bad_beat_is_a_typed_error_with_nothing_written(
    db: SessionDB, changes: dict[str, Any], error: type[Exception]
) -> None:
    db.register_backend_heartbeat(backend_id="kept", pid=1, started_at=1.0, last_heartbeat=2.0)
    before = db.list_backend_heartbeats()
    beat: dict[str, Any] = {"backend_id": "kept", "pid": 9, "started_at": 9.0, **changes}
    with pytest.raises(error):
        db.register_backend_heartbeat(**beat)
    assert db.list_backend_heartbeats() == before


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda db: db.clear_backend_heartbeat(5), TypeError),
        (lambda db: db.clear_backend_heartbeat(["kept"]), TypeError),
        (lambda db: db.prune_stale_heartbeats(max_age_seconds="60"), TypeError),
        (lambda db: db.prune_stale_heartbeats(max_age_seconds=None), TypeError),
        (lambda db: db.prune_stale_heartbeats(max_age_seconds=True), TypeError),
        (lambda db: db.prune_stale_heartbeats(max_age_seconds=math.nan), ValueError),
    ],
)
def test_bad_clears_and_prunes_are_typed_errors(
    db: SessionDB, call: Any, error: type[Exception]
) -> None:
    db.register_backend_heartbeat(backend_id="kept", pid=1, started_at=1.0, last_heartbeat=2.0)
    with pytest.raises(error):
        call(db)
    assert [row["backend_id"] for row in db.list_backend_heartbeats()] == ["kept"]


def test_a_hermes_file_read_as_it_is_lists_no_heartbeats(tmp_path: Path) -> None:
    path = tmp_path / "v22.db"  # Hermes 0.19.0's file: no gateway_heartbeats table
    build_v22_db(path)
    with SessionDB(db_path=path, read_only=True) as reader:
        assert reader.list_backend_heartbeats() == []
