"""Message search (``sessionstore.search.service``) on SQLite and PostgreSQL.

Rows are written with raw SQL through ``Store.write``, so these tests depend on nothing but the
schema and the search code. Each test states its own small corpus; message ids are assigned in
list order (1, 2, ...), timestamps are explicit, so "newest first" and "the message before"
are fixed by the data, not by the clock.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import Connection
from sqlalchemy.exc import OperationalError
from store_library import connect_like_the_store

from sessionstore.dialects import dialect_for
from sessionstore.schema import migrate
from sessionstore.search import sqlite as sqlite_search
from sessionstore.search.hits import (
    SUBSTRING_SNIPPET_SIDE_CHARS,
    ContextMessage,
    SearchHit,
    substring_snippet,
)
from sessionstore.search.registry import search_index_for
from sessionstore.search.request import Page, SearchFilters
from sessionstore.search.service import search_message_dicts, search_messages
from sessionstore.search.sqlite import SQLiteSearchIndex, is_query_error
from sessionstore.search.terms import SubstringQuery, parse_substring_query
from sessionstore.storage.store import Store

HIT_KEYS = [
    "id", "session_id", "role", "snippet", "timestamp", "tool_name", "source", "model",
    "session_started", "context",
]  # fmt: skip


@dataclass(frozen=True)
class Msg:
    name: str
    session: str
    role: str
    content: str | None
    timestamp: float
    tool_name: str | None = None


# (id, source, model, started_at)
SESSIONS = [
    ("cli-1", "cli", "model-a", 1000.0),
    ("tg-1", "telegram", None, 2000.0),
    ("dc-1", "discord", "model-b", 3000.0),
]


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    with Store.open(store_url) as opened:
        yield opened


def is_sqlite(store: Store) -> bool:
    return store.engine.dialect.name == "sqlite"


def seed(
    store: Store, messages: list[Msg], sessions: list[tuple[Any, ...]] = SESSIONS
) -> dict[str, int]:
    def write(conn: Connection) -> None:
        for session_id, source, model, started_at in sessions:
            conn.execute(
                sa.text(
                    "INSERT INTO sessions (id, source, model, started_at) "
                    "VALUES (:id, :source, :model, :started_at)"
                ),
                {"id": session_id, "source": source, "model": model, "started_at": started_at},
            )
        for message_id, message in enumerate(messages, start=1):
            conn.execute(
                sa.text(
                    "INSERT INTO messages (id, session_id, role, content, tool_name, timestamp) "
                    "VALUES (:id, :session_id, :role, :content, :tool_name, :timestamp)"
                ),
                {
                    "id": message_id,
                    "session_id": message.session,
                    "role": message.role,
                    "content": message.content,
                    "tool_name": message.tool_name,
                    "timestamp": message.timestamp,
                },
            )

    store.write(write)
    return {message.name: index for index, message in enumerate(messages, start=1)}


def substring_query(needle: str) -> SubstringQuery:
    parsed = parse_substring_query(needle)
    assert parsed is not None
    return parsed


def search(store: Store, query: str, **kwargs: Any) -> list[SearchHit]:
    return store.read(lambda conn: search_messages(conn, query, **kwargs))


def names_of(hits: list[SearchHit], ids: dict[str, int]) -> list[str]:
    by_id = {message_id: name for name, message_id in ids.items()}
    return [by_id[hit.id] for hit in hits]


def dump(store: Store) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    def read(conn: Connection) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        sessions = conn.execute(sa.text("SELECT * FROM sessions ORDER BY id")).all()
        messages = conn.execute(sa.text("SELECT * FROM messages ORDER BY id")).all()
        return [tuple(row) for row in sessions], [tuple(row) for row in messages]

    return store.read(read)


class StatementLog:
    """Every statement the engine sends, through SQLAlchemy's ``before_cursor_execute``."""

    def __init__(self, store: Store) -> None:
        self.engine = store.engine
        self.statements: list[tuple[str, Any]] = []

    def _record(self, _conn: object, _cursor: object, statement: str, parameters: Any,
                _context: object, _executemany: bool) -> None:  # fmt: skip
        self.statements.append((statement, parameters))

    def __enter__(self) -> StatementLog:
        sa.event.listen(self.engine, "before_cursor_execute", self._record)
        return self

    def __exit__(self, *exc_info: object) -> None:
        sa.event.remove(self.engine, "before_cursor_execute", self._record)

    def containing(self, fragment: str) -> list[tuple[str, Any]]:
        return [entry for entry in self.statements if fragment in entry[0]]


# -- the query language ---------------------------------------------------------------------
CORPUS = [
    Msg("deploy_question", "cli-1", "user", "How do I deploy the gateway?", 1001),
    Msg(
        "deploying_answer", "cli-1", "assistant", "Deploying takes a minute after the build.", 1002
    ),
    Msg("chat_send", "cli-1", "tool", "chat-send returned ok", 1003, tool_name="terminal"),
    Msg("chat_send_apart", "cli-1", "user", "send a chat message", 1004),
    Msg("dotted", "tg-1", "user", "milestone P2.2 is done", 2001),
    Msg("dotted_apart", "tg-1", "user", "P2 has 2 open items", 2002),
    Msg("phrase", "tg-1", "assistant", "the database migration plan is ready", 2003),
    Msg("phrase_apart", "tg-1", "user", "migration of the database later", 2004),
    Msg("chinese", "dc-1", "user", "我们讨论了数据库迁移的方案", 3001),
    Msg("japanese", "dc-1", "assistant", "データベースの移行計画を確認しました", 3002),
    Msg("korean", "dc-1", "user", "데이터베이스 마이그레이션 계획을 검토했습니다", 3003),
    Msg("no_content", "dc-1", "assistant", None, 3004),
]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        pytest.param("gateway", {"deploy_question"}, id="word"),
        pytest.param("GATEWAY", {"deploy_question"}, id="case-insensitive"),
        pytest.param("deploy", {"deploy_question"}, id="whole-word-only"),
        pytest.param("deploy*", {"deploy_question", "deploying_answer"}, id="prefix"),
        pytest.param("gateway OR build", {"deploy_question", "deploying_answer"}, id="or"),
        pytest.param("migration NOT plan", {"phrase_apart"}, id="not"),
        pytest.param("database migration", {"phrase", "phrase_apart"}, id="implicit-and"),
        pytest.param('"database migration"', {"phrase"}, id="phrase"),
        pytest.param("chat-send", {"chat_send"}, id="hyphenated"),
        pytest.param("P2.2", {"dotted"}, id="dotted"),
        pytest.param("*gateway", {"deploy_question"}, id="leading-star-dropped"),
        pytest.param("gateway AND", {"deploy_question"}, id="dangling-operator"),
        pytest.param("(gateway", {"deploy_question"}, id="unbalanced-paren"),
        pytest.param("数据库", {"chinese"}, id="chinese-3-chars"),
        pytest.param("数据库迁移的方案", {"chinese"}, id="chinese-long"),
        pytest.param("迁移", {"chinese"}, id="chinese-2-chars"),
        pytest.param("数", {"chinese"}, id="chinese-1-char"),
        pytest.param('"数据库"', {"chinese"}, id="chinese-quoted"),
        pytest.param("移行計画", {"japanese"}, id="japanese"),
        pytest.param("移行", {"japanese"}, id="japanese-2-chars"),
        pytest.param("データ", {"japanese"}, id="katakana"),
        pytest.param("마이그레이션", {"korean"}, id="korean-word"),
        pytest.param("이터베", {"korean"}, id="korean-inside-word"),
        pytest.param("nowhere", set(), id="no-match"),
        pytest.param("数据库不存在", set(), id="cjk-no-match"),
    ],
)
def test_query_language(store: Store, query: str, expected: set[str]) -> None:
    ids = seed(store, CORPUS)
    hits = search(store, query)
    assert set(names_of(hits, ids)) == expected
    assert all(hit.snippet for hit in hits)


def test_hit_fields_and_dict_shape(store: Store) -> None:
    ids = seed(store, CORPUS)
    (hit,) = search(store, "returned")
    assert hit.to_dict() == {
        "id": ids["chat_send"],
        "session_id": "cli-1",
        "role": "tool",
        "snippet": hit.snippet,
        "timestamp": 1003.0,
        "tool_name": "terminal",
        "source": "cli",
        "model": "model-a",
        "session_started": 1000.0,
        "context": [
            {"role": "assistant", "content": "Deploying takes a minute after the build."},
            {"role": "tool", "content": "chat-send returned ok"},
            {"role": "user", "content": "send a chat message"},
        ],
    }
    assert list(hit.to_dict()) == HIT_KEYS
    assert "chat-send returned ok" not in hit.to_dict().values()  # no full content field


@pytest.mark.slow
def test_hermes_dicts_are_the_hits_dicts(store: Store) -> None:
    """SessionDB's dicts (``search_message_dicts``: a substring search's built by the index
    from its statement's rows, no hit between) are the hits' ``to_dict``, context included,
    for substring and word queries under each filter, order and page shape."""
    seed(store, [
        *CORPUS,
        Msg("cjk_1", "tg-1", "user", "数据库迁移完成了。下一步是检查点", 2001),
        Msg("cjk_2", "tg-1", "assistant", "好的，数据库的迁移脚本在这里：migrate.py", 2002),
        Msg("cjk_3", "dc-1", "tool", "库存: 3; 迁移 ok", 3001, "terminal"),
        Msg("cjk_4", "cli-1", "assistant", None, 1010, "数据库工具"),
    ])  # fmt: skip
    variants: list[dict[str, Any]] = [
        {}, {"limit": 2, "offset": 1}, {"sort": "oldest"}, {"role_filter": ["assistant"]},
        {"source_filter": ["telegram"]}, {"include_inactive": True},
    ]  # fmt: skip
    for query in ("数据库", "迁移", "库", "数据 migrate", "chat", "send OR deploying"):
        for arguments in variants:
            dicts = store.read(functools.partial(search_message_dicts, query=query, **arguments))
            hits = search(store, query, **arguments)
            assert dicts == [hit.to_dict() for hit in hits], (query, arguments)
            assert [list(found) for found in dicts] == [HIT_KEYS] * len(dicts)
            if not arguments:
                assert dicts, query  # every query finds something unfiltered


def test_more_occurrences_rank_first(store: Store) -> None:
    ids = seed(
        store,
        [
            Msg("once", "cli-1", "user", "alpha beta gamma delta", 1001),
            Msg("thrice", "cli-1", "user", "alpha alpha alpha beta", 1002),
            Msg("never", "cli-1", "user", "beta gamma delta epsilon", 1003),
        ],
    )
    assert names_of(search(store, "alpha"), ids) == ["thrice", "once"]


def test_a_cjk_query_is_a_substring_search_not_a_word_search(store: Store) -> None:
    """As newest Hermes: a CJK query finds the text inside longer runs too (a word search
    would find only the message where 数据 stands alone), newest first, on every page."""
    ids = seed(
        store,
        [
            Msg("token", "cli-1", "user", "数据 is a word here", 1001),
            Msg("inside", "cli-1", "user", "数据库 contains it", 1002),
        ],
    )
    assert names_of(search(store, "数据"), ids) == ["inside", "token"]
    assert names_of(search(store, "数据", offset=1), ids) == ["token"]
    assert search(store, "数据", offset=2) == []


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        pytest.param("deploy 数据库", {"far_apart", "reversed"}, id="mixed-scripts-anywhere"),
        pytest.param("数据库 deploy", {"far_apart", "reversed"}, id="any-order"),
        pytest.param("DEPLOY 数据库", {"far_apart", "reversed"}, id="ascii-case-folded"),
        pytest.param("deploy AND 数据库", {"far_apart", "reversed"}, id="explicit-and"),
        pytest.param("迁移 OR 部署", {"migrate", "rollout"}, id="or"),
        pytest.param("数据库 NOT deploy", {"no_deploy"}, id="not"),
        pytest.param('"数据库 deploy"', {"reversed"}, id="quoted-phrase-adjacent"),
        pytest.param("deploy 数据库 迁移", set(), id="all-terms-needed"),
        pytest.param("NOT 数据库", set(), id="only-negative"),
    ],
)
def test_mixed_script_queries_need_every_term_anywhere(
    store: Store, query: str, expected: set[str]
) -> None:
    ids = seed(
        store,
        [
            Msg("far_apart", "cli-1", "user", "deploy the service, then check the 数据库", 1001),
            Msg("reversed", "cli-1", "user", "数据库 deploy finished", 1002),
            Msg("no_deploy", "cli-1", "user", "数据库 only", 1003),
            Msg("migrate", "cli-1", "user", "迁移 done", 1004),
            Msg("rollout", "cli-1", "user", "部署 done", 1005),
            Msg("english", "cli-1", "user", "deploy database", 1006),
        ],
    )
    assert set(names_of(search(store, query), ids)) == expected


# -- filters and paging ------------------------------------------------------------------------
FILTER_CORPUS = [
    Msg("cli_user", "cli-1", "user", "report one 年度报告书", 1001),
    Msg("cli_assistant", "cli-1", "assistant", "report two 年度报告书", 1002),
    Msg("tg_user", "tg-1", "user", "report three 年度报告书", 2001),
    Msg("tg_tool", "tg-1", "tool", "report four 年度报告书", 2002, tool_name="web_search"),
    Msg("dc_user", "dc-1", "user", "report five 年度报告书", 3001),
]
EVERY_FILTER_HIT = {message.name for message in FILTER_CORPUS}


@pytest.mark.parametrize("query", ["report", "报告书", "报告"], ids=["words", "trigram", "short"])
@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        pytest.param({}, EVERY_FILTER_HIT, id="none"),
        pytest.param({"source_filter": ["telegram"]}, {"tg_user", "tg_tool"}, id="source"),
        pytest.param(
            {"source_filter": ["cli", "discord", "cli"]},
            {"cli_user", "cli_assistant", "dc_user"},
            id="sources-with-duplicate",
        ),
        pytest.param({"exclude_sources": ["telegram", "cli"]}, {"dc_user"}, id="exclude-sources"),
        pytest.param({"role_filter": ["user"]}, {"cli_user", "tg_user", "dc_user"}, id="role"),
        pytest.param(
            {
                "source_filter": ["cli", "telegram"],
                "exclude_sources": ["telegram"],
                "role_filter": ["assistant", "tool"],
            },
            {"cli_assistant"},
            id="combined",
        ),
        pytest.param({"source_filter": []}, set(), id="empty-source-list"),
        pytest.param({"role_filter": []}, set(), id="empty-role-list"),
        pytest.param({"exclude_sources": []}, EVERY_FILTER_HIT, id="empty-exclusion"),
        pytest.param({"source_filter": ["cli\x00"]}, set(), id="nul-source"),
        pytest.param({"source_filter": ["\ud800cli"]}, set(), id="surrogate-source"),
        pytest.param(
            {"exclude_sources": ["cli\x00", "\udfff"]}, EVERY_FILTER_HIT, id="unstorable-exclusions"
        ),
        pytest.param({"source_filter": ["'; DROP TABLE messages; --"]}, set(), id="injection"),
    ],
)
def test_filters(store: Store, query: str, kwargs: dict[str, Any], expected: set[str]) -> None:
    ids = seed(store, FILTER_CORPUS)
    assert set(names_of(search(store, query, **kwargs), ids)) == expected


PAGE_CORPUS = [
    Msg(f"item{n}", "cli-1", "user", f"page item {n} 第{n}页的内容记录", 1000 + n)
    for n in range(1, 6)
]


@pytest.mark.parametrize(
    ("limit", "offset", "expected_words", "expected_substring"),
    [
        pytest.param(20, 0, [1, 2, 3, 4, 5], [5, 4, 3, 2, 1], id="default"),
        pytest.param(2, 0, [1, 2], [5, 4], id="first-page"),
        pytest.param(2, 2, [3, 4], [3, 2], id="second-page"),
        pytest.param(2, 4, [5], [1], id="last-page"),
        pytest.param(2, 5, [], [], id="past-the-end"),
        pytest.param(2, -3, [1, 2], [5, 4], id="negative-offset-is-zero"),
        pytest.param(0, 0, [], [], id="zero-limit"),
        pytest.param(-1, 0, [], [], id="negative-limit"),
        pytest.param(2**70, 0, [1, 2, 3, 4, 5], [5, 4, 3, 2, 1], id="huge-limit"),
        pytest.param(5, 2**70, [], [], id="huge-offset"),
    ],
)
def test_limit_and_offset(
    store: Store,
    limit: int,
    offset: int,
    expected_words: list[int],
    expected_substring: list[int],
) -> None:
    """Equal-rank word hits come in id order; substring hits newest first."""
    ids = seed(store, PAGE_CORPUS)
    words = search(store, "item", limit=limit, offset=offset)
    substring = search(store, "内容记录", limit=limit, offset=offset)
    assert names_of(words, ids) == [f"item{n}" for n in expected_words]
    assert names_of(substring, ids) == [f"item{n}" for n in expected_substring]


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"limit": "5"}, id="str-limit"),
        pytest.param({"offset": 1.5}, id="float-offset"),
        pytest.param({"limit": True}, id="bool-limit"),
        pytest.param({"source_filter": "cli"}, id="bare-str-filter"),
        pytest.param({"role_filter": [1]}, id="non-str-item"),
    ],
)
def test_wrong_argument_types_raise_type_error(store: Store, kwargs: dict[str, Any]) -> None:
    with pytest.raises(TypeError):
        search(store, "report", **kwargs)


@pytest.mark.parametrize("query", [None, 42, b"report", ["report"]])
def test_non_str_query_raises_type_error(store: Store, query: Any) -> None:
    with pytest.raises(TypeError, match="query must be a str"):
        search(store, query)


# -- snippets --------------------------------------------------------------------------------
LONG_WORDS = (
    " ".join(f"w{n}" for n in range(100)) + " target " + " ".join(f"x{n}" for n in range(100))
)
LONG_CJK = "一二三四五六七八九十" * 5 + "数据库连接" + "十九八七六五四三二一" * 5


def test_word_snippet_marks_the_match(store: Store) -> None:
    seed(store, CORPUS)
    (hit,) = search(store, "gateway")
    assert hit.snippet.startswith("How do I deploy the >>>gateway<<<")
    assert "..." not in hit.snippet


@pytest.mark.parametrize(
    ("content", "expected"),
    [("answer 0", ">>>answer<<< 0"), ("one two answer 12 34", "one two >>>answer<<< 12 34"),
     ("answer", ">>>answer<<<")],
)  # fmt: skip
def test_word_snippet_of_a_short_message_keeps_every_word(
    store: Store, content: str, expected: str
) -> None:
    """PostgreSQL's fragment headline dropped a number that ended the message (issue 27)."""
    seed(store, [Msg("short", "cli-1", "assistant", content, 1001)])
    (hit,) = search(store, "answer")
    assert hit.snippet == expected


def test_word_snippet_of_long_text_is_a_window_with_ellipses(store: Store) -> None:
    seed(store, [Msg("long", "cli-1", "user", LONG_WORDS, 1001)])
    (hit,) = search(store, "target")
    assert hit.snippet.startswith("...") and hit.snippet.endswith("...")
    assert " w99 >>>target<<< x0 " in hit.snippet
    assert 30 <= len(hit.snippet.split()) <= 45  # about 40 words, as FTS5's snippet(..., 40)


@pytest.mark.parametrize(
    "query", [" ".join(["word"] * 400), "word WORD Word word*"], ids=["400-repeats", "cases"]
)
def test_a_query_that_repeats_its_words_gets_a_snippet_of_bounded_cost(
    store: Store, query: str
) -> None:
    """The field walk (issue 29): every token of a message is a hit of each repeat of a query
    word, and snippet()/ts_headline are quadratic in hits: 40 repeats of ``word`` over a
    message of 2,000 ``word``s took FTS5's snippet a minute (Hermes's search too), 400 (the
    2,048 characters a query may hold) took PostgreSQL's headline minutes. The snippet is cut
    as a long message's is (SQLite) or highlights each different term once (PostgreSQL)."""
    seed(store, [Msg("repeated", "cli-1", "user", "word " * 2000, 1001)])
    (hit,) = search(store, query)
    assert hit.snippet.startswith(">>>word<<< >>>word<<<") and hit.snippet.endswith("...")
    assert 10 <= len(hit.snippet.split()) <= 45


@pytest.mark.parametrize(
    ("query", "hits_per_token"),
    [("alpha beta", 1), ('"alpha beta" gamma', 1), ("x OR y NOT z", 1), ("word word word", 3),
     ("Word word", 2), ("café CAFE", 2), ("dep* deploy", 2), ('"a b" a', 2), ("a* b*", 2),
     ("NOT", 1), ("", 1)],
)  # fmt: skip
def test_hits_per_token_counts_the_phrases_one_token_can_start(
    query: str, hits_per_token: int
) -> None:
    from sessionstore.search.long_text_snippets import (
        LONG_MESSAGE_CHARS,
        highlight_query,
        snippet_chars,
    )
    from sessionstore.search.long_text_snippets import hits_per_token as count
    from sessionstore.search.sanitize import sanitize_fts5_query

    sanitized = sanitize_fts5_query(query)
    assert count(sanitized) == hits_per_token
    assert snippet_chars(sanitized) == LONG_MESSAGE_CHARS // hits_per_token
    if hits_per_token == 1:
        assert highlight_query(sanitized) == sanitized


@given(st.lists(st.sampled_from(["word", "Word", "other", "wo*", '"word other"', "OR"]),
                max_size=40))  # fmt: skip
def test_the_highlight_query_names_each_term_once(words: list[str]) -> None:
    from sessionstore.search.long_text_snippets import highlight_query, hits_per_token
    from sessionstore.search.sanitize import sanitize_fts5_query

    sanitized = sanitize_fts5_query(" ".join(words))
    highlighted = highlight_query(sanitized)
    terms = [term for term in highlighted.split(" OR ") if term]
    assert len({term.casefold() for term in terms}) == len(terms)
    assert hits_per_token(highlighted) <= hits_per_token(sanitized)


@pytest.mark.parametrize(
    ("content", "query", "expected"),
    [
        pytest.param("我们讨论了数据库迁移的方案", "数据库", "我们讨论了>>>数据库<<<迁移的方案",
                     id="trigram"),
        pytest.param("我们讨论了数据库迁移的方案", "迁移", "我们讨论了数据库>>>迁移<<<的方案",
                     id="short"),
        pytest.param("Deploy数据 now", "deploy数据", ">>>Deploy数据<<< now", id="ascii-case"),
    ],
)  # fmt: skip
def test_substring_snippet_marks_the_match(
    store: Store, content: str, query: str, expected: str
) -> None:
    seed(store, [Msg("m", "cli-1", "user", content, 1001)])
    (hit,) = search(store, query)
    assert hit.snippet == expected


@pytest.mark.parametrize("query", ["数据库连接", "库连"], ids=["trigram", "short"])
def test_substring_snippet_of_long_text_is_a_window_with_ellipses(store: Store, query: str) -> None:
    seed(store, [Msg("long", "cli-1", "user", LONG_CJK, 1001)])
    (hit,) = search(store, query)
    assert hit.snippet.startswith("...") and hit.snippet.endswith("...")
    assert f">>>{query}<<<" in hit.snippet
    window = hit.snippet.replace(">>>", "").replace("<<<", "").strip(".")
    assert window in LONG_CJK and 30 <= len(window) <= 50


_SNIPPET_TEXT = st.text(alphabet="数据库检查点。！？!?；;\n 　ab，.", max_size=70)


@settings(max_examples=300, deadline=None)
@given(content=_SNIPPET_TEXT, needle_length=st.integers(1, 4), data=st.data())
@example(content="。" * 30 + "数据库" + "检查。点!" * 8, needle_length=3, data=None)
def test_sqlite_snippet_cut_is_the_shared_snippet(
    content: str, needle_length: int, data: st.DataObject | None
) -> None:
    """SQLite's substring snippet, cut in one call from the window its statement reads
    (``_cut_snippet``: sentence ends searched inside it), is ``substring_snippet`` of the
    parts PostgreSQL's statement reads; the start of the text when the hit was not located."""
    side = SUBSTRING_SNIPPET_SIDE_CHARS
    last = max(1, len(content))
    position = last // 2 + 1 if data is None else data.draw(st.integers(0, last))
    if position == 0:
        window = content[: 2 * side + 1]
        expected = substring_snippet(0, None, None, window)
    else:
        start = max(0, position - 1 - side)
        end = position - 1 + needle_length
        window = content[start : end + side + 1]
        expected = substring_snippet(
            position, content[start : position - 1], content[position - 1 : end],
            content[end : end + side + 1],
        )  # fmt: skip
    assert sqlite_search._cut_snippet(position, window, needle_length) == expected


_WINDOW_TEXTS = [
    *("a" * before + "数据库。" + "b" * 40 for before in (0, 19, 20, 21, 150, 176, 177, 178, 300)),
    "前后" + "x" * 10 + "数据库 \x00tail",  # a NUL inside the window: substr() stops there
    "\ufffdjson:" + "x" * 5 + "数据库",  # marked: the head is the whole value
    "😀" * 30 + "数据库" + "尾" * 30,  # four UTF-8 bytes a character
    "ABC数据库DEF",
]
_SQL_WINDOWS = """
SELECT id, substr(coalesce(content, tool_name), max(1, p - 20), p - max(1, p - 20) + 24)
FROM (SELECT id, content, tool_name,
             coalesce(nullif(instr(lower(content), '数据库'), 0), instr(tool_name, '数据库')) AS p
      FROM messages)
"""


def test_substring_window_from_the_head_is_sqlites_substr(sqlite_store: Store) -> None:
    """Where a hit's snippet window ends inside its context head, SQLite's statement leaves the
    window out and it is sliced from the head (``sqlite._window``): the same text as
    ``substr()`` of the content, a NUL, 4-byte characters and the 200-character edge
    included; a marked text and a hit in the tool name keep the statement's window."""
    store = sqlite_store
    messages = [
        Msg(f"m{number}", "cli-1", "user", text, 1001 + number)
        for number, text in enumerate(_WINDOW_TEXTS)
    ]
    messages.append(Msg("tool", "cli-1", "tool", None, 1100, tool_name="x数据库"))
    seed(store, messages)
    query = substring_query("数据库")

    def read(conn: Connection) -> tuple[list[tuple[Any, ...]], dict[int, str]]:
        index, filters, page = SQLiteSearchIndex(), SearchFilters(), Page(50, 0)
        rows, size = index._substring_statement_rows(conn, query, filters, page, None)
        assert size == 3
        return rows, dict(conn.exec_driver_sql(_SQL_WINDOWS).all())

    rows, expected = store.read(read)
    assert len(rows) == len(messages)
    assert {row[0]: sqlite_search._window(row, 3) for row in rows} == expected
    assert {row[0] for row in rows if row[9] is None} == {1, 2, 3, 4, 5, 6, 10, 12, 13}


_HAYSTACKS = [
    "ABC数据库DEF", "abc数据库", "数据库" * 3, "Ä数据库ä", "前后x\x00数据库", "\x00数据库", "",
    "数据", "ＡＢＣ数据库", "データ数据库データ", "😀数据库", "DATA数据ABC库", "Ä数 据", "😀😀数",
]
_NEEDLES = ["数据库", "数据", "库", "データ", "😀数", "\x00数", "Ä数", "数 据"]


@pytest.mark.parametrize("needle", _NEEDLES)
def test_a_needle_without_ascii_letters_is_found_without_lowering(
    sqlite_store: Store, needle: str
) -> None:
    """The substring statement finds a needle without ASCII letters in the text as it is
    (``sqlite._found_sql``: no lowered copy of each page row's text): the very position and
    column the lowered search finds, for texts, NULs, blobs, numbers and NULL, in each
    column; a needle with ASCII letters keeps the lowered search."""
    assert not sqlite_search._ASCII_LETTER.search(needle)
    assert sqlite_search._ASCII_LETTER.search("数据abc") and sqlite_search._ASCII_LETTER.search("Z")
    values = [*_HAYSTACKS, *(text.encode() for text in _HAYSTACKS), None, 12, 1.5]
    cases = [(value, None, None) for value in values] + [
        (None, value, other) for value in values for other in (None, "数据库工具")
    ]
    sql = (
        "SELECT {found} FROM (SELECT :content AS content, :tool_calls AS tool_calls, "
        ":tool_name AS tool_name) AS m"
    )

    def found(conn: Connection, fold: bool) -> list[Any]:
        statement = sql.format(found=sqlite_search._found_sql(fold))
        values = ({"content": content, "tool_calls": calls, "tool_name": name, "needle": needle}
                  for content, calls, name in cases)  # fmt: skip
        return [conn.exec_driver_sql(statement, named).scalar() for named in values]

    folded, as_is = sqlite_store.read(lambda conn: (found(conn, True), found(conn, False)))
    assert as_is == folded
    assert {value & 3 for value in folded if value > 1} >= {1, 2}  # found in the columns


# -- context ---------------------------------------------------------------------------------
# Ids follow list order, timestamps do not: the session's order is (timestamp, id).
CONTEXT_CORPUS = [
    Msg("first", "cli-1", "user", "alpha opens", 10),
    Msg("third", "cli-1", "assistant", "gamma answers", 30),
    Msg("second", "cli-1", "user", "beta asks", 20),
    Msg("elsewhere", "tg-1", "user", "interleaved in another session", 25),
    Msg("fourth", "cli-1", "user", "delta " + "d" * 300, 40),
    Msg("tie_low_id", "cli-1", "tool", "epsilon tie", 50, tool_name="terminal"),
    Msg("tie_high_id", "cli-1", "assistant", None, 50),
    Msg("alone", "dc-1", "user", "lonely message", 1),
]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        pytest.param("alpha", ["first", "second"], id="first-of-session"),
        pytest.param("beta", ["first", "second", "third"], id="middle-by-timestamp"),
        pytest.param("gamma", ["second", "third", "fourth"], id="skips-other-session"),
        pytest.param("epsilon", ["fourth", "tie_low_id", "tie_high_id"], id="tie-by-id"),
        pytest.param("lonely", ["alone"], id="only-message"),
        pytest.param("interleaved", ["elsewhere"], id="own-session-only"),
    ],
)
def test_context_is_previous_match_next(store: Store, query: str, expected: list[str]) -> None:
    seed(store, CONTEXT_CORPUS)
    by_name = {message.name: message for message in CONTEXT_CORPUS}
    (hit,) = search(store, query)
    assert hit.context == [
        ContextMessage(by_name[name].role, (by_name[name].content or "")[:200]) for name in expected
    ]


def test_context_content_is_cut_to_200_chars_and_null_is_empty(store: Store) -> None:
    seed(store, CONTEXT_CORPUS)
    (hit,) = search(store, "epsilon")
    assert [message.content for message in hit.context] == [
        ("delta " + "d" * 300)[:200],
        "epsilon tie",
        "",
    ]


# NUL characters before, at and past the 200th: Hermes cuts the text in Python, so a context
# line shows what follows a NUL in its first 200 characters (SQLite's substr() stops there).
NUL_CONTEXT_CORPUS = [
    Msg("short", "cli-1", "user", "before\x00after, a short text", 10),
    Msg("hit", "cli-1", "assistant", "needle 针头测试中", 20),
    Msg("long", "cli-1", "user", "x" * 50 + "\x00" + "tail " * 200, 30),  # over 800 bytes
    Msg("hit2", "tg-1", "assistant", "needle 针头测试中 again", 40),
    Msg("late", "tg-1", "user", "y" * 250 + "\x00z", 50),
    Msg("first", "dc-1", "user", "\x00" + "a text behind a leading NUL " * 9, 60),
    Msg("hit3", "dc-1", "assistant", "needle 针头测试中 too", 70),
    Msg("edge", "dc-1", "user", "e" * 199 + "\x00" + "after the edge", 80),
    Msg("cjk", "tg-1", "user", "数" * 150 + "\x00" + "尾" * 300, 90),  # three bytes a character
    Msg("hit4", "tg-1", "assistant", "needle 针头测试中 four", 100),
    Msg("at201", "tg-1", "user", "f" * 200 + "\x00" + "g" * 700, 110),
]


@pytest.mark.parametrize("query", ["needle", "针头测试", "针头"], ids=["words", "trigram", "short"])
def test_context_keeps_what_follows_a_nul_in_the_first_200_chars(
    sqlite_store: Store, query: str
) -> None:
    """(SQLite: PostgreSQL stores a NUL as U+FFFD.)"""
    seed(sqlite_store, NUL_CONTEXT_CORPUS)
    stored = {message.name: message.content or "" for message in NUL_CONTEXT_CORPUS}
    hits = sorted(search(sqlite_store, query), key=lambda hit: hit.id)
    assert [[message.content for message in hit.context] for hit in hits] == [
        [stored[name][:200] for name in names]
        for names in (("short", "hit", "long"), ("hit2", "late"), ("first", "hit3", "edge"),
                      ("cjk", "hit4", "at201"))
    ]


@settings(max_examples=300, deadline=None)
@given(st.text(st.sampled_from(["a", " ", "\x00", "数", "é", "😀"]), max_size=1_000)
       | st.binary(max_size=1_000))  # fmt: skip
@example("数" * 266 + "\x00" + "z" * 10)  # 799 bytes before the NUL, the 267th character
@example("a" * 200 + "\x00" + "a" * 700)
def test_sqlite_context_head_gives_hermes_s_first_200_characters(content: str | bytes) -> None:
    """SQLite's head of a context line, cut as the caller cuts it, is Hermes's
    ``content[:200]`` of any text (NULs anywhere, 1-4 bytes a character), as SQLite stores
    it; a blob's line is that of its first 200 bytes, as before."""
    from sessionstore.search.context import SQLITE_CONTEXT_COLUMNS, context_dicts

    conn = connect_like_the_store(":memory:")
    try:
        conn.execute("CREATE TABLE m (role TEXT, content)")
        conn.execute("INSERT INTO m VALUES ('user', ?)", (content,))
        head_sql = SQLITE_CONTEXT_COLUMNS.split(", context_before.id")[0]
        (row,) = conn.execute(f"SELECT {head_sql} FROM m").fetchall()
        if isinstance(content, bytes):
            blob_head = conn.execute("SELECT substr(content, 1, 200) FROM m").fetchone()[0]
            (expected,) = context_dicts("user", blob_head, None, None, None, None, None, None)
        else:
            expected = {"role": "user", "content": content[:200]}
    finally:
        conn.close()
    (line,) = context_dicts(*row, None, None, None, None, None, None)
    assert line == expected


@pytest.mark.parametrize("query", ["needle", "针头测试", "针头"], ids=["words", "trigram", "short"])
def test_statement_count_does_not_grow_with_hits(store: Store, query: str) -> None:
    seed(
        store,
        [
            Msg(f"m{n}", ("cli-1", "tg-1", "dc-1")[n % 3], "user", f"needle {n} 针头测试中", n)
            for n in range(1, 16)
        ],
    )
    counts = {}
    search(store, query, limit=1)  # per-connection lookups (e.g. PostgreSQL's tsvector source)
    for limit in (1, 15):
        with StatementLog(store) as log:
            hits = search(store, query, limit=limit)
        assert len(hits) == limit and all(len(hit.context) >= 2 for hit in hits)
        counts[limit] = len(log.statements)
    assert counts[1] == counts[15] <= 7


# -- hostile input ---------------------------------------------------------------------------
HOSTILE_QUERIES = [
    "\x00", "report\x00", "\x00报告", "\ud800", "report\udfff", "报\ud800告", '"', '""', "*",
    "***", "^", "{}", "(((", ")))", "NOT", "OR OR", "AND report", "report NOT", "-report",
    "col:report", "NEAR(report five)", "'; DROP TABLE messages; --", "%", "_", "\\", "%报%",
    "_告", "报\\", "report" * 20_000, "报告 " * 20_000, "报" * 100_000, "a-" * 10_000,
    "NOT report " * 500, "\t\n\r", "🤖", "数据库'",
]  # fmt: skip


@pytest.mark.parametrize("query", HOSTILE_QUERIES, ids=range(len(HOSTILE_QUERIES)))
def test_hostile_queries_return_a_list_and_change_nothing(store: Store, query: str) -> None:
    seed(store, FILTER_CORPUS)
    before = dump(store)
    hits = search(store, query, source_filter=["cli", "tg\x00"], role_filter=["user", "\ud800"])
    assert isinstance(hits, list) and all(isinstance(hit, SearchHit) for hit in hits)
    assert dump(store) == before


@pytest.mark.parametrize(
    ("needle", "expected"),
    [
        pytest.param("据_", {"underscore"}, id="underscore-short"),
        pytest.param("据%", {"percent"}, id="percent-short"),
        pytest.param("据\\", {"backslash"}, id="backslash-short"),
        pytest.param("数据_库", {"underscore"}, id="underscore-trigram"),
        pytest.param("数据%库", {"percent"}, id="percent-trigram"),
        pytest.param('数"据', {"quote"}, id="double-quote-trigram"),
    ],
)
def test_substring_search_takes_wildcards_literally(
    store: Store, needle: str, expected: set[str]
) -> None:
    ids = seed(
        store,
        [
            Msg("underscore", "cli-1", "user", "数据_库", 1),
            Msg("percent", "cli-1", "user", "数据%库", 2),
            Msg("backslash", "cli-1", "user", "数据\\库", 3),
            Msg("quote", "cli-1", "user", '数"据', 4),
            Msg("plain", "cli-1", "user", "数据x库", 5),
        ],
    )
    rows = store.read(
        lambda conn: search_index_for(dialect_for(conn)).substring_matches(
            conn, substring_query(needle), SearchFilters(), Page(limit=10, offset=0)
        )
    )
    assert {name for name, id_ in ids.items() if id_ in {row.id for row in rows}} == expected


SYNTAX = ['"', "*", "(", ")", "+", "-", "^", ":", ".", "%", "_", "\\", "'", " ", "AND", "OR",
          "NOT", "NEAR", "\x00", "\ud800", "\udfff", "数据", "报告", "report", "年度"]  # fmt: skip
HOSTILE_TEXT = st.one_of(
    st.text(st.characters(codec=None, exclude_categories=()), max_size=60),
    st.lists(st.sampled_from(SYNTAX), max_size=12).map("".join),
    st.lists(st.sampled_from(SYNTAX), max_size=12).map(" ".join),
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(query=HOSTILE_TEXT, source=st.none() | st.lists(HOSTILE_TEXT, max_size=3))
@example(query='\x00\ud800"*(^{NOT', source=["\x00"])
def test_property_any_text_returns_a_list_and_changes_nothing(
    store: Store, query: str, source: list[str] | None
) -> None:
    if not dump(store)[1]:
        seed(store, FILTER_CORPUS)  # once per store: hypothesis reuses the fixture
    before = dump(store)
    hits = search(store, query, source_filter=source, exclude_sources=source, role_filter=source)
    assert isinstance(hits, list)
    assert dump(store) == before


# -- SQLite: the MATCH error boundary ----------------------------------------------------------
@pytest.mark.parametrize("raw_match", ['"unbalanced', "AND", "(", "col:report", "report NEAR"])
def test_sqlite_match_syntax_errors_find_nothing(sqlite_store: Store, raw_match: str) -> None:
    """The backend itself, given raw FTS5 syntax the sanitizer would never let through. (On a
    copy of the process's migrated file, ``sqlite_store``: the chain's own result, as the
    upgrade of a new file here was, and not this test's subject.)"""
    seed(sqlite_store, FILTER_CORPUS)
    index = SQLiteSearchIndex()
    page = Page(limit=10, offset=0)
    found = sqlite_store.read(lambda c: index.word_matches(c, raw_match, SearchFilters(), page))
    assert found == []


@pytest.mark.parametrize(
    ("message", "is_query"),
    [
        ('fts5: syntax error near ""', True),
        ("no such column: col", True),
        ("no such table: messages_fts", True),
        ("no such tokenizer: trigram", True),
        ("unknown special query: x", True),
        ("database is locked", False),
        ("disk I/O error", False),
        ("database disk image is malformed", False),
    ],
)
def test_only_query_errors_are_swallowed(message: str, is_query: bool) -> None:
    exc = OperationalError("SELECT", {}, sqlite3.OperationalError(message))
    assert is_query_error(exc) is is_query


# -- SQLite: the trigram index (revision 0007) -------------------------------------------------
@pytest.fixture
def sqlite_store(migrated_sqlite_url: str) -> Iterator[Store]:
    with Store.open(migrated_sqlite_url) as opened:
        yield opened


def sqlite_names(store: Store, kind: str) -> set[str]:
    return store.read(
        lambda c: {
            row[0]
            for row in c.execute(
                sa.text("SELECT name FROM sqlite_master WHERE type = :k"), {"k": kind}
            )
        }
    )


# Hermes v10's names (revision 0013 replaced 0007's messages_trigram with them).
TRIGRAM_TABLE = "messages_fts_trigram"
TRIGRAM_TRIGGERS = {
    "messages_fts_trigram_insert", "messages_fts_trigram_delete", "messages_fts_trigram_update",
}  # fmt: skip
V0007_TRIGRAM_TRIGGERS = {
    "messages_trigram_insert", "messages_trigram_delete", "messages_trigram_update",
}  # fmt: skip


def trigram_ids(store: Store, needle: str, table: str = TRIGRAM_TABLE) -> set[int]:
    return store.read(
        lambda c: {
            row[0]
            for row in c.execute(
                sa.text(f"SELECT rowid FROM {table} WHERE {table} MATCH :q"),
                {"q": '"' + needle + '"'},
            )
        }
    )


def assert_trigram_index_intact(store: Store, table: str = TRIGRAM_TABLE) -> None:
    def check(conn: Connection) -> None:
        conn.execute(sa.text(f"INSERT INTO {table}({table}) VALUES('integrity-check')"))
        # rank 1: also compare the index with the content of messages, row by row.
        conn.execute(
            sa.text(f"INSERT INTO {table}({table}, rank) VALUES('integrity-check', 1)")
        )

    store.write(check)


def test_trigram_table_and_triggers_exist(sqlite_store: Store) -> None:
    assert TRIGRAM_TABLE in sqlite_names(sqlite_store, "table")
    assert sqlite_names(sqlite_store, "trigger") >= TRIGRAM_TRIGGERS
    assert not {"messages_trigram"} & sqlite_names(sqlite_store, "table"), "one trigram index"
    ddl = sqlite_store.read(
        lambda c: c.execute(
            sa.text("SELECT sql FROM sqlite_master WHERE name = :name"), {"name": TRIGRAM_TABLE}
        ).scalar_one()
    )
    # The v11 layout every store is created in (every Hermes release searches it): over the
    # view of the CJK rows, tool output included (tests/search/test_fts_layouts.py: layout 3).
    assert "tokenize='trigram'" in ddl and "content=messages_fts_trigram_source" in ddl


def test_trigram_index_follows_insert_update_delete(sqlite_store: Store) -> None:
    ids = seed(sqlite_store, [Msg("m", "cli-1", "user", "今天的天气很好", 1)])
    assert trigram_ids(sqlite_store, "天气很") == {ids["m"]}
    assert_trigram_index_intact(sqlite_store)

    sqlite_store.write(
        lambda c: c.execute(sa.text("UPDATE messages SET content = '明天会下雨' WHERE id = 1"))
    )
    assert trigram_ids(sqlite_store, "天气很") == set()
    assert trigram_ids(sqlite_store, "会下雨") == {ids["m"]}
    assert_trigram_index_intact(sqlite_store)

    sqlite_store.write(lambda c: c.execute(sa.text("DELETE FROM messages WHERE id = 1")))
    assert trigram_ids(sqlite_store, "会下雨") == set()
    assert_trigram_index_intact(sqlite_store)


BIGRAM_TABLE = "messages_cjk_bigram"


def sqlite_plan(store: Store, statement: str, parameters: Any) -> str:
    rows = store.read(
        lambda c: c.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters).all()
    )
    return "\n".join(str(row[-1]) for row in rows)


@pytest.mark.parametrize("needle", ["库", "数据", "数据库", "deploy 数据", "迁移 OR 库"])
def test_cjk_search_uses_the_bigram_index_not_a_scan(sqlite_store: Store, needle: str) -> None:
    """1-, 2- and 3-character needles, mixed and OR queries: candidates from the index only."""
    ids = seed(
        sqlite_store,
        [*CORPUS, Msg("mixed", "cli-1", "user", "deploy: 数据库迁移", 9000)],
    )
    with StatementLog(sqlite_store) as log:
        hits = search(sqlite_store, needle)
    assert hits and all(ids_id in ids.values() for ids_id in (hit.id for hit in hits))
    ((statement, parameters),) = log.containing(f"{BIGRAM_TABLE} MATCH")
    plan = sqlite_plan(sqlite_store, statement, parameters)
    assert f"SCAN {BIGRAM_TABLE} VIRTUAL TABLE" in plan
    full_scans = [line for line in plan.splitlines() if line.split()[:2] in (
        ["SCAN", "m"], ["SCAN", "messages"]
    )]  # fmt: skip
    assert not full_scans, plan


@pytest.mark.slow  # 24 stores seeded: 0.03-0.07 CPU s each
@pytest.mark.parametrize("early", [False, True])
@pytest.mark.parametrize(
    "filters", [{}, {"sort": "oldest"}, {"source_filter": ["cli"]}, {"offset": 1, "limit": 2}]
)
@pytest.mark.parametrize("needle", ["库", "数据", "数据库"])
def test_substring_page_rows_are_sorted_once(
    sqlite_store: Store, monkeypatch: pytest.MonkeyPatch, needle: str,
    filters: dict[str, Any], early: bool,
) -> None:  # fmt: skip
    """The substring statement sorts its page, not its result rows again: the hit's subquery
    and the outer query take their time order from the level below (no sorter of theirs),
    whether the page is chosen among every candidate or among the first hits (early)."""
    if early:
        monkeypatch.setattr(sqlite_search, "_STOP_EARLY_FROM", 0)
    seed(sqlite_store, [
        *CORPUS,
        Msg("first", "cli-1", "user", "deploy: 数据库迁移", 9000),
        Msg("second", "cli-1", "assistant", "数据库已迁移", 9001),
        Msg("third", "cli-1", "user", "库里的数据库", 9002),
    ])  # fmt: skip
    with StatementLog(sqlite_store) as log:
        hits = search(sqlite_store, needle, **filters)
    assert hits
    statement, parameters = log.containing(f"{BIGRAM_TABLE} MATCH")[-1]
    rows = sqlite_store.read(
        lambda c: c.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters).all()
    )
    if any(row[-1] == "MATERIALIZE hit" for row in rows):
        # SQLite 3.40 (the standard library's, where pysqlite3 has no wheel) materializes the
        # hit and sorts the page's few rows again at each level: its planner's, not ours.
        pytest.skip("this SQLite materializes the hit: its planner re-sorts the page's rows")
    (hit_level,) = [row[0] for row in rows if row[-1] == "CO-ROUTINE hit"]
    sorters = [row for row in rows if str(row[-1]).startswith("USE TEMP B-TREE")]
    assert sorters, rows  # the page's own
    assert not [row for row in sorters if row[1] in (0, hit_level)], rows


@pytest.mark.parametrize(
    "filters", [{}, {"role_filter": ["user"]}, {"source_filter": ["cli"]}, {"offset": 1}]
)
def test_best_first_word_page_is_one_statement_in_fts5_rank_order(
    sqlite_store: Store, filters: dict[str, Any]
) -> None:
    """A best-first page near the top is one statement whose order FTS5's rank gives (no
    sorter of SQLite's: snippet() and the context run for the page's rows only)."""
    seed(sqlite_store, CORPUS)
    with StatementLog(sqlite_store) as log:
        hits = search(sqlite_store, "gateway OR deploy OR build", limit=1, **filters)
    assert hits
    ((statement, parameters),) = log.containing("messages_fts MATCH")
    assert "snippet(" in statement
    plan = sqlite_plan(sqlite_store, statement, parameters)
    assert "TEMP B-TREE" not in plan, plan


@pytest.mark.parametrize("needle", ["库", "数据", "迁移 OR 库"])
@pytest.mark.parametrize(
    "filters",
    [{}, {"role_filter": ["user"]}, {"source_filter": ["cli"]}, {"sort": "oldest", "offset": 1}],
    ids=["plain", "role", "source", "oldest-offset"],
)
def test_short_cjk_pages_come_from_the_covering_index(
    sqlite_store: Store, needle: str, filters: dict[str, Any]
) -> None:
    """Needles the bigram tokens answer alone choose their page from revision 0024's covering
    index (no candidate's table row read), and find what a scan finds."""
    seed(sqlite_store, [*CORPUS, Msg("mixed", "cli-1", "user", "deploy: 数据库迁移", 9000)])
    with StatementLog(sqlite_store) as log:
        hits = search(sqlite_store, needle, **filters)
    ((statement, parameters),) = log.containing(f"{BIGRAM_TABLE} MATCH")
    plan = sqlite_plan(sqlite_store, statement, parameters)
    assert "USING COVERING INDEX ix_messages_substring_page" in plan, plan
    index_names = sqlite_store.read(
        lambda c: {str(row[0]) for row in c.exec_driver_sql(
            "SELECT name FROM sqlite_master WHERE type = 'index'")}
    )  # fmt: skip
    assert "ix_messages_substring_page" in index_names
    sqlite_store.write(lambda c: c.exec_driver_sql("DROP INDEX ix_messages_substring_page"))
    # Without it (a store below revision 0024) the same hits come from the table's rows.
    assert [hit.id for hit in search(sqlite_store, needle, **filters)] == [hit.id for hit in hits]


def _time_order_corpus(shuffled: bool) -> list[Msg]:
    """60 CJK messages (迁移 in each, 检查点 in every third); ``shuffled``: times that
    disagree with the ids (a late id with the earliest time, early ids with the latest)."""
    messages = []
    for number in range(60):
        text = "数据库迁移" + ("，检查点" if number % 3 == 0 else "")
        timestamp = 1000.0 + number
        if shuffled and number in (2, 5):
            timestamp = 9000.0 + number  # an early id, the latest time
        if shuffled and number == 58:
            timestamp = 10.0  # a late id, the earliest time
        session = "cli-1" if number % 2 else "tg-1"
        messages.append(Msg(f"m{number}", session, "user" if number % 4 else "assistant",
                            text, timestamp))
    return messages


@pytest.mark.parametrize("shuffled", [False, True], ids=["ids-in-time-order", "ids-disagree"])
@pytest.mark.parametrize("needle", ["迁移", "检查点"])
@pytest.mark.parametrize(
    "filters",
    [{}, {"limit": 5}, {"limit": 5, "offset": 3}, {"sort": "oldest", "limit": 4},
     {"sort": "oldest", "limit": 4, "offset": 2}, {"role_filter": ["user"], "limit": 5},
     {"source_filter": ["cli"], "limit": 5}],
    ids=["plain", "page", "offset", "oldest", "oldest-offset", "role", "source"],
)
def test_substring_pages_stop_early_only_when_ids_follow_time(
    sqlite_store: Store, shuffled: bool, needle: str, filters: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A page of substring hits is taken from the first hits in id order only when revision
    0040's time index proves no other hit belongs in it: the same hits, in the same time
    order, as ordering every candidate (the store without that index), ids agreeing with
    times or not."""
    # A store this small orders every candidate; the rule under test applies from 10,000.
    monkeypatch.setattr(sqlite_search, "_STOP_EARLY_FROM", 0)
    seed(sqlite_store, _time_order_corpus(shuffled))
    with StatementLog(sqlite_store) as log:
        hits = [hit.id for hit in search(sqlite_store, needle, **filters)]
    ordered_all = [statement for statement, _ in log.containing(f"{BIGRAM_TABLE} MATCH")
                   if "first_hits" not in statement]  # fmt: skip
    stopped_early = not ordered_all
    sqlite_store.write(lambda c: c.exec_driver_sql("DROP INDEX ix_messages_time"))
    assert hits == [hit.id for hit in search(sqlite_store, needle, **filters)]
    assert hits
    # A short page stops early where ids follow times, and not where an early id carries
    # the latest time and a late one the earliest (a page holding every hit always can).
    if "limit" in filters:
        assert stopped_early is not shuffled


@pytest.mark.parametrize("shuffled", [False, True], ids=["ids-in-time-order", "ids-disagree"])
@pytest.mark.parametrize(
    "filters",
    [{"sort": "newest", "limit": 5}, {"sort": "newest", "limit": 5, "offset": 3},
     {"sort": "oldest", "limit": 4}, {"sort": "oldest", "limit": 4, "offset": 2},
     {"sort": "newest", "role_filter": ["user"], "limit": 5},
     {"sort": "newest", "source_filter": ["cli"], "limit": 5}, {"sort": "newest"}],
    ids=["newest", "newest-offset", "oldest", "oldest-offset", "role", "source", "all"],
)
def test_word_pages_in_time_order_stop_early_only_when_ids_follow_time(
    sqlite_store: Store, shuffled: bool, filters: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A word search in time order takes its page from the first matches in id order only
    when revision 0040's time index proves it: the same page as ordering every match."""
    # A store this small orders every candidate; the rule under test applies from 10,000.
    monkeypatch.setattr(sqlite_search, "_STOP_EARLY_FROM", 0)
    corpus = [
        Msg(m.name, m.session, m.role, f"deploy step {number}", m.timestamp)
        for number, m in enumerate(_time_order_corpus(shuffled))
    ]
    seed(sqlite_store, corpus)
    with StatementLog(sqlite_store) as log:
        hits = [hit.id for hit in search(sqlite_store, "deploy", **filters)]
    stopped_early = not log.containing("ORDER BY m.timestamp")  # no match ordered by time
    sqlite_store.write(lambda c: c.exec_driver_sql("DROP INDEX ix_messages_time"))
    assert hits == [hit.id for hit in search(sqlite_store, "deploy", **filters)]
    assert len(hits) == filters.get("limit", 20)
    assert stopped_early is not shuffled


def test_cjk_search_scans_when_the_bigram_index_is_absent(sqlite_store: Store) -> None:
    """A store below revision 0021 (opened read-only, say) has no bigram index: scan."""
    ids = seed(sqlite_store, CORPUS)
    cjk_ddl = pytest.importorskip("sessionstore._migrations.revision_0021_ddl")
    sqlite_store.write(cjk_ddl.sqlite_drop_bigram_index)
    with StatementLog(sqlite_store) as log:
        hits = search(sqlite_store, "数据库")
    assert names_of(hits, ids) == ["chinese"]
    assert log.containing("LIKE") and not log.containing(f"{BIGRAM_TABLE} MATCH")



def test_cjk_search_follows_its_index_dropped_and_made_under_it(
    sqlite_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A substring search uses the catalog an earlier search read for up to a second
    (``_substring_present``: no statement of its own): an index dropped since (by a repair,
    another program) fails its statement, which is read again from the catalog; one made since
    is used once the catalog is read again. The hits are the same throughout."""
    ids = seed(sqlite_store, CORPUS)
    cjk_ddl = pytest.importorskip("sessionstore._migrations.revision_0021_ddl")
    assert names_of(search(sqlite_store, "数据库"), ids) == ["chinese"]
    sqlite_store.write(cjk_ddl.sqlite_drop_bigram_index)
    with StatementLog(sqlite_store) as log:
        assert names_of(search(sqlite_store, "数据库"), ids) == ["chinese"]
    assert log.containing("LIKE")
    sqlite_store.write(lambda conn: SQLiteSearchIndex().create(conn))
    assert names_of(search(sqlite_store, "数据库"), ids) == ["chinese"]
    monkeypatch.setattr(sqlite_search, "_CATALOG_TRUSTED_S", 0.0)
    with StatementLog(sqlite_store) as log:
        assert names_of(search(sqlite_store, "数据库"), ids) == ["chinese"]
    assert log.containing(f"{BIGRAM_TABLE} MATCH")

def bigram_ids(store: Store, needle: str) -> set[int]:
    from sessionstore.search.sqlite import bigram_match

    match = bigram_match(substring_query(needle))
    return store.read(
        lambda c: {
            row[0]
            for row in c.execute(
                sa.text(f"SELECT rowid FROM {BIGRAM_TABLE} WHERE {BIGRAM_TABLE} MATCH :q"),
                {"q": match},
            )
        }
    )


def test_bigram_index_follows_raw_insert_update_delete(sqlite_store: Store) -> None:
    """Writes that bypass this package (a raw connection, as Hermes writes) are indexed by
    the triggers; the doctor finds the index in step and intact after each."""
    from sessionstore.ops import doctor

    def health() -> list[str]:
        report = doctor.diagnose(sqlite_store)
        return [f"{c.name}:{c.status}" for c in report.checks if c.name.startswith("fts_")]

    ids = seed(sqlite_store, [Msg("m", "cli-1", "user", "今天的天气很好", 1)])
    assert bigram_ids(sqlite_store, "天") == {ids["m"]}
    assert bigram_ids(sqlite_store, "天气") == {ids["m"]}
    path = sqlite_store.engine.url.database
    raw = connect_like_the_store(str(path), isolation_level=None)
    try:
        raw.execute(
            "UPDATE messages SET content = 'plain', tool_name = '工具' WHERE id = ?", (ids["m"],)
        )
        assert bigram_ids(sqlite_store, "天气") == set()
        assert bigram_ids(sqlite_store, "工") == {ids["m"]}
        raw.execute(
            "INSERT INTO messages (session_id, role, content, tool_calls, timestamp) "
            "VALUES ('cli-1', 'user', 'ascii only', '[{\"q\": \"数据\"}]', 2)"
        )
        assert bigram_ids(sqlite_store, "数据") == {ids["m"] + 1}
        assert health() == ["fts_objects:ok", "fts_parity:ok", "fts_integrity:ok"]
        raw.execute("DELETE FROM messages")
        assert bigram_ids(sqlite_store, "工") == set() == bigram_ids(sqlite_store, "数")
        assert health() == ["fts_objects:ok", "fts_parity:ok", "fts_integrity:ok"]
        raw.execute(f"DELETE FROM {BIGRAM_TABLE}_docsize")  # damage the doctor must see
        raw.execute(
            "INSERT INTO messages (session_id, role, content, timestamp) "
            "VALUES ('cli-1', 'user', '再来一次', 3)"
        )
        raw.execute(f"DELETE FROM {BIGRAM_TABLE}_docsize")
    finally:
        raw.close()
    assert "fts_parity:fail" in health()
    doctor.repair(sqlite_store, doctor.diagnose(sqlite_store))
    assert health() == ["fts_objects:ok", "fts_parity:ok", "fts_integrity:ok"]
    assert len(search(sqlite_store, "再")) == 1


def test_ascii_rows_are_never_indexed_and_cost_no_glob(sqlite_store: Store) -> None:
    """The prefilter: byte length = character length skips the CJK test for ASCII rows, and a
    non-ASCII row without CJK is not indexed either (the bigram index, and the trigram index of
    the v11 layout every store is created in; layout 3's is over every member row, with no CJK
    test: tests/search/test_fts_layouts.py)."""
    seed(
        sqlite_store,
        [
            Msg("ascii", "cli-1", "user", "plain english " * 50, 1),
            Msg("accents", "cli-1", "user", "café naïve", 2),
            Msg("cjk", "cli-1", "user", "中文", 3),
        ],
    )
    held = sqlite_store.read(
        lambda c: c.exec_driver_sql(f"SELECT count(*) FROM {BIGRAM_TABLE}_docsize").scalar()
    )
    assert held == 1
    triggers = sqlite_store.read(
        lambda c: c.exec_driver_sql(
            "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND sql LIKE '%GLOB%'"
        ).all()
    )
    assert {name for name, _ in triggers} == {*TRIGRAM_TRIGGERS, *(
        f"{BIGRAM_TABLE}_{event}" for event in ("insert", "delete", "update")
    )}
    for name, sql in triggers:
        when = sql.split(" BEGIN")[0]
        assert when.index("length(CAST(") < when.index("GLOB"), name


def test_revision_0007_skips_the_index_without_the_trigram_tokenizer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, replays: list[str]
) -> None:
    """(``replays``: the new store must come from the chain under the patched probe, not from
    a store another test of this process built, and what it builds must not outlive the
    test: ``sessionstore.schema.new_store``.)"""
    from sessionstore.search import sqlite_ddl

    search_ddl = pytest.importorskip("sessionstore._migrations.search_ddl")
    monkeypatch.setattr(
        search_ddl,
        "SQLITE_PROBE_TRIGRAM",
        "CREATE VIRTUAL TABLE temp.messages_trigram_probe USING fts5(c, tokenize='no_such')",
    )
    # The repair after the chain asks the runtime's probe: the same library says the same.
    monkeypatch.setattr(
        sqlite_ddl,
        "TRIGRAM_PROBE",
        f"CREATE VIRTUAL TABLE {sqlite_ddl.TRIGRAM_PROBE_TABLE} USING fts5(c, tokenize='no_such')",
    )
    url = f"sqlite:///{tmp_path}/state.db"
    migrate.upgrade(url)
    assert migrate.current(url) == migrate.HEAD_REVISION
    assert replays == []
    with Store.open(url) as store:
        tables = sqlite_names(store, "table")
        assert not {
            name for name in tables if name.startswith(("messages_trigram", TRIGRAM_TABLE))
        }
        ids = seed(store, CORPUS)
        assert names_of(search(store, "数据库"), ids) == ["chinese"]


def test_revision_0007_up_down_up_keeps_schema_version_and_indexes_existing_rows(
    empty_url: str,
) -> None:
    migrate.upgrade(empty_url, "0006")
    with Store.open(empty_url) as store:
        ids = seed(store, CORPUS)  # rows that exist before the index does
    for revision in ("0007", "0006", "0007"):
        (migrate.upgrade if revision == "0007" else migrate.downgrade)(empty_url, revision)
        with Store.open(empty_url) as store:
            version = store.read(
                lambda c: c.execute(sa.text("SELECT version FROM schema_version")).scalars().all()
            )
            assert version == [6]
            if is_sqlite(store):
                present = "messages_trigram" in sqlite_names(store, "table")
                assert present is (revision == "0007")
                triggers = sqlite_names(store, "trigger")
                assert (triggers >= V0007_TRIGRAM_TRIGGERS) is (revision == "0007")
            assert names_of(search(store, "数据库"), ids) == ["chinese"]
    with Store.open(empty_url) as store:
        if is_sqlite(store):
            assert trigram_ids(store, "数据库", "messages_trigram") == {ids["chinese"]}
            assert_trigram_index_intact(store, "messages_trigram")


# -- PostgreSQL: the planner uses the indexes ---------------------------------------------------
# slow: its rows are the server's work (~4 server CPU s, 5 s of the inner loop's wall), which
# the test process's CPU, and so tests/slow_tests.txt's measure, does not count.
@pytest.mark.slow
@pytest.mark.parametrize("store_url", ["postgresql"], indirect=True)
def test_postgresql_search_plans_use_the_gin_indexes(store: Store) -> None:
    def fill(conn: Connection) -> None:
        conn.execute(
            sa.text("INSERT INTO sessions (id, source, started_at) VALUES ('s', 'cli', 1)")
        )
        conn.execute(
            sa.text(
                "INSERT INTO messages (session_id, role, content, timestamp) "
                "SELECT 's', 'user', 'filler text number ' || g || ' 普通的内容' || g, g "
                "FROM generate_series(1, 30000) AS g"
            )
        )
        conn.execute(
            sa.text(
                "INSERT INTO messages (session_id, role, content, timestamp) "
                "VALUES ('s', 'user', 'rare needle 我们讨论了数据库迁移的方案', 5000)"
            )
        )

    store.write(fill)
    store.write(lambda c: c.execute(sa.text("ANALYZE messages")))
    plans = {}
    grams = "sessionstore_cjk_grams"
    queries = (
        ("needle", "@@"), ("数据库迁移", grams), ("库", grams), ("迁移", grams),
        ("rare 数据", grams),
    )  # fmt: skip
    for query, marker in queries:
        with StatementLog(store) as log:
            assert len(search(store, query)) == 1
        ((statement, parameters),) = log.containing(marker)

        def explain(
            conn: Connection, statement: str = statement, parameters: Any = parameters
        ) -> str:
            conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
            rows = conn.exec_driver_sql("EXPLAIN " + statement, parameters)
            return "\n".join(row[0] for row in rows)

        plans[query] = store.read(explain)
    assert "ix_messages_content_tsv" in plans["needle"]
    # 3+ characters: either GIN index serves (the planner picks); 1 and 2: only the bigrams can.
    assert {"ix_messages_cjk_bigrams", "ix_messages_indexed_text_trgm"} & set(
        plans["数据库迁移"].replace("(", " ").split()
    )
    for query in ("库", "迁移", "rare 数据"):
        assert "ix_messages_cjk_bigrams" in plans[query], plans[query]
    for plan in plans.values():
        assert "Seq Scan on messages" not in plan


def test_a_term_longer_than_its_index_keys_finds_exactly_the_rows_holding_it(store: Store) -> None:
    """PostgreSQL looks a long term up by the grams of its first ``TERM_KEY_CHARS`` characters
    (the CJK pair cut at that edge a unigram): a row holding only that start is a candidate,
    and the ``ILIKE`` leaves it out; the row holding the whole term, in other case, is found."""
    from sessionstore.search.postgresql import TERM_KEY_CHARS

    needle = ("Qq" + "Ab数据库" * 400)[: TERM_KEY_CHARS + 500]
    assert needle[TERM_KEY_CHARS - 1 : TERM_KEY_CHARS + 1] == "数据"
    ids = seed(store, [
        Msg("whole", "cli-1", "user", "before " + needle.lower() + " after", 10.0),
        Msg("start", "cli-1", "user", needle[:TERM_KEY_CHARS] + " 其他的结尾", 20.0),
        Msg("other", "tg-1", "user", "无关的内容 Ab数据库", 30.0),
    ])  # fmt: skip
    hits = search(store, needle)
    assert names_of(hits, ids) == ["whole"]
    assert needle.lower()[:40] in hits[0].snippet.lower()
    assert names_of(search(store, needle[:TERM_KEY_CHARS]), ids) == ["start", "whole"]


def test_a_term_longer_than_sqlite_s_like_patterns_is_found_exactly(store: Store) -> None:
    """A pasted document searched for: a term whose ``LIKE`` pattern passes SQLite's 50,000
    bytes (which refused it, "LIKE or GLOB pattern too complex") is verified whole, its ASCII
    letters folded as ``LIKE`` folds them; a row differing in its last character is not found.
    """
    from sessionstore.search.sqlite import LIKE_PATTERN_LIMIT_BYTES

    cjk = "".join(chr(0x4E00 + (index * 7919) % 20_000) for index in range(20_000))
    needle = "Qq" + cjk
    assert len(needle.encode()) > LIKE_PATTERN_LIMIT_BYTES
    ids = seed(store, [
        Msg("whole", "cli-1", "user", "before " + needle.lower() + " after", 10.0),
        Msg("near", "cli-1", "user", "qq" + cjk[:-1] + "的", 20.0),
        Msg("other", "tg-1", "user", "无关的内容 " + cjk[:30], 30.0),
    ])  # fmt: skip
    hits = search(store, needle)
    assert names_of(hits, ids) == ["whole"]
    assert cjk[:20] in hits[0].snippet
    assert names_of(search(store, "NOT " + needle + " " + cjk[:30]), ids) == ["other", "near"]


def test_distinct_long_queries_leave_nothing_behind(store: Store) -> None:
    """A search keeps what it derives from a query for the next one (an agent repeats its
    queries) only for a short query: a caller's distinct pasted texts were each held, ~2.5
    times their size, until 512 of them (300,000 characters each: 2.5 MB a query; a gateway
    serving many users could hold gigabytes)."""
    import gc
    import tracemalloc

    ids = seed(store, [Msg("hit", "cli-1", "user", "数据库迁移 hello", 10.0)])

    def long_query(number: int) -> str:
        # Ten times the bound: kept, each would hold ~23 KB; the check does not need more.
        return "".join(chr(0x4E00 + (index * 7919 + number) % 20_000) for index in range(2_000))

    assert search(store, long_query(0)) == []
    tracemalloc.start()
    try:
        search(store, long_query(1))
        gc.collect()
        kept_before = tracemalloc.get_traced_memory()[0]
        for number in range(2, 10):
            search(store, long_query(number))
        gc.collect()
        kept_after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    # kept, eight queries of 2,000 characters held ~190 KB (each query's text, patterns and
    # plan; 20,000 characters each, ~830 KB); now a few KB
    assert kept_after - kept_before < 50_000, kept_after - kept_before
    assert names_of(search(store, "数据库"), ids) == ["hit"]


def test_a_long_term_s_bigram_query_names_a_bounded_sample_of_its_bigrams() -> None:
    """FTS5 parses a conjunction in time quadratic in its phrases (a 100,000-character query
    took 12 CPU s, a million more than ten minutes): a term names at most
    ``MAX_BIGRAMS_PER_TERM`` of its distinct bigrams, its first and last among them; a shorter
    term names them all, as before."""
    from sessionstore.search.sqlite import MAX_BIGRAMS_PER_TERM, bigram_match
    from sessionstore.search.terms import index_tokens

    def named(query: str) -> list[str]:
        parsed = parse_substring_query(query)
        assert parsed is not None
        return bigram_match(parsed).strip("()").split(" AND ")

    short = "数据库迁移已经完成"
    assert named(short) == [f'"{token}"' for token, _ in index_tokens(short)]
    long = "".join(chr(0x4E00 + (index * 104_729) % 20_000) for index in range(19_000))
    tokens = named(long)
    assert len(tokens) == MAX_BIGRAMS_PER_TERM == len(set(tokens))
    assert tokens[0] == f'"{long[:2]}"' and tokens[-1] == f'"{long[-2:]}"'
    assert len(named(long + " 另一个很长的词" * 3)) <= 2 * MAX_BIGRAMS_PER_TERM


def test_trigram_glob_agrees_with_contains_cjk() -> None:
    """Revision 0007 indexes exactly the messages contains_cjk would search for (see CJK_GLOB)."""
    import sqlite3

    from sessionstore._migrations import revision_0021_ddl as cjk_ddl
    from sessionstore._migrations.search_ddl import CJK_GLOB
    from sessionstore.search import contains_cjk, postgresql_ddl
    from sessionstore.search import sqlite_ddl as sqlite_ddl

    conn = sqlite3.connect(":memory:")
    points = list(range(0x20, 0x3500, 7)) + list(range(0x4DB0, 0xD7FF, 13))
    points += list(range(0xE000, 0x10000, 11)) + list(range(0x1F000, 0x40100, 97))
    points += [0x10FF, 0x1100, 0x11FF, 0x1200, 0x2E7F, 0x2E80, 0x33FF, 0x3400, 0xFFEF, 0xFFF0]
    for point in points:
        text = f"ab{chr(point)}cd"
        globbed = conn.execute("SELECT ? GLOB ?", (text, CJK_GLOB)).fetchone()[0]
        assert bool(globbed) == contains_cjk(text), hex(point)
        assert bool(conn.execute("SELECT ? GLOB ?", (text, sqlite_ddl.CJK_GLOB)).fetchone()[0]) \
            == contains_cjk(text), hex(point)  # fmt: skip
        assert bool(conn.execute("SELECT ? GLOB ?", (text, cjk_ddl.CJK_GLOB)).fetchone()[0]) \
            == contains_cjk(text), hex(point)  # fmt: skip
    assert postgresql_ddl.CJK_CLASS == sqlite_ddl.CJK_CLASS == cjk_ddl.CJK_CLASS


# -- the search-index object: detect, create, rebuild, check, optimize ---------------------------
def test_search_index_lifecycle_verbs(store: Store) -> None:
    """Each dialect's one search-index object: what it misses, it creates; a rebuild and an
    optimize change no result; its check finds it whole."""
    ids = seed(store, CORPUS)
    queries = ("deploy", "数据库", "库", "数据 迁移")
    before = {q: names_of(search(store, q), ids) for q in queries}
    assert all(before.values())
    index = search_index_for(store.dialect)
    assert store.read(index.missing) == []
    bigram_objects = (
        [BIGRAM_TABLE, *(f"{BIGRAM_TABLE}_{e}" for e in ("insert", "delete", "update"))]
        if is_sqlite(store)
        else ["ix_messages_cjk_bigrams"]
    )

    def drop(conn: Connection) -> None:
        for name in reversed(bigram_objects):
            kind = ("TRIGGER" if name.endswith(("insert", "delete", "update")) else "TABLE") \
                if is_sqlite(store) else "INDEX"  # fmt: skip
            conn.exec_driver_sql(f"DROP {kind} {name}")

    store.write(drop)
    assert set(store.read(index.missing)) == set(bigram_objects)
    health = store.write(index.check) if index.check_writes else store.read(index.check)
    assert health.missing
    store.write(index.create)
    assert store.read(index.missing) == []
    for verb in (index.rebuild, index.optimize):
        store.write(verb)
        assert {q: names_of(search(store, q), ids) for q in queries} == before
    health = store.write(index.check) if index.check_writes else store.read(index.check)
    assert health.missing == [] and health.broken == [] and not health.out_of_step


def test_a_message_without_its_session_is_no_hit_and_the_page_stays_full(
    sqlite_store: Store,
) -> None:
    """A legacy file may hold a message whose session row is gone. The word page is ranked
    without the sessions (a probe per match saved) and chosen again with them when one of its
    messages has none: the orphan (the best match here) is left out, the page still holds
    ``limit`` hits."""
    ids = seed(sqlite_store, [
        Msg("old", "cli-1", "user", "deploy docker", 1),
        Msg("mid", "tg-1", "user", "deploy docker", 2),
        Msg("new", "dc-1", "user", "deploy docker", 3),
    ])  # fmt: skip
    raw = sqlite_store.engine.raw_connection()  # autocommit at the driver: no BEGIN
    try:
        driver = raw.driver_connection
        assert driver is not None
        driver.execute("PRAGMA foreign_keys = OFF")
        driver.execute("INSERT INTO messages (id, session_id, role, content, timestamp)"
                       " VALUES (4, 'gone-1', 'user', 'deploy deploy deploy', 4)")
        driver.execute("PRAGMA foreign_keys = ON")
    finally:
        raw.close()
    hits = search(sqlite_store, "deploy", limit=2)
    assert len(hits) == 2 and 4 not in {hit.id for hit in hits}
    assert {hit.id for hit in search(sqlite_store, "deploy")} == set(ids.values())
