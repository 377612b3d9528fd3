"""Today's Hermes files, for real: hermes-agent 0.18.2 (schema v19) and 0.19.0 (v22).

Each release builds a populated ``state.db`` with its own ``SessionDB``, through everything its
API writes (`tests/support/real_hermes_driver.py`: ``build`` and ``later_features``: gateway
origins and the routing index, per-model usage with a model switch and an auxiliary call, the
API-content sidecar, effect dispositions, the fallback streak, a reset boundary, an imported
session, a background delegation row). The oracle is that release itself: what its own reads
return from a backup of the original, and what Hermes's Insights reads of per-model usage (the
wheel's own query). Then:

- sessionstore adopts the file, every row and value of every table is kept, and our reads
  equal the release's reads (the per-model usage rows included);
- the release reopens the adopted file, reads the same, and sees our writes: new messages, and
  our token updates and auxiliary calls in the per-model usage its Insights reads;
- a downgrade gives each older release (0.18.2 at v19, 0.18.0 at v17) a file it reads as it
  read our head;
- a copy into PostgreSQL reads the same, per-model usage, routing and delegations included.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from legacy_v18_v22 import REVISION_OF
from real_hermes import HERMES_RELEASES, RealHermes, backup_copy
from real_hermes_driver import (
    BRANCH_ID,
    CHAIN_TIP_ID,
    COMPACTED_ID,
    CONTINUATION_ID,
    DELEGATE_ID,
    DELEGATION_ID,
    ROOT_ID,
    ROUTING_SCOPE,
    TELEGRAM_ID,
)
from test_real_hermes_files import (
    RELEASE_SEMANTICS,
    assert_reads_match,
    assert_rows_kept,
    our_reads,
    raw_tables,
    schema_sql,
)

from sessionstore.api.session_db import SessionDB
from sessionstore.ops import transfer
from sessionstore.schema import migrate

# Each test starts the real Hermes 0.19.0 (a program): the full run only, as the other
# real-Hermes files.
pytestmark = pytest.mark.slow
NEW_FIELD_SCHEMAS = (19, 22)
HERMES_019 = 22
OLDER_RELEASES = {22: (19, 17), 19: (17,)}
"""The older releases a downgrade of each file must serve, newest first."""
USAGE_SUMS = ("api_call_count", "input_tokens", "output_tokens", "cache_read_tokens",
              "cache_write_tokens", "reasoning_tokens", "estimated_cost_usd")  # fmt: skip


class NewFieldFiles:
    """Built once per test session and schema: the pristine file and its release's reads."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.built: dict[int, tuple[Path, dict[str, Any], dict[str, Any]]] = {}

    def hermes(self, schema: int) -> RealHermes:
        return RealHermes(schema, self.root / "home" / HERMES_RELEASES[schema])

    def get(self, schema: int) -> tuple[Path, dict[str, Any], dict[str, Any]]:
        if schema not in self.built:
            hermes = self.hermes(schema)
            pristine = self.root / f"field-v{schema}.db"
            made = hermes.build(pristine)
            reads = hermes.read(backup_copy(pristine, self.root / f"read-v{schema}.db"))
            self.built[schema] = (pristine, made, reads)
        return self.built[schema]


@pytest.fixture(scope="session")
def new_files(tmp_path_factory: pytest.TempPathFactory) -> NewFieldFiles:
    return NewFieldFiles(tmp_path_factory.mktemp("field-v19-v22"))


def adopted(new_files: NewFieldFiles, schema: int, target: Path) -> Path:
    pristine, _, _ = new_files.get(schema)
    path = backup_copy(pristine, target)
    SessionDB(db_path=path, backup_on_adopt=False).close()
    return path


def our_later_reads(db: SessionDB) -> dict[str, Any]:
    """`real_hermes_driver.later_reads` through our API (the per-model usage as Insights
    reads it: every key it selects)."""
    insights_keys = ("session_id", "model", "billing_provider", "billing_base_url",
                     "api_call_count", "input_tokens", "output_tokens", "cache_read_tokens",
                     "cache_write_tokens", "reasoning_tokens", "estimated_cost_usd",
                     "actual_cost_usd", "cost_status", "cost_source", "billing_mode")  # fmt: skip
    import json

    usage = [{key: row[key] for key in insights_keys} for row in db.get_model_usage()]
    return {
        "routing": db.load_gateway_routing_entries(),
        "routing_scoped": db.load_gateway_routing_entries(scope=ROUTING_SCOPE),
        "gateway_sessions": db.list_gateway_sessions(active_only=False),
        "origin": db.find_session_by_origin(platform="telegram", chat_id="4242"),
        "lineages": {
            sid: db.get_compression_lineage(sid) for sid in (ROOT_ID, CHAIN_TIP_ID, BRANCH_ID)
        },
        "lineage_export": db.export_session_lineage(CONTINUATION_ID),
        "resume": list(db.get_resume_conversations(CHAIN_TIP_ID)),
        "ancestor_prefix": db.get_ancestor_display_prefix(CHAIN_TIP_ID),
        "conversation_root": db.get_conversation_root(DELEGATE_ID),
        "fallback_streak": db.get_compression_fallback_streak(COMPACTED_ID),
        "messages_page": db.get_messages(CHAIN_TIP_ID, limit=2, offset=1),
        "search_listing": db.list_sessions_rich(order_by_last_active=True,
                                                search_query="deploy", compact_rows=True),
        "prune_candidates": db.list_prune_candidates(older_than_days=0),
        "model_usage": sorted(usage, key=lambda row: json.dumps(row, sort_keys=True)),
    }


def all_our_reads(db: SessionDB) -> dict[str, Any]:
    import json

    # As the driver prints them (JSON): tuples are lists.
    reads: dict[str, Any] = json.loads(json.dumps({**our_reads(db), **our_later_reads(db)},
                                                  default=repr))  # fmt: skip
    return reads


def kept_tables(path: Path) -> dict[str, list[dict[str, Any]]]:
    """``raw_tables``, without the ``state_meta`` keys our head (v31) writes about the file
    itself (its identity, search layout marks: ``transfer.STORE_LOCAL_STATE_KEYS``): rows of
    the store, not of what Hermes wrote."""
    tables = raw_tables(path)
    if "state_meta" in tables:
        tables["state_meta"] = [row for row in tables["state_meta"]
                                if row["key"] not in transfer.STORE_LOCAL_STATE_KEYS]  # fmt: skip
    return tables


def usage_totals(rows: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, float]]:
    """Insights' per-model figures: each (session, model)'s sums."""
    sums: dict[tuple[str, str], dict[str, float]] = {}
    for row in rows:
        entry = sums.setdefault((row["session_id"], row["model"]), dict.fromkeys(USAGE_SUMS, 0))
        for name in USAGE_SUMS:
            entry[name] += row[name] or 0
    return sums


@pytest.mark.parametrize("schema", NEW_FIELD_SCHEMAS, ids=lambda v: f"v{v}")
def test_a_new_field_file_is_adopted_keeping_every_row_and_reads_as_the_release(
    new_files: NewFieldFiles, tmp_path: Path, schema: int
) -> None:
    pristine, made, release_reads = new_files.get(schema)
    path = backup_copy(pristine, tmp_path / "state.db")
    before = raw_tables(path)

    db = SessionDB(db_path=path)
    try:
        assert db.adoption_backup is not None
        ours = all_our_reads(db)
    finally:
        db.close()

    assert migrate.current(f"sqlite:///{path}") == migrate.HEAD_REVISION
    after = kept_tables(path)
    assert_rows_kept(before, after)
    assert_reads_match(release_reads, ours, f"sessionstore on a v{schema} file")
    later = {"gateway_origin", "gateway_routing"} | (
        {"model_usage", "api_content", "fallback_streak", "import", "delegation"}
        if schema == HERMES_019 else set()
    )  # fmt: skip
    assert later <= set(made["features"]), made["features"]
    if schema == HERMES_019:
        assert ours["model_usage"] == release_reads["model_usage"] != []
        # Every column Hermes wrote is kept (our head, v31, adds origin_session_id).
        assert [{key: row[key] for key in old} for old, row in zip(
            before["async_delegations"], after["async_delegations"], strict=True)
        ] == before["async_delegations"] != []  # fmt: skip
    else:
        # Hermes 0.19.0's v20 step seeds a row per session with tokens from its totals.
        seeded = {(row["session_id"], row["model"]) for row in after["session_model_usage"]}
        assert (ROOT_ID, "claude-sonnet-4") in seeded


@pytest.mark.parametrize("schema", NEW_FIELD_SCHEMAS, ids=lambda v: f"v{v}")
def test_our_upgrade_of_a_new_field_file_equals_hermes_019s(
    new_files: NewFieldFiles, tmp_path: Path, schema: int
) -> None:
    """Hermes 0.19.0 migrates a file by opening it: our adoption leaves the same rows in every
    table Hermes has (per-model usage seeded from the v19 totals included)."""
    ours = adopted(new_files, schema, tmp_path / "ours.db")
    pristine, _, _ = new_files.get(schema)
    theirs = backup_copy(pristine, tmp_path / "theirs.db")
    new_files.hermes(HERMES_019).read(theirs)
    our_tables, their_tables = kept_tables(ours), raw_tables(theirs)
    clocks = {"first_seen", "last_seen"}  # Hermes's seed stamps started_at; compared below
    for table, rows in their_tables.items():
        assert len(our_tables[table]) == len(rows), table
        for theirs_row, ours_row in zip(rows, our_tables[table], strict=True):
            mine = {key: ours_row[key] for key in theirs_row if key not in clocks}
            assert mine == {k: v for k, v in theirs_row.items() if k not in clocks}, table


@pytest.mark.parametrize("schema", NEW_FIELD_SCHEMAS, ids=lambda v: f"v{v}")
def test_the_release_reopens_our_file_reads_the_same_and_sees_our_writes(
    new_files: NewFieldFiles, tmp_path: Path, schema: int
) -> None:
    path = adopted(new_files, schema, tmp_path / "state.db")
    db = SessionDB(db_path=path)
    try:
        ours_before = all_our_reads(db)
        new_ids = [
            db.append_message(CHAIN_TIP_ID, "user", "Rotate the etcd snapshots nightly",
                              api_content="Rotate the etcd snapshots nightly (sent)"),
            db.append_message(CHAIN_TIP_ID, "assistant", "已设置每晚轮换快照。",
                              finish_reason="stop"),
        ]  # fmt: skip
        db.update_token_counts(CHAIN_TIP_ID, input_tokens=700, output_tokens=70,
                               model="claude-sonnet-4", billing_provider="anthropic",
                               api_call_count=1, estimated_cost_usd=0.01)  # fmt: skip
        db.update_token_counts(CHAIN_TIP_ID, input_tokens=50, model="qwen3-coder",
                               billing_provider="openrouter", api_call_count=1)  # fmt: skip
        db.record_auxiliary_usage(CHAIN_TIP_ID, "title_generation", model="claude-haiku",
                                  input_tokens=30, output_tokens=8)  # fmt: skip
        db.save_gateway_routing_entry("agent:main:slack:dm:9", '{"session_id": "x"}')
        ours_usage = usage_totals(all_our_reads(db)["model_usage"])
    finally:
        db.close()
    schema_before = schema_sql(path)
    release = new_files.hermes(schema)

    theirs = release.read(path)

    if schema == HERMES_019:
        assert schema_sql(path) == schema_before, "Hermes 0.19.0 changed our file's schema"
    tip = theirs["messages"][CHAIN_TIP_ID]
    assert [m["id"] for m in tip[-2:]] == new_ids
    assert [m["content"] for m in tip[-2:]] == [
        "Rotate the etcd snapshots nightly", "已设置每晚轮换快照。"]
    assert theirs["routing"].get("agent:main:slack:dm:9") == '{"session_id": "x"}'
    changed_by_our_writes = {
        "messages", "messages_with_inactive", "conversations", "searches", "searches_inactive",
        "message_count", "message_counts", "sessions", "listings", "routing", "model_usage",
        "resume", "messages_page", "gateway_sessions", "search_listing", "prune_candidates",
        "lineage_export",
    }  # fmt: skip
    unchanged = {k: v for k, v in theirs.items() if k not in changed_by_our_writes}
    assert_reads_match(unchanged, ours_before,
                       f"{release.release} on our adopted v{schema} file")  # fmt: skip
    if schema == HERMES_019:
        # Insights (the wheel's own query) sees every token we recorded, per model.
        assert usage_totals(theirs["model_usage"]) == ours_usage
        assert ours_usage[(CHAIN_TIP_ID, "qwen3-coder")]["input_tokens"] == 50
        assert ours_usage[(CHAIN_TIP_ID, "claude-haiku")]["api_call_count"] == 1


@pytest.mark.parametrize("schema", NEW_FIELD_SCHEMAS, ids=lambda v: f"v{v}")
def test_a_downgrade_gives_each_older_release_a_file_it_reads(
    new_files: NewFieldFiles, tmp_path: Path, schema: int
) -> None:
    path = adopted(new_files, schema, tmp_path / "state.db")
    with SessionDB(db_path=path) as db:
        ours = all_our_reads(db)
    url = f"sqlite:///{path}"
    for older in OLDER_RELEASES[schema]:
        migrate.downgrade(url, REVISION_OF[older])
        with closing(sqlite3.connect(path)) as conn:
            assert conn.execute("SELECT version FROM schema_version").fetchall() == [(older,)]
        release = new_files.hermes(older)
        theirs = release.read(backup_copy(path, tmp_path / f"read-{older}.db"))
        # What that release returns, it returns as our head read it (its own rules for the
        # listings and replays aside, as for every older release).
        assert_reads_match(theirs, ours, f"{release.release} after a downgrade to v{older}",
                           skip=RELEASE_SEMANTICS)  # fmt: skip


@pytest.mark.postgresql
@pytest.mark.parametrize("schema", NEW_FIELD_SCHEMAS, ids=lambda v: f"v{v}")
def test_a_new_field_file_copied_to_postgresql_reads_the_same(
    new_files: NewFieldFiles, tmp_path: Path, empty_pg_url: str, schema: int
) -> None:
    path = adopted(new_files, schema, tmp_path / "state.db")
    with SessionDB(db_path=path) as db:
        expected = all_our_reads(db)
    before = raw_tables(path)
    transfer.copy(f"sqlite:///{path}", empty_pg_url)
    with SessionDB(url=empty_pg_url) as db:
        ours = all_our_reads(db)
        delegations = db.store.read(lambda conn: [
            dict(row) for row in conn.exec_driver_sql(
                "SELECT * FROM async_delegations ORDER BY delegation_id").mappings()
        ])  # fmt: skip
    # Search ranking and snippets are PostgreSQL's own (tests/hermes/test_real_hermes_files.py
    # compares the hits); compression leases stay behind (a process's seconds-long claim);
    # every other read is the same.
    plain = {k: v for k, v in expected.items()
             if k not in ("searches", "searches_inactive", "lock_holder")}  # fmt: skip
    assert_reads_match(plain, ours, f"PostgreSQL copy of a v{schema} file")
    assert [{key: row[key] for key in old} for old, row in zip(
        before["async_delegations"], delegations, strict=True)] == before["async_delegations"]
    if schema == HERMES_019:
        assert [row["delegation_id"] for row in delegations] == [DELEGATION_ID]
    assert ours["routing"] == expected["routing"] and ours["routing"]
    assert usage_totals(ours["model_usage"]) == usage_totals(expected["model_usage"])
    assert TELEGRAM_ID in {row["id"] for row in ours["gateway_sessions"]}

    # And back: the PostgreSQL store copied into a new SQLite file is a file Hermes 0.19.0
    # reads as we read the original (its own release's reads, every key it returns).
    back = tmp_path / "back.db"
    transfer.copy(empty_pg_url, f"sqlite:///{back}")
    theirs = new_files.hermes(HERMES_019).read(back)
    searched = ("searches", "searches_inactive")
    assert_reads_match({k: v for k, v in theirs.items() if k != "lock_holder"
                        and k not in searched}, expected,
                       f"Hermes 0.19.0 on a v{schema} file copied to PostgreSQL and back")
    # Its search too: a store this package creates keeps the layout Hermes 0.19.0 searches.
    assert_reads_match({k: theirs[k] for k in searched}, expected,
                       f"Hermes 0.19.0's search of a v{schema} file copied and back")
