"""What every verb shares: its error mapping, the global options, and how a store is opened.

Policy in one place: a verb that reads never migrates (a store not at the current schema is
refused with the command that upgrades it), reading verbs never create a file, and every
exception becomes one line on stderr with exit status 1 (2 for usage errors).

What opens a store (SQLAlchemy, the schema, the repository) is imported by the functions that
open one: the command tree, its options and ``--help`` are built without it.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Annotated, Any, ParamSpec

import typer

from ..errors import SessionStoreError
from ..sql.codec import cell_text
from ..storage.private_files import PRIVATE_MODE
from ._output import print_error, shown_id, silence_broken_pipe, unescaped_id

if TYPE_CHECKING:
    from sqlalchemy.engine import URL, Engine
    from sqlalchemy.exc import DBAPIError

    from ..schema import migrate
    from ..storage.store import Store

P = ParamSpec("P")

EXIT_FAILURE = 1
EXIT_USAGE = 2
AMBIGUOUS_SHOWN = 5

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
SourceOption = Annotated[
    list[str] | None,
    typer.Option(
        "--source",
        metavar="SOURCE",
        help="Only sessions of this source: cli, telegram... (repeatable: any of them).",
    ),
]
"""``--source`` of every verb that picks sessions (search, sessions list, export, prune): one
definition, so each reads, repeats and documents it alike. Hand the value to the library
through :func:`sources`."""
ExcludeSourceOption = Annotated[
    list[str] | None,
    typer.Option("--exclude-source", metavar="SOURCE", help="Leave out this source (repeatable)."),
]


def sources(option: list[str] | None) -> list[str] | None:
    """A repeatable source option as the library takes it: None (no filter) when not given."""
    return option or None


class CliError(Exception):
    """A failure to report as one line, with the exit status to use."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class Declined(CliError):
    """The answer to a question was no: said plainly (not as an error), exit status 1."""


class UsageProblem(CliError):
    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_USAGE)


@dataclass
class CliState:
    url_option: str | None
    debug: bool


def cli_state(ctx: typer.Context) -> CliState:
    found = ctx.find_root().obj
    if not isinstance(found, CliState):
        # A verb invoked without the root callback (only possible from Python): defaults.
        found = CliState(None, False)
    return found


def describe_error(exc: BaseException) -> str:
    """One line that says what went wrong, for any exception a verb can raise."""
    from sqlalchemy.exc import DBAPIError

    if isinstance(exc, DBAPIError):
        translated = _translate_dbapi_error(exc)
        return translated or f"database error: {_first_line(str(exc.orig))}"
    if isinstance(exc, UnicodeDecodeError):
        return f"the input is not UTF-8 text ({exc.reason} at byte {exc.start})"
    if isinstance(exc, OSError):
        if exc.filename is not None and exc.strerror:
            return f"{exc.strerror}: {exc.filename}"
        return _first_line(str(exc)) or type(exc).__name__
    expected = (SessionStoreError, ValueError, TypeError, LookupError)
    if isinstance(exc, expected) or _is_alembic_error(exc):
        return _first_line(str(exc)) or type(exc).__name__
    return f"unexpected {type(exc).__name__}: {_first_line(str(exc))} (--debug shows where)"


def _is_alembic_error(exc: BaseException) -> bool:
    """An Alembic ``CommandError`` (an unknown revision, say), without importing Alembic for
    verbs that never migrate: if it was never imported, nothing raised one."""
    alembic_errors = sys.modules.get("alembic.util.exc")
    command_error = getattr(alembic_errors, "CommandError", None)
    return isinstance(command_error, type) and isinstance(exc, command_error)


def _translate_dbapi_error(exc: DBAPIError) -> str | None:
    from ..dialects import translate_any_error

    translated = translate_any_error(exc)
    return None if translated is None else _first_line(str(translated))


def _first_line(text: str) -> str:
    return " ".join(text.strip().splitlines()[:1]).strip()


UrlOption = Annotated[
    str | None,
    typer.Option(
        "--url",
        help="The store: a database URL (sqlite:///path, postgresql://...) or a SQLite file "
        "path. Default: $SESSIONSTORE_URL, else $HERMES_HOME/state.db.",
        show_default=False,
        metavar="URL",
    ),
]


def report_errors(command: Callable[P, None]) -> Callable[P, None]:
    """Turn any exception of a verb into one line on stderr and exit status 1 (or 2).

    Also gives the verb a ``--url`` option of its own (``sessions list --url x.db`` as well as
    ``--url x.db sessions list``): the wrapper takes it out of the arguments and puts it into
    the shared state, so verbs only ever read :func:`cli_state`.

    With ``--debug`` the exception propagates and Typer prints the traceback.
    """

    @functools.wraps(command)
    def run(*args: P.args, **kwargs: P.kwargs) -> None:
        verb_url = kwargs.pop("url", None)
        # Typer hands over its own Context class, not always ``typer.Context``: duck-typed.
        ctx: Any = kwargs.get("ctx")
        has_context = hasattr(ctx, "find_root")
        if has_context and verb_url is not None:
            ctx.find_root().obj = replace(cli_state(ctx), url_option=str(verb_url))
        debug = has_context and cli_state(ctx).debug
        try:
            command(*args, **kwargs)
        except (typer.Exit, typer.Abort, typer.BadParameter, KeyboardInterrupt):
            raise
        except BrokenPipeError:
            silence_broken_pipe()
            raise typer.Exit(0) from None
        except Declined as exc:
            typer.echo(str(exc), err=True)
            raise typer.Exit(exc.exit_code) from None
        except CliError as exc:
            if debug:
                raise
            print_error(str(exc))
            raise typer.Exit(exc.exit_code) from None
        except Exception as exc:
            if debug:
                raise
            print_error(describe_error(exc))
            raise typer.Exit(EXIT_FAILURE) from None

    signature = inspect.signature(command, eval_str=True)
    url_parameter = inspect.Parameter(
        "url", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=UrlOption
    )
    run.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[*signature.parameters.values(), url_parameter]
    )
    run.__annotations__ = {**command.__annotations__, "url": UrlOption}
    return run


def stdin_is_interactive() -> bool:
    return sys.stdin is not None and sys.stdin.isatty()


def confirm(question: str, *, refusal: str, declined: str = "nothing deleted") -> None:
    """Ask on a terminal (no unless answered yes); refuse outright when nobody can answer.

    ``refusal`` says what is refused; the message adds why and the flag that skips the question.
    ``declined`` is the error when the answer is no.
    """
    # Looked up on the package (``sessionstore.cli._stdin_is_interactive``): the one seam
    # through which a test or an embedding program says whether someone can answer.
    package = sys.modules.get(__package__ or "")
    interactive = getattr(package, "_stdin_is_interactive", stdin_is_interactive)
    if not interactive():
        raise CliError(f"{refusal}: standard input is not a terminal; pass --yes")
    if not typer.confirm(question, default=False):
        raise Declined(declined)


# -- opening stores --------------------------------------------------------------------------
def store_url(options: CliState) -> URL:
    """The store's URL: ``--url``, else the environment's rules; a plain path is a SQLite file."""
    from ..dialects import database_file
    from ..errors import StoreLocationError
    from ..storage.config import URL_ENV_VAR, store_location

    if options.url_option is not None and not options.url_option.strip():
        raise UsageProblem(
            "--url is empty: give a database URL or a SQLite file path (or leave --url out "
            "for the default store)"
        )
    try:
        url = store_location(options.url_option)
    except StoreLocationError as exc:
        raise UsageProblem(str(exc)) from None
    if url.get_backend_name() == "sqlite" and database_file(url) is None:
        # sqlite:// (or sqlite:///, :memory:) is SQLAlchemy's in-memory database: every
        # command would start from an empty store and lose what it wrote at exit.
        given = (
            f"--url {options.url_option!r}"
            if options.url_option is not None
            else f"{URL_ENV_VAR}={os.environ.get(URL_ENV_VAR, '')!r}"
        )
        raise UsageProblem(
            f"{given} names an in-memory SQLite database, which "
            "is gone when the command ends: give a file, e.g. sqlite:////abs/path/state.db "
            "or a plain path"
        )
    return url


def shown(url: URL) -> str:
    from ..dialects import database_file

    path = database_file(url)
    return str(path) if path is not None else url.render_as_string(hide_password=True)


def full(url: URL) -> str:
    return url.render_as_string(hide_password=False)


def hint(url: URL, *verb: str) -> str:
    """The exact command to suggest for this store, in backquotes."""
    from ..storage.command_hints import cli_command

    return f"`{cli_command(url, *verb)}`"


def require_existing(url: URL) -> None:
    """Reading verbs never create a database: a missing file is an error, not an empty store."""
    from ..dialects import database_file
    from ..storage.config import is_default_store

    path = database_file(url)
    if path is None:
        return
    if not path.exists():
        if not path.parent.is_dir() and not is_default_store(url):
            missing = path.parent
            raise CliError(f"no session store at {path}: its directory {missing} does not exist")
        raise CliError(f"no session store at {path}: create it with {hint(url, 'db', 'upgrade')}")
    if path.is_dir():
        raise CliError(f"{path} is a directory, not a session store file")
    if not os.access(path, os.R_OK):
        raise CliError(f"cannot read {path}: permission denied")


def position(status: migrate.Status) -> str:
    """Where a store's schema stands, for a message: "revision 0042 (Hermes schema 31)", or
    "empty (no schema yet)" for a zero-byte file or a database without tables."""
    if status.revision is None and status.schema_version is None:
        return "empty (no schema yet)"
    return f"revision {status.revision or 'none'} (Hermes schema {status.schema_version or 'none'})"


def upgrade_blocked(url: URL) -> str | None:
    """Why `db upgrade` cannot work on this store here (a file this user cannot write), with
    what to change, or None: a message never suggests a command that would refuse."""
    from ..dialects import dialect_for_url

    why = dialect_for_url(url).why_read_only(url)
    if why is None:
        return None
    return f"it cannot be upgraded here: {why}; then run {hint(url, 'db', 'upgrade')}"


def outdated(status: migrate.Status, url: URL) -> CliError:
    """The refusal of a store that is not current: with the upgrade command when the upgrade
    can work, else the reason it cannot."""
    from ..schema import migrate

    refusal = migrate.upgrade_refusal(status)
    if refusal is not None:
        return CliError(refusal)
    where = position(status)
    at = where if where.startswith("empty") else f"at {where}"
    blocked = upgrade_blocked(url)
    remedy = blocked if blocked is not None else f"run {hint(url, 'db', 'upgrade')} first"
    return CliError(f"the store at {shown(url)} is {at}, not the current {status.head}: {remedy}")


@contextlib.contextmanager
def open_store(options: CliState, *, write: bool = False) -> Iterator[Store]:
    """The store, checked to be at head first, read-only unless the verb writes."""
    from ..schema import migrate
    from ..search.registry import detach_unloadable
    from ..storage.store import Store

    url = store_url(options)
    require_existing(url)
    if write:
        # One engine: the check runs on it before the journal mode is switched, so refusing
        # a legacy file leaves it as it was.
        def refuse_unless_current(engine: Engine) -> None:
            status = migrate.status(engine)
            if not status.up_to_date:
                raise outdated(status, url)
            detach_unloadable(engine)  # or a Hermes's CJK triggers would fail every write

        store = Store.open(url, prepare=refuse_unless_current)
    else:
        store = _open_for_reading(url)
    try:
        yield store
    finally:
        store.close()


def _open_for_reading(url: URL) -> Store:
    """A read-only store that holds what the reading verbs read, else the refusal."""
    from ..schema import legacy, migrate
    from ..schema.readable import check_readable
    from ..storage.command_hints import cli_command
    from ..storage.store import Store

    store = Store.open(url, read_only=True)
    try:
        # A reading verb reads a store that has what it reads (a current Hermes file, a newer
        # one) as it is; only what it cannot read sends the user to `db upgrade`.
        problem = check_readable(store, upgrade_command=cli_command(url, "db", "upgrade"))
        if problem is not None:
            status = store.read(migrate.status_of)
            if legacy.is_too_new(status.schema_version):
                raise CliError(problem)
            raise outdated(status, url)
    except BaseException:
        store.close()
        raise
    return store


def create_if_new(options: CliState, mode: int = PRIVATE_MODE) -> bool:
    """Create the store at the current schema when there is none yet; True if it did.

    "None yet" is a SQLite file that is missing or empty, or a database without a table of
    ours or Hermes's: nothing that anyone wrote can be changed by this. A new SQLite file is
    created exclusively with ``mode``: the store is about to hold a copy of data whose source
    had that mode (``storage.private_files``).
    """
    from ..dialects import database_file
    from ..schema import legacy, migrate
    from ..storage.config import require_directory
    from ..storage.engine import create_store_engine
    from ..storage.private_files import create_empty_file
    from ..storage.store import Store

    url = store_url(options)
    path = database_file(url)
    if path is not None:
        if path.is_dir() or (path.exists() and path.stat().st_size > 0):
            return False
        require_directory(url)
        if not os.path.lexists(path):
            with contextlib.suppress(OSError):  # what cannot be created, SQLite reports
                create_empty_file(path, mode)
        migrate.upgrade(full(url))
        return True
    engine = create_store_engine(url, set_journal_mode=False)
    with contextlib.closing(Store(engine, owns_engine=True)) as probe:
        if not probe.read(legacy.read_state).is_empty:
            return False
        migrate.upgrade(engine)  # on the probe's engine: one engine for the whole check
    return True


def resolve_ref(store: Store, ref: str) -> str:
    """A session id from an id, a unique id prefix or a title (newest of its lineage).

    A title matches exactly first, then ignoring case when only one title fits.
    """
    from ..sessions.repository import SessionRepository

    repository = SessionRepository(store)
    found = repository.resolve_session_id(ref) or repository.resolve_session_by_title(ref)
    if found is None and ref.endswith(SHORTENED_MARK):
        # Pasted from a listing, ellipsis and all.
        found = repository.resolve_session_id(ref.removesuffix(SHORTENED_MARK))
    if found is not None:
        return found
    # Titles are typed from memory: "deploy bot" finds "Deploy Bot" when that is the only one.
    spelled = repository.titles_ignoring_case(ref)
    if len(spelled) == 1:
        found = repository.resolve_session_by_title(spelled[0])
        if found is not None:
            return found
    elif len(spelled) > 1:
        listed = ", ".join(repr(title) for title in spelled[:AMBIGUOUS_SHOWN])
        raise CliError(f"{ref!r} is ambiguous: several titles differ from it only in case "
                       f"({listed}); give the exact title")
    prefix = ref
    # Copied from a listing that printed an unprintable id escaped (``shown_id``).
    decoded = unescaped_id(ref.removesuffix(SHORTENED_MARK))
    if decoded is not None:
        found = repository.resolve_session_id(decoded)
        if found is not None:
            return found
        prefix = decoded
    candidates = repository.session_ids_with_prefix(prefix, AMBIGUOUS_SHOWN + 1)
    if len(candidates) > 1:
        listed = ", ".join(shown_id(candidate) for candidate in candidates[:AMBIGUOUS_SHOWN])
        more = " ..." if len(candidates) > AMBIGUOUS_SHOWN else ""
        raise CliError(
            f"{ref!r} is ambiguous: it starts several session ids ({listed}{more}); "
            "give more characters"
        )
    raise CliError(f"no session matches {ref!r} (as an id, an id prefix or a title)")


SHORTENED_MARK = "…"
"""Ends an id the listing shortened to its unique prefix (a REF may keep it: it is dropped)."""


def short_ids(store: Store, ids: Sequence[str]) -> dict[str, str]:
    """Each id as a listing shows it: its shortest unique prefix, marked when shortened. Keyed
    by the ids as the records give them: an id a salvaged SQLite file holds as a BLOB comes as
    bytes, and is shortened and shown as its text."""
    from ..sessions.repository import SessionRepository

    texts = {session_id: cell_text(session_id) for session_id in ids}
    shortest = SessionRepository(store).short_ids(sorted(set(texts.values())))
    return {
        session_id: shown_id(shortest[text]) + ("" if shortest[text] == text else SHORTENED_MARK)
        for session_id, text in texts.items()
    }
