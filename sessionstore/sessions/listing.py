"""Finding and listing sessions: by id or prefix, counts, plain pages, and the rich listing
a picker shows (each row with its preview and last activity, a compression root projected onto
its tip), in start order or by latest activity along a compression chain; one cron job's runs,
and the id search that ranks a listing.

The listing's statements are prebuilt per filter *shape* (which filters are on, not their
values) and read on the driver cursor: a picker's page is 50 rows of 43 keys, and
SQLAlchemy's per-row processing showed. Which sessions are listed at all, and the tip a root is
projected onto, are lineage rules (:mod:`.lineage`).
"""

from __future__ import annotations

import functools
import re
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final

from sqlalchemy import (
    ColumnElement,
    Select,
    and_,
    bindparam,
    case,
    column,
    func,
    literal,
    not_,
    null,
    or_,
    select,
    text,
)
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import TextClause

from ..dialects import StoreDialect, json_list
from ..dialects.functions import indexed_alias, text_position
from ..search.sanitize import escape_like
from ..sql import validation
from ..sql.codec import cell_text, text_of_blob
from ..sql.compaction_handoff import (
    MERGED_PRIOR_CONTEXT_HEADER,
    MERGED_SUMMARY_DELIMITER,
    PREVIEW_SUMMARY_PREFIXES,
    SUMMARY_END_MARKER,
)
from ..sql.read_shape import ReadShape
from ..sql.records import SESSION_FIELDS, SessionListing, SessionRecord, session_unread
from ..sql.statements import HotReads, fixed_count, literal_count
from ..sql.tables import IDX_MESSAGES_SESSION, IDX_SESSIONS_PARENT
from ..sql.tables import messages_table as messages
from ..sql.tables import sessions_table as sessions
from ..sql.validation import SourceFilter, bindable
from ..storage.store import Store
from .access import reads
from .lineage import (
    COMPRESSION_END_REASON,
    chain_of,
    continues_sql,
    listable_condition,
    projection_tips_sql,
)
from .maintenance import last_active_at
from .shared import RepositoryPart, matchable, row_count, session_columns, source_condition

PREVIEW_LENGTH = 60
SHORT_ID_LENGTH = 8
CRON_SOURCE = "cron"
CLI_SOURCE = "cli"
"""What iot 0.22.2 counts a session without a source as."""


SKILL_SCAFFOLD_PREFIXES: Final = (
    "[IMPORTANT: The user has invoked the ",
    '[IMPORTANT: The "',
)
"""How iot 0.22.2's ``/skill`` invocation scaffold and its gateway's skill auto-load scaffold
begin (``agent.skill_commands``' ``SKILL_SCAFFOLD_SQL_LIKE`` and
``AUTO_LOAD_SCAFFOLD_SQL_LIKE``, without their ``%``)."""


class ListingPart(RepositoryPart):
    """Finding, counting and listing sessions."""

    def __init__(self, store: Store, *, clock: Callable[[], float] = time.time) -> None:
        super().__init__(store, clock=clock)
        self._hot_listings: dict[Select[Any], HotReads] = {}
        # A page's compression roots and their tips, on the driver cursor too: the list is one
        # JSON parameter, where an expanding IN would be compiled again on every call.
        roots_sql = store.dialect.json_list_sql("roots")
        members_sql = store.dialect.json_pairs_sql("member.depth", "member.id")
        self._load_tip_listings = HotReads.built_later(
            store.engine.dialect,
            lambda: _tip_listings_statement(roots_sql, members_sql, store.read_shape),
        )
        self._load_compact_tip_listings = HotReads.built_later(
            store.engine.dialect,
            lambda: _tip_listings_statement(
                roots_sql, members_sql, store.read_shape, compact=True
            ),
        )

    def _hot_listing(self, statement: Select[Any]) -> HotReads:
        hot = self._hot_listings.get(statement)
        if hot is None:
            hot = self._hot_listings[statement] = HotReads(self.store.engine.dialect, statement)
        return hot

    @reads
    def resolve_session_id(self, id_or_prefix: str) -> str | None:
        """Exact id, else the one session whose id starts with the text, else None."""
        if not isinstance(id_or_prefix, str) or not id_or_prefix or not bindable(id_or_prefix):
            return None

        def run(conn: Connection) -> str | None:
            exact = conn.execute(select(sessions.c.id).where(sessions.c.id == id_or_prefix))
            found = exact.scalar()
            if found is not None:
                return cell_text(found)
            pattern = escape_like(id_or_prefix) + "%"
            rows = conn.execute(
                select(sessions.c.id)
                .where(sessions.c.id.like(pattern, escape="\\"))
                .order_by(sessions.c.started_at.desc())
                .limit(fixed_count(2))
            ).all()
            return cell_text(rows[0][0]) if len(rows) == 1 else None

        return self.store.read(run)

    @reads
    def session_ids_with_prefix(self, prefix: str, limit: int) -> list[str]:
        """Ids that start with ``prefix``, newest session first (at most ``limit``)."""
        if not isinstance(prefix, str) or not prefix or not bindable(prefix):
            return []
        statement = (
            select(sessions.c.id)
            .where(sessions.c.id.like(escape_like(prefix) + "%", escape="\\"))
            .order_by(sessions.c.started_at.desc())
            .limit(row_count(limit, "limit"))
        )
        return self.store.read(lambda conn: [cell_text(row[0]) for row in conn.execute(statement)])

    @reads
    def short_ids(self, ids: Sequence[str], min_length: int = SHORT_ID_LENGTH) -> dict[str, str]:
        """The shortest prefix (at least ``min_length`` characters) naming each id uniquely."""
        if not ids:
            return {}
        # Bound to what substr() takes (PostgreSQL: a 32-bit length); no id is that long.
        min_length = min(max(validation.integer(min_length, "min_length"), 0), 2**31 - 1)
        heads = sorted({session_id[:min_length] for session_id in ids})
        statement = select(sessions.c.id).where(
            func.substr(sessions.c.id, 1, min_length).in_(heads)
        )
        neighbours = self.store.read(
            lambda conn: [cell_text(row[0]) for row in conn.execute(statement)]
        )
        shortest: dict[str, str] = {}
        for session_id in ids:
            length = min_length
            for other in neighbours:
                if other != session_id:
                    length = max(length, _common_prefix_length(session_id, other) + 1)
            shortest[session_id] = session_id[:length]
        return shortest

    @reads
    def session_count(
        self,
        source: SourceFilter = None,
        *,
        include_archived: bool = False,
        archived_only: bool = False,
        exclude_children: bool = False,
        exclude_sources: Sequence[str] | None = None,
        cwd_prefix: str | None = None,
        min_message_count: int = 0,
        include_subagents: bool = False,
        sources: Sequence[str] | None = None,
    ) -> int:
        """How many sessions; archived ones only when asked (as Hermes's ``session_count``).

        ``sources`` (iot 0.22.2) counts the sessions of any of them, when ``source`` is not
        given (``source`` wins, as in the listing); an empty list is no filter, and anything
        but a list (tuple, set) of ``str`` a ``TypeError``.

        ``exclude_children`` counts what a picker lists (roots and branch children, no
        subagent runs; with ``include_subagents``, iot's, the delegate runs too);
        ``cwd_prefix`` keeps sessions whose ``cwd`` starts with it; ``min_message_count``
        (when positive) those with at least that many messages, as
        :meth:`list_sessions_rich` does. Hidden sessions are counted, as iot 0.22.2 counts
        them (its count has no hidden rule); :meth:`count_listed_sessions` follows the
        listing's.
        """
        if sources is not None:
            if not validation.is_source_list(sources):
                raise TypeError(f"sources must be a list of str, not {type(sources).__name__}")
            validation.sources(sources, "sources")  # refused even where source wins
            if (source is None or source == "") and sources:
                source = sources
        return self._count(
            source,
            include_archived=include_archived,
            archived_only=archived_only,
            exclude_children=exclude_children,
            exclude_sources=exclude_sources,
            cwd_prefix=cwd_prefix,
            min_message_count=min_message_count,
            include_subagents=validation.flag(include_subagents, "include_subagents"),
            hide_hidden=False,
        )

    @reads
    def session_count_ge(self, n: int = 1) -> bool:
        """iot 0.22.2's ``session_count_ge``: at least ``n`` sessions exist, archived and
        hidden ones included; the scan stops at the ``n``-th. ``n`` is an ``int``
        (``TypeError`` otherwise); ``n <= 0`` is always True (as iot's ``LIMIT``), one past
        64 bits always False (no store holds that many)."""
        wanted = validation.integer(n, "n")
        if wanted <= 0:
            return True
        if wanted > validation.INT64_MAX:
            return False
        found = select(func.count()).select_from(
            select(sessions.c.id).limit(wanted).subquery("found")
        )
        return int(self.store.read(lambda conn: conn.execute(found).scalar_one())) >= wanted

    def _count(
        self,
        source: SourceFilter,
        *,
        include_archived: bool,
        archived_only: bool,
        exclude_children: bool,
        exclude_sources: Sequence[str] | None,
        cwd_prefix: str | None,
        min_message_count: int,
        include_subagents: bool,
        hide_hidden: bool,
    ) -> int:
        threshold = message_threshold(min_message_count)
        if source == "":
            source = None  # as Hermes: an empty source is no filter
        if source is not None and not validation.is_source_list(source) and not matchable(source):
            return 0  # one source no stored one can equal (a wrong type, NUL): none
        selected = validation.sources(source, "source")
        statement = select(func.count()).select_from(sessions)
        if threshold is not None:
            if threshold > validation.INT64_MAX:
                return 0  # past every 64-bit counter
            statement = statement.where(sessions.c.message_count >= threshold)
        statement = statement.where(*self._counted_conditions(
            sources=selected, exclude_sources=exclude_sources, include_archived=include_archived,
            archived_only=archived_only, cwd_prefix=cwd_prefix,
            exclude_children=exclude_children, include_subagents=include_subagents,
        ))  # fmt: skip
        if hide_hidden and self.store.read_shape.has_column("sessions", "hidden"):
            statement = statement.where(sessions.c.hidden == 0)
        return int(self.store.read(lambda conn: conn.execute(statement).scalar_one()))

    def _counted_conditions(
        self,
        *,
        sources: tuple[str, ...] | None,
        exclude_sources: Sequence[str] | None,
        include_archived: bool,
        archived_only: bool,
        cwd_prefix: str | None,
        exclude_children: bool,
        include_subagents: bool,
    ) -> list[ColumnElement[bool]]:
        """What a count keeps: the session filters, and with ``exclude_children`` only what
        a picker lists (one rule for every count)."""
        conditions = list(_session_filters(
            self.store.dialect, sources=sources, exclude_sources=exclude_sources,
            include_archived=include_archived, archived_only=archived_only, cwd_prefix=cwd_prefix,
        ))  # fmt: skip
        if exclude_children:
            conditions.append(listable_condition(
                include_subagents=include_subagents,
                legacy_resets=read_shape_has(self.store, "session_key"),
            ))  # fmt: skip
        return conditions

    @reads
    def session_count_by_source(
        self,
        *,
        include_archived: bool = False,
        archived_only: bool = False,
        exclude_children: bool = False,
    ) -> dict[str, int]:
        """iot 0.22.2's ``{source: count}``: an empty or NULL source counted as ``'cli'``,
        most sessions first (ties by source); archived ones only when asked,
        ``exclude_children`` counting what a picker lists. Hidden sessions are counted, as
        iot counts them. Each keyword is a ``bool`` (``TypeError`` otherwise)."""
        include_archived = validation.flag(include_archived, "include_archived")
        archived_only = validation.flag(archived_only, "archived_only")
        exclude_children = validation.flag(exclude_children, "exclude_children")
        label = func.coalesce(func.nullif(sessions.c.source, ""), CLI_SOURCE).label("label")
        count = func.count().label("sessions")
        statement = (
            select(label, count)
            .group_by(label)
            .order_by(count.desc(), label)
        )
        statement = statement.where(*self._counted_conditions(
            sources=None, exclude_sources=None, include_archived=include_archived,
            archived_only=archived_only, cwd_prefix=None,
            exclude_children=exclude_children, include_subagents=False,
        ))  # fmt: skip
        rows = self.store.read(lambda conn: conn.execute(statement).all())
        return {str(source): int(total) for source, total in rows}

    @reads
    def search_sessions(
        self,
        source: SourceFilter = None,
        limit: int = 20,
        offset: int = 0,
        workspace_key: str | None = None,
    ) -> list[SessionRecord]:
        """Sessions, most recently used first, as iot 0.22.2 orders them (its last activity:
        :func:`.maintenance.last_active_at`; then the newest start, then the id, bytewise, last
        first); ``workspace_key`` (iot 0.22.2: ``hermes -c`` picks the last session of its
        workspace) keeps those of one workspace (:func:`workspace_condition`). ``hermes -c``
        continues the first: a session resumed and used since is the last one, whenever it
        started (started-first order had it continue a newer, idle session)."""
        statement = self._mru_statement(source, limit, offset, workspace_key, last_active=False)
        if statement is None:
            return []
        width = _SESSION_WIDTH
        return self.store.read(
            lambda conn: [SessionRecord._make(row[:width]) for row in conn.execute(statement)]
        )

    @reads
    def search_sessions_dicts(
        self,
        source: SourceFilter = None,
        limit: int = 20,
        offset: int = 0,
        workspace_key: str | None = None,
    ) -> list[dict[str, Any]]:
        """:meth:`search_sessions` as iot 0.22.2's ``search_sessions`` gives it: each session's
        dict with its ``last_active`` last (the listing's value, :func:`listing_last_active`),
        which a picker shows and ``export_all`` carries."""
        statement = self._mru_statement(source, limit, offset, workspace_key, last_active=True)
        if statement is None:
            return []
        rows = self.store.read(lambda conn: conn.execute(statement).all())
        found = []
        for row in rows:
            session = dict(zip(_MRU_KEYS, row))  # noqa: B905 - the statement's own columns
            session["last_active"] = _clock(session["last_active"])
            found.append(session)
        return found

    def _mru_statement(
        self,
        source: SourceFilter,
        limit: int,
        offset: int,
        workspace_key: str | None,
        *,
        last_active: bool,
    ) -> Select[Any] | None:
        """The statement of :meth:`search_sessions`: the session columns, then (with
        ``last_active``) the listing's ``last_active``, a subquery per row a caller of records
        would throw away; None when ``source`` can match no session."""
        read = self.store.read_shape
        stamped = read.has_column(sessions.name, "last_activity_at")
        shown = [_last_active(read).label("last_active")] if last_active else []
        statement = (
            select(*session_columns(read), *shown)
            .order_by(
                last_active_at(stamped=stamped).desc().nulls_last(),
                sessions.c.started_at.desc(),
                sessions.c.id.collate(self.store.dialect.bytewise_collation).desc(),
            )
            .limit(row_count(limit, "limit"))
            .offset(row_count(offset, "offset"))
        )
        if source is not None and not validation.is_source_list(source) and not matchable(source):
            return None
        selected = validation.sources(source, "source")
        if selected is not None:
            statement = statement.where(source_condition(self.store.dialect, selected))
        if workspace_key:
            statement = statement.where(
                workspace_condition(validation.identifier(workspace_key, "workspace_key"))
            )
        return statement

    def iter_sessions(
        self, conn: Connection, source: SourceFilter = None
    ) -> Iterator[SessionRecord]:
        """Stream every session (of any of the sources), oldest first (parents before
        children), for export."""
        statement = select(*session_columns(self.store.read_shape)).order_by(
            sessions.c.started_at, sessions.c.id
        )
        selected = validation.sources(source, "source")
        if selected is not None:
            statement = statement.where(source_condition(self.store.dialect, selected))
        for row in conn.execution_options(yield_per=500).execute(statement):
            yield SessionRecord(*row)

    @reads
    def distinct_session_cwds(self, include_archived: bool = False) -> list[dict[str, Any]]:
        """Every working directory sessions ran in, as Hermes 0.18 reports it for repository
        discovery: ``{"cwd", "sessions", "last_active"}`` (how many sessions, and the latest
        end or start among them), children included, blank ones left out, sorted by cwd."""
        statement = (
            select(
                sessions.c.cwd,
                func.count(),
                func.max(func.coalesce(sessions.c.ended_at, sessions.c.started_at, 0)),
            )
            .where(sessions.c.cwd.is_not(None), func.trim(sessions.c.cwd) != "")
            .group_by(sessions.c.cwd)
            .order_by(sessions.c.cwd)
        )
        if not include_archived:
            statement = statement.where(sessions.c.archived == 0)
        rows = self.store.read(lambda conn: conn.execute(statement).all())
        return [
            {"cwd": str(cwd), "sessions": int(count or 0), "last_active": float(latest or 0)}
            for cwd, count, latest in rows
        ]

    @reads
    def list_sessions_rich(
        self,
        source: SourceFilter = None,
        exclude_sources: Sequence[str] | None = None,
        limit: int = 20,
        offset: int = 0,
        include_children: bool = False,
        project_compression_tips: bool = True,
        *,
        include_archived: bool = False,
        archived_only: bool = False,
        cwd_prefix: str | None = None,
        min_message_count: int = 0,
        order_by_last_active: bool = False,
        id_query: str | None = None,
        search_query: str | None = None,
        include_pinned: bool = False,
        include_hidden: bool = False,
        include_subagents: bool = False,
        sources: Sequence[str] | None = None,
        session_key: str | None = None,
    ) -> list[SessionListing]:
        """Sessions newest first, as a picker shows them.

        Listed by default: roots and branch children (``_branched_from`` set, or started after
        a parent that ended ``'branched'``), never a delegate (subagent) run
        (``_delegate_from`` set) and never an archived session; ``include_children`` lists
        every session. ``archived_only`` lists the archived ones alone. With
        ``project_compression_tips`` a compression root is shown as its projection tip
        (:func:`.lineage.projection_tips_sql`: the tip get_compression_tip and a resume find) in
        :data:`PROJECTED_FIELDS`, keeping its own ``started_at``, with ``lineage_root_id``.

        As Hermes 0.18: a positive ``min_message_count`` lists only sessions with at least that
        many messages (an int; ``TypeError`` otherwise). ``order_by_last_active`` orders by
        the latest activity anywhere in a session's forward compression chain (see
        :func:`_activity_listing_statement`): a compressed conversation continued today comes
        first though its root is old; ``limit`` and ``offset`` count in that order. On that
        path alone (Hermes ignores it on the other) ``id_query`` keeps the rows whose id, or
        the id of any session in their chain, contains it: stripped, lower-cased, matched
        without wildcards, ASCII letters in any case (SQLite's ``lower()``, which Hermes
        uses). On that path too, ``search_query`` (Hermes 0.19) keeps the rows whose id or
        title, or those of any session in their chain, contain it the same way, or whose
        title without ``-``, ``_``, ``.`` and blanks contains it without its punctuation
        (``an94`` finds ``AN-94``).

        As iot 0.22.2 (schema v26+): a hidden session (``hidden``, set across a lineage by
        ``set_session_hidden``; Bot Mode's sessions) is left out unless ``include_hidden``,
        except from ``archived_only``, the view that recovers what every other listing
        leaves out. ``include_subagents`` lists the delegate runs too (not the compression
        continuations) where children are left out. ``include_pinned`` adds, after the
        page, every pinned session the page does not hold that the other filters keep,
        archived or not (a pin is an explicit keep), newest first and not paged (each page
        repeats the pins it lacks); the id and search filters do not apply to it. Added
        rows are projected onto their tips as the page's are. Each of the three is a
        ``bool`` (``TypeError`` otherwise).
        """
        rows = self._listing_rows(
            source, exclude_sources, limit, offset, include_children,
            project_compression_tips, include_archived, archived_only, cwd_prefix,
            min_message_count, order_by_last_active, id_query, search_query,
            include_pinned=include_pinned, include_hidden=include_hidden,
            include_subagents=include_subagents, sources=sources, session_key=session_key,
        )  # fmt: skip
        return [_listing(row, root, chain) for row, root, chain in rows]

    @reads
    def list_sessions_rich_dicts(
        self,
        source: SourceFilter = None,
        exclude_sources: Sequence[str] | None = None,
        limit: int = 20,
        offset: int = 0,
        include_children: bool = False,
        project_compression_tips: bool = True,
        *,
        include_archived: bool = False,
        archived_only: bool = False,
        cwd_prefix: str | None = None,
        min_message_count: int = 0,
        order_by_last_active: bool = False,
        id_query: str | None = None,
        search_query: str | None = None,
        compact_rows: bool = False,
        include_pinned: bool = False,
        include_hidden: bool = False,
        include_subagents: bool = False,
        sources: Sequence[str] | None = None,
        session_key: str | None = None,
    ) -> list[dict[str, Any]]:
        """:meth:`list_sessions_rich` as Hermes's dicts (``SessionListing.to_dict``), built
        straight from the rows: a picker's page is 50 dicts of 43 keys, and going through the
        records first cost a fifth of the call. ``compact_rows`` (Hermes 0.19) leaves the
        ``system_prompt`` out: the key is absent and the statement never reads the column."""
        rows = self._listing_rows(
            source, exclude_sources, limit, offset, include_children,
            project_compression_tips, include_archived, archived_only, cwd_prefix,
            min_message_count, order_by_last_active, id_query, search_query,
            compact=bool(compact_rows), include_pinned=include_pinned,
            include_hidden=include_hidden, include_subagents=include_subagents,
            sources=sources, session_key=session_key,
        )  # fmt: skip
        if compact_rows:
            return [_compact(_rich_dict(row, root, chain)) for row, root, chain in rows]
        return [_rich_dict(row, root, chain) for row, root, chain in rows]

    @reads
    def get_session_rich_row(
        self, session_id: str, compact_rows: bool = False
    ) -> dict[str, Any] | None:
        """One session as a row of :meth:`list_sessions_rich_dicts` (its columns,
        ``last_active``, ``preview``, ``unread``), whatever the listing's filters would say of
        it, and not projected onto a compression tip: iot 0.22.2's ``get_session_rich_row``
        (a web page hydrating one session). None for an unknown id. ``compact_rows`` leaves
        ``system_prompt`` out (the key is absent and the column is not read)."""
        if not matchable(session_id):
            return None
        compact = validation.flag(compact_rows, "compact_rows")
        hot = self._hot_listing(_rich_row_statement(compact, self.store.read_shape))
        rows = self.store.read(lambda conn: hot.rows(conn, {"session_id": session_id}))
        if not rows:
            return None
        listing = _rich_dict(rows[0], None, None)
        return _compact(listing) if compact else listing

    @reads
    def get_session_rich_rows(
        self, session_ids: Sequence[str], compact_rows: bool = False
    ) -> dict[str, dict[str, Any]]:
        """:meth:`get_session_rich_row` for many ids in one statement, keyed by id (iot's
        ``_get_session_rich_rows_batch``): unknown ids (and values no id can be) are absent.
        The ids are one JSON parameter, however many."""
        compact = validation.flag(compact_rows, "compact_rows")
        validation.id_list(session_ids, "session_ids")
        wanted = sorted({sid for sid in session_ids if sid and matchable(sid)})
        if not wanted:
            return {}
        hot = self._hot_listing(
            _rich_rows_statement(
                compact, self.store.read_shape, self.store.dialect.json_list_sql("session_ids")
            )
        )
        rows = self.store.read(lambda conn: hot.rows(conn, {"session_ids": json_list(wanted)}))
        listings = (_rich_dict(row, None, None) for row in rows)
        return {
            listing["id"]: _compact(listing) if compact else listing for listing in listings
        }

    def _listing_rows(
        self,
        source: SourceFilter,
        exclude_sources: Sequence[str] | None,
        limit: int,
        offset: int,
        include_children: bool,
        project_compression_tips: bool,
        include_archived: bool,
        archived_only: bool,
        cwd_prefix: str | None,
        min_message_count: int = 0,
        order_by_last_active: bool = False,
        id_query: str | None = None,
        search_query: str | None = None,
        *,
        compact: bool = False,
        include_pinned: bool = False,
        include_hidden: bool = False,
        include_subagents: bool = False,
        sources: Sequence[str] | None = None,
        session_key: str | None = None,
    ) -> list[tuple[Sequence[Any], str | None, list[str] | None]]:
        """The page's rich rows (compression roots already projected onto their tips), each
        with the id of the root it was projected from (None when it was not); then, with
        ``include_pinned``, the pinned rows the page lacks, projected likewise."""
        back_fill_pins = validation.flag(include_pinned, "include_pinned")
        include_hidden = validation.flag(include_hidden, "include_hidden")
        include_subagents = validation.flag(include_subagents, "include_subagents")
        if source == "":
            source = None  # as Hermes: an empty source is no filter
        if sources is not None and not validation.is_source_list(sources):
            raise TypeError(f"sources must be a list of str, not {type(sources).__name__}")
        if source is None and sources:
            # iot 0.22.2: ``source`` wins when given; else ``sources``, an empty one no filter.
            source = sources
        selected = validation.sources(source, "source")
        if sources is not None and source is not sources:
            validation.sources(sources, "sources")  # refused even where source wins
        key = validation.optional_identifier(session_key or None, "session_key")
        keyed = read_shape_has(self.store, "session_key")
        if key is not None and not keyed:
            return []  # a store before v18 has no session keys: none matches
        excluded = [
            validation.identifier(item, "exclude_sources") for item in exclude_sources or ()
        ]
        prefix = validation.optional_identifier(cwd_prefix or None, "cwd_prefix")
        threshold = message_threshold(min_message_count)
        needle = id_needle(id_query)
        searched = id_needle(search_query, "search_query")
        squeezed = None if searched is None else (re.sub(r"[\W_]+", "", searched) or None)
        parameters: dict[str, Any] = {
            "source": (
                None if selected is None
                else selected[0] if len(selected) == 1
                else json_list(selected)
            ),
            "excluded": json_list(excluded),
            **dict(zip(_CWD_PARAMETERS, cwd_patterns(prefix) if prefix else (None,) * 4,
                       strict=True)),
            "min_messages": threshold,
            "session_key": key,
            "id_needle": needle,
            "search_needle": searched,
            "squeezed_needle": squeezed,
            "limit": row_count(limit, "limit"),
            "offset": row_count(offset, "offset"),
        }
        if threshold is not None and threshold > validation.INT64_MAX:
            return []  # past every 64-bit counter
        archive = "only" if archived_only else ("all" if include_archived else "hide")
        dialect = self.store.dialect
        if selected == ():
            return []  # an empty list of sources: none listed
        read = self.store.read_shape
        shape: ListingShape = (
            _source_shape(dialect, selected),
            dialect.json_list_sql("excluded") if excluded else None,
            bool(include_children),
            archive,
            prefix is not None,
            threshold is not None,
            # A store without the column (read as it is, before v26) hides nothing.
            not include_hidden and not archived_only and read.has_column("sessions", "hidden"),
            include_subagents,
            key is not None,
            keyed,
        )
        # The pins' filters are the page's, archived or not (iot: a pin is an explicit keep).
        pins = (
            _pinned_statement((*shape[:3], "all", *shape[4:]), read, compact)
            if back_fill_pins and read.has_column("sessions", "pinned")
            else None
        )
        if not order_by_last_active:
            # As Hermes: id_query and search_query only narrow the listing by activity.
            statement = _listing_statement(shape, self.store.read_shape, compact)
        elif any(value is not None and not bindable(value) for value in (needle, searched)):
            return []  # NUL or a lone surrogate: no stored id or title holds one
        else:
            statement = _activity_listing_statement(
                shape,
                None if needle is None
                else dialect.ascii_folded_contains_sql(f"{_MATCHED}.id", "id_needle"),
                None if searched is None else _search_match_sql(dialect, squeezed is not None),
                dialect.bytewise_collation,
                self.store.read_shape,
                compact,
            )
        # The page is read on the driver cursor: the row is 41 columns wide since Hermes v17,
        # and SQLAlchemy's per-row processing showed.
        hot = self._hot_listing(statement)
        # As Hermes: with children listed, each continuation is its own row already, so
        # projecting a root onto its tip would show the tip twice and lose the root.
        project = project_compression_tips and not include_children

        pinned = None if pins is None else self._hot_listing(pins)

        def run(conn: Connection) -> list[tuple[Sequence[Any], str | None, list[str] | None]]:
            rows = hot.rows(conn, parameters)
            if pinned is not None:
                # Before the projection, so a pinned root is shown as its tip, as iot does.
                listed = {row[0] for row in rows}
                rows += [row for row in pinned.rows(conn, parameters) if row[0] not in listed]
            # A root whose id a salvaged file holds as bytes is listed as it is: JSON carries
            # no bytes (the listing failed), and ``db doctor --fix`` stores the id as text.
            roots = [row[0] for row in rows
                     if row[_END_REASON_AT] == COMPRESSION_END_REASON and type(row[0]) is str]
            if not project or not roots:
                return [(row, None, None) for row in rows]
            load_tips = self._load_compact_tip_listings if compact else self._load_tip_listings
            tips = {
                tip[_ROOT_AT]: tip for tip in load_tips.rows(conn, {"roots": json_list(roots)})
            }
            return [
                (row, None, None) if (tip := tips.get(row[0])) is None
                else (_project(row, tip), row[0], chain_of(tip[_MEMBERS_AT]))
                for row in rows
            ]

        # Each statement may read a newer commit than the page's (SQLite, outside a
        # transaction): a tip that appeared since is shown, one deleted since leaves its root
        # as it was listed. That is what a listing a moment later would show anyway.
        return self.store.read(run, single_statement=True)

    @reads
    def count_listed_sessions(
        self,
        source: SourceFilter = None,
        exclude_sources: Sequence[str] | None = None,
        include_children: bool = False,
        *,
        include_archived: bool = False,
        archived_only: bool = False,
        cwd_prefix: str | None = None,
        min_message_count: int = 0,
        include_hidden: bool = False,
        include_subagents: bool = False,
    ) -> int:
        """How many sessions ``list_sessions_rich`` pages through with these filters: hidden
        ones only with ``include_hidden`` or ``archived_only``, as the listing (unlike
        :meth:`session_count`, which counts them as iot's does)."""
        validation.sources(source, "source")  # refused as the listing refuses it
        return self._count(
            source,
            include_archived=include_archived,
            archived_only=archived_only,
            exclude_children=not include_children,
            exclude_sources=exclude_sources,
            cwd_prefix=cwd_prefix,
            min_message_count=min_message_count,
            include_subagents=validation.flag(include_subagents, "include_subagents"),
            hide_hidden=not validation.flag(include_hidden, "include_hidden") and not archived_only,
        )


    @reads
    def list_cron_job_runs(
        self, job_id: str, limit: int = 20, offset: int = 0
    ) -> list[dict[str, Any]]:
        """Hermes's ``list_cron_job_runs``: the sessions ``cron_{job_id}_*`` of source
        ``'cron'``, newest first, as listing rows (``preview``, ``last_active``). The page is
        chosen from ``sessions`` alone through the dialect's exact prefix test (SQLite: a range
        of the id's index, as Hermes queries it), and only its rows are enriched."""
        page = {"limit": row_count(limit, "limit"), "offset": row_count(offset, "offset")}
        if not isinstance(job_id, str) or not bindable(job_id):
            return []
        prefix = cron_prefix(job_id)
        newest_first = (sessions.c.started_at.desc(), sessions.c.id.desc())
        chosen = (
            select(sessions.c.id)
            .where(
                sessions.c.source == CRON_SOURCE,
                self.store.dialect.starts_with(sessions.c.id, prefix),
            )
            .order_by(*newest_first)
            .limit(page["limit"])
            .offset(page["offset"])
            .subquery("page")
        )
        statement = (
            _rich_select(False, self.store.read_shape)
            .join_from(sessions, chosen, chosen.c.id == sessions.c.id)
            .order_by(*newest_first)
        )
        rows = self.store.read(lambda conn: conn.execute(statement).all())
        return [_listing_dict(row, None) for row in rows]

    @reads
    def search_sessions_by_id(
        self, query: str, limit: int = 20, include_archived: bool = True
    ) -> list[dict[str, Any]]:
        """Hermes's ``search_sessions_by_id``: listed sessions whose id (or any id of their
        compression chain) holds ``query``, case-insensitively, as listing dicts: exact ids
        (or lineage root ids) first, then prefixes, then the rest, each most recently active
        first (:func:`rank_by_id`)."""
        return search_by_id(self.list_sessions_rich_dicts, query, limit, include_archived)

    @reads
    def list_skill_scaffolded_sessions(self, limit: int = 200) -> list[dict[str, Any]]:
        """iot 0.22.2: the titled sessions whose first user message (by timestamp, then id,
        rewound rows included) is a ``/skill`` invocation's or a gateway auto-load's scaffold
        (:data:`SKILL_SCAFFOLD_PREFIXES`), newest started first: ``id``, ``title`` and that
        first ``content``, so a caller can title them again from what was typed. The prefix
        is matched ASCII-case-insensitively on both databases, as SQLite's ``LIKE`` does.
        ``limit`` is what ``int()`` takes (text, a float, as iot); a negative one is no limit,
        as SQLite reads iot's ``LIMIT -1``."""
        count = int(limit)
        first = (
            select(messages.c.id)
            .where(
                messages.c.session_id == sessions.c.id, messages.c.role == "user",
                messages.c.content.is_not(None),
            )
            .order_by(messages.c.timestamp, messages.c.id)
            .limit(fixed_count(1))
            .correlate(sessions)
            .scalar_subquery()
        )  # fmt: skip
        statement = (
            select(sessions.c.id, sessions.c.title, messages.c.content)
            .join_from(sessions, messages, messages.c.id == first)
            .where(
                sessions.c.title.is_not(None),
                or_(*(messages.c.content.ilike(escape_like(prefix) + "%", escape="\\")
                      for prefix in SKILL_SCAFFOLD_PREFIXES)),
            )
            .order_by(sessions.c.started_at.desc(), sessions.c.id.desc())
        )  # fmt: skip
        if count >= 0:
            statement = statement.limit(min(count, validation.INT64_MAX))
        return self.store.read(
            lambda conn: [dict(row._mapping) for row in conn.execute(statement)]
        )


def message_threshold(value: Any) -> int | None:
    """``min_message_count`` as Hermes reads it: only a positive count filters (None: no
    filter). An ``int`` (a ``bool`` or anything else is a ``TypeError``); one past the 64-bit
    counters is returned as it is, and the caller answers that no session has that many."""
    count = validation.integer(value, "min_message_count")
    return count if count > 0 else None


def id_needle(value: Any, name: str = "id_query") -> str | None:
    """``id_query`` (or ``search_query``) as Hermes reads it, stripped and lower-cased
    (Python's ``str.lower``); None when that leaves nothing. A ``str`` or None: another type
    is a ``TypeError`` (Hermes fails on ``.strip()``)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str or None, not {type(value).__name__}")
    return value.strip().lower() or None


def _common_prefix_length(left: str, right: str) -> int:
    size = 0
    for a, b in zip(left, right, strict=False):
        if a != b:
            break
        size += 1
    return size


SUMMARY_SIGN: Final = "["
"""What every summary prefix and the merged-summary delimiter hold: a text without it is no
summary (``tests/api/test_session_db_preview_compaction.py`` pins that)."""
_WHITESPACE: Final = "\t\n\r "
_PREVIEW_HEAD: Final = PREVIEW_LENGTH + 3 + 200


def _ltrim(text: ColumnElement[Any]) -> ColumnElement[Any]:
    return func.ltrim(text, literal(_WHITESPACE))


def _trim(text: ColumnElement[Any]) -> ColumnElement[Any]:
    return func.rtrim(_ltrim(text), literal(_WHITESPACE))


def _opens_with_summary(text: ColumnElement[Any]) -> ColumnElement[bool]:
    opened = _ltrim(text)
    return or_(
        *(func.substr(opened, 1, len(prefix)) == prefix for prefix in PREVIEW_SUMMARY_PREFIXES)
    )


def _after(text: ColumnElement[Any], marker: str) -> ColumnElement[Any]:
    return func.substr(text, text_position(text, literal(marker)) + len(marker))


def _preview_rule(row: Any, hidden_kind: bool) -> tuple[ColumnElement[bool], ColumnElement[Any]]:
    """iot 0.22.2's preview rule for a user row (``_PREVIEW_ELIGIBLE_SQL`` and
    ``_PREVIEW_RAW_SELECT``): whether it may be a session's preview, and the text the preview
    is cut from. A compaction summary (by its SQL's own
    :data:`.compaction_handoff.PREVIEW_SUMMARY_PREFIXES`) shows what follows its end marker,
    and is skipped when nothing does; a summary merged into an earlier row shows the row's
    prior text (its header dropped), and is skipped when there is none; a row
    ``display_kind = 'hidden'`` (scaffolding no one is shown) is skipped. iot also shows a
    skill invocation's scaffold as a head and tail excerpt; ours shows its head (kept: that
    needs iot's skill registry)."""
    content = row.c.content
    delimiter_at = text_position(content, literal(MERGED_SUMMARY_DELIMITER))
    standalone = _opens_with_summary(content)
    merged = and_(delimiter_at > 0, _opens_with_summary(_after(content, MERGED_SUMMARY_DELIMITER)))
    remainder = _after(content, SUMMARY_END_MARKER)
    prior = _trim(func.substr(content, 1, case((delimiter_at > 0, delimiter_at - 1), else_=0)))
    header = MERGED_PRIOR_CONTEXT_HEADER
    unwrapped = case(
        (func.substr(_ltrim(prior), 1, len(header)) == header,
         _ltrim(func.substr(_ltrim(prior), len(header) + 1))),
        else_=prior,
    )  # fmt: skip
    # A text without SUMMARY_SIGN is neither kind of summary (every prefix and the delimiter
    # hold it), so it is eligible and its own raw text: one search of it decides, where the
    # rules below trim and search the whole text six times (a listing page's previews cost
    # 40 of its 150 us; docs/performance.md, Reads).
    plain = text_position(content, literal(SUMMARY_SIGN)) == 0
    eligible = or_(
        plain,
        and_(not_(standalone), not_(merged)),
        and_(
            standalone,
            text_position(content, literal(SUMMARY_END_MARKER)) > 0,
            func.length(_trim(remainder)) > 0,
        ),
        and_(merged, func.length(_trim(unwrapped)) > 0),
    )
    if hidden_kind:
        eligible = and_(func.coalesce(row.c.display_kind, "") != "hidden", eligible)
    raw = case((plain, content), (standalone, remainder), (merged, unwrapped), else_=content)
    return eligible, func.substr(raw, 1, _PREVIEW_HEAD)


def first_user_text(read: ReadShape | None = None) -> ColumnElement[Any]:
    """The head of the text a session's preview is cut from (:func:`preview_text`): its first
    user message that may be one (:func:`_preview_rule`), by timestamp then id. ``read``: the
    store's shape (a store without ``display_kind`` has no hidden rows). SQLite reads it
    through ``idx_messages_session``, in that order, whatever ``sqlite_stat1`` says: through
    ``idx_messages_session_id`` (the choice of a stale or hostile ``sqlite_stat1``) it sorted
    every row of every listed session (docs/performance.md, "Plans that do not follow the
    statistics")."""
    return _first_user_text(read is None or read.has_column(messages.name, "display_kind"))


@functools.cache
def _first_user_text(hidden_kind: bool) -> ColumnElement[Any]:
    """:func:`first_user_text`, built once per shape: the preview rule is ~60 elements, and
    the statements that embed it are themselves built once (a browse rebuilt it per call)."""
    first = indexed_alias(messages, "first_user", IDX_MESSAGES_SESSION)
    eligible, head = _preview_rule(first, hidden_kind)
    return (
        select(head)
        .where(
            first.c.session_id == sessions.c.id,
            first.c.role == "user",
            first.c.content.is_not(None),
            eligible,
        )
        .order_by(first.c.timestamp, first.c.id)
        .limit(fixed_count(1))
        .correlate(sessions)
        .scalar_subquery()
    )


def _a_number(clock: Any) -> ColumnElement[Any]:
    """``clock`` where it holds a finite number, else NULL. SQLite's dynamic typing lets a
    damaged or salvaged row keep text (or a blob) in a REAL column; such a cell compares above
    every number there, so the bounds leave it out (and NaN and the infinities, on both
    databases)."""
    return case((clock.between(-_FLOAT_MAX, _FLOAT_MAX), clock), else_=None)


_FLOAT_MAX: Final = sys.float_info.max


@functools.cache
def _last_active(read: ReadShape) -> ColumnElement[Any]:
    """A listing row's ``last_active``: iot 0.22.2's freshest of ``last_activity_at`` and the
    newest message, else ``started_at`` (:func:`.maintenance.last_active_at`, the one home of
    that rule). Where iot answers NULL (no clock inside 1970...2103), ours keeps the row's
    ``started_at`` as it is when it is a number; a ``started_at`` that is no number (text in
    a damaged SQLite row) gives NULL, as iot's, instead of failing the whole listing."""
    stamped = read.has_column(sessions.name, "last_activity_at")
    return func.coalesce(last_active_at(stamped=stamped), _a_number(sessions.c.started_at))


@functools.cache
def _rich_select(compact: bool, read: ReadShape) -> Select[Any]:
    # Hermes's dict order: the columns, last_active, then the preview (see _listing_dict).
    # Compact rows read a NULL where the system prompt is (the key is dropped later): the
    # prompt, often tens of kilobytes, is never copied out of its page.
    columns: list[Any] = session_columns(read)
    if compact:
        columns = [
            null().label(_SYSTEM_PROMPT) if column.name == _SYSTEM_PROMPT else column
            for column in columns
        ]
    return select(
        *columns,
        _last_active(read).label("last_active"),
        first_user_text(read).label("_preview_raw"),
    )


def listing_select(read: ReadShape) -> Select[Any]:
    """A listing row's SELECT (``list_sessions_rich``'s columns, ``last_active``, preview),
    for a part that chooses its own sessions; each row becomes :func:`listing_dict`."""
    return _rich_select(False, read)


def listing_last_active(read: ReadShape) -> ColumnElement[Any]:
    """A listing row's ``last_active`` expression (to order by)."""
    return _last_active(read)


def listing_dict(row: Sequence[Any]) -> dict[str, Any]:
    """A :func:`listing_select` row as Hermes's listing dict (``preview``, ``last_active``)."""
    return _listing_dict(row, None)


@functools.cache
def _rich_rows_statement(compact: bool, read: ReadShape, ids_list_sql: str) -> Select[Any]:
    """The rich rows of the ids in a JSON list (``ids_list_sql``, the dialect's)."""
    return _rich_select(compact, read).where(text(f"sessions.id IN {ids_list_sql}"))


@functools.cache
def _rich_row_statement(compact: bool, read: ReadShape) -> Select[Any]:
    """One session's rich row, by id (``get_session_rich_row``): built once per shape."""
    return _rich_select(compact, read).where(sessions.c.id == bindparam("session_id"))


ListingShape = tuple[str | None, str | None, bool, str, bool, bool, bool, bool, bool, bool]
"""What a listing's filters look like, the values aside (one prebuilt statement per shape):
by source (:func:`_source_shape`), the dialect's SQL for the excluded sources' list (None: none
excluded), children included, archive (``"hide"``, ``"all"`` or ``"only"``), by cwd prefix, by
message count, hidden sessions left out, delegate runs listed (where children are not), by
session key, and whether the store has ``session_key`` (the pre-marker reset-child rule)."""

_ONE_SOURCE = "="


def _source_shape(dialect: StoreDialect, selected: tuple[str, ...] | None) -> str | None:
    """The source part of a listing's shape: None (every source), :data:`_ONE_SOURCE` (the
    ``source`` parameter is the one source) or the dialect's SQL for a JSON list (it is the
    list of several, any of which is kept: one parameter however many)."""
    if selected is None:
        return None
    return _ONE_SOURCE if len(selected) == 1 else dialect.json_list_sql("source")


def _listing_conditions(shape: ListingShape) -> list[ColumnElement[bool] | TextClause]:
    """The WHERE of a listing of this shape: every path lists the same sessions."""
    (by_source, excluded_list_sql, include_children, archive, by_cwd, by_messages,
     hide_hidden, include_subagents, by_session_key, keyed) = shape  # fmt: skip
    conditions: list[ColumnElement[bool] | TextClause] = []
    if by_source == _ONE_SOURCE:
        conditions.append(sessions.c.source == bindparam("source"))
    elif by_source is not None:
        conditions.append(text(f"sessions.source IN {by_source}"))
    if excluded_list_sql is not None:
        conditions.append(text(f"sessions.source NOT IN {excluded_list_sql}"))
    if not include_children:
        conditions.append(
            listable_condition(include_subagents=include_subagents, legacy_resets=keyed)
        )
    if by_session_key:
        conditions.append(sessions.c.session_key == bindparam("session_key"))
    if hide_hidden:
        conditions.append(sessions.c.hidden == 0)
    if archive == "hide":
        conditions.append(sessions.c.archived == 0)
    elif archive == "only":
        conditions.append(sessions.c.archived == 1)
    if by_cwd:
        conditions.append(_cwd_condition(*map(bindparam, _CWD_PARAMETERS)))
    if by_messages:
        # No COALESCE: as Hermes, a NULL count is not "at least n".
        conditions.append(sessions.c.message_count >= bindparam("min_messages"))
    return conditions


@functools.cache
def _listing_statement(
    shape: ListingShape, read: ReadShape, compact: bool = False
) -> Select[Any]:
    """One prebuilt statement per filter shape; the values are bound at execution.

    Without a source filter the listing walks ``ix_sessions_started_id`` (revision 0022: the
    listing's own order) and stops at the page's end, so the preview and last-activity
    subqueries run for the page's rows only. A source filter takes ``idx_sessions_source``
    instead, and a plan that sorts would run both subqueries for every matching session
    before the LIMIT (1.8 ms with ``source = 'cli'`` on the 100k-message bench file): there
    the page is chosen first, from ``sessions`` alone, and only its rows are enriched
    (0.47 ms).

    The excluded sources are one JSON parameter (``excluded_list_sql``, the dialect's), so
    100,000 of them are one parameter, not more than PostgreSQL's protocol accepts.
    """
    conditions = _listing_conditions(shape)
    newest_first = (sessions.c.started_at.desc(), sessions.c.id)
    if shape[0] is None:
        return (
            _rich_select(compact, read).where(*conditions)
            .order_by(*newest_first)
            .limit(literal_count("limit"))
            .offset(literal_count("offset"))
        )
    chosen = (
        select(sessions.c.id)
        .where(*conditions)
        .order_by(*newest_first)
        .limit(literal_count("limit"))
        .offset(literal_count("offset"))
        .subquery("page")
    )
    return _rich_select(compact, read).join_from(
        sessions, chosen, chosen.c.id == sessions.c.id
    ).order_by(*newest_first)


@functools.cache
def _pinned_statement(shape: ListingShape, read: ReadShape, compact: bool) -> Select[Any]:
    """The pinned sessions a listing of ``shape`` keeps, newest first, unpaged (iot's
    ``include_pinned`` back-fill)."""
    return (
        _rich_select(compact, read)
        .where(*_listing_conditions(shape), sessions.c.pinned == 1)
        .order_by(sessions.c.started_at.desc(), sessions.c.id)
    )


_MATCHED = "matched"
"""The alias of the chain in the id filter's EXISTS (the dialect's match SQL names it)."""
_SEARCHED = "searched"
_SEARCHED_SESSION = "searched_session"
"""The aliases of the chain and its sessions in the search filter's EXISTS."""
_SYSTEM_PROMPT = "system_prompt"
_SQUEEZED_TITLE = (
    f"replace(replace(replace(replace(coalesce({_SEARCHED_SESSION}.title, ''), "
    "'-', ''), '_', ''), '.', ''), ' ', '')"
)
"""A title without the punctuation Hermes 0.19 squeezes out of it (``-``, ``_``, ``.``, blank)
for ``search_query``'s compact match."""


def _search_match_sql(dialect: Any, squeezed: bool) -> str:
    """``search_query``'s test on one chain member (Hermes 0.19): its title or its id holds
    the needle, or (``squeezed``) its squeezed title holds the needle without punctuation."""
    tests = [
        dialect.ascii_folded_contains_sql(
            f"coalesce({_SEARCHED_SESSION}.title, '')", "search_needle"
        ),
        dialect.ascii_folded_contains_sql(f"{_SEARCHED}.id", "search_needle"),
    ]
    if squeezed:
        tests.append(dialect.ascii_folded_contains_sql(_SQUEEZED_TITLE, "squeezed_needle"))
    return "(" + " OR ".join(tests) + ")"


_COMPACT_DROPPED = (_SYSTEM_PROMPT, "system_prompt_hash", "git_metadata_generation")
"""The keys a compact row leaves out, as iot 0.22.2's: the prompt, and two bookkeeping values
no list renders (the prompt's key in ``system_prompts``, the Git probe counter)."""


def _compact(listing: dict[str, Any]) -> dict[str, Any]:
    for key in _COMPACT_DROPPED:
        listing.pop(key, None)
    return listing


@functools.cache
def _activity_listing_statement(
    shape: ListingShape,
    id_match_sql: str | None,
    search_match_sql: str | None,
    bytewise_collation: str,
    read: ReadShape,
    compact: bool = False,
) -> Select[Any]:
    """The listing of ``shape`` in Hermes 0.18's ``order_by_last_active`` order.

    Each listed session is the root of a chain: itself, then every continuation of a chain
    member (:func:`.lineage.continues_sql`, the one compression edge; no condition on times,
    as Hermes's chain has none). Its activity is the latest of each
    member's newest message (else its ``started_at``); rows are ordered by that, then
    ``started_at``, then id (byte order, as SQLite compares text), all descending. The page
    is chosen from that order before its rows are enriched; ``id_match_sql`` (the dialect's
    test on ``matched.id``), when given, keeps the rows with a matching member.

    The chain is a ``UNION``, where Hermes's is ``UNION ALL``: the same (root, member) pair
    is not walked twice, so a corrupt cycle of parents ends the walk instead of running the
    query forever, and a maximum over the members is the same either way.
    """
    seed = select(
        sessions.c.id.label("root"), sessions.c.id, sessions.c.end_reason, sessions.c.started_at
    ).where(*_listing_conditions(shape))
    chain = seed.cte("chain", recursive=True)
    child = indexed_alias(sessions, "chain_child", IDX_SESSIONS_PARENT)  # see the constant
    chain = chain.union(
        select(chain.c.root, child.c.id, child.c.end_reason, child.c.started_at)
        .join_from(chain, child, child.c.parent_session_id == chain.c.id)
        .where(text(continues_sql(child.name, chain.name)))
    )
    # A member's newest numeric timestamp is the index's last entry within the bounds (SQLite's
    # max() optimization: one step per member). max() of a CASE read every message of every
    # session; through idx_messages_session_id (a stale sqlite_stat1) every row's page.
    member_messages = indexed_alias(messages, "member_messages", IDX_MESSAGES_SESSION)
    newest_message = (
        select(func.max(member_messages.c.timestamp))
        .where(
            member_messages.c.session_id == chain.c.id,
            member_messages.c.timestamp.between(-_FLOAT_MAX, _FLOAT_MAX),
        )
        .correlate(chain)
        .scalar_subquery()
    )
    activity = (
        select(
            chain.c.root,
            func.max(
                func.coalesce(newest_message, _a_number(chain.c.started_at))
            ).label("active"),
        )
        .group_by(chain.c.root)
        .subquery("chain_activity")
    )
    page = select(sessions.c.id, activity.c.active).join_from(
        sessions, activity, activity.c.root == sessions.c.id
    )
    if id_match_sql is not None:
        matched = chain.alias(_MATCHED)
        page = page.where(
            select(matched.c.root)
            .where(matched.c.root == sessions.c.id, text(id_match_sql))
            .exists()
        )
    if search_match_sql is not None:
        searched = chain.alias(_SEARCHED)
        searched_session = sessions.alias(_SEARCHED_SESSION)
        page = page.where(
            select(searched.c.root)
            .join_from(searched, searched_session, searched_session.c.id == searched.c.id)
            .where(searched.c.root == sessions.c.id, text(search_match_sql))
            .exists()
        )
    chosen = (
        page.order_by(
            activity.c.active.desc(),
            sessions.c.started_at.desc(),
            sessions.c.id.collate(bytewise_collation).desc(),
        )
        .limit(literal_count("limit"))
        .offset(literal_count("offset"))
        .subquery("page")
    )
    return _rich_select(compact, read).join_from(
        sessions, chosen, chosen.c.id == sessions.c.id
    ).order_by(
        chosen.c.active.desc(),
        sessions.c.started_at.desc(),
        sessions.c.id.collate(bytewise_collation).desc(),
    )


@functools.cache
def _tip_listings_statement(
    roots_list_sql: str, members_sql: str, read: ReadShape, *, compact: bool = False
) -> Select[Any]:
    """The rich row of each root's projection tip (:func:`.lineage.projection_tips_sql`), then
    the root's id and its whole chain (``members``, read by :func:`.lineage.chain_of`; roots
    without a continuation are absent): the walk, the chains and the rows in one statement,
    one snapshot (for three roots: 60-66 us of raw SQL, the tips and a statement of
    the chains' own 80)."""
    tips = (
        text(projection_tips_sql(roots_list_sql, members_sql))
        .columns(column("root"), column("id"), column("members"))
        .subquery("tips")
    )
    return (
        _rich_select(compact, read).add_columns(tips.c.root, tips.c.members)
        .join_from(sessions, tips, tips.c.id == sessions.c.id)
        .where(tips.c.id != tips.c.root)
    )


def preview_text(raw: str | bytes | None) -> str:
    """Hermes's preview: line breaks as spaces, stripped, 60 characters and an ellipsis. A
    first message stored as a BLOB (a salvaged file) previews as its text: as bytes it
    failed the whole listing."""
    if not raw:
        return ""
    text = text_of_blob(raw) if isinstance(raw, bytes) else raw
    text = text.replace("\n", " ").replace("\r", " ").strip()
    if not text:
        return ""
    return text[:PREVIEW_LENGTH] + ("..." if len(text) > PREVIEW_LENGTH else "")


_SESSION_WIDTH = len(SESSION_FIELDS)
_LAST_ACTIVE_AT = _SESSION_WIDTH
_PREVIEW_AT = _SESSION_WIDTH + 1
_ROOT_AT = _SESSION_WIDTH + 2
"""Where a tip row (``_tip_listings_statement``) holds the id of the root it continues."""
_MEMBERS_AT = _ROOT_AT + 1
"""... and that root's chain (:func:`.lineage.chain_of`)."""
_END_REASON_AT = SESSION_FIELDS.index("end_reason")
_LISTING_KEYS = (*SESSION_FIELDS, "last_active", "preview")
_MRU_KEYS = (*SESSION_FIELDS, "last_active")
"""A row of ``search_sessions_dicts``: the session, then its ``last_active``."""
# Filling a copy of a dict that already has every key skips the four resizes a dict built
# key by key goes through: a fifth cheaper per 43-key row.
_EMPTY_LISTING: dict[str, Any] = dict.fromkeys(_LISTING_KEYS)

PROJECTED_FIELDS = (
    "id",
    "ended_at",
    "end_reason",
    "message_count",
    "tool_call_count",
    "title",
    "model",
    "system_prompt",
    "cwd",
    "git_branch",
    "git_repo_root",
)
"""What a compression root shows of its tip (with the tip's preview and last activity), as
newest Hermes projects it: the live conversation's identity, counts and working tree."""
_PROJECTED_AT = (
    *(SESSION_FIELDS.index(name) for name in PROJECTED_FIELDS),
    _LAST_ACTIVE_AT,
    _PREVIEW_AT,
)


def _clock(value: Any) -> float | None:
    return None if value is None else float(value)


def _listing(
    row: Sequence[Any], lineage_root_id: str | None, lineage_ids: list[str] | None = None
) -> SessionListing:
    width = _SESSION_WIDTH
    return SessionListing(
        SessionRecord._make(row[:width]),
        preview_text(row[_PREVIEW_AT]),
        _clock(row[_LAST_ACTIVE_AT]),
        lineage_root_id,
        None if lineage_ids is None else tuple(lineage_ids),
    )


def _listing_dict(row: Sequence[Any], lineage_root_id: str | None) -> dict[str, Any]:
    """``_listing(row, lineage_root_id).to_dict()``, without the records in between."""
    listing = _EMPTY_LISTING.copy()
    listing.update(zip(_LISTING_KEYS, row))  # noqa: B905 - a tip row's extra root is dropped
    listing["last_active"] = _clock(listing["last_active"])
    listing["preview"] = preview_text(listing["preview"])
    if lineage_root_id is not None:
        listing["_lineage_root_id"] = lineage_root_id
    return listing


def _rich_dict(
    row: Sequence[Any], lineage_root_id: str | None, lineage_ids: list[str] | None
) -> dict[str, Any]:
    """A row of ``list_sessions_rich`` as iot 0.22.2 gives it: a projected root also carries
    its chain (``_lineage_ids``: a picker's tile may hold a middle segment's id) and
    ``continuation_kind`` (the row *is* an automatic continuation, #121148), and every row
    says whether it is ``unread`` (:func:`session_unread`)."""
    listing = _listing_dict(row, lineage_root_id)
    if lineage_ids is not None:
        listing["_lineage_ids"] = lineage_ids
        listing["continuation_kind"] = COMPRESSION_END_REASON
    listing["unread"] = session_unread(listing)
    return listing


_TITLE_AT = SESSION_FIELDS.index("title")


def _project(root: Sequence[Any], tip: Sequence[Any]) -> tuple[Any, ...]:
    """Show a compressed conversation as its live tip, keeping where it started. A tip
    without a title keeps the root's: iot carries the title root -> tip after the publish,
    and a rotation cut off in between must still list the lineage under its name (#106165)."""
    values = list(root)
    for index in _PROJECTED_AT:
        values[index] = tip[index]
    if values[_TITLE_AT] is None:
        values[_TITLE_AT] = root[_TITLE_AT]
    return tuple(values)


def read_shape_has(store: Store, name: str) -> bool:
    """The store's ``sessions`` table has the column (read as it is, an old one may not)."""
    return store.read_shape.has_column("sessions", name)


def _session_filters(
    dialect: StoreDialect,
    *,
    sources: tuple[str, ...] | None,
    exclude_sources: Sequence[str] | None,
    include_archived: bool,
    archived_only: bool,
    cwd_prefix: str | None,
) -> list[ColumnElement[bool]]:
    conditions: list[ColumnElement[bool]] = []
    if sources is not None:
        conditions.append(source_condition(dialect, sources))
    excluded = [validation.identifier(item, "exclude_sources") for item in exclude_sources or ()]
    if excluded:
        conditions.append(sessions.c.source.not_in(excluded))
    if archived_only:
        conditions.append(sessions.c.archived == 1)
    elif not include_archived:
        conditions.append(func.coalesce(sessions.c.archived, 0) == 0)
    if cwd_prefix:
        prefix = validation.identifier(cwd_prefix, "cwd_prefix")
        conditions.append(_cwd_condition(*cwd_patterns(prefix)))
    return conditions


_CWD_PARAMETERS = ("cwd_exact", "cwd_below_slash", "cwd_below_backslash", "cwd_width")


def cwd_patterns(prefix: str) -> tuple[str, str, str, int]:
    """``cwd_prefix`` as Hermes 0.18 matches it: the directory itself, or a path below it
    (after ``/`` or ``\\``), so ``/src/app`` does not take ``/src/app2``. Compared as text,
    not with LIKE: ``%`` and ``_`` in the prefix are literal (``my_project`` is not
    ``myXproject``, as it is for Hermes), and the case of letters counts on both databases
    (Hermes's SQLite LIKE folded it below the directory). A prefix of separators only (``/``)
    takes every path below it, where Hermes's took ``/`` alone.

    Returns the directory, the two beginnings of a path below it, and their length.
    """
    base = prefix.rstrip("/\\")
    if not base:
        return prefix, prefix, prefix, len(prefix)
    return base, base + "/", base + "\\", len(base) + 1


def cwd_condition(prefix: str) -> ColumnElement[bool]:
    """The session's cwd is ``prefix`` or below it (:func:`cwd_patterns`)."""
    return _cwd_condition(*cwd_patterns(prefix))


def workspace_condition(key: str) -> ColumnElement[bool]:
    """iot 0.22.2's ``workspace_key(row) == key`` (``hermes.helpers.workspace_key``): the
    session's git repository root is ``key`` (trailing separators aside), or, for a session
    with no root recorded, its cwd is ``key`` or below it."""
    root = key.rstrip("/\\") or key
    return or_(
        sessions.c.git_repo_root == root,
        and_(func.coalesce(sessions.c.git_repo_root, "") == "", cwd_condition(key)),
    )


def _cwd_condition(
    exact: Any, below_slash: Any, below_backslash: Any, width: Any
) -> ColumnElement[bool]:
    beginning = func.substr(sessions.c.cwd, 1, width)
    return or_(sessions.c.cwd == exact, beginning == below_slash, beginning == below_backslash)


def cron_prefix(job_id: str) -> str:
    return f"cron_{job_id}_"


def search_by_id(
    listing: Callable[..., list[dict[str, Any]]],
    query: Any,
    limit: Any,
    include_archived: bool,
    **source_filters: Any,
) -> list[dict[str, Any]]:
    """Hermes's ``search_sessions_by_id`` over ``listing`` (a ``list_sessions_rich`` that
    returns dicts): a text query, stripped and lower-cased, asks the listing by keyword, as
    Hermes does, for four times ``limit`` rows of its id filter in activity order, and ranks
    them (:func:`rank_by_id`). The Hermes facade passes its own ``list_sessions_rich``, so
    whatever stands in for it there (a subclass, a test) is asked, as in Hermes.
    ``source_filters`` (iot 0.22.2's ``source``, ``sources``, ``exclude_sources``) go to the
    listing as they are."""
    if not isinstance(query, str):
        return []
    needle = query.strip().lower()
    count = row_count(limit, "limit")
    if not needle or count <= 0 or not bindable(needle):
        return []
    rows = listing(
        limit=min(max(count * 4, count), validation.INT64_MAX),
        offset=0,
        include_archived=include_archived,
        order_by_last_active=True,
        id_query=needle,
        **source_filters,
    )
    return rank_by_id(rows, needle, count)


def rank_by_id(rows: Sequence[dict[str, Any]], needle: str, limit: int) -> list[dict[str, Any]]:
    """``rows`` best match of ``needle`` (already stripped and lower-cased) first: an exact id
    or lineage root id, then a prefix, then the rest, each group in the rows' order."""

    def score(row: dict[str, Any]) -> int:
        ids = [str(row.get("id") or ""), str(row.get("_lineage_root_id") or "")]
        normalized = [value.lower() for value in ids if value]
        if needle in normalized:
            return 0
        if any(value.startswith(needle) for value in normalized):
            return 1
        return 2

    ranked = sorted(enumerate(rows), key=lambda item: (score(item[1]), item[0]))
    return [row for _, row in ranked[:limit]]
