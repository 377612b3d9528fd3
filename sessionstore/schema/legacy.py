"""Adopting databases that Hermes (or an older sessionstore) wrote without Alembic.

Every Hermes ``state.db`` has a ``schema_version`` row but no ``alembic_version`` table. Before
Alembic runs, this step reads the Hermes number, refuses what it cannot understand (a number
above the newest it knows, a revision it does not ship) and otherwise stamps a revision, so
Alembic continues the chain from there. It runs inside the migration transaction: a refusal
leaves the file exactly as it was.

Adoption goes by content, not by number. Up to v6 a number names one shape. From v7 on it
does not (columns and indexes landed without a bump, some bumps carry no DDL, a v17 file may
lack columns newest Hermes adds without a bump, a file may carry 0.19.0's tables under the
number 17 when Hermes ran without FTS5, and the FTS tables may be external-content or inline),
so a file numbered 7..22 is stamped at the last revision whose shape its columns prove (at
most v6 plus our own search revisions, ``LATER_CHAIN_BASE``), and every later revision adds
only what is missing, keeps every row, value and extra column, and rebuilds the full-text
objects from the rows. Hermes's data steps (v16, v18, v20) run only where the file's number
says Hermes has not run them, as Hermes's own open decides. The same holds for a file
sessionstore upgraded that a newer Hermes then moved on: its ``alembic_version`` is older than
its ``schema_version`` says, and the chain from that revision completes it the same way.

Three shapes are there but wrong, and no revision's "add when absent" reaches them: the usage
table keyed without ``task`` at 22 (#73823), the routing table without ``scope`` (#59203),
``messages.active`` without its default (#51646). :func:`complete_head_shape` recognises them
by their keys and column definitions and heals them after the chain, in its transaction. The
keys, and which wrong keys are healed rather than refused, have one home:
``hermes_shapes.KEYS`` and ``hermes_shapes.KEY_HEALS`` (the shape verdict reads the same).

A Hermes file numbered 18 to 31 must also have the shape its number names
(:func:`check_shape`, by ``hermes_shapes.judge``: forks reuse Hermes's numbers for unrelated
schemas); one that does not is refused before anything is written, backup included.

A store at our head whose ``schema_version`` is above the newest we know was moved on by a
newer Hermes after we wrote it (Hermes never touches ``alembic_version``): it is refused for
writing like any file of that schema (``migrate.Status.up_to_date`` is false for it, so every
door asks :func:`upgrade_refusal` and says the same), and read as it is. A file refused for
its shape is told the same way: ``migrate.status_of`` carries :func:`shape_refusal`, and every
door (``db current``, ``db doctor``, the reading verbs, ``SessionDB``) says it instead of
suggesting an upgrade that would refuse.
"""

from __future__ import annotations

import functools
import logging
import re
import warnings
from collections.abc import Collection
from typing import TYPE_CHECKING, Any, NamedTuple

from sqlalchemy import Column, MetaData, inspect, text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError, SAWarning
from sqlalchemy.schema import CreateColumn

from ..dialects import dialect_for
from ..errors import SchemaShapeError, SchemaTooNewError, UnknownRevisionError
from ..sql.tables import metadata as head_metadata
from ..sql.tables import sessions_table

if TYPE_CHECKING:
    from .hermes_shapes import KeyHeal

# ``hermes_shapes`` (the shapes of Hermes's numbers, the keys and their heals) is imported by
# the functions that judge or heal a file, not here: opening a store that is already ours
# reads its two version numbers and nothing of it (about 2 ms of every process's import,
# ``scripts/startup.py``).

logger = logging.getLogger(__name__)

NEWEST_HERMES_SCHEMA = 31
HERMES_REVISIONS = {
    **{version: f"{version:04d}" for version in range(1, 7)},
    **{version: f"{version + 3:04d}" for version in range(7, 18)},
    **{version: f"{version + 8:04d}" for version in range(18, 32)},
}
"""The revision that reproduces each Hermes schema number (v7 is 0010 ... v17 is 0020; our
search revisions 0021...0025 keep 17; v18 is 0026 ... v22 is 0030 ... v31 is 0039)."""
LATER_CHAIN_BASE = "0008"
"""The revision a v7..v17 file with every v6 column is adopted at: v6 plus our own search
revisions, whose objects the later chain replaces anyway."""
ALEMBIC_VERSION_TABLE = "alembic_version"
SCHEMA_VERSION_TABLE = "schema_version"


class StoreState(NamedTuple):  # not a dataclass: see migrate.Status
    """What a database says about its own schema, read without changing anything."""

    schema_version: int | None
    alembic_revision: str | None
    has_sessions: bool
    has_alembic_table: bool

    @property
    def is_empty(self) -> bool:
        return not self.has_sessions and self.schema_version is None and not self.has_alembic_table


class Adoption(NamedTuple):
    """What :func:`adopt` found before it changed anything, and the revision it stamped.

    The migration environment records ``found.schema_version`` for the chain's data steps
    (``sessionstore._migrations.chain_state``): this module stays below the migrations and
    never imports them."""

    found: StoreState
    stamped: str | None


def read_state(conn: Connection) -> StoreState:
    """Two small queries, whatever the store: which tables exist (one catalog query, not the
    Inspector), then both version numbers in one SELECT. Opening an up-to-date store costs
    exactly this."""
    tables = dialect_for(conn).existing_tables(
        conn, (SCHEMA_VERSION_TABLE, ALEMBIC_VERSION_TABLE, "sessions")
    )
    schema_version: int | None = None
    revision: str | None = None
    if tables & {SCHEMA_VERSION_TABLE, ALEMBIC_VERSION_TABLE}:
        hermes = (
            f"(SELECT MAX(version) FROM {SCHEMA_VERSION_TABLE})"
            if SCHEMA_VERSION_TABLE in tables
            else "NULL"
        )
        alembic = (
            f"(SELECT version_num FROM {ALEMBIC_VERSION_TABLE} LIMIT 1)"
            if ALEMBIC_VERSION_TABLE in tables
            else "NULL"
        )
        row = conn.exec_driver_sql(f"SELECT {hermes}, {alembic}").one()
        schema_version = None if row[0] is None else int(row[0])
        revision = None if row[1] is None else str(row[1])
    return StoreState(
        schema_version=schema_version,
        alembic_revision=revision,
        has_sessions="sessions" in tables,
        has_alembic_table=ALEMBIC_VERSION_TABLE in tables,
    )


def infer_hermes_version(conn: Connection) -> int:
    """The Hermes version a file's columns prove, for files that lost their version row."""
    inspector = inspect(conn)
    session_columns = {c["name"] for c in inspector.get_columns("sessions")}
    message_columns = (
        {c["name"] for c in inspector.get_columns("messages")}
        if inspector.has_table("messages")
        else set()
    )
    with warnings.catch_warnings():  # a v30+ file's expression index: skipped, as expected
        warnings.filterwarnings(
            "ignore", "Skipped unsupported reflection of expression-based index", SAWarning
        )
        session_indexes = {i["name"] for i in inspector.get_indexes("sessions")}
    if "reasoning" in message_columns:
        return 6
    if "cache_read_tokens" in session_columns:
        return 5
    if "idx_sessions_title_unique" in session_indexes:
        return 4
    if "title" in session_columns:
        return 3
    if "finish_reason" in message_columns:
        return 2
    return 1


def too_new_message(schema_version: int) -> str:
    return (
        f"this database has schema version {schema_version}, newer than the "
        f"{NEWEST_HERMES_SCHEMA} this release of sessionstore understands; it was left "
        "untouched. Reading it is still possible while its tables keep the columns this "
        "release reads: open it read-only (SessionDB(path, read_only=True); the CLI's reading "
        "verbs do so by themselves). Writing to it needs a sessionstore release that knows "
        f"schema {schema_version}; until then let the program that wrote it write."
    )


def is_too_new(schema_version: int | None) -> bool:
    """A Hermes number this release does not know (whatever ``alembic_version`` says)."""
    return schema_version is not None and schema_version > NEWEST_HERMES_SCHEMA


def check_not_too_new(state: StoreState) -> None:
    if state.schema_version is not None and is_too_new(state.schema_version):
        # A newer Hermes's file, or one it moved on after we adopted it (our alembic_version,
        # its higher number): refused whatever alembic_version says.
        raise SchemaTooNewError(too_new_message(state.schema_version))


def upgrade_refusal(
    schema_version: int | None, alembic_revision: str | None, known_revisions: Collection[str]
) -> str | None:
    """Why an upgrade would refuse this store, in the words the refusal uses (None: it would
    not). What a message suggests for a store that is not current depends on it: never an
    upgrade that is bound to refuse."""
    if schema_version is not None and is_too_new(schema_version):
        return too_new_message(schema_version)
    if alembic_revision is not None and alembic_revision not in known_revisions:
        return unknown_revision_message(alembic_revision)
    return None


def unknown_revision_message(revision: str) -> str:
    return (
        f"this database is at migration {revision!r}, which this release of sessionstore "
        "does not ship (was it written by a newer version?); it was left untouched."
    )


def adoption_revision(conn: Connection, schema_version: int | None) -> str:
    """The revision a Hermes file without ``alembic_version`` is stamped at (by content)."""
    proven = infer_hermes_version(conn)
    if schema_version is None or schema_version < 1:
        logger.warning("schema_version row missing; columns show Hermes schema v%d", proven)
        return HERMES_REVISIONS[proven] if proven < 6 else LATER_CHAIN_BASE
    if schema_version <= 6:
        return HERMES_REVISIONS[schema_version]
    # A number above 6 names no single shape: start from what the columns prove.
    return HERMES_REVISIONS[proven] if proven < 6 else LATER_CHAIN_BASE


def hermes_number_of(revision: str) -> int | None:
    """The Hermes schema number a revision of ours leaves (its own, or the last before it:
    our search revisions keep the number they follow); None before v1."""
    numbers = [number for number, stamp in HERMES_REVISIONS.items() if stamp <= revision]
    return max(numbers) if numbers else None


def rerun_revision(schema_version: int | None, revision: str | None) -> str | None:
    """Where the chain restarts for a store whose ``schema_version`` was set below the number
    its revision leaves; None for every other store.

    Hermes decides its data steps by that number alone: a file set back to 15 gets v16's
    delegate tags, v18's gateway metadata from ``sessions.json`` and v20's usage seed again
    on its next open (Hermes's own migration tests set it back so on a current file). Ours
    follow it: the revision that number names is stamped and the chain runs from there; each
    step adds only what is missing and each data step fills only what is empty, so a current
    store loses nothing. Below v7 the strict v1…v6 steps are not run again: the chain restarts
    after v6 (``LATER_CHAIN_BASE``). No Hermes lowers the number, and our downgrades keep the
    two in step; only a hand (or a test) sets it back.
    """
    if schema_version is None or revision is None:
        return None
    number = hermes_number_of(revision)
    if number is None or schema_version >= number:
        return None
    restart = HERMES_REVISIONS[schema_version] if schema_version >= 7 else LATER_CHAIN_BASE
    return restart if restart < revision else None


def check_revision_known(state: StoreState, known_revisions: Collection[str]) -> None:
    if state.alembic_revision is not None and state.alembic_revision not in known_revisions:
        raise UnknownRevisionError(unknown_revision_message(state.alembic_revision))


def shape_refusal(conn: Connection, state: StoreState) -> str | None:
    """Why a Hermes file (not yet ours) is not the schema its number names, in the words of
    the refusal; None when it is, or when its number is not judged (``hermes_shapes.judge``:
    numbers 18 and up; up to 17 every shape is adopted by content). Reads the catalog only for
    such a file: an adopted store costs nothing more."""
    number = state.schema_version
    if state.alembic_revision is not None or not state.has_sessions or number is None:
        return None
    from .hermes_shapes import NEWEST_JUDGED, OLDEST_JUDGED, Catalog, judge

    if not OLDEST_JUDGED <= number <= NEWEST_JUDGED:
        return None
    return judge(Catalog.read(conn), number).refusal()


def check_shape(conn: Connection, state: StoreState) -> None:
    """Refuse a Hermes file whose number names a schema its tables do not match."""
    refusal = shape_refusal(conn, state)
    if refusal is not None:
        raise SchemaShapeError(refusal)


def adopt(conn: Connection, known_revisions: Collection[str]) -> Adoption:
    """Refuse or stamp a legacy database; return what it found and the revision stamped."""
    state = read_state(conn)
    check_not_too_new(state)
    check_revision_known(state, known_revisions)
    if state.alembic_revision is not None:
        restart = rerun_revision(state.schema_version, state.alembic_revision)
        if restart is None:
            return Adoption(state, None)
        conn.execute(
            text(f"UPDATE {ALEMBIC_VERSION_TABLE} SET version_num = :rev"), {"rev": restart}
        )
        logger.warning(
            "schema_version says Hermes schema v%s but the store is at revision %s: the "
            "chain runs again from revision %s, Hermes's data steps after v%s included "
            "(each step adds only what is missing)",
            state.schema_version, state.alembic_revision, restart, state.schema_version,
        )  # fmt: skip
        return Adoption(state, restart)
    if not state.has_sessions:
        return Adoption(state, None)
    check_shape(conn, state)
    version = state.schema_version
    revision = adoption_revision(conn, version)
    if revision == LATER_CHAIN_BASE:
        added = add_missing_v6_columns(conn)
        if added:
            logger.warning(
                "a Hermes schema v%s database without some of v6's columns: added %s "
                "(Hermes's open adds them too)", version, ", ".join(added),
            )  # fmt: skip
    if not state.has_alembic_table:
        conn.execute(
            text(
                f"CREATE TABLE {ALEMBIC_VERSION_TABLE} (version_num VARCHAR(32) NOT NULL, "
                f"CONSTRAINT {ALEMBIC_VERSION_TABLE}_pkc PRIMARY KEY (version_num))"
            )
        )
    conn.execute(
        text(f"INSERT INTO {ALEMBIC_VERSION_TABLE} (version_num) VALUES (:rev)"), {"rev": revision}
    )
    # Alembic then logs each step by the Hermes schema that step introduced ("Running upgrade
    # 0009 -> 0010, Hermes schema v7"): on a newer file those steps only add what it lacks.
    logger.info(
        "adopted a Hermes schema v%s database at revision %s; the steps after it add only what "
        "this file lacks (each is named by the Hermes schema that introduced it)",
        version, revision,
    )
    return Adoption(state, revision)


def add_missing_v6_columns(conn: Connection) -> list[str]:
    """Add the v6 columns (``hermes_shapes.V6_COLUMNS``) a file adopted after v6 lacks, each
    as the head declares it; what was added, as ``table.column``.

    The later chain adds only what each later Hermes number introduced, so a v6 column missing
    from a file numbered 7…22 would stay missing, and the first step that reads it (v16's
    delegate tags read ``model_config``) would fail the whole adoption. Hermes's own open adds
    every column its schema declares that a table lacks; so does this, for v6's. A column the
    head declares ``NOT NULL`` without a default is added nullable (existing rows have no
    value for it); a missing key column is left alone (no Hermes file lacks one).
    """
    from .hermes_shapes import V6_COLUMNS
    from .models import SCHEMA_VERSION  # noqa: F401 - completes the head tables' definitions

    inspector = inspect(conn)
    added: list[str] = []
    for table_name, names in V6_COLUMNS.items():
        if not inspector.has_table(table_name):
            continue
        present = {column["name"] for column in inspector.get_columns(table_name)}
        head = head_metadata.tables[table_name]
        for name in names:
            column = head.c[name]
            if name in present or column.primary_key:
                continue
            definition = Column(
                name,
                column.type,
                nullable=column.nullable or column.server_default is None,
                server_default=column.server_default,
            )
            spec = CreateColumn(definition).compile(dialect=conn.dialect)
            conn.execute(text(f"ALTER TABLE {quoted_name(table_name)} ADD COLUMN {spec}"))
            added.append(f"{table_name}.{name}")
    return added


# -- completing the head shape: what no revision's "add when absent" can express ---------------
# Each revision adds what a file lacks and leaves what is there; three shapes in the field are
# there but wrong, and Hermes itself heals them on every open (iot 0.20.0 onward; 0.19.0 for
# the NULL flags). They are recognised by their keys and column definitions, never by number,
# and completed after the chain, in its transaction (after the first-adoption backup).
ACTIVE_COLUMN_DEFINITION = "INTEGER NOT NULL DEFAULT 1"


@functools.cache
def _active_column() -> re.Pattern[str]:
    """``messages.active``'s definition in a stored ``CREATE TABLE``; compiled when a heal
    first needs it, not at every process's import."""
    return re.compile(
        r"(?P<lead>[(,]\s*)(?P<name>\"active\"|`active`|\[active\]|\bactive\b)(?P<declared>\s+[^,()]*?)"
        r"(?P<tail>\s*(?:,|\)\s*$))",
        re.IGNORECASE,
    )


def complete_head_shape(conn: Connection) -> list[str]:
    """Heal the shapes a head store must not have; what was healed, in words (logged too).

    - ``session_model_usage`` keyed without ``task`` in a file numbered 22 or more (#73823:
      every token write of Hermes 0.19.0 then fails): rebuilt with the v22 key, a plain
      ``task`` column's values kept (else ''), the first row of a key kept (Hermes: ``INSERT
      OR IGNORE``).
    - ``gateway_routing`` keyed by ``session_key`` alone, without ``scope`` (early builds of
      #59203): rebuilt keyed ``(scope, session_key)``, ``scope`` '' where absent, the most
      recently updated entry of a key kept (Hermes: ``INSERT OR REPLACE ... ORDER BY
      updated_at``).
    - ``messages.active`` without ``NOT NULL DEFAULT 1`` (older reconcilers: #51646): rows
      whose flag is NULL (hidden from every ``active = 1`` reader) are set to 1, and the column
      gets its definition, so that a writer that leaves the flag out writes a live message.

    Every row is kept, and every column a fork added to those tables.
    """
    from .hermes_shapes import KEY_HEALS
    from .models import SCHEMA_VERSION  # noqa: F401 - attaches the indexes to the tables

    healed = [heal.healed for heal in KEY_HEALS if _heal_key(conn, heal)]
    active = _heal_active_flag(conn)
    if active:
        healed.append(active)
    for what in healed:
        logger.warning("completed the file's shape: %s", what)
    return healed


def _heal_key(conn: Connection, heal: KeyHeal) -> bool:
    from .hermes_shapes import KEYS, empty_by_default

    inspector = inspect(conn)
    if not inspector.has_table(heal.table):
        return False
    table = head_metadata.tables[heal.table]
    key = list(KEYS[heal.table])
    if inspector.get_pk_constraint(table.name).get("constrained_columns") == key:
        return False
    keep_latest_by = heal.keep_latest_by
    empty_parts = empty_by_default(heal.table)
    present = inspector.get_columns(table.name)
    extras = [
        Column(column["name"], column["type"])
        for column in present
        if column["name"] not in table.c
    ]
    every_row = conn.execute(text(f"SELECT * FROM {quoted_name(table.name)}"))
    rows = [dict(row._mapping) for row in every_row]
    for row in rows:
        for part in key:
            if part in empty_parts and row.get(part) is None:
                row[part] = ""
    if keep_latest_by is not None:
        rows.sort(key=lambda row: (row.get(keep_latest_by) is not None, row.get(keep_latest_by)))
    kept: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in rows:
        identity = tuple(row.get(part) for part in key)
        if keep_latest_by is not None or identity not in kept:
            kept[identity] = row
    rebuilt_metadata = MetaData(naming_convention=table.metadata.naming_convention)
    sessions_table.to_metadata(rebuilt_metadata)  # what the usage table's key refers to
    rebuilt = table.to_metadata(rebuilt_metadata)
    for extra in extras:
        rebuilt.append_column(extra)
    conn.execute(text(f"DROP TABLE {quoted_name(table.name)}"))  # its indexes go with it
    rebuilt.create(conn)
    if kept:
        conn.execute(rebuilt.insert(), list(kept.values()))
    return True


def _heal_active_flag(conn: Connection) -> str | None:
    inspector = inspect(conn)
    if not inspector.has_table("messages"):
        return None
    active = next(
        (column for column in inspector.get_columns("messages") if column["name"] == "active"),
        None,
    )
    if active is None:
        return None
    revived = conn.execute(text("UPDATE messages SET active = 1 WHERE active IS NULL")).rowcount
    defined = not active["nullable"] and active.get("default") is not None
    if defined:
        return f"{revived} message(s) with a NULL active flag made live" if revived else None
    if conn.dialect.name == "sqlite":
        if not _define_sqlite_active_column(conn):
            return f"{revived} message(s) with a NULL active flag made live" if revived else None
    else:
        conn.execute(text(
            "ALTER TABLE messages ALTER COLUMN active SET DEFAULT 1,"
            " ALTER COLUMN active SET NOT NULL"
        ))  # fmt: skip
    return (
        f"messages.active without NOT NULL DEFAULT 1 (#51646): defined so; {revived} message(s) "
        "with a NULL flag made live"
    )


def _define_sqlite_active_column(conn: Connection) -> bool:
    """Give ``messages.active`` its definition in the stored ``CREATE TABLE`` text.

    SQLite cannot alter a column; its documented way to change a default or constraint that
    leaves the stored rows valid is to edit the schema text under ``writable_schema`` and bump
    ``schema_version``. The rows were just made to satisfy ``NOT NULL``, and the new default
    changes no row's value: a row that stores no flag (written before the column was added)
    reads the declared default, NULL, so the UPDATE before this rewrote it with 1. Done in a
    savepoint: a library that forbids it (defensive mode), or a definition not recognised
    exactly once, leaves the text as it was (the NULL flags are healed all the same) and says
    so.
    """
    create_sql = conn.execute(
        text("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'messages'")
    ).scalar_one()
    found = list(_active_column().finditer(create_sql))
    if len(found) != 1:
        logger.warning("messages.active left without its default: definition not recognised")
        return False
    match = found[0]
    rewritten = (
        create_sql[: match.start()]
        + f"{match['lead']}{match['name']} {ACTIVE_COLUMN_DEFINITION}{match['tail']}"
        + create_sql[match.end():]
    )  # fmt: skip
    try:
        with conn.begin_nested():
            cookie = int(conn.exec_driver_sql("PRAGMA schema_version").scalar_one())
            conn.exec_driver_sql("PRAGMA writable_schema = ON")
            try:
                conn.execute(
                    text("UPDATE sqlite_master SET sql = :sql WHERE type = 'table'"
                         " AND name = 'messages'"),
                    {"sql": rewritten},
                )  # fmt: skip
                conn.exec_driver_sql(f"PRAGMA schema_version = {cookie + 1}")
            finally:
                conn.exec_driver_sql("PRAGMA writable_schema = OFF")
            info = {str(row[1]): row for row in conn.exec_driver_sql("PRAGMA table_info(messages)")}
            if not (info["active"][3] == 1 and str(info["active"][4]) == "1"):
                raise RuntimeError(f"messages.active reads {tuple(info['active'])} after the edit")
    except (DBAPIError, RuntimeError) as exc:
        logger.warning("messages.active left without its default: %s", exc)
        return False
    return True


def quoted_name(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
