"""The hot write path: Core statements compiled once per dialect, run on the driver's cursor.

Appending a message is what an agent does most. Building and compiling a Core statement and
passing it through SQLAlchemy's execution machinery costs several times what SQLite needs to
run it (measured by scripts/bench.py), so the few statements on that path are built with Core
here, compiled once for the engine's dialect, and executed directly on the DBAPI cursor of the
connection that ``Store.write`` opened (same transaction, same BEGIN IMMEDIATE). Driver errors
are re-raised as SQLAlchemy's exception classes, so callers see the same types as elsewhere.

How new ids come back follows capabilities, not names: RETURNING where the database has it, a
batched multi-row INSERT ... RETURNING where the store dialect says batching pays
(``StoreDialect.batch_returning_inserts``: a network round trip per row costs more than the
batch), else one cheap insert per row on the open cursor.

Compiled once per process, not per store: a statement is built once (its builder is cached on
what it depends on, e.g. the store's read shape) and its compiled form is kept for every
dialect that compiles it alike (:func:`dialect_key`). A program or a test run that opens many
stores compiled the same statements for each (~20 ms of a small store's ~50 ms).
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
import types
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, cast

from sqlalchemy import (
    Integer,
    Table,
    bindparam,
    func,
    insert,
    literal_column,
    or_,
    select,
    text,
    update,
)
from sqlalchemy import cast as sql_cast
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.exc import CompileError, DBAPIError
from sqlalchemy.sql import ClauseElement, Update
from sqlalchemy.sql.compiler import RESERVED_WORDS, SQLCompiler
from sqlalchemy.sql.elements import BindParameter, ColumnElement, TextClause
from sqlalchemy.sql.visitors import replacement_traverse
from sqlalchemy.util import LRUCache, memoized_property

from ..dialects import dialect_for_url
from .message_identity import display_orders
from .read_shape import FULL, ReadShape
from .records import MESSAGE_FIELDS
from .tables import messages_table as messages
from .tables import sessions_table as sessions
from .validation import bindable

INT64_MAX = 2**63 - 1
# ``active`` and ``compacted`` are written (an append 1 and 0; a Hermes import as its rows
# were): a file whose reconciled ``active`` lost its DEFAULT (#51646) would store NULL otherwise.
INSERTED_MESSAGE_FIELDS = tuple(name for name in MESSAGE_FIELDS if name != "id")
MAX_BOUND_PARAMETERS = 999
"""Bound parameters per multi-row INSERT on SQLite: what every SQLite build accepts (3.32
raised the default to 32,766; older libraries and some builds keep 999)."""
_LARGEST_ID_EVER = (
    "max(COALESCE((SELECT max(id) FROM messages), 0), "
    "COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'messages'), 0))"
)
"""The largest id ``messages`` ever gave, as SQLite's ``AUTOINCREMENT`` reads it: the largest
of the ids there and of the table's high-water mark in ``sqlite_sequence`` (rows with higher
ids may have been deleted); 0 for a table that never held a row. Under the store's write
transaction (BEGIN IMMEDIATE) nobody else inserts, so the next row's id is this plus one.
``sqlite_sequence`` exists wherever ``messages`` does: every Hermes schema and ours declare
the table ``AUTOINCREMENT``, and SQLite refuses to drop it."""
ROWS_PER_INSERT = MAX_BOUND_PARAMETERS // (len(INSERTED_MESSAGE_FIELDS) + 3)
"""Rows per multi-row INSERT on SQLite: each binds its columns, its id, and its session and
display identity once more for its display order's peer lookup (:func:`_insert_message`)."""
_LARGEST_MESSAGE_ID = f"SELECT {_LARGEST_ID_EVER}"
_NEXT_MESSAGE_ID = (
    f"(SELECT CASE WHEN largest < {INT64_MAX} THEN largest + 1 END "
    f"FROM (SELECT {_LARGEST_ID_EVER} AS largest))"
)
"""The id the next row gets (see above), NULL at the 64-bit ceiling: the insert then binds
no id and no display order, and SQLite and the trigger do as they always did."""
# Compared by value, or by identity where that is all they have: a module (pysqlite3 or the
# standard library's sqlite3), a function or method a caller gave create_engine (a JSON
# serializer: the compiled form's bind processors call the one its dialect held).
_PLAIN_VALUES = (type(None), bool, int, float, str, bytes, type, types.ModuleType,
                 types.FunctionType, types.BuiltinFunctionType, types.MethodType)


# A LIMIT or OFFSET is written into the statement as a number, not bound: SQLite (3.53,
# pysqlite3's) reads a bound LIMIT or OFFSET while it plans, so a bound one marks the statement
# to be prepared again at every run (list_sessions_rich(limit=50): 40 us of about 1 ms;
# get_messages(limit=50): 182 -> 144 us). On PostgreSQL the same text costs no server time and
# a little less client time, so the one mechanism serves both (docs/performance.md).
# Each distinct value is its own statement text: one prepared statement in the driver's cache
# (pysqlite keeps 128 per connection, least recently used first out) and one rendered text in
# _RENDERED_PER_STATEMENT below; programs use a handful of limits, so both stay warm.
_RENDERED_PER_STATEMENT = 16


def literal_count(name: str) -> BindParameter[int]:
    """A LIMIT or OFFSET parameter ``name`` that is written into the statement as a number
    when it runs, not bound (see above): SQLAlchemy renders it at execution
    (``literal_execute``), :class:`CompiledStatement` from its own compiled form. Its value
    must be an ``int`` in 0..2**63 - 1 (the callers' ``row_count``): anything else is a
    ``TypeError``/``ValueError``, never text in the statement."""
    return bindparam(name, type_=Integer, literal_execute=True)


def fixed_count(value: int) -> ColumnElement[int]:
    """A constant LIMIT (``.limit(fixed_count(1))``) written into the statement, where
    ``.limit(1)`` binds it (see above). For statements SQLAlchemy executes: there a
    :func:`literal_count` is rendered at every execution, which cost more than the prepare it
    saves on a small statement (72 -> 99 us for a prefix lookup), while a constant is in the
    compiled form once (88 -> 60 us for a 20-message window)."""
    return literal_column(count_literal(value), Integer)


def count_literal(value: Any) -> str:
    """``value`` as the SQL number :func:`literal_count` writes: only a plain ``int`` in
    0..2**63 - 1 (no bool, str or float), so nothing but digits reaches the statement."""
    if type(value) is not int:
        raise TypeError(f"a LIMIT or OFFSET written into a statement must be an int, not {value!r}")
    if not 0 <= value <= INT64_MAX:
        raise ValueError(f"a LIMIT or OFFSET written into a statement is 0..2**63-1, not {value}")
    return str(value)


def dialect_key(dialect: Dialect) -> Hashable:
    """What a statement's compiled form can depend on in ``dialect``: two dialects with one
    key compile any statement to the same text and parameters.

    Its class (the compiler, quoting and type rules) and every plain value it holds: what
    ``create_engine`` was given and what it learnt from the server on connecting (paramstyle,
    server version, RETURNING and multi-row VALUES support, label length, the DB-API module:
    the bundled pysqlite3 or the stdlib sqlite3). An object it holds counts by its class. Read
    when a statement is compiled, i.e. on a connection, after the dialect learnt the server.
    """
    memoized = _MEMOIZED.get(type(dialect))
    if memoized is None:
        memoized = _MEMOIZED[type(dialect)] = _memoized_names(type(dialect))
    held = sorted(item for item in vars(dialect).items() if item[0] not in memoized)
    return (type(dialect), *((name, _plain(value)) for name, value in held))


_MEMOIZED: dict[type, frozenset[str]] = {}


def _memoized_names(dialect_class: type) -> frozenset[str]:
    """What SQLAlchemy computes on a dialect's first read and then keeps on it (its memoized
    properties: ``_supports_statement_cache``, ``_type_memos``...). Each follows from the
    class and what the dialect holds, so it tells no two dialects apart; but whether it was
    read yet did: a store opened on a file another store had migrated compiled every
    statement again (in each forked child that opened its own store, too). Likewise a method's
    memo (``memoized_instancemethod``: the method's name, set on the dialect to a new function
    holding its result at the first call: ``_gen_allowed_isolation_levels``)."""
    return frozenset(
        name
        for klass in dialect_class.__mro__
        for name, value in vars(klass).items()
        if isinstance(value, (memoized_property, types.FunctionType))
    )


def _plain(value: Any) -> Hashable:
    if isinstance(value, tuple):
        return tuple(_plain(item) for item in value)
    return value if isinstance(value, _PLAIN_VALUES) else type(value)


class CompiledStatement:
    """A statement compiled for one dialect, with its parameters in the driver's order (the
    compiled form shared in the process, see the module).

    Compiled on first use, not when built: every store builds all its hot statements at open,
    and compiling them there cost about 5 ms of each fresh interpreter's start, mostly for
    statements a short-lived program never runs.
    """

    __slots__ = ("_build", "_compiled", "_dialect")

    def __init__(self, statement: ClauseElement, dialect: Dialect) -> None:
        self._build: Callable[[], ClauseElement] = lambda: statement
        self._dialect = dialect
        self._compiled: _Compiled | None = None

    @classmethod
    def built_later(cls, build: Callable[[], ClauseElement], dialect: Dialect) -> CompiledStatement:
        """The statement ``build()`` returns, built (and compiled) on first use."""
        compiled = cls.__new__(cls)
        compiled._build = build
        compiled._dialect = dialect
        compiled._compiled = None
        return compiled

    def _compile(self) -> _Compiled:
        statement = self._build()
        # Keyed by the statement object itself (kept alive by its entry, so its id is not
        # reused): builders are cached, so every store of one shape shares the object, and a
        # statement built anew only misses.
        key = (dialect_key(self._dialect), id(statement))
        entry = _COMPILED_IN_PROCESS.get(key)
        if entry is not None and entry[0] is statement:
            result = entry[1]
        else:
            result = _compile(statement, self._dialect)
            _COMPILED_IN_PROCESS[key] = (statement, result)
        # One assignment of a finished object: threads racing here compile the same text.
        self._compiled = result
        return result

    @property
    def sql(self) -> str:
        return (self._compiled or self._compile()).sql

    @property
    def positional_names(self) -> tuple[str, ...] | None:
        return (self._compiled or self._compile()).positional_names

    def parameters(self, values: Mapping[str, Any]) -> Sequence[Any] | Mapping[str, Any]:
        compiled = self._compiled or self._compile()
        fixed = compiled.fixed
        merged = {**fixed, **values} if fixed else values
        if compiled.positional_names is None:
            if compiled.literal_names:
                return {name: value for name, value in merged.items()
                        if name not in compiled.literal_names}
            return merged
        return compiled.in_order(merged)

    def sql_for(self, values: Mapping[str, Any]) -> str:
        """The statement's text for ``values``: its :func:`literal_count` parameters written
        in as numbers (validated by :func:`count_literal`), the others left bound."""
        compiled = self._compiled or self._compile()
        if not compiled.literal_names:
            return compiled.sql
        return compiled.rendered(tuple(values[name] for name in compiled.literal_names))


class _Compiled:
    __slots__ = ("_getter", "_rendered", "fixed", "literal_names", "positional_names", "sql")

    def __init__(
        self,
        sql: str,
        positional_names: tuple[str, ...] | None,
        fixed: dict[str, Any],
        literal_names: tuple[str, ...] = (),
    ) -> None:
        self.sql = sql
        self.positional_names = positional_names
        self.fixed = fixed
        self.literal_names = literal_names
        self._rendered: LRUCache[tuple[int, ...], str] = LRUCache(_RENDERED_PER_STATEMENT)
        # The values in the driver's order, taken in C (an append's INSERT has 27: a
        # generator over the names cost ~1 us more per row).
        names = positional_names or ()
        self._getter: Callable[[Mapping[str, Any]], Any] | None = (
            operator.itemgetter(*names) if len(names) > 1 else None
        )

    def in_order(self, values: Mapping[str, Any]) -> tuple[Any, ...]:
        """``values`` as the positional parameters, in the driver's order."""
        if self._getter is not None:
            return cast("tuple[Any, ...]", self._getter(values))
        return tuple(values[name] for name in self.positional_names or ())

    def rendered(self, counts: tuple[Any, ...]) -> str:
        # Validated before the cache is asked: True == 1 would find 1's text.
        numbers = [count_literal(value) for value in counts]
        sql = self._rendered.get(counts)
        if sql is None:
            sql = self.sql
            for name, number in zip(self.literal_names, numbers, strict=True):
                sql = sql.replace(f"__[POSTCOMPILE_{name}]", number)
            self._rendered[counts] = sql
        return sql


def _compile(statement: ClauseElement, dialect: Dialect) -> _Compiled:
    if _writes_constants(dialect.name):
        try:
            return _compile_written(_constants_written_in(statement), dialect, constants=True)
        except CompileError:
            pass  # a constant without a literal form: all of them stay bound
    return _compile_written(statement, dialect, constants=False)


# A statement's own constants (the listing's preview and activity rules carry ~180: markers,
# patterns, lengths) are written into its text on SQLite: bound, some of them are read while
# SQLite plans (a LIKE pattern, a LIMIT), and the listing was prepared again at every run
# (1,270 against 484 us for list_sessions_rich(limit=50) on a 400-session store). Only plain
# ints, finite floats and str that a literal can hold; anything else stays bound.
@functools.cache
def _writes_constants(backend: str) -> bool:
    try:
        return dialect_for_url(f"{backend}://").writes_constants_into_statements
    except ValueError:
        return False  # not a store's database: as it is


def _writable(value: Any) -> bool:
    if type(value) is int:
        return -INT64_MAX <= value <= INT64_MAX
    if type(value) is float:
        return math.isfinite(value)
    if type(value) is str:
        return bindable(value)
    return False


def _constants_written_in(statement: ClauseElement) -> ClauseElement:
    def written(element: Any, **_: Any) -> Any:
        if (
            isinstance(element, BindParameter)
            and not element.literal_execute
            and not element.expanding
            and element.callable is None
            and _writable(element.value)
        ):
            clone = element._clone(maintain_key=True)
            clone.literal_execute = True
            return clone
        return None

    return cast(ClauseElement, replacement_traverse(cast(Any, statement), {}, written))


def _compile_written(statement: ClauseElement, dialect: Dialect, *, constants: bool) -> _Compiled:
    compiled = cast(SQLCompiler, statement.compile(dialect=dialect))
    sql = str(compiled)
    runtime: set[str] = set()
    for param in compiled.literal_execute_params:
        name = compiled.bind_names[param]
        if param.value is None or not constants:
            runtime.add(name)
        else:
            text_form = compiled.render_literal_value(param.value, param.type)
            sql = sql.replace(f"__[POSTCOMPILE_{name}]", text_form)
    written = {compiled.bind_names[param] for param in compiled.literal_execute_params} - runtime
    literal = tuple(sorted(runtime))
    compiled_sql = sql
    skipped = {*literal, *written}
    return _Compiled(
        compiled_sql,
        tuple(name for name in compiled.positiontup or () if name not in skipped)
        if compiled.positional
        else None,
        # Values the statement itself carries (e.g. the 0 in COALESCE(x, 0)).
        {name: value for name, value in compiled.params.items()
         if value is not None and name not in skipped},
        literal,
    )


_COMPILED_IN_PROCESS: LRUCache[tuple[Hashable, int], tuple[ClauseElement, _Compiled]] = LRUCache(
    1000
)
"""Compiled forms by (:func:`dialect_key`, statement): a few dozen statements per read shape
and dialect; the bound only matters to a caller that builds statements anew."""


class HotWrites:
    """Message inserts and counter bumps for one engine's dialect."""

    def __init__(self, dialect: Dialect, *, batch_returning: bool) -> None:
        self._dialect = dialect
        self._returning_many = batch_returning
        # In-process, ``lastrowid`` is free and exact (one writer, one connection), so the
        # single-row INSERT has no RETURNING there: SQLite buffers a RETURNING row even when
        # nobody fetches it, and releasing it when the cursor was dropped cost 27 us a row
        # (a tenth of a 10-message turn).
        self._returning_one = batch_returning and bool(dialect.insert_returning)
        returning_one = self._returning_one
        # SQLite: the insert writes the row's display order itself (Hermes's trigger would
        # update the row after it, see _insert_message_sqlite); a server has no such trigger.
        self._writes_display_order = dialect.name == "sqlite" and not returning_one
        # Built on first use too: a program that only reads never needs them.
        self._insert_one = CompiledStatement.built_later(
            (lambda: _insert_message_sqlite(ids_bound=False)) if self._writes_display_order
            else (lambda: _insert_message(returning=returning_one)),
            dialect,
        )
        self._insert_many = CompiledStatement.built_later(
            lambda: _insert_message_sqlite(ids_bound=True), dialect
        )
        self._bump_counters = CompiledStatement.built_later(_bump_counters, dialect)
        self._multi_row_sql: dict[int, str] = {}
        # One append, one statement, where a statement is a round trip (only there: in-process
        # it would never run).
        self._append_one = (
            CompiledStatement.built_later(_append_in_one_statement, dialect)
            if batch_returning and dialect.insert_returning
            else None
        )

    @property
    def appends_in_one_statement(self) -> bool:
        """True where :meth:`append_in_one_statement` exists (RETURNING, a server)."""
        return self._append_one is not None

    def append_in_one_statement(
        self, conn: Connection, row: Mapping[str, Any], tool_calls_added: int
    ) -> int | None:
        """Bump the counters and insert ``row`` in one statement; None when the session does
        not exist or a total would pass 2**63 - 1 (nothing written: the caller tells which)."""
        statement = self._append_one
        if statement is None:
            raise TypeError("this dialect appends in two statements (appends_in_one_statement)")
        cursor = self._cursor(conn)
        values = {
            **row,
            "messages_added": 1,
            "tool_calls_added": tool_calls_added,
            "message_limit": INT64_MAX - 1,
            "tool_call_limit": INT64_MAX - tool_calls_added,
        }
        try:
            cursor.execute(statement.sql, statement.parameters(values))
            found = cursor.fetchone()
        except self._driver_error() as exc:
            raise self._wrap(statement.sql, exc) from exc
        return None if found is None else int(found[0])

    def append_one(
        self, conn: Connection, row: Mapping[str, Any], tool_calls_added: int
    ) -> int | None:
        """Bump the counters, then insert ``row``: the two statements of one append, on one
        driver cursor (a cursor each cost ~1 us more). None when the session does not exist
        or a total would pass 2**63 - 1, and then nothing is inserted (the caller tells
        which, and rolls back)."""
        bump = self._bump_counters
        insert_one = self._insert_one
        values = {
            "session_id": row["session_id"],
            "messages_added": 1,
            "tool_calls_added": tool_calls_added,
            "message_limit": INT64_MAX - 1,
            "tool_call_limit": INT64_MAX - tool_calls_added,
        }
        cursor = self._cursor(conn)
        sql = bump.sql_for(values)
        try:
            cursor.execute(sql, bump.parameters(values))
            if not cursor.rowcount:
                return None
            sql = insert_one.sql
            cursor.execute(sql, insert_one.parameters(row))
            return int(cursor.fetchone()[0]) if self._returning_one else int(cursor.lastrowid)
        except self._driver_error() as exc:
            raise self._wrap(sql, exc) from exc

    def bump_counters(
        self, conn: Connection, session_id: str, messages_added: int, tool_calls_added: int
    ) -> bool:
        """Add to a session's counters; False when the session does not exist (or when a
        total would pass 2**63 - 1: the caller tells the two apart)."""
        cursor = self._run(
            conn,
            self._bump_counters,
            {
                "session_id": session_id,
                "messages_added": messages_added,
                "tool_calls_added": tool_calls_added,
                "message_limit": INT64_MAX - messages_added,
                "tool_call_limit": INT64_MAX - tool_calls_added,
            },
        )
        return bool(cursor.rowcount)

    def insert_messages(self, conn: Connection, rows: Sequence[Mapping[str, Any]]) -> list[int]:
        if len(rows) > 1 and self._returning_many:
            # PostgreSQL: one batched INSERT ... RETURNING, ids kept in parameter order.
            result = conn.execute(
                insert(messages).returning(messages.c.id, sort_by_parameter_order=True),
                [dict(row) for row in rows],
            )
            return [int(value) for value in result.scalars()]
        first = None
        if len(rows) > 1 and not self._returning_one:
            first = self._first_new_id(conn, len(rows))
        if first is None:
            return [self._insert_single(conn, row) for row in rows]
        # SQLite: a turn is one multi-row INSERT per chunk. FTS5 writes out its pending terms at
        # the start of every statement that changes it, so ten single-row INSERTs were ten index
        # segments for the commit to merge: 730 -> 225 us for a 10-message turn's inserts.
        ids = list(range(first, first + len(rows)))
        orders = display_orders(rows, first)
        bound = [
            {**row, "id": row_id, "display_order": order}
            for row, row_id, order in zip(rows, ids, orders, strict=True)
        ]
        for start in range(0, len(bound), ROWS_PER_INSERT):
            self._insert_chunk(conn, bound[start : start + ROWS_PER_INSERT])
        return ids

    def _first_new_id(self, conn: Connection, count: int) -> int | None:
        """The id SQLite's ``AUTOINCREMENT`` gives the next row (``_LARGEST_ID_EVER`` plus
        one; nobody else inserts during the store's write transaction), bound to ``count``
        rows one after another; None near the 64-bit ceiling, where the rows go one by one
        as SQLite numbers them (and a table without AUTOINCREMENT picks random free ids)."""
        cursor = self._cursor(conn)
        try:
            largest = int(cursor.execute(_LARGEST_MESSAGE_ID).fetchone()[0])
        except self._driver_error() as exc:
            raise self._wrap(_LARGEST_MESSAGE_ID, exc) from exc
        return largest + 1 if largest <= INT64_MAX - count else None

    def _insert_chunk(self, conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
        """One INSERT for ``rows``, each with its ``id`` and fallback ``display_order``."""
        count = len(rows)
        statement = self._insert_many
        sql = self._multi_row_sql.get(count)
        if sql is None:
            sql = self._multi_row_sql[count] = values_repeated(statement.sql, count)
        parameters = [value for row in rows for value in statement.parameters(row)]
        cursor = self._cursor(conn)
        try:
            cursor.execute(sql, parameters)
        except self._driver_error() as exc:
            raise self._wrap(sql, exc) from exc

    def _insert_single(self, conn: Connection, row: Mapping[str, Any]) -> int:
        statement = self._insert_one
        cursor = self._cursor(conn)
        try:
            cursor.execute(statement.sql, statement.parameters(row))
            # With RETURNING, SQLite does the insert's work (and fails) during the fetch.
            return int(cursor.fetchone()[0]) if self._returning_one else int(cursor.lastrowid)
        except self._driver_error() as exc:
            raise self._wrap(statement.sql, exc) from exc

    def _cursor(self, conn: Connection) -> Any:
        # A fresh cursor per statement: pysqlite leaves a kept cursor's last statement
        # unreset ("cannot commit transaction - SQL statements in progress"); a dropped one
        # is finalized at once.
        return conn.connection.driver_connection.cursor()  # type: ignore[union-attr]

    def _driver_error(self) -> type[BaseException]:
        error: type[BaseException] = self._dialect.loaded_dbapi.Error
        return error

    def _run(
        self, conn: Connection, statement: CompiledStatement, values: Mapping[str, Any]
    ) -> Any:
        return run_compiled(conn, statement, values)

    def _wrap(self, sql: str, exc: BaseException) -> BaseException:
        return DBAPIError.instance(
            sql, None, exc, self._dialect.loaded_dbapi.Error, dialect=self._dialect
        )


def run_compiled(
    conn: Connection, statement: CompiledStatement, values: Mapping[str, Any]
) -> Any:
    """Run a statement compiled for ``conn``'s dialect on a fresh driver cursor of ``conn``
    (in its open transaction); the cursor. A driver error is raised as SQLAlchemy's class for
    it, as everywhere else."""
    dialect = conn.dialect
    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
    sql = statement.sql_for(values)
    try:
        cursor.execute(sql, statement.parameters(values))
    except dialect.loaded_dbapi.Error as exc:
        raise DBAPIError.instance(
            sql, None, exc, dialect.loaded_dbapi.Error, dialect=dialect
        ) from exc
    return cursor


@functools.cache
def _insert_message(*, returning: bool) -> ClauseElement:
    """A server's INSERT: every column bound as the row gives it (``display_order`` None:
    PostgreSQL has no display-order trigger, no Hermes reads it there)."""
    row: dict[str, Any] = {name: bindparam(name) for name in INSERTED_MESSAGE_FIELDS}
    statement = insert(messages).values(row)
    return statement.returning(messages.c.id) if returning else statement


@functools.cache
def _insert_message_sqlite(*, ids_bound: bool) -> ClauseElement:
    """SQLite's INSERT, which writes the row's ``id`` and ``display_order`` itself, with the
    values Hermes's ``messages_display_order_insert`` trigger would give (the display order of
    the first live peer: same session and display identity, ``active = 1 OR compacted = 1``,
    an order set; else the row's own id), so the trigger's ``WHEN new.display_order IS NULL``
    never holds for our rows and its UPDATE, which moved the row's entries in three display
    indexes, does not run (docs/performance.md, the append path).

    ``ids_bound=False`` (one row): the id is the next one (``_NEXT_MESSAGE_ID``), computed in
    the statement; NULL at the 64-bit ceiling, and then the trigger runs as it always did.
    ``ids_bound=True`` (a multi-row chunk): ``id`` and the fallback ``display_order`` are bound
    (:func:`~.message_identity.display_orders`): SQLite may compute every row of a VALUES list
    before it inserts any, so a row cannot see its batch peers; a batch peer's order is the
    fallback then, and equal to what the lookup finds if SQLite inserts row by row.
    """
    peer = messages.alias("peer")
    first_peer = (
        select(peer.c.display_order)
        .where(
            peer.c.session_id == bindparam("session_id"),
            or_(peer.c.active == 1, peer.c.compacted == 1),
            peer.c.display_identity == bindparam("display_identity"),
            peer.c.display_order.is_not(None),
        )
        .order_by(peer.c.display_order)
        # Both written in: SQLite's compiler would bind an OFFSET 0 of its own, and a bound
        # LIMIT or OFFSET has the statement prepared again at every run (see above).
        .limit(fixed_count(1))
        .offset(fixed_count(0))
        .scalar_subquery()
    )
    row: dict[str, Any] = {name: bindparam(name) for name in INSERTED_MESSAGE_FIELDS}
    if ids_bound:
        row["id"] = bindparam("id")
        row["display_order"] = func.coalesce(first_peer, bindparam("display_order"))
    else:
        next_id = literal_column(_NEXT_MESSAGE_ID, Integer)
        row["id"] = next_id
        row["display_order"] = func.coalesce(first_peer, next_id)
    return insert(messages).values(row)


@functools.cache
def _bump_counters() -> Update:
    # The limits keep each total within 64 bits (SQLite would turn it into a REAL past
    # 2**63): a session at its limit matches no row, like an unknown one.
    return (
        update(sessions)
        .where(
            sessions.c.id == bindparam("session_id"),
            func.coalesce(sessions.c.message_count, 0) <= bindparam("message_limit"),
            func.coalesce(sessions.c.tool_call_count, 0) <= bindparam("tool_call_limit"),
        )
        .values(
            message_count=func.coalesce(sessions.c.message_count, 0)
            + bindparam("messages_added"),
            tool_call_count=func.coalesce(sessions.c.tool_call_count, 0)
            + bindparam("tool_calls_added"),
        )
    )


@functools.cache
def _append_in_one_statement() -> ClauseElement:
    """The counters are bumped in a CTE and the row is inserted only if that matched the
    session (and its totals stay in range); no row back means nothing was written."""
    bumped = _bump_counters().returning(sessions.c.id).cte("bumped")
    values = select(
        *[
            bumped.c.id if name == "session_id"
            else sql_cast(bindparam(name), messages.c[name].type)
            for name in INSERTED_MESSAGE_FIELDS
        ]
    )
    return (
        insert(messages)
        .add_cte(bumped)
        .from_select(list(INSERTED_MESSAGE_FIELDS), values)
        .returning(messages.c.id)
    )


def plain_select(
    table: Table,
    fields: Sequence[str],
    where: str,
    order_by: str | None = None,
    *,
    shape: ReadShape = FULL,
) -> TextClause:
    """``SELECT fields FROM table WHERE where [ORDER BY order_by]``, as a text statement.

    For the one-table reads a program's first call makes (a session, its messages): in a
    fresh interpreter the first compile of the equivalent Core ``select()`` costs 1.5-2 ms
    while SQLAlchemy's compiler warms up, and this text compiles in 0.1-0.2 ms (start-up,
    issue 12). Its parameters are ``:name`` binds, as in any ``text()``. Column names come
    from ``table`` (a misspelt one is a ``KeyError`` here, not an error at the database), and
    none may need quoting: a reserved word would have to be quoted per dialect. A column
    ``shape`` says the store lacks is selected as its default (``read_shape``).
    """
    names = [table.c[name].name for name in fields]
    for name in (table.name, *names):
        if not (name.isidentifier() and name.islower()) or name in RESERVED_WORDS:
            raise ValueError(f"{name!r} would need quoting in plain SQL")
    sql = f"SELECT {', '.join(shape.select_list(table, names))} FROM {table.name} WHERE {where}"
    return text(sql if order_by is None else f"{sql} ORDER BY {order_by}")


class HotReads:
    """Loading a whole conversation: one compiled SELECT, rows fetched as plain tuples."""

    def __init__(self, dialect: Dialect, statement: ClauseElement) -> None:
        self._dialect = dialect
        self._compiled = CompiledStatement(statement, dialect)

    @classmethod
    def built_later(cls, dialect: Dialect, build: Callable[[], ClauseElement]) -> HotReads:
        """The SELECT ``build()`` returns, built (and compiled) on first use."""
        reads = cls.__new__(cls)
        reads._dialect = dialect
        reads._compiled = CompiledStatement.built_later(build, dialect)
        return reads

    @property
    def compiled(self) -> CompiledStatement:
        """The statement compiled for the dialect (on first use)."""
        return self._compiled

    def rows(self, conn: Connection, values: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
        sql = self._compiled.sql_for(values)
        try:
            cursor.execute(sql, self._compiled.parameters(values))
            rows: list[tuple[Any, ...]] = cursor.fetchall()
        except self._dialect.loaded_dbapi.Error as exc:
            raise DBAPIError.instance(
                sql, None, exc, self._dialect.loaded_dbapi.Error,
                dialect=self._dialect,
            ) from exc
        finally:
            cursor.close()
        return rows


def values_repeated(sql: str, count: int) -> str:
    """A one-row ``INSERT ... VALUES (...)`` with its VALUES list written ``count`` times:
    the multi-row form of a positional statement (its parameters, row after row)."""
    head, values = sql.split(" VALUES ", 1)
    return f"{head} VALUES {', '.join([values] * count)}"


@functools.lru_cache(maxsize=64)
def _plain_insert(table: Table, names: tuple[str, ...]) -> ClauseElement:
    """``INSERT INTO table (names) VALUES (...)``, one object per shape (so compiled once in
    the process: :class:`CompiledStatement` keys its compiled form by the object)."""
    return table.insert().values({name: bindparam(name) for name in names})


def insert_rows(
    conn: Connection, table: Table, rows: Sequence[Mapping[str, Any]], *, multi_row: bool
) -> None:
    """Insert ``rows`` (dicts of column values) into ``table`` in ``conn``'s transaction.

    ``multi_row`` (``StoreDialect.multi_row_inserts``): as multi-row INSERTs of at most
    :data:`MAX_BOUND_PARAMETERS` parameters, sent to the driver as the hot statements are, where
    the parameter style allows; otherwise as an executemany through SQLAlchemy (each run of
    consecutive rows naming the same columns: one). Each row's triggers fire as for a
    statement of its own. The values go to the driver as given: a store's columns take plain
    values (text, numbers, bytes), which no type of theirs converts."""
    # Consecutive rows of one shape together, in order (an executemany takes one shape too).
    for names, group in itertools.groupby(rows, key=_column_names):
        _insert_alike(conn, table, names, list(group), multi_row=multi_row)


def _column_names(row: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(row)


def _insert_alike(
    conn: Connection,
    table: Table,
    names: tuple[str, ...],
    rows: list[Mapping[str, Any]],
    *,
    multi_row: bool,
) -> None:
    statement = CompiledStatement(_plain_insert(table, names), conn.dialect) if multi_row else None
    if statement is None or statement.positional_names is None:  # or a named parameter style
        conn.execute(table.insert(), rows)
        return
    per_statement = max(1, MAX_BOUND_PARAMETERS // max(1, len(names)))
    error: type[Exception] = conn.dialect.loaded_dbapi.Error
    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
    try:
        for start in range(0, len(rows), per_statement):
            chunk = rows[start : start + per_statement]
            sql = values_repeated(statement.sql, len(chunk))
            parameters = [value for row in chunk for value in statement.parameters(row)]
            try:
                cursor.execute(sql, parameters)
            except error as exc:
                raise DBAPIError.instance(sql, None, exc, error, dialect=conn.dialect) from exc
    finally:
        cursor.close()
