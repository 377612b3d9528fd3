"""The release server of ``tests/support/real_hermes.py``: a release imported once per home, each
action a process forked from it. What the tests of real releases rely on: an action's failure
is the release's (its traceback, the server still serving), every action of one home goes to
one server, and an action that finds the server busy runs as a program of its own."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import real_hermes_server
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


def test_the_actions_of_successive_tests_go_to_one_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pytest names the running test in ``PYTEST_CURRENT_TEST``: a home's server serves every
    test (keyed on the variable's value, each test imported the release again)."""
    hermes = RealHermes(SCHEMA, tmp_path / "home")
    path = tmp_path / "state.db"
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "tests/a.py::test_one (call)")
    hermes.calls(path, [("create_session", ["s", "cli"], {})])
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "tests/a.py::test_two (call)")
    (session,) = hermes.calls(path, [("get_session", ["s"], {})])
    server = _server(hermes.python, hermes.driver, hermes.root, hermes.home, hermes.driver_env())
    assert session["id"] == "s" and server.actions == 2
    close_release_servers()


@pytest.mark.parametrize("asking", ["tests/a.py::test_two (call)", None])
def test_an_action_runs_with_the_asking_tests_id_not_the_servers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, asking: str | None
) -> None:
    """The forked child sets ``PYTEST_CURRENT_TEST`` as the asking test has it (or unsets it),
    whatever the server's environment held: what a driver run started now would see."""
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "tests/a.py::test_one (call)")  # the server's
    output = tmp_path / "out"
    request = {
        "db_path": str(tmp_path / "state.db"), "action": "calls", "argument": [],
        "stdout": str(output), "stderr": str(tmp_path / "err"),
        "environ": {"PYTEST_CURRENT_TEST": asking},
    }  # fmt: skip

    class Driver:
        __file__ = "driver.py"

        @staticmethod
        def main() -> None:
            os.write(1, repr(os.environ.get("PYTEST_CURRENT_TEST")).encode())

    child = os.fork()
    if child == 0:
        try:
            real_hermes_server.run_child(Driver, "root", request)
        finally:
            os._exit(0)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert output.read_text() == repr(asking)
