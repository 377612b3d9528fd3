"""Snippets of very long messages, cut in one pass over the text.

FTS5's ``snippet()`` (and ``highlight()``) cost time quadratic in the hits inside one
message: 0.24 s for 8,000 occurrences of a word, 15.8 s for 64,000, in C code that cannot be
interrupted and holds a read transaction. Messages up to :data:`LONG_MESSAGE_CHARS`
characters keep FTS5's snippet (Hermes's look, and bounded cost); longer ones get this:
the text around the first occurrence of a query term, about as long as a 40-token snippet,
every term occurrence inside it marked, ``...`` where text was cut.

The quadratic count is of hits, and one token is a hit of every query phrase it can start:
``word word word`` makes each ``word`` three hits, ``a*`` and ``alpha`` make ``alpha`` two. A
query of 40 repeated words kept FTS5's snippet of a 10,000-character message busy for a
minute (Hermes's own search too); the 2,048 characters a query may have, for hours. So the
length up to which FTS5 cuts the snippet is divided by that multiplicity
(:func:`snippet_chars`): a query whose phrases start on different words keeps the whole
:data:`LONG_MESSAGE_CHARS`.

Terms are found the way a reader would (case-insensitive, whole words, ``term*`` as a
prefix); FTS5's tokenizer also folds diacritics, so a hit it found that this scan cannot place
is shown as the start of the message without markers rather than as a wrong window.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from typing import Final

from .hits import SNIPPET_ELLIPSIS, SNIPPET_END, SNIPPET_START

LONG_MESSAGE_CHARS: Final = 10_000
"""Longest message whose snippet FTS5 computes (at most about 20 ms of quadratic work)."""
WORDS: Final = 40
WORDS_BEFORE: Final = 8
CHARS_BEFORE: Final = 100
CHARS_AFTER: Final = 400
"""Bounds on the text read around the hit, so a message without spaces costs the same."""

_PHRASE: Final = re.compile(r'"((?:[^"]|"")*)"')
_BARE_TERM: Final = re.compile(r"(\w+)(\*?)")
_WORD: Final = re.compile(r"\w+")
_OPERATORS: Final = frozenset({"AND", "OR", "NOT", "NEAR"})


def term_pattern(sanitized_query: str) -> re.Pattern[str] | None:
    """A pattern matching any term of a sanitized FTS5 query (None when it has none)."""
    alternatives: list[str] = []
    for phrase in _PHRASE.findall(sanitized_query):
        alternatives.extend(rf"(?<!\w){re.escape(word)}(?!\w)" for word in _WORD.findall(phrase))
    for match in _BARE_TERM.finditer(_PHRASE.sub(" ", sanitized_query)):
        word, star = match.group(1), match.group(2)
        if word in _OPERATORS:
            continue
        alternatives.append(rf"(?<!\w){re.escape(word)}" + (r"\w*" if star else r"(?!\w)"))
    if not alternatives:
        return None
    return re.compile("|".join(dict.fromkeys(alternatives)), re.IGNORECASE)


def _folded(word: str) -> str:
    """``word`` as FTS5's unicode61 tokenizer compares it: case and diacritics folded."""
    decomposed = unicodedata.normalize("NFKD", word.casefold())
    return "".join(char for char in decomposed if not unicodedata.combining(char))


def hits_per_token(sanitized_query: str) -> int:
    """How many of the query's phrases one token of a message can be a hit of, at most: the
    phrases starting with the same word (case and diacritics folded), plus every prefix term
    (``dep*`` starts on any word). 1 for a query of different words."""
    starts: list[str] = []
    prefixes = 0
    for phrase in _PHRASE.findall(sanitized_query):
        words = _WORD.findall(phrase)
        if words:
            starts.append(_folded(words[0]))
    for match in _BARE_TERM.finditer(_PHRASE.sub(" ", sanitized_query)):
        word, star = match.group(1), match.group(2)
        if word in _OPERATORS:
            continue
        if star:
            prefixes += 1
        else:
            starts.append(_folded(word))
    most = max(Counter(starts).values(), default=0)
    return max(1, most + prefixes)


def highlight_query(sanitized_query: str) -> str:
    """The query a highlighter (PostgreSQL's ``ts_headline``) is given: the query itself, or
    for one that repeats itself (:func:`hits_per_token` above 1) each of its different terms
    once, any of them (``OR``): ``ts_headline``'s cost too grows with the query's operands
    times their hits (400 repeats of one word over a 10,000-character message: minutes), and
    it marks the same words either way (told apart by case only, as PostgreSQL's "simple"
    configuration tells them)."""
    if hits_per_token(sanitized_query) == 1:
        return sanitized_query
    terms: dict[str, str] = {}
    for phrase in _PHRASE.finditer(sanitized_query):
        terms.setdefault(phrase.group(0).casefold(), phrase.group(0))
    for match in _BARE_TERM.finditer(_PHRASE.sub(" ", sanitized_query)):
        if match.group(1) not in _OPERATORS:
            terms.setdefault(match.group(0).casefold(), match.group(0))
    return " OR ".join(terms.values())


def snippet_chars(sanitized_query: str) -> int:
    """The longest message whose snippet FTS5 cuts for this query: :data:`LONG_MESSAGE_CHARS`
    divided by :func:`hits_per_token`, so its quadratic work stays that of one word in
    :data:`LONG_MESSAGE_CHARS` characters, whatever the query repeats."""
    return LONG_MESSAGE_CHARS // hits_per_token(sanitized_query)


def long_text_snippet(content: str, pattern: re.Pattern[str] | None) -> str:
    """About :data:`WORDS` words from a few before the first hit, like FTS5's 40-token
    snippet; every hit inside marked. Reads a bounded slice around the hit, whatever the
    message's length."""
    first = pattern.search(content) if pattern is not None else None
    hit = first.start() if first is not None else 0
    low = max(0, hit - CHARS_BEFORE)
    before = list(_WORD.finditer(content, low, hit))[-WORDS_BEFORE:]
    start = before[0].start() if before and first is not None else hit
    if start == low and low > 0 and before:
        start = before[1].start() if len(before) > 1 else hit  # a word cut in half: drop it
    after = list(_WORD.finditer(content, hit, min(len(content), hit + CHARS_AFTER)))
    kept = after[: WORDS - len(before)] if first is not None else after[:WORDS]
    end = kept[-1].end() if kept else min(len(content), hit + CHARS_AFTER)
    if first is not None:
        end = max(end, first.end())
    window = content[start:end]
    if pattern is not None and first is not None:
        window = pattern.sub(lambda found: f"{SNIPPET_START}{found.group(0)}{SNIPPET_END}", window)
    return (
        (SNIPPET_ELLIPSIS if start > 0 else "")
        + window
        + (SNIPPET_ELLIPSIS if end < len(content) else "")
    )
