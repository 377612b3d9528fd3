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

import re
from typing import Any, Final

STEER_DISPLAY_KIND: Final = "steer"
"""iot's ``agent.prompt_builder.STEER_DISPLAY_KIND``: a typed ``/steer`` is human input."""
SUMMARY_TEXT_START: Final = "[CONTEXT "
"""What each of iot 0.22.2's compaction summary prefixes (current, legacy, historical)
starts with."""
SUMMARY_MARKERS: Final = (
    "[END OF PRIOR CONTEXT \u2014 COMPACTION SUMMARY BELOW]",
    "--- END OF CONTEXT SUMMARY \u2014 respond to the message below, not the summary above ---",
)
"""iot's ``_MERGED_SUMMARY_DELIMITER`` and ``_SUMMARY_END_MARKER``: a row holding one carries
a summary merged with other text."""
_MEMORY_CONTEXT = (
    re.compile(r"<\s*memory-context\s*>[\s\S]*?</\s*memory-context\s*>", re.IGNORECASE),
    re.compile(
        r"\[System note:\s*The following is recalled memory context,\s*NOT new user input\.\s*"
        r"Treat as (?:informational background data|authoritative reference data[^\]]*)\.\]\s*",
        re.IGNORECASE,
    ),
    re.compile(r"</?\s*memory-context\s*>", re.IGNORECASE),
)
"""iot's ``sanitize_context`` patterns, in its order."""
_TEXT_PART_TYPES = frozenset({"text", "input_text"})


def sanitize_context(text: str) -> str:
    """iot's ``agent.memory_manager.sanitize_context``: recalled memory blocks, their system
    note and stray fence tags removed."""
    for pattern in _MEMORY_CONTEXT:
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
    return text.lstrip().startswith(SUMMARY_TEXT_START) or any(
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


__all__ = [
    "STEER_DISPLAY_KIND",
    "is_user_turn",
    "live_content",
    "may_carry_summary",
    "sanitize_context",
]
