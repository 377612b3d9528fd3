"""Hermes files of schema v18...v22 adopted by content, healed, and the ones past v22 refused.

- Real files: hermes-agent 0.18.2 (v19) and 0.19.0 (v22) write a populated `state.db`
  (`tests/support/real_hermes.py`); adopted, every row of every table is kept, and our upgrade
  of the v19 file equals the real 0.19.0's upgrade of the same file; 0.19.0 then opens our
  adoption of its own file without adding or rebuilding anything.
- A store sessionstore made at yesterday's head (revision 0025, v17) that Hermes 0.19.0 then
  opened (schema 22, our revision unchanged) is completed on our next open.
- Synthetic variants seen in the field (`tests/support/legacy_v18_v22.py`), recognised by keys
  and column definitions, not by number: the usage table keyed without ``task`` at 22 (#73823),
  the routing table without ``scope`` (#59203), ``messages.active`` without its default
  (#51646), 0.19.0's objects in a file still numbered 17; healed in place, every row kept, and
  the heals on PostgreSQL too.
- A store at our head that a newer Hermes moved on (``schema_version`` 32) is refused for
  writing by every door, untouched, and read by every reading door: one story.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from legacy_v7_v17 import LATER_ROOT
from legacy_v18_v22 import (
    ROUTING_ROWS,
    USAGE_ROWS,
    V21_USAGE_KEY,
    V22_ROUTING_KEY,
    V22_USAGE_KEY,
    all_rows,
    build_v22_db,
    primary_key,
)
from real_hermes import RealHermes, backup_copy, file_bytes
from real_hermes_driver import ROOT_ID
from store_library import connect_like_the_store
from typer.testing import CliRunner

from sessionstore.api.session_db import SessionDB
from sessionstore.cli import app
from sessionstore.errors import SchemaTooNewError
from sessionstore.schema import migrate
from sessionstore.storage.engine import create_store_engine

NEW_TABLES = ("session_model_usage", "gateway_routing", "async_delegations")
KEPT_TABLES = ("sessions", "messages", "state_meta", *NEW_TABLES)


def catalog(path: Path) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(path)) as conn:
        return sorted(conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master"))


def version_of(path: Path) -> int:
    with closing(sqlite3.connect(path)) as conn:
        return int(conn.execute("SELECT version FROM schema_version").fetchone()[0])


def integrity(path: Path) -> list[str]:
    with closing(sqlite3.connect(path)) as conn:
        return [row[0] for row in conn.execute("PRAGMA integrity_check")]


def by_name(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows as dicts keyed by column name (the physical order may differ between files)."""
    return [dict(sorted(row.items())) for row in rows]


def same_as_theirs(ours: Path, theirs: Path, table: str) -> None:
    """Our rows equal Hermes 0.19.0's in every column 0.19.0 has (ours is at v31: it has the
    columns of v23...v31 too)."""
    mine, their_rows = all_rows(ours, table), all_rows(theirs, table)
    assert len(mine) == len(their_rows), table
    pairs = zip(mine, their_rows, strict=True)
    restricted = [{key: row[key] for key in their} for row, their in pairs]
    assert by_name(restricted) == by_name(their_rows), table


def assert_tables_kept(before: Path | dict[str, Any], after: Path) -> None:
    """Every row and value of ``before``'s tables is in ``after`` (columns by name)."""
    old = before if isinstance(before, dict) else {t: all_rows(before, t) for t in KEPT_TABLES}
    for table, rows in old.items():
        new = all_rows(after, table)
        if table == "state_meta":  # every key kept; v31 adds its own (fts_storage_version...)
            kept = {row["key"]: row["value"] for row in new}
            assert {row["key"]: kept.get(row["key"]) for row in rows} == {
                row["key"]: row["value"] for row in rows
            }
            continue
        assert len(new) == len(rows), table
        for was, now in zip(rows, new, strict=True):
            assert {k: now[k] for k in was} == was, table


# -- real files ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def real_files(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """Pristine files written by the real releases, built once for this module."""
    root = tmp_path_factory.mktemp("real-v18-v22")
    built = {}
    for schema in (19, 22):
        path = root / f"field-v{schema}.db"
        RealHermes(schema, root / f"home-{schema}").build(path)
        built[schema] = path
    return built


def test_a_real_v19_file_of_hermes_0182_is_adopted_as_hermes_019_upgrades_it(
    real_files: dict[int, Path], tmp_path: Path
) -> None:
    ours = backup_copy(real_files[19], tmp_path / "ours.db")
    theirs = backup_copy(real_files[19], tmp_path / "theirs.db")
    assert version_of(ours) == 19
    before = {table: all_rows(ours, table) for table in ("sessions", "messages", "gateway_routing")}

    SessionDB(db_path=ours, backup_on_adopt=False).close()
    RealHermes(22, tmp_path / "home").calls(theirs, [])

    assert migrate.current(f"sqlite:///{ours}") == migrate.HEAD_REVISION
    assert version_of(ours) == 31
    assert_tables_kept(before, ours)
    for table in ("sessions", "messages", *NEW_TABLES):
        same_as_theirs(ours, theirs, table)
    assert all_rows(ours, "session_model_usage"), "seeded from the sessions' totals"
    assert integrity(ours) == ["ok"]


def test_a_real_v22_file_of_hermes_019_is_adopted_unchanged_and_019_keeps_using_it(
    real_files: dict[int, Path], tmp_path: Path
) -> None:
    path = backup_copy(real_files[22], tmp_path / "state.db")
    before = {table: all_rows(path, table) for table in KEPT_TABLES}
    assert before["session_model_usage"], "0.19.0 recorded per-model usage"

    SessionDB(db_path=path, backup_on_adopt=False).close()
    assert_tables_kept(before, path)
    assert version_of(path) == 31
    adopted = catalog(path)

    hermes = RealHermes(22, tmp_path / "home")
    hermes.calls(path, [("update_token_counts", [ROOT_ID, 10, 5],
                         {"model": "claude-sonnet-4", "api_call_count": 1})])  # fmt: skip

    assert catalog(path) == adopted, "Hermes 0.19.0 added or rebuilt nothing"
    assert integrity(path) == ["ok"]


def test_a_store_we_made_at_v17_that_hermes_019_moved_to_v22_is_completed(
    tmp_path: Path,
) -> None:
    """Yesterday's head (revision 0025, schema 17), written by Hermes 0.18.0, then opened by
    Hermes 0.19.0 (schema 22, our revision untouched): our next open completes the chain from
    0025 without running again the data steps Hermes ran, and keeps every row."""
    path = tmp_path / "state.db"
    migrate.upgrade(f"sqlite:///{path}", "0025")
    RealHermes(17, tmp_path / "home-018").build(path)
    RealHermes(22, tmp_path / "home-019").calls(path, [])
    assert (version_of(path), migrate.current(f"sqlite:///{path}")) == (22, "0025")
    before = {table: all_rows(path, table) for table in KEPT_TABLES}

    with SessionDB(db_path=path) as db:
        assert db.get_session(ROOT_ID) is not None

    assert migrate.current(f"sqlite:///{path}") == migrate.HEAD_REVISION
    assert_tables_kept(before, path)
    assert all_rows(path, "session_model_usage") == before["session_model_usage"], "not reseeded"
    assert integrity(path) == ["ok"]


# -- synthetic field variants --------------------------------------------------------------------
def test_a_v22_file_is_adopted_keeping_every_row_of_every_table(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    build_v22_db(path)
    before = {table: all_rows(path, table) for table in KEPT_TABLES}

    SessionDB(db_path=path, backup_on_adopt=False).close()

    assert_tables_kept(before, path)
    assert all_rows(path, "session_model_usage") == before["session_model_usage"], "not reseeded"
    assert primary_key(path, "session_model_usage") == list(V22_USAGE_KEY)
    assert integrity(path) == ["ok"]


def test_the_usage_table_keyed_without_task_at_v22_is_healed_keeping_every_task(
    tmp_path: Path,
) -> None:
    """#73823: a file numbered 22 whose usage key lacks ``task`` (a plain column there):
    Hermes 0.19.0's token writes fail on it. Healed by its key, every task kept."""
    path = tmp_path / "state.db"
    build_v22_db(path, variant="route_keyed_usage")
    assert primary_key(path, "session_model_usage") == list(V21_USAGE_KEY)
    before = all_rows(path, "session_model_usage")

    SessionDB(db_path=path, backup_on_adopt=False).close()

    assert primary_key(path, "session_model_usage") == list(V22_USAGE_KEY)
    assert by_name(all_rows(path, "session_model_usage")) == by_name(before)
    assert {row["task"] for row in all_rows(path, "session_model_usage")} == {"", "vision"}
    assert integrity(path) == ["ok"]


def test_the_routing_table_without_scope_is_healed_keeping_every_entry(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    build_v22_db(path, variant="scopeless_routing")
    before = all_rows(path, "gateway_routing")

    SessionDB(db_path=path, backup_on_adopt=False).close()

    assert primary_key(path, "gateway_routing") == list(V22_ROUTING_KEY)
    assert all_rows(path, "gateway_routing") == [{"scope": "", **row} for row in before]
    # The healed table takes a second scope, which the old key had no room for.
    scope, key, entry, updated = ROUTING_ROWS[1]
    with closing(connect_like_the_store(str(path))) as conn:
        conn.execute(
            "INSERT INTO gateway_routing VALUES (?, ?, ?, ?)", (scope, key, entry, updated)
        )
        conn.commit()
    assert len(all_rows(path, "gateway_routing")) == 2


def test_messages_active_without_its_default_is_healed(tmp_path: Path) -> None:
    """#51646: rows whose flag is NULL were hidden from every reader of live messages; they are
    made live, and the column gets ``NOT NULL DEFAULT 1``, so that a writer leaving the flag
    out writes a live message."""
    path = tmp_path / "state.db"
    build_v22_db(path, variant="active_without_default")
    with closing(sqlite3.connect(path)) as conn:
        hidden = [row[0] for row in conn.execute("SELECT id FROM messages WHERE active IS NULL")]
    assert hidden and integrity(path) == ["ok"]
    before = all_rows(path, "messages")

    with SessionDB(db_path=path, backup_on_adopt=False) as db:
        live = {message["id"] for message in db.get_messages(LATER_ROOT)}
    assert set(hidden) & {row["id"] for row in before if row["session_id"] == LATER_ROOT} <= live

    with closing(sqlite3.connect(path)) as conn:
        (active,) = [
            row for row in conn.execute("PRAGMA table_info(messages)") if row[1] == "active"
        ]
        assert (active[3], active[4]) == (1, "1")
        assert conn.execute("SELECT COUNT(*) FROM messages WHERE active IS NULL").fetchone() == (0,)
    after = all_rows(path, "messages")
    revived = [{**row, "active": 1 if row["active"] is None else row["active"]} for row in before]
    assert [{k: row[k] for k in before[0]} for row in after] == revived
    assert integrity(path) == ["ok"]
    with closing(connect_like_the_store(str(path))) as conn:
        conn.execute(
            "INSERT INTO messages (session_id, role, content, timestamp)"
            " VALUES (?, 'user', 'flag left out', 1.0)",
            (LATER_ROOT,),
        )
        conn.commit()
        assert conn.execute("SELECT active FROM messages ORDER BY id DESC LIMIT 1").fetchone() == (
            1,
        )


def test_an_unbumped_file_is_completed_as_hermes_019_completes_it(tmp_path: Path) -> None:
    """0.19.0's objects in a file its FTS5-less runtime left numbered 17: the chain recognises
    them by content, keeps their rows, and runs the data steps the number says are still due,
    exactly as the real 0.19.0's next open with FTS5 does (the gateway backfill from the
    ``sessions.json`` beside it, the usage seed that keeps rows already there)."""
    copies = {}
    for who in ("ours", "theirs"):
        home = tmp_path / who
        (home / "sessions").mkdir(parents=True)
        (home / "sessions" / "sessions.json").write_text(json.dumps({
            "agent:main:cli:9": {"session_id": LATER_ROOT, "display_name": "kept, not replaced",
                                  "origin": {"chat_id": "9"}, "memory_flushed": True},
        }))  # fmt: skip
        copies[who] = home / "state.db"
        build_v22_db(copies[who], variant="unbumped")
    assert version_of(copies["ours"]) == 17
    before = {table: all_rows(copies["ours"], table) for table in KEPT_TABLES}

    SessionDB(db_path=copies["ours"], backup_on_adopt=False).close()
    RealHermes(22, tmp_path / "theirs").calls(copies["theirs"], [])

    for table in ("sessions", "messages", *NEW_TABLES):
        same_as_theirs(copies["ours"], copies["theirs"], table)
    usage = all_rows(copies["ours"], "session_model_usage")
    assert usage[: len(USAGE_ROWS)] == before["session_model_usage"], "rows already there win"
    assert len(usage) > len(USAGE_ROWS), "sessions with tokens and no row were seeded"


@pytest.fixture
def head_engine(fresh_store_url: str) -> Any:
    """An engine on a head store of this test's own (a copy of what the chain made: the heals
    are the subject, not the upgrade that made it)."""
    engine = create_store_engine(fresh_store_url)
    yield engine
    engine.dispose()


def test_the_heals_run_on_both_databases(fresh_store_url: str, head_engine: sa.Engine) -> None:
    """The three shapes made on a head store (SQLite or PostgreSQL), then ``db upgrade``: each
    healed by what it is, every row kept."""
    with head_engine.begin() as conn:
        conn.execute(
            sa.text("INSERT INTO sessions (id, source, started_at) VALUES ('s', 'cli', 1)")
        )
        conn.execute(sa.text("DROP TABLE gateway_routing"))
        conn.execute(sa.text(
            "CREATE TABLE gateway_routing (session_key TEXT PRIMARY KEY, entry_json TEXT NOT"
            " NULL, updated_at DOUBLE PRECISION NOT NULL, fork_note TEXT)"
        ))  # fmt: skip
        conn.execute(sa.text("INSERT INTO gateway_routing VALUES ('k', '{}', 2.5, 'theirs')"))
        conn.execute(sa.text("DROP TABLE session_model_usage"))
        conn.execute(sa.text(
            "CREATE TABLE session_model_usage (session_id TEXT NOT NULL, model TEXT NOT NULL,"
            " billing_provider TEXT NOT NULL DEFAULT '', billing_base_url TEXT NOT NULL DEFAULT"
            " '', billing_mode TEXT NOT NULL DEFAULT '', input_tokens BIGINT NOT NULL DEFAULT 0,"
            " PRIMARY KEY (session_id, model, billing_provider, billing_base_url, billing_mode))"
        ))  # fmt: skip
        conn.execute(sa.text(
            "INSERT INTO session_model_usage (session_id, model, input_tokens) VALUES ('s', 'm', 7)"
        ))  # fmt: skip
        if conn.dialect.name == "postgresql":
            conn.execute(sa.text(
                "ALTER TABLE messages ALTER COLUMN active DROP DEFAULT,"
                " ALTER COLUMN active DROP NOT NULL"
            ))  # fmt: skip

    migrate.upgrade(fresh_store_url)

    inspector = sa.inspect(head_engine)
    routing_key = inspector.get_pk_constraint("gateway_routing")["constrained_columns"]
    assert routing_key == list(V22_ROUTING_KEY)
    assert inspector.get_pk_constraint("session_model_usage")["constrained_columns"] == list(
        V22_USAGE_KEY
    )
    assert {index["name"] for index in inspector.get_indexes("session_model_usage")} >= {
        "idx_session_model_usage_session", "idx_session_model_usage_model",
    }  # fmt: skip
    with head_engine.connect() as conn:
        routing = conn.execute(sa.text("SELECT scope, session_key, fork_note FROM gateway_routing"))
        assert [tuple(row) for row in routing] == [("", "k", "theirs")]
        usage = conn.execute(sa.text("SELECT session_id, model, task, input_tokens,"
                                     " api_call_count FROM session_model_usage"))  # fmt: skip
        assert [tuple(row) for row in usage] == [("s", "m", "", 7, 0)]
    active = {column["name"]: column for column in inspector.get_columns("messages")}["active"]
    assert not active["nullable"] and str(active["default"]).strip("'()") == "1"


# -- moved on past our head: one story at every door ---------------------------------------------
def moved_on_store(path: Path) -> None:
    with SessionDB(db_path=path) as db:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "hello from before the newer Hermes")
    with closing(connect_like_the_store(str(path))) as conn:
        conn.execute("UPDATE schema_version SET version = 32")  # what a v32 Hermes's open does
        conn.commit()


def test_a_store_a_newer_hermes_moved_on_is_refused_for_writing_by_every_door(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    moved_on_store(path)
    assert migrate.current(f"sqlite:///{path}") == migrate.HEAD_REVISION
    original = file_bytes(path)
    runner = CliRunner(env={"COLUMNS": "200"})

    def cli(*words: str) -> Any:
        return runner.invoke(app, ["--url", str(path), *words])

    with pytest.raises(SchemaTooNewError, match=r"schema version 32\b.*left untouched"):
        SessionDB(db_path=path)
    upgrade = cli("db", "upgrade")
    assert upgrade.exit_code == 1 and "schema version 32" in upgrade.output, upgrade.output
    current = cli("db", "current")
    assert "not current" in current.output and "schema version 32" in current.output
    assert cli("db", "current", "--check").exit_code == 1
    doctor = cli("db", "doctor")
    assert doctor.exit_code != 0 and "schema version 32" in doctor.output, doctor.output
    assert "another program" not in doctor.output
    for said in (upgrade, current, doctor):
        assert "db upgrade`" not in said.output, said.output  # never suggests what refuses
    title = cli("title", "set", "s1", "a title")
    assert title.exit_code != 0 and "schema version 32" in title.output, title.output
    assert file_bytes(path)[""] == original[""], "the database file is untouched"

    # Reading is offered, and works.
    listing = cli("sessions", "list", "--json")
    assert listing.exit_code == 0 and "s1" in listing.stdout, listing.output
    with SessionDB(db_path=path, read_only=True) as db:
        assert db.get_messages("s1")[0]["content"] == "hello from before the newer Hermes"
    assert file_bytes(path)[""] == original[""]
