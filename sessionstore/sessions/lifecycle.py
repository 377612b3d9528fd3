"""A session's life as one row: created (or filled in), read back by id, updated (model,
prompt, working tree, billing route), ended, reopened, and promoted to a reset boundary.
Token and cost accounting is :mod:`.usage`'s.

Values are validated and JSON is encoded *before* a write transaction starts, so the write lock
is held only for the statements themselves.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy import and_, case, func, or_, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql.elements import TextClause

from ..dialects import StoreDialect
from ..errors import DamagedValueError
from ..sql import validation
from ..sql.codec import decode_json_object, encode_json, mergeable_json_object
from ..sql.read_shape import ReadShape
from ..sql.records import SESSION_FIELDS, SessionRecord
from ..sql.statements import HotReads, plain_select
from ..sql.tables import conversation_generations_table as generations
from ..sql.tables import sessions_table as sessions
from ..sql.validation import bindable
from ..storage.store import Store
from .access import reads, writes
from .compression import is_automatic_end_reason
from .lineage import (
    BRANCH_MARKER,
    COMPRESSION_END_REASON,
    DELEGATE_MARKER,
    RESET_END_REASONS,
    RESET_MARKER,
    TOOL_SOURCE,
    stamp_legacy_reset_children,
)
from .maintenance import unarchive_swept_lineage
from .prompts import delete_unreferenced_prompts, store_prompt
from .queued_prompts import retire_undrained_queue_rows
from .shared import UNKNOWN_SOURCE, RepositoryPart, constraint_error

logger = logging.getLogger(__name__)

EXTRA_SESSION_COLUMNS = (
    "session_key", "chat_id", "chat_type", "thread_id", "cwd", "git_branch", "git_repo_root",
    "profile_name", "display_name", "origin_json", "transport_profile",
)  # fmt: skip
"""Later-Hermes session columns ``create_session``/``ensure_session`` accept as keywords."""
_FILLED_ON_CONFLICT = ("model", "model_config", "parent_session_id", "created_source")
"""What ``create_session`` on an existing session fills where still NULL, beside the extras
and the prompt (filled only where the session has none, inline or hashed). ``created_source``
is iot's immutable provenance (#56439): the source a session was first created with, kept
when ``source`` (live routing state) changes; a row from before it (NULL) gets it from the
next upsert, as iot's ``COALESCE(sessions.created_source, excluded.created_source)``."""
_BASE_SESSION_KEYWORDS = ("model_config", "system_prompt", "user_id", "parent_session_id")
"""``create_session``'s named keywords that ``ensure_session`` takes through ``**kwargs``."""
RECOVERABLE_END_REASONS = ("agent_close", "ws_orphan_reap")
"""End reasons that were accidents, not conversation boundaries (Hermes 0.19): an old gateway
cleanup's ``agent_close`` and a mistaken TUI reaper's ``ws_orphan_reap``. A gateway's
recovery may resume such a session, and a reset may still promote it to a real end."""
RESET_END_REASON = "session_reset"
BOUNDARY_END_REASONS = frozenset(RESET_END_REASONS) | {"new_session"}
"""iot 0.22.2's ``_BOUNDARY_END_REASONS``: deliberate conversation boundaries, the reset ends
plus the CLI's ``/new`` (``new_session``), which no rotation or host may undo."""


class LifecyclePart(RepositoryPart):
    """Creating, reading back, updating, ending and reopening one session."""

    def __init__(self, store: Store, *, clock: Callable[[], float] = time.time) -> None:
        super().__init__(store, clock=clock)
        # Built on first use: a short-lived program (a hook, a CLI call) opens the store for
        # one call, and building every statement at open showed in its start-up.
        self._load_session = HotReads.built_later(
            store.engine.dialect, lambda: _session_by_id(store.read_shape)
        )

    @writes
    def create_session(
        self,
        session_id: str,
        source: str,
        *,
        model: str | None = None,
        model_config: Any = None,
        system_prompt: str | None = None,
        user_id: str | None = None,
        parent_session_id: str | None = None,
        started_at: float | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> str:
        """Insert the session if it is new. ``extra`` holds later-Hermes columns (gateway
        peer, cwd and git). On an existing session the model, model_config, system prompt,
        parent and those columns fill only what is still NULL (never user_id), as Hermes
        0.18's session upsert does: a gateway's bare row gets the agent's model later. The
        source is kept, unless it is the placeholder :data:`.shared.UNKNOWN_SOURCE` (usage
        written before the session was created): then it is this one, as in iot 0.22.2.

        Given a parent, the session then takes its parent's working context where its own is
        still NULL (:func:`inherit_parent_context`, in the same transaction), as iot 0.22.2
        does: a compression fork keeps its working directory and profile."""
        filled = self._extra_session_values(extra)
        values = {
            "id": validation.identifier(session_id, "session_id"),
            "source": validation.identifier(source, "source"),
            "created_source": source,
            "user_id": validation.optional_identifier(user_id, "user_id"),
            "model": validation.optional_identifier(model, "model"),
            "model_config": self._text(encode_json(model_config, "model_config"), "model_config"),
            "system_prompt": self._text(system_prompt, "system_prompt"),
            "parent_session_id": validation.optional_identifier(
                parent_session_id, "parent_session_id"
            ),
            "started_at": time.time()
            if started_at is None
            else validation.number(started_at, "started_at"),
            **filled,
        }
        fills = {
            **{name: values[name] for name in _FILLED_ON_CONFLICT if values[name] is not None},
            **filled,
        }
        # preserve_rowcount: psycopg reports -1 for an INSERT otherwise, and the fill of an
        # existing session below would never run on PostgreSQL.
        statement = (
            self.store.dialect.insert(sessions).values(values).on_conflict_do_nothing()
            .execution_options(preserve_rowcount=True)
        )
        dialect = self.store.dialect
        prompt = values["system_prompt"]

        def run(conn: Connection) -> None:
            # The prompt as a hash AND inline (see .prompts); in the same transaction.
            key = store_prompt(dialect, conn, prompt)
            _insert_or_fill(
                conn, statement.values(system_prompt_hash=key), values["id"], fills, prompt, key,
                values["source"],
            )
            if values["parent_session_id"]:
                inherit_parent_context(conn, values["id"])
            if key is not None:
                delete_unreferenced_prompts(conn)

        try:
            # Idempotent (ON CONFLICT DO NOTHING, then COALESCE fills): after a lost COMMIT it
            # is simply run again.
            self.store.write(run, recover=_run_again)
        except IntegrityError as exc:
            raise constraint_error(
                self.store.dialect, exc, f"parent session {parent_session_id!r} does not exist",
                f"creating session {session_id!r}",
            ) from exc
        return session_id

    @writes
    def ensure_session(self, session_id: str, source: str = UNKNOWN_SOURCE,
                       model: str | None = None,
                       extra: Mapping[str, Any] | None = None) -> str:
        """:meth:`create_session` with Hermes's defaults: every keyword ``create_session``
        takes is taken here too (``extra`` holds them), as in Hermes 0.18."""
        rest = dict(extra or {})
        base = {name: rest.pop(name) for name in _BASE_SESSION_KEYWORDS if name in rest}
        return self.create_session(session_id, source, model=model, **base, extra=rest)

    def _extra_session_values(self, extra: Mapping[str, Any] | None) -> dict[str, Any]:
        if not extra:
            return {}
        unknown = sorted(set(extra) - set(EXTRA_SESSION_COLUMNS))
        if unknown:
            raise TypeError(f"unknown session column(s): {', '.join(unknown)}")
        return {
            name: self._text(None if value is None else str(value), name)
            for name, value in extra.items()
            if value is not None and value != ""
            # A blank profile is no owner (iot 0.22.2 stamps its own store's, else NULL):
            and not (name == "profile_name" and isinstance(value, str) and not value.strip())
        }

    def _update_session(self, session_id: str, values: dict[str, Any], *conditions: Any) -> bool:
        """Set ``values`` on one session (where ``conditions`` hold); True when a row changed."""
        statement = (
            update(sessions)
            .where(sessions.c.id == validation.identifier(session_id, "session_id"), *conditions)
            .values(values)
        )
        return self.store.write(lambda conn: conn.execute(statement).rowcount > 0)

    @reads
    def get_session(self, session_id: str) -> SessionRecord | None:
        if not isinstance(session_id, str) or not bindable(session_id):
            return None
        rows = self.store.read(
            lambda conn: self._load_session.rows(conn, {"id": session_id}),
            single_statement=True,
        )
        return SessionRecord._make(rows[0]) if rows else None

    @writes
    def end_session(self, session_id: str, end_reason: str | None) -> bool:
        """End a live session; the first end reason wins (a compression split stays one).
        An end that is a reset boundary advances the peer's conversation generation in the
        same transaction (iot 0.22.2: :func:`bump_conversation_generation`)."""
        reason = self._text(end_reason, "end_reason")
        return self._end_session(
            session_id, {"ended_at": time.time(), "end_reason": reason}, reason,
            sessions.c.ended_at.is_(None),
        )  # fmt: skip

    def _end_session(
        self, session_id: str, values: dict[str, Any], reason: str | None, *conditions: Any
    ) -> bool:
        """:meth:`_update_session` for an end stamp: only an end this call wrote bumps the
        generation (a no-op must not rotate the peer)."""
        statement = (
            update(sessions)
            .where(sessions.c.id == validation.identifier(session_id, "session_id"), *conditions)
            .values(values)
        )
        dialect = self.store.dialect

        def run(conn: Connection) -> bool:
            if conn.execute(statement).rowcount == 0:
                return False
            bump_conversation_generation(dialect, conn, session_id, reason)
            return True

        return self.store.write(run)

    @writes
    def promote_to_session_reset(self, session_id: str, reason: str = RESET_END_REASON) -> bool:
        """End a session as an intentional reset boundary (Hermes 0.19, #61220): a live one,
        or one that ended only by accident (:data:`RECOVERABLE_END_REASONS`), which a plain
        ``end_session`` would leave resumable. Any other end reason is kept (the first real
        boundary wins). True when the session was promoted; False when it was not, or for an
        empty or impossible id or reason (Hermes answers False where it fails)."""
        if not session_id or not bindable(session_id) or not bindable(reason):
            return False
        return self._end_session(
            session_id,
            {"ended_at": time.time(), "end_reason": reason},
            reason,
            or_(sessions.c.ended_at.is_(None),
                sessions.c.end_reason.in_(RECOVERABLE_END_REASONS)),
        )  # fmt: skip

    @writes
    def reopen_session(self, session_id: str) -> bool:
        """Clear the end so the session can be resumed, and undo the idle sweep's archive of
        its lineage (never a deliberate one: :func:`.maintenance.unarchive_swept_lineage`),
        as iot 0.22.2 does. First, in the same transaction, its busy-queue accept rows that
        never drained are deactivated (never deleted:
        :func:`.queued_prompts.retire_undrained_queue_rows`), as iot's reopen retires them,
        so the resumed chat does not replay a prompt a restart dropped; and its reset
        children that only the pre-marker rule tells apart get ``_reset_from``
        (:func:`.lineage.stamp_legacy_reset_children`), as iot's reopen stamps them: that rule
        reads the end reason cleared here, and the child would otherwise become a
        continuation to iot's readers and ours (no longer listed, walked into by a resume).
        True when the session exists."""
        session_id = validation.identifier(session_id, "session_id")
        statement = (
            update(sessions)
            .where(sessions.c.id == session_id)
            .values(ended_at=None, end_reason=None)
        )
        keyed = self.store.read_shape.has_column(sessions.name, "session_key")

        def run(conn: Connection) -> bool:
            retire_undrained_queue_rows(conn, session_id)
            if keyed:
                stamp_legacy_reset_children(conn, session_id)
            if conn.execute(statement).rowcount == 0:
                return False
            unarchive_swept_lineage(conn, session_id)
            return True

        return self.store.write(run)

    @writes
    def reopen_if_explicitly_closed(
        self, session_id: str, *, provenance: str, patience_s: float | None = None
    ) -> str | None:
        """iot 0.22.2's narrow reopen (#106459): clear an explicit-close stamp (``tui_close``,
        ``cli_close``, ``webhook_complete``, ...) from a session its routing host has just
        proven is still routed to it; the reason cleared, or None. Left alone: an open or
        unknown session, an automatic stamp (:func:`.compression.is_automatic_end_reason`),
        ``compression``, a deliberate boundary (:data:`BOUNDARY_END_REASONS`), a NULL reason,
        and a session already continued by a child that is no fork of it (no branch,
        delegate or reset marker naming it, no tool run). The clear is conditional on the
        exact stamp read, in the same transaction. ``provenance`` names the host in the
        warning logged; ``patience_s`` (iot's write-lock wait) is taken and checked, the
        store's retry policy is the patience."""
        validation.optional_number(patience_s, "patience_s")
        if not session_id:
            return None
        if not isinstance(session_id, str):
            raise TypeError(f"session_id must be a str, not {type(session_id).__name__}")
        if not bindable(session_id):
            return None
        stamp = select(sessions.c.ended_at, sessions.c.end_reason).where(
            sessions.c.id == session_id
        )
        children = select(sessions.c.source, sessions.c.model_config).where(
            sessions.c.parent_session_id == session_id
        )

        def run(conn: Connection) -> str | None:
            row = conn.execute(stamp).first()
            if row is None or row[0] is None:
                return None
            ended_at, reason = row
            if (
                reason is None
                or is_automatic_end_reason(reason)
                or reason == COMPRESSION_END_REASON
                or reason in BOUNDARY_END_REASONS
            ):
                return None
            for source, model_config in conn.execute(children):
                if not _forks_off(session_id, source, model_config):
                    return None  # continued: the lineage is another writer's
            conn.execute(
                update(sessions)
                .where(
                    sessions.c.id == session_id,
                    sessions.c.ended_at == ended_at,
                    sessions.c.end_reason == reason,
                )
                .values(ended_at=None, end_reason=None)
            )
            return str(reason)

        reason = self.store.write(run)
        if reason is not None:
            logger.warning(
                "Session %s carried a stale %r end stamp while %s; cleared so the "
                "conversation can compress and a later close is recorded (#106459)",
                session_id, reason, provenance,
            )  # fmt: skip
        return reason

    @writes
    def update_system_prompt(self, session_id: str, system_prompt: str | None) -> bool:
        """Replace the prompt: stored as its hash and inline (see :mod:`.prompts`); None
        clears both. A ``system_prompts`` row no session names any more is deleted."""
        prompt = self._text(system_prompt, "system_prompt")
        return self._update_prompt(session_id, {"system_prompt": prompt}, prompt=prompt)

    def _update_prompt(
        self, session_id: str, values: dict[str, Any], *, prompt: str | None
    ) -> bool:
        """``values`` set on one session with the prompt (hash and inline copy) ``prompt``."""
        statement_id = validation.identifier(session_id, "session_id")
        dialect = self.store.dialect

        def run(conn: Connection) -> bool:
            key = store_prompt(dialect, conn, prompt)
            changed = conn.execute(
                update(sessions)
                .where(sessions.c.id == statement_id)
                .values({**values, "system_prompt": prompt, "system_prompt_hash": key})
            ).rowcount > 0
            delete_unreferenced_prompts(conn)
            return changed

        return self.store.write(run)

    @writes
    def update_session_model(
        self,
        session_id: str,
        model: str | None,
        provider: str | None = None,
        *,
        base_url: str | None = None,
        api_mode: str | None = None,
    ) -> bool:
        """Set the model after a mid-session switch; False for an unknown session. As iot
        0.22.2, in the same transaction: ``model_config`` gets the model too (its ``model``
        key), a Browser runtime lock in it (``browser_model_lock``) is dropped, and with a
        ``provider`` the whole route is
        written into it, as top-level ``provider``/``base_url``/``api_mode`` keys and as
        ``gateway_runtime`` (the shapes resumes read); an empty ``base_url`` or ``api_mode``
        deletes its key, so the old provider's endpoint does not survive a switch. With no
        model, no provider and no lock there is nothing to change there and ``model_config``
        is not rewritten."""
        session_id = validation.identifier(session_id, "session_id")
        values: dict[str, Any] = {"model": validation.optional_identifier(model, "model")}
        patch: dict[str, Any] = {"browser_model_lock": None}
        if values["model"]:
            patch["model"] = values["model"]
        if provider:
            route = {
                "provider": validation.identifier(provider, "provider"),
                "base_url": validation.optional_identifier(base_url, "base_url") or None,
                "api_mode": validation.optional_identifier(api_mode, "api_mode") or None,
            }
            patch.update(route, gateway_runtime=route)

        def run(conn: Connection) -> bool:
            found = conn.execute(
                select(sessions.c.model_config).where(sessions.c.id == session_id)
            ).first()
            if found is None:
                return False
            config = decode_json_object(found[0])
            if len(patch) > 1 or "browser_model_lock" in config:
                try:
                    config = mergeable_json_object(found[0], "model_config")
                except DamagedValueError as exc:
                    # The switch itself lands; what could not be read is not written over.
                    logger.warning("session %s: model switched, %s", session_id, exc)
                else:
                    for key, value in patch.items():
                        if value is None:
                            config.pop(key, None)
                        else:
                            config[key] = value
                    values["model_config"] = json.dumps(config) if config else None
            conn.execute(update(sessions).where(sessions.c.id == session_id).values(values))
            return True

        return self.store.write(run)

    @writes
    def update_session_meta(
        self, session_id: str, model_config_json: str | None, model: str | None = None
    ) -> bool:
        """Replace ``model_config`` (JSON text, as Hermes passes it) and, when given, the model."""
        values: dict[str, Any] = {
            "model_config": self._text(model_config_json, "model_config_json")
        }
        if model is not None:
            values["model"] = validation.identifier(model, "model")
        return self._update_session(session_id, values)

    @writes
    def update_session_billing_route(
        self, session_id: str, *, provider: str, base_url: str, billing_mode: str | None = None
    ) -> bool:
        """A model-route change: the new billing provider and URL, the mode when given, and
        the stored system prompt dropped (it named the old route) so that the next resume
        builds one naming the new route, as Hermes 0.18-0.19 and iot up to 0.21 do; kept
        with :attr:`keep_prompt_on_route_change` (iot 0.22.2, whose resume checks a stored
        prompt against its runtime before reusing it)."""
        values: dict[str, Any] = {
            "billing_provider": validation.identifier(provider, "provider"),
            "billing_base_url": validation.identifier(base_url, "base_url"),
        }
        if billing_mode is not None:
            values["billing_mode"] = validation.identifier(billing_mode, "billing_mode")
        if self.keep_prompt_on_route_change:
            return self._update_session(session_id, values)
        # The prompt goes, hash and inline copy both: a hash left alone would still be read.
        return self._update_prompt(session_id, values, prompt=None)

    # -- working directory and git ----------------------------------------------------------
    @writes
    def update_session_cwd(
        self,
        session_id: str,
        cwd: str | None,
        git_branch: str | None = None,
        git_repo_root: str | None = None,
        replace_git_meta: bool = False,
    ) -> int | None:
        """Record where a session runs; git values are written only when non-empty (a failed
        probe never clears a known value), except on a move, which writes both, an empty or
        missing one as NULL (iot 0.22.2): ``replace_git_meta``, or a ``cwd`` other than the
        stored one, whose branch and repository were the old directory's.

        Each call claims the session's next Git metadata generation (iot 0.22.2: the
        ``git_metadata_generation`` counter) and returns it, None for an unknown session: an
        asynchronous Git probe publishes its answer with :meth:`publish_session_git_metadata`
        under that generation, so an older probe cannot overwrite a newer claim."""
        values: dict[str, Any] = {"cwd": self._text(cwd, "cwd")}
        # The stored cwd is compared in the statement itself, so a concurrent move is seen.
        moved = sessions.c.cwd.is_distinct_from(values["cwd"])
        for name, value in (("git_branch", git_branch), ("git_repo_root", git_repo_root)):
            if replace_git_meta:
                text = value.strip() if isinstance(value, str) else value
                values[name] = self._text(text, name) if text else None
            elif value:
                values[name] = self._text(value, name)
            else:
                values[name] = case((moved, None), else_=sessions.c[name])
        values["git_metadata_generation"] = (
            func.coalesce(sessions.c.git_metadata_generation, 0) + 1
        )
        session_id = validation.identifier(session_id, "session_id")
        statement = update(sessions).where(sessions.c.id == session_id).values(values)
        claimed = select(sessions.c.git_metadata_generation).where(sessions.c.id == session_id)

        def run(conn: Connection) -> int | None:
            if not conn.execute(statement).rowcount:
                return None
            return int(conn.execute(claimed).scalar_one())

        return self.store.write(run)

    @writes
    def publish_session_git_metadata(
        self,
        session_id: str,
        cwd: str,
        generation: int,
        git_branch: str | None = None,
        git_repo_root: str | None = None,
    ) -> bool:
        """iot 0.22.2: write an asynchronous Git probe's branch and repository root (each only
        when non-empty after stripping) while the session still runs in ``cwd`` under the
        ``generation`` :meth:`update_session_cwd` claimed; True when written. A stale claim
        (a later ``update_session_cwd``, another cwd), a falsy id or cwd, a generation that
        is no ``int`` of at least 1, or nothing to write is False, with nothing written; an
        id, cwd or value that is neither text nor None is a ``TypeError``."""
        if not session_id or not cwd:
            return False
        session_id = validation.identifier(session_id, "session_id")
        cwd = validation.identifier(cwd, "cwd")
        if isinstance(generation, bool) or not isinstance(generation, int) or generation < 1:
            return False
        fields = {}
        for name, value in (("git_branch", git_branch), ("git_repo_root", git_repo_root)):
            text = self._text(value, name)
            if text and text.strip():
                fields[name] = text.strip()
        if not fields or generation > validation.INT64_MAX:
            return False
        statement = (
            update(sessions)
            .where(
                sessions.c.id == session_id, sessions.c.cwd == cwd,
                sessions.c.git_metadata_generation == generation,
            )
            .values(fields)
        )  # fmt: skip
        return bool(self.store.write(lambda conn: conn.execute(statement).rowcount == 1))

    @writes
    def backfill_repo_roots(self, roots: Mapping[str, str]) -> int:
        """Fill ``git_repo_root`` from ``{cwd: root}`` where it is still empty; rows changed."""
        pairs = [
            (validation.identifier(cwd, "cwd"), validation.identifier(root, "git_repo_root"))
            for cwd, root in validation.mapping(roots, "roots").items()
            if root
        ]

        def run(conn: Connection) -> int:
            changed = 0
            for cwd, root in pairs:
                changed += conn.execute(
                    update(sessions)
                    .where(
                        sessions.c.cwd == cwd,
                        or_(sessions.c.git_repo_root.is_(None), sessions.c.git_repo_root == ""),
                    )
                    .values(git_repo_root=root)
                ).rowcount
            return changed

        return self.store.write(run) if pairs else 0


def _insert_or_fill(conn: Connection, statement: Any, session_id: str,
                    filled: Mapping[str, Any], prompt: str | None, key: str | None,
                    source: str) -> None:
    inserted = conn.execute(statement).rowcount
    if inserted:
        return
    values: dict[str, Any] = {
        name: func.coalesce(sessions.c[name], value) for name, value in filled.items()
    }
    if source != UNKNOWN_SOURCE:
        # A placeholder source (usage written before the session was created) is the one
        # source replaced: the real surface, else the session stayed anonymous for life.
        values["source"] = case(
            (sessions.c.source == UNKNOWN_SOURCE, source), else_=sessions.c.source
        )
    if prompt is not None:
        # Only a session without a prompt (inline or hashed) gets one: the two must not part.
        none_yet = and_(sessions.c.system_prompt.is_(None), sessions.c.system_prompt_hash.is_(None))
        values["system_prompt"] = case((none_yet, prompt), else_=sessions.c.system_prompt)
        values["system_prompt_hash"] = case((none_yet, key), else_=sessions.c.system_prompt_hash)
    if values:
        conn.execute(update(sessions).where(sessions.c.id == session_id).values(values))


INHERITED_CONTEXT_COLUMNS = ("cwd", "git_repo_root", "git_branch", "profile_name")
"""What a child session takes from its parent where its own is NULL (iot 0.22.2's
``_INHERIT_PARENT_META_SQL``); ``profile_name`` only within one key namespace."""
INHERITED_ROUTING_COLUMNS = (
    "user_id", "session_key", "chat_id", "chat_type", "thread_id", "display_name", "origin_json",
    "transport_profile",
)  # fmt: skip
"""What a compression fork also takes from its parent where its own is NULL (iot 0.22.2's
``_INHERIT_PARENT_ROUTING_SQL``): the gateway's routing of the conversation it continues."""
_INHERITED_ANY = tuple(dict.fromkeys((*INHERITED_CONTEXT_COLUMNS, "session_key",
                                      *INHERITED_ROUTING_COLUMNS)))  # fmt: skip


def inherit_parent_context(conn: Connection, session_id: str) -> None:
    """Fill the session's NULL ``cwd``, ``git_repo_root``, ``git_branch`` and ``profile_name``
    from its parent row, as iot 0.22.2's ``_inherit_parent_session_metadata`` does after every
    ``create_session``/``ensure_session`` given a parent: the parent is the one the row holds
    (an existing row keeps its own), nothing non-NULL is overwritten, and a parent's NULL
    fills nothing. ``profile_name`` crosses only where either row is keyless or both
    ``session_key`` values share their ``agent:<ns>:`` prefix (:func:`key_namespace_prefix`): a
    default child forked from a sibling profile's row must not be labelled that profile's
    (iot #88381).

    iot's second fill: a compression fork (its parent ended ``'compression'``, and no
    ``_delegate_from``/``_branched_from`` marker of the child names that parent) also takes
    the parent's gateway routing (:data:`INHERITED_ROUTING_COLUMNS`) where its own is NULL,
    so a crash before the gateway records the peer again leaves the continuation routable."""
    child = conn.execute(
        select(sessions.c.parent_session_id, sessions.c.model_config,
               *(sessions.c[name] for name in _INHERITED_ANY))
        .where(sessions.c.id == session_id)
    ).mappings().first()  # fmt: skip
    if child is None or child["parent_session_id"] is None:
        return
    parent = conn.execute(
        select(sessions.c.end_reason, *(sessions.c[name] for name in _INHERITED_ANY))
        .where(sessions.c.id == child["parent_session_id"])
    ).mappings().first()  # fmt: skip
    if parent is None:
        return
    same_namespace = (
        parent["session_key"] is None or child["session_key"] is None
        or key_namespace_prefix(parent["session_key"])
        == key_namespace_prefix(child["session_key"])
    )  # fmt: skip
    values = {
        name: func.coalesce(sessions.c[name], parent[name])
        for name in INHERITED_CONTEXT_COLUMNS
        if child[name] is None and parent[name] is not None
        and (name != "profile_name" or same_namespace)
    }
    if parent["end_reason"] == COMPRESSION_END_REASON and not _names_as_fork_source(
        child["model_config"], child["parent_session_id"]
    ):
        values.update({
            name: func.coalesce(sessions.c[name], parent[name])
            for name in INHERITED_ROUTING_COLUMNS
            if child[name] is None and parent[name] is not None
        })  # fmt: skip
    if values:
        conn.execute(update(sessions).where(sessions.c.id == session_id).values(values))


def _names_as_fork_source(model_config: Any, parent_id: str) -> bool:
    """Whether the child's ``_delegate_from`` or ``_branched_from`` marker names ``parent_id``:
    a delegate or branch of a parent that happened to end on compression is no continuation
    of its conversation (iot 0.22.2's ``_FORK_EDGE_EXCLUSION_SQL``)."""
    config = decode_json_object(model_config)
    if not config:
        return False
    return any(
        isinstance(config.get(marker), str) and config.get(marker) == parent_id
        for marker in (DELEGATE_MARKER, BRANCH_MARKER)
    )


def key_namespace_prefix(session_key: str) -> str:
    """iot 0.22.2's namespace of a key for the profile fence, as its SQL cuts it:
    ``substr(key, 1, instr(substr(key, 7), ':') + 6)``, i.e. ``agent:<ns>:`` for an
    ``agent:<ns>:...`` key; any other key is cut the same way (its first six characters and
    up to the next ``:`` after them, or its first six where there is none)."""
    return session_key[: session_key[6:].find(":") + 7]


def _run_again(conn: Connection) -> None:
    """``recover`` for an idempotent write: nothing to look for, running it again is safe."""
    return None


@functools.cache
def _session_by_id(shape: ReadShape) -> TextClause:
    return plain_select(sessions, SESSION_FIELDS, "id = :id", shape=shape)


def bump_conversation_generation(
    dialect: StoreDialect, conn: Connection, session_id: str, end_reason: str | None
) -> None:
    """Advance the conversation generation of the session's peer ``(source, session_key)``
    past a reset boundary (an end reason of ``RESET_END_REASONS``; compression continues one
    conversation), as iot 0.22.2 does in the transaction that writes the end. Only ever
    increments: ``conversation_generations`` is never derived from session rows, which deletes
    and prunes take away (``SessionDB.latest_conversation_boundary`` reads it)."""
    if end_reason not in RESET_END_REASONS:
        return
    row = conn.execute(
        select(sessions.c.source, sessions.c.session_key).where(sessions.c.id == session_id)
    ).first()
    if row is None:
        return
    source, session_key = (str(value or "").strip() for value in row)
    if not (source and session_key):
        return
    statement = dialect.insert(generations).values(
        source=source, session_key=session_key, generation=1
    )
    conn.execute(
        statement.on_conflict_do_update(
            index_elements=[generations.c.source, generations.c.session_key],
            set_={"generation": generations.c.generation + 1},
        )
    )


def _forks_off(parent_id: str, source: Any, model_config: Any) -> bool:
    """A child of ``parent_id`` that is not its continuation (iot 0.22.2's
    ``_non_continuation_child_sql``, in Python): a tool run, or a branch, delegate or reset
    marker naming ``parent_id`` (a marker naming another session is inherited, not a fork)."""
    if (source or "") == TOOL_SOURCE:
        return True
    config = decode_json_object(model_config)
    return any(config.get(marker) == parent_id
               for marker in (BRANCH_MARKER, DELEGATE_MARKER, RESET_MARKER))  # fmt: skip
