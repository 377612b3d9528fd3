"""``sessionstore stats``: usage per source, model and day, with bars."""

from __future__ import annotations

from typing import Annotated

import typer

from . import _output as out
from ._app import PlainCommand, app
from ._common import JsonOption, cli_state, open_store, report_errors


@app.command("stats", cls=PlainCommand)
@report_errors
def stats(
    ctx: typer.Context,
    days: Annotated[
        int, typer.Option(min=0, metavar="N", help="Show the most recent N days that had sessions.")
    ] = 14,
    as_json: JsonOption = False,
) -> None:
    """Sessions and messages per source; tokens and cost per model and per day."""
    from ..sessions.stats import collect_stats

    with open_store(cli_state(ctx)) as store, out.spinner("counting ..."):
        data = store.read(lambda conn: collect_stats(conn, days))
    if as_json:
        out.print_json(data)
        return
    from rich.table import Table
    from rich.text import Text

    console = out.console()
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
            Text(out.printable(row["source"])),
            f"{row['sessions']:,}",
            f"{row['messages']:,}",
            out.bar(row["sessions"], largest),
        )
    console.print(by_source)
    by_model = Table("Model", "Sessions", "Input tokens", "Output tokens", "Cost",
                     title="Per model")
    for row in data["models"]:
        by_model.add_row(
            Text(out.printable(row["model"])) if row["model"] else out.dim("(none)"),
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
                out.bar(row["tokens"], largest_day),
            )
        console.print(by_day)


