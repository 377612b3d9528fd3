"""Revision 0021's objects as raw DDL, frozen: the CJK character-bigram index and cheap triggers.

SQLite. ``messages_cjk_bigram`` is a contentless FTS5 table (``detail=none``: rowids only,
``prefix='1'``: one-character prefixes indexed too) holding, for every message whose indexed
text (content, tool name, tool calls: Hermes v11's) contains CJK, one token per CJK character:
that character and the one after it (a bigram, as Lucene's CJK analyzers index; the character
alone at the end of a column). The ``ascii`` tokenizer keeps every non-ASCII character inside
a token and folds ASCII letters, as ``LIKE`` does. A needle is found through the bigrams of
its CJK characters (its last CJK character as a prefix query, so 1-character needles work),
then verified against the text: the index only narrows the rows ``LIKE`` reads.

The tokens are computed in plain SQL inside the triggers, so rows written by any program
(Hermes itself, a raw ``sqlite3`` script) are indexed the same way: no function of ours has to
be registered on the writer's connection. The text is walked as a BLOB in chunks of
:data:`CHUNK_BYTES` bytes (``substr`` on a BLOB is constant time, on TEXT it counts characters
from the start), each chunk snapped to character boundaries and turned back into TEXT: linear
in the message's size. Chunks that are pure ASCII are skipped.

Every trigger first asks whether the row is pure ASCII (byte length equal to character length,
a single pass in C) before any ``GLOB`` for CJK (about 83 ns per character): an English
message costs a length comparison. The trigram triggers of revision 0014 get the same
prefilter here (same names, same effect).

The table is contentless (not external content over a view) because a view computing the
tokens re-reads each row's text once per chunk (quadratic for long messages), while the
triggers read ``new``/``old`` from registers. The backfill computes the same tokens in Python
(:func:`python_column_grams`) for every row whose text is plain (valid UTF-8 without NUL, the
case of every text Python wrote), and runs the trigger's token SQL per row with the text bound
as a parameter (:data:`_BACKFILL_ONE`, the first backfill's way) for any other row: the same
tokens per row either way (``tests/schema/test_revision_0021_backfill.py`` compares the two),
at about a twentieth of the cost (the token SQL walks 96 positions per 96-byte chunk).

PostgreSQL. An IMMUTABLE SQL function returns the CJK unigrams and bigrams of a text as an
array, and a GIN expression index over ``sessionstore_cjk_grams(lower(<indexed text>))`` answers
``@>`` for any needle of one character or more (``pg_trgm`` needs three); the text is verified
with ``ILIKE`` on the candidates.

Nothing here imports ``sessionstore``: the runtime keeps its own copy for the head layout.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

import sqlalchemy as sa

from sessionstore._migrations import search_ddl

BIGRAM_TABLE = "messages_cjk_bigram"
BIGRAM_TRIGGER_INSERT = "messages_cjk_bigram_insert"
BIGRAM_TRIGGER_DELETE = "messages_cjk_bigram_delete"
BIGRAM_TRIGGER_UPDATE = "messages_cjk_bigram_update"
BIGRAM_TRIGGERS = (BIGRAM_TRIGGER_INSERT, BIGRAM_TRIGGER_DELETE, BIGRAM_TRIGGER_UPDATE)
INDEXED_COLUMNS = ("content", "tool_name", "tool_calls")
CHUNK_BYTES = 96

HERMES_TRIGRAM_TABLE = "messages_fts_trigram"
HERMES_TRIGRAM_TRIGGERS = (
    "messages_fts_trigram_insert",
    "messages_fts_trigram_delete",
    "messages_fts_trigram_update",
)

# The ranges of sessionstore.search.contains_cjk (tests check they agree).
CJK_RANGES = (
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
CJK_CLASS = "[" + "".join(f"{chr(low)}-{chr(high)}" for low, high in CJK_RANGES) + "]"
CJK_GLOB = f"*{CJK_CLASS}*"


def not_ascii(expression: str) -> str:
    """True when the text holds a non-ASCII character (NULL for NULL: false in WHEN)."""
    return f"length(CAST({expression} AS BLOB)) != length({expression})"


def has_cjk(row: str) -> str:
    """Whether the indexed text of ``row`` (``new``/``old``) contains CJK: ASCII first."""
    columns = [f"{row}.{column}" for column in INDEXED_COLUMNS]
    prefilter = " OR ".join(not_ascii(column) for column in columns)
    globs = " OR ".join(f"{column} GLOB '{CJK_GLOB}'" for column in columns)
    return f"(({prefilter}) AND ({globs}))"


def _continuation(blob: str, position: str) -> str:
    return f"(substr({blob}, {position}, 1) BETWEEN x'80' AND x'BF')"


def _skip_continuation(blob: str, position: str) -> str:
    """How many UTF-8 continuation bytes start at ``position`` (0 to 3)."""
    first = _continuation(blob, position)
    second = _continuation(blob, f"{position} + 1")
    third = _continuation(blob, f"{position} + 2")
    return (
        f"(CASE WHEN {first} THEN (CASE WHEN {second} THEN "
        f"(CASE WHEN {third} THEN 3 ELSE 2 END) ELSE 1 END) ELSE 0 END)"
    )


def column_grams(expression: str) -> str:
    """SQL for the space-separated tokens of one text value (NULL when it has no CJK)."""
    blob = f"CAST({expression} AS BLOB)"
    start = f"(chunk.key * {CHUNK_BYTES} + 1)"
    end = f"(chunk.key * {CHUNK_BYTES} + {CHUNK_BYTES + 1})"
    first = f"({start} + {_skip_continuation(blob, start)})"
    after = f"({end} + {_skip_continuation(blob, end)})"
    inner = "[" + ",".join(str(i) for i in range(1, CHUNK_BYTES + 1)) + "]"
    # piece.t: the characters starting in this chunk plus the next one (for its bigram);
    # piece.n: how many start in it; piece.b: their byte length (n == b: pure ASCII).
    return f"""(SELECT group_concat(substr(piece.t, position.value, 2), ' ')
 FROM (SELECT CAST(substr({blob}, {first}, {after} - {first} + 4) AS TEXT) AS t,
              length(CAST(substr({blob}, {first}, {after} - {first}) AS TEXT)) AS n,
              {after} - {first} AS b
       FROM json_each('[' || replace(hex(zeroblob(length({blob}) / {CHUNK_BYTES})), '00', '0,')
                      || '0]') AS chunk
       LIMIT -1) AS piece,
      json_each('{inner}') AS position
 WHERE piece.n < piece.b AND position.value <= piece.n
   AND substr(piece.t, position.value, 1) GLOB '{CJK_CLASS}')"""


def row_grams(row: str) -> str:
    """The tokens of a row's indexed text, each column walked on its own (only if not ASCII)."""
    parts = [
        f"coalesce(CASE WHEN {not_ascii(f'{row}.{column}')} "
        f"THEN {column_grams(f'{row}.{column}')} END, '')"
        for column in INDEXED_COLUMNS
    ]
    return " || ' ' || ".join(parts)


SQLITE_CREATE_BIGRAM = (
    f"CREATE VIRTUAL TABLE IF NOT EXISTS {BIGRAM_TABLE} USING fts5("
    "grams, content='', tokenize='ascii', detail=none, prefix='1')"
)
SQLITE_CREATE_BIGRAM_TRIGGERS = (
    f"""CREATE TRIGGER IF NOT EXISTS {BIGRAM_TRIGGER_INSERT} AFTER INSERT ON messages
WHEN {has_cjk('new')} BEGIN
    INSERT INTO {BIGRAM_TABLE}(rowid, grams) VALUES (new.id, {row_grams('new')});
END""",
    f"""CREATE TRIGGER IF NOT EXISTS {BIGRAM_TRIGGER_DELETE} AFTER DELETE ON messages
WHEN {has_cjk('old')} BEGIN
    INSERT INTO {BIGRAM_TABLE}({BIGRAM_TABLE}, rowid, grams)
        VALUES ('delete', old.id, {row_grams('old')});
END""",
    f"""CREATE TRIGGER IF NOT EXISTS {BIGRAM_TRIGGER_UPDATE}
AFTER UPDATE OF id, {', '.join(INDEXED_COLUMNS)} ON messages
WHEN {has_cjk('old')} OR {has_cjk('new')} BEGIN
    INSERT INTO {BIGRAM_TABLE}({BIGRAM_TABLE}, rowid, grams)
        SELECT 'delete', old.id, {row_grams('old')} WHERE {has_cjk('old')};
    INSERT INTO {BIGRAM_TABLE}(rowid, grams)
        SELECT new.id, {row_grams('new')} WHERE {has_cjk('new')};
END""",
)
_BACKFILL_ROWS = (
    f"SELECT id, content, tool_name, tool_calls FROM messages AS m WHERE {has_cjk('m')}"
)
_BACKFILL_ONE = (
    f"INSERT INTO {BIGRAM_TABLE}(rowid, grams) "
    f"SELECT :id, {row_grams('p')} FROM (SELECT :content AS content, :tool_name AS tool_name, "
    ":tool_calls AS tool_calls) AS p"
)


def _hermes_trigram_text(row: str) -> str:
    # Revision 0014's indexed text, verbatim (the trigram index's own tokens must not change).
    return (
        f"COALESCE({row}.content, '') || COALESCE(' ' || {row}.tool_name, '') || "
        f"COALESCE(' ' || {row}.tool_calls, '')"
    )


def _trigram_has_cjk(row: str) -> str:
    prefilter = " OR ".join(not_ascii(f"{row}.{column}") for column in INDEXED_COLUMNS)
    return f"(({prefilter}) AND ({_hermes_trigram_text(row)}) GLOB '{CJK_GLOB}')"


def _prefiltered_trigram_triggers() -> tuple[str, ...]:
    table, (insert, delete, update) = HERMES_TRIGRAM_TABLE, HERMES_TRIGRAM_TRIGGERS
    new_text, old_text = _hermes_trigram_text("new"), _hermes_trigram_text("old")
    new_cjk, old_cjk = _trigram_has_cjk("new"), _trigram_has_cjk("old")
    return (
        f"""CREATE TRIGGER {insert} AFTER INSERT ON messages WHEN {new_cjk} BEGIN
    INSERT INTO {table}(rowid, content) VALUES (new.id, {new_text});
END""",
        f"""CREATE TRIGGER {delete} AFTER DELETE ON messages WHEN {old_cjk} BEGIN
    INSERT INTO {table}({table}, rowid, content) VALUES('delete', old.id, {old_text});
END""",
        f"""CREATE TRIGGER {update}
AFTER UPDATE OF id, content, tool_name, tool_calls ON messages WHEN {old_cjk} OR {new_cjk} BEGIN
    INSERT INTO {table}({table}, rowid, content)
        SELECT 'delete', old.id, {old_text} WHERE {old_cjk};
    INSERT INTO {table}(rowid, content) SELECT new.id, {new_text} WHERE {new_cjk};
END""",
    )


def _has_table(bind: sa.engine.Connection, name: str) -> bool:
    row = bind.execute(
        sa.text("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = :name"),
        {"name": name},
    ).first()
    return row is not None


def sqlite_create_bigram_index(bind: sa.engine.Connection) -> None:
    """The bigram table and its triggers, filled from the rows already stored."""
    sqlite_drop_bigram_index(bind)
    bind.exec_driver_sql(SQLITE_CREATE_BIGRAM)
    for ddl in SQLITE_CREATE_BIGRAM_TRIGGERS:
        bind.exec_driver_sql(ddl)
    if _utf8_file(bind):
        sqlite_fill_bigrams(bind)
    else:
        sqlite_fill_bigrams_row_by_row(bind)


def sqlite_fill_bigrams_row_by_row(bind: sa.engine.Connection) -> None:
    """The first backfill: the trigger's token SQL per row, the row's values bound."""
    insert = sa.text(_BACKFILL_ONE)
    for row in bind.execute(sa.text(_BACKFILL_ROWS)).all():
        bind.execute(
            insert,
            {"id": row[0], "content": row[1], "tool_name": row[2], "tool_calls": row[3]},
        )


# The trigger's WHEN, read as 0021 wrote it: its first half (some column is not ASCII, or holds
# a NUL, or is a number or BLOB: byte length != character length) in SQL, a cheap pass in C.
# The second half (a column GLOBs CJK) and the tokens come from Python for plain text.
_ANY_NOT_ASCII = " OR ".join(not_ascii(f"m.{column}") for column in INDEXED_COLUMNS)
_PAGE_ROWS = 2000
_CANDIDATES = (
    "SELECT m.id, "
    + ", ".join(f"typeof(m.{c}), CAST(m.{c} AS BLOB)" for c in INDEXED_COLUMNS)
    + f" FROM messages AS m WHERE m.id > :after AND ({_ANY_NOT_ASCII})"
    f" ORDER BY m.id LIMIT {_PAGE_ROWS}"
)
_ONE_ROW = f"{_BACKFILL_ROWS} AND m.id = :id"
_INSERT_GRAMS = f"INSERT INTO {BIGRAM_TABLE}(rowid, grams) VALUES (?, ?)"
_CJK_CHARACTER = re.compile(CJK_CLASS)
# Each CJK character with the character after it (any, a newline too): a lookahead, so the
# next match may start at that next character.
_CJK_BIGRAM = re.compile(f"(?=({CJK_CLASS}.?))", re.DOTALL)


def _utf8_file(bind: sa.engine.Connection) -> bool:
    # CAST(text AS BLOB) gives the file's encoding; the Python tokens read it as UTF-8.
    return bind.exec_driver_sql("PRAGMA encoding").scalar() == "UTF-8"


def python_column_grams(text: str) -> str:
    """:func:`column_grams` of a plain text (valid UTF-8, no NUL), in Python.

    The SQL walks the text's characters (each in exactly one 96-byte chunk, in order) and, for
    each CJK one, takes it and the character after it (``substr(t, p, 2)``; the chunk's text
    carries the 4 bytes after it, so a chunk's last character gets the next chunk's first):
    for plain text that is every CJK character with the next one, alone at the end. The SQL's
    NULL (no CJK, or ASCII text) is the empty string here, as ``coalesce`` makes it.
    """
    if text.isascii():
        return ""
    return " ".join(_CJK_BIGRAM.findall(text))


def _plain_text(kind: str, value: bytes | None) -> str | None:
    """The text of a column read as (``typeof``, ``CAST AS BLOB``) when it is plain, ``""``
    for NULL, None when only the SQL can say what it indexes (a number, a BLOB, a NUL,
    bytes that are not UTF-8)."""
    if kind == "null":
        return ""
    if kind != "text" or value is None or b"\0" in value:
        return None
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _candidate_pages(bind: sa.engine.Connection) -> Iterator[Sequence[Any]]:
    query, after = sa.text(_CANDIDATES), -(2**63)
    while True:
        page = bind.execute(query, {"after": after}).all()
        if not page:
            return
        yield page
        after = page[-1][0]


def sqlite_fill_bigrams(bind: sa.engine.Connection) -> None:
    """Fill the bigram table from the rows stored: the tokens the triggers would have written.

    Rows in id order, as the first backfill inserted them. A row of plain text is indexed when
    its WHEN holds (some column not ASCII, some column with a CJK character) with the tokens
    of :func:`python_column_grams`; any other row goes through the first backfill's statements.
    """
    one_row, one_insert = sa.text(_ONE_ROW), sa.text(_BACKFILL_ONE)
    for page in _candidate_pages(bind):
        batch: list[tuple[int, str]] = []
        for row in page:
            read = [_plain_text(row[i], row[i + 1]) for i in (1, 3, 5)]
            texts = [text for text in read if text is not None]
            if len(texts) < len(read):
                if batch:  # the rows before it first: the table is filled in id order
                    bind.exec_driver_sql(_INSERT_GRAMS, batch)
                    batch = []
                for found in bind.execute(one_row, {"id": row[0]}).all():
                    values = dict(zip(("id", *INDEXED_COLUMNS), found, strict=True))
                    bind.execute(one_insert, values)
                continue
            if any(_CJK_CHARACTER.search(text) for text in texts):
                grams = " ".join(python_column_grams(text) for text in texts)
                batch.append((row[0], grams))
        if batch:
            bind.exec_driver_sql(_INSERT_GRAMS, batch)


def sqlite_drop_bigram_index(bind: sa.engine.Connection) -> None:
    # Triggers first: while they exist, every write to messages needs the table.
    for trigger in BIGRAM_TRIGGERS:
        bind.exec_driver_sql(f"DROP TRIGGER IF EXISTS {trigger}")
    search_ddl.drop_fts5_table(bind, BIGRAM_TABLE)


def sqlite_prefilter_trigram_triggers(bind: sa.engine.Connection) -> None:
    """Revision 0014's trigram triggers again, with the ASCII test before the GLOB."""
    if not _has_table(bind, HERMES_TRIGRAM_TABLE):
        return  # a SQLite without the trigram tokenizer built none
    for trigger in HERMES_TRIGRAM_TRIGGERS:
        bind.exec_driver_sql(f"DROP TRIGGER IF EXISTS {trigger}")
    for ddl in _prefiltered_trigram_triggers():
        bind.exec_driver_sql(ddl)


# -- PostgreSQL --------------------------------------------------------------------------------
PG_GRAMS_FUNCTION = "sessionstore_cjk_grams"
PG_BIGRAM_INDEX = "ix_messages_cjk_bigrams"
# string_to_array(t, NULL) splits a text into its characters in one pass; lead() pairs each
# with the next. Pure-ASCII text (octet length = character length) returns at once.
PG_CREATE_GRAMS_FUNCTION = f"""
CREATE OR REPLACE FUNCTION {PG_GRAMS_FUNCTION}(t text) RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
SELECT CASE WHEN octet_length(t) = char_length(t) THEN '{{}}'::text[] ELSE coalesce((
    SELECT array_agg(DISTINCT gram.g)
    FROM (SELECT c, lead(c) OVER (ORDER BY i) AS nxt
          FROM unnest(string_to_array(t, NULL)) WITH ORDINALITY AS u(c, i)) AS pair
    CROSS JOIN LATERAL (VALUES (pair.c), (pair.c || coalesce(pair.nxt, ''))) AS gram(g)
    WHERE pair.c ~ '{CJK_CLASS}'
), '{{}}'::text[]) END
$$"""
PG_INDEXED_TEXT = (
    "(coalesce(content, '') || ' ' || coalesce(tool_name, '') || ' ' || "
    "coalesce(tool_calls, ''))"
)
PG_CREATE_BIGRAM_INDEX = (
    f"CREATE INDEX IF NOT EXISTS {PG_BIGRAM_INDEX} ON messages "
    f"USING gin ({PG_GRAMS_FUNCTION}(lower({PG_INDEXED_TEXT})))"
)


def pg_create_bigram_index(bind: sa.engine.Connection) -> None:
    bind.exec_driver_sql(PG_CREATE_GRAMS_FUNCTION)
    bind.exec_driver_sql(PG_CREATE_BIGRAM_INDEX)


def pg_drop_bigram_index(bind: sa.engine.Connection) -> None:
    bind.exec_driver_sql(f"DROP INDEX IF EXISTS {PG_BIGRAM_INDEX}")
    bind.exec_driver_sql(f"DROP FUNCTION IF EXISTS {PG_GRAMS_FUNCTION}(text)")
