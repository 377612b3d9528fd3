"""sessionstore: the durable, searchable memory of LLM agents.

``from sessionstore import SessionDB`` gives the Hermes-compatible facade; ``Store`` and the
repository underneath are the typed API.
"""

from __future__ import annotations

from .errors import (
    ConstraintViolationError,
    DriverMissingError,
    ImportConflictError,
    MigrationError,
    ReadOnlyStoreError,
    SchemaMissingError,
    SchemaOutOfDateError,
    SchemaTooNewError,
    SessionStoreError,
    StoreBusyError,
    StoreFullError,
    StoreUnavailableError,
    UnknownRevisionError,
    UnsupportedValueError,
    ValueOutOfRangeError,
    WriteOutcomeUnknownError,
)
from .facade import SessionDB
from .retry import RetryPolicy
from .store import Store

__version__ = "0.1.0"

__all__ = [
    "ConstraintViolationError",
    "DriverMissingError",
    "ImportConflictError",
    "MigrationError",
    "ReadOnlyStoreError",
    "RetryPolicy",
    "SchemaMissingError",
    "SchemaOutOfDateError",
    "SchemaTooNewError",
    "SessionDB",
    "SessionStoreError",
    "Store",
    "StoreBusyError",
    "StoreFullError",
    "StoreUnavailableError",
    "UnknownRevisionError",
    "UnsupportedValueError",
    "ValueOutOfRangeError",
    "WriteOutcomeUnknownError",
    "__version__",
]
