#!/usr/bin/env bash
# Run the whole test suite from a fresh clone: creates .venv, installs the package with its dev
# extra, then runs pytest (in parallel on the machine's cores). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e ".[dev]"
# Static checks first: the public API is typed (py.typed) and kept ruff- and mypy-clean.
.venv/bin/ruff check .
.venv/bin/mypy
exec .venv/bin/python -m pytest -n auto -q "$@"
