"""Search on SQLite: FTS5 for words, the FTS5 trigram index (or a scan) for substrings.

Word search is Hermes's query: ``messages_fts MATCH`` ranked by bm25 (``rank``), with
``snippet()``. Substring search, for CJK text the word tokenizer cannot split, uses the
``messages_fts_trigram`` index (Hermes v10's name, revision 0013)
for needles of three or more characters, and a
``LIKE`` scan otherwise: for shorter needles (a trigram index cannot answer them) and on files
without the index (a SQLite older than 3.34 at migration time).

A query the FTS5 parser rejects answers "no match" instead of raising; any other database
error (locked, I/O, corruption) propagates.
"""

from __future__ import annotations

from typing import Any, Final

from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import OperationalError

from .hits import (
    SNIPPET_ELLIPSIS,
    SNIPPET_END,
    SNIPPET_START,
    SUBSTRING_SNIPPET_SIDE_CHARS,
    MatchRow,
    match_row,
    substring_match_rows,
)
from .long_text import LONG_MESSAGE_CHARS, long_text_snippet, term_pattern
from .request import Page, SearchFilters, filtered_statement
from .sanitize import escape_like

TRIGRAM_TABLE: Final = "messages_fts_trigram"
"""Hermes's trigram table (revision 0013 on; 0007's ``messages_trigram`` before)."""
TRIGRAM_MIN_CHARS: Final = 3
"""A trigram index can only answer needles of at least one trigram."""
LIKE_ESCAPE: Final = "\\"
SNIPPET_TOKENS: Final = 40

_MARKERS: Final = {
    "mark_start": SNIPPET_START,
    "mark_end": SNIPPET_END,
    "ellipsis": SNIPPET_ELLIPSIS,
}

# snippet() is quadratic in the hits inside one message: long messages get their snippet cut
# in Python instead (see long_text), from their content, fetched for the page's rows only. A
# message without content (an assistant's tool calls, found by their text) gets snippet().
_WORD_SEARCH: Final = f"""
SELECT m.id, m.session_id, m.role,
       CASE WHEN COALESCE(length(m.content), 0) <= {LONG_MESSAGE_CHARS}
            THEN snippet(messages_fts, 0, :mark_start, :mark_end, :ellipsis, {SNIPPET_TOKENS})
       END,
       m.timestamp, m.tool_name, s.source, s.model, s.started_at,
       CASE WHEN length(m.content) > {LONG_MESSAGE_CHARS} THEN m.content END
FROM messages_fts
JOIN messages AS m ON m.id = messages_fts.rowid
JOIN sessions AS s ON s.id = m.session_id
WHERE messages_fts MATCH :query {{filters}}
ORDER BY {{order}}
LIMIT :limit OFFSET :offset
"""

_ANY_WORD_MATCH: Final = """
SELECT 1
FROM messages_fts
JOIN messages AS m ON m.id = messages_fts.rowid
JOIN sessions AS s ON s.id = m.session_id
WHERE messages_fts MATCH :query {filters}
LIMIT 1
"""

_HAS_TRIGRAM_TABLE: Final = text(
    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = :name"
).bindparams(name=TRIGRAM_TABLE)

# Substring hits, from the trigram index or a LIKE scan, get their snippet from instr() around
# the first occurrence: one pass over the message. FTS5's snippet() over the trigram table
# scores every candidate window against every hit, which is quadratic in the hits inside one
# message (4.7 s for a 32k-character message of one repeated character; minutes for
# megabytes, in C code that cannot be interrupted, holding a read transaction).
# SQLite's LIKE and lower() both fold ASCII letters only, so instr() over lower() finds the
# very occurrence LIKE matched (the trigram tokenizer folds more; a hit instr() cannot place
# is shown without markers, see substring_snippet). The text around it is cut from the
# page's rows only.
_SIDE = SUBSTRING_SNIPPET_SIDE_CHARS
_SUBSTRING_SEARCH: Final = f"""
SELECT page.id, page.session_id, page.role, page.timestamp, page.tool_name, page.source,
       page.model, page.started_at, page.hit_start,
       CASE WHEN page.hit_start > 0 THEN substr(m.content, max(1, page.hit_start - {_SIDE}),
                                               page.hit_start - max(1, page.hit_start - {_SIDE}))
       END AS text_before,
       CASE WHEN page.hit_start > 0 THEN substr(m.content, page.hit_start, length(:needle))
       END AS hit_text,
       CASE WHEN page.hit_start > 0
            THEN substr(m.content, page.hit_start + length(:needle), {_SIDE + 1})
            ELSE substr(m.content, 1, {2 * _SIDE + 1})
       END AS text_after
FROM (
    SELECT m.id, m.session_id, m.role, m.timestamp, m.tool_name, s.source, s.model,
           s.started_at, instr(lower(m.content), lower(:needle)) AS hit_start
    {{candidates}} {{filters}}
    ORDER BY {{order}}
    LIMIT :limit OFFSET :offset
) AS page
JOIN messages AS m ON m.id = page.id
ORDER BY {{page_order}}
"""

_TRIGRAM_CANDIDATES: Final = f"""
    FROM {TRIGRAM_TABLE}
    JOIN messages AS m ON m.id = {TRIGRAM_TABLE}.rowid
    JOIN sessions AS s ON s.id = m.session_id
    WHERE {TRIGRAM_TABLE} MATCH :phrase"""

_LIKE_CANDIDATES: Final = f"""
    FROM messages AS m
    JOIN sessions AS s ON s.id = m.session_id
    WHERE (m.content LIKE :pattern ESCAPE '{LIKE_ESCAPE}'
           OR m.tool_name LIKE :pattern ESCAPE '{LIKE_ESCAPE}'
           OR m.tool_calls LIKE :pattern ESCAPE '{LIKE_ESCAPE}')"""


class FTS5Search:
    """The SQLite search backend (see the module docstring)."""

    def word_matches(
        self, conn: Connection, query: str, filters: SearchFilters, page: Page
    ) -> list[MatchRow]:
        statement = filtered_statement(
            _WORD_SEARCH, filters, conn, order=filters.order("messages_fts.rank")
        )
        try:
            rows = conn.execute(statement, {"query": query, **_MARKERS, **page.params}).all()
        except OperationalError as exc:
            if not is_query_error(exc):
                raise
            return []
        terms = term_pattern(query) if any(row[9] is not None for row in rows) else None
        return [
            match_row(
                row[0], row[1], row[2],
                row[3] if row[9] is None else long_text_snippet(row[9], terms),
                row[4], row[5], row[6], row[7], row[8],
            )
            for row in rows
        ]  # fmt: skip

    def has_word_match(self, conn: Connection, query: str, filters: SearchFilters) -> bool:
        statement = filtered_statement(_ANY_WORD_MATCH, filters, conn)
        try:
            return conn.execute(statement, {"query": query}).first() is not None
        except OperationalError as exc:
            if not is_query_error(exc):
                raise
            return False

    def substring_matches(
        self, conn: Connection, needle: str, filters: SearchFilters, page: Page
    ) -> list[MatchRow]:
        if len(needle) >= TRIGRAM_MIN_CHARS and self._has_trigram_index(conn):
            rows = self._trigram_matches(conn, needle, filters, page)
            if rows is not None:
                return rows
        return self._like_matches(conn, needle, filters, page)

    def _has_trigram_index(self, conn: Connection) -> bool:
        return conn.execute(_HAS_TRIGRAM_TABLE).first() is not None

    def _trigram_matches(
        self, conn: Connection, needle: str, filters: SearchFilters, page: Page
    ) -> list[MatchRow] | None:
        """Hits from the trigram index; None when this SQLite cannot read the index."""
        statement = filtered_statement(
            _SUBSTRING_SEARCH,
            filters,
            conn,
            candidates=_TRIGRAM_CANDIDATES,
            order=filters.time_order(),
            page_order=filters.time_order("page"),
        )
        params = {"needle": needle, "phrase": fts5_phrase(needle), **page.params}
        try:
            rows = conn.execute(statement, params).all()
        except OperationalError as exc:
            # e.g. "no such tokenizer": a file indexed by a newer SQLite than this one.
            if not is_query_error(exc):
                raise
            return None
        return substring_match_rows(rows)

    def _like_matches(
        self, conn: Connection, needle: str, filters: SearchFilters, page: Page
    ) -> list[MatchRow]:
        statement = filtered_statement(
            _SUBSTRING_SEARCH,
            filters,
            conn,
            candidates=_LIKE_CANDIDATES,
            order=filters.time_order(),
            page_order=filters.time_order("page"),
        )
        params: dict[str, Any] = {"needle": needle, "pattern": like_pattern(needle), **page.params}
        return substring_match_rows(conn.execute(statement, params))


def fts5_phrase(needle: str) -> str:
    """``needle`` as one FTS5 string: a trigram phrase query matches it as a substring."""
    return '"' + needle.replace('"', '""') + '"'


def like_pattern(needle: str) -> str:
    return "%" + escape_like(needle, LIKE_ESCAPE) + "%"


# Messages of the errors SQLite raises for a query it cannot run as written (FTS5 syntax, an
# unknown column or tokenizer, a missing index table), as opposed to the database's state.
_QUERY_ERROR_MARKERS: Final = (
    "fts5",
    "syntax error",
    "unterminated string",
    "no such",
    "unknown special query",
    "tokeni",
    "expression tree",
    "parser stack",
)


def is_query_error(exc: OperationalError) -> bool:
    message = str(exc.orig).lower()
    return any(marker in message for marker in _QUERY_ERROR_MARKERS)
