"""A small tmpfs for the full-filesystem tests, mounted where this machine allows it.

Mounting needs root (or a user namespace) and a ``mount`` that may do it; elsewhere the test
that asked is skipped, saying why.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def tiny_tmpfs(directory: Path, size: str) -> Iterator[Path]:
    """``directory`` (created) with a tmpfs of ``size`` (``4m``) mounted on it, unmounted
    after."""
    directory.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command here: the full-filesystem test needs a small tmpfs")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (root and a permitted mount are needed): "
                    f"{mounted.stderr.strip()}")
    try:
        yield directory
    finally:
        subprocess.run(["umount", str(directory)], check=False)
        if os.path.ismount(directory):
            subprocess.run(["umount", "-l", str(directory)], check=False)
