"""The separate processes of ``tests/storage/test_concurrent_writers.py``: each an agent of its
own on one store, as worktree agents sharing one file are.

:func:`writer` runs as a program (``prefork.start``: forked from a process that imported
``sessionstore`` once, or a new interpreter where that cannot be had); :func:`run_writers`
starts them, releases them together once every one has opened the store and made its sessions
(``ready`` on stdout, then one line on stdin), and waits for them.
"""

from __future__ import annotations

import select
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext, suppress
from typing import Any

import prefork
from prefork import PIPE

IMPORTS = (
    "process_writers", "sessionstore", "sessionstore.dialects.sqlite",
    "sessionstore.dialects.postgresql", "sessionstore.search.service",
    "sessionstore.search.sqlite", "sessionstore.search.postgresql",
    "sessionstore.schema.migrate", "sessionstore.schema.new_store", "alembic.command",
    "alembic.config", "logging.config", "sessionstore.api.session_db",
    "sessionstore.schema.models", "sessionstore.schema.adoption", "sessionstore.schema.readable",
    "sessionstore.dialects.sqlite_image", "sessionstore.search.registry",
    "sessionstore.sql.ledger_tables", "sessionstore._migrations.search_ddl",
    "sessionstore._migrations.helpers", "sessionstore._migrations.chain_state",
    "sessionstore._migrations.hermes_v23_v31_orders", "sessionstore._migrations.hermes_v30_v31_ddl",
    "sessionstore._migrations.model_usage_ddl", "sessionstore._migrations.revision_0044_ddl",
    "sessionstore._migrations.revision_0045_ddl",
)  # fmt: skip
"""What a writer imports, at start and in its first calls (the first to find no schema runs
the chain: Alembic; the others wait for it and go through the same environment, the ORM
models and the chain's helper modules included): each forked writer finds them imported."""
MESSAGES_PER_PROCESS = 40


def tool_call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "t", "arguments": "{}"}}


def writer(url: str, worker_arg: str) -> None:
    """An agent of its own, writing to the shared session and its own."""
    from sessionstore.api.session_db import SessionDB

    worker = int(worker_arg)
    db = SessionDB(url=url)
    try:
        db.create_session("shared", "cli")  # every agent races to create it: idempotent
        own = f"proc-{worker}"
        db.create_session(own, "worktree", parent_session_id=None)
        print("ready", flush=True)
        sys.stdin.readline()  # every writer at once
        for index in range(MESSAGES_PER_PROCESS):
            db.append_message(
                "shared",
                "user",
                f"process {worker} message {index}",
                tool_calls=[tool_call(f"{worker}-{index}")] if index % 4 == 0 else None,
            )
            db.update_token_counts("shared", input_tokens=1, output_tokens=2)
            if index % 10 == 0:
                db.append_messages(
                    own,
                    [
                        {"role": "user", "content": f"{own} turn {index}"},
                        {"role": "assistant", "content": "done"},
                    ],
                )
    finally:
        db.close()


@contextmanager
def writer_server() -> Iterator[prefork.ForkServer | None]:
    """A fork server for :func:`run_writers` (None where forked programs cannot be adopted:
    the writers are new interpreters then). It opens no store and keeps nothing of one
    request for the next, so one serves a module's tests (a start-up is an interpreter
    importing all of :data:`IMPORTS`, ~0.5 CPU s)."""
    with prefork.ForkServer(IMPORTS) if prefork.available() else nullcontext() as server:
        yield server


def run_writers(
    url: str, count: int, timeout_s: float = 300.0, *, server: prefork.ForkServer | None = None
) -> list[int | None]:
    """``count`` writers on ``url``, released together; their exit codes (None: killed, hung).
    Forked by ``server`` when one is given (:func:`writer_server`), else by one of its own."""
    if server is None:
        with writer_server() as own:
            return _run_writers(url, count, timeout_s, own)
    return _run_writers(url, count, timeout_s, server)


def _run_writers(
    url: str, count: int, timeout_s: float, server: prefork.ForkServer | None
) -> list[int | None]:
    processes = [
        prefork.start(server, "process_writers:writer", [url, str(number)], stdin=PIPE, stdout=PIPE)
        for number in range(count)
    ]
    deadline = time.monotonic() + timeout_s
    try:
        for process in processes:  # the barrier: every one ready (or dead: EOF)
            assert process.stdout is not None
            select.select([process.stdout], [], [], max(deadline - time.monotonic(), 0))
            process.stdout.readline()
        for process in processes:
            assert process.stdin is not None
            with suppress(BrokenPipeError):  # one that died is reported by its exit code
                process.stdin.write("go\n")
                process.stdin.close()
        codes: list[int | None] = []
        for process in processes:
            try:
                codes.append(process.wait(max(deadline - time.monotonic(), 0.1)))
            except subprocess.TimeoutExpired:
                codes.append(None)
        return codes
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
            assert process.stdout is not None
            process.stdout.close()
