"""iot 0.22.2's session hygiene on SQLite and PostgreSQL (issue 29): the never-active keyed
rows (listed, pruned with their routing entries and transcript files; a leased row skipped; a
row whose delete would take a delegate child's messages spared, where iot deletes it; never a
``conversation_generations`` row), the skill-scaffolded sessions, the Kanban classification and
retag, and the Git metadata claim and publication; hostile inputs are typed errors with nothing
written. The release is the oracle in ``tests/hermes/test_real_iot_gateway_hygiene.py``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from sessionstore.api.session_db import SessionDB

INVOKED = '[IMPORTANT: The user has invoked the "deploy" skill. The full skill content...'


def _sql(db: SessionDB, statement: str, **params: Any) -> list[Any]:
    def run(conn: sa.Connection) -> list[Any]:
        result = conn.execute(sa.text(statement), params)
        return [tuple(row) for row in result] if result.returns_rows else []

    return db.store.write(run)


def _keyed(db: SessionDB, session_id: str, key: str, **kwargs: Any) -> None:
    db.create_session(session_id, "telegram", session_key=key, **kwargs)
    _sql(db, "UPDATE sessions SET started_at = 1000 WHERE id = :id", id=session_id)


def _everything(db: SessionDB) -> list[Any]:
    tables = ("sessions", "messages", "gateway_routing", "conversation_generations")
    return [_sql(db, f"SELECT * FROM {table} ORDER BY 1, 2") for table in tables]


# -- never-active keyed sessions -----------------------------------------------------------------
def test_a_prune_spares_a_row_whose_delegate_child_holds_messages(
    db: SessionDB, tmp_path: Path
) -> None:
    """Softened (docs/hermes.md): iot's delete would take the delegate child and its messages."""
    _keyed(db, "idle", "k1")
    _keyed(db, "parent", "k2")
    db.create_session(
        "kid", "cli", parent_session_id="parent", model_config={"_delegate_from": "parent"}
    )
    db.append_message("kid", "user", "work the subagent did")
    db.save_gateway_routing_entry("k1", json.dumps({"session_id": "idle"}))
    db.save_gateway_routing_entry("k2", json.dumps({"session_id": "parent"}))
    tmp_path = tmp_path / "sessions"
    tmp_path.mkdir()
    for name in ("idle.json", "idle.jsonl", "parent.json", "other.json"):
        (tmp_path / name).write_text("{}")
    assert [row["id"] for row in db.list_never_active_keyed_sessions(older_than_days=1)] == [
        "idle", "parent"]  # fmt: skip
    assert db.prune_never_active_keyed_sessions(older_than_days=1, sessions_dir=tmp_path) == (
        1, 1, 0)  # fmt: skip
    assert db.get_session("idle") is None and db.get_session("parent") is not None
    assert [m["content"] for m in db.get_messages("kid")] == ["work the subagent did"]
    assert db.load_gateway_routing_entries() == {"k2": json.dumps({"session_id": "parent"})}
    assert sorted(path.name for path in tmp_path.iterdir()) == ["other.json", "parent.json"]


def test_a_prune_skips_leased_rows_and_keeps_every_generation(db: SessionDB) -> None:
    _keyed(db, "turn", "k1")
    _keyed(db, "gone", "k2")
    db.create_session("reset", "telegram", session_key="k3")
    db.append_message("reset", "user", "hi")
    db.end_session("reset", "session_reset")  # writes a conversation generation
    assert db.try_acquire_session_turn_lease("turn", "agent-1", ttl_seconds=300.0)
    generations = _sql(db, "SELECT * FROM conversation_generations")
    assert generations
    assert db.prune_never_active_keyed_sessions(older_than_days=1) == (1, 0, 1)
    assert db.get_session("turn") is not None and db.get_session("gone") is None
    assert _sql(db, "SELECT * FROM conversation_generations") == generations


@pytest.mark.parametrize(
    ("days", "error"),
    [("1", TypeError), (None, TypeError), (True, TypeError), ([1], TypeError),
     (-1, ValueError), (-math.inf, ValueError)],
)  # fmt: skip
def test_a_bad_age_is_a_typed_error_with_nothing_deleted(
    db: SessionDB, days: Any, error: type[Exception]
) -> None:
    _keyed(db, "idle", "k1")
    before = _everything(db)
    with pytest.raises(error):
        db.list_never_active_keyed_sessions(older_than_days=days)
    with pytest.raises(error):
        db.prune_never_active_keyed_sessions(older_than_days=days)
    assert _everything(db) == before


@pytest.mark.parametrize("days", [math.nan, math.inf, 10**400])
def test_an_age_nothing_is_old_enough_for_takes_nothing(db: SessionDB, days: Any) -> None:
    _keyed(db, "idle", "k1")
    before = _everything(db)
    assert db.list_never_active_keyed_sessions(older_than_days=days) == []
    assert db.prune_never_active_keyed_sessions(older_than_days=days) == (0, 0, 0)
    assert _everything(db) == before


def test_a_sessions_dir_that_is_no_path_deletes_nothing(db: SessionDB) -> None:
    _keyed(db, "idle", "k1")
    before = _everything(db)
    with pytest.raises(TypeError):
        db.prune_never_active_keyed_sessions(older_than_days=1, sessions_dir=5)  # type: ignore[arg-type]
    assert _everything(db) == before


# -- skill scaffolds ---------------------------------------------------------------------------
def test_the_first_user_message_decides_rewound_or_not(db: SessionDB) -> None:
    db.create_session("s", "cli")
    first = db.append_message("s", "user", INVOKED)
    db.append_message("s", "assistant", "ok")
    db.set_session_title("s", "Deploy")
    db.rewind_to_message("s", first)  # iot reads the first row whatever its state
    db.create_session("t", "cli")
    db.append_message("t", "user", INVOKED.upper())
    db.set_session_title("t", "Loud")
    rows = db.list_skill_scaffolded_sessions()
    assert {row["id"]: row["content"] for row in rows} == {"s": INVOKED, "t": INVOKED.upper()}
    assert len(db.list_skill_scaffolded_sessions(10**30)) == 2


@pytest.mark.parametrize(("limit", "error"), [(None, TypeError), ("x", ValueError),
                                              (math.nan, ValueError), ([], TypeError)])
def test_a_limit_int_cannot_take_is_iots_error(
    db: SessionDB, limit: Any, error: type[Exception]
) -> None:
    with pytest.raises(error):
        db.list_skill_scaffolded_sessions(limit)


# -- Kanban ------------------------------------------------------------------------------------
def test_kanban_ownership_reads_created_source_and_the_resumed_lineage(db: SessionDB) -> None:
    db.create_session("w", "cli")
    _sql(db, "UPDATE sessions SET created_source = 'kanban' WHERE id = 'w'")
    db.end_session("w", "compression")
    db.create_session("tip", "telegram", parent_session_id="w")
    db.create_session("sub", "cli", parent_session_id="tip", model_config={"_delegate_from": "tip"})
    assert [db.is_kanban_owned_session(s) for s in ("w", "tip", "sub")] == [True, True, False]
    for falsy in ("", None, "nul\x00", "lone\ud800"):
        assert db.is_kanban_owned_session(falsy) is False
    with pytest.raises(TypeError):
        db.is_kanban_owned_session(5)  # type: ignore[arg-type]


def test_a_retag_keeps_the_sessions_messages_searchable(db: SessionDB, tmp_path: Path) -> None:
    db.create_session("run", "cli")
    db.append_message("run", "user", "rebuild the zeppelin index")
    db.update_session_cwd("run", str(tmp_path / "board" / "t1"))
    before = _sql(db, "SELECT id, content, active FROM messages ORDER BY id")
    assert db.retag_kanban_worker_sessions(tmp_path / "board") == 1  # a Path, as a board gives
    assert db.retag_kanban_worker_sessions(str(tmp_path / "board") + "/") == 0  # gated
    assert (db.get_session("run") or {})["source"] == "kanban"
    assert _sql(db, "SELECT id, content, active FROM messages ORDER BY id") == before
    assert [hit["session_id"] for hit in db.search_messages("zeppelin")] == ["run"]
    assert db.is_kanban_owned_session("run") is True


@pytest.mark.parametrize(("root", "error"), [(5, TypeError), (None, TypeError),
                                             (b"/ws", TypeError), ("/ws\x00", ValueError)])
def test_a_bad_root_is_a_typed_error_with_nothing_written(
    db: SessionDB, root: Any, error: type[Exception]
) -> None:
    db.create_session("run", "cli")
    db.update_session_cwd("run", "/ws/a")
    with pytest.raises(error):
        db.retag_kanban_worker_sessions(root)
    assert (db.get_session("run") or {})["source"] == "cli"
    assert db.list_meta_prefix("kanban") == []


# -- Git metadata ------------------------------------------------------------------------------
def test_each_cwd_update_claims_a_generation_and_only_the_newest_publishes(db: SessionDB) -> None:
    db.create_session("g", "cli")
    assert db.update_session_cwd("nobody", "/a") is None
    old, new = db.update_session_cwd("g", "/a"), db.update_session_cwd("g", "/a")
    assert (old, new) == (1, 2)
    assert db.publish_session_git_metadata("g", "/a", old, "stale") is False
    assert db.publish_session_git_metadata("g", "/a", new, "main", "/a") is True
    assert db.publish_session_git_metadata("g", "/a", 2**70, "main") is False
    row = db.get_session("g") or {}
    assert (row["git_branch"], row["git_repo_root"], row["git_metadata_generation"]) == (
        "main", "/a", 2)  # fmt: skip


@pytest.mark.parametrize(
    "arguments",
    [(5, "/a", 1, "x"), ("g", 5, 1, "x"), ("g", "/a", 1, 5), ("g", "/a", 1, None, ["/a"])],
)
def test_a_publication_of_the_wrong_types_is_a_type_error(
    db: SessionDB, arguments: tuple[Any, ...]
) -> None:
    db.create_session("g", "cli")
    db.update_session_cwd("g", "/a")
    before = _everything(db)
    with pytest.raises(TypeError):
        db.publish_session_git_metadata(*arguments)
    assert _everything(db) == before
