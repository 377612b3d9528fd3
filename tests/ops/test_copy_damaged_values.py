"""``db copy`` of a damaged or hand-edited SQLite file into PostgreSQL, and its export and
import.

SQLite keeps a value of any type in any column; PostgreSQL's columns hold their own type only.
A number column holding text (a ``message_count`` of ``'many'``, a timestamp of
``'yesterday'``) stopped the copy with psycopg's ``DataError`` (untyped, naming a parameter's
number); it is now refused typed, naming the record and the column, before its batch is
written. A session id stored as a BLOB is copied as its text, and the copy's closing check
looks for it so (it reported the copy incomplete). An export of such a file restores as it
was stored (its import refused the whole file over one cell), and ``db doctor --fix`` mends
every such cell, so that the copy the refusal sends the user back to completes.
"""

from __future__ import annotations

import io
import itertools
import json
import math
from contextlib import closing
from pathlib import Path

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from real_hermes import backup_copy
from store_library import (
    connect_like_the_store,
    damaging_transaction,
    engine_like_the_store,
    plain_transaction,
)
from typer.testing import CliRunner

from sessionstore import (
    SessionDB,
    SessionStoreError,
    Store,
    UnsupportedValueError,
    cli,
)
from sessionstore.ops import doctor
from sessionstore.ops.transfer import ImportFormatError, copy, export_jsonl, import_jsonl
from sessionstore.sql import codec
from sessionstore.sql.codec import cell_text


def _source(tmp_path: Path, damage: str) -> str:
    url = f"sqlite:///{tmp_path / 'damaged.db'}"
    with SessionDB(url=url) as db:
        db.create_session("first", "cli")
        db.append_message("first", "user", "a clean session, copied")
        db.create_session("damaged", "cli")
        db.append_message("damaged", "user", "hi")
    with damaging_transaction(url) as conn:
        conn.execute(sa.text(damage))
    return url


@pytest.mark.parametrize(
    ("damage", "named"),
    [
        ("UPDATE sessions SET message_count = 'many' WHERE id = 'damaged'",
         "the session 'damaged' of the source holds message_count='many'"),
        ("UPDATE messages SET timestamp = 'yesterday' WHERE session_id = 'damaged'",
         "holds timestamp='yesterday'"),
        ("UPDATE sessions SET ended_at = x'00ff' WHERE id = 'damaged'",
         "holds ended_at="),
        ("UPDATE messages SET active = 'yes' WHERE session_id = 'damaged'",
         "holds active='yes'"),
        # an infinity in an integer column: the server's "bigint out of range" named no row
        ("UPDATE sessions SET input_tokens = 9e999 WHERE id = 'damaged'",
         "holds input_tokens=inf"),
        # a fraction in an integer column: the server rounded it without a word
        ("UPDATE messages SET token_count = 2.5 WHERE session_id = 'damaged'",
         "holds token_count=2.5"),
        # a flag past 32 bits: "integer out of range", naming no record
        ("UPDATE sessions SET pinned = 2147483648 WHERE id = 'damaged'",
         "holds pinned=2147483648"),
    ],
)  # fmt: skip
def test_a_number_column_holding_text_is_refused_typed_and_named(
    tmp_path: Path, fresh_migrated_pg_url: str, damage: str, named: str
) -> None:
    source = _source(tmp_path, damage)
    with pytest.raises(UnsupportedValueError, match="db doctor --fix") as refused:
        copy(source, fresh_migrated_pg_url)
    assert named in str(refused.value)
    # The source is as it was: nothing of the copy wrote there.
    engine = engine_like_the_store(source)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM messages")).scalar_one() == 2
    engine.dispose()


@pytest.mark.parametrize(
    ("damage", "column", "mended"),
    [
        ("UPDATE sessions SET message_count = 'many'", "message_count", 1),  # recounted
        ("UPDATE sessions SET input_tokens = 9e999", "input_tokens", 0),  # the default
        ("UPDATE sessions SET input_tokens = '1_200'", "input_tokens", 1200),  # its text
        ("UPDATE sessions SET ended_at = x'00ff'", "ended_at", None),  # no value
        ("UPDATE sessions SET output_tokens = 7.5", "output_tokens", 8),  # rounded to even
        ("UPDATE sessions SET started_at = 'yesterday'", "started_at", "its message's time"),
    ],
)  # fmt: skip
def test_after_the_doctor_mends_the_cell_the_copy_completes(
    tmp_path: Path, fresh_migrated_pg_url: str, damage: str, column: str, mended: object
) -> None:
    """The copy's refusal sends the user to ``db doctor --fix``, which mended only the two
    counters: for a time, a cost or a token figure it said "no problems found", and the file
    could not be moved to PostgreSQL at all (``tests/ops/test_number_cells.py``)."""
    source = _source(tmp_path, damage + " WHERE id = 'damaged'")
    with pytest.raises(UnsupportedValueError, match="db doctor --fix"):
        copy(source, fresh_migrated_pg_url)
    with Store.open(source) as store:
        report = doctor.diagnose(store)
        assert not report.healthy
        doctor.repair(store, report)
        assert doctor.diagnose(store).healthy
    result = copy(source, fresh_migrated_pg_url)
    assert (result.sessions, result.messages) == (2, 2)
    with SessionDB(url=fresh_migrated_pg_url) as db:
        damaged = db.get_session("damaged")
        assert damaged is not None
        if mended == "its message's time":
            mended = db.get_messages("damaged")[0]["timestamp"]
        assert damaged[column] == mended


def test_a_session_id_stored_as_a_blob_is_copied_as_its_text(
    tmp_path: Path, fresh_migrated_pg_url: str
) -> None:
    source = _source(tmp_path, "UPDATE sessions SET id = CAST(id AS BLOB) WHERE id = 'damaged'")
    with damaging_transaction(source) as conn:
        conn.execute(sa.text(
            "UPDATE messages SET session_id = CAST(session_id AS BLOB) "
            "WHERE session_id = 'damaged'"
        ))  # fmt: skip
    result = copy(source, fresh_migrated_pg_url)  # raised "copy incomplete"
    assert (result.sessions, result.messages) == (2, 2)
    with SessionDB(url=fresh_migrated_pg_url) as db:
        assert [m["content"] for m in db.get_messages("damaged")] == ["hi"]


def test_any_value_postgresql_finds_of_another_type_is_a_typed_error(
    fresh_migrated_pg_url: str,
) -> None:
    """The server's own refusal (SQLSTATE 22P02) is typed too, for what no check foresaw."""
    with (
        Store.open(fresh_migrated_pg_url) as store,
        pytest.raises(UnsupportedValueError, match="not of its column's type"),
    ):
        store.write(lambda conn: conn.exec_driver_sql("SELECT 'many'::bigint").all())


@pytest.mark.parametrize("identity", ["free", b"\x01\x02"])
def test_a_damaged_display_identity_travels_as_null_and_the_copies_complete(
    tmp_path: Path, fresh_migrated_pg_url: str, identity: str | bytes
) -> None:
    """A ``display_identity`` that is no digest (text, a BLOB of another length): an export
    failed on the text (``string argument without an encoding``) or wrote hex the import then
    refused, whole file and all. It is derived from the row (Hermes fills a NULL one when it
    reads it), so it travels as NULL; the digests of the other rows travel as they are."""
    source = _source(tmp_path, "SELECT 1")
    engine = engine_like_the_store(source)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE messages SET display_identity = :i WHERE id = 1"),
                     {"i": identity})  # fmt: skip
        kept = conn.execute(sa.text("SELECT display_identity FROM messages WHERE id = 2")).scalar()
    engine.dispose()
    assert isinstance(kept, bytes) and len(kept) == 32
    export = tmp_path / "export.jsonl"
    runner = CliRunner()
    exported = runner.invoke(cli.app, ["--url", source, "export", "-o", str(export)])
    assert exported.exit_code == 0, exported.output
    imported_url = f"sqlite:///{tmp_path / 'imported.db'}"
    imported = runner.invoke(cli.app, ["--url", imported_url, "import", str(export)])
    assert imported.exit_code == 0, imported.output
    assert copy(source, fresh_migrated_pg_url).messages == 2
    for url in (imported_url, fresh_migrated_pg_url):
        engine = engine_like_the_store(url)
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT id, display_identity FROM messages"))
            identities = {row[0]: row[1] for row in rows}
        engine.dispose()
        assert identities[1] is None and bytes(identities[2]) == kept, url


@pytest.mark.parametrize(
    "damage",
    [
        "UPDATE sessions SET started_at = 'yesterday' WHERE id = 'damaged'",
        "UPDATE sessions SET estimated_cost_usd = x'00ff' WHERE id = 'damaged'",
        "UPDATE sessions SET last_activity_at = '' WHERE id = 'damaged'",
    ],
)
def test_a_sqlite_copy_carries_a_time_or_cost_holding_text_as_sqlite_keeps_it(
    tmp_path: Path, damage: str
) -> None:
    """Into SQLite, which keeps it as the source does (bytes as their text, as the copy
    carries every BLOB cell): SQLAlchemy's REAL bound
    ``float(value)`` and the copy stopped (``unexpected StatementError: could not convert
    string to float``), though the messages' times of the same kind went through."""
    source = _source(tmp_path, damage)
    target = f"sqlite:///{tmp_path / 'copy.db'}"
    copy(source, target)
    column = damage.split()[3]
    read = f"SELECT {column}, typeof({column}) FROM sessions WHERE id = 'damaged'"
    engines = [engine_like_the_store(url) for url in (source, target)]
    try:
        stored = [engine.connect().execute(sa.text(read)).one() for engine in engines]
    finally:
        for engine in engines:
            engine.dispose()
    # as text: bytes in any column travel as their text, as every copy carries them
    assert stored[1] == (cell_text(stored[0][0]), "text"), stored
    with SessionDB(url=target) as db:
        assert [m["content"] for m in db.get_messages("damaged")] == ["hi"]


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_a_usage_key_held_as_a_blob_is_copied_as_its_text_and_found(
    tmp_path: Path, fresh_migrated_pg_url: str, dialect: str
) -> None:
    """A usage row's model or task stored as bytes goes in as its text (as every text cell
    does); the copy's closing check looked for the bytes and called the copy incomplete."""
    source = _source(tmp_path, "SELECT 1")
    with SessionDB(url=source) as db:
        db.update_token_counts("damaged", input_tokens=7, model="gpt-x")
    with plain_transaction(source) as conn:
        conn.execute(sa.text("UPDATE session_model_usage SET model = CAST(model AS BLOB), "
                             "task = CAST('summary' AS BLOB)"))  # fmt: skip
    target = fresh_migrated_pg_url if dialect == "postgresql" else f"sqlite:///{tmp_path / 'c.db'}"
    copy(source, target)
    with Store.open(target) as store:
        rows = store.read(lambda conn: conn.execute(sa.text(
            "SELECT session_id, model, task, input_tokens FROM session_model_usage"
        )).all())  # fmt: skip
    assert [tuple(row) for row in rows] == [("damaged", "gpt-x", "summary", 7)]


def test_usage_rows_of_a_missing_session_get_a_placeholder_and_the_copy_completes(
    tmp_path: Path, fresh_migrated_pg_url: str
) -> None:
    """A usage row whose session is gone (written with foreign keys off) was carried by no
    copy, which then called itself incomplete, and the doctor saw nothing to mend. It is an
    orphan now, as a message is: ``--fix`` gives it a placeholder session, keeping its
    figures, and the copy completes."""
    source = _source(tmp_path, "SELECT 1")
    with SessionDB(url=source) as db:
        db.update_token_counts("damaged", input_tokens=7, model="gpt-x")
    with damaging_transaction(source) as conn:
        conn.execute(sa.text("UPDATE session_model_usage SET session_id = 'gone'"))
    with pytest.raises(SessionStoreError, match=r"session_model_usage.*db doctor --fix"):
        copy(source, fresh_migrated_pg_url)
    runner = CliRunner()
    checked = runner.invoke(cli.app, ["--url", source, "db", "doctor"])
    assert checked.exit_code == 1 and "1 usage row(s)" in checked.output, checked.output
    fixed = runner.invoke(cli.app, ["--url", source, "db", "doctor", "--fix"])
    assert fixed.exit_code == 0, fixed.output
    copy(source, fresh_migrated_pg_url)
    with SessionDB(url=fresh_migrated_pg_url) as db:
        assert db.get_session("gone") is not None
        assert [(row["model"], row["input_tokens"]) for row in db.get_model_usage("gone")] == [
            ("gpt-x", 7)
        ]


_EXPORT_DAMAGES = [
    ("sessions", "message_count", "'many'"),
    ("sessions", "input_tokens", "2.5"),
    ("sessions", "started_at", "'yesterday'"),
    ("sessions", "ended_at", "x'6e6f'"),  # bytes travel as their text, as in every copy
    ("sessions", "estimated_cost_usd", "9e999"),
    ("sessions", "started_at", "-9e999"),  # a required time: null stopped the import
    ("messages", "timestamp", "'later'"),
    ("messages", "token_count", "9e999"),
    ("session_model_usage", "input_tokens", "'lots'"),
    ("session_model_usage", "first_seen", "9e999"),
]


_ORDER = {"sessions": "id", "messages": "id", "session_model_usage": "session_id, model"}


def _stored(url: str, table: str, column: str) -> list[tuple[object, str]]:
    engine = engine_like_the_store(url)
    read = f"SELECT {column}, typeof({column}) FROM {table} ORDER BY {_ORDER[table]}"
    try:
        with engine.connect() as conn:
            return [(row[0], row[1]) for row in conn.execute(sa.text(read))]
    finally:
        engine.dispose()


def _damaged_source(tmp_path: Path, table: str, column: str, value: str) -> str:
    source = _source(tmp_path, "SELECT 1")
    with SessionDB(url=source) as db:
        db.update_token_counts("damaged", input_tokens=7, model="gpt-x")
    owner = "id" if table == "sessions" else "session_id"
    with damaging_transaction(source) as conn:
        changed = conn.execute(
            sa.text(f"UPDATE {table} SET {column} = {value} WHERE {owner} = 'damaged'")
        )
        assert changed.rowcount == 1
    return source


def _strict_json(line: str) -> object:
    """A line as a strict JSON parser reads it: ``Infinity``, ``NaN`` are no JSON."""

    def refuse(name: str) -> object:
        raise ValueError(f"{name} is no JSON")

    return json.loads(line, parse_constant=refuse)


@pytest.mark.parametrize(("table", "column", "value"), _EXPORT_DAMAGES)
def test_an_export_of_a_damaged_file_imports_as_it_was_stored(
    tmp_path: Path, table: str, column: str, value: str
) -> None:
    """The export wrote the cell as it was (an infinity as null), and its own import refused
    the whole file: "bad session record: message_count must be an int, not str", or
    "started_at is missing". A backup that cannot be restored: now every row comes back, each
    damaged value as it was stored (``db copy``'s rule; the doctor mends it where it is)."""
    source = _damaged_source(tmp_path, table, column, value)
    export = tmp_path / "export.jsonl"
    runner = CliRunner()
    exported = runner.invoke(cli.app, ["--url", source, "export", "-o", str(export)])
    assert exported.exit_code == 0, exported.output
    for line in export.read_text(encoding="utf-8").splitlines():
        _strict_json(line)  # jq reads it (1e999 is a number by JSON's grammar)
    target = f"sqlite:///{tmp_path / 'restored.db'}"
    imported = runner.invoke(cli.app, ["--url", target, "import", str(export)])
    assert imported.exit_code == 0, imported.output
    assert "imported 2 session(s) and 2 message(s)" in imported.output
    before, after = _stored(source, table, column), _stored(target, table, column)
    assert after == [(cell_text(cell), "text") if kind == "blob" else (cell, kind)
                     for cell, kind in before]  # fmt: skip


def test_an_import_into_postgresql_names_a_damaged_value_before_writing_anything(
    tmp_path: Path, fresh_migrated_pg_url: str
) -> None:
    """PostgreSQL cannot keep the text: the import is refused before its first write, naming
    the session, the column and the mend; after ``db doctor --fix`` in the store it came
    from, its new export imports."""
    source = _damaged_source(tmp_path, "sessions", "started_at", "'yesterday'")
    export = tmp_path / "export.jsonl"
    runner = CliRunner()

    def export_and_import() -> str:
        exported = runner.invoke(cli.app, ["--url", source, "export", "-o", str(export)])
        assert exported.exit_code == 0, exported.output
        imported = runner.invoke(cli.app, ["--url", fresh_migrated_pg_url, "import",
                                           str(export)])  # fmt: skip
        return str(imported.output)

    refused = export_and_import()
    assert "the session 'damaged' of the file holds started_at='yesterday'" in refused
    assert "nothing was imported" in refused and "db doctor --fix" in refused
    with SessionDB(url=fresh_migrated_pg_url) as db:
        assert db.session_count(include_archived=True) == 0
    mended = runner.invoke(cli.app, ["--url", source, "db", "doctor", "--fix"])
    assert mended.exit_code == 0, mended.output
    assert "imported 2 session(s) and 2 message(s)" in export_and_import()
    with SessionDB(url=fresh_migrated_pg_url) as db:
        damaged = db.get_session("damaged")
        assert damaged is not None
        assert damaged["started_at"] == db.get_messages("damaged")[0]["timestamp"]


_ANY_JSON_NUMBER_FIELD = (
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
    | st.lists(st.integers(), max_size=2) | st.sampled_from([2**63, -(2**63) - 1, 2**1100])
)
"""What a hand-made or damaged export line may hold in a number field."""
_NUMBER_FIELDS_TRIED = (
    ("session", "message_count"), ("session", "input_tokens"), ("session", "started_at"),
    ("session", "estimated_cost_usd"), ("session", "pinned"), ("message", "timestamp"),
    ("message", "token_count"), ("message", "active"), ("usage", "input_tokens"),
    ("usage", "first_seen"),
)  # fmt: skip


@pytest.mark.slow
@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(field=st.sampled_from(_NUMBER_FIELDS_TRIED), value=_ANY_JSON_NUMBER_FIELD)
def test_any_value_in_a_number_field_is_restored_as_written_or_refused_whole(
    migrated_sqlite_template: Path,
    tmp_path_factory: pytest.TempPathFactory,
    field: tuple[str, str],
    value: object,
) -> None:
    """Into SQLite: the import restores the value as the line holds it (an export of the
    store gives it back), or refuses the whole file, typed, before writing anything: never a
    half import, an untyped error, or a value changed on the way."""
    kind, name = field
    records: dict[str, dict[str, object]] = {
        "session": {"id": "s1", "source": "cli", "started_at": 1.0},
        "message": {"id": 1, "session_id": "s1", "role": "user", "timestamp": 2.0},
        "usage": {"session_id": "s1", "model": "m"},
    }
    records[kind][name] = value
    text = '{"format": "sessionstore-export", "version": 6}\n' + "".join(
        codec.dumps_strict({record: row}, keep_infinities=True) + "\n"
        for record, row in records.items()
    )  # fmt: skip
    path = tmp_path_factory.mktemp("n") / "t.db"
    with SessionDB(url=f"sqlite:///{backup_copy(migrated_sqlite_template, path)}") as target:
        try:
            import_jsonl(target.store, io.StringIO(text))
        except (ImportFormatError, SessionStoreError) as exc:
            # Not ConstraintViolationError: null in a NOT NULL column with a default (a line's
            # ``"pinned": null``) is that default, as the field left out is.
            assert isinstance(exc, (ImportFormatError, UnsupportedValueError)), exc
            assert target.session_count(include_archived=True) == 0
            return
        buffer = io.StringIO()
        export_jsonl(target.store, buffer)
    lines = buffer.getvalue().split("\n")[1:-1]  # not splitlines(): U+0085 is in the text
    exported = {next(iter(line)): next(iter(line.values())) for line in map(json.loads, lines)}
    again = exported[kind][name]
    if value is None or (isinstance(value, float) and math.isnan(value)):
        # null in the line (NaN is written so): the column's default, where it takes no NULL
        defaulted = {("session", "pinned"): 0, ("message", "active"): 1,
                     ("usage", "input_tokens"): 0}  # fmt: skip
        assert field not in defaulted or again == defaulted[field], (value, again)
        return
    # As SQLite's column affinity stores it (asked of SQLite): numeric text as its number, an
    # integer in a REAL column as a float (2**53 + 1 too), a whole float in an INTEGER one as
    # an int; anything else as the line held it.
    whole = name in ("message_count", "input_tokens", "pinned", "token_count", "active")
    with closing(connect_like_the_store(":memory:")) as oracle:
        oracle.execute(f"CREATE TABLE t (v {'INTEGER' if whole else 'REAL'})")
        stored = oracle.execute("INSERT INTO t VALUES (?) RETURNING v", (value,)).fetchone()[0]
    assert again == stored, (value, stored, again)


_EXAMPLES = itertools.count(1)


@pytest.mark.slow
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(field=st.sampled_from(_NUMBER_FIELDS_TRIED), value=_ANY_JSON_NUMBER_FIELD)
def test_any_value_in_a_number_field_reaches_postgresql_exactly_or_is_refused_whole(
    fresh_migrated_pg_url: str, field: tuple[str, str], value: object
) -> None:
    """Into PostgreSQL, whose columns hold their own type: a number the column holds is stored
    exactly so (an infinity in a float column too); text, or a float that is no whole number
    in an integer column (which the server rounded), is refused by name before anything is
    written."""
    kind, name = field
    number = next(_EXAMPLES)
    session_id = f"pg-{number}"
    records: dict[str, dict[str, object]] = {
        "session": {"id": session_id, "source": "cli", "started_at": 1.0},
        "message": {"id": number, "session_id": session_id, "role": "user", "timestamp": 2.0},
        "usage": {"session_id": session_id, "model": "m"},
    }
    records[kind][name] = value
    text = '{"format": "sessionstore-export", "version": 6}\n' + "".join(
        codec.dumps_strict({record: row}, keep_infinities=True) + "\n"
        for record, row in records.items()
    )  # fmt: skip
    whole = name in ("message_count", "input_tokens", "pinned", "token_count", "active")
    with SessionDB(url=fresh_migrated_pg_url) as target:
        try:
            import_jsonl(target.store, io.StringIO(text))
        except (ImportFormatError, SessionStoreError) as exc:
            # Not the server's ValueOutOfRangeError, which named no record.
            assert type(exc) in (ImportFormatError, UnsupportedValueError), exc
            assert target.get_session(session_id) is None
            if isinstance(exc, UnsupportedValueError):  # what the column cannot hold
                flag = name in ("pinned", "active")  # INTEGER there: 32 bits
                assert isinstance(value, str) or (whole and isinstance(value, (int, float)) and (
                    (isinstance(value, float) and not value.is_integer())
                    or abs(value) >= (2**31 if flag else 2**63))), value  # fmt: skip
            return
        table = {"session": "sessions", "message": "messages", "usage": "session_model_usage"}
        owner = "id" if kind == "session" else "session_id"
        stored = target.store.read(lambda conn: conn.execute(sa.text(
            f"SELECT {name} FROM {table[kind]} WHERE {owner} = :s"), {"s": session_id}
        ).scalar_one())  # fmt: skip
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return  # null in the line (NaN is written so), as in the SQLite test above
    assert not isinstance(value, str)
    assert stored == value and type(stored) is (int if whole else float), (value, stored)


def test_null_in_a_field_whose_column_takes_none_is_its_default(migrated_sqlite_url: str) -> None:
    """A hand-made line's ``"pinned": null`` broke the target's NOT NULL constraint and the
    import was refused whole as "one message id twice"; it is the field left out: the default.
    A nullable field's null stays null (``observed``, ``ended_at``)."""
    lines = [
        {"session": {"id": "s1", "source": "cli", "started_at": 1.0, "pinned": None,
                     "archived": None, "ended_at": None}},
        {"message": {"id": 1, "session_id": "s1", "role": "user", "timestamp": 2.0,
                     "active": None, "observed": None}},
        {"usage": {"session_id": "s1", "model": "m", "input_tokens": None, "task": None}},
    ]  # fmt: skip
    text = '{"format": "sessionstore-export", "version": 6}\n' + "".join(
        json.dumps(line) + "\n" for line in lines
    )
    with SessionDB(url=migrated_sqlite_url) as db:
        import_jsonl(db.store, io.StringIO(text))
        session = db.get_session("s1")
        assert session is not None
        assert (session["pinned"], session["archived"], session["ended_at"]) == (0, 0, None)
        read = db.store.read(lambda conn: conn.execute(sa.text(
            "SELECT m.active, m.observed, u.input_tokens, u.task FROM messages m "
            "JOIN session_model_usage u ON u.session_id = m.session_id")).one())  # fmt: skip
        assert tuple(read) == (1, None, 0, "")


def test_a_postgresql_nan_copied_into_sqlite_is_refused_by_name_until_the_doctor_mends_it(
    fresh_migrated_pg_url: str, tmp_path: Path
) -> None:
    """PostgreSQL's float columns hold NaN, which SQLite stores as NULL: a start time of NaN
    stopped the copy with "database error: NOT NULL constraint failed: sessions.started_at"
    (a cost's would have become NULL without a word). Refused by name now, and the doctor
    of the source mends it."""
    with SessionDB(url=fresh_migrated_pg_url) as db:
        db.create_session("nan", "cli")
        db.append_message("nan", "user", "hi")
        db.store.write(lambda conn: conn.execute(sa.text(
            "UPDATE sessions SET started_at = 'NaN', estimated_cost_usd = 'NaN'")))  # fmt: skip
    target = f"sqlite:///{tmp_path / 'copy.db'}"
    with pytest.raises(UnsupportedValueError, match=r"the session 'nan' of the source holds "
                                                    r"(started_at|estimated_cost_usd)=nan"):
        copy(fresh_migrated_pg_url, target)
    # Its export writes the NaN null (JSON has none), which the import names with the mend.
    buffer = io.StringIO()
    with Store.open(fresh_migrated_pg_url) as store:
        export_jsonl(store, buffer)
    with (SessionDB(url=f"sqlite:///{tmp_path / 'imported.db'}") as db,
          pytest.raises(ImportFormatError, match=r"started_at is missing or null .* db doctor")):
        import_jsonl(db.store, io.StringIO(buffer.getvalue()))  # fmt: skip
    with Store.open(fresh_migrated_pg_url) as store:
        doctor.repair(store, doctor.diagnose(store))
    assert copy(fresh_migrated_pg_url, target).sessions == 1
    with SessionDB(url=target) as db:
        copied = db.get_session("nan")
        assert copied is not None and copied["estimated_cost_usd"] is None
        assert copied["started_at"] == db.get_messages("nan")[0]["timestamp"]
