"""``db doctor`` beside a real concurrent writer process (issue 10, item 2).

- ``repair`` counts and writes counters in one write transaction: appends that land between
  ``diagnose`` and ``repair`` (the CLI takes a backup there) are counted, not overwritten by
  the stale numbers ``diagnose`` saw (before: message_count=1495 over 1,515 rows);
- lock contention is never reported as full-text damage, so ``--fix`` never rebuilds a
  healthy index because a writer was busy (before: "database is locked" read as damage).
"""

from __future__ import annotations

import json
import multiprocessing
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from store_library import engine_like_the_store

from sessionstore import Store
from sessionstore.api.session_db import SessionDB
from sessionstore.ops import doctor


def keep_appending(url: str, session_id: str, acknowledged: Any, stop: Any) -> None:
    """The concurrent writer: appends until told to stop, counting acknowledged appends."""
    with SessionDB(url=url) as db:
        while not stop.is_set():
            db.append_messages(session_id, [{"role": "user", "content": "load"},
                                            {"role": "assistant", "content": "more load",
                                             "tool_calls": [{"id": "c", "type": "function"}]}])
            with acknowledged.get_lock():
                acknowledged.value += 2


class Writer:
    def __init__(self, url: str, session_id: str) -> None:
        context = multiprocessing.get_context("spawn")
        self.acknowledged = context.Value("i", 0)
        self.stop = context.Event()
        self.process = context.Process(
            target=keep_appending, args=(url, session_id, self.acknowledged, self.stop)
        )

    def __enter__(self) -> Writer:
        self.process.start()
        self.wait_for_more(10)
        return self

    def wait_for_more(self, appended: int, timeout: float = 60) -> None:
        target = self.acknowledged.value + appended
        deadline = time.monotonic() + timeout
        while self.acknowledged.value < target:
            assert self.process.is_alive(), "the writer died"
            assert time.monotonic() < deadline, "the writer made no progress"
            time.sleep(0.01)

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.process.join(timeout=60)
        assert self.process.exitcode == 0


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    with SessionDB(url=store_url) as db:
        db.create_session("busy", "cli")
        db.append_message("busy", "user", "first")
    with Store.open(store_url) as opened:
        yield opened


def counters_and_rows(store: Store, session_id: str) -> tuple[int, int, int]:
    with store.engine.connect() as conn:
        count, tools = conn.execute(
            sa.text("SELECT message_count, tool_call_count FROM sessions WHERE id = :id"),
            {"id": session_id},
        ).one()
        rows = conn.execute(
            sa.text("SELECT count(*) FROM messages WHERE session_id = :id"), {"id": session_id}
        ).scalar_one()
    return int(count), int(tools), int(rows)


def test_counter_repair_counts_the_appends_made_after_the_diagnosis(
    store: Store, store_url: str
) -> None:
    with store.engine.begin() as conn:
        conn.execute(sa.text("UPDATE sessions SET message_count = message_count + 100"))
    with Writer(store_url, "busy") as writer:
        report = doctor.diagnose(store)
        assert report.get("message_counts").status == "fail"  # type: ignore[union-attr]
        writer.wait_for_more(20)  # what a backup's duration lets through
        actions = doctor.repair(store, report)
        assert any("counters" in action for action in actions)
    count, tools, rows = counters_and_rows(store, "busy")
    assert count == rows and tools == (rows - 1) // 2


def test_fts_check_under_a_busy_writer_never_reports_damage_or_rebuilds(
    store: Store, store_url: str
) -> None:
    if store.dialect.name != "sqlite":
        pytest.skip("the FTS5 integrity-check is SQLite's")
    with Writer(store_url, "busy") as writer:
        for _ in range(12):
            report = doctor.diagnose(store)
            for name in ("fts_objects", "fts_parity", "fts_integrity"):
                check = report.get(name)
                assert check is not None and check.status in ("ok", "skip"), check
            assert not any("full-text" in action for action in doctor.repair(store, report))
            writer.wait_for_more(4)
    final = doctor.diagnose(store)
    assert final.get("fts_integrity").status == "ok"  # type: ignore[union-attr]


def test_busy_store_is_reported_not_checked(tmp_path: Path) -> None:
    """A foreign process keeping readers out for longer than the retry budget: a file in the
    rollback journal whose writer holds its EXCLUSIVE lock (under WAL a reader never
    waits: ``tests/ops/test_doctor_read_only.py``)."""
    plain = f"sqlite:///{tmp_path}/s.db"
    url = f"{plain}?journal_mode=delete"
    with SessionDB(url=url):
        pass
    from sessionstore.storage.retry import RetryPolicy

    holder = engine_like_the_store(plain, isolation_level="AUTOCOMMIT")
    with Store.open(url, retry=RetryPolicy(max_attempts=2, budget_s=0.5),
                    busy_timeout_s=0.05) as store, holder.connect() as conn:
        conn.exec_driver_sql("BEGIN EXCLUSIVE")
        checks = doctor._search_checks(store)
        conn.exec_driver_sql("ROLLBACK")
    holder.dispose()
    assert {check.status for check in checks} == {"skip"}
    assert all("not checked" in check.detail and check.busy for check in checks)


def test_the_command_line_says_a_store_that_kept_it_out_is_busy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another program keeps readers out through the whole doctor (a rollback-journal file
    whose writer holds its EXCLUSIVE lock): the check waits its short budget
    (``CHECK_LOCK_BUDGET_S``), then says the store is busy and to try again; once the lock
    is gone every check runs and nothing is marked busy. (Under WAL a writer's lock keeps
    nothing from running: ``tests/ops/test_doctor_read_only.py``.) The budget is cut to a
    tenth here: the lock is held through the whole doctor whatever the budget, so the test
    sat out the full 3 s for the same answer."""
    from typer.testing import CliRunner

    monkeypatch.setattr(doctor, "CHECK_LOCK_BUDGET_S", doctor.CHECK_LOCK_BUDGET_S / 10)

    from sessionstore import cli

    plain = f"sqlite:///{tmp_path}/s.db"
    url = f"{plain}?journal_mode=delete"
    with SessionDB(url=url) as db:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "hello")
    runner = CliRunner(env={"COLUMNS": "200"})
    holder = engine_like_the_store(plain, isolation_level="AUTOCOMMIT")
    with holder.connect() as conn:
        conn.exec_driver_sql("BEGIN EXCLUSIVE")
        shown = runner.invoke(cli.app, ["--url", url, "db", "doctor"])
        conn.exec_driver_sql("ROLLBACK")
    holder.dispose()
    assert shown.exit_code != 0
    assert "busy" in shown.output and "try again" in shown.output, shown.output
    after = runner.invoke(cli.app, ["--url", url, "db", "doctor", "--json"])
    assert after.exit_code == 0 and not any(c["busy"] for c in json.loads(after.stdout)["checks"])
    assert "no problems found\n" in runner.invoke(cli.app, ["--url", url, "db", "doctor"]).stdout
