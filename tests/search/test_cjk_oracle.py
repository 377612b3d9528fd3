"""CJK search from the bigram index gives exactly what a brute-force substring scan gives.

Random texts mixing CJK (BMP and supplementary-plane), ASCII of both cases, punctuation and the
LIKE wildcards, spread over content, tool name and tool calls; random queries of one to four
characters per term, one or two terms (mixed scripts included), drawn from the texts (hits)
and from the alphabet (mostly misses). The oracle is Python: every term must occur, folded as
the database's ``LIKE`` folds (SQLite: ASCII letters, in any one column; PostgreSQL ``ILIKE``:
over content, tool name and tool calls joined by spaces). No false positive (the bigram match
is verified against the text) and no false negative (the index holds every CJK bigram).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import Connection

from sessionstore.search.service import search_messages
from sessionstore.storage.store import Store

CJK = "数据库迁移部署的了库𠀀𠀁ㄱ가。"
OTHER = "abXY _%\\.é-"
ALPHABET = CJK + OTHER
TEXT = st.text(st.sampled_from(ALPHABET), max_size=40)
ROW = st.tuples(
    st.none() | TEXT,  # a tool call's message has no content
    st.none() | st.text(st.sampled_from(CJK + "ab_"), max_size=4),
    st.none() | TEXT,
)


Row = tuple[str | None, str | None, str | None]


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    with Store.open(store_url) as opened:
        opened.write(
            lambda c: c.execute(
                sa.text("INSERT INTO sessions (id, source, started_at) VALUES ('s', 'cli', 1)")
            )
        )
        yield opened


def fold(text: str, dialect: str) -> str:
    if dialect == "sqlite":
        return "".join(chr(ord(c) + 32) if "A" <= c <= "Z" else c for c in text)
    return text.lower()


def oracle(
    rows: list[Row], terms: list[str], dialect: str
) -> set[int]:
    found = set()
    for message_id, (content, tool_name, tool_calls) in enumerate(rows, start=1):
        columns = [value for value in (content, tool_name, tool_calls) if value is not None]
        if dialect == "postgresql":
            columns = [f"{content or ''} {tool_name or ''} {tool_calls or ''}"]
        if all(any(fold(term, dialect) in fold(col, dialect) for col in columns) for term in terms):
            found.add(message_id)
    return found


def replace_rows(store: Store, rows: list[Row]) -> None:
    def write(conn: Connection) -> None:
        conn.execute(sa.text("DELETE FROM messages"))
        for message_id, (content, tool_name, tool_calls) in enumerate(rows, start=1):
            conn.execute(
                sa.text(
                    "INSERT INTO messages (id, session_id, role, content, tool_name, tool_calls,"
                    " timestamp) VALUES (:id, 's', 'user', :content, :tool_name, :tool_calls,"
                    " :id)"
                ),
                {"id": message_id, "content": content, "tool_name": tool_name,
                 "tool_calls": tool_calls},
            )  # fmt: skip

    store.write(write)


@st.composite
def corpus_and_query(draw: Any) -> tuple[list[Row], list[str]]:
    rows = draw(st.lists(ROW, min_size=1, max_size=12))
    texts = [value for row in rows for value in row if value]
    terms = []
    for _ in range(draw(st.integers(1, 2))):
        length = draw(st.integers(1, 4))
        source = draw(st.sampled_from(texts)) if texts and draw(st.booleans()) else ""
        if len(source) >= length:
            start = draw(st.integers(0, len(source) - length))
            term = source[start : start + length]
        else:
            term = draw(st.text(st.sampled_from(ALPHABET), min_size=length, max_size=length))
        term = term.replace(" ", "")
        if term:
            terms.append(term)
    if not any(any(c in CJK for c in term) for term in terms):
        terms.append(draw(st.sampled_from(CJK)))
    return rows, terms


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=corpus_and_query())
@example(case=([("数据库", None, None), ("数据", None, None), ("库", None, None)], ["库"]))
@example(case=([("a数据b", "迁移", None), ("数 据", None, '{"q": "数据"}')], ["数据"]))
@example(case=([("deploy 数据库", None, None), ("数据库 only", None, None)], ["DEPLOY", "数据库"]))
@example(case=([("𠀀𠀁x", None, None), ("𠀀", None, None)], ["𠀀𠀁"]))
@example(case=([(None, "终端", '{"q": "部署集群"}'), ("部署", None, None)], ["部署集群"]))
@example(case=([("数据%库", None, None), ("数据x库", None, None)], ["据%"]))
def test_indexed_cjk_search_equals_a_substring_scan(
    store: Store, case: tuple[list[Row], list[str]]
) -> None:
    rows, terms = case
    replace_rows(store, rows)
    dialect = store.engine.dialect.name
    hits = store.read(lambda conn: search_messages(conn, " ".join(terms), limit=1000))
    assert {hit.id for hit in hits} == oracle(rows, terms, dialect), (rows, terms)


LONG_TEXT = st.text(st.sampled_from(CJK + "ab"), min_size=40, max_size=90)


@st.composite
def long_term_case(draw: Any) -> tuple[list[Row], list[str]]:
    """A term of 34 to 90 characters drawn from one text (more distinct bigrams than a query
    names: the rest are verified), and rows holding most of it: the text itself, the text with
    one character changed, its two halves apart."""
    text = draw(LONG_TEXT)
    start = draw(st.integers(0, len(text) - 34))
    term = text[start : start + draw(st.integers(34, len(text) - start))]
    assume(any(character in CJK for character in term))  # else a word search, another rule
    at = draw(st.integers(0, len(text) - 1))
    changed = text[:at] + draw(st.sampled_from(CJK)) + text[at + 1 :]
    middle = len(term) // 2
    rows: list[Row] = [
        (text, None, None),
        (changed, None, None),
        (term[:middle], None, term[middle:]),
        (term[: middle + 1] + " " + term[middle + 1 :], None, None),
    ]
    return rows, [term]


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=long_term_case())
def test_a_long_cjk_term_finds_what_a_substring_scan_finds(
    store: Store, case: tuple[list[Row], list[str]]
) -> None:
    """A term longer than the bigrams its query names (``MAX_BIGRAMS_PER_TERM``): the sample
    only narrows the candidates, each verified against the whole term."""
    rows, terms = case
    replace_rows(store, rows)
    dialect = store.engine.dialect.name
    hits = store.read(lambda conn: search_messages(conn, " ".join(terms), limit=1000))
    assert {hit.id for hit in hits} == oracle(rows, terms, dialect), (rows, terms)
