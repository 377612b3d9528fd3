"""The transcript files a deleted session leaves in Hermes's sessions directory.

:func:`remove_transcripts` does what Hermes's ``_remove_session_files`` does for each deleted
session when a ``sessions_dir`` is given: ``{id}.json``, ``{id}.jsonl`` and
``request_dump_{id}_*.json`` in that directory go, and the ``session_{id}.json`` snapshot older
Hermes builds wrote (it can hold the conversation in plain text: iot 0.22.2 sweeps it too); a
file that cannot be removed is skipped. Unlike Hermes's path join and glob, a session id is
only ever compared with the names of the directory's own entries: an id holding ``/``, ``..``
or glob characters (``*``, ``?``, ``[``) can name no file outside the directory and no other
session's file.

The database side of a delete is :mod:`.deletion`; the Hermes facade pairs the two with
:func:`delete_with_transcripts`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from .deletion import Deletion

logger = logging.getLogger(__name__)

TRANSCRIPT_SUFFIXES = (".json", ".jsonl")
LEGACY_SNAPSHOT_PREFIX = "session_"
LEGACY_SNAPSHOT_SUFFIX = ".json"
REQUEST_DUMP_PREFIX = "request_dump_"
REQUEST_DUMP_SUFFIX = ".json"


def sessions_directory(value: Any) -> Path | None:
    """``sessions_dir`` as given to a delete: None, or a path (``str`` or ``os.PathLike``).
    Anything else is a ``TypeError`` before anything is deleted (Hermes raised it after the
    rows were gone)."""
    if value is None:
        return None
    if isinstance(value, (str, os.PathLike)):
        path = os.fspath(value)
        if isinstance(path, str):
            if "\x00" in path:
                raise ValueError("sessions_dir must not contain NUL characters")
            return Path(path)
    raise TypeError(f"sessions_dir must be a path or None, not {type(value).__name__}")


def remove_transcripts(sessions_dir: Path | None, session_ids: Collection[str]) -> int:
    """Remove the transcript and request-dump files of ``session_ids`` from ``sessions_dir``
    (one listing of the directory, whatever their number); how many files went. Never raises
    for the file system: a missing directory or a file that cannot go is skipped."""
    if sessions_dir is None or not session_ids:
        return 0
    wanted = set(session_ids)
    removed = 0
    try:
        entries = list(os.scandir(sessions_dir))
    except OSError:
        return 0
    for entry in entries:
        if not _belongs_to(entry.name, wanted):
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                continue
            os.unlink(entry.path)
            removed += 1
        except OSError:
            logger.debug("could not remove transcript %s", entry.path, exc_info=True)
    return removed


def _belongs_to(name: str, session_ids: set[str]) -> bool:
    """Whether Hermes would remove the file ``name`` for one of ``session_ids``."""
    for suffix in TRANSCRIPT_SUFFIXES:
        if name.endswith(suffix) and name[: -len(suffix)] in session_ids:
            return True
    snapshot = name.startswith(LEGACY_SNAPSHOT_PREFIX) and name.endswith(LEGACY_SNAPSHOT_SUFFIX)
    if snapshot and name[len(LEGACY_SNAPSHOT_PREFIX) : -len(LEGACY_SNAPSHOT_SUFFIX)] in session_ids:
        return True
    if not (name.startswith(REQUEST_DUMP_PREFIX) and name.endswith(REQUEST_DUMP_SUFFIX)):
        return False
    # request_dump_{id}_{anything}.json: every "_" may end the id (Hermes's glob matches an
    # id's dumps and those of any id that extends it with "_...", and so does this).
    middle = name[len(REQUEST_DUMP_PREFIX) : -len(REQUEST_DUMP_SUFFIX)]
    position = middle.find("_")
    while position != -1:
        if middle[:position] in session_ids:
            return True
        position = middle.find("_", position + 1)
    return False


def delete_with_transcripts(sessions_dir: Any, delete: Callable[[], Deletion]) -> Deletion:
    """``delete()``, then the deleted sessions' files in ``sessions_dir``; a ``sessions_dir``
    that is not a path is refused first, so it deletes nothing."""
    directory = sessions_directory(sessions_dir)
    deletion = delete()
    remove_transcripts(directory, deletion.removed)
    return deletion
