"""How long the lock stayed free between a long task's write transactions: the store's
``write`` wrapped to note when each began and returned (``storage.write_turns``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from sessionstore.storage import write_turns
from sessionstore.storage.store import Store


def gaps_between_writes(monkeypatch: pytest.MonkeyPatch, store: Store) -> list[float]:
    """Seconds from each write's return to the next one's call, filled as the task runs;
    every turn counts as having held the lock long enough to stand aside after it
    (``HOLD_S`` 0)."""
    monkeypatch.setattr(write_turns, "HOLD_S", 0.0)
    spans: list[tuple[float, float]] = []
    gaps: list[float] = []
    write = store.write

    def watched(work: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        began = time.monotonic()
        if spans:
            gaps.append(began - spans[-1][1])
        try:
            return write(work, *args, **kwargs)
        finally:
            spans.append((began, time.monotonic()))

    monkeypatch.setattr(store, "write", watched)
    return gaps
