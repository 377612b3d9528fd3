"""The architecture page's Layout section draws the house as it is: every name in it exists.

The drawing is the ``text`` block under ``## Layout``. Each line names a folder (``cli/``), and
after it the files of that folder (``store.py``) or, for modules named without ``.py`` in a
list (``lifecycle, messages, ...``), bare module names of that folder. A name the drawing gives
must be a file or folder of the tree; a renamed module makes this test fail until the drawing
follows it.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_BLOCK = re.compile(r"^## Layout\n.*?^```text\n(.*?)^```", re.M | re.S)
_FOLDER = re.compile(r"^\s{0,2}([\w<>]+)/\s")
_FILE = re.compile(r"\b([a-z_]+\.(?:py|sh))\b")


def layout_lines() -> list[str]:
    match = _BLOCK.search((ROOT / "docs" / "architecture.md").read_text())
    assert match, "docs/architecture.md has no Layout drawing"
    return match.group(1).splitlines()


def drawn_names() -> list[tuple[Path, str]]:
    """(folder, name) for every folder and file the drawing names."""
    names: list[tuple[Path, str]] = []
    folder = ROOT
    for line in layout_lines():
        top = re.match(r"^([\w]+)/", line)
        sub = _FOLDER.match(line) if line.startswith("  ") else None
        if top:
            folder = ROOT / top.group(1)
            names.append((ROOT, top.group(1)))
        elif sub and not line.startswith("   "):
            folder = ROOT / "sessionstore" / sub.group(1)
            names.append((ROOT / "sessionstore", sub.group(1)))
        for file in _FILE.findall(line):
            names.append((folder, file))
    return names


def test_every_file_and_folder_the_layout_names_exists() -> None:
    names = drawn_names()
    assert len(names) > 40, names
    missing = []
    for folder, name in names:
        if name == "<wing>" or "<" in name:
            continue
        candidates = [folder / name, ROOT / "scripts" / name, ROOT / "sessionstore" / name]
        if not any(path.exists() for path in candidates):
            missing.append(f"{folder.relative_to(ROOT)}/{name}")
    assert not missing, missing


def test_the_bare_module_lists_name_modules_of_their_folder() -> None:
    text = " ".join(line.strip() for line in layout_lines())
    lists = {
        "sessions": re.search(r"assembles (.*?);", text),
        "search": re.search(r"hits, context, (.*?) ·", text),
    }
    checked = 0
    for wing, found in lists.items():
        assert found, wing
        for name in re.sub(r"\(.*?\)", "", found.group(1)).replace(" and ", ",").split(","):
            name = name.strip()
            assert (ROOT / "sessionstore" / wing / f"{name}.py").exists(), (wing, name)
            checked += 1
    assert checked >= 12
