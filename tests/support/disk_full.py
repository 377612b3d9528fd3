"""Disk-full scenarios, each in a process of its own: a file-size limit (``RLIMIT_FSIZE``) or a
nearly full small file system squeezes the room while the store is used, then gives it back.

Run as ``python tests/support/disk_full.py SCENARIO SQUEEZE DIRECTORY``, or forked as
``disk_full:main`` by a ``prefork.ForkServer`` (``IMPORTS``, ``prime``):

- SCENARIO: ``append``, ``adoption_backup``, ``adoption_migration``, ``import``, ``export``,
  ``copy``;
- SQUEEZE: ``rlimit`` (the process's file-size limit is lowered: writes past it fail with
  ``EFBIG``, SIGXFSZ ignored) or ``filler`` (DIRECTORY is on a small file system, which a
  filler file fills but for a few hundred KiB: ``ENOSPC``);

It prints one JSON object: what the squeezed operation raised (``raised``: the class name,
``message``), and what was checked once the room was back (``after``).
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

from legacy_v1_v6 import build_legacy_db  # beside this program: on its sys.path
from store_library import connect_like_the_store

PROGRAM = str(Path(__file__).resolve())
BIG_TEXT = "word " * 1600  # 8 KB a message: a few hundred KiB fill within a few dozen appends
MAX_ATTEMPTS = 2000


class Squeeze:
    """Less room for this process's writes (:meth:`tighten`), then all of it back
    (:meth:`release`)."""

    def __init__(self, kind: str, directory: Path) -> None:
        self.kind = kind
        self.directory = directory
        self.filler = directory.parent / f"filler-{directory.name}"

    def tighten(self, room: int, *files: Path) -> None:
        """``room`` bytes more for the largest of ``files`` (rlimit), or ``room`` bytes free on
        the file system (filler)."""
        if self.kind == "rlimit":
            largest = max((f.stat().st_size for f in files if f.exists()), default=0)
            resource.setrlimit(resource.RLIMIT_FSIZE, (largest + room, resource.RLIM_INFINITY))
            return
        disk = os.statvfs(self.directory)
        free = disk.f_bfree * disk.f_frsize
        with open(self.filler, "wb") as filler:
            chunk = b"\0" * (1 << 20)
            remaining = max(0, free - room)
            while remaining > 0:
                remaining -= filler.write(chunk[: min(len(chunk), remaining)])

    def release(self) -> None:
        if self.kind == "rlimit":
            resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY,) * 2)
        else:
            self.filler.unlink(missing_ok=True)


def outcome(call: Callable[[], Any]) -> dict[str, Any]:
    try:
        call()
    except Exception as exc:
        return {"raised": type(exc).__name__, "message": str(exc)}
    return {"raised": None, "message": None}


def sound(path: Path) -> bool:
    """``integrity_check`` of the file (the store's library: a store here may have it open)."""
    with closing(connect_like_the_store(path)) as conn:
        return [row[0] for row in conn.execute("PRAGMA integrity_check")] == ["ok"]


def leftovers(directory: Path, expected: set[str]) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name not in expected)


def fill_store(path: Path, sessions: int = 3, messages: int = 40) -> None:
    from sessionstore import SessionDB

    with SessionDB(path) as db:
        for number in range(sessions):
            db.create_session(f"s{number}", "cli")
            db.append_messages(
                f"s{number}",
                [{"role": "user", "content": f"{number}-{i} {BIG_TEXT}"} for i in range(messages)],
            )


def query_one(path: Path, sql: str) -> Any:
    with closing(connect_like_the_store(path)) as conn:
        return conn.execute(sql).fetchone()[0]


def message_count(path: Path) -> int:
    return int(query_one(path, "SELECT count(*) FROM messages"))


# -- the scenarios ---------------------------------------------------------------------------


def append(squeeze: Squeeze, directory: Path) -> dict[str, Any]:
    from sessionstore import SessionDB

    path = directory / "state.db"
    db = SessionDB(path)
    db.create_session("s1", "cli")
    db.append_message("s1", "user", "before")
    acknowledged = 1
    squeeze.tighten(256 * 1024, path, Path(f"{path}-wal"))

    def fill() -> None:
        nonlocal acknowledged
        for number in range(MAX_ATTEMPTS):
            db.append_message("s1", "user", f"{number} {BIG_TEXT}")
            acknowledged += 1

    result = outcome(fill)
    squeeze.release()
    db.append_message("s1", "user", "after")
    acknowledged += 1
    stored = len(db.get_messages("s1"))
    db.close()
    return {**result, "after": {"acknowledged": acknowledged, "stored": stored,
                                "sound": sound(path)}}  # fmt: skip


def _hermes_file(directory: Path) -> tuple[Path, int]:
    path = directory / "state.db"
    build_legacy_db(path, 6)
    return path, message_count(path)


def _adoption(
    squeeze: Squeeze, directory: Path, *, backup: bool, room: Callable[[Path], int]
) -> dict[str, Any]:
    from sessionstore import SessionDB
    from sessionstore.schema import migrate

    path, messages = _hermes_file(directory)
    session_id = query_one(path, "SELECT id FROM sessions ORDER BY id LIMIT 1")
    before = path.read_bytes()
    squeeze.tighten(room(path), path)
    result = outcome(lambda: SessionDB(path, backup_on_adopt=backup).close())
    squeeze.release()
    after: dict[str, Any] = {
        "unchanged": path.read_bytes() == before,
        "leftovers": leftovers(directory, {path.name}),
    }
    with SessionDB(path, backup_on_adopt=backup) as db:
        after["backup"] = db.adoption_backup is not None
        db.append_message(session_id, "user", "after")
    after["up_to_date"] = migrate.status(f"sqlite:///{path}").up_to_date
    after["messages"] = message_count(path) - messages
    after["sound"] = sound(path)
    return {**result, "after": after}


def adoption_backup(squeeze: Squeeze, directory: Path) -> dict[str, Any]:
    # Room for the store's own -shm (32 KiB), not for a copy of the file.
    def room(path: Path) -> int:
        return -(path.stat().st_size // 2) if squeeze.kind == "rlimit" else 40 * 1024

    return _adoption(squeeze, directory, backup=True, room=room)


def adoption_migration(squeeze: Squeeze, directory: Path) -> dict[str, Any]:
    # Room for the -shm, not for the migration's log.
    return _adoption(squeeze, directory, backup=False, room=lambda _path: 48 * 1024)


def import_(squeeze: Squeeze, directory: Path) -> dict[str, Any]:
    from sessionstore.ops.transfer import export_jsonl_file, import_jsonl
    from sessionstore.schema import migrate
    from sessionstore.storage.store import Store

    source = directory / "source.db"
    fill_store(source)
    dump = directory / "dump.jsonl"
    with Store.open(f"sqlite:///{source}", read_only=True) as store:
        export_jsonl_file(store, dump)
    target = directory / "target.db"
    migrate.upgrade(f"sqlite:///{target}")
    with Store.open(f"sqlite:///{target}") as store:
        squeeze.tighten(192 * 1024, target, Path(f"{target}-wal"))
        with dump.open(encoding="utf-8") as fp:
            result = outcome(lambda: import_jsonl(store, fp))
        squeeze.release()
        empty_after_failure = message_count(target) == 0
        with dump.open(encoding="utf-8") as fp:
            imported = import_jsonl(store, fp).messages
    return {**result, "after": {"empty_after_failure": empty_after_failure,
                                "imported": imported, "expected": message_count(source),
                                "sound": sound(target)}}  # fmt: skip


def export(squeeze: Squeeze, directory: Path) -> dict[str, Any]:
    from sessionstore.ops.transfer import export_jsonl_file
    from sessionstore.storage.store import Store

    source = directory / "source.db"
    fill_store(source)
    output = directory / "dump.jsonl"
    with Store.open(f"sqlite:///{source}", read_only=True) as store:
        if squeeze.kind == "rlimit":
            # Half of what the export writes (the file's size says little: its indexes grew).
            probe = directory / "probe.jsonl"
            export_jsonl_file(store, probe)
            needed = probe.stat().st_size
            probe.unlink()
            squeeze.tighten(needed // 2)  # the export outgrows it
        else:
            squeeze.tighten(128 * 1024)
        result = outcome(lambda: export_jsonl_file(store, output))
        squeeze.release()
        missing_after_failure = not output.exists()
        stray = leftovers(directory, {source.name, f"{source.name}-wal", f"{source.name}-shm"})
        written = export_jsonl_file(store, output)
    return {**result, "after": {"missing_after_failure": missing_after_failure,
                                "leftovers": stray, "written": written}}  # fmt: skip


def copy(squeeze: Squeeze, directory: Path) -> dict[str, Any]:
    from sessionstore.ops import transfer

    source = directory / "source.db"
    fill_store(source)
    target = directory / "copy.db"
    source_url, target_url = f"sqlite:///{source}", f"sqlite:///{target}"
    transfer.copy(source_url, target_url)  # the target's schema, so its size is known
    target.unlink()
    if squeeze.kind == "rlimit":
        squeeze.tighten(-(source.stat().st_size // 3), source)  # the copy outgrows it
    else:
        squeeze.tighten(384 * 1024)
    result = outcome(lambda: transfer.copy(source_url, target_url))
    squeeze.release()
    copied = transfer.copy(source_url, target_url)
    after = {
        "sessions": copied.sessions + copied.skipped_sessions,
        "messages": message_count(target),
        "expected": message_count(source),
        "sound": sound(target),
    }
    return {**result, "after": after}


SCENARIOS: dict[str, Callable[[Squeeze, Path], dict[str, Any]]] = {
    "append": append,
    "adoption_backup": adoption_backup,
    "adoption_migration": adoption_migration,
    "import": import_,
    "export": export,
    "copy": copy,
}


IMPORTS = ("disk_full", "sessionstore", "sessionstore.cli", "sessionstore.ops.transfer")
"""What a scenario imports before any squeeze (``main``), for a ``prefork.ForkServer``."""


def prime() -> None:
    """A ``prefork.ForkServer``'s step before its forks: one new store built and closed, so a
    scenario's new stores are built from the chain's result kept in the process (as every new
    store after a process's first is) rather than each scenario running the chain once; the
    squeezes all come after a scenario's first new store."""
    import tempfile

    from sessionstore import SessionDB

    with tempfile.TemporaryDirectory() as scratch:
        SessionDB(Path(scratch) / "primer.db").close()


def main(scenario: str, kind: str, directory: str) -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG from write(), not a killed process
    # Everything imported before any squeeze.
    import sessionstore.cli
    import sessionstore.ops.transfer  # noqa: F401

    where = Path(directory)
    where.mkdir(parents=True, exist_ok=True)
    print(json.dumps(SCENARIOS[scenario](Squeeze(kind, where), where)), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
