"""Reading a store as it is: a file without the Hermes v18...v22 columns and tables reads them
as Hermes's defaults (``sessionstore/sql/read_shape.py``), equal to what the same file reads
once adopted, and nothing in it changes.

A v17 file nobody adopted (or one a newer Hermes numbered past us without those columns) is
opened read-only by ``SessionDB(read_only=True)`` and by every reading verb of the CLI. Every
read path that names a later column (the session and message records, the rich listing and
its tips, windows, the replay columns, gateway listings) or a later table (per-model usage,
the routing index, delegations) is compared with the adopted copy's answer.
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from file_checks import open_db, sqlite_url
from legacy_v7_v17 import LATER_ROOT, build_later_db
from legacy_v18_v22 import build_v22_db
from typer.testing import CliRunner

from sessionstore.api.session_db import SessionDB
from sessionstore.cli import app
from sessionstore.errors import ReadOnlyStoreError
from sessionstore.ops.transfer import export_jsonl
from sessionstore.sql.read_shape import FULL, LATER_COLUMNS


def _reads(db: SessionDB) -> dict[str, Any]:
    """What every read path that names a later column or table answers on ``db``."""
    ids = [row["id"] for row in db.list_sessions_rich(include_children=True, limit=100)]
    messages = {sid: db.get_messages(sid, include_inactive=True) for sid in ids}
    anchor = next(m["id"] for m in messages[LATER_ROOT])
    return {
        "sessions": [db.get_session(sid) for sid in ids],
        "messages": messages,
        "rich": db.list_sessions_rich(limit=100, include_archived=True),
        "rich_by_activity": db.list_sessions_rich(
            limit=100, order_by_last_active=True, compact_rows=True
        ),
        "around": db.get_messages_around(LATER_ROOT, anchor, window=3),
        "anchored": db.get_anchored_view(LATER_ROOT, anchor, window=2, bookend=2),
        "conversation": db.repository.get_conversation(LATER_ROOT, include_inactive=True),
        "lineage_conversation": db.repository.get_lineage_conversation(ids[:3]),
        "gateway": db.list_gateway_sessions(active_only=False),
        "usage": db.get_model_usage(),
        "routing": db.load_gateway_routing_entries(),
        "streak": db.get_compression_fallback_streak(LATER_ROOT),
        "prunable": [r.to_dict() for r in db.repository.prunable_sessions(older_than_days=0)],
    }


FILLED_BY_ADOPTION = frozenset({"system_prompt_hash", "message_uid"})
"""What the adoption's data steps write into the columns a v17 file lacks: every inline
prompt's hash (revision 0033) and every message's uid (0039). Read as it is, both are NULL."""


def _unfilled(value: Any) -> Any:
    """``value`` with the columns of :data:`FILLED_BY_ADOPTION` masked out."""
    if isinstance(value, dict):
        return {k: None if k in FILLED_BY_ADOPTION else _unfilled(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unfilled(item) for item in value]
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a record (ConversationRow)
        return value._replace(**{k: None for k in FILLED_BY_ADOPTION if k in value._fields})
    if isinstance(value, tuple):
        return tuple(_unfilled(item) for item in value)
    return value


def _export(db: SessionDB) -> list[dict[str, Any]]:
    out = io.StringIO()
    export_jsonl(db.store, out)
    return [json.loads(line) for line in out.getvalue().splitlines()[1:]]


def test_a_v17_file_reads_as_its_adopted_copy_does(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    build_later_db(path, 17)
    adopted = tmp_path / "adopted.db"
    shutil.copyfile(path, adopted)
    original = path.read_bytes()

    with SessionDB(path, read_only=True) as db:
        absent = db.store.read_shape
        assert absent != FULL
        assert {column for _, column in absent.absent_columns} == {
            name for names in LATER_COLUMNS.values() for name in names
        }
        as_it_is = _reads(db)
        exported = _export(db)
        with pytest.raises(ReadOnlyStoreError):
            db.set_compression_fallback_streak(LATER_ROOT, 2)
    assert path.read_bytes() == original

    with SessionDB(adopted, backup_on_adopt=False) as db:
        assert db.store.read_shape == FULL
        adopted_reads = _reads(db)
        # Adoption seeds the per-model usage from the session totals (v20's data step); read
        # as it is, the file has none. Everything else reads the same.
        assert adopted_reads.pop("usage") and as_it_is.pop("usage") == []
        assert _unfilled(adopted_reads) == as_it_is
        assert _unfilled([line for line in _export(db) if "usage" not in line]) == exported

    session = as_it_is["sessions"][0]
    assert session["expiry_finalized"] == 0 and session["compression_fallback_streak"] == 0
    assert session["display_name"] is None and session["profile_name"] is None
    assert all(m["api_content"] is None for m in as_it_is["messages"][LATER_ROOT])
    assert as_it_is["routing"] == {}
    assert not any("usage" in line or "routing" in line for line in exported)


def test_a_reading_verb_reads_a_v17_file_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    build_later_db(path, 17)
    original = path.read_bytes()
    runner = CliRunner()
    url = sqlite_url(path)
    for verb in (["sessions", "list", "--json"], ["sessions", "show", LATER_ROOT],
                 ["search", "kubectl"], ["export"]):  # fmt: skip
        result = runner.invoke(app, ["--url", url, *verb])
        assert result.exit_code == 0, (verb, result.output)
        assert result.stdout.strip(), verb
    assert path.read_bytes() == original


def test_later_columns_a_newer_file_has_are_read_and_the_rest_default(tmp_path: Path) -> None:
    """A file numbered past us that has some later columns (an un-bumped variant's, say)
    reads those, and the ones it lacks as defaults: by columns, never by number."""
    path = tmp_path / "state.db"
    build_later_db(path, 17)
    with open_db(path) as conn:
        conn.execute("ALTER TABLE sessions ADD COLUMN display_name TEXT")
        conn.execute("UPDATE sessions SET display_name = 'Alice' WHERE id = ?", (LATER_ROOT,))
        conn.execute("UPDATE schema_version SET version = 23")
    with SessionDB(path, read_only=True) as db:
        assert not db.store.read_shape.has_column("sessions", "origin_json")
        assert db.store.read_shape.has_column("sessions", "display_name")
        session = db.get_session(LATER_ROOT)
        assert session is not None
        assert session["display_name"] == "Alice" and session["origin_json"] is None


def test_a_later_table_in_an_earlier_form_reads_as_empty_until_adopted(tmp_path: Path) -> None:
    """The scope-less routing index (#59203): read as it is, no entry (the reads name
    ``scope``); once adopted (the heal adds the scope), every entry is there."""
    path = tmp_path / "state.db"
    build_v22_db(path, variant="scopeless_routing")
    with SessionDB(path, read_only=True) as db:
        assert not db.store.read_shape.has_table("gateway_routing")
        assert db.load_gateway_routing_entries() == {}
        assert db.get_model_usage()  # the usage table is whole: read
    with SessionDB(path, backup_on_adopt=False) as db:
        assert db.load_gateway_routing_entries()
