"""Prove that the inner loop (``pytest -m "not slow"``) exercises every module of sessionstore.

    python scripts/inner_loop_coverage.py            # run the inner loop under coverage, check
    python scripts/inner_loop_coverage.py -n 2       # pytest's workers (default: auto)
    python scripts/inner_loop_coverage.py --data .coverage   # check a coverage file already made

"Exercised" means more than imported: importing a module runs its top level, so a module
counts only when a line inside one of its functions or methods ran (a module without any
function, constants and re-exports, counts once imported). Exit status 1 lists the modules the
inner loop leaves untouched: mark fewer of their tests ``slow``, or add a fast one.

Kept out of the full run (``scripts/test.sh``, CI): coverage's tracer roughly doubles the time
of what it traces, and the question is about the inner loop alone. Run it after changing which
tests are ``slow``. Needs the dev extra (``coverage``, ``pytest-cov``).
"""

from __future__ import annotations

import argparse
import ast
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "sessionstore"


def function_body_lines(source: str) -> set[int]:
    """The line numbers of the statements inside any function or method of ``source``."""
    lines: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for statement in node.body:
                for inner in ast.walk(statement):
                    if isinstance(inner, ast.stmt):
                        lines.add(inner.lineno)
    return lines


def unexercised(modules: Iterable[Path], executed: Mapping[str, set[int]]) -> list[str]:
    """The modules (relative paths) no function of which ran; ``executed`` maps a file's
    absolute path to its executed lines."""
    missing = []
    for path in sorted(modules):
        ran = executed.get(str(path.resolve()), set())
        bodies = function_body_lines(path.read_text(encoding="utf-8"))
        exercised = bool(ran & bodies) if bodies else bool(ran) or _is_trivial(path)
        if not exercised:
            missing.append(_shown(path))
    return missing


def _shown(path: Path) -> str:
    resolved = path.resolve()
    return str(resolved.relative_to(ROOT)) if resolved.is_relative_to(ROOT) else str(path)


def _is_trivial(path: Path) -> bool:
    """An empty module (a package marker) has nothing to run."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return all(isinstance(node, ast.Expr) for node in tree.body)  # a docstring at most


def package_modules() -> list[Path]:
    return sorted(path for path in PACKAGE.rglob("*.py") if "__pycache__" not in path.parts)


def run_inner_loop(data_file: Path, workers: str, extra: list[str]) -> int:
    command = [
        sys.executable, "-m", "pytest", "-m", "not slow", "-q", "-n", workers,
        "-p", "pytest_cov", "--cov=sessionstore", "--cov-report=", *extra,
    ]  # fmt: skip
    return subprocess.call(command, cwd=ROOT, env={**os.environ, "COVERAGE_FILE": str(data_file)})


def executed_lines(data_file: Path) -> dict[str, set[int]]:
    from coverage import CoverageData

    data = CoverageData(basename=str(data_file))
    data.read()
    return {
        str(Path(name).resolve()): set(data.lines(name) or ()) for name in data.measured_files()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, help="check this coverage data file; run nothing")
    parser.add_argument("-n", dest="workers", default="auto", help="pytest-xdist workers")
    parser.add_argument("pytest_args", nargs="*", help="more arguments for pytest")
    args = parser.parse_args(argv)
    if args.data is not None:
        data_file = args.data
    else:
        data_file = Path(tempfile.mkdtemp(prefix="inner-loop-coverage-")) / ".coverage"
        status = run_inner_loop(data_file, args.workers, args.pytest_args)
        if status != 0:
            print(f"the inner loop failed (pytest exit status {status})", file=sys.stderr)
            return status
    missing = unexercised(package_modules(), executed_lines(data_file))
    if missing:
        print("the inner loop exercises no function of:", file=sys.stderr)
        for name in missing:
            print(f"  {name}", file=sys.stderr)
        return 1
    print(f"the inner loop exercises every one of the {len(package_modules())} modules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
