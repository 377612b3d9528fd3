"""A session's messages as the OpenAI-shaped history Hermes replays, with Hermes 0.19's rules.

Three rules shape a replayed history beyond decoding each row (:func:`message_of`):

- **Replayed user messages.** With ancestors, a user message equal to an earlier user message
  of the history, with no assistant reply (text or tool calls) in between, is left out: a
  compression continuation starts by repeating the user's pending request.
- **Background-review harness.** A persisted harness prompt of Hermes's skill/memory review
  (older builds wrote it into the real session) and the assistant reply that answered it are
  left out, so a resume never adopts the curator's role.
- **Alternation repair** (``repair_alternation``, a live replay): consecutive assistant turns
  merged (a provisional verification candidate replaced by its successor; Codex interim turns
  never merged), tool results that answer no preceding tool call (or answer one twice) dropped,
  consecutive plain-text user turns joined by a blank line (their ``api_content`` dropped, it
  no longer matches). A port of Hermes 0.19's ``repair_message_sequence``; the stored rows
  never change.

Each row's text is replayed as Hermes (0.18 to iot 0.22.2) loads it: user and assistant text
without leaked memory-context (a ``<memory-context>...</memory-context>`` block, a stray fence
tag, the "[System note: The following is recalled memory context, ...]" line: Hermes's
``sanitize_context``, so recalled memory a provider echoed is not replayed as the conversation)
and stripped of surrounding whitespace. ``api_content`` is replayed verbatim: it is the exact
text once sent, kept byte-stable for the provider's prompt cache. The stored rows never change.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ..sql.codec import decode_json
from ..sql.codec import loads as _loads
from ..sql.message_content import ENCODED_CONTENT_PREFIXES, decode_content

REVIEW_HARNESS_PREFIXES = (
    "Review the conversation above and update the skill library",
    "Review the conversation above and consider saving to memory",
)
VERIFICATION_FINISH_REASONS = frozenset({"verification_required", "verify_hook_continue"})


_HARNESS_ROLES = frozenset({"user", "system"})
_SCRUBBED_ROLES = frozenset({"user", "assistant"})
_REASONING_JSON_FIELDS = ("reasoning_details", "codex_reasoning_items", "codex_message_items")


@functools.cache
def _memory_context_patterns() -> tuple[re.Pattern[str], ...]:
    """Hermes's ``sanitize_context`` (agent/memory_manager.py), in its order: whole blocks,
    the system note, then any fence tag left. Compiled on first use."""
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


@functools.cache
def _mentions_memory_context() -> re.Pattern[str]:
    """What every pattern above needs: one scan decides whether the three run at all."""
    return re.compile(r"memory[- ]context", re.IGNORECASE)


def replayed_text(content: str) -> str:
    """User or assistant text as Hermes replays it: without leaked memory-context, stripped."""
    if _mentions_memory_context().search(content) is not None:
        for pattern in _memory_context_patterns():
            content = pattern.sub("", content)
    return content.strip()


def message_of(record: Sequence[Any]) -> dict[str, Any]:
    """One row (a ``sql.records.ConversationRow``, or a plain row of ``CONVERSATION_FIELDS``) as
    Hermes 0.19 replays it: its keys, in its order.

    The row is unpacked once into locals and each key tested on them: a replay of 2,000 rows
    spent more time in attribute lookups and helper calls than SQLite spent reading them."""
    (
        row_id, role, content, tool_call_id, tool_name, effect_disposition, tool_calls,
        finish_reason, reasoning, reasoning_content, reasoning_details, codex_reasoning_items,
        codex_message_items, platform_message_id, observed, timestamp, api_content,
    ) = record  # fmt: skip
    if isinstance(content, str):
        if content.startswith(ENCODED_CONTENT_PREFIXES):
            content = decode_content(content)
        if role in _SCRUBBED_ROLES and isinstance(content, str):
            content = replayed_text(content)
    message: dict[str, Any] = {"role": role, "content": content}
    if api_content:
        message["api_content"] = api_content
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
            message["tool_calls"] = decode_json(tool_calls, "tool_calls", row_id, [])
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
                    message[name] = decode_json(raw, name, row_id, None)
    return message


def conversation(
    rows: Iterable[Sequence[Any]],
    *,
    with_ancestors: bool,
    repair_alternation: bool,
    row_ids: bool = False,
) -> list[dict[str, Any]]:
    """The replayed history of ``rows`` (in insertion order), by the rules of the module;
    with ``row_ids`` each message also names its row (``_row_id``, iot 0.22.2's
    ``include_row_ids``: a loader that writes the messages back addresses their rows)."""
    make = _message_with_row_id if row_ids else message_of
    if with_ancestors:
        messages: list[dict[str, Any]] = []
        for row in rows:
            message = make(row)
            if _is_replayed_user_message(messages, message):
                continue
            messages.append(message)
        messages = _without_review_harness(messages)
    else:
        messages = _replayed_without_review_harness(rows, make)
    if repair_alternation and messages:
        repair_message_sequence(messages)
    return messages


def _message_with_row_id(record: Sequence[Any]) -> dict[str, Any]:
    message = message_of(record)
    message["_row_id"] = record[0]
    return message


def _replayed_without_review_harness(
    rows: Iterable[Sequence[Any]],
    make: Callable[[Sequence[Any]], dict[str, Any]] = message_of,
) -> list[dict[str, Any]]:
    """``_without_review_harness([message_of(row) for row in rows])`` in one pass: without
    ancestors nothing else looks at the rows a harness prompt and its reply leave out."""
    kept: list[dict[str, Any]] = []
    keep = kept.append
    answering_harness = False
    for row in rows:
        message = make(row)
        role = message["role"]
        if role in _HARNESS_ROLES:
            content = message["content"]
            if isinstance(content, str) and content.lstrip().startswith(
                REVIEW_HARNESS_PREFIXES
            ):
                answering_harness = True
                continue
        if answering_harness:
            answering_harness = False
            if role == "assistant":
                continue
        keep(message)
    return kept


def _is_replayed_user_message(earlier: list[dict[str, Any]], message: dict[str, Any]) -> bool:
    if message.get("role") != "user":
        return False
    content = message.get("content")
    if not isinstance(content, str) or not content:
        return False
    for previous in reversed(earlier):
        if previous.get("role") == "user" and previous.get("content") == content:
            return True
        if previous.get("role") == "assistant" and (
            previous.get("content") or previous.get("tool_calls")
        ):
            return False
    return False


def _is_review_harness(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return (
        message.get("role") in ("user", "system")
        and isinstance(content, str)
        and content.lstrip().startswith(REVIEW_HARNESS_PREFIXES)
    )


def _without_review_harness(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    kept: list[dict[str, Any]] = []
    answering_harness = False
    for message in messages:
        if _is_review_harness(message):
            answering_harness = True
            continue
        if answering_harness:
            answering_harness = False
            if message.get("role") == "assistant":
                continue
        kept.append(message)
    return kept


def _is_codex_interim(message: dict[str, Any]) -> bool:
    return bool(
        message.get("codex_reasoning_items")
        or message.get("codex_message_items")
        or message.get("finish_reason") == "incomplete"
    )


def repair_message_sequence(messages: list[dict[str, Any]]) -> int:
    """Hermes 0.19's ``repair_message_sequence`` (see the module), in place; how many
    repairs it made."""
    repairs = 0
    merged_assistants: list[dict[str, Any]] = []
    for message in messages:
        previous = merged_assistants[-1] if merged_assistants else None
        if (
            previous is not None
            and message.get("role") == "assistant"
            and previous.get("role") == "assistant"
            and not _is_codex_interim(message)
            and not _is_codex_interim(previous)
        ):
            repairs += 1
            if previous.get("finish_reason") in VERIFICATION_FINISH_REASONS:
                merged_assistants[-1] = message
                continue
            earlier_calls = list(previous.get("tool_calls") or [])
            later_calls = list(message.get("tool_calls") or [])
            if later_calls:
                previous["tool_calls"] = earlier_calls + later_calls
            elif earlier_calls:
                previous["tool_calls"] = earlier_calls
            earlier_text, later_text = previous.get("content"), message.get("content")
            if isinstance(earlier_text, str) and isinstance(later_text, str):
                previous["content"] = "\n".join(
                    part for part in (earlier_text.strip(), later_text.strip()) if part
                )
            elif not earlier_text and later_text is not None:
                previous["content"] = later_text
            if not previous.get("reasoning_content") and message.get("reasoning_content"):
                previous["reasoning_content"] = message["reasoning_content"]
            continue
        merged_assistants.append(message)

    answerable: set[Any] = set()
    answered: list[dict[str, Any]] = []
    for message in merged_assistants:
        role = message.get("role")
        if role == "assistant":
            answerable = {
                call.get(key)
                for call in message.get("tool_calls") or []
                if isinstance(call, dict)
                for key in ("id", "call_id")
                if call.get(key)
            }
            answered.append(message)
        elif role == "tool":
            call_id = message.get("tool_call_id")
            if call_id and call_id in answerable:
                answered.append(message)
                answerable.discard(call_id)  # a second result for one call is a duplicate
            else:
                repairs += 1
        else:
            if role == "user":
                answerable = set()
            answered.append(message)

    joined: list[dict[str, Any]] = []
    for message in answered:
        previous = joined[-1] if joined else None
        if previous is not None and message.get("role") == "user" and (
            previous.get("role") == "user"
        ):
            earlier_text, later_text = previous.get("content", ""), message.get("content", "")
            if isinstance(earlier_text, str) and isinstance(later_text, str):
                previous["content"] = (
                    f"{earlier_text}\n\n{later_text}"
                    if earlier_text and later_text
                    else (earlier_text or later_text)
                )
                previous.pop("api_content", None)
                repairs += 1
                continue
        joined.append(message)

    if repairs:
        messages[:] = joined
    return repairs
