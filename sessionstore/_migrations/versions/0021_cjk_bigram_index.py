"""Every CJK query from an index: a character-bigram index, and ASCII-cheap search triggers.

Why: Hermes answers CJK needles of one or two characters (数据, 迁移, 库: the common case in
Chinese) with a ``LIKE`` scan of every message, and so did this package; a trigram index
cannot hold them. A bigram index (each CJK character with the one after it, as Lucene's CJK
analyzers index) answers needles of any length: the candidates are the rows holding every
bigram of the needle, then verified against the text, so the results are exactly the scan's.
See ``_migrations/revision_0021_ddl.py`` for the objects and why the tokens are computed in
SQL inside the triggers (rows Hermes or any other program writes are indexed too).

Also: revision 0014's trigram triggers tested every appended message with a ``GLOB`` for CJK
(about 83 ns per character, 8.7 µs for a typical append); they are re-created under the same
names with a byte-length = character-length test first, so pure-ASCII text skips the ``GLOB``.

No Hermes schema number: a file at this revision is still Hermes v17 (``schema_version``
stays 17); newest Hermes leaves tables and triggers it does not know alone, and its writes
fire these triggers like ours.

Downgrade drops the bigram index (triggers first) and puts 0014's trigram triggers back.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from sessionstore._migrations import revision_0021_ddl, search_ddl

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        revision_0021_ddl.sqlite_prefilter_trigram_triggers(bind)
        revision_0021_ddl.sqlite_create_bigram_index(bind)
    else:
        revision_0021_ddl.pg_create_bigram_index(bind)


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        revision_0021_ddl.sqlite_drop_bigram_index(bind)
        search_ddl.restore_hermes_trigram_triggers(bind)
    else:
        revision_0021_ddl.pg_drop_bigram_index(bind)
