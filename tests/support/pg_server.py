"""The PostgreSQL server the tests use (``tests/conftest.py`` says how): importable by name
from any test module, where ``from conftest import ...`` finds whichever ``conftest`` module
was imported last (``tests/hermes/`` has its own)."""

from __future__ import annotations

import os

DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def pg_admin_url() -> str:
    return os.environ.get("SESSIONSTORE_TEST_PG_URL", DEFAULT_PG_URL)
