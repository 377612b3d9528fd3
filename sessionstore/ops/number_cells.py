"""Number cells that hold no number: found, and mended by ``db doctor --fix``.

SQLite keeps a value of any type in any column, so a salvaged or hand-edited file can hold
text or bytes in a time, cost or token column (``'yesterday'``, ``'many'``), an infinity,
which no reading of it means, a fraction in a count or a flag, or a flag past 32 bits (what
PostgreSQL's INTEGER holds). Every read answers around
such a cell (a token figure counts 0, :func:`~sessionstore.sql.codec.whole_number`), but
PostgreSQL cannot store it as it is: ``db copy`` into PostgreSQL, and an import of such a
file's export there, refuse it by name and send the user to the doctor, which before this
check found nothing to mend (and a fraction was rounded by the copy without a word).

Which cells: every number column of ``sessions``, ``messages`` and ``session_model_usage``
(the head models' Integer and Float columns) but the primary key, and ``message_count`` and
``tool_call_count``, which the counters' own check recounts from the rows. A PostgreSQL
column holds its type only: there only an infinity or NaN in a float column is found.

What ``--fix`` stores in each, decided here once (:func:`readable_number`, :func:`_mended`):

- text (or bytes, as their text) that reads as a finite number: that number (``' 12 '``,
  ``'1e3'``), in an integer column the whole number it rounds to, as a fraction stored there
  is (a count or a flag is whole; PostgreSQL's cast rounds it so too); in a time column,
  ISO 8601 text as the moment it names (``'2024-05-01T10:00:00'``, as iot's gateway hands a
  message's time to ``append_message``: :func:`~sessionstore.sql.validation.iso_moment`, the
  rule the writes follow);
- otherwise the column's default where it has one (a counter's or a flag's 0: Hermes adds to
  a counter, and NULL plus anything stays NULL for ever), else NULL where the column takes
  NULL (an end time, a cost);
- a time that can be neither: ``sessions.started_at``, the session's earliest readable
  message time, else its readable ``ended_at``, else 0; ``messages.timestamp``, the latest
  readable time of an earlier message of its session, else the session's readable
  ``started_at``, else 0. A session keeps its place among its neighbours where its
  messages say where that is.

The mend runs in one write transaction, finding the cells again inside it (a writer may have
changed them since the report), sessions first: a message's time may fall back to its
session's.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Float,
    Integer,
    Numeric,
    Table,
    or_,
    select,
    type_coerce,
    update,
)
from sqlalchemy.engine import Connection
from sqlalchemy.types import NullType

from ..dialects import StoreDialect
from ..sql import validation
from ..sql.codec import cell_text, text_of_blob
from ..sql.tables import messages_table as messages
from ..sql.tables import session_model_usage_table as usage
from ..sql.tables import sessions_table as sessions
from ..sql.validation import INT64_MAX, INT64_MIN

COUNTED_ELSEWHERE = frozenset({"message_count", "tool_call_count"})
"""Recounted from the rows by the doctor's counters check (whatever they held)."""
COSTS = frozenset({"estimated_cost_usd", "actual_cost_usd"})
"""The float columns that are no time (every other float column of the three tables is one)."""
TABLES = (sessions, messages, usage)
"""In the order they are mended: a message's time may fall back to its session's."""
FALLBACK_TIME = 0.0
"""A time no readable neighbour gives (the epoch), for a column that takes no NULL."""
FLAG_RANGE = (-(2**31), 2**31 - 1)
"""What a flag column holds (``archived``, ``pinned``, ``active`` ...: INTEGER, 32 bits on
PostgreSQL): a SQLite file's flag past it copies nowhere else, and is damage."""


def range_of(column: Column[Any]) -> tuple[int, int]:
    """The whole numbers ``column`` holds on every database: a flag's 32 bits, a count's 64."""
    if isinstance(column.type, Integer) and not isinstance(column.type, BigInteger):
        return FLAG_RANGE
    return (INT64_MIN, INT64_MAX)


@dataclass(frozen=True)
class DamagedCell:
    """One number cell holding no number: where it is, and what it holds."""

    table: str
    column: str
    key: tuple[Any, ...]
    value: Any

    @property
    def place(self) -> str:
        return f"{self.table}.{self.column}"

    @property
    def owner(self) -> str:
        """The session the cell belongs to, as every read shows its id."""
        return cell_text(self.key[0])


def number_columns(table: Table) -> list[Column[Any]]:
    """The columns of ``table`` this check looks at (see the module docstring)."""
    return [
        column
        for column in table.c
        if isinstance(column.type, (Integer, Float, Numeric))
        and not column.primary_key
        and column.name not in COUNTED_ELSEWHERE
    ]


def _key_columns(table: Table) -> list[Column[Any]]:
    """The row's key, the session's id first: ``messages`` by ``session_id`` and ``id``."""
    if table is messages:
        return [messages.c.session_id, messages.c.id]
    return list(table.primary_key.columns)


def find(conn: Connection, dialect: StoreDialect) -> Iterator[DamagedCell]:
    """Every number cell of the three tables that holds no number, table by table."""
    for table in TABLES:
        checked = number_columns(table)
        keys = _key_columns(table)
        damaged = {column.name: _holds_no_number(dialect, column) for column in checked}
        # Each condition once more as a column: which of the row's cells it found.
        statement = select(*keys, *checked, *damaged.values()).where(or_(*damaged.values()))
        width = len(keys) + len(checked)
        for row in conn.execute(statement):
            key = tuple(row[: len(keys)])
            for index, column in enumerate(checked):
                if row[width + index]:
                    yield DamagedCell(table.name, column.name, key, row[len(keys) + index])


def _holds_no_number(dialect: StoreDialect, column: Column[Any]) -> Any:
    """The dialect's test of the cell, and, for a flag, a whole number past its 32 bits."""
    found = dialect.holds_no_number(column, whole=isinstance(column.type, Integer))
    if range_of(column) == FLAG_RANGE:
        found = or_(found, ~column.between(*FLAG_RANGE))
    return found


def readable_number(
    value: Any, *, whole: bool, within: tuple[int, int] = (INT64_MIN, INT64_MAX)
) -> int | float | None:
    """What ``value`` reads as, as a finite number (in an integer column, ``whole``, the
    whole number it rounds to), or None: text and bytes by Python's own reading of a number,
    an integer outside ``within`` (64 bits: no store can hold more; a flag's 32) and anything
    not finite as None."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        value = text_of_blob(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            value = int(text)
        except ValueError:
            try:
                value = float(text)
            except ValueError:
                return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number: int | float = value
    if isinstance(number, float):
        if not math.isfinite(number):
            return None
        if whole:  # a count or a flag: the whole number, as PostgreSQL's cast rounds (to even)
            number = round(number)
    if isinstance(number, int) and not within[0] <= number <= within[1]:
        return None
    return number


def mend(conn: Connection, dialect: StoreDialect) -> list[DamagedCell]:
    """Store in every damaged number cell what the module docstring says; returns the cells
    as they were. Run inside the caller's write transaction."""
    found = list(find(conn, dialect))
    for cell in found:
        table = next(table for table in TABLES if table.name == cell.table)
        keys = _key_columns(table)
        value = _mended(conn, table, cell)
        # Keys bound as read (a salvaged key part may be bytes), the value as its column's.
        where = [
            column == type_coerce(part, NullType())
            for column, part in zip(keys, cell.key, strict=True)
        ]
        conn.execute(update(table).where(*where).values({cell.column: value}))
    return found


def _mended(conn: Connection, table: Table, cell: DamagedCell) -> Any:
    column = table.c[cell.column]
    read = readable_number(
        cell.value, whole=isinstance(column.type, Integer), within=range_of(column)
    )
    if read is None and _is_time(column):
        read = validation.iso_moment(cell_text(cell.value))
    if read is not None:
        return read
    default = getattr(column.server_default, "arg", None)  # the models' text("0") and such
    if default is not None:
        return readable_number(str(getattr(default, "text", default)), whole=True)
    if column.nullable:
        return None
    if table is sessions:
        return _session_start(conn, cell.key[0])
    return _message_time(conn, cell.key[0], cell.key[1])


def _is_time(column: Column[Any]) -> bool:
    return isinstance(column.type, Float) and column.name not in COSTS


def _first_readable(values: Iterator[Any]) -> float | None:
    for value in values:
        read = readable_number(value, whole=False)
        if read is not None:
            return float(read)
    return None


def _session_start(conn: Connection, session_id: Any) -> float:
    """The session's earliest readable message time, else its readable end, else 0."""
    own = type_coerce(session_id, NullType())
    times = conn.execute(select(messages.c.timestamp).where(messages.c.session_id == own))
    readable = [
        read for (value,) in times if (read := readable_number(value, whole=False)) is not None
    ]
    if readable:
        return float(min(readable))
    ended = conn.execute(select(sessions.c.ended_at).where(sessions.c.id == own)).scalars()
    found = _first_readable(iter(ended))
    return FALLBACK_TIME if found is None else found


def _message_time(conn: Connection, session_id: Any, message_id: int) -> float:
    """The latest readable time of an earlier message of the session, else the session's
    readable start, else 0."""
    own = type_coerce(session_id, NullType())
    earlier = conn.execute(
        select(messages.c.timestamp)
        .where(messages.c.session_id == own, messages.c.id < message_id)
        .order_by(messages.c.id.desc())
    ).scalars()
    found = _first_readable(iter(earlier))
    if found is None:
        started = conn.execute(select(sessions.c.started_at).where(sessions.c.id == own))
        found = _first_readable(iter(started.scalars()))
    return FALLBACK_TIME if found is None else found
