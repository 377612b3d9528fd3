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
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy.exc
from typer.testing import CliRunner

from sessionstore import cli
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


def intact(db: SessionDB, index: str) -> bool:
    with db._lock:
        try:
            db._conn.execute(f"INSERT INTO {index}({index}) VALUES ('integrity-check')")
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
