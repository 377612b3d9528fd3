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
from store_library import engine_like_the_store
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
    engine = engine_like_the_store(url)
    with engine.begin() as conn:
        conn.execute(sa.text("PRAGMA foreign_keys = OFF"))
        conn.execute(sa.text("DELETE FROM sessions WHERE id = 'gone'"))
        conn.execute(sa.text(
            "UPDATE messages SET session_id = CAST(session_id AS BLOB) "
            "WHERE session_id = 's2' OR role = 'assistant'"
        ))  # fmt: skip
        conn.execute(sa.text("UPDATE messages SET timestamp = 'yesterday' WHERE role = 'user' "
                             "AND session_id = 'gone'"))  # fmt: skip
    engine.dispose()
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
