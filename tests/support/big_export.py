"""The transfer tests' export: session ``big`` of :data:`BIG_SESSION_MESSAGES` messages (ids
1..3,000: three import batches of 1,000 rows and the start of a fourth before the next
session's row), then ``small`` (telegram) with one message, ``hello``; served once a run by
``tests/ops/conftest.py``'s ``big_export``."""

from __future__ import annotations

import io
from pathlib import Path

from sessionstore import SessionDB
from sessionstore.ops.transfer import export_jsonl

BIG_SESSION_MESSAGES = 3000


def big_export_text(directory: Path) -> str:
    """The export, made by a store built in ``directory``."""
    with SessionDB(url=f"sqlite:///{directory / 'source.db'}") as db:
        db.create_session("big", "cli")
        for start in range(0, BIG_SESSION_MESSAGES, 500):
            db.append_messages("big", [{"role": "user", "content": f"m{index}"}
                                       for index in range(start, start + 500)])  # fmt: skip
        db.create_session("small", "telegram")
        db.append_message("small", "user", "hello")
        buffer = io.StringIO()
        export_jsonl(db.store, buffer)
    return buffer.getvalue()
