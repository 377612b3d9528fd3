"""Faults made on the test PostgreSQL server for real: a backend terminated, and a COMMIT
that reaches the server and commits while its acknowledgement never reaches the client."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa


def libpq_url(url: str) -> str:
    """The URL as libpq reads it (no SQLAlchemy driver name)."""
    return sa.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def terminate(pid: int, url: str) -> None:
    with psycopg.connect(libpq_url(url), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))


def commit_then_lose_the_acknowledgement(
    url: str,
    monkeypatch: pytest.MonkeyPatch,
    before_the_kill: Callable[[psycopg.Connection[Any]], None] | None = None,
) -> list[int]:
    """Make the next COMMIT reach the server and commit, then break the connection so the
    client sees the driver's genuine connection error instead of the acknowledgement.
    ``before_the_kill`` runs (on an admin connection) between the two. Returns the list the
    lost backend's pid is put in once it happened."""
    real_commit = psycopg.Connection.commit
    lost: list[int] = []

    def commit(self: psycopg.Connection[Any]) -> None:
        real_commit(self)
        if lost:
            return
        lost.append(self.info.backend_pid)
        with psycopg.connect(libpq_url(url), autocommit=True) as admin:
            if before_the_kill is not None:
                before_the_kill(admin)
            admin.execute("SELECT pg_terminate_backend(%s)", (self.info.backend_pid,))
        self.execute("SELECT 1")  # raises: the server closed the connection

    monkeypatch.setattr(psycopg.Connection, "commit", commit)
    return lost
