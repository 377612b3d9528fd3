"""Shared fixtures: a store per dialect (SQLite file in tmp_path; PostgreSQL fresh database).

PostgreSQL comes from ``SESSIONSTORE_TEST_PG_URL`` (default: the local server's ``test``
database, used only as the maintenance connection; every run creates and drops its own
databases). When the server is unreachable the PostgreSQL tests are skipped locally, and fail
under ``CI=true``: CI must never pass by not testing.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url

# The shared test machinery (Hermes file builders, fault and opener programs, the real-Hermes
# runner) lives in tests/support/ and is imported by its module names, here and in the
# subprocesses those programs start.
SUPPORT_DIR = Path(__file__).resolve().parent / "support"
sys.path.insert(0, str(SUPPORT_DIR))

from real_hermes import backup_copy  # noqa: E402

from sessionstore.schema import migrate  # noqa: E402
from sessionstore.storage.engine import create_store_engine  # noqa: E402

DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
DIALECTS = ["sqlite", "postgresql"]


def pg_admin_url() -> str:
    return os.environ.get("SESSIONSTORE_TEST_PG_URL", DEFAULT_PG_URL)


def _pg_reachable() -> str | None:
    try:
        engine = sa.create_engine(pg_admin_url(), connect_args={"connect_timeout": 3})
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
        engine.dispose()
        return None
    except Exception as exc:
        return str(exc).splitlines()[0]


@pytest.fixture(scope="session")
def require_postgresql() -> None:
    problem = _pg_reachable()
    if problem is None:
        return
    message = f"PostgreSQL is not reachable at {pg_admin_url()}: {problem}"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


class PgDatabases:
    """Creates throw-away databases on the test server and drops them at the end."""

    def __init__(self) -> None:
        self.admin = sa.create_engine(pg_admin_url(), isolation_level="AUTOCOMMIT")
        self.created: list[str] = []

    def create(self) -> str:
        name = f"sstest_{os.getpid()}_{uuid.uuid4().hex[:10]}"
        with self.admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        self.created.append(name)
        return make_url(pg_admin_url()).set(database=name).render_as_string(hide_password=False)

    def drop_all(self) -> None:
        with self.admin.connect() as conn:
            for name in self.created:
                conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        self.admin.dispose()


@pytest.fixture(scope="session")
def pg_databases(require_postgresql: None) -> Iterator[PgDatabases]:
    databases = PgDatabases()
    yield databases
    databases.drop_all()


@pytest.fixture
def empty_pg_url(pg_databases: PgDatabases) -> str:
    """A brand-new, empty PostgreSQL database."""
    return pg_databases.create()


@pytest.fixture(scope="session")
def migrated_pg_url(pg_databases: PgDatabases) -> str:
    """One PostgreSQL database at head for the whole run; tests get it emptied (below)."""
    url = pg_databases.create()
    migrate.upgrade(url)
    return url


def _truncate(url: str) -> None:
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "TRUNCATE messages, sessions, state_meta, compression_locks, session_model_usage, "
                "gateway_routing, async_delegations "
                "RESTART IDENTITY CASCADE"
            )
        )
    engine.dispose()


@pytest.fixture(scope="session")
def migrated_sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One SQLite file migrated to head per test process, never opened by a store.

    Each test gets its own copy (``migrated_sqlite_url``): the full Alembic upgrade cost ~140 ms a
    test, a copy with SQLite's backup API 2-3 ms. The copy is page for page what the upgrade
    makes (same schema, ``alembic_version`` and rows; both in the rollback journal until a
    store opens them). Tests of the upgrade itself start from ``empty_url`` instead.
    """
    path = tmp_path_factory.mktemp("migrated") / "state.db"
    migrate.upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture
def migrated_sqlite_url(migrated_sqlite_template: Path, tmp_path: Path) -> str:
    """A migrated, empty SQLite store of this test's own (``tmp_path/state.db``)."""
    return f"sqlite:///{backup_copy(migrated_sqlite_template, tmp_path / 'state.db')}"


@pytest.fixture(params=DIALECTS)
def store_url(request: pytest.FixtureRequest) -> str:
    """A migrated, empty store URL on each dialect."""
    if request.param == "sqlite":
        return str(request.getfixturevalue("migrated_sqlite_url"))
    url = request.getfixturevalue("migrated_pg_url")
    _truncate(url)
    return str(url)


@pytest.fixture(params=DIALECTS)
def empty_url(request: pytest.FixtureRequest, tmp_path: object) -> str:
    """An empty database URL (no schema) on each dialect."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/empty.db"
    return str(request.getfixturevalue("empty_pg_url"))


# pytest-alembic: its built-in tests run against `alembic_engine`, once per dialect.
@pytest.fixture
def alembic_config() -> object:
    from pytest_alembic.config import Config

    return Config(config_options={"script_location": migrate.script_location()})


@pytest.fixture
def alembic_engine(empty_url: str) -> Iterator[Engine]:
    engine = create_store_engine(empty_url)
    yield engine
    engine.dispose()
