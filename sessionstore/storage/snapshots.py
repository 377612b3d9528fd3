"""A long read's private snapshot: a streaming read that holds no writer off.

``Store.reading()`` (an export, ``db copy``, a caller's own streaming) lasts as long as its
consumer takes: an export piped into a slow link reads for minutes. Where a reader holds
writers off for as long as it reads (SQLite in the rollback journal: ``journal_mode=delete``
by choice, a home on NFS or a Docker Desktop share, every file where the SQLite in use cannot
take WAL safely), a gateway appending meanwhile ran out of its retry budget and lost the
message. There the read reads a private copy of the store instead:

- taken in one step of SQLite's backup API on the store's own connection
  (``StoreDialect.copy_as_read``): one snapshot, the store's lock held only while its pages
  are copied, never while the consumer reads;
- written into a private workspace (:mod:`.private_files`: the store's mode, created
  exclusively, never through a predictable name) beside the store, or under the temporary
  directory where the store's folder takes no new file; removed when the read ends (a
  process killed mid-read leaves ``.<name>.<random>.partial``, deletable);
- on disk, not in memory (SQLite's anonymous temporary databases live in memory in the
  pysqlite3 build: a copy of a large store would be as large in RAM).

It costs room for a copy of the file and the time to copy it. Where no copy can be made (no
room or no write access in either place) the read reads the file itself, as it always did
in WAL, and says in the log that the file's writers wait for it.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from sqlalchemy.engine import URL, Connection

from ..dialects import StoreDialect, file_location
from ..dialects.disk_space import room_in
from ..errors import PermissionDeniedError, ReadOnlyStoreError, StoreFullError
from .engine import create_store_engine
from .private_files import mode_of, private_copy

logger = logging.getLogger(__name__)

SPARE_ROOM_BYTES = 64 * 1024 * 1024
"""Room a place keeps after the copy, or it takes none: a copy that fills the disk the store
is on would make its writers fail meanwhile ("database or disk is full")."""
_NO_PLACE_FOR_A_COPY = (OSError, StoreFullError, ReadOnlyStoreError, PermissionDeniedError)
"""What says a copy cannot be written here (no room, no write access), not that the store
cannot be read."""


@contextlib.contextmanager
def streaming_source(dialect: StoreDialect, url: URL, conn: Connection) -> Iterator[Connection]:
    """The connection a long read of the store at ``url`` reads from: ``conn`` (the store's,
    outside any transaction) itself where a reader holds no writer off, else one to a private
    copy of the store as it is now, which lives until the block ends."""
    path = dialect.database_file(url)
    if path is None or not dialect.long_reads_hold_writers_off(conn):
        yield conn
        return

    def copy_store(destination: Path) -> None:
        # Through the store's own connection, in a read transaction of its own: its locks,
        # its file system layer (a URL's vfs=), its busy timeout.
        with conn.begin():
            dialect.copy_as_read(conn, destination)

    instead = "the long read reads the file itself, and the file's writers wait until it ends"
    with private_copy_of(dialect, path, copy_store, instead=instead) as copy:
        if copy is None:
            yield conn
            return
        engine = create_store_engine(
            copy_location(dialect, url, copy), read_only=True, set_journal_mode=False
        )
        try:
            with engine.connect() as copied:
                yield copied
        finally:
            engine.dispose()


def copy_location(dialect: StoreDialect, url: URL, copy: Path) -> URL:
    """The URL of the private ``copy`` of the store at ``url``, opened as the store must be
    (its VFS: the copy lies on the same file system, under the same locking)."""
    return file_location(copy).update_query_dict(dialect.lasting_parameters(url))


@contextlib.contextmanager
def private_copy_of(
    dialect: StoreDialect, path: Path, write: Callable[[Path], None], *, instead: str
) -> Iterator[Path | None]:
    """A private copy of the store at ``path``, made by ``write`` (given the new, empty file
    with the store's mode), beside the store or else under the temporary directory, and
    removed when the block ends; None when neither place takes one (no room, no write
    access), with a warning in the log that says why and what the caller does ``instead``."""
    with contextlib.ExitStack() as kept:
        copy = _copy_somewhere(kept, dialect, path, write, instead)
        yield copy


def _copy_somewhere(
    kept: contextlib.ExitStack,
    dialect: StoreDialect,
    path: Path,
    write: Callable[[Path], None],
    instead: str,
) -> Path | None:
    reasons = []
    for directory in (path.parent, Path(tempfile.gettempdir())):
        short = _short_of_room(directory, path)
        if short is not None:
            reasons.append(f"{directory}: {short}")
            continue
        with contextlib.ExitStack() as attempt:
            try:
                copy = attempt.enter_context(private_copy(directory, path.name, mode_of(path)))
            except OSError as exc:
                reasons.append(f"{directory}: {exc}")
                continue
            try:
                write(copy)
            except Exception as exc:
                # Typed by what the copy's own file says: a full disk, a read-only place.
                typed = dialect.translate_error(exc, file_location(copy)) or exc
                if not isinstance(typed, _NO_PLACE_FOR_A_COPY):
                    raise
                reasons.append(f"{directory}: {typed}")
                continue
            kept.enter_context(attempt.pop_all())
            return copy
    logger.warning(
        "no private copy of %s could be taken (%s); %s", path, "; ".join(reasons), instead
    )
    return None


def _short_of_room(directory: Path, path: Path) -> str | None:
    """Why ``directory`` cannot take a copy of the file at ``path`` and keep
    :data:`SPARE_ROOM_BYTES` free, or None (also when its room cannot be told)."""
    room = room_in(directory)
    try:
        size = path.stat().st_size
    except OSError:
        return None
    if room is None or room >= size + SPARE_ROOM_BYTES:
        return None
    return f"{room} bytes free, a copy takes {size} and {SPARE_ROOM_BYTES} must stay free"
