"""Hermes 0.18's store maintenance: ``optimize_fts``, ``vacuum`` and
``maybe_auto_prune_and_vacuum``, on both databases.

- ``optimize_fts`` merges the search index's pieces (SQLite: FTS5 ``'optimize'`` on each FTS
  table present, ours included; PostgreSQL: GIN's pending lists moved into the indexes) and
  returns how many indexes were merged. Results never change. An index that fails is logged
  and skipped, as in Hermes.
- ``vacuum`` runs ``optimize_fts`` (a failure there is logged, not raised), then gives the space
  of deleted rows back (:meth:`StoreDialect.vacuum`), on a connection of the store outside any
  transaction, holding the store's write lock so this package's writers, in this process and
  others, wait for it, and retried like a write while a foreign program holds the file. Returns
  what ``optimize_fts`` returned.
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

from ..errors import ReadOnlyStoreError
from ..sql.tables import metadata
from ..storage.store import Store

logger = logging.getLogger(__name__)

LAST_AUTO_PRUNE_KEY = "last_auto_prune"
SECONDS_PER_HOUR = 3600


class Maintenance:
    """The maintenance operations of one store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def optimize_fts(self) -> int:
        from ..search.registry import search_index_for  # on first use, not at open

        index = search_index_for(self.store.dialect)
        return self.store.write(index.optimize)

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


class _MaintainedStore(Protocol):
    def get_meta(self, key: str) -> str | None: ...

    def set_meta(self, key: str, value: str | None) -> None: ...

    def prune_sessions(self, older_than_days: Any = ..., source: Any = ...,
                       sessions_dir: Any = ...) -> int: ...  # fmt: skip

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
