"""Hermes 0.18's lineage reads: where a resume lands, one cron job's runs, id search ranking.

- :meth:`Lineage.resume_target` is Hermes's ``resolve_resume_session_id``: first follow the
  compression chain to its live tip as Hermes 0.18's ``get_compression_tip`` walks it (children
  of a parent that ended ``'compression'``, forks and tool runs left out, preferring a child that
  itself ended ``'compression'``, then a live one, then the latest activity; no
  ``started_at >= ended_at`` test, which races between the gateway and compression defeated),
  then walk on through the newest non-fork child of each session, at most 32 steps, and land on
  the deepest session holding messages (the tip when none holds any).
- :meth:`Lineage.cron_job_runs` is ``list_cron_job_runs``: the sessions ``cron_{job_id}_*`` of
  source ``'cron'``, newest first, as listing rows (``preview``, ``last_active``). The page is
  chosen from ``sessions`` alone through the dialect's exact prefix test (SQLite: a range of the
  id's index, as Hermes queries it), and only its rows are enriched.
- :func:`rank_by_id` is the ranking half of ``search_sessions_by_id``: exact id (or lineage
  root id) first, then prefix, then substring, ties in the listing's order.

A JSON marker (``_branched_from``, ``_delegate_from``) is looked for in ``model_config``'s text,
as everywhere in this package (``repository.has_marker``), so a malformed ``model_config``
cannot make a resume fail. Ids that are not text a database can hold match nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Select, bindparam, case, func, select
from sqlalchemy.engine import Connection

from ..sql.tables import messages_table as messages
from ..sql.tables import sessions_table as sessions
from ..sql.validation import bindable
from ..storage.store import Store
from .repository import (
    COMPRESSION_END_REASON,
    MAX_LINEAGE_DEPTH,
    _listing_dict,
    _rich_select,
    not_a_fork,
    row_count,
)

RESUME_DEPTH = 32
"""Hermes's cap on the walk past the compression tip (malformed data may loop)."""
CRON_SOURCE = "cron"


@functools.cache
def _tip_step() -> Select[Any]:
    """The continuation Hermes 0.18's ``get_compression_tip`` moves to from ``:current``."""
    parent = sessions.alias("parent")
    child = sessions.alias("child")
    latest = messages.alias("latest")
    last_active = func.coalesce(
        select(func.max(latest.c.timestamp))
        .where(latest.c.session_id == child.c.id)
        .correlate(child)
        .scalar_subquery(),
        child.c.started_at,
    )
    return (
        select(child.c.id)
        .select_from(parent.join(child, child.c.parent_session_id == parent.c.id))
        .where(
            parent.c.id == bindparam("current"),
            parent.c.end_reason == COMPRESSION_END_REASON,
            *not_a_fork(child),
        )
        .order_by(
            case(
                (child.c.end_reason == COMPRESSION_END_REASON, 0),
                (child.c.ended_at.is_(None), 1),
                else_=2,
            ),
            last_active.desc(),
            child.c.started_at.desc(),
            child.c.id.desc(),
        )
        .limit(1)
    )


@functools.cache
def _resume_step() -> Select[Any]:
    """The child ``resolve_resume_session_id`` walks to from ``:current``: the newest-started
    one that is not a fork (whatever its parent's end reason)."""
    return (
        select(sessions.c.id)
        .where(sessions.c.parent_session_id == bindparam("current"), *not_a_fork(sessions))
        .order_by(sessions.c.started_at.desc(), sessions.c.id.desc())
        .limit(1)
    )


@functools.cache
def _has_messages() -> Select[Any]:
    return select(messages.c.id).where(messages.c.session_id == bindparam("current")).limit(1)


def compression_tip(conn: Connection, session_id: str) -> str:
    """Hermes 0.18's ``get_compression_tip``: the end of the chain (the id itself when it has
    no continuation, known or not)."""
    current = session_id
    seen = {current}
    for _ in range(MAX_LINEAGE_DEPTH):
        child = conn.execute(_tip_step(), {"current": current}).scalar()
        if not child or child in seen:
            return current
        seen.add(str(child))
        current = str(child)
    return current


def resume_target(conn: Connection, session_id: str) -> str:
    """Where resuming ``session_id`` should land (see the module's docstring)."""
    start = compression_tip(conn, session_id)
    current = start
    seen = {current}
    best: str | None = None
    for _ in range(RESUME_DEPTH):
        if conn.execute(_has_messages(), {"current": current}).first() is not None:
            best = current
        child = conn.execute(_resume_step(), {"current": current}).scalar()
        if not child or child in seen:
            break
        seen.add(str(child))
        current = str(child)
    return best if best is not None else start


def cron_prefix(job_id: str) -> str:
    return f"cron_{job_id}_"


def rank_by_id(rows: Sequence[dict[str, Any]], needle: str, limit: int) -> list[dict[str, Any]]:
    """``rows`` best match of ``needle`` (already stripped and lower-cased) first: an exact id
    or lineage root id, then a prefix, then the rest, each group in the rows' order."""

    def score(row: dict[str, Any]) -> int:
        ids = [str(row.get("id") or ""), str(row.get("_lineage_root_id") or "")]
        normalized = [value.lower() for value in ids if value]
        if needle in normalized:
            return 0
        if any(value.startswith(needle) for value in normalized):
            return 1
        return 2

    ranked = sorted(enumerate(rows), key=lambda item: (score(item[1]), item[0]))
    return [row for _, row in ranked[:limit]]


class Lineage:
    """The lineage reads of one store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def resume_target(self, session_id: Any) -> Any:
        """``resolve_resume_session_id``: an empty or unmatchable id comes back as it was."""
        if not session_id or not bindable(session_id):
            return session_id
        return self.store.read(lambda conn: resume_target(conn, session_id))

    def cron_job_runs(self, job_id: Any, limit: Any = 20, offset: Any = 0) -> list[dict[str, Any]]:
        page = {"limit": row_count(limit, "limit"), "offset": row_count(offset, "offset")}
        if not isinstance(job_id, str) or not bindable(job_id):
            return []
        prefix = cron_prefix(job_id)
        newest_first = (sessions.c.started_at.desc(), sessions.c.id.desc())
        chosen = (
            select(sessions.c.id)
            .where(
                sessions.c.source == CRON_SOURCE,
                self.store.dialect.starts_with(sessions.c.id, prefix),
            )
            .order_by(*newest_first)
            .limit(page["limit"])
            .offset(page["offset"])
            .subquery("page")
        )
        statement = (
            _rich_select()
            .join_from(sessions, chosen, chosen.c.id == sessions.c.id)
            .order_by(*newest_first)
        )
        rows = self.store.read(lambda conn: conn.execute(statement).all())
        return [_listing_dict(row, None) for row in rows]
