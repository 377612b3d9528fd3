"""Shared fixtures: a store per dialect (SQLite file in tmp_path; PostgreSQL fresh database).

PostgreSQL comes from ``SESSIONSTORE_TEST_PG_URL`` (default: the local server's ``test``
database, used only as the maintenance connection; every run creates and drops its own
databases). When the server is unreachable the PostgreSQL tests are skipped locally, and fail
under ``CI=true``: CI must never pass by not testing.

What a test waited for, and why it no longer does (the inner loop, ``pytest -m "not slow"``,
and the full run are timed in docs/getting-started.md):

- **fsync.** Every commit of a store fsyncs (SQLite ``synchronous=FULL`` in WAL, PostgreSQL's
  ``synchronous_commit``): 6-7 ms a commit on this disk when quiet, far more when the machine
  is shared. No test crashes the machine or the server, so none needs the flush: test files
  live on the RAM disk (``TMPDIR`` points at ``/dev/shm`` unless already set; the store's
  code and its fsync calls are unchanged, the kernel has nothing to wait for), and the
  throw-away PostgreSQL databases commit with ``synchronous_commit = off`` (a killed backend
  loses nothing either way; only a server crash could, and no test makes one).
- **Compiling.** With ``PYTHONDONTWRITEBYTECODE`` set (as on these machines) each test
  process and each program a test starts compiled every module it imported, the test
  modules, the package and a real Hermes release's ``hermes_state.py`` included: compiled files
  go to ``PYTHONPYCACHEPREFIX`` (``~/.cache/sessionstore-tests/pycache`` unless set), outside
  the source trees, and are compiled once (``_bytecode_cached``): on a fresh clone once in all,
  not once per xdist worker (``bytecode_share``: the workers split the compiling between them,
  and what the controller read from pip's compiled files is copied into the prefix).
- **Emptying PostgreSQL.** ``TRUNCATE`` makes new files for every table and index (170 ms);
  ``DELETE`` of the few rows a test wrote takes a few ms (``pg_store_url``).
- **Migrating.** The chain runs once per test process and dialect; tests get copies
  (``migrated_sqlite_url``, ``fresh_migrated_pg_url``) or the emptied database
  (``pg_store_url``).
"""

from __future__ import annotations

import os
import sys
import tempfile
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url

# The shared test machinery (Hermes file builders, fault and opener programs, the real-Hermes
# runner) lives in tests/support/ and is imported by its module names, here and in the
# subprocesses those programs start.
SUPPORT_DIR = Path(__file__).resolve().parent / "support"
sys.path.insert(0, str(SUPPORT_DIR))


def _bytecode_cached() -> None:
    """Compiled modules kept between processes, outside the source trees (see above).

    This machine sets ``PYTHONDONTWRITEBYTECODE`` (no ``__pycache__`` beside the sources), so every
    process compiled every module it imported from source: the package (installed editable), the
    test modules (pytest's assertion rewrite), a real Hermes release's ``hermes_state.py``
    (3,000-7,800 lines) and its agent modules in every subprocess that runs it (0.8 CPU s a start
    against 0.35 s). A ``PYTHONPYCACHEPREFIX`` keeps the compiled files in a tree of its own, so the
    source trees stay clean and the compile happens once. Set in the environment too: the xdist
    workers and every program a test starts inherit it. A prefix already set is the user's choice
    and is kept."""
    if os.environ.get("PYTHONPYCACHEPREFIX"):
        return
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    prefix = cache / "sessionstore-tests" / "pycache"
    try:
        prefix.mkdir(parents=True, exist_ok=True)
    except OSError:
        return
    os.environ["PYTHONPYCACHEPREFIX"] = str(prefix)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.pycache_prefix = str(prefix)  # this process: read when each module is imported
    sys.dont_write_bytecode = False
    from bytecode_share import carry_over_imported

    carry_over_imported()


_bytecode_cached()


from pg_server import pg_admin_url  # noqa: E402
from real_hermes import backup_copy, close_release_servers  # noqa: E402
from run_kept import run_directory  # noqa: E402

from sessionstore.schema import migrate  # noqa: E402
from sessionstore.sql.topic_tables import TOPIC_SCHEMA_META_KEY, TOPIC_TABLES  # noqa: E402
from sessionstore.storage.engine import create_store_engine  # noqa: E402

RAM_DISK = Path("/dev/shm")


def _test_files_in_ram() -> None:
    """``TMPDIR`` on the RAM disk for this run and the programs it starts (see above); a
    ``TMPDIR`` already set is the user's choice and is kept."""
    if "TMPDIR" in os.environ or not (RAM_DISK.is_dir() and os.access(RAM_DISK, os.W_OK)):
        return
    os.environ["TMPDIR"] = str(RAM_DISK)
    tempfile.tempdir = None  # forget a directory chosen before this ran


_test_files_in_ram()


def _cli_tree_built_once() -> None:
    """Typer's ``CliRunner.invoke(app, ...)`` builds the whole Click command tree from the
    Typer app on every call (``typer.main.get_command``: 14 ms CPU for this CLI's verbs, more
    than many a verb's own work; the CLI tests invoke it thousands of times). The tree is
    built once per app and reused, rebuilt if the app gained a command or group since. What
    runs is the same object Typer builds (``_OneLineErrors`` and its verbs, the console
    script's); a Click command keeps no state between invocations (each has its context)."""
    import typer.main
    import typer.testing

    build = typer.main.get_command
    built: dict[int, tuple[Any, tuple[Any, ...], Any]] = {}

    def shape(app: Any) -> tuple[Any, ...]:
        return (len(app.registered_commands), app.registered_callback is not None,
                tuple(shape(group.typer_instance) for group in app.registered_groups))

    def get_command(app: Any) -> Any:
        kept = built.get(id(app))
        now = shape(app)
        if kept is None or kept[0] is not app or kept[1] != now:
            kept = built[id(app)] = (app, now, build(app))
        return kept[2]

    typer.testing._get_command = get_command  # type: ignore[attr-defined,assignment]


_cli_tree_built_once()


def _hypothesis_never_judges_by_the_clock() -> None:
    """Hypothesis's per-example ``deadline`` and its ``too_slow`` health check are timed
    assertions: on a loaded machine (the suite runs one worker more than the cores, beside
    PostgreSQL and the programs tests start) they fail a correct test. The default profile
    drops both; a test's own ``@settings`` keep what they name."""
    from hypothesis import HealthCheck, settings

    settings.register_profile(
        "sessionstore", deadline=None, suppress_health_check=[HealthCheck.too_slow]
    )
    settings.load_profile("sessionstore")


_hypothesis_never_judges_by_the_clock()

UNICODE_TABLES = ("charmap.json.gz", "codec-v2-utf-8.json.gz")
"""Hypothesis's Unicode tables (``hypothesis.internal.charmap``): what ``st.text()`` draws from."""


def _unicode_tables() -> tuple[Path, Path]:
    """Where the tables are read (``.hypothesis/unicode_data/<Unicode version>``), and where
    they are kept between checkouts: beside the compiled modules (``XDG_CACHE_HOME``), by
    Hypothesis's and Unicode's versions (two files, ~22 kB)."""
    import unicodedata

    import hypothesis
    from hypothesis.configuration import storage_directory

    version = unicodedata.unidata_version
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    kept = cache / "sessionstore-tests" / "hypothesis-unicode" / hypothesis.__version__ / version
    return storage_directory("unicode_data", version, intent_to_write=False).path, kept


def _copy_tables(source: Path, target: Path) -> None:
    """The tables ``target`` lacks, each written whole under a temporary name and renamed into
    place (a reader never sees part of one)."""
    import shutil

    for name in UNICODE_TABLES:
        if (source / name).is_file() and not (target / name).exists():
            target.mkdir(parents=True, exist_ok=True)
            partial = target / f".{name}.{os.getpid()}"
            shutil.copyfile(source / name, partial)
            os.replace(partial, target / name)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_setupnodes(config: pytest.Config) -> None:
    """The xdist controller makes Hypothesis's Unicode tables once, before it starts the workers.

    A test process reads them from ``.hypothesis/unicode_data``, or builds them at its first
    text draw when they are not there (a fresh clone, CI's: 1.1-1.3 CPU s a process) and
    writes them; on a fresh clone each worker that drew text before another had written them
    built them too. Here they are copied from where an earlier checkout kept them
    (``_unicode_tables``), or else built once in this process (this hook runs after
    Hypothesis's ``pytest_sessionstart``, so the disk access draws no warning of slow plugin
    code) and kept. They are the files Hypothesis writes, from the same inputs, whichever
    process wrote them. What fails here is left to the workers, which build them as before."""
    if config.getoption("collectonly"):
        return
    try:
        local, kept = _unicode_tables()
        if not all((local / name).exists() for name in UNICODE_TABLES):
            from hypothesis.configuration import storage_directory
            from hypothesis.internal.charmap import charmap, intervals_from_codec

            storage_directory(intent_to_write=False).create_if_missing()  # as Hypothesis does
            _copy_tables(kept, local)
            charmap()  # each reads the file now there, or builds and writes it
            intervals_from_codec("utf-8")
        _copy_tables(local, kept)
    except OSError:
        return


@pytest.fixture(autouse=True, scope="module")
def _release_servers_end_with_their_module() -> Iterator[None]:
    """The real Hermes release servers a test module started (``real_hermes._ReleaseServer``)
    end with it: none outlives the homes it served, and their CPU is counted in its tests."""
    yield
    close_release_servers()


DIALECTS = ["sqlite", "postgresql"]


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


_CONCURRENT_DROPS = 8
"""Connections a worker drops its databases through (the server allows 100 in all)."""


class PgDatabases:
    """Creates throw-away databases on the test server and drops them at the end."""

    def __init__(self) -> None:
        self.admin = sa.create_engine(pg_admin_url(), isolation_level="AUTOCOMMIT")
        self.created: list[str] = []

    def create(self, template: str | None = None) -> str:
        """A new database: empty (the server's default template), or a copy of ``template``
        (a URL from :meth:`create`; nothing may be connected to it)."""
        name = f"sstest_{os.getpid()}_{uuid.uuid4().hex[:10]}"
        copied = f' TEMPLATE "{make_url(template).database}"' if template else ""
        with self.admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"{copied}'))
            # A commit need not wait for the disk in a database no test crashes (see above).
            # Set again on a copy: a database's settings are not part of its template.
            conn.execute(sa.text(f'ALTER DATABASE "{name}" SET synchronous_commit = off'))
        self.created.append(name)
        return make_url(pg_admin_url()).set(database=name).render_as_string(hide_password=False)

    def drop_all(self) -> None:
        """Drop every database this process created, all at once.

        Each ``DROP DATABASE`` waits for a checkpoint of the whole server (1.3-7 s on the
        shared machine, whatever the database's size): one after another, a worker that
        created 100 databases waited minutes at its end. Asked concurrently, the drops wait
        for one or two checkpoints between them (6 databases: 9.5-12.3 s one by one, 1.8-2.5 s
        at once).
        """
        if self.created:
            with ThreadPoolExecutor(min(len(self.created), _CONCURRENT_DROPS)) as pool:
                list(pool.map(self._drop, self.created))
        self.admin.dispose()

    def _drop(self, name: str) -> None:
        # A connection per thread: the admin pool lends up to 15 (5 kept, 10 overflow).
        with self.admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(scope="session")
def pg_databases(require_postgresql: None) -> Iterator[PgDatabases]:
    databases = PgDatabases()
    yield databases
    databases.drop_all()


@pytest.fixture
def empty_pg_url(pg_databases: PgDatabases) -> str:
    """A brand-new, empty PostgreSQL database."""
    return pg_databases.create()


class MigratedPg:
    """The run's PostgreSQL database at head, and how to empty it back to what the chain left.

    Every table the chain leaves empty is emptied (children before parents) and every
    sequence restarts; tables the chain fills (``alembic_version``, ``schema_version``) are
    kept. Learnt from the database itself right after the upgrade, so the tables of later
    revisions are emptied too. ``DELETE`` rather than ``TRUNCATE``: a test writes a few rows,
    and ``TRUNCATE`` makes new files for every table and index (170 ms against a few ms).
    """

    def __init__(self, url: str) -> None:
        self.url = url
        # Pinged before use: tests that kill every backend of this database kill ours too.
        self.engine = sa.create_engine(url, pool_pre_ping=True)
        metadata = sa.MetaData()
        metadata.reflect(self.engine)
        with self.engine.connect() as conn:
            self.tables = [
                table.name
                for table in reversed(metadata.sorted_tables)
                if conn.execute(sa.select(sa.func.count()).select_from(table)).scalar() == 0
            ]
            sequences = conn.execute(
                sa.text(
                    "SELECT quote_ident(schemaname) || '.' || quote_ident(sequencename),"
                    " start_value FROM pg_catalog.pg_sequences"
                    " WHERE schemaname = current_schema()"
                )
            ).all()
        # One round trip: the DELETEs, then each sequence back to its start (``setval(...,
        # false)`` is ``ALTER SEQUENCE ... RESTART`` without the DDL: no lock on the sequence,
        # no cache invalidation sent to every backend).
        # Tables a caller creates on opt-in, outside the chain (Telegram's topic tables): gone
        # again, with the meta row that says they were made, so every test starts without them.
        opt_in = [f'DROP TABLE IF EXISTS "{table.name}" CASCADE' for table in TOPIC_TABLES]
        opt_in.append(f"DELETE FROM state_meta WHERE key = '{TOPIC_SCHEMA_META_KEY}'")
        self.emptying = "; ".join(
            [f'DELETE FROM "{table}"' for table in self.tables]
            + opt_in
            + [f"SELECT setval('{name}', {start}, false)" for name, start in sequences]
        )

    def empty(self) -> None:
        with self.engine.begin() as conn:
            conn.exec_driver_sql(self.emptying)


@pytest.fixture(scope="session")
def migrated_pg_template(pg_databases: PgDatabases) -> str:
    """A PostgreSQL database migrated to head per test process, never opened by a store and
    left with no connection: what ``CREATE DATABASE ... TEMPLATE`` copies.

    The chain on a new database costs ~0.25 server and 0.25-0.7 client CPU s (2-4 s wall on
    the shared machine); a copy is the server's block-by-block copy of the template, ~0.03
    server CPU s, the same catalogs, rows (``alembic_version``, ``schema_version``) and
    sequences the upgrade made. Tests of the upgrade itself start from ``empty_url`` /
    ``empty_pg_url`` instead."""
    url = pg_databases.create()
    migrate.upgrade(url)  # its engine is disposed when it returns: no connection is left
    return url


@pytest.fixture(scope="session")
def migrated_pg(pg_databases: PgDatabases, migrated_pg_template: str) -> Iterator[MigratedPg]:
    url = pg_databases.create(template=migrated_pg_template)
    database = MigratedPg(url)  # before any test writes to it
    yield database
    database.engine.dispose()


@pytest.fixture
def fresh_migrated_pg_url(pg_databases: PgDatabases, migrated_pg_template: str) -> str:
    """A new PostgreSQL database of this test's own at head, empty (a copy of
    ``migrated_pg_template``): for a store no other test has written to, or one whose
    schema or settings the test changes (a second store at head beside ``store_url``'s is
    ``second_pg_store_url``)."""
    return pg_databases.create(template=migrated_pg_template)


@pytest.fixture(scope="session")
def migrated_pg_url(migrated_pg: MigratedPg) -> str:
    """One PostgreSQL database at head for the whole run; tests get it emptied (below)."""
    return migrated_pg.url


@pytest.fixture
def pg_store_url(migrated_pg: MigratedPg) -> str:
    """The run's migrated PostgreSQL database, empty (as the chain left it) for this test."""
    migrated_pg.empty()
    return migrated_pg.url


@pytest.fixture(scope="session")
def second_migrated_pg(
    pg_databases: PgDatabases, migrated_pg_template: str
) -> Iterator[MigratedPg]:
    url = pg_databases.create(template=migrated_pg_template)
    database = MigratedPg(url)  # before any test writes to it
    yield database
    database.engine.dispose()


@pytest.fixture
def second_pg_store_url(second_migrated_pg: MigratedPg) -> str:
    """A second PostgreSQL database at head for the run, emptied for this test as
    ``pg_store_url`` is: the other store of a test that needs two at once (a session moved
    from one to the other). A copy of the template per test cost its ``CREATE DATABASE`` and
    its drop (~0.07 server CPU s); emptying, ~1 ms."""
    second_migrated_pg.empty()
    return second_migrated_pg.url


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


@pytest.fixture
def replays(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The SQLite files built from the chain's result kept in the process during this test
    (``sessionstore.schema.new_store``), by their path; none kept at its start, so the test's
    first new store is built by the chain."""
    from sessionstore.dialects.sqlite import SQLiteDialect
    from sessionstore.schema import new_store

    built: list[str] = []
    replay = SQLiteDialect.replay_new_store

    def spied(self: SQLiteDialect, conn: sa.Connection, image: object) -> None:
        built.append(str(conn.engine.url.database))
        replay(self, conn, image)  # type: ignore[arg-type]

    monkeypatch.setattr(SQLiteDialect, "replay_new_store", spied)
    new_store.forget_built_stores()
    yield built
    new_store.forget_built_stores()


@pytest.fixture(scope="session")
def hermes_answers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the real Hermes releases' answers are kept for this run
    (``RealHermes.calls_on_a_new_file``): shared by the run's xdist workers (their base
    directories' parent is the run's own), never by two runs."""
    return run_directory(tmp_path_factory, "hermes-answers")


@pytest.fixture(params=DIALECTS)
def store_url(request: pytest.FixtureRequest) -> str:
    """A migrated, empty store URL on each dialect."""
    if request.param == "sqlite":
        return str(request.getfixturevalue("migrated_sqlite_url"))
    return str(request.getfixturevalue("pg_store_url"))


@pytest.fixture(params=DIALECTS)
def fresh_store_url(request: pytest.FixtureRequest) -> str:
    """A migrated, empty store of this test's own on each dialect: a copy of the process's
    migrated template (``migrated_sqlite_url``, ``fresh_migrated_pg_url``), what the chain
    makes on a new database. For a test that damages or reshapes the schema at head, which
    must never be done to the run's shared PostgreSQL database; tests of the upgrade itself
    start from ``empty_url``."""
    if request.param == "sqlite":
        return str(request.getfixturevalue("migrated_sqlite_url"))
    return str(request.getfixturevalue("fresh_migrated_pg_url"))


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


# -- the inner loop's property tests -------------------------------------------------------------
INNER_LOOP_EXAMPLES = 10
"""Examples per property test in the inner loop (``-m "not slow"``); the full run keeps the
count each test asks for (up to 600). A property's first examples are its simplest and most
telling; the hundreds after them are what the full run is for. Each example of a store-backed
property is a few writes and reads (10-50 ms), so the inner loop's properties cost seconds,
not minutes."""


def _is_inner_loop(config: pytest.Config) -> bool:
    """The run leaves the ``slow`` tests out: ``-m "not slow"`` (alone or within a larger
    expression)."""
    expression = " ".join(str(config.getoption("markexpr", "") or "").split())
    return "not slow" in expression


SLOW_LIST = Path(__file__).resolve().parent / "slow_tests.txt"


def measured_slow_tests() -> frozenset[str]:
    """The test ids of ``tests/slow_tests.txt``: measured expensive (``cpu_durations.py``)."""
    if not SLOW_LIST.exists():
        return frozenset()
    lines = SLOW_LIST.read_text(encoding="utf-8").splitlines()
    return frozenset(line for line in lines if line and not line.startswith("#"))


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # `slow` is a mark in the code for what is slow by nature (starts other programs), and a
    # measured list for the rest: one rule, `-m "not slow"` leaves both out.
    slow = measured_slow_tests()
    for item in items:
        if item.nodeid in slow:
            item.add_marker(pytest.mark.slow)
    if not _is_inner_loop(config):
        return
    from hypothesis import settings

    for item in items:
        test = getattr(item, "obj", None)
        chosen = getattr(test, "_hypothesis_internal_use_settings", None)
        if isinstance(chosen, settings) and chosen.max_examples > INNER_LOOP_EXAMPLES:
            # Read by Hypothesis when the test runs (after collection): one place for the
            # inner loop's count, however each test spells its own.
            test._hypothesis_internal_use_settings = settings(  # type: ignore[union-attr]
                chosen, max_examples=INNER_LOOP_EXAMPLES
            )



@pytest.hookimpl(tryfirst=True)  # before the collection imports anything
def pytest_collection(session: pytest.Session) -> None:
    """An xdist worker compiles its share of the modules first (``bytecode_share``)."""
    from bytecode_share import compile_my_share

    import sessionstore

    compile_my_share(session.config, [Path(sessionstore.__file__).parent, SUPPORT_DIR])


def pytest_collection_finish(session: pytest.Session) -> None:
    """The collector walks less in each test process (an xdist worker collects for itself).

    What exists once the tests are collected (the package, SQLAlchemy, Alembic, hypothesis,
    pytest and every collected item: well over a million objects) lives as long as the
    process, and every full collection walked it again: it is frozen (``gc.freeze``: kept out
    of every generation's walks). The youngest generation is collected after 10,000 net
    allocations instead of 700, the older ones half as often: a test's cyclic garbage (an
    engine, a pool, a SessionDB) is freed a little later, as the collector always could; a test
    that needs it gone calls ``gc.collect()``, and refcounting frees the rest at once, as
    before. Programs a test starts keep Python's defaults. Measured on tests/api, search,
    sessions and sql (4,501 tests, ``-n 2``, A B B A): 138.6 / 122.2 user CPU s with the
    defaults, 130.7 / 104.7 with this (suite_speed.md)."""
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 20, 20)

