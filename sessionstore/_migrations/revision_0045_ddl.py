"""Revision 0045's objects as raw DDL, frozen: 0044's CJK bigram triggers, a row's tokens
written out once instead of once per column.

Why: SQLite parses every trigger's text whenever a connection first reads the schema, and
0044's three bigram triggers were 20.6 KB of a store's ~39 KB: its token SQL was written out
for each of the three indexed columns, for the new row and the old one (12 copies). Here one
token expression walks the three columns in turn, so each trigger holds it once per row it
reads (4 copies, 9.3 KB for the three triggers).

The tokens are 0044's (so 0025's and 0021's), not merely equal on the texts tried: each column
is walked alone, exactly as before. A three-row ``json_each`` numbers the columns and a
``CASE`` picks each one's value; every column is then cut into its own 96-byte chunks from its
own first byte (the chunk edges, and so what a NUL or invalid UTF-8 hides, are those of the
column alone), a column's last character sees no character of the next one after it, and a
column ``not_ascii`` calls ASCII (a BLOB, a number, ASCII text) is skipped as 0044 skipped it.
The grams of all three are joined with the spaces 0044 joined them with (0044 also put a
space between the columns, and the ``ascii`` tokenizer reads spaces as separators only), so a
row is indexed with the very same terms: rows indexed by 0044's triggers are deleted by these
and the other way round (``tests/schema/test_revision_0045_cjk_grams_once_per_row.py``
compares them on hostile values and on the index of a store changed by both).

Why not the three columns joined into one text with a separator: each reference to the text
in the chunk SQL would compute the concatenation again (SQLite inlines it), a copy of the
whole message per chunk, quadratic in a long message; and the chunk edges of the second and
third column would move, which changes the tokens where a NUL or invalid UTF-8 sits. The
``CASE`` here reads the trigger's ``new``/``old`` registers, as 0044's SQL did: the derived
table numbering the columns is flattened into the chunk query (no copy of the value per
chunk). Nor a view computing the tokens from ``messages``: a table column read per chunk is
again quadratic (revision 0021's reason), and a delete's old row is no longer in the table.

The ``WHEN`` clauses and the statements' ``WHERE`` are 0044's (0021's), word for word: which
rows the index holds does not change, and an ASCII row still costs one length comparison per
column. Nothing here imports ``sessionstore``; 0021's and 0044's frozen helpers give the names
and the triggers a downgrade restores.
"""

from __future__ import annotations

import sqlalchemy as sa

from sessionstore._migrations import revision_0021_ddl, revision_0044_ddl

BIGRAM_TABLE = revision_0021_ddl.BIGRAM_TABLE
CHUNK_BYTES = revision_0021_ddl.CHUNK_BYTES
INDEXED_COLUMNS = revision_0021_ddl.INDEXED_COLUMNS
_skip = revision_0021_ddl._skip_continuation


def row_grams(row: str) -> str:
    """The space-separated tokens of a row's three columns, each walked as 0044 walks it."""
    chunk = CHUNK_BYTES
    content, tool_name, tool_calls = (f"{row}.{column}" for column in INDEXED_COLUMNS)
    value = f"CASE c.key WHEN 0 THEN {content} WHEN 1 THEN {tool_name} ELSE {tool_calls} END"
    return f"""coalesce((SELECT group_concat(substr(piece.t, position.key + 1, 2), ' ')
 FROM (SELECT CAST(substr(edge.b, edge.s, edge.e - edge.s + 4) AS TEXT) AS t,
              length(CAST(substr(edge.b, edge.s, edge.e - edge.s) AS TEXT)) AS n,
              edge.e - edge.s AS b
       FROM (SELECT raw.b AS b, raw.s + {_skip('raw.b', 'raw.s')} AS s,
                    raw.e + {_skip('raw.b', 'raw.e')} AS e
             FROM (SELECT CAST(col.v AS BLOB) AS b, chunk.key * {chunk} + 1 AS s,
                          chunk.key * {chunk} + {chunk + 1} AS e
                   FROM (SELECT {value} AS v FROM json_each('[0,0,0]') AS c) AS col,
                        json_each('[' || replace(hex(zeroblob(length(CAST(col.v AS BLOB))
                                  / {chunk})), '00', '0,') || '0]') AS chunk
                   WHERE {revision_0021_ddl.not_ascii('col.v')}) AS raw) AS edge
       LIMIT -1) AS piece,
      json_each('[' || replace(hex(zeroblob(piece.n - 1)), '00', '0,') || '0]') AS position
 WHERE piece.n < piece.b
   AND substr(piece.t, position.key + 1, 1) GLOB '{revision_0021_ddl.CJK_CLASS}'), '')"""


_INSERT, _DELETE, _UPDATE = revision_0021_ddl.BIGRAM_TRIGGERS
_NEW_CJK, _OLD_CJK = revision_0021_ddl.has_cjk("new"), revision_0021_ddl.has_cjk("old")
SQLITE_CREATE_TRIGGERS = (
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


def _replace_triggers(bind: sa.engine.Connection, ddl: tuple[str, ...]) -> None:
    # 0044's own steps: no table (a SQLite without FTS5), nothing to replace; dropped and
    # created in the migration's transaction, so no write sees the table unindexed.
    if revision_0044_ddl._has_bigram_table(bind):
        revision_0044_ddl._replace_triggers(bind, ddl)


def sqlite_one_grams_expression_per_row(bind: sa.engine.Connection) -> None:
    """0044's bigram triggers replaced by these (the same tokens)."""
    _replace_triggers(bind, SQLITE_CREATE_TRIGGERS)


def sqlite_restore_bigram_triggers(bind: sa.engine.Connection) -> None:
    """Back to 0044's trigger text (the same tokens)."""
    _replace_triggers(bind, revision_0044_ddl.SQLITE_CREATE_TRIGGERS)
