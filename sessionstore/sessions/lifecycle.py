"""A session's life as one row: created (or filled in), read back by id, updated (model,
prompt, tokens and costs, working tree, billing route), ended and reopened.

Values are validated and JSON is encoded *before* a write transaction starts, so the write lock
is held only for the statements themselves.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy import ColumnElement, func, or_, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql.elements import TextClause

from ..errors import ValueOutOfRangeError
from ..sql import validation
from ..sql.codec import encode_json
from ..sql.records import SESSION_FIELDS, SessionRecord
from ..sql.statements import HotReads, plain_select
from ..sql.tables import sessions_table as sessions
from ..sql.validation import bindable
from ..storage.store import Store
from .access import reads, writes
from .shared import RepositoryPart, constraint_error, session_exists

EXTRA_SESSION_COLUMNS = (
    "session_key", "chat_id", "chat_type", "thread_id", "cwd", "git_branch", "git_repo_root",
)  # fmt: skip
"""Later-Hermes session columns ``create_session``/``ensure_session`` accept as keywords."""
_FILLED_ON_CONFLICT = ("model", "model_config", "system_prompt", "parent_session_id")
"""What ``create_session`` on an existing session fills where still NULL, beside the extras."""
_BASE_SESSION_KEYWORDS = ("model_config", "system_prompt", "user_id", "parent_session_id")
"""``create_session``'s named keywords that ``ensure_session`` takes through ``**kwargs``."""


class LifecyclePart(RepositoryPart):
    """Creating, reading back, updating, ending and reopening one session."""

    def __init__(self, store: Store, *, clock: Callable[[], float] = time.time) -> None:
        super().__init__(store, clock=clock)
        # Built on first use: a short-lived program (a hook, a CLI call) opens the store for
        # one call, and building every statement at open showed in its start-up.
        self._load_session = HotReads.built_later(store.engine.dialect, _session_by_id)

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
        parent and those columns fill only what is still NULL (never source or user_id), as
        Hermes 0.18's session upsert does: a gateway's bare row gets the agent's model later."""
        filled = self._extra_session_values(extra)
        values = {
            "id": validation.identifier(session_id, "session_id"),
            "source": validation.identifier(source, "source"),
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
        try:
            # Idempotent (ON CONFLICT DO NOTHING, then COALESCE fills): after a lost COMMIT it
            # is simply run again.
            self.store.write(
                lambda conn: _insert_or_fill(conn, statement, values["id"], fills),
                recover=_run_again,
            )
        except IntegrityError as exc:
            raise constraint_error(
                self.store.dialect, exc, f"parent session {parent_session_id!r} does not exist",
                f"creating session {session_id!r}",
            ) from exc
        return session_id

    @writes
    def ensure_session(self, session_id: str, source: str = "unknown",
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
        """End a live session; the first end reason wins (a compression split stays one)."""
        return self._update_session(
            session_id,
            {"ended_at": time.time(), "end_reason": self._text(end_reason, "end_reason")},
            sessions.c.ended_at.is_(None),
        )

    @writes
    def reopen_session(self, session_id: str) -> bool:
        return self._update_session(session_id, {"ended_at": None, "end_reason": None})

    @writes
    def update_system_prompt(self, session_id: str, system_prompt: str | None) -> bool:
        return self._update_session(
            session_id, {"system_prompt": self._text(system_prompt, "system_prompt")}
        )

    @writes
    def update_token_counts(
        self,
        session_id: str,
        *,
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
        api_call_count: int = 0,
    ) -> bool:
        """Add token deltas (default) or set the totals (``absolute=True``).

        Costs: incrementally the estimate adds to 0 when it was NULL, and the actual cost only
        changes when one is given; with ``absolute`` each cost is set when given, kept when not.
        cost_status/cost_source/pricing_version take a new value when given; billing provider,
        base URL, mode and the model are set once (the first value sticks).
        """
        tokens = {
            "input_tokens": validation.counter(input_tokens, "input_tokens"),
            "output_tokens": validation.counter(output_tokens, "output_tokens"),
            "cache_read_tokens": validation.counter(cache_read_tokens, "cache_read_tokens"),
            "cache_write_tokens": validation.counter(cache_write_tokens, "cache_write_tokens"),
            "reasoning_tokens": validation.counter(reasoning_tokens, "reasoning_tokens"),
            "api_call_count": validation.counter(api_call_count, "api_call_count"),
        }
        estimated = validation.optional_number(estimated_cost_usd, "estimated_cost_usd")
        actual = validation.optional_number(actual_cost_usd, "actual_cost_usd")
        values: dict[str, Any] = {}
        # Each addition is checked against its column's range inside the UPDATE itself (so in
        # the write transaction, against the value it adds to): SQLite would otherwise turn an
        # integer total past 2**63 into a REAL, and a float total past its range into inf.
        guards: list[ColumnElement[bool]] = []
        for name, amount in tokens.items():
            column = sessions.c[name]
            if absolute:
                values[name] = amount
                continue
            values[name] = func.coalesce(column, 0) + amount
            guards.extend(_addition_guard(column, amount, validation.INT64_MIN,
                                          validation.INT64_MAX))
        if absolute:
            if estimated is not None:
                values["estimated_cost_usd"] = estimated
            if actual is not None:
                values["actual_cost_usd"] = actual
        else:
            values["estimated_cost_usd"] = func.coalesce(sessions.c.estimated_cost_usd, 0.0) + (
                estimated or 0.0
            )
            guards.extend(_addition_guard(sessions.c.estimated_cost_usd, estimated or 0.0,
                                          -sys.float_info.max, sys.float_info.max))
            if actual is not None:
                values["actual_cost_usd"] = func.coalesce(sessions.c.actual_cost_usd, 0.0) + actual
                guards.extend(_addition_guard(sessions.c.actual_cost_usd, actual,
                                              -sys.float_info.max, sys.float_info.max))
        for name, value in (
            ("cost_status", cost_status),
            ("cost_source", cost_source),
            ("pricing_version", pricing_version),
        ):
            if value is not None:
                values[name] = validation.identifier(value, name)
        for name, value in (
            ("billing_provider", billing_provider),
            ("billing_base_url", billing_base_url),
            ("billing_mode", billing_mode),
            ("model", model),
        ):
            if value is not None:
                values[name] = func.coalesce(sessions.c[name], validation.identifier(value, name))
        session_id = validation.identifier(session_id, "session_id")
        statement = update(sessions).where(sessions.c.id == session_id, *guards).values(values)

        def run(conn: Connection) -> bool:
            if conn.execute(statement).rowcount > 0:
                return True
            if guards and session_exists(conn, session_id):
                raise ValueOutOfRangeError(
                    f"session {session_id!r}: adding these amounts would take a total past "
                    "what its column holds (64-bit integers, finite floats); nothing was written"
                )
            return False

        return self.store.write(run)

    @writes
    def update_session_model(self, session_id: str, model: str | None) -> bool:
        return self._update_session(
            session_id, {"model": validation.optional_identifier(model, "model")}
        )

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
        the cached system prompt dropped (it named the old route), as Hermes does."""
        values: dict[str, Any] = {
            "billing_provider": validation.identifier(provider, "provider"),
            "billing_base_url": validation.identifier(base_url, "base_url"),
            "system_prompt": None,
        }
        if billing_mode is not None:
            values["billing_mode"] = validation.identifier(billing_mode, "billing_mode")
        return self._update_session(session_id, values)

    # -- working directory and git ----------------------------------------------------------
    @writes
    def update_session_cwd(
        self,
        session_id: str,
        cwd: str | None,
        git_branch: str | None = None,
        git_repo_root: str | None = None,
    ) -> bool:
        """Record where a session runs; git values are written only when non-empty."""
        values: dict[str, Any] = {"cwd": self._text(cwd, "cwd")}
        for name, value in (("git_branch", git_branch), ("git_repo_root", git_repo_root)):
            if value:
                values[name] = self._text(value, name)
        return self._update_session(session_id, values)

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
                    filled: Mapping[str, Any]) -> None:
    inserted = conn.execute(statement).rowcount
    if filled and not inserted:
        conn.execute(
            update(sessions)
            .where(sessions.c.id == session_id)
            .values({name: func.coalesce(sessions.c[name], value)
                     for name, value in filled.items()})
        )


def _run_again(conn: Connection) -> None:
    """``recover`` for an idempotent write: nothing to look for, running it again is safe."""
    return None


def _addition_guard(
    column: Any, amount: float, low: float, high: float
) -> list[ColumnElement[bool]]:
    """The condition under which ``COALESCE(column, 0) + amount`` stays within [low, high].

    Written as a comparison with a bound computed here, so the check itself cannot overflow.
    """
    if amount > 0:
        return [func.coalesce(column, 0) <= high - amount]
    if amount < 0:
        return [func.coalesce(column, 0) >= low - amount]
    return []


def _session_by_id() -> TextClause:
    return plain_select(sessions, SESSION_FIELDS, "id = :id")
