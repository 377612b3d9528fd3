"""``env.py`` runs at every migration, from code compiled once per process.

Alembic loads ``env.py`` from its file at each run; where no compiled file can be kept
(``PYTHONDONTWRITEBYTECODE``, a read-only install) that compiled it from source at every
migrating open, a new store's included (``schema.migrate._run_env``).
"""

from __future__ import annotations

import importlib.machinery
from pathlib import Path
from typing import Any

import pytest

from sessionstore.schema import migrate


def test_each_migration_runs_env_py_without_loading_it_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    migrate.upgrade(f"sqlite:///{tmp_path / 'first.db'}")  # this process's code, if not yet
    loaded: list[str] = []
    get_code = importlib.machinery.SourceFileLoader.get_code

    def counted(self: Any, fullname: str) -> Any:
        if Path(self.path).name == "env.py":
            loaded.append(self.path)
        return get_code(self, fullname)

    monkeypatch.setattr(importlib.machinery.SourceFileLoader, "get_code", counted)
    for n in range(3):
        url = f"sqlite:///{tmp_path / f'store-{n}.db'}"
        reached: list[str] = []
        migrate.upgrade(url, progress=reached.append)
        # the environment ran, with this run's config: its progress, a store at head
        assert reached[-1] == migrate.HEAD_REVISION, reached
        assert migrate.status(url).up_to_date
    assert loaded == []
