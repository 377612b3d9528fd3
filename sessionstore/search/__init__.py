"""Search: the query language users type, turned into what each database engine accepts.

:mod:`sessionstore.search.sanitize` holds the pure text functions (no database code).
"""

from __future__ import annotations

from .sanitize import (
    MAX_NEGATIONS,
    MAX_TSQUERY_TEXT_BYTES,
    contains_cjk,
    escape_like,
    sanitize_fts5_query,
    to_postgres_tsquery,
)

__all__ = [
    "MAX_NEGATIONS",
    "MAX_TSQUERY_TEXT_BYTES",
    "contains_cjk",
    "escape_like",
    "sanitize_fts5_query",
    "to_postgres_tsquery",
]
