"""The pure search-text functions, checked against real SQLite FTS5 and real PostgreSQL.

The PostgreSQL tests need the server from ``SESSIONSTORE_TEST_PG_URL`` (default: the local
``test`` database); unreachable, they skip locally and fail under ``CI=true``.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionstore.search import (
    MAX_FTS5_QUERY_CHARS,
    MAX_NEGATIONS,
    MAX_TSQUERY_TEXT_BYTES,
    contains_cjk,
    escape_like,
    sanitize_fts5_query,
    to_postgres_tsquery,
)
from sessionstore.search.terms import index_tokens

DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"

DOCUMENTS = {
    1: "chat-send failed with a timeout",
    2: "released P2.2 today",
    3: "edited my-app.config.ts again",
    4: "hello world",
    5: "the quick brown fox",
    6: "foo bar baz",
    7: "rock and roll",
    8: "it's done",
}

# Everything FTS5 or PostgreSQL treat specially, plus text that breaks drivers (NUL, lone
# surrogates) and scripts the tokenizers handle differently.
HOSTILE_FRAGMENTS = [
    "AND", "OR", "NOT", "NEAR", "and", '"', '""', '"a b"', "*", "**", "(", ")", "{", "}", "+",
    "^", ":", "-", ".", ",", "'", "\\", "!", "&", "|", "<->", ":*", "\x00", "\x01", "\x0b",
    "\x1a", "\x7f", "\x85", " ", "\t", "\n", "\u3000", "\u200b", "\ud800", "\udfff", "foo",
    "Bar", "chat-send", "P2.2", "content:", "数据库", "한국어", "カナ", "😀", "é", "İ", "½", "_",
]  # fmt: skip

ANY_CHARACTER = st.characters(codec=None, exclude_categories=())  # surrogates included
HOSTILE_QUERIES = st.one_of(
    st.text(ANY_CHARACTER, max_size=60),
    st.lists(
        st.one_of(st.sampled_from(HOSTILE_FRAGMENTS), st.text(ANY_CHARACTER, max_size=3)),
        max_size=25,
    ).map("".join),
    st.lists(st.sampled_from(HOSTILE_FRAGMENTS), max_size=25).map(" ".join),
)


def _ci_requires_everything() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


@pytest.fixture(scope="module")
def fts() -> Iterator[sqlite3.Connection]:
    """FTS5 tables with the store's tokenizers: unicode61 (messages_fts) and trigram (CJK)."""
    connection = sqlite3.connect(":memory:")
    connection.execute("CREATE VIRTUAL TABLE words USING fts5(content)")
    connection.execute("CREATE VIRTUAL TABLE trigrams USING fts5(content, tokenize='trigram')")
    for table in ("words", "trigrams"):
        connection.executemany(
            f"INSERT INTO {table}(rowid, content) VALUES (?, ?)", DOCUMENTS.items()
        )
    yield connection
    connection.close()


@pytest.fixture(scope="module")
def pg() -> Iterator[Any]:
    url = os.environ.get("SESSIONSTORE_TEST_PG_URL", DEFAULT_PG_URL)
    conninfo = url.replace("postgresql+psycopg://", "postgresql://", 1)
    try:
        import psycopg

        connection = psycopg.connect(conninfo, autocommit=True, connect_timeout=3)
    except Exception as exc:  # any failure means the server is not usable
        message = f"PostgreSQL is not reachable at {conninfo}: {exc}"
        if _ci_requires_everything():
            pytest.fail(message)
        pytest.skip(message)
    # "query contains only stop words" NOTICEs are expected for punctuation-only operands.
    connection.add_notice_handler(lambda diagnostic: None)
    yield connection
    connection.close()


def fts_match(connection: sqlite3.Connection, table: str, query: str) -> set[int]:
    rows = connection.execute(f"SELECT rowid FROM {table} WHERE {table} MATCH ?", (query,))
    return {rowid for (rowid,) in rows}


def pg_match(connection: Any, tsquery: str) -> set[int]:
    found = set()
    for rowid, document in DOCUMENTS.items():
        row = connection.execute(
            "SELECT to_tsvector('simple', %s) @@ to_tsquery('simple', %s)", (document, tsquery)
        ).fetchone()
        if row[0]:
            found.add(rowid)
    return found


# --------------------------------------------------------------------------------------------
# sanitize_fts5_query
# --------------------------------------------------------------------------------------------

SANITIZE_CASES = [
    # words and phrases
    ("hello world", "hello world"),
    ("  hello \t\n world  ", "hello world"),
    ('"exact phrase" other', '"exact phrase" other'),
    ('"foo bar"*', '"foo bar"*'),
    ('"chat-send" foo', '"chat-send" foo'),
    ('a "b c" "d', 'a "b c" d'),
    ('"unclosed', "unclosed"),
    ('""', ""),
    ('"   " foo', "foo"),
    ('say"hi there"now', 'say "hi there" now'),
    # unmatched specials become spaces
    ("(foo) {bar} +baz ^qux", "foo bar baz qux"),
    ("foo(bar)", "foo bar"),
    ("(((", ""),
    # stars
    ("foo***", "foo*"),
    ("***", ""),
    ("*foo", "foo"),
    ("** foo", "foo"),
    ("foo * bar", "foo bar"),
    ("foo*bar", "foo* bar"),
    # boolean operators
    ("hello AND", "hello"),
    ("OR world", "world"),
    ("NOT foo", "foo"),
    ("AND OR NOT", ""),
    ("hello AND AND world", "hello AND world"),
    ("a AND OR b", "a OR b"),
    ("foo AND NOT bar", "foo NOT bar"),
    ("hello OR world NOT fox", "hello OR world NOT fox"),
    ("hello and", "hello and"),  # only upper case is an operator, in FTS5 as here
    ("AND*", '"AND"*'),
    # terms FTS5 would split or reject are quoted
    ("chat-send", '"chat-send"'),
    ("chat-send*", '"chat-send"*'),
    ("P2.2", '"P2.2"'),
    ("my-app.config.ts", '"my-app.config.ts"'),
    ("-", '"-"'),
    ("100%", '"100%"'),
    # iot 0.22.2's punctuation becomes spaces (":" would filter a column); Hermes quotes "_"
    ("content:hello", "content hello"),
    ("TODO: fix", "TODO fix"),
    ('"TODO:" fix', '"TODO:" fix'),
    ("error:timeout", "error timeout"),
    ("it's", "it s"),
    ("a\\b", "a b"),
    ("a@b/c#d&e|f~g[h]i<j>k,l;m!n?o$p=q", "a b c d e f g h i j k l m n o p q"),
    ("foo_bar", '"foo_bar"'),
    ("sp_new and 血管瘤", '"sp_new" and 血管瘤'),
    ("docker-compose_up", '"docker-compose_up"'),
    ("my.app_config.ts*", '"my.app_config.ts"*'),
    # empty input
    ("", ""),
    ("   \t\n  ", ""),
    # unicode
    ("数据库 迁移", "数据库 迁移"),
    ("café 😀 한국어", "café 😀 한국어"),
    ("foo\u3000bar", "foo bar"),
    # bytes no driver or FTS5 parser can take
    ("foo\x00bar", "foo bar"),
    ('"a\x00b"', '"a b"'),
    ("\ud800foo\udfff", "foo"),
    ("a\x0bb", "a b"),  # vertical tab is whitespace to Python, a syntax error to FTS5
    ("a\x01b", '"a\x01b"'),
]


@pytest.mark.parametrize(("query", "expected"), SANITIZE_CASES)
def test_sanitize_fts5_query(query: str, expected: str) -> None:
    assert sanitize_fts5_query(query) == expected


@pytest.mark.parametrize("expected", sorted({e for _, e in SANITIZE_CASES if e}))
def test_sanitized_examples_are_accepted_by_fts5(fts: sqlite3.Connection, expected: str) -> None:
    for table in ("words", "trigrams"):
        fts_match(fts, table, expected)  # raises OperationalError if FTS5 rejects it


@pytest.mark.parametrize("raw", ["chat-send", "P2.2", "foo:", "a NOT", "AND*", "it's"])
def test_raw_examples_really_break_fts5(fts: sqlite3.Connection, raw: str) -> None:
    # The premise of the sanitizer: without it these user queries raise.
    with pytest.raises(sqlite3.OperationalError):
        fts_match(fts, "words", raw)


# Queries whose meaning both engines share: the sanitized FTS5 query and its tsquery must find
# the same documents (see DOCUMENTS).
SEARCH_CASES = [
    ("chat-send", {1}),
    ("chat-send*", {1}),
    ("P2.2", {2}),
    ("my-app.config.ts", {3}),
    ("hello AND", {4}),
    ("OR world", {4}),
    ("(hello", {4}),
    ("hello OR fox", {4, 5}),
    ('"quick brown"', {5}),
    ('"brown quick"', set()),
    ("qui*", {5}),
    ("quick NOT fox", set()),
    ("quick NOT cat", {5}),
    ("foo AND NOT baz", set()),
    ("foo AND NOT qux", {6}),
    ("foo NOT bar qux", {6}),  # juxtaposition binds tighter than NOT: foo NOT (bar AND qux)
    ("rock and roll", {7}),
    ("it's", {8}),
]


@pytest.mark.parametrize(("query", "expected"), SEARCH_CASES)
def test_sanitized_query_finds_what_the_user_meant_in_fts5(
    fts: sqlite3.Connection, query: str, expected: set[int]
) -> None:
    assert fts_match(fts, "words", sanitize_fts5_query(query)) == expected


def test_negations_are_bounded_for_the_fts5_depth_limit(fts: sqlite3.Connection) -> None:
    query = "keep " + " ".join(f"NOT drop{index}" for index in range(MAX_NEGATIONS + 50))
    sanitized = sanitize_fts5_query(query)
    assert sanitized.split().count("NOT") == MAX_NEGATIONS
    assert f"drop{MAX_NEGATIONS - 1}" in sanitized
    assert f"drop{MAX_NEGATIONS}" not in sanitized
    fts_match(fts, "words", sanitized)


def test_dropped_negation_takes_only_its_own_operand() -> None:
    query = "a" + " NOT x" * MAX_NEGATIONS + " NOT y z OR w"
    assert sanitize_fts5_query(query) == "a" + " NOT x" * MAX_NEGATIONS + " OR w"


@settings(max_examples=600, deadline=None)
@given(query=HOSTILE_QUERIES)
def test_any_text_sanitizes_to_a_query_fts5_accepts(fts: sqlite3.Connection, query: str) -> None:
    sanitized = sanitize_fts5_query(query)
    assert sanitized == sanitized.strip()
    if sanitized:
        for table in ("words", "trigrams"):
            fts_match(fts, table, sanitized)


@settings(max_examples=600, deadline=None)
@given(query=HOSTILE_QUERIES)
def test_sanitizing_is_idempotent(query: str) -> None:
    once = sanitize_fts5_query(query)
    assert sanitize_fts5_query(once) == once


# --------------------------------------------------------------------------------------------
# to_postgres_tsquery
# --------------------------------------------------------------------------------------------

TSQUERY_CASES: list[tuple[str, str | None]] = [
    ("hello world", "'hello' & 'world'"),
    ('"exact phrase" other', "'exact phrase' & 'other'"),
    ("foo*", "'foo':*"),
    ('"chat-send"*', "'chat-send':*"),
    ('"P2.2"', "'P2.2'"),
    ("a AND b", "'a' & 'b'"),
    ("a OR b", "'a' | 'b'"),
    ("a NOT b", "'a' & !'b'"),
    ("a NOT b NOT c", "'a' & !'b' & !'c'"),
    ("a NOT b c", "'a' & !('b' & 'c')"),
    ("a OR b c", "'a' | 'b' & 'c'"),
    ("a b OR c NOT d", "'a' & 'b' | 'c' & !'d'"),
    ("a AND OR b", "'a' | 'b'"),
    ("NOT a", "'a'"),
    ("a OR", "'a'"),
    ('"it\'s"', "'it''s'"),
    ('"back\\slash"', "'back\\\\slash'"),
    ('"a\x01b"', "'a b'"),
    ("数据库", "'数据库'"),
    ('"unclosed', "'unclosed'"),
    # terms without letters or digits vanish, with the operator that binds them
    ('a "!!!" b', "'a' & 'b'"),
    ('a NOT "!!!"', "'a'"),
    ('"!!!" NOT a', None),
    ('a OR "!!!" NOT b', "'a'"),
    ('"!!!"', None),
    ("", None),
    ("   ", None),
    ("AND OR NOT", None),
]


@pytest.mark.parametrize(("sanitized", "expected"), TSQUERY_CASES)
def test_to_postgres_tsquery(sanitized: str, expected: str | None) -> None:
    assert to_postgres_tsquery(sanitized) == expected


def test_tsquery_text_is_capped_at_whole_words() -> None:
    words = [f"word{index}" for index in range(5000)]
    translated = to_postgres_tsquery(" ".join(words))
    assert translated is not None
    operands = translated.split(" & ")
    assert sum(len(operand) - 2 for operand in operands) <= MAX_TSQUERY_TEXT_BYTES
    assert operands == [f"'{word}'" for word in words[: len(operands)]]

    phrase = to_postgres_tsquery('"' + " ".join(words) + '"*')
    assert phrase is not None and not phrase.endswith(":*")  # a cut phrase is no prefix
    assert phrase.startswith("'word0 word1 ") and phrase.endswith("'")
    assert phrase[1:-1].split() == words[: len(phrase[1:-1].split())]


@pytest.mark.postgresql
@pytest.mark.parametrize("expected", sorted({e for _, e in TSQUERY_CASES if e}))
def test_translated_examples_are_accepted_by_postgresql(pg: Any, expected: str) -> None:
    pg.execute("SELECT to_tsquery('simple', %s)", (expected,))


@pytest.mark.postgresql
@pytest.mark.parametrize(("query", "expected"), SEARCH_CASES)
def test_translated_query_finds_the_same_documents_in_postgresql(
    pg: Any, query: str, expected: set[int]
) -> None:
    translated = to_postgres_tsquery(sanitize_fts5_query(query))
    assert translated is not None
    assert pg_match(pg, translated) == expected


@pytest.mark.postgresql
@pytest.mark.parametrize("separator", [" ", " OR ", " AND "])
def test_huge_queries_stay_within_postgresql_limits(pg: Any, separator: str) -> None:
    # Translated term by term, 200 000 terms would exhaust max_stack_depth and their lexemes
    # would overflow the 1 MiB tsquery buffer; the cap keeps both out of reach.
    query = separator.join(f"w{index}-x{'y' * (index % 50)}" for index in range(200_000))
    translated = to_postgres_tsquery(sanitize_fts5_query(query))
    assert translated is not None
    pg.execute("SELECT to_tsquery('simple', %s)", (translated,))


@pytest.mark.postgresql
@settings(max_examples=300, deadline=None)
@given(query=HOSTILE_QUERIES)
def test_any_text_translates_to_a_tsquery_postgresql_accepts(pg: Any, query: str) -> None:
    for translated in (to_postgres_tsquery(sanitize_fts5_query(query)), to_postgres_tsquery(query)):
        if translated is not None:
            assert translated.strip() == translated != ""
            pg.execute("SELECT to_tsquery('simple', %s)", (translated,))


# --------------------------------------------------------------------------------------------
# contains_cjk
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", False),
        ("hello world", False),
        ("café ß 😀 ١٢٣ Ελληνικά", False),
        ("\ud800", False),
        ("数据库迁移", True),  # CJK Unified Ideographs
        ("\u4e00", True),
        ("\u9fff", True),
        ("\u3400", True),  # Extension A
        ("\U00020000", True),  # Extension B
        ("\U0002a6df", True),
        ("\U0002b740", True),  # Extension D
        ("\U00030000", True),  # Extension G
        ("\u3000", True),  # ideographic space
        ("。", True),
        ("ひらがな", True),
        ("カタカナ", True),
        ("한국어", True),  # Hangul Syllables
        ("\u1100", True),  # Hangul Jamo
        ("\uf900", True),  # CJK Compatibility Ideographs
        ("ｶﾀｶﾅ", True),  # halfwidth katakana
        ("Ａ", True),  # fullwidth Latin, typed by CJK input methods
        ("\u2e80", True),  # CJK Radicals Supplement
        ("mixed text with 中 inside", True),
        ("\u2e7f", False),
        ("\uabff", False),
        ("\U00040000", False),
    ],
)
def test_contains_cjk(text: str, expected: bool) -> None:
    assert contains_cjk(text) is expected


# --------------------------------------------------------------------------------------------
# escape_like
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "escape", "expected"),
    [
        ("plain", "\\", "plain"),
        ("", "\\", ""),
        ("50%", "\\", "50\\%"),
        ("a_b", "\\", "a\\_b"),
        ("back\\slash", "\\", "back\\\\slash"),
        ("%_\\", "\\", "\\%\\_\\\\"),
        ("数_据", "\\", "数\\_据"),
        ("a!b%c\\", "!", "a!!b!%c\\"),
    ],
)
def test_escape_like(text: str, escape: str, expected: str) -> None:
    assert escape_like(text, escape) == expected


@pytest.mark.parametrize("escape", ["", "!!", "%", "_"])
def test_escape_like_refuses_an_unusable_escape(escape: str) -> None:
    with pytest.raises(ValueError, match="escape"):
        escape_like("x", escape)


@pytest.mark.parametrize(
    ("text", "candidate", "matches"),
    [
        ("50%", "50%", True),
        ("50%", "500", False),
        ("a_b", "a_b", True),
        ("a_b", "axb", False),
        ("a\\b", "a\\b", True),
        ("a\\b", "ab", False),
    ],
)
def test_escaped_text_matches_only_itself_in_sqlite_like(
    text: str, candidate: str, matches: bool
) -> None:
    connection = sqlite3.connect(":memory:")
    (result,) = connection.execute(
        "SELECT ? LIKE ? ESCAPE '\\'", (candidate, escape_like(text))
    ).fetchone()
    assert bool(result) is matches


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(st.characters(codec="utf-8", exclude_characters="\x00")),
    escape=st.sampled_from(["\\", "!", "#"]),
)
def test_escaped_text_is_literal_in_sqlite_like(text: str, escape: str) -> None:
    connection = sqlite3.connect(":memory:")
    pattern = escape_like(text, escape)
    (itself, longer, prefix) = connection.execute(
        f"SELECT :text LIKE :pattern ESCAPE '{escape}',"
        f" :longer LIKE :pattern ESCAPE '{escape}',"
        f" :longer LIKE :pattern || '%' ESCAPE '{escape}'",
        {"text": text, "pattern": pattern, "longer": text + "x"},
    ).fetchone()
    assert (itself, longer, prefix) == (1, 0, 1)


def test_a_query_is_cut_to_max_fts5_query_chars_before_it_is_read() -> None:
    """Hermes's MAX_FTS5_QUERY_CHARS (iot 0.22.2): whatever arrives, the work and the
    expression stay bounded; only the first 2048 characters are searched for."""
    assert MAX_FTS5_QUERY_CHARS == 2048
    hostile = ('"' * 100_000) + ("a." * 100_000) + ("*" * 100_000)
    assert len(sanitize_fts5_query(hostile)) <= MAX_FTS5_QUERY_CHARS * 2
    words = sanitize_fts5_query("word " * 10_000).split()
    assert words == ["word"] * (MAX_FTS5_QUERY_CHARS // len("word "))  # no half word at the end
    assert sanitize_fts5_query("x" * MAX_FTS5_QUERY_CHARS + " tail") == "x" * MAX_FTS5_QUERY_CHARS
    assert sanitize_fts5_query("x" * 3000) == "x" * MAX_FTS5_QUERY_CHARS  # one word: cut kept


@given(st.lists(st.sampled_from(["word", "deploy", "k8s", "a", '"a b"', "日志"]), min_size=1,
                max_size=50))  # fmt: skip
def test_a_cut_query_never_ends_in_half_a_word(words: list[str]) -> None:
    """The field walk (issue 29): Hermes cuts a long query mid-word, and the half word is a
    term every hit must hold (410 repeats of a word all in one message found nothing). Cut
    here before that word: every word left is one of the query's."""
    query = " ".join(words * (MAX_FTS5_QUERY_CHARS // len(" ".join(words)) + 1))
    assert len(query) > MAX_FTS5_QUERY_CHARS
    kept = sanitize_fts5_query(query)
    assert len(kept) <= MAX_FTS5_QUERY_CHARS
    assert set(kept.replace('"', " ").split()) <= set(query.replace('"', " ").split())


# --------------------------------------------------------------------------------------------
# index_tokens (what the bigram index must hold for a term)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("", []),
        ("plain", []),
        ("数", [("数", True)]),
        ("a数", [("数", True)]),
        ("数据", [("数据", False)]),
        ("数据库", [("数据", False), ("据库", False)]),
        ("数a", [("数a", False)]),
        ("a数b据", [("数b", False), ("据", True)]),
        ("🚀数", [("数", True)]),
        ("한글", [("한글", False)]),
        ("\U00020001x", [("\U00020001x", False)]),
    ],
)
def test_index_tokens(text: str, tokens: list[tuple[str, bool]]) -> None:
    assert index_tokens(text) == tokens


@settings(max_examples=100, deadline=None)
@given(st.text(st.sampled_from(["a", " ", "%", "🚀", "数", "据", "한", "ア", "\U00020001"])))
def test_index_tokens_follow_the_per_character_rule(text: str) -> None:
    """Each CJK character and the one after it; the last character alone (as a prefix) only
    when no CJK character precedes it (the rule as first written, one character at a time)."""
    expected = []
    for index, character in enumerate(text):
        if not contains_cjk(character):
            continue
        if index + 1 < len(text):
            expected.append((text[index : index + 2], False))
        elif index == 0 or not contains_cjk(text[index - 1]):
            expected.append((character, True))
    assert index_tokens(text) == expected
