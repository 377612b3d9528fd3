"""The CLI never contradicts itself: every command it suggests works when run (issue 27).

Generic on purpose: the verbs are read from the command tree itself (a new verb is covered
the day it is registered; a new argument needs a sample value below), and run against stores
in every state the CLI has words for (missing, in a missing directory, empty, Hermes files of
several eras, a file from a newer Hermes, a store of ours a newer Hermes moved on, an unknown
revision, damaged, current, the default store, PostgreSQL). Every suggestion in what a verb
prints (a backquoted ``sessionstore ...`` command, or Click's ``see 'sessionstore ... --help'``)
is then run, as the user would run it next, on the state the verb left, and must succeed (exit
status 0).

Two more promises are checked on every run: a usage error (status 2) changed nothing (no
backup, no file created, the store's bytes as they were), and no verb created a directory.
"""

from __future__ import annotations

import contextlib
import json
import re
import shlex
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import typer.main
from legacy_v1_v6 import build_legacy_db
from legacy_v7_v17 import build_later_db
from legacy_v18_v22 import build_v22_db
from sqlalchemy.engine import make_url
from store_library import connect_like_the_store
from typer.testing import CliRunner

from sessionstore import cli
from sessionstore.api.session_db import SessionDB

_BACKQUOTED = re.compile(r"`(sessionstore(?: [^`]*)?)`")
_SEE_HELP = re.compile(r"see '(sessionstore[^']*)'")
SESSION = "s1"


# -- the verbs, read from the command tree --------------------------------------------------------
def leaf_commands(
    command: Any, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], Any]]:
    if hasattr(command, "commands"):
        for name, sub in command.commands.items():
            yield from leaf_commands(sub, (*path, name))
    else:
        yield path, command


def argument_samples(workspace: Path) -> dict[str, list[list[str]]]:
    """Values to try for each positional argument, by its name (a new one must be added)."""
    dump = workspace / "dump.jsonl"
    return {
        "ref": [[SESSION], ["no-such-session"]],
        "query": [["hello"]],
        "title": [["a title"]],
        "base": [["a title"]],
        "file": [[str(dump)]],
        "revision": [["head"], ["0017"], ["9999"], ["base"]],
        "urls": [[str(workspace / "copy.db")]],
    }


OPTION_VARIANTS = {
    ("db", "current"): [[], ["--check"]],
    ("db", "doctor"): [[], ["--fix"]],
    ("prune",): [["--dry-run"], []],
    ("sessions", "delete"): [["--yes"]],
}
"""Options that change what a verb says, tried beside the bare verb."""


def invocations(workspace: Path) -> list[list[str]]:
    samples = argument_samples(workspace)
    found = []
    for path, command in leaf_commands(typer.main.get_command(cli.app)):
        choices: list[list[str]] = [[]]
        for parameter in command.params:
            if parameter.param_type_name != "argument":
                continue
            assert parameter.name in samples, f"add a sample for {path}'s {parameter.name}"
            choices = [[*before, *value] for before in choices for value in samples[parameter.name]]
        for options in OPTION_VARIANTS.get(path, [[]]):
            found += [[*path, *arguments, *options] for arguments in choices]
    return found


# -- the stores -----------------------------------------------------------------------------------
def _current(path: Path) -> None:
    with SessionDB(url=f"sqlite:///{path}") as db:
        db.create_session(SESSION, "cli")
        db.append_message(SESSION, "user", "hello there")


def _change(path: Path, statement: str) -> None:
    # The store's own SQLite library (one per file per process), closed before the verb runs.
    with contextlib.closing(connect_like_the_store(str(path))) as conn:
        conn.execute(statement)
        conn.commit()


def _damaged(path: Path) -> None:
    _current(path)
    _change(path, "UPDATE sessions SET message_count = 99")


def _moved_on(path: Path) -> None:
    """Ours at head, then opened by a Hermes newer than this release (it wrote its number)."""
    _current(path)
    _change(path, "UPDATE schema_version SET version = 23")


def _fork_reusing_23(path: Path) -> None:
    """A fork's own "v23" (shared facts §4): Hermes's v17 tables plus ``session_index`` and
    ``runs``, none of Hermes v23's; refused by shape, untouched."""
    build_later_db(path, 17)
    for statement in ("UPDATE schema_version SET version = 23",
                      "CREATE TABLE session_index (id TEXT PRIMARY KEY)",
                      "CREATE TABLE runs (id TEXT PRIMARY KEY)"):  # fmt: skip
        _change(path, statement)


def _unknown_revision(path: Path) -> None:
    _current(path)
    _change(path, "UPDATE alembic_version SET version_num = '9999'")


@dataclass(frozen=True)
class Scenario:
    build: Callable[[Path], None] | None
    """Writes the store at the path given; None leaves it missing."""
    where: str = "state.db"
    """The store's path, relative to the workspace."""
    default_store: bool = False
    """Use the default store ($HERMES_HOME/state.db): no --url."""


SCENARIOS = {
    "missing": Scenario(None),
    "missing-directory": Scenario(None, where="no such dir/state.db"),
    "empty-file": Scenario(lambda path: path.touch()),
    "hermes-v3": Scenario(lambda path: build_legacy_db(path, 3)),
    "hermes-v17": Scenario(lambda path: build_later_db(path, 17)),
    "hermes-v22-route-keyed-usage": Scenario(
        lambda path: build_v22_db(path, variant="route_keyed_usage")
    ),
    "moved-on-by-a-newer-hermes": Scenario(_moved_on),
    "newer-hermes": Scenario(lambda path: build_legacy_db(path, 6, variant="too_new")),
    "unknown-revision": Scenario(_unknown_revision),
    "fork-reusing-23": Scenario(_fork_reusing_23),
    "damaged": Scenario(_damaged),
    "current": Scenario(_current),
    "default-hermes-v3": Scenario(lambda path: build_legacy_db(path, 3), default_store=True),
    "default-missing": Scenario(None, default_store=True),
}


class Workspace:
    """A scratch directory with the scenario's store (its path holds a space: hints must be
    shell-quoted), a scratch $HERMES_HOME and an export file to import. ``url`` names a
    server's store instead of a file."""

    def __init__(self, root: Path, scenario: Scenario, url: str | None = None) -> None:
        self.root = root
        self.scenario = scenario
        self.home = root / "hermes home"
        self.store = self.home / "state.db" if scenario.default_store else root / scenario.where
        self.url = url

    def build(self) -> None:
        self.home.mkdir(parents=True)
        (self.root / "dump.jsonl").write_text(
            json.dumps({"format": "sessionstore-export", "version": 2}) + "\n"
        )
        if self.scenario.build is not None and self.url is None:
            self.scenario.build(self.store)

    def runner(self) -> CliRunner:
        return CliRunner(env={"COLUMNS": "200", "HERMES_HOME": str(self.home),
                              "SESSIONSTORE_URL": None})  # fmt: skip

    def invoke(self, arguments: list[str]) -> Any:
        location = self.url or str(self.store)
        prefix = [] if self.scenario.default_store else ["--url", location]
        return self.runner().invoke(cli.app, [*prefix, *arguments])

    def directories(self) -> set[Path]:
        return {path for path in self.root.rglob("*") if path.is_dir()}

    def files(self) -> dict[Path, bytes]:
        return {path: path.read_bytes() for path in self.root.rglob("*") if path.is_file()}


def hints_in(result: Any) -> list[str]:
    text = result.stdout + result.stderr
    return sorted(set(_BACKQUOTED.findall(text)) | set(_SEE_HELP.findall(text)))


def run_every_hint(template: Path, fresh: Callable[[str], Workspace], label: str = "") -> int:
    """Every verb on a fresh copy of the scenario, then every hint it printed on the state it
    left; the number of hints run. Fails with every hint that did not work.

    A hint printed in the same words after a verb that said the same thing (several reading
    verbs refusing one store alike) is run once: the state is the same, and a PostgreSQL
    upgrade per repeat would cost seconds each."""
    failures = []
    checked = 0
    seen: set[tuple[str, str]] = set()
    for number, arguments in enumerate(invocations(template)):
        workspace = fresh(f"{label}run {number}")
        where = workspace.url or str(workspace.root)
        directories, files = workspace.directories(), workspace.files()
        result = workspace.invoke(arguments)
        said = f"{' '.join(arguments)} -> {result.exit_code}: {result.output.strip()[-300:]}"
        assert "Traceback" not in result.output, said
        assert workspace.directories() <= directories, f"created a directory: {said}"
        if result.exit_code == 2:
            assert workspace.files() == files, f"a usage error changed files: {said}"
        for index, hint in enumerate(hints_in(result)):
            # Each hint on the state the verb left, as the user would run it next.
            said_alike = (result.output.replace(where, "STORE"), hint.replace(where, "STORE"))
            if said_alike in seen:
                continue
            seen.add(said_alike)
            again = fresh(f"{label}run {number} hint {index}")
            again.invoke(arguments)
            words = shlex.split(hint)[1:]
            followed = again.runner().invoke(cli.app, words)
            checked += 1
            if followed.exit_code != 0:
                failures.append(f"{said}\n  hint `{hint}` -> {followed.exit_code}: "
                                f"{followed.output.strip()[-300:]}")  # fmt: skip
    assert failures == [], "\n".join(failures)
    return checked


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_hint_runs_and_usage_errors_change_nothing(tmp_path: Path, name: str) -> None:
    scenario = SCENARIOS[name]
    template = Workspace(tmp_path / "template", scenario)
    template.build()  # built once; no connection to it stays open, so copying it is safe

    def fresh(directory: str) -> Workspace:
        shutil.copytree(template.root, tmp_path / directory)
        return Workspace(tmp_path / directory, scenario)

    checked = run_every_hint(template.root, fresh)
    if name in ("missing", "hermes-v3", "damaged", "default-missing"):
        assert checked > 0  # the scenarios known to print hints printed some


def test_every_hint_runs_on_postgresql(tmp_path: Path, empty_pg_url: str) -> None:
    """A new, empty database (told to run db upgrade), and one the server does not have."""
    empty = Scenario(None)
    template = Workspace(tmp_path / "template", empty)
    template.build()

    def fresh(directory: str) -> Workspace:
        # One database, emptied for each run: cheaper than a new database each time.
        engine = sa.create_engine(empty_pg_url)
        with engine.begin() as conn:
            conn.exec_driver_sql("DROP SCHEMA public CASCADE")
            conn.exec_driver_sql("CREATE SCHEMA public")
        engine.dispose()
        shutil.copytree(template.root, tmp_path / directory)
        return Workspace(tmp_path / directory, empty, url=empty_pg_url)

    assert run_every_hint(template.root, fresh) > 0
    missing = make_url(empty_pg_url).set(database="sstest_no_such_database")

    def nowhere(directory: str) -> Workspace:
        shutil.copytree(template.root, tmp_path / directory)
        return Workspace(tmp_path / directory, empty, url=missing.render_as_string(False))

    run_every_hint(template.root, nowhere, label="missing ")


def _flat(text: str) -> str:
    """Output with a table's cell borders and line wraps taken out (a long cell wraps)."""
    return re.sub(r"[│\s]+", " ", text)


def test_a_file_refused_by_shape_gets_one_story_from_every_verb(tmp_path: Path) -> None:
    """A fork's file whose number names a Hermes schema its tables do not match (issue 29):
    the adoption refuses it untouched (``SchemaShapeError``), and every verb tells that same
    story. The schema verbs (``db current``, ``db doctor``, ``db upgrade``, ``db downgrade``) and
    every verb that would write say the adoption's own words, none suggests the upgrade, a
    reading verb reads the file as it is or says the same, and nothing is written to the file
    or beside it."""
    from sessionstore.errors import SchemaShapeError
    from sessionstore.schema import migrate

    scenario = SCENARIOS["fork-reusing-23"]
    workspace = Workspace(tmp_path / "fork", scenario)
    workspace.build()
    before = workspace.files()
    with pytest.raises(SchemaShapeError) as refused:
        migrate.upgrade(f"sqlite:///{workspace.store}")
    refusal = _flat(str(refused.value))
    assert "schema_version says 23" in refusal and "left untouched" in refusal
    said_it = set()
    for arguments in invocations(workspace.root):
        result = workspace.invoke(arguments)
        output = _flat(result.output)
        said = f"{' '.join(arguments)} -> {result.exit_code}: {result.output.strip()[-400:]}"
        assert "db upgrade`" not in output, said
        if refusal in output:
            said_it.add(tuple(arguments[:2]))
        elif result.exit_code not in (0, 2):
            # Any other failure is the verb's own: the samples name sessions this file lacks.
            assert "no session matches" in output, said
        now = {path: data for path, data in workspace.files().items()
               if not path.name.endswith(("-wal", "-shm"))}  # fmt: skip
        assert now == before, f"the file or its directory changed: {said}"
    dump = str(workspace.root / "dump.jsonl")
    for verb in (("db", "current"), ("db", "doctor"), ("db", "upgrade"), ("db", "downgrade"),
                 ("prune", "--dry-run"), ("sessions", "delete"), ("import", dump)):  # fmt: skip
        assert verb in said_it, f"{' '.join(verb)} did not say the refusal"
