"""The first adoption of a file sessionstore did not write: a consistent backup before changing it.

A Hermes ``state.db`` (or any SQLite file without our ``alembic_version`` table) that holds
tables is someone's history. Before the first migration that sessionstore runs on it, the store
is backed up the way its dialect can (SQLite: the online backup API, a consistent snapshot,
WAL content included, even while Hermes itself has it open; never a byte copy of a live file)
to ``<file>.bak-<timestamp>`` beside it. Once adopted (``alembic_version`` present), a file is
sessionstore's to migrate and no further automatic backups are taken; ``sessionstore db
upgrade`` still takes one whenever it changes the schema. PostgreSQL is not backed up here
(``pg_dump`` is its tool).
"""

from __future__ import annotations

import logging
from pathlib import Path

from sqlalchemy.engine import URL

from ..dialects import backup_database
from .legacy import StoreState, check_not_too_new

logger = logging.getLogger(__name__)


def needs_adoption_backup(state: StoreState) -> bool:
    """True for a store that holds tables sessionstore has never migrated."""
    # A file the migration will refuse (a newer Hermes's) gets nothing written beside it either.
    check_not_too_new(state)
    return state.alembic_revision is None and not state.is_empty


def backup_before_adoption(url: str | URL, state: StoreState) -> Path | None:
    """Back the store up if this is its first adoption; the backup's path, else None.

    ``state`` is what the store said of its schema just before (on the store's own engine).
    """
    if not needs_adoption_backup(state):
        return None
    backup = backup_database(url)
    if backup is not None:
        logger.warning(
            "adopting %s, a database sessionstore did not write: backup written to %s",
            url, backup,
        )
    return backup
