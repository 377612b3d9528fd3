"""The migrations ship inside the wheel: an installed (non-editable) package upgrades a store.

Builds the wheel, installs it (without dependencies, which this environment already has) into
a private directory, and runs the upgrade from there in a subprocess whose import path holds
that directory and no checkout.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_an_installed_wheel_upgrades_a_store_without_a_checkout(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(REPO)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = wheels.glob("sessionstore-*.whl")
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
         str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )  # fmt: skip
    database = tmp_path / "state.db"
    script = (
        "import sessionstore, sys\n"
        "from sessionstore import migrate\n"
        f"assert sessionstore.__file__.startswith({str(target)!r}), sessionstore.__file__\n"
        f"migrate.upgrade('sqlite:///{database}')\n"
        f"print(migrate.current('sqlite:///{database}'))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    result = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(target)!r})\n" + script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    from sessionstore.schema.migrate import HEAD_REVISION

    assert result.stdout.strip() == HEAD_REVISION
    with sqlite3.connect(database) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(17,)]
        names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert {"sessions", "messages", "messages_fts", "messages_fts_insert"} <= names
