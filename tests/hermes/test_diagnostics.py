"""The read-only probes the earlier forks' ``hermes doctor`` imports from ``hermes_state``
(``sessionstore.hermes.diagnostics``) and the other names their TUI, cron and async
delegation import (``is_disk_full_error``, ``PERSISTENCE_ERROR_CAUSES``,
``apply_durability_barriers``): Hermes's results, and a live store's locks left alone."""

from __future__ import annotations

import errno
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessionstore import errors
from sessionstore.dialects import sqlite_library
from sessionstore.dialects.sqlite import WAL_SIZE_LIMIT_BYTES
from sessionstore.hermes import diagnostics
from sessionstore.hermes import state as hermes_state


@pytest.fixture
def store_file(tmp_path: Path) -> Path:
    path = tmp_path / "state.db"
    db = hermes_state.SessionDB(db_path=path)
    for n in range(3):
        db.create_session(f"s{n}", "cli")
        db.append_messages(f"s{n}", [{"role": "user", "content": f"hello {i}"} for i in range(4)])
    db.close()
    return path


def test_the_statistics_of_a_store_are_hermes_s_keys_and_its_counts(store_file: Path) -> None:
    stats = hermes_state.collect_state_db_stats(store_file)
    assert set(stats) == set(diagnostics.STAT_KEYS)
    assert (stats["sessions"], stats["messages"]) == (3, 12)
    assert stats["page_size"] > 0 and stats["page_count"] > 0
    assert stats["logical_size_bytes"] == stats["page_count"] * stats["page_size"]
    assert stats["freelist_count"] >= 0
    assert stats["journal_mode"] == ("delete" if sqlite_library.library().wal_reset_bug else "wal")
    assert stats["fts_tables"] == {"messages_fts": True, "messages_fts_trigram": True,
                                   "messages_fts_cjk": False}  # fmt: skip
    # a new store is born in the v11 layout, which Hermes marks by no storage version
    assert stats["fts_storage_version"] is None
    assert (stats["fts_rebuild_pending"], stats["fts_rebuild_high_water"]) == (False, None)
    assert stats["wal_size_bytes"] >= 0


def test_a_deferred_fill_with_rows_left_is_pending(store_file: Path) -> None:
    db = hermes_state.SessionDB(db_path=store_file)
    try:
        with db._lock:
            db._conn.execute("INSERT INTO state_meta (key, value) VALUES "
                             "('fts_rebuild_high_water', '10'), ('fts_rebuild_progress', '3')")
    finally:
        db.close()
    stats = hermes_state.collect_state_db_stats(str(store_file))
    assert (stats["fts_rebuild_high_water"], stats["fts_rebuild_progress"]) == (10, 3)
    assert stats["fts_rebuild_pending"] is True


def test_the_statistics_never_create_or_change_a_file(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "state.db"
    stats = hermes_state.collect_state_db_stats(missing)
    assert not missing.exists()
    assert stats == {**dict.fromkeys(diagnostics.STAT_KEYS), "wal_size_bytes": 0}
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database at all" * 100)
    before = garbage.read_bytes()
    stats = hermes_state.collect_state_db_stats(garbage)
    assert garbage.read_bytes() == before
    assert stats["messages"] is None and stats["sessions"] is None


def test_a_path_with_uri_characters_is_read_as_the_path(tmp_path: Path) -> None:
    folder = tmp_path / "odd ?#%&=; name"
    folder.mkdir()
    path = folder / "state.db"
    hermes_state.SessionDB(db_path=path).close()
    assert hermes_state.collect_state_db_stats(path)["sessions"] == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["odd ?#%&=; name"]


_TRY_TO_WRITE = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], timeout=0)
try:
    conn.execute("BEGIN IMMEDIATE")
except sqlite3.OperationalError as exc:
    print("refused:", exc)
else:
    print("took the write lock")
"""


def test_the_statistics_leave_a_live_store_s_locks_in_place(store_file: Path) -> None:
    """The store's connection holds the write lock while doctor reads the statistics in the
    same process: after the probe's connection is closed, another process is still refused
    the lock (a probe through a second SQLite library, or a raw open and close of the file,
    would have dropped this process's POSIX locks and let it in)."""
    db = hermes_state.SessionDB(db_path=store_file)
    try:
        with db._lock:
            db._conn.execute("BEGIN IMMEDIATE")
            try:
                db._conn.execute("INSERT INTO state_meta (key, value) VALUES ('probe', 'held')")
                stats = hermes_state.collect_state_db_stats(store_file)
                assert stats["sessions"] == 3
                other = subprocess.run(
                    [sys.executable, "-c", _TRY_TO_WRITE, str(store_file)],
                    capture_output=True, text=True, timeout=60, check=True,
                )  # fmt: skip
                assert other.stdout.startswith("refused:"), other.stdout
            finally:
                db._conn.execute("ROLLBACK")
    finally:
        db.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_holders_are_the_processes_with_the_file_open(store_file: Path) -> None:
    assert hermes_state.count_db_holders(store_file) == 0
    db = hermes_state.SessionDB(db_path=store_file)
    try:
        db.message_count()
        assert hermes_state.count_db_holders(store_file) == 1  # this process, once
        assert hermes_state.count_db_holders(str(store_file)) == 1
    finally:
        db.close()
    assert hermes_state.count_db_holders(store_file) == 0
    assert hermes_state.count_db_holders(store_file.with_name("absent.db")) == 0


def test_the_holders_are_unknown_off_linux(
    store_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(diagnostics.sys, "platform", "darwin")
    assert hermes_state.count_db_holders(store_file) is None


def test_the_source_id_is_the_stores_sqlite() -> None:
    conn = sqlite_library.connect(":memory:")
    try:
        expected = conn.execute("SELECT sqlite_source_id()").fetchone()[0]
    finally:
        conn.close()
    assert hermes_state.sqlite_source_id() == expected != ""


def test_the_repair_hint_names_the_bundled_sqlite_without_hermes() -> None:
    assert "pysqlite3" in hermes_state._wal_reset_repair_hint()


# -- is_disk_full_error and the causes' list ---------------------------------------------------
@pytest.mark.parametrize(("error", "full"), [
    (None, False),
    ("", False),
    (OSError(errno.ENOSPC, "No space left on device"), True),
    (OSError(errno.EACCES, "Permission denied"), False),
    (sqlite3.OperationalError("database or disk is full"), True),
    (sqlite3.OperationalError("database is locked"), False),
    ("RPC failed: [Errno 28] No space left on device", True),
    (errors.StoreFullError("the disk is full"), True),
    (errors.StoreBusyError(3, 1.0), False),
])  # fmt: skip
def test_a_full_disk_is_told_as_hermes_tells_it(error: Any, full: bool) -> None:
    assert hermes_state.is_disk_full_error(error) is full


def test_a_full_disk_wrapped_by_another_error_is_a_full_disk() -> None:
    try:
        try:
            raise OSError(errno.ENOSPC, "quota")
        except OSError as inner:
            raise RuntimeError("append failed") from inner
    except RuntimeError as outer:
        assert hermes_state.is_disk_full_error(outer)
        assert hermes_state.classify_persistence_error(outer) == "disk"


@given(st.one_of(st.none(), st.text(max_size=60), st.integers(), st.binary(max_size=16)))
def test_any_value_is_answered_without_an_error(value: Any) -> None:
    assert isinstance(hermes_state.is_disk_full_error(value), bool)


def test_the_causes_list_holds_every_cause_the_classifier_gives() -> None:
    samples = (
        None, errors.StoreBusyError(3, 1.0), errors.StoreFullError("x"),
        errors.SessionTurnLeaseLostError("x"), errors.CompressionSessionClosedError("s"),
        sqlite3.OperationalError("database disk image is malformed"), "who knows",
    )  # fmt: skip
    assert {hermes_state.classify_persistence_error(sample) for sample in samples} <= set(
        hermes_state.PERSISTENCE_ERROR_CAUSES
    )
    assert hermes_state.PERSISTENCE_ERROR_CAUSES[-1] == "unknown"


# -- apply_durability_barriers (iot 0.21.0's async delegation ledger) ---------------------------
def test_the_durability_barriers_keep_the_owner_s_journal_mode(tmp_path: Path) -> None:
    path = tmp_path / "ledger-beside.db"
    conn = sqlite_library.connect(str(path), isolation_level=None)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        assert hermes_state.apply_durability_barriers(conn) is True
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        assert conn.execute("PRAGMA journal_size_limit").fetchone()[0] == WAL_SIZE_LIMIT_BYTES
    finally:
        conn.close()


def test_the_durability_barriers_answer_false_where_sqlite_refuses(tmp_path: Path) -> None:
    conn = sqlite_library.connect(str(tmp_path / "closed.db"))
    conn.close()
    assert hermes_state.apply_durability_barriers(conn) is False


def test_the_fts_storage_version_is_the_layout_optimize_moves_to(tmp_path: Path) -> None:
    db = hermes_state.SessionDB(db_path=tmp_path / "state.db")
    try:
        db.create_session("s", "cli")
        db.append_message("s", "user", "hello")
        assert db.fts_optimize_available() is True
        db.optimize_fts_storage()
    finally:
        db.close()
    stats = hermes_state.collect_state_db_stats(tmp_path / "state.db")
    assert stats["fts_storage_version"] == hermes_state.FTS_STORAGE_VERSION == 3


def test_the_bare_billing_buckets_are_iot_s() -> None:
    assert frozenset({"auto", "custom"}) == hermes_state._BARE_BILLING_PROVIDERS
