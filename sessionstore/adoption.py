"""The first adoption of a file sessionstore did not write: a consistent backup before changing it.

A Hermes ``state.db`` (or any SQLite file without our ``alembic_version`` table) that holds
tables is someone's history. Before the first migration that sessionstore runs on it, the file
is copied with SQLite's online backup API (a consistent snapshot, WAL content included, even
while Hermes itself has it open; never a byte copy of a live file) to
``<file>.bak-<timestamp>`` beside it. Once adopted (``alembic_version`` present), a file is
sessionstore's to migrate and no further automatic backups are taken; ``sessionstore db
upgrade`` still takes one whenever it changes the schema.
"""

from __future__ import annotations

import logging
from pathlib import Path

from sqlalchemy.engine import URL, make_url

from . import doctor, legacy
from .store import Store

logger = logging.getLogger(__name__)


def needs_adoption_backup(url: str | URL) -> bool:
    """True for an existing, non-empty SQLite file that sessionstore has never migrated."""
    path = doctor.sqlite_file_of(url)
    if path is None or not path.is_file() or path.stat().st_size == 0:
        return False
    # Read-only: deciding whether to back up must not change the file (not even to WAL).
    with Store.open(make_url(url) if isinstance(url, str) else url, read_only=True) as probe:
        state = probe.read(legacy.read_state)
    # A file the migration will refuse (a newer Hermes's) gets nothing written beside it either.
    legacy.check_not_too_new(state)
    return state.alembic_revision is None and not state.is_empty


def backup_before_adoption(url: str | URL) -> Path | None:
    """Back the file up if this is its first adoption; the backup's path, else None."""
    if not needs_adoption_backup(url):
        return None
    path = doctor.sqlite_file_of(url)
    assert path is not None  # needs_adoption_backup checked it is a file
    backup = doctor.backup_sqlite_file(path)
    logger.warning(
        "adopting %s, a database sessionstore did not write: backup written to %s", path, backup
    )
    return backup
