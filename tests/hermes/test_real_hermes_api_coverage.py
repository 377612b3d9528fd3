"""Every public method of the real releases' ``SessionDB``, with every parameter it takes, is
on our drop-in: Hermes's code calls them, and a missing one is an ``AttributeError`` or a
``TypeError`` where Hermes's agent swallows a failed write and stops persisting a session.

The signatures are read from each release in a subprocess (its own ``hermes_state``, never
beside ours in one interpreter) and compared by name and keyword: a parameter we accept by
``**kwargs`` counts as accepted. Upstream's releases are covered whole. The forks' SessionDB
has grown far beyond its schema (iot 0.22.2: 235 public methods); what we do not provide yet is
listed, with why, in ``tests/hermes/api_gaps/<fork>.txt``, and the list may only shrink: a gap
that is not listed fails, and so does a listed one that is gone.
"""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest
from real_hermes import FORK_RELEASES, fork_site_packages, hermes_root

import sessionstore.hermes.state as ours

pytestmark = pytest.mark.slow

_SIGNATURES = """
import inspect, json, sys
sys.path.insert(0, sys.argv[1])
import hermes_state
out = {}
for name, member in inspect.getmembers(hermes_state.SessionDB):
    if name.startswith("_") or not callable(member):
        continue
    try:
        parameters = inspect.signature(member).parameters.values()
    except (TypeError, ValueError):
        continue
    out[name] = [p.name for p in parameters
                 if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
print(json.dumps(out))
"""


GAPS = Path(__file__).with_name("api_gaps")


def _their_methods(release: str, home: Path) -> dict[str, list[str]]:
    if release in FORK_RELEASES:  # its own venv: a fork never meets sessionstore
        root = fork_site_packages(release)
        python = str(root.parents[2] / "bin" / "python")
    else:
        root, python = hermes_root(release), sys.executable
    # In the home, not the checkout: ``-c`` puts the working directory first on the path, and a
    # fork's interpreter must not find sessionstore there.
    completed = subprocess.run(
        [python, "-c", _SIGNATURES, str(root)],
        capture_output=True, text=True, timeout=120, check=True, cwd=home,
        env={"HERMES_HOME": str(home), "HOME": str(home), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    methods: dict[str, list[str]] = json.loads(completed.stdout)
    return methods


def _missing(theirs: dict[str, list[str]]) -> set[str]:
    """``name`` for a method we lack, ``name(parameter)`` for a parameter we do not take."""
    gaps: set[str] = set()
    for name, parameters in sorted(theirs.items()):
        member = getattr(ours.SessionDB, name, None)
        if member is None:
            gaps.add(name)
            continue
        accepted = inspect.signature(member).parameters
        if any(p.kind is p.VAR_KEYWORD for p in accepted.values()):
            continue
        gaps.update(f"{name}({p})" for p in parameters if p not in accepted)
    return gaps


def _listed(fork: str) -> dict[str, str]:
    listed: dict[str, str] = {}
    for line in (GAPS / f"{fork}.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            gap, separator, reason = line.partition(" # ")
            assert separator and reason.strip(), f"{fork}.txt: a gap without its reason: {line}"
            listed[gap.strip()] = reason.strip()
    return listed


@pytest.mark.parametrize("release", ["0.18.0", "0.19.0"])
def test_every_public_method_of_the_release_is_on_the_drop_in(
    release: str, tmp_path: Path
) -> None:
    assert sorted(_missing(_their_methods(release, tmp_path))) == []


@pytest.mark.parametrize("fork", ["iot-0.22.2", "axisrow-0.20.1"])
def test_the_forks_methods_we_lack_are_the_listed_ones(fork: str, tmp_path: Path) -> None:
    missing = _missing(_their_methods(fork, tmp_path))
    listed = _listed(fork)
    assert (sorted(missing - listed.keys()), sorted(listed.keys() - missing)) == ([], []), (
        "(new gaps, listed gaps that are gone: remove them from the list)"
    )
