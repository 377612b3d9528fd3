"""What the command line loads before it does anything, read from the interpreter itself.

Every run of ``sessionstore`` starts a new process, so what the CLI imports is paid by every
verb (and by a user asking for ``--help``). The command tree, its options and their help are
built from the verb modules alone: SQLAlchemy, Alembic, Rich and the store come in only with
the verb that uses them. Each case runs the real program (``python -m sessionstore``) under
``-X importtime``, which lists every module the process imported; startup time itself is
measured by hand (docs/performance.md), never asserted.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sessionstore import SessionDB

REPO = Path(__file__).resolve().parents[2]

THE_STORE_AND_ITS_DRAWING = (
    "sqlalchemy",
    "alembic",
    "psycopg",
    "rich",
    "sessionstore.dialects",
    "sessionstore.storage.store",
    "sessionstore.storage.engine",
    "sessionstore.schema",
    "sessionstore.search",
    "sessionstore.sessions",
    "sessionstore.ops",
    "sessionstore.api",
    "sessionstore._migrations",
)
"""What printing help needs none of: the database layer, the migrations, the store's queries
and Rich (help is Click's plain text)."""


def loaded_modules(*arguments: str) -> tuple[set[str], str]:
    """The modules ``sessionstore ARGUMENTS`` imported, and what it printed on stdout."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "sessionstore", *arguments],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    loaded = {
        line.rpartition("|")[2].strip()
        for line in result.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    assert "sessionstore.cli" in loaded  # the listing is read: the CLI itself is in it
    return loaded, result.stdout


def among(loaded: set[str], roots: tuple[str, ...]) -> list[str]:
    return sorted(
        name
        for name in loaded
        if any(name == root or name.startswith(root + ".") for root in roots)
    )


@pytest.mark.parametrize(
    "arguments",
    [("--help",), ("sessions", "list", "--help"), ("db", "upgrade", "--help")],
    ids=["root", "sessions-list", "db-upgrade"],
)
def test_help_is_printed_without_the_store_or_rich(arguments: tuple[str, ...]) -> None:
    loaded, printed = loaded_modules(*arguments)
    assert printed.startswith(f"Usage: sessionstore {' '.join(arguments[:-1])}".rstrip())
    assert "--url URL" in printed  # Typer built the options from the verbs' signatures
    assert among(loaded, THE_STORE_AND_ITS_DRAWING) == []


def test_a_json_listing_reads_the_store_without_rich_or_the_migrations(
    migrated_sqlite_url: str,
) -> None:
    with SessionDB(migrated_sqlite_url) as db:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "hello")
    loaded, printed = loaded_modules("--url", migrated_sqlite_url, "sessions", "list", "--json")
    assert '"id": "s1"' in printed
    assert "sqlalchemy" in loaded and "sessionstore.storage.store" in loaded  # it did read
    # No table is drawn and nothing migrates: neither Rich nor Alembic, nor the verbs of
    # other groups' machinery (a copy, the doctor, the search service).
    assert among(
        loaded,
        ("rich", "alembic", "sessionstore._migrations", "sessionstore.ops",
         "sessionstore.search.service", "sessionstore.sessions.stats"),
    ) == []  # fmt: skip


def test_the_upgrade_default_is_the_migrations_own_name_for_the_newest() -> None:
    """``db upgrade``'s default is written out in the CLI (its tree is built without the
    migrations): it stays the spelling the migrations take for the newest revision."""
    from sessionstore.cli import db
    from sessionstore.schema import migrate

    assert db.NEWEST == migrate.HEAD
