"""The PostgreSQL search objects as a store at head has them: the one definition of the head
layout, as :mod:`.sqlite_ddl` is SQLite's.

The migrations built them (revisions 0008, 0014, 0021 and 0044) from frozen DDL of their own; every
repair builds them from here (the search index's create and rebuild: ``db doctor --fix``, and
the migrations' repair of a dropped object after the chain):

- ``content_tsv``: a stored tsvector of Hermes v11's indexed text (content, tool name, tool
  calls), GIN-indexed, for word search;
- ``ix_messages_indexed_text_trgm``: ``pg_trgm`` over the same text;
- ``ix_messages_cjk_bigrams``: the CJK bigram index, a GIN expression index over
  ``sessionstore_cjk_grams(lower(<indexed text>))`` (an array of the text's CJK characters and
  CJK-led bigrams), which answers a needle of any length.

Each GIN index keeps a pending list of :data:`PENDING_LIST_KB` (revision 0041).

The index expressions are the very text the queries of :mod:`.postgresql` use, or the planner
would not match them.
"""

from __future__ import annotations

from typing import Final

from . import object_names as names

INDEXED_CHARS: Final = 200_000
"""Only what the word index covers can match: headlines read no further."""


def indexed_text(alias: str | None = None) -> str:
    """Hermes v11's indexed text; the index expressions use it verbatim (no alias) and the
    queries with one, or the planner would not match them."""
    prefix = f"{alias}." if alias else ""
    return (
        f"(coalesce({prefix}content, '') || ' ' || coalesce({prefix}tool_name, '') || ' ' || "
        f"coalesce({prefix}tool_calls, ''))"
    )


TSV_EXPRESSION: Final = f"to_tsvector('simple'::regconfig, left({indexed_text()}, {INDEXED_CHARS}))"
CJK_CLASS: Final = "[" + "".join(
    f"{chr(low)}-{chr(high)}"
    for low, high in (
        (0x1100, 0x11FF), (0x2E80, 0x33FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF),
        (0xA960, 0xA97F), (0xAC00, 0xD7FF), (0xF900, 0xFAFF), (0xFE30, 0xFE4F),
        (0xFF00, 0xFFEF), (0x20000, 0x3FFFF),
    )
) + "]"  # fmt: skip
"""The ranges of :func:`sessionstore.search.contains_cjk` (tests check they agree)."""


def grams_of(expression: str) -> str:
    """The CJK unigrams and bigrams of a text, as the bigram index holds them (lower-cased)."""
    return f"{names.PG_GRAMS_FUNCTION}(lower({expression}))"


# Revision 0044's body, the arrays exactly 0021's: one regular expression finds the CJK runs
# (with the character after each: the last one's bigram partner, '' at the end of the text),
# only their characters are split and zipped with themselves shifted by one, the bigrams are
# hashed distinct before the one sort, and the unigrams are their first characters. Sorted in
# the default collation, as 0021's array_agg(DISTINCT) sorted. plpgsql keeps its plan for the
# session, where a SQL function's body is planned in every statement that calls it. Pure-ASCII
# text (octet length = character length) returns at once.
CREATE_GRAMS_FUNCTION: Final = f"""
CREATE OR REPLACE FUNCTION {names.PG_GRAMS_FUNCTION}(t text) RETURNS text[]
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
PENDING_LIST_KB: Final = 256
"""Each search index's GIN pending list (revision 0041): a search reads all of it."""
_GIN_OPTIONS: Final = f"WITH (gin_pending_list_limit = {PENDING_LIST_KB})"
HEAD_DDL: Final = (
    "CREATE EXTENSION IF NOT EXISTS pg_trgm",
    f"ALTER TABLE messages ADD COLUMN IF NOT EXISTS {names.PG_TSV_COLUMN} tsvector "
    f"GENERATED ALWAYS AS ({TSV_EXPRESSION}) STORED",
    f"CREATE INDEX IF NOT EXISTS {names.PG_TSV_COLUMN_INDEX} ON messages "
    f"USING gin ({names.PG_TSV_COLUMN}) {_GIN_OPTIONS}",
    f"CREATE INDEX IF NOT EXISTS {names.PG_TRGM_INDEX} ON messages "
    f"USING gin ({indexed_text()} gin_trgm_ops) {_GIN_OPTIONS}",
    CREATE_GRAMS_FUNCTION,
    f"CREATE INDEX IF NOT EXISTS {names.PG_BIGRAM_INDEX} ON messages "
    f"USING gin ({grams_of(indexed_text())}) {_GIN_OPTIONS}",
)
HEAD_INDEXES: Final = (names.PG_TSV_COLUMN_INDEX, names.PG_TRGM_INDEX, names.PG_BIGRAM_INDEX)
