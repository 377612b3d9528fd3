"""Run the Alembic chain from code: the same scripts as ``alembic upgrade head``, no checkout.

The migration scripts ship inside the package (``sessionstore._migrations``), and the Alembic
``Config`` is built here, so an installed wheel can upgrade a store (``sessionstore db upgrade``).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import threading
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from types import CodeType
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import DBAPIError

from ..dialects import dialect_for, dialect_for_url
from ..errors import StoreBusyError
from ..storage.config import resolve_location, resolve_url
from ..storage.engine import create_store_engine
from ..storage.error_translation import typed_errors
from ..storage.retry import RetryPolicy, run_with_retry
from . import legacy

T = TypeVar("T")

if TYPE_CHECKING:
    # Alembic is imported only when a migration command runs: opening an up-to-date store
    # never needs it (about 100 ms of startup).
    from alembic.config import Config
    from alembic.script import ScriptDirectory

HEAD = "head"

Target = str | URL | Engine | None
"""A store to migrate or look at: a URL (``None``: the configured default), or the engine of
an open store, which is then used as it is (never disposed here)."""


def script_location() -> str:
    return str(Path(str(resources.files("sessionstore._migrations"))))


def _url_text(target: Target) -> str:
    if isinstance(target, Engine):
        return target.url.render_as_string(hide_password=False)
    if isinstance(target, URL):
        return target.render_as_string(hide_password=False)
    return resolve_url(target)


StepApplied = Callable[[str], None]
"""Told the revision each migration step reached, as it is reached (progress for long runs)."""


def alembic_config(
    url: Target = None,
    *,
    connection: Connection | Engine | None = None,
    progress: StepApplied | None = None,
) -> Config:
    """An Alembic Config for ``url``, or for an open ``connection`` whose transaction you own,
    or for an engine (then ``env.py`` migrates in one retried write transaction on it).
    ``progress`` is told each revision reached."""
    from alembic.config import Config

    cfg = Config()
    if progress is not None:
        cfg.attributes["step_applied"] = progress
    cfg.set_main_option("script_location", script_location())
    # configparser treats % as interpolation: URL-encoded passwords must be doubled.
    cfg.set_main_option("sqlalchemy.url", _url_text(url).replace("%", "%%"))
    if url is None or isinstance(url, URL):
        # The object itself for env.py: a file name with ``?``, ``#`` or ``%`` (a default
        # store's Hermes home too) does not survive URL text on every SQLAlchemy
        # (``dialects.file_location``).
        cfg.attributes["store_url"] = resolve_location(url)
    cfg.attributes["configure_logger"] = False
    if connection is None and isinstance(url, Engine):
        connection = url
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


_scripts_lock = threading.Lock()
_scripts: ScriptDirectory | None = None


def script_directory() -> ScriptDirectory:
    """The revisions, loaded once per process and shared by every command run from code.

    Alembic's commands build a ``ScriptDirectory`` each time and execute every revision module
    again to map the chain (39 modules, about a third of a fresh file's upgrade); the scripts
    ship inside the package and do not change while it runs."""
    global _scripts
    with _scripts_lock:
        if _scripts is None:
            from alembic.config import Config
            from alembic.script import ScriptDirectory

            cfg = Config()  # the scripts alone: no database
            cfg.set_main_option("script_location", script_location())
            scripts = ScriptDirectory.from_config(cfg)
            scripts.get_heads()  # map the chain now, under the lock, once
            _scripts = scripts
        return _scripts


HEAD_REVISION = "0045"
"""The newest revision this release ships. A constant so that opening an up-to-date store
costs one small read and no Alembic work; tests/test_migrations.py checks it against the
scripts, so a new revision cannot forget to move it."""


def head_revision() -> str:
    return HEAD_REVISION


BeforeChange = Callable[[Connection, legacy.StoreState], None]
"""Called under the migration's lock, before the chain changes anything, with what the store
says of its schema then (``schema.adoption.BackupBeforeChange`` takes the backup there)."""
BEFORE_CHANGE_ATTRIBUTE = "before_change"
REPLAY_NEW_STORE_ATTRIBUTE = "replay_new_store"
"""Set by :func:`upgrade` to head: a blank store may be built from the chain's result kept in
this process (:mod:`sessionstore.schema.new_store`)."""
FILE_IDENTITY_REVISION = "0039"
"""The revision that gives each file its own identity (iot 0.22.2's ``db_file_generation``
token and ``application_id``): a replayed store gets a new one from its step."""
MIGRATION_RETRY = RetryPolicy(max_attempts=100_000, budget_s=600.0)
"""A migration may wait a long time behind another process's migration of a big file."""


def in_migration_transaction(engine: Engine, work: Callable[[Connection], T]) -> T:
    """``work`` on a connection of ``engine``, in the migration's write transaction and under
    its lock (``env.py`` runs the chain so; :func:`upgrade` builds a blank store from its image
    so), the whole of it retried while the store is busy; a server that cannot be connected
    to is a typed error, by its cause, at once.

    A file's connection is closed afterwards, not given back to the engine's pool: the store
    that opened it would keep it, its driver's statement cache full of the migration's
    statements (hundreds for the chain), and pysqlite3's cache then prepares a newcomer again
    at every run (an append cost 10x for the life of the process; CACHED_STATEMENTS in
    dialects/sqlite.py). An in-memory database lives only while its connection does; a lost
    one is the pool's to discard."""
    dialect = dialect_for(engine)
    in_a_file = dialect.database_file(engine.url) is not None

    def once() -> T:
        dialect.prepare_database(engine)
        with engine.connect() as connection:
            try:
                connection.execution_options(**dialect.write_options())
                with connection.begin():
                    dialect.lock_for_migration(connection)
                    dialect.enter_store_schema(connection)
                    return work(connection)
            finally:
                if in_a_file and not (connection.closed or connection.invalidated):
                    connection.detach()

    with typed_errors(dialect):
        return run_with_retry(once, dialect.is_retryable, MIGRATION_RETRY)


def upgrade(
    url: Target = None,
    revision: str = HEAD,
    *,
    before_change: BeforeChange | None = None,
    progress: StepApplied | None = None,
) -> None:
    """Bring the store at ``url`` to ``revision``, adopting a legacy Hermes file first.

    Given an open store's engine, the migration runs on that engine (one engine per store).
    A full disk, a foreign file, a store kept busy are raised as this package's errors.
    ``progress`` is told each revision reached, as the steps run (one transaction: nothing
    is committed until the last). A blank store upgraded to head is built as the chain built
    the first one this process saw (:mod:`sessionstore.schema.new_store`), and ``progress``
    is told the same revisions."""
    replay = revision in (HEAD, head_revision())
    if replay and isinstance(url, Engine) and _built_from_image(url, before_change, progress):
        return
    _run(url, lambda scripts, rev: scripts._upgrade_revs(revision, rev), revision,
         before_change, progress, replay_new_store=replay)


def _built_from_image(
    engine: Engine, before_change: BeforeChange | None, progress: StepApplied | None
) -> bool:
    """Build the store as ``env.py`` builds a blank store it has an image for
    (:func:`sessionstore.schema.new_store.build_from_image`), without Alembic's environment:
    True when it was built here, False when the chain (or nothing) is for ``env.py`` to run.

    An image exists only once the chain built a store in this process, so Alembic and the
    scripts are loaded by then. Alembic's own work around a replay (its config, its
    environment, ``env.py`` run as a module) was about a tenth of a new store's open."""
    # Imported here, not with this module: opening a store that exists never builds one.
    # Not imported yet, it has built no store in this process, and says so.
    from . import new_store

    dialect = dialect_for(engine)
    if not new_store.has_built_stores(dialect):
        return False
    stamp_file_identity = file_identity_step()

    def build(connection: Connection) -> bool:
        # Nothing happens before the store is found blank (and imaged) under the lock; else
        # ``before_change`` is for the chain's run, told what it finds under its own lock.
        built = new_store.built_store_for(connection, dialect)
        if built is None:
            return False
        if before_change is not None:
            before_change(connection, legacy.read_state(connection))
        new_store.build_from_image(connection, dialect, built, stamp_file_identity, progress)
        return True

    with typed_errors(dialect, url=engine.url):
        return in_migration_transaction(engine, build)


def file_identity_step() -> Callable[[Connection], None]:
    """Revision 0039's own step that stamps a file's identity where it is missing."""
    module = script_directory().get_revision(FILE_IDENTITY_REVISION).module
    step: Callable[[Connection], None] = module.stamp_file_identity
    return step


def downgrade(
    url: Target,
    revision: str,
    *,
    before_change: BeforeChange | None = None,
    progress: StepApplied | None = None,
) -> None:
    _run(url, lambda scripts, rev: scripts._downgrade_revs(revision, rev), revision,
         before_change, progress)


Steps = Callable[["ScriptDirectory", Any], Any]
"""What Alembic's ``command.upgrade``/``downgrade`` hand the environment: the revisions to run
from the store's current one."""


def _run(
    url: Target,
    steps: Steps,
    destination: str,
    before_change: BeforeChange | None,
    progress: StepApplied | None,
    *,
    replay_new_store: bool = False,
) -> None:
    """``alembic.command.upgrade``/``downgrade`` (the same environment, the same ``env.py``),
    on the process's one :func:`script_directory` instead of a new one per call."""
    from alembic.runtime.environment import EnvironmentContext

    cfg = alembic_config(url, progress=progress)
    if before_change is not None:
        cfg.attributes[BEFORE_CHANGE_ATTRIBUTE] = before_change
    if replay_new_store:
        cfg.attributes[REPLAY_NEW_STORE_ATTRIBUTE] = True
    where = url.url if isinstance(url, Engine) else make_url(_url_text(url))
    scripts = script_directory()
    with _environment_lock, typed_errors(dialect_for_url(where), url=where), EnvironmentContext(
        cfg, scripts, fn=lambda rev, _context: steps(scripts, rev),
        destination_rev=destination,
    ):
        _run_env(scripts)


_env_code: tuple[str, CodeType] | None = None


def _run_env(scripts: ScriptDirectory) -> None:
    """``scripts.run_env()``: ``env.py`` executed as a new module, its code compiled once per
    process. Alembic loads the file again at every run, which compiles it from source where
    no compiled file can be kept (``PYTHONDONTWRITEBYTECODE``, as many container images set,
    or a read-only install): 1.5-5 ms of every migrating open, a new store's included."""
    global _env_code
    path = str(Path(scripts.dir) / "env.py")
    with _scripts_lock:
        if _env_code is None or _env_code[0] != path:
            code = importlib.machinery.SourceFileLoader("env_py", path).get_code("env_py")
            if code is None:
                raise ImportError(f"no code in {path}")
            _env_code = (path, code)
        code = _env_code[1]
    spec = importlib.util.spec_from_file_location("env_py", path)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    exec(code, module.__dict__)  # what the loader's exec_module runs


_environment_lock = threading.RLock()
"""One migration at a time in a process: Alembic's ``context`` (what ``env.py`` and the
revisions call) is one module-level object, which a second thread's migration replaced and
then removed under the first (``KeyError: 'script'``): threads opening new stores together
failed. The migrations of one store wait for each other on its own lock anyway."""


def _new_locks_in_child() -> None:
    # A thread of the parent may have held them at the fork; the child has no such thread.
    global _environment_lock, _scripts_lock
    _environment_lock = threading.RLock()
    _scripts_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_locks_in_child)


# NamedTuples, not frozen dataclasses: the open path imports this module, and each dataclass
# compiles its generated methods at import (about 0.8 ms apiece; scripts/startup.py).
class Status(NamedTuple):
    revision: str | None
    schema_version: int | None
    head: str
    shape_refusal: str | None = None
    """Why the file is not the Hermes schema its number names (``legacy.shape_refusal``): read
    by :func:`status_of` for a Hermes file not yet adopted, None otherwise."""

    @property
    def up_to_date(self) -> bool:
        """At our head, and not moved on since: a Hermes newer than this release that opened
        the store after us wrote a higher ``schema_version`` (it never touches
        ``alembic_version``), and may have changed what it maintains. Such a store is as
        foreign as any file of that newer schema: read-only until a release knows it. One
        whose number was set back is not current either (``legacy.rerun_revision``)."""
        return (
            self.revision == self.head
            and not legacy.is_too_new(self.schema_version)
            and legacy.rerun_revision(self.schema_version, self.revision) is None
        )


def upgrade_refusal(status: Status) -> str | None:
    """Why :func:`upgrade` would refuse this store, in its own words; None when it would not
    (a message may then suggest the upgrade)."""
    if status.up_to_date:
        return None
    # The scripts are read only for a revision this release may not ship.
    known = known_revisions() if status.revision is not None else ()
    refusal = legacy.upgrade_refusal(status.schema_version, status.revision, known)
    return refusal if refusal is not None else status.shape_refusal


def known_revisions() -> set[str]:
    return {revision for revision, _, _ in history()}


def status_of(connection: Connection) -> Status:
    """The store's status, with the shape verdict of a Hermes file not yet adopted (so that
    :func:`upgrade_refusal` says what the upgrade would)."""
    state = legacy.read_state(connection)
    return status_from(state, legacy.shape_refusal(connection, state))


def status_from(state: legacy.StoreState, shape_refusal: str | None = None) -> Status:
    """The status from a state already read (without the catalog: give ``shape_refusal`` where
    an upgrade refusal is to be told; :func:`status_of` reads both)."""
    return Status(state.alembic_revision, state.schema_version, head_revision(), shape_refusal)


def _inspect(target: Target, look: Callable[[Connection], T]) -> T:
    """Run ``look`` on a connection that only looks; driver errors come out as this
    package's errors.

    Opening a store starts here, so a file that is not a database, cannot be opened, or is
    locked by another program must be reported in those words, not as a driver traceback. A
    connection the server dropped (a restart, pg_terminate_backend) is retried on a new one.
    An engine given is used as it is; one built here from a URL leaves the journal mode
    alone and is disposed of afterwards.
    """
    owned = not isinstance(target, Engine)
    if isinstance(target, Engine):
        engine = target
    else:
        engine = create_store_engine(target, set_journal_mode=False)
    dialect = dialect_for(engine)
    started = time.monotonic()

    def attempt() -> T:
        with engine.connect() as connection:
            return look(connection)

    try:
        with typed_errors(dialect, url=engine.url):
            try:
                return run_with_retry(attempt, dialect.is_disconnect, RetryPolicy())
            except DBAPIError as exc:
                if dialect.is_retryable(exc):
                    # The busy timeout already waited; a status read is not worth a retry loop.
                    raise StoreBusyError(1, time.monotonic() - started, exc) from exc
                raise
    finally:
        if owned:
            engine.dispose()


def status(url: Target = None) -> Status:
    return _inspect(url, status_of)


def state(url: Target = None) -> legacy.StoreState:
    """What the store says about its own schema (the status plus whether it holds anything)."""
    return _inspect(url, legacy.read_state)


def current(url: Target = None) -> str | None:
    """The Alembic revision the store is at (None for an empty or unadopted legacy store)."""
    return _inspect(url, lambda connection: legacy.read_state(connection).alembic_revision)


def history() -> list[tuple[str, str | None, str]]:
    """(revision, down_revision, first docstring line), oldest first."""
    revisions = list(script_directory().walk_revisions())
    revisions.reverse()
    return [
        (rev.revision, rev.down_revision if isinstance(rev.down_revision, str) else None,
         (rev.doc or "").strip().splitlines()[0] if rev.doc else "")
        for rev in revisions
    ]
