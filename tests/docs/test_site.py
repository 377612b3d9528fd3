"""The docs site builds with ``mkdocs build --strict``, and its generated pages are whole.

Strict mode turns every warning into a failure: a broken link or anchor, a page under
``docs/`` that the nav leaves out (``validation: omitted_files: warn``). The CLI reference is
generated at build from the Typer application (``scripts/gen_docs_pages.py``, an MkDocs hook),
so it is up to date by construction; this test checks that the hook ran and that the page has a
section for every command the application has.
"""

from __future__ import annotations

import html
import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_docs_pages", ROOT / "scripts" / "gen_docs_pages.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_site_builds_strict_with_a_section_for_every_command(tmp_path: Path) -> None:
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    reference = html.unescape((site / "cli-reference" / "index.html").read_text())
    commands = _generator().command_paths()
    assert "sessionstore db upgrade" in commands and len(commands) >= 15, commands
    for command in commands:
        assert f"Usage: {command} " in reference, command
    changelog = (site / "changelog" / "index.html").read_text()
    assert "Measurement history" in changelog
    for page in (ROOT / "docs").rglob("*.md"):
        assert (
            site / page.relative_to(ROOT / "docs").with_suffix("") / "index.html"
        ).exists() or page.name == "index.md", page


def test_the_readme_links_resolve() -> None:
    readme = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    assert any(target.startswith("docs/") for target in targets)
    for target in targets:
        assert (ROOT / target).exists(), target


def test_the_readme_fits_on_two_screens() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) <= 90


def test_every_name_in_the_readme_layout_exists() -> None:
    """The README's Layout draws the house: each wing it names is a folder of the package and
    each file it names lives in the wing on whose lines it stands."""
    readme = (ROOT / "README.md").read_text()
    drawing = readme.split("## Layout", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    lines = drawing.splitlines()
    assert lines[0] == "sessionstore/"
    wing = None
    named: list[Path] = []
    for line in lines[1:]:
        heading = re.match(r"  (\w+)/", line)
        if heading:
            wing = ROOT / "sessionstore" / heading.group(1)
            named.append(wing)
        assert wing is not None, line
        named += [wing / name for name in re.findall(r"\b(\w+\.py|\w+/)(?=[\s,)]|$)", line)
                  if not heading or name != heading.group(0).strip()]
    wings = {path.name for path in named if path.parent == ROOT / "sessionstore"}
    assert {"api", "sessions", "storage", "search", "dialects", "_migrations"} <= wings
    assert len(named) > 30
    assert [str(path.relative_to(ROOT)) for path in named if not path.exists()] == []
