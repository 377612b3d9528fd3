"""Every read verb on a SQLite file with one damaged cell: SQLite keeps a value of any type in
any column, and a salvaged or hand-edited ``state.db`` holds text, bytes, fractions and
infinities where numbers and ids belong.

Found by running the verbs over such files (2026-12-07): ``sessions show`` stopped on a
token count of ``'['`` (``Cannot specify ',' with 's'``) and on a cost of ``'free'``;
``stats`` on an infinite token total (``OverflowError``); ``sessions list`` showed a BLOB
message count as ``b'...'``; ``export`` failed on a text ``display_identity``. Every reading
verb answers (the doctor reports what it finds), and none shows Python's ``b'...'`` form of
a value.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_library import engine_like_the_store
from typer.testing import CliRunner

from sessionstore import SessionDB, cli
from sessionstore.errors import ValueOutOfRangeError

VERBS = (
    ("sessions", "list"), ("sessions", "list", "--json"), ("sessions", "show", "s1"),
    ("sessions", "show", "s1", "--json"), ("search", "hello"), ("search", "hello", "--json"),
    ("search", "迁移"), ("stats",), ("stats", "--json"), ("export", "-o", "{out}"),
    ("db", "doctor"), ("prune", "--older-than", "0d", "--dry-run"),
    ("prune", "--older-than", "0d", "--yes"),  # last: it deletes what the others read
)  # fmt: skip
COLUMNS = {
    "sessions": ("id", "message_count", "tool_call_count", "input_tokens", "output_tokens",
                 "estimated_cost_usd", "actual_cost_usd", "started_at", "ended_at", "title",
                 "source", "model", "parent_session_id", "model_config", "end_reason"),
    "messages": ("session_id", "role", "content", "timestamp", "tool_calls", "tool_name",
                 "token_count", "display_identity", "reasoning", "active", "finish_reason"),
}  # fmt: skip
BYTES_REPR = re.compile(r"(?<![0-9A-Za-z_])b'")
"""Python's form of bytes (``b'...'``), which names no value a user typed or stored."""
DAMAGED = st.sampled_from([
    "many", "", "[", "{}", "\x00", "2024-01-01", b"\x00\xff", b"blob", 2.5, -1, 2**62, 1e308,
    float("inf"), float("-inf"), 0,
])  # fmt: skip


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("seed") / "state.db"
    with SessionDB(url=f"sqlite:///{path}") as db:
        db.create_session("s1", "telegram", model="gpt-x")
        db.append_message("s1", "user", "hello docker world")
        db.append_message("s1", "assistant", "ok", tool_calls=[
            {"id": "c1", "type": "function", "function": {"name": "shell", "arguments": "{}"}}
        ])  # fmt: skip
        db.append_message("s1", "tool", "done", tool_call_id="c1", tool_name="shell")
        db.set_session_title("s1", "Hello")
        db.end_session("s1", "user_exit")
        db.create_session("s2", "cli", parent_session_id="s1")
        db.append_message("s2", "user", "hello again 迁移数据")
    return path


def _damaged_copy(seeded: Path, folder: Path, table: str, column: str, value: Any) -> str | None:
    """A copy of ``seeded`` with ``value`` in ``column`` of the table's first row; None where
    SQLite itself refuses it there (a NOT NULL or CHECK constraint)."""
    path = folder / "damaged.db"
    shutil.copyfile(seeded, path)  # the seed's store is closed: no connection holds it
    url = f"sqlite:///{path}"
    engine = engine_like_the_store(url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("PRAGMA foreign_keys = OFF"))
            conn.execute(
                sa.text(f"UPDATE {table} SET {column} = :value "
                        f"WHERE rowid = (SELECT min(rowid) FROM {table})"),
                {"value": value},
            )  # fmt: skip
    except sa.exc.IntegrityError:
        return None
    finally:
        engine.dispose()
    return url


def _every_verb_answers(url: str, folder: Path) -> None:
    runner = CliRunner()
    for verb in VERBS:
        out = folder / "out.jsonl"
        out.unlink(missing_ok=True)
        arguments = [part.format(out=out) for part in verb]
        result = runner.invoke(cli.app, ["--url", url, *arguments])
        said = result.output
        # Every verb answers; the doctor says 1 when it finds problems (a damaged counter).
        doctor_found = verb[:2] == ("db", "doctor") and "problem(s)" in said
        # ... and `show` says so, when the damage took the id it asks for.
        not_found = verb[:2] == ("sessions", "show") and "no session matches 's1'" in said
        assert result.exit_code == 0 or (result.exit_code == 1 and (doctor_found or not_found)), (
            verb, result.exit_code, said[-400:]
        )
        assert "unexpected" not in said and "Traceback" not in said, (verb, said[-400:])
        assert BYTES_REPR.search(said) is None, (verb, said[-400:])
        if "--json" in verb and result.exit_code == 0:  # JSON every parser reads: no Infinity
            json.loads(result.stdout, parse_constant=_no_constant)
        if verb[0] == "export":  # so is every line of an export, and it imports back
            for line in out.read_text(encoding="utf-8").splitlines():
                json.loads(line, parse_constant=_no_constant)
            restored = f"sqlite:///{folder / 'restored.db'}"
            imported = runner.invoke(cli.app, ["--url", restored, "import", str(out)])
            assert imported.exit_code == 0, imported.output[-400:]


def _no_constant(name: str) -> None:
    raise AssertionError(f"{name} in the JSON output")


@pytest.mark.slow
@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(data=st.data())
def test_every_read_verb_answers_on_a_file_with_a_damaged_cell(
    seeded: Path, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    table = data.draw(st.sampled_from(sorted(COLUMNS)))
    column = data.draw(st.sampled_from(COLUMNS[table]))
    value = data.draw(DAMAGED)
    folder = tmp_path_factory.mktemp("damaged")
    url = _damaged_copy(seeded, folder, table, column, value)
    if url is not None:
        _every_verb_answers(url, folder)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("table", "column", "value"),
    [
        ("sessions", "input_tokens", "["),
        ("sessions", "estimated_cost_usd", "free"),
        ("sessions", "input_tokens", float("inf")),
        ("sessions", "estimated_cost_usd", float("-inf")),
        ("sessions", "message_count", b"\x00\xff"),
        ("messages", "display_identity", "free"),
        ("sessions", "message_count", "many"),  # prune --yes: invalid literal for int()
        ("sessions", "id", b"s1"),  # prune, dry run too: '<' between str and bytes
    ],
)  # fmt: skip
def test_the_cells_that_stopped_a_verb(
    seeded: Path, tmp_path: Path, table: str, column: str, value: Any
) -> None:
    url = _damaged_copy(seeded, tmp_path, table, column, value)
    assert url is not None
    _every_verb_answers(url, tmp_path)


def test_a_damaged_count_shows_as_its_text(seeded: Path, tmp_path: Path) -> None:
    url = _damaged_copy(seeded, tmp_path, "sessions", "message_count", b"lots")
    assert url is not None
    listed = CliRunner().invoke(cli.app, ["--url", url, "sessions", "list"])
    assert listed.exit_code == 0 and "lots" in listed.stdout, listed.output


def test_an_export_holding_an_infinite_figure_is_json_that_imports_back(
    seeded: Path, tmp_path: Path
) -> None:
    """The export wrote the cell as ``Infinity``: no JSON (``jq`` refused the file) and our
    own import refused the line, so the whole file. Now ``1e999``, a JSON number that Python
    reads back as the infinity, so the import restores the cell as it was stored."""
    url = _damaged_copy(seeded, tmp_path, "sessions", "input_tokens", float("inf"))
    assert url is not None
    runner = CliRunner()
    out = tmp_path / "out.jsonl"
    exported = runner.invoke(cli.app, ["--url", url, "export", "-o", str(out)])
    assert exported.exit_code == 0, exported.output
    lines = [json.loads(line, parse_constant=_no_constant) for line in out.read_text().splitlines()]
    (s1,) = [line["session"] for line in lines if line.get("session", {}).get("id") == "s1"]
    assert s1["input_tokens"] == float("inf") and s1["message_count"] == 3
    assert '"input_tokens": 1e999' in out.read_text()
    target = f"sqlite:///{tmp_path / 'restored.db'}"
    imported = runner.invoke(cli.app, ["--url", target, "import", str(out)])
    assert imported.exit_code == 0, imported.output
    with SessionDB(url=target) as db:
        assert [m["content"] for m in db.get_messages("s1")] == ["hello docker world", "ok", "done"]
        assert db.get_session("s1")["input_tokens"] == float("inf")  # as the source holds it


def test_a_prune_leaves_a_session_whose_id_is_bytes_to_the_doctor(
    seeded: Path, tmp_path: Path
) -> None:
    """A prune (and its dry run) over a file holding an ended session's id as bytes stopped
    on sorting the ids (``'<' not supported between instances of 'str' and 'bytes'``). It now
    leaves that session, and says so (it said "nothing to prune", as if none were old);
    ``db doctor --fix`` stores the id as its text, and the next prune takes it."""
    url = _damaged_copy(seeded, tmp_path, "sessions", "id", b"s1")
    assert url is not None
    runner = CliRunner()

    def prune(*extra: str) -> str:
        pruned = runner.invoke(cli.app, ["--url", url, "prune", "--older-than", "0d", *extra])
        assert pruned.exit_code == 0, pruned.output
        return pruned.output

    left = "left 1 ended session(s) before the cutoff whose id the file holds as bytes"
    for said in (prune("--dry-run"), prune("--yes")):
        assert "nothing to prune" in said and left in said and "db doctor --fix" in said
    assert json.loads(prune("--dry-run", "--json"))["ids_held_as_bytes"] == 1
    fixed = runner.invoke(cli.app, ["--url", url, "db", "doctor", "--fix"])
    assert fixed.exit_code == 0, fixed.output
    assert "1 session(s) would be deleted" in prune("--dry-run")
    assert json.loads(prune("--dry-run", "--json"))["ids_held_as_bytes"] == 0
    said = prune("--yes")
    assert "deleted 1 session(s)" in said and "left" not in said
    with SessionDB(url=url) as db:
        assert db.get_session("s1") is None and db.get_session("s2") is not None



def test_figures_whose_sum_passes_64_bits_are_refused_typed(seeded: Path, tmp_path: Path) -> None:
    """Two token figures of 6e18 (damage: no real count is near) add up past SQLite's 64-bit
    SUM, which raised ``OperationalError: integer overflow``, untyped (``usage_totals``), and
    ``stats`` said "database error"."""
    url = _damaged_copy(seeded, tmp_path, "sessions", "input_tokens", 6 * 10**18)
    assert url is not None
    engine = engine_like_the_store(url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE sessions SET input_tokens = 6000000000000000000, "
                             "source = 'cli', model = 'm', parent_session_id = NULL"))  # fmt: skip
    engine.dispose()
    said = CliRunner().invoke(cli.app, ["--url", url, "stats"])
    assert said.exit_code == 1 and "passes a 64-bit integer" in said.output, said.output
    with SessionDB(url=url) as db, pytest.raises(ValueOutOfRangeError, match="64-bit"):
        db.usage_totals()
