"""``scripts/inner_loop_coverage.py`` judges a module by its functions, not by its import.

The script itself runs the whole inner loop under coverage, which is not a test (it would
double the time of what it proves); here its judgement is checked on small made-up modules and
coverage data, and its list of modules on the package.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "inner_loop_coverage", REPO / "scripts" / "inner_loop_coverage.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MODULE = '''"""A module."""
LIMIT = 3


def used(x):
    if x:
        return x + LIMIT
    return LIMIT


class Kind:
    def method(self):
        return 1
'''


def test_a_module_counts_when_a_function_of_it_ran_not_when_it_was_imported(
    tmp_path: Path,
) -> None:
    script = _script()
    path = tmp_path / "mod.py"
    path.write_text(MODULE)
    bodies = script.function_body_lines(MODULE)
    assert bodies == {6, 7, 8, 13}
    imported_only = {str(path): {1, 2, 5, 11, 12}}
    assert script.unexercised([path], imported_only) == [str(path)]
    assert script.unexercised([path], {str(path): {1, 2, 5, 13}}) == []
    assert script.unexercised([path], {}) == [str(path)]


def test_modules_without_functions_count_once_imported(tmp_path: Path) -> None:
    script = _script()
    constants, marker = tmp_path / "constants.py", tmp_path / "__init__.py"
    constants.write_text("A = 1\nB = 2\n")
    marker.write_text('"""A package."""\n')
    assert script.unexercised([constants, marker], {str(constants): {1, 2}}) == []
    assert script.unexercised([constants], {}) == [str(constants)]


def test_every_module_of_the_package_is_judged() -> None:
    modules = _script().package_modules()
    names = {str(path.relative_to(REPO)) for path in modules}
    assert "sessionstore/cli/_common.py" in names
    assert "sessionstore/_migrations/versions/0001_hermes_v1.py" in names or any(
        name.startswith("sessionstore/_migrations/versions/") for name in names
    )
    assert len(modules) > 100
