
"""A verb leaves no ``-wal``/``-shm`` beside a WAL store it found without them, as
``SessionDB.close()`` leaves none: the reading verbs open the store read-only (``mode=ro``),
which creates both and cannot remove them, so the store's close lets SQLite itself remove
them (a writable connection of the store's library, read once and closed: SQLite removes a
log at the close of the last connection, never while anyone holds the file). Never an
unlink of ours, and nothing while another connection holds the store.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from store_library import needs_wal
from typer.testing import CliRunner

from sessionstore import cli
from sessionstore.api.session_db import SessionDB
from sessionstore.dialects.sqlite_library import connect
from sessionstore.storage.store import Store

SIDECARS = ("state.db-wal", "state.db-shm")


@pytest.fixture
def store_file(tmp_path: Path) -> Path:
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", "cli")
        db.append_message("s", "user", "hello there")
    assert sorted(os.listdir(tmp_path)) == ["state.db"]  # what a writable close leaves
    return path


@pytest.mark.parametrize(("verb", "exit_code"), [
    (["db", "upgrade"], 0),
    (["sessions", "list"], 0),
    (["search", "hello"], 0),
    (["sessions", "show", "no-such-session"], 1),  # an error exit closes the same way
])  # fmt: skip
def test_a_verb_leaves_the_directory_as_it_found_it(
    store_file: Path, verb: list[str], exit_code: int
) -> None:
    result = CliRunner().invoke(cli.app, ["--url", f"sqlite:///{store_file}", *verb])
    assert result.exit_code == exit_code, result.output
    assert sorted(os.listdir(store_file.parent)) == ["state.db"]


def test_a_store_another_connection_holds_keeps_its_log(store_file: Path) -> None:
    """While a writer holds the store, SQLite keeps its log and index: the verb's close
    removes nothing, and the writer goes on writing and reading."""
    with SessionDB(store_file) as held:
        held.append_message("s", "assistant", "held")
        present = {name for name in os.listdir(store_file.parent)}
        result = CliRunner().invoke(cli.app, ["--url", f"sqlite:///{store_file}", "sessions",
                                              "list"])  # fmt: skip
        assert result.exit_code == 0, result.output
        assert {name for name in os.listdir(store_file.parent)} == present
        held.append_message("s", "user", "still writing")
        assert [m["content"] for m in held.get_messages("s")][-1] == "still writing"
    assert sorted(os.listdir(store_file.parent)) == ["state.db"]


@needs_wal()
def test_db_upgrade_with_nothing_to_do_removes_the_log_its_writers_left(store_file: Path) -> None:
    """A writer that closed while a reader held the store was not last, and the reader's
    read-only close cannot remove ``-wal``/``-shm``: they stay, nobody has the file. ``db
    upgrade`` with nothing to do only looks at the store, read-only, as such a reader; a
    writable close after its look (in turn: ``dialects/last_close.py``) is last, and SQLite
    removes them, the acknowledged write kept."""
    writer = SessionDB(store_file)
    writer.append_message("s", "user", "acknowledged")
    reader = connect(f"{store_file.as_uri()}?mode=ro", uri=True)
    reader.execute("SELECT count(*) FROM messages").fetchone()  # holds the file
    writer.close()  # not last: the reader holds the file
    reader.close()  # last, but read-only
    assert sorted(os.listdir(store_file.parent)) == ["state.db", *sorted(SIDECARS)]

    result = CliRunner().invoke(cli.app, ["--url", f"sqlite:///{store_file}", "db", "upgrade",
                                          "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["changed"] is False
    assert sorted(os.listdir(store_file.parent)) == ["state.db"]
    with SessionDB(store_file) as db:
        assert [m["content"] for m in db.get_messages("s")][-1] == "acknowledged"


@needs_wal()
def test_a_url_that_asks_for_read_only_gets_no_writable_connection(store_file: Path) -> None:
    """``?mode=ro`` is the caller's word that nothing here may open the file writable: the
    files a read-only open made stay (SQLite removes them at the next writable close)."""
    store = Store.open(f"sqlite:///file:{store_file}?mode=ro&uri=true")
    assert store.read(lambda conn: conn.exec_driver_sql("SELECT count(*) FROM sessions").scalar())
    store.close()
    assert set(SIDECARS) <= set(os.listdir(store_file.parent))
    SessionDB(store_file).close()
    assert sorted(os.listdir(store_file.parent)) == ["state.db"]

