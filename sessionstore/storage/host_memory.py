"""How much memory the machine has free for a job that holds a store's size in memory.

pysqlite3's SQLite builds a VACUUM's compacted copy in memory (``dialects.sqlite``,
``vacuum_memory_bytes``), where the standard library's writes it to a temporary file; the
automatic housekeeping asks this module before it starts one (``sessions.maintenance``).
"""

from __future__ import annotations

import os
from pathlib import Path

MEMINFO = Path("/proc/meminfo")


def available_bytes() -> int | None:
    """The memory the system could give a process now without swapping: Linux's
    ``MemAvailable`` (free memory plus the page cache it can drop), else the free physical
    pages where the system reports them; None when it cannot be told."""
    try:
        with MEMINFO.open(encoding="ascii") as lines:
            for line in lines:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, OSError, ValueError):
        return None
