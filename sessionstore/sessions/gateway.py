"""Gateway peers (Hermes v17) and the cross-platform handoff state machine (v11 era).

A gateway session remembers its chat peer (``session_key``, ``chat_id``, ``chat_type``,
``thread_id``) so that, after a restart, the next message of the same peer finds it again:

1. an exact ``session_key`` + ``source`` match, else
2. only when ``chat_id`` and ``chat_type`` are given, the full peer tuple (``source``,
   ``user_id``, ``chat_id``, ``chat_type``, ``thread_id``; NULL and '' are the same);
3. a candidate must still be live or have ended ``'agent_close'`` (an old cleanup bug, so
   still resumable), and must hold messages; the newest ``started_at`` wins.

Handoff: ``NULL -> pending -> running -> completed | failed``. A request is accepted only from
no state, ``completed`` or ``failed`` (never on top of a live one); a claim moves exactly one
``pending`` to ``running`` (atomic: two gateways cannot both claim it); completing or failing
needs a live handoff (``pending`` or ``running``); an error is cut to 500 characters.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Select, and_, func, or_, select, update
from sqlalchemy.engine import Connection

from ..sql import validation
from ..sql.records import SessionRecord
from ..sql.tables import messages_table as messages
from ..sql.tables import sessions_table as sessions
from ..sql.validation import bindable
from .access import reads, writes
from .shared import RepositoryPart, session_columns

RESUMABLE_END_REASON = "agent_close"
PENDING, RUNNING, COMPLETED, FAILED = "pending", "running", "completed", "failed"
REQUESTABLE_FROM = (COMPLETED, FAILED)
MAX_ERROR_CHARS = 500


def _session_select() -> Select[Any]:
    return select(*session_columns())


class GatewayPart(RepositoryPart):
    """Gateway peers and the handoff state machine."""

    def _peer_text(self, value: Any, name: str) -> str | None:
        """A gateway value as text: anything but None is taken as its ``str()`` (a numeric
        chat id as its digits)."""
        return self._text(None if value is None else str(value), name)

    # -- peers ----------------------------------------------------------------------------
    @writes
    def record_gateway_session_peer(
        self,
        session_id: str,
        *,
        source: str | None = None,
        user_id: str | None = None,
        session_key: str | None = None,
        chat_id: str | None = None,
        chat_type: str | None = None,
        thread_id: str | None = None,
    ) -> bool:
        """Remember a session's peer; without a ``session_key`` nothing is written."""
        if not session_key:
            return False
        values: dict[str, Any] = {
            "session_key": self._peer_text(session_key, "session_key"),
            "chat_id": self._peer_text(chat_id, "chat_id"),
            "chat_type": self._peer_text(chat_type, "chat_type"),
            "thread_id": self._peer_text(thread_id, "thread_id"),
        }
        if user_id is not None:
            values["user_id"] = func.coalesce(
                sessions.c.user_id, self._peer_text(user_id, "user_id")
            )
        statement = update(sessions).where(
            sessions.c.id == validation.identifier(session_id, "session_id")
        )
        if source is not None:
            source = validation.identifier(source, "source")
            statement = statement.where(sessions.c.source == source)
        return self.store.write(lambda conn: conn.execute(statement.values(values)).rowcount > 0)

    @reads
    def find_latest_gateway_session_for_peer(
        self,
        *,
        source: str,
        user_id: str | None = None,
        session_key: str | None = None,
        chat_id: str | None = None,
        chat_type: str | None = None,
        thread_id: str | None = None,
    ) -> SessionRecord | None:
        values = (source, user_id, session_key, chat_id, chat_type, thread_id)
        if not all(value is None or bindable(str(value)) for value in values) or not source:
            return None
        has_messages = (
            select(messages.c.id).where(messages.c.session_id == sessions.c.id).exists()
        )
        resumable = and_(
            or_(sessions.c.ended_at.is_(None), sessions.c.end_reason == RESUMABLE_END_REASON),
            has_messages,
        )
        newest = _session_select().order_by(sessions.c.started_at.desc(), sessions.c.id.desc())

        def run(conn: Connection) -> SessionRecord | None:
            if session_key:
                row = conn.execute(
                    newest.where(
                        sessions.c.session_key == str(session_key),
                        sessions.c.source == source,
                        resumable,
                    ).limit(1)
                ).first()
                if row is not None:
                    return SessionRecord._make(row)
            if not chat_id or not chat_type:
                return None
            peer = [
                func.coalesce(sessions.c[name], "") == ("" if value is None else str(value))
                for name, value in (
                    ("user_id", user_id),
                    ("chat_id", chat_id),
                    ("chat_type", chat_type),
                    ("thread_id", thread_id),
                )
            ]
            row = conn.execute(
                newest.where(sessions.c.source == source, *peer, resumable).limit(1)
            ).first()
            return None if row is None else SessionRecord._make(row)

        return self.store.read(run)

    # -- handoff --------------------------------------------------------------------------
    def _move_handoff(self, session_id: str, allowed: Any, values: dict[str, Any]) -> bool:
        statement = (
            update(sessions)
            .where(sessions.c.id == validation.identifier(session_id, "session_id"), allowed)
            .values(values)
        )
        return self.store.write(lambda conn: conn.execute(statement).rowcount > 0)

    @writes
    def request_handoff(self, session_id: str, platform: str) -> bool:
        allowed = or_(
            sessions.c.handoff_state.is_(None), sessions.c.handoff_state.in_(REQUESTABLE_FROM)
        )
        return self._move_handoff(
            session_id,
            allowed,
            {
                "handoff_state": PENDING,
                "handoff_platform": validation.identifier(platform, "platform"),
                "handoff_error": None,
            },
        )

    @writes
    def claim_handoff(self, session_id: str) -> bool:
        return self._move_handoff(session_id, sessions.c.handoff_state == PENDING,
                          {"handoff_state": RUNNING})  # fmt: skip

    @writes
    def complete_handoff(self, session_id: str) -> bool:
        return self._move_handoff(
            session_id,
            sessions.c.handoff_state.in_((PENDING, RUNNING)),
            {"handoff_state": COMPLETED, "handoff_error": None},
        )

    @writes
    def fail_handoff(self, session_id: str, error: str | None) -> bool:
        message = None if error is None else str(error)[:MAX_ERROR_CHARS]
        return self._move_handoff(
            session_id,
            sessions.c.handoff_state.in_((PENDING, RUNNING)),
            {"handoff_state": FAILED, "handoff_error": self._peer_text(message, "error")},
        )

    @reads
    def get_handoff_state(self, session_id: str) -> dict[str, Any] | None:
        if not bindable(session_id):
            return None
        statement = select(
            sessions.c.handoff_state, sessions.c.handoff_platform, sessions.c.handoff_error
        ).where(sessions.c.id == session_id)
        row = self.store.read(lambda conn: conn.execute(statement).first())
        if row is None:
            return None
        return {"state": row[0], "platform": row[1], "error": row[2]}

    @reads
    def list_pending_handoffs(self) -> list[SessionRecord]:
        """Sessions waiting for a handoff, oldest first."""
        statement = (
            _session_select()
            .where(sessions.c.handoff_state == PENDING)
            .order_by(sessions.c.started_at, sessions.c.id)
        )
        return self.store.read(
            lambda conn: [SessionRecord._make(row) for row in conn.execute(statement)]
        )
