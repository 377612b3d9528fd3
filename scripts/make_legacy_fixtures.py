"""Write the legacy Hermes database fixtures (schema v1..v17, clean and messy) to a directory.

    python scripts/make_legacy_fixtures.py OUTDIR

The builders live in `tests/support/legacy_v1_v6.py` and `tests/support/legacy_v7_v17.py` (v7..v17),
where the tests import them; this script only loads that module by path (the tests directory is not
a package) and writes the set, so a person can open the very files the tests upgrade, e.g. `sqlite3
OUTDIR/hermes_v3_duplicate_titles.db`.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

TESTS_DIR = Path(__file__).resolve().parent.parent / "tests" / "support"
BUILDERS_PATH = TESTS_DIR / "legacy_v1_v6.py"
LATER_BUILDERS_PATH = TESTS_DIR / "legacy_v7_v17.py"


def load_builders(path: Path = BUILDERS_PATH, name: str = "legacy_v1_v6") -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the fixture builders from {BUILDERS_PATH}")
    module = importlib.util.module_from_spec(spec)
    # Registered before running, so dataclasses can resolve the module's own annotations.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path, help="directory to write the .db files into")
    args = parser.parse_args(argv)

    builders = load_builders()
    specs = {spec.filename: spec for spec in builders.fixture_set()}
    for path in builders.write_fixture_set(args.out_dir):
        spec = specs[path.name]
        variant = f", {spec.variant}" if spec.variant else ""
        print(f"{path}  (Hermes v{spec.version} DDL{variant})")
    # legacy_v7_v17 imports legacy_v1_v6, loaded above.
    later = load_builders(LATER_BUILDERS_PATH, "legacy_v7_v17")
    for path, (_, version, variant_name) in zip(
        later.write_later_fixture_set(args.out_dir), later.LATER_FIXTURES, strict=True
    ):
        variant = f", {variant_name}" if variant_name else ""
        print(f"{path}  (Hermes v{version} mainline history{variant})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
