"""Adopting databases that Hermes (or an older sessionstore) wrote without Alembic.

Every Hermes ``state.db`` has a ``schema_version`` row but no ``alembic_version`` table. Before
Alembic runs, this step reads the Hermes number, refuses what it cannot understand (a number
above the newest it knows, a revision it does not ship) and otherwise stamps the matching
revision, so Alembic continues the chain from there. It runs inside the migration transaction:
a refusal leaves the file exactly as it was.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass

from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection

from .errors import SchemaTooNewError, UnknownRevisionError

logger = logging.getLogger(__name__)

NEWEST_HERMES_SCHEMA = 6
HERMES_REVISIONS = {1: "0001", 2: "0002", 3: "0003", 4: "0004", 5: "0005", 6: "0006"}
ALEMBIC_VERSION_TABLE = "alembic_version"


@dataclass(frozen=True)
class StoreState:
    """What a database says about its own schema, read without changing anything."""

    schema_version: int | None
    alembic_revision: str | None
    has_sessions: bool
    has_alembic_table: bool

    @property
    def is_empty(self) -> bool:
        return not self.has_sessions and self.schema_version is None and not self.has_alembic_table


def read_state(conn: Connection) -> StoreState:
    inspector = inspect(conn)
    tables = set(inspector.get_table_names())
    schema_version: int | None = None
    if "schema_version" in tables:
        row = conn.execute(text("SELECT MAX(version) FROM schema_version")).first()
        if row is not None and row[0] is not None:
            schema_version = int(row[0])
    revision: str | None = None
    if ALEMBIC_VERSION_TABLE in tables:
        rows = conn.execute(text(f"SELECT version_num FROM {ALEMBIC_VERSION_TABLE}")).all()
        revision = rows[0][0] if rows else None
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


def check_not_too_new(state: StoreState) -> None:
    if state.schema_version is not None and state.schema_version > NEWEST_HERMES_SCHEMA:
        raise SchemaTooNewError(
            f"this database has schema version {state.schema_version}, newer than the "
            f"{NEWEST_HERMES_SCHEMA} this release of sessionstore understands; it was left "
            "untouched. Upgrade sessionstore (or use the program that wrote it)."
        )


def check_revision_known(state: StoreState, known_revisions: Collection[str]) -> None:
    if state.alembic_revision is not None and state.alembic_revision not in known_revisions:
        raise UnknownRevisionError(
            f"this database is at migration {state.alembic_revision!r}, which this release of "
            "sessionstore does not ship (was it written by a newer version?); it was left "
            "untouched."
        )


def adopt(conn: Connection, known_revisions: Collection[str]) -> str | None:
    """Refuse or stamp a legacy database; return the revision stamped, if any."""
    state = read_state(conn)
    check_not_too_new(state)
    check_revision_known(state, known_revisions)
    if state.alembic_revision is not None or not state.has_sessions:
        return None
    version = state.schema_version
    if version is None or version < 1:
        version = infer_hermes_version(conn)
        logger.warning("schema_version row missing; columns show Hermes schema v%d", version)
    revision = HERMES_REVISIONS[version]
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
    logger.info("adopted a Hermes schema v%d database at revision %s", version, revision)
    return revision
