"""An import in batches (``import_jsonl(..., in_batches=True)``, ``import --in-batches``): the
store's other writers go on while it runs, it writes what the all-or-nothing import writes,
a damaged file still writes nothing, and a failure part-way keeps what was committed, says
so, and is finished by the same import with ``merge``; on SQLite and PostgreSQL.

The all-or-nothing import is one transaction: on SQLite it holds every other writer off until
it ends, and a writer's budget (20 s) runs out by ~130,000 messages, its message not written.
Each test here looks at the store from another writer in the middle of the import: the
import's progress callback (called as each session's row is read, between statements) makes
that writer append and waits for its answer.
"""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from big_export import BIG_SESSION_MESSAGES
from typer.testing import CliRunner
from write_gaps import gaps_between_writes

from sessionstore import ImportIncompleteError, RetryPolicy, SessionDB, StoreBusyError, cli
from sessionstore.ops.transfer import BATCH_ROWS, ImportFormatError, export_jsonl, import_jsonl
from sessionstore.storage.write_turns import MARGIN_S

MESSAGES = BIG_SESSION_MESSAGES
pytestmark = pytest.mark.slow  # each test imports 3,000 messages, some twice or three times

QUICK = RetryPolicy(max_attempts=50, budget_s=1.0)
"""The other writer's patience: an import holding the lock outlasts it."""


def records(dump: str) -> list[str]:
    """The session, message and usage lines of an export (a store's own state keys aside)."""
    return [line for line in dump.splitlines() if line.startswith(('{"session"', '{"message"',
                                                                   '{"usage"'))]  # fmt: skip


def counters_equal_rows(db: SessionDB) -> None:
    for session in db.search_sessions(limit=100):
        assert session["message_count"] == db.message_count(session["id"]), session["id"]


class Neighbour:
    """Another writer of the store (its own ``SessionDB``), asked from the import's progress
    callback, when the import reads session ``at``'s row, to run ``act`` in a thread of its own;
    the callback waits for the answer, recorded in ``outcome``."""

    def __init__(self, url: str, at: str, act: Callable[[SessionDB], object]) -> None:
        self.db = SessionDB(url=url, retry=QUICK)
        self.at, self.act = at, act
        self.sessions_read = 0
        self.outcome: object = None

    def progress(self, _sessions: int) -> None:
        self.sessions_read += 1
        if self.sessions_read != 2:  # the second session's row: 'small'
            return

        def run() -> None:
            try:
                self.outcome = self.act(self.db)
            except BaseException as exc:  # recorded for the test to judge
                self.outcome = exc

        thread = threading.Thread(target=run)
        thread.start()
        thread.join(timeout=60)
        assert not thread.is_alive()


def test_a_writer_goes_on_while_an_import_in_batches_runs(store_url: str, big_export: str) -> None:
    with SessionDB(url=store_url) as db:
        db.create_session("live", "cli")

    def append_and_look(other: SessionDB) -> tuple[int, int]:
        return other.append_message("live", "user", "written mid-import"), other.message_count(
            "big"
        )

    neighbour = Neighbour(store_url, "small", append_and_look)
    try:
        with SessionDB(url=store_url) as db:
            result = import_jsonl(
                db.store, io.StringIO(big_export), progress=neighbour.progress, in_batches=True
            )
            assert not isinstance(neighbour.outcome, BaseException), neighbour.outcome
            assert isinstance(neighbour.outcome, tuple)
            message_id, big_seen = neighbour.outcome
            # the batches before 'small' were committed and seen by the other writer
            assert 2000 <= big_seen < MESSAGES
            assert (result.sessions, result.messages) == (2, MESSAGES + 1)
            assert db.get_messages("live")[-1]["id"] == message_id
            assert db.message_count("big") == MESSAGES and db.message_count("small") == 1
            counters_equal_rows(db)
    finally:
        neighbour.db.close()


def test_the_all_or_nothing_import_holds_a_sqlite_writer_off(
    migrated_sqlite_url: str, big_export: str
) -> None:
    """Why the batches exist: the same writer, the same moment, without them. Its call ends
    typed within its budget and its message is not in the store."""
    with SessionDB(url=migrated_sqlite_url) as db:
        db.create_session("live", "cli")
    neighbour = Neighbour(
        migrated_sqlite_url, "small",
        lambda other: other.append_message("live", "user", "written mid-import"),
    )  # fmt: skip
    try:
        with SessionDB(url=migrated_sqlite_url) as db:
            import_jsonl(db.store, io.StringIO(big_export), progress=neighbour.progress)
            assert isinstance(neighbour.outcome, StoreBusyError), neighbour.outcome
            assert db.message_count("live") == 0
            assert db.message_count("big") == MESSAGES
    finally:
        neighbour.db.close()


def test_in_batches_writes_what_the_whole_import_writes(store_url: str, big_export: str) -> None:
    with SessionDB(url=store_url) as db:
        result = import_jsonl(
            db.store, io.StringIO(big_export), on_conflict="fail", in_batches=True
        )
        assert (result.sessions, result.messages, result.skipped_sessions) == (2, MESSAGES + 1, 0)
        again = import_jsonl(
            db.store, io.StringIO(big_export), on_conflict="merge", in_batches=True
        )
        assert (again.sessions, again.messages) == (0, 0)
        dump = io.StringIO()
        export_jsonl(db.store, dump)
        assert records(dump.getvalue()) == records(big_export)
        counters_equal_rows(db)


def test_in_batches_stands_aside_between_batches_for_writers_outside_the_queue(
    store_url: str, big_export: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hermes waits for SQLite's lock in its busy handler, trying up to 100 ms apart: a batch
    begun as soon as the last one committed left it no way in (``storage.write_turns``)."""
    with SessionDB(url=store_url) as db:
        gaps = gaps_between_writes(monkeypatch, db.store)
        result = import_jsonl(db.store, io.StringIO(big_export), in_batches=True)
        assert result.messages == MESSAGES + 1
        assert len(gaps) >= (MESSAGES + 1) // BATCH_ROWS
        poll = db.store.dialect.foreign_writer_poll_s
        if poll is not None:  # PostgreSQL's lock waiters queue: nothing pauses there
            # Between every two batches (the id reservation before them and the statistics'
            # refresh after them are writes of their own, outside the task's turns).
            assert min(gaps[1:-1]) >= poll + MARGIN_S


def test_a_damaged_file_in_batches_writes_nothing(store_url: str, big_export: str) -> None:
    damaged = big_export.rstrip("\n")[:-10] + "\n"
    with SessionDB(url=store_url) as db:
        with pytest.raises(ImportFormatError, match=r"line \d+"):
            import_jsonl(db.store, io.StringIO(damaged), in_batches=True)
        assert db.session_count() == 0 and db.message_count() == 0


def test_a_failure_part_way_keeps_the_batches_and_a_merge_finishes(
    store_url: str, big_export: str
) -> None:
    """Under ``fail``, a session another writer creates after the checks: the batches before
    it stay, the error says how many and what to do, and the merge it names finishes."""
    neighbour = Neighbour(
        store_url, "small",
        lambda other: other.create_session("small", "telegram"),
    )  # fmt: skip
    try:
        with SessionDB(url=store_url) as db:
            with pytest.raises(ImportIncompleteError, match="--on-conflict merge") as raised:
                import_jsonl(db.store, io.StringIO(big_export), on_conflict="fail",
                             progress=neighbour.progress, in_batches=True)  # fmt: skip
            assert not isinstance(neighbour.outcome, BaseException), neighbour.outcome
            error = raised.value
            assert "'small' already exists" in str(error)
            assert error.sessions_written == 1
            # the fourth batch (big's last message, then 'small') went back whole
            assert error.messages_written == db.message_count("big") == MESSAGES - 1
            finished = import_jsonl(db.store, io.StringIO(big_export), on_conflict="merge",
                                    in_batches=True)  # fmt: skip
            assert (finished.sessions, finished.messages) == (0, 2)
            assert db.message_count("big") == MESSAGES and db.message_count("small") == 1
            counters_equal_rows(db)
    finally:
        neighbour.db.close()


def test_cli_import_in_batches(store_url: str, big_export: str, tmp_path: Path) -> None:
    runner = CliRunner(env={"COLUMNS": "200"})
    path = tmp_path / "export.jsonl"
    path.write_text(big_export, encoding="utf-8")
    assert "--in-batches" in runner.invoke(cli.app, ["import", "--help"]).stdout
    result = runner.invoke(
        cli.app, ["--url", store_url, "import", str(path), "--in-batches", "--json"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["messages"] == MESSAGES + 1
    with SessionDB(url=store_url) as db:
        assert db.message_count() == MESSAGES + 1
        counters_equal_rows(db)


def test_a_big_whole_import_names_in_batches_on_sqlite(
    store_url: str, big_export: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where one transaction holds every other writer off (SQLite), an import of that many
    records says so, and one record fewer does not; an import in batches, or into PostgreSQL,
    does not either."""
    from sessionstore.cli import transfer as cli_transfer

    monkeypatch.setattr(cli_transfer, "LONG_IMPORT_RECORDS", len(big_export.splitlines()))
    monkeypatch.setattr(cli_transfer, "SHORTEST_RECORD_BYTES", 1)
    runner = CliRunner(env={"COLUMNS": "200"})
    path = tmp_path / "export.jsonl"
    path.write_text(big_export, encoding="utf-8")
    whole = runner.invoke(cli.app, ["--url", store_url, "import", str(path)])
    assert whole.exit_code == 0, whole.output
    assert ("--in-batches" in whole.stderr) == store_url.startswith("sqlite")
    again = runner.invoke(
        cli.app, ["--url", store_url, "import", str(path), "--in-batches", "--on-conflict",
                  "merge"],
    )  # fmt: skip
    assert again.exit_code == 0 and "--in-batches" not in again.stderr
    monkeypatch.setattr(cli_transfer, "LONG_IMPORT_RECORDS", len(big_export.splitlines()) + 1)
    fewer = runner.invoke(cli.app, ["--url", store_url, "import", str(path)])
    assert fewer.exit_code == 0 and "--in-batches" not in fewer.stderr


AS_FROM_A_TERMINAL = (
    "import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "runpy.run_module('sessionstore', run_name='__main__', alter_sys=True)"
)
"""``python -m sessionstore`` with Ctrl-C turned into ``KeyboardInterrupt`` as a terminal's
start leaves it: a background job of a non-interactive shell (CI's) starts its programs with
SIGINT ignored, and Python then leaves it ignored (the program ran to its end)."""


def test_ctrl_c_part_way_keeps_the_batches_and_the_merge_it_names_finishes(
    migrated_sqlite_url: str, tmp_path: Path
) -> None:
    """A user's Ctrl-C (SIGINT) while ``sessionstore import --in-batches`` writes: the program
    stops, says what stays and how to finish; the merge it names makes the store hold exactly
    the file's messages. The program is frozen (SIGSTOP) as soon as its first batch is seen
    committed, then interrupted and let go: a fast machine finished 12,000 messages between
    the test seeing 3,000 and its SIGINT."""
    total, per_session = 30_000, 300
    path = tmp_path / "export.jsonl"
    with path.open("w", encoding="utf-8") as out:
        out.write(json.dumps({"format": "sessionstore-export", "version": 6}) + "\n")
        for index in range(total):
            session = f"s{index // per_session}"
            if index % per_session == 0:
                out.write(json.dumps({"session": {"id": session, "source": "cli",
                                                  "started_at": 1.0,
                                                  "message_count": per_session}})
                          + "\n")  # fmt: skip
            out.write(json.dumps({"message": {"id": index + 1, "session_id": session,
                                              "role": "user", "timestamp": 2.0,
                                              "content": f"m{index}"}}) + "\n")  # fmt: skip
    command = [sys.executable, "-c", AS_FROM_A_TERMINAL, "--url", migrated_sqlite_url, "import",
               str(path), "--in-batches"]  # fmt: skip
    program = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with SessionDB(url=migrated_sqlite_url) as db:
        deadline = time.monotonic() + 120
        while db.message_count() < 1000 and program.poll() is None:
            assert time.monotonic() < deadline
            time.sleep(0.005)
        program.send_signal(signal.SIGSTOP)
        assert program.poll() is None, "the import ended before it could be interrupted"
        program.send_signal(signal.SIGINT)
        program.send_signal(signal.SIGCONT)
        _, stderr = program.communicate(timeout=120)
        kept = db.message_count()
        assert program.returncode != 0 and 1000 <= kept < total, (program.returncode, kept)
        assert "--on-conflict merge finishes it" in stderr
        finished = subprocess.run([*command, "--on-conflict", "merge"], capture_output=True,
                                  text=True, timeout=300, check=False)  # fmt: skip
        assert finished.returncode == 0, finished.stderr
        assert db.message_count() == total and db.session_count() == total // per_session
        assert {m["content"] for m in db.get_messages("s99")} == {
            f"m{index}" for index in range(total - per_session, total)
        }
        counters_equal_rows(db)
