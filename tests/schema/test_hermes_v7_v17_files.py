"""Later Hermes files (schema v7..v17, clean and un-bumped) upgraded to head and back.

Each file is built by `tests/support/legacy_v7_v17.py` as mainline Hermes left it. After the upgrade
every original row and value is still there (extra columns included), the file has newest
Hermes's tables, columns, indexes and six FTS triggers, both FTS indexes pass FTS5's
integrity-check and answer word, tool-call and CJK queries, and newest Hermes's own open
checks find nothing to change. Downgraded to v6, the file is a v6 file again with every row.
All inspection goes through plain `sqlite3`.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from cjk_checks import assert_cjk_index_matches_scan, assert_no_cjk_index
from file_checks import (
    assert_only_delegate_tags_added,
    assert_rows_preserved,
    assert_search_works,
    assert_sound,
    open_db,
    query,
    schema_names,
    schema_versions,
    snapshot,
    sqlite_url,
    table_columns,
)
from legacy_v1_v6 import build_legacy_db
from legacy_v7_v17 import (
    CHAIN_HEAD_VERSION,
    HEAD_INDEXES,
    HEAD_MESSAGE_NAMES,
    HEAD_SESSION_NAMES,
    HEAD_VERSION,
    HERMES_FTS_TRIGGERS,
    LATER_ARCHIVED,
    LATER_BRANCH,
    LATER_DELEGATE,
    LATER_ROOT,
    build_later_db,
    hermes_append,
    hermes_head_open,
    hermes_open_actions,
    later_default,
    schema_objects,
)
from legacy_v23_v31 import V31_INDEXES, V31_MESSAGE_NAMES, V31_SESSION_NAMES
from store_library import connect_like_the_store

from sessionstore.api.session_db import SessionDB
from sessionstore.schema import migrate

LATER_CASES = [
    *(pytest.param(v, None, id=f"v{v}") for v in (7, 10, 11, 12, 14, 16, 17)),
    pytest.param(12, "unbumped_early", id="v12-unbumped-early-extras"),
    pytest.param(17, "v17_bump_commit", id="v17-bump-commit-no-cooldown"),
    pytest.param(16, "missing_late", id="v16-missing-late"),
    pytest.param(12, "external_fts", id="v12-external-content-fts"),
]


def fts_ids(conn: sqlite3.Connection, table: str, text: str) -> set[int]:
    phrase = '"' + text.replace('"', '""') + '"'
    return {row[0] for row in conn.execute(f"SELECT rowid FROM {table} WHERE {table} MATCH ?",
                                           (phrase,))}  # fmt: skip


def assert_later_search_works(path: Path) -> None:
    with open_db(path) as conn:
        for table in ("messages_fts", "messages_fts_trigram"):
            conn.execute(f"INSERT INTO {table}({table}, rank) VALUES('integrity-check', 1)")
        root_messages = {
            row["content"] or row["tool_name"]: row["id"]
            for row in conn.execute("SELECT * FROM messages WHERE session_id = ?", (LATER_ROOT,))
        }
        # v11: a command inside tool_calls and a tool's name are words of the index.
        assert fts_ids(conn, "messages_fts", "kubectl") == {root_messages["terminal"]}
        assert root_messages["terminal"] in fts_ids(conn, "messages_fts", "terminal")
        # v10: three CJK characters through the trigram index.
        expected = {root_messages["请部署到集群 please"]}
        assert fts_ids(conn, "messages_fts_trigram", "部署到") == expected


def assert_later_rows_kept(before: dict[str, list[dict[str, Any]]], path: Path) -> None:
    after = snapshot(path)
    assert_rows_preserved(before["sessions"], after["sessions"], ignore={"model_config"})
    assert_only_delegate_tags_added(before["sessions"], after["sessions"])
    assert_rows_preserved(before["messages"], after["messages"], ignore=set())
    for table, names in (("sessions", HEAD_SESSION_NAMES), ("messages", HEAD_MESSAGE_NAMES)):
        for old, new in zip(before[table], after[table], strict=True):
            for column in names:
                if column not in old:
                    assert new[column] == later_default(column), (table, old["id"], column)


@pytest.mark.parametrize(("version", "variant"), LATER_CASES)
def test_later_file_upgrades_to_head_and_back_keeping_every_row(
    tmp_path: Path, version: int, variant: str | None
) -> None:
    path = tmp_path / "state.db"
    build_later_db(path, version, variant=variant)
    before = snapshot(path)
    extras = set(table_columns(path, "sessions")) - set(HEAD_SESSION_NAMES)
    with open_db(path) as conn:
        meta = conn.execute("SELECT * FROM state_meta") if version >= 8 else []
        meta_before = sorted(map(tuple, meta))

    migrate.upgrade(sqlite_url(path), "head")

    assert schema_versions(path) == [CHAIN_HEAD_VERSION]
    assert migrate.current(sqlite_url(path)) == migrate.HEAD_REVISION
    assert_sound(path)
    assert_later_rows_kept(before, path)
    assert extras <= set(table_columns(path, "sessions")), "extra columns are kept"
    assert schema_names(path, "index") >= HEAD_INDEXES
    assert set(HERMES_FTS_TRIGGERS) <= schema_names(path, "trigger")
    assert_later_search_works(path)
    assert_cjk_index_matches_scan(path)
    assert hermes_open_actions(path) == []
    if version >= 8:
        with open_db(path) as conn:
            # Every key kept; v31 adds its own (fts_storage_version, message_uid_backfill, ...).
            after = set(map(tuple, conn.execute("SELECT * FROM state_meta")))
            assert set(meta_before) <= after

    migrate.downgrade(sqlite_url(path), "0006")

    assert schema_versions(path) == [6]
    assert_sound(path)
    assert not {"state_meta", "compression_locks", "messages_fts_trigram"} & schema_names(
        path, "table"
    )
    down = snapshot(path)
    assert [row["id"] for row in down["messages"]] == [row["id"] for row in before["messages"]]
    assert [row["id"] for row in down["sessions"]] == [row["id"] for row in before["sessions"]]
    v6_like = {c for c in table_columns(path, "messages")}
    assert not v6_like & {"active", "compacted", "reasoning_content", "platform_message_id"}
    assert extras <= set(table_columns(path, "sessions")), "extra columns survive the downgrade"
    for old, new in zip(before["messages"], down["messages"], strict=True):
        assert {k: v for k, v in old.items() if k in new} == new
    assert_search_works(path, down["messages"])
    assert_no_cjk_index(path)


def test_fresh_head_store_is_what_newest_hermes_creates(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    migrate.upgrade(sqlite_url(path))
    assert table_columns(path, "sessions") == list(V31_SESSION_NAMES)
    assert table_columns(path, "messages") == list(V31_MESSAGE_NAMES)
    assert table_columns(path, "compression_locks") == [
        "session_id", "holder", "acquired_at", "expires_at",
    ]  # fmt: skip
    assert table_columns(path, "state_meta") == ["key", "value"]
    assert schema_names(path, "index") >= V31_INDEXES
    assert hermes_open_actions(path) == []
    # One word index, one trigram index (0007's table was replaced, not duplicated) and the
    # CJK bigram index of 0021.
    fts_tables = {
        row[0]
        for row in query(path, "SELECT name FROM sqlite_master WHERE sql LIKE '%USING fts5%'")
    }
    assert fts_tables == {"messages_fts", "messages_fts_trigram", "messages_cjk_bigram"}


@pytest.mark.parametrize("how", ["built-at-17", "hermes-opened-our-0008-file"])
def test_moved_on_file_is_adopted(tmp_path: Path, how: str) -> None:
    """sessionstore upgraded a v6 file (revision 0008), then newest Hermes took it to 17."""
    path = tmp_path / "state.db"
    if how == "built-at-17":
        build_later_db(path, 17)
        with open_db(path) as conn:
            conn.execute(
                "CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL PRIMARY KEY)"
            )
            conn.execute("INSERT INTO alembic_version VALUES ('0008')")
    else:
        build_legacy_db(path, 6)
        migrate.upgrade(sqlite_url(path), "0008")  # with 0007's messages_trigram
        assert "messages_trigram" in schema_names(path, "table")
        hermes_head_open(path)  # Hermes keeps our objects, rebuilds its FTS inline
        assert "messages_trigram" in schema_names(path, "table")
        assert schema_versions(path) == [HEAD_VERSION]
        with open_db(path) as conn:
            conn.execute(
                "INSERT INTO sessions (id, source, started_at, session_key) "
                "VALUES ('hermes-later', 'telegram', 5.0, 'k')"
            )
            conn.execute(
                "INSERT INTO messages (session_id, role, content, timestamp) "
                "VALUES ('hermes-later', 'user', 'written by hermes 部署到集群 kubectl', 6.0)"
            )
    before = snapshot(path)

    migrate.upgrade(sqlite_url(path))

    assert migrate.current(sqlite_url(path)) == migrate.HEAD_REVISION
    assert schema_versions(path) == [CHAIN_HEAD_VERSION]
    assert_later_rows_kept(before, path)
    if how == "built-at-17":
        assert_later_search_works(path)
    else:
        assert not {"messages_trigram"} & schema_names(path, "table"), "one trigram index"
        with open_db(path) as conn:
            for table in ("messages_fts", "messages_fts_trigram"):
                conn.execute(f"INSERT INTO {table}({table}, rank) VALUES('integrity-check', 1)")
            assert len(fts_ids(conn, "messages_fts", "kubectl")) == 1
            assert len(fts_ids(conn, "messages_fts_trigram", "部署到")) == 1
    assert hermes_open_actions(path) == []


def test_newest_hermes_changes_nothing_in_a_head_store(tmp_path: Path) -> None:
    """Fresh and adopted stores at head: newest Hermes's open leaves every object as it is."""
    fresh, adopted = tmp_path / "fresh.db", tmp_path / "adopted.db"
    migrate.upgrade(sqlite_url(fresh))
    build_later_db(adopted, 12, variant="unbumped_early")
    migrate.upgrade(sqlite_url(adopted))
    for path in (fresh, adopted):
        objects = schema_objects(path)
        hermes_head_open(path)
        assert schema_objects(path) == objects


def test_newest_hermes_keeps_writing_and_sessionstore_sees_it(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    build_later_db(path, 17)
    migrate.upgrade(sqlite_url(path))
    new_id = hermes_append(path, LATER_ROOT, "quetzalwrite by hermes 地震预警系统", tool_calls=None)
    with SessionDB(path) as db:
        ids = [m["id"] for m in db.get_messages(LATER_ROOT)]
        assert new_id in ids
        assert new_id in [hit["id"] for hit in db.search_messages("地震预警", limit=50)]
        assert [hit["id"] for hit in db.search_messages("quetzalwrite")] == [new_id]
    with open_db(path) as conn:
        assert fts_ids(conn, "messages_fts_trigram", "震预警系") == {new_id}
    assert_cjk_index_matches_scan(path)  # Hermes's write, indexed by the bigram triggers
    with open_db(path) as conn:
        for table in ("messages_fts", "messages_fts_trigram"):
            conn.execute(f"INSERT INTO {table}({table}, rank) VALUES('integrity-check', 1)")


def test_v17_file_reads_without_an_upgrade(tmp_path: Path) -> None:
    """A current Hermes file opens read-only as it is, and nothing in it changes."""
    path = tmp_path / "state.db"
    build_later_db(path, 17)
    original = path.read_bytes()
    with SessionDB(path, read_only=True) as db:
        assert db.get_session(LATER_ROOT) is not None
        assert db.get_session(LATER_DELEGATE) is not None
        assert db.get_session(LATER_ARCHIVED) is not None
        assert db.search_messages("kubectl")
    assert path.read_bytes() == original


@pytest.mark.postgresql
def test_v17_file_round_trip_into_postgresql(tmp_path: Path, fresh_migrated_pg_url: str) -> None:
    """Adopt a current Hermes file, write to it, export it, import it into PostgreSQL."""
    import io

    from sessionstore.ops.transfer import export_jsonl, import_jsonl
    from sessionstore.sql.records import MESSAGE_FIELDS, SESSION_FIELDS
    from sessionstore.storage.store import Store

    path = tmp_path / "state.db"
    build_later_db(path, 17)
    with SessionDB(path) as db:  # adopts the file on open
        db.append_message(LATER_ROOT, "assistant", "written by sessionstore 写入",
                          reasoning_content="", platform_message_id="tg-2002")  # fmt: skip
        db.rewind_to_message(LATER_ROOT, db.list_recent_user_messages(LATER_ROOT)[0]["id"])
        db.set_session_archived(LATER_BRANCH)
        db.update_token_counts(LATER_ROOT, api_call_count=2)
        exported = io.StringIO()
        export_jsonl(db.store, exported)
        sqlite_sessions = db.export_all()
    with Store.open(fresh_migrated_pg_url) as target:
        exported.seek(0)
        import_jsonl(target, exported)
    with SessionDB(url=fresh_migrated_pg_url) as pg:
        pg_sessions = pg.export_all()
        assert [s["id"] for s in pg_sessions] == [s["id"] for s in sqlite_sessions]
        for ours, theirs in zip(sqlite_sessions, pg_sessions, strict=True):
            assert {k: ours[k] for k in SESSION_FIELDS} == {k: theirs[k] for k in SESSION_FIELDS}
            # .get: a message shows _compressed_summary only where it is set, as Hermes does
            assert [{k: m.get(k) for k in MESSAGE_FIELDS} for m in ours["messages"]] == [
                {k: m.get(k) for k in MESSAGE_FIELDS} for m in theirs["messages"]
            ]
        # The later state means the same there: rewound rows hidden, archived sessions too.
        assert "rewoundword" not in json.dumps(pg.get_messages_as_conversation(LATER_ROOT))
        assert pg.search_messages("compactedword")
        assert not pg.search_messages("rewoundword")
        assert LATER_BRANCH not in {row["id"] for row in pg.list_sessions_rich(limit=100)}
        assert LATER_DELEGATE not in {row["id"] for row in pg.list_sessions_rich(limit=100)}


def test_a_file_newer_than_31_is_refused_untouched_and_readable(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from sessionstore.cli import app
    from sessionstore.errors import SchemaOutOfDateError, SchemaTooNewError

    path = tmp_path / "state.db"
    build_later_db(path, 17)
    with open_db(path) as conn:
        conn.execute("UPDATE schema_version SET version = 32")
        conn.execute("ALTER TABLE sessions ADD COLUMN hermes_v32_field TEXT")
    original = path.read_bytes()

    with pytest.raises(SchemaTooNewError) as refused:
        migrate.upgrade(sqlite_url(path))
    assert "32" in str(refused.value) and "read-only" in str(refused.value)
    assert path.read_bytes() == original
    with SessionDB(path, read_only=True) as db:
        assert db.get_session(LATER_ROOT) is not None
        assert db.search_messages("kubectl")
    result = CliRunner().invoke(app, ["--url", sqlite_url(path), "sessions", "list", "--json"])
    assert result.exit_code == 0, result.output
    assert LATER_ROOT in result.stdout
    assert path.read_bytes() == original

    # Too new and without the columns this release reads: no circle back to `db upgrade`.
    old_shape = tmp_path / "old.db"
    build_legacy_db(old_shape, 6, variant="too_new")
    with pytest.raises(SchemaOutOfDateError) as unreadable:
        SessionDB(old_shape, read_only=True)
    assert "newer" in str(unreadable.value) and "db upgrade" not in str(unreadable.value)


HAND_MADE_V12 = """
CREATE TABLE schema_version (version INTEGER);
INSERT INTO schema_version VALUES (12);
CREATE TABLE sessions (
    id TEXT PRIMARY KEY, source TEXT, started_at REAL, ended_at REAL,
    message_count INTEGER DEFAULT 0, tool_call_count INTEGER DEFAULT 0,
    title TEXT, parent_session_id TEXT, model_config TEXT
);
CREATE TABLE messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL, role TEXT NOT NULL, content TEXT,
    tool_call_id TEXT, tool_calls TEXT, tool_name TEXT,
    timestamp REAL NOT NULL, token_count INTEGER, finish_reason TEXT,
    reasoning TEXT, reasoning_content TEXT, reasoning_details TEXT,
    codex_reasoning_items TEXT, codex_message_items TEXT,
    platform_message_id TEXT, observed INTEGER DEFAULT 0
);
CREATE TABLE state_meta (key TEXT PRIMARY KEY, value TEXT);
ALTER TABLE messages ADD COLUMN active INTEGER;
ALTER TABLE messages ADD COLUMN compacted INTEGER DEFAULT 0;
INSERT INTO sessions (id, source, started_at) VALUES ('s1', 'discord', 1.0);
INSERT INTO messages (session_id, role, content, timestamp)
    VALUES ('s1', 'user', 'old hidden turn', 1.0);
"""


def test_a_file_numbered_past_6_lacking_v6_columns_gets_them_and_its_rows_live(
    tmp_path: Path,
) -> None:
    """Hermes's own tests adopt a hand-made table numbered 12 whose markers prove v6 but that
    lacks v1-v6 session columns (end_reason, model, ...) and whose ``active`` has no default:
    as Hermes's open, the columns are added, the NULL-flagged row made live, and a message
    appended without the flag is live."""
    path = tmp_path / "state.db"
    with closing(sqlite3.connect(path)) as conn:
        conn.executescript(HAND_MADE_V12)
    with SessionDB(db_path=path, backup_on_adopt=False) as db:
        assert [m["content"] for m in db.get_messages_as_conversation("s1")] == [
            "old hidden turn"
        ]
        db.append_message("s1", "user", "gateway turn")
        assert [m["active"] for m in db.get_messages("s1")] == [1, 1]
        session = db.get_session("s1")
        assert session is not None
        assert (session["end_reason"], session["input_tokens"], session["source"]) == (
            None, 0, "discord",
        )
    with closing(connect_like_the_store(str(path))) as conn:
        columns = {row[1] for row in conn.execute("PRAGMA table_info(sessions)")}
        assert {"end_reason", "model", "system_prompt", "billing_mode"} <= columns
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
