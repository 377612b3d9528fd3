"""What a failed database call means, in this package's errors: one helper for every caller.

``Store.read``, ``Store.write`` and the status reads of :mod:`sessionstore.schema.migrate` all wrap
their work in :func:`typed_errors`, so a full disk, a foreign file, a missing schema or a
database that kept going away reads the same wherever it is met.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType

from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError

from ..dialects import StoreDialect
from ..errors import (
    IndexMissingError,
    ReadOnlyStoreError,
    SessionStoreError,
    StoreBusyError,
    StoreUnavailableError,
    driver_message,
)
from .command_hints import cli_command


def exhausted(dialect: StoreDialect, exc: StoreBusyError) -> SessionStoreError:
    """What to raise when the retries ran out: busy, or the database kept going away."""
    if exc.last_error is not None and dialect.is_disconnect(exc.last_error):
        # The driver's words alone (no statement, no parameters: a message's text).
        return StoreUnavailableError(
            f"the database dropped or refused the connection {exc.attempts} times in a row "
            f"({exc.waited_s:.1f} s): {driver_message(exc.last_error)}"
        )
    return exc


def with_media_hint(
    dialect: StoreDialect, url: URL, translated: SessionStoreError
) -> SessionStoreError:
    """A store that cannot be opened because its directory cannot be written (a WAL file on
    read-only media: SQLite needs its ``-shm`` beside it; SQLite says "unable to open", or,
    in a directory this user may not write, SQLITE_READONLY_DIRECTORY) is told how to read it
    anyway."""
    if type(translated) not in (StoreUnavailableError, ReadOnlyStoreError):
        return translated
    media_url = dialect.read_only_media_url(url)
    if media_url is None:
        return translated
    how = (
        f"read it as it is with immutable=1: `{cli_command(media_url, 'sessions', 'list')}`, "
        f"or SessionDB(url={media_url.render_as_string()!r})"
    )
    if type(translated) is ReadOnlyStoreError:
        return ReadOnlyStoreError(f"{translated}; {how}")
    return StoreUnavailableError(
        f"{translated}: its directory cannot be written (read-only media?); {how}"
    )


def typed_errors(
    dialect: StoreDialect,
    *,
    refine: Callable[[SessionStoreError], SessionStoreError] | None = None,
    url: URL | None = None,
) -> TypedErrors:
    """Re-raise driver errors the dialect recognises as this package's typed errors (``with
    typed_errors(dialect):``).

    ``refine`` may reword a translated error for its caller (a Store adds how to create a
    missing schema). ``url`` names the store, so that an error only its files can explain
    (SQLite's "disk I/O error" on a full disk) is recognised, and a store that read-only
    media keeps from opening says how to read it. Errors the dialect does not recognise
    propagate unchanged.
    """
    return TypedErrors(dialect, refine, url)


class TypedErrors:
    """:func:`typed_errors`'s context manager. A class, not a generator: every read and write
    enters one, and a generator-based one cost ~1.5 us of an append's Python."""

    __slots__ = ("_dialect", "_refine", "_url")

    def __init__(
        self,
        dialect: StoreDialect,
        refine: Callable[[SessionStoreError], SessionStoreError] | None,
        url: URL | None,
    ) -> None:
        self._dialect = dialect
        self._refine = refine
        self._url = url

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc is None:
            return
        dialect = self._dialect
        if isinstance(exc, StoreBusyError):
            raise exhausted(dialect, exc) from exc.last_error
        if isinstance(exc, DBAPIError):
            translated = dialect.translate_error(exc, self._url)
            if translated is None:
                return  # propagates unchanged
            if self._url is not None:
                translated = with_media_hint(dialect, self._url, translated)
            if isinstance(translated, IndexMissingError):
                translated = IndexMissingError(
                    f"{translated}: `{cli_command(self._url, 'db', 'doctor', '--fix')}` makes "
                    "it again; nothing was changed"
                )
            refine = self._refine
            raise (refine(translated) if refine is not None else translated) from exc
