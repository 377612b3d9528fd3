"""Alembic's command line on the packaged migrations (``python -m sessionstore.migrations``,
``alembic -c``), in this process: what it refuses, it refuses as the CLI does.

The wheel installed into a fresh venv is ``test_packaging.py`` (slow); here the same command
line runs through Alembic's own ``CommandLine`` with the packaged ini, its logging left alone
(``configure_logger``), so nothing outlives the test.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from alembic.config import CommandLine, Config

from sessionstore.migrations import PROG, config_path
from sessionstore.schema import migrate
from sessionstore.schema.migrate import HEAD_REVISION


def alembic(*arguments: str) -> None:
    """Run ``python -m sessionstore.migrations ARGUMENTS`` as its ``main`` does."""
    command_line = CommandLine(prog=PROG)
    options = command_line.parser.parse_args(list(arguments))
    config = Config(file_=str(config_path()), cmd_opts=options, stdout=sys.stdout)
    config.attributes["configure_logger"] = False
    command_line.run_cmd(config, options)


def refusal(capsys: pytest.CaptureFixture[str], *arguments: str) -> str:
    """The one ``FAILED:`` line of a refused command (Alembic exits non-zero)."""
    with pytest.raises(SystemExit) as exited:
        alembic(*arguments)
    assert exited.value.code not in (0, None)
    said = capsys.readouterr()
    lines = [line for line in (said.out + said.err).splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("FAILED: "), lines
    return lines[0]


def test_no_directory_is_created_for_a_store_that_is_not_the_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As the CLI's ``--url`` (issue 27): a mistyped directory leaves nothing behind."""
    missing = tmp_path / "no" / "such" / "dir" / "state.db"
    for command in (["upgrade", "head"], ["stamp", "head"]):
        line = refusal(capsys, "-x", f"url={missing}", *command)
        assert f"the directory {missing.parent} does not exist" in line, command
    assert not (tmp_path / "no").exists()


def test_a_command_that_only_reads_creates_no_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "absent.db"
    assert f"no session store at {missing}" in refusal(capsys, "-x", f"url={missing}", "current")
    assert not missing.exists()


def test_a_plain_path_in_a_directory_that_exists_is_created_at_head(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "deployed.db"
    alembic("-x", f"url={store}", "upgrade", "head")
    assert migrate.status(f"sqlite:///{store}").up_to_date
    capsys.readouterr()
    alembic("-x", f"url={store}", "current")
    assert f"{HEAD_REVISION} (head)" in capsys.readouterr().out


def test_the_packaged_ini_is_read_unless_c_names_another(tmp_path: Path) -> None:
    """``python -m sessionstore.migrations`` as a deploy runs it, in a directory of its own
    with an ``alembic.ini`` of some other project and ``ALEMBIC_CONFIG`` set: neither is read
    (before the fix, Alembic 1.13 put its default, ``alembic.ini``, in the parsed options and
    that file was used: "No config file 'alembic.ini' found, or file has no '[alembic]'
    section"). A ``-c`` still names the file to read."""
    foreign = tmp_path / "alembic.ini"
    foreign.write_text("[alembic]\nscript_location = elsewhere\n")
    store = tmp_path / "deployed.db"
    environment = {**os.environ, "ALEMBIC_CONFIG": str(tmp_path / "absent.ini")}

    def run(*arguments: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "sessionstore.migrations", *arguments],
            cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=120,
        )

    upgraded = run("-x", f"url={store}", "upgrade", "head")
    assert upgraded.returncode == 0, upgraded.stdout + upgraded.stderr
    assert migrate.status(f"sqlite:///{store}").up_to_date
    named = run("-c", str(foreign), "-x", f"url={store}", "current")
    assert named.returncode != 0
    assert "elsewhere" in named.stdout + named.stderr
