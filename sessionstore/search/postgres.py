"""Search on PostgreSQL: tsvector/GIN for words, the pg_trgm GIN index for substrings.

Word search uses the stored ``content_tsv`` column of revision 0008 and its GIN index (the
tsvector is computed once per write, not per match as with 0001's expression index). Hits
are ranked by ``ts_rank`` and shown with ``ts_headline``, shaped like SQLite's ``snippet()``:
``>>>``/``<<<`` markers, a window of about 40 words around the best match, and ``...`` where
text was cut off (added here, as ``ts_headline`` has no such option).

Substring search (CJK) is ``ILIKE '%needle%'`` over the indexed text (from revision 0014
content, tool name and tool calls, as Hermes v11 indexes them), which the ``pg_trgm`` GIN index
``ix_messages_indexed_text_trgm`` (before 0014: ``ix_messages_content_trgm`` over ``content``)
serves for needles of three or more characters.

PostgreSQL cannot take a NUL character in a text parameter: every value bound here has none
(the sanitizer and the service remove them).
"""

from __future__ import annotations

import importlib
from typing import Final

from sqlalchemy.engine import Connection

from .hits import (
    SNIPPET_ELLIPSIS,
    SNIPPET_END,
    SNIPPET_START,
    SUBSTRING_SNIPPET_SIDE_CHARS,
    MatchRow,
    match_row,
    substring_match_rows,
)
from .request import Page, SearchFilters, filtered_statement
from .sanitize import escape_like, to_postgres_tsquery

LIKE_ESCAPE: Final = "\\"
# Only what the index covers can match: headlines read no further (PG_TSV_EXPRESSION cuts
# content to the same length).
INDEXED_CHARS: Final = 200_000
HEADLINE_OPTIONS: Final = (
    f"StartSel={SNIPPET_START}, StopSel={SNIPPET_END}, MaxWords=40, MinWords=15, ShortWord=0, "
    f"MaxFragments=1, FragmentDelimiter={SNIPPET_ELLIPSIS}"
)

_TSQUERY: Final = "to_tsquery('simple', :tsquery)"


_TSV_SOURCE_KEY: Final = "sessionstore.tsvector_source"


def indexed_tsvector_expression(conn: Connection) -> str:
    """What to match words against: revision 0008's stored column, else 0001's expression.

    Both are GIN-indexed; the expression text must be the migrations' verbatim for the planner
    to use its index. Which one this database has is looked up once per DBAPI connection. The
    migrations ship as a package-data directory mypy cannot see, hence the dynamic import.
    """
    info = conn.connection.info
    cached = info.get(_TSV_SOURCE_KEY)
    if cached is not None:
        return str(cached)
    search_ddl = importlib.import_module("sessionstore._migrations.search_ddl")
    has_column = conn.exec_driver_sql(
        "SELECT 1 FROM information_schema.columns "
        "WHERE table_name = 'messages' AND column_name = %(column)s",
        {"column": search_ddl.PG_TSV_COLUMN},
    ).first()
    source = f"m.{search_ddl.PG_TSV_COLUMN}" if has_column else str(search_ddl.PG_TSV_EXPRESSION)
    info[_TSV_SOURCE_KEY] = source
    return source


_SUBSTRING_SOURCE_KEY: Final = "sessionstore.substring_source"


def indexed_substring_text(conn: Connection) -> str:
    """The text substring search looks in and headlines are cut from: from revision 0014
    (Hermes v11) content, tool name and tool calls (the trigram index is over exactly that
    expression); before, content. Looked up once per DBAPI connection."""
    info = conn.connection.info
    cached = info.get(_SUBSTRING_SOURCE_KEY)
    if cached is not None:
        return str(cached)
    search_ddl = importlib.import_module("sessionstore._migrations.search_ddl")
    has_index = conn.exec_driver_sql(
        "SELECT 1 FROM pg_indexes WHERE tablename = 'messages' AND indexname = %(name)s",
        {"name": search_ddl.PG_LATER_TRGM_INDEX},
    ).first()
    source = str(search_ddl.pg_indexed_text("m")) if has_index else "m.content"
    info[_SUBSTRING_SOURCE_KEY] = source
    return source


# The page is chosen from (id, score) alone; full rows, and the expensive headlines, are
# fetched for the page only. The headline's own text, markers removed, is looked up in the
# message to decide whether words were cut off before or after it. The text is the indexed
# one (content, tool name, tool calls from revision 0014), as SQLite's snippet() shows it.
_WORD_SEARCH: Final = f"""
SELECT m.id, m.session_id, m.role,
       CASE WHEN fragment.start > 1 AND left(doc.text, fragment.start - 1) ~ '[[:alnum:]]'
            THEN :ellipsis ELSE '' END
       || headline.text
       || CASE WHEN fragment.start > 0
                    AND substr(doc.text, fragment.start + length(plain.text)) ~ '[[:alnum:]]'
               THEN :ellipsis ELSE '' END,
       m.timestamp, m.tool_name, s.source, s.model, s.started_at
FROM (
    SELECT m.id, ts_rank({{tsvector}}, {_TSQUERY}) AS score
    FROM messages AS m
    JOIN sessions AS s ON s.id = m.session_id
    WHERE {{tsvector}} @@ {_TSQUERY} {{filters}}
    ORDER BY {{order}}
    LIMIT :limit OFFSET :offset
) AS page
JOIN messages AS m ON m.id = page.id
JOIN sessions AS s ON s.id = m.session_id
CROSS JOIN LATERAL (SELECT {{document}} AS text) AS doc
CROSS JOIN LATERAL (
    SELECT ts_headline('simple', left(doc.text, {INDEXED_CHARS}), {_TSQUERY},
                       :headline_options) AS text
) AS headline
CROSS JOIN LATERAL (
    SELECT replace(replace(headline.text, :mark_start, ''), :mark_end, '') AS text
) AS plain
CROSS JOIN LATERAL (SELECT strpos(doc.text, plain.text) AS start) AS fragment
ORDER BY {{page_order}}
"""

_ANY_WORD_MATCH: Final = f"""
SELECT 1
FROM messages AS m
JOIN sessions AS s ON s.id = m.session_id
WHERE {{tsvector}} @@ {_TSQUERY} {{filters}}
LIMIT 1
"""

# ILIKE lower-cases both sides, so strpos() over lower() finds the occurrence it matched.
_SIDE = SUBSTRING_SNIPPET_SIDE_CHARS
_SUBSTRING_SEARCH: Final = f"""
SELECT m.id, m.session_id, m.role, m.timestamp, m.tool_name, s.source, s.model, s.started_at,
       hit.start AS hit_start,
       CASE WHEN hit.start > 0 THEN substr(m.content, greatest(1, hit.start - {_SIDE}),
                                           hit.start - greatest(1, hit.start - {_SIDE}))
       END AS text_before,
       CASE WHEN hit.start > 0 THEN substr(m.content, hit.start, length(:needle))
       END AS hit_text,
       CASE WHEN hit.start > 0
            THEN substr(m.content, hit.start + length(:needle), {_SIDE + 1})
            ELSE substr(m.content, 1, {2 * _SIDE + 1})
       END AS text_after
FROM (
    SELECT m.id
    FROM messages AS m
    JOIN sessions AS s ON s.id = m.session_id
    WHERE {{substring_text}} ILIKE :pattern ESCAPE '{LIKE_ESCAPE}' {{filters}}
    ORDER BY {{order}}
    LIMIT :limit OFFSET :offset
) AS page
JOIN messages AS m ON m.id = page.id
JOIN sessions AS s ON s.id = m.session_id
CROSS JOIN LATERAL (SELECT strpos(lower(m.content), lower(:needle)) AS start) AS hit
ORDER BY {{order}}
"""


class PostgreSQLSearch:
    """The PostgreSQL search backend (see the module docstring)."""

    def word_matches(
        self, conn: Connection, query: str, filters: SearchFilters, page: Page
    ) -> list[MatchRow]:
        tsquery = to_postgres_tsquery(query)
        if tsquery is None:
            return []
        params = {
            "tsquery": tsquery,
            "headline_options": HEADLINE_OPTIONS,
            "mark_start": SNIPPET_START,
            "mark_end": SNIPPET_END,
            "ellipsis": SNIPPET_ELLIPSIS,
            **page.params,
        }
        statement = filtered_statement(
            _WORD_SEARCH,
            filters,
            conn,
            tsvector=indexed_tsvector_expression(conn),
            order=filters.order("score DESC, m.id"),
            page_order=filters.order("page.score DESC, page.id"),
            # The headline is cut from the text the words were indexed from.
            document=indexed_substring_text(conn),
        )
        rows = conn.execute(statement, params)
        return [match_row(*row) for row in rows]

    def has_word_match(self, conn: Connection, query: str, filters: SearchFilters) -> bool:
        tsquery = to_postgres_tsquery(query)
        if tsquery is None:
            return False
        statement = filtered_statement(
            _ANY_WORD_MATCH, filters, conn, tsvector=indexed_tsvector_expression(conn)
        )
        return conn.execute(statement, {"tsquery": tsquery}).first() is not None

    def substring_matches(
        self, conn: Connection, needle: str, filters: SearchFilters, page: Page
    ) -> list[MatchRow]:
        params = {
            "needle": needle,
            "pattern": "%" + escape_like(needle, LIKE_ESCAPE) + "%",
            **page.params,
        }
        return substring_match_rows(
            conn.execute(
                filtered_statement(
                    _SUBSTRING_SEARCH,
                    filters,
                    conn,
                    order=filters.time_order(),
                    substring_text=indexed_substring_text(conn),
                ),
                params,
            )
        )
