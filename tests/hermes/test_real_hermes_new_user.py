"""Issue 28's "done when", tried as a new user would, with the real hermes-agent 0.18.2 and 0.19.0.

A user has a ``state.db`` that their Hermes wrote under ``$HERMES_HOME`` (the release's own
``SessionDB``, populated through everything its API writes: `real_hermes_driver.build`). Then:

1. ``./scripts/run.sh`` (which installs into ``.venv`` and runs ``scripts/demo.py``; the test
   runs the demo itself, with nothing but ``$HERMES_HOME`` set) adopts the file (a backup
   first, revision none -> head) and shows it working: Hermes's sessions, its newest ones
   listed, its words found. Run again with ``--sample``, it records a conversation with
   token counts: sessionstore writing to the user's file.
2. Hermes keeps using the same file: it opens it, writes a new session (messages, a title, a
   model call's tokens), and its own ``hermes insights`` report (the release's
   ``InsightsEngine``, per-model usage since 0.19.0) counts every token sessionstore recorded
   besides its own.
3. ``sessionstore sessions list``, ``search`` and ``export`` on the default store show what
   Hermes wrote, before and after adoption.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from real_hermes import HERMES_RELEASES, RealHermes, backup_copy
from real_hermes_driver import CHAIN_TIP_ID, ROOT_ID

from sessionstore.schema import migrate
from sessionstore.sql.tables import SCHEMA_VERSION

REPO = Path(__file__).resolve().parents[2]
SAMPLE_INPUT_TOKENS = 120  # what scripts/demo.py's sample records
HERMES_AFTER_ID = "hermes-after-adoption"
HERMES_AFTER_WORD = "zeppelin"
HERMES_AFTER_TITLE = "Zeppelin hangar maintenance"
HERMES_AFTER_INPUT = 40


def user_env(home: Path, user: Path) -> dict[str, str]:
    """A new user's environment: ``$HERMES_HOME`` and nothing of ours."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("SESSIONSTORE_", "HERMES_", "PYTHONPATH"))}  # fmt: skip
    env.update(HERMES_HOME=str(home), HOME=str(user))
    return env


def run(env: dict[str, str], *command: str) -> subprocess.CompletedProcess[str]:
    completed = subprocess.run(
        [sys.executable, *command], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip
    assert completed.returncode == 0, (command, completed.stdout, completed.stderr)
    return completed


def cli(env: dict[str, str], *arguments: str) -> str:
    return run(env, "-m", "sessionstore", *arguments).stdout


def overview_tokens(report: dict[str, Any]) -> int:
    return int(report["overview"]["total_input_tokens"])


def model_input(report: dict[str, Any], model: str) -> int:
    return sum(int(row["input_tokens"]) for row in report["models"] if row["model"] == model)


@pytest.mark.slow
@pytest.mark.parametrize("schema", (19, 22), ids=lambda v: f"hermes-{HERMES_RELEASES[v]}")
def test_a_new_user_with_a_hermes_state_db(tmp_path: Path, schema: int) -> None:
    home = tmp_path / "hermes-home"
    hermes = RealHermes(schema, home)
    state = home / "state.db"
    made = hermes.build(state)
    theirs = hermes.read(backup_copy(state, tmp_path / "read.db"))
    insights_before = hermes.insights(backup_copy(state, tmp_path / "insights.db"))
    assert "absent" not in insights_before, insights_before
    env = user_env(home, tmp_path / "user")

    # 1. run.sh's demo adopts the file and shows it working.
    shown = run(env, "scripts/demo.py").stdout
    assert f"store:    sqlite:///{state}" in shown
    assert re.search(r"^backup:   .+state\.db\.bak.* \(taken before adopting", shown, re.M), shown
    assert (f"schema:   revision (none) -> {migrate.HEAD_REVISION} (Hermes schema_version "
            f"{SCHEMA_VERSION})") in shown  # fmt: skip
    assert f"contents: {theirs['session_count']} sessions, {theirs['message_count']} messages" in (
        shown
    )
    newest = theirs["listings"]["default"][:5]
    for row in newest:  # by title (the demo shows ids cut to their shortest unique prefix)
        assert f"{row['title'] or '(untitled)'}: " in shown, (row["id"], shown)
    assert "sample:" not in shown, "a store with sessions gets no sample unless asked"
    sampled = run(env, "scripts/demo.py", "--sample").stdout
    sample_id = re.search(r"^sample:   recorded session (\S+)$", sampled, re.M)
    assert sample_id, sampled
    assert migrate.current(f"sqlite:///{state}") == migrate.HEAD_REVISION

    # 2. Hermes keeps using the same file; its Insights count what sessionstore recorded.
    hermes.calls(state, [
        ("create_session", [HERMES_AFTER_ID, "cli"], {"model": "claude-sonnet-4"}),
        ("append_message", [HERMES_AFTER_ID, "user",
                            f"Book the {HERMES_AFTER_WORD} hangar for maintenance"], {}),
        ("append_message", [HERMES_AFTER_ID, "assistant", "Booked for Tuesday."], {}),
        ("set_session_title", [HERMES_AFTER_ID, HERMES_AFTER_TITLE], {}),
        ("update_token_counts", [HERMES_AFTER_ID],
         {"input_tokens": HERMES_AFTER_INPUT, "output_tokens": 4, "model": "claude-sonnet-4",
          "billing_provider": "anthropic", "api_call_count": 1}),
    ])  # fmt: skip
    after = hermes.read(backup_copy(state, tmp_path / "read-after.db"))
    assert after["session_count"] == theirs["session_count"] + 2  # the sample, Hermes's new one
    insights = hermes.insights(state)
    assert overview_tokens(insights) == (
        overview_tokens(insights_before) + SAMPLE_INPUT_TOKENS + HERMES_AFTER_INPUT
    )
    assert model_input(insights, "demo-model") == SAMPLE_INPUT_TOKENS
    assert insights["overview"]["total_sessions"] == insights_before["overview"][
        "total_sessions"] + 2  # fmt: skip

    # 3. The CLI shows what Hermes wrote, before adoption and after it.
    listed = json.loads(cli(env, "sessions", "list", "--json", "--all"))
    listed_ids = [row["id"] for row in listed]
    assert listed_ids[:2] == [HERMES_AFTER_ID, sample_id.group(1)]
    assert {row["id"] for row in theirs["listings"]["default"]} <= set(listed_ids)
    titles = {row["id"]: row["title"] for row in listed}
    assert titles[HERMES_AFTER_ID] == HERMES_AFTER_TITLE
    for row in theirs["listings"]["default"]:
        assert titles[row["id"]] == row["title"], row["id"]

    hits = json.loads(cli(env, "search", HERMES_AFTER_WORD, "--json"))
    assert [hit["session_id"] for hit in hits] == [HERMES_AFTER_ID]
    for query in ("kubectl", "部署"):
        found = {hit["session_id"] for hit in json.loads(cli(env, "search", query, "--json"))}
        release_found = {hit["session_id"] for hit in theirs["searches"][query]}
        assert found == release_found != set(), query

    exported = [json.loads(line) for line in cli(env, "export").splitlines()]
    sessions = {line["session"]["id"]: line["session"] for line in exported if "session" in line}
    messages = [line["message"] for line in exported if "message" in line]
    assert {HERMES_AFTER_ID, ROOT_ID, CHAIN_TIP_ID} <= set(sessions)
    assert sessions[HERMES_AFTER_ID]["input_tokens"] == HERMES_AFTER_INPUT
    assert len(messages) == after["message_count"]  # Hermes counts the sample's too
    assert any(HERMES_AFTER_WORD in (m["content"] or "") for m in messages)
    usage = [line["usage"] for line in exported if "usage" in line]
    ours = [row for row in usage if row["session_id"] == sample_id.group(1)]
    assert [(row["model"], row["input_tokens"]) for row in ours] == [
        ("demo-model", SAMPLE_INPUT_TOKENS)]
    if schema == 22:  # 0.19.0 writes per-model usage itself; 0.18.2 knows no such table
        assert [(row["model"], row["input_tokens"]) for row in usage
                if row["session_id"] == HERMES_AFTER_ID] == [
            ("claude-sonnet-4", HERMES_AFTER_INPUT)]  # fmt: skip
        assert "model_usage" in made["features"]
