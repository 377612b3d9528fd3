"""iot 0.22.2's housekeeping on SQLite and PostgreSQL (issue 29, item 3):
``purge_stale_tool_call_markers`` (which rows are markers, dry runs, the backup a SQLite file
gets first, nothing but ``content`` changed) and the VACUUM gates of
``maybe_auto_prune_and_vacuum`` (``min_vacuum_interval_days`` over ``last_vacuum``,
``min_vacuum_freelist_ratio`` over the store's free pages). The marker rule is iot's regex, so
a property test throws free-form text at it.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessionstore.api.session_db import SessionDB

CALLS = [{"id": "c1", "type": "function", "function": {"name": "memory", "arguments": "{}"}}]
IOT_MARKER = re.compile(r"^\[[A-Za-z_][A-Za-z0-9_.-]*\]$")  # iot's _STALE_TOOL_CALL_MARKER_RE
DAY = 86_400.0


def _rows(db: SessionDB) -> list[dict[str, Any]]:
    statement = sa.text(
        "SELECT id, role, content, tool_calls, message_uid FROM messages ORDER BY id"
    )
    return [dict(r._mapping) for r in db.store.read(lambda c: c.execute(statement).all())]


def test_only_bare_markers_of_tool_calling_assistant_rows_are_cleared(db: SessionDB) -> None:
    db.create_session("s", "cli")
    marker = db.append_message("s", "assistant", "[memory]", tool_calls=CALLS)
    padded = db.append_message("s", "assistant", " \n[web_search.v2] ", tool_calls=CALLS)
    db.append_message("s", "assistant", "[memory] and more", tool_calls=CALLS)
    db.append_message("s", "assistant", "[1memory]", tool_calls=CALLS)
    db.append_message("s", "assistant", "[memory]")  # no tool calls
    db.append_message("s", "user", "[memory]")
    before = _rows(db)
    found = db.purge_stale_tool_call_markers(dry_run=True)
    assert found == {"dry_run": True, "rows_affected": 2, "row_ids": [marker, padded],
                     "backup_path": None}  # fmt: skip
    assert _rows(db) == before
    done = db.purge_stale_tool_call_markers(backup=False)
    assert done == {"dry_run": False, "rows_affected": 2, "row_ids": [marker, padded],
                    "backup_path": None}  # fmt: skip
    after = _rows(db)
    assert [row["content"] for row in after[:2]] == ["", ""]
    for old, new in zip(before, after, strict=True):  # only content changed
        assert {**old, "content": None} == {**new, "content": None}
    assert after[2:] == before[2:]
    again = db.purge_stale_tool_call_markers()
    assert again["rows_affected"] == 0 and again["backup_path"] is None  # nothing: no copy


def test_the_backup_is_a_copy_of_the_store_before_the_change(db: SessionDB) -> None:
    db.create_session("s", "cli")
    row = db.append_message("s", "assistant", "[memory]", tool_calls=CALLS)
    result = db.purge_stale_tool_call_markers()
    assert result["row_ids"] == [row]
    if db.db_path is None:  # PostgreSQL: its backups are pg_dump's
        assert result["backup_path"] is None
        return
    copy = Path(result["backup_path"])
    assert copy.parent == db.db_path.parent
    assert copy.name.startswith(f"{db.db_path.name}.pre-clean-markers-backup-")
    snapshot = sqlite3.connect(copy)  # another file than the store's
    try:
        kept = snapshot.execute("SELECT content FROM messages WHERE id = ?", (row,)).fetchone()
    finally:
        snapshot.close()
    assert kept == ("[memory]",)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def shared(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SessionDB]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('markers')}/state.db"
    else:
        # A database of this module's own at head (a copy of the migrated template).
        template = request.getfixturevalue("migrated_pg_template")
        url = request.getfixturevalue("pg_databases").create(template=template)
    database = SessionDB(url=url)
    database.create_session("s", "cli")
    yield database
    database.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
          HealthCheck.function_scoped_fixture])  # fmt: skip
@given(text=st.one_of(st.text(), st.text(alphabet="[]_.-aZ09 \t\n\u00a0\u2003", max_size=12)))
def test_free_form_text_is_cleared_exactly_when_iots_rule_says(
    shared: SessionDB, text: str
) -> None:
    try:
        row = shared.append_message("s", "assistant", text, tool_calls=CALLS)
    except (ValueError, TypeError):
        return  # text no database can hold is refused before the write
    try:
        stored = _rows(shared)[-1]["content"]
        result = shared.purge_stale_tool_call_markers(backup=False)
        assert result["row_ids"] == ([row] if IOT_MARKER.fullmatch(stored.strip()) else [])
    finally:
        shared.store.write(lambda c: c.execute(sa.text(f"DELETE FROM messages WHERE id = {row}")))


def _old_ended_session(db: SessionDB, session_id: str) -> None:
    db.create_session(session_id, "cli")
    db.append_messages(session_id, [{"role": "user", "content": "x" * 4000}] * 50)
    statement = sa.text(
        "UPDATE sessions SET started_at = :s, ended_at = :s, end_reason = 'user_exit' "
        "WHERE id = :id"
    )
    backdate = sa.text("UPDATE messages SET timestamp = :s WHERE session_id = :id")
    values = {"s": time.time() - 40 * DAY, "id": session_id}
    db.store.write(lambda c: (c.execute(statement, values), c.execute(backdate, values)))


def test_vacuum_waits_for_its_interval(db: SessionDB) -> None:
    _old_ended_session(db, "a")
    db.set_meta("last_vacuum", str(time.time() - 2 * DAY))
    result = db.maybe_auto_prune_and_vacuum(retention_days=30, min_vacuum_interval_days=3)
    assert result == {"skipped": False, "pruned": 1, "vacuumed": False}
    _old_ended_session(db, "b")
    db.set_meta("last_auto_prune", None)
    result = db.maybe_auto_prune_and_vacuum(
        retention_days=30, min_vacuum_interval_days=1, min_vacuum_freelist_ratio=-1.0
    )
    assert result["pruned"] == 1 and result["vacuumed"] is True and "freelist_ratio" in result
    assert float(db.get_meta("last_vacuum") or 0) > time.time() - 60


def test_vacuum_waits_for_enough_free_pages(db: SessionDB) -> None:
    _old_ended_session(db, "a")
    result = db.maybe_auto_prune_and_vacuum(retention_days=30, min_vacuum_freelist_ratio=1.0)
    ratio = result["freelist_ratio"]
    if db.store.dialect.name == "sqlite":
        assert 0.0 < ratio < 1.0 and result["vacuumed"] is False  # the prune freed pages
        assert db.get_meta("last_vacuum") is None
    else:
        assert ratio is None and result["vacuumed"] is True  # no free-page figure: by time


def test_a_gate_that_is_no_number_fails_the_run_without_raising(db: SessionDB) -> None:
    _old_ended_session(db, "a")
    db.set_meta("last_vacuum", str(time.time() - 2 * DAY))  # else the gate is never compared
    result = db.maybe_auto_prune_and_vacuum(retention_days=30, min_vacuum_interval_days="x")  # type: ignore[arg-type]
    assert "error" in result and result["vacuumed"] is False


def test_a_replay_blanks_a_stale_marker_and_the_row_keeps_it(db: SessionDB) -> None:
    # iot 0.22.2 (#78148): a resumed session replaying "[memory]" as an answer taught the
    # model to keep emitting it; the stored row changes only through the purge.
    db.create_session("s", "cli")
    db.append_message("s", "user", "do the task")
    db.append_message("s", "assistant", " [memory] ", tool_calls=CALLS)
    db.append_message("s", "tool", "ok", tool_call_id="c1")
    db.append_message("s", "assistant", "[memory]")  # no tool calls: an answer
    db.append_message("s", "assistant", "[memory] and more", tool_calls=CALLS)
    expected = ["do the task", "", "ok", "[memory]", "[memory] and more"]
    replays = [
        db.get_messages_as_conversation("s"),
        db.get_messages_as_conversation("s", include_ancestors=True, include_row_ids=True),
        *db.get_resume_conversations("s"),
    ]
    for replay in replays[:2] + replays[3:]:
        assert [message["content"] for message in replay] == expected
    model = replays[2]  # the repaired live replay merges the two answers in a row
    assert [message["content"] for message in model][:3] == expected[:3]
    assert all(message.get("tool_calls") for message in model if message["content"] == "")
    assert [row["content"] for row in db.get_messages("s")][1] == " [memory] "


def _vacuum_holds_in_memory(db: SessionDB) -> int:
    return int(db.store.read(db.store.dialect.vacuum_memory_bytes))


def test_what_a_vacuum_holds_in_memory_is_the_live_pages_where_sqlite_keeps_temp_there(
    db: SessionDB,
) -> None:
    _old_ended_session(db, "a")
    held = _vacuum_holds_in_memory(db)
    if db.store.dialect.name != "sqlite":
        assert held == 0  # the server vacuums page by page
        return

    def facts(conn: sa.Connection) -> tuple[set[str], int, int, int]:
        options = {str(row[0]) for row in conn.exec_driver_sql("PRAGMA compile_options")}
        pages, free, size = (
            int(conn.exec_driver_sql(f"PRAGMA {name}").scalar_one())
            for name in ("page_count", "freelist_count", "page_size")
        )
        return options, pages, free, size

    options, pages, free, size = db.store.read(facts)
    if "TEMP_STORE=3" in options:  # pysqlite3's build: the compacted copy is built in memory
        assert held == (pages - free) * size > 0
    else:  # the standard library's (TEMP_STORE=1): a temporary file
        assert "TEMP_STORE=1" in options and held == 0


@pytest.mark.parametrize("spare", [False, True])
def test_an_unattended_vacuum_runs_only_if_the_machine_can_spare_its_memory(
    db: SessionDB, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, spare: bool
) -> None:
    """pysqlite3's SQLite builds a VACUUM's compacted copy in memory, the store's live size;
    the standard library's SQLite (Hermes's) writes it to a file. The housekeeping runs in the
    gateway: it skips a VACUUM that would take more than half of what the machine has."""
    from sessionstore.storage import host_memory

    _old_ended_session(db, "a")
    _old_ended_session(db, "b")
    held = _vacuum_holds_in_memory(db)

    def available() -> int:  # just enough, or a byte short, for the store as pruned by then
        return 2 * _vacuum_holds_in_memory(db) - (0 if spare else 1)

    monkeypatch.setattr(host_memory, "available_bytes", available)
    with caplog.at_level("WARNING"):
        result = db.maybe_auto_prune_and_vacuum(retention_days=30)
    assert result["pruned"] == 2
    if held == 0 or spare:  # nothing held in memory (a file, a server), or room for it
        assert result["vacuumed"] is True and "vacuum_skipped" not in result
        return
    assert result["vacuumed"] is False
    assert "MiB in memory" in result["vacuum_skipped"]
    assert "VACUUM skipped" in caplog.text
    assert db.get_meta("last_vacuum") is None  # the next run tries again
    db.set_meta("last_auto_prune", None)
    _old_ended_session(db, "c")
    monkeypatch.setattr(host_memory, "available_bytes", lambda: None)  # cannot be told: runs
    assert db.maybe_auto_prune_and_vacuum(retention_days=30)["vacuumed"] is True


def test_an_explicit_vacuum_runs_short_of_memory_and_says_so(
    db: SessionDB, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from sessionstore.storage import host_memory

    _old_ended_session(db, "a")
    held = _vacuum_holds_in_memory(db)
    monkeypatch.setattr(host_memory, "available_bytes", lambda: 2 * held - 1)
    with caplog.at_level("WARNING"):
        db.vacuum()
    assert ("VACUUM runs as asked" in caplog.text) == (held > 0)
    assert db.get_session("a") is not None  # it ran: nothing was pruned, nothing lost
