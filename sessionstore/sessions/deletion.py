"""Deleting sessions: by id (delegate children taken along), the empty ones, Hermes's TUI
ghosts, and the ended sessions older than a cutoff (with a dry run of that).

Every delete orphans the children it does not take (``parent_session_id`` set to NULL), deletes
the messages, then the sessions, in one transaction, and says which sessions went
(:class:`Deletion`): the Hermes facade removes their transcript files with
:mod:`.transcripts`. The delegate children a delete takes are a lineage rule
(:func:`.lineage.delegate_descendants`).

- ``count_empty_sessions`` / ``delete_empty_sessions``: sessions with ``message_count = 0`` that
  have ended and are not archived (a live session, or one whose first message has not landed,
  is never taken). Their children are orphaned, delegate runs included: no cascade, as Hermes's
  ``prune_sessions``.
- ``prune_empty_ghost_sessions``: Hermes's TUI ghosts (ended, untitled, no message, over a day
  old).
- ``prune_sessions*``: ended sessions started before a cutoff; never a live one. ``source`` is
  one source or a list of them (any of them: :data:`~sessionstore.sql.validation.SourceFilter`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, NamedTuple

from sqlalchemy import ColumnElement, and_, delete, func, select, update
from sqlalchemy.engine import Connection

from ..sql import validation
from ..sql.records import SessionRecord
from ..sql.tables import messages_table as messages
from ..sql.tables import sessions_table as sessions
from ..sql.validation import SourceFilter, bindable
from .access import reads, writes
from .lineage import delegate_descendants
from .shared import RepositoryPart, session_columns, source_condition

GHOST_SOURCE = "tui"
GHOST_AGE_S = 24 * 3600.0
SECONDS_PER_DAY = 86_400
_DELETE_CHUNK = 500
"""Ids per statement: within every database's bound-parameter limit."""


class Deletion(NamedTuple):
    """What a delete removed: ``total`` as the method reports it, ``removed`` every session
    that went (delegate children a delete took along included)."""

    total: int
    removed: tuple[str, ...]


def delete_matching(conn: Connection, condition: ColumnElement[bool]) -> Deletion:
    """Delete every session ``condition`` selects (children orphaned); which went."""
    doomed = [str(row[0]) for row in conn.execute(select(sessions.c.id).where(condition))]
    _delete_sessions(conn, doomed)
    return Deletion(len(doomed), tuple(doomed))


def _delete_sessions(conn: Connection, session_ids: Sequence[str]) -> None:
    """Orphan the children of ``session_ids``, then delete their messages and them."""
    for start in range(0, len(session_ids), _DELETE_CHUNK):
        chunk = list(session_ids[start : start + _DELETE_CHUNK])
        conn.execute(
            update(sessions)
            .where(sessions.c.parent_session_id.in_(chunk))
            .values(parent_session_id=None)
        )
        conn.execute(delete(messages).where(messages.c.session_id.in_(chunk)))
        conn.execute(delete(sessions).where(sessions.c.id.in_(chunk)))


class DeletionPart(RepositoryPart):
    """Every way the repository deletes sessions."""

    @writes
    def delete_session(self, session_id: str) -> bool:
        """Delete a session and its messages, with its delegate (subagent) children, as newest
        Hermes does; every other child (branch, compression continuation, untagged) is kept,
        orphaned."""
        if not isinstance(session_id, str) or not bindable(session_id):
            return False
        return self.delete_sessions([session_id]) > 0

    @writes
    def delete_sessions(self, session_ids: Sequence[str]) -> int:
        """Delete these sessions (and their delegate children, recursively); how many of the
        given ids existed."""
        return self.delete_sessions_detailed(session_ids).total

    @writes
    def delete_sessions_detailed(self, session_ids: Sequence[str] | None) -> Deletion:
        """:meth:`delete_sessions`, saying also which sessions went (the given ones that
        existed, then their delegate children): the facade removes their transcript files.

        ``None`` or an empty list deletes nothing, as in Hermes; a lone ``str`` is a
        ``TypeError`` (Hermes would delete a session per character of it)."""
        if session_ids is None:
            return Deletion(0, ())
        if isinstance(session_ids, (str, bytes)):
            raise TypeError("session_ids must be a list of session ids, not a single str")
        wanted = list(dict.fromkeys(
            item for item in session_ids if isinstance(item, str) and bindable(item)
        ))  # fmt: skip
        if not wanted:
            return Deletion(0, ())

        def run(conn: Connection) -> Deletion:
            found = [
                str(row[0])
                for row in conn.execute(select(sessions.c.id).where(sessions.c.id.in_(wanted)))
            ]
            doomed = [*found, *delegate_descendants(conn, found)]
            _delete_sessions(conn, doomed)
            return Deletion(len(found), tuple(doomed))

        return self.store.write(run)

    @writes
    def delete_session_if_empty(self, session_id: str) -> bool:
        """Delete a session only while it has no title, no message and no child."""
        if not isinstance(session_id, str) or not bindable(session_id):
            return False
        child = sessions.alias("child")
        statement = delete(sessions).where(
            sessions.c.id == session_id,
            sessions.c.title.is_(None),
            ~select(messages.c.id).where(messages.c.session_id == session_id).exists(),
            ~select(child.c.id).where(child.c.parent_session_id == session_id).exists(),
        )
        return self.store.write(lambda conn: conn.execute(statement).rowcount > 0)

    @writes
    def prune_empty_ghost_sessions(
        self, source: str = GHOST_SOURCE, older_than_s: float = GHOST_AGE_S
    ) -> int:
        """Delete ghost sessions, as newest Hermes does for its TUI: ended, untitled, with no
        message, started more than a day ago. Children are orphaned. Returns how many."""
        return self.prune_empty_ghost_sessions_detailed(source, older_than_s).total

    @writes
    def prune_empty_ghost_sessions_detailed(
        self, source: str = GHOST_SOURCE, older_than_s: float = GHOST_AGE_S
    ) -> Deletion:
        """:meth:`prune_empty_ghost_sessions`, saying also which sessions went.

        Children are orphaned where Hermes 0.18's prune fails on the foreign key instead (it
        deletes without orphaning, so one ghost with a child stops the whole prune)."""
        source = validation.identifier(source, "source")
        age = validation.optional_number(older_than_s, "older_than_s")
        if age is None or age != age or age < 0:
            raise ValueError("older_than_s must be a non-negative number")
        condition = and_(
            sessions.c.source == source,
            sessions.c.title.is_(None),
            sessions.c.ended_at.is_not(None),
            sessions.c.started_at < time.time() - age,
            ~select(messages.c.id).where(messages.c.session_id == sessions.c.id).exists(),
        )

        return self.store.write(lambda conn: delete_matching(conn, condition))

    @writes
    def prune_sessions(self, older_than_days: float = 90, source: SourceFilter = None) -> int:
        """Delete ended sessions started more than ``older_than_days`` ago; never a live one."""
        return self.prune_sessions_detailed(older_than_days, source).total

    @writes
    def prune_sessions_detailed(
        self, older_than_days: float = 90, source: SourceFilter = None
    ) -> Deletion:
        """:meth:`prune_sessions`, saying also which sessions went."""
        return self.prune_sessions_before_detailed(_prune_cutoff(older_than_days), source)

    @writes
    def prune_sessions_before(self, cutoff: float, source: SourceFilter = None) -> int:
        """Delete ended sessions started before ``cutoff`` (a Unix timestamp); never a live
        one. The form to use when the cutoff was shown to someone first: a day count would be
        turned into a timestamp again later, and move."""
        return self.prune_sessions_before_detailed(cutoff, source).total

    @writes
    def prune_sessions_before_detailed(
        self, cutoff: float, source: SourceFilter = None
    ) -> Deletion:
        """:meth:`prune_sessions_before`, saying also which sessions went."""
        cutoff = _cutoff_timestamp(cutoff)
        condition = self._prunable_condition(cutoff, source)

        return self.store.write(lambda conn: delete_matching(conn, condition))

    @reads
    def prunable_sessions(
        self, older_than_days: float = 90, source: SourceFilter = None
    ) -> list[SessionRecord]:
        """What ``prune_sessions`` would delete, for a dry run."""
        return self.prunable_sessions_before(_prune_cutoff(older_than_days), source)

    @reads
    def prunable_sessions_before(
        self, cutoff: float, source: SourceFilter = None
    ) -> list[SessionRecord]:
        """What ``prune_sessions_before`` would delete, for a dry run."""
        statement = select(*session_columns()).where(
            self._prunable_condition(_cutoff_timestamp(cutoff), source)
        )
        return self.store.read(
            lambda conn: [SessionRecord(*row) for row in conn.execute(statement)]
        )

    def _prunable_condition(self, cutoff: float, source: SourceFilter) -> ColumnElement[bool]:
        """Ended, started before ``cutoff``, of any of the sources (every source for None)."""
        condition = and_(sessions.c.started_at < cutoff, sessions.c.ended_at.is_not(None))
        selected = validation.sources(source, "source")
        if selected is not None:
            condition = and_(condition, source_condition(self.store.dialect, selected))
        return condition

    # -- empty sessions (Hermes 0.18) -----------------------------------------------------------
    @reads
    def count_empty_sessions(self) -> int:
        """Ended, unarchived sessions without messages: what ``delete_empty_sessions`` takes."""
        statement = select(func.count()).select_from(sessions).where(_empty_condition())
        return int(self.store.read(lambda conn: conn.execute(statement).scalar_one()))

    @writes
    def delete_empty_sessions(self) -> int:
        """Delete the ended, unarchived sessions without messages; how many."""
        return self.delete_empty_sessions_detailed().total

    @writes
    def delete_empty_sessions_detailed(self) -> Deletion:
        """:meth:`delete_empty_sessions`, saying also which sessions went."""
        return self.store.write(lambda conn: delete_matching(conn, _empty_condition()))


def _empty_condition() -> ColumnElement[bool]:
    return and_(
        sessions.c.message_count == 0,
        sessions.c.ended_at.is_not(None),
        sessions.c.archived == 0,
    )


def _prune_cutoff(older_than_days: Any) -> float:
    days = validation.optional_number(older_than_days, "older_than_days")
    if days is None or days != days or days < 0:  # NaN never equals itself
        raise ValueError("older_than_days must be a non-negative number")
    return time.time() - days * SECONDS_PER_DAY


def _cutoff_timestamp(cutoff: Any) -> float:
    moment = validation.optional_number(cutoff, "cutoff")  # finite, or a clear error
    if moment is None:
        raise TypeError("cutoff must be a Unix timestamp (seconds), not None")
    return moment
