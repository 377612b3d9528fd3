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
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from sessionstore import cli
from sessionstore.api.session_db import SessionDB
from sessionstore.ops import doctor
from sessionstore.schema import migrate
from sessionstore.storage.command_hints import cli_command
from sessionstore.storage.config import location_url
from sessionstore.storage.store import Store


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


# -- 1. hints name the store they are about -------------------------------------------------------
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


# -- 2. doctor accepts each era's tool_call_count -------------------------------------------------
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
    from legacy_v1_v6 import build_legacy_db

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


# -- 3. a pipe closed early -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def big_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Far more output than a pipe buffers (64 KiB), so the writer meets the closed pipe."""
    path = tmp_path_factory.mktemp("pipe") / "state.db"
    with SessionDB(path) as db:
        for number in range(120):
            session_id = f"s{number:03d}"
            db.create_session(session_id, "cli")
            db.append_messages(
                session_id, [{"role": "user", "content": f"pipe words {'x' * 800}"}] * 8
            )
    return path


@pytest.mark.parametrize(
    "verb",
    [["export"], ["sessions", "show", "s001", "--full"], ["sessions", "list", "--all"],
     ["search", "pipe", "--limit", "500"], ["prune", "--older-than", "0s", "--dry-run"]],
    ids=" ".join,
)  # fmt: skip
def test_console_script_into_a_pipe_closed_early(big_store: Path, verb: list[str]) -> None:
    if verb[0] == "prune":
        with SessionDB(big_store) as db:
            for number in range(120):
                db.end_session(f"s{number:03d}", "done")
    env = {**os.environ, "SESSIONSTORE_URL": str(big_store), "COLUMNS": "100"}
    process = subprocess.Popen(
        [console_script(), *verb], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    assert process.stdout is not None and process.stderr is not None
    first = process.stdout.readline()
    process.stdout.close()  # what `| head -1` does
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=60) == 0, stderr
    assert first
    assert "Broken pipe" not in stderr and "error" not in stderr and "Traceback" not in stderr


# -- 4. ?mode=ro ----------------------------------------------------------------------------------
def test_mode_ro_url_reads_and_refuses_writes(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    make_store(path, sessions=2)
    before = path.read_bytes()
    url = f"sqlite:///{path}?mode=ro"
    listed = invoke(runner, "--url", url, "sessions", "list", "--json")
    assert listed.exit_code == 0, listed.output
    assert len(json.loads(listed.stdout)) == 2
    with Store.open(url) as store:
        assert store.read_only
    refused = invoke(runner, "--url", url, "title", "set", "s000", "new title")
    assert refused.exit_code == 1
    assert "read-only" in one_error_line(refused)
    assert path.read_bytes() == before


# -- 8. --url anywhere, as a path, never empty ----------------------------------------------------
@pytest.mark.parametrize("spelling", ["url", "path", "relative"])
def test_url_after_the_verb_and_as_a_path(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spelling: str
) -> None:
    path = tmp_path / "state.db"
    make_store(path, sessions=3)
    monkeypatch.chdir(tmp_path)
    given = {"url": f"sqlite:///{path}", "path": str(path), "relative": "state.db"}[spelling]
    for args in (["sessions", "list", "--json", "--url", given],
                 ["--url", given, "sessions", "list", "--json"]):  # fmt: skip
        result = invoke(runner, *args)
        assert result.exit_code == 0, result.output
        assert {row["id"] for row in json.loads(result.stdout)} == {"s000", "s001", "s002"}
    assert not (tmp_path / "home" / "state.db").exists()


def test_url_after_the_verb_wins_over_the_global_one(runner: CliRunner, tmp_path: Path) -> None:
    make_store(tmp_path / "a.db", sessions=1)
    make_store(tmp_path / "b.db", sessions=2)
    result = invoke(runner, "--url", str(tmp_path / "a.db"), "sessions", "list", "--json",
                    "--url", str(tmp_path / "b.db"))  # fmt: skip
    assert len(json.loads(result.stdout)) == 2


@pytest.mark.parametrize("args", [["--url", "", "stats"], ["stats", "--url", ""],
                                  ["--url", "  ", "sessions", "list"]])  # fmt: skip
def test_empty_url_is_a_usage_error(runner: CliRunner, args: list[str]) -> None:
    result = invoke(runner, *args)
    assert result.exit_code == 2
    assert "--url is empty" in one_error_line(result)


# -- 9. help, flags, completion, one-line usage errors --------------------------------------------
def test_help_renders_flags_as_flags(runner: CliRunner) -> None:
    for verb in (["sessions", "list"], ["db", "doctor"], ["prune"], ["title", "set"]):
        text = invoke(runner, *verb, "--help").stdout
        assert "<bool>" not in text, verb
        assert "--json " in text or text.rstrip().endswith("--json"), verb
        assert "--url URL" in text, verb
    assert "--install-completion" in invoke(runner, "--help").stdout


def test_console_script_help_and_usage_errors(tmp_path: Path) -> None:
    env = {**os.environ, "HERMES_HOME": str(tmp_path), "COLUMNS": "80"}
    helped = subprocess.run(
        [console_script(), "sessions", "list", "--help"],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert helped.returncode == 0
    assert "--json" in helped.stdout and "<bool>" not in helped.stdout
    assert all(len(line) <= 80 for line in helped.stdout.splitlines())
    for args in (["sessions", "list", "--bogus"], ["sessions", "lis"], ["prune", "--older-than"],
                 ["sessions", "list", "--json", "true"]):  # fmt: skip
        result = subprocess.run([console_script(), *args], capture_output=True, text=True,
                                env=env, timeout=60, check=False)  # fmt: skip
        assert result.returncode == 2, (args, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), (args, result.stderr)
        assert "╭" not in result.stderr


def test_title_verbs_have_json(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    make_store(path, sessions=1)
    result = invoke(runner, "--url", str(path), "title", "set", "s000", "Deploy Bot", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"id": "s000", "title": "Deploy Bot"}
    following = invoke(runner, "--url", str(path), "title", "next", "Deploy Bot", "--json")
    assert json.loads(following.stdout) == {"base": "Deploy Bot", "next": "Deploy Bot #2"}


# -- 10. listing ----------------------------------------------------------------------------------
def test_list_says_when_more_exist_and_all_lists_every_one(
    runner: CliRunner, tmp_path: Path
) -> None:
    path = tmp_path / "state.db"
    make_store(path, sessions=40)
    page = invoke(runner, "--url", str(path), "sessions", "list", "--json")
    assert len(json.loads(page.stdout)) == 20
    assert "showing 20 of 40 sessions" in page.stderr and "--all" in page.stderr
    every = invoke(runner, "--url", str(path), "sessions", "list", "--all", "--json")
    assert len(json.loads(every.stdout)) == 40 and every.stderr == ""
    last = invoke(runner, "--url", str(path), "sessions", "list", "--offset", "30", "--json")
    assert len(json.loads(last.stdout)) == 10 and last.stderr == ""


def test_list_is_one_line_per_session_at_80_columns(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    url = make_store(path, sessions=0)
    with SessionDB(url=url) as db:
        for number in range(5):
            session_id = f"session-with-a-long-id-{number}"
            db.create_session(session_id, "telegram-group-chat", model="a-very-long-model-name-v2")
            db.set_session_title(session_id, f"A rather long title for session number {number}")
            db.append_message(session_id, "user", "a long first message " * 20)
    result = CliRunner(env={"COLUMNS": "80"}).invoke(
        cli.app, ["--url", str(path), "sessions", "list"]
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.rstrip("\n").splitlines()
    assert len(lines) == 2 + 5  # header, rule, one line per session
    assert all(len(line) <= 80 for line in lines), lines
    assert all("session-with-a-long-id-" in line for line in lines[2:])


def test_title_lookup_ignores_case(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    url = make_store(path, sessions=3)
    with SessionDB(url=url) as db:
        db.set_session_title("s000", "Deploy Bot")
        db.set_session_title("s001", "Deploy Bot #2")
        db.set_session_title("s002", "Ünïcode Tïtle")
    for ref, expected in (("deploy bot", "s001"), ("DEPLOY BOT #2", "s001"),
                          ("ünïcode tïtle", "s002"), ("Deploy Bot", "s001")):  # fmt: skip
        shown = invoke(runner, "--url", str(path), "sessions", "show", ref, "--json")
        assert shown.exit_code == 0, (ref, shown.output)
        assert {row["session_id"] for row in json.loads(shown.stdout)} == {expected}, ref
    with SessionDB(url=url) as db:
        db.set_session_title("s002", "deploy BOT")
    ambiguous = invoke(runner, "--url", str(path), "sessions", "show", "Deploy bot")
    assert ambiguous.exit_code == 1 and "ambiguous" in one_error_line(ambiguous)


def test_sessions_delete_asks_and_is_refused_without_a_terminal(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "state.db"
    url = make_store(path, sessions=3)
    with SessionDB(url=url) as db:
        db.create_session("child", "cli", parent_session_id="s000")
    refused = invoke(runner, "--url", str(path), "sessions", "delete", "s000")
    assert refused.exit_code == 1
    assert "--yes" in one_error_line(refused)
    monkeypatch.setattr(cli, "_stdin_is_interactive", lambda: True)
    declined = invoke(runner, "--url", str(path), "sessions", "delete", "s000", input="n\n")
    assert declined.exit_code == 1 and "Delete session s000" in declined.stdout
    assert declined.stderr == "nothing deleted\n"  # an answer, not an error (issue 27)
    with SessionDB(url=url) as db:
        assert db.get_session("s000") is not None
    accepted = invoke(runner, "--url", str(path), "sessions", "delete", "s000", input="y\n")
    assert accepted.exit_code == 0, accepted.output
    forced = invoke(runner, "--url", str(path), "sessions", "delete", "s001", "--yes", "--json")
    assert json.loads(forced.stdout) == {"id": "s001", "deleted": True}
    with SessionDB(url=url) as db:
        assert db.get_session("s000") is None and db.get_session("s001") is None
        assert db.get_messages("s000") == []
        child = db.get_session("child")
        assert child is not None and child["parent_session_id"] is None
        assert db.get_session("s002") is not None
    missing = invoke(runner, "--url", str(path), "sessions", "delete", "nope", "--yes")
    assert missing.exit_code == 1 and "no session matches" in one_error_line(missing)


# -- 11. downgrades that drop data ask ------------------------------------------------------------
def _message_total(url: str) -> int:
    with Store.open(url, read_only=True) as store:
        return int(store.read(lambda conn: conn.exec_driver_sql(
            "SELECT count(*) FROM messages").scalar_one()))  # fmt: skip


def test_downgrade_to_base_of_an_adopted_v1_file_asks_and_backs_up(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from legacy_v1_v6 import build_legacy_db

    path = tmp_path / "state.db"
    build_legacy_db(path, 1)
    upgraded = invoke(runner, "--url", str(path), "db", "upgrade")
    assert upgraded.exit_code == 0
    assert "Hermes schema v1" in upgraded.stdout
    assert f"revision {migrate.head_revision()}" in upgraded.stdout
    messages = _message_total(f"sqlite:///{path}")
    assert messages > 0
    backups = set(tmp_path.glob("state.db.bak-*"))  # the upgrade's

    refused = invoke(runner, "--url", str(path), "db", "downgrade", "base")
    assert refused.exit_code == 1
    line = one_error_line(refused)
    assert "--yes" in line and f"{messages} message(s)" in line
    monkeypatch.setattr(cli, "_stdin_is_interactive", lambda: True)
    declined = invoke(runner, "--url", str(path), "db", "downgrade", "base", input="n\n")
    assert declined.exit_code == 1 and "drops every table" in declined.stdout
    assert declined.stderr == "nothing changed\n"
    assert _message_total(f"sqlite:///{path}") == messages
    assert set(tmp_path.glob("state.db.bak-*")) == backups  # nothing happened, not even a backup

    done = invoke(runner, "--url", str(path), "db", "downgrade", "base", "--yes", "--json")
    assert done.exit_code == 0, done.output
    backup = Path(json.loads(done.stdout)["backup"])
    assert _message_total(f"sqlite:///{backup}") == messages  # the backup kept every row


def test_index_only_downgrade_and_empty_store_do_not_ask(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    make_store(path, sessions=2)
    # From head, the later Hermes revisions drop columns: the index-only stretch is 0008..0006.
    migrate.downgrade(f"sqlite:///{path}", "0008")
    assert invoke(runner, "--url", str(path), "db", "downgrade", "0006").exit_code == 0
    empty = tmp_path / "empty.db"
    migrate.upgrade(f"sqlite:///{empty}")
    assert invoke(runner, "--url", str(empty), "db", "downgrade", "base").exit_code == 0


def test_postgresql_downgrade_is_refused_without_yes(runner: CliRunner, store_url: str) -> None:
    with SessionDB(url=store_url) as db:
        db.create_session("pg1", "cli")
        db.append_message("pg1", "user", "keep me")
    refused = invoke(runner, "--url", store_url, "db", "downgrade", "0005")
    assert refused.exit_code == 1 and "--yes" in one_error_line(refused)
    if store_url.startswith("postgresql"):
        assert "pg_dump" in one_error_line(refused)
    assert migrate.status(store_url).up_to_date


# -- 7. import creates a new store -------------------------------------------------------------
def test_import_restores_into_a_new_file(runner: CliRunner, tmp_path: Path) -> None:
    source = tmp_path / "state.db"
    make_store(source, sessions=3)
    dump = tmp_path / "all.jsonl"
    assert invoke(runner, "--url", str(source), "export", "-o", str(dump)).exit_code == 0
    target = tmp_path / "restored" / "new.db"
    refused = invoke(runner, "--url", str(target), "import", str(dump))
    assert "the directory" in one_error_line(refused) and not target.parent.exists()
    target.parent.mkdir()
    result = invoke(runner, "--url", str(target), "import", str(dump))
    assert result.exit_code == 0, result.output
    assert "created a new session store" in result.stderr
    assert "imported 3 session(s)" in result.stdout
    exported = invoke(runner, "--url", str(target), "export").stdout
    assert exported == dump.read_text(encoding="utf-8")
    missing = invoke(runner, "--url", str(tmp_path / "other.db"), "import", "nope.jsonl")
    assert missing.exit_code == 1 and not (tmp_path / "other.db").exists()


def test_import_still_refuses_a_legacy_file(runner: CliRunner, tmp_path: Path) -> None:
    from legacy_v1_v6 import build_legacy_db

    path = tmp_path / "state.db"
    build_legacy_db(path, 3)
    before = path.read_bytes()
    dump = tmp_path / "x.jsonl"
    dump.write_text("", encoding="utf-8")
    refused = invoke(runner, "--url", str(path), "import", str(dump))
    assert refused.exit_code == 1 and "db upgrade" in one_error_line(refused)
    assert path.read_bytes() == before


def test_export_to_a_directory_is_a_clear_error(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    make_store(path)
    folder = tmp_path / "adir"
    folder.mkdir()
    result = invoke(runner, "--url", str(path), "export", "-o", str(folder))
    assert result.exit_code == 2
    line = one_error_line(result)
    assert "is a directory" in line and ".partial" not in line
    assert list(folder.iterdir()) == []
    nowhere = invoke(runner, "--url", str(path), "export", "-o", str(tmp_path / "no" / "x.jsonl"))
    assert nowhere.exit_code == 2 and "does not exist" in one_error_line(nowhere)


# -- 5. the first adoption of a foreign file takes a backup -------------------------------------
def _rows(path: Path, table: str) -> list[Any]:
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return conn.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()
    finally:
        conn.close()


def test_sessiondb_backs_up_a_hermes_file_on_first_adoption(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from legacy_v1_v6 import build_legacy_db

    path = tmp_path / "state.db"
    build_legacy_db(path, 3)
    sessions, messages = _rows(path, "sessions"), _rows(path, "messages")
    with caplog.at_level("WARNING", logger="sessionstore.schema.adoption"), SessionDB(path) as db:
        backup = db.adoption_backup
        assert backup is not None and backup.parent == tmp_path
        assert migrate.status(f"sqlite:///{path}").up_to_date
    assert str(backup) in caplog.text
    assert _rows(backup, "schema_version") == [(3,)]
    assert _rows(backup, "sessions") == sessions and _rows(backup, "messages") == messages
    with SessionDB(path) as again:
        assert again.adoption_backup is None  # adopted once: ours now
    copies = [p for p in tmp_path.glob("state.db.bak-*") if not p.name.endswith(("-wal", "-shm"))]
    assert copies == [backup]


def test_adoption_backup_opt_out_and_new_files(tmp_path: Path) -> None:
    from legacy_v1_v6 import build_legacy_db

    path = tmp_path / "state.db"
    build_legacy_db(path, 6)
    with SessionDB(path, backup_on_adopt=False) as db:
        assert db.adoption_backup is None
    with SessionDB(tmp_path / "new.db") as fresh:
        assert fresh.adoption_backup is None
    assert not list(tmp_path.glob("*.bak-*"))


def test_demo_script_backs_up_the_hermes_file_it_adopts(tmp_path: Path) -> None:
    from legacy_v1_v6 import build_legacy_db

    home = tmp_path / "home"
    home.mkdir()
    build_legacy_db(home / "state.db", 2)
    env = {**os.environ, "HERMES_HOME": str(home)}
    env.pop("SESSIONSTORE_URL", None)
    demo = Path(__file__).resolve().parents[2] / "scripts" / "demo.py"
    result = subprocess.run([sys.executable, str(demo), "--no-sample"], capture_output=True,
                            text=True, env=env, timeout=120, check=False)  # fmt: skip
    assert result.returncode == 0, result.stderr
    (backup,) = [p for p in home.glob("state.db.bak-*") if not p.name.endswith(("-wal", "-shm"))]
    assert f"backup:   {backup}" in result.stdout
    assert _rows(backup, "schema_version") == [(2,)]
    # Its listing cuts ids as the CLI's does: the unique prefix and an ellipsis (issue 27).
    listed = result.stdout.split("newest sessions:\n", 1)[1].split("search ", 1)[0]
    shown = [line.split()[0] for line in listed.splitlines()]
    assert shown and all(len(short) > 8 and short.endswith("…") for short in shown), shown


# -- 12. the typed repository ---------------------------------------------------------------------
def test_bare_store_on_a_new_database_is_a_clear_typed_error(empty_url: str) -> None:
    from sessionstore.errors import SchemaMissingError
    from sessionstore.sessions.repository import SessionRepository

    with Store.open(empty_url) as store:
        repository = SessionRepository(store)
        with pytest.raises(SchemaMissingError, match=r"migrate\.upgrade") as caught:
            repository.create_session("s1", "cli")
        assert "db upgrade" in str(caught.value)
        with pytest.raises(SchemaMissingError):
            repository.get_session("s1")


def test_new_message_takes_python_tool_calls_or_names_the_bad_field(store_url: str) -> None:
    from sessionstore.sessions.repository import NewMessage, SessionRepository

    calls = [tool_call("c1"), tool_call("c2")]
    message = NewMessage(role="assistant", tool_calls=calls)  # type: ignore[arg-type]
    assert message.tool_call_total == 2 and json.loads(message.tool_calls or "") == calls
    with Store.open(store_url) as store:
        repository = SessionRepository(store)
        repository.create_session("s1", "cli")
        repository.append_message("s1", message)
        record = repository.get_session("s1")
        assert record is not None and record.tool_call_count == 2
        assert json.loads(repository.get_messages("s1")[0].tool_calls or "") == calls
    for bad in ({"role": 7}, {"role": "user", "content": 3}, {"role": "user", "token_count": "9"}):
        with pytest.raises(TypeError, match="NewMessage"):
            NewMessage(**bad)  # type: ignore[arg-type]


# -- 13. small ones -------------------------------------------------------------------------------
def test_two_character_chinese_snippets_end_at_sentence_boundaries(store_url: str) -> None:
    text = (
        "今天天气很好。我们去公园散步吧！数据库迁移已经完成了，请检查一下结果。"
        "明天再讨论部署的问题。"
    )
    with SessionDB(url=store_url) as db:
        db.create_session("zh", "cli")
        db.append_message("zh", "user", text)
        snippets = {query: db.search_messages(query)[0]["snippet"] for query in ("迁移", "部署")}
    assert snippets["迁移"].endswith("请检查一下结果。...")
    assert "数据库>>>迁移<<<已经完成了" in snippets["迁移"]
    assert snippets["部署"] == "...明天再讨论>>>部署<<<的问题。"
    for snippet in snippets.values():
        assert snippet.replace(">>>", "").replace("<<<", "").strip(".") in text


def test_substring_snippet_without_sentence_ends_keeps_its_window() -> None:
    from sessionstore.search.hits import substring_snippet

    before, after = "一" * 20, "二" * 21
    assert substring_snippet(30, before, "迁移", after) == (
        "..." + before + ">>>迁移<<<" + "二" * 20 + "..."
    )


def test_missing_postgresql_driver_names_a_package_that_exists(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hint names the distribution that provides the driver (sessionstore itself is not
    on any index, so ``pip install 'sessionstore[postgresql]'`` could never work)."""
    from importlib.metadata import distribution

    from sessionstore.errors import DriverMissingError

    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if it were not installed
    result = invoke(runner, "--url", "postgresql://postgres@127.0.0.1/test", "stats")
    assert result.exit_code == 1
    line = one_error_line(result)
    assert "pip install 'psycopg[binary]'" in line and "sessionstore[" not in line
    assert distribution("psycopg").metadata["Name"] == "psycopg"  # what that installs
    with pytest.raises(DriverMissingError, match=r"pip install 'psycopg\[binary\]'"):
        SessionDB(url="postgresql+psycopg://postgres@127.0.0.1/test")


# -- hostile input ------------------------------------------------------------------------------
_PATH_TEXT = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00/"), min_size=1
).filter(lambda name: name not in (".", ".."))


@settings(max_examples=60, deadline=None)
@given(name=_PATH_TEXT)
def test_a_hint_for_any_file_name_splits_back_to_that_file(name: str) -> None:
    path = Path("/srv/stores") / name
    words = shlex.split(cli_command(location_url(str(path)), "db", "upgrade"))
    assert words[:2] == ["sessionstore", "--url"] and words[3:] == ["db", "upgrade"]
    assert Path(words[2]) == path.resolve()
    assert location_url(words[2]).database == str(path.resolve())  # the same file again


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ref=st.text(max_size=40))
def test_any_ref_resolves_or_fails_in_one_line(tmp_path: Path, ref: str) -> None:
    path = tmp_path / "hostile.db"
    if not path.exists():
        make_store(path, sessions=2)
        with SessionDB(path) as db:
            db.set_session_title("s000", "Deploy Bot")
    result = CliRunner().invoke(cli.app, ["--url", str(path), "sessions", "show", ref, "--json"])
    assert result.exit_code in (0, 1, 2), result.output
    assert "Traceback" not in result.output
    if result.exit_code:
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
