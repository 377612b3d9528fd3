"""Per-test CPU seconds: how to find the slow tests on a shared, loaded machine.

``--durations`` reports wall-clock time, which on a loaded machine measures the neighbours as
much as the test. This plugin reports what a test itself costs: the CPU seconds (user + system)
of the test process during its setup, call and teardown, plus those of the programs it started
and waited for. A test that mostly waits (a sleep, a timeout, fsync) shows little CPU and a long
wall time; compare both. Run it as::

    PYTHONPATH=tests/support .venv/bin/python -m pytest -n auto -p cpu_durations \\
        --cpu-durations 40 --durations 40

(``PYTHONPATH`` because ``-p`` loads the plugin before ``conftest.py`` puts ``tests/support`` on
``sys.path``.) It works across xdist workers: each report carries its CPU seconds in
``user_properties`` and the controller adds them up. ``--cpu-durations-json FILE`` writes every
test's seconds (and each file's total) for a closer look.

Run as a program, it writes ``tests/slow_tests.txt`` (the tests the inner loop leaves out,
``tests/conftest.py``) from such a file: every test of the run that took at least the
threshold of CPU seconds (measure the inner loop, ``-m "not slow"``, with the list emptied)::

    PYTHONPATH=tests/support .venv/bin/python -m pytest -n 2 -p cpu_durations \
        --cpu-durations-json /tmp/cpu.json
    .venv/bin/python tests/support/cpu_durations.py /tmp/cpu.json --threshold 0.1

``--add`` keeps the tests already listed (measure the inner loop as it is, then list what new
tests cost too much).
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

PROPERTY = "cpu_s"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("cpu durations")
    group.addoption(
        "--cpu-durations", type=int, default=None, metavar="N",
        help="show the N tests that used the most CPU (0: all)",
    )  # fmt: skip
    group.addoption(
        "--cpu-durations-json", default=None, metavar="FILE",
        help="write every test's CPU seconds to FILE",
    )  # fmt: skip


UNREAPED_CPU: list[Callable[[], float]] = []
"""What long-lived programs started by tests have used so far and this process has not reaped
yet (``os.times`` counts a child only once it is waited for): a helper that keeps such a
program across tests (``real_hermes``'s release servers) appends a function answering it, its
figure dropping back as the program is reaped."""


def _cpu_now() -> float:
    times = os.times()
    unreaped = sum(source() for source in UNREAPED_CPU)
    return times.user + times.system + times.children_user + times.children_system + unreaped


def _measured(item: pytest.Item, phase: str) -> Iterator[None]:
    started = _cpu_now()
    yield
    item.stash.setdefault(_SPENT, {})[phase] = _cpu_now() - started


_SPENT = pytest.StashKey[dict[str, float]]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    yield from _measured(item, "setup")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    yield from _measured(item, "call")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    yield from _measured(item, "teardown")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[Any]:
    outcome = yield
    spent = item.stash.get(_SPENT, {}).get(call.when)
    if spent is not None:
        outcome.get_result().user_properties.append((PROPERTY, spent))


class _Totals:
    def __init__(self) -> None:
        self.by_test: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for name, value in report.user_properties:
            if name == PROPERTY:
                self.by_test[report.nodeid] += float(value)

    def pytest_terminal_summary(self, terminalreporter: Any, config: pytest.Config) -> None:
        by_file: dict[str, float] = defaultdict(float)
        for nodeid, seconds in self.by_test.items():
            by_file[nodeid.split("::")[0]] += seconds
        shown = config.getoption("cpu_durations")
        if shown is not None:
            ranked = sorted(self.by_test.items(), key=lambda pair: -pair[1])
            writer = terminalreporter
            writer.write_sep("=", "CPU seconds per test (process + waited-for children)")
            for nodeid, seconds in ranked if shown == 0 else ranked[:shown]:
                writer.write_line(f"{seconds:8.2f}s {nodeid}")
            writer.write_sep("-", "CPU seconds per file")
            for path, seconds in sorted(by_file.items(), key=lambda pair: -pair[1]):
                writer.write_line(f"{seconds:8.2f}s {path}")
            writer.write_line(f"{sum(self.by_test.values()):8.2f}s in all tests")
        target = config.getoption("cpu_durations_json")
        if target:
            Path(target).write_text(
                json.dumps({"tests": self.by_test, "files": by_file}, indent=1, sort_keys=True)
            )


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist) adds up
        config.pluginmanager.register(_Totals(), "cpu_durations_totals")


SLOW_LIST = Path(__file__).resolve().parents[1] / "slow_tests.txt"
SLOW_LIST_HEADER = """\
# The tests `pytest -m "not slow"` leaves out, beside those marked `slow` in the code: each
# took at least {threshold} CPU seconds (test process + the programs it waited for) in a run
# of the inner loop before it was listed. Written by `python tests/support/cpu_durations.py
# CPU.json --threshold {threshold}` (see that file); tests/conftest.py marks them `slow`.
"""


INNER_LOOP_KEEPS = frozenset({
    # The cheapest test that exercises a module no faster test reaches
    # (scripts/inner_loop_coverage.py found it), kept in the inner loop however it measures.
    # cli/search.py, cli/title.py, hermes/state.py:
    "tests/cli/test_verbs.py::test_search_shows_highlighted_hits_with_context[sqlite]",
    "tests/cli/test_verbs.py::test_title_lineage_resolves_to_newest[postgresql]",
    "tests/hermes/test_state_module.py::test_set_token_counts_sets_the_totals",
    # cli/db.py, sessions/stats.py:
    "tests/cli/test_verbs.py::test_unknown_revision_is_a_usage_error_before_anything[sqlite]",
    "tests/cli/test_verbs.py::test_stats[sqlite]",
})


def write_slow_list(
    measured: Path, threshold: float, target: Path = SLOW_LIST, *, add: bool = False
) -> int:
    """Write the ids of the tests that took at least ``threshold`` CPU seconds (but
    :data:`INNER_LOOP_KEEPS`); with ``add``, beside those already listed (a measurement of
    the inner loop does not run them). How many."""
    by_test: dict[str, float] = json.loads(measured.read_text())["tests"]
    listed: set[str] = set()
    if add and target.exists():
        listed = {line for line in target.read_text().splitlines()
                  if line and not line.startswith("#")}  # fmt: skip
    slow = sorted(listed | {
        nodeid for nodeid, seconds in by_test.items()
        if seconds >= threshold and nodeid not in INNER_LOOP_KEEPS
    })  # fmt: skip
    target.write_text(SLOW_LIST_HEADER.format(threshold=threshold) + "".join(
        f"{nodeid}\n" for nodeid in slow
    ))
    return len(slow)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="write tests/slow_tests.txt")
    parser.add_argument("measured", type=Path, help="a --cpu-durations-json file")
    parser.add_argument("--threshold", type=float, default=0.1, help="CPU seconds")
    parser.add_argument("--add", action="store_true", help="keep the tests already listed")
    options = parser.parse_args()
    count = write_slow_list(options.measured, options.threshold, add=options.add)
    print(f"{count} tests of at least {options.threshold} CPU s in {SLOW_LIST}")
