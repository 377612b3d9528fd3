"""A connection that could never be made is said by its cause, at the first attempt (issue 27).

A missing database, a refused port, an unknown host and an unknown role each raise their own
``StoreUnavailableError`` subclass, from every way in (a store's read and write, ``SessionDB``,
the migrations, a status read, the CLI), after exactly one connection attempt: no connection
was ever made, so none was lost and a retry would only say the same thing later.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import URL, make_url
from typer.testing import CliRunner

from sessionstore import cli
from sessionstore.api.session_db import SessionDB
from sessionstore.errors import (
    AuthenticationError,
    DatabaseNotFoundError,
    StoreUnavailableError,
    StoreUnreachableError,
)
from sessionstore.schema import migrate
from sessionstore.storage.store import Store

FAILURES: dict[str, tuple[Callable[[URL], URL], type[StoreUnavailableError], str]] = {
    "no such database": (
        lambda url: url.set(database="sstest_no_such_database"),
        DatabaseNotFoundError,
        'has no database "sstest_no_such_database"',
    ),
    "refused": (lambda url: url.set(port=1), StoreUnreachableError, "Connection refused"),
    "unknown host": (
        lambda url: url.set(host="no-such-host.invalid"),
        StoreUnreachableError,
        "no-such-host.invalid",
    ),
    "unknown role": (
        lambda url: url.set(username="sstest_no_such_role"),
        AuthenticationError,
        "refused the credentials",
    ),
}

OPERATIONS: dict[str, Callable[[str], Any]] = {
    "store read": lambda url: Store.open(url).read(lambda conn: conn.exec_driver_sql("SELECT 1")),
    "store write": lambda url: Store.open(url).write(lambda conn: None),
    "SessionDB": lambda url: SessionDB(url=url),
    "upgrade": migrate.upgrade,
    "status": migrate.status,
}


@pytest.fixture
def connect_attempts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every connection attempt psycopg is asked to make (SQLAlchemy calls ``psycopg.connect``)."""
    attempts: list[str] = []
    real = psycopg.connect

    def counted(*args: Any, **kwargs: Any) -> Any:
        attempts.append(str(kwargs.get("dbname") or args))
        return real(*args, **kwargs)

    monkeypatch.setattr(psycopg, "connect", counted)
    return attempts


@pytest.mark.parametrize("failure", sorted(FAILURES))
@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_a_connection_never_made_is_typed_by_cause_at_the_first_attempt(
    migrated_pg_url: str, connect_attempts: list[str], failure: str, operation: str
) -> None:
    change, error, words = FAILURES[failure]
    url = change(make_url(migrated_pg_url)).render_as_string(hide_password=False)
    with pytest.raises(error, match=words):
        OPERATIONS[operation](url)
    assert len(connect_attempts) == 1, connect_attempts


def test_the_cli_says_the_cause_in_one_line(migrated_pg_url: str) -> None:
    runner = CliRunner()
    for change, _, words in FAILURES.values():
        url = change(make_url(migrated_pg_url)).render_as_string(hide_password=False)
        for verb in (["sessions", "list"], ["db", "upgrade"], ["db", "current", "--check"]):
            result = runner.invoke(cli.app, ["--url", url, *verb])
            assert result.exit_code == 1
            lines = result.stderr.strip().splitlines()
            assert len(lines) == 1 and words in lines[0], (verb, result.stderr)
            assert "lost the connection" not in lines[0]


TERMINATED_AT_START_UP = (
    'connection failed: connection to server at "127.0.0.1", port 5432 failed: FATAL:  '
    "terminating connection due to administrator command"
)


@pytest.mark.parametrize("operation", ["store write", "SessionDB"])
def test_a_backend_ended_during_its_start_up_is_connected_again(
    migrated_pg_url: str, monkeypatch: pytest.MonkeyPatch, operation: str
) -> None:
    """A backend a DBA's or a pooler's ``pg_terminate_backend`` ended while it started says
    "terminating connection" (the server's own words, as libpq hands them on): a new attempt
    gets a new backend, so it is retried, not said as an unreachable server."""
    real = psycopg.connect
    attempts: list[int] = []

    def first_one_ended(*args: Any, **kwargs: Any) -> Any:
        attempts.append(1)
        if len(attempts) == 1:
            raise psycopg.OperationalError(TERMINATED_AT_START_UP)
        return real(*args, **kwargs)

    monkeypatch.setattr(psycopg, "connect", first_one_ended)
    opened = OPERATIONS[operation](migrated_pg_url)
    assert len(attempts) >= 2
    if isinstance(opened, SessionDB):
        opened.create_session("s1", "cli")
        assert opened.get_session("s1") is not None
        opened.close()
