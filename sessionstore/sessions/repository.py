"""``SessionRepository``: every typed operation on sessions and messages, in Core SQL,
assembled from one part per concern.

Each part is a class over the same store (:class:`~.shared.RepositoryPart`), in a module of
its own:

- :mod:`.lifecycle`: a session's row: create, read by id, update, end, reopen, reset;
- :mod:`.usage`: token and cost totals, the per-model usage Hermes's Insights reads, and
  the route, per-task and store-total reads of the newest forks;
- :mod:`.messages`: prepare, append, read back, count, clear, search;
- :mod:`.rewind`: rewind, restore, compaction, replacement (built on the messages part);
- :mod:`.imports`: Hermes 0.19's import of exported sessions (built on the messages part);
- :mod:`.compression`: iot 0.22.2's atomic publication of a compression child (built on the
  messages part);
- :mod:`.listing`: find by id or prefix, counts, the rich listing, cron runs, id search;
- :mod:`.recent`: iot 0.22.2's latency-bounded browse of recent conversations;
- :mod:`.lineage`: compression ancestors and tips (both tip rules), resume, archive;
- :mod:`.titles`: set, read and resolve titles (and the lineage numbering rules);
- :mod:`.deletion`: deletes, prunes and bulk archives, with which sessions went;
- :mod:`.windows`: a window of messages around one, with bookends;
- :mod:`.transcript_reads`: iot 0.22.2's display and resume counts, the resume and export
  guards, a peer's conversation boundary, pull-request and Todo scans;
- :mod:`.leases`: compression leases, cooldowns, the fallback streak, ``state_meta``;
- :mod:`.session_state`: turn leases, pinned/hidden/read, activity (Hermes v24...v26);
- :mod:`.gateway`: gateway peers, origins, routing and the handoff state machine;
- :mod:`.profiles`: which profile owns a session (iot 0.22.2's profile repair and backfills);
- :mod:`.telegram_topics`: Telegram DM topic mode and topic bindings (tables made on opt-in);
- :mod:`.maintenance`: ``optimize_fts``, ``rebuild_fts``, ``vacuum``, finalizing orphaned
  continuations.

Decision: the parts are mixins of one class, not objects the repository (or the Hermes
facade) composes and forwards to. A method is written once, in its part, and is a method of
:class:`SessionRepository` as it stands: no forwarding layer repeats its signature, and the
async mirror (``scripts/gen_async_api.py``) walks the class hierarchy in its method
resolution order, which is the order of the bases below, each part's methods in source order.
What a part shares with another has a public name in the module that owns it (the row
builder, the tip rules, the input checks of :mod:`.shared`), never an underscored one; the
parts' private attributes and helper methods have distinct names (a test checks that no part
overrides another's). Parts that prebuild statements extend ``__init__`` cooperatively.

Values are validated and JSON is encoded *before* a write transaction starts, so the write
lock is held only for the statements themselves. Whether a method reads or writes is declared
on it (:mod:`.access`).

``sessionstore.repository`` (the old path) is this module object; the names it offered are
still offered here.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

from ..sql.codec import count_tool_calls, decode_json, encode_json
from ..storage.store import Store
from .compression import CompressionPart
from .deletion import (
    GHOST_AGE_S,
    GHOST_SOURCE,
    SECONDS_PER_DAY,
    Deletion,
    DeletionPart,
    NeverActivePrune,
    delete_matching,
)
from .gateway import GatewayPart
from .imports import ImportsPart
from .leases import LeasesPart
from .lifecycle import EXTRA_SESSION_COLUMNS, LifecyclePart
from .lineage import (
    BRANCH_MARKER,
    BRANCHED_END_REASON,
    COMPRESSION_END_REASON,
    DELEGATE_MARKER,
    MAX_LINEAGE_DEPTH,
    TOOL_SOURCE,
    LineagePart,
    has_marker,
    listable_condition,
)
from .listing import (
    PREVIEW_LENGTH,
    PROJECTED_FIELDS,
    SHORT_ID_LENGTH,
    ListingPart,
    ListingShape,
    cwd_patterns,
    id_needle,
    message_threshold,
)
from .maintenance import MaintenancePart, repair_damaged_search_index
from .messages import MessageIdentity, MessagesPart, NewMessage
from .model_config import ModelConfigPart
from .profiles import ProfilesPart
from .reactions import ReactionsPart
from .recent import RecentBrowsePart
from .rewind import RewindPart
from .row_edits import RowEditsPart
from .session_state import SessionStatePart
from .shared import row_count
from .telegram_topics import TelegramTopicsPart
from .titles import TitlesPart
from .transcript_reads import TranscriptReadsPart
from .usage import UsagePart
from .windows import WindowsPart


class SessionRepository(
    LifecyclePart,
    ModelConfigPart,
    UsagePart,
    RewindPart,
    ImportsPart,
    CompressionPart,
    RowEditsPart,
    ReactionsPart,
    MessagesPart,
    ListingPart,
    RecentBrowsePart,
    LineagePart,
    TitlesPart,
    DeletionPart,
    WindowsPart,
    TranscriptReadsPart,
    LeasesPart,
    SessionStatePart,
    GatewayPart,
    ProfilesPart,
    TelegramTopicsPart,
    MaintenancePart,
):
    """The typed repository of one store: records in, records out (see the module)."""

    def __init__(self, store: Store, *, clock: Callable[[], float] = time.time) -> None:
        """``clock`` is the time leases, cooldowns and the orphan finalize read (a test
        passes its own to expire a lease without sleeping)."""
        super().__init__(store, clock=clock)
        store.repair_damage = functools.partial(repair_damaged_search_index, store)


__all__ = [
    "BRANCHED_END_REASON",
    "BRANCH_MARKER",
    "COMPRESSION_END_REASON",
    "DELEGATE_MARKER",
    "EXTRA_SESSION_COLUMNS",
    "GHOST_AGE_S",
    "GHOST_SOURCE",
    "MAX_LINEAGE_DEPTH",
    "PREVIEW_LENGTH",
    "PROJECTED_FIELDS",
    "SECONDS_PER_DAY",
    "SHORT_ID_LENGTH",
    "TOOL_SOURCE",
    "Deletion",
    "ListingShape",
    "MessageIdentity",
    "NeverActivePrune",
    "NewMessage",
    "SessionRepository",
    "count_tool_calls",
    "cwd_patterns",
    "decode_json",
    "delete_matching",
    "encode_json",
    "has_marker",
    "id_needle",
    "listable_condition",
    "message_threshold",
    "row_count",
]
