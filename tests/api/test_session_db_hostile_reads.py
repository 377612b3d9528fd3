"""Hostile input against every read path of ``SessionDB`` (SPEC §5.3, §5.6, §7), on both dialects.

Arbitrary text (wildcards, FTS syntax, lineage suffixes, NUL, lone surrogates, CJK, emoji) goes
into search and every title/ID lookup. Valid text never raises; text no database can hold (NUL,
lone surrogates) may only be refused with ``TypeError``/``ValueError``; and nothing a lookup does
changes a single stored byte (a full dump of both tables is compared after every example).

One seeded store per dialect for the whole module keeps this fast; the write properties put
the store back exactly as they found it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_library import engine_like_the_store

from sessionstore.api.session_db import SessionDB
from sessionstore.sql.validation import replace_lone_surrogates

SEARCH_HIT_KEYS = frozenset(
    {
        "id", "session_id", "role", "snippet", "timestamp", "tool_name", "source", "model",
        "session_started", "context",
    }
)  # fmt: skip
SESSION_IDS = [
    "a_b1", "a%b2", "axb3", "abc-123", "abd-456", "back\\slash", "数据库-1", "Z", "root",
    "c1", "c2", "scratch",
]  # fmt: skip
TITLES = {
    "a_b1": "proj",
    "a%b2": "proj #2",
    "axb3": "proj #3",
    "abc-123": "50% off",
    "abd-456": "a_b",
    "back\\slash": "数据库重构",
    "数据库-1": "emoji 🚀 title",
    "root": "Refactor",
    "c1": "Refactor #2",
    "c2": "Refactor #3",
}
MESSAGES = [
    ("a_b1", "user", "How do I configure alembic migrations?"),
    ("a_b1", "assistant", "Run alembic upgrade head; see chat-send and P2.2 notes."),
    ("a%b2", "user", "我们需要重构数据库连接池"),
    ("a%b2", "tool", "exit code 0 — 100% done_ok \\ backslash"),
    ("root", "user", "first part of a long conversation"),
    ("c2", "user", "continued after two compressions 🚀"),
]
PROPERTY_SETTINGS = settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

# Text that stresses LIKE escaping, FTS syntax and the lineage rule, mixed with anything at all.
_INTERESTING = "%_\\ #*\"()^{}+-:.'AaNnDdOoRrTt0123数据库🚀\t\n"
_KNOWN_TEXT = sorted({*SESSION_IDS, *TITLES.values(), "AND", "OR", "NOT", "NEAR"})
valid_text = st.one_of(
    st.text(),
    st.text(alphabet=_INTERESTING, max_size=12),
    st.sampled_from(_KNOWN_TEXT),
    st.builds(lambda known, cut: known[:cut], st.sampled_from(_KNOWN_TEXT), st.integers(0, 12)),
    st.builds(
        lambda known, number: f"{known} #{number}",
        st.sampled_from(_KNOWN_TEXT),
        st.integers(0, 12),
    ),
).filter(lambda text: "\x00" not in text)
# Every code point, lone surrogates included, plus NUL somewhere.
any_character = st.characters(exclude_categories=())
hostile_text = st.one_of(
    valid_text,
    st.text(alphabet=any_character, max_size=20),
    st.builds(lambda a, b: f"{a}\x00{b}", valid_text, valid_text),
    st.builds(lambda a, b: f"{a}\ud800{b}", valid_text, valid_text),
)


def is_storable(text: str) -> bool:
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


Dump = tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]


@dataclass
class SeededStore:
    db: SessionDB
    engine: sa.Engine
    is_sqlite: bool
    snapshot: Dump

    def dump(self) -> Dump:
        with self.engine.connect() as conn:
            sessions = [
                tuple(r) for r in conn.execute(sa.text("SELECT * FROM sessions ORDER BY id"))
            ]
            messages = [
                tuple(r) for r in conn.execute(sa.text("SELECT * FROM messages ORDER BY id"))
            ]
        return sessions, messages

    def assert_unchanged(self) -> None:
        assert self.dump() == self.snapshot


def _seed(db: SessionDB, engine: sa.Engine) -> None:
    for index, session_id in enumerate(SESSION_IDS):
        parent = {"c1": "root", "c2": "c1"}.get(session_id)
        db.create_session(session_id, "telegram" if index % 3 else "cli", parent_session_id=parent)
    with engine.begin() as conn:
        for index, session_id in enumerate(SESSION_IDS):
            conn.execute(
                sa.text("UPDATE sessions SET started_at = :t WHERE id = :id"),
                {"t": 1000.0 + index * 10, "id": session_id},
            )
        for session_id, ended_at in (("root", 1085.0), ("c1", 1095.0)):
            conn.execute(
                sa.text(
                    "UPDATE sessions SET ended_at = :t, end_reason = 'compression' WHERE id = :id"
                ),
                {"t": ended_at, "id": session_id},
            )
    for session_id, title in TITLES.items():
        db.set_session_title(session_id, title)
    for session_id, role, content in MESSAGES:
        db.append_message(session_id, role, content)
    corrupt = db.append_message("axb3", "assistant", "corrupt row", tool_calls=[{"id": "x"}])
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE messages SET tool_calls = '{not json' WHERE id = :id"), {"id": corrupt}
        )


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def seeded(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SeededStore]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('facade_properties')}/state.db"
    else:
        # A database of this module's own at head (a copy of the migrated template).
        template = request.getfixturevalue("migrated_pg_template")
        url = request.getfixturevalue("pg_databases").create(template=template)
    db = SessionDB(url=url)
    engine = engine_like_the_store(url)
    _seed(db, engine)
    store = SeededStore(db, engine, request.param == "sqlite", snapshot=([], []))
    store.snapshot = store.dump()
    yield store
    db.close()
    engine.dispose()


def _call(text: str, lookup: Callable[[], Any]) -> tuple[bool, Any]:
    """Run a lookup; valid text must not raise, unstorable text may only be refused clearly."""
    if is_storable(text):
        return True, lookup()
    try:
        return True, lookup()
    except (TypeError, ValueError):
        return False, None


def _titles_now(store: SeededStore) -> set[str]:
    with store.engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT title FROM sessions WHERE title IS NOT NULL"))
        return {row[0] for row in rows}


_LINEAGE_NUMBER = re.compile(r" #[0-9]+")


@PROPERTY_SETTINGS
@given(text=hostile_text)
def test_id_and_title_lookups_are_total_and_read_only(seeded: SeededStore, text: str) -> None:
    db = seeded.db

    ok, resolved = _call(text, lambda: db.resolve_session_id(text))
    if ok and resolved is not None:
        assert resolved in SESSION_IDS
        assert resolved.lower().startswith(text.lower())

    ok, session = _call(text, lambda: db.get_session(text))
    if ok and session is not None:
        assert session["id"] == text

    ok, by_title = _call(text, lambda: db.get_session_by_title(text))
    if ok and by_title is not None:
        assert by_title["title"] == text

    ok, title = _call(text, lambda: db.get_session_title(text))
    if ok:
        assert title == TITLES.get(text)

    ok, resolved_by_title = _call(text, lambda: db.resolve_session_by_title(text))
    if ok and resolved_by_title is not None:
        found = TITLES[resolved_by_title]
        assert found == text or (
            found.startswith(text) and _LINEAGE_NUMBER.fullmatch(found[len(text) :]) is not None
        )

    ok, tip = _call(text, lambda: db.get_compression_tip(text))
    if ok:
        if text in SESSION_IDS:
            expected_tip = "c2" if text in ("root", "c1", "c2") else text
            assert tip == expected_tip
        else:
            assert tip is None

    ok, next_title = _call(text, lambda: db.get_next_title_in_lineage(text))
    if ok:
        assert isinstance(next_title, str)
        assert next_title not in _titles_now(seeded)

    seeded.assert_unchanged()


MESSAGES_PER_SESSION = {sid: sum(1 for m in MESSAGES if m[0] == sid) for sid in SESSION_IDS}
MESSAGES_PER_SESSION["axb3"] += 1  # the corrupt row


@PROPERTY_SETTINGS
@given(text=hostile_text)
def test_counts_messages_and_export_by_arbitrary_key(seeded: SeededStore, text: str) -> None:
    db = seeded.db

    # As Hermes, an empty id or source is no filter.
    ok, count = _call(text, lambda: db.message_count(text))
    if ok:
        everything = sum(MESSAGES_PER_SESSION.values())
        assert count == (everything if text == "" else MESSAGES_PER_SESSION.get(text, 0))

    ok, sessions = _call(text, lambda: db.session_count(text))
    if ok:
        assert sessions == {"cli": 4, "telegram": 8, "": 12}.get(text, 0)

    ok, messages = _call(text, lambda: db.get_messages(text))
    if ok:
        assert len(messages) == MESSAGES_PER_SESSION.get(text, 0)

    ok, conversation = _call(text, lambda: db.get_messages_as_conversation(text))
    if ok:
        assert len(conversation) == MESSAGES_PER_SESSION.get(text, 0)

    ok, exported = _call(text, lambda: db.export_session(text))
    if ok:
        if text in SESSION_IDS:
            assert exported is not None and exported["id"] == text
        else:
            assert exported is None

    seeded.assert_unchanged()


@PROPERTY_SETTINGS
@given(
    query=hostile_text,
    source_filter=st.one_of(st.none(), st.lists(hostile_text, max_size=2)),
    exclude_sources=st.one_of(st.none(), st.lists(hostile_text, max_size=2)),
    role_filter=st.one_of(st.none(), st.lists(st.sampled_from(["user", "tool", "x%"]), max_size=2)),
    limit=st.integers(0, 50),
    offset=st.integers(0, 10),
)
def test_search_messages_is_total_and_read_only(
    seeded: SeededStore,
    query: str,
    source_filter: list[str] | None,
    exclude_sources: list[str] | None,
    role_filter: list[str] | None,
    limit: int,
    offset: int,
) -> None:
    hits = seeded.db.search_messages(
        query,
        source_filter=source_filter,
        exclude_sources=exclude_sources,
        role_filter=role_filter,
        limit=limit,
        offset=offset,
    )
    assert isinstance(hits, list)
    assert len(hits) <= limit
    for hit in hits:
        assert set(hit) == SEARCH_HIT_KEYS
        assert hit["session_id"] in SESSION_IDS
        if role_filter is not None:
            assert hit["role"] in role_filter
        if source_filter is not None:
            assert hit["source"] in source_filter
        if exclude_sources:
            assert hit["source"] not in exclude_sources
    seeded.assert_unchanged()


# What Hermes 0.18's ``id_query`` finds: each listed row with its forward compression chain
# (root -> c1 -> c2 is listed once, as c2), the query stripped and lower-cased in Python, each
# id lower-cased as SQLite's lower() does it (ASCII letters only), no wildcards.
LISTED_CHAINS = {
    ("c2" if sid == "root" else sid): (["root", "c1", "c2"] if sid == "root" else [sid])
    for sid in SESSION_IDS if sid not in ("c1", "c2")
}  # fmt: skip


def _sqlite_lower(text: str) -> str:
    return "".join(ch.lower() if "A" <= ch <= "Z" else ch for ch in text)


@PROPERTY_SETTINGS
@given(
    query=st.one_of(
        hostile_text,
        st.text(alphabet="%_\\aAbBzZ1-", min_size=1, max_size=3),
        st.builds(lambda sid, a, b: sid[a:b].upper() if a % 2 else f" {sid[a:b]}\t",
                  st.sampled_from(SESSION_IDS), st.integers(0, 4), st.integers(1, 8)),
    ),
    limit=st.integers(0, 20),
)  # fmt: skip
def test_id_query_finds_what_hermes_finds_and_changes_nothing(
    seeded: SeededStore, query: str, limit: int
) -> None:
    rows = seeded.db.list_sessions_rich(order_by_last_active=True, id_query=query, limit=limit)
    everything = seeded.db.list_sessions_rich(order_by_last_active=True, limit=100)
    needle = query.strip().lower()
    if not needle:
        expected = [row["id"] for row in everything]
    elif not is_storable(needle):
        expected = []
    else:
        expected = [
            row["id"] for row in everything
            if any(needle in _sqlite_lower(member) for member in LISTED_CHAINS[row["id"]])
        ]  # fmt: skip
    assert [row["id"] for row in rows] == expected[:limit]
    seeded.assert_unchanged()


@PROPERTY_SETTINGS
@given(threshold=st.integers(-(2**70), 2**70) | st.integers(-3, 4))
def test_min_message_count_keeps_the_sessions_with_at_least_that_many(
    seeded: SeededStore, threshold: int
) -> None:
    db = seeded.db

    def own_count(row: dict[str, Any]) -> int:
        # Hermes compares the listed row's own count: a compression root's, not its tip's.
        return MESSAGES_PER_SESSION[row.get("_lineage_root_id", row["id"])]

    for recent in (False, True):
        everything = db.list_sessions_rich(order_by_last_active=recent, limit=100)
        rows = db.list_sessions_rich(
            min_message_count=threshold, order_by_last_active=recent, limit=100
        )
        assert rows == [row for row in everything if threshold <= 0 or own_count(row) >= threshold]
    assert db.session_count(min_message_count=threshold) == sum(
        1 for sid in SESSION_IDS if threshold <= 0 or MESSAGES_PER_SESSION[sid] >= threshold
    )
    seeded.assert_unchanged()


@settings(max_examples=200, deadline=None)
@given(title=st.one_of(hostile_text, st.text(alphabet=any_character, max_size=150)))
def test_sanitize_title_output_is_clean_and_stable(title: str) -> None:
    try:
        clean = SessionDB.sanitize_title(title)
    except ValueError as exc:
        assert "too long" in str(exc)
        return
    if clean is None:
        return
    assert 0 < len(clean) <= SessionDB.MAX_TITLE_LENGTH
    assert clean == clean.strip()
    assert "  " not in clean
    assert is_storable(clean)
    assert not re.search(r"[\x00-\x1f\x7f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]", clean)
    assert SessionDB.sanitize_title(clean) == clean


@PROPERTY_SETTINGS
@given(title=hostile_text)
def test_set_session_title_stores_the_sanitized_title_or_refuses(
    seeded: SeededStore, title: str
) -> None:
    db = seeded.db
    try:
        expected = SessionDB.sanitize_title(title)
    except ValueError:
        expected = None
        with pytest.raises(ValueError):
            db.set_session_title("scratch", title)
    else:
        holder = next((sid for sid, held in TITLES.items() if held == expected), None)
        if holder is not None:
            with pytest.raises(ValueError, match="already in use"):
                db.set_session_title("scratch", title)
        else:
            assert db.set_session_title("scratch", title) is True
            assert db.get_session_title("scratch") == expected
            if expected is not None:
                assert db.get_session_by_title(expected)["id"] == "scratch"  # type: ignore[index]
    db.set_session_title("scratch", None)
    seeded.assert_unchanged()


@PROPERTY_SETTINGS
@given(content=hostile_text)
def test_append_message_round_trips_hostile_text(seeded: SeededStore, content: str) -> None:
    db = seeded.db
    db.append_message("scratch", "user", content)
    (stored,) = db.get_messages("scratch")
    # No driver can encode a lone surrogate: it is kept visible as U+FFFD (as Hermes does).
    expected = replace_lone_surrogates(content)
    if seeded.is_sqlite:
        assert stored["content"] == expected
    else:
        # PostgreSQL TEXT cannot hold NUL; it is kept visible as U+FFFD.
        assert stored["content"] == expected.replace("\x00", "\ufffd")
    assert db.get_session("scratch")["message_count"] == 1  # type: ignore[index]
    db.clear_messages("scratch")
    seeded.assert_unchanged()
