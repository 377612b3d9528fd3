"""sessionstore: the durable, searchable memory of LLM agents.

``from sessionstore import SessionDB`` gives the Hermes-compatible facade, ``AsyncSessionDB``
the same as coroutines for asyncio programs; ``Store`` and the repository underneath are the
typed API.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import (
    AuthenticationError,
    CanonicalTitleError,
    CompressionPublishError,
    CompressionSessionBusyError,
    CompressionSessionClosedError,
    ConstraintViolationError,
    DamagedValueError,
    DatabaseNotFoundError,
    DriverMissingError,
    ImportConflictError,
    ImportIncompleteError,
    IndexMissingError,
    MigrationError,
    PermissionDeniedError,
    ReadOnlyStoreError,
    RewindTargetUnavailableError,
    SchemaMissingError,
    SchemaOutOfDateError,
    SchemaTooNewError,
    SearchIndexDamagedError,
    SessionActiveWriteGuardError,
    SessionCompressionInProgressError,
    SessionExportTooLargeError,
    SessionResumeTooLargeError,
    SessionStoreError,
    SessionTurnLeaseLostError,
    SQLiteLibraryConflictError,
    StatementCanceledError,
    StoreBusyError,
    StoreClosedError,
    StoreFullError,
    StoreLocationError,
    StoreUnavailableError,
    StoreUnreachableError,
    TitleInUseError,
    TranscriptChangedError,
    UnknownRevisionError,
    UnknownRewindSessionError,
    UnknownSessionError,
    UnsupportedValueError,
    ValueOutOfRangeError,
    WriteOutcomeUnknownError,
)

if TYPE_CHECKING:
    from .api.async_session_db import AsyncSessionDB
    from .api.session_db import SessionDB
    from .storage.retry import RetryPolicy
    from .storage.store import Store

__version__ = "0.1.0"

__all__ = [
    "AsyncSessionDB",
    "AuthenticationError",
    "CanonicalTitleError",
    "CompressionPublishError",
    "CompressionSessionBusyError",
    "CompressionSessionClosedError",
    "ConstraintViolationError",
    "DamagedValueError",
    "DatabaseNotFoundError",
    "DriverMissingError",
    "ImportConflictError",
    "ImportIncompleteError",
    "IndexMissingError",
    "MigrationError",
    "PermissionDeniedError",
    "ReadOnlyStoreError",
    "RetryPolicy",
    "RewindTargetUnavailableError",
    "SQLiteLibraryConflictError",
    "SchemaMissingError",
    "SchemaOutOfDateError",
    "SchemaTooNewError",
    "SearchIndexDamagedError",
    "SessionActiveWriteGuardError",
    "SessionCompressionInProgressError",
    "SessionDB",
    "SessionExportTooLargeError",
    "SessionResumeTooLargeError",
    "SessionStoreError",
    "SessionTurnLeaseLostError",
    "StatementCanceledError",
    "Store",
    "StoreBusyError",
    "StoreClosedError",
    "StoreFullError",
    "StoreLocationError",
    "StoreUnavailableError",
    "StoreUnreachableError",
    "TitleInUseError",
    "TranscriptChangedError",
    "UnknownRevisionError",
    "UnknownRewindSessionError",
    "UnknownSessionError",
    "UnsupportedValueError",
    "ValueOutOfRangeError",
    "WriteOutcomeUnknownError",
    "__version__",
]


def __getattr__(name: str) -> Any:
    # Imported on first use: importing the package (as the command line does to print its
    # help) loads neither SQLAlchemy nor the store, and a sync program never pays for asyncio
    # and the async layer. Each is bound to the package once loaded, so this runs once per name.
    if name in ("SessionDB", "Store", "RetryPolicy"):
        # SQLAlchemy first, from as shallow a frame as the package has rather than from deep
        # inside the chain of our own modules' imports. CPython 3.11+ keeps frames in 16 KB
        # chunks and unmaps a chunk as soon as the frame at its start returns. SQLAlchemy's
        # import, run a few of our imports deeper, had a hot loop straddling a chunk edge:
        # ~900 mmap/munmap pairs with their page faults, 8 ms of system time per start
        # (strace and getrusage of ``from sessionstore.api.session_db import SessionDB``).
        # From the package's top 40-560 pairs across caller depths 0-12 (before: 300-1,260),
        # near a bare ``import sqlalchemy``'s 50-270.
        import sqlalchemy  # noqa: F401

        from .api.session_db import SessionDB
        from .storage.retry import RetryPolicy
        from .storage.store import Store

        globals().update(SessionDB=SessionDB, Store=Store, RetryPolicy=RetryPolicy)
        return globals()[name]
    if name == "AsyncSessionDB":
        from .api.async_session_db import AsyncSessionDB

        return AsyncSessionDB
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
