"""iot 0.22.2's busy-queue accept rows (#125577): a prompt the gateway accepted while the agent
was busy is written at once as a live user row whose ``display_metadata`` carries
``_queued_prompt`` = 1; its drain replaces it with an unmarked row. A row still marked was
never drained: a restart discarded the in-memory queue, and nothing else retires it, so an
alternation repair would glue the never-run prompt into the previous turn.

:func:`retire_undrained_queue_rows` is the one rule, on a caller's transaction, used by
``retire_undrained_queue_rows`` (:mod:`.gateway`, the read-only mount paths' retirement) and
by ``reopen_session`` (:mod:`.lifecycle`, before the end is cleared, as iot's reopen does).
It lives apart from both so each can use it without importing the other (the gateway part
reads the lifecycle's end reasons). Deactivated (``active = 0``), never deleted: the row
stays history, as in iot.
"""

from __future__ import annotations

import json
from typing import Any, Final

from sqlalchemy import select, update
from sqlalchemy.engine import Connection

from ..sql.tables import messages_table as messages

QUEUED_PROMPT_KEY: Final = "_queued_prompt"
"""iot 0.22.2's ``display_metadata`` mark of a busy-queue accept row not yet drained."""


def metadata_value(display_metadata: str | None, key: str) -> Any:
    """``key`` of a ``display_metadata`` JSON object, as SQLite's guarded ``json_extract``
    reads it (iot's ``CASE WHEN json_valid(...)``): None when the text is no JSON object or
    lacks the key."""
    if not display_metadata:
        return None
    try:
        decoded = json.loads(display_metadata)
    except (ValueError, RecursionError):
        return None
    return decoded.get(key) if isinstance(decoded, dict) else None


def retire_undrained_queue_rows(conn: Connection, session_id: str) -> int:
    """The one rule of a never-drained accept row (see the module), on the caller's
    transaction: a live user row whose ``_queued_prompt`` reads as 1 in SQL (``true``, ``1``,
    ``1.0``; not the text ``"1"``) is deactivated. How many were."""
    candidates = select(messages.c.id, messages.c.display_metadata).where(
        messages.c.session_id == session_id,
        messages.c.role == "user",
        messages.c.active == 1,
        messages.c.display_metadata.like(f"%{QUEUED_PROMPT_KEY}%"),
    )
    ids = [
        row[0] for row in conn.execute(candidates)
        if _is_one(metadata_value(row[1], QUEUED_PROMPT_KEY))
    ]  # fmt: skip
    if not ids:
        return 0
    conn.execute(update(messages).where(messages.c.id.in_(ids)).values(active=0))
    return len(ids)


def _is_one(value: Any) -> bool:
    return isinstance(value, (int, float)) and value == 1
