"""Hermes schema v16: tag delegate (subagent) sessions with ``model_config._delegate_from``.

Why: Hermes v16 (d62979a6f) tells subagent runs apart from branches and compression
continuations by a JSON marker, hides tagged sessions from pickers and cascade-deletes them
with their parent. Its data step (no DDL) tags, as Hermes does:

1. every child that is neither a branch child (``_branched_from`` set, or its parent ended
   ``'branched'`` before it started) nor a compression child (its parent ended
   ``'compression'``): ``_delegate_from`` = its parent's id;
2. every untagged root with no title, at most 25 messages, at least one ``tool`` message and
   no children (an already-orphaned subagent run): ``_delegate_from`` = ``'__orphaned__'``.

Hermes runs this step only when its open takes a file across v16. A file that was at v16 or
later before this migration run (a Hermes v16/v17 file adopted at 0008, or one a newer Hermes
moved on) is not tagged again: the real 0.17.0/0.18.0 files showed the step hiding a user's
own untitled session with a tool message as an ``__orphaned__`` subagent run
(`tests/test_real_hermes.py`; `sessionstore/_migrations/chain_state.py`).

It runs in Python over the rows rather than with ``json_set`` so that it behaves the same on
PostgreSQL and so one malformed ``model_config`` (kept as it is) does not stop the others from
being tagged; the JSON written is compact, like SQLite's ``json_set``. Downgrade only writes 15
back: the markers are ordinary ``model_config`` content that a v15 Hermes ignores, and no one
can tell a marker this step wrote from one Hermes wrote.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-01
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

from sessionstore._migrations import helpers
from sessionstore._migrations.chain_state import HERMES_SCHEMA_BEFORE_CHAIN

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA_VERSION = 16
DELEGATE_MARKER = "_delegate_from"
BRANCH_MARKER = "_branched_from"
ORPHANED = "__orphaned__"
MAX_ORPHAN_MESSAGES = 25


def _config(raw: Any) -> dict[str, Any] | None:
    """The parsed model_config, {} for NULL/empty, None when it is not a JSON object."""
    if raw is None or raw == "":
        return {}
    try:
        value = json.loads(raw)
    except (TypeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _tag(bind: sa.engine.Connection, session_id: str, config: dict[str, Any], value: str) -> None:
    config = {**config, DELEGATE_MARKER: value}
    bind.execute(
        sa.text("UPDATE sessions SET model_config = :config WHERE id = :id"),
        {"config": json.dumps(config, ensure_ascii=False, separators=(",", ":")), "id": session_id},
    )


def upgrade() -> None:
    bind = op.get_bind()
    before = bind.info.get(HERMES_SCHEMA_BEFORE_CHAIN)
    if isinstance(before, int) and before >= SCHEMA_VERSION:
        helpers.set_schema_version(SCHEMA_VERSION)  # Hermes tagged this file's rows itself
        return
    rows = bind.execute(
        sa.text(
            "SELECT id, parent_session_id, model_config, title, message_count, started_at, "
            "ended_at, end_reason FROM sessions"
        )
    ).all()
    by_id = {row.id: row for row in rows}
    has_children = {row.parent_session_id for row in rows if row.parent_session_id is not None}
    with_tool_messages = {
        session_id
        for (session_id,) in bind.execute(
            sa.text("SELECT DISTINCT session_id FROM messages WHERE role = 'tool'")
        )
    }
    for row in rows:
        config = _config(row.model_config)
        if config is None or config.get(DELEGATE_MARKER) is not None:
            continue
        branched = config.get(BRANCH_MARKER) is not None
        if row.parent_session_id is not None:
            parent = by_id.get(row.parent_session_id)
            branch_child = branched or (
                parent is not None
                and parent.end_reason == "branched"
                and parent.ended_at is not None
                and row.started_at >= parent.ended_at
            )
            compression_child = parent is not None and parent.end_reason == "compression"
            if not branch_child and not compression_child:
                _tag(bind, row.id, config, row.parent_session_id)
        elif (
            not branched
            and row.title is None
            and (row.message_count or 0) <= MAX_ORPHAN_MESSAGES
            and row.id in with_tool_messages
            and row.id not in has_children
        ):
            _tag(bind, row.id, config, ORPHANED)
    helpers.set_schema_version(SCHEMA_VERSION)


def downgrade() -> None:
    helpers.set_schema_version(SCHEMA_VERSION - 1)
