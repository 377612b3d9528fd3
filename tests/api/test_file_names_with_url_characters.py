"""A store named by a file path opens that file, whatever characters its name holds.

A path used to become URL text (``sqlite:///<path>``), which SQLAlchemy parses: ``?`` began a
query (``/home/q?x/state.db`` opened ``/home/q``), ``#`` and ``%`` could be read as a fragment
or an escape (``/home/pct%20x`` opened ``/home/pct x``, a folder it made), depending on the
SQLAlchemy release. A Hermes home named so had its messages written to another file,
silently. Paths are now URL objects from the first step (``dialects.file_location``)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sessionstore
from sessionstore.dialects import file_location, sqlite_library
from sessionstore.hermes import state as hermes_state

ODD_NAMES = ("q?x", "hash#x", "pct%20x", "pct%x", "amp&x=1", "semi;colon", "sp ace", "ü@host:1")


def _only_child(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir())


def _messages_in(path: Path) -> list[str]:
    # the stores' own library (never a second one on a store's file), by URI: the name as a
    # percent-escaped path, read-only
    conn = sqlite_library.connect(f"file:{quote(str(path))}?mode=ro", uri=True)
    try:
        return [row[0] for row in conn.execute("SELECT content FROM messages ORDER BY id")]
    finally:
        conn.close()


@pytest.mark.parametrize("name", ODD_NAMES)
def test_session_db_writes_the_file_it_was_given(tmp_path: Path, name: str) -> None:
    folder = tmp_path / name
    folder.mkdir()
    path = folder / "state.db"
    with sessionstore.SessionDB(path) as db:
        db.create_session("s", "cli")
        db.append_message("s", "user", "where did this go?")
        assert db.db_path == path
    assert _only_child(tmp_path) == [name]
    assert _messages_in(path) == ["where did this go?"]


@pytest.mark.parametrize("name", ODD_NAMES)
def test_the_drop_in_writes_the_file_it_was_given(tmp_path: Path, name: str) -> None:
    folder = tmp_path / name
    folder.mkdir()
    path = folder / "state.db"
    db = hermes_state.SessionDB(db_path=path)
    try:
        db.create_session("s", "cli")
        db.append_message("s", "user", "hello")
    finally:
        db.close()
    assert _only_child(tmp_path) == [name]
    assert _messages_in(path) == ["hello"]


@pytest.mark.parametrize("journal_mode", ["wal", "delete"])
def test_a_hermes_home_with_url_characters_keeps_its_own_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, journal_mode: str
) -> None:
    """The default store (no path given) of a Hermes home named ``h?x%41#y``, with and
    without Hermes's ``database.journal_mode: delete`` (which adds a URL query)."""
    home = tmp_path / "h?x%41#y" / ".hermes"
    home.mkdir(parents=True)
    (home / "config.yaml").write_text(f"database:\n  journal_mode: {journal_mode}\n")
    monkeypatch.setenv("HERMES_HOME", str(home))
    monkeypatch.delenv("SESSIONSTORE_URL", raising=False)
    db = hermes_state.SessionDB()
    try:
        db.create_session("s", "cli")
        db.append_message("s", "user", "home")
    finally:
        db.close()
    with sessionstore.SessionDB() as ours:
        assert ours.db_path == home / "state.db"
        assert ours.message_count() == 1
    assert _only_child(tmp_path) == ["h?x%41#y"]
    assert _messages_in(home / "state.db") == ["home"]


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(st.text(st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="/\\\0"),
               min_size=1, max_size=12).filter(lambda name: name not in (".", "..")))  # fmt: skip
def test_any_folder_name_is_the_folder_opened(tmp_path: Path, name: str) -> None:
    parent = Path(tempfile.mkdtemp(dir=tmp_path))  # one per example: tmp_path is shared
    folder = parent / name
    folder.mkdir()
    path = folder / "state.db"
    assert file_location(path).database == str(path)
    with sessionstore.SessionDB(path) as db:
        db.create_session("s", "cli")
        assert db.db_path == path
    assert _only_child(parent) == [name]
    assert path.is_file()


def test_a_plain_path_in_the_environment_is_that_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``SESSIONSTORE_URL`` holding a file path (as the CLI has always read it) names that
    file for the library too, ``?`` and ``%`` in it included."""
    folder = tmp_path / "env?x%41"
    folder.mkdir()
    monkeypatch.setenv("SESSIONSTORE_URL", str(folder / "state.db"))
    with sessionstore.SessionDB() as db:
        db.create_session("s", "cli")
        db.append_message("s", "user", "from the environment")
        assert db.db_path == folder / "state.db"
    assert _only_child(tmp_path) == ["env?x%41"]
    assert _messages_in(folder / "state.db") == ["from the environment"]


def test_a_migration_named_by_a_location_object_migrates_that_file(tmp_path: Path) -> None:
    """``schema.migrate`` hands ``env.py`` the URL object itself (its text would not keep
    ``?`` or ``%`` on SQLAlchemy 2.0), and upgrades and downgrades that file."""
    from sessionstore.schema import migrate

    folder = tmp_path / "mig?x%41"
    folder.mkdir()
    path = folder / "state.db"
    migrate.upgrade(file_location(path))
    with sessionstore.SessionDB(path, auto_migrate=False) as db:
        db.create_session("s", "cli")
    migrate.downgrade(file_location(path), "0001")
    assert _only_child(tmp_path) == ["mig?x%41"]
    assert sorted(p.name for p in folder.iterdir()) == ["state.db"]


def test_a_migration_of_the_default_store_migrates_the_hermes_home_s_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sessionstore.schema import migrate

    home = tmp_path / "h?x%41" / ".hermes"
    home.mkdir(parents=True)
    monkeypatch.setenv("HERMES_HOME", str(home))
    monkeypatch.delenv("SESSIONSTORE_URL", raising=False)
    migrate.upgrade()
    assert _only_child(tmp_path) == ["h?x%41"]
    assert (home / "state.db").is_file()
    with sessionstore.SessionDB(auto_migrate=False) as db:
        assert db.db_path == home / "state.db"
