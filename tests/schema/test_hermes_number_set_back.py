"""A store whose Hermes number was set back, and a hand-made file without some of v6's columns.

Hermes decides its data steps by ``schema_version`` alone, and its own migration tests set the
number back on a current file to make them run again (0.19.0's ``tests/test_hermes_state.py``:
``test_v16_migration_tags_*``, ``test_v17_backfill_seeds_existing_session_usage``,
``test_v18_backfill_from_sessions_json``). Ours follow the number the same way
(``legacy.rerun_revision``): the chain runs again from the revision that number names, every
step adds only what is missing, and nothing is lost.

Hermes's open also adds any declared column a table lacks; a file numbered 10 built by hand
without ``model_config`` or ``end_reason`` (``test_v10_to_v11_upgrade_backfills_tool_fields``)
failed our adoption at v16's step. The v6 columns are added first (``legacy.
add_missing_v6_columns``).
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from sessionstore import SessionDB
from sessionstore.schema import migrate
from sessionstore.schema.legacy import NEWEST_HERMES_SCHEMA, rerun_revision


def execute(db: SessionDB, sql: str, **params: Any) -> None:
    db.store.write(lambda conn: conn.execute(sa.text(sql), params))


def set_back(db: SessionDB, number: int) -> None:
    execute(db, "UPDATE schema_version SET version = :v", v=number)


@pytest.mark.parametrize(
    ("schema_version", "revision", "restart"),
    [
        (31, "0039", None), (22, "0030", None), (17, "0025", None), (6, "0008", None),
        (15, "0039", "0018"), (17, "0039", "0020"), (19, "0030", "0027"),
        (3, "0039", "0008"), (5, "0006", None), (None, "0039", None), (40, "0039", None),
    ],
)  # fmt: skip
def test_where_the_chain_restarts(
    schema_version: int | None, revision: str, restart: str | None
) -> None:
    """Our own downgrades keep the two in step (v22 at 0030, v17 at 0025, v6 at 0008): never
    rerun. Below v7 the strict v1…v6 steps are not run again."""
    assert rerun_revision(schema_version, revision) == restart


def test_data_steps_run_again_after_the_number_is_set_back(empty_url: str) -> None:
    with SessionDB(empty_url) as db:
        db.create_session("parent", "cli")
        db.create_session("delegate", "cli", parent_session_id="parent")
        db.create_session("orphan", "cli")
        db.append_message("orphan", "user", "Echo progress")
        db.append_message("orphan", "tool", "step 1", tool_name="terminal")
        db.create_session("paid", "cli", model="gpt-4o")
        db.update_token_counts(
            "paid", input_tokens=1234, output_tokens=567, model="gpt-4o",
            billing_provider="openai",
        )  # fmt: skip
        db.set_session_title("paid", "kept title")
        execute(db, "DELETE FROM session_model_usage")
        set_back(db, 15)
    assert not migrate.status(empty_url).up_to_date

    with SessionDB(empty_url) as db:
        assert json.loads(db.get_session("delegate")["model_config"]) == {
            "_delegate_from": "parent"
        }
        orphan = json.loads(db.get_session("orphan")["model_config"])
        assert orphan == {"_delegate_from": "__orphaned__"}
        assert "orphan" not in {row["id"] for row in db.list_sessions_rich()}
        usage = db.store.read(
            lambda conn: conn.execute(
                sa.text("SELECT model, billing_provider, input_tokens, output_tokens "
                        "FROM session_model_usage WHERE session_id = 'paid'")
            ).all()
        )  # fmt: skip
        assert [tuple(row) for row in usage] == [("gpt-4o", "openai", 1234, 567)]
        assert db.get_session_title("paid") == "kept title"
        assert [m["content"] for m in db.get_messages("orphan")] == ["Echo progress", "step 1"]
        assert db.search_messages("progress")[0]["session_id"] == "orphan"
        assert db.delete_session("parent") is True
        assert db.get_session("delegate") is None  # tagged: it goes with its parent
    status = migrate.status(empty_url)
    assert status.up_to_date and status.schema_version == NEWEST_HERMES_SCHEMA


def test_gateway_metadata_backfilled_again_from_sessions_json(tmp_path: Path) -> None:
    (tmp_path / "sessions").mkdir()
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("legacy-gw", "telegram", user_id="u1")
        execute(db, "UPDATE sessions SET session_key = NULL, display_name = NULL, "
                    "origin_json = NULL WHERE id = 'legacy-gw'")  # fmt: skip
        set_back(db, 17)
    origin = {"platform": "telegram", "chat_id": "123", "chat_name": "Alice",
              "chat_type": "dm", "user_id": "u1"}  # fmt: skip
    (tmp_path / "sessions" / "sessions.json").write_text(json.dumps({
        "agent:main:telegram:dm:123": {
            "session_id": "legacy-gw", "display_name": "Alice", "chat_type": "dm",
            "expiry_finalized": True, "origin": origin,
        },
    }))  # fmt: skip
    with SessionDB(path) as db:
        row = db.get_session("legacy-gw")
    assert len(list(tmp_path.glob("state.db.bak-*"))) == 1  # backed up before the data steps
    assert row["session_key"] == "agent:main:telegram:dm:123"
    assert row["display_name"] == "Alice"
    assert json.loads(row["origin_json"])["chat_name"] == "Alice"
    assert row["expiry_finalized"] == 1


def test_a_v10_file_without_some_v6_columns_is_adopted(tmp_path: Path) -> None:
    """Hermes's migration test builds it so: ``sessions`` without ``model_config``,
    ``end_reason``, ``user_id`` or the token columns, external-content FTS tables."""
    path = tmp_path / "legacy.db"
    with closing(sqlite3.connect(path)) as conn:
        conn.executescript("""
            CREATE TABLE schema_version (version INTEGER NOT NULL);
            INSERT INTO schema_version (version) VALUES (10);
            CREATE TABLE sessions (
                id TEXT PRIMARY KEY, source TEXT, started_at REAL, ended_at REAL, title TEXT,
                parent_session_id TEXT, message_count INTEGER DEFAULT 0,
                tool_call_count INTEGER DEFAULT 0, api_call_count INTEGER DEFAULT 0
            );
            CREATE TABLE messages (
                id INTEGER PRIMARY KEY, session_id TEXT NOT NULL, timestamp REAL NOT NULL,
                role TEXT NOT NULL, content TEXT, tool_name TEXT, tool_calls TEXT,
                tool_call_id TEXT, token_count INTEGER, finish_reason TEXT, reasoning TEXT,
                reasoning_content TEXT, reasoning_details TEXT, codex_reasoning_items TEXT,
                codex_message_items TEXT
            );
            CREATE VIRTUAL TABLE messages_fts USING fts5(
                content, content=messages, content_rowid=id
            );
            CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
                INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
            END;
            INSERT INTO sessions (id, source, started_at) VALUES ('s1', 'cli', 1000.0);
            INSERT INTO messages (session_id, timestamp, role, content, tool_name, tool_calls)
                VALUES ('s1', 1001.0, 'assistant', '', 'LEGACYTOOL', '{"q": "LEGACYARG"}');
        """)  # fmt: skip
        conn.commit()
    with SessionDB(path) as db:
        assert [hit["session_id"] for hit in db.search_messages("LEGACYTOOL")] == ["s1"]
        assert [hit["session_id"] for hit in db.search_messages("LEGACYARG")] == ["s1"]
        db.end_session("s1", "user_exit")
        session = db.get_session("s1")
        assert session["end_reason"] == "user_exit"
        assert session["model_config"] is None
        assert session["input_tokens"] == 0  # the declared default, as Hermes adds it
    assert migrate.status(f"sqlite:///{path}").up_to_date
