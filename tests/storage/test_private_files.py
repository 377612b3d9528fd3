"""Private stays private: every copy of a store's data takes the store's mode (0600 without
one to follow) and is never written through a name someone else could have planted.

Each test runs under a 022 umask (what most shells have: new files 0644) against a 0600 (or
0640) store, and plants symbolic links where the old code wrote its temporary files
(``<db>.bak-<second>.partial``, ``<file>.partial``): someone who can create files in the
directory but cannot read the store must never get a readable copy through them.
"""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from file_checks import snapshot
from legacy_v1_v6 import build_legacy_db
from typer.testing import CliRunner

from sessionstore import SessionDB, cli
from sessionstore.dialects import database_file
from sessionstore.hermes.helpers import _page_copy
from sessionstore.ops import transfer
from sessionstore.storage.backups import backup_database
from sessionstore.storage.private_files import (
    create_new_file,
    mode_of,
    private_copy,
    publish_new,
)


@pytest.fixture(autouse=True)
def umask_022() -> Iterator[None]:
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def private_hermes_file(directory: Path, file_mode: int = 0o600) -> Path:
    path = directory / "state.db"
    build_legacy_db(path, 6)
    os.chmod(path, file_mode)
    return path


def plant_links(names: list[Path], loot: Path) -> list[Path]:
    """Links at ``names`` pointing into ``loot`` (an attacker's directory), each to an empty,
    world-readable file the attacker made: written through, it would hand over the data."""
    loot.mkdir(exist_ok=True)
    targets = []
    for number, name in enumerate(names):
        target = loot / f"copy-{number}"
        target.touch()
        os.chmod(target, 0o644)
        name.symlink_to(target)
        targets.append(target)
    return targets


def predictable_backup_names(path: Path, seconds: int = 90) -> list[Path]:
    """What the old backup wrote to: ``<file>.bak-<stamp>[-n].partial`` for the coming
    seconds."""
    now = time.time()
    names = []
    for offset in range(-1, seconds):
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now + offset))
        base = f"{path.name}.bak-{stamp}"
        names += [path.with_name(f"{base}.partial"), path.with_name(f"{base}-1.partial")]
    return names


def assert_untouched(loot_files: list[Path]) -> None:
    assert [p.stat().st_size for p in loot_files] == [0] * len(loot_files)


def assert_no_workspace_left(directory: Path) -> None:
    assert [p.name for p in directory.iterdir() if p.name.endswith(".partial") and p.is_dir()] == []


# -- the backups ---------------------------------------------------------------------------


def test_the_adoption_backup_keeps_the_store_mode_and_ignores_planted_links(
    tmp_path: Path,
) -> None:
    path = private_hermes_file(tmp_path)
    before = snapshot(path)
    loot = plant_links(predictable_backup_names(path), tmp_path / "attacker")
    with SessionDB(path) as db:
        backup = db.adoption_backup
    assert backup is not None and backup.parent == tmp_path
    assert not backup.is_symlink() and mode(backup) == 0o600
    assert snapshot(backup) == before
    assert_untouched(loot)
    assert_no_workspace_left(tmp_path)


@pytest.mark.parametrize("file_mode", [0o600, 0o640])
def test_the_db_upgrade_backup_keeps_the_store_mode(tmp_path: Path, file_mode: int) -> None:
    path = private_hermes_file(tmp_path, file_mode)
    loot = plant_links(predictable_backup_names(path), tmp_path / "attacker")
    result = CliRunner().invoke(cli.app, ["--url", str(path), "db", "upgrade", "--json"])
    assert result.exit_code == 0, result.output
    backup = Path(json.loads(result.stdout)["backup"])
    assert not backup.is_symlink() and mode(backup) == file_mode
    assert_untouched(loot)
    assert_no_workspace_left(tmp_path)


def test_a_backup_never_takes_a_name_that_is_a_link(tmp_path: Path) -> None:
    with SessionDB(tmp_path / "state.db") as db:
        db.create_session("s1", "cli")
    os.chmod(tmp_path / "state.db", 0o600)
    fixed = time.mktime((2030, 1, 2, 3, 4, 5, 0, 0, -1))
    first = tmp_path / "state.db.bak-20300102-030405"
    (loot,) = plant_links([first], tmp_path / "attacker")
    backup = backup_database(f"sqlite:///{tmp_path / 'state.db'}", clock=lambda: fixed)
    assert backup == tmp_path / "state.db.bak-20300102-030405-1"
    assert first.is_symlink() and mode(backup) == 0o600 and not backup.is_symlink()
    assert_untouched([loot])


def test_the_hermes_repair_backup_keeps_the_mode(tmp_path: Path) -> None:
    path = private_hermes_file(tmp_path)
    copy = _page_copy(path)
    assert copy.name.startswith("state.db.malformed-backup-")
    assert not copy.is_symlink() and mode(copy) == 0o600
    assert snapshot(copy) == snapshot(path)
    assert_no_workspace_left(tmp_path)


# -- exports, copies, imports ----------------------------------------------------------------


def test_export_takes_the_store_mode_and_ignores_a_planted_partial_name(
    store_url: str, tmp_path: Path
) -> None:
    with SessionDB(url=store_url) as db:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "a private thought")
    store_file = database_file(store_url)
    if store_file is not None:
        os.chmod(store_file, 0o600)
    output = tmp_path / "dump.jsonl"
    loot = plant_links([tmp_path / "dump.jsonl.partial"], tmp_path / "attacker")
    result = CliRunner().invoke(cli.app, ["--url", store_url, "export", "-o", str(output)])
    assert result.exit_code == 0, result.output
    # PostgreSQL has no mode to follow: 0600.
    assert not output.is_symlink() and mode(output) == 0o600
    assert "a private thought" in output.read_text(encoding="utf-8")
    assert_untouched(loot)
    assert_no_workspace_left(tmp_path)


def test_a_new_copy_target_takes_the_source_mode(store_url: str, tmp_path: Path) -> None:
    with SessionDB(url=store_url) as db:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "copied")
    source_file = database_file(store_url)
    if source_file is not None:
        os.chmod(source_file, 0o640)
    target = tmp_path / "copy.db"
    transfer.copy(store_url, f"sqlite:///{target}")
    # A PostgreSQL source has no mode to follow: 0600.
    assert mode(target) == (0o640 if source_file is not None else 0o600)
    with SessionDB(target) as db:
        assert [m["content"] for m in db.get_messages("s1")] == ["copied"]


def test_an_import_into_a_new_file_takes_the_export_mode(tmp_path: Path) -> None:
    source = tmp_path / "state.db"
    with SessionDB(source) as db:
        db.create_session("s1", "cli")
    os.chmod(source, 0o600)
    dump = tmp_path / "dump.jsonl"
    runner = CliRunner()
    assert runner.invoke(cli.app, ["--url", str(source), "export", "-o", str(dump)]).exit_code == 0
    assert mode(dump) == 0o600
    target = tmp_path / "restored.db"
    result = runner.invoke(cli.app, ["--url", str(target), "import", str(dump)])
    assert result.exit_code == 0, result.output
    assert mode(target) == 0o600
    from_stdin = tmp_path / "from-stdin.db"
    result = runner.invoke(
        cli.app, ["--url", str(from_stdin), "import", "-"], input=dump.read_text("utf-8")
    )
    assert result.exit_code == 0, result.output
    assert mode(from_stdin) == 0o600


def test_the_writers_side_files_take_the_store_mode(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s1", "cli")
    os.chmod(path, 0o600)
    with SessionDB(path) as db:
        db.append_message("s1", "user", "hello")
        assert mode(tmp_path / "state.db-writelock") == 0o600
        assert mode(tmp_path / "state.db-writegate") == 0o600  # the writers' turnstile


# -- the rule itself -------------------------------------------------------------------------


def test_mode_of_follows_the_source_or_is_private(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.touch()
    os.chmod(shared, 0o664)
    assert mode_of(shared) == 0o664
    assert mode_of(None) == 0o600
    assert mode_of(tmp_path / "missing") == 0o600


@pytest.mark.parametrize(
    ("store_mode", "copy_mode"), [(0o444, 0o644), (0o400, 0o600)], ids=["0444", "0400"]
)
def test_a_read_only_store_gives_copies_its_owner_can_write(
    migrated_sqlite_url: str, tmp_path: Path, store_mode: int, copy_mode: int
) -> None:
    """The field walk: a chmod 444 state.db gave 0444 copies, which a non-root owner could
    not write while copying: `export` failed with "Permission denied" on its private
    workspace's file, the adoption backup with "read-only". The owner's bits now always
    include read and write; the group's and others' stay the store's."""
    with SessionDB(url=migrated_sqlite_url) as db:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "kept")
    store_file = database_file(migrated_sqlite_url)
    assert store_file is not None
    os.chmod(store_file, store_mode)
    assert mode_of(store_file) == copy_mode
    output = tmp_path / "dump.jsonl"
    result = CliRunner().invoke(
        cli.app, ["--url", migrated_sqlite_url, "export", "-o", str(output)]
    )
    assert result.exit_code == 0, result.output
    assert mode(output) == copy_mode and "kept" in output.read_text(encoding="utf-8")
    assert_no_workspace_left(tmp_path)


def test_a_new_file_is_never_created_through_a_link_or_over_a_file(tmp_path: Path) -> None:
    (loot,) = plant_links([tmp_path / "name"], tmp_path / "attacker")
    with pytest.raises(FileExistsError):
        create_new_file(tmp_path / "name", 0o600)
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "attacker" / "not-yet")
    with pytest.raises(FileExistsError):
        create_new_file(dangling, 0o600)
    assert not (tmp_path / "attacker" / "not-yet").exists()
    assert_untouched([loot])
    fd = create_new_file(tmp_path / "fresh", 0o640)
    os.close(fd)
    assert mode(tmp_path / "fresh") == 0o640  # exactly: the umask neither widened nor narrowed


def test_publishing_skips_taken_names_and_a_failed_copy_leaves_nothing(tmp_path: Path) -> None:
    names = [tmp_path / "copy", tmp_path / "copy-1", tmp_path / "copy-2"]
    names[0].symlink_to(tmp_path / "nowhere")  # dangling: still taken
    names[1].touch()
    with private_copy(tmp_path, "copy", 0o600) as partial:
        partial.write_text("data")
        published = publish_new(partial, iter(names))
    assert published == names[2] and names[2].read_text() == "data"
    assert names[0].is_symlink() and names[1].read_text() == ""

    with pytest.raises(RuntimeError), private_copy(tmp_path, "other", 0o600) as partial:
        partial.write_text("half")
        raise RuntimeError("the copy failed")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy", "copy-1", "copy-2"]


def test_a_backup_reads_under_the_locks_the_store_url_names(tmp_path: Path) -> None:
    """A store URL naming ``vfs=unix-dotfile`` (a file system without working ``fcntl`` locks):
    its writers lock with a ``.lock`` directory, which the default layer does not see. The
    backup read the file under the default layer, beside a commit in progress; it reads under
    the URL's now, so it waits for the commit and holds what was committed before it began."""
    import threading

    from store_library import connect_like_the_store

    path = tmp_path / "state.db"
    uri = f"{path.as_uri()}?vfs=unix-dotfile"
    writer = connect_like_the_store(uri, uri=True, isolation_level=None,
                                    check_same_thread=False)  # fmt: skip
    writer.execute("PRAGMA journal_mode=delete")
    writer.execute("CREATE TABLE t (x TEXT)")
    writer.execute("BEGIN EXCLUSIVE")  # the dotfile lock: a commit is under way
    writer.execute("INSERT INTO t VALUES ('committed while the backup waited')")
    started = threading.Event()

    def commit_soon() -> None:
        started.wait(30)
        time.sleep(0.5)  # the backup has asked for the file by now
        writer.execute("COMMIT")

    committer = threading.Thread(target=commit_soon)
    committer.start()
    try:
        started.set()
        backup = backup_database(f"sqlite:///{path}?vfs=unix-dotfile&journal_mode=delete")
    finally:
        committer.join(60)
        writer.close()
    assert backup is not None
    copy = connect_like_the_store(backup)
    try:
        rows = [row[0] for row in copy.execute("SELECT x FROM t")]
    finally:
        copy.close()
    assert rows == ["committed while the backup waited"]
