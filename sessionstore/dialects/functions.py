"""SQL functions whose name differs between the databases, as SQLAlchemy expressions that
compile to each database's own spelling (the rest of what differs is in :mod:`.interface`)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Integer
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement


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
