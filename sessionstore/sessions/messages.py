"""Messages: checking and encoding one before it is written, appending a turn, reading a
session's messages back (whole rows, or only what replaying it to a model needs), counting,
clearing, and full-text search.

:func:`message_rows` is the one builder of the rows an append inserts: the appends here and
the compaction and replacement of :mod:`.rewind` all go through it, so a new column is added
in one place.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import groupby, starmap
from operator import itemgetter
from typing import TYPE_CHECKING, Any, NamedTuple

from sqlalchemy import delete, func, or_, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql.elements import TextClause

from ..errors import UnknownSessionError, ValueOutOfRangeError
from ..sql import validation
from ..sql.codec import count_tool_calls, decode_json, encode_json
from ..sql.message_content import encode_content
from ..sql.message_identity import (
    given_absorbed_message_uids,
    given_message_uid,
    given_tool_call_uid,
    given_tool_call_uids,
    stamp_identities,
)
from ..sql.read_shape import ReadShape
from ..sql.records import (
    CONVERSATION_FIELDS,
    CONVERSATION_WIDTHS,
    MESSAGE_FIELDS,
    ConversationRow,
    MessageRecord,
)
from ..sql.statements import HotReads, HotWrites, fixed_count, literal_count, plain_select
from ..sql.tables import messages_table as messages
from ..sql.tables import sessions_table as sessions
from ..sql.validation import INT64_MAX, bindable
from ..storage.store import Store
from .access import reads, writes
from .display_history import (
    dedupe_generations,
    display_rows_statement,
    is_live,
    lineage_rows_statement,
    read_display_rows,
)
from .display_history import page as page_of
from .leases import lease_ttl
from .lineage import CHAIN_CAP, COMPRESSION_END_REASON, compression_ancestors_of
from .session_state import (
    DEFAULT_TURN_LEASE_TTL_S,
    check_turn_lease,
    refuse_closed_compression_parent,
    refuse_live_turn_lease,
)
from .shared import (
    RepositoryPart,
    before_rows_change,
    constraint_error,
    matchable,
    row_count,
    session_exists,
)
from .windows import MESSAGE_DICT_FIELDS, message_dicts_of_session

if TYPE_CHECKING:
    from ..search import SearchHit

_NEW_MESSAGE_TEXT_FIELDS = (
    "content", "tool_name", "tool_call_id", "finish_reason", "reasoning", "effect_disposition",
    "api_content", "display_kind", "display_metadata", "message_uid", "tool_call_uids",
    "tool_call_uid", "absorbed_message_uids",
)  # fmt: skip
_NEW_MESSAGE_JSON_FIELDS = ("tool_calls", "reasoning_details", "codex_reasoning_items")


@dataclass(frozen=True, slots=True)
class NewMessage:
    """One message ready to insert, JSON encoded.

    Build it with :meth:`SessionRepository.prepare_message` (which also validates the text),
    or directly: ``tool_calls``, ``reasoning_details`` and ``codex_reasoning_items`` may be
    given as Python values (a list of tool-call dicts, say) and are encoded here, and
    ``tool_call_total`` then defaults to the number of tool calls (also for JSON text). A
    value of the wrong type is a ``TypeError`` naming the field: ``tool_calls`` is a list of
    tool-call dicts (a number or one bare dict is a ``TypeError``), or as text the JSON of
    such a list (other text is a ``ValueError``).
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
    effect_disposition: str | None = None
    api_content: str | None = None
    compressed_summary: int = 0
    display_kind: str | None = None
    display_metadata: str | None = None
    message_uid: str | None = None
    tool_call_uids: str | None = None
    tool_call_uid: str | None = None
    absorbed_message_uids: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.role, str):
            raise TypeError(f"NewMessage.role must be str, not {type(self.role).__name__}")
        for name in _NEW_MESSAGE_TEXT_FIELDS:
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise TypeError(
                    f"NewMessage.{name} must be str or None, not {type(value).__name__}"
                )
        if isinstance(self.tool_calls, str):
            if self.tool_calls:
                calls = validation.tool_calls_text(self.tool_calls, "NewMessage.tool_calls")
                if self.tool_call_total == 0:
                    object.__setattr__(self, "tool_call_total", calls)
            else:
                object.__setattr__(self, "tool_calls", None)
        else:
            validation.tool_calls(self.tool_calls, "NewMessage.tool_calls")
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


def message_rows(
    session_id: str, batch: Sequence[NewMessage], now: float
) -> list[dict[str, Any]]:
    """The rows that append ``batch`` to a session: a message without a timestamp is stamped
    ``now`` plus its index in microseconds, strictly increasing within a batch, so (timestamp,
    id) order is the turn order. Each row gets newest Hermes's identity columns (the message's
    own ``message_uid``, else a fresh one; tool-call uids, ``display_identity``:
    :mod:`..sql.message_identity`)."""
    rows = [
        {
            "session_id": session_id,
            "role": message.role,
            "content": message.content,
            "tool_call_id": message.tool_call_id,
            "tool_calls": message.tool_calls,
            "tool_name": message.tool_name,
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
            "effect_disposition": message.effect_disposition,
            "api_content": message.api_content,
            # Written, not left to the column's default: files some Hermes builds reconciled
            # hold ``active`` without its DEFAULT 1 (#51646), where an omitted value is NULL
            # and the row would vanish from every live read. Hermes 0.19 writes it too.
            "active": 1,
            "compacted": 0,
            "_compressed_summary": 1 if message.compressed_summary else 0,
            "display_kind": message.display_kind,
            "display_metadata": message.display_metadata,
            "message_uid": message.message_uid,
            "tool_call_uids": message.tool_call_uids,
            "tool_call_uid": message.tool_call_uid,
            "absorbed_message_uids": message.absorbed_message_uids,
        }
        for index, message in enumerate(batch)
    ]
    stamp_identities(rows)
    return rows


class MessageIdentity(NamedTuple):
    """A stored row's identity (:meth:`MessagesPart.message_identities`)."""

    id: int
    role: str
    active: int
    timestamp: float
    message_uid: str | None
    tool_call_uids: str | None
    tool_call_uid: str | None


def reasoning_json_text(value: Any, name: str) -> str | None:
    """A structured reasoning field (``reasoning_details``, ``codex_reasoning_items``,
    ``codex_message_items``) as its column stores it: a value as its JSON; text that is JSON
    already (a stored row's column, as ``get_messages`` returns it) as it is, as iot 0.22.2
    keeps it; other text as the JSON of that text. Encoding the column's text again stored a
    string where the list was: a fork (``get_messages`` into ``replace_messages``) replayed
    the reasoning as text, which every consumer of the list drops."""
    if isinstance(value, str):
        try:
            json.loads(value)
        except ValueError:
            pass
        else:
            return value
    return encode_json(value, name)


def display_metadata_text(value: Any) -> str | None:
    """iot 0.22.2's ``_encode_display_metadata``: a dict as its JSON text; the JSON text of a
    dict as that dict's JSON (never encoded twice); nothing, or anything else (a list, text
    that is no JSON object), as None, as iot drops it. A dict JSON cannot hold is a
    ``TypeError`` naming the field, before anything is written."""
    if not value:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, dict):
        return None
    try:
        return json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"display_metadata must be JSON-serializable: {exc}") from None


def recount(conn: Connection, session_id: str) -> None:
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


class MessagesPart(RepositoryPart):
    """Preparing, appending, reading, counting, clearing and searching messages."""

    def __init__(self, store: Store, *, clock: Callable[[], float] = time.time) -> None:
        super().__init__(store, clock=clock)
        self._hot_writes = HotWrites(
            store.engine.dialect, batch_returning=store.dialect.batch_returning_inserts
        )
        # Built on first use: a short-lived program (a hook, a CLI call) opens the store for
        # one call, and building every statement at open showed in its start-up.
        dialect = store.engine.dialect
        # The store's read shape is decided before any part is built (``sql.read_shape``).
        shape = store.read_shape
        self._load_messages = HotReads.built_later(dialect, lambda: _messages_of_session(shape))
        self._load_live_messages = HotReads.built_later(
            dialect, lambda: _messages_of_session(shape, live_only=True)
        )
        self._load_message_page = HotReads.built_later(
            dialect, lambda: _messages_of_session(shape, paged=True)
        )
        self._load_live_message_page = HotReads.built_later(
            dialect, lambda: _messages_of_session(shape, live_only=True, paged=True)
        )
        self._load_message_dicts = HotReads.built_later(
            dialect, lambda: _message_dict_rows_of_session(shape)
        )
        self._load_live_message_dicts = HotReads.built_later(
            dialect, lambda: _message_dict_rows_of_session(shape, live_only=True)
        )
        self._load_message_dict_page = HotReads.built_later(
            dialect, lambda: _message_dict_rows_of_session(shape, paged=True)
        )
        self._load_live_message_dict_page = HotReads.built_later(
            dialect, lambda: _message_dict_rows_of_session(shape, live_only=True, paged=True)
        )
        # (live only, width): a replay reads the prefix of the columns its keys need.
        self._load_conversations: dict[tuple[bool, int], HotReads] = {
            (live_only, width): HotReads.built_later(
                dialect, functools.partial(_conversation_of_session, shape, live_only, width)
            )
            for live_only in (False, True)
            for width in CONVERSATION_WIDTHS
        }

    # -- preparing ------------------------------------------------------------------------
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
        effect_disposition: Any = None,
        api_content: Any = None,
        compressed_summary: Any = False,
        display_kind: Any = None,
        display_metadata: Any = None,
        message_uid: Any = None,
        tool_call_uids: Any = None,
        tool_call_uid: Any = None,
        absorbed_message_uids: Any = None,
    ) -> NewMessage:
        """One message checked and encoded for an append. Newest Hermes's (iot 0.22.2)
        fields: ``compressed_summary`` marks a compaction summary row (any truthy value);
        ``display_kind`` is kept when it is text (else None, as iot binds it);
        ``display_metadata`` a dict, or the JSON text of one, stored as JSON
        (:func:`display_metadata_text`); ``message_uid`` the durable id a caller already
        stamped on its live copy of the message (a non-empty ``str``; anything else, as in
        iot, gets a fresh one); ``tool_call_uids`` (an assistant message's ``{call id: uid}``)
        and ``tool_call_uid`` (a tool result's) the tool-call uids it already carries
        (:func:`..sql.message_identity.given_tool_call_uids`); ``absorbed_message_uids`` the
        uids of the messages a merged turn absorbed (a list, kept as iot keeps it)."""
        # Most of these are None in any one message: each is checked only when given (a
        # validator call per absent field was a tenth of an append's Python).
        text = self._text
        calls = None if tool_calls is None else validation.tool_calls(tool_calls)
        return NewMessage(
            role=validation.identifier(role, "role"),
            content=None if content is None else self.stored_content(content),
            tool_name=None if tool_name is None
            else validation.optional_name(tool_name, "tool_name"),
            tool_calls=None if calls is None else text(
                encode_json(calls, "tool_calls"), "tool_calls"
            ),
            tool_call_id=None if tool_call_id is None
            else validation.identifier(tool_call_id, "tool_call_id"),
            token_count=None
            if token_count is None
            else validation.counter(token_count, "token_count"),
            finish_reason=None if finish_reason is None
            else validation.identifier(finish_reason, "finish_reason"),
            reasoning=None if reasoning is None else text(reasoning, "reasoning"),
            reasoning_details=None if reasoning_details is None else text(
                reasoning_json_text(reasoning_details, "reasoning_details"), "reasoning_details"
            ),
            codex_reasoning_items=None if codex_reasoning_items is None else text(
                reasoning_json_text(codex_reasoning_items, "codex_reasoning_items"),
                "codex_reasoning_items",
            ),
            reasoning_content=None if reasoning_content is None
            else text(reasoning_content, "reasoning_content"),
            codex_message_items=None if codex_message_items is None else text(
                reasoning_json_text(codex_message_items, "codex_message_items"),
                "codex_message_items",
            ),
            platform_message_id=None if platform_message_id is None
            else validation.identifier(str(platform_message_id), "platform_message_id"),
            observed=1 if observed else 0,
            timestamp=validation.message_timestamp(timestamp),
            tool_call_total=0 if calls is None else count_tool_calls(calls),
            effect_disposition=None if effect_disposition is None
            else validation.identifier(effect_disposition, "effect_disposition"),
            # The exact text sent to the API (Hermes 0.19's byte-fidelity sidecar): only a
            # str is kept, anything else is None, as Hermes stores it.
            api_content=text(api_content, "api_content")
            if isinstance(api_content, str) else None,
            compressed_summary=1 if compressed_summary else 0,
            display_kind=self._text(display_kind, "display_kind")
            if isinstance(display_kind, str) else None,
            display_metadata=self._text(display_metadata_text(display_metadata),
                                        "display_metadata"),
            message_uid=given_message_uid(message_uid),
            tool_call_uids=None if tool_call_uids is None
            else given_tool_call_uids(tool_call_uids),
            tool_call_uid=None if tool_call_uid is None else given_tool_call_uid(tool_call_uid),
            absorbed_message_uids=None if absorbed_message_uids is None
            else given_absorbed_message_uids(absorbed_message_uids),
        )

    def stored_content(self, content: Any) -> str | None:
        """``content`` as a message row stores it: text as it is (text that starts with
        Hermes's marker as a marked JSON string: :func:`encode_content`); numbers and bytes as
        JSON text; anything else (OpenAI multi-part content, a list of parts) as marked JSON
        text, as Hermes keeps it."""
        if isinstance(content, (bytes, int, float)):
            content = encode_json(content, "content")
        elif content is not None:
            content = encode_content(content)
        return self._text(content, "content")

    def prepare_messages(self, batch: Sequence[Mapping[str, Any]]) -> list[NewMessage]:
        """:meth:`prepare_message` for each OpenAI-shaped dict of ``batch``, read with
        Hermes's keys too (``name`` for ``tool_name``, ``message_id`` for
        ``platform_message_id``); an item that is not a dict is a ``TypeError``."""
        prepared = []
        for index, message in enumerate(batch):
            if not isinstance(message, Mapping):
                raise TypeError(f"messages[{index}] must be a dict, not {type(message).__name__}")
            prepared.append(
                self.prepare_message(
                    message.get("role"),
                    message.get("content"),
                    tool_name=message.get("tool_name", message.get("name")),
                    tool_calls=message.get("tool_calls"),
                    tool_call_id=message.get("tool_call_id"),
                    token_count=message.get("token_count"),
                    finish_reason=message.get("finish_reason"),
                    reasoning=message.get("reasoning"),
                    reasoning_details=message.get("reasoning_details"),
                    codex_reasoning_items=message.get("codex_reasoning_items"),
                    reasoning_content=message.get("reasoning_content"),
                    codex_message_items=message.get("codex_message_items"),
                    platform_message_id=message.get(
                        "platform_message_id", message.get("message_id")
                    ),
                    observed=message.get("observed", False),
                    timestamp=message.get("timestamp"),
                    effect_disposition=message.get("effect_disposition"),
                    api_content=message.get("api_content"),
                    compressed_summary=message.get("_compressed_summary", False),
                    display_kind=message.get("display_kind"),
                    display_metadata=message.get("display_metadata"),
                    message_uid=message.get("message_uid"),
                    # iot's live keys, else the columns' names (an export's rows)
                    tool_call_uids=message.get("_tool_call_uids", message.get("tool_call_uids")),
                    tool_call_uid=message.get("_tool_call_uid", message.get("tool_call_uid")),
                    absorbed_message_uids=message.get(
                        "_absorbed_message_uids", message.get("absorbed_message_uids")
                    ),
                )
            )
        return prepared

    # -- appending ------------------------------------------------------------------------
    @writes
    def append_message(
        self,
        session_id: str,
        message: NewMessage,
        *,
        turn_lease_holder: str | None = None,
        turn_lease_ttl_seconds: float = DEFAULT_TURN_LEASE_TTL_S,
    ) -> int:
        return self.append_messages(
            session_id,
            [message],
            turn_lease_holder=turn_lease_holder,
            turn_lease_ttl_seconds=turn_lease_ttl_seconds,
        )[0]

    @writes
    def append_messages(
        self,
        session_id: str,
        batch: Sequence[NewMessage],
        *,
        turn_lease_holder: str | None = None,
        turn_lease_ttl_seconds: float = DEFAULT_TURN_LEASE_TTL_S,
    ) -> list[int]:
        """Insert one turn's messages in one transaction and bump the counters once.

        ``turn_lease_holder`` (iot 0.22.2's fence): the write lands only while that holder
        holds the session's turn lease, else :class:`~sessionstore.errors.SessionTurnLeaseLostError`
        and nothing is written; a held lease found expired is renewed for
        ``turn_lease_ttl_seconds`` (:func:`.session_state.check_turn_lease`)."""
        session_id = validation.identifier(session_id, "session_id")
        holder = (
            validation.identifier(turn_lease_holder, "turn_lease_holder")
            if turn_lease_holder else None
        )  # fmt: skip
        lease_ttl_s = lease_ttl(turn_lease_ttl_seconds, floor=0.1)
        if isinstance(batch, (str, bytes, Mapping)) or not all(
            isinstance(message, NewMessage) for message in batch
        ):
            raise TypeError(
                "batch must be a sequence of NewMessage values (prepare_message builds one)"
            )
        if not batch:
            return []
        rows = message_rows(session_id, batch, time.time())
        tool_calls = sum(message.tool_call_total for message in batch)
        hot = self._hot_writes
        # A server: one message is one statement, one round trip (see HotWrites); a fenced
        # append reads the lease first.
        refuse_closed = self.refuse_closed_compression
        one_statement = (
            len(rows) == 1 and hot.appends_in_one_statement and holder is None
            and not refuse_closed
        )  # fmt: skip

        def not_written(conn: Connection) -> Exception:
            if session_exists(conn, session_id):
                return ValueOutOfRangeError(
                    f"session {session_id!r}: its message or tool-call count would pass "
                    "2**63 - 1; nothing was written"
                )
            return UnknownSessionError(f"session {session_id!r} does not exist")

        def run(conn: Connection) -> list[int]:
            if holder is not None:
                check_turn_lease(conn, session_id, holder, lease_ttl_s, self.clock())
            if refuse_closed:
                refuse_closed_compression_parent(conn, session_id)
            if len(rows) == 1:
                appended = (
                    hot.append_in_one_statement(conn, rows[0], tool_calls) if one_statement
                    else hot.append_one(conn, rows[0], tool_calls)
                )
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
            raise constraint_error(
                self.store.dialect, exc, f"session {session_id!r} does not exist",
                f"appending to {session_id!r}",
            ) from exc

    @writes
    def append_delegation_delivery(
        self, session_id: str, content: Any, metadata: Mapping[str, Any]
    ) -> int:
        """iot 0.22.2's once-only record of a detached API result (an async delegation's
        completion) in a session, between client turns: a user row of ``display_kind``
        ``async_delegation_complete`` (``hidden`` when ``metadata`` sets
        ``presentation_suppressed``) whose ``display_metadata`` is ``metadata``. Its identity
        is ``metadata``'s ``delegation_id`` (required: else ``ValueError``) with its
        ``delivery_notice`` (absent: ``""``; None never matches, as iot's ``= NULL``): when
        the session, or a session it continues after compression (a replay after rotation),
        already holds that delivery, its row id is answered and nothing is written. Check and
        insert share the write transaction, so two gateways cannot both write it. Else the
        row is appended, refused while a turn is in flight in the conversation
        (:class:`~sessionstore.errors.SessionTurnLeaseLostError`) or when compression closed
        the session (:class:`~sessionstore.errors.CompressionSessionClosedError`). The new
        row's id. ``metadata`` that is no mapping is a ``TypeError``."""
        if not isinstance(metadata, Mapping):
            raise TypeError(f"metadata must be a dict, not {type(metadata).__name__}")
        delegation_id = metadata.get("delegation_id")
        if not delegation_id:
            raise ValueError("Delegation delivery requires a stable delegation_id")
        notice = metadata.get("delivery_notice", "")
        kind = HIDDEN_KIND if metadata.get("presentation_suppressed") else DELIVERY_KIND
        session_id = validation.identifier(session_id, "session_id")
        message = self.prepare_message(
            "user", content, display_kind=kind, display_metadata=dict(metadata)
        )
        row = message_rows(session_id, [message], time.time())[0]
        hot = self._hot_writes

        def run(conn: Connection) -> int:
            lineage = [session_id, *_compression_parents(conn, session_id)]
            delivered = (
                select(messages.c.id, messages.c.display_metadata)
                .where(
                    messages.c.session_id.in_(lineage),
                    messages.c.display_kind.in_((DELIVERY_KIND, HIDDEN_KIND)),
                    messages.c.display_metadata.like("%delegation%"),
                )
                .order_by(messages.c.id)
            )
            for message_id, stored in conn.execute(delivered):
                if _same_delivery(stored, delegation_id, notice):
                    return int(message_id)
            refuse_live_turn_lease(conn, session_id, self.clock())
            refuse_closed_compression_parent(conn, session_id)
            appended = hot.append_one(conn, row, 0)
            if appended is None:
                if session_exists(conn, session_id):
                    raise ValueOutOfRangeError(
                        f"session {session_id!r}: its message count would pass 2**63 - 1; "
                        "nothing was written"
                    )
                raise UnknownSessionError(f"session {session_id!r} does not exist")
            return appended

        return self.store.write(run)

    # -- reading --------------------------------------------------------------------------
    @reads
    def get_messages(
        self,
        session_id: str,
        include_inactive: bool = False,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[MessageRecord]:
        """The session's messages in order; rewound and compaction-archived rows only with
        ``include_inactive``. As Hermes 0.19: with ``limit`` at most that many rows from the
        ``offset``-th on (0-based, in order); ``offset`` alone pages too; a negative limit is
        no limit and a negative offset is 0 (SQLite's reading of both)."""
        rows = self.get_message_rows(session_id, include_inactive, limit, offset)
        return list(starmap(MessageRecord, rows))

    @reads
    def get_message_rows(
        self,
        session_id: str,
        include_inactive: bool = False,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[tuple[Any, ...]]:
        """:meth:`get_messages` as the plain rows (``MESSAGE_FIELDS`` in order), for a caller
        that builds its own dicts from them (``windows.hermes_message_dicts``)."""
        if not isinstance(session_id, str) or not bindable(session_id):
            return []
        page = message_page(limit, offset)
        if page is None:
            load = self._load_messages if include_inactive else self._load_live_messages
            values: dict[str, Any] = {"session_id": session_id}
        else:
            load = self._load_message_page if include_inactive else self._load_live_message_page
            values = {"session_id": session_id, "limit": page[0], "offset": page[1]}
        return self.store.read(lambda conn: load.rows(conn, values), single_statement=True)

    @reads
    def get_message_dicts(
        self,
        session_id: str,
        include_inactive: bool = False,
        limit: int | None = None,
        offset: int = 0,
        latest: bool = False,
        after_id: int | None = None,
        include_compacted: bool = False,
        include_ancestors: bool = False,
    ) -> list[dict[str, Any]]:
        """:meth:`get_messages` as newest Hermes's dicts (``windows.hermes_message_dict``),
        built straight from a statement that reads only what the dicts show, in their key
        order (``windows.message_dicts_of_session``).

        iot 0.22.2's paging: ``latest`` pages back from the newest row (``offset`` rows
        skipped from the end, then ``limit``) and returns the page in order; ``after_id``
        (keyset paging) reads only the rows after that id, and cannot be combined with
        ``latest`` or ``offset`` (``ValueError``, as iot). ``include_compacted``: the display
        history (:mod:`.display_history`), paged after its dedupe; not with ``after_id``
        (``ValueError``, as iot).

        iot's ``include_ancestors``: a session that continues others after compression
        (iot's ``_resume_lineage_ids``: :func:`.lineage.compression_ancestors_of`; a branch,
        delegate, tool or reset child continues none) reads the whole lineage, oldest
        session first: the rows of every segment in id order, in the scope the other flags
        choose, deduped as a display history is (each logical message once, model-only rows
        out, :func:`.display_history.dedupe_generations`), then paged; any other session
        reads as without it. Not with ``after_id`` (``ValueError``, as iot)."""
        if after_id is not None and (latest or offset):
            raise ValueError("after_id is incompatible with latest/offset paging")
        compacted = validation.flag(include_compacted, "include_compacted")
        if after_id is not None and compacted:
            raise ValueError(
                "after_id is incompatible with include_compacted (deduped display reads use"
                " offset paging)"
            )
        ancestors = validation.flag(include_ancestors, "include_ancestors")
        if after_id is not None and ancestors:
            raise ValueError(
                "after_id is incompatible with include_ancestors (merged-lineage reads use"
                " offset paging)"
            )
        after = None if after_id is None else validation.integer(after_id, "after_id")
        if not isinstance(session_id, str) or not bindable(session_id):
            return []
        page = message_page(limit, offset)
        if ancestors:
            merged = self._lineage_message_dicts(
                session_id, bool(include_inactive), compacted, page, bool(latest)
            )
            if merged is not None:
                return merged
        if compacted:
            statement = display_rows_statement(
                self.store.read_shape, MESSAGE_DICT_FIELDS, include_inactive=include_inactive
            )
            width = len(MESSAGE_DICT_FIELDS)
            shown = self.store.read(
                lambda conn: read_display_rows(conn, statement, session_id, width)
            )
            if page is not None or latest:
                count, skipped = page or (INT64_MAX, 0)
                shown = page_of(shown, count, skipped, bool(latest))
            return message_dicts_of_session(shown, session_id)
        if latest or after is not None:
            statement = _messages_of_session(
                self.store.read_shape, live_only=not include_inactive, paged=page is not None,
                fields=MESSAGE_DICT_FIELDS, newest_first=bool(latest), after_id=after is not None,
            )  # fmt: skip
            params: dict[str, Any] = {"session_id": session_id}
            if page is not None:
                params.update(limit=page[0], offset=page[1])
            if after is not None:
                params["after_id"] = max(min(after, INT64_MAX), -INT64_MAX)
            found = self.store.read(lambda conn: list(conn.execute(statement, params)))
            if latest:
                found.reverse()
            return message_dicts_of_session(found, session_id)
        if page is None:
            load = self._load_message_dicts if include_inactive else self._load_live_message_dicts
            values: dict[str, Any] = {"session_id": session_id}
        else:
            load = (
                self._load_message_dict_page if include_inactive
                else self._load_live_message_dict_page
            )  # fmt: skip
            values = {"session_id": session_id, "limit": page[0], "offset": page[1]}
        rows = self.store.read(lambda conn: load.rows(conn, values), single_statement=True)
        return message_dicts_of_session(rows, session_id)

    def _lineage_message_dicts(
        self,
        session_id: str,
        include_inactive: bool,
        include_compacted: bool,
        page: tuple[int, int] | None,
        latest: bool,
    ) -> list[dict[str, Any]] | None:
        """:meth:`get_message_dicts` with ``include_ancestors`` over a lineage of more than
        one session; None when ``session_id`` continues none (read as a single session)."""
        fields = ("session_id", *MESSAGE_DICT_FIELDS)
        statement = lineage_rows_statement(
            self.store.read_shape, fields, include_inactive=include_inactive,
            include_compacted=include_compacted,
        )  # fmt: skip
        width = len(fields)

        def run(conn: Connection) -> list[Any] | None:
            lineage = [*compression_ancestors_of(conn, session_id), session_id]
            if len(lineage) == 1:
                return None
            rows = list(conn.execute(statement, {"ids": lineage}))
            return [row[:width] for row in dedupe_generations(rows, width)]

        shown = self.store.read(run)
        if shown is None:
            return None
        if page is not None or latest:
            count, skipped = page or (INT64_MAX, 0)
            shown = page_of(shown, count, skipped, latest)
        return [
            message
            for owner, rows in groupby(shown, key=itemgetter(0))
            for message in message_dicts_of_session([row[1:] for row in rows], str(owner))
        ]

    @reads
    def get_lineage_conversation(
        self, session_ids: Sequence[str], include_inactive: bool = False
    ) -> list[tuple[str, ConversationRow]]:
        """The replay columns of several sessions' messages in one read, in insertion (id)
        order across them, each with its session's id (a resume's lineage: one SELECT feeds
        both its model and display histories, as in Hermes 0.19)."""
        wanted = [one for one in session_ids if isinstance(one, str) and bindable(one)]
        if not wanted:
            return []
        if len(wanted) == 1:  # the common case, on the prebuilt read
            return [(wanted[0], row) for row in self.get_conversation(wanted[0], include_inactive)]
        statement = (
            select(
                messages.c.session_id,
                *self.store.read_shape.columns(messages, CONVERSATION_FIELDS),
            )
            .where(messages.c.session_id.in_(wanted))
            .order_by(messages.c.id)
        )
        if not include_inactive:
            statement = statement.where(messages.c.active == 1)
        return self.store.read(
            lambda conn: [
                (str(row[0]), ConversationRow._make(row[1:])) for row in conn.execute(statement)
            ]
        )

    @reads
    def get_display_conversation_rows(
        self, session_ids: Sequence[str], include_inactive: bool = False
    ) -> list[tuple[Any, ...]]:
        """iot 0.22.2's ``include_compacted`` replay rows (``CONVERSATION_FIELDS`` in order):
        the display history (:mod:`.display_history`) of these sessions taken together, in id
        order across them, as iot dedupes a lineage's rows as one."""
        wanted = [one for one in session_ids if isinstance(one, str) and bindable(one)]
        if not wanted:
            return []
        statement = display_rows_statement(
            self.store.read_shape, CONVERSATION_FIELDS, include_inactive=include_inactive
        )
        width = len(CONVERSATION_FIELDS)

        def run(conn: Connection) -> list[tuple[Any, ...]]:
            rows = [row for one in wanted for row in conn.execute(statement, {"session_id": one})]
            rows.sort(key=lambda row: int(row[width]))  # the id column the dedupe reads
            return [tuple(row[:width]) for row in dedupe_generations(rows, width)]

        return self.store.read(run)

    @reads
    def get_resume_rows(
        self, session_ids: Sequence[str], session_id: str
    ) -> tuple[list[ConversationRow], list[tuple[str, ConversationRow]]]:
        """A resume's two histories from one read of its lineage ``session_ids``, as iot
        0.22.2's ``get_resume_conversations`` makes them: the live rows of ``session_id``
        (what the model is fed: the compacted transcript) and the lineage's display history
        (:mod:`.display_history`: its live and compaction-archived rows, each logical message
        once), each row with its session's id."""
        wanted = [one for one in session_ids if isinstance(one, str) and bindable(one)]
        if not wanted:
            return [], []
        fields = ("session_id", *CONVERSATION_FIELDS)
        statement = lineage_rows_statement(
            self.store.read_shape, fields, include_inactive=False, include_compacted=True
        )
        width = len(fields)

        def run(conn: Connection) -> list[Any]:
            return list(conn.execute(statement, {"ids": wanted}))

        rows = self.store.read(run)
        live = [
            ConversationRow._make(row[1:width])
            for row in rows
            if row[0] == session_id and is_live(row, width)
        ]
        shown = [
            (str(row[0]), ConversationRow._make(row[1:width]))
            for row in dedupe_generations(rows, width)
        ]
        return live, shown

    @reads
    def get_conversation(
        self, session_id: str, include_inactive: bool = False
    ) -> list[ConversationRow]:
        """Only the columns needed to replay a session to a model, in order (live rows only,
        unless ``include_inactive``)."""
        return list(map(ConversationRow._make, self.get_conversation_rows(session_id,
                                                                          include_inactive)))

    @reads
    def get_conversation_rows(
        self,
        session_id: str,
        include_inactive: bool = False,
        width: int = CONVERSATION_WIDTHS.snapshot,
    ) -> list[tuple[Any, ...]]:
        """:meth:`get_conversation` as the plain rows (``CONVERSATION_FIELDS`` in order): a
        replay unpacks each row once, and a record per row was garbage to collect. ``width``
        (one of ``CONVERSATION_WIDTHS``) reads only the first ``width`` columns."""
        if not isinstance(session_id, str) or not bindable(session_id):
            return []
        load = self._load_conversations.get((not include_inactive, width))
        if load is None:
            raise ValueError(f"width must be one of {tuple(CONVERSATION_WIDTHS)}, not {width!r}")
        return self.store.read(
            lambda conn: load.rows(conn, {"session_id": session_id}), single_statement=True
        )

    def iter_messages(self, conn: Connection, session_id: str) -> Iterator[MessageRecord]:
        """Stream one session's messages in order, on the caller's connection (for export)."""
        streaming = conn.execution_options(yield_per=1000)
        for row in streaming.execute(
            _messages_of_session(self.store.read_shape), {"session_id": session_id}
        ):
            yield MessageRecord(*row)

    @reads
    def message_count(self, session_id: str | None = None) -> int:
        """Messages of one session, or of all (``None``, or as Hermes an empty id)."""
        statement = select(func.count()).select_from(messages)
        if session_id is not None and session_id != "":
            if not matchable(session_id):
                return 0
            statement = statement.where(messages.c.session_id == session_id)
        return int(self.store.read(lambda conn: conn.execute(statement).scalar_one()))

    @reads
    def message_identities(
        self,
        session_id: str,
        row_ids: Sequence[int] = (),
        message_uids: Sequence[str] = (),
        *,
        live_only: bool = False,
    ) -> list[MessageIdentity]:
        """The identity of the session's rows named by id or by ``message_uid`` (live ones only
        with ``live_only``), in id order: what iot 0.22.2's batch append stamps back on the
        caller's dicts, and how it knows a dict it was handed again is already stored."""
        if not isinstance(session_id, str) or not bindable(session_id):
            return []
        ids = sorted({one for one in row_ids if type(one) is int and 0 < one <= INT64_MAX})
        uids = sorted({one for one in message_uids if isinstance(one, str) and bindable(one)})
        if not ids and not uids:
            return []
        named = []
        if ids:
            named.append(messages.c.id.in_(ids))
        if uids:
            named.append(messages.c.message_uid.in_(uids))
        statement = (
            select(
                messages.c.id, messages.c.role, messages.c.active, messages.c.timestamp,
                messages.c.message_uid, messages.c.tool_call_uids, messages.c.tool_call_uid,
            )
            .where(messages.c.session_id == session_id, or_(*named))
            .order_by(messages.c.id)
        )  # fmt: skip
        if live_only:
            statement = statement.where(messages.c.active == 1)
        return self.store.read(
            lambda conn: [MessageIdentity._make(row) for row in conn.execute(statement)]
        )

    @reads
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
            .limit(fixed_count(1))
        )
        return self.store.read(lambda conn: conn.execute(statement).first() is not None)

    @reads
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

    @writes
    def set_latest_user_api_content(self, session_id: str, content: Any, api_content: Any) -> int:
        """Hermes 0.19's backfill of the ``api_content`` sidecar: set on the newest live user
        message of the session, only when its stored content is ``content`` as an append
        stores it (a guard against a racing rewrite); rows changed (0 or 1)."""
        session_id = validation.identifier(session_id, "session_id")
        expected = self.stored_content(content)
        sidecar = self._text(api_content, "api_content")
        newest_user = (
            select(messages.c.id)
            .where(
                messages.c.session_id == session_id,
                messages.c.role == "user",
                messages.c.active == 1,
            )
            .order_by(messages.c.id.desc())
            .limit(fixed_count(1))
            .scalar_subquery()
        )
        statement = (
            update(messages)
            .where(messages.c.id == newest_user, messages.c.content.is_not_distinct_from(expected))
            .values(api_content=sidecar)
        )
        return int(self.store.write(lambda conn: conn.execute(statement).rowcount))

    # -- clearing -------------------------------------------------------------------------
    @writes
    def clear_messages(self, session_id: str) -> None:
        session_id = validation.identifier(session_id, "session_id")

        def run(conn: Connection) -> None:
            before_rows_change(conn, [session_id])
            conn.execute(delete(messages).where(messages.c.session_id == session_id))
            conn.execute(
                update(sessions)
                .where(sessions.c.id == session_id)
                .values(message_count=0, tool_call_count=0)
            )

        self.store.write(run)


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


# Insertion (id) order, as every Hermes release reads a session: time.time() is not monotonic
# (NTP steps, VM or laptop resume), and a tool result stamped before its call must still come
# after it, or the replayed conversation is refused by the provider.
@functools.cache
def _messages_of_session(
    shape: ReadShape,
    *,
    live_only: bool = False,
    paged: bool = False,
    fields: Sequence[str] = MESSAGE_FIELDS,
    newest_first: bool = False,
    after_id: bool = False,
) -> TextClause:
    # The page's LIMIT and OFFSET are written in as numbers (statements.literal_count).
    order = "id DESC" if newest_first else "id"
    if paged:
        order += " LIMIT :limit OFFSET :offset"
    where = _of_session(live_only) + (" AND id > :after_id" if after_id else "")
    statement = plain_select(messages, fields, where, order_by=order, shape=shape)
    if not paged:
        return statement
    return statement.bindparams(literal_count("limit"), literal_count("offset"))


def _message_dict_rows_of_session(
    shape: ReadShape, *, live_only: bool = False, paged: bool = False
) -> TextClause:
    return _messages_of_session(
        shape, live_only=live_only, paged=paged, fields=MESSAGE_DICT_FIELDS
    )


def message_page(limit: Any, offset: Any) -> tuple[int, int] | None:
    """Hermes 0.19's ``get_messages`` paging as ``(limit, offset)``, or None when it does not
    page (no ``limit`` and no ``offset``). ``int()``-able values as Hermes binds them; a
    negative (or absent) limit is no limit, a negative offset is 0, as SQLite reads both."""
    if limit is None and not offset:
        return None
    count = INT64_MAX if limit is None else row_count_or_all(limit, "limit")
    return count, row_count(offset, "offset")


def row_count_or_all(value: Any, name: str) -> int:
    """:func:`.shared.row_count`, except that a negative value means no limit (SQLite's
    reading of a negative LIMIT)."""
    counted = row_count(value, name)  # the same checks and errors
    return INT64_MAX if counted == 0 and int(value) < 0 else counted


@functools.cache
def _conversation_of_session(
    shape: ReadShape, live_only: bool = False, width: int = CONVERSATION_WIDTHS.snapshot
) -> TextClause:
    return plain_select(
        messages, CONVERSATION_FIELDS[:width], _of_session(live_only), order_by="id", shape=shape
    )


def _of_session(live_only: bool) -> str:
    return "session_id = :session_id AND active = 1" if live_only else "session_id = :session_id"


DELIVERY_KIND = "async_delegation_complete"
HIDDEN_KIND = "hidden"
"""The ``display_kind`` of a delegation delivery row (iot 0.22.2), shown or suppressed."""


def _compression_parents(conn: Connection, session_id: str) -> list[str]:
    """The sessions ``session_id`` was rotated from: up its parents while the parent ended
    ``'compression'`` (iot 0.22.2's delivery-replay walk, which tests the parent's end only),
    at most :data:`.lineage.CHAIN_CAP` long, stopping at a repeat."""
    parents: list[str] = []
    current = session_id
    for _ in range(CHAIN_CAP):
        row = conn.execute(
            select(sessions.c.parent_session_id).where(sessions.c.id == current)
        ).first()
        parent = None if row is None or row[0] is None else str(row[0])
        if parent is None or parent == session_id or parent in parents:
            break
        ended = conn.execute(
            select(sessions.c.end_reason).where(sessions.c.id == parent)
        ).scalar()
        if ended != COMPRESSION_END_REASON:
            break
        parents.append(parent)
        current = parent
    return parents


def _same_delivery(stored: Any, delegation_id: Any, notice: Any) -> bool:
    """Whether a delivery row's ``display_metadata`` is the delivery of ``delegation_id``
    with ``notice`` (iot's ``json_extract`` compares; a notice of None matches nothing)."""
    try:
        decoded = json.loads(stored) if stored else None
    except (ValueError, RecursionError):
        return False
    if not isinstance(decoded, dict) or notice is None:
        return False
    stored_notice = decoded.get("delivery_notice")
    return bool(
        decoded.get("delegation_id") == delegation_id
        and ("" if stored_notice is None else stored_notice) == notice
    )
