"""A new SQLite store as the migration chain left it, read back and written again.

:mod:`sessionstore.schema.new_store` says why and when (a new store is the chain's own result,
replayed); this module is the SQLite half: what "blank" means, what is read from the store the
chain has just built (:func:`capture`), and how it is written into another blank file
(:func:`replay`). Everything goes through SQL on the migration's own connection, inside its
write transaction: no page or file is copied.

What is read:

- every ``sqlite_master`` entry with SQL of its own, in creation order (rowid order), save
  what SQLite makes by itself: automatic indexes (no SQL), ``sqlite_*`` tables (made by the
  table that needs them, ``sqlite_sequence`` by the first ``AUTOINCREMENT``), and the shadow
  tables of each virtual table (FTS5's ``*_data``, ``*_idx``, ``*_content``, ``*_docsize``,
  ``*_config``), which ``CREATE VIRTUAL TABLE`` makes. ``sqlite_sequence`` keeps its place
  all the same: the chain made it with revision 0001's ``messages``, which a later batch step
  created again near the end, and SQLite refuses a ``CREATE`` of it; where it stood, the
  image creates and drops an ``AUTOINCREMENT`` table of its own (:data:`SEQUENCE_MAKER`),
  whose creation makes ``sqlite_sequence`` there, so ``sqlite_master`` lists every entry in
  the chain's order;
- every row of every table that holds one (``alembic_version``, ``schema_version``,
  ``state_meta``, ``sqlite_sequence`` ...) with its rowid, and, separately, the rows of the
  shadow tables. A virtual table's creation writes its own shadow rows, but not always those
  the chain left: FTS5's averages record (``*_data`` id 1) is empty after ``CREATE`` and two
  zero varints after a ``'rebuild'`` of the empty index, which the chain runs. The replay
  compares them after its DDL and, where they differ, writes the chain's;
- the header values the chain sets: ``user_version``, ``application_id``, ``auto_vacuum``.

:data:`TABLE_LIST_SINCE`: ``pragma_table_list`` (which tables are shadow tables and which have
no rowid) is SQLite 3.37's; an older library gets no image, and every store there is built by
the chain.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from .interface import StoreImage, TableRows

TABLE_LIST_SINCE = (3, 37, 0)
HEADER_VALUES = ("auto_vacuum", "user_version", "application_id")
"""The header values an image carries, in the order they are written (``auto_vacuum`` takes
effect only before the first table)."""
BLANK_KEY_VALUES = ("page_size", "encoding", "auto_vacuum")
"""What a blank file may already say of itself, and the chain's result depends on (chosen
before the first table is created)."""
UNSET_HEADER_VALUES = ("user_version", "application_id")
"""Header values a blank file must have left at 0 to be built from an image: the chain keeps an
``application_id`` already set, where a replay stamps one derived from the new file's
identity."""
SEQUENCE_MAKER = '"sessionstore image: makes sqlite_sequence"'
"""The quoted name of the table created and dropped at ``sqlite_sequence``'s place in the
chain's order (SQLite creates ``sqlite_sequence`` only with a table that needs it)."""
_ROWID_NAMES = ("rowid", "_rowid_", "oid")
"""What a rowid is read and written by: the first that no column of the table is called."""


def _version(conn: Connection) -> tuple[int, ...]:
    text = str(conn.exec_driver_sql("SELECT sqlite_version()").scalar_one())
    return tuple(int(part) for part in text.split(".")[:3])


def blank_key(conn: Connection) -> tuple[Any, ...] | None:
    """What a blank database says of itself (the library's build and :data:`BLANK_KEY_VALUES`),
    or None when it holds any schema object, has a header value set
    (:data:`UNSET_HEADER_VALUES`), or the library is too old to be imaged."""
    if _version(conn) < TABLE_LIST_SINCE:
        return None
    if conn.exec_driver_sql("SELECT 1 FROM main.sqlite_master LIMIT 1").first() is not None:
        return None
    if any(_pragma(conn, name) for name in UNSET_HEADER_VALUES):
        return None
    source = conn.exec_driver_sql("SELECT sqlite_source_id()").scalar_one()
    return (source, *(_pragma(conn, name) for name in BLANK_KEY_VALUES))


def _pragma(conn: Connection, name: str) -> Any:
    return conn.exec_driver_sql(f"PRAGMA main.{name}").scalar_one()


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


Run = Callable[..., list[tuple[Any, ...]]]
"""``run(sql)``, ``run(sql, (values,))``: the rows of one statement; ``run(sql, [rows])``
runs it once per row (``executemany``) and returns no rows."""


def _through_sqlalchemy(conn: Connection) -> Run:
    def run(sql: str, values: Any = None) -> list[tuple[Any, ...]]:
        result = conn.exec_driver_sql(sql) if values is None else conn.exec_driver_sql(sql, values)
        return [tuple(row) for row in result] if result.returns_rows else []

    return run


@contextmanager
def _statements(conn: Connection) -> Iterator[Run]:
    """What :func:`replay` runs its statements with: the driver's cursor of ``conn``'s own
    connection (in its transaction), as ``search.request.prepared_rows`` runs a hot read: a
    replay sends ~70 statements, and SQLAlchemy's work around each (a result object, events,
    an execution context) cost about a third of their time. Driver errors come out as
    SQLAlchemy's exception classes, as through it. Where a program listens to the engine's
    cursor events (statement logging, tracing, a rewrite), everything goes through
    SQLAlchemy, so it is seen."""
    if conn.dispatch.before_cursor_execute or conn.dispatch.after_cursor_execute:
        yield _through_sqlalchemy(conn)
        return
    dialect = conn.dialect
    error = dialect.loaded_dbapi.Error
    cursor: Any = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]

    def run(sql: str, values: Any = None) -> list[tuple[Any, ...]]:
        try:
            if isinstance(values, list):
                cursor.executemany(sql, values)
                return []
            rows: list[tuple[Any, ...]] = cursor.execute(sql, values or ()).fetchall()
        except error as exc:
            raise DBAPIError.instance(sql, values, exc, error, dialect=dialect) from exc
        return rows

    try:
        yield run
    finally:
        cursor.close()


def _table_rows(conn: Connection | Run, table: str, *, without_rowid: bool) -> TableRows:
    run = _through_sqlalchemy(conn) if isinstance(conn, Connection) else conn
    columns = tuple(
        str(name) for (name,) in run(
            "SELECT name FROM pragma_table_xinfo(?, 'main') WHERE hidden = 0", (table,)
        )
    )  # fmt: skip
    rowid = None if without_rowid else next(
        (name for name in _ROWID_NAMES if name not in columns), None
    )
    written = (rowid, *columns) if rowid is not None else columns
    order = f" ORDER BY {rowid}" if rowid is not None else ""
    select = f"SELECT {_column_list(written, rowid)} FROM main.{_quoted(table)}{order}"
    rows = tuple(tuple(row) for row in run(select))
    return TableRows(table, written, rows, rowid)


def _column_list(columns: tuple[str, ...], rowid: str | None) -> str:
    # The rowid by its own name: quoted, it would be a column of that name.
    return ", ".join(name if name == rowid else _quoted(name) for name in columns)


_SEQUENCE_MADE_HERE = (
    f"CREATE TABLE {SEQUENCE_MAKER} (id INTEGER PRIMARY KEY AUTOINCREMENT)",
    f"DROP TABLE {SEQUENCE_MAKER}",
)
"""Where ``sqlite_sequence`` stood: SQLite makes it with the first ``AUTOINCREMENT`` table
(and keeps it when that table is dropped); a no-op where it is there already."""


def capture(conn: Connection) -> StoreImage | None:
    """The image of the store on ``conn`` (read in its transaction); None where the library
    cannot tell shadow tables (:data:`TABLE_LIST_SINCE`) or the schema holds something that
    cannot be created by its SQL (``sqlite_stat*`` of an ``ANALYZE``)."""
    if _version(conn) < TABLE_LIST_SINCE:
        return None
    kinds = {
        str(name): (str(kind), bool(without_rowid))
        for name, kind, without_rowid in conn.exec_driver_sql(
            "SELECT name, type, wr FROM pragma_table_list WHERE schema = 'main'"
        )
    }
    objects: list[str] = []
    rows: list[TableRows] = []
    created_rows: list[TableRows] = []
    for kind, name, sql in conn.exec_driver_sql(
        "SELECT type, name, sql FROM main.sqlite_master ORDER BY rowid"
    ):
        table_kind, without_rowid = kinds.get(name, ("", False))
        if name == "sqlite_sequence":
            objects.extend(_SEQUENCE_MADE_HERE)
        elif name.startswith("sqlite_"):
            if kind == "table":
                return None  # made only by SQLite itself (ANALYZE's statistics)
        elif sql is not None and table_kind != "shadow":
            objects.append(str(sql))
        if kind != "table" or table_kind == "virtual":
            continue
        table_rows = _table_rows(conn, name, without_rowid=without_rowid)
        if table_kind == "shadow":
            created_rows.append(table_rows)
        elif table_rows.rows:
            rows.append(table_rows)
    header = tuple((name, int(_pragma(conn, name))) for name in HEADER_VALUES)
    return StoreImage(tuple(objects), tuple(rows), tuple(created_rows), header)


def _insert(run: Run, table_rows: TableRows) -> None:
    if not table_rows.rows:
        return
    names = _column_list(table_rows.columns, table_rows.rowid)
    marks = ", ".join("?" for _ in table_rows.columns)
    run(
        f"INSERT INTO main.{_quoted(table_rows.table)} ({names}) VALUES ({marks})",
        list(table_rows.rows),
    )


def replay(conn: Connection, image: StoreImage) -> None:
    """Write ``image`` into the blank database on ``conn``, in the caller's transaction."""
    header = dict(image.header)
    with _statements(conn) as run:
        run(f"PRAGMA main.auto_vacuum = {int(header['auto_vacuum'])}")
        for statement in image.objects:
            run(statement)
        for table_rows in image.created_rows:
            laid = _table_rows(run, table_rows.table, without_rowid=table_rows.rowid is None)
            if laid != table_rows:
                run(f"DELETE FROM main.{_quoted(table_rows.table)}")
                _insert(run, table_rows)
        for table_rows in image.rows:
            _insert(run, table_rows)
        for name in ("user_version", "application_id"):
            run(f"PRAGMA main.{name} = {int(header[name])}")
