"""The ``timings`` of a session export (iot 0.22.2's ``_export_timings``): text-free evidence
of where a session's time went, derived from its messages' timestamps.

iot 0.22.2 attaches it to every exported session (``export_session``, ``export_session_lineage``,
``export_all``) because exports go into bug reports: a reader should see whether a slow turn was
one long model gap or many small tool intervals without reading raw clocks. It holds ids, roles,
counts and durations only, never text. Hermes keeps no stopwatch of its own, so message
timestamps are all there is (``complete`` is always False).

A clock that cannot be trusted (outside 1970...2103, text that is no number: a salvaged or
hand-edited row) counts as ``missing`` and never fails the export, as iot's ``coerce_epoch``
reads it (:func:`..sql.validation.epoch`). Derived, so never stored: an import ignores it, and
the next export computes it again from the rows.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from ..sql.validation import epoch


def export_timings(messages: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The ``timings`` dict of an export of ``messages`` (``get_messages`` dicts, in order)."""
    timestamped = [
        (message, stamp)
        for message in messages
        if (stamp := epoch(message.get("timestamp"))) is not None
    ]
    role_counts = Counter(str(message.get("role") or "unknown") for message in messages)
    tool_calls_emitted = sum(
        len(calls) if isinstance(calls, list) else 1
        for calls in (message.get("tool_calls") for message in messages)
        if calls
    )
    pairs = list(itertools.pairwise(timestamped))
    gaps = [_milliseconds(later - earlier) for (_, earlier), (_, later) in pairs]
    intervals = [
        {
            "from_message_id": earlier.get("id"),
            "to_message_id": later.get("id"),
            "from_role": earlier.get("role"),
            "to_role": later.get("role"),
            "gap_ms": gap,
        }
        for ((earlier, _), (later, _)), gap in zip(pairs, gaps, strict=True)
    ]
    first = timestamped[0][1] if timestamped else None
    last = timestamped[-1][1] if timestamped else None
    return {
        "source": "message_timestamps",
        "available": bool(timestamped),
        "complete": False,
        "unavailable_reason": None if timestamped else "no_timestamped_messages",
        "message_timestamps": {
            "available": len(timestamped),
            "missing": len(messages) - len(timestamped),
        },
        "first_message_at": None if first is None else _iso(first),
        "last_message_at": None if last is None else _iso(last),
        "wall_clock_ms": None if first is None or last is None else _milliseconds(last - first),
        "largest_gap_ms": max(gaps) if gaps else None,
        "role_counts": dict(role_counts),
        "tool_result_count": role_counts.get("tool", 0),
        "tool_calls_emitted": tool_calls_emitted,
        "intervals": intervals,
    }


def _milliseconds(seconds: float) -> int:
    """A gap in whole milliseconds, never negative (a clock that stepped back is no gap)."""
    return max(0, round(seconds * 1000))


def _iso(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, tz=timezone.utc).isoformat()
