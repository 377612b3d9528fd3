"""Reading a store as it is: whether a store opened read-only can be read, and in what shape.

A store at our head is read in full (nothing is inspected: the status check said so). Any
other store opened read-only (a Hermes file nobody adopted, one a newer Hermes numbered past
what this release writes, a store of ours at an older revision) is inspected once, at open:
its reads select the columns it has and Hermes's defaults for the later ones it lacks
(:mod:`sessionstore.sql.read_shape`, the one home of that rule), and a store that lacks a
column no default stands for cannot be read as it is: the reason says what is missing and
what to do. Read-only access changes nothing, so nothing needs adopting to read.
"""

from __future__ import annotations

from sqlalchemy.engine import Connection

from ..sql.read_shape import ReadableShape, read_shape_of
from ..sql.records import MESSAGE_FIELDS, SESSION_FIELDS
from ..storage.store import Store
from . import legacy, migrate

READ_FIELDS = {"sessions": SESSION_FIELDS, "messages": MESSAGE_FIELDS}


def check_readable(store: Store, *, upgrade_command: str = "sessionstore db upgrade") -> str | None:
    """Decide ``store``'s read shape (see the module) and keep it on the store; why the store
    cannot be read as it is (None: it can). Call it once, right after opening the store
    read-only, before anything reads through it."""
    problem, readable = store.read(lambda conn: _inspect(conn, upgrade_command))
    if readable is not None:
        store.read_shape = readable.shape
    return problem


def _inspect(conn: Connection, upgrade_command: str) -> tuple[str | None, ReadableShape | None]:
    status = migrate.status_of(conn)
    if status.up_to_date:
        return None, None
    readable = read_shape_of(conn, READ_FIELDS)
    if not readable.missing:
        return None, readable
    missing = readable.missing
    shown = ", ".join(missing[:6]) + (" ..." if len(missing) > 6 else "")
    if legacy.is_too_new(status.schema_version):
        return (
            f"this store has schema version {status.schema_version}, newer than the "
            f"{legacy.NEWEST_HERMES_SCHEMA} this release understands, and lacks what it reads "
            f"({shown}); a newer sessionstore is needed to read it"
        ), None
    refusal = migrate.upgrade_refusal(status)
    if refusal is not None:  # an upgrade would refuse it too: say why, suggest nothing
        return f"this store lacks what this release reads ({shown}): {refusal}", None
    return (
        f"this store is at revision {status.revision or 'none'} (Hermes schema "
        f"{status.schema_version or 'none'}) and lacks what this release reads ({shown}); "
        f"run `{upgrade_command}` (it keeps every row), then open it again"
    ), None
