"""Column types that differ between the databases, for the tables' definitions.

SQLAlchemy spells a per-database type as ``with_variant(type, dialect_name)``; the names live
here, beside the rest of what differs between SQLite and PostgreSQL. (The migrations keep
frozen copies of their own in ``sessionstore/_migrations/helpers.py``.)
"""

from __future__ import annotations

from sqlalchemy import REAL, BigInteger, Double, Integer
from sqlalchemy.types import TypeEngine

# REAL is what Hermes wrote on SQLite (8-byte float there); PostgreSQL's REAL is 4 bytes, which
# would round Unix timestamps to minutes, so it gets DOUBLE PRECISION.
FloatColumn: TypeEngine[float] = Double().with_variant(REAL(), "sqlite")
# Counters are 64-bit on both databases: SQLite's INTEGER already is (and its DDL stays
# Hermes's), PostgreSQL's integer is 32 bits, hence BIGINT there (revision 0009).
CounterColumn: TypeEngine[int] = BigInteger().with_variant(Integer(), "sqlite")
# Message ids likewise (revision 0023): on SQLite the column stays Hermes's INTEGER PRIMARY KEY,
# the rowid, which is already 64 bits.
IdColumn: TypeEngine[int] = BigInteger().with_variant(Integer(), "sqlite")
