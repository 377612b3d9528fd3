"""Which Hermes schema a file's shape proves: tables, columns and keys, never the number alone.

Hermes adds columns without a version bump, a file may sit at an old number with newer columns
(a runtime without FTS5 never advances it), and forks reuse numbers for unrelated schemas (a
"v18" with ``sessions.session_state`` and no v11…v17 columns, a "v23" with ``session_index`` and
``runs``: ``/work/shared/HERMES-V18-PLUS.md`` §4). So a file that claims a number above 17 is
checked against what every Hermes writer of that number has (``REQUIRED_SINCE``, read from the
released wheels: ``tests/support/hermes_v23_v31.md`` §1 and §6) before anything is written:

- **required**: each number's objects that every known writer of it has, cumulative. 18…22
  require only v17's core (what those numbers carried is partly inferred, and their adoption
  adds what such a file lacks); 23 requires all of 0.19.0's tables and columns (every Hermes
  that writes 23 creates them on each open); 24 and 27…29 add nothing attributable. Objects
  Hermes added without a bump are never required;
- **keys**: a Hermes table that exists has Hermes's key, the head's own (``KEYS``, from
  ``sql.tables``); the keys Hermes itself heals (``KEY_HEALS``: ``session_model_usage``
  without ``task``, the scope-less ``gateway_routing``) are healed by the migrations
  (``legacy.complete_head_shape`` reads them here), never a refusal. This module is the one
  home of "what a Hermes table's shape must be, and which wrong shapes are healed";
- anything else a file holds is Hermes's too or a gateway's (Hermes creates tables lazily in
  ``state.db``: topic tables, delivery obligations, hosted rooms): unknown tables are named in a
  refusal, never the reason for one.

A file whose number is at most 17 is not judged here: the v7…v17 adoption adds whatever such a
file lacks (``sessionstore.schema.legacy``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from sqlalchemy import DefaultClause, TextClause, inspect
from sqlalchemy.engine import Connection

from ..sql.tables import metadata as head_metadata

NEWEST_JUDGED = 31
"""The newest Hermes number whose shape this module knows."""
OLDEST_JUDGED = 18
"""Numbers up to 17 are adopted by content without a verdict (they may lack anything)."""

REQUIRED_SINCE: Mapping[int, tuple[str, ...]] = {
    17: (
        "sessions.id", "sessions.source", "sessions.started_at", "sessions.title",
        "sessions.api_call_count", "sessions.handoff_state", "sessions.rewind_count",
        "sessions.archived", "sessions.session_key", "messages.id", "messages.session_id",
        "messages.role", "messages.content", "messages.timestamp", "messages.reasoning_content",
        "messages.platform_message_id", "messages.observed", "messages.active", "state_meta.key",
        "compression_locks.session_id",
    ),
    23: ("sessions.display_name", "sessions.origin_json", "sessions.expiry_finalized",
         "gateway_routing.session_key", "gateway_routing.entry_json",
         "gateway_routing.updated_at", "session_model_usage.session_id",
         "session_model_usage.model", "session_model_usage.input_tokens",
         "session_model_usage.estimated_cost_usd", "session_model_usage.task",
         "messages.effect_disposition", "messages.api_content",
         "sessions.compression_fallback_streak", "sessions.profile_name",
         "async_delegations.delegation_id"),
    25: ("system_prompts.hash", "system_prompts.prompt", "sessions.system_prompt_hash",
         "sessions.last_activity_at", "sessions.last_activity_description",
         "sessions.last_activity_provenance", "sessions.compression_ineffective_count",
         "sessions.pinned", "sessions.last_read_at", "messages.display_kind",
         "messages.display_metadata"),
    26: ("sessions.git_metadata_generation", "sessions.title_source", "sessions.hidden",
         "session_turn_leases.conversation_id", "session_turn_leases.expires_at",
         "gateway_hygiene_state.session_key", "gateway_hygiene_state.failure_streak"),
    30: ("conversation_generations.source", "conversation_generations.session_key",
         "conversation_generations.generation", "sessions.compression_recovery_deadline",
         "sessions.tool_names", "messages.display_identity", "messages.display_order"),
    31: ("messages.message_uid", "messages.absorbed_message_uids", "messages.tool_call_uids",
         "messages.tool_call_uid", "sessions.auto_archived"),
}  # fmt: skip
"""What each number adds that every Hermes writer of it has (cumulative with the numbers below)."""

V6_COLUMNS: Mapping[str, tuple[str, ...]] = {
    "sessions": (
        "id", "source", "user_id", "model", "model_config", "system_prompt",
        "parent_session_id", "started_at", "ended_at", "end_reason", "message_count",
        "tool_call_count", "input_tokens", "output_tokens", "cache_read_tokens",
        "cache_write_tokens", "reasoning_tokens", "billing_provider", "billing_base_url",
        "billing_mode", "estimated_cost_usd", "actual_cost_usd", "cost_status", "cost_source",
        "pricing_version", "title",
    ),
    "messages": (
        "id", "session_id", "role", "content", "tool_call_id", "tool_calls", "tool_name",
        "timestamp", "token_count", "finish_reason", "reasoning", "reasoning_details",
        "codex_reasoning_items",
    ),
}  # fmt: skip
"""Hermes v6's columns (``/work/shared/reference/hermes-v6``): what the v7…v22 adoption, which
starts the chain after v6 (``legacy.LATER_CHAIN_BASE``), takes as there. A file numbered 7 or
more that lacks some (Hermes's own migration tests build such files by hand; Hermes's open adds
any declared column a table lacks) gets them first (``legacy.add_missing_v6_columns``)."""

KEYS: Mapping[str, tuple[str, ...]] = {
    table.name: tuple(column.name for column in table.primary_key.columns)
    for table in head_metadata.tables.values()
}
"""Hermes's key of each table it declares: the head's own (``sql.tables``, a fresh iot 0.22.2
file's shape), so the verdict, the heals and the migrations read one definition."""


class KeyHeal(NamedTuple):
    """A wrong key Hermes heals on every open (iot 0.20.0 onward): never a refusal; the
    migrations heal it after the chain (``legacy.complete_head_shape``), in the same words."""

    table: str
    keep_latest_by: str | None
    """Of rows that share the healed key, keep the latest by this column (Hermes: ``INSERT OR
    REPLACE ... ORDER BY``); None keeps the first (``INSERT OR IGNORE``)."""
    healed: str
    """What was wrong and what the heal did, in words (logged, and returned by the heal)."""


KEY_HEALS: tuple[KeyHeal, ...] = (
    KeyHeal("session_model_usage", None,
            "session_model_usage keyed without task (#73823): rebuilt with the v22 key"),
    KeyHeal("gateway_routing", "updated_at",
            "gateway_routing keyed without scope (#59203): rebuilt keyed by scope too"),
)  # fmt: skip
HEALED_KEYS = frozenset(heal.table for heal in KEY_HEALS)


def empty_by_default(table: str) -> frozenset[str]:
    """The columns of ``table`` Hermes declares ``NOT NULL DEFAULT ''`` (absent or NULL in an
    older shape, they read as '')."""
    return frozenset(
        column.name for column in head_metadata.tables[table].columns
        if isinstance(column.server_default, DefaultClause)
        and isinstance(column.server_default.arg, TextClause)
        and column.server_default.arg.text == "''"
    )  # fmt: skip


HERMES_TABLES = frozenset({
    *(name.split(".")[0] for names in REQUIRED_SINCE.values() for name in names), *KEYS,
    "schema_version", "telegram_dm_topic_mode",
    "telegram_dm_topic_bindings", "delivery_obligations", "alembic_version", "sqlite_sequence",
})  # fmt: skip
"""Tables Hermes (or sessionstore) has; a refusal names the others (search tables aside)."""
_SEARCH_PREFIXES = ("messages_fts", "messages_trigram", "messages_cjk", "fts_v22_trash_")
_LAZY_HERMES_PREFIXES = ("hosted_room",)
"""Tables Hermes's gateway creates in ``state.db`` when a feature is first used."""


@dataclass(frozen=True)
class TableShape:
    columns: frozenset[str]
    key: tuple[str, ...]


@dataclass(frozen=True)
class Catalog:
    """What a file holds, read once without writing: its tables' columns and keys."""

    tables: Mapping[str, TableShape]

    @classmethod
    def read(cls, conn: Connection) -> Catalog:
        inspector = inspect(conn)
        wanted = {name.split(".")[0] for names in REQUIRED_SINCE.values() for name in names}
        tables: dict[str, TableShape] = {}
        for name in inspector.get_table_names():
            if name in wanted or name in KEYS:
                columns = frozenset(column["name"] for column in inspector.get_columns(name))
                key = tuple(inspector.get_pk_constraint(name)["constrained_columns"] or ())
                tables[name] = TableShape(columns, key)
            else:
                tables[name] = TableShape(frozenset(), ())
        return cls(tables)

    def has(self, name: str) -> bool:
        table, _, column = name.partition(".")
        shape = self.tables.get(table)
        return shape is not None and (not column or column in shape.columns)


def required(number: int) -> tuple[str, ...]:
    """Every object a Hermes file at ``number`` has (17 on: the v17 core included)."""
    return tuple(
        name for since in sorted(REQUIRED_SINCE) if since <= number
        for name in REQUIRED_SINCE[since]
    )  # fmt: skip


@dataclass(frozen=True)
class ShapeVerdict:
    """A file's number against its shape (see the module docstring)."""

    claimed: int
    proven: int
    """The highest number whose required objects the file has (16: not even v17's)."""
    missing: tuple[str, ...]
    """Objects ``claimed`` requires that the file lacks: a table name when the whole table is
    absent, else ``table.column``."""
    wrong_keys: tuple[str, ...]
    unknown_tables: tuple[str, ...]

    @property
    def matches(self) -> bool:
        return not self.missing and not self.wrong_keys

    def refusal(self) -> str | None:
        """Why the file is not Hermes's schema ``claimed`` (None when it is)."""
        if self.matches:
            return None
        parts = []
        if self.missing:
            parts.append("it lacks " + _listed(self.missing))
        if self.wrong_keys:
            parts.append(_listed(self.wrong_keys))
        if self.unknown_tables:
            parts.append("it has tables no Hermes release makes: " + _listed(self.unknown_tables))
        nearest = (
            f"; its tables match Hermes schema {self.proven}" if self.proven >= 17 else ""
        )
        return (
            f"schema_version says {self.claimed}, but this file is not Hermes's schema "
            f"{self.claimed}: {'; '.join(parts)}{nearest}. Another program (a fork reusing "
            "Hermes's numbers?) wrote it; it was left untouched."
        )


def _listed(names: Iterable[str]) -> str:
    return ", ".join(names)


def judge(catalog: Catalog, claimed: int) -> ShapeVerdict:
    """Compare the file's shape with Hermes schema ``claimed`` (18 … ``NEWEST_JUDGED``)."""
    absent_tables = {
        name.split(".")[0] for name in required(claimed)
        if name.split(".")[0] not in catalog.tables
    }  # fmt: skip
    missing = tuple(dict.fromkeys(
        name.split(".")[0] if name.split(".")[0] in absent_tables else name
        for name in required(claimed) if not catalog.has(name)
    ))  # fmt: skip
    proven = 16
    for number in sorted(REQUIRED_SINCE):
        if not all(catalog.has(name) for name in required(number)):
            break
        proven = number
    wrong_keys = tuple(
        f"{table} is keyed by ({', '.join(shape.key) or 'nothing'}), not "
        f"({', '.join(KEYS[table])})"
        for table, shape in sorted(catalog.tables.items())
        if table in KEYS and table not in HEALED_KEYS and shape.key != KEYS[table]
    )
    unknown = tuple(
        sorted(
            name for name in catalog.tables
            if name not in HERMES_TABLES
            and not name.startswith((*_SEARCH_PREFIXES, *_LAZY_HERMES_PREFIXES))
        )
    )  # fmt: skip
    return ShapeVerdict(claimed, proven, missing, wrong_keys, unknown)
