"""The Typer application, its verb groups and the global options; verbs register on these."""

from __future__ import annotations

import logging
from typing import Annotated

import typer

from .. import __version__
from ._common import CliState

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
