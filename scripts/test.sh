#!/usr/bin/env bash
# Run the whole test suite from a fresh clone: creates .venv, installs the package with its dev
# extra (only when pyproject.toml changed), then runs pytest (in parallel on the machine's
# cores, and one worker more). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/venv.sh
source scripts/venv.sh
ensure_venv ".[dev]"
# Static checks first: the public API is typed (py.typed) and kept ruff- and mypy-clean.
.venv/bin/ruff check .
# mypy's cache lives beside the tests' other caches, not in the checkout: a fresh clone (CI's)
# would otherwise check every module from nothing (~8 CPU s on one core while the other idles,
# before any test starts). mypy checks each cached module against its source's hash, so a
# cache written by another checkout or commit only saves work, never hides an error.
.venv/bin/mypy --cache-dir "${XDG_CACHE_HOME:-$HOME/.cache}/sessionstore-tests/mypy"
# The documentation site builds without a warning (broken links, pages left out of the nav).
site_dir="$(mktemp -d)"
.venv/bin/mkdocs build --strict --quiet --site-dir "$site_dir"
rm -rf "$site_dir"
# One worker more than the machine has cores: about a fifth of a worker's time is spent waiting
# (scenarios that run for a set time, such as a lock held for a second; programs it started; the
# PostgreSQL server; test files are on the RAM disk, so not fsync), which the extra worker fills. On 2
# cores, 2026-12-06, a fresh clone of 98ec7ff: 2 workers 7 min 29 s, 3 workers 6 min 31 s, 4
# workers 6 min 25 s for ~0.4 CPU min more than 3 (each worker builds its own module fixtures).
# worksteal: a worker that runs out of tests takes half of another's pending ones, instead of
# idling while the other works through a queue of long ones (real Hermes, the thousand forks).
workers=$(( $(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1) + 1 ))
exec .venv/bin/python -m pytest -n "$workers" --dist worksteal -q "$@"
