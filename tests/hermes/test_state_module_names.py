"""Every module-level name Hermes's code imports from ``hermes_state`` is in our drop-in
(``sessionstore.hermes.state``), and the helpers behind the names iot 0.22.2's agent,
gateway, TUI, CLI and tools use (``sessionstore.hermes.persistence``) answer as iot's do.
The names are read from every real release's source (parsed, never run here) in
:func:`test_every_name_a_release_s_code_imports_is_in_the_drop_in`; the frozen copies below
keep the inner loop honest without them.
"""

from __future__ import annotations

import ast
import contextlib
import errno
import functools
import hashlib
import json
import os
import re
import sqlite3
import stat
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from real_hermes import (
    ALL_FORK_RELEASES,
    HERMES_RELEASES,
    cache_dir,
    fork_site_packages,
    hermes_root,
)

import sessionstore
import sessionstore.hermes.state as hermes_state
from sessionstore import errors
from sessionstore.dialects import sqlite_library
from sessionstore.hermes import persistence

IOT_CALLERS_NAMES = (
    "AsyncSessionDB", "DEFAULT_DB_PATH", "SessionDB",
    "SessionExportTooLargeError", "SessionResumeTooLargeError", "StateDbCorruptError",
    "StateDbReplacedError", "_connect_tracked_db", "_default_db_path", "_secure_state_db_files",
    "classify_persistence_error", "divert_session_transcript_jsonl",
    "format_session_db_unavailable", "get_hermes_home", "is_malformed_db_error",
    "is_malformed_schema_error", "preflight_db_writability", "resolved_max_export_messages",
    "resolved_max_resume_messages",
)  # fmt: skip
"""What iot 0.22.2's modules outside ``hermes_state*`` import from ``hermes_state``."""
EARLIER_FORKS_CALLERS_NAMES = (
    "FTS_STORAGE_VERSION", "PERSISTENCE_ERROR_CAUSES", "_BARE_BILLING_PROVIDERS",
    "_wal_reset_repair_hint", "apply_durability_barriers", "collect_state_db_stats",
    "count_db_holders", "is_disk_full_error", "sqlite_source_id",
)  # fmt: skip
"""What the modules of iot 0.20.0 ... 0.21.5 and axisrow 0.20.1 import from ``hermes_state``
beyond iot 0.22.2's list (its TUI, doctor, cron, session recovery and async delegation): a
name missing failed the import of the whole module (iot 0.21.x's ``tui_gateway.server``,
0.20.x's ``hermes_cli.session_recovery``) or the error handler that asked for it."""
UPSTREAM_TESTS_NAMES = (
    "_collect_delegate_child_ids", "_delete_delegate_children",
    "_is_background_review_harness_message", "_strip_background_review_harness",
    "_is_stale_tool_call_marker_message", "_strip_stale_tool_call_markers",
)  # fmt: skip
"""What hermes-agent 0.18.0 ... 0.19.0's and axisrow's own tests import from ``hermes_state``
beyond their code (``test_delegate_cascade_49148.py``,
``test_background_review_session_isolation.py``,
``test_stale_tool_call_marker_session_repair.py``: run by
``tests/hermes/test_hermes_own_suites.py``)."""


def test_the_names_hermes_callers_import_are_there() -> None:
    names = (*IOT_CALLERS_NAMES, *EARLIER_FORKS_CALLERS_NAMES, *UPSTREAM_TESTS_NAMES)
    assert [name for name in names if not hasattr(hermes_state, name)] == []
    public = {name for name in names if not name.startswith("_")}
    assert public <= set(hermes_state.__all__)


_IMPORTS_HERMES_STATE = re.compile(
    r"^[ \t]*(?:from[ \t]+hermes_state[ \t]+import\b|import[ \t][^#\n]*\bhermes_state\b(?!_))",
    re.MULTILINE,
)
"""A line that imports ``hermes_state`` itself (not ``hermes_state_common`` and the like):
only such files are parsed (a fork's modules name its ``hermes_state_*`` modules everywhere)."""


@functools.cache
def _imported_from_hermes_state(root: Path) -> frozenset[str]:
    """The names modules outside ``hermes_state*`` import from (or read off) ``hermes_state``.

    Kept on disk per release tree (parsing a release's ~60 importers, some of 10,000 lines,
    costs 1-4 CPU s), keyed by every source file's path, size and modification time and by
    this module's own text: a changed release or a changed reading is read again."""
    sources = sorted(
        path for path in root.rglob("*.py")
        if not path.relative_to(root).parts[0].startswith(
            ("hermes_state", "pip", "setuptools", "_distutils", "pkg_"))
    )  # fmt: skip
    digest = hashlib.sha256(Path(__file__).read_bytes())
    for path in sources:
        status = path.stat()
        digest.update(f"{path.relative_to(root)}\0{status.st_size}\0{status.st_mtime_ns}\n".encode())
    kept = cache_dir() / "imported-names" / f"{digest.hexdigest()}.json"
    with contextlib.suppress(OSError, ValueError):
        return frozenset(json.loads(kept.read_text()))
    names = _read_imported_names(sources)
    kept.parent.mkdir(parents=True, exist_ok=True)
    partial = kept.with_name(f".{kept.name}.{os.getpid()}.partial")
    partial.write_text(json.dumps(sorted(names)))
    partial.replace(kept)
    return names


def _read_imported_names(sources: list[Path]) -> frozenset[str]:
    names: set[str] = set()
    for path in sources:
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, ValueError):
            continue
        if "hermes_state" not in text or not _IMPORTS_HERMES_STATE.search(text):
            continue
        try:
            with warnings.catch_warnings():  # a release's invalid escapes are its own
                warnings.simplefilter("ignore", SyntaxWarning)
                warnings.simplefilter("ignore", DeprecationWarning)
                tree = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
        aliases: set[str] = set()
        read_off: list[tuple[str, str]] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "hermes_state" and not node.level:  # noqa: E501
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.Import):
                aliases.update(alias.asname or alias.name for alias in node.names
                               if alias.name == "hermes_state")  # fmt: skip
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                read_off.append((node.value.id, node.attr))
        names.update(attribute for owner, attribute in read_off if owner in aliases)
    return frozenset(names)


@pytest.mark.slow
@pytest.mark.parametrize("release", [*sorted(ALL_FORK_RELEASES), *HERMES_RELEASES.values()])
def test_every_name_a_release_s_code_imports_is_in_the_drop_in(release: str) -> None:
    """Read from each real release (its modules, not its ``hermes_state*`` ones): every name
    they import from, or read off, ``hermes_state`` is on our drop-in, and the frozen lists
    above are what they import."""
    root = fork_site_packages(release) if release in ALL_FORK_RELEASES else hermes_root(release)
    names = _imported_from_hermes_state(root)
    assert sorted(name for name in names if not hasattr(hermes_state, name)) == []
    if release == "iot-0.22.2":
        assert set(IOT_CALLERS_NAMES) <= names


@pytest.mark.slow
def test_the_frozen_lists_are_what_the_releases_import() -> None:
    """Every name of :data:`EARLIER_FORKS_CALLERS_NAMES` is imported by some earlier fork's
    code, so the inner loop's list never names what nobody imports."""
    imported: set[str] = set()
    for release in sorted(ALL_FORK_RELEASES):
        imported |= _imported_from_hermes_state(fork_site_packages(release))
    assert set(EARLIER_FORKS_CALLERS_NAMES) <= imported


def test_the_errors_hermes_catches_are_ours_everywhere() -> None:
    """``CompressionSessionClosedError`` (an append to a parent compression closed) is the
    one class, at the top level, in the drop-in and in ``sessionstore.errors``; a
    ``RuntimeError`` as iot's, so its generic handlers hold."""
    for name in ("CompressionSessionClosedError", "CompressionSessionBusyError"):
        assert getattr(sessionstore, name) is getattr(hermes_state, name) is getattr(errors, name)
    assert issubclass(errors.CompressionSessionClosedError, RuntimeError)
    assert sessionstore.RewindTargetUnavailableError is errors.RewindTargetUnavailableError
    assert sessionstore.CompressionPublishError is errors.CompressionPublishError
    assert issubclass(hermes_state.StateDbCorruptError, sqlite3.DatabaseError)
    assert issubclass(hermes_state.StateDbReplacedError, RuntimeError)


# -- classify_persistence_error (iot's buckets) ---------------------------------------------
def _sqlite_error(text: str, code: int | None) -> sqlite3.Error:
    error = sqlite3.OperationalError(text)
    if code is not None:
        error.sqlite_errorcode = code  # type: ignore[attr-defined]
    return error


@pytest.mark.parametrize(("error", "cause"), [
    (None, "unknown"),
    (errors.SessionTurnLeaseLostError("x"), "turn_lease"),
    (errors.CompressionSessionClosedError("s"), "compression_closed"),
    (errors.SessionCompressionInProgressError("x"), "compression"),
    (errors.CompressionSessionBusyError("x"), "compression"),
    (persistence.StateDbReplacedError("x"), "replaced"),
    (persistence.StateDbCorruptError("x"), "corrupt"),
    (errors.StoreBusyError(3, 1.0), "locked"),
    (errors.StoreFullError("x"), "disk"),
    (_sqlite_error("vtable constructor failed: messages_fts", 5), "locked"),
    (_sqlite_error("database disk image is malformed", 267), "fts_index"),
    (_sqlite_error("database disk image is malformed", 11), "corrupt"),
    (_sqlite_error("FOREIGN KEY constraint failed", 787), "session_row_missing"),
    ("fts5: corruption found reading messages_fts_data", "fts_index"),
    ("database disk image is malformed", "corrupt"),
    ("database is locked", "locked"),
    ("Session 's' is closed by compression", "compression_closed"),
    ("state.db was replaced underneath the gateway", "replaced"),
    ("holds a deleted state.db-wal inode", "deleted_wal"),
    (OSError(errno.ENOSPC, "No space left on device"), "disk"),
    ("attempt to write a readonly database", "disk"),
    ("something else", "unknown"),
])  # fmt: skip
def test_a_failure_is_classified_as_iot_classifies_it(error: Any, cause: str) -> None:
    assert hermes_state.classify_persistence_error(error) == cause


def test_an_error_of_ours_is_classified_by_what_it_wraps() -> None:
    wrapper = errors.StoreUnavailableError("the store failed")
    wrapper.__cause__ = _sqlite_error("database disk image is malformed", 11)
    assert hermes_state.classify_persistence_error(wrapper) == "corrupt"
    looped = errors.StoreUnavailableError("the store failed")
    looped.__cause__ = looped
    assert hermes_state.classify_persistence_error(looped) == "unknown"


@given(st.one_of(st.text(max_size=40), st.integers(), st.binary(max_size=8),
                 st.builds(RuntimeError, st.text(max_size=20))))  # fmt: skip
def test_any_value_gets_one_of_iots_causes(value: Any) -> None:
    assert hermes_state.classify_persistence_error(value) in persistence.PERSISTENCE_ERROR_CAUSES


def test_a_malformed_schema_is_told_from_a_malformed_image() -> None:
    schema = sqlite3.DatabaseError("malformed database schema (x)")
    assert hermes_state.is_malformed_schema_error(schema)
    assert not hermes_state.is_malformed_schema_error(
        sqlite3.DatabaseError("database disk image is malformed"))  # fmt: skip
    assert not hermes_state.is_malformed_schema_error(ValueError("malformed database schema"))


# -- the files ---------------------------------------------------------------------------------
def test_a_diverted_transcript_lands_under_the_hermes_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "home"))
    assert hermes_state.get_hermes_home() == tmp_path / "home"
    assert hermes_state.divert_session_transcript_jsonl("  ", [{"a": 1}]) is None
    assert hermes_state.divert_session_transcript_jsonl("s", []) is None
    path = hermes_state.divert_session_transcript_jsonl(" s ", [{"role": "user"}, None, 5])
    assert path == tmp_path / "home" / "sessions" / "s.jsonl"
    hermes_state.divert_session_transcript_jsonl("s", ["\u4e2d"])
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert lines == [{"role": "user"}, {"content": "5"}, {"content": "\u4e2d"}]


@pytest.mark.skipif(os.name == "nt", reason="POSIX modes")
def test_the_store_files_are_made_private_by_path(tmp_path: Path) -> None:
    db_path = tmp_path / "state.db"
    hermes_state._secure_state_db_files(db_path, create_main=True)
    wal = tmp_path / "state.db-wal"
    wal.write_bytes(b"")
    wal.chmod(0o644)
    (tmp_path / "elsewhere").write_bytes(b"")
    (tmp_path / "elsewhere").chmod(0o644)
    (tmp_path / "state.db-shm").symlink_to(tmp_path / "elsewhere")
    hermes_state._secure_state_db_files(db_path, create_main=True)  # exists: never reopened
    assert stat.S_IMODE(db_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(wal.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "elsewhere").stat().st_mode) == 0o644  # a planted link


def test_a_tracked_connection_is_the_stores_library(tmp_path: Path) -> None:
    conn = hermes_state._connect_tracked_db(tmp_path / "w.db", tracking_path=tmp_path / "w.db")
    try:
        assert sqlite_library.is_connection(conn)
        assert conn.execute("SELECT 1").fetchone()[0] == 1
    finally:
        conn.close()


def test_the_preflight_skips_memory_and_passes_a_writable_file(tmp_path: Path) -> None:
    hermes_state.preflight_db_writability(Path(":memory:"))
    (tmp_path / "state.db").write_bytes(b"")
    hermes_state.preflight_db_writability(tmp_path / "state.db")


def test_the_preflight_passes_a_sidecar_deleted_while_it_looks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A handle's close deletes its -wal and -shm while a thread landing a call after close()
    reopens the file: the preflight listed the -wal, then found it gone, and refused the open
    as "read-only for this user" (a worker's message lost; seen in CI). Listed but gone now
    stands for that window."""
    database = tmp_path / "state.db"
    database.write_bytes(b"")
    listed = Path.is_file
    monkeypatch.setattr(
        Path, "is_file", lambda path: path.name.endswith("-wal") or listed(path)
    )
    hermes_state.preflight_db_writability(database)


def test_the_preflight_refuses_a_sidecar_this_user_cannot_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outside the Hermes home nothing is repaired: an -wal there that is not writable
    refuses the open, naming it (root may write anything: the answer is the access check's)."""
    database, wal = tmp_path / "state.db", tmp_path / "state.db-wal"
    database.write_bytes(b"")
    wal.write_bytes(b"")
    checked = os.access
    monkeypatch.setattr(
        os, "access", lambda path, mode: Path(path) != wal and checked(path, mode)
    )
    with pytest.raises(sqlite3.OperationalError, match="read-only for this user"):
        hermes_state.preflight_db_writability(database)
    assert wal.exists()  # never deleted: it holds committed data


def test_the_transcript_limits_are_iots_default_without_hermes_config() -> None:
    assert hermes_state.resolved_max_resume_messages() == 20_000
    assert hermes_state.resolved_max_export_messages() == 20_000
