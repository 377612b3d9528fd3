"""``db doctor`` on counters a damaged or hand-edited SQLite file holds as anything at all.

SQLite types values, not columns: a ``message_count`` can hold text, a BLOB, a fraction or an
integer no row count matches. The doctor is the tool for such files: it reported
``invalid literal for int() with base 10: 'many'`` and stopped. Now such a counter disagrees
with the rows (it counts nothing), is reported, and ``--fix`` writes the rows' counts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from store_library import damaging_transaction, engine_like_the_store
from typer.testing import CliRunner

from sessionstore import Store, cli
from sessionstore.api.session_db import SessionDB
from sessionstore.ops import doctor

STORED_VALUES = st.one_of(
    st.none(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),  # SQLite stores NaN as NULL
    st.text(max_size=8),
    st.binary(max_size=8),
)


def _store_with(tmp_path: Path, message_count: Any, tool_call_count: Any) -> str:
    url = f"sqlite:///{tmp_path / 'damaged.db'}"
    with SessionDB(url=url) as db:
        db.create_session("s", "cli")
        db.append_message("s", "user", "run it")
        db.append_message("s", "assistant", "", tool_calls=[
            {"id": "c1", "type": "function", "function": {"name": "shell", "arguments": "{}"}}
        ])  # fmt: skip
        db.append_message("s", "tool", "done", tool_call_id="c1", tool_name="shell")
    engine = engine_like_the_store(url)
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE sessions SET message_count = :m, tool_call_count = :t"),
            {"m": message_count, "t": tool_call_count},
        )
    engine.dispose()
    return url


def _counters(url: str) -> tuple[Any, Any]:
    engine = engine_like_the_store(url)
    with engine.connect() as conn:
        row = conn.execute(sa.text("SELECT message_count, tool_call_count FROM sessions")).one()
    engine.dispose()
    return row[0], row[1]


@pytest.mark.slow
@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(message_count=STORED_VALUES, tool_call_count=STORED_VALUES)
@example(message_count="many", tool_call_count=1)
@example(message_count=3, tool_call_count=2)
@example(message_count="many", tool_call_count=2.0)
@example(message_count=3.0, tool_call_count=b"x")
@example(message_count=2.5, tool_call_count=1.0)
def test_any_stored_counter_is_diagnosed_and_fixed_never_raised(
    tmp_path_factory: pytest.TempPathFactory, message_count: Any, tool_call_count: Any
) -> None:
    """Three messages and one tool call: a tool count of 2 is Hermes v1's rule (one per
    tool-related message), accepted as history and left as it is."""
    url = _store_with(tmp_path_factory.mktemp("doctor"), message_count, tool_call_count)
    messages, tools = _counters(url)  # as SQLite stored them (3.0 is a REAL)
    legacy = tools == 2
    right = messages == 3 and tools in (1, 2)
    with Store.open(url) as store:
        report = doctor.diagnose(store)
        assert report.healthy == right, report.to_dict()
        doctor.repair(store, report)
        assert doctor.diagnose(store).healthy
    assert _counters(url) == (3, 2 if legacy else 1)


def test_the_command_reports_a_text_counter_and_fix_writes_the_rows_count(
    tmp_path: Path,
) -> None:
    url = _store_with(tmp_path, "many", 1)
    runner = CliRunner()
    found = runner.invoke(cli.app, ["--url", url, "db", "doctor"])
    assert found.exit_code == 1, found.output
    assert "message_count that disagrees" in found.stdout
    fixed = runner.invoke(cli.app, ["--url", url, "db", "doctor", "--fix"])
    assert fixed.exit_code == 0, fixed.output
    assert _counters(url) == (3, 1)


def test_messages_filed_under_a_blob_id_are_filed_under_its_text_again(tmp_path: Path) -> None:
    """A salvaged file's messages can name their session by a BLOB id: orphans to every read
    (a BLOB never equals the text id). ``--fix`` made a placeholder session called ``b's2'``
    (Python's form of the bytes) and left them orphaned; it now files them under the id's
    text: the session's own again where it exists (recounted), else one placeholder with the
    text orphans of that id, whose clocks may be damaged too."""
    url = f"sqlite:///{tmp_path / 'salvaged.db'}"
    with SessionDB(url=url) as db:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "stays")
        db.create_session("s2", "cli")
        db.append_message("s2", "user", "filed under a blob")
        db.create_session("gone", "cli")
        db.append_message("gone", "user", "orphan as text")
        db.append_message("gone", "assistant", "orphan as a blob")
    with damaging_transaction(url) as conn:
        conn.execute(sa.text("DELETE FROM sessions WHERE id = 'gone'"))
        conn.execute(sa.text(
            "UPDATE messages SET session_id = CAST(session_id AS BLOB) "
            "WHERE session_id = 's2' OR role = 'assistant'"
        ))  # fmt: skip
        conn.execute(sa.text("UPDATE messages SET timestamp = 'yesterday' WHERE role = 'user' "
                             "AND session_id = 'gone'"))  # fmt: skip
    with Store.open(url) as store:
        report = doctor.diagnose(store)
        orphans = report.get("orphan_messages")
        assert orphans is not None and orphans.status == "fail"
        assert "b'" not in orphans.detail
        doctor.repair(store, report)
        assert doctor.diagnose(store).healthy
    with SessionDB(url=url) as db:
        assert [m["content"] for m in db.get_messages("s2")] == ["filed under a blob"]
        assert [m["content"] for m in db.get_messages("gone")] == [
            "orphan as text", "orphan as a blob"
        ]
        sessions = {row["id"]: row for row in db.search_sessions()}
        assert set(sessions) == {"s1", "s2", "gone"}
        assert (sessions["s2"]["message_count"], sessions["gone"]["message_count"]) == (1, 2)
        assert sorted(hit["session_id"] for hit in db.search_messages("blob")) == ["gone", "s2"]


def _salvaged_with_blob_ids(tmp_path: Path) -> str:
    """A file whose session ``s2`` (its row, its messages, its usage, its child's parent id)
    and session ``s3``'s id are stored as bytes; ``s4``'s messages and its child's parent id
    name it by bytes while its row holds text; ``twin`` exists under both forms."""
    url = f"sqlite:///{tmp_path / 'salvaged.db'}"
    with SessionDB(url=url) as db:
        for session_id in ("s1", "s2", "s3", "s4", "twin"):
            db.create_session(session_id, "cli")
            db.append_message(session_id, "user", f"words of {session_id}")
        db.create_session("child-of-s2", "cli", parent_session_id="s2")
        db.create_session("child-of-s4", "cli", parent_session_id="s4")
        db.update_token_counts("s2", input_tokens=5, model="m")
    with damaging_transaction(url) as conn:
        for table, column, session_id in (
            ("sessions", "id", "s2"), ("messages", "session_id", "s2"),
            ("session_model_usage", "session_id", "s2"), ("sessions", "parent_session_id", "s2"),
            ("sessions", "id", "s3"), ("messages", "session_id", "s3"),
            ("messages", "session_id", "s4"), ("sessions", "parent_session_id", "s4"),
        ):  # fmt: skip
            conn.execute(
                sa.text(f"UPDATE {table} SET {column} = :blob WHERE {column} = :text"),
                {"blob": session_id.encode(), "text": session_id},
            )
        conn.execute(sa.text("INSERT INTO sessions (id, source, started_at) "
                             "VALUES (CAST('twin' AS BLOB), 'cli', 1)"))  # fmt: skip
    return url


def test_session_ids_stored_as_bytes_are_stored_as_their_text(tmp_path: Path) -> None:
    """A session whose id a salvaged file holds as bytes was listed and searched under its
    text, but ``sessions show`` of that text said no such session, and the doctor found
    nothing. It now reports them, and ``--fix`` stores each id as its text in the session's
    row and every row whose foreign key names it (messages, usage, children), keeping the
    lineage a parent id stored as bytes named (the lineage repair cleared it). An id whose
    text is another session's is reported and left."""
    url = _salvaged_with_blob_ids(tmp_path)
    runner = CliRunner()
    assert runner.invoke(cli.app, ["--url", url, "sessions", "show", "s2"]).exit_code != 0
    checked = runner.invoke(cli.app, ["--url", url, "db", "doctor"])
    assert checked.exit_code == 1 and "stored as bytes" in checked.output, checked.output
    fixed = runner.invoke(cli.app, ["--url", url, "db", "doctor", "--fix"])
    assert fixed.exit_code == 0, fixed.output
    assert "stored 3 session id(s) held as bytes as their text" in fixed.output, fixed.output
    assert "left 1" in fixed.output and "twin" in fixed.output, fixed.output
    shown = runner.invoke(cli.app, ["--url", url, "sessions", "show", "s2"])
    assert shown.exit_code == 0 and "words of s2" in shown.output, shown.output
    with SessionDB(url=url) as db:
        for session_id in ("s1", "s2", "s3", "s4"):
            row = db.get_session(session_id)
            assert row is not None and row["message_count"] == 1, (session_id, row)
            assert [m["content"] for m in db.get_messages(session_id)] == [
                f"words of {session_id}"
            ]
        assert db.get_session("child-of-s2")["parent_session_id"] == "s2"
        assert db.get_session("child-of-s4")["parent_session_id"] == "s4"
        assert db.get_session("s2")["input_tokens"] == 5
        assert db.delete_session("s3") and db.get_session("s3") is None
    engine = engine_like_the_store(url)
    with engine.connect() as conn:
        kinds = conn.execute(sa.text(
            "SELECT typeof(id), count(*) FROM sessions GROUP BY 1 ORDER BY 1"
        )).all()  # fmt: skip
        assert kinds == [("blob", 1), ("text", 6)], kinds  # the twin's bytes, left; s3 deleted
        assert conn.execute(sa.text("SELECT typeof(session_id) FROM session_model_usage")).all() \
            == [("text",)]  # fmt: skip
        assert conn.execute(sa.text("PRAGMA foreign_key_check")).all() == []
    engine.dispose()
    with Store.open(url) as store:
        report = doctor.diagnose(store)  # search indexes, counters, lineage: all sound
        assert report.healthy, report.problems
        again = report.get("blob_ids")
        assert again is not None and again.status == "warn" and not again.fixable
