"""Which door of the store a method goes through, declared once, on the sync method.

``@reads`` marks a method that only reads (``Store.read``); ``@writes`` one that writes
(``Store.write``, or a serialized store-wide job such as ``VACUUM``). The async faces
(:mod:`sessionstore.api.async_session_db`, :mod:`sessionstore.api.async_repository`) are
generated from the sync classes by ``scripts/gen_async_api.py``, which reads this mark to send
each coroutine to the right door of :class:`~sessionstore.storage.async_store.AsyncStore`: a
read runs in the readers' pool and never takes the writer's turn; a write takes its turn and
runs in the writer thread. A mirrored method without a mark stops the generator, so a new
method cannot drift to the wrong door unnoticed.

The decorators only set an attribute on the function and return that same function: nothing
happens at call time, and ``inspect.signature`` sees the method as written.

Decision: this module lives in ``sessions/`` because both users of the mark can import it
there: the repository's parts (same package) and the Hermes facade in ``api/`` (one layer
above); the storage layer, which owns the two doors, needs no knowledge of it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, TypeVar

Access = Literal["read", "write"]
F = TypeVar("F", bound=Callable[..., Any])

_MARK = "__sessionstore_access__"


def reads(method: F) -> F:
    """Declare ``method`` a read: its async form runs in the readers' pool."""
    setattr(method, _MARK, "read")
    return method


def writes(method: F) -> F:
    """Declare ``method`` a write: its async form takes the writer's turn."""
    setattr(method, _MARK, "write")
    return method


def access_of(method: object) -> Access | None:
    """``"read"``, ``"write"``, or None when ``method`` declares neither."""
    mark = getattr(method, _MARK, None)
    if mark == "read":
        return "read"
    if mark == "write":
        return "write"
    return None


__all__ = ["Access", "access_of", "reads", "writes"]
