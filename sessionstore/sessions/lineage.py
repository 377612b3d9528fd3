"""Lineage: how sessions continue one another, every tip and chain rule side by side.

A session's children are of four kinds, told apart by markers in ``model_config`` and by the
parent's end reason:

- a **compression continuation**: a child of a parent that ended ``'compression'``;
- a **branch**: ``_branched_from`` set, or started after a parent that ended ``'branched'``;
- a **delegate (subagent) run**: ``_delegate_from`` set;
- a **tool run**: source ``'tool'``.

Branches, delegate and tool runs are *forks*: a compression tip never moves to one
(:func:`not_a_fork`). A JSON marker is looked for in ``model_config``'s text: portable across
SQLite and PostgreSQL, and a malformed ``model_config`` (the files hold some) cannot make a
query fail, as ``json_extract`` would; the key's quotes keep it from matching inside another
key or value. Ids that are not text a database can hold match nothing.

**Two compression-tip rules, on purpose.** Each is named for what it is for:

- :func:`projection_tips` (the *listing's projection tip*, which
  :meth:`LineagePart.get_compression_tip` answers too): the SPEC's rule ("a compression
  continuation is a child whose parent ended with ``compression`` and that started at or after
  the parent's end; get_compression_tip follows such children to the newest one"). From a
  root, move to the newest non-fork child that started at or after the parent ended, and on;
  one recursive query walks a whole page of roots in one round trip (a picker lists 50
  rows). Hermes 0.18 projects with its own
  ``get_compression_tip`` instead, which also follows a continuation that started *before*
  its parent ended and prefers a live child to a newer stale one. Moving the listing to that
  rule changes what the SPEC and the listing's tests say a picker shows, so it is a decision
  of its own, not part of a move: until it is made,
  ``tests/hermes/test_real_hermes_methods.py`` keeps a strict xfail on the difference.
- :func:`resume_tip` (where a *resume* starts its walk): Hermes 0.18's ``get_compression_tip``,
  walked one step at a time: children of a parent that ended ``'compression'``, forks left
  out, preferring a child that itself ended ``'compression'``, then a live one, then the latest
  activity; no ``started_at >= ended_at`` test, which races between the gateway and compression
  defeated. A resume must land where Hermes lands (the conversation the user continues), so
  it follows Hermes exactly. :func:`resume_target` then walks on through the newest non-fork
  child of each session, at most :data:`RESUME_DEPTH` steps, and lands on the deepest session
  holding messages (the tip when none holds any): Hermes's ``resolve_resume_session_id``.

The other chain rules: :func:`listable_condition` (roots and branch children: what a picker
lists), :func:`delegate_descendants` (what a delete takes along),
:meth:`LineagePart.compression_ancestors` (what a conversation replays before itself) and the
compression lineage an archive flag covers (up and down).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Select,
    and_,
    bindparam,
    case,
    func,
    literal_column,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import TextClause

from ..search.sanitize import escape_like
from ..sql.codec import decode_json_object
from ..sql.tables import messages_table as messages
from ..sql.tables import sessions_table as sessions
from ..sql.validation import bindable
from .access import reads, writes
from .shared import RepositoryPart

COMPRESSION_END_REASON = "compression"
ACCIDENTAL_END_REASONS = (
    "agent_close", "ws_orphan_reap", "superseded_by_resume", "startup_orphan_reap",
)  # fmt: skip
"""iot 0.22.2's ``RECOVERABLE_END_REASONS``: ends that were accidents, not the user's intent,
which ``unarchive_recoverable_session`` undoes."""
MAX_LINEAGE_DEPTH = 100
"""The longest walk along a chain (a corrupt cycle of parents cannot loop forever)."""
RESUME_DEPTH = 32
"""Hermes's cap on the walk past the compression tip (malformed data may loop)."""
BRANCH_MARKER = "_branched_from"
DELEGATE_MARKER = "_delegate_from"
RESET_MARKER = "_reset_from"
RESET_END_REASONS = (
    "session_reset", "session_switch", "idle", "daily", "suspended", "resume_pending_expired"
)
"""Where a parent ended when a gateway reset continued it in a child (iot 0.22.2's
``_RESET_END_REASONS``): the pre-marker rule for a reset child."""
TOOL_SOURCE = "tool"
BRANCHED_END_REASON = "branched"


# -- kinds of children --------------------------------------------------------------------------
def _marker_pattern(marker: str) -> str:
    return '%"' + escape_like(marker) + '"%'


def _has_marker_sql(alias: str, marker: str) -> str:
    pattern = _marker_pattern(marker).replace("'", "''")
    return f"COALESCE({alias}.model_config, '') LIKE '{pattern}' ESCAPE '\\'"


def _not_a_fork_sql(alias: str) -> str:
    """:func:`not_a_fork` as SQL text on the session ``alias`` (for the recursive walk)."""
    return (
        f"NOT ({_has_marker_sql(alias, BRANCH_MARKER)}) "
        f"AND NOT ({_has_marker_sql(alias, DELEGATE_MARKER)}) "
        f"AND COALESCE({alias}.source, '') <> '{TOOL_SOURCE}'"
    )


def has_marker(marker: str, table: Any = sessions) -> ColumnElement[bool]:
    return func.coalesce(table.c.model_config, "").like(_marker_pattern(marker), escape="\\")


def not_a_fork(table: Any) -> list[ColumnElement[bool]]:
    """The session ``table`` (a ``sessions`` alias) is not a branch, not a delegate run and
    not a tool run, so a compression tip may move to it."""
    return [
        ~has_marker(BRANCH_MARKER, table),
        ~has_marker(DELEGATE_MARKER, table),
        func.coalesce(table.c.source, "") != TOOL_SOURCE,
    ]


def listable_condition(
    *, include_subagents: bool = False, legacy_resets: bool = False
) -> ColumnElement[bool]:
    """Roots, branch children and reset children, without delegate runs: what Hermes's
    pickers list (iot 0.22.2's ``_LISTABLE_CHILD_SQL``). With ``include_subagents`` (iot's
    ``sessions.show_subagents``) the delegate runs are listed too, and only they: a
    compression continuation stays behind its root.

    A reset child (a gateway's ``/new`` or idle reset) carries ``_reset_from``; before the
    marker, it rode its parent's non-empty ``session_key`` after the parent ended at a reset
    boundary (:data:`RESET_END_REASONS`). ``legacy_resets`` applies that older rule: only a
    store with ``sessions.session_key`` (v18+) has it."""
    parent = sessions.alias("listed_parent")
    branched_parent = (
        select(parent.c.id)
        .where(
            parent.c.id == sessions.c.parent_session_id,
            parent.c.end_reason == BRANCHED_END_REASON,
            sessions.c.started_at >= parent.c.ended_at,
        )
        .correlate(sessions)
        .exists()
    )
    # CASE, not OR: it guarantees that a root (most rows) never runs the branch tests.
    whens: list[tuple[ColumnElement[bool], int]] = [
        (sessions.c.parent_session_id.is_(None), 1),
        (has_marker(BRANCH_MARKER), 1),
        (branched_parent, 1),
        (has_marker(RESET_MARKER), 1),
    ]
    if legacy_resets:
        reset_parent = sessions.alias("reset_parent")
        whens.append((
            select(reset_parent.c.id)
            .where(
                reset_parent.c.id == sessions.c.parent_session_id,
                # Inline literals: a prebuilt (driver-cursor) statement cannot expand an IN.
                reset_parent.c.end_reason.in_(
                    [literal_column(f"'{reason}'") for reason in RESET_END_REASONS]
                ),
                sessions.c.session_key.is_not(None),
                sessions.c.session_key != "",
                sessions.c.session_key == reset_parent.c.session_key,
            )
            .correlate(sessions)
            .exists(),
            1,
        ))  # fmt: skip
    listable_kind = case(*whens, else_=0)
    if include_subagents:
        return or_(listable_kind == 1, has_marker(DELEGATE_MARKER))
    return and_(listable_kind == 1, ~has_marker(DELEGATE_MARKER))


def delegate_descendants(conn: Connection, parents: Sequence[str]) -> list[str]:
    """Delegate children of ``parents``, recursively: sessions whose ``_delegate_from`` names
    one of them, or whose parent is one of them and which carry any ``_delegate_from``. The
    parents themselves are never collected."""
    visited = set(parents)
    frontier = set(parents)
    found: list[str] = []
    while frontier:
        rows = conn.execute(
            select(sessions.c.id, sessions.c.parent_session_id, sessions.c.model_config).where(
                has_marker(DELEGATE_MARKER),
                or_(
                    sessions.c.parent_session_id.in_(sorted(frontier)),
                    *(
                        sessions.c.model_config.like(f"%{escape_like(parent)}%", escape="\\")
                        for parent in sorted(frontier)
                    ),
                ),
            )
        ).all()
        next_frontier: set[str] = set()
        for session_id, parent_id, config in rows:
            if session_id in visited:
                continue
            marker = decode_json_object(config).get(DELEGATE_MARKER)
            if marker in frontier or (parent_id in frontier and marker is not None):
                visited.add(session_id)
                next_frontier.add(session_id)
                found.append(str(session_id))
        frontier = next_frontier
    return found


def _compression_lineage(conn: Connection, session_id: str) -> set[str]:
    """The session and every session linked to it by a compression edge, either way."""
    return compression_lineages(conn, [session_id])


def compression_lineages(conn: Connection, session_ids: Sequence[str]) -> set[str]:
    """The known ones of ``session_ids`` and every session linked to one of them by a
    compression edge, either way (one read of the table, however many seeds)."""
    rows = conn.execute(
        select(sessions.c.id, sessions.c.parent_session_id, sessions.c.end_reason)
    ).all()
    by_id = {str(row[0]): row for row in rows}
    children: dict[str, list[str]] = {}
    for row in rows:
        if row[1] is not None:
            children.setdefault(str(row[1]), []).append(str(row[0]))
    lineage = {session_id for session_id in session_ids if session_id in by_id}
    pending = list(lineage)
    while pending:
        current = pending.pop()
        row = by_id[current]
        linked: list[str] = []
        parent = by_id.get(str(row[1])) if row[1] is not None else None
        if parent is not None and parent[2] == COMPRESSION_END_REASON:
            linked.append(str(parent[0]))
        if row[2] == COMPRESSION_END_REASON:
            linked += children.get(current, [])
        for other in linked:
            if other not in lineage:
                lineage.add(other)
                pending.append(other)
    return lineage


def line_through(conn: Connection, session_ids: Sequence[str]) -> set[str]:
    """iot 0.22.2's ``_LINEAGE_CTE_SQL`` for each of ``session_ids``: the session, its
    ancestors up through parents that ended ``'compression'``, and its descendants down
    through every child of a session that ended ``'compression'``. Narrower than
    :func:`compression_lineages`: a branch off an ancestor is not on the line. The idle sweep
    archives, and a resume unarchives, exactly this."""
    line: set[str] = set()
    for session_id in session_ids:
        current = session_id
        while True:
            line.add(current)
            parent = conn.execute(
                select(sessions.c.parent_session_id).where(sessions.c.id == current)
            ).scalar()
            if parent is None or parent in line:
                break
            ended = conn.execute(
                select(sessions.c.end_reason).where(sessions.c.id == parent)
            ).first()
            if ended is None or ended[0] != COMPRESSION_END_REASON:
                break
            current = str(parent)
        frontier = [session_id]
        while frontier:
            parent_row = sessions.alias("parent_row")
            rows = conn.execute(
                select(sessions.c.id)
                .join(parent_row, parent_row.c.id == sessions.c.parent_session_id)
                .where(
                    parent_row.c.id.in_(frontier),
                    parent_row.c.end_reason == COMPRESSION_END_REASON,
                )
            )
            frontier = []
            for row in rows:
                if str(row[0]) not in line:
                    line.add(str(row[0]))
                    frontier.append(str(row[0]))
    return line


def _is_branch_row(model_config: Any) -> bool:
    """Hermes 0.19's ``_is_branch_child_row``: ``model_config`` parses as a JSON object whose
    ``_branched_from`` is set (not null)."""
    return decode_json_object(model_config).get(BRANCH_MARKER) is not None


# -- the listing's projection tip (v6 SPEC rule) -----------------------------------------------
def projection_tips_sql(roots_sql: str) -> str:
    """The walk from each root to the tip a listing projects it onto; ``roots_sql`` is the SQL
    of the roots' list. Yields ``(root, id)``: each known root with its tip (itself when it has
    no continuation).

    A continuation is the newest non-fork child that started at or after its parent ended with
    ``'compression'``; depth is bounded so a corrupt cycle cannot loop forever.
    """
    return f"""
WITH RECURSIVE chain(root, id, depth) AS (
    SELECT id, id, 0 FROM sessions WHERE id IN {roots_sql}
    UNION ALL
    SELECT chain.root, child.id, chain.depth + 1
    FROM chain
    JOIN sessions AS parent ON parent.id = chain.id
    JOIN sessions AS child ON child.parent_session_id = parent.id
    WHERE parent.end_reason = '{COMPRESSION_END_REASON}'
      AND parent.ended_at IS NOT NULL
      AND child.started_at >= parent.ended_at
      AND chain.depth < {MAX_LINEAGE_DEPTH}
      AND child.id = (
          SELECT newest.id FROM sessions AS newest
          WHERE newest.parent_session_id = parent.id AND newest.started_at >= parent.ended_at
            AND {_not_a_fork_sql("newest")}
          ORDER BY newest.started_at DESC, newest.id DESC
          LIMIT 1
      )
)
SELECT root, id FROM chain AS last
WHERE depth = (SELECT MAX(depth) FROM chain AS other WHERE other.root = last.root)
"""


@functools.cache
def _projection_tips_statement() -> TextClause:
    return text(projection_tips_sql(":roots")).bindparams(bindparam("roots", expanding=True))


def projection_tips(conn: Connection, root_ids: Sequence[str]) -> dict[str, str]:
    """Each known root's projection tip (itself when it has no continuation); unknown ids are
    absent."""
    if not root_ids:
        return {}
    rows = conn.execute(_projection_tips_statement(), {"roots": list(root_ids)})
    return {str(root): str(tip) for root, tip in rows}


def projection_tip(conn: Connection, session_id: str) -> str | None:
    return projection_tips(conn, [session_id]).get(session_id)


# -- the resume target (Hermes 0.18's walk) ----------------------------------------------------
@functools.cache
def _resume_tip_step() -> Select[Any]:
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


def resume_tip(conn: Connection, session_id: str) -> str:
    """Hermes 0.18's ``get_compression_tip``: the end of the chain (the id itself when it has
    no continuation, known or not)."""
    current = session_id
    seen = {current}
    for _ in range(MAX_LINEAGE_DEPTH):
        child = conn.execute(_resume_tip_step(), {"current": current}).scalar()
        if not child or child in seen:
            return current
        seen.add(str(child))
        current = str(child)
    return current


def resume_target(conn: Connection, session_id: str) -> str:
    """Where resuming ``session_id`` should land (see the module's docstring)."""
    start = resume_tip(conn, session_id)
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


class LineagePart(RepositoryPart):
    """The lineage reads of the repository, and the archive flag that follows a lineage."""

    @reads
    def compression_ancestors(self, session_id: str) -> list[str]:
        """The sessions this one continues after compression, oldest first."""
        if not isinstance(session_id, str) or not bindable(session_id):
            return []

        def run(conn: Connection) -> list[str]:
            chain: list[str] = []
            current = session_id
            for _ in range(MAX_LINEAGE_DEPTH):
                parent = conn.execute(
                    select(sessions.c.parent_session_id).where(sessions.c.id == current)
                ).scalar()
                if parent is None or parent in chain or parent == session_id:
                    break
                reason = conn.execute(
                    select(sessions.c.end_reason).where(sessions.c.id == parent)
                ).scalar()
                if reason != COMPRESSION_END_REASON:
                    break
                chain.append(str(parent))
                current = str(parent)
            return list(reversed(chain))

        return self.store.read(run)

    @reads
    def get_compression_tip(self, session_id: str) -> str | None:
        """The projection tip (:func:`projection_tips`: the one a listing shows, bounded
        walk); None if the session is unknown."""
        if not isinstance(session_id, str) or not bindable(session_id):
            return None
        return self.store.read(lambda conn: projection_tip(conn, session_id))

    @reads
    def resolve_resume_session_id(self, session_id: str) -> str:
        """Hermes's ``resolve_resume_session_id`` (:func:`resume_target`): an empty or
        unmatchable id comes back as it was."""
        if not session_id or not bindable(session_id):
            return session_id
        return self.store.read(lambda conn: resume_target(conn, session_id))

    @reads
    def lineage_root_to_tip(self, session_id: str) -> list[str]:
        """Hermes 0.19's parent walk: the session and its ancestors through *every* kind of
        parent (compression, branch, delegate), root first, at most
        :data:`MAX_LINEAGE_DEPTH` long, stopping at a cycle or an unknown parent. An unknown
        session is its own one-element chain, as in Hermes; an id no database could hold
        too."""
        if not isinstance(session_id, str) or not session_id or not bindable(session_id):
            return [session_id]
        parent_of = select(sessions.c.parent_session_id).where(
            sessions.c.id == bindparam("id")
        )

        def run(conn: Connection) -> list[str]:
            chain: list[str] = []
            current: str | None = session_id
            for _ in range(MAX_LINEAGE_DEPTH):
                if not current or current in chain:
                    break
                chain.append(current)
                row = conn.execute(parent_of, {"id": current}).first()
                if row is None:
                    break
                current = None if row[0] is None else str(row[0])
            return list(reversed(chain))

        return self.store.read(run)

    @reads
    def get_conversation_root(self, session_id: str) -> str:
        """Hermes 0.19's stable conversation id: the first session of
        :meth:`lineage_root_to_tip` (``session_id`` itself without a parent)."""
        chain = self.lineage_root_to_tip(session_id)
        return chain[0] if chain and chain[0] else session_id

    @reads
    def get_compression_lineage(self, session_id: str) -> list[str]:
        """Hermes 0.19's compression lineage, oldest first: up from the session through
        parents it continues (a non-branch child of a parent that ended ``'compression'``),
        then down from that root through the first non-branch child (by ``started_at``) of
        each session that ended ``'compression'``. A branch child is its own lineage; an
        unknown session has none (``[]``). When the walk down does not pass the session (it
        is not on the chain's first-child path), its lineage is the session alone."""
        if not isinstance(session_id, str) or not bindable(session_id):
            return []
        row_of = select(
            sessions.c.id, sessions.c.parent_session_id, sessions.c.end_reason,
            sessions.c.model_config,
        ).where(sessions.c.id == bindparam("id"))  # fmt: skip
        children_of = (
            select(sessions.c.id, sessions.c.parent_session_id, sessions.c.end_reason,
                   sessions.c.model_config)
            .where(sessions.c.parent_session_id == bindparam("id"))
            .order_by(sessions.c.started_at, sessions.c.id)
        )  # fmt: skip

        def run(conn: Connection) -> list[str]:
            session = conn.execute(row_of, {"id": session_id}).first()
            if session is None:
                return []
            if _is_branch_row(session[3]):
                return [session_id]
            root = session
            ancestors = {str(root[0])}
            while root[1] is not None and not _is_branch_row(root[3]):
                parent = conn.execute(row_of, {"id": root[1]}).first()
                if parent is None or parent[2] != COMPRESSION_END_REASON:
                    break
                if str(parent[0]) in ancestors:
                    break
                root = parent
                ancestors.add(str(root[0]))
            lineage = [str(root[0])]
            current = root
            while current[2] == COMPRESSION_END_REASON:
                following = next(
                    (child for child in conn.execute(children_of, {"id": current[0]})
                     if not _is_branch_row(child[3])),
                    None,
                )  # fmt: skip
                if following is None or str(following[0]) in lineage:
                    break
                lineage.append(str(following[0]))
                current = following
            return lineage if session_id in lineage else [session_id]

        return self.store.read(run)

    @writes
    def set_session_archived(self, session_id: str, archived: bool = True) -> bool:
        """Archive (or unarchive) a session with its whole compression lineage: every session
        reachable through a parent that ended ``'compression'``, up and down. False when the
        session does not exist."""
        if not isinstance(session_id, str) or not bindable(session_id):
            return False
        flag = 1 if archived else 0

        def run(conn: Connection) -> bool:
            lineage = _compression_lineage(conn, session_id)
            if not lineage:
                return False
            conn.execute(
                update(sessions)
                .where(sessions.c.id.in_(sorted(lineage)))
                .values(archived=flag, auto_archived=0)
            )
            return True

        return self.store.write(run)

    @writes
    def unarchive_recoverable_session(self, session_id: str) -> bool:
        """iot 0.22.2's recovery of a session archived by an accident: when the session is
        archived and its tip (:func:`projection_tip`) ended for a recoverable reason
        (:data:`ACCIDENTAL_END_REASONS`), unarchive its compression lineage as
        :meth:`set_session_archived` does and clear the tip's end, so a later deliberate
        archive is never taken for an accident. True only then; False for anything else (a
        deliberate archive, an unknown, empty or non-``str`` id), changing nothing. One
        transaction, where iot takes three."""
        if not isinstance(session_id, str) or not session_id or not bindable(session_id):
            return False

        def run(conn: Connection) -> bool:
            archived = conn.execute(
                select(sessions.c.archived).where(sessions.c.id == session_id)
            ).first()
            if archived is None or not archived[0]:
                return False
            tip = projection_tip(conn, session_id) or session_id
            ended = conn.execute(
                select(sessions.c.id, sessions.c.end_reason).where(sessions.c.id == tip)
            ).first()
            if ended is None:  # iot falls back to the session itself
                ended = conn.execute(
                    select(sessions.c.id, sessions.c.end_reason)
                    .where(sessions.c.id == session_id)
                ).first()  # fmt: skip
            if ended is None or (ended[1] or "") not in ACCIDENTAL_END_REASONS:
                return False
            lineage = sorted(_compression_lineage(conn, session_id))
            conn.execute(
                update(sessions).where(sessions.c.id.in_(lineage))
                .values(archived=0, auto_archived=0)
            )  # fmt: skip
            conn.execute(
                update(sessions).where(sessions.c.id == ended[0])
                .values(ended_at=None, end_reason=None)
            )  # fmt: skip
            return True

        return self.store.write(run)
