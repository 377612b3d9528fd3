#!/usr/bin/env bash
# The main job on the embedded default: install into .venv (only when pyproject.toml changed),
# create or upgrade the default SQLite store ($SESSIONSTORE_URL, else $HERMES_HOME/state.db,
# else ~/.hermes/state.db) and show it working.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/venv.sh
source scripts/venv.sh
ensure_venv "."
exec .venv/bin/python scripts/demo.py "$@"
