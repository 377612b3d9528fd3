"""Small, tolerant schema operations shared by the revisions.

Real Hermes files are messy: older code sometimes applied a step half-way, so a column or index
a revision adds may already be there. Every helper here checks first and does nothing twice.
Only alembic and sqlalchemy are imported, so a revision behaves the same forever.
"""

from __future__ import annotations

import re
import sqlite3

import sqlalchemy as sa
from alembic import op

from sessionstore._migrations import search_ddl

SCHEMA_VERSION_TABLE = "schema_version"


def _inspector() -> sa.engine.reflection.Inspector:
    return sa.inspect(op.get_bind())


def table_exists(name: str) -> bool:
    return _inspector().has_table(name)


def column_names(table: str) -> set[str]:
    return {column["name"] for column in _inspector().get_columns(table)}


def index_names(table: str) -> set[str]:
    return {index["name"] for index in _inspector().get_indexes(table) if index["name"]}


def add_column_if_missing(table: str, column: sa.Column[object]) -> None:
    if column.name not in column_names(table):
        op.add_column(table, column)


def create_index_if_missing(name: str, table: str, columns: list[str | sa.TextClause],
                            **kwargs: object) -> None:
    if name not in index_names(table):
        op.create_index(name, table, columns, **kwargs)  # type: ignore[arg-type]


def drop_index_if_present(name: str, table: str) -> None:
    if name in index_names(table):
        op.drop_index(name, table_name=table)


def drop_columns(table: str, names: list[str]) -> None:
    """Drop columns, keeping ``messages``' full-text triggers alive on every SQLite version.

    SQLite >= 3.35 drops a column in place. Older SQLite needs Alembic's batch mode, which
    rebuilds the table and silently loses its triggers: they are re-created right after.
    """
    present = [name for name in names if name in column_names(table)]
    if not present:
        return
    bind = op.get_bind()
    if bind.dialect.name != "sqlite" or sqlite3.sqlite_version_info >= (3, 35, 0):
        for name in present:
            op.drop_column(table, name)
        return
    with op.batch_alter_table(table, recreate="always") as batch:
        for name in present:
            batch.drop_column(name)
    if table == "messages":
        search_ddl.restore_search_triggers(bind)


def set_schema_version(version: int) -> None:
    """Keep Hermes's own version row in step, so Hermes can open the file after us."""
    bind = op.get_bind()
    bind.execute(sa.text(f"DELETE FROM {SCHEMA_VERSION_TABLE}"))
    bind.execute(
        sa.text(f"INSERT INTO {SCHEMA_VERSION_TABLE} (version) VALUES (:version)"),
        {"version": version},
    )


_LINEAGE = re.compile(r"^(.*?) #(\d+)$", re.DOTALL)


def renumber_duplicate_titles() -> int:
    """Give every duplicate title its own lineage number instead of failing the unique index.

    Within each group of equal titles the oldest session (by started_at, then id) keeps the
    title; each later one becomes ``base #N`` with N one above the highest number the lineage
    already uses (a plain title counts as #1), exactly like Hermes's
    ``get_next_title_in_lineage``. No session and no title is dropped. Returns how many rows
    were renamed.
    """
    bind = op.get_bind()
    rows = bind.execute(
        sa.text(
            "SELECT id, title FROM sessions WHERE title IN ("
            " SELECT title FROM sessions WHERE title IS NOT NULL"
            " GROUP BY title HAVING COUNT(*) > 1)"
            " ORDER BY title, started_at, id"
        )
    ).all()
    if not rows:
        return 0
    taken = {
        title
        for (title,) in bind.execute(
            sa.text("SELECT title FROM sessions WHERE title IS NOT NULL")
        )
    }
    renamed = 0
    seen: set[str] = set()
    for session_id, title in rows:
        if title not in seen:
            seen.add(title)
            continue
        match = _LINEAGE.match(title)
        base = match.group(1) if match else title
        highest = 1
        for other in taken:
            if other == base:
                continue
            other_match = _LINEAGE.match(other)
            if other_match and other_match.group(1) == base:
                highest = max(highest, int(other_match.group(2)))
        new_title = f"{base} #{highest + 1}"
        bind.execute(
            sa.text("UPDATE sessions SET title = :title WHERE id = :id"),
            {"title": new_title, "id": session_id},
        )
        taken.add(new_title)
        renamed += 1
    return renamed


REAL = sa.Double().with_variant(sa.REAL(), "sqlite")
"""Hermes's REAL: 8 bytes on SQLite; DOUBLE PRECISION on PostgreSQL, whose REAL is 4."""


def add_columns_if_missing(table: str, columns: list[sa.Column[object]]) -> None:
    present = column_names(table)
    for column in columns:
        if column.name not in present:
            op.add_column(table, column)


def drop_indexes_then_columns(table: str, indexes: list[str], columns: list[str]) -> None:
    """Drop indexes first: SQLite refuses to drop a column an index still names."""
    for name in indexes:
        drop_index_if_present(name, table)
    drop_columns(table, columns)


def create_partial_index_if_missing(
    name: str, table: str, columns: list[str | sa.TextClause], where: str, **kwargs: object
) -> None:
    create_index_if_missing(
        name,
        table,
        columns,
        sqlite_where=sa.text(where),
        postgresql_where=sa.text(where),
        **kwargs,
    )


def table_is_empty(name: str) -> bool:
    bind = op.get_bind()
    return bind.execute(sa.text(f'SELECT 1 FROM "{name}" LIMIT 1')).first() is None


def recreate_empty_table_in_order(table: sa.Table) -> bool:
    """Rebuild a still-empty SQLite table so its physical column order is ``table``'s.

    ``ALTER TABLE ADD COLUMN`` appends, so a store built by the chain has its columns in the
    order they arrived, while a file the newest Hermes creates has them in its declared order
    (and ``SELECT *`` rows, hence Hermes's dicts, follow the physical order). Only a table that
    holds no row, has exactly the wanted columns and has never held a row (no AUTOINCREMENT
    high-water mark) is touched, so no value can be lost; its indexes and triggers are
    re-created from their stored SQL. Returns whether the table was rebuilt. PostgreSQL and
    any table with rows or extra columns are left alone.
    """
    bind = op.get_bind()
    if bind.dialect.name != "sqlite" or not table_exists(table.name):
        return False
    current = [column["name"] for column in _inspector().get_columns(table.name)]
    wanted = [column.name for column in table.columns]
    if current == wanted or sorted(current) != sorted(wanted) or not table_is_empty(table.name):
        return False
    if _inspector().has_table("sqlite_sequence"):
        seq = bind.exec_driver_sql(
            "SELECT 1 FROM sqlite_sequence WHERE name = ?", (table.name,)
        ).first()
        if seq is not None:
            return False
    dependents = [
        str(row[0])
        for row in bind.exec_driver_sql(
            "SELECT sql FROM sqlite_master WHERE tbl_name = ? AND type IN ('index', 'trigger') "
            "AND sql IS NOT NULL ORDER BY type = 'trigger', name",
            (table.name,),
        )
    ]
    bind.exec_driver_sql(f'DROP TABLE "{table.name}"')
    table.create(bind)
    for ddl in dependents:
        bind.exec_driver_sql(ddl)
    return True
