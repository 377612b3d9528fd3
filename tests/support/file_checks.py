"""Reading a SQLite store file behind the migration's back: row snapshots, schema names, and
the checks every upgrade test makes of a migrated file (rows kept, search working, file sound).
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

from legacy_v1_v6 import FTS_PROBE_WORDS, FTS_TRIGGER_NAMES

Row = dict[str, Any]
Snapshot = dict[str, list[Row]]


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


@contextmanager
def open_db(path: Path) -> Iterator[sqlite3.Connection]:
    # A short-lived connection per check: a connection left open would hold a WAL read
    # snapshot and could make the migration under test wait or see stale state.
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.row_factory = sqlite3.Row
        yield conn


def query(path: Path, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with open_db(path) as conn:
        return [tuple(row) for row in conn.execute(sql, params)]


def snapshot(path: Path) -> Snapshot:
    with open_db(path) as conn:
        return {
            table: [dict(row) for row in conn.execute(f"SELECT * FROM {table} ORDER BY id")]
            for table in ("sessions", "messages")
        }


def schema_versions(path: Path) -> list[int]:
    return [row[0] for row in query(path, "SELECT version FROM schema_version")]


def schema_names(path: Path, kind: str) -> set[str]:
    return {row[0] for row in query(path, "SELECT name FROM sqlite_master WHERE type = ?", (kind,))}


def table_columns(path: Path, table: str) -> list[str]:
    return [row[1] for row in query(path, f"PRAGMA table_info({table})")]


def fts_ids(conn: sqlite3.Connection, word: str) -> set[int]:
    phrase = '"' + word.replace('"', '""') + '"'
    rows = conn.execute("SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?", (phrase,))
    return {row[0] for row in rows}


def indexed_text(message: Row, *, with_tools: bool) -> str:
    """The text the word index holds for a message: content, and from Hermes v11 (revision
    0014) its tool name and tool calls too."""
    if not with_tools:
        return message["content"] or ""
    return " ".join(message.get(name) or "" for name in ("content", "tool_name", "tool_calls"))


def fts5_tokens(text: str | None) -> set[str]:
    """Approximates FTS5's unicode61 tokenizer: runs of letters/digits, case-folded."""
    return set(re.findall(r"[^\W_]+", (text or "").casefold()))


# --- the checks ------------------------------------------------------------------------------


def restricted(rows: list[Row], columns: set[str]) -> list[Row]:
    return [{k: v for k, v in row.items() if k in columns} for row in rows]


def assert_rows_preserved(before: list[Row], after: list[Row], *, ignore: set[str]) -> None:
    """Every original row is still there, with every original value, byte for byte."""
    assert [row["id"] for row in after] == [row["id"] for row in before]
    for old, new in zip(before, after, strict=True):
        for column, value in old.items():
            if column in ignore:
                continue
            assert column in new, f"column {column} was lost"
            assert new[column] == value, f"row {old['id']} column {column} changed"
            assert type(new[column]) is type(value), f"row {old['id']} column {column} retyped"


def assert_only_delegate_tags_added(before: list[Row], after: list[Row]) -> None:
    """model_config is kept, except for the ``_delegate_from`` marker of Hermes's v16 step."""
    for old, new in zip(before, after, strict=True):
        if old["model_config"] == new["model_config"]:
            continue
        original = json.loads(old["model_config"] or "{}")
        tagged = json.loads(new["model_config"])
        assert "_delegate_from" in tagged and "_delegate_from" not in original, old["id"]
        assert {k: v for k, v in tagged.items() if k != "_delegate_from"} == original


def assert_search_works(path: Path, messages: list[Row], *, with_tools: bool = False) -> None:
    """FTS index consistent, old text findable, and the three triggers keeping it in step."""
    triggers = schema_names(path, "trigger")
    assert set(FTS_TRIGGER_NAMES) <= triggers, f"triggers present: {triggers}"
    with open_db(path) as conn:
        conn.execute("INSERT INTO messages_fts(messages_fts) VALUES('integrity-check')")
        for word in FTS_PROBE_WORDS:
            expected = {
                m["id"]
                for m in messages
                if word.casefold() in fts5_tokens(indexed_text(m, with_tools=with_tools))
            }
            assert expected, f"fixture has no message with {word!r}"
            assert fts_ids(conn, word) == expected, word

        # The triggers, exercised in a transaction that is rolled back so the file stays as
        # the migration left it for the checks that follow.
        conn.execute("BEGIN")
        session_id = conn.execute("SELECT id FROM sessions LIMIT 1").fetchone()[0]
        new_id = conn.execute(
            "INSERT INTO messages (session_id, role, content, timestamp) "
            "VALUES (?, 'user', 'quokka 袋鼠 sighting', 1.0)",
            (session_id,),
        ).lastrowid
        assert fts_ids(conn, "quokka") == {new_id}
        assert fts_ids(conn, "袋鼠") == {new_id}
        conn.execute("UPDATE messages SET content = 'wombat burrow' WHERE id = ?", (new_id,))
        assert fts_ids(conn, "quokka") == set()
        assert fts_ids(conn, "wombat") == {new_id}
        conn.execute("DELETE FROM messages WHERE id = ?", (new_id,))
        assert fts_ids(conn, "wombat") == set()
        conn.execute("INSERT INTO messages_fts(messages_fts) VALUES('integrity-check')")
        conn.execute("ROLLBACK")


def assert_sound(path: Path) -> None:
    assert query(path, "PRAGMA integrity_check") == [("ok",)]
    assert query(path, "PRAGMA foreign_key_check") == []


