"""``title set`` and ``title next``: session titles and their lineage."""

from __future__ import annotations

from typing import Annotated

import typer

from . import _output as out
from ._app import PlainCommand, title_app
from ._common import CliError, JsonOption, cli_state, open_store, report_errors, resolve_ref


@title_app.command("set", cls=PlainCommand)
@report_errors
def title_set(
    ctx: typer.Context,
    ref: Annotated[
        str, typer.Argument(metavar="REF", help="Session id, unique id prefix, or title.")
    ],
    title: Annotated[str, typer.Argument(metavar="TITLE", help='The new title ("" clears it).')],
    as_json: JsonOption = False,
) -> None:
    """Give a session a title (titles are unique; invisible characters are removed)."""
    from ..sessions.repository import SessionRepository

    with open_store(cli_state(ctx), write=True) as store:
        repository = SessionRepository(store)
        session_id = resolve_ref(store, ref)
        shown = out.shown_id(session_id)
        if not repository.set_session_title(session_id, title):
            raise CliError(f"session {shown} no longer exists")
        stored = repository.get_session_title(session_id)
    if as_json:
        out.print_json({"id": session_id, "title": stored})
    elif stored is None:
        typer.echo(f"{shown}: title cleared")
    else:
        typer.echo(f"{shown}: title set to {stored!r}")


@title_app.command("next", cls=PlainCommand)
@report_errors
def title_next(
    ctx: typer.Context,
    base: Annotated[
        str, typer.Argument(metavar="BASE", help='A title; "name #3" counts as "name".')
    ],
    as_json: JsonOption = False,
) -> None:
    """Print the next free title of a lineage: "name", then "name #2", "name #3"..."""
    from ..sessions.repository import SessionRepository

    with open_store(cli_state(ctx)) as store:
        following = SessionRepository(store).get_next_title_in_lineage(base)
    if as_json:
        out.print_json({"base": base, "next": following})
    else:
        typer.echo(following)
