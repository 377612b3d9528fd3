"""What a search returns: one hit per matching message, Hermes's dict shape on demand.

Both database backends produce :class:`FoundRow` tuples (SQLite's with their context, read in
the same statement; the service reads the others'), which become a :class:`SearchHit` or
Hermes's dict. :func:`substring_snippet` gives substring hits (where no full-text
``snippet()`` exists) the same look as full-text ones.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

from ..sql.codec import cell_text, stored_clock

SNIPPET_START: Final = ">>>"
SNIPPET_END: Final = "<<<"
SNIPPET_ELLIPSIS: Final = "..."
CONTEXT_CONTENT_CHARS: Final = 200
"""How much of each context message is returned (Hermes: ``content[:200]``)."""
SUBSTRING_SNIPPET_SIDE_CHARS: Final = 20
"""Characters kept on each side of a substring hit: about the 40 tokens of a trigram
``snippet()``, which counts characters."""


def substring_snippet_text_sql(position: str, needle: str) -> str:
    """The text a substring hit's snippet is cut from, as SQL both dialects share: the
    message's content where the needle is in it, else its tool calls or tool name (the search
    covers those too, and an assistant's tool-call message has no content), else the content.

    ``position`` is the dialect's 1-based ``instr``/``strpos``; ``m`` is the message's alias.
    """
    def found_in(column: str) -> str:
        return f"coalesce({position}(lower({column}), lower({needle})), 0) > 0"

    return (
        f"CASE WHEN {found_in('m.content')} THEN m.content"
        f" WHEN {found_in('m.tool_calls')} THEN m.tool_calls"
        f" WHEN {found_in('m.tool_name')} THEN m.tool_name ELSE m.content END"
    )


def substring_snippet_sql(content: str, hit_start: str, needle: str, greatest: str) -> str:
    """The three columns :func:`substring_snippet` is built from, as SQL both dialects share:
    ``text_before``, ``hit_text``, ``text_after``. Only the page's rows are cut.

    ``hit_start`` is the 1-based position of the hit in ``content`` (0: not located), found
    case-folded as the dialect's ``LIKE`` matched; ``greatest`` is the dialect's two-argument
    maximum (``max`` on SQLite, ``greatest`` on PostgreSQL).
    """
    side = SUBSTRING_SNIPPET_SIDE_CHARS
    before_from = f"{greatest}(1, {hit_start} - {side})"
    return f"""
       CASE WHEN {hit_start} > 0
            THEN substr({content}, {before_from}, {hit_start} - {before_from}) END AS text_before,
       CASE WHEN {hit_start} > 0 THEN substr({content}, {hit_start}, length({needle}))
       END AS hit_text,
       CASE WHEN {hit_start} > 0 THEN substr({content}, {hit_start} + length({needle}), {side + 1})
            ELSE substr({content}, 1, {2 * side + 1})
       END AS text_after"""


@dataclass(frozen=True, slots=True)
class ContextMessage:
    """One line of a hit's context; ``is_hit`` marks the hit itself (not part of Hermes's dict,
    and not compared: it says where the hit sits, which a caller cannot otherwise tell when the
    session has no earlier message)."""

    role: str
    content: str | None
    is_hit: bool = field(default=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {"role": self.role, "content": self.content}


ContextLine = tuple[str, str | None, bool]
"""One line of a hit's context as the indexes read it: role, the first
:data:`CONTEXT_CONTENT_CHARS` characters of its text, whether it is the hit itself."""


class FoundRow(NamedTuple):
    """A matching message as a search index found it. A named tuple, not a dataclass: a
    search builds one per hit, and its callers want either a :class:`SearchHit` (the
    repository) or Hermes's dict (``SessionDB``), not one made from the other."""

    id: int
    session_id: str
    role: str
    snippet: str
    timestamp: float | None
    """None where a damaged SQLite row holds no number
    (:func:`~sessionstore.sql.codec.stored_clock`); so ``session_started``."""
    tool_name: str | None
    source: str
    model: str | None
    session_started: float | None
    context: tuple[Any, ...] | None
    """The context's columns (``context.ContextColumns``, read with the hit or by the service;
    the service builds lines or Hermes's dicts from them); None when the index did not read
    them (the service then does)."""


@dataclass(frozen=True, slots=True)
class SearchHit:
    """A match with its context: what ``search_messages`` returns."""

    id: int
    session_id: str
    role: str
    snippet: str
    timestamp: float | None
    """None only where a damaged SQLite row holds no number there
    (:func:`~sessionstore.sql.codec.stored_clock`); so ``session_started``."""
    tool_name: str | None
    source: str
    model: str | None
    session_started: float | None
    context: list[ContextMessage]

    def to_dict(self) -> dict[str, Any]:
        """The dict Hermes's ``SessionDB.search_messages`` returns for one hit."""
        return {
            "id": self.id,
            "session_id": self.session_id,
            "role": self.role,
            "snippet": self.snippet,
            "timestamp": self.timestamp,
            "tool_name": self.tool_name,
            "source": self.source,
            "model": self.model,
            "session_started": self.session_started,
            "context": [
                {"role": message.role, "content": message.content} for message in self.context
            ],
        }


HIT_FIELDS = (
    "id", "session_id", "role", "snippet", "timestamp", "tool_name", "source", "model",
    "session_started", "context",
)  # fmt: skip
"""The keys of a hit's dict, in their order (iot 0.22.2's ``_SEARCH_MESSAGE_RESULT_FIELDS``)."""


def hit_fields(fields: Any) -> tuple[str, ...] | None:
    """iot 0.22.2's ``fields`` of ``search_messages``: None (every key), or the keys named, in
    :data:`HIT_FIELDS` order; a lone ``str`` is a ``TypeError``, an unknown key a
    ``ValueError``."""
    if fields is None:
        return None
    if isinstance(fields, (str, bytes)):
        raise TypeError("search fields must be a collection of field names, not a string")
    requested = set(fields)
    unknown = requested.difference(HIT_FIELDS)
    if unknown:
        raise ValueError(f"unknown search result field(s): {', '.join(sorted(map(str, unknown)))}")
    return tuple(field for field in HIT_FIELDS if field in requested)


def match_row(
    id_: Any,
    session_id: Any,
    role: Any,
    snippet: Any,
    timestamp: Any,
    tool_name: Any,
    source: Any,
    model: Any,
    session_started: Any,
    context: tuple[Any, ...] | None = None,
) -> FoundRow:
    """A :class:`FoundRow` from database values, normalising their Python types.

    Legacy files may hold integer timestamps (SQLite keeps what it was given), and a snippet
    of a message without text is NULL.
    """
    return FoundRow(
        int(id_), cell_text(session_id), cell_text(role),
        "" if snippet is None else cell_text(snippet), stored_clock(timestamp), tool_name,
        cell_text(source), model, stored_clock(session_started), context,
    )  # fmt: skip


def substring_snippet(
    position: int | None, before: str | None, matched: str | None, after: str | None
) -> str:
    """``[...]before>>>matched<<<after[...]`` for a hit found by substring.

    ``position`` is the 1-based start of the hit in the message (0: not located) and
    ``before`` the up to :data:`SUBSTRING_SNIPPET_SIDE_CHARS` characters in front of it.
    ``after`` is fetched one character longer than it is shown: that extra character is how a
    truncated tail is recognised. A row the database's case-insensitive match found but whose
    position lookup did not (a rare Unicode case-folding corner) comes with ``position`` 0 and
    the start of the message in ``after``; it is shown without markers rather than wrong ones.
    A message without content (found by its tool calls' text) has no position (None).
    """
    before, after = before or "", after or ""
    if position is None or position <= 0 or not matched:
        shown = 2 * SUBSTRING_SNIPPET_SIDE_CHARS
        return after[:shown] + (SNIPPET_ELLIPSIS if len(after) > shown else "")
    more_before = position > SUBSTRING_SNIPPET_SIDE_CHARS + 1
    more_after = len(after) > SUBSTRING_SNIPPET_SIDE_CHARS
    after = after[:SUBSTRING_SNIPPET_SIDE_CHARS]
    if more_before:
        before = _from_sentence_start(before)
    if more_after:
        after = _to_sentence_end(after)
    return "".join(
        (
            SNIPPET_ELLIPSIS if more_before else "",
            before,
            SNIPPET_START,
            matched,
            SNIPPET_END,
            after,
            SNIPPET_ELLIPSIS if more_after else "",
        )
    )


# Where a sentence ends: CJK and ASCII terminators, and a line break. A window cut at a
# fixed width starts or ends mid-sentence; backing off to the nearest of these (when the
# window holds one) shows whole sentences around the hit.
# Found by a compiled pattern, not a loop over the characters (two per substring hit).
SENTENCE_END: Final = re.compile("[。！？!?；;\n]")
TO_LAST_SENTENCE_END: Final = re.compile("^.*[。！？!?；;\n]", re.DOTALL)


def _from_sentence_start(before: str) -> str:
    """``before`` from just after its first sentence end (as is when it holds none)."""
    found = SENTENCE_END.search(before)
    return before if found is None else before[found.end() :].lstrip()


def _to_sentence_end(after: str) -> str:
    """``after`` up to and including its last sentence end (as is when it holds none)."""
    found = TO_LAST_SENTENCE_END.match(after)
    return after if found is None else after[: found.end()]


def substring_match_rows(rows: Iterable[Any]) -> list[FoundRow]:
    """Rows of a substring search (both backends select the same columns) as match rows."""
    return [
        match_row(
            row.id,
            row.session_id,
            row.role,
            substring_snippet(row.hit_start, row.text_before, row.hit_text, row.text_after),
            row.timestamp,
            row.tool_name,
            row.source,
            row.model,
            row.started_at,
        )
        for row in rows
    ]
