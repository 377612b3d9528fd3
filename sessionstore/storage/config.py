"""Where the store lives: the URL rules shared by the library, Alembic and the CLI.

Order: an explicit URL, else ``SESSIONSTORE_URL``, else SQLite at ``$HERMES_HOME/state.db``
(``HERMES_HOME`` defaults to ``~/.hermes``) so an existing Hermes installation is used as is.

The default store follows Hermes's own ``database.journal_mode`` (its ``config.yaml``): a
Hermes home whose file must stay out of WAL (NFS, SMB) stays out of it when sessionstore opens
the same file (:func:`hermes_journal_mode`).

Where a person types the location (the CLI's ``--url``, Alembic's ``-x url=``,
``SESSIONSTORE_URL``), it is read by :func:`store_location`: a database URL, or a plain path
to a SQLite file.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

from ..dialects import database_file, dialect_for_url, file_location, file_url, file_url_object
from ..errors import StoreLocationError

URL_ENV_VAR = "SESSIONSTORE_URL"
HERMES_HOME_ENV_VAR = "HERMES_HOME"
DEFAULT_DB_FILENAME = "state.db"
_PASSWORD_IN_URL = re.compile(r"(://[^:/@]*:)[^@]*@")


def hermes_home() -> Path:
    return Path(os.environ.get(HERMES_HOME_ENV_VAR) or Path.home() / ".hermes").expanduser()


def default_db_path() -> Path:
    return hermes_home() / DEFAULT_DB_FILENAME


def hermes_journal_mode(home: Path | None = None) -> str:
    """``database.journal_mode`` of Hermes's ``config.yaml`` in ``home`` (default: the Hermes
    home): ``delete`` or ``wal``; ``wal`` when the file, the key or a valid value is missing,
    as Hermes reads it (an invalid value is ``wal``).

    Read without a YAML library (sessionstore does not depend on one): the file is Hermes's
    own, written in block style, and only a top-level ``database:`` mapping's
    ``journal_mode:`` line is looked at, its value unquoted and its comment dropped. Hermes
    users set ``delete`` where SQLite accepts WAL but its shared memory is one host's (NFS,
    SMB): a drop-in that switched that file into WAL would undo their choice for good."""
    try:
        text = ((home or hermes_home()) / "config.yaml").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return "wal"
    in_database, child_indent = False, 0
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        indent = len(line) - len(line.lstrip())
        if indent == 0:
            in_database, child_indent = line.split("#", 1)[0].rstrip() == "database:", 0
            continue
        child_indent = child_indent or indent  # the mapping's own keys, not nested ones
        key, colon, value = line.strip().partition(":")
        if in_database and indent == child_indent and colon and key.strip("'\"") == "journal_mode":
            mode = value.split("#", 1)[0].strip().strip("'\"").lower()
            return mode if mode in ("wal", "delete") else "wal"
    return "wal"


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
    return resolve_location(None).render_as_string(hide_password=False)


def resolve_location(url: str | URL | None = None) -> URL:
    """:func:`resolve_url` as a URL object, the default file's built from its path (a Hermes
    home whose name holds ``?``, ``#`` or ``%`` names that file, not another:
    :func:`~sessionstore.dialects.file_location`)."""
    if isinstance(url, URL):
        return url
    if url:
        return make_url(url)
    from_env = os.environ.get(URL_ENV_VAR)
    if from_env:
        return location_url(from_env)  # a plain file path there too, as the CLI reads it
    location = file_location(default_db_path())
    if hermes_journal_mode() == "delete":
        location = location.update_query_dict({"journal_mode": "delete"})
    return location


def location_url(text: str) -> URL:
    """The URL given, or the SQLite URL of a plain file path (anything without ``://``).

    Built as a URL object, not text: a file name may hold ``?`` or ``#``, which URL text
    would read as the start of a query.
    """
    if "://" in text:
        return make_url(text)
    return file_url_object(text)


def store_location(given: str | None) -> URL:
    """The store a person named (``None``: the environment's rules), checked to be one this
    package opens; anything else is a :class:`StoreLocationError` saying what is wrong.

    An empty location is refused rather than read as "the default": a script whose variable
    came out empty must not operate on the default store by accident.
    """
    if given is not None and not given.strip():
        raise StoreLocationError(
            "the store location is empty: give a database URL or a SQLite file path"
        )
    raw = resolve_url(given)
    try:
        parsed = resolve_location(None) if given is None else location_url(raw)
        # Its parameters too (a SQLite URI parameter the store would drop is refused).
        dialect_for_url(parsed).requests_read_only(parsed)
        parsed.get_dialect()
    except (ArgumentError, ValueError, NoSuchModuleError) as exc:
        raise StoreLocationError(f"bad database URL {hide_password(raw)!r}: {exc}") from None
    return parsed


def hide_password(url: str) -> str:
    """URL text with its password as ``***``, also when the text does not parse."""
    return _PASSWORD_IN_URL.sub(r"\1***@", url)


def is_default_store(url: str | URL) -> bool:
    """``url`` is the store opened when none is named, in this environment."""
    try:
        default = resolve_location(None)
        parsed = make_url(url) if isinstance(url, str) else url
    except ArgumentError:
        return False
    mine, theirs = _resolved_file(parsed), _resolved_file(default)
    if mine is not None or theirs is not None:
        return mine == theirs
    return parsed.render_as_string(hide_password=False) == default.render_as_string(
        hide_password=False
    )


def require_directory(url: URL) -> None:
    """A store a person named (the CLI's ``--url``, Alembic's ``-x url=``) gets no directory
    created for it, except the default store's (``$HERMES_HOME``, which Hermes itself
    creates): a mistyped path must not leave a tree of directories behind. Anything else is a
    :class:`StoreLocationError`. (``SessionDB`` creates the directory, as Hermes's does.)"""
    path = database_file(url)
    if path is None or path.parent.is_dir() or is_default_store(url):
        return
    raise StoreLocationError(
        f"cannot create a session store at {path}: the directory {path.parent} does not exist "
        "(create it first, or give another path)"
    )


def _resolved_file(url: URL) -> Path | None:
    path = database_file(url)
    return None if path is None else path.expanduser().resolve()
