"""The one Alembic environment for sessionstore, used from a checkout and from the wheel.

Where the database comes from, in order: a connection or engine injected by the caller
(``config.attributes["connection"]``: with a connection the caller owns the transaction; with
an engine, the open store's own, the upgrade below runs on it: ``SessionDB`` builds one engine
per store and migrates on it), ``-x url=...`` (a URL or a plain SQLite file path, as the CLI's
``--url``), the ``sqlalchemy.url`` option set by ``sessionstore.schema.migrate``,
``SESSIONSTORE_URL``, the default SQLite file. With a URL, the whole upgrade runs in ONE write
transaction (``BEGIN IMMEDIATE`` on SQLite, an advisory lock on PostgreSQL keyed by the store's
schema): a second process upgrading the same store at the same time waits, then finds nothing
to do; a process killed half-way leaves the old schema intact. On PostgreSQL, what the database
shares (``pg_trgm``) is created first in a short transaction of its own; then the store's
schema (the first the ``search_path`` names) is created when missing and is, for the
migration's transaction, the only schema names resolve in (a tenant never mistakes another
schema's tables for its own), and the revisions' statements are rewritten by the dialect where
that needs it (``migration_statement_rewrite``).

Before the chain runs, under that lock, the caller's ``before_change`` (``migrate.upgrade``'s:
the backup, ``sessionstore.schema.adoption``) is given what the store says of its schema at
that moment, then legacy Hermes files are adopted (``sessionstore.schema.legacy``); after it,
on a store at head, the shapes no revision can reach are healed (``legacy.complete_head_shape``:
Hermes's usage and routing keys, ``messages.active``'s default), and a missing search object is
repaired: the whole head layout is built again
from the runtime's one definition of it (``sessionstore.search``: the same rebuild as
``db doctor --fix``) and filled from the existing messages. A store left below head (an
upgrade to an older target, a downgrade) is not repaired here: the runtime knows only the head
layout, and a revision's objects are its own DDL's.

Run from Alembic's command line (``alembic``, ``python -m sessionstore.migrations``), what the
package refuses (a file from a newer Hermes, a bad URL, a server that is not there) is
Alembic's one-line ``FAILED: ...`` with a non-zero exit status, not a traceback, and as the
CLI it creates no directory and no store on a command that only reads; called from
code (``sessionstore.schema.migrate``), the typed errors propagate as they are. Logging follows the
ini file's sections when it has them; an ini without (a hand-written one) still shows
Alembic's and sessionstore's progress lines on stderr.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Collection, Hashable, Iterator, Mapping
from contextlib import contextmanager
from logging.config import fileConfig
from typing import Any

from alembic import context
from alembic.runtime.migration import MigrationContext, MigrationInfo
from alembic.util import CommandError
from sqlalchemy import event
from sqlalchemy.engine import URL, Connection, Engine

from sessionstore._migrations.chain_state import HERMES_SCHEMA_BEFORE_CHAIN
from sessionstore.dialects import StoreDialect, database_file, dialect_for
from sessionstore.errors import SessionStoreError, StoreLocationError
from sessionstore.schema import legacy, new_store
from sessionstore.schema.migrate import (
    BEFORE_CHANGE_ATTRIBUTE,
    FILE_IDENTITY_REVISION,
    REPLAY_NEW_STORE_ATTRIBUTE,
    in_migration_transaction,
)
from sessionstore.schema.models import SEARCH_OBJECT_NAMES, Base
from sessionstore.search.index import ensure_head_layout
from sessionstore.search.registry import search_index_for
from sessionstore.sql.ledger_tables import ledger_metadata
from sessionstore.storage.config import require_directory, store_location
from sessionstore.storage.engine import create_store_engine

config = context.config
FROM_THE_COMMAND_LINE = config.cmd_opts is not None
"""Alembic's command line built this config (``sessionstore.schema.migrate`` builds its own)."""
PROGRESS_LOGGERS = ("alembic", "sessionstore")
STEP_APPLIED = "step_applied"
"""``config.attributes`` key of a callable told each revision reached (``migrate`` sets it)."""
REACHED = "reached"
"""``config.attributes`` key of the list the revisions reached are written to while the chain
builds a blank store whose result is kept (:mod:`sessionstore.schema.new_store`)."""


def _configure_logging() -> None:
    if config.config_file_name is None or not config.attributes.get("configure_logger", True):
        return
    if config.file_config.has_section("formatters"):
        fileConfig(config.config_file_name, disable_existing_loggers=False)
        return
    root = logging.getLogger()
    if FROM_THE_COMMAND_LINE and not root.handlers:
        # Only these loggers at INFO: a root at INFO would make SQLAlchemy echo every statement.
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)-5.5s [%(name)s] %(message)s"))
        root.addHandler(handler)
        for name in PROGRESS_LOGGERS:
            logging.getLogger(name).setLevel(logging.INFO)


_configure_logging()

# Commands that only read must not stamp a legacy file as a side effect.
READ_ONLY_COMMANDS = frozenset({"current", "history", "heads", "branches", "show", "check"})


def include_name(name: str | None, type_: str, _parent_names: object) -> bool:
    """Hide the raw-DDL full-text objects from autogenerate: the models do not describe them."""
    if type_ in ("table", "index", "column") and name is not None:
        return name not in SEARCH_OBJECT_NAMES and not name.startswith(
            ("messages_fts", "messages_trigram")
        )
    return True


def _command_name() -> str:
    """The Alembic command run from its command line ("" when called from code)."""
    command = getattr(config.cmd_opts, "cmd", None)
    return getattr(command[0], "__name__", "") if command else ""


def _should_adopt() -> bool:
    if not config.attributes.get("adopt_legacy", True):
        return False
    return _command_name() not in READ_ONLY_COMMANDS


def _check_named_location(url: URL) -> None:
    """From Alembic's command line, as from the CLI: a command that only reads creates no
    store (``current`` on a missing file would leave an empty one behind), and none creates a
    directory it was not asked to (:func:`~sessionstore.storage.config.require_directory`)."""
    path = database_file(url)
    if path is None or path.exists():
        return
    if _command_name() in READ_ONLY_COMMANDS:
        raise StoreLocationError(f"no session store at {path} (`upgrade head` creates one)")
    require_directory(url)


def _run_chain(connection: Connection) -> None:
    try:
        _adopt_and_migrate(connection)
    finally:
        # A KeyboardInterrupt mid-statement invalidates the connection (SQLite rolls the
        # chain back as it closes); touching its info then raises SQLAlchemy's
        # PendingRollbackError, which would replace the interrupt the user caused.
        if not connection.invalidated:
            connection.info.pop(HERMES_SCHEMA_BEFORE_CHAIN, None)


def _adopt_and_migrate(connection: Connection) -> None:
    dialect = dialect_for(connection)
    before_change = config.attributes.get(BEFORE_CHANGE_ATTRIBUTE)
    if before_change is not None:
        # Under the lock: what the store says now, not what the caller saw before waiting.
        before_change(connection, legacy.read_state(connection))
    blank = _blank_store_key(connection, dialect)
    built = None if blank is None else new_store.built_store(dialect, blank)
    if built is not None:
        _, stamp_file_identity = _file_identity()
        new_store.build_from_image(connection, dialect, built, stamp_file_identity,
                                   _report_reached)
        return
    config.attributes[REACHED] = [] if blank is not None else None
    try:
        _migrate(connection, dialect)
        if blank is not None and _at_head():
            _keep_built_store(connection, dialect, blank)
    finally:
        config.attributes.pop(REACHED, None)


def _blank_store_key(connection: Connection, dialect: StoreDialect) -> Hashable | None:
    """The key of a blank store that may be built from its image (or the chain's result on it be
    kept for), read under the migration's lock; None for every other store and migration."""
    if not (config.attributes.get(REPLAY_NEW_STORE_ATTRIBUTE) and _should_adopt()):
        return None
    return dialect.blank_store_key(connection)


def _file_identity() -> tuple[str, Callable[[Connection], None]]:
    """The ``state_meta`` key of a file's identity token and the step that stamps it (with the
    ``application_id`` derived from it) where it is missing: revision 0039's own."""
    identity = context.script.get_revision(FILE_IDENTITY_REVISION).module
    return str(identity.GENERATION), identity.stamp_file_identity


def _keep_built_store(connection: Connection, dialect: StoreDialect, blank: Hashable) -> None:
    """Read back what the chain built on a blank store (in its transaction) and keep it."""
    image = dialect.capture_new_store(connection)
    if image is None:
        return
    generation, _ = _file_identity()
    # The blank file's application_id was 0 (``blank_store_key``): the identity step sets it.
    image = image.without_rows("state_meta", generation).with_header("application_id", 0)
    reached = tuple(config.attributes.get(REACHED) or ())
    new_store.keep_built_store(dialect, blank, new_store.BuiltStore(image, reached))


def _migrate(connection: Connection, dialect: StoreDialect) -> None:
    if _should_adopt():
        known = {rev.revision for rev in context.script.walk_revisions()}
        adoption = legacy.adopt(connection, known)
        if adoption.stamped is not None:
            _report_reached(adoption.stamped)  # the steps before it are Hermes's own
        # Data steps Hermes already ran on this file (v16's backfill) must not run again.
        connection.info[HERMES_SCHEMA_BEFORE_CHAIN] = adoption.found.schema_version
    # iot's delivery ledger is no model of the head's (sql.ledger_tables): where the chain
    # makes it, autogenerate compares it too; elsewhere it is iot's, and absent at head.
    models = [Base.metadata, ledger_metadata] if dialect.migrations_make_delivery_ledger else [
        Base.metadata]  # fmt: skip
    context.configure(
        connection=connection,
        target_metadata=models,
        include_name=include_name,
        # SQLite can run DDL in a transaction too: all steps commit together or not at all.
        transactional_ddl=True,
        compare_type=True,
        on_version_apply=_step_applied,
    )
    rewrite = dialect.migration_statement_rewrite(connection)
    with _statements_rewritten(connection, rewrite), context.begin_transaction():
        context.run_migrations()
    if _should_adopt() and _at_head():
        # Shapes that a revision's "add when absent" cannot reach (a wrong key, a column
        # without its default), recognised by content and healed in this transaction.
        legacy.complete_head_shape(connection)
        if _has_messages(connection):
            ensure_head_layout(search_index_for(dialect), connection)


def _step_applied(
    ctx: MigrationContext, step: MigrationInfo, heads: Collection[Any], run_args: Mapping[str, Any]
) -> None:
    """Tell the caller (``migrate.upgrade(..., progress=...)``) each revision reached: a big
    store's upgrade takes seconds, and the CLI shows which step runs."""
    _report_reached(",".join(step.destination_revision_ids) or "base")


def _report_reached(revision: str) -> None:
    reached = config.attributes.get(REACHED)
    if reached is not None:
        reached.append(revision)
    report = config.attributes.get(STEP_APPLIED)
    if report is not None:
        report(revision)


@contextmanager
def _statements_rewritten(
    connection: Connection, rewrite: Callable[[str], str] | None
) -> Iterator[None]:
    """While the chain runs, every statement sent on ``connection`` passes through
    ``rewrite`` (the dialect's: the revisions are frozen, the database they run in is not)."""
    if rewrite is None:
        yield
        return

    def rewritten(
        _conn: Connection, _cursor: Any, statement: str, parameters: Any, _context: Any,
        _executemany: bool,
    ) -> tuple[str, Any]:
        return rewrite(statement), parameters

    event.listen(connection, "before_cursor_execute", rewritten, retval=True)
    try:
        yield
    finally:
        event.remove(connection, "before_cursor_execute", rewritten)


def _has_messages(connection: Connection) -> bool:
    return bool(dialect_for(connection).existing_tables(connection, ("messages",)))


def _at_head() -> bool:
    head = context.script.get_current_head()
    return context.get_context().get_current_revision() == head


def _store_url() -> URL:
    """``-x url=`` (a URL or a plain path; empty is refused), else the config's URL, else the
    environment's rules."""
    given = context.get_x_argument(as_dictionary=True).get("url")
    located = config.attributes.get("store_url")
    if given is None and isinstance(located, URL):
        return located  # ``schema.migrate``'s own: a URL object, as the store was named
    if given is None:
        given = config.get_main_option("sqlalchemy.url") or None
    return store_location(given)


def run_migrations_offline() -> None:
    url = _store_url()
    context.configure(
        url=url,
        target_metadata=Base.metadata,
        include_name=include_name,
        literal_binds=True,
        transactional_ddl=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def _migrate_with_engine(engine: Engine) -> None:
    # The lock, the retry and the connection's end: ``schema.migrate``'s, one home for both
    # ways a store is built.
    in_migration_transaction(engine, _run_chain)


def run_migrations_online() -> None:
    injected = config.attributes.get("connection")
    if isinstance(injected, Engine):
        _migrate_with_engine(injected)
        return
    if injected is not None:
        _run_chain(injected)
        return
    url = _store_url()
    if FROM_THE_COMMAND_LINE:
        _check_named_location(url)
    # Journal mode untouched: a refused (too new) file must stay byte-identical. A file this
    # run made is put in WAL once it is built, as a store's first open makes one: left in the
    # rollback journal, the next open switched it and said so, as if someone had chosen it.
    file = database_file(url)
    made_here = file is not None and not (file.is_file() and file.stat().st_size > 0)
    engine = create_store_engine(url, set_journal_mode=False)
    try:
        _migrate_with_engine(engine)
        if made_here:
            dialect_for(engine).enable_journal_mode(engine)
    finally:
        engine.dispose()


def run_migrations() -> None:
    try:
        if context.is_offline_mode():
            run_migrations_offline()
        else:
            run_migrations_online()
    except SessionStoreError as exc:
        if not FROM_THE_COMMAND_LINE:
            raise
        # Alembic prints a CommandError as one "FAILED: ..." line and exits with status 1.
        raise CommandError(f"{type(exc).__name__}: {exc}") from exc


run_migrations()
