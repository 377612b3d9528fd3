"""Search: the query language users type, turned into what each database engine accepts.

:mod:`sessionstore.search.sanitize` holds the pure text functions (no database code).
"""

from __future__ import annotations

from .hits import ContextMessage, SearchHit
from .sanitize import (
    MAX_NEGATIONS,
    MAX_TSQUERY_TEXT_BYTES,
    contains_cjk,
    escape_like,
    sanitize_fts5_query,
    to_postgres_tsquery,
)
from .service import search_messages

__all__ = [
    "MAX_NEGATIONS",
    "MAX_TSQUERY_TEXT_BYTES",
    "ContextMessage",
    "SearchHit",
    "contains_cjk",
    "escape_like",
    "sanitize_fts5_query",
    "search_messages",
    "to_postgres_tsquery",
]
