"""Field databases written by the real Hermes releases, adopted, upgraded and shared.

Each real release (hermes-agent 0.13.0 for schema v11, 0.15.0 v13, 0.16.0 v14, 0.17.0 v16, 0.18.0
v17) builds a populated `state.db` with its own `SessionDB` (`tests/support/real_hermes.py`). The
oracle is that release itself: what its own reads (`get_session`, `get_messages`,
`list_sessions_rich`, `search_messages`, counts) return from a backup copy of the original file.
After our `SessionDB` adopts and upgrades the file:

- every row and every column value of every table is still there (extra tables included),
  and equals what real Hermes 0.18.0's own migration makes of the same original file;
- our reads return what the original release returned (every key it returns), and our
  search finds what its search found (words, tool calls, CJK);
- the real Hermes 0.18.0 opens the upgraded file without changing its schema, reads the same,
  appends, and we find its new messages;
- downgraded to the revision of the release's schema, the rows are kept and the release
  itself opens and reads the file as before.
"""

from __future__ import annotations

import json
import random
import re
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from file_checks import (
    assert_only_delegate_tags_added,
)
from real_hermes import (
    HERMES_RELEASES,
    SEARCH_QUERIES,
    RealHermes,
    backup_copy,
    build_with_sessionstore,
    file_bytes,
)
from typer.testing import CliRunner

from sessionstore import Store
from sessionstore.api.session_db import SessionDB
from sessionstore.cli import app
from sessionstore.errors import SchemaTooNewError
from sessionstore.ops import doctor, transfer
from sessionstore.schema import migrate
from sessionstore.search.object_names import SEARCH_OBJECT_NAMES
from sessionstore.sql.records import MESSAGE_FIELDS, SESSION_FIELDS

# Slow: every test runs a real Hermes release in a side interpreter (the full run only).
pytestmark = pytest.mark.slow

FIELD_SCHEMAS = (11, 13, 14, 16, 17)
HEAD_HERMES = 17
# The revision that reproduces each released schema (where a downgrade target exists).
DOWNGRADE_REVISION = {11: "0014", 13: "0016", 14: "0017", 16: "0019"}
DELEGATE_BACKFILL_SCHEMA = 16


class FieldFiles:
    """Built once per test session and schema: the pristine file and its release's reads."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.built: dict[int, tuple[Path, dict[str, Any], dict[str, Any]]] = {}
        self.head_upgrades: dict[int, dict[str, Any]] = {}

    def hermes(self, schema: int) -> RealHermes:
        return RealHermes(schema, self.root / "home" / HERMES_RELEASES[schema])

    def get(self, schema: int) -> tuple[Path, dict[str, Any], dict[str, Any]]:
        if schema not in self.built:
            hermes = self.hermes(schema)
            pristine = self.root / f"field-v{schema}.db"
            made = hermes.build(pristine)
            # The release reads a backup copy: opening a file is itself a write for Hermes.
            reads = hermes.read(backup_copy(pristine, self.root / f"read-v{schema}.db"))
            self.built[schema] = (pristine, made, reads)
        return self.built[schema]

    def head_reads(self, schema: int) -> dict[str, Any]:
        """What Hermes 0.18 reads from its own upgrade of the file (it upgrades by opening)."""
        if schema not in self.head_upgrades:
            pristine, _, _ = self.get(schema)
            theirs = backup_copy(pristine, self.root / f"head-upgraded-v{schema}.db")
            self.head_upgrades[schema] = self.hermes(HEAD_HERMES).read(theirs)
        return self.head_upgrades[schema]


@pytest.fixture(scope="session")
def field_files(tmp_path_factory: pytest.TempPathFactory) -> FieldFiles:
    return FieldFiles(tmp_path_factory.mktemp("field"))


def field_copy(field_files: FieldFiles, schema: int, target: Path) -> Path:
    pristine, _, _ = field_files.get(schema)
    return backup_copy(pristine, target)


def raw_tables(path: Path) -> dict[str, list[dict[str, Any]]]:
    """Every row of every ordinary table, through plain sqlite3 (full-text objects and their
    shadow tables, the version bookkeeping, and the ``state_meta`` keys that belong to one store
    file rather than to what Hermes wrote, ``transfer.STORE_LOCAL_STATE_KEYS``, aside)."""
    with closing(sqlite3.connect(path)) as conn:
        conn.row_factory = sqlite3.Row
        names = [row[0] for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND sql NOT LIKE 'CREATE VIRTUAL%'"
            " AND name NOT LIKE 'sqlite_%' AND name NOT LIKE 'messages_fts%'"
            " AND name NOT IN ('alembic_version', 'schema_version')"
        ) if row[0] not in SEARCH_OBJECT_NAMES]  # fmt: skip
        tables = {
            name: [dict(row) for row in conn.execute(f'SELECT * FROM "{name}" ORDER BY rowid')]
            for name in names
        }
    if "state_meta" in tables:
        tables["state_meta"] = [row for row in tables["state_meta"]
                                if row["key"] not in transfer.STORE_LOCAL_STATE_KEYS]  # fmt: skip
    return tables


def schema_sql(path: Path) -> list[tuple[str, str, str | None]]:
    with closing(sqlite3.connect(path)) as conn:
        return sorted(conn.execute("SELECT type, name, sql FROM sqlite_master"))


def assert_rows_kept(
    before: dict[str, list[dict[str, Any]]],
    after: dict[str, list[dict[str, Any]]],
    *,
    may_change: Callable[[str, str], bool] = lambda table, column: False,
) -> None:
    """Every table, row and value of ``before`` is in ``after`` (same order, same types)."""
    for table, rows in before.items():
        assert table in after, f"table {table} was lost"
        assert len(after[table]) == len(rows), f"{table}: {len(rows)} -> {len(after[table])} rows"
        for old, new in zip(rows, after[table], strict=True):
            for column, value in old.items():
                if may_change(table, column):
                    continue
                assert column in new, f"{table}.{column} was lost"
                assert (new[column], type(new[column])) == (value, type(value)), (
                    f"{table} row {old.get('id', old)}.{column}: {value!r} -> {new[column]!r}"
                )


NOT_IN_MESSAGE_DICTS = frozenset({"display_identity", "display_order", "_compressed_summary"})
"""iot 0.22.2's message dicts (``_row_to_message_dict``), and ours: no display index, and
``_compressed_summary`` only where it is set."""


def assert_same_keys(expected: Any, actual: Any, where: str) -> None:
    """``actual`` has every key ``expected`` has, with the same value (recursively); but the
    keys newest Hermes leaves out of a message dict (``NOT_IN_MESSAGE_DICTS``) that an older
    Hermes's ``SELECT *`` of a head file shows."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{where}: {actual!r} is not a dict"
        for key, value in expected.items():
            if key in NOT_IN_MESSAGE_DICTS and key not in actual and "role" in expected:
                continue
            assert key in actual, f"{where}: key {key!r} missing"
            assert_same_keys(value, actual[key], f"{where}.{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list), f"{where}: {actual!r} is not a list"
        assert len(actual) == len(expected), f"{where}: {len(expected)} items, got {len(actual)}"
        for index, (old, new) in enumerate(zip(expected, actual, strict=True)):
            assert_same_keys(old, new, f"{where}[{index}]")
    else:
        assert actual == expected, f"{where}: expected {expected!r}, got {actual!r}"


def snippet_core(snippet: str) -> str:
    unmarked = snippet.replace(">>>", "").replace("<<<", "")
    return " ".join(unmarked.split()).removeprefix("...").removesuffix("...").strip()


def comparable_hits(hits: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Hits in message-id order: equal-rank ties may come in either order."""
    return sorted(hits, key=lambda hit: hit["id"])


def assert_same_hits(expected: list[dict[str, Any]], actual: list[dict[str, Any]],
                     where: str) -> None:
    """The same hits with the same fields; snippets highlight the same words in the same
    text, their windows may be cut a few characters apart: Hermes indexes ``content || ' ' ||
    tool_name || ' ' || tool_calls`` and keeps the blanks of NULL columns, our index leaves
    them out (`sessionstore/_migrations/search_ddl.py: indexed_text`), which moves a trigram
    snippet's window. Hermes's ``LIKE`` fallback (CJK shorter than 3 characters) returns a
    window without highlights; ours highlights it (`search/hits.py: substring_snippet`)."""
    expected, actual = comparable_hits(expected), comparable_hits(actual)
    assert [hit["id"] for hit in actual] == [hit["id"] for hit in expected], where
    for old, new in zip(expected, actual, strict=True):
        assert_same_keys({k: v for k, v in old.items() if k != "snippet"}, new, where)
        # Hermes's LIKE fallback gives a message without content a None snippet, ours "".
        old = {**old, "snippet": old["snippet"] or ""}
        new = {**new, "snippet": new["snippet"] or ""}
        highlighted = re.findall(">>>(.*?)<<<", old["snippet"])
        if highlighted:
            assert re.findall(">>>(.*?)<<<", new["snippet"]) == highlighted, (
                where, old["snippet"], new["snippet"],
            )  # fmt: skip
        ours, theirs = snippet_core(new["snippet"]), snippet_core(old["snippet"])
        assert ours in theirs or theirs in ours, (where, old["snippet"], new["snippet"])


def our_reads(db: Any) -> dict[str, Any]:
    """The reads of `tests/support/real_hermes_driver.py:read`, through an object with Hermes's
    API."""
    from real_hermes_driver import (
        ALL_SESSION_IDS,
        CHAIN_TIP_ID,
        LATER_LISTINGS,
        ROOT_ID,
        TELEGRAM_ID,
    )

    return {
        "sessions": {sid: db.get_session(sid) for sid in ALL_SESSION_IDS},
        "messages": {sid: db.get_messages(sid) for sid in ALL_SESSION_IDS},
        "messages_with_inactive": {
            sid: db.get_messages(sid, include_inactive=True) for sid in ALL_SESSION_IDS
        },
        "conversations": {sid: db.get_messages_as_conversation(sid) for sid in ALL_SESSION_IDS},
        "listings": {
            "default": db.list_sessions_rich(limit=100),
            "children": db.list_sessions_rich(limit=100, include_children=True),
            "telegram": db.list_sessions_rich(source="telegram", limit=100),
            "archived": db.list_sessions_rich(limit=100, archived_only=True),
            **{
                name: db.list_sessions_rich(**{"limit": 100, **kwargs})
                for name, kwargs in LATER_LISTINGS.items()
            },
        },
        "searches": {query: db.search_messages(query, limit=50) for query in SEARCH_QUERIES},
        "searches_inactive": {
            query: db.search_messages(query, limit=50, include_inactive=True)
            for query in SEARCH_QUERIES
        },
        "session_count": db.session_count(),
        "session_count_with_messages": db.session_count(min_message_count=3),
        "message_count": db.message_count(),
        "message_counts": {sid: db.message_count(sid) for sid in ALL_SESSION_IDS},
        "titles": {sid: db.get_session_title(sid) for sid in ALL_SESSION_IDS},
        "compression_tip": db.get_compression_tip(ROOT_ID),
        "meta": {key: db.get_meta(key) for key in ("last_auto_prune", "field_note")},
        "lock_holder": db.get_compression_lock_holder(CHAIN_TIP_ID),
        "handoff": db.get_handoff_state(TELEGRAM_ID),
    }


RELEASE_SEMANTICS = frozenset({"listings", "conversations", "compression_tip"})
"""Reads whose rules changed between releases (which children a listing shows, what a
replayed message carries, whether a branch child is a compression tip): ours follow newest
Hermes, so they are compared with what Hermes 0.18 reads from the same file."""


def without_delegate_tags(reads: dict[str, Any], schema: int) -> dict[str, Any]:
    """A release's reads without ``model_config`` where Hermes's v16 step may tag it (the
    comparison with Hermes 0.18's own upgrade checks the tags)."""
    if schema >= DELEGATE_BACKFILL_SCHEMA:
        return reads

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "model_config"}
        if isinstance(value, list):
            return [strip(item) for item in value]
        return value

    stripped: dict[str, Any] = strip(reads)
    return stripped


def may_be_tagged(schema: int) -> Callable[[str, str], bool]:
    tagged = schema < DELEGATE_BACKFILL_SCHEMA  # Hermes's v16 step tags delegate runs once
    return lambda table, column: tagged and (table, column) == ("sessions", "model_config")


SEARCHES = frozenset({"searches", "searches_inactive"})


def assert_searches_match(expected: dict[str, Any], actual: dict[str, Any], who: str) -> None:
    """The search sections, compared strictly: a store at head keeps the search layout every
    Hermes release reads (revision 0039; ``sessionstore.search.sqlite_ddl``), so Hermes 0.18
    finds CJK text in tool output and gets a tool call's text as its snippet there too."""
    assert_reads_match({k: v for k, v in expected.items() if k in SEARCHES},
                       {k: v for k, v in actual.items() if k in SEARCHES}, who)  # fmt: skip


def assert_reads_match(expected: dict[str, Any], actual: dict[str, Any], who: str,
                       *, skip: frozenset[str] = frozenset()) -> None:
    """``actual`` (our reads, or a newer release's) returns what the release returned."""
    for section, value in expected.items():
        if section in skip:
            continue
        if isinstance(value, dict) and "absent" in value:
            continue  # the release had no such method
        if section in ("searches", "searches_inactive"):
            for query, hits in value.items():
                if isinstance(hits, dict):
                    continue
                assert_same_hits(hits, actual[section][query], f"{who}: {section}[{query!r}]")
            continue
        if section == "listings":
            for name, rows in value.items():
                if isinstance(rows, dict):
                    continue
                assert_same_keys(rows, actual[section][name], f"{who}: listings[{name}]")
            continue
        if section == "messages_with_inactive" and isinstance(next(iter(value.values())), dict):
            continue
        assert_same_keys(value, actual[section], f"{who}: {section}")


def counters(path: Path) -> dict[str, tuple[int, int]]:
    """Each session's stored message_count and its number of rows. They differ where Hermes
    made them differ: `archive_and_compact` counts the compacted set, not the archived rows."""
    with closing(sqlite3.connect(path)) as conn:
        return {
            sid: (count, rows)
            for sid, count, rows in conn.execute(
                "SELECT s.id, s.message_count, COUNT(m.id) FROM sessions s "
                "LEFT JOIN messages m ON m.session_id = s.id GROUP BY s.id"
            )
        }


@pytest.mark.parametrize("schema", FIELD_SCHEMAS, ids=lambda v: f"v{v}")
def test_real_field_file_is_adopted_keeping_everything_hermes_reads(
    field_files: FieldFiles, tmp_path: Path, schema: int
) -> None:
    path = field_copy(field_files, schema, tmp_path / "state.db")
    _, made, hermes_reads = field_files.get(schema)
    before = raw_tables(path)

    db = SessionDB(db_path=path)
    try:
        assert db.adoption_backup is not None
        assert raw_tables(db.adoption_backup) == before, "the adoption backup is the original"
        ours = our_reads(db)
    finally:
        db.close()

    assert migrate.current(f"sqlite:///{path}") == migrate.HEAD_REVISION
    after = raw_tables(path)
    assert_rows_kept(before, after, may_change=may_be_tagged(schema))
    assert_only_delegate_tags_added(before["sessions"], after["sessions"])
    assert counters(path) == counters(db.adoption_backup)
    assert_reads_match(without_delegate_tags(hermes_reads, schema), ours,
                       f"sessionstore on a v{schema} file",
                       skip=RELEASE_SEMANTICS)  # fmt: skip
    assert_reads_match(field_files.head_reads(schema), ours, f"sessionstore on a v{schema} file,"
                       " as Hermes 0.18 reads its upgrade")  # fmt: skip
    # The oracle is not vacuous: the release found hits for every query (a rewound message's
    # words only with include_inactive, where the release has rewind).
    found = {**hermes_reads["searches"]}
    if "rewind" in made["features"]:
        found.update(hermes_reads["searches_inactive"])
    assert [query for query in SEARCH_QUERIES if not found[query]] == []


@pytest.mark.parametrize("schema", FIELD_SCHEMAS, ids=lambda v: f"v{v}")
def test_our_upgrade_equals_real_hermes_18_upgrading_the_same_file(
    field_files: FieldFiles, tmp_path: Path, schema: int
) -> None:
    ours = field_copy(field_files, schema, tmp_path / "ours.db")
    theirs = field_copy(field_files, schema, tmp_path / "theirs.db")
    SessionDB(db_path=ours, backup_on_adopt=False).close()
    field_files.hermes(HEAD_HERMES).read(theirs)  # Hermes migrates a file by opening it

    our_tables, their_tables = raw_tables(ours), raw_tables(theirs)
    # Ours is at v22 (its tables and columns are checked against Hermes 0.19.0's upgrade in
    # tests/schema/test_hermes_v18_v22_chain.py); what Hermes 0.18 knows is the same.
    assert set(our_tables) >= set(their_tables)
    for table, rows in their_tables.items():
        assert len(our_tables[table]) == len(rows), table
        for theirs_row, ours_row in zip(rows, our_tables[table], strict=True):
            ours_row = {key: ours_row[key] for key in theirs_row}
            assert ours_row == theirs_row, f"{table}: Hermes 0.18 made {theirs_row}, we {ours_row}"


@pytest.mark.parametrize("schema", FIELD_SCHEMAS, ids=lambda v: f"v{v}")
def test_real_hermes_18_shares_our_upgraded_file(
    field_files: FieldFiles, tmp_path: Path, schema: int
) -> None:
    """Hermes 0.18 reads our upgrade of a file as it reads its own upgrade of the same file,
    changes nothing in its schema, writes to it, and we find what it wrote."""
    path = field_copy(field_files, schema, tmp_path / "state.db")
    SessionDB(db_path=path, backup_on_adopt=False).close()
    schema_before = schema_sql(path)
    head = field_files.hermes(HEAD_HERMES)

    head_reads = head.read(path)

    assert schema_sql(path) == schema_before, "real Hermes 0.18 changed our head file's schema"
    assert_reads_match(field_files.head_reads(schema), head_reads,
                       f"hermes 0.18 on our upgraded v{schema}", skip=SEARCHES)  # fmt: skip
    counted_before = counters(path)
    new_ids = head.calls(path, [
        ("append_message", ["field-root-tip", "user", "Rotate the etcd snapshots nightly"], {}),
        ("append_message", ["field-root-tip", "assistant", "已设置每晚轮换快照。"],
         {"finish_reason": "stop"}),
        ("create_session", ["field-after", "cli"], {"model": "claude-sonnet-4"}),
        ("append_message", ["field-after", "user", "Hermes wrote this after the upgrade"], {}),
    ])  # fmt: skip
    assert schema_sql(path) == schema_before

    db = SessionDB(db_path=path)
    try:
        tip = db.get_messages("field-root-tip")
        assert [m["id"] for m in tip[-2:]] == new_ids[:2]
        assert [m["content"] for m in tip[-2:]] == [
            "Rotate the etcd snapshots nightly", "已设置每晚轮换快照。",
        ]
        assert [hit["id"] for hit in db.search_messages("etcd")] == [new_ids[0]]
        assert [hit["id"] for hit in db.search_messages("轮换快照")] == [new_ids[1]]
        assert [hit["id"] for hit in db.search_messages("轮换")] == [new_ids[1]]
        assert [hit["session_id"] for hit in db.search_messages("upgrade")] == ["field-after"]
    finally:
        db.close()
    count, rows = counted_before["field-root-tip"]
    assert counters(path)["field-root-tip"] == (count + 2, rows + 2)
    assert counters(path)["field-after"] == (1, 1)
    assert_searches_match(field_files.head_reads(schema), head_reads,
                                f"hermes 0.18 on our upgraded v{schema}")  # fmt: skip


@pytest.mark.parametrize("schema", sorted(DOWNGRADE_REVISION), ids=lambda v: f"v{v}")
def test_downgrade_to_the_release_schema_keeps_rows_and_the_release_reads_them(
    field_files: FieldFiles, tmp_path: Path, schema: int
) -> None:
    path = field_copy(field_files, schema, tmp_path / "state.db")
    _, _, release_reads = field_files.get(schema)
    before = raw_tables(path)
    url = f"sqlite:///{path}"
    migrate.upgrade(url)

    migrate.downgrade(url, DOWNGRADE_REVISION[schema])

    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(schema,)]
    after = raw_tables(path)
    assert_rows_kept(before, after, may_change=may_be_tagged(schema))
    assert_only_delegate_tags_added(before["sessions"], after["sessions"])
    release = field_files.hermes(schema)
    assert_reads_match(without_delegate_tags(release_reads, schema), release.read(path),
                       f"{release.release} after a downgrade")  # fmt: skip


def test_real_hermes_18_reads_and_writes_a_file_we_created(
    field_files: FieldFiles, tmp_path: Path
) -> None:
    """A store we created fresh (``SessionDB()`` on an empty path) and filled through the
    driver's scenario is a Hermes 0.18 file: Hermes's open changes nothing, its reads return
    what ours return (multi-part content, tool calls, CJK, lineage, archive, rewind,
    compaction), and what it appends we read and find."""
    path = tmp_path / "state.db"
    SessionDB(db_path=path).close()  # created at head by us
    build_with_sessionstore(path, tmp_path / "home")
    schema_before = schema_sql(path)
    db = SessionDB(db_path=path)
    try:
        ours = our_reads(db)
    finally:
        db.close()
    head = field_files.hermes(HEAD_HERMES)

    theirs = head.read(path)

    assert schema_sql(path) == schema_before, "real Hermes 0.18 changed a file we created"
    assert_reads_match(theirs, ours, "sessionstore on its own file, as Hermes 0.18 reads it",
                       skip=SEARCHES)  # fmt: skip
    multi_part = ours["messages"]["field-root-tip"][4]["content"]
    assert isinstance(multi_part, list) and multi_part[0]["text"].startswith("Here is")
    parts = [{"type": "text", "text": "Hermes pasted a diagram of the 网络拓扑"},
             {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]  # fmt: skip
    new_ids = head.calls(path, [
        ("append_message", ["field-root-tip", "user", parts], {}),
        ("append_message", ["field-root-tip", "assistant", "The topology has two spines."],
         {"finish_reason": "stop", "tool_calls": None}),
        ("set_session_title", ["field-empty", "Filled by Hermes"], {}),
    ])  # fmt: skip
    assert schema_sql(path) == schema_before

    db = SessionDB(db_path=path)
    try:
        tip = db.get_messages("field-root-tip")
        assert [(m["id"], m["content"]) for m in tip[-2:]] == [
            (new_ids[0], parts), (new_ids[1], "The topology has two spines."),
        ]  # fmt: skip
        assert [hit["id"] for hit in db.search_messages("spines")] == [new_ids[1]]
        # Words of a multi-part message are found; its CJK is not, in Hermes either: Hermes's
        # json.dumps escapes it (\uXXXX) in the text both indexes see.
        assert [hit["id"] for hit in db.search_messages("diagram")] == [new_ids[0]]
        assert db.search_messages("网络拓扑") == []
        assert db.get_session_title("field-empty") == "Filled by Hermes"
        assert db.get_session("field-root-tip")["message_count"] == len(tip)
    finally:
        db.close()
    who = "sessionstore on its own file, as Hermes 0.18 reads it"
    assert_searches_match(theirs, ours, who)


def assert_untouched(path: Path, original: dict[str, bytes]) -> None:
    """The database file byte for byte, and no write-ahead content beside it. Reading a WAL
    file leaves SQLite's empty ``-wal`` and its ``-shm`` index when the reader may not
    checkpoint (a read-only open): they hold no data and Hermes's next open reuses them."""
    now = file_bytes(path)
    assert now[""] == original[""], "the database file changed"
    assert now.get("-wal", b"") == original.get("-wal", b""), "write-ahead content appeared"


def release_reads_of(field_files: FieldFiles, schema: int, tmp_path: Path) -> dict[str, Any]:
    pristine, _, _ = field_files.get(schema)
    return field_files.hermes(schema).read(backup_copy(pristine, tmp_path / "release-read.db"))


def test_a_v22_file_of_hermes_19_is_adopted_keeping_every_row(
    field_files: FieldFiles, tmp_path: Path
) -> None:
    """Hermes 0.19.0 writes schema v22: its file is adopted (backed up first), taken to our head
    (v31), and every row of every table, the per-model usage and routing tables included, is
    kept."""
    pristine, _, _ = field_files.get(22)
    directory = tmp_path / "hermes-home"
    directory.mkdir()
    path = backup_copy(pristine, directory / "state.db")
    before = raw_tables(path)
    assert before["session_model_usage"], "Hermes 0.19.0 recorded per-model usage"

    SessionDB(db_path=path).close()

    assert migrate.current(f"sqlite:///{path}") == migrate.HEAD_REVISION
    assert [p for p in directory.iterdir() if ".bak-" in p.name], "a backup was written first"
    assert_rows_kept(before, raw_tables(path))
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(31,)]


def test_a_file_past_v31_is_refused_untouched_and_read_only_reads_it(
    field_files: FieldFiles, tmp_path: Path
) -> None:
    """A Hermes 0.19.0 file a newer Hermes numbered 32: writing there without knowing what
    v32 maintains could make Hermes's own bookkeeping wrong, so opening it for writing is
    refused with the version named, before anything is written (no backup beside it either);
    read-only, its sessions, messages and search read as Hermes 0.19 read them, and the file
    stays byte-identical."""
    pristine, _, _ = field_files.get(22)
    directory = tmp_path / "hermes-home"
    directory.mkdir()
    path = backup_copy(pristine, directory / "state.db")
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("UPDATE schema_version SET version = 32")
    original = file_bytes(path)
    listing = sorted(p.name for p in directory.iterdir())

    with pytest.raises(SchemaTooNewError, match=r"schema version 32\b.*left untouched"):
        SessionDB(db_path=path)
    assert_untouched(path, original)
    beside = sorted(p.name for p in directory.iterdir() if not p.name.endswith(("-wal", "-shm")))
    assert beside == listing, "nothing written beside it"

    result = CliRunner().invoke(app, ["db", "upgrade", "--url", str(path)])
    assert result.exit_code == 1 and "32" in result.output, result.output
    assert_untouched(path, original)
    assert [p for p in directory.iterdir() if ".bak-" in p.name] == []

    release_reads = release_reads_of(field_files, 22, tmp_path)
    db = SessionDB(db_path=path, read_only=True)
    try:
        ours = {
            "sessions": {sid: db.get_session(sid) for sid in release_reads["sessions"]},
            "messages": {sid: db.get_messages(sid) for sid in release_reads["messages"]},
            "searches": {query: db.search_messages(query, limit=50) for query in SEARCH_QUERIES},
            "message_count": db.message_count(),
            "titles": {sid: db.get_session_title(sid) for sid in release_reads["titles"]},
        }
    finally:
        db.close()
    # Our columns the release knows too (each side has columns the other lacks: v22's that
    # 0.18 does not know, v23...v31's that 0.18 never had), each with Hermes's value.
    known = {**release_reads, "sessions": {
        sid: {key: row[key] for key in SESSION_FIELDS if key in row}
        for sid, row in release_reads["sessions"].items()
    }, "messages": {
        sid: [{key: row[key] for key in MESSAGE_FIELDS if key in row} for row in rows]
        for sid, rows in release_reads["messages"].items()
    }}  # fmt: skip
    assert_reads_match({key: known[key] for key in ours}, ours, "read-only on v23")
    assert_untouched(path, original)


@pytest.mark.postgresql
@pytest.mark.parametrize("schema", FIELD_SCHEMAS, ids=lambda v: f"v{v}")
def test_a_real_field_file_copied_to_postgresql_reads_as_hermes_reads_it(
    field_files: FieldFiles, tmp_path: Path, empty_pg_url: str, schema: int
) -> None:
    """`sessionstore db copy` of a real file into PostgreSQL: the same rows come back as Hermes
    0.18 reads from its own upgrade of the file (multi-part content included, whose NUL marker
    PostgreSQL keeps as U+FFFD), and search finds the same messages (ranking and snippets are
    PostgreSQL's own)."""
    path = field_copy(field_files, schema, tmp_path / "state.db")
    transfer.copy(f"sqlite:///{path}", empty_pg_url)
    expected = field_files.head_reads(schema)

    db = SessionDB(url=empty_pg_url)
    try:
        ours = our_reads(db)
    finally:
        db.close()

    # `db copy` moves sessions and messages; Hermes's state_meta and leases stay behind.
    not_copied = ("searches", "searches_inactive", "meta", "lock_holder")
    plain = {k: v for k, v in expected.items() if k not in not_copied}
    assert_reads_match(plain, ours, f"sessionstore on PostgreSQL, a v{schema} file copied")
    differ = {
        (section, query): (sorted(hit["id"] for hit in hits),
                           sorted(hit["id"] for hit in ours[section][query]))
        for section in ("searches", "searches_inactive")
        for query, hits in expected[section].items()
        if sorted(hit["id"] for hit in hits) != sorted(hit["id"] for hit in ours[section][query])
    }  # fmt: skip
    # One known difference: PostgreSQL's parser keeps ``deployment.apps/web`` as one token (a
    # path), where FTS5 splits it into words, so the word "deployment" misses that message.
    dotted = [m["id"] for m in expected["messages"]["field-root"]
              if m["content"] == "deployment.apps/web configured"]  # fmt: skip
    assert differ == {
        (section, "deployment"): (expected_ids, [i for i in expected_ids if i not in dotted])
        for section in ("searches", "searches_inactive")
        for expected_ids in [sorted(hit["id"] for hit in expected[section]["deployment"])]
    }


@pytest.mark.parametrize("schema", FIELD_SCHEMAS, ids=lambda v: f"v{v}")
def test_doctor_finds_a_real_upgraded_file_healthy(
    field_files: FieldFiles, tmp_path: Path, schema: int
) -> None:
    """A real Hermes file, upgraded, is healthy: in particular a session Hermes 0.18 compacted
    (``archive_and_compact`` counts the compacted set, not the archived rows) is not a wrong
    counter, and ``--fix`` would have nothing to rewrite."""
    path = field_copy(field_files, schema, tmp_path / "state.db")
    SessionDB(db_path=path, backup_on_adopt=False).close()
    with Store.open(f"sqlite:///{path}") as store:
        report = doctor.diagnose(store)
    assert report.problems == []


# -- Hermes 0.18's listing keywords on arbitrary session graphs ----------------------------------
# Ids that sort differently by bytes and by locale, fold differently in ASCII and in Unicode,
# and hold LIKE's wildcards and escape.
GRAPH_IDS = (
    "A", "a", "B_1", "b%2", "c\\3", "Ünï", "ünï", "root-X", "z", "_q", "é", "Z9", "m-m", "x y",
)  # fmt: skip
GRAPH_SEEDS = range(12)
Graph = tuple[list[dict[str, Any]], list[tuple[str, float]]]


def random_graph(seed: int) -> Graph:
    """Sessions with parents (always an earlier session: no cycle, which Hermes's walk would
    not survive), every end reason that matters to a chain, fork markers, tool runs,
    archived rows, and times drawn from a few values so activity and starts tie often."""
    rng = random.Random(seed)
    ids = rng.sample(GRAPH_IDS, rng.randint(9, len(GRAPH_IDS)))
    sessions: list[dict[str, Any]] = []
    messages: list[tuple[str, float]] = []
    for index, session_id in enumerate(ids):
        reason = rng.choice([None, None, "compression", "compression", "branched", "user_exit"])
        count = rng.randint(0, 3)
        parent = rng.choice(ids[:index]) if index and rng.random() < 0.45 else None
        # A fork's marker names its parent, as Hermes writes it; one naming another session
        # is inherited by a continuation, which 0.18 does not follow and ours does (that case
        # runs against iot 0.22.2 in test_real_iot_chain_rule.py). Written raw: a parent id
        # json.dumps would \u-escape is matched as written raw only (sessions/lineage.py).
        marker = json.dumps(parent or "x", ensure_ascii=False)
        sessions.append({
            "id": session_id,
            "parent": parent,
            "source": rng.choice(["cli", "cli", "cli", "telegram", "tool"]),
            "model_config": rng.choice([None, None, None, f'{{"_branched_from": {marker}}}',
                                        f'{{"_delegate_from": {marker}}}',
                                        '{"temperature": 1}']),
            "started_at": float(rng.choice([100, 200, 300, 400, 500])),
            "ended_at": float(rng.choice([150, 250, 350, 450])) if reason else None,
            "end_reason": reason,
            "message_count": count,
            "archived": int(rng.random() < 0.1),
        })  # fmt: skip
        messages += [(session_id, float(rng.choice([120, 220, 320, 420, 520, 620])))
                     for _ in range(count)]  # fmt: skip
    return sessions, messages


def write_graph(path: Path, graph: Graph) -> None:
    sessions, messages = graph
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.executemany(
            "INSERT INTO sessions (id, source, model_config, parent_session_id, started_at,"
            " ended_at, end_reason, message_count, archived) VALUES (:id, :source,"
            " :model_config, :parent, :started_at, :ended_at, :end_reason, :message_count,"
            " :archived)",
            sessions,
        )
        conn.executemany(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', ?, ?)",
            [(session_id, f"said at {at}", at) for session_id, at in messages],
        )


def graph_calls(seed: int, graph: Graph) -> list[tuple[str, list[Any], dict[str, Any]]]:
    rng = random.Random(seed + 1000)
    ids = [session["id"] for session in graph[0]]
    pieces = []
    for session_id in rng.sample(ids, 4):
        start = rng.randrange(len(session_id))
        piece = session_id[start : start + rng.randint(1, 3)]
        pieces.append(piece.upper() if rng.random() < 0.5 else f" {piece} ")
    needles = ["%", "_", "\\", "Ü", "ü", "-", *pieces]
    recent = {"order_by_last_active": True, "limit": 100}
    listings = [
        recent,
        {**recent, "project_compression_tips": False},
        {**recent, "include_children": True},
        {**recent, "include_archived": True, "limit": 4, "offset": 1},
        {**recent, "archived_only": True},
        {**recent, "min_message_count": 2},
        {**recent, "min_message_count": 1, "include_children": True},
        {**recent, "source": "cli", "exclude_sources": ["tool"]},
        *({**recent, "id_query": needle} for needle in needles),
        *({**recent, "id_query": needle, "include_children": True} for needle in needles[-3:]),
        {"limit": 100, "min_message_count": 2},  # by start: Hermes leaves ties unordered
        {"limit": 100, "id_query": pieces[0]},  # by start Hermes ignores id_query
    ]
    counts = [
        {"min_message_count": 2},
        {"min_message_count": 1, "exclude_children": True},
        {"min_message_count": -1, "include_archived": True},
        {"min_message_count": 3, "archived_only": True},
    ]
    return [("list_sessions_rich", [], kwargs) for kwargs in listings] + [
        ("session_count", [], kwargs) for kwargs in counts
    ]


def listed_roots(rows: list[dict[str, Any]]) -> list[str]:
    """The listed sessions, each as the root a projected row stands for."""
    return [row.get("_lineage_root_id", row["id"]) for row in rows]


def assert_listing_keywords_match(
    calls: list[tuple[str, list[Any], dict[str, Any]]], theirs: list[Any], db: SessionDB,
    where: str,
) -> int:
    """Our answers to ``calls`` against Hermes's: counts equal; listings by activity list the
    same sessions in the same order, each row with Hermes's values wherever both show the
    same session; by start, the same sessions. Returns the rows compared whole."""
    compared = 0
    for (name, _, kwargs), expected in zip(calls, theirs, strict=True):
        ours = json.loads(json.dumps(getattr(db, name)(**kwargs), default=repr))
        label = f"{where}: {name}({kwargs})"
        if name == "session_count":
            assert ours == expected, label
            continue
        if not kwargs.get("order_by_last_active"):
            assert sorted(listed_roots(ours)) == sorted(listed_roots(expected)), label
            continue
        assert listed_roots(ours) == listed_roots(expected), label
        for our_row, their_row in zip(ours, expected, strict=True):
            if our_row["id"] == their_row["id"]:
                assert_same_keys(their_row, our_row, label)
                compared += 1
    return compared


def graph_file(field_files: FieldFiles, tmp_path: Path, seed: int) -> tuple[Path, Any, Any]:
    """A fresh store of ours holding the seed's graph, and Hermes 0.18's answers on it."""
    path = tmp_path / "state.db"
    SessionDB(db_path=path).close()  # created at head: Hermes 0.18 opens it unchanged
    graph = random_graph(seed)
    write_graph(path, graph)
    calls = graph_calls(seed, graph)
    theirs = field_files.hermes(HEAD_HERMES).calls(backup_copy(path, tmp_path / "h.db"), calls)
    return path, calls, theirs


@pytest.mark.parametrize("seed", GRAPH_SEEDS)
def test_listing_keywords_answer_as_real_hermes_18_on_random_graphs(
    field_files: FieldFiles, tmp_path: Path, seed: int
) -> None:
    """``min_message_count``, ``order_by_last_active`` and ``id_query`` (and the count's
    ``min_message_count``) against the real Hermes 0.18 on the same file: forward chains
    through every kind of child, ties of activity and start, ids that sort and fold
    differently by bytes and by locale, wildcards in the query."""
    path, calls, theirs = graph_file(field_files, tmp_path, seed)
    db = SessionDB(db_path=path, backup_on_adopt=False)
    try:
        compared = assert_listing_keywords_match(calls, theirs, db, f"seed {seed}")
    finally:
        db.close()
    assert compared > 20
    # Not vacuous: by activity is not the order by start, and some id query narrows.
    by_activity, by_start = theirs[1], sorted(
        theirs[1], key=lambda row: (row["started_at"], row["id"].encode()), reverse=True
    )
    assert listed_roots(by_activity) != listed_roots(by_start)


@pytest.mark.postgresql
@pytest.mark.parametrize("seed", GRAPH_SEEDS[:6])
def test_listing_keywords_on_postgresql_answer_as_real_hermes_18(
    field_files: FieldFiles, tmp_path: Path, fresh_migrated_pg_url: str, seed: int
) -> None:
    """The same graphs copied into PostgreSQL (``sessionstore db copy``): the same answers as
    Hermes 0.18 gives on the SQLite file, ties by bytes and ASCII-only folding included. The
    target is an empty head store of the test's own (the listing is the subject; a copy into
    a brand-new database, where the copy runs the chain, is proved by the tests above)."""
    path, calls, theirs = graph_file(field_files, tmp_path, seed)
    transfer.copy(f"sqlite:///{path}", fresh_migrated_pg_url)
    db = SessionDB(url=fresh_migrated_pg_url)
    try:
        compared = assert_listing_keywords_match(calls, theirs, db, f"PostgreSQL, seed {seed}")
    finally:
        db.close()
    assert compared > 20
