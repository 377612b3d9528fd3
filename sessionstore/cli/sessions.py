"""``sessions list`` and ``sessions show``: the sessions of a store and one conversation."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..sql.codec import cell_text, decode_json
from . import _output as out
from ._app import PlainCommand, sessions_app
from ._common import (
    CliError,
    ExcludeSourceOption,
    JsonOption,
    SourceOption,
    cli_state,
    confirm,
    open_store,
    report_errors,
    resolve_ref,
    short_ids,
    sources,
)

if TYPE_CHECKING:
    from rich.console import JustifyMethod, RenderableType
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    from ..sql.records import MessageRecord, SessionListing, SessionRecord

TOOL_OUTPUT_LINES = 8
TOOL_ARGUMENTS_CHARS = 100


NARROW_COLUMNS = 100
"""Below this terminal width the listing leaves out the model column."""


def _listing_table(
    listings: Sequence[SessionListing], short: dict[str, str], width: int
) -> Table:
    """One line per session at any width: cells are cut with an ellipsis, never wrapped (a
    wrapped row at 80 columns took seven lines). Below 100 columns the model is left out."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    narrow = width < NARROW_COLUMNS
    rows: list[list[str | Text]] = []
    for listing in listings:
        session = listing.session
        row: list[str | Text] = [
            short.get(session.id) or out.shown_id(session.id),
            Text(out.printable(session.title)) if session.title else out.dim("-"),
            Text(out.printable(session.source)),
        ]
        if not narrow:
            row.append(Text(out.printable(session.model or "")))
        row += [
            out.count(session.message_count, grouped=False),
            out.when(listing.last_active),
            Text(" ".join(out.printable(listing.preview).split())),
        ]
        rows.append(row)
    headers = ["ID", "Title", "Source", *([] if narrow else ["Model"]), "Msgs", "Last active",
               "Preview"]  # fmt: skip
    caps = [40, 24, 12, *([] if narrow else [20]), 6, 16, 60]
    widths = [
        min(cap, max(len(header), *(len(str(row[index])) for row in rows)))
        for index, (header, cap) in enumerate(zip(headers, caps, strict=True))
    ]
    # What is left after the other columns and the three cells between columns goes to the
    # preview, then (if still short) the title gives way.
    spare = width - sum(widths[:-1]) - 3 * (len(headers) - 1) - 1
    widths[-1] = max(min(widths[-1], spare), 7)
    if spare < 7:
        widths[1] = max(5, widths[1] - (7 - spare))
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, expand=False)
    for header, column_width in zip(headers, widths, strict=True):
        justify: JustifyMethod = "right" if header == "Msgs" else "left"
        table.add_column(header, width=column_width, no_wrap=True, overflow="ellipsis",
                         justify=justify)  # fmt: skip
    for row in rows:
        table.add_row(*row)
    return table


@sessions_app.command("list", cls=PlainCommand)
@report_errors
def sessions_list(
    ctx: typer.Context,
    source: SourceOption = None,
    exclude_source: ExcludeSourceOption = None,
    children: Annotated[
        bool, typer.Option("--children", help="Include child sessions (subagents).")
    ] = False,
    archived: Annotated[
        bool, typer.Option("--archived", help="Include archived sessions.")
    ] = False,
    include_hidden: Annotated[
        bool,
        typer.Option("--include-hidden", help="Include hidden sessions (Hermes's Bot Mode)."),
    ] = False,
    limit: Annotated[
        int, typer.Option(min=0, metavar="N", help="At most this many sessions.")
    ] = 20,
    offset: Annotated[int, typer.Option(min=0, metavar="N", help="Skip this many first.")] = 0,
    show_all: Annotated[
        bool, typer.Option("--all", "-a", help="Every session (no --limit).")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """List sessions, newest first (a compressed conversation shows as its newest part).

    When more sessions exist than are shown, a line on stderr says how many and how to see
    them (--all, or --offset for the next page).

    Hidden sessions (hidden in Hermes, as Bot Mode hides its own) are left out unless
    --include-hidden, as Hermes's own session list leaves them out: this lists what Hermes's
    list_sessions_rich lists, and the count on stderr counts the same sessions.
    """
    from ..sessions.repository import SessionRepository

    with open_store(cli_state(ctx)) as store:
        repository = SessionRepository(store)
        total = repository.count_listed_sessions(
            source=sources(source),
            exclude_sources=sources(exclude_source),
            include_children=children,
            include_archived=archived,
            include_hidden=include_hidden,
        )
        listings = repository.list_sessions_rich(
            source=sources(source),
            exclude_sources=sources(exclude_source),
            limit=max(total - offset, 0) if show_all else limit,
            offset=offset,
            include_children=children,
            include_archived=archived,
            include_hidden=include_hidden,
        )
        more = total - offset - len(listings)
        if as_json:
            out.print_json([listing.to_dict() for listing in listings])
        elif not listings:
            out.note("no sessions" if total == 0 else f"no sessions past --offset {offset}")
        else:
            short = short_ids(store, [listing.session.id for listing in listings])
            console = out.console()
            console.print(_listing_table(listings, short, console.width))
    if more > 0 and listings:
        out.note(
            f"showing {len(listings)} of {total} sessions; --all lists every one, "
            f"--offset {offset + len(listings)} the next page"
        )


@sessions_app.command("delete", cls=PlainCommand)
@report_errors
def sessions_delete(
    ctx: typer.Context,
    ref: Annotated[
        str, typer.Argument(metavar="REF", help="Session id, unique id prefix, or title.")
    ],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Delete one session and its messages (its child sessions are kept, unlinked).

    Asks first on a terminal; without one, refuses unless --yes is given.
    """
    from ..sessions.repository import SessionRepository

    with open_store(cli_state(ctx), write=True) as store:
        repository = SessionRepository(store)
        session_id = resolve_ref(store, ref)
        session = repository.get_session(session_id)
        if session is None:
            raise CliError(f"no session matches {ref!r}")
        shown = out.shown_id(session_id)
        if not yes:
            named = f" ({out.printable(session.title)!r})" if session.title else ""
            confirm(
                f"Delete session {shown}{named} and its "
                f"{out.count(session.message_count, grouped=False)} "
                "message(s)?",
                refusal=f"refusing to delete session {shown} without confirmation",
            )
        with out.spinner(f"deleting session {shown} ..."):
            deleted = repository.delete_session(session_id)
    if as_json:
        out.print_json({"id": session_id, "deleted": deleted})
    elif deleted:
        typer.echo(f"deleted session {shown} and its messages")
    else:
        raise CliError(f"session {shown} no longer exists")


def _tool_call_summary(call: Any) -> str:
    if not isinstance(call, dict):
        return out.printable(str(call))[:TOOL_ARGUMENTS_CHARS]
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
    text = " ".join(out.printable(text).split())
    if len(text) > TOOL_ARGUMENTS_CHARS:
        text = text[: TOOL_ARGUMENTS_CHARS - 3] + "..."
    return f"{out.printable(str(name))}({text})"


def _message_block(record: MessageRecord, *, full: bool) -> RenderableType:
    from rich.console import Group
    from rich.text import Text

    parts: list[RenderableType] = []
    label = record.role
    if record.role == "tool":
        name = record.tool_name
        label = f"tool result · {cell_text(name)}" if name else "tool result"
    heading = Text.assemble(
        (out.printable(label), out.ROLE_STYLES.get(record.role, "bold")),
        ("  " + out.when(record.timestamp), "dim"),
    )
    parts.append(heading)
    if record.reasoning:
        if full:
            parts.append(Text("reasoning: " + out.printable(record.reasoning), style="italic dim"))
        else:
            parts.append(
                out.dim(f"▸ reasoning folded ({len(record.reasoning)} chars; --full shows it)")
            )
    content = out.printable(record.content)
    if record.role == "tool" and not full:
        lines = content.splitlines()
        if len(lines) > TOOL_OUTPUT_LINES:
            hidden = len(lines) - TOOL_OUTPUT_LINES
            content = "\n".join(lines[:TOOL_OUTPUT_LINES])
            parts.append(Text(content))
            parts.append(out.dim(f"... {hidden} more line(s) (--full shows them)"))
            content = ""
    if content:
        parts.append(Text(content))
    tool_calls = decode_json(record.tool_calls, "tool_calls", record.id, [])
    for call in tool_calls if isinstance(tool_calls, list) else [tool_calls]:
        parts.append(Text("→ " + _tool_call_summary(call), style="cyan"))
    if not content and not tool_calls and not record.reasoning and len(parts) == 1:
        parts.append(out.dim("(no content)"))
    parts.append(Text(""))
    return Group(*parts)


def _session_header(session: SessionRecord, tip: str | None) -> Panel:
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()

    def row(name: str, value: str | None) -> None:
        if value:
            grid.add_row(name, Text(out.printable(value)))

    def id_row(name: str, session_id: str | None) -> None:
        if session_id:
            grid.add_row(name, Text(out.shown_id(session_id)))

    id_row("id", session.id)
    row("title", session.title)
    row("source", session.source)
    row("model", session.model)
    row("started", out.when(session.started_at))
    if session.ended_at is not None:
        reason = out.printable(session.end_reason) or "no reason"
        row("ended", f"{out.when(session.ended_at)} ({reason})")
    id_row("parent", session.parent_session_id)
    if tip is not None and tip != session.id:
        id_row("continued in", tip)
    row(
        "messages",
        f"{out.count(session.message_count, grouped=False)} "
        f"({out.count(session.tool_call_count, grouped=False)} tool calls)",
    )
    row("tokens", f"{out.count(session.input_tokens)} in / {out.count(session.output_tokens)} out")
    cost = session.actual_cost_usd if session.actual_cost_usd is not None else (
        session.estimated_cost_usd
    )
    if cost:
        row("cost", out.money(cost))
    return Panel(grid, title="session", expand=False)


@sessions_app.command("show", cls=PlainCommand)
@report_errors
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
    from ..sessions.repository import SessionRepository

    with open_store(cli_state(ctx)) as store:
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
        out.print_json(rows)
        return
    from rich.text import Text

    console = out.console()
    console.print(_session_header(session, tip))
    if session.system_prompt:
        if full:
            console.print(Text("system prompt:", style=out.ROLE_STYLES["system"]))
            console.print(Text(out.printable(session.system_prompt)))
        else:
            folded = len(session.system_prompt)
            console.print(out.dim(f"▸ system prompt folded ({folded} chars; --full shows it)"))
        console.print()
    for record in records:
        console.print(_message_block(record, full=full))
    if not records:
        console.print(out.dim("(no messages)"))


