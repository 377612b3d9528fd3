"""Fixtures the transfer tests share."""

from __future__ import annotations

import pytest
from big_export import big_export_text


@pytest.fixture(scope="session")
def big_export(tmp_path_factory: pytest.TempPathFactory) -> str:
    """``big_export.big_export_text``, built once a run (per worker)."""
    return big_export_text(tmp_path_factory.mktemp("big-export-source"))
