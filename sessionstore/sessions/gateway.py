"""Gateway peers (Hermes v17), origins and routing (v18, v19), and the cross-platform handoff
state machine (v11 era).

A gateway session remembers its chat peer (``session_key``, ``chat_id``, ``chat_type``,
``thread_id``) so that, after a restart, the next message of the same peer finds it again:

1. an exact ``session_key`` + ``source`` match (a lookup without a key finds nothing, as in
   every Hermes), else
2. only when ``chat_id`` and ``chat_type`` are given, the full peer tuple (``source``,
   ``user_id``, ``chat_id``, ``chat_type``, ``thread_id``; NULL and '' are the same);
3. a candidate must still be live or have ended by accident (``'agent_close'``, an old
   cleanup bug, or ``'ws_orphan_reap'``, a mistaken TUI reaper: Hermes 0.19), and must hold
   messages; the newest ``started_at`` wins.

Origins (Hermes 0.18.1, #9006): a gateway session also keeps its ``display_name``, its whole
origin (``origin_json``) and whether its expiry was finalized (``expiry_finalized``), so the
gateway reads them from the store instead of ``sessions.json``. ``list_gateway_sessions`` is
the newest session of each ``session_key``; ``find_session_by_origin`` the newest live one of
a chat (and thread), refusing to guess between two senders of a shared chat.

Routing (Hermes v19): ``gateway_routing`` holds the gateway's routing index, one JSON entry per
``(scope, session_key)``; a scope (the caller's sessions directory) is saved, replaced whole,
loaded and pruned on its own, other scopes untouched.

Orphans (iot 0.22.2): a session with messages and no ``session_key`` (not a branch, delegate
or tool run) lost its routing identity; ``find_orphaned_gateway_sessions`` names the one keyed
predecessor that may give it back: its parent (``lineage``) when that is keyed and of the same
source, else (``contiguity``) the only keyed session of the source, with a compatible user,
that went quiet within ``max_gap_s`` (15 minutes) of the orphan's start and before its last
activity. Two candidates, or two orphans claiming one predecessor, are reported and never
guessed. ``adopt_orphaned_gateway_session`` then gives the orphan the donor's identity and
retires the donor; nothing is deleted.

Backend heartbeats (iot 0.21.0, #94895; its ``gateway_heartbeats`` table): each gateway
backend sharing a store upserts one liveness row under a ``backend_id`` stable for its process
(``register_backend_heartbeat``), removes it at exit (``clear_backend_heartbeat``); any process
may drop the rows older than a staleness window (``prune_stale_heartbeats``, which never
touches a fresh row nor any session); ``list_backend_heartbeats`` is the snapshot, newest beat
first. As iot: a falsy ``backend_id`` registers nothing and clears nothing, a window that is not
positive prunes nothing. Ours is strict where iot converts with ``str()``/``int()``/``float()``:
a ``backend_id``, ``profile`` or ``host`` that is no ``str``, a ``pid`` that is no ``int``, a
time that is no finite number is a ``TypeError``/``ValueError`` with nothing written (iot would
store ``str(None)`` as a profile). A store read as it is without the table lists none.

Handoff: ``NULL -> pending -> running -> completed | failed``. A request is accepted only from
no state, ``completed`` or ``failed`` (never on top of a live one); a claim moves exactly one
``pending`` to ``running`` (atomic: two gateways cannot both claim it); completing or failing
needs a live handoff (``pending`` or ``running``); an error is cut to 500 characters.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import (
    Select,
    and_,
    bindparam,
    delete,
    func,
    insert,
    literal,
    not_,
    or_,
    select,
    update,
)
from sqlalchemy.engine import Connection

from ..sql import validation
from ..sql.records import SessionRecord
from ..sql.statements import fixed_count
from ..sql.tables import gateway_heartbeats_table as heartbeats
from ..sql.tables import gateway_hygiene_state_table as hygiene
from ..sql.tables import gateway_routing_table as routing
from ..sql.tables import messages_table as messages
from ..sql.tables import sessions_table as sessions
from ..sql.validation import bindable
from .access import reads, writes
from .lifecycle import RECOVERABLE_END_REASONS
from .lineage import (
    BRANCH_MARKER,
    DELEGATE_MARKER,
    RESET_END_REASONS,
    TOOL_SOURCE,
    compression_ancestors_of,
    has_marker,
    parent_walk,
)
from .maintenance import last_active_at
from .queued_prompts import metadata_value, retire_undrained_queue_rows
from .shared import RepositoryPart, session_columns

logger = logging.getLogger(__name__)

PENDING, RUNNING, COMPLETED, FAILED = "pending", "running", "completed", "failed"
REQUESTABLE_FROM = (COMPLETED, FAILED)
MAX_ERROR_CHARS = 500
BARE_BILLING_PROVIDERS = frozenset({"auto", "custom"})
"""iot 0.22.2's billing buckets that name no provider a resume could route to."""
RUNTIME_KEYS = ("provider", "base_url", "api_mode")
ORPHAN_ADOPTION_MAX_GAP_S = 900.0
"""iot 0.22.2's widest gap between a keyed predecessor going quiet and its unkeyed successor
starting (15 minutes: its incident was ~60 s, without spanning conversations)."""
REPAIR_END_REASON = "superseded_by_repair"
CONTESTED_REASON = "ambiguous: more than one unkeyed session claims this predecessor"
INPUT_OWNER_KEY = "gateway_input_owner"
"""iot 0.22.2's ``display_metadata`` mark of who accepted a user row at the gateway (the
busy-queue mark is :data:`.queued_prompts.QUEUED_PROMPT_KEY`)."""


class GatewayPart(RepositoryPart):
    """Gateway peers and the handoff state machine."""

    def _session_select(self) -> Select[Any]:
        return select(*session_columns(self.store.read_shape))

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
        display_name: str | None = None,
        origin_json: str | None = None,
        include_compression_ancestors: bool = False,
        transport_profile: str | None = None,
    ) -> bool:
        """Remember a session's peer; without a ``session_key`` nothing is written.

        As every Hermes that has the call (0.18, 0.19, iot 0.22.2): the peer is the gateway's
        latest word, so ``source``, ``user_id``, ``chat_id``, ``chat_type`` and ``thread_id``
        are written as given (None clears) whatever the session held: a CLI session handed
        off to Telegram becomes Telegram's, and is found there after a restart
        (``find_latest_gateway_session_for_peer``). A ``source`` of None (beyond Hermes, which
        requires one) leaves the source as it is. ``display_name`` and ``origin_json``
        (Hermes 0.18.1) and iot 0.22.2's ``transport_profile`` (the receiving bot's profile)
        are written when given and kept when not; iot's ``include_compression_ancestors``
        writes the peer on every session the session continues after compression too (one
        routing peer for the conversation when a resume moves its tip to another lane).
        Whether a session was written: a missing session is not created (iot 0.22.2 inserts
        one; ``docs/hermes.md``)."""
        if not session_key:
            return False
        if not isinstance(include_compression_ancestors, bool):
            raise TypeError("include_compression_ancestors must be a bool")
        values: dict[str, Any] = {
            "session_key": self._peer_text(session_key, "session_key"),
            "chat_id": self._peer_text(chat_id, "chat_id"),
            "chat_type": self._peer_text(chat_type, "chat_type"),
            "thread_id": self._peer_text(thread_id, "thread_id"),
        }
        for name, value in (
            ("display_name", display_name), ("origin_json", origin_json),
            ("transport_profile", transport_profile),
        ):  # fmt: skip
            if value is not None:
                values[name] = self._text(value, name)
        values["user_id"] = self._peer_text(user_id, "user_id")
        if source is not None:
            values["source"] = validation.identifier(source, "source")
        session_id = validation.identifier(session_id, "session_id")
        statement = update(sessions)

        def run(conn: Connection) -> bool:
            ids = [session_id]
            if include_compression_ancestors:
                ids += compression_ancestors_of(conn, session_id)
            return bool(
                conn.execute(statement.where(sessions.c.id.in_(ids)).values(values)).rowcount
            )

        return self.store.write(run)

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
        # No key, no answer (every Hermes that has the call): the peer tuple only stands in
        # for a key the row lacks, never for a caller that names none.
        if not session_key or not source:
            return None
        if not all(value is None or bindable(str(value)) for value in values):
            return None
        has_messages = (
            select(messages.c.id).where(messages.c.session_id == sessions.c.id).exists()
        )
        resumable = and_(
            or_(sessions.c.ended_at.is_(None),
                sessions.c.end_reason.in_(RECOVERABLE_END_REASONS)),
            has_messages,
        )
        newest = self._session_select().order_by(sessions.c.started_at.desc(), sessions.c.id.desc())
        # iot 0.22.2's reset fence (#68539): a row of the peer that a reset boundary (/new, an
        # idle or daily reset) ended after the candidate's last activity puts the candidate
        # behind that boundary; recovering it would restore the context the user reset away.
        boundary = sessions.alias("boundary")
        candidate_activity = (
            func.coalesce(sessions.c.last_activity_at, sessions.c.started_at)
            if self.store.read_shape.has_column(sessions.name, "last_activity_at")
            else sessions.c.started_at
        )

        def behind_a_reset(*same_peer: Any) -> Any:
            return not_(
                select(boundary.c.id)
                .where(
                    boundary.c.source == sessions.c.source,
                    *same_peer,
                    boundary.c.ended_at.is_not(None),
                    boundary.c.end_reason.in_(RESET_END_REASONS),
                    boundary.c.ended_at > candidate_activity,
                )
                .correlate(sessions)
                .exists()
            )

        def run(conn: Connection) -> SessionRecord | None:
            if session_key:
                row = conn.execute(
                    newest.where(
                        sessions.c.session_key == str(session_key),
                        sessions.c.source == source,
                        resumable,
                        behind_a_reset(boundary.c.session_key == sessions.c.session_key),
                    ).limit(fixed_count(1))
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
            same_tuple = [
                func.coalesce(boundary.c[name], "") == func.coalesce(sessions.c[name], "")
                for name in ("user_id", "chat_id", "chat_type", "thread_id")
            ]
            row = conn.execute(
                newest.where(
                    sessions.c.source == source, *peer, resumable, behind_a_reset(*same_tuple)
                ).limit(fixed_count(1))
            ).first()
            return None if row is None else SessionRecord._make(row)

        return self.store.read(run)

    # -- orphaned gateway sessions (iot 0.22.2) --------------------------------------------
    @reads
    def find_orphaned_gateway_sessions(
        self, *, max_gap_s: float | None = None
    ) -> list[dict[str, Any]]:
        """iot 0.22.2's report of message-bearing sessions that lost their routing identity
        (messages, no ``session_key``; branch, delegate and tool sessions are unkeyed by
        design and left out), oldest first, each with the one keyed predecessor that may
        give it back, if one can be named (see the module's orphans)."""
        gap = ORPHAN_ADOPTION_MAX_GAP_S if max_gap_s is None else validation.number(
            max_gap_s, "max_gap_s"
        )  # fmt: skip
        has_rows = select(messages.c.id).where(messages.c.session_id == sessions.c.id).exists()
        counted = (
            select(func.count()).select_from(messages)
            .where(messages.c.session_id == sessions.c.id).scalar_subquery()
        )  # fmt: skip
        last_active = last_active_at()
        orphans = (
            select(
                sessions.c.id, sessions.c.source, sessions.c.user_id, sessions.c.started_at,
                sessions.c.parent_session_id, sessions.c.profile_name, last_active, counted,
            )
            .where(
                sessions.c.session_key.is_(None),
                has_rows,
                func.coalesce(sessions.c.source, "") != TOOL_SOURCE,
                not_(has_marker(BRANCH_MARKER)),
                not_(has_marker(DELEGATE_MARKER)),
            )
            .order_by(sessions.c.started_at, sessions.c.id)
        )

        def run(conn: Connection) -> list[dict[str, Any]]:
            records = []
            for orphan in conn.execute(orphans).all():
                orphan_id, source, user_id, started_at, parent_id, profile, active, count = orphan
                same_identity = [
                    sessions.c.session_key.is_not(None),
                    func.coalesce(sessions.c.source, "") == (source or ""),
                    *_same_profile(profile),
                ]
                donor: Any = None
                reason = ""
                if parent_id:
                    evidence = "lineage"
                    donor = conn.execute(
                        select(sessions.c.id, sessions.c.session_key)
                        .where(sessions.c.id == parent_id, *same_identity)
                    ).first()  # fmt: skip
                    if donor is None:
                        reason = "parent session carries no gateway identity of this source"
                else:
                    evidence = "contiguity"
                    started = started_at or 0
                    candidates = conn.execute(
                        select(sessions.c.id, sessions.c.session_key)
                        .where(
                            *same_identity,
                            sessions.c.id != orphan_id,
                            or_(
                                func.coalesce(sessions.c.user_id, "") == "",
                                literal(user_id or "") == "",
                                sessions.c.user_id == (user_id or ""),
                            ),
                            last_active.between(literal(started - gap), literal(started + gap)),
                            last_active < literal(active),
                        )
                        .order_by(last_active.desc(), sessions.c.id)
                        .limit(fixed_count(2))
                    ).all() if active is not None else []  # fmt: skip
                    if not candidates:
                        reason = (
                            f"no keyed predecessor fell quiet within {gap:.0f}s "
                            "of this session's start"
                        )
                    elif len(candidates) > 1:
                        reason = "ambiguous: more than one keyed predecessor matches this window"
                    else:
                        donor = candidates[0]
                records.append({
                    "orphan_id": orphan_id, "source": source, "message_count": count,
                    "started_at": started_at, "last_active": active,
                    "donor_id": donor[0] if donor else None,
                    "session_key": donor[1] if donor else None,
                    "evidence": evidence if donor else "", "adoptable": donor is not None,
                    "reason": reason,
                })  # fmt: skip
            return records

        records = self.store.read(run)
        claims = Counter(record["donor_id"] for record in records)
        for record in records:
            if record["adoptable"] and claims[record["donor_id"]] > 1:
                record["adoptable"] = False
                record["reason"] = CONTESTED_REASON
        return records

    @writes
    def adopt_orphaned_gateway_session(self, orphan_id: str, donor_id: str) -> bool:
        """Give ``orphan_id`` the routing identity of ``donor_id`` and retire the donor
        (iot 0.22.2): the orphan takes the donor's ``session_key`` and, where its own are
        NULL, its chat, thread, user, origin, display name and (as its parent) the donor
        itself; the donor is ended (its first ``ended_at`` kept) as
        ``superseded_by_repair``, a reason no recovery resumes. Nothing is deleted. The pair
        is checked again in the write transaction: False (nothing written) for an empty or
        identical pair, an unknown session, a donor without a key, an orphan that has one
        (a gateway healed it meanwhile), two sources, or two profiles (both rows labelled,
        differently). The parent link is left out when the donor descends from the orphan
        (it would close a cycle). A non-``str`` id is a ``TypeError``."""
        if not orphan_id or not donor_id:
            return False
        for value, name in ((orphan_id, "orphan_id"), (donor_id, "donor_id")):
            if not isinstance(value, str):
                raise TypeError(f"{name} must be a str, not {type(value).__name__}")
        if orphan_id == donor_id or not (bindable(orphan_id) and bindable(donor_id)):
            return False
        identity = ("session_key", "chat_id", "chat_type", "thread_id", "user_id",
                    "origin_json", "display_name", "source", "profile_name")  # fmt: skip
        read = select(*(sessions.c[name] for name in identity)).where(
            sessions.c.id == bindparam("id")
        )

        def run(conn: Connection) -> bool:
            donor_row = conn.execute(read, {"id": donor_id}).first()
            orphan_row = conn.execute(read, {"id": orphan_id}).first()
            if donor_row is None or orphan_row is None:
                return False
            donor = dict(zip(identity, donor_row, strict=True))
            orphan = dict(zip(identity, orphan_row, strict=True))
            if (
                not donor["session_key"] or orphan["session_key"]
                or (donor["source"] or "") != (orphan["source"] or "")
                or (None not in (donor["profile_name"], orphan["profile_name"])
                and donor["profile_name"] != orphan["profile_name"])
            ):  # fmt: skip
                return False
            values: dict[str, Any] = {"session_key": donor["session_key"]}
            for name in identity[1:7]:
                values[name] = func.coalesce(sessions.c[name], donor[name])
            if orphan_id not in parent_walk(conn, donor_id):
                values["parent_session_id"] = func.coalesce(
                    sessions.c.parent_session_id, donor_id
                )
            conn.execute(
                update(sessions)
                .where(sessions.c.id == orphan_id, sessions.c.session_key.is_(None))
                .values(values)
            )
            conn.execute(
                update(sessions)
                .where(sessions.c.id == donor_id)
                .values(ended_at=func.coalesce(sessions.c.ended_at, time.time()),
                        end_reason=REPAIR_END_REASON)
            )  # fmt: skip
            return True

        return self.store.write(run)

    # -- origins (Hermes 0.18.1) ---------------------------------------------------------
    @writes
    def set_expiry_finalized(self, session_id: str, finalized: bool = True) -> bool:
        """Mark (or unmark) a gateway session's expiry as finalized; False for an empty id or
        an unknown session."""
        if not session_id:
            return False
        statement = (
            update(sessions)
            .where(sessions.c.id == validation.identifier(session_id, "session_id"))
            .values(expiry_finalized=1 if finalized else 0)
        )
        return self.store.write(lambda conn: conn.execute(statement).rowcount > 0)

    @reads
    def list_gateway_sessions(
        self, *, platform: str | None = None, active_only: bool = True
    ) -> list[dict[str, Any]]:
        """The newest session (by ``started_at``) of each ``session_key``, as Hermes 0.18.1
        lists them instead of ``sessions.json``: session columns plus ``last_active`` (iot
        0.22.2's recency, :func:`.maintenance.last_active_at`: the newer of its activity
        heartbeat and its newest message, else its start; a listing row keeps its start where
        no clock is trusted), most recently active first. ``platform`` keeps one source (ASCII
        case ignored); ``active_only`` the live ones."""
        if platform is not None and not bindable(platform):
            return []
        rival = sessions.alias("same_key")
        newest_of_key = (
            select(func.max(rival.c.started_at))
            .where(rival.c.session_key == sessions.c.session_key)
            .scalar_subquery()
        )
        read = self.store.read_shape
        stamped = read.has_column(sessions.name, "last_activity_at")
        last_active = func.coalesce(
            last_active_at(stamped=stamped), sessions.c.started_at
        ).label("last_active")
        statement = select(*session_columns(read), last_active).where(
            sessions.c.session_key.is_not(None), sessions.c.started_at == newest_of_key
        )
        if platform:
            statement = statement.where(func.lower(sessions.c.source) == func.lower(platform))
        if active_only:
            statement = statement.where(sessions.c.ended_at.is_(None))
        statement = statement.order_by(last_active.desc(), sessions.c.id)
        return self.store.read(lambda conn: [
            {**SessionRecord._make(row[:-1]).to_dict(), "last_active": row[-1]}
            for row in conn.execute(statement)
        ])  # fmt: skip

    @reads
    def find_session_by_origin(
        self,
        *,
        platform: str,
        chat_id: str,
        thread_id: str | None = None,
        user_id: str | None = None,
    ) -> str | None:
        """The newest live gateway session of a chat (Hermes 0.18.1): its source is
        ``platform`` (ASCII case ignored), its ``chat_id`` is ``chat_id`` (and its thread
        ``thread_id`` when given; a NULL thread is ''). With ``user_id``, that sender's newest
        session, else None when the chat has several sessions; without, None when the chat's
        sessions belong to more than one sender. None also for an empty platform or chat."""
        if not platform or chat_id in (None, ""):
            return None
        wanted = [str(chat_id), None if thread_id is None else str(thread_id)]
        if not bindable(platform) or not all(v is None or bindable(v) for v in wanted):
            return None
        statement = (
            select(sessions.c.id, sessions.c.user_id)
            .where(
                func.lower(sessions.c.source) == func.lower(platform),
                sessions.c.session_key.is_not(None),
                sessions.c.chat_id == wanted[0],
                sessions.c.ended_at.is_(None),
            )
            .order_by(sessions.c.started_at.desc(), sessions.c.id)
        )
        if wanted[1] is not None:
            statement = statement.where(func.coalesce(sessions.c.thread_id, "") == wanted[1])
        rows = self.store.read(lambda conn: conn.execute(statement).all())
        if not rows:
            return None
        if user_id:
            exact = [row for row in rows if str(row[1] or "") == str(user_id)]
            if exact:
                return str(exact[0][0])
            if len(rows) > 1:
                return None
        elif len(rows) > 1:
            senders = {str(row[1] or "").strip() for row in rows} - {""}
            if len(senders) > 1:
                return None
        return str(rows[0][0])

    # -- routing (Hermes v19) -------------------------------------------------------------
    @writes
    def save_gateway_routing_entry(
        self, session_key: str, entry_json: str, *, scope: str = ""
    ) -> bool:
        """Write one routing entry of ``scope`` (replacing the key's entry there); nothing for
        an empty key or entry (False)."""
        if not session_key or not entry_json:
            return False
        values = {
            "scope": validation.identifier(scope, "scope"),
            "session_key": validation.identifier(session_key, "session_key"),
            "entry_json": validation.identifier(entry_json, "entry_json"),
            "updated_at": time.time(),
        }  # fmt: skip
        insert = self.store.dialect.insert(routing).values(values)
        statement = insert.on_conflict_do_update(
            index_elements=[routing.c.scope, routing.c.session_key],
            set_={"entry_json": insert.excluded.entry_json,
                  "updated_at": insert.excluded.updated_at},
        )  # fmt: skip
        self.store.write(lambda conn: conn.execute(statement))
        return True

    @writes
    def replace_gateway_routing_entries(
        self, entries: Mapping[str, str], *, scope: str = ""
    ) -> int:
        """Make ``entries`` (``{session_key: entry_json}``) the whole routing index of
        ``scope``, in one transaction: keys not in it go, pairs with an empty key or entry are
        skipped. How many entries were written."""
        scope = validation.identifier(scope, "scope")
        if not isinstance(entries, Mapping):
            raise TypeError(f"entries must be a mapping, not {type(entries).__name__}")
        now = time.time()
        rows = [
            {"scope": scope, "session_key": validation.identifier(key, "session_key"),
             "entry_json": validation.identifier(value, "entry_json"), "updated_at": now}
            for key, value in (entries or {}).items()
            if key and value
        ]  # fmt: skip

        def run(conn: Connection) -> int:
            conn.execute(delete(routing).where(routing.c.scope == scope))
            if rows:
                conn.execute(insert(routing), rows)
            return len(rows)

        return self.store.write(run)

    @reads
    def load_gateway_routing_entries(self, *, scope: str = "") -> dict[str, str]:
        """The routing index of ``scope``: ``{session_key: entry_json}``."""
        if not bindable(scope) or not self.store.read_shape.has_table(routing.name):
            return {}
        statement = select(routing.c.session_key, routing.c.entry_json).where(
            routing.c.scope == scope
        )
        return self.store.read(
            lambda conn: {str(key): str(entry) for key, entry in conn.execute(statement)}
        )

    @writes
    def delete_gateway_routing_entries(
        self, session_keys: Sequence[str], *, scope: str = ""
    ) -> int:
        """Remove these keys' entries from ``scope``; how many went."""
        if not session_keys:
            return 0
        validation.id_list(session_keys, "session_keys")
        scope = validation.identifier(scope, "scope")
        keys = [key for key in session_keys if isinstance(key, str) and bindable(key)]
        statement = delete(routing).where(
            routing.c.scope == scope, routing.c.session_key.in_(keys)
        )
        return self.store.write(lambda conn: conn.execute(statement).rowcount) if keys else 0

    @reads
    def gateway_routing_entry_for_session(self, session_id: str) -> dict[str, Any] | None:
        """iot 0.22.2's reverse lookup: the routing entry (of any scope) whose current owner
        is ``session_id`` (its JSON ``session_id``), decoded, or None. The id lives only
        inside ``entry_json``, so the match is made on the decoded entries, as iot makes it;
        an entry that is not a JSON object is passed over. Entries are tried in
        ``(scope, session_key)`` order, bytewise, so both databases name the same one when
        two claim the session (iot takes SQLite's row order)."""
        for entry_json in self._routing_entry_texts():
            try:
                entry = json.loads(entry_json or "{}")
            except (ValueError, RecursionError):
                continue
            if isinstance(entry, dict) and entry.get("session_id") == session_id:
                return entry
        return None

    def _routing_entry_texts(self) -> list[str]:
        if not self.store.read_shape.has_table(routing.name):
            return []
        bytewise = self.store.dialect.bytewise_collation
        statement = select(routing.c.entry_json).order_by(
            routing.c.scope.collate(bytewise), routing.c.session_key.collate(bytewise)
        )
        return self.store.read(lambda conn: [row[0] for row in conn.execute(statement)])

    @reads
    def list_gateway_routing_rows(self) -> list[dict[str, Any]]:
        """Every routing row of every scope (iot 0.22.2's ``repair-profiles`` evidence):
        ``scope``, ``session_key``, ``entry_json``, ``updated_at``, ordered by scope then key
        (bytewise on both databases, as SQLite orders text)."""
        if not self.store.read_shape.has_table(routing.name):
            return []
        bytewise = self.store.dialect.bytewise_collation
        statement = select(
            routing.c.scope, routing.c.session_key, routing.c.entry_json, routing.c.updated_at
        ).order_by(routing.c.scope.collate(bytewise), routing.c.session_key.collate(bytewise))
        return self.store.read(
            lambda conn: [dict(row._mapping) for row in conn.execute(statement)]
        )

    @writes
    def insert_gateway_routing_rows_if_absent(
        self, rows: Iterable[Sequence[Any]]
    ) -> int:
        """Adopt ``(scope, session_key, entry_json, updated_at)`` rows another store held
        for this one's routing index, in one transaction; a key already present wins (the
        entry the gateway actually loads stays), as does the first of two given for one key.
        How many were inserted. Each row is checked before anything is written: four items
        (else ``ValueError``), three ``str`` and a number (else ``TypeError``; iot lets SQLite
        store any type and a NULL fail its constraint)."""
        wanted = [_routing_row(row) for row in _listed(rows, "rows")]
        if not wanted:
            return 0
        statement = (
            self.store.dialect.insert(routing)
            .on_conflict_do_nothing(index_elements=[routing.c.scope, routing.c.session_key])
            .returning(routing.c.session_key)
        )  # RETURNING: what a skipped row's rowcount is differs between the drivers

        def run(conn: Connection) -> int:
            return sum(
                conn.execute(statement.values(row)).first() is not None for row in wanted
            )

        return self.store.write(run)

    @writes
    def delete_gateway_routing_rows(self, rows: Iterable[Sequence[Any]]) -> int:
        """Remove the routing rows named by ``(scope, session_key)`` pairs, in one
        transaction; how many went. A pair is unpacked as iot unpacks it (a non-pair is
        Python's ``ValueError`` or ``TypeError``), before anything is deleted; its two items
        must be ``str`` (``TypeError``); a key no row can hold (a NUL) removes nothing."""
        pairs: list[tuple[str, str]] = []
        for scope, session_key in _listed(rows, "rows"):
            if not isinstance(scope, str) or not isinstance(session_key, str):
                raise TypeError("each row must be a (scope, session_key) pair of str")
            if bindable(scope) and bindable(session_key):
                pairs.append((scope, session_key))
        if not pairs:
            return 0
        statement = delete(routing).where(
            routing.c.scope == bindparam("scope"), routing.c.session_key == bindparam("key")
        )

        def run(conn: Connection) -> int:
            return sum(
                conn.execute(statement, {"scope": scope, "key": key}).rowcount
                for scope, key in pairs
            )

        return self.store.write(run)

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
    def fail_handoff(
        self,
        session_id: str,
        error: str | None,
        *,
        only_states: Sequence[str] | None = None,
    ) -> bool:
        """Fail a pending or running handoff with ``error``; True when a row moved. iot
        0.22.2's ``only_states`` makes it a compare-and-swap on exactly those states (a
        waiter that gives up passes ``("pending",)``: once the gateway's watcher claimed the
        handoff, ``running``, the outcome is the watcher's to record)."""
        message = None if error is None else str(error)[:MAX_ERROR_CHARS]
        if only_states:
            if isinstance(only_states, str) or not all(isinstance(s, str) for s in only_states):
                raise TypeError("only_states must be a tuple of state names")
            allowed = sessions.c.handoff_state.in_(tuple(only_states))
        else:
            allowed = sessions.c.handoff_state.in_((PENDING, RUNNING))
        return self._move_handoff(
            session_id,
            allowed,
            {"handoff_state": FAILED, "handoff_error": self._peer_text(message, "error")},
        )

    # -- accepted input (iot 0.22.2) ------------------------------------------------------
    @reads
    def has_gateway_input_owner(self, session_id: str, owner: str) -> bool:
        """Whether the session holds a user row the gateway accepted for ``owner``: not
        observed, live or compaction-archived (never rewound), its ``display_metadata`` a
        JSON object whose ``gateway_input_owner`` is ``owner``. No body is read: the rows
        that can match are found by the key's name, and only their metadata is decoded.
        None for either argument answers False (iot's ``= NULL``); another type is a
        ``TypeError``."""
        if session_id is None or owner is None:
            return False
        for value, name in ((session_id, "session_id"), (owner, "owner")):
            if not isinstance(value, str):
                raise TypeError(f"{name} must be a str, not {type(value).__name__}")
        if not (bindable(session_id) and bindable(owner)):
            return False
        statement = select(messages.c.display_metadata).where(
            messages.c.session_id == session_id,
            messages.c.role == "user",
            messages.c.observed == 0,
            or_(messages.c.active == 1, messages.c.compacted == 1),
            messages.c.display_metadata.like(f"%{INPUT_OWNER_KEY}%"),
        )

        def run(conn: Connection) -> bool:
            return any(
                metadata_value(row[0], INPUT_OWNER_KEY) == owner for row in conn.execute(statement)
            )

        return self.store.read(run)

    @writes
    def retire_undrained_queue_rows(self, session_id: str) -> int:
        """Deactivate the busy-queue accept rows that never drained (iot 0.22.2, #125577):
        live user rows whose ``display_metadata`` still carries ``_queued_prompt`` = 1 (a
        drained prompt's replacement row carries no marker). After a restart discarded the
        in-memory queue nothing else retires them, and a never-run prompt would be glued
        into the previous turn. Deactivated (``active = 0``), never deleted: the row stays
        history. Idempotent; how many rows were retired (0 for an id no row can have)."""
        if not isinstance(session_id, str):
            raise TypeError(f"session_id must be a str, not {type(session_id).__name__}")
        if not bindable(session_id):
            return 0
        return self.store.write(lambda conn: retire_undrained_queue_rows(conn, session_id))

    # -- gateway hygiene (iot 0.22.2) -------------------------------------------------------
    @writes
    def increment_hygiene_failure_streak(self, session_key: str) -> int:
        """Add one to the session-hygiene failure streak of a gateway chat, in one transaction;
        the new streak (1 for an empty key, which is not stored, as in iot)."""
        if not session_key:
            return 1
        key = validation.identifier(session_key, "session_key")
        upsert = (
            self.store.dialect.insert(hygiene)
            .values(session_key=key, failure_streak=1)
            .on_conflict_do_update(
                index_elements=[hygiene.c.session_key],
                set_={"failure_streak": hygiene.c.failure_streak + 1},
            )
        )
        read = select(hygiene.c.failure_streak).where(hygiene.c.session_key == key)

        def run(conn: Connection) -> int:
            conn.execute(upsert)
            return int(conn.execute(read).scalar_one())

        streak: int = self.store.write(run)
        return streak

    @writes
    def reset_hygiene_failure_streak(self, session_key: str) -> None:
        """Forget a gateway chat's hygiene failure streak."""
        if not session_key:
            return
        key = validation.identifier(session_key, "session_key")
        statement = delete(hygiene).where(hygiene.c.session_key == key)
        self.store.write(lambda conn: conn.execute(statement))

    # -- backend heartbeats (iot 0.22.2) ------------------------------------------------------
    @writes
    def register_backend_heartbeat(
        self,
        *,
        backend_id: str,
        pid: int,
        started_at: float,
        last_heartbeat: float | None = None,
        profile: str = "",
        host: str = "",
    ) -> None:
        """Upsert this backend's liveness row (``last_heartbeat`` now unless given); nothing
        for a falsy ``backend_id``."""
        if not backend_id:
            return None
        values = {
            "backend_id": validation.identifier(backend_id, "backend_id"),
            "pid": validation.counter(pid, "pid"),
            "started_at": validation.number(started_at, "started_at"),
            "last_heartbeat": validation.optional_number(last_heartbeat, "last_heartbeat"),
            "profile": validation.identifier(profile, "profile"),
            "host": validation.identifier(host, "host"),
        }  # fmt: skip
        insert = self.store.dialect.insert(heartbeats)

        def run(conn: Connection) -> None:
            if values["last_heartbeat"] is None:
                values["last_heartbeat"] = self.clock()
            statement = insert.values(values)
            conn.execute(statement.on_conflict_do_update(
                index_elements=[heartbeats.c.backend_id],
                set_={name: statement.excluded[name] for name in values if name != "backend_id"},
            ))  # fmt: skip

        self.store.write(run)
        return None

    @writes
    def clear_backend_heartbeat(self, backend_id: str) -> bool:
        """Remove this backend's row (at exit); True when there was one."""
        if not backend_id:
            return False
        checked = validation.identifier(backend_id, "backend_id")
        statement = delete(heartbeats).where(heartbeats.c.backend_id == checked)
        return bool(self.store.write(lambda conn: conn.execute(statement).rowcount > 0))

    @writes
    def prune_stale_heartbeats(self, *, max_age_seconds: float) -> list[str]:
        """Drop the rows whose last beat is older than ``max_age_seconds``; the backend ids
        dropped (none for a window that is not positive, or infinite)."""
        if isinstance(max_age_seconds, bool) or not isinstance(max_age_seconds, (int, float)):
            raise TypeError(
                f"max_age_seconds must be a number, not {type(max_age_seconds).__name__}"
            )
        if isinstance(max_age_seconds, float) and math.isnan(max_age_seconds):
            raise ValueError("max_age_seconds must be a number of seconds, not NaN")
        if max_age_seconds <= 0:
            return []
        try:
            age = float(max_age_seconds)
        except OverflowError:  # older than any beat can be
            return []
        if math.isinf(age):
            return []

        def run(conn: Connection) -> list[str]:
            stale = heartbeats.c.last_heartbeat < self.clock() - age
            gone = [str(row[0]) for row in conn.execute(
                select(heartbeats.c.backend_id).where(stale).order_by(heartbeats.c.backend_id)
            )]  # fmt: skip
            if gone:
                conn.execute(delete(heartbeats).where(stale))
            return gone

        return self.store.write(run)

    @reads
    def list_backend_heartbeats(self) -> list[dict[str, Any]]:
        """Every backend's row (``backend_id, pid, started_at, last_heartbeat, profile,
        host``), the newest beat first."""
        if not self.store.read_shape.has_table(heartbeats.name):
            return []
        statement = select(heartbeats).order_by(
            heartbeats.c.last_heartbeat.desc(), heartbeats.c.backend_id
        )
        return self.store.read(
            lambda conn: [dict(row._mapping) for row in conn.execute(statement)]
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
    def has_pending_handoffs(self) -> bool:
        """Whether any session waits for a handoff (the watcher's idle gate): one bounded
        probe, no rows read."""
        statement = (
            select(sessions.c.id).where(sessions.c.handoff_state == PENDING).limit(fixed_count(1))
        )
        return self.store.read(lambda conn: conn.execute(statement).first() is not None)

    @writes
    def reclaim_stale_running_handoffs(self, error: str) -> list[str]:
        """Fail every handoff left ``running`` (only the gateway's watcher sets it, for one
        in-process dispatch, so at the watcher's start such a row belongs to a gateway that
        died mid-dispatch and could never hand off again) with ``error`` (cut to 500
        characters), in one transaction; the ids reclaimed, oldest first. Failing, not
        re-queueing, as iot: the dead gateway may already have delivered. A failed write is
        logged and answers ``[]``, as iot's (the rows stay); an ``error`` that is no ``str``
        is a ``TypeError`` (iot's slice fails inside its swallowed write: ``[]``)."""
        if not isinstance(error, str):
            raise TypeError(f"error must be a str, not {type(error).__name__}")
        message = self._text(error[:MAX_ERROR_CHARS], "error")
        running = (
            select(sessions.c.id)
            .where(sessions.c.handoff_state == RUNNING)
            .order_by(sessions.c.started_at, sessions.c.id)
        )
        fail = (
            update(sessions)
            .where(sessions.c.handoff_state == RUNNING)
            .values(handoff_state=FAILED, handoff_error=message)
        )

        def run(conn: Connection) -> list[str]:
            ids = [str(row[0]) for row in conn.execute(running)]
            if ids:
                conn.execute(fail)
            return ids

        try:
            return self.store.write(run)
        except Exception:  # iot's watcher gate: a failed reclaim must not stop its start
            logger.warning(
                "reclaim_stale_running_handoffs failed; stranded 'running' handoff rows "
                "(if any) were left in place", exc_info=True,
            )  # fmt: skip
            return []

    @reads
    def list_pending_handoffs(self) -> list[SessionRecord]:
        """Sessions waiting for a handoff, oldest first."""
        statement = (
            self._session_select()
            .where(sessions.c.handoff_state == PENDING)
            .order_by(sessions.c.started_at, sessions.c.id)
        )
        return self.store.read(
            lambda conn: [SessionRecord._make(row) for row in conn.execute(statement)]
        )


def _listed(rows: Any, name: str) -> list[Any]:
    """``rows`` as a list, as iot takes it (``list(rows)``); a ``str`` or ``bytes`` is no
    list of rows (``TypeError``), nor is a mapping."""
    if isinstance(rows, (str, bytes, Mapping)):
        raise TypeError(f"{name} must be an iterable of tuples, not {type(rows).__name__}")
    return list(rows)


def _routing_row(row: Any) -> dict[str, Any]:
    """One ``(scope, session_key, entry_json, updated_at)`` row, checked."""
    if isinstance(row, (str, bytes, Mapping)) or not isinstance(row, Iterable):
        raise TypeError(f"each row must be a 4-tuple, not {type(row).__name__}")
    items = tuple(row)
    if len(items) != 4:
        raise ValueError(f"each row must have 4 items, not {len(items)}")
    scope, session_key, entry_json, updated_at = items
    if isinstance(updated_at, bool) or not isinstance(updated_at, (int, float)):
        raise TypeError(f"updated_at must be a number, not {type(updated_at).__name__}")
    return {
        "scope": validation.identifier(scope, "scope"),
        "session_key": validation.identifier(session_key, "session_key"),
        "entry_json": validation.identifier(entry_json, "entry_json"),
        "updated_at": float(updated_at),
    }


def session_gateway_runtime(session_meta: Mapping[str, Any] | None) -> dict[str, Any]:
    """iot 0.22.2's persisted runtime route of a session row (its ``model_config``, JSON
    text or a dict): the nested ``gateway_runtime`` when it names a provider (its None
    values dropped), else the top-level ``provider``/``base_url``/``api_mode`` that are set,
    with ``billing_provider`` filling a missing provider unless it is a bare bucket
    (:data:`BARE_BILLING_PROVIDERS`, any case), else whatever ``gateway_runtime`` holds, else
    ``{}`` (a resume then uses the ambient config). A ``session_meta`` that is neither a
    mapping nor empty is a ``TypeError`` (iot's ``.get`` fails on it)."""
    if session_meta is None or (not isinstance(session_meta, Mapping) and not session_meta):
        session_meta = {}
    if not isinstance(session_meta, Mapping):
        raise TypeError(f"session_meta must be a mapping, not {type(session_meta).__name__}")
    raw = session_meta.get("model_config")
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except (ValueError, RecursionError):
            raw = {}
    if not isinstance(raw, dict):
        raw = {}
    runtime = raw.get("gateway_runtime")
    if isinstance(runtime, dict) and runtime.get("provider"):
        return {key: value for key, value in runtime.items() if value is not None}
    top_level = {key: raw.get(key) for key in RUNTIME_KEYS if raw.get(key)}
    billing_provider = str(session_meta.get("billing_provider") or "").strip()
    if billing_provider and billing_provider.lower() not in BARE_BILLING_PROVIDERS:
        top_level.setdefault("provider", billing_provider)
    if top_level:
        return top_level
    if not isinstance(runtime, dict):
        return {}
    return {key: value for key, value in runtime.items() if value is not None}


def _same_profile(profile: Any) -> list[Any]:
    """The donor condition of the profile fence: an orphan labelled with a profile takes
    only a donor of that profile or an unlabelled one (a NULL label reads as the other's)."""
    if profile is None:
        return []
    return [or_(sessions.c.profile_name.is_(None), sessions.c.profile_name == profile)]

