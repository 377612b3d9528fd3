"""Hermes's own tests of ``hermes_state``, from each release's sdist, pass on our drop-in.

Every test of the listed files that passes with the release's own module passes with
``sessionstore.hermes.state`` in its place, except the divergences listed with their reasons in
``tests/hermes/own_suites/``; a listed test that now passes fails here too, so the list never
outlives a fix (``tests/support/hermes_own_suites.py`` says how the suites are run).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hermes_own_suites import (
    SUITES,
    Suite,
    fresh_baseline,
    known_divergences,
    outlived,
    run_both,
    side_server,
    unexplained,
)
from prefork import ForkServer

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def our_sides(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForkServer | None]:
    """Where our sides are forked from: a process that imported pytest and the package and
    built one new store, once (``hermes_own_suites.side_server``); None: new interpreters."""
    server = side_server(tmp_path_factory.mktemp("own-suite-sides"))
    if server is None:
        yield None
        return
    with server:
        yield server


@pytest.mark.parametrize("suite", SUITES, ids=lambda suite: suite.name)
def test_the_release_s_own_tests_pass_on_the_drop_in(
    suite: Suite, tmp_path: Path, our_sides: ForkServer | None
) -> None:
    sides = run_both(suite, tmp_path / "run", our_sides)
    theirs, ours = sides.theirs, sides.ours
    unlisted, fixed = verdict(suite, theirs, ours)
    if (unlisted, fixed) != ([], []) and sides.kept:
        # a kept baseline never fails the test: the release's side is asked again
        theirs = fresh_baseline(suite, tmp_path / "fresh")
        unlisted, fixed = verdict(suite, theirs, ours)
    # the baseline ran (0.13.0 has 227 tests, all passing on its own module)
    assert sum(outcome == "passed" for outcome in theirs.values()) > 200, theirs
    assert (unlisted, fixed) == ([], []), (
        f"{suite.name}: new divergences {unlisted}; listed but no longer diverging (remove "
        f"them from own_suites/{suite.name}.txt) {fixed}"
    )


def verdict(
    suite: Suite, theirs: dict[str, str], ours: dict[str, str]
) -> tuple[list[str], list[str]]:
    """The tests that pass on the release and not on ours that no listed divergence explains,
    and the listed divergences no such test matches any more."""
    listed = known_divergences(suite)
    diverging = {test for test, outcome in theirs.items()
                 if outcome == "passed" and ours.get(test) != "passed"}  # fmt: skip
    return unexplained(diverging, listed), outlived(diverging, listed)
