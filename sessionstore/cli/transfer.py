"""``export`` and ``import``: JSONL streams of sessions and their messages."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from dataclasses import asdict
from enum import Enum
from pathlib import Path
from typing import IO, Annotated

import typer

from . import _output as out
from ._app import PlainCommand, app
from ._common import (
    JsonOption,
    SourceOption,
    UsageProblem,
    cli_state,
    create_if_new,
    open_store,
    report_errors,
    resolve_ref,
    shown,
    sources,
    store_url,
)


@app.command("export", cls=PlainCommand)
@report_errors
def export(
    ctx: typer.Context,
    output: Annotated[
        Path | None,
        typer.Option(
            "-o", "--output", metavar="FILE", help="Write to this file (default: standard output)."
        ),
    ] = None,
    source: SourceOption = None,
    session: Annotated[
        list[str] | None,
        typer.Option(
            "--session", metavar="REF", help="Only this session: id, prefix or title (repeatable)."
        ),
    ] = None,
) -> None:
    """Write sessions and their messages as JSONL (streamed; restorable with `import`)."""
    from ..dialects.disk_space import out_of_room_typed
    from ..ops.transfer import export_jsonl, export_jsonl_file
    from ..sessions.repository import SessionRepository

    if output is not None:
        _check_output_path(output)
        _refuse_store_file(ctx, output)
    picked = sources(source)
    with open_store(cli_state(ctx)) as store:
        session_ids = [resolve_ref(store, ref) for ref in session] if session else None
        total = (
            len(session_ids)
            if session_ids is not None
            else SessionRepository(store).session_count(picked, include_archived=True)
        )
        with out.progress("exporting", total) as advance:
            if output is None:
                with out_of_room_typed("standard output", "the export is incomplete"):
                    count = export_jsonl(
                        store, sys.stdout, source=picked, session_ids=session_ids,
                        progress=advance,
                    )
                    sys.stdout.flush()
            else:
                count = export_jsonl_file(
                    store, output, source=picked, session_ids=session_ids, progress=advance
                )
    where = "standard output" if output is None else str(output)
    out.note(f"exported {count} session(s) to {where}")


def _refuse_store_file(ctx: typer.Context, path: Path) -> None:
    """The store's own files are SQLite's alone: never read, replaced or written as JSONL."""
    from ..ops import doctor

    if doctor.is_store_file(store_url(cli_state(ctx)), path):
        raise UsageProblem(f"{path} is the session store's own file; choose another file")


def _check_output_path(output: Path) -> None:
    if output.is_dir():
        raise UsageProblem(
            f"-o {output} is a directory: give a file name, e.g. -o {output / 'sessions.jsonl'}"
        )
    if not output.parent.is_dir():
        raise UsageProblem(f"-o {output}: the directory {output.parent} does not exist")


class ConflictPolicyChoice(str, Enum):
    skip = "skip"
    fail = "fail"
    merge = "merge"


LONG_IMPORT_RECORDS = 40_000
"""An export of this many records holds a SQLite store's writers off for seconds when imported
whole (~0.15 ms a short message: ~6 s): the import says so, and names ``--in-batches``."""
SHORTEST_RECORD_BYTES = 64
"""No record line is shorter (a message's required fields alone): a file smaller than this
many bytes a record is not counted."""


class _FileTally:
    """What the import says before it starts, read in one pass over the file, and only when
    asked: its records (the long-import note) and its sessions (the progress bar's total)."""

    def __init__(self, fp: IO[str]) -> None:
        self._fp = fp
        self._counts: tuple[int, int] | None = None

    def _count(self) -> tuple[int, int]:
        if self._counts is None:
            start = self._fp.tell()
            records = sessions = 0
            for line in self._fp:
                records += 1
                sessions += line.startswith('{"session"')
            self._fp.seek(start)
            self._counts = (records, sessions)
        return self._counts

    def long(self) -> bool:
        if os.fstat(self._fp.fileno()).st_size < LONG_IMPORT_RECORDS * SHORTEST_RECORD_BYTES:
            return False
        return self._count()[0] >= LONG_IMPORT_RECORDS

    def sessions(self) -> int:
        return self._count()[1]


@app.command("import", cls=PlainCommand)
@report_errors
def import_(
    ctx: typer.Context,
    file: Annotated[
        str, typer.Argument(metavar="FILE", help="A JSONL export, or - for standard input.")
    ],
    on_conflict: Annotated[
        ConflictPolicyChoice,
        typer.Option(
            "--on-conflict",
            help="A session id that already exists: skip it, fail before importing anything, "
            "or merge (add its missing messages: finishes an interrupted import).",
        ),
    ] = ConflictPolicyChoice.skip,
    in_batches: Annotated[
        bool,
        typer.Option(
            "--in-batches",
            help="Commit every 1,000 rows instead of all at once, so that a store in use (a "
            "running gateway) goes on writing meanwhile. A failure part-way keeps what was "
            "committed; the same import with --on-conflict merge finishes it.",
        ),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Restore a JSONL export (ids, lineage, titles, counters and timestamps as exported).

    The restore path: a store that does not exist yet (a new file, an empty PostgreSQL
    database) is created at the current schema first. An existing store must be current.
    All or nothing by default: one transaction, which on SQLite holds the store's other
    writers off until it ends (import big files when the agents are quiet, or --in-batches).
    """
    from ..dialects.disk_space import out_of_room_typed
    from ..ops.transfer import import_jsonl
    from ..storage.private_files import mode_of

    with contextlib.ExitStack() as stack:
        if file == "-":
            # ``fail`` reads the input twice; standard input can be read once.
            fp: IO[str] = stack.enter_context(tempfile.TemporaryFile("w+", encoding="utf-8"))
            with out_of_room_typed("a temporary copy of standard input", "nothing was imported"):
                for line in sys.stdin:
                    fp.write(line)
                fp.flush()
            fp.seek(0)
        else:
            _refuse_store_file(ctx, Path(file))
            fp = stack.enter_context(open(file, encoding="utf-8"))
        options = cli_state(ctx)
        # A new store holds a copy of the file's data: it takes the file's mode.
        if create_if_new(options, mode_of(None if file == "-" else Path(file))):
            out.note(f"created a new session store at {shown(store_url(options))}")
        store = stack.enter_context(open_store(options, write=True))
        tally = _FileTally(fp)
        if not in_batches and store.dialect.serialize_writes_in_process and tally.long():
            out.note(
                "this import is one transaction: until it ends, the store's other writers (a "
                "running agent's) wait, and give up after 20 s; for a store in use, use "
                "--in-batches"
            )
        total = tally.sessions() if out.console(stderr=True).is_terminal else None
        with out.progress("importing", total) as advance:
            try:
                result = import_jsonl(
                    store, fp, on_conflict=on_conflict.value, progress=advance,
                    in_batches=in_batches,
                )
            except KeyboardInterrupt:
                if in_batches:  # (a whole import may have committed by then: not said)
                    out.note(
                        "interrupted: the batches committed before stay; the same import "
                        "with --on-conflict merge finishes it"
                    )
                raise
    if as_json:
        out.print_json(asdict(result))
        return
    summary = f"imported {result.sessions} session(s) and {result.messages} message(s)"
    if result.skipped_sessions:
        summary += f"; skipped {result.skipped_sessions} that already exist"
    if result.state_keys:
        summary += f"; {result.state_keys} state key(s)"
    if result.renumbered_messages:
        summary += f"; {result.renumbered_messages} message(s) got new ids"
    if result.orphaned_parents:
        summary += f"; {len(result.orphaned_parents)} parent(s) not found, left empty"
    typer.echo(summary)


