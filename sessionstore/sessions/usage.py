"""Usage: what a session's model calls cost, kept twice, as Hermes 0.19 keeps it.

- The **session totals** (``sessions``: tokens, costs, API calls, the billing route): what
  ``update_token_counts`` adds (or, ``absolute``, sets).
- The **per-model usage** (``session_model_usage``, Hermes v20; ``task`` in its key since v22):
  one row per session, model, billing route (provider, base URL, mode) and task, which Hermes's
  Insights and cost reports read. Every incremental ``update_token_counts`` adds its delta to the
  row of the route live at that call, in the same transaction as the totals, so the two never
  disagree about a call; ``record_auxiliary_usage`` adds an auxiliary call (vision,
  compression, title generation...) to its task's row *only*, never to the totals (the gateway
  overwrites those with absolute main-loop figures).

The rules, each Hermes 0.19's (``update_token_counts`` and ``_record_model_usage`` of its
``hermes_state.py``):

- *Accounted* usage is a call with any token, API call or cost in it. Only accounted usage sets
  the model and billing route of the session (the first value sticks), and a session that has
  made no API call yet takes the route of its first accounted call that names both a model and
  a provider (a creation-time route that failed over is replaced by the one that answered).
- The per-model row is written for incremental calls with any token, API call or *estimated*
  cost (an actual cost alone moves only the totals). Its route is the call's, each part falling
  back to the session's (as it stands after the update) when the call leaves it out or empty;
  a model nobody names is ``'unknown'``. An auxiliary row never borrows the session's route.
- An absolute update (cumulative totals from a gateway) writes no per-model row and leaves
  the rows as they are: totals cannot be split back into routes (Insights reconciles the
  residual). So the rows are not a partition of the totals: after an absolute update (a reset
  to 0, say) the next deltas add to rows that still hold everything recorded before it.
- Costs and counts add up; ``cost_status`` and ``cost_source`` take the newest value given;
  ``first_seen`` is the first call's time, ``last_seen`` the latest's.

Decisions where Hermes differs: a session that does not exist is not created by
``update_token_counts`` (SPEC §7: nothing is written, ``False``), while
``record_auxiliary_usage`` creates it as Hermes does (source ``'unknown'``, as
``ensure_session``): an auxiliary call must not be lost because the session's first write
failed. A session total that would leave the 64-bit range (or the finite floats) refuses the
whole update (``ValueOutOfRangeError``, nothing written), as every counter of the store does.
The per-model row instead *saturates* at the column's bound: it keeps accumulating across
absolute updates (above), so it may run out of range while the session's total is small, and
an update the session's totals take must not be refused for its breakdown. Hermes on SQLite
goes on with an inexact float there; a saturated row says "at least this much" and stays an
integer (PostgreSQL's ``BIGINT`` would refuse the float).

The reads the newest forks' ``/status``, ``/usage`` and sidebar make: the main loop's
dominant (axisrow 0.20.1.2) and most recent (iot 0.22.2) route from the per-model rows,
iot's auxiliary usage per task over a parent chain, and the store's totals of root sessions
(each method says its rule).

The per-model upsert is one statement on both databases (``INSERT ... SELECT ... ON CONFLICT
DO UPDATE``): the route falls back to the session's inside it, so the whole update is two
statements in one write transaction, both prebuilt and run on the driver's cursor as an append
is.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Float,
    Numeric,
    Select,
    Text,
    and_,
    bindparam,
    case,
    func,
    literal,
    literal_column,
    or_,
    select,
    update,
)
from sqlalchemy import cast as sql_cast
from sqlalchemy.engine import Connection
from sqlalchemy.sql import Update

from ..dialects import dialect_for_url
from ..errors import ValueOutOfRangeError
from ..sql import validation
from ..sql.codec import decode_json_object
from ..sql.statements import CompiledStatement, run_compiled
from ..sql.tables import USAGE_KEY
from ..sql.tables import session_model_usage_table as usage
from ..sql.tables import sessions_table as sessions
from ..sql.validation import bindable
from ..storage.store import Store
from .access import reads, writes
from .lineage import BRANCH_MARKER, parent_walk
from .shared import UNKNOWN_SOURCE, RepositoryPart, session_exists

UNKNOWN_MODEL = "unknown"
MAIN_LOOP_TASK = ""
"""The task of the main agent loop's usage (auxiliary calls name theirs)."""
TOKEN_FIELDS = (
    "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
    "reasoning_tokens",
)  # fmt: skip
USAGE_COUNTERS = ("api_call_count", *TOKEN_FIELDS)
USAGE_COSTS = ("estimated_cost_usd", "actual_cost_usd")
ROUTE_FIELDS = ("billing_provider", "billing_base_url", "billing_mode")
ROUTE_PARTS = ("model", *ROUTE_FIELDS)
_FLOAT_MAX = sys.float_info.max


class UsagePart(RepositoryPart):
    """Session totals and per-model usage (see the module)."""

    def __init__(self, store: Store, *, clock: Callable[[], float] = time.time) -> None:
        super().__init__(store, clock=clock)
        # Prebuilt, compiled on first use and run on the driver cursor, as an append is
        # (sessionstore/sql/statements.py): this is an agent's write per API call, and building
        # its expressions per call cost more than the database's work.
        dialect = store.engine.dialect
        # The builders are cached on the backend's name, never on ``store.dialect.insert``: a
        # bound method of each store's own dialect object missed the cache at every new store
        # (a statement built and compiled again, ~10 ms of its first token update, and kept
        # for ever with the dialect object).
        backend = store.dialect.name
        self._add_totals = CompiledStatement.built_later(
            lambda: _totals_statement(absolute=False), dialect
        )
        self._set_totals = CompiledStatement.built_later(
            lambda: _totals_statement(absolute=True), dialect
        )
        self._add_main_usage = CompiledStatement.built_later(
            lambda: _usage_statement(backend, borrow_route=True), dialect
        )
        self._add_auxiliary_usage = CompiledStatement.built_later(
            lambda: _usage_statement(backend, borrow_route=False), dialect
        )
        self._create_bare_session = CompiledStatement.built_later(
            lambda: _bare_session_statement(backend), dialect
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
        source: str | None = None,
        task: str = "",
    ) -> bool:
        """Add token deltas (default) or set the totals (``absolute=True``), and add the
        delta to the per-model usage row of the live route (see the module); False when the
        session does not exist (nothing written).

        iot 0.22.2's arguments: ``source``, the session's real surface, creates the session
        when it is missing (with that source and ``model``: a usage reported before the
        session's own create landed is not lost, and the session is no anonymous
        ``'unknown'`` one, iot #111999); without it a missing session stays missing, as
        above. ``task`` names a per-turn route (``voice_chat``): its calls count in the totals
        and go to that task's per-model row, which borrows nothing from the session's route,
        and never become the session's first accounted route.

        Costs in the totals: incrementally the estimate adds to 0 when it was NULL, and the
        actual cost only changes when one is given; with ``absolute`` the estimate is set (0
        when not given, as Hermes) and the actual cost when given. cost_status/cost_source/
        pricing_version take a new value when given.
        """
        session_id = validation.identifier(session_id, "session_id")
        surface = validation.optional_identifier(source, "source") or None
        task = validation.identifier(task, "task") if task else MAIN_LOOP_TASK
        amounts = {
            "api_call_count": validation.counter(api_call_count, "api_call_count"),
            "input_tokens": validation.counter(input_tokens, "input_tokens"),
            "output_tokens": validation.counter(output_tokens, "output_tokens"),
            "cache_read_tokens": validation.counter(cache_read_tokens, "cache_read_tokens"),
            "cache_write_tokens": validation.counter(cache_write_tokens, "cache_write_tokens"),
            "reasoning_tokens": validation.counter(reasoning_tokens, "reasoning_tokens"),
        }
        estimated = validation.optional_number(estimated_cost_usd, "estimated_cost_usd")
        actual = validation.optional_number(actual_cost_usd, "actual_cost_usd")
        labels = {
            name: validation.optional_identifier(value, name)
            for name, value in (
                ("cost_status", cost_status),
                ("cost_source", cost_source),
                ("pricing_version", pricing_version),
            )
        }
        route = {
            name: validation.optional_identifier(value, name)
            for name, value in (
                ("model", model),
                ("billing_provider", billing_provider),
                ("billing_base_url", billing_base_url),
                ("billing_mode", billing_mode),
            )
        }
        accounted = any(amounts.values()) or bool(estimated) or bool(actual)
        totals = {
            "session_id": session_id,
            **_amount_values(amounts, {"estimated_cost_usd": estimated or 0.0,
                                       "actual_cost_usd": actual or 0.0}),
            "has_actual": 0 if actual is None else 1,
            **labels,
            # Hermes 0.19's first accounted route: only a call naming both a model and a
            # provider may replace a route (the statement checks the session's side).
            "first_route": 1 if accounted and route["model"] and route["billing_provider"]
            and task == MAIN_LOOP_TASK else 0,
            **{f"{name}_value": value for name, value in route.items()},
            **{f"{name}_fill": value if accounted else None for name, value in route.items()},
        }  # fmt: skip
        per_model = not absolute and (any(amounts.values()) or bool(estimated))
        usage_row = (
            _usage_values(session_id, task, route, amounts, estimated or 0.0,
                          actual or 0.0, labels["cost_status"], labels["cost_source"])
            if per_model else None
        )  # fmt: skip
        add_totals = self._set_totals if absolute else self._add_totals
        # A task's row borrows nothing from the session's route (iot's auxiliary rule).
        add_usage = self._add_main_usage if task == MAIN_LOOP_TASK else self._add_auxiliary_usage
        create = self._create_bare_session
        bare = {"session_id": session_id, "source": surface, "model": route["model"],
                "started_at": time.time()}  # fmt: skip

        def run(conn: Connection) -> bool:
            if surface is not None:
                run_compiled(conn, create, bare)
            if run_compiled(conn, add_totals, totals).rowcount == 0:
                if not absolute and session_exists(conn, session_id):
                    raise _out_of_range(session_id)
                return False
            if usage_row is not None:
                run_compiled(conn, add_usage, usage_row)
            return True

        return self.store.write(run)

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
    ) -> bool:
        """Add one auxiliary call (``task``: ``vision``, ``compression``...) to the session's
        per-model usage, never to its totals (Hermes 0.19, #23270). The session is created
        (source ``'unknown'``) when missing, as Hermes does. An empty ``session_id`` or
        ``task`` records nothing (False), as in Hermes. ``api_call_count`` (iot 0.22.2) may
        aggregate several calls in one record (a background review's forks); None is one."""
        if session_id == "" or task == "":
            return False
        session_id = validation.identifier(session_id, "session_id")
        task = validation.identifier(task, "task")
        amounts = {
            "api_call_count": 1 if api_call_count is None
            else validation.counter(api_call_count, "api_call_count"),
            "input_tokens": validation.counter(input_tokens, "input_tokens"),
            "output_tokens": validation.counter(output_tokens, "output_tokens"),
            "cache_read_tokens": validation.counter(cache_read_tokens, "cache_read_tokens"),
            "cache_write_tokens": validation.counter(cache_write_tokens, "cache_write_tokens"),
            "reasoning_tokens": validation.counter(reasoning_tokens, "reasoning_tokens"),
        }
        # An auxiliary call never borrows the session's route: what it leaves out is
        # 'unknown' or empty.
        route = {
            "model": validation.optional_identifier(model, "model") or UNKNOWN_MODEL,
            "billing_provider": validation.optional_identifier(
                billing_provider, "billing_provider") or "",
            "billing_base_url": validation.optional_identifier(
                billing_base_url, "billing_base_url") or "",
            "billing_mode": "",
        }  # fmt: skip
        estimated = validation.optional_number(estimated_cost_usd, "estimated_cost_usd") or 0.0
        row = _usage_values(session_id, task, route, amounts, estimated, 0.0, None, None)
        create, add_usage = self._create_bare_session, self._add_auxiliary_usage

        def run(conn: Connection) -> bool:
            run_compiled(conn, create, {"session_id": session_id, "source": UNKNOWN_SOURCE,
                                        "model": None, "started_at": time.time()})  # fmt: skip
            run_compiled(conn, add_usage, row)
            return True

        return self.store.write(run)

    @reads
    def get_model_usage(self, session_id: str | None = None) -> list[dict[str, Any]]:
        """The per-model usage rows (of one session, or of all), as Hermes's Insights reads
        them: every column, in the key's order (none from a store read as it is, from
        before Hermes v20)."""
        if not self.store.read_shape.has_table(usage.name):
            return []
        statement = select(usage).order_by(*(usage.c[name] for name in USAGE_KEY))
        if session_id is not None:
            if not validation.bindable(session_id):
                return []
            statement = statement.where(usage.c.session_id == session_id)
        return self.store.read(
            lambda conn: [dict(row._mapping) for row in conn.execute(statement)]
        )


    # -- the reads newest Hermes's /status, /usage and sidebar make ------------------------
    @reads
    def get_dominant_session_model_route(self, session_id: str) -> dict[str, Any] | None:
        """axisrow 0.20.1.2's route of the session's main loop that served the most API calls
        (ties: the most tokens, then the latest ``last_seen``), from its per-model usage
        rows; None without one (an unknown session, only auxiliary or ``'unknown'``-model
        rows, no provider, or a store read as it is from before Hermes v22)."""
        return self._main_loop_route(session_id, recent=False)

    @reads
    def get_recent_session_model_route(self, session_id: str) -> dict[str, Any] | None:
        """iot 0.22.2's most recently used route of the session's main loop (the latest
        ``last_seen``; ties toward the route that appeared later), else None as
        :meth:`get_dominant_session_model_route`."""
        return self._main_loop_route(session_id, recent=True)

    def _main_loop_route(self, session_id: str, *, recent: bool) -> dict[str, Any] | None:
        if not bindable(session_id) or not self.store.read_shape.has_table(usage.name):
            return None
        statement = _route_statement(self.store.dialect.name, recent=recent)
        row = self.store.read(
            lambda conn: conn.execute(statement, {"session_id": session_id}).first()
        )
        if row is None:
            return None
        route = dict(row._mapping)
        route["api_call_count"] = int(route["api_call_count"])
        return route

    @reads
    def auxiliary_usage_by_task(self, session_id: str) -> dict[str, dict[str, float]]:
        """iot 0.22.2's auxiliary usage (``task`` not empty) per task, summed over the
        session and its ancestors through every kind of parent (an auxiliary call bills the
        id its turn started with, which compression may have ended), cut at the nearest
        ``/branch`` copy (``_branched_from`` set: it owns its spend). ``{}`` for an empty
        id, an id no database holds, or a store read as it is from before Hermes v22."""
        if not session_id or not bindable(session_id):
            return {}
        if not self.store.read_shape.has_table(usage.name):
            return {}

        def run(conn: Connection) -> list[Any]:
            chain = parent_walk(conn, session_id)
            configs: dict[str, Any] = {
                row.id: row.model_config
                for row in conn.execute(
                    select(sessions.c.id, sessions.c.model_config).where(
                        sessions.c.id.in_(chain)
                    )
                )
            }
            for at in range(len(chain) - 1, -1, -1):
                if decode_json_object(configs.get(chain[at])).get(BRANCH_MARKER):
                    chain = chain[at:]
                    break
            return list(conn.execute(_auxiliary_statement(), {"ids": chain}))

        found: dict[str, dict[str, float]] = {}
        for row in self.store.read(run):
            amounts: dict[str, float] = {
                name: int(value) for name, value in zip(AUXILIARY_SUMS, row[1:-1], strict=True)
            }
            amounts["estimated_cost_usd"] = float(row[-1])
            found[str(row[0])] = amounts
        return found

    @reads
    def usage_totals(
        self, *, min_message_count: int = 1, include_archived: bool = False
    ) -> dict[str, float]:
        """iot 0.22.2's (and axisrow 0.20.1.2's) tokens and spend of the whole store, one
        scan: input plus output tokens, and per session the billed cost, else the estimate,
        summed over root sessions (no parent) with at least ``min_message_count`` messages,
        archived ones only with ``include_archived``. A non-``int`` count or a non-``bool``
        flag is a ``TypeError``."""
        threshold = validation.integer(min_message_count, "min_message_count")
        archived = validation.flag(include_archived, "include_archived")
        if threshold > validation.INT64_MAX:
            return {"tokens": 0, "cost_usd": 0.0}
        threshold = max(threshold, -validation.INT64_MAX)
        statement = _totals_of_store(include_archived=archived)
        row = self.store.read(
            lambda conn: conn.execute(statement, {"threshold": threshold}).one()
        )
        return {"tokens": int(row[0] or 0), "cost_usd": float(row[1] or 0.0)}


AUXILIARY_SUMS = ("api_calls", *TOKEN_FIELDS)
"""The integer sums of :meth:`UsagePart.auxiliary_usage_by_task`, in iot's key order (its
``estimated_cost_usd`` last)."""


@functools.cache
def _route_statement(backend: str, *, recent: bool) -> Select[Any]:
    """The main loop's best route row (iot's and axisrow's SQL). Recency ties go, as on
    iot's SQLite, to the newer ``rowid`` (the route first recorded later); PostgreSQL has no
    rowid, and takes the later ``first_seen``, then the key, for the same rule. Dominance
    ties past iot's three keys (which SQLite leaves unordered) go to the key, so both
    databases answer alike."""
    tokens = sum(
        (sql_cast(usage.c[name], Numeric) for name in TOKEN_FIELDS[1:]),
        start=sql_cast(usage.c[TOKEN_FIELDS[0]], Numeric),
    )
    key: list[Any] = [usage.c[name] for name in USAGE_KEY[1:]]
    order: list[Any]
    if recent:
        later = (
            [literal_column("session_model_usage.rowid").desc()] if backend == "sqlite"
            else [usage.c.first_seen.desc().nulls_last(), *(column.desc() for column in key)]
        )  # fmt: skip
        order = [usage.c.last_seen.desc().nulls_last(), *later]
    else:
        order = [
            usage.c.api_call_count.desc(), tokens.desc(), usage.c.last_seen.desc().nulls_last(),
            *key,
        ]  # fmt: skip
    return (
        select(usage.c.model, *(usage.c[name] for name in ROUTE_FIELDS), usage.c.api_call_count)
        .where(
            usage.c.session_id == bindparam("session_id"),
            usage.c.task == MAIN_LOOP_TASK,
            usage.c.model != UNKNOWN_MODEL,
            usage.c.billing_provider != "",
        )
        .order_by(*order)
        .limit(1)
    )


@functools.cache
def _auxiliary_statement() -> Select[Any]:
    sums = [
        func.coalesce(func.sum(usage.c[column]), 0).label(name)
        for name, column in zip(AUXILIARY_SUMS, USAGE_COUNTERS, strict=True)
    ]
    return (
        select(
            usage.c.task,
            *sums,
            func.coalesce(func.sum(usage.c.estimated_cost_usd), 0.0).label("estimated_cost_usd"),
        )
        .where(
            usage.c.session_id.in_(bindparam("ids", expanding=True)),
            usage.c.task != MAIN_LOOP_TASK,
        )
        .group_by(usage.c.task)
        .order_by(usage.c.task)
    )


@functools.cache
def _totals_of_store(*, include_archived: bool) -> Select[Any]:
    """iot's one scan of ``sessions``; the token sum in ``NUMERIC`` (exact on PostgreSQL,
    where a ``BIGINT`` sum past 64 bits is an error; SQLite's integer arithmetic as iot's)."""
    tokens = func.coalesce(
        func.sum(
            sql_cast(func.coalesce(sessions.c.input_tokens, 0), Numeric)
            + sql_cast(func.coalesce(sessions.c.output_tokens, 0), Numeric)
        ),
        0,
    )
    cost = func.coalesce(
        func.sum(
            func.coalesce(sessions.c.actual_cost_usd, sessions.c.estimated_cost_usd, 0.0)
        ),
        0.0,
    )
    conditions = [
        sessions.c.parent_session_id.is_(None),
        sessions.c.message_count >= bindparam("threshold", type_=BigInteger),
    ]
    if not include_archived:
        conditions.append(func.coalesce(sessions.c.archived, 0) == 0)
    return select(tokens, cost).where(*conditions)


def _out_of_range(session_id: str) -> ValueOutOfRangeError:
    return ValueOutOfRangeError(
        f"session {session_id!r}: adding these amounts would take a total past what its "
        "column holds (64-bit integers, finite floats); nothing was written"
    )


def _amount_values(amounts: dict[str, int], costs: dict[str, float]) -> dict[str, Any]:
    """Each amount, and the range its total must be in before the amount is added, so that
    the sum stays within the column (64-bit integers, finite floats): the bounds are computed
    here, so the check itself cannot overflow."""
    values: dict[str, Any] = {}
    for name, amount in amounts.items():
        values[name] = amount
        values[f"{name}_low"] = validation.INT64_MIN - min(amount, 0)
        values[f"{name}_high"] = validation.INT64_MAX - max(amount, 0)
    for name, cost in costs.items():
        values[name] = cost
        values[f"{name}_low"] = -_FLOAT_MAX - min(cost, 0.0)
        values[f"{name}_high"] = _FLOAT_MAX - max(cost, 0.0)
    return values


def _within(column: Any, name: str) -> ColumnElement[bool]:
    total = func.coalesce(column, 0)
    return and_(total >= bindparam(f"{name}_low"), total <= bindparam(f"{name}_high"))


@functools.cache
def _totals_statement(*, absolute: bool) -> Update:
    """The session totals' UPDATE (every value bound, one statement for every call).

    Incrementally every amount and the estimate add (the actual cost when ``has_actual``),
    each total checked to stay in range (no row changes otherwise); ``absolute`` sets them.
    Labels take a given value. The model and billing route (see the module): with
    ``first_route`` and a session that has made no API call and has another route, the call's
    whole route; else each part once (``<name>_fill``: the call's value when accounted). Every
    expression reads the row as it was before the UPDATE, as Hermes's separate SELECT did."""
    values: dict[str, Any] = {}
    guards: list[ColumnElement[bool]] = []
    for name in USAGE_COUNTERS:
        column = sessions.c[name]
        if absolute:
            values[name] = bindparam(name)
        else:
            values[name] = func.coalesce(column, 0) + bindparam(name)
            guards.append(_within(column, name))
    has_actual = bindparam("has_actual") == 1
    estimated, actual = sessions.c.estimated_cost_usd, sessions.c.actual_cost_usd
    if absolute:
        values["estimated_cost_usd"] = bindparam("estimated_cost_usd")
        values["actual_cost_usd"] = case((has_actual, bindparam("actual_cost_usd")),
                                         else_=actual)  # fmt: skip
    else:
        values["estimated_cost_usd"] = func.coalesce(estimated, 0.0) + bindparam(
            "estimated_cost_usd"
        )
        values["actual_cost_usd"] = case(
            (has_actual, func.coalesce(actual, 0.0) + bindparam("actual_cost_usd")),
            else_=actual,
        )
        guards += [_within(estimated, "estimated_cost_usd"), _within(actual, "actual_cost_usd")]
    for name in ("cost_status", "cost_source", "pricing_version"):
        values[name] = func.coalesce(bindparam(name, type_=Text()), sessions.c[name])
    takes_first_route = and_(
        bindparam("first_route") == 1,
        func.coalesce(sessions.c.api_call_count, 0) == 0,
        or_(
            sessions.c.model.is_distinct_from(bindparam("model_value", type_=Text())),
            sessions.c.billing_provider.is_distinct_from(
                bindparam("billing_provider_value", type_=Text())
            ),
        ),
    )
    for name in ROUTE_PARTS:
        values[name] = case(
            (takes_first_route, bindparam(f"{name}_value", type_=Text())),
            else_=func.coalesce(sessions.c[name], bindparam(f"{name}_fill", type_=Text())),
        )
    return (
        update(sessions)
        .where(sessions.c.id == bindparam("session_id"), *guards)
        .values(values)
    )


def _usage_values(
    session_id: str,
    task: str,
    route: Mapping[str, str | None],
    amounts: dict[str, int],
    estimated: float,
    actual: float,
    cost_status: str | None,
    cost_source: str | None,
) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "task": task,
        **{f"{name}_given": route[name] or None for name in ROUTE_PARTS},
        **_amount_values(amounts, {"estimated_cost_usd": estimated, "actual_cost_usd": actual}),
        "cost_status": cost_status,
        "cost_source": cost_source,
        "now": time.time(),
    }


@functools.cache
def _bare_session_statement(backend: str) -> Any:
    """A session row with nothing but its id, source (its ``created_source`` too, as iot's
    insert) and model (for usage reported before the session), on the ``backend`` database (a
    dialect's ``name``)."""
    return (
        dialect_for_url(f"{backend}://").insert(sessions)
        .values(id=bindparam("session_id"), source=bindparam("source"),
                created_source=bindparam("source"), model=bindparam("model"),
                started_at=bindparam("started_at"))
        .on_conflict_do_nothing()
    )  # fmt: skip


@functools.cache
def _usage_statement(backend: str, *, borrow_route: bool) -> Any:
    """Add one call to its per-model row, in one statement: ``INSERT ... SELECT`` from the
    session's row ``ON CONFLICT DO UPDATE`` adding the amounts, each total held at its
    column's bound (:func:`_saturating_sum`). With
    ``borrow_route`` (the main loop) each part of the route the call leaves out or empty is the
    session's; a model nobody names is ``'unknown'``."""

    def typed(name: str, column: str) -> Any:
        return sql_cast(bindparam(name), usage.c[column].type)

    def route_part(name: str) -> Any:
        given = func.nullif(typed(f"{name}_given", name), "")
        last_resort = UNKNOWN_MODEL if name == "model" else ""
        if borrow_route:
            return func.coalesce(given, func.nullif(sessions.c[name], ""), last_resort)
        return func.coalesce(given, last_resort)

    row = {
        "session_id": sessions.c.id,
        **{name: route_part(name) for name in ("model", *ROUTE_FIELDS)},
        "task": typed("task", "task"),
        **{name: typed(name, name) for name in (*USAGE_COUNTERS, *USAGE_COSTS)},
        "cost_status": typed("cost_status", "cost_status"),
        "cost_source": typed("cost_source", "cost_source"),
        "first_seen": typed("now", "first_seen"),
        "last_seen": typed("now", "last_seen"),
    }
    source = select(*(value.label(name) for name, value in row.items())).where(
        sessions.c.id == bindparam("session_id")
    )
    statement = dialect_for_url(f"{backend}://").insert(usage).from_select(list(row), source)
    excluded = statement.excluded
    return statement.on_conflict_do_update(
        index_elements=[usage.c[name] for name in USAGE_KEY],
        set_={
            **{name: _saturating_sum(usage.c[name], excluded[name], name)
               for name in (*USAGE_COUNTERS, *USAGE_COSTS)},
            "cost_status": func.coalesce(excluded.cost_status, usage.c.cost_status),
            "cost_source": func.coalesce(excluded.cost_source, usage.c.cost_source),
            "last_seen": excluded.last_seen,
        },
    )  # fmt: skip


def _saturating_sum(total: Any, amount: Any, name: str) -> Any:
    """``total + amount``, held at the column's bound where the sum would pass it (the
    per-model row saturates: see the module). The bounds are the caller's
    ``<name>_low``/``<name>_high`` (:func:`_amount_values`), so nothing here can overflow:
    the sum is only computed when it fits."""
    is_cost = name in USAGE_COSTS
    highest = literal(_FLOAT_MAX if is_cost else validation.INT64_MAX,
                      Float() if is_cost else BigInteger())
    lowest = literal(-_FLOAT_MAX if is_cost else validation.INT64_MIN,
                     Float() if is_cost else BigInteger())  # fmt: skip
    return case(
        (total > bindparam(f"{name}_high"), highest),
        (total < bindparam(f"{name}_low"), lowest),
        else_=total + amount,
    )
