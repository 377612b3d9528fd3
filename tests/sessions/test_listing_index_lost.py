"""The listing names its indexes (SQLite ``INDEXED BY``, so no ``sqlite_stat1`` can send it
through another): a file that lost one (dropped by hand or by another program) is told so, with
the command that makes it again, instead of the driver's "no such index" with the statement."""

from __future__ import annotations

from pathlib import Path

import pytest
from store_library import connect_like_the_store
from typer.testing import CliRunner

from sessionstore import IndexMissingError, SessionDB, cli


@pytest.mark.parametrize("index", ["idx_messages_session", "idx_sessions_parent"])
def test_a_lost_listing_index_is_named_with_its_repair(tmp_path: Path, index: str) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "hello")
    conn = connect_like_the_store(path)
    conn.execute(f"DROP INDEX {index}")
    conn.commit()
    conn.close()
    with SessionDB(path) as db:
        with pytest.raises(IndexMissingError, match=f"no such index: {index}") as raised:
            db.list_sessions_rich(order_by_last_active=True)
        assert f"sessionstore --url {path} db doctor --fix" in str(raised.value)
        assert db.get_messages("s1")[0]["content"] == "hello"  # nothing else is touched
    listed = CliRunner().invoke(cli.app, ["--url", str(path), "sessions", "list"])
    if index == "idx_messages_session":  # the previews; the chain step lists by activity only
        assert listed.exit_code == 1 and "db doctor --fix" in listed.stderr
    assert CliRunner().invoke(cli.app, ["--url", str(path), "db", "doctor", "--fix"]).exit_code == 0
    with SessionDB(path) as db:
        assert [row["id"] for row in db.list_sessions_rich(order_by_last_active=True)] == ["s1"]
