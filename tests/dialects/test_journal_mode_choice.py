
"""A store kept out of WAL by choice: ``journal_mode=delete`` in its SQLite URL, or Hermes's own
``database.journal_mode: delete`` for the default store.

Hermes users set ``delete`` where SQLite accepts WAL but its shared memory is one host's (a home
on NFS or SMB). A drop-in that switched their file into WAL at its first writable open would have
undone that for good: Hermes never takes a file out of WAL while others may hold it. The choice is
now honoured; a file already in WAL keeps it, with one warning saying how to leave it.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import URL
from store_library import journal_mode_of, needs_wal
from typer.testing import CliRunner

from sessionstore import SessionDB, cli
from sessionstore.errors import StoreLocationError
from sessionstore.storage.config import hermes_journal_mode, resolve_url


def _url(path: Path, **query: str) -> str:
    return URL.create("sqlite", database=str(path), query=query).render_as_string()


@needs_wal()
def test_a_new_store_asked_for_the_rollback_journal_stays_in_it_and_works(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    url = _url(path, journal_mode="delete")
    with SessionDB(url=url) as first, SessionDB(url=url) as second:
        first.create_session("s1", "cli")
        first.append_message("s1", "user", "kept out of WAL by choice")
        second.append_message("s1", "assistant", "written by a second opener")
        assert [m["content"] for m in first.get_messages("s1")] == [
            "kept out of WAL by choice", "written by a second opener",
        ]  # fmt: skip
        assert second.search_messages("choice")[0]["session_id"] == "s1"
    assert journal_mode_of(path) == "delete"
    assert not (tmp_path / "state.db-wal").exists()
    with SessionDB(path) as db:  # without the choice: the default, WAL
        assert len(db.get_messages("s1")) == 2
    assert journal_mode_of(path) == "wal"


@needs_wal()
def test_a_file_in_wal_keeps_it_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "written in WAL")
    assert journal_mode_of(path) == "wal"
    with caplog.at_level(logging.WARNING), SessionDB(url=_url(path, journal_mode="delete")) as db:
        db.append_message("s1", "user", "still written")
        assert len(db.get_messages("s1")) == 2
    assert journal_mode_of(path) == "wal"
    warnings = [r.getMessage() for r in caplog.records if "journal_mode=delete" in r.getMessage()]
    assert len(warnings) == 1 and "kept in WAL" in warnings[0]


@pytest.mark.parametrize("value", ["truncate", "memory", "off", "WAL2"])
def test_other_journal_modes_are_refused_typed(tmp_path: Path, value: str) -> None:
    path = tmp_path / "never.db"
    with pytest.raises(StoreLocationError, match="journal_mode"):
        SessionDB(url=_url(path, journal_mode=value))
    assert not path.exists()


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ("database:\n  journal_mode: delete\n", "delete"),
        ("model: x\ndatabase:\n    journal_mode: 'DELETE'   # NFS home\n", "delete"),
        ('database:\n  other: 1\n  "journal_mode": "delete"\nsessions: {}\n', "delete"),
        ("database:\n  journal_mode: wal\n", "wal"),
        ("database:\n  journal_mode: truncate\n", "wal"),  # invalid: Hermes reads wal
        ("journal_mode: delete\n", "wal"),  # not under database
        ("database:\n  nested:\n    journal_mode: delete\n", "wal"),  # not the mapping's own
        ("other:\n  journal_mode: delete\ndatabase:\n  x: 1\n", "wal"),
        ("# database:\n#  journal_mode: delete\n", "wal"),
        ("", "wal"),
    ],
)
def test_hermes_config_journal_mode_is_read_as_hermes_reads_it(
    tmp_path: Path, config: str, expected: str
) -> None:
    (tmp_path / "config.yaml").write_text(config)
    assert hermes_journal_mode(tmp_path) == expected


def test_no_or_unreadable_hermes_config_is_wal(tmp_path: Path) -> None:
    assert hermes_journal_mode(tmp_path) == "wal"
    (tmp_path / "config.yaml").write_bytes(b"database:\n  journal_mode: \xff\xfe\n")
    assert hermes_journal_mode(tmp_path) == "wal"


@settings(max_examples=80, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(list("databse:journl_mdwhx #'\"\n\t-")), max_size=80))
def test_any_hermes_config_text_reads_as_one_of_the_two_modes(text: str) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as home:
        (Path(home) / "config.yaml").write_text(text)
        assert hermes_journal_mode(Path(home)) in ("wal", "delete")


def test_the_default_store_follows_hermes_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "hermes-home"
    home.mkdir()
    (home / "config.yaml").write_text("database:\n  journal_mode: delete\n")
    monkeypatch.setenv("HERMES_HOME", str(home))
    monkeypatch.delenv("SESSIONSTORE_URL", raising=False)
    assert resolve_url().endswith("?journal_mode=delete")
    result = CliRunner().invoke(cli.app, ["db", "upgrade"])
    assert result.exit_code == 0, result.output
    with SessionDB() as db:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "in the Hermes home")
    assert journal_mode_of(home / "state.db") == "delete"
    monkeypatch.setenv("SESSIONSTORE_URL", str(tmp_path / "elsewhere.db"))
    assert resolve_url() == str(tmp_path / "elsewhere.db")  # a named store is as named


def _switch_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "is now in WAL" in r.getMessage()]


@needs_wal()
def test_a_file_with_pages_switched_to_wal_is_said_once_naming_how_to_keep_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # As iot 0.22.2 warns (its #89293): the mode is the file's, and a user who put it in the
    # rollback journal with a PRAGMA learns the next open undid it, and which setting holds.
    path = tmp_path / "state.db"
    with SessionDB(url=_url(path, journal_mode="delete")) as db:
        db.create_session("s1", "cli")
    assert journal_mode_of(path) == "delete"
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            with SessionDB(path) as db, SessionDB(path) as second:
                assert db.get_session("s1") is not None
                second.append_message("s1", "user", "written in WAL")
    assert journal_mode_of(path) == "wal"
    warnings = _switch_warnings(caplog)
    assert len(warnings) == 1, warnings
    assert "journal_mode=delete" in warnings[0] and "database.journal_mode" in warnings[0]
    assert str(path) in warnings[0]


@needs_wal()
def test_a_new_file_switched_to_wal_is_not_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "empty.db").touch()  # made by another program, nothing written yet
    with caplog.at_level(logging.WARNING):
        for name in ("new.db", "empty.db"):
            with SessionDB(tmp_path / name) as db:
                db.create_session("s1", "cli")
            assert journal_mode_of(tmp_path / name) == "wal"
    assert _switch_warnings(caplog) == []


@needs_wal()
def test_a_store_db_upgrade_makes_is_in_wal_and_its_first_open_says_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`db upgrade` (and `alembic upgrade head`) on a new path left the store in the rollback
    journal; its first writable open switched it and warned as if someone had chosen it."""
    path = tmp_path / "state.db"
    result = CliRunner().invoke(cli.app, ["--url", str(path), "db", "upgrade"])
    assert result.exit_code == 0, result.output
    assert journal_mode_of(path) == "wal"
    with caplog.at_level(logging.WARNING), SessionDB(path) as db:
        db.create_session("s1", "cli")
    assert _switch_warnings(caplog) == []
