"""The drop-in keeps Hermes's ``database.journal_mode: delete`` (iot 0.22.2's
``resolve_journal_mode``): every file its ``SessionDB`` opens, and ``apply_wal_with_fallback``,
stay out of WAL; a file in WAL keeps it. Read from ``config.yaml`` in the Hermes home Hermes
names (its profile's), for that one key."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest
from store_library import connect_like_the_store, journal_mode_of, needs_wal

from sessionstore.hermes import state as hermes_state


@pytest.fixture
def hermes_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(home))
    monkeypatch.delenv("SESSIONSTORE_URL", raising=False)
    return home


def _use(db: Any) -> None:
    db.create_session("s1", "cli")
    db.append_message("s1", "user", "hello from a home on NFS")
    assert db.search_messages("NFS")[0]["session_id"] == "s1"


def test_config_yaml_delete_keeps_every_file_out_of_wal(hermes_home: Path, tmp_path: Path) -> None:
    (hermes_home / "config.yaml").write_text("database:\n  journal_mode: delete\n")
    default = hermes_state.SessionDB()
    named = hermes_state.SessionDB(db_path=tmp_path / "other.db")
    try:
        _use(default)
        _use(named)
        assert default._conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    finally:
        default.close()
        named.close()
    assert journal_mode_of(hermes_home / "state.db") == "delete"
    assert journal_mode_of(tmp_path / "other.db") == "delete"
    fresh = connect_like_the_store(tmp_path / "raw.db")
    try:
        assert hermes_state.apply_wal_with_fallback(fresh, db_label="raw.db") == "delete"
    finally:
        fresh.close()


def test_the_profile_home_hermes_names_is_read(
    hermes_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hermes's ``hermes_constants.get_hermes_home`` says which home (a profile's) holds the
    configuration the running Hermes reads; ``$HERMES_HOME``'s is not that one."""
    profile = tmp_path / "profiles" / "work"
    profile.mkdir(parents=True)
    (profile / "config.yaml").write_text("database:\n  journal_mode: Delete\n")
    constants = types.ModuleType("hermes_constants")
    constants.get_hermes_home = lambda: str(profile)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "hermes_constants", constants)
    db = hermes_state.SessionDB(db_path=tmp_path / "state.db")
    try:
        _use(db)
    finally:
        db.close()
    assert journal_mode_of(tmp_path / "state.db") == "delete"


@needs_wal()
def test_a_file_in_wal_keeps_it_and_no_config_means_wal(hermes_home: Path, tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    db = hermes_state.SessionDB(db_path=path)
    try:
        _use(db)
    finally:
        db.close()
    assert journal_mode_of(path) == "wal"
    (hermes_home / "config.yaml").write_text("database:\n  journal_mode: delete\n")
    db = hermes_state.SessionDB(db_path=path)
    try:
        db.append_message("s1", "user", "still written")
        assert db.message_count("s1") == 2
    finally:
        db.close()
    assert journal_mode_of(path) == "wal"
    conn = connect_like_the_store(path)
    try:
        assert hermes_state.apply_wal_with_fallback(conn, db_label="wal state.db") == "wal"
    finally:
        conn.close()
