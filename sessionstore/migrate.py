"""Run the Alembic chain from code: the same scripts as ``alembic upgrade head``, no checkout.

The migration scripts ship inside the package (``sessionstore._migrations``), and the Alembic
``Config`` is built here, so an installed wheel can upgrade a store (``sessionstore db upgrade``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from . import legacy
from .config import resolve_url
from .dialects import dialect_for
from .engine import create_store_engine
from .errors import StoreBusyError, StoreUnavailableError
from .retry import RetryPolicy, run_with_retry

T = TypeVar("T")

if TYPE_CHECKING:
    from .transfer import TransferResult

HEAD = "head"


def script_location() -> str:
    return str(Path(str(resources.files("sessionstore._migrations"))))


def alembic_config(url: str | None = None, *, connection: Connection | None = None) -> Config:
    """An Alembic Config for ``url`` (or an open ``connection`` whose transaction you own)."""
    cfg = Config()
    cfg.set_main_option("script_location", script_location())
    # configparser treats % as interpolation: URL-encoded passwords must be doubled.
    cfg.set_main_option("sqlalchemy.url", resolve_url(url).replace("%", "%%"))
    cfg.attributes["configure_logger"] = False
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def script_directory() -> ScriptDirectory:
    return ScriptDirectory.from_config(alembic_config("sqlite://"))


HEAD_REVISION = "0021"
"""The newest revision this release ships. A constant so that opening an up-to-date store
costs one small read and no Alembic work; tests/test_migrations.py checks it against the
scripts, so a new revision cannot forget to move it."""


def head_revision() -> str:
    return HEAD_REVISION


def upgrade(url: str | None = None, revision: str = HEAD) -> None:
    """Bring the store at ``url`` to ``revision``, adopting a legacy Hermes file first."""
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str | None, revision: str) -> None:
    command.downgrade(alembic_config(url), revision)


def stamp(url: str | None, revision: str) -> None:
    command.stamp(alembic_config(url), revision)


@dataclass(frozen=True)
class Status:
    revision: str | None
    schema_version: int | None
    head: str

    @property
    def up_to_date(self) -> bool:
        return self.revision == self.head


def status_of(connection: Connection) -> Status:
    state = legacy.read_state(connection)
    return Status(state.alembic_revision, state.schema_version, head_revision())


def _inspect(url: str | None, look: Callable[[Connection], T]) -> T:
    """Run ``look`` on a connection that only looks; driver errors come out as this
    package's errors.

    Opening a store starts here, so a file that is not a database, cannot be opened, or is
    locked by another program must be reported in those words, not as a driver traceback. A
    connection the server dropped (a restart, pg_terminate_backend) is retried on a new one.
    """
    engine = create_store_engine(url, set_journal_mode=False)
    dialect = dialect_for(engine)
    started = time.monotonic()

    def attempt() -> T:
        with engine.connect() as connection:
            return look(connection)

    try:
        return run_with_retry(attempt, dialect.is_disconnect, RetryPolicy())
    except StoreBusyError as exc:
        raise StoreUnavailableError(
            f"lost the connection to the database {exc.attempts} times in a row: "
            f"{exc.last_error}"
        ) from exc.last_error
    except DBAPIError as exc:
        if dialect.is_retryable(exc):
            # The busy timeout already waited; a status read is not worth a retry loop.
            raise StoreBusyError(1, time.monotonic() - started, exc) from exc
        translated = dialect.translate_error(exc)
        if translated is not None:
            raise translated from exc
        raise
    finally:
        engine.dispose()


def status(url: str | None = None) -> Status:
    return _inspect(url, status_of)


def current(url: str | None = None) -> str | None:
    """The Alembic revision the store is at (None for an empty or unadopted legacy store)."""
    return _inspect(
        url, lambda connection: MigrationContext.configure(connection).get_current_revision()
    )


def history() -> list[tuple[str, str | None, str]]:
    """(revision, down_revision, first docstring line), oldest first."""
    revisions = list(script_directory().walk_revisions())
    revisions.reverse()
    return [
        (rev.revision, rev.down_revision if isinstance(rev.down_revision, str) else None,
         (rev.doc or "").strip().splitlines()[0] if rev.doc else "")
        for rev in revisions
    ]


def copy(
    src_url: str, dst_url: str, *, progress: Callable[[int], None] | None = None
) -> TransferResult:
    """Move a whole store (e.g. a SQLite file into PostgreSQL), streamed in batches.

    The target is upgraded to head first; ids, lineage, titles, counters, JSON and timestamps
    are preserved, sequences advanced, and the counts verified at the end. Restartable: an
    interrupted copy is completed by running it again.
    """
    from .store import Store
    from .transfer import copy_store

    upgrade(src_url)
    upgrade(dst_url)
    with Store.open(src_url, read_only=True) as source, Store.open(dst_url) as target:
        return copy_store(source, target, progress=progress)
