# Sourced by run.sh and test.sh: the checkout's .venv, with the package installed into it.
#
# pip runs only when something that decides the install changed since the last one that
# succeeded: pyproject.toml (dependencies, extras, packages), the extras asked for, or the
# Python. The code itself needs no reinstall (the install is editable). While pip runs, each
# step and each package it collects is printed on stderr; its full log only when it fails.
ensure_venv() {
  local spec="$1"  # what to install: "." or ".[dev]"
  local python="${PYTHON:-python3}"
  if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv with $("$python" --version 2>&1)" >&2
    "$python" -m venv .venv
  fi
  local stamps=.venv/.sessionstore-installed
  local wanted
  wanted="$(stamp "$spec")"
  if [ -f "$stamps" ] && grep -qxF "$wanted" "$stamps" \
      && .venv/bin/python -c "import sessionstore" 2>/dev/null; then
    echo "setup: .venv is up to date for $spec (pyproject.toml unchanged); nothing to install" >&2
    return 0
  fi
  echo "setup: installing sessionstore ($spec) into .venv; the first time takes a minute or so" >&2
  pip_step "upgrading pip" --upgrade pip
  pip_step "installing $spec and its dependencies" -e "$spec"
  # ".[dev]" holds everything "." needs: both are up to date now.
  { stamp "$spec"; [ "$spec" = "." ] || stamp "."; } >>"$stamps"
  echo "setup: installed" >&2
}

stamp() {  # one line naming what decides an install of "$1"
  { cat pyproject.toml; echo "$1"; .venv/bin/python --version 2>&1; } | sha256sum | cut -d' ' -f1
}

pip_step() {  # pip_step DESCRIPTION PIP-ARGUMENTS...: pip, showing what it collects as it goes
  local description="$1"
  shift
  echo "setup: $description ..." >&2
  local log status
  log="$(mktemp)"
  set +e
  .venv/bin/python -m pip install --progress-bar off "$@" 2>&1 | tee "$log" \
    | grep --line-buffered -E '^(Collecting|Installing collected|Successfully installed) ' \
    | sed -u 's/^/  /' >&2
  status="${PIPESTATUS[0]}"
  set -e
  if [ "$status" -ne 0 ]; then
    cat "$log" >&2
    rm -f "$log"
    exit 1
  fi
  rm -f "$log"
}
