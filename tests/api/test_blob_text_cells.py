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
from store_library import engine_like_the_store

from sessionstore import SessionDB


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


def test_a_compression_chain_through_a_blob_id_still_lists(tmp_path: Path) -> None:
    """A continuation whose id a salvaged file holds as bytes: the listing projects its root
    onto it and names the chain, as it did when the chain was read alone (the chain now
    comes as JSON with the tip, and JSON holds no BLOB)."""
    url = f"sqlite:///{tmp_path / 'salvaged.db'}"
    with SessionDB(url=url) as db:
        db.create_session("root", "cli")
        db.append_message("root", "user", "before compression")
        db.end_session("root", "compression")
        db.create_session("tip", "cli", parent_session_id="root")
        db.append_message("tip", "user", "after compression")
    engine = engine_like_the_store(url)
    with engine.begin() as conn:
        conn.execute(sa.text("PRAGMA foreign_keys = OFF"))
        for table, column in (("messages", "session_id"), ("sessions", "id")):
            conn.execute(
                sa.text(f"UPDATE {table} SET {column} = :blob WHERE {column} = 'tip'"),
                {"blob": b"tip"},
            )
    engine.dispose()
    with SessionDB(url=url) as db:
        (row,) = db.list_sessions_rich()
        assert row["_lineage_root_id"] == "root"
        # The tip's id as the row gives it (the driver's bytes) stands second in its chain.
        assert row["_lineage_ids"] == ["root", str(row["id"])]
        assert row["preview"] == "after compression"
