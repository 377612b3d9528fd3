"""One side of a Hermes release's own suite: its pytest, run in the release tree.

``python own_suite_side.py PYTEST_ARGS...`` (in the tree, with the side's environment) runs the
side as ``python -m pytest`` would, but for the collections at exit (:func:`main`).
:func:`forked` runs the same side in a process forked from a ``prefork.ForkServer`` that
imported this module, pytest, sessionstore, SQLAlchemy and Alembic once and built one new store
(:func:`prime`): what every side of ours would import and run first. Such a process takes the
side's working directory and environment as a new interpreter started with them would have
them; what an import made of the environment is not in the server: nothing it imports reads
``HOME`` or ``HERMES_HOME`` when imported (``sessionstore.hermes.state`` does, and is imported
by the side, after its environment is set), and its own are a scratch folder's.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import pytest

try:
    from _pytest.unraisableexception import gc_collect_iterations_key
except ImportError:  # an older pytest collects once, or not at all
    gc_collect_iterations_key = None

IMPORTS = (
    "own_suite_side", "_pytest.junitxml", "sessionstore", "sessionstore.schema.migrate",
    "alembic.runtime.migration",
)  # fmt: skip
"""What a fork server of our sides imports once (``prefork.ForkServer``'s imports)."""


class NoCollectionsAtExit:
    """pytest collects the whole heap five times after the last test, for warnings of objects
    whose finalizers raised (0.1-0.45 CPU s a side); the junit report is written by then."""

    @staticmethod
    def pytest_configure(config: pytest.Config) -> None:
        if gc_collect_iterations_key is not None:
            config.stash[gc_collect_iterations_key] = 0


def main(*args: str) -> None:
    """The side's pytest in the working directory, as ``python -m pytest ARGS`` puts it."""
    sys.path[0] = os.getcwd()
    sys.exit(pytest.main(list(args), plugins=[NoCollectionsAtExit()]))


def prime() -> None:
    """The server's step before its forks: one new store built and closed, so that a side's
    new stores are all built from the chain's result kept in the process (as every new store
    after a process's first is), not its first by the chain (0.3-0.7 CPU s a side)."""
    from sessionstore import SessionDB

    with tempfile.TemporaryDirectory() as scratch:
        SessionDB(url=f"sqlite:///{Path(scratch) / 'primer.db'}").close()


def forked(cwd: str, environment: str, *args: str) -> None:
    """:func:`main` in a forked process: first the working directory and the environment (a
    JSON file of it) a new interpreter would have been started with, and what the interpreter
    reads of it at start-up (where compiled files go)."""
    os.chdir(cwd)
    given: dict[str, str] = json.loads(Path(environment).read_text())
    os.environ.clear()
    os.environ.update(given)
    sys.dont_write_bytecode = bool(given.get("PYTHONDONTWRITEBYTECODE"))
    sys.pycache_prefix = given.get("PYTHONPYCACHEPREFIX") or None
    tempfile.tempdir = None  # found again from this environment
    main(*args)


if __name__ == "__main__":
    main(*sys.argv[1:])
