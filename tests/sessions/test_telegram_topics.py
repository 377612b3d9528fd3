"""Telegram DM topic mode and bindings (Hermes 0.17+, iot 0.22.2's v3 tables), both dialects.

The tables exist only after an opt-in write; reads of a store without them are empty and
create nothing; a Hermes file's v1 pair reads as it is and is rebuilt at v3 on the next topic
write, every live row kept (0.19.0's ``TestSchemaInit`` topic tests, iot's semantics).
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from telegram_topics_v1 import TELEGRAM_TOPICS_V1

from sessionstore import SessionDB
from sessionstore.errors import UnknownSessionError
from sessionstore.hermes import state as hermes_state

TOPIC_TABLES = {"telegram_dm_topic_mode", "telegram_dm_topic_bindings"}


def tables(db: SessionDB) -> set[str]:
    return set(db.store.read(lambda conn: sa.inspect(conn).get_table_names()))


def bind(db: SessionDB, thread: str, session_id: str, **extra: str) -> None:
    db.bind_telegram_topic(
        chat_id="208214988", thread_id=thread, user_id="208214988",
        session_key=f"telegram:dm:208214988:thread:{thread}", session_id=session_id, **extra,
    )  # fmt: skip


def test_no_tables_until_a_caller_opts_in(store_url: str) -> None:
    with SessionDB(store_url) as db:
        db.create_session("s", "telegram", user_id="208214988")
        assert db.get_telegram_topic_binding(chat_id="208214988", thread_id="1") is None
        assert db.get_telegram_topic_binding_by_session(session_id="s") is None
        assert db.list_telegram_topic_bindings_for_chat(chat_id="208214988") == []
        assert not db.is_telegram_topic_mode_enabled(chat_id="208214988", user_id="208214988")
        assert not db.is_telegram_session_linked_to_topic(session_id="s")
        db.disable_telegram_topic_mode(chat_id="208214988")
        assert db.delete_telegram_topic_binding(chat_id="208214988", thread_id="1") == 0
        assert [row["id"] for row in db.list_unlinked_telegram_sessions_for_user(
            chat_id="208214988", user_id="208214988")] == ["s"]  # fmt: skip
        assert tables(db).isdisjoint(TOPIC_TABLES)
        assert db.get_meta("telegram_dm_topic_schema_version") is None
        db.apply_telegram_topic_migration()
        assert tables(db) >= TOPIC_TABLES
        assert db.get_meta("telegram_dm_topic_schema_version") == "3"
        db.apply_telegram_topic_migration()  # idempotent


def test_bindings_and_topic_mode(store_url: str) -> None:
    with SessionDB(store_url) as db:
        for session_id in ("topic-session", "second"):
            db.create_session(session_id, "telegram", user_id="208214988")
        bind(db, "17585", "topic-session")
        numeric: Any = 208214988  # Hermes's callers pass Telegram's ids as numbers too
        binding = db.get_telegram_topic_binding(chat_id=numeric, thread_id="17585")
        assert binding is not None
        assert {k: binding[k] for k in ("profile_name", "chat_id", "thread_id", "user_id",
                                        "session_id", "managed_mode")} == {
            "profile_name": "default", "chat_id": "208214988", "thread_id": "17585",
            "user_id": "208214988", "session_id": "topic-session", "managed_mode": "auto",
        }  # fmt: skip
        assert binding["session_key"] == "telegram:dm:208214988:thread:17585"
        assert db.get_meta("telegram_dm_topic_schema_version") == "3"
        # A session is bound to one topic; rebinding the same topic replaces its fields.
        with pytest.raises(ValueError, match="already linked"):
            bind(db, "99999", "topic-session")
        assert db.get_telegram_topic_binding(chat_id="208214988", thread_id="99999") is None
        bind(db, "17585", "topic-session", managed_mode="manual")
        again = db.get_telegram_topic_binding(chat_id="208214988", thread_id="17585")
        assert again is not None and again["managed_mode"] == "manual"
        bind(db, "2", "second")
        assert [b["thread_id"] for b in db.list_telegram_topic_bindings_for_chat(
            chat_id="208214988")] == ["2", "17585"]  # fmt: skip
        assert db.is_telegram_session_linked_to_topic(session_id="second")
        by_session = db.get_telegram_topic_binding_by_session(session_id="second")
        assert by_session is not None and by_session["thread_id"] == "2"
        # Another profile's topics are its own.
        assert db.get_telegram_topic_binding(
            chat_id="208214988", thread_id="2", profile_name="work") is None  # fmt: skip

        db.enable_telegram_topic_mode(chat_id="208214988", user_id="208214988",
                                      has_topics_enabled=True)  # fmt: skip
        assert db.is_telegram_topic_mode_enabled(chat_id="208214988", user_id="208214988")
        assert not db.is_telegram_topic_mode_enabled(chat_id="208214988", user_id="other")
        assert db.delete_telegram_topic_binding(chat_id="208214988", thread_id="2") == 1
        assert db.is_telegram_topic_mode_enabled(chat_id="208214988", user_id="208214988")
        # The chat's last binding gone: topic mode off in the same transaction.
        assert db.delete_telegram_topic_binding(chat_id="208214988", thread_id="17585") == 1
        assert not db.is_telegram_topic_mode_enabled(chat_id="208214988", user_id="208214988")

        db.enable_telegram_topic_mode(chat_id="208214988", user_id="208214988")
        bind(db, "3", "second")
        db.disable_telegram_topic_mode(chat_id="208214988")
        assert not db.is_telegram_topic_mode_enabled(chat_id="208214988", user_id="208214988")
        assert db.list_telegram_topic_bindings_for_chat(chat_id="208214988") == []


def test_unlinked_sessions_of_a_user(store_url: str) -> None:
    with SessionDB(store_url) as db:
        db.create_session("old-unlinked", "telegram", user_id="208214988")
        db.set_session_title("old-unlinked", "Old research")
        db.append_message("old-unlinked", "user", "first prompt")
        db.create_session("already-linked", "telegram", user_id="208214988")
        bind(db, "17585", "already-linked")
        db.create_session("other-user", "telegram", user_id="someone-else")
        db.create_session("cli-run", "cli", user_id="208214988")
        db.create_session("other-profile", "telegram", user_id="208214988")
        db.store.write(lambda conn: conn.execute(sa.text(
            "UPDATE sessions SET profile_name = 'work' WHERE id = 'other-profile'")))  # fmt: skip
        sessions = db.list_unlinked_telegram_sessions_for_user(
            chat_id="208214988", user_id="208214988"
        )
        assert [s["id"] for s in sessions] == ["old-unlinked"]
        assert sessions[0]["title"] == "Old research"
        assert sessions[0]["preview"] == "first prompt"
        assert "last_active" in sessions[0]
        work = db.list_unlinked_telegram_sessions_for_user(
            chat_id="208214988", user_id="208214988", profile_name="work"
        )
        assert [s["id"] for s in work] == ["other-profile"]
        assert db.list_unlinked_telegram_sessions_for_user(
            chat_id="208214988", user_id="208214988", limit=0) == []  # fmt: skip


def test_a_bound_session_that_is_deleted_takes_its_binding(store_url: str) -> None:
    with SessionDB(store_url) as db:
        db.create_session("gone", "telegram", user_id="208214988")
        bind(db, "5", "gone")
        assert db.delete_session("gone") is True
        assert db.get_telegram_topic_binding(chat_id="208214988", thread_id="5") is None


def _v1_file(path: Path) -> None:
    """0.18.0's v1 pair (no cascade, no profile), with a binding whose session is gone."""
    with SessionDB(path) as db:
        db.create_session("kept", "telegram", user_id="u1")
    with closing(sqlite3.connect(path)) as conn:
        conn.executescript(TELEGRAM_TOPICS_V1 + """
            INSERT INTO telegram_dm_topic_mode (chat_id, user_id, activated_at, updated_at)
                VALUES ('c1', 'u1', 1.0, 2.0);
            INSERT INTO telegram_dm_topic_bindings (chat_id, thread_id, user_id, session_key,
                session_id, linked_at, updated_at) VALUES
                ('c1', '7', 'u1', 'k7', 'kept', 1.0, 3.0),
                ('c1', '8', 'u1', 'k8', 'pruned-long-ago', 1.0, 2.0);
        """)  # fmt: skip
        conn.commit()


def test_a_v1_pair_reads_as_it_is_and_is_rebuilt_at_v3_on_the_next_topic_write(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    _v1_file(path)
    with hermes_state.SessionDB(path) as db:
        binding = db.get_telegram_topic_binding(chat_id="c1", thread_id="7")
        assert binding is not None
        assert (binding["profile_name"], binding["session_id"]) == ("default", "kept")
        assert db.get_telegram_topic_binding(chat_id="c1", thread_id="7",
                                             profile_name="work") is None  # fmt: skip
        assert db.is_telegram_topic_mode_enabled(chat_id="c1", user_id="u1")
        assert db.get_meta("telegram_dm_topic_schema_version") == "1"  # reads change nothing

        db.apply_telegram_topic_migration()
        assert db.get_meta("telegram_dm_topic_schema_version") == "3"
        conn = db._conn
        binding_columns = [row[1] for row in conn.execute(
            "PRAGMA table_info(telegram_dm_topic_bindings)")]  # fmt: skip
        assert binding_columns[0] == "profile_name"
        keys = [tuple(row) for row in conn.execute(
            "SELECT profile_name, chat_id, thread_id, session_id, updated_at "
            "FROM telegram_dm_topic_bindings")]  # fmt: skip
        assert keys == [("default", "c1", "7", "kept", 3.0)]  # the dead session's went
        cascade = [tuple(row)[5:7] for row in conn.execute(
            "PRAGMA foreign_key_list(telegram_dm_topic_bindings)")]  # fmt: skip
        assert cascade == [("NO ACTION", "CASCADE")]
        indexes = {row[1] for row in conn.execute(
            "PRAGMA index_list(telegram_dm_topic_bindings)")}  # fmt: skip
        assert {"idx_telegram_dm_topic_bindings_session",
                "idx_telegram_dm_topic_bindings_user"} <= indexes  # fmt: skip
        mode = conn.execute("SELECT profile_name, chat_id, user_id, enabled, activated_at "
                            "FROM telegram_dm_topic_mode").fetchall()  # fmt: skip
        assert [tuple(row) for row in mode] == [("default", "c1", "u1", 1, 1.0)]
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        with pytest.raises(ValueError, match="already linked"):
            db.bind_telegram_topic(chat_id="c1", thread_id="9", user_id="u1",
                                   session_key="k9", session_id="kept")  # fmt: skip


def test_a_v1_pair_is_rebuilt_by_a_bind_too(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    _v1_file(path)
    with SessionDB(path) as db:
        db.create_session("new", "telegram", user_id="u1")
        db.bind_telegram_topic(
            chat_id="c1", thread_id="10", user_id="u1", session_key="k10", session_id="new",
            profile_name="work",
        )
        assert [b["thread_id"] for b in db.list_telegram_topic_bindings_for_chat(
            chat_id="c1")] == ["7"]  # fmt: skip
        assert [b["thread_id"] for b in db.list_telegram_topic_bindings_for_chat(
            chat_id="c1", profile_name="work")] == ["10"]  # fmt: skip
        assert db.get_meta("telegram_dm_topic_schema_version") == "3"


def test_binding_a_session_that_does_not_exist_is_a_typed_refusal(store_url: str) -> None:
    with SessionDB(store_url) as db:
        db.apply_telegram_topic_migration()
        with pytest.raises(UnknownSessionError):
            bind(db, "17585", "no-such-session")
        assert db.list_telegram_topic_bindings_for_chat(chat_id="208214988") == []
