"""Checks of revision 0021's CJK bigram index on a real file, shared by the legacy tests.

At head: the index holds exactly the rows with CJK text, passes FTS5's integrity check, and
every 1- and 2-character CJK needle taken from the stored text finds, through the search
(the bigram index), exactly the messages a substring scan finds; its triggers follow an
insert, an update and a delete. Below 0021: none of its objects is left.
"""

from __future__ import annotations

import sqlite3
from itertools import pairwise
from pathlib import Path

from store_library import connect_like_the_store

from sessionstore.search import contains_cjk
from sessionstore.search.service import search_messages
from sessionstore.storage.config import sqlite_url
from sessionstore.storage.store import Store

BIGRAM_TABLE = "messages_cjk_bigram"
BIGRAM_OBJECTS = (BIGRAM_TABLE, *(f"{BIGRAM_TABLE}_{e}" for e in ("insert", "delete", "update")))
MAX_PROBES = 40
INTEGRITY_CHECK = f"INSERT INTO {BIGRAM_TABLE}({BIGRAM_TABLE}, rank) VALUES('integrity-check', 1)"


def _rows(path: Path) -> list[tuple[int, str | None, str | None, str | None]]:
    conn = connect_like_the_store(path)
    try:
        return conn.execute(
            "SELECT id, content, tool_name, tool_calls FROM messages ORDER BY id"
        ).fetchall()
    finally:
        conn.close()


def _probes(rows: list[tuple[int, str | None, str | None, str | None]]) -> list[str]:
    probes: dict[str, None] = {}
    for _, *columns in rows:
        for text in columns:
            value = text or ""
            singles = [c for c in value if contains_cjk(c)][:1]
            pairs = [
                a + b
                for a, b in pairwise(value)
                if contains_cjk(a) and contains_cjk(b)
            ]
            for needle in (*singles, *pairs):
                probes.setdefault(needle, None)
    return list(probes)[:MAX_PROBES]


def assert_cjk_index_matches_scan(path: Path) -> None:
    rows = _rows(path)
    with_cjk = {row[0] for row in rows if any(contains_cjk(c or "") for c in row[1:])}
    conn = connect_like_the_store(path)
    try:
        held = conn.execute(f"SELECT count(*) FROM {BIGRAM_TABLE}_docsize").fetchone()[0]
        assert held == len(with_cjk), (held, len(with_cjk))
        conn.execute(INTEGRITY_CHECK)
    finally:
        conn.close()
    probes = _probes(rows)
    assert probes, "the fixture has CJK text"
    with Store.open(sqlite_url(path)) as store:
        for needle in probes:
            expected = {row[0] for row in rows if any(needle in (c or "") for c in row[1:])}
            hits = store.read(
                lambda c, n=needle: search_messages(c, n, limit=100_000, include_inactive=True)
            )
            assert {hit.id for hit in hits} == expected, needle
    # The triggers, in a transaction rolled back so the file stays as the migration left it.
    conn = connect_like_the_store(path, isolation_level=None)
    try:
        conn.execute("BEGIN")
        session_id = conn.execute("SELECT id FROM sessions LIMIT 1").fetchone()[0]
        new_id = conn.execute(
            "INSERT INTO messages (session_id, role, content, timestamp) "
            "VALUES (?, 'user', 'x 鸭嘴兽 y', 1.0)",
            (session_id,),
        ).lastrowid
        match = f"SELECT rowid FROM {BIGRAM_TABLE} WHERE {BIGRAM_TABLE} MATCH ?"
        assert {r[0] for r in conn.execute(match, ('"鸭嘴"',))} == {new_id}
        conn.execute("UPDATE messages SET content = '针鼹' WHERE id = ?", (new_id,))
        assert not conn.execute(match, ('"鸭嘴"',)).fetchall()
        assert {r[0] for r in conn.execute(match, ('"鼹"*',))} == {new_id}
        conn.execute("DELETE FROM messages WHERE id = ?", (new_id,))
        assert not conn.execute(match, ('"针"*',)).fetchall()
        conn.execute(INTEGRITY_CHECK)
        conn.execute("ROLLBACK")
    finally:
        conn.close()


def assert_no_cjk_index(path: Path) -> None:
    conn = connect_like_the_store(path)
    try:
        names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    finally:
        conn.close()
    assert not set(BIGRAM_OBJECTS) & names, names


def trigger_sql(path: Path) -> dict[str, str]:
    """The bigram triggers' SQL as the file holds it."""
    conn = sqlite3.connect(path)
    try:
        return dict(
            conn.execute(
                "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND name IN (?, ?, ?)",
                BIGRAM_OBJECTS[1:],
            ).fetchall()
        )
    finally:
        conn.close()


def write_cjk_rows(path: Path, session: str, count: int) -> None:
    """Rows written as Hermes writes them (raw sqlite3): the store's triggers index them."""
    conn = sqlite3.connect(path)
    try:
        conn.execute(
            "INSERT INTO sessions (id, source, started_at) VALUES (?, 'cli', 1.0)", (session,)
        )
        conn.executemany(
            "INSERT INTO messages (session_id, role, content, tool_name, timestamp) "
            "VALUES (?, 'user', ?, ?, ?)",
            [
                (
                    session,
                    f"消息{index} 数据库迁移 " + "检索" * (index % 60) + f" row {index} 𠀀",
                    "工具" if index % 3 == 0 else None,
                    float(index),
                )
                for index in range(count)
            ],
        )
        conn.commit()
    finally:
        conn.close()


def churn(path: Path) -> None:
    """Update and delete rows through the store's triggers (raw sqlite3, as Hermes would)."""
    conn = sqlite3.connect(path)
    try:
        ids = [row[0] for row in conn.execute("SELECT id FROM messages ORDER BY id")]
        for message_id in ids[::4]:
            conn.execute("DELETE FROM messages WHERE id = ?", (message_id,))
        for message_id in ids[1::4]:
            conn.execute(
                "UPDATE messages SET content = content || ' 更新了', tool_calls = '[\"调用\"]' "
                "WHERE id = ?",
                (message_id,),
            )
        for message_id in ids[2::4]:
            conn.execute("UPDATE messages SET content = 'now plain ascii' WHERE id = ?",
                         (message_id,))  # fmt: skip
        conn.commit()
    finally:
        conn.close()
