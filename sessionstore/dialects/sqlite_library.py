"""Which SQLite library sessionstore runs on in this process, and one library per file.

The WAL-reset bug
-----------------
SQLite 3.7.0 to 3.51.2 can corrupt a WAL database when one connection's checkpoint races
another's commit that resets the log (https://sqlite.org/wal.html#walresetbug; fixed in 3.51.3
and 3.52+, backported to 3.50.7 and 3.44.6). Python's ``sqlite3`` links whatever SQLite the
interpreter was built with: 3.40.1 on Debian 12, vulnerable.

The decision
------------
sessionstore runs on a SQLite that has the fix wherever one can be had, and never turns WAL on
with one that has not:

1. The standard library's ``sqlite3`` when its SQLite is fixed.
2. Otherwise ``pysqlite3`` (0.6.1 bundles SQLite 3.53.4, FTS5 and trigram included), when
   it is installed with a fixed SQLite: a dependency of the package on the platforms its
   wheels cover (Linux x86-64, macOS arm64, Windows x86-64). A ``pysqlite3`` built from
   source against a vulnerable system SQLite is not taken.
3. Otherwise the standard library, with Hermes's gate: a file that is not in WAL yet stays
   in the rollback journal (readers then wait while a writer commits), a file already in
   WAL keeps it (switching it back needs every other opener gone) with one warning per file.

``SESSIONSTORE_SQLITE_DRIVER=sqlite3`` (or ``pysqlite3``) overrides the choice, read once per
process: ``sqlite3`` is for a program that must open the store's file with the standard
library itself, in the same process (then rule 3 applies to a vulnerable SQLite).

Why not the gate alone: every Hermes ``state.db`` in the field is in WAL already, so the gate
protects none of them, and the rollback journal makes readers wait for commits. Why not
pysqlite3 always: a fixed standard library needs nothing else, and one library less in the
process is one trap less (below).

What pysqlite3 costs, measured on this machine (CHANGELOG.md, "Which SQLite"): the same append,
search and open times within noise, a few milliseconds more to import, and the trap below.

One library per file
--------------------
Two SQLite libraries in one process do not share their POSIX-lock bookkeeping: when either
closes a descriptor of the file, the kernel drops the locks the other holds, and the database
can be corrupted (https://sqlite.org/howtocorrupt.html, 2.2.1). So:

- every connection this package opens or hands out comes from :func:`library` (the engines'
  pools, ``hermes.state``'s ``_conn``, backups, repairs: :func:`connect`);
- with pysqlite3, its exception classes are made subclasses of the standard library's
  (``pysqlite3.dbapi2.OperationalError`` is also a ``sqlite3.OperationalError``), so code
  written for the standard library, Hermes's included, still catches what ``_conn`` raises;
- with pysqlite3, when it opens a file it has no connection to yet in this process (a store
  opening, or reopening after every connection closed), this process's open descriptors are
  looked at first (Linux: ``/proc/self/fd``, ``stat`` only, nothing is opened): any
  descriptor of the file, its ``-wal``, ``-shm`` or ``-journal`` then belongs to another
  library (or a plain ``open()``), and the connection is refused with
  :class:`~sessionstore.errors.SQLiteLibraryConflictError` before anything is opened (a
  connection dropped without being closed, waiting for the garbage collector, is collected
  first and does not count: only one still referenced does). It
  costs about 16 µs per open descriptor of the process (0.2 ms at 12, 8 ms at 500), once
  per file and open, never per call. Not seen: another library that opens the file *after*
  this one (the later connections of a store are not checked: with a pool's overflow
  connections coming and going under load, that would be a scan per connection). With the
  standard library in use nothing is checked: the other opener is then most likely the
  same library, which is safe.
"""

from __future__ import annotations

import functools
import gc
import importlib
import logging
import os
import sqlite3
import sys
import threading
import weakref
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple, cast

from ..errors import SQLiteLibraryConflictError
from . import last_close

logger = logging.getLogger(__name__)

DRIVER_ENV_VAR = "SESSIONSTORE_SQLITE_DRIVER"
STANDARD_LIBRARY = "sqlite3"
BUNDLED_LIBRARY = "pysqlite3"
COMPANION_SUFFIXES = ("-wal", "-shm", "-journal")
_RAISED_EXCEPTIONS = (
    "InterfaceError", "DatabaseError", "DataError", "OperationalError", "IntegrityError",
    "InternalError", "ProgrammingError", "NotSupportedError",
)  # fmt: skip
"""The DB-API exception classes a library raises, every base before its subclasses. ``Error``
and ``Warning`` themselves cannot take a second base (Python refuses: their first base,
``Exception``, is laid out smaller than the standard library's classes), and neither is
raised: every error is one of these, hence a ``sqlite3.Error`` too."""


def has_wal_reset_bug(version: tuple[int, ...]) -> bool:
    """True for the SQLite versions with the WAL-reset bug: 3.7.0 to 3.51.2, except the
    backports 3.50.7+ (of 3.50) and 3.44.6+ (of 3.44)."""
    info = (*version, 0, 0, 0)[:3]
    return not (
        info < (3, 7, 0)
        or info >= (3, 51, 3)
        or (3, 50, 7) <= info < (3, 51, 0)
        or (3, 44, 6) <= info < (3, 45, 0)
    )


class SQLiteLibrary(NamedTuple):
    """The library in use: its DB-API module and what it is."""

    module: ModuleType
    name: str
    """``sqlite3`` (the standard library) or ``pysqlite3``."""

    @property
    def package_version(self) -> str | None:
        """pysqlite3's own version; None for the standard library. Looked up when asked (only
        :meth:`describe` says it): reading the installed packages' metadata was 2-4 ms of
        every process's first open (``scripts/startup.py``)."""
        return None if self.is_standard_library else _distribution_version(self.name)

    @property
    def sqlite_version(self) -> str:
        return str(self.module.sqlite_version)

    @property
    def sqlite_version_info(self) -> tuple[int, ...]:
        return tuple(self.module.sqlite_version_info)

    @property
    def wal_reset_bug(self) -> bool:
        return has_wal_reset_bug(self.sqlite_version_info)

    @property
    def is_standard_library(self) -> bool:
        return self.module is sqlite3

    def describe(self) -> str:
        """One line: which library, which SQLite, and what that means for WAL."""
        where = (
            "the standard library's sqlite3"
            if self.is_standard_library
            else f"pysqlite3 {self.package_version or ''}".rstrip()
        )
        verdict = (
            "has the WAL-reset bug: files not yet in WAL stay in the rollback journal"
            if self.wal_reset_bug
            else "WAL-reset bug fixed"
        )
        return f"SQLite {self.sqlite_version} via {where} ({verdict})"


@functools.cache
def library() -> SQLiteLibrary:
    """The SQLite library this process uses (see the module docstring), chosen once."""
    wanted = os.environ.get(DRIVER_ENV_VAR, "").strip().lower()
    if wanted not in ("", "auto", STANDARD_LIBRARY, BUNDLED_LIBRARY):
        raise ValueError(
            f"{DRIVER_ENV_VAR}={wanted!r}: use {STANDARD_LIBRARY!r} or {BUNDLED_LIBRARY!r}"
        )
    standard = SQLiteLibrary(sqlite3, STANDARD_LIBRARY)
    if wanted == STANDARD_LIBRARY or (wanted != BUNDLED_LIBRARY and not standard.wal_reset_bug):
        return standard
    bundled = _bundled()
    if bundled is None:
        if wanted == BUNDLED_LIBRARY:
            raise ImportError(f"{DRIVER_ENV_VAR}=pysqlite3, but pysqlite3 is not installed")
        return standard
    if wanted != BUNDLED_LIBRARY and bundled.wal_reset_bug:
        return standard  # built from source against a vulnerable SQLite: no better
    _adopt_standard_exceptions(bundled.module)
    return bundled


def _bundled() -> SQLiteLibrary | None:
    try:
        module = importlib.import_module("pysqlite3.dbapi2")
    except ImportError:
        return None
    return SQLiteLibrary(module, BUNDLED_LIBRARY)


@functools.cache
def _distribution_version(name: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:  # metadata missing (a vendored copy): the SQLite version is what counts
        return None


def _adopt_standard_exceptions(module: ModuleType) -> None:
    """Make each exception class ``module`` raises a subclass of the standard library's class
    of the same name too, so ``except sqlite3.OperationalError`` (or ``sqlite3.Error``)
    catches it. Each keeps its own base first and gains the standard class second, top down,
    which keeps every MRO consistent (``OperationalError``: pysqlite3's DatabaseError and
    Error, then the standard library's OperationalError, DatabaseError and Error)."""
    for name in _RAISED_EXCEPTIONS:
        ours, standard = getattr(module, name), getattr(sqlite3, name)
        if not issubclass(ours, standard):
            ours.__bases__ = (*ours.__bases__, standard)


# -- connections ---------------------------------------------------------------------------


def connection_class() -> type[sqlite3.Connection]:
    """The connection class to open with (``factory=`` of ``connect``; the engines pass it
    through ``connect_args``): the library's own, closed in turn (:mod:`.last_close`) and, for
    pysqlite3, tracked for the one-library check."""
    return _tracked_class(library().module)


def is_connection(obj: object) -> bool:
    """True for a connection of the library in use (what ``isinstance(obj,
    sqlite3.Connection)`` says for the standard library)."""
    return isinstance(obj, library().module.Connection)


@functools.cache
def _tracked_class(module: ModuleType) -> type[sqlite3.Connection]:
    base = cast("type[sqlite3.Connection]", module.Connection)

    class TrackedConnection(base):  # type: ignore[valid-type,misc]
        """The library's own connection, remembered (weakly) with the file it opened, and
        closed in turn when that file is in WAL (:mod:`.last_close`)."""

        def __init__(self, database: Any, *args: Any, **kwargs: Any) -> None:
            path = _file_of(database, bool(kwargs.get("uri", False)))
            if not _checks_descriptors():
                super().__init__(database, *args, **kwargs)
            else:
                with _registry.lock:
                    if path is not None:
                        _refuse_foreign_descriptors(path)
                    super().__init__(database, *args, **kwargs)
                    if path is not None:
                        _registry.add(path, self)
            self.sessionstore_close_ticket = last_close.ticket(
                None if _is_immutable(database) else path
            )

        def close(self) -> None:
            last_close.close(getattr(self, "sessionstore_close_ticket", None), super().close)
            # Marked once SQLite has let go of its descriptors (a check in between still
            # counts this connection, which only makes it look at the shared memory alone);
            # the registry never has to ask SQLite, and wait for the connection's mutex.
            self.sessionstore_closed = True

    TrackedConnection.__name__ = TrackedConnection.__qualname__ = "Connection"
    TrackedConnection.__module__ = f"{__name__}[{module.__name__}]"
    return TrackedConnection


def connect(database: str | os.PathLike[str], **kwargs: Any) -> sqlite3.Connection:
    """A connection from the library in use (see the module docstring), checked like the
    engines' own. Same arguments as ``sqlite3.connect``."""
    kwargs.setdefault("factory", connection_class())
    return cast("sqlite3.Connection", library().module.connect(database, **kwargs))


def _checks_descriptors() -> bool:
    return not library().is_standard_library and sys.platform.startswith("linux")


def _file_of(database: Any, uri: bool) -> Path | None:
    text = os.fsdecode(database) if isinstance(database, (str, bytes, os.PathLike)) else ""
    if not text or text == ":memory:":
        return None
    if uri or text.startswith("file:"):
        if not text.startswith("file:"):
            return Path(text)
        from urllib.parse import parse_qs, unquote, urlsplit

        parts = urlsplit(text)
        if "memory" in parse_qs(parts.query).get("mode", []) or not parts.path:
            return None
        return Path(unquote(parts.path))
    return Path(text)


def _is_immutable(database: Any) -> bool:
    """Opened as ``file:...?immutable=1`` (read as :func:`_file_of` reads the name): SQLite
    takes no lock on the file at all."""
    text = os.fsdecode(database) if isinstance(database, (str, bytes, os.PathLike)) else ""
    if not text.startswith("file:"):
        return False
    from urllib.parse import parse_qs, urlsplit

    return "1" in parse_qs(urlsplit(text).query).get("immutable", [])


class _Registry:
    """This library's open connections, by the file they opened (device and inode)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._by_file: dict[tuple[int, int], weakref.WeakSet[Any]] = {}
        self._fork_hook = False

    def add(self, path: Path, conn: Any) -> None:
        key = _identity(path)
        if key is None:
            return
        self._by_file.setdefault(key, weakref.WeakSet()).add(conn)
        if not self._fork_hook and hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._after_fork_in_child)
            self._fork_hook = True

    def has_open(self, key: tuple[int, int]) -> bool:
        live = self._by_file.get(key)
        if not live:
            return False
        for conn in list(live):
            if _is_closed(conn):
                live.discard(conn)
        return bool(live)

    def _after_fork_in_child(self) -> None:
        # A parent thread may have held the lock at the fork: the child gets a new one.
        self.lock = threading.Lock()


_registry = _Registry()


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_dev, status.st_ino


def _is_closed(conn: Any) -> bool:
    return bool(getattr(conn, "sessionstore_closed", False))


def _refuse_foreign_descriptors(path: Path) -> None:
    """Raise when this process has the file open outside this library (module docstring)."""
    database = _identity(path)
    if database is None:
        return  # a new file: nobody can have it open
    companions = {
        suffix: _identity(path.with_name(path.name + suffix)) for suffix in COMPANION_SUFFIXES
    }
    watched = {database: "", **{key: suffix for suffix, key in companions.items() if key}}
    if _registry.has_open(database):
        return  # checked when this library first opened it (see the module docstring)
    foreign = sum(_descriptors_of(watched).values())
    if foreign > 0:
        # A standard-library connection the program dropped without closing still holds the
        # file: ``with sqlite3.connect(...)`` commits but does not close, and the connection
        # sits in a reference cycle (its statement cache refers back to it), so only the
        # collector closes it. Collect once and count again. Safe here: this library has no
        # connection to the file (checked above), so that close cannot drop our locks.
        gc.collect()
        foreign = sum(_descriptors_of(watched).values())
    if foreign > 0:
        used = library()
        raise SQLiteLibraryConflictError(
            f"refusing to open {path} with {used.describe().split(' (')[0]}: this process "
            f"already has the file open outside that library ({foreign} descriptor(s): the "
            "standard library's sqlite3 module, or a plain open()). Two SQLite libraries in "
            "one process drop each other's file locks and can corrupt the database "
            "(https://sqlite.org/howtocorrupt.html, 2.2.1). Open it through sessionstore "
            "(SessionDB, sessionstore.hermes.state, sessionstore.dialects.sqlite_library."
            f"connect) or close the other connection first; or set {DRIVER_ENV_VAR}=sqlite3 "
            "to run sessionstore on the standard library"
            + (
                f" (SQLite {sqlite3.sqlite_version}: it has the WAL-reset bug, so files not "
                "yet in WAL would stay in the rollback journal)."
                if has_wal_reset_bug(sqlite3.sqlite_version_info)
                else "."
            )
        )


def _descriptors_of(watched: dict[tuple[int, int], str]) -> dict[tuple[int, int], int]:
    """How many of this process's descriptors point at each watched file (Linux)."""
    counts: dict[tuple[int, int], int] = {}
    directory = "/proc/self/fd"
    try:
        names = os.listdir(directory)
    except OSError:
        return counts
    for name in names:
        try:
            status = os.stat(f"{directory}/{name}")
        except OSError:
            continue  # closed meanwhile, or the listing's own descriptor
        key = (status.st_dev, status.st_ino)
        if key in watched:
            counts[key] = counts.get(key, 0) + 1
    return counts
