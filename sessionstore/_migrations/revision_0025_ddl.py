"""Revision 0025's objects as raw DDL, frozen: the CJK bigram triggers of 0021, spelled compactly.

The tokens are exactly 0021's (``tests/schema/test_revision_0025_compact_cjk_triggers.py``
compares them), so rows indexed by either set of triggers are deleted correctly by the other: a
contentless FTS5 table must be told the very tokens a row was indexed with. Only the SQL text is
shorter. 0021 wrote each chunk's character-boundary arithmetic inline wherever it was used (four
times per column); here one derived table computes a chunk's start and end once and the next one
reads them. The triggers' SQL falls from 51 KB to about 21 KB, and SQLite parses every trigger's
text whenever a connection first reads the schema: 4-6 ms per connection on the 0024 layout,
more than the whole schema of Hermes's own file (0.6 ms). SQLite flattens the derived tables
back, so a row costs what it cost (a 9,000-character CJK message: 11.5 -> 8.0 ms).

Nothing here imports ``sessionstore``; 0021's frozen helper gives the names and the tests that
do not change.
"""

from __future__ import annotations

import sqlalchemy as sa

from sessionstore._migrations import revision_0021_ddl

BIGRAM_TABLE = revision_0021_ddl.BIGRAM_TABLE
BIGRAM_TRIGGERS = revision_0021_ddl.BIGRAM_TRIGGERS
CHUNK_BYTES = revision_0021_ddl.CHUNK_BYTES
INDEXED_COLUMNS = revision_0021_ddl.INDEXED_COLUMNS
# 0021's test of how many UTF-8 continuation bytes start at a position (0 to 3), reused as is.
_skip = revision_0021_ddl._skip_continuation


def column_grams(expression: str) -> str:
    """0021's ``column_grams``: the same tokens, each chunk's edges computed once."""
    chunk = CHUNK_BYTES
    blob = f"CAST({expression} AS BLOB)"
    positions = "[" + ",".join(str(i) for i in range(1, chunk + 1)) + "]"
    return f"""(SELECT group_concat(substr(piece.t, position.value, 2), ' ')
 FROM (SELECT CAST(substr(edge.b, edge.s, edge.e - edge.s + 4) AS TEXT) AS t,
              length(CAST(substr(edge.b, edge.s, edge.e - edge.s) AS TEXT)) AS n,
              edge.e - edge.s AS b
       FROM (SELECT raw.b AS b, raw.s + {_skip('raw.b', 'raw.s')} AS s,
                    raw.e + {_skip('raw.b', 'raw.e')} AS e
             FROM (SELECT {blob} AS b, chunk.key * {chunk} + 1 AS s,
                          chunk.key * {chunk} + {chunk + 1} AS e
                   FROM json_each('[' || replace(hex(zeroblob(length({blob}) / {chunk})),
                                  '00', '0,') || '0]') AS chunk) AS raw) AS edge
       LIMIT -1) AS piece,
      json_each('{positions}') AS position
 WHERE piece.n < piece.b AND position.value <= piece.n
   AND substr(piece.t, position.value, 1) GLOB '{revision_0021_ddl.CJK_CLASS}')"""


def row_grams(row: str) -> str:
    """0021's ``row_grams`` over the compact ``column_grams``."""
    return " || ' ' || ".join(
        f"coalesce(CASE WHEN {revision_0021_ddl.not_ascii(f'{row}.{column}')} "
        f"THEN {column_grams(f'{row}.{column}')} END, '')"
        for column in INDEXED_COLUMNS
    )


_INSERT, _DELETE, _UPDATE = BIGRAM_TRIGGERS
_NEW_CJK, _OLD_CJK = revision_0021_ddl.has_cjk("new"), revision_0021_ddl.has_cjk("old")
SQLITE_CREATE_COMPACT_TRIGGERS = (
    f"""CREATE TRIGGER {_INSERT} AFTER INSERT ON messages WHEN {_NEW_CJK} BEGIN
    INSERT INTO {BIGRAM_TABLE}(rowid, grams) VALUES (new.id, {row_grams('new')});
END""",
    f"""CREATE TRIGGER {_DELETE} AFTER DELETE ON messages WHEN {_OLD_CJK} BEGIN
    INSERT INTO {BIGRAM_TABLE}({BIGRAM_TABLE}, rowid, grams)
        VALUES ('delete', old.id, {row_grams('old')});
END""",
    f"""CREATE TRIGGER {_UPDATE}
AFTER UPDATE OF id, {', '.join(INDEXED_COLUMNS)} ON messages WHEN {_OLD_CJK} OR {_NEW_CJK} BEGIN
    INSERT INTO {BIGRAM_TABLE}({BIGRAM_TABLE}, rowid, grams)
        SELECT 'delete', old.id, {row_grams('old')} WHERE {_OLD_CJK};
    INSERT INTO {BIGRAM_TABLE}(rowid, grams)
        SELECT new.id, {row_grams('new')} WHERE {_NEW_CJK};
END""",
)


def _has_bigram_table(bind: sa.engine.Connection) -> bool:
    row = bind.execute(
        sa.text("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = :name"),
        {"name": BIGRAM_TABLE},
    ).first()
    return row is not None


def _replace_triggers(bind: sa.engine.Connection, ddl: tuple[str, ...]) -> None:
    # Dropped and created in the migration's transaction: no write sees the table unindexed.
    for trigger in BIGRAM_TRIGGERS:
        bind.exec_driver_sql(f"DROP TRIGGER IF EXISTS {trigger}")
    for statement in ddl:
        bind.exec_driver_sql(statement)


def sqlite_compact_bigram_triggers(bind: sa.engine.Connection) -> None:
    """0021's bigram triggers replaced by the compact ones (no table: nothing to replace)."""
    if _has_bigram_table(bind):
        _replace_triggers(bind, SQLITE_CREATE_COMPACT_TRIGGERS)


def sqlite_restore_bigram_triggers(bind: sa.engine.Connection) -> None:
    """Back to 0021's own trigger text (the same tokens)."""
    if _has_bigram_table(bind):
        _replace_triggers(bind, revision_0021_ddl.SQLITE_CREATE_BIGRAM_TRIGGERS)
