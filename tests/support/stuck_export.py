"""``sessionstore export`` stuck on its output: a consumer that reads late (a slow link).

Inside :func:`stuck_export` the export process has begun its read and is blocked writing into
a full pipe; :meth:`StuckExport.drain` reads the rest and returns the messages' texts it
exported. The store must hold more than a pipe's worth of export (64 KiB on Linux).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager


class StuckExport:
    def __init__(self, url: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "sessionstore", "--url", url, "export"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        assert self.process.stdout is not None
        self.head = self.process.stdout.readline()  # it has begun; its pipe fills next
        assert b'"format"' in self.head, self.head

    @property
    def stuck(self) -> bool:
        return self.process.poll() is None

    def drain(self) -> list[str]:
        """Every line it writes from here on, read; the texts of the messages it exported."""
        out, err = self.process.communicate(timeout=120)
        assert self.process.returncode == 0, err.decode()
        records = map(json.loads, out.decode().splitlines())
        return [record["message"]["content"] for record in records if "message" in record]


@contextmanager
def stuck_export(url: str, *, settle_s: float = 0.5) -> Iterator[StuckExport]:
    """An export of the store at ``url`` (a URL or a path), stuck on its full pipe for the
    block (``settle_s`` given to fill it); killed if the block leaves it running."""
    export = StuckExport(url)
    try:
        time.sleep(settle_s)
        assert export.stuck, "the export should be stuck on its full pipe"
        yield export
    finally:
        if export.process.poll() is None:
            export.process.kill()
            export.process.wait()
