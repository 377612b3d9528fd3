"""A replay (``get_messages_as_conversation``) gives a Hermes before 0.19 its own release's
keys, and no other: hermes-agent 0.13 to 0.16 send a replayed dict's keys to the provider
(0.13 and 0.14 the ``_`` keys too; none strips ``timestamp`` before 0.18), and a strict gateway
refuses an unknown key, failing every later turn of the resumed session. The release is the
running Hermes's ``hermes_cli.__version__`` (imported, or read from the checkout on
``sys.path`` without importing it); without a Hermes the replay is the newest shape.

Found by hermes-agent 0.13.0's and 0.15.2's own suites (``tests/hermes/own_suites/``), which
compare replayed dicts whole."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from sessionstore.api.conversation import running_hermes_release
from sessionstore.api.session_db import SessionDB

BASE = {"role", "content", "tool_call_id", "tool_name", "tool_calls", "finish_reason",
        "reasoning", "reasoning_content"}  # fmt: skip
"""The keys of the rows below that every release's replay gives (0.13.0's)."""
PLATFORM = {"message_id", "observed"}  # 0.15.0
TIMESTAMP = {"timestamp"}  # 0.17.0
UNDERSCORE = {"_db_persisted", "_tool_call_uids", "_tool_call_uid"}  # read from 0.18.0
SIDECARS = {"api_content", "effect_disposition"}  # 0.19.0


@pytest.fixture
def replayed_db(db: SessionDB) -> SessionDB:
    """Session ``s`` holding a row for each key a release added: a tool call and its result
    (their uids), reasoning, a platform id on an observed row, the 0.19 sidecars."""
    db.create_session("s", "cli")
    call = {"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{}"}}
    db.append_messages_batch("s", [
        {"role": "user", "content": "run ls"},
        {"role": "assistant", "content": "", "tool_calls": [call], "finish_reason": "tool_calls",
         "reasoning": "r", "reasoning_content": ""},
        {"role": "tool", "content": "a b", "tool_call_id": "c1", "tool_name": "t"},
    ])  # fmt: skip
    db.append_message("s", "user", "seen", platform_message_id="p1", observed=True)
    db.append_message("s", "user", "sent", effect_disposition="applied", api_content="as sent")
    return db


def _keys(db: SessionDB) -> set[str]:
    return {key for message in db.get_messages_as_conversation("s") for key in message}


RELEASES = (
    ((0, 13), BASE),
    ((0, 14), BASE),
    ((0, 15), BASE | PLATFORM),
    ((0, 16), BASE | PLATFORM),
    ((0, 17), BASE | PLATFORM | TIMESTAMP),
    ((0, 18), BASE | PLATFORM | TIMESTAMP | UNDERSCORE),
    ((0, 19), BASE | PLATFORM | TIMESTAMP | UNDERSCORE | SIDECARS),
    ((0, 22), BASE | PLATFORM | TIMESTAMP | UNDERSCORE | SIDECARS),
)


def test_each_release_gets_its_own_replay_keys(replayed_db: SessionDB) -> None:
    for release, keys in RELEASES:
        replayed_db.replay_hermes_release = release
        assert _keys(replayed_db) == keys, release
        (user, assistant, tool, seen, sent) = replayed_db.get_messages_as_conversation("s")
        assert (user["role"], user["content"]) == ("user", "run ls")
        assert assistant["tool_calls"][0]["id"] == "c1"
        assert assistant["reasoning"] == "r" and assistant["reasoning_content"] == ""
        assert (tool["tool_call_id"], tool["tool_name"], tool["content"]) == ("c1", "t", "a b")
        assert sent["content"] == "sent"  # the stored text, as the release replays it
        if release >= (0, 15):
            assert (seen["message_id"], seen["observed"]) == ("p1", True)


def test_the_release_is_the_running_hermes_s(
    replayed_db: SessionDB, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Without a Hermes in the process the replay is the newest; an imported ``hermes_cli``
    names the release; else the checkout importable from ``sys.path``, read, not imported."""
    monkeypatch.delitem(sys.modules, "hermes_cli", raising=False)
    assert running_hermes_release() is None
    newest = _keys(replayed_db)
    assert newest >= UNDERSCORE | TIMESTAMP | SIDECARS

    checkout = tmp_path / "checkout"
    (checkout / "hermes_cli").mkdir(parents=True)
    (checkout / "hermes_cli" / "__init__.py").write_text(
        '"""Hermes CLI"""\nimport os\n\n__version__ = "0.15.2"\n__release_date__ = "2026.5.20"\n'
        "raise RuntimeError('imported')\n"
    )
    monkeypatch.syspath_prepend(str(checkout))
    assert running_hermes_release() == (0, 15)
    assert "hermes_cli" not in sys.modules
    assert _keys(replayed_db) == BASE | PLATFORM

    imported = types.ModuleType("hermes_cli")
    imported.__version__ = "0.13.0"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "hermes_cli", imported)
    assert running_hermes_release() == (0, 13)
    assert _keys(replayed_db) == BASE

    imported.__version__ = "0.20.1"  # type: ignore[attr-defined]  # axisrow 0.20.1.2's
    assert _keys(replayed_db) == newest
    imported.__version__ = "unknown"  # type: ignore[attr-defined]
    assert running_hermes_release() is None
    assert _keys(replayed_db) == newest


def test_a_version_the_module_computes_is_read_once_per_module(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """iot 0.22.2's ``hermes_cli.__version__`` is a PEP 562 ``__getattr__`` that reads its
    install stamp from disk at each access; every conversation load asked for it. It is read
    once per module object; a module imported again (a new object) is read again."""
    reads: list[str] = []

    def computed(version: str) -> types.ModuleType:
        module = types.ModuleType("hermes_cli")

        def __getattr__(name: str) -> str:
            if name != "__version__":
                raise AttributeError(name)
            reads.append(version)
            return version

        module.__getattr__ = __getattr__  # type: ignore[method-assign]
        return module

    first = computed("0.15.1")
    monkeypatch.setitem(sys.modules, "hermes_cli", first)
    assert [running_hermes_release() for _ in range(5)] == [(0, 15)] * 5
    assert reads == ["0.15.1"]

    monkeypatch.setitem(sys.modules, "hermes_cli", computed("0.22.2"))
    assert running_hermes_release() == (0, 22)
    assert running_hermes_release() == (0, 22)
    assert reads == ["0.15.1", "0.22.2"]

    monkeypatch.setitem(sys.modules, "hermes_cli", first)
    assert running_hermes_release() == (0, 15)
