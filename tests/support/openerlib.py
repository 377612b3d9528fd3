"""Programs for the multi-opener tests: writers that print what was acknowledged, and checkers.

Run as ``python tests/support/openerlib.py MODE ...``, or forked as ``openerlib:main`` by a
``prefork.ForkServer`` that imported ``sessionstore`` once (``IMPORTS``):

- ``foreign PATH SESSION TAG REPEATS N``: a raw ``sqlite3`` program writing with Hermes's own
  statements (one message plus the counter, one transaction each), closing the file after every
  ``N`` messages, ``REPEATS`` times. It prints each message's text once its COMMIT returned.
  A trailing ``keep-wal`` switches its automatic checkpoints off, and ``pace=SECONDS`` waits that
  long after each commit, as an agent does between messages: a writer that never checkpoints and
  never pauses grows the WAL by about 150 MB a second, and starves any other writer while it does.
- ``sessionstore URL SESSION TAG OPENERS N``: ``OPENERS`` ``SessionDB`` objects in one process,
  each appending ``N`` messages from its own thread and printing what was acknowledged.
- ``read URL OPENERS``: ``OPENERS`` new ``SessionDB`` objects each print every message text
  (JSON list per opener), so another process's view can be compared.
- ``raw PATH``: a plain ``sqlite3`` connection prints every message text (JSON list).
"""

from __future__ import annotations

import json
import sqlite3
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERMES_INSERT = (
    "INSERT INTO messages (session_id, role, content, tool_call_id, tool_calls, tool_name, "
    "timestamp, token_count, finish_reason) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
HERMES_COUNT = "UPDATE sessions SET message_count = message_count + 1 WHERE id = ?"

PROGRAM = str(Path(__file__).resolve())
IMPORTS = (
    "openerlib", "sessionstore", "sessionstore.dialects.sqlite", "sessionstore.search.sqlite",
    "sessionstore.dialects.postgresql", "sessionstore.search.postgresql",
)  # fmt: skip
"""What the programs import (``sessionstore`` at start, the rest in their first calls)."""


def foreign(
    path: str, session_id: str, tag: str, repeats: int, per_open: int, keep_wal: bool = False,
    pace: float = 0.0,
) -> None:
    for repeat in range(repeats):
        conn = sqlite3.connect(path, timeout=30, isolation_level=None)
        if keep_wal:
            # Its commits stay in the WAL: only a copy made through SQLite holds them.
            conn.execute("PRAGMA wal_autocheckpoint = 0")
        try:
            for number in range(per_open):
                text = f"{tag}-{repeat}-{number}"
                while True:
                    try:
                        conn.execute("BEGIN IMMEDIATE")
                        break
                    except sqlite3.OperationalError as exc:
                        if "locked" not in str(exc) and "busy" not in str(exc):
                            raise
                conn.execute(
                    HERMES_INSERT, (session_id, "user", text, None, None, None, time.time(), None,
                                    None)
                )
                conn.execute(HERMES_COUNT, (session_id,))
                conn.execute("COMMIT")
                print(text, flush=True)
                if pace:
                    time.sleep(pace)
        finally:
            conn.close()


def sessionstore_writers(url: str, session_id: str, tag: str, openers: int, count: int) -> None:
    from sessionstore import SessionDB

    dbs = [SessionDB(url=url) for _ in range(openers)]
    lock = threading.Lock()

    def write(index: int) -> None:
        for number in range(count):
            text = f"{tag}-{index}-{number}"
            dbs[index].append_message(session_id, "user", text)
            with lock:
                print(text, flush=True)
            if number % 7 == 0:
                dbs[index].get_messages(session_id)  # reads open more pooled connections

    threads = [threading.Thread(target=write, args=(i,)) for i in range(openers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for db in dbs:
        db.close()


def read_all(url: str, openers: int) -> None:
    from sessionstore import SessionDB

    dbs = [SessionDB(url=url) for _ in range(openers)]
    views: list[Any] = []
    for db in dbs:
        views.append(sorted(row["content"] for row in db.repository.store.read(_contents)))
    for db in dbs:
        db.close()
    print(json.dumps(views))


def _contents(conn: Any) -> list[dict[str, Any]]:
    return [{"content": row[0]} for row in conn.exec_driver_sql("SELECT content FROM messages")]


def raw(path: str) -> None:
    conn = sqlite3.connect(path, timeout=30)
    try:
        print(json.dumps(sorted(row[0] for row in conn.execute("SELECT content FROM messages"))))
    finally:
        conn.close()


def main(mode: str, *args: str) -> None:
    if mode == "foreign":
        options = args[5:]
        paces = [float(option[len("pace="):]) for option in options if option.startswith("pace=")]
        foreign(args[0], args[1], args[2], int(args[3]), int(args[4]), "keep-wal" in options,
                paces[-1] if paces else 0.0)
    elif mode == "sessionstore":
        sessionstore_writers(args[0], args[1], args[2], int(args[3]), int(args[4]))
    elif mode == "read":
        read_all(args[0], int(args[1]))
    elif mode == "raw":
        raw(args[0])
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(*sys.argv[1:])
