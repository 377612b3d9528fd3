"""The display history of a session (iot 0.22.2's ``include_compacted`` reads): what a user
still sees of a conversation that in-place compaction archived.

Compaction archives the live rows (``active = 0, compacted = 1``) and writes the compacted
transcript after them, the protected tail copied into each generation (the same role,
content and timestamp at a new id). The display history is every live or
compaction-archived row (every row with ``include_inactive``), without the rows iot marks
model-only (``display_metadata.model_only``), each logical message once: rows with the same
display key (:func:`~sessionstore.sql.message_identity.display_key`) are one message, shown
by its live row, else its newest, at the place of its first row. This is iot's
``_dedupe_display_generations``, the one definition its display reads share; we compute it
on both dialects from the rows, never from SQLite's ``display_order`` index, which PostgreSQL
does not keep.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from sqlalchemy import bindparam
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import TextClause

from ..sql.message_identity import display_key
from ..sql.read_shape import ReadShape
from ..sql.statements import plain_select
from ..sql.tables import messages_table as messages
from .shared import session_exists
from .windows import MESSAGE_DICT_FIELDS, message_dicts_of_session

MODEL_ONLY_KEY = "model_only"
"""iot's ``MODEL_ONLY_DISPLAY_METADATA_KEY``: a row the model sees and a display never shows."""
DISPLAY_ROWS = "session_id = :session_id AND (active = 1 OR compacted = 1)"
"""iot's ``_DISPLAY_ACTIVE_CLAUSE``: live and compaction-archived rows, never rewound ones."""
_KEY_FIELDS = ("id", "role", "content", "timestamp", "tool_call_id", "tool_calls", "tool_name",
               "active", "display_metadata", "display_kind")  # fmt: skip

Row = TypeVar("Row", bound=Sequence[Any])


def is_model_only(display_metadata: Any) -> bool:
    if not isinstance(display_metadata, str) or not display_metadata:
        return False
    try:
        decoded = json.loads(display_metadata)
    except ValueError:
        return False
    return isinstance(decoded, dict) and bool(decoded.get(MODEL_ONLY_KEY))


def display_rows_statement(
    shape: ReadShape, fields: Sequence[str], *, include_inactive: bool = False
) -> TextClause:
    """The rows a display history is made of, in id order: ``fields`` then the columns the
    dedupe reads (so a row's first ``len(fields)`` values are the caller's)."""
    where = "session_id = :session_id" if include_inactive else DISPLAY_ROWS
    return plain_select(messages, (*fields, *_KEY_FIELDS), where, order_by="id", shape=shape)


def lineage_rows_statement(
    shape: ReadShape, fields: Sequence[str], *, include_inactive: bool, include_compacted: bool
) -> TextClause:
    """The rows of the sessions ``:ids`` (expanding) a merged-lineage read dedupes (iot
    0.22.2's ``get_messages(..., include_ancestors=True)`` over a compression lineage), in
    id order, as :func:`display_rows_statement` lays them out: every row with
    ``include_inactive``, else the display rows with ``include_compacted``, else the live."""
    where = "session_id IN :ids"
    if not include_inactive:
        where += " AND (active = 1 OR compacted = 1)" if include_compacted else " AND active = 1"
    statement = plain_select(messages, (*fields, *_KEY_FIELDS), where, order_by="id", shape=shape)
    return statement.bindparams(bindparam("ids", expanding=True))


def dedupe_generations(rows: Sequence[Row], width: int) -> list[Row]:
    """``rows`` (id order, made by :func:`display_rows_statement` with ``width`` fields of
    the caller's) as the display history: model-only rows out, one row per display key (the
    live one, else the newest), ordered by each key's first row (module doc)."""
    chosen: dict[tuple[Any, ...], Row] = {}
    rank: dict[tuple[Any, ...], tuple[int, int]] = {}
    for row in rows:
        values = dict(zip(_KEY_FIELDS, row[width:], strict=True))
        if is_model_only(values["display_metadata"]):
            continue
        key = display_key(values)
        candidate = (int(values["active"] or 0), int(values["id"]))
        if key not in rank or candidate > rank[key]:
            rank[key] = candidate
            chosen[key] = row
    return list(chosen.values())


def is_live(row: Sequence[Any], width: int) -> bool:
    """Whether a row of :func:`display_rows_statement` (``width`` fields of the caller's) is
    live, not compaction-archived."""
    return bool(row[width + _KEY_FIELDS.index("active")])


def page(
    rows: list[Row], limit: int | None, offset: int, latest: bool
) -> list[Row]:
    """iot's paging of a deduped display history (``limit`` None: all; ``latest``: from the
    newest back, returned in order)."""
    if latest:
        rows = rows[::-1]
    rows = rows[offset:] if limit is None else rows[offset : offset + limit]
    return rows[::-1] if latest else rows


def read_display_rows(
    conn: Connection, statement: TextClause, session_id: str, width: int
) -> list[Any]:
    """The display history of one session on ``conn``, as rows of the caller's fields."""
    rows = list(conn.execute(statement, {"session_id": session_id}))
    return [row[:width] for row in dedupe_generations(rows, width)]


__all__ = [
    "DISPLAY_ROWS",
    "MODEL_ONLY_KEY",
    "dedupe_generations",
    "display_message_dicts",
    "display_rows_statement",
    "expected_display_histories",
    "is_live",
    "is_model_only",
    "lineage_rows_statement",
    "page",
    "read_display_rows",
]


def display_message_dicts(
    conn: Connection, shape: ReadShape, session_id: str
) -> list[dict[str, Any]] | None:
    """The display history of one session on ``conn`` as ``get_messages(...,
    include_compacted=True)`` gives it; None when the session does not exist (iot's
    ``_display_messages_from_conn``: a fence compared with it fails closed)."""
    if not session_exists(conn, session_id):
        return None
    statement = display_rows_statement(shape, MESSAGE_DICT_FIELDS)
    rows = read_display_rows(conn, statement, session_id, len(MESSAGE_DICT_FIELDS))
    return message_dicts_of_session(rows, session_id)


def expected_display_histories(expected: Any) -> dict[str, list[Any]] | None:
    """A caller's ``expected_display_messages`` (iot 0.22.2: ``{session id: the display
    history it saw}``) as a dict of lists, or None (no fence). Anything but a mapping of
    ``str`` to a list of messages is a ``TypeError``: a mistyped fence is a caller's bug,
    not a changed history."""
    if expected is None:
        return None
    if not isinstance(expected, Mapping):
        raise TypeError("expected_display_messages must map session ids to message lists")
    fence: dict[str, list[Any]] = {}
    for session_id, history in expected.items():
        if not isinstance(session_id, str) or isinstance(history, (str, bytes, Mapping)) or (
            not isinstance(history, Sequence)
        ):
            raise TypeError("expected_display_messages must map session ids to message lists")
        fence[session_id] = list(history)
    return fence
