"""A window of messages around one message, and the session's bookends: Hermes 0.18's
``get_messages_around`` and ``get_anchored_view`` (its session-search tool pages through a
hit with them).

As in Hermes: rows are every message of the session by id, rewound and compaction-archived ones
included; the window is up to ``window`` rows before the anchor, the anchor, and up to ``window``
after; ``messages_before``/``messages_after`` count those (less than ``window`` at either end of
the session). An anchor that is not a message of that session gives an empty view. The anchored
view keeps the window's rows of ``keep_roles`` (the anchor always), and adds the session's first
and last ``bookend`` rows of those roles that lie outside the window and have text: empty
content (a tool-call-only turn) is skipped, and so is multi-part content, which Hermes's
``length(content) > 0`` skips on SQLite (its marker starts with NUL, where SQLite's ``length``
stops) and this module skips on both databases. Unlike Hermes's two locked reads, the window
and the bookends come from one snapshot.

Inputs: an id that is not text a database can hold matches nothing; the anchor must be an
``int`` (``TypeError`` otherwise; one beyond 64 bits matches nothing); ``window`` and
``bookend`` are read like a LIMIT (``row_count``: negatives are 0).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from operator import itemgetter
from typing import Any

from sqlalchemy import Select, and_, bindparam, func, select
from sqlalchemy.engine import Connection

from ..sql import validation
from ..sql.codec import decode_display_metadata, decode_json, loads, text_of_blob
from ..sql.message_content import (
    ENCODED_CONTENT_PREFIXES,
    STORED_ON_POSTGRESQL_PREFIX,
    decode_content,
)
from ..sql.read_shape import ReadShape
from ..sql.records import MESSAGE_FIELDS, MessageRecord
from ..sql.statements import fixed_count
from ..sql.tables import messages_table as messages
from ..sql.validation import bindable
from .access import reads
from .shared import RepositoryPart, row_count

DEFAULT_WINDOW = 5
DEFAULT_BOOKEND = 3
DEFAULT_KEEP_ROLES: tuple[str, ...] = ("user", "assistant")


def _empty_window() -> dict[str, Any]:
    return {"window": [], "messages_before": 0, "messages_after": 0}


def message_dict(row: Any) -> dict[str, Any]:
    """A message row as ``get_messages`` gives it (:func:`hermes_message_dict`)."""
    return hermes_message_dict(MessageRecord(*row))


def hermes_message_dict(record: MessageRecord) -> dict[str, Any]:
    """A message as newest Hermes's reads give it (iot 0.22.2's ``_row_to_message_dict``):
    every column but ``display_identity`` and ``display_order`` (its display index; raw
    bytes no JSON encoder takes), ``_compressed_summary`` only where it is set (as ``True``,
    last), content, tool calls and ``display_metadata`` decoded (iot's
    ``_decode_display_metadata``: a JSON object, else None)."""
    message = record.to_dict()
    del message["display_identity"], message["display_order"]
    if message.pop("_compressed_summary"):
        message["_compressed_summary"] = True
    message["content"] = decode_content(message["content"])
    if message["tool_calls"]:
        message["tool_calls"] = decode_json(message["tool_calls"], "tool_calls", record.id, [])
    if message["display_metadata"] is not None:
        message["display_metadata"] = decode_display_metadata(message["display_metadata"])
    return message


_HIDDEN_FIELDS = frozenset({"display_identity", "display_order", "_compressed_summary"})
_SHOWN_AT = tuple(i for i, name in enumerate(MESSAGE_FIELDS) if name not in _HIDDEN_FIELDS)
_SHOWN_FIELDS = tuple(MESSAGE_FIELDS[i] for i in _SHOWN_AT)
_COMPRESSED_SUMMARY_AT = MESSAGE_FIELDS.index("_compressed_summary")


def hermes_message_dicts(rows: Iterable[Sequence[Any]]) -> list[dict[str, Any]]:
    """Plain message rows (``MESSAGE_FIELDS`` in order) as :func:`hermes_message_dict` gives
    each, the same keys in the same order (see :func:`message_dicts_of_session`)."""
    shown = itemgetter(*_SHOWN_AT)
    summary_at = _COMPRESSED_SUMMARY_AT
    return [
        _decoded(dict(zip(_SHOWN_FIELDS, shown(row))), row[summary_at], row[0])  # noqa: B905
        for row in rows
    ]


MESSAGE_DICT_FIELDS = (
    *(name for name in _SHOWN_FIELDS if name != "session_id"),
    "_compressed_summary",
)
"""The columns :func:`message_dicts_of_session` reads, in its dicts' key order: every shown
column but ``session_id`` (the caller's id, which the rows matched), then
``_compressed_summary``. Neither ``display_identity`` nor ``display_order`` is read."""
_DICT_KEYS = MESSAGE_DICT_FIELDS[:-1]
# Filling a copy of a dict that already has every key skips the resizes of a dict built key
# by key (27 keys: three), and the statement's own column order needs no reordering.
_EMPTY_MESSAGE: dict[str, Any] = dict.fromkeys(_SHOWN_FIELDS)


def message_dicts_of_session(
    rows: Iterable[Sequence[Any]], session_id: str
) -> list[dict[str, Any]]:
    """Rows of ``MESSAGE_DICT_FIELDS`` read for ``session_id`` as :func:`hermes_message_dict`
    gives each, the same keys in the same order.

    Built in C as far as it goes (a template's copy, filled from the row by ``zip``), and
    Python looks only at the keys it decodes: a record and its ``to_dict`` per row cost more
    than SQLite's reading the rows of a long conversation. ``session_id`` is the id the rows
    matched with ``=``, so it is the stored value itself (text equal to text is the same
    text) and the statement does not read it for every row."""
    messages: list[dict[str, Any]] = []
    keep = messages.append
    keys = _DICT_KEYS
    empty = _EMPTY_MESSAGE
    prefixes = ENCODED_CONTENT_PREFIXES
    for row in rows:
        message = empty.copy()
        message.update(zip(keys, row))  # noqa: B905 - the row's last column is read below
        message["session_id"] = session_id
        content = message["content"]
        if (
            row[-1]
            or message["tool_calls"]
            or message["display_metadata"] is not None
            or (
                content.startswith(prefixes) if isinstance(content, str)
                else type(content) is bytes
            )
        ):
            message = _decoded(message, row[-1], row[0])
        keep(message)
    return messages


def _decoded(message: dict[str, Any], compressed_summary: Any, message_id: Any) -> dict[str, Any]:
    """``message`` with its summary mark added and its content, tool calls and display
    metadata decoded, as Hermes gives them."""
    if compressed_summary:
        message["_compressed_summary"] = True
    content = message["content"]
    if type(content) is bytes:  # a text cell stored as a BLOB (salvaged files)
        content = message["content"] = text_of_blob(content)
    if isinstance(content, str) and content.startswith(ENCODED_CONTENT_PREFIXES):
        message["content"] = decode_content(content)
    tool_calls = message["tool_calls"]
    if tool_calls:
        try:
            message["tool_calls"] = loads(tool_calls)
        except (ValueError, TypeError):  # the warning, and the default, as everywhere
            message["tool_calls"] = decode_json(tool_calls, "tool_calls", message_id, [])
    if message["display_metadata"] is not None:
        message["display_metadata"] = decode_display_metadata(message["display_metadata"])
    return message


def _columns(shape: ReadShape) -> list[Any]:
    return shape.columns(messages, MESSAGE_FIELDS)


@functools.cache
def _anchor() -> Select[Any]:
    return (
        select(messages.c.id)
        .where(messages.c.id == bindparam("anchor"), messages.c.session_id == bindparam("sid"))
        .limit(fixed_count(1))
    )


@functools.cache
def _before(shape: ReadShape) -> Select[Any]:
    return (
        select(*_columns(shape))
        .where(messages.c.session_id == bindparam("sid"), messages.c.id <= bindparam("anchor"))
        .order_by(messages.c.id.desc())
        .limit(bindparam("count"))
    )


@functools.cache
def _after(shape: ReadShape) -> Select[Any]:
    return (
        select(*_columns(shape))
        .where(messages.c.session_id == bindparam("sid"), messages.c.id > bindparam("anchor"))
        .order_by(messages.c.id)
        .limit(bindparam("count"))
    )


def _has_text() -> Any:
    content = messages.c.content
    marker = STORED_ON_POSTGRESQL_PREFIX
    return and_(func.length(content) > 0, func.substr(content, 1, len(marker)) != marker)


def _bookend(shape: ReadShape, roles: list[str] | None, *, head: bool) -> Select[Any]:
    conditions = [messages.c.session_id == bindparam("sid"), _has_text()]
    if head:
        conditions.append(messages.c.id < bindparam("edge"))
    else:
        conditions.append(messages.c.id > bindparam("edge"))
    if roles is not None:
        conditions.append(messages.c.role.in_(roles))
    order = messages.c.id if head else messages.c.id.desc()
    return select(*_columns(shape)).where(*conditions).order_by(order).limit(bindparam("count"))


def _anchor_id(value: Any) -> int | None:
    anchor = validation.integer(value, "around_message_id")
    if not validation.INT64_MIN <= anchor <= validation.INT64_MAX:
        return None  # no row has it
    return anchor


def _roles(keep_roles: Any) -> list[str] | None:
    if keep_roles is None:
        return None
    if isinstance(keep_roles, str):
        return [keep_roles] if bindable(keep_roles) else []
    if not isinstance(keep_roles, Iterable):
        raise TypeError(f"keep_roles must be a tuple of roles or None, not "
                        f"{type(keep_roles).__name__}")  # fmt: skip
    return [role for role in keep_roles if isinstance(role, str) and bindable(role)]


def _around(
    conn: Connection, shape: ReadShape, session_id: str, anchor: int, window: int
) -> tuple[list[Any], list[Any]]:
    """The rows up to and with the anchor (newest first) and after it, or two empty lists."""
    keys = {"sid": session_id, "anchor": anchor}
    if conn.execute(_anchor(), keys).first() is None:
        return [], []
    before = conn.execute(_before(shape), {**keys, "count": min(window + 1, validation.INT64_MAX)})
    after = conn.execute(_after(shape), {**keys, "count": window})
    return list(before), list(after)


class WindowsPart(RepositoryPart):
    """The windowed message reads of the repository."""

    @reads
    def get_messages_around(
        self, session_id: str, around_message_id: int, window: int = DEFAULT_WINDOW
    ) -> dict[str, Any]:
        anchor = _anchor_id(around_message_id)
        size = row_count(window, "window")
        if anchor is None or not bindable(session_id):
            return _empty_window()
        shape = self.store.read_shape
        before, after = self.store.read(
            lambda conn: _around(conn, shape, session_id, anchor, size)
        )
        return _window_of(before, after)

    @reads
    def get_anchored_view(
        self,
        session_id: str,
        around_message_id: int,
        window: int = DEFAULT_WINDOW,
        bookend: int = DEFAULT_BOOKEND,
        keep_roles: tuple[str, ...] | None = DEFAULT_KEEP_ROLES,
    ) -> dict[str, Any]:
        anchor = _anchor_id(around_message_id)
        size = row_count(window, "window")
        ends = row_count(bookend, "bookend")
        roles = _roles(keep_roles)
        empty = {**_empty_window(), "bookend_start": [], "bookend_end": []}
        if anchor is None or not bindable(session_id):
            return empty
        shape = self.store.read_shape

        def run(conn: Connection) -> tuple[list[Any], list[Any], list[Any], list[Any]]:
            before, after = _around(conn, shape, session_id, anchor, size)
            if not before or ends == 0:
                return before, after, [], []
            first_id, last_id = before[-1][0], (after[-1] if after else before[0])[0]
            head = conn.execute(
                _bookend(shape, roles, head=True),
                {"sid": session_id, "edge": first_id, "count": ends},
            ).all()
            tail = conn.execute(
                _bookend(shape, roles, head=False),
                {"sid": session_id, "edge": last_id, "count": ends},
            ).all()
            return before, after, list(head), list(reversed(tail))

        before, after, head, tail = self.store.read(run)
        if not before:
            return empty
        view = _window_of(before, after)
        if roles is not None:
            kept = set(roles)
            view["window"] = [
                message for message in view["window"]
                if message["id"] == anchor or message["role"] in kept
            ]  # fmt: skip
        view["bookend_start"] = [message_dict(row) for row in head]
        view["bookend_end"] = [message_dict(row) for row in tail]
        return view


def _window_of(before: list[Any], after: list[Any]) -> dict[str, Any]:
    return {
        "window": [message_dict(row) for row in [*reversed(before), *after]],
        "messages_before": max(0, len(before) - 1),
        "messages_after": len(after),
    }
