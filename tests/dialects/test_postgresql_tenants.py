"""Schema per tenant on PostgreSQL (issue 30, item 7): a URL means what it says.

The user's server options (the URL's ``options``, else ``PGOPTIONS``) are kept beside our own
``lock_timeout``; a ``search_path`` puts a store in its own schema, and two stores in two
schemas of one database never see each other: listing, search (words and CJK substrings),
deletes and prunes, the migrations (one lock per schema, created side by side), ``db copy``
into a tenant and the doctor all stay inside the store's schema.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from sessionstore import SessionDB
from sessionstore.dialects.postgresql import MIGRATION_LOCK_CLASS, search_path_entries
from sessionstore.ops import doctor, transfer
from sessionstore.schema import migrate
from sessionstore.storage.store import Store

pytestmark = pytest.mark.postgresql


def tenant_url(database_url: str, schema: str, *more_options: str) -> str:
    """The database's URL with ``-c search_path=<schema>`` (and more) as libpq options."""
    options = " ".join([f"-csearch_path={schema}", *more_options])
    return make_url(database_url).update_query_dict({"options": options}).render_as_string(
        hide_password=False
    )


def plain(url: str) -> sa.Engine:
    return sa.create_engine(url, isolation_level="AUTOCOMMIT")


def server_settings(db: SessionDB, *names: str) -> list[str]:
    with db.store.engine.connect() as conn:
        return [str(conn.exec_driver_sql(f"SHOW {name}").scalar()) for name in names]


@pytest.fixture
def database(empty_pg_url: str) -> str:
    return empty_pg_url


@pytest.fixture
def tenants(database: str) -> Iterator[tuple[SessionDB, SessionDB]]:
    a = SessionDB(url=tenant_url(database, "tenant_a"))
    b = SessionDB(url=tenant_url(database, "tenant_b"))
    yield a, b
    a.close()
    b.close()


def age(database: str, schema: str, session_id: str) -> None:
    """Make a session of ``schema`` ended and a year idle (a prune candidate: prune measures age
    from the last activity, its messages and ``last_activity_at`` included)."""
    engine = plain(database)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            f"UPDATE {schema}.sessions SET started_at = started_at - 366 * 86400, "
            f"ended_at = started_at - 366 * 86400 + 1, end_reason = 'done', "
            f"last_activity_at = NULL WHERE id = %(id)s",
            {"id": session_id},
        )
        conn.exec_driver_sql(
            f"UPDATE {schema}.messages SET timestamp = timestamp - 366 * 86400 "
            f"WHERE session_id = %(id)s",
            {"id": session_id},
        )
    engine.dispose()


def test_two_tenants_never_see_each_other(
    database: str, tenants: tuple[SessionDB, SessionDB]
) -> None:
    a, b = tenants
    for db, word in ((a, "swordfish"), (b, "marlin")):
        # The same ids in both: keys are per tenant too.
        db.create_session("shared", "cli")
        db.append_message("shared", "user", f"the password is {word} 中文密码")
        db.create_session("old", "cli")
        db.append_message("old", "user", f"old {word}")
    age(database, "tenant_a", "old")
    age(database, "tenant_b", "old")
    a.create_session("a-only", "cli")

    assert {s["id"] for s in b.list_sessions_rich()} == {"shared", "old"}
    assert b.search_messages("swordfish") == []
    cjk_hits = b.search_messages("中文")
    assert [m["session_id"] for m in cjk_hits] == ["shared"]
    assert "marlin" in repr(cjk_hits) and "swordfish" not in repr(cjk_hits)
    assert {m["session_id"] for m in a.search_messages("swordfish")} == {"shared", "old"}
    assert {s["id"] for s in b.search_sessions(limit=100)} == {"shared", "old"}

    assert b.delete_session("shared")
    assert b.prune_sessions(older_than_days=30) == 1
    assert b.session_count() == 0 and b.message_count() == 0
    assert {s["id"] for s in a.list_sessions_rich()} == {"shared", "old", "a-only"}
    assert a.message_count() == 2
    assert [m["content"] for m in a.get_messages("shared")] == [
        "the password is swordfish 中文密码"
    ]
    assert {m["session_id"] for m in a.search_messages("中文")} == {"shared"}

    engine = plain(database)
    with engine.connect() as conn:
        where = conn.exec_driver_sql(
            "SELECT table_schema, count(*) FROM information_schema.tables "
            "WHERE table_name IN ('sessions', 'messages', 'alembic_version') "
            "GROUP BY 1 ORDER BY 1"
        ).all()
        functions = conn.exec_driver_sql(
            "SELECT n.nspname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE p.proname = 'sessionstore_cjk_grams' ORDER BY 1"
        ).scalars().all()
    engine.dispose()
    # Nothing in public: each store's tables, version row and gram function are its own.
    assert where == [("tenant_a", 3), ("tenant_b", 3)]
    assert functions == ["tenant_a", "tenant_b"]


def test_a_tenant_whose_path_also_names_a_store_schema_gets_its_own(database: str) -> None:
    """``search_path=tenant_b,public`` beside a store in public: the migration builds the
    tenant's own tables instead of taking public's for them."""
    with SessionDB(url=database) as public:
        public.create_session("public-session", "cli")
    with SessionDB(url=tenant_url(database, "tenant_b,public")) as tenant:
        assert tenant.list_sessions_rich() == []
        tenant.create_session("b", "cli")
    with SessionDB(url=database) as public:
        assert [s["id"] for s in public.list_sessions_rich()] == ["public-session"]


def test_the_users_options_are_kept_beside_ours(database: str) -> None:
    url = tenant_url(database, "tenant_a", "-cstatement_timeout=12345", "-capplication_name=t")
    with SessionDB(url=url, busy_timeout_s=0.25) as db:
        assert server_settings(
            db, "search_path", "statement_timeout", "application_name", "lock_timeout"
        ) == ["tenant_a", "12345ms", "t", "250ms"]
    # A lock_timeout of the user's own wins over ours.
    with SessionDB(url=tenant_url(database, "tenant_a", "-clock_timeout=7s")) as db:
        assert server_settings(db, "lock_timeout") == ["7s"]


def test_jit_is_off_unless_the_user_turns_it_on(database: str) -> None:
    """A search at a million messages passed jit_above_cost and compiled for 60-200 ms."""
    with SessionDB(url=tenant_url(database, "tenant_a")) as db:
        assert server_settings(db, "jit") == ["off"]
    with SessionDB(url=tenant_url(database, "tenant_a", "-cjit=on")) as db:
        assert server_settings(db, "jit") == ["on"]


def test_pgoptions_from_the_environment_is_honoured(
    database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGOPTIONS", "-csearch_path=tenant_env -cstatement_timeout=4321")
    with SessionDB(url=database) as db:
        db.create_session("s", "cli")
        assert server_settings(db, "search_path", "statement_timeout", "lock_timeout") == [
            "tenant_env", "4321ms", "1s",
        ]
    monkeypatch.delenv("PGOPTIONS")
    engine = plain(database)
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT id FROM tenant_env.sessions").scalars().all() == [
            "s"
        ]
        assert conn.exec_driver_sql("SELECT to_regclass('public.sessions')").scalar() is None
    engine.dispose()


def waiting_migration_locks(database: str, schema: str) -> int:
    engine = plain(database)
    with engine.connect() as conn:
        count = conn.execute(
            sa.text(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                "AND classid = CAST(:cls AS oid) AND objid = CAST(hashtext(:schema) AS oid)"
            ),
            {"cls": MIGRATION_LOCK_CLASS, "schema": schema},
        ).scalar()
    engine.dispose()
    return int(count or 0)


def in_thread(work: Callable[[], None]) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, errors


def test_the_migration_lock_is_one_per_schema(database: str) -> None:
    """Tenant B migrates while tenant A's migration lock is held; A's own migration waits
    for it. (B is given statement_timeout and no lock_timeout: were it keyed like A, it
    would fail with 57014, which is never retried, instead of hanging the test.)"""
    holder = sa.create_engine(database).connect()
    holder.execute(
        sa.text("SELECT pg_advisory_xact_lock(:cls, hashtext('tenant_a'))"),
        {"cls": MIGRATION_LOCK_CLASS},
    )
    try:
        migrate.upgrade(
            tenant_url(database, "tenant_b", "-clock_timeout=0", "-cstatement_timeout=20000")
        )
        assert migrate.status(tenant_url(database, "tenant_b")).up_to_date
        waiter, errors = in_thread(lambda: migrate.upgrade(tenant_url(database, "tenant_a")))
        deadline = time.monotonic() + 60
        while waiting_migration_locks(database, "tenant_a") == 0 and waiter.is_alive():
            assert time.monotonic() < deadline, "tenant A's migration never queued"
            time.sleep(0.05)
        assert waiter.is_alive() and not errors
        assert not migrate.status(tenant_url(database, "tenant_a")).up_to_date
    finally:
        holder.rollback()
        holder.close()
    waiter.join(120)
    assert not waiter.is_alive() and errors == []
    assert migrate.status(tenant_url(database, "tenant_a")).up_to_date


UPGRADE = "import sys; from sessionstore.schema import migrate; migrate.upgrade(sys.argv[1])"


@pytest.mark.slow
def test_tenants_migrating_at_once_on_a_new_database_both_succeed(database: str) -> None:
    """Both create their schema; the one extension of the database is created once, in
    public, outside either migration's transaction."""
    # Processes: Alembic's context is one per process.
    upgrades = [
        subprocess.Popen(
            [sys.executable, "-c", UPGRADE, tenant_url(database, schema)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        for schema in ("tenant_a", "tenant_b", "tenant_c")
    ]
    outcomes = [(process.wait(300), process.communicate()[0]) for process in upgrades]
    assert [code for code, _ in outcomes] == [0, 0, 0], outcomes
    for schema in ("tenant_a", "tenant_b", "tenant_c"):
        assert migrate.status(tenant_url(database, schema)).up_to_date
    engine = plain(database)
    with engine.connect() as conn:
        assert conn.exec_driver_sql(
            "SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'pg_trgm'"
        ).scalars().all() == ["public"]
    engine.dispose()


def test_db_copy_into_a_tenant_schema(
    database: str, tmp_path: Path, tenants: tuple[SessionDB, SessionDB]
) -> None:
    a, _ = tenants
    a.create_session("a1", "cli")
    a.append_message("a1", "user", "tenant a keeps this")
    source = f"sqlite:///{tmp_path / 'source.db'}"
    with SessionDB(url=source) as db:
        db.create_session("copied", "cli")
        db.append_message("copied", "user", "copied into tenant c 中文")
    target = tenant_url(database, "tenant_c")
    result = transfer.copy(source, target)
    assert (result.sessions, result.messages) == (1, 1)
    with SessionDB(url=target) as c:
        assert [s["id"] for s in c.list_sessions_rich()] == ["copied"]
        assert [m["session_id"] for m in c.search_messages("中文")] == ["copied"]
    assert [s["id"] for s in a.list_sessions_rich()] == ["a1"]
    assert a.search_messages("copied") == []


@pytest.mark.usefixtures("tenants")
def test_the_doctor_checks_the_tenants_own_objects(database: str) -> None:
    engine = plain(database)
    with engine.connect() as conn:
        conn.exec_driver_sql("DROP INDEX tenant_b.ix_messages_cjk_bigrams")
    engine.dispose()
    with Store.open(tenant_url(database, "tenant_a")) as store:
        assert doctor.diagnose(store).healthy
    with Store.open(tenant_url(database, "tenant_b")) as store:
        report = doctor.diagnose(store)
        objects = report.get("fts_objects")
        assert objects is not None and objects.status == "fail"
        assert "ix_messages_cjk_bigrams" in objects.detail
        doctor.repair(store, report)
        assert doctor.diagnose(store).healthy
    engine = plain(database)
    with engine.connect() as conn:
        assert conn.exec_driver_sql(
            "SELECT schemaname FROM pg_indexes WHERE indexname = 'ix_messages_cjk_bigrams' "
            "ORDER BY 1"
        ).scalars().all() == ["tenant_a", "tenant_b"]
    engine.dispose()


@pytest.mark.parametrize(
    ("setting", "entries"),
    [
        ("tenant_a", ["tenant_a"]),
        ('"$user", public', ["$user", "public"]),
        ('  Tenant_A ,"Mixed Case",  "with ""quote"""', ["tenant_a", "Mixed Case", 'with "quote"']),
        ("", []),
        ('"a,b", c', ["a,b", "c"]),
    ],
)
def test_search_path_entries_read_as_the_server_does(setting: str, entries: list[str]) -> None:
    assert search_path_entries(setting) == entries
