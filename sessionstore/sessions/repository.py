"""Typed operations on sessions and messages: every behaviour of the Hermes store, in Core SQL.

The repository builds statements and runs them through ``Store.write`` / ``Store.read``; it holds
no engine state of its own. Values are validated and JSON is encoded *before* a write
transaction starts, so the write lock is held only for the statements themselves.
"""

from __future__ import annotations

import functools
import logging
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import starmap
from typing import TYPE_CHECKING, Any, NamedTuple

from sqlalchemy import (
    ColumnElement,
    Select,
    and_,
    bindparam,
    case,
    column,
    delete,
    func,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.engine import Connection, Row
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql.elements import TextClause

from ..dialects import json_list
from ..errors import (
    ConstraintViolationError,
    TitleInUseError,
    UnknownSessionError,
    ValueOutOfRangeError,
)
from ..search.sanitize import escape_like
from ..sql import validation
from ..sql.codec import count_tool_calls, decode_json, encode_json
from ..sql.codec import decode_json_object as _json_object
from ..sql.message_content import encode_content
from ..sql.records import (
    CONVERSATION_FIELDS,
    MESSAGE_FIELDS,
    SESSION_FIELDS,
    ConversationRow,
    MessageRecord,
    SessionListing,
    SessionRecord,
)
from ..sql.statements import HotReads, HotWrites, plain_select
from ..sql.tables import messages_table as messages
from ..sql.tables import sessions_table as sessions
from ..sql.validation import bindable
from ..storage.store import Store
from . import titles

if TYPE_CHECKING:
    from ..search import SearchHit

logger = logging.getLogger(__name__)

COMPRESSION_END_REASON = "compression"
MAX_LINEAGE_DEPTH = 100
PREVIEW_LENGTH = 60
SECONDS_PER_DAY = 86_400
SHORT_ID_LENGTH = 8
GHOST_SOURCE = "tui"
GHOST_AGE_S = 24 * 3600.0


_NEW_MESSAGE_TEXT_FIELDS = ("content", "tool_name", "tool_call_id", "finish_reason", "reasoning")
_NEW_MESSAGE_JSON_FIELDS = ("tool_calls", "reasoning_details", "codex_reasoning_items")


@dataclass(frozen=True, slots=True)
class NewMessage:
    """One message ready to insert, JSON encoded.

    Build it with :meth:`SessionRepository.prepare_message` (which also validates the text),
    or directly: ``tool_calls``, ``reasoning_details`` and ``codex_reasoning_items`` may be
    given as Python values (a list of tool-call dicts, say) and are encoded here, and
    ``tool_call_total`` then defaults to the number of tool calls. A value of the wrong type
    is a ``TypeError`` naming the field.
    """

    role: str
    content: str | None = None
    tool_name: str | None = None
    tool_calls: str | None = None
    tool_call_id: str | None = None
    token_count: int | None = None
    finish_reason: str | None = None
    reasoning: str | None = None
    reasoning_details: str | None = None
    codex_reasoning_items: str | None = None
    reasoning_content: str | None = None
    codex_message_items: str | None = None
    platform_message_id: str | None = None
    observed: int = 0
    timestamp: float | None = None
    tool_call_total: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.role, str):
            raise TypeError(f"NewMessage.role must be str, not {type(self.role).__name__}")
        for name in _NEW_MESSAGE_TEXT_FIELDS:
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise TypeError(
                    f"NewMessage.{name} must be str or None, not {type(value).__name__}"
                )
        for name in _NEW_MESSAGE_JSON_FIELDS:
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                if name == "tool_calls" and self.tool_call_total == 0:
                    object.__setattr__(self, "tool_call_total", count_tool_calls(value))
                object.__setattr__(self, name, encode_json(value, name))
        if self.token_count is not None and (
            isinstance(self.token_count, bool) or not isinstance(self.token_count, int)
        ):
            raise TypeError(
                f"NewMessage.token_count must be int or None, not {type(self.token_count).__name__}"
            )
        if isinstance(self.tool_call_total, bool) or not isinstance(self.tool_call_total, int):
            raise TypeError("NewMessage.tool_call_total must be int")


class Deletion(NamedTuple):
    """What a delete removed: ``total`` as the method reports it, ``removed`` every session
    that went (delegate children a delete took along included)."""

    total: int
    removed: tuple[str, ...]


class SessionRepository:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._nul_allowed = store.dialect.stores_nul_in_text
        self._hot_writes = HotWrites(
            store.engine.dialect, batch_returning=store.dialect.batch_returning_inserts
        )
        # Built on first use: a short-lived program (a hook, a CLI call) opens the store for
        # one call, and building every statement at open showed in its start-up.
        dialect = store.engine.dialect
        self._load_session = HotReads.built_later(dialect, _session_by_id)
        self._load_messages = HotReads.built_later(dialect, _messages_of_session)
        self._load_live_messages = HotReads.built_later(
            dialect, lambda: _messages_of_session(live_only=True)
        )
        self._load_conversation = HotReads.built_later(dialect, _conversation_of_session)
        self._load_live_conversation = HotReads.built_later(
            dialect, lambda: _conversation_of_session(live_only=True)
        )
        self._hot_listings: dict[Select[Any], HotReads] = {}
        # A page's compression roots and their tips, on the driver cursor too: the list is one
        # JSON parameter, where an expanding IN would be compiled again on every call.
        roots_sql = store.dialect.json_list_sql("roots")
        self._load_tip_listings = HotReads.built_later(
            dialect, lambda: _tip_listings_statement(roots_sql)
        )

    def _hot_listing(self, statement: Select[Any]) -> HotReads:
        hot = self._hot_listings.get(statement)
        if hot is None:
            hot = self._hot_listings[statement] = HotReads(self.store.engine.dialect, statement)
        return hot

    # -- validation helpers -------------------------------------------------------------
    def _integrity_error(
        self, exc: IntegrityError, missing_session: str, doing: str
    ) -> Exception:
        """The typed error for a constraint a write broke: a foreign key here always means a
        session that does not exist; anything else is said as what it is."""
        violation = self.store.dialect.integrity_violation(exc)
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

    def _text(self, value: Any, name: str) -> str | None:
        return validation.free_text(value, name, nul_allowed=self._nul_allowed)

    def prepare_message(
        self,
        role: Any,
        content: Any = None,
        *,
        tool_name: Any = None,
        tool_calls: Any = None,
        tool_call_id: Any = None,
        token_count: Any = None,
        finish_reason: Any = None,
        reasoning: Any = None,
        reasoning_details: Any = None,
        codex_reasoning_items: Any = None,
        reasoning_content: Any = None,
        codex_message_items: Any = None,
        platform_message_id: Any = None,
        observed: Any = False,
        timestamp: Any = None,
    ) -> NewMessage:
        if isinstance(content, (bytes, int, float)):
            content = encode_json(content, "content")
        elif content is not None and not isinstance(content, str):
            # OpenAI multi-part content (a list of parts): marked JSON text, as Hermes keeps it.
            content = encode_content(content)
        return NewMessage(
            role=validation.identifier(role, "role"),
            content=self._text(content, "content"),
            tool_name=validation.optional_identifier(tool_name, "tool_name"),
            tool_calls=self._text(encode_json(tool_calls, "tool_calls"), "tool_calls"),
            tool_call_id=validation.optional_identifier(tool_call_id, "tool_call_id"),
            token_count=None
            if token_count is None
            else validation.counter(token_count, "token_count"),
            finish_reason=validation.optional_identifier(finish_reason, "finish_reason"),
            reasoning=self._text(reasoning, "reasoning"),
            reasoning_details=self._text(
                encode_json(reasoning_details, "reasoning_details"), "reasoning_details"
            ),
            codex_reasoning_items=self._text(
                encode_json(codex_reasoning_items, "codex_reasoning_items"),
                "codex_reasoning_items",
            ),
            reasoning_content=self._text(reasoning_content, "reasoning_content"),
            codex_message_items=self._text(
                encode_json(codex_message_items, "codex_message_items"), "codex_message_items"
            ),
            platform_message_id=validation.optional_identifier(
                None if platform_message_id is None else str(platform_message_id),
                "platform_message_id",
            ),
            observed=1 if observed else 0,
            timestamp=None
            if timestamp is None
            else validation.optional_number(timestamp, "timestamp"),
            tool_call_total=count_tool_calls(tool_calls),
        )

    # -- lifecycle ------------------------------------------------------------------------
    def create_session(
        self,
        session_id: str,
        source: str,
        *,
        model: str | None = None,
        model_config: Any = None,
        system_prompt: str | None = None,
        user_id: str | None = None,
        parent_session_id: str | None = None,
        started_at: float | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> str:
        """Insert the session if it is new. ``extra`` holds later-Hermes columns (gateway
        peer, cwd and git). On an existing session the model, model_config, system prompt,
        parent and those columns fill only what is still NULL (never source or user_id), as
        Hermes 0.18's session upsert does: a gateway's bare row gets the agent's model later."""
        filled = self._extra_session_values(extra)
        values = {
            "id": validation.identifier(session_id, "session_id"),
            "source": validation.identifier(source, "source"),
            "user_id": validation.optional_identifier(user_id, "user_id"),
            "model": validation.optional_identifier(model, "model"),
            "model_config": self._text(encode_json(model_config, "model_config"), "model_config"),
            "system_prompt": self._text(system_prompt, "system_prompt"),
            "parent_session_id": validation.optional_identifier(
                parent_session_id, "parent_session_id"
            ),
            "started_at": time.time()
            if started_at is None
            else validation.number(started_at, "started_at"),
            **filled,
        }
        fills = {
            **{name: values[name] for name in _FILLED_ON_CONFLICT if values[name] is not None},
            **filled,
        }
        # preserve_rowcount: psycopg reports -1 for an INSERT otherwise, and the fill of an
        # existing session below would never run on PostgreSQL.
        statement = (
            self.store.dialect.insert(sessions).values(values).on_conflict_do_nothing()
            .execution_options(preserve_rowcount=True)
        )
        try:
            # Idempotent (ON CONFLICT DO NOTHING, then COALESCE fills): after a lost COMMIT it
            # is simply run again.
            self.store.write(
                lambda conn: self._insert_or_fill(conn, statement, values["id"], fills),
                recover=_run_again,
            )
        except IntegrityError as exc:
            raise self._integrity_error(
                exc, f"parent session {parent_session_id!r} does not exist",
                f"creating session {session_id!r}",
            ) from exc
        return session_id

    def ensure_session(self, session_id: str, source: str = "unknown",
                       model: str | None = None,
                       extra: Mapping[str, Any] | None = None) -> str:
        """:meth:`create_session` with Hermes's defaults: every keyword ``create_session``
        takes is taken here too (``extra`` holds them), as in Hermes 0.18."""
        rest = dict(extra or {})
        base = {name: rest.pop(name) for name in _BASE_SESSION_KEYWORDS if name in rest}
        return self.create_session(session_id, source, model=model, **base, extra=rest)

    def _extra_session_values(self, extra: Mapping[str, Any] | None) -> dict[str, Any]:
        if not extra:
            return {}
        unknown = sorted(set(extra) - set(EXTRA_SESSION_COLUMNS))
        if unknown:
            raise TypeError(f"unknown session column(s): {', '.join(unknown)}")
        return {
            name: self._text(None if value is None else str(value), name)
            for name, value in extra.items()
            if value is not None and value != ""
        }

    @staticmethod
    def _insert_or_fill(conn: Connection, statement: Any, session_id: str,
                        filled: Mapping[str, Any]) -> None:
        inserted = conn.execute(statement).rowcount
        if filled and not inserted:
            conn.execute(
                update(sessions)
                .where(sessions.c.id == session_id)
                .values({name: func.coalesce(sessions.c[name], value)
                         for name, value in filled.items()})
            )

    def _update_session(self, session_id: str, values: dict[str, Any], *conditions: Any) -> bool:
        """Set ``values`` on one session (where ``conditions`` hold); True when a row changed."""
        statement = (
            update(sessions)
            .where(sessions.c.id == validation.identifier(session_id, "session_id"), *conditions)
            .values(values)
        )
        return self.store.write(lambda conn: conn.execute(statement).rowcount > 0)

    def end_session(self, session_id: str, end_reason: str | None) -> bool:
        """End a live session; the first end reason wins (a compression split stays one)."""
        return self._update_session(
            session_id,
            {"ended_at": time.time(), "end_reason": self._text(end_reason, "end_reason")},
            sessions.c.ended_at.is_(None),
        )

    def reopen_session(self, session_id: str) -> bool:
        return self._update_session(session_id, {"ended_at": None, "end_reason": None})

    def update_system_prompt(self, session_id: str, system_prompt: str | None) -> bool:
        return self._update_session(
            session_id, {"system_prompt": self._text(system_prompt, "system_prompt")}
        )

    def update_token_counts(
        self,
        session_id: str,
        *,
        input_tokens: int = 0,
        output_tokens: int = 0,
        model: str | None = None,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        reasoning_tokens: int = 0,
        estimated_cost_usd: float | None = None,
        actual_cost_usd: float | None = None,
        cost_status: str | None = None,
        cost_source: str | None = None,
        pricing_version: str | None = None,
        billing_provider: str | None = None,
        billing_base_url: str | None = None,
        billing_mode: str | None = None,
        absolute: bool = False,
        api_call_count: int = 0,
    ) -> bool:
        """Add token deltas (default) or set the totals (``absolute=True``).

        Costs: incrementally the estimate adds to 0 when it was NULL, and the actual cost only
        changes when one is given; with ``absolute`` each cost is set when given, kept when not.
        cost_status/cost_source/pricing_version take a new value when given; billing provider,
        base URL, mode and the model are set once (the first value sticks).
        """
        tokens = {
            "input_tokens": validation.counter(input_tokens, "input_tokens"),
            "output_tokens": validation.counter(output_tokens, "output_tokens"),
            "cache_read_tokens": validation.counter(cache_read_tokens, "cache_read_tokens"),
            "cache_write_tokens": validation.counter(cache_write_tokens, "cache_write_tokens"),
            "reasoning_tokens": validation.counter(reasoning_tokens, "reasoning_tokens"),
            "api_call_count": validation.counter(api_call_count, "api_call_count"),
        }
        estimated = validation.optional_number(estimated_cost_usd, "estimated_cost_usd")
        actual = validation.optional_number(actual_cost_usd, "actual_cost_usd")
        values: dict[str, Any] = {}
        # Each addition is checked against its column's range inside the UPDATE itself (so in
        # the write transaction, against the value it adds to): SQLite would otherwise turn an
        # integer total past 2**63 into a REAL, and a float total past its range into inf.
        guards: list[ColumnElement[bool]] = []
        for name, amount in tokens.items():
            column = sessions.c[name]
            if absolute:
                values[name] = amount
                continue
            values[name] = func.coalesce(column, 0) + amount
            guards.extend(_addition_guard(column, amount, validation.INT64_MIN,
                                          validation.INT64_MAX))
        if absolute:
            if estimated is not None:
                values["estimated_cost_usd"] = estimated
            if actual is not None:
                values["actual_cost_usd"] = actual
        else:
            values["estimated_cost_usd"] = func.coalesce(sessions.c.estimated_cost_usd, 0.0) + (
                estimated or 0.0
            )
            guards.extend(_addition_guard(sessions.c.estimated_cost_usd, estimated or 0.0,
                                          -sys.float_info.max, sys.float_info.max))
            if actual is not None:
                values["actual_cost_usd"] = func.coalesce(sessions.c.actual_cost_usd, 0.0) + actual
                guards.extend(_addition_guard(sessions.c.actual_cost_usd, actual,
                                              -sys.float_info.max, sys.float_info.max))
        for name, value in (
            ("cost_status", cost_status),
            ("cost_source", cost_source),
            ("pricing_version", pricing_version),
        ):
            if value is not None:
                values[name] = validation.identifier(value, name)
        for name, value in (
            ("billing_provider", billing_provider),
            ("billing_base_url", billing_base_url),
            ("billing_mode", billing_mode),
            ("model", model),
        ):
            if value is not None:
                values[name] = func.coalesce(sessions.c[name], validation.identifier(value, name))
        session_id = validation.identifier(session_id, "session_id")
        statement = update(sessions).where(sessions.c.id == session_id, *guards).values(values)

        def run(conn: Connection) -> bool:
            if conn.execute(statement).rowcount > 0:
                return True
            if guards and _session_exists(conn, session_id):
                raise ValueOutOfRangeError(
                    f"session {session_id!r}: adding these amounts would take a total past "
                    "what its column holds (64-bit integers, finite floats); nothing was written"
                )
            return False

        return self.store.write(run)

    # -- reading sessions -----------------------------------------------------------------
    def get_session(self, session_id: str) -> SessionRecord | None:
        if not isinstance(session_id, str) or not bindable(session_id):
            return None
        rows = self.store.read(
            lambda conn: self._load_session.rows(conn, {"id": session_id}),
            single_statement=True,
        )
        return SessionRecord._make(rows[0]) if rows else None

    def resolve_session_id(self, id_or_prefix: str) -> str | None:
        """Exact id, else the one session whose id starts with the text, else None."""
        if not isinstance(id_or_prefix, str) or not id_or_prefix or not bindable(id_or_prefix):
            return None

        def run(conn: Connection) -> str | None:
            exact = conn.execute(select(sessions.c.id).where(sessions.c.id == id_or_prefix))
            found = exact.scalar()
            if found is not None:
                return str(found)
            pattern = escape_like(id_or_prefix) + "%"
            rows = conn.execute(
                select(sessions.c.id)
                .where(sessions.c.id.like(pattern, escape="\\"))
                .order_by(sessions.c.started_at.desc())
                .limit(2)
            ).all()
            return str(rows[0][0]) if len(rows) == 1 else None

        return self.store.read(run)

    def session_ids_with_prefix(self, prefix: str, limit: int) -> list[str]:
        """Ids that start with ``prefix``, newest session first (at most ``limit``)."""
        if not isinstance(prefix, str) or not prefix or not bindable(prefix):
            return []
        statement = (
            select(sessions.c.id)
            .where(sessions.c.id.like(escape_like(prefix) + "%", escape="\\"))
            .order_by(sessions.c.started_at.desc())
            .limit(max(int(limit), 0))
        )
        return self.store.read(lambda conn: [str(row[0]) for row in conn.execute(statement)])

    def short_ids(self, ids: Sequence[str], min_length: int = SHORT_ID_LENGTH) -> dict[str, str]:
        """The shortest prefix (at least ``min_length`` characters) naming each id uniquely."""
        if not ids:
            return {}
        heads = sorted({session_id[:min_length] for session_id in ids})
        statement = select(sessions.c.id).where(
            func.substr(sessions.c.id, 1, min_length).in_(heads)
        )
        neighbours = self.store.read(lambda conn: [str(row[0]) for row in conn.execute(statement)])
        shortest: dict[str, str] = {}
        for session_id in ids:
            length = min_length
            for other in neighbours:
                if other != session_id:
                    length = max(length, _common_prefix_length(session_id, other) + 1)
            shortest[session_id] = session_id[:length]
        return shortest

    def session_count(
        self,
        source: str | None = None,
        *,
        include_archived: bool = False,
        archived_only: bool = False,
        exclude_children: bool = False,
        exclude_sources: Sequence[str] | None = None,
        cwd_prefix: str | None = None,
        min_message_count: int = 0,
    ) -> int:
        """How many sessions; archived ones only when asked (as Hermes's ``session_count``).

        ``exclude_children`` counts what a picker lists (roots and branch children, no
        subagent runs); ``cwd_prefix`` keeps sessions whose ``cwd`` starts with it;
        ``min_message_count`` (when positive) those with at least that many messages, as
        :meth:`list_sessions_rich` does.
        """
        threshold = message_threshold(min_message_count)
        if source == "":
            source = None  # as Hermes: an empty source is no filter
        if source is not None and not _matchable(source):
            return 0
        statement = select(func.count()).select_from(sessions)
        if threshold is not None:
            if threshold > validation.INT64_MAX:
                return 0  # past every 64-bit counter
            statement = statement.where(sessions.c.message_count >= threshold)
        for condition in _session_filters(
            source=source,
            exclude_sources=exclude_sources,
            include_archived=include_archived,
            archived_only=archived_only,
            cwd_prefix=cwd_prefix,
        ):
            statement = statement.where(condition)
        if exclude_children:
            statement = statement.where(listable_condition())
        return int(self.store.read(lambda conn: conn.execute(statement).scalar_one()))

    def message_count(self, session_id: str | None = None) -> int:
        """Messages of one session, or of all (``None``, or as Hermes an empty id)."""
        statement = select(func.count()).select_from(messages)
        if session_id is not None and session_id != "":
            if not _matchable(session_id):
                return 0
            statement = statement.where(messages.c.session_id == session_id)
        return int(self.store.read(lambda conn: conn.execute(statement).scalar_one()))

    def search_sessions(
        self, source: str | None = None, limit: int = 20, offset: int = 0
    ) -> list[SessionRecord]:
        statement = (
            select(*_session_columns())
            .order_by(sessions.c.started_at.desc(), sessions.c.id)
            .limit(row_count(limit, "limit"))
            .offset(row_count(offset, "offset"))
        )
        if source is not None:
            if not _matchable(source):
                return []
            statement = statement.where(sessions.c.source == source)
        return self.store.read(
            lambda conn: [SessionRecord(*row) for row in conn.execute(statement)]
        )

    def iter_sessions(self, conn: Connection, source: str | None = None) -> Iterator[SessionRecord]:
        """Stream every session, oldest first (parents before children), for export."""
        statement = select(*_session_columns()).order_by(sessions.c.started_at, sessions.c.id)
        if source is not None:
            statement = statement.where(sessions.c.source == source)
        for row in conn.execution_options(yield_per=500).execute(statement):
            yield SessionRecord(*row)

    def iter_messages(self, conn: Connection, session_id: str) -> Iterator[MessageRecord]:
        streaming = conn.execution_options(yield_per=1000)
        for row in streaming.execute(_messages_of_session(), {"session_id": session_id}):
            yield MessageRecord(*row)

    # -- titles ---------------------------------------------------------------------------
    def set_session_title(self, session_id: str, title: str | None) -> bool:
        """Set (or clear, with None/blank) a title; True if the session exists."""
        clean = titles.sanitize_title(title)
        session_id = validation.identifier(session_id, "session_id")

        def run(conn: Connection) -> bool:
            if clean is not None:
                holder = conn.execute(
                    select(sessions.c.id).where(sessions.c.title == clean)
                ).scalar()
                if holder is not None and holder != session_id:
                    # Hermes's exact words: users see them in `sessions rename` and `/title`.
                    raise TitleInUseError(
                        f"Title '{clean}' is already in use by session {holder}"
                    )
            result = conn.execute(
                update(sessions).where(sessions.c.id == session_id).values(title=clean)
            )
            return result.rowcount > 0

        try:
            return self.store.write(run)
        except IntegrityError as exc:
            # Lost a race for the same title: the unique index decided.
            raise TitleInUseError(
                f"Title '{clean}' is already in use by another session"
            ) from exc

    def get_session_title(self, session_id: str) -> str | None:
        if not isinstance(session_id, str) or not bindable(session_id):
            return None
        statement = select(sessions.c.title).where(sessions.c.id == session_id)
        return self.store.read(lambda conn: conn.execute(statement).scalar())

    def get_session_by_title(self, title: str) -> SessionRecord | None:
        if not isinstance(title, str) or not bindable(title):
            return None
        statement = select(*_session_columns()).where(sessions.c.title == title)
        return self.store.read(lambda conn: _one_session(conn.execute(statement).first()))

    def resolve_session_by_title(self, title: str) -> str | None:
        """The newest numbered variant ("title #N") if any, else the exact title's session."""
        if not isinstance(title, str) or not title or not bindable(title):
            return None
        def run(conn: Connection) -> str | None:
            rows = conn.execute(
                select(sessions.c.id, sessions.c.title)
                .where(sessions.c.title.like(titles.lineage_like_pattern(title), escape="\\"))
                .order_by(sessions.c.started_at.desc())
            ).all()
            for session_id, candidate in rows:
                candidate_base, number = titles.split_lineage(candidate)
                if number is not None and candidate_base == title:
                    return str(session_id)
            exact = conn.execute(select(sessions.c.id).where(sessions.c.title == title)).scalar()
            return None if exact is None else str(exact)

        return self.store.read(run)

    def titles_ignoring_case(self, title: str) -> list[str]:
        """The lineage base titles ("name" for "name #3") equal to ``title`` but for case."""
        if not isinstance(title, str) or not title.strip() or not bindable(title):
            return []
        wanted = title.casefold()
        statement = select(sessions.c.title).where(sessions.c.title.is_not(None))
        if title.isascii():
            # SQLite's lower() and LIKE fold ASCII only: narrow in SQL, decide in Python.
            statement = statement.where(
                func.lower(sessions.c.title).like(escape_like(title.lower()) + "%", escape="\\")
            )
        found: set[str] = set()
        for (candidate,) in self.store.read(lambda conn: conn.execute(statement).all()):
            base, _ = titles.split_lineage(str(candidate))
            if base.casefold() == wanted:
                found.add(base)
            elif str(candidate).casefold() == wanted:
                found.add(str(candidate))  # "Name #2" asked for as "name #2"
        return sorted(found)

    def get_next_title_in_lineage(self, base_title: str) -> str:
        base, _ = titles.split_lineage(validation.identifier(base_title, "base_title"))
        statement = select(sessions.c.title).where(
            or_(
                sessions.c.title == base,
                sessions.c.title.like(titles.lineage_like_pattern(base), escape="\\"),
            )
        )
        existing = self.store.read(lambda conn: [row[0] for row in conn.execute(statement)])
        return titles.next_title_in_lineage(base_title, existing)

    # -- lineage --------------------------------------------------------------------------
    def compression_ancestors(self, session_id: str) -> list[str]:
        """The sessions this one continues after compression, oldest first."""
        if not isinstance(session_id, str) or not bindable(session_id):
            return []

        def run(conn: Connection) -> list[str]:
            chain: list[str] = []
            current = session_id
            for _ in range(MAX_LINEAGE_DEPTH):
                parent = conn.execute(
                    select(sessions.c.parent_session_id).where(sessions.c.id == current)
                ).scalar()
                if parent is None or parent in chain or parent == session_id:
                    break
                reason = conn.execute(
                    select(sessions.c.end_reason).where(sessions.c.id == parent)
                ).scalar()
                if reason != COMPRESSION_END_REASON:
                    break
                chain.append(str(parent))
                current = str(parent)
            return list(reversed(chain))

        return self.store.read(run)

    def set_session_archived(self, session_id: str, archived: bool = True) -> bool:
        """Archive (or unarchive) a session with its whole compression lineage: every session
        reachable through a parent that ended ``'compression'``, up and down. False when the
        session does not exist."""
        if not isinstance(session_id, str) or not bindable(session_id):
            return False
        flag = 1 if archived else 0

        def run(conn: Connection) -> bool:
            lineage = _compression_lineage(conn, session_id)
            if not lineage:
                return False
            conn.execute(
                update(sessions).where(sessions.c.id.in_(sorted(lineage))).values(archived=flag)
            )
            return True

        return self.store.write(run)

    # -- working directory and git ----------------------------------------------------------
    def update_session_cwd(
        self,
        session_id: str,
        cwd: str | None,
        git_branch: str | None = None,
        git_repo_root: str | None = None,
    ) -> bool:
        """Record where a session runs; git values are written only when non-empty."""
        values: dict[str, Any] = {"cwd": self._text(cwd, "cwd")}
        for name, value in (("git_branch", git_branch), ("git_repo_root", git_repo_root)):
            if value:
                values[name] = self._text(value, name)
        return self._update_session(session_id, values)

    def backfill_repo_roots(self, roots: Mapping[str, str]) -> int:
        """Fill ``git_repo_root`` from ``{cwd: root}`` where it is still empty; rows changed."""
        pairs = [
            (validation.identifier(cwd, "cwd"), validation.identifier(root, "git_repo_root"))
            for cwd, root in roots.items()
            if root
        ]

        def run(conn: Connection) -> int:
            changed = 0
            for cwd, root in pairs:
                changed += conn.execute(
                    update(sessions)
                    .where(
                        sessions.c.cwd == cwd,
                        or_(sessions.c.git_repo_root.is_(None), sessions.c.git_repo_root == ""),
                    )
                    .values(git_repo_root=root)
                ).rowcount
            return changed

        return self.store.write(run) if pairs else 0

    def distinct_session_cwds(self, include_archived: bool = False) -> list[dict[str, Any]]:
        """Every working directory sessions ran in, as Hermes 0.18 reports it for repository
        discovery: ``{"cwd", "sessions", "last_active"}`` (how many sessions, and the latest
        end or start among them), children included, blank ones left out, sorted by cwd."""
        statement = (
            select(
                sessions.c.cwd,
                func.count(),
                func.max(func.coalesce(sessions.c.ended_at, sessions.c.started_at, 0)),
            )
            .where(sessions.c.cwd.is_not(None), func.trim(sessions.c.cwd) != "")
            .group_by(sessions.c.cwd)
            .order_by(sessions.c.cwd)
        )
        if not include_archived:
            statement = statement.where(sessions.c.archived == 0)
        rows = self.store.read(lambda conn: conn.execute(statement).all())
        return [
            {"cwd": str(cwd), "sessions": int(count or 0), "last_active": float(latest or 0)}
            for cwd, count, latest in rows
        ]

    def has_platform_message_id(self, session_id: str, platform_message_id: str) -> bool:
        if not all(isinstance(v, str) and bindable(v)
                   for v in (session_id, platform_message_id)):
            return False
        statement = (
            select(messages.c.id)
            .where(
                messages.c.session_id == session_id,
                messages.c.platform_message_id == platform_message_id,
            )
            .limit(1)
        )
        return self.store.read(lambda conn: conn.execute(statement).first() is not None)

    def get_compression_tip(self, session_id: str) -> str | None:
        """Follow compression continuations to the newest one (bounded walk); None if unknown."""
        if not isinstance(session_id, str) or not bindable(session_id):
            return None
        return self.store.read(lambda conn: _compression_tip(conn, session_id))

    def list_sessions_rich(
        self,
        source: str | None = None,
        exclude_sources: Sequence[str] | None = None,
        limit: int = 20,
        offset: int = 0,
        include_children: bool = False,
        project_compression_tips: bool = True,
        *,
        include_archived: bool = False,
        archived_only: bool = False,
        cwd_prefix: str | None = None,
        min_message_count: int = 0,
        order_by_last_active: bool = False,
        id_query: str | None = None,
    ) -> list[SessionListing]:
        """Sessions newest first, as a picker shows them.

        Listed by default: roots and branch children (``_branched_from`` set, or started after
        a parent that ended ``'branched'``), never a delegate (subagent) run
        (``_delegate_from`` set) and never an archived session; ``include_children`` lists
        every session. ``archived_only`` lists the archived ones alone. With
        ``project_compression_tips`` a compression root is shown as its newest continuation
        (:data:`PROJECTED_FIELDS`), keeping its own ``started_at``, with ``lineage_root_id``.

        As Hermes 0.18: a positive ``min_message_count`` lists only sessions with at least that
        many messages (an int; ``TypeError`` otherwise). ``order_by_last_active`` orders by
        the latest activity anywhere in a session's forward compression chain (see
        :func:`_activity_listing_statement`): a compressed conversation continued today comes
        first though its root is old; ``limit`` and ``offset`` count in that order. On that
        path alone (Hermes ignores it on the other) ``id_query`` keeps the rows whose id, or
        the id of any session in their chain, contains it: stripped, lower-cased, matched
        without wildcards, ASCII letters in any case (SQLite's ``lower()``, which Hermes
        uses). Hermes 0.18 has no ``search_query``, so neither does this.
        """
        rows = self._listing_rows(
            source, exclude_sources, limit, offset, include_children,
            project_compression_tips, include_archived, archived_only, cwd_prefix,
            min_message_count, order_by_last_active, id_query,
        )  # fmt: skip
        return [_listing(row, root) for row, root in rows]

    def list_sessions_rich_dicts(
        self,
        source: str | None = None,
        exclude_sources: Sequence[str] | None = None,
        limit: int = 20,
        offset: int = 0,
        include_children: bool = False,
        project_compression_tips: bool = True,
        *,
        include_archived: bool = False,
        archived_only: bool = False,
        cwd_prefix: str | None = None,
        min_message_count: int = 0,
        order_by_last_active: bool = False,
        id_query: str | None = None,
    ) -> list[dict[str, Any]]:
        """:meth:`list_sessions_rich` as Hermes's dicts (``SessionListing.to_dict``), built
        straight from the rows: a picker's page is 50 dicts of 43 keys, and going through the
        records first cost a fifth of the call."""
        rows = self._listing_rows(
            source, exclude_sources, limit, offset, include_children,
            project_compression_tips, include_archived, archived_only, cwd_prefix,
            min_message_count, order_by_last_active, id_query,
        )  # fmt: skip
        return [_listing_dict(row, root) for row, root in rows]

    def _listing_rows(
        self,
        source: str | None,
        exclude_sources: Sequence[str] | None,
        limit: int,
        offset: int,
        include_children: bool,
        project_compression_tips: bool,
        include_archived: bool,
        archived_only: bool,
        cwd_prefix: str | None,
        min_message_count: int = 0,
        order_by_last_active: bool = False,
        id_query: str | None = None,
    ) -> list[tuple[Sequence[Any], str | None]]:
        """The page's rich rows (compression roots already projected onto their tips), each
        with the id of the root it was projected from (None when it was not)."""
        if source == "":
            source = None  # as Hermes: an empty source is no filter
        if source is not None:
            source = validation.identifier(source, "source")
        excluded = [
            validation.identifier(item, "exclude_sources") for item in exclude_sources or ()
        ]
        prefix = validation.optional_identifier(cwd_prefix or None, "cwd_prefix")
        threshold = message_threshold(min_message_count)
        needle = id_needle(id_query)
        parameters: dict[str, Any] = {
            "source": source,
            "excluded": json_list(excluded),
            **dict(zip(_CWD_PARAMETERS, cwd_patterns(prefix) if prefix else (None,) * 4,
                       strict=True)),
            "min_messages": threshold,
            "id_needle": needle,
            "limit": row_count(limit, "limit"),
            "offset": row_count(offset, "offset"),
        }
        if threshold is not None and threshold > validation.INT64_MAX:
            return []  # past every 64-bit counter
        archive = "only" if archived_only else ("all" if include_archived else "hide")
        dialect = self.store.dialect
        shape: ListingShape = (
            source is not None,
            dialect.json_list_sql("excluded") if excluded else None,
            bool(include_children),
            archive,
            prefix is not None,
            threshold is not None,
        )
        if not order_by_last_active:
            # As Hermes: id_query only narrows the listing ordered by activity.
            statement = _listing_statement(shape)
        elif needle is not None and not bindable(needle):
            return []  # NUL or a lone surrogate: no stored id holds one
        else:
            statement = _activity_listing_statement(
                shape,
                None if needle is None
                else dialect.ascii_folded_contains_sql(f"{_MATCHED}.id", "id_needle"),
                dialect.bytewise_collation,
            )
        # The page is read on the driver cursor: the row is 41 columns wide since Hermes v17,
        # and SQLAlchemy's per-row processing showed.
        hot = self._hot_listing(statement)
        # As Hermes: with children listed, each continuation is its own row already, so
        # projecting a root onto its tip would show the tip twice and lose the root.
        project = project_compression_tips and not include_children

        def run(conn: Connection) -> list[tuple[Sequence[Any], str | None]]:
            rows = hot.rows(conn, parameters)
            roots = [row[0] for row in rows if row[_END_REASON_AT] == COMPRESSION_END_REASON]
            if not project or not roots:
                return [(row, None) for row in rows]
            tips = {
                tip[_ROOT_AT]: tip
                for tip in self._load_tip_listings.rows(conn, {"roots": json_list(roots)})
            }
            return [
                (row, None) if (tip := tips.get(row[0])) is None else (_project(row, tip), row[0])
                for row in rows
            ]

        # Each statement may read a newer commit than the page's (SQLite, outside a
        # transaction): a tip that appeared since is shown, one deleted since leaves its root
        # as it was listed. That is what a listing a moment later would show anyway.
        return self.store.read(run, single_statement=True)

    def count_listed_sessions(
        self,
        source: str | None = None,
        exclude_sources: Sequence[str] | None = None,
        include_children: bool = False,
        *,
        include_archived: bool = False,
        archived_only: bool = False,
        cwd_prefix: str | None = None,
        min_message_count: int = 0,
    ) -> int:
        """How many sessions ``list_sessions_rich`` pages through with these filters."""
        if source is not None:
            source = validation.identifier(source, "source")
        return self.session_count(
            source,
            include_archived=include_archived,
            archived_only=archived_only,
            exclude_children=not include_children,
            exclude_sources=exclude_sources,
            cwd_prefix=cwd_prefix,
            min_message_count=min_message_count,
        )

    # -- messages -------------------------------------------------------------------------
    def append_message(self, session_id: str, message: NewMessage) -> int:
        return self.append_messages(session_id, [message])[0]

    def append_messages(self, session_id: str, batch: Sequence[NewMessage]) -> list[int]:
        """Insert one turn's messages in one transaction and bump the counters once."""
        session_id = validation.identifier(session_id, "session_id")
        if not batch:
            return []
        now = time.time()
        rows = [
            {
                "session_id": session_id,
                "role": message.role,
                "content": message.content,
                "tool_call_id": message.tool_call_id,
                "tool_calls": message.tool_calls,
                "tool_name": message.tool_name,
                # Strictly increasing within a batch, so (timestamp, id) order is the turn order.
                "timestamp": now + index * 1e-6 if message.timestamp is None
                else message.timestamp,
                "token_count": message.token_count,
                "finish_reason": message.finish_reason,
                "reasoning": message.reasoning,
                "reasoning_details": message.reasoning_details,
                "codex_reasoning_items": message.codex_reasoning_items,
                "reasoning_content": message.reasoning_content,
                "codex_message_items": message.codex_message_items,
                "platform_message_id": message.platform_message_id,
                "observed": message.observed,
            }
            for index, message in enumerate(batch)
        ]
        tool_calls = sum(message.tool_call_total for message in batch)
        hot = self._hot_writes
        # A server: one message is one statement, one round trip (see HotWrites).
        one_statement = len(rows) == 1 and hot.appends_in_one_statement

        def not_written(conn: Connection) -> Exception:
            if _session_exists(conn, session_id):
                return ValueOutOfRangeError(
                    f"session {session_id!r}: its message or tool-call count would pass "
                    "2**63 - 1; nothing was written"
                )
            return UnknownSessionError(f"session {session_id!r} does not exist")

        def run(conn: Connection) -> list[int]:
            if one_statement:
                appended = hot.append_in_one_statement(conn, rows[0], tool_calls)
                if appended is None:
                    raise not_written(conn)
                return [appended]
            # Counters first: an unknown session is found without an FK error to decode.
            if not hot.bump_counters(conn, session_id, len(rows), tool_calls):
                raise not_written(conn)
            return hot.insert_messages(conn, rows)

        try:
            return self.store.write(
                run, recover=_appended_rows(session_id, rows), single_statement=one_statement
            )
        except IntegrityError as exc:
            raise self._integrity_error(
                exc, f"session {session_id!r} does not exist", f"appending to {session_id!r}"
            ) from exc

    def search_messages(
        self,
        query: str,
        *,
        source_filter: list[str] | None = None,
        exclude_sources: list[str] | None = None,
        role_filter: list[str] | None = None,
        limit: int = 20,
        offset: int = 0,
        include_inactive: bool = False,
        sort: str | None = None,
    ) -> list[SearchHit]:
        """Full-text search (see ``sessionstore.search``); any text returns a list."""
        from ..search import search_messages

        return self.store.read(
            lambda conn: search_messages(
                conn,
                query,
                source_filter=source_filter,
                exclude_sources=exclude_sources,
                role_filter=role_filter,
                limit=limit,
                offset=offset,
                include_inactive=include_inactive,
                sort=sort,
            )
        )

    def get_messages(
        self, session_id: str, include_inactive: bool = False
    ) -> list[MessageRecord]:
        """The session's messages in order; rewound and compaction-archived rows only with
        ``include_inactive``."""
        if not isinstance(session_id, str) or not bindable(session_id):
            return []
        load = self._load_messages if include_inactive else self._load_live_messages
        return self.store.read(
            lambda conn: list(
                starmap(MessageRecord, load.rows(conn, {"session_id": session_id}))
            ),
            single_statement=True,
        )

    def get_conversation(
        self, session_id: str, include_inactive: bool = False
    ) -> list[ConversationRow]:
        """Only the columns needed to replay a session to a model, in order (live rows only,
        unless ``include_inactive``)."""
        if not isinstance(session_id, str) or not bindable(session_id):
            return []
        load = self._load_conversation if include_inactive else self._load_live_conversation
        return self.store.read(
            lambda conn: list(
                map(ConversationRow._make, load.rows(conn, {"session_id": session_id}))
            ),
            single_statement=True,
        )

    def clear_messages(self, session_id: str) -> None:
        session_id = validation.identifier(session_id, "session_id")

        def run(conn: Connection) -> None:
            conn.execute(delete(messages).where(messages.c.session_id == session_id))
            conn.execute(
                update(sessions)
                .where(sessions.c.id == session_id)
                .values(message_count=0, tool_call_count=0)
            )

        self.store.write(run)

    def delete_session(self, session_id: str) -> bool:
        """Delete a session and its messages, with its delegate (subagent) children, as newest
        Hermes does; every other child (branch, compression continuation, untagged) is kept,
        orphaned."""
        if not isinstance(session_id, str) or not bindable(session_id):
            return False
        return self.delete_sessions([session_id]) > 0

    def delete_sessions(self, session_ids: Sequence[str]) -> int:
        """Delete these sessions (and their delegate children, recursively); how many of the
        given ids existed."""
        return self.delete_sessions_detailed(session_ids).total

    def delete_sessions_detailed(self, session_ids: Sequence[str] | None) -> Deletion:
        """:meth:`delete_sessions`, saying also which sessions went (the given ones that
        existed, then their delegate children): the facade removes their transcript files.

        ``None`` or an empty list deletes nothing, as in Hermes; a lone ``str`` is a
        ``TypeError`` (Hermes would delete a session per character of it)."""
        if session_ids is None:
            return Deletion(0, ())
        if isinstance(session_ids, (str, bytes)):
            raise TypeError("session_ids must be a list of session ids, not a single str")
        wanted = list(dict.fromkeys(
            item for item in session_ids if isinstance(item, str) and bindable(item)
        ))  # fmt: skip
        if not wanted:
            return Deletion(0, ())

        def run(conn: Connection) -> Deletion:
            found = [
                str(row[0])
                for row in conn.execute(select(sessions.c.id).where(sessions.c.id.in_(wanted)))
            ]
            doomed = [*found, *_delegate_descendants(conn, found)]
            _delete_sessions(conn, doomed)
            return Deletion(len(found), tuple(doomed))

        return self.store.write(run)

    def delete_session_if_empty(self, session_id: str) -> bool:
        """Delete a session only while it has no title, no message and no child."""
        if not isinstance(session_id, str) or not bindable(session_id):
            return False
        child = sessions.alias("child")
        statement = delete(sessions).where(
            sessions.c.id == session_id,
            sessions.c.title.is_(None),
            ~select(messages.c.id).where(messages.c.session_id == session_id).exists(),
            ~select(child.c.id).where(child.c.parent_session_id == session_id).exists(),
        )
        return self.store.write(lambda conn: conn.execute(statement).rowcount > 0)

    def prune_empty_ghost_sessions(
        self, source: str = GHOST_SOURCE, older_than_s: float = GHOST_AGE_S
    ) -> int:
        """Delete ghost sessions, as newest Hermes does for its TUI: ended, untitled, with no
        message, started more than a day ago. Children are orphaned. Returns how many."""
        return self.prune_empty_ghost_sessions_detailed(source, older_than_s).total

    def prune_empty_ghost_sessions_detailed(
        self, source: str = GHOST_SOURCE, older_than_s: float = GHOST_AGE_S
    ) -> Deletion:
        """:meth:`prune_empty_ghost_sessions`, saying also which sessions went.

        Children are orphaned where Hermes 0.18's prune fails on the foreign key instead (it
        deletes without orphaning, so one ghost with a child stops the whole prune)."""
        source = validation.identifier(source, "source")
        age = validation.optional_number(older_than_s, "older_than_s")
        if age is None or age != age or age < 0:
            raise ValueError("older_than_s must be a non-negative number")
        condition = and_(
            sessions.c.source == source,
            sessions.c.title.is_(None),
            sessions.c.ended_at.is_not(None),
            sessions.c.started_at < time.time() - age,
            ~select(messages.c.id).where(messages.c.session_id == sessions.c.id).exists(),
        )

        return self.store.write(lambda conn: delete_matching(conn, condition))

    def update_session_model(self, session_id: str, model: str | None) -> bool:
        return self._update_session(
            session_id, {"model": validation.optional_identifier(model, "model")}
        )

    def update_session_meta(
        self, session_id: str, model_config_json: str | None, model: str | None = None
    ) -> bool:
        """Replace ``model_config`` (JSON text, as Hermes passes it) and, when given, the model."""
        values: dict[str, Any] = {
            "model_config": self._text(model_config_json, "model_config_json")
        }
        if model is not None:
            values["model"] = validation.identifier(model, "model")
        return self._update_session(session_id, values)

    def update_session_billing_route(
        self, session_id: str, *, provider: str, base_url: str, billing_mode: str | None = None
    ) -> bool:
        """A model-route change: the new billing provider and URL, the mode when given, and
        the cached system prompt dropped (it named the old route), as Hermes does."""
        values: dict[str, Any] = {
            "billing_provider": validation.identifier(provider, "provider"),
            "billing_base_url": validation.identifier(base_url, "base_url"),
            "system_prompt": None,
        }
        if billing_mode is not None:
            values["billing_mode"] = validation.identifier(billing_mode, "billing_mode")
        return self._update_session(session_id, values)

    def recount(self, conn: Connection, session_id: str) -> None:
        """Set a session's counters to those of its live rows."""
        rows = conn.execute(
            select(messages.c.tool_calls).where(
                messages.c.session_id == session_id, messages.c.active == 1
            )
        ).all()
        tool_calls = sum(
            count_tool_calls(decode_json(row[0], "tool_calls", None, None)) for row in rows
        )
        conn.execute(
            update(sessions)
            .where(sessions.c.id == session_id)
            .values(message_count=len(rows), tool_call_count=tool_calls)
        )

    def prune_sessions(self, older_than_days: float = 90, source: str | None = None) -> int:
        """Delete ended sessions started more than ``older_than_days`` ago; never a live one."""
        return self.prune_sessions_before(_prune_cutoff(older_than_days), source)

    def prune_sessions_before(self, cutoff: float, source: str | None = None) -> int:
        """Delete ended sessions started before ``cutoff`` (a Unix timestamp); never a live
        one. The form to use when the cutoff was shown to someone first: a day count would be
        turned into a timestamp again later, and move."""
        return self.prune_sessions_before_detailed(cutoff, source).total

    def prune_sessions_before_detailed(
        self, cutoff: float, source: str | None = None
    ) -> Deletion:
        """:meth:`prune_sessions_before`, saying also which sessions went."""
        cutoff = _cutoff_timestamp(cutoff)
        source = validation.optional_identifier(source, "source")
        condition = and_(sessions.c.started_at < cutoff, sessions.c.ended_at.is_not(None))
        if source is not None:
            condition = and_(condition, sessions.c.source == source)

        return self.store.write(lambda conn: delete_matching(conn, condition))

    def prunable_sessions(
        self, older_than_days: float = 90, source: str | None = None
    ) -> list[SessionRecord]:
        """What ``prune_sessions`` would delete, for a dry run."""
        return self.prunable_sessions_before(_prune_cutoff(older_than_days), source)

    def prunable_sessions_before(
        self, cutoff: float, source: str | None = None
    ) -> list[SessionRecord]:
        """What ``prune_sessions_before`` would delete, for a dry run."""
        cutoff = _cutoff_timestamp(cutoff)
        source = validation.optional_identifier(source, "source")
        statement = select(*_session_columns()).where(
            sessions.c.started_at < cutoff, sessions.c.ended_at.is_not(None)
        )
        if source is not None:
            statement = statement.where(sessions.c.source == source)
        return self.store.read(
            lambda conn: [SessionRecord(*row) for row in conn.execute(statement)]
        )


def _run_again(conn: Connection) -> None:
    """``recover`` for an idempotent write: nothing to look for, running it again is safe."""
    return None


def _appended_rows(
    session_id: str, rows: Sequence[dict[str, Any]]
) -> Callable[[Connection], list[int] | None]:
    """``recover`` for an append whose COMMIT was lost with the connection: the ids of its
    rows if the server committed it, else None (then it is run again, once).

    The rows are recognised by what the client chose before the first attempt and no other
    append shares: the session, each row's timestamp (now + index microseconds, identical in
    every attempt), role and content. This is what keeps a retried append from storing a
    message twice; no schema change (an idempotency-token column) is needed for it.
    """
    first, last = rows[0]["timestamp"], rows[-1]["timestamp"]

    def recover(conn: Connection) -> list[int] | None:
        found = conn.execute(
            select(messages.c.id, messages.c.timestamp, messages.c.role, messages.c.content)
            .where(
                messages.c.session_id == session_id,
                messages.c.timestamp >= first,
                messages.c.timestamp <= last,
            )
            .order_by(messages.c.timestamp, messages.c.id)
        ).all()
        by_key = {(row[1], row[2], row[3]): int(row[0]) for row in found}
        ids = [by_key.get((row["timestamp"], row["role"], row["content"])) for row in rows]
        if any(identifier is None for identifier in ids):
            return None
        return [identifier for identifier in ids if identifier is not None]

    return recover


def _addition_guard(
    column: Any, amount: float, low: float, high: float
) -> list[ColumnElement[bool]]:
    """The condition under which ``COALESCE(column, 0) + amount`` stays within [low, high].

    Written as a comparison with a bound computed here, so the check itself cannot overflow.
    """
    if amount > 0:
        return [func.coalesce(column, 0) <= high - amount]
    if amount < 0:
        return [func.coalesce(column, 0) >= low - amount]
    return []


def _session_exists(conn: Connection, session_id: str) -> bool:
    found = conn.execute(select(sessions.c.id).where(sessions.c.id == session_id)).first()
    return found is not None


def _prune_cutoff(older_than_days: Any) -> float:
    days = validation.optional_number(older_than_days, "older_than_days")
    if days is None or days != days or days < 0:  # NaN never equals itself
        raise ValueError("older_than_days must be a non-negative number")
    return time.time() - days * SECONDS_PER_DAY


def _cutoff_timestamp(cutoff: Any) -> float:
    moment = validation.optional_number(cutoff, "cutoff")  # finite, or a clear error
    if moment is None:
        raise TypeError("cutoff must be a Unix timestamp (seconds), not None")
    return moment


# -- statement builders (module level: pure functions of their arguments) -------------------
def _session_columns() -> list[Any]:
    return [sessions.c[name] for name in SESSION_FIELDS]


# Insertion (id) order, as every Hermes release reads a session: time.time() is not monotonic
# (NTP steps, VM or laptop resume), and a tool result stamped before its call must still come
# after it, or the replayed conversation is refused by the provider.
@functools.cache
def _messages_of_session(*, live_only: bool = False) -> TextClause:
    return plain_select(messages, MESSAGE_FIELDS, _of_session(live_only), order_by="id")


@functools.cache
def _conversation_of_session(*, live_only: bool = False) -> TextClause:
    return plain_select(messages, CONVERSATION_FIELDS, _of_session(live_only), order_by="id")


def _of_session(live_only: bool) -> str:
    return "session_id = :session_id AND active = 1" if live_only else "session_id = :session_id"


def _session_by_id() -> TextClause:
    return plain_select(sessions, SESSION_FIELDS, "id = :id")


def _one_session(row: Row[Any] | None) -> SessionRecord | None:
    return None if row is None else SessionRecord._make(row)


def row_count(value: Any, name: str) -> int:
    """A LIMIT or OFFSET: anything ``int()`` takes (as Hermes did), negatives as 0, capped at
    the largest value both databases accept; NaN, infinities and text are a ``ValueError``."""
    try:
        number = int(value)
    except OverflowError:
        raise ValueError(f"{name} must be a finite number, not {value!r}") from None
    return min(max(number, 0), validation.INT64_MAX)


def message_threshold(value: Any) -> int | None:
    """``min_message_count`` as Hermes reads it: only a positive count filters (None: no
    filter). An ``int`` (a ``bool`` or anything else is a ``TypeError``); one past the 64-bit
    counters is returned as it is, and the caller answers that no session has that many."""
    count = validation.integer(value, "min_message_count")
    return count if count > 0 else None


def id_needle(value: Any) -> str | None:
    """``id_query`` as Hermes reads it, stripped and lower-cased (Python's ``str.lower``); None
    when that leaves nothing. A ``str`` or None: another type is a ``TypeError`` (Hermes fails
    on ``.strip()``)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"id_query must be a str or None, not {type(value).__name__}")
    return value.strip().lower() or None


def _matchable(value: Any) -> bool:
    """A lookup value some stored identifier could equal; anything else matches nothing
    (as SQLite answers a wrong type), rather than reaching a driver that cannot bind it."""
    return bindable(value)


def _common_prefix_length(left: str, right: str) -> int:
    size = 0
    for a, b in zip(left, right, strict=False):
        if a != b:
            break
        size += 1
    return size


def _first_user_text() -> ColumnElement[Any]:
    first = messages.alias("first_user")
    # Only the head is read out; _preview flattens its line breaks in Python, where two
    # replace() calls per row cost less than in SQL (a fifth of this subquery on SQLite).
    head = func.substr(first.c.content, 1, PREVIEW_LENGTH + 3 + 200)
    return (
        select(head)
        .where(
            first.c.session_id == sessions.c.id,
            first.c.role == "user",
            first.c.content.is_not(None),
        )
        .order_by(first.c.timestamp, first.c.id)
        .limit(1)
        .correlate(sessions)
        .scalar_subquery()
    )


def _last_active() -> ColumnElement[Any]:
    latest = messages.alias("latest")
    newest = (
        select(func.max(latest.c.timestamp))
        .where(latest.c.session_id == sessions.c.id)
        .correlate(sessions)
        .scalar_subquery()
    )
    return func.coalesce(newest, sessions.c.started_at)


@functools.cache
def _rich_select() -> Select[Any]:
    # Hermes's dict order: the columns, last_active, then the preview (see _listing_dict).
    return select(
        *_session_columns(),
        _last_active().label("last_active"),
        _first_user_text().label("_preview_raw"),
    )




ListingShape = tuple[bool, str | None, bool, str, bool, bool]
"""What a listing's filters look like, the values aside (one prebuilt statement per shape):
by source, the dialect's SQL for the excluded sources' list (None: none excluded), children
included, archive (``"hide"``, ``"all"`` or ``"only"``), by cwd prefix, by message count."""


def _listing_conditions(shape: ListingShape) -> list[ColumnElement[bool] | TextClause]:
    """The WHERE of a listing of this shape: every path lists the same sessions."""
    by_source, excluded_list_sql, include_children, archive, by_cwd, by_messages = shape
    conditions: list[ColumnElement[bool] | TextClause] = []
    if by_source:
        conditions.append(sessions.c.source == bindparam("source"))
    if excluded_list_sql is not None:
        conditions.append(text(f"sessions.source NOT IN {excluded_list_sql}"))
    if not include_children:
        conditions.append(listable_condition())
    if archive == "hide":
        conditions.append(sessions.c.archived == 0)
    elif archive == "only":
        conditions.append(sessions.c.archived == 1)
    if by_cwd:
        conditions.append(_cwd_condition(*map(bindparam, _CWD_PARAMETERS)))
    if by_messages:
        # No COALESCE: as Hermes, a NULL count is not "at least n".
        conditions.append(sessions.c.message_count >= bindparam("min_messages"))
    return conditions


@functools.cache
def _listing_statement(shape: ListingShape) -> Select[Any]:
    """One prebuilt statement per filter shape; the values are bound at execution.

    Without a source filter the listing walks ``ix_sessions_started_id`` (revision 0022: the
    listing's own order) and stops at the page's end, so the preview and last-activity
    subqueries run for the page's rows only. A source filter takes ``idx_sessions_source``
    instead, and a plan that sorts would run both subqueries for every matching session
    before the LIMIT (1.8 ms with ``source = 'cli'`` on the 100k-message bench file): there
    the page is chosen first, from ``sessions`` alone, and only its rows are enriched
    (0.47 ms).

    The excluded sources are one JSON parameter (``excluded_list_sql``, the dialect's), so
    100,000 of them are one parameter, not more than PostgreSQL's protocol accepts.
    """
    conditions = _listing_conditions(shape)
    newest_first = (sessions.c.started_at.desc(), sessions.c.id)
    if not shape[0]:
        return (
            _rich_select().where(*conditions)
            .order_by(*newest_first)
            .limit(bindparam("limit"))
            .offset(bindparam("offset"))
        )
    chosen = (
        select(sessions.c.id)
        .where(*conditions)
        .order_by(*newest_first)
        .limit(bindparam("limit"))
        .offset(bindparam("offset"))
        .subquery("page")
    )
    return _rich_select().join_from(sessions, chosen, chosen.c.id == sessions.c.id).order_by(
        *newest_first
    )


_MATCHED = "matched"
"""The alias of the chain in the id filter's EXISTS (the dialect's match SQL names it)."""


@functools.cache
def _activity_listing_statement(
    shape: ListingShape, id_match_sql: str | None, bytewise_collation: str
) -> Select[Any]:
    """The listing of ``shape`` in Hermes 0.18's ``order_by_last_active`` order.

    Each listed session is the root of a chain: itself, then every child of a chain member
    that ended with ``'compression'`` and is not a fork (branch, delegate or tool run; no
    condition on times, as Hermes's chain has none). Its activity is the latest of each
    member's newest message (else its ``started_at``); rows are ordered by that, then
    ``started_at``, then id (byte order, as SQLite compares text), all descending. The page
    is chosen from that order before its rows are enriched; ``id_match_sql`` (the dialect's
    test on ``matched.id``), when given, keeps the rows with a matching member.

    The chain is a ``UNION``, where Hermes's is ``UNION ALL``: the same (root, member) pair
    is not walked twice, so a corrupt cycle of parents ends the walk instead of running the
    query forever, and a maximum over the members is the same either way.
    """
    seed = select(
        sessions.c.id.label("root"), sessions.c.id, sessions.c.end_reason, sessions.c.started_at
    ).where(*_listing_conditions(shape))
    chain = seed.cte("chain", recursive=True)
    child = sessions.alias("chain_child")
    chain = chain.union(
        select(chain.c.root, child.c.id, child.c.end_reason, child.c.started_at)
        .join_from(chain, child, child.c.parent_session_id == chain.c.id)
        .where(
            chain.c.end_reason == COMPRESSION_END_REASON,
            *not_a_fork(child),
        )
    )
    member_messages = messages.alias("member_messages")
    newest_message = (
        select(func.max(member_messages.c.timestamp))
        .where(member_messages.c.session_id == chain.c.id)
        .correlate(chain)
        .scalar_subquery()
    )
    activity = (
        select(
            chain.c.root,
            func.max(func.coalesce(newest_message, chain.c.started_at)).label("active"),
        )
        .group_by(chain.c.root)
        .subquery("chain_activity")
    )
    page = select(sessions.c.id, activity.c.active).join_from(
        sessions, activity, activity.c.root == sessions.c.id
    )
    if id_match_sql is not None:
        matched = chain.alias(_MATCHED)
        page = page.where(
            select(matched.c.root)
            .where(matched.c.root == sessions.c.id, text(id_match_sql))
            .exists()
        )
    chosen = (
        page.order_by(
            activity.c.active.desc(),
            sessions.c.started_at.desc(),
            sessions.c.id.collate(bytewise_collation).desc(),
        )
        .limit(bindparam("limit"))
        .offset(bindparam("offset"))
        .subquery("page")
    )
    return _rich_select().join_from(sessions, chosen, chosen.c.id == sessions.c.id).order_by(
        chosen.c.active.desc(),
        sessions.c.started_at.desc(),
        sessions.c.id.collate(bytewise_collation).desc(),
    )


def _tip_listings_statement(roots_list_sql: str) -> Select[Any]:
    """The rich row of each root's newest compression continuation, the root's id last
    (roots without one are absent): the walk and the rows in one statement."""
    tips = (
        text(_compression_tips_sql(roots_list_sql))
        .columns(column("root"), column("id"))
        .subquery("tips")
    )
    return (
        _rich_select().add_columns(tips.c.root)
        .join_from(sessions, tips, tips.c.id == sessions.c.id)
        .where(tips.c.id != tips.c.root)
    )


def _preview(raw: str | None) -> str:
    """Hermes's preview: line breaks as spaces, stripped, 60 characters and an ellipsis."""
    if not raw:
        return ""
    text = raw.replace("\n", " ").replace("\r", " ").strip()
    if not text:
        return ""
    return text[:PREVIEW_LENGTH] + ("..." if len(text) > PREVIEW_LENGTH else "")


_SESSION_WIDTH = len(SESSION_FIELDS)
_LAST_ACTIVE_AT = _SESSION_WIDTH
_PREVIEW_AT = _SESSION_WIDTH + 1
_ROOT_AT = _SESSION_WIDTH + 2
"""Where a tip row (``_tip_listings_statement``) holds the id of the root it continues."""
_END_REASON_AT = SESSION_FIELDS.index("end_reason")
_LISTING_KEYS = (*SESSION_FIELDS, "last_active", "preview")
# Filling a copy of a dict that already has every key skips the four resizes a dict built
# key by key goes through: a fifth cheaper per 43-key row.
_EMPTY_LISTING: dict[str, Any] = dict.fromkeys(_LISTING_KEYS)

PROJECTED_FIELDS = (
    "id",
    "ended_at",
    "end_reason",
    "message_count",
    "tool_call_count",
    "title",
    "model",
    "system_prompt",
    "cwd",
    "git_branch",
    "git_repo_root",
)
"""What a compression root shows of its tip (with the tip's preview and last activity), as
newest Hermes projects it: the live conversation's identity, counts and working tree."""
_PROJECTED_AT = (
    *(SESSION_FIELDS.index(name) for name in PROJECTED_FIELDS),
    _LAST_ACTIVE_AT,
    _PREVIEW_AT,
)


def _listing(row: Sequence[Any], lineage_root_id: str | None) -> SessionListing:
    width = _SESSION_WIDTH
    return SessionListing(
        SessionRecord._make(row[:width]),
        _preview(row[_PREVIEW_AT]),
        float(row[_LAST_ACTIVE_AT]),
        lineage_root_id,
    )


def _listing_dict(row: Sequence[Any], lineage_root_id: str | None) -> dict[str, Any]:
    """``_listing(row, lineage_root_id).to_dict()``, without the records in between."""
    listing = _EMPTY_LISTING.copy()
    listing.update(zip(_LISTING_KEYS, row))  # noqa: B905 - a tip row's extra root is dropped
    listing["last_active"] = float(listing["last_active"])
    listing["preview"] = _preview(listing["preview"])
    if lineage_root_id is not None:
        listing["_lineage_root_id"] = lineage_root_id
    return listing


def _project(root: Sequence[Any], tip: Sequence[Any]) -> tuple[Any, ...]:
    """Show a compressed conversation as its live tip, keeping where it started."""
    values = list(root)
    for index in _PROJECTED_AT:
        values[index] = tip[index]
    return tuple(values)


# A JSON marker is looked for in model_config's text: portable across SQLite and PostgreSQL,
# and a malformed model_config (the files hold some) cannot make the query fail, as
# json_extract would. The key's quotes keep it from matching inside another key or value.
BRANCH_MARKER = "_branched_from"
DELEGATE_MARKER = "_delegate_from"
TOOL_SOURCE = "tool"
BRANCHED_END_REASON = "branched"


def _marker_pattern(marker: str) -> str:
    return '%"' + escape_like(marker) + '"%'


def _has_marker_sql(alias: str, marker: str) -> str:
    pattern = _marker_pattern(marker).replace("'", "''")
    return f"COALESCE({alias}.model_config, '') LIKE '{pattern}' ESCAPE '\\'"


def _not_a_fork(alias: str) -> str:
    """SQL: the session ``alias`` is not a branch, not a delegate run and not a tool run, so a
    compression tip may move to it."""
    return (
        f"NOT ({_has_marker_sql(alias, BRANCH_MARKER)}) "
        f"AND NOT ({_has_marker_sql(alias, DELEGATE_MARKER)}) "
        f"AND COALESCE({alias}.source, '') <> '{TOOL_SOURCE}'"
    )


def has_marker(marker: str, table: Any = sessions) -> ColumnElement[bool]:
    return func.coalesce(table.c.model_config, "").like(_marker_pattern(marker), escape="\\")


def not_a_fork(table: Any) -> list[ColumnElement[bool]]:
    """``_not_a_fork`` as Core conditions on ``table`` (a ``sessions`` alias)."""
    return [
        ~has_marker(BRANCH_MARKER, table),
        ~has_marker(DELEGATE_MARKER, table),
        func.coalesce(table.c.source, "") != TOOL_SOURCE,
    ]


def listable_condition() -> ColumnElement[bool]:
    """Roots and branch children, without delegate runs: what Hermes's pickers list."""
    parent = sessions.alias("listed_parent")
    branched_parent = (
        select(parent.c.id)
        .where(
            parent.c.id == sessions.c.parent_session_id,
            parent.c.end_reason == BRANCHED_END_REASON,
            sessions.c.started_at >= parent.c.ended_at,
        )
        .correlate(sessions)
        .exists()
    )
    # CASE, not OR: it guarantees that a root (most rows) never runs the branch tests.
    listable_kind = case(
        (sessions.c.parent_session_id.is_(None), 1),
        (has_marker(BRANCH_MARKER), 1),
        (branched_parent, 1),
        else_=0,
    )
    return and_(listable_kind == 1, ~has_marker(DELEGATE_MARKER))


def _session_filters(
    *,
    source: str | None,
    exclude_sources: Sequence[str] | None,
    include_archived: bool,
    archived_only: bool,
    cwd_prefix: str | None,
) -> list[ColumnElement[bool]]:
    conditions: list[ColumnElement[bool]] = []
    if source is not None:
        conditions.append(sessions.c.source == validation.identifier(source, "source"))
    excluded = [validation.identifier(item, "exclude_sources") for item in exclude_sources or ()]
    if excluded:
        conditions.append(sessions.c.source.not_in(excluded))
    if archived_only:
        conditions.append(sessions.c.archived == 1)
    elif not include_archived:
        conditions.append(func.coalesce(sessions.c.archived, 0) == 0)
    if cwd_prefix:
        prefix = validation.identifier(cwd_prefix, "cwd_prefix")
        conditions.append(_cwd_condition(*cwd_patterns(prefix)))
    return conditions


_CWD_PARAMETERS = ("cwd_exact", "cwd_below_slash", "cwd_below_backslash", "cwd_width")


def cwd_patterns(prefix: str) -> tuple[str, str, str, int]:
    """``cwd_prefix`` as Hermes 0.18 matches it: the directory itself, or a path below it
    (after ``/`` or ``\\``), so ``/src/app`` does not take ``/src/app2``. Compared as text,
    not with LIKE: ``%`` and ``_`` in the prefix are literal (``my_project`` is not
    ``myXproject``, as it is for Hermes), and the case of letters counts on both databases
    (Hermes's SQLite LIKE folded it below the directory). A prefix of separators only (``/``)
    takes every path below it, where Hermes's took ``/`` alone.

    Returns the directory, the two beginnings of a path below it, and their length.
    """
    base = prefix.rstrip("/\\")
    if not base:
        return prefix, prefix, prefix, len(prefix)
    return base, base + "/", base + "\\", len(base) + 1


def _cwd_condition(
    exact: Any, below_slash: Any, below_backslash: Any, width: Any
) -> ColumnElement[bool]:
    beginning = func.substr(sessions.c.cwd, 1, width)
    return or_(sessions.c.cwd == exact, beginning == below_slash, beginning == below_backslash)


def _delegate_descendants(conn: Connection, parents: Sequence[str]) -> list[str]:
    """Delegate children of ``parents``, recursively: sessions whose ``_delegate_from`` names
    one of them, or whose parent is one of them and which carry any ``_delegate_from``. The
    parents themselves are never collected."""
    visited = set(parents)
    frontier = set(parents)
    found: list[str] = []
    while frontier:
        rows = conn.execute(
            select(sessions.c.id, sessions.c.parent_session_id, sessions.c.model_config).where(
                has_marker(DELEGATE_MARKER),
                or_(
                    sessions.c.parent_session_id.in_(sorted(frontier)),
                    *(
                        sessions.c.model_config.like(f"%{escape_like(parent)}%", escape="\\")
                        for parent in sorted(frontier)
                    ),
                ),
            )
        ).all()
        next_frontier: set[str] = set()
        for session_id, parent_id, config in rows:
            if session_id in visited:
                continue
            marker = _json_object(config).get(DELEGATE_MARKER)
            if marker in frontier or (parent_id in frontier and marker is not None):
                visited.add(session_id)
                next_frontier.add(session_id)
                found.append(str(session_id))
        frontier = next_frontier
    return found


def _compression_lineage(conn: Connection, session_id: str) -> set[str]:
    """The session and every session linked to it by a compression edge, either way."""
    rows = conn.execute(
        select(sessions.c.id, sessions.c.parent_session_id, sessions.c.end_reason)
    ).all()
    by_id = {str(row[0]): row for row in rows}
    if session_id not in by_id:
        return set()
    children: dict[str, list[str]] = {}
    for row in rows:
        if row[1] is not None:
            children.setdefault(str(row[1]), []).append(str(row[0]))
    lineage = {session_id}
    pending = [session_id]
    while pending and len(lineage) <= MAX_LINEAGE_DEPTH * 100:
        current = pending.pop()
        row = by_id[current]
        linked: list[str] = []
        parent = by_id.get(str(row[1])) if row[1] is not None else None
        if parent is not None and parent[2] == COMPRESSION_END_REASON:
            linked.append(str(parent[0]))
        if row[2] == COMPRESSION_END_REASON:
            linked += children.get(current, [])
        for other in linked:
            if other not in lineage:
                lineage.add(other)
                pending.append(other)
    return lineage


_FILLED_ON_CONFLICT = ("model", "model_config", "system_prompt", "parent_session_id")
"""What ``create_session`` on an existing session fills where still NULL, beside the extras."""
_BASE_SESSION_KEYWORDS = ("model_config", "system_prompt", "user_id", "parent_session_id")
"""``create_session``'s named keywords that ``ensure_session`` takes through ``**kwargs``."""

EXTRA_SESSION_COLUMNS = (
    "session_key", "chat_id", "chat_type", "thread_id", "cwd", "git_branch", "git_repo_root",
)  # fmt: skip
"""Later-Hermes session columns ``create_session``/``ensure_session`` accept as keywords."""


# Every root's chain of compression continuations, walked in one recursive query (one round
# trip for a whole page of roots). A continuation is the newest child that started at or after
# its parent ended with 'compression'; depth is bounded so a corrupt cycle cannot loop forever.
def _compression_tips_sql(roots_sql: str) -> str:
    """The walk from each root to its tip; ``roots_sql`` is the SQL of the roots' list."""
    return f"""
WITH RECURSIVE chain(root, id, depth) AS (
    SELECT id, id, 0 FROM sessions WHERE id IN {roots_sql}
    UNION ALL
    SELECT chain.root, child.id, chain.depth + 1
    FROM chain
    JOIN sessions AS parent ON parent.id = chain.id
    JOIN sessions AS child ON child.parent_session_id = parent.id
    WHERE parent.end_reason = '{COMPRESSION_END_REASON}'
      AND parent.ended_at IS NOT NULL
      AND child.started_at >= parent.ended_at
      AND chain.depth < {MAX_LINEAGE_DEPTH}
      AND child.id = (
          SELECT newest.id FROM sessions AS newest
          WHERE newest.parent_session_id = parent.id AND newest.started_at >= parent.ended_at
            AND {_not_a_fork("newest")}
          ORDER BY newest.started_at DESC, newest.id DESC
          LIMIT 1
      )
)
SELECT root, id FROM chain AS last
WHERE depth = (SELECT MAX(depth) FROM chain AS other WHERE other.root = last.root)
"""


_COMPRESSION_TIPS = text(_compression_tips_sql(":roots")).bindparams(
    bindparam("roots", expanding=True)
)


def _compression_tips(conn: Connection, root_ids: Sequence[str]) -> dict[str, str]:
    """Each known root's tip (itself when it has no continuation); unknown ids are absent."""
    if not root_ids:
        return {}
    rows = conn.execute(_COMPRESSION_TIPS, {"roots": list(root_ids)})
    return {str(root): str(tip) for root, tip in rows}


def _compression_tip(conn: Connection, session_id: str) -> str | None:
    return _compression_tips(conn, [session_id]).get(session_id)


def delete_matching(conn: Connection, condition: ColumnElement[bool]) -> Deletion:
    """Delete every session ``condition`` selects (children orphaned); which went."""
    doomed = [str(row[0]) for row in conn.execute(select(sessions.c.id).where(condition))]
    _delete_sessions(conn, doomed)
    return Deletion(len(doomed), tuple(doomed))


_DELETE_CHUNK = 500
"""Ids per statement: within every database's bound-parameter limit."""


def _delete_sessions(conn: Connection, session_ids: Sequence[str]) -> None:
    """Orphan the children of ``session_ids``, then delete their messages and them."""
    for start in range(0, len(session_ids), _DELETE_CHUNK):
        chunk = list(session_ids[start : start + _DELETE_CHUNK])
        conn.execute(
            update(sessions)
            .where(sessions.c.parent_session_id.in_(chunk))
            .values(parent_session_id=None)
        )
        conn.execute(delete(messages).where(messages.c.session_id.in_(chunk)))
        conn.execute(delete(sessions).where(sessions.c.id.in_(chunk)))


__all__ = [
    "Deletion",
    "NewMessage",
    "SessionRepository",
    "count_tool_calls",
    "decode_json",
    "encode_json",
]
