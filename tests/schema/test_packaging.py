"""The migrations ship inside the wheel: an installed package upgrades a store, from code, from
``python -m sessionstore.migrations`` and from ``alembic -c`` with the packaged ini.

The wheel is built from a copy of the package's own files (never in the checkout: a build
writes ``build/`` beside the sources, which parallel test workers would share) and installed,
with its dependencies from the package index, into a fresh virtual environment; every command
then runs from a scratch directory that holds no checkout and no ``alembic.ini``, as a deploy
script would. Without a reachable index the test is skipped locally and fails under
``CI=true``.
"""

from __future__ import annotations

import configparser
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from legacy_v1_v6 import build_legacy_db

from sessionstore.schema.migrate import HEAD_REVISION

# Slow: builds and installs the wheel with pip (the full run only).
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
PACKAGED_INI = REPO / "sessionstore" / "_migrations" / "alembic.ini"


def _run(
    args: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def _build_wheel(tmp_path: Path) -> Path:
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    shutil.copytree(
        REPO / "sessionstore", source / "sessionstore",
        ignore=shutil.ignore_patterns("__pycache__"),
    )  # fmt: skip
    wheels = tmp_path / "wheels"
    # PIP_COMPILE=0: the build's own environment (setuptools, wheel) is not compiled either; it
    # is thrown away after the build. (PIP_NO_COMPILE=1 would mean the opposite to pip.)
    built = _run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(source)],
        cwd=tmp_path, env={**os.environ, "PIP_COMPILE": "0"},
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("sessionstore-*.whl")
    return wheel


def _fresh_venv_with(build_wheel: Callable[[], Path], where: Path) -> Path:
    """A new venv with the wheel ``build_wheel`` makes (the two are made at once, in two
    processes). ``--no-compile``: pip ran with this run's ``PYTHONPYCACHEPREFIX`` and put every
    module's bytecode in that tree, which the deploy's commands (no ``PYTHON*`` variables)
    never read; they compile what they import into the venv, as before. The venv is made
    without pip and this interpreter's pip installs into it (``--python``): the same packages
    land in the same place, without ``ensurepip`` unpacking and compiling a pip the deploy
    never runs (~5 CPU s)."""
    venv = where / "venv"
    making = subprocess.Popen(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=where,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wheel = build_wheel()
    finally:
        _, made = making.communicate(timeout=300)
    assert making.returncode == 0, made
    # Without PYTHONPATH: pip runs in the new venv's interpreter, and a checkout on the path
    # (an A/B run's, with the editable install's sessionstore.egg-info) made it find the
    # package "already installed" and install nothing.
    installed = _run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
                      "install", "-q", "--no-compile", str(wheel)], cwd=where,
                     env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})  # fmt: skip
    if installed.returncode != 0:
        message = f"cannot install the wheel's dependencies: {installed.stderr[-500:]}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return venv / "bin"


@pytest.mark.slow
def test_a_wheel_in_a_fresh_venv_deploys_with_alembic_and_gates_on_db_current(
    tmp_path: Path,
) -> None:
    bin_dir = _fresh_venv_with(lambda: _build_wheel(tmp_path), tmp_path)
    deploy = tmp_path / "deploy"  # no checkout, no alembic.ini here
    deploy.mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))},
        "HERMES_HOME": str(tmp_path / "home"),
    }
    env.pop("SESSIONSTORE_URL", None)
    python, sessionstore = str(bin_dir / "python"), str(bin_dir / "sessionstore")
    migrations = [python, "-m", "sessionstore.migrations"]

    where = _run([python, "-c", "import sessionstore; print(sessionstore.__file__)"],
                 cwd=deploy, env=env)  # fmt: skip
    assert where.stdout.startswith(str(tmp_path / "venv")), where.stdout

    # A Hermes v6 file, named by a plain path, as the CLI takes it.
    hermes_file = tmp_path / "data" / "state.db"
    hermes_file.parent.mkdir()
    build_legacy_db(hermes_file, 6)
    with sqlite3.connect(hermes_file) as conn:
        messages_before = conn.execute("SELECT count(*) FROM messages").fetchone()[0]

    gate = [sessionstore, "--url", str(hermes_file), "db", "current", "--check"]
    before = _run(gate, cwd=deploy, env=env)
    assert before.returncode == 1, before.stdout + before.stderr
    assert "not current" in before.stdout

    upgraded = _run([*migrations, "-x", f"url={hermes_file}", "upgrade", "head"],
                    cwd=deploy, env=env)  # fmt: skip
    assert upgraded.returncode == 0, upgraded.stderr
    assert "Running upgrade" in upgraded.stderr  # the packaged ini's logging
    after = _run(gate, cwd=deploy, env=env)
    assert after.returncode == 0, after.stdout + after.stderr
    assert after.stdout.strip().endswith(": current")
    with sqlite3.connect(hermes_file) as conn:
        assert conn.execute("SELECT count(*) FROM messages").fetchone()[0] == messages_before
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(31,)]

    # `alembic -c` with the packaged ini: current, history, downgrade, upgrade again.
    config_path = _run([*migrations, "--config-path"], cwd=deploy, env=env).stdout.strip()
    assert Path(config_path).is_file() and Path(config_path).parent.parent.name == "sessionstore"
    alembic = [str(bin_dir / "alembic"), "-c", config_path, "-x", f"url=sqlite:///{hermes_file}"]
    current = _run([*alembic, "current"], cwd=deploy, env=env)
    assert current.returncode == 0 and f"{HEAD_REVISION} (head)" in current.stdout, current
    history = _run([*alembic, "history"], cwd=deploy, env=env)
    assert history.returncode == 0 and "0001, Hermes schema v1" in history.stdout, history
    down = _run([*alembic, "downgrade", "0020"], cwd=deploy, env=env)
    assert down.returncode == 0, down.stderr
    assert _run(gate, cwd=deploy, env=env).returncode == 1
    assert _run([*alembic, "upgrade", "head"], cwd=deploy, env=env).returncode == 0
    assert _run(gate, cwd=deploy, env=env).returncode == 0

    # A hand-written ini of two lines (no logging sections) works too.
    handwritten = deploy / "mine.ini"
    handwritten.write_text("[alembic]\nscript_location = sessionstore:_migrations\n")
    fresh = tmp_path / "data" / "fresh.db"
    made = _run([str(bin_dir / "alembic"), "-c", str(handwritten), "-x", f"url={fresh}",
                 "upgrade", "head"], cwd=deploy, env=env)  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert "Running upgrade" in made.stderr
    with sqlite3.connect(fresh) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(31,)]

    # Refusals are one FAILED line, not a traceback.
    for arguments in (["upgrade", "9999"], ["-x", "url=mysql://db/x", "current"]):
        refused = _run([*migrations, *arguments], cwd=deploy, env=env)
        assert refused.returncode != 0
        said = refused.stdout + refused.stderr  # Alembic prints FAILED on stdout
        assert "FAILED:" in said and "Traceback" not in said, said


def test_the_checkout_ini_is_the_packaged_ini_but_for_where_the_scripts_are() -> None:
    def sections(path: Path) -> dict[str, dict[str, str]]:
        parser = configparser.ConfigParser(interpolation=None)
        parser.read(path)
        return {name: dict(parser[name]) for name in parser.sections()}

    checkout, packaged = sections(REPO / "alembic.ini"), sections(PACKAGED_INI)
    assert checkout["alembic"].pop("script_location") == "%(here)s/sessionstore/_migrations"
    assert packaged["alembic"].pop("script_location") == "sessionstore:_migrations"
    assert checkout == packaged
