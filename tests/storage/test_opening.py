"""Opening a store: one engine per store, and a runtime path without Alembic or the ORM.

- ``SessionDB`` builds exactly one SQLAlchemy engine whether the store is new (migrated on
  that engine), up to date (checked on it) or a legacy Hermes file (adopted on it), on both
  dialects; the status check and Alembic get that engine's connections.
- A fresh interpreter that imports ``sessionstore``, opens an up-to-date SQLite store and
  reads from it has not imported ``alembic``, ``sqlalchemy.orm`` or the PostgreSQL dialect,
  nor the parts of this package that only rarer calls need (migrations, adoption and its
  backup, building a new store, search machinery, transfer, doctor, trajectory, the async
  layer, the ORM models, the CLI, the gateway's delivery ledger), nor ``shlex`` (quoting a
  hint); it has not built the Telegram topic tables nor read pysqlite3's package metadata.
  Startup time is measured by ``scripts/startup.py``, never asserted here.
- The up-to-date check reads the catalog once, not through the Inspector.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from legacy_v1_v6 import build_legacy_db
from sqlalchemy import event
from sqlalchemy.engine import Engine

from sessionstore import SessionDB
from sessionstore.schema import migrate
from sessionstore.storage.config import sqlite_url
from sessionstore.storage.engine import create_store_engine

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def engines_built(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Engine]]:
    """Every SQLAlchemy engine constructed while the test runs, wherever it is made."""
    built: list[Engine] = []
    real_init = Engine.__init__

    def counting_init(self: Engine, *args: Any, **kwargs: Any) -> None:
        real_init(self, *args, **kwargs)
        built.append(self)

    monkeypatch.setattr(Engine, "__init__", counting_init)
    yield built


def test_a_fresh_store_is_created_on_one_engine(
    empty_url: str, engines_built: list[Engine]
) -> None:
    with SessionDB(url=empty_url) as db:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "hello")
        assert db.get_messages("s1")[0]["content"] == "hello"
        assert len(engines_built) == 1
        assert db.store.engine is engines_built[0]
    assert migrate.status(empty_url).up_to_date


def test_an_up_to_date_store_opens_on_one_engine(
    store_url: str, engines_built: list[Engine]
) -> None:
    with SessionDB(url=store_url) as db:
        db.create_session("s1", "cli")
    engines_built.clear()
    with SessionDB(url=store_url) as db:
        assert db.get_session("s1") is not None
        assert db.search_messages("anything") == []
    assert len(engines_built) == 1


def test_a_legacy_file_is_adopted_on_the_store_engine(
    tmp_path: Path, engines_built: list[Engine]
) -> None:
    path = tmp_path / "state.db"
    build_legacy_db(path, 6)
    engines_built.clear()
    with SessionDB(path) as db:
        assert db.adoption_backup is not None and db.adoption_backup.exists()
        assert db.session_count() > 0
    assert len(engines_built) == 1
    assert migrate.status(sqlite_url(path)).up_to_date


def test_the_up_to_date_check_queries_the_catalog_once(store_url: str) -> None:
    engine = create_store_engine(store_url, set_journal_mode=False)
    statements: list[str] = []

    @event.listens_for(engine, "before_cursor_execute")
    def _record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements.append(statement)

    try:
        status = migrate.status(engine)
    finally:
        engine.dispose()
    assert status.up_to_date
    assert status.schema_version == 31
    # Which tables exist, then both version numbers in one SELECT: nothing else.
    assert len(statements) == 2, statements


def test_the_status_of_an_empty_database_reads_only_the_catalog(empty_url: str) -> None:
    state = migrate.state(empty_url)
    assert state.is_empty and state.alembic_revision is None and state.schema_version is None


OPEN_AND_READ = """
import json, sys
import sqlalchemy
floor = set(sys.modules)
import sessionstore
db = sessionstore.SessionDB(sys.argv[1])
messages = db.get_messages("s1")
db.close()
from sessionstore.dialects import sqlite_library
from sessionstore.sql import topic_tables
print(json.dumps({
    "content": messages[0]["content"],
    "loaded": sorted(set(sys.modules) - floor),
    "topic_tables_built": "topic_mode_table" in vars(topic_tables),
    "package_version_read": sqlite_library._distribution_version.cache_info().currsize > 0,
}))
"""

NOT_ON_THE_RUNTIME_PATH = (
    "alembic",
    "sqlalchemy.orm",
    "sqlalchemy.dialects.postgresql",
    "sessionstore.dialects.postgresql",
    # Alembic's side of the package, even the constants a migration's adoption step uses.
    "sessionstore._migrations",
    "sessionstore.schema.models",
    # Judging and adopting a file that is not ours yet: Hermes's shapes, the backup taken
    # first; building a new store from this process's image of one.
    "sessionstore.schema.hermes_shapes",
    "sessionstore.schema.adoption",
    "sessionstore.storage.backups",
    "sessionstore.schema.new_store",
    # iot's gateway delivery ledger: only a profile's rename or purge touches it here.
    "sessionstore.sql.ledger_tables",
    # Searching: the query machinery, the hits and their context, each dialect's index (its
    # object names are constants a writable open needs to look for a Hermes's CJK table).
    "sessionstore.search.service",
    "sessionstore.search.index",
    "sessionstore.search.hits",
    "sessionstore.search.context",
    "sessionstore.search.sqlite",
    # Whole-store tools and the other front ends.
    "sessionstore.ops.transfer",
    "sessionstore.ops.doctor",
    "sessionstore.hermes.trajectory",
    "sessionstore.sessions.stats",
    "sessionstore.api.async_session_db",
    "sessionstore.storage.async_store",
    "sessionstore.cli",
    # Only a hint's quoting needs it.
    "shlex",
)


def test_opening_an_up_to_date_store_imports_only_the_runtime_path(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "hello from a fresh interpreter")
    result = subprocess.run(
        [sys.executable, "-c", OPEN_AND_READ, str(path)],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    report = json.loads(result.stdout)
    assert report["content"] == "hello from a fresh interpreter"
    # Modules SQLAlchemy's own import loads are its, not this package's (the floor).
    unwanted = [
        name
        for name in report["loaded"]
        if any(name == root or name.startswith(root + ".") for root in NOT_ON_THE_RUNTIME_PATH)
    ]
    assert unwanted == []
    # Imported for its constants, built only when a topic method asks (opt-in tables).
    assert report["topic_tables_built"] is False
    # pysqlite3's own version is for describing the library, not for opening with it.
    assert report["package_version_read"] is False


def test_a_store_that_needs_a_migration_still_gets_one_in_a_fresh_interpreter(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    build_legacy_db(path, 6)
    script = (
        "import sys, sessionstore\n"
        "db = sessionstore.SessionDB(sys.argv[1])\n"
        "print(db.session_count(), 'alembic' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(path)],
        capture_output=True, text=True, check=True, cwd=REPO,
    )
    count, alembic_loaded = result.stdout.split()
    assert int(count) > 0 and alembic_loaded == "True"
    assert migrate.status(sqlite_url(path)).up_to_date


def test_an_in_memory_store_is_migrated_on_the_engine_it_is_used_with(
    engines_built: list[Engine],
) -> None:
    # With a second engine for the migration, the schema went to a memory database nobody
    # used again, and the first write found no tables.
    with SessionDB(url="sqlite://") as db:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "kept in memory")
        assert [hit["session_id"] for hit in db.search_messages("memory")] == ["s1"]
    assert len(engines_built) == 1


def test_the_connection_a_migration_ran_on_is_closed_after_it(tmp_path: Path) -> None:
    # Given back to the pool, the store kept it, its driver's statement cache full of the
    # chain's statements: pysqlite3 then prepared the append's INSERT again at every run.
    url = sqlite_url(tmp_path / "state.db")
    engine = create_store_engine(url, set_journal_mode=False)
    chain: list[Any] = []

    @event.listens_for(engine, "before_cursor_execute")
    def _record(conn: Any, *_args: Any) -> None:
        driver = conn.connection.dbapi_connection
        if not any(known is driver for known in chain):
            chain.append(driver)

    try:
        migrate.upgrade(engine)
        assert chain, "the migration ran no statement"
        with engine.connect() as conn:
            kept = conn.connection.dbapi_connection
            assert not any(kept is ran for ran in chain)
        for ran in chain:
            with pytest.raises(Exception, match="closed"):
                ran.execute("SELECT 1")
    finally:
        engine.dispose()
    assert migrate.status(url).up_to_date
