"""Small, tolerant schema operations shared by the revisions.

Real Hermes files are messy: older code sometimes applied a step half-way, so a column or index
a revision adds may already be there. Every helper here checks first and does nothing twice.
Only alembic and sqlalchemy are imported, so a revision behaves the same forever.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from alembic.util import CommandError

from sessionstore._migrations import search_ddl

SCHEMA_VERSION_TABLE = "schema_version"


def _inspector() -> sa.engine.reflection.Inspector:
    return sa.inspect(op.get_bind())


def table_exists(name: str) -> bool:
    return _inspector().has_table(name)


def column_names(table: str) -> set[str]:
    """The table's columns, as the Inspector's ``get_columns`` names them.

    On SQLite read from the same pragma the Inspector reads (``table_xinfo``, main then temp,
    a virtual table's hidden columns left out), without building every column's type and
    default: the revisions ask ~40 times an upgrade and ~100 times a downgrade, and the
    Inspector's reflection was ~10 % of a downgrade's CPU. A table with no columns there
    (missing) is left to the Inspector, which says so as it always did."""
    bind = op.get_bind()
    if bind.dialect.name == "sqlite" and (bind.dialect.server_version_info or ()) >= (3, 31):
        quoted = bind.dialect.identifier_preparer.quote_identifier(table)
        for schema in ("main", "temp"):
            result = bind.exec_driver_sql(f"PRAGMA {schema}.table_xinfo({quoted})")
            rows = result.fetchall() if result.returns_rows else []  # no rows, no description
            if rows:
                return {row[1] for row in rows if row[6] != 1}
    return {column["name"] for column in _inspector().get_columns(table)}


def index_names(table: str) -> set[str]:
    """The table's indexes the Inspector reflects: on SQLite not the expression indexes
    (:func:`index_exists` sees those), which it skips with a warning a user running ``db
    upgrade`` on a Hermes v30+ file would read as a fault; the warning is expected here."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", "Skipped unsupported reflection of expression-based index", sa.exc.SAWarning
        )
        return {index["name"] for index in _inspector().get_indexes(table) if index["name"]}


def index_exists(name: str) -> bool:
    """Whether an index of that name exists, read from the catalog (the Inspector skips
    expression indexes on SQLite, so it cannot say)."""
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        found = bind.exec_driver_sql(
            "SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = ?", (name,)
        ).first()
    else:
        found = bind.execute(
            sa.text(
                "SELECT 1 FROM pg_indexes WHERE indexname = :name AND schemaname = current_schema()"
            ),
            {"name": name},
        ).first()
    return found is not None


def create_raw_index_if_missing(
    name: str, table: str, columns: list[str | sa.TextClause], where: str | None = None
) -> None:
    """Create an index (partial with ``where``) unless one of that name exists."""
    if index_exists(name):
        return
    if where is None:
        op.create_index(name, table, columns)
    else:
        op.create_index(
            name, table, columns,
            sqlite_where=sa.text(where), postgresql_where=sa.text(where),
        )  # fmt: skip


def drop_raw_index_if_present(name: str, table: str) -> None:
    if index_exists(name):
        op.drop_index(name, table_name=table)


def add_column_if_missing(table: str, column: sa.Column[Any]) -> None:
    if column.name not in column_names(table):
        op.add_column(table, column)


def create_index_if_missing(
    name: str, table: str, columns: list[str | sa.TextClause], **kwargs: object
) -> None:
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
    if bind.dialect.name != "sqlite":
        for name in present:
            op.drop_column(table, name)
        return
    if (bind.dialect.server_version_info or (0,)) >= (3, 35, 0):
        aside = _set_triggers_aside(bind, present)
        for name in present:
            _drop_sqlite_column(bind, table, name)
        for create_sql in aside:
            bind.exec_driver_sql(create_sql)
        return
    with op.batch_alter_table(table, recreate="always") as batch:
        for name in present:
            batch.drop_column(name)
    if table == "messages":
        search_ddl.restore_search_triggers(bind)


def _drop_sqlite_column(bind: sa.Connection, table: str, name: str) -> None:
    """``ALTER TABLE table DROP COLUMN name``, past an old SQLite's misreading of comments.

    Why: SQLite 3.40 (the standard library's on Debian 12, the store's library wherever
    pysqlite3 has no wheel: Linux on ARM) cuts the column out of the stored ``CREATE TABLE``
    text by its own scan, which takes a comma inside a ``--`` comment for a separator and
    then refuses its own result ("error in table ... after drop column: incomplete input").
    Hermes writes such comments: iot 0.21+'s ``async_delegations`` explains its last column
    in eight comment lines, and revision 0038's downgrade drops that column. The drop is
    tried in a savepoint; on that refusal, the table's comments are taken out of its stored
    text (no row changes, see :func:`strip_sqlite_table_comments`) and the drop runs again.
    Newer SQLite drops at the first try and keeps Hermes's text, comments and all.
    """
    try:
        with bind.begin_nested():
            op.drop_column(table, name)
        return
    except sa.exc.OperationalError as error:
        if "after drop column" not in str(error) or not strip_sqlite_table_comments(table):
            raise
    op.drop_column(table, name)


def _set_triggers_aside(bind: sa.Connection, columns: list[str]) -> list[str]:
    """Drop the triggers that name none of ``columns``; return their stored SQL, in order.

    Why: SQLite's ``DROP COLUMN`` parses and resolves every trigger and view of the schema,
    before and after the drop, to refuse a drop one of them depends on. The search triggers
    are ~28 KB of SQL: a drop took ~10 ms with them and ~1 ms without, and a downgrade from
    head to Hermes v1 drops ~65 columns. A trigger that does not name a column cannot depend
    on it, so it sits the drops out and is re-created from its own ``sqlite_master`` text (SQLite
    stores that text as it re-reads it: the same trigger, name and SQL). A trigger that names
    one stays, and SQLite checks it as before. The migration's transaction holds both steps:
    a killed downgrade rolls back with the triggers in place. Rows are rewritten by the drop
    itself, which fires no trigger.
    """
    named = re.compile(
        r"\b(?:" + "|".join(re.escape(column) for column in columns) + r")\b", re.IGNORECASE
    )
    triggers = bind.exec_driver_sql(
        "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND sql IS NOT NULL"
        " ORDER BY rowid"
    ).all()
    aside = [(name, sql) for name, sql in triggers if not named.search(sql)]
    for name, _ in aside:
        quoted = name.replace('"', '""')
        bind.exec_driver_sql(f'DROP TRIGGER "{quoted}"')
    return [sql for _, sql in aside]


def set_schema_version(version: int) -> None:
    """Keep Hermes's own version row in step, so Hermes can open the file after us."""
    bind = op.get_bind()
    bind.execute(sa.text(f"DELETE FROM {SCHEMA_VERSION_TABLE}"))
    bind.execute(
        sa.text(f"INSERT INTO {SCHEMA_VERSION_TABLE} (version) VALUES (:version)"),
        {"version": version},
    )


def upgrade_also_runs(revision: str) -> bool:
    """Whether the upgrade running now also runs ``revision`` (a later one), in its transaction.

    A revision whose index fill a later one throws away and does again (it drops and refills
    the table) skips the fill then: nothing reads the index in between, and the whole chain
    commits together, so no store is ever left with the unfilled table (a killed upgrade rolls
    back to the old schema). False whenever that is not certain: a relative target (``+2``),
    a revision run outside Alembic's environment, a transaction per revision; the fill is done
    then, as on an upgrade that stops before ``revision``.
    """
    context = op.get_context()
    script, destination = context.script, context.opts.get("destination_rev")
    if script is None or not isinstance(destination, str):
        return False
    if context.opts.get("transaction_per_migration"):
        return False
    try:
        targets = script.get_revisions(destination)
    except CommandError:
        return False
    return any(
        step.revision == revision
        for target in targets
        if target is not None
        for step in script.walk_revisions("base", target.revision)
    )


# A frozen copy of the runtime's lineage rule (``sessionstore.sessions.titles``, which a migration
# must not import: an old revision never changes when the runtime does). "name #3" is number 3 of
# "name" only with ASCII digits and a non-empty base, over the whole title. Hermes's own regex
# (``^(.*?) #(\d+)$``) also takes other scripts' digits, an empty base and a trailing newline, but
# every title Hermes writes is stripped and numbered with ASCII digits, so both read the titles
# Hermes writes alike; ours does not misread "Chapter #٣" as a number.
_LINEAGE = re.compile(r"(.+?) #([0-9]+)", re.DOTALL)


def renumber_duplicate_titles() -> int:
    """Give every duplicate title its own lineage number instead of failing the unique index.

    Within each group of equal titles the oldest session (by started_at, then id) keeps the
    title; each later one becomes ``base #N`` with N one above the highest number the lineage
    already uses (a plain title counts as #1), by the rule of ``sessionstore.sessions.titles`` (our
    ``get_next_title_in_lineage``), frozen here as ``_LINEAGE``. No session and no title is
    dropped. Returns how many rows were renamed.
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
        for (title,) in bind.execute(sa.text("SELECT title FROM sessions WHERE title IS NOT NULL"))
    }
    renamed = 0
    seen: set[str] = set()
    for session_id, title in rows:
        if title not in seen:
            seen.add(title)
            continue
        match = _LINEAGE.fullmatch(title)
        base = match.group(1) if match else title
        highest = 1
        for other in taken:
            if other == base:
                continue
            other_match = _LINEAGE.fullmatch(other)
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


REAL: sa.types.TypeEngine[float] = sa.Double().with_variant(sa.REAL(), "sqlite")
"""Hermes's REAL: 8 bytes on SQLite; DOUBLE PRECISION on PostgreSQL, whose REAL is 4."""

COUNTER = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
"""A counter: Hermes's INTEGER on SQLite (64 bits already); BIGINT on PostgreSQL, whose integer
is 32 bits (revision 0009 widened the older counters, so a later one is born BIGINT there)."""


def add_columns_if_missing(table: str, columns: Sequence[sa.Column[Any]]) -> None:
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


# -- physical column order ---------------------------------------------------------------------

_TABLE_CONSTRAINT_KEYWORDS = frozenset({"constraint", "primary", "foreign", "unique", "check"})


_FOREIGN_KEY_CLAUSE = re.compile(
    r"^(?:constraint\s+\S+\s+)?foreign\s+key\s*\(\s*(?P<columns>[^)]*)\)", re.IGNORECASE
)


def drop_sqlite_foreign_key_clauses(table: str, column: str) -> bool:
    """Remove ``FOREIGN KEY (column) REFERENCES ...`` table constraints from a SQLite table.

    Why: SQLite refuses ``DROP COLUMN`` of a column a foreign key names, and Hermes's fresh
    files declare some (v25's ``FOREIGN KEY (system_prompt_hash) REFERENCES
    system_prompts(hash)``; its reconciled files have none). Rebuilding the table to drop it
    would copy every row and, under ``foreign_keys = ON``, a ``DROP TABLE sessions`` would
    cascade into the tables that reference it (the Telegram topic bindings, ON DELETE
    CASCADE). A table constraint is not part of the stored record format, so SQLite's
    documented way applies (as for ``messages.active`` in ``schema.legacy``): edit the stored
    ``CREATE TABLE`` text under ``writable_schema`` and bump ``schema_version``. Only a
    constraint on exactly ``column`` goes; every other element is kept verbatim. Returns True
    when one was removed; a no-op on other databases.
    """

    def without_the_clause(create_sql: str) -> str:
        open_at, close_at = create_sql.index("("), create_sql.rindex(")")
        elements = _split_top_level(create_sql[open_at + 1 : close_at])
        kept = []
        for element in elements:
            clause = _FOREIGN_KEY_CLAUSE.match(element.strip())
            named = (
                [_leading_identifier(part) for part in clause["columns"].split(",")]
                if clause
                else []
            )
            if clause and [name[0] for name in named if name] == [column]:
                continue
            kept.append(element)
        if len(kept) == len(elements):
            return create_sql
        body = ",\n    ".join(kept)
        return f"{create_sql[: open_at + 1]}\n    {body}\n{create_sql[close_at:]}"

    return _edit_stored_table_sql(table, without_the_clause)


def strip_sqlite_table_comments(table: str) -> bool:
    """Take the comments out of a SQLite table's stored ``CREATE TABLE`` text.

    Comments are no part of the stored record format, so this is the same documented edit
    as :func:`drop_sqlite_foreign_key_clauses`: no row is read or rewritten. Returns True
    when the text held a comment; a no-op on other databases.
    """
    return _edit_stored_table_sql(table, without_comments)


def _edit_stored_table_sql(table: str, edit: Callable[[str], str]) -> bool:
    """Store ``edit(text)`` as ``table``'s ``CREATE TABLE`` text, for an edit that changes no
    column; True when it changed the text. A no-op on other databases.

    SQLite's documented way for a change outside the record format: write ``sqlite_master``
    under ``writable_schema`` and bump ``schema_version`` so every connection re-reads it.
    The columns are compared before and after (names, types, defaults, keys, order): an edit
    that would change one raises, and the migration's transaction rolls the text back.
    """
    bind = op.get_bind()
    if bind.dialect.name != "sqlite" or not table_exists(table):
        return False
    create_sql = str(bind.execute(
        sa.text("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = :name"),
        {"name": table},
    ).scalar_one())  # fmt: skip
    edited = edit(create_sql)
    if edited == create_sql:
        return False
    quoted = _quote_identifier(table)
    before = bind.exec_driver_sql(f"PRAGMA table_xinfo({quoted})").all()
    cookie = int(bind.exec_driver_sql("PRAGMA schema_version").scalar_one())
    bind.exec_driver_sql("PRAGMA writable_schema = ON")
    try:
        bind.execute(
            sa.text("UPDATE sqlite_master SET sql = :sql WHERE type = 'table' AND name = :name"),
            {"sql": edited, "name": table},
        )
        bind.exec_driver_sql(f"PRAGMA schema_version = {cookie + 1}")
    finally:
        bind.exec_driver_sql("PRAGMA writable_schema = OFF")
    after = bind.exec_driver_sql(f"PRAGMA table_xinfo({quoted})").all()
    if after != before:  # pragma: no cover - a parser defect; the transaction rolls back
        raise RuntimeError(f"rewriting {table}'s definition changed its columns: {after}")
    return True


def lay_out_empty_table(table: str, columns: list[str] | tuple[str, ...]) -> bool:
    """Give an EMPTY SQLite table the physical column order ``columns`` (a version's order).

    Why: ``ALTER TABLE ADD COLUMN`` can only append, so a file built step by step gets its
    columns in step order, while Hermes creates a fresh file from its current ``SCHEMA_SQL``,
    whose order differs (e.g. ``sessions.title`` is last from v5 on). ``SELECT *`` readers
    (Hermes's own code through ``_conn``, exports, positional tools) see that order. A table
    that holds no row can be laid out again at no risk; a table with rows is never rebuilt
    (its data matter more than its order), so this returns False and changes nothing.

    The table is re-created from its own ``CREATE TABLE`` text with the column definitions
    reordered (every type, default, constraint and name kept verbatim); its indexes and
    triggers (the full-text triggers on ``messages``) are re-created from their stored SQL and
    the AUTOINCREMENT high-water mark is kept, so ids are never reused. Columns the table has
    but ``columns`` does not name keep their relative order after the named ones; named
    columns the table lacks are ignored. No-op on other databases and when the order is right.
    Returns True when the table was laid out again.
    """
    bind = op.get_bind()
    if bind.dialect.name != "sqlite" or not table_exists(table):
        return False
    quoted = _quote_identifier(table)
    current = [str(row[1]) for row in bind.exec_driver_sql(f"PRAGMA table_info({quoted})")]
    wanted = [name for name in columns if name in current]
    desired = wanted + [name for name in current if name not in wanted]
    if desired == current:
        return False
    if bind.exec_driver_sql(f"SELECT 1 FROM {quoted} LIMIT 1").first() is not None:
        return False
    create_sql = bind.execute(
        sa.text("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = :name"),
        {"name": table},
    ).scalar_one()
    dependents = [
        str(sql)
        for (sql,) in bind.execute(
            sa.text(
                "SELECT sql FROM sqlite_master WHERE tbl_name = :name"
                " AND type IN ('index', 'trigger') AND sql IS NOT NULL ORDER BY rowid"
            ),
            {"name": table},
        )
    ]
    high_water = None
    if table_exists("sqlite_sequence"):
        high_water = bind.execute(
            sa.text("SELECT seq FROM sqlite_sequence WHERE name = :name"), {"name": table}
        ).scalar()
    reordered = reorder_create_table_sql(str(create_sql), desired)
    bind.exec_driver_sql(f"DROP TABLE {quoted}")
    bind.exec_driver_sql(reordered)
    for sql in dependents:
        bind.exec_driver_sql(sql)
    if high_water is not None:
        bind.execute(
            sa.text("INSERT INTO sqlite_sequence (name, seq) VALUES (:name, :seq)"),
            {"name": table, "seq": high_water},
        )
    laid_out = [str(row[1]) for row in bind.exec_driver_sql(f"PRAGMA table_info({quoted})")]
    if laid_out != desired:  # pragma: no cover - a parser defect; the transaction rolls back
        raise RuntimeError(f"re-creating {table} gave columns {laid_out}, not {desired}")
    return True


def reorder_create_table_sql(create_sql: str, order: list[str]) -> str:
    """``create_sql`` (a ``CREATE TABLE`` statement) with its column definitions in ``order``.

    Table constraints follow the columns in their original order; text after the closing
    parenthesis (``WITHOUT ROWID``, ``STRICT``) is kept. Every column must be named in ``order``.
    """
    open_at = create_sql.index("(")
    close_at = create_sql.rindex(")")
    elements = _split_top_level(create_sql[open_at + 1 : close_at])
    by_name: dict[str, str] = {}
    constraints: list[str] = []
    for element in elements:
        name = _leading_identifier(element)
        if name is None or name[1] in _TABLE_CONSTRAINT_KEYWORDS:
            constraints.append(element)
        else:
            by_name[name[0]] = element
    if sorted(by_name) != sorted(order):
        raise ValueError(f"columns {sorted(by_name)} cannot be put in the order {order}")
    body = ",\n    ".join([by_name[name] for name in order] + constraints)
    return f"{create_sql[: open_at + 1]}\n    {body}\n{create_sql[close_at:]}"


def _sql_segments(sql: str) -> list[tuple[str, int, int]]:
    """``sql`` cut into ``(kind, start, end)`` pieces: "quoted", "comment" or "code" (one char).

    One scanner for every reader of stored SQL text, so quotes ('...', "...", `...`, [...]) and
    comments (``--`` to the end of the line, ``/* */``) are recognised the same way everywhere.
    """
    segments: list[tuple[str, int, int]] = []
    index = 0
    closers = {"'": "'", '"': '"', "`": "`", "[": "]"}
    while index < len(sql):
        char = sql[index]
        if char in closers:
            end = sql.find(closers[char], index + 1)
            # A doubled quote is an escaped quote: keep scanning after it.
            while char != "[" and end != -1 and sql.startswith(closers[char] * 2, end):
                end = sql.find(closers[char], end + 2)
            stop = len(sql) if end == -1 else end + 1
            segments.append(("quoted", index, stop))
        elif sql.startswith("--", index):
            end = sql.find("\n", index)
            stop = len(sql) if end == -1 else end
            segments.append(("comment", index, stop))
        elif sql.startswith("/*", index):
            end = sql.find("*/", index + 2)
            stop = len(sql) if end == -1 else end + 2
            segments.append(("comment", index, stop))
        else:
            stop = index + 1
            segments.append(("code", index, stop))
        index = stop
    return segments


def _split_top_level(body: str) -> list[str]:
    """Split a parenthesised SQL list at its top-level commas (quotes and comments respected)."""
    parts: list[str] = []
    depth = 0
    start = 0
    for kind, index, _ in _sql_segments(body):
        if kind != "code":
            continue
        char = body[index]
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(body[start:index].strip())
            start = index + 1
    parts.append(body[start:].strip())
    return [part for part in parts if part]


def without_comments(sql: str) -> str:
    """``sql`` with its comments removed; a line that held only a comment goes with it.

    Quoted text is kept byte for byte (a ``--`` inside a string default is no comment).
    """
    text = ""
    drop_line_break = separate = False
    for kind, start, end in _sql_segments(sql):
        piece = sql[start:end]
        if kind == "comment":
            line_start = text.rfind("\n") + 1
            alone = not text[line_start:].strip()
            # A comment alone on its line takes its indentation and line break with it.
            text = text[:line_start] if alone else text.rstrip(" \t")
            drop_line_break, separate = alone, not alone
            continue
        if drop_line_break and piece == "\n":
            piece = ""
        elif separate and not piece[0].isspace():
            piece = " " + piece  # a comment between two tokens kept them apart
        text += piece
        drop_line_break = separate = False
    return text


_LEADING_NOISE = re.compile(r"(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/)*", re.DOTALL)
_IDENTIFIER = re.compile(r'"((?:[^"]|"")*)"|`((?:[^`]|``)*)`|\[([^\]]*)\]|([^\s(,]+)')


def _leading_identifier(element: str) -> tuple[str, str] | None:
    """The first identifier of a column or constraint definition: (name, lowercase bare word).

    The second item is empty for a quoted identifier, so a column named "check" is a column.
    """
    noise = _LEADING_NOISE.match(element)
    match = _IDENTIFIER.match(element, noise.end() if noise else 0)
    if match is None:
        return None
    double, backtick, bracket, bare = match.groups()
    if double is not None:
        return double.replace('""', '"'), ""
    if backtick is not None:
        return backtick.replace("``", "`"), ""
    if bracket is not None:
        return bracket, ""
    return bare, bare.lower()


def _quote_identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
