"""A new SQLite store built from the chain's result kept in the process is the store the chain
builds (``sessionstore.schema.new_store``): the same ``sqlite_master``, the same rows in every
table (FTS5's shadow tables and ``sqlite_sequence`` included), the same header values, the
same progress; only the file's own identity (iot 0.22.2's generation token and the
``application_id`` derived from it) is new, as it is for every file the chain builds. Openers
racing to create one new file end with one such store.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from adoption_race import race, race_server
from file_checks import sqlite_url
from prefork import ForkServer

from sessionstore import SessionDB
from sessionstore.schema import migrate
from sessionstore.storage.engine import create_store_engine

IDENTITY_KEY = "db_file_generation"
PRAGMAS = ("user_version", "application_id", "auto_vacuum", "page_size", "journal_mode",
           "encoding")  # fmt: skip
FTS_TABLES = ("messages_fts", "messages_fts_trigram")
MASKED = "<this file's own>"
REPLAY_STALE = (
    "a new store built from the chain's image differs from the chain's own "
    "(sessionstore/dialects/sqlite_image.py: capture/replay)"
)


def iot_application_id(token: str) -> int:
    """iot 0.22.2's ``_ensure_db_file_generation``: the id derived from the file's token."""
    return (int(token[:8], 16) & 0x7FFFFFFF) or 1


def store_image(path: Path) -> dict[str, Any]:
    """What a store file holds, read behind the package's back; its identity checked (one token,
    the ``application_id`` iot derives from it) and masked, and kept aside in ``identity``."""
    with closing(sqlite3.connect(path)) as conn:
        master = [tuple(row) for row in conn.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master"
        )]  # fmt: skip
        tables = [
            name for kind, name, _, sql in master
            if kind == "table" and not str(sql or "").upper().startswith("CREATE VIRTUAL")
        ]  # fmt: skip
        rows = {
            table: sorted(conn.execute(f'SELECT * FROM "{table}"').fetchall(), key=repr)
            for table in tables
        }
        pragmas = {name: conn.execute(f"PRAGMA {name}").fetchone()[0] for name in PRAGMAS}
    tokens = [value for key, value in rows["state_meta"] if key == IDENTITY_KEY]
    assert len(tokens) == 1, rows["state_meta"]
    assert pragmas["application_id"] == iot_application_id(tokens[0])
    rows["state_meta"] = sorted(
        (key, MASKED if key == IDENTITY_KEY else value) for key, value in rows["state_meta"]
    )
    identity = (tokens[0], pragmas["application_id"])
    pragmas["application_id"] = MASKED
    return {"master": master, "rows": rows, "pragmas": pragmas, "identity": identity}


def assert_same_store(built: dict[str, Any], chain: dict[str, Any]) -> None:
    # The same entries first (a clearer failure), then in the same order: sqlite_sequence
    # too, which the chain made with revision 0001's messages (sqlite_image.SEQUENCE_MAKER).
    assert Counter(built["master"]) == Counter(chain["master"]), REPLAY_STALE
    assert built["master"] == chain["master"], REPLAY_STALE
    assert built["rows"] == chain["rows"], REPLAY_STALE
    # Tables that hold rows: the chain's own and its search index's shadow tables.
    assert {"alembic_version", "schema_version", "state_meta", "messages_fts_data",
            "messages_fts_config"} <= {t for t, rows in chain["rows"].items() if rows}  # fmt: skip
    assert built["pragmas"] == chain["pragmas"], REPLAY_STALE
    assert built["identity"] != chain["identity"]


def _by_upgrade(path: Path, reached: list[str]) -> None:
    migrate.upgrade(sqlite_url(path), progress=reached.append)


def _by_session_db(path: Path, reached: list[str]) -> None:
    SessionDB(path).close()


def _by_engine(path: Path, reached: list[str]) -> None:
    """As ``SessionDB`` migrates: on the store's own engine (a replay then runs without
    Alembic's environment, ``migrate._built_from_image``), here with its progress told."""
    engine = create_store_engine(sqlite_url(path), set_journal_mode=False)
    try:
        migrate.upgrade(engine, progress=reached.append)
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    "build", [_by_upgrade, _by_session_db, _by_engine], ids=["upgrade", "SessionDB", "engine"]
)
def test_a_replayed_store_is_the_store_the_chain_builds(
    tmp_path: Path, replays: list[str], build: Callable[[Path, list[str]], None]
) -> None:
    by_chain: list[str] = []
    build(tmp_path / "chain.db", by_chain)
    assert replays == []  # the first new store of the process: the chain built it
    reached: dict[str, list[str]] = {"first.db": [], "second.db": []}
    for name, progress in reached.items():
        build(tmp_path / name, progress)
    assert [Path(p).name for p in replays] == ["first.db", "second.db"]

    chain = store_image(tmp_path / "chain.db")
    first, second = store_image(tmp_path / "first.db"), store_image(tmp_path / "second.db")
    assert_same_store(first, chain)
    assert_same_store(second, chain)
    assert first["identity"] != second["identity"]
    # The progress told (the CLI's steps): every revision, as the chain reported them.
    assert reached["first.db"] == reached["second.db"] == by_chain
    if build is not _by_session_db:
        assert by_chain == [revision for revision, _, _ in migrate.history()]


def test_on_a_store_engine_only_a_blank_file_is_built_without_alembic(
    tmp_path: Path, replays: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``SessionDB``'s upgrade (on the store's engine) builds a blank file it has an image for
    without running ``env.py``; any other file (here one with a header value set, which the
    chain builds) goes to ``env.py``, as before."""
    _by_engine(tmp_path / "chain.db", [])
    environments: list[object] = []
    run_env = migrate._run_env

    def counted(scripts: Any) -> None:
        environments.append(scripts)
        run_env(scripts)

    monkeypatch.setattr(migrate, "_run_env", counted)
    _by_engine(tmp_path / "replayed.db", [])
    assert (environments, [Path(p).name for p in replays]) == ([], ["replayed.db"])

    headed = tmp_path / "headed.db"
    with closing(sqlite3.connect(headed)) as conn:
        conn.execute("PRAGMA user_version = 7")
        conn.commit()
    _by_engine(headed, [])
    assert len(environments) == 1 and [Path(p).name for p in replays] == ["replayed.db"]
    assert migrate.status(sqlite_url(headed)).up_to_date


def test_a_replay_a_program_traces_is_the_same_store_and_seen_by_its_listener(
    tmp_path: Path, replays: list[str]
) -> None:
    """The replay sends its statements straight to the driver's cursor, unless a program
    listens to the engine's cursor events (a statement log, tracing): then they go through
    SQLAlchemy, so the listener sees them, and the store is the same."""
    seen: list[str] = []

    def log(_conn: object, _cursor: object, statement: str, *_rest: object) -> None:
        seen.append(statement)

    SessionDB(tmp_path / "chain.db").close()
    sa.event.listen(sa.Engine, "before_cursor_execute", log)
    try:
        SessionDB(tmp_path / "traced.db").close()
    finally:
        sa.event.remove(sa.Engine, "before_cursor_execute", log)
    assert [Path(p).name for p in replays] == ["traced.db"]
    assert_same_store(store_image(tmp_path / "traced.db"), store_image(tmp_path / "chain.db"))
    assert any(statement.startswith("CREATE TABLE sessions") for statement in seen), seen[:20]


def test_a_replayed_store_searches_and_passes_its_checks(
    tmp_path: Path, replays: list[str]
) -> None:
    SessionDB(tmp_path / "chain.db").close()
    with SessionDB(tmp_path / "state.db") as db:
        assert replays
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "the replayed index finds migrations and 数据库迁移")
        assert [hit["session_id"] for hit in db.search_messages("migrations")] == ["s1"]
        assert [hit["session_id"] for hit in db.search_messages("数据库")] == ["s1"]
    with closing(sqlite3.connect(tmp_path / "state.db")) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        for table in FTS_TABLES:
            conn.execute(f"INSERT INTO {table}({table}, rank) VALUES('integrity-check', 1)")
    assert migrate.status(sqlite_url(tmp_path / "state.db")).up_to_date


@pytest.mark.parametrize("header", ["application_id = 42", "user_version = 7"])
def test_a_blank_file_with_a_header_value_set_is_built_by_the_chain(
    tmp_path: Path, replays: list[str], header: str
) -> None:
    """The chain keeps an ``application_id`` (or ``user_version``) set on a file before its
    first table, where a replay writes the chain's: such a file is built by the chain."""
    SessionDB(tmp_path / "chain.db").close()
    path = tmp_path / "state.db"
    with closing(sqlite3.connect(path)) as conn:
        conn.execute(f"PRAGMA {header}")
        conn.commit()
    name, value = (part.strip() for part in header.split("="))

    migrate.upgrade(sqlite_url(path))

    assert replays == []
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute(f"PRAGMA {name}").fetchone()[0] == int(value)
    assert migrate.status(sqlite_url(path)).up_to_date


def test_threads_creating_one_new_store_end_with_one_store(
    tmp_path: Path, replays: list[str]
) -> None:
    SessionDB(tmp_path / "chain.db").close()
    path = tmp_path / "state.db"
    openers = 6
    start = threading.Barrier(openers)
    failures: list[BaseException] = []

    def open_it() -> None:
        start.wait()
        try:
            SessionDB(path).close()
        except BaseException as exc:  # collected: every opener is compared
            failures.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(openers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert failures == []
    assert replays == [str(path)]  # one built it; the others found it built
    assert_same_store(store_image(path), store_image(tmp_path / "chain.db"))


@pytest.fixture(scope="module")
def races() -> Iterator[ForkServer | None]:
    """The races' programs, forked from one that imported the package once (``race_server``)."""
    with race_server() as server:
        yield server


@pytest.mark.slow  # starts processes
@pytest.mark.parametrize(
    "kinds",
    [["sessiondb+primed"] * 6, ["sessiondb+primed", "cli+primed"] * 3, ["sessiondb+primed",
     "sessiondb"] * 3],
    ids=["SessionDB", "SessionDB and db upgrade", "replay and chain"],
)  # fmt: skip
def test_processes_creating_one_new_store_end_with_one_store(
    tmp_path: Path, kinds: list[str], races: ForkServer | None
) -> None:
    """Processes that each built a store of their own first (so each would replay) and one that
    did not (so it runs the chain) race to create one new file."""
    path = tmp_path / "state.db"
    SessionDB(tmp_path / "chain.db").close()

    outcomes = race(path, kinds, server=races)

    failures = [(o.kind, o.exit_code, o.report, o.stderr[-2000:]) for o in outcomes
                if o.exit_code != 0 or "error" in o.report]  # fmt: skip
    assert failures == []
    assert [o.report.get("backup") for o in outcomes] == [None] * len(kinds)
    # Nothing beside the store (no backup: there was nothing to back up). Its WAL files are
    # left out: `db upgrade` of a store found current leaves them (as on a store built long
    # before), a CLI matter of its own.
    left = {p.name for p in tmp_path.iterdir()} - {"state.db-wal", "state.db-shm"}
    assert left == {"chain.db", "state.db"}
    assert_same_store(store_image(path), store_image(tmp_path / "chain.db"))
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
