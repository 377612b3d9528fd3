"""A store on a file system shared across a VM boundary (Docker Desktop's virtiofs, 9p) is never
switched into WAL, where SQLite accepts WAL and its shared memory silently corrupts; one in WAL
already keeps it, with a warning. The mounts are Linux's mountinfo: these tests point the
module at a mountinfo of their own that puts one directory on virtiofs, and open real stores
there and beside it."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from store_library import connect_like_the_store, journal_mode_of, needs_wal

from sessionstore import SessionDB
from sessionstore.dialects import shared_memory
from sessionstore.hermes.helpers import apply_wal_with_fallback

HOST_LINES = (
    "22 27 0:21 / /proc rw,relatime - proc proc rw",
    "27 1 259:1 / / rw,relatime - ext4 /dev/root rw",
    "40 27 0:50 / /work/data\\040dir rw - ext4 /dev/sdb rw",
)


def _mountinfo(tmp_path: Path, *extra: str) -> Path:
    path = tmp_path / "mountinfo"
    path.write_text("\n".join((*HOST_LINES, *extra)) + "\n")
    return path


def test_the_longest_mount_point_holding_a_directory_names_its_file_system(
    tmp_path: Path,
) -> None:
    info = _mountinfo(
        tmp_path,
        "50 27 0:60 / /mnt/host rw - virtiofs myfs rw",
        "51 50 0:61 / /mnt/host/native rw - ext4 /dev/sdc rw",
        "52 27 0:62 / /mnt/p9 rw - 9p mount rw",
        "not a mountinfo line",
    )
    kind = shared_memory.filesystem_type
    assert kind("/mnt/host", info) == "virtiofs"
    assert kind("/mnt/host/project/.hermes", info) == "virtiofs"
    assert kind("/mnt/host/native/x", info) == "ext4"  # a native mount inside the shared one
    assert kind("/mnt/hostile", info) == "ext4"  # a prefix of the name is not the directory
    assert kind("/mnt/p9/a", info) == "9p"
    assert kind("/work/data dir/state", info) == "ext4"  # octal escapes undone
    assert kind("/x", tmp_path / "no-such-mountinfo") == ""


@pytest.fixture
def virtiofs_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    shared = (tmp_path / "shared").resolve()
    shared.mkdir()
    info = _mountinfo(tmp_path, f"60 27 0:70 / {shared} rw - virtiofs hostshare rw")
    monkeypatch.setattr(shared_memory, "MOUNTINFO", info)
    shared_memory.filesystem_type.cache_clear()
    yield shared
    shared_memory.filesystem_type.cache_clear()


@needs_wal()  # beside a native store in WAL
def test_a_new_store_on_virtiofs_stays_in_the_rollback_journal_and_works(
    virtiofs_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert shared_memory.cross_vm_filesystem(virtiofs_dir / "state.db") == "virtiofs"
    assert shared_memory.cross_vm_filesystem(tmp_path / "native.db") is None
    with caplog.at_level(logging.WARNING), SessionDB(virtiofs_dir / "state.db") as db:
        db.create_session("s1", "cli")
        first = db.append_message("s1", "user", "kept out of WAL")
        assert journal_mode_of(virtiofs_dir / "state.db") == "delete"
        assert [m["id"] for m in db.get_messages("s1")] == [first]
        assert db.search_messages("WAL")[0]["session_id"] == "s1"
    assert "shared across a VM boundary" in caplog.text
    assert not (virtiofs_dir / "state.db-wal").exists()
    with SessionDB(tmp_path / "native.db"):  # beside it, a native file system: WAL
        assert journal_mode_of(tmp_path / "native.db") == "wal"


@needs_wal()  # beside a native store in WAL
def test_a_store_already_in_wal_on_virtiofs_keeps_it_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    shared = (tmp_path / "shared").resolve()
    shared.mkdir()
    with SessionDB(shared / "state.db") as db:  # made in WAL before the mount is known
        db.create_session("s1", "cli")
    assert journal_mode_of(shared / "state.db") == "wal"
    monkeypatch.setattr(
        shared_memory, "MOUNTINFO",
        _mountinfo(tmp_path, f"60 27 0:70 / {shared} rw - virtiofs hostshare rw"),
    )  # fmt: skip
    shared_memory.filesystem_type.cache_clear()
    try:
        with caplog.at_level(logging.WARNING), SessionDB(shared / "state.db") as db:
            db.append_message("s1", "user", "still written")
            assert journal_mode_of(shared / "state.db") == "wal"
            assert len(db.get_messages("s1")) == 1
    finally:
        shared_memory.filesystem_type.cache_clear()
    assert "is on a virtiofs file system" in caplog.text and "kept in WAL" in caplog.text


@needs_wal()  # beside a native store in WAL
def test_hermes_wal_helper_refuses_wal_on_virtiofs(virtiofs_dir: Path, tmp_path: Path) -> None:
    shared = connect_like_the_store(virtiofs_dir / "raw.db")
    native = connect_like_the_store(tmp_path / "raw.db")
    try:
        assert apply_wal_with_fallback(shared, db_label="shared raw.db") == "delete"
        assert shared.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        assert apply_wal_with_fallback(native, db_label="native raw.db") == "wal"
    finally:
        shared.close()
        native.close()


def test_a_store_linked_into_a_shared_folder_is_judged_by_the_folder_it_points_into(
    virtiofs_dir: Path, tmp_path: Path
) -> None:
    # SQLite follows the link: the file, its -wal and its -shm live where the link points.
    native = tmp_path / "home"
    native.mkdir()
    (native / "state.db").symlink_to(virtiofs_dir / "state.db")
    (virtiofs_dir / "elsewhere.db").symlink_to(native / "real.db")
    assert shared_memory.cross_vm_filesystem(native / "state.db") == "virtiofs"
    assert shared_memory.cross_vm_filesystem(virtiofs_dir / "elsewhere.db") is None
    with SessionDB(native / "state.db") as db:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "kept out of WAL through the link")
        assert journal_mode_of(virtiofs_dir / "state.db") == "delete"
    assert not (virtiofs_dir / "state.db-wal").exists()
    assert sorted(p.name for p in native.iterdir()) == ["state.db"]  # the link, nothing else
