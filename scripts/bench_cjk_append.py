"""Appending CJK messages with the head's bigram token SQL against an older revision's.

    .venv/bin/python scripts/bench_cjk_append.py [--sizes 1,10] [--kind random|prose]
        [--rounds 2] [--short 200] [--dialect sqlite|postgresql|both] [--pg-url URL]
        [--sqlite-before 0025|0044]

Each database holds two stores built at head by ``SessionDB``; on one of them the bigram
tokens are computed by an older revision's SQL (SQLite: 0025's triggers, or 0044's with
``--sqlite-before 0044``; PostgreSQL: 0021's ``sessionstore_cjk_grams``). The sides are timed
alternately (A B B A), each message written by a raw ``INSERT`` and its ``COMMIT`` (the FTS5
flush is in the commit) on the driver's connection; SQLite starts each batch from a fresh copy
of the store, PostgreSQL deletes each message untimed, so that both sides stay alike:

- a long message of each ``--sizes`` megabytes of UTF-8 (``random``: CJK characters drawn
  at random, a tenth of them other text, nearly every bigram distinct, the worst case for the
  index; ``prose``: a paragraph of Chinese, Korean and Japanese with ASCII, repeated);
- ``--short`` appends of a 200-character CJK message each, the common path.

SQLite: thread CPU time (this process runs SQLite) and wall time, the write lock held for
both. PostgreSQL: the server backend's CPU time (``/proc/<pid>/stat``, 10 ms ticks: the server
must be on this machine) and the client's wall time. Nothing is asserted: figures only.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sessionstore._migrations import revision_0021_ddl, revision_0025_ddl, revision_0044_ddl
from sessionstore.api.session_db import SessionDB
from sessionstore.dialects.sqlite_library import connect
from sessionstore.search import object_names, postgresql_ddl

PARAGRAPH = (
    "我们讨论了数据库迁移的方案，决定先在测试环境验证新的索引结构，然后再逐步推广到生产环境。"
    "会议记录如下：第一，确认备份策略；第二，评估写入锁的持有时间；第三，准备回滚脚本。"
    "한국어 문장도 섞여 있습니다. 日本語のテキストも少し含まれています。 error: timeout after 30s\n"
)
SIDES = ("before", "head")
SQLITE_BEFORE = {
    "0025": revision_0025_ddl.SQLITE_CREATE_COMPACT_TRIGGERS,
    "0044": revision_0044_ddl.SQLITE_CREATE_TRIGGERS,
}
INSERT = (
    "INSERT INTO messages (session_id, role, content, timestamp) "
    "VALUES ('bench', 'user', %s, 1.0)"
)


def random_cjk(size: int, seed: int) -> str:
    pick = random.Random(seed)
    chars, total = [], 0
    while total < size:
        char = (
            chr(pick.randint(0x4E00, 0x9FFF)) if pick.random() < 0.9 else pick.choice("，。！ ab\n")
        )
        chars.append(char)
        total += len(char.encode())
    return "".join(chars)


def prose(size: int) -> str:
    parts, total, number = [], 0, 0
    while total < size:
        part = f"{PARAGRAPH}#{number} "
        parts.append(part)
        total += len(part.encode())
        number += 1
    return "".join(parts)


def short_messages(count: int) -> list[str]:
    return [(PARAGRAPH * 2)[number % 50 : number % 50 + 195] + f" {number:04d}"
            for number in range(count)]  # fmt: skip


class SqliteSide:
    """Each batch on a fresh copy of the side's store (SQLite's backup API): the FTS5 merges
    that deleted megabytes would leave behind are nobody's append."""

    def __init__(self, path: Path, before: tuple[str, ...] | None) -> None:
        self.template = path
        with SessionDB(str(path)) as db:
            db.create_session("bench", "cli")
        if before is not None:
            conn = connect(str(path), isolation_level=None)
            for trigger in object_names.BIGRAM_TRIGGERS:
                conn.execute(f"DROP TRIGGER {trigger}")
            for statement in before:
                conn.execute(statement)
            conn.close()
        self.copy = path.with_name(f"{path.stem}-copy.db")
        self.conn: Any = None

    def take_turn(self) -> None:
        if self.conn is not None:
            self.conn.close()
        for leftover in (self.copy, Path(f"{self.copy}-wal"), Path(f"{self.copy}-shm")):
            leftover.unlink(missing_ok=True)  # closed above: no connection holds it
        source = connect(str(self.template))
        self.conn = connect(str(self.copy), isolation_level=None)
        source.backup(self.conn)
        source.close()
        self.conn.execute("PRAGMA journal_mode = WAL")

    def append(self, text: str) -> tuple[float, float]:
        cpu, wall = time.thread_time(), time.perf_counter()
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.execute(INSERT.replace("%s", "?"), (text,))
        self.conn.execute("COMMIT")
        return time.thread_time() - cpu, time.perf_counter() - wall

    def forget(self) -> None:
        """Nothing: the next turn starts from a fresh copy."""


class PostgresSide:
    """Both sides share one store: the function is switched before each side's turn."""

    def __init__(self, url: str, before: bool) -> None:
        conninfo = sa.make_url(url).set(drivername="postgresql").render_as_string(False)
        self.raw = psycopg.connect(conninfo, autocommit=True)
        self.pid = self.raw.info.backend_pid
        self.ddl = (revision_0021_ddl.PG_CREATE_GRAMS_FUNCTION if before
                    else postgresql_ddl.CREATE_GRAMS_FUNCTION)  # fmt: skip

    def _backend_cpu(self) -> float:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def take_turn(self) -> None:
        self.raw.cursor().execute(self.ddl)
        self.raw.cursor().execute("SELECT sessionstore_cjk_grams('数据')")  # plan it untimed

    def append(self, text: str) -> tuple[float, float]:
        cpu, wall = self._backend_cpu(), time.perf_counter()
        self.raw.cursor().execute(INSERT, (text,))
        return self._backend_cpu() - cpu, time.perf_counter() - wall

    def forget(self) -> None:
        self.raw.cursor().execute("DELETE FROM messages WHERE session_id = 'bench'")


def run(name: str, sides: dict[str, Any], texts: dict[str, list[str]], rounds: int) -> None:
    """Each batch on each side, the sides alternating A B B A; medians of the rounds."""
    figures: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for number in range(rounds):
        for label, batch in texts.items():
            for side in SIDES if number % 2 == 0 else SIDES[::-1]:
                turn: Callable[[], None] | None = getattr(sides[side], "take_turn", None)
                if turn:
                    turn()
                cpu = wall = 0.0
                for text in batch:
                    spent = sides[side].append(text)
                    cpu, wall = cpu + spent[0], wall + spent[1]
                    sides[side].forget()
                figures.setdefault((label, side), []).append((cpu / len(batch), wall / len(batch)))
    for label in texts:
        unit, scale = ("ms", 1e3) if label == "short" else ("s", 1.0)
        cells = []
        for side in SIDES:
            runs = figures[(label, side)]
            cpu = statistics.median(r[0] for r in runs)
            wall = statistics.median(r[1] for r in runs)
            cells.append(f"{side}: cpu {cpu * scale:.3f} {unit}, wall {wall * scale:.3f} {unit}")
        print(f"{name:10s} {label:8s} " + " | ".join(cells), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1,10")
    parser.add_argument("--kind", choices=("random", "prose"), default="random")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--short", type=int, default=200)
    parser.add_argument("--dialect", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--pg-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    parser.add_argument("--sqlite-before", choices=sorted(SQLITE_BEFORE), default="0025")
    args = parser.parse_args()
    texts: dict[str, list[str]] = {}
    for size in (float(s) for s in args.sizes.split(",") if s):
        length = int(size * 1_000_000)
        text = random_cjk(length, 1) if args.kind == "random" else prose(length)
        texts[f"{size:g} MB"] = [text]
    if args.short:
        texts["short"] = short_messages(args.short)
    if args.dialect in ("sqlite", "both"):
        with tempfile.TemporaryDirectory() as workdir:
            before = SQLITE_BEFORE[args.sqlite_before]
            sides = {side: SqliteSide(Path(workdir) / f"{side}.db",
                                      before if side == "before" else None)
                     for side in SIDES}  # fmt: skip
            run("sqlite", sides, texts, args.rounds)
    if args.dialect in ("postgresql", "both"):
        admin = sa.create_engine(args.pg_url, isolation_level="AUTOCOMMIT")
        database = f"bench_cjk_append_{os.getpid()}"
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{database}"')
        url = sa.make_url(args.pg_url).set(database=database).render_as_string(False)
        try:
            with SessionDB(url=url) as db:
                db.create_session("bench", "cli")
            pg_sides = {side: PostgresSide(url, side == "before") for side in SIDES}
            run("postgresql", pg_sides, texts, args.rounds)
            for side in pg_sides.values():
                side.raw.close()
        finally:
            with admin.connect() as conn:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
            admin.dispose()


if __name__ == "__main__":
    main()
