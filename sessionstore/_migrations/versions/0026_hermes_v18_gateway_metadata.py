"""Hermes schema v18: gateway metadata on the session row, backfilled from ``sessions.json``.

Why: Hermes v18 (hermes-agent 0.18.1, #9006) moves what its gateway kept only in
``$HERMES_HOME/sessions/sessions.json`` onto ``sessions``: ``display_name``, ``origin_json``
(the messaging origin as JSON) and ``expiry_finalized`` (``INTEGER DEFAULT 0``). Its data step
copies, once, what that file knows about each session into the columns still NULL (and the
peer columns of v17: ``session_key``, ``chat_id``, ``chat_type``, ``thread_id``), never
overwriting a value. This revision runs the same step with the same SQL and the same JSON
spelling (``json.dumps`` defaults), best effort as Hermes's is: a missing, unreadable or
malformed file, or a failing row, leaves the columns NULL and the migration goes on.

Where the file is looked for: ``sessions/sessions.json`` beside the database file, which is
``$HERMES_HOME/sessions/sessions.json`` for the file Hermes uses (``$HERMES_HOME/state.db``)
and for each Hermes profile (a profile is a ``HERMES_HOME`` of its own). The environment is
not read: a migration of a copy or a backup elsewhere must not take another installation's
gateway metadata. PostgreSQL has no such file beside it: nothing is backfilled there (a store
copied from a Hermes file brings the columns' values with it).

Like revision 0019, the step runs only when this run takes the file across v18: a file Hermes
already numbered 18 or more had its backfill.

A store this chain has just created holds no rows; its ``sessions`` is laid out again in
Hermes v18's declared order (``helpers.lay_out_empty_table``). Downgrade drops the three
columns (the backfilled peer columns are v17's and stay) and writes 17 back.

Revision ID: 0026
Revises: 0025
Create Date: 2027-01-10
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import op

from sessionstore._migrations import helpers
from sessionstore._migrations.chain_state import HERMES_SCHEMA_BEFORE_CHAIN

revision: str = "0026"
down_revision: str | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA_VERSION = 18
GATEWAY_COLUMNS = ("display_name", "origin_json", "expiry_finalized")
SESSIONS_JSON = Path("sessions") / "sessions.json"
V18_SESSION_ORDER = (
    "id", "source", "user_id", "session_key", "chat_id", "chat_type", "thread_id",
    *GATEWAY_COLUMNS, "model", "model_config", "system_prompt", "parent_session_id",
    "started_at", "ended_at", "end_reason", "message_count", "tool_call_count", "input_tokens",
    "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens", "cwd",
    "git_branch", "git_repo_root", "billing_provider", "billing_base_url", "billing_mode",
    "estimated_cost_usd", "actual_cost_usd", "cost_status", "cost_source", "pricing_version",
    "title", "api_call_count", "handoff_state", "handoff_platform", "handoff_error",
    "compression_failure_cooldown_until", "compression_failure_error", "rewind_count",
    "archived",
)  # fmt: skip
# Hermes 0.18.1's statement, word for word (``_backfill_gateway_metadata_from_sessions_json``).
BACKFILL = sa.text(
    "UPDATE sessions SET session_key = COALESCE(session_key, :session_key),"
    " chat_id = COALESCE(chat_id, :chat_id), chat_type = COALESCE(chat_type, :chat_type),"
    " thread_id = COALESCE(thread_id, :thread_id),"
    " display_name = COALESCE(display_name, :display_name),"
    " origin_json = COALESCE(origin_json, :origin_json),"
    " expiry_finalized = CASE WHEN COALESCE(expiry_finalized, 0) = 0 AND :finalized = 1"
    " THEN 1 ELSE expiry_finalized END"
    " WHERE id = :id"
)

logger = logging.getLogger(__name__)


def sessions_json_beside(bind: sa.engine.Connection) -> Path | None:
    """``sessions/sessions.json`` beside the SQLite file (None elsewhere, or if absent)."""
    if bind.dialect.name != "sqlite":
        return None
    for _seq, name, file in bind.exec_driver_sql("PRAGMA database_list"):
        if name == "main" and file:
            candidate = Path(file).parent / SESSIONS_JSON
            return candidate if candidate.is_file() else None
    return None


def backfill_rows(data: Any) -> list[dict[str, Any]]:
    """The UPDATE's parameters for each entry, exactly as Hermes derives them."""
    if not isinstance(data, dict):
        return []
    rows: list[dict[str, Any]] = []
    for key, entry in data.items():
        if str(key).startswith("_") or not isinstance(entry, dict):
            continue
        session_id = entry.get("session_id")
        if not session_id:
            continue
        origin = entry.get("origin")
        origin_map = origin if isinstance(origin, dict) else None
        rows.append(
            {
                "session_key": entry.get("session_key") or key,
                "chat_id": origin_map.get("chat_id") if origin_map is not None else None,
                "chat_type": entry.get("chat_type"),
                "thread_id": origin_map.get("thread_id") if origin_map is not None else None,
                "display_name": entry.get("display_name"),
                "origin_json": json.dumps(origin) if origin_map is not None else None,
                "finalized": 1
                if entry.get("expiry_finalized") or entry.get("memory_flushed")
                else 0,
                "id": str(session_id),
            }
        )
    return rows


def backfill_gateway_metadata(bind: sa.engine.Connection) -> int:
    """Hermes v18's backfill, best effort; how many entries were applied."""
    source = sessions_json_beside(bind)
    if source is None:
        return 0
    try:
        rows = backfill_rows(json.loads(source.read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        logger.warning("v18 gateway metadata backfill skipped: %s unreadable (%s)", source, exc)
        return 0
    if not rows:
        return 0
    try:
        with bind.begin_nested():  # a failing row undoes the step, never the migration
            for row in rows:
                bind.execute(BACKFILL, row)
    except sa.exc.DBAPIError as exc:
        logger.warning("v18 gateway metadata backfill skipped: %s", exc)
        return 0
    return len(rows)


def upgrade() -> None:
    bind = op.get_bind()
    helpers.add_columns_if_missing(
        "sessions",
        [
            sa.Column("display_name", sa.Text()),
            sa.Column("origin_json", sa.Text()),
            sa.Column("expiry_finalized", sa.Integer(), server_default=sa.text("0")),
        ],
    )
    before = bind.info.get(HERMES_SCHEMA_BEFORE_CHAIN)
    if not (isinstance(before, int) and before >= SCHEMA_VERSION):
        backfill_gateway_metadata(bind)
    helpers.lay_out_empty_table("sessions", V18_SESSION_ORDER)
    helpers.set_schema_version(SCHEMA_VERSION)


def downgrade() -> None:
    helpers.drop_columns("sessions", list(GATEWAY_COLUMNS))
    helpers.set_schema_version(SCHEMA_VERSION - 1)
