"""The house's floors, read from the source: no import cycle, no upward import.

The module import graph of ``sessionstore/`` is built with ``ast`` from every ``.py`` file:
every ``import`` and ``from ... import`` wherever it stands (module level, inside a function
for a lazy import, under ``if TYPE_CHECKING:``) plus ``importlib.import_module`` of a literal
name. TYPE_CHECKING-only imports count: a type named in a signature ties the modules as much
as a call does (mypy reads it, and a runtime use is one edit away), so a lower wing may not
even name a higher wing's types. An import of ``a.b.c`` is an edge to ``a.b.c`` only (Python
also runs the ``__init__`` of ``a`` and ``a.b`` first; those stay light, and
``sessionstore/__init__.py`` is the package's face).

The wings, top to bottom; a module may import its own wing and the wings below it::

    cli -> face -> hermes -> api -> ops -> sessions -> schema -> search -> storage -> sql
        -> dialects -> errors

``face`` is ``sessionstore/__init__.py`` (``SessionDB``, ``Store``, the errors) and the old
top-level module paths kept as aliases (``sessionstore.hermes_state``, ``.migrate``, ...);
``__main__`` and ``migrations`` (``python -m sessionstore.migrations``, Alembic's command
line) belong to the CLI. ``schema`` sits above ``search`` (the order first drawn had them the
other way): the schema names the search objects (the models hide them from
autogenerate) and the migrations' repair builds the search index's head layout, while search
needs nothing of the schema.

``_migrations`` is migration code, outside the floors: no runtime module imports it; its
``env.py`` (run by Alembic) may use the runtime; the revisions (``versions/*``) and the frozen
helpers beside them import only the standard library, ``alembic``, ``sqlalchemy`` and frozen
helpers (``sessionstore._migrations.*``, never ``env``): an old revision must build the same
objects whatever the package later does.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

PACKAGE = "sessionstore"
SOURCE = Path(__file__).resolve().parents[1] / PACKAGE
WINGS = (
    "cli", "face", "hermes", "api", "ops", "sessions", "schema", "search", "storage", "sql",
    "dialects", "errors",
)  # fmt: skip
MIGRATIONS = f"{PACKAGE}._migrations"
ALIASES = ("hermes_state", "migrate", "repository", "stats", "trajectory", "transfer")
"""Top-level modules that are only the old paths of moved modules (the face)."""
ENTRY_POINTS = ("__main__", "migrations")
"""Top-level modules that are command lines (``python -m ...``): the CLI's wing."""


@cache
def modules() -> dict[str, tuple[Path, bool]]:
    """Every module of the package: dotted name -> (file, is a package's ``__init__``)."""
    found = {}
    for path in sorted(SOURCE.rglob("*.py")):
        parts = list(path.relative_to(SOURCE.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _target(name: str) -> str | None:
    """The package module ``name`` is, or lives in (``a.b.C`` -> ``a.b``)."""
    while name and name not in modules():
        name = name.rpartition(".")[0]
    return name or None


def imported_names(module: str) -> Iterator[tuple[str, int]]:
    """(absolute imported name, line) for every import in ``module``'s source."""
    path, is_package = modules()[module]
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:
                # ``from . import module`` imports that module; ``from .m import name``, m.
                submodule = f"{source}.{alias.name}"
                yield (submodule if submodule in modules() else source), node.lineno
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.args[0].value, node.lineno


@cache
def graph() -> dict[str, dict[str, int]]:
    """module -> {package module it imports: first line}."""
    edges: dict[str, dict[str, int]] = {}
    for module in modules():
        targets: dict[str, int] = {}
        for name, line in imported_names(module):
            if name == PACKAGE or name.startswith(PACKAGE + "."):
                target = _target(name)
                if target is not None and target != module:
                    targets.setdefault(target, line)
        edges[module] = targets
    return edges


def wing(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1 or parts[1] in ALIASES:
        return "face"
    if parts[1] in ENTRY_POINTS:
        return "cli"
    return parts[1]


def cycles() -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph()[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(modules())))
    try:
        for node in graph():
            if node not in index:
                visit(node)
    finally:
        sys.setrecursionlimit(limit)
    return found


def test_the_graph_sees_the_package() -> None:
    """The reader finds the modules and their imports (a test that reads nothing passes)."""
    assert len(modules()) > 100
    assert graph()[f"{PACKAGE}.storage.store"].keys() >= {
        f"{PACKAGE}.dialects",  # module level
        f"{PACKAGE}.storage.writers_queue",  # relative
    }
    assert f"{PACKAGE}.search.sqlite" in graph()[f"{PACKAGE}.search.registry"]  # in a function
    assert f"{PACKAGE}.api.async_session_db" in graph()[PACKAGE]  # under TYPE_CHECKING too


def test_every_module_lives_in_a_known_wing() -> None:
    placed = set(WINGS) | {"_migrations"}
    assert {module: wing(module) for module in modules() if wing(module) not in placed} == {}


def test_no_import_cycle() -> None:
    assert cycles() == []


def test_no_import_from_a_lower_wing_to_a_higher_one() -> None:
    rank = {name: position for position, name in enumerate(WINGS)}
    upward = [
        f"{module}:{line} imports {target} ({wing(module)} -> {wing(target)})"
        for module, targets in graph().items()
        for target, line in targets.items()
        if wing(module) in rank and wing(target) in rank and rank[wing(target)] < rank[wing(module)]
    ]
    assert upward == []


def test_no_runtime_module_imports_the_migrations() -> None:
    into = [
        f"{module}:{line} imports {target}"
        for module, targets in graph().items()
        for target, line in targets.items()
        if wing(module) != "_migrations" and wing(target) == "_migrations"
    ]
    assert into == []


def test_revisions_and_frozen_helpers_import_only_what_never_changes() -> None:
    allowed_roots = {"alembic", "sqlalchemy", *sys.stdlib_module_names}
    frozen = [
        module
        for module in modules()
        if module.startswith(MIGRATIONS + ".") and module != f"{MIGRATIONS}.env"
    ]
    assert f"{MIGRATIONS}.versions.0001_hermes_v1_base" in frozen
    wrong = [
        f"{module}:{line} imports {name}"
        for module in frozen
        for name, line in imported_names(module)
        if not (
            name.split(".")[0] in allowed_roots
            or name == MIGRATIONS
            or (name.startswith(MIGRATIONS + ".") and _target(name) != f"{MIGRATIONS}.env")
        )
    ]
    assert wrong == []
