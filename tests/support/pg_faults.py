"""Faults made on the test PostgreSQL server for real: a backend terminated, a COMMIT that
reaches the server and commits while its acknowledgement never reaches the client, a client's
socket cut while its backend is still inside the write, and a statement sent whose socket
psycopg then finds hung up."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from psycopg import waiting


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


def hang_up_after_sending(
    monkeypatch: pytest.MonkeyPatch, starts_with: str
) -> list[psycopg.Connection[Any]]:
    """Send the next statement whose text starts with ``starts_with``, then have psycopg's
    own wait (``wait_c``) poll a descriptor that says POLLHUP and has nothing to read, as
    poll() says of a socket when a reset races it. psycopg then raises "connection socket
    closed" from outside libpq, which still waits for the statement's result: the
    connection is left inside the command, and the server runs the statement all the same.
    Returns the list the connection it happened on is put in."""
    real_execute = psycopg.Cursor.execute
    real_wait = waiting.wait
    hit: list[psycopg.Connection[Any]] = []

    def execute(self: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        if hit or not str(query).lstrip().upper().startswith(starts_with.upper()):
            return real_execute(self, query, *args, **kwargs)
        hit.append(self.connection)
        read_end, write_end = os.pipe()
        os.close(write_end)  # poll() on the read end: POLLHUP, never POLLIN

        def wait(gen: Any, fileno: int, *wait_args: Any, **wait_kwargs: Any) -> Any:
            return real_wait(gen, read_end, *wait_args, **wait_kwargs)

        try:
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(waiting, "wait", wait)
                return real_execute(self, query, *args, **kwargs)
        finally:
            os.close(read_end)

    monkeypatch.setattr(psycopg.Cursor, "execute", execute)
    return hit


class SocketCut:
    """Cuts the client's side of the socket of the first backend of the database seen asleep
    (``pg_sleep``: a write held inside the server by a test's trigger), as a network failure
    or a restarted proxy would: the backend, asleep inside the write, notices nothing.
    ``start()`` before the call, ``join()`` after it: the pids whose socket was cut."""

    def __init__(self, url: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self._server = libpq_url(url)
        self._sockets: dict[int, int] = {}
        self._cut: list[int] = []
        self._thread = threading.Thread(target=self._cut_the_sleeper_s_socket)
        real_execute = psycopg.Cursor.execute
        sockets = self._sockets

        def execute(self: psycopg.Cursor[Any], *args: Any, **kwargs: Any) -> Any:
            sockets[self.connection.info.backend_pid] = self.connection.pgconn.socket
            return real_execute(self, *args, **kwargs)

        monkeypatch.setattr(psycopg.Cursor, "execute", execute)

    def start(self) -> None:
        self._thread.start()

    def join(self) -> list[int]:
        self._thread.join()
        return self._cut

    def _cut_the_sleeper_s_socket(self) -> None:
        with psycopg.connect(self._server, autocommit=True) as admin:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                sleeping = admin.execute(
                    "SELECT pid FROM pg_stat_activity WHERE wait_event = 'PgSleep'"
                    " AND datname = current_database() AND pid <> pg_backend_pid()"
                ).fetchone()
                if sleeping is not None:
                    break
                time.sleep(0.01)
            else:
                return
        self._cut.append(sleeping[0])
        with socket.socket(fileno=os.dup(self._sockets[sleeping[0]])) as client_side:
            client_side.shutdown(socket.SHUT_RDWR)


def wait_until_ended(url: str, pids: list[int], timeout_s: float = 60.0) -> None:
    """Return once none of the backends ``pids`` runs any more: whatever they were to commit,
    they have committed (or rolled back). A cut backend goes on with its statement, then finds
    its client gone and exits; this looks for that, where a fixed sleep past its trigger's
    ``pg_sleep`` guessed it (and under load could guess short). ``timeout_s`` only bounds how
    long a backend that never ends may keep the test waiting."""
    deadline = time.monotonic() + timeout_s
    with psycopg.connect(libpq_url(url), autocommit=True) as admin:
        while admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", (pids,)
        ).fetchone() != (0,):
            assert time.monotonic() < deadline, f"backends {pids} still run after {timeout_s} s"
            time.sleep(0.01)
