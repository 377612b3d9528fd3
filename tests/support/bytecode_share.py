"""Each xdist worker compiles its share of the run's modules before collecting, not all of them.

Compiled files live in ``PYTHONPYCACHEPREFIX`` (``tests/conftest.py``), keyed by each source's
absolute path: a fresh clone (CI's) compiles everything once. Every worker collects every test
module, in the same order, so without this the workers compiled the same modules side by side:
pytest's assertion rewrite of the 210 test modules (~7 CPU s) and the package (~1.5 CPU s), in
each worker (a cold collection 11-12 CPU s a worker, a warm one 2.6). Here the modules are
dealt out by size before collection, each worker compiles its own share (the rewritten form
exactly as pytest's import hook makes and keeps it, the package as the interpreter does) and
then collects, reading what the others compiled. A module whose compiled file is current is
skipped; one that fails to compile is left to the import, which reports it as it always did.
Nothing here decides what is collected or run: it only fills the cache the imports read.
"""

from __future__ import annotations

import importlib.util
import os
import py_compile
import struct
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

TEST_PATTERNS = ("test_*.py", "*_test.py")


def _current(source: Path, compiled: Path) -> bool:
    """The compiled file is the interpreter's for this source as it is (what import checks:
    magic number, timestamp flags, the source's mtime and size)."""
    try:
        with compiled.open("rb") as file:
            header = file.read(16)
        stat = source.stat()
    except OSError:
        return False
    if len(header) < 16 or header[:4] != importlib.util.MAGIC_NUMBER:
        return False
    flags, mtime, size = (int(field) for field in struct.unpack("<III", header[4:16]))
    return (
        flags == 0
        and mtime == int(stat.st_mtime) & 0xFFFFFFFF
        and size == stat.st_size & 0xFFFFFFFF
    )


def carry_over_imported() -> None:
    """Modules this process imported before ``PYTHONPYCACHEPREFIX`` was set (the interpreter's
    start, pytest and its plugins, SQLAlchemy, Alembic) were read from the compiled files pip and
    the interpreter's install keep beside their sources; every xdist worker, started with the
    prefix set, would compile each of them into the prefix again (all workers at once, the same
    files). The current ones are copied there instead: byte for byte what the compile writes
    (the same interpreter's magic number, the source's mtime and size in the header, checked
    as import checks them), written whole under a temporary name and renamed into place."""
    for module in list(sys.modules.values()):
        source = getattr(module, "__file__", None)
        kept = getattr(module, "__cached__", None)
        if not isinstance(source, str) or not isinstance(kept, str) or not source.endswith(".py"):
            continue
        target = Path(importlib.util.cache_from_source(source))
        if Path(kept) == target or not _current(Path(source), Path(kept)):
            continue
        if _current(Path(source), target):
            continue
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_name(f"{target.name}.{os.getpid()}")
            partial.write_bytes(Path(kept).read_bytes())
            os.replace(partial, target)
        except OSError:  # left to the import, which compiles it
            continue


def _deal(sources: list[Path], shares: int) -> list[list[Path]]:
    """The sources in ``shares`` shares of about equal size (largest first, each to the
    smallest share so far): every worker computes the same deal from the same files."""
    dealt: list[list[Path]] = [[] for _ in range(shares)]
    sizes = [0] * shares
    for size, source in sorted(
        ((s.stat().st_size, s) for s in sources), key=lambda pair: (-pair[0], str(pair[1]))
    ):
        smallest = sizes.index(min(sizes))
        dealt[smallest].append(source)
        sizes[smallest] += size
    return dealt


def _python_files(roots: Iterable[Path]) -> set[Path]:
    found: set[Path] = set()
    for root in roots:
        if root.is_file() and root.suffix == ".py":
            found.add(root.resolve())
        elif root.is_dir():
            for path in root.rglob("*.py"):
                if not any(part.startswith(".") or part == "__pycache__" for part in path.parts):
                    found.add(path.resolve())
    return found


def _run_path(config: pytest.Config, arg: str) -> Path:
    """A path of the run as pytest reads it: from where pytest was started, or (``testpaths``,
    when none is given) from the root directory."""
    started = config.invocation_params.dir / arg
    return started if started.exists() else config.rootpath / arg


def _rewritten(path: Path) -> bool:
    """pytest's import hook rewrites this file (the run's test modules and conftests)."""
    return path.name == "conftest.py" or any(path.match(pattern) for pattern in TEST_PATTERNS)


def compile_my_share(config: pytest.Config, package_dirs: Iterable[Path]) -> None:
    """In an xdist worker of a run with several: compile this worker's share of the test
    modules under the run's paths, plus ``package_dirs`` (plain modules)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if not worker.startswith("gw") or count < 2 or sys.dont_write_bytecode:
        return
    try:
        from _pytest.assertion.rewrite import (
            PYC_TAIL,
            _rewrite_test,
            _write_pyc,
            assertstate_key,
            get_cache_dir,
            try_makedirs,
        )
    except ImportError:  # another pytest: the imports compile as they always did
        return
    rewrite = config.getoption("assertmode") == "rewrite" and config.getini("python_files") == list(
        TEST_PATTERNS
    )
    run_paths = [_run_path(config, str(arg).split("::")[0]) for arg in config.args]
    tests = {path for path in _python_files(run_paths) if _rewritten(path)} if rewrite else set()
    plain = {path for path in _python_files(package_dirs) if not _rewritten(path)}
    share = _deal(sorted(tests | plain), count)[int(worker[2:]) % count]
    state = config.stash[assertstate_key]
    for source in share:
        try:
            if source in tests:
                compiled = get_cache_dir(source) / (source.name[:-3] + PYC_TAIL)
                if _current(source, compiled) or not try_makedirs(compiled.parent):
                    continue
                stat, code = _rewrite_test(source, config)
                _write_pyc(state, code, stat, compiled)
            else:
                compiled = Path(importlib.util.cache_from_source(str(source)))
                if _current(source, compiled):
                    continue
                py_compile.compile(
                    str(source), cfile=str(compiled), doraise=True,
                    invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP,
                )  # fmt: skip
        except Exception:  # left to the import: it compiles it, or reports why it cannot
            continue
