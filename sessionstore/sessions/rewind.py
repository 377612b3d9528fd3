"""Rewind, restore and compaction: the three message states of later Hermes (v14..v16 era).

- ``active=1, compacted=0``: live, replayed and searched;
- ``active=0, compacted=1``: compaction-archived: out of the live context, still searchable;
- ``active=0, compacted=0``: rewound (undone): neither replayed nor searched by default.

Decisions where Hermes is silent: ``restore_rewound`` brings back rewound rows only, never
compaction-archived ones (they were replaced by the summary that follows them; reviving them
would replay the same history twice); ``rewind_to_message`` leaves ``message_count`` as it
is (the rows are still there, as in Hermes), while ``archive_and_compact`` sets it to the new
live count, as Hermes does. Every operation is one write transaction.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.engine import Connection

from ..errors import UnknownSessionError
from ..sql import validation
from ..sql.message_content import decode_content, text_of
from ..sql.tables import messages_table as messages
from ..sql.tables import sessions_table as sessions
from ..sql.validation import bindable
from ..storage.store import Store
from .repository import NewMessage, SessionRepository

RECENT_PREVIEW_CHARS = 80
REWIND_ROLE = "user"


def _preview(text: str | None) -> str:
    flat = (text or "").replace("\r", " ").replace("\n", " ").strip()
    return flat if len(flat) <= RECENT_PREVIEW_CHARS else flat[: RECENT_PREVIEW_CHARS - 3] + "..."


def _row(message: NewMessage, session_id: str, timestamp: float) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "role": message.role,
        "content": message.content,
        "tool_call_id": message.tool_call_id,
        "tool_calls": message.tool_calls,
        "tool_name": message.tool_name,
        "timestamp": timestamp if message.timestamp is None else message.timestamp,
        "token_count": message.token_count,
        "finish_reason": message.finish_reason,
        "reasoning": message.reasoning,
        "reasoning_content": message.reasoning_content,
        "reasoning_details": message.reasoning_details,
        "codex_reasoning_items": message.codex_reasoning_items,
        "codex_message_items": message.codex_message_items,
        "platform_message_id": message.platform_message_id,
        "observed": message.observed,
    }


class MessageStates:
    def __init__(self, store: Store, repository: SessionRepository) -> None:
        self.store = store
        self.repository = repository

    def prepare(self, batch: Sequence[Mapping[str, Any]]) -> list[NewMessage]:
        prepared = []
        for index, message in enumerate(batch):
            if not isinstance(message, Mapping):
                raise TypeError(f"messages[{index}] must be a dict, not {type(message).__name__}")
            prepared.append(
                self.repository.prepare_message(
                    message.get("role"),
                    message.get("content"),
                    tool_name=message.get("tool_name", message.get("name")),
                    tool_calls=message.get("tool_calls"),
                    tool_call_id=message.get("tool_call_id"),
                    token_count=message.get("token_count"),
                    finish_reason=message.get("finish_reason"),
                    reasoning=message.get("reasoning"),
                    reasoning_details=message.get("reasoning_details"),
                    codex_reasoning_items=message.get("codex_reasoning_items"),
                    reasoning_content=message.get("reasoning_content"),
                    codex_message_items=message.get("codex_message_items"),
                    platform_message_id=message.get(
                        "platform_message_id", message.get("message_id")
                    ),
                    observed=message.get("observed", False),
                    timestamp=message.get("timestamp"),
                )
            )
        return prepared

    @staticmethod
    def _require_session(conn: Connection, session_id: str) -> None:
        found = conn.execute(select(sessions.c.id).where(sessions.c.id == session_id)).first()
        if found is None:
            raise UnknownSessionError(f"session {session_id!r} does not exist")

    @staticmethod
    def _insert(conn: Connection, session_id: str, batch: Sequence[NewMessage]) -> int:
        now = time.time()
        rows = [
            _row(message, session_id, now + index * 1e-6) for index, message in enumerate(batch)
        ]
        if rows:
            conn.execute(insert(messages), rows)
        return sum(message.tool_call_total for message in batch)

    # -- rewind -------------------------------------------------------------------------------
    def rewind_to_message(self, session_id: str, target_message_id: int) -> dict[str, Any]:
        """Undo the conversation from a user message on: it and every later row go inactive.

        Returns ``{rewound_count, target_message, new_head_id}``: how many rows went inactive,
        the target (``id``, ``role``, ``content``, ``timestamp``) so a UI can put its text back
        in the input box, and the id of the last live message before it (None if none).
        A target that is not a ``user`` message of this session is a ``ValueError``.
        """
        session_id = validation.identifier(session_id, "session_id")
        target_id = validation.integer(target_message_id, "target_message_id")

        def run(conn: Connection) -> dict[str, Any]:
            self._require_session(conn, session_id)
            target = conn.execute(
                select(messages.c.id, messages.c.role, messages.c.content, messages.c.timestamp)
                .where(messages.c.id == target_id, messages.c.session_id == session_id)
            ).first()
            if target is None or target.role != REWIND_ROLE:
                raise ValueError(
                    f"message {target_id} is not a user message of session {session_id!r}"
                )
            rewound = conn.execute(
                update(messages)
                .where(
                    messages.c.session_id == session_id,
                    messages.c.id >= target_id,
                    messages.c.active == 1,
                )
                .values(active=0)
            ).rowcount
            conn.execute(
                update(sessions)
                .where(sessions.c.id == session_id)
                .values(rewind_count=func.coalesce(sessions.c.rewind_count, 0) + 1)
            )
            head = conn.execute(
                select(func.max(messages.c.id)).where(
                    messages.c.session_id == session_id,
                    messages.c.id < target_id,
                    messages.c.active == 1,
                )
            ).scalar()
            return {
                "rewound_count": int(rewound or 0),
                "target_message": {
                    **target._mapping, "content": decode_content(target.content)
                },
                "new_head_id": None if head is None else int(head),
            }

        return self.store.write(run)

    def restore_rewound(self, session_id: str, since_message_id: int) -> int:
        """Bring rewound rows from ``since_message_id`` on back; returns how many."""
        session_id = validation.identifier(session_id, "session_id")
        since = validation.integer(since_message_id, "since_message_id")
        statement = (
            update(messages)
            .where(
                messages.c.session_id == session_id,
                messages.c.id >= since,
                messages.c.active == 0,
                messages.c.compacted == 0,
            )
            .values(active=1)
        )
        return self.store.write(lambda conn: int(conn.execute(statement).rowcount or 0))

    def list_recent_user_messages(
        self, session_id: str, limit: int = 20, include_inactive: bool = False
    ) -> list[dict[str, Any]]:
        """The session's latest user messages, newest first: ``{id, preview, timestamp, active}``
        with an 80-character one-line preview (rewind targets for a picker)."""
        count = validation.integer(limit, "limit")
        if count <= 0 or not bindable(session_id):
            return []
        statement = (
            select(messages.c.id, messages.c.content, messages.c.timestamp, messages.c.active)
            .where(messages.c.session_id == session_id, messages.c.role == REWIND_ROLE)
            .order_by(messages.c.id.desc())
            .limit(count)
        )
        if not include_inactive:
            statement = statement.where(messages.c.active == 1)
        rows = self.store.read(lambda conn: conn.execute(statement).all())
        return [
            {
                "id": int(row.id),
                "preview": _preview(text_of(row.content)),
                "timestamp": float(row.timestamp),
                "active": bool(row.active),
            }
            for row in rows
        ]

    def has_archived_messages(self, session_id: str) -> bool:
        """Whether any row of the session is inactive (rewound or compaction-archived)."""
        if not bindable(session_id):
            return False
        statement = (
            select(messages.c.id)
            .where(messages.c.session_id == session_id, messages.c.active == 0)
            .limit(1)
        )
        return self.store.read(lambda conn: conn.execute(statement).first() is not None)

    # -- compaction and replacement -------------------------------------------------------------
    def archive_and_compact(
        self, session_id: str, compacted_messages: Sequence[Mapping[str, Any]]
    ) -> int:
        """In one transaction: archive the live rows (``active=0, compacted=1``), append the
        compacted transcript, set the counters to the new live rows'. Returns how many rows
        were written."""
        session_id = validation.identifier(session_id, "session_id")
        batch = self.prepare(compacted_messages)

        def run(conn: Connection) -> int:
            self._require_session(conn, session_id)
            conn.execute(
                update(messages)
                .where(messages.c.session_id == session_id, messages.c.active == 1)
                .values(active=0, compacted=1)
            )
            tool_calls = self._insert(conn, session_id, batch)
            conn.execute(
                update(sessions)
                .where(sessions.c.id == session_id)
                .values(message_count=len(batch), tool_call_count=tool_calls)
            )
            return len(batch)

        return self.store.write(run)

    def replace_messages(
        self,
        session_id: str,
        new_messages: Sequence[Mapping[str, Any]],
        active_only: bool = False,
    ) -> int:
        """Delete the session's messages and write ``new_messages`` instead (one transaction).

        With ``active_only`` the inactive rows (rewound, compaction-archived) stay. The
        counters become those of the rows the session then holds. Returns how many rows were
        written.
        """
        session_id = validation.identifier(session_id, "session_id")
        batch = self.prepare(new_messages)

        def run(conn: Connection) -> int:
            self._require_session(conn, session_id)
            doomed = delete(messages).where(messages.c.session_id == session_id)
            if active_only:
                doomed = doomed.where(messages.c.active == 1)
            conn.execute(doomed)
            self._insert(conn, session_id, batch)
            self.repository.recount(conn, session_id)
            return len(batch)

        return self.store.write(run)
