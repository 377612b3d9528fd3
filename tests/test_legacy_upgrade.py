"""Upgrading real Hermes databases (v1..v6, clean and messy) to head and back, losing nothing.

Each file is built by `tests/legacy.py` exactly as Hermes left it, every row of `sessions` and
`messages` is snapshotted, and after the migration the same rows must come back with the same
values, with full-text search, its triggers and the unique title index in working order.
All inspection goes through plain `sqlite3`, so the checks do not trust the code under test.
"""

from __future__ import annotations

import json
import multiprocessing
import re
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import pytest
from cjk_checks import assert_cjk_index_matches_scan, assert_no_cjk_index
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from legacy import (
    FTS_PROBE_WORDS,
    FTS_TRIGGER_NAMES,
    NEWEST_KNOWN_VERSION,
    TITLE_INDEX_NAME,
    V1_INDEX_NAMES,
    build_legacy_db,
    column_default,
    message_columns,
    session_columns,
)
from legacy_later import HEAD_MESSAGE_NAMES, HEAD_SESSION_NAMES, HEAD_VERSION, later_default

from sessionstore import legacy as adoption
from sessionstore import migrate
from sessionstore.errors import SchemaTooNewError

Row = dict[str, Any]
Snapshot = dict[str, list[Row]]

HERMES_REVISIONS = tuple(f"{version:04d}" for version in range(1, NEWEST_KNOWN_VERSION + 1))

# (version, variant): every clean version, and every messy shape SPEC §3 names.
UPGRADE_CASES = [
    *(pytest.param(v, None, id=f"v{v}") for v in range(1, NEWEST_KNOWN_VERSION + 1)),
    pytest.param(3, "duplicate_titles", id="v3-duplicate-titles"),
    *(pytest.param(v, "half_applied", id=f"v{v}-half-applied-v{v + 1}") for v in (1, 2, 3, 4, 5)),
    pytest.param(1, "no_fts", id="v1-no-fts"),
    pytest.param(2, "no_fts", id="v2-no-fts"),
    pytest.param(6, "no_fts", id="v6-no-fts"),
    pytest.param(1, "malformed_json", id="v1-malformed-json"),
    pytest.param(6, "malformed_json", id="v6-malformed-json"),
    pytest.param(1, "empty_schema_version", id="v1-empty-schema-version"),
]


# --- reading the file behind the migration's back -------------------------------------------


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


@contextmanager
def open_db(path: Path) -> Iterator[sqlite3.Connection]:
    # A short-lived connection per check: a connection left open would hold a WAL read
    # snapshot and could make the migration under test wait or see stale state.
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.row_factory = sqlite3.Row
        yield conn


def query(path: Path, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with open_db(path) as conn:
        return [tuple(row) for row in conn.execute(sql, params)]


def snapshot(path: Path) -> Snapshot:
    with open_db(path) as conn:
        return {
            table: [dict(row) for row in conn.execute(f"SELECT * FROM {table} ORDER BY id")]
            for table in ("sessions", "messages")
        }


def schema_versions(path: Path) -> list[int]:
    return [row[0] for row in query(path, "SELECT version FROM schema_version")]


def schema_names(path: Path, kind: str) -> set[str]:
    return {row[0] for row in query(path, "SELECT name FROM sqlite_master WHERE type = ?", (kind,))}


def table_columns(path: Path, table: str) -> list[str]:
    return [row[1] for row in query(path, f"PRAGMA table_info({table})")]


def fts_ids(conn: sqlite3.Connection, word: str) -> set[int]:
    phrase = '"' + word.replace('"', '""') + '"'
    rows = conn.execute("SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?", (phrase,))
    return {row[0] for row in rows}


def indexed_text(message: Row, *, with_tools: bool) -> str:
    """The text the word index holds for a message: content, and from Hermes v11 (revision
    0014) its tool name and tool calls too."""
    if not with_tools:
        return message["content"] or ""
    return " ".join(message.get(name) or "" for name in ("content", "tool_name", "tool_calls"))


def fts5_tokens(text: str | None) -> set[str]:
    """Approximates FTS5's unicode61 tokenizer: runs of letters/digits, case-folded."""
    return set(re.findall(r"[^\W_]+", (text or "").casefold()))


# --- the checks ------------------------------------------------------------------------------


def restricted(rows: list[Row], columns: set[str]) -> list[Row]:
    return [{k: v for k, v in row.items() if k in columns} for row in rows]


def assert_rows_preserved(before: list[Row], after: list[Row], *, ignore: set[str]) -> None:
    """Every original row is still there, with every original value, byte for byte."""
    assert [row["id"] for row in after] == [row["id"] for row in before]
    for old, new in zip(before, after, strict=True):
        for column, value in old.items():
            if column in ignore:
                continue
            assert column in new, f"column {column} was lost"
            assert new[column] == value, f"row {old['id']} column {column} changed"
            assert type(new[column]) is type(value), f"row {old['id']} column {column} retyped"


def assert_only_delegate_tags_added(before: list[Row], after: list[Row]) -> None:
    """model_config is kept, except for the ``_delegate_from`` marker of Hermes's v16 step."""
    for old, new in zip(before, after, strict=True):
        if old["model_config"] == new["model_config"]:
            continue
        original = json.loads(old["model_config"] or "{}")
        tagged = json.loads(new["model_config"])
        assert "_delegate_from" in tagged and "_delegate_from" not in original, old["id"]
        assert {k: v for k, v in tagged.items() if k != "_delegate_from"} == original


def assert_new_columns_defaulted(
    before: list[Row], after: list[Row], columns: tuple[str, ...]
) -> None:
    for old, new in zip(before, after, strict=True):
        for column in columns:
            if column not in old:
                expected = column_default(column)
                if expected is None:
                    expected = later_default(column)
                assert new[column] == expected, (old["id"], column, new[column])


def assert_search_works(path: Path, messages: list[Row], *, with_tools: bool = False) -> None:
    """FTS index consistent, old text findable, and the three triggers keeping it in step."""
    triggers = schema_names(path, "trigger")
    assert set(FTS_TRIGGER_NAMES) <= triggers, f"triggers present: {triggers}"
    with open_db(path) as conn:
        conn.execute("INSERT INTO messages_fts(messages_fts) VALUES('integrity-check')")
        for word in FTS_PROBE_WORDS:
            expected = {
                m["id"]
                for m in messages
                if word.casefold() in fts5_tokens(indexed_text(m, with_tools=with_tools))
            }
            assert expected, f"fixture has no message with {word!r}"
            assert fts_ids(conn, word) == expected, word

        # The triggers, exercised in a transaction that is rolled back so the file stays as
        # the migration left it for the checks that follow.
        conn.execute("BEGIN")
        session_id = conn.execute("SELECT id FROM sessions LIMIT 1").fetchone()[0]
        new_id = conn.execute(
            "INSERT INTO messages (session_id, role, content, timestamp) "
            "VALUES (?, 'user', 'quokka 袋鼠 sighting', 1.0)",
            (session_id,),
        ).lastrowid
        assert fts_ids(conn, "quokka") == {new_id}
        assert fts_ids(conn, "袋鼠") == {new_id}
        conn.execute("UPDATE messages SET content = 'wombat burrow' WHERE id = ?", (new_id,))
        assert fts_ids(conn, "quokka") == set()
        assert fts_ids(conn, "wombat") == {new_id}
        conn.execute("DELETE FROM messages WHERE id = ?", (new_id,))
        assert fts_ids(conn, "wombat") == set()
        conn.execute("INSERT INTO messages_fts(messages_fts) VALUES('integrity-check')")
        conn.execute("ROLLBACK")


def assert_sound(path: Path) -> None:
    assert query(path, "PRAGMA integrity_check") == [("ok",)]
    assert query(path, "PRAGMA foreign_key_check") == []


def assert_titles_unique(path: Path) -> None:
    titles = [row[0] for row in query(path, "SELECT title FROM sessions WHERE title IS NOT NULL")]
    assert len(titles) == len(set(titles)), titles


def assert_at_head(path: Path, before: Snapshot, *, titles_may_change: bool = False) -> Snapshot:
    assert schema_versions(path) == [HEAD_VERSION]
    assert_sound(path)
    after = snapshot(path)
    assert set(HEAD_SESSION_NAMES) <= set(table_columns(path, "sessions"))
    assert set(HEAD_MESSAGE_NAMES) <= set(table_columns(path, "messages"))
    title_ignored = {"title"} if titles_may_change else set()
    assert_rows_preserved(
        before["sessions"], after["sessions"], ignore={*title_ignored, "model_config"}
    )
    assert_only_delegate_tags_added(before["sessions"], after["sessions"])
    assert_rows_preserved(before["messages"], after["messages"], ignore=set())
    assert_new_columns_defaulted(before["sessions"], after["sessions"], HEAD_SESSION_NAMES)
    assert_new_columns_defaulted(before["messages"], after["messages"], HEAD_MESSAGE_NAMES)
    indexes = schema_names(path, "index")
    assert {TITLE_INDEX_NAME, *V1_INDEX_NAMES} <= indexes
    assert_titles_unique(path)
    assert_search_works(path, after["messages"], with_tools=True)
    assert_cjk_index_matches_scan(path)
    return after


def assert_at_version(path: Path, version: int, before: Snapshot, upgraded: Snapshot) -> None:
    """The file is a faithful Hermes v`version` again: its columns, its rows, its objects."""
    assert schema_versions(path) == [version]
    assert migrate.current(sqlite_url(path)) == f"{version:04d}"
    assert_sound(path)
    assert table_columns(path, "sessions") == list(session_columns(version))
    assert table_columns(path, "messages") == list(message_columns(version))
    after = snapshot(path)
    for table, columns in (
        ("sessions", set(session_columns(version))),
        ("messages", set(message_columns(version))),
    ):
        # Against the upgraded state exactly (a renumbered title stays renumbered) ...
        assert restricted(after[table], columns) == restricted(upgraded[table], columns)
        # ... and against the original file for everything the upgrade may not rewrite.
        assert_rows_preserved(
            restricted(before[table], columns), after[table], ignore={"title", "model_config"}
        )
    assert_only_delegate_tags_added(before["sessions"], after["sessions"])
    indexes = schema_names(path, "index")
    assert set(V1_INDEX_NAMES) <= indexes
    assert (TITLE_INDEX_NAME in indexes) == (version >= 4)
    assert_search_works(path, after["messages"])
    assert_no_cjk_index(path)


# --- tests ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("version", "variant"), UPGRADE_CASES)
def test_upgrade_to_head_and_back_keeps_every_row(
    tmp_path: Path, version: int, variant: str | None
) -> None:
    path = tmp_path / "state.db"
    build_legacy_db(path, version, variant=variant)
    before = snapshot(path)
    assert before["sessions"] and before["messages"]

    migrate.upgrade(sqlite_url(path), "head")
    upgraded = assert_at_head(path, before, titles_may_change=variant == "duplicate_titles")
    assert migrate.current(sqlite_url(path)) is not None

    migrate.downgrade(sqlite_url(path), f"{version:04d}")
    assert_at_version(path, version, before, upgraded)


def test_upgrade_is_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    build_legacy_db(path, 6)
    migrate.upgrade(sqlite_url(path), "head")
    first = snapshot(path)
    head = migrate.current(sqlite_url(path))
    migrate.upgrade(sqlite_url(path), "head")
    assert migrate.current(sqlite_url(path)) == head
    assert snapshot(path) == first
    assert_at_head(path, first)


_HERMES_NUMBER_OF = {revision: number for number, revision in adoption.HERMES_REVISIONS.items()}


def expected_schema_version(revision: str) -> int:
    # Our own revisions keep the number of the Hermes revision before them: 0007-0009 say 6,
    # 0021 (after 0020, Hermes v17) says 17.
    earlier = [number for rev, number in _HERMES_NUMBER_OF.items() if rev <= revision]
    return max(earlier, default=NEWEST_KNOWN_VERSION)


@pytest.mark.parametrize("start", ["legacy_v1", "fresh"])
def test_triggers_survive_every_single_step(tmp_path: Path, start: str) -> None:
    path = tmp_path / "state.db"
    url = sqlite_url(path)
    if start == "legacy_v1":
        build_legacy_db(path, 1)
    chain = [revision for revision, _, _ in migrate.history()]
    assert chain[: len(HERMES_REVISIONS)] == list(HERMES_REVISIONS)

    for revision in chain:
        migrate.upgrade(url, revision)
        assert migrate.current(url) == revision
        assert schema_versions(path) == [expected_schema_version(revision)]
        assert set(FTS_TRIGGER_NAMES) <= schema_names(path, "trigger"), revision
    for revision in reversed(chain[:-1]):
        migrate.downgrade(url, revision)
        assert migrate.current(url) == revision
        assert schema_versions(path) == [expected_schema_version(revision)]
        assert set(FTS_TRIGGER_NAMES) <= schema_names(path, "trigger"), revision
        assert_sound(path)


# Started in started_at order; "oldest keeps the plain title", the rest continue the lineage
# past the highest number already used ("refactor #2" exists, so the next are #3 and #4).
EXPECTED_DEDUPLICATED_TITLES = [
    "数据库",
    None,
    "refactor",
    "refactor #3",
    "数据库 #2",
    "数据库迁移 #3",
    "refactor #2",
    "refactor #4",
    "Refactor",
]


def test_duplicate_titles_are_renumbered_along_the_lineage(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    build_legacy_db(path, 3, variant="duplicate_titles")
    original = query(path, "SELECT id, title FROM sessions ORDER BY started_at, id")
    assert [title for _, title in original].count("refactor") == 3  # the fixture is messy

    migrate.upgrade(sqlite_url(path), "head")

    upgraded = query(path, "SELECT id, title FROM sessions ORDER BY started_at, id")
    assert [session_id for session_id, _ in upgraded] == [session_id for session_id, _ in original]
    assert [title for _, title in upgraded] == EXPECTED_DEDUPLICATED_TITLES


TITLE_POOL = ["refactor", "refactor #2", "refactor #7", "数据库", "数据库 #2", "x", None]


def _lineage_base(title: str) -> str:
    match = re.fullmatch(r"(.*?) #(\d+)", title, flags=re.DOTALL)
    return match.group(1) if match else title


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(titles=st.lists(st.sampled_from(TITLE_POOL), min_size=6, max_size=6))
def test_any_duplicate_titles_survive_as_a_lineage(
    tmp_path_factory: pytest.TempPathFactory, titles: list[str | None]
) -> None:
    path = tmp_path_factory.mktemp("titles") / "state.db"
    build_legacy_db(path, 3)
    with open_db(path) as conn:
        ids = [row[0] for row in conn.execute("SELECT id FROM sessions ORDER BY started_at")]
        for session_id, title in zip(ids, titles, strict=True):
            conn.execute("UPDATE sessions SET title = ? WHERE id = ?", (title, session_id))

    migrate.upgrade(sqlite_url(path), "head")

    new_titles = dict(query(path, "SELECT id, title FROM sessions"))
    assert set(new_titles) == set(ids)
    assert_titles_unique(path)
    first_holder: dict[str, str] = {}
    for session_id, old in zip(ids, titles, strict=True):
        new = new_titles[session_id]
        if old is None:
            assert new is None
        elif old not in first_holder:
            first_holder[old] = session_id
            assert new == old, "the oldest holder of a title keeps it"
        else:
            base = _lineage_base(old)
            assert new is not None
            assert new == base or re.fullmatch(re.escape(base) + r" #\d+", new), (old, new)


@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(content=st.text(max_size=300), tool_calls=st.text(max_size=100))
def test_hostile_stored_text_survives_upgrade(
    tmp_path_factory: pytest.TempPathFactory, content: str, tool_calls: str
) -> None:
    path = tmp_path_factory.mktemp("hostile") / "state.db"
    build_legacy_db(path, 1)
    with open_db(path) as conn:
        # Through the table (and so through Hermes's triggers), as Hermes wrote it.
        conn.execute(
            "UPDATE messages SET content = ?, tool_calls = ? WHERE id = 3", (content, tool_calls)
        )
    before = snapshot(path)

    migrate.upgrade(sqlite_url(path), "head")

    after = snapshot(path)
    assert_rows_preserved(before["messages"], after["messages"], ignore=set())
    assert_sound(path)
    with open_db(path) as conn:
        conn.execute("INSERT INTO messages_fts(messages_fts) VALUES('integrity-check')")


@pytest.mark.parametrize(
    "journal_mode",
    ["wal", "delete"],
)
def test_too_new_database_is_refused_and_left_untouched(tmp_path: Path, journal_mode: str) -> None:
    path = tmp_path / "state.db"
    build_legacy_db(path, 6, variant="too_new", journal_mode=journal_mode)
    original_bytes = path.read_bytes()

    with pytest.raises(SchemaTooNewError) as refused:
        migrate.upgrade(sqlite_url(path), "head")

    assert "18" in str(refused.value), "the error names the version it found"
    assert "read-only" in str(refused.value), "the error offers what still works"
    assert path.read_bytes() == original_bytes
    assert "alembic_version" not in schema_names(path, "table")


def _upgrade_when_released(url: str, start: Any, outcomes: Any) -> None:
    start.wait()
    try:
        migrate.upgrade(url, "head")
    except BaseException as error:
        outcomes.put(f"{type(error).__name__}: {error}")
    else:
        outcomes.put("ok")


def test_two_processes_upgrading_at_once_both_succeed(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    build_legacy_db(path, 1)
    before = snapshot(path)
    # spawn: each worker is a genuinely separate interpreter with its own engine, as two
    # Hermes processes on one machine would be.
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(2)
    outcomes = context.Queue()
    workers = [
        context.Process(target=_upgrade_when_released, args=(sqlite_url(path), start, outcomes))
        for _ in range(2)
    ]
    for worker in workers:
        worker.start()
    results = [outcomes.get(timeout=60) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
        assert worker.exitcode == 0

    assert results == ["ok", "ok"]
    assert_at_head(path, before)


@pytest.mark.parametrize("fresh", ["missing_file", "zero_byte_file"])
def test_fresh_database_round_trips_through_base(tmp_path: Path, fresh: str) -> None:
    path = tmp_path / "state.db"
    if fresh == "zero_byte_file":
        path.touch()
    url = sqlite_url(path)
    hermes_tables = {"schema_version", "sessions", "messages", "messages_fts"}

    for _ in range(2):
        migrate.upgrade(url, "head")
        assert schema_versions(path) == [HEAD_VERSION]
        assert hermes_tables <= schema_names(path, "table")
        # A fresh store is the file newest Hermes creates, down to the column order.
        assert table_columns(path, "sessions") == list(HEAD_SESSION_NAMES)
        assert table_columns(path, "messages") == list(HEAD_MESSAGE_NAMES)
        assert {TITLE_INDEX_NAME, *V1_INDEX_NAMES} <= schema_names(path, "index")
        assert set(FTS_TRIGGER_NAMES) <= schema_names(path, "trigger")
        assert_sound(path)

        migrate.downgrade(url, "base")
        assert migrate.current(url) is None
        assert not hermes_tables & schema_names(path, "table")
        assert not set(FTS_TRIGGER_NAMES) & schema_names(path, "trigger")
