"""``SessionDB.rewind_user_turn``: iot 0.22.2's ``/undo`` and ``/retry`` (its
``hermes_state_rewind``), the one rewind its CLI, gateway and TUI share.

The stored transcript is the authority: the user turns are counted on the live replay
(alternation-repaired, as a resume replays it), the n-th is rewound with
``rewind_to_message`` fenced by the live ids read first and by the turn's stored text, so a
turn that landed or changed meanwhile refuses the rewind (``RuntimeError``) instead of undoing
what the user never saw. A caller's in-memory history (``warm_history``) must agree with the
store (the same number of turns, the same text of the target), else ``RuntimeError`` and
nothing changes; its prefix is what the caller installs.

Which rows are turns is :mod:`sessionstore.sessions.user_turns`'s rule. Decision (kinder): a
compaction carrier (a summary row holding the next ask) is never a turn here, where iot splits
it, archives it and re-inserts its summary. So ``require_composite`` always finds no target,
and a turn inside a carrier is not addressable: ``/undo`` reaches the turns after the last
compaction, never into its summary. iot's synthetic user rows without a ``display_kind``
(its recovery nudges, recognised by their text in its agent) count as turns here.

A target that is not there is :class:`~sessionstore.errors.RewindTargetUnavailableError`;
inside an iot process (its ``hermes_state_rewind`` imported) the error is also iot's class,
which its gateway catches by name.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, Protocol

from ..errors import RewindTargetUnavailableError
from ..sessions.user_turns import (
    RewindOutcome,
    comparison_content,
    flattened_text,
    history_before,
    is_ephemeral,
    retryable_text,
    turn_indices,
    turn_view,
)
from ..sql import validation


class _Transcripts(Protocol):
    """What the rewind needs of ``SessionDB`` (named here, not imported: no import cycle)."""

    def get_active_message_ids(self, session_id: str) -> list[int]: ...

    def get_messages_as_conversation(
        self, session_id: str, *, include_row_ids: bool = ..., repair_alternation: bool = ...
    ) -> list[dict[str, Any]]: ...

    def rewind_to_message(
        self, session_id: str, target_message_id: int, *,
        expected_active_ids: Sequence[int] | None = ..., expected_target_content: Any = ...,
    ) -> dict[str, Any]: ...  # fmt: skip

HISTORY_CHANGED = "session history changed before the rewind could be persisted"


def unavailable(message: str) -> RewindTargetUnavailableError:
    """Ours, and iot's class too when the iot running this process has loaded it."""
    theirs = getattr(sys.modules.get("hermes_state_rewind"), "RewindTargetUnavailableError", None)
    if isinstance(theirs, type) and issubclass(theirs, ValueError) and not issubclass(
        RewindTargetUnavailableError, theirs
    ):
        both = _WITH_THEIRS.get(theirs)
        if both is None:
            both = _WITH_THEIRS[theirs] = type(
                "RewindTargetUnavailableError", (RewindTargetUnavailableError, theirs),
                {"__module__": __name__, "__doc__": RewindTargetUnavailableError.__doc__},
            )  # fmt: skip
        return both(message)
    return RewindTargetUnavailableError(message)


_WITH_THEIRS: dict[type[ValueError], type[RewindTargetUnavailableError]] = {}
"""One class per iot class met (a test may load another)."""


def rewind_user_turn(
    db: _Transcripts,
    session_id: str,
    user_ordinal: int,
    *,
    warm_history: list[dict[str, Any]] | None = None,
    require_retryable: bool = False,
    require_composite: bool = False,
    adopt_row_ids: bool = False,
) -> RewindOutcome:
    """See :meth:`SessionDB.rewind_user_turn`."""
    ordinal = validation.integer(user_ordinal, "user_ordinal")
    for name, value in (("require_retryable", require_retryable),
                        ("require_composite", require_composite),
                        ("adopt_row_ids", adopt_row_ids)):  # fmt: skip
        validation.flag(value, name)
    if warm_history is not None and (
        isinstance(warm_history, (str, bytes, dict)) or not isinstance(warm_history, list)
    ):
        raise TypeError("warm_history must be a list of message dicts")
    expected_active_ids = db.get_active_message_ids(session_id)
    stored = db.get_messages_as_conversation(session_id, include_row_ids=True)
    durable = db.get_messages_as_conversation(
        session_id, include_row_ids=True, repair_alternation=True
    )
    durable_turns = turn_indices(durable)
    if ordinal < 0:
        ordinal = max(len(durable_turns) + ordinal, 0)
    if ordinal >= len(durable_turns):
        raise unavailable("target user message is no longer in session history")
    target = durable[durable_turns[ordinal]]
    durable_prefix, live_view = history_before(durable, durable_turns[ordinal])
    if require_composite:
        raise unavailable("target user message is not a compaction carrier")
    prefix = durable_prefix
    if warm_history is not None:
        warm = [message for message in warm_history if not is_ephemeral(message)]
        warm_turns = turn_indices(warm)
        if len(warm_turns) != len(durable_turns):
            raise RuntimeError(HISTORY_CHANGED)
        prefix, warm_view = history_before(warm, warm_turns[ordinal])
        if comparison_content(live_view) != comparison_content(warm_view):
            raise RuntimeError(HISTORY_CHANGED)
    live_text = retryable_text(live_view.get("content")) if require_retryable else None
    row_id = target.get("_row_id")
    if not isinstance(row_id, int):
        raise RuntimeError("rewind target has no durable row identity")
    # The pin compares with the stored row, which for a merged user;user turn holds only its
    # first ask, never the merged text of the replay.
    stored_view = next(
        (turn_view(message) for message in stored if message.get("_row_id") == row_id), None
    )
    if stored_view is None:
        raise RuntimeError(HISTORY_CHANGED)
    try:
        result = db.rewind_to_message(
            session_id, row_id, expected_active_ids=expected_active_ids,
            expected_target_content=stored_view.get("content"),
        )  # fmt: skip
    except RewindTargetUnavailableError:
        raise
    except ValueError as exc:  # the target went or changed role meanwhile
        raise unavailable(str(exc)) from exc
    if adopt_row_ids and prefix is not durable_prefix:
        _adopt_row_ids(prefix, durable_prefix)
    return RewindOutcome(
        prefix=prefix, live_view=live_view,
        live_text=live_text if live_text is not None else flattened_text(
            live_view.get("content")),
        rewound_count=int(result.get("rewound_count", 0)),
        turns_undone=len(durable_turns) - ordinal,
    )  # fmt: skip


def _adopt_row_ids(prefix: list[dict[str, Any]], durable: list[dict[str, Any]]) -> None:
    """iot's ``adopt_row_ids`` (its TUI addresses follow-ups by row): when the warm prefix is
    the stored one message for message (role, kind, text), each warm message takes its row's
    ``_row_id`` and ``message_uid``; otherwise nothing is stamped."""
    if len(prefix) != len(durable) or not all(
        warm.get("role") == row.get("role")
        and bool(warm.get("display_kind")) == bool(row.get("display_kind"))
        and comparison_content(warm) == comparison_content(row)
        for warm, row in zip(prefix, durable, strict=True)
    ):
        return
    for warm, row in zip(prefix, durable, strict=True):
        if isinstance(row_id := row.get("_row_id"), int):
            warm["_row_id"] = row_id
        if isinstance(uid := row.get("message_uid"), str) and uid:
            warm["message_uid"] = uid


__all__ = ["HISTORY_CHANGED", "rewind_user_turn", "unavailable"]
