"""Which stored user rows are a human's turn, and the live text of one (iot 0.22.2's rewind
targets: ``agent.context_compressor.user_originated_turn_view``).

iot's rule runs inside its agent: a ``user`` row is a turn unless it is synthetic (a
``display_kind`` other than ``steer``: notifications, hidden scaffolding), blank, or a
compaction hand-off summary. A summary row may also *carry* the live ask that followed it
(a "composite carrier"); iot splits it with its compressor's markers and nudges. We keep to
the part we can decide from the row alone:

- a row whose text may be a compaction summary or carrier (``_compressed_summary`` set, text
  starting ``[CONTEXT `` as every one of iot's summary prefixes does, or holding its merged
  delimiter or end marker) is **never** a rewind target here. Decision (kinder): iot would
  split a carrier, archive it and re-insert its summary; a split computed without iot's
  compressor could drop the summary or replay the ask twice, so such a row is left as it is
  and a rewind that needs it is refused (``ValueError``), nothing changed;
- any other ``user`` row with ``display_kind`` unset or ``steer`` and non-blank content is a
  turn; its live text is the content as a load shows it (a string stripped of iot's recalled
  memory-context blocks and fences, ``agent.memory_manager.sanitize_context``, then of
  surrounding whitespace).
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from ..sql.compaction_handoff import MERGED_SUMMARY_DELIMITER, SUMMARY_END_MARKER, SUMMARY_OPENING

STEER_DISPLAY_KIND: Final = "steer"
"""iot's ``agent.prompt_builder.STEER_DISPLAY_KIND``: a typed ``/steer`` is human input."""
SUMMARY_MARKERS: Final = (MERGED_SUMMARY_DELIMITER, SUMMARY_END_MARKER)
"""iot's ``_MERGED_SUMMARY_DELIMITER`` and ``_SUMMARY_END_MARKER``: a row holding one carries
a summary merged with other text."""
_TEXT_PART_TYPES = frozenset({"text", "input_text"})


@functools.cache
def _memory_context_patterns() -> tuple[re.Pattern[str], ...]:
    """iot's ``sanitize_context`` patterns (agent/memory_manager.py, the same since Hermes
    0.18), in its order: whole blocks, the system note, then any fence tag left. Compiled on
    first use."""
    return (
        re.compile(r"<\s*memory-context\s*>[\s\S]*?</\s*memory-context\s*>", re.IGNORECASE),
        re.compile(
            r"\[System note:\s*The following is recalled memory context,\s*NOT new user "
            r"input\.\s*Treat as (?:informational background data|authoritative reference "
            r"data[^\]]*)\.\]\s*",
            re.IGNORECASE,
        ),
        re.compile(r"</?\s*memory-context\s*>", re.IGNORECASE),
    )


def mentions_memory_context(text: str) -> bool:
    """What every pattern above needs (``memory-context`` or ``memory context``, in any case):
    one scan decides whether the three run at all. ``lower()`` and two substring tests run
    about 6x faster than the same test as an IGNORECASE pattern (every replayed message pays
    it), and find the same texts: no other character lowers to one of these letters, as
    none folds to one under IGNORECASE."""
    low = text.lower()
    return "memory-context" in low or "memory context" in low


def sanitize_context(text: str) -> str:
    """iot's ``agent.memory_manager.sanitize_context``: recalled memory blocks, their system
    note and stray fence tags removed. The one home of the rule: a replay
    (``api.conversation.message_of``, ``replayed_text``), a rewind's turn text and a
    compaction's row identity all read text through it."""
    if mentions_memory_context(text):
        for pattern in _memory_context_patterns():
            text = pattern.sub("", text)
    return text


def _text(content: Any) -> str:
    """The text of ``content`` for marker checks (iot's ``_content_text_for_contains``)."""
    if isinstance(content, list):
        parts = (part.get("text") if isinstance(part, dict) else part for part in content)
        return "\n".join(part for part in parts if isinstance(part, str) and part)
    return "" if content is None else content if isinstance(content, str) else str(content)


def may_carry_summary(content: Any, compressed_summary: Any) -> bool:
    """Whether a row may be (or carry) a compaction summary: flagged, or its text says so."""
    if compressed_summary:
        return True
    text = _text(content)
    return text.lstrip().startswith(SUMMARY_OPENING) or any(
        marker in text for marker in SUMMARY_MARKERS
    )


def _blank(content: Any) -> bool:
    """iot's ``_is_blank_user_turn`` for a non-summary row."""
    if content is None or (isinstance(content, str) and not content.strip()):
        return True
    if not isinstance(content, list):
        return False
    return all(
        (isinstance(part, str) and not part.strip())
        or (
            isinstance(part, dict) and part.get("type") in _TEXT_PART_TYPES
            and isinstance(part.get("text"), str) and not part["text"].strip()
        )
        for part in content
    )  # fmt: skip


def is_user_turn(role: Any, content: Any, display_kind: Any, compressed_summary: Any) -> bool:
    """Whether a row (content decoded) is a human's turn we may rewind to (module doc)."""
    if role != "user" or (display_kind and display_kind != STEER_DISPLAY_KIND):
        return False
    return not may_carry_summary(content, compressed_summary) and not _blank(content)


def live_content(content: Any) -> Any:
    """A turn's live payload as iot compares it (``expected_target_content``): a string
    sanitised and stripped, anything else (a multi-part list) as decoded."""
    return sanitize_context(content).strip() if isinstance(content, str) else content



# -- turns of a replayed transcript (iot 0.22.2's ``rewind_user_turn``) -----------------------

EPHEMERAL_FLAGS: Final = (
    "_empty_recovery_synthetic", "_empty_terminal_sentinel", "_thinking_prefill",
    "_verification_stop_synthetic", "_pre_verify_synthetic", "_kanban_stop_synthetic",
    "_dropped_toolcall_nudge",
)  # fmt: skip
"""iot's ``agent.session_persistence._EPHEMERAL_SCAFFOLDING_FLAGS``: an agent's in-memory
messages that never reach the store, left out of a warm history before it is compared."""
_VIEW_DROPPED_KEYS: Final = (
    "_compressed_summary", "_compressed_summary_has_user_turn", "_micro_compact_marker",
    "_db_persisted", "display_kind", "display_metadata", "api_content",
)  # fmt: skip
_DURABLE_METADATA_KEYS: Final = ("reactions",)
_IMAGE_PART_TYPES: Final = frozenset({"image", "image_url", "input_image"})
_NON_TEXT_PART_TYPES: Final = frozenset({*_IMAGE_PART_TYPES, "audio", "input_audio"})
_PART_TEXT_KEYS: Final = ("text", "content", "input_text", "output_text", "summary_text")
_RETRY_TEXT_TYPES: Final = frozenset({"text", "input_text", "output_text"})


@dataclass
class RewindOutcome:
    """What ``rewind_user_turn`` did (iot 0.22.2's ``hermes_state_rewind.RewindOutcome``)."""

    prefix: list[dict[str, Any]]
    """The history to install: the warm one's prefix when it was given, else the stored one."""
    live_view: dict[str, Any]
    """The rewound turn as the user wrote it (a retry's source)."""
    live_text: str
    """Its text: lossless with ``require_retryable``, else its display flattening."""
    rewound_count: int
    turns_undone: int


def turn_view(message: Any) -> dict[str, Any] | None:
    """The human turn a replayed message is, as the user wrote it (a copy without the
    store's and the agent's bookkeeping keys, a carrier's reactions kept), or None when it is
    none (:func:`is_user_turn`; a compaction carrier is never split: module doc)."""
    if not isinstance(message, dict):
        return None
    if not is_user_turn(
        message.get("role"), message.get("content"), message.get("display_kind"),
        message.get("_compressed_summary"),
    ):  # fmt: skip
        return None
    view = {key: value for key, value in message.items() if key not in _VIEW_DROPPED_KEYS}
    metadata = message.get("display_metadata")
    if isinstance(metadata, dict):
        durable = {key: copy.deepcopy(metadata[key]) for key in _DURABLE_METADATA_KEYS
                   if key in metadata}  # fmt: skip
        if durable:
            view["display_metadata"] = durable
    return view


def turn_indices(messages: list[dict[str, Any]]) -> list[int]:
    return [index for index, message in enumerate(messages) if turn_view(message) is not None]


def history_before(
    messages: list[dict[str, Any]], index: int
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The messages before turn ``index`` (copies) and the turn's view (iot's
    ``history_before_user_originated_turn`` without a carrier's scaffold)."""
    view = turn_view(messages[index])
    if view is None:
        raise ValueError("selected row is not a user-originated turn")
    return [dict(message) for message in messages[:index]], view


def is_ephemeral(message: Any) -> bool:
    return isinstance(message, dict) and any(message.get(flag) for flag in EPHEMERAL_FLAGS)


def comparison_content(message: dict[str, Any]) -> Any:
    """A message's content as its stored row shows it (iot's ``_comparison_content``): a
    part list as its text parts (images ``[screenshot]``) joined by newlines, a user's or
    assistant's text sanitised and stripped as a load gives it."""
    content = message.get("content")
    if isinstance(content, list):
        kept = [
            str(part.get("text", "")) if part.get("type") == "text" else "[screenshot]"
            for part in content
            if isinstance(part, dict)
            and (part.get("type") == "text" or part.get("type") in _IMAGE_PART_TYPES)
        ]
        content = "\n".join(kept) if kept else None
    if message.get("role") in ("user", "assistant") and isinstance(content, str):
        return sanitize_context(content).strip()
    return content


def retryable_text(content: Any) -> str:
    """iot's ``retryable_user_text``: the exact text a retry sends again, or a ``ValueError``
    before anything is rewound (media, unknown or annotated parts, no text)."""
    if not isinstance(content, (str, list)):
        raise ValueError("retry does not support non-text content")
    chunks: list[str] = []
    for part in [content] if isinstance(content, str) else content:
        if isinstance(part, str):
            chunks.append(part)
            continue
        if not isinstance(part, dict):
            raise ValueError("retry does not support non-text content")
        if part.get("type") not in _RETRY_TEXT_TYPES:
            raise ValueError("retry does not support media or unknown content parts")
        if set(part) - {"type", "text"}:
            raise ValueError("retry cannot losslessly flatten annotated text parts")
        if not isinstance(part.get("text"), str):
            raise ValueError("retry text parts must contain text")
        chunks.append(part["text"])
    text = "".join(chunks)
    if not text.strip():
        raise ValueError("retry found no text to send")
    return text


def flattened_text(content: Any) -> str:
    """iot's ``flatten_message_text``: the visible text of a content value."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(text for text in map(_part_text, content) if text)
    return _part_text(content) or str(content)


def _part_text(part: Any) -> str:
    if isinstance(part, str):
        return part
    if not isinstance(part, Mapping):
        return ""
    if str(part.get("type") or "").strip().lower() in _NON_TEXT_PART_TYPES:
        return ""
    for key in _PART_TEXT_KEYS:
        text = part.get(key)
        if isinstance(text, str):
            return text
    return ""


__all__ = [
    "EPHEMERAL_FLAGS",
    "STEER_DISPLAY_KIND",
    "RewindOutcome",
    "comparison_content",
    "flattened_text",
    "history_before",
    "is_ephemeral",
    "is_user_turn",
    "live_content",
    "may_carry_summary",
    "mentions_memory_context",
    "retryable_text",
    "sanitize_context",
    "turn_indices",
    "turn_view",
]
