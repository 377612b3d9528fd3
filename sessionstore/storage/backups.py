"""Backups of a live store: a consistent copy beside it, as private as the store.

A SQLite store is copied by SQLite's online backup API (``StoreDialect.copy_database``: one
snapshot, WAL content included, its pages checked) into a private workspace
(:mod:`.private_files`), with the store's mode, and published as ``<file>.bak-<timestamp>``
(``-1``, ``-2``, ... when that name is taken: two backups in one second keep both). A backup
file that exists is complete. A PostgreSQL store is not copied (``pg_dump`` is its tool).

When the disk, the quota or the file-size limit has no room for the copy, the backup raises
:class:`~sessionstore.errors.StoreFullError`, no partial file is left, and the store was
only read.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from sqlalchemy.engine import URL, make_url

from ..dialects import dialect_for_url, file_url_object
from ..dialects.disk_space import full_disk_error, out_of_room_typed
from ..errors import ReadOnlyStoreError, SessionStoreError, StoreFullError
from .private_files import mode_of, private_copy, publish_new


def backup_database(url: str | URL, *, clock: Callable[[], float] = time.time) -> Path | None:
    """Back the store up beside its file (the copy's path); None where this package takes no
    backups (a server, an in-memory database). A file this process cannot write (its mode,
    owner, directory, a side file another user left) raises ReadOnlyStoreError saying why,
    before any copy: the change the backup is for would fail."""
    parsed = make_url(url)
    dialect = dialect_for_url(parsed)
    path = dialect.database_file(parsed)
    if path is None:
        return None
    why = dialect.why_read_only(parsed)
    if why is not None:
        # The change the backup is taken for would fail: no copy is left beside the file.
        raise ReadOnlyStoreError(
            f"cannot change the session store {path}: {why}; nothing was written"
        )
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(clock()))
    return write_copy(
        path,
        lambda destination: dialect.copy_database(parsed, destination),
        numbered_names(path, f".bak-{stamp}"),
    )


def numbered_names(path: Path, suffix: str) -> Iterator[Path]:
    """``<file><suffix>``, then ``<file><suffix>-1``, ``-2``, ...: the candidates for a copy."""
    yield path.with_name(path.name + suffix)
    for number in itertools.count(1):
        yield path.with_name(f"{path.name}{suffix}-{number}")


def write_copy(source: Path, copy: Callable[[Path], None], names: Iterator[Path]) -> Path:
    """``copy(destination)`` into a private new file with ``source``'s mode, published under
    the first free name of ``names`` (beside ``source``); that name is returned.

    A full disk raises StoreFullError; any failure leaves no file behind."""
    first = next(names)
    what = f"the copy {first}"
    with (
        out_of_room_typed(what, "no copy was written"),
        private_copy(first.parent, first.name, mode_of(source)) as partial,
    ):
        try:
            copy(partial)
        except SessionStoreError:
            raise
        except Exception as exc:
            # SQLite names no errno: its dialect reads a full disk off the copy's files.
            partial_url = file_url_object(partial)
            typed = dialect_for_url(partial_url).translate_error(exc, partial_url)
            if isinstance(typed, StoreFullError):
                raise full_disk_error(what, "no copy was written") from exc
            if typed is not None:
                raise typed from exc
            raise
        return publish_new(partial, itertools.chain((first,), names))
