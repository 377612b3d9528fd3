"""``search_messages``: the one entry point, the same flow on every database.

1. Check the arguments (:mod:`.request`) and sanitize the query; nothing to search -> ``[]``.
2. Word search through the database's backend, best match first.
3. If that found nothing and the query holds CJK characters, substring search, newest first
   (Hermes's CJK fallback; here served by an index where the database has one).
4. Attach each hit's context in a fixed number of statements (:mod:`.context`).

A page past the end of the word results stays empty: the fallback runs only when the word
search has no match at all, so paging never mixes the two result sets.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable, Mapping
from typing import Final, Protocol

from sqlalchemy import inspect
from sqlalchemy.engine import Connection, Engine

from .context import fetch_context
from .fts5 import FTS5Search
from .hits import MatchRow, SearchHit
from .postgres import PostgreSQLSearch
from .request import Page, SearchFilters, make_filters, make_page
from .sanitize import contains_cjk, sanitize_fts5_query


class SearchBackend(Protocol):
    def word_matches(
        self, conn: Connection, query: str, filters: SearchFilters, page: Page
    ) -> list[MatchRow]:
        """One page of hits for a sanitized FTS5 query, best first; a bad query finds nothing."""

    def has_word_match(self, conn: Connection, query: str, filters: SearchFilters) -> bool:
        """Whether :meth:`word_matches` would find anything on any page."""

    def substring_matches(
        self, conn: Connection, needle: str, filters: SearchFilters, page: Page
    ) -> list[MatchRow]:
        """One page of messages containing ``needle`` (case-insensitively), newest first."""


# NUL cannot be bound on PostgreSQL and a lone surrogate cannot be encoded; neither is in any
# stored message (the write path refuses or replaces both).
_UNSEARCHABLE: Final = re.compile("[\x00\ud800-\udfff]")

# The one place that maps a database to its search code (keyed by SQLAlchemy's dialect name).
BACKENDS: Final[Mapping[str, Callable[[], SearchBackend]]] = {
    "sqlite": FTS5Search,
    "postgresql": PostgreSQLSearch,
}


_MESSAGE_STATES: weakref.WeakKeyDictionary[Engine, bool] = weakref.WeakKeyDictionary()


def has_message_states(conn: Connection) -> bool:
    """Whether ``messages`` has Hermes's ``active``/``compacted`` columns (revisions 0018 and
    0020 on); a store at an older revision is searched without the state filter. Asked once
    per engine: a store's engine is made after its migration."""
    engine = conn.engine
    known = _MESSAGE_STATES.get(engine)
    if known is None:
        columns = {column["name"] for column in inspect(conn).get_columns("messages")}
        known = {"active", "compacted"} <= columns
        _MESSAGE_STATES[engine] = known
    return known


def backend_for(conn: Connection) -> SearchBackend:
    name = conn.dialect.name
    try:
        return BACKENDS[name]()
    except KeyError:
        raise ValueError(f"no message search for database {name!r}") from None


def search_messages(
    conn: Connection,
    query: str,
    *,
    source_filter: list[str] | None = None,
    exclude_sources: list[str] | None = None,
    role_filter: list[str] | None = None,
    limit: int = 20,
    offset: int = 0,
    include_inactive: bool = False,
    sort: str | None = None,
) -> list[SearchHit]:
    """Messages matching ``query``: FTS5 query syntax, any text accepted (see ``sanitize``).

    Returns at most ``limit`` hits after skipping ``offset``, each with a highlighted
    ``snippet`` and its context; never the full content. Any ``str`` query returns a list (NUL
    characters, lone surrogates, unbalanced syntax, LIKE wildcards, huge text). Raises
    ``TypeError`` for a query that is not a ``str``, a limit or offset that is not an ``int``,
    and filters that are not lists of ``str`` (see :mod:`.request` for the filter rules).
    Database failures (locked, unreachable) propagate; the caller's store handles them.
    Rewound messages (``active=0, compacted=0``) are left out unless ``include_inactive``.
    ``sort`` ``'newest'``/``'oldest'`` orders word hits by time instead of relevance
    (substring hits are newest first unless ``'oldest'``); any other value is a ValueError.
    """
    if not isinstance(query, str):
        raise TypeError(f"query must be a str, not {type(query).__name__}")
    page = make_page(limit, offset)
    filters = make_filters(
        source_filter,
        exclude_sources,
        role_filter,
        searchable_only=not include_inactive and has_message_states(conn),
        sort=sort,
    )
    sanitized = sanitize_fts5_query(query)
    if page is None or filters.matches_nothing or not sanitized:
        return []
    backend = backend_for(conn)
    rows = backend.word_matches(conn, sanitized, filters, page)
    if not rows and contains_cjk(query):
        rows = _substring_fallback(conn, backend, query, sanitized, filters, page)
    context = fetch_context(conn, [row.id for row in rows])
    return [row.with_context(context.get(row.id, [])) for row in rows]


def _substring_fallback(
    conn: Connection,
    backend: SearchBackend,
    query: str,
    sanitized: str,
    filters: SearchFilters,
    page: Page,
) -> list[MatchRow]:
    needle = substring_needle(query)
    if not needle:
        return []
    if page.offset > 0 and backend.has_word_match(conn, sanitized, filters):
        return []  # past the last page of word results, not a query without word results
    return backend.substring_matches(conn, needle, filters, page)


def substring_needle(query: str) -> str:
    """The literal text a substring search looks for: the query as typed, minus what no
    stored message can contain (NUL, lone surrogates) and, as in Hermes, surrounding
    whitespace and double quotes (a quoted ``"数据库"`` means the same text)."""
    return _UNSEARCHABLE.sub("", query).strip().strip('"').strip()
