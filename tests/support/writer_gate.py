"""Looking at a store's writers' queue from outside (``sessionstore.storage.writers_queue``):
a writer waiting for the lock holds the queue's gate, a side file beside the store."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


def gate_taken(gate: Path) -> bool:
    """True while somebody holds ``gate`` (``<db>-writegate``); False when nobody does or the
    file is not there yet. Tried without waiting and let go of at once; a side file, never the
    store's own (closing a descriptor of the store would drop this process's locks on it)."""
    try:
        probe = os.open(gate, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        fcntl.flock(probe, fcntl.LOCK_UN)
        return False
    finally:
        os.close(probe)
