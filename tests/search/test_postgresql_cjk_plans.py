"""PostgreSQL answers every CJK query from the bigram index (issue 12), whatever the planner
knows: before and after ANALYZE, with a custom plan and with the generic plan a prepared
statement gets after a few runs (psycopg prepares a statement on its fifth execution; the
bench's 1-2 character queries then took 100 ms instead of 3: the generic plan AND-ed a pg_trgm
scan of the whole trigram index in). With filters, both time orders and an offset, the hits
are those of a plain LIKE scan.

The plans are read with ``EXPLAIN (FORMAT JSON)`` of the very statement the search sent; no
timing is asserted.

The corpora live in a database of this module's own, filled once and shared by the checks
that only read it (each opens a store of its own): a fill is the server's work on every index
of ``messages`` (the large one ~7 CPU s), and the run's shared database never holds, nor keeps
the dead rows of, 132,000 messages. The checks made before ``ANALYZE`` get a database that has
never been analyzed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import psycopg
import pytest
import sqlalchemy as sa
from psycopg import sql as psql

from sessionstore.api.session_db import SessionDB

pytestmark = pytest.mark.postgresql

BIGRAM_INDEX = "ix_messages_cjk_bigrams"
INDEXED_TEXT = (
    "(coalesce(m.content, '') || ' ' || coalesce(m.tool_name, '') || ' ' || "
    "coalesce(m.tool_calls, ''))"
)
# A corpus where each needle is in about 1-4% of the rows, the rest CJK or ASCII filler: the
# shape of the bench (and of a real store) where walking the time index and filtering row by
# row looks cheap to a planner that guesses.
FILL = """
INSERT INTO sessions (id, source, started_at)
SELECT 's' || g, (ARRAY['cli', 'telegram', 'discord'])[g % 3 + 1], g FROM generate_series(0, 39) g;
INSERT INTO messages (session_id, role, content, tool_name, tool_calls, timestamp)
SELECT 's' || (g % 40),
       (ARRAY['user', 'assistant', 'tool'])[g % 3 + 1],
       CASE WHEN g % 97 = 0 THEN '我们讨论了数据库迁移的方案 ' || g
            WHEN g % 61 = 0 THEN 'the index 検索 is fast ' || g
            WHEN g % 5 = 0 THEN '普通的内容和文字 ' || g
            ELSE 'filler text number ' || g END,
       CASE WHEN g % 89 = 0 THEN 'terminal' END,
       CASE WHEN g % 83 = 0 THEN '[{"function": {"arguments": "查询数据"}}]' END,
       g / 3
FROM generate_series(1, {rows}) g;
"""
ROWS = 12_000
# Issue 31 saw CJK queries filter row by row on a large store once the planner had statistics:
# ten times the rows, and the same needles ten times rarer (about 0.1-0.2% of the rows).
LARGE_ROWS = 120_000
QUERIES = ("库", "検", "数据", "検索", "数据库", "迁移的")
FILTERS: tuple[dict[str, Any], ...] = (
    {},
    {"source_filter": ["cli", "discord"]},
    {"exclude_sources": ["telegram"], "sort": "oldest"},
    {"role_filter": ["user", "tool"], "sort": "newest", "offset": 7},
    {"source_filter": ["cli"], "role_filter": ["assistant"], "sort": "oldest", "offset": 3},
)


def fill_statement(rows: int, rarity: int) -> str:
    """FILL's ``rows`` rows, each needle ``rarity`` times rarer."""
    fill = FILL.replace("{rows}", str(rows))
    if rarity > 1:
        for modulus in (97, 61, 89, 83):
            fill = fill.replace(f"g % {modulus} = 0", f"g % {modulus * rarity} = 0")
    return fill


def plain_url(url: str) -> str:
    return sa.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


class Match(NamedTuple):
    """A row the oracle found, with what the filters and the time order read."""

    id: int
    timestamp: float
    source: str
    role: str


def matching_rows(db: SessionDB, terms: tuple[str, ...]) -> list[Match]:
    """Every row a search may return that holds each term: a LIKE per term over every row."""
    clauses = ["(m.active = 1 OR m.compacted = 1)"]
    params: dict[str, Any] = {}
    for number, term in enumerate(terms):
        clauses.append(f"lower({INDEXED_TEXT}) LIKE :pattern{number}")
        params[f"pattern{number}"] = f"%{term.lower()}%"
    statement = sa.text(
        "SELECT m.id, m.timestamp, s.source, m.role FROM messages AS m "
        f"JOIN sessions AS s ON s.id = m.session_id WHERE {' AND '.join(clauses)}"
    )
    return db.store.read(lambda conn: [Match(*row) for row in conn.execute(statement, params)])


@dataclass
class Corpora:
    """This module's database and what it holds: the corpus loaded (``rows``, ``rarity``),
    whether it was ever analyzed (statistics outlive a refill: only a new database has none),
    the load the last ``ANALYZE`` saw, and the oracle's rows for each needle on this load
    (``like_scan``)."""

    pg_databases: Any
    template: str
    url: str = ""
    loaded: tuple[int, int] | None = None
    analyzed: bool = False
    analyzed_load: tuple[int, int] | None = None
    matches: dict[tuple[str, ...], list[Match]] = field(default_factory=dict)

    def store(self, rows: int, rarity: int, *, analyzed: bool) -> SessionDB:
        """A store of its own on the database holding FILL's ``rows`` rows (needles
        ``rarity`` times rarer), analyzed or never analyzed as asked."""
        if not self.url or (self.analyzed and not analyzed):
            # At head, never analyzed: a copy of the migrated template (no statistics).
            self.url = self.pg_databases.create(template=self.template)
            self.loaded, self.analyzed, self.analyzed_load = None, False, None
        if self.loaded != (rows, rarity):
            with psycopg.connect(plain_url(self.url), autocommit=True) as conn, conn.transaction():
                conn.execute("TRUNCATE messages, sessions RESTART IDENTITY CASCADE")
                conn.execute(fill_statement(rows, rarity).encode())
            self.loaded = (rows, rarity)
            self.matches.clear()
        # The documented ANALYZE once after each load: a second on rows it has already read
        # makes the same statistics (the small corpus is read whole), for the large corpus's
        # ANALYZE the grams of every sampled row again (~0.4 server CPU s).
        if analyzed and self.analyzed_load != self.loaded:
            with psycopg.connect(plain_url(self.url), autocommit=True) as conn:
                conn.execute("ANALYZE sessions, messages")
            self.analyzed, self.analyzed_load = True, self.loaded
        db = SessionDB(url=self.url)
        if not analyzed:
            assert not db.store.read(
                lambda conn: conn.exec_driver_sql(
                    "SELECT count(*) FROM pg_stats WHERE schemaname = current_schema()"
                    " AND tablename IN ('messages', 'sessions')"
                ).scalar()
            )
        return db

    def like_scan(self, db: SessionDB, *terms: str, **kwargs: Any) -> list[int]:
        """The oracle: the same request answered by a LIKE per term over every row of the
        loaded corpus. The scan runs once per needle and load (each is a sequential scan of
        every row, 0.08 server CPU s on the large corpus; the checks ask it for each of their
        filters and rounds): the filters, the time order and the page are applied here, to
        the rows it found."""
        found = self.matches.get(terms)
        if found is None:
            found = self.matches[terms] = matching_rows(db, terms)
        sources = kwargs.get("source_filter")
        excluded = kwargs.get("exclude_sources")
        roles = kwargs.get("role_filter")
        kept = [
            match for match in found
            if (sources is None or match.source in sources)
            and (excluded is None or match.source not in excluded)
            and (roles is None or match.role in roles)
        ]  # fmt: skip
        kept.sort(key=lambda match: (match.timestamp, match.id),
                  reverse=kwargs.get("sort") != "oldest")  # fmt: skip
        offset = kwargs.get("offset", 0)
        return [match.id for match in kept[offset : offset + 20]]


@pytest.fixture(scope="module")
def corpora(pg_databases: Any, migrated_pg_template: str) -> Corpora:
    return Corpora(pg_databases, migrated_pg_template)


@pytest.fixture
def db(corpora: Corpora) -> Iterator[SessionDB]:
    database = corpora.store(ROWS, 1, analyzed=False)
    yield database
    database.close()


@pytest.fixture
def analyzed_db(corpora: Corpora) -> Iterator[SessionDB]:
    """The corpus, its statistics made by the documented ``ANALYZE``."""
    database = corpora.store(ROWS, 1, analyzed=True)
    yield database
    database.close()


def search_statement(db: SessionDB, query: str, **kwargs: Any) -> tuple[list[int], str, Any]:
    """The hits' ids, and the statement (with its parameters) that found them."""
    sent: list[tuple[str, Any]] = []

    def record(_c: object, _cur: object, statement: str, parameters: Any, *_: object) -> None:
        sent.append((statement, parameters))

    sa.event.listen(db.store.engine, "before_cursor_execute", record)
    try:
        hits = db.search_messages(query, **kwargs)
    finally:
        sa.event.remove(db.store.engine, "before_cursor_execute", record)
    (found,) = [entry for entry in sent if "sessionstore_cjk_grams(" in entry[0]]
    return [hit["id"] for hit in hits], found[0], found[1]


class Planner:
    """EXPLAIN (FORMAT JSON) of a search's statement on one connection of its own (a new
    backend per plan was most of a check's time)."""

    def __init__(self) -> None:
        self.connections: dict[str, psycopg.Connection[Any]] = {}

    def plan(self, db: SessionDB, statement: str, parameters: dict[str, Any], *,
             generic: bool) -> Any:  # fmt: skip
        """As planned for its parameter values (custom), or for any values, as a prepared
        statement's generic plan is (PostgreSQL 15 has no EXPLAIN (GENERIC_PLAN): PREPARE,
        then EXECUTE under force_generic_plan)."""
        names: list[str] = []

        def positional(match: re.Match[str]) -> str:
            if match.group(1) not in names:
                names.append(match.group(1))
            return f"${names.index(match.group(1)) + 1}"

        sql = re.sub(r"%\((\w+)\)s", positional, statement).replace("%%", "%")
        types = ", ".join("bigint" if isinstance(parameters[n], int) else "text" for n in names)
        url = db.store.engine.url.render_as_string(hide_password=False)
        conn = self.connections.get(url)
        if conn is None:
            conn = self.connections[url] = psycopg.connect(plain_url(url), autocommit=True)
        mode = "force_generic_plan" if generic else "force_custom_plan"
        conn.execute(f"SET plan_cache_mode = {mode}")
        conn.execute(f"PREPARE cjk_plan ({types}) AS {sql}")
        try:
            arguments = psql.SQL(", ").join(psql.Literal(parameters[n]) for n in names)
            row = conn.execute(
                psql.SQL("EXPLAIN (FORMAT JSON) EXECUTE cjk_plan ({})").format(arguments)
            ).fetchone()
        finally:
            conn.execute("DEALLOCATE cjk_plan")
        assert row is not None
        plan = row[0]
        return json.loads(plan) if isinstance(plan, str) else plan

    def close(self) -> None:
        for conn in self.connections.values():
            conn.close()


@pytest.fixture
def planner() -> Iterator[Planner]:
    explaining = Planner()
    yield explaining
    explaining.close()


def nodes(plan: Any) -> Iterator[dict[str, Any]]:
    stack = [plan[0]["Plan"]]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(node.get("Plans", ()))


def assert_candidates_come_from_the_bigram_index(plan: Any) -> None:
    """Every read of ``messages`` is the bigram index's bitmap, a fetch by primary key, or (a
    page hit's context: the message before and after it) a probe of the per-session index
    for one session: no sequential scan, no walk of the time index or of the per-session
    index across sessions, no trigram index."""
    bigram_scans = 0
    for node in nodes(plan):
        if node.get("Relation Name") == "messages":
            kind = node["Node Type"]
            if kind == "Bitmap Heap Scan":
                # Beside the index scan: the InitPlan computing the needle's keys once.
                (child,) = [plan for plan in node["Plans"]
                            if plan.get("Parent Relationship") != "InitPlan"]
                assert child["Node Type"] == "Bitmap Index Scan", plan
                assert child["Index Name"] == BIGRAM_INDEX, plan
                bigram_scans += 1
            elif node.get("Index Name") == "idx_messages_session":
                assert kind in ("Index Scan", "Index Only Scan"), plan
                assert node["Index Cond"].startswith("((session_id = "), plan
            else:
                assert kind == "Index Scan" and node["Index Name"] == "pk_messages", plan
                assert "(id =" in node["Index Cond"], plan
        assert node.get("Index Name") != "ix_messages_indexed_text_trgm", plan
    assert bigram_scans == 1, plan


def test_a_mixed_script_query_uses_the_index_and_finds_each_term_anywhere(
    corpora: Corpora, db: SessionDB, planner: Planner
) -> None:
    ids, statement, parameters = search_statement(db, "方案 数据库", sort="oldest")
    assert ids and ids == corpora.like_scan(db, "方案", "数据库", sort="oldest")
    for generic in (False, True):
        assert_candidates_come_from_the_bigram_index(
            planner.plan(db, statement, parameters, generic=generic)
        )


@pytest.mark.parametrize("analyzed", [False, True], ids=["no-analyze", "analyzed"])
def test_cjk_queries_are_answered_from_the_bigram_index(
    corpora: Corpora, planner: Planner, analyzed: bool
) -> None:
    db = corpora.store(ROWS, 1, analyzed=analyzed)
    try:
        for query in QUERIES:
            for kwargs in FILTERS:
                ids, statement, parameters = search_statement(db, query, **kwargs)
                assert ids == corpora.like_scan(db, query, **kwargs), (query, kwargs)
                for generic in (False, True):
                    plan = planner.plan(db, statement, parameters, generic=generic)
                    assert_candidates_come_from_the_bigram_index(plan)
    finally:
        db.close()


def test_the_hits_stay_right_once_the_statement_is_prepared(
    corpora: Corpora, analyzed_db: SessionDB
) -> None:
    """Past psycopg's prepare threshold, and past the server's five custom plans, the same
    statement keeps finding what a LIKE scan finds, for needles of every length (on a store
    opened for this test: its connection has prepared nothing yet)."""
    for _ in range(3):
        for query in QUERIES:
            assert [h["id"] for h in analyzed_db.search_messages(query)] == corpora.like_scan(
                analyzed_db, query
            )


def test_a_large_analyzed_store_answers_cjk_from_the_bigram_index(
    corpora: Corpora, planner: Planner
) -> None:
    """Loaded as users load one (rows in, then the documented ``ANALYZE``), a store ten times
    larger with needles ten times rarer: the planner, knowing the statistics, still reads the
    candidates from the bigram index, for every needle length, filter and time order."""
    db = corpora.store(LARGE_ROWS, 10, analyzed=True)
    try:
        for query in QUERIES:
            for kwargs in FILTERS[:3]:
                ids, statement, parameters = search_statement(db, query, **kwargs)
                assert ids == corpora.like_scan(db, query, **kwargs), (query, kwargs)
                for generic in (False, True):
                    assert_candidates_come_from_the_bigram_index(
                        planner.plan(db, statement, parameters, generic=generic)
                    )
    finally:
        db.close()
