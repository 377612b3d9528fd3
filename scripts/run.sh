#!/usr/bin/env bash
# The main job on the embedded default: install into .venv, create or upgrade the default SQLite
# store ($SESSIONSTORE_URL, else $HERMES_HOME/state.db, else ~/.hermes/state.db) and show it working.
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
install -e .
exec .venv/bin/python scripts/demo.py "$@"
