"""Text cells stored as BLOBs: a salvaged or hand-edited SQLite file (SQLite types values, not
columns) can hold a first message, a title or a content as bytes. SQLite only: PostgreSQL's
text columns cannot hold bytes.

What must work on such a file: the listing (one such first message failed every listing,
its preview), a resume (the replayed history goes to a provider as JSON), ``get_messages``'
content (iot's gateway and dashboard send those dicts on as JSON) and a search hit's context,
as upstream Hermes's newest reads decode them (docs/hermes.md)."""

from __future__ import annotations

import json
from pathlib import Path

import sqlalchemy as sa
from store_library import damaging_transaction, engine_like_the_store
from typer.testing import CliRunner

from sessionstore import SessionDB, Store, cli
from sessionstore.ops import doctor


def test_listing_and_resume_read_blob_cells_as_text(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'salvaged.db'}"
    with SessionDB(url=url) as db:
        db.create_session("s", "cli")
        db.append_message("s", "user", "placeholder one")
        db.append_message("s", "assistant", "placeholder two")
        db.create_session("clean", "cli")
        db.append_message("clean", "user", "a clean session")
    engine = engine_like_the_store(url)
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE messages SET content = :c WHERE session_id = 's' AND role = :r"),
            [{"c": b"first\nline", "r": "user"}, {"c": b"bad \xe2\x9c", "r": "assistant"}],
        )
    engine.dispose()
    with SessionDB(url=url) as db:
        previews = {row["id"]: row["preview"] for row in db.list_sessions_rich()}
        assert previews == {"s": "first line", "clean": "a clean session"}
        history = db.get_messages_as_conversation("s")
        assert [m["content"] for m in history] == ["first\nline", "bad \ufffd"]
        assert json.loads(json.dumps(history))[1]["role"] == "assistant"
        messages = db.get_messages("s")
        assert [m["content"] for m in messages] == ["first\nline", "bad \ufffd"]
        assert json.loads(json.dumps(messages))[0]["content"] == "first\nline"
        (hit,) = db.search_messages("first")
        assert [line["content"] for line in hit["context"]] == ["first\nline", "bad \ufffd"]


def _compressed_chain_holding_a_blob(tmp_path: Path, held: str) -> str:
    """A compression root ``root`` continued by ``tip``, the session ``held`` (one of them)
    held by a BLOB id."""
    url = f"sqlite:///{tmp_path / 'salvaged.db'}"
    with SessionDB(url=url) as db:
        db.create_session("root", "cli")
        db.append_message("root", "user", "before compression")
        db.end_session("root", "compression")
        db.create_session("tip", "cli", parent_session_id="root")
        db.append_message("tip", "user", "after compression")
    _hold_id_as_a_blob(url, held)
    return url


def test_a_compression_chain_through_a_blob_id_still_lists(tmp_path: Path) -> None:
    """A continuation whose id a salvaged file holds as bytes: the listing projects its root
    onto it and names the chain, as it did when the chain was read alone (the chain now
    comes as JSON with the tip, and JSON holds no BLOB)."""
    url = _compressed_chain_holding_a_blob(tmp_path, "tip")
    with SessionDB(url=url) as db:
        (row,) = db.list_sessions_rich()
        assert row["_lineage_root_id"] == "root"
        # The row gives the tip's id as stored (the driver's bytes); its chain names it by
        # its text, as every id the store returns as text (``sql.codec.cell_text``).
        assert row["id"] == b"tip"
        assert row["_lineage_ids"] == ["root", "tip"]
        assert row["preview"] == "after compression"


def _file_with_a_blob_id(tmp_path: Path) -> str:
    """A store whose session ``blob-1`` a salvaged file holds by a BLOB id (its messages
    too), beside a session ``plain``."""
    url = f"sqlite:///{tmp_path / 'salvaged.db'}"
    with SessionDB(url=url) as db:
        db.create_session("blob-1", "cli")
        db.append_message("blob-1", "user", "hello from the salvaged session 迁移数据库")
        db.append_message("blob-1", "assistant", "an answer")
        db.set_session_title("blob-1", "Salvaged")
        db.create_session("plain", "cli")
        db.append_message("plain", "user", "hello from a clean session")
    _hold_id_as_a_blob(url, "blob-1")
    return url


def _hold_id_as_a_blob(url: str, session_id: str) -> None:
    """The session's id, and its messages' ``session_id``, stored as a BLOB of its UTF-8."""
    with damaging_transaction(url) as conn:
        for table, column in (("messages", "session_id"), ("sessions", "id")):
            conn.execute(
                sa.text(f"UPDATE {table} SET {column} = :blob WHERE {column} = :text"),
                {"blob": session_id.encode(), "text": session_id},
            )


def test_an_id_stored_as_a_blob_is_returned_as_its_text_never_as_pythons_repr(
    tmp_path: Path,
) -> None:
    """Every id the store returns as text names a BLOB id by its text: search hits (word,
    prefix and substring routes), a title's session; the listing's rows keep the id as
    stored, as Hermes's (``_lineage_ids`` above)."""
    url = _file_with_a_blob_id(tmp_path)
    with SessionDB(url=url) as db:
        for query in ("salvaged", "salv*", "迁移"):
            hits = db.search_messages(query)
            assert [hit["session_id"] for hit in hits] == ["blob-1"], query
            assert hits[0]["context"][0]["role"] == "user"
        assert db.resolve_session_by_title("Salvaged") == "blob-1"
        assert {row["id"] for row in db.list_sessions_rich()} == {b"blob-1", "plain"}
        assert json.loads(json.dumps(db.search_messages("hello")))  # JSON takes every hit


def test_the_command_line_lists_and_finds_a_session_with_a_blob_id(tmp_path: Path) -> None:
    """``sessions list`` failed (``'<' not supported between 'bytes' and 'str'``, shortening
    the ids) and ``search`` showed ``b'blob-1'``: both show the id's text now."""
    url = _file_with_a_blob_id(tmp_path)
    runner = CliRunner()
    for arguments in (["sessions", "list"], ["sessions", "list", "--all"]):
        result = runner.invoke(cli.app, ["--url", url, *arguments])
        assert result.exit_code == 0, result.output
        assert "blob-1" in result.stdout and "b'" not in result.stdout
    listed = runner.invoke(cli.app, ["--url", url, "sessions", "list", "--json"])
    assert {row["id"] for row in json.loads(listed.stdout)} == {"blob-1", "plain"}
    found = runner.invoke(cli.app, ["--url", url, "search", "salvaged"])
    assert found.exit_code == 0, found.output
    assert "blob-1" in found.stdout and "b'" not in found.stdout
    as_json = runner.invoke(cli.app, ["--url", url, "search", "salvaged", "--json"])
    assert [hit["session_id"] for hit in json.loads(as_json.stdout)] == ["blob-1"]


def test_stats_and_search_lines_show_a_blob_source_and_model_as_text(tmp_path: Path) -> None:
    """``stats`` named a BLOB source ``b'telegram'`` (and its JSON too), ``search``'s line a
    BLOB model ``b'gpt-x'``; the API's session dicts keep both as stored."""
    url = f"sqlite:///{tmp_path / 'salvaged.db'}"
    with SessionDB(url=url) as db:
        db.create_session("s", "telegram", model="gpt-x")
        db.append_message("s", "user", "deploy the image")
        db.create_session("t", "telegram", model="gpt-x")  # stays text
    engine = engine_like_the_store(url)
    with engine.begin() as conn:
        conn.execute(sa.text(
            "UPDATE sessions SET source = CAST(source AS BLOB), model = CAST(model AS BLOB) "
            "WHERE id = 's'"
        ))  # fmt: skip
    engine.dispose()
    runner = CliRunner()
    stats = runner.invoke(cli.app, ["--url", url, "stats", "--json"])
    assert stats.exit_code == 0, stats.output
    figures = json.loads(stats.stdout)
    # One source and one model, whether a session's cell holds text or the same as a BLOB.
    assert figures["sources"] == [{"source": "telegram", "sessions": 2, "messages": 1}]
    assert [(row["model"], row["sessions"]) for row in figures["models"]] == [("gpt-x", 2)]
    for arguments in (["stats"], ["search", "deploy"]):
        result = runner.invoke(cli.app, ["--url", url, *arguments])
        assert result.exit_code == 0, result.output
        assert "telegram" in result.stdout and "b'" not in result.stdout, arguments
    with SessionDB(url=url) as db:
        session = db.get_session("s")
        assert session is not None and session["source"] == b"telegram"


def test_a_compressed_root_whose_id_is_a_blob_is_listed_as_it_is(tmp_path: Path) -> None:
    """A compression root held by a BLOB id failed every listing that projects roots onto
    their tips (``Object of type bytes is not JSON serializable``: the roots travel to the
    statement as JSON). It is listed as it is; once ``db doctor --fix`` stores its id as
    text, it is projected onto its tip as any root."""
    url = _compressed_chain_holding_a_blob(tmp_path, "root")
    with SessionDB(url=url) as db:
        assert [row["id"] for row in db.list_sessions_rich()] == [b"root"]  # unprojected
    with Store.open(url) as store:
        doctor.repair(store, doctor.diagnose(store))
    with SessionDB(url=url) as db:
        assert [row["id"] for row in db.list_sessions_rich()] == ["tip"]
