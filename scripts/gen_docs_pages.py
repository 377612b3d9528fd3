"""The site's generated pages: the CLI reference (from the Typer application) and the changelog;
and the README's table of how long the commands take, shown where a page asks for it.

The CLI reference is, for each command, the ``--help`` text that command prints (plain Click
help, 100 columns), so it cannot drift from the program. The changelog page is the repository's
``CHANGELOG.md``, so the history has one home. Two ways in, one renderer:

- ``mkdocs build`` runs this file as a hook (``mkdocs.yml``: ``hooks:``); ``on_files`` adds both
  pages at every build, so there is no committed copy to go stale;
- ``python scripts/gen_docs_pages.py`` prints the CLI reference (to read it without a build).

The times of the two commands and of the inner loop are measured figures with one home, the
README's block between ``<!-- times -->`` and ``<!-- /times -->``; a page holding the line
``<!-- times -->`` shows that block there (``on_page_markdown``), so re-measuring means
editing one table.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CLI_REFERENCE_PAGE = "cli-reference.md"
CHANGELOG_PAGE = "changelog.md"
WIDTH = 100
INTRO = """\
# CLI reference

Generated from the `sessionstore` command itself at every build of this site
(`scripts/gen_docs_pages.py`): each section is what `sessionstore ... --help` prints.
What every verb shares (`--url`, `--json`, exit codes, hints) is in
[The command line](cli.md).
"""


def _walk(command: Any, parent: Any, path: list[str]) -> Iterator[tuple[list[str], str]]:
    # Typer may carry its own copy of Click: the command's own classes are used, not an import.
    context = command.context_class(command, info_name=path[-1], parent=parent,
                                    max_content_width=WIDTH, terminal_width=WIDTH)  # fmt: skip
    yield path, command.get_help(context)
    if hasattr(command, "list_commands"):
        for name in sorted(command.list_commands(context)):
            sub = command.get_command(context, name)
            if sub is not None and not getattr(sub, "hidden", False):
                yield from _walk(sub, context, [*path, name])


def command_paths() -> list[str]:
    """Every command of the application, as typed (``sessionstore db upgrade``)."""
    return [" ".join(path) for path, _ in _walk(_root_command(), None, ["sessionstore"])]


def _root_command() -> Any:
    import typer

    from sessionstore.cli import app

    return typer.main.get_command(app)


def render_cli_reference() -> str:
    """The reference page as Markdown: one section per command, groups before their verbs."""
    parts = [INTRO]
    for path, help_text in _walk(_root_command(), None, ["sessionstore"]):
        heading = "#" * min(len(path) + 1, 4)
        parts.append(f"{heading} `{' '.join(path)}`\n\n```text\n{help_text.rstrip()}\n```\n")
    return "\n".join(parts)


TIMES_START, TIMES_END = "<!-- times -->", "<!-- /times -->"


def readme_times() -> str:
    """The README's block of measured times (between the markers), links made site-relative."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split(TIMES_START, 1)[1].split(TIMES_END, 1)[0].strip("\n")
    return block.replace("](docs/", "](")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """MkDocs hook: the README's times where a page asks for them."""
    if TIMES_START not in markdown:
        return markdown
    return markdown.replace(TIMES_START, readme_times(), 1)


def on_files(files: Any, config: Any) -> Any:
    """MkDocs hook: add the generated pages to the site."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, CLI_REFERENCE_PAGE, content=render_cli_reference()))
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    files.append(File.generated(config, CHANGELOG_PAGE, content=changelog))
    return files


if __name__ == "__main__":
    sys.stdout.write(render_cli_reference())
