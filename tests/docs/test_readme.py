"""Every code block of the README runs as written, in order, against a scratch store.

``python`` blocks run in a subprocess; ``bash`` blocks run with ``bash -e`` (any failing line
fails the test), with the package's console scripts first on the PATH. The environment is a
scratch directory: ``HOME`` points there and ``HERMES_HOME``/``SESSIONSTORE_URL`` are unset,
so "the default store" and ``~/.hermes`` are a file in that directory, never the real
``~/.hermes``. Blocks of ``alembic`` commands run in the checkout (where ``alembic.ini`` is,
as the README says); the others in the scratch directory. Two substitutions, both about
where things run rather than what: the example PostgreSQL URL becomes a fresh throw-away
database, and the block of the two top-level commands (``./scripts/run.sh``, which the demo
test covers, and ``./scripts/test.sh``, which is this suite) is not re-run from inside it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from sessionstore.schema import migrate

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
EXAMPLE_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)


def readme_blocks() -> list[tuple[str, str]]:
    return [(match.group(1), match.group(2)) for match in _FENCE.finditer(README.read_text())]


def test_the_readme_has_the_blocks_this_test_runs() -> None:
    languages = [language for language, _ in readme_blocks()]
    assert languages.count("python") >= 2 and languages.count("bash") >= 3
    # ``text`` blocks are program output shown as an example, not something to run.
    assert all(language in ("python", "bash", "text") for language in languages), languages


def test_every_readme_block_runs_as_written(tmp_path: Path, empty_pg_url: str) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {key: value for key, value in os.environ.items()
           if key not in ("HERMES_HOME", "SESSIONSTORE_URL")}  # fmt: skip
    env.update(
        HOME=str(scratch),
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        COLUMNS="100",
    )
    ran = 0
    for number, (language, code) in enumerate(readme_blocks()):
        if "./scripts/test.sh" in code:
            continue
        code = code.replace(EXAMPLE_PG_URL, empty_pg_url)
        if language == "text":
            continue
        if language == "python":
            command = [sys.executable, "-c", code]
            cwd = scratch
        else:
            command = ["bash", "-e", "-o", "pipefail", "-c", code]
            lines = [line for line in code.splitlines() if line.strip()]
            cwd = ROOT if all("alembic " in line for line in lines) else scratch
        result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                                timeout=180, check=False)  # fmt: skip
        assert result.returncode == 0, f"block {number} ({language}):\n{code}\n{result.stderr}"
        ran += 1
    assert ran >= 4
    default_store = scratch / ".hermes" / "state.db"
    assert migrate.status(f"sqlite:///{default_store}").up_to_date
    assert (scratch / "all.jsonl").stat().st_size > 0
    assert (scratch / "restored.db").exists() and (scratch / "new.db").exists()
    assert migrate.status(empty_pg_url).up_to_date  # the db copy and alembic -x url= ran
    assert not list(ROOT.glob("*.db")) and not (ROOT / "all.jsonl").exists()


def test_readme_commands_have_no_placeholders() -> None:
    for language, code in readme_blocks():
        if language == "text":
            continue
        for line in code.splitlines():
            command = line.split("  #")[0]
            assert "..." not in command and "REF" not in command and "<" not in command, line
