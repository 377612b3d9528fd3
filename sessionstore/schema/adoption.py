"""The backup before a migration changes a file: taken under the migration's lock, once.

A Hermes ``state.db`` (or any SQLite file without our ``alembic_version`` table) that holds
tables is someone's history. Before the first migration that sessionstore runs on it, the store
is backed up the way its dialect can (SQLite: the online backup API, a consistent snapshot,
WAL content included, even while Hermes itself has it open; never a byte copy of a live file)
to ``<file>.bak-<timestamp>`` beside it, with the store's mode
(:mod:`sessionstore.storage.backups`). Once adopted (``alembic_version`` present), a file is
sessionstore's to migrate and no further automatic backups are taken (save one whose Hermes
number was set back: Hermes's data steps run on it again, ``legacy.rerun_revision``);
``sessionstore db upgrade`` still takes one whenever it changes the schema. PostgreSQL is not
backed up here (``pg_dump`` is its tool).

The backup is taken inside the migration's write transaction, after the lock, from what the
store says *then* (:class:`BackupBeforeChange`, the ``before_change`` of
:func:`sessionstore.schema.migrate.upgrade`). So when several processes open one Hermes file at
the same moment (a gateway's workers after an upgrade), exactly one backs it up and migrates;
the others wait for its lock, then find the store at head: no second backup, nothing to do.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from sqlalchemy.engine import URL, Connection

from ..storage.backups import backup_database
from .legacy import StoreState, check_not_too_new, check_shape, rerun_revision

logger = logging.getLogger(__name__)


def needs_adoption_backup(state: StoreState) -> bool:
    """True for a store that holds tables sessionstore has never migrated, and for one whose
    Hermes number was set back (the chain runs Hermes's data steps on it again:
    ``legacy.rerun_revision``)."""
    # A file the migration will refuse (a newer Hermes's) gets nothing written beside it either.
    check_not_too_new(state)
    if rerun_revision(state.schema_version, state.alembic_revision) is not None:
        return True
    return state.alembic_revision is None and not state.is_empty


class BackupBeforeChange:
    """Called by the migration environment under the migration lock, before anything is
    changed, with what the store says of its schema at that moment: takes the backup when
    ``needed(state)``, at most once however often the migration is retried.

    ``found`` is that state (what this migration really started from: another process may
    have migrated the store between a caller's first look and the lock); ``path`` is the
    backup's, if one was taken. ``reported_by_caller``: the caller tells its user where the
    backup went (the CLI prints it), so the adoption's warning would say it twice; it is then
    logged at INFO like any other backup."""

    def __init__(self, url: str | URL, needed: Callable[[StoreState], bool], *,
                 reported_by_caller: bool = False) -> None:  # fmt: skip
        self.url = url
        self.needed = needed
        self.reported_by_caller = reported_by_caller
        self.found: StoreState | None = None
        self.path: Path | None = None

    def __call__(self, connection: Connection, state: StoreState) -> None:
        self.found = state
        if self.path is not None or not self.needed(state):
            return
        # A file that will be refused for its shape gets nothing written beside it either.
        check_shape(connection, state)
        self.path = backup_database(self.url)
        if self.path is None:
            return
        if state.alembic_revision is None and not self.reported_by_caller:
            logger.warning(
                "adopting %s, a database sessionstore did not write: backup written to %s",
                self.url, self.path,
            )
        else:
            logger.info("backup of %s written to %s before its schema changes",
                        self.url, self.path)


def adoption_backup(url: str | URL) -> BackupBeforeChange:
    """The backup ``SessionDB`` takes: before the first adoption of a store only."""
    return BackupBeforeChange(url, needs_adoption_backup)
