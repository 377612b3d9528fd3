"""The names of every search-index object the runtime knows, in one place.

Each dialect's search index (``sessionstore.search.sqlite``,
``sessionstore.search.postgresql``) builds, checks and queries these objects; the models
hide them from autogenerate; the doctor reports them. The migrations keep frozen copies of
their own (an old revision never changes when these do).
"""

from __future__ import annotations

from typing import Final

# -- SQLite (FTS5) -----------------------------------------------------------------------------
WORD_TABLE: Final = "messages_fts"
"""Hermes's word index, in either head layout (``sessionstore.search.sqlite_ddl``)."""
WORD_SOURCE_VIEW: Final = "messages_fts_src"
"""Layout 3's view (a store born at head, or moved there by ``db optimize-storage``)."""
V11_WORD_SOURCE_VIEW: Final = "messages_fts_source"
"""The v11 layout's view (revision 0014; an existing store keeps it at head, as Hermes does)."""
WORD_TRIGGERS: Final = ("messages_fts_insert", "messages_fts_delete", "messages_fts_update")

TRIGRAM_TABLE: Final = "messages_fts_trigram"
"""Hermes's trigram index (revision 0013 on; layout 3 from 0039: no tool rows, no cron,
subagent or delegate sessions)."""
TRIGRAM_SOURCE_VIEW: Final = "messages_fts_trigram_src"
V11_TRIGRAM_SOURCE_VIEW: Final = "messages_fts_trigram_source"
"""The v11 layout's trigram view (revision 0014: the CJK rows, tool output included)."""
TRIGRAM_TRIGGERS: Final = (
    "messages_fts_trigram_insert",
    "messages_fts_trigram_delete",
    "messages_fts_trigram_update",
)
OLD_TRIGRAM_TABLE: Final = "messages_trigram"
"""Revision 0007's trigram table (up to Hermes v9), replaced by :data:`TRIGRAM_TABLE` in 0013."""
OLD_TRIGRAM_SOURCE_VIEW: Final = "messages_trigram_source"
OLD_TRIGRAM_TRIGGERS: Final = (
    "messages_trigram_insert",
    "messages_trigram_delete",
    "messages_trigram_update",
)

SUBSTRING_PAGE_INDEX: Final = "ix_messages_substring_page"
"""A covering index of what a page of substring hits is chosen by (revision 0024, with
``display_kind`` since 0042; SQLite only: PostgreSQL's CJK plan fetches its few candidates by
primary key)."""
SUBSTRING_TIME_INDEX: Final = "ix_messages_time"
"""Messages by time (revision 0040, SQLite only): proves a page of substring hits taken in id
order is the page in time order (:mod:`sessionstore.search.sqlite`)."""

BIGRAM_TABLE: Final = "messages_cjk_bigram"
"""The CJK character-bigram index (revision 0021), contentless, over the CJK rows only."""
BIGRAM_TRIGGERS: Final = (
    "messages_cjk_bigram_insert",
    "messages_cjk_bigram_delete",
    "messages_cjk_bigram_update",
)

HERMES_CJK_TABLE: Final = "messages_fts_cjk"
"""Hermes's optional CJK bigram index (iot 0.20+), whose tokenizer ``cjk_unicode61`` is a
loadable extension this package never loads: its triggers are detached, the table kept."""
HERMES_CJK_TRIGGERS: Final = (
    "messages_fts_cjk_insert",
    "messages_fts_cjk_delete",
    "messages_fts_cjk_update",
)

HERMES_TRIGGERS: Final = (*WORD_TRIGGERS, *TRIGRAM_TRIGGERS)
"""The six trigger names newest Hermes checks for on every open."""

FTS5_TABLES: Final = (WORD_TABLE, OLD_TRIGRAM_TABLE, TRIGRAM_TABLE, BIGRAM_TABLE)
FTS5_SHADOWS: Final = ("data", "idx", "content", "docsize", "config")

# -- PostgreSQL --------------------------------------------------------------------------------
PG_TSV_COLUMN: Final = "content_tsv"
"""Revision 0008's stored tsvector (0001 indexed an expression instead)."""
PG_TSV_EXPRESSION_INDEX: Final = "ix_messages_content_tsv"
PG_TSV_COLUMN_INDEX: Final = "ix_messages_content_tsvector"
PG_CONTENT_TRGM_INDEX: Final = "ix_messages_content_trgm"
"""``pg_trgm`` over ``content`` (before revision 0014)."""
PG_TRGM_INDEX: Final = "ix_messages_indexed_text_trgm"
"""``pg_trgm`` over content, tool name and tool calls (revision 0014 on)."""
PG_BIGRAM_INDEX: Final = "ix_messages_cjk_bigrams"
PG_GRAMS_FUNCTION: Final = "sessionstore_cjk_grams"

SEARCH_OBJECT_NAMES: Final = frozenset(
    {
        *(
            f"{table}_{shadow}" if shadow else table
            for table in FTS5_TABLES
            for shadow in ("", *FTS5_SHADOWS)
        ),
        WORD_SOURCE_VIEW,
        V11_WORD_SOURCE_VIEW,
        TRIGRAM_SOURCE_VIEW,
        V11_TRIGRAM_SOURCE_VIEW,
        OLD_TRIGRAM_SOURCE_VIEW,
        PG_TSV_EXPRESSION_INDEX,
        PG_TSV_COLUMN_INDEX,
        PG_TSV_COLUMN,
        PG_CONTENT_TRGM_INDEX,
        PG_TRGM_INDEX,
        PG_BIGRAM_INDEX,
        SUBSTRING_PAGE_INDEX,
        SUBSTRING_TIME_INDEX,
    }
)
"""Every object the search indexes consist of (the models describe none of them)."""
