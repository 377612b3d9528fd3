"""What the command line says of the odd state.db situations users' disks hold (the field
walk, docs/adopting.md#odd-files-on-disk): an in-memory URL, a zero-byte file, an upgrade
interrupted by Ctrl-C, an export into a directory this user cannot write.

Found by the walk: `SESSIONSTORE_URL=sqlite://` (SQLAlchemy's in-memory database) was taken
as an empty store and sent the user to `db upgrade`, which upgraded nothing that lasts; a
zero-byte file was "at revision none (Hermes schema none)"; Ctrl-C during `db upgrade` printed
"unexpected PendingRollbackError" (exit 1) and never said where the backup it had written was;
an export into a directory the user could not write named the private workspace inside it.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine
from typer.testing import CliRunner

from sessionstore import cli
from sessionstore.ops import transfer
from sessionstore.schema import migrate


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner(env={"COLUMNS": "250"})


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///", "sqlite:///:memory:"])
def test_an_in_memory_url_is_a_usage_error(runner: CliRunner, url: str) -> None:
    by_option = runner.invoke(cli.app, ["--url", url, "sessions", "list"])
    assert by_option.exit_code == 2 and "in-memory SQLite database" in by_option.stderr
    by_env = runner.invoke(cli.app, ["db", "upgrade"], env={"SESSIONSTORE_URL": url})
    assert by_env.exit_code == 2 and f"SESSIONSTORE_URL={url!r}" in by_env.stderr


def test_a_zero_byte_file_is_called_empty(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    path.touch()
    listed = runner.invoke(cli.app, ["--url", str(path), "sessions", "list"])
    assert listed.exit_code == 1
    assert "is empty (no schema yet), not the current" in listed.stderr
    current = runner.invoke(cli.app, ["--url", str(path), "db", "current"])
    assert current.stdout.startswith("empty (no schema yet): not current")
    assert path.stat().st_size == 0


@pytest.fixture
def interrupt_at_the_third_step() -> Iterator[dict[str, int]]:
    """Ctrl-C while SQLite runs a statement of the chain (what a user's Ctrl-C hits), at the
    third index each run makes (the count is the test's to reset)."""
    seen = {"indexes": 0}

    def interrupt(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        if statement.lstrip().upper().startswith("CREATE INDEX"):
            seen["indexes"] += 1
            if seen["indexes"] == 3:
                raise KeyboardInterrupt

    event.listen(Engine, "before_cursor_execute", interrupt)
    try:
        yield seen
    finally:
        event.remove(Engine, "before_cursor_execute", interrupt)


def test_ctrl_c_during_an_upgrade_leaves_the_file_and_names_the_backup(
    runner: CliRunner, tmp_path: Path, interrupt_at_the_third_step: dict[str, int]
) -> None:
    path = tmp_path / "state.db"
    raw = sqlite3.connect(path)
    raw.executescript(
        "CREATE TABLE schema_version (version INTEGER NOT NULL);"
        "INSERT INTO schema_version VALUES (1);"
        "CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT NOT NULL, user_id TEXT,"
        " model TEXT, model_config TEXT, system_prompt TEXT, parent_session_id TEXT,"
        " started_at REAL NOT NULL, ended_at REAL, end_reason TEXT,"
        " message_count INTEGER DEFAULT 0, tool_call_count INTEGER DEFAULT 0,"
        " input_tokens INTEGER DEFAULT 0, output_tokens INTEGER DEFAULT 0);"
        "CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT,"
        " session_id TEXT NOT NULL REFERENCES sessions(id), role TEXT NOT NULL, content TEXT,"
        " tool_call_id TEXT, tool_calls TEXT, tool_name TEXT, timestamp REAL NOT NULL,"
        " token_count INTEGER);"
        "INSERT INTO sessions (id, source, started_at) VALUES ('old', 'cli', 1.0);"
        "INSERT INTO messages (session_id, role, content, timestamp)"
        " VALUES ('old', 'user', 'hello', 1.0);"
    )
    raw.close()
    before = path.read_bytes()
    with pytest.raises(KeyboardInterrupt):  # the interrupt itself, not PendingRollbackError
        migrate.upgrade(f"sqlite:///{path}")
    assert path.read_bytes() == before
    interrupt_at_the_third_step["indexes"] = 0
    result = runner.invoke(cli.app, ["--url", str(path), "db", "upgrade"])
    assert "interrupted: the schema change of" in result.stderr
    backups = sorted(tmp_path.glob("state.db.bak-*"))
    assert len(backups) == 1 and f"the backup written before it is kept: {backups[0]}" in (
        result.stderr
    )
    assert "PendingRollbackError" not in result.output
    assert migrate.status(f"sqlite:///{path}").revision is None  # rolled back: still Hermes v1


def test_an_export_into_a_directory_it_cannot_write_names_it(
    runner: CliRunner, migrated_sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    closed = tmp_path / "closed"
    closed.mkdir()
    real_access = os.access
    monkeypatch.setattr(
        transfer.os, "access", lambda p, how, **kw: Path(p) != closed and real_access(p, how)
    )
    result = runner.invoke(
        cli.app, ["--url", migrated_sqlite_url, "export", "-o", str(closed / "x.jsonl")]
    )
    assert result.exit_code == 1
    assert result.stderr.strip() == (
        "error: cannot write the export x.jsonl into this directory (no write permission; "
        f"choose another -o): {closed}"
    )
    assert os.listdir(closed) == []
