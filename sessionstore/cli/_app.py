"""The Typer application, its verb groups and the global options; verbs register on these."""

from __future__ import annotations

import logging
import sys
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

from .. import __version__
from ._common import CliState, UrlOption
from ._output import print_error, silence_broken_pipe

COMMAND_ORDER = (
    "sessions", "search", "stats", "title", "export", "import", "prune", "db",
    "list", "show", "delete", "set", "next",
    "upgrade", "current", "history", "doctor", "downgrade", "copy",
)  # fmt: skip
"""The order ``--help`` lists verbs in: reading first, then changing, moving, the database
(Click's own is registration order, which is import order)."""


class PlainCommand(TyperCommand):
    """A verb's help in Click's plain words: arguments by their name alone (``QUERY``,
    ``[REVISION]``, ``[SRC_URL] DST_URL``), where Typer writes ``{QUERY}`` in the usage line
    and ``QUERY <str>`` in the list."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name == "argument":
                name = param.metavar or (param.name or "").upper()
                pieces.append(name if param.required else f"[{name}]")
            else:
                pieces.extend(param.get_usage_pieces(ctx))
        return pieces

    def format_options(self, ctx: Any, formatter: Any) -> None:
        arguments, options = [], []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":
                arguments.append((param.metavar or (param.name or "").upper(), record[1]))
            else:
                options.append(record)
        for title, rows in (("Arguments", arguments), ("Options", options)):
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


class _OneLineErrors(TyperGroup):
    """Usage errors as one line on stderr (``error: ... (see '... --help')``), exit status 2.

    Click's own rendering is a usage line, a hint and the error (Typer's: a box); a script
    reading stderr wants the one line the docs promise (docs/cli.md).
    """

    def list_commands(self, ctx: Any) -> list[str]:
        rank = {name: position for position, name in enumerate(COMMAND_ORDER)}
        return sorted(super().list_commands(ctx), key=lambda name: rank.get(name, len(rank)))

    def main(self, *args: Any, **extra: Any) -> Any:
        if not extra.pop("standalone_mode", True):
            return super().main(*args, **{**extra, "standalone_mode": False})
        prog_name = extra.get("prog_name") or (args[1] if len(args) > 1 else None)
        try:
            code = super().main(*args, **{**extra, "standalone_mode": False})
        except BrokenPipeError:
            silence_broken_pipe()
            sys.exit(0)
        except typer.Abort:
            # Ctrl-C or end of input at a question: nothing was done.
            typer.echo("aborted; nothing changed", err=True)
            sys.exit(1)
        except Exception as exc:
            # Click's exception classes are vendored inside newer Typer releases and not
            # exported: recognised by their shape and class names instead.
            if not (hasattr(exc, "format_message") and hasattr(exc, "exit_code")):
                raise
            names = {klass.__name__ for klass in type(exc).__mro__}
            if "NoArgsIsHelpError" in names:
                exc.show()  # type: ignore[attr-defined]  # the help text, as asked for
            elif "UsageError" in names:
                context = getattr(exc, "ctx", None)
                where = context.command_path if context is not None else prog_name
                print_error(f"{exc.format_message()} (see '{where or 'sessionstore'} --help')")
            else:
                print_error(str(exc.format_message()))
            sys.exit(int(exc.exit_code))
        if isinstance(code, BaseException):
            raise code
        sys.exit(code if isinstance(code, int) else 0)


def _group(help_text: str, **options: Any) -> typer.Typer:
    # Plain Click help: Typer's Rich panels show every flag as taking a value (``--json
    # <bool>``) and squeeze the descriptions at 80 columns.
    return typer.Typer(
        help=help_text, no_args_is_help=True, rich_markup_mode=None, cls=_OneLineErrors,
        **options,
    )


app = _group(
    "Inspect, search, move and maintain an agent session store (SQLite or PostgreSQL).",
    name="sessionstore",
)
db_app = _group("The database itself: schema migrations, health checks, copies.")
sessions_app = _group("List sessions, read and delete conversations.")
title_app = _group("Session titles and their lineage.")
app.add_typer(db_app, name="db")
app.add_typer(sessions_app, name="sessions")
app.add_typer(title_app, name="title")


def _show_version(value: bool) -> None:
    if value:
        from ..dialects.sqlite_library import library

        typer.echo(f"sessionstore {__version__}")
        # Which SQLite the stores of this installation run on (a WAL-reset-bug fix or not).
        typer.echo(library().describe())
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    url: UrlOption = None,
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
