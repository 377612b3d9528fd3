"""``sessionstore search``: full-text hits with their surrounding messages."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from ..sql.codec import cell_text
from . import _output as out
from ._app import PlainCommand, app
from ._common import (
    ExcludeSourceOption,
    JsonOption,
    SourceOption,
    cli_state,
    open_store,
    report_errors,
    short_ids,
    sources,
)

if TYPE_CHECKING:
    from rich.text import Text

    from ..search import ContextMessage, SearchHit

CONTEXT_LINE_CHARS = 160
NOTHING_SEARCHABLE = (
    "no matches: the query has no word to search for (search finds words of letters or digits,"
    " and CJK text; emoji and punctuation alone are not indexed, as in Hermes)"
)


def _context_line(message: ContextMessage) -> Text:
    from rich.text import Text

    content = " ".join(out.printable(message.content or "").split())
    if len(content) > CONTEXT_LINE_CHARS:
        content = content[: CONTEXT_LINE_CHARS - 3] + "..."
    return Text(f"    {out.printable(message.role)}: {content}", style="dim")


def _split_context(hit: SearchHit) -> tuple[list[ContextMessage], list[ContextMessage]]:
    """The context lines before and after the hit (none if the hit is not among them)."""
    for position, message in enumerate(hit.context):
        if message.is_hit:
            return list(hit.context[:position]), list(hit.context[position + 1 :])
    return [], []


@app.command("search", cls=PlainCommand)
@report_errors
def search(
    ctx: typer.Context,
    query: Annotated[
        str, typer.Argument(metavar="QUERY", help='Words, "phrases", prefix*, AND/OR/NOT.')
    ],
    source: SourceOption = None,
    exclude_source: ExcludeSourceOption = None,
    role: Annotated[
        list[str] | None,
        typer.Option(metavar="ROLE", help="Only messages of this role (repeatable)."),
    ] = None,
    limit: Annotated[int, typer.Option(min=0, metavar="N", help="At most this many hits.")] = 20,
    offset: Annotated[int, typer.Option(min=0, metavar="N", help="Skip this many first.")] = 0,
    context: Annotated[
        bool, typer.Option("--context/--no-context", help="Show the messages around each hit.")
    ] = True,
    as_json: JsonOption = False,
) -> None:
    """Full-text search over every message, best matches first."""
    from ..sessions.repository import SessionRepository

    with open_store(cli_state(ctx)) as store:
        hits = SessionRepository(store).search_messages(
            query,
            source_filter=sources(source),
            exclude_sources=sources(exclude_source),
            role_filter=role or None,
            limit=limit,
            offset=offset,
        )
        if as_json:
            out.print_json([hit.to_dict() for hit in hits])
            return
        if not hits:
            # A query of emoji or punctuation finds nothing, which a bare "no matches" would
            # wrongly tell as none of the messages holding it (the field walk, issue 29).
            from ..search import contains_cjk, sanitize_fts5_query

            searchable = contains_cjk(query) or any(
                char.isalnum() for char in sanitize_fts5_query(query)
            )
            out.note("no matches" if searchable else NOTHING_SEARCHABLE)
            return
        short = short_ids(store, sorted({hit.session_id for hit in hits}))
    from rich.text import Text

    console = out.console()
    for hit in hits:
        console.print(
            Text.assemble(
                (short.get(hit.session_id) or out.shown_id(hit.session_id), "bold"),
                "  ",
                (out.printable(hit.role), out.ROLE_STYLES.get(hit.role, "bold")),
                ("  " + out.when(hit.timestamp), "dim"),
                ("  " + out.printable(f"{hit.source} {cell_text(hit.model or '')}").strip(), "dim"),
            )
        )
        before, after = _split_context(hit) if context else ([], [])
        for message in before:
            console.print(_context_line(message))
        console.print(Text("  ") + out.highlighted(hit.snippet))
        for message in after:
            console.print(_context_line(message))
        console.print()
