"""Programs forked from a process that imported their modules once, as children of the test.

Many fault and concurrency tests start a worker program again and again: eight appenders and
two readers of a lock storm, two appenders killed eight times over, a reader in a new process.
A new interpreter re-imports ``sessionstore`` and SQLAlchemy each time (0.25-0.7 CPU s, the
load deciding), which is not what such a test is about: its point is separate processes, with
their own SQLite file locks and connections, killed by the operating system. :class:`ForkServer`
runs ``python prefork.py MODULE...`` once: it imports the modules (and runs a ``prime`` step,
if one is given: a new store built and closed, say), freezes what that made
(``gc.freeze``: a child's collections do not walk it), keeps no store open, and forks a process
per request that runs ``module:function(*args)`` as a program would run (its own pid, file
locks and connections, ``random`` seeded anew, the given standard streams, ``sys.argv``, an
exit through ``SystemExit`` with ``atexit`` handlers and buffers flushed, or status 1 and the
traceback on stderr).

The program is the test's own child, as ``subprocess.Popen``'s is: the server forks twice and
lets the middle process exit, and the test process is the orphan's "child subreaper" for the
moment of the request (Linux's ``PR_SET_CHILD_SUBREAPER``, set around each request only), so
the kernel hands the program to it. The test then waits for it, kills it with SIGKILL (its pid
cannot be reused before the test reaps it) and counts its CPU (``os.times``' children) like a
``Popen``'s: :class:`Forked` offers the part of ``Popen`` the tests use. Where the kernel or
the platform has no subreaper, :func:`available` is False and callers start programs as before.

Like ``tests/support/real_hermes_server.py``: the forks are made where no store is open, so a
program inherits no connection (``docs/concurrency.md``), only what a module keeps.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib
import json
import os
import random
import select
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any, NoReturn

PROGRAM = str(Path(__file__).resolve())
PIPE = subprocess.PIPE
DEVNULL = subprocess.DEVNULL

CHAIN_IMPORTS = (
    "alembic.config", "alembic.command", "logging.config", "sessionstore",
    "sessionstore.schema.migrate", "sessionstore.schema.models", "sessionstore.schema.new_store",
    "sessionstore.dialects.sqlite", "sessionstore.dialects.sqlite_image",
    "sessionstore.search.sqlite", "sessionstore._migrations.search_ddl",
    "sessionstore._migrations.helpers", "sessionstore._migrations.chain_state",
    "sessionstore._migrations.hermes_v23_v31_orders", "sessionstore._migrations.hermes_v30_v31_ddl",
    "sessionstore._migrations.model_usage_ddl", "sessionstore._migrations.revision_0044_ddl",
    "sessionstore._migrations.revision_0045_ddl",
)  # fmt: skip
"""What an upgrade of a SQLite file to head imports, its lazy imports included (Alembic's
config and logging, the ORM models, the dialect, the chain's helper modules): a server whose
programs upgrade or open stores imports them once, so that no fork imports them again."""

_PR_SET_CHILD_SUBREAPER = 36
_MAX_FDS = 3
_ADOPTING = threading.Lock()
"""Held while the process is a subreaper for one request. The flag is the process's, not a
server's: two servers asked from two threads at once would let one request's turning it off
orphan the other's program to init, where the test could no longer wait for it."""


# --- the test's side -------------------------------------------------------------------------


def _prctl() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl
    except (OSError, AttributeError):
        return None


def _set_subreaper(on: bool) -> bool:
    prctl = _prctl()
    return prctl is not None and prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0


def available() -> bool:
    """Whether this process can adopt the programs (Linux, fork, a subreaper allowed)."""
    return hasattr(os, "fork") and hasattr(socket, "send_fds") and _set_subreaper(False)


class Forked:
    """A forked program, the test's child: the part of ``subprocess.Popen`` the tests use."""

    def __init__(
        self, pid: int, args: list[str], stdin: IO[Any] | None, stdout: IO[Any] | None,
        stderr: IO[Any] | None,
    ) -> None:  # fmt: skip
        self.pid = pid
        self.args = args
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is not None:
            return self.returncode
        if timeout is None:
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
            return self.returncode
        # A pidfd turns readable when the process ends: no polling loop.
        pidfd = os.pidfd_open(self.pid)
        try:
            readable, _, _ = select.select([pidfd], [], [], max(timeout, 0.0))
        finally:
            os.close(pidfd)
        if not readable or self.poll() is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode  # type: ignore[return-value]  # set by poll

    def send_signal(self, signal_number: int) -> None:
        # Not reaped yet (returncode None): the pid is still this program's, even if it ended.
        if self.poll() is None:
            os.kill(self.pid, signal_number)

    def kill(self) -> None:
        self.send_signal(9)

    def terminate(self) -> None:
        self.send_signal(15)

    def communicate(self, timeout: float | None = None) -> tuple[Any, Any]:
        """Read stdout and stderr to their ends (those that are pipes), then wait."""
        outputs: dict[str, Any] = {}

        def drain(name: str, stream: IO[Any]) -> None:
            with stream:
                outputs[name] = stream.read()

        readers = [
            threading.Thread(target=drain, args=(name, stream), daemon=True)
            for name, stream in (("out", self.stdout), ("err", self.stderr))
            if stream is not None
        ]
        if self.stdin is not None:
            self.stdin.close()
        deadline = None if timeout is None else time.monotonic() + timeout
        for reader in readers:
            reader.start()
        for reader in readers:
            reader.join(None if deadline is None else max(deadline - time.monotonic(), 0.0))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        self.wait(None if deadline is None else max(deadline - time.monotonic(), 0.0))
        return outputs.get("out"), outputs.get("err")

    def __enter__(self) -> Forked:
        return self

    def __exit__(self, *_exc: object) -> None:
        for stream in (self.stdin, self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        self.wait()


class ForkServer:
    """``python prefork.py MODULE...`` with ``env`` and ``cwd``; :meth:`start` forks a program.

    A context manager; :meth:`close` ends the server (its CPU, and that of the middle
    processes it reaped, is counted once the test process reaps it, here)."""

    def __init__(
        self, imports: Sequence[str], *, env: dict[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None, prime: str | None = None,
    ) -> None:  # fmt: skip
        """``imports``: module names (:func:`import_modules`).
        ``prime``: a ``module:function`` the server calls once after the imports, before
        any fork (it must leave no store open, and no thread running)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._socket = ours
        try:
            self._process = subprocess.Popen(
                [sys.executable, PROGRAM, str(theirs.fileno()), prime or "-", *imports],
                pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, env=env, cwd=cwd,
            )  # fmt: skip
        finally:
            theirs.close()
        answer = self._socket.recv(4096)
        if answer != b"ready":
            self.close()
            raise RuntimeError(f"the fork server did not start (said {answer!r})")

    def start(
        self, target: str, args: Sequence[str] = (), *, stdin: int | None = None,
        stdout: int | None = None, stderr: int | str | os.PathLike[str] | None = None,
        text: bool = True,
    ) -> Forked:  # fmt: skip
        """Fork a program running ``target`` (``module:function``) with ``args``. ``stdin`` and
        ``stdout``: ``PIPE``, ``DEVNULL`` or None (the server's: the test's own); ``stderr``:
        also a file path (written from its start), or ``PIPE``."""
        mine: dict[str, IO[Any]] = {}
        theirs: dict[int, int] = {}
        try:
            for number, how in ((0, stdin), (1, stdout), (2, stderr)):
                if how is None:
                    continue
                if how == PIPE:
                    read_end, write_end = os.pipe()
                    ours, child = (write_end, read_end) if number == 0 else (read_end, write_end)
                    mode = ("w" if number == 0 else "r") + ("" if text else "b")
                    mine[str(number)] = open(ours, mode, encoding="utf-8" if text else None)  # noqa: SIM115
                    theirs[number] = child
                elif how == DEVNULL:
                    theirs[number] = os.open(os.devnull, os.O_RDWR)
                else:
                    theirs[number] = os.open(how, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            request = json.dumps({"target": target, "args": list(args), "fds": list(theirs)})
            with _ADOPTING:
                if not _set_subreaper(True):
                    raise RuntimeError("cannot adopt forked programs here (no subreaper)")
                try:
                    socket.send_fds(self._socket, [request.encode()], list(theirs.values()))
                    answer = self._socket.recv(4096)
                finally:
                    _set_subreaper(False)
        except BaseException:
            for stream in mine.values():
                stream.close()
            raise
        finally:
            for fd in theirs.values():
                os.close(fd)
        if not answer:
            raise RuntimeError("the fork server ended")
        pid = int(json.loads(answer)["pid"])
        return Forked(pid, [target, *args], mine.get("0"), mine.get("1"), mine.get("2"))

    def close(self) -> None:
        # The server ends at the end of its requests: a shutdown, not only a close, since a
        # process this one forks since (a test's own fork) holds a copy of the socket.
        with contextlib.suppress(OSError):
            self._socket.shutdown(socket.SHUT_RDWR)
        self._socket.close()
        try:
            self._process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()

    def __enter__(self) -> ForkServer:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def start(
    server: ForkServer | None, target: str, args: Sequence[str] = (), *,
    stdin: int | None = None, stdout: int | None = None, stderr: int | None = None,
) -> Forked | subprocess.Popen[str]:  # fmt: skip
    """``server.start(...)``, or without a server (:func:`available` False) the same program
    as a new interpreter, ``python prefork.py --run TARGET ARGS...`` (text streams)."""
    if server is not None:
        return server.start(target, args, stdin=stdin, stdout=stdout, stderr=stderr)
    return subprocess.Popen(
        [sys.executable, PROGRAM, "--run", target, *args], stdin=stdin, stdout=stdout,
        stderr=stderr, text=True,
    )  # fmt: skip


# --- the server's side ----------------------------------------------------------------------


def _streams(fds: dict[int, int]) -> None:
    """In the forked program: the standard streams it was given (stdin: nothing, if none)."""
    for number, fd in fds.items():
        os.dup2(fd, number)
        os.close(fd)
    if 0 not in fds:
        nothing = os.open(os.devnull, os.O_RDONLY)
        os.dup2(nothing, 0)
        os.close(nothing)


def _run(target: str, args: list[str]) -> None:
    """The program: a fresh seed, the target, its end as a program's; never returns."""
    random.seed()  # a separate program draws its own numbers
    module_name, _, function = target.partition(":")
    sys.argv = [module_name, *args]

    def body() -> None:
        getattr(importlib.import_module(module_name), function)(*args)

    end_as_program(body)


def end_as_program(body: Callable[[], object]) -> NoReturn:
    """Run a forked program's ``body`` and end as a program does (``SystemExit``: atexit
    handlers, buffers flushed): with what ``body`` returns as its status (None: 0), the code of
    a ``SystemExit`` it raised, or 1 and the traceback of anything else."""
    code: object = 0
    try:
        code = body()
    except SystemExit as exc:
        code = exc.code
    except BaseException:
        traceback.print_exc()
        code = 1
    raise SystemExit(code)


def import_modules(names: Sequence[str]) -> None:
    """Import ``names`` before serving; one ending in "?" only where it is installed (Typer's
    Pydantic adapters exist in newer Typers only, pysqlite3 where it has a wheel; the package
    runs at its lower bounds too, docs/getting-started.md)."""
    for name in names:
        try:
            importlib.import_module(name.removesuffix("?"))
        except ImportError:
            if not name.endswith("?"):
                raise


def serve(control_fd: int, prime: str, imports: Sequence[str]) -> int:
    control = socket.socket(fileno=control_fd)
    import_modules(imports)
    if prime != "-":
        module_name, _, function = prime.partition(":")
        getattr(importlib.import_module(module_name), function)()
    if threading.active_count() != 1:
        control.send(b"an import left a thread running: a fork copies only one")
        return 3
    gc.freeze()
    control.send(b"ready")
    while True:
        message, fds, _, _ = socket.recv_fds(control, 65536, _MAX_FDS)
        if not message:
            return 0
        request = json.loads(message)
        passed = dict(zip(request["fds"], fds, strict=True))
        pid_r, pid_w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        middle = os.fork()
        if middle == 0:
            try:
                program = os.fork()
            except BaseException:
                os._exit(1)
            if program == 0:
                os.close(pid_r)
                os.close(pid_w)
                control.close()
                _streams(passed)
                _run(request["target"], request["args"])  # raises SystemExit
            os.write(pid_w, str(program).encode())
            os._exit(0)  # the program is orphaned: the test process adopts it
        os.close(pid_w)
        for fd in fds:
            os.close(fd)
        os.waitpid(middle, 0)
        with os.fdopen(pid_r, "rb") as said:
            pid = said.read()
        control.send(json.dumps({"pid": int(pid)}).encode())


if __name__ == "__main__":
    if sys.argv[1] == "--run":  # a new interpreter running one program (``start``)
        _run(sys.argv[2], sys.argv[3:])
    sys.exit(serve(int(sys.argv[1]), sys.argv[2], sys.argv[3:]))
