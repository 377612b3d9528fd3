"""What a failed database call means, in this package's errors: one helper for every caller.

``Store.read``, ``Store.write`` and the status reads of :mod:`sessionstore.schema.migrate` all wrap
their work in :func:`typed_errors`, so a full disk, a foreign file, a missing schema or a
database that kept going away reads the same wherever it is met.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError

from ..dialects import StoreDialect
from ..errors import SessionStoreError, StoreBusyError, StoreUnavailableError
from .command_hints import cli_command


def exhausted(dialect: StoreDialect, exc: StoreBusyError) -> SessionStoreError:
    """What to raise when the retries ran out: busy, or the database kept going away."""
    if exc.last_error is not None and dialect.is_disconnect(exc.last_error):
        return StoreUnavailableError(
            f"lost the connection to the database {exc.attempts} times in a row: "
            f"{exc.last_error}"
        )
    return exc


def with_media_hint(
    dialect: StoreDialect, url: URL, translated: SessionStoreError
) -> SessionStoreError:
    """A store that cannot be opened because its directory cannot be written (a WAL file on
    read-only media: SQLite needs its ``-shm`` beside it) is told how to read it anyway."""
    if type(translated) is not StoreUnavailableError:
        return translated
    media_url = dialect.read_only_media_url(url)
    if media_url is None:
        return translated
    return StoreUnavailableError(
        f"{translated}: its directory cannot be written (read-only media?); read it with "
        f"immutable=1: `{cli_command(media_url, 'sessions', 'list')}`, or "
        f"SessionDB(url={media_url.render_as_string()!r})"
    )


@contextlib.contextmanager
def typed_errors(
    dialect: StoreDialect,
    *,
    refine: Callable[[SessionStoreError], SessionStoreError] | None = None,
    url: URL | None = None,
) -> Iterator[None]:
    """Re-raise driver errors the dialect recognises as this package's typed errors.

    ``refine`` may reword a translated error for its caller (a Store adds how to create a
    missing schema). ``url`` names the store, so that an error only its files can explain
    (SQLite's "disk I/O error" on a full disk) is recognised, and a store that read-only
    media keeps from opening says how to read it. Errors the dialect does not recognise
    propagate unchanged.
    """
    try:
        yield
    except StoreBusyError as exc:
        raise exhausted(dialect, exc) from exc.last_error
    except DBAPIError as exc:
        translated = dialect.translate_error(exc, url)
        if translated is None:
            raise
        if url is not None:
            translated = with_media_hint(dialect, url, translated)
        raise (refine(translated) if refine is not None else translated) from exc
