"""Hermes 0.18's cleanup of sessions: empty ones, orphaned compression continuations, and the
transcript files a deleted session leaves in Hermes's sessions directory.

- ``count_empty_sessions`` / ``delete_empty_sessions``: sessions with ``message_count = 0`` that
  have ended and are not archived (a live session, or one whose first message has not landed,
  is never taken). Their children are orphaned (``parent_session_id`` set to NULL), delegate
  runs included: no cascade, as Hermes's ``prune_sessions``.
- ``finalize_orphaned_compression_sessions``: a compression continuation that never ended (no
  ``end_reason``, no ``ended_at``, no API call) under a parent that ended ``'compression'``,
  holding messages and started more than 7 days ago, is ended with
  ``end_reason='orphaned_compression'``. Nothing is deleted. Returns how many.
- :func:`remove_transcripts`: what Hermes's ``_remove_session_files`` does for each deleted
  session when a ``sessions_dir`` is given: ``{id}.json``, ``{id}.jsonl`` and
  ``request_dump_{id}_*.json`` in that directory go, a file that cannot be removed is skipped.
  Unlike Hermes's path join and glob, a session id is only ever compared with the names of the
  directory's own entries: an id holding ``/``, ``..`` or glob characters (``*``, ``?``, ``[``)
  can name no file outside the directory and no other session's file.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from sqlalchemy import func, select, update

from ..sql.tables import messages_table as messages
from ..sql.tables import sessions_table as sessions
from ..storage.store import Store
from .repository import COMPRESSION_END_REASON, Deletion, delete_matching

logger = logging.getLogger(__name__)

ORPHANED_COMPRESSION_END_REASON = "orphaned_compression"
ORPHAN_AGE_S = 7 * 86_400.0
"""How long a continuation must have been left open before it is finalized (Hermes: 7 days)."""
TRANSCRIPT_SUFFIXES = (".json", ".jsonl")
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


def _empty_condition() -> Any:
    return (
        (sessions.c.message_count == 0)
        & sessions.c.ended_at.is_not(None)
        & (sessions.c.archived == 0)
    )


class Cleanup:
    """The cleanup operations of one store."""

    def __init__(self, store: Store, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.clock = clock

    def count_empty_sessions(self) -> int:
        statement = select(func.count()).select_from(sessions).where(_empty_condition())
        return int(self.store.read(lambda conn: conn.execute(statement).scalar_one()))

    def delete_empty_sessions(self) -> Deletion:
        return self.store.write(lambda conn: delete_matching(conn, _empty_condition()))

    def finalize_orphaned_compression_sessions(self) -> int:
        now = self.clock()
        parent = sessions.alias("parent")
        statement = (
            update(sessions)
            .where(
                sessions.c.api_call_count == 0,
                sessions.c.end_reason.is_(None),
                sessions.c.ended_at.is_(None),
                sessions.c.started_at < now - ORPHAN_AGE_S,
                sessions.c.parent_session_id.is_not(None),
                select(parent.c.id)
                .where(
                    parent.c.id == sessions.c.parent_session_id,
                    parent.c.end_reason == COMPRESSION_END_REASON,
                    parent.c.ended_at.is_not(None),
                )
                .exists(),
                select(messages.c.id).where(messages.c.session_id == sessions.c.id).exists(),
            )
            .values(ended_at=now, end_reason=ORPHANED_COMPRESSION_END_REASON)
        )
        return self.store.write(lambda conn: int(conn.execute(statement).rowcount or 0))
