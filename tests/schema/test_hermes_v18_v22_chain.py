"""Revisions 0026...0030: Hermes schema v18...v22, up and down, on SQLite and PostgreSQL.

- a fresh store at head has Hermes 0.19.0's tables, keys and indexes (and, on SQLite, its
  column order), and the real Hermes 0.19.0 opens it without adding or rebuilding anything;
- each revision sets its number, adds its objects, runs Hermes's data step (v18 backfill from
  ``sessions.json`` beside the file, v20 usage seeded from session totals, v22 task in the key),
  and downgrades to the version below keeping every row that shape can hold;
- our upgrade of a real 0.18.0 file equals the real 0.19.0's upgrade of the same file.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from file_checks import open_db, schema_names, schema_versions, sqlite_url, table_columns
from legacy_v7_v17 import LATER_ROOT, build_later_db
from legacy_v18_v22 import (
    ADDED_COLUMNS,
    ADDED_TABLES,
    REVISION_OF,
    V21_USAGE_KEY,
    V22_INDEXES,
    V22_MESSAGE_NAMES,
    V22_ROUTING_KEY,
    V22_SESSION_NAMES,
    V22_USAGE_KEY,
    V22_USAGE_NAMES,
)
from legacy_v23_v31 import (
    HEAD_VERSION,
    V31_DELEGATION_NAMES,
    V31_MESSAGE_NAMES,
    V31_SESSION_NAMES,
)
from real_hermes import RealHermes, backup_copy, build_with_sessionstore

from sessionstore.api.session_db import SessionDB
from sessionstore.schema import migrate
from sessionstore.storage.engine import create_store_engine

NEW_TABLES = ("gateway_routing", "session_model_usage", "async_delegations")


@pytest.fixture
def engine_for(empty_url: str) -> Iterator[sa.Engine]:
    engine = create_store_engine(empty_url)
    yield engine
    engine.dispose()


def rows(engine: sa.Engine, table: str, order: str) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        result = conn.execute(sa.text(f"SELECT * FROM {table} ORDER BY {order}"))
        return [dict(row._mapping) for row in result]


def version_of(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT version FROM schema_version")).scalar_one())


def tables_of(engine: sa.Engine) -> set[str]:
    return set(sa.inspect(engine).get_table_names())


def columns_of(engine: sa.Engine, table: str) -> list[str]:
    return [column["name"] for column in sa.inspect(engine).get_columns(table)]


def key_of(engine: sa.Engine, table: str) -> list[str]:
    return list(sa.inspect(engine).get_pk_constraint(table)["constrained_columns"])


def test_a_fresh_head_store_has_hermes_019s_tables_keys_and_indexes(
    empty_url: str, engine_for: sa.Engine
) -> None:
    migrate.upgrade(empty_url)

    assert version_of(engine_for) == HEAD_VERSION
    assert set(NEW_TABLES) <= tables_of(engine_for)
    assert columns_of(engine_for, "session_model_usage") == list(V22_USAGE_NAMES)
    assert key_of(engine_for, "session_model_usage") == list(V22_USAGE_KEY)
    assert key_of(engine_for, "gateway_routing") == list(V22_ROUTING_KEY)
    assert columns_of(engine_for, "async_delegations") == list(V31_DELEGATION_NAMES)
    assert key_of(engine_for, "async_delegations") == ["delegation_id"]
    (usage_fk,) = sa.inspect(engine_for).get_foreign_keys("session_model_usage")
    assert usage_fk["referred_table"] == "sessions"
    assert usage_fk["options"].get("ondelete") == "CASCADE"
    indexes = {
        index["name"]
        for table in ("sessions", "messages", "compression_locks", *NEW_TABLES)
        for index in sa.inspect(engine_for).get_indexes(table)
    }
    assert V22_INDEXES - {"idx_sessions_title_unique"} <= indexes | {"idx_messages_platform_msg_id"}


def test_a_fresh_sqlite_store_is_laid_out_as_newest_hermes_creates_one(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    migrate.upgrade(sqlite_url(path))
    assert table_columns(path, "sessions") == list(V31_SESSION_NAMES)
    assert table_columns(path, "messages") == list(V31_MESSAGE_NAMES)
    assert schema_names(path, "index") >= V22_INDEXES


def sqlite_master(path: Path) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(path)) as conn:
        return sorted(conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master"))


def test_real_hermes_019_opens_our_fresh_store_and_adds_or_rebuilds_nothing(
    tmp_path: Path,
) -> None:
    """Hermes 0.19.0's ``_init_schema`` (``CREATE ... IF NOT EXISTS``, its column reconciler,
    its deferred indexes, its version-gated steps) finds everything in place on our head store
    (v31, newer than its own 22): the catalog is the same before and after, and so is the
    version (an older Hermes never lowers it)."""
    path = tmp_path / "state.db"
    SessionDB(db_path=path).close()
    build_with_sessionstore(path, tmp_path / "home")  # with rows: its steps see real data
    before = sqlite_master(path)

    RealHermes(22, tmp_path / "hermes-home").calls(path, [])

    assert sqlite_master(path) == before
    assert schema_versions(path) == [HEAD_VERSION]


# -- the chain, step by step, on both databases -------------------------------------------------
SESSIONS = (
    # id, model, billing provider, input tokens, output tokens, api calls, ended_at
    ("s-tokens", "claude-sonnet-4", "anthropic", 1200, 340, 3, 1_700_000_100.5),
    ("s-nomodel", None, None, 10, 0, 1, None),
    ("s-idle", "gpt-5", "openai", 0, 0, 0, None),
)


def insert_v17_rows(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        for sid, model, provider, tokens_in, tokens_out, calls, ended in SESSIONS:
            conn.execute(
                sa.text(
                    "INSERT INTO sessions (id, source, model, billing_provider, started_at,"
                    " ended_at, input_tokens, output_tokens, api_call_count, estimated_cost_usd,"
                    " cost_status) VALUES (:id, 'cli', :model, :provider, 1700000000.25,"
                    " :ended, :tin, :tout, :calls, :cost, :status)"
                ),
                {
                    "id": sid, "model": model, "provider": provider, "ended": ended,
                    "tin": tokens_in, "tout": tokens_out, "calls": calls,
                    "cost": 0.0125 if tokens_in else None, "status": "estimated",
                },
            )  # fmt: skip
            conn.execute(
                sa.text(
                    "INSERT INTO messages (session_id, role, content, timestamp)"
                    " VALUES (:id, 'user', :content, 1700000001.5)"
                ),
                {"id": sid, "content": f"hello from {sid}"},
            )


def insert_v22_rows(engine: sa.Engine) -> None:
    """What Hermes 0.19.0 writes into the new tables: an auxiliary task's usage on the same route
    as the main loop's, one on a route of its own, routing entries, a delegation, a sidecar."""
    with engine.begin() as conn:
        usage = (
            "INSERT INTO session_model_usage (session_id, model, billing_provider, task,"
            " api_call_count, input_tokens, output_tokens, estimated_cost_usd, cost_status,"
            " first_seen, last_seen) VALUES (:sid, :model, :provider, :task, 1, :tin, 5, 0.001,"
            " 'aux', :first, :last)"
        )
        conn.execute(
            sa.text(usage),
            {"sid": "s-tokens", "model": "claude-sonnet-4", "provider": "anthropic",
             "task": "compression", "tin": 100, "first": 1_699_999_999.0, "last": 1_700_000_200.0},
        )  # fmt: skip
        conn.execute(
            sa.text(usage),
            {"sid": "s-tokens", "model": "gemini-flash", "provider": "google", "task": "vision",
             "tin": 42, "first": 1_700_000_050.0, "last": 1_700_000_060.0},
        )  # fmt: skip
        conn.execute(
            sa.text(
                "INSERT INTO gateway_routing (scope, session_key, entry_json, updated_at)"
                " VALUES ('', 'agent:main:telegram:dm:1', '{\"session_id\": \"s-tokens\"}', 1.5),"
                " ('profile:work', 'agent:main:telegram:dm:1', '{}', 2.5)"
            )
        )
        conn.execute(
            sa.text(
                "INSERT INTO async_delegations (delegation_id, origin_session, state,"
                " dispatched_at, updated_at, owner_started_at) VALUES ('d-1', 's-tokens',"
                " 'running', 10.0, 11.0, 9007199254740993)"
            )
        )
        conn.execute(
            sa.text("UPDATE messages SET api_content = 'sent verbatim', effect_disposition = 'ok'")
        )
        conn.execute(sa.text("UPDATE sessions SET display_name = 'Alice', expiry_finalized = 1"))


V17_SESSION_COLUMNS = [name for name in V22_SESSION_NAMES if name not in
                       ADDED_COLUMNS[18]["sessions"] | ADDED_COLUMNS[21]["sessions"]]  # fmt: skip
V17_MESSAGE_COLUMNS = [name for name in V22_MESSAGE_NAMES if name not in
                       ADDED_COLUMNS[21]["messages"]]  # fmt: skip


def v17_rows(engine: sa.Engine) -> dict[str, list[dict[str, Any]]]:
    return {
        table: [{k: r[k] for k in names} for r in rows(engine, table, "id")]
        for table, names in (("sessions", V17_SESSION_COLUMNS), ("messages", V17_MESSAGE_COLUMNS))
    }


def test_the_chain_goes_up_and_down_one_hermes_version_at_a_time(
    empty_url: str, engine_for: sa.Engine
) -> None:
    url = empty_url
    migrate.upgrade(url, REVISION_OF[17])
    insert_v17_rows(engine_for)
    base = v17_rows(engine_for)
    present = tables_of(engine_for)

    for version in range(18, 23):
        migrate.upgrade(url, REVISION_OF[version])
        assert version_of(engine_for) == version
        assert tables_of(engine_for) == present | ADDED_TABLES[version]
        present = tables_of(engine_for)
        for table, names in ADDED_COLUMNS.get(version, {}).items():
            assert names <= set(columns_of(engine_for, table))
        assert v17_rows(engine_for) == base
        if version == 20:
            # Hermes's seed: one main-loop row per session that used tokens.
            assert key_of(engine_for, "session_model_usage") == list(V21_USAGE_KEY)
            seeded = rows(engine_for, "session_model_usage", "session_id")
            assert [(r["session_id"], r["model"], r["billing_provider"]) for r in seeded] == [
                ("s-nomodel", "unknown", ""), ("s-tokens", "claude-sonnet-4", "anthropic"),
            ]  # fmt: skip
            tokens = seeded[1]
            assert (tokens["input_tokens"], tokens["output_tokens"], tokens["api_call_count"]) == (
                1200, 340, 3,
            )  # fmt: skip
            assert tokens["estimated_cost_usd"] == 0.0125 and tokens["cost_status"] == "estimated"
            assert (tokens["first_seen"], tokens["last_seen"]) == (
                1_700_000_000.25,
                1_700_000_100.5,
            )
            assert seeded[0]["last_seen"] == seeded[0]["first_seen"] == 1_700_000_000.25
    assert key_of(engine_for, "session_model_usage") == list(V22_USAGE_KEY)
    assert [r["task"] for r in rows(engine_for, "session_model_usage", "session_id")] == ["", ""]
    assert migrate.current(url) == REVISION_OF[22]

    insert_v22_rows(engine_for)
    routing = rows(engine_for, "gateway_routing", "scope")

    # Down to v21: one row per route, the auxiliary task's share added to the main loop's.
    migrate.downgrade(url, REVISION_OF[21])
    assert version_of(engine_for) == 21
    assert key_of(engine_for, "session_model_usage") == list(V21_USAGE_KEY)
    assert "task" not in columns_of(engine_for, "session_model_usage")
    usage = {(r["session_id"], r["model"]): r for r in rows(engine_for, "session_model_usage", "1")}
    assert set(usage) == {
        ("s-tokens", "claude-sonnet-4"), ("s-tokens", "gemini-flash"), ("s-nomodel", "unknown"),
    }  # fmt: skip
    merged = usage[("s-tokens", "claude-sonnet-4")]
    assert (merged["input_tokens"], merged["output_tokens"], merged["api_call_count"]) == (
        1300, 345, 4,
    )  # fmt: skip
    assert merged["estimated_cost_usd"] == pytest.approx(0.0135)
    assert merged["cost_status"] == "estimated", "the main loop's labels win"
    assert (merged["first_seen"], merged["last_seen"]) == (1_699_999_999.0, 1_700_000_200.0)
    assert usage[("s-tokens", "gemini-flash")]["input_tokens"] == 42
    assert rows(engine_for, "gateway_routing", "scope") == routing
    assert [r["owner_started_at"] for r in rows(engine_for, "async_delegations", "1")] == [
        9007199254740993
    ]
    assert {r["api_content"] for r in rows(engine_for, "messages", "id")} == {"sent verbatim"}

    # And up again: the summed rows are the main loop's.
    migrate.upgrade(url, REVISION_OF[22])
    assert key_of(engine_for, "session_model_usage") == list(V22_USAGE_KEY)
    assert {r["task"] for r in rows(engine_for, "session_model_usage", "1")} == {""}
    migrate.downgrade(url, REVISION_OF[21])

    for version in (20, 19, 18, 17):
        migrate.downgrade(url, REVISION_OF[version])
        assert version_of(engine_for) == version
        gone = ADDED_TABLES[version + 1]
        assert not gone & tables_of(engine_for)
        for table, names in ADDED_COLUMNS.get(version + 1, {}).items():
            assert not names & set(columns_of(engine_for, table))
        assert v17_rows(engine_for) == base
    assert migrate.current(url) == REVISION_OF[17]


# -- v18: the gateway metadata backfill ----------------------------------------------------------
ORIGIN = {"platform": "telegram", "chat_id": "4242", "thread_id": "7", "user_name": "Ålice"}


def write_sessions_json(home: Path, entries: dict[str, Any] | str) -> Path:
    folder = home / "sessions"
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / "sessions.json"
    target.write_text(entries if isinstance(entries, str) else json.dumps(entries))
    return target


def gateway_columns(path: Path, session_id: str) -> dict[str, Any]:
    with open_db(path) as conn:
        row = conn.execute(
            "SELECT session_key, chat_id, chat_type, thread_id, display_name, origin_json,"
            " expiry_finalized FROM sessions WHERE id = ?",
            (session_id,),
        ).fetchone()
        return dict(row)


def test_v18_backfills_gateway_metadata_from_sessions_json_beside_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "hermes-home"
    home.mkdir()
    path = home / "state.db"
    build_later_db(path, 17)
    with open_db(path) as conn:
        conn.execute(
            "UPDATE sessions SET session_key = NULL, chat_id = NULL, chat_type = 'kept'"
            " WHERE id = ?",
            (LATER_ROOT,),
        )
    write_sessions_json(home, {
        "_meta": {"session_id": LATER_ROOT},
        "agent:main:telegram:dm:4242": {
            "session_id": LATER_ROOT, "origin": ORIGIN, "chat_type": "dm",
            "display_name": "Alice", "memory_flushed": True,
        },
        "agent:main:cli": {"session_id": "no-such-session", "display_name": "nobody"},
    })  # fmt: skip
    # Another installation's sessions.json, named by the environment: not this file's.
    elsewhere = tmp_path / "other-home"
    write_sessions_json(elsewhere, {"k": {"session_id": LATER_ROOT, "display_name": "Mallory"}})
    monkeypatch.setenv("HERMES_HOME", str(elsewhere))

    migrate.upgrade(sqlite_url(path))

    assert gateway_columns(path, LATER_ROOT) == {
        "session_key": "agent:main:telegram:dm:4242", "chat_id": "4242",
        "chat_type": "kept",  # a value already there is never overwritten
        "thread_id": "7", "display_name": "Alice",
        "origin_json": json.dumps(ORIGIN), "expiry_finalized": 1,
    }  # fmt: skip


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"k": "not an entry"}'])
def test_an_unusable_sessions_json_leaves_the_columns_empty_and_the_migration_goes_on(
    tmp_path: Path, content: str
) -> None:
    path = tmp_path / "state.db"
    build_later_db(path, 17)
    write_sessions_json(tmp_path, content)

    migrate.upgrade(sqlite_url(path))

    assert migrate.current(sqlite_url(path)) == migrate.HEAD_REVISION
    columns = gateway_columns(path, LATER_ROOT)
    assert (columns["display_name"], columns["origin_json"]) == (None, None)


def test_a_file_hermes_already_took_past_v18_is_not_backfilled_again(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    build_later_db(path, 17)
    with open_db(path) as conn:  # what Hermes 0.18.1 leaves: its columns, its number
        for column in (
            "display_name TEXT",
            "origin_json TEXT",
            "expiry_finalized INTEGER DEFAULT 0",
        ):
            conn.execute(f"ALTER TABLE sessions ADD COLUMN {column}")
        conn.execute("UPDATE schema_version SET version = 19")
    write_sessions_json(tmp_path, {"k": {"session_id": LATER_ROOT, "display_name": "Alice"}})

    migrate.upgrade(sqlite_url(path))

    assert gateway_columns(path, LATER_ROOT)["display_name"] is None


# -- the real thing: our upgrade of a 0.18.0 file is 0.19.0's --------------------------------------
def all_rows(path: Path, table: str) -> list[dict[str, Any]]:
    with open_db(path) as conn:
        return [dict(row) for row in conn.execute(f"SELECT * FROM {table} ORDER BY rowid")]


def test_our_upgrade_of_a_real_v17_file_equals_real_hermes_019s(tmp_path: Path) -> None:
    """A file written by hermes-agent 0.18.0, with the gateway's ``sessions.json`` beside it,
    taken to our head (v31) by us and to v22 by the real 0.19.0: the same sessions
    (backfilled), messages, and seeded per-model usage, value for value in every column 0.19.0
    has (ours has v23...v31's too)."""
    pristine = tmp_path / "field.db"
    RealHermes(17, tmp_path / "home-018").build(pristine)
    copies = {}
    for who in ("ours", "theirs"):
        home = tmp_path / who
        home.mkdir()
        write_sessions_json(home, {
            "agent:main:telegram:dm:4242": {
                "session_id": "field-telegram", "origin": ORIGIN, "display_name": "Alice",
                "expiry_finalized": True,
            },
            "agent:main:cli:1": {"session_id": "field-root", "chat_type": "dm"},
        })  # fmt: skip
        copies[who] = backup_copy(pristine, home / "state.db")

    SessionDB(db_path=copies["ours"], backup_on_adopt=False).close()
    RealHermes(22, tmp_path / "theirs").calls(copies["theirs"], [])

    for table in ("sessions", "messages", "session_model_usage", "gateway_routing"):
        ours, theirs = all_rows(copies["ours"], table), all_rows(copies["theirs"], table)
        ours = [{key: row[key] for key in their} for row, their in zip(ours, theirs, strict=True)]
        assert ours == theirs, table
    assert all_rows(copies["ours"], "session_model_usage"), "the seed wrote rows"
    telegram = gateway_columns(copies["ours"], "field-telegram")
    assert telegram["display_name"] == "Alice" and telegram["expiry_finalized"] == 1
