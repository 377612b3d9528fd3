"""iot 0.22.2's small transcript reads on SQLite and PostgreSQL (issue 29, item 3): the display
and resume counts across rewinds, compaction and lineages, the resume and export guards and
their typed errors, a peer's conversation boundary (advanced by a reset end, never by a
compression, kept through deletes), the pull-request and Todo scans, ``logical_size_bytes``,
and hostile inputs (free-form ids and contents: a property test). The release is the oracle in
``tests/hermes/test_real_iot_transcript_reads.py``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessionstore.api.session_db import SessionDB
from sessionstore.errors import SessionExportTooLargeError, SessionResumeTooLargeError

TODO = json.dumps({"todos": [{"id": "1", "content": "ship", "status": "pending"}]})
TODO_CALL = [{"id": "t1", "type": "function", "function": {"name": "todo_list", "arguments": "{}"}}]


def _lineage(db: SessionDB) -> None:
    """``p`` (3 rows, one rewound) continued by ``c`` after compression (4 rows, two of them
    compaction-archived once ``c`` is compacted); ``b`` a branch of ``c``."""
    db.create_session("p", "cli")
    first = db.append_message("p", "user", "ask")
    db.append_message("p", "assistant", "answer")
    db.append_message("p", "user", "undone")
    db.rewind_to_message("p", first + 2)
    db.end_session("p", "compression")
    db.create_session("c", "cli", parent_session_id="p")
    db.append_message("c", "user", "next")
    db.append_message("c", "assistant", "reply")
    db.archive_and_compact("c", [{"role": "user", "content": "summary"}])
    db.create_session("b", "cli", parent_session_id="c", model_config={"_branched_from": "c"})
    db.append_message("b", "user", "branched")


def test_counts_follow_display_resume_and_export_scopes(db: SessionDB) -> None:
    _lineage(db)
    assert db.display_message_count("p") == 2  # the rewound row is not painted
    assert db.display_message_count("c") == 3  # archived rows are, with the summary
    assert db.get_resume_message_count("c") == 5  # p's 2 and c's 3
    assert db.get_resume_message_count("c", tip_only=True) == 1  # the live summary
    assert db.get_resume_message_count("b") == 1  # a branch owns its copy only
    assert db.assert_export_safe("p", 3) == 3  # an export holds the rewound row too
    assert db.assert_resume_safe("c", 5) == 5
    assert db.assert_resume_safe("c", 1, tip_only=True) == 1


def test_a_model_only_row_is_not_painted(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.append_message("s", "user", "ask")
    db.append_message("s", "assistant", "hidden", display_metadata={"model_only": True})
    db.append_message("s", "assistant", "shown", display_metadata={"model_only": False})
    assert db.display_message_count("s") == 2 and db.get_resume_message_count("s") == 3


def test_the_guards_raise_iots_typed_errors(db: SessionDB) -> None:
    _lineage(db)
    with pytest.raises(SessionResumeTooLargeError) as resume:
        db.assert_resume_safe("c", 4)
    assert isinstance(resume.value, ValueError)
    assert (resume.value.message_count, resume.value.limit) == (5, 4)
    assert resume.value.scope == "across its lineage"
    with pytest.raises(SessionExportTooLargeError) as export:
        db.assert_exports_safe(["b", "p", "c"], 2)
    assert isinstance(export.value, ValueError)
    assert (export.value.session_id, export.value.message_count, export.value.limit) == ("p", 3, 2)
    assert db.assert_resume_safe("c", 0) == 0 and db.assert_export_safe("p", 0) == 0
    assert db.assert_exports_safe(["p", "c"], None) is None  # iot's default of 20,000


@pytest.mark.parametrize("bound", [-1, -0.0 - 1, True, 1.5, math.nan, math.inf, "5", [5]])
def test_a_bound_that_is_no_count_is_refused_before_any_read(db: SessionDB, bound: Any) -> None:
    for guard in (db.assert_resume_safe, db.assert_export_safe):
        with pytest.raises((ValueError, TypeError)):
            guard("s", bound)
    with pytest.raises((ValueError, TypeError)):
        db.assert_exports_safe(["s"], bound)


def test_a_reset_end_advances_the_peers_boundary_and_a_delete_keeps_it(db: SessionDB) -> None:
    db.create_session("a", "telegram", session_key="k")
    assert db.latest_conversation_boundary("k", "telegram") is None
    db.end_session("a", "compression")
    assert db.latest_conversation_boundary("k", "telegram") is None
    db.create_session("b", "telegram", session_key="k")
    db.end_session("b", "idle")
    db.end_session("b", "daily")  # already ended: no second boundary
    assert db.latest_conversation_boundary("k", "telegram") == 1
    db.create_session("c", "telegram", session_key="k")
    assert db.promote_to_session_reset("c")
    db.delete_session("c")
    db.prune_sessions(older_than_days=0)
    assert db.latest_conversation_boundary("k", "telegram") == 2
    assert db.latest_conversation_boundary("k", "cli") is None
    db.create_session("keyless", "telegram")
    db.end_session("keyless", "session_reset")
    assert db.latest_conversation_boundary("", "telegram") is None


def test_the_pull_request_scan_takes_tool_rows_of_the_given_sessions_only(db: SessionDB) -> None:
    db.create_session("a", "cli")
    db.create_session("b", "cli")
    db.append_message("a", "tool", "https://github.com/o/r/Pull/1", tool_name="gh")
    db.append_message("b", "user", "see /pull/2")
    db.append_message("b", "tool", "no link")
    db.append_message("b", "tool", "merged /pull/3")
    db.append_message("b", "tool", [{"type": "text", "text": "/pull/4"}])
    hits = db.find_pr_url_messages(["b", "a", "b"])
    assert [hit["session_id"] for hit in hits[:2]] == ["a", "b"]
    assert hits[1] == {"session_id": "b", "content": "merged /pull/3"}
    assert len(hits) == 3 and hits[2]["content"].startswith("\x00json:")  # as Hermes stores it
    assert db.find_pr_url_messages("b") == hits[1:]
    assert db.find_pr_url_messages([]) == [] and db.find_pr_url_messages(["", "\x00"]) == []


def test_the_todo_result_is_the_newest_valid_one_answering_its_call(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.append_message("s", "assistant", None, tool_calls=TODO_CALL)
    db.append_message("s", "tool", TODO, tool_name="todo", tool_call_id="t1")
    assert db.get_latest_todo_result("s") == TODO
    # Newer, but answering no call of the assistant turn before it: skipped.
    db.append_message("s", "user", "hi")
    db.append_message("s", "tool", TODO.replace("ship", "x"), tool_name="todo", tool_call_id="t1")
    # Newer, paired, but its revision is no integer: skipped.
    db.append_message("s", "assistant", None, tool_calls=TODO_CALL)
    infinite = '{"todos": [], "revision": 1e999}'  # iot's int() raises out of its read here
    db.append_message("s", "tool", infinite, tool_name="todo_list", tool_call_id="t1")
    assert db.get_latest_todo_result("s") == TODO
    assert db.get_latest_todo_result("s", max_chars=len(TODO) - 1) is None
    assert db.get_latest_todo_result("s", max_chars=-3) is None
    assert db.get_latest_todo_result("") is None and db.get_latest_todo_result(7) is None  # type: ignore[arg-type]


def test_the_logical_size_is_the_stores_own(db: SessionDB) -> None:
    before = db.logical_size_bytes()
    assert isinstance(before, int) and before > 0
    db.create_session("s", "cli")
    db.append_messages("s", [{"role": "user", "content": "x" * 20_000} for _ in range(40)])
    after = db.logical_size_bytes()
    assert after is not None and after > before
    if db.store.dialect.name == "sqlite":
        pages, size = db.store.read(
            lambda conn: (
                conn.exec_driver_sql("PRAGMA page_count").scalar_one(),
                conn.exec_driver_sql("PRAGMA page_size").scalar_one(),
            )
        )
        assert after == pages * size
    db.close()
    assert db.logical_size_bytes() is None  # a closed store: None, as iot's


# -- hostile inputs ------------------------------------------------------------------------------
@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def shared(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SessionDB]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('transcript_reads')}/state.db"
    else:
        # A database of this module's own at head (a copy of the migrated template).
        template = request.getfixturevalue("migrated_pg_template")
        url = request.getfixturevalue("pg_databases").create(template=template)
    database = SessionDB(url=url)
    database.create_session("s", "cli")
    database.append_message("s", "assistant", None, tool_calls=TODO_CALL)
    yield database
    database.close()


hostile_text = st.one_of(st.text(), st.text(alphabet='/pulPUL\x00\ud800{}[]"\\:0-9e', max_size=30))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
          HealthCheck.function_scoped_fixture])  # fmt: skip
@given(text=hostile_text)
def test_free_form_ids_and_contents_never_break_a_read(shared: SessionDB, text: str) -> None:
    db = shared
    expected = 1 if text == "s" else 0
    assert db.display_message_count(text) == expected
    assert db.get_resume_message_count(text) == expected
    assert db.assert_export_safe(text, 10) == expected
    assert db.latest_conversation_boundary(text, text) is None
    assert db.get_latest_todo_result(text) is None
    try:
        row = db.append_message("s", "tool", text, tool_name="todo", tool_call_id="t1")
    except (ValueError, TypeError):
        return  # text no database can hold is refused before the write
    try:
        hits = db.find_pr_url_messages([text, "s"])
        assert all("/pull/" in hit["content"].lower() for hit in hits)
        assert len(hits) == (1 if "/pull/" in text.lower() else 0)
        found = db.get_latest_todo_result("s")
        assert found is None or isinstance(json.loads(found)["todos"], list)
    finally:
        db.store.write(lambda conn: conn.execute(sa.text(f"DELETE FROM messages WHERE id = {row}")))
