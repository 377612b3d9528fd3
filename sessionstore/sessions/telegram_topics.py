"""Telegram DM topic mode (Hermes 0.17+, newest at iot 0.22.2): which private chats use topics,
and which Hermes session each topic thread is bound to.

The tables (:mod:`sessionstore.sql.topic_tables`) exist only once a caller opts in, as in
Hermes: :meth:`apply_telegram_topic_migration` (and the writes that need them:
:meth:`enable_telegram_topic_mode`, :meth:`bind_telegram_topic`) creates them at their v3, or
brings a v1/v2 pair a Hermes file holds to v3 in the same transaction (SQLite cannot alter a
key: each table is rebuilt, every row kept under the ``default`` profile, a v1 binding whose
session is gone dropped as Hermes drops it, since the v3 key's cascade would refuse it), and
records ``state_meta telegram_dm_topic_schema_version = '3'``.

``export``, ``import`` and ``db copy`` (:mod:`sessionstore.ops.transfer`) read and make the
tables through this module's own :func:`topic_shape`, :func:`topic_rows` and
:func:`ensure_topic_tables`: one rule for a v1/v2 row, one opt-in.

Reads never create or change anything: absent tables read as empty (False, None, []), and a
v1/v2 pair reads as it is, its rows being the ``default`` profile's (newest Hermes heals such
a pair on read instead; ours waits for the next topic write). The other writes
(:meth:`disable_telegram_topic_mode`, :meth:`delete_telegram_topic_binding`) never create the
tables: absent, they do nothing.

Rules, Hermes's: an empty profile is ``default``; a session is bound to one topic (binding it
to another raises ``ValueError``, rebinding the same topic replaces the binding's fields);
deleting a chat's last binding turns its topic mode off in the same transaction;
:meth:`list_unlinked_telegram_sessions_for_user` is a user's Telegram sessions of the profile
bound to no topic, most recently active first, as listing dicts (``preview``,
``last_active``). Hermes lists every profile's when the bindings table is absent; ours keeps
to the profile asked for (docs/hermes.md, "Differences from Hermes").
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, TypeVar

from sqlalchemy import Table, delete, exists, func, insert, literal_column, select, text, update
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ColumnElement

from ..dialects.interface import StoreDialect
from ..errors import UnknownSessionError
from ..sql import validation
from ..sql.tables import sessions_table as sessions
from ..sql.topic_tables import DEFAULT_PROFILE, TOPIC_SCHEMA_META_KEY, TOPIC_SCHEMA_VERSION
from ..storage.store import Store
from .access import reads, writes
from .leases import meta_upsert
from .listing import listing_dict, listing_last_active, listing_select
from .profiles import session_key_profile
from .shared import RepositoryPart, row_count

TELEGRAM_SOURCE = "telegram"
ALREADY_LINKED = "session is already linked to another Telegram topic"

T = TypeVar("T")

TopicShape = Literal["absent", "legacy", "current"]
"""A topic table in a store: not there, at v1/v2 (no ``profile_name``), or at v3."""


def topic_profile(profile_name: str | None) -> str:
    """Hermes's profile rule: empty or missing is ``default``."""
    name = str(profile_name or "").strip()
    return validation.identifier(name, "profile_name") if name else DEFAULT_PROFILE


def _text_of(value: Any, name: str) -> str:
    """A topic key or id as Hermes stores it: anything as its ``str()`` (a numeric chat id as
    its digits)."""
    return validation.identifier(str(value), name)


def _topic_tables() -> tuple[Table, Table]:
    """The topic mode and binding tables, (modes, bindings): imported (and built, by
    ``sql/topic_tables.py``'s module ``__getattr__``) when a topic call first needs them, not
    with this module, which every store's open imports."""
    from ..sql.topic_tables import topic_bindings_table, topic_mode_table

    return topic_mode_table, topic_bindings_table


def _flag(value: bool | None) -> int | None:
    return None if value is None else (1 if value else 0)


class TelegramTopicsPart(RepositoryPart):
    """Telegram DM topic mode and topic bindings (see the module)."""

    def __init__(self, store: Store, *, clock: Callable[[], float] = time.time) -> None:
        super().__init__(store, clock=clock)
        # Once both tables are seen at v3 they stay so (no Hermes takes them back), so reads
        # skip the catalog query; absent or v1/v2 tables are looked at again on each call.
        self._topic_tables_current = False

    # -- the tables -------------------------------------------------------------------------
    def _topic_shape(self, conn: Connection, table: Table) -> tuple[TopicShape, list[str]]:
        if self._topic_tables_current:
            return "current", [column.name for column in table.c]
        return topic_shape(self.store.dialect, conn, table)

    def _ensure_topic_tables(self, conn: Connection, *, create: bool) -> bool:
        """Bring the tables to v3 (creating them only when ``create``); whether they exist."""
        if self._topic_tables_current:
            return True
        return ensure_topic_tables(self.store.dialect, conn, create=create)

    def _write_topics(self, work: Callable[[Connection], T], *, create: bool) -> T | None:
        """Run ``work`` in a write after bringing the tables to v3 (None, and nothing run,
        when they are absent and not to be created). The tables are remembered as current
        only once that write has committed."""

        def run(conn: Connection) -> tuple[bool, T | None]:
            if not self._ensure_topic_tables(conn, create=create):
                return False, None
            return True, work(conn)

        ready, result = self.store.write(run)
        if ready:
            self._topic_tables_current = True
        return result

    def _topic_rows(
        self,
        table: Table,
        profile: str | None,
        where: Callable[[], list[ColumnElement[bool]]],
        order: ColumnElement[Any] | None = None,
    ) -> list[dict[str, Any]]:
        """The rows of ``table`` (of ``profile``; None: every profile's) matching ``where``,
        each as a dict of every column; a v1/v2 table's rows are the default profile's."""

        def run(conn: Connection) -> list[dict[str, Any]]:
            shape, columns = self._topic_shape(conn, table)
            return topic_rows(
                conn, table, shape, columns, profile, where, () if order is None else (order,)
            )

        return self.store.read(run)

    @writes
    def apply_telegram_topic_migration(self) -> None:
        """Create the topic tables at v3, or bring a v1/v2 pair to v3 (every live row kept,
        as the ``default`` profile's); record the version in ``state_meta``. Idempotent."""
        self._topic_tables_current = False  # look again: the caller asks for the check
        self._write_topics(lambda conn: None, create=True)

    # -- topic mode -------------------------------------------------------------------------
    @writes
    def enable_telegram_topic_mode(
        self,
        *,
        chat_id: str,
        user_id: str,
        profile_name: str = DEFAULT_PROFILE,
        has_topics_enabled: bool | None = None,
        allows_users_to_create_topics: bool | None = None,
    ) -> None:
        """Turn topic mode on for one private chat (creating the tables if need be)."""
        modes, _ = _topic_tables()

        now = self.clock()
        values = {
            "profile_name": topic_profile(profile_name),
            "chat_id": _text_of(chat_id, "chat_id"),
            "user_id": _text_of(user_id, "user_id"),
            "enabled": 1,
            "activated_at": now,
            "updated_at": now,
            "has_topics_enabled": _flag(has_topics_enabled),
            "allows_users_to_create_topics": _flag(allows_users_to_create_topics),
            "capability_checked_at": now,
        }
        statement = self.store.dialect.insert(modes).values(values)
        statement = statement.on_conflict_do_update(
            index_elements=[modes.c.profile_name, modes.c.chat_id],
            set_={
                name: statement.excluded[name]
                for name in ("user_id", "enabled", "updated_at", "has_topics_enabled",
                             "allows_users_to_create_topics", "capability_checked_at")
            },
        )  # fmt: skip

        self._write_topics(lambda conn: conn.execute(statement), create=True)

    @writes
    def disable_telegram_topic_mode(
        self, *, chat_id: str, profile_name: str = DEFAULT_PROFILE, clear_bindings: bool = True
    ) -> None:
        """Turn topic mode off for one chat; ``clear_bindings`` also drops its bindings. Never
        creates the tables: absent, nothing happens."""
        modes, bindings = _topic_tables()

        profile = topic_profile(profile_name)
        chat = _text_of(chat_id, "chat_id")
        clear = validation.flag(clear_bindings, "clear_bindings")
        now = self.clock()

        def run(conn: Connection) -> None:
            conn.execute(
                update(modes)
                .where(modes.c.profile_name == profile, modes.c.chat_id == chat)
                .values(enabled=0, updated_at=now)
            )
            if clear:
                conn.execute(
                    delete(bindings).where(
                        bindings.c.profile_name == profile, bindings.c.chat_id == chat
                    )
                )

        self._write_topics(run, create=False)

    @reads
    def is_telegram_topic_mode_enabled(
        self, *, chat_id: str, user_id: str, profile_name: str = DEFAULT_PROFILE
    ) -> bool:
        """Whether topic mode is on for this chat and user (False without the tables)."""
        modes, _ = _topic_tables()

        chat, user = _text_of(chat_id, "chat_id"), _text_of(user_id, "user_id")
        rows = self._topic_rows(
            modes, topic_profile(profile_name),
            lambda: [modes.c.chat_id == chat, modes.c.user_id == user],
        )  # fmt: skip
        return bool(rows and rows[0]["enabled"])

    # -- bindings ---------------------------------------------------------------------------
    @reads
    def get_telegram_topic_binding(
        self, *, chat_id: str, thread_id: str, profile_name: str = DEFAULT_PROFILE
    ) -> dict[str, Any] | None:
        """The binding of one topic thread (every column), or None."""
        _, bindings = _topic_tables()

        chat, thread = _text_of(chat_id, "chat_id"), _text_of(thread_id, "thread_id")
        rows = self._topic_rows(
            bindings, topic_profile(profile_name),
            lambda: [bindings.c.chat_id == chat, bindings.c.thread_id == thread],
        )  # fmt: skip
        return rows[0] if rows else None

    @reads
    def list_telegram_topic_bindings_for_chat(
        self, *, chat_id: str, profile_name: str = DEFAULT_PROFILE
    ) -> list[dict[str, Any]]:
        """Every binding of one chat, most recently updated first ([] without the tables)."""
        _, bindings = _topic_tables()

        chat = _text_of(chat_id, "chat_id")
        return self._topic_rows(
            bindings, topic_profile(profile_name), lambda: [bindings.c.chat_id == chat],
            bindings.c.updated_at.desc(),
        )  # fmt: skip

    @reads
    def get_telegram_topic_binding_by_session(self, *, session_id: str) -> dict[str, Any] | None:
        """The binding of one session (whatever its profile), or None."""
        _, bindings = _topic_tables()

        session = _text_of(session_id, "session_id")
        rows = self._topic_rows(bindings, None, lambda: [bindings.c.session_id == session])
        return rows[0] if rows else None

    @reads
    def is_telegram_session_linked_to_topic(self, *, session_id: str) -> bool:
        """Whether the session is bound to any topic (False without the tables)."""
        return self.get_telegram_topic_binding_by_session(session_id=session_id) is not None

    @writes
    def delete_telegram_topic_binding(
        self, *, chat_id: str, thread_id: str, profile_name: str = DEFAULT_PROFILE
    ) -> int:
        """Remove one topic's binding (a topic deleted in Telegram); when it was the chat's
        last, topic mode is turned off in the same transaction. How many rows went (0 without
        the tables)."""
        modes, bindings = _topic_tables()

        profile = topic_profile(profile_name)
        chat, thread = _text_of(chat_id, "chat_id"), _text_of(thread_id, "thread_id")
        now = self.clock()

        def run(conn: Connection) -> int:
            of_chat = (bindings.c.profile_name == profile, bindings.c.chat_id == chat)
            deleted = conn.execute(
                delete(bindings).where(*of_chat, bindings.c.thread_id == thread)
            ).rowcount
            if not deleted:
                return 0
            if conn.execute(select(exists().where(*of_chat))).scalar() is not True:
                conn.execute(
                    update(modes)
                    .where(modes.c.profile_name == profile, modes.c.chat_id == chat)
                    .values(enabled=0, updated_at=now)
                )
            return int(deleted)

        return self._write_topics(run, create=False) or 0

    @writes
    def bind_telegram_topic(
        self,
        *,
        chat_id: str,
        thread_id: str,
        user_id: str,
        session_key: str,
        session_id: str,
        managed_mode: str = "auto",
        profile_name: str = DEFAULT_PROFILE,
    ) -> None:
        """Bind one topic thread to one session (creating the tables if need be). Rebinding
        the same topic replaces its fields; binding a session already bound to another topic
        raises ``ValueError`` and changes nothing."""
        _, bindings = _topic_tables()

        now = self.clock()
        values = {
            "profile_name": topic_profile(profile_name),
            "chat_id": _text_of(chat_id, "chat_id"),
            "thread_id": _text_of(thread_id, "thread_id"),
            "user_id": _text_of(user_id, "user_id"),
            "session_key": _text_of(session_key, "session_key"),
            "session_id": _text_of(session_id, "session_id"),
            "managed_mode": _text_of(managed_mode, "managed_mode"),
            "linked_at": now,
            "updated_at": now,
        }
        topic = (values["profile_name"], values["chat_id"], values["thread_id"])
        statement = self.store.dialect.insert(bindings).values(values)
        statement = statement.on_conflict_do_update(
            index_elements=[bindings.c.profile_name, bindings.c.chat_id, bindings.c.thread_id],
            set_={
                name: statement.excluded[name]
                for name in ("user_id", "session_key", "session_id", "managed_mode",
                             "updated_at")
            },
        )  # fmt: skip

        def run(conn: Connection) -> None:
            # A binding points at a real session (the table's foreign key): said as our typed
            # error, not the driver's constraint failure.
            if conn.execute(select(sessions.c.id).where(
                    sessions.c.id == values["session_id"])).first() is None:  # fmt: skip
                raise UnknownSessionError(f"no session {values['session_id']!r} to bind")
            linked = conn.execute(
                select(bindings.c.profile_name, bindings.c.chat_id, bindings.c.thread_id)
                .where(bindings.c.session_id == values["session_id"])
            ).first()  # fmt: skip
            if linked is not None and tuple(str(part) for part in linked) != topic:
                raise ValueError(ALREADY_LINKED)
            conn.execute(statement)

        self._write_topics(run, create=True)

    # -- crossed-profile repair (iot 0.22.2's ``sessions repair-profiles``) -----------------
    @reads
    def find_profile_less_telegram_topic_rows(self) -> list[dict[str, Any]]:
        """Bindings labelled ``default`` whose ``session_key`` names another profile
        (``agent:<name>:...``): written by a multiplexer that did not yet stamp the routed
        profile (iot #76423). Each is ``chat_id``, ``thread_id``, ``session_key`` and the
        key's ``key_profile``, by chat then thread (bytewise). A store without the tables,
        or with v1/v2 ones (no ``profile_name``), has none."""
        _, bindings = _topic_tables()

        bytewise = self.store.dialect.bytewise_collation
        statement = (
            select(bindings.c.chat_id, bindings.c.thread_id, bindings.c.session_key)
            .where(bindings.c.profile_name == DEFAULT_PROFILE)
            .order_by(bindings.c.chat_id.collate(bytewise), bindings.c.thread_id.collate(bytewise))
        )

        def run(conn: Connection) -> list[dict[str, Any]]:
            if self._topic_shape(conn, bindings)[0] != "current":
                return []
            return [dict(row._mapping) for row in conn.execute(statement)]

        found = []
        for row in self.store.read(run):
            key_profile = session_key_profile(row["session_key"])
            if key_profile not in (None, DEFAULT_PROFILE):
                found.append({**row, "key_profile": key_profile})
        return found

    @writes
    def relabel_telegram_topic_rows(self, rows: Iterable[Mapping[str, Any]]) -> dict[str, int]:
        """Stamp the key's profile on the ``default``-labelled bindings ``rows`` name (each
        a mapping with ``chat_id``, ``thread_id``, ``session_key``, as
        :meth:`find_profile_less_telegram_topic_rows` gives them), and on the chat's mode row
        when only the default one exists; a binding the named profile already holds for that
        topic makes the default one the stale duplicate, which is removed. The profile is
        derived again from each ``session_key`` (a key naming no profile, or ``default``, is
        skipped). In one transaction; ``{"bindings_relabelled",
        "bindings_duplicates_removed", "mode_rows_relabelled"}``. v1/v2 tables are brought
        to v3 first, as every topic write does; without the tables nothing is done (iot's
        statements fail there). A row that is no mapping is a ``TypeError``, one without
        the three keys a ``KeyError``, as in iot, before anything is written."""
        modes, bindings = _topic_tables()

        if isinstance(rows, (str, bytes, Mapping)):
            raise TypeError(f"rows must be an iterable of mappings, not {type(rows).__name__}")
        wanted: list[tuple[str, str, str]] = []
        for row in list(rows):
            if not isinstance(row, Mapping):
                raise TypeError(f"each row must be a mapping, not {type(row).__name__}")
            session_key, chat_id, thread_id = row["session_key"], row["chat_id"], row["thread_id"]
            target = session_key_profile(session_key)
            if target in (None, DEFAULT_PROFILE):
                continue
            if not validation.bindable(target):
                continue  # no stored row can carry it
            wanted.append((target, _text_of(chat_id, "chat_id"), _text_of(thread_id, "thread_id")))
        counts = {"bindings_relabelled": 0, "bindings_duplicates_removed": 0,
                  "mode_rows_relabelled": 0}  # fmt: skip
        if not wanted:
            return counts

        def run(conn: Connection) -> dict[str, int]:
            for target, chat, thread in wanted:
                topic = (bindings.c.chat_id == chat, bindings.c.thread_id == thread)
                stale = (bindings.c.profile_name == DEFAULT_PROFILE, *topic)
                held = conn.execute(
                    select(bindings.c.chat_id).where(bindings.c.profile_name == target, *topic)
                ).first()
                if held is not None:
                    counts["bindings_duplicates_removed"] += conn.execute(
                        delete(bindings).where(*stale)
                    ).rowcount
                else:
                    counts["bindings_relabelled"] += conn.execute(
                        update(bindings).where(*stale).values(profile_name=target)
                    ).rowcount
                moded = conn.execute(
                    select(modes.c.chat_id).where(
                        modes.c.profile_name == target, modes.c.chat_id == chat
                    )
                ).first()
                if moded is None:
                    counts["mode_rows_relabelled"] += conn.execute(
                        update(modes)
                        .where(modes.c.profile_name == DEFAULT_PROFILE, modes.c.chat_id == chat)
                        .values(profile_name=target)
                    ).rowcount
            return counts

        return self._write_topics(run, create=False) or counts

    @reads
    def list_unlinked_telegram_sessions_for_user(
        self,
        *,
        chat_id: str,
        user_id: str,
        profile_name: str = DEFAULT_PROFILE,
        limit: int = 10,
    ) -> list[dict[str, Any]]:
        """The user's Telegram sessions of this profile that no topic is bound to, most
        recently active first, as listing dicts. ``chat_id`` is Hermes's argument, unused
        there too (a private chat's id is its user's)."""
        _, bindings = _topic_tables()

        _text_of(chat_id, "chat_id")
        user = _text_of(user_id, "user_id")
        profile = topic_profile(profile_name)
        count = row_count(limit, "limit")
        read = self.store.read_shape
        session_profile = func.coalesce(
            func.nullif(func.trim(read.column(sessions, "profile_name")), ""),
            DEFAULT_PROFILE,
        )
        last_active = listing_last_active(read)

        def run(conn: Connection) -> list[dict[str, Any]]:
            shape, _ = self._topic_shape(conn, bindings)
            statement = listing_select(read).where(
                sessions.c.source == TELEGRAM_SOURCE,
                sessions.c.user_id == user,
                session_profile == profile,
            )
            if shape != "absent":
                statement = statement.where(
                    ~exists().where(bindings.c.session_id == sessions.c.id)
                )
            statement = statement.order_by(
                last_active.desc(), sessions.c.started_at.desc()
            ).limit(count)
            return [listing_dict(row) for row in conn.execute(statement)]

        return self.store.read(run)


# -- the tables, for the part above and for the transfer (``ops.transfer``) ----------------------
def topic_shape(
    dialect: StoreDialect, conn: Connection, table: Table
) -> tuple[TopicShape, list[str]]:
    """How ``table`` stands in the store: its shape and the v3 columns it has, in order."""
    present = dialect.column_names(conn, table.name)
    if not present:
        return "absent", []
    columns = [column.name for column in table.c if column.name in present]
    return ("current" if "profile_name" in present else "legacy"), columns


def ensure_topic_tables(dialect: StoreDialect, conn: Connection, *, create: bool) -> bool:
    """Bring the tables to v3 (creating them only when ``create``) and record the version in
    ``state_meta`` when anything was made or ``create``; whether they exist. The one opt-in:
    the part's topic writes and a transfer that carries topic rows."""
    from ..sql.topic_tables import TOPIC_INDEXES, TOPIC_TABLES

    changed = False
    for table in TOPIC_TABLES:
        shape, columns = topic_shape(dialect, conn, table)
        if shape == "absent":
            if not create:
                return False
            table.create(conn)  # its indexes with it
            changed = True
        elif shape == "legacy":
            _rebuild_at_v3(conn, table, columns)
            changed = True
    for index in TOPIC_INDEXES:
        index.create(conn, checkfirst=True)
    if changed or create:
        conn.execute(meta_upsert(dialect, TOPIC_SCHEMA_META_KEY, str(TOPIC_SCHEMA_VERSION)))
    return True


def topic_rows(
    conn: Connection,
    table: Table,
    shape: TopicShape,
    columns: list[str],
    profile: str | None,
    where: Callable[[], list[ColumnElement[bool]]],
    order: Sequence[ColumnElement[Any]] = (),
) -> list[dict[str, Any]]:
    """The rows of ``table`` (as :func:`topic_shape` found it: ``shape``, ``columns``) of
    ``profile`` (None: every profile's) matching ``where``, each a dict of every column it
    has, in ``order`` (which names only columns it has); a v1/v2 table's rows are the
    ``default`` profile's (it has no other)."""
    if shape == "absent":
        return []
    if shape == "legacy" and profile not in (None, DEFAULT_PROFILE):
        return []
    conditions = where()
    if shape == "current" and profile is not None:
        conditions.append(table.c.profile_name == profile)
    statement = select(*(table.c[name] for name in columns)).where(*conditions)
    if order:
        statement = statement.order_by(*order)
    rows = [dict(row._mapping) for row in conn.execute(statement)]
    if shape == "legacy":
        rows = [{"profile_name": DEFAULT_PROFILE, **row} for row in rows]
    return rows


def _rebuild_at_v3(conn: Connection, table: Table, columns: list[str]) -> None:
    """Rebuild a v1/v2 topic table at v3 (SQLite cannot alter a key or a foreign key): its
    rows keep their values as the ``default`` profile's; a binding whose session is gone is
    dropped (v1 had no cascade; the v3 key would refuse it), as Hermes drops it."""
    from ..sql.topic_tables import TOPIC_INDEXES

    legacy = f"{table.name}_legacy"
    conn.execute(text(f"DROP TABLE IF EXISTS {legacy}"))  # left by a crash: the table is whole
    conn.execute(text(f"ALTER TABLE {table.name} RENAME TO {legacy}"))
    for index in TOPIC_INDEXES:  # the renamed table took them along; v3 makes its own
        if index.table is table:
            conn.execute(text(f"DROP INDEX IF EXISTS {index.name}"))
    table.create(conn)
    kept = [name for name in columns if name != "profile_name"]
    chosen = select(
        text(f"'{DEFAULT_PROFILE}'"), *(text(name) for name in kept)
    ).select_from(text(legacy))
    if "session_id" in kept:
        chosen = chosen.where(
            exists().where(sessions.c.id == literal_column(f"{legacy}.session_id"))
        )
    conn.execute(insert(table).from_select(["profile_name", *kept], chosen))
    conn.execute(text(f"DROP TABLE {legacy}"))
