#!/usr/bin/env python3
"""What each full-text layout costs per appended message, measured in one run.

Three layouts of the same ``messages`` table, each fed the same messages through its triggers
(plain ``sqlite3``, one transaction per turn of four messages, as an agent writes):

- ``hermes-v6``: v6's external-content ``messages_fts`` over ``content`` (the baseline: what
  sessionstore's speed targets were measured against);
- ``hermes-v11``: newest Hermes's shape: both tables inline over ``content || tool_name ||
  tool_calls``, a trigram row for every message;
- ``sessionstore``: revision 0014's shape at head: both tables external-content over views of
  the same text, trigram rows only for messages with CJK text.

Prints microseconds per message and each layout's ratio to the baseline, plus the file size.
Usage: ``python scripts/bench_fts_layouts.py [--messages N] [--cjk-share 0.1]``.
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from sessionstore._migrations import search_ddl

MESSAGES_DDL = """
CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT NOT NULL, started_at REAL NOT NULL);
CREATE TABLE messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL REFERENCES sessions(id),
    role TEXT NOT NULL, content TEXT, tool_call_id TEXT, tool_calls TEXT, tool_name TEXT,
    timestamp REAL NOT NULL, active INTEGER NOT NULL DEFAULT 1,
    compacted INTEGER NOT NULL DEFAULT 0);
"""

_CONCAT = (
    "COALESCE(new.content, '') || ' ' || COALESCE(new.tool_name, '') || ' ' || "
    "COALESCE(new.tool_calls, '')"
)


def _hermes_inline(table: str, tokenize: str) -> list[str]:
    options = f", tokenize='{tokenize}'" if tokenize else ""
    return [
        f"CREATE VIRTUAL TABLE {table} USING fts5(content{options})",
        f"CREATE TRIGGER {table}_insert AFTER INSERT ON messages BEGIN "
        f"INSERT INTO {table}(rowid, content) VALUES (new.id, {_CONCAT}); END",
        f"CREATE TRIGGER {table}_delete AFTER DELETE ON messages BEGIN "
        f"DELETE FROM {table} WHERE rowid = old.id; END",
        f"CREATE TRIGGER {table}_update AFTER UPDATE ON messages BEGIN "
        f"DELETE FROM {table} WHERE rowid = old.id; "
        f"INSERT INTO {table}(rowid, content) VALUES (new.id, {_CONCAT}); END",
    ]


class _Bind:
    """The little of a SQLAlchemy connection search_ddl's builders use, over sqlite3."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.info: dict[str, object] = {}

    def exec_driver_sql(self, sql: str, params: tuple[object, ...] = ()) -> sqlite3.Cursor:
        return self.conn.execute(sql, params)


def build(path: Path, layout: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    # As the stores run: a commit costs no fsync, so what is measured is the index work.
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.executescript(MESSAGES_DDL)
    if layout == "hermes-v6":
        conn.execute(search_ddl.SQLITE_CREATE_FTS)
        for ddl in search_ddl.SQLITE_CREATE_TRIGGERS:
            conn.execute(ddl)
    elif layout == "hermes-v11":
        for ddl in [*_hermes_inline("messages_fts", ""),
                    *_hermes_inline("messages_fts_trigram", "trigram")]:  # fmt: skip
            conn.execute(ddl)
    else:
        search_ddl.create_later_search_objects(_Bind(conn), trigram=True)  # type: ignore[arg-type]
    conn.execute("INSERT INTO sessions VALUES ('s', 'cli', 0)")
    return conn


Row = tuple[str, str | None, str | None]


def corpus(count: int, cjk_share: float, seed: int = 17) -> list[Row]:
    rng = random.Random(seed)
    words = ["deploy", "alembic", "kubectl", "migration", "search", "index", "agent", "turn"]
    cjk = ["数据库", "迁移", "部署到集群", "日本語のテスト", "한국어 메시지"]
    rows: list[Row] = []
    for n in range(count):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(8, 60)))
        if rng.random() < cjk_share:
            text += " " + rng.choice(cjk)
        if n % 4 == 1:
            rows.append(("assistant", None, '[{"id": "c", "function": {"name": "terminal", '
                         '"arguments": "{\\"command\\": \\"ls\\"}"}}]'))  # fmt: skip
        else:
            rows.append(("user" if n % 4 == 0 else "tool", text, None))
    return rows


LAYOUTS = ("hermes-v6", "hermes-v11", "sessionstore")


def append_turns(conn: sqlite3.Connection, rows: list[Row]) -> float:
    """Seconds to append ``rows`` as turns of four messages, one transaction each."""
    started = time.perf_counter()
    for start in range(0, len(rows), 4):
        conn.execute("BEGIN IMMEDIATE")
        for role, content, tool_calls in rows[start : start + 4]:
            conn.execute(
                "INSERT INTO messages (session_id, role, content, tool_calls, tool_name, "
                "timestamp) VALUES ('s', ?, ?, ?, ?, ?)",
                (role, content, tool_calls, "terminal" if tool_calls else None, time.time()),
            )
        conn.execute("COMMIT")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--cjk-share", type=float, default=0.1)
    args = parser.parse_args()
    rows = corpus(args.messages, args.cjk_share)
    chunk = max(4, len(rows) // args.rounds // 4 * 4)
    # The layouts take turns, chunk by chunk, so a busy machine slows all of them alike; the
    # median chunk of each is reported.
    samples: dict[str, list[float]] = {layout: [] for layout in LAYOUTS}
    with tempfile.TemporaryDirectory() as scratch:
        workdir = Path(scratch)
        conns = {layout: build(workdir / f"{layout}.db", layout) for layout in LAYOUTS}
        for start in range(0, len(rows), chunk):
            part = rows[start : start + chunk]
            for layout in LAYOUTS:
                samples[layout].append(append_turns(conns[layout], part) / len(part) * 1e6)
        sizes = {}
        for layout, conn in conns.items():
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.close()
            sizes[layout] = (workdir / f"{layout}.db").stat().st_size
    medians = {layout: statistics.median(values) for layout, values in samples.items()}
    base_us, base_size = medians["hermes-v6"], sizes["hermes-v6"]
    print(f"{args.messages} messages, {args.cjk_share:.0%} with CJK text, "
          f"median of {len(samples['hermes-v6'])} interleaved chunks")  # fmt: skip
    print(f"{'layout':<14}{'us/message':>12}{'vs v6':>8}{'file MB':>10}{'vs v6':>8}")
    for layout in LAYOUTS:
        print(f"{layout:<14}{medians[layout]:>12.1f}{medians[layout] / base_us:>8.2f}"
              f"{sizes[layout] / 1e6:>10.1f}{sizes[layout] / base_size:>8.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
