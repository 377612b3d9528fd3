"""Behaviour of the Hermes-compatible ``SessionDB`` facade (SPEC §5 and §7), on both dialects.

Every test using ``db`` runs once on SQLite and once on PostgreSQL (``store_url`` in conftest).
Times that a rule depends on (compression ends, prune cutoffs, "newest first") are written
with raw SQL so each case states its clock instead of racing ``time.time()``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import sqlalchemy as sa
from asynclib import BlockingAsyncSessionDB
from legacy_v23_v31 import V31_MESSAGE_NAMES, V31_SESSION_NAMES
from store_library import engine_like_the_store

from sessionstore import SessionStoreError
from sessionstore.api.export_timings import export_timings
from sessionstore.api.session_db import SessionDB
from sessionstore.schema import migrate
from sessionstore.sql.statements import ROWS_PER_INSERT

# Hermes 0.19.0's (schema v22) dict keys, in its order: a fresh Hermes file's column order
# (v6's columns keep their relative order, `title` after `pricing_version`) for `SELECT *`
# rows; search hits as its SELECT list names them, `content` popped and `context` appended;
# rich listings add `last_active` (SQL) then `preview` (Python).
SESSION_KEYS = V31_SESSION_NAMES
# As iot 0.22.2's message dicts: no display index, ``_compressed_summary`` only where set.
MESSAGE_KEYS = tuple(
    name for name in V31_MESSAGE_NAMES
    if name not in ("display_identity", "display_order", "_compressed_summary")
)
SEARCH_HIT_KEYS = (
    "id", "session_id", "role", "snippet", "timestamp", "tool_name", "source", "model",
    "session_started", "context",
)  # fmt: skip
LISTING_KEYS = (*SESSION_KEYS, "last_active", "preview", "unread")
PROJECTED_LISTING_KEYS = (
    *LISTING_KEYS[:-1], "_lineage_root_id", "_lineage_ids", "continuation_kind", "unread"
)  # iot 0.22.2's order
EXPORT_KEYS = (*SESSION_KEYS, "messages", "timings")
MRU_KEYS = (*SESSION_KEYS, "last_active")  # iot 0.22.2's search_sessions rows
EXPORT_ALL_KEYS = (*MRU_KEYS, "messages", "timings")
DAY = 86_400.0


def tool_call(call_id: str, name: str = "terminal", **arguments: Any) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


class RawSQL:
    """Direct SQL on the store, beside the facade: to set clocks and to corrupt rows on purpose.
    On ``engine`` when given (kept open by its owner), else on an engine of its own."""

    def __init__(self, url: str, engine: sa.Engine | None = None) -> None:
        self.owned = engine is None
        self.engine = engine_like_the_store(url) if engine is None else engine

    def execute(self, sql: str, **params: Any) -> None:
        with self.engine.begin() as conn:
            conn.execute(sa.text(sql), params)

    def scalar(self, sql: str, **params: Any) -> Any:
        with self.engine.connect() as conn:
            return conn.execute(sa.text(sql), params).scalar()

    def dump(self) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        with self.engine.connect() as conn:
            sessions = [
                tuple(r) for r in conn.execute(sa.text("SELECT * FROM sessions ORDER BY id"))
            ]
            messages = [
                tuple(r) for r in conn.execute(sa.text("SELECT * FROM messages ORDER BY id"))
            ]
        return sessions, messages

    def set_times(
        self,
        session_id: str,
        *,
        started_at: float,
        ended_at: float | None = None,
        end_reason: str | None = None,
    ) -> None:
        self.execute(
            "UPDATE sessions SET started_at = :started, ended_at = :ended, end_reason = :reason "
            "WHERE id = :id",
            started=started_at,
            ended=ended_at,
            reason=end_reason,
            id=session_id,
        )

    def set_message_time(self, message_id: int, timestamp: float) -> None:
        self.execute(
            "UPDATE messages SET timestamp = :ts WHERE id = :id", ts=timestamp, id=message_id
        )

    def close(self) -> None:
        if self.owned:
            self.engine.dispose()


@pytest.fixture(params=["sync", "async"])
def db(request: pytest.FixtureRequest, store_url: str) -> Iterator[SessionDB]:
    """``SessionDB``, and ``AsyncSessionDB`` driven through its coroutines (same tables)."""
    if request.param == "sync":
        database = SessionDB(url=store_url)
    else:
        database = cast(SessionDB, BlockingAsyncSessionDB(url=store_url))
    yield database
    database.close()


@pytest.fixture
def raw(store_url: str, request: pytest.FixtureRequest) -> Iterator[RawSQL]:
    """On PostgreSQL, through the run's warm connection to ``store_url``'s database (the plain
    engine ``pg_store_url`` empties it with): a new engine was a new backend a test, ~10 ms of
    the server's CPU (start, catalog caches, exit) and ~4 ms of ours for a few statements; the
    statements and what the store sees of them are the same."""
    shared = None
    if not store_url.startswith("sqlite"):
        migrated_pg = request.getfixturevalue("migrated_pg")
        assert migrated_pg.url == store_url
        shared = migrated_pg.engine
    sql = RawSQL(store_url, shared)
    yield sql
    sql.close()


def make_session(
    db: SessionDB,
    raw: RawSQL,
    session_id: str,
    *,
    started_at: float,
    ended_at: float | None = None,
    end_reason: str | None = None,
    source: str = "cli",
    parent: str | None = None,
    title: str | None = None,
) -> str:
    db.create_session(session_id, source, parent_session_id=parent)
    raw.set_times(session_id, started_at=started_at, ended_at=ended_at, end_reason=end_reason)
    if title is not None:
        assert db.set_session_title(session_id, title) is True
    return session_id


# -- construction ------------------------------------------------------------------------------
def test_sessiondb_is_importable_from_the_package_root() -> None:
    # SPEC §1: a Hermes user changes one import, `from sessionstore import SessionDB`.
    import sessionstore

    assert sessionstore.SessionDB is SessionDB


def test_db_path_constructor_creates_a_sqlite_file_and_exposes_db_path(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    db = SessionDB(db_path=path)
    try:
        db.create_session("s1", "cli")
        assert Path(db.db_path) == path
        assert path.exists()
        assert db.MAX_TITLE_LENGTH == SessionDB.MAX_TITLE_LENGTH == 100
    finally:
        db.close()
    reopened = SessionDB(path)  # positional, as Hermes callers write it
    try:
        assert reopened.get_session("s1") is not None
    finally:
        reopened.close()


# -- lifecycle ---------------------------------------------------------------------------------
def test_create_session_returns_id_and_stores_every_column(db: SessionDB) -> None:
    before = time.time()
    returned = db.create_session(
        "sess-1",
        "telegram",
        model="anthropic/claude-sonnet-4",
        model_config={"temperature": 0.2, "max_tokens": 4096},
        system_prompt="You are Hermes.",
        user_id="user-42",
    )
    assert returned == "sess-1"
    row = db.get_session("sess-1")
    assert row is not None
    assert list(row) == list(SESSION_KEYS)
    assert row["source"] == "telegram"
    assert row["model"] == "anthropic/claude-sonnet-4"
    assert json.loads(row["model_config"]) == {"temperature": 0.2, "max_tokens": 4096}
    assert row["system_prompt"] == "You are Hermes."
    assert row["user_id"] == "user-42"
    assert row["parent_session_id"] is None
    assert before - 1 <= row["started_at"] <= time.time() + 1
    assert row["ended_at"] is None and row["end_reason"] is None
    assert row["message_count"] == 0 and row["tool_call_count"] == 0
    assert row["input_tokens"] == 0 and row["output_tokens"] == 0


def test_create_session_is_idempotent_and_leaves_existing_row_alone(db: SessionDB) -> None:
    db.create_session("sess-1", "cli", model="first-model", system_prompt="first")
    original = db.get_session("sess-1")
    assert db.create_session("sess-1", "telegram", model="other", system_prompt="other") == "sess-1"
    assert db.get_session("sess-1") == original
    assert db.session_count() == 1


def test_create_session_with_unknown_parent_is_a_clear_error(db: SessionDB) -> None:
    with pytest.raises((LookupError, ValueError, SessionStoreError)):
        db.create_session("child", "cli", parent_session_id="no-such-parent")
    assert db.get_session("child") is None


def test_ensure_session_creates_a_minimal_row_only_when_missing(db: SessionDB) -> None:
    db.ensure_session("bare")
    bare = db.get_session("bare")
    assert bare is not None
    assert bare["source"] == "unknown" and bare["model"] is None

    db.ensure_session("with-model", "cli", "gpt-5")
    with_model = db.get_session("with-model")
    assert with_model is not None
    assert (with_model["source"], with_model["model"]) == ("cli", "gpt-5")

    db.create_session("existing", "telegram", model="kept")
    db.ensure_session("existing", "cli", "ignored")
    existing = db.get_session("existing")
    assert existing is not None
    assert (existing["source"], existing["model"]) == ("telegram", "kept")


def test_first_end_reason_wins(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.end_session("s", "compression")
    first = db.get_session("s")
    assert first is not None and first["end_reason"] == "compression"
    assert first["ended_at"] is not None

    db.end_session("s", "user_exit")
    second = db.get_session("s")
    assert second is not None
    assert second["end_reason"] == "compression"
    assert second["ended_at"] == first["ended_at"]


def test_reopen_session_clears_the_end_and_allows_a_new_one(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.end_session("s", "timeout")
    db.reopen_session("s")
    reopened = db.get_session("s")
    assert reopened is not None
    assert reopened["ended_at"] is None and reopened["end_reason"] is None
    db.end_session("s", "user_exit")
    ended = db.get_session("s")
    assert ended is not None and ended["end_reason"] == "user_exit"


def test_update_system_prompt(db: SessionDB) -> None:
    db.create_session("s", "cli", system_prompt="old")
    db.update_system_prompt("s", "new prompt")
    row = db.get_session("s")
    assert row is not None and row["system_prompt"] == "new prompt"


# -- tokens and billing --------------------------------------------------------------------------
TOKEN_CASES: list[tuple[str, list[dict[str, Any]], dict[str, Any]]] = [
    (
        "incremental adds every counter",
        [
            dict(input_tokens=10, output_tokens=5, cache_read_tokens=1, cache_write_tokens=2,
                 reasoning_tokens=3),
            dict(input_tokens=7, output_tokens=4, cache_read_tokens=10, cache_write_tokens=20,
                 reasoning_tokens=30),
        ],
        dict(input_tokens=17, output_tokens=9, cache_read_tokens=11, cache_write_tokens=22,
             reasoning_tokens=33),
    ),
    (
        "absolute sets the totals",
        [
            dict(input_tokens=10, output_tokens=5),
            dict(input_tokens=100, output_tokens=50, cache_read_tokens=7, cache_write_tokens=8,
                 reasoning_tokens=9, absolute=True),
        ],
        dict(input_tokens=100, output_tokens=50, cache_read_tokens=7, cache_write_tokens=8,
             reasoning_tokens=9),
    ),
    (
        "incremental after absolute adds to the total",
        [dict(input_tokens=100, absolute=True), dict(input_tokens=5)],
        dict(input_tokens=105),
    ),
    (
        "estimated cost starts from 0 when NULL and adds",
        [dict(estimated_cost_usd=0.25), dict(estimated_cost_usd=0.5)],
        dict(estimated_cost_usd=pytest.approx(0.75)),
    ),
    (
        "actual cost stays NULL until given",
        [dict(input_tokens=1), dict(estimated_cost_usd=0.1)],
        dict(actual_cost_usd=None),
    ),
    (
        "actual cost only changes when given",
        [dict(actual_cost_usd=1.0), dict(input_tokens=3), dict(actual_cost_usd=0.5)],
        dict(actual_cost_usd=pytest.approx(1.5), input_tokens=3),
    ),
    (
        "absolute sets a given estimated cost",
        [dict(estimated_cost_usd=0.3), dict(estimated_cost_usd=1.0, absolute=True)],
        dict(estimated_cost_usd=pytest.approx(1.0)),
    ),
    (
        "billing provider, base url, mode and model: the first accounted call's, then kept",
        [
            dict(billing_provider="ignored", model="not accounted"),  # no usage: sets nothing
            dict(billing_provider="openrouter", billing_base_url="https://openrouter.ai/api/v1",
                 billing_mode="api", model="anthropic/claude-sonnet-4", input_tokens=1,
                 api_call_count=1),
            dict(billing_provider="anthropic", billing_base_url="https://api.anthropic.com",
                 billing_mode="subscription", model="other/model", input_tokens=1),
        ],
        dict(billing_provider="openrouter", billing_base_url="https://openrouter.ai/api/v1",
             billing_mode="api", model="anthropic/claude-sonnet-4"),
    ),
    (
        "cost status, source and pricing version: the last given value wins",
        [
            dict(cost_status="estimated", cost_source="pricing_table", pricing_version="v1"),
            dict(cost_status="final", cost_source="provider_api", pricing_version="v2"),
            dict(input_tokens=1),
        ],
        dict(cost_status="final", cost_source="provider_api", pricing_version="v2"),
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("calls", "expected"),
    [pytest.param(calls, expected, id=name) for name, calls, expected in TOKEN_CASES],
)
def test_update_token_counts(
    db: SessionDB, calls: list[dict[str, Any]], expected: dict[str, Any]
) -> None:
    db.create_session("s", "cli")
    for call in calls:
        db.update_token_counts("s", **call)
    row = db.get_session("s")
    assert row is not None
    assert {name: row[name] for name in expected} == expected


def test_update_token_counts_keeps_the_model_given_at_creation(db: SessionDB) -> None:
    db.create_session("s", "cli", model="created-with")
    db.update_token_counts("s", input_tokens=1, model="later-model")
    row = db.get_session("s")
    assert row is not None and row["model"] == "created-with"


def test_update_token_counts_on_unknown_session_creates_nothing(db: SessionDB) -> None:
    # A clear error is as acceptable as a no-op (SPEC §7); creating a row is not.
    with contextlib.suppress(LookupError, SessionStoreError):
        db.update_token_counts("ghost", input_tokens=10)
    assert db.get_session("ghost") is None
    assert db.session_count() == 0


# -- titles --------------------------------------------------------------------------------------
def _chars(first: int, last: int) -> list[str]:
    return [chr(code) for code in range(first, last + 1)]


# Every character the spec names as invisible: each must vanish from the middle of a word.
INVISIBLE_CHARACTERS: list[tuple[str, str]] = (
    [("ascii-control", c) for c in [*_chars(0x00, 0x08), "\x0b", "\x0c", *_chars(0x0E, 0x1F)]]
    + [("ascii-del", "\x7f")]
    + [("zero-width-and-marks", c) for c in _chars(0x200B, 0x200F)]
    + [("separators-and-bidi-overrides", c) for c in _chars(0x2028, 0x202E)]
    + [("word-joiner-and-bidi-isolates", c) for c in _chars(0x2060, 0x2069)]
    + [("bom", "\ufeff")]
    + [("interlinear-and-object-replacement", c) for c in _chars(0xFFF9, 0xFFFC)]
)


@pytest.mark.parametrize(
    "invisible",
    [pytest.param(c, id=f"{cls}-U+{ord(c):04X}") for cls, c in INVISIBLE_CHARACTERS],
)
def test_sanitize_title_drops_invisible_character(invisible: str) -> None:
    assert SessionDB.sanitize_title(f"Data{invisible}base plan") == "Database plan"
    assert SessionDB.sanitize_title(f"{invisible}Plan{invisible}") == "Plan"
    assert SessionDB.sanitize_title(invisible * 3) is None


@pytest.mark.parametrize(
    ("title", "expected"),
    [
        pytest.param("tab\there", "tab here", id="tab-becomes-space"),
        pytest.param("new\nline", "new line", id="newline-becomes-space"),
        pytest.param("carriage\r\nreturn", "carriage return", id="crlf-becomes-one-space"),
        pytest.param("  many    spaces  ", "many spaces", id="collapse-and-strip"),
        pytest.param("\t\n  \r", None, id="only-whitespace-is-none"),
        pytest.param("", None, id="empty-is-none"),
        pytest.param(None, None, id="none-is-none"),
        pytest.param("a\u200b \u200bb", "a b", id="invisible-next-to-space"),
        pytest.param("数据库重构", "数据库重构", id="cjk-kept"),
        pytest.param("🚀 launch", "🚀 launch", id="emoji-kept"),
        pytest.param("x" * 100, "x" * 100, id="exactly-100-chars"),
        pytest.param("x" * 100 + "\u200b" * 5, "x" * 100, id="length-counted-after-cleaning"),
        pytest.param("  " + "y" * 100 + "  ", "y" * 100, id="length-counted-after-strip"),
    ],
)
def test_sanitize_title_whitespace_and_length(title: str | None, expected: str | None) -> None:
    assert SessionDB.sanitize_title(title) == expected


def test_sanitize_title_too_long() -> None:
    with pytest.raises(ValueError, match="too long"):
        SessionDB.sanitize_title("x" * 101)


def test_set_session_title_returns_whether_the_session_exists(db: SessionDB) -> None:
    db.create_session("s", "cli")
    assert db.set_session_title("s", "  My\u200b  title\n") is True
    assert db.get_session_title("s") == "My title"
    assert db.set_session_title("ghost", "Ghost title") is False
    assert db.get_session("ghost") is None


def test_set_session_title_refuses_a_title_held_by_another_session(db: SessionDB) -> None:
    db.create_session("a", "cli")
    db.create_session("b", "cli")
    assert db.set_session_title("a", "Shared name")
    with pytest.raises(ValueError) as refused:
        db.set_session_title("b", "Shared name")
    # Hermes's exact text: users read it in `hermes sessions rename` and the gateway's /title.
    assert str(refused.value) == "Title 'Shared name' is already in use by session a"
    # The same title after sanitizing is the same title.
    with pytest.raises(ValueError, match="already in use"):
        db.set_session_title("b", "Shared\u200b   name ")
    assert db.get_session_title("b") is None
    # Re-setting one's own title is not a conflict.
    assert db.set_session_title("a", "Shared name") is True


def test_set_session_title_too_long_changes_nothing(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.set_session_title("s", "Kept")
    with pytest.raises(ValueError) as refused:
        db.set_session_title("s", "z" * 101)
    assert str(refused.value) == "Title too long (101 chars, max 100)"
    assert db.get_session_title("s") == "Kept"


def test_clearing_a_title_frees_it(db: SessionDB) -> None:
    db.create_session("a", "cli")
    db.create_session("b", "cli")
    db.set_session_title("a", "Reusable")
    assert db.set_session_title("a", "   ") is True
    assert db.get_session_title("a") is None
    assert db.set_session_title("b", "Reusable") is True


def test_title_lookups(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.set_session_title("s", "Lookup me")
    assert db.get_session_title("s") == "Lookup me"
    assert db.get_session_title("ghost") is None
    found = db.get_session_by_title("Lookup me")
    assert found is not None and found["id"] == "s" and list(found) == list(SESSION_KEYS)
    assert db.get_session_by_title("Lookup") is None


LINEAGE_CASES = [
    ([], "proj", "proj"),
    (["proj"], "proj", "proj #2"),
    (["proj", "proj #2"], "proj", "proj #3"),
    (["proj", "proj #2"], "proj #2", "proj #3"),
    (["proj", "proj #3"], "proj", "proj #4"),
    (["proj #2"], "proj", "proj #3"),
    (["proj", "proj #2", "project #9", "proj #x"], "proj", "proj #3"),
    (["other"], "proj", "proj"),
    (["50% off", "50% off #2"], "50% off", "50% off #3"),
    (["50x off #7"], "50% off", "50% off"),
    (["axb #5"], "a_b", "a_b"),
    (["a\\b", "a\\b #4"], "a\\b", "a\\b #5"),
    (["数据库重构"], "数据库重构", "数据库重构 #2"),
]


@pytest.mark.parametrize(("existing", "base", "expected"), LINEAGE_CASES)
def test_get_next_title_in_lineage(
    db: SessionDB, existing: list[str], base: str, expected: str
) -> None:
    for index, title in enumerate(existing):
        db.create_session(f"s{index}", "cli")
        db.set_session_title(f"s{index}", title)
    assert db.get_next_title_in_lineage(base) == expected


# (title, started_at) per session; the query; the title of the session it must resolve to.
RESOLVE_TITLE_CASES = [
    pytest.param([("proj", 100)], "proj", "proj", id="exact-only"),
    pytest.param(
        [("proj", 100), ("proj #2", 200), ("proj #3", 300)], "proj", "proj #3",
        id="newest-numbered-variant",
    ),
    pytest.param(
        [("proj", 100), ("proj #3", 200), ("proj #2", 300)], "proj", "proj #2",
        id="newest-by-start-not-by-number",
    ),
    pytest.param([("proj #2", 200)], "proj", "proj #2", id="numbered-without-base"),
    pytest.param([("proj", 100), ("proj #2", 200)], "proj #2", "proj #2", id="exact-numbered"),
    pytest.param([("proj", 100), ("project #2", 200)], "proj", "proj", id="other-base-ignored"),
    pytest.param([("a_b", 100), ("axb #2", 200)], "a_b", "a_b", id="underscore-is-literal"),
    pytest.param([("5%", 100), ("5x #2", 200)], "5%", "5%", id="percent-is-literal"),
    pytest.param([("other", 100)], "proj", None, id="no-match"),
]  # fmt: skip


@pytest.mark.parametrize(("sessions", "query", "expected_title"), RESOLVE_TITLE_CASES)
def test_resolve_session_by_title(
    db: SessionDB,
    raw: RawSQL,
    sessions: list[tuple[str, float]],
    query: str,
    expected_title: str | None,
) -> None:
    ids = {}
    for index, (title, started_at) in enumerate(sessions):
        ids[title] = make_session(db, raw, f"s{index}", started_at=started_at, title=title)
    expected = None if expected_title is None else ids[expected_title]
    assert db.resolve_session_by_title(query) == expected


# -- ids -----------------------------------------------------------------------------------------
RESOLVE_ID_SESSIONS = ["a_b1", "a%b2", "axb3", "abc-123", "abd-456", "back\\slash", "z"]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        pytest.param("a_b1", "a_b1", id="exact"),
        pytest.param("z", "z", id="exact-which-is-also-a-prefix-of-nothing-else"),
        pytest.param("abc", "abc-123", id="unique-prefix"),
        pytest.param("abd-4", "abd-456", id="unique-longer-prefix"),
        pytest.param("a_", "a_b1", id="underscore-is-literal"),
        pytest.param("a%", "a%b2", id="percent-is-literal"),
        pytest.param("ax", "axb3", id="plain-prefix"),
        pytest.param("back\\", "back\\slash", id="backslash-is-literal"),
        pytest.param("a", None, id="ambiguous"),
        pytest.param("ab", None, id="ambiguous-two"),
        pytest.param("%", None, id="bare-percent-matches-nothing"),
        pytest.param("_", None, id="bare-underscore-matches-nothing"),
        pytest.param("\\", None, id="bare-backslash-matches-nothing"),
        pytest.param("", None, id="empty"),
        pytest.param("nope", None, id="no-match"),
    ],
)
def test_resolve_session_id(db: SessionDB, query: str, expected: str | None) -> None:
    for session_id in RESOLVE_ID_SESSIONS:
        db.create_session(session_id, "cli")
    assert db.resolve_session_id(query) == expected


# -- compression lineage -------------------------------------------------------------------------
# Sessions as (id, parent, started_at, ended_at, end_reason); the root; the expected tip.
Lineage = list[tuple[str, str | None, float, float | None, str | None]]
TIP_CASES: list[Any] = [
    pytest.param(
        [("root", None, 100, 200, "compression"), ("c1", "root", 250, None, None)],
        "root", "c1", id="child-after-compression-is-tip",
    ),
    pytest.param(
        [("root", None, 100, 200, "compression"), ("c1", "root", 200, None, None)],
        "root", "c1", id="child-started-exactly-at-end",
    ),
    pytest.param(
        # A deliberate difference from SPEC's "started at or after the parent's end": the
        # gateway raced compression and wrote the continuation first (iot 0.22.2's rule).
        [("root", None, 100, 200, "compression"), ("c1", "root", 150, None, None)],
        "root", "c1", id="child-started-before-parent-ended-is-a-continuation",
    ),
    pytest.param(
        [
            ("root", None, 100, 200, "compression"),
            ("live", "root", 210, None, None),
            ("stale", "root", 400, 500, "ws_orphan_reap"),
        ],
        "root", "live", id="live-continuation-wins-over-a-newer-stale-sibling",
    ),
    pytest.param(
        [
            ("root", None, 100, 200, "compression"),
            ("live", "root", 400, None, None),
            ("c1", "root", 210, 300, "compression"),
            ("c2", "c1", 310, None, None),
        ],
        "root", "c2", id="a-sibling-that-continued-the-chain-wins",
    ),
    pytest.param(
        [("root", None, 100, 200, "user_exit"), ("c1", "root", 250, None, None)],
        "root", "root", id="parent-not-ended-by-compression",
    ),
    pytest.param(
        [("root", None, 100, None, None), ("c1", "root", 250, None, None)],
        "root", "root", id="live-parent",
    ),
    pytest.param(
        [
            ("root", None, 100, 200, "compression"),
            ("c1", "root", 210, 300, "compression"),
            ("c2", "c1", 310, None, None),
        ],
        "root", "c2", id="chain-of-three-from-root",
    ),
    pytest.param(
        [
            ("root", None, 100, 200, "compression"),
            ("c1", "root", 210, 300, "compression"),
            ("c2", "c1", 310, None, None),
        ],
        "c1", "c2", id="chain-of-three-from-middle",
    ),
    pytest.param(
        [
            ("root", None, 100, 200, "compression"),
            ("c1", "root", 210, 300, "compression"),
            ("c2", "c1", 310, None, None),
        ],
        "c2", "c2", id="tip-of-itself",
    ),
    pytest.param(
        [
            ("root", None, 100, 200, "compression"),
            ("c1", "root", 210, 300, "user_exit"),
            ("c2", "c1", 310, None, None),
        ],
        "root", "c1", id="chain-stops-at-non-compression-end",
    ),
    pytest.param(
        [
            ("root", None, 100, 200, "compression"),
            ("older", "root", 220, None, None),
            ("newer", "root", 260, None, None),
        ],
        "root", "newer", id="newest-continuation-wins",
    ),
]  # fmt: skip


def _build_lineage(db: SessionDB, raw: RawSQL, lineage: Lineage) -> None:
    for session_id, parent, started_at, ended_at, end_reason in lineage:
        make_session(
            db, raw, session_id, started_at=started_at, ended_at=ended_at,
            end_reason=end_reason, parent=parent,
        )  # fmt: skip


@pytest.mark.parametrize(("lineage", "start", "tip"), TIP_CASES)
def test_get_compression_tip(
    db: SessionDB, raw: RawSQL, lineage: Lineage, start: str, tip: str
) -> None:
    _build_lineage(db, raw, lineage)
    assert db.get_compression_tip(start) == tip


def test_get_compression_tip_of_unknown_session_is_none(db: SessionDB) -> None:
    assert db.get_compression_tip("ghost") is None


# -- list_sessions_rich --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("content", "expected"),
    [
        pytest.param("hello world", "hello world", id="short"),
        pytest.param("  padded\n", "padded", id="stripped"),
        pytest.param("line one\nline two", "line one line two", id="newline-as-space"),
        pytest.param("a\r\nb", "a  b", id="crlf-as-two-spaces"),
        pytest.param("x" * 60, "x" * 60, id="exactly-60"),
        pytest.param("x" * 61, "x" * 60 + "...", id="61-is-cut"),
        pytest.param("数据库" * 30, ("数据库" * 30)[:60] + "...", id="cjk-counted-in-chars"),
    ],
)
def test_list_sessions_rich_preview(db: SessionDB, content: str, expected: str) -> None:
    db.create_session("s", "cli")
    db.append_message("s", "system", "system prompt text comes first")
    db.append_message("s", "assistant", "an assistant greeting")
    db.append_message("s", "user", None)  # no content: not a preview
    db.append_message("s", "user", content)
    db.append_message("s", "user", "a later user message")
    (row,) = db.list_sessions_rich()
    assert row["preview"] == expected


def test_list_sessions_rich_without_user_message_has_empty_preview(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.append_message("s", "assistant", "only the assistant spoke")
    (row,) = db.list_sessions_rich()
    assert row["preview"] == ""


def test_list_sessions_rich_row_shape_and_last_active(db: SessionDB, raw: RawSQL) -> None:
    make_session(db, raw, "quiet", started_at=1000.0)
    make_session(db, raw, "busy", started_at=500.0)
    first = db.append_message("busy", "user", "hi")
    second = db.append_message("busy", "assistant", "hello")
    raw.set_message_time(first, 600.0)
    raw.set_message_time(second, 900.0)

    rows = {row["id"]: row for row in db.list_sessions_rich()}
    assert list(rows["quiet"]) == list(LISTING_KEYS)
    assert list(rows["busy"]) == list(LISTING_KEYS)
    assert rows["quiet"]["last_active"] == pytest.approx(1000.0)
    assert rows["busy"]["last_active"] == pytest.approx(900.0)
    assert rows["busy"]["message_count"] == 2


def test_list_sessions_rich_order_limit_offset(db: SessionDB, raw: RawSQL) -> None:
    for started_at in [300.0, 100.0, 500.0, 200.0, 400.0]:
        make_session(db, raw, f"s{int(started_at)}", started_at=started_at)
    assert [r["id"] for r in db.list_sessions_rich()] == ["s500", "s400", "s300", "s200", "s100"]
    assert [r["id"] for r in db.list_sessions_rich(limit=2)] == ["s500", "s400"]
    assert [r["id"] for r in db.list_sessions_rich(limit=2, offset=2)] == ["s300", "s200"]
    assert db.list_sessions_rich(offset=10) == []


def test_list_sessions_rich_source_filters(db: SessionDB, raw: RawSQL) -> None:
    make_session(db, raw, "cli-1", started_at=100.0, source="cli")
    make_session(db, raw, "tg-1", started_at=200.0, source="telegram")
    make_session(db, raw, "tool-1", started_at=300.0, source="tool")
    make_session(db, raw, "discord-1", started_at=400.0, source="discord")

    def ids(**kwargs: Any) -> list[str]:
        return [row["id"] for row in db.list_sessions_rich(**kwargs)]

    assert ids(source="telegram") == ["tg-1"]
    assert ids(exclude_sources=["tool"]) == ["discord-1", "tg-1", "cli-1"]
    assert ids(exclude_sources=["tool", "discord"]) == ["tg-1", "cli-1"]
    assert ids(source="cli", exclude_sources=["tool"]) == ["cli-1"]


def test_several_sources_keep_any_of_them_everywhere_a_source_filters(
    db: SessionDB, raw: RawSQL
) -> None:
    """``source`` takes a list too (issue 27: the CLI's repeatable ``--source``): listing
    (both statement shapes, and the activity order), counts, the plain listing, export and
    prune keep the sessions of any of the sources; one source in a list is that source; an
    empty list keeps none, as search's ``source_filter=[]``."""
    for n, source in enumerate(["cli", "telegram", "tool", "discord", "telegram"]):
        make_session(db, raw, f"{source}-{n}", started_at=100.0 * (n + 1), ended_at=
                     100.0 * (n + 1) + 1, end_reason="user_exit", source=source)  # fmt: skip
    several = ["telegram", "discord", "telegram", "no-such-source"]
    expected = ["telegram-4", "discord-3", "telegram-1"]

    def ids(**kwargs: Any) -> list[str]:
        return [row["id"] for row in db.list_sessions_rich(**kwargs)]

    assert ids(source=several) == expected
    assert ids(source=tuple(several), limit=2, offset=1) == expected[1:]
    assert ids(source=several, order_by_last_active=True) == expected
    assert ids(source=several, exclude_sources=["discord"]) == ["telegram-4", "telegram-1"]
    assert ids(source=["cli"]) == ids(source="cli") == ["cli-0"]
    assert ids(source=[]) == [] and ids(source=[], order_by_last_active=True) == []
    assert db.session_count(source=several) == 3
    assert db.session_count(source=[]) == 0
    assert db.session_count(source=["cli", "tool"], exclude_sources=["tool"]) == 1
    assert [row["id"] for row in db.search_sessions(source=several)] == expected
    assert [row["id"] for row in db.export_all(source=["cli", "tool"])] == ["tool-2", "cli-0"]

    assert db.prune_sessions_before(150.0, source=several) == 0  # cli-0 is the only one
    assert db.prune_sessions_before(250.0, source=several) == 1  # telegram-1
    assert db.prune_sessions_before(1000.0, source=["telegram", "tool"]) == 2
    assert db.prune_sessions(older_than_days=1, source=[]) == 0
    assert sorted(row["id"] for row in db.search_sessions()) == ["cli-0", "discord-3"]


@pytest.mark.parametrize(
    ("source", "error"),
    [(42, TypeError), (b"cli", TypeError), (["cli", 7], TypeError), ([None], TypeError),
     (["cli", "a\x00b"], ValueError)],
)  # fmt: skip
def test_a_source_list_of_the_wrong_things_is_refused_typed(
    db: SessionDB, raw: RawSQL, source: object, error: type[Exception]
) -> None:
    make_session(db, raw, "ended", started_at=1000.0, ended_at=1001.0, end_reason="x")
    with pytest.raises(error):
        db.list_sessions_rich(source=source)  # type: ignore[arg-type]
    with pytest.raises(error):
        db.prune_sessions_before(2000.0, source=source)  # type: ignore[arg-type]
    assert db.get_session("ended") is not None


def test_list_sessions_rich_hides_children_unless_asked(db: SessionDB, raw: RawSQL) -> None:
    make_session(db, raw, "parent", started_at=100.0)
    make_session(db, raw, "subagent", started_at=200.0, parent="parent")
    assert [row["id"] for row in db.list_sessions_rich()] == ["parent"]
    assert [row["id"] for row in db.list_sessions_rich(include_children=True)] == [
        "subagent",
        "parent",
    ]


def test_an_untitled_tip_is_listed_under_its_roots_title_and_its_whole_chain(
    db: SessionDB, raw: RawSQL
) -> None:
    # iot 0.22.2 (#106165): the title moves root -> tip after the publish; a rotation cut
    # off in between still lists the conversation under its name.
    make_session(db, raw, "r", started_at=1000.0, ended_at=2000.0, end_reason="compression",
                 title="Bot Chat")
    make_session(db, raw, "m", started_at=2001.0, ended_at=3000.0, end_reason="compression",
                 parent="r")
    make_session(db, raw, "t", started_at=3001.0, parent="m")
    (row,) = db.list_sessions_rich()
    assert (row["id"], row["title"], row["_lineage_root_id"]) == ("t", "Bot Chat", "r")
    assert row["_lineage_ids"] == ["r", "m", "t"] == db.get_compression_chain("r")
    assert db.get_compression_chain("m") == ["m", "t"]
    assert db.get_compression_chain("t") == ["t"]
    assert db.get_compression_chain("nobody") == ["nobody"]
    assert db.get_compression_chain("\x00") == []
    db.set_session_read("t", False)
    assert db.list_sessions_rich()[0]["unread"] is True
    assert [row["id"] for row in db.list_sessions_rich(include_children=True)] == ["t", "m", "r"]


def test_list_sessions_rich_with_children_lists_every_session_of_a_chain_as_itself(
    db: SessionDB, raw: RawSQL
) -> None:
    # Hermes skips the compression projection when children are listed: every session of the
    # chain appears once, as itself (projecting would show the tip twice and lose the root).
    _compressed_conversation(db, raw)
    rows = db.list_sessions_rich(include_children=True)
    assert [row["id"] for row in rows] == ["tip", "root"]
    assert all(list(row) == list(LISTING_KEYS) for row in rows)
    assert rows[1]["end_reason"] == "compression"
    assert rows[1]["preview"] == "root question"


def _compressed_conversation(db: SessionDB, raw: RawSQL) -> None:
    make_session(
        db, raw, "root", started_at=1000.0, ended_at=2000.0, end_reason="compression",
        title="Refactor",
    )  # fmt: skip
    make_session(db, raw, "tip", started_at=2001.0, parent="root", title="Refactor #2")
    timed_messages = [
        ("root", 1500.0, "user", "root question", {}),
        ("root", 1600.0, "assistant", "root answer", {}),
        ("tip", 2100.0, "user", "summary of the earlier conversation\nand a new question", {}),
        ("tip", 2200.0, "assistant", "tip answer", {"tool_calls": [tool_call("c1")]}),
        ("tip", 2500.0, "tool", "tool output", {"tool_call_id": "c1", "tool_name": "terminal"}),
    ]
    for session_id, timestamp, role, content, extra in timed_messages:
        raw.set_message_time(db.append_message(session_id, role, content, **extra), timestamp)


def test_list_sessions_rich_projects_compression_root_onto_its_tip(
    db: SessionDB, raw: RawSQL
) -> None:
    _compressed_conversation(db, raw)
    (row,) = db.list_sessions_rich()
    tip = db.get_session("tip")
    assert tip is not None
    assert row["id"] == "tip"
    assert row["_lineage_root_id"] == "root"
    assert list(row) == list(PROJECTED_LISTING_KEYS)
    assert row["started_at"] == pytest.approx(1000.0)  # where the conversation began
    assert row["ended_at"] is None and row["end_reason"] is None
    assert row["message_count"] == 3 and row["tool_call_count"] == 1
    assert row["title"] == "Refactor #2"
    assert row["preview"] == "summary of the earlier conversation and a new question"
    assert row["_lineage_ids"] == ["root", "tip"]
    assert row["continuation_kind"] == "compression"
    assert row["unread"] is False
    assert row["last_active"] == pytest.approx(2500.0)


def test_list_sessions_rich_projection_shows_the_tips_working_tree(
    db: SessionDB, raw: RawSQL
) -> None:
    # Newest Hermes (0.18) projects cwd, git_branch and git_repo_root too: the conversation
    # goes on in the tip's working tree.
    _compressed_conversation(db, raw)
    assert db.update_session_cwd("root", "/old", "main", "/old") == 1  # its Git claim
    assert db.update_session_cwd("tip", "/new/sub", "feature", "/new") == 1
    (row,) = db.list_sessions_rich()
    assert (row["cwd"], row["git_branch"], row["git_repo_root"]) == ("/new/sub", "feature", "/new")
    (unprojected,) = db.list_sessions_rich(project_compression_tips=False)
    assert (unprojected["cwd"], unprojected["git_branch"]) == ("/old", "main")


@pytest.mark.parametrize("source", [None, "cli"], ids=["index-walk", "page-first"])
def test_list_sessions_rich_pages_of_equal_start_times_cover_every_session_once(
    db: SessionDB, raw: RawSQL, source: str | None
) -> None:
    # Both statement shapes (a source filter chooses the page first) break ties on id, so
    # paging through sessions that started in the same instant neither repeats nor skips one.
    names = [f"s{n:02d}" for n in range(23)]
    for n, name in enumerate(reversed(names)):
        make_session(db, raw, name, started_at=100.0 + (n // 7))
    seen: list[str] = []
    for offset in range(0, 30, 4):
        seen += [row["id"] for row in db.list_sessions_rich(source=source, limit=4, offset=offset)]
    assert sorted(seen) == sorted(names) and len(seen) == len(names)
    assert seen == [
        row["id"] for row in db.list_sessions_rich(source=source, limit=100)
    ]


def test_list_sessions_rich_dicts_are_the_records_as_dicts(
    db: SessionDB, raw: RawSQL, store_url: str
) -> None:
    _compressed_conversation(db, raw)
    make_session(db, raw, "plain", started_at=3000.0, source="telegram")
    db.append_message("plain", "user", "  hello\r\nthere  ")
    sync_db = SessionDB(url=store_url)
    repo = sync_db.repository
    for kwargs in (
        {}, {"source": "cli"}, {"include_children": True}, {"exclude_sources": ["x"]},
        {"order_by_last_active": True}, {"order_by_last_active": True, "id_query": "roo"},
        {"min_message_count": 2},
    ):  # fmt: skip
        records = [listing.to_dict() for listing in repo.list_sessions_rich(**kwargs)]
        assert repo.list_sessions_rich_dicts(**kwargs) == records
        assert [list(row) for row in records] == [
            list(row) for row in repo.list_sessions_rich_dicts(**kwargs)
        ]
    for threshold in (0, 2, 3):
        assert repo.count_listed_sessions(min_message_count=threshold) == len(
            repo.list_sessions_rich(min_message_count=threshold, limit=100)
        )
    sync_db.close()


def test_list_sessions_rich_projection_follows_a_chain(db: SessionDB, raw: RawSQL) -> None:
    _build_lineage(
        db,
        raw,
        [
            ("root", None, 100, 200, "compression"),
            ("c1", "root", 210, 300, "compression"),
            ("c2", "c1", 310, None, None),
        ],
    )
    (row,) = db.list_sessions_rich()
    assert (row["id"], row["_lineage_root_id"], row["started_at"]) == ("c2", "root", 100)


def test_list_sessions_rich_without_projection_shows_the_root(db: SessionDB, raw: RawSQL) -> None:
    _compressed_conversation(db, raw)
    (row,) = db.list_sessions_rich(project_compression_tips=False)
    assert row["id"] == "root"
    assert row["end_reason"] == "compression"
    assert row["preview"] == "root question"
    assert "_lineage_root_id" not in row


def test_list_sessions_rich_does_not_project_a_non_continuation(db: SessionDB, raw: RawSQL) -> None:
    _build_lineage(
        db,
        raw,
        [("root", None, 100, 200, "user_exit"), ("child", "root", 250, None, None)],
    )
    (row,) = db.list_sessions_rich()
    assert row["id"] == "root"
    assert "_lineage_root_id" not in row


def test_list_sessions_rich_projects_a_racing_continuation(db: SessionDB, raw: RawSQL) -> None:
    """The continuation started before its parent ended (a gateway race), and a stale sibling
    started later: the listing shows the live one, as get_compression_tip and a resume do."""
    _build_lineage(db, raw, [
        ("root", None, 100, 200, "compression"), ("early", "root", 150, None, None),
        ("stale", "root", 300, 400, "ws_orphan_reap"),
    ])  # fmt: skip
    (row,) = db.list_sessions_rich()
    assert (row["id"], row["_lineage_root_id"]) == ("early", "root")
    assert db.get_compression_tip("root") == db.resolve_resume_session_id("root") == "early"


# -- Hermes 0.18's listing keywords: min_message_count, order_by_last_active, id_query ----------
def _timed_session(
    db: SessionDB, raw: RawSQL, session_id: str, started_at: float, *activity: float,
    parent: str | None = None, ended_at: float | None = None, end_reason: str | None = None,
    source: str = "cli", model_config: dict[str, Any] | None = None,
) -> str:
    """A session started at ``started_at`` with one user message at each ``activity`` time."""
    db.create_session(session_id, source, model_config=model_config, parent_session_id=parent)
    raw.set_times(session_id, started_at=started_at, ended_at=ended_at, end_reason=end_reason)
    for timestamp in activity:
        raw.set_message_time(db.append_message(session_id, "user", f"at {timestamp}"), timestamp)
    return session_id


def _ids(rows: list[dict[str, Any]]) -> list[str]:
    return [row["id"] for row in rows]


@pytest.mark.parametrize("recent", [False, True], ids=["by-start", "by-activity"])
def test_min_message_count_lists_and_counts_sessions_with_at_least_n(
    db: SessionDB, raw: RawSQL, recent: bool
) -> None:
    for count in range(4):
        _timed_session(db, raw, f"m{count}", 100.0 + count, *[200.0 + count] * count)

    def listed(n: int) -> list[str]:
        return _ids(db.list_sessions_rich(min_message_count=n, order_by_last_active=recent))

    assert listed(2) == ["m3", "m2"]
    assert listed(3) == ["m3"] and listed(4) == []
    assert listed(0) == listed(-7) == ["m3", "m2", "m1", "m0"]  # only a positive count filters
    assert [db.session_count(min_message_count=n) for n in (-1, 0, 1, 2, 3, 4)] == [
        4, 4, 3, 2, 1, 0,
    ]  # fmt: skip
    assert db.session_count(min_message_count=2, exclude_children=True) == len(listed(2))


def test_min_message_count_filters_the_listed_row_not_its_continuation(
    db: SessionDB, raw: RawSQL
) -> None:
    # Hermes compares the row's own message_count (the root's), before projecting it.
    _compressed_conversation(db, raw)  # root: 2 messages, tip: 3
    assert _ids(db.list_sessions_rich(min_message_count=3)) == []
    assert _ids(db.list_sessions_rich(min_message_count=2)) == ["tip"]
    assert db.session_count(min_message_count=3) == 1  # the tip, counted as itself


def test_order_by_last_active_surfaces_an_old_root_whose_tip_is_fresh(
    db: SessionDB, raw: RawSQL
) -> None:
    _compressed_conversation(db, raw)  # started at 1000, its tip last active at 2500
    _timed_session(db, raw, "newer", 2300.0, 2400.0)
    _timed_session(db, raw, "idle", 3000.0)  # no messages: active when it started

    assert _ids(db.list_sessions_rich()) == ["idle", "newer", "tip"]
    rows = db.list_sessions_rich(order_by_last_active=True)
    assert _ids(rows) == ["idle", "tip", "newer"]
    assert rows[1]["_lineage_root_id"] == "root" and rows[1]["started_at"] == 1000.0
    assert rows[1]["last_active"] == 2500.0
    # Unprojected, the root keeps its place in the order and shows its own last activity.
    unprojected = db.list_sessions_rich(order_by_last_active=True, project_compression_tips=False)
    assert [(row["id"], row["last_active"]) for row in unprojected] == [
        ("idle", 3000.0), ("root", 1600.0), ("newer", 2400.0),
    ]  # fmt: skip


def test_order_by_last_active_applies_limit_and_offset_after_ordering(
    db: SessionDB, raw: RawSQL
) -> None:
    # Started in one order, active in another: every page is a slice of the activity order.
    for n, active in enumerate([500.0, 900.0, 100.0, 700.0, 300.0, 800.0, 200.0]):
        _timed_session(db, raw, f"s{n}", 10.0 + n, active)
    everything = _ids(db.list_sessions_rich(order_by_last_active=True, limit=100))
    assert everything == ["s1", "s5", "s3", "s0", "s4", "s6", "s2"]
    pages = [
        _ids(db.list_sessions_rich(order_by_last_active=True, limit=3, offset=offset))
        for offset in (0, 3, 6, 9)
    ]
    assert pages == [everything[0:3], everything[3:6], everything[6:], []]


def test_order_by_last_active_breaks_ties_by_start_then_id_bytewise(
    db: SessionDB, raw: RawSQL
) -> None:
    # As Hermes: last activity, then started_at, then id, all descending; ids compare as
    # SQLite compares text, by bytes ("Z" < "_" < "a" < "é"), whatever the server's locale.
    for session_id in ["a", "Z", "_x", "é", "B"]:
        _timed_session(db, raw, session_id, 100.0, 500.0)
    _timed_session(db, raw, "later-start", 200.0, 500.0)
    _timed_session(db, raw, "idle", 500.0)  # no message: its start is its activity
    rows = db.list_sessions_rich(order_by_last_active=True)
    assert _ids(rows) == ["idle", "later-start", "é", "a", "_x", "Z", "B"]


@pytest.mark.postgresql
def test_order_by_last_active_tie_order_ignores_a_postgresql_locale(pg_databases: Any) -> None:
    # A server whose databases sort text by a language's rules (ICU en-US: "_x" < "a" < "B"
    # < "é" < "Z") still breaks the tie by bytes, as Hermes's SQLite does.
    name = f"sstest_icu_{uuid.uuid4().hex[:10]}"
    with pg_databases.admin.connect() as conn:
        conn.execute(sa.text(
            f'CREATE DATABASE "{name}" TEMPLATE template0 LOCALE_PROVIDER icu '
            "ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'"
        ))  # fmt: skip
    pg_databases.created.append(name)
    url = (
        sa.make_url(pg_databases.admin.url).set(database=name).render_as_string(hide_password=False)
    )
    migrate.upgrade(url)
    db, raw = SessionDB(url=url), RawSQL(url)
    try:
        for session_id in ["a", "Z", "_x", "é", "B"]:
            _timed_session(db, raw, session_id, 100.0, 500.0)
        assert raw.scalar("SELECT string_agg(id, ' ' ORDER BY id) FROM sessions") == "_x a B é Z"
        assert _ids(db.list_sessions_rich(order_by_last_active=True)) == ["é", "a", "_x", "Z", "B"]
    finally:
        db.close()
        raw.close()


# (id, parent, started_at, ended_at, end_reason, source, model_config, message times)
ChainCase = list[tuple[str, str | None, float, float | None, str | None, str,
                       dict[str, Any] | None, tuple[float, ...]]]  # fmt: skip
ACTIVITY_CHAIN_CASES: list[Any] = [
    pytest.param([
        ("root", None, 100, 200, "compression", "cli", None, (150,)),
        ("cont", "root", 201, None, None, "cli", None, (900,)),
    ], ["root", "other"], id="continuation-lifts-its-root"),
    pytest.param([
        ("root", None, 100, 200, "compression", "cli", None, (150,)),
        ("early", "root", 180, None, None, "cli", None, (900,)),
    ], ["root", "other"], id="continuation-that-started-before-the-end-lifts-it-too"),
    pytest.param([
        ("root", None, 100, 200, "compression", "cli", None, (150,)),
        ("c1", "root", 201, 300, "compression", "cli", None, (250,)),
        ("c2", "c1", 301, None, None, "cli", None, (900,)),
    ], ["root", "other"], id="the-whole-chain-counts"),
    pytest.param([
        ("root", None, 100, 200, "compression", "cli", None, (150,)),
        ("c1", "root", 201, 300, "user_exit", "cli", None, (250,)),
        ("c2", "c1", 301, None, None, "cli", None, (900,)),
    ], ["other", "root"], id="chain-stops-at-a-member-not-ended-by-compression"),
    pytest.param([
        ("root", None, 100, 200, "user_exit", "cli", None, (150,)),
        ("child", "root", 201, None, None, "cli", None, (900,)),
    ], ["other", "root"], id="child-of-a-root-not-ended-by-compression"),
    pytest.param([
        ("root", None, 100, 200, "compression", "cli", None, (150,)),
        ("branch", "root", 201, None, None, "cli", {"_branched_from": "root"}, (900,)),
    ], ["branch", "other", "root"], id="branch-is-listed-apart-and-lifts-nothing"),
    pytest.param([
        ("root", None, 100, 200, "compression", "cli", None, (150,)),
        ("delegate", "root", 201, None, None, "cli", {"_delegate_from": "root"}, (900,)),
    ], ["other", "root"], id="delegate-run-lifts-nothing"),
    pytest.param([
        ("root", None, 100, 200, "compression", "cli", None, (150,)),
        ("tool-run", "root", 201, None, None, "tool", None, (900,)),
    ], ["other", "root"], id="tool-run-lifts-nothing"),
    pytest.param([
        ("root", None, 100, 200, "compression", "cli", None, (150,)),
        ("stale", "root", 201, 210, "ws_orphan_reap", "cli", None, (900,)),
        ("live", "root", 205, None, None, "cli", None, (160,)),
    ], ["root", "other"], id="every-sibling-counts-not-only-the-tip"),
    pytest.param([
        ("root", None, 100, 200, "compression", "cli", None, ()),
        ("cont", "root", 950, None, None, "cli", None, ()),
    ], ["root", "other"], id="a-member-without-messages-is-active-at-its-start"),
]  # fmt: skip


@pytest.mark.parametrize(("chain", "order"), ACTIVITY_CHAIN_CASES)
def test_order_by_last_active_takes_the_latest_activity_of_the_forward_chain(
    db: SessionDB, raw: RawSQL, chain: ChainCase, order: list[str]
) -> None:
    for session_id, parent, started, ended, reason, source, config, times in chain:
        _timed_session(db, raw, session_id, started, *times, parent=parent, ended_at=ended,
                       end_reason=reason, source=source, model_config=config)  # fmt: skip
    _timed_session(db, raw, "other", 50.0, 500.0)
    rows = db.list_sessions_rich(order_by_last_active=True, project_compression_tips=False)
    assert _ids(rows) == order


def test_order_by_last_active_ends_on_a_cycle_of_parents(db: SessionDB, raw: RawSQL) -> None:
    # A corrupt file whose compression parents loop: Hermes's UNION ALL walk would not end.
    _timed_session(db, raw, "a", 100.0, 150.0, ended_at=200.0, end_reason="compression")
    _timed_session(db, raw, "b", 201.0, 900.0, parent="a", ended_at=300.0,
                   end_reason="compression")  # fmt: skip
    _timed_session(db, raw, "self", 50.0, 60.0, ended_at=70.0, end_reason="compression")
    raw.execute("UPDATE sessions SET parent_session_id = 'b' WHERE id = 'a'")
    raw.execute("UPDATE sessions SET parent_session_id = 'self' WHERE id = 'self'")
    rows = db.list_sessions_rich(order_by_last_active=True, include_children=True)
    assert _ids(rows) == ["b", "a", "self"]
    assert _ids(db.list_sessions_rich(order_by_last_active=True, include_children=True,
                                      id_query="b")) == ["b", "a"]  # fmt: skip


def _id_query_family(db: SessionDB, raw: RawSQL) -> None:
    _timed_session(db, raw, "Root-AAA", 100.0, 150.0, ended_at=200.0, end_reason="compression")
    _timed_session(db, raw, "tip-BBB", 201.0, 900.0, parent="Root-AAA")
    _timed_session(db, raw, "100%_done\\x", 300.0, 400.0)
    _timed_session(db, raw, "100x-done", 310.0, 390.0)
    _timed_session(db, raw, "Ünï", 320.0, 380.0)
    _timed_session(db, raw, "ünï", 330.0, 370.0)


EVERY_ID_QUERY_ROW = ["tip-BBB", "100%_done\\x", "100x-done", "Ünï", "ünï"]  # by activity
ID_QUERY_CASES = [
    pytest.param("root-aaa", ["tip-BBB"], id="the-root-id-finds-the-projected-conversation"),
    pytest.param("BBB", ["tip-BBB"], id="the-tip-id-finds-it-too"),
    pytest.param("  ROOT ", ["tip-BBB"], id="stripped-and-ascii-case-insensitive"),
    pytest.param("-", ["tip-BBB", "100x-done"], id="substring-anywhere"),
    pytest.param("%", ["100%_done\\x"], id="percent-is-literal"),
    pytest.param("_do", ["100%_done\\x"], id="underscore-is-literal"),
    pytest.param("\\x", ["100%_done\\x"], id="backslash-is-literal"),
    pytest.param("%_DONE\\", ["100%_done\\x"], id="all-three-at-once"),
    # Hermes lower-cases the query in Python and the id with SQLite's lower() (ASCII only):
    # "Ü" in a query finds the lower-case id, never the upper-case one.
    pytest.param("Ünï", ["ünï"], id="non-ascii-query-is-lowered"),
    pytest.param("ünï", ["ünï"], id="non-ascii-ids-keep-their-case"),
    pytest.param("nothing-like-it", [], id="no-match"),
    pytest.param("", EVERY_ID_QUERY_ROW, id="empty"),
    pytest.param(" \t", EVERY_ID_QUERY_ROW, id="blank"),
    pytest.param(None, EVERY_ID_QUERY_ROW, id="none"),
]


@pytest.mark.parametrize(("query", "expected"), ID_QUERY_CASES)
def test_id_query_matches_the_row_and_its_chain(
    db: SessionDB, raw: RawSQL, query: str | None, expected: list[str]
) -> None:
    _id_query_family(db, raw)
    rows = db.list_sessions_rich(order_by_last_active=True, id_query=query)
    assert _ids(rows) == expected


def test_id_query_is_ignored_without_order_by_last_active(db: SessionDB, raw: RawSQL) -> None:
    # Hermes builds the id filter on the activity path only; elsewhere it is dropped.
    _id_query_family(db, raw)
    everything = _ids(db.list_sessions_rich())
    assert _ids(db.list_sessions_rich(id_query="root")) == everything
    assert _ids(db.list_sessions_rich(id_query="nul\x00")) == everything


@pytest.mark.parametrize("query", ["a\x00", "\ud800"], ids=["nul", "lone-surrogate"])
def test_id_query_no_id_can_hold_matches_nothing(db: SessionDB, raw: RawSQL, query: str) -> None:
    _id_query_family(db, raw)
    assert db.list_sessions_rich(order_by_last_active=True, id_query=query) == []


@pytest.mark.parametrize(
    "call",
    [
        lambda db: db.list_sessions_rich(min_message_count="2"),
        lambda db: db.list_sessions_rich(min_message_count=2.0),
        lambda db: db.list_sessions_rich(min_message_count=None),
        lambda db: db.list_sessions_rich(min_message_count=True),
        lambda db: db.session_count(min_message_count="1"),
        lambda db: db.list_sessions_rich(id_query=5),
        lambda db: db.list_sessions_rich(order_by_last_active=True, id_query=b"root"),
    ],
    ids=["count-str", "count-float", "count-none", "count-bool", "session-count-str",
         "id-query-int", "id-query-bytes"],
)  # fmt: skip
def test_listing_keywords_of_the_wrong_type_are_a_type_error(
    db: SessionDB, call: Callable[[SessionDB], Any]
) -> None:
    db.create_session("s", "cli")
    with pytest.raises(TypeError):
        call(db)


def test_a_min_message_count_past_every_counter_matches_nothing(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.append_message("s", "user", "hi")
    for recent in (False, True):
        assert db.list_sessions_rich(min_message_count=2**63, order_by_last_active=recent) == []
    assert db.session_count(min_message_count=2**100) == 0
    assert _ids(db.list_sessions_rich(min_message_count=1)) == ["s"]


def test_listing_keywords_come_after_v6_positional_parameters(db: SessionDB) -> None:
    # Hermes 0.18/0.19 added them among its own parameters; its callers name them, and v6 callers
    # pass the first six positionally (SPEC), so ours keep v6's order and append them.
    import inspect

    names = list(inspect.signature(SessionDB.list_sessions_rich).parameters)[1:]
    assert names[:6] == ["source", "exclude_sources", "limit", "offset", "include_children",
                         "project_compression_tips"]  # fmt: skip
    assert names[-10:] == ["min_message_count", "order_by_last_active", "id_query",
                           "search_query", "compact_rows",
                           # iot 0.22.2's (schema v26+), after the ones before them
                           "include_pinned", "include_hidden", "include_subagents",
                           "sources", "session_key"]  # fmt: skip
    assert list(inspect.signature(SessionDB.session_count).parameters)[-3:] == [
        "min_message_count", "include_subagents", "sources"]  # fmt: skip


# -- messages ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("tool_calls", "expected_increment"),
    [
        pytest.param(None, 0, id="none"),
        pytest.param([], 0, id="empty-list"),
        pytest.param([tool_call("c1")], 1, id="one-call"),
        pytest.param([tool_call("c1"), tool_call("c2"), tool_call("c3")], 3, id="three-calls"),
        pytest.param((tool_call("c1"), tool_call("c2")), 2, id="a-tuple-counts-its-calls"),
    ],
)
def test_append_message_counters(db: SessionDB, tool_calls: Any, expected_increment: int) -> None:
    db.create_session("s", "cli")
    db.append_message("s", "user", "warm-up", tool_calls=[tool_call("w")])
    message_id = db.append_message("s", "assistant", "calling", tool_calls=tool_calls)
    assert isinstance(message_id, int)
    row = db.get_session("s")
    assert row is not None
    assert row["message_count"] == 2
    assert row["tool_call_count"] == 1 + expected_increment


def test_append_message_returns_increasing_ids(db: SessionDB) -> None:
    db.create_session("s", "cli")
    ids = [db.append_message("s", "user", f"m{i}") for i in range(4)]
    assert ids == sorted(ids) and len(set(ids)) == 4
    assert [m["id"] for m in db.get_messages("s")] == ids


def test_append_message_to_unknown_session_is_a_clear_error(db: SessionDB) -> None:
    with pytest.raises((LookupError, ValueError, SessionStoreError)):
        db.append_message("ghost", "user", "hello?")
    assert db.message_count() == 0


def test_get_messages_round_trips_every_column(db: SessionDB) -> None:
    db.create_session("s", "cli")
    calls = [tool_call("call_1", "web_search", query="alembic batch mode")]
    details = [{"type": "reasoning.text", "text": "thinking", "signature": "sig"}]
    codex = [{"type": "reasoning", "id": "rs_1", "encrypted_content": "xyz"}]
    message_id = db.append_message(
        "s", "assistant", "Let me search.", tool_calls=calls, token_count=42,
        finish_reason="tool_calls", reasoning="I should search first.",
        reasoning_details=details, codex_reasoning_items=codex,
    )  # fmt: skip
    (row,) = db.get_messages("s")
    assert list(row) == list(MESSAGE_KEYS)
    assert row["id"] == message_id and row["session_id"] == "s"
    assert row["role"] == "assistant" and row["content"] == "Let me search."
    assert row["tool_calls"] == calls  # decoded
    assert row["token_count"] == 42 and row["finish_reason"] == "tool_calls"
    assert row["reasoning"] == "I should search first."
    assert json.loads(row["reasoning_details"]) == details
    assert json.loads(row["codex_reasoning_items"]) == codex
    assert isinstance(row["timestamp"], float)


def test_messages_come_in_insertion_order_whatever_their_timestamps(
    db: SessionDB, raw: RawSQL
) -> None:
    # Every real Hermes release (0.13.0 .. 0.19.0) reads ORDER BY id: a clock that stepped
    # back must not put a tool result before its call (the SPEC's v6 said timestamp, id).
    db.create_session("s", "cli")
    first = db.append_message("s", "user", "first written")
    second = db.append_message("s", "assistant", "second written")
    third = db.append_message("s", "user", "third written")
    raw.set_message_time(first, 30.0)
    raw.set_message_time(second, 10.0)
    raw.set_message_time(third, 10.0)
    assert [m["id"] for m in db.get_messages("s")] == [first, second, third]
    assert [m["content"] for m in db.get_messages_as_conversation("s")] == [
        "first written", "second written", "third written",
    ]


def test_get_messages_of_unknown_session_is_empty(db: SessionDB) -> None:
    assert db.get_messages("ghost") == []
    assert db.get_messages_as_conversation("ghost") == []


CONVERSATION_CASES: list[Any] = [
    pytest.param(
        dict(role="user", content="hi"), {"role": "user", "content": "hi"}, id="plain-user",
    ),
    pytest.param(
        dict(role="assistant", content=None, tool_calls=[tool_call("c1")]),
        {"role": "assistant", "content": None, "tool_calls": [tool_call("c1")]},
        id="assistant-tool-call-without-content",
    ),
    pytest.param(
        dict(role="tool", content="ok", tool_call_id="c1", tool_name="terminal",
             tool_calls=[tool_call("c2")]),
        {"role": "tool", "content": "ok", "tool_call_id": "c1", "tool_name": "terminal",
         "tool_calls": [tool_call("c2")]},
        id="every-optional-key",
    ),
    pytest.param(
        dict(role="assistant", content="done", reasoning="because",
             reasoning_details=[{"type": "reasoning.text", "text": "t"}],
             codex_reasoning_items=[{"id": "rs_1"}], finish_reason="stop", token_count=9),
        {"role": "assistant", "content": "done", "finish_reason": "stop", "reasoning": "because",
         "reasoning_details": [{"type": "reasoning.text", "text": "t"}],
         "codex_reasoning_items": [{"id": "rs_1"}]},
        id="assistant-reasoning",
    ),
    pytest.param(
        dict(role="user", content="q", reasoning="not for users",
             reasoning_details=[{"x": 1}], codex_reasoning_items=[{"y": 2}]),
        {"role": "user", "content": "q"},
        id="reasoning-only-on-assistant",
    ),
    pytest.param(
        dict(role="assistant", content="plain"), {"role": "assistant", "content": "plain"},
        id="assistant-without-reasoning",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("message", "expected"), CONVERSATION_CASES)
def test_get_messages_as_conversation_shape(
    db: SessionDB, message: dict[str, Any], expected: dict[str, Any]
) -> None:
    db.create_session("s", "cli")
    fields = dict(message)
    role = fields.pop("role")
    db.append_message("s", role, **fields)
    # Hermes 0.17+ carries each message's timestamp, right after role and content; iot
    # 0.22.2 puts its durable mark and the row's tool-call uids before it.
    (stored,) = db.get_messages("s")
    role_and_content, rest = list(expected.items())[:2], list(expected.items())[2:]
    uids = json.loads(stored["tool_call_uids"]) if stored["tool_call_uids"] else None
    expected = dict([
        *role_and_content, ("_db_persisted", True),
        *([("_tool_call_uids", uids)] if uids else []),
        ("timestamp", stored["timestamp"]), *rest,
    ])  # fmt: skip
    assert db.get_messages_as_conversation("s") == [expected]
    # Key order too: the expected dicts are written in the order Hermes 0.18 adds the keys.
    assert [list(m) for m in db.get_messages_as_conversation("s")] == [list(expected)]


def test_corrupt_json_in_the_store_degrades_with_a_warning(
    db: SessionDB, raw: RawSQL, caplog: pytest.LogCaptureFixture
) -> None:
    db.create_session("s", "cli")
    db.append_message(
        "s", "assistant", "fine until someone edited the file", tool_calls=[tool_call("c1")],
        reasoning="r", reasoning_details=[{"a": 1}], codex_reasoning_items=[{"b": 2}],
    )  # fmt: skip
    raw.execute(
        "UPDATE messages SET tool_calls = '{not json', reasoning_details = '[{\"a\": ', "
        "codex_reasoning_items = 'nope'"
    )
    caplog.set_level(logging.WARNING)

    (row,) = db.get_messages("s")
    assert row["tool_calls"] == []
    (message,) = db.get_messages_as_conversation("s")
    assert message["tool_calls"] == []
    assert message.get("reasoning_details") is None
    assert message.get("codex_reasoning_items") is None
    assert message["reasoning"] == "r" and message["content"].startswith("fine")

    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("tool_calls" in r.getMessage() for r in warnings)
    # Reading never repairs or loses the stored text.
    assert raw.scalar("SELECT tool_calls FROM messages") == "{not json"


def test_clear_messages_keeps_the_session_and_zeroes_counters(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.create_session("other", "cli")
    db.append_message("s", "user", "one")
    db.append_message("s", "assistant", "two", tool_calls=[tool_call("a"), tool_call("b")])
    db.append_message("other", "user", "kept")
    db.clear_messages("s")
    row = db.get_session("s")
    assert row is not None
    assert (row["message_count"], row["tool_call_count"]) == (0, 0)
    assert db.get_messages("s") == []
    assert db.message_count("other") == 1


# -- append_messages (beyond Hermes) -------------------------------------------------------------
def test_append_messages_writes_one_turn_in_order(db: SessionDB) -> None:
    db.create_session("s", "cli")
    turn = [
        {"role": "user", "content": "list files"},
        {"role": "assistant", "content": None, "reasoning": "use ls",
         "tool_calls": [tool_call("c1", cmd="ls"), tool_call("c2", cmd="pwd")],
         "finish_reason": "tool_calls"},
        {"role": "tool", "content": "a.py", "tool_call_id": "c1", "tool_name": "terminal"},
        {"role": "tool", "content": "/work", "tool_call_id": "c2", "tool_name": "terminal"},
        {"role": "assistant", "content": "a.py in /work", "finish_reason": "stop",
         "token_count": 12},
    ]  # fmt: skip
    ids = db.append_messages("s", turn)
    assert len(ids) == 5 and ids == sorted(ids)
    messages = db.get_messages("s")
    assert [m["id"] for m in messages] == ids
    assert [m["role"] for m in messages] == [m["role"] for m in turn]
    assert messages[1]["tool_calls"] == turn[1]["tool_calls"]
    assert messages[4]["token_count"] == 12
    row = db.get_session("s")
    assert row is not None
    assert (row["message_count"], row["tool_call_count"]) == (5, 2)
    assert db.append_messages("s", []) == []


def test_a_long_turn_keeps_every_id_with_its_message(db: SessionDB, raw: RawSQL) -> None:
    """More messages than one INSERT takes (SQLite: ROWS_PER_INSERT), after deletions left the
    id sequence ahead of the largest id: each id returned is its own message's, in order."""
    db.create_session("s", "cli")
    db.create_session("gone", "cli")
    db.append_messages("gone", [{"role": "user", "content": f"old {n}"} for n in range(7)])
    db.delete_session("gone")
    count = 2 * ROWS_PER_INSERT + 5
    turn = [
        {"role": "user" if n % 2 == 0 else "assistant", "content": f"message {n}",
         "tool_name": "terminal" if n % 7 == 0 else None}
        for n in range(count)
    ]  # fmt: skip
    ids = db.append_messages("s", turn)
    assert len(ids) == count and len(set(ids)) == count
    by_id = {m["id"]: m for m in db.get_messages("s")}
    assert [by_id[i]["content"] for i in ids] == [m["content"] for m in turn]
    assert [by_id[i]["tool_name"] for i in ids] == [m["tool_name"] for m in turn]
    assert [m["id"] for m in db.get_messages("s")] == ids
    assert db.get_session("s")["message_count"] == count  # type: ignore[index]
    assert db.append_message("s", "user", "after") == ids[-1] + 1


def test_a_turn_near_the_64_bit_id_ceiling_gets_its_own_ids(
    db: SessionDB, raw: RawSQL
) -> None:
    db.create_session("s", "cli")
    top = 2**63 - 1
    raw.execute(
        "INSERT INTO messages (id, session_id, role, content, timestamp) "
        "VALUES (:id, 's', 'user', 'near the top', 1.0)",
        id=top - 6,
    )
    raw.execute("UPDATE sessions SET message_count = 1 WHERE id = 's'")
    if db.store.engine.dialect.name == "postgresql":  # an explicit id leaves the sequence be
        raw.execute("SELECT setval(pg_get_serial_sequence('messages', 'id'), :id)", id=top - 6)
    turn = [{"role": "assistant", "content": f"reply {n}"} for n in range(3)]
    ids = db.append_messages("s", turn)
    assert ids == [top - 5, top - 4, top - 3]
    assert [m["content"] for m in db.get_messages("s")][1:] == [m["content"] for m in turn]


def test_append_messages_is_all_or_nothing(db: SessionDB) -> None:
    db.create_session("s", "cli")
    with pytest.raises(TypeError):
        db.append_messages("s", [{"role": "user", "content": "ok"}, {"role": 5}])
    with pytest.raises((LookupError, ValueError, SessionStoreError)):
        db.append_messages("ghost", [{"role": "user", "content": "a"}])
    assert db.message_count() == 0
    row = db.get_session("s")
    assert row is not None and row["message_count"] == 0


# -- delete and prune ----------------------------------------------------------------------------
def test_delete_session_orphans_children_and_removes_messages(db: SessionDB) -> None:
    db.create_session("parent", "cli")
    db.create_session("child", "cli", parent_session_id="parent")
    db.append_message("parent", "user", "parent message")
    db.append_message("child", "user", "child message")
    assert db.delete_session("parent") is True
    assert db.get_session("parent") is None
    child = db.get_session("child")
    assert child is not None and child["parent_session_id"] is None
    assert db.message_count() == 1 and db.message_count("child") == 1
    assert db.delete_session("parent") is False
    assert db.delete_session("never-existed") is False


def test_prune_sessions_deletes_only_old_ended_sessions(db: SessionDB, raw: RawSQL) -> None:
    now = time.time()
    old = now - 100 * DAY
    make_session(db, raw, "old-ended", started_at=old, ended_at=old + 60, end_reason="user_exit")
    make_session(db, raw, "old-live", started_at=old - DAY)
    make_session(db, raw, "recent-ended", started_at=now - DAY, ended_at=now, end_reason="timeout")
    make_session(
        db, raw, "old-ended-telegram", started_at=old, ended_at=old + 1, end_reason="reset",
        source="telegram",
    )  # fmt: skip
    make_session(db, raw, "child-of-old", started_at=now - DAY, parent="old-ended")
    db.append_message("old-ended", "user", "soon gone", timestamp=old + 30)
    db.append_message("child-of-old", "user", "survives")

    assert db.prune_sessions(older_than_days=90, source="cli") == 1
    assert db.get_session("old-ended") is None
    assert db.get_session("old-ended-telegram") is not None  # other source untouched
    assert db.get_session("old-live") is not None  # never an active session
    assert db.get_session("recent-ended") is not None
    child = db.get_session("child-of-old")
    assert child is not None and child["parent_session_id"] is None
    assert db.message_count() == 1

    assert db.prune_sessions() == 1  # default 90 days, any source: the telegram one
    assert db.get_session("old-ended-telegram") is None
    assert db.prune_sessions() == 0
    assert {r["id"] for r in db.search_sessions()} == {"old-live", "recent-ended", "child-of-old"}


def test_prune_sessions_deletes_an_old_parent_and_child_together(
    db: SessionDB, raw: RawSQL
) -> None:
    old = time.time() - 200 * DAY
    make_session(db, raw, "p", started_at=old, ended_at=old + 10, end_reason="compression")
    make_session(db, raw, "c", started_at=old + 10, ended_at=old + 20, end_reason="user_exit",
                 parent="p")  # fmt: skip
    assert db.prune_sessions(older_than_days=90) == 2
    assert db.session_count() == 0


def test_prune_sessions_before_a_cutoff_timestamp(db: SessionDB, raw: RawSQL) -> None:
    make_session(db, raw, "ended-at-1000", started_at=1000.0, ended_at=1001.0, end_reason="x")
    make_session(db, raw, "ended-at-2000", started_at=2000.0, ended_at=2001.0, end_reason="x")
    make_session(db, raw, "live-at-500", started_at=500.0)
    assert db.prune_sessions_before(1000.0) == 0  # strictly before
    assert db.prune_sessions_before(1500, source="telegram") == 0
    assert db.prune_sessions_before(1500) == 1
    assert db.get_session("ended-at-1000") is None
    assert {r["id"] for r in db.search_sessions()} == {"ended-at-2000", "live-at-500"}


@pytest.mark.parametrize(
    ("cutoff", "error"),
    [(None, TypeError), ("1500", TypeError), (True, TypeError), (float("nan"), ValueError),
     (float("inf"), ValueError)],
)  # fmt: skip
def test_prune_sessions_before_refuses_what_is_not_a_moment(
    db: SessionDB, raw: RawSQL, cutoff: object, error: type[Exception]
) -> None:
    make_session(db, raw, "ended", started_at=1000.0, ended_at=1001.0, end_reason="x")
    with pytest.raises(error):
        db.prune_sessions_before(cutoff)  # type: ignore[arg-type]
    assert db.get_session("ended") is not None


# -- search --------------------------------------------------------------------------------------
@pytest.fixture
def corpus(db: SessionDB, raw: RawSQL) -> dict[str, int]:
    make_session(db, raw, "cli-s", started_at=1000.0, source="cli")
    db.update_session_model("cli-s", "model-a")
    make_session(db, raw, "tg-s", started_at=2000.0, source="telegram")
    ids = {
        "question": db.append_message("cli-s", "user", "How do I configure alembic migrations?"),
        "answer": db.append_message(
            "cli-s", "assistant", "Run alembic upgrade head to apply the migrations."
        ),
        "thanks": db.append_message("cli-s", "user", "thanks, that worked"),
        "telegram": db.append_message("tg-s", "user", "alembic question from telegram"),
        "tool": db.append_message(
            "tg-s", "tool", "alembic output: ok", tool_call_id="c1", tool_name="terminal"
        ),
        "hyphen": db.append_message("tg-s", "user", "please run chat-send after deploy"),
        "dotted": db.append_message("tg-s", "user", "milestone P2.2 is finished"),
        "cjk": db.append_message("tg-s", "user", "我们需要重构数据库连接池"),
    }
    return ids


def test_search_messages_hit_shape(db: SessionDB, corpus: dict[str, int]) -> None:
    hits = db.search_messages("upgrade")
    assert [hit["id"] for hit in hits] == [corpus["answer"]]
    (hit,) = hits
    assert list(hit) == list(SEARCH_HIT_KEYS)
    assert all(list(message) == ["role", "content"] for message in hit["context"])
    assert hit["session_id"] == "cli-s" and hit["role"] == "assistant"
    assert hit["source"] == "cli" and hit["model"] == "model-a"
    assert hit["session_started"] == pytest.approx(1000.0)
    assert hit["tool_name"] is None
    assert ">>>" in hit["snippet"] and "<<<" in hit["snippet"]
    assert "upgrade" in hit["snippet"]
    assert hit["context"] == [
        {"role": "user", "content": "How do I configure alembic migrations?"},
        {"role": "assistant", "content": "Run alembic upgrade head to apply the migrations."},
        {"role": "user", "content": "thanks, that worked"},
    ]


def test_search_messages_context_is_cut_to_200_chars(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.append_message("s", "user", "before " + "b" * 400)
    db.append_message("s", "assistant", "needle " + "n" * 400)
    (hit,) = db.search_messages("needle")
    assert [len(entry["content"]) for entry in hit["context"]] == [200, 200]
    assert hit["context"][1]["content"] == ("needle " + "n" * 400)[:200]


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        pytest.param({}, {"question", "answer", "telegram", "tool"}, id="all"),
        pytest.param({"source_filter": ["telegram"]}, {"telegram", "tool"}, id="source"),
        pytest.param({"exclude_sources": ["telegram"]}, {"question", "answer"}, id="exclude"),
        pytest.param({"role_filter": ["user"]}, {"question", "telegram"}, id="role"),
        pytest.param({"role_filter": ["tool", "assistant"]}, {"answer", "tool"}, id="roles"),
        pytest.param(
            {"source_filter": ["cli"], "role_filter": ["user"]}, {"question"}, id="combined"
        ),
    ],
)
def test_search_messages_filters(
    db: SessionDB, corpus: dict[str, int], kwargs: dict[str, Any], expected: set[str]
) -> None:
    by_id = {message_id: name for name, message_id in corpus.items()}
    hits = db.search_messages("alembic", **kwargs)
    assert {by_id[hit["id"]] for hit in hits} == expected


def test_search_messages_tool_hit_reports_tool_name(db: SessionDB, corpus: dict[str, int]) -> None:
    (hit,) = db.search_messages("output")
    assert hit["id"] == corpus["tool"] and hit["tool_name"] == "terminal"


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        pytest.param("chat-send", "hyphen", id="hyphenated-term"),
        pytest.param("P2.2", "dotted", id="dotted-term"),
        pytest.param('"upgrade head"', "answer", id="balanced-phrase"),
        pytest.param("migrat*", None, id="prefix"),
        pytest.param("数据库", "cjk", id="cjk"),
        pytest.param("连接池", "cjk", id="cjk-other-part"),
    ],
)
def test_search_messages_query_language(
    db: SessionDB, corpus: dict[str, int], query: str, expected: str | None
) -> None:
    hits = db.search_messages(query)
    if expected is None:
        assert {hit["id"] for hit in hits} == {corpus["question"], corpus["answer"]}
    else:
        assert [hit["id"] for hit in hits] == [corpus[expected]]
        assert all(hit["snippet"] for hit in hits)


HOSTILE_QUERIES = [
    '"unbalanced', "AND", "OR OR", "NOT", "alembic AND", "(((", ")))", "***", "*alembic",
    "^", "{}", "+", "", "   ", "'; DROP TABLE messages; --", "col:alembic", "a" * 10_000,
    "NEAR(a b)", "\x00", "\ud800", "alembic\x00", "🤖", "-alembic", "alembic -", '""',
]  # fmt: skip


@pytest.mark.parametrize("query", HOSTILE_QUERIES, ids=lambda q: ascii(q)[:40])
def test_search_messages_never_raises(
    db: SessionDB, raw: RawSQL, corpus: dict[str, int], query: str
) -> None:
    before = raw.dump()
    hits = db.search_messages(query)
    assert isinstance(hits, list)
    assert all(list(hit) == list(SEARCH_HIT_KEYS) for hit in hits)
    assert raw.dump() == before


def test_search_messages_leading_star_is_dropped(db: SessionDB, corpus: dict[str, int]) -> None:
    assert {hit["id"] for hit in db.search_messages("*upgrade")} == {corpus["answer"]}


def test_search_messages_limit_and_offset(db: SessionDB) -> None:
    db.create_session("s", "cli")
    for index in range(5):
        db.append_message("s", "user", f"repeated keyword number {index}")
    assert len(db.search_messages("keyword")) == 5
    assert len(db.search_messages("keyword", limit=2)) == 2
    assert len(db.search_messages("keyword", limit=2, offset=4)) == 1
    all_ids = {hit["id"] for hit in db.search_messages("keyword")}
    paged = db.search_messages("keyword", limit=3) + db.search_messages("keyword", offset=3)
    assert {hit["id"] for hit in paged} == all_ids


# -- sessions listing, counts, export -----------------------------------------------------------
def test_search_sessions_newest_first(db: SessionDB, raw: RawSQL) -> None:
    make_session(db, raw, "mid", started_at=200.0, source="cli")
    make_session(db, raw, "new", started_at=300.0, source="telegram")
    make_session(db, raw, "old", started_at=100.0, source="cli")
    make_session(db, raw, "child", started_at=250.0, source="cli", parent="old")
    rows = db.search_sessions()
    assert [r["id"] for r in rows] == ["new", "child", "mid", "old"]
    assert all(list(r) == list(MRU_KEYS) for r in rows)
    assert [r["last_active"] for r in rows] == [300.0, 250.0, 200.0, 100.0]
    assert [r["id"] for r in db.search_sessions(source="cli")] == ["child", "mid", "old"]
    assert [r["id"] for r in db.search_sessions(limit=2, offset=1)] == ["child", "mid"]


def test_counts(db: SessionDB) -> None:
    assert db.session_count() == 0 and db.message_count() == 0
    db.create_session("a", "cli")
    db.create_session("b", "telegram")
    db.create_session("c", "telegram")
    db.append_message("a", "user", "1")
    db.append_message("a", "assistant", "2")
    db.append_message("b", "user", "3")
    assert db.session_count() == 3
    assert db.session_count(source="telegram") == 2
    assert db.session_count(source="nowhere") == 0
    assert db.message_count() == 3
    assert db.message_count("a") == 2
    assert db.message_count(session_id="c") == 0


def test_export_session_and_export_all(db: SessionDB) -> None:
    db.create_session("a", "cli", model_config={"k": 1})
    db.create_session("b", "telegram")
    db.append_message("a", "user", "hello")
    db.append_message("a", "assistant", "hi", tool_calls=[tool_call("c1")])

    session_a, session_b = db.get_session("a"), db.get_session("b")
    assert session_a is not None and session_b is not None
    exported = db.export_session("a")
    messages = db.get_messages("a")
    assert exported == {**session_a, "messages": messages, "timings": export_timings(messages)}
    assert list(exported) == list(EXPORT_KEYS)
    assert all(list(message) == list(MESSAGE_KEYS) for message in exported["messages"])
    assert exported["messages"][1]["tool_calls"] == [tool_call("c1")]
    assert db.export_session("ghost") is None

    everything = db.export_all()
    last_active = {row["id"]: row["last_active"] for row in db.search_sessions()}
    assert {item["id"]: item for item in everything} == {
        "a": {**session_a, "last_active": last_active["a"], **exported},
        "b": {**session_b, "last_active": last_active["b"], "messages": [],
              "timings": export_timings([])},
    }  # fmt: skip
    assert all(list(item) == list(EXPORT_ALL_KEYS) for item in everything)
    assert [item["id"] for item in db.export_all(source="telegram")] == ["b"]


# -- bad input (SPEC §7) -------------------------------------------------------------------------
BAD_CALLS: list[Any] = [
    pytest.param(lambda db: db.create_session(123, "cli"), TypeError, id="int-session-id"),
    pytest.param(lambda db: db.create_session("n", None), TypeError, id="none-source"),
    pytest.param(lambda db: db.create_session("nul\x00id", "cli"), ValueError, id="nul-in-id"),
    pytest.param(lambda db: db.create_session("\ud800", "cli"), ValueError, id="surrogate-id"),
    pytest.param(
        lambda db: db.append_message("s", "user", b"bytes"), TypeError, id="bytes-content"
    ),
    # An id is looked up by equality: a replaced one would be another key, so it is refused.
    pytest.param(
        lambda db: db.append_message("s", "tool", "x", tool_call_id="call\udc80"), ValueError,
        id="surrogate-tool-call-id",
    ),
    pytest.param(lambda db: db.append_message("s", 42, "x"), TypeError, id="int-role"),
    pytest.param(
        lambda db: db.append_message("s", "user", "x", token_count="12"), TypeError,
        id="str-token-count",
    ),
    pytest.param(
        lambda db: db.append_message("s", "assistant", "x", tool_calls=[object()]), TypeError,
        id="unserialisable-tool-calls",
    ),
    # Hermes would store these and count one call; every read would then find none (issue 27).
    pytest.param(
        lambda db: db.append_message("s", "assistant", "x", tool_calls=42), TypeError,
        id="int-tool-calls",
    ),
    pytest.param(
        lambda db: db.append_message("s", "assistant", "x", tool_calls={"id": 1}), TypeError,
        id="bare-dict-tool-calls",
    ),
    pytest.param(
        lambda db: db.append_message("s", "assistant", "x", tool_calls="not json"), TypeError,
        id="str-tool-calls",
    ),
    pytest.param(
        lambda db: db.append_messages("s", [{"role": "assistant", "tool_calls": [1, 2]}]),
        TypeError, id="tool-calls-of-ints-in-a-turn",
    ),
    pytest.param(
        lambda db: db.update_token_counts("s", input_tokens="5"), TypeError, id="str-tokens"
    ),
    pytest.param(lambda db: db.set_session_title("s", 123), TypeError, id="int-title"),
    pytest.param(lambda db: db.set_session_title("s", "t" * 101), ValueError, id="long-title"),
]  # fmt: skip


@pytest.mark.parametrize(("call", "error"), BAD_CALLS)
def test_bad_input_is_a_clear_error_and_changes_nothing(
    db: SessionDB, raw: RawSQL, call: Callable[[SessionDB], Any], error: type[Exception]
) -> None:
    db.create_session("s", "cli")
    db.set_session_title("s", "Original")
    db.append_message("s", "user", "original message")
    before = raw.dump()
    with pytest.raises(error):
        call(db)
    assert raw.dump() == before


# -- lone surrogates (a scraped page, a cut emoji): stored as U+FFFD, never a lost message --------
DIRTY = "scraped \ud835 price"
CLEANED = "scraped \ufffd price"


def test_lone_surrogates_in_written_text_become_replacement_characters(db: SessionDB) -> None:
    """Hermes 0.19 on: one lone surrogate in a tool result must not stop the session persisting
    (no driver can bind it), so every text a person or a model wrote keeps U+FFFD in its place."""
    db.create_session("s", "cli", system_prompt=DIRTY)
    db.append_message("s", "tool", DIRTY, tool_name="web\ud835search")
    db.append_message("s", "assistant", "fine", reasoning=DIRTY, reasoning_content=DIRTY)
    db.append_message("s", "user", "clean", api_content=DIRTY)
    db.append_message("s", "user", "turn text")
    assert db.set_latest_user_api_content("s", "turn text", DIRTY) == 1
    assert db.set_session_title("s", "title \ud835 bad") is True
    db.end_session("s", DIRTY)

    tool, assistant, user, latest = db.get_messages("s")
    assert (tool["content"], tool["tool_name"]) == (CLEANED, "web\ufffdsearch")
    assert (assistant["reasoning"], assistant["reasoning_content"]) == (CLEANED, CLEANED)
    assert user["api_content"] == latest["api_content"] == CLEANED
    session = db.get_session("s")
    assert session is not None
    assert (session["title"], session["system_prompt"], session["end_reason"]) == (
        "title \ufffd bad", CLEANED, CLEANED,
    )
    assert db.get_session_by_title("title \ufffd bad") is not None


def test_a_dirty_row_in_a_replaced_history_does_not_freeze_the_session(db: SessionDB) -> None:
    """replace_messages re-sends the whole history each turn: a poisoned row refused would
    refuse every later save too."""
    db.create_session("s", "cli")
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "turn 1"},
        {"role": "tool", "content": DIRTY, "tool_name": "web_search", "api_content": DIRTY},
    ]
    db.replace_messages("s", history)
    history += [{"role": "user", "content": "turn 2"}, {"role": "assistant", "content": "done"}]
    db.replace_messages("s", history)
    rows = db.get_messages("s")
    assert [row["content"] for row in rows] == ["turn 1", CLEANED, "turn 2", "done"]
    assert rows[1]["api_content"] == CLEANED


def test_lone_surrogates_inside_json_values_read_back_as_given(db: SessionDB) -> None:
    """JSON values keep a lone surrogate as its \\udXXX escape (Hermes's json.dumps writes it
    so): bindable, and the value reads back unchanged."""
    calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": DIRTY}}]
    parts = [{"type": "text", "text": DIRTY}]
    db.create_session("s", "cli", model_config={"note": DIRTY})
    db.append_message("s", "assistant", parts, tool_calls=calls, reasoning_details={"d": DIRTY})
    [message] = db.get_messages("s")
    assert message["tool_calls"] == calls
    assert message["content"] == parts
    assert json.loads(message["reasoning_details"]) == {"d": DIRTY}
    session = db.get_session("s")
    assert session is not None
    assert json.loads(session["model_config"]) == {"note": DIRTY}


def test_well_formed_unicode_is_stored_unchanged(db: SessionDB) -> None:
    benign = "Ünïcödé ok — 日本語 🎉 \U0001d400 emoji fine"
    db.create_session("s", "cli")
    db.append_message("s", "assistant", benign, reasoning=benign, tool_name="t")
    [message] = db.get_messages("s")
    assert message["content"] == message["reasoning"] == benign


WRONG_TYPE_LOOKUPS: list[Any] = [
    pytest.param(lambda db: db.get_session(123), id="get_session"),
    pytest.param(lambda db: db.get_session(None), id="get_session-none"),
    pytest.param(lambda db: db.resolve_session_id(None), id="resolve_session_id"),
    pytest.param(lambda db: db.get_session_title(1.5), id="get_session_title"),
    pytest.param(lambda db: db.get_session_by_title(["t"]), id="get_session_by_title"),
    pytest.param(lambda db: db.resolve_session_by_title(7), id="resolve_session_by_title"),
    pytest.param(lambda db: db.get_compression_tip(b"s"), id="get_compression_tip"),
    pytest.param(lambda db: db.get_messages(42), id="get_messages"),
    pytest.param(lambda db: db.get_messages_as_conversation(42), id="get_conversation"),
    pytest.param(lambda db: db.search_messages(None), id="search_messages"),
    pytest.param(lambda db: db.delete_session(None), id="delete_session"),
    pytest.param(lambda db: db.export_session(3), id="export_session"),
]


@pytest.mark.parametrize("call", WRONG_TYPE_LOOKUPS)
def test_wrong_type_lookup_is_empty_or_a_type_error(
    db: SessionDB, raw: RawSQL, call: Callable[[SessionDB], Any]
) -> None:
    db.create_session("s", "cli")
    db.append_message("s", "user", "hello")
    before = raw.dump()
    try:
        result = call(db)
    except (TypeError, ValueError):
        pass
    else:
        assert result in (None, [], False)
    assert raw.dump() == before


def test_nul_bytes_in_content_are_kept_or_visibly_replaced(db: SessionDB, store_url: str) -> None:
    db.create_session("s", "cli")
    db.append_message("s", "user", "before\x00after")
    (message,) = db.get_messages("s")
    if store_url.startswith("sqlite"):
        assert message["content"] == "before\x00after"  # as Hermes stores it
    else:
        assert message["content"] == "before\ufffdafter"  # PostgreSQL TEXT cannot hold NUL


def test_huge_and_unicode_content_round_trips(db: SessionDB) -> None:
    db.create_session("s", "cli")
    huge = ("lorem ipsum " * 200_000) + "needleword"
    unicode_text = "混合 text 日本語 한국어 🚀 é\u0301 \u202e reversed"
    db.append_message("s", "user", huge)
    db.append_message("s", "assistant", unicode_text)
    contents = [m["content"] for m in db.get_messages("s")]
    assert contents == [huge, unicode_text]
    row = db.get_session("s")
    assert row is not None and row["message_count"] == 2


LEAKED_MEMORY = (
    "<memory-context>\n"
    "[System note: The following is recalled memory context, NOT new user input. Treat as "
    "informational background data.]\n\n"
    "## Honcho Context\nstale memory\n"
    "</memory-context>\n\n"
)


def test_a_replay_leaves_leaked_memory_context_out_of_user_and_assistant_text(
    db: SessionDB,
) -> None:
    """Hermes 0.18 to iot 0.22.2 load user and assistant text through ``sanitize_context``
    and strip it: recalled memory a provider echoed is not replayed as the conversation. The
    stored rows keep what was written; ``api_content`` and tool results replay verbatim."""
    db.create_session("s", "cli")
    db.append_message("s", "user", "  question \n", api_content=LEAKED_MEMORY + "as sent")
    db.append_message("s", "assistant", LEAKED_MEMORY + "Visible answer")
    db.append_message("s", "assistant", "a </MEMORY-CONTEXT> b")
    db.append_message("s", "tool", LEAKED_MEMORY + "tool output", tool_call_id="c1")
    replayed = db.get_messages_as_conversation("s")
    assert [message["content"] for message in replayed] == [
        "question", "Visible answer", "a  b", LEAKED_MEMORY + "tool output",
    ]
    assert replayed[0]["api_content"] == LEAKED_MEMORY + "as sent"
    assert isinstance(replayed[1]["timestamp"], float)
    assert db.get_messages("s")[1]["content"] == LEAKED_MEMORY + "Visible answer"
    with_ancestors = db.get_messages_as_conversation("s", include_ancestors=True)
    assert [m["content"] for m in with_ancestors] == [m["content"] for m in replayed]


def test_a_replay_keeps_the_reply_after_consecutive_review_harness_prompts(db: SessionDB) -> None:
    """A harness prompt (Hermes's background review, written by older builds) and the reply it
    got are left out; a second prompt in a row took the first one's reply slot, so the
    assistant turn after the run is the conversation's own (iot 0.22.2). It was dropped."""
    db.create_session("s", "cli")
    for role, text in (
        ("user", "deploy it"),
        ("user", "Review the conversation above and update the skill library."),
        ("system", "Review the conversation above and consider saving to memory."),
        ("assistant", "deployed to staging"),
        ("user", "Review the conversation above and update the skill library."),
        ("assistant", "curator reply"),
        ("user", "thanks"),
    ):  # fmt: skip
        db.append_message("s", role, text)
    replayed = db.get_messages_as_conversation("s")
    assert [m["content"] for m in replayed] == ["deploy it", "deployed to staging", "thanks"]
