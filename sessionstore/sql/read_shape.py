"""What a store's reads select: the one home of the rule for a store that is not at our head.

A record (:mod:`.records`) has the same fields whatever the file it comes from. A store at our
head has every column, and its reads name them all. A store opened read-only as it is (a
Hermes v17 file nobody adopted, a file a newer Hermes numbered past what this release
writes, a store of ours at an older revision) may lack the columns Hermes added in v18...v22:
its reads select each of those as Hermes's default for it (``NULL``, or the ``DEFAULT`` of
its DDL: ``expiry_finalized`` and ``compression_fallback_streak`` are 0), and read nothing
from a table it lacks (``gateway_routing``, ``session_model_usage``, ``async_delegations``,
``gateway_heartbeats``): no routing entry, no per-model usage, no delegation, no heartbeat
(:data:`LATER_TABLES`). Every other column is *required*: a store without one cannot be read
as it is (an older Hermes file; ``sessionstore db upgrade`` adopts it).

The shape is decided once per open store (:func:`read_shape_of`, by its tables and columns,
never its version number) and kept on the store; statements built from it are built once per
shape (their builders are cached on it). Writes never use it: a store is written only at our
head, where nothing is absent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from sqlalchemy import Table, cast, func, inspect, null, select
from sqlalchemy.engine import Connection

from .records import FIELD_DEFAULTS
from .tables import (
    async_delegations_table,
    conversation_generations_table,
    gateway_heartbeats_table,
    gateway_hygiene_state_table,
    gateway_routing_table,
    session_model_usage_table,
    system_prompts_table,
)

LATER_COLUMNS: dict[str, tuple[str, ...]] = {
    "sessions": (
        # v18...v22
        "display_name", "origin_json", "expiry_finalized", "compression_fallback_streak",
        "profile_name",
        # v23...v31 (and the columns iot added without a bump)
        "created_source", "system_prompt_hash", "git_metadata_generation", "title_source",
        "last_activity_at", "last_activity_description", "last_activity_provenance",
        "compression_ineffective_count", "compression_recovery_deadline",
        "compression_overload_streak", "transport_profile", "auto_archived", "pinned",
        "hidden", "last_read_at", "tool_names",
    ),
    "messages": (
        "effect_disposition", "api_content",
        "_compressed_summary", "display_kind", "display_metadata", "display_identity",
        "display_order", "message_uid", "absorbed_message_uids", "tool_call_uids",
        "tool_call_uid",
    ),
}  # fmt: skip
"""The columns of ``sessions`` and ``messages`` Hermes added in v18...v31: absent from a
store that predates them, they read as their default (:data:`.records.FIELD_DEFAULTS`, else
``NULL``)."""
PROMPTS_TABLE = "system_prompts"
RESOLVED_COLUMNS: dict[str, str] = {
    "system_prompt": "system_prompt_hash",
    "tool_names": "tool_names",
}
"""The ``sessions`` columns read through ``system_prompts`` (Hermes v25+), and the column
holding the hash that names their row: the read is ``COALESCE(<the row's prompt>,
<the column>)``, as every Hermes since iot 0.20.0 reads it (``tool_names`` holds a hash or,
written before iot 0.21.3, the JSON itself). A store without ``system_prompts`` (or without
the hash column) reads the column alone."""
LATER_TABLES: dict[str, Table] = {
    table.name: table
    for table in (
        gateway_routing_table, session_model_usage_table, async_delegations_table,
        system_prompts_table, gateway_heartbeats_table, conversation_generations_table,
        gateway_hygiene_state_table,
    )
}
"""The tables Hermes added in v19...v27 that the reads (an export among them) use: absent, they
read as empty (``system_prompts``: every prompt is read from its column). So does one in an
earlier form than our head's (the scope-less routing index of #59203, the usage table of v20
and v21 without ``task``): what it holds is read once the file is adopted."""
READ_TABLES = ("sessions", "messages")


def default_of(name: str) -> Any:
    """What Hermes's DDL gives ``name`` in a row written before the column existed."""
    return FIELD_DEFAULTS.get(name)


# NamedTuples, not frozen dataclasses: the open path imports this module, and each dataclass
# compiles its generated methods at import (see ``schema.migrate.Status``). Compared, hashed
# (the statement builders are cached by shape) and immutable alike.
class ReadShape(NamedTuple):
    """The later columns and tables a store lacks (empty: a store at our head)."""

    absent_columns: frozenset[tuple[str, str]] = frozenset()
    absent_tables: frozenset[str] = frozenset()

    @property
    def full(self) -> bool:
        return not (self.absent_columns or self.absent_tables)

    def has_table(self, name: str) -> bool:
        return name not in self.absent_tables

    def has_column(self, table: str, name: str) -> bool:
        return (table, name) not in self.absent_columns

    def resolves(self, table: Table, name: str) -> bool:
        """Whether ``table.name`` is read through ``system_prompts`` (:data:`RESOLVED_COLUMNS`)."""
        return (
            table.name == "sessions"
            and name in RESOLVED_COLUMNS
            and self.has_table(PROMPTS_TABLE)
            and self.has_column("sessions", RESOLVED_COLUMNS[name])
            and self.has_column("sessions", name)
        )

    def column(self, table: Table, name: str) -> Any:
        """``table.c[name]``, or its default, typed and labelled with its name, when absent; a
        prompt column read through ``system_prompts`` (:meth:`resolves`)."""
        column = table.c[name]
        if self.resolves(table, name):
            prompt = (
                select(system_prompts_table.c.prompt)
                .where(system_prompts_table.c.hash == table.c[RESOLVED_COLUMNS[name]])
                .correlate(table)
                .scalar_subquery()
            )
            return func.coalesce(prompt, column).label(name)
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
            _resolved_sql(table.name, name)
            if self.resolves(table, name)
            else name
            if self.has_column(table.name, name)
            else f"{_sql_literal(name)} AS {name}"
            for name in names
        ]


FULL = ReadShape()
"""A store at our head: nothing absent (the shape of every store opened for writing)."""


class ReadableShape(NamedTuple):
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


def _resolved_sql(table: str, name: str) -> str:
    """:meth:`ReadShape.resolves`'s read in plain SQL (both dialects)."""
    return (
        f"coalesce((SELECT {PROMPTS_TABLE}.prompt FROM {PROMPTS_TABLE} WHERE "
        f"{PROMPTS_TABLE}.hash = {table}.{RESOLVED_COLUMNS[name]}), {table}.{name}) AS {name}"
    )


def _sql_literal(name: str) -> str:
    default = default_of(name)
    if default is None:
        return "NULL"
    if isinstance(default, int) and not isinstance(default, bool):
        return str(default)
    raise TypeError(f"no SQL literal for the default of {name!r}: {default!r}")
