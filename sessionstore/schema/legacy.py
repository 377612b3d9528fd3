"""Adopting databases that Hermes (or an older sessionstore) wrote without Alembic.

Every Hermes ``state.db`` has a ``schema_version`` row but no ``alembic_version`` table. Before
Alembic runs, this step reads the Hermes number, refuses what it cannot understand (a number
above the newest it knows, a revision it does not ship) and otherwise stamps a revision, so
Alembic continues the chain from there. It runs inside the migration transaction: a refusal
leaves the file exactly as it was.

Adoption goes by content, not by number. Up to v6 a number names one shape. From v7 on it
does not (columns and indexes landed without a bump, some bumps carry no DDL, a v17 file may
lack columns newest Hermes adds without a bump, and the FTS tables may be external-content or
inline), so a file numbered 7..17 is stamped at the last revision whose shape its columns
prove (at most v6 plus our own search revisions, ``LATER_CHAIN_BASE``), and every later
revision adds only what is missing, keeps every row, value and extra column, and rebuilds the
full-text objects from the rows. The same holds for a file sessionstore upgraded that a newer
Hermes then moved on: its ``alembic_version`` is older than its ``schema_version`` says, and
the chain from that revision completes it the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import NamedTuple

from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection

from ..dialects import dialect_for
from ..errors import SchemaTooNewError, UnknownRevisionError

logger = logging.getLogger(__name__)

NEWEST_HERMES_SCHEMA = 22
HERMES_REVISIONS = {
    **{version: f"{version:04d}" for version in range(1, 7)},
    **{version: f"{version + 3:04d}" for version in range(7, 18)},
    **{version: f"{version + 8:04d}" for version in range(18, 23)},
}
"""The revision that reproduces each Hermes schema number (v7 is 0010 ... v17 is 0020; our
search revisions 0021...0025 keep 17; v18 is 0026 ... v22 is 0030)."""
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


def check_not_too_new(state: StoreState) -> None:
    if state.schema_version is not None and state.schema_version > NEWEST_HERMES_SCHEMA:
        raise SchemaTooNewError(too_new_message(state.schema_version))


def upgrade_refusal(
    schema_version: int | None, alembic_revision: str | None, known_revisions: Collection[str]
) -> str | None:
    """Why an upgrade would refuse this store, in the words the refusal uses (None: it would
    not). What a message suggests for a store that is not current depends on it: never an
    upgrade that is bound to refuse."""
    if schema_version is not None and schema_version > NEWEST_HERMES_SCHEMA:
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


def missing_for_reads(conn: Connection, session_fields: Collection[str],
                      message_fields: Collection[str]) -> list[str]:
    """What a store lacks for this release's read queries (empty: it can be read as it is)."""
    inspector = inspect(conn)
    missing: list[str] = []
    for table, fields in (("sessions", session_fields), ("messages", message_fields)):
        if not inspector.has_table(table):
            missing.append(f"table {table}")
            continue
        present = {column["name"] for column in inspector.get_columns(table)}
        missing += [f"{table}.{name}" for name in fields if name not in present]
    return missing


def check_revision_known(state: StoreState, known_revisions: Collection[str]) -> None:
    if state.alembic_revision is not None and state.alembic_revision not in known_revisions:
        raise UnknownRevisionError(unknown_revision_message(state.alembic_revision))


def adopt(conn: Connection, known_revisions: Collection[str]) -> Adoption:
    """Refuse or stamp a legacy database; return what it found and the revision stamped."""
    state = read_state(conn)
    check_not_too_new(state)
    check_revision_known(state, known_revisions)
    if state.alembic_revision is not None or not state.has_sessions:
        return Adoption(state, None)
    version = state.schema_version
    revision = adoption_revision(conn, version)
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
