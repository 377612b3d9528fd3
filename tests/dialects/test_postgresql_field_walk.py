"""What the PostgreSQL field walk found (docs/postgresql.md, "Field walk"), each on the test
server for real: a scratch role with the settings a DBA gives it (created and dropped here),
``pg_terminate_backend`` of the test's own connections, and row locks held by a second
connection to put two writers exactly where their interleaving used to fail.

- a ``statement_timeout`` set on the role, a role without write privileges, a read-only role
  and a role's connection limit are typed errors saying what happened (they were raw driver
  errors carrying the statement and its parameters, or an ``AuthenticationError``);
- a delete and a write to the same session, interleaved, are serialized by the session's row
  (they met as raw foreign key violations);
- opening a store whose pooled connection was terminated after the schema check retries
  (it was a raw driver error);
- a write whose COMMIT was made but not acknowledged, when the server then refuses the look
  for it, is ``WriteOutcomeUnknownError``: it was "cannot connect", and it had landed.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from pg_faults import commit_then_lose_the_acknowledgement

from sessionstore import (
    PermissionDeniedError,
    ReadOnlyStoreError,
    RetryPolicy,
    StatementCanceledError,
    Store,
    UnknownSessionError,
    WriteOutcomeUnknownError,
)
from sessionstore.api.session_db import SessionDB

WAIT_S = 30.0
"""The bound on every wait of these tests (none is expected to come near it)."""
PATIENT = 30.0
"""A store's busy timeout (its ``lock_timeout``) where the test decides when a lock goes."""


def plain(url: str) -> str:
    """The URL as libpq reads it (no SQLAlchemy driver name)."""
    return sa.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def admin(url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(plain(url), autocommit=True)


@pytest.fixture
def role(pg_store_url: str) -> Iterator[Callable[..., str]]:
    """``role(*settings, privileges=...)``: a scratch login role on the test database, with
    ``ALTER ROLE ... SET`` settings; the store URL that logs in as it. Dropped afterwards."""
    made: list[str] = []

    def make(*settings: str, privileges: str = "ALL", limit: int | None = None) -> str:
        name = f"walk_{uuid.uuid4().hex[:12]}"
        with admin(pg_store_url) as conn:
            conn.execute(f"CREATE ROLE {name} LOGIN")
            made.append(name)
            conn.execute(f"GRANT {privileges} ON ALL TABLES IN SCHEMA public TO {name}")
            conn.execute(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {name}")
            for setting in settings:
                conn.execute(f"ALTER ROLE {name} SET {setting}")
            if limit is not None:
                conn.execute(f"ALTER ROLE {name} CONNECTION LIMIT {limit}")
        return sa.make_url(pg_store_url).set(username=name).render_as_string(hide_password=False)

    yield make
    with admin(pg_store_url) as conn:
        for name in made:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (name,),
            )
            conn.execute(f"DROP OWNED BY {name}")
            conn.execute(f"DROP ROLE {name}")


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.01)


def someone_waits_for_a_lock(url: str) -> bool:
    with admin(url) as conn:
        found = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock'"
        ).fetchone()
    return bool(found and found[0])


class InThread:
    """A call run in a thread: its result or its exception, once it returned."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self.result: Any = None
        self.error: BaseException | None = None

        def run() -> None:
            try:
                self.result = call()
            except BaseException as exc:
                self.error = exc

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def join(self) -> Any:
        self.thread.join(WAIT_S)
        assert not self.thread.is_alive(), "the call never returned"
        if self.error is not None:
            raise self.error
        return self.result


def messages_of(url: str, session_id: str) -> list[str]:
    with admin(url) as conn:
        return [str(row[0]) for row in conn.execute(
            "SELECT content FROM messages WHERE session_id = %s ORDER BY id", (session_id,))]


def hold_session_row(url: str, session_id: str) -> psycopg.Connection[Any]:
    """A second connection that holds the session's row (as a writer mid-transaction)."""
    holder = psycopg.connect(plain(url))
    holder.execute("SELECT 1 FROM sessions WHERE id = %s FOR UPDATE", (session_id,))
    return holder


def test_a_statement_timeout_set_on_the_role_is_typed_and_the_write_never_lands(
    role: Callable[..., str], pg_store_url: str
) -> None:
    # The DBA's statement_timeout is shorter than our lock wait: a write kept waiting for a
    # row is cancelled by the server. It was a raw OperationalError (QueryCanceled).
    url = role("statement_timeout = '200ms'")
    with SessionDB(url=url, busy_timeout_s=PATIENT) as db:
        db.create_session("s", "cli")
        holder = hold_session_row(pg_store_url, "s")
        try:
            with pytest.raises(StatementCanceledError, match="statement_timeout") as one:
                db.append_message("s", "user", "never lands")
            with pytest.raises(StatementCanceledError):
                db.append_messages("s", [{"role": "user", "content": "nor this"}])
        finally:
            holder.rollback()
            holder.close()
        assert isinstance(one.value, TimeoutError)
        assert messages_of(pg_store_url, "s") == []
        db.append_message("s", "user", "after")  # nothing to reopen
        assert messages_of(pg_store_url, "s") == ["after"]
        session = db.get_session("s")
        assert session is not None and session["message_count"] == 1


def test_a_role_that_may_only_read_gets_a_typed_error_without_the_statement(
    role: Callable[..., str], pg_store_url: str
) -> None:
    with SessionDB(url=pg_store_url) as owner:
        owner.create_session("s", "cli")
    with SessionDB(url=role(privileges="SELECT")) as db:
        assert db.get_session("s") is not None
        with pytest.raises(PermissionDeniedError, match="permission denied for table") as denied:
            db.append_message("s", "user", "a private message")
    # SQLAlchemy's wrapper put the statement and its parameters (the message) in the text.
    assert "a private message" not in str(denied.value)
    assert "INSERT" not in str(denied.value)
    assert messages_of(pg_store_url, "s") == []


def test_a_read_only_role_says_the_server_refused_the_write(
    role: Callable[..., str], pg_store_url: str
) -> None:
    with SessionDB(url=role("default_transaction_read_only = on")) as db:
        assert db.list_sessions_rich() == []
        with pytest.raises(ReadOnlyStoreError, match="read-only transaction"):
            db.create_session("s", "cli")


def test_a_role_at_its_connection_limit_is_waited_for_not_called_a_bad_password(
    role: Callable[..., str], caplog: pytest.LogCaptureFixture
) -> None:
    # "too many connections for role" was an AuthenticationError at once (its words hold
    # 'role "'); like a full server, it is waited for within the retry budget.
    url = role(limit=1)
    hog = psycopg.connect(plain(url))
    retried = threading.Event()

    class Retries(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            retried.set()

    handler = Retries(logging.DEBUG)
    retry_logger = logging.getLogger("sessionstore.storage.retry")
    retry_logger.addHandler(handler)
    previous = retry_logger.level
    retry_logger.setLevel(logging.DEBUG)
    store = Store.open(url, retry=RetryPolicy(max_attempts=100_000, budget_s=WAIT_S))
    try:
        call = InThread(lambda: store.read(lambda conn: conn.exec_driver_sql("SELECT 1").scalar()))
        assert retried.wait(WAIT_S), "the refused connection was not retried"
        hog.close()
        assert call.join() == 1
    finally:
        retry_logger.removeHandler(handler)
        retry_logger.setLevel(previous)
        hog.close()
        store.close()


def test_a_delete_waits_for_an_append_in_flight_and_takes_its_message(
    pg_store_url: str,
) -> None:
    with SessionDB(url=pg_store_url, busy_timeout_s=PATIENT) as db:
        db.create_session("s", "cli")
        writer = psycopg.connect(plain(pg_store_url))  # an append of another process
        writer.execute(
            "INSERT INTO messages (session_id, role, content, timestamp) "
            "VALUES ('s', 'user', 'in flight', 1)"
        )
        try:
            delete = InThread(lambda: db.delete_session("s"))
            wait_for(lambda: someone_waits_for_a_lock(pg_store_url), "the delete to wait")
            writer.commit()
            # It was: "update or delete on table sessions violates foreign key constraint".
            assert delete.join() is True
        finally:
            writer.close()
        assert db.get_session("s") is None
        assert messages_of(pg_store_url, "s") == []


@pytest.mark.parametrize("rewrite", ["replace_messages", "archive_and_compact"])
def test_a_rewrite_meeting_a_delete_in_flight_finds_the_session_gone(
    pg_store_url: str, rewrite: str
) -> None:
    with SessionDB(url=pg_store_url, busy_timeout_s=PATIENT) as db:
        db.create_session("s", "cli")
        db.append_message("s", "user", "old")
        deleter = psycopg.connect(plain(pg_store_url))  # a delete of another process
        deleter.execute("DELETE FROM messages WHERE session_id = 's'")
        deleter.execute("DELETE FROM sessions WHERE id = 's'")
        try:
            call = InThread(lambda: getattr(db, rewrite)("s", [{"role": "user", "content": "new"}]))
            wait_for(lambda: someone_waits_for_a_lock(pg_store_url), "the rewrite to wait")
            deleter.commit()
            # It was: "insert or update on table messages violates foreign key constraint".
            with pytest.raises(UnknownSessionError):
                call.join()
        finally:
            deleter.close()
        assert messages_of(pg_store_url, "s") == []


def test_a_lost_commit_acknowledgement_the_server_then_refuses_to_check_is_outcome_unknown(
    role: Callable[..., str], pg_store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The server committed, the acknowledgement was lost, and the look for the rows cannot
    # connect (here the role may no longer log in; in the field, the server was stopping).
    # The caller was told "cannot connect", as if nothing had happened, and the rows were in.
    url = role()
    name = sa.make_url(url).username

    def no_more_logins(conn: psycopg.Connection[Any]) -> None:
        conn.execute(f"ALTER ROLE {name} NOLOGIN")

    with SessionDB(url=url) as db:
        db.create_session("s", "cli")
        lost = commit_then_lose_the_acknowledgement(pg_store_url, monkeypatch, no_more_logins)
        with pytest.raises(WriteOutcomeUnknownError, match="may or may not"):
            db.append_messages("s", [{"role": "user", "content": "landed"},
                                     {"role": "assistant", "content": "too"}])
        monkeypatch.undo()
        assert lost
        assert messages_of(pg_store_url, "s") == ["landed", "too"]
        with admin(pg_store_url) as conn:
            conn.execute(f"ALTER ROLE {name} LOGIN")
        db.append_message("s", "user", "the store goes on by itself")
        assert len(messages_of(pg_store_url, "s")) == 3


def test_opening_a_store_whose_pooled_connection_died_after_the_schema_check_retries(
    pg_store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The open checks the schema, then looks for another program's index on the pool's next
    # connection: terminated in between (a restart under a gateway opening), that look was a
    # raw OperationalError out of SessionDB(url=...).
    from sessionstore.schema import migrate

    real_status = migrate.status
    killed: list[int] = []

    def status_then_kill(target: Any) -> Any:
        found = real_status(target)
        with admin(pg_store_url) as conn:
            killed.extend(int(row[0]) for row in conn.execute(
                "SELECT pg_terminate_backend(pid), pid FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND backend_type = 'client backend'").fetchall() if row[0])
        return found

    monkeypatch.setattr(migrate, "status", status_then_kill)
    with SessionDB(url=pg_store_url) as db:
        monkeypatch.undo()
        assert killed
        db.create_session("s", "cli")
        assert db.get_session("s") is not None
