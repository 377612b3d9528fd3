"""Where the store lives: the URL rules shared by the library, Alembic and the CLI.

Order: an explicit URL, else ``SESSIONSTORE_URL``, else SQLite at ``$HERMES_HOME/state.db``
(``HERMES_HOME`` defaults to ``~/.hermes``) so an existing Hermes installation is used as is.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..dialects import file_url

URL_ENV_VAR = "SESSIONSTORE_URL"
HERMES_HOME_ENV_VAR = "HERMES_HOME"
DEFAULT_DB_FILENAME = "state.db"


def hermes_home() -> Path:
    return Path(os.environ.get(HERMES_HOME_ENV_VAR) or Path.home() / ".hermes").expanduser()


def default_db_path() -> Path:
    return hermes_home() / DEFAULT_DB_FILENAME


def sqlite_url(path: str | os.PathLike[str]) -> str:
    """The URL of the store in the file ``path`` (the embedded database's URL rules live in
    :mod:`sessionstore.dialects`; this name stays for the callers that know it)."""
    return file_url(path)


def resolve_url(url: str | None = None) -> str:
    """The URL to use: ``url`` if given, else the environment, else the default SQLite file."""
    if url:
        return url
    from_env = os.environ.get(URL_ENV_VAR)
    if from_env:
        return from_env
    return sqlite_url(default_db_path())
