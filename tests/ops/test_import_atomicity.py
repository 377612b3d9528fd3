"""Import is all-or-nothing per file, a re-run completes a partial one, counters equal rows;
copy and import into a store in use never collide with live appends; constraint errors are
reported as what they are (issue 10, items 1 and 5), on SQLite and PostgreSQL.
"""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from big_export import BIG_SESSION_MESSAGES
from typer.testing import CliRunner

from sessionstore import ConstraintViolationError, SessionDB, Store, UnsupportedValueError, cli
from sessionstore.errors import UnknownSessionError
from sessionstore.ops.transfer import ImportFormatError, copy_store, import_jsonl

MESSAGES = BIG_SESSION_MESSAGES


@pytest.fixture
def target(store_url: str) -> Iterator[SessionDB]:
    with SessionDB(url=store_url) as db:
        yield db


def counters_equal_rows(db: SessionDB) -> None:
    for session in db.search_sessions(limit=1000):
        assert session["message_count"] == db.message_count(session["id"]), session["id"]


def lines_of(dump: str) -> list[str]:
    return dump.splitlines(keepends=True)


def test_damaged_last_line_imports_nothing(target: SessionDB, big_export: str) -> None:
    damaged = big_export.rstrip("\n")[:-10] + "\n"
    with pytest.raises(ImportFormatError, match=r"line \d+"):
        import_jsonl(target.store, io.StringIO(damaged))
    assert target.session_count() == 0 and target.message_count() == 0


def _poisoned(big_export: str, poison: str) -> tuple[str, int]:
    """The export with one value of its third line from the end replaced; that line's id."""
    lines = lines_of(big_export)
    record = json.loads(lines[-3])
    name = poison.split(":")[0].strip('"')
    record["message"][name] = "__POISON__"
    lines[-3] = json.dumps(record).replace('"__POISON__"', poison.split(": ", 1)[1]) + "\n"
    return "".join(lines), record["message"]["id"]


@pytest.mark.parametrize(
    "poison",
    ['"timestamp": NaN', '"token_count": 99999999999999999999', '"token_count": true',
     '"role": null'],
    ids=["nan", "beyond-int64", "a-boolean-count", "missing-role"],
)  # fmt: skip
def test_a_poisoned_value_near_the_end_imports_nothing(
    target: SessionDB, big_export: str, poison: str
) -> None:
    """What no store keeps (NaN, a SQLite NULL; an integer past 64 bits; a JSON boolean, which
    no cell holds; a required field missing): the whole file is refused by its line."""
    dump, _ = _poisoned(big_export, poison)
    with pytest.raises(ImportFormatError, match=rf"line {len(lines_of(dump)) - 2}"):
        import_jsonl(target.store, io.StringIO(dump))
    assert target.session_count() == 0 and target.message_count() == 0


@pytest.mark.parametrize(
    ("poison", "stored"),
    [('"token_count": "ten"', "ten"), ('"timestamp": Infinity', float("inf")),
     ('"timestamp": 1e999', float("inf")), ('"token_count": 2.5', 2.5)],
    ids=["text-count", "inf-literal-of-older-exports", "inf", "fraction-count"],
)  # fmt: skip
def test_a_damaged_value_an_export_holds_is_kept_or_refused_before_anything_is_written(
    target: SessionDB, big_export: str, poison: str, stored: object
) -> None:
    """What an export of a damaged SQLite file holds (text in a number field, an infinity, a
    fraction in a counter) restores as it was stored, where the target keeps it (SQLite,
    and PostgreSQL's float columns); where it cannot (text, an infinity or a fraction, which
    it rounded, in a PostgreSQL integer column) the import is refused, typed and named,
    before its first write."""
    dump, message_id = _poisoned(big_export, poison)
    name = poison.split(":")[0].strip('"')
    dialect = target.store.dialect
    if dialect.keeps_any_type_in_a_column or name == "timestamp":  # a float column
        import_jsonl(target.store, io.StringIO(dump))
        (kept,) = target.store.read(lambda conn: conn.execute(sa.text(
            f"SELECT {name} FROM messages WHERE id = :i"), {"i": message_id}).one())  # fmt: skip
        assert kept == stored
        return
    with pytest.raises(UnsupportedValueError, match=f"the message {message_id} of the file"):
        import_jsonl(target.store, io.StringIO(dump))
    assert target.session_count() == 0 and target.message_count() == 0


def test_a_database_failure_half_way_leaves_the_target_as_it_was(
    target: SessionDB, big_export: str
) -> None:
    """Two records with one id inside one batch: the database refuses the second one after
    more than a thousand records are already written in the same transaction."""
    target.create_session("already", "cli")
    target.append_message("already", "user", "kept")
    lines = lines_of(big_export)
    lines.insert(1501, lines[1500])
    with pytest.raises(ConstraintViolationError, match="nothing was imported"):
        import_jsonl(target.store, io.StringIO("".join(lines)))
    assert target.session_count() == 1 and target.message_count() == 1
    counters_equal_rows(target)


def test_rerun_with_the_complete_file_finishes_a_partial_import(
    target: SessionDB, big_export: str
) -> None:
    """What an older release (or a file cut at a line boundary) left: 2,498 of 3,000."""
    lines = lines_of(big_export)
    partial = "".join(lines[: 2 + 2498])
    first = import_jsonl(target.store, io.StringIO(partial))
    assert first.messages == 2498 and target.message_count("big") == 2498

    skipped = import_jsonl(target.store, io.StringIO(big_export))  # the default: skip
    assert skipped.skipped_sessions == 1 and target.message_count("big") == 2498
    assert skipped.sessions == 1  # "small" was new

    merged = import_jsonl(target.store, io.StringIO(big_export), on_conflict="merge")
    assert merged.messages == MESSAGES - 2498 and merged.sessions == 0
    assert target.message_count("big") == MESSAGES and target.message_count("small") == 1
    counters_equal_rows(target)
    again = import_jsonl(target.store, io.StringIO(big_export), on_conflict="merge")
    assert again.messages == 0 and target.message_count() == MESSAGES + 1


def test_cli_import_merge_completes_a_partial_import(
    store_url: str, big_export: str, tmp_path: Path
) -> None:
    runner = CliRunner(env={"COLUMNS": "200"})
    full = tmp_path / "full.jsonl"
    full.write_text(big_export, encoding="utf-8")
    partial = tmp_path / "partial.jsonl"
    partial.write_text("".join(lines_of(big_export)[:1002]), encoding="utf-8")
    assert runner.invoke(cli.app, ["--url", store_url, "import", str(partial)]).exit_code == 0
    result = runner.invoke(
        cli.app, ["--url", store_url, "import", str(full), "--on-conflict", "merge", "--json"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["messages"] == MESSAGES - 1000 + 1
    with SessionDB(url=store_url) as db:
        assert db.message_count() == MESSAGES + 1
        counters_equal_rows(db)


# -- item 5: a store in use --------------------------------------------------------------
class LiveAppender(threading.Thread):
    """Appends to session 'live' until stopped, recording every outcome."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.db = SessionDB(url=url)
        self.stop = threading.Event()
        self.ids: list[int] = []
        self.errors: list[BaseException] = []

    def run(self) -> None:
        index = 0
        while not self.stop.is_set() or index < 20:
            try:
                self.ids.append(self.db.append_message("live", "user", f"live {index}"))
            except BaseException as exc:
                self.errors.append(exc)
            index += 1

    def finish(self) -> None:
        self.stop.set()
        self.join()
        self.db.close()


def all_ids(db: SessionDB) -> list[int]:
    with db.store.engine.connect() as conn:
        return [int(row[0]) for row in conn.execute(sa.text("SELECT id FROM messages"))]


@pytest.fixture(scope="module")
def copy_source(tmp_path_factory: pytest.TempPathFactory, big_export: str) -> str:
    """A SQLite store holding ``big_export``, the copy's source: built once, then only read
    (``copy_store`` reads its source). Each copy test built its own, while its live appender
    was already running, as much CPU again as the copy itself."""
    url = f"sqlite:///{tmp_path_factory.mktemp('copy-source')}/source.db"
    with SessionDB(url=url) as source_db:
        import_jsonl(source_db.store, io.StringIO(big_export))
    return url


@pytest.mark.parametrize("how", ["import", "copy"])
def test_import_or_copy_alongside_live_appends_collides_with_nothing(
    store_url: str, big_export: str, request: pytest.FixtureRequest, how: str
) -> None:
    source_url = request.getfixturevalue("copy_source") if how == "copy" else ""
    with SessionDB(url=store_url) as db:
        db.create_session("live", "cli")
        for index in range(5):
            db.append_message("live", "user", f"before {index}")  # ids 1..5 now taken
    appender = LiveAppender(store_url)
    appender.start()
    try:
        with Store.open(store_url) as store:
            if how == "import":
                result: Any = import_jsonl(store, io.StringIO(big_export))
            else:
                with Store.open(source_url) as source:
                    result = copy_store(source, store)
    finally:
        appender.finish()
    assert appender.errors == []
    assert result.messages == MESSAGES + 1
    with SessionDB(url=store_url) as db:
        ids = all_ids(db)
        assert len(ids) == len(set(ids)) == MESSAGES + 1 + 5 + len(appender.ids)
        assert set(appender.ids) <= set(ids)
        assert db.message_count("live") == 5 + len(appender.ids)
        assert db.message_count("big") == MESSAGES
        counters_equal_rows(db)


def test_each_constraint_is_reported_as_what_it_is(target: SessionDB) -> None:
    target.create_session("s", "cli")
    with target.store.engine.begin() as conn:
        conn.execute(sa.text("CREATE UNIQUE INDEX test_unique_content ON messages (content)"))
    try:
        target.append_message("s", "user", "once")
        with pytest.raises(ConstraintViolationError, match="unique") as caught:
            target.append_message("s", "user", "once")
        assert not isinstance(caught.value, UnknownSessionError)
        with pytest.raises(UnknownSessionError):
            target.append_message("nobody", "user", "hello")
        assert target.message_count() == 1
        counters_equal_rows(target)
    finally:
        # The PostgreSQL database is shared by the whole run: leave its schema as found.
        with target.store.engine.begin() as conn:
            conn.execute(sa.text("DROP INDEX test_unique_content"))


@pytest.mark.parametrize("journal_mode", ["wal", "delete"])
def test_a_copy_of_a_source_written_meanwhile_is_its_snapshot_and_a_rerun_carries_the_rest(
    store_url: str, big_export: str, tmp_path: Path, journal_mode: str
) -> None:
    """``db copy`` from a store a gateway is still writing to (moving a live deployment to
    PostgreSQL): the copy carries the source as it was when it began, and succeeds. Its
    check read the live source: every write there during the copy failed it with "copy
    incomplete", a re-run too. A second run, once the writer stopped, carries the rest."""
    source_url = f"sqlite:///{tmp_path / 'source.db'}?journal_mode={journal_mode}"
    with SessionDB(url=source_url) as source_db:
        import_jsonl(source_db.store, io.StringIO(big_export))
        source_db.create_session("live", "cli")
    appender = LiveAppender(source_url)
    appender.start()
    try:
        with Store.open(source_url) as source, Store.open(store_url) as store:
            first = copy_store(source, store)
    finally:
        appender.finish()
    assert appender.errors == []
    assert first.messages >= MESSAGES + 1
    with Store.open(source_url) as source, Store.open(store_url) as store:
        copy_store(source, store)  # the writer has stopped: the rest comes
    with SessionDB(url=store_url) as db:
        live = [m["content"] for m in db.get_messages("live")]
        assert live == [f"live {index}" for index in range(len(appender.ids))]
        assert db.message_count("big") == MESSAGES
        counters_equal_rows(db)
