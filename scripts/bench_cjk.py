"""CJK search at 100k messages: our bigram index against real Hermes 0.18.0's own search.

    python scripts/bench_cjk.py [--messages 100000] [--reps 7] [--hermes DIR]

One SQLite file at head is filled once (500 sessions; about 10 % of the messages hold CJK runs
of common words, the rest English paragraphs and tool output), then the same queries are run
through ``sessionstore.SessionDB.search_messages`` and through real Hermes 0.18.0's
``SessionDB.search_messages`` (loaded from its unpacked wheel under another module name) on
that very file (``--hermes``: an unpacked wheel; by default the one ``scripts/bench.py``
fetches into its cache), interleaved, ``--reps`` times each; the medians and their ratio are
printed.
Hermes answers 1- and 2-character CJK queries with a ``LIKE`` scan of every message and 3+
characters from its trigram index; we answer all of them from the bigram index. Both return
the 20 newest hits with their context. The hit sets are compared too (they must be equal).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

CJK_WORDS = (
    "数据库迁移", "会话管理", "全文搜索", "并发写入", "检查点", "上下文压缩", "工具调用",
    "错误信息", "单元测试", "配置文件", "性能分析", "重试机制", "事务", "索引", "标题",
    "データベース", "検索エンジン", "セッション", "데이터베이스", "세션", "검색",
)  # fmt: skip
GLUE = ("的", "和", "在", "是", "需要", "已经", "不能", "可以", "の", "を")
_WORD_TEXT = (
    "the a to of and in is for on with that this it be as at by from or an are was not but "
    "deploy gateway session store search index query write read lock retry timeout commit "
    "migration schema table column message token model tool terminal file error warning info "
    "build test release branch merge review config cache queue worker thread process signal"
)
WORDS = _WORD_TEXT.split()
QUERIES = (
    ("1 char", "库"), ("1 char", "检"), ("2 chars", "数据"), ("2 chars", "迁移"),
    ("2 chars", "索引"), ("3 chars", "数据库"), ("3 chars", "检查点"),
)  # fmt: skip


def english(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high))) + "."


def cjk(rng: random.Random) -> str:
    runs = []
    for _ in range(rng.randint(2, 4)):
        run = "".join(rng.choice(CJK_WORDS) + rng.choice(GLUE) for _ in range(rng.randint(3, 6)))
        runs.append(run + rng.choice(("。", "，", "！")))
    return "".join(runs)


def fill(path: Path, total: int, seed: int = 7) -> None:
    """The corpus, written by a raw connection in one transaction (the triggers index it)."""
    from sessionstore.schema import migrate
    from sessionstore.storage.config import sqlite_url

    migrate.upgrade(sqlite_url(path))
    rng = random.Random(seed)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN")
    sessions = [f"s{n:04d}" for n in range(500)]
    conn.executemany(
        "INSERT INTO sessions (id, source, started_at) VALUES (?, 'cli', ?)",
        [(sid, 1_700_000_000 + n) for n, sid in enumerate(sessions)],
    )
    rows = []
    for n in range(total):
        kind = rng.random()
        if kind < 0.10:
            content = cjk(rng) + (" " + english(rng, 5, 20) if rng.random() < 0.5 else "")
        elif kind < 0.30:
            content = "\n".join(english(rng, 6, 14) for _ in range(rng.randint(4, 20)))
        else:
            content = english(rng, 20, 90)
        rows.append((rng.choice(sessions), rng.choice(("user", "assistant", "tool")), content,
                     1_700_000_000 + n * 0.5))  # fmt: skip
    conn.executemany(
        "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, ?, ?, ?)", rows
    )
    conn.execute("UPDATE sessions SET message_count = "
                 "(SELECT count(*) FROM messages WHERE session_id = sessions.id)")
    conn.execute("COMMIT")
    conn.close()


def load_hermes(directory: Path) -> Any:
    sys.path.insert(0, str(directory))
    spec = importlib.util.spec_from_file_location("real_hermes_state",
                                                  directory / "hermes_state.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["real_hermes_state"] = module
    spec.loader.exec_module(module)
    return module


def _bench_cache_hermes() -> Path:
    """The wheel scripts/bench.py unpacks (downloading it with pip on first use)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bench

    return bench.unpacked_hermes(bench.DEFAULT_HERMES_CACHE)


def median_seconds(function: Callable[[], object], reps: int) -> list[float]:
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument(
        "--hermes", type=Path, default=None,
        help="an unpacked hermes-agent 0.18.0 wheel (default: scripts/bench.py's cache)",
    )
    parser.add_argument("--db", type=Path, default=None, help="reuse (or create) this file")
    args = parser.parse_args()
    os.environ.setdefault("HERMES_HOME", tempfile.mkdtemp(prefix="hermes_home_"))
    path = args.db or Path(tempfile.mkdtemp(prefix="bench_cjk_")) / "state.db"
    if not path.exists():
        started = time.perf_counter()
        fill(path, args.messages)
        print(f"filled {args.messages} messages in {time.perf_counter() - started:.1f} s "
              f"({path.stat().st_size / 1e6:.0f} MB) at {path}")  # fmt: skip

    from sessionstore import SessionDB

    hermes = load_hermes(args.hermes or _bench_cache_hermes()).SessionDB(db_path=path)
    ours = SessionDB(path)
    print(f"{'query':<10} {'kind':<8} {'hits':>5} {'hermes ms':>10} {'ours ms':>9} {'ratio':>7}")
    try:
        for kind, query in QUERIES:
            hermes_ids = [hit["id"] for hit in hermes.search_messages(query)]
            our_ids = [hit["id"] for hit in ours.search_messages(query)]
            same = "" if hermes_ids == our_ids else "  (hit sets differ)"
            base: list[float] = []
            mine: list[float] = []
            for _ in range(args.reps):  # interleaved: the same machine state for both
                base += median_seconds(lambda q=query: hermes.search_messages(q), 1)
                mine += median_seconds(lambda q=query: ours.search_messages(q), 1)
            b, m = statistics.median(base), statistics.median(mine)
            print(f"{query:<10} {kind:<8} {len(our_ids):>5} {b * 1e3:>10.2f} {m * 1e3:>9.2f} "
                  f"{m / b:>7.3f}{same}")  # fmt: skip
    finally:
        hermes.close()
        ours.close()


if __name__ == "__main__":
    main()
