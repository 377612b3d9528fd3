"""The caller's search arguments, checked once and turned into the SQL both backends share.

Every backend query names ``messages`` ``m`` and ``sessions`` ``s``, so the filter clauses
below fit all of them. Decisions:

- a filter of ``None`` filters nothing; an empty inclusion list (``source_filter=[]``,
  ``role_filter=[]``) matches nothing, the way ``IN ()`` would; an empty exclusion list
  excludes nothing;
- a filter value no row can hold (a NUL character, a lone surrogate: the write path refuses
  both in identifiers) is dropped before it reaches the driver, which could not encode it;
- a wrong type (a bare ``str`` instead of a list, a non-``str`` item, a non-``int`` limit) is
  a ``TypeError``;
- ``limit <= 0`` means no results, a negative ``offset`` counts as 0, and both are capped at
  the largest value the databases' 64-bit ``LIMIT``/``OFFSET`` accept.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final

from sqlalchemy import TextClause, bindparam, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError

from ..dialects import dialect_for, json_list
from ..sql.statements import HotReads
from ..sql.validation import bindable, integer

MAX_ROW_COUNT: Final = 2**63 - 1
SORT_ORDERS: Final = (None, "newest", "oldest")

# Ranking scores every match, so a common word cost time linear in the store (34.7 ms at 100k
# messages, 329 ms at 1M on SQLite, issue 31). Best-match-first therefore ranks the newest
# RANK_WINDOW matches, on every database (each index finds them its own way); the order within
# the window is the database's score. Decision and relevance figures: docs/search.md
# ("Ranking window"). Read at each call (tests and the scale bench change it).
RANK_WINDOW: Final = 4000
ONE_STATEMENT_OFFSET: Final = 200
"""The deepest ``offset`` a best-first word page is read at in one statement (SQLite's
``_WORD_RANKED_PAGE``; deeper, the page's ids are chosen first)."""


@dataclass(frozen=True, slots=True)
class Page:
    limit: int
    offset: int

    @property
    def params(self) -> dict[str, int]:
        return {"limit": self.limit, "offset": self.offset}


@dataclass(frozen=True, slots=True)
class SearchFilters:
    sources: tuple[str, ...] | None = None
    excluded_sources: tuple[str, ...] = ()
    roles: tuple[str, ...] | None = None
    sort: str | None = None
    """None: best match first (substring hits: newest first); 'newest' or 'oldest': by time."""
    searchable_only: bool = False
    """Leave out rewound messages (``active=0, compacted=0``); compaction-archived ones stay
    searchable, as in Hermes (its default ``m.active = 1 OR m.compacted = 1``)."""
    shown_only: bool = False
    """Leave out rows ``display_kind = 'hidden'`` (iot 0.22.2: model-facing scaffolding the
    person never saw), whatever ``searchable_only`` says."""
    started_after: float | None = None
    """iot 0.22.2's ``after_ts``: only sessions started at or after it."""
    started_before: float | None = None
    """iot 0.22.2's ``before_ts``: only sessions started before it."""

    @property
    def matches_nothing(self) -> bool:
        return self.sources == () or self.roles == ()

    @property
    def by_session(self) -> bool:
        """Whether a clause reads the hit's session (``s``): the matches must be joined to
        ``sessions`` first."""
        return (
            self.sources is not None or bool(self.excluded_sources)
            or self.started_after is not None or self.started_before is not None
        )  # fmt: skip

    def order(self, relevance: str, alias: str = "m") -> str:
        """The ORDER BY of a word search: ``relevance`` unless a time order was asked for."""
        if self.sort is None:
            return relevance
        return self.time_order(alias)

    def time_order(self, alias: str = "m") -> str:
        direction = "ASC" if self.sort == "oldest" else "DESC"
        return f"{alias}.timestamp {direction}, {alias}.id {direction}"

    def sql(self, list_sql: Callable[[str], str]) -> str:
        """``AND ...`` clauses to append to a ``WHERE`` (empty when nothing is filtered).

        Each list is one JSON parameter (``list_sql`` is the dialect's
        :meth:`~sessionstore.dialects.StoreDialect.json_list_sql`), so a filter of 100,000
        values is one parameter, not 100,000 (more than PostgreSQL's protocol accepts).
        """
        clauses = []
        if self.sources is not None:
            clauses.append(f"AND s.source IN {list_sql('sources')}")
        if self.excluded_sources:
            clauses.append(f"AND s.source NOT IN {list_sql('excluded_sources')}")
        if self.roles is not None:
            clauses.append(f"AND m.role IN {list_sql('roles')}")
        if self.searchable_only:
            clauses.append("AND (m.active = 1 OR m.compacted = 1)")
        if self.shown_only:
            clauses.append("AND COALESCE(m.display_kind, '') <> 'hidden'")
        if self.started_after is not None:
            clauses.append("AND s.started_at >= :started_after")
        if self.started_before is not None:
            clauses.append("AND s.started_at < :started_before")
        return " ".join(clauses)

    def values(self) -> dict[str, Any]:
        """The parameters :meth:`sql` refers to, each list as one JSON text."""
        values: dict[str, Any] = {}
        if self.started_after is not None:
            values["started_after"] = self.started_after
        if self.started_before is not None:
            values["started_before"] = self.started_before
        if self.sources is not None:
            values["sources"] = json_list(self.sources)
        if self.excluded_sources:
            values["excluded_sources"] = json_list(self.excluded_sources)
        if self.roles is not None:
            values["roles"] = json_list(self.roles)
        return values

    def bind(self, statement: TextClause) -> TextClause:
        """Bind the values :meth:`sql` refers to (each list as one JSON text)."""
        return statement.bindparams(
            *(bindparam(name, value=value) for name, value in self.values().items())
        )


def ranks_in_window(filters: SearchFilters, page: Page) -> bool:
    """Whether best match first ranks the newest :data:`RANK_WINDOW` matches only: not for a
    time order (which sorts by time, not score), nor for a page reaching past half the window
    (paging stays consistent: every page of a query uses one window). A query whose filters
    leave fewer of the window's matches than the page asks for is ranked over every match."""
    return filters.sort is None and page.limit + page.offset <= RANK_WINDOW // 2


def filtered_statement(
    sql_template: str, filters: SearchFilters, conn: Connection, **fragments: str
) -> TextClause:
    """``sql_template`` with ``{filters}`` replaced by the filter clauses (values bound) and
    any other ``{name}`` by the trusted SQL text in ``fragments``."""
    list_sql = dialect_for(conn).json_list_sql
    return filters.bind(_text(sql_template.format(filters=filters.sql(list_sql), **fragments)))


def filtered_rows(
    conn: Connection,
    sql_template: str,
    filters: SearchFilters,
    params: dict[str, Any],
    **fragments: str,
) -> list[tuple[Any, ...]]:
    """The rows of :func:`filtered_statement`'s statement, run on the driver's cursor.

    A search runs two or three statements for a page of 20 rows: SQLAlchemy's execution and
    result machinery cost about 0.2 ms a statement, a third of a small store's whole search.
    Each statement text is compiled once per engine (:class:`~sessionstore.sql.statements.
    HotReads`); driver errors come back as SQLAlchemy's exception classes, as from
    ``conn.execute``.
    """
    return hot_rows(conn, filtered_sql(conn, sql_template, filters, **fragments),
                    {**params, **filters.values()})


def filtered_sql(
    conn: Connection, sql_template: str, filters: SearchFilters, **fragments: str
) -> str:
    """:func:`filtered_statement`'s text (its values, ``filters.values()``, left to bind)."""
    # The text is formatted once per shape: formatting a 3 KB template cost 20-50 us a search,
    # and a text made anew is hashed anew by each cache it is looked up in.
    key = (
        sql_template, conn.dialect.name, filters.sources is None, bool(filters.excluded_sources),
        filters.roles is None, filters.searchable_only, filters.shown_only,
        filters.started_after is None,
        filters.started_before is None, *fragments.items(),
    )  # fmt: skip
    sql = _FORMATTED.get(key)
    if sql is None:
        if len(_FORMATTED) >= _FORMATTED_SHAPES:
            _FORMATTED.clear()
        list_sql = dialect_for(conn).json_list_sql
        sql = _FORMATTED[key] = sql_template.format(filters=filters.sql(list_sql), **fragments)
    return sql


_FORMATTED: dict[tuple[Any, ...], str] = {}
_FORMATTED_SHAPES: Final = 1024


_HOT_READS: weakref.WeakKeyDictionary[Engine, dict[str, HotReads]] = weakref.WeakKeyDictionary()
_HOT_READS_PER_ENGINE: Final = 512


def hot_rows(conn: Connection, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Rows of the trusted SQL text ``sql`` (``:name`` parameters) on the driver's cursor.

    Where a program listens to the engine's cursor events (statement logging, tracing, the
    tests' statement logs), the statement goes through SQLAlchemy instead, so it is seen.
    """
    if conn.dispatch.before_cursor_execute or conn.dispatch.after_cursor_execute:
        return [tuple(row) for row in conn.execute(_text(sql), params)]
    engine = conn.engine
    statements = _HOT_READS.get(engine)
    if statements is None:
        statements = _HOT_READS[engine] = {}
    statement = statements.get(sql)
    if statement is None:
        if len(statements) >= _HOT_READS_PER_ENGINE:
            statements.clear()
        statement = statements[sql] = HotReads(conn.dialect, _text(sql))
    return statement.rows(conn, params)


class PreparedRead:
    """A statement of :func:`hot_rows` with its values, in the driver's form for one dialect
    (its text with any counts written in, its parameters in the driver's order), made once
    (:func:`prepared_read`) and run by :func:`prepared_rows`. What ``hot_rows`` derives on
    every call (the engine's statement, the merged values, their order) is done here once:
    about 40 us of a cold 3-character CJK search (``scripts/bench_search_cpu.py``)."""

    __slots__ = ("dialect", "driver_params", "driver_sql", "params", "sql")

    def __init__(self, conn: Connection, sql: str, params: dict[str, Any]) -> None:
        compiled = HotReads(conn.dialect, _text(sql)).compiled
        self.sql = sql
        self.params = params
        self.dialect = conn.dialect
        self.driver_sql = compiled.sql_for(params)
        self.driver_params = compiled.parameters(params)


def prepared_read(conn: Connection, sql: str, params: dict[str, Any]) -> PreparedRead:
    """``sql`` (trusted text, ``:name`` parameters) with ``params``, prepared for the dialect
    of ``conn``; run only on connections of that dialect (:func:`prepared_rows`)."""
    return PreparedRead(conn, sql, params)


def prepared_rows(conn: Connection, read: PreparedRead) -> list[tuple[Any, ...]]:
    """The rows of ``read`` on the driver's cursor of ``conn`` (whose dialect it was prepared
    for), as :func:`hot_rows` returns them: through SQLAlchemy where a program listens to
    the engine's cursor events; driver errors as SQLAlchemy's exception classes."""
    if conn.dispatch.before_cursor_execute or conn.dispatch.after_cursor_execute:
        return [tuple(row) for row in conn.execute(_text(read.sql), read.params)]
    dialect = read.dialect
    # The pool's DB-API connection: the driver's own on the (synchronous) drivers a store
    # uses; ``driver_connection`` asks the dialect for it through two properties each call.
    cursor: Any = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(read.driver_sql, read.driver_params)
        rows: list[tuple[Any, ...]] = cursor.fetchall()
    except dialect.loaded_dbapi.Error as exc:
        raise DBAPIError.instance(
            read.driver_sql, None, exc, dialect.loaded_dbapi.Error, dialect=dialect,
        ) from exc  # fmt: skip
    finally:
        cursor.close()
    return rows


@lru_cache(maxsize=512)
def _text(sql: str) -> TextClause:
    # Parsing the bind parameters out of a long statement costs about half a millisecond: a
    # search shape (template, fragments, filter kinds) is parsed once.
    return text(sql)


def make_page(limit: Any, offset: Any) -> Page | None:
    """The page to fetch, or None when ``limit`` asks for no rows."""
    limit = integer(limit, "limit")
    offset = integer(offset, "offset")
    if limit <= 0:
        return None
    return Page(limit=min(limit, MAX_ROW_COUNT), offset=min(max(offset, 0), MAX_ROW_COUNT))


def make_filters(
    source_filter: Iterable[str] | None,
    exclude_sources: Iterable[str] | None,
    role_filter: Iterable[str] | None,
    *,
    searchable_only: bool = False,
    shown_only: bool = False,
    sort: str | None = None,
    started_after: Any = None,
    started_before: Any = None,
) -> SearchFilters:
    if sort not in SORT_ORDERS:
        raise ValueError(f"sort must be one of None, 'newest', 'oldest', not {sort!r}")
    excluded = _storable_values(exclude_sources, "exclude_sources")
    return SearchFilters(
        sources=_storable_values(source_filter, "source_filter"),
        excluded_sources=excluded or (),
        roles=_storable_values(role_filter, "role_filter"),
        searchable_only=searchable_only,
        shown_only=shown_only,
        sort=sort,
        started_after=_start_bound(started_after, "after_ts"),
        started_before=_start_bound(started_before, "before_ts"),
    )


def _start_bound(value: Any, name: str) -> float | None:
    """iot 0.22.2's ``after_ts``/``before_ts`` as it binds them (``int(value)``: whole
    seconds, a fraction cut toward zero); a non-number (a ``bool``, a str) is a
    ``TypeError``, a NaN or infinity a ``ValueError``. Bound as a float (the ``started_at``
    column is one on both databases; no driver takes an integer past 64 bits): a whole number
    beyond any float is an infinity, which keeps its meaning."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number of seconds, not {value!r}")
    whole = int(value)
    try:
        return float(whole)
    except OverflowError:
        return math.inf if whole > 0 else -math.inf


def _storable_values(values: Iterable[str] | None, name: str) -> tuple[str, ...] | None:
    if values is None:
        return None
    if isinstance(values, (str, bytes)):
        raise TypeError(f"{name} must be a list of str, not a single {type(values).__name__}")
    kept: dict[str, None] = {}
    for value in values:
        if not isinstance(value, str):
            raise TypeError(f"{name} items must be str, not {type(value).__name__}")
        if bindable(value):
            kept[value] = None
    return tuple(kept)



