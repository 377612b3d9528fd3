"""The ``sessionstore`` command line: inspect, search, move and maintain a session store.

Conventions every verb follows:

- the store is ``--url``, else the URL rules of :mod:`sessionstore.config`;
- a verb that reads never migrates: a store that is not at the current schema is refused with
  the instruction to run ``sessionstore db upgrade`` (the one verb that changes the schema, after
  taking a backup of a SQLite file);
- ``--json`` prints machine-readable output wherever a table would be shown;
- errors are one line on stderr (``--debug`` shows the traceback); exit status 0 is success, 1 a
  failure, 2 a usage error;
- progress bars and spinners appear only when stderr is a terminal, so pipes stay clean.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import re
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from enum import Enum
from pathlib import Path
from typing import IO, Annotated, Any, NoReturn, ParamSpec

import typer
from alembic.util import CommandError
from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text
from sqlalchemy import and_, exists, func, or_, select
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError

from . import __version__, doctor, legacy, migrate
from .config import resolve_url
from .dialects import dialect_for_url
from .engine import create_store_engine
from .errors import SessionStoreError
from .models import messages_table as messages
from .models import sessions_table as sessions
from .records import MessageRecord, SessionListing, SessionRecord
from .repository import SessionRepository, decode_json
from .search.sanitize import escape_like
from .store import Store
from .transfer import export_jsonl, import_jsonl

P = ParamSpec("P")

EXIT_FAILURE = 1
EXIT_USAGE = 2
SHORT_ID_LENGTH = 8
PIPE_WIDTH = 200
"""Rich's width when stdout is not a terminal: wide enough that tables are not squeezed."""
TOOL_OUTPUT_LINES = 8
TOOL_ARGUMENTS_CHARS = 100
CONTEXT_LINE_CHARS = 160
BAR_WIDTH = 30
AMBIGUOUS_SHOWN = 5
SECONDS_PER_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}
ROLE_STYLES = {
    "user": "bold green",
    "assistant": "bold blue",
    "tool": "bold magenta",
    "system": "bold yellow",
}
HIGHLIGHT_STYLE = "bold black on yellow"
# C0/C1 control characters other than tab and newline: stored text must not be able to drive
# the terminal (escape sequences in a tool's output, say).
_CONTROL_CHARACTERS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_PASSWORD_IN_URL = re.compile(r"(://[^:/@]*:)[^@]*@")

logger = logging.getLogger(__name__)


# -- errors ----------------------------------------------------------------------------------
class CliError(Exception):
    """A failure to report as one line, with the exit status to use."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class UsageProblem(CliError):
    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_USAGE)


@dataclass
class CliState:
    url_option: str | None
    debug: bool


def _state(ctx: typer.Context) -> CliState:
    state = ctx.find_root().obj
    if not isinstance(state, CliState):
        # A verb invoked without the root callback (only possible from Python): defaults.
        state = CliState(None, False)
    return state


def _hide_password(url: str) -> str:
    return _PASSWORD_IN_URL.sub(r"\1***@", url)


def describe_error(exc: BaseException) -> str:
    """One line that says what went wrong, for any exception a verb can raise."""
    if isinstance(exc, DBAPIError):
        translated = _translate_dbapi_error(exc)
        return translated or f"database error: {_first_line(str(exc.orig))}"
    if isinstance(exc, UnicodeDecodeError):
        return f"the input is not UTF-8 text ({exc.reason} at byte {exc.start})"
    if isinstance(exc, OSError):
        if exc.filename is not None and exc.strerror:
            return f"{exc.strerror}: {exc.filename}"
        return _first_line(str(exc)) or type(exc).__name__
    if isinstance(exc, (SessionStoreError, CommandError, ValueError, TypeError, LookupError)):
        return _first_line(str(exc)) or type(exc).__name__
    return f"unexpected {type(exc).__name__}: {_first_line(str(exc))} (--debug shows where)"


def _translate_dbapi_error(exc: DBAPIError) -> str | None:
    for backend in ("sqlite", "postgresql"):
        translated = dialect_for_url(f"{backend}://").translate_error(exc)
        if translated is not None:
            return _first_line(str(translated))
    return None


def _first_line(text: str) -> str:
    return " ".join(text.strip().splitlines()[:1]).strip()


def _report_errors(command: Callable[P, None]) -> Callable[P, None]:
    """Turn any exception of a verb into one line on stderr and exit status 1 (or 2).

    With ``--debug`` the exception propagates and Typer prints the traceback.
    """

    @functools.wraps(command)
    def run(*args: P.args, **kwargs: P.kwargs) -> None:
        # Typer hands over its own Context class, not always ``typer.Context``: duck-typed.
        ctx = kwargs.get("ctx")
        debug = hasattr(ctx, "find_root") and _state(ctx).debug  # type: ignore[arg-type]
        try:
            command(*args, **kwargs)
        except (typer.Exit, typer.Abort, typer.BadParameter, KeyboardInterrupt):
            raise
        except CliError as exc:
            if debug:
                raise
            _print_error(str(exc))
            raise typer.Exit(exc.exit_code) from None
        except Exception as exc:
            if debug:
                raise
            _print_error(describe_error(exc))
            raise typer.Exit(EXIT_FAILURE) from None

    return run


def _print_error(message: str) -> None:
    typer.secho(f"error: {' '.join(message.split())}", fg="red", err=True)


# -- output ----------------------------------------------------------------------------------
def _console(*, stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    interactive = stream.isatty()
    width = None if interactive or os.environ.get("COLUMNS") else PIPE_WIDTH
    return Console(file=stream, width=width, highlight=False, soft_wrap=False)


def _print_json(data: Any) -> None:
    typer.echo(json.dumps(data, ensure_ascii=False, indent=2, default=str))


def _note(message: str) -> None:
    """A status line for humans: on stderr, so stdout stays the data."""
    typer.echo(message, err=True)


def _printable(text: str | None) -> str:
    return _CONTROL_CHARACTERS.sub("", text or "")


def _when(timestamp: float | None) -> str:
    if timestamp is None:
        return ""
    return datetime.fromtimestamp(float(timestamp)).strftime("%Y-%m-%d %H:%M")


def _day(timestamp: float) -> str:
    return datetime.fromtimestamp(float(timestamp)).date().isoformat()


def _dim(text: str) -> Text:
    return Text(text, style="dim")


def _bar(value: float, largest: float) -> Text:
    if largest <= 0 or value <= 0:
        return Text("")
    cells = max(1, round(BAR_WIDTH * value / largest))
    return Text("█" * cells, style="cyan")


@contextlib.contextmanager
def _progress(description: str, total: int | None) -> Iterator[Callable[[int], None] | None]:
    """A progress bar on a terminal's stderr; ``None`` (stay quiet) when piped."""
    console = _console(stderr=True)
    if not console.is_terminal:
        yield None
        return
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task(description, total=total)
        yield lambda steps: progress.advance(task, steps)


@contextlib.contextmanager
def _spinner(description: str) -> Iterator[None]:
    console = _console(stderr=True)
    if not console.is_terminal:
        yield
        return
    with console.status(description):
        yield


# -- opening stores --------------------------------------------------------------------------
def _url(state: CliState) -> URL:
    raw = resolve_url(state.url_option)
    try:
        parsed = make_url(raw)
        dialect_for_url(parsed)
        parsed.get_dialect()
    except (ArgumentError, ValueError, NoSuchModuleError) as exc:
        raise UsageProblem(f"bad database URL {_hide_password(raw)!r}: {exc}") from None
    return parsed


def _shown(url: URL) -> str:
    path = doctor.sqlite_file_of(url)
    return str(path) if path is not None else url.render_as_string(hide_password=True)


def _full(url: URL) -> str:
    return url.render_as_string(hide_password=False)


def _require_existing(url: URL) -> None:
    """Reading verbs never create a database: a missing file is an error, not an empty store."""
    path = doctor.sqlite_file_of(url)
    if path is None:
        return
    if not path.exists():
        raise CliError(f"no session store at {path}: create it with `sessionstore db upgrade`")
    if path.is_dir():
        raise CliError(f"{path} is a directory, not a session store file")
    if not os.access(path, os.R_OK):
        raise CliError(f"cannot read {path}: permission denied")


def _outdated(status: migrate.Status, url: URL) -> CliError:
    return CliError(
        f"the store at {_shown(url)} is at revision {status.revision or 'none'} (Hermes schema "
        f"{status.schema_version or 'none'}), not the current {status.head}: run "
        "`sessionstore db upgrade` first"
    )


@contextlib.contextmanager
def _open_store(state: CliState, *, write: bool = False) -> Iterator[Store]:
    """The store, checked to be at head first, read-only unless the verb writes."""
    url = _url(state)
    _require_existing(url)
    # The check runs on a read-only connection: refusing a legacy file must not change it
    # (a writable SQLite connection would already switch its journal mode).
    probe = Store.open(url, read_only=True)
    try:
        status = probe.read(migrate.status_of)
    except BaseException:
        probe.close()
        raise
    if not status.up_to_date:
        # A reading verb reads a store that has what it reads (a current Hermes file, a newer
        # one) as it is; only what it cannot read sends the user to `db upgrade`.
        from .facade import unreadable_reason

        problem = "writes need the current schema" if write else probe.read(unreadable_reason)
        if problem is not None:
            probe.close()
            number = status.schema_version
            if number is not None and number > legacy.NEWEST_HERMES_SCHEMA:
                raise CliError(legacy.too_new_message(number) if write else problem)
            raise _outdated(status, url)
    if write:
        probe.close()
        store = Store.open(url)
    else:
        store = probe
    try:
        yield store
    finally:
        store.close()


def _bindable(text: str) -> bool:
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _ids_with_prefix(store: Store, prefix: str, limit: int) -> list[str]:
    if not prefix or not _bindable(prefix):
        return []
    statement = (
        select(sessions.c.id)
        .where(sessions.c.id.like(escape_like(prefix) + "%", escape="\\"))
        .order_by(sessions.c.started_at.desc())
        .limit(limit)
    )
    return store.read(lambda conn: [str(row[0]) for row in conn.execute(statement)])


def resolve_ref(store: Store, ref: str) -> str:
    """A session id from an id, a unique id prefix or a title (newest of its lineage)."""
    repository = SessionRepository(store)
    found = repository.resolve_session_id(ref) or repository.resolve_session_by_title(ref)
    if found is not None:
        return found
    candidates = _ids_with_prefix(store, ref, AMBIGUOUS_SHOWN + 1)
    if len(candidates) > 1:
        shown = ", ".join(candidates[:AMBIGUOUS_SHOWN])
        more = " ..." if len(candidates) > AMBIGUOUS_SHOWN else ""
        raise CliError(
            f"{ref!r} is ambiguous: it starts several session ids ({shown}{more}); "
            "give more characters"
        )
    raise CliError(f"no session matches {ref!r} (as an id, an id prefix or a title)")


def short_ids(store: Store, ids: Sequence[str]) -> dict[str, str]:
    """The shortest prefix (at least 8 characters) that names each session unambiguously."""
    if not ids:
        return {}
    heads = sorted({session_id[:SHORT_ID_LENGTH] for session_id in ids})
    statement = select(sessions.c.id).where(
        func.substr(sessions.c.id, 1, SHORT_ID_LENGTH).in_(heads)
    )
    neighbours = store.read(lambda conn: [str(row[0]) for row in conn.execute(statement)])
    shortest: dict[str, str] = {}
    for session_id in ids:
        length = SHORT_ID_LENGTH
        for other in neighbours:
            if other != session_id:
                length = max(length, _common_prefix(session_id, other) + 1)
        shortest[session_id] = session_id[:length]
    return shortest


def _common_prefix(left: str, right: str) -> int:
    size = 0
    for a, b in zip(left, right, strict=False):
        if a != b:
            break
        size += 1
    return size


# -- the application -------------------------------------------------------------------------
app = typer.Typer(
    name="sessionstore",
    help="Inspect, search, move and maintain an agent session store (SQLite or PostgreSQL).",
    no_args_is_help=True,
    add_completion=False,
)
db_app = typer.Typer(
    help="The database itself: schema migrations, health checks, copies.", no_args_is_help=True
)
sessions_app = typer.Typer(help="List sessions and read conversations.", no_args_is_help=True)
title_app = typer.Typer(help="Session titles and their lineage.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(sessions_app, name="sessions")
app.add_typer(title_app, name="title")

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"sessionstore {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    url: Annotated[
        str | None,
        typer.Option(
            "--url",
            help="Database URL (sqlite:///path or postgresql://...). Default: $SESSIONSTORE_URL, "
            "else $HERMES_HOME/state.db.",
            show_default=False,
        ),
    ] = None,
    debug: Annotated[
        bool, typer.Option("--debug", help="Show tracebacks and debug logging.")
    ] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_show_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    ctx.obj = CliState(url, debug)
    if debug:
        logging.basicConfig(level=logging.DEBUG, format="%(name)s: %(message)s")


# -- db ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _SchemaPlan:
    before: migrate.Status | None
    needs_backup: bool


def _plan_schema_change(url: URL, target: str) -> _SchemaPlan:
    """Where the store is now, checked for refusal before anything (a backup) is written."""
    path = doctor.sqlite_file_of(url)
    if path is not None and (not path.exists() or path.stat().st_size == 0):
        return _SchemaPlan(None, needs_backup=False)
    if path is not None:
        _require_existing(url)
        store = Store.open(url, read_only=True)
    else:
        store = Store(create_store_engine(url, set_journal_mode=False), owns_engine=True)
    try:
        state, status = store.read(lambda conn: (legacy.read_state(conn), migrate.status_of(conn)))
    finally:
        store.close()
    if target == migrate.HEAD:
        # What the migration would refuse anyway, refused before a backup is written.
        legacy.check_not_too_new(state)
        legacy.check_revision_known(state, {rev for rev, _, _ in migrate.history()})
    changes = status.revision != _resolve_revision(target)
    return _SchemaPlan(status, needs_backup=path is not None and changes and not state.is_empty)


def _resolve_revision(revision: str) -> str:
    return migrate.head_revision() if revision == migrate.HEAD else revision


def _backup_if_needed(url: URL, plan: _SchemaPlan) -> Path | None:
    path = doctor.sqlite_file_of(url)
    if path is None or not plan.needs_backup:
        return None
    return doctor.backup_sqlite_file(path)


def _change_schema(
    state: CliState,
    revision: str,
    apply: Callable[[str, str], None],
    verb: str,
    as_json: bool,
) -> None:
    url = _url(state)
    plan = _plan_schema_change(url, revision)
    before = plan.before.revision if plan.before else None
    if plan.before is not None and before == _resolve_revision(revision):
        if as_json:
            _print_json({"url": _shown(url), "from": before, "to": before, "changed": False,
                         "backup": None})
        else:
            typer.echo(f"{_shown(url)} is already at revision {before}; nothing to do")
        return
    backup = _backup_if_needed(url, plan)
    if backup is not None and not as_json:
        typer.echo(f"backup of {doctor.sqlite_file_of(url)} written to {backup}")
    with _spinner(f"{verb} {_shown(url)} ..."):
        apply(_full(url), revision)
    after = migrate.status(_full(url)).revision
    if as_json:
        _print_json({"url": _shown(url), "from": before, "to": after, "changed": before != after,
                     "backup": None if backup is None else str(backup)})
    else:
        typer.echo(f"{verb} {_shown(url)}: revision {before or 'none'} -> {after or 'none'}")


@db_app.command("upgrade")
@_report_errors
def db_upgrade(
    ctx: typer.Context,
    revision: Annotated[
        str, typer.Argument(metavar="REVISION", help="Target revision (default: the newest).")
    ] = migrate.HEAD,
    as_json: JsonOption = False,
) -> None:
    """Bring the store to the current schema (adopting a Hermes state.db), after a backup.

    A SQLite file that the upgrade changes is first copied to <file>.bak-<timestamp>.
    """
    _change_schema(_state(ctx), revision, migrate.upgrade, "upgraded", as_json)


@db_app.command("downgrade")
@_report_errors
def db_downgrade(
    ctx: typer.Context,
    revision: Annotated[
        str, typer.Argument(metavar="REVISION", help="Target revision, e.g. 0005 or base.")
    ],
    as_json: JsonOption = False,
) -> None:
    """Step the schema back to REVISION (a SQLite file is backed up first)."""
    _change_schema(_state(ctx), revision, migrate.downgrade, "downgraded", as_json)


@db_app.command("current")
@_report_errors
def db_current(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """Show the store's schema revision and whether it is current."""
    url = _url(_state(ctx))
    _require_existing(url)
    with contextlib.closing(Store.open(url, read_only=True)) as store:
        status = store.read(migrate.status_of)
    if as_json:
        _print_json({**asdict(status), "up_to_date": status.up_to_date})
        return
    line = (
        f"revision {status.revision or 'none'} (Hermes schema "
        f"{status.schema_version or 'none'})"
    )
    if status.up_to_date:
        typer.echo(f"{line}: current")
    else:
        typer.echo(f"{line}: not current ({status.head}); run `sessionstore db upgrade`")


@db_app.command("history")
@_report_errors
def db_history(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """List the migration chain, oldest first."""
    head = migrate.head_revision()
    rows: list[dict[str, Any]] = [
        {"revision": revision, "down_revision": down, "description": doc, "head": revision == head}
        for revision, down, doc in migrate.history()
    ]
    if as_json:
        _print_json(rows)
        return
    table = Table("Revision", "Down", "Description", title="Migrations (oldest first)")
    for row in rows:
        mark = " (head)" if row["head"] else ""
        table.add_row(
            f"{row['revision']}{mark}",
            str(row["down_revision"] or ""),
            Text(str(row["description"])),
        )
    _console().print(table)


_STATUS_MARKS = {
    "ok": Text("ok", style="green"),
    "warn": Text("warn", style="yellow"),
    "fail": Text("FAIL", style="bold red"),
    "skip": Text("skip", style="dim"),
}


@db_app.command("doctor")
@_report_errors
def db_doctor(
    ctx: typer.Context,
    fix: Annotated[
        bool,
        typer.Option(
            "--fix",
            help="After a backup: rebuild the full-text index, repair counters, clear "
            "dangling parents.",
        ),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Check the store's health; exit status 1 while problems remain."""
    url = _url(_state(ctx))
    _require_existing(url)
    backup: Path | None = None
    actions: list[str] = []
    # Not read-only: SQLite's FTS5 integrity check is an INSERT. The journal mode is left as
    # it is, so a file that is refused below stays byte-identical.
    engine = create_store_engine(url, set_journal_mode=False)
    with contextlib.closing(Store(engine, owns_engine=True)) as store:
        with _spinner("checking ..."):
            report = doctor.diagnose(store)
        fixable = [c for c in report.checks if c.fixable and c.status in ("fail", "warn")]
        if fix and fixable:
            path = doctor.sqlite_file_of(url)
            if path is not None:
                backup = doctor.backup_sqlite_file(path)
            with _spinner("repairing ..."):
                actions = doctor.repair(store, report)
                report = doctor.diagnose(store)
    if as_json:
        _print_json(
            {
                **report.to_dict(),
                "actions": actions,
                "backup": None if backup is None else str(backup),
            }
        )
    else:
        table = Table("Check", "Status", "Detail", title=f"Health of {_shown(url)}")
        for check in report.checks:
            table.add_row(check.name, _STATUS_MARKS[check.status], Text(check.detail))
        console = _console()
        if backup is not None:
            console.print(f"backup written to {backup}", markup=False)
        for action in actions:
            console.print(Text(f"fixed: {action}", style="green"))
        console.print(table)
        if report.healthy:
            console.print(Text("no problems found", style="green"))
        else:
            hint = "" if fix else " (try --fix)" if any(c.fixable for c in report.problems) else ""
            console.print(Text(f"{len(report.problems)} problem(s){hint}", style="bold red"))
    if not report.healthy:
        raise typer.Exit(EXIT_FAILURE)


@db_app.command("copy")
@_report_errors
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
    if len(urls) > 2:
        raise UsageProblem("db copy takes SRC_URL DST_URL, or DST_URL with --url as the source")
    state = _state(ctx)
    if len(urls) == 2:
        state = CliState(urls[0], state.debug)
    target_state = CliState(urls[-1], state.debug)
    target_url = _url(target_state)
    with _open_store(state) as source:
        total = SessionRepository(source).session_count(include_archived=True)
    # The URL as given: the open store's own URL carries the read-only rewrite.
    source_url = _full(_url(state))
    with _progress("copying", total) as advance:
        result = migrate.copy(source_url, _full(target_url), progress=advance)
    if as_json:
        _print_json(asdict(result))
    else:
        typer.echo(
            f"copied {result.sessions} session(s) and {result.messages} message(s) into "
            f"{_shown(target_url)}"
            + (f"; {result.skipped_sessions} already there" if result.skipped_sessions else "")
        )


# -- sessions --------------------------------------------------------------------------------
def _listing_table(listings: Sequence[SessionListing], short: dict[str, str]) -> Table:
    table = Table("ID", "Title", "Source", "Model", "Msgs", "Last active", "Preview")
    for listing in listings:
        session = listing.session
        table.add_row(
            short.get(session.id, session.id),
            Text(_printable(session.title)) if session.title else _dim("-"),
            Text(_printable(session.source)),
            Text(_printable(session.model or "")),
            str(session.message_count or 0),
            _when(listing.last_active),
            Text(_printable(listing.preview)),
        )
    return table


@sessions_app.command("list")
@_report_errors
def sessions_list(
    ctx: typer.Context,
    source: Annotated[str | None, typer.Option(help="Only this source (cli, telegram...).")] = None,
    exclude_source: Annotated[
        list[str] | None, typer.Option(help="Leave out this source (repeatable).")
    ] = None,
    children: Annotated[
        bool, typer.Option("--children", help="Include child sessions (subagents).")
    ] = False,
    archived: Annotated[
        bool, typer.Option("--archived", help="Include archived sessions.")
    ] = False,
    limit: Annotated[int, typer.Option(min=0, help="At most this many sessions.")] = 20,
    offset: Annotated[int, typer.Option(min=0, help="Skip this many first.")] = 0,
    as_json: JsonOption = False,
) -> None:
    """List sessions, newest first (a compressed conversation shows as its newest part)."""
    with _open_store(_state(ctx)) as store:
        listings = SessionRepository(store).list_sessions_rich(
            source=source,
            exclude_sources=exclude_source or None,
            limit=limit,
            offset=offset,
            include_children=children,
            include_archived=archived,
        )
        if as_json:
            _print_json([listing.to_dict() for listing in listings])
            return
        if not listings:
            _note("no sessions")
            return
        short = short_ids(store, [listing.session.id for listing in listings])
    _console().print(_listing_table(listings, short))


def _tool_call_summary(call: Any) -> str:
    if not isinstance(call, dict):
        return _printable(str(call))[:TOOL_ARGUMENTS_CHARS]
    raw_function = call.get("function")
    function: dict[str, Any] = raw_function if isinstance(raw_function, dict) else {}
    name = function.get("name") or call.get("name") or "?"
    arguments = function.get("arguments", call.get("arguments", ""))
    if isinstance(arguments, str):
        with contextlib.suppress(json.JSONDecodeError):
            arguments = json.loads(arguments)
    if isinstance(arguments, dict):
        text = ", ".join(
            f"{key}={json.dumps(value, ensure_ascii=False)}" for key, value in arguments.items()
        )
    elif isinstance(arguments, str):
        text = arguments
    else:
        text = json.dumps(arguments, ensure_ascii=False)
    text = " ".join(_printable(text).split())
    if len(text) > TOOL_ARGUMENTS_CHARS:
        text = text[: TOOL_ARGUMENTS_CHARS - 3] + "..."
    return f"{_printable(str(name))}({text})"


def _message_block(record: MessageRecord, *, full: bool) -> RenderableType:
    parts: list[RenderableType] = []
    label = record.role
    if record.role == "tool":
        label = f"tool result · {record.tool_name}" if record.tool_name else "tool result"
    heading = Text.assemble(
        (_printable(label), ROLE_STYLES.get(record.role, "bold")),
        ("  " + _when(record.timestamp), "dim"),
    )
    parts.append(heading)
    if record.reasoning:
        if full:
            parts.append(Text("reasoning: " + _printable(record.reasoning), style="italic dim"))
        else:
            parts.append(
                _dim(f"▸ reasoning folded ({len(record.reasoning)} chars; --full shows it)")
            )
    content = _printable(record.content)
    if record.role == "tool" and not full:
        lines = content.splitlines()
        if len(lines) > TOOL_OUTPUT_LINES:
            hidden = len(lines) - TOOL_OUTPUT_LINES
            content = "\n".join(lines[:TOOL_OUTPUT_LINES])
            parts.append(Text(content))
            parts.append(_dim(f"... {hidden} more line(s) (--full shows them)"))
            content = ""
    if content:
        parts.append(Text(content))
    tool_calls = decode_json(record.tool_calls, "tool_calls", record.id, [])
    for call in tool_calls if isinstance(tool_calls, list) else [tool_calls]:
        parts.append(Text("→ " + _tool_call_summary(call), style="cyan"))
    if not content and not tool_calls and not record.reasoning and len(parts) == 1:
        parts.append(_dim("(no content)"))
    parts.append(Text(""))
    return Group(*parts)


def _session_header(session: SessionRecord, tip: str | None) -> Panel:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()

    def row(name: str, value: str | None) -> None:
        if value:
            grid.add_row(name, Text(_printable(value)))

    row("id", session.id)
    row("title", session.title)
    row("source", session.source)
    row("model", session.model)
    row("started", _when(session.started_at))
    if session.ended_at is not None:
        row("ended", f"{_when(session.ended_at)} ({session.end_reason or 'no reason'})")
    row("parent", session.parent_session_id)
    if tip is not None and tip != session.id:
        row("continued in", tip)
    row(
        "messages",
        f"{session.message_count or 0} ({session.tool_call_count or 0} tool calls)",
    )
    row("tokens", f"{session.input_tokens or 0:,} in / {session.output_tokens or 0:,} out")
    cost = session.actual_cost_usd if session.actual_cost_usd is not None else (
        session.estimated_cost_usd
    )
    if cost:
        row("cost", f"${cost:.4f}")
    return Panel(grid, title="session", expand=False)


@sessions_app.command("show")
@_report_errors
def sessions_show(
    ctx: typer.Context,
    ref: Annotated[
        str, typer.Argument(metavar="REF", help="Session id, unique id prefix, or title.")
    ],
    full: Annotated[
        bool, typer.Option("--full", help="Unfold reasoning, long tool output, system prompt.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Show one conversation, readably (--json: the raw messages)."""
    with _open_store(_state(ctx)) as store:
        repository = SessionRepository(store)
        session_id = resolve_ref(store, ref)
        session = repository.get_session(session_id)
        records = repository.get_messages(session_id)
        tip = repository.get_compression_tip(session_id)
    if session is None:
        # Deleted between resolving and reading.
        raise CliError(f"no session matches {ref!r}")
    if as_json:
        rows = []
        for record in records:
            row = record.to_dict()
            row["tool_calls"] = (
                decode_json(record.tool_calls, "tool_calls", record.id, [])
                if record.tool_calls
                else None
            )
            rows.append(row)
        _print_json(rows)
        return
    console = _console()
    console.print(_session_header(session, tip))
    if session.system_prompt:
        if full:
            console.print(Text("system prompt:", style=ROLE_STYLES["system"]))
            console.print(Text(_printable(session.system_prompt)))
        else:
            console.print(
                _dim(f"▸ system prompt folded ({len(session.system_prompt)} chars)")
            )
        console.print()
    for record in records:
        console.print(_message_block(record, full=full))
    if not records:
        console.print(_dim("(no messages)"))


# -- search ----------------------------------------------------------------------------------
def _highlighted(snippet: str) -> Text:
    """A snippet with its >>>match<<< markers turned into highlighting."""
    text = Text()
    rest = _printable(snippet).replace("\n", " ")
    while rest:
        start = rest.find(">>>")
        end = rest.find("<<<", start + 3) if start >= 0 else -1
        if start < 0 or end < 0:
            text.append(rest)
            break
        text.append(rest[:start])
        text.append(rest[start + 3 : end], style=HIGHLIGHT_STYLE)
        rest = rest[end + 3 :]
    return text


def _has_previous(store: Store, hit_ids: Sequence[int]) -> dict[int, bool]:
    """Whether each hit has an earlier message in its session (orders its context lines)."""
    if not hit_ids:
        return {}
    hit = messages.alias("hit")
    earlier = messages.alias("earlier")
    statement = select(
        hit.c.id,
        exists()
        .where(
            earlier.c.session_id == hit.c.session_id,
            or_(
                earlier.c.timestamp < hit.c.timestamp,
                and_(earlier.c.timestamp == hit.c.timestamp, earlier.c.id < hit.c.id),
            ),
        )
        .label("has_previous"),
    ).where(hit.c.id.in_(list(hit_ids)))
    return store.read(lambda conn: {int(row[0]): bool(row[1]) for row in conn.execute(statement)})


def _context_line(message: dict[str, Any]) -> Text:
    content = " ".join(_printable(str(message.get("content") or "")).split())
    if len(content) > CONTEXT_LINE_CHARS:
        content = content[: CONTEXT_LINE_CHARS - 3] + "..."
    return Text(f"    {message.get('role')}: {content}", style="dim")


@app.command("search")
@_report_errors
def search(
    ctx: typer.Context,
    query: Annotated[
        str, typer.Argument(metavar="QUERY", help='Words, "phrases", prefix*, AND/OR/NOT.')
    ],
    source: Annotated[
        list[str] | None, typer.Option(help="Only sessions of this source (repeatable).")
    ] = None,
    exclude_source: Annotated[
        list[str] | None, typer.Option(help="Leave out this source (repeatable).")
    ] = None,
    role: Annotated[
        list[str] | None, typer.Option(help="Only messages of this role (repeatable).")
    ] = None,
    limit: Annotated[int, typer.Option(min=0, help="At most this many hits.")] = 20,
    offset: Annotated[int, typer.Option(min=0, help="Skip this many first.")] = 0,
    context: Annotated[
        bool, typer.Option("--context/--no-context", help="Show the messages around each hit.")
    ] = True,
    as_json: JsonOption = False,
) -> None:
    """Full-text search over every message, best matches first."""
    with _open_store(_state(ctx)) as store:
        hits = [
            hit.to_dict()
            for hit in SessionRepository(store).search_messages(
                query,
                source_filter=source or None,
                exclude_sources=exclude_source or None,
                role_filter=role or None,
                limit=limit,
                offset=offset,
            )
        ]
        if as_json:
            _print_json(hits)
            return
        if not hits:
            _note("no matches")
            return
        short = short_ids(store, sorted({str(hit["session_id"]) for hit in hits}))
        has_previous = _has_previous(store, [int(hit["id"]) for hit in hits]) if context else {}
    console = _console()
    for hit in hits:
        session_id = str(hit["session_id"])
        console.print(
            Text.assemble(
                (short.get(session_id, session_id), "bold"),
                "  ",
                (str(hit["role"]), ROLE_STYLES.get(str(hit["role"]), "bold")),
                ("  " + _when(hit["timestamp"]), "dim"),
                ("  " + _printable(f"{hit['source']} {hit.get('model') or ''}").strip(), "dim"),
            )
        )
        around = list(hit.get("context") or [])
        position = 1 if has_previous.get(int(hit["id"]), False) else 0
        if context and around:
            for message in around[:position]:
                console.print(_context_line(message))
        console.print(Text("  ") + _highlighted(str(hit["snippet"])))
        if context and around:
            for message in around[position + 1 :]:
                console.print(_context_line(message))
        console.print()


# -- export / import -------------------------------------------------------------------------
@app.command("export")
@_report_errors
def export(
    ctx: typer.Context,
    output: Annotated[
        Path | None,
        typer.Option("-o", "--output", help="Write to this file (default: standard output)."),
    ] = None,
    source: Annotated[str | None, typer.Option(help="Only sessions of this source.")] = None,
    session: Annotated[
        list[str] | None,
        typer.Option("--session", help="Only this session: id, prefix or title (repeatable)."),
    ] = None,
) -> None:
    """Write sessions and their messages as JSONL (streamed; restorable with `import`)."""
    with _open_store(_state(ctx)) as store:
        session_ids = [resolve_ref(store, ref) for ref in session] if session else None
        total = (
            len(session_ids)
            if session_ids is not None
            else SessionRepository(store).session_count(source, include_archived=True)
        )
        with _progress("exporting", total) as advance:
            if output is None:
                count = export_jsonl(
                    store, sys.stdout, source=source, session_ids=session_ids, progress=advance
                )
                sys.stdout.flush()
            else:
                count = _export_to_file(store, output, source, session_ids, advance)
    where = "standard output" if output is None else str(output)
    _note(f"exported {count} session(s) to {where}")


def _export_to_file(
    store: Store,
    output: Path,
    source: str | None,
    session_ids: list[str] | None,
    advance: Callable[[int], None] | None,
) -> int:
    # Written beside the target and renamed at the end: an interrupted export never leaves a
    # truncated file under the name a later `import` would trust.
    partial = output.with_name(output.name + ".partial")
    try:
        with partial.open("w", encoding="utf-8") as fp:
            count = export_jsonl(store, fp, source=source, session_ids=session_ids,
                                 progress=advance)
        os.replace(partial, output)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return count


class ConflictPolicyChoice(str, Enum):
    skip = "skip"
    fail = "fail"


def _count_sessions_in(fp: IO[str]) -> int:
    start = fp.tell()
    count = sum(1 for line in fp if line.startswith('{"session"'))
    fp.seek(start)
    return count


@app.command("import")
@_report_errors
def import_(
    ctx: typer.Context,
    file: Annotated[
        str, typer.Argument(metavar="FILE", help="A JSONL export, or - for standard input.")
    ],
    on_conflict: Annotated[
        ConflictPolicyChoice,
        typer.Option(
            "--on-conflict",
            help="A session id that already exists: skip it, or fail before importing anything.",
        ),
    ] = ConflictPolicyChoice.skip,
    as_json: JsonOption = False,
) -> None:
    """Restore a JSONL export (ids, lineage, titles, counters and timestamps as exported)."""
    with contextlib.ExitStack() as stack:
        if file == "-":
            # ``fail`` reads the input twice; standard input can be read once.
            fp: IO[str] = stack.enter_context(tempfile.TemporaryFile("w+", encoding="utf-8"))
            for line in sys.stdin:
                fp.write(line)
            fp.seek(0)
        else:
            fp = stack.enter_context(open(file, encoding="utf-8"))
        store = stack.enter_context(_open_store(_state(ctx), write=True))
        total = _count_sessions_in(fp) if _console(stderr=True).is_terminal else None
        with _progress("importing", total) as advance:
            result = import_jsonl(store, fp, on_conflict=on_conflict.value, progress=advance)
    if as_json:
        _print_json(asdict(result))
        return
    summary = f"imported {result.sessions} session(s) and {result.messages} message(s)"
    if result.skipped_sessions:
        summary += f"; skipped {result.skipped_sessions} that already exist"
    if result.renumbered_messages:
        summary += f"; {result.renumbered_messages} message(s) got new ids"
    if result.orphaned_parents:
        summary += f"; {len(result.orphaned_parents)} parent(s) not found, left empty"
    typer.echo(summary)


# -- prune -----------------------------------------------------------------------------------
def parse_age(text: str) -> float:
    """'90d', '12h', '2w', '30m', '45s' or a bare number of days, as days."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text.lower())
    if match is None:
        raise UsageProblem(
            f"--older-than {text!r}: use a number and a unit, e.g. 90d, 12h, 2w (s, m, h, d, w)"
        )
    amount = float(match.group(1))
    unit = match.group(2) or "d"
    return amount * SECONDS_PER_UNIT[unit] / SECONDS_PER_UNIT["d"]


def _stdin_is_interactive() -> bool:
    return sys.stdin is not None and sys.stdin.isatty()


@app.command("prune")
@_report_errors
def prune(
    ctx: typer.Context,
    older_than: Annotated[
        str, typer.Option("--older-than", help="Age of the sessions to delete: 90d, 12h, 2w.")
    ] = "90d",
    source: Annotated[str | None, typer.Option(help="Only sessions of this source.")] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show what would be deleted; delete nothing.")
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Delete ended sessions older than --older-than, and their messages (never live ones)."""
    days = parse_age(older_than)
    with _open_store(_state(ctx), write=True) as store:
        repository = SessionRepository(store)
        cutoff = time.time() - days * 86_400
        doomed = sorted(
            repository.prunable_sessions(days, source), key=lambda session: session.started_at
        )
        if not as_json:
            _show_doomed(store, doomed)
        deleted = 0
        if doomed and not dry_run:
            if not yes:
                _confirm_prune(len(doomed))
            # The cutoff shown is the one used, however long the confirmation took.
            deleted = repository.prune_sessions((time.time() - cutoff) / 86_400, source)
    if as_json:
        _print_json(
            {
                "older_than_days": days,
                "source": source,
                "dry_run": dry_run,
                "sessions": [session.to_dict() for session in doomed],
                "deleted": deleted,
            }
        )
    elif not doomed:
        typer.echo("nothing to prune")
    elif dry_run:
        typer.echo(f"dry run: {len(doomed)} session(s) would be deleted")
    else:
        typer.echo(f"deleted {deleted} session(s)")


def _show_doomed(store: Store, doomed: Sequence[SessionRecord]) -> None:
    if not doomed:
        return
    short = short_ids(store, [session.id for session in doomed])
    table = Table("ID", "Title", "Source", "Started", "Ended", "Msgs", title="To delete")
    for session in doomed:
        table.add_row(
            short.get(session.id, session.id),
            Text(_printable(session.title)) if session.title else _dim("-"),
            Text(_printable(session.source)),
            _when(session.started_at),
            _when(session.ended_at),
            str(session.message_count or 0),
        )
    _console().print(table)


def _confirm_prune(count: int) -> None:
    if not _stdin_is_interactive():
        raise CliError(
            f"refusing to delete {count} session(s) without confirmation: standard input is "
            "not a terminal; pass --yes"
        )
    if not typer.confirm(f"Delete these {count} session(s) and their messages?", default=False):
        raise CliError("nothing deleted")


# -- stats -----------------------------------------------------------------------------------
def _cost_column() -> Any:
    return func.coalesce(sessions.c.actual_cost_usd, sessions.c.estimated_cost_usd, 0.0)


def collect_stats(conn: Connection, days: int) -> dict[str, Any]:
    """Sessions and messages per source; sessions, tokens and cost per model and per day."""
    session_rows = conn.execute(
        select(sessions.c.source, func.count()).group_by(sessions.c.source)
    ).all()
    message_rows: dict[Any, int] = {
        source: int(count)
        for source, count in conn.execute(
            select(sessions.c.source, func.count(messages.c.id))
            .select_from(messages.join(sessions, sessions.c.id == messages.c.session_id))
            .group_by(sessions.c.source)
        )
    }
    sources: list[dict[str, Any]] = sorted(
        (
            {
                "source": str(source),
                "sessions": int(count),
                "messages": int(message_rows.get(source, 0)),
            }
            for source, count in session_rows
        ),
        key=lambda row: (-row["sessions"], row["source"]),
    )
    model_rows = conn.execute(
        select(
            sessions.c.model,
            func.count(),
            func.sum(func.coalesce(sessions.c.input_tokens, 0)),
            func.sum(func.coalesce(sessions.c.output_tokens, 0)),
            func.sum(_cost_column()),
        ).group_by(sessions.c.model)
    ).all()
    models: list[dict[str, Any]] = sorted(
        (
            {
                "model": model,
                "sessions": int(count),
                "input_tokens": int(input_tokens or 0),
                "output_tokens": int(output_tokens or 0),
                "cost_usd": round(float(cost or 0.0), 6),
            }
            for model, count, input_tokens, output_tokens, cost in model_rows
        ),
        key=lambda row: (-(row["input_tokens"] + row["output_tokens"]), str(row["model"])),
    )
    per_day: dict[str, dict[str, Any]] = defaultdict(
        lambda: {"sessions": 0, "tokens": 0, "cost_usd": 0.0}
    )
    day_rows = conn.execution_options(yield_per=5000).execute(
        select(
            sessions.c.started_at,
            func.coalesce(sessions.c.input_tokens, 0) + func.coalesce(sessions.c.output_tokens, 0),
            _cost_column(),
        )
    )
    for started_at, tokens, cost in day_rows:
        bucket = per_day[_day(started_at)]
        bucket["sessions"] += 1
        bucket["tokens"] += int(tokens or 0)
        bucket["cost_usd"] += float(cost or 0.0)
    recent = sorted(per_day)[-days:] if days > 0 else []
    day_list = [
        {"day": day, **per_day[day], "cost_usd": round(per_day[day]["cost_usd"], 6)}
        for day in recent
    ]
    totals = {
        "sessions": sum(row["sessions"] for row in sources),
        "messages": sum(row["messages"] for row in sources),
        "input_tokens": sum(row["input_tokens"] for row in models),
        "output_tokens": sum(row["output_tokens"] for row in models),
        "cost_usd": round(sum(row["cost_usd"] for row in models), 6),
    }
    return {"totals": totals, "sources": sources, "models": models, "days": day_list}


@app.command("stats")
@_report_errors
def stats(
    ctx: typer.Context,
    days: Annotated[
        int, typer.Option(min=0, help="Show the most recent N days that had sessions.")
    ] = 14,
    as_json: JsonOption = False,
) -> None:
    """Sessions and messages per source; tokens and cost per model and per day."""
    with _open_store(_state(ctx)) as store:
        data = store.read(lambda conn: collect_stats(conn, days))
    if as_json:
        _print_json(data)
        return
    console = _console()
    totals = data["totals"]
    console.print(
        f"{totals['sessions']:,} session(s), {totals['messages']:,} message(s), "
        f"{totals['input_tokens'] + totals['output_tokens']:,} tokens, "
        f"${totals['cost_usd']:.2f}",
        markup=False,
    )
    largest = max((row["sessions"] for row in data["sources"]), default=0)
    by_source = Table("Source", "Sessions", "Messages", "", title="Per source")
    for row in data["sources"]:
        by_source.add_row(
            Text(_printable(row["source"])),
            f"{row['sessions']:,}",
            f"{row['messages']:,}",
            _bar(row["sessions"], largest),
        )
    console.print(by_source)
    by_model = Table("Model", "Sessions", "Input tokens", "Output tokens", "Cost",
                     title="Per model")
    for row in data["models"]:
        by_model.add_row(
            Text(_printable(row["model"])) if row["model"] else _dim("(none)"),
            f"{row['sessions']:,}",
            f"{row['input_tokens']:,}",
            f"{row['output_tokens']:,}",
            f"${row['cost_usd']:.4f}",
        )
    console.print(by_model)
    if data["days"]:
        largest_day = max(row["tokens"] for row in data["days"])
        by_day = Table("Day", "Sessions", "Tokens", "Cost", "", title="Per day (tokens)")
        for row in data["days"]:
            by_day.add_row(
                row["day"],
                f"{row['sessions']:,}",
                f"{row['tokens']:,}",
                f"${row['cost_usd']:.4f}",
                _bar(row["tokens"], largest_day),
            )
        console.print(by_day)


# -- titles ----------------------------------------------------------------------------------
@title_app.command("set")
@_report_errors
def title_set(
    ctx: typer.Context,
    ref: Annotated[
        str, typer.Argument(metavar="REF", help="Session id, unique id prefix, or title.")
    ],
    title: Annotated[str, typer.Argument(metavar="TITLE", help='The new title ("" clears it).')],
) -> None:
    """Give a session a title (titles are unique; invisible characters are removed)."""
    with _open_store(_state(ctx), write=True) as store:
        repository = SessionRepository(store)
        session_id = resolve_ref(store, ref)
        if not repository.set_session_title(session_id, title):
            raise CliError(f"session {session_id} no longer exists")
        stored = repository.get_session_title(session_id)
    if stored is None:
        typer.echo(f"{session_id}: title cleared")
    else:
        typer.echo(f"{session_id}: title set to {stored!r}")


@title_app.command("next")
@_report_errors
def title_next(
    ctx: typer.Context,
    base: Annotated[
        str, typer.Argument(metavar="BASE", help='A title; "name #3" counts as "name".')
    ],
) -> None:
    """Print the next free title of a lineage: "name", then "name #2", "name #3"..."""
    with _open_store(_state(ctx)) as store:
        typer.echo(SessionRepository(store).get_next_title_in_lineage(base))


def main() -> NoReturn:
    """The console script ``sessionstore`` (and ``python -m sessionstore``)."""
    app(prog_name="sessionstore")
    raise SystemExit(0)  # pragma: no cover - Typer exits on its own in standalone mode


__all__ = [
    "CliError",
    "app",
    "collect_stats",
    "describe_error",
    "main",
    "parse_age",
    "resolve_ref",
    "short_ids",
]
