"""The ``sessionstore`` command line: inspect, search, move and maintain a session store.

One module per verb group (``db``, ``sessions``, ``search``, ``transfer``, ``prune``, ``stats``,
``title``) registers its verbs on the application in :mod:`._app`; :mod:`._common` holds what
they share (errors, global options, how a store is opened) and :mod:`._output` how they print.

Conventions every verb follows:

- the store is ``--url`` (before or after the verb; a URL, or a plain path to a SQLite file;
  empty is a usage error), else the URL rules of :mod:`sessionstore.storage.config`;
- a verb that reads never migrates: a store that is not at the current schema is refused with
  the command that upgrades it (``db upgrade``, which backs a SQLite file up first); ``import``
  alone creates a store that does not exist yet;
- every command a message suggests is exact for the same store
  (:mod:`sessionstore.storage.command_hints`);
- ``--json`` prints machine-readable output wherever a table would be shown;
- errors, usage errors included, are one line on stderr (``--debug`` shows the traceback); exit
  status 0 is success, 1 a failure, 2 a usage error;
- a reader that closes the pipe early (``| head``) ends the verb quietly with status 0 (the
  consumer had what it wanted; like ripgrep, unlike a SIGPIPE death's 141);
- deleting (prune, sessions delete, a downgrade that drops data) asks on a terminal and is
  refused without one unless ``--yes``;
- progress bars and spinners appear only when stderr is a terminal, so pipes stay clean.
"""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING, Any, NoReturn

from . import db, prune, search, sessions, stats, title, transfer
from ._app import app
from ._common import (
    CliError,
    UsageProblem,
    describe_error,
    resolve_ref,
    short_ids,
    stdin_is_interactive,
)
from ._output import HIGHLIGHT_STYLE, day, highlighted
from .prune import parse_age

if TYPE_CHECKING:
    from ..sessions.stats import collect_stats

# The verb modules register themselves on import; named here so the import is not "unused".
_VERB_MODULES = (db, prune, search, sessions, stats, title, transfer)

# The names of the single-module CLI, kept for callers that used them.
_stdin_is_interactive = stdin_is_interactive
_highlighted = highlighted
_day = day


def main() -> NoReturn:
    """The console script ``sessionstore`` (and ``python -m sessionstore``)."""
    # A command is a short-lived process and the modules it imported live until it exits, so
    # the collector is told to leave them alone: walking them and tearing their cycles down
    # at exit (SQLAlchemy's, Typer's, Rich's) cost a short command about a quarter of its time
    # (`sessions list`: 1.07 -> 0.77 s on the bench file). What a verb creates is still
    # collected; only the program may decide this, so the library itself never does.
    gc.freeze()
    try:
        app(prog_name="sessionstore")
    finally:
        # Each verb imports what it runs (SQLAlchemy, the store, Rich) after the freeze above:
        # frozen as well once the verb is done, with whatever it left, so the collection at
        # exit walks none of it (`sessions list` and `sessions show` cost 5-7 % more CPU
        # without this, A B B A).
        gc.freeze()
    raise SystemExit(0)  # pragma: no cover - Typer exits on its own in standalone mode


__all__ = [
    "HIGHLIGHT_STYLE",
    "CliError",
    "UsageProblem",
    "app",
    "collect_stats",
    "day",
    "describe_error",
    "highlighted",
    "main",
    "parse_age",
    "resolve_ref",
    "short_ids",
]


def __getattr__(name: str) -> Any:
    # Kept for callers that took it from here; loaded on first use, as the verbs load what
    # they run: `--help` and a verb that does not count never import the store's queries.
    if name == "collect_stats":
        from ..sessions.stats import collect_stats

        return collect_stats
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
