"""The SQLite search objects as a store at head has them: the one definition of the head layout.

The migrations built them (revisions 0014, 0021 and 0025) from frozen DDL of their own; every
repair builds them from here (the search index's create and rebuild: ``db doctor --fix``, and
the migrations' repair of a dropped object after the chain), so a repair never depends on an
old revision's code. The statements are the chain's own text, byte for byte as SQLite stores
it (``tests/search/test_head_layout.py`` compares ``sqlite_master`` of a repaired store with a
fresh one's), so a repaired store is indistinguishable from one the chain built:

- ``messages_fts``: Hermes's word index, external content over a view of Hermes v11's indexed
  text (content, tool name, tool calls), three triggers;
- ``messages_fts_trigram``: Hermes's trigram index over the CJK rows only (newest Hermes asks it
  for 3+ CJK characters), three triggers with the ASCII prefilter;
- ``messages_cjk_bigram``: the CJK bigram index (contentless FTS5), three triggers computing its
  tokens in plain SQL, so any program's writes are indexed (see :func:`column_grams`).
"""

from __future__ import annotations

from typing import Final

from . import object_names as names

INDEXED_COLUMNS: Final = ("content", "tool_name", "tool_calls")
CHUNK_BYTES: Final = 96
CJK_RANGES: Final = (
    (0x1100, 0x11FF),
    (0x2E80, 0x33FF),
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xA960, 0xA97F),
    (0xAC00, 0xD7FF),
    (0xF900, 0xFAFF),
    (0xFE30, 0xFE4F),
    (0xFF00, 0xFFEF),
    (0x20000, 0x3FFFF),
)
"""The ranges of :func:`sessionstore.search.contains_cjk` (tests check they agree)."""
CJK_CLASS: Final = "[" + "".join(f"{chr(low)}-{chr(high)}" for low, high in CJK_RANGES) + "]"
CJK_GLOB: Final = f"*{CJK_CLASS}*"


def not_ascii(expression: str) -> str:
    """True when the text holds a non-ASCII character: one pass in C, no GLOB (NULL: NULL)."""
    return f"length(CAST({expression} AS BLOB)) != length({expression})"


def hermes_text(row: str | None) -> str:
    """Hermes v11's indexed text of a row (``new``/``old``/an alias, or none)."""
    prefix = f"{row}." if row else ""
    return (
        f"COALESCE({prefix}content, '') || COALESCE(' ' || {prefix}tool_name, '') || "
        f"COALESCE(' ' || {prefix}tool_calls, '')"
    )


def has_cjk(row: str | None) -> str:
    """Whether a row's indexed text holds CJK, the ASCII test first (the trigram triggers')."""
    prefix = f"{row}." if row else ""
    prefilter = " OR ".join(not_ascii(f"{prefix}{column}") for column in INDEXED_COLUMNS)
    return f"(({prefilter}) AND ({hermes_text(row)}) GLOB '{CJK_GLOB}')"


def any_column_has_cjk(row: str) -> str:
    """The same answer, each column tested on its own (the bigram triggers' spelling)."""
    columns = [f"{row}.{column}" for column in INDEXED_COLUMNS]
    prefilter = " OR ".join(not_ascii(column) for column in columns)
    globs = " OR ".join(f"{column} GLOB '{CJK_GLOB}'" for column in columns)
    return f"(({prefilter}) AND ({globs}))"


def _continuation(blob: str, position: str) -> str:
    return f"(substr({blob}, {position}, 1) BETWEEN x'80' AND x'BF')"


def _skip_continuation(blob: str, position: str) -> str:
    first = _continuation(blob, position)
    second = _continuation(blob, f"{position} + 1")
    third = _continuation(blob, f"{position} + 2")
    return (
        f"(CASE WHEN {first} THEN (CASE WHEN {second} THEN "
        f"(CASE WHEN {third} THEN 3 ELSE 2 END) ELSE 1 END) ELSE 0 END)"
    )


def column_grams(expression: str) -> str:
    """SQL for the bigram tokens of one text value, space-separated (NULL without CJK).

    Each CJK character gives one token: it and the character after it (alone at the end). The
    text is walked as a BLOB in chunks of :data:`CHUNK_BYTES` bytes, each snapped to character
    boundaries (``substr`` on a BLOB is constant time; on TEXT it counts characters from the
    start, which would make a long message quadratic); pure-ASCII chunks are skipped. A
    chunk's edges are computed once, in a derived table of their own (revision 0025): SQLite
    parses every trigger's text on each new connection, and writing them out at every use
    made the triggers 51 KB.
    ``expression`` must be a bound value or a trigger's ``new``/``old`` column: those are read
    once, while a table column would be read again for every chunk.
    """
    chunk = CHUNK_BYTES
    blob = f"CAST({expression} AS BLOB)"
    positions = "[" + ",".join(str(i) for i in range(1, chunk + 1)) + "]"
    return f"""(SELECT group_concat(substr(piece.t, position.value, 2), ' ')
 FROM (SELECT CAST(substr(edge.b, edge.s, edge.e - edge.s + 4) AS TEXT) AS t,
              length(CAST(substr(edge.b, edge.s, edge.e - edge.s) AS TEXT)) AS n,
              edge.e - edge.s AS b
       FROM (SELECT raw.b AS b, raw.s + {_skip_continuation('raw.b', 'raw.s')} AS s,
                    raw.e + {_skip_continuation('raw.b', 'raw.e')} AS e
             FROM (SELECT {blob} AS b, chunk.key * {chunk} + 1 AS s,
                          chunk.key * {chunk} + {chunk + 1} AS e
                   FROM json_each('[' || replace(hex(zeroblob(length({blob}) / {chunk})),
                                  '00', '0,') || '0]') AS chunk) AS raw) AS edge
       LIMIT -1) AS piece,
      json_each('{positions}') AS position
 WHERE piece.n < piece.b AND position.value <= piece.n
   AND substr(piece.t, position.value, 1) GLOB '{CJK_CLASS}')"""


def row_grams(row: str) -> str:
    """The tokens of a row's indexed text (each non-ASCII column walked on its own)."""
    return " || ' ' || ".join(
        f"coalesce(CASE WHEN {not_ascii(f'{row}.{column}')} "
        f"THEN {column_grams(f'{row}.{column}')} END, '')"
        for column in INDEXED_COLUMNS
    )


_WORD, _TRIGRAM, _BIGRAM = names.WORD_TABLE, names.TRIGRAM_TABLE, names.BIGRAM_TABLE
_UPDATE_OF: Final = "id, content, tool_name, tool_calls"

# Each statement is spelled as the revision that built the object at head spelled it (SQLite
# keeps a trigger's text as written, minus IF NOT EXISTS): the word index and both views as
# 0014, the trigram triggers as 0021 (with the ASCII prefilter), the bigram table as 0021 and
# its triggers as 0025 (the compact token SQL of column_grams).
_NEW_CJK, _OLD_CJK = has_cjk("new"), has_cjk("old")
_NEW_COLUMN_CJK, _OLD_COLUMN_CJK = any_column_has_cjk("new"), any_column_has_cjk("old")

WORD_DDL: Final = (
    f"CREATE VIEW IF NOT EXISTS {names.WORD_SOURCE_VIEW} AS "
    f"SELECT id, {hermes_text(None)} AS content FROM messages",
    f"CREATE VIRTUAL TABLE IF NOT EXISTS {_WORD} USING fts5("
    f"content, content={names.WORD_SOURCE_VIEW}, content_rowid=id)",
    f"""CREATE TRIGGER IF NOT EXISTS {names.WORD_TRIGGERS[0]} AFTER INSERT ON messages BEGIN
    INSERT INTO {_WORD}(rowid, content) VALUES (new.id, {hermes_text('new')});
END""",
    f"""CREATE TRIGGER IF NOT EXISTS {names.WORD_TRIGGERS[1]} AFTER DELETE ON messages BEGIN
    INSERT INTO {_WORD}({_WORD}, rowid, content)
        VALUES('delete', old.id, {hermes_text('old')});
END""",
    f"""CREATE TRIGGER IF NOT EXISTS {names.WORD_TRIGGERS[2]}
AFTER UPDATE OF {_UPDATE_OF} ON messages BEGIN
    INSERT INTO {_WORD}({_WORD}, rowid, content)
        VALUES('delete', old.id, {hermes_text('old')});
    INSERT INTO {_WORD}(rowid, content) VALUES (new.id, {hermes_text('new')});
END""",
)
TRIGRAM_DDL: Final = (
    f"CREATE VIEW IF NOT EXISTS {names.TRIGRAM_SOURCE_VIEW} AS "
    f"SELECT id, {hermes_text(None)} AS content FROM messages "
    f"WHERE ({hermes_text(None)}) GLOB '{CJK_GLOB}'",
    f"CREATE VIRTUAL TABLE IF NOT EXISTS {_TRIGRAM} USING fts5("
    f"content, content={names.TRIGRAM_SOURCE_VIEW}, content_rowid=id, tokenize='trigram')",
    f"""CREATE TRIGGER IF NOT EXISTS {names.TRIGRAM_TRIGGERS[0]} AFTER INSERT ON messages \
WHEN {_NEW_CJK} BEGIN
    INSERT INTO {_TRIGRAM}(rowid, content) VALUES (new.id, {hermes_text('new')});
END""",
    f"""CREATE TRIGGER IF NOT EXISTS {names.TRIGRAM_TRIGGERS[1]} AFTER DELETE ON messages \
WHEN {_OLD_CJK} BEGIN
    INSERT INTO {_TRIGRAM}({_TRIGRAM}, rowid, content) VALUES('delete', old.id, \
{hermes_text('old')});
END""",
    f"""CREATE TRIGGER IF NOT EXISTS {names.TRIGRAM_TRIGGERS[2]}
AFTER UPDATE OF {_UPDATE_OF} ON messages WHEN {_OLD_CJK} OR {_NEW_CJK} BEGIN
    INSERT INTO {_TRIGRAM}({_TRIGRAM}, rowid, content)
        SELECT 'delete', old.id, {hermes_text('old')} WHERE {_OLD_CJK};
    INSERT INTO {_TRIGRAM}(rowid, content) SELECT new.id, {hermes_text('new')} WHERE {_NEW_CJK};
END""",
)
BIGRAM_DDL: Final = (
    f"CREATE VIRTUAL TABLE IF NOT EXISTS {_BIGRAM} USING fts5("
    "grams, content='', tokenize='ascii', detail=none, prefix='1')",
    f"""CREATE TRIGGER IF NOT EXISTS {names.BIGRAM_TRIGGERS[0]} AFTER INSERT ON messages \
WHEN {_NEW_COLUMN_CJK} BEGIN
    INSERT INTO {_BIGRAM}(rowid, grams) VALUES (new.id, {row_grams('new')});
END""",
    f"""CREATE TRIGGER IF NOT EXISTS {names.BIGRAM_TRIGGERS[1]} AFTER DELETE ON messages \
WHEN {_OLD_COLUMN_CJK} BEGIN
    INSERT INTO {_BIGRAM}({_BIGRAM}, rowid, grams)
        VALUES ('delete', old.id, {row_grams('old')});
END""",
    f"""CREATE TRIGGER IF NOT EXISTS {names.BIGRAM_TRIGGERS[2]}
AFTER UPDATE OF {_UPDATE_OF} ON messages WHEN {_OLD_COLUMN_CJK} OR {_NEW_COLUMN_CJK} BEGIN
    INSERT INTO {_BIGRAM}({_BIGRAM}, rowid, grams)
        SELECT 'delete', old.id, {row_grams('old')} WHERE {_OLD_COLUMN_CJK};
    INSERT INTO {_BIGRAM}(rowid, grams)
        SELECT new.id, {row_grams('new')} WHERE {_NEW_COLUMN_CJK};
END""",
)
BIGRAM_ROWS: Final = (
    f"SELECT id, content, tool_name, tool_calls FROM messages AS m WHERE {has_cjk('m')}"
)
BIGRAM_INSERT_ONE: Final = (
    f"INSERT INTO {_BIGRAM}(rowid, grams) SELECT :id, {row_grams('p')} FROM (SELECT "
    ":content AS content, :tool_name AS tool_name, :tool_calls AS tool_calls) AS p"
)
"""One row's tokens from bound values (a backfill; see :func:`column_grams` for why)."""
CJK_ROW_COUNT: Final = f"SELECT count(*) FROM messages AS m WHERE {has_cjk('m')}"
TRIGRAM_PROBE_TABLE: Final = "temp.sessionstore_trigram_probe"
TRIGRAM_PROBE: Final = (
    f"CREATE VIRTUAL TABLE {TRIGRAM_PROBE_TABLE} USING fts5(c, tokenize='trigram')"
)
