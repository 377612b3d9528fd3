"""A new store is the chain's own result, replayed.

Why: building a store on an empty SQLite file runs every revision of the chain (41 of them),
about 0.26 CPU s, each time a program opens a new file: an agent's own test suite (Hermes's
included, run on this drop-in) opens one per test. The result is the same every time, save
the file's own identity.

How: the first time in a process that a blank database (no schema object at all) is upgraded
to head, the real chain runs, as it always did, and then, in the same transaction, the
migration environment (``sessionstore/_migrations/env.py``) reads back what it built: the
dialect's :class:`~sessionstore.dialects.StoreImage` (SQLite: ``sqlite_master``'s SQL in
creation order, every row of every table that holds rows, the header values the chain sets;
:mod:`sessionstore.dialects.sqlite_image`), kept here with the progress the chain reported.
The next blank database upgraded to head in that process gets that image written by SQL,
inside its own migration's write transaction (``BEGIN IMMEDIATE`` and the migration lock), after
it was found blank there: a second opener that waited for the lock finds the store built and
does nothing, as with the chain. Nothing is copied page by page or as a file. Upgraded on a
store's own engine (``SessionDB``), the store is built so by
:func:`sessionstore.schema.migrate.upgrade` itself, without Alembic's environment (its config,
``env.py`` run as a module: about a tenth of a new store's open); the same lock, transaction
and replay (:func:`build_from_image`), and any file not found blank and imaged goes on to
``env.py``.

So the head DDL keeps one home, the revisions: the image is derived from them at run time, in
the process that uses it, never written by hand nor checked in. It is kept per
:meth:`~sessionstore.dialects.StoreDialect.blank_store_key` (the SQLite library's build and
what the blank file already says of itself: page size, encoding, header values), so a file
the chain would build otherwise is built by the chain. What must differ per file, the file
identity iot 0.22.2 gives each store (a ``state_meta`` token and the ``application_id``
derived from it), is left out of the image and stamped again by revision 0039's own step.

Why not a head snapshot checked in (a generated file of the head's DDL and rows, written into
every new file, a generator with ``--check`` and a test keeping it equal to the chain): the
process's first new store is the only one left to save. Measured 2026-12-05 at load 6-8, 20
new stores in one process (``SessionDB(path).close()``, CPU s): by the chain each time 0.30
mean (0.20-0.47; the image forgotten before each), replayed 0.024 (0.019-0.031); the process's
first (the chain, reading it back, mapping the scripts) 0.5-0.7. Hermes's own suites of eight
releases run on this drop-in (``tests/hermes/test_hermes_own_suites.py``): 652 CPU s with
every new store by the chain, 165-171 replayed (``tests/support/suite_speed.md``). A snapshot
would save that first chain once per process, ~0.45 CPU s (those suites run one pytest process
a release, ~300 new stores each: ~4 CPU s of the 165), at the price of a second home of the
head DDL that can go stale, where the image is the chain's result by construction. Nor
SQLite's backup API from a store built in memory: the blank file is found blank, and built,
under the migration's write lock, and a backup's destination connection must be outside any
transaction (another connection's backup would wait behind that lock).

Only an upgrade to head through :func:`sessionstore.schema.migrate.upgrade` (``SessionDB``, the
CLI's ``db upgrade``) that adopts legacy files as usual is replayed; Alembic's own command line,
a downgrade, a stamp, an upgrade to an older revision run the chain. PostgreSQL stays on the
chain (its dialect never gives a key): its store lives in a schema named by the URL, written
into the revisions' statements as they run.

The images are immutable and kept for the life of the process; a forked child keeps using
the ones it inherited (its lock is a new one: a thread of the parent may have held it).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Hashable
from typing import NamedTuple

from sqlalchemy.engine import Connection

from ..dialects import StoreDialect, StoreImage


class BuiltStore(NamedTuple):
    image: StoreImage
    reached: tuple[str, ...]
    """The revisions the chain reported reaching, in order (the progress a replay reports)."""


_lock = threading.Lock()
_built: dict[tuple[str, Hashable], BuiltStore] = {}
"""By the dialect's name and the blank store's key."""


def _new_lock_in_child() -> None:
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock_in_child)


def built_store(dialect: StoreDialect, key: Hashable) -> BuiltStore | None:
    """What the chain built on a blank database of ``key`` in this process, if it did."""
    with _lock:
        return _built.get((dialect.name, key))


def keep_built_store(dialect: StoreDialect, key: Hashable, built: BuiltStore) -> None:
    """Keep the first result for ``key`` (two threads may each have run the chain)."""
    with _lock:
        _built.setdefault((dialect.name, key), built)


def has_built_stores(dialect: StoreDialect) -> bool:
    """Whether this process kept an image for this dialect (none: every blank store of it is
    the chain's to build, and nothing need be asked of the database to know it)."""
    with _lock:
        return any(name == dialect.name for name, _ in _built)


def built_store_for(connection: Connection, dialect: StoreDialect) -> BuiltStore | None:
    """Under the migration's lock: what to build the store on ``connection`` from, when it is
    blank and the chain built a blank store of its key in this process; None otherwise."""
    if not has_built_stores(dialect):
        return None
    key = dialect.blank_store_key(connection)
    return None if key is None else built_store(dialect, key)


def build_from_image(
    connection: Connection,
    dialect: StoreDialect,
    built: BuiltStore,
    stamp_file_identity: Callable[[Connection], None],
    report: Callable[[str], None] | None,
) -> None:
    """Build a blank store as the chain built the first one, in the migration's transaction:
    its image, a new file identity (revision 0039's own step, ``stamp_file_identity``), and
    ``report`` told the revisions the chain reported reaching."""
    dialect.replay_new_store(connection, built.image)
    stamp_file_identity(connection)
    if report is not None:
        for revision in built.reached:
            report(revision)


def forget_built_stores() -> None:
    """Forget every image (tests that build a store by the chain on purpose)."""
    with _lock:
        _built.clear()
