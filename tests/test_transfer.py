"""Export, import and copy of whole stores (sessionstore.transfer, transfer.copy).

Export -> import into a fresh store -> export again is byte-identical, on both dialects and
across them; conflicts follow the chosen policy and never duplicate; a copy into a store whose
message ids are already taken renumbers without collisions, and running it again adds nothing.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from legacy import build_legacy_db

from sessionstore import ImportConflictError, SessionDB, migrate, transfer
from sessionstore.transfer import ImportFormatError, export_jsonl, import_jsonl


def _export(db: SessionDB) -> str:
    buffer = io.StringIO()
    export_jsonl(db.store, buffer)
    return buffer.getvalue()


@pytest.fixture
def legacy_url(tmp_path: Path) -> str:
    path = tmp_path / "hermes_v3.db"
    build_legacy_db(path, 3)
    url = f"sqlite:///{path}"
    migrate.upgrade(url)
    return url


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

    engine = sa.create_engine(url)
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
