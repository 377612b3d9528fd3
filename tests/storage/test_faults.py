"""Nothing lost, never stuck: the store under lock storms, SIGKILL, interrupted upgrades, a full
disk and hostile input (SPEC §3, §4, §7).

Every worker is a separate interpreter, so locks, crashes and recovery are the operating
system's. The verdicts come from the database file itself (`faultlib.check_store`): each call a
worker saw return must be stored with the ids it was given, no batch may be stored in part, no
row may appear twice or from nowhere, and the session counters must equal the rows.
`scripts/stress.py` runs the long versions of the same scenarios.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import closing, suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from faultlib import (
    StormConfig,
    WorkerLog,
    build_large_legacy_store,
    check_store,
    content_fingerprint,
    message_for,
    run_migration_trial,
    run_storm,
    send_go,
    sqlite_integrity_problems,
    sqlite_url,
    start_child,
    upgrade_server,
    wait_ready,
    worker_server,
)
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from prefork import ForkServer
from sqlalchemy import event
from store_library import connect_like_the_store
from tiny_tmpfs import tiny_tmpfs

from sessionstore.api.session_db import SessionDB
from sessionstore.errors import SessionStoreError, StoreFullError
from sessionstore.search.long_text_snippets import LONG_MESSAGE_CHARS
from sessionstore.search.postgresql import TERM_KEY_CHARS
from sessionstore.search.postgresql_ddl import INDEXED_CHARS
from sessionstore.search.sanitize import MAX_FTS5_QUERY_CHARS, MAX_TSQUERY_TEXT_BYTES
from sessionstore.search.sqlite import LIKE_PATTERN_LIMIT_BYTES
from sessionstore.search.sqlite_ddl import TOOL_PREFIX_CHARS
from sessionstore.sessions.titles import sanitize_title
from sessionstore.sql.validation import replace_lone_surrogates
from sessionstore.storage.retry import RetryPolicy

CLEAR_ERRORS = (TypeError, ValueError, SessionStoreError)


# --- 0. the checker itself -------------------------------------------------------------------


def _logged_calls(db: SessionDB, session: str, calls: int) -> WorkerLog:
    """Write `calls` tagged calls the way an appender does, and the log it would keep."""
    records = []
    for seq in range(calls):
        tag = f"check.w0.0.{seq}"
        count = 3 if seq % 2 else 1
        ids = db.append_messages(session, [message_for(tag, n, count) for n in range(count)])
        records.append({"tag": tag, "seq": seq, "session": session, "ids": ids, "count": count})
    return WorkerLog("check.w0.0", records)


DAMAGE = [
    ("lost", "DELETE FROM messages WHERE content LIKE 'check.w0.0.0#%'"),
    ("corrupt", "DELETE FROM messages WHERE content LIKE 'check.w0.0.1#1/%'"),
    ("corrupt", "UPDATE messages SET content = content || '!' WHERE content LIKE 'check.w0.0.2#%'"),
    ("duplicated", "INSERT INTO messages (session_id, role, content, tool_calls, timestamp) "
                   "SELECT session_id, role, content, tool_calls, timestamp FROM messages "
                   "WHERE content LIKE 'check.w0.0.3#0/%'"),
    ("phantom", "INSERT INTO messages (session_id, role, content, timestamp) "
                "VALUES ('check', 'user', 'check.w9.0.0#0/1 from nowhere', 0)"),
    ("counter_mismatches", "UPDATE sessions SET message_count = message_count + 1"),
    ("integrity", "DROP TRIGGER messages_fts_insert; INSERT INTO messages (session_id, role, "
                  "content, timestamp) VALUES ('other', 'user', 'unindexed', 0)"),
]  # fmt: skip


@pytest.mark.parametrize(("kind", "damage"), DAMAGE, ids=[kind for kind, _ in DAMAGE])
def test_the_checker_sees_every_kind_of_damage(tmp_path: Path, kind: str, damage: str) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("check", "faults")
        db.create_session("other", "faults")
        log = _logged_calls(db, "check", calls=6)
    assert check_store(sqlite_url(path), [log], sessions=["check"]).ok
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.executescript(damage)
    verdict = check_store(sqlite_url(path), [log], sessions=["check"])
    assert getattr(verdict, kind), verdict.problems
    assert not verdict.ok


# --- 1. lock storm ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sqlite_workers() -> Iterator[ForkServer | None]:
    """Forks the workers of the lock storm and the SIGKILL test on SQLite from one process that
    imported their modules (`faultlib.worker_server`): separate processes all the same, killed
    by the kernel. One for the module: the server keeps no store open and nothing of one
    request for the next, and each of its start-ups was an interpreter importing SQLAlchemy
    and sessionstore again (0.4 CPU s), once per storm attempt and once for the SIGKILL test."""
    with worker_server(postgresql=False) as server:
        yield server


@pytest.mark.slow
def test_lock_storm_loses_nothing_and_no_lock_error_reaches_a_caller(
    tmp_path: Path, sqlite_workers: ForkServer | None
) -> None:
    """8 writers, 2 readers, and a foreign write transaction held for 1 s in the middle."""
    # The hold is twice the writers' busy timeout (0.5 s: SQLite's own wait gives up, and the
    # store's retry must carry the call), with writing before and after it; the writers'
    # CPU is the run's length (8 s with a 3 s hold at 2.5 s, then 5 s with 2 s at 1.5 s
    # against a busy timeout of 1 s, proved no more: the same scenario at half the scale).
    config = StormConfig(
        url=sqlite_url(tmp_path / "state.db"),
        work_dir=tmp_path,
        writers=8,
        readers=2,
        seconds=2.5,
        hold_at_s=0.75,
        hold_s=1.0,
        busy_timeout_s=0.5,
        # The budget covers the stall with room to spare: no caller may see a lock error.
        budget_s=20.0,
        max_attempts=1000,
        # Readers at a dashboard's pace, 100 reads a second at most: back to back, the two
        # were busy processes for the whole run and most of the test's CPU (2.1 of 3.9 CPU s
        # at load 8, ~5,500 reads; 9.9 for the test on a quieter machine), for a proof that
        # needs reads during the hold and none failing (155-172 during it, load 10).
        read_pause_s=0.01,
    )
    # The foreign holder waits for the lock in SQLite's busy handler, which polls; eight
    # writers appending back to back hand the lock to one another through the writers' queue
    # and can keep it from the poller until they stop (then the stall never hit a writer). The
    # guarantees are checked on every run; the scenario is run again when the hold came too late.
    for attempt in range(1, 4):
        result = run_storm(config, server=sqlite_workers)
        print("\n" + result.summary())
        assert not result.crashed, result.crashed
        assert result.append_errors == [], result.append_errors[:5]
        assert result.verdict.ok, result.verdict.problems
        assert result.verdict.rows == result.verdict.messages_ok
        assert result.read_errors == [], result.read_errors[:5]
        [(held_from, _)] = result.holds
        if held_from < result.last_append_at:
            break
        work_dir = tmp_path / f"attempt-{attempt + 1}"
        work_dir.mkdir()
        config = replace(config, url=sqlite_url(work_dir / "state.db"), work_dir=work_dir)
    # The scenario really happened: the lock was held for the whole stall, writers waited
    # through it, readers kept reading during it (WAL), and writing resumed afterwards.
    [(held_from, held_to)] = result.holds
    assert held_to - held_from >= config.hold_s
    assert max(result.latencies) >= config.hold_s / 2
    assert result.reads_during_holds > 0
    assert result.last_append_at > held_to
    # Writes were made, as many as the machine allowed: a count tied to the run's 8 s is a
    # speed, and at load 12 (writer start-ups of 0.7 CPU s each) a run made 30 (was `> 80`).
    assert result.verdict.calls_ok >= config.writers


# --- 2. SIGKILL mid-append ---------------------------------------------------------------------

KILL_TRIALS = 8
KILL_WRITERS = 2
# A kill lands at a random moment of a writer's append cycle (a call is a few ms): 0.35 s of
# writing holds dozens of cycles, as 1 s did, and the 16 kills are what is drawn. The writers'
# CPU is the time they run (a 1 s bound: ~270 messages a trial, 7.4 CPU s for the test).
KILL_AFTER_MAX_S = 0.35


@pytest.mark.slow
def test_sigkill_at_random_moments_loses_and_half_writes_nothing(
    tmp_path: Path, sqlite_workers: ForkServer | None
) -> None:
    url = sqlite_url(tmp_path / "state.db")
    sessions = ["kill-a", "kill-b", "kill-c"]
    with SessionDB(url=url) as db:
        for session in sessions:
            db.create_session(session, "faults")
        db.create_session("after-kill", "faults")
    rng = random.Random(9)
    logs: list[WorkerLog] = []
    for trial in range(KILL_TRIALS):
        children = [
            start_child(
                "appender",
                {
                    "url": url, "run": "kill", "worker": worker, "incarnation": trial,
                    "sessions": sessions, "batch_max": 12, "run_s": 60, "durable_log": True,
                },
                log_path=tmp_path / "logs" / f"w{worker}.{trial}.jsonl",
                worker=worker,
                incarnation=trial,
                server=sqlite_workers,
            )
            for worker in range(KILL_WRITERS)
        ]  # fmt: skip
        try:
            wait_ready(children)
            start = send_go(children)
            for child, delay in sorted(
                ((child, rng.uniform(0.02, KILL_AFTER_MAX_S)) for child in children),
                key=lambda pair: pair[1],
            ):
                time.sleep(max(start + delay - time.time(), 0.0))
                child.kill()
        finally:
            for child in children:
                child.kill()
                child.close_pipes()
        assert all(child.killed for child in children), [c.stderr_tail() for c in children]
        logs += [WorkerLog.of(c, f"kill.w{c.worker}.{c.incarnation}") for c in children]

        verdict = check_store(url, logs, sessions=sessions)
        assert verdict.ok, f"trial {trial}: {verdict.problems}"
        # Never stuck: the dead writers' locks died with them, a new writer gets in at once.
        began = time.monotonic()
        with SessionDB(url=url, retry=RetryPolicy(budget_s=2.0)) as db:
            db.append_messages("after-kill", [{"role": "user", "content": f"after trial {trial}"}])
            assert db.message_count("after-kill") == trial + 1
        assert time.monotonic() - began < 2.0

    verdict = check_store(url, logs, sessions=sessions)
    print(
        f"\n{KILL_TRIALS * KILL_WRITERS} SIGKILLs: {verdict.calls_ok} calls / "
        f"{verdict.messages_ok} messages returned and all stored, "
        f"{verdict.in_flight_committed} calls in flight at a kill found committed whole, "
        "the other in-flight calls left nothing behind"
    )
    assert verdict.calls_ok >= KILL_TRIALS  # the workers did real work before dying
    assert sqlite_integrity_problems(tmp_path / "state.db") == []


# --- 3. an upgrade killed part-way -------------------------------------------------------------

# Enough rows that the chain's one transaction outgrows SQLite's page cache and spills pages
# before it commits. In WAL mode the kill lands 0-80 ms after the WAL grows (it then holds 1-2
# MB of uncommitted frames). With a rollback journal SQLite journals original pages first and
# writes the main file only when its cache spills, so there the kill waits until the main file
# changed while a journal of 64 kB or more is there, then lands 0-30 ms later; a trial counts
# only if, read back once the upgrade is dead, the main file differs from the file before and
# its hot journal holds pages the main file lost (`faultlib.read_hot_journal`): the next
# upgrade must roll it back. At 10,000 rows it always did: rollback-journal-alembic leaves 166
# journaled pages, 160 overwritten; the FTS rebuild 2 (schema_version's page among them) and a
# file grown from 624 to ~2,470 pages. Deleting the journal before the rerun fails both
# (a malformed file; schema_version 30 on a v1 shape), 3 of 3 runs each.
# Each trial's second, complete upgrade and its checks (integrity, FTS integrity, a
# fingerprint of every row) scale with the rows: ~3.0 CPU s a trial at 50,000, ~1.0 at 10,000.
LEGACY_MESSAGES = 10_000
MIGRATION_ATTEMPTS = 6


@pytest.fixture(scope="module")
def upgrades() -> Iterator[ForkServer | None]:
    """The upgrades' programs, forked from one that imported Alembic and sessionstore once
    (`faultlib.upgrade_server`): programs of their own, killed by the kernel."""
    with upgrade_server() as server:
        yield server


@pytest.mark.slow
@pytest.mark.parametrize(
    ("journal_mode", "variant", "runner"),
    [
        # A rollback journal: the kill leaves a hot journal that the next opener must roll back
        # (the main file already half-written by the upgrade's transaction).
        pytest.param("delete", None, "alembic", id="rollback-journal-alembic"),
        # No FTS table: the upgrade builds and fills it from 10k messages, spilling pages.
        pytest.param("delete", "no_fts", "python", id="rollback-journal-fts-rebuild-python"),
        pytest.param("wal", "no_fts", "alembic", id="wal-fts-rebuild-alembic"),
    ],
)
def test_upgrade_killed_part_way_is_completed_by_the_next_upgrade(
    tmp_path: Path, journal_mode: str, variant: str | None, runner: str,
    upgrades: ForkServer | None,
) -> None:  # fmt: skip
    template = tmp_path / "legacy_v1.db"
    build_large_legacy_store(
        template, messages=LEGACY_MESSAGES, variant=variant, journal_mode=journal_mode
    )
    before = content_fingerprint(template)
    assert before.messages > LEGACY_MESSAGES
    rng = random.Random(f"{journal_mode}-{variant}-{runner}")
    trials = []
    # Each attempt is checked in full; attempts repeat until one kill provably landed inside
    # the upgrade's transaction (the process was writing, and the next upgrade had to redo it;
    # with a rollback journal, also to roll back the main file first).
    for attempt in range(MIGRATION_ATTEMPTS):
        trial = run_migration_trial(
            template, before, tmp_path / f"attempt{attempt}", runner, rng, upgrades
        )
        assert trial.problems == [], (trial.interrupted, trial.problems)
        trials.append(trial)
        if trial.killed_mid_transaction:
            break
    print(f"\n{[(t.interrupted, t.rerun_did_work) for t in trials]}")
    assert any(trial.killed_mid_transaction for trial in trials), [t.interrupted for t in trials]


# --- 4. a full disk ---------------------------------------------------------------------------


def _fill_until_full(db: SessionDB, session: str, limit: int = 5000) -> StoreFullError:
    for number in range(limit):
        try:
            db.append_message(session, "user", f"filler {number} " + "x" * 3000)
        except StoreFullError as exc:
            return exc
    raise AssertionError(f"{limit} appends and the store never filled up")


def _assert_full_store_behaves(db: SessionDB, path: Path, free_space: Callable[[], None]) -> None:
    db.create_session("kept", "faults")
    kept_ids = db.append_messages(
        "kept", [{"role": "user", "content": f"kept {n} 数据库"} for n in range(20)]
    )
    kept = db.export_session("kept")
    db.create_session("filler", "faults")

    error = _fill_until_full(db, "filler")
    assert "full" in str(error)
    count_when_full = db.message_count()
    # A batch that cannot fit is refused whole, and so is every other write.
    with pytest.raises(StoreFullError):
        db.append_messages("filler", [{"role": "user", "content": "y" * 4000}] * 20)
    with pytest.raises(StoreFullError):
        db.create_session("x" * 200_000, "faults")
    assert db.message_count() == count_when_full
    # Earlier data stays readable and consistent.
    assert db.export_session("kept") == kept
    assert [m["id"] for m in db.get_messages("kept")] == kept_ids
    assert db.get_session("filler")["message_count"] == db.message_count("filler")
    assert sqlite_integrity_problems(path) == []

    free_space()
    resumed = db.append_messages("kept", [{"role": "user", "content": "after space was freed"}])
    assert db.get_messages("kept")[-1]["id"] == resumed[0]
    assert db.get_session("kept")["message_count"] == 21
    db.close()
    assert sqlite_integrity_problems(path) == []


def test_page_limit_full_store_refuses_writes_clearly_and_resumes(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    db = SessionDB(path)
    limit: dict[str, int | None] = {"pages": None}

    @event.listens_for(db.store.engine, "connect")
    def _cap_pages(dbapi_connection: sqlite3.Connection, _record: Any) -> None:
        if limit["pages"] is not None:
            dbapi_connection.execute(f"PRAGMA max_page_count = {limit['pages']}")

    def set_limit(pages: int) -> None:
        limit["pages"] = pages
        db.store.engine.dispose()  # pooled connections carry the old limit
        # ... and so does the connection the store keeps for its writes (outside the pool):
        # a real disk has no per-connection limit, so every connection must see the new one.
        db.store.write(lambda conn: conn.exec_driver_sql(f"PRAGMA max_page_count = {pages}"))

    with closing(connect_like_the_store(path)) as conn:
        pages_now = conn.execute("PRAGMA page_count").fetchone()[0]
    set_limit(pages_now + 60)
    _assert_full_store_behaves(db, path, free_space=lambda: set_limit(1_000_000))


@pytest.mark.slow
def test_full_filesystem_refuses_writes_clearly_and_resumes(tmp_path: Path) -> None:
    with tiny_tmpfs(tmp_path / "tiny", "4m") as mount:
        path = mount / "state.db"
        db = SessionDB(path)
        try:
            filler = mount / "filler"
            stats = os.statvfs(mount)
            # Leave room for the first rows and little more: the WAL grows into the rest.
            filler.write_bytes(b"\0" * (stats.f_bavail * stats.f_frsize - 400_000))
            _assert_full_store_behaves(db, path, free_space=filler.unlink)
        finally:
            db.close()


# --- 5. hostile input to every write method ---------------------------------------------------

HOSTILE_PIECES = (
    "\x00", "\ud800", "\udfff", "\udc80\ud800", "'; DROP TABLE sessions; --", '" OR 1=1 --',
    "%", "_", "\\", "%_\\%", "*", '"', "NEAR(", " AND ", " OR ", "NOT ", "^", "{", "}", "(",
    ")", ":", "-", "col:", "\u202e", "\u2066", "\u200b", "\ufeff", "\r\n", "\t", "\x1b[31m",
    "\x7f", "\x01", '{"tool_calls": [', "[1, 2", "null", "NaN", "💥", "数据库", "\U0010ffff",
    " #2", "title #3",
)  # fmt: skip
# How huge "huge text" must be (SPEC §7): past every size that a write or lookup here treats
# differently, no more. The largest is PostgreSQL's cap on a tsvector, 1 MiB (MAXSTRPOS,
# 2**20 - 1 bytes: what the word index's left() guards); the product's own cuts are all
# smaller, in characters (`SIZE_CUTS`). 10 MB values crossed no further limit (SQLite's and
# PostgreSQL's own are ~1 GB) and cost ~10 times as much: each content slot indexed 10 MB of
# CJK (FTS5 on SQLite ~2 CPU s, `sessionstore_cjk_grams` ~4 server CPU s on PostgreSQL).
PG_TSVECTOR_MAX_BYTES = 2**20 - 1
HUGE_BYTES = PG_TSVECTOR_MAX_BYTES + 2**16
SIZE_CUTS = {
    "INDEXED_CHARS": INDEXED_CHARS,  # PostgreSQL's word index reads this much of a text
    "LIKE_PATTERN_LIMIT_BYTES": LIKE_PATTERN_LIMIT_BYTES,  # SQLite's LIKE, else instr()
    "LONG_MESSAGE_CHARS": LONG_MESSAGE_CHARS,  # snippets of long messages
    "TOOL_PREFIX_CHARS": TOOL_PREFIX_CHARS,  # a tool row's indexed prefix (SQLite)
    "MAX_TSQUERY_TEXT_BYTES": MAX_TSQUERY_TEXT_BYTES,
    "MAX_FTS5_QUERY_CHARS": MAX_FTS5_QUERY_CHARS,
    "TERM_KEY_CHARS": TERM_KEY_CHARS,  # a long substring term looked up by its first grams
    "MAX_TITLE_LENGTH": SessionDB.MAX_TITLE_LENGTH,
}


def _odd_values() -> list[Any]:
    return [
        pytest.param("ab" * (HUGE_BYTES // 2), id="huge-ascii"),
        # 13 UTF-8 bytes per repetition: past 1 MiB of multi-byte text.
        pytest.param("数据库🚀" * (HUGE_BYTES // 13), id="huge-cjk-emoji"),
        pytest.param("a\x00b\x00", id="nul"),
        pytest.param("lone \ud800 high \udfff low", id="lone-surrogates"),
        pytest.param("".join(HOSTILE_PIECES), id="all-hostile-pieces"),
        pytest.param("", id="empty"),
    ]


@pytest.fixture(scope="module")
def odd_values() -> tuple[Any, ...]:
    """`_odd_values`, made once for the module's 120 odd-value tests (strings are immutable):
    each test made its own of them again, and SQLite's binding encoded the huge CJK text to
    UTF-8 anew (CPython keeps a string's UTF-8 once made). The huge ones are checked past every
    cut (`HUGE_BYTES`): a cut raised past them makes them huge again here, not smaller."""
    values = tuple(_odd_values())
    for param in values[:2]:
        [text] = param.values
        assert len(text.encode()) > PG_TSVECTOR_MAX_BYTES, param.id
        short = {name: cut for name, cut in SIZE_CUTS.items() if len(text) <= cut}
        assert not short, f"{param.id} ({len(text)} characters) is not past {short}"
    return values


hostile_text = st.one_of(
    st.text(max_size=20),
    st.text(st.characters(exclude_categories=()), max_size=10),  # surrogates and all
    st.lists(
        st.one_of(st.sampled_from(HOSTILE_PIECES), st.text(max_size=3)), max_size=6
    ).map("".join),
)
wrong_types = st.one_of(
    st.none(),
    st.integers(),
    st.floats(allow_nan=False),
    st.binary(max_size=8),
    st.lists(st.integers(), max_size=2),
    st.builds(object),
)


@dataclass(frozen=True)
class WriteSlot:
    """One text argument of one write method: how to call it, and how to read it back."""

    name: str
    call: Callable[[SessionDB, str, Any], Any]
    read_back: Callable[[SessionDB, str, Any], Any] | None = None
    # "id": stored as is (a lone surrogate refused); "name": lone surrogates -> U+FFFD; "free":
    # that, and NUL -> U+FFFD on PostgreSQL; "title": sanitize_title; "json": inside a JSON
    # value, as JSON gives it back (a lone surrogate escaped; a high one followed by a low one
    # read back as the character the pair encodes, as Hermes's json.dumps escapes read too).
    kind: str = "id"


def _new(victim: str) -> str:
    return f"{victim}-new"


def _last_message(db: SessionDB, victim: str) -> dict[str, Any]:
    return db.get_messages(victim)[-1]


def _append(field: str, **extra: Any) -> Callable[[SessionDB, str, Any], Any]:
    def call(db: SessionDB, victim: str, value: Any) -> Any:
        arguments: dict[str, Any] = {"role": "assistant", "content": "benign", **extra}
        arguments[field] = value
        return db.append_message(victim, **arguments)

    return call


WRITE_SLOTS = [
    WriteSlot("create_session.session_id", lambda db, v, x: db.create_session(x, "cli"),
              lambda db, v, x: db.get_session(x)["id"]),
    WriteSlot("create_session.source", lambda db, v, x: db.create_session(_new(v), x),
              lambda db, v, x: db.get_session(_new(v))["source"]),
    WriteSlot("create_session.model", lambda db, v, x: db.create_session(_new(v), "cli", model=x),
              lambda db, v, x: db.get_session(_new(v))["model"]),
    WriteSlot("create_session.user_id",
              lambda db, v, x: db.create_session(_new(v), "cli", user_id=x),
              lambda db, v, x: db.get_session(_new(v))["user_id"]),
    WriteSlot("create_session.system_prompt",
              lambda db, v, x: db.create_session(_new(v), "cli", system_prompt=x),
              lambda db, v, x: db.get_session(_new(v))["system_prompt"], "free"),
    WriteSlot("create_session.model_config",
              lambda db, v, x: db.create_session(_new(v), "cli", model_config={"k": x}),
              lambda db, v, x: json.loads(db.get_session(_new(v))["model_config"])["k"], "json"),
    WriteSlot("create_session.parent_session_id",
              lambda db, v, x: db.create_session(_new(v), "cli", parent_session_id=x)),
    WriteSlot("ensure_session.session_id", lambda db, v, x: db.ensure_session(x),
              lambda db, v, x: db.get_session(x)["id"]),
    WriteSlot("ensure_session.source", lambda db, v, x: db.ensure_session(_new(v), x),
              lambda db, v, x: db.get_session(_new(v))["source"]),
    WriteSlot("end_session.session_id", lambda db, v, x: db.end_session(x, "user_exit")),
    WriteSlot("end_session.end_reason", lambda db, v, x: db.end_session(v, x),
              lambda db, v, x: db.get_session(v)["end_reason"], "free"),
    WriteSlot("reopen_session.session_id", lambda db, v, x: db.reopen_session(x)),
    WriteSlot("update_system_prompt.session_id",
              lambda db, v, x: db.update_system_prompt(x, "prompt")),
    WriteSlot("update_system_prompt.system_prompt",
              lambda db, v, x: db.update_system_prompt(v, x),
              lambda db, v, x: db.get_session(v)["system_prompt"], "free"),
    WriteSlot("update_token_counts.session_id",
              lambda db, v, x: db.update_token_counts(x, input_tokens=5)),
    *(
        WriteSlot(f"update_token_counts.{field}",
                  lambda db, v, x, field=field: db.update_token_counts(v, **{field: x}),
                  lambda db, v, x, field=field: db.get_session(v)[field])
        for field in ("cost_status", "cost_source", "pricing_version")
    ),
    # The model and billing route are taken only with accounted usage (a token, an API
    # call or a cost: Hermes 0.19.0's update_token_counts), so these calls carry a token.
    *(
        WriteSlot(f"update_token_counts.{field}",
                  lambda db, v, x, field=field: db.update_token_counts(
                      v, input_tokens=1, **{field: x}),
                  lambda db, v, x, field=field: db.get_session(v)[field])
        for field in ("model", "billing_provider", "billing_base_url", "billing_mode")
    ),
    WriteSlot("set_session_title.session_id", lambda db, v, x: db.set_session_title(x, "t")),
    WriteSlot("set_session_title.title", lambda db, v, x: db.set_session_title(v, x),
              lambda db, v, x: db.get_session_title(v), "title"),
    WriteSlot("append_message.session_id", lambda db, v, x: db.append_message(x, "user", "hi")),
    WriteSlot("append_message.role", _append("role"),
              lambda db, v, x: _last_message(db, v)["role"]),
    *(
        WriteSlot(f"append_message.{field}", _append(field),
                  lambda db, v, x, field=field: _last_message(db, v)[field], kind)
        for field, kind in (("content", "free"), ("tool_name", "name"), ("tool_call_id", "id"),
                            ("finish_reason", "id"), ("reasoning", "free"))
    ),
    WriteSlot("append_message.tool_calls", _append("tool_calls"),
              lambda db, v, x: _last_message(db, v)["tool_calls"], "json"),
    *(
        WriteSlot(f"append_message.{field}", _append(field),
                  lambda db, v, x, field=field: json.loads(_last_message(db, v)[field]), "json")
        for field in ("reasoning_details", "codex_reasoning_items")
    ),
    WriteSlot("append_messages.content",
              lambda db, v, x: db.append_messages(
                  v, [{"role": "user", "content": "first"}, {"role": "user", "content": x}]),
              lambda db, v, x: _last_message(db, v)["content"], "free"),
    WriteSlot("append_messages.role",
              lambda db, v, x: db.append_messages(
                  v, [{"role": "user", "content": "first"}, {"role": x, "content": "c"}]),
              lambda db, v, x: _last_message(db, v)["role"]),
    WriteSlot("clear_messages.session_id", lambda db, v, x: db.clear_messages(x)),
    WriteSlot("delete_session.session_id", lambda db, v, x: db.delete_session(x)),
    WriteSlot("prune_sessions.source", lambda db, v, x: db.prune_sessions(0, source=x)),
]  # fmt: skip
SLOTS_BY_NAME = {slot.name: slot for slot in WRITE_SLOTS}
JSON_WRAPPED_SLOTS = {
    "append_message.tool_calls": lambda x: [{"id": x}],
    "append_message.reasoning_details": lambda x: {"detail": x},
    "append_message.codex_reasoning_items": lambda x: [{"item": x}],
}

BYSTANDER = "bystander-Ω"


def _seed_bystander(db: SessionDB) -> None:
    db.create_session(BYSTANDER, "cli", model="m", system_prompt="keep me", model_config={"a": 1})
    db.set_session_title(BYSTANDER, "bystander title")
    db.append_messages(
        BYSTANDER,
        [
            {"role": "user", "content": "hello 100% _done_ \\ 数据库"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "fn"}]},
            {"role": "tool", "content": "x" * 5000, "tool_call_id": "c1"},
        ],
    )
    db.update_token_counts(BYSTANDER, input_tokens=7, output_tokens=3, estimated_cost_usd=0.5)


def _bystander_state(db: SessionDB) -> Any:
    return db.export_session(BYSTANDER), db.get_session_title(BYSTANDER)


def _expected_stored(slot: WriteSlot, value: str, nul_allowed: bool) -> Any:
    if slot.kind == "title":
        return sanitize_title(value)
    if slot.kind == "json":
        return json.loads(json.dumps(value))
    if slot.kind in ("free", "name"):
        value = replace_lone_surrogates(value)
    if slot.kind == "free" and not nul_allowed:
        return value.replace("\x00", "\ufffd")
    return value


class HostileCheck:
    """Call a write slot with a value; enforce the contract of SPEC §7."""

    def __init__(self, db: SessionDB) -> None:
        self.db = db
        self.nul_allowed = db.store.dialect.stores_nul_in_text
        self.victims = 0
        self.bystander = _bystander_state(db)

    def __call__(self, slot: WriteSlot, value: Any) -> str:
        self.victims += 1
        victim = f"victim-{self.victims}"
        self.db.create_session(victim, "victims")
        argument = JSON_WRAPPED_SLOTS.get(slot.name, lambda x: x)(value)
        messages_before = self.db.message_count(victim)
        try:
            slot.call(self.db, victim, argument)
        except CLEAR_ERRORS as exc:
            outcome = f"refused: {type(exc).__name__}"
            assert str(exc), f"{slot.name}: {type(exc).__name__} without a message"
            # A refused batch or message leaves nothing behind.
            assert self.db.message_count(victim) == messages_before, slot.name
        else:
            outcome = "stored"
            if slot.read_back is not None and isinstance(value, str):
                stored = slot.read_back(self.db, victim, value)
                expected = JSON_WRAPPED_SLOTS.get(slot.name, lambda x: x)(
                    _expected_stored(slot, value, self.nul_allowed)
                )
                assert stored == expected, f"{slot.name}: stored {str(stored)[:80]!r}"
        assert _bystander_state(self.db) == self.bystander, f"{slot.name} changed the bystander"
        return outcome


@pytest.fixture
def hostile_check(store_url: str) -> Iterator[HostileCheck]:
    db = SessionDB(url=store_url)
    _seed_bystander(db)
    yield HostileCheck(db)
    db.close()


@pytest.mark.slow
@given(
    slot_name=st.sampled_from(sorted(SLOTS_BY_NAME)),
    value=st.one_of(hostile_text, wrong_types),
)
@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_write_methods_answer_hostile_values_clearly(
    hostile_check: HostileCheck, slot_name: str, value: Any
) -> None:
    assume(value != BYSTANDER)
    hostile_check(SLOTS_BY_NAME[slot_name], value)


@pytest.mark.slow
@pytest.mark.parametrize("slot", WRITE_SLOTS, ids=lambda slot: slot.name)
def test_write_methods_answer_odd_values_clearly(
    hostile_check: HostileCheck, slot: WriteSlot, odd_values: tuple[Any, ...]
) -> None:
    """Huge text, NUL, lone surrogates, every hostile piece at once, and nothing at all."""
    outcomes = {}
    failures = []
    for param in odd_values:
        [value] = param.values
        try:
            outcomes[param.id] = hostile_check(slot, value)
        except AssertionError as exc:
            failures.append(f"{param.id}: {exc}")
        except Exception as exc:
            failures.append(f"{param.id}: unclear {type(exc).__module__}.{type(exc).__name__}: "
                            f"{str(exc)[:200]}")  # fmt: skip
    assert failures == [], failures
    print(f"\n{slot.name}: {outcomes}")


READ_CALLS: list[tuple[str, Callable[[SessionDB, Any], Any]]] = [
    ("get_session", lambda db, x: db.get_session(x)),
    ("resolve_session_id", lambda db, x: db.resolve_session_id(x)),
    ("get_session_title", lambda db, x: db.get_session_title(x)),
    ("get_session_by_title", lambda db, x: db.get_session_by_title(x)),
    ("resolve_session_by_title", lambda db, x: db.resolve_session_by_title(x)),
    ("get_next_title_in_lineage", lambda db, x: db.get_next_title_in_lineage(x)),
    ("get_compression_tip", lambda db, x: db.get_compression_tip(x)),
    ("list_sessions_rich.source", lambda db, x: db.list_sessions_rich(source=x)),
    ("list_sessions_rich.exclude", lambda db, x: db.list_sessions_rich(exclude_sources=[x])),
    ("get_messages", lambda db, x: db.get_messages(x)),
    ("get_messages_as_conversation", lambda db, x: db.get_messages_as_conversation(x)),
    ("search_messages.query", lambda db, x: db.search_messages(x)),
    ("search_messages.filters", lambda db, x: db.search_messages(
        "hello", source_filter=[x], exclude_sources=[x], role_filter=[x])),
    ("search_sessions", lambda db, x: db.search_sessions(x)),
    ("session_count", lambda db, x: db.session_count(x)),
    ("message_count", lambda db, x: db.message_count(x)),
    ("export_session", lambda db, x: db.export_session(x)),
    ("export_all", lambda db, x: db.export_all(x)),
    ("sanitize_title", lambda db, x: db.sanitize_title(x)),
    ("sanitize_fts5_query", lambda db, x: db.sanitize_fts5_query(x)),
    ("contains_cjk", lambda db, x: db.contains_cjk(x)),
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(("name", "read"), READ_CALLS, ids=[name for name, _ in READ_CALLS])
def test_lookups_answer_odd_values_clearly(
    hostile_check: HostileCheck, name: str, read: Callable[[SessionDB, Any], Any],
    odd_values: tuple[Any, ...],
) -> None:  # fmt: skip
    """The odd values against every lookup: an answer or a clear error, and no change."""
    failures = []
    for param in odd_values:
        [value] = param.values
        try:
            read(hostile_check.db, value)
        except CLEAR_ERRORS as exc:
            if not str(exc):
                failures.append(f"{param.id}: {type(exc).__name__} without a message")
        except Exception as exc:
            failures.append(f"{param.id}: unclear {type(exc).__module__}.{type(exc).__name__}: "
                            f"{str(exc)[:200]}")  # fmt: skip
        if _bystander_state(hostile_check.db) != hostile_check.bystander:
            failures.append(f"{param.id}: the bystander changed")
    assert failures == [], failures


def test_prune_sessions_answers_a_bad_source_clearly(store_url: str) -> None:
    with SessionDB(url=store_url) as db:
        for bad_source in (object(), [1], b"cli", 5):
            with suppress(*CLEAR_ERRORS):
                assert db.prune_sessions(0, source=bad_source) == 0
