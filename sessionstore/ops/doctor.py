"""Health checks and repairs of a session store: the library behind ``sessionstore db doctor``.

``diagnose(store)`` only reads: no write lock, not a byte of the store changed, so it runs
beside a live Hermes and on a read-only store (SQLite's FTS5 ``integrity-check`` is spelled as
an INSERT: it runs on a private snapshot of the database). Lock contention is never reported
as damage: a store that stays busy gets "not checked" (``skip``). Each finding
is a :class:`Check` with a stable name, so scripts can read the ``--json`` report.
``repair(store, report)`` fixes what can be fixed without losing data: it adds back a column
dropped by hand (empty: its values went with the drop), rebuilds the full-text
index, recomputes counters from the rows (counted and written in one write transaction, so a
concurrent writer cannot slip between), stores a number in each time, cost or token cell that
holds none (:mod:`.number_cells`), clears parent ids that point at nothing and adopts
messages whose session is missing into a placeholder session. Take a backup first
(:func:`sessionstore.dialects.backup_database`); the CLI does.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import Column, Index, Table, column, func, or_, select, update
from sqlalchemy import table as lightweight_table
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.schema import CreateColumn, CreateIndex

from ..dialects import StoreDialect, dialect_for_url
from ..errors import SessionStoreError, StoreBusyError
from ..schema import legacy, migrate
from ..search.registry import search_index_for
from ..sql.codec import cell_text, stored_clock, stored_tool_call_count, text_of_blob
from ..sql.tables import messages_table as messages
from ..sql.tables import session_model_usage_table as usage
from ..sql.tables import sessions_table as sessions
from ..storage.command_hints import cli_command
from ..storage.retry import RetryPolicy
from ..storage.snapshots import copy_location, private_copy_of
from ..storage.store import Store
from . import number_cells

logger = logging.getLogger(__name__)

CheckStatus = Literal["ok", "warn", "fail", "skip"]

WAL_WARN_BYTES = 64 * 1024 * 1024
"""A WAL this big means checkpoints are not keeping up (a reader that never lets go)."""

MAX_EXAMPLES = 3
UPDATE_BATCH = 500
PLACEHOLDER_SOURCE = "unknown"

_REVISION_TO_HERMES = {revision: number for number, revision in legacy.HERMES_REVISIONS.items()}


@dataclass
class _Findings:
    """What the checks found that ``repair`` needs again (ids, not just counts)."""

    dangling_parents: list[str] = field(default_factory=list)
    # Session ids stored as bytes (a salvaged SQLite file's), in sessions.id or a column whose
    # foreign key names it, each once: what --fix rewrites as their text.
    blob_ids: list[bytes] = field(default_factory=list)
    # The session ids orphaned messages name, as stored (a salvaged file's may be a BLOB).
    orphan_sessions: list[object] = field(default_factory=list)
    wrong_counters: dict[str, tuple[int, int]] = field(default_factory=dict)
    # Every session whose tool_call_count is not the v6 count, legacy-valid ones included: what
    # an explicit recount rewrites.
    recount_tool_calls: dict[str, int] = field(default_factory=dict)
    # Sessions whose tool_call_count matches no era's rule: the only ones a plain --fix
    # recounts (the others' counters are history).
    wrong_tool_counts: set[str] = field(default_factory=set)
    # Head indexes the store lacks (dropped by hand, or by a tool that rebuilt a table).
    missing_indexes: list[str] = field(default_factory=list)
    # Head columns ("table.column") the store lacks (ALTER TABLE ... DROP COLUMN by hand).
    missing_columns: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Check:
    """One finding. ``fail`` is a problem (exit 1); ``warn`` is worth knowing, not failing."""

    name: str
    status: CheckStatus
    detail: str
    fixable: bool = False
    # Skipped only because another program kept the store busy: worth running again, and the
    # command line says so rather than a bare "no problems found".
    busy: bool = False

    @property
    def is_problem(self) -> bool:
        return self.status == "fail"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "detail": self.detail,
            "fixable": self.fixable,
            "busy": self.busy,
        }


@dataclass(frozen=True)
class Report:
    checks: tuple[Check, ...]
    # What ``repair`` acts on: the ids behind the findings, so it does not search again.
    findings: _Findings = field(default_factory=_Findings, repr=False, compare=False)

    @property
    def problems(self) -> list[Check]:
        return [check for check in self.checks if check.is_problem]

    @property
    def healthy(self) -> bool:
        return not self.problems

    def get(self, name: str) -> Check | None:
        return next((check for check in self.checks if check.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {"healthy": self.healthy, "checks": [check.to_dict() for check in self.checks]}


# -- files -----------------------------------------------------------------------------------
def is_store_file(url: str | URL, path: Path) -> bool:
    """True when ``path`` is the database behind ``url`` or one of the files beside it that
    belong to it (SQLite's log and journal).

    Compared by ``stat`` (same device and inode) where the file exists, by resolved name
    otherwise; nothing is opened.
    """
    parsed = make_url(url) if isinstance(url, str) else url
    for candidate in dialect_for_url(parsed).store_files(parsed):
        try:
            if os.path.samefile(candidate, path):
                return True
        except OSError:
            if candidate.resolve() == path.resolve():
                return True
    return False


# -- diagnosis -------------------------------------------------------------------------------
Stage = Callable[[str, int, int], None]
"""Told ``(what, number, of)`` as each stage of a diagnosis or repair starts (``number`` from
1): checking a big store takes seconds, and the CLI shows which stage runs."""


def diagnose(
    store: Store, *, wal_warn_bytes: int = WAL_WARN_BYTES, progress: Stage | None = None
) -> Report:
    """Run every check; a store that is not at head gets only the schema finding.

    The checks that read every page or row (integrity, indexes, the full-text indexes,
    lineage, orphans, counters) take seconds to minutes on a large store. Where a reader holds
    the store's writers off (SQLite in the rollback journal), they read a private copy of it
    taken in one step (:func:`content_checked`), so that a gateway writing meanwhile waits
    only for the copy: a check of a 2 GB file no longer outlasts its retry budget."""
    findings = _Findings()
    total = len(_stages(store, store, findings, wal_warn_bytes)) + 1  # and the schema's
    if progress is not None:
        progress("schema", 1, total)
    schema, at_head = store.read(lambda conn: _check_schema(conn, store.url))
    if not at_head:
        # The other checks assume the current columns: one clear instruction to upgrade beats
        # a cascade of SQL errors.
        return Report((schema,), findings)
    columns = store.read(lambda conn: _check_columns(conn, findings))
    checks = [schema, columns]
    if columns.is_problem:
        # As for a store not at head: the other checks read those columns and would fail
        # with SQL errors; the answer is to put the columns back first.
        return Report(tuple(checks), findings)
    with content_checked(store) as checked:
        stages = _stages(store, checked, findings, wal_warn_bytes)
        for number, (name, run) in enumerate(stages, start=2):
            if progress is not None:
                progress(name, number, total)
            found = run()
            checks.extend(found if isinstance(found, list) else [found])
    return Report(tuple(checks), findings)


@contextlib.contextmanager
def content_checked(store: Store) -> Iterator[Store]:
    """The store the content checks read: ``store`` itself where a long read holds no writer
    off, else a read-only store on a private copy of it (``storage.snapshots``), closed and
    removed when the block ends. Where the copy cannot be had (no place for it; a file SQLite
    cannot copy, which the checks on the file itself then report) they read ``store``."""
    path = store.dialect.database_file(store.url)
    if path is None or not store.read(store.dialect.long_reads_hold_writers_off):
        yield store
        return

    def copy(destination: Path) -> None:
        store.read(lambda conn: store.dialect.copy_as_read(conn, destination))

    instead = "the checks read the file itself, and its writers wait while they run"
    with contextlib.ExitStack() as kept:
        try:
            place = kept.enter_context(
                private_copy_of(store.dialect, path, copy, instead=instead)
            )
        except (SessionStoreError, DBAPIError) as exc:  # busy, or damage the copy met
            logger.warning("no private copy of %s for the checks (%s); %s", path, exc, instead)
            place = None
        if place is None:
            yield store
            return
        copy_url = copy_location(store.dialect, store.url, place)
        on_copy = Store.open(copy_url, read_only=True, retry=store.retry)
        kept.callback(on_copy.close)
        yield on_copy


def _stages(
    store: Store, checked: Store, findings: _Findings, wal_warn_bytes: int
) -> list[tuple[str, Callable[[], Check | list[Check]]]]:
    """The checks after the schema's, in order: those of the file itself on ``store``, the
    content checks on ``checked`` (:func:`content_checked`)."""
    return [
        ("engine", lambda: store.read(_check_engine)),
        # The log as the store's own writers and checkpoints left it.
        ("write-ahead log", lambda: _check_wal(store, wal_warn_bytes)),
        ("integrity", lambda: _check_integrity(checked)),
        ("indexes", lambda: checked.read(lambda conn: _check_indexes(conn, findings))),
        ("full-text indexes", lambda: _search_checks(checked)),
        ("session ids", lambda: checked.read(
            lambda conn: _check_blob_ids(conn, checked.dialect, findings))),
        ("number cells", lambda: checked.read(
            lambda conn: _check_number_cells(conn, checked.dialect))),
        ("lineage", lambda: checked.read(lambda conn: _check_dangling_parents(conn, findings))),
        ("orphaned messages", lambda: checked.read(
            lambda conn: _check_orphan_messages(conn, findings))),
        ("counters", lambda: checked.read(lambda conn: _check_counters(conn, findings))),
    ]  # fmt: skip


def _check_schema(conn: Connection, url: URL) -> tuple[Check, bool]:
    status = migrate.status_of(conn)  # with the shape verdict of a Hermes file: one story
    head = migrate.head_revision()
    if status.revision != head:
        refusal = migrate.upgrade_refusal(status)
        why = None if refusal is not None else dialect_for_url(url).why_read_only(url)
        remedy = refusal or f"run `{cli_command(url, 'db', 'upgrade')}`"
        if why is not None:
            remedy = f"it cannot be upgraded here: {why}; then {remedy}"
        where = (
            "empty (no schema yet)"
            if status.revision is None and status.schema_version is None
            else f"at revision {status.revision or 'none'} (Hermes schema "
            f"{status.schema_version or 'none'})"
        )
        return Check("schema", "fail", f"{where}, not {head}: {remedy}"), False
    # Revisions after the Hermes chain keep writing Hermes's last number.
    expected = _REVISION_TO_HERMES.get(head, legacy.NEWEST_HERMES_SCHEMA)
    if legacy.is_too_new(status.schema_version):
        # A newer Hermes moved the store on after us: the same words as every other verb.
        refusal = migrate.upgrade_refusal(status)
        return Check("schema", "fail", f"revision {head}, but {refusal}"), False
    if status.schema_version != expected:
        return Check(
            "schema",
            "fail",
            f"schema_version says {status.schema_version} but revision {head} is Hermes schema "
            f"{expected}: another program changed this file",
        ), True
    return Check("schema", "ok", f"revision {head}, Hermes schema {expected}"), True


def _check_engine(conn: Connection) -> Check:
    """Which database software runs the store (SQLite: the library and version in use)."""
    summary, sound = dialect_for_url(conn.engine.url).engine_summary(conn)
    if sound:
        return Check("engine", "ok", summary)
    return Check(
        "engine", "warn",
        f"{summary}: install pysqlite3>=0.6.1 or a Python whose SQLite is 3.51.3 or newer",
    )  # fmt: skip


def _check_integrity(store: Store) -> Check:
    try:
        rows = store.read(store.dialect.integrity_problems)
    except StoreBusyError as exc:
        # Rollback-journal mode: a writer can keep readers out. Busy is not corrupt.
        return Check("integrity", "skip", f"the store stayed busy ({exc.attempts} attempts); "
                     "not checked", busy=True)
    if rows is None:
        return Check("integrity", "skip", "the database server checks its own pages")
    if not rows:
        return Check("integrity", "ok", "integrity_check: ok")
    shown = "; ".join(rows[:MAX_EXAMPLES]) + (" ..." if len(rows) > MAX_EXAMPLES else "")
    return Check("integrity", "fail", f"{len(rows)} problem(s): {shown}")


def _search_checks(store: Store) -> list[Check]:
    """The full-text checks, asked of the dialect's search index in a read transaction.

    FTS5 spells its integrity check as an INSERT, so on SQLite the checks run on a private
    snapshot of the database (:meth:`SearchIndex.check_read_only`): the store is only read,
    no write lock is taken, not a byte of it changes, and a read-only file can be checked.
    Before, they ran in a write transaction (``BEGIN IMMEDIATE``) that committed: pages
    written again with the same content, the change counter and modification time moved,
    beside a live Hermes. A store that stays busy (a rollback-journal file whose writer
    holds readers out) is reported as "not checked", never as damage (so ``--fix``
    rebuilds nothing)."""
    index = search_index_for(store.dialect)
    try:
        health = store.read(index.check_read_only)
    except StoreBusyError as exc:
        return _fts_not_checked(f"the store stayed busy ({exc.attempts} attempts); not checked")
    return [
        Check("fts_objects", "fail", f"missing: {', '.join(health.missing)}", fixable=True)
        if health.missing
        else Check("fts_objects", "ok", "search indexes and their triggers present"),
        Check("fts_parity", "skip", "expression indexes cover every row by construction")
        if health.out_of_step is None
        else Check("fts_parity", "fail", "; ".join(health.out_of_step), fixable=True)
        if health.out_of_step
        else Check("fts_parity", "ok", f"{health.indexed} messages indexed"),
        Check("fts_integrity", "fail", "; ".join(health.broken), fixable=True)
        if health.broken
        else Check("fts_integrity", "ok", "integrity-check: ok"),
    ]


CHECK_LOCK_BUDGET_S = 3.0
"""How long a check waits for a lock (``check_retry``): a rollback-journal file's writer holds
readers out while it commits. A check is no reason to sit silent for the writers' whole
budget (20 s) behind another program's long write: a terminal that waits that long looks
frozen. A store still busy after it is reported "not checked", and the command line says to
run the doctor again. Under WAL (every store this package opens, and Hermes's) a reader never
waits for a writer."""


def check_retry(policy: RetryPolicy | None = None) -> RetryPolicy:
    """The retry policy of a store opened for checking: ``policy`` (the default one when
    None) with its budget cut to :data:`CHECK_LOCK_BUDGET_S`."""
    policy = policy or RetryPolicy()
    return RetryPolicy(
        max_attempts=policy.max_attempts,
        min_sleep_s=policy.min_sleep_s,
        max_sleep_s=policy.max_sleep_s,
        budget_s=min(policy.budget_s, CHECK_LOCK_BUDGET_S),
    )


def _fts_not_checked(reason: str) -> list[Check]:
    return [
        Check(name, "skip", reason, busy=True)
        for name in ("fts_objects", "fts_parity", "fts_integrity")
    ]


def _examples(ids: Iterable[str]) -> str:
    listed = list(ids)
    shown = ", ".join(listed[:MAX_EXAMPLES])
    return shown + (f" and {len(listed) - MAX_EXAMPLES} more" if len(listed) > MAX_EXAMPLES else "")


def _session_id_columns(conn: Connection, dialect: StoreDialect) -> list[tuple[str, str]]:
    """``sessions.id`` and every column whose foreign key names it, as the store declares
    them (the Telegram topic bindings' where the store has them)."""
    return [("sessions", "id"), *dialect.referencing_columns(conn, "sessions", "id")]


def _check_blob_ids(conn: Connection, dialect: StoreDialect, findings: _Findings) -> Check:
    """Session ids stored as bytes: SQLite keeps a value of any type in any column, and a
    salvaged or hand-edited file (a tool binding Python ``bytes``) holds some. Every read
    shows such an id as its text (``cell_text``), so the session is listed and searched, but
    a lookup by that text finds nothing (``sessions show``, ``get_session``, a delete)."""
    if not dialect.keeps_any_type_in_a_column:
        return Check("blob_ids", "ok", "every session id is text (the column's type)")
    found: set[bytes] = set()
    for table_name, column_name in _session_id_columns(conn, dialect):
        cell = lightweight_table(table_name, column(column_name)).c[column_name]
        statement = select(cell).where(dialect.holds_bytes(cell)).distinct()
        found.update(bytes(row[0]) for row in conn.execute(statement))
    findings.blob_ids = sorted(found)
    if not found:
        return Check("blob_ids", "ok", "every session id is stored as text")
    clashing = [blob for blob in findings.blob_ids if _clashes(conn, blob)]
    said = (
        f"{len(found)} session id(s) stored as bytes, so listed and searched but not found "
        "by their id: " + _examples(text_of_blob(blob) for blob in findings.blob_ids)
    )
    if clashing:
        said += (f"; {len(clashing)} of them also exist as text, two sessions of one id: "
                 "left as they are")  # fmt: skip
    fixable = len(clashing) < len(found)
    return Check("blob_ids", "fail" if fixable else "warn", said, fixable=fixable)


def _clashes(conn: Connection, blob: bytes) -> bool:
    """Whether sessions hold both ``blob`` and its text as ids: two sessions, which one id
    cannot name (a reference stored as bytes beside a text session is only that session's)."""
    both = select(func.count()).where(
        or_(sessions.c.id == blob, sessions.c.id == text_of_blob(blob))
    )
    return int(conn.execute(both).scalar_one()) > 1


def _check_number_cells(conn: Connection, dialect: StoreDialect) -> Check:
    """Number cells holding no number of their kind: :mod:`.number_cells`."""
    found = list(number_cells.find(conn, dialect))
    if not found:
        return Check("number_cells", "ok", "every time, cost and token cell holds a number")
    owners = dict.fromkeys(cell.owner for cell in found)  # in order, each once
    return Check(
        "number_cells",
        "fail",
        f"{len(found)} number cell(s) hold no number of their kind (text, bytes, an infinity, "
        f"a fraction in a count): {_places(found)}; session(s) {_examples(owners)}",
        fixable=True,
    )


def _places(cells: Iterable[number_cells.DamagedCell]) -> str:
    """How many cells of each ``table.column``: ``sessions.started_at (1), ...``."""
    counted = Counter(cell.place for cell in cells)
    return ", ".join(f"{place} ({count})" for place, count in sorted(counted.items()))


def _check_dangling_parents(conn: Connection, findings: _Findings) -> Check:
    parent = sessions.alias("parent")
    statement = select(sessions.c.id).where(
        sessions.c.parent_session_id.is_not(None),
        ~select(parent.c.id).where(parent.c.id == sessions.c.parent_session_id).exists(),
    )
    findings.dangling_parents = [cell_text(row[0]) for row in conn.execute(statement)]
    if findings.dangling_parents:
        return Check(
            "dangling_parents",
            "fail",
            f"{len(findings.dangling_parents)} session(s) name a parent that does not exist: "
            + _examples(findings.dangling_parents),
            fixable=True,
        )
    return Check("dangling_parents", "ok", "every parent exists")


def _head_tables() -> list[Table]:
    """The head schema's tables (``schema.models``), whose columns every store at head has."""
    from ..schema import models  # the DDL-only declarations: off the runtime's import path

    return list(models.Base.metadata.sorted_tables)


def _head_indexes() -> dict[str, Index]:
    """Every index the head schema declares on its tables, by name (``schema.models``)."""
    return {
        str(index.name): index
        for table in _head_tables()
        for index in table.indexes
        if index.name is not None
    }


def _missing_indexes(conn: Connection) -> list[str]:
    expected = _head_indexes()
    present = dialect_for_url(conn.engine.url).existing_indexes(conn, expected)
    return sorted(set(expected) - present)


def missing_indexes(store: Store) -> list[str]:
    """The names of the head schema's indexes that ``store`` lacks (the ``indexes`` check)."""
    return store.read(_missing_indexes)


def _check_indexes(conn: Connection, findings: _Findings) -> Check:
    """Hermes makes its indexes again at every open (``CREATE INDEX IF NOT EXISTS``); a store
    opens on its revision and its tables' shape, so an index dropped by hand stays dropped
    until this check finds it and ``--fix`` makes it. Without one, reads that Hermes answers
    from an index scan a table, and without ``idx_sessions_title_unique`` two sessions may
    take one title."""
    expected = _head_indexes()
    findings.missing_indexes = _missing_indexes(conn)
    if findings.missing_indexes:
        return Check(
            "indexes",
            "warn",
            f"{len(findings.missing_indexes)} index(es) of the schema are missing: "
            + _examples(findings.missing_indexes),
            fixable=True,
        )
    return Check("indexes", "ok", f"all {len(expected)} indexes of the schema are present")


def _missing_columns(conn: Connection) -> list[str]:
    dialect = dialect_for_url(conn.engine.url)
    missing = []
    for table in _head_tables():
        present = dialect.column_names(conn, table.name)
        if not present:
            missing.append(f"{table.name} (the whole table)")
            continue
        missing.extend(f"{table.name}.{c.name}" for c in table.columns if c.name not in present)
    return missing


def missing_columns(conn: Connection) -> list[str]:
    """The head schema's columns (``table.column``) the store behind ``conn`` lacks (the
    ``columns`` check)."""
    return _missing_columns(conn)


def _check_columns(conn: Connection, findings: _Findings) -> Check:
    """The revision says which columns a store has, and nothing reads them again at open
    (iot 0.22.2 adds a missing one at every open); a column dropped by hand
    (``ALTER TABLE ... DROP COLUMN``) makes every read that names it fail, so it is a
    failure, and ``--fix`` adds it back, empty (its values went with the drop)."""
    findings.missing_columns = _missing_columns(conn)
    if findings.missing_columns:
        return Check(
            "columns",
            "fail",
            f"{len(findings.missing_columns)} column(s) of the schema are missing, and reads "
            "that name them fail: " + _examples(findings.missing_columns)
            + "; --fix adds each back, empty, then run the doctor again",
            fixable=True,
        )
    total = sum(len(table.columns) for table in _head_tables())
    return Check("columns", "ok", f"all {total} columns of the schema are present")


def _check_orphan_messages(conn: Connection, findings: _Findings) -> Check:
    """Messages, and per-model usage rows, whose session does not exist (a file written with
    foreign keys off: Hermes's delete takes both with the session). Their data is kept: a
    placeholder session gives them a home (:func:`_adopt_orphans`); a copy carried none of
    them, and called itself incomplete."""
    statement = (
        select(messages.c.session_id, func.count())
        .where(~select(sessions.c.id).where(sessions.c.id == messages.c.session_id).exists())
        .group_by(messages.c.session_id)
    )
    rows = [(row[0], int(row[1])) for row in conn.execute(statement)]
    usage_only = conn.execute(
        select(usage.c.session_id, func.count())
        .where(~select(sessions.c.id).where(sessions.c.id == usage.c.session_id).exists())
        .group_by(usage.c.session_id)
    ).all()
    named = {session_id for session_id, _ in rows}
    usage_rows = [(row[0], int(row[1])) for row in usage_only if row[0] not in named]
    findings.orphan_sessions = [session_id for session_id, _ in rows + usage_rows]
    if findings.orphan_sessions:
        said = []
        if rows:
            said.append(f"{sum(count for _, count in rows)} message(s) belong to {len(rows)} "
                        "missing session(s)")  # fmt: skip
        if usage_rows:
            said.append(f"{sum(count for _, count in usage_rows)} usage row(s) to "
                        f"{len(usage_rows)} more")  # fmt: skip
        return Check(
            "orphan_messages",
            "fail",
            "; ".join(said) + ": "
            + _examples(cell_text(session_id) for session_id in findings.orphan_sessions),
            fixable=True,
        )
    return Check("orphan_messages", "ok", "every message has its session")




@dataclass
class _ToolCounting:
    """One session's tool-call counter under each era's rule.

    Hermes v6 (and sessionstore) add the number of tool calls a message carries; Hermes v1
    added one per tool-related message. A file that lived through both eras holds the v1 sum
    of its older messages plus the v6 sum of the newer ones: every "split point" in message
    order is a legitimate history, so the accepted values are all of those sums.
    """

    v6: int = 0
    v1: int = 0
    accepted: set[int] = field(default_factory=lambda: {0})
    damaged: bool = False

    def add(self, v1_weight: int, v6_weight: int | None) -> None:
        """The next message in session order (older messages are the v1 era)."""
        if v6_weight is None:
            self.damaged = True
            return
        # Every history so far had switched to v6 before this message, or this message is
        # still v1 (and so was everything before it).
        self.v1 += v1_weight
        self.accepted = {total + v6_weight for total in self.accepted} | {self.v1}
        self.v6 += v6_weight


def _v1_weight(role: str, value: str | None) -> int:
    """Hermes v1's count: one for a message with tool calls or a tool result, else none."""
    has_calls = bool(value) and value not in ("[]", "null", '""')
    return 1 if has_calls or role == "tool" else 0


def last_compaction(conn: Connection, session_ids: list[str] | None = None) -> dict[str, int]:
    """Per session, the id of its newest compaction-archived row (``compacted = 1``).

    Hermes's ``archive_and_compact`` sets the counters to the compacted set it inserts (after
    every archived row), and appends count on from there: the rows a session's counters
    count are those after that id. Sessions never compacted count every row."""
    statement = (
        select(messages.c.session_id, func.max(messages.c.id))
        .where(messages.c.compacted == 1)
        .group_by(messages.c.session_id)
    )
    if session_ids is not None:
        statement = statement.where(messages.c.session_id.in_(session_ids))
    return {cell_text(session_id): int(last) for session_id, last in conn.execute(statement)}


def _counted_totals(conn: Connection) -> dict[str, int]:
    """Messages per session, as Hermes counts them (see :func:`last_compaction`)."""
    totals = {
        cell_text(row[0]): int(row[1])
        for row in conn.execute(
            select(sessions.c.id, func.count(messages.c.id))
            .select_from(sessions.outerjoin(messages, messages.c.session_id == sessions.c.id))
            .group_by(sessions.c.id)
        )
    }
    compacted = last_compaction(conn)
    if compacted:
        last = (
            select(messages.c.session_id, func.max(messages.c.id).label("last_id"))
            .where(messages.c.compacted == 1)
            .group_by(messages.c.session_id)
            .subquery()
        )
        archived = conn.execute(
            select(messages.c.session_id, func.count(messages.c.id))
            .join(last, (last.c.session_id == messages.c.session_id)
                  & (messages.c.id <= last.c.last_id))
            .group_by(messages.c.session_id)
        )  # fmt: skip
        for session_id, before in archived:
            totals[cell_text(session_id)] -= int(before)
    return totals


def _tool_counting(conn: Connection) -> dict[str, _ToolCounting]:
    compacted = last_compaction(conn)
    rows = conn.execution_options(yield_per=1000).execute(
        select(messages.c.session_id, messages.c.role, messages.c.tool_calls, messages.c.id)
        .where(or_(messages.c.tool_calls.is_not(None), messages.c.role == "tool"))
        .order_by(messages.c.session_id, messages.c.timestamp, messages.c.id)
    )
    counting: dict[str, _ToolCounting] = defaultdict(_ToolCounting)
    for session_id, role, value, message_id in rows:
        if message_id <= compacted.get(cell_text(session_id), 0):
            continue  # archived by a compaction: no longer counted
        v6_weight = stored_tool_call_count(str(value)) if value else 0
        counting[cell_text(session_id)].add(_v1_weight(str(role), value), v6_weight)
    return counting


def actual_counters(conn: Connection) -> dict[str, tuple[int, int | None]]:
    """(messages, tool calls) per session as the rows say; tool calls None when unknowable.

    Tool calls are counted by the current (Hermes v6) rule.
    """
    counts: dict[str, tuple[int, int | None]] = {}
    for session_id, message_total in _counted_totals(conn).items():
        counts[session_id] = (message_total, 0)
    for session_id, counting in _tool_counting(conn).items():
        if session_id in counts:
            tools = None if counting.damaged else counting.v6
            counts[session_id] = (counts[session_id][0], tools)
    return counts


def _live_counters(conn: Connection) -> dict[str, tuple[int, int | None]]:
    """(messages, tool calls by the v6 rule) of each session's live rows (``active = 1``): the
    counters iot 0.21.3 and later, and ours, set after a rewind (``sessions.rewind``); tool
    calls None when a row's are damaged."""
    counts: dict[str, tuple[int, int | None]] = {}
    rows = conn.execution_options(yield_per=1000).execute(
        select(messages.c.session_id, messages.c.tool_calls).where(messages.c.active == 1)
    )
    for session_id, value in rows:
        total, tools = counts.get(cell_text(session_id), (0, 0))
        weight = stored_tool_call_count(str(value)) if value else 0
        counts[cell_text(session_id)] = (
            total + 1, None if tools is None or weight is None else tools + weight
        )
    return counts


def _stored_count(value: object) -> int | None:
    """A counter as a damaged file may hold it: NULL as 0, an integer (a REAL of integral
    value as that integer), else None: text, a BLOB or a fraction counts nothing, so it
    disagrees with the rows and is reported (and rewritten by ``--fix``), never raised."""
    if value is None:
        return 0
    if type(value) is int:
        return value
    if type(value) is float and value.is_integer():
        return int(value)
    return None


def _check_counters(conn: Connection, findings: _Findings) -> list[Check]:
    message_totals = _counted_totals(conn)
    counting = _tool_counting(conn)
    stored = {
        cell_text(row[0]): (_stored_count(row[1]), _stored_count(row[2]))
        for row in conn.execute(
            select(sessions.c.id, sessions.c.message_count, sessions.c.tool_call_count)
        )
    }
    live = _live_counters(conn)
    wrong_messages: list[str] = []
    wrong_tools: list[str] = []
    legacy_tools: list[str] = []
    for session_id, message_total in message_totals.items():
        stored_messages, stored_tools = stored.get(session_id, (0, 0))
        if (stored_messages, stored_tools) == live.get(session_id, (0, 0)):
            continue  # the live rows' counts: a rewind's (iot 0.21.3 on, and ours)
        tools = counting.get(session_id) or _ToolCounting()
        if stored_messages != message_total:
            wrong_messages.append(session_id)
        if not tools.damaged and stored_tools != tools.v6:
            findings.recount_tool_calls[session_id] = tools.v6
            if stored_tools in tools.accepted:
                legacy_tools.append(session_id)
            else:
                wrong_tools.append(session_id)
                findings.wrong_tool_counts.add(session_id)
        if session_id in wrong_messages or session_id in wrong_tools:
            # A stored tool count that is no count (text, a fraction) beside damaged tool
            # calls: the calls that could be counted.
            fixed = tools.v6 if session_id in wrong_tools or stored_tools is None else stored_tools
            findings.wrong_counters[session_id] = (message_total, fixed)
    legacy_note = (
        f"; {len(legacy_tools)} session(s) counted the Hermes v1 way (one per tool-related "
        "message), accepted: --recount-tool-calls rewrites them to the v6 rule"
        if legacy_tools
        else ""
    )
    return [
        Check(
            "message_counts",
            "fail",
            f"{len(wrong_messages)} session(s) with a message_count that disagrees with their "
            f"rows: {_examples(wrong_messages)}",
            fixable=True,
        )
        if wrong_messages
        else Check("message_counts", "ok", "message_count matches the rows"),
        Check(
            "tool_call_counts",
            "fail",
            f"{len(wrong_tools)} session(s) with a tool_call_count that no Hermes version's rule "
            f"gives for their rows: {_examples(wrong_tools)}" + legacy_note,
            fixable=True,
        )
        if wrong_tools
        else Check("tool_call_counts", "ok", "tool_call_count matches the rows" + legacy_note),
    ]


def _check_wal(store: Store, wal_warn_bytes: int) -> Check:
    wal = store.dialect.write_ahead_log(store.url)
    if wal is None:
        return Check("wal_size", "skip", "no write-ahead log file on this engine")
    size = wal.stat().st_size if wal.exists() else 0
    megabytes = size / (1024 * 1024)
    if size > wal_warn_bytes:
        return Check(
            "wal_size",
            "warn",
            f"{wal.name} is {megabytes:.1f} MiB: checkpoints are not keeping up "
            "(a long-lived reader?)",
            fixable=True,
        )
    return Check("wal_size", "ok", f"{wal.name}: {megabytes:.1f} MiB")


# -- repair ----------------------------------------------------------------------------------
def repair(
    store: Store,
    report: Report,
    *,
    recount_tool_calls: bool = False,
    progress: Stage | None = None,
) -> list[str]:
    """Fix the fixable findings of ``report``; return one line per action taken.

    A tool_call_count that follows an older Hermes rule is history, not damage: it is rewritten
    to the current rule only with ``recount_tool_calls=True``. Run :func:`diagnose` again
    afterwards to see what remains.
    """
    flagged = {
        check.name for check in report.checks if check.fixable and check.status in ("fail", "warn")
    }
    findings = report.findings
    legacy = {
        session_id: total
        for session_id, total in findings.recount_tool_calls.items()
        if session_id not in findings.wrong_counters
    }
    planned: list[tuple[str, Callable[[], str]]] = []
    if "blob_ids" in flagged:  # first: the other repairs name sessions by their text
        planned.append(("session ids", lambda: _ids_as_text(store, findings.blob_ids)))
    if "number_cells" in flagged:
        planned.append(("number cells", lambda: _mend_number_cells(store)))
    if "columns" in flagged:
        planned.append(("columns", lambda: add_columns(store, findings.missing_columns)))
    if "indexes" in flagged:
        planned.append(("indexes", lambda: make_indexes(store, findings.missing_indexes)))
    if "orphan_messages" in flagged:
        planned.append(("orphaned messages",
                        lambda: _adopt_orphans(store, findings.orphan_sessions)))
    if "dangling_parents" in flagged:
        planned.append(("lineage",
                        lambda: _clear_dangling_parents(store, findings.dangling_parents)))
    if flagged & {"message_counts", "tool_call_counts"}:
        planned.append(("counters", lambda: _fix_counters(
            store, findings.wrong_counters, findings.wrong_tool_counts)))
    if flagged & {"fts_objects", "fts_parity", "fts_integrity"}:
        planned.append(("full-text indexes", lambda: _rebuild_search(store)))
    if "wal_size" in flagged:
        planned.append(("write-ahead log", lambda: _truncate_wal(store)))
    if recount_tool_calls and legacy:
        planned.append(("tool-call counts", lambda: _recount_tool_calls(store, legacy)))
    actions = []
    for number, (name, run) in enumerate(planned, start=1):
        if progress is not None:
            progress(name, number, len(planned))
        actions.append(run())
    return actions


def _ids_as_text(store: Store, blobs: list[bytes]) -> str:
    """Store each session id held as bytes as its text (``text_of_blob``, the id every read
    shows), in ``sessions.id`` and in every column whose foreign key names it, in one
    transaction whose keys are checked at its commit. An id whose text another session has
    is left (:func:`_clashes`), and so is one whose rewrite a unique key refuses (a usage
    row of the same route under both forms): nothing of it is written."""
    renamed: list[str] = []
    left: list[str] = []

    def run(conn: Connection) -> None:
        renamed.clear()
        left.clear()
        store.dialect.defer_foreign_keys(conn)
        columns = _session_id_columns(conn, store.dialect)
        for blob in blobs:
            session_id = text_of_blob(blob)
            if _clashes(conn, blob):
                left.append(session_id)
                continue
            try:
                with conn.begin_nested():
                    for table_name, column_name in columns:
                        table = lightweight_table(table_name, column(column_name))
                        conn.execute(
                            update(table).where(table.c[column_name] == blob)
                            .values({column_name: session_id})
                        )  # fmt: skip
            except IntegrityError:
                left.append(session_id)
            else:
                renamed.append(session_id)
        # Their rows join the indexes whose membership depends on the session (trigram).
        search_index_for(store.dialect).sessions_changed(conn, renamed)

    store.write(run)
    said = f"stored {len(renamed)} session id(s) held as bytes as their text"
    if left:
        said += (f"; left {len(left)} whose text another session's id already is (or a "
                 f"unique key refused): {_examples(left)}")  # fmt: skip
    return said


def _mend_number_cells(store: Store) -> str:
    """Every number cell holding no number gets what :mod:`.number_cells` decides, in one
    write transaction that finds them again."""
    mended = store.write(lambda conn: number_cells.mend(conn, store.dialect))
    return (f"stored a number (read from the text, else the column's default, a neighbour's "
            f"time or no value) in {len(mended)} number cell(s): "
            f"{_places(mended) or 'none left'}")  # fmt: skip


def _recount_tool_calls(store: Store, totals: dict[str, int]) -> str:
    def run(conn: Connection) -> None:
        for session_id, total in totals.items():
            conn.execute(
                update(sessions).where(sessions.c.id == session_id).values(tool_call_count=total)
            )

    store.write(run)
    return f"recounted the tool calls of {len(totals)} session(s) by the Hermes v6 rule"


def _adopt_orphans(store: Store, stored_ids: list[object]) -> str:
    """Give orphaned messages (and per-model usage rows) a session to belong to: deleting
    them would lose data.

    Messages a salvaged file files under a session id stored as a BLOB (or a number) are first
    filed under the id's text (``cell_text``), the id every read gives: where a session of
    that id exists they are its messages again, and no placeholder is made. (The placeholder
    was made with Python's ``b'...'`` form as its id, and the messages stayed orphaned.)"""
    relinked: list[str] = []
    adopted: list[str] = []

    def run(conn: Connection) -> None:
        relinked.clear()
        adopted.clear()
        for stored in stored_ids:
            session_id = cell_text(stored)
            found = select(sessions.c.id).where(sessions.c.id == session_id)
            # There already (a BLOB id's text, or made since the diagnosis): only counted.
            if conn.execute(found).first() is not None:
                relinked.append(session_id)
            else:
                rows = conn.execute(
                    select(messages.c.timestamp, messages.c.tool_calls).where(
                        messages.c.session_id == stored
                    )
                ).all()
                tools = sum(stored_tool_call_count(str(value)) or 0 for _, value in rows if value)
                clocks = [clock for row in rows if (clock := stored_clock(row[0])) is not None
                          and math.isfinite(clock)]  # fmt: skip
                conn.execute(
                    sessions.insert().values(
                        id=session_id,
                        source=PLACEHOLDER_SOURCE,
                        started_at=min(clocks, default=time.time()),
                        message_count=len(rows),
                        tool_call_count=tools,
                    )
                )
                adopted.append(session_id)
            if type(stored) is not str:  # after the session exists: messages point at it
                conn.execute(
                    update(messages).where(messages.c.session_id == stored)
                    .values(session_id=session_id)
                )  # fmt: skip
        # A session that got messages back counts them (the others counted theirs above).
        for session_id, (message_total, tool_total) in _counters_of(conn, relinked).items():
            values: dict[str, int] = {"message_count": message_total}
            if tool_total is not None:
                values["tool_call_count"] = tool_total
            conn.execute(update(sessions).where(sessions.c.id == session_id).values(values))
        # Their rows join the indexes whose membership depends on the session (trigram).
        search_index_for(store.dialect).sessions_changed(conn, adopted + relinked)

    store.write(run)
    said = f"created {len(adopted)} placeholder session(s) for orphaned messages and usage rows"
    if relinked:
        said += (f"; filed the messages of {len(relinked)} session(s) stored under a BLOB id "
                 "under the id's text again")  # fmt: skip
    return said


def make_indexes(store: Store, names: list[str]) -> str:
    """Make the head schema's indexes ``names`` (the ``indexes`` repair), each in its own
    transaction, so one that cannot be made (a unique
    index over rows that repeat) leaves the others made and is named in the answer."""
    declared = _head_indexes()
    made: list[str] = []
    refused: list[str] = []
    for name in names:
        index = declared[name]

        def make(conn: Connection, index: Index = index) -> None:
            # IF NOT EXISTS: another doctor may have made it since (no reflection needed).
            conn.execute(CreateIndex(index, if_not_exists=True))

        try:
            store.write(make)
        except IntegrityError:
            refused.append(name)
        else:
            made.append(name)
    answer = f"made {len(made)} missing index(es)" + (f": {', '.join(made)}" if made else "")
    if refused:
        answer += (
            f"; could not make {', '.join(refused)}: the rows repeat a value it keeps unique "
            "(sessions sharing a title, say); rename or clear the repeats, then run --fix again"
        )
    return answer


def add_columns(store: Store, names: list[str]) -> str:
    """Add the head schema's columns ``names`` (``table.column``) back, each as the head
    declares it (type, server default), in its own transaction; a whole missing table, or
    a column the database cannot add to a table with rows (NOT NULL without a default, a
    key), is named in the answer instead. The values the drop took are gone: each added
    column holds its default."""
    declared = {
        f"{table.name}.{column.name}": column
        for table in _head_tables()
        for column in table.columns
    }
    added: list[str] = []
    refused: list[str] = []
    for name in names:
        column = declared.get(name)
        if column is None:
            refused.append(name)
            continue

        def add(conn: Connection, column: Column[Any] = column) -> None:
            spec = CreateColumn(column).compile(dialect=conn.dialect)
            table = conn.dialect.identifier_preparer.quote(column.table.name)
            conn.exec_driver_sql(f"ALTER TABLE {table} ADD COLUMN {spec}")

        try:
            store.write(add)
        except DBAPIError:
            refused.append(name)
        else:
            added.append(name)
    answer = f"added {len(added)} missing column(s)" + (f": {', '.join(added)}" if added else "")
    if refused:
        answer += f"; could not add {', '.join(refused)}: restore the store from a backup"
    return answer


def _clear_dangling_parents(store: Store, session_ids: list[str]) -> str:
    cleared = [0]

    def run(conn: Connection) -> None:
        cleared[0] = 0
        for start in range(0, len(session_ids), UPDATE_BATCH):
            chunk = session_ids[start : start + UPDATE_BATCH]
            # Still dangling: a parent id stored as bytes names its session again once the
            # ids are text (``_ids_as_text`` runs first), and its lineage is kept.
            cleared[0] += conn.execute(
                update(sessions)
                .where(sessions.c.id.in_(chunk),
                       ~select(parent.c.id).where(parent.c.id == sessions.c.parent_session_id)
                       .exists())
                .values(parent_session_id=None)
            ).rowcount  # fmt: skip

    parent = sessions.alias("parent")
    store.write(run)
    return f"cleared {cleared[0]} dangling parent id(s)"


def _fix_counters(
    store: Store, wrong: dict[str, tuple[int, int]], wrong_tools: set[str]
) -> str:
    """Recompute and write the flagged sessions' counters in ONE write transaction.

    The counts ``diagnose`` saw are stale by now (a backup and any number of appends may have
    happened since): they only say which sessions to look at. Inside the write transaction
    the session rows are locked first (PostgreSQL: ``FOR UPDATE``, which waits for in-flight
    appends to those sessions, since each append bumps its session's row before inserting;
    SQLite: ``BEGIN IMMEDIATE`` already excludes every writer), then the rows are counted and
    the counters written, so no append can fall between the count and the write. A
    tool_call_count is rewritten only for sessions in ``wrong_tools`` (one that follows an
    older Hermes rule is history, see :func:`repair`)."""
    session_ids = sorted(wrong)

    def run(conn: Connection) -> None:
        for start in range(0, len(session_ids), UPDATE_BATCH):
            chunk = session_ids[start : start + UPDATE_BATCH]
            conn.execute(
                select(sessions.c.id).where(sessions.c.id.in_(chunk)).with_for_update()
            ).all()
            totals = _counters_of(conn, chunk)
            for session_id in chunk:
                message_total, tool_total = totals.get(session_id, (0, 0))
                values: dict[str, int] = {"message_count": message_total}
                if tool_total is not None and session_id in wrong_tools:
                    values["tool_call_count"] = tool_total
                conn.execute(update(sessions).where(sessions.c.id == session_id).values(values))

    store.write(run)
    return f"recomputed the counters of {len(wrong)} session(s)"


def _counters_of(conn: Connection, session_ids: list[str]) -> dict[str, tuple[int, int | None]]:
    """(messages, tool calls) of these sessions as their rows say now; tool calls None when
    a stored tool_calls value is damaged (the counter is then left alone)."""
    totals: dict[str, tuple[int, int | None]] = {}
    compacted = last_compaction(conn, session_ids)
    # Streamed per statement: Connection.execution_options would switch the whole write
    # transaction to server-side cursors.
    rows = conn.execute(
        select(messages.c.session_id, messages.c.tool_calls, messages.c.id).where(
            messages.c.session_id.in_(session_ids)
        ),
        execution_options={"yield_per": 1000},
    )
    for session_id, value, message_id in rows:
        key = str(session_id)
        if message_id <= compacted.get(key, 0):
            continue  # archived by a compaction: no longer counted
        message_total, tool_total = totals.get(key, (0, 0))
        in_row = stored_tool_call_count(str(value)) if value else 0
        tools = None if in_row is None or tool_total is None else tool_total + in_row
        totals[key] = (message_total + 1, tools)
    return totals


def _rebuild_search(store: Store) -> str:
    # Dropped and built again from the rows in one write transaction: a reader sees the old
    # index or the new one.
    store.write(search_index_for(store.dialect).rebuild)
    return "rebuilt the full-text index"


def _truncate_wal(store: Store) -> str:
    store.dialect.truncate_write_ahead_log(store.engine)
    return "checkpointed and truncated the write-ahead log"


__all__ = [
    "WAL_WARN_BYTES",
    "Check",
    "Report",
    "actual_counters",
    "diagnose",
    "is_store_file",
    "repair",
]
