"""Hermes 0.18.1 and 0.19.0's methods through the facade, on SQLite and PostgreSQL: what the
side-by-side comparison with the real Hermes 0.19.0 (`tests/hermes/test_real_hermes_019_methods.py`)
cannot show.

- The per-model usage upsert is part of the token update: one transaction (a session total
  that would overflow leaves both the totals and the usage row as they were; a usage row
  saturates at its bound), untouched by absolute updates, one statement on PostgreSQL
  (``INSERT ... ON CONFLICT DO UPDATE``), exact under concurrent writers, and deleted with
  its session.
- Bad input is a typed error or an empty answer, never a half-written store (hypothesis).
- The bulk filters, the import's limits, ``rebuild_fts`` on a read-only store, ``compact_rows``
  and ``search_query`` where Hermes has no answer to compare with (PostgreSQL).
"""

from __future__ import annotations

import contextlib
import sys
import threading
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_lookup_inputs import HOSTILE

from sessionstore.api.session_db import SessionDB
from sessionstore.errors import ReadOnlyStoreError, SessionStoreError, ValueOutOfRangeError
from sessionstore.sessions import imports

TYPED = (TypeError, ValueError, LookupError, SessionStoreError)
COMPACT_DROPPED = frozenset({"system_prompt", "system_prompt_hash", "git_metadata_generation"})
"""What a compact listing row leaves out, as iot 0.22.2's does."""
HYPOTHESIS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def usage_of(db: SessionDB, session_id: str) -> list[dict[str, Any]]:
    return [
        {k: v for k, v in row.items() if k not in ("first_seen", "last_seen")}
        for row in db.get_model_usage(session_id)
    ]


def totals(db: SessionDB, session_id: str) -> dict[str, Any]:
    row = db.get_session(session_id)
    assert row is not None
    return {k: row[k] for k in ("input_tokens", "output_tokens", "api_call_count",
                                "estimated_cost_usd", "model", "billing_provider")}  # fmt: skip


# -- usage ---------------------------------------------------------------------------------------
def test_each_call_lands_in_its_routes_row_with_the_same_delta_as_the_totals(
    db: SessionDB,
) -> None:
    db.create_session("s", "cli", model="claude")
    db.update_token_counts("s", input_tokens=100, output_tokens=10, model="claude",
                           billing_provider="anthropic", api_call_count=1,
                           estimated_cost_usd=0.25)  # fmt: skip
    db.update_token_counts("s", input_tokens=40, model="gpt-5", billing_provider="openai",
                           billing_mode="api", api_call_count=1)  # fmt: skip
    db.update_token_counts("s", input_tokens=2, api_call_count=1)
    rows = usage_of(db, "s")
    # The third call names no route: it is the session's, whose mode the second call set.
    assert [(r["model"], r["billing_provider"], r["billing_mode"], r["task"], r["input_tokens"],
             r["api_call_count"]) for r in rows] == [
        ("claude", "anthropic", "", "", 100, 1),
        ("claude", "anthropic", "api", "", 2, 1),
        ("gpt-5", "openai", "api", "", 40, 1),
    ]  # fmt: skip
    assert sum(r["input_tokens"] for r in rows) == totals(db, "s")["input_tokens"] == 142
    assert totals(db, "s")["model"] == "claude"


def test_an_absolute_update_leaves_the_usage_rows_and_the_next_delta_adds_to_them(
    db: SessionDB,
) -> None:
    """Hermes 0.19.0: cumulative totals cannot be split into routes, so an absolute update
    writes no per-model row and leaves the rows as they are."""
    db.create_session("s", "gateway")
    db.update_token_counts("s", input_tokens=70, model="m", billing_provider="p")
    db.update_token_counts("s", input_tokens=0, absolute=True)
    assert totals(db, "s")["input_tokens"] == 0
    assert [r["input_tokens"] for r in usage_of(db, "s")] == [70]
    db.update_token_counts("s", input_tokens=5)
    assert totals(db, "s")["input_tokens"] == 5
    assert [r["input_tokens"] for r in usage_of(db, "s")] == [75]


def test_a_usage_row_past_its_bound_saturates_and_the_totals_take_the_delta(
    db: SessionDB,
) -> None:
    """The per-model row outlives absolute resets, so it can reach its column's bound while
    the session's total is small: the update is not refused for it, the row holds at the
    bound (both directions, counts and costs); a session total out of range still refuses
    everything."""
    db.create_session("s", "cli")
    db.update_token_counts("s", input_tokens=5, model="m", billing_provider="p")
    db.store.write(lambda conn: conn.execute(sa.text(
        "UPDATE session_model_usage SET input_tokens = 9223372036854775800,"
        " output_tokens = -9223372036854775800, estimated_cost_usd = 1.7e308")))  # fmt: skip
    db.update_token_counts("s", input_tokens=100, output_tokens=-100, estimated_cost_usd=1e308,
                           model="m", billing_provider="p")  # fmt: skip
    (row,) = usage_of(db, "s")
    assert row["input_tokens"] == 2**63 - 1 and isinstance(row["input_tokens"], int)
    assert row["output_tokens"] == -(2**63) and row["estimated_cost_usd"] == sys.float_info.max
    after = totals(db, "s")
    assert after["input_tokens"] == 105 and after["estimated_cost_usd"] == 1e308
    db.record_auxiliary_usage("s", "vision", model="m", input_tokens=2**62)
    db.record_auxiliary_usage("s", "vision", model="m", input_tokens=2**62)
    assert [r["input_tokens"] for r in usage_of(db, "s") if r["task"]] == [2**63 - 1]
    # The session's own total out of range: refused whole, nothing written.
    db.update_token_counts("s", input_tokens=2**63 - 106)
    before = totals(db, "s"), usage_of(db, "s")
    with pytest.raises(ValueOutOfRangeError):
        db.update_token_counts("s", input_tokens=2, model="m", billing_provider="p")
    assert (totals(db, "s"), usage_of(db, "s")) == before


def test_an_unknown_session_gets_no_row_but_an_auxiliary_call_creates_it(db: SessionDB) -> None:
    db.update_token_counts("ghost", input_tokens=10, model="m", billing_provider="p")
    assert db.get_session("ghost") is None and db.get_model_usage() == []
    db.record_auxiliary_usage("aux-only", "vision", model="gemini", input_tokens=3)
    assert db.get_session("aux-only")["source"] == "unknown"  # type: ignore[index]
    assert [(r["task"], r["api_call_count"], r["input_tokens"]) for r in usage_of(db, "aux-only")
            ] == [("vision", 1, 3)]  # fmt: skip
    assert totals(db, "aux-only")["input_tokens"] == 0, "never folded into the totals"


def test_deleting_or_pruning_a_session_takes_its_usage_rows(db: SessionDB) -> None:
    for sid in ("a", "b", "c"):
        db.create_session(sid, "cli")
        db.update_token_counts(sid, input_tokens=1, model="m", billing_provider="p")
    db.end_session("c", "user_exit")
    db.delete_session("a")
    db.prune_sessions(older_than_days=0)
    assert {row["session_id"] for row in db.get_model_usage()} == {"b"}


@pytest.mark.postgresql
def test_the_usage_upsert_is_one_statement_on_postgresql(
    fresh_migrated_pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The token update is two statements on the driver's cursor: the totals' UPDATE, then
    the per-model row's ``INSERT ... ON CONFLICT DO UPDATE`` (one statement, whatever the
    row's state)."""
    from sessionstore.sessions import usage

    ran: list[str] = []

    def remember(conn: Any, statement: Any, values: Any) -> Any:
        ran.append(" ".join(statement.sql.split()))
        return run(conn, statement, values)

    run = usage.run_compiled
    monkeypatch.setattr(usage, "run_compiled", remember)
    with SessionDB(url=fresh_migrated_pg_url) as db:
        db.create_session("s", "cli")
        for _ in range(2):  # the row's insert, then its update
            db.update_token_counts("s", input_tokens=3, model="m", billing_provider="p",
                                   api_call_count=1)  # fmt: skip
        assert usage_of(db, "s")[0]["input_tokens"] == 6
    assert [sql.split()[0] for sql in ran] == ["UPDATE", "INSERT"] * 2
    upsert = ran[1]
    assert upsert.startswith("INSERT INTO session_model_usage")
    assert ("ON CONFLICT (session_id, model, billing_provider, billing_base_url, billing_mode, "
            "task) DO UPDATE") in upsert  # fmt: skip


def test_concurrent_writers_lose_no_delta(store_url: str) -> None:
    """Four writers, each with its own store object (own connections), add to the same two
    rows at once: every acknowledged delta is in the totals and in the usage rows."""
    with SessionDB(url=store_url) as setup:
        setup.create_session("busy", "cli")
    calls, writers = 40, 4
    errors: list[BaseException] = []

    def write(index: int) -> None:
        try:
            with SessionDB(url=store_url) as mine:
                for n in range(calls):
                    mine.update_token_counts(
                        "busy", input_tokens=1, output_tokens=index, api_call_count=1,
                        model="even" if n % 2 else "odd", billing_provider="p",
                    )  # fmt: skip
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    with SessionDB(url=store_url) as check:
        rows = usage_of(check, "busy")
        assert sum(r["input_tokens"] for r in rows) == calls * writers
        assert sum(r["api_call_count"] for r in rows) == calls * writers
        assert sum(r["output_tokens"] for r in rows) == calls * sum(range(writers))
        assert {r["model"]: r["api_call_count"] for r in rows} == {
            "even": calls * writers // 2, "odd": calls * writers // 2,
        }  # fmt: skip
        assert totals(check, "busy")["input_tokens"] == calls * writers


# -- bad input -----------------------------------------------------------------------------------
NEW_WRITES = {
    "update_token_counts": lambda db, v: db.update_token_counts("s", input_tokens=1, model=v,
                                                                billing_provider="p"),
    "update_token_counts(billing_mode)": lambda db, v: db.update_token_counts(
        "s", input_tokens=1, billing_mode=v),
    "record_auxiliary_usage(task)": lambda db, v: db.record_auxiliary_usage("s", v),
    "record_auxiliary_usage(tokens)": lambda db, v: db.record_auxiliary_usage(
        "s", "vision", input_tokens=v),
    "record_auxiliary_usage(cost)": lambda db, v: db.record_auxiliary_usage(
        "s", "vision", estimated_cost_usd=v),
    "append_message(api_content)": lambda db, v: db.append_message("s", "user", "x",
                                                                   api_content=v),
    "append_message(effect_disposition)": lambda db, v: db.append_message(
        "s", "tool", "x", effect_disposition=v),
    "set_latest_user_api_content": lambda db, v: db.set_latest_user_api_content("s", v, "y"),
    "set_latest_user_api_content(api)": lambda db, v: db.set_latest_user_api_content(
        "s", "x", v),
    "save_gateway_routing_entry": lambda db, v: db.save_gateway_routing_entry(v, "{}"),
    "save_gateway_routing_entry(scope)": lambda db, v: db.save_gateway_routing_entry(
        "k", "{}", scope=v),
    "replace_gateway_routing_entries": lambda db, v: db.replace_gateway_routing_entries(v),
    "delete_gateway_routing_entries": lambda db, v: db.delete_gateway_routing_entries(v),
    "record_gateway_session_peer(display_name)": lambda db, v: db.record_gateway_session_peer(
        "s", source="cli", session_key="k", display_name=v),
    "set_expiry_finalized": lambda db, v: db.set_expiry_finalized(v),
    "set_compression_fallback_streak": lambda db, v: db.set_compression_fallback_streak("s", v),
    "promote_to_session_reset": lambda db, v: db.promote_to_session_reset("s", v),
    "set_auto_title_if_empty": lambda db, v: db.set_auto_title_if_empty("s", v),
    "archive_sessions": lambda db, v: db.archive_sessions(older_than_days=v),
    "archive_sessions(title_like)": lambda db, v: db.archive_sessions(title_like=v),
    "list_prune_candidates(min_cost)": lambda db, v: db.list_prune_candidates(min_cost=v),
    "prune_sessions(provider)": lambda db, v: db.prune_sessions(provider=v, older_than_days=1e6),
    "import_sessions": lambda db, v: db.import_sessions(v),
    "import_sessions(one)": lambda db, v: db.import_sessions([{"id": "new", "title": v,
                                                               "messages": [v]}]),
    "get_messages(limit)": lambda db, v: db.get_messages("s", limit=v),
    "get_messages(offset)": lambda db, v: db.get_messages("s", offset=v),
    "list_sessions_rich(search_query)": lambda db, v: db.list_sessions_rich(
        order_by_last_active=True, search_query=v),
    "find_session_by_origin": lambda db, v: db.find_session_by_origin(platform="cli",
                                                                      chat_id=v),
    "list_gateway_sessions": lambda db, v: db.list_gateway_sessions(platform=v),
    "get_compression_lineage": lambda db, v: db.get_compression_lineage(v),
    "export_session_lineage": lambda db, v: db.export_session_lineage(v),
    "get_resume_conversations": lambda db, v: db.get_resume_conversations(v),
    "get_ancestor_display_prefix": lambda db, v: db.get_ancestor_display_prefix(v),
    "get_conversation_root": lambda db, v: db.get_conversation_root(v),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(NEW_WRITES))
def test_hostile_arguments_give_a_typed_answer_and_leave_the_store_whole(
    db: SessionDB, name: str
) -> None:
    db.create_session("s", "cli")
    db.append_message("s", "user", "x")
    db.update_token_counts("s", input_tokens=1, model="m", billing_provider="p")
    call = NEW_WRITES[name]

    @HYPOTHESIS
    @given(value=HOSTILE)
    def check(value: Any) -> None:
        with contextlib.suppress(*TYPED):
            call(db, value)
        session = db.get_session("s")
        if session is not None:  # a prune may take it; nothing may be half-written
            usage = sum(row["input_tokens"] for row in db.get_model_usage("s")
                        if row["task"] == "")  # fmt: skip
            assert usage == session["input_tokens"]
            assert session["message_count"] == len(db.get_messages("s", include_inactive=True))

    check()


@HYPOTHESIS
@given(payload=st.lists(st.dictionaries(st.sampled_from(
    ["id", "title", "source", "parent_session_id", "messages", "model_config", "started_at",
     "input_tokens", "archived"]), HOSTILE, max_size=5), max_size=4))  # fmt: skip
def test_an_import_is_all_or_nothing_whatever_the_payload(
    db: SessionDB, payload: list[dict[str, Any]]
) -> None:
    # One store for all the examples (``db`` is set up once per test), emptied after each: a
    # store per example opened 40 more on each dialect (two server backends each on
    # PostgreSQL) for a proof about the import, not the open.
    before = db.session_count(include_archived=True)
    try:
        result = db.import_sessions(payload)
    except TYPED:
        result = {"ok": False, "imported": 0}
    after = db.session_count(include_archived=True)
    assert after - before == (result["imported"] if result["ok"] else 0)
    db.store.write(lambda conn: conn.execute(sa.text("DELETE FROM messages")))
    db.store.write(lambda conn: conn.execute(sa.text("DELETE FROM sessions")))


def test_import_limits_are_hermes_019s(db: SessionDB) -> None:
    with pytest.raises(ValueError, match="at most 500"):
        db.import_sessions([{"id": f"s{n}"} for n in range(imports.MAX_SESSIONS + 1)])
    with pytest.raises(ValueError, match="must be a list"):
        db.import_sessions({"id": "s"})  # type: ignore[arg-type]
    result = db.import_sessions([{"id": "big", "messages": [
        {"role": "user", "content": "x"}] * (imports.MAX_MESSAGES_PER_SESSION + 1)}])  # fmt: skip
    assert result["errors"] == [{"index": 0, "error": "messages exceeds the per-session import "
                                 "limit", "session_id": "big"}]  # fmt: skip
    assert db.session_count(include_archived=True) == 0


# -- maintenance and listing ---------------------------------------------------------------------
def test_rebuild_fts_rebuilds_what_search_reads(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.append_message("s", "user", "rebuild the 部署 index for kubernetes")
    assert db.rebuild_fts() >= 1
    assert [hit["session_id"] for hit in db.search_messages("kubernetes")] == ["s"]
    assert [hit["session_id"] for hit in db.search_messages("部署")] == ["s"]


def test_rebuild_fts_refuses_a_read_only_store(tmp_path: Any) -> None:
    path = tmp_path / "state.db"
    SessionDB(db_path=path).close()
    with SessionDB(db_path=path, read_only=True) as db, pytest.raises(ReadOnlyStoreError):
        db.rebuild_fts()


def test_compact_rows_and_search_query_on_every_path(db: SessionDB) -> None:
    db.create_session("root", "cli", system_prompt="p" * 5000)
    db.set_session_title("root", "AN-94 rifle notes")
    db.append_message("root", "user", "hello")
    db.end_session("root", "compression")
    db.create_session("tip", "cli", parent_session_id="root", system_prompt="q" * 5000)
    db.append_message("tip", "user", "continued")
    for kwargs in ({}, {"order_by_last_active": True}, {"include_children": True},
                   {"source": "cli"}):  # fmt: skip
        rows = db.list_sessions_rich(compact_rows=True, **kwargs)
        assert rows and all(COMPACT_DROPPED.isdisjoint(row) for row in rows), kwargs
        full = db.list_sessions_rich(**kwargs)
        assert [{k: v for k, v in row.items() if k not in COMPACT_DROPPED} for row in full] == rows
    by_activity = {"order_by_last_active": True}
    assert [r["id"] for r in db.list_sessions_rich(search_query="an94", **by_activity)] == ["tip"]
    assert [r["id"] for r in db.list_sessions_rich(search_query="TIP", **by_activity)] == ["tip"]
    assert db.list_sessions_rich(search_query="an-95", **by_activity) == []
    assert len(db.list_sessions_rich(search_query="an94")) == 1, "by start: no filter"


def test_archive_sessions_takes_whole_lineages_and_is_idempotent(db: SessionDB) -> None:
    db.create_session("root", "cli")
    db.end_session("root", "compression")
    db.create_session("tip", "cli", parent_session_id="root")
    db.end_session("tip", "done")
    db.create_session("other", "cli")
    db.end_session("other", "user_exit")
    # iot 0.22.2 matches a conversation by its tip only: a compressed-away segment never
    # archives its continuation (which might be open and active).
    assert db.archive_sessions(older_than_days=0, end_reason="compression") == 0
    assert db.archive_sessions(older_than_days=0, end_reason="done") == 1
    assert {r["id"] for r in db.list_sessions_rich(archived_only=True, include_children=True)} \
        == {"root", "tip"}
    assert db.archive_sessions(older_than_days=0, end_reason="done") == 0
    assert [r["id"] for r in db.list_prune_candidates(0)] == ["root", "tip", "other"]
    assert [r["id"] for r in db.list_prune_candidates(0, archived=False)] == ["other"]


def test_one_sessions_rich_row_compact_or_full(db: SessionDB) -> None:
    """iot 0.22.2's get_session_rich_row: the listing's row for one id, not projected."""
    db.create_session("root", "cli", system_prompt="big blob " * 50)
    db.append_message("root", "user", "first words")
    db.end_session("root", "compression")
    db.create_session("tip", "cli", parent_session_id="root")
    [listed] = db.list_sessions_rich()
    full = db.get_session_rich_row("root")
    assert full is not None
    assert set(full) == set(listed) - {"_lineage_root_id", "_lineage_ids", "continuation_kind"}
    assert (full["id"], full["system_prompt"], full["preview"]) == (
        "root", "big blob " * 50, "first words",
    )
    compact = db.get_session_rich_row("root", compact_rows=True)
    assert compact == {key: value for key, value in full.items() if key not in COMPACT_DROPPED}
    assert db.get_session_rich_row("ghost") is None
    assert db.get_session_rich_row("\x00") is None
    db.create_session("other", "cli")
    batch = db.get_session_rich_rows(["root", "other", "ghost", "", "\x00", "root"], True)
    assert set(batch) == {"root", "other"}
    assert batch["root"] == compact
    assert db.get_session_rich_rows([]) == {}


def _compression_chain(db: SessionDB, *ids: str) -> None:
    parent = None
    for session_id in ids:
        db.create_session(session_id, "cli", parent_session_id=parent)
        parent = session_id
    for session_id in ids[:-1]:
        db.end_session(session_id, "compression")


def test_a_continuation_takes_its_compressed_ancestors_title(db: SessionDB) -> None:
    """Hermes 0.19 / iot 0.22.2: the ancestor is hidden behind its tip, so the user could
    never free its title; renaming the tip to it moves it (up a chain of any length)."""
    _compression_chain(db, "root", "mid", "tip")
    db.set_session_title("root", "deep-dive")
    db.set_session_title("tip", "deep-dive #2")
    assert db.set_session_title("tip", "deep-dive") is True
    assert (db.get_session_title("tip"), db.get_session_title("root")) == ("deep-dive", None)
    assert db.get_session_title_source("root") is None
    # The ancestor cannot take it back from its continuation, nor can a stranger.
    with pytest.raises(ValueError, match="already in use by session tip"):
        db.set_session_title("root", "deep-dive")
    db.create_session("stranger", "cli")
    with pytest.raises(ValueError, match="already in use by session tip"):
        db.set_session_title("stranger", "deep-dive")


def test_a_child_of_a_session_ended_otherwise_does_not_take_its_title(db: SessionDB) -> None:
    db.create_session("parent", "cli")
    db.create_session("child", "cli", parent_session_id="parent")
    db.end_session("parent", "user_exit")
    db.set_session_title("parent", "shared")
    with pytest.raises(ValueError, match="already in use by session parent"):
        db.set_session_title("child", "shared")
    assert db.get_session_title("parent") == "shared"


def test_an_import_with_a_lone_surrogate_is_stored_with_replacement_characters(
    db: SessionDB,
) -> None:
    result = db.import_sessions(
        [{"id": "dirty", "title": "t \ud835", "messages": [
            {"role": "tool", "content": "scraped \ud835 price", "tool_name": "web_search"}]}]
    )  # fmt: skip
    assert result["ok"] is True, result
    [message] = db.get_messages("dirty")
    assert message["content"] == "scraped \ufffd price"
