"""The newcomer's path (issue 14): hints that name the right store, doctor and each Hermes era's
counters, pipes closed early, ``--url`` anywhere and as a path, help and one-line errors,
listing, deletion, downgrades that ask, first-adoption backups and the typed repository.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from sessionstore import cli, doctor, migrate
from sessionstore.commands import cli_command
from sessionstore.facade import SessionDB
from sessionstore.store import Store


@pytest.fixture(autouse=True)
def _scratch_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The default store of every test is a scratch file, never the real ~/.hermes.
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("SESSIONSTORE_URL", raising=False)


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner(env={"COLUMNS": "200"})


def invoke(runner: CliRunner, *args: str, input: str | None = None) -> Any:
    return runner.invoke(cli.app, list(args), input=input)


def one_error_line(result: Any) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output
    return str(lines[0])


def tool_call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "t", "arguments": "{}"}}


def make_store(path: Path, sessions: int = 1) -> str:
    url = f"sqlite:///{path}"
    with SessionDB(url=url) as db:
        for number in range(sessions):
            db.create_session(f"s{number:03d}", "cli")
            db.append_message(f"s{number:03d}", "user", f"hello number {number}")
    return url


def console_script() -> str:
    found = shutil.which("sessionstore") or str(Path(sys.executable).with_name("sessionstore"))
    assert os.access(found, os.X_OK), found
    return found


# -- 1. hints name the store they are about -----------------------------------------------------
def test_hint_names_the_store_and_running_it_fixes_that_store(
    runner: CliRunner, tmp_path: Path
) -> None:
    path = tmp_path / "my store.db"  # a space: the hint must be shell-quoted
    refused = invoke(runner, "--url", f"sqlite:///{path}", "sessions", "list")
    assert refused.exit_code == 1
    line = one_error_line(refused)
    hint = line.split("`")[1]
    assert hint == shlex.join(["sessionstore", "--url", str(path), "db", "upgrade"])
    words = shlex.split(hint)
    assert invoke(runner, *words[1:]).exit_code == 0
    assert path.exists() and not (tmp_path / "home" / "state.db").exists()
    assert invoke(runner, "--url", str(path), "sessions", "list").exit_code == 0


def test_hint_for_the_default_store_has_no_url(tmp_path: Path) -> None:
    default = tmp_path / "home" / "state.db"
    assert cli_command(f"sqlite:///{default}", "db", "upgrade") == "sessionstore db upgrade"
    other = cli_command("postgresql+psycopg://bob:secret@db.example/x", "db", "upgrade")
    assert other == "sessionstore --url 'postgresql+psycopg://bob:***@db.example/x' db upgrade"


def test_doctor_rows_name_the_store(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "legacy.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    conn.execute("INSERT INTO schema_version VALUES (6)")
    conn.commit()
    conn.close()
    result = invoke(runner, "--url", str(path), "db", "doctor", "--json")
    detail = json.loads(result.stdout)["checks"][0]["detail"]
    assert f"`sessionstore --url {path} db upgrade`" in detail


# -- 2. doctor accepts each era's tool_call_count ---------------------------------------------------
def _counted_store(path: Path) -> str:
    """Two sessions with one assistant message of two calls and two tool results each."""
    url = make_store(path, sessions=0)
    with SessionDB(url=url) as db:
        for session_id in ("v1", "v6"):
            db.create_session(session_id, "cli")
            db.append_message(session_id, "user", "go")
            db.append_message(session_id, "assistant", None,
                              tool_calls=[tool_call("a"), tool_call("b")])
            db.append_message(session_id, "tool", "ok", tool_call_id="a")
            db.append_message(session_id, "tool", "ok", tool_call_id="b")
    return url


def _set_tool_count(path: Path, session_id: str, value: int) -> None:
    conn = sqlite3.connect(path)
    conn.execute("UPDATE sessions SET tool_call_count = ? WHERE id = ?", (value, session_id))
    conn.commit()
    conn.close()


def _tool_counts(path: Path) -> dict[str, int]:
    conn = sqlite3.connect(path)
    try:
        return dict(conn.execute("SELECT id, tool_call_count FROM sessions").fetchall())
    finally:
        conn.close()


def test_doctor_accepts_hermes_v1_counting_and_fix_leaves_it(
    runner: CliRunner, tmp_path: Path
) -> None:
    path = tmp_path / "state.db"
    url = _counted_store(path)
    assert _tool_counts(path) == {"v1": 2, "v6": 2}
    _set_tool_count(path, "v1", 3)  # v1: the assistant message and the two tool results
    result = invoke(runner, "--url", url, "db", "doctor", "--json")
    assert result.exit_code == 0, result.output
    check = next(c for c in json.loads(result.stdout)["checks"] if c["name"] == "tool_call_counts")
    assert check["status"] == "ok" and "Hermes v1" in check["detail"]
    # A damaged message_count is repaired; the v1 counter is history and stays.
    conn = sqlite3.connect(path)
    conn.execute("UPDATE sessions SET message_count = 40 WHERE id = 'v1'")
    conn.commit()
    conn.close()
    assert invoke(runner, "--url", url, "db", "doctor", "--fix").exit_code == 0
    assert _tool_counts(path) == {"v1": 3, "v6": 2}
    recount = invoke(runner, "--url", url, "db", "doctor", "--recount-tool-calls", "--json")
    assert recount.exit_code == 0, recount.output
    assert any("recounted" in action for action in json.loads(recount.stdout)["actions"])
    assert _tool_counts(path) == {"v1": 2, "v6": 2}


@pytest.mark.parametrize(("stored", "healthy"), [(0, False), (1, True), (2, True), (3, True),
                                                 (4, False), (7, False)])  # fmt: skip
def test_doctor_accepts_a_history_that_changed_rule_midway(
    tmp_path: Path, stored: int, healthy: bool
) -> None:
    # assistant(2 calls), tool, tool: v6 throughout is 2, v1 throughout 3; v1 for the assistant
    # message and v6 after it is 1, v1 up to the first result then v6 is 2. Nothing gives 0 or 4.
    path = tmp_path / "state.db"
    url = _counted_store(path)
    _set_tool_count(path, "v1", stored)
    with Store.open(url) as store:
        check = doctor.diagnose(store).get("tool_call_counts")
    assert check is not None
    assert (check.status == "ok") is healthy, check


def test_freshly_upgraded_v1_file_counted_the_v1_way_is_healthy(
    runner: CliRunner, tmp_path: Path
) -> None:
    from legacy import build_legacy_db

    path = tmp_path / "state.db"
    build_legacy_db(path, 1)
    conn = sqlite3.connect(path)
    conn.execute(
        "UPDATE sessions SET tool_call_count = (SELECT count(*) FROM messages m WHERE "
        "m.session_id = sessions.id AND (m.tool_calls IS NOT NULL OR m.role = 'tool'))"
    )
    conn.commit()
    before = dict(conn.execute("SELECT id, tool_call_count FROM sessions").fetchall())
    conn.close()
    assert invoke(runner, "--url", str(path), "db", "upgrade").exit_code == 0
    result = invoke(runner, "--url", str(path), "db", "doctor", "--fix")
    assert result.exit_code == 0, result.output
    assert "no problems found" in result.stdout
    assert _tool_counts(path) == before  # --fix rewrote no history
