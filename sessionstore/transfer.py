"""Moving whole stores: a streaming JSONL export, an import that restores it exactly, and
``copy`` between two databases (e.g. a SQLite file into PostgreSQL).

Format (one JSON object per line, UTF-8, non-ASCII kept as is)::

    {"format": "sessionstore-export", "version": 1}
    {"session": {...every sessions column...}}
    {"message": {...every messages column...}}      # that session's messages follow it
    ...

Memory stays constant: sessions and messages are streamed from the database and written in
batches. Import policy for a session id that already exists (``on_conflict``):

- ``"skip"``: leave the existing session and its messages alone; import nothing for it;
- ``"fail"``: raise :class:`ImportConflictError` before anything is written (the file is
  scanned once first);
- ``"merge"``: keep the existing session row and add whichever of its messages are missing
  (by message id). ``copy`` uses this, so an interrupted copy can simply be run again.

Ids, parents, titles, counters, JSON text and timestamps are restored as stored. A message id
that another session already uses in the target gets a fresh id (ids are referenced by nothing
else); a parent that is not in the target is set once the parent arrives, or left NULL.
"""

from __future__ import annotations

import itertools
import json
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any, Literal

from sqlalchemy import Select, select, update
from sqlalchemy.engine import Connection

from .errors import ImportConflictError, SessionStoreError
from .models import messages_table as messages
from .models import sessions_table as sessions
from .records import FIELD_DEFAULTS, MESSAGE_FIELDS, SESSION_FIELDS
from .repository import SessionRepository
from .store import Store

FORMAT_NAME = "sessionstore-export"
FORMAT_VERSION = 1
BATCH_ROWS = 1000

ConflictPolicy = Literal["skip", "fail", "merge"]
Record = tuple[str, dict[str, Any]]
Progress = Callable[[int], None]


class ImportFormatError(SessionStoreError, ValueError):
    """The input is not a sessionstore export (or is damaged)."""


@dataclass
class TransferResult:
    sessions: int = 0
    messages: int = 0
    skipped_sessions: int = 0
    renumbered_messages: int = 0
    orphaned_parents: list[str] = field(default_factory=list)


def iter_records(
    store: Store, *, source: str | None = None, session_ids: Iterable[str] | None = None
) -> Iterator[Record]:
    """Every session (oldest first) followed by its messages, streamed from one snapshot."""
    wanted = None if session_ids is None else set(session_ids)
    repository = SessionRepository(store)
    with store.reading() as conn:
        for session in repository.iter_sessions(conn, source):
            if wanted is not None and session.id not in wanted:
                continue
            yield "session", session.to_dict()
            for message in repository.iter_messages(conn, session.id):
                yield "message", message.to_dict()


def export_jsonl(
    store: Store,
    fp: IO[str],
    *,
    source: str | None = None,
    session_ids: Iterable[str] | None = None,
    progress: Progress | None = None,
) -> int:
    """Write the store (or some sessions of it) as JSONL; returns the number of sessions."""
    fp.write(json.dumps({"format": FORMAT_NAME, "version": FORMAT_VERSION}) + "\n")
    count = 0
    for kind, row in iter_records(store, source=source, session_ids=session_ids):
        fp.write(json.dumps({kind: row}, ensure_ascii=False) + "\n")
        if kind == "session":
            count += 1
            if progress is not None:
                progress(1)
    return count


def read_records(fp: IO[str]) -> Iterator[Record]:
    header_line = fp.readline()
    try:
        header = json.loads(header_line)
    except json.JSONDecodeError:
        header = None
    if not isinstance(header, dict) or header.get("format") != FORMAT_NAME:
        raise ImportFormatError("this file is not a sessionstore export (bad first line)")
    if header.get("version") != FORMAT_VERSION:
        raise ImportFormatError(f"unsupported export version {header.get('version')!r}")
    for number, line in enumerate(fp, start=2):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ImportFormatError(f"line {number} is not valid JSON: {exc}") from None
        if not isinstance(item, dict) or len(item) != 1:
            raise ImportFormatError(f"line {number} is not a session or message record")
        ((kind, row),) = item.items()
        expected = SESSION_FIELDS if kind == "session" else MESSAGE_FIELDS
        if kind not in ("session", "message") or not isinstance(row, dict):
            raise ImportFormatError(f"line {number}: unknown record kind {kind!r}")
        missing = [name for name in ("id",) if name not in row]
        unknown = set(row) - set(expected)
        if missing or unknown:
            raise ImportFormatError(
                f"line {number}: bad {kind} record (missing {missing}, unknown {sorted(unknown)})"
            )
        yield kind, {name: row.get(name, FIELD_DEFAULTS.get(name)) for name in expected}


def import_jsonl(
    store: Store,
    fp: IO[str],
    *,
    on_conflict: ConflictPolicy = "skip",
    progress: Progress | None = None,
) -> TransferResult:
    """Restore an export into ``store`` (empty or not) under the given conflict policy."""
    if on_conflict == "fail":
        start = fp.tell()
        ids = [row["id"] for kind, row in read_records(fp) if kind == "session"]
        clash = _existing_session_ids(store, ids)
        if clash:
            raise ImportConflictError(
                f"{len(clash)} session id(s) already exist in the target, e.g. "
                f"{sorted(clash)[0]!r}; nothing was imported (use --on-conflict skip)"
            )
        fp.seek(start)
    return write_records(store, read_records(fp), on_conflict=on_conflict, progress=progress)


def copy_store(
    source: Store, target: Store, *, progress: Progress | None = None
) -> TransferResult:
    """Copy every session and message from ``source`` into ``target``; safe to re-run."""
    result = write_records(target, iter_records(source), on_conflict="merge", progress=progress)
    expected_sessions = SessionRepository(source).session_count(include_archived=True)
    expected_messages = SessionRepository(source).message_count()
    present = _count_present(target, source)
    if present != (expected_sessions, expected_messages):
        raise SessionStoreError(
            f"copy incomplete: source has {expected_sessions} sessions/{expected_messages} "
            f"messages, target holds {present[0]}/{present[1]} of them"
        )
    return result


def _count_present(target: Store, source: Store) -> tuple[int, int]:
    session_total = 0
    message_total = 0
    with source.reading() as conn:
        ids = [row[0] for row in conn.execute(select(sessions.c.id))]
    for start in range(0, len(ids), BATCH_ROWS):
        chunk = ids[start : start + BATCH_ROWS]

        def count(conn: Connection, chunk: list[str] = chunk) -> tuple[int, int]:
            s = conn.execute(select(sessions.c.id).where(sessions.c.id.in_(chunk))).all()
            m = conn.execute(
                select(messages.c.id).where(messages.c.session_id.in_(chunk))
            ).all()
            return len(s), len(m)

        found = target.read(count)
        session_total += found[0]
        message_total += found[1]
    return session_total, message_total


def _scalars(store: Store, statement: Select[Any]) -> list[Any]:
    return store.read(lambda conn: [row[0] for row in conn.execute(statement)])


def _existing_session_ids(store: Store, ids: list[str]) -> set[str]:
    found: set[str] = set()
    for start in range(0, len(ids), BATCH_ROWS):
        statement = select(sessions.c.id).where(sessions.c.id.in_(ids[start : start + BATCH_ROWS]))
        found.update(_scalars(store, statement))
    return found


@dataclass
class _Position:
    """Which session the next message records belong to, carried across batches."""

    session_id: str | None = None
    skipping: bool = False


def write_records(
    store: Store,
    records: Iterable[Record],
    *,
    on_conflict: ConflictPolicy,
    progress: Progress | None = None,
) -> TransferResult:
    result = TransferResult()
    pending_parents: dict[str, str] = {}
    position = _Position()
    batch: list[Record] = []
    # Messages whose id another session already uses in the target get fresh ids, but only
    # after every explicit id is in: a generated id must not take one a later batch needs.
    # They wait in a temporary file, so memory stays bounded however many there are.
    with tempfile.TemporaryFile("w+", encoding="utf-8") as renumbered:
        for kind, row in records:
            batch.append((kind, row))
            if kind == "session" and progress is not None:
                progress(1)
            if len(batch) >= BATCH_ROWS:
                position = _flush(
                    store, batch, on_conflict, result, pending_parents, position, renumbered
                )
                batch = []
        if batch:
            _flush(store, batch, on_conflict, result, pending_parents, position, renumbered)
        store.write(store.dialect.reset_sequences)
        _insert_renumbered(store, renumbered)
    _resolve_parents(store, pending_parents, result)
    store.write(store.dialect.reset_sequences)
    return result


def _insert_renumbered(store: Store, spool: IO[str]) -> None:
    spool.seek(0)
    chunk: list[dict[str, Any]] = []
    for line in itertools.chain(spool, [None]):
        if line is not None:
            chunk.append(json.loads(line))
        if chunk and (line is None or len(chunk) >= BATCH_ROWS):
            _insert_rows(store, chunk)
            chunk = []


def _insert_rows(store: Store, rows: list[dict[str, Any]]) -> None:
    def run(conn: Connection) -> None:
        conn.execute(messages.insert(), rows)

    store.write(run)


def _flush(
    store: Store,
    batch: list[Record],
    on_conflict: ConflictPolicy,
    result: TransferResult,
    pending_parents: dict[str, str],
    start: _Position,
    renumbered: IO[str],
) -> _Position:
    """Write one batch in one transaction; returns where the next batch continues."""

    def run(
        conn: Connection,
    ) -> tuple[TransferResult, dict[str, str], _Position, list[dict[str, Any]]]:
        local = TransferResult()
        parents: dict[str, str] = {}
        position = _Position(start.session_id, start.skipping)
        session_ids = [row["id"] for kind, row in batch if kind == "session"]
        existing = {
            row[0]
            for row in conn.execute(select(sessions.c.id).where(sessions.c.id.in_(session_ids)))
        }
        message_ids = [row["id"] for kind, row in batch if kind == "message"]
        taken = {
            int(row[0]): row[1]
            for row in conn.execute(
                select(messages.c.id, messages.c.session_id).where(messages.c.id.in_(message_ids))
            )
        }
        message_rows: list[dict[str, Any]] = []
        deferred: list[dict[str, Any]] = []
        for kind, row in batch:
            if kind == "session":
                position = _Position(row["id"], False)
                if row["id"] in existing:
                    if on_conflict == "fail":
                        raise ImportConflictError(f"session {row['id']!r} already exists")
                    if on_conflict == "skip":
                        position.skipping = True
                        local.skipped_sessions += 1
                    continue
                values = dict(row)
                parent = values.get("parent_session_id")
                if parent is not None and not _session_exists(conn, parent):
                    parents[values["id"]] = parent
                    values["parent_session_id"] = None
                conn.execute(sessions.insert(), values)
                local.sessions += 1
                continue
            if position.skipping or position.session_id is None:
                continue
            values = dict(row)
            values["session_id"] = position.session_id
            owner = taken.get(int(values["id"]))
            if owner == position.session_id:
                continue
            if owner is not None:
                values.pop("id")
                if _already_copied(conn, values):
                    continue
                deferred.append(values)
                local.renumbered_messages += 1
            else:
                message_rows.append(values)
            local.messages += 1
        if message_rows:
            conn.execute(messages.insert(), message_rows)
        return local, parents, position, deferred

    local, parents, position, deferred = store.write(run)
    for values in deferred:
        renumbered.write(json.dumps(values, ensure_ascii=False) + "\n")
    result.sessions += local.sessions
    result.messages += local.messages
    result.skipped_sessions += local.skipped_sessions
    result.renumbered_messages += local.renumbered_messages
    pending_parents.update(parents)
    return position


def _already_copied(conn: Connection, values: dict[str, Any]) -> bool:
    """A renumbered message a previous (interrupted) run already wrote, found by its content."""
    statement = select(messages.c.id).where(
        messages.c.session_id == values["session_id"],
        messages.c.timestamp == values["timestamp"],
        messages.c.role == values["role"],
        messages.c.content.is_(None)
        if values["content"] is None
        else messages.c.content == values["content"],
    )
    return conn.execute(statement.limit(1)).first() is not None


def _session_exists(conn: Connection, session_id: str) -> bool:
    statement = select(sessions.c.id).where(sessions.c.id == session_id)
    return conn.execute(statement).first() is not None


def _resolve_parents(store: Store, pending: dict[str, str], result: TransferResult) -> None:
    if not pending:
        return

    def run(conn: Connection) -> list[str]:
        orphaned = []
        for child, parent in pending.items():
            if _session_exists(conn, parent):
                conn.execute(
                    update(sessions).where(sessions.c.id == child).values(parent_session_id=parent)
                )
            else:
                orphaned.append(child)
        return orphaned

    result.orphaned_parents.extend(store.write(run))
