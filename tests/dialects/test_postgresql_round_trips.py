"""What an append, a read and a store's open cost on PostgreSQL in statements sent (issue 12,
item 6; issue 26: an open was 7 statements, 4 of them SQLAlchemy's server set-up).

An append of one message is one statement (a CTE bumping the counters and inserting the row,
in autocommit: no BEGIN, no COMMIT) and a checkout sends no ping; a connection that died
while idle (pooled, or kept by the store for reads) is noticed by the statement that fails on
it, and the whole read or write is retried on a fresh one.

Counted at the driver: every statement psycopg sends passes through ``Cursor.execute``, and
a transaction it opens or ends shows in the connection's ``transaction_status``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from sessionstore.api.session_db import SessionDB
from sessionstore.errors import UnknownSessionError
from sessionstore.storage.engine import create_store_engine

pytestmark = pytest.mark.postgresql


@pytest.fixture
def db(pg_store_url: str) -> Iterator[SessionDB]:
    database = SessionDB(url=pg_store_url)
    database.create_session("s", "cli")
    yield database
    database.close()


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    statements: list[str] = []
    real_execute = psycopg.Cursor.execute
    real_commit = psycopg.Connection.commit

    def execute(self: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        statements.append(str(query).strip().split()[0].upper())
        return real_execute(self, query, *args, **kwargs)

    def commit(self: psycopg.Connection[Any]) -> None:
        # An explicit transaction ends with a COMMIT on the wire; in autocommit nothing is sent.
        if self.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            statements.append("COMMIT")
        real_commit(self)

    monkeypatch.setattr(psycopg.Cursor, "execute", execute)
    monkeypatch.setattr(psycopg.Connection, "commit", commit)
    return statements


def terminate_all(url: str) -> int:
    database = sa.make_url(url).database
    plain = sa.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(plain, autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (database,),
        ).fetchone()
    return int(row[0]) if row else 0


def test_an_append_is_one_statement_and_no_ping(db: SessionDB, sent: list[str]) -> None:
    db.append_message("s", "user", "warm the pool up")
    sent.clear()
    message_id = db.append_message("s", "assistant", "one round trip", tool_calls=[{"id": "c"}])
    assert sent == ["WITH"], sent
    session = db.get_session("s")
    assert session is not None
    assert (session["message_count"], session["tool_call_count"]) == (2, 1)
    assert [m["id"] for m in db.get_messages("s")][-1] == message_id


def test_a_one_statement_append_to_an_unknown_session_writes_nothing(db: SessionDB) -> None:
    with pytest.raises(UnknownSessionError):
        db.append_message("nobody", "user", "lost")
    assert db.message_count() == 0
    session = db.get_session("s")
    assert session is not None and session["message_count"] == 0


def test_reads_and_writes_after_every_idle_connection_died(
    db: SessionDB, migrated_pg_url: str
) -> None:
    # Connections now sit idle in the pool and among the store's kept readers.
    db.append_message("s", "user", "before")
    assert len(db.get_messages("s")) == 1
    assert db.list_sessions_rich()[0]["id"] == "s"
    assert terminate_all(migrated_pg_url) >= 1
    assert [m["content"] for m in db.get_messages("s")] == ["before"]
    assert terminate_all(migrated_pg_url) >= 1
    db.append_message("s", "user", "after")
    assert [m["content"] for m in db.get_messages("s")] == ["before", "after"]
    session = db.get_session("s")
    assert session is not None and session["message_count"] == 2


def test_an_up_to_date_stores_open_is_three_statements(pg_store_url: str, sent: list[str]) -> None:
    """The engine's first connection learns the server in one query (libpq already holds the
    version and ``standard_conforming_strings``), the schema check is its two small reads,
    and there is no look for Hermes's CJK index: no Hermes writes to PostgreSQL."""
    SessionDB(url=pg_store_url).close()  # the process's imports and compiled statements
    sent.clear()
    db = SessionDB(url=pg_store_url)
    try:
        assert sent == ["SELECT"] * 3, sent
        db.create_session("s", "cli")
        assert db.get_session("s") is not None
    finally:
        db.close()


SERVER_FACTS = ("server_version_info", "default_schema_name", "default_isolation_level",
                "_backslash_escapes")  # fmt: skip


def server_facts(url: str, options: str, *, ours: bool) -> tuple[Any, ...]:
    """What an engine's dialect learnt from the server on its first connection: a store's
    engine (``ours``), or SQLAlchemy's own with the same server options."""
    if ours:
        engine = create_store_engine(sa.make_url(url).update_query_dict({"options": options}))
    else:
        engine = sa.create_engine(url, connect_args={"options": options})
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
        return tuple(getattr(engine.dialect, name) for name in SERVER_FACTS)
    finally:
        engine.dispose()


@pytest.mark.parametrize("libpq_answers", [True, False], ids=["libpq", "queried"])
@pytest.mark.parametrize(
    "options",
    [
        "-cjit=off",
        "-csearch_path=store_facts,public -cdefault_transaction_isolation=serializable"
        " -cstandard_conforming_strings=off",
    ],
    ids=["defaults", "users-settings"],
)
def test_the_one_query_set_up_learns_what_sqlalchemy_learns(
    migrated_pg_url: str, monkeypatch: pytest.MonkeyPatch, options: str, libpq_answers: bool
) -> None:
    with psycopg.connect(
        sa.make_url(migrated_pg_url).set(drivername="postgresql").render_as_string(False),
        autocommit=True,
    ) as admin:
        admin.execute("CREATE SCHEMA IF NOT EXISTS store_facts")
    try:
        expected = server_facts(migrated_pg_url, options, ours=False)
        if not libpq_answers:  # a connection whose start-up did not report them
            monkeypatch.setattr(psycopg.ConnectionInfo, "server_version", property(lambda _: 0))
            monkeypatch.setattr(psycopg.ConnectionInfo, "parameter_status", lambda *_: None)
        assert server_facts(migrated_pg_url, options, ours=True) == expected
    finally:
        with psycopg.connect(
            sa.make_url(migrated_pg_url).set(drivername="postgresql").render_as_string(False),
            autocommit=True,
        ) as admin:
            admin.execute("DROP SCHEMA store_facts")
