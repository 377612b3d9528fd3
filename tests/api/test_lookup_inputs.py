"""Hostile arguments to the facade's lookups give typed answers on both dialects (issue 10,
item 9): a result of the documented type, or ``TypeError``/``ValueError``; never a raw
driver error. PostgreSQL used to answer ``message_count(1)`` with "operator does not exist:
text = integer" and 100,000 excluded sources with "number of parameters must be between 0 and
65535"; SQLite answered both. Hermes 0.18's listing keywords too: a ``min_message_count`` past
64 bits would be the driver's ``OverflowError``, a NUL in ``id_query`` PostgreSQL's error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessionstore.api.session_db import SessionDB

HOSTILE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.text(alphabet=st.sampled_from(["\x00", "\ud800", "a", "%", "_", "\\", "数"]), max_size=6),
    st.binary(max_size=8),
    st.lists(st.text(max_size=3), max_size=3),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
)
SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

# Each lookup, and the type its answer must have.
ONE_ARGUMENT_LOOKUPS: dict[str, tuple[Callable[[SessionDB, Any], Any], tuple[type, ...]]] = {
    "get_session": (lambda db, v: db.get_session(v), (dict, type(None))),
    "resolve_session_id": (lambda db, v: db.resolve_session_id(v), (str, type(None))),
    "get_session_title": (lambda db, v: db.get_session_title(v), (str, type(None))),
    "get_session_by_title": (lambda db, v: db.get_session_by_title(v), (dict, type(None))),
    "resolve_session_by_title": (lambda db, v: db.resolve_session_by_title(v), (str, type(None))),
    "get_compression_tip": (lambda db, v: db.get_compression_tip(v), (str, type(None))),
    "get_messages": (lambda db, v: db.get_messages(v), (list,)),
    "get_messages_as_conversation": (lambda db, v: db.get_messages_as_conversation(v), (list,)),
    "message_count": (lambda db, v: db.message_count(v), (int,)),
    "session_count": (lambda db, v: db.session_count(v), (int,)),
    "search_sessions(source)": (lambda db, v: db.search_sessions(source=v), (list,)),
    "search_sessions(limit)": (lambda db, v: db.search_sessions(limit=v), (list,)),
    "search_sessions(offset)": (lambda db, v: db.search_sessions(offset=v), (list,)),
    "list_sessions_rich(source)": (lambda db, v: db.list_sessions_rich(source=v), (list,)),
    "list_sessions_rich(limit)": (lambda db, v: db.list_sessions_rich(limit=v), (list,)),
    "list_sessions_rich(offset)": (lambda db, v: db.list_sessions_rich(offset=v), (list,)),
    "list_sessions_rich(exclude)": (
        lambda db, v: db.list_sessions_rich(exclude_sources=v), (list,)
    ),
    "list_sessions_rich(min_message_count)": (
        lambda db, v: db.list_sessions_rich(min_message_count=v), (list,)
    ),
    "list_sessions_rich(min_message_count, by activity)": (
        lambda db, v: db.list_sessions_rich(min_message_count=v, order_by_last_active=True),
        (list,),
    ),
    "list_sessions_rich(order_by_last_active)": (
        lambda db, v: db.list_sessions_rich(order_by_last_active=v), (list,)
    ),
    "list_sessions_rich(id_query)": (
        lambda db, v: db.list_sessions_rich(order_by_last_active=True, id_query=v), (list,)
    ),
    "list_sessions_rich(id_query, by start)": (
        lambda db, v: db.list_sessions_rich(id_query=v), (list,)
    ),
    "session_count(min_message_count)": (
        lambda db, v: db.session_count(min_message_count=v), (int,)
    ),
    "search_messages(query)": (lambda db, v: db.search_messages(v), (list,)),
    "search_messages(source_filter)": (
        lambda db, v: db.search_messages("hello", source_filter=v), (list,)
    ),
    "search_messages(exclude)": (
        lambda db, v: db.search_messages("数据库", exclude_sources=v), (list,)
    ),
    "search_messages(role_filter)": (
        lambda db, v: db.search_messages("hello", role_filter=v), (list,)
    ),
    "search_messages(limit)": (lambda db, v: db.search_messages("hello", limit=v), (list,)),
    "export_session": (lambda db, v: db.export_session(v), (dict, type(None))),
    "export_all": (lambda db, v: db.export_all(v), (list,)),
}


@pytest.fixture
def db(store_url: str) -> Iterator[SessionDB]:
    database = SessionDB(url=store_url)
    database.create_session("s1", "cli")
    database.set_session_title("s1", "hello title")
    database.append_message("s1", "user", "hello 数据库 world")
    yield database
    database.close()


@pytest.mark.parametrize("name", sorted(ONE_ARGUMENT_LOOKUPS))
def test_lookup_answers_hostile_arguments_with_a_typed_result_or_error(
    db: SessionDB, name: str
) -> None:
    call, result_types = ONE_ARGUMENT_LOOKUPS[name]

    @SETTINGS
    @given(value=HOSTILE)
    def check(value: Any) -> None:
        try:
            result = call(db, value)
        except (TypeError, ValueError):
            return
        assert isinstance(result, result_types), (name, value, result)

    check()


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (lambda db: db.message_count(1), 0),
        (lambda db: db.session_count(1), 0),
        (lambda db: db.search_sessions(source=1), []),
        (lambda db: db.export_all(1), []),
        (lambda db: db.message_count("s1\x00"), 0),
        (lambda db: db.session_count("\ud800"), 0),
        (lambda db: len(db.search_sessions(limit=2**70)), 1),
        (lambda db: db.list_sessions_rich(offset=2**64), []),
        (lambda db: db.list_sessions_rich(min_message_count=2**64), []),
        (lambda db: db.list_sessions_rich(min_message_count=2**64, order_by_last_active=True),
         []),
        (lambda db: db.session_count(min_message_count=2**64), 0),
        (lambda db: len(db.list_sessions_rich(min_message_count=-(2**64))), 1),
        (lambda db: db.list_sessions_rich(order_by_last_active=True, id_query="s\x00"), []),
        (lambda db: db.list_sessions_rich(order_by_last_active=True, id_query="\ud800"), []),
        (lambda db: len(db.list_sessions_rich(id_query="s\x00")), 1),
        (lambda db: len(db.list_sessions_rich(order_by_last_active=True, id_query="S1")), 1),
    ],
    ids=["message_count-int", "session_count-int", "search_sessions-int", "export_all-int",
         "message_count-nul", "session_count-surrogate", "limit-huge", "offset-huge",
         "min_message_count-huge", "min_message_count-huge-by-activity",
         "session_count-min_message_count-huge", "min_message_count-very-negative",
         "id_query-nul", "id_query-surrogate", "id_query-ignored-by-start", "id_query-case"],
)  # fmt: skip
def test_wrong_type_lookups_match_nothing_on_both_dialects(
    db: SessionDB, call: Callable[[SessionDB], Any], expected: Any
) -> None:
    assert call(db) == expected


def test_a_hundred_thousand_excluded_sources_are_one_parameter(db: SessionDB) -> None:
    db.create_session("s2", "telegram")
    db.append_message("s2", "user", "hello 数据库 there")
    excluded = [f"source-{index}" for index in range(100_000)] + ["telegram"]
    assert [row["id"] for row in db.list_sessions_rich(exclude_sources=excluded)] == ["s1"]
    for query in ("hello", "数据库"):
        hits = db.search_messages(query, exclude_sources=excluded)
        assert [hit["session_id"] for hit in hits] == ["s1"], query
        hits = db.search_messages(query, source_filter=[*excluded, "cli"])
        assert {hit["session_id"] for hit in hits} == {"s1", "s2"}, query
    roles = [f"role-{index}" for index in range(100_000)] + ["user"]
    assert len(db.search_messages("hello", role_filter=roles)) == 2


# Each call taking a list of ids, with a single id given in its place (a bare ``str``: iterated,
# each character would be taken for an id, 300,000 of them for a long string).
ID_LIST_CALLS: dict[str, Callable[[SessionDB, Any], Any]] = {
    "get_session_rich_rows": lambda db, v: db.get_session_rich_rows(v),
    "relabel_sessions_to_key_profile": lambda db, v: db.relabel_sessions_to_key_profile(v),
    "sever_crossed_parents": lambda db, v: db.sever_crossed_parents(v),
    "rekey_legacy_main_sessions": lambda db, v: db.rekey_legacy_main_sessions(v, "work"),
    "session_lifecycle_statuses": lambda db, v: db.session_lifecycle_statuses(v),
    "delete_sessions": lambda db, v: db.delete_sessions(v),
    "delete_gateway_routing_entries": lambda db, v: db.delete_gateway_routing_entries(v),
}


@pytest.mark.parametrize("name", sorted(ID_LIST_CALLS))
def test_a_single_id_where_a_list_is_asked_is_a_type_error(db: SessionDB, name: str) -> None:
    for single in ("s1", b"s1"):
        with pytest.raises(TypeError, match="list of ids"):
            ID_LIST_CALLS[name](db, single)
    assert db.get_session("s1") is not None
    assert [message["content"] for message in db.get_messages("s1")] == ["hello 数据库 world"]


def test_a_url_given_as_the_path_opens_that_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_store_url: str
) -> None:
    """``SessionDB("postgresql://...")`` once made a SQLite file under a directory named
    ``postgresql+psycopg:`` in the working directory: the rule of every other place a store
    is named applies (``://`` means a URL)."""
    monkeypatch.chdir(tmp_path)
    db = SessionDB(pg_store_url)
    try:
        assert db.url == pg_store_url and db.db_path is None
        db.create_session("by-url", "cli")
    finally:
        db.close()
    assert list(tmp_path.iterdir()) == []
    sqlite_path = tmp_path / "by-url.db"
    db = SessionDB(f"sqlite:///{sqlite_path}")
    try:
        assert db.db_path == sqlite_path
    finally:
        db.close()
