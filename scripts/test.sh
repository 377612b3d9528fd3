#!/usr/bin/env bash
# Run the whole test suite from a fresh clone: creates .venv, installs the package with its dev
# extra, then runs pytest (in parallel on the machine's cores). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
install_log="$(mktemp)"
install() {  # quiet unless it fails
  .venv/bin/python -m pip install -q "$@" >"$install_log" 2>&1 || { cat "$install_log"; exit 1; }
}
install --upgrade pip
install -e ".[dev]"
# Static checks first: the public API is typed (py.typed) and kept ruff- and mypy-clean.
.venv/bin/ruff check .
.venv/bin/mypy
# The documentation site builds without a warning (broken links, pages left out of the nav).
site_dir="$(mktemp -d)"
.venv/bin/mkdocs build --strict --quiet --site-dir "$site_dir"
rm -rf "$site_dir"
exec .venv/bin/python -m pytest -n auto -q "$@"
