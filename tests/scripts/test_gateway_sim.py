"""The gateway of ``scripts/gateway_sim.py``: many chats at once on ``AsyncSessionDB``, both
dialects, run briefly as a new user would (and once through its command line).

What it logged is checked against the store by the script itself (counters, rows, resumable
history per chat); here that report must be clean, and the totals must add up in the store.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from sessionstore import SessionDB

# Slow: runs scripts/gateway_sim.py in subprocesses (the full run only).
pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gateway_sim.py"


@pytest.fixture(scope="module")
def gateway_sim() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gateway_sim", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.asyncio
async def test_many_chats_at_once_are_logged_exactly(
    gateway_sim: ModuleType, store_url: str
) -> None:
    report = await gateway_sim.main(None, store_url, chats=45, turns=3, seed=3)
    assert report["failures"] == [] and report["problems"] == []
    assert (report["chats"], report["turns"], report["messages"]) == (45, 135, 540)
    with SessionDB(url=store_url) as db:
        assert db.message_count() == 540
        assert db.session_count() == 45
        platforms = {s["source"] for s in db.search_sessions(limit=100)}
        assert platforms == {"telegram", "discord", "slack"}


@pytest.mark.asyncio
async def test_a_second_run_resumes_the_chats_by_peer(
    gateway_sim: ModuleType, store_url: str
) -> None:
    async with gateway_sim.AsyncSessionDB(url=store_url) as db:
        chats = [gateway_sim.Chat("slack", f"c{i}", f"u{i}") for i in range(6)]
        await gateway_sim.serve(db, chats, 1, seed=5)
        first = [chat.session_id for chat in chats]
        again = [gateway_sim.Chat("slack", f"c{i}", f"u{i}") for i in range(6)]
        await gateway_sim.serve(db, again, 1, seed=6)
        assert [chat.session_id for chat in again] == first  # found by their peer
        for chat in again:
            assert await db.message_count(chat.session_id) == 8


def test_the_command_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--db", str(tmp_path / "gw.db"), "--chats", "12",
         "--turns", "2"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["turns"], report["messages"], report["failures"]) == (24, 96, [])
