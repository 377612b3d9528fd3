"""The docs' programs forked from one process that imported their modules once.

``tests/docs/test_code_blocks.py`` runs every ``python`` block and every ``sessionstore`` (and
``alembic``) command of the docs as a reader would. A new interpreter for each re-imported
SQLAlchemy, Alembic and ``sessionstore`` (0.3-0.5 CPU s each, ~50 a run), which is not what the
docs are about: what a block or a command does is. :class:`ProgramServer` runs ``python
docs_programs.py SOCKET`` once: it imports those modules, opens nothing (no store, no SQLite
library chosen: ``sessionstore.dialects.sqlite_library.library`` decides in each program, from
that program's environment), freezes what the imports made and forks one process per request.

A request comes from a small client, ``python -I -S docs_programs.py --client SOCKET KIND
...`` (stdlib only, ~15 ms): the ``sessionstore`` and ``alembic`` shims :meth:`bin_dir` puts
first on the ``PATH`` exec it, as does its ``python`` shim for ``python -c CODE`` and ``python
-m MODULE`` (any other use of ``python`` is the interpreter itself), and a ``python`` block is
given to it as ``code``. It hands over
its standard streams, arguments, working directory and whole environment; the program (a
grandchild of the server: a middle process waits for it and answers) gets them all, runs
``sessionstore.cli:main`` / ``alembic.config:main`` as their console scripts do (``sys.argv``
the command's, ``sys.exit`` of what ``main`` returns), the code as ``python -c`` runs it
(``__main__``, ``sys.argv == ["-c", ...]``, the working directory first on ``sys.path``) or the
module as ``python -m`` does (``runpy``, ``__main__``, the working directory first), and ends
as a program does (``SystemExit``: ``atexit`` handlers, non-daemon threads waited for, buffers
flushed; an uncaught exception's traceback and status 1). The client exits with the program's
status, so ``bash -e``, ``||`` and pipes see it as before.

What is not run here is what other tests prove: that the console scripts start
(``tests/cli/test_verbs.py::test_console_script_runs``, the pipe and usage tests of
``tests/cli/test_newcomer_path.py``) and that a fresh interpreter imports the package
(``tests/storage/test_opening.py``).

CPU: the programs are reaped by their middle process, each middle by the server before its
client is answered, the server by the test at :meth:`close`: every program's CPU is counted in
the test process's children, and until then in ``cpu_durations.UNREAPED_CPU`` (the server's
own and reaped children's, from ``/proc``), so each page's programs count in its test.
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

PROGRAM = str(Path(__file__).resolve())
ENTRY_POINTS = {"sessionstore": "sessionstore.cli:main", "alembic": "alembic.config:main"}
IMPORTS = (
    "sessionstore.cli", "sessionstore", "alembic.config", "alembic.command", "prefork",
    "sessionstore.api.session_db", "sessionstore.schema.adoption", "sessionstore.schema.readable",
    "sessionstore.storage.backups", "sessionstore.search.service", "sessionstore.cli._output",
    "sqlite3", "rich.console",
)  # fmt: skip
"""What the server imports before it forks, with ``prefork.CHAIN_IMPORTS`` (what an upgrade
of a SQLite file imports) and :data:`OPTIONAL_IMPORTS`: what the docs' programs import, measured
(a ``sys.modules`` diff at each program's exit, one run of the docs: ~250 modules that 15 or
more of its ~50 programs imported each, 0.3-0.6 CPU s a program, the store's modules, the
migration chain's, SQLAlchemy's ORM and SQLite dialect, Rich, Pydantic through Typer). None of
them reads the environment, a terminal or the SQLite library's choice when imported (checked:
no module-level ``environ``/``getenv``/home lookup; ``sqlite_library.library`` is still
uncalled after the imports), so each program still decides those from its own environment.
The PostgreSQL driver is left to the few programs that use it."""
OPTIONAL_IMPORTS = ("pysqlite3.dbapi2?", "typer._adapters?")
"""Imported when installed (the "?" of ``prefork.import_modules``): pysqlite3 (the SQLite
library where the system's is vulnerable) and Typer's Pydantic adapters (newer Typers; what a
command's arguments are parsed through)."""
_MAX_REQUEST = 1 << 20


def available() -> bool:
    """Whether programs can be forked here (a fork, Unix sockets that pass descriptors)."""
    return hasattr(os, "fork") and hasattr(socket, "send_fds") and hasattr(socket, "AF_UNIX")


# --- the test's side -------------------------------------------------------------------------


class ProgramServer:
    """The server (``env``: its environment, each program gets its client's), its socket, and a
    folder of shims named like the console scripts. A context manager."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        self._folder = Path(tempfile.mkdtemp(prefix="ss-docs-"))  # short: a socket's path is
        self.socket_path = str(self._folder / "s")  # at most ~100 bytes
        self._process = subprocess.Popen(
            [sys.executable, PROGRAM, self.socket_path], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, env=env, text=True,
        )  # fmt: skip
        assert self._process.stdout is not None
        said = self._process.stdout.readline()
        if said.strip() != "ready":
            self.close()
            raise RuntimeError(f"the docs' program server did not start (said {said!r})")
        self.bin_dir = self._folder / "bin"
        self.bin_dir.mkdir()
        for name in ENTRY_POINTS:
            shim = self.bin_dir / name
            shim.write_text(
                "#!/bin/sh\n"
                f'exec "{sys.executable}" -I -S "{PROGRAM}" --client "{self.socket_path}" '
                f'entry "{name}" "$0" "$@"\n'
            )
            shim.chmod(0o755)
        # ``python -c CODE`` and ``python -m MODULE`` (a bash block's, a command substitution's)
        # are forked too; any other use of ``python`` is the interpreter itself.
        python = self.bin_dir / "python"
        python.write_text(
            "#!/bin/sh\n"
            'if [ "$#" -ge 2 ] && { [ "$1" = -c ] || [ "$1" = -m ]; }; then\n'
            f'  exec "{sys.executable}" -I -S "{PROGRAM}" --client "{self.socket_path}" '
            'python "$@"\n'
            "fi\n"
            f'exec "{sys.executable}" "$@"\n'
        )
        python.chmod(0o755)
        self._counted = sys.modules.get("cpu_durations")
        if self._counted is not None:
            self._counted.UNREAPED_CPU.append(self.unreaped_cpu_s)

    def unreaped_cpu_s(self) -> float:
        """The server's CPU and that of the programs it reaped, until the test reaps it
        (``cpu_durations.UNREAPED_CPU``): so each page's programs count in its own test."""
        if self._process.returncode is not None:
            return 0.0
        try:
            fields = Path(f"/proc/{self._process.pid}/stat").read_text().rpartition(")")[2]
        except OSError:
            return 0.0
        ticks = sum(int(value) for value in fields.split()[11:15])  # utime stime cutime cstime
        return ticks / os.sysconf("SC_CLK_TCK")

    def python_command(self, code: str) -> list[str]:
        """The command that runs ``code`` as ``python -c code`` would, forked from the server."""
        return [sys.executable, "-I", "-S", PROGRAM, "--client", self.socket_path, "code", code]

    def close(self) -> None:
        """Ends the server once its programs ended (stdin closed), and waits for it."""
        if self._process.stdin is not None:
            self._process.stdin.close()
        try:
            self._process.wait(timeout=300)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        if self._process.stdout is not None:
            self._process.stdout.close()
        if getattr(self, "_counted", None) is not None:
            self._counted.UNREAPED_CPU.remove(self.unreaped_cpu_s)
        for path in sorted(self._folder.rglob("*"), reverse=True):
            path.rmdir() if path.is_dir() else path.unlink()
        self._folder.rmdir()

    def __enter__(self) -> ProgramServer:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


# --- the client (stdlib only: it runs with -I -S) --------------------------------------------


def client(socket_path: str, kind: str, arguments: list[str]) -> int:
    request = {"kind": kind, "arguments": arguments, "cwd": os.getcwd(), "env": dict(os.environ)}
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as connection:
        connection.connect(socket_path)
        socket.send_fds(connection, [json.dumps(request).encode()], [0, 1, 2])
        answer = connection.recv(4096)
    if not answer:
        print("docs_programs: the server ended before the program did", file=sys.stderr)
        return 70
    return int(json.loads(answer)["status"])


# --- the server's side -----------------------------------------------------------------------


def _program(request: dict[str, object], fds: list[int]) -> None:
    """In the forked program: the client's streams, directory and environment, then the program;
    never returns (``SystemExit``, as a program ends)."""
    import importlib
    import random
    import runpy
    import types

    from prefork import end_as_program  # imported by the server (IMPORTS), not the client

    for number, fd in enumerate(fds):
        os.dup2(fd, number)
        os.close(fd)
    os.chdir(str(request["cwd"]))
    environment = request["env"]
    assert isinstance(environment, dict)
    os.environ.clear()
    os.environ.update(environment)
    random.seed()
    arguments = list(request["arguments"])  # type: ignore[call-overload]

    def body() -> object:
        if request["kind"] == "code":  # a python block: as ``python -c CODE``
            arguments[:0] = ["-c"]
        if request["kind"] in ("code", "python") and arguments[0] == "-c":
            sys.argv = ["-c", *arguments[2:]]
            sys.path[0] = ""
            main = types.ModuleType("__main__")
            sys.modules["__main__"] = main
            exec(compile(arguments[1], "<string>", "exec"), main.__dict__)
            return 0
        if request["kind"] == "python":  # ``python -m MODULE ARGS``: runpy sets argv[0]
            sys.argv = ["-m", *arguments[2:]]
            sys.path[0] = os.getcwd()
            runpy.run_module(arguments[1], run_name="__main__", alter_sys=True)
            return 0
        name, argv0, *rest = arguments
        module_name, _, function = ENTRY_POINTS[name].partition(":")
        sys.argv = [argv0, *rest]
        sys.path[0] = os.path.dirname(argv0)
        return getattr(importlib.import_module(module_name), function)()

    end_as_program(body)


def serve(socket_path: str) -> int:
    import gc
    import threading

    import prefork

    prefork.import_modules((*IMPORTS, *prefork.CHAIN_IMPORTS, *OPTIONAL_IMPORTS))
    if "sessionstore.dialects.sqlite_library" in sys.modules:
        from sessionstore.dialects.sqlite_library import library

        if library.cache_info().currsize:
            print("an import chose the SQLite library: each program chooses its own", flush=True)
            return 3
    if threading.active_count() != 1:
        print("an import left a thread running: a fork copies only one", flush=True)
        return 3
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(socket_path)
    listener.listen(16)
    gc.freeze()
    print("ready", flush=True)
    # Each request's middle process, by a pidfd that turns readable when it ends: it is reaped
    # then, and its status (the program's) answered, so a program's CPU is this server's by the
    # time its client exits.
    running: dict[int, tuple[int, socket.socket]] = {}
    open_for_requests = True
    while open_for_requests or running:
        watched = [*running, *((listener, sys.stdin) if open_for_requests else ())]
        readable, _, _ = select.select(watched, [], [])
        for pidfd in [fd for fd in readable if isinstance(fd, int)]:
            middle, connection = running.pop(pidfd)
            os.close(pidfd)
            _, status = os.waitpid(middle, 0)
            with connection:
                connection.send(json.dumps({"status": os.waitstatus_to_exitcode(status)}).encode())
        if sys.stdin in readable and not sys.stdin.read(1):
            open_for_requests = False  # the test closed stdin: no more requests
        if listener not in readable or not open_for_requests:
            continue
        connection, _ = listener.accept()
        message, fds, _, _ = socket.recv_fds(connection, _MAX_REQUEST, 3)
        sys.stdout.flush()
        sys.stderr.flush()
        middle = os.fork()
        if middle == 0:  # waits for the program; ends with its status
            listener.close()
            connection.close()
            for pidfd, (_, other) in running.items():
                os.close(pidfd)
                other.close()
            program = os.fork()
            if program == 0:
                _program(json.loads(message), fds)  # raises SystemExit
            _, status = os.waitpid(program, 0)
            code = os.waitstatus_to_exitcode(status)
            os._exit(code if code >= 0 else 128 - code)
        for fd in fds:
            os.close(fd)
        running[os.pidfd_open(middle)] = (middle, connection)
    listener.close()
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "--client":
        sys.exit(client(sys.argv[2], sys.argv[3], sys.argv[4:]))
    sys.exit(serve(sys.argv[1]))
