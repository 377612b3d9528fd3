"""Upgrading real Hermes databases (v1..v6, clean and messy) to head and back, losing nothing.

Each file is built by `tests/support/legacy_v1_v6.py` exactly as Hermes left it, every row of
`sessions` and `messages` is snapshotted, and after the migration the same rows must come back with
the same values, with full-text search, its triggers and the unique title index in working order.
All inspection goes through plain `sqlite3`, so the checks do not trust the code under test.
"""

from __future__ import annotations

import re
from pathlib import Path

import prefork
import pytest
from cjk_checks import assert_cjk_index_matches_scan, assert_no_cjk_index
from faultlib import upgrade_server
from file_checks import (
    Row,
    Snapshot,
    assert_only_delegate_tags_added,
    assert_rows_preserved,
    assert_search_works,
    assert_sound,
    open_db,
    query,
    restricted,
    schema_names,
    schema_versions,
    snapshot,
    sqlite_url,
    table_columns,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from legacy_v1_v6 import (
    FTS_TRIGGER_NAMES,
    NEWEST_KNOWN_VERSION,
    TITLE_INDEX_NAME,
    V1_INDEX_NAMES,
    build_legacy_db,
    column_default,
    message_columns,
    session_columns,
)
from legacy_v7_v17 import (
    CHAIN_HEAD_VERSION,
    HEAD_MESSAGE_NAMES,
    HEAD_SESSION_NAMES,
    later_default,
)
from legacy_v23_v31 import V31_MESSAGE_NAMES, V31_SESSION_NAMES

from sessionstore.errors import SchemaTooNewError
from sessionstore.schema import legacy as adoption
from sessionstore.schema import migrate

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


def assert_titles_unique(path: Path) -> None:
    titles = [row[0] for row in query(path, "SELECT title FROM sessions WHERE title IS NOT NULL")]
    assert len(titles) == len(set(titles)), titles


def assert_at_head(path: Path, before: Snapshot, *, titles_may_change: bool = False) -> Snapshot:
    assert schema_versions(path) == [CHAIN_HEAD_VERSION]
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


@pytest.mark.slow
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

    assert "32" in str(refused.value), "the error names the version it found"
    assert "read-only" in str(refused.value), "the error offers what still works"
    assert path.read_bytes() == original_bytes
    assert "alembic_version" not in schema_names(path, "table")


@pytest.mark.slow
def test_two_processes_upgrading_at_once_both_succeed(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    build_legacy_db(path, 1)
    before = snapshot(path)
    # Two programs, each a separate process with its own engine and SQLite locks, as two
    # Hermes processes on one machine would be: forked from a server that imported the package
    # once (a new interpreter each where this platform cannot adopt forks), released together.
    with upgrade_server() as server:
        workers = [
            prefork.start(server, "faultlib:run_migrate_when_released", [sqlite_url(path)],
                          stdin=prefork.PIPE, stdout=prefork.PIPE, stderr=prefork.PIPE)
            for _ in range(2)
        ]  # fmt: skip
        try:
            for worker in workers:
                assert worker.stdout is not None
                assert worker.stdout.readline() == "ready\n"
            for worker in workers:
                assert worker.stdin is not None
                worker.stdin.write("go\n")
                worker.stdin.flush()
            results = [worker.communicate(timeout=60) for worker in workers]
        finally:
            for worker in workers:
                worker.kill()
                worker.wait()

    assert [(worker.returncode, out, err) for worker, (out, err) in zip(
        workers, results, strict=True)] == [(0, "ok\n", "")] * 2  # fmt: skip
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
        assert schema_versions(path) == [CHAIN_HEAD_VERSION]
        assert hermes_tables <= schema_names(path, "table")
        # A fresh store is the file newest Hermes creates, down to the column order.
        assert table_columns(path, "sessions") == list(V31_SESSION_NAMES)
        assert table_columns(path, "messages") == list(V31_MESSAGE_NAMES)
        assert {TITLE_INDEX_NAME, *V1_INDEX_NAMES} <= schema_names(path, "index")
        assert set(FTS_TRIGGER_NAMES) <= schema_names(path, "trigger")
        assert_sound(path)

        migrate.downgrade(url, "base")
        assert migrate.current(url) is None
        assert not hermes_tables & schema_names(path, "table")
        assert not set(FTS_TRIGGER_NAMES) & schema_names(path, "trigger")
