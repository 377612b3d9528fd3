"""A query holding CJK text, read as substrings to find: terms, ``OR`` and ``NOT``.

CJK text has no spaces between its words, so a query with CJK characters is answered by
substring, as newest Hermes does: every term must occur somewhere in the message (content,
tool name or tool calls), in any order (``deploy 数据库`` finds "数据库 ... deploy"). Decisions:

- terms are separated by whitespace; a double-quoted run is one term, spaces included;
- ``OR`` between terms means either; terms side by side (or joined by ``AND``) must all occur,
  and ``AND`` binds tighter than ``OR``, as in FTS5 (``a b OR c`` is ``(a AND b) OR c``);
- ``NOT term`` excludes messages holding it (a hyphen is text, not an operator); a group made
  only of excluded terms is dropped, as FTS5 refuses a bare ``NOT``;
- double quotes around a bare term and a trailing ``*`` (a prefix is already a substring) are
  dropped; quotes inside a term are text;
  matching is the database's ``LIKE``/``ILIKE`` (case folded for ASCII on SQLite).

Each dialect's search index narrows the candidates with its CJK index (:func:`index_tokens`
says what a term needs from a bigram index) and verifies every term against the text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from .sanitize import cjk_positions, contains_cjk, is_cjk_at

# NUL cannot be bound on PostgreSQL and a lone surrogate cannot be encoded; neither is in any
# stored message (the write path refuses or replaces both).
_UNSEARCHABLE: Final = re.compile("[\x00\ud800-\udfff]")
_TERM: Final = re.compile(r'"([^"]*)"?|(\S+)')
_OPERATORS: Final = frozenset({"AND", "OR", "NOT"})
MAX_TERMS: Final = 64
"""More terms than this are ignored (each is one LIKE per candidate row)."""
CACHED_QUERY_CHARS: Final = 200
"""Queries up to this long are parsed and planned once (an agent repeats its queries); longer
ones every time: kept, a caller's distinct long queries would hold their texts (and each
index's copies of them) for the life of the process, a pasted megabyte each."""


@dataclass(frozen=True, slots=True)
class Term:
    text: str
    excluded: bool = False

    @property
    def has_cjk(self) -> bool:
        return contains_cjk(self.text)


@dataclass(frozen=True, slots=True)
class SubstringQuery:
    groups: tuple[tuple[Term, ...], ...]
    """Alternatives (OR), each a conjunction of terms (every included one must occur)."""

    @property
    def terms(self) -> tuple[Term, ...]:
        return tuple(term for group in self.groups for term in group)

    @property
    def cacheable(self) -> bool:
        """Whether what a search derives from this query may be kept for the next one
        (:data:`CACHED_QUERY_CHARS`)."""
        return sum(len(term.text) for term in self.terms) <= CACHED_QUERY_CHARS

    @property
    def indexable(self) -> bool:
        """Whether every alternative names a CJK term a CJK index can look up."""
        return all(any(t.has_cjk and not t.excluded for t in group) for group in self.groups)

    @property
    def snippet_term(self) -> str:
        """The text a snippet is centred on: the first included CJK term (else the first)."""
        included = [term for group in self.groups for term in group if not term.excluded]
        return next((term.text for term in included if term.has_cjk), included[0].text)


def parse_substring_query(query: str) -> SubstringQuery | None:
    """The query's terms (see the module docstring); None when nothing is left to find."""
    cleaned = _UNSEARCHABLE.sub("", query)
    groups: list[list[Term]] = [[]]
    exclude_next = False
    count = 0
    for match in _TERM.finditer(cleaned):
        quoted, bare = match.group(1), match.group(2)
        if bare is not None and bare in _OPERATORS:
            if bare == "OR":
                groups.append([])
                exclude_next = False
            elif bare == "NOT":
                exclude_next = True
            continue
        text = quoted if quoted is not None else bare.strip('"').rstrip("*")
        if not text.strip() or count >= MAX_TERMS:
            continue
        groups[-1].append(Term(text, excluded=exclude_next))
        exclude_next = False
        count += 1
    kept = tuple(
        tuple(group) for group in groups if any(not term.excluded for term in group)
    )
    return SubstringQuery(kept) if kept else None


def index_tokens(text: str) -> list[tuple[str, bool]]:
    """What a bigram index must hold for ``text`` to occur: for each CJK character, it and the
    character after it, or, for the last character, the character alone as a prefix
    (``True``: match any token starting with it). The last character's prefix is left out
    when a CJK character precedes it: that one's bigram already holds it, and every CJK
    character of a text gives a token starting with it, so the prefix would find no other
    rows (and a prefix query merges the lists of every token it starts: 84 against 40 us for
    a three-character term on the bench's quick corpus)."""
    tokens: list[tuple[str, bool]] = []
    # Only the CJK characters are visited (one regex scan, not one call per character: a
    # 10 MB query of ASCII was ~1 CPU s here).
    for index in cjk_positions(text):
        if index + 1 < len(text):
            tokens.append((text[index : index + 2], False))
        elif index == 0 or not is_cjk_at(text, index - 1):
            tokens.append((text[index], True))
    return tokens
