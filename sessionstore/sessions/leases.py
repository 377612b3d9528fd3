"""Compression leases, compression-failure cooldowns, the compression fallback streak and
``state_meta``: Hermes v8/v14/v21 state.

The methods carry Hermes's names (``try_acquire_compression_lock``, ``get_meta``, ...).

A compression lease is a row of ``compression_locks`` per session: ``holder`` owns it until
``expires_at``. Semantics are Hermes's (its ``*_compression_lock`` methods):

- acquire: in one write transaction, drop the session's row if it has expired, insert ours if
  there is none, then report whether the stored holder is ours. Acquiring a lease one already
  holds succeeds and does not extend it (``refresh`` does);
- refresh extends a lease whose row is still ours, expired or not (iot 0.22.2's rule; Hermes
  0.19 refused an expired one): a live owner whose refresher stalled past the TTL revives its
  row while no one has reclaimed it, instead of compressing on without a lease. It cannot
  resurrect a lease another holder took: the reclaim replaces the row in one transaction, and
  the refresh matches ours only;
- release deletes only our own row (idempotent); the holder of a session is the holder of a
  row that has not expired. A lease is expired once ``expires_at < now``;
- the empty session id holds no lease (as Hermes): acquire and refresh answer False, release
  does nothing and the holder is None;
- expired rows of other sessions are never swept, and deleting a session leaves its lease.

Bad arguments (a non-``str`` id or holder, a TTL that is not a positive finite number) are a
``TypeError``/``ValueError``; Hermes's "any database error returns False" is not copied: a
locked store is retried by ``Store.write`` and anything else is a real failure to report.
The fallback streak (Hermes 0.19, ``sessions.compression_fallback_streak``) counts a session's
consecutive compressions that fell back to the deterministic summary: read as a count (0 for an
unknown session or a damaged value), written as a count (a negative one as 0).

The exact cooldown row (iot 0.22.2's ``get_compression_failure_cooldown_row`` and
``restore_compression_failure_cooldown_row``): a compression that is cancelled takes a snapshot
of the two cooldown columns (expired, half NULL or absent, as stored) and puts it back exactly.
The snapshot is ``{session_exists, cooldown_until, error}``; a falsy session id reads as an
absent session, as in iot. The restore raises where iot does (a compensation that failed must
not be reported as done): a snapshot of an absent session while the session now exists, or a
row that does not read back as the snapshot, is
:class:`~sessionstore.errors.CompressionCooldownRestoreError` (a ``RuntimeError``, as iot's);
a session that vanished before or after the write is logged and tolerated (its cooldown died
with it). Where ours differs: a snapshot value iot would write and then fail to verify (a
deadline that is no finite number, an error that is no text, or text the store would not keep
byte for byte) is a ``TypeError``/``ValueError`` before anything is written; a session id that
is neither a ``str`` nor falsy is a ``TypeError`` (SQLite would compare ``5`` with ``'5'``).

The clock is the repository's (``SessionRepository(store, clock=...)``), so that expiry can be
tested without sleeping.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Mapping
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.sql.expression import Executable

from ..dialects import StoreDialect
from ..errors import CompressionCooldownRestoreError
from ..sql import validation
from ..sql.tables import compression_locks_table as locks
from ..sql.tables import sessions_table as sessions
from ..sql.tables import state_meta_table as state_meta
from ..sql.validation import bindable
from .access import reads, writes
from .shared import RepositoryPart

logger = logging.getLogger(__name__)

DEFAULT_TTL_S = 300.0
MAX_ERROR_CHARS = 500


def lease_ttl(value: Any, *, floor: float = 0.0) -> float:
    """A lease's ``ttl_seconds``: positive and finite, else ``ValueError``; at least ``floor``
    (the turn lease's 0.1 s, as iot clamps it)."""
    ttl = validation.optional_number(value, "ttl_seconds")
    if ttl is None or not math.isfinite(ttl) or ttl <= 0:
        raise ValueError("ttl_seconds must be a positive, finite number of seconds")
    return max(floor, ttl)


def meta_value(conn: Connection, key: str) -> str | None:
    """``state_meta``'s value for ``key`` (None when unset): the one read of the table."""
    value = conn.execute(select(state_meta.c.value).where(state_meta.c.key == key)).scalar()
    return None if value is None else str(value)


META_UPSERT_QMARK = (
    "INSERT INTO state_meta (key, value) VALUES (?, ?) "
    "ON CONFLICT(key) DO UPDATE SET value = excluded.value"
)
"""``state_meta``'s upsert as a SQLite DB-API cursor runs it (``set_meta(cursor=...)``: inside a
transaction the caller holds on its own connection, as iot 0.22.2 writes it)."""


def meta_upsert(dialect: StoreDialect, key: str, value: str | None) -> Executable:
    """The statement that sets ``state_meta``'s ``key`` to ``value``: the one write of it."""
    return (
        dialect.insert(state_meta)
        .values(key=key, value=value)
        .on_conflict_do_update(index_elements=[state_meta.c.key], set_={"value": value})
    )


def cooldown_row(exists: bool, cooldown_until: Any, error: Any) -> dict[str, Any]:
    """iot 0.22.2's ``_cooldown_row``: the snapshot shape of a session's cooldown columns."""
    if cooldown_until is not None:
        with contextlib.suppress(TypeError, ValueError):  # else as stored: an adopted file's
            cooldown_until = float(cooldown_until)
    return {"session_exists": exists, "cooldown_until": cooldown_until, "error": error}


class LeasesPart(RepositoryPart):
    """Compression leases and cooldowns, and ``state_meta``."""

    # -- the lease --------------------------------------------------------------------------
    @writes
    def try_acquire_compression_lock(
        self, session_id: str, holder: str, ttl_seconds: float = DEFAULT_TTL_S
    ) -> bool:
        session_id = validation.identifier(session_id, "session_id")
        holder = validation.identifier(holder, "holder")
        ttl = lease_ttl(ttl_seconds)
        if not session_id:
            return False
        insert = self.store.dialect.insert(locks)

        def run(conn: Connection) -> bool:
            now = self.clock()
            conn.execute(
                delete(locks).where(locks.c.session_id == session_id, locks.c.expires_at < now)
            )
            conn.execute(
                insert.values(
                    session_id=session_id, holder=holder, acquired_at=now, expires_at=now + ttl
                ).on_conflict_do_nothing()
            )
            stored = conn.execute(
                select(locks.c.holder).where(locks.c.session_id == session_id)
            ).scalar()
            return stored == holder

        return self.store.write(run)

    @writes
    def refresh_compression_lock(
        self, session_id: str, holder: str, ttl_seconds: float = DEFAULT_TTL_S
    ) -> bool:
        session_id = validation.identifier(session_id, "session_id")
        holder = validation.identifier(holder, "holder")
        ttl = lease_ttl(ttl_seconds)
        if not session_id or not holder:
            return False

        def run(conn: Connection) -> bool:
            result = conn.execute(
                update(locks)
                .where(locks.c.session_id == session_id, locks.c.holder == holder)
                .values(expires_at=self.clock() + ttl)
            )
            return bool(result.rowcount)

        return self.store.write(run)

    @writes
    def release_compression_lock(self, session_id: str, holder: str) -> bool:
        """Give up our lease; True when there was one to give up."""
        session_id = validation.identifier(session_id, "session_id")
        holder = validation.identifier(holder, "holder")
        if not session_id:
            return False
        statement = delete(locks).where(locks.c.session_id == session_id, locks.c.holder == holder)
        return self.store.write(lambda conn: bool(conn.execute(statement).rowcount))

    @reads
    def get_compression_lock_holder(self, session_id: str) -> str | None:
        if not bindable(session_id):
            return None

        def run(conn: Connection) -> str | None:
            value = conn.execute(
                select(locks.c.holder).where(
                    locks.c.session_id == session_id, locks.c.expires_at >= self.clock()
                )
            ).scalar()
            return None if value is None else str(value)

        return self.store.read(run)

    # -- compression-failure cooldown ---------------------------------------------------------
    @writes
    def record_compression_failure_cooldown(
        self, session_id: str, cooldown_until: float, error: str | None = None
    ) -> bool:
        session_id = validation.identifier(session_id, "session_id")
        moment = validation.optional_number(cooldown_until, "until")
        if moment is None or not math.isfinite(moment):
            raise ValueError("until must be a finite Unix time")
        text = None if error is None else self._text(str(error)[:MAX_ERROR_CHARS], "error")
        statement = (
            update(sessions)
            .where(sessions.c.id == session_id)
            .values(compression_failure_cooldown_until=moment, compression_failure_error=text)
        )
        return self.store.write(lambda conn: bool(conn.execute(statement).rowcount))

    @reads
    def get_compression_failure_cooldown(self, session_id: str) -> dict[str, Any] | None:
        """``{cooldown_until, remaining_seconds, error}`` while the cooldown is in the future."""
        if not bindable(session_id):
            return None
        statement = select(
            sessions.c.compression_failure_cooldown_until, sessions.c.compression_failure_error
        ).where(sessions.c.id == session_id)
        row = self.store.read(lambda conn: conn.execute(statement).first())
        if row is None or row[0] is None:
            return None
        remaining = float(row[0]) - self.clock()
        if remaining <= 0:
            return None
        return {"cooldown_until": float(row[0]), "remaining_seconds": remaining, "error": row[1]}

    def _cooldown_id(self, session_id: Any) -> str | None:
        """The session id of a cooldown-row call: None for a falsy one (iot's ``if
        session_id``), else a ``str`` (``TypeError`` for another type)."""
        if not session_id:
            return None
        if not isinstance(session_id, str):
            raise TypeError(f"session_id must be a str, not {type(session_id).__name__}")
        return session_id

    @reads
    def get_compression_failure_cooldown_row(self, session_id: str) -> dict[str, Any]:
        """iot 0.22.2's exact cooldown row: ``{session_exists, cooldown_until, error}`` as
        stored, expired or not (``session_exists`` False, the others None, for an unknown or
        falsy id). ``cooldown_until`` is a float; a stored value that is no number (an
        adopted file's text) is given as stored."""
        checked = self._cooldown_id(session_id)
        if checked is None or not bindable(checked):
            return cooldown_row(False, None, None)
        statement = select(
            sessions.c.compression_failure_cooldown_until, sessions.c.compression_failure_error
        ).where(sessions.c.id == checked)
        row = self.store.read(lambda conn: conn.execute(statement).first())
        return cooldown_row(False, None, None) if row is None else cooldown_row(True, *row)

    @writes
    def restore_compression_failure_cooldown_row(
        self, session_id: str, snapshot: Mapping[str, Any]
    ) -> None:
        """Put back a :meth:`get_compression_failure_cooldown_row` snapshot exactly, and
        verify it (see the module for what raises and what is tolerated)."""
        snapshot = validation.mapping(snapshot, "snapshot")
        checked = self._cooldown_id(session_id)
        if not snapshot.get("session_exists", False):
            if self.get_compression_failure_cooldown_row(session_id)["session_exists"]:
                raise CompressionCooldownRestoreError(
                    "cannot restore absent compression cooldown row: session now exists"
                )
            return None
        deadline = validation.optional_number(snapshot.get("cooldown_until"), "cooldown_until")
        error = snapshot.get("error")
        if self._text(error, "error") != error:
            raise ValueError("error must be text this store keeps exactly (no NUL, no lone "
                             "surrogate); nothing was written")  # fmt: skip
        if checked is None or not bindable(checked):
            logger.warning("compression cooldown rollback session missing: %r", session_id)
            return None
        statement = (
            update(sessions)
            .where(sessions.c.id == checked)
            .values(compression_failure_cooldown_until=deadline, compression_failure_error=error)
        )
        if not self.store.write(lambda conn: conn.execute(statement).rowcount == 1):
            logger.warning("compression cooldown rollback session missing: %s", checked)
            return None
        actual = self.get_compression_failure_cooldown_row(checked)
        expected = cooldown_row(True, deadline, error)
        if actual != expected:
            if not actual["session_exists"]:
                logger.warning(
                    "compression cooldown rollback session missing after restore: %s", checked
                )
                return None
            raise CompressionCooldownRestoreError(
                "compression cooldown rollback verification failed: "
                f"expected={expected!r}, actual={actual!r}"
            )
        return None

    @writes
    def clear_compression_failure_cooldown(self, session_id: str) -> bool:
        session_id = validation.identifier(session_id, "session_id")
        statement = (
            update(sessions)
            .where(sessions.c.id == session_id)
            .values(compression_failure_cooldown_until=None, compression_failure_error=None)
        )
        return self.store.write(lambda conn: bool(conn.execute(statement).rowcount))

    # -- the compressor's durable counters (iot 0.22.2) ---------------------------------------
    def _session_number(self, column: str, session_id: Any, cast: type, zero: Any) -> Any:
        """One numeric ``sessions`` column of the session, at least ``zero``; ``zero`` for an
        unknown session, NULL, a value that is no number, or a store from before the column."""
        if not isinstance(session_id, str) or not session_id or not bindable(session_id):
            return zero
        if not self.store.read_shape.has_column(sessions.name, column):
            return zero
        statement = select(sessions.c[column]).where(sessions.c.id == session_id)
        value = self.store.read(lambda conn: conn.execute(statement).scalar())
        try:
            return max(zero, cast(value or zero))
        except (TypeError, ValueError, OverflowError):
            return zero

    def _set_session_number(self, column: str, session_id: Any, value: Any) -> bool:
        if not session_id:
            return False
        statement = (
            update(sessions)
            .where(sessions.c.id == validation.identifier(session_id, "session_id"))
            .values({column: value})
        )
        return bool(self.store.write(lambda conn: conn.execute(statement).rowcount > 0))

    @reads
    def get_compression_ineffective_count(self, session_id: str) -> int:
        """The compressor's ineffective-compaction strikes (its anti-thrash guard), 0 unset."""
        count: int = self._session_number("compression_ineffective_count", session_id, int, 0)
        return count

    @writes
    def set_compression_ineffective_count(self, session_id: str, count: int) -> bool:
        """Keep ``max(0, count)`` strikes; True when the session exists, nothing for ``""``."""
        value = max(0, validation.counter(count, "count"))
        return self._set_session_number("compression_ineffective_count", session_id, value)

    @reads
    def get_compression_overload_streak(self, session_id: str) -> int:
        """The compressor's sustained-overload abort streak, 0 unset."""
        streak: int = self._session_number("compression_overload_streak", session_id, int, 0)
        return streak

    @writes
    def set_compression_overload_streak(self, session_id: str, streak: int) -> bool:
        """Keep ``max(0, streak)``; True when the session exists, nothing for ``""``."""
        value = max(0, validation.counter(streak, "streak"))
        return self._set_session_number("compression_overload_streak", session_id, value)

    @writes
    def increment_compression_overload_streak(self, session_id: str) -> int | None:
        """Add one to the overload streak in one transaction (two agents on a session lose no
        strike); the new value, None for an unknown (or empty) session."""
        if not isinstance(session_id, str) or not session_id or not bindable(session_id):
            return None
        column = sessions.c.compression_overload_streak
        bump = (
            update(sessions)
            .where(sessions.c.id == session_id)
            .values(compression_overload_streak=func.coalesce(column, 0) + 1)
        )
        read = select(column).where(sessions.c.id == session_id)

        def run(conn: Connection) -> int | None:
            if not conn.execute(bump).rowcount:
                return None
            return int(conn.execute(read).scalar_one())

        found: int | None = self.store.write(run)
        return found

    @reads
    def get_compression_recovery_deadline(self, session_id: str) -> float:
        """The compressor's anti-thrash recovery deadline (a Unix time), 0.0 when not armed."""
        deadline: float = self._session_number(
            "compression_recovery_deadline", session_id, float, 0.0
        )
        return deadline

    @writes
    def set_compression_recovery_deadline(self, session_id: str, deadline: float | None) -> bool:
        """Arm the recovery deadline; 0, None or a negative number disarms it (NULL), as in
        iot. Decided: a value that is not a number is a ``TypeError``, NaN, an infinity or a
        number past a float a ``ValueError`` (iot disarms or stores them), nothing written."""
        value = validation.optional_number(deadline, "deadline") or 0.0
        stored = value if value > 0.0 else None
        return self._set_session_number("compression_recovery_deadline", session_id, stored)

    # -- state_meta -------------------------------------------------------------------------
    # -- the fallback streak (Hermes 0.19) ---------------------------------------------------
    @reads
    def get_compression_fallback_streak(self, session_id: str) -> int:
        if not session_id or not bindable(session_id):
            return 0
        if not self.store.read_shape.has_column(sessions.name, "compression_fallback_streak"):
            return 0  # a store read as it is, from before Hermes v21: no streak yet
        statement = select(sessions.c.compression_fallback_streak).where(
            sessions.c.id == session_id
        )
        value = self.store.read(lambda conn: conn.execute(statement).scalar())
        try:
            return max(0, int(value or 0))
        except (TypeError, ValueError):
            return 0

    @writes
    def set_compression_fallback_streak(self, session_id: str, streak: int) -> bool:
        """True when the session exists (and now holds ``max(0, streak)``); nothing for an
        empty id."""
        if not session_id:
            return False
        count = max(0, validation.counter(streak, "streak"))
        statement = (
            update(sessions)
            .where(sessions.c.id == validation.identifier(session_id, "session_id"))
            .values(compression_fallback_streak=count)
        )
        return self.store.write(lambda conn: conn.execute(statement).rowcount > 0)

    @reads
    def get_meta(self, key: str) -> str | None:
        if not bindable(key):
            return None
        return self.store.read(lambda conn: meta_value(conn, key))

    @reads
    def list_meta_prefix(self, prefix: str) -> list[tuple[str, str | None]]:
        """``(key, value)`` of every ``state_meta`` key that starts with ``prefix``, taken
        literally (``%`` and ``_`` are not wildcards), by key (iot 0.22.2: its loop and
        heartbeat records); an empty prefix lists nothing."""
        if not isinstance(prefix, str) or not prefix or not bindable(prefix):
            return []
        statement = (
            select(state_meta.c.key, state_meta.c.value)
            .where(state_meta.c.key.startswith(prefix, autoescape=True))
            .order_by(state_meta.c.key)
        )
        rows = self.store.read(lambda conn: conn.execute(statement).all())
        return [(str(row.key), row.value) for row in rows]

    @writes
    def set_meta(self, key: str, value: str | None, *, cursor: Any = None) -> None:
        """Set ``state_meta[key]``. With iot 0.22.2's ``cursor`` (a SQLite cursor of a
        transaction the caller already holds, on a connection to this store's file: the
        drop-in's ``_conn``) the upsert runs on it, inside that transaction, which commits it
        or not: opening our own would wait for the caller's lock."""
        key = validation.identifier(key, "key")
        stored = None if value is None else self._text(str(value), "value")
        if cursor is not None:
            if not callable(getattr(cursor, "execute", None)):
                raise TypeError(f"cursor must be a database cursor, not {type(cursor).__name__}")
            cursor.execute(META_UPSERT_QMARK, (key, stored))
            return
        statement = meta_upsert(self.store.dialect, key, stored)
        self.store.write(lambda conn: conn.execute(statement))
