"""What a store's reads select: the one home of the rule for a store that is not at our head.

A record (:mod:`.records`) has the same fields whatever the file it comes from. A store at our
head has every column, and its reads name them all. A store opened read-only as it is (a
Hermes v17 file nobody adopted, a file a newer Hermes numbered past what this release
writes, a store of ours at an older revision) may lack the columns Hermes added in v18...v22:
its reads select each of those as Hermes's default for it (``NULL``, or the ``DEFAULT`` of
its DDL: ``expiry_finalized`` and ``compression_fallback_streak`` are 0), and read nothing
from a table it lacks (``gateway_routing``, ``session_model_usage``, ``async_delegations``):
no routing entry, no per-model usage, no delegation (:data:`LATER_TABLES`). Every other
column is *required*: a store without one cannot be read as it is (an older Hermes file;
``sessionstore db upgrade`` adopts it).

The shape is decided once per open store (:func:`read_shape_of`, by its tables and columns,
never its version number) and kept on the store; statements built from it are built per
store. Writes never use it: a store is written only at our head, where nothing is absent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Table, cast, inspect, null
from sqlalchemy.engine import Connection

from .records import FIELD_DEFAULTS
from .tables import async_delegations_table, gateway_routing_table, session_model_usage_table

LATER_COLUMNS: dict[str, tuple[str, ...]] = {
    "sessions": (
        "display_name", "origin_json", "expiry_finalized", "compression_fallback_streak",
        "profile_name",
    ),
    "messages": ("effect_disposition", "api_content"),
}  # fmt: skip
"""The columns of ``sessions`` and ``messages`` Hermes added in v18...v22: absent from a
store that predates them, they read as their default (:data:`.records.FIELD_DEFAULTS`, else
``NULL``)."""
LATER_TABLES: dict[str, Table] = {
    table.name: table
    for table in (gateway_routing_table, session_model_usage_table, async_delegations_table)
}
"""The tables Hermes added in v19...v21: absent, they read as empty. So does one in an
earlier form than our head's (the scope-less routing index of #59203, the usage table of v20
and v21 without ``task``): what it holds is read once the file is adopted."""
READ_TABLES = ("sessions", "messages")


def default_of(name: str) -> Any:
    """What Hermes's DDL gives ``name`` in a row written before the column existed."""
    return FIELD_DEFAULTS.get(name)


@dataclass(frozen=True)
class ReadShape:
    """The later columns and tables a store lacks (empty: a store at our head)."""

    absent_columns: frozenset[tuple[str, str]] = field(default_factory=frozenset)
    absent_tables: frozenset[str] = field(default_factory=frozenset)

    @property
    def full(self) -> bool:
        return not (self.absent_columns or self.absent_tables)

    def has_table(self, name: str) -> bool:
        return name not in self.absent_tables

    def has_column(self, table: str, name: str) -> bool:
        return (table, name) not in self.absent_columns

    def column(self, table: Table, name: str) -> Any:
        """``table.c[name]``, or its default, typed and labelled with its name, when absent."""
        column = table.c[name]
        if self.has_column(table.name, name):
            return column
        default = default_of(name)
        value = null() if default is None else default
        return cast(value, column.type).label(name)

    def columns(self, table: Table, names: Iterable[str]) -> list[Any]:
        return [self.column(table, name) for name in names]

    def select_list(self, table: Table, names: Sequence[str]) -> list[str]:
        """The select list of a plain-text SELECT (``statements.plain_select``): the column's
        name, or ``<default> AS <name>`` when absent."""
        return [
            name if self.has_column(table.name, name) else f"{_sql_literal(name)} AS {name}"
            for name in names
        ]


FULL = ReadShape()
"""A store at our head: nothing absent (the shape of every store opened for writing)."""


@dataclass(frozen=True)
class ReadableShape:
    """What :func:`read_shape_of` found: the shape, and the required columns the store lacks
    (``table.column``, or ``table <name>`` for a whole table; empty: it can be read)."""

    shape: ReadShape
    missing: list[str]


def read_shape_of(
    conn: Connection, required: Mapping[str, Sequence[str]]
) -> ReadableShape:
    """The read shape of the store ``conn`` is on (introspected: its tables and columns).

    ``required`` names each read table's record fields; those of :data:`LATER_COLUMNS` may be
    absent, every other one must be there."""
    inspector = inspect(conn)
    tables = set(inspector.get_table_names())
    absent_columns: set[tuple[str, str]] = set()
    missing: list[str] = []
    for table, fields in required.items():
        if table not in tables:
            missing.append(f"table {table}")
            continue
        present = {column["name"] for column in inspector.get_columns(table)}
        later = LATER_COLUMNS.get(table, ())
        for name in fields:
            if name in present:
                continue
            if name in later:
                absent_columns.add((table, name))
            else:
                missing.append(f"{table}.{name}")
    absent_tables = frozenset(
        name
        for name, table in LATER_TABLES.items()
        if name not in tables
        or not set(table.c.keys()) <= {column["name"] for column in inspector.get_columns(name)}
    )
    shape = ReadShape(frozenset(absent_columns), absent_tables)
    return ReadableShape(shape, missing)


def _sql_literal(name: str) -> str:
    default = default_of(name)
    if default is None:
        return "NULL"
    if isinstance(default, int) and not isinstance(default, bool):
        return str(default)
    raise TypeError(f"no SQL literal for the default of {name!r}: {default!r}")
