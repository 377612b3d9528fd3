"""``search_messages``: the one entry point, the same flow on every database.

1. Check the arguments (:mod:`.request`); nothing to search -> ``[]``.
2. A query holding CJK characters is a substring search (:mod:`.terms`: every term anywhere in
   the message, newest first), as newest Hermes answers CJK; the database's search index looks
   the CJK terms up in its bigram index and verifies every term against the text. Any other
   query is sanitized (:mod:`.sanitize`) and matched as words, best match first.
3. Attach each hit's context in a fixed number of statements (:mod:`.context`).

The database's search index is the one :mod:`.registry` keeps for its dialect
(``search_index_for(dialect_for(conn))``): this module never names a database.
"""

from __future__ import annotations

import weakref

from sqlalchemy.engine import Connection, Engine

from ..dialects import dialect_for
from .context import fetch_context
from .hits import SearchHit
from .registry import search_index_for
from .request import make_filters, make_page
from .sanitize import contains_cjk, sanitize_fts5_query
from .terms import parse_substring_query

_MESSAGE_STATES: weakref.WeakKeyDictionary[Engine, bool] = weakref.WeakKeyDictionary()


def has_message_states(conn: Connection) -> bool:
    """Whether ``messages`` has Hermes's ``active``/``compacted`` columns (revisions 0018 and
    0020 on); a store at an older revision is searched without the state filter. Asked once
    per engine: a store's engine is made after its migration. The dialect's small catalog
    query, not the inspector's (which reads every column's type: 4-9 ms a store)."""
    engine = conn.engine
    known = _MESSAGE_STATES.get(engine)
    if known is None:
        columns = dialect_for(conn).column_names(conn, "messages")
        known = {"active", "compacted"} <= columns
        _MESSAGE_STATES[engine] = known
    return known


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
    if page is None or filters.matches_nothing:
        return []
    index = search_index_for(dialect_for(conn))
    if contains_cjk(query):
        substring_query = parse_substring_query(query)
        if substring_query is None:
            return []
        rows = index.substring_matches(conn, substring_query, filters, page)
    else:
        sanitized = sanitize_fts5_query(query)
        if not sanitized:
            return []
        rows = index.word_matches(conn, sanitized, filters, page)
    context = fetch_context(conn, [row.id for row in rows])
    return [row.with_context(context.get(row.id, [])) for row in rows]
