"""The module-level helpers of Hermes's ``hermes_state`` (0.18, 0.19), for the drop-in module.

Hermes's gateway, CLI and tools import these next to ``SessionDB``: ``ThreadedSessionDB`` (a
forwarder that runs each call in a thread; Hermes calls it ``AsyncSessionDB``, the name
:mod:`sessionstore.hermes.state` gives it too), the record of the last failed open
(``get_last_init_error``, ``format_session_db_unavailable``), ``is_malformed_db_error``,
``apply_wal_with_fallback`` (for the other SQLite files Hermes keeps, such as its kanban
board), ``repair_state_db_schema`` and 0.19's ``workspace_key``. Same names, arguments and
results as Hermes's; where they touch a file they do it through SQLite only (never a Python
copy or unlink of a database file that another connection may hold: see docs/concurrency.md,
"Many openers, one file").
"""

from __future__ import annotations

import contextlib
import functools
import logging
import sqlite3
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..dialects import sqlite_library
from ..dialects.shared_memory import cross_vm_filesystem
from ..dialects.sqlite import apply_write_durability, bare_statement
from ..errors import SessionStoreError
from ..search.object_names import FTS5_TABLES
from ..sessions import lineage
from ..storage.config import hermes_home, hermes_journal_mode

if TYPE_CHECKING:
    from ..api.session_db import SessionDB

logger = logging.getLogger("sessionstore.hermes.state")

WAL_INCOMPATIBLE_MARKERS = ("locking protocol", "not authorized")
"""What SQLite says when a file system cannot hold a WAL (NFS, SMB, some FUSE mounts)."""
MALFORMED_MARKERS = ("malformed database schema", "database disk image is malformed")

_last_init_error: str | None = None
_last_init_error_lock = threading.Lock()
_wal_fallback_warned_paths: set[str] = set()
_wal_fallback_warned_lock = threading.Lock()


class ThreadedSessionDB:
    """Hermes's async door onto a ``SessionDB`` (its ``hermes_state.AsyncSessionDB``):
    ``ThreadedSessionDB(db)``; each method call is ``await``-ed and runs in a thread (the
    loop's default executor, as ``asyncio.to_thread``), attributes that are not methods are
    returned as they are. Unlike Hermes's, a cancelled call returns only once the call in its
    thread has ended (whole, with its retries), so nothing of it lands later.

    A name of its own, because ``sessionstore.AsyncSessionDB`` is another class: the typed,
    pooled one (its own store, writer thread and readers' pool). This one only forwards to the
    ``SessionDB`` it is given, as Hermes's does."""

    def __init__(self, db: SessionDB) -> None:
        self._db = db

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._db, name)
        if not callable(attribute):
            return attribute

        async def offloaded(*args: Any, **kwargs: Any) -> Any:
            # As Hermes's asyncio.to_thread, but settled: a cancelled call returns once the
            # call in its thread has ended, so none of its writes lands afterwards.
            from ..storage.async_store import in_thread_settled

            return await in_thread_settled(functools.partial(attribute, *args, **kwargs))

        return offloaded


def workspace_key(row: Mapping[str, Any]) -> str | None:
    """Hermes 0.19's workspace of a session row (a dict ``get_session`` or a listing returns):
    its git repository root when known, else its working directory, stripped; None for a
    session without either. The branch is left out, so a checkout does not split a
    workspace's history."""
    for name in ("git_repo_root", "cwd"):
        value = (row.get(name) or "").strip()
        if value:
            return str(value)
    return None


def set_last_init_error(message: str | None) -> None:
    """Record the cause of a failed ``SessionDB()`` (``None`` clears it). A successful open
    does not clear it, as in Hermes: another thread may be about to report its failure."""
    global _last_init_error
    with _last_init_error_lock:
        _last_init_error = message


def get_last_init_error() -> str | None:
    """The cause of the latest failed ``SessionDB()`` in this process, or None."""
    return _last_init_error


def format_session_db_unavailable(
    prefix: str = "Session database not available", *, details: bool = False
) -> str:
    """``"<prefix>: <cause>."``, with a hint when the cause is a file system without WAL.

    ``details`` is iot 0.22.2's (its CLI banner passes ``details=True`` for the raw cause):
    taken, and the line is the same either way, since it always names the cause."""
    del details
    cause = get_last_init_error()
    if not cause:
        return f"{prefix}."
    hint = ""
    if any(marker in cause.lower() for marker in WAL_INCOMPATIBLE_MARKERS):
        hint = " (state.db may be on NFS/SMB/FUSE — see https://www.sqlite.org/wal.html)"
    return f"{prefix}: {cause}{hint}."


def is_malformed_db_error(exc: BaseException) -> bool:
    """True for SQLite's "malformed schema / disk image" errors, also when wrapped (by
    SQLAlchemy or by our own errors) around the driver's."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, sqlite3.DatabaseError) and any(
            marker in str(current).lower() for marker in MALFORMED_MARKERS
        ):
            return True
        current = getattr(current, "orig", None) or current.__cause__ or current.__context__
    return False


def is_sqlite_wal_reset_vulnerable(version_info: tuple[int, ...] | None = None) -> bool:
    """Hermes's check (iot 0.22.2): whether a SQLite version has the WAL-reset bug
    (https://sqlite.org/wal.html#walresetbug); by default the standard library's, the one
    Hermes's own connections use. The stores decide for their own library
    (``sessionstore.dialects.sqlite_library``)."""
    return sqlite_library.has_wal_reset_bug(
        sqlite3.sqlite_version_info if version_info is None else tuple(version_info)
    )


def hermes_config_section(name: str) -> Any:
    """Section ``name`` of Hermes's ``config.yaml`` read by Hermes's own config reader (iot
    reads it the same lazy way); ``ImportError`` when the checkout has no such reader."""
    from hermes_cli.config import load_config_readonly  # type: ignore[import-not-found]

    return (load_config_readonly() or {}).get(name)


def hermes_skill_description(text: str) -> str | None:
    """Hermes's own description of a turn a ``/skill`` expanded (iot 0.22.2's and axisrow's
    ``agent.skill_commands.describe_skill_invocation``): ``"/work — fix the title leak"``,
    what the user typed, instead of the skill's body; None where the checkout has no such
    function or the text is no such turn. Never raises (a preview is no place to fail)."""
    describe = _skill_describer()
    if describe is None:
        return None
    try:
        described = describe(text)
    except Exception:
        return None
    return described if isinstance(described, str) and described else None


@functools.cache
def _skill_describer() -> Any:
    """The checkout's describer, looked up once per process (a failed import costs a search
    of the whole path, and a picker asks for every row it shows)."""
    try:
        from agent.skill_commands import (  # type: ignore[import-not-found]
            describe_skill_invocation,
        )
    except Exception:
        return None
    return describe_skill_invocation


def get_hermes_home() -> Path:
    """The Hermes home: Hermes's own ``hermes_constants.get_hermes_home`` when the checkout
    has it (its per-profile override included), else ``$HERMES_HOME`` or ``~/.hermes``."""
    try:
        from hermes_constants import (  # type: ignore[import-not-found]
            get_hermes_home as hermes_get_home,
        )
    except ImportError:
        return hermes_home()
    return Path(hermes_get_home())


def resolve_journal_mode() -> str:
    """Hermes's configured ``database.journal_mode``: ``delete`` or ``wal`` (iot 0.22.2's
    ``resolve_journal_mode``), from ``config.yaml`` in the Hermes home (:func:`get_hermes_home`:
    the profile's, when the checkout says which) by
    :func:`~sessionstore.storage.config.hermes_journal_mode`; anything else is ``wal``, as Hermes
    reads it. Not through Hermes's own config reader, although iot reads it so: that loads and
    deep-copies the whole configuration, ~20 ms, at every open (measured on hermes-agent
    0.19.0's checkout), for one key that needs neither its includes nor its variables."""
    return hermes_journal_mode(get_hermes_home())


def apply_wal_with_fallback(conn: sqlite3.Connection, *, db_label: str = "state.db") -> str:
    """Put ``conn``'s database in WAL mode, or in DELETE mode where the file system cannot
    hold a WAL (one warning per ``db_label``); returns the mode set. Never moves a database
    that is in WAL already (asked first, so a file others hold in WAL is left alone).

    As newest Hermes does, never on a SQLite with the WAL-reset bug (the library ``conn``
    comes from, asked for its version): a file in WAL keeps it, with one warning per
    ``db_label``; any other is put in DELETE mode."""
    if _has_wal_reset_bug(conn):
        return _gate_wal_reset_bug(conn, db_label)
    try:
        if _journal_mode(conn) == "wal":
            _checkpoint_barrier(conn)
            return "wal"
    except sqlite3.OperationalError:
        pass
    if resolve_journal_mode() == "delete":
        # Hermes's ``database.journal_mode: delete`` (NFS and SMB homes): a file not in WAL
        # (asked above) is put in DELETE mode, as iot 0.22.2 puts it.
        conn.execute("PRAGMA journal_mode=DELETE")
        return "delete"
    database = _main_file(conn)
    if database and cross_vm_filesystem(database) is not None:
        # As iot 0.22.2: WAL corrupts silently across a VM boundary (shared_memory's
        # docstring); a file not in WAL stays out of it.
        with _wal_fallback_warned_lock:
            first = db_label not in _wal_fallback_warned_paths
            _wal_fallback_warned_paths.add(db_label)
        if first:
            logger.warning("%s is on a file system shared across a VM boundary (virtiofs/9p), "
                           "where WAL's shared memory corrupts silently; using "
                           "journal_mode=DELETE", db_label)
        conn.execute("PRAGMA journal_mode=DELETE")
        return "delete"
    try:
        # The row, not the absence of an error: macOS NFS and SMB refuse WAL silently.
        row = conn.execute("PRAGMA journal_mode=WAL").fetchone()
        mode = str(row[0]).lower() if row else ""
        if mode != "wal":
            _warn_wal_fallback_once(db_label, f"WAL refused without an error (still {mode!r})")
            return mode or "delete"
        _checkpoint_barrier(conn)
        return "wal"
    except sqlite3.OperationalError as exc:
        if not any(marker in str(exc).lower() for marker in WAL_INCOMPATIBLE_MARKERS):
            raise
        try:
            in_wal = _journal_mode(conn) == "wal"
        except sqlite3.OperationalError:
            in_wal = False
        if in_wal:
            raise
        _warn_wal_fallback_once(db_label, str(exc))
        conn.execute("PRAGMA journal_mode=DELETE")
        return "delete"


def _warn_wal_fallback_once(db_label: str, why: str) -> None:
    with _wal_fallback_warned_lock:
        first = db_label not in _wal_fallback_warned_paths
        _wal_fallback_warned_paths.add(db_label)
    if first:
        logger.warning("%s: WAL is not supported here (%s); using journal_mode=DELETE",
                       db_label, why)  # fmt: skip


def _main_file(conn: sqlite3.Connection) -> str:
    """The file of ``conn``'s main database; ``""`` for an in-memory or temporary one."""
    try:
        for _seq, name, file in conn.execute("PRAGMA database_list"):
            if name == "main":
                return str(file or "")
    except sqlite3.Error:
        pass
    return ""


def _has_wal_reset_bug(conn: sqlite3.Connection) -> bool:
    row = conn.execute("SELECT sqlite_version()").fetchone()
    version = tuple(int(part) for part in str(row[0]).split(".") if part.isdigit())
    return sqlite_library.has_wal_reset_bug(version)


_wal_reset_bug_warned_paths: set[str] = set()


def _gate_wal_reset_bug(conn: sqlite3.Connection, db_label: str) -> str:
    """On a SQLite with the WAL-reset bug, as newest Hermes (iot 0.22.2): a file in WAL keeps
    it; a file whose mode cannot be read (a concurrent opener holds it) is left untouched and
    reported as ``wal`` (reading "could not read" as "not WAL" once flipped a live WAL file to
    DELETE under a writer, losing its uncheckpointed commits); any other is put in DELETE mode,
    unless an opener appears in between, which leaves it as it is."""
    try:
        mode = _journal_mode(conn)
    except sqlite3.OperationalError:
        mode = None
    with _wal_fallback_warned_lock:
        first = db_label not in _wal_reset_bug_warned_paths
        _wal_reset_bug_warned_paths.add(db_label)
    version = sqlite3.sqlite_version
    with contextlib.suppress(sqlite3.OperationalError):
        version = conn.execute("SELECT sqlite_version()").fetchone()[0]
    if mode in ("wal", None):
        if first:
            logger.warning("%s: SQLite %s has the WAL-reset bug "
                           "(https://sqlite.org/wal.html#walresetbug); the database is %s and "
                           "is left so (no change under other openers)", db_label, version,
                           "in WAL already" if mode else "held by another opener")  # fmt: skip
        if mode == "wal":
            _checkpoint_barrier(conn)
        return "wal"
    if first:
        logger.warning("%s: SQLite %s has the WAL-reset bug "
                       "(https://sqlite.org/wal.html#walresetbug); using journal_mode=DELETE "
                       "instead of enabling WAL", db_label, version)
    try:
        conn.execute("PRAGMA journal_mode=DELETE")
    except sqlite3.OperationalError as exc:
        if "locked" not in str(exc).lower() and "busy" not in str(exc).lower():
            raise
        return mode  # an opener appeared between the probe and the switch: left as it is
    return "delete"


def _journal_mode(conn: sqlite3.Connection) -> str | None:
    row = conn.execute("PRAGMA journal_mode").fetchone()
    return None if row is None or row[0] is None else str(row[0]).strip().lower()


def _checkpoint_barrier(conn: sqlite3.Connection) -> None:
    # What every WAL activation carries, as in the store's own connections (Hermes #30636,
    # #63531): best effort, a refused PRAGMA costs only disk slack or the macOS barrier.
    with contextlib.suppress(sqlite3.OperationalError):
        apply_write_durability(conn)


def apply_durability_barriers(conn: sqlite3.Connection) -> bool:
    """iot 0.21.0's, for a second user of the store's file (its async-delegation ledger): the
    durability PRAGMAs every writing connection of a store carries (the WAL bound; on macOS
    ``F_FULLFSYNC`` at checkpoints and ``synchronous=FULL``), never the journal mode, which
    stays the owner's. True when SQLite took them; False, never an error, when it could not
    (a malformed schema refuses every PRAGMA; the repair applies them again once it parses).
    iot also applies a ``database.synchronous`` from its ``config.yaml``; a store's
    connections follow their own rule instead (``dialects.sqlite.apply_write_durability``),
    and so does this one."""
    try:
        apply_write_durability(conn)
    except Exception:
        return False
    return True


# -- Hermes 0.18/0.19's delegate cascade on a bare connection ----------------------------------
_DELETE_CHUNK = 500
"""Sessions per ``IN`` list of :func:`delete_delegate_children` (under every SQLite's limit of
bound parameters)."""


def collect_delegate_child_ids(conn: Any, parent_ids: Sequence[str]) -> list[str]:
    """Hermes 0.18/0.19's ``_collect_delegate_child_ids``: the delegate (subagent) sessions to
    delete with ``parent_ids``, recursively, never a parent itself (Hermes #49148), on a bare
    SQLite connection (``db._conn``, or any with a ``sessions`` table). The rule is the
    store's own (``sessions.lineage.walk_delegates``); a ``model_config`` that is not JSON is
    read as no marker instead of failing the walk."""
    def children_of(chunk: Sequence[str]) -> list[Any]:
        return list(conn.execute(*bare_statement(lineage.delegate_children_of(chunk))).fetchall())

    return lineage.walk_delegates(children_of, [sid for sid in dict.fromkeys(parent_ids) if sid])


def delete_delegate_children(conn: Any, parent_ids: Sequence[str]) -> list[str]:
    """Hermes 0.18/0.19's ``_delete_delegate_children``: deletes what
    :func:`collect_delegate_child_ids` finds (their messages, then the sessions; any other
    session whose parent is one of them is orphaned, not deleted) in the caller's
    transaction, and returns their ids."""
    ids = collect_delegate_child_ids(conn, parent_ids)
    chunks = [ids[start : start + _DELETE_CHUNK] for start in range(0, len(ids), _DELETE_CHUNK)]
    # Every chunk's messages and children first: a session is deleted once nothing names it.
    for chunk in chunks:
        marks = ", ".join("?" * len(chunk))
        conn.execute(f"DELETE FROM messages WHERE session_id IN ({marks})", chunk)
        conn.execute(f"UPDATE sessions SET parent_session_id = NULL WHERE parent_session_id IN "
                     f"({marks})", chunk)  # fmt: skip
    for chunk in chunks:
        conn.execute(f"DELETE FROM sessions WHERE id IN ({', '.join('?' * len(chunk))})", chunk)
    return ids


# -- repair_state_db_schema --------------------------------------------------------------------

_SEARCH_OBJECT_PATTERNS = ("messages_fts%", "messages_trigram%", "messages_cjk_bigram%")
"""Every search object of any layout (tables, FTS5 shadow tables, views, triggers)."""


def repair_state_db_schema(db_path: str | Path, *, backup: bool = True) -> dict[str, Any]:
    """Hermes's repair of a file whose schema will not parse or whose full-text index rejects
    writes, least destructive first; the sessions and messages rows are never touched.

    Beyond Hermes's checks, each full-text index's own ``integrity-check`` is run: a damaged
    index takes writes and finds nothing, and Hermes's probe called that healthy.

    1. ``rebuild_fts``: the search index dropped and built again from the rows (what
       ``sessionstore db doctor --fix`` does), in one transaction;
    2. ``dedup_schema``: duplicate ``sqlite_master`` entries removed (keeps the index);
    3. ``drop_fts_rebuild``: every search object removed from the schema, ``VACUUM``, and the
       index built again from the rows (Hermes leaves that to its next open; we do it here).

    First a backup ``<file>.malformed-backup-<stamp>`` unless ``backup=False``, taken with
    SQLite's backup API (a page copy: it needs no schema that parses); when it cannot be
    taken nothing is changed. Returns ``{repaired, strategy, backup_path, error}``;
    ``strategy`` is ``"already_healthy"`` for a file that needed nothing.
    """
    report: dict[str, Any] = {
        "repaired": False, "strategy": None, "backup_path": None, "error": None,
    }  # fmt: skip
    path = Path(db_path)
    if not path.is_file():
        report["error"] = f"{path} does not exist"
        return report
    if _health_problem(path) is None:
        report.update(repaired=True, strategy="already_healthy")
        return report
    if backup:
        try:
            report["backup_path"] = str(_page_copy(path))
        except (sqlite3.Error, OSError, SessionStoreError) as exc:
            report["error"] = f"no backup could be taken, nothing was changed: {exc}"
            return report
    for strategy, attempt in (("rebuild_fts", _rebuild_search_index),
                              ("dedup_schema", _deduplicate_schema),
                              ("drop_fts_rebuild", _drop_search_schema)):  # fmt: skip
        try:
            attempt(path)
        except Exception as exc:  # each step is tried in turn; the report says why it failed
            logger.warning("state.db repair step %s failed: %s", strategy, exc)
            report["error"] = f"{type(exc).__name__}: {exc}"
            continue
        problem = _health_problem(path)
        if problem is None:
            report.update(repaired=True, strategy=strategy, error=None)
            logger.warning("state.db repaired (%s): %s", strategy, path)
            return report
        report["error"] = problem
    logger.error("state.db could not be repaired automatically: %s (backup: %s)", path,
                 report["backup_path"])
    return report


def _connect(path: Path) -> sqlite3.Connection:
    # The stores' own SQLite library: never a second one on a file this process may hold.
    return sqlite_library.connect(str(path), isolation_level=None, timeout=5.0)


def _health_problem(path: Path) -> str | None:
    """None when the file parses, passes ``integrity_check`` and each full-text index's own
    check, reads, and takes a message through the search triggers (a rolled-back write);
    else what failed."""
    conn = _connect(path)
    try:
        conn.execute("PRAGMA journal_mode").fetchone()
        problems = [str(row[0]) for row in conn.execute("PRAGMA integrity_check")
                    if row and str(row[0]).lower() != "ok"]  # fmt: skip
        if problems:
            return "; ".join(problems[:3])
        conn.execute("SELECT count(*) FROM sessions").fetchone()
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        for table in FTS5_TABLES:
            if table in tables:
                # An index whose pages were damaged still takes writes and reads nothing.
                conn.execute(f"INSERT INTO {table}({table}) VALUES('integrity-check')")
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("INSERT INTO sessions (id, source, started_at) "
                         "VALUES ('_sessionstore_health_probe', '_health_probe', 0)")
            conn.execute("INSERT INTO messages (session_id, role, content, timestamp) "
                         "VALUES ('_sessionstore_health_probe', 'user', 'probe 探针', 0)")
        finally:
            conn.execute("ROLLBACK")
        return None
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc).lower():
            return None  # not a populated store yet: nothing this repair is for
        return str(exc)
    except sqlite3.DatabaseError as exc:
        return str(exc)
    finally:
        conn.close()


def _page_copy(path: Path) -> Path:
    """Hermes's name for the copy, written as every copy is (the file's mode, a private
    workspace, a name that is free: ``storage.private_files``); no page check, the file is
    known to be damaged."""
    import datetime

    from ..dialects.sqlite import copy_pages
    from ..storage.backups import numbered_names, write_copy

    stamp = datetime.datetime.now().strftime("%Y%m%d_%H%M%S")
    return write_copy(
        path,
        lambda destination: copy_pages(path, destination, check=False),
        numbered_names(path, f".malformed-backup-{stamp}"),
    )


def _rebuild_search_index(path: Path) -> None:
    from ..search.registry import search_index_for
    from ..storage.store import Store

    with Store.open(f"sqlite:///{path}") as store:
        store.write(search_index_for(store.dialect).rebuild)


def _deduplicate_schema(path: Path) -> None:
    _edit_schema(path, "DELETE FROM sqlite_master WHERE rowid NOT IN "
                       "(SELECT min(rowid) FROM sqlite_master GROUP BY type, name)")


def _drop_search_schema(path: Path) -> None:
    _edit_schema(
        path,
        "DELETE FROM sqlite_master WHERE "
        + " OR ".join("name LIKE ?" for _ in _SEARCH_OBJECT_PATTERNS),
        _SEARCH_OBJECT_PATTERNS,
        vacuum=True,
    )
    _rebuild_search_index(path)


def _edit_schema(
    path: Path, sql: str, parameters: tuple[str, ...] = (), *, vacuum: bool = False
) -> None:
    """One write of ``sqlite_master`` itself, under the write lock, then (``vacuum``) the
    pages the removed objects held given back."""
    conn = _connect(path)
    try:
        conn.execute("PRAGMA writable_schema=ON")
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(sql, parameters)
            conn.execute("COMMIT")
        finally:
            conn.execute("PRAGMA writable_schema=OFF")
        if vacuum:
            conn.execute("VACUUM")
    finally:
        conn.close()
