"""The release server of ``tests/support/real_hermes.py``: a release imported once per home, each
action a process forked from it. What the tests of real releases rely on: an action's failure
is the release's (its traceback, the server still serving), every action of one home goes to
one server, and an action that finds the server busy runs as a program of its own."""

from __future__ import annotations

from pathlib import Path

import pytest
from real_hermes import HermesError, RealHermes, _server, close_release_servers

# Slow: a real Hermes release runs in a subprocess (the full run only).
pytestmark = pytest.mark.slow

SCHEMA = 22  # hermes-agent 0.19.0


def test_one_server_per_home_a_failure_is_the_releases_and_a_busy_server_is_not_waited_for(
    tmp_path: Path,
) -> None:
    hermes = RealHermes(SCHEMA, tmp_path / "home")
    path = tmp_path / "state.db"
    hermes.calls(path, [("create_session", ["s", "cli"], {})])
    env = hermes.driver_env()
    server = _server(hermes.python, hermes.driver, hermes.root, hermes.home, env)
    assert server.process.poll() is None and server.actions == 1

    with pytest.raises(HermesError, match=r"(?s)Traceback.*AttributeError.*no_such_method"):
        hermes.calls(path, [("no_such_method", [], {})])
    (session,) = hermes.calls(path, [("get_session", ["s"], {})])
    assert session["id"] == "s" and server.actions == 3  # the same server, still serving

    with server.lock:  # busy (another thread's action): this one runs as its own program
        (count,) = hermes.calls(path, [("session_count", [], {})])
    assert count == 1 and server.actions == 3

    close_release_servers()
    assert server.process.returncode == 0
