"""Every copy of user data this package writes: private like its source, never through a link.

The rule, for backups (adoption, ``db upgrade``, ``db doctor --fix``, Hermes's repair), ``export
-o``, the new file of ``db copy`` and ``import``, the private copies long reads and the
doctor's checks read (:mod:`.snapshots`), and the writers' side file:

- **Mode.** The copy gets its source's permission bits (a 0600 store gives 0600 copies), set
  with ``fchmod`` so the umask cannot widen or narrow them; 0600 when the source has no mode
  to follow (PostgreSQL, standard input). The owner may always read and write its copy: a
  read-only 0444 (0400) store gives 0644 (0600) copies (a 0444 copy could not be written
  while copying by anyone but root, nor imported into); the group's and others' bits are
  always the source's. SQLite gives the copy's ``-wal``/``-journal`` its database's mode
  itself.
- **No predictable name.** A copy is written inside a new directory that only this user can
  enter (``tempfile.mkdtemp`` in the target's directory: a random name, mode 0700), where
  nobody else can plant a link, SQLite's own side files of the copy included. The finished file
  is then given its name in one step: a new name (backups) with ``link``, which fails rather
  than follow or replace anything already there (the next free name is taken); a chosen name
  (``export -o``) with ``rename``, which replaces a link itself, never what it points to.
  The directory is removed afterwards, also when the copy failed; a process killed half-way
  leaves it behind (``.<name>.<random>.partial``, 0700, deletable).
- **New files** (a store ``db copy`` or ``import`` creates, the side file) are created with
  ``O_CREAT | O_EXCL | O_NOFOLLOW``: never an existing file, never through a link.

A store's own file, ``-wal`` and ``-shm`` are never opened here (``dialects/sqlite.py``'s file
rule): the mode is read with ``stat``, the copying is SQLite's backup API's.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

PRIVATE_MODE = 0o600
"""The mode of a copy whose source has none (a server's data, standard input)."""
OWNER_READ_WRITE = 0o600
"""What the owner may always do with its copy, whatever the source's bits."""
_CREATE_FLAGS = (
    os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
)  # fmt: skip


def mode_of(source: Path | None) -> int:
    """The permission bits a copy of ``source`` takes: its own plus the owner's read and
    write, or 0600 without one."""
    if source is None:
        return PRIVATE_MODE
    try:
        return (stat.S_IMODE(os.stat(source).st_mode) & 0o777) | OWNER_READ_WRITE
    except OSError:
        return PRIVATE_MODE


def create_new_file(path: Path, mode: int) -> int:
    """Create ``path``, which must not exist (not even as a link), with exactly ``mode``;
    return its open descriptor (the caller closes it)."""
    fd = os.open(path, _CREATE_FLAGS, mode)
    try:
        if hasattr(os, "fchmod"):
            os.fchmod(fd, mode)  # the umask narrowed what os.open asked for
    except BaseException:
        os.close(fd)
        raise
    return fd


def create_empty_file(path: Path, mode: int) -> bool:
    """Create ``path`` empty with ``mode`` unless something already has that name; True if
    created. For a store about to be created: SQLite opens the empty file as a new database
    and keeps its mode."""
    try:
        os.close(create_new_file(path, mode))
    except FileExistsError:
        return False
    return True


@contextlib.contextmanager
def private_workspace(directory: Path, name: str) -> Iterator[Path]:
    """A new directory in ``directory`` that only this user may enter, removed on the way
    out with everything left in it. ``name`` (the final file's) makes it recognisable."""
    workspace = Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=".partial", dir=directory))
    try:
        yield workspace
    finally:
        shutil.rmtree(workspace, ignore_errors=True)


@contextlib.contextmanager
def private_copy(target_directory: Path, name: str, mode: int) -> Iterator[Path]:
    """The path of a new, empty file with ``mode``, inside a private workspace in
    ``target_directory``; write the copy there, then :func:`publish_new` or
    :func:`publish_over` it before the block ends. Whatever is left is removed."""
    with private_workspace(target_directory, name) as workspace:
        partial = workspace / name
        create_empty_file(partial, mode)
        yield partial


def publish_new(partial: Path, names: Iterable[Path]) -> Path:
    """Give ``partial`` the first of ``names`` that nothing has yet (a file, a link, a
    dangling link); that name is returned. ``partial`` must be in the same directory tree
    (one file system).

    ``link`` creates the name only if it is free, atomically: two processes never take the
    same one. Where the file system has no hard links, ``rename`` after a look is the
    fallback, which a process creating the same name in between could lose to."""
    for candidate in names:
        try:
            os.link(partial, candidate)
        except FileExistsError:
            continue
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
                raise
            if os.path.lexists(candidate):
                continue
            os.rename(partial, candidate)
            return candidate
        os.unlink(partial)
        return candidate
    raise FileExistsError("no free name for the copy")  # names is endless in practice


def publish_over(partial: Path, target: Path) -> None:
    """Give ``partial`` the name ``target``, replacing what has it (a link is replaced, not
    followed)."""
    os.replace(partial, target)
