"""Hermes 0.18's later methods side by side with the real Hermes of our head's schema (v22:
hermes-agent 0.19.0, whose rows carry the v18...v22 columns ours do; 0.19.0 kept these methods'
rules, and added ``ws_orphan_reap`` to the end reasons a gateway may resume).

The same list of calls runs on the real release's ``SessionDB`` (a subprocess on its own SQLite
file, `tests/support/real_hermes.py`) and on ours, on SQLite and on PostgreSQL; the answers must be
the same. What neither side's methods can set (a session's ``started_at``, ``archived``...) is set
by ``$sql`` steps, the same statement on both. Covered: ``resolve_resume_session_id`` and
``search_sessions_by_id`` over a family of every child kind, ``get_messages_around`` and
``get_anchored_view`` over a session with tool calls, empty and multi-part content,
``list_cron_job_runs``, the empty-session and orphaned-continuation cleanup, every delete with a
``sessions_dir`` (which rows and which files are left), ``maybe_auto_prune_and_vacuum``, and the
keywords Hermes passes to ``create_session``/``ensure_session``,
``record_compression_failure_cooldown`` and ``backfill_repo_roots``.

Where we differ on purpose, the scenario stays off it (see
``tests/api/test_session_db_hermes_018_methods.py``): a ghost session with a child (Hermes fails on
the foreign key), ids holding glob characters (Hermes's glob removes other sessions' files),
``optimize_fts``'s count (we have more indexes). The family has no reset child: 0.19.0's chain
follows one, iot 0.22.2's (and ours) does not (``tests/hermes/test_real_iot_chain_rule.py`` runs
those cases against iot 0.22.2).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from legacy_v23_v31 import without_newer_columns
from real_hermes import RealHermes
from real_hermes_driver import PATH_KEY, SQL_STEP
from side_by_side import Step, as_printed, run_steps

from sessionstore.api.session_db import SessionDB

# Slow: every test runs a real Hermes release in a side interpreter (the full run only).
pytestmark = pytest.mark.slow

NOW = time.time()
DAY = 86_400.0
RESULTS_DIFFER = {
    SQL_STEP,
    # Hermes returns None; ours says whether (how many) rows changed.
    "record_compression_failure_cooldown", "backfill_repo_roots", "update_session_cwd",
    "end_session", "set_session_title", "set_session_archived",
    # Hermes counts its two FTS5 tables; ours has more (the CJK bigram index).
    "optimize_fts", "vacuum",
    # remaining_seconds is each side's own clock (the rest is compared by the test).
    "get_compression_failure_cooldown",
}  # fmt: skip


def assert_same(
    theirs: list[Any], ours: list[Any], steps: list[Step], also_differ: frozenset[str] = frozenset()
) -> None:
    assert len(theirs) == len(ours) == len(steps)
    for (name, args, kwargs), expected, actual in zip(steps, theirs, ours, strict=True):
        if name in RESULTS_DIFFER or name in also_differ:
            continue
        # An older Hermes has none of the v23...v31 columns our answers carry.
        assert without_newer_columns(expected, actual) == expected, (name, args, kwargs)


def side_by_side(
    hermes: RealHermes, db: SessionDB, tmp_path: Path, steps: list[Step],
    also_differ: frozenset[str] = frozenset(),
) -> tuple[list[Any], list[Any]]:  # fmt: skip
    theirs = hermes.calls_on_a_new_file(tmp_path / "hermes.db", steps)
    ours = as_printed(run_steps(db, steps))
    assert_same(theirs, ours, steps, also_differ)
    return theirs, ours


def sql(statement: str, **params: Any) -> Step:
    return (SQL_STEP, [statement, params], {})


def make(session_id: str, *, source: str = "cli", parent: str | None = None,
         config: dict[str, Any] | None = None, started: float = NOW - 10 * DAY,
         ended: float | None = None, reason: str | None = None, title: str | None = None,
         archived: int = 0, api_calls: int = 0) -> list[Step]:  # fmt: skip
    kwargs: dict[str, Any] = {}
    if parent is not None:
        kwargs["parent_session_id"] = parent
    if config is not None:
        kwargs["model_config"] = config
    return [
        ("create_session", [session_id, source], kwargs),
        sql("UPDATE sessions SET started_at = :s, ended_at = :e, end_reason = :r, title = :t, "
            "archived = :a, api_call_count = :c WHERE id = :id", s=started, e=ended, r=reason,
            t=title, a=archived, c=api_calls, id=session_id),
    ]  # fmt: skip


def message(session_id: str, role: str, content: Any, at: float, **fields: Any) -> Step:
    return ("append_message", [session_id, role, content], {"timestamp": at, **fields})


def projection(session_ids: list[str]) -> list[Step]:
    """Steps reading what a cleanup left of each session."""
    return [("get_session", [sid], {}) for sid in session_ids]


def kept(rows: list[Any]) -> list[Any]:
    """The part of ``get_session`` rows a cleanup decides (``ended_at`` as set or not: a
    finalize stamps its own clock)."""
    return [
        None if row is None else {
            "id": row["id"], "parent_session_id": row["parent_session_id"],
            "end_reason": row["end_reason"], "ended": row["ended_at"] is not None,
            "message_count": row["message_count"],
        }
        for row in rows
    ]  # fmt: skip


# -- lineage and windows ---------------------------------------------------------------------

def family(*, race: bool = True) -> list[Step]:
    """Sessions of every child kind. ``race``: the continuation started before its parent
    ended (a gateway race), and a stale sibling started after the live one."""
    return [
        *make("root", reason="compression", ended=NOW - 9 * DAY),
        *make("cont", parent="root", started=NOW - 9 * DAY + (-30 if race else 30),
              reason="compression", ended=NOW - 8 * DAY),
        *make("tip", parent="cont", started=NOW - 8 * DAY + 30),
        *(make("stale", parent="cont", started=NOW - 7 * DAY, ended=NOW - 6 * DAY,
               reason="ws_orphan_reap") if race else []),
        *make("branch", parent="root", config={"_branched_from": "root"},
              started=NOW - 5 * DAY),
        *make("kid", parent="tip", config={"_delegate_from": "tip"}, started=NOW - 4 * DAY),
        *make("tooling", parent="tip", source="tool", started=NOW - 3 * DAY),
        *make("live", started=NOW - 2 * DAY),
        *make("live-child", parent="live", started=NOW - DAY),
        *make("quiet", started=NOW - 2 * DAY),
        *make("quiet-child", parent="quiet", started=NOW - DAY),
        message("root", "user", "start the deployment", NOW - 10 * DAY),
        message("cont", "user", "[summary] deployment started", NOW - 9 * DAY),
        *([message("stale", "user", "a stale websocket wrote this", NOW - 6 * DAY)]
          if race else []),
        message("branch", "user", "what about helm", NOW - 5 * DAY),
        message("kid", "user", "research quorum sizes", NOW - 4 * DAY),
        message("tooling", "tool", "tool output", NOW - 3 * DAY),
        message("live", "user", "a live chat", NOW - 2 * DAY),
        message("live-child", "user", "its untagged child", NOW - DAY),
        message("quiet", "user", "only the parent talks", NOW - DAY),
    ]  # fmt: skip


FAMILY = family()
FAMILY_IDS = ["root", "cont", "tip", "stale", "branch", "kid", "tooling", "live", "live-child",
              "quiet", "quiet-child", "unknown", ""]  # fmt: skip


def test_resume_targets_match_hermes(hermes: RealHermes, db: SessionDB, tmp_path: Path) -> None:
    steps = [*FAMILY, *[("resolve_resume_session_id", [sid], {}) for sid in FAMILY_IDS]]
    theirs, _ = side_by_side(hermes, db, tmp_path, steps)
    # The scenario reaches every rule: the race, a stale sibling, forks, a plain child.
    assert theirs[-len(FAMILY_IDS):] == [
        "tip", "tip", "tip", "stale", "branch", "kid", "tooling", "live-child", "live-child",
        "quiet", "quiet-child", "unknown", "",
    ]


SEARCHES = ["root", "ROOT", " tip ", "t", "li", "branch", "kid", "-", "_", "%", "nothing",
            "quiet-child"]  # fmt: skip
CALM_FAMILY = [*family(race=False), *make("archived-root", archived=1, started=NOW - DAY / 2)]


def search_steps(family: list[Step]) -> list[Step]:
    return [
        *family,
        *[("search_sessions_by_id", [query], {}) for query in SEARCHES],
        ("search_sessions_by_id", ["root"], {"include_archived": False}),
        ("search_sessions_by_id", ["t"], {"limit": 2}),
        ("search_sessions_by_id", ["t"], {"limit": 0}),
    ]


def test_search_by_id_matches_hermes(hermes: RealHermes, db: SessionDB, tmp_path: Path) -> None:
    steps = search_steps(CALM_FAMILY)
    theirs, _ = side_by_side(hermes, db, tmp_path, steps)
    by_root = theirs[len(CALM_FAMILY)]
    assert by_root[0]["id"] == "tip" and by_root[0]["_lineage_root_id"] == "root"
    assert "archived-root" in [row["id"] for row in by_root]


def test_search_by_id_over_a_racing_continuation_matches_hermes(
    hermes: RealHermes, db: SessionDB, tmp_path: Path
) -> None:
    side_by_side(hermes, db, tmp_path, search_steps(
        [*FAMILY, *make("archived-root", archived=1, started=NOW - DAY / 2)]
    ))


CONVERSATION: list[Step] = [
    *make("s"),
    *make("other"),
    message("s", "user", [{"type": "text", "text": "look at this"},
                          {"type": "image_url", "image_url": {"url": "data:,x"}}], 1000.0),
    message("s", "user", "deploy the web tier", 1001.0),
    message("s", "assistant", None, 1002.0, tool_calls=[
        {"id": "c1", "type": "function", "function": {"name": "terminal", "arguments": "{}"}}]),
    message("s", "tool", "deployment.apps/web configured", 1003.0, tool_name="terminal",
            tool_call_id="c1"),
    message("s", "assistant", "", 1004.0),
    message("s", "assistant", "the rollout is running", 1005.0, finish_reason="stop"),
    message("other", "user", "another session", 1005.5),
    message("s", "user", "check the pods", 1006.0),
    message("s", "assistant", "all pods are ready", 1007.0),
    message("s", "user", "thanks", 1008.0),
    message("s", "assistant", "you are welcome", 1009.0),
]  # fmt: skip
AROUND = [
    (1, 2), (4, 1), (4, 0), (8, 2), (12, 3), (1, -2), (4, 50), (7, 2), (999, 2),
]
ANCHORED: list[tuple[int, dict[str, Any]]] = [
    (4, {}), (6, {"window": 1, "bookend": 2}), (9, {"window": 1, "bookend": 5}),
    (4, {"window": 1, "keep_roles": None}), (6, {"window": 2, "keep_roles": ["user"]}),
    (6, {"window": 1, "keep_roles": []}), (6, {"window": 1, "bookend": 0}),
    (2, {"window": 0, "bookend": 3}), (12, {"window": 1}), (6, {"window": 30}),
]


def test_message_windows_match_hermes(hermes: RealHermes, db: SessionDB, tmp_path: Path) -> None:
    steps: list[Step] = [
        *CONVERSATION,
        *[("get_messages_around", ["s", anchor], {"window": window})
          for anchor, window in AROUND],
        ("get_messages_around", ["other", 4], {}),
        ("get_messages_around", ["nobody", 4], {}),
        *[("get_anchored_view", ["s", anchor], options) for anchor, options in ANCHORED],
        ("get_anchored_view", ["other", 4], {}),
    ]  # fmt: skip
    theirs, _ = side_by_side(hermes, db, tmp_path, steps)
    views = theirs[len(CONVERSATION):]
    assert all(view["window"] for view in views[:4]), "the scenario must find its anchors"
    assert views[4]["window"] == [] and views[7]["window"] == []
    assert any(view.get("bookend_start") for view in views)
    assert any(view.get("bookend_end") for view in views)


def test_cron_runs_match_hermes(hermes: RealHermes, db: SessionDB, tmp_path: Path) -> None:
    steps: list[Step] = [
        *make("cron_j1_300", source="cron", started=300.0),
        *make("cron_j1_100", source="cron", started=100.0),
        *make("cron_j1_200b", source="cron", started=200.0),
        *make("cron_j1_200", source="cron", started=200.0),
        *make("cron_j10_1", source="cron", started=400.0),
        *make("CRON_J1_5", source="cron", started=500.0),
        *make("cron_j1_9", source="cli", started=700.0),
        *make("cron_%_1", source="cron", started=800.0),
        *make("cron_j1`", source="cron", started=900.0),
        message("cron_j1_300", "user", "Run the nightly backup\nof the cluster " + "x" * 80,
                301.0),
        message("cron_j1_300", "assistant", "done", 302.0),
        message("cron_j1_100", "assistant", "no user message here", 101.0),
        ("list_cron_job_runs", ["j1"], {}),
        ("list_cron_job_runs", ["j1"], {"limit": 2, "offset": 1}),
        ("list_cron_job_runs", ["j1", 10, 3], {}),
        ("list_cron_job_runs", ["%"], {}),
        ("list_cron_job_runs", ["j"], {}),
        ("list_cron_job_runs", ["nothing"], {}),
    ]  # fmt: skip
    theirs, _ = side_by_side(hermes, db, tmp_path, steps)
    assert [row["id"] for row in theirs[-6]] == [
        "cron_j1_300", "cron_j1_200b", "cron_j1_200", "cron_j1_100"
    ]


# -- cleanup ---------------------------------------------------------------------------------

CLEANUP: list[Step] = [
    *make("empty-ended", ended=NOW - DAY),
    *make("empty-live"),
    *make("empty-archived", ended=NOW - DAY, archived=1),
    *make("talked", ended=NOW - DAY),
    *make("empty-parent", ended=NOW - DAY),
    *make("delegate-of-empty", parent="empty-parent", config={"_delegate_from": "empty-parent"}),
    *make("p", reason="compression", ended=NOW - 9 * DAY, started=NOW - 10 * DAY),
    *make("orphan", parent="p", started=NOW - 8 * DAY),
    *make("young", parent="p", started=NOW - 6 * DAY),
    *make("called", parent="p", started=NOW - 8 * DAY, api_calls=2),
    *make("silent", parent="p", started=NOW - 8 * DAY),
    *make("q", reason="user_exit", ended=NOW - 9 * DAY, started=NOW - 10 * DAY),
    *make("not-compressed", parent="q", started=NOW - 8 * DAY),
    message("talked", "user", "hi", NOW - DAY),
    message("delegate-of-empty", "user", "sub-agent work", NOW - DAY),
    message("orphan", "user", "continued", NOW - 8 * DAY),
    message("young", "user", "continued", NOW - 6 * DAY),
    message("called", "user", "continued", NOW - 8 * DAY),
    message("not-compressed", "user", "continued", NOW - 8 * DAY),
    message("p", "user", "before compression", NOW - 10 * DAY),
    message("q", "user", "before exit", NOW - 10 * DAY),
]  # fmt: skip
CLEANUP_IDS = ["empty-ended", "empty-live", "empty-archived", "talked", "empty-parent",
               "delegate-of-empty", "p", "orphan", "young", "called", "silent", "q",
               "not-compressed"]  # fmt: skip


def test_cleanup_matches_hermes(hermes: RealHermes, db: SessionDB, tmp_path: Path) -> None:
    steps: list[Step] = [
        *CLEANUP,
        ("count_empty_sessions", [], {}),
        ("finalize_orphaned_compression_sessions", [], {}),
        ("finalize_orphaned_compression_sessions", [], {}),
        ("count_empty_sessions", [], {}),
        ("delete_empty_sessions", [], {}),
        ("count_empty_sessions", [], {}),
        *projection(CLEANUP_IDS),
    ]
    # Rows are compared through kept(): a finalize stamps ended_at with each side's clock.
    theirs, ours = side_by_side(hermes, db, tmp_path, steps, frozenset({"get_session"}))
    rows = len(CLEANUP_IDS)
    assert kept(ours[-rows:]) == kept(theirs[-rows:])
    assert theirs[len(CLEANUP):-rows] == [2, 1, 0, 2, 2, 0]


# -- deletes with a sessions directory --------------------------------------------------------

DELETES: list[Step] = [
    *make("parent"),
    *make("delegate", parent="parent", config={"_delegate_from": "parent"}),
    *make("grand-delegate", parent="delegate", config={"_delegate_from": "delegate"}),
    *make("branch", parent="parent", config={"_branched_from": "parent"}),
    *make("bulk-1"), *make("bulk-2"),
    *make("bulk-kid", parent="bulk-1", config={"_delegate_from": "bulk-1"}),
    *make("empty-now", title=None),
    *make("titled", title="keep me"),
    *make("old", ended=NOW - 99 * DAY, started=NOW - 100 * DAY),
    *make("old-kid", parent="old", started=NOW - 50 * DAY),
    *make("ghost", source="tui", ended=NOW - 2 * DAY, started=NOW - 3 * DAY),
    *make("new-ghost", source="tui", ended=NOW, started=NOW - 3600),
    *make("ancient", ended=NOW - 400 * DAY, started=NOW - 401 * DAY),
    message("parent", "user", "hello", NOW - 10 * DAY),
    message("delegate", "user", "sub work", NOW - 10 * DAY),
    message("bulk-2", "user", "bulk", NOW - 10 * DAY),
]  # fmt: skip
DELETE_IDS = ["parent", "delegate", "grand-delegate", "branch", "bulk-1", "bulk-2", "bulk-kid",
              "empty-now", "titled", "old", "old-kid", "ghost", "new-ghost", "ancient"]  # fmt: skip
FILE_SHAPES = ("{}.json", "{}.jsonl", "request_dump_{}_1700000000.json")


def make_transcripts(directory: Path) -> None:
    directory.mkdir()
    for session_id in [*DELETE_IDS, "never-a-session"]:
        for shape in FILE_SHAPES:
            (directory / shape.format(session_id)).write_text("{}")
    (directory / "notes.txt").write_text("not a transcript")


def test_deletes_with_a_sessions_dir_match_hermes(
    hermes: RealHermes, db: SessionDB, tmp_path: Path
) -> None:
    theirs_dir, ours_dir = tmp_path / "hermes-sessions", tmp_path / "our-sessions"
    make_transcripts(theirs_dir)
    make_transcripts(ours_dir)

    def steps_for(directory: Path) -> list[Step]:
        where = {PATH_KEY: str(directory)}
        return [
            *DELETES,
            ("delete_session", ["parent"], {"sessions_dir": where}),
            ("delete_session", ["parent"], {"sessions_dir": where}),
            ("delete_sessions", [["bulk-1", "bulk-2", "nobody", "bulk-1"], where], {}),
            ("delete_session_if_empty", ["titled"], {"sessions_dir": where}),
            ("delete_session_if_empty", ["empty-now"], {"sessions_dir": where}),
            ("prune_sessions", [], {"older_than_days": 200, "sessions_dir": where}),
            ("prune_empty_ghost_sessions", [where], {}),
            sql("UPDATE state_meta SET value = 'x' WHERE key = 'nothing'"),
            ("maybe_auto_prune_and_vacuum", [], {"retention_days": 30, "sessions_dir": where}),
            ("maybe_auto_prune_and_vacuum", [], {"retention_days": 1, "sessions_dir": where}),
            *projection(DELETE_IDS),
        ]

    theirs = hermes.calls(tmp_path / "hermes.db", steps_for(theirs_dir))
    ours = as_printed(run_steps(db, steps_for(ours_dir)))
    assert_same(theirs, ours, steps_for(ours_dir))
    assert sorted(p.name for p in ours_dir.iterdir()) == sorted(
        p.name for p in theirs_dir.iterdir()
    )
    rows = len(DELETE_IDS)
    assert kept(ours[-rows:]) == kept(theirs[-rows:])
    # The scenario deletes something by every method, and keeps the branch and a file.
    assert theirs[len(DELETES):-rows] == [
        True, False, 2, False, True, 1, 1, None,
        {"skipped": False, "pruned": 1, "vacuumed": True},
        {"skipped": True, "pruned": 0, "vacuumed": False},
    ]
    assert "branch.json" in {p.name for p in ours_dir.iterdir()}


# -- keywords Hermes passes -------------------------------------------------------------------

KEYWORDS = {"model": "claude", "model_config": {"temperature": 0.2}, "system_prompt": "brief",
            "user_id": "alice", "session_key": "agent:main:telegram:dm:1", "chat_id": "42",
            "chat_type": "dm", "thread_id": "7", "parent_session_id": "base",
            "cwd": "/w/app"}  # fmt: skip


def test_hermes_keywords_match_hermes(hermes: RealHermes, db: SessionDB, tmp_path: Path) -> None:
    steps: list[Step] = [
        ("create_session", ["base", "cli"], {}),
        ("create_session", ["full", "cli"], KEYWORDS),
        ("ensure_session", ["ensured"], KEYWORDS),
        # A real source: the placeholder ``unknown`` (ensure_session's default) is replaced by
        # a later create_session as iot 0.22.2 replaces it, where 0.19 kept it (docs/hermes.md,
        # tests/hermes/test_real_iot_session_upserts.py).
        ("ensure_session", ["bare", "cli"], {}),
        ("create_session", ["bare", "telegram"], {**KEYWORDS, "user_id": "bob"}),
        ("ensure_session", ["full", "discord"], {key: "later" for key in
                                                   ("model", "system_prompt", "cwd")}),
        ("record_compression_failure_cooldown", ["full"],
         {"cooldown_until": NOW + DAY, "error": "summary model timed out"}),
        ("get_compression_failure_cooldown", ["full"], {}),
        ("update_session_cwd", ["bare", "/w/lib"], {}),
        ("backfill_repo_roots", [], {"cwd_to_root": {"/w/app": "/w", "/w/lib": "/w", "": "/x"}}),
        *[sql("UPDATE sessions SET started_at = 1 WHERE id = :id", id=sid)
          for sid in ("base", "full", "ensured", "bare")],
        *projection(["full", "ensured", "bare"]),
    ]  # fmt: skip
    theirs, ours = side_by_side(hermes, db, tmp_path, steps)
    for cooldown in (theirs[7], ours[7]):
        assert (cooldown["cooldown_until"], cooldown["error"]) == (
            NOW + DAY, "summary model timed out"
        )
    assert theirs[-1]["user_id"] is None and theirs[-1]["model"] == "claude"
