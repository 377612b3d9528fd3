"""Every code block of the README and of the docs site runs as written, page by page.

Each document (``README.md``, then ``docs/**/*.md``) runs its blocks in order against a fresh
scratch directory, so a page may build on its own earlier blocks but never on another page's.
``python`` blocks run in a subprocess; ``bash`` blocks run with ``bash -e -o pipefail`` (any
failing line fails the test), with the package's console scripts first on the PATH. ``HOME``
is the scratch directory and ``HERMES_HOME``/``SESSIONSTORE_URL`` are unset, so "the default
store" and ``~/.hermes`` are a file in that directory, never the real ``~/.hermes``. Blocks of
``alembic`` commands run in the checkout (where ``alembic.ini`` is, as the docs say); the
others in the scratch directory. ``text`` blocks are program output or drawings, not run.

Three substitutions, all about where or how long things run rather than what:

- the example PostgreSQL URL becomes a fresh throw-away database;
- the block of the two top-level commands (``./scripts/run.sh``, which the demo test covers,
  and ``./scripts/test.sh``, which is this suite) is not re-run from inside it;
- a block of measurements (every line runs ``.venv/bin/python scripts/<bench or stress>.py``,
  minutes each) is checked, not run: each script must exist and accept every option the line
  gives it (its ``--help`` names them).

And one about how the programs start: a ``python`` block and each ``sessionstore``,
``alembic``, ``python -c`` or ``python -m`` command are forked from one process that imported
once what they import (the package, Alembic, SQLAlchemy, Rich, Pydantic:
``tests/support/docs_programs.py``; the block's or command's own arguments, streams, directory,
environment and exit status; ~50 interpreter start-ups and their imports a run saved). Other
tests start the console scripts and a fresh interpreter themselves.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import docs_programs
import pytest

from sessionstore.schema import migrate

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
LANGUAGES = ("python", "bash", "text")
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
_MEASUREMENT = re.compile(r"^\.venv/bin/python (scripts/\w+\.py|-m pytest)\b(.*)$")


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(document: Path) -> list[tuple[str, str]]:
    return [(match.group(1), match.group(2)) for match in _FENCE.finditer(document.read_text())]


def _name(document: Path) -> str:
    return str(document.relative_to(ROOT))


def _lines(code: str) -> list[str]:
    return [line for line in code.splitlines() if line.strip()]


def _is_measurement(code: str) -> bool:
    return all(_MEASUREMENT.match(line) for line in _lines(code))


# What some pages leave behind, checked after their blocks ran (relative to the scratch dir).
_LEFT_BEHIND = {
    "docs/getting-started.md": ["all.jsonl", "restored.db"],
    "docs/migrations.md": ["new.db", "other.db", "migrated.db", "deployed.db"],
    "docs/adopting.md": ["hermes-v1.db"],
}


def test_the_docs_have_the_blocks_this_test_runs() -> None:
    counts = {language: 0 for language in LANGUAGES}
    for document in documents():
        for language, _ in blocks(document):
            assert language in LANGUAGES, (_name(document), language)
            counts[language] += 1
    assert counts["python"] >= 12 and counts["bash"] >= 6, counts
    assert [language for language, _ in blocks(ROOT / "README.md")] == ["bash", "python", "text"]


def test_no_indented_code_blocks() -> None:
    """An indented block would be code that this test never sees: fences only."""
    for document in documents():
        outside_fences = _FENCE.sub("", document.read_text())
        previous = ""
        for line in outside_fences.splitlines():
            if line.startswith("    ") and not previous.strip():
                pytest.fail(f"{_name(document)}: indented code block at {line!r}")
            previous = line


@pytest.fixture(scope="module")
def program_server() -> Iterator[Callable[[], docs_programs.ProgramServer | None]]:
    """The docs' program server, started at the first page that runs a block (None where
    programs cannot be forked: each then starts its own interpreter, as a reader's do)."""
    started: list[docs_programs.ProgramServer] = []

    def server() -> docs_programs.ProgramServer | None:
        if not started and docs_programs.available():
            started.append(docs_programs.ProgramServer())
        return started[0] if started else None

    yield server
    for each in started:
        each.close()


@pytest.mark.slow
@pytest.mark.parametrize("document", documents(), ids=_name)
def test_every_block_runs_as_written(
    document: Path, tmp_path: Path, request: pytest.FixtureRequest,
    program_server: Callable[[], docs_programs.ProgramServer | None],
) -> None:  # fmt: skip
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    runnable = [
        language != "text" and "./scripts/test.sh" not in code and not _is_measurement(code)
        for language, code in blocks(document)
    ]  # fmt: skip
    server = program_server() if any(runnable) else None
    env = {key: value for key, value in os.environ.items()
           if key not in ("HERMES_HOME", "SESSIONSTORE_URL")}  # fmt: skip
    shims = f"{server.bin_dir}{os.pathsep}" if server is not None else ""
    env.update(
        HOME=str(scratch),
        PATH=f"{shims}{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        COLUMNS="100",
    )
    pg_url = None
    for number, (language, code) in enumerate(blocks(document)):
        if language == "text" or "./scripts/test.sh" in code:
            continue
        if _is_measurement(code):
            _check_measurements(code)
            continue
        if EXAMPLE_PG_URL in code:
            pg_url = pg_url or str(request.getfixturevalue("empty_pg_url"))
            code = code.replace(EXAMPLE_PG_URL, pg_url)
        if language == "python":
            command = (
                [sys.executable, "-c", code] if server is None else server.python_command(code)
            )
            cwd = scratch
        else:
            command = ["bash", "-e", "-o", "pipefail", "-c", code]
            cwd = ROOT if all("alembic " in line for line in _lines(code)) else scratch
        result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                                timeout=180, check=False)  # fmt: skip
        assert result.returncode == 0, (
            f"{_name(document)} block {number} ({language}):\n{code}\n{result.stderr}"
        )
    if (scratch / ".hermes" / "state.db").exists():
        assert migrate.status(f"sqlite:///{scratch / '.hermes' / 'state.db'}").up_to_date
    for name in _LEFT_BEHIND.get(_name(document), []):
        assert (scratch / name).exists(), name
    if pg_url is not None:
        assert migrate.status(pg_url).up_to_date
    assert not list(ROOT.glob("*.db")) and not (ROOT / "all.jsonl").exists()


def _measurements(code: str) -> Iterator[tuple[str, str]]:
    """Each line of a measurement block as (the script, or ``-m pytest``; its arguments)."""
    for line in _lines(code):
        match = _MEASUREMENT.match(line)
        assert match, line
        yield match.group(1), match.group(2).split("#")[0]


def _check_measurements(code: str) -> None:
    for script, arguments in _measurements(code):
        if script == "-m pytest":
            # A measurement through one test: the test must still exist where the page says.
            for word in shlex.split(arguments):
                if "::" in word or word.endswith(".py"):
                    path, _, name = word.partition("::")
                    assert (ROOT / path).is_file(), word
                    assert name.split("[")[0] in (ROOT / path).read_text(), word
            continue
        assert (ROOT / script).is_file(), script
        usage = _usage(script)
        for word in shlex.split(arguments):
            if word.startswith("--"):
                assert word.split("=")[0] in usage, (script, arguments, word)


def _usage(script: str) -> str:
    """``script --help``'s output (the scripts the measurement blocks name, asked once a run)."""
    return _usages()[script]


_HELP_ALL = """
import contextlib, io, json, os, runpy, sys
usages = {}
for script in sys.argv[1:]:
    sys.argv = [script, "--help"]
    sys.path[0] = os.path.dirname(os.path.abspath(script))  # as `python script` puts it
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise
    usages[script] = out.getvalue()
print(json.dumps(usages))
"""
"""Each script's ``--help`` (run as ``__main__`` with that ``sys.argv``, exit status 0), in one
interpreter: the measurement blocks name 16 scripts, and a new interpreter for each imported
sessionstore and SQLAlchemy again (0.3-0.4 CPU s each, ~4.5 a run)."""


@functools.cache
def _usages() -> dict[str, str]:
    scripts = sorted({
        script
        for document in documents() for language, code in blocks(document)
        if language == "bash" and _is_measurement(code)
        for script, _ in _measurements(code)
        if script != "-m pytest" and (ROOT / script).is_file()
    })  # fmt: skip
    done = subprocess.run([sys.executable, "-c", _HELP_ALL, *scripts], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=True)  # fmt: skip
    usages: dict[str, str] = json.loads(done.stdout)
    return usages


def test_shell_commands_have_no_placeholders() -> None:
    for document in documents():
        for language, code in blocks(document):
            if language != "bash":
                continue
            for line in code.splitlines():
                command = line.split("  #")[0]
                assert "..." not in command and "REF" not in command, (_name(document), line)
                assert "<" not in command, (_name(document), line)
