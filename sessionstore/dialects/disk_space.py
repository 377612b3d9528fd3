"""Whether a failed write ran out of room: the one rule for "the disk is full".

A write fails for lack of room in three ways: the file system is full (``ENOSPC``), the user's
quota is spent (``EDQUOT``), or the file reached the process's file-size limit
(``RLIMIT_FSIZE``, ``ulimit -f``: ``EFBIG``). Python's own file writes carry that errno.
SQLite does not pass it on: a short write becomes "database or disk is full", but a write
refused outright with ``EFBIG`` or ``EDQUOT`` (and a ``-shm`` that cannot grow) becomes the
generic "disk I/O error", and the driver exposes no errno. So for a SQLite I/O error the
files involved are looked at instead (``statvfs``/``stat``, which open nothing): it counts as a
full disk when their file system has less than :data:`LOW_ROOM_BYTES` left for this process,
or when the process has a file-size limit and one of the files has come within
:data:`LOW_ROOM_BYTES` of it. A quota that ``statvfs`` does not show is the one case left
unrecognised: that I/O error stays what SQLite called it.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from ..errors import StoreFullError

try:
    import resource
except ImportError:  # Windows: no file-size limit to look at
    resource = None  # type: ignore[assignment]

OUT_OF_ROOM_ERRNOS = frozenset(
    code for code in (errno.ENOSPC, getattr(errno, "EDQUOT", None), errno.EFBIG) if code
)
"""No space left on the device, quota exceeded, file too large (the file-size limit)."""
LOW_ROOM_BYTES = 1024 * 1024
"""Room below which an I/O error of SQLite's is taken for a full disk: a transaction's pages,
a log's growth step, the shared-memory index's next 32 KiB."""


def full_disk_error(what: str, consequence: str = "nothing was written") -> StoreFullError:
    """The one wording of a full disk: ``what`` could not be written, and what that left."""
    return StoreFullError(
        f"the disk holding {what} is full (or a quota or this process's file-size limit is "
        f"reached); {consequence} and earlier data is intact: free some space and retry"
    )


def is_out_of_room_oserror(exc: BaseException) -> bool:
    """True for an ``OSError`` that says the disk, the quota or the file-size limit is full."""
    return isinstance(exc, OSError) and exc.errno in OUT_OF_ROOM_ERRNOS


@contextlib.contextmanager
def out_of_room_typed(what: str, consequence: str) -> Iterator[None]:
    """Python's own writes of ``what``: a full disk, quota or file-size limit raises
    :class:`StoreFullError` (saying ``consequence``), any other error is left alone."""
    try:
        yield
    except OSError as exc:
        if not is_out_of_room_oserror(exc):
            raise
        raise full_disk_error(what, consequence) from exc


def room_in(directory: Path) -> int | None:
    """The bytes this process may still write in ``directory``'s file system (root may use
    the blocks reserved for it); None where that cannot be told."""
    try:
        disk = os.statvfs(directory)
        blocks = disk.f_bfree if os.geteuid() == 0 else disk.f_bavail
    except (OSError, AttributeError):  # unreachable, or no statvfs/geteuid (Windows)
        return None
    return blocks * disk.f_frsize


def no_room_left(paths: Iterable[Path]) -> bool:
    """True when the file system holding ``paths`` has (almost) no room left for this
    process, or a file among them has (almost) reached the process's file-size limit.
    Existing paths are measured; a missing one is judged by its directory."""
    limit = _file_size_limit()
    for path in paths:
        try:
            size = os.stat(path).st_size if path.exists() else None
        except OSError:
            continue
        if limit is not None and size is not None and size + LOW_ROOM_BYTES >= limit:
            return True
        room = room_in(path if size is not None else path.parent)
        if room is not None and room < LOW_ROOM_BYTES:
            return True
    return False


def _file_size_limit() -> int | None:
    if resource is None:
        return None
    soft, _hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    return None if soft == resource.RLIM_INFINITY else soft
