"""The conversation around each hit: the message before, the hit, the message after.

"Before" and "after" follow the session's order, ``(timestamp, id)``, the order
``get_messages`` uses, not raw id adjacency (Hermes's ``id ± 1`` picks up another session's
message, or none, when sessions interleave). Whatever the number of hits, this is one
statement: each hit's neighbours are found by correlated subqueries (each an index probe on
``idx_messages_session``) and the first 200 characters of all three messages come back in the
hit's row. The hit ids are one JSON parameter, so the statement is built once, compiled once
per dialect (``sql.statements``) and run on the driver's cursor (SQLAlchemy's per-call
compilation cost more than the query). SQLite's search reads the same columns in the
statement that reads its hits instead (:data:`CONTEXT_COLUMNS`, :data:`CONTEXT_JOINS`: one
statement less); PostgreSQL's runs this one after.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Final

from sqlalchemy import Select, and_, case, func, or_, select, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql import ColumnElement
from sqlalchemy.sql.selectable import NamedFromClause

from ..dialects import dialect_for, json_list
from ..sql.codec import cell_text
from ..sql.message_content import (
    ENCODED_CONTENT_PREFIXES,
    STORED_ON_POSTGRESQL_PREFIX,
    text_of,
)
from ..sql.statements import HotReads, fixed_count
from ..sql.tables import messages_table
from .hits import CONTEXT_CONTENT_CHARS, ContextLine, FoundRow

_STATEMENTS: weakref.WeakKeyDictionary[Engine, HotReads] = weakref.WeakKeyDictionary()


def fetch_context(conn: Connection, hit_ids: Sequence[int]) -> dict[int, ContextColumns]:
    """For each hit id: the columns of its previous message (if any), itself and its next
    message (if any), as :data:`ContextColumns` (:func:`context_lines` and
    :func:`context_dicts` read them).

    The hit's own line says so (``is_hit``), so a reader can place it without another query.
    A message without text comes back as ``""``, as Hermes's ``(content or "")[:200]`` does.
    An id that names no message is absent from the result.
    """
    if not hit_ids:
        return {}
    rows = _statement(conn).rows(conn, {"hit_ids": json_list([int(i) for i in hit_ids])})
    return {int(row[0]): tuple(row[1:]) for row in rows}


ContextColumns = tuple[Any, ...]
"""A hit's context as :data:`CONTEXT_COLUMNS` (or :func:`fetch_context`'s statement) reads
it: the hit's role and head, then each neighbour's id, role and head (no id: none). Empty: no
context (the hit's message was not found)."""


def context_lines(*columns: Any) -> list[ContextLine]:
    """A hit's context lines from its :data:`ContextColumns`."""
    if not columns:
        return []
    role, head, before_id, before_role, before_head, after_id, after_role, after_head = columns
    hit = (cell_text(role), head_text(head), True)
    if before_id is None and after_id is None:
        return [hit]
    around = []
    if before_id is not None:
        around.append(_line(before_role, before_head))
    around.append(hit)
    if after_id is not None:
        around.append(_line(after_role, after_head))
    return around


def context_dicts(*columns: Any) -> list[dict[str, Any]]:
    """Hermes's ``context`` of a hit (``{"role", "content"}`` per line) from its
    :data:`ContextColumns`: :func:`context_lines` without the lines in between (a search
    builds this for every hit it returns to ``SessionDB``). A plain text (the common case) is
    taken as is: the statement cut it (:data:`CONTEXT_COLUMNS`); :func:`head_text` decides
    the others."""
    if not columns:
        return []
    role, head, before_id, before_role, before_head, after_id, after_role, after_head = columns
    plain = _ENCODED
    hit = {"role": cell_text(role), "content": head[:_CHARS] if type(head) is str
           and not head.startswith(plain) else head_text(head)}
    if before_id is None:
        if after_id is None:
            return [hit]
        return [hit, {"role": cell_text(after_role), "content": after_head[:_CHARS]
                      if type(after_head) is str and not after_head.startswith(plain)
                      else head_text(after_head)}]
    before = {"role": cell_text(before_role), "content": before_head[:_CHARS]
              if type(before_head) is str and not before_head.startswith(plain)
              else head_text(before_head)}
    if after_id is None:
        return [before, hit]
    return [before, hit, {"role": cell_text(after_role), "content": after_head[:_CHARS]
                          if type(after_head) is str and not after_head.startswith(plain)
                          else head_text(after_head)}]


def hit_dicts(rows: Sequence[FoundRow]) -> list[dict[str, Any]]:
    """Hermes's dicts (``SearchHit.to_dict``) of found rows whose context is read, built from
    the rows directly: ``SessionDB``'s search, which returns dicts, never needs the hits."""
    # Written out here, without the hit in between: one call less a hit.
    return [
        {"id": row[0], "session_id": row[1], "role": row[2], "snippet": row[3],
         "timestamp": row[4], "tool_name": row[5], "source": row[6], "model": row[7],
         "session_started": row[8], "context": context_dicts(*row[9] or ())}
        for row in rows
    ]  # fmt: skip


_ENCODED: Final = ENCODED_CONTENT_PREFIXES
_CHARS: Final = CONTEXT_CONTENT_CHARS


def head_text(head: Any) -> str:
    """A context line's text: plain text (the common case) cut, no text (an assistant's tool
    calls) ``""``, marked content decoded."""
    if type(head) is str:
        if not head.startswith(ENCODED_CONTENT_PREFIXES):
            return head[:CONTEXT_CONTENT_CHARS]
    elif head is None:
        return ""
    return _text(head)


def _line(role: Any, head: Any) -> ContextLine:
    return (cell_text(role), head_text(head), False)


def _text(head: Any) -> str:
    return text_of(head)[:CONTEXT_CONTENT_CHARS]


def _head_sql(content: str) -> str:
    """:func:`_head` as SQL text (both dialects spell it so)."""
    prefix = STORED_ON_POSTGRESQL_PREFIX
    assert "'" not in prefix
    return (f"CASE WHEN length({content}) = 0 OR substr({content}, 1, {len(prefix)}) = "
            f"'{prefix}' THEN {content} ELSE substr({content}, 1, {CONTEXT_CONTENT_CHARS}) END")


def _neighbour_sql(hit: str, *, before: bool) -> str:
    """:func:`_neighbour_id` as SQL text, correlated with the hit's alias ``hit``."""
    less, order = ("<", "DESC") if before else (">", "ASC")
    return (
        f"(SELECT other.id FROM messages AS other WHERE other.session_id = {hit}.session_id"
        f" AND other.timestamp {less}= {hit}.timestamp AND (other.timestamp {less}"
        f" {hit}.timestamp OR (other.timestamp = {hit}.timestamp AND other.id {less} {hit}.id))"
        f" ORDER BY other.timestamp {order}, other.id {order} LIMIT 1)"
    )


def _sqlite_head_sql(content: str) -> str:
    """:func:`_head_sql` in comparisons SQLite makes without reading the text as characters
    (``length()`` counts every character of a message, ``substr()`` those of its head): a
    text below ``char(1)`` is empty or starts with NUL (``length() = 0``), an empty blob is
    the other value of length 0, and a prefix is a range of the binary order. The very values
    :func:`_head_sql` gives, blobs and the marker included, but for a NUL (below); 18 us of a
    CJK search's 0.25 ms statement for 20 hits.

    A text of at most four bytes a character of the head (800) comes whole, as does a longer
    one with a NUL character in its head: ``substr()`` stops at a NUL, where Hermes cuts the
    text in Python (``content[:200]``) and shows what follows it; the caller cuts
    (:func:`context_dicts`). A longer text has more than 200 characters, so its head was cut
    short by a NUL exactly when the byte after it is one (a NUL 201st character brings the
    text whole too, which the caller cuts the same). A blob keeps its 200 bytes. Per line of
    context (``docs/performance.md``): no cost up to 800 bytes, 0.25-0.6 us above."""
    prefix = STORED_ON_POSTGRESQL_PREFIX
    assert "'" not in prefix and prefix.endswith(":")
    after = prefix[:-1] + ";"
    head = f"substr({content}, 1, {CONTEXT_CONTENT_CHARS})"
    return (f"CASE WHEN {content} < char(1) OR {content} = x'' OR ({content} >= '{prefix}'"
            f" AND {content} < '{after}')"
            f" OR ({content} < x'' AND (length(CAST({content} AS BLOB))"
            f" <= {4 * CONTEXT_CONTENT_CHARS} OR substr(CAST({content} AS BLOB),"
            f" length(CAST({head} AS BLOB)) + 1, 1) = x'00'))"
            f" THEN {content} ELSE {head} END")


def sqlite_cut_head_sql(content: str) -> str:
    """Whether :func:`_sqlite_head_sql` of ``content`` is its text, whole or cut (a text, not
    empty nor starting with NUL, not marked): that head then holds the text's first
    CONTEXT_CONTENT_CHARS characters, NULs and what follows them included, so any
    ``substr(content, start, length)`` ending within them is that slice of the head, up to
    the head's first NUL (where ``substr()`` stops)."""
    prefix = STORED_ON_POSTGRESQL_PREFIX
    after = prefix[:-1] + ";"
    return (
        f"{content} >= char(1) AND {content} < x'' AND NOT ({content} >= '{prefix}'"
        f" AND {content} < '{after}')"
    )


def _context_columns(head_sql: Callable[[str], str]) -> str:
    return (
        f"m.role, {head_sql('m.content')}, context_before.id, context_before.role,"
        f" {head_sql('context_before.content')}, context_after.id, context_after.role,"
        f" {head_sql('context_after.content')}"
    )


CONTEXT_COLUMNS: Final = _context_columns(_head_sql)
"""The :data:`ContextColumns` of a hit aliased ``m`` (what :func:`context_lines` takes) in a
statement that adds :data:`CONTEXT_JOINS`: a search reads its hits' context in the statement
that reads their columns (one statement less than :func:`fetch_context`)."""
SQLITE_CONTEXT_COLUMNS: Final = _context_columns(_sqlite_head_sql)
""":data:`CONTEXT_COLUMNS` as SQLite computes them fastest (:func:`_sqlite_head_sql`)."""
CONTEXT_JOINS: Final = (
    f" LEFT JOIN messages AS context_before ON context_before.id = "
    f"{_neighbour_sql('m', before=True)}"
    f" LEFT JOIN messages AS context_after ON context_after.id = "
    f"{_neighbour_sql('m', before=False)}"
)


def _statement(conn: Connection) -> HotReads:
    engine = conn.engine
    statement = _STATEMENTS.get(engine)
    if statement is None:
        id_list = dialect_for(conn).json_id_list_sql("hit_ids")
        statement = _STATEMENTS[engine] = HotReads(conn.dialect, _context_rows(id_list))
    return statement


def _neighbour_id(hit: NamedFromClause, *, before: bool) -> ColumnElement[Any]:
    other = messages_table.alias("earlier" if before else "later")
    if before:
        # The redundant bound on timestamp is the index range: under the OR alone both
        # databases walk the session's whole index from its far end.
        bound = other.c.timestamp <= hit.c.timestamp
        strictly = or_(
            other.c.timestamp < hit.c.timestamp,
            and_(other.c.timestamp == hit.c.timestamp, other.c.id < hit.c.id),
        )
        order = (other.c.timestamp.desc(), other.c.id.desc())
    else:
        bound = other.c.timestamp >= hit.c.timestamp
        strictly = or_(
            other.c.timestamp > hit.c.timestamp,
            and_(other.c.timestamp == hit.c.timestamp, other.c.id > hit.c.id),
        )
        order = (other.c.timestamp.asc(), other.c.id.asc())
    return (
        select(other.c.id)
        .where(other.c.session_id == hit.c.session_id, bound, strictly)
        .order_by(*order)
        .limit(fixed_count(1))
        .correlate(hit)
        .scalar_subquery()
    )


def _is_marked(content: Any) -> Any:
    """Marked JSON content (`message_content`): SQLite sees its leading NUL as the end of the
    text (``length() = 0``), PostgreSQL stores the marker with U+FFFD."""
    prefix = STORED_ON_POSTGRESQL_PREFIX
    return or_(func.length(content) == 0, func.substr(content, 1, len(prefix)) == prefix)


def _head(content: Any) -> ColumnElement[Any]:
    # Structured (multi-part) content whole, so its text parts can be shown.
    return case(
        (_is_marked(content), content),
        else_=func.substr(content, 1, CONTEXT_CONTENT_CHARS),
    )


@functools.cache
def _context_rows(id_list_sql: str) -> Select[Any]:
    hit = messages_table.alias("hit")
    neighbours = (
        select(
            hit.c.id.label("hit_id"),
            _neighbour_id(hit, before=True).label("before_id"),
            _neighbour_id(hit, before=False).label("after_id"),
        )
        .where(text(f"hit.id IN {id_list_sql}"))
        .cte("neighbours")
    )
    this = messages_table.alias("this")
    before = messages_table.alias("before")
    after = messages_table.alias("after")
    return select(
        neighbours.c.hit_id,
        this.c.role,
        _head(this.c.content),
        before.c.id,
        before.c.role,
        _head(before.c.content),
        after.c.id,
        after.c.role,
        _head(after.c.content),
    ).select_from(
        neighbours.join(this, this.c.id == neighbours.c.hit_id)
        .outerjoin(before, before.c.id == neighbours.c.before_id)
        .outerjoin(after, after.c.id == neighbours.c.after_id)
    )
