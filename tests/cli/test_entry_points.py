"""The ways in that no other test of the inner loop takes, in this process: ``python -m
sessionstore`` and the console script's ``main`` (the slow tests run both as programs), and the
old module paths the README once documented, each the very module it moved to."""

from __future__ import annotations

import importlib
import runpy
import sys

import pytest


def test_python_dash_m_sessionstore_is_the_command_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["sessionstore", "--version"])
    with pytest.raises(SystemExit) as exited:
        runpy.run_module("sessionstore", run_name="__main__")
    assert exited.value.code in (0, None)
    assert capsys.readouterr().out.startswith("sessionstore ")


@pytest.mark.parametrize(
    ("old", "new"),
    [("sessionstore.migrate", "sessionstore.schema.migrate"),
     ("sessionstore.repository", "sessionstore.sessions.repository"),
     ("sessionstore.stats", "sessionstore.sessions.stats"),
     ("sessionstore.trajectory", "sessionstore.hermes.trajectory"),
     ("sessionstore.transfer", "sessionstore.ops.transfer"),
     ("sessionstore.hermes_state", "sessionstore.hermes.state")],
)  # fmt: skip
def test_an_old_module_path_is_the_module_that_moved(old: str, new: str) -> None:
    sys.modules.pop(old, None)  # imported afresh: the shim itself runs
    assert importlib.import_module(old) is importlib.import_module(new)
