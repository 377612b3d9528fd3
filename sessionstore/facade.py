"""``SessionDB``: the Hermes v6 session store API, as a drop-in over the typed repository.

Same names, arguments, defaults and dict shapes as Hermes's ``hermes_state.SessionDB``; a Hermes
user changes one import. Rows come back as plain dicts keyed by column name. Opening a store
runs the migrations when it is not at head (legacy Hermes files included) unless
``auto_migrate=False``; opening an up-to-date store costs one small read and no Alembic work.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Connection, make_url

from . import legacy, migrate, titles
from .config import resolve_url, sqlite_url
from .errors import SchemaOutOfDateError
from .records import MESSAGE_FIELDS, SESSION_FIELDS
from .repository import NewMessage, SessionRepository, decode_json
from .retry import RetryPolicy
from .search import contains_cjk as _contains_cjk
from .search import sanitize_fts5_query as _sanitize_fts5_query
from .store import Store

logger = logging.getLogger(__name__)


class SessionDB:
    """SQLite- (or PostgreSQL-) backed session storage with full-text search.

    Thread-safe: many threads may share one instance; writes are serialised per process on
    SQLite and retried across processes with jittered back-off.

    Opening a store that needs a migration while another process is migrating it waits for
    that migration (up to the migration budget of 10 minutes, not ``retry``'s): the store
    cannot be used before its schema is ready, and giving up half-way would help nobody.
    """

    MAX_TITLE_LENGTH = titles.MAX_TITLE_LENGTH

    def __init__(
        self,
        db_path: str | os.PathLike[str] | None = None,
        *,
        url: str | None = None,
        read_only: bool = False,
        auto_migrate: bool = True,
        retry: RetryPolicy | None = None,
        busy_timeout_s: float = 1.0,
    ) -> None:
        if db_path is not None and url is not None:
            raise ValueError("give db_path or url, not both")
        resolved = sqlite_url(db_path) if db_path is not None else resolve_url(url)
        parsed = make_url(resolved)
        self.url = resolved
        is_file = parsed.get_backend_name() == "sqlite" and parsed.database not in (
            None,
            "",
            ":memory:",
        )
        self.db_path: Path | None = Path(str(parsed.database)).expanduser() if is_file else None
        if not read_only:
            self._prepare_schema(resolved, auto_migrate)
        self._store = Store.open(
            resolved, read_only=read_only, retry=retry, busy_timeout_s=busy_timeout_s
        )
        if read_only:
            problem = self._store.read(unreadable_reason)
            if problem is not None:
                self._store.close()
                raise SchemaOutOfDateError(problem)
        self._repo = SessionRepository(self._store)

    @staticmethod
    def _prepare_schema(url: str, auto_migrate: bool) -> None:
        status = migrate.status(url)
        if status.up_to_date:
            return
        if not auto_migrate:
            raise SchemaOutOfDateError(
                f"this store is at revision {status.revision or 'none'} (Hermes schema "
                f"{status.schema_version or 'none'}), not {status.head}; run "
                "`sessionstore db upgrade` or open it with auto_migrate=True"
            )
        migrate.upgrade(url)

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

    # -- lifecycle --------------------------------------------------------------------------
    def create_session(
        self,
        session_id: str,
        source: str,
        model: str | None = None,
        model_config: dict[str, Any] | None = None,
        system_prompt: str | None = None,
        user_id: str | None = None,
        parent_session_id: str | None = None,
    ) -> str:
        return self._repo.create_session(
            session_id,
            source,
            model=model,
            model_config=model_config,
            system_prompt=system_prompt,
            user_id=user_id,
            parent_session_id=parent_session_id,
        )

    def end_session(self, session_id: str, end_reason: str) -> None:
        self._repo.end_session(session_id, end_reason)

    def reopen_session(self, session_id: str) -> None:
        self._repo.reopen_session(session_id)

    def update_system_prompt(self, session_id: str, system_prompt: str) -> None:
        self._repo.update_system_prompt(session_id, system_prompt)

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
        absolute: bool = False,
    ) -> None:
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
        )

    def ensure_session(self, session_id: str, source: str = "unknown",
                       model: str | None = None) -> None:
        self._repo.ensure_session(session_id, source, model)

    def get_session(self, session_id: str) -> dict[str, Any] | None:
        record = self._repo.get_session(session_id)
        return None if record is None else record.to_dict()

    def resolve_session_id(self, session_id_or_prefix: str) -> str | None:
        return self._repo.resolve_session_id(session_id_or_prefix)

    # -- titles -----------------------------------------------------------------------------
    def set_session_title(self, session_id: str, title: str | None) -> bool:
        return self._repo.set_session_title(session_id, title)

    def get_session_title(self, session_id: str) -> str | None:
        return self._repo.get_session_title(session_id)

    def get_session_by_title(self, title: str) -> dict[str, Any] | None:
        record = self._repo.get_session_by_title(title)
        return None if record is None else record.to_dict()

    def resolve_session_by_title(self, title: str) -> str | None:
        return self._repo.resolve_session_by_title(title)

    def get_next_title_in_lineage(self, base_title: str) -> str:
        return self._repo.get_next_title_in_lineage(base_title)

    # -- lineage and listing ----------------------------------------------------------------
    def get_compression_tip(self, session_id: str) -> str | None:
        return self._repo.get_compression_tip(session_id)

    def list_sessions_rich(
        self,
        source: str | None = None,
        exclude_sources: Sequence[str] | None = None,
        limit: int = 20,
        offset: int = 0,
        include_children: bool = False,
        project_compression_tips: bool = True,
    ) -> list[dict[str, Any]]:
        return [
            listing.to_dict()
            for listing in self._repo.list_sessions_rich(
                source=source,
                exclude_sources=exclude_sources,
                limit=limit,
                offset=offset,
                include_children=include_children,
                project_compression_tips=project_compression_tips,
            )
        ]

    # -- messages ---------------------------------------------------------------------------
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
    ) -> int:
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
        )
        return self._repo.append_message(session_id, message)

    def append_messages(
        self, session_id: str, messages: Sequence[Mapping[str, Any]]
    ) -> list[int]:
        """Write one turn's new messages (OpenAI-shaped dicts) in one transaction.

        Beyond Hermes: this is the write path an agent loop should use after each turn; the
        counters move once and the turn is all-or-nothing.
        """
        prepared: list[NewMessage] = []
        for index, message in enumerate(messages):
            if not isinstance(message, Mapping):
                raise TypeError(f"messages[{index}] must be a dict, not {type(message).__name__}")
            prepared.append(
                self._repo.prepare_message(
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
                )
            )
        return self._repo.append_messages(session_id, prepared)

    def get_messages(self, session_id: str) -> list[dict[str, Any]]:
        rows = []
        for record in self._repo.get_messages(session_id):
            row = record.to_dict()
            if row["tool_calls"]:
                row["tool_calls"] = decode_json(row["tool_calls"], "tool_calls", record.id, [])
            rows.append(row)
        return rows

    def get_messages_as_conversation(self, session_id: str) -> list[dict[str, Any]]:
        conversation = []
        for record in self._repo.get_conversation(session_id):
            message: dict[str, Any] = {"role": record.role, "content": record.content}
            if record.tool_call_id:
                message["tool_call_id"] = record.tool_call_id
            if record.tool_name:
                message["tool_name"] = record.tool_name
            if record.tool_calls:
                message["tool_calls"] = decode_json(record.tool_calls, "tool_calls", record.id, [])
            if record.role == "assistant":
                if record.reasoning:
                    message["reasoning"] = record.reasoning
                if record.reasoning_details:
                    message["reasoning_details"] = decode_json(
                        record.reasoning_details, "reasoning_details", record.id, None
                    )
                if record.codex_reasoning_items:
                    message["codex_reasoning_items"] = decode_json(
                        record.codex_reasoning_items, "codex_reasoning_items", record.id, None
                    )
            conversation.append(message)
        return conversation

    def clear_messages(self, session_id: str) -> None:
        self._repo.clear_messages(session_id)

    def delete_session(self, session_id: str) -> bool:
        return self._repo.delete_session(session_id)

    def prune_sessions(self, older_than_days: int = 90, source: str | None = None) -> int:
        return self._repo.prune_sessions(older_than_days, source)

    # -- search and counts ------------------------------------------------------------------
    def search_messages(
        self,
        query: str,
        source_filter: Sequence[str] | None = None,
        exclude_sources: Sequence[str] | None = None,
        role_filter: Sequence[str] | None = None,
        limit: int = 20,
        offset: int = 0,
    ) -> list[dict[str, Any]]:
        """Full-text search; any user text returns a list (possibly empty), never raises."""
        if not isinstance(query, str):
            return []
        return [
            hit.to_dict()
            for hit in self._repo.search_messages(
                query,
                source_filter=_as_list(source_filter),
                exclude_sources=_as_list(exclude_sources),
                role_filter=_as_list(role_filter),
                limit=limit,
                offset=offset,
            )
        ]

    def search_sessions(
        self, source: str | None = None, limit: int = 20, offset: int = 0
    ) -> list[dict[str, Any]]:
        return [r.to_dict() for r in self._repo.search_sessions(source, limit, offset)]

    def session_count(self, source: str | None = None) -> int:
        return self._repo.session_count(source)

    def message_count(self, session_id: str | None = None) -> int:
        return self._repo.message_count(session_id)

    # -- export -----------------------------------------------------------------------------
    def export_session(self, session_id: str) -> dict[str, Any] | None:
        session = self.get_session(session_id)
        if session is None:
            return None
        return {**session, "messages": self.get_messages(session_id)}

    def export_all(self, source: str | None = None) -> list[dict[str, Any]]:
        exported = []
        for record in self._repo.search_sessions(source, limit=2**62, offset=0):
            session = record.to_dict()
            exported.append({**session, "messages": self.get_messages(record.id)})
        return exported


def unreadable_reason(conn: Connection) -> str | None:
    """Why a store cannot be read as it is (None: it can).

    A store at head can. So can one that is not, a Hermes file of any number included (a newer
    one too), as long as it holds every column this release reads: read-only access changes
    nothing, so nothing needs adopting. Otherwise the reason says what is missing and what
    to do about it.
    """
    status = migrate.status_of(conn)
    if status.up_to_date:
        return None
    missing = legacy.missing_for_reads(conn, SESSION_FIELDS, MESSAGE_FIELDS)
    if not missing:
        return None
    shown = ", ".join(missing[:6]) + (" ..." if len(missing) > 6 else "")
    if status.schema_version is not None and status.schema_version > legacy.NEWEST_HERMES_SCHEMA:
        return (
            f"this store has schema version {status.schema_version}, newer than the "
            f"{legacy.NEWEST_HERMES_SCHEMA} this release understands, and lacks what it reads "
            f"({shown}); a newer sessionstore is needed to read it"
        )
    return (
        f"this store is at revision {status.revision or 'none'} (Hermes schema "
        f"{status.schema_version or 'none'}) and lacks what this release reads ({shown}); "
        "run `sessionstore db upgrade` (it keeps every row), then open it again"
    )


def _as_list(value: Sequence[str] | str | None) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    return [item for item in value if isinstance(item, str)]
