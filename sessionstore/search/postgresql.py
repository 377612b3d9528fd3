"""PostgreSQL's search index: tsvector/GIN for words, a CJK bigram GIN index for substrings.

Word search uses the stored ``content_tsv`` column (revision 0008; over content, tool name and
tool calls from 0014) and its GIN index. Hits are ranked by ``ts_rank`` and shown with
``ts_headline``, shaped like SQLite's ``snippet()``: ``>>>``/``<<<`` markers, a window of about
40 words around the best match, and ``...`` where text was cut off (added here, as
``ts_headline`` has no such option).

Substring search (queries holding CJK, :mod:`sessionstore.search.terms`): every term is
verified with ``ILIKE`` over the indexed text. The candidates come from the GIN expression
index ``ix_messages_cjk_bigrams`` (revision 0021) over ``sessionstore_cjk_grams(lower(text))``,
an array of the text's CJK characters and CJK-led bigrams: a row can hold a needle only if its
array contains the needle's, whatever the needle's length (``pg_trgm`` cannot look up needles
of one or two characters; its index ``ix_messages_indexed_text_trgm`` still serves a query
whose alternative names no CJK term, and stores below 0021). The lookup is fenced in a
``MATERIALIZED`` CTE (see ``_SUBSTRING_LOOKUP``), so every plan, generic or custom, with or
without statistics, reads the candidates from that index and verifies only them.

PostgreSQL cannot take a NUL character in a text parameter: every value bound here has none
(the sanitizer and the term parser remove them).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final, NamedTuple, cast

from sqlalchemy.engine import Connection

from ..dialects.postgresql import extension_schema, qualify_extension_objects
from . import object_names as names
from . import request as search_request
from .context import CONTEXT_COLUMNS, CONTEXT_JOINS, hit_dicts
from .deferred_rebuild import BackfillTarget
from .hits import (
    SNIPPET_ELLIPSIS,
    SNIPPET_END,
    SNIPPET_START,
    FoundRow,
    match_row,
    substring_snippet,
    substring_snippet_sql,
    substring_snippet_text_sql,
)
from .index import DamageSeen, IndexHealth, optimize_each
from .long_text_snippets import highlight_query
from .postgresql_ddl import HEAD_DDL, HEAD_INDEXES, INDEXED_CHARS, grams_of, indexed_text
from .request import Page, SearchFilters, filtered_rows, ranks_in_window
from .sanitize import contains_cjk, escape_like, to_postgres_tsquery
from .terms import SubstringQuery

LIKE_ESCAPE: Final = "\\"
HEADLINE_OPTIONS: Final = (
    f"StartSel={SNIPPET_START}, StopSel={SNIPPET_END}, MaxWords=40, MinWords=15, ShortWord=0, "
    f"MaxFragments=1, FragmentDelimiter={SNIPPET_ELLIPSIS}"
)
HEADLINE_WHOLE_OPTIONS: Final = (
    f"StartSel={SNIPPET_START}, StopSel={SNIPPET_END}, MaxWords=40, MinWords=15, ShortWord=0"
)
"""For a message of at most 40 words, which the window holds whole: ts_headline's fragment
mode leaves out a number that ends the message ("answer 0" came back as ">>>answer<<<",
then "..."), its plain mode keeps every word."""
SHORT_MESSAGE_WORDS: Final = 40
_TSQUERY: Final = "to_tsquery('simple', :tsquery)"
_HEADLINE_TSQUERY: Final = "to_tsquery('simple', :headline_tsquery)"
"""The query's different terms for ts_headline (long_text_snippets.highlight_query)."""
# Parsed once per statement (an InitPlan): in a prepared statement's generic plan the bare
# call is not folded into a constant and ran for every matching row, in the recheck and in
# ts_rank (44 ms against 32 for a word in 8% of 100,000 messages).
_TSQUERY_ONCE: Final = f"(SELECT {_TSQUERY})"

# Best match first ranks the newest RANK_WINDOW matches (request.ranks_in_window), as on
# SQLite: ts_rank reads every row it scores, which made a common word cost time linear in the
# store. The window (`recent`, a MATERIALIZED CTE, computed once) is the newest matches' ids,
# found one of two ways, and only those rows are scored (ts_rank, about 1 us a row):
# - from the GIN index: every match's id is read (about 0.7 us a match when the table is in
#   memory, several when not), the newest kept by a top-N sort of ids alone (carrying each
#   match's tsvector through the sort cost more than fetching the window's rows again, by
#   their ctid: a TID scan, one buffer a row against three for the primary key; the whole
#   statement reads one snapshot, in which a row stays where it was found). "m.id + 0"
#   keeps the planner from walking the primary key instead: its default costs made the walk
#   look about four times cheaper than it measured, and at 100k messages it walked 57,000
#   rows for a word in 7% of them (26 ms against 5 from the index);
# - by walking the primary key back from the newest row, testing each row's tsvector: about
#   RANK_WINDOW / (the words' frequency) rows, whatever the store's size. Chosen when that is
#   cheaper: the words' frequency among the newest _PROBE_ROWS rows (`probe`, about 0.5 ms;
#   only on stores of _WALK_MIN_ROWS rows or more, by the planner's own row count), the walk's
#   rows against the index's matches at _WALK_COST_RATIO. A word in 8% of 1M messages: 7-30 ms
#   walked, 200-400 ms from the index. The walk stops after _WALK_SLACK times the rows the
#   probe predicts (a word common lately and rare before); the index then answers.
# When the filters (or an offset) leave fewer of the window's matches than the page asks
# for, every match is ranked, as SQLite does: the last branch runs only then. A branch that is
# not to run gets LIMIT 0, which ends it before it reads a row (a one-time filter in its WHERE
# did not: the planner sent it into a parallel plan whose two workers were started, 4.5 ms,
# only to find the filter false).
_PROBE_ROWS: Final = 2000
_WALK_MIN_ROWS: Final = 250_000
_WALK_COST_RATIO: Final = 0.65
"""A row walked against a match read from the index (0.45 against 0.7 us, 100k messages)."""
_WALK_SLACK: Final = 4
# The planner's row count of this store's own table (the search_path's), not a count.
_ROW_COUNT: Final = (
    "(SELECT greatest(c.reltuples, 0) FROM pg_class AS c WHERE c.oid = 'messages'::regclass)"
)
_WINDOWED_PAGE: Final = f"""
    WITH probe AS MATERIALIZED (
        SELECT count(*)::float8 AS hits
        FROM (SELECT {{tsvector}} AS tsv FROM messages AS m ORDER BY m.id DESC
              LIMIT CASE WHEN {_ROW_COUNT} >= {{walk_min_rows}} THEN {_PROBE_ROWS} ELSE 0 END
        ) AS newest
        WHERE newest.tsv @@ {_TSQUERY_ONCE}
    ), walk AS MATERIALIZED (
        SELECT newest.id, newest.tid
        FROM (SELECT m.id, m.ctid AS tid, {{tsvector}} AS tsv FROM messages AS m ORDER BY m.id DESC
              LIMIT (SELECT CASE WHEN hits * hits * {_ROW_COUNT}
                                      > {{walk_cost_ratio}} * {{window}} * {_PROBE_ROWS ** 2}
                                 THEN ceil({_WALK_SLACK} * {{window}} * {_PROBE_ROWS} / hits)
                                 ELSE 0 END
                     FROM probe)::bigint
        ) AS newest
        WHERE newest.tsv @@ {_TSQUERY_ONCE}
        LIMIT {{window}}
    ), recent AS MATERIALIZED (
        SELECT id, tid FROM walk WHERE (SELECT count(*) FROM walk) >= {{window}}
        UNION ALL
        (SELECT m.id, m.ctid
         FROM messages AS m
         WHERE {{tsvector}} @@ {_TSQUERY_ONCE}
         ORDER BY m.id + 0 DESC
         LIMIT CASE WHEN (SELECT count(*) FROM walk) < {{window}} THEN {{window}} ELSE 0 END)
    ), windowed AS MATERIALIZED (
        SELECT m.id, ts_rank({{tsvector}}, {_TSQUERY_ONCE}) AS score
        FROM recent
        JOIN messages AS m ON m.ctid = recent.tid
        {{sessions}}
        WHERE TRUE {{filters}}
        ORDER BY score DESC, m.id
        LIMIT :limit OFFSET :offset
    )
    SELECT id, score FROM windowed WHERE (SELECT count(*) FROM windowed) >= :limit
    UNION ALL
    (SELECT m.id, ts_rank({{tsvector}}, {_TSQUERY_ONCE}) AS score
     FROM messages AS m
     {{sessions}}
     WHERE {{tsvector}} @@ {_TSQUERY_ONCE} {{filters}}
     ORDER BY score DESC, m.id
     LIMIT CASE WHEN (SELECT count(*) FROM windowed) < :limit THEN :limit ELSE 0 END
     OFFSET :offset)
"""
# Every match ranked: a time order, or a page reaching past half the window.
_RANKED_PAGE: Final = f"""
    SELECT m.id, ts_rank({{tsvector}}, {_TSQUERY_ONCE}) AS score
    FROM messages AS m
    {{sessions}}
    WHERE {{tsvector}} @@ {_TSQUERY_ONCE} {{filters}}
    ORDER BY {{order}}
    LIMIT :limit OFFSET :offset
"""

# The page is chosen from (id, score) alone; full rows, and the expensive headlines, are
# fetched for the page only. The headline's own text, markers removed, is looked up in the
# message to decide whether words were cut off before or after it.
_WORD_SEARCH: Final = f"""
SELECT m.id, m.session_id, m.role,
       CASE WHEN fragment.start > 1 AND left(doc.text, fragment.start - 1) ~ '[[:alnum:]]'
            THEN :ellipsis ELSE '' END
       || headline.text
       || CASE WHEN fragment.start > 0
                    AND substr(doc.text, fragment.start + length(plain.text)) ~ '[[:alnum:]]'
               THEN :ellipsis ELSE '' END,
       m.timestamp, m.tool_name, s.source, s.model, s.started_at,
       {CONTEXT_COLUMNS}
FROM ({{page}}) AS page
JOIN messages AS m ON m.id = page.id
JOIN sessions AS s ON s.id = m.session_id
CROSS JOIN LATERAL (SELECT {{document}} AS text OFFSET 0) AS doc
CROSS JOIN LATERAL (
    -- btrim: the indexed text ends in the blanks of NULL columns, which the whole-message
    -- headline would keep.
    SELECT btrim(ts_headline('simple', left(doc.text, {INDEXED_CHARS}), {_HEADLINE_TSQUERY},
                       CASE WHEN coalesce(array_length(regexp_split_to_array(
                                     btrim(left(doc.text, {INDEXED_CHARS})), '\\s+'), 1), 0)
                                 <= :short_words
                            THEN :headline_whole ELSE :headline_options END)) AS text
    OFFSET 0
) AS headline
CROSS JOIN LATERAL (
    SELECT replace(replace(headline.text, :mark_start, ''), :mark_end, '') AS text OFFSET 0
) AS plain
CROSS JOIN LATERAL (SELECT strpos(doc.text, plain.text) AS start OFFSET 0) AS fragment
{CONTEXT_JOINS}
ORDER BY {{page_order}}
"""

# ILIKE lower-cases both sides, so strpos() over lower() finds the occurrence it matched.
# The needle is a column of a fenced one-row subquery (``needle``), not the parameter itself:
# a custom plan folds every ``lower(<parameter>)`` into a constant while planning, two dozen
# of them here (0.08 server CPU s each for a needle of 10 MB); a column is lower-cased only for
# the page's rows.
_SNIPPET_TEXT: Final = substring_snippet_text_sql("strpos", "needle.text")
_SUBSTRING_PAGE: Final = f"""
SELECT m.id, m.session_id, m.role, m.timestamp, m.tool_name, s.source, s.model, s.started_at,
       hit.start AS hit_start,
       {substring_snippet_sql(_SNIPPET_TEXT, "hit.start", "needle.text", "greatest")},
       {CONTEXT_COLUMNS}
FROM ({{page}}) AS page
CROSS JOIN (SELECT CAST(:needle AS text) AS text OFFSET 0) AS needle
JOIN messages AS m ON m.id = page.id
JOIN sessions AS s ON s.id = m.session_id
CROSS JOIN LATERAL (
    SELECT coalesce(strpos(lower({_SNIPPET_TEXT}), lower(needle.text)), 0) AS start
) AS hit
{CONTEXT_JOINS}
ORDER BY {{order}}
"""
# No alternative can be looked up in the bigram index: the terms are verified row by row, and
# the planner may walk the time index and stop at the page's end.
_SUBSTRING_SCAN: Final = _SUBSTRING_PAGE.replace("{page}", """
    SELECT m.id
    FROM messages AS m
    {sessions}
    WHERE ({verify}) {filters}
    ORDER BY {order}
    LIMIT :limit OFFSET :offset
""")
# The candidates are exactly the rows the bigram index names, whatever the planner estimates.
# Left to itself it does not do that: with a generic plan (psycopg prepares a statement on its
# fifth run, and the server then plans for unknown parameters) or with statistics that make a
# term look common, it walked the time or per-session index, ran the gram function row by row,
# or AND-ed in a pg_trgm scan of the ILIKE, which for a needle of one or two characters reads
# the whole trigram index (about 100 ms at 20,000 messages, against 2-4 ms from the bigrams).
# So the lookup is alone in a MATERIALIZED CTE (a fence the planner does not push quals into
# or pull quals out of), and the ILIKE is computed there as a column, not a condition: it is
# only evaluated for candidates and can never become an index scan of its own. The filters,
# the order and the page then apply to the verified candidates.
_SUBSTRING_LOOKUP: Final = """WITH candidate AS MATERIALIZED (
    SELECT m.id, m.session_id, m.role, m.timestamp, m.active, m.compacted{shown},
           ({verify}) AS verified
    FROM messages AS m
    WHERE {lookup}
)""" + _SUBSTRING_PAGE.replace("{page}", """
    SELECT m.id
    FROM candidate AS m
    {sessions}
    WHERE m.verified {filters}
    ORDER BY {order}
    LIMIT :limit OFFSET :offset
""")

_LAYOUT_KEY: Final = "sessionstore.search_layout"


class _Layout(NamedTuple):
    tsvector: str
    """The tsvector source: revision 0008's stored column or 0001's expression."""
    substring_text: str
    """The text substrings are matched in: 0014's text over three columns, or ``content``."""
    has_bigrams: bool
    """Whether 0021's bigram index is there."""
    sessions_join: str
    """What joins ``sessions`` to the matches when no source filter needs it: nothing where a
    validated foreign key on the non-null ``messages.session_id`` (revision 0001's) says every
    message has its session, the inner join otherwise (which leaves out an orphan)."""


def _layout(conn: Connection) -> _Layout:
    """This database's :class:`_Layout`, looked up once per DBAPI connection."""
    info = conn.connection.info
    cached = info.get(_LAYOUT_KEY)
    if cached is not None:
        return cast(_Layout, cached)
    has_column, indexes, sessions_guaranteed = _column_and_indexes(conn)
    tsvector = (
        f"m.{names.PG_TSV_COLUMN}"
        if has_column
        else "to_tsvector('simple'::regconfig, left(coalesce(content, ''), 200000))"
    )
    substring_text = indexed_text("m") if names.PG_TRGM_INDEX in indexes else "m.content"
    layout = _Layout(
        tsvector, substring_text, names.PG_BIGRAM_INDEX in indexes,
        "" if sessions_guaranteed else _SESSIONS_JOIN,
    )  # fmt: skip
    info[_LAYOUT_KEY] = layout
    return layout


_SESSIONS_JOIN: Final = "JOIN sessions AS s ON s.id = m.session_id"


def _sessions_join(layout: _Layout, filters: SearchFilters) -> str:
    """``sessions`` joined to the matches for a source filter, or where the store does not
    guarantee every message its session; not otherwise (a probe per match, for nothing)."""
    if filters.by_session:
        return _SESSIONS_JOIN
    return layout.sessions_join


_CASELESS: Final = re.compile(
    "[\u1100-\u11ff\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\ua960-\ua97f"
    "\uac00-\ud7af\uf900-\ufaff\U00020000-\U0003ffff]+"
)
"""Scripts without case (Han, kana, Hangul): no character lower-cases into them nor out of
them, so a term made of them is found by ``LIKE`` exactly where ``ILIKE`` finds it, without
``ILIKE``'s ``lower()`` of every candidate's whole text (about 10 times the match)."""


def _index_answers(term: str) -> bool:
    """Whether the bigram index holds ``term`` itself as a key (lower-cased): one CJK
    character, or two led by a CJK character. Its rows then hold the term, as ``ILIKE``
    (which compares ``lower()`` of both sides) finds it, with nothing left to verify."""
    return len(term) <= 2 and contains_cjk(term[0])


TERM_KEY_CHARS: Final = 1_000
"""How much of a long term the bigram lookup takes its keys from (see :func:`_term_keys`)."""


def _term_keys(param: str, term: str) -> str:
    """The keys a term's rows must all hold in the bigram index: its grams, or for a term
    longer than :data:`TERM_KEY_CHARS` those of its (lower-cased) start.

    A prefix's grams are some of the whole term's (a pair inside the prefix is a pair of the
    term; its last character, paired with the end, is a unigram the term holds too), so the
    index names every row holding the term, and the row's ``LIKE``/``ILIKE`` (computed for
    each candidate) decides as before: the same rows. Lower-cased before the cut, as the
    whole term is (a case mapping can depend on the next character). What it saves: the
    function runs over the term where a custom plan folds it, once or more per statement,
    ~4 server CPU s for 10 MB of CJK; a thousand characters cost about a millisecond.
    """
    if len(term) <= TERM_KEY_CHARS:
        return grams_of(param)
    return f"{names.PG_GRAMS_FUNCTION}(left(lower({param}), {TERM_KEY_CHARS}))"


_COLUMN_AND_INDEXES: Final = """
SELECT EXISTS (
           SELECT 1 FROM pg_catalog.pg_attribute AS a
           WHERE a.attrelid = c.oid AND a.attname = %(column)s
             AND a.attnum > 0 AND NOT a.attisdropped
       ),
       ARRAY(
           SELECT i.relname FROM pg_catalog.pg_index AS x
           JOIN pg_catalog.pg_class AS i ON i.oid = x.indexrelid
           WHERE x.indrelid = c.oid
       ),
       EXISTS (
           SELECT 1 FROM pg_catalog.pg_constraint AS k
           JOIN pg_catalog.pg_class AS r ON r.oid = k.confrelid
           JOIN pg_catalog.pg_attribute AS a ON a.attrelid = c.oid AND a.attname = 'session_id'
           WHERE k.conrelid = c.oid AND k.contype = 'f' AND k.convalidated
             AND r.relname = 'sessions' AND r.relnamespace = c.relnamespace
             AND k.conkey = ARRAY[a.attnum] AND a.attnotnull
       )
FROM pg_catalog.pg_class AS c
JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = current_schema() AND c.relname = 'messages' AND c.relkind IN ('r', 'p')
"""


def _column_and_indexes(conn: Connection) -> tuple[bool, set[str], bool]:
    """Whether ``messages`` has the stored tsvector column, its index names, and whether its
    foreign key guarantees every message's session, in one ``pg_catalog`` query
    (``information_schema.columns`` and ``pg_indexes`` are views over many catalogs: two
    queries of 2-7 ms each on a store's first search). This store's own table: another
    tenant's schema in the same database has the same names."""
    row = conn.exec_driver_sql(_COLUMN_AND_INDEXES, {"column": names.PG_TSV_COLUMN}).first()
    if row is None:
        return False, set(), False
    return bool(row[0]), {str(name) for name in row[1]}, bool(row[2])


def _indexes(conn: Connection) -> set[str]:
    return _column_and_indexes(conn)[1]


class PostgreSQLSearchIndex:
    """The PostgreSQL search index (see the module docstring)."""

    check_writes = False

    def damage_in(self, exc: BaseException) -> DamageSeen | None:
        return None  # its indexes are the server's, repaired by REINDEX, never mid-write

    def reindex_rows_read_at_nul(
        self, conn: Connection, session_ids: Sequence[str] | None = None
    ) -> int:
        return 0  # no text holds a NUL here, and one server tokenizes every row

    def word_matches(
        self, conn: Connection, query: str, filters: SearchFilters, page: Page
    ) -> list[FoundRow]:
        tsquery = to_postgres_tsquery(query)
        if tsquery is None:
            return []
        layout = _layout(conn)
        params = {
            "tsquery": tsquery,
            "headline_tsquery": to_postgres_tsquery(highlight_query(query)) or tsquery,
            "headline_options": HEADLINE_OPTIONS,
            "headline_whole": HEADLINE_WHOLE_OPTIONS,
            "short_words": SHORT_MESSAGE_WORDS,
            "mark_start": SNIPPET_START,
            "mark_end": SNIPPET_END,
            "ellipsis": SNIPPET_ELLIPSIS,
            **page.params,
        }
        windowed = ranks_in_window(filters, page)
        rows = filtered_rows(
            conn,
            _WORD_SEARCH.replace("{page}", _WINDOWED_PAGE if windowed else _RANKED_PAGE),
            filters,
            params,
            tsvector=layout.tsvector,
            sessions=_sessions_join(layout, filters),
            window=str(int(search_request.RANK_WINDOW)),
            # Read at each call, as the window is (tests change them).
            walk_min_rows=str(int(_WALK_MIN_ROWS)),
            walk_cost_ratio=repr(float(_WALK_COST_RATIO)),
            order=filters.order("score DESC, m.id"),
            page_order=filters.order("page.score DESC, page.id"),
            # The headline is cut from the text the words were indexed from.
            document=layout.substring_text,
        )
        return [
            match_row(row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7], row[8],
                      tuple(row[9:]))  # the context's columns (context.ContextColumns)
            for row in rows
        ]

    def substring_matches(
        self, conn: Connection, query: SubstringQuery, filters: SearchFilters, page: Page
    ) -> list[FoundRow]:
        layout = _layout(conn)
        substring_text = layout.substring_text
        indexed = layout.has_bigrams and query.indexable
        params: dict[str, Any] = {"needle": query.snippet_term, **page.params}
        alternatives, lookups = [], []
        for group in query.groups:
            clauses, wanted = [], []
            for term in group:
                name = f"term{len(params)}"
                if term.has_cjk and not term.excluded:
                    params[f"{name}_text"] = term.text
                    if indexed and len(query.groups) == 1 and _index_answers(term.text):
                        # The term is the very key the index holds: the rows the lookup
                        # names hold it, and no ILIKE runs for it (one alternative only:
                        # with several, a row another one named must still be checked).
                        wanted.append(f"ARRAY[lower(:{name}_text)]")
                        continue
                    wanted.append(_term_keys(f":{name}_text", term.text))
                params[name] = "%" + escape_like(term.text, LIKE_ESCAPE) + "%"
                like = "LIKE" if _CASELESS.fullmatch(term.text) else "ILIKE"
                found = f"{substring_text} {like} :{name} ESCAPE '{LIKE_ESCAPE}'"
                clauses.append(f"NOT ({found})" if term.excluded else found)
            alternatives.append("(" + (" AND ".join(clauses) or "TRUE") + ")")
            # The needle's keys in an InitPlan: a custom plan folding them into a constant
            # estimated the lookup far cheaper than a generic plan could, so a prepared
            # statement was planned again at every run (1-2 ms) and never kept its plan.
            lookups.append(f"{grams_of(substring_text)} @> (SELECT {' || '.join(wanted)})")
        rows = filtered_rows(
            conn,
            _SUBSTRING_LOOKUP if indexed else _SUBSTRING_SCAN,
            filters,
            params,
            sessions=_sessions_join(layout, filters),
            lookup=" OR ".join(lookups),
            verify=" OR ".join(alternatives),
            order=filters.time_order(),
            shown=", m.display_kind" if filters.shown_only else "",  # what the filters read
        )
        return [
            match_row(
                row[0], row[1], row[2], substring_snippet(row[8], row[9], row[10], row[11]),
                row[3], row[4], row[5], row[6], row[7], tuple(row[12:]),
            )
            for row in rows
        ]

    def substring_hit_dicts(
        self, conn: Connection, query: SubstringQuery, filters: SearchFilters, page: Page
    ) -> list[dict[str, Any]]:
        return hit_dicts(self.substring_matches(conn, query, filters, page))  # context read

    # -- lifecycle --------------------------------------------------------------------------
    def missing(self, conn: Connection) -> list[str]:
        present = _indexes(conn)
        return [name for name in HEAD_INDEXES if name not in present]

    def create(self, conn: Connection) -> None:
        for statement in HEAD_DDL:
            # pg_trgm lives where the database has it (public, usually), which a tenant's
            # search_path need not name: its operator class is named by that schema.
            trigram_schema = extension_schema(conn) if "gin_trgm_ops" in statement else None
            conn.exec_driver_sql(qualify_extension_objects(statement, trigram_schema))
        conn.connection.info.pop(_LAYOUT_KEY, None)

    def rebuild(self, conn: Connection) -> None:
        self.create(conn)
        for index in HEAD_INDEXES:
            conn.exec_driver_sql(f"REINDEX INDEX {index}")

    def check_read_only(self, conn: Connection) -> IndexHealth:
        return self.check(conn)  # reads only

    def check(self, conn: Connection) -> IndexHealth:
        rows = conn.exec_driver_sql(
            "SELECT c.relname, i.indisvalid FROM pg_index i "
            "JOIN pg_class c ON c.oid = i.indexrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND c.relname = ANY(%(names)s)",
            {"names": list(HEAD_INDEXES)},
        )
        found = {str(row[0]): bool(row[1]) for row in rows}
        return IndexHealth(
            missing=[name for name in HEAD_INDEXES if name not in found],
            out_of_step=None,  # expression indexes cover every row by construction
            broken=[name for name, valid in found.items() if not valid],
        )

    def sessions_changed(self, conn: Connection, session_ids: list[str]) -> None:
        """Nothing: PostgreSQL's indexes are over every row (membership is not yet kept)."""

    def newest_layout_pending(self, conn: Connection) -> bool:
        return False  # one layout: the tsvector and bigram indexes of revision 0021

    def move_to_newest_layout(self, conn: Connection) -> bool:
        return False

    # No program rebuilds these indexes in chunks (Hermes's deferred rebuild is SQLite's FTS5):
    # nothing is ever pending, and an index is never left stale (docs/hermes.md).
    def backfill_status(self, conn: Connection, target: BackfillTarget) -> dict[str, Any] | None:
        return None

    def unindexed_word_matches(
        self, conn: Connection, query: str, match: str, filters: SearchFilters, page: Page
    ) -> list[FoundRow]:
        return []

    def backfill_pending(self, conn: Connection, target: BackfillTarget) -> bool:
        return False

    def backfill_step(self, conn: Connection, target: BackfillTarget, chunk_rows: int) -> bool:
        return False

    def needs_recovery(self, conn: Connection) -> bool:
        return False

    def recover_stale(self, conn: Connection) -> bool:
        return False

    def unloadable_triggers(self, conn: Connection) -> list[str]:
        return []  # no program adds an index of its own here

    def detach_unloadable(self, conn: Connection) -> bool:
        return False

    def optimize(self, conn: Connection) -> int:
        """Move GIN's pending entries (fast-update list) into the main index structure."""
        present = _indexes(conn)
        return optimize_each(conn, [
            (index, "SELECT gin_clean_pending_list(%(index)s::regclass)", {"index": index})
            for index in HEAD_INDEXES
            if index in present
        ])  # fmt: skip
