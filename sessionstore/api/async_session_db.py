"""``AsyncSessionDB``: the ``SessionDB`` API for asyncio programs (a chat gateway serving
many conversations from one event loop), which never blocks the loop.

Every ``SessionDB`` method is here as a coroutine with the same name, arguments, defaults,
result shapes and errors: each *is* the sync method, run by
:class:`~sessionstore.storage.async_store.AsyncStore` (see there for the threads, the retry in the
event loop and what cancellation does). The static helpers (``sanitize_title``,
``sanitize_fts5_query``, ``contains_cjk``, ``session_unread``,
``session_gateway_runtime``) do no I/O and stay plain
functions.

The constructor takes ``SessionDB``'s arguments and does no I/O: the store is opened (and
migrated, as ``SessionDB`` does) in a thread by ``await db.open()``, ``async with``, or the
first call. The mirrored methods are generated (``scripts/gen_async_api.py``) from
``SessionDB``; a test fails when one is missing or differs. Each goes through the door its
sync method declares (``@reads``: the readers' pool; ``@writes``: the writer's turn, see
:mod:`sessionstore.sessions.access`).

Beyond ``SessionDB``: ``append_message`` and ``append_messages`` take a keyword-only
``idempotency_key``, written here by hand. A cancelled write has settled when its call returns
(committed or rolled back whole, nothing lands later), but it may have committed; with a key
the caller asks :meth:`AsyncSessionDB.committed_ids` which, and retrying the append under the
same key returns the first one's ids without writing twice.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import os
import threading
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy.engine import URL

from ..errors import StoreClosedError
from ..sessions.user_turns import RewindOutcome
from ..sql.validation import SourceFilter
from ..storage.async_store import AsyncStore, job_end, single_attempt
from ..storage.retry import RetryPolicy
from ..storage.store import Store
from .async_repository import AsyncSessionRepository
from .session_db import SessionDB

T = TypeVar("T")

ALIAS = "db"
NOT_MIRRORED = frozenset({"close", "append_message", "append_messages"})
"""Written by hand: ``close``, and the appends (``SessionDB``'s arguments plus the keyword-only
``idempotency_key``)."""


class AsyncSessionDB:
    """``SessionDB`` as coroutines; ``async with AsyncSessionDB(...) as db`` or
    ``await db.close()``. One instance serves one event loop at a time."""

    MAX_TITLE_LENGTH = SessionDB.MAX_TITLE_LENGTH
    sanitize_title = staticmethod(SessionDB.sanitize_title)
    sanitize_fts5_query = staticmethod(SessionDB.sanitize_fts5_query)
    contains_cjk = staticmethod(SessionDB.contains_cjk)
    session_unread = staticmethod(SessionDB.session_unread)
    session_gateway_runtime = staticmethod(SessionDB.session_gateway_runtime)

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
        """``SessionDB``'s arguments; ``retry`` is the event loop's retry of each call."""
        if db_path is not None and url is not None:
            raise ValueError("give db_path or url, not both")
        self._db_path = db_path
        self._url = url
        self._read_only = read_only
        self._auto_migrate = auto_migrate
        self._retry = retry or RetryPolicy()
        self._busy_timeout_s = busy_timeout_s
        self._backup_on_adopt = backup_on_adopt
        self._sync: SessionDB | None = None
        self._runner: AsyncStore | None = None
        self._repository: AsyncSessionRepository | None = None
        self._opening: concurrent.futures.Future[None] | None = None
        self._closed = False

    # -- opening and closing ------------------------------------------------------------------
    async def open(self) -> AsyncSessionDB:
        """Open (and migrate, unless ``auto_migrate=False``) the store, in a thread. Calling it
        again does nothing; a cancelled open still finishes, and the next call uses it."""
        await self._opened()
        return self

    async def _opened(self) -> tuple[SessionDB, AsyncStore]:
        if self._closed:
            raise StoreClosedError("this AsyncSessionDB is closed")
        if self._sync is not None and self._runner is not None:
            return self._sync, self._runner
        if self._opening is None:
            self._opening = _in_thread(self._open_sync)
        opening = self._opening
        # The opening is nobody's task and no loop's future: a cancelled caller, or a loop
        # that dies meanwhile, leaves it to finish, and any loop's next call uses it.
        await asyncio.shield(job_end(asyncio.get_running_loop(), opening))
        if opening.exception() is not None:
            if self._opening is opening:
                self._opening = None  # a failed open may be tried again
            opening.result()
        assert self._sync is not None and self._runner is not None
        return self._sync, self._runner

    def _open_sync(self) -> None:
        db = SessionDB(
            self._db_path,
            url=self._url,
            read_only=self._read_only,
            auto_migrate=self._auto_migrate,
            retry=single_attempt(self._retry),
            busy_timeout_s=self._busy_timeout_s,
            backup_on_adopt=self._backup_on_adopt,
        )
        self._runner = AsyncStore(db.store, retry=self._retry, closer=db.close)
        self._sync = db

    async def close(self) -> None:
        """Wait for the writes in progress, then close the store (idempotent)."""
        self._closed = True
        opening = self._opening
        if opening is not None and not opening.done():
            await asyncio.shield(job_end(asyncio.get_running_loop(), opening))
        if self._runner is not None:
            await self._runner.close()

    async def aclose(self) -> None:
        """:meth:`close` under the name ``contextlib.aclosing`` calls."""
        await self.close()

    async def __aenter__(self) -> AsyncSessionDB:
        return await self.open()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- what SessionDB exposes besides its methods -------------------------------------------
    def _require_open(self) -> SessionDB:
        if self._sync is None:
            raise StoreClosedError("not open yet: `await db.open()` (or `async with`) first")
        return self._sync

    @property
    def url(self) -> str:
        return self._require_open().url

    @property
    def db_path(self) -> Path | None:
        return self._require_open().db_path

    @property
    def adoption_backup(self) -> Path | None:
        return self._require_open().adoption_backup

    @property
    def store(self) -> Store:
        """The sync store underneath (its retry policy is a single attempt)."""
        return self._require_open().store

    @property
    def async_store(self) -> AsyncStore:
        self._require_open()
        assert self._runner is not None
        return self._runner

    @property
    def repository(self) -> AsyncSessionRepository:
        """The typed repository, as coroutines, on the same store and threads."""
        sync = self._require_open()
        if self._repository is None:
            self._repository = AsyncSessionRepository(self.async_store, sync.repository)
        return self._repository

    # -- the runner's two doors ---------------------------------------------------------------
    async def _read(self, call: Callable[[SessionDB], T]) -> T:
        db, runner = await self._opened()
        return await runner.read(functools.partial(call, db))

    async def _write(
        self, call: Callable[[SessionDB], T], idempotency_key: Hashable | None = None
    ) -> T:
        db, runner = await self._opened()
        return await runner.write(functools.partial(call, db), idempotency_key=idempotency_key)

    # -- appends with an idempotency key (by hand) --------------------------------------------
    async def append_message(
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
        turn_lease_ttl_seconds: float = 300.0,
        message_uid: str | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> int:
        """``SessionDB.append_message``; ``idempotency_key``: see :meth:`append_messages`."""

        def append(db: SessionDB) -> tuple[int, ...]:
            return (
                db.append_message(
                    session_id,
                    role,
                    content,
                    tool_name,
                    tool_calls,
                    tool_call_id,
                    token_count,
                    finish_reason,
                    reasoning,
                    reasoning_details,
                    codex_reasoning_items,
                    reasoning_content,
                    codex_message_items,
                    platform_message_id,
                    observed,
                    timestamp,
                    effect_disposition,
                    api_content,
                    _compressed_summary,
                    display_kind,
                    display_metadata,
                    compression_lock_holder,
                    turn_lease_holder,
                    turn_lease_ttl_seconds,
                    message_uid,
                ),
            )

        ids = await self._write(append, _append_key(session_id, idempotency_key))
        return ids[0]

    async def append_messages(
        self,
        session_id: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        idempotency_key: str | None = None,
    ) -> list[int]:
        """``SessionDB.append_messages`` (one turn, one transaction, all or nothing).

        ``idempotency_key`` names this append within the session (a turn id, say): if an
        append under it already committed, its ids are returned and nothing is written, and
        once the call has returned, cancelled or not, :meth:`committed_ids` tells whether it
        committed. Remembered by this object in this process, for the 10,000 most recent
        keys (:mod:`sessionstore.storage.keyed_writes`). (The ids are kept as a tuple, so
        no caller can change what the next one is told.)
        """
        ids = await self._write(
            lambda db: tuple(db.append_messages(session_id, messages)),
            _append_key(session_id, idempotency_key),
        )
        return list(ids)

    def committed_ids(self, session_id: str, idempotency_key: str) -> list[int] | None:
        """The ids of the messages appended to ``session_id`` under ``idempotency_key``, or
        None if no such append committed. Final once that append's call has returned (also
        when it was cancelled or timed out): None then means it never will."""
        key = _append_key(session_id, idempotency_key)
        found = self.async_store.committed(key) if key is not None else None
        return None if found is None else list(found.result)

    # --- generated by scripts/gen_async_api.py from SessionDB: do not edit by hand ---
    async def create_session(
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
        return await self._write(
            lambda db: db.create_session(
                session_id,
                source,
                model,
                model_config,
                system_prompt,
                user_id,
                parent_session_id,
                **extra,
            )
        )

    async def end_session(self, session_id: str, end_reason: str) -> None:
        return await self._write(lambda db: db.end_session(session_id, end_reason))

    async def reopen_session(self, session_id: str) -> None:
        return await self._write(lambda db: db.reopen_session(session_id))

    async def reopen_if_explicitly_closed(
        self,
        session_id: str,
        *,
        provenance: str,
        patience_s: float | None = None,
    ) -> str | None:
        return await self._write(
            lambda db: db.reopen_if_explicitly_closed(
                session_id,
                provenance=provenance,
                patience_s=patience_s,
            )
        )

    async def promote_to_session_reset(
        self,
        session_id: str,
        reason: str = 'session_reset',
    ) -> bool:
        return await self._write(lambda db: db.promote_to_session_reset(session_id, reason))

    async def update_system_prompt(self, session_id: str, system_prompt: str) -> None:
        return await self._write(lambda db: db.update_system_prompt(session_id, system_prompt))

    async def update_token_counts(
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
        task: str = '',
    ) -> None:
        return await self._write(
            lambda db: db.update_token_counts(
                session_id,
                input_tokens,
                output_tokens,
                model,
                cache_read_tokens,
                cache_write_tokens,
                reasoning_tokens,
                estimated_cost_usd,
                actual_cost_usd,
                cost_status,
                cost_source,
                pricing_version,
                billing_provider,
                billing_base_url,
                billing_mode,
                api_call_count,
                absolute,
                source,
                task,
            )
        )

    async def record_auxiliary_usage(
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
        return await self._write(
            lambda db: db.record_auxiliary_usage(
                session_id,
                task,
                model=model,
                billing_provider=billing_provider,
                billing_base_url=billing_base_url,
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                cache_read_tokens=cache_read_tokens,
                cache_write_tokens=cache_write_tokens,
                reasoning_tokens=reasoning_tokens,
                estimated_cost_usd=estimated_cost_usd,
                api_call_count=api_call_count,
            )
        )

    async def get_model_usage(self, session_id: str | None = None) -> list[dict[str, Any]]:
        return await self._read(lambda db: db.get_model_usage(session_id))

    async def get_dominant_session_model_route(self, session_id: str) -> dict[str, Any] | None:
        return await self._read(lambda db: db.get_dominant_session_model_route(session_id))

    async def get_recent_session_model_route(self, session_id: str) -> dict[str, Any] | None:
        return await self._read(lambda db: db.get_recent_session_model_route(session_id))

    async def auxiliary_usage_by_task(self, session_id: str) -> dict[str, dict[str, float]]:
        return await self._read(lambda db: db.auxiliary_usage_by_task(session_id))

    async def usage_totals(
        self,
        *,
        min_message_count: int = 1,
        include_archived: bool = False,
    ) -> dict[str, float]:
        return await self._read(
            lambda db: db.usage_totals(
                min_message_count=min_message_count,
                include_archived=include_archived,
            )
        )

    async def ensure_session(
        self,
        session_id: str,
        source: str = 'unknown',
        model: str | None = None,
        **extra: Any,
    ) -> str:
        return await self._write(lambda db: db.ensure_session(session_id, source, model, **extra))

    async def get_session(self, session_id: str) -> dict[str, Any] | None:
        return await self._read(lambda db: db.get_session(session_id))

    async def resolve_session_id(self, session_id_or_prefix: str) -> str | None:
        return await self._read(lambda db: db.resolve_session_id(session_id_or_prefix))

    async def set_session_title(self, session_id: str, title: str | None) -> bool:
        return await self._write(lambda db: db.set_session_title(session_id, title))

    async def set_auto_title_if_empty(self, session_id: str, title: str | None) -> bool:
        return await self._write(lambda db: db.set_auto_title_if_empty(session_id, title))

    async def set_auto_title(self, session_id: str, title: str | None, *, source: str) -> bool:
        return await self._write(lambda db: db.set_auto_title(session_id, title, source=source))

    async def get_session_title_source(self, session_id: str) -> str | None:
        return await self._read(lambda db: db.get_session_title_source(session_id))

    async def set_session_title_source(self, session_id: str, source: str) -> bool:
        return await self._write(lambda db: db.set_session_title_source(session_id, source))

    async def set_session_pinned(self, session_id: str, pinned: bool) -> bool:
        return await self._write(lambda db: db.set_session_pinned(session_id, pinned))

    async def set_session_hidden(self, session_id: str, hidden: bool) -> bool:
        return await self._write(lambda db: db.set_session_hidden(session_id, hidden))

    async def set_session_read(self, session_id: str, read: bool = True) -> bool:
        return await self._write(lambda db: db.set_session_read(session_id, read))

    async def session_lifecycle_statuses(self, session_ids: Sequence[str] | None) -> dict[str, str]:
        return await self._read(lambda db: db.session_lifecycle_statuses(session_ids))

    async def touch_session_activity(
        self,
        session_id: str,
        ts: float | None = None,
        *,
        description: str | None = None,
        provenance: Any = None,
    ) -> None:
        return await self._write(
            lambda db: db.touch_session_activity(
                session_id,
                ts,
                description=description,
                provenance=provenance,
            )
        )

    async def clear_session_activity_labels(self, session_id: str) -> None:
        return await self._write(lambda db: db.clear_session_activity_labels(session_id))

    async def get_session_activity(self, session_id: str) -> dict[str, Any] | None:
        return await self._read(lambda db: db.get_session_activity(session_id))

    async def try_acquire_session_turn_lease(
        self,
        session_id: str,
        holder: str,
        *,
        ttl_seconds: float = 300.0,
        patience_s: float | None = None,
    ) -> bool:
        return await self._write(
            lambda db: db.try_acquire_session_turn_lease(
                session_id,
                holder,
                ttl_seconds=ttl_seconds,
                patience_s=patience_s,
            )
        )

    async def acquire_session_turn_lease(
        self,
        session_id: str,
        holder: str,
        *,
        ttl_seconds: float = 300.0,
        wait_seconds: float = 1800.0,
        poll_interval_seconds: float = 1.0,
        on_wait: Callable[[float], Any] | None = None,
        wait_notice_interval_seconds: float = 15.0,
        should_abort: Callable[[], Any] | None = None,
        acquire_patience_s: float = 0.5,
        on_contended: Callable[[], Any] | None = None,
    ) -> bool:
        return await self._write(
            lambda db: db.acquire_session_turn_lease(
                session_id,
                holder,
                ttl_seconds=ttl_seconds,
                wait_seconds=wait_seconds,
                poll_interval_seconds=poll_interval_seconds,
                on_wait=on_wait,
                wait_notice_interval_seconds=wait_notice_interval_seconds,
                should_abort=should_abort,
                acquire_patience_s=acquire_patience_s,
                on_contended=on_contended,
            )
        )

    async def session_turn_lease_expires_at(self, session_id: str, holder: str) -> float | None:
        return await self._read(lambda db: db.session_turn_lease_expires_at(session_id, holder))

    async def refresh_session_turn_lease(
        self,
        session_id: str,
        holder: str,
        *,
        ttl_seconds: float = 300.0,
        patience_s: float | None = None,
    ) -> bool:
        return await self._write(
            lambda db: db.refresh_session_turn_lease(
                session_id,
                holder,
                ttl_seconds=ttl_seconds,
                patience_s=patience_s,
            )
        )

    async def release_session_turn_lease(self, session_id: str, holder: str) -> None:
        return await self._write(lambda db: db.release_session_turn_lease(session_id, holder))

    async def get_session_title(self, session_id: str) -> str | None:
        return await self._read(lambda db: db.get_session_title(session_id))

    async def get_session_by_title(self, title: str) -> dict[str, Any] | None:
        return await self._read(lambda db: db.get_session_by_title(title))

    async def resolve_session_by_title(self, title: str) -> str | None:
        return await self._read(lambda db: db.resolve_session_by_title(title))

    async def get_next_title_in_lineage(self, base_title: str) -> str:
        return await self._read(lambda db: db.get_next_title_in_lineage(base_title))

    async def get_compression_tip(self, session_id: str) -> str | None:
        return await self._read(lambda db: db.get_compression_tip(session_id))

    async def get_compression_chain(self, session_id: str) -> list[str]:
        return await self._read(lambda db: db.get_compression_chain(session_id))

    async def get_session_rich_row(
        self,
        session_id: str,
        compact_rows: bool = False,
    ) -> dict[str, Any] | None:
        return await self._read(lambda db: db.get_session_rich_row(session_id, compact_rows))

    async def get_session_rich_rows(
        self,
        session_ids: Sequence[str],
        compact_rows: bool = False,
    ) -> dict[str, dict[str, Any]]:
        return await self._read(lambda db: db.get_session_rich_rows(session_ids, compact_rows))

    async def list_sessions_rich(
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
        return await self._read(
            lambda db: db.list_sessions_rich(
                source,
                exclude_sources,
                limit,
                offset,
                include_children,
                project_compression_tips,
                include_archived,
                archived_only,
                cwd_prefix,
                min_message_count,
                order_by_last_active,
                id_query,
                search_query,
                compact_rows,
                include_pinned,
                include_hidden,
                include_subagents,
                sources,
                session_key,
            )
        )

    async def set_session_archived(self, session_id: str, archived: bool = True) -> bool:
        return await self._write(lambda db: db.set_session_archived(session_id, archived))

    async def unarchive_recoverable_session(self, session_id: str) -> bool:
        return await self._write(lambda db: db.unarchive_recoverable_session(session_id))

    async def distinct_session_cwds(self, include_archived: bool = False) -> list[dict[str, Any]]:
        return await self._read(lambda db: db.distinct_session_cwds(include_archived))

    async def update_session_cwd(
        self,
        session_id: str,
        cwd: str | None,
        git_branch: str | None = None,
        git_repo_root: str | None = None,
        replace_git_meta: bool = False,
    ) -> int | None:
        return await self._write(
            lambda db: db.update_session_cwd(
                session_id,
                cwd,
                git_branch,
                git_repo_root,
                replace_git_meta,
            )
        )

    async def publish_session_git_metadata(
        self,
        session_id: str,
        cwd: str,
        generation: int,
        git_branch: str | None = None,
        git_repo_root: str | None = None,
    ) -> bool:
        return await self._write(
            lambda db: db.publish_session_git_metadata(
                session_id,
                cwd,
                generation,
                git_branch,
                git_repo_root,
            )
        )

    async def backfill_repo_roots(self, cwd_to_root: Mapping[str, str]) -> int:
        return await self._write(lambda db: db.backfill_repo_roots(cwd_to_root))

    async def append_messages_batch(
        self,
        session_id: str,
        messages: list[dict[str, Any]],
        compression_lock_holder: str | None = None,
        turn_lease_holder: str | None = None,
        chunk_rows: int | None = None,
        turn_lease_ttl_seconds: float = 300.0,
    ) -> int:
        return await self._write(
            lambda db: db.append_messages_batch(
                session_id,
                messages,
                compression_lock_holder,
                turn_lease_holder,
                chunk_rows,
                turn_lease_ttl_seconds,
            )
        )

    async def get_messages(
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
        return await self._read(
            lambda db: db.get_messages(
                session_id,
                include_inactive,
                limit,
                offset,
                latest,
                after_id,
                include_compacted,
                include_ancestors,
            )
        )

    async def get_messages_as_conversation(
        self,
        session_id: str,
        include_ancestors: bool = False,
        include_inactive: bool = False,
        repair_alternation: bool = False,
        include_row_ids: bool = False,
        include_compacted: bool = False,
    ) -> list[dict[str, Any]]:
        return await self._read(
            lambda db: db.get_messages_as_conversation(
                session_id,
                include_ancestors,
                include_inactive,
                repair_alternation,
                include_row_ids,
                include_compacted,
            )
        )

    async def get_resume_conversations(
        self,
        session_id: str,
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        return await self._read(lambda db: db.get_resume_conversations(session_id))

    async def display_message_count(self, session_id: str) -> int:
        return await self._read(lambda db: db.display_message_count(session_id))

    async def get_resume_message_count(self, session_id: str, *, tip_only: bool = False) -> int:
        return await self._read(
            lambda db: db.get_resume_message_count(
                session_id,
                tip_only=tip_only,
            )
        )

    async def assert_resume_safe(
        self,
        session_id: str,
        max_messages: int | None = None,
        *,
        tip_only: bool = False,
    ) -> int:
        return await self._read(
            lambda db: db.assert_resume_safe(
                session_id,
                max_messages,
                tip_only=tip_only,
            )
        )

    async def assert_export_safe(self, session_id: str, max_messages: int | None = None) -> int:
        return await self._read(lambda db: db.assert_export_safe(session_id, max_messages))

    async def assert_exports_safe(
        self,
        session_ids: Sequence[str],
        max_messages: int | None = None,
    ) -> None:
        return await self._read(lambda db: db.assert_exports_safe(session_ids, max_messages))

    async def latest_conversation_boundary(self, session_key: str, source: str) -> int | None:
        return await self._read(lambda db: db.latest_conversation_boundary(session_key, source))

    async def find_pr_url_messages(self, session_ids: Sequence[str]) -> list[dict[str, Any]]:
        return await self._read(lambda db: db.find_pr_url_messages(session_ids))

    async def get_latest_todo_result(
        self,
        session_id: str,
        *,
        max_chars: int | None = None,
    ) -> str | None:
        return await self._read(
            lambda db: db.get_latest_todo_result(
                session_id,
                max_chars=max_chars,
            )
        )

    async def get_ancestor_display_prefix(self, session_id: str) -> list[dict[str, Any]]:
        return await self._read(lambda db: db.get_ancestor_display_prefix(session_id))

    async def get_conversation_root(self, session_id: str) -> str:
        return await self._read(lambda db: db.get_conversation_root(session_id))

    async def set_latest_user_api_content(
        self,
        session_id: str,
        content: Any,
        api_content: str,
    ) -> int:
        return await self._write(
            lambda db: db.set_latest_user_api_content(
                session_id,
                content,
                api_content,
            )
        )

    async def patch_session_model_config(self, session_id: str, patch: dict[str, Any]) -> None:
        return await self._write(lambda db: db.patch_session_model_config(session_id, patch))

    async def get_session_model_config_value(
        self,
        session_id: str,
        key: str,
        default: Any = None,
    ) -> Any:
        return await self._read(
            lambda db: db.get_session_model_config_value(
                session_id,
                key,
                default,
            )
        )

    async def update_conversation_model_config_value(
        self,
        session_id: str,
        key: str,
        update: Callable[[Any], Any],
    ) -> str | None:
        return await self._write(
            lambda db: db.update_conversation_model_config_value(
                session_id,
                key,
                update,
            )
        )

    async def session_ids_with_model_config_key(self, key: str) -> list[str]:
        return await self._read(lambda db: db.session_ids_with_model_config_key(key))

    async def update_session_tool_names(self, session_id: str, pin: Any) -> None:
        return await self._write(lambda db: db.update_session_tool_names(session_id, pin))

    async def set_session_yolo(self, session_id: str, enabled: bool) -> None:
        return await self._write(lambda db: db.set_session_yolo(session_id, enabled))

    async def get_message_role(self, session_id: str, row_id: int) -> str | None:
        return await self._read(lambda db: db.get_message_role(session_id, row_id))

    async def latest_conversation_role(self, session_id: str) -> str | None:
        return await self._read(lambda db: db.latest_conversation_role(session_id))

    async def latest_message_row_id(
        self,
        session_id: str,
        *,
        role: str = 'user',
        offset: int = 0,
        require_text: bool = True,
    ) -> int | None:
        return await self._read(
            lambda db: db.latest_message_row_id(
                session_id,
                role=role,
                offset=offset,
                require_text=require_text,
            )
        )

    async def latest_user_message_row_id(self, session_id: str) -> int | None:
        return await self._read(lambda db: db.latest_user_message_row_id(session_id))

    async def get_first_assistant_text(self, session_id: str) -> str:
        return await self._read(lambda db: db.get_first_assistant_text(session_id))

    async def get_active_message_watermark(self, session_id: str) -> int:
        return await self._read(lambda db: db.get_active_message_watermark(session_id))

    async def resolve_active_row_id(self, session_id: str, row_id: int) -> int | None:
        return await self._read(lambda db: db.resolve_active_row_id(session_id, row_id))

    async def set_message_api_content(
        self,
        session_id: str,
        row_id: int,
        content: Any,
        api_content: str,
    ) -> int:
        return await self._write(
            lambda db: db.set_message_api_content(
                session_id,
                row_id,
                content,
                api_content,
            )
        )

    async def set_user_message_content(self, session_id: str, row_id: int, content: Any) -> int:
        return await self._write(
            lambda db: db.set_user_message_content(
                session_id,
                row_id,
                content,
            )
        )

    async def deactivate_message(self, session_id: str, row_id: int) -> int:
        return await self._write(lambda db: db.deactivate_message(session_id, row_id))

    async def deactivate_messages_by_display_kind(self, session_id: str, display_kind: str) -> int:
        return await self._write(
            lambda db: db.deactivate_messages_by_display_kind(
                session_id,
                display_kind,
            )
        )

    async def set_latest_matching_message_display_kind(
        self,
        session_id: str,
        *,
        role: str,
        content: str,
        display_kind: str,
        display_metadata: dict[str, Any] | None = None,
    ) -> bool:
        return await self._write(
            lambda db: db.set_latest_matching_message_display_kind(
                session_id,
                role=role,
                content=content,
                display_kind=display_kind,
                display_metadata=display_metadata,
            )
        )

    async def count_messages_all(self, session_id: str) -> int:
        return await self._read(lambda db: db.count_messages_all(session_id))

    async def set_message_reaction(
        self,
        session_id: str,
        message_row_id: int,
        emoji: str | None,
        *,
        author: str = 'user',
    ) -> list[dict[str, Any]] | None:
        return await self._write(
            lambda db: db.set_message_reaction(
                session_id,
                message_row_id,
                emoji,
                author=author,
            )
        )

    async def get_message_reactions(
        self,
        session_id: str,
        message_row_id: int,
    ) -> list[dict[str, Any]]:
        return await self._read(lambda db: db.get_message_reactions(session_id, message_row_id))

    async def take_unseen_reactions(
        self,
        session_id: str,
        *,
        author: str = 'user',
    ) -> list[dict[str, Any]]:
        return await self._write(lambda db: db.take_unseen_reactions(session_id, author=author))

    async def queue_token_counts(self, session_id: str, **kwargs: Any) -> None:
        return await self._write(lambda db: db.queue_token_counts(session_id, **kwargs))

    async def flush_token_counts(self, timeout: float = 5.0) -> bool:
        return await self._read(lambda db: db.flush_token_counts(timeout))

    async def clear_messages(self, session_id: str) -> None:
        return await self._write(lambda db: db.clear_messages(session_id))

    async def get_session_delete_targets(self, session_id: str) -> list[str]:
        return await self._read(lambda db: db.get_session_delete_targets(session_id))

    async def delete_session(
        self,
        session_id: str,
        sessions_dir: str | os.PathLike[str] | None = None,
        expected_delete_ids: Sequence[str] | None = None,
        expected_display_messages: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
        exclude_active_write_guards: bool = False,
        include_compression_chain: bool = False,
    ) -> bool:
        return await self._write(
            lambda db: db.delete_session(
                session_id,
                sessions_dir,
                expected_delete_ids,
                expected_display_messages,
                exclude_active_write_guards,
                include_compression_chain,
            )
        )

    async def delete_sessions(
        self,
        session_ids: Sequence[str],
        sessions_dir: str | os.PathLike[str] | None = None,
        exclude_active_write_guards: bool = False,
        skipped_ids: list[str] | None = None,
        include_compression_chain: bool = False,
    ) -> int:
        return await self._write(
            lambda db: db.delete_sessions(
                session_ids,
                sessions_dir,
                exclude_active_write_guards,
                skipped_ids,
                include_compression_chain,
            )
        )

    async def list_never_active_keyed_sessions(
        self,
        *,
        older_than_days: float,
    ) -> list[dict[str, Any]]:
        return await self._read(
            lambda db: db.list_never_active_keyed_sessions(
                older_than_days=older_than_days,
            )
        )

    async def prune_never_active_keyed_sessions(
        self,
        *,
        older_than_days: float,
        sessions_dir: str | os.PathLike[str] | None = None,
    ) -> tuple[int, int, int]:
        return await self._write(
            lambda db: db.prune_never_active_keyed_sessions(
                older_than_days=older_than_days,
                sessions_dir=sessions_dir,
            )
        )

    async def delete_session_if_empty(
        self,
        session_id: str,
        sessions_dir: str | os.PathLike[str] | None = None,
    ) -> bool:
        return await self._write(lambda db: db.delete_session_if_empty(session_id, sessions_dir))

    async def prune_empty_ghost_sessions(
        self,
        sessions_dir: str | os.PathLike[str] | None = None,
    ) -> int:
        return await self._write(lambda db: db.prune_empty_ghost_sessions(sessions_dir))

    async def update_session_model(
        self,
        session_id: str,
        model: str | None,
        provider: str | None = None,
        *,
        base_url: str | None = None,
        api_mode: str | None = None,
    ) -> bool:
        return await self._write(
            lambda db: db.update_session_model(
                session_id,
                model,
                provider,
                base_url=base_url,
                api_mode=api_mode,
            )
        )

    async def update_session_meta(
        self,
        session_id: str,
        model_config_json: str | None,
        model: str | None = None,
    ) -> bool:
        return await self._write(
            lambda db: db.update_session_meta(
                session_id,
                model_config_json,
                model,
            )
        )

    async def update_session_billing_route(
        self,
        session_id: str,
        *,
        provider: str,
        base_url: str,
        billing_mode: str | None = None,
    ) -> bool:
        return await self._write(
            lambda db: db.update_session_billing_route(
                session_id,
                provider=provider,
                base_url=base_url,
                billing_mode=billing_mode,
            )
        )

    async def rewind_to_message(
        self,
        session_id: str,
        target_message_id: int,
        *,
        preserve_compaction_handoff: bool = False,
        expected_active_ids: Sequence[int] | None = None,
        expected_target_content: Any = None,
    ) -> dict[str, Any]:
        return await self._write(
            lambda db: db.rewind_to_message(
                session_id,
                target_message_id,
                preserve_compaction_handoff=preserve_compaction_handoff,
                expected_active_ids=expected_active_ids,
                expected_target_content=expected_target_content,
            )
        )

    async def rewind_user_turn(
        self,
        session_id: str,
        user_ordinal: int,
        *,
        warm_history: list[dict[str, Any]] | None = None,
        require_retryable: bool = False,
        require_composite: bool = False,
        adopt_row_ids: bool = False,
    ) -> RewindOutcome:
        return await self._write(
            lambda db: db.rewind_user_turn(
                session_id,
                user_ordinal,
                warm_history=warm_history,
                require_retryable=require_retryable,
                require_composite=require_composite,
                adopt_row_ids=adopt_row_ids,
            )
        )

    async def get_active_message_ids(self, session_id: str) -> list[int]:
        return await self._read(lambda db: db.get_active_message_ids(session_id))

    async def restore_rewound(self, session_id: str, since_message_id: int) -> int:
        return await self._write(lambda db: db.restore_rewound(session_id, since_message_id))

    async def list_recent_user_messages(
        self,
        session_id: str,
        limit: int = 20,
        include_inactive: bool = False,
    ) -> list[dict[str, Any]]:
        return await self._read(
            lambda db: db.list_recent_user_messages(
                session_id,
                limit,
                include_inactive,
            )
        )

    async def has_archived_messages(self, session_id: str) -> bool:
        return await self._read(lambda db: db.has_archived_messages(session_id))

    async def archive_and_compact(
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
        return await self._write(
            lambda db: db.archive_and_compact(
                session_id,
                compacted_messages,
                model_config_patch,
                watermark,
                lock_holder,
                tail_count,
                carried_messages,
                covered_ids,
                unresolved_held,
            )
        )

    async def replace_messages(
        self,
        session_id: str,
        messages: Sequence[Mapping[str, Any]],
        active_only: bool = False,
        archive_dropped: bool = False,
        reject_active_turn_lease: bool = False,
    ) -> int:
        return await self._write(
            lambda db: db.replace_messages(
                session_id,
                messages,
                active_only,
                archive_dropped,
                reject_active_turn_lease,
            )
        )

    async def append_delegation_delivery(
        self,
        session_id: str,
        content: Any,
        metadata: Mapping[str, Any],
    ) -> int:
        return await self._write(
            lambda db: db.append_delegation_delivery(
                session_id,
                content,
                metadata,
            )
        )

    async def has_platform_message_id(self, session_id: str, platform_message_id: str) -> bool:
        return await self._read(
            lambda db: db.has_platform_message_id(
                session_id,
                platform_message_id,
            )
        )

    async def try_acquire_compression_lock(
        self,
        session_id: str,
        holder: str,
        ttl_seconds: float = 300.0,
    ) -> bool:
        return await self._write(
            lambda db: db.try_acquire_compression_lock(
                session_id,
                holder,
                ttl_seconds,
            )
        )

    async def refresh_compression_lock(
        self,
        session_id: str,
        holder: str,
        ttl_seconds: float = 300.0,
    ) -> bool:
        return await self._write(
            lambda db: db.refresh_compression_lock(
                session_id,
                holder,
                ttl_seconds,
            )
        )

    async def release_compression_lock(self, session_id: str, holder: str) -> bool:
        return await self._write(lambda db: db.release_compression_lock(session_id, holder))

    async def get_compression_lock_holder(self, session_id: str) -> str | None:
        return await self._read(lambda db: db.get_compression_lock_holder(session_id))

    async def publish_compression_child(
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
        return await self._write(
            lambda db: db.publish_compression_child(
                parent_session_id=parent_session_id,
                child_session_id=child_session_id,
                source=source,
                messages=messages,
                model=model,
                model_config=model_config,
                system_prompt=system_prompt,
                cwd=cwd,
                profile_name=profile_name,
                compression_lock_holder=compression_lock_holder,
                require_compression_lease=require_compression_lease,
                require_lease_refresh=require_lease_refresh,
                lease_ttl_seconds=lease_ttl_seconds,
                watermark=watermark,
                watermark_ceiling=watermark_ceiling,
            )
        )

    async def find_live_compression_child(self, parent_session_id: str) -> dict[str, Any] | None:
        return await self._read(lambda db: db.find_live_compression_child(parent_session_id))

    async def reopen_orphaned_compression_session(self, session_id: str) -> bool:
        return await self._write(lambda db: db.reopen_orphaned_compression_session(session_id))

    async def is_kanban_owned_session(self, session_id: str) -> bool:
        return await self._read(lambda db: db.is_kanban_owned_session(session_id))

    async def retag_kanban_worker_sessions(self, workspaces_root: str | os.PathLike[str]) -> int:
        return await self._write(lambda db: db.retag_kanban_worker_sessions(workspaces_root))

    async def record_compression_failure_cooldown(
        self,
        session_id: str,
        cooldown_until: float,
        error: str | None = None,
    ) -> bool:
        return await self._write(
            lambda db: db.record_compression_failure_cooldown(
                session_id,
                cooldown_until,
                error,
            )
        )

    async def get_compression_failure_cooldown(self, session_id: str) -> dict[str, Any] | None:
        return await self._read(lambda db: db.get_compression_failure_cooldown(session_id))

    async def clear_compression_failure_cooldown(self, session_id: str) -> bool:
        return await self._write(lambda db: db.clear_compression_failure_cooldown(session_id))

    async def get_compression_failure_cooldown_row(self, session_id: str) -> dict[str, Any]:
        return await self._read(lambda db: db.get_compression_failure_cooldown_row(session_id))

    async def restore_compression_failure_cooldown_row(
        self,
        session_id: str,
        snapshot: Mapping[str, Any],
    ) -> None:
        return await self._write(
            lambda db: db.restore_compression_failure_cooldown_row(
                session_id,
                snapshot,
            )
        )

    async def get_compression_fallback_streak(self, session_id: str) -> int:
        return await self._read(lambda db: db.get_compression_fallback_streak(session_id))

    async def get_compression_ineffective_count(self, session_id: str) -> int:
        return await self._read(lambda db: db.get_compression_ineffective_count(session_id))

    async def set_compression_ineffective_count(self, session_id: str, count: int) -> None:
        return await self._write(lambda db: db.set_compression_ineffective_count(session_id, count))

    async def get_compression_overload_streak(self, session_id: str) -> int:
        return await self._read(lambda db: db.get_compression_overload_streak(session_id))

    async def set_compression_overload_streak(self, session_id: str, streak: int) -> None:
        return await self._write(lambda db: db.set_compression_overload_streak(session_id, streak))

    async def increment_compression_overload_streak(self, session_id: str) -> int | None:
        return await self._write(lambda db: db.increment_compression_overload_streak(session_id))

    async def get_compression_recovery_deadline(self, session_id: str) -> float:
        return await self._read(lambda db: db.get_compression_recovery_deadline(session_id))

    async def set_compression_recovery_deadline(self, session_id: str, deadline: float) -> None:
        return await self._write(
            lambda db: db.set_compression_recovery_deadline(
                session_id,
                deadline,
            )
        )

    async def set_compression_fallback_streak(self, session_id: str, streak: int) -> None:
        return await self._write(lambda db: db.set_compression_fallback_streak(session_id, streak))

    async def backfill_null_session_profiles(self, profile_name: str) -> int:
        return await self._write(lambda db: db.backfill_null_session_profiles(profile_name))

    async def backfill_acp_session_cwd(self) -> int:
        return await self._write(lambda db: db.backfill_acp_session_cwd())

    async def find_crossed_profile_sessions(self, owner: str) -> dict[str, list[dict[str, Any]]]:
        return await self._read(lambda db: db.find_crossed_profile_sessions(owner))

    async def key_profiles_for_chat(self, platform: str, chat_id: str) -> set[str]:
        return await self._read(lambda db: db.key_profiles_for_chat(platform, chat_id))

    async def relabel_sessions_to_key_profile(self, ids: Iterable[str]) -> int:
        return await self._write(lambda db: db.relabel_sessions_to_key_profile(ids))

    async def sever_crossed_parents(self, ids: Iterable[str]) -> int:
        return await self._write(lambda db: db.sever_crossed_parents(ids))

    async def rekey_legacy_main_sessions(self, ids: Iterable[str], profile: str) -> int:
        return await self._write(lambda db: db.rekey_legacy_main_sessions(ids, profile))

    async def rekey_profile_state(self, old_name: str, new_name: str) -> dict[str, int]:
        return await self._write(lambda db: db.rekey_profile_state(old_name, new_name))

    async def purge_profile_state(self, profile: str) -> dict[str, int]:
        return await self._write(lambda db: db.purge_profile_state(profile))

    async def is_explicit_fork_child(self, session_id: str) -> bool:
        return await self._read(lambda db: db.is_explicit_fork_child(session_id))

    async def declared_scope_identity(self, session_id: str) -> tuple[bool, str]:
        return await self._read(lambda db: db.declared_scope_identity(session_id))

    async def get_meta(self, key: str) -> str | None:
        return await self._read(lambda db: db.get_meta(key))

    async def list_meta_prefix(self, prefix: str) -> list[tuple[str, str | None]]:
        return await self._read(lambda db: db.list_meta_prefix(prefix))

    async def set_meta(self, key: str, value: str | None, *, cursor: Any = None) -> None:
        return await self._write(lambda db: db.set_meta(key, value, cursor=cursor))

    async def record_gateway_session_peer(
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
        return await self._write(
            lambda db: db.record_gateway_session_peer(
                session_id,
                source=source,
                user_id=user_id,
                session_key=session_key,
                chat_id=chat_id,
                chat_type=chat_type,
                thread_id=thread_id,
                display_name=display_name,
                origin_json=origin_json,
                include_compression_ancestors=include_compression_ancestors,
                transport_profile=transport_profile,
            )
        )

    async def set_expiry_finalized(self, session_id: str, finalized: bool = True) -> None:
        return await self._write(lambda db: db.set_expiry_finalized(session_id, finalized))

    async def list_gateway_sessions(
        self,
        *,
        platform: str | None = None,
        active_only: bool = True,
    ) -> list[dict[str, Any]]:
        return await self._read(
            lambda db: db.list_gateway_sessions(
                platform=platform,
                active_only=active_only,
            )
        )

    async def find_session_by_origin(
        self,
        *,
        platform: str,
        chat_id: str,
        thread_id: str | None = None,
        user_id: str | None = None,
    ) -> str | None:
        return await self._read(
            lambda db: db.find_session_by_origin(
                platform=platform,
                chat_id=chat_id,
                thread_id=thread_id,
                user_id=user_id,
            )
        )

    async def apply_telegram_topic_migration(self) -> None:
        return await self._write(lambda db: db.apply_telegram_topic_migration())

    async def enable_telegram_topic_mode(
        self,
        *,
        chat_id: str,
        user_id: str,
        profile_name: str = 'default',
        has_topics_enabled: bool | None = None,
        allows_users_to_create_topics: bool | None = None,
    ) -> None:
        return await self._write(
            lambda db: db.enable_telegram_topic_mode(
                chat_id=chat_id,
                user_id=user_id,
                profile_name=profile_name,
                has_topics_enabled=has_topics_enabled,
                allows_users_to_create_topics=allows_users_to_create_topics,
            )
        )

    async def disable_telegram_topic_mode(
        self,
        *,
        chat_id: str,
        profile_name: str = 'default',
        clear_bindings: bool = True,
    ) -> None:
        return await self._write(
            lambda db: db.disable_telegram_topic_mode(
                chat_id=chat_id,
                profile_name=profile_name,
                clear_bindings=clear_bindings,
            )
        )

    async def is_telegram_topic_mode_enabled(
        self,
        *,
        chat_id: str,
        user_id: str,
        profile_name: str = 'default',
    ) -> bool:
        return await self._read(
            lambda db: db.is_telegram_topic_mode_enabled(
                chat_id=chat_id,
                user_id=user_id,
                profile_name=profile_name,
            )
        )

    async def get_telegram_topic_binding(
        self,
        *,
        chat_id: str,
        thread_id: str,
        profile_name: str = 'default',
    ) -> dict[str, Any] | None:
        return await self._read(
            lambda db: db.get_telegram_topic_binding(
                chat_id=chat_id,
                thread_id=thread_id,
                profile_name=profile_name,
            )
        )

    async def list_telegram_topic_bindings_for_chat(
        self,
        *,
        chat_id: str,
        profile_name: str = 'default',
    ) -> list[dict[str, Any]]:
        return await self._read(
            lambda db: db.list_telegram_topic_bindings_for_chat(
                chat_id=chat_id,
                profile_name=profile_name,
            )
        )

    async def get_telegram_topic_binding_by_session(
        self,
        *,
        session_id: str,
    ) -> dict[str, Any] | None:
        return await self._read(
            lambda db: db.get_telegram_topic_binding_by_session(
                session_id=session_id,
            )
        )

    async def delete_telegram_topic_binding(
        self,
        *,
        chat_id: str,
        thread_id: str,
        profile_name: str = 'default',
    ) -> int:
        return await self._write(
            lambda db: db.delete_telegram_topic_binding(
                chat_id=chat_id,
                thread_id=thread_id,
                profile_name=profile_name,
            )
        )

    async def bind_telegram_topic(
        self,
        *,
        chat_id: str,
        thread_id: str,
        user_id: str,
        session_key: str,
        session_id: str,
        managed_mode: str = 'auto',
        profile_name: str = 'default',
    ) -> None:
        return await self._write(
            lambda db: db.bind_telegram_topic(
                chat_id=chat_id,
                thread_id=thread_id,
                user_id=user_id,
                session_key=session_key,
                session_id=session_id,
                managed_mode=managed_mode,
                profile_name=profile_name,
            )
        )

    async def is_telegram_session_linked_to_topic(self, *, session_id: str) -> bool:
        return await self._read(
            lambda db: db.is_telegram_session_linked_to_topic(
                session_id=session_id,
            )
        )

    async def list_unlinked_telegram_sessions_for_user(
        self,
        *,
        chat_id: str,
        user_id: str,
        profile_name: str = 'default',
        limit: int = 10,
    ) -> list[dict[str, Any]]:
        return await self._read(
            lambda db: db.list_unlinked_telegram_sessions_for_user(
                chat_id=chat_id,
                user_id=user_id,
                profile_name=profile_name,
                limit=limit,
            )
        )

    async def find_profile_less_telegram_topic_rows(self) -> list[dict[str, Any]]:
        return await self._read(lambda db: db.find_profile_less_telegram_topic_rows())

    async def relabel_telegram_topic_rows(
        self,
        rows: Iterable[Mapping[str, Any]],
    ) -> dict[str, int]:
        return await self._write(lambda db: db.relabel_telegram_topic_rows(rows))

    async def save_gateway_routing_entry(
        self,
        session_key: str,
        entry_json: str,
        *,
        scope: str = '',
    ) -> None:
        return await self._write(
            lambda db: db.save_gateway_routing_entry(
                session_key,
                entry_json,
                scope=scope,
            )
        )

    async def replace_gateway_routing_entries(
        self,
        entries: Mapping[str, str],
        *,
        scope: str = '',
    ) -> None:
        return await self._write(
            lambda db: db.replace_gateway_routing_entries(
                entries,
                scope=scope,
            )
        )

    async def load_gateway_routing_entries(self, *, scope: str = '') -> dict[str, str]:
        return await self._read(lambda db: db.load_gateway_routing_entries(scope=scope))

    async def delete_gateway_routing_entries(
        self,
        session_keys: Sequence[str],
        *,
        scope: str = '',
    ) -> None:
        return await self._write(
            lambda db: db.delete_gateway_routing_entries(
                session_keys,
                scope=scope,
            )
        )

    async def find_latest_gateway_session_for_peer(
        self,
        *,
        source: str,
        user_id: str | None = None,
        session_key: str | None = None,
        chat_id: str | None = None,
        chat_type: str | None = None,
        thread_id: str | None = None,
    ) -> dict[str, Any] | None:
        return await self._read(
            lambda db: db.find_latest_gateway_session_for_peer(
                source=source,
                user_id=user_id,
                session_key=session_key,
                chat_id=chat_id,
                chat_type=chat_type,
                thread_id=thread_id,
            )
        )

    async def request_handoff(self, session_id: str, platform: str) -> bool:
        return await self._write(lambda db: db.request_handoff(session_id, platform))

    async def get_handoff_state(self, session_id: str) -> dict[str, Any] | None:
        return await self._read(lambda db: db.get_handoff_state(session_id))

    async def register_backend_heartbeat(
        self,
        *,
        backend_id: str,
        pid: int,
        started_at: float,
        last_heartbeat: float | None = None,
        profile: str = '',
        host: str = '',
    ) -> None:
        return await self._write(
            lambda db: db.register_backend_heartbeat(
                backend_id=backend_id,
                pid=pid,
                started_at=started_at,
                last_heartbeat=last_heartbeat,
                profile=profile,
                host=host,
            )
        )

    async def clear_backend_heartbeat(self, backend_id: str) -> bool:
        return await self._write(lambda db: db.clear_backend_heartbeat(backend_id))

    async def prune_stale_heartbeats(self, *, max_age_seconds: float) -> list[str]:
        return await self._write(
            lambda db: db.prune_stale_heartbeats(
                max_age_seconds=max_age_seconds,
            )
        )

    async def list_backend_heartbeats(self) -> list[dict[str, Any]]:
        return await self._read(lambda db: db.list_backend_heartbeats())

    async def list_pending_handoffs(self) -> list[dict[str, Any]]:
        return await self._read(lambda db: db.list_pending_handoffs())

    async def claim_handoff(self, session_id: str) -> bool:
        return await self._write(lambda db: db.claim_handoff(session_id))

    async def complete_handoff(self, session_id: str) -> bool:
        return await self._write(lambda db: db.complete_handoff(session_id))

    async def fail_handoff(
        self,
        session_id: str,
        error: str | None,
        *,
        only_states: tuple[str, ...] | None = None,
    ) -> bool:
        return await self._write(
            lambda db: db.fail_handoff(
                session_id,
                error,
                only_states=only_states,
            )
        )

    async def increment_hygiene_failure_streak(self, session_key: str) -> int:
        return await self._write(lambda db: db.increment_hygiene_failure_streak(session_key))

    async def reset_hygiene_failure_streak(self, session_key: str) -> None:
        return await self._write(lambda db: db.reset_hygiene_failure_streak(session_key))

    async def gateway_routing_entry_for_session(self, session_id: str) -> dict[str, Any] | None:
        return await self._read(lambda db: db.gateway_routing_entry_for_session(session_id))

    async def list_gateway_routing_rows(self) -> list[dict[str, Any]]:
        return await self._read(lambda db: db.list_gateway_routing_rows())

    async def insert_gateway_routing_rows_if_absent(self, rows: Iterable[Sequence[Any]]) -> int:
        return await self._write(lambda db: db.insert_gateway_routing_rows_if_absent(rows))

    async def delete_gateway_routing_rows(self, rows: Iterable[Sequence[Any]]) -> int:
        return await self._write(lambda db: db.delete_gateway_routing_rows(rows))

    async def find_orphaned_gateway_sessions(
        self,
        *,
        max_gap_s: float | None = None,
    ) -> list[dict[str, Any]]:
        return await self._read(lambda db: db.find_orphaned_gateway_sessions(max_gap_s=max_gap_s))

    async def adopt_orphaned_gateway_session(self, orphan_id: str, donor_id: str) -> bool:
        return await self._write(lambda db: db.adopt_orphaned_gateway_session(orphan_id, donor_id))

    async def has_pending_handoffs(self) -> bool:
        return await self._read(lambda db: db.has_pending_handoffs())

    async def reclaim_stale_running_handoffs(self, error: str) -> list[str]:
        return await self._write(lambda db: db.reclaim_stale_running_handoffs(error))

    async def has_gateway_input_owner(self, session_id: str, owner: str) -> bool:
        return await self._read(lambda db: db.has_gateway_input_owner(session_id, owner))

    async def retire_undrained_queue_rows(self, session_id: str) -> int:
        return await self._write(lambda db: db.retire_undrained_queue_rows(session_id))

    async def update_session_runtime_lock(
        self,
        session_id: str,
        *,
        model: str | None = None,
        provider: str | None = None,
        model_options: dict[str, Any] | None = None,
        route_source: str | None = None,
        confirmed: bool = False,
    ) -> None:
        return await self._write(
            lambda db: db.update_session_runtime_lock(
                session_id,
                model=model,
                provider=provider,
                model_options=model_options,
                route_source=route_source,
                confirmed=confirmed,
            )
        )

    async def prune_sessions(
        self,
        older_than_days: float | None = 90,
        source: SourceFilter = None,
        sessions_dir: str | os.PathLike[str] | None = None,
        exclude_active_write_guards: bool = False,
        **filters: Any,
    ) -> int:
        return await self._write(
            lambda db: db.prune_sessions(
                older_than_days,
                source,
                sessions_dir,
                exclude_active_write_guards,
                **filters,
            )
        )

    async def count_prune_matches(
        self,
        older_than_days: float | None = None,
        source: SourceFilter = None,
        *,
        pinned_only: bool = False,
        **filters: Any,
    ) -> int:
        return await self._read(
            lambda db: db.count_prune_matches(
                older_than_days,
                source,
                pinned_only=pinned_only,
                **filters,
            )
        )

    async def count_open_prune_matches(
        self,
        older_than_days: float | None = None,
        source: SourceFilter = None,
        **filters: Any,
    ) -> int:
        return await self._read(
            lambda db: db.count_open_prune_matches(
                older_than_days,
                source,
                **filters,
            )
        )

    async def list_prune_candidates(
        self,
        older_than_days: float | None = None,
        source: SourceFilter = None,
        **filters: Any,
    ) -> list[dict[str, Any]]:
        return await self._read(
            lambda db: db.list_prune_candidates(
                older_than_days,
                source,
                **filters,
            )
        )

    async def archive_sessions(
        self,
        older_than_days: float | None = None,
        source: SourceFilter = None,
        **filters: Any,
    ) -> int:
        return await self._write(lambda db: db.archive_sessions(older_than_days, source, **filters))

    async def prune_sessions_before(self, cutoff: float, source: SourceFilter = None) -> int:
        return await self._write(lambda db: db.prune_sessions_before(cutoff, source))

    async def search_messages(
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
        return await self._read(
            lambda db: db.search_messages(
                query,
                source_filter,
                exclude_sources,
                role_filter,
                limit,
                offset,
                sort,
                include_inactive,
                fields,
                after_ts,
                before_ts,
            )
        )

    async def search_sessions(
        self,
        source: SourceFilter = None,
        limit: int = 20,
        offset: int = 0,
        workspace_key: str | None = None,
    ) -> list[dict[str, Any]]:
        return await self._read(lambda db: db.search_sessions(source, limit, offset, workspace_key))

    async def session_count(
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
        return await self._read(
            lambda db: db.session_count(
                source,
                include_archived,
                archived_only,
                exclude_children,
                exclude_sources,
                cwd_prefix,
                min_message_count,
                include_subagents,
                sources,
            )
        )

    async def session_count_ge(self, n: int = 1) -> bool:
        return await self._read(lambda db: db.session_count_ge(n))

    async def session_count_by_source(
        self,
        *,
        include_archived: bool = False,
        archived_only: bool = False,
        exclude_children: bool = False,
    ) -> dict[str, int]:
        return await self._read(
            lambda db: db.session_count_by_source(
                include_archived=include_archived,
                archived_only=archived_only,
                exclude_children=exclude_children,
            )
        )

    async def message_count(self, session_id: str | None = None) -> int:
        return await self._read(lambda db: db.message_count(session_id))

    async def export_session(
        self,
        session_id: str,
        include_compacted: bool = False,
        include_inactive: bool | None = None,
    ) -> dict[str, Any] | None:
        return await self._read(
            lambda db: db.export_session(
                session_id,
                include_compacted,
                include_inactive,
            )
        )

    async def export_all(
        self,
        source: SourceFilter = None,
        include_compacted: bool = False,
        include_inactive: bool | None = None,
    ) -> list[dict[str, Any]]:
        return await self._read(
            lambda db: db.export_all(
                source,
                include_compacted,
                include_inactive,
            )
        )

    async def get_compression_lineage(self, session_id: str) -> list[str]:
        return await self._read(lambda db: db.get_compression_lineage(session_id))

    async def export_session_lineage(
        self,
        session_id: str,
        include_compacted: bool = False,
        include_inactive: bool | None = None,
    ) -> dict[str, Any] | None:
        return await self._read(
            lambda db: db.export_session_lineage(
                session_id,
                include_compacted,
                include_inactive,
            )
        )

    async def import_sessions(self, sessions: list[dict[str, Any]]) -> dict[str, Any]:
        return await self._write(lambda db: db.import_sessions(sessions))

    async def export_session_for_move(self, session_id: str) -> dict[str, Any] | None:
        return await self._read(lambda db: db.export_session_for_move(session_id))

    async def import_moved_session(self, payload: dict[str, Any], *, profile_name: str) -> str:
        return await self._write(
            lambda db: db.import_moved_session(
                payload,
                profile_name=profile_name,
            )
        )

    async def delete_moved_session(self, session_id: str) -> bool:
        return await self._write(lambda db: db.delete_moved_session(session_id))

    async def find_foreign_import(self, origin: Mapping[str, Any]) -> str | None:
        return await self._read(lambda db: db.find_foreign_import(origin))

    async def import_foreign_history(
        self,
        origin: Mapping[str, Any],
        messages: Sequence[Mapping[str, Any]],
        *,
        title: str | None,
        cwd: str | None,
        profile: str | None,
    ) -> dict[str, Any]:
        return await self._write(
            lambda db: db.import_foreign_history(
                origin,
                messages,
                title=title,
                cwd=cwd,
                profile=profile,
            )
        )

    async def adopt_session_lineage_from(
        self,
        donor_db: Any,
        session_id: str,
        *,
        retire_donor: bool = True,
    ) -> dict[str, Any]:
        return await self._write(
            lambda db: db.adopt_session_lineage_from(
                donor_db,
                session_id,
                retire_donor=retire_donor,
            )
        )

    async def resolve_resume_session_id(self, session_id: str) -> str:
        return await self._read(lambda db: db.resolve_resume_session_id(session_id))

    async def get_messages_around(
        self,
        session_id: str,
        around_message_id: int,
        window: int = 5,
    ) -> dict[str, Any]:
        return await self._read(
            lambda db: db.get_messages_around(
                session_id,
                around_message_id,
                window,
            )
        )

    async def get_anchored_view(
        self,
        session_id: str,
        around_message_id: int,
        window: int = 5,
        bookend: int = 3,
        keep_roles: tuple[str, ...] | None = ('user', 'assistant'),
    ) -> dict[str, Any]:
        return await self._read(
            lambda db: db.get_anchored_view(
                session_id,
                around_message_id,
                window,
                bookend,
                keep_roles,
            )
        )

    async def list_skill_scaffolded_sessions(self, limit: int = 200) -> list[dict[str, Any]]:
        return await self._read(lambda db: db.list_skill_scaffolded_sessions(limit))

    async def search_sessions_by_id(
        self,
        query: str,
        limit: int = 20,
        include_archived: bool = True,
        source: SourceFilter = None,
        sources: Sequence[str] | None = None,
        exclude_sources: Sequence[str] | None = None,
    ) -> list[dict[str, Any]]:
        return await self._read(
            lambda db: db.search_sessions_by_id(
                query,
                limit,
                include_archived,
                source,
                sources,
                exclude_sources,
            )
        )

    async def list_cron_job_runs(
        self,
        job_id: str,
        limit: int = 20,
        offset: int = 0,
    ) -> list[dict[str, Any]]:
        return await self._read(lambda db: db.list_cron_job_runs(job_id, limit, offset))

    async def list_recent_sessions_bounded(
        self,
        *,
        limit: int = 20,
        exclude_sources: Sequence[str] | None = None,
        timeout_seconds: float = 3.0,
        candidate_limit: int | None = None,
        lineage_limit: int | None = None,
    ) -> list[dict[str, Any]]:
        return await self._read(
            lambda db: db.list_recent_sessions_bounded(
                limit=limit,
                exclude_sources=exclude_sources,
                timeout_seconds=timeout_seconds,
                candidate_limit=candidate_limit,
                lineage_limit=lineage_limit,
            )
        )

    async def finalize_orphaned_compression_sessions(self) -> int:
        return await self._write(lambda db: db.finalize_orphaned_compression_sessions())

    async def count_empty_sessions(self) -> int:
        return await self._read(lambda db: db.count_empty_sessions())

    async def delete_empty_sessions(
        self,
        sessions_dir: str | os.PathLike[str] | None = None,
    ) -> int:
        return await self._write(lambda db: db.delete_empty_sessions(sessions_dir))

    async def optimize_fts(self) -> int:
        return await self._write(lambda db: db.optimize_fts())

    async def rebuild_fts(self) -> int:
        return await self._write(lambda db: db.rebuild_fts())

    async def fts_optimize_available(self) -> bool:
        return await self._read(lambda db: db.fts_optimize_available())

    async def optimize_fts_storage(
        self,
        *,
        progress_cb: Callable[[dict[str, Any]], None] | None = None,
        vacuum: bool = True,
    ) -> dict[str, Any]:
        return await self._write(
            lambda db: db.optimize_fts_storage(
                progress_cb=progress_cb,
                vacuum=vacuum,
            )
        )

    async def fts_rebuild_status(self) -> dict[str, Any] | None:
        return await self._read(lambda db: db.fts_rebuild_status())

    async def fts_rebuild_step(self) -> bool:
        return await self._write(lambda db: db.fts_rebuild_step())

    async def fts_cjk_rebuild_status(self) -> dict[str, Any] | None:
        return await self._read(lambda db: db.fts_cjk_rebuild_status())

    async def fts_cjk_rebuild_step(self) -> bool:
        return await self._write(lambda db: db.fts_cjk_rebuild_step())

    async def retry_deferred_fts_recovery(self) -> bool:
        return await self._write(lambda db: db.retry_deferred_fts_recovery())

    async def logical_size_bytes(self) -> int | None:
        return await self._read(lambda db: db.logical_size_bytes())

    async def vacuum(self) -> int:
        return await self._write(lambda db: db.vacuum())

    async def maybe_auto_prune_and_vacuum(
        self,
        retention_days: int = 90,
        min_interval_hours: int = 24,
        vacuum: bool = True,
        sessions_dir: str | os.PathLike[str] | None = None,
        min_vacuum_interval_days: int | None = None,
        min_vacuum_freelist_ratio: float | None = None,
    ) -> dict[str, Any]:
        return await self._write(
            lambda db: db.maybe_auto_prune_and_vacuum(
                retention_days,
                min_interval_hours,
                vacuum,
                sessions_dir,
                min_vacuum_interval_days,
                min_vacuum_freelist_ratio,
            )
        )

    async def purge_stale_tool_call_markers(
        self,
        *,
        dry_run: bool = False,
        backup: bool = True,
    ) -> dict[str, Any]:
        return await self._write(
            lambda db: db.purge_stale_tool_call_markers(
                dry_run=dry_run,
                backup=backup,
            )
        )

    async def sweep_orphaned_sessions(
        self,
        *,
        max_idle_seconds: float,
        sources: Sequence[str] = ('tui', 'desktop', 'subagent'),
        exclude_ids: Sequence[str] = (),
        exclude_pinned: bool = False,
        heartbeat_staleness_seconds: float | None = None,
        heartbeat_ownership_grace_seconds: float | None = None,
        respect_gateway_heartbeats: bool = True,
    ) -> list[str]:
        return await self._write(
            lambda db: db.sweep_orphaned_sessions(
                max_idle_seconds=max_idle_seconds,
                sources=sources,
                exclude_ids=exclude_ids,
                exclude_pinned=exclude_pinned,
                heartbeat_staleness_seconds=heartbeat_staleness_seconds,
                heartbeat_ownership_grace_seconds=heartbeat_ownership_grace_seconds,
                respect_gateway_heartbeats=respect_gateway_heartbeats,
            )
        )

    async def archive_stale_sessions(self, idle_days: float, *, exclude_pinned: bool = True) -> int:
        return await self._write(
            lambda db: db.archive_stale_sessions(
                idle_days,
                exclude_pinned=exclude_pinned,
            )
        )

    async def maybe_auto_archive(
        self,
        idle_days: float = 3,
        min_interval_hours: int = 24,
        exclude_pinned: bool = True,
    ) -> dict[str, Any]:
        return await self._write(
            lambda db: db.maybe_auto_archive(
                idle_days,
                min_interval_hours,
                exclude_pinned,
            )
        )
    # --- end of generated methods ---


def _append_key(session_id: str, idempotency_key: str | None) -> tuple[str, str, str] | None:
    """Appends of one session share one namespace of keys (a key names one append, whether
    of one message or many); other writes have keys of their own."""
    if idempotency_key is None:
        return None
    if not isinstance(idempotency_key, str) or not idempotency_key:
        raise TypeError("idempotency_key must be a non-empty str")
    return ("append", session_id, idempotency_key)


def _in_thread(work: Callable[[], None]) -> concurrent.futures.Future[None]:
    """``work()`` in a thread of its own; its outcome in the returned future."""
    future: concurrent.futures.Future[None] = concurrent.futures.Future()

    def run() -> None:
        future.set_running_or_notify_cancel()
        try:
            work()
        except BaseException as exc:
            future.set_exception(exc)
        else:
            future.set_result(None)

    threading.Thread(target=run, name="sessionstore-open").start()
    return future
