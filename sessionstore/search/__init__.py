"""Search: the query language users type, turned into what each database engine accepts.

:mod:`sessionstore.search.sanitize` holds the pure text functions (no database code).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .hits import ContextMessage, SearchHit
    from .sanitize import (
        MAX_FTS5_QUERY_CHARS,
        MAX_NEGATIONS,
        MAX_TSQUERY_TEXT_BYTES,
        contains_cjk,
        escape_like,
        sanitize_fts5_query,
        to_postgres_tsquery,
    )
    from .service import search_messages

# Opening a store and reading it never searches: the query machinery (and its compiled
# patterns) loads on first use, not with the package (startup, issue 12).
_HOME_OF: dict[str, str] = {
    "ContextMessage": "hits",
    "SearchHit": "hits",
    "MAX_FTS5_QUERY_CHARS": "sanitize",
    "MAX_NEGATIONS": "sanitize",
    "MAX_TSQUERY_TEXT_BYTES": "sanitize",
    "contains_cjk": "sanitize",
    "escape_like": "sanitize",
    "sanitize_fts5_query": "sanitize",
    "to_postgres_tsquery": "sanitize",
    "search_messages": "service",
}


def __getattr__(name: str) -> Any:
    home = _HOME_OF.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


__all__ = [
    "MAX_FTS5_QUERY_CHARS",
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
