"""Importing exported sessions: Hermes 0.19's ``import_sessions``, the restore of history a
dashboard reads back from an ``export_session``/``export_all`` file.

All or nothing, in two steps:

1. **Checked first, nothing written.** The payload is a list of at most
   :data:`MAX_SESSIONS` session dicts; each needs an id (unique in the payload), its
   ``messages`` a list of at most :data:`MAX_MESSAGES_PER_SESSION` dicts each with a role,
   text fields text, ``model_config`` a JSON object (or its text), ``token_count`` an integer;
   a session's JSON at most :data:`MAX_SESSION_BYTES`, the payload's
   :data:`MAX_TOTAL_BYTES` and :data:`MAX_TOTAL_MESSAGES` messages. Any problem: nothing is
   imported and the answer lists every problem (``{"ok": False, "errors": [{"index",
   "session_id", "error"}]}``).
2. **Written in one transaction.** A session whose id exists already is skipped, never changed.
   An imported one keeps its history: its title, model, prompt, cwd and git, billing and costs,
   token totals, start and end, its flags (archived, auto_archived, pinned, hidden); each
   message its uids (``message_uid``, its tool calls' and results', a merged turn's absorbed
   ones: iot 0.22.2); its messages become live rows (a rewound or archived message of the export
   is live again) with their timestamps (a missing one follows the previous message), and its
   counters are counted from them. What belonged to a live process is not restored: gateway
   routing, handoff, leases, rewind state. A child keeps its parent only when that parent exists
   or came in the same payload and the link makes no cycle; otherwise it is detached (a root),
   and counted in ``detached``.

Returns ``{"ok": True, "imported", "skipped", "detached", "imported_ids", "skipped_ids",
"errors": []}``. The limits are Hermes's: an import is one write transaction, and a bounded
one does not starve the live writers.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql.elements import BindParameter

from ..dialects.interface import StoreDialect
from ..sql import validation
from ..sql.codec import cell_text, decode_json_object, encode_json
from ..sql.statements import HotWrites
from ..sql.tables import sessions_table as sessions
from .access import reads, writes
from .messages import MessagesPart, NewMessage, message_rows
from .prompts import store_prompt
from .shared import constraint_error

MAX_SESSIONS = 500
MAX_MESSAGES_PER_SESSION = 10_000
MAX_TOTAL_MESSAGES = 50_000
MAX_SESSION_BYTES = 5 * 1024 * 1024
MAX_TOTAL_BYTES = 25 * 1024 * 1024
IMPORT_SOURCE = "import"
"""The source of an imported session that names none."""

_TEXT_FIELDS = (
    "source", "user_id", "model", "system_prompt", "end_reason", "cwd", "git_branch",
    "git_repo_root", "billing_provider", "billing_base_url", "billing_mode", "cost_status",
    "cost_source", "pricing_version", "title",
)  # fmt: skip
_COUNTERS = (
    "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
    "reasoning_tokens", "api_call_count",
)  # fmt: skip
_MESSAGE_TEXT_FIELDS = (
    "tool_call_id", "tool_name", "effect_disposition", "finish_reason", "reasoning",
    "reasoning_content", "platform_message_id", "message_id",
)  # fmt: skip
_ASSISTANT_TEXT = ("reasoning", "reasoning_content")
_ASSISTANT_JSON = ("reasoning_details", "codex_reasoning_items", "codex_message_items")
"""Kept on assistant messages only, as Hermes imports them."""
_ID: BindParameter[str] = bindparam("id")
FOREIGN_ID_HEX = 12
"""The random hex of a foreign import's id (iot's ``new_session_id(hex_len=12)``)."""


def foreign_session_id(now: datetime | None = None) -> str:
    """A new id for a foreign import, iot's shape: ``YYYYMMDD_HHMMSS_<12 hex>`` (local time)."""
    stamp = (now or datetime.now()).strftime("%Y%m%d_%H%M%S")
    return f"{stamp}_{uuid.uuid4().hex[:FOREIGN_ID_HEX]}"


def _imported_from(origin_json: Any) -> dict[str, Any]:
    """The ``imported_from`` object of a session's origin; anything else is none."""
    imported = decode_json_object(origin_json).get("imported_from")
    return imported if isinstance(imported, dict) else {}


def _find_foreign_import(conn: Connection, origin: Mapping[str, Any]) -> str | None:
    """The session an earlier import of ``origin`` made (iot's rule: same tool, then the same
    foreign session id, or without one the same path), oldest first; None without one."""
    tool = origin["tool"]
    if not validation.bindable(tool):
        return None
    rows = conn.execute(
        select(sessions.c.id, sessions.c.origin_json)
        .where(sessions.c.source == tool, sessions.c.origin_json.is_not(None))
        .order_by(sessions.c.started_at, sessions.c.id)
    ).all()
    for session_id, origin_json in rows:
        imported = _imported_from(origin_json)
        if imported.get("tool") != tool:
            continue
        foreign_id = origin.get("foreign_session_id")
        if (foreign_id and foreign_id == imported.get("foreign_session_id")) or (
            not foreign_id and imported.get("path") == origin["path"]
        ):
            return cell_text(session_id)
    return None


class _Prepared(NamedTuple):
    row: dict[str, Any]
    parent_id: str
    batch: list[NewMessage]
    states: list[tuple[int, int]]
    """Each message's ``(active, compacted)``, as the payload says (live when it says nothing)."""


class ImportProblem(ValueError):
    """One session of the payload cannot be imported (its message names the field)."""


class ImportsPart(MessagesPart):
    """Hermes 0.19's ``import_sessions`` (see the module)."""

    @writes
    def import_sessions(self, payload: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        if not isinstance(payload, list):
            raise ValueError("sessions must be a list")
        if len(payload) > MAX_SESSIONS:
            raise ValueError(f"sessions must contain at most {MAX_SESSIONS} entries")
        prepared: list[_Prepared] = []
        errors: list[dict[str, Any]] = []
        seen: set[str] = set()
        total_bytes = total_messages = 0
        for index, raw in enumerate(payload):
            if not isinstance(raw, dict):
                errors.append(_problem(index, "", "session must be an object"))
                continue
            session_id = str(raw.get("id") or "").strip()
            problem, size = _shape_problem(raw, session_id, seen)
            if problem is None:
                total_bytes += size
                if total_bytes > MAX_TOTAL_BYTES:
                    problem = "import exceeds the total size limit"
            if problem is None:
                try:
                    one = self._prepare_session(raw, session_id)
                except (ImportProblem, TypeError, ValueError) as exc:
                    problem = str(exc)
            if problem is None:
                total_messages += len(one.batch)
                if total_messages > MAX_TOTAL_MESSAGES:
                    problem = "messages exceeds the total import limit"
            if problem is not None:
                errors.append(_problem(index, session_id, problem))
                continue
            seen.add(session_id)
            prepared.append(one)
        if errors:
            return {"ok": False, "imported": 0, "skipped": 0, "detached": 0, "errors": errors}
        try:
            dialect = self.store.dialect
            return self.store.write(
                lambda conn: _import(conn, prepared, dialect, self._hot_writes)
            )
        except IntegrityError as exc:
            raise constraint_error(
                self.store.dialect, exc, "a session of the import does not exist",
                "importing sessions",
            ) from exc

    def _prepare_session(self, raw: Mapping[str, Any], session_id: str) -> _Prepared:
        """The session's row and messages as they will be written (checked, encoded)."""
        row: dict[str, Any] = {"id": validation.identifier(session_id, "id")}
        for name in _TEXT_FIELDS:
            row[name] = self._text(_text_or_none(raw.get(name), name), name)
        row["source"] = validation.identifier(row["source"] or IMPORT_SOURCE, "source")
        row["model_config"] = self._text(_json_object_or_none(raw.get("model_config")),
                                         "model_config")  # fmt: skip
        parent_id = (_text_or_none(raw.get("parent_session_id"), "parent_session_id") or "")
        parent_id = validation.identifier(parent_id.strip(), "parent_session_id")
        row["parent_session_id"] = None
        started = _float_or_none(raw.get("started_at"))
        row["started_at"] = time.time() if started is None else started
        row["ended_at"] = _float_or_none(raw.get("ended_at"))
        for name in _COUNTERS:
            row[name] = validation.counter(_int_or_zero(raw.get(name)), name)
        for name in ("estimated_cost_usd", "actual_cost_usd"):
            row[name] = _float_or_none(raw.get(name))
        # The user's flags, as iot 0.22.2 restores them: pinned is what the startup prune and
        # the idle sweep spare (dropped, an old pinned session came back to be deleted),
        # hidden keeps a Bot Mode chat out of listings, auto_archived (only on an archived
        # row) lets a resume undo the sweep's archive.
        for name in ("archived", "auto_archived", "pinned", "hidden"):
            row[name] = 1 if raw.get(name) else 0
        row["auto_archived"] &= row["archived"]
        batch = raw.get("messages") or []
        return _Prepared(row, parent_id, self._prepare_import_messages(batch),
                         _message_states(batch))

    def _prepare_import_messages(self, batch: Sequence[Mapping[str, Any]]) -> list[NewMessage]:
        """Hermes's ``_insert_message_rows`` rules: reasoning only on assistant messages,
        JSON text of reasoning read back as JSON, a missing or unreadable timestamp set just
        after the previous message (now, for the first)."""
        clock = time.time()
        prepared: list[NewMessage] = []
        for position, message in enumerate(batch):
            role = message.get("role")
            if not isinstance(role, str) or not role:
                raise ImportProblem(f"messages[{position}].role must be a non-empty string")
            for name in _MESSAGE_TEXT_FIELDS:
                _text_or_none(message.get(name), name)
            token_count = message.get("token_count")
            if token_count is not None:
                try:
                    token_count = int(token_count)
                except (TypeError, ValueError):
                    raise ImportProblem("token_count must be an integer") from None
            assistant = role == "assistant"
            fields = {
                **{name: message.get(name) if assistant else None for name in _ASSISTANT_TEXT},
                **{name: _json_value(message.get(name)) if assistant else None
                   for name in _ASSISTANT_JSON},
            }  # fmt: skip
            for name in _ASSISTANT_JSON:
                _refuse_non_finite(fields[name], f"session.messages[{position}].{name}")
            stamp = _timestamp(message.get("timestamp"))
            at = clock if stamp is None else stamp
            clock = max(clock + 1e-6, at + 1e-6)
            platform_id = message.get("platform_message_id") or message.get("message_id")
            prepared.append(
                self.prepare_message(
                    role,
                    message.get("content"),
                    tool_name=message.get("tool_name"),
                    tool_calls=message.get("tool_calls") or None,
                    tool_call_id=message.get("tool_call_id"),
                    token_count=token_count,
                    finish_reason=message.get("finish_reason"),
                    reasoning=fields["reasoning"],
                    reasoning_content=fields["reasoning_content"],
                    reasoning_details=fields["reasoning_details"] or None,
                    codex_reasoning_items=fields["codex_reasoning_items"] or None,
                    codex_message_items=fields["codex_message_items"] or None,
                    platform_message_id=platform_id or None,
                    observed=bool(message.get("observed")),
                    timestamp=at,
                    effect_disposition=message.get("effect_disposition"),
                    api_content=message.get("api_content"),
                    # The message's durable identity, as iot 0.22.2's import keeps it (an
                    # export's columns, or a live dict's keys): minted afresh, a consumer
                    # keyed on it lost every message of a moved session.
                    message_uid=message.get("message_uid"),
                    tool_call_uids=message.get("tool_call_uids", message.get("_tool_call_uids")),
                    tool_call_uid=message.get("tool_call_uid", message.get("_tool_call_uid")),
                    absorbed_message_uids=message.get(
                        "absorbed_message_uids", message.get("_absorbed_message_uids")
                    ),
                )
            )
        return prepared

    @reads
    def find_foreign_import(self, origin: Mapping[str, Any]) -> str | None:
        """iot 0.22.2: the session an earlier :meth:`import_foreign_history` of ``origin`` (a
        dict of ``tool``, ``path`` and ``foreign_session_id``) made, or None."""
        return self.store.read(lambda conn: _find_foreign_import(conn, origin))

    @writes
    def import_foreign_history(
        self,
        origin: Mapping[str, Any],
        messages: Sequence[Mapping[str, Any]],
        *,
        title: str | None,
        cwd: str | None,
        profile: str | None,
    ) -> dict[str, Any]:
        """iot 0.22.2: adopt another tool's conversation (``origin``: its ``tool``, ``path``
        and ``foreign_session_id``) as a new session of source ``tool``, its ``messages``
        checked and written as :meth:`import_sessions` writes them, its provenance in
        ``origin_json`` (``{"imported_from": origin}``) and its owner in ``profile_name``, in
        one transaction. ``{"session_id", "already_imported"}``: an origin imported before
        is that session, nothing written. A title another session holds gets the new id's
        tail. A payload that cannot be imported is a ``ValueError`` naming the problem."""
        if not isinstance(origin, Mapping):
            raise TypeError(f"origin must be a dict, not {type(origin).__name__}")
        # A tool no database holds as it is could never be found again (imported twice).
        tool = validation.identifier(origin["tool"], "origin['tool']")
        session_id = foreign_session_id()
        raw = {"id": session_id, "source": tool, "title": title, "cwd": cwd,
               "messages": messages}  # fmt: skip
        problem, _ = _shape_problem(raw, session_id, set())
        if problem is not None:
            raise ValueError(problem)
        try:
            one = self._prepare_session(raw, session_id)
        except ImportProblem as exc:
            raise ValueError(str(exc)) from None
        owner = self._text(validation.optional_identifier(profile, "profile"), "profile")
        provenance = self._text(json.dumps({"imported_from": dict(origin)}), "origin")
        dialect = self.store.dialect

        def run(conn: Connection) -> dict[str, Any]:
            existing = _find_foreign_import(conn, origin)
            if existing:
                return {"session_id": existing, "already_imported": True}
            named = one.row["title"]
            if named is not None and conn.execute(
                select(sessions.c.id).where(sessions.c.title == named).limit(1)
            ).first():
                one.row["title"] = f"{named} ({session_id[-FOREIGN_ID_HEX:]})"
            _import(conn, [one], dialect, self._hot_writes)
            conn.execute(
                update(sessions)
                .where(sessions.c.id == session_id)
                .values(origin_json=provenance, profile_name=owner)
            )
            return {"session_id": session_id, "already_imported": False}

        return self.store.write(run)


def _import(
    conn: Connection, prepared: Sequence[_Prepared], dialect: StoreDialect, hot: HotWrites
) -> dict[str, Any]:
    imported: list[str] = []
    skipped: list[str] = []
    parents: dict[str, str] = {}
    exists = select(sessions.c.id).where(sessions.c.id == _ID)
    for one in prepared:
        session_id = one.row["id"]
        if conn.execute(exists, {"id": session_id}).first() is not None:
            skipped.append(session_id)
            continue
        # The prompt as a hash and inline (.prompts), its hash computed here: as Hermes's
        # import, whatever hash the payload names is not trusted.
        key = store_prompt(dialect, conn, one.row["system_prompt"])
        conn.execute(insert(sessions).values({**one.row, "system_prompt_hash": key}))
        rows = message_rows(session_id, one.batch, time.time())
        for row, (active, compacted) in zip(rows, one.states, strict=True):
            row["active"], row["compacted"] = active, compacted
        if rows:
            hot.insert_messages(conn, rows)
        states = zip(one.batch, one.states, strict=True)
        live = [message for message, (active, _) in states if active]
        conn.execute(
            update(sessions)
            .where(sessions.c.id == session_id)
            .values(message_count=len(live),
                    tool_call_count=sum(message.tool_call_total for message in live))
        )  # fmt: skip
        if one.parent_id:
            parents[session_id] = one.parent_id
        imported.append(session_id)

    parent_of = select(sessions.c.parent_session_id).where(sessions.c.id == _ID)

    def closes_a_cycle(child: str, parent: str) -> bool:
        seen = {child}
        current: str | None = parent
        while current:
            if current in seen:
                return True
            seen.add(current)
            if current in parents:
                current = parents[current]
                continue
            row = conn.execute(parent_of, {"id": current}).first()
            if row is None:
                return False
            current = row[0]
        return False

    detached = 0
    for child, parent in list(parents.items()):
        found = conn.execute(exists, {"id": parent}).first() is not None
        if found and not closes_a_cycle(child, parent):
            conn.execute(
                update(sessions).where(sessions.c.id == child).values(parent_session_id=parent)
            )
        else:
            # Only the closing edge goes: later children may still hang from this root.
            parents.pop(child, None)
            detached += 1
    return {
        "ok": True,
        "imported": len(imported),
        "skipped": len(skipped),
        "detached": detached,
        "imported_ids": imported,
        "skipped_ids": skipped,
        "errors": [],
    }


def _message_states(batch: Sequence[Mapping[str, Any]]) -> list[tuple[int, int]]:
    """Each message's ``(active, compacted)`` as the payload gives it.

    Hermes's import writes every row live: its export holds the live rows only. Ours holds
    every row unless asked otherwise (a backup loses nothing), so a rewound row (``active`` 0)
    or a compaction-archived one (``compacted`` 1) is written back as it was: imported live,
    an undone turn would come back into the model's context. A message that says nothing
    (iot's export, an older one) is live, as in Hermes. The session's counters count the live
    rows, as after a rewind (``sessions.rewind``)."""
    return [
        (_state_flag(message.get("active"), 1, f"messages[{position}].active"),
         _state_flag(message.get("compacted"), 0, f"messages[{position}].compacted"))
        for position, message in enumerate(batch)
    ]  # fmt: skip


def _state_flag(value: Any, default: int, field: str) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
        return int(value)
    raise ImportProblem(f"{field} must be 0 or 1")


def _problem(index: int, session_id: str, error: str) -> dict[str, Any]:
    item: dict[str, Any] = {"index": index, "error": error}
    if session_id:
        item["session_id"] = session_id
    return item


def _shape_problem(
    raw: Mapping[str, Any], session_id: str, seen: set[str]
) -> tuple[str | None, int]:
    """What is wrong with a session's shape (Hermes's checks, in its order), and its size."""
    if not session_id:
        return "session id is required", 0
    if session_id in seen:
        return "duplicate session id", 0
    batch = raw.get("messages") or []
    if not isinstance(batch, list):
        return "messages must be a list", 0
    if len(batch) > MAX_MESSAGES_PER_SESSION:
        return "messages exceeds the per-session import limit", 0
    if any(not isinstance(message, dict) for message in batch):
        return "messages must contain only objects", 0
    try:
        # A lone surrogate counts its three bytes: it is stored as U+FFFD (the text rule of
        # sql/validation.py), where Hermes would refuse the session as not serializable.
        size = len(
            json.dumps(raw, ensure_ascii=False, separators=(",", ":")).encode(
                "utf-8", "surrogatepass"
            )
        )
    except (TypeError, ValueError):
        return "session must be JSON serializable", 0
    if size > MAX_SESSION_BYTES:
        return "session exceeds the import size limit", 0
    return None, size


def _text_or_none(value: Any, field: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise ImportProblem(f"{field} must be a string")


def _json_object_or_none(value: Any) -> str | None:
    """``model_config`` as stored: JSON text of an object (given as text or as a dict)."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            raise ImportProblem("model_config must be valid JSON") from None
        if not isinstance(parsed, dict):
            raise ImportProblem("model_config must be a JSON object")
        _refuse_non_finite(parsed, "session.model_config")
        return value
    if not isinstance(value, dict):
        raise ImportProblem("model_config must be a JSON object")
    _refuse_non_finite(value, "session.model_config")
    try:
        return encode_json(value, "model_config")
    except (TypeError, ValueError):
        raise ImportProblem("model_config must be JSON serializable") from None


def _refuse_non_finite(value: Any, where: str) -> None:
    """A JSON value (decoded) holding NaN or an infinity anywhere (``1e309`` decodes to one):
    stored, it is text no strict JSON reader takes, and Hermes's API answers fail on it; iot
    0.22.2 refuses the session with these words."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise ImportProblem(f"non-finite number at {where}")
        if isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, (list, tuple)):
            pending.extend(item)


def _float_or_none(value: Any) -> float | None:
    """A number Hermes would read (anything ``float()`` takes), else None; a value that is
    not finite is None too (stored, it would poison every total and order)."""
    if value is None or isinstance(value, bool):
        return None if value is None else float(value)
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def _int_or_zero(value: Any) -> int:
    if value is None:
        return 0
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return 0


def _timestamp(value: Any) -> float | None:
    if value is None:
        return None
    if hasattr(value, "timestamp"):
        try:
            value = value.timestamp()
        except (TypeError, ValueError, OverflowError):
            return None
    return _float_or_none(value)


def _json_value(value: Any) -> Any:
    """Reasoning exported as JSON text is read back as JSON (stored once, not twice)."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value
