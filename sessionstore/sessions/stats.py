"""Usage figures of a store: sessions and messages per source; tokens and cost per model and day.

Plain dicts (JSON-ready) computed in a handful of aggregate statements; the per-day figures
stream the sessions' start times once and bucket them by local calendar day.
"""

from __future__ import annotations

import math
from collections import defaultdict
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.engine import Connection

from ..sql.codec import cell_text, whole_number
from ..sql.tables import messages_table as messages
from ..sql.tables import sessions_table as sessions


def _cost() -> ColumnElement[Any]:
    return func.coalesce(sessions.c.actual_cost_usd, sessions.c.estimated_cost_usd, 0.0)


def _amount(value: Any) -> float:
    """A cost in dollars as a float; anything that is no finite number counts 0, as a damaged
    token figure does (:func:`~sessionstore.sql.codec.whole_number`)."""
    if type(value) is Decimal:
        value = float(value)
    if type(value) in (int, float) and math.isfinite(value):
        return float(value)
    return 0.0


def _local_day(timestamp: Any) -> str | None:
    """The local date of a session's start; None for a ``started_at`` that is no time (text,
    or a number no date holds, in a salvaged SQLite row): that session is in the totals and
    on no day, instead of failing the whole report."""
    try:
        return datetime.fromtimestamp(float(timestamp)).date().isoformat()
    except (TypeError, ValueError, OverflowError, OSError):
        return None


def collect_stats(conn: Connection, days: int) -> dict[str, Any]:
    """``totals``, ``sources``, ``models`` and the most recent ``days`` days that had sessions."""
    sources = _per_source(conn)
    models = _per_model(conn)
    totals = {
        "sessions": sum(row["sessions"] for row in sources),
        "messages": sum(row["messages"] for row in sources),
        "input_tokens": sum(row["input_tokens"] for row in models),
        "output_tokens": sum(row["output_tokens"] for row in models),
        "cost_usd": round(sum(row["cost_usd"] for row in models), 6),
    }
    return {"totals": totals, "sources": sources, "models": models, "days": _per_day(conn, days)}


def _per_source(conn: Connection) -> list[dict[str, Any]]:
    session_rows = conn.execute(
        select(sessions.c.source, func.count()).group_by(sessions.c.source)
    ).all()
    message_rows: dict[Any, int] = {
        source: int(count)
        for source, count in conn.execute(
            select(sessions.c.source, func.count(messages.c.id))
            .select_from(messages.join(sessions, sessions.c.id == messages.c.session_id))
            .group_by(sessions.c.source)
        )
    }
    # By the source's text: a salvaged file's BLOB "telegram" is the same source as the text.
    merged: dict[str, dict[str, Any]] = {}
    for source, count in session_rows:
        name = cell_text(source)
        row = merged.setdefault(name, {"source": name, "sessions": 0, "messages": 0})
        row["sessions"] += int(count)
        row["messages"] += int(message_rows.get(source, 0))
    return sorted(merged.values(), key=lambda row: (-row["sessions"], row["source"]))


def _per_model(conn: Connection) -> list[dict[str, Any]]:
    model_rows = conn.execute(
        select(
            sessions.c.model,
            func.count(),
            func.sum(func.coalesce(sessions.c.input_tokens, 0)),
            func.sum(func.coalesce(sessions.c.output_tokens, 0)),
            func.sum(_cost()),
        ).group_by(sessions.c.model)
    ).all()
    merged: dict[str | None, dict[str, Any]] = {}  # by the model's text, as the sources
    for model, count, input_tokens, output_tokens, cost in model_rows:
        name = None if model is None else cell_text(model)
        row = merged.setdefault(name, {"model": name, "sessions": 0, "input_tokens": 0,
                                       "output_tokens": 0, "cost_usd": 0.0})  # fmt: skip
        row["sessions"] += int(count)
        row["input_tokens"] += whole_number(input_tokens)
        row["output_tokens"] += whole_number(output_tokens)
        row["cost_usd"] += _amount(cost)
    for row in merged.values():
        row["cost_usd"] = round(row["cost_usd"], 6)
    return sorted(
        merged.values(),
        key=lambda row: (-(row["input_tokens"] + row["output_tokens"]), str(row["model"])),
    )


def _per_day(conn: Connection, days: int) -> list[dict[str, Any]]:
    per_day: dict[str, dict[str, Any]] = defaultdict(
        lambda: {"sessions": 0, "tokens": 0, "cost_usd": 0.0}
    )
    day_rows = conn.execution_options(yield_per=5000).execute(
        select(
            sessions.c.started_at,
            func.coalesce(sessions.c.input_tokens, 0) + func.coalesce(sessions.c.output_tokens, 0),
            _cost(),
        )
    )
    for started_at, tokens, cost in day_rows:
        started_on = _local_day(started_at)
        if started_on is None:
            continue
        bucket = per_day[started_on]
        bucket["sessions"] += 1
        bucket["tokens"] += whole_number(tokens)
        bucket["cost_usd"] += _amount(cost)
    recent = sorted(per_day)[-days:] if days > 0 else []
    return [
        {"day": day, **per_day[day], "cost_usd": round(per_day[day]["cost_usd"], 6)}
        for day in recent
    ]
