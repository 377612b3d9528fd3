"""Full-text search objects as raw DDL, per dialect.

SQLite (exactly Hermes's): an external-content FTS5 table over ``messages.content`` kept in step
by three triggers; the delete trigger uses FTS5's ``'delete'`` command row, because an
external-content table cannot look up the old text itself.

PostgreSQL: a GIN index over ``to_tsvector('simple', ...)`` for word search and a ``pg_trgm``
GIN index for substring and CJK search. The indexed expression is a constant here and the search
code uses the very same text, or the planner would not use the index.

These constants belong to the revisions: an old revision must keep building the same objects
whatever the package later does, so nothing here imports ``sessionstore``. Nothing outside the
revisions uses them either: every repair builds the head layout from the runtime's one
definition of it (``sessionstore.search.sqlite_ddl`` and ``postgresql_ddl``).
"""

from __future__ import annotations

import sqlalchemy as sa

FTS_TABLE = "messages_fts"
FTS_TRIGGER_INSERT = "messages_fts_insert"
FTS_TRIGGER_DELETE = "messages_fts_delete"
FTS_TRIGGER_UPDATE = "messages_fts_update"
FTS_TRIGGERS = (FTS_TRIGGER_INSERT, FTS_TRIGGER_DELETE, FTS_TRIGGER_UPDATE)

SQLITE_CREATE_FTS = (
    f"CREATE VIRTUAL TABLE IF NOT EXISTS {FTS_TABLE} USING fts5("
    "content, content=messages, content_rowid=id)"
)
SQLITE_CREATE_TRIGGERS = (
    f"""CREATE TRIGGER IF NOT EXISTS {FTS_TRIGGER_INSERT} AFTER INSERT ON messages BEGIN
    INSERT INTO {FTS_TABLE}(rowid, content) VALUES (new.id, new.content);
END""",
    f"""CREATE TRIGGER IF NOT EXISTS {FTS_TRIGGER_DELETE} AFTER DELETE ON messages BEGIN
    INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, content) VALUES('delete', old.id, old.content);
END""",
    f"""CREATE TRIGGER IF NOT EXISTS {FTS_TRIGGER_UPDATE} AFTER UPDATE ON messages BEGIN
    INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, content) VALUES('delete', old.id, old.content);
    INSERT INTO {FTS_TABLE}(rowid, content) VALUES (new.id, new.content);
END""",
)
SQLITE_REBUILD_FTS = f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES('rebuild')"

PG_TSV_INDEX = "ix_messages_content_tsv"
PG_TRGM_INDEX = "ix_messages_content_trgm"
# left(): a tsvector is capped at 1 MB, and one huge tool output must not make its INSERT fail.
PG_TSV_EXPRESSION = "to_tsvector('simple'::regconfig, left(coalesce(content, ''), 200000))"
PG_CREATE_TRGM_EXTENSION = "CREATE EXTENSION IF NOT EXISTS pg_trgm"
PG_CREATE_TSV_INDEX = (
    f"CREATE INDEX IF NOT EXISTS {PG_TSV_INDEX} ON messages USING gin (({PG_TSV_EXPRESSION}))"
)
PG_CREATE_TRGM_INDEX = (
    f"CREATE INDEX IF NOT EXISTS {PG_TRGM_INDEX} ON messages USING gin (content gin_trgm_ops)"
)


def _sqlite_objects(bind: sa.engine.Connection) -> set[str]:
    rows = bind.exec_driver_sql(
        "SELECT name FROM sqlite_master WHERE name = ? OR (type = 'trigger' AND tbl_name = ?)",
        (FTS_TABLE, "messages"),
    )
    return {row[0] for row in rows}


def create_search_objects(bind: sa.engine.Connection) -> None:
    """Create whatever full-text objects are missing; index existing rows when the table is new."""
    if bind.dialect.name == "sqlite":
        existing = _sqlite_objects(bind)
        if FTS_TABLE not in existing:
            bind.exec_driver_sql(SQLITE_CREATE_FTS)
            # A new external-content index starts empty: fill it from the rows already there.
            bind.exec_driver_sql(SQLITE_REBUILD_FTS)
        for ddl in SQLITE_CREATE_TRIGGERS:
            bind.exec_driver_sql(ddl)
        return
    bind.exec_driver_sql(PG_CREATE_TRGM_EXTENSION)
    bind.exec_driver_sql(PG_CREATE_TSV_INDEX)
    bind.exec_driver_sql(PG_CREATE_TRGM_INDEX)


def drop_fts5_table(bind: sa.engine.Connection, table: str) -> None:
    """``DROP TABLE IF EXISTS table``, where ``table`` may be an FTS5 index whose pages a
    crash or a foreign tool damaged (Hermes fails open on such files, so they are in the
    field, and adoption drops and rebuilds every index it replaces).

    Why: SQLite opens a virtual table to drop it, and the FTS5 of SQLite 3.40 (the standard
    library's on Debian 12: the store's library wherever pysqlite3 has no wheel) reads the
    index's structure record (``<table>_data`` row 10) as it opens: with that row damaged the
    drop fails ("vtable constructor failed") and so did the adoption. Trying the drop first
    cannot help: a refused open in the transaction makes its COMMIT fail. So an FTS5 table's
    own rows are emptied and the structure record of an empty index written first, which
    always opens; every row of the index goes with the table anyway. The record is read from
    a new index in a private in-memory database of the same SQLite library as ``bind``.
    A table of any other kind is dropped as it is.
    """
    names = {
        str(name): str(sql or "")
        for name, sql in bind.exec_driver_sql(
            "SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name IN (?, ?, ?)",
            (table, f"{table}_data", f"{table}_idx"),
        )
    }
    is_fts5 = len(names) == 3 and "fts5" in names[table].lower()
    if is_fts5:
        bind.exec_driver_sql(f'DELETE FROM "{table}_idx"')
        bind.exec_driver_sql(f'DELETE FROM "{table}_data"')
        bind.exec_driver_sql(
            f'INSERT INTO "{table}_data" (id, block) VALUES (10, ?)',
            (_empty_fts5_structure_record(bind),),
        )
    bind.exec_driver_sql(f'DROP TABLE IF EXISTS "{table}"')


def _empty_fts5_structure_record(bind: sa.engine.Connection) -> bytes:
    memory = bind.dialect.dbapi.connect(":memory:")  # type: ignore[union-attr]
    try:
        memory.execute("CREATE VIRTUAL TABLE empty USING fts5(text)")
        return bytes(memory.execute("SELECT block FROM empty_data WHERE id = 10").fetchone()[0])
    finally:
        memory.close()


def restore_search_triggers(bind: sa.engine.Connection) -> None:
    """Re-create the sync triggers after a batch operation rebuilt ``messages`` without them."""
    if bind.dialect.name == "sqlite":
        for ddl in SQLITE_CREATE_TRIGGERS:
            bind.exec_driver_sql(ddl)


def drop_search_objects(bind: sa.engine.Connection) -> None:
    if bind.dialect.name == "sqlite":
        for trigger in FTS_TRIGGERS:
            bind.exec_driver_sql(f"DROP TRIGGER IF EXISTS {trigger}")
        drop_fts5_table(bind, FTS_TABLE)
        return
    bind.exec_driver_sql(f"DROP INDEX IF EXISTS {PG_TRGM_INDEX}")
    bind.exec_driver_sql(f"DROP INDEX IF EXISTS {PG_TSV_INDEX}")


# --------------------------------------------------------------------------------------------
# SQLite indexed substring search (revision 0007): FTS5's trigram tokenizer.
# --------------------------------------------------------------------------------------------
# Hermes falls back to a full LIKE scan of every message for CJK text, which its unicode61
# tokenizer cannot split into words. A trigram index answers any substring of three or more
# characters from the index instead. It is a second external-content table beside
# messages_fts (so the word index and its ranking stay exactly Hermes's), kept in step the
# same way. Cost: the index holds every three-character window of every message, several
# times the size of the text itself.

TRIGRAM_TABLE = "messages_trigram"
TRIGRAM_SOURCE_VIEW = "messages_trigram_source"
TRIGRAM_TRIGGER_INSERT = "messages_trigram_insert"
TRIGRAM_TRIGGER_DELETE = "messages_trigram_delete"
TRIGRAM_TRIGGER_UPDATE = "messages_trigram_update"
TRIGRAM_TRIGGERS = (TRIGRAM_TRIGGER_INSERT, TRIGRAM_TRIGGER_DELETE, TRIGRAM_TRIGGER_UPDATE)

# Only messages holding CJK text are indexed: the trigram index is searched only for queries
# that contain CJK, and a message matching such a query necessarily contains CJK too. Indexing
# every message would triple the file and double the cost of each append (measured with
# scripts/bench.py) for nothing. The ranges are those of sessionstore.search.contains_cjk
# (tests/test_search.py checks they agree); GLOB compares code points inside [...].
CJK_GLOB = (
    "*["
    "\u1100-\u11ff"
    "\u2e80-\u33ff"
    "\u3400-\u4dbf"
    "\u4e00-\u9fff"
    "\ua960-\ua97f"
    "\uac00-\ud7ff"
    "\uf900-\ufaff"
    "\ufe30-\ufe4f"
    "\uff00-\uffef"
    "\U00020000-\U0003ffff"
    "]*"
)
_HAS_CJK_NEW = f"new.content GLOB '{CJK_GLOB}'"
_HAS_CJK_OLD = f"old.content GLOB '{CJK_GLOB}'"

# The index's external content is a view of exactly the indexed rows, so FTS5's own
# integrity-check (which compares index and content) holds, and snippet() reads the text.
SQLITE_CREATE_TRIGRAM_SOURCE = (
    f"CREATE VIEW IF NOT EXISTS {TRIGRAM_SOURCE_VIEW} AS "
    f"SELECT id, content FROM messages WHERE content GLOB '{CJK_GLOB}'"
)
SQLITE_CREATE_TRIGRAM = (
    f"CREATE VIRTUAL TABLE IF NOT EXISTS {TRIGRAM_TABLE} USING fts5("
    f"content, content={TRIGRAM_SOURCE_VIEW}, content_rowid=id, tokenize='trigram')"
)
SQLITE_CREATE_TRIGRAM_TRIGGERS = (
    f"""CREATE TRIGGER IF NOT EXISTS {TRIGRAM_TRIGGER_INSERT} AFTER INSERT ON messages
WHEN {_HAS_CJK_NEW} BEGIN
    INSERT INTO {TRIGRAM_TABLE}(rowid, content) VALUES (new.id, new.content);
END""",
    f"""CREATE TRIGGER IF NOT EXISTS {TRIGRAM_TRIGGER_DELETE} AFTER DELETE ON messages
WHEN {_HAS_CJK_OLD} BEGIN
    INSERT INTO {TRIGRAM_TABLE}({TRIGRAM_TABLE}, rowid, content)
        VALUES('delete', old.id, old.content);
END""",
    f"""CREATE TRIGGER IF NOT EXISTS {TRIGRAM_TRIGGER_UPDATE} AFTER UPDATE ON messages
WHEN {_HAS_CJK_OLD} OR {_HAS_CJK_NEW} BEGIN
    INSERT INTO {TRIGRAM_TABLE}({TRIGRAM_TABLE}, rowid, content)
        SELECT 'delete', old.id, old.content WHERE {_HAS_CJK_OLD};
    INSERT INTO {TRIGRAM_TABLE}(rowid, content)
        SELECT new.id, new.content WHERE {_HAS_CJK_NEW};
END""",
)
SQLITE_REBUILD_TRIGRAM = f"INSERT INTO {TRIGRAM_TABLE}({TRIGRAM_TABLE}) VALUES('rebuild')"

# The trigram tokenizer arrived in SQLite 3.34 and FTS5 itself is a compile-time option, so
# support is probed on the live library: a throw-away table in the connection's private temp
# schema. A failed CREATE rolls back only itself; the surrounding transaction goes on.
_TRIGRAM_PROBE_TABLE = "temp.messages_trigram_probe"
SQLITE_PROBE_TRIGRAM = (
    f"CREATE VIRTUAL TABLE {_TRIGRAM_PROBE_TABLE} USING fts5(content, tokenize='trigram')"
)


def sqlite_supports_trigram(bind: sa.engine.Connection) -> bool:
    """Whether this connection's SQLite library can build an FTS5 trigram index.

    Asked once per connection: a failed probe can leave an unusable temp entry behind, and
    several revisions of one chain ask.
    """
    known = bind.info.get(_TRIGRAM_PROBE_TABLE)
    if known is None:
        known = bind.info[_TRIGRAM_PROBE_TABLE] = _probe_trigram(bind)
    return bool(known)


def _probe_trigram(bind: sa.engine.Connection) -> bool:
    bind.exec_driver_sql(f"DROP TABLE IF EXISTS {_TRIGRAM_PROBE_TABLE}")
    try:
        bind.exec_driver_sql(SQLITE_PROBE_TRIGRAM)
    except sa.exc.OperationalError:
        return False
    bind.exec_driver_sql(f"DROP TABLE {_TRIGRAM_PROBE_TABLE}")
    return True


def create_trigram_objects(bind: sa.engine.Connection, *, fill: bool = True) -> None:
    """Create the trigram table and its triggers, then index every message already stored.

    The rebuild runs even when the table was already there: a half-applied earlier attempt
    may have left it without triggers, and so out of step with ``messages``. ``fill=False``
    only for an upgrade that drops the table again later in its transaction (revision 0007's
    when 0013 follows: ``helpers.upgrade_also_runs``).
    """
    bind.exec_driver_sql(SQLITE_CREATE_TRIGRAM_SOURCE)
    bind.exec_driver_sql(SQLITE_CREATE_TRIGRAM)
    for ddl in SQLITE_CREATE_TRIGRAM_TRIGGERS:
        bind.exec_driver_sql(ddl)
    if fill:
        bind.exec_driver_sql(SQLITE_REBUILD_TRIGRAM)


def drop_trigram_objects(bind: sa.engine.Connection) -> None:
    # Triggers first: while they exist, any write to messages needs the table.
    for trigger in TRIGRAM_TRIGGERS:
        bind.exec_driver_sql(f"DROP TRIGGER IF EXISTS {trigger}")
    drop_fts5_table(bind, TRIGRAM_TABLE)
    bind.exec_driver_sql(f"DROP VIEW IF EXISTS {TRIGRAM_SOURCE_VIEW}")


# --------------------------------------------------------------------------------------------
# PostgreSQL stored tsvector (revision 0008).
# --------------------------------------------------------------------------------------------
# Ranking with ts_rank needs the tsvector of every match; over the expression index of 0001
# PostgreSQL recomputes to_tsvector() for each one (and again to recheck phrases), which made a
# word search 25-50x slower than SQLite's (scripts/bench.py). A stored generated column keeps
# the same expression computed once per write.
PG_TSV_COLUMN = "content_tsv"
PG_TSV_COLUMN_INDEX = "ix_messages_content_tsvector"
PG_ADD_TSV_COLUMN = (
    f"ALTER TABLE messages ADD COLUMN IF NOT EXISTS {PG_TSV_COLUMN} tsvector "
    f"GENERATED ALWAYS AS ({PG_TSV_EXPRESSION}) STORED"
)
PG_CREATE_TSV_COLUMN_INDEX = (
    f"CREATE INDEX IF NOT EXISTS {PG_TSV_COLUMN_INDEX} ON messages USING gin ({PG_TSV_COLUMN})"
)


# --------------------------------------------------------------------------------------------
# The later Hermes layout (revisions 0013 = Hermes v10, 0014 = Hermes v11).
# --------------------------------------------------------------------------------------------
# Hermes v10 added ``messages_fts_trigram`` (trigram FTS5, over content); v11 rebuilt both FTS
# tables *inline* over ``content || ' ' || tool_name || ' ' || tool_calls``, with six triggers
# named messages_fts_{insert,delete,update} and messages_fts_trigram_{insert,delete,update}.
# Newest Hermes checks those six names exist and never reads their bodies or the tables'
# options, so the shape here is chosen for cost, with the same search results:
#
# - both tables are external-content over views that compute the very text Hermes indexes, so
#   the text is not stored a second time (an inline table keeps its own copy of every message:
#   one more row write per append, and the file grows by the size of all text);
# - the trigram table holds only rows whose indexed text contains CJK: Hermes asks it only for
#   queries with three or more CJK characters, and a row matching such a query necessarily
#   contains CJK (the reasoning of revision 0007, whose ``messages_trigram`` this replaces);
# - the update triggers fire only when an indexed column changes (``UPDATE OF``), so flipping
#   ``active``/``compacted`` (rewind, compaction) does not re-index the message.
FTS_SOURCE_VIEW = "messages_fts_source"
HERMES_TRIGRAM_TABLE = "messages_fts_trigram"
HERMES_TRIGRAM_SOURCE_VIEW = "messages_fts_trigram_source"
HERMES_TRIGRAM_TRIGGERS = (
    "messages_fts_trigram_insert",
    "messages_fts_trigram_delete",
    "messages_fts_trigram_update",
)
HERMES_FTS_TRIGGERS = (*FTS_TRIGGERS, *HERMES_TRIGRAM_TRIGGERS)
"""The six trigger names newest Hermes checks for on every open."""

_INDEXED_COLUMNS = "id, content, tool_name, tool_calls"


def indexed_text(row: str | None) -> str:
    """Hermes v11's indexed text of a message row (``new``/``old`` in a trigger, or none)."""
    # The same words as Hermes's ``COALESCE(content,'') || ' ' || ...`` (so the same matches),
    # without the blanks it leaves where a column is NULL, which snippets would show.
    prefix = f"{row}." if row else ""
    return (
        f"COALESCE({prefix}content, '') || COALESCE(' ' || {prefix}tool_name, '') || "
        f"COALESCE(' ' || {prefix}tool_calls, '')"
    )


def _cjk(expression: str) -> str:
    return f"({expression}) GLOB '{CJK_GLOB}'"


def _later_sqlite_ddl(*, over_tool_columns: bool) -> tuple[str, ...]:
    """Views, tables and triggers of the v11 layout (or v10's trigram-only step)."""
    text_of = indexed_text if over_tool_columns else (
        lambda row: f"{row}.content" if row else "content"
    )
    statements: list[str] = []
    if over_tool_columns:
        statements += [
            f"CREATE VIEW IF NOT EXISTS {FTS_SOURCE_VIEW} AS "
            f"SELECT id, {indexed_text(None)} AS content FROM messages",
            f"CREATE VIRTUAL TABLE IF NOT EXISTS {FTS_TABLE} USING fts5("
            f"content, content={FTS_SOURCE_VIEW}, content_rowid=id)",
            f"""CREATE TRIGGER IF NOT EXISTS {FTS_TRIGGER_INSERT} AFTER INSERT ON messages BEGIN
    INSERT INTO {FTS_TABLE}(rowid, content) VALUES (new.id, {text_of('new')});
END""",
            f"""CREATE TRIGGER IF NOT EXISTS {FTS_TRIGGER_DELETE} AFTER DELETE ON messages BEGIN
    INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, content)
        VALUES('delete', old.id, {text_of('old')});
END""",
            f"""CREATE TRIGGER IF NOT EXISTS {FTS_TRIGGER_UPDATE}
AFTER UPDATE OF {_INDEXED_COLUMNS} ON messages BEGIN
    INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, content)
        VALUES('delete', old.id, {text_of('old')});
    INSERT INTO {FTS_TABLE}(rowid, content) VALUES (new.id, {text_of('new')});
END""",
        ]
    table = HERMES_TRIGRAM_TABLE
    new_cjk, old_cjk = _cjk(text_of("new")), _cjk(text_of("old"))
    update_of = _INDEXED_COLUMNS if over_tool_columns else "id, content"
    statements += [
        f"CREATE VIEW IF NOT EXISTS {HERMES_TRIGRAM_SOURCE_VIEW} AS "
        f"SELECT id, {text_of(None)} AS content FROM messages WHERE {_cjk(text_of(None))}",
        f"CREATE VIRTUAL TABLE IF NOT EXISTS {table} USING fts5("
        f"content, content={HERMES_TRIGRAM_SOURCE_VIEW}, content_rowid=id, tokenize='trigram')",
        f"""CREATE TRIGGER IF NOT EXISTS {HERMES_TRIGRAM_TRIGGERS[0]} AFTER INSERT ON messages
WHEN {new_cjk} BEGIN
    INSERT INTO {table}(rowid, content) VALUES (new.id, {text_of('new')});
END""",
        f"""CREATE TRIGGER IF NOT EXISTS {HERMES_TRIGRAM_TRIGGERS[1]} AFTER DELETE ON messages
WHEN {old_cjk} BEGIN
    INSERT INTO {table}({table}, rowid, content) VALUES('delete', old.id, {text_of('old')});
END""",
        f"""CREATE TRIGGER IF NOT EXISTS {HERMES_TRIGRAM_TRIGGERS[2]}
AFTER UPDATE OF {update_of} ON messages WHEN {old_cjk} OR {new_cjk} BEGIN
    INSERT INTO {table}({table}, rowid, content)
        SELECT 'delete', old.id, {text_of('old')} WHERE {old_cjk};
    INSERT INTO {table}(rowid, content) SELECT new.id, {text_of('new')} WHERE {new_cjk};
END""",
    ]
    return tuple(statements)


def _drop_names(bind: sa.engine.Connection, kind: str, names: tuple[str, ...]) -> None:
    for name in names:
        bind.exec_driver_sql(f"DROP {kind} IF EXISTS {name}")


def drop_hermes_trigram_objects(bind: sa.engine.Connection) -> None:
    """Remove ``messages_fts_trigram`` whatever its shape (Hermes's inline one included)."""
    _drop_names(bind, "TRIGGER", HERMES_TRIGRAM_TRIGGERS)
    drop_fts5_table(bind, HERMES_TRIGRAM_TABLE)
    bind.exec_driver_sql(f"DROP VIEW IF EXISTS {HERMES_TRIGRAM_SOURCE_VIEW}")


def drop_word_index(bind: sa.engine.Connection) -> None:
    """Remove ``messages_fts`` and its triggers, in either Hermes shape."""
    _drop_names(bind, "TRIGGER", FTS_TRIGGERS)
    drop_fts5_table(bind, FTS_TABLE)
    bind.exec_driver_sql(f"DROP VIEW IF EXISTS {FTS_SOURCE_VIEW}")


def create_v10_trigram(bind: sa.engine.Connection, *, fill: bool = True) -> None:
    """Hermes v10's trigram index (content only), replacing revision 0007's twin; filled from
    the rows unless the upgrade drops it again later in its transaction (``fill=False``:
    revision 0013's when 0014 follows)."""
    drop_trigram_objects(bind)
    drop_hermes_trigram_objects(bind)
    for ddl in _later_sqlite_ddl(over_tool_columns=False):
        bind.exec_driver_sql(ddl)
    if fill:
        bind.exec_driver_sql(_rebuild(HERMES_TRIGRAM_TABLE))


def _rebuild(table: str) -> str:
    return f"INSERT INTO {table}({table}) VALUES('rebuild')"


def create_later_search_objects(bind: sa.engine.Connection, *, trigram: bool) -> None:
    """The v11 layout from scratch: whatever FTS objects a file holds are replaced, and both
    indexes are filled from the rows (a Hermes file may hold inline or external-content ones,
    with or without their triggers, in step or not)."""
    drop_word_index(bind)
    drop_hermes_trigram_objects(bind)
    drop_trigram_objects(bind)
    statements = _later_sqlite_ddl(over_tool_columns=True)
    word, trigram_ddl = statements[:5], statements[5:]
    for ddl in word:
        bind.exec_driver_sql(ddl)
    bind.exec_driver_sql(SQLITE_REBUILD_FTS)
    if trigram:
        for ddl in trigram_ddl:
            bind.exec_driver_sql(ddl)
        bind.exec_driver_sql(FILL_V11_TRIGRAM)


# What ``'rebuild'`` indexes from the trigram view (the rows whose indexed text GLOBs CJK, their
# text, in rowid order), with the rows narrowed first by a test that every such row passes: a
# CJK character needs a lead byte and two continuation bytes before any NUL, so the column
# holding it counts fewer characters than bytes, or is a BLOB (whose bytes the concatenation
# reads as text). An ASCII message then costs three length comparisons, not building its
# text and a GLOB of every character (on a 100,000-message Hermes v17 file, 2.2 -> 0.5 CPU s).
# The same rows with the same text: the same index (tests/schema/test_trigram_fill_once.py).
_MAY_HOLD_CJK = " OR ".join(
    f"length(CAST(m.{column} AS BLOB)) != length(m.{column}) OR typeof(m.{column}) = 'blob'"
    for column in ("content", "tool_name", "tool_calls")
)
FILL_V11_TRIGRAM = (
    f"INSERT INTO {HERMES_TRIGRAM_TABLE}(rowid, content) "
    f"SELECT m.id, {indexed_text('m')} FROM messages AS m "
    f"WHERE ({_MAY_HOLD_CJK}) AND {_cjk(indexed_text('m'))} ORDER BY m.id"
)


def restore_hermes_trigram_triggers(bind: sa.engine.Connection) -> None:
    """Revision 0014's three trigram triggers as it built them (revision 0021's downgrade);
    nothing when the file has no trigram table (a SQLite without the tokenizer)."""
    present = bind.exec_driver_sql(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (HERMES_TRIGRAM_TABLE,)
    ).first()
    if present is None:
        return
    _drop_names(bind, "TRIGGER", HERMES_TRIGRAM_TRIGGERS)
    for ddl in _later_sqlite_ddl(over_tool_columns=True)[7:]:
        bind.exec_driver_sql(ddl)


def restore_v6_search_objects(bind: sa.engine.Connection) -> None:
    """Back to the v6 layout: external-content ``messages_fts`` over ``content`` only."""
    drop_word_index(bind)
    drop_hermes_trigram_objects(bind)
    create_search_objects(bind)


# --------------------------------------------------------------------------------------------
# PostgreSQL at Hermes v11 (revision 0014): word and substring search over the same text as
# SQLite's, content || tool name || tool calls. The stored tsvector is recomputed from it and
# the pg_trgm index moves from ``content`` to it (one trigram index, not two).
# --------------------------------------------------------------------------------------------
def pg_indexed_text(alias: str | None = None) -> str:
    """The indexed text; search queries name the table (``m``), the index does not."""
    prefix = f"{alias}." if alias else ""
    return (
        f"(coalesce({prefix}content, '') || ' ' || coalesce({prefix}tool_name, '') || ' ' || "
        f"coalesce({prefix}tool_calls, ''))"
    )


PG_INDEXED_TEXT = pg_indexed_text()
PG_LATER_TSV_EXPRESSION = (
    f"to_tsvector('simple'::regconfig, left({PG_INDEXED_TEXT}, 200000))"
)
PG_LATER_TRGM_INDEX = "ix_messages_indexed_text_trgm"
PG_CREATE_LATER_TRGM_INDEX = (
    f"CREATE INDEX IF NOT EXISTS {PG_LATER_TRGM_INDEX} ON messages "
    f"USING gin ({PG_INDEXED_TEXT} gin_trgm_ops)"
)


def _pg_replace_tsv_column(bind: sa.engine.Connection, expression: str) -> None:
    bind.exec_driver_sql(f"DROP INDEX IF EXISTS {PG_TSV_COLUMN_INDEX}")
    bind.exec_driver_sql(f"ALTER TABLE messages DROP COLUMN IF EXISTS {PG_TSV_COLUMN}")
    bind.exec_driver_sql(
        f"ALTER TABLE messages ADD COLUMN {PG_TSV_COLUMN} tsvector "
        f"GENERATED ALWAYS AS ({expression}) STORED"
    )
    bind.exec_driver_sql(PG_CREATE_TSV_COLUMN_INDEX)


def pg_create_later_search(bind: sa.engine.Connection) -> None:
    bind.exec_driver_sql(PG_CREATE_TRGM_EXTENSION)
    _pg_replace_tsv_column(bind, PG_LATER_TSV_EXPRESSION)
    bind.exec_driver_sql(PG_CREATE_LATER_TRGM_INDEX)
    bind.exec_driver_sql(f"DROP INDEX IF EXISTS {PG_TRGM_INDEX}")


def pg_restore_content_search(bind: sa.engine.Connection) -> None:
    """Back to revision 0008's objects: tsvector and trigram index over ``content``."""
    _pg_replace_tsv_column(bind, PG_TSV_EXPRESSION)
    bind.exec_driver_sql(PG_CREATE_TRGM_INDEX)
    bind.exec_driver_sql(f"DROP INDEX IF EXISTS {PG_LATER_TRGM_INDEX}")
