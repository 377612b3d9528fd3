"""The latency-bounded browse of recent conversations: iot 0.22.2's
``list_recent_sessions_bounded``, which its ``session_search`` tool calls to show "what was I
doing lately" without paying for the rich listing.

The work is bounded three ways, as iot bounds it:

- **candidates**: only the ``candidate_limit`` sessions with the newest durable activity
  stamp (``COALESCE(last_activity_at, started_at)``, the order ``ix_sessions_activity``
  serves) that are not archived, hidden, delegate runs or of an excluded source;
- **lineage rows**: each candidate is walked up its compression ancestry to its root, and
  each root down its compression chain to its tips, each walk stopping at ``lineage_limit``
  rows in all (breadth first: every candidate's first step before any second step). A
  lineage whose walk stops before it reached its root, or before its tips, is left out, not
  shown half-resolved; a corrupt cycle of parents uses up its own rows and stops;
- **time**: a deadline (:meth:`~sessionstore.dialects.StoreDialect.statement_deadline`) stops
  sustained work past ``timeout_seconds`` with ``TimeoutError``.

A root is shown once, as its tip with the newest activity, keeping the root's ``started_at``
(and its title when the tip has none); the rows are newest activity first. The compression
edge is iot's ``compression_parent_edge`` (:func:`compression_parent_edge`): a child of a
parent that ended ``'compression'`` that is no branch, no delegate run and no tool run; reset
children are their own conversations and are never walked into, having a parent that ended at
a reset boundary.

Decision: the walks run level by level in Python (one statement per level), not as iot's
recursive CTE with a ``LIMIT`` in its recursive part, which PostgreSQL does not implement. The
rows a walk keeps at its ceiling are the same: SQLite's recursive queue is first in, first out,
which is breadth first in candidate order. Where one level must be cut among several children
of one session (a compression chain that forks, at the ceiling), ours keeps the children in id
order, iot in SQLite's index order (by insertion).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, func, select, text
from sqlalchemy.engine import Connection, Dialect

from ..dialects import StatementDeadline, StoreDialect, json_list
from ..sql import validation
from ..sql.codec import stored_clock
from ..sql.read_shape import ReadShape
from ..sql.statements import HotReads, literal_count
from ..sql.tables import sessions_table as sessions
from ..storage.store import Store
from .access import reads
from .lineage import (
    BRANCH_MARKER,
    COMPRESSION_END_REASON,
    DELEGATE_MARKER,
    TOOL_SOURCE,
    has_marker,
    listable_condition,
)
from .listing import first_user_text, preview_text
from .maintenance import last_active_at
from .shared import RepositoryPart

DEFAULT_LIMIT = 20
DEFAULT_TIMEOUT_S = 3.0
CANDIDATE_FLOOR = 128
"""The fewest candidates a browse preselects when not told (iot: ``max(128, limit * 8)``)."""
CANDIDATES_PER_ROW = 8
CANDIDATE_CEILING = 2048
LINEAGE_ROWS_PER_CANDIDATE = 8
LINEAGE_CEILING = 8192

_BROWSE_PARENT = "browse_parent"
_BROWSE_CHILD = "browse_child"


def compression_parent_edge(parent: Any, child: Any) -> list[ColumnElement[bool]]:
    """iot 0.22.2's ``compression_parent_edge``: ``child`` continues ``parent`` by compression.
    The parent ended ``'compression'``; the child is its child and is no branch
    (``_branched_from``), no delegate run (``_delegate_from``) and no tool run. Kept here, for
    this browse alone: the chain rules of :mod:`.lineage` answer other questions."""
    return [
        parent.c.end_reason == COMPRESSION_END_REASON,
        child.c.parent_session_id == parent.c.id,
        ~has_marker(BRANCH_MARKER, child),
        ~has_marker(DELEGATE_MARKER, child),
        func.coalesce(child.c.source, "") != TOOL_SOURCE,
    ]


def browse_bounds(
    limit: Any, candidate_limit: Any, lineage_limit: Any
) -> tuple[int, int, int]:
    """The three bounds as iot clamps them: ``limit`` at least 1; candidates
    ``max(128, limit * 8)`` when not given, at most 2048 and at least ``limit``; lineage rows
    ``min(8192, candidates * 8)`` when not given, at most 8192 and at least the candidates.
    Each is an ``int`` (a ``bool``, a float, text or None where an int is due: ``TypeError``);
    a bound past 64 bits is taken as the largest 64-bit one."""
    rows = min(max(1, validation.integer(limit, "limit")), validation.INT64_MAX)
    if candidate_limit is None:
        candidate_limit = max(CANDIDATE_FLOOR, rows * CANDIDATES_PER_ROW)
    candidates = max(rows, min(validation.integer(candidate_limit, "candidate_limit"),
                               CANDIDATE_CEILING))  # fmt: skip
    if lineage_limit is None:
        lineage_limit = min(LINEAGE_CEILING, candidates * LINEAGE_ROWS_PER_CANDIDATE)
    lineage = max(candidates, min(validation.integer(lineage_limit, "lineage_limit"),
                                  LINEAGE_CEILING))  # fmt: skip
    return rows, candidates, lineage


def browse_timeout(value: Any) -> float:
    """``timeout_seconds``: a real number (``TypeError`` otherwise, a ``bool`` included); NaN
    is a ``ValueError``; a negative one is 0 (iot: ``max(0.0, ...)``); infinity, and an int
    too large for a float, never expires."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"timeout_seconds must be a number, not {type(value).__name__}")
    try:
        seconds = float(value)
    except OverflowError:  # an int past every float: forever, or (negative) no time at all
        seconds = math.inf if value > 0 else 0.0
    if math.isnan(seconds):
        raise ValueError("timeout_seconds must not be NaN")
    return max(0.0, seconds)


def browse_excluded_sources(value: Any) -> list[str]:
    """``exclude_sources``: None or a list (tuple, set) of ``str`` (a bare ``str``, which iot
    would read as its characters, or any other type is a ``TypeError``; NUL or a lone
    surrogate a ``ValueError``)."""
    if value is None:
        return []
    if not validation.is_source_list(value):
        raise TypeError(
            f"exclude_sources must be a list of str or None, not {type(value).__name__}"
        )
    return sorted({validation.identifier(item, "exclude_sources") for item in value})


def _recency(activity: float | None) -> tuple[bool, float]:
    """A sort key for ``activity DESC`` with NULL last (as SQLite orders it)."""
    return (activity is not None, activity if activity is not None else 0.0)


class _Walk:
    """One bounded breadth-first walk: (start, node) rows, at most ``ceiling`` of them, the
    same pair never twice (iot's ``UNION``), stopping when the ceiling is reached."""

    def __init__(self, starts: Iterable[str], ceiling: int) -> None:
        self.rows: list[tuple[str, str]] = []
        self._seen: set[tuple[str, str]] = set()
        self.ceiling = ceiling
        self.frontier = [pair for pair in ((start, start) for start in starts) if self._add(pair)]

    def _add(self, pair: tuple[str, str]) -> bool:
        if pair in self._seen or self.full():
            return False
        self._seen.add(pair)
        self.rows.append(pair)
        return True

    def full(self) -> bool:
        return len(self.rows) >= self.ceiling

    def step(self, next_of: dict[str, list[str]]) -> None:
        following: list[tuple[str, str]] = []
        for start, node in self.frontier:
            for step in next_of.get(node, ()):
                if self.full():
                    self.frontier = []
                    return
                if self._add((start, step)):
                    following.append((start, step))
        self.frontier = following


# The browse's statements are built once per shape (which filters are on, the dialect's SQL
# for a JSON list), never per call, and run on the driver cursor with their values bound: an
# alias of ``sessions`` makes a proxy for each of its 62 columns, and rebuilding the walk's
# two aliases per level, the preview rule and their compiled forms cost ~20 ms a call on a
# small store (docs/performance.md, "The recent browse").


@functools.cache
def _candidates_statement(
    stamped: bool, hides: bool, excluded_list_sql: str | None, bytewise_collation: str
) -> Select[Any]:
    """The newest ``:count`` sessions a browse may start from (see the module)."""
    recency = (
        func.coalesce(sessions.c.last_activity_at, sessions.c.started_at)
        if stamped
        else sessions.c.started_at
    )
    conditions: list[Any] = [sessions.c.archived == 0, ~has_marker(DELEGATE_MARKER)]
    if hides:
        conditions.append(sessions.c.hidden == 0)
    if excluded_list_sql is not None:
        conditions.append(text(f"sessions.source NOT IN {excluded_list_sql}"))
    return (
        select(sessions.c.id)
        .where(*conditions)
        .order_by(
            recency.desc(),
            sessions.c.started_at.desc(),
            sessions.c.id.collate(bytewise_collation).desc(),
        )
        .limit(literal_count("count"))
    )


@functools.cache
def _edges_statement(nodes_list_sql: str, upward: bool) -> Select[Any]:
    """(node, step) for each node of the JSON list ``:nodes``: its compression parent
    (``upward``) or children, by the edge, in (node, step) order."""
    parent = sessions.alias(_BROWSE_PARENT)
    child = sessions.alias(_BROWSE_CHILD)
    near, far = (child, parent) if upward else (parent, child)
    return (
        select(near.c.id, far.c.id)
        .select_from(near.join(far, and_(*compression_parent_edge(parent, child))))
        .where(text(f"{near.name}.id IN {nodes_list_sql}"))
        .order_by(near.c.id, far.c.id)
    )


@functools.cache
def _activity_statement(ids_list_sql: str, stamped: bool) -> Select[Any]:
    """(id, last activity) of each session of the JSON list ``:ids``."""
    return select(sessions.c.id, last_active_at(stamped=stamped)).where(
        text(f"sessions.id IN {ids_list_sql}")
    )


@functools.cache
def _listed_roots_statement(roots_list_sql: str, hides: bool, keyed: bool) -> Select[Any]:
    """(id, started_at, title) of the sessions of the JSON list ``:roots`` a picker lists."""
    conditions: list[Any] = [
        sessions.c.archived == 0,
        listable_condition(legacy_resets=keyed),
        text(f"sessions.id IN {roots_list_sql}"),
    ]
    if hides:
        conditions.append(sessions.c.hidden == 0)
    return select(sessions.c.id, sessions.c.started_at, sessions.c.title).where(*conditions)


@functools.cache
def _tips_statement(tips_list_sql: str, read: ReadShape) -> Select[Any]:
    """The shown columns of the tips of the JSON list ``:tips``, the preview's head last."""
    return select(
        sessions.c.id,
        sessions.c.source,
        sessions.c.model,
        sessions.c.title,
        sessions.c.ended_at,
        sessions.c.end_reason,
        sessions.c.message_count,
        sessions.c.tool_call_count,
        first_user_text(read),
    ).where(text(f"sessions.id IN {tips_list_sql}"))


class RecentBrowsePart(RepositoryPart):
    """iot 0.22.2's bounded recent browse (see the module)."""

    def __init__(self, store: Store, *, clock: Callable[[], float] = time.time) -> None:
        super().__init__(store, clock=clock)
        self._browse: dict[tuple[ReadShape, bool], _BrowseStatements] = {}

    @reads
    def list_recent_sessions_bounded(
        self,
        *,
        limit: int = DEFAULT_LIMIT,
        exclude_sources: Sequence[str] | None = None,
        timeout_seconds: float = DEFAULT_TIMEOUT_S,
        candidate_limit: int | None = None,
        lineage_limit: int | None = None,
    ) -> list[dict[str, Any]]:
        """Recent conversations, newest activity first, each shown as its freshest
        compression tip: iot 0.22.2's ``list_recent_sessions_bounded`` (see the module for
        the bounds and the walk).

        Each row is iot's dict, keys in its order: ``id``, ``source``, ``model``, ``title``
        (the tip's, else the root's), ``started_at`` (the root's), ``ended_at``,
        ``end_reason``, ``message_count``, ``tool_call_count`` (the tip's), ``last_active``
        (the freshest of the tip's activity stamp and newest message, else its start: None
        when none is a trusted timestamp), ``_lineage_root_id`` (the root, when the tip is
        another session), ``preview`` (the tip's first user message, as the listing shows it)
        and ``unread`` (always False: iot works it out from a ``last_read_at`` the row does
        not carry).

        Inputs, decided: ``limit``, ``candidate_limit`` and ``lineage_limit`` are ``int``
        and clamped as iot clamps them (:func:`browse_bounds`: a limit below 1 is 1, the
        ceilings 2048 and 8192); another type is a ``TypeError``, where iot would take
        ``int()`` of anything. ``timeout_seconds`` is a real number, negative meaning 0,
        infinite never expiring, NaN a ``ValueError`` (:func:`browse_timeout`); 0 always
        times out. ``exclude_sources`` is None or a list of ``str``
        (:func:`browse_excluded_sources`); a session without a source is then left out, as
        SQL's ``NOT IN`` leaves it out for iot.

        ``TimeoutError`` when the work runs past ``timeout_seconds``: checked before each
        statement, and a running statement is interrupted by the database (SQLite: a
        progress handler, always removed afterwards; PostgreSQL: ``SET LOCAL
        statement_timeout``)."""
        rows, candidates, ceiling = browse_bounds(limit, candidate_limit, lineage_limit)
        seconds = browse_timeout(timeout_seconds)
        excluded = browse_excluded_sources(exclude_sources)
        statements = self._browse_statements(bool(excluded))
        dialect = self.store.dialect

        def run(conn: Connection) -> list[dict[str, Any]]:
            with dialect.statement_deadline(conn, seconds) as deadline:
                return _Browse(conn, deadline, statements).run(
                    rows, candidates, ceiling, excluded
                )

        return self.store.read(run)

    def _browse_statements(self, excluding: bool) -> _BrowseStatements:
        """The store's browse statements, with or without the excluded sources' filter."""
        read = self.store.read_shape
        key = (read, excluding)
        found = self._browse.get(key)
        if found is None:
            found = self._browse[key] = _BrowseStatements(
                self.store.engine.dialect, self.store.dialect, read, excluding=excluding
            )
        return found


class _BrowseStatements:
    """One store's browse statements for its read shape (each built once in the process, see
    above), compiled for its engine on first use."""

    __slots__ = ("activity", "candidates", "children", "listed_roots", "parents", "tips")

    def __init__(
        self, engine_dialect: Dialect, dialect: StoreDialect, read: ReadShape, *, excluding: bool
    ) -> None:
        stamped = read.has_column(sessions.name, "last_activity_at")
        hides = read.has_column(sessions.name, "hidden")
        keyed = read.has_column(sessions.name, "session_key")
        list_sql = dialect.json_list_sql

        def hot(statement: Select[Any]) -> HotReads:
            return HotReads(engine_dialect, statement)

        self.candidates = hot(_candidates_statement(
            stamped, hides, list_sql("excluded") if excluding else None,
            dialect.bytewise_collation,
        ))  # fmt: skip
        self.parents = hot(_edges_statement(list_sql("nodes"), True))
        self.children = hot(_edges_statement(list_sql("nodes"), False))
        self.activity = hot(_activity_statement(list_sql("ids"), stamped))
        self.listed_roots = hot(_listed_roots_statement(list_sql("roots"), hides, keyed))
        self.tips = hot(_tips_statement(list_sql("tips"), read))


class _Browse:
    """One browse on one connection, each statement after a look at the deadline."""

    def __init__(
        self, conn: Connection, deadline: StatementDeadline, statements: _BrowseStatements
    ) -> None:
        self.conn = conn
        self.deadline = deadline
        self.statements = statements

    def _run(self, statement: HotReads, parameters: dict[str, Any]) -> list[tuple[Any, ...]]:
        self.deadline.check()
        return statement.rows(self.conn, parameters)

    def run(
        self, rows: int, candidates: int, ceiling: int, excluded: list[str]
    ) -> list[dict[str, Any]]:
        chosen = self._candidates(candidates, excluded)
        if not chosen:
            return []
        roots = self._roots(chosen, ceiling)
        tips_of = self._tips(roots, ceiling)
        activity = self._activity({tip for tips in tips_of.values() for tip in tips})
        listed = self._listed_roots(list(tips_of))
        ranked: list[tuple[str, str, float | None, Any]] = []
        for root, tips in tips_of.items():
            if root not in listed:
                continue
            tip = max(tips, key=lambda tip: (_recency(activity[tip]), tip))
            ranked.append((root, tip, activity[tip], listed[root][0]))
        ranked.sort(
            key=lambda item: (_recency(item[2]), _recency(stored_clock(item[3])), item[1]),
            reverse=True,
        )
        page = ranked[:rows]
        return self._hydrate(page, listed)

    def _candidates(self, count: int, excluded: list[str]) -> list[str]:
        found = self._run(
            self.statements.candidates, {"count": count, "excluded": json_list(excluded)}
        )
        return [str(row[0]) for row in found]

    def _edges(self, nodes: Iterable[str], *, upward: bool) -> dict[str, list[str]]:
        """Each node's compression parent (``upward``) or children, by the edge; every node
        asked is a key (an empty list: none)."""
        asked = sorted(set(nodes))
        statement = self.statements.parents if upward else self.statements.children
        found: dict[str, list[str]] = {node: [] for node in asked}
        for node, step in self._run(statement, {"nodes": json_list(asked)}):
            found[str(node)].append(str(step))
        return found

    def _walk(
        self, starts: list[str], ceiling: int, *, upward: bool
    ) -> tuple[_Walk, dict[str, list[str]]]:
        walk = _Walk(starts, ceiling)
        known: dict[str, list[str]] = {}
        while True:
            unknown = {node for _, node in walk.rows if node not in known}
            if unknown:
                known.update(self._edges(unknown, upward=upward))
            if not walk.frontier or walk.full():
                return walk, known
            walk.step(known)

    def _roots(self, candidates: list[str], ceiling: int) -> list[str]:
        """The compression roots the candidates' ancestry reached within the ceiling, in the
        order the walk met them."""
        walk, parent_of = self._walk(candidates, ceiling, upward=True)
        roots: dict[str, None] = {}
        for _, node in walk.rows:
            if not parent_of[node]:
                roots[node] = None
        return list(roots)

    def _tips(self, roots: list[str], ceiling: int) -> dict[str, list[str]]:
        """Each root's tips (chain members without a continuation) its chain walk reached
        within the ceiling; a root none was reached for is absent."""
        walk, children_of = self._walk(roots, ceiling, upward=False)
        tips: dict[str, list[str]] = {}
        for root, node in walk.rows:
            if not children_of[node]:
                tips.setdefault(root, []).append(node)
        return tips

    def _activity(self, ids: set[str]) -> dict[str, float | None]:
        found = self._run(self.statements.activity, {"ids": json_list(sorted(ids))})
        return {str(row[0]): stored_clock(row[1]) for row in found}

    def _listed_roots(self, roots: list[str]) -> dict[str, tuple[Any, str | None]]:
        """The roots a picker would list (not archived or hidden, no delegate run, a root or
        a branch or reset child): their ``started_at`` as stored (text in a damaged SQLite
        row, as iot's dict; ranked as no time, :func:`stored_clock`) and title."""
        found = self._run(self.statements.listed_roots, {"roots": json_list(roots)})
        return {str(row[0]): (row[1], row[2]) for row in found}

    def _hydrate(
        self,
        page: list[tuple[str, str, float | None, Any]],
        listed: dict[str, tuple[Any, str | None]],
    ) -> list[dict[str, Any]]:
        if not page:
            return []
        found = self._run(
            self.statements.tips, {"tips": json_list(sorted({tip for _, tip, _, _ in page}))}
        )
        tip_rows = {str(row[0]): row for row in found}
        result: list[dict[str, Any]] = []
        for root, tip, activity, started in page:
            row = tip_rows[tip]  # one snapshot: the tip the walk found is there
            title = row[3] if row[3] is not None else listed[root][1]
            result.append({
                "id": tip,
                "source": row[1],
                "model": row[2],
                "title": title,
                "started_at": started,
                "ended_at": row[4],
                "end_reason": row[5],
                "message_count": row[6],
                "tool_call_count": row[7],
                "last_active": activity,
                "_lineage_root_id": root if root != tip else None,
                "preview": preview_text(row[8]),
                "unread": False,
            })  # fmt: skip
        return result
