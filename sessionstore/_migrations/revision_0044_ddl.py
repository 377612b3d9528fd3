"""Revision 0044's objects as raw DDL, frozen: the CJK bigram tokens of 0021, computed cheaper.

The tokens (SQLite) and the arrays (PostgreSQL) are exactly 0021's
(``tests/schema/test_revision_0044_cheaper_cjk_grams.py`` compares them on hostile texts and
on megabytes), so every row already indexed stays correct: a contentless FTS5 table must be
told, on delete, the very tokens a row was indexed with, and a GIN expression index is never
recomputed for the rows it holds. Only the work per character is smaller.

SQLite. 0025's token SQL joined each 96-byte chunk with the 96 positions ``1..96`` of a JSON
literal and kept those at most the chunk's character count: a CJK character is 3 bytes, so
two position rows of three were made (and the literal parsed) only to be thrown away. Here a
chunk is joined with exactly as many positions as it has characters, made as the chunks are
(``hex(zeroblob(n - 1))``). Everything else is 0025's: the same chunks, snapped to the same
character edges, the same ``GLOB`` per character, the same ``group_concat``.

PostgreSQL. 0021's ``sessionstore_cjk_grams`` split the whole text into characters, paired
each with the next through a window, tested each with a regular expression, and sorted every
gram (two per CJK character) in ``array_agg(DISTINCT ...)``. Here one regular expression finds
the CJK runs (with the character after each, the last one's bigram partner), only their
characters are split, each paired with the next by zipping the array with itself shifted
(``unnest(a, b)``), the bigrams are deduplicated by hashing before anything is sorted, and the
unigrams are the bigrams' first characters (every CJK character heads a bigram, alone at the
end of the text). The result is sorted as 0021's was (``ORDER BY`` in the default collation),
so the arrays are equal, element for element. It is plpgsql, not SQL: a SQL function's body is
parsed and planned again in every statement that calls it (each insert), where plpgsql keeps
its plan for the session.

Nothing here imports ``sessionstore``; 0021's and 0025's frozen helpers give the names and the
objects a downgrade restores.
"""

from __future__ import annotations

import sqlalchemy as sa

from sessionstore._migrations import revision_0021_ddl, revision_0025_ddl

BIGRAM_TABLE = revision_0021_ddl.BIGRAM_TABLE
BIGRAM_TRIGGERS = revision_0021_ddl.BIGRAM_TRIGGERS
CHUNK_BYTES = revision_0021_ddl.CHUNK_BYTES
CJK_CLASS = revision_0021_ddl.CJK_CLASS
INDEXED_COLUMNS = revision_0021_ddl.INDEXED_COLUMNS
_skip = revision_0021_ddl._skip_continuation


def column_grams(expression: str) -> str:
    """0025's ``column_grams``: the same tokens, each chunk joined with its own positions."""
    chunk = CHUNK_BYTES
    blob = f"CAST({expression} AS BLOB)"
    return f"""(SELECT group_concat(substr(piece.t, position.key + 1, 2), ' ')
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
      json_each('[' || replace(hex(zeroblob(piece.n - 1)), '00', '0,') || '0]') AS position
 WHERE piece.n < piece.b
   AND substr(piece.t, position.key + 1, 1) GLOB '{CJK_CLASS}')"""


def row_grams(row: str) -> str:
    """0025's ``row_grams`` over this ``column_grams``."""
    return " || ' ' || ".join(
        f"coalesce(CASE WHEN {revision_0021_ddl.not_ascii(f'{row}.{column}')} "
        f"THEN {column_grams(f'{row}.{column}')} END, '')"
        for column in INDEXED_COLUMNS
    )


_INSERT, _DELETE, _UPDATE = BIGRAM_TRIGGERS
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


def sqlite_cheaper_bigram_triggers(bind: sa.engine.Connection) -> None:
    """0025's bigram triggers replaced by these (no table: nothing to replace)."""
    if _has_bigram_table(bind):
        _replace_triggers(bind, SQLITE_CREATE_TRIGGERS)


def sqlite_restore_bigram_triggers(bind: sa.engine.Connection) -> None:
    """Back to 0025's trigger text (the same tokens)."""
    if _has_bigram_table(bind):
        _replace_triggers(bind, revision_0025_ddl.SQLITE_CREATE_COMPACT_TRIGGERS)


# -- PostgreSQL --------------------------------------------------------------------------------
PG_GRAMS_FUNCTION = revision_0021_ddl.PG_GRAMS_FUNCTION
PG_CREATE_GRAMS_FUNCTION = f"""
CREATE OR REPLACE FUNCTION {PG_GRAMS_FUNCTION}(t text) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
BEGIN
    IF octet_length(t) = char_length(t) THEN
        RETURN '{{}}'::text[];
    END IF;
    RETURN coalesce((
        WITH bigram AS (
            SELECT DISTINCT pair.c || pair.nxt AS g
            FROM regexp_matches(t, '({CJK_CLASS}+)(.?)', 'g') AS run(m),
                 LATERAL (SELECT string_to_array(run.m[1], NULL) AS a) AS chars,
                 unnest(chars.a, array_append(chars.a[2:], run.m[2])) AS pair(c, nxt)
        )
        SELECT array_agg(gram.g ORDER BY gram.g)
        FROM (SELECT g FROM bigram UNION SELECT left(g, 1) FROM bigram) AS gram
    ), '{{}}'::text[]);
END
$$"""


def _has_grams_function(bind: sa.engine.Connection) -> bool:
    # The store's own schema only: a tenant's search_path may name another store's schema too.
    row = bind.execute(
        sa.text(
            "SELECT 1 FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace "
            "WHERE p.proname = :name AND n.nspname = current_schema()"
        ),
        {"name": PG_GRAMS_FUNCTION},
    ).first()
    return row is not None


def pg_cheaper_grams_function(bind: sa.engine.Connection) -> None:
    """0021's function body replaced by this one (none: the head repair makes it)."""
    if _has_grams_function(bind):
        bind.exec_driver_sql(PG_CREATE_GRAMS_FUNCTION)


def pg_restore_grams_function(bind: sa.engine.Connection) -> None:
    """Back to 0021's SQL function (the same arrays)."""
    if _has_grams_function(bind):
        bind.exec_driver_sql(revision_0021_ddl.PG_CREATE_GRAMS_FUNCTION)
