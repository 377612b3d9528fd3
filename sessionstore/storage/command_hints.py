"""The ``sessionstore`` command lines that messages suggest, exact for the store they are about.

A hint must work when pasted: a refusal about ``/data/x.db`` that says "run ``sessionstore db
upgrade``" would migrate the *default* store instead. So a suggested command names the store
with ``--url`` unless it is the default one (what ``sessionstore`` opens with no ``--url`` in
this environment), shell-quoted. A SQLite file is named by its absolute path (the CLI reads a
plain path as a SQLite file); any other URL by its text, with a password shown as ``***``
(secrets are not printed; put the real one back, or set ``SESSIONSTORE_URL``).
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.engine import URL, make_url

from ..dialects import database_file, dialect_for_url
from .config import is_default_store

PROGRAM = "sessionstore"


def store_argument(url: str | URL) -> str:
    """How the store at ``url`` is spelled on the command line (before quoting): a SQLite
    file by its path, with the parameters it cannot be opened without (``immutable=1``)."""
    parsed = make_url(url) if isinstance(url, str) else url
    path = _database_file(parsed)
    if path is not None:
        lasting = dialect_for_url(parsed).lasting_parameters(parsed)
        if lasting:
            shown = URL.create(parsed.drivername, database=str(path), query=lasting)
            return shown.render_as_string(hide_password=True)
        return str(path)
    return parsed.render_as_string(hide_password=True)


def cli_command(url: str | URL | None, *words: str) -> str:
    """``sessionstore [--url STORE] WORDS...``, shell-quoted, for the store at ``url``."""
    parts = [PROGRAM]
    if url is not None and not is_default_store(url):
        parts += ["--url", store_argument(url)]
    parts += words
    import shlex  # only when a hint is written; not on the way to opening a store

    return shlex.join(parts)


def _database_file(url: URL) -> Path | None:
    path = database_file(url)
    return None if path is None else path.expanduser().resolve()
