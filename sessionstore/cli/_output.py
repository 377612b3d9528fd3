"""What the verbs print: a console sized for terminals and pipes, JSON, status lines, progress.

Data goes to standard output; status lines, progress and errors to standard error, so a pipe
carries only the data. Progress bars and spinners appear only when stderr is a terminal.

Rich is imported by what uses it (a table, a progress display, the check whether stderr is a
terminal), not with this module: ``--help`` never loads it, nor does a listing as JSON.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sys
import unicodedata
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

import typer

from ..sql.codec import cell_text, dumps_strict, text_of_blob

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import ProgressColumn
    from rich.text import Text

PIPE_WIDTH = 200
"""Rich's width when stdout is not a terminal: wide enough that tables are not squeezed."""
BAR_WIDTH = 30
ROLE_STYLES = {
    "user": "bold green",
    "assistant": "bold blue",
    "tool": "bold magenta",
    "system": "bold yellow",
}
HIGHLIGHT_STYLE = "bold black on yellow"
# C0/C1 control characters other than tab and newline, and the bidi embeddings, overrides and
# isolates: stored text must not be able to drive the terminal (escape sequences in a tool's
# output, say) nor reorder what is printed after it on the line. Other format characters
# (joiners in emoji, left-to-right marks in Hebrew text) only shape the text and stay.
_CONTROL_CHARACTERS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# Line and paragraph separators: a line break where the text meant one.
_LINE_SEPARATORS = re.compile(r"[\u2028\u2029]")


def silence_broken_pipe() -> None:
    """The reader of standard output went away (``| head``): stop quietly.

    Whatever is still buffered can never be delivered; pointing the descriptor at /dev/null
    keeps the interpreter's final flush from raising again on the way out.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        # Not a real file descriptor (a test runner's buffer): nothing to keep quiet.
        pass


@functools.cache
def _quiet_console() -> type[Console]:
    from rich.console import Console

    class _QuietConsole(Console):
        def on_broken_pipe(self) -> None:
            # Rich's own reaction is exit status 1; a reader that stopped early is not a
            # failure.
            self.quiet = True
            silence_broken_pipe()
            raise SystemExit(0)

    return _QuietConsole


def console(*, stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    interactive = stream.isatty()
    width = None if interactive or os.environ.get("COLUMNS") else PIPE_WIDTH
    return _quiet_console()(file=stream, width=width, highlight=False, soft_wrap=False)


def print_json(data: Any) -> None:
    """``data`` as JSON that every parser reads (:func:`~sessionstore.sql.codec.dumps_strict`:
    a non-finite float a salvaged cell holds as ``null``)."""
    typer.echo(dumps_strict(data, indent=2))


def note(message: str) -> None:
    """A status line for humans: on stderr, so stdout stays the data."""
    typer.echo(message, err=True)


def print_error(message: str) -> None:
    typer.secho(f"error: {' '.join(message.split())}", fg="red", err=True)


def printable(text: str | bytes | None) -> str:
    if isinstance(text, bytes):  # a text cell stored as a BLOB
        text = text_of_blob(text)
    return _LINE_SEPARATORS.sub("\n", _CONTROL_CHARACTERS.sub("", text or ""))


# Characters that can hide, move or reorder what follows them on a terminal: controls (Cc),
# invisible format characters such as bidi overrides and zero widths (Cf), line and paragraph
# separators (Zl, Zp).
_HIDDEN_CATEGORIES: Final = frozenset({"Cc", "Cf", "Zl", "Zp"})
_SIMPLE_ESCAPES: Final = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}
_ESCAPE_OF: Final = {meaning: "\\" + letter for letter, meaning in _SIMPLE_ESCAPES.items()}


def shown_id(session_id: str | bytes) -> str:
    """A session id as the terminal shows it: exactly, or with what would not show escaped.
    An id a salvaged SQLite file holds as a BLOB shows as its text (``cell_text``).

    Ids come from gateways and callers, not from us: one holding a newline, an escape sequence
    or a bidi override would break a table's row, drive the terminal or display as another id.
    Such an id is printed with Python's escapes (``\\n``, ``\\x1b``, ``\\u202e``) and its
    backslashes doubled, so the printed form names one id only; a REF given in that form
    resolves back to it (:func:`sessionstore.cli._common.resolve_ref`). An ordinary id is
    printed as it is, backslashes included.
    """
    session_id = cell_text(session_id)
    if not any(unicodedata.category(char) in _HIDDEN_CATEGORIES for char in session_id):
        return session_id
    return "".join(_escaped(char) for char in session_id)


def _escaped(char: str) -> str:
    if char in _ESCAPE_OF:
        return _ESCAPE_OF[char]
    if unicodedata.category(char) not in _HIDDEN_CATEGORIES:
        return char
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else (
        f"\\U{code:08x}"
    )


_ESCAPE: Final = re.compile(r"\\(?:x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[ntr\\])")


def unescaped_id(ref: str) -> str | None:
    """The id a REF names when it was copied from :func:`shown_id`'s escaped form, else None."""
    if "\\" not in ref:
        return None
    decoded = _ESCAPE.sub(_decode_escape, ref)
    return None if decoded == ref else decoded


def _decode_escape(match: re.Match[str]) -> str:
    escape = match.group()[1:]
    if escape in _SIMPLE_ESCAPES:
        return _SIMPLE_ESCAPES[escape]
    code = int(escape[1:], 16)
    # No stored id holds a lone surrogate or a code point past Unicode: leave such text as typed.
    return match.group() if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF else chr(code)


NO_TIME: Final = "?"
"""What a clock that is no time prints as: text, or a number no date holds, in a REAL column
of a salvaged SQLite file (SQLite keeps what it was given). One such cell, never the command."""


def _moment(timestamp: Any) -> datetime | None:
    try:
        return datetime.fromtimestamp(float(timestamp))
    except (TypeError, ValueError, OverflowError, OSError):
        return None


def when(timestamp: float | None) -> str:
    if timestamp is None:
        return ""
    moment = _moment(timestamp)
    return NO_TIME if moment is None else moment.strftime("%Y-%m-%d %H:%M")


def day(timestamp: float) -> str:
    moment = _moment(timestamp)
    return NO_TIME if moment is None else moment.date().isoformat()


def count(value: object, *, grouped: bool = True) -> str:
    """A stored count (messages, tokens) as the terminal shows it: an integer (with thousands
    separators when ``grouped``), NULL as 0; what a damaged file holds there instead (text, a
    BLOB, a fraction) as its text, where a format for numbers stopped the verb."""
    if value is None:
        value = 0
    if type(value) is float and value.is_integer():
        value = int(value)
    if type(value) is int:
        return f"{value:,}" if grouped else str(value)
    return printable(cell_text(value))


def money(value: object) -> str:
    """A stored cost in dollars, four decimals; anything else a damaged file holds there as its
    text (:func:`count`)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"${value:.4f}"
    return printable(cell_text(value))


def dim(text: str) -> Text:
    from rich.text import Text

    return Text(text, style="dim")


def bar(value: float, largest: float) -> Text:
    from rich.text import Text

    if largest <= 0 or value <= 0:
        return Text("")
    cells = max(1, round(BAR_WIDTH * value / largest))
    return Text("█" * cells, style="cyan")


def highlighted(snippet: str) -> Text:
    """A snippet with its >>>match<<< markers turned into highlighting."""
    from rich.text import Text

    text = Text()
    rest = printable(snippet).replace("\n", " ")
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


def _bar_columns() -> tuple[ProgressColumn, ...]:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    return (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )


@contextlib.contextmanager
def progress(description: str, total: int | None) -> Iterator[Callable[[int], None] | None]:
    """A progress bar on a terminal's stderr; ``None`` (stay quiet) when piped."""
    err_console = console(stderr=True)
    if not err_console.is_terminal:
        yield None
        return
    from rich.progress import Progress

    with Progress(*_bar_columns(), console=err_console, transient=True) as bar_:
        task = bar_.add_task(description, total=total)
        yield lambda steps: bar_.advance(task, steps)


@contextlib.contextmanager
def stages(description: str) -> Iterator[Callable[[str, int, int], None] | None]:
    """A progress bar over named stages on a terminal's stderr, for work that reports each
    stage as it starts (``(name, number, of)``, number from 1); ``None`` (quiet) when piped."""
    err_console = console(stderr=True)
    if not err_console.is_terminal:
        yield None
        return
    from rich.progress import Progress

    with Progress(*_bar_columns(), console=err_console, transient=True) as bar_:
        task = bar_.add_task(description, total=None)

        def stage(name: str, number: int, total: int) -> None:
            # Drawn now, not at the next 10 Hz tick: a quick step would otherwise never be
            # seen (a fresh file's first revisions run in less than a tick).
            bar_.update(task, description=f"{description}: {name}", completed=number - 1,
                        total=total, refresh=True)  # fmt: skip

        yield stage


@contextlib.contextmanager
def spinner(description: str) -> Iterator[None]:
    err_console = console(stderr=True)
    if not err_console.is_terminal:
        yield
        return
    with err_console.status(description):
        yield
