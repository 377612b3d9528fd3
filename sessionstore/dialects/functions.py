"""SQL functions whose name differs between the databases, and SQLite's index hint, as
SQLAlchemy expressions that compile to each database's own spelling (the rest of what differs
is in :mod:`.interface`)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Integer, Table
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.sql.selectable import Alias
from sqlalchemy.sql.visitors import InternalTraversal


class text_position(FunctionElement[int]):
    """Where ``needle`` first occurs in ``haystack``, counted in characters from 1; 0 when it
    does not (SQLite ``instr``, PostgreSQL ``strpos``)."""

    type = Integer()
    inherit_cache = True
    name = "text_position"


@compiles(text_position, "sqlite")
def _sqlite_position(element: text_position, compiler: SQLCompiler, **kw: Any) -> str:
    return f"instr({compiler.process(element.clauses, **kw)})"


@compiles(text_position, "postgresql")
def _postgresql_position(element: text_position, compiler: SQLCompiler, **kw: Any) -> str:
    return f"strpos({compiler.process(element.clauses, **kw)})"


class IndexedAlias(Alias):
    """An alias of a table that SQLite reads through one named index (``INDEXED BY``); other
    databases read it as a plain alias. Made by :func:`indexed_alias`."""

    inherit_cache = True
    # The index is part of the statement cache's key.
    _traverse_internals = [  # noqa: RUF012 (SQLAlchemy's own class attribute)
        *Alias._traverse_internals,
        ("index_name", InternalTraversal.dp_string),
    ]
    index_name: str


def indexed_alias(table: Table, name: str, index_name: str) -> IndexedAlias:
    """``table AS name``, read on SQLite through ``index_name`` whatever ``sqlite_stat1``
    says (see docs/performance.md, "Plans that do not follow the statistics"). Only for an
    index every store has: SQLite refuses a statement naming an index that is not there."""
    alias = IndexedAlias._construct(table, name=name)
    alias.index_name = index_name
    return alias


@compiles(IndexedAlias, "sqlite")
def _sqlite_indexed_alias(element: IndexedAlias, compiler: SQLCompiler, **kw: Any) -> str:
    rendered: str = compiler.visit_alias(element, **kw)  # type: ignore[no-untyped-call]
    if not kw.get("asfrom"):
        return rendered
    return f"{rendered} INDEXED BY {compiler.preparer.quote(element.index_name)}"
